"""Statistics of a sweep: rankings with confidence intervals, main effects, interactions, significance.

Input: one record per run, ``{"factors": {name: level}, "seed": int, "metrics": {name: value}, ...}``.
Every interval is a two-sided 95% interval from Student's t distribution.
"""

import math
import statistics
from collections.abc import Sequence
from itertools import combinations


def t_critical(df: float) -> float:
    """The exact two-sided 95% quantile t_{0.975, df} (Welch's fractional df included)."""
    if df < 1:
        return math.nan
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (nan with fewer than two values)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan
    return mean, t_critical(n - 1) * statistics.stdev(values) / math.sqrt(n)


def one_sample_p(values: Sequence[float]) -> float:
    """Two-sided p-value of Student's one-sample t-test of mean zero: the test that matches
    :func:`mean_ci` (p < 0.05 exactly when the 95% interval excludes zero). nan with fewer than two values."""
    n = len(values)
    if n < 2:
        return math.nan
    mean, std = statistics.fmean(values), statistics.stdev(values)
    if std == 0:
        return 1.0 if mean == 0 else 0.0
    from scipy.stats import t

    return float(2 * t.sf(abs(mean) / (std / math.sqrt(n)), n - 1))


def welch_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """mean(a) - mean(b) and the half-width of its 95% interval (Welch's unequal-variance t)."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return diff, math.nan
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return diff, t_critical(df) * math.sqrt(va + vb)


def level_order(level: str) -> tuple:
    """Sort key for factor levels: numbers by value (2 before 10), then other names alphabetically."""
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


def factor_names(records: Sequence[dict]) -> list[str]:
    """Factors that take more than one level across the records (seed excluded)."""
    names = sorted({k for r in records for k in r["factors"]})
    return [n for n in names if len({str(r["factors"].get(n)) for r in records}) > 1]


def _cell(record: dict, factors: Sequence[str]) -> tuple:
    return tuple(str(record["factors"].get(f)) for f in factors)


def lower_is_better(metric: str) -> bool:
    """Perplexities and losses improve downwards; BLEU, chrF and accuracies upwards."""
    return metric.endswith(("ppl", "loss"))


def ranking(records: Sequence[dict], metric: str) -> list[dict]:
    """One row per cell (combination of factor levels): n, mean, CI half-width, std; best first."""
    factors = factor_names(records)
    cells: dict[tuple, list[float]] = {}
    for r in records:
        if r["metrics"].get(metric) is not None:
            cells.setdefault(_cell(r, factors), []).append(r["metrics"][metric])
    rows = []
    for cell, values in cells.items():
        mean, ci = mean_ci(values)
        std = statistics.stdev(values) if len(values) > 1 else math.nan
        rows.append({**dict(zip(factors, cell, strict=True)), "n": len(values), "mean": mean, "ci95": ci, "std": std})
    sign = 1 if lower_is_better(metric) else -1
    return sorted(rows, key=lambda row: sign * row["mean"])


def main_effects(records: Sequence[dict], metric: str) -> dict[str, dict]:
    """Per factor: for each level mean, std, min, max, n over all runs at that level (description); and
    for each level but the first, the factorial main effect against the first level (:func:`factorial_effect`)."""
    effects = {}
    for factor in factor_names(records):
        by_level: dict[str, list[float]] = {}
        for r in records:
            if r["metrics"].get(metric) is not None:
                by_level.setdefault(str(r["factors"].get(factor)), []).append(r["metrics"][metric])
        levels = sorted(by_level, key=level_order)
        rows = {
            level: {
                "n": len(by_level[level]),
                "mean": statistics.fmean(by_level[level]),
                "std": statistics.stdev(by_level[level]) if len(by_level[level]) > 1 else math.nan,
                "min": min(by_level[level]),
                "max": max(by_level[level]),
            }
            for level in levels
        }
        differences = {
            f"{level} - {levels[0]}": factorial_effect(records, metric, factor, level, levels[0])
            for level in levels[1:]
        }
        effects[factor] = {"levels": rows, "differences": differences}
    return effects


def factorial_effect(records: Sequence[dict], metric: str, factor: str, level: str, reference: str) -> dict:
    """The main effect of ``factor`` (``level`` - ``reference``) as a factorial design defines it: the
    difference of the two levels within each combination of the other factors, averaged over those
    combinations (each counts once, however many runs it has).

    Seeds are paired: a seed that ran in every cell involved gives one value (its difference, averaged
    over the other factors' combinations); the 95% t-interval and the t-test's p-value are over those
    values. Seeds missing from some cell (failed runs) are left out and reported: ``unbalanced`` lists the
    cells short of them.
    """
    others = [f for f in factor_names(records) if f != factor]
    values: dict[tuple, dict[int, float]] = {}
    for r in records:
        if r["metrics"].get(metric) is not None:
            values.setdefault(_cell(r, [factor, *others]), {})[r["seed"]] = r["metrics"][metric]
    combos = sorted({cell[1:] for cell in values})
    cells = [values.get((side, *combo), {}) for combo in combos for side in (level, reference)]
    all_seeds = set().union(*cells) if cells else set()
    seeds = sorted(set.intersection(*(set(c) for c in cells))) if cells else []
    unbalanced = [
        f"{factor}={side}, " + ", ".join(f"{o}={v}" for o, v in zip(others, combo, strict=True))
        for combo in combos
        for side in (level, reference)
        if set(values.get((side, *combo), {})) != all_seeds
    ]
    per_seed = [statistics.fmean(values[(level, *c)][s] - values[(reference, *c)][s] for c in combos) for s in seeds]
    if not per_seed:
        return {"diff": math.nan, "ci95": math.nan, "p": math.nan, "seeds": 0, "unbalanced": unbalanced}
    diff, ci = mean_ci(per_seed)
    return {"diff": diff, "ci95": ci, "p": one_sample_p(per_seed), "seeds": len(per_seed), "unbalanced": unbalanced}


def interactions(records: Sequence[dict], metric: str) -> dict[tuple[str, str], dict[tuple[str, str], float]]:
    """For every pair of factors: the mean metric of each pair of levels."""
    tables = {}
    for a, b in combinations(factor_names(records), 2):
        cells: dict[tuple[str, str], list[float]] = {}
        for r in records:
            if r["metrics"].get(metric) is not None:
                key = (str(r["factors"].get(a)), str(r["factors"].get(b)))
                cells.setdefault(key, []).append(r["metrics"][metric])
        tables[(a, b)] = {key: statistics.fmean(v) for key, v in cells.items()}
    return tables


def interaction_effect(records: Sequence[dict], metric: str, a: str, b: str) -> dict | None:
    """The two-way interaction of two two-level factors: how much the effect of ``a`` changes when ``b``
    changes, (a1b1 - a1b0) - (a0b1 - a0b0), within each combination of the other factors and averaged
    over them; seeds paired as in :func:`factorial_effect`. None unless both factors have two levels."""
    levels_a = sorted({str(r["factors"].get(a)) for r in records}, key=level_order)
    levels_b = sorted({str(r["factors"].get(b)) for r in records}, key=level_order)
    if len(levels_a) != 2 or len(levels_b) != 2:
        return None
    others = [f for f in factor_names(records) if f not in (a, b)]
    values: dict[tuple, dict[int, float]] = {}
    for r in records:
        if r["metrics"].get(metric) is not None:
            values.setdefault(_cell(r, [a, b, *others]), {})[r["seed"]] = r["metrics"][metric]
    combos = sorted({cell[2:] for cell in values})
    (a0, a1), (b0, b1) = levels_a, levels_b
    corners = [(x, y, *c) for c in combos for x in (a0, a1) for y in (b0, b1)]
    seeds = sorted(set.intersection(*(set(values.get(k, {})) for k in corners))) if corners else []

    def contrast(seed: int, c: tuple) -> float:
        v = {k: values[k][seed] for k in ((a1, b1, *c), (a1, b0, *c), (a0, b1, *c), (a0, b0, *c))}
        return v[(a1, b1, *c)] - v[(a1, b0, *c)] - v[(a0, b1, *c)] + v[(a0, b0, *c)]

    per_seed = [statistics.fmean(contrast(s, c) for c in combos) for s in seeds]
    if not per_seed:
        return {"diff": math.nan, "ci95": math.nan, "p": math.nan, "seeds": 0, "levels": (levels_a, levels_b)}
    diff, ci = mean_ci(per_seed)
    return {
        "diff": diff,
        "ci95": ci,
        "p": one_sample_p(per_seed),
        "seeds": len(per_seed),
        "levels": (levels_a, levels_b),
    }


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error rate)."""
    order = sorted(p_values, key=p_values.get)
    adjusted, running = {}, 0.0
    for rank, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p_values[key]))
        adjusted[key] = running
    return adjusted
