"""Figures of a sweep report: main effects, interaction heatmaps, training curves."""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from nmt.utils.io import atomic_save_figure  # noqa: E402


def interaction_heatmap(
    table: dict[tuple[str, str], float],
    names: tuple[str, str],
    order: tuple[list[str], list[str]],
    metric: str,
    lower_is_better: bool,
    path: Path,
) -> None:
    """Mean metric for each pair of levels of two factors, levels in the report's order; the brighter
    colour is the better value whichever the metric's direction."""
    rows, columns = order
    values = [[table.get((r, c), float("nan")) for c in columns] for r in rows]
    figure, ax = plt.subplots(figsize=(1.6 * len(columns) + 2.5, 1.0 * len(rows) + 1.8))
    image = ax.imshow(values, cmap="viridis_r" if lower_is_better else "viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(names[1])
    ax.set_ylabel(names[0])
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            ax.text(
                j,
                i,
                "no run" if math.isnan(value) else f"{value:.2f}",
                ha="center",
                va="center",
                color="white",
                fontsize=9,
            )
    figure.colorbar(image, ax=ax, label=f"{metric} ({'lower' if lower_is_better else 'higher'} is better)")
    ax.set_title(f"{metric}: {names[0]} x {names[1]}")
    figure.tight_layout()
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


def training_curves(
    curves: dict[str, list[list[tuple[int, float]]]], factor: str, metric: str, path: Path, order: list[str] = ()
) -> None:
    """curves: level -> runs -> [(epoch, value)]; each run thin, and thick the mean per level at the
    epochs that every run of the level reached (a mean over the runs still going would favour the level
    whose weak runs stopped early)."""
    figure, ax = plt.subplots(figsize=(6.5, 4))
    ordered = sorted(curves.items(), key=lambda item: list(order).index(item[0]) if item[0] in order else len(order))
    for color, (level, runs) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], ordered, strict=False):
        by_epoch: dict[int, list[float]] = {}
        for run in runs:
            # markers: a run validated once is a point, which a line alone does not draw
            ax.plot([e for e, _ in run], [v for _, v in run], color=color, alpha=0.25, linewidth=0.8, marker=".")
            for epoch, value in run:
                by_epoch.setdefault(epoch, []).append(value)
        epochs = sorted(e for e, values in by_epoch.items() if len(values) == len(runs))
        ax.plot(
            epochs,
            [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs],
            color=color,
            linewidth=2,
            marker="o",
            markersize=3,
            label=f"{factor}={level}",
        )
    ax.set_xlabel("epoch (from 0)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a run validated in one epoch drew 1.900 ... 2.100
    ax.set_ylabel(metric)
    ax.legend()
    ax.set_title(f"{metric} by {factor}")
    figure.tight_layout()
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


def effect_plot(effects: dict[str, dict], metric: str, lower_is_better: bool, path: Path) -> None:
    """effects: name -> {"diff", "ci95"} (nmt.sweep.effects.fit); one point per effect with its 95%
    interval as a bar; an effect without an interval is drawn as a hollow point, never as a zero-width
    bar; the zero line is "no effect"."""
    labels = list(effects)
    positions = list(range(len(labels)))
    figure, ax = plt.subplots(figsize=(7, 0.5 * len(labels) + 1.5))
    with_ci = [i for i, name in enumerate(labels) if not math.isnan(effects[name]["ci95"])]
    without = [i for i in positions if i not in with_ci]
    if with_ci:
        ax.errorbar(
            [effects[labels[i]]["diff"] for i in with_ci],
            with_ci,
            xerr=[effects[labels[i]]["ci95"] for i in with_ci],
            fmt="o",
            capsize=4,
            color="tab:blue",
            label="estimate, 95% interval",
        )
    if without:
        ax.plot(
            [effects[labels[i]]["diff"] for i in without],
            without,
            "o",
            mfc="none",
            color="tab:red",
            label="no interval",
        )
    ax.axvline(0.0, color="grey", linewidth=1, linestyle="--")
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()
    ax.legend(loc="best", fontsize=8)
    ax.set_xlabel(f"difference in {metric} ({'lower' if lower_is_better else 'higher'} is better)")
    ax.set_title(f"main effects on {metric}")
    figure.tight_layout()
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)
