"""Evaluate or use a checkpoint: python evaluate.py ckpt_path=PATH [split=test] [decode.beam_size=5]."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli


@hydra.main(config_path="conf", config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded
    from nmt.evaluation.evaluate import evaluate

    run_cli(evaluate, cfg)


if __name__ == "__main__":
    check_command_line("evaluate")
    main()
