"""The sweep report's statistics against independent references (scipy, statsmodels, sacreBLEU's CLI,
arithmetic by hand) and by simulation (false-positive rates of null sweeps), and the report built on them."""

import csv
import gzip
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from nmt.metrics.randomization import corpus_score, paired_randomization, samples_for, sentence_statistics
from nmt.sweep import analysis, effects
from nmt.sweep import records as sweep_records
from nmt.sweep.report import write_report


def record(pos, norm, seed, bleu, run_dir="/nonexistent"):
    return {
        "factors": {"pos": pos, "norm": norm},
        "seed": seed,
        "metrics": {"test_bleu": bleu},
        "epochs": 1,
        "steps": 1,
        "parameters": 1,
        "wall_time_s": 60.0,
        "run_dir": run_dir,
    }


# pos x norm, 3 seeds each; numbers chosen so that every statistic is easy to compute by hand
BLEU = {
    ("absolute", "layer"): [30.0, 31.0, 32.0],
    ("absolute", "rms"): [29.0, 30.0, 31.0],
    ("relative", "layer"): [33.0, 34.0, 35.0],
    ("relative", "rms"): [33.0, 34.0, 38.0],
}
RECORDS = [record(p, n, s + 1, v) for (p, n), values in BLEU.items() for s, v in enumerate(values)]
LEVELS = {"norm": ["layer", "rms"], "pos": ["absolute", "relative"]}


# ---- intervals, tests over seeds, order ----------------------------------------------------------------
def test_mean_and_confidence_interval_by_hand():
    mean, half = analysis.mean_ci([30.0, 31.0, 32.0])
    assert mean == 31.0 and half == pytest.approx(4.302653 * 1.0 / math.sqrt(3))
    assert math.isnan(analysis.mean_ci([5.0])[1])


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (7.9, 2.3111), (31, 2.0395), (60, 2.0003), (1000, 1.9623)])
def test_t_critical_is_exact_beyond_30_degrees_of_freedom(df, expected):
    assert analysis.t_critical(df) == pytest.approx(expected, abs=1e-4)


def test_ranking_by_hand_in_the_metrics_direction():
    rows = analysis.ranking(RECORDS, "test_bleu")
    assert [(r["pos"], r["norm"]) for r in rows] == [
        ("relative", "rms"),
        ("relative", "layer"),
        ("absolute", "layer"),
        ("absolute", "rms"),
    ]
    top = rows[0]  # 33, 34, 38: mean 35, sample std sqrt(7)
    assert top["mean"] == 35.0 and top["std"] == pytest.approx(math.sqrt(7))
    assert top["ci95"] == pytest.approx(4.302653 * math.sqrt(7) / math.sqrt(3))
    ppl = [{**r, "metrics": {"test_ppl": r["metrics"]["test_bleu"]}} for r in RECORDS]
    assert [(r["pos"], r["norm"]) for r in analysis.ranking(ppl, "test_ppl")][0] == ("absolute", "rms")


def test_the_overlap_check_works_in_both_directions():
    apart = [{"mean": 40.0, "ci95": 1.0}, {"mean": 30.0, "ci95": 1.0}]
    close = [{"mean": 40.0, "ci95": 6.0}, {"mean": 30.0, "ci95": 6.0}]
    assert analysis.separated(apart) and analysis.separated(apart[::-1])  # perplexities rank ascending
    assert not analysis.separated(close) and not analysis.separated(close[::-1])
    assert not analysis.separated([{"mean": 40.0, "ci95": math.nan}, {"mean": 30.0, "ci95": 1.0}])


def test_the_comparison_with_the_baseline_is_welchs_test_over_seeds():
    compared = analysis.compare_with_baseline(RECORDS, "test_bleu", ["pos", "norm"], ("absolute", "layer"))
    for (pos, norm), result in compared.items():
        reference = stats.ttest_ind(BLEU[(pos, norm)], BLEU[("absolute", "layer")], equal_var=False)
        assert result["p"] == pytest.approx(reference.pvalue, rel=1e-9)
        assert result["df"] == pytest.approx(reference.df, rel=1e-9)
        low, high = reference.confidence_interval(0.95)
        assert result["diff"] == pytest.approx((low + high) / 2) and result["ci95"] == pytest.approx((high - low) / 2)
    assert math.isnan(analysis.welch_test([1.0], [2.0, 3.0])["p"])  # one seed: no test


def test_a_paired_comparison_over_the_seeds_both_ran_is_scipys_paired_t_test():
    """Runs of one seed share their batches' order: tune compares two candidates paired by seed too."""
    a = {1: 30.0, 2: 34.0, 3: 38.0, 4: 31.0}
    b = {1: 29.0, 2: 33.0, 3: 37.5, 5: 20.0}  # seeds 4 and 5: one side only, left out
    result = analysis.paired_test(a, b)
    reference = stats.ttest_rel([30.0, 34.0, 38.0], [29.0, 33.0, 37.5])
    assert result["n"] == 3 and result["df"] == 2
    assert result["p"] == pytest.approx(reference.pvalue, rel=1e-9)
    low, high = reference.confidence_interval(0.95)
    assert result["diff"] == pytest.approx((low + high) / 2) and result["ci95"] == pytest.approx((high - low) / 2)
    # as independent runs the same scores establish nothing: each side's seeds scatter by 4 BLEU
    assert analysis.welch_test([30.0, 34.0, 38.0], [29.0, 33.0, 37.5])["p"] > 0.5 > 0.05 > result["p"]
    assert math.isnan(analysis.paired_test({1: 30.0, 2: 31.0}, {2: 29.0, 3: 28.0})["p"])  # one seed shared
    # every seed moved alike (up to the floats' last bits): t is infinite, p 0 as scipy's
    assert analysis.paired_test({1: 30.1, 2: 34.2}, {1: 29.0, 2: 33.1})["p"] == 0.0
    assert stats.ttest_rel([30.0, 31.0], [29.0, 30.0]).pvalue == 0.0
    assert analysis.paired_test({1: 30.0, 2: 31.0}, {1: 30.0, 2: 31.0})["p"] == 1.0


def test_holm_by_hand():
    adjusted = analysis.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, then made monotone
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})
    # a p-value that could not be computed (nan) stays nan, outside the family, whatever the order given
    for given in ({"a": math.nan, "b": 0.001, "c": 0.01}, {"b": 0.001, "c": 0.01, "a": math.nan}):
        adjusted = analysis.holm(given)
        assert math.isnan(adjusted["a"]) and adjusted["b"] == pytest.approx(0.002) and adjusted["c"] == 0.01
    from statsmodels.stats.multitest import multipletests

    assert list(analysis.holm({"b": 0.001, "c": 0.01}).values()) == pytest.approx(
        multipletests([0.001, 0.01], method="holm")[1]
    )


def test_seeds_that_scored_alike_in_every_cell_test_nothing():
    """Every seed of a cell scored the same (30.0 and 30.1): the report said "p (Holm) 0 ... better", reading
    seeds that varied nothing as certainty. No test applies, and the findings say why."""
    from nmt.sweep.document import Document
    from nmt.sweep.findings import findings

    records = [
        record(p, "layer", s, 30.0 if p == "absolute" else 30.1) for p in ("absolute", "relative") for s in (1, 2, 3)
    ]
    assert math.isnan(analysis.welch_test([30.1] * 3, [30.0] * 3)["p"])
    # no difference either: still no test (the report showed p 1.0000 where its docs promise "–", and counted
    # it among the tested effects for Holm), as scipy's ttest_ind gives nan
    assert math.isnan(analysis.welch_test([30.0] * 3, [30.0] * 3)["p"])
    assert math.isnan(stats.ttest_ind([30.0] * 3, [30.0] * 3).pvalue)
    alike = [record(p, n, s, 0.0) for p in ("absolute", "relative") for n in ("layer", "rms") for s in (1, 2, 3)]
    assert all(math.isnan(e["p"]) for e in effects.fit(alike, "test_bleu", LEVELS)["effects"].values())
    fit = effects.fit(records, "test_bleu", {"pos": ["absolute", "relative"]})
    assert all(math.isnan(e["p"]) for e in fit["effects"].values())
    doc = Document("t")
    ranking = {"rows": analysis.ranking(records, "test_bleu"), "holm": {}, "compared": {}}
    findings(doc, ranking, fit, {"pos": ["absolute", "relative"]}, "test_bleu", False, True)
    text = " ".join(doc.markdown().split())
    assert "None drawn: the seeds of every cell scored alike on test_bleu (standard deviation 0)" in text
    assert "raises" not in text and "better" not in text


def test_an_unbalanced_sweeps_tables_weigh_each_cell_once_as_the_fit_does():
    """One cell lost 2 of its 3 seeds: the two-way table (a plain mean over runs) showed an interaction of
    -2.5 that neither the data (score = 30 + 10 [optim=sgd]) nor the fit has, and the level table a main
    effect of pos that the fit put at 0."""
    levels = {"norm": ["layer", "rms"], "optim": ["adam", "sgd"], "pos": ["absolute", "relative"]}
    records = []
    for norm in levels["norm"]:
        for optim in levels["optim"]:
            for pos in levels["pos"]:
                for seed in (1, 2, 3):
                    if (norm, optim, pos) == ("layer", "sgd", "relative") and seed > 1:
                        continue  # lost
                    noise = (0.3, -0.1, -0.2)[seed - 1]
                    r = record(pos, norm, seed, 30 + 10 * (optim == "sgd") + noise)
                    r["factors"]["optim"] = optim
                    records.append(r)
    fit = effects.fit(records, "test_bleu", levels)
    table = analysis.interactions(records, "test_bleu")[("norm", "pos")]
    # each (norm, pos) pair: the mean of its two optim cells' means, 35 + the noise of the seeds it kept
    assert table[("layer", "relative")] == pytest.approx((30 + 40.3) / 2)  # the lost cell's one seed: 40.3
    assert table[("rms", "relative")] == pytest.approx(35.0)
    interaction = (
        table[("layer", "relative")]
        - table[("layer", "absolute")]
        - table[("rms", "relative")]
        + table[("rms", "absolute")]
    )
    assert interaction == pytest.approx(0.15) and abs(interaction) < 0.5  # was -2.5
    summary = analysis.level_summary(records, "test_bleu", "pos")
    assert summary["relative"]["n"] == 10 and summary["absolute"]["n"] == 12
    assert summary["relative"]["mean"] - summary["absolute"]["mean"] == pytest.approx(0.075)  # was about -1
    assert fit["effects"]  # the fit's own estimates stand beside them


def test_levels_sort_numerically_and_names_as_written():
    assert sorted(["10", "2", "5", "none"], key=analysis.level_order) == ["2", "5", "10", "none"]
    assert sorted(
        ["rope", "absolute", "learned"], key=lambda v: analysis.level_order(v, ["rope", "learned", "absolute"])
    ) == [
        "rope",
        "learned",
        "absolute",
    ]


# ---- effects: one least-squares fit, against statsmodels ------------------------------------------------
def test_effects_by_hand_on_a_balanced_design(monkeypatch):
    fit = effects.fit(RECORDS, "test_bleu", LEVELS)
    # 12 runs less 4 cells' means; seed columns would leave 6 degrees of freedom, too few to pay for them
    assert fit["model"] == "all interactions" and fit["df"] == 12 - 4 and fit["seed_blocks"] is None
    assert fit["seed_blocks_left_out"].startswith("their 2 columns would leave the error 6 degrees of freedom")
    found = {effects.effect_name(*key, LEVELS): e["diff"] for key, e in fit["effects"].items()}
    # cell means: absolute 31 (layer), 30 (rms); relative 34, 35
    assert found == pytest.approx({"norm: rms - layer": 0.0, "pos: relative - absolute": 4.0, "norm x pos": 2.0})
    # the same runs with the seeds as blocks, where they are fitted: less 2 seed columns
    monkeypatch.setattr(effects, "MIN_BLOCKED_DF", 1)
    fit = effects.fit(RECORDS, "test_bleu", LEVELS)
    assert fit["model"] == "all interactions" and fit["df"] == 12 - 4 - 2
    # the cells' residuals without blocks: -1, 0, 1 three times and -2, -1, 3 (20); the seeds' means over the
    # cells' residuals: -1.25, -0.25, 1.5, so blocks take 4 * (1.5625 + 0.0625 + 2.25) = 15.5 of them
    blocks = fit["seed_blocks"]
    assert blocks["seeds"] == 3 and blocks["df"] == 2 and not fit["seed_blocks_left_out"]
    assert blocks["F"] == pytest.approx((15.5 / 2) / (4.5 / 6))
    assert fit["residual_sd"] == pytest.approx(math.sqrt(4.5 / 6))
    found = {effects.effect_name(*key, LEVELS): e["diff"] for key, e in fit["effects"].items()}
    assert found == pytest.approx({"norm: rms - layer": 0.0, "pos: relative - absolute": 4.0, "norm x pos": 2.0})


def _design(seed: int, drop: list[int]):
    """A 2^3 x 3 seeds design with real effects and seed noise; ``drop``: runs that failed."""
    rng = np.random.default_rng(seed)
    records = []
    for a in ("a0", "a1"):
        for b in ("b0", "b1"):
            for c in ("c0", "c1"):
                for s in (1, 2, 3):
                    y = (
                        30
                        + 1.5 * (a == "a1")
                        + 0.8 * (b == "b1")
                        + 1.2 * (a == "a1") * (c == "c1")
                        + rng.normal(0, 0.7)
                    )
                    records.append({"factors": {"a": a, "b": b, "c": c}, "seed": s, "metrics": {"m": y}})
    return [r for i, r in enumerate(records) if i not in drop]


@pytest.mark.parametrize(
    ("drop", "formula", "model"),
    [
        ([], "y ~ a * b * c", "all interactions"),
        ([5], "y ~ a * b * c", "all interactions"),  # one failed run: unbalanced, still every run counts
        ([0, 7, 17], "y ~ a * b * c", "all interactions"),  # failures in three different seeds
        ([0, 1, 2], "y ~ (a + b + c) ** 2", "main effects and two-way interactions"),  # a cell lost entirely
    ],
)
def test_effects_equal_statsmodels_ols_with_plus_minus_half_coding(drop, formula, model):
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    records = _design(1, drop)
    levels = {"a": ["a0", "a1"], "b": ["b0", "b1"], "c": ["c0", "c1"]}
    fit = effects.fit(records, "m", levels)
    frame = pd.DataFrame(
        [
            {
                **{k: 0.5 if v.endswith("1") else -0.5 for k, v in r["factors"].items()},
                "seed": r["seed"],
                "y": r["metrics"]["m"],
            }
            for r in records
        ]
    )
    # seeds as blocks (each case leaves the error 11-14 degrees of freedom with them): a seed's runs share their
    # batch order in every cell (any coding of the seed column gives the factors the same coefficients)
    reference = smf.ols(formula + " + C(seed)", frame).fit()
    assert fit["model"] == model and fit["df"] == reference.df_resid and fit["runs"] == len(records)
    without = smf.ols(formula, frame).fit()  # the F test of the seed columns: statsmodels' comparison of the two
    f_value, p_value, _ = reference.compare_f_test(without)
    assert fit["seed_blocks"]["F"] == pytest.approx(f_value, rel=1e-9)
    assert fit["seed_blocks"]["p"] == pytest.approx(p_value, rel=1e-6)
    assert len(fit["effects"]) == 6  # 3 main effects, 3 two-way interactions
    for (term, _), e in fit["effects"].items():
        name = ":".join(term)
        assert e["diff"] == pytest.approx(reference.params[name], abs=1e-9)
        assert e["se"] == pytest.approx(reference.bse[name], rel=1e-9)
        assert e["p"] == pytest.approx(reference.pvalues[name], rel=1e-6)
        low, high = reference.conf_int().loc[name]
        assert e["ci95"] == pytest.approx((high - low) / 2, rel=1e-9)


def test_a_three_level_factor_gets_simple_coding_equal_to_statsmodels(monkeypatch):
    monkeypatch.setattr(effects, "MIN_BLOCKED_DF", 1)  # 17 runs: seed columns leave 9, fitted here all the same
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(2)
    records = [
        {
            "factors": {"a": a, "b": b},
            "seed": s,
            "metrics": {"m": 20 + {"x": 0, "y": 2, "z": 5}[a] + (b == "q") + rng.normal()},
        }
        for a in ("x", "y", "z")
        for b in ("p", "q")
        for s in (1, 2, 3)
    ][:-1]
    levels = {"a": ["x", "y", "z"], "b": ["p", "q"]}
    fit = effects.fit(records, "m", levels)
    # the same columns built independently: level j of k is 1 - 1/k there, -1/k elsewhere
    frame = pd.DataFrame(
        [
            {
                "ay": 2 / 3 if r["factors"]["a"] == "y" else -1 / 3,
                "az": 2 / 3 if r["factors"]["a"] == "z" else -1 / 3,
                "bq": 0.5 if r["factors"]["b"] == "q" else -0.5,
                "y": r["metrics"]["m"],
            }
            for r in records
        ]
    )
    reference = smf.ols("y ~ (ay + az) * bq + C(seed)", frame.assign(seed=[r["seed"] for r in records])).fit()
    names = {
        "a: y - x": "ay",
        "a: z - x": "az",
        "b: q - p": "bq",
        "a x b (y, q)": "ay:bq",
        "a x b (z, q)": "az:bq",
    }
    found = {effects.effect_name(*key, levels): e for key, e in fit["effects"].items()}
    assert sorted(found) == sorted(names)
    for ours, theirs in names.items():
        assert found[ours]["diff"] == pytest.approx(reference.params[theirs], abs=1e-9)
        assert found[ours]["p"] == pytest.approx(reference.pvalues[theirs], rel=1e-6)


def test_seeds_that_ran_only_some_cells_are_not_blocks_and_the_fit_says_so():
    """Cells of seeds 1-2 beside cells of seeds 3-4, 4 runs: no degree of freedom for seed columns."""
    records = [
        record(pos, "layer", seed, 30.0 + (pos == "relative") + 0.1 * seed**2)
        for pos, seeds in (("absolute", (1, 2)), ("relative", (3, 4)))
        for seed in seeds
    ]
    fit = effects.fit(records, "test_bleu", {"pos": ["absolute", "relative"]})
    assert fit["model"] == "all interactions" and fit["df"] == 4 - 2
    assert fit["seed_blocks"] is None and "would leave the error 0 degrees of freedom" in fit["seed_blocks_left_out"]
    pooled = stats.ttest_ind([31.9, 32.6], [30.1, 30.4])  # one factor, no blocks: the pooled two-sample t-test
    assert next(iter(fit["effects"].values()))["p"] == pytest.approx(pooled.pvalue, rel=1e-9)


def test_seed_columns_that_repeat_a_factors_are_left_out_with_degrees_of_freedom_to_spare():
    """pos=absolute on seeds 1-8, pos=relative on 9-16, each seed both norms: 32 runs, 4 cells, the seed
    columns (15) would leave 13 degrees of freedom but repeat the pos column; the fit goes without them and
    equals statsmodels' fit without C(seed)."""
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(5)
    records = [
        record(pos, norm, seed, 30.0 + 2 * (pos == "relative") + (norm == "rms") + rng.normal())
        for pos, seeds in (("absolute", range(1, 9)), ("relative", range(9, 17)))
        for seed in seeds
        for norm in ("layer", "rms")
    ]
    fit = effects.fit(records, "test_bleu", LEVELS)
    assert fit["model"] == "all interactions" and fit["df"] == 28 and fit["seed_blocks"] is None
    assert fit["seed_blocks_left_out"].startswith("some seeds ran only some cells")
    frame = pd.DataFrame(
        [
            {
                "pos": 0.5 if r["factors"]["pos"] == "relative" else -0.5,
                "norm": 0.5 if r["factors"]["norm"] == "rms" else -0.5,
                "y": r["metrics"]["test_bleu"],
            }
            for r in records
        ]
    )
    reference = smf.ols("y ~ pos * norm", frame).fit()
    found = {effects.effect_name(*k, LEVELS): e for k, e in fit["effects"].items()}
    assert found["pos: relative - absolute"]["p"] == pytest.approx(reference.pvalues["pos"], rel=1e-9)
    cells = [("absolute", "layer"), ("absolute", "rms"), ("relative", "layer"), ("relative", "rms")]
    complete = [record(p, n, s, 30.0 + rng.normal()) for p, n in cells for s in range(1, 7)]
    blocks = effects.fit(complete, "test_bleu", LEVELS)["seed_blocks"]
    assert blocks is not None and blocks["seeds"] == 6  # 24 runs, 4 cells, 5 seed columns: 15 left
    no_seed = [{**r, "seed": None} if i == 0 else r for i, r in enumerate(complete)]
    assert effects.fit(no_seed, "test_bleu", LEVELS)["seed_blocks_left_out"].startswith("some runs record no seed")
    as_floats = [{**r, "seed": float(r["seed"])} for r in complete]  # 1.0 and 1 are one seed
    assert effects.fit(as_floats, "test_bleu", LEVELS)["seed_blocks"] == blocks


def test_one_two_level_factor_with_seeds_as_blocks_is_the_paired_t_test_over_seeds():
    rng = np.random.default_rng(8)
    shared = rng.normal(0, 1.5, size=12)  # 24 runs: 2 cells and 11 seed columns leave 11 degrees of freedom
    values = {
        level: [30 + (level == "rms") * 0.4 + shared[s] + rng.normal(0, 0.3) for s in range(12)]
        for level in ("layer", "rms")
    }
    records = [record("absolute", norm, s + 1, v) for norm, vs in values.items() for s, v in enumerate(vs)]
    fit = effects.fit(records, "test_bleu", {"norm": ["layer", "rms"]})
    (effect,) = fit["effects"].values()
    paired = stats.ttest_rel(values["rms"], values["layer"])
    assert fit["seed_blocks"]["seeds"] == 12 and effect["df"] == paired.df == 11
    assert effect["p"] == pytest.approx(paired.pvalue, rel=1e-9)
    low, high = paired.confidence_interval(0.95)
    assert effect["ci95"] == pytest.approx((high - low) / 2, rel=1e-9)


def test_an_exact_fit_of_seeds_says_nothing_is_detectable_not_that_rounding_is():
    """Deterministic runs of a factor that changes nothing: each seed's runs score alike in every cell. The
    blocked fit is exact, its residuals rounding; the effects must be 0 with p 1, not rounding over rounding."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        by_seed = {s: round(float(rng.uniform(20, 40)), 2) for s in range(1, 9)}  # 32 runs: 21 degrees left
        records = [
            record(p, n, s, v) for p in ("absolute", "relative") for n in ("layer", "rms") for s, v in by_seed.items()
        ]
        fit = effects.fit(records, "test_bleu", LEVELS)
        assert fit["residual_sd"] == 0.0
        assert all(e["diff"] == 0.0 and e["p"] == 1.0 for e in fit["effects"].values())
        assert fit["seed_blocks"]["F"] == math.inf and fit["seed_blocks"]["p"] == 0.0


def test_blocks_take_a_shared_seed_part_out_of_the_error_and_keep_the_nominal_rate():
    """Null sweeps whose seeds each add one offset to every cell (a lucky batch order): the blocked fit's
    test stays at its nominal false-positive rate, and its intervals are narrower than the fit without
    blocks would give."""
    rng = np.random.default_rng(11)
    rejections, sweeps, narrower = 0, 2000, 0
    for _ in range(sweeps):
        shared = rng.normal(0, 2.0, size=3)
        levels = {"f": [f"c{c}" for c in range(6)]}
        records = [
            {"factors": {"f": f"c{c}"}, "seed": s, "metrics": {"m": 30 + shared[s - 1] + rng.normal(0, 0.5)}}
            for c in range(6)
            for s in (1, 2, 3)
        ]
        fit = effects.fit(records, "m", levels)
        assert fit["seed_blocks"] is not None and fit["df"] == 18 - 6 - 2
        rejections += min(e["p"] for e in fit["effects"].values()) < 0.05 / 5  # Bonferroni over the five
        plain = effects._least_squares(effects.design(records, levels, 1)[0], _values(records))
        narrower += fit["residual_sd"] ** 2 < plain[1] / plain[2]
    # binomial(2000, <= 0.05): Bonferroni is conservative, so at most about the nominal rate
    assert 0.015 < rejections / sweeps < 0.06
    assert narrower / sweeps > 0.9


def _values(records):
    return np.array([r["metrics"]["m"] for r in records])


def test_no_model_without_a_degree_of_freedom_for_the_error():
    one_seed = [r for r in RECORDS if r["seed"] == 1]  # 4 runs, 4 cells: nothing left to estimate the error
    assert effects.fit(one_seed, "test_bleu", LEVELS)["model"] == "main effects"
    assert effects.fit(one_seed[:3], "test_bleu", LEVELS)["model"] is None


# ---- null sweeps: the seed-level tests keep their nominal false-positive rate ---------------------------
def _null_sweep(rng, cells: int, seeds: int, seed_sd: float) -> list[dict]:
    """Identical configurations: every run's score is the same expected quality plus its seed's noise."""
    return [
        {"factors": {"f": f"c{c}"}, "seed": s, "metrics": {"m": 30 + rng.normal(0, seed_sd)}}
        for c in range(cells)
        for s in range(1, seeds + 1)
    ]


@pytest.mark.parametrize("seed_sd", [0.3, 1.5])
def test_null_sweeps_reject_at_about_the_nominal_rate(seed_sd):
    rng = np.random.default_rng(7)
    ranking_rejections = effect_rejections = 0
    sweeps = 2000
    for _ in range(sweeps):
        records = _null_sweep(rng, cells=2, seeds=3, seed_sd=seed_sd)
        compared = analysis.compare_with_baseline(records, "m", ["f"], ("c0",))
        ranking_rejections += compared[("c1",)]["p"] < 0.05
        fit = effects.fit(records, "m", {"f": ["c0", "c1"]})
        effect_rejections += next(iter(fit["effects"].values()))["p"] < 0.05
    # binomial(2000, 0.05): sd 0.0049; Welch's test is a little conservative at 2 x 3 runs
    assert 0.025 < ranking_rejections / sweeps < 0.065
    assert 0.035 < effect_rejections / sweeps < 0.065


def test_the_sentence_level_test_answers_another_question_than_the_seed_level_one():
    """Two identical configurations whose seeds differ (a seed shifts a run's quality on every sentence):
    the randomisation test, conditional on the trained models, rejects far more often than 5% (it is
    right that these two models differ); the seed-level test does not."""
    rng = np.random.default_rng(11)
    sentences, sweeps = 60, 60
    conditional = seed_level = 0
    for _ in range(sweeps):
        runs = []
        for _cell in range(2):
            cell = []
            for _seed in range(3):
                quality = float(np.clip(0.6 + rng.normal(0, 0.08), 0.05, 0.95))
                correct = rng.random((sentences, 8)) < quality  # 8 reference words per sentence
                cell.append(_words_statistics(correct))
            runs.append(cell)
        conditional += paired_randomization(runs[0], runs[1], n_samples=200, seed=int(rng.integers(1 << 30))) < 0.05
        scores = [[corpus_score(s.sum(0)) for s in cell] for cell in runs]
        seed_level += analysis.welch_test(scores[1], scores[0])["p"] < 0.05
    assert conditional / sweeps > 0.3 and seed_level / sweeps < 0.15


def _words_statistics(correct: np.ndarray) -> np.ndarray:
    """BLEU statistics of sentences of distinct words where ``correct`` marks the hypothesis words that
    match the reference (an n-gram matches when its n words do)."""
    refs = [" ".join(f"w{i}_{j}" for j in range(correct.shape[1])) for i in range(len(correct))]
    hyps = [" ".join(f"w{i}_{j}" if ok else f"x{i}_{j}" for j, ok in enumerate(row)) for i, row in enumerate(correct)]
    return sentence_statistics(hyps, refs)


# ---- the randomisation test: sacreBLEU's, calibrated ------------------------------------------------------
def _noisy_systems(n: int = 80):
    rng = random.Random(3)
    refs = [f"the {w} dog number {i} runs over the green field ." for i, w in enumerate(rng.choices("abc", k=n))]
    base = [r.replace("green", "grey") if rng.random() < 0.4 else r for r in refs]
    system = [r.replace("runs", "walks") if rng.random() < 0.35 else r for r in refs]
    return refs, base, system


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_randomisation_equals_sacrebleus_paired_ar_command(metric, tmp_path):
    refs, base, system = _noisy_systems()
    for name, lines in (("refs", refs), ("base", base), ("sys", system)):
        (tmp_path / f"{name}.txt").write_text("".join(line + "\n" for line in lines))
    command = [sys.executable, "-m", "sacrebleu", "refs.txt", "-i", "base.txt", "sys.txt", "--paired-ar"]
    command += ["--paired-ar-n", "1000", "-m", metric, "-f", "text"]
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout
    theirs = float(re.search(r"\(p = ([0-9.]+)\)", out).group(1))
    ours = paired_randomization(
        [sentence_statistics(base, refs, metric)], [sentence_statistics(system, refs, metric)], metric, n_samples=1000
    )
    assert 0.01 < ours < 0.99  # a case where the p-value is informative
    assert round(ours, 4) == theirs


def test_identical_outputs_give_p_one_and_copied_seeds_add_no_evidence():
    refs, base, system = _noisy_systems()
    same = sentence_statistics(base, refs)
    assert paired_randomization([same], [same.copy()], n_samples=200) == 1.0
    b, s = sentence_statistics(base, refs), sentence_statistics(system, refs)
    p = [paired_randomization([b] * k, [s] * k, n_samples=300) for k in (1, 3)]
    assert 0.01 < p[0] < 0.99 and p[0] == pytest.approx(p[1])


def test_randomisation_is_calibrated_when_the_outputs_are_exchangeable():
    """Under its null hypothesis (each sentence's two outputs equally likely to come from either system)
    the test rejects at most at its level; the abs-centred bootstrap the report used before did not."""
    rng = np.random.default_rng(5)
    sweeps, rejections = 300, 0
    for _ in range(sweeps):
        correct = rng.random((2, 40, 6)) < rng.uniform(0.3, 0.9, size=(1, 40, 1))  # sentence difficulty shared
        a, b = _words_statistics(correct[0]), _words_statistics(correct[1])
        rejections += paired_randomization([a], [b], n_samples=199, seed=int(rng.integers(1 << 30))) < 0.05
    assert rejections / sweeps < 0.075  # binomial(300, 0.05): sd 0.0126


def test_enough_trials_for_the_comparisons():
    assert samples_for(3) == 10_000
    assert 1 / (samples_for(60) + 1) < 0.05 / 60 / 10
    assert samples_for(25) == 10_000 and samples_for(26) == 10_400 and samples_for(31) == 12_400  # 20 x 31 / 0.05


def test_the_ranking_draws_trials_enough_for_as_many_comparisons_as_it_makes(monkeypatch):
    """32 cells: 31 compared with the baseline, each sentence test with samples_for(31) trials (above the
    10,000 floor that hides a count of too few comparisons)."""
    from nmt.metrics import randomization
    from nmt.sweep.ranking import rank_cells

    asked = []
    monkeypatch.setattr(
        randomization, "paired_randomization", lambda *a, n_samples, **k: asked.append(n_samples) or 0.5
    )
    levels = {"norm": ["layer", "rms"], "pos": [f"p{i}" for i in range(16)]}
    records = [
        record(pos, norm, 1, 30.0 + i, run_dir=f"/runs/{pos},{norm}")
        for i, (pos, norm) in enumerate((p, n) for p in levels["pos"] for n in levels["norm"])
    ]
    runs = {f"{r['factors']['pos']},{r['factors']['norm']}": {"sentences": {"bleu": [[1] * 9]}} for r in records}
    ranking = rank_cells(records, ["norm", "pos"], levels, {"norm": "layer", "pos": "p0"}, "test_bleu", runs)
    assert asked == [samples_for(31)] * 31 and ranking["trials"] == 12_400


def test_the_sentence_test_pairs_each_seed_with_the_baselines_same_seed():
    """Each seed's outputs are paired with the baseline's of the same seed (the seeds' models share their
    initialisation and batch order): the ranking's p is the test of those pairs, which another pairing of the
    same outputs does not give."""
    from nmt.sweep.ranking import rank_cells

    refs = [f"a small test sentence {i} ." for i in range(40)]

    def outputs(words: str, wrong: str, right: int) -> list[str]:  # `words` miswritten, but in the first `right`
        return [ref if i < right else ref.replace(words, wrong) for i, ref in enumerate(refs)]

    texts = {  # each seed its own mistake: the pairs' sentences differ in other n-grams
        ("absolute", 1): outputs("small", "big", 3),
        ("absolute", 2): outputs("test sentence", "exam", 0),
        ("relative", 1): outputs("small", "big", 6),
        ("relative", 2): outputs("test sentence", "exam", 2),
    }
    stats = {key: sentence_statistics(hyps, refs, "bleu", "13a") for key, hyps in texts.items()}
    records = [record(pos, "layer", seed, 30.0 + seed, run_dir=f"/runs/{pos},{seed}") for pos, seed in texts]
    runs = {f"{pos},{seed}": {"sentences": {"bleu": stats[pos, seed].tolist()}} for pos, seed in texts}
    ranking = rank_cells(records, ["pos"], {"pos": ["absolute", "relative"]}, {"pos": "absolute"}, "test_bleu", runs)
    base = [stats["absolute", 1], stats["absolute", 2]]
    by_seed = paired_randomization(base, [stats["relative", 1], stats["relative", 2]], n_samples=10_000)
    crossed = paired_randomization(base, [stats["relative", 2], stats["relative", 1]], n_samples=10_000)
    assert ranking["trials"] == 10_000 and by_seed != crossed
    assert ranking["conditional"][("relative",)] == by_seed


def test_stored_sentence_statistics_are_reused_only_for_the_same_outputs(tmp_path):
    """statistics.json.gz keeps each run's sentence statistics with a digest of the outputs they were counted
    on: outputs written since (a run trained again) are counted again, never read from the old entry."""
    import sacrebleu

    from nmt.sweep import store

    hyps, refs = ["a small cat sat", "the dog ran off"], ["a small cat sat down", "the dog ran"]
    (tmp_path / "hyps.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "refs.txt").write_text("\n".join(refs) + "\n")
    run = {"run_dir": str(tmp_path), "hypotheses": str(tmp_path / "hyps.txt"), "references": str(tmp_path / "refs.txt")}
    expected = [list(map(int, row)) for row in sacrebleu.metrics.BLEU()._extract_corpus_statistics(hyps, [refs])]
    fresh = store.entry(run, "13a", None)
    assert fresh["sentences"]["bleu"] == expected
    stale = {"outputs": "0" * 16, "sentences": {"bleu": [[0] * 9, [0] * 9]}, "tokenize": "13a"}
    assert store.entry(run, "13a", stale)["sentences"]["bleu"] == expected  # other outputs: counted again
    same = {**fresh, "sentences": {**fresh["sentences"], "bleu": [[7] * 9, [7] * 9]}}  # marked, to see it reused
    assert store.entry(run, "13a", same)["sentences"]["bleu"] == [[7] * 9, [7] * 9]
    assert store.entry(run, "intl", same)["sentences"]["bleu"] != [[7] * 9, [7] * 9]  # another tokenizer: counted


# ---- the report ----------------------------------------------------------------------------------------
def synthetic_sweep(tmp_path, records=RECORDS):
    """The runs of ``records`` on disk, with test outputs: relative positions translate right, absolute wrong."""
    refs = [f"a small test sentence {i} ." for i in range(40)]
    for r in records:
        run_dir = tmp_path / f"pos={r['factors']['pos']},norm={r['factors']['norm']},seed={r['seed']}"
        run_dir.mkdir()
        hyps = refs if r["factors"]["pos"] == "relative" else [h.replace("small", "big") for h in refs]
        (run_dir / "hyps.txt").write_text("\n".join(hyps) + "\n")
        (run_dir / "refs.txt").write_text("\n".join(refs) + "\n")
        (run_dir / "sweep_result.json").write_text(
            json.dumps(
                {
                    **r,
                    "run_dir": str(run_dir),
                    "hypotheses": str(run_dir / "hyps.txt"),
                    "references": str(run_dir / "refs.txt"),
                }
            )
        )


def _row(report: str, start: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_a_sweep_copied_or_moved_reports_its_own_runs_outputs_not_those_at_the_old_paths(tmp_path, monkeypatch):
    """Each record names its run's folder and outputs by absolute path: the report of a copied sweep, or of
    runs set aside (on_changed=move), read the outputs of whatever ran at the old paths since (their paired
    p and test sentences, under the set-aside runs' scores); a moved sweep lost those sections in silence."""
    import shutil

    (tmp_path / "a").mkdir()
    synthetic_sweep(tmp_path / "a")
    before = write_report(tmp_path / "a").read_text()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for hyps in (tmp_path / "a").glob("pos=relative*/hyps.txt"):  # other runs now stand at the old paths
        hyps.write_text(hyps.read_text().replace("small", "tiny"))
    copied = write_report(tmp_path / "b").read_text()
    assert _row(copied, "| 2 | layer | relative |") == _row(before, "| 2 | layer | relative |")
    section = before[before.index("## Test sentence") :]
    assert "a small test sentence 0" in section and section in copied
    shutil.move(tmp_path / "a", tmp_path / "c")  # moved: its own outputs still read
    assert "## Test sentence 0, as each cell translated it" in write_report(tmp_path / "c").read_text()
    for hyps in (tmp_path / "c").glob("*/hyps.txt"):  # gone: said where the section would be
        hyps.unlink()
    assert "Not shown: the runs' test outputs cannot be read here" in write_report(tmp_path / "c").read_text()
    # a sweep reported from a relative folder (sweeps/<name>, as Hydra gives it) keeps its absolute paths
    monkeypatch.chdir(tmp_path)
    write_report(Path("b"))
    with open(tmp_path / "b" / "results.csv", newline="") as handle:
        folders = [row["run_dir"] for row in csv.DictReader(handle)]
    assert folders and all(Path(f).is_absolute() and Path(f).parent == tmp_path / "b" for f in folders)


def test_report_from_synthetic_runs(tmp_path):
    synthetic_sweep(tmp_path)
    report = write_report(tmp_path).read_text()
    assert report.startswith(f"# Sweep {tmp_path.name}: do norm and pos change test_bleu, and do they interact?")
    assert "## What ran" in report and "| seeds | 1, 2, 3 |" in report and "| runs | 12 finished |" in report
    assert "n/a" not in report and "1 seeds" not in report
    # ranking: the baseline is each factor's first level; the seed-level p is Welch's over the runs
    assert _row(report, "| 3 | layer | absolute |")[7:] == ["baseline", "", "", ""]
    relative = _row(report, "| 2 | layer | relative |")
    welch = stats.ttest_ind(BLEU[("relative", "layer")], BLEU[("absolute", "layer")], equal_var=False).pvalue
    assert relative[3:7] == ["3", "34.00", f"{4.302653:.2f}".replace("4.30", "2.48"), "1.00"]
    assert relative[7] == "3.00" and relative[8] == f"{welch:.4f}"
    # these models' outputs differ on every sentence: the smallest p of 10,000 trials, Holm over 3 comparisons
    # (both relative cells at 1/10,001, the absolute rms cell at 1: its outputs are the baseline's)
    assert "p, these models (Holm)" in report and relative[10] == f"{3 / 10_001:.4f}"
    assert _row(report, "| 4 | rms | absolute |")[10] == "1.0000"
    assert "Seeds paired:" not in report  # every cell has the baseline's seeds
    # effects: one fit of all 12 runs; Holm over the 3 effects
    fit = effects.fit(RECORDS, "test_bleu", LEVELS)
    p = {effects.effect_name(*k, LEVELS): e["p"] for k, e in fit["effects"].items()}
    holm = analysis.holm(p)
    assert _row(report, "| pos: relative - absolute |") == [
        "pos: relative - absolute", "4.00", "2.11", "8", f"{p['pos: relative - absolute']:.4f}",
        f"{holm['pos: relative - absolute']:.4f}",
    ]  # fmt: skip
    assert (
        "The seeds are not taken as blocks (every run still counts): their 2 columns would leave the error 6 "
        "degrees of freedom, fewer than the 10 that keep the cost of blocks small."
    ) in report
    assert _row(report, "| norm: rms - layer |")[1] == "0.00"  # never "-0.00"
    # beside the adjusted p, the interval unadjusted and the one over the 3 effects at once (Bonferroni)
    se = fit["effects"][
        next(k for k in fit["effects"] if effects.effect_name(*k, LEVELS) == "pos: relative - absolute")
    ]["se"]
    joint = stats.t.ppf(1 - 0.05 / 6, 8) * se
    assert (
        f"pos=relative raises test_bleu against pos=absolute (4.00; 95% interval ± 2.11 unadjusted, ± {joint:.2f} "
        "over the 3 effects at once (Bonferroni); p (Holm)"
    ) in report
    assert "| layer | 31.00 | 34.00 |" in report  # norm x pos interaction row
    assert (tmp_path / "interaction_norm_pos.png").read_bytes().startswith(b"\x89PNG")
    lines = (tmp_path / "results.csv").read_text().splitlines()
    assert lines[0].startswith("norm,pos,seed,test_bleu") and len(lines) == 13


def with_validation(records, offsets, metric="test_bleu"):
    """``records`` with val_as_test_* = half the test score + the cell's offset + the seed."""
    val = "val_as_test_" + metric.removeprefix("test_")
    return [
        {**r, "metrics": {**r["metrics"], val: r["metrics"][metric] / 2 + offsets[cell] + r["seed"]}}
        for r in records
        for cell in [(r["factors"]["pos"], r["factors"]["norm"])]
    ]


def test_the_ranking_shows_the_same_score_on_validation_and_how_firmly_it_chooses(tmp_path):
    """Beside a test metric, each cell's mean of val_as_test_* (the same models and search on the validation
    set): here validation prefers relative/layer by 1.5, within the seeds' scatter; the test relative/rms."""
    offsets = {
        ("absolute", "layer"): 1.0,
        ("absolute", "rms"): 0.0,
        ("relative", "layer"): 5.0,
        ("relative", "rms"): 3.0,
    }
    synthetic_sweep(tmp_path, with_validation(RECORDS, offsets))
    report = write_report(tmp_path).read_text()
    text = " ".join(report.split())  # paragraphs wrap
    first = _row(report, "| 1 | rms | relative |")
    assert first[3:5] == ["3", "35.00"] and first[-1] == f"{(33 + 34 + 38) / 6 + 3 + 2:.2f}"  # the validation mean
    assert _row(report, "| 2 | layer | relative |")[-1] == f"{34 / 2 + 5 + 2:.2f}"
    assert "*validation mean*: the mean over seeds of val_as_test_bleu" in text
    assert (
        "The best validation mean is norm=layer, pos=relative's, 1.50 ahead of norm=rms, pos=relative's; a lead the "
        "intervals do not establish (they overlap, or too few seeds). On the test set it ranks 2 of 4, 1.00 behind "
        "the first." in text
    )


def flat_report(sweep_dir) -> str:
    """The report with its whitespace collapsed: paragraphs wrap."""
    return " ".join(write_report(sweep_dir).read_text().split())


def test_a_validation_lead_beyond_the_seeds_scatter_is_called_firm_and_a_tie_chooses_nothing(tmp_path):
    offsets = dict.fromkeys(BLEU, 0.0) | {
        ("absolute", "layer"): 1.0,
        ("relative", "layer"): 2.0,
        ("relative", "rms"): 20.0,
    }
    (tmp_path / "firm").mkdir()
    synthetic_sweep(tmp_path / "firm", with_validation(RECORDS, offsets))
    text = flat_report(tmp_path / "firm")
    assert (
        "norm=rms, pos=relative's, 18.50 ahead of norm=layer, pos=relative's; their intervals do not overlap." in text
    )
    assert "On the test set it ranks first." in text
    flat = [{**r, "metrics": {**r["metrics"], "val_as_test_bleu": 10.0}} for r in RECORDS]
    (tmp_path / "tie").mkdir()
    synthetic_sweep(tmp_path / "tie", flat)
    # every cell tied (runs too short to learn): said of all of them, not of the first two
    assert "On validation all 4 cells tie (10.00): validation chooses none." in flat_report(tmp_path / "tie")
    two = [
        r if r["factors"]["norm"] == "layer" else {**r, "metrics": {**r["metrics"], "val_as_test_bleu": 5.0}}
        for r in flat
    ]
    (tmp_path / "two").mkdir()
    synthetic_sweep(tmp_path / "two", two)
    assert "tie for the best mean: validation chooses neither." in flat_report(tmp_path / "two")


def test_cells_with_equal_means_share_a_rank(tmp_path):
    """Competition ranks (1, 1, 3): a tie on the test mean is not printed as an order, in the table nor in
    where validation's choice ranks."""
    rows = [{"mean": m} for m in (35.0, 33.0, 33.0, 33.0, 30.0, 30.0)]
    assert analysis.ranks(rows) == [1, 2, 2, 2, 5, 5]
    assert analysis.ranks([]) == []
    tied = {**BLEU, ("absolute", "layer"): [33.0, 34.0, 35.0]}  # the same mean as relative/layer
    records = [record(p, n, s + 1, v) for (p, n), values in tied.items() for s, v in enumerate(values)]
    offsets = dict.fromkeys(tied, 0.0) | {("absolute", "layer"): 9.0}  # validation prefers absolute/layer
    synthetic_sweep(tmp_path, with_validation(records, offsets))
    report = write_report(tmp_path).read_text()
    for start in ("| 1 | rms | relative |", "| 2 | layer | absolute |", "| 2 | layer | relative |"):
        assert _row(report, start)  # the two cells of mean 34 both rank 2 ...
    assert _row(report, "| 4 | rms | absolute |")[4] == "30.00"  # ... and the last cell 4, after them
    text = " ".join(report.split())
    assert "Cells with equal means share a rank: a tie is not an order." in text
    assert "On the test set it ranks 2 of 4, 1.00 behind the first, a rank it shares." in text


def test_perplexity_is_chosen_lowest_first_on_validation_too(tmp_path):
    ppl = {("absolute", "layer"): [90.0, 91.0, 92.0], ("absolute", "rms"): [80.0, 81.0, 82.0],
           ("relative", "layer"): [70.0, 71.0, 72.0], ("relative", "rms"): [60.0, 61.0, 62.0]}  # fmt: skip
    records = [
        {"factors": {"pos": p, "norm": n}, "seed": s + 1, "metrics": {"test_ppl": v}, "report_metric": "test_ppl"}
        for (p, n), values in ppl.items()
        for s, v in enumerate(values)
    ]
    offsets = {
        ("absolute", "layer"): 0.0,
        ("absolute", "rms"): 0.0,
        ("relative", "layer"): 0.0,
        ("relative", "rms"): 30.0,
    }
    synthetic_sweep(tmp_path, with_validation(records, offsets, "test_ppl"))
    text = " ".join(write_report(tmp_path).read_text().split())
    assert "The best validation mean is norm=layer, pos=relative's" in text  # 37 against the others' 42+
    assert "On the test set it ranks 2 of 4, 10.00 behind the first." in text


def test_without_the_validation_score_in_every_run_the_column_is_left_out_and_said_so(tmp_path):
    records = with_validation(RECORDS, dict.fromkeys(BLEU, 0.0))
    synthetic_sweep(tmp_path, [*records[:-1], RECORDS[-1]])  # one run lacks it (an earlier version's)
    report = write_report(tmp_path).read_text()
    assert "No validation column: 1 of the ranked runs lack val_as_test_bleu" in " ".join(report.split())
    assert "validation mean" not in report and len(_row(report, "| 1 | rms | relative |")) == 11


def test_a_report_with_failed_runs_and_two_seeds_names_them_and_concludes_nothing(tmp_path):
    records = [r for r in RECORDS if r["seed"] != 3 and not (r["factors"]["pos"] == "relative" and r["seed"] == 2)]
    synthetic_sweep(tmp_path, records)
    (tmp_path / "plan.json").write_text(json.dumps({"factors": {"pos": ["absolute", "relative"]}, "runs": 8}))
    for name in ("pos=relative,norm=layer,seed=2", "pos=relative,norm=rms,seed=2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep_failed.json").write_text('{"returncode": 1}')
    report = write_report(tmp_path).read_text()
    assert (
        "| runs | 8 planned, 6 finished, 2 failed (pos=relative,norm=layer,seed=2, pos=relative,norm=rms,seed=2) |"
        in report
    )
    assert "fewer than 3 seeds" in report and "None drawn" in report
    assert "–: a cell with one seed has no interval" in report
    assert "n/a" not in report and "intervals overlap" not in report and "intervals do not overlap" not in report


def test_the_sentence_test_names_the_difference_it_tests_when_seeds_are_missing(tmp_path):
    """A cell and the baseline are paired on the seeds both have: without the baseline's seed 3, each row's
    difference (all its seeds against the baseline's two) is not the one the randomisation test tests."""
    synthetic_sweep(
        tmp_path, [r for r in RECORDS if not (r["factors"] == {"pos": "absolute", "norm": "layer"} and r["seed"] == 3)]
    )
    report = write_report(tmp_path).read_text()
    base = BLEU[("absolute", "layer")][:2]
    relative = _row(report, "| 2 | layer | relative |")
    assert relative[7] == f"{34.0 - sum(base) / 2:.2f}"  # the row: three seeds against two
    tested = {
        cell: sum(BLEU[cell][s] - base[s] for s in (0, 1)) / 2
        for cell in (("relative", "rms"), ("relative", "layer"), ("absolute", "rms"))
    }
    assert "Seeds paired: a cell and the baseline are compared on the seeds both have" in report
    for (pos, norm), diff in tested.items():
        assert f"norm={norm}, pos={pos}: seeds 1, 2, difference {diff:.2f}" in report


def test_a_run_without_the_reports_metric_is_left_out_of_every_statistic(tmp_path):
    """A run whose final test score is missing stopped the report (KeyError) once the sentence test paired
    seeds by their scores."""
    unscored = {"pos": "relative", "norm": "layer"}
    records = [
        {**r, "metrics": {"test_bleu": None}} if r["factors"] == unscored and r["seed"] == 3 else r for r in RECORDS
    ]
    synthetic_sweep(tmp_path, records)
    report = write_report(tmp_path).read_text()
    relative = _row(report, "| 2 | layer | relative |")
    assert relative[3:5] == ["2", "33.50"]  # seeds 1 and 2 only, in the sentence test too:
    assert "norm=layer, pos=relative: seeds 1, 2, difference 3.00" in report  # (33 + 34 - 30 - 31) / 2


def test_a_nan_or_infinite_score_is_a_run_without_it_named_in_the_report(tmp_path):
    """A diverged run's nan stopped the report in statistics.stdev (AttributeError), and the fit gave a nan
    effect p = 0: "significant"."""
    broken = {("relative", "layer", 3): math.nan, ("absolute", "rms", 1): math.inf}
    records = [
        {**r, "metrics": {"test_bleu": broken.get((r["factors"]["pos"], r["factors"]["norm"], r["seed"]), v)}}
        for r, v in ((r, r["metrics"]["test_bleu"]) for r in RECORDS)
    ]
    assert all(math.isnan(e["p"]) for e in effects.fit(records, "test_bleu", LEVELS)["effects"].values())
    synthetic_sweep(tmp_path, records)
    report = write_report(tmp_path).read_text()
    assert _row(report, "| 2 | layer | relative |")[3:5] == ["2", "33.50"]  # seeds 1 and 2
    assert _row(report, "| 4 | rms | absolute |")[3:5] == ["2", "30.50"]  # seeds 2 and 3
    text = " ".join(report.split())
    assert "**Note:** 2 run(s) recorded a score that is not a number or is infinite" in text
    assert "pos=absolute,norm=rms,seed=1 (test_bleu); pos=relative,norm=layer,seed=3 (test_bleu)." in text
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert sorted(row["test_bleu"] for row in rows if row["test_bleu"] in ("nan", "inf")) == ["inf", "nan"]


def test_main_effects_of_a_design_with_a_combination_unrun_are_said_to_assume_no_interaction(tmp_path):
    """Every seed of relative/rms failed: the fit, main effects alone, measures pos at layer alone and takes
    the interaction to be zero; the report said "averaged over the other factors"."""
    records = [r for r in RECORDS if (r["factors"]["pos"], r["factors"]["norm"]) != ("relative", "rms")]
    fit = effects.fit(records, "test_bleu", LEVELS)
    assert fit["model"] == "main effects" and not fit["averaged"] and fit["empty_cells"] == [("rms", "relative")]
    # three cells of three seeds, three coefficients: the cells' means exactly, so pos is measured at layer
    assert fit["effects"][(("pos",), ("relative",))]["diff"] == pytest.approx(34.0 - 31.0)
    assert effects.fit(RECORDS, "test_bleu", LEVELS)["averaged"]
    synthetic_sweep(tmp_path, records)
    text = " ".join(write_report(tmp_path).read_text().split())
    assert "Here **1 combination of levels has no finished run** (norm=rms, pos=relative)" in text
    assert "pos=relative raises test_bleu against pos=absolute (3.00" in text
    assert "averaged over the other factors" not in text
    assert "in a fit that takes the interactions it leaves out to be zero (1 combination of levels" in text
    # the level tables' means compare other mixtures of cells: said, with the combination each level lacks
    pos, norm = (analysis.level_summary(records, "test_bleu", f) for f in ("pos", "norm"))
    assert (pos["relative"]["cells"], pos["relative"]["missing"], pos["absolute"]["missing"]) == (1, ["norm=rms"], [])
    assert norm["rms"]["missing"] == ["pos=relative"] and norm["layer"]["cells"] == 2
    assert "| level | runs | mean (of its cells) | std (its runs) | min | max | cells |" in text
    assert "| relative | 3 | 34.00 | " in text and "| 1 of 2 |" in text
    assert "pos=relative has no run with norm=rms: its mean is over the cells it has, so it leans toward them" in text
    assert "norm=rms has no run with pos=relative: its mean" in text
    assert all(not s["missing"] for s in analysis.level_summary(RECORDS, "test_bleu", "pos").values())
    (tmp_path / "all").mkdir()
    synthetic_sweep(tmp_path / "all", RECORDS)
    balanced = " ".join(write_report(tmp_path / "all").read_text().split())
    assert (
        "| level | runs | mean (of its cells) | std (its runs) | min | max |" in balanced
        and "has no run with" not in balanced
    )


def test_without_a_baseline_run_the_report_says_why_no_cell_is_compared_with_it(tmp_path):
    records = [r for r in RECORDS if (r["factors"]["pos"], r["factors"]["norm"]) != ("absolute", "layer")]
    synthetic_sweep(tmp_path, records)
    text = " ".join(write_report(tmp_path).read_text().split())
    assert "**The baseline, norm=layer, pos=absolute, has no finished run**, so no cell is compared with it" in text
    assert "No cell is compared with the baseline (norm=layer, pos=absolute): it has no finished run" in text
    assert "each cell against the baseline by Welch's t-test" not in text


def test_means_equal_in_decimals_tie_whatever_their_floats_last_bits():
    """fmean of these seeds is 29.840000000000003 and 29.84: ranked 1 and 2, "0.00 ahead"."""
    first, second = [30.55, 29.94, 29.03], [29.52, 30.54, 29.46]
    import statistics

    assert statistics.fmean(first) != statistics.fmean(second)  # what the tie must see through
    rows = [{"mean": statistics.fmean(v)} for v in sorted((first, second), key=statistics.fmean, reverse=True)]
    assert analysis.ranks(rows) == [1, 1]
    assert not analysis.same_mean(29.84, 29.85)


def test_a_perplexity_report_ranks_lower_first_and_makes_no_sentence_test(tmp_path):
    for r in RECORDS:
        run_dir = tmp_path / f"pos={r['factors']['pos']},norm={r['factors']['norm']},seed={r['seed']}"
        run_dir.mkdir()
        ppl = {**r, "metrics": {"test_ppl": r["metrics"]["test_bleu"] * 3, "test_bleu": None}}
        (run_dir / "sweep_result.json").write_text(json.dumps({**ppl, "run_dir": str(run_dir)}))
    report = write_report(tmp_path).read_text()  # metric "auto": test_ppl, as the runs are language models
    assert "| metric | test_ppl (lower is better) |" in report and "by test_ppl (lower is better)" in report
    assert report.count("| 1 | rms | absolute | 3 | 90.00 |") == 1  # the lowest perplexity ranks first
    assert "pos=relative raises test_ppl against pos=absolute (12.00" in report and ": worse." in report
    assert "p, these models" not in report


def test_the_baseline_is_declared_or_the_first_level_as_written_and_checked(tmp_path):
    synthetic_sweep(tmp_path)
    (tmp_path / "plan.json").write_text(json.dumps({"factors": {"pos": ["relative", "absolute"]}, "runs": 12}))
    report = write_report(tmp_path).read_text()
    assert "Baseline: norm=layer, pos=relative." in report and "| pos: absolute - relative | -4.00 |" in report
    report = write_report(tmp_path, baseline={"norm": "rms"}).read_text()
    assert "Baseline: norm=rms, pos=relative." in report
    with pytest.raises(
        ValueError, match=r"baseline: pos=rope is not a level of pos \(levels: \['relative', 'absolute'\]\)"
    ):
        write_report(tmp_path, baseline={"pos": "rope"})
    with pytest.raises(
        ValueError, match=r"baseline: heads is not a factor of this sweep \(factors: \['norm', 'pos'\]\)"
    ):
        write_report(tmp_path, baseline={"heads": "4"})
    with pytest.raises(
        ValueError, match=r"report_metric=test_blue: no finished run has it \(did you mean test_bleu\?\); the runs have"
    ):
        write_report(tmp_path, metric="test_blue")


def test_numeric_levels_sort_numerically_in_every_table(tmp_path):
    records = [
        {**record("absolute", "layer", s, 30.0 + int(h) / 10 + s / 10), "factors": {"heads": h, "norm": n}}
        for h in ("10", "2", "4")
        for n in ("layer", "rms")
        for s in (1, 2, 3)
    ]
    for r in records:
        run_dir = tmp_path / f"heads={r['factors']['heads']},norm={r['factors']['norm']},seed={r['seed']}"
        run_dir.mkdir()
        (run_dir / "sweep_result.json").write_text(json.dumps({**r, "run_dir": str(run_dir)}))
    report = write_report(tmp_path).read_text()
    assert "| factor heads | 2 (reference), 4, 10 |" in report
    levels = [line.split("|")[1].strip() for line in report.split("### heads")[1].splitlines() if line.startswith("| ")]
    assert levels[1:4] == ["2", "4", "10"]
    assert report.index("| heads: 4 - 2 |") < report.index("| heads: 10 - 2 |")
    rows = [
        line.split("|")[1].strip() for line in report.split("### heads x norm")[1].splitlines() if line.startswith("| ")
    ]
    assert rows[1:4] == ["2", "4", "10"]
    # a reference other than the first level, named by another spelling of its number (1e1 for 10): the tables
    # keep the levels' order, "What ran" marks the reference where it stands, the fit is against it
    report = write_report(tmp_path, baseline={"heads": "1e1"}).read_text()
    assert "| factor heads | 2, 4, 10 (reference) |" in report
    rows = [
        line.split("|")[1].strip() for line in report.split("### heads x norm")[1].splitlines() if line.startswith("| ")
    ]
    assert rows[1:4] == ["2", "4", "10"]
    assert "| heads: 2 - 10 |" in report
    with pytest.raises(ValueError, match=r"baseline: heads=3 is not a level of heads"):
        write_report(tmp_path, baseline={"heads": "3"})


def test_a_finished_sweep_is_re_reported_from_its_statistics_file_alone(tmp_path):
    synthetic_sweep(tmp_path)
    first = write_report(tmp_path).read_text()
    with gzip.open(tmp_path / "statistics.json.gz", "rt") as handle:
        saved = json.load(handle)
    assert len(saved["runs"]) == 12 and "a small test sentence" not in json.dumps(saved)  # no corpus text
    for folder in tmp_path.glob("pos=*"):
        shutil.rmtree(folder)
    again = write_report(tmp_path).read_text()
    note = (
        "**Note:** made from statistics.json.gz alone, the run folders not being here: every number below is as "
        "the runs recorded it, but the validation curves and the test outputs"
    )
    assert note in " ".join(again.split()) and note not in " ".join(first.split())  # said, not left out silently
    without_note = "\n\n".join(p for p in again.split("\n\n") if not p.startswith("**Note:** made from"))
    keep = [s.strip() for s in first.split("\n## ") if not s.startswith("Test sentence")]
    assert keep == [
        s.strip() for s in without_note.split("\n## ")
    ]  # the same report but for the outputs it cannot show any more


def test_a_run_without_its_record_is_named_and_its_stored_statistics_kept(tmp_path):
    """A finished run whose record is lost (its results.json still there) is named as trained but not
    recorded, a planned run never started as not run yet, and writing the report again keeps the stored
    statistics of the run it cannot read now."""
    scoring = {"checkpoints": "best.ckpt", "search": "beam 5, length penalty 1.0", "bleu_signature": "nrefs:1|tok:13a"}
    synthetic_sweep(tmp_path, [{**r, "scoring": scoring} for r in RECORDS])
    names = sorted(folder.name for folder in tmp_path.glob("pos=*")) + ["pos=rope,norm=layer,seed=1"]
    (tmp_path / "plan.json").write_text(json.dumps({"factors": {}, "runs": 13, "run_names": names}))
    report = write_report(tmp_path).read_text()
    # (a table cell escapes the signature's bars)
    assert "| final scores made with | best.ckpt, beam 5, length penalty 1.0, bleu nrefs:1\\|tok:13a |" in report
    assert "| runs | 13 planned, 12 finished, 1 not run yet (pos=rope,norm=layer,seed=1) |" in report
    lost, unscored = tmp_path / "pos=relative,norm=rms,seed=3", tmp_path / "pos=relative,norm=rms,seed=2"
    (lost / "sweep_result.json").unlink()
    (lost / "results.json").write_text('{"finished": true}')
    (unscored / "sweep_result.json").unlink()  # stopped during its final scores
    (unscored / "results.json").write_text('{"finished": false, "stage": "trained"}')
    report = write_report(tmp_path).read_text()
    assert (
        "| runs | 13 planned, 10 finished, 1 finished but not recorded (pos=relative,norm=rms,seed=3: the sweep "
        "command records them), 1 trained, final scores not made (pos=relative,norm=rms,seed=2: the sweep command "
        "makes them), 1 not run yet (pos=rope,norm=layer,seed=1) |"
    ) in report
    # a run stopped mid-training, its state saved, is not "not run yet": the sweep command resumes it
    (tmp_path / "pos=rope,norm=layer,seed=1" / "checkpoints").mkdir(parents=True)
    (tmp_path / "pos=rope,norm=layer,seed=1" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert "1 stopped before their end (pos=rope,norm=layer,seed=1: the sweep command resumes them) |" in (
        write_report(tmp_path).read_text()
    )
    assert (
        "keeps the statistics of 2 run(s) reported before whose records are not found now, left out of this "
        f"report: {unscored.name}, {lost.name}." in report
    )
    for _ in range(2):  # kept however often the report is written again
        with gzip.open(tmp_path / "statistics.json.gz", "rt") as handle:
            saved = json.load(handle)
        assert len(saved["runs"]) == 10 and sorted(saved["kept"]) == [unscored.name, lost.name]
        assert saved["kept"][lost.name]["sentences"]["bleu"]
        write_report(tmp_path)
    # a run of an earlier plan (its record still there) is named as such, not as a record not found
    plan = json.loads((tmp_path / "plan.json").read_text())
    earlier = "pos=absolute,norm=layer,seed=3"
    plan["run_names"].remove(earlier)
    (tmp_path / "plan.json").write_text(json.dumps({**plan, "runs": 12}))
    report = write_report(tmp_path).read_text()
    assert f"not of this sweep's plan (an earlier sweep's levels or seeds) and are left out: {earlier}." in report
    assert "keeps the statistics of 2 run(s)" in report and earlier not in report.split("keeps the statistics")[1]
    plan["run_names"].append(earlier)
    (tmp_path / "plan.json").write_text(json.dumps({**plan, "runs": 13}))
    scored_otherwise = json.loads((tmp_path / "pos=absolute,norm=rms,seed=1" / "sweep_result.json").read_text())
    scored_otherwise["scoring"] = {**scoring, "checkpoints": "the mean of 10 checkpoints"}
    (tmp_path / "pos=absolute,norm=rms,seed=1" / "sweep_result.json").write_text(json.dumps(scored_otherwise))
    report = write_report(tmp_path).read_text()
    assert (
        "| final scores made with (2 ways) | best.ckpt, beam 5" in report
        and "; or the mean of 10 checkpoints" in report
    )
    assert "**Warning:** the runs' final scores were made in 2 ways" in report


def test_sweep_py_report_writes_again_with_the_sweep_own_metric_unless_told_another(tmp_path, capsys):
    from nmt.sweep.report import main as report_main

    offsets = dict.fromkeys(BLEU, 0.0) | {("relative", "layer"): 5.0}
    synthetic_sweep(tmp_path, with_validation(RECORDS, offsets))
    saved = {"report_metric": "val_as_test_bleu", "baseline": {"pos": "relative"}, "report_sentence": 3}
    saved["hydra"] = {"overrides": {"task": []}, "sweeper": {"params": {}}}  # as Hydra writes it, in short
    (tmp_path / "multirun.yaml").write_text(json.dumps(saved))  # JSON is YAML
    report_main([str(tmp_path)])
    report = (tmp_path / "report.md").read_text()
    assert "## Ranking of cells by val_as_test_bleu (higher is better)" in report
    assert _row(report, "| 1 | layer | relative |")[7:8] == ["baseline"]  # the sweep's own baseline
    assert "a small test sentence 3 ." in report and "a small test sentence 0 ." not in report  # and sentence
    report_main([str(tmp_path), "--metric", "test_bleu"])
    assert "## Ranking of cells by test_bleu (higher is better)" in (tmp_path / "report.md").read_text()
    with pytest.raises(
        SystemExit, match=r"error: --metric test_blue: no finished run has it \(did you mean test_bleu\?\)"
    ):
        report_main([str(tmp_path), "--metric", "test_blue"])
    (tmp_path / "multirun.yaml").unlink()  # copied without it: the defaults, said
    report_main([str(tmp_path)])
    assert "multirun.yaml is missing: the report ranks by the task's metric" in capsys.readouterr().out
    # options the sweep's own keys refuse: a report on sentence -1, a metric of no name replaced by the sweep's
    for argv, said in (
        (["--sentence", "-1"], "--sentence -1: a test sentence's index, from 0"),
        (["--metric", ""], "--metric '': name a metric the runs record"),
    ):
        with pytest.raises(SystemExit):
            report_main([str(tmp_path), *argv])
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"report.md: a file, not a folder; give a sweep's folder"):
        report_main([str(tmp_path / "report.md")])
    # a sentence past the test set's end, asked for here: refused (it wrote a report saying so, and ended 0)
    with pytest.raises(SystemExit, match=r"^error: --sentence 40: the runs' test set has sentences 0 to 39$"):
        report_main([str(tmp_path), "--sentence", "40"])


def test_a_report_metric_no_run_has_is_one_clear_error(tmp_path):
    synthetic_sweep(tmp_path)
    with pytest.raises(ValueError, match="the runs have"):
        sweep_records.resolve_metric("test_ppl", RECORDS)


def test_vectorised_bleu_equals_sacrebleu_on_every_kind_of_statistics():
    """Random corpus statistics, with orders without n-grams, unmatched orders, short and empty outputs."""
    import sacrebleu

    from nmt.metrics.randomization import corpus_scores

    rng = np.random.default_rng(0)
    rows = []
    for _ in range(3000):
        total = np.sort(rng.integers(0, 40, 4))[::-1]
        if rng.random() < 0.2:
            total[rng.integers(0, 4) :] = 0
        correct = np.minimum(total, rng.integers(0, 30, 4)) * (rng.random(4) > 0.2)
        sys_len = total[0] if rng.random() < 0.8 else rng.integers(0, 50)
        rows.append([sys_len, rng.integers(0, 60), *correct, *total])
    rows = np.array(rows, dtype=float)
    bleu = sacrebleu.metrics.BLEU()
    theirs = [bleu._compute_score_from_stats(row).score for row in rows]
    # equal to the last bit or two: numpy's vectorised exp/log (AVX-512 where the CPU has it) and the C
    # library's scalar ones may round the last bit differently
    np.testing.assert_allclose(corpus_scores(rows), theirs, rtol=1e-14, atol=0)


@pytest.mark.parametrize("patience", [None, 4])
def test_findings_name_a_fixed_budget_and_untuned_levels_beside_the_differences_they_limit(tmp_path, patience):
    """A difference found at a fixed budget with levels run alike is said to be limited by both."""
    synthetic_sweep(tmp_path)
    for run_dir in tmp_path.iterdir():
        stopping = f"early_stopping: {{patience: {patience}, monitor: val_loss}}" if patience else "early_stopping: {}"
        (run_dir / "config.yaml").write_text(f"data: {{}}\ntrainer: {{max_steps: 300, max_epochs: -1}}\n{stopping}\n")
    findings = write_report(tmp_path).read_text().split("## Findings")[1].split("\n## ")[0]
    assert "pos=relative raises test_bleu" in findings
    fixed = "**Caveat:** What this sweep finds of the levels, a difference or none, holds at its fixed budget (at most"
    fixed += " 300 updates, no early stopping)"
    assert (fixed in findings) == (patience is None)
    assert "**Caveat:** Every level of norm, pos ran with the same settings (no level_settings)" in findings


def test_findings_say_nothing_of_untuned_levels_when_each_level_ran_its_own_settings(tmp_path):
    synthetic_sweep(tmp_path)
    settings = {"pos": {"absolute": ["lr=1e-3"], "relative": ["lr=2e-3"]}}
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 12, "level_settings": settings}))
    report = write_report(tmp_path).read_text()
    findings = report.split("## Findings")[1].split("\n## ")[0]
    assert "pos=relative raises test_bleu" in findings and "Caveat" not in findings
    assert "| settings with pos=relative | lr=2e-3 |" in report


def test_a_level_without_settings_beside_tuned_ones_is_named_untuned_and_a_level_not_run_is_not_shown(tmp_path):
    """A tuned file loaded for another sweep listed settings of a level that never ran (noam), and the
    caveat vanished although pos=relative ran on the defaults beside a tuned pos=absolute."""
    synthetic_sweep(tmp_path)
    settings = {"pos": {"absolute": ["lr=1e-3"], "rope": ["lr=3e-3"]}}
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 12, "level_settings": settings}))
    report = write_report(tmp_path).read_text()
    findings = report.split("## Findings")[1].split("\n## ")[0]
    assert "**Caveat:** pos=relative ran without settings of its own, beside levels that had theirs" in findings
    assert "| settings with pos=relative | none of its own" in report and "pos=rope" not in report


def test_a_budget_that_is_a_factor_is_said_by_its_levels_not_the_first_runs(tmp_path):
    """A newcomer's trial: a sweep of trainer.max_epochs=3,8 was said to train "at most 3 epochs" each."""
    records = [{**r, "factors": {"trainer.max_epochs": "3" if r["factors"]["pos"] == "absolute" else "8"}}
               for r in RECORDS if r["factors"]["norm"] == "layer"]  # fmt: skip
    for r in records:
        run_dir = tmp_path / f"trainer.max_epochs={r['factors']['trainer.max_epochs']},seed={r['seed']}"
        run_dir.mkdir()
        (run_dir / "sweep_result.json").write_text(json.dumps({**r, "run_dir": str(run_dir)}))
        epochs = r["factors"]["trainer.max_epochs"]
        (run_dir / "config.yaml").write_text(f"data: {{}}\ntrainer: {{max_steps: -1, max_epochs: {epochs}}}\n")
    report = " ".join(write_report(tmp_path).read_text().split())
    assert "at most 3, 8 epochs (by the factor's level); no early stopping" in report
    assert "at most 3 epochs;" not in report and "at most 8 epochs;" not in report


def test_a_finding_of_no_difference_carries_the_caveats_of_one_found(tmp_path):
    """A null at a fixed budget with levels run alike is as limited as a difference (a reviewer's trial: the
    caveats were left out exactly where "no effect" was claimed)."""
    same = [{**r, "metrics": {"test_bleu": 30.0 + r["seed"]}} for r in RECORDS]
    synthetic_sweep(tmp_path, same)
    for run_dir in tmp_path.iterdir():
        (run_dir / "config.yaml").write_text("data: {}\ntrainer: {max_steps: 300, max_epochs: -1}\n")
    findings = write_report(tmp_path).read_text().split("## Findings")[1].split("\n## ")[0]
    assert "No main effect or interaction is detectable" in findings
    assert (
        "**Caveat:** What this sweep finds of the levels, a difference or none, holds at its fixed budget" in findings
    )
    assert "**Caveat:** Every level of norm, pos ran with the same settings" in findings


def test_the_report_says_what_ended_each_run_and_warns_of_runs_cut_by_a_time_cap(tmp_path):
    """Two runs cut by trainer.max_time, eight ended by early stopping, two made before ended_by was recorded."""
    ended = ["max_time"] * 2 + ["early stopping"] * 8 + [None] * 2
    synthetic_sweep(tmp_path, [{**r, "ended_by": e} if e else r for r, e in zip(RECORDS, ended, strict=True)])
    report = write_report(tmp_path).read_text()
    row = (
        "| what ended the runs | early stopping: 8 runs, max_time: 2 runs; not recorded: 2 (runs made before it was) |"
    )
    assert row in report
    assert "**Warning:** 2 run(s) were ended by `trainer.max_time`" in report
    assert "They are: norm=layer, pos=absolute, seed 1; norm=layer, pos=absolute, seed 2." in report
    ranking = report.split("## Ranking")[1].split("\n## ")[0]
    rows = [line for line in ranking.splitlines() if line.startswith("| ")]
    assert rows[0].endswith("| cut by a maximum |")
    cut = {tuple(c.strip() for c in row.split("|")[2:4]): row.split("|")[-2].strip() for row in rows[1:]}  # norm, pos
    assert cut == {
        ("layer", "absolute"): "2 of 3",
        ("rms", "absolute"): "",
        ("layer", "relative"): "",
        ("rms", "relative"): "",
    }
    unscored = [{**r, "ended_by": e} if e else r for r, e in zip(RECORDS, ended, strict=True)]
    unscored[1] = {**unscored[1], "metrics": {}}  # cut, and without the ranked metric: not of the row's runs
    (tmp_path / "unscored").mkdir()
    synthetic_sweep(tmp_path / "unscored", unscored)
    assert "| 1 of 2 |" in write_report(tmp_path / "unscored").read_text()
    lines = (tmp_path / "results.csv").read_text().splitlines()
    column = lines[0].split(",").index("ended_by")
    assert sorted(line.split(",")[column] for line in lines[1:]) == ["", ""] + ["early stopping"] * 8 + ["max_time"] * 2


def test_runs_cut_by_their_maximum_where_early_stopping_was_on_are_said_not_converged(tmp_path):
    """Early stopping set (patience 2) and every run ended at max_epochs: the report showed the rule beside
    'max_epochs (12)' and said nothing of convergence; nor did 'None drawn' carry the caveats."""
    ended = ["max_epochs"] * 9 + ["early stopping"] * 3
    synthetic_sweep(tmp_path, [{**r, "ended_by": e} for r, e in zip(RECORDS, ended, strict=True)])
    for run_dir in tmp_path.iterdir():
        (run_dir / "config.yaml").write_text(
            "data: {}\ntrainer: {max_steps: -1, max_epochs: 4}\nearly_stopping: {patience: 2, monitor: val_bleu}\n"
        )
    report = " ".join(write_report(tmp_path).read_text().split())
    assert "**Warning:** 9 of the 12 runs ended at their maximum (max_epochs), not by early stopping" in report
    named = "They are: " + "; ".join(
        f"norm={n}, pos={p}, seed {s}"
        for p, n in sorted(BLEU, key=lambda c: c[::-1])
        if p != "relative" or n != "rms"
        for s in (1, 2, 3)
    )
    assert named.rsplit("; ", 1)[0] + "; and 1 more (results.csv's ended_by names each)." in report
    assert "| 3 of 3 |" in report and "*cut by a maximum*: of the cell's runs" in report
    fixed = [{**r, "ended_by": "max_epochs"} for r in RECORDS]  # no early stopping: a maximum is the recipe's end
    (tmp_path / "fixed").mkdir()
    synthetic_sweep(tmp_path / "fixed", fixed)
    assert "cut by a maximum" not in write_report(tmp_path / "fixed").read_text()
    findings = report.split("## Findings")[1].split(" ## ")[0]
    assert "**Caveat:** 9 run(s) ended at their maximum, not by early stopping" in findings
    two = [r for r in RECORDS if r["seed"] < 3]  # too few seeds: none drawn, the caveats still said
    (tmp_path / "two").mkdir()
    synthetic_sweep(tmp_path / "two", two)
    findings = write_report(tmp_path / "two").read_text().split("## Findings")[1].split("\n## ")[0]
    assert "None drawn" in findings and "**Caveat:** Every level of norm, pos ran with the same settings" in findings


def test_a_run_whose_config_cannot_be_read_is_named_and_the_report_still_written(tmp_path, capsys):
    synthetic_sweep(tmp_path)
    runs = sorted(tmp_path.iterdir())
    for run_dir in runs:
        (run_dir / "config.yaml").write_text("data: {tgt_lang: de}\ntrainer: {max_steps: 300}\n")
    (runs[0] / "config.yaml").write_text(": not yaml [")
    report = write_report(tmp_path).read_text()
    out = capsys.readouterr().out
    assert f"{runs[0] / 'config.yaml'} cannot be read" in out
    assert "pos=relative raises test_bleu" in report


def test_the_report_holds_only_the_planned_runs_and_names_a_damaged_record(tmp_path, capsys):
    """Runs of an earlier sweep in the same folder (another level of pos) are left out, and named, on the
    console too (a reviewer's sweep of fewer seeds replaced the folder's report without a word there); a
    record that cannot be read is named with what to do."""
    synthetic_sweep(tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("pos=relative"))
    (tmp_path / "plan.json").write_text(json.dumps({"runs": len(names), "run_names": names}))
    report = write_report(tmp_path).read_text()
    outside = len(RECORDS) - len(names)
    assert f"**Note:** {outside} finished run(s) in this folder are not of this sweep's plan" in report
    said = " ".join(capsys.readouterr().out.split())
    assert f"[sweep] note: this report covers the {len(names)} run(s) of this sweep's plan; {outside} other" in said
    assert "pos=absolute" not in report.split("## Ranking")[1].split("\n## ")[0]
    (tmp_path / names[0] / "sweep_result.json").write_text('{"factors": {"pos": "rel')
    with pytest.raises(ValueError, match=rf"{names[0]}/sweep_result.json cannot be read .*remove it and rerun"):
        write_report(tmp_path)


@pytest.mark.parametrize(
    ("contents", "said"),
    [
        ("{}", "it holds no 'factors'"),  # counted as a finished run; the report then failed on KeyError('metrics')
        ('{"factors": {}, "seed": 1, "metrics": {"test_bleu": 9.0}, "run_dir": 7}', "its 'run_dir' is 7, not a str"),
        (
            '{"factors": {}, "seed": 1, "run_dir": "x", "metrics": {"test_bleu": "abc"}}',
            "its metric 'test_bleu' is 'abc', not a",
        ),
        ('{"factors": {}, "seed": "1", "run_dir": "x", "metrics": {}}', "its 'seed' is '1', not an int"),
    ],
)
def test_a_record_of_other_contents_is_named_as_one_that_cannot_be_read(tmp_path, contents, said):
    """A record that was JSON but not a run's: the sweep counted it as done, the report failed on a bare
    KeyError or float() error naming no file. Now it is named as a damaged record is, with what to do."""
    from nmt.sweep.plan import _readable

    synthetic_sweep(tmp_path)
    record = sorted(tmp_path.glob("pos=*"))[0] / "sweep_result.json"
    record.write_text(contents)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(record))} cannot be read \({re.escape(said)}.*rerun the"):
        write_report(tmp_path)
    assert not _readable(record)  # the sweep's plan counts it among the runs to record again, not as done


def test_a_damaged_statistics_file_is_kept_aside_and_made_again_from_the_run_folders(tmp_path, capsys):
    """A statistics.json.gz that was not gzip stopped the report with a traceback (BadGzipFile); gzip holding
    no JSON with "Expecting value", naming no file, though every run folder could make it again."""
    synthetic_sweep(tmp_path)
    first = write_report(tmp_path).read_text()
    for number, damaged in enumerate((b"garbage", gzip.compress(b"garbage"), gzip.compress(b"[1, 2]")), start=1):
        (tmp_path / "statistics.json.gz").write_bytes(damaged)
        assert write_report(tmp_path).read_text() == first
        out = capsys.readouterr().out
        aside = f"statistics.json.gz.unreadable{number if number > 1 else ''}"  # an earlier one not written over
        assert f"warning: {tmp_path / 'statistics.json.gz'} cannot be read (" in out
        assert f"kept as {aside}, and made again from the 12 finished runs' folders" in out
        assert (tmp_path / aside).read_bytes() == damaged
    # with the run folders gone, the file was all there was: named, with why it cannot be made again
    (tmp_path / "statistics.json.gz").write_bytes(b"garbage")
    for folder in tmp_path.glob("pos=*"):
        shutil.rmtree(folder)
    with pytest.raises(ValueError, match=r"statistics.json.gz cannot be read .*hold no finished run"):
        write_report(tmp_path)


def test_a_run_made_under_other_settings_than_its_cells_others_is_warned_of(tmp_path):
    """A run folder of another sweep copied in as a cell's seed was counted without a word (sweep.py report
    reads no settings), its cell's mean moved by a run of 1 update."""
    synthetic_sweep(tmp_path)
    for run_dir in tmp_path.glob("pos=*"):
        config = {"seed": int(run_dir.name[-1]), "trainer": {"max_epochs": 2, "max_steps": -1}, "threads": 1}
        if run_dir.name == "pos=relative,norm=rms,seed=3":
            config = {**config, "trainer": {"max_epochs": 12, "max_steps": 1}}
        (run_dir / "fingerprint.json").write_text(json.dumps({"config": config}))
    report = " ".join(write_report(tmp_path).read_text().split())
    assert (
        "**Warning:** 1 run(s) were made under other settings than the other runs of their cell, and are counted "
        "among its seeds: pos=relative,norm=rms,seed=3 (trainer.max_epochs: 12, the cell's others 2, "
        "trainer.max_steps: 1, the cell's others -1)."
    ) in report
    # two seeds a cell, one of them another sweep's: no settings most of its runs share, so both are named (the
    # one named was chosen by the string hashes' order)
    from nmt.sweep.summary import runs_of_other_settings

    two = sweep_records.collect_records(tmp_path)
    two = [r for r in two if r["seed"] < 3 and r["factors"] == {"pos": "relative", "norm": "rms"}]
    (Path(two[0]["run_dir"]) / "fingerprint.json").write_text(json.dumps({"config": {"trainer": {"max_steps": 5}}}))
    (Path(two[1]["run_dir"]) / "fingerprint.json").write_text(json.dumps({"config": {"trainer": {"max_steps": 9}}}))
    names = ", ".join(Path(r["run_dir"]).name for r in two)
    assert runs_of_other_settings(two) == [{"run": names, "differences": ["trainer.max_steps: 5, 9"]}]


def test_cells_at_the_floor_on_every_seed_are_said_beside_the_fit(tmp_path):
    """lr=50 scored BLEU 0 on every seed: the fit, pooling its error over the cells, found "lr=50 lowers
    test_bleu" where Welch's test found nothing, and nothing said the floor was behind it."""
    from nmt.sweep.ranking import at_bound_cells

    floor = [r for r in RECORDS if r["factors"] != {"pos": "absolute", "norm": "rms"}]
    floor += [record("absolute", "rms", seed, 0.0) for seed in (1, 2, 3)]
    synthetic_sweep(tmp_path, floor)
    report = " ".join(write_report(tmp_path).read_text().split())
    findings = report[report.index("## Findings") :].split(" ## ")[0]
    assert (
        "**Caveat:** some cells scored the end of test_bleu's scale on every seed (norm=rms, pos=absolute (0 on 3 "
        "seeds)): a floor or ceiling"
    ) in findings
    rows = [{"pos": "a", "mean": 100.0, "std": 0.0, "n": 2}, {"pos": "b", "mean": 0.0, "std": 0.0, "n": 1}]
    assert at_bound_cells(rows, ["pos"], "test_chrf") == "pos=a (100 on 2 seeds)"  # one seed: no scatter to lack
    assert at_bound_cells([{"pos": "a", "mean": 0.0, "std": 0.0, "n": 3}], ["pos"], "train_loss") == (
        "pos=a (0 on 3 seeds)"
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    synthetic_sweep(plain)
    assert "end of test_bleu's scale" not in write_report(plain).read_text()


def test_an_interval_past_what_the_metric_can_take_is_said_where_it_is_read(tmp_path):
    """One diverged seed (BLEU 1 beside 30 and 31) gives its cell a t interval reaching below 0 BLEU: the table
    printed it as any other, and the findings tested the cell as if its seeds scattered normally."""
    from nmt.metrics import metric_range

    diverged = [1.0, 30.0, 31.0]
    records = [r for r in RECORDS if r["factors"] != {"pos": "absolute", "norm": "rms"}]
    records += [record("absolute", "rms", seed, bleu) for seed, bleu in enumerate(diverged, start=1)]
    synthetic_sweep(tmp_path, records)
    report = " ".join(write_report(tmp_path).read_text().split())
    mean = float(np.mean(diverged))
    low, high = stats.t.interval(0.95, len(diverged) - 1, loc=mean, scale=stats.sem(diverged))
    assert low < 0 < high < 100  # the independent interval: below the scale only
    named = f"norm=rms, pos=absolute ({mean:.2f} ± {high - mean:.2f}: below 0)"
    ranking = report[report.index("## Ranking") :].split(" ## ")[0]
    assert f"95% intervals past the values test_bleu can take: {named}. There the seeds are too few" in ranking
    assert "relative" not in ranking.split("can take:")[1].split(". There")[0]  # the other cells stay unnamed
    findings = report[report.index("## Findings") :].split(" ## ")[0]
    t_two = stats.t.ppf(0.975, 2)  # three seeds: the t quantile alone widens an ordinary scatter's interval
    assert (
        f"some cells' 95% intervals reach past the values test_bleu can take ({named}): with 3 seeds a t interval "
        f"reaches {t_two:.1f} standard errors each way, so an ordinary scatter does that"
    ) in findings
    # two seeds, where such intervals are most common: no finding drawn, the caveat said all the same
    (tmp_path / "two").mkdir()
    synthetic_sweep(tmp_path / "two", [r for r in records if r["seed"] < 3])
    two = " ".join(write_report(tmp_path / "two").read_text().split())
    findings = two[two.index("## Findings") :].split(" ## ")[0]
    assert "None drawn" in findings and "some cells' 95% intervals reach past the values test_bleu can take" in findings
    t_one = stats.t.ppf(0.975, 1)  # with two seeds: the interval's width, not the runs, is what is said
    assert f"with 2 seeds a t interval reaches {t_one:.1f} standard errors each way, so an ordinary scatter" in findings
    # the bounds by the metric's name: scores in percent, accuracies as fractions, perplexity at least 1
    assert metric_range("val_as_test_bleu_tok_lc") == metric_range("test_rougeL") == (0.0, 100.0)
    assert metric_range("val_acc") == (0.0, 1.0) and metric_range("test_ppl") == (1.0, math.inf)
    assert metric_range("train_loss") == (0.0, math.inf) and metric_range("parameters") == (-math.inf, math.inf)
    assert analysis.past_range(99.0, 2.0, "test_chrf") == "above 100"
    assert analysis.past_range(1.5, 1.0, "test_ppl") == "below 1" and analysis.past_range(50.0, math.nan, "x") == ""


def test_findings_name_each_cell_by_its_factors():
    """A cell better than the baseline is named factor=level (it was a bare "layer, relative")."""
    from nmt.sweep.document import Document
    from nmt.sweep.findings import findings

    doc = Document("t")
    ranking = {"holm": {("layer", "relative"): 0.01}, "compared": {("layer", "relative"): {"diff": 3.0}}}
    findings(doc, ranking, None, LEVELS, "test_bleu", False, conclusive=True)
    assert "1 cell is better than the baseline by the seed-level test after Holm: norm=layer, pos=relative." in (
        doc.markdown()
    )


def test_a_runs_cost_is_its_whole_process_or_its_sittings_training_whichever_is_more():
    """The report and the plan's expected cost added training time alone: short runs cost about 2.3x that."""
    from nmt.sweep.summary import run_cost_s

    assert run_cost_s({"wall_time_s": 10.0, "process_s": 25.0}) == 25.0  # one sitting: start-up and scores in
    assert run_cost_s({"wall_time_s": 40.0, "process_s": 25.0}) == 40.0  # resumed: every sitting's training
    assert run_cost_s({"wall_time_s": 12.0}) == 12.0 and run_cost_s({}) == 0.0  # recorded before process_s


def test_a_sweep_whose_runs_all_score_the_same_draws_nothing(tmp_path):
    """Every run at BLEU 0 (trained too little): the findings read '± 0.00 wide intervals' as a precise null."""
    synthetic_sweep(tmp_path, [record(p, n, s, 0.0) for p, n in BLEU for s in (1, 2, 3)])
    text = " ".join(write_report(tmp_path).read_text().split())
    findings = text[text.index("## Findings") :]
    assert findings.startswith("## Findings None drawn: every run scored 0 on test_bleu, so the runs do not differ")
    assert "cannot be told from seed noise" not in findings
    # with fewer than 3 seeds too, or one: said before the seeds are (more of them would not tell the runs apart)
    for seeds in ((1, 2), (1,)):
        (tmp_path / str(len(seeds))).mkdir()
        synthetic_sweep(tmp_path / str(len(seeds)), [record(p, n, s, 0.0) for p, n in BLEU for s in seeds])
        text = " ".join(write_report(tmp_path / str(len(seeds))).read_text().split())
        assert text[text.index("## Findings") :].startswith("## Findings None drawn: every run scored 0 on test_bleu")


def test_level_tables_are_written_where_no_effect_can_be_tested(tmp_path):
    """One seed per cell of a saturated design leaves the fit no degree of freedom: the level tables, which
    need no fit, were dropped with it. A test sentence out of range is said, not left out."""
    one_seed = [r for r in RECORDS if r["seed"] == 1 and r["factors"]["norm"] == "layer"]  # pos: 2 runs, 2 terms
    synthetic_sweep(tmp_path, one_seed)
    report = write_report(tmp_path, sentence=99).read_text()
    assert "No effect can be tested" in report
    main = report.split("## Main effects")[1].split("\n## ")[0]
    assert "### pos" in main and "| relative | 1 | 33.00 |" in main
    assert "The test set has sentences 0 to 39: choose one with report_sentence=N (or python sweep.py report" in report


def test_where_the_fit_and_the_seed_level_tests_disagree_the_findings_say_why(tmp_path):
    """One factor, cells scattered unlike: the fit's pooled variance finds pos=none worse (p 0.0084, Holm
    0.017, as statsmodels' y ~ C(pos) says: 9 runs leave seed columns too few degrees of freedom), Welch's test
    of the same contrast does not (0.080, Holm 0.16). The Findings stated both, unreconciled; now they say what
    each test assumes."""
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    values = {"absolute": [15.0, 19.0, 23.0], "relative": [17.7, 19.0, 20.3], "none": [11.15, 11.35, 11.55]}
    synthetic_sweep(tmp_path, [record(p, "layer", s + 1, v) for p, vs in values.items() for s, v in enumerate(vs)])
    report = flat_report(tmp_path)
    frame = pd.DataFrame([{"pos": p, "seed": s, "y": v} for p, vs in values.items() for s, v in enumerate(vs)])
    reference = smf.ols("y ~ C(pos, Treatment('absolute'))", frame).fit()
    fitted = reference.pvalues["C(pos, Treatment('absolute'))[T.none]"]
    welch = stats.ttest_ind(values["none"], values["absolute"], equal_var=False).pvalue
    assert fitted < 0.05 / 2 and welch * 2 > 0.05  # the two tests, Holm over two contrasts
    assert "pos=none lowers test_bleu against pos=absolute (7.65; 95% interval ± " in report
    assert f"p (Holm) {2 * fitted:.2g}): worse." in report
    assert "No cell differs detectably from the baseline by the seed-level test after Holm's adjustment." in report
    stds = sorted(float(np.std(v, ddof=1)) for v in values.values())
    assert (
        "The fit and the seed-level tests answer differently. The fit pools every cell's scatter over seeds into "
        f"one estimate, as if all cells scattered alike (here the cells' standard deviations run from {stds[0]:.2f} "
        f"to {stds[-1]:.2f}); the seed-level test compares a cell with the baseline by their own seeds alone "
        "(Welch), assuming nothing of the other cells and pairing no seeds"
    ) in report
    # whether they scatter unlike, tested: Brown-Forsythe (scipy's Levene about the medians)
    unlike = stats.levene(*values.values(), center="median").pvalue
    verdict = "they do detectably" if unlike < 0.05 else "they do not detectably (which few seeds say weakly)"
    assert f"here {verdict}: Brown-Forsythe test of equal scatter, p = {unlike:.2g}." in report
    assert "share a part detectably" not in report
    # where they agree, nothing of it
    (tmp_path / "agree").mkdir()
    clear = {"absolute": [30.0, 31.0, 32.0], "relative": [40.0, 41.0, 42.0], "none": [20.0, 21.0, 22.0]}
    synthetic_sweep(
        tmp_path / "agree", [record(p, "layer", s + 1, v) for p, vs in clear.items() for s, v in enumerate(vs)]
    )
    report = flat_report(tmp_path / "agree")
    assert "answer differently" not in report
    assert "cell is better than the baseline by the seed-level test after Holm: pos=relative" in report


def test_a_factor_with_one_level_among_the_finished_runs_is_still_named_with_its_level(tmp_path):
    """Where only pos=absolute's runs finished, the report's title, What ran and results.csv lost pos
    altogether: "test_bleu over seeds of one configuration" said nowhere which."""
    import csv

    plan = {"factors": {"pos": ["absolute", "relative"], "norm": ["layer", "rms"], "seed": ["1", "2", "3"]}}
    for name, kept in (("one_factor", lambda r: True), ("none", lambda r: r["factors"]["norm"] == "layer")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "plan.json").write_text(json.dumps({**plan, "runs": 12}))
        synthetic_sweep(folder, [r for r in RECORDS if r["factors"]["pos"] == "absolute" and kept(r)])
        report = flat_report(folder)
        assert (
            "| factor pos | absolute alone among the finished runs (also planned: relative; no run of them "
            "finished) |" in report
        )
        with open(folder / "results.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert {row["pos"] for row in rows} == {"absolute"} and len(rows) == (6 if name == "one_factor" else 3)
        if name == "one_factor":
            assert report.startswith(f"# Sweep {folder.name}: does norm change test_bleu?")
        else:
            assert report.startswith(f"# Sweep {folder.name}: test_bleu over seeds of one configuration "
                                     "(norm=layer, pos=absolute)")  # fmt: skip


def test_a_sweep_over_a_plain_setting_is_not_told_its_levels_ran_untuned(tmp_path):
    """A tuning sweep over lr was told "every level ran with the same settings ... compared untuned": its
    levels are the settings. With one main effect, its interval's width is said once ("± a to ± a")."""
    values = {"0.001": [30.0, 31.0, 32.0], "0.002": [30.2, 31.4, 31.9]}
    for lr, scores in values.items():
        for seed, bleu in enumerate(scores, 1):
            run_dir = tmp_path / f"lr={lr},seed={seed}"
            run_dir.mkdir()
            result = {**record("absolute", "layer", seed, bleu, str(run_dir)), "factors": {"lr": lr}}
            (run_dir / "sweep_result.json").write_text(json.dumps(result))
            (run_dir / "config.yaml").write_text("data: {}\ntrainer: {max_steps: 300, max_epochs: -1}\n")
    findings = flat_report(tmp_path).split("## Findings")[1].split(" ## ")[0]
    pooled = stats.ttest_ind(values["0.002"], values["0.001"])  # the fit of one factor: the pooled t-test
    width = stats.t.ppf(0.975, 4) * (np.mean(values["0.002"]) - np.mean(values["0.001"])) / pooled.statistic
    assert "No main effect or interaction is detectable at the 5% level after Holm's adjustment over 1 test." in (
        findings
    )
    assert f"The main effects' 95% intervals are ± {width:.2f};" in findings
    # what could have been found: one test, so its 95% interval; never "smaller effects cannot be told apart"
    assert f"would have to lie beyond ± {width:.2f} to be found here (its interval at 1 - 0.05/1)" in findings
    assert "not that smaller ones are absent" in findings and "Every level" not in findings


def test_a_null_finding_says_what_size_holms_adjustment_could_have_found(tmp_path):
    """A reviewer's trial: "intervals are ± 0.12 wide: smaller effects cannot be told from seed noise" beside
    an unfound estimate of 0.125. With m tests Holm's first step is at 0.05/m: an estimate must lie beyond its
    1 - 0.05/m interval, t_{1-0.025/m, df} standard errors, checked against statsmodels' fit."""
    pd = pytest.importorskip("pandas")
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(3)
    scored = [{**r, "metrics": {"test_bleu": 30.0 + float(rng.normal(0, 1))}} for r in RECORDS]
    synthetic_sweep(tmp_path, scored)
    findings = flat_report(tmp_path).split("## Findings")[1].split(" ## ")[0]
    assert "No main effect or interaction is detectable at the 5% level after Holm's adjustment over 3 tests." in (
        findings
    )
    top = {"pos": "relative", "norm": "rms"}
    frame = pd.DataFrame(
        [{**{k: 0.5 if r["factors"][k] == v else -0.5 for k, v in top.items()}, "y": r["metrics"]["test_bleu"]}
         for r in scored]
    )  # fmt: skip
    intervals = smf.ols("y ~ pos * norm", frame).fit().conf_int(alpha=0.05 / 3)  # Holm's first step, 3 tests
    beyond = sorted((intervals.loc[name, 1] - intervals.loc[name, 0]) / 2 for name in ("pos", "norm"))
    span = (
        f"± {beyond[0]:.2f}"
        if f"{beyond[0]:.2f}" == f"{beyond[-1]:.2f}"
        else f"± {beyond[0]:.2f} to ± {beyond[-1]:.2f}"
    )
    assert f"would have to lie beyond {span} to be found here (its interval at 1 - 0.05/3)" in findings
    # "one of ± c about 80% of the time": the power of the test at 0.05/3 against an effect of c, by the
    # noncentral t distribution (the sentence's t sum is its approximation)
    fitted = smf.ols("y ~ pos * norm", frame).fit()
    c = float(re.search(r"one of ± ([0-9.]+) about 80% of the time", findings).group(1))
    critical = stats.t.ppf(1 - 0.05 / 6, fitted.df_resid)
    nc = c / fitted.bse["pos"]
    power = stats.nct.sf(critical, fitted.df_resid, nc) + stats.nct.cdf(-critical, fitted.df_resid, nc)
    assert 0.77 < power < 0.83


def test_the_report_lists_the_runs_library_versions_and_warns_when_they_differ(tmp_path):
    """A run's identity recorded its code, never the libraries that compute and score it: a sweep run partly
    before a torch upgrade looked like one made all alike."""
    import platform

    import torch

    from nmt.training.run_identity import code_version, library_versions

    found = library_versions()
    assert found["python"] == platform.python_version() and found["torch"] == torch.__version__
    assert code_version()["libraries"] == found
    synthetic_sweep(tmp_path)
    for i, run_dir in enumerate(sorted(tmp_path.iterdir())):
        libraries = {"python": "3.11.9", "torch": "2.13.0" if i else "2.12.1"}
        (run_dir / "fingerprint.json").write_text(json.dumps({"code": {"hash": "h", "libraries": libraries}}))
    report = flat_report(tmp_path)
    assert "| libraries | python 3.11.9, torch 2.12.1; python 3.11.9, torch 2.13.0 |" in report
    assert "**Warning:** the runs were made with 2 sets of library versions (python 3.11.9, torch 2.12.1; " in report


def test_runs_of_two_code_hashes_at_one_commit_are_two_code_versions_in_the_report(tmp_path):
    """The report named runs by their commit: runs made at one commit, some with an untracked file or an edit
    that git status did not count, read as one code version where the sweep's own reuse told two apart."""
    synthetic_sweep(tmp_path)
    for i, run_dir in enumerate(sorted(p for p in tmp_path.iterdir() if p.is_dir())):
        code = {"hash": "a" * 16 if i % 2 else "b" * 16, "commit": "c" * 40, "dirty": False}
        (run_dir / "fingerprint.json").write_text(json.dumps({"code": code}))
    report = flat_report(tmp_path)
    both = f"code {'a' * 12} (commit {'c' * 12}), code {'b' * 12} (commit {'c' * 12})"
    assert f"| code | {both} |" in report
    assert f"**Warning:** the runs were made by 2 code versions: {both}." in report
    # one hash at two commits (a commit of documents alone between the runs) is one code version
    for i, run_dir in enumerate(sorted(p for p in tmp_path.iterdir() if p.is_dir())):
        code = {"hash": "a" * 16, "commit": ("c" if i % 2 else "d") * 40, "dirty": False}
        (run_dir / "fingerprint.json").write_text(json.dumps({"code": code}))
    report = flat_report(tmp_path)
    assert f"| code | code {'a' * 12} (commits {'c' * 12}; {'d' * 12}) |" in report
    assert "code versions" not in report


def test_runs_stopped_inside_their_warmup_are_named_in_the_report_as_not_converged(tmp_path):
    """A run whose patience ran out before its learning rate peaked warned in its own log alone; a sweep's
    reader saw its score ranked among converged ones."""
    from nmt.sweep.records import stopped_in_warmup

    early = {"ended_by": "early stopping", "steps": 120}
    noam = {"optim": {"scheduler": {"warmup": 300}}, "early_stopping": {"patience": 2}}
    assert stopped_in_warmup(noam, early)
    assert not stopped_in_warmup(noam, {**early, "steps": 300})  # the warm-up's end reached
    assert not stopped_in_warmup({**noam, "early_stopping": {"after_warmup": True}}, early)
    assert not stopped_in_warmup({"optim": {"scheduler": None}}, early)  # a fixed rate: no warm-up
    assert not stopped_in_warmup(noam, {**early, "ended_by": "max_steps"})
    records = [dict(r) for r in RECORDS]
    records[1] = {**records[1], **early, "stopped_in_warmup": True}
    synthetic_sweep(tmp_path, records)
    report = write_report(tmp_path).read_text()
    assert "1 run(s) were stopped by early stopping inside their learning rate's warm-up, before it peaked" in report
    named = "They are: norm=layer, pos=absolute, seed 2 (update 120)."
    assert "**Warning:** 1 run(s) were stopped by early stopping inside" in report and named in report.replace(
        "\n", " "
    )


def test_runs_whose_monitored_score_never_moved_are_named_in_the_reports_caveats(tmp_path):
    """A run's val_bleu at 0 at every validation chose best.ckpt among equals (train.py warns, results.json
    records monitor_never_moved); a sweep ranked its score among the others' without a word."""
    records = [dict(r) for r in RECORDS]
    flat = {"metric": "val_bleu", "value": 0.0, "validations": 5, "best": "best.ckpt"}
    records[1] = {**records[1], "monitor_never_moved": flat}
    synthetic_sweep(tmp_path, records)
    report = " ".join(write_report(tmp_path).read_text().split())
    assert (
        "1 run(s) monitored a score that took one value at every validation (pos=absolute, norm=layer, seed 2 "
        "(val_bleu 0 at 5 validations)): it told no weights apart"
    ) in report
    plain = tmp_path / "plain"
    plain.mkdir()
    synthetic_sweep(plain)
    assert "took one value at every validation" not in write_report(plain).read_text()


def test_a_score_no_run_recorded_is_no_column_of_results_csv(tmp_path):
    """A task monitoring its own score left best_val_bleu empty in every row of results.csv."""
    records = [{**r, "metrics": {**r["metrics"], "best_val_bleu": None}} for r in RECORDS]
    records[0] = {**records[0], "metrics": {**records[0]["metrics"], "val_as_test_bleu": 20.0}}  # one run's: kept
    synthetic_sweep(tmp_path, records)
    write_report(tmp_path)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert "best_val_bleu" not in header and "test_bleu" in header and "val_as_test_bleu" in header


def test_the_runs_of_a_sweep_that_have_no_wandb_run_are_found(tmp_path):
    """A sweep logged with CSV, run again with logger=wandb: its runs were reused and the W&B group held the
    report run alone, unsaid; the sweep names them now."""
    from nmt.sweep.dashboard import runs_without_wandb
    from nmt.training.loggers import WANDB_ID

    synthetic_sweep(tmp_path)
    names = sorted(p.name for p in tmp_path.glob("pos=*"))
    assert runs_without_wandb(tmp_path) == names
    (tmp_path / names[0] / WANDB_ID).write_text("abc123\n")
    assert runs_without_wandb(tmp_path) == names[1:]
