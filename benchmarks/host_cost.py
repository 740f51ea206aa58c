"""``python -m benchmarks.host_cost [--device cpu|cuda] [--updates N] [train.py overrides]``: what a training
update costs the host beyond the model, loss and optimiser.

A model so small that each operator's arithmetic is negligible (toy task, d_model 8, one layer each side,
batches of at most 64 tokens) is trained twice on the same batches:

- by ``train.py``: Lightning's loop, the data path, the task's hooks, the guard, logging and callbacks;
- by a bare PyTorch loop: forward, loss, backward, optimiser and schedule steps, nothing else, on batches
  already on the device, at the run's precision, compile setting, gradient clipping and matmul precision
  (gradient accumulation is refused), timing the same updates as the run's throughput log does.

Both pay for every operator the host dispatches (on a GPU, each one a kernel launch), so the difference per
update is the framework's own host work. It bounds a small model's update on a GPU where CUDA graphs
remove the model's launches (``compile=reduce-overhead``), and it is what the simple profiler's table
(printed, steady state after a warm-up) breaks down by loop step and hook. On a CPU the bare loop is
run in the same thread count as ``train.py``.

Prints one JSON line: ms per update of each (medians over ``--repeats`` interleaved runs) and the median of
the paired differences, with the machine.
"""

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.options import BenchmarkFailed, check_device_and_json, last_lines, run_main
from nmt.utils.machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]
MICRO = [
    "data=toy",
    "data.max_tokens=64",
    "model.d_model=8",
    "model.num_heads=2",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.ffn_dim=8",
    "trainer.precision=32-true",
    "trainer.gradient_clip_val=null",
    "optim.optimizer.fused=true",
    "check_every=50",
    "validation.bleu_every_n_epochs=0",
    "checkpoint.monitor=val_loss",
    "checkpoint.mode=min",
    "val_after_training=false",
    "test_after_training=false",
    "trainer.max_epochs=1",  # one epoch of the toy task holds about 1,700 batches of 64 tokens
    "threads=1",
]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def framework_ms(
    overrides: list[str], updates: int, warmup: int, folder: Path, profile: bool, timeout: float | None = None
) -> tuple[float, tuple[int, int], str]:
    """ms per update of ``train.py`` over the updates after the first throughput row at or after update
    ``warmup`` up to the last row (the throughput monitor's clock in metrics.csv), that window (updates
    after the first, up to the last), and with ``profile`` the simple profiler's table of the updates after
    ``warmup`` (its timers cost time too, so the ms per update of that run is not the one to quote)."""
    command = [sys.executable, "-m", "benchmarks.profiled_train", "--after", str(warmup), *overrides]
    command += [f"trainer.max_steps={updates}", "trainer.log_every_n_steps=50", f"run_dir={folder}"]
    command += ["+trainer.profiler=simple"] if profile else []
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise BenchmarkFailed(f"{' '.join(command)} ran past {timeout:.0f} s") from err
    if done.returncode != 0:
        raise BenchmarkFailed(f"the profiled train.py failed: {last_lines(done.stderr)}")
    rows = [r for r in csv.DictReader((folder / "logs" / "metrics.csv").open()) if r.get("train/time")]
    timed = [(int(float(r["train/batches"])), float(r["train/time"])) for r in rows]
    if not timed or timed[-1][0] < updates - 50:  # the last row: within one logging interval of the end
        raise BenchmarkFailed(f"train.py trained fewer than {updates} updates: an epoch is shorter; lower --updates")
    timed = [(b, t) for b, t in timed if b >= warmup]
    if len(timed) < 2:
        raise BenchmarkFailed(f"fewer than two timed updates after {warmup}: raise --updates")
    (b0, t0), (b1, t1) = timed[0], timed[-1]
    table = "\n".join(line for line in (done.stdout + done.stderr).splitlines() if line.startswith("|"))
    return (t1 - t0) / (b1 - b0) * 1000, (b0, b1), table


def training_data(cfg):
    """The run's task, its datamodule set up for training, and the source and target tokenizers."""
    from nmt.data.build import build_datamodule
    from nmt.tasks import build_task

    task = build_task(cfg.task)
    datamodule = build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    datamodule.prepare_data()
    src_tokenizer, tgt_tokenizer = datamodule.build_tokenizers()
    datamodule.setup("fit")
    return task, datamodule, src_tokenizer, tgt_tokenizer


def bare_ms(overrides: list[str], window: tuple[int, int], device: str) -> float:
    """ms per update of the same model, loss, optimiser and schedule, at the same precision, on the same
    batches, in a plain loop: the updates before ``window`` warm up, those in it are timed."""
    from nmt.data.tokenizer import PAD_ID
    from nmt.training.compile import compile_model
    from nmt.training.config_device import resolve_precision
    from nmt.utils.instantiate import instantiate

    cfg = compose([*overrides, "data.batches_on_device=false"])
    if (cfg.trainer.get("accumulate_grad_batches") or 1) != 1:
        raise ValueError("trainer.accumulate_grad_batches: the bare loop makes one batch an update")
    precision = resolve_precision(cfg.trainer.precision, "gpu" if device == "cuda" else "cpu")
    if precision not in ("32-true", "bf16-mixed"):
        raise ValueError(f"trainer.precision={precision}: the bare loop runs 32-true or bf16-mixed")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")
    torch.manual_seed(cfg.seed)
    task, datamodule, src_tokenizer, tgt_tokenizer = training_data(cfg)
    start, end = window
    batches = []
    for batch in datamodule.train_dataloader():
        batches.append({k: batch[k].to(device) for k in ("src", "tgt_in", "tgt_out")})
        if len(batches) == end:
            break
    if len(batches) < end:
        raise BenchmarkFailed(f"an epoch has {len(batches)} batches, fewer than the {end} to time")
    model = task.build_model(cfg.model, src_tokenizer, tgt_tokenizer).to(device).train()
    compile_model(model, cfg.get("compile"))
    loss = instantiate(cfg.smoothing, pad_id=PAD_ID).to(device)
    optimizer = instantiate(cfg.optim.optimizer)(model.parameters())
    scheduler = instantiate(cfg.optim.scheduler)(optimizer, total_steps=end) if cfg.optim.scheduler else None
    clip = cfg.trainer.get("gradient_clip_val")
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")

    def update(batch: dict) -> None:
        with autocast:
            value, _ = task.training_loss(model, loss, batch)
        value.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    for batch in batches[:start]:
        update(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for batch in batches[start:end]:
        update(batch)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - began) / (end - start) * 1000


def measure(
    device: str = "cpu",
    updates: int = 1500,
    warmup: int = 200,
    repeats: int = 3,
    table: bool = True,
    extra: list[str] | None = None,
    timeout: float | None = None,
) -> dict:
    """The figures :func:`main` prints (``timeout``: seconds for each ``train.py`` run)."""
    overrides = [*MICRO, *(["trainer=gpu", "trainer.precision=32-true"] if device == "cuda" else []), *(extra or [])]
    frameworks, bares, windows, profiled_updates = [], [], [], None
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(repeats):  # interleaved, so that a noisy spell of the machine hits both
            run = Path(folder) / f"timed{repeat}"
            ms, window, _ = framework_ms(overrides, updates, warmup, run, False, timeout)
            frameworks.append(ms)
            windows.append(window)
            bares.append(bare_ms(overrides, window, device))  # the same updates timed
        if table:
            _, _, text = framework_ms(overrides, updates, warmup, Path(folder) / "profiled", True, timeout)
            print(text)
            batches = next((r for r in text.splitlines() if "run_training_batch" in r), "")
            profiled_updates = int(batches.split("|")[3]) if batches else 0
    framework, bare = statistics.median(frameworks), statistics.median(bares)
    differences = [f - b for f, b in zip(frameworks, bares, strict=True)]  # paired: each repeat's own
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "updates_timed": [end - start for start, end in windows],  # after update start, up to update end
        "repeats": repeats,
        "profiled_updates": profiled_updates,  # the profiler's table covers these (after the warm-up)
        "train_py_ms_each": [round(v, 3) for v in frameworks],
        "bare_loop_ms_each": [round(v, 3) for v in bares],
        "train_py_ms_per_update": round(framework, 3),
        "bare_loop_ms_per_update": round(bare, 3),
        "framework_host_ms_each": [round(v, 3) for v in differences],
        "framework_host_ms_per_update": round(statistics.median(differences), 3),  # the median of the pairs
        "overrides": overrides,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--updates", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each (the median is reported)")
    parser.add_argument("--no-table", action="store_true", help="skip the profiled run and its table")
    parser.add_argument("overrides", nargs="*", help="train.py overrides after the micro model's own")
    args = parser.parse_args(argv)
    check_device_and_json(parser, args.device, None)
    # found after the runs trained, before: two logged points (every 50 updates) after the warm-up
    if args.warmup < 0 or args.repeats < 1:
        parser.error(f"--warmup {args.warmup} --repeats {args.repeats}: a warm-up of 0 or more, 1 repeat or more")
    if args.updates < args.warmup + 100:
        parser.error(
            f"--updates {args.updates}: at least --warmup + 100 ({args.warmup + 100}), two logged times after it"
        )
    result = measure(args.device, args.updates, args.warmup, args.repeats, not args.no_table, args.overrides)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_main(main)
