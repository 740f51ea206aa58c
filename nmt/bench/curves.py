"""Learning curves against wall time: validation BLEU of runs (from their ``logs/metrics.csv``, where every
validation logs ``wall_time_s``) with optional reference points of another toolkit.

    python -m nmt.bench.curves docs/multi30k_curves.png "tiny, H100=runs/tiny" "RNN, H100=runs/rnn" \\
        --reference "JoeyNMT 2.3, same tiny model, this CPU=38:14.09,74:25.95"

Reference points are minutes:BLEU pairs.
"""

import argparse
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def validation_curve(run_dir: str | Path, metric: str = "val_bleu") -> list[tuple[float, float, int]]:
    """(minutes since training started, metric, step) at every validation of a run."""
    path = Path(run_dir) / "logs" / "metrics.csv"
    with open(path, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get(metric) and r.get("wall_time_s")]
    return [(float(r["wall_time_s"]) / 60, float(r[metric]), int(r["step"])) for r in rows]


def plot_curves(out: str | Path, runs: dict[str, str], references: dict[str, list[tuple[float, float]]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, run_dir in runs.items():
        points = validation_curve(run_dir)
        ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.6)
    for label, points in references.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], "o--", label=label, color="black")
    ax.set_xlabel("wall time (minutes, validation included)")
    ax.set_ylabel("validation sacreBLEU (greedy)")
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
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--reference", action="append", default=[], help="LABEL=MINUTES:BLEU,MINUTES:BLEU")
    args = parser.parse_args(argv)
    runs = dict(item.rsplit("=", 1) for item in args.runs)
    references = {label: _pairs(points) for label, points in (r.rsplit("=", 1) for r in args.reference)}
    plot_curves(args.out, runs, references)
    for label, run_dir in runs.items():
        points = validation_curve(run_dir)
        best = max(points, key=lambda p: p[1]) if points else None
        print(f"{label}: {len(points)} validations; best {best[1]:.2f} at step {best[2]}, {best[0]:.1f} min")


if __name__ == "__main__":
    main()
