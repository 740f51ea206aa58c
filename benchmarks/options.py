"""Checks the benchmarks share, made before anything is measured: on a lent GPU, a results file that cannot
be written or a device that is not there, found at the end, costs the measurements of a short budget."""

import argparse
import os
import sys
from collections.abc import Callable


class BenchmarkFailed(RuntimeError):
    """A measurement that could not be made (a run that failed, a figure that was not logged): said in one
    line by :func:`run_main`, as a wrong option is."""


def child_error(stderr: str, lines: int = 5) -> str | None:
    """Why a measuring process failed: its own one-line error where that ends its output (Hydra's hint after
    it aside), else None (an earlier error line is not the cause of a traceback after it)."""
    text = [line for line in stderr.strip().splitlines() if line.strip() and "HYDRA_FULL_ERROR" not in line]
    return text[-1].removeprefix("error: ") if text and text[-1].startswith("error: ") else None


def last_lines(stderr: str, lines: int = 5) -> str:
    """A failed process's own error line (:func:`child_error`), else the last lines of its output."""
    return child_error(stderr) or " | ".join(stderr.strip().splitlines()[-lines:])


def run_main(main: Callable[[], object]) -> None:
    """A benchmark's command line: a missing file, a bad value, a checkpoint or config that cannot be read,
    or a measurement that failed end it with one line and status 2 (NMT_DEBUG=1: the traceback)."""
    import statistics

    from hydra.errors import HydraException

    from nmt.cli import user_message
    from nmt.inference.checkpoint import CheckpointError

    try:
        code = main()
    except BrokenPipeError:  # the reader of the output left (| head): quiet, as a command killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(128 + 13) from None
    except (ValueError, OSError, statistics.StatisticsError, CheckpointError, HydraException, BenchmarkFailed) as err:
        if os.environ.get("NMT_DEBUG"):
            raise
        said = user_message(err)  # every problem of a listing error (a corpus's places tried, and the fix)
        # a check of ours names the option or file; another error may be a fault: where to see it whole
        ours = isinstance(err, BenchmarkFailed | CheckpointError) or (isinstance(err, OSError) and err.filename)
        hint = "" if ours or said.startswith(("data", "--")) else " (NMT_DEBUG=1 shows where)"
        print(f"error: {said}{hint}", file=sys.stderr)
        raise SystemExit(2) from None
    if isinstance(code, int):
        raise SystemExit(code)


def check_device_and_json(parser: argparse.ArgumentParser, device: str, json_path: str | None) -> None:
    """``--device`` a CUDA device only where one is seen; ``--json`` a file that can be written."""
    import torch

    from nmt.utils.io import check_output_file

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {device}: this machine shows no GPU; measure the CPU with --device cpu")
    if json_path:
        try:
            check_output_file("--json", json_path)
        except ValueError as err:
            parser.error(str(err))


if __name__ == "__main__":  # a library: run as a program, it measured nothing and said nothing
    raise SystemExit(
        "benchmarks.options is shared by the benchmarks: run one of them (BENCHMARKS.md names each one's command)"
    )
