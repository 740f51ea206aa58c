"""Full-factorial sweeps: python sweep.py [grid=...] [key=a,b ...];
python sweep.py report DIR [--metric M] [--sentence N] (the report written again);
python sweep.py tune DIR [DIR ...] --level KEY (each level's settings, chosen on validation data)."""

import sys

import hydra
from omegaconf import DictConfig

import nmt.sweep  # noqa: F401 - registers the resolver conf/sweep.yaml names the sweep folder by
from nmt.cli import check_command_line

# each command imports its own module when it runs, not all of them here: a sweep's runner loads torch,
# which takes seconds, and a mistyped key is said before it is loaded


@hydra.main(config_path="conf", config_name="sweep", version_base="1.3")
def main(cfg: DictConfig) -> dict | None:
    from nmt.sweep.runner import run_cell

    return run_cell(cfg)  # the run's record: a search's sweeper reads its validation score from it


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "report":
        from nmt.sweep.report import main as report_main

        report_main(sys.argv[2:])  # the report of a (possibly unfinished) sweep, written again
    elif len(sys.argv) >= 2 and sys.argv[1] == "tune":
        from nmt.sweep.tuning import main as tune_main

        tune_main(sys.argv[2:])
    else:
        check_command_line("sweep")
        main()
