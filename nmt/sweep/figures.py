"""Figures of a sweep report: main effects, interaction heatmaps, training curves."""

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402


def interaction_heatmap(table: dict[tuple[str, str], float], names: tuple[str, str], metric: str, path: Path) -> None:
    """Mean metric for each pair of levels of two factors."""
    rows = sorted({a for a, _ in table})
    columns = sorted({b for _, b in table})
    values = [[table.get((r, c), float("nan")) for c in columns] for r in rows]
    figure, ax = plt.subplots(figsize=(1.6 * len(columns) + 2.5, 1.0 * len(rows) + 1.8))
    image = ax.imshow(values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(names[1])
    ax.set_ylabel(names[0])
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="white", fontsize=9)
    figure.colorbar(image, ax=ax, label=metric)
    ax.set_title(f"{metric}: {names[0]} x {names[1]}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def training_curves(curves: dict[str, list[list[tuple[int, float]]]], factor: str, metric: str, path: Path) -> None:
    """curves: level -> runs -> [(epoch, value)]; each run thin, the mean per level thick."""
    figure, ax = plt.subplots(figsize=(6.5, 4))
    for color, (level, runs) in zip(
        plt.rcParams["axes.prop_cycle"].by_key()["color"], sorted(curves.items()), strict=False
    ):
        by_epoch: dict[int, list[float]] = {}
        for run in runs:
            ax.plot([e for e, _ in run], [v for _, v in run], color=color, alpha=0.25, linewidth=0.8)
            for epoch, value in run:
                by_epoch.setdefault(epoch, []).append(value)
        epochs = sorted(by_epoch)
        ax.plot(
            epochs,
            [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs],
            color=color,
            linewidth=2,
            label=f"{factor}={level}",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.legend()
    ax.set_title(f"{metric} by {factor}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def effect_plot(effects: dict[str, dict], metric: str, path: Path) -> None:
    """effects: factor -> {"differences": {"level - reference": {"diff", "ci95"}}} (analysis.main_effects);
    one horizontal bar per contrast with its 95% interval; the zero line is "no effect"."""
    labels, diffs, errors = [], [], []
    for factor, effect in effects.items():
        for name, d in effect["differences"].items():
            labels.append(f"{factor}: {name}")
            diffs.append(d["diff"])
            errors.append(0.0 if math.isnan(d["ci95"]) else d["ci95"])
    figure, ax = plt.subplots(figsize=(7, 0.5 * len(labels) + 1.5))
    positions = list(range(len(labels)))
    ax.errorbar(diffs, positions, xerr=errors, fmt="o", capsize=4, color="tab:blue")
    ax.axvline(0.0, color="grey", linewidth=1, linestyle="--")
    ax.set_yticks(positions, labels)
    ax.invert_yaxis()
    ax.set_xlabel(f"difference in {metric} (95% interval over paired seeds)")
    ax.set_title(f"main effects on {metric}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
