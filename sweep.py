"""Full-factorial sweeps: python sweep.py [grid=...] [key=a,b ...];
python sweep.py report DIR [--metric M] [--sentence N] (the report written again);
python sweep.py tune DIR [DIR ...] --level KEY (each level's settings, chosen on validation data)."""

import sys

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line
from nmt.sweep.report import main as report_main
from nmt.sweep.runner import run_cell
from nmt.sweep.tuning import main as tune_main


@hydra.main(config_path="conf", config_name="sweep", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cell(cfg)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "report":
        report_main(sys.argv[2:])  # the report of a (possibly unfinished) sweep, written again
    elif len(sys.argv) >= 2 and sys.argv[1] == "tune":
        tune_main(sys.argv[2:])
    else:
        check_command_line("sweep")
        main()
