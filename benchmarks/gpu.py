"""``make bench-gpu``: how fast small models train and decode on the GPU at hand (or on the CPU with
``--device cpu``), each figure from the real entry points on real Multi30k batches:

1. milliseconds per training update of the tiny recipe (``python train.py``, bf16-mixed on a GPU), from
   the run's own throughput log after its warm-up;
2. seconds per greedy decode of the validation set (the 1,014 sentences of Multi30k), with the trained
   model of 1;
3. aggregate updates per second with 1, 2, 4 and 8 tiny runs sharing the device (separate processes);
4. with ``--full``: the whole tiny recipe (all its updates, validations and the beam-5 test), wall time;
5. MFU of the d_model 512, 6+6-layer model (``benchmarks.mfu``; against 989 TFLOP/s on an H100);
6. with ``--means``: which means of speed help by how much, one run alone per row, each row adding one
   (:data:`MEANS`) to the rows before it, and greedy validation reading the device every step or every
   few steps.

    python -m benchmarks.gpu [--device cuda] [--steps 300] [--runs 1 2 4 8] [--full] [--means] [--json OUT.json]

Without the corpus (``NMT_DATA`` or the cache) it says so and stops; ``--data toy`` measures the toy task.
"""

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H100_BF16_PEAK = 989e12

# each row of --means adds its overrides to those of the rows above it
MEANS = [
    ("none", ["compile=false", "check_every=1", "optim.optimizer.fused=null", "data.batches_on_device=false"]),
    ("+ batches built on the device", ["data.batches_on_device=true"]),
    ("+ fused AdamW", ["optim.optimizer.fused=true"]),
    ("+ no read of the device in an update", ["check_every=50"]),
    ("+ torch.compile", ["compile=true"]),
    ("+ CUDA graphs", ["compile=reduce-overhead"]),
]


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return platform.processor() or platform.machine()


def train_command(run_dir: Path, device: str, data: str, steps: int, extra: list[str]) -> list[str]:
    trainer = ["trainer=gpu"] if device == "cuda" else ["trainer.accelerator=cpu"]
    return [
        sys.executable,
        str(ROOT / "train.py"),
        f"data={data}",
        *trainer,
        f"trainer.max_steps={steps}",
        "trainer.log_every_n_steps=20",
        "trainer.enable_progress_bar=false",
        "test_after_training=false",
        "validation.bleu_every_n_epochs=0",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=min",
        "early_stopping.monitor=val_loss",
        "early_stopping.mode=min",
        f"run_dir={run_dir}",
        *extra,
    ]


def updates_per_second(run_dir: Path) -> float:
    """The run's throughput after its warm-up: the median of its later logged windows (batches/s)."""
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
    rates = [float(r["train/device/batches_per_sec"]) for r in rows if r.get("train/device/batches_per_sec")]
    if not rates:
        raise RuntimeError(f"{run_dir}: no throughput logged; train more steps (--steps)")
    later = rates[len(rates) // 2 :] or rates
    return statistics.median(later)


def concurrent_runs(n: int, device: str, data: str, steps: int, extra: list[str], folder: Path) -> list[float]:
    """n tiny runs at once on the device: each one's updates per second."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs = [folder / f"runs{n}_{i}" for i in range(n)]
    if device == "cpu" and not any(o.startswith("threads=") for o in extra):
        # the cores shared out: more threads than cores, and the spinning threads of one run slow the
        # others by an order of magnitude
        extra = [*extra, f"threads={max(1, (os.cpu_count() or 1) // n)}"]
    processes = [
        subprocess.Popen(
            train_command(r, device, data, steps, [*extra, f"seed={i + 1}"]),
            stdout=subprocess.DEVNULL,
            stderr=open(folder / f"runs{n}_{i}.log", "w"),  # noqa: SIM115
            env=env,
            cwd=ROOT,
        )
        for i, r in enumerate(runs)
    ]
    for process, run in zip(processes, runs, strict=True):
        if process.wait() != 0:
            raise RuntimeError(f"a benchmark run failed: see {run}.log")
    return [updates_per_second(r) for r in runs]


def greedy_validation_seconds(run_dir: Path, device: str, every: int | None = None) -> tuple[float, int]:
    """Seconds to decode the validation set greedily; ``every``: steps between two reads of which
    sentences ended (default: the search's own choice for the device)."""
    from nmt.decoding import search as search_module

    chosen = search_module.read_every
    if every is not None:
        search_module.read_every = lambda _device: every
    try:
        return _time_validation(run_dir, device)
    finally:
        search_module.read_every = chosen


def _time_validation(run_dir: Path, device: str) -> tuple[float, int]:
    import torch

    from nmt.decoding.search import SearchConfig
    from nmt.decoding.translate import translate_lines
    from nmt.inference.loading import load_model

    loaded = load_model(run_dir / "checkpoints" / "last.ckpt", device=device)
    datamodule = loaded.task.build_datamodule(loaded.config["data"], loaded.config["cache_dir"], loaded.config["seed"])
    sources, _ = datamodule.text("val")
    search = SearchConfig(**{**loaded.config.get("validation", {}).get("search", {}), "strategy": "greedy"})
    translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, sources[:64], search)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, sources, search)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, len(sources)


def speed_means(device: str, data: str, steps: int, extra: list[str]) -> dict:
    """ms per update alone for each row of MEANS (cumulative), then greedy validation reading which
    sentences ended every step against every few steps."""
    rows, overrides = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, added in MEANS:
            previous = overrides
            overrides = [o for o in overrides if o.split("=")[0] not in {a.split("=")[0] for a in added}] + added
            folder = Path(tmp) / f"means{len(rows)}"
            folder.mkdir()
            try:
                rate = concurrent_runs(1, device, data, steps, [*extra, *overrides], folder)[0]
            except RuntimeError as err:  # one means failing on this device leaves the others measured
                rows[name] = {"overrides": list(overrides), "error": str(err)}
                print(f"{name:40s} failed: {err}", flush=True)
                overrides = previous  # the next row adds its means to the last that worked
                continue
            rows[name] = {"overrides": list(overrides), "ms_per_update": 1000.0 / rate}
            print(f"{name:40s} {1000.0 / rate:8.1f} ms per update", flush=True)
        model_run = Path(tmp) / "means0" / "runs1_0"
        for every in (1, 8):
            seconds, sentences = greedy_validation_seconds(model_run, device, every)
            rows[f"greedy validation, a read every {every} step(s)"] = {"seconds": seconds, "sentences": sentences}
            print(
                f"greedy validation, a read every {every} step(s): {seconds:.2f} s ({sentences} sentences)", flush=True
            )
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--data", default="multi30k", help="multi30k (the tiny recipe) or toy")
    parser.add_argument("--steps", type=int, default=300, help="updates per timed run")
    parser.add_argument("--runs", type=int, nargs="*", default=[1, 2, 4, 8], help="runs sharing the device")
    parser.add_argument("--full", action="store_true", help="also the whole tiny recipe, start to end")
    parser.add_argument("--mfu", action="store_true", help="also the MFU of the d_model 512 6+6 model")
    parser.add_argument("--means", action="store_true", help="also each means of speed alone, added one by one")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("extra", nargs="*", help="train.py overrides for every run (e.g. compile=true)")
    args = parser.parse_args(argv)
    results: dict = {
        "device": device_name(args.device),
        "data": args.data,
        "steps": args.steps,
        "overrides": args.extra,
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in sorted(set(args.runs)):
            rates = concurrent_runs(n, args.device, args.data, args.steps, args.extra, folder)
            results[f"runs_{n}"] = {"updates_per_s_each": rates, "updates_per_s_total": sum(rates)}
            print(f"{n} run(s): {sum(rates):.1f} updates/s in all ({', '.join(f'{r:.1f}' for r in rates)})", flush=True)
        alone = min(args.runs)  # 1 unless told otherwise: ms per update of a run with the device to itself
        results["ms_per_update"] = 1000.0 / results[f"runs_{alone}"]["updates_per_s_each"][0]
        seconds, sentences = greedy_validation_seconds(folder / f"runs{alone}_0", args.device)
        results["greedy_validation_s"], results["validation_sentences"] = seconds, sentences
        print(
            f"{results['ms_per_update']:.1f} ms per update; greedy validation of {sentences} sentences {seconds:.2f} s"
        )
    if args.means:
        results["means"] = speed_means(args.device, args.data, args.steps, args.extra)
    if args.full:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "full"
            trainer = ["trainer=gpu"] if args.device == "cuda" else ["trainer.accelerator=cpu"]
            command = [sys.executable, str(ROOT / "train.py"), *trainer, f"run_dir={run_dir}", *args.extra]
            started = time.perf_counter()
            subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            results["full_recipe_s"] = time.perf_counter() - started
            results["full_recipe_test_bleu"] = json.loads((run_dir / "results.json").read_text())["test"]["bleu"]
            minutes, bleu = results["full_recipe_s"] / 60, results["full_recipe_test_bleu"]
            print(f"whole tiny recipe: {minutes:.1f} min, test BLEU {bleu}")
    if args.mfu:
        command = [sys.executable, "-m", "benchmarks.mfu", "--device", args.device, "--d-model", "512", "--layers", "6"]
        command += ["--heads", "8", "--ffn", "2048", "--precision", "bf16", "--compile"]
        results["mfu_output"] = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True).stdout
        print(results["mfu_output"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
