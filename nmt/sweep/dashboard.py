"""A sweep's report as a W&B run of its own, in the sweep's group."""

import csv
import hashlib

from nmt.training.loggers import wandb_offline
from nmt.utils.io import atomic_write_text


def log_report_to_wandb(report_path, project: str, group: str, metric: str = "auto") -> None:
    """A sweep's report as a W&B run of its own in the sweep's group: one bar panel per factor (the
    metric's mean at each level, ``<factor>_by_level``), the results table, the HTML report, the figures.
    The level means also go into the run's summary (``<factor>/<level>``), where the runs table and
    ``wandb leet`` show them."""
    from pathlib import Path

    import wandb

    from nmt.sweep import analysis
    from nmt.sweep.records import collect_records, resolve_metric, scored_records

    report_path = Path(report_path)
    sweep_dir = report_path.parent
    # a sweep rerun that changed nothing (every run finished, the same report) logged one more report run
    # into the group, two of one name: the report logged is remembered, and logged again only when it changed
    logged = sweep_dir / "wandb" / "report_logged.sha256"
    made = [report_path, sweep_dir / "results.csv", sweep_dir / "report.html", *sorted(sweep_dir.glob("*.png"))]
    digest = hashlib.sha256(f"{project}\n{group}\n{metric}".encode())
    for path in made:
        digest.update(path.name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    if logged.is_file() and logged.read_text().strip() == digest.hexdigest():
        print(f"W&B: the report run {group}-report already holds this report; not logged again")
        return
    records, _ = scored_records(collect_records(sweep_dir))  # nan or inf: the report names them
    metric = resolve_metric(metric, records)
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
    atomic_write_text(logged, digest.hexdigest() + "\n")
