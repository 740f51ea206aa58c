"""Figures of a sweep report: main effects, interaction heatmaps, training curves."""

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from nmt.sweep.document import fmt_p  # noqa: E402
from nmt.utils.io import atomic_save_figure, literal_text  # noqa: E402


def _wrapped(labels: list[str], width: int = 48) -> list[str]:
    """Labels wrapped at ``width`` characters: a level that is a long path made labels wider than the figure,
    which is then sized to the widest line (:func:`_widest`)."""
    return [textwrap.fill(str(label), width, break_on_hyphens=False) or str(label) for label in labels]


def _widest(labels: list[str]) -> int:
    return max((len(line) for label in labels for line in label.splitlines()), default=0)


def _tallest(labels: list[str]) -> int:
    return max((label.count("\n") + 1 for label in labels), default=1)


@literal_text
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
    row_labels, column_labels = _wrapped(rows), _wrapped(columns, 24)
    size = (
        1.6 * len(columns) + 2.5 + 0.07 * _widest(row_labels),
        1.0 * len(rows) + 1.8 + 0.15 * _tallest(column_labels),
    )
    figure, ax = plt.subplots(figsize=size, layout="constrained")  # room for long levels (paths), title included
    image = ax.imshow(values, cmap="viridis_r" if lower_is_better else "viridis", aspect="auto")
    ax.set_xticks(range(len(columns)), column_labels)
    ax.set_yticks(range(len(rows)), row_labels)
    ax.set_xlabel(names[1])
    ax.set_ylabel(names[0])
    for i, row in enumerate(values):
        for j, value in enumerate(row):
            # dark on the bright (better) end of the colour map, where white could not be read
            bright = not math.isnan(value) and abs(float(image.norm(value)) - float(lower_is_better)) > 0.65
            text = "no run" if math.isnan(value) else f"{value:.2f}"
            ax.text(j, i, text, ha="center", va="center", color="black" if bright else "white", fontsize=9)
    figure.colorbar(image, ax=ax, label=f"{metric} ({'lower' if lower_is_better else 'higher'} is better)")
    ax.set_title(f"{metric}: {names[0]} x {names[1]}")
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


@literal_text
def training_curves(
    curves: dict[str, list[list[tuple[int, float]]]],
    factor: str,
    metric: str,
    path: Path,
    order: list[str] = (),
    unit: str = "epoch",
) -> None:
    """curves: level -> runs -> [(epoch, value)] (or [(update, value)], ``unit="update"``); each run thin, and
    thick the mean per level at the epochs (updates) that every run of the level reached (a mean over the
    runs still going would favour the level whose weak runs stopped early)."""
    ordered = sorted(curves.items(), key=lambda item: list(order).index(item[0]) if item[0] in order else len(order))
    labels = _wrapped([f"{factor}={level}" for level, _ in ordered], 60)
    # the legend below the plot, the figure taller by its rows (ten levels squeezed the plot to a strip)
    columns = 2 if len(labels) > 4 and _widest(labels) <= 30 else 1
    rows = sum(max(label.count("\n") + 1 for label in labels[i : i + columns]) for i in range(0, len(labels), columns))
    figure, ax = plt.subplots(figsize=(6.5, 3.6 + 0.2 * rows), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, (_, runs)) in enumerate(zip(labels, ordered, strict=True)):
        # past the colours (ten), a level takes the first colours again with another line style
        color, style = colours[i % len(colours)], ("-", "--", ":", "-.")[i // len(colours) % 4]
        by_epoch: dict[int, list[float]] = {}
        for run in runs:
            # markers: a run validated once is a point, which a line alone does not draw
            ax.plot([e for e, _ in run], [v for _, v in run], color=color, ls=style, alpha=0.25, lw=0.8, marker=".")
            for epoch, value in run:
                by_epoch.setdefault(epoch, []).append(value)
        epochs = sorted(e for e, values in by_epoch.items() if len(values) == len(runs))
        ax.plot(
            epochs,
            [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs],
            color=color,
            linestyle=style,
            linewidth=2,
            marker="o",
            markersize=3,
            label=label,
        )
    ax.set_xlabel("epoch (from 0)" if unit == "epoch" else "update")
    validated = sorted({epoch for _, runs in ordered for run in runs for epoch, _ in run})
    if (
        len(validated) <= 12
    ):  # the epochs (updates) themselves: with one in view, an integer locator drew -0.04 ... 0.04
        ax.set_xticks(validated)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(metric)
    figure.legend(loc="outside lower center", fontsize=8, ncols=columns)  # inside, long levels covered the curves
    ax.set_title(f"{metric} by {factor}")
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


@literal_text
def effect_plot(effects: dict[str, dict], metric: str, lower_is_better: bool, path: Path) -> None:
    """effects: name -> {"diff", "ci95"} (nmt.sweep.effects.fit), and optionally "p_holm"; one point per
    effect with its 95% interval as a bar, unadjusted for the other tests, so each p adjusted by Holm, which
    the findings read, is written beside its point (an interval clear of zero is not a finding by itself); an
    effect without an interval is drawn as a hollow point, never as a zero-width bar; the zero line is "no
    effect"."""
    labels = _wrapped(list(effects))
    positions = list(range(len(labels)))
    lines = sum(label.count("\n") + 1 for label in labels)
    figure, ax = plt.subplots(
        figsize=(5 + 0.07 * _widest(labels), 0.3 * lines + 0.2 * len(labels) + 2.0), layout="constrained"
    )
    effects = dict(zip(labels, effects.values(), strict=True))
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
            label="estimate, 95% interval (unadjusted)",
        )
    for i, name in enumerate(labels):
        if "p_holm" in effects[name]:
            ax.annotate(
                f"p (Holm) {fmt_p(effects[name]['p_holm'])}",
                (1.0, i),
                xycoords=("axes fraction", "data"),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
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
    figure.legend(loc="outside lower center", ncols=2, fontsize=8)  # inside, it covered a point
    ax.set_xlabel(f"difference in {metric} ({'lower' if lower_is_better else 'higher'} is better)")
    ax.set_title(f"main effects on {metric}")
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


@literal_text
def search_history(trials: list[tuple[int, float]], metric: str, lower_is_better: bool, path: Path) -> None:
    """A search's trials in the order asked, (trial number, score): each trial a point, and the best score so
    far as a step line (Optuna's optimisation history); a failed trial has no score and is not drawn."""
    figure, ax = plt.subplots(figsize=(6.5, 3.6), layout="constrained")
    numbers, values = [n for n, _ in trials], [v for _, v in trials]
    ax.plot(numbers, values, "o", color="tab:blue", alpha=0.7, label="a trial's score")
    best, so_far = [], None
    for value in values:
        so_far = value if so_far is None else (min if lower_is_better else max)(so_far, value)
        best.append(so_far)
    ax.step(numbers, best, where="post", color="tab:red", label="best so far")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial (in the order asked)")
    ax.set_ylabel(f"{metric} ({'lower' if lower_is_better else 'higher'} is better)")
    ax.legend(fontsize=8)
    ax.set_title(f"{metric} by trial")
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)


@literal_text
def search_slices(
    points: dict[str, list[tuple[object, float, int]]],
    log_keys: set[str],
    metric: str,
    lower_is_better: bool,
    path: Path,
) -> None:
    """One panel per searched key, (value, score, trial number) each: the score against the key's value,
    coloured by the trial's number (later trials are the sampler's choices from the scores before them), the
    best trial ringed; a key searched on a log scale drawn on one, a choice of words as its words."""
    columns = min(len(points), 3)
    rows = math.ceil(len(points) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.6 * columns + 1.0, 3.2 * rows), layout="constrained")
    axes = list(getattr(axes, "flat", [axes]))
    last = max((n for found in points.values() for _, _, n in found), default=0)
    pick = min if lower_is_better else max
    best = pick((p for found in points.values() for p in found), key=lambda p: p[1], default=None)
    drawn = None
    for ax, (key, found) in zip(axes, points.items(), strict=False):
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v, _, _ in found)
        words = [] if numeric else sorted({str(v) for v, _, _ in found})
        xs = [v if numeric else words.index(str(v)) for v, _, _ in found]
        drawn = ax.scatter(
            xs,
            [s for _, s, _ in found],
            c=[n for _, _, n in found],
            cmap="viridis",
            vmin=0,
            vmax=max(last, 1),
            edgecolors="none",
        )
        if best is not None:
            at = [x for x, (_, s, n) in zip(xs, found, strict=True) if n == best[2]]
            ax.plot(at, [best[1]] * len(at), "o", mfc="none", mec="tab:red", ms=11, mew=1.5)
        if key in log_keys and numeric:
            ax.set_xscale("log")
            # plain numbers at 1, 2 and 5 of each decade: the default labels are mathtext, which the data's
            # literal text (above) would show as written
            values = [v for v, _, _ in found if v > 0]
            decades = math.log10(max(values) / min(values)) if values else 0.0
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0,) if decades > 1.2 else (1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        if words:
            ax.set_xticks(range(len(words)), _wrapped(words, 16))
        ax.set_xlabel(key)
        ax.set_ylabel(metric)
    for ax in axes[len(points) :]:
        ax.set_visible(False)
    if drawn is not None:
        bar = figure.colorbar(drawn, ax=axes[: len(points)], label="trial")
        bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    figure.suptitle(
        f"{metric} against each searched setting ({'lower' if lower_is_better else 'higher'} is better; "
        "ringed: the best)",
        fontsize=10,
    )
    atomic_save_figure(figure, path, dpi=100)
    plt.close(figure)
