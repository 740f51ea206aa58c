"""Main effects and two-way interactions of a factorial sweep, from one least-squares fit to every
finished run (each seed a replicate in every cell and a block across cells).

Coding: a factor with levels L0 (its reference, the baseline's level) .. L(k-1) gets k - 1 columns; the
column of level Lj is 1 - 1/k at Lj and -1/k elsewhere (for two levels: +1/2 and -1/2). Interaction
columns are products of their factors' columns. With that coding, in a model holding every interaction
of the design, a main-effect coefficient is the difference between level Lj and L0 within each
combination of the other factors, averaged over those combinations (each combination counts once,
however many runs it has), and a two-way coefficient (a: Lj, b: Lm) is how much a's effect changes when b
moves from its reference to Lm: (a_j b_m - a_j b_0) - (a_0 b_m - a_0 b_0), averaged over the others.

The model: every interaction of the design when every cell has a run and there are replicates (the error
is then what remains of the scatter of seeds within cells once each seed's shared part is taken out);
otherwise main effects and two-way interactions (higher interactions pooled into the error), or main
effects only; the report names the model. In the model of every interaction, failed runs only make the
design unbalanced: every finished run counts, and the coefficients keep their meaning. A model that leaves
interactions out takes them to be zero: its main effects are still averages over the combinations of the
other factors when every cell has the same number of runs, but where cells have none (every seed of a
combination failed, or was never run) or unequal numbers, they are its estimates under that assumption,
which the runs cannot test (``averaged`` says which, ``empty_cells`` names the cells without a run).

Seeds as blocks: the runs of one seed share more than a number. A seed fixes the order of the training
batches, so where the factors leave the data and the batch size alone, seed s of one cell and seed s of
another see the same batches in the same order (a randomised complete block design, the seed the block;
where they do not, blocking stays unbiased and costs only its degrees of freedom). The model therefore
holds a column per seed but one (coded as the factors are), so that what a seed adds to every cell alike
is taken out of the error rather than counted as the cells' scatter. It costs the error one degree of
freedom per seed but one, so the columns are fitted only where the error keeps at least MIN_BLOCKED_DF
(in a small sweep they would cost most of it: 2 cells x 2 seeds would leave it 1 of 2); they change no
coefficient when every seed ran every cell once (with failed runs they compare cells within seeds).
Where the seed columns cannot be told apart from the factors (seeds that ran only some cells), would
leave the error too few degrees of freedom, or some run has no seed, the model goes without them (every
run still counts) and says so. An F test of the seed columns tells how much the seeds held in common.
"""

import math
from collections import Counter
from collections.abc import Sequence
from itertools import combinations, product

import numpy as np

from nmt.sweep.analysis import cell_of, f_p_value, t_critical, t_p_value

MODELS = ("all interactions", "main effects and two-way interactions", "main effects")
# seed columns are fitted only where they leave the error this many degrees of freedom: from there on they
# widen an interval by a few percent at most (t_0.975 is 2.23 at 10, 2.18 at 12), where in a small sweep
# they would cost most of it (2 cells x 2 seeds: 1 of 2)
MIN_BLOCKED_DF = 10


def coding(level: str, levels: Sequence[str]) -> list[float]:
    """The k - 1 columns of one run's level (``levels[0]`` is the reference)."""
    k = len(levels)
    return [(1 - 1 / k) if level == other else -1 / k for other in levels[1:]]


def _terms(factors: Sequence[str], order: int) -> list[tuple[str, ...]]:
    return [term for size in range(1, order + 1) for term in combinations(factors, size)]


def _columns(term: tuple[str, ...], levels: dict[str, list[str]]) -> list[tuple[str, ...]]:
    """The non-reference level of each factor of ``term``, one tuple per column."""
    columns = [()]
    for factor in term:
        columns = [(*c, level) for c in columns for level in levels[factor][1:]]
    return columns


def design(records: Sequence[dict], levels: dict[str, list[str]], order: int) -> tuple[np.ndarray, list[tuple]]:
    """The design matrix (intercept first) of the model with interactions up to ``order`` factors, and
    each column's (term, levels)."""
    factors = list(levels)
    names = [(term, column) for term in _terms(factors, order) for column in _columns(term, levels)]
    rows = []
    for r in records:
        codes = {f: dict(zip(levels[f][1:], coding(str(r["factors"][f]), levels[f]), strict=True)) for f in factors}
        rows.append([1.0] + [float(np.prod([codes[f][lv] for f, lv in zip(t, c, strict=True)])) for t, c in names])
    return np.array(rows, dtype=float).reshape(len(records), 1 + len(names)), names


def _seed(record: dict) -> str | None:
    """A run's seed as one name for its value (1, 1.0 and "1" alike), None when it has none."""
    seed = record.get("seed")
    if seed is None or seed == "":
        return None
    try:
        number = float(seed)
    except (TypeError, ValueError):
        return str(seed)
    return str(int(number)) if number.is_integer() else str(number)


def _seed_columns(runs: Sequence[dict]) -> np.ndarray | None:
    """A column per seed but the first (coded as a factor's levels); None with fewer than two seeds or where
    a run has none (it belongs to no block)."""
    seeds = [_seed(r) for r in runs]
    levels = sorted(set(seeds) - {None}, key=lambda s: (len(s), s))
    if len(levels) < 2 or None in seeds:
        return None
    return np.array([coding(seed, levels) for seed in seeds], dtype=float).reshape(len(runs), -1)


def _why_no_blocks(runs: Sequence[dict], seed_columns: np.ndarray | None, columns: int) -> str:
    """Why a sweep of several seeds was fitted without seed columns ("" where it has fewer than two)."""
    seeds = [_seed(r) for r in runs]
    if len(set(seeds) - {None}) < 2:
        return ""
    if None in seeds:
        return "some runs record no seed, so they belong to no block"
    left = len(runs) - columns - seed_columns.shape[1]
    if left < MIN_BLOCKED_DF:
        return (
            f"their {seed_columns.shape[1]} columns would leave the error {max(left, 0)} degrees of freedom, fewer "
            f"than the {MIN_BLOCKED_DF} that keep the cost of blocks small"
        )
    return "some seeds ran only some cells, so their part cannot be told apart from the factors'"


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, int] | None:
    """Coefficients, residual sum of squares and degrees of freedom for the error; None when the columns
    are not independent or leave no degree of freedom."""
    df = len(y) - x.shape[1]
    if df < 1 or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    rss = float(residual @ residual)
    # an exact fit (each seed's runs scoring alike in every cell, as deterministic runs of a factor that changes
    # nothing do) leaves rounding in the residuals: zero, not an error term of 1e-28 that makes any rounding
    # in a coefficient "significant"
    scale = float(np.abs(y).max(initial=0.0)) or 1.0
    if rss <= len(y) * (1e-9 * scale) ** 2:
        rss = 0.0
        coef = np.where(np.abs(coef) <= 1e-9 * scale, 0.0, coef)
    return coef, rss, df


def fit(records: Sequence[dict], metric: str, levels: dict[str, list[str]]) -> dict:
    """OLS over every run with ``metric``: ``{"model", "runs", "df", "residual_sd", "effects", "seed_blocks",
    "seed_blocks_left_out", "averaged", "empty_cells"}``, where effects maps (term, levels) to ``{"diff", "se",
    "ci95", "p", "df"}`` for main effects and two-way interactions, and seed_blocks is None when the model holds
    no seed columns, else ``{"seeds", "F", "df", "p"}``: the F test of the seed columns against the same model
    without them (seed_blocks_left_out: why a sweep of several seeds was fitted without them, else "").
    averaged: whether a main effect is the average over the other factors' combinations (above); empty_cells:
    the combinations of levels without a run. ``model`` is None (and effects empty) when no model leaves a
    degree of freedom for the error: then nothing can be tested."""
    runs = [r for r in records if r["metrics"].get(metric) is not None]
    y = np.array([float(r["metrics"][metric]) for r in runs])
    factors = list(levels)
    counts = Counter(cell_of(r, factors) for r in runs)
    cells = set(counts)
    full = int(np.prod([len(v) for v in levels.values()]))
    empty = [cell for cell in product(*levels.values()) if cell not in cells]
    balanced = not empty and len(set(counts.values())) == 1
    candidates = [(MODELS[0], len(factors))] if len(cells) == full else []
    candidates += [(MODELS[1], 2), (MODELS[2], 1)]
    seed_columns = _seed_columns(runs)
    within: dict[tuple, set[float]] = {}
    for r, value in zip(runs, y, strict=True):
        within.setdefault(cell_of(r, factors), set()).add(round(float(value), 9))
    seeds_varied = any(len(values) > 1 for values in within.values())  # a cell whose seeds scored unalike
    for model, order in candidates:
        if order > len(factors) and model != MODELS[0]:
            continue
        x, names = design(runs, levels, min(order, len(factors)))
        plain = _least_squares(x, y)
        blocked = None if seed_columns is None else _least_squares(np.hstack([x, seed_columns]), y)
        if blocked is not None and blocked[2] < MIN_BLOCKED_DF:
            blocked = None
        if plain is None:  # the seed columns only add to a model that stands without them
            continue
        coef, rss, df = blocked or plain
        seed_blocks = None
        if blocked is not None:
            x = np.hstack([x, seed_columns])
            blocks = seed_columns.shape[1]
            gained = plain[1] - rss
            f_value = (gained / blocks) / (rss / df) if rss > 0 else (math.inf if gained > 0 else math.nan)
            seed_blocks = {"seeds": blocks + 1, "df": blocks, "F": f_value, "p": f_p_value(f_value, blocks, df)}
        sigma2 = rss / df
        cov = sigma2 * np.linalg.inv(x.T @ x)
        effects = {}
        for i, (term, column) in enumerate(names, start=1):
            if len(term) > 2:
                continue  # in the model (so the error is the within-cell scatter), not reported
            se = float(np.sqrt(cov[i, i]))
            effects[(term, column)] = {
                "diff": float(coef[i]),
                "se": se,
                "ci95": t_critical(df) * se,
                # no scatter left: where the seeds varied and agreed exactly (each seed's runs alike in every
                # cell) an effect of 0 is none; where they varied nothing, no test applies, 0 or not
                "p": t_p_value(coef[i] / se, df) if se > 0 else (1.0 if coef[i] == 0 and seeds_varied else math.nan),
                "df": df,
            }
        return {
            "model": model,
            "runs": len(runs),
            "df": df,
            "residual_sd": float(np.sqrt(sigma2)),
            "effects": effects,
            "seed_blocks": seed_blocks,
            "seed_blocks_left_out": _why_no_blocks(runs, seed_columns, x.shape[1]) if seed_blocks is None else "",
            "averaged": model == MODELS[0] or balanced,
            "empty_cells": empty,
        }
    return {
        "model": None,
        "runs": len(runs),
        "df": 0,
        "residual_sd": float("nan"),
        "effects": {},
        "seed_blocks": None,
        "seed_blocks_left_out": "",
        "averaged": False,
        "empty_cells": empty,
    }


def effect_name(term: tuple[str, ...], column: tuple[str, ...], levels: dict[str, list[str]]) -> str:
    """'pos: relative - absolute' for a main effect; 'norm x pos' for two two-level factors, else
    'norm x pos (rms, relative)': the interaction of those levels against each factor's reference."""
    if len(term) == 1:
        return f"{term[0]}: {column[0]} - {levels[term[0]][0]}"
    name = " x ".join(term)
    if all(len(levels[f]) == 2 for f in term):
        return name
    return f"{name} ({', '.join(column)})"
