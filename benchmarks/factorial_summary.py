"""Re-test a published factorial from its per-cell summary (mean and 95% t-interval over n seeds), with
the statistics the sweep report uses now: Welch's test of each cell against the baseline over seeds, and
effects from the least-squares fit of the full factorial model (balanced design: the fit's estimates are
contrasts of cell means and its error is the pooled within-cell variance, both recoverable from the
summary). Rounding of the published figures to two decimals carries into the results.

    python -m benchmarks.factorial_summary BENCHMARKS.md "zh->en" --seeds 3
"""

import argparse
import math
import re
from itertools import combinations

from scipy import stats

from benchmarks.options import run_main
from nmt.sweep.analysis import holm

FACTORS = ("optim", "pos", "norm", "smoothing")
BASELINE = ("adam", "absolute", "layer", "ls01")
TABLE_HEADER = "| optim | pos | norm | smoothing |"


def read_cells(path: str, column: str) -> dict[tuple, tuple[float, float]]:
    """(optim, pos, norm, smoothing) -> (mean, interval half-width) from the factorial's Markdown table."""
    lines = open(path, encoding="utf-8").read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(TABLE_HEADER)), None)
    if start is None:
        raise ValueError(f"{path}: no factorial table (a line starting {TABLE_HEADER!r}); give BENCHMARKS.md")
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    if column not in header:
        raise ValueError(f"{path}: the factorial's table has no column {column!r}; its columns: {header[4:]}")
    index = header.index(column)
    cells = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        row = [c.strip() for c in line.strip("|").split("|")]
        found = re.match(r"([-\d.]+) ± ([-\d.]+)", row[index]) if len(row) > index else None
        if found is None:
            line_number = start + 3 + len(cells)
            raise ValueError(f"{path}, line {line_number}: the cell under {column!r} is not 'mean ± half-width'")
        cells[tuple(row[:4])] = tuple(float(x) for x in found.groups())
    if BASELINE not in cells:
        raise ValueError(f"{path}: the factorial's table has no baseline row {' | '.join(BASELINE)}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmarks")
    parser.add_argument("column")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    n = args.seeds
    cells = read_cells(args.benchmarks, args.column)
    sd = {c: half * math.sqrt(n) / stats.t.ppf(0.975, n - 1) for c, (_, half) in cells.items()}
    mean = {c: m for c, (m, _) in cells.items()}
    base = mean[BASELINE]
    comparisons = {}
    for cell in cells:
        if cell != BASELINE:
            test = stats.ttest_ind_from_stats(mean[cell], sd[cell], n, base, sd[BASELINE], n, equal_var=False)
            comparisons[cell] = test.pvalue
    adjusted_cells = holm(comparisons)
    print(f"cells against {BASELINE} (Welch over seeds, Holm over {len(comparisons)}):")
    for cell in sorted(cells, key=lambda c: -mean[c]):
        p = "baseline" if cell == BASELINE else f"{comparisons[cell]:.4f} / {adjusted_cells[cell]:.4f}"
        print(f"  {' '.join(cell):40s} {mean[cell]:6.2f}  p / Holm {p}")
    # the full model on a balanced 2^k design: a +-1/2-coded coefficient is a contrast of the 2^k cell means
    # with weights +-1/2^(k-1) (main effects) or +-1/2^(k-2) (two-way), its variance sigma^2 * sum(w^2) / n
    levels = {f: sorted({c[i] for c in cells}, key=lambda v: v != BASELINE[i]) for i, f in enumerate(FACTORS)}
    df = len(cells) * (n - 1)
    sigma2 = sum(s**2 for s in sd.values()) / len(cells)
    effects = {}
    for size in (1, 2):
        for term in combinations(range(len(FACTORS)), size):
            weights = {c: math.prod(1 if c[i] != levels[FACTORS[i]][0] else -1 for i in term) for c in cells}
            scale = 2 ** (len(FACTORS) - size)
            estimate = sum(weights[c] * mean[c] for c in cells) / scale
            se = math.sqrt(sigma2 * len(cells) / scale**2 / n)
            p = 2 * stats.t.sf(abs(estimate / se), df)
            if size == 2:
                name = " x ".join(FACTORS[i] for i in term)
            else:
                factor = FACTORS[term[0]]
                name = f"{factor}: {levels[factor][1]} - {levels[factor][0]}"
            effects[name] = (estimate, stats.t.ppf(0.975, df) * se, p)
    adjusted = holm({k: v[2] for k, v in effects.items()})
    print(f"effects (full model, {df} df for the error, Holm over {len(effects)}):")
    for name, (estimate, half, p) in effects.items():
        print(f"  {name:28s} {estimate:6.2f} ± {half:4.2f}  p {p:.4f}  Holm {adjusted[name]:.4f}")


if __name__ == "__main__":
    run_main(main)
