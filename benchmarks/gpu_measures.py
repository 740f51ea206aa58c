"""What ``make bench-gpu`` measures, each through the real entry points: training runs of the tiny recipe
(alone or several sharing the device, with or without each means of speed), greedy validation with a
trained checkpoint, the d_model 512 MFU and the whole recipe. Every run is a subprocess whose output goes
to a log, so that a failure is reported with the run's own last lines."""

import contextlib
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.options import BenchmarkFailed, child_error
from nmt.utils.machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]

# each row of --means adds its overrides to those of the rows above it
MEANS = [
    (
        "none",
        [
            "compile=false",
            "check_every=1",
            "optim.optimizer.fused=null",
            "data.batches_on_device=false",
            "norm.fused=false",
        ],
    ),  # fmt: skip
    ("+ one kernel per norm", ["norm.fused=true"]),
    ("+ batches built on the device", ["data.batches_on_device=true"]),
    ("+ fused AdamW", ["optim.optimizer.fused=true"]),
    ("+ no read of the device in an update", ["check_every=50"]),
    ("+ torch.compile", ["compile=true"]),
    ("+ CUDA graphs", ["compile=reduce-overhead"]),
    # the whole update (the guard, clipping and optimiser step too) as one graph, the model's kernels compiled
    ("+ each whole update one CUDA graph", ["compile=true", "graph_updates=true"]),
]


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


def device_name(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_name()


PROFILER = "+trainer.profiler=simple"  # Lightning's host timer around each loop step and hook (see host_profile)


def train_program(extra: list[str], profile_after: int, trace: bool = False) -> list[str]:
    """``train.py``; with :data:`PROFILER` among ``extra``, the same with the profiler cleared after
    ``profile_after`` updates (compiling and recording graphs are done by then); ``trace``: and an op-level
    trace of some updates and a validation epoch after them (``benchmarks/profiled_train.py``)."""
    if PROFILER in extra:
        program = [sys.executable, "-m", "benchmarks.profiled_train", "--after", str(profile_after)]
        return [*program, "--trace"] if trace else program
    return [sys.executable, str(ROOT / "train.py")]


def train_command(run_dir: Path, device: str, data: str, steps: int, extra: list[str]) -> list[str]:
    trainer = ["trainer=gpu"] if device == "cuda" else ["trainer.accelerator=cpu"]
    return [
        *train_program(extra, steps // 3),  # a profiled run's report covers its last two thirds
        f"data={data}",
        *trainer,
        f"trainer.max_steps={steps}",
        "trainer.log_every_n_steps=20",
        "trainer.enable_progress_bar=false",
        "val_after_training=false",
        "test_after_training=false",
        "validation.bleu_every_n_epochs=0",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=min",
        "early_stopping.patience=null",  # a timed run trains its max_steps, whatever the recipe's patience
        *in_folder(run_dir),
        *extra,
    ]


def in_folder(run_dir: Path) -> list[str]:
    """A benchmark run and Hydra's record of its command both in ``run_dir``, not in the checkout's runs/."""
    return [f"run_dir={run_dir}", f"hydra.run.dir={run_dir}"]


def updates_per_second(run_dir: Path) -> float:
    """The run's throughput after its warm-up: the median of its later logged windows (batches/s)."""
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
    rates = [float(r["train/device/batches_per_sec"]) for r in rows if r.get("train/device/batches_per_sec")]
    if not rates:
        raise BenchmarkFailed(f"{run_dir}: no throughput logged; train more steps (--steps)")
    later = rates[len(rates) // 2 :] or rates
    return statistics.median(later)


def wall_time_parts(run_dir: Path, wall: float) -> dict:
    """Where a whole run's ``wall`` seconds went, from the seconds since training began that each
    validation logs (``wall_time_s`` in metrics.csv) and from results.json: before training (imports,
    data, tokenizers, the model, Lightning's sanity check), the first epoch (with the compile and graph
    recordings), the median epoch of the later half, and the final scores after training."""
    rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
    marks = sorted({float(r["wall_time_s"]) for r in rows if r.get("wall_time_s")})
    done = json.loads((run_dir / "results.json").read_text())
    if not marks or done.get("wall_time_s") is None:
        raise BenchmarkFailed(f"{run_dir}: no validation's wall time or no final wall time logged")
    epochs = [b - a for a, b in zip(marks, marks[1:], strict=False)]
    later = epochs[len(epochs) // 2 :]
    return {
        "before_training_s": round(wall - done["wall_time_s"], 1),
        "first_epoch_s": round(marks[0], 1),
        "epoch_s_median_later_half": round(statistics.median(later), 2) if later else None,
        "final_scores_s": round(done["wall_time_s"] - marks[-1], 1),
    }


def run_env() -> dict:
    """The project first on the path, then whatever the caller's path holds (packages installed beside
    the interpreter's)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def start(command: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """A run in its own process group (so that a timeout ends the compile workers it started too), its
    output in ``log``; ``env`` added to its environment."""
    with log.open("w") as out:
        return subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**run_env(), **(env or {})},
            cwd=ROOT,
            start_new_session=True,
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def log_tail(log: Path, lines: int = 15, ended: bool = True) -> str:
    """Why a run failed, so that a results file read far from the machine says so: the run's own one-line
    error where it printed one, else the end of its log (which may be in a folder removed since)."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    said = child_error(text) if ended else None  # its own error, where that ends the log of a run that ended
    if said:
        return f"{said} (its log: {log})"
    return f"the last lines of its log ({log}): " + " | ".join(text.strip().splitlines()[-lines:])


def run_logged(command: list[str], log: Path, timeout: float | None = None) -> str:
    """Run ``command`` to its end; its output (also in ``log``), or an error with its last lines."""
    process = start(command, log)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise BenchmarkFailed(f"not done after {timeout:.0f} s: {log_tail(log, ended=False)}") from err
    finally:
        stop(process)
    if code != 0:
        raise BenchmarkFailed(f"failed (exit {code}): {log_tail(log)}")
    return log.read_text(errors="replace")


def host_profile(log: Path, top: int = 12) -> list[dict]:
    """The ``top`` actions of a run's training by host time, from the report Lightning's simple profiler
    (:data:`PROFILER`) writes at the end of ``fit``, after the warm-up (``benchmarks/profiled_train.py``): each
    with its calls and milliseconds per call. Actions nest (a batch holds its training step, which holds
    the forward pass). On a GPU the host times its own work (and any wait for the device), not the kernels."""
    text = log.read_text(errors="replace")
    start = text.find("FIT Profiler Report")
    if start < 0:
        raise BenchmarkFailed(f"no profiler report in {log}")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if "Profiler Report" in line:
            break  # the next stage's report
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("Action", "Total") or not cells[2].isdigit():
            continue
        action, mean_s, calls, total_s = cells[0], cells[1], int(cells[2]), float(cells[3])
        rows.append({"action": action, "calls": calls, "ms_per_call": 1000 * float(mean_s), "total_s": total_s})
    return sorted(rows, key=lambda r: -r["total_s"])[:top]


def concurrent_runs(
    n: int,
    device: str,
    data: str,
    steps: int,
    extra: list[str],
    folder: Path,
    timeout: float | None = None,
    env: dict | None = None,
) -> list[float]:
    """n tiny runs at once on the device: each one's updates per second (``timeout``: seconds for all of
    them, after which they are killed and this raises; ``env``: added to the runs' environment)."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = [folder / f"runs{n}_{i}" for i in range(n)]
    if device == "cpu" and not any(o.startswith("threads=") for o in extra):
        # the cores shared out: more threads than cores, and the spinning threads of one run slow the
        # others by an order of magnitude; the cores are this process's (its affinity, or OMP_NUM_THREADS
        # where a caller gave it a share, as the test suite's workers do)
        cores = int(os.environ.get("OMP_NUM_THREADS") or 0) or len(os.sched_getaffinity(0))
        extra = [*extra, f"threads={max(1, cores // n)}"]
    processes = [
        start(train_command(r, device, data, steps, [*extra, f"seed={i + 1}"]), folder / f"{r.name}.log", env)
        for i, r in enumerate(runs)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for process, run in zip(processes, runs, strict=True):
            left = None if deadline is None else max(1.0, deadline - time.monotonic())
            if process.wait(timeout=left) != 0:
                raise BenchmarkFailed(f"a benchmark run failed: {log_tail(folder / f'{run.name}.log')}")
    except subprocess.TimeoutExpired as err:
        # where the first run was (compiling, recording, training), read far from the machine
        first = log_tail(folder / f"{runs[0].name}.log", lines=5, ended=False)
        raise BenchmarkFailed(f"{n} run(s) not done after {timeout:.0f} s; {first}") from err
    finally:
        for process in processes:
            stop(process)
    return [updates_per_second(r) for r in runs]


def concurrent_runs_mps(
    n: int, device: str, data: str, steps: int, extra: list[str], folder: Path, timeout: float | None = None
) -> tuple[list[float], dict]:
    """:func:`concurrent_runs` under CUDA's MPS (a daemon of their own, shut down after): each run's updates
    per second, and what the daemon was seen serving while they ran (no server: the runs did not reach it,
    and the figure is not one of MPS). The runs take GPU 0 in the daemon's numbering, which is the first of
    this process's visible GPUs, as a run without MPS takes."""
    from nmt.sweep.mps import MpsDaemon, ServerWatch

    daemon = MpsDaemon(Path(tempfile.mkdtemp(prefix="nmt-mps-", dir="/tmp")))  # short: socket paths are limited
    try:
        daemon.join()
        watch = ServerWatch(daemon, every_s=2.0).start()
        try:
            env = {**daemon.env, "CUDA_VISIBLE_DEVICES": "0"}
            rates = concurrent_runs(n, device, data, steps, extra, folder, timeout, env=env)
        finally:
            seen = watch.stop()
            seen["daemon"] = daemon.leave()
    finally:
        if not daemon.running():  # a daemon still waiting for its clients keeps its pipes, to be stopped by hand
            shutil.rmtree(daemon.folder, ignore_errors=True)
    return rates, seen


def greedy_validation_seconds(
    model: Path,
    device: str,
    every: int | None = None,
    graphs: bool | None = None,
    outputs: list | None = None,
    explicit_steps: bool = False,
) -> tuple[float, int]:
    """Seconds to decode the validation set greedily with ``model`` (a run folder or a checkpoint);
    ``every`` and ``graphs`` as in :func:`searching`; ``outputs``: a list that receives the translations;
    ``explicit_steps``: each step's attentions by the written-out formula
    (``MultiHeadAttention.explicit_decoding_steps``) rather than PyTorch's kernel."""
    from nmt.modules.attention import MultiHeadAttention

    checkpoint = model if model.suffix == ".ckpt" else model / "checkpoints" / "last.ckpt"
    default = MultiHeadAttention.explicit_decoding_steps
    MultiHeadAttention.explicit_decoding_steps = explicit_steps
    try:
        with searching(every, graphs):
            return _time_validation(checkpoint, device, [] if outputs is None else outputs)
    finally:
        MultiHeadAttention.explicit_decoding_steps = default


@contextlib.contextmanager
def searching(every: int | None = None, graphs: bool | None = None):
    """Greedy search, inside, as chosen: ``every``, steps between two reads of which sentences ended in
    the search step by step; ``graphs``, whether each step is a CUDA graph's replay
    (``nmt/decoding/graphed.py``; False: step by step); None, the search's own choice for the device. A
    timing meant to replay graphs fails where the search decoded step by step instead (a step that could
    not be recorded, of which only a warning speaks, or no search that recorded one at all): its seconds
    would be passed off as the graphs'."""
    from nmt.decoding import graphed
    from nmt.decoding import search as search_module

    chosen = search_module.read_every, search_module.use_graphs
    if every is not None:
        search_module.read_every = lambda _device: every
    if graphs is not None:
        search_module.use_graphs = lambda model, device: graphs and chosen[1](model, device)
    before, recorded = dict(graphed.FELL_BACK), graphed.RECORDED
    try:
        yield
    finally:
        search_module.read_every, search_module.use_graphs = chosen
    new = sorted(reason for reason, n in graphed.FELL_BACK.items() if n > before.get(reason, 0))
    if graphs and new:
        raise BenchmarkFailed(f"the step could not be recorded as a CUDA graph: {new}")
    if graphs and graphed.RECORDED == recorded:  # a model without fixed caches, autocast on, a table too short
        raise BenchmarkFailed("no search replayed a recorded step: the figure would be the step-by-step search's")


def _time_validation(checkpoint: Path, device: str, outputs: list) -> tuple[float, int]:
    import torch

    from nmt.decoding.settings import SearchConfig
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
    outputs[:] = translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, sources, search)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, len(sources)


def run_validation_seconds(
    model: Path, device: str, precision: str | None = None, graphs: bool | None = None, scores_in: str | None = None
) -> tuple[float, int, str]:
    """Seconds of one validation epoch as a run pays it, with ``model`` (a run folder or a checkpoint):
    Lightning's validation loop at the run's precision (``precision``: another), over the run's own
    validation batches, with the loss, the greedy search and the scores, from the epoch's start to the end
    of its scores (not the data's preparation or the model's copy that ``trainer.validate`` adds around it).
    The second of two epochs (the first warms up); ``graphs`` as in :func:`searching`; ``scores_in``:
    the task's (None: its default for the device). Returns (seconds, sentences, precision)."""
    with searching(graphs=graphs):
        return _time_run_validation(model, device, precision, scores_in)


def _time_run_validation(model: Path, device: str, precision: str | None, scores_in) -> tuple[float, int, str]:
    import lightning as L
    import torch
    from omegaconf import OmegaConf

    from nmt.data.tokenizer import PAD_ID
    from nmt.inference.loading import load_model
    from nmt.tasks import build_task, task_config
    from nmt.training.config_device import resolve_precision
    from nmt.training.lightning_data import lightning_data
    from nmt.training.module import TaskModule
    from nmt.utils.instantiate import instantiate

    class EpochTimer(L.Callback):
        def on_validation_epoch_start(self, trainer, pl_module) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            self.started = time.perf_counter()

        def on_validation_end(self, trainer, pl_module) -> None:  # after the epoch's scores are computed
            if device == "cuda":
                torch.cuda.synchronize()
            self.seconds = time.perf_counter() - self.started

    checkpoint = model if model.suffix == ".ckpt" else model / "checkpoints" / "last.ckpt"
    loaded = load_model(checkpoint, device="cpu")
    cfg = OmegaConf.create(loaded.config)
    task_cfg = dict(task_config(loaded.config))
    if "bleu_every_n_epochs" in task_cfg:  # every validation decodes, as the epochs whose BLEU a run computes
        task_cfg["bleu_every_n_epochs"] = 1
    if scores_in is not None:  # checked as validation.scores_in is
        task_cfg["scores_in"] = scores_in
    task = build_task(task_cfg)
    datamodule = task.build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    datamodule.set_tokenizers(loaded.src_tokenizer, loaded.tgt_tokenizer)
    module = TaskModule(
        task=task,
        model=loaded.model,
        loss=instantiate(cfg.smoothing, pad_id=PAD_ID),
        optimizer=None,
        scheduler=None,
        src_tokenizer=loaded.src_tokenizer,
        tgt_tokenizer=loaded.tgt_tokenizer,
        config=loaded.config,
        val_metrics=task.validation_metrics(datamodule),
    )
    accelerator = "gpu" if device == "cuda" else "cpu"
    precision = resolve_precision(precision or OmegaConf.select(cfg, "trainer.precision", default="auto"), accelerator)
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    try:
        data = lightning_data(datamodule)
        trainer.validate(module, datamodule=data, verbose=False)  # warm-up: the device, the batches, workers
        scores = trainer.validate(module, datamodule=data, verbose=False)
    finally:
        task.stop_workers(module)
    if "val_bleu" not in scores[0]:
        raise BenchmarkFailed(f"the validation decoded nothing (no val_bleu among {sorted(scores[0])})")
    return timer.seconds, len(datamodule.text("val")[0]), precision


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
        # the model decoded as every run decodes it (one kernel per norm), uncompiled: the second row's run
        # when it trained, else the first's
        second = Path(tmp) / "means1" / "runs1_0"
        model_run = second if "error" not in rows.get(MEANS[1][0], {}) else Path(tmp) / "means0" / "runs1_0"
        for every in (1, 8):
            seconds, sentences = greedy_validation_seconds(model_run, device, every, graphs=False)
            rows[f"greedy validation, a read every {every} step(s)"] = {"seconds": seconds, "sentences": sentences}
            print(
                f"greedy validation, a read every {every} step(s): {seconds:.2f} s ({sentences} sentences)", flush=True
            )
    return rows


def mfu_output(device: str, timeout: float | None = None) -> str:
    """benchmarks.mfu on the d_model 512, 6+6-layer model, bf16, compiled with its loss: its printed table.
    On a GPU with the batch of BENCHMARKS.md's best row (1,024 sentences of 64 tokens, vocabulary 10,000)."""
    command = [sys.executable, "-m", "benchmarks.mfu", "--device", device, "--d-model", "512", "--layers", "6"]
    command += ["--heads", "8", "--ffn", "2048", "--precision", "bf16", "--compile-loss", "--fused-optim"]
    if device == "cuda":
        command += ["--batch", "1024", "--src-len", "64", "--tgt-len", "64", "--vocab", "10000", "--steps", "20"]
    with tempfile.TemporaryDirectory() as tmp:
        return run_logged(command, Path(tmp) / "mfu.log", timeout)


def stacked_rows(
    device: str, timeout: float | None = None, config: list[str] | None = None
) -> tuple[list[dict], str | None]:
    """benchmarks.stacked on a GPU: 1, 4, 8 and 16 tiny models trained stacked in one process, against the
    same models updated one after another, each update one CUDA graph, on the fair factorial's batches (2,048
    tokens) and on the recipe's (8,192); the models those of train.py's overrides ``config`` (default: the
    tiny recipe's). Its rows, and what stopped a call if one was (the rows measured by then are kept)."""
    command = [sys.executable, "-m", "benchmarks.stacked", "--device", device]
    if device == "cuda":
        calls = [command + ["--members", "1", "4", "8", "16", "--graph", "--batch", *b] for b in STACKED_BATCHES]
    else:  # a check that it runs: a CPU's cores are busy with one small model already
        calls = [command + ["--members", "1", "2", "--dropout", "0", "--steps", "2", "--batch", "16", "8", "8"]]
    if config:
        calls = [[*call, "--config", *config] for call in calls]
    rows, problems, began = [], [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i, call in enumerate(calls):
            batch = "{}x{}/{}".format(*call[call.index("--batch") + 1 :][:3])
            left = None if timeout is None else timeout - (time.monotonic() - began)
            if left is not None and left < STACKED_CALL_S:
                problems.append(f"batches {batch}: not started, {max(left, 0):.0f} s of the budget left")
                break
            log = Path(tmp) / f"stacked{i}.log"
            try:
                run_logged(call, log, left)
            except RuntimeError as err:  # a crash of the whole process: the next batch shape runs anew
                problems.append(f"batches {batch}: {err}")
            text = log.read_text(errors="replace") if log.exists() else ""
            rows += [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return rows, "; ".join(problems) or None


# the fair factorial's batches first (the ones its pieces need), then the tiny recipe's: sentences, source and
# target tokens
STACKED_BATCHES = [("128", "16", "16"), ("512", "16", "16")]
STACKED_CALL_S = 30  # the least a call needs: its start and one row


# seconds a run needs besides its training: start-up, data, compiling, the final validation and the test
RECIPE_OVERHEAD_S = 120


def whole_recipe(
    device: str, data: str, extra: list[str], run_dir: Path, budget_s: float | None = None, profile_after: int = 300
) -> dict:
    """The default recipe of ``data`` (on multi30k the tiny recipe) start to end (its updates, validations
    and beam-5 test), timed; ``budget_s``: seconds for all of it, its training capped to leave
    :data:`RECIPE_OVERHEAD_S` of them for the rest (the result then says whether the cap cut it short). The final
    beam decode of the validation set that a user's run adds (``val_after_training``) is left out, so that
    the figure stays the one measured before it existed. Its ms per update is the median of its later logged
    rates; with :data:`PROFILER` among ``extra``, an op-level trace of up to 20 updates after
    ``profile_after`` and of the next validation epoch comes with it, and the host's time by action after
    that trace (the profilers' own cost is in the wall time then)."""
    trainer = ["trainer=gpu"] if device == "cuda" else ["trainer.accelerator=cpu"]
    no_val_decode = "val_after_training=false"
    command = [
        *train_program(extra, profile_after, trace=True),
        f"data={data}",
        *trainer,
        no_val_decode,
        *in_folder(run_dir),
    ]
    command += extra
    cap = None
    if budget_s is not None:
        cap = max(1, int(budget_s - RECIPE_OVERHEAD_S))
        command.append(f"trainer.max_time=00:{cap // 3600:02d}:{cap % 3600 // 60:02d}:{cap % 60:02d}")
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    log = run_dir.parent / f"{run_dir.name}.log"
    run_logged(command, log, budget_s)
    wall = time.perf_counter() - started
    done = json.loads((run_dir / "results.json").read_text())
    cut = cap is not None and done.get("ended_by") == "max_time"  # the cap ended it, not the recipe's own end
    try:
        ms_per_update = 1000.0 / updates_per_second(run_dir)
    except (OSError, RuntimeError):
        ms_per_update = None
    profile = {}
    if PROFILER in extra:
        try:
            profile = {"host_profile": host_profile(log)}
        except (OSError, RuntimeError) as err:
            profile = {"host_profile": {"error": str(err)}}
        trace = run_dir / "trace.json"  # benchmarks/profiled_train.py's op-level trace after the warm-up
        profile["trace"] = json.loads(trace.read_text()) if trace.is_file() else {"error": f"no {trace.name}"}
        if "simple_profiler_cleared_at_update" not in profile["trace"]:  # training ended before the trace did
            profile["host_profile"] = {"error": "not cleared after the warm-up: the report would include it"}
    try:
        parts = {"wall_parts": wall_time_parts(run_dir, wall)}
    except (OSError, RuntimeError) as err:
        parts = {"wall_parts": {"error": str(err)}}
    return {
        "wall_s": wall,
        "ms_per_update": ms_per_update,
        **parts,
        **profile,
        "updates": done.get("steps"),
        "epochs": done.get("epochs"),
        "best_val_bleu": done.get("best_val_bleu"),
        "test_bleu": done.get("test", {}).get("bleu"),
        "finished": done.get("finished"),
        "cut_short_by_cap": cut,
    }


if __name__ == "__main__":  # a library: run as a program, it measured nothing and said nothing
    raise SystemExit(
        "benchmarks.gpu_measures is a part of `python -m benchmarks.gpu`: run that (--help lists its options)"
    )
