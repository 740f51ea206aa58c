"""Translate with a checkpoint: printf 'a\nb\n' | python translate.py ckpt_path=PATH [n_best=3] [alignments=true]."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli


@hydra.main(config_path="conf", config_name="translate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded
    from nmt.inference.stream import run_translate

    run_cli(run_translate, cfg)


if __name__ == "__main__":
    check_command_line("translate")
    main()
