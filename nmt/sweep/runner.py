"""Full-factorial sweeps: each cell a fresh ``train.py`` process; results collected and analysed.

A fresh process per run keeps every run a plain single-run command line, so Lightning's DDP launcher
works inside sweeps (Hydra multirun and DDP do not mix in one process), and a crashed run cannot take
the sweep down. Finished runs leave ``sweep_result.json``; a rerun of the sweep skips them. The report
is written by :mod:`nmt.sweep.report` when the last job has ended.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from nmt.sweep.report import RESULT, collect_records, write_report
from nmt.tasks import build_task, task_config
from nmt.utils.io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
SWEEP_KEYS = ("grid", "sweep_name", "pin_gpus", "baseline", "report_metric", "report_sentence", "start_runs_for")
LAUNCHED = "launched_at"  # when this invocation of the sweep began (seconds since the epoch)


def default_sweep_name(*, _root_: DictConfig) -> str:
    """The grid's name, read where it is: the sweeper composes the sweep folder from a config that holds
    the ``hydra`` node while HydraConfig is not set yet; each job gets HydraConfig and loses the node."""
    if HydraConfig.initialized():
        return str(HydraConfig.get().runtime.choices.grid)
    return str(OmegaConf.select(_root_, "hydra.runtime.choices.grid", default="none"))


if not OmegaConf.has_resolver("nmt.grid_name"):
    OmegaConf.register_new_resolver("nmt.grid_name", default_sweep_name)


def parse_duration(text: str) -> float:
    """Seconds in "HH:MM:SS" (hours may exceed 24)."""
    parts = str(text).split(":")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f'start_runs_for={text!r}: expected "HH:MM:SS", e.g. "02:15:00"')
    hours, minutes, seconds = (int(p) for p in parts)
    return float(hours * 3600 + minutes * 60 + seconds)


def too_late_to_start(sweep_dir: Path, start_runs_for: str | None) -> bool:
    """True when ``start_runs_for`` has passed since this sweep was launched: a run started now could
    not finish inside the time the user gave the sweep (a session, a job allocation)."""
    if start_runs_for is None:
        return False
    launched = float((sweep_dir / LAUNCHED).read_text())
    return time.time() - launched > parse_duration(start_runs_for)


def logs_to_wandb(cfg: DictConfig) -> bool:
    return str(cfg.get("logger", {}).get("_target_", "")).endswith("wandb_logger")


def _override_pairs(overrides) -> list[tuple[str, str]]:
    pairs = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key not in SWEEP_KEYS and not key.startswith("hydra"):
            pairs.append((key, value))
    return pairs


def swept_keys(sweep_dir: Path) -> set[str]:
    """Keys with several values in this sweep: the grid's parameters and comma lists on the command line
    (read from the multirun.yaml Hydra writes before launching)."""
    from omegaconf import OmegaConf

    saved = OmegaConf.load(sweep_dir / "multirun.yaml")
    keys = {k for k, v in (saved.hydra.sweeper.get("params") or {}).items() if "," in str(v)}
    keys |= {k for k, v in _override_pairs(saved.hydra.overrides.task) if "," in v}
    return keys | {"seed"}


def run_cell(cfg: DictConfig) -> dict | None:
    """One run of the sweep (a Hydra multirun job): train.py in a subprocess, unless already done."""
    hydra_cfg = HydraConfig.get()
    pairs = _override_pairs(hydra_cfg.overrides.task)
    swept = swept_keys(Path(hydra_cfg.sweep.dir))
    run_dir = (Path(hydra_cfg.sweep.dir) / ",".join(f"{k}={v}" for k, v in sorted(pairs) if k in swept)).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    record_path = run_dir / RESULT
    if record_path.exists():
        print(f"[sweep] done already, skipped: {run_dir.name}")
        return json.loads(record_path.read_text())
    if too_late_to_start(Path(hydra_cfg.sweep.dir), cfg.get("start_runs_for")):
        print(f"[sweep] not started (start_runs_for={cfg.start_runs_for} has passed): {run_dir.name}; rerun to resume")
        return None
    factors = {k: v for k, v in pairs if k != "seed" and k in swept}
    tags = ",".join(json.dumps(f"{k}:{v}") for k, v in factors.items())
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        *(f"{k}={v}" for k, v in pairs),
        f"run_dir='{run_dir}'",
        f"hydra.run.dir='{run_dir}'",
        f"group={cfg.sweep_name}",
        f"tags=[{tags}]",
    ]
    if logs_to_wandb(cfg):  # unless given: runs named by their factor values, one W&B folder per sweep
        if not cfg.logger.get("name"):
            command.append(f"logger.name='{run_dir.name}'")
        if not cfg.logger.get("dir"):
            command.append(f"logger.dir='{Path(hydra_cfg.sweep.dir).resolve()}'")
    env = dict(os.environ)
    if cfg.pin_gpus:
        gpus = env.get("CUDA_VISIBLE_DEVICES", "").split(",") if env.get("CUDA_VISIBLE_DEVICES") else None
        if gpus is None:
            import torch

            gpus = [str(i) for i in range(torch.cuda.device_count())]
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[hydra_cfg.job.num % len(gpus)]
    print(f"[sweep] running: {run_dir.name}")
    start = time.time()
    result = subprocess.run(command, env=env, cwd=os.getcwd(), capture_output=True, text=True)
    wall = time.time() - start
    atomic_write_text(run_dir / "train_stdout.log", result.stdout)
    atomic_write_text(run_dir / "train_stderr.log", result.stderr)
    if result.returncode != 0:
        print(f"[sweep] FAILED ({result.returncode}): {run_dir.name}; see {run_dir / 'train_stderr.log'}")
        return None
    record = run_record(run_dir, factors, int(cfg.seed), wall)
    atomic_write_json(record_path, record)
    return record


def run_record(run_dir: Path, factors: dict, seed: int, wall_time_s: float) -> dict:
    """What a sweep keeps of a finished run: its factor levels and seed, the metrics its task reports
    (from results.json; the task is read from the run's config.yaml), size, cost and test outputs."""
    results = json.loads((run_dir / "results.json").read_text())
    task = build_task(task_config(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))))
    test = results.get("test") or {}
    return {
        "factors": factors,
        "seed": seed,
        "metrics": task.sweep_metrics(results),
        "report_metric": task.report_metric,
        "epochs": results["epochs"],
        "steps": results["steps"],
        "parameters": results["parameters"],
        "wall_time_s": round(wall_time_s, 1),
        "run_dir": str(run_dir),
        "hypotheses": test.get("hypotheses"),
        "references": test.get("references"),
        "sources": test.get("sources"),
    }


class SweepReport(Callback):
    """Hydra callback: when every job of the multirun has ended, write the report."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        if config.get("start_runs_for") is not None:
            parse_duration(config.start_runs_for)  # a bad value fails before any run starts
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sweep_dir / LAUNCHED, f"{time.time():.3f}\n")  # a rerun gets a fresh time window

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        if not collect_records(Path(config.hydra.sweep.dir)):
            print(f"[sweep] no finished runs in {config.hydra.sweep.dir}: no report yet; rerun the sweep to resume")
            return
        baseline = dict(config.baseline) if config.get("baseline") else None
        report = write_report(
            config.hydra.sweep.dir, config.get("report_metric", "auto"), baseline, config.get("report_sentence", 0)
        )
        if logs_to_wandb(config):
            from nmt.sweep.dashboard import log_report_to_wandb

            log_report_to_wandb(
                report,
                project=config.logger.get("project", "nmt"),
                group=config.sweep_name,
                metric=config.get("report_metric", "auto"),
            )
