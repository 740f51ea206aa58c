"""A sweep's progress: the line printed as each run ends (runs done and failed, and an ETA at this sitting's
pace), and the time the user gave the sweep to start runs in (``start_runs_for``)."""

import json
import time
from pathlib import Path

from nmt.sweep.records import finished_runs
from nmt.sweep.summary import FAILED, PLAN, failed_runs

LAUNCHED = "launched_at"  # when this invocation of the sweep began (seconds since the epoch)


def parse_duration(text: str) -> float:
    """Seconds in "HH:MM:SS" (hours may exceed 24)."""
    parts = str(text).split(":")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f'start_runs_for={text!r}: expected "HH:MM:SS", e.g. "02:15:00"')
    hours, minutes, seconds = (int(p) for p in parts)
    if minutes > 59 or seconds > 59:  # 00:99:99 was read as 1 h 40 min 39 s
        raise ValueError(f'start_runs_for={text!r}: minutes and seconds go from 00 to 59, as in "02:15:00"')
    return float(hours * 3600 + minutes * 60 + seconds)


def too_late_to_start(sweep_dir: Path, start_runs_for: str | None) -> bool:
    """True when ``start_runs_for`` has passed since this sweep was launched: a run started now could
    not finish inside the time the user gave the sweep (a session, a job allocation)."""
    if start_runs_for is None:
        return False
    launched = float((sweep_dir / LAUNCHED).read_text())
    return time.time() - launched > parse_duration(start_runs_for)


def progress_line(sweep_dir: Path, planned: int, now: float | None = None) -> str:
    """'[sweep] 12/48 done, 1 failed, ETA 1 h 10 min': runs done and failed on disk, the rest at the pace of
    this sitting: the runs every process of it (a parallel launcher's workers too) ended since it was
    launched."""
    done = finished_runs(sweep_dir)[0]  # of this sweep's plan
    failed = [sweep_dir / name / FAILED for name in failed_runs(sweep_dir)]
    line = f"[sweep] {len(done)}/{planned} done, {len(failed)} failed"
    remaining = planned - len(done) - len(failed)
    launched_file = sweep_dir / LAUNCHED
    if remaining <= 0 or not launched_file.is_file():
        return line
    launched = launched_file.stat().st_mtime  # the file system's clock, as the results' times below

    def ended_since(path: Path) -> bool:
        try:
            return path.stat().st_mtime >= launched
        except OSError:  # another process of the sweep removed it (a failure retried) since the glob
            return False

    finished_here = sum(ended_since(path) for path in done)
    ended_here = finished_here + sum(ended_since(path) for path in failed)
    if finished_here:  # failures alone (a run refused at once) tell nothing of a run's time
        seconds = ((now or time.time()) - launched) / ended_here * remaining
        hours, minutes = divmod(round(seconds / 60), 60)
        line += f", ETA {hours} h {minutes} min" if hours else f", ETA {minutes} min" if minutes else ", ETA < 1 min"
    return line


def runs_started_this_sitting(sweep_dir: Path) -> int:
    """Runs whose log was opened since this invocation of the sweep began (every run appends a header to
    it as it starts): what the main process can know of the runs its launcher's workers started."""
    launched = (sweep_dir / LAUNCHED).stat().st_mtime  # the file system's clock, as the logs' times
    return sum(log.stat().st_mtime >= launched for log in sweep_dir.glob("*/train_stdout.log"))


def planned_count(sweep_dir: Path) -> int:
    """The runs of the sweep's plan (0 before it is written)."""
    path = sweep_dir / PLAN
    return json.loads(path.read_text())["runs"] if path.is_file() else 0
