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


def concurrent_runs(
    n: int, device: str, data: str, steps: int, extra: list[str], folder: Path, timeout: float | None = None
) -> list[float]:
    """n tiny runs at once on the device: each one's updates per second (``timeout``: seconds for all of
    them, after which they are killed and this raises)."""
    folder.mkdir(parents=True, exist_ok=True)
    # the project first, then whatever the caller's path holds (packages installed beside the interpreter's)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
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
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for process, run in zip(processes, runs, strict=True):
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            if process.wait(timeout=left) != 0:
                raise RuntimeError(f"a benchmark run failed: {_log_tail(run)}")
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"{n} run(s) not done after {timeout:.0f} s") from err
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [updates_per_second(r) for r in runs]


def _log_tail(run: Path, lines: int = 15) -> str:
    """The end of a failed run's log, so that a results file read far from the machine says why."""
    log = run.parent / f"{run.name}.log"
    text = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return f"see {log}: " + " | ".join(text[-lines:])


def greedy_validation_seconds(model: Path, device: str, every: int | None = None) -> tuple[float, int]:
    """Seconds to decode the validation set greedily with ``model`` (a run folder or a checkpoint);
    ``every``: steps between two reads of which sentences ended (default: the search's own choice for
    the device)."""
    from nmt.decoding import search as search_module

    chosen = search_module.read_every
    if every is not None:
        search_module.read_every = lambda _device: every
    try:
        return _time_validation(model if model.suffix == ".ckpt" else model / "checkpoints" / "last.ckpt", device)
    finally:
        search_module.read_every = chosen


def _time_validation(checkpoint: Path, device: str) -> tuple[float, int]:
    import torch

    from nmt.decoding.search import SearchConfig
    from nmt.decoding.translate import translate_lines
    from nmt.inference.loading import load_model

    loaded = load_model(checkpoint, device=device)
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


def with_means(overrides: list[str], added: list[str]) -> list[str]:
    """``overrides`` with those of ``added`` put in (a key given again takes the later value)."""
    keys = {a.split("=")[0] for a in added}
    return [o for o in overrides if o.split("=")[0] not in keys] + added


def means_overrides(rows: int | None = None) -> list[str]:
    """The overrides of the first ``rows`` rows of MEANS together (all of them by default)."""
    overrides: list[str] = []
    for _, added in MEANS[:rows]:
        overrides = with_means(overrides, added)
    return overrides


def speed_means(device: str, data: str, steps: int, extra: list[str]) -> dict:
    """ms per update alone for each row of MEANS (cumulative), then greedy validation reading which
    sentences ended every step against every few steps."""
    rows, overrides = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, added in MEANS:
            previous = overrides
            overrides = with_means(overrides, added)
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


# --all: the measurements in the order they matter, each with the seconds it needs at least (an H100,
# compiled kernels cached by the runs before it); one that no longer fits the budget is skipped, with why
SESSION = ["none", "every", "validation", "sharing", "mfu", "means", "full"]
SESSION_NEEDS = {"none": 40, "every": 90, "validation": 20, "sharing": 60, "mfu": 60, "means": 60, "full": 150}


class Session:
    """``--all``: every figure of the benchmark within ``args.budget`` seconds, most important first, the
    results written after each (a session cut short keeps what it measured). One method per measurement:

    none        ms per update alone with none of the means (the figure before them)
    every       ms per update alone with every means (after them); while that fails, without the last
    validation  greedy validation of the run of ``every`` (and of ``--model``), reading every 1 and 8 steps
    sharing     aggregate updates per second of 2, 4 and 8 runs (``--runs``) with the means of ``every``
    mfu         the d_model 512 model's MFU
    means       the rows of MEANS between none and every, one by one
    full        the whole tiny recipe with the means of ``every`` (all, if not measured), capped at the budget left
    """

    def __init__(self, args: argparse.Namespace, results: dict, folder: Path):
        self.args, self.results, self.folder = args, results, folder
        self.started = time.monotonic()
        self.best: list[str] = []  # the overrides of the most means that ran

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.started)

    def alone(self, overrides: list[str], name: str) -> float:
        a = self.args
        return (
            1000.0
            / concurrent_runs(1, a.device, a.data, a.steps, [*a.extra, *overrides], self.folder / name, self.left())[0]
        )

    def none(self) -> dict:
        return {"overrides": means_overrides(1), "ms_per_update": self.alone(means_overrides(1), "none")}

    def every(self) -> dict:
        for rows in range(len(MEANS), 1, -1):  # the last means dropped while one fails
            if rows < len(MEANS) and self.left() < SESSION_NEEDS["every"]:
                break
            try:
                ms = self.alone(means_overrides(rows), f"every{rows}")
            except RuntimeError as err:
                self.results[f"every ({MEANS[rows - 1][0]})"] = {"error": str(err)}
                continue
            self.best = means_overrides(rows)
            return {"overrides": self.best, "ms_per_update": ms, "run": f"every{rows}"}
        raise RuntimeError("no row of the means ran (each one's error is beside this)")

    def validation(self) -> dict:
        models = {}
        if "run" in self.results.get("every", {}):
            models[f"trained {self.args.steps} updates"] = self.folder / self.results["every"]["run"] / "runs1_0"
        if self.args.model:
            models["the given model"] = Path(self.args.model)
        if not models:
            raise RuntimeError("no model: measure 'every' first, or give --model")
        timings = {}
        for label, model in models.items():
            for every in (1, 8):
                seconds, sentences = greedy_validation_seconds(model, self.args.device, every)
                timings[f"{label}, a read every {every}"] = {"seconds": seconds, "sentences": sentences}
        return timings

    def sharing(self) -> dict:
        a, overrides = self.args, self.best or means_overrides(1)
        shared = self.results["sharing"] = {"overrides": overrides}
        for n in sorted({n for n in a.runs if n > 1}):
            folder = self.folder / f"sharing{n}"
            rates = concurrent_runs(n, a.device, a.data, a.steps, [*a.extra, *overrides], folder, self.left())
            shared[f"runs_{n}"] = {"updates_per_s_each": rates, "updates_per_s_total": sum(rates)}
            self.write()
        return shared

    def mfu(self) -> dict:
        return {"output": mfu_output(self.args.device, self.left())}

    def means(self) -> dict:
        rows_measured = self.results["means"] = {}
        for rows in range(2, len(MEANS)):
            label = MEANS[rows - 1][0]
            try:
                rows_measured[label] = {"ms_per_update": self.alone(means_overrides(rows), f"means{rows}")}
            except RuntimeError as err:
                rows_measured[label] = {"error": str(err)}
            self.write()
        return rows_measured

    def full(self) -> dict:
        overrides = self.best or means_overrides()  # every means unless 'every' found one failing
        a = self.args
        run = whole_recipe(a.device, a.data, [*a.extra, *overrides], self.folder / "full", self.left() - 30)
        return {**run, "overrides": overrides}

    def write(self) -> None:
        _write(self.args.json, self.results)

    def run(self) -> dict:
        chosen = [name for name in SESSION if not self.args.only or name in self.args.only]
        self.results["session"] = {"budget_s": self.args.budget, "order": chosen}
        for name in chosen:
            if self.left() < SESSION_NEEDS[name]:
                self.results[name] = {
                    "skipped": f"{self.left():.0f} s of the budget left, at least {SESSION_NEEDS[name]} needed"
                }
            else:
                began = time.monotonic()
                try:
                    self.results[name] = getattr(self, name)()
                except Exception as err:  # noqa: BLE001 - one measurement failing leaves the others to run
                    self.results[name] = {**self.results.get(name, {}), "error": f"{type(err).__name__}: {err}"}
                self.results[name]["wall_s"] = round(time.monotonic() - began, 1)
            print(f"{name}: {json.dumps(self.results[name])}", flush=True)
            self.write()
        return self.results


def table(results: dict) -> str:
    """A results file of ``--all`` as the Markdown table of BENCHMARKS.md: one row per figure, a failed or
    skipped measurement with its reason."""
    rows = [f"| measurement ({results.get('device')}, torch {results.get('torch')}) | result |", "|---|---|"]

    def row(what: str, value: str) -> None:
        cells = (" ".join(cell.split()).replace("|", "\\|") for cell in (what, value))  # a cell is one line
        rows.append("| {} | {} |".format(*cells))

    def reason(entry: dict) -> str | None:
        return entry.get("error") or (f"skipped: {entry['skipped']}" if "skipped" in entry else None)

    for name in results.get("session", {}).get("order", []):
        entry = results.get(name, {})
        if name in ("none", "every"):
            for key, failed in results.items():
                if key.startswith(f"{name} ("):
                    row(f"update alone, {key[len(name) + 2 : -1]}", f"failed: {failed['error']}")
            what = "update alone, " + ("none of the means" if name == "none" else "every means that ran")
            if "ms_per_update" in entry:
                row(f"{what} (`{' '.join(entry['overrides'])}`)", f"{entry['ms_per_update']:.1f} ms")
            else:
                row(what, str(reason(entry)))
        elif name == "validation":
            timings = {k: v for k, v in entry.items() if isinstance(v, dict)}
            for label, t in timings.items():
                row(f"greedy validation, {label}", f"{t['seconds']:.2f} s ({t['sentences']} sentences)")
            if not timings:
                row("greedy validation", str(reason(entry)))
        elif name == "sharing":
            runs = {k: v for k, v in entry.items() if k.startswith("runs_")}
            for key, r in runs.items():
                each = ", ".join(f"{x:.1f}" for x in r["updates_per_s_each"])
                row(f"{key[5:]} runs sharing the device", f"{r['updates_per_s_total']:.1f} updates/s in all ({each})")
            if reason(entry) or not runs:
                row("runs sharing the device", str(reason(entry)))
        elif name == "mfu":
            output = entry.get("output", "")
            mfu = [line for line in output.splitlines() if "%" in line]
            row("MFU, d_model 512 6+6, bf16, compiled", mfu[-1] if mfu else str(reason(entry)))
        elif name == "means":
            for label, m in entry.items():
                if isinstance(m, dict):
                    row(
                        f"update alone, means up to '{label}'",
                        f"{m['ms_per_update']:.1f} ms" if "ms_per_update" in m else f"failed: {m['error']}",
                    )
            if reason(entry):
                row("the means one by one", str(reason(entry)))
        elif name == "full":
            if "wall_s" in entry and "updates" in entry:
                cut = ", cut short by the budget" if entry.get("cut_short_by_cap") else ""
                row(
                    f"whole recipe (`{' '.join(entry['overrides'])}`)",
                    f"{entry['wall_s'] / 60:.1f} min, {entry['updates']} updates, best validation BLEU "
                    f"{entry['best_val_bleu']}, test BLEU {entry['test_bleu']}{cut}",
                )
            else:
                row("whole recipe", str(reason(entry)))
    return "\n".join(rows)


def _write(path: str | None, results: dict) -> None:
    if path:  # atomically, so that a run killed while writing leaves the last complete results
        target = Path(path)
        partial = target.with_suffix(target.suffix + ".partial")
        partial.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(partial, target)


def mfu_output(device: str, timeout: float | None = None) -> str:
    """benchmarks.mfu on the d_model 512, 6+6-layer model, bf16, compiled with its loss: its printed table.
    On a GPU with the batch of BENCHMARKS.md's best row (1,024 sentences of 64 tokens, vocabulary 10,000)."""
    command = [sys.executable, "-m", "benchmarks.mfu", "--device", device, "--d-model", "512", "--layers", "6"]
    command += ["--heads", "8", "--ffn", "2048", "--precision", "bf16", "--compile-loss", "--fused-optim"]
    if device == "cuda":
        command += ["--batch", "1024", "--src-len", "64", "--tgt-len", "64", "--vocab", "10000", "--steps", "20"]
    return subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True, timeout=timeout).stdout


def whole_recipe(device: str, data: str, extra: list[str], run_dir: Path, cap_s: float | None = None) -> dict:
    """The default recipe of ``data`` (on multi30k the tiny recipe) start to end (its updates, validations
    and beam-5 test), timed; ``cap_s``: a cap on its training time (the result then says it was cut short)."""
    trainer = ["trainer=gpu"] if device == "cuda" else ["trainer.accelerator=cpu"]
    command = [sys.executable, str(ROOT / "train.py"), f"data={data}", *trainer, f"run_dir={run_dir}", *extra]
    if cap_s is not None:
        seconds = max(1, int(cap_s))
        command.append(f"trainer.max_time=00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}")
    started = time.perf_counter()
    # the test decode and the checkpoint mean come after the cap: time for them, but not for ever
    timeout = None if cap_s is None else cap_s + 300
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, timeout=timeout)
    wall = time.perf_counter() - started
    done = json.loads((run_dir / "results.json").read_text())
    return {
        "wall_s": wall,
        "updates": done.get("steps"),
        "epochs": done.get("epochs"),
        "best_val_bleu": done.get("best_val_bleu"),
        "test_bleu": done.get("test", {}).get("bleu"),
        "finished": done.get("finished"),
        "cut_short_by_cap": cap_s is not None and wall >= cap_s,
    }


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
    parser.add_argument("--all", action="store_true", help="every figure, most important first, within --budget")
    parser.add_argument("--budget", type=float, default=480, help="--all: seconds for all its measurements")
    parser.add_argument("--only", nargs="*", choices=SESSION, help="--all: these measurements only")
    parser.add_argument("--model", help="also time greedy validation with this trained checkpoint")
    parser.add_argument("--table", metavar="RESULTS", help="print a results file of --all as a Markdown table")
    parser.add_argument("extra", nargs="*", help="train.py overrides for every run (e.g. compile=true)")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return {}
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
        alone = min(args.runs)  # 1 unless told otherwise: ms per update of a run with the device to itself
        results["ms_per_update"] = 1000.0 / results[f"runs_{alone}"]["updates_per_s_each"][0]
        seconds, sentences = greedy_validation_seconds(folder / f"runs{alone}_0", args.device)
        results["greedy_validation_s"], results["validation_sentences"] = seconds, sentences
        print(
            f"{results['ms_per_update']:.1f} ms per update; greedy validation of {sentences} sentences {seconds:.2f} s"
        )
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
    _write(args.json, results)
    return results


if __name__ == "__main__":
    main()
