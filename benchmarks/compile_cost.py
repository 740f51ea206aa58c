"""``python -m benchmarks.compile_cost [--device cpu|cuda] [--settings true,layers] [train.py overrides]``: what
a cold compile costs a run, for each ``compile`` setting.

Each setting runs in a fresh process with an empty Inductor cache (its on-disk caches off), so that nothing
compiled by an earlier run is found: the first run of a sweep on a machine pays this, a later one finds the
compiled code on disk. The run's model (the recipe given by the overrides; the tiny recipe by default) is
compiled by ``train.py``'s own :func:`~nmt.training.compile.compile_model` and trained with AdamW on the
first real batches of its corpus at the run's precision, with ``nmt``'s loss:

- ``first_update_s``: the first update, the compile included;
- ``new_shapes_s``: the next updates, each on a batch of a shape not seen before (one dynamic compile
  serves them; a recompile would show here);
- ``ms_per_update``: later updates, compiled code only.

Prints one JSON line per setting, with the machine.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from benchmarks.gpu_measures import ROOT, device_name, run_env
from benchmarks.host_cost import compose, training_data
from benchmarks.options import BenchmarkFailed, check_device_and_json, last_lines, run_main


def one(setting: str, device: str, overrides: list[str], shapes: int, timed: int) -> dict:
    from nmt.data.tokenizer import PAD_ID
    from nmt.training.compile import compile_model
    from nmt.training.config_device import resolve_precision
    from nmt.utils.instantiate import instantiate

    cfg = compose([*overrides, "data.batches_on_device=false"])
    precision = resolve_precision(cfg.trainer.precision, "gpu" if device == "cuda" else "cpu")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    task, datamodule, src_tokenizer, tgt_tokenizer = training_data(cfg)
    first, seen = [], set()  # the first batch of each of the first `shapes` shapes
    for batch in datamodule.train_dataloader():
        shape = (tuple(batch["src"].shape), tuple(batch["tgt_in"].shape))
        if shape not in seen:
            seen.add(shape)
            first.append({k: batch[k].to(device) for k in ("src", "tgt_in", "tgt_out")})
        if len(first) == shapes:
            break
    model = task.build_model(cfg.model, src_tokenizer, tgt_tokenizer).to(device).train()
    loss_fn = instantiate(cfg.smoothing, pad_id=PAD_ID).to(device)
    compile_model(model, None if setting == "false" else True if setting == "true" else setting, loss_fn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16-mixed")

    def update(batch) -> None:
        with autocast:
            logits = model(batch["src"], batch["tgt_in"])
        loss_fn(logits, batch["tgt_out"])[0].backward()  # the loss per target token
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    update(first[0])
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for batch in first[1:]:
        update(batch)
    new_s = time.perf_counter() - start
    update(first[0])  # the timed updates repeat the shapes seen: compiled code only
    start = time.perf_counter()
    for i in range(timed):
        update(first[i % len(first)])
    ms = (time.perf_counter() - start) / timed * 1000
    return {
        "compile": setting,
        "first_update_s": round(first_s, 1),
        "new_shapes": len(first) - 1,
        "new_shapes_s": round(new_s, 1),
        "ms_per_update": round(ms, 1),
        "device": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "overrides": overrides,
        "compile_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),  # the empty one its parent made for it
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description="What a cold compile costs a run, for each compile setting.")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--settings", default="true,layers", help="compile settings, comma-separated: false, true, layers"
    )
    parser.add_argument("--shapes", type=int, default=3, help="batches of distinct shapes, the first included")
    parser.add_argument("--timed", type=int, default=6, help="updates timed after the compile")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's own setting
    parser.add_argument("overrides", nargs="*", help="train.py overrides (the recipe; data=multi30k by default)")
    args = parser.parse_args(argv)
    overrides = args.overrides or ["data=multi30k", "trainer.precision=bf16-mixed"]
    for option in ("shapes", "timed"):  # before the compile: --timed 0 divided by zero after it, --shapes 0 read all
        if getattr(args, option) < 1:
            parser.error(f"--{option} {getattr(args, option)}: at least 1")
    check_device_and_json(parser, args.device, None)
    if args.one:
        result = one(args.one, args.device, overrides, args.shapes, args.timed)
        print(json.dumps(result), flush=True)
        return [result]
    settings = args.settings.split(",")
    unknown = sorted(set(settings) - {"false", "true", "layers"})
    if unknown:
        parser.error(f"--settings: {', '.join(unknown)} unknown; choose among false, true, layers")
    results = []
    for setting in settings:
        with tempfile.TemporaryDirectory() as cache:
            env = {
                **run_env(),
                "TORCHINDUCTOR_CACHE_DIR": cache,
                "TRITON_CACHE_DIR": os.path.join(cache, "triton"),  # else a caller's may hold compiled kernels
                "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
            }
            command = [sys.executable, "-m", "benchmarks.compile_cost", "--one", setting, "--device", args.device]
            command += ["--shapes", str(args.shapes), "--timed", str(args.timed), *overrides]
            done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BenchmarkFailed(f"compile={setting} failed: {last_lines(done.stderr)}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(results[-1]), flush=True)
    return results


if __name__ == "__main__":
    run_main(main)
