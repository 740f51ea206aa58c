"""Checks the benchmarks share, made before anything is measured: on a lent GPU, a results file that cannot
be written or a device that is not there, found at the end, costs the measurements of a short budget."""

import argparse


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
