"""A sweep's report, or a search's, as a W&B run of its own, in the sweep's group."""

import csv
import hashlib
import json
from pathlib import Path

from nmt.metrics import lower_is_better
from nmt.training.loggers import wandb_offline
from nmt.utils.io import atomic_write_text


def log_report_to_wandb(report_path, project: str, group: str, metric: str = "auto") -> None:
    """A sweep's report as a W&B run of its own in the sweep's group: one bar panel per factor (the
    metric's mean at each level, ``<factor>_by_level``), the results table, the HTML report, the figures.
    The level means also go into the run's summary (``<factor>/<level>``), where the runs table and
    ``wandb leet`` show them."""
    import wandb

    from nmt.sweep import analysis
    from nmt.sweep.records import collect_records, resolve_metric, scored_records

    report_path = Path(report_path)
    sweep_dir = report_path.parent
    made = [report_path, sweep_dir / "results.csv", sweep_dir / "report.html", *sorted(sweep_dir.glob("*.png"))]
    said = f"{project}\n{group}\n{metric}"  # the metric as given ("auto" too), not as resolved below
    records, _ = scored_records(collect_records(sweep_dir))  # nan or inf: the report names them
    metric = resolve_metric(metric, records)
    name = f"{group}-report-{metric}"  # a report of another metric is another run, told apart by its name
    if _logged_before(sweep_dir, made, said, name):
        return
    factors = analysis.factor_names(records)
    earlier = [r for r in _report_runs(sweep_dir) if r.get("name") == name]  # of runs or scores since changed
    config = {
        "metric": metric,
        "direction": "lower is better" if lower_is_better(metric) else "higher is better",
        "runs": len(records),
        "factors": {f: sorted({str(r["factors"][f]) for r in records}) for f in factors},
        "supersedes": [r["id"] for r in earlier],
    }
    run = _report_run(sweep_dir, project, group, "sweep-report", name, config)
    with open(sweep_dir / "results.csv") as handle:
        rows = list(csv.reader(handle))
    panels = {}
    for factor in factors:
        by_level = analysis.level_summary(records, metric, factor)
        run.summary.update({f"{factor}/{level}": s["mean"] for level, s in by_level.items()})
        table = wandb.Table(
            columns=["level", metric, "runs"],
            data=[[level, s["mean"], s["n"]] for level, s in by_level.items()],
        )
        panels[f"{factor}_by_level"] = wandb.plot.bar(table, "level", metric, title=f"{metric} by {factor}")
    page = sweep_dir / "report.html"
    html = page.read_text() if page.is_file() else f"<pre>{report_path.read_text()}</pre>"
    results = wandb.Table(columns=rows[0], data=typed_columns(rows[1:]))
    run.log({**panels, "results": results, "report": wandb.Html(html)})
    run.log({p.stem: wandb.Image(str(p)) for p in sorted(sweep_dir.glob("*.png"))})
    run.finish()
    _remember(sweep_dir, made, said, name)
    _supersede(
        sweep_dir, earlier, {"id": run.id, "name": name, "metric": metric}, offline=wandb_offline(str(sweep_dir))
    )


def typed_columns(rows: list[list[str]]) -> list[list]:
    """results.csv's cells as W&B's table should hold them: a column whose every filled cell is a number holds
    numbers (ints where all are whole), so that W&B sorts and plots it as one ("10" sorted before "2" as text);
    any other column stays text, as a W&B table refuses a column of mixed types."""
    columns = list(zip(*rows, strict=True)) if rows else []
    typed = []
    for column in columns:
        try:
            numbers = [None if cell == "" else float(cell) for cell in column]
        except ValueError:
            typed.append(list(column))
            continue
        whole = all(
            n is None or (n.is_integer() and "." not in c and "e" not in c.lower())
            for n, c in zip(numbers, column, strict=True)
        )
        typed.append([None if n is None else int(n) if whole else n for n in numbers])
    return [list(row) for row in zip(*typed, strict=True)] if typed else rows


REPORT_RUNS = "report_runs.json"  # in <sweep>/wandb: the report runs logged into the group, by name
LOGGED = "report_logged.{name}.sha256"  # in <sweep>/wandb: the digest of the report last logged by that run name


def _report_runs(sweep_dir) -> list[dict]:
    path = Path(sweep_dir) / "wandb" / REPORT_RUNS
    try:
        runs = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return runs if isinstance(runs, list) else []


def _supersede(sweep_dir, earlier: list[dict], new: dict, offline: bool) -> None:
    """The new report run in the record, and the earlier ones of its name out of the group's way: offline,
    their folders move to <sweep>/wandb/superseded/ (so that `wandb sync <sweep>/wandb/offline-run-*` uploads
    the current report alone); online, they are in the project already, named in the new run's config
    (``supersedes``) and said here."""
    wandb_dir = Path(sweep_dir) / "wandb"
    if earlier and offline:
        moved = move_wandb_runs(wandb_dir, [r["id"] for r in earlier], wandb_dir / "superseded")
        if moved:
            print(f"W&B: the earlier report run(s) {new['name']} ({len(moved)}) moved to {wandb_dir / 'superseded'}")
    elif earlier:
        ids = ", ".join(r["id"] for r in earlier)
        print(f"W&B: this report run supersedes {new['name']} run(s) {ids} in the project: hide or delete them there")
    kept = [r for r in _report_runs(sweep_dir) if r not in earlier]
    atomic_write_text(wandb_dir / REPORT_RUNS, json.dumps([*kept, new], indent=2) + "\n")


def move_wandb_runs(wandb_dir, ids: list[str], target) -> list:
    """The folders W&B wrote under ``wandb_dir`` for the runs ``ids`` (offline-run-<time>-<id>, one a sitting;
    run-<time>-<id> online), moved into ``target``."""
    moved = []
    for run_id in ids:
        for folder in sorted(Path(wandb_dir).glob(f"*run-*-{run_id}")):
            if folder.is_dir():
                Path(target).mkdir(parents=True, exist_ok=True)
                folder.rename(Path(target) / folder.name)
                moved.append(folder)
    return moved


def runs_without_wandb(sweep_dir: Path) -> list[str]:
    """The sweep's finished runs that have no W&B run (trained under another logger, then reused by a sweep
    that logs to W&B), by folder name."""
    from nmt.sweep.records import finished_runs
    from nmt.training.loggers import WANDB_ID

    return [path.parent.name for path in finished_runs(sweep_dir)[0] if not (path.parent / WANDB_ID).is_file()]


def set_aside_wandb(sweep_dir, aside, names: list[str], report_moved: bool) -> None:
    """on_changed=move: the W&B runs of the run folders ``names`` (by each folder's wandb_id) go with them into
    ``aside``/wandb, and, where their report went too, the report runs logged of it, so that the sweep's
    group (a `wandb sync` of <sweep>/wandb) never mixes runs of the old settings with the new."""
    from nmt.training.loggers import WANDB_ID

    sweep_dir, aside = Path(sweep_dir), Path(aside)
    wandb_dir = sweep_dir / "wandb"
    if not wandb_dir.is_dir():
        return
    ids = [(sweep_dir / n / WANDB_ID).read_text().strip() for n in names if (sweep_dir / n / WANDB_ID).is_file()]
    moved = move_wandb_runs(wandb_dir, [i for i in ids if i], aside / "wandb")
    if report_moved:
        reports = _report_runs(sweep_dir)
        moved += move_wandb_runs(wandb_dir, [r["id"] for r in reports], aside / "wandb")
        (aside / "wandb").mkdir(parents=True, exist_ok=True)
        for record in [wandb_dir / REPORT_RUNS, *wandb_dir.glob(LOGGED.format(name="*"))]:  # the next: afresh
            if record.is_file():
                record.rename(aside / "wandb" / record.name)
    if moved:
        print(f"[sweep] their W&B runs ({len(moved)} folder(s)) moved to {aside / 'wandb'}")


def log_search_to_wandb(sweep_dir, project: str, group: str) -> None:
    """A search's report (nmt/sweep/search_report.py) as a W&B run of its own in the sweep's group: its trials
    as a table, a scatter panel of the score against each searched setting (``<key>_slice``) and the score by
    trial (``history``), the HTML report and its figures. The best trial's score, number and settings go into
    the run's summary (``best/<metric>``, ``best/trial``, ``best/<key>``)."""
    import wandb

    from nmt.sweep.search import DONE_STATE, REPORT, REPORT_PAGE, ranked_trials, read_search
    from nmt.sweep.search_report import settled

    sweep_dir = Path(sweep_dir)
    made = [sweep_dir / REPORT, sweep_dir / REPORT_PAGE, *sorted(sweep_dir.glob("search_*.png"))]
    if _logged_before(sweep_dir, made, f"{project}\n{group}", f"{group}-report"):
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
    _remember(sweep_dir, made, f"{project}\n{group}", f"{group}-report")


def _report_run(sweep_dir, project: str, group: str, job_type: str, name: str | None = None, config=None):
    """The report's own W&B run in the sweep's group (``name``, by default ``<group>-report``), its files in the
    sweep's folder (offline where W&B has no credentials)."""
    import wandb

    return wandb.init(
        project=project,
        group=group,
        name=name or f"{group}-report",
        job_type=job_type,
        dir=str(sweep_dir),
        config=config,
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


def _logged_before(sweep_dir, made: list, said: str, name: str) -> bool:
    """Whether the group's report run already holds this report: a sweep rerun that changed nothing (every run
    finished, the same report) logged one more report run into the group, two of one name; the report logged
    is remembered by run name (a report of another metric is another run), and logged again only when it
    changed."""
    logged = sweep_dir / "wandb" / LOGGED.format(name=name)
    if logged.is_file() and logged.read_text().strip() == _digest(made, said):
        print(f"W&B: the report run {name} already holds this report; not logged again")
        return True
    return False


def _remember(sweep_dir, made: list, said: str, name: str) -> None:
    atomic_write_text(sweep_dir / "wandb" / LOGGED.format(name=name), _digest(made, said) + "\n")
