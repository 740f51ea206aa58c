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


def log_results_to_wandb(logger: WandbLogger, results: dict) -> None:
    """Final results into the run's summary, and the test attention heatmaps as images."""
    test = results.get("test", {})
    summary = {f"test_{k}": v for k, v in test.items() if isinstance(v, int | float)}
    summary.update({k: v for k, v in results.items() if isinstance(v, int | float)})
    logger.experiment.summary.update(summary)
    if test.get("attention_maps"):
        logger.log_image("test_attention", images=list(test["attention_maps"]))


def log_report_to_wandb(report_path, project: str, group: str) -> None:
    """A sweep's report (tables and figures) as a W&B run of its own."""
    from pathlib import Path

    import wandb

    report_path = Path(report_path)
    offline = not os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE") == "offline"
    run = wandb.init(
        project=project,
        group=group,
        name=f"{group}-report",
        job_type="sweep-report",
        dir=str(report_path.parent),
        mode="offline" if offline else "online",
    )
    table = None
    import csv

    with open(report_path.parent / "results.csv") as handle:
        rows = list(csv.reader(handle))
    table = wandb.Table(columns=rows[0], data=rows[1:])
    run.log({"results": table, "report": wandb.Html(f"<pre>{report_path.read_text()}</pre>")})
    run.log({p.stem: wandb.Image(str(p)) for p in sorted(report_path.parent.glob("*.png"))})
    run.finish()
