"""Full-factorial sweeps: each cell a fresh ``train.py`` process; results collected and analysed.

A fresh process per run keeps every run a plain single-run command line, so Lightning's DDP launcher
works inside sweeps (Hydra multirun and DDP do not mix in one process), and a crashed run cannot take
the sweep down. Finished runs leave ``sweep_result.json``; a rerun of the sweep skips them. The sweep's
callback (:mod:`nmt.sweep.callback`) checks and prints the plan first, and has :mod:`nmt.sweep.report`
write the report when the last job has ended.
"""

import importlib
import json
import os
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nmt.sweep.child import (
    end_worker_if_sweep_gone,
    run_child,
)
from nmt.sweep.gpus import GpuPool, mps_folder, visible_gpus
from nmt.sweep.inputs import logs_to_wandb
from nmt.sweep.levels import (
    hydra_quoted,
    level_overrides,
    override_pairs,
    plain_level,
)
from nmt.sweep.mps import MpsDaemon, client_devices
from nmt.sweep.plan import (
    as_override,
    command_prefixes,
    run_name,
    searchpath_override,
    swept_keys,
    wandb_group,
)
from nmt.sweep.progress import (
    planned_count,
    progress_line,
    too_late_to_start,
)
from nmt.sweep.records import RESULT, read_record, run_record
from nmt.sweep.summary import FAILED
from nmt.training.run_folder import RunFolderError, RunLock, finished_results, resumable, trained_results
from nmt.utils.configs import ROOT
from nmt.utils.io import atomic_write_json

SUPERSEDED = "superseded"  # run folders made under other settings, moved aside by on_changed=move


def leave_on_signal(daemon: MpsDaemon) -> None:
    """The sweep's part in its MPS daemon, given up as a signal ends the sweep: the daemon, told to quit,
    shuts down once its clients (the runs, saving now) have ended."""
    said = daemon.leave(wait_s=1)
    if said.startswith("still running"):
        said = "told to quit: it shuts down once the runs have saved and ended"
    if said != "not joined":
        print(f"[sweep] MPS daemon: {said}", flush=True)


def run_cell(cfg: DictConfig) -> dict | None:
    """One run of the sweep (a Hydra multirun job): train.py in a subprocess, unless already done."""
    hydra_cfg = HydraConfig.get()
    pairs = override_pairs(hydra_cfg.overrides.task)
    prefixes = command_prefixes(hydra_cfg.overrides.task)  # ++key=..., ~key reach train.py as given
    swept = swept_keys(Path(hydra_cfg.sweep.dir))
    run_dir = (Path(hydra_cfg.sweep.dir) / run_name(dict(pairs), swept)).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    record_path = run_dir / RESULT
    if record_path.exists():
        try:
            record = read_record(record_path)
            print(f"[sweep] done already, skipped: {run_dir.name}")
            return record
        except ValueError:  # the run's folder says whether it finished: train.py then only reports it
            print(f"[sweep] {record_path} cannot be read: recorded again from the run's folder")
            record_path.unlink()
    if _in_use_elsewhere(run_dir):  # another sweep process of the same sweep reached this cell first
        print(f"[sweep] being trained by another process, skipped: {run_dir.name}")
        return None
    if too_late_to_start(Path(hydra_cfg.sweep.dir), cfg.get("start_runs_for")):
        print(f"[sweep] not started (start_runs_for={cfg.start_runs_for} has passed): {run_dir.name}; rerun to resume")
        return None
    # the run's task, imported now: recording the run, hours later, must not import code edited meanwhile (a
    # module imported then, against others imported now, failed and left a finished run unrecorded)
    target = OmegaConf.select(cfg, "task._target_", default=None)
    if isinstance(target, str) and "." in target:
        importlib.import_module(target.rpartition(".")[0])
    factors = {k: v for k, v in pairs if k != "seed" and k in swept}
    command = _train_command(cfg, hydra_cfg, pairs, prefixes, run_dir, factors)
    env = dict(os.environ)
    held = None
    end_worker_if_sweep_gone(run_dir.name)  # a launcher's worker: taking the next run after its sweep stopped
    if cfg.gpu_pool:  # free GPUs from the machine's pool, given back when the run ends
        held = _take_gpus(cfg, run_dir, Path(hydra_cfg.sweep.dir), env, command)
        if held is None:
            return None
    print(f"[sweep] running: {run_dir.name} ({run_state(run_dir)}log: {run_dir / 'train_stdout.log'})", flush=True)
    (run_dir / FAILED).unlink(missing_ok=True)
    started = time.monotonic()
    try:
        returncode = run_child(command, env, run_dir)
    finally:
        if held is not None:
            held.release()
    if returncode != 0 and (record_path.exists() or _in_use_elsewhere(run_dir)):
        # refused by the run folder's lock: another process trains (or trained) this cell; not a failure
        print(f"[sweep] trained by another process, not here: {run_dir.name}")
        return read_record(record_path) if record_path.exists() else None
    record = _record_outcome(run_dir, returncode, factors, cfg.seed, started)
    sweep_dir = Path(hydra_cfg.sweep.dir)
    print(progress_line(sweep_dir, planned_count(sweep_dir)), flush=True)
    return record


def _train_command(cfg: DictConfig, hydra_cfg, pairs: list, prefixes: dict, run_dir: Path, factors: dict) -> list[str]:
    """train.py's command line for the run: the job's overrides as given, its levels' settings, its folder, and
    the W&B group, tags and name that place it in the sweep."""
    tags = ",".join(json.dumps(f"{k}:{plain_level(v)}") for k, v in factors.items())  # as the folder names it
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        *(as_override(k, v, prefixes.get(k, "")) for k, v in pairs),
        *level_overrides(cfg.get("level_settings"), dict(pairs)),
        f"run_dir={hydra_quoted(run_dir)}",  # a quoted level names a folder with quotes or spaces
        f"hydra.run.dir={hydra_quoted(run_dir)}",
        f"group={hydra_quoted(wandb_group(cfg.sweep_name, hydra_cfg.sweep.dir, hydra_cfg.overrides.task))}",
        f"tags=[{tags}]",
        *searchpath_override(),
    ]
    if logs_to_wandb(cfg):  # runs named by their factor values, one W&B folder per sweep (inputs.py refuses both)
        command.append(f"logger.name={hydra_quoted(run_dir.name)}")
        command.append(f"logger.dir={hydra_quoted(Path(hydra_cfg.sweep.dir).resolve())}")
    return command


def _take_gpus(cfg: DictConfig, run_dir: Path, sweep_dir: Path, env: dict, command: list[str]):
    """The run's GPUs taken from the machine's pool (waiting for them; a worker whose sweep has gone ends), set
    in ``env`` and ``command``; None, with the run recorded as failed, where the sweep's MPS daemon does not
    answer."""
    pool = GpuPool(visible_gpus(), int(cfg.runs_per_gpu), int(cfg.gpus_per_run))
    held = None
    while held is None:  # a worker waiting for a GPU ends with its sweep
        try:
            held = pool.take(timeout_s=5)
        except TimeoutError:
            end_worker_if_sweep_gone(run_dir.name)
    devices = held.devices
    if cfg.get("gpu_mps"):  # the sweep's MPS daemon: its pipes, and the GPUs numbered as it numbers them
        daemon = MpsDaemon(mps_folder())
        # a CUDA program that finds no daemon would run without it, silently; a busy machine may be slow to
        # answer, so ask twice
        if not daemon.running() and not (time.sleep(2) or daemon.running()):
            held.release()
            atomic_write_json(run_dir / FAILED, {"returncode": None, "error": "the MPS daemon did not answer"})
            print(f"[sweep] FAILED: {run_dir.name} not started: the MPS daemon ({daemon.folder}) does not answer")
            print(progress_line(sweep_dir, planned_count(sweep_dir)), flush=True)
            return None
        env.update(daemon.env)
        devices = client_devices(devices, visible_gpus())
    env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    command.append(f"trainer.devices={len(held.devices)}")
    print(f"[sweep] {run_dir.name}: GPU {','.join(held.devices)}", flush=True)
    return held


def _record_outcome(run_dir: Path, returncode: int, factors: dict, seed, started: float) -> dict | None:
    """The run's record written where it finished (None, and its failure written with its log's last error,
    where it did not); ``started``: when its process started (time.monotonic), its cost counted to here."""
    if returncode != 0:
        error = last_error(run_dir / "train_stderr.log")
        if returncode < 0:  # ended by a signal, whatever its log says last
            error = f"killed by signal {-returncode}; its log ends: {error}"
        atomic_write_json(run_dir / FAILED, {"returncode": returncode, "error": error})
        print(f"[sweep] FAILED ({returncode}): {run_dir.name}: {error} (log: {run_dir / 'train_stderr.log'})")
        return None
    record = {**run_record(run_dir, factors, int(seed)), "process_s": round(time.monotonic() - started, 1)}
    atomic_write_json(run_dir / RESULT, record)
    (run_dir / FAILED).unlink(missing_ok=True)  # an earlier attempt's, whichever process made it
    return record


def run_state(run_dir: Path) -> str:
    """What starting the run's train.py will do with its folder, as its "running:" line says it."""
    if finished_results(run_dir):  # trained and scored; only its record is made (train.py reports it)
        return "trained already, recorded now; "
    if trained_results(run_dir):
        return "trained already, its final scores made now; "
    if resumable(run_dir):
        return "resumed from its last checkpoint; "
    return ""


def last_error(log: Path) -> str:
    """What a failed run said last: its one-line ``error: ...`` (a user error), else the last line of its
    log (a traceback's exception)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 16384))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    starts = [i for i, line in enumerate(lines) if line.startswith("==== sitting started")]
    lines = lines[starts[-1] + 1 :] if starts else lines  # this attempt's lines, not an earlier one's error
    errors = [line for line in lines if line.startswith("error:")]
    # Hydra's hint after a traceback says nothing of the error, which is the line before it
    lines = [line for line in lines if not line.startswith("Set the environment variable HYDRA_FULL_ERROR")]
    return (errors or lines or ["nothing in its log"])[-1]


def _in_use_elsewhere(run_dir: Path) -> bool:
    """Whether another process holds the run folder's lock (train.py holds it while it trains there)."""
    try:
        with RunLock(run_dir):
            return False
    except RunFolderError:
        return True
