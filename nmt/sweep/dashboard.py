"""A sweep's report, or a search's, as a W&B run of its own, in the sweep's group."""

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
    made = [report_path, sweep_dir / "results.csv", sweep_dir / "report.html", *sorted(sweep_dir.glob("*.png"))]
    said = f"{project}\n{group}\n{metric}"  # the metric as given ("auto" too), not as resolved below
    if _logged_before(sweep_dir, made, said, group):
        return
    records, _ = scored_records(collect_records(sweep_dir))  # nan or inf: the report names them
    metric = resolve_metric(metric, records)
    run = _report_run(sweep_dir, project, group, "sweep-report")
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
    _remember(sweep_dir, made, said)


def log_search_to_wandb(sweep_dir, project: str, group: str) -> None:
    """A search's report (nmt/sweep/search_report.py) as a W&B run of its own in the sweep's group: its trials
    as a table, a scatter panel of the score against each searched setting (``<key>_slice``) and the score by
    trial (``history``), the HTML report and its figures. The best trial's score, number and settings go into
    the run's summary (``best/<metric>``, ``best/trial``, ``best/<key>``)."""
    from pathlib import Path

    import wandb

    from nmt.sweep.search import DONE_STATE, REPORT, REPORT_PAGE, ranked_trials, read_search
    from nmt.sweep.search_report import settled

    sweep_dir = Path(sweep_dir)
    made = [sweep_dir / REPORT, sweep_dir / REPORT_PAGE, *sorted(sweep_dir.glob("search_*.png"))]
    if _logged_before(sweep_dir, made, f"{project}\n{group}", group):
        return
    search = settled(sweep_dir, read_search(sweep_dir))
    metric, keys = search["metric"], list(search["space"])
    run = _report_run(sweep_dir, project, group, "search-report")
    columns = ["trial", *keys, metric, "state", "run"]
    numeric = {k: all(_number(t["values"].get(k)) for t in search["trials"]) for k in keys}  # one type a column
    rows = [
        [
            t["number"],
            *(t["values"].get(k) if numeric[k] else str(t["values"].get(k)) for k in keys),
            t.get("value"),
            t.get("state"),
            t["run"],
        ]
        for t in search["trials"]
    ]
    scored = wandb.Table(columns=columns, data=[r for r in rows if r[-2] == DONE_STATE])
    panels = {f"{k}_slice": wandb.plot.scatter(scored, k, metric, title=f"{metric} against {k}") for k in keys}
    panels["history"] = wandb.plot.scatter(scored, "trial", metric, title=f"{metric} by trial")
    ranked = ranked_trials(search)
    if ranked:
        best = ranked[0]
        run.summary.update({f"best/{metric}": best["value"], "best/trial": best["number"]})
        run.summary.update({f"best/{k}": v if _number(v := best["values"].get(k)) else str(v) for k in keys})
    page = sweep_dir / REPORT_PAGE
    html = page.read_text() if page.is_file() else f"<pre>{(sweep_dir / REPORT).read_text()}</pre>"
    run.log({**panels, "trials": wandb.Table(columns=columns, data=rows), "report": wandb.Html(html)})
    run.log({p.stem: wandb.Image(str(p)) for p in sorted(sweep_dir.glob("search_*.png"))})
    run.finish()
    _remember(sweep_dir, made, f"{project}\n{group}")


def _report_run(sweep_dir, project: str, group: str, job_type: str):
    """The report's own W&B run in the sweep's group, ``<group>-report``, its files in the sweep's folder
    (offline where W&B has no credentials)."""
    import wandb

    return wandb.init(
        project=project,
        group=group,
        name=f"{group}-report",
        job_type=job_type,
        dir=str(sweep_dir),
        mode="offline" if wandb_offline(str(sweep_dir)) else "online",
    )


def _number(value) -> bool:
    """A sampled value W&B takes as a number; a column with any other (a choice's word) is text throughout, as a
    W&B table refuses a column of mixed types."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _digest(made: list, said: str) -> str:
    digest = hashlib.sha256(said.encode())
    for path in made:
        digest.update(path.name.encode() + (path.read_bytes() if path.is_file() else b"-"))
    return digest.hexdigest()


def _logged_before(sweep_dir, made: list, said: str, group: str) -> bool:
    """Whether the group's report run already holds this report: a sweep rerun that changed nothing (every run
    finished, the same report) logged one more report run into the group, two of one name; the report logged
    is remembered, and logged again only when it changed."""
    logged = sweep_dir / "wandb" / "report_logged.sha256"
    if logged.is_file() and logged.read_text().strip() == _digest(made, said):
        print(f"W&B: the report run {group}-report already holds this report; not logged again")
        return True
    return False


def _remember(sweep_dir, made: list, said: str) -> None:
    atomic_write_text(sweep_dir / "wandb" / "report_logged.sha256", _digest(made, said) + "\n")
