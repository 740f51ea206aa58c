"""Statistics of a sweep: rankings with confidence intervals, main effects, interactions, significance.

Input: one record per run, ``{"factors": {name: level}, "seed": int, "metrics": {name: value}, ...}``.
Every interval is a two-sided 95% interval from Student's t distribution.
"""

import math
import statistics
from collections.abc import Sequence
from itertools import combinations

# two-sided 95% critical values of Student's t for 1..30 degrees of freedom; 1.96 beyond
_T95 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def t_critical(df: float) -> float:
    """t_{0.975, df}; fractional df (Welch) are rounded down, the conservative side."""
    if df < 1:
        return math.nan
    return _T95[int(df) - 1] if df <= 30 else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (nan with fewer than two values)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan
    return mean, t_critical(n - 1) * statistics.stdev(values) / math.sqrt(n)


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


def factor_names(records: Sequence[dict]) -> list[str]:
    """Factors that take more than one level across the records (seed excluded)."""
    names = sorted({k for r in records for k in r["factors"]})
    return [n for n in names if len({str(r["factors"].get(n)) for r in records}) > 1]


def _cell(record: dict, factors: Sequence[str]) -> tuple:
    return tuple(str(record["factors"].get(f)) for f in factors)


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
    return sorted(rows, key=lambda row: -row["mean"])


def main_effects(records: Sequence[dict], metric: str) -> dict[str, dict]:
    """Per factor: for each level mean, std, min, max, n over all runs at that level; and for each level
    but the first, the difference to the first level with its 95% CI."""
    effects = {}
    for factor in factor_names(records):
        by_level: dict[str, list[float]] = {}
        for r in records:
            if r["metrics"].get(metric) is not None:
                by_level.setdefault(str(r["factors"].get(factor)), []).append(r["metrics"][metric])
        levels = sorted(by_level)
        rows = {
            level: {
                "n": len(v),
                "mean": statistics.fmean(v),
                "std": statistics.stdev(v) if len(v) > 1 else math.nan,
                "min": min(v),
                "max": max(v),
            }
            for level, v in by_level.items()
        }
        reference = levels[0]
        differences = {}
        for level in levels[1:]:
            diff, ci = welch_difference(by_level[level], by_level[reference])
            differences[f"{level} - {reference}"] = {"diff": diff, "ci95": ci}
        effects[factor] = {"levels": rows, "differences": differences}
    return effects


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


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], references: Sequence[str], n_samples: int = 1000, seed: int = 12345
) -> float:
    """p-value of sacreBLEU's paired bootstrap resampling test (Koehn 2004) of ``system`` against
    ``baseline`` on the same references (BLEU)."""
    import os

    import sacrebleu
    from sacrebleu.significance import PairedTest

    os.environ["SACREBLEU_SEED"] = str(seed)  # sacreBLEU reads its resampling seed from here
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))],
        {"BLEU": sacrebleu.metrics.BLEU()},
        [list(references)],
        test_type="bs",
        n_samples=n_samples,
    )
    _, scores = test()
    return float(scores["BLEU"][1].p_value)
