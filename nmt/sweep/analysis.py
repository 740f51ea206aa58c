"""Statistics of a sweep's cells: rankings with confidence intervals over seeds, each cell compared with
the baseline by a test over seeds, Holm's adjustment, and the order of levels.

Input: one record per finished run, ``{"factors": {name: level}, "seed": int, "metrics": {name: value}}``.
Seeds are the replicates: a configuration is compared with another by the scatter of its runs, not by
the scatter of test sentences within one run. Every interval is a two-sided 95% interval from Student's
t distribution. Factorial effects and interactions are in :mod:`nmt.sweep.effects`.
"""

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from itertools import combinations, product

from nmt.metrics import lower_is_better, metric_range

SHARED_TEST_MEASURE = (
    "compare test_bleu_tok_lc (lowercased for every run; report_metric=test_bleu_tok_lc), or runs of one kind"
)


def check_same_measure(records: Sequence[dict], metric: str, advice: str = SHARED_TEST_MEASURE) -> None:
    """The BLEU or chrF of runs that write lowercase text (scored ignoring case) and of runs that do not are
    different measures: comparing them is an error that says what to compare instead (``advice``). So are
    lowercased tokenised BLEUs that tokenised differently (their signatures; none: hyphens split)."""
    if "tok_lc" in metric:
        # the definition without the tokenizers' versions: scores of one definition compare across releases
        kinds = Counter(
            str(r.get("bleu_tok_lc_signature") or "none (Moses, hyphens split)").split("|sacre")[0] for r in records
        )
        if len(kinds) > 1:
            listing = "; ".join(f"{n} run{'s' * (n > 1)}: {kind}" for kind, n in sorted(kinds.items()))
            raise ValueError(
                f"{metric}: the runs' lowercased tokenised BLEUs tokenised differently ({listing}): compare runs "
                "of one kind, or train the others again (python -m nmt.evaluation.score prints a run's saved "
                "test outputs' score under the current definition, to compare by hand)"
            )
        return
    if not any(name in metric for name in ("bleu", "chrf")):
        return
    lowercase = sum(bool(r.get("lowercase")) for r in records)
    if 0 < lowercase < len(records):
        raise ValueError(
            f"{metric}: {lowercase} of {len(records)} runs write lowercase text and were scored ignoring case, "
            f"the others case-sensitively, so their {metric} are different measures: {advice}"
        )


def t_critical(df: float) -> float:
    """The exact two-sided 95% quantile t_{0.975, df} (Welch's fractional df included)."""
    if df < 1:
        return math.nan
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def t_p_value(t_value: float, df: float) -> float:
    """Two-sided p of Student's t statistic with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(2 * t.sf(abs(t_value), df))


def f_p_value(f_value: float, df_num: int, df_den: int) -> float:
    """Upper-tail p of Fisher's F statistic with (``df_num``, ``df_den``) degrees of freedom."""
    from scipy.stats import f

    return float(f.sf(f_value, df_num, df_den))


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (nan with fewer than two values)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan
    return mean, t_critical(n - 1) * statistics.stdev(values) / math.sqrt(n)


def past_range(mean: float, half: float, metric: str) -> str:
    """Where a mean's 95% interval reaches past the values ``metric`` can take (``"below 0"``,
    ``"above 100"``), else ``""``: such an interval says the seeds are too few or too scattered (a run far from
    the others) for the t interval to describe them, not that a score past the bound is plausible."""
    if math.isnan(half):
        return ""
    low, high = metric_range(metric)
    return "; ".join(
        f"{side} {bound:g}"
        for side, bound, past in (("below", low, mean - half < low), ("above", high, mean + half > high))
        if past
    )


def welch_test(a: Sequence[float], b: Sequence[float]) -> dict:
    """mean(a) - mean(b) with the half-width of its 95% interval, Welch's degrees of freedom and the
    two-sided p-value of Welch's unequal-variance t-test (the runs of each side are its replicates).
    Interval and p are nan when either side has fewer than two runs."""
    diff = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "ci95": math.nan, "df": math.nan, "p": math.nan}
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:  # no scatter on either side: the seeds varied nothing, so they test nothing, not even a
        # difference of 0 (scipy's ttest_ind gives nan too); the report shows "–", as its docs say
        return {"diff": diff, "ci95": 0.0, "df": math.inf, "p": math.nan}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    se = math.sqrt(va + vb)
    return {"diff": diff, "ci95": t_critical(df) * se, "df": df, "p": t_p_value(diff / se, df)}


def paired_test(a: dict, b: dict) -> dict:
    """mean(a[s] - b[s]) over the seeds ``s`` both ran, with the half-width of its 95% interval and the two-sided
    p of the paired t-test (``n``: those seeds). Runs of one seed share their batches' order (and, where the
    shapes agree, their initial weights), so a seed is a block, as in the factorial's fit (nmt/sweep/effects.py):
    what it gives every candidate alike leaves the test. Interval and p are nan below two shared seeds; one
    difference on every seed gives p 0 (none: 1)."""
    shared = sorted(set(a) & set(b), key=str)
    # rounded as same_mean compares means: one shift on every seed has no scatter, whatever the floats' last bits
    differences = [round(a[s] - b[s], 9) for s in shared]
    if len(differences) < 2:
        diff = statistics.fmean(differences) if differences else math.nan
        return {"diff": diff, "ci95": math.nan, "df": math.nan, "p": math.nan, "n": len(differences)}
    diff, sd, df = statistics.fmean(differences), statistics.stdev(differences), len(differences) - 1
    if sd == 0:  # every seed moved by the same amount: t is infinite, as scipy's ttest_rel gives (p 0), or 0/0
        return {"diff": diff, "ci95": 0.0, "df": df, "p": 1.0 if diff == 0 else 0.0, "n": len(differences)}
    se = sd / math.sqrt(len(differences))
    return {"diff": diff, "ci95": t_critical(df) * se, "df": df, "p": t_p_value(diff / se, df), "n": len(differences)}


def level_order(level: str, written: Sequence[str] = ()) -> tuple:
    """Sort key for factor levels: numbers by value (2 before 10); other names in the order the sweep
    wrote them (``written``), else alphabetically."""
    try:
        return (0, float(level), 0, "")
    except ValueError:
        position = list(written).index(level) if level in written else len(written)
        return (1, 0.0, position, level)


def ordered_levels(records: Sequence[dict], factor: str, written: Sequence[str] = ()) -> list[str]:
    return sorted({str(r["factors"].get(factor)) for r in records}, key=lambda v: level_order(v, written))


def factor_names(records: Sequence[dict]) -> list[str]:
    """Factors that take more than one level across the records (seed excluded)."""
    names = sorted({k for r in records for k in r["factors"]})
    return [n for n in names if len({str(r["factors"].get(n)) for r in records}) > 1]


def cell_of(record: dict, factors: Sequence[str]) -> tuple:
    return tuple(str(record["factors"].get(f)) for f in factors)


def cell_values(records: Sequence[dict], metric: str, factors: Sequence[str]) -> dict[tuple, list[float]]:
    """Each cell's values of ``metric``, one per finished run that has it."""
    cells: dict[tuple, list[float]] = {}
    for r in records:
        if r["metrics"].get(metric) is not None:
            cells.setdefault(cell_of(r, factors), []).append(float(r["metrics"][metric]))
    return cells


def ranking(records: Sequence[dict], metric: str) -> list[dict]:
    """One row per cell (combination of factor levels): n, mean, CI half-width, std; best first (the
    metric's own direction)."""
    factors = factor_names(records)
    rows = []
    for cell, values in cell_values(records, metric, factors).items():
        mean, ci = mean_ci(values)
        std = statistics.stdev(values) if len(values) > 1 else math.nan
        row = {**dict(zip(factors, cell, strict=True)), "n": len(values), "mean": mean, "ci95": ci, "std": std}
        rows.append({**row, "scores": list(values)})  # its runs' own (a test of equal scatter reads them)
    sign = 1 if lower_is_better(metric) else -1
    return sorted(rows, key=lambda row: sign * row["mean"])


def same_mean(a: float, b: float) -> bool:
    """Whether two means over seeds are equal. Scores recorded to a few decimals whose sums are equal in
    decimal arithmetic can differ in a float's last bits (fmean of 30.55, 29.94, 29.03 is 29.840000000000003,
    of 29.52, 30.54, 29.46 29.84): that is a tie, not an order."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def ranks(rows: Sequence[dict]) -> list[int]:
    """Competition ranks of a ranking's rows (1, 1, 3): cells with equal means share the better rank, so a
    tie is not read as an order."""
    out: list[int] = []
    for i, row in enumerate(rows):
        out.append(out[-1] if i and same_mean(row["mean"], rows[i - 1]["mean"]) else i + 1)
    return out


def compare_with_baseline(records: Sequence[dict], metric: str, factors: Sequence[str], baseline: tuple) -> dict:
    """Every other cell against the baseline cell by Welch's t-test over their runs: cell -> welch_test."""
    cells = cell_values(records, metric, factors)
    base = cells.get(tuple(baseline))
    if not base:
        return {}
    return {cell: welch_test(values, base) for cell, values in cells.items() if cell != tuple(baseline)}


def separated(rows: Sequence[dict]) -> bool:
    """Whether every two neighbours of a ranking have 95% intervals that do not overlap (whatever the
    metric's direction); False when any interval is missing."""
    for first, second in zip(rows, rows[1:], strict=False):
        if math.isnan(first["ci95"]) or math.isnan(second["ci95"]):
            return False
        if abs(first["mean"] - second["mean"]) <= first["ci95"] + second["ci95"]:
            return False
    return True


def level_summary(records: Sequence[dict], metric: str, factor: str, written: Sequence[str] = ()) -> dict:
    """Per level of ``factor``: runs; the mean over the other factors' cells, each cell's mean counted once (a
    cell that lost seeds does not pull the level's mean); std, min, max over every run at that level (a
    description; the effects are in nmt.sweep.effects); ``cells`` it has and ``missing``, the combinations of
    the other factors' levels that have none of its runs (named ``key=level ...``): a combination with no run
    still biases its mean toward those it has, which the fit's estimate does not, so the report says so."""
    by_level: dict[str, list[float]] = {}
    for r in records:
        if r["metrics"].get(metric) is not None:
            by_level.setdefault(str(r["factors"].get(factor)), []).append(float(r["metrics"][metric]))
    factors = factor_names(records)
    others = [f for f in factors if f != factor]
    cell_means: dict[str, list[float]] = {}
    combinations_had: dict[str, set[tuple]] = {}
    for cell, values in cell_values(records, metric, factors).items():
        level = cell[factors.index(factor)] if factor in factors else str(records[0]["factors"].get(factor))
        cell_means.setdefault(level, []).append(statistics.fmean(values))
        combinations_had.setdefault(level, set()).add(
            tuple(c for f, c in zip(factors, cell, strict=True) if f != factor)
        )
    other_levels = [  # each other factor's levels among the runs with the metric, in their order
        sorted({cell[factors.index(f)] for cell in cell_values(records, metric, factors)}, key=level_order)
        for f in others
    ]
    every = list(product(*other_levels))
    return {
        level: {
            "n": len(values),
            "mean": statistics.fmean(cell_means[level]),
            "std": statistics.stdev(values) if len(values) > 1 else math.nan,
            "min": min(values),
            "max": max(values),
            "cells": len(cell_means[level]),
            "missing": [
                " ".join(f"{f}={c}" for f, c in zip(others, combo, strict=True))
                for combo in every
                if combo not in combinations_had[level]
            ],
        }
        for level, values in sorted(by_level.items(), key=lambda item: level_order(item[0], written))
    }


def interactions(records: Sequence[dict], metric: str) -> dict[tuple[str, str], dict[tuple[str, str], float]]:
    """For every pair of factors: the mean metric of each pair of levels over the other factors' combinations,
    each cell's mean counted once (a cell that lost seeds weighs as much as the others: a plain mean over the
    runs then showed an interaction that the fit, and the data, do not have)."""
    factors = factor_names(records)
    cells = {cell: statistics.fmean(v) for cell, v in cell_values(records, metric, factors).items()}
    tables = {}
    for a, b in combinations(factors, 2):
        ia, ib = factors.index(a), factors.index(b)
        pairs: dict[tuple[str, str], list[float]] = {}
        for cell, mean in cells.items():
            pairs.setdefault((cell[ia], cell[ib]), []).append(mean)
        tables[(a, b)] = {key: statistics.fmean(v) for key, v in pairs.items()}
    return tables


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error rate). A nan (no
    test possible) stays nan and is not one of the family: sorted among numbers it made the result depend on
    the dict's order."""
    tested = {key: p for key, p in p_values.items() if not math.isnan(p)}
    order = sorted(tested, key=tested.get)
    adjusted, running = {}, 0.0
    for rank, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * tested[key]))
        adjusted[key] = running
    return {key: adjusted.get(key, math.nan) for key in p_values}
