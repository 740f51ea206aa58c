"""``make bench-gpu``: how fast small models train and decode on the GPU at hand (or on the CPU with
``--device cpu``), each figure from the real entry points on real Multi30k batches:

1. milliseconds per training update of the tiny recipe (``python train.py``, bf16-mixed on a GPU), from
   the run's own throughput log after its warm-up;
2. seconds per greedy decode of the validation set (the 1,014 sentences of Multi30k), with the trained
   model of 1;
3. aggregate updates per second with 1, 2, 4 and 8 tiny runs sharing the device (separate processes);
4. with ``--full``: the whole tiny recipe (all its updates, validations and the beam-5 test), wall time;
5. MFU of the d_model 512, 6+6-layer model (``benchmarks.mfu``; against 989 TFLOP/s on an H100);
   with ``--all``, also tiny models stacked in one process (``benchmarks.stacked``);
6. with ``--means``: which means of speed help by how much, one run alone per row, each row adding one
   (:data:`~benchmarks.gpu_measures.MEANS`) to the rows before it, and greedy validation reading the
   device every step or every few steps;
7. with ``--all``: all of these, most important first, within ``--budget`` seconds, each written to the
   ``--json`` file as soon as measured (benchmarks/gpu_session.py); ``--table`` prints such files as
   BENCHMARKS.md's rows.

    python -m benchmarks.gpu [--device cuda] [--steps 300] [--runs 1 2 4 8] [--full] [--means] [--json OUT.json]
    python -m benchmarks.gpu --all --budget 450 [--model TRAINED.ckpt] [--only NAME ...] --json OUT.json

Without the corpus (``NMT_DATA`` or the cache) it says so and stops; ``--data toy`` measures the toy task.
"""

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu_measures import (
    concurrent_runs,
    device_name,
    greedy_validation_seconds,
    mfu_output,
    run_validation_seconds,
    speed_means,
    whole_recipe,
)
from benchmarks.gpu_session import SESSION, Session, table, write_results
from benchmarks.options import check_device_and_json, run_main

ALL_ONLY = ("budget", "only", "full_with", "sharing_with", "full_unprofiled")
LOGGED_EVERY = 20  # updates between the throughput logs a timed run is measured by (train_command)


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Everything that can be known wrong before a run starts, said at once in one line: on a lent GPU a
    mistake found by the first, or the last, measurement costs minutes of a short budget."""
    from nmt.cli import unknown_key_message, unknown_option_message

    if not args.all:
        given = [f"--{k.replace('_', '-')}" for k in ALL_ONLY if getattr(args, k) not in (None, [], False)]
        if args.budget == parser.get_default("budget"):
            given = [g for g in given if g != "--budget"]
        if given:
            parser.error(f"{', '.join(given)}: read by --all alone; add --all, or leave them out")
    if args.only == []:
        parser.error(f"--only: name the measurements to make, of {', '.join(SESSION)}")
    if not args.budget > 0:
        parser.error(f"--budget {args.budget:g}: seconds for the measurements, more than 0")
    # a run's speed is logged every LOGGED_EVERY updates; on a GPU a rate spans three logged updates (the
    # throughput monitor times those alone), so a shorter run there ended, after training, with no rate
    least = LOGGED_EVERY * (3 if args.device == "cuda" else 1)
    if args.steps < least:
        parser.error(
            f"--steps {args.steps}: at least {least} (a run's speed is logged every {LOGGED_EVERY} updates"
            + (", and on a GPU a rate spans three logs)" if args.device == "cuda" else ")")
        )
    if args.device != "cuda" and (args.mfu or (args.all and args.only and "mfu" in args.only)):
        parser.error(
            "mfu: the d_model 512 model's share of the H100's 989 TFLOP/s is a GPU's figure; a CPU's MFU against "
            "its own measured peak: python -m benchmarks.mfu --device cpu"
        )
    if not args.runs or any(n < 1 for n in args.runs):
        parser.error(f"--runs {' '.join(map(str, args.runs))}: numbers of runs sharing the device, each at least 1")
    if args.all and (not args.only or "sharing" in args.only) and not any(n > 1 for n in args.runs):
        parser.error(f"--runs {' '.join(map(str, args.runs))}: sharing measures 2 runs or more; give them")
    if args.model and not Path(args.model).is_file():
        parser.error(f"--model {args.model}: no such checkpoint")
    check_device_and_json(parser, args.device, args.json)
    overrides = [f"data={args.data}", *args.extra, *args.full_with, *args.sharing_with]
    plain = [o for o in overrides if "=" not in o and not o.startswith("~")]
    if plain:
        parser.error(f"{plain[0]}: not a train.py override key=value")
    said = unknown_option_message(overrides) or unknown_key_message(overrides, "train")
    if said:
        parser.error(said.removeprefix("error: "))
    for option, given in (("--full-with", args.full_with), ("--sharing-with", args.sharing_with)):
        if given:  # every key=value after it is its own: say so before anything runs
            print(f"{option}: {' '.join(given)} (that measurement alone); every run: {' '.join(args.extra) or '-'}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--data", default="multi30k", help="multi30k (the tiny recipe) or toy")
    parser.add_argument("--steps", type=int, default=300, help="updates per timed run")
    parser.add_argument("--runs", type=int, nargs="*", default=[1, 2, 4, 8], help="runs sharing the device")
    parser.add_argument("--full", action="store_true", help="also the whole tiny recipe, start to end")
    parser.add_argument("--mfu", action="store_true", help="also the MFU of the d_model 512 6+6 model")
    parser.add_argument("--means", action="store_true", help="also each means of speed alone, added one by one")
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--all", action="store_true", help="every figure, most important first, within --budget")
    parser.add_argument("--budget", type=float, default=480, help="--all: seconds for all its measurements")
    parser.add_argument("--only", nargs="*", choices=SESSION, help="--all: these measurements only")
    parser.add_argument("--model", help="also time greedy validation with this trained checkpoint")
    parser.add_argument(
        "--full-with",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="--all: train.py overrides for the whole recipe alone, after the means (e.g. compile=false: its "
        "updates as graphs of uncompiled kernels, without the compile that a single run pays); give it last",
    )
    parser.add_argument(
        "--full-unprofiled",
        action="store_true",
        help="--all: the whole recipe without Lightning's profiler and the op-level trace (its wall time as a "
        "user's run pays it; no table of where it went)",
    )
    parser.add_argument(
        "--sharing-with",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="--all: train.py overrides for the runs sharing the GPU, after the means (e.g. compile=false: "
        "n runs would each pay their own compile at once); give it last",
    )
    parser.add_argument("--table", nargs="+", metavar="RESULTS", help="print results files of --all as table rows")
    parser.add_argument("extra", nargs="*", help="train.py overrides for every run (e.g. compile=true)")
    args = parser.parse_args(argv)
    if args.table:
        for path in args.table:
            try:
                results = json.loads(Path(path).read_text())
            except (OSError, ValueError) as err:
                parser.error(f"--table {path}: not a results file of --all ({err})")
            if not isinstance(results, dict) or "device" not in results or "torch" not in results:
                # a plain run's --json, or another file: an empty table headed "None" read as measured nothing
                parser.error(f"--table {path}: not a results file of --all (it names no device and torch)")
            print(table(results) + "\n")
        return {}
    check_arguments(parser, args)
    # a timeout or a lease's end sends SIGTERM: raised as SystemExit, the runs' process groups are ended and the
    # temporary folders removed (the finally blocks), not left on the device for the next command
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    results: dict = {
        "device": device_name(args.device),
        "data": args.data,
        "steps": args.steps,
        "overrides": args.extra,
    }
    if args.all:
        import torch

        results["torch"] = torch.__version__
        results["cpu_cores"] = os.cpu_count()
        with tempfile.TemporaryDirectory() as tmp:
            return Session(args, results, Path(tmp)).run()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in sorted(set(args.runs)):
            rates = concurrent_runs(n, args.device, args.data, args.steps, args.extra, folder)
            results[f"runs_{n}"] = {"updates_per_s_each": rates, "updates_per_s_total": sum(rates)}
            print(f"{n} run(s): {sum(rates):.1f} updates/s in all ({', '.join(f'{r:.1f}' for r in rates)})", flush=True)
        alone = min(args.runs)  # the validations below use the model of this run
        if alone == 1:  # ms per update is a run's with the device to itself, never one sharing it
            results["ms_per_update"] = 1000.0 / results["runs_1"]["updates_per_s_each"][0]
            print(f"{results['ms_per_update']:.1f} ms per update")
        else:
            print("no ms per update: no run had the device to itself (--runs without 1)")
        seconds, sentences = greedy_validation_seconds(folder / f"runs{alone}_0", args.device)
        results["greedy_validation_s"], results["validation_sentences"] = seconds, sentences
        print(f"greedy validation of {sentences} sentences {seconds:.2f} s")
        try:  # the figures above are kept whatever happens here
            in_run, _, precision = run_validation_seconds(folder / f"runs{alone}_0", args.device)
            results["run_validation_s"] = in_run
            print(f"validation as a run pays it (Lightning's loop, {precision}: loss, search, scores): {in_run:.2f} s")
        except Exception as err:  # noqa: BLE001
            results["run_validation_s"] = {"error": f"{type(err).__name__}: {err}"}
            print(f"validation as a run pays it: failed ({type(err).__name__}: {err})")
        if args.model:
            results["greedy_validation_given_model_s"], _ = greedy_validation_seconds(Path(args.model), args.device)
            print(f"greedy validation with {args.model}: {results['greedy_validation_given_model_s']:.2f} s")
    if args.means:
        results["means"] = speed_means(args.device, args.data, args.steps, args.extra)
    if args.full:
        with tempfile.TemporaryDirectory() as tmp:
            full = whole_recipe(args.device, args.data, args.extra, Path(tmp) / "full")
        results["full_recipe_s"], results["full_recipe_test_bleu"] = full["wall_s"], full["test_bleu"]
        print(f"whole tiny recipe: {full['wall_s'] / 60:.1f} min, test BLEU {full['test_bleu']}")
    if args.mfu:
        results["mfu_output"] = mfu_output(args.device)
        print(results["mfu_output"])
    write_results(args.json, results)
    return results


if __name__ == "__main__":
    run_main(main)
