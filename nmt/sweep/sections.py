"""The report's opening sections: what ran, and the findings in plain language (only those the
statistics support: Holm-adjusted, from cells with enough seeds)."""

import math

from nmt.sweep import analysis, effects
from nmt.sweep.document import Document, cell_name, literal
from nmt.sweep.levels import same_level
from nmt.sweep.ranking import past_range_cells
from nmt.sweep.summary import budget_text, plural
from nmt.sweep.tuned import CONF, seeds_reused_text

ALPHA = 0.05


def what_ran(
    doc: Document,
    facts: dict,
    factors: list[str],
    levels: dict,
    metric: str,
    lower: bool,
    held: dict | None = None,
    order: dict | None = None,
) -> None:
    """``held``: per factor of the sweep at one level among the finished runs, (that level, the levels planned).
    ``levels``: each factor's, the reference first; ``order``: as they are shown (numbers by value; default
    ``levels``)."""
    order = order or levels
    doc.heading("What ran")
    choices = facts.get("choices") or {}
    rows = []
    if choices:
        rows.append(["task, data, model", ", ".join(choices.get(g, "?") for g in ("task", "data", "model"))])
        if facts.get("languages"):
            rows[-1][1] += f" ({facts['languages']})"
        rows.append(["recipe", choices.get("recipe") or "none"])
    for factor in factors:
        shown = (f"{v} (reference)" if v == levels[factor][0] else str(v) for v in order[factor])
        rows.append([f"factor {factor}", ", ".join(shown)])
    for factor, (level, planned) in (held or {}).items():
        others = [str(v) for v in planned if str(v) != str(level)]
        rows.append([f"factor {factor}", f"{level} alone among the finished runs (also planned: {', '.join(others)}; "
                     "no run of them finished)" if others else f"{level} (its one level)"])  # fmt: skip
    rows.append(["settings for every run", " ".join(facts.get("constants") or []) or "the defaults"])
    for key, by_level in (facts.get("level_settings") or {}).items():
        # a factor's levels as they ran, each with its own settings or none; a level that did not run, none
        for level in order[key] if key in order else list(by_level):
            overrides = next((o for written, o in by_level.items() if same_level(written, level, key)), None)
            text = " ".join(map(str, overrides)) if overrides else "none of its own (the settings for every run)"
            rows.append([f"settings with {key}={level}", text])
    tuned = facts.get("tuned")
    if tuned:  # where those settings came from: the tuned file, as `python sweep.py tune` wrote it
        rows.append(["level settings from", f"+tuned={tuned['name']} (conf/tuned/{tuned['name']}.yaml)"])
        rows.append(["tuned under", _tuned_under(tuned)])
    rows.append(["budget and stopping", budget_text(facts.get("budget"))])
    if facts.get("steps"):
        steps = facts["steps"]
        rows.append(["updates trained", str(steps[0]) if len(steps) == 1 else f"{steps[0]} to {steps[-1]}"])
    if facts.get("parameters"):
        sizes = facts["parameters"]
        rows.append(["parameters", f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,}"])
    ended = facts.get("ended_by") or {}
    if ended:
        text = ", ".join(f"{reason} ({count})" for reason, count in ended.items())
        unrecorded = facts.get("finished", 0) - sum(ended.values())
        text += f"; not recorded ({unrecorded}: runs made before it was)" if unrecorded > 0 else ""
        rows.append(["runs ended by", text])
    rows.append(["seeds", ", ".join(str(s) for s in facts.get("seeds", [])) or "none"])
    planned, finished, failed = facts.get("planned"), facts.get("finished", 0), facts.get("failed") or []
    runs = f"{finished} finished"
    if planned:
        unrecorded, unscored = facts.get("unrecorded") or [], facts.get("unscored") or []
        stopped = facts.get("stopped") or []
        missing = planned - finished - len(failed) - len(unrecorded) - len(unscored) - len(stopped)
        runs = f"{planned} planned, {finished} finished"
        runs += f", {len(failed)} failed ({_names(failed)})" if failed else ""
        if unrecorded:
            runs += (
                f", {len(unrecorded)} finished but not recorded ({_names(unrecorded)}: the sweep command records them)"
            )
        if unscored:
            runs += (
                f", {len(unscored)} trained, final scores not made ({_names(unscored)}: the sweep command makes them)"
            )
        if stopped:
            runs += f", {len(stopped)} stopped before their end ({_names(stopped)}: the sweep command resumes them)"
        if missing > 0:
            runs += f", {missing} not run yet" + (f" ({_names(facts['missing'])})" if facts.get("missing") else "")
    elif failed:
        runs += f", {len(failed)} failed ({_names(failed)})"
    rows.append(["runs", runs])
    codes = facts.get("code") or []
    rows.append(["code", ", ".join(codes) if codes else "not recorded"])
    libraries = facts.get("libraries") or []
    rows.append(["libraries", "; ".join(libraries) if libraries else "not recorded"])
    hours = facts.get("wall_time_h", 0)
    rows.append(["run time", f"{hours:.2f} h in all" if hours >= 1 else f"{hours * 60:.1f} min in all"])
    rows.append(["metric", f"{metric} ({'lower' if lower else 'higher'} is better)"])
    scorings = facts.get("scoring") or []
    if scorings:
        text = "; or ".join(_scoring_text(scoring) for scoring in scorings)
        rows.append(["final scores made with" + (f" ({len(scorings)} ways)" if len(scorings) > 1 else ""), text])
    doc.table(["", ""], rows)
    if len(codes) > 1:
        doc.paragraph(f"**Warning:** the runs were made by {len(codes)} code versions: {', '.join(codes)}.")
    if len(libraries) > 1:
        doc.paragraph(
            f"**Warning:** the runs were made with {len(libraries)} sets of library versions ({'; '.join(libraries)}): "
            "their numerics, and so their scores, may differ by more than the factors."
        )
    # a factor of the search or of the checkpoints scored (decode.*, test_average_last) makes ways that differ
    scored_by_factor = any(f.startswith("decode.") or f == "test_average_last" for f in factors)
    if len(scorings) > 1 and (facts.get("scoring_within_cells") or not scored_by_factor):
        doc.paragraph(
            f"**Warning:** the runs' final scores were made in {len(scorings)} ways (checkpoints, search or "
            "scorer differ, and not by a factor of this sweep alone): their scores do not measure the same thing."
        )
    if tuned and tuned.get("notes"):
        cells = [
            [c.strip() for c in line.strip().strip("|").split("|")] for line in tuned["notes"] if line.startswith("|")
        ]
        text = " ".join(line for line in tuned["notes"] if not line.startswith(("|", "note: ")))
        doc.paragraph(
            f"How the level settings were chosen, as conf/tuned/{tuned['name']}.yaml's notes say (`python sweep.py "
            f"tune` writes them; a file edited by hand says so only if its notes do): {text}"
        )
        candidates = [row for row in cells[1:] if not all(set(c) <= set("-: ") for c in row)]  # no rule line
        if cells and candidates:
            doc.table(cells[0], candidates)
        for note in (line for line in tuned["notes"] if line.startswith("note: ")):  # where the choice is weak
            doc.paragraph(f"*tune's note:* {note.removeprefix('note: ')}")
    if tuned and tuned.get("differs"):
        doc.paragraph(
            f"**Warning:** the level settings were chosen under other settings than this sweep's, so they may not "
            f"be the best for these runs: {_differences(tuned['differs'])}. Tune again under this sweep's "
            'settings, or give it those of the tuning (docs/sweeps.md, "A fair factorial").'
        )
    capped = _capped(facts)
    if capped:
        doc.paragraph(
            f"**Warning:** {capped} of the {sum(ended.values())} runs ended at their maximum "
            f"({', '.join(k for k in ('max_steps', 'max_epochs') if ended.get(k))}), not by early stopping: they "
            "may not have converged, so their scores are those of that budget; raise the maximum (results.csv's "
            "ended_by names the runs)."
        )
    if ended.get("max_time"):
        doc.paragraph(
            f"**Warning:** {ended['max_time']} run(s) were ended by `trainer.max_time`, a cap on the time, not by "
            "their recipe's own end (early stopping, max_steps or max_epochs): they are not trained to their end, "
            "and their scores are those of shorter training."
        )
    if failed:
        doc.paragraph(
            "Failed runs are left out of every statistic; the design is unbalanced where they are missing "
            "(the effects below still use every finished run). Their logs: <run folder>/train_stderr.log."
        )


def _capped(facts: dict) -> int:
    """Runs ended by max_steps or max_epochs in a sweep that stops early: cut by the maximum, not converged."""
    ended, budget = facts.get("ended_by") or {}, facts.get("budget") or {}
    return sum(ended.get(k, 0) for k in ("max_steps", "max_epochs")) if budget.get("patience") else 0


def _tuned_under(tuned: dict) -> str:
    """The "tuned under" row: whether the tuned file's levels were chosen under this sweep's settings."""
    if "under" not in tuned:
        return "not recorded in the file (written by hand, or before sweep.py tune recorded it): not checked"
    unchecked = tuned.get("unchecked") or {}
    if tuned.get("differs"):
        text = f"other settings than this sweep's ({', '.join(tuned['differs'])}; the warning below)"
    elif unchecked and not tuned.get("compared"):
        text = "nothing compared"
    elif unchecked:
        text = f"{', '.join(tuned['compared'])}: no difference from their tuning runs' settings, the seed aside"
    else:
        seeds = {s for by in tuned["under"].values() for c in by.values() for s in c.get("seeds") or []}
        text = (
            "the settings of this sweep's run of each tuned level, at the tuning's values of its other factors: "
            "checked equal to its winning tuning run's, every setting but the seed; tuning seeds "
        )
        text += ", ".join(sorted(seeds, key=lambda s: (len(s), s)))
    if unchecked:
        text += "; not checked: " + "; ".join(f"{level} ({why})" for level, why in unchecked.items())
    for why in tuned.get("text_not_compared") or []:
        text += f"; the corpus text not compared with the tuning's: {why}"
    reused = tuned.get("seeds_reused")
    if reused:  # a cell at the tuning's other settings repeats the run that won on validation with that seed
        several = len({s for seeds in (reused.values() if isinstance(reused, dict) else [reused]) for s in seeds}) > 1
        text += (
            f"; {seeds_reused_text(reused)} also tuned: a run at a tuned setting with "
            f"{'them' if several else 'it'} may repeat the tuning run whose validation score chose that "
            "setting, so its validation score leans high (its test score does not)"
        )
    return text


def _differences(differs: dict) -> str:
    return "; ".join(f"{literal(level)}: {literal(', '.join(said))}" for level, said in differs.items())


def _names(names: list[str], most: int = 6) -> str:
    return ", ".join(names[:most]) + (" ..." if len(names) > most else "")


def _scoring_text(scoring: dict) -> str:
    """One way the final scores were made, as recorded with a run: checkpoints, search, signatures."""
    parts = [scoring[key] for key in ("checkpoints", "search") if scoring.get(key)]
    parts += [
        f"{key.removesuffix('_signature')} {value}"
        for key, value in sorted(scoring.items())
        if key.endswith("_signature")
    ]
    return ", ".join(parts)


def caveats(facts: dict, levels: dict | None = None) -> list[str]:
    """What limits every difference found: a fixed budget (cells may not have converged) and levels that all
    ran with the same settings (a level whose good settings differ, an optimiser's rate say, was not tuned)."""
    said = []
    budget = facts.get("budget") or {}
    limited = any(budget.get(k) not in (None, -1) for k in ("max_steps", "max_epochs"))
    if limited and not budget.get("patience"):
        said.append(
            f"Differences between levels hold at this sweep's fixed budget ({budget_text(budget).split(';')[0]}, "
            "no early stopping): they say how each level does after that much training, not where it ends when "
            "trained to convergence."
        )
    if _capped(facts):
        said.append(
            f"{_capped(facts)} run(s) ended at their maximum, not by early stopping: not all cells were trained to "
            "convergence, so the differences may be of how fast each learns."
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
        f"{key}={literal(lv)}" for key, by in settings.items() for lv in (levels or {}).get(key, []) if not by.get(lv)
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
    two = any(row["n"] == 2 for row in rows if analysis.past_range(row["mean"], row["ci95"], metric))
    scatter = (
        f"**Caveat:** some cells' scores are not scattered as the tests assume (normally over seeds): their 95% "
        f"intervals reach past the values {metric} can take ({past}), as a run far from the others makes them "
        "(the Ranking says more)."
        if not two
        else f"**Caveat:** some cells' 95% intervals reach past the values {metric} can take ({past}): with two "
        f"seeds a t interval reaches {analysis.t_critical(1):.1f} standard errors each way, so a modest scatter "
        "does that, as does a run far from the others (the Ranking says more); more seeds narrow it."
    )
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
    means = {round(float(row["mean"]), 9) for row in rows}
    if len(means) == 1 and all(float(row.get("std") or 0) == 0 for row in rows):
        doc.paragraph(
            f"None drawn: every run scored {means.pop():g} on {metric}, so the runs do not differ at all (trained "
            "too little to score, or at a ceiling). The intervals of ± 0.00 below say that, not that the levels "
            "are equal."
        )
        return
    sentences, effects_found = [], False
    if fit is not None and fit["model"] is not None:
        from nmt.sweep.analysis import holm

        names = {key: effects.effect_name(*key, levels) for key in fit["effects"]}
        adjusted = holm({names[k]: e["p"] for k, e in fit["effects"].items()})
        for key, e in fit["effects"].items():
            if adjusted[names[key]] >= ALPHA:
                continue
            (term, column), better = key, (e["diff"] < 0) == lower
            evidence = f"{abs(e['diff']):.2f} ± {e['ci95']:.2f}, p (Holm) {adjusted[names[key]]:.2g}"
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
            widths = [e["ci95"] for (term, _), e in fit["effects"].items() if len(term) == 1]
            wide = f"± {min(widths):.2f}" if widths and f"{min(widths):.2f}" == f"{max(widths):.2f}" else (
                f"± {min(widths):.2f} to ± {max(widths):.2f}" if widths else "")  # fmt: skip
            sentences.append(
                "No main effect or interaction is detectable at the 5% level after Holm's adjustment"
                + (f" (the main effects' 95% intervals are {wide} wide: smaller effects cannot be told from seed "
                   "noise here)." if widths else ".")
            )  # fmt: skip
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
    if fit is not None and fit["model"] is not None and ranking["compared"] and effects_found != bool(better or worse):
        sentences.append(_two_tests(rows, len(levels), fit))
    if not sentences:  # one configuration (seeds only): nothing to compare
        sentences.append("One configuration: nothing to compare. The table below gives its mean over seeds.")
    if effects_found or better or worse:
        sentences += [f"**Caveat:** {c}" for c in caveats(facts or {}, levels)]
    if past:
        sentences.append(scatter)
    for sentence in sentences:
        doc.paragraph(sentence)


def _over_the_others(fit: dict, factors: int) -> str:
    """How a main effect stands to the other factors, in a clause (nothing for a sweep of one factor)."""
    if factors < 2:
        return ""
    if fit.get("averaged", True):
        return ", averaged over the other factors"
    empty = len(fit.get("empty_cells") or ())
    why = f"{plural(empty, 'combination')} of levels without a run" if empty else "unequal runs per cell"
    return f", in a fit that takes the interactions it leaves out to be zero ({why}: see Effects at a glance)"


def _two_tests(rows: list[dict], factors: int, fit: dict) -> str:
    """Why the fit's effects and the seed-level tests of cells can answer differently, said where they do (a
    one-factor sweep tests the same contrast twice): what each assumes, with the cells' scatter and the
    seeds' shared part that decide which to read."""
    stds = [float(row["std"]) for row in rows if row.get("std") is not None and not math.isnan(float(row["std"]))]
    spread = f"; here the cells' standard deviations run from {min(stds):.2f} to {max(stds):.2f}" if stds else ""
    over = ", and averages each effect over the other factors" if factors > 1 else ""
    blocks = fit.get("seed_blocks")
    blocked = ", and takes out what each seed adds to every cell alike (seeds as blocks)" if blocks else ""
    said = (
        "The fit and the seed-level tests answer differently. The fit pools every cell's scatter over seeds into "
        f"one estimate, as if all cells scattered alike{spread}{over}{blocked}; the seed-level test compares a "
        "cell with the baseline by their own seeds alone (Welch), assuming nothing of the other cells and "
        "pairing no seeds. Where the cells scatter unlike, the seed-level test is the one to read; more seeds "
        "settle it."
    )
    if blocks and not math.isnan(blocks["p"]) and blocks["p"] < ALPHA:
        said += (
            f" Here the seeds share a part detectably (their F test: p = {blocks['p']:.2g}): where the cells "
            "scatter alike, the fit, which pairs runs by seed, is the one to read."
        )
    return said
