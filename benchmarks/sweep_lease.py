"""A sweep in pieces that each fit a short loan of a GPU machine: the fair factorial (74 runs) does not
fit one, and a machine lent for minutes keeps nothing for the next loan.

    python -m benchmarks.sweep_lease --minutes 9 --run-minutes 5 [--restore IN.tgz] --bundle OUT.tgz \\
        [--include conf/tuned/FILE.yaml] "SWEEP ARGUMENTS" ["SWEEP ARGUMENTS" ...]

Each quoted argument is one ``sweep.py`` command line (it names ``sweep_name=``); the sweeps run side by
side, sharing the machine's GPUs through their pool (``gpu_pool=true``). ``--restore`` unpacks an earlier
piece's bundle first, so that its finished runs are skipped ("done already"). No run starts once less than
``--run-minutes`` is left (``start_runs_for``), and at ``--minutes`` the sweeps are stopped. Then every
finished run of the sweeps (those with their record, ``sweep_result.json``) goes into the bundle without
its checkpoints and tokenizers, with the sweeps' own files (plan, report) and the ``--include`` files: what the report
and the next piece need, small enough to carry back. A run still training at the end is left out (it
starts again in the next piece: its checkpoints would not fit in what comes back).
"""

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from benchmarks.options import run_main
from nmt.sweep.records import RESULT
from nmt.sweep.summary import FAILED
from nmt.training.run_folder import in_this_folder
from nmt.utils.io import atomic_path, atomic_write_json

ROOT = Path(__file__).resolve().parent.parent
GRACE_S = 20  # after SIGTERM, for the runs to save and the sweeps to write their report
START_MARGIN_S = 30
KILLED = {-15, -9, 143, 137}  # a run's return code when the deadline's SIGTERM (or SIGKILL) ended it
# not carried back: what only resuming or decoding with the run would need (the report reads neither), and
# the run folder's lock
LEFT_OUT = {"checkpoints", "tokenizers"}
LEFT_OUT_SUFFIXES = (".ckpt", ".pt", ".tmp", ".lock")


def sweep_folder(arguments: list[str]) -> Path:
    """sweeps/<sweep_name> (relative to the working folder), or the hydra.sweep.dir given."""
    given = dict(a.split("=", 1) for a in arguments if "=" in a)
    if "hydra.sweep.dir" in given:
        return Path(given["hydra.sweep.dir"])
    if "sweep_name" not in given:
        raise SystemExit(
            f"sweep_lease: add sweep_name=NAME to the sweep {' '.join(arguments)!r}: its folder must be known"
        )
    return Path("sweeps") / given["sweep_name"]


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def run_sweeps(sweeps: list[list[str]], minutes: float, run_minutes: float) -> list[int | None]:
    """Each sweep in its own process group; stopped (SIGTERM, then SIGKILL) at the deadline. The return
    codes, None for a sweep that was stopped."""
    # the sweep counts start_runs_for from its own start, a few seconds after this one's
    start_for = clock(60 * (minutes - run_minutes) - START_MARGIN_S)
    processes = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "sweep.py"), *arguments, f"start_runs_for={start_for}"], start_new_session=True
        )  # fmt: skip
        for arguments in sweeps
    ]
    deadline = time.monotonic() + 60 * minutes
    while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
        time.sleep(2)
    stopped = [p.poll() is None for p in processes]
    for process, stop in zip(processes, stopped, strict=True):
        if stop:
            print(f"[sweep_lease] stopping sweep {process.pid} at the deadline ({minutes} min)", flush=True)
            os.killpg(process.pid, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while any(p.poll() is None for p in processes) and time.monotonic() < end:
        time.sleep(1)
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return [None if stop else p.returncode for p, stop in zip(processes, stopped, strict=True)]


def carried(folder: Path) -> list[Path]:
    """The files of a sweep folder that the bundle carries: the sweep's own, and its finished runs'
    without their checkpoints."""
    files = [p for p in folder.iterdir() if p.is_file()]
    for run in sorted(p for p in folder.iterdir() if p.is_dir()):
        if not (run / RESULT).is_file():
            continue  # unfinished (or Hydra's jobs/ folder): trained again by the next piece
        for path in sorted(run.rglob("*")):
            inside = path.relative_to(run).parts
            if path.is_file() and not LEFT_OUT & set(inside[:-1]) and not path.name.endswith(LEFT_OUT_SUFFIXES):
                files.append(path)
    return files


def bundle(
    folders: list[Path], include: list[Path], out: Path, stopped: list[bool] | None = None
) -> dict[str, tuple[int, int, int]]:
    """Write the bundle (gzip'd tar, names relative to the working folder) atomically; per sweep, its
    finished runs, those that failed, and those the deadline stopped (``stopped``: per sweep, whether
    the deadline stopped it; a run killed in a sweep that ended by itself failed, out of memory say)."""
    counts = {}
    stopped = stopped or [False] * len(folders)
    with atomic_path(out) as tmp, tarfile.open(tmp, "w:gz") as tar:
        for folder, deadline in zip(folders, stopped, strict=True):
            if not folder.is_dir():
                counts[str(folder)] = (0, 0, 0)
                continue
            for path in carried(folder):
                tar.add(path, arcname=str(path), recursive=False)
            finished = len(list(folder.glob(f"*/{RESULT}")))
            codes = [json.loads(p.read_text()).get("returncode") for p in folder.glob(f"*/{FAILED}")]
            killed = sum(code in KILLED for code in codes) if deadline else 0
            counts[str(folder)] = (finished, len(codes) - killed, killed)
        for path in include:
            if path.is_file():
                tar.add(path, arcname=str(path), recursive=False)
            else:
                print(f"[sweep_lease] --include {path}: not written, not carried", flush=True)
    return counts


def restore(archive: Path) -> int:
    """Unpack an earlier piece's bundle into the working folder; the number of files."""
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            if Path(member.name).is_absolute() or ".." in Path(member.name).parts:
                raise SystemExit(f"sweep_lease: {archive} holds {member.name!r}, outside the working folder")
        tar.extractall(".", filter="data")
    for member in members:  # each record names its run folder: here, not where the piece ran
        if Path(member.name).name == RESULT:
            record = json.loads(Path(member.name).read_text())
            atomic_write_json(member.name, in_this_folder(record, Path(member.name).parent.resolve()))
    return len(members)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweeps", nargs="+", help='one quoted sweep.py command line per sweep, e.g. "grid=none seed=1,2 sweep_name=x"'
    )
    parser.add_argument("--minutes", type=float, required=True, help="stop the sweeps after this long")
    parser.add_argument("--run-minutes", type=float, required=True, help="the longest a run takes: none starts later")
    parser.add_argument("--bundle", type=Path, required=True, help="the finished runs, carried back (.tgz)")
    parser.add_argument("--restore", type=Path, help="an earlier piece's bundle, unpacked first")
    parser.add_argument("--include", type=Path, nargs="*", default=[], help="other files the bundle carries")
    args = parser.parse_args(argv)
    if not args.run_minutes > 0:
        parser.error(f"--run-minutes {args.run_minutes:g}: the longest a run takes, more than 0")
    if args.bundle.is_dir():  # found when the sweeps' work was to be carried back: all of it lost
        parser.error(f"--bundle {args.bundle}: a folder; name the file to write, e.g. {args.bundle / 'piece1.tgz'}")
    if args.restore and not args.restore.is_file():
        parser.error(f"--restore {args.restore}: no such bundle")
    if 60 * (args.minutes - args.run_minutes) <= START_MARGIN_S:
        parser.error(f"--run-minutes {args.run_minutes} leaves no time to start a run in --minutes {args.minutes}")
    sweeps = [shlex.split(s) for s in args.sweeps]
    folders = [sweep_folder(a) for a in sweeps]
    if args.restore:
        if not args.restore.is_file():
            parser.error(f"--restore {args.restore}: no such file (a first piece has none: leave it out)")
        print(f"[sweep_lease] restored {restore(args.restore)} files from {args.restore}", flush=True)
    codes = run_sweeps(sweeps, args.minutes, args.run_minutes)
    counts = bundle(folders, args.include, args.bundle, [code is None for code in codes])
    for folder, code in zip(folders, codes, strict=True):
        finished, failed, stopped = counts[str(folder)]
        ended = "stopped at the deadline" if code is None else f"ended ({code})"
        print(
            f"[sweep_lease] {folder}: {finished} runs finished, {failed} failed, {stopped} stopped at the deadline "
            f"(trained again by the next piece); the sweep {ended}",
            flush=True,
        )
    print(f"[sweep_lease] bundle {args.bundle}: {args.bundle.stat().st_size / 2**20:.1f} MiB", flush=True)
    return 0 if all(code in (0, None) for code in codes) else 1


if __name__ == "__main__":
    run_main(main)
