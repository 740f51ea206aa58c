"""Learning curves: a validation metric of runs (from their ``logs/metrics.csv``, where every validation
logs ``wall_time_s``) against wall time or updates, with optional reference points of another toolkit.

    python -m benchmarks.curves docs/multi30k_curves.png "tiny, H100=runs/tiny" "RNN, H100=runs/rnn" \\
        --reference "JoeyNMT 2.3, same tiny model, this CPU=38:14.09,74:25.95"
    python -m benchmarks.curves docs/precision.png "fp32=runs/fp32" "bf16=runs/bf16" --metric val_loss --x step

Reference points are minutes:value pairs (or updates:value with ``--x step``). A run is its directory or
a CSV of its validations alone: ``--export-to docs/curves`` writes one per run directory given
(``docs/curves/<run dir name>.csv``), a few kilobytes that keep a figure redrawable once the run is gone.
"""

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.options import run_main
from nmt.metrics import lower_is_better  # noqa: E402


def validation_rows(run: str | Path) -> list[dict[str, str]]:
    """The rows of a run's validations: ``run`` is a run directory (its ``logs/metrics.csv``) or a CSV."""
    path = Path(run)
    if path.is_dir():
        path = path / "logs" / "metrics.csv"
    with open(path, encoding="utf-8", newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("wall_time_s")]


def validation_curve(run: str | Path, metric: str = "val_bleu") -> list[tuple[float, float, int]]:
    """(minutes since training started, metric, updates done) at every validation of a run: Lightning logs
    a validation at its last update's 0-based step (update 480's at step 479, as training prints it at
    update 480). One point per update: the final weights' validation, where training validated the same
    weights, repeats that row (``final_weights`` 1) and is the one kept. Logs written before that row was
    placed so have it one step later, so their last point lies one update late."""
    points: dict[int, tuple[float, float, int]] = {}
    for r in validation_rows(run):
        if r.get(metric):
            updates = int(float(r["step"])) + 1
            points[updates] = (float(r["wall_time_s"]) / 60, float(r[metric]), updates)
    return sorted(points.values(), key=lambda p: p[2])


def export_validations(run_dir: str | Path, out: str | Path) -> Path:
    """Write a run's validation rows (step, epoch, wall time and every ``val_*`` column) to ``out``."""
    rows = validation_rows(run_dir)
    columns = ["epoch", "step", "wall_time_s"] + sorted({k for r in rows for k in r if k.startswith("val_")})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out


AXIS_LABELS = {
    "val_bleu": "validation sacreBLEU (the run's validation search)",
    "val_loss": "validation loss (nats per target token)",
    "minutes": "wall time (minutes, validation included)",
    "step": "updates",
}


def plot_curves(
    out: str | Path,
    runs: dict[str, str],
    references: dict[str, list[tuple[float, float]]],
    metric: str = "val_bleu",
    x: str = "minutes",
) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, run_dir in runs.items():
        points = validation_curve(run_dir, metric)
        if not points:  # a metric the run never logged drew an empty figure
            logged = sorted({key for row in validation_rows(run_dir) for key, value in row.items() if value})
            raise ValueError(f"{label}={run_dir}: no validation logged {metric}; --metric one of {logged}")
        xs = [p[0] if x == "minutes" else p[2] for p in points]
        ax.plot(xs, [p[1] for p in points], label=label, linewidth=1.6, marker="." if x == "step" else None)
    styles = [("o--", "black"), ("s:", "tab:gray"), ("^-.", "tab:brown"), ("D--", "tab:olive")]
    for (label, points), (style, colour) in zip(references.items(), styles * len(references), strict=False):
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=label, color=colour)
    ax.set_xlabel(AXIS_LABELS[x])
    ax.set_ylabel(AXIS_LABELS.get(metric, metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _pairs(text: str) -> list[tuple[float, float]]:
    return [tuple(float(v) for v in pair.split(":")) for pair in text.split(",")]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="the figure (PNG)")
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR or LABEL=VALIDATIONS.csv")
    parser.add_argument("--reference", action="append", default=[], help="LABEL=X:VALUE,X:VALUE")
    parser.add_argument("--metric", default="val_bleu", help="a validation column of metrics.csv (val_loss, ...)")
    parser.add_argument("--x", choices=["minutes", "step"], default="minutes", help="the horizontal axis")
    parser.add_argument("--export-to", metavar="DIR", help="also write each run directory's validations to DIR")
    args = parser.parse_args(argv)
    # a sweep's run folder has "=" in its name (sweeps/x/optim=adam): unlabelled where the part before it is no label
    unlabelled = [item for item in args.runs if "=" not in item or (Path(item).exists() and "/" in item.split("=")[0])]
    if unlabelled:
        parser.error(f"{unlabelled[0]}: give each run as LABEL=RUN_DIR (e.g. 'ours={unlabelled[0]}')")
    runs = dict(item.split("=", 1) for item in args.runs)  # a sweep's run folder has "=" in its name
    if args.export_to:
        for run_dir in runs.values():
            if Path(run_dir).is_dir():
                print("wrote", export_validations(run_dir, Path(args.export_to) / f"{Path(run_dir).name}.csv"))
    try:
        references = {label: _pairs(points) for label, points in (r.split("=", 1) for r in args.reference)}
    except ValueError:
        parser.error(f"--reference {args.reference}: each LABEL=X:VALUE,X:VALUE (e.g. 'JoeyNMT=38:14.09,74:25.95')")
    plot_curves(args.out, runs, references, args.metric, args.x)  # a run without the metric is refused there
    for label, run_dir in runs.items():
        points = validation_curve(run_dir, args.metric)
        best = (min if lower_is_better(args.metric) else max)(points, key=lambda p: p[1])
        minutes, value, updates = best
        print(
            f"{label}: {len(points)} validations; best {args.metric} {value:.3f} at update {updates}, {minutes:.1f} min"
        )


if __name__ == "__main__":
    run_main(main)
