"""Checks the benchmarks share, made before anything is measured: on a lent GPU, a results file that cannot
be written or a device that is not there, found at the end, costs the measurements of a short budget."""

import argparse
import os
import sys
from collections.abc import Callable


class BenchmarkFailed(RuntimeError):
    """A measurement that could not be made (a run that failed, a figure that was not logged): said in one
    line by :func:`run_main`, as a wrong option is."""


def child_error(stderr: str, lines: int = 5) -> str:
    """Why a measuring process failed: its own one-line error where it printed one, else its last lines."""
    text = stderr.strip().splitlines()
    said = [line for line in text if line.startswith("error: ")]
    return said[-1].removeprefix("error: ") if said else " | ".join(text[-lines:])


def run_main(main: Callable[[], object]) -> None:
    """A benchmark's command line: a missing file, a bad value, a checkpoint or config that cannot be read,
    or a measurement that failed end it with one line and status 2 (NMT_DEBUG=1: the traceback)."""
    import statistics

    from hydra.errors import HydraException

    from nmt.inference.checkpoint import CheckpointError

    try:
        code = main()
    except (ValueError, OSError, statistics.StatisticsError, CheckpointError, HydraException, BenchmarkFailed) as err:
        if os.environ.get("NMT_DEBUG"):
            raise
        said = f"{err.filename}: {err.strerror}" if isinstance(err, OSError) and err.filename else str(err).strip()
        print(f"error: {said.splitlines()[0] if said else type(err).__name__}", file=sys.stderr)
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
