"""benchmarks.factorial_summary against statsmodels' Welch test, and its one-line errors on a file it cannot read."""

import subprocess
import sys
from itertools import product
from pathlib import Path

import pytest

from benchmarks import factorial_summary
from benchmarks.factorial_summary import BASELINE, TABLE_HEADER, read_cells

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (("adam", "noam"), ("absolute", "relative"), ("layer", "rms"), ("ls01", "none"))


def table(cell=lambda i: f"{30 + i * 0.5:.2f} ± 1.00", rows=None) -> str:
    lines = [f"{TABLE_HEADER} en-de |", "|---|---|---|---|---|"]
    for i, levels in enumerate(rows or product(*LEVELS)):
        lines.append(f"| {' | '.join(levels)} | {cell(i)} |")
    return "text before\n\n" + "\n".join(lines) + "\n\nafter\n"


def test_the_cells_are_read_with_their_half_widths(tmp_path):
    path = tmp_path / "B.md"
    path.write_text(table(), encoding="utf-8")
    cells = read_cells(str(path), "en-de")
    assert len(cells) == 16 and cells[BASELINE] == (30.0, 1.0)
    assert cells[("noam", "relative", "rms", "none")] == (37.5, 1.0)


@pytest.mark.parametrize(
    "text, said",
    [
        ("# no table here\n", "no factorial table"),
        (table(cell=lambda i: "n/a" if i == 3 else "30.00 ± 1.00"), "line 8: the cell under 'en-de'"),
        (table(rows=list(product(*LEVELS))[1:]), "no baseline row adam | absolute | layer | ls01"),
    ],
)
def test_a_file_it_cannot_read_is_one_line(tmp_path, text, said):
    path = tmp_path / "B.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=said):
        read_cells(str(path), "en-de")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.factorial_summary", str(path), "en-de"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr


def test_cells_against_the_baseline_agree_with_statsmodels(tmp_path, capsys, monkeypatch):
    from scipy import stats
    from statsmodels.stats.weightstats import ttest_ind

    # two cells of three seeds each, the summary's mean and t half-width recovered from the raw scores
    base, other = [30.0, 31.0, 29.5], [33.0, 34.5, 33.2]

    def summary(xs):
        n, mean = len(xs), sum(xs) / len(xs)
        sd = (sum((x - mean) ** 2 for x in xs) / (n - 1)) ** 0.5
        return f"{mean:.2f} ± {stats.t.ppf(0.975, n - 1) * sd / n**0.5:.2f}"

    rows = list(product(*LEVELS))
    cells = {rows[0]: summary(base), rows[-1]: summary(other)}
    path = tmp_path / "B.md"
    path.write_text(table(cell=lambda i: cells.get(rows[i], summary(base)), rows=rows), encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["factorial_summary", str(path), "en-de", "--seeds", "3"])
    factorial_summary.main()
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if line.strip().startswith("noam relative rms none"))
    p_value = float(line.split("p / Holm ")[1].split(" / ")[0])
    expected = ttest_ind(other, base, usevar="unequal")[1]
    assert p_value == pytest.approx(expected, abs=2e-3)  # the summary's rounding to two decimals
