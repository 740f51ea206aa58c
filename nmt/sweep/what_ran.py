"""The report's opening section: what ran (the task, data and model, each factor's levels and their own
settings, the budget and stopping, what was scored and how), with the settings every run shared."""

from nmt.sweep.document import Document, cell_name, literal
from nmt.sweep.levels import same_level
from nmt.sweep.summary import budget_text, capped_runs, cut_runs
from nmt.sweep.tuned import seeds_reused_text


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
        rows.append(["level settings from", f"+tuned={tuned['name']} ({tuned_shown(tuned)})"])
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
        # "max_epochs (12)" read as the budget's value: the count says it is runs
        text = ", ".join(f"{reason}: {count} run{'s' if count != 1 else ''}" for reason, count in ended.items())
        unrecorded = facts.get("finished", 0) - sum(ended.values())
        text += f"; not recorded: {unrecorded} (runs made before it was)" if unrecorded > 0 else ""
        rows.append(["what ended the runs", text])
    rows.append(["seeds", ", ".join(str(s) for s in facts.get("seeds", [])) or "none"])
    rows.append(["runs", _runs_text(facts)])
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
    _warnings(doc, facts, factors)


def _warnings(doc: Document, facts: dict, factors: list[str]) -> None:
    """What a reader must know before trusting the table, below it: several code or library versions, runs
    made under other settings, scores made in several ways, how the level settings were chosen (the tuned
    file's notes) and whether under other settings, runs cut short, and failed runs left out."""
    codes, libraries = facts.get("code") or [], facts.get("libraries") or []
    scorings, tuned, ended = facts.get("scoring") or [], facts.get("tuned"), facts.get("ended_by") or {}
    failed = facts.get("failed") or []
    if len(codes) > 1:
        doc.paragraph(f"**Warning:** the runs were made by {len(codes)} code versions: {', '.join(codes)}.")
    other = facts.get("other_settings") or []
    if other:  # a run folder of another sweep copied in: counted as a seed of the cell it stands in
        shown = "; ".join(
            f"{literal(e['run'])} ({', '.join(e['differences'][:3])}{' ...' if len(e['differences']) > 3 else ''})"
            for e in other[:4]
        )
        doc.paragraph(
            f"**Warning:** {len(other)} run(s) were made under other settings than the other runs of their cell, "
            f"and are counted among its seeds: {shown}{' ...' if len(other) > 4 else ''}. The sweep command names "
            "them as made under other settings (`plan=true`); train them again (`on_changed=move`) or remove them."
        )
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
        _tuning_notes(doc, tuned)
    if tuned and tuned.get("differs"):
        doc.paragraph(
            f"**Warning:** the level settings were chosen under other settings than this sweep's, so they may not "
            f"be the best for these runs: {_differences(tuned['differs'])}. Tune again under this sweep's "
            'settings, or give it those of the tuning (docs/sweeps.md, "A fair factorial").'
        )
    if facts.get("in_warmup"):
        runs = facts["in_warmup"]
        names = [f"{name} (update {r['steps']})" for name, r in zip(_run_names(runs, factors), runs, strict=True)]
        doc.paragraph(
            f"**Warning:** {len(runs)} run(s) were stopped by early stopping inside their learning rate's warm-up "
            "(the patience counted from the start), before the rate peaked: they did not converge. Run the whole "
            "sweep again with early_stopping.after_warmup=true under a sweep_name of its own (a sweep of those "
            "runs alone would differ from the others in that setting, and could not be pooled with these); a "
            "tuning sweep's factorial then takes after_warmup=true too. They are: "
            f"{'; '.join(names[:8])}" + (f"; and {len(names) - 8} more." if len(names) > 8 else ".")
        )
    capped = capped_runs(facts)
    if capped:
        doc.paragraph(
            f"**Warning:** {capped} of the {sum(ended.values())} runs ended at their maximum "
            f"({', '.join(k for k in ('max_steps', 'max_epochs') if ended.get(k))}), not by early stopping: they "
            "may not have converged, so their scores are those of that budget; raise the maximum. "
            + _cut_named(facts, factors, ("max_steps", "max_epochs"))
        )
    if ended.get("max_time"):
        doc.paragraph(
            f"**Warning:** {ended['max_time']} run(s) were ended by `trainer.max_time`, a cap on the time, not by "
            "their recipe's own end (early stopping, max_steps or max_epochs): they are not trained to their end, "
            "and their scores are those of shorter training. " + _cut_named(facts, factors, ("max_time",))
        )
    if failed:
        doc.paragraph(
            "Failed runs are left out of every statistic; the design is unbalanced where they are missing "
            "(the effects below still use every finished run). Their logs: <run folder>/train_stderr.log."
        )


def _runs_text(facts: dict) -> str:
    """The "runs" row: how many were planned, finished, failed, unrecorded, unscored, stopped or not run yet."""
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
    return runs


def _tuning_notes(doc: Document, tuned: dict) -> None:
    """How the level settings were chosen, as the tuned file's notes say: their text, their table of
    candidates, and tune's notes where the choice is weak."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in tuned["notes"] if line.startswith("|")]
    text = " ".join(line for line in tuned["notes"] if not line.startswith(("|", "note: ")))
    doc.paragraph(
        f"How the level settings were chosen, as {tuned_shown(tuned)}'s notes say (`python sweep.py "
        f"tune` writes them; a file edited by hand says so only if its notes do): {text}"
    )
    candidates = [row for row in cells[1:] if not all(set(c) <= set("-: ") for c in row)]  # no rule line
    if cells and candidates:
        doc.table(cells[0], candidates)
    for note in (line for line in tuned["notes"] if line.startswith("note: ")):  # where the choice is weak
        doc.paragraph(f"*tune's note:* {note.removeprefix('note: ')}")


def _tuned_under(tuned: dict) -> str:
    """The "tuned under" row: whether the tuned file's levels were chosen under this sweep's settings."""
    by_hand = "under" not in tuned and tuned.get("by_hand")
    if "under" not in tuned and not by_hand:
        return "not recorded in the file (written by hand, or before sweep.py tune recorded it): not checked"
    unchecked = tuned.get("unchecked") or {}
    if tuned.get("differs"):
        text = f"other settings than this sweep's ({', '.join(tuned['differs'])}; the warning below)"
    elif by_hand and not tuned.get("compared"):
        text = "nothing compared"
    elif by_hand:
        text = (
            f"recorded in part, by hand: {', '.join(sorted(tuned['by_hand']))}, checked equal to this sweep's "
            f"for {', '.join(tuned['compared'])}; the tuning's other settings are not recorded, so not checked"
        )
    elif tuned.get("differs"):
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
    if tuned.get("tuned_at"):  # one cell's choice serving them all
        text += "; chosen at " + "; ".join(f"{level}: {held}" for level, held in tuned["tuned_at"].items())
        text += ", and used in every cell: whether other levels of those factors want other settings was not tuned"
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


def _cut_named(facts: dict, factors, reasons: tuple[str, ...], most: int = 8) -> str:
    """The runs a maximum ended, by cell and seed (runs described before they were listed: results.csv)."""
    runs = [r for r in cut_runs(facts) if r["ended_by"] in reasons]
    if not runs:
        return "results.csv's ended_by names the runs."
    names = _run_names(runs, factors)
    more = f"; and {len(names) - most} more (results.csv's ended_by names each)" if len(names) > most else ""
    return f"They are: {'; '.join(names[:most])}{more}."


def _run_names(runs: list[dict], factors) -> list[str]:
    """Each run by its cell and seed, as the report names them (``pos=rope, seed 2``)."""
    return [
        ", ".join(filter(None, [cell_name((f, r["factors"].get(f)) for f in factors), f"seed {r['seed']}"]))
        for r in runs
    ]


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


def tuned_shown(tuned: dict) -> str:
    """Where a sweep's tuned file was (a sweep planned before its path was kept: conf/tuned/, the one folder
    then read)."""
    return tuned.get("path") or f"conf/tuned/{tuned['name']}.yaml"
