"""Export a checkpoint: python export.py ckpt_path=PATH out=DIR [format=ctranslate2] [quantization=int8]."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli


@hydra.main(config_path="conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded
    from nmt.inference.export import run_export

    run_cli(run_export, cfg)


if __name__ == "__main__":
    check_command_line("export")
    main()
