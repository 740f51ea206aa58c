"""A web page for a checkpoint: python serve.py ckpt_path=PATH [port=8000] (http://127.0.0.1:8000)."""

import hydra
from omegaconf import DictConfig

from nmt.cli import check_command_line, run_cli


@hydra.main(config_path="conf", config_name="serve", version_base="1.3")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a mistyped group or key (check_command_line) is said before torch is loaded
    from nmt.inference.serve import serve

    run_cli(serve, cfg)


if __name__ == "__main__":
    check_command_line("serve")
    main()
