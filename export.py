"""Export a checkpoint: python export.py ckpt_path=PATH out=DIR [format=ctranslate2] [quantization=int8]."""

import sys

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli
from nmt.inference.export import FORMATS, export_ctranslate2
from nmt.inference.loading import load_model, resolve_checkpoint_path


def export(cfg: DictConfig) -> None:
    if cfg.format not in FORMATS:
        raise ValueError(f"format={cfg.format}: not one of {list(FORMATS)}")
    loaded = load_model(resolve_checkpoint_path(cfg.ckpt_path), cfg.average_last, "cpu")
    out = export_ctranslate2(loaded, cfg.out, cfg.quantization)
    print(f"CTranslate2 model written to {out} (quantization: {cfg.quantization or 'none, float32'})", file=sys.stderr)


@hydra.main(config_path="conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(export, cfg)


if __name__ == "__main__":
    check_command_line("export")
    main()
