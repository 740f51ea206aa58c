"""The report's findings in plain language: only those the statistics support (Holm-adjusted, from cells
with enough seeds), with the caveats that limit every difference found."""

import math

from nmt.sweep import analysis, effects
from nmt.sweep.document import Document, cell_name, literal
from nmt.sweep.levels import same_level
from nmt.sweep.ranking import at_bound_cells, past_range_cells
from nmt.sweep.summary import budget_text, capped_runs, plural
from nmt.utils.configs import CONF

ALPHA = 0.05


def caveats(facts: dict, levels: dict | None = None) -> list[str]:
    """What limits every difference found, and a finding of none: a fixed budget (cells may not have
    converged) and levels that all ran with the same settings (a level whose good settings differ, an
    optimiser's rate say, was not tuned)."""
    said = []
    budget = facts.get("budget") or {}
    limited = any(budget.get(k) not in (None, -1) for k in ("max_steps", "max_epochs"))
    if limited and not budget.get("patience"):
        said.append(
            f"What this sweep finds of the levels, a difference or none, holds at its fixed budget "
            f"({budget_text(budget).split(';')[0]}, no early stopping): it says how each level does after that "
            "much training, not where it ends when trained to convergence."
        )
    if capped_runs(facts):
        said.append(
            f"{capped_runs(facts)} run(s) ended at their maximum, not by early stopping: not all cells were trained to "
            "convergence, so a difference found, or none, may be of how fast each learns."
        )
    if facts.get("in_warmup"):
        said.append(
            f"{len(facts['in_warmup'])} run(s) were stopped by early stopping inside their learning rate's warm-up, "
            "before it peaked: they did not converge, and their cells' scores say more of the stopping rule than "
            "of the levels (early_stopping.after_warmup=true counts the patience from the warm-up's end)."
        )
    if flat := facts.get("never_moved"):
        runs = "; ".join(
            f"{cell_name(r['factors'].items()) or 'the run'}, seed {r['seed']} "
            f"({r['metric']} {r['value']:g} at {r['validations']} validations)"
            for r in flat[:3]
        ) + (f"; and {len(flat) - 3} more" if len(flat) > 3 else "")
        said.append(
            f"{len(flat)} run(s) monitored a score that took one value at every validation ({runs}): it told no "
            "weights apart, so their best.ckpt, whose scores these are, was chosen among equals, not as the best "
            "the run reached (monitor a score that moves, e.g. checkpoint.monitor=val_loss)."
        )
    tuned = facts.get("tuned") or {}
    if tuned.get("differs"):
        said.append(
            "The levels' settings were tuned under other settings than this sweep's ("
            + "; ".join(
                f"{literal(lv)}: {literal(', '.join(d.split(':')[0] for d in lines))}"
                for lv, lines in tuned["differs"].items()
            )
            + ", as What ran says): a level may have done better with settings chosen under these."
        )
    settings = facts.get("level_settings") or {}
    untuned = [
        f"{key}={literal(lv)}"
        for key, by in settings.items()
        for lv in (levels or {}).get(key, [])
        if not any(same_level(tuned_level, lv, key) and given for tuned_level, given in by.items())  # 0.0 is 0
    ]
    if settings and untuned:
        said.append(
            f"{', '.join(untuned)} ran without settings of {'its' if len(untuned) == 1 else 'their'} own, beside "
            "levels that had theirs (level_settings): "
            "those were compared untuned. Where that matters, tune them on validation too (`python sweep.py "
            "tune`, docs/sweeps.md)."
        )
    # levels of a config group (optim=adam, noam) may each want settings of their own; a plain setting's
    # levels (lr=1e-3,2e-3, as a tuning sweep has) are those settings
    groups = [key for key in levels or {} if (CONF / key).is_dir()]
    if not settings and groups:
        said.append(
            f"Every level of {', '.join(groups)} ran with the same settings (no level_settings): a level whose good "
            "settings differ from the others' (an optimiser's learning rate and warm-up, say) was compared "
            "untuned. Where that matters, tune such levels on validation first (`python sweep.py tune`, "
            "docs/sweeps.md)."
        )
    return said


def findings(
    doc: Document,
    ranking: dict,
    fit: dict | None,
    levels: dict,
    metric: str,
    lower: bool,
    conclusive: bool,
    facts: dict | None = None,
) -> None:
    doc.heading("Findings")
    rows = ranking.get("rows") or []
    past = past_range_cells(rows, list(levels), metric)
    # a found difference and a null alike rest on the seeds' scatter; so does reading the numbers at all
    # with few seeds the t quantile alone takes an ordinary scatter past the scale (3 seeds: 4.30 standard
    # errors); a bounded score is not normally scattered near its end either: both said, no cause asserted
    fewest = min((int(row["n"]) for row in rows if analysis.past_range(row["mean"], row["ci95"], metric)), default=0)
    scatter = (
        f"**Caveat:** some cells' 95% intervals reach past the values {metric} can take ({past}): with "
        f"{fewest} seeds a t interval reaches {analysis.t_critical(fewest - 1):.1f} standard errors each way, so an "
        "ordinary scatter does that, as does a run far from the others (the Ranking says more); near the end of "
        "its scale a score is not normally scattered, as the tests assume. More seeds narrow it."
        if fewest >= 2
        else f"**Caveat:** some cells' 95% intervals reach past the values {metric} can take ({past}) (the Ranking "
        "says more)."
    )
    # said whatever the seeds: more seeds of runs that score alike would not tell the levels apart
    means = {round(float(row["mean"]), 9) for row in rows}
    if len(means) == 1 and all(_no_scatter(row) for row in rows):
        doc.paragraph(
            f"None drawn: every run scored {means.pop():g} on {metric}, so the runs do not differ at all (trained "
            "too little to score, or at a ceiling). The intervals of ± 0.00 below say that, not that the levels "
            "are equal."
        )
        return
    if not conclusive:
        doc.paragraph(
            "None drawn: some cells have fewer than 3 seeds. The numbers below describe the runs; they do not "
            "establish a difference."
        )
        for caveat in caveats(facts or {}, levels):  # what limits reading the numbers too
            doc.paragraph(f"**Caveat:** {caveat}")
        if past:
            doc.paragraph(scatter)
        return
    if rows and all(row.get("n", 0) > 1 and float(row.get("std")) == 0 for row in rows):
        doc.paragraph(
            f"None drawn: the seeds of every cell scored alike on {metric} (standard deviation 0), so the seeds "
            "varied nothing and no test over them applies (is the seed applied to what varies between runs?). "
            "The differences between cells below are exact for these runs, untested as effects."
        )
        return
    sentences, effects_found = _effect_sentences(fit, levels, metric, lower)
    better, worse, ranked = _ranking_sentences(ranking, levels, lower)
    sentences += ranked
    if fit is not None and fit["model"] is not None and ranking["compared"] and effects_found != bool(better or worse):
        sentences.append(_two_tests(rows, len(levels), fit))
    if not sentences:  # one configuration (seeds only): nothing to compare
        sentences.append("One configuration: nothing to compare. The table below gives its mean over seeds.")
    if effects_found or better or worse or ranking["compared"] or fit is not None:
        sentences += [f"**Caveat:** {c}" for c in caveats(facts or {}, levels)]  # a null result as much
    if fit is not None and fit["model"] is not None and (stuck := at_bound_cells(rows, list(levels), metric)):
        sentences.append(
            f"**Caveat:** some cells scored the end of {metric}'s scale on every seed ({stuck}): a floor or ceiling, "
            "not a graded score. The fit pools its error over all cells and counts these as exact, so an effect "
            "through them can be found where the seed-level test finds none (Welch's test, which takes each "
            "cell's own scatter, is the one to read there), and its size measures the bound, not the factor's "
            "full effect."
        )
    if past:
        sentences.append(scatter)
    for sentence in sentences:
        doc.paragraph(sentence)


def _no_scatter(row: dict) -> bool:
    """Whether a cell's seeds scored alike (one seed: nothing to scatter)."""
    std = row.get("std")
    return std is None or math.isnan(float(std)) or float(std) == 0


def _effect_sentences(fit: dict | None, levels: dict, metric: str, lower: bool) -> tuple[list[str], bool]:
    """A sentence per effect of the fit that Holm's adjustment keeps (a main effect, or an interaction), or
    one saying that none is; and whether any was found."""
    sentences, effects_found = [], False
    if fit is not None and fit["model"] is not None:
        from nmt.sweep.analysis import holm

        names = {key: effects.effect_name(*key, levels) for key in fit["effects"]}
        adjusted = holm({names[k]: e["p"] for k, e in fit["effects"].items()})
        family = sum(not math.isnan(p) for p in adjusted.values())  # the tested effects, as Holm counts them
        for key, e in fit["effects"].items():
            if not adjusted[names[key]] < ALPHA:  # nan: no test
                continue
            (term, column), better = key, (e["diff"] < 0) == lower
            # the interval beside an adjusted p: unadjusted, and the one that holds for the whole family at once
            joint = simultaneous_half_width(e["se"], e["df"], family)
            evidence = (
                f"{abs(e['diff']):.2f}; 95% interval ± {e['ci95']:.2f} unadjusted"
                + (f", ± {joint:.2f} over the {family} effects at once (Bonferroni)" if family > 1 else "")
                + f"; p (Holm) {adjusted[names[key]]:.2g}"
            )
            if len(term) == 1:
                verb = "lowers" if e["diff"] < 0 else "raises"
                sentences.append(
                    f"{term[0]}={literal(column[0])} {verb} {metric} against {term[0]}={literal(levels[term[0]][0])} "
                    f"({evidence}){_over_the_others(fit, len(levels))}: "
                    f"{'better' if better else 'worse'}."
                )
            else:
                a, b = term
                size = "larger" if e["diff"] > 0 else "smaller"
                sentences.append(
                    f"{a} and {b} interact: the effect of {a}={literal(column[0])} is {size} "
                    f"by {evidence} when {b}={literal(column[1])} rather than {literal(levels[b][0])}; read the main "
                    f"effects of {a} and {b} with that in mind."
                )
        effects_found = bool(sentences)
        if not sentences:
            sentences.append(_nothing_found(fit))
    return sentences, effects_found


def _ranking_sentences(ranking: dict, levels: dict, lower: bool) -> tuple[list, list, list[str]]:
    """The cells better and worse than the baseline by the seed-level test after Holm, and the sentences
    that say so (or that none differs, or that the baseline has no run)."""
    sentences = []
    better = [c for c, p in ranking["holm"].items() if p < ALPHA and (ranking["compared"][c]["diff"] < 0) == lower]
    worse = [c for c, p in ranking["holm"].items() if p < ALPHA and c not in better]
    if levels and "seeds" in ranking and ranking["base"] not in ranking["seeds"]:
        sentences.append(
            "No cell is compared with the baseline ("
            + cell_name(zip(levels, ranking["base"], strict=True))
            + "): it has no finished run (the Ranking says what to do)."
        )
    if ranking["compared"]:
        if better or worse:
            for label, cells in (("better", better), ("worse", worse)):
                named = "; ".join(cell_name(zip(levels, c, strict=True)) for c in cells)
                if cells:
                    sentences.append(
                        f"{plural(len(cells), 'cell')} {'is' if len(cells) == 1 else 'are'} {label} than the baseline "
                        f"by the seed-level test after Holm: "
                        f"{named}."
                    )
        else:
            sentences.append(
                "No cell differs detectably from the baseline by the seed-level test after Holm's adjustment."
            )
    return better, worse, sentences


def _span(values: list[float]) -> str:
    low, high = f"{min(values):.2f}", f"{max(values):.2f}"
    return f"± {low}" if low == high else f"± {low} to ± {high}"


def _nothing_found(fit: dict) -> str:
    """The null result, with what it could have found: Holm's first step tests the smallest p against
    0.05 / m (m: the effects with a test, as :func:`analysis.holm` counts them), so with the other effects null
    an estimate must lie beyond its 1 - 0.05 / m interval to be found: a true effect of that size is found
    about half the time, one (t_{1-0.025/m} + t_{0.8}) standard errors away about 80% of the time (a t
    approximation of the power). Smaller effects are not shown absent."""
    from scipy.stats import t

    m = sum(not math.isnan(e["p"]) for e in fit["effects"].values())  # Holm's family
    said = "No main effect or interaction is detectable at the 5% level after Holm's adjustment"
    mains = [e for (term, _), e in fit["effects"].items() if len(term) == 1 and not math.isnan(e["p"]) and e["se"] > 0]
    if not mains:
        return said + "."
    found = [float(t.ppf(1 - ALPHA / (2 * m), e["df"])) * e["se"] for e in mains]
    likely = [float(t.ppf(1 - ALPHA / (2 * m), e["df"]) + t.ppf(0.8, e["df"])) * e["se"] for e in mains]
    return (
        f"{said} over {plural(m, 'test')}. The main effects' 95% intervals are {_span([e['ci95'] for e in mains])}; "
        f"with the other effects null, an estimated main effect would have to lie beyond {_span(found)} to be "
        f"found here (its interval at 1 - 0.05/{m}): a true effect of that size would be found about half the time, "
        f"one of {_span(likely)} about 80% of the time. So this says that an effect of about {_span(likely)} or "
        "more would probably have been seen, not that smaller ones are absent: more seeds narrow it."
    )


def _over_the_others(fit: dict, factors: int) -> str:
    """How a main effect stands to the other factors, in a clause (nothing for a sweep of one factor)."""
    if factors < 2:
        return ""
    if fit.get("averaged", True):
        return ", averaged over the other factors"
    empty = len(fit.get("empty_cells") or ())
    why = f"{plural(empty, 'combination')} of levels without a run" if empty else "unequal runs per cell"
    return f", in a fit that takes the interactions it leaves out to be zero ({why}: see Effects at a glance)"


def simultaneous_half_width(se: float, df: float, family: int) -> float:
    """The half-width of a 95% interval that holds for ``family`` estimates at once (Bonferroni: each at
    1 - 0.05 / family, two-sided), for one of standard error ``se`` on ``df`` degrees of freedom."""
    from scipy.stats import t

    if df < 1 or family < 1:
        return math.nan
    return float(t.ppf(1 - 0.05 / (2 * family), df)) * se


def _scatter_test(rows: list[dict]) -> str:
    """Whether the cells scatter unlike, by the Brown-Forsythe test (Levene's, about each cell's median) of
    their runs' scores, as a clause; what cannot be tested said so."""
    groups = [[float(v) for v in row.get("scores") or []] for row in rows]
    groups = [g for g in groups if len(g) >= 3]  # two runs about their median deviate alike: always "unlike"
    if len(groups) < 2:
        return "whether they do is not tested here (fewer than 3 runs a cell)."
    from scipy.stats import levene

    p = float(levene(*groups, center="median").pvalue)
    if math.isnan(p):
        return "whether they do cannot be tested (every cell's runs scored alike)."
    verdict = "they do detectably" if p < ALPHA else "they do not detectably (which few seeds say weakly)"
    return f"here {verdict}: Brown-Forsythe test of equal scatter, p = {p:.2g}."


def _two_tests(rows: list[dict], factors: int, fit: dict) -> str:
    """Why the fit's effects and the seed-level tests of cells can answer differently, said where they do (a
    one-factor sweep tests the same contrast twice): what each assumes, with the cells' scatter and the
    seeds' shared part that decide which to read."""
    stds = [float(row["std"]) for row in rows if row.get("std") is not None and not math.isnan(float(row["std"]))]
    spread = f" (here the cells' standard deviations run from {min(stds):.2f} to {max(stds):.2f})" if stds else ""
    over = ", and it averages each effect over the other factors" if factors > 1 else ""
    unlike = _scatter_test(rows)
    blocks = fit.get("seed_blocks")
    blocked = ", and takes out what each seed adds to every cell alike (seeds as blocks)" if blocks else ""
    said = (
        "The fit and the seed-level tests answer differently. The fit pools every cell's scatter over seeds into "
        f"one estimate, as if all cells scattered alike{spread}{over}{blocked}; the seed-level test compares a "
        "cell with the baseline by their own seeds alone (Welch), assuming nothing of the other cells and "
        "pairing no seeds, and so has fewer degrees of freedom. Where the cells scatter unlike, the seed-level "
        f"test is the one to read; {unlike} More seeds settle it."
    )
    if blocks and not math.isnan(blocks["p"]) and blocks["p"] < ALPHA:
        said += (
            f" Here the seeds share a part detectably (their F test: p = {blocks['p']:.2g}): where the cells "
            "scatter alike, the fit, which pairs runs by seed, is the one to read."
        )
    return said
