"""Train a model: python train.py [group=option ...] [key=value ...]  (see README.md)."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded,
    # and a value the checks refuse before Lightning is (seconds of its start-up)
    from nmt.training.config import checked_task

    def checked_train(cfg: DictConfig) -> None:
        task = checked_task(cfg)
        from nmt.training.train import train

        train(cfg, task)

    run_cli(checked_train, cfg)


if __name__ == "__main__":
    check_command_line("train")
    main()
