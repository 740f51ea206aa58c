"""A sweep's report as a W&B run of its own, in the sweep's group."""

import csv

from nmt.training.loggers import wandb_offline


def log_report_to_wandb(report_path, project: str, group: str, metric: str = "auto") -> None:
    """A sweep's report as a W&B run of its own in the sweep's group: one bar panel per factor (the
    metric's mean at each level, ``<factor>_by_level``), the results table, the HTML report, the figures.
    The level means also go into the run's summary (``<factor>/<level>``), where the runs table and
    ``wandb leet`` show them."""
    from pathlib import Path

    import wandb

    from nmt.sweep import analysis
    from nmt.sweep.records import collect_records, resolve_metric

    report_path = Path(report_path)
    sweep_dir = report_path.parent
    records = collect_records(sweep_dir)
    metric = resolve_metric(metric, records)
    records = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if v is not None}} for r in records]
    offline = wandb_offline(str(sweep_dir))
    run = wandb.init(
        project=project,
        group=group,
        name=f"{group}-report",
        job_type="sweep-report",
        dir=str(sweep_dir),
        mode="offline" if offline else "online",
    )
    with open(sweep_dir / "results.csv") as handle:
        rows = list(csv.reader(handle))
    panels = {}
    for factor in analysis.factor_names(records):
        by_level = analysis.level_summary(records, metric, factor)
        run.summary.update({f"{factor}/{level}": s["mean"] for level, s in by_level.items()})
        table = wandb.Table(
            columns=["level", metric, "runs"],
            data=[[level, s["mean"], s["n"]] for level, s in by_level.items()],
        )
        panels[f"{factor}_by_level"] = wandb.plot.bar(table, "level", metric, title=f"{metric} by {factor}")
    page = sweep_dir / "report.html"
    html = page.read_text() if page.is_file() else f"<pre>{report_path.read_text()}</pre>"
    run.log({**panels, "results": wandb.Table(columns=rows[0], data=rows[1:]), "report": wandb.Html(html)})
    run.log({p.stem: wandb.Image(str(p)) for p in sorted(sweep_dir.glob("*.png"))})
    run.finish()
