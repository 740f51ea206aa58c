"""Train a model: python train.py [group=option ...] [key=value ...]  (see README.md)."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, drop_refused_output, run_cli


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded,
    # and a value the checks refuse before Lightning is (seconds of its start-up)
    from nmt.training.config import checked_task

    def checked_train(cfg: DictConfig) -> None:
        task = checked_task(cfg)
        from nmt.training.train import train

        train(cfg, task)

    try:
        run_cli(checked_train, cfg)
    except SystemExit as stop:
        if stop.code == 2:  # refused: the folder Hydra made for the run holds nothing of one
            drop_refused_output()
        raise


if __name__ == "__main__":
    check_command_line("train")
    main()
