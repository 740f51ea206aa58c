"""Logger factories that need more than a class constructor."""

import os

from lightning.pytorch.loggers import WandbLogger


def wandb_logger(
    save_dir: str,
    project: str = "nmt",
    group: str | None = None,
    tags=(),
    name: str | None = None,
    config: dict | None = None,
) -> WandbLogger:
    """W&B, offline when no API key is configured (then: `wandb sync <run_dir>/wandb/offline-run-*`)."""
    offline = not os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") == "offline"
    if offline:
        print(f"W&B: no WANDB_API_KEY, logging offline; upload later with: wandb sync {save_dir}/wandb/offline-run-*")
    logger = WandbLogger(project=project, group=group, tags=list(tags), name=name, save_dir=save_dir, offline=offline)
    if config:
        logger.log_hyperparams(config)
    return logger
