"""Choosing each level's settings on validation data: ``python sweep.py tune``.

A tuning sweep holds the level (``optim=noam``) and sweeps its candidate settings over seeds; several sweeps
of one level (a candidate past the grid's edge, seeds added later) are pooled (nmt/sweep/pooled.py).
``tune`` takes each level's candidate with the best mean validation metric (the test set is never looked
at) and says where that choice is weak: at the edge of the values tried, ahead of the next candidate by
less than its seeds establish, or tuned unlike the other levels. ``--out`` writes the choice as a config
(``conf/tuned/<name>.yaml``, nmt/sweep/tuned.py) that a factorial loads with ``+tuned=<name>``. Each tuning
sweep is read, and refused where it cannot be chosen from, by nmt/sweep/tuning_sweep.py.
"""

import functools
import json
import math
import statistics
from pathlib import Path
from typing import NamedTuple

from nmt.metrics import lower_is_better
from nmt.sweep.analysis import check_same_measure, mean_ci, paired_test, past_range, same_mean, welch_test
from nmt.sweep.levels import level_overrides
from nmt.sweep.pooled import chosen_overrides, pooled_candidates, signs
from nmt.sweep.records import RUN_FACTS, collect_records
from nmt.sweep.summary import planned
from nmt.sweep.tuned import ABSENT, replaced_settings, tuning_run, write_tuned_file
from nmt.sweep.tuning_sweep import (
    SAME_CASE_ON_VALIDATION,
    TUNING_METRIC,
    candidate_of,
    only_own_swept,
    own_held,
    own_setting,
    tuning_runs,
)
from nmt.utils.configs import CONF
from nmt.utils.io import check_output_file


class Tuned(NamedTuple):
    settings: dict  # {level_key: {level: [key=value, ...]}}
    lines: list[str]  # the table of candidates, then notes
    under: dict  # {level_key: {level: its winning tuning run (tuned.tuning_run) and the tuning's seeds}}


def tune(sweep_dirs: list[str | Path], level_key: str, metric: str = TUNING_METRIC) -> Tuned:
    """From finished tuning sweeps, each level's best candidate by its mean over seeds, the table of every
    candidate (mean, 95% interval, seeds) with notes where a choice is weak, and what each level was tuned
    under (its winning run's settings). Settings a tuning sweep held fixed that are the level's own
    (``optim.*`` for ``--level optim``, or a key its config file reads, ``warmup`` for noam) go with its
    chosen candidate, as written (``+key=``, ``~key`` kept)."""
    lower = lower_is_better(metric)
    chosen, under, notes = {}, {}, []
    measure = f"{metric}, lower is better" if lower else metric
    lines = [f"| {level_key} | candidate | {measure} (mean ± 95% CI) | seeds |", "|---|---|---|---|"]
    replicated = False
    for level, sweeps in _tuning_sweeps(sweep_dirs, level_key, metric).items():
        choice = _tune_level(level, sweeps, level_key, metric, lower)
        chosen[level], under[level] = choice.overrides, choice.under
        lines += choice.rows
        notes += choice.notes
        replicated = replicated or choice.replicated
    notes += _unlike_tuning(level_key, under)
    if not replicated:  # one seed a candidate: no interval to head a column with
        lines[0] = f"| {level_key} | candidate | {measure} (one seed each: no interval) | seeds |"
    return Tuned({level_key: chosen}, lines + notes, {level_key: under})


def _tuning_sweeps(
    sweep_dirs: list[str | Path], level_key: str, metric: str
) -> dict[str, list[tuple[Path, list[dict]]]]:
    """Each level's tuning sweeps, in the order given, each with its finished runs' records in the order its
    plan listed the candidates."""
    groups: dict[str, list[tuple[Path, list[dict]]]] = {}  # each level's sweeps, in the order given
    for sweep_dir in map(Path, sweep_dirs):
        level, records = tuning_runs(sweep_dir, level_key, metric)
        if any(sweep_dir.resolve() == given.resolve() for given, _ in groups.get(level, [])):
            raise ValueError(f"{sweep_dir}: given twice; give each tuning sweep once")
        only_own_swept(sweep_dir, level_key, level, [(_setting(r, level_key), None) for r in records])
        # in the order the sweep listed them (its plan), which a tie keeps: not its folders' names' (warmup=100
        # before warmup=50)
        order = {name: i for i, name in enumerate(candidate_of(n) for n in planned(sweep_dir).get("run_names") or [])}
        records = sorted(records, key=lambda r: order.get(candidate_of(Path(r.get("run_dir", "")).name), len(order)))
        groups.setdefault(level, []).append((sweep_dir, records))
    return groups


class _LevelChoice(NamedTuple):
    """One level's choice from its tuning sweeps."""

    overrides: list[str]  # the chosen candidate's, and the settings that go with it
    under: dict  # what it was tuned under: its winning run's settings, and the seeds
    rows: list[str]  # its rows of the candidates' table
    notes: list[str]  # where the choice is weak, or takes settings with it
    replicated: bool  # some candidate ran more than one seed


def _tune_level(level: str, sweeps: list, level_key: str, metric: str, lower: bool) -> _LevelChoice:
    """One level's choice: its candidates scored by their mean over seeds, the best chosen (a tie: the first
    listed)."""
    notes, lines = [], []
    if len(sweeps) == 1:  # one sweep: a candidate is its swept values
        sweep_dir, records = sweeps[0]
        listed = [(sweep_dir, _setting(record, level_key), record) for record in records]
    else:
        listed, pooled_notes = pooled_candidates(
            sweeps, level_key, level, functools.partial(own_setting, level_key, level)
        )
        notes += pooled_notes
        # scored alike across the sweeps too: cased or not, one tokenisation
        check_same_measure([record for _, _, record in listed], metric, SAME_CASE_ON_VALIDATION)
    candidates: dict[tuple, list[float]] = {}
    by_seed: dict[tuple, dict[int, float]] = {}  # a seed is one run of a candidate (pooled: checked so)
    for _, setting, record in listed:
        candidates.setdefault(setting, []).append(float(record["metrics"][metric]))
        by_seed.setdefault(setting, {})[int(record["seed"])] = float(record["metrics"][metric])
    # means equal in decimals are equal here, whatever their floats' last bits (same_mean, as the notes' test):
    # the stable sort keeps such ties in the order listed, so "the first listed" is the one chosen
    scored = sorted(candidates.items(), key=lambda item: round(statistics.fmean(item[1]), 9) * (1 if lower else -1))
    past = []
    for setting, values in scored:
        mean, half = mean_ci(values)
        name = " ".join(f"{k}={v}" for k, v in setting) or "(one candidate)"
        interval = f" ± {half:.2f}" if len(values) > 1 else ""
        lines.append(f"| {level} | {name} | {mean:.2f}{interval} | {len(values)} |")
        if side := past_range(mean, half, metric):
            past.append(f"{name} ({side})")
    if past:  # two seeds give t = 12.7: one run far from the other and the interval leaves the scale
        notes.append(
            f"note: the 95% intervals of {level_key}={level}'s {'; '.join(past)} reach past the values {metric} "
            "can take: their seeds are too few or too scattered for a t interval (a run far from the others?); "
            "the choice is by the mean, which such a run moves most"
        )
    # the winning candidate's first seed, and the sweep that ran it
    sweep_dir, _, winner = min((run for run in listed if run[1] == scored[0][0]), key=lambda run: int(run[2]["seed"]))
    own = own_held(sweep_dir, level_key, level)
    # what the tuning sweep's level_settings gave the winning candidate (and the level) goes with it
    paired = level_overrides(planned(sweep_dir).get("level_settings"), {**dict(scored[0][0]), level_key: level})
    # a setting given that is not the level's own (a budget) goes with it too, as it was tuned under it, and is
    # said: the factorial then runs this level alone under it, a difference its effect takes in
    lent = [o for o in paired if o not in own and not own_setting(level_key, level, _key(o))]
    own += [o for o in paired if o not in own and o not in lent]
    given = {k for k, _ in scored[0][0]}
    if len(sweeps) == 1:  # a swept key added with + is added by the factorial too
        sign = signs(sweep_dir)
        candidate = [f"{sign.get(k, '')}{k}={v}" for k, v in scored[0][0]]
    else:  # the candidate's keys as its sweep wrote them, or as its run recorded them; the rest as before
        candidate = chosen_overrides(sweep_dir, scored[0][0], winner, own, level_key)
    # a key both the candidate's and held at one value (pooled sweeps; a record naming a one-valued key as
    # swept) is the candidate's, named once
    own = [o for o in own if o.lstrip("+~").partition("=")[0] not in given]
    chosen = candidate + own + lent
    under = {
        **tuning_run(sweep_dir / Path(winner.get("run_dir", "")).name),
        "seeds": sorted({str(run[2]["seed"]) for run in listed}, key=lambda s: (len(s), s)),
    }
    if not under["config"]:
        notes.append(
            f"note: {level_key}={level}'s winning tuning run ({under['run']}) recorded no settings "
            "(fingerprint.json, config.yaml): a sweep that loads this file cannot check its own against them"
        )
    notes += _weak_choice(level_key, level, scored, by_seed)
    notes += _cut_by_the_maximum(level_key, level, listed, scored[0][0], under["config"])
    notes += _stopped_in_warmup(level_key, level, listed, scored[0][0])
    counts = {len(values) for _, values in scored}
    if len(counts) > 1:  # a failed run leaves its candidate fewer seeds: a mean of less evidence can win
        notes.append(
            f"note: the candidates of {level_key}={level} ran {min(counts)} to {max(counts)} seeds ("
            + ("failed or unfinished runs" if len(sweeps) == 1 else "as the pooled sweeps ran them, or failed runs")
            + f"); the chosen one ran {len(scored[0][1])}: "
            + (
                "rerun the tuning sweep to finish them"
                if len(sweeps) == 1
                else "run the seeds the others lack (a sweep of their own, pooled here too)"
            )
        )
    if own:
        notes.append(
            f"note: {level_key}={level}'s tuning sweep held {' '.join(own)} (its own settings, or those its "
            "level_settings gave the chosen candidate): they go with its choice"
        )
    if lent:
        notes.append(
            f"note: {level_key}={level}'s tuning sweep's level_settings gave it {' '.join(lent)}, not "
            f"{'a setting' if len(lent) == 1 else 'settings'} of {level_key}={level}'s own: "
            f"{'it goes' if len(lent) == 1 else 'they go'} with its choice, so a factorial that loads this file "
            f"runs {level_key}={level} alone under {'it' if len(lent) == 1 else 'them'}, and the difference is "
            f"counted in {level_key}'s effect; give {'it' if len(lent) == 1 else 'them'} to every level alike "
            "(the command line) where that is not meant"
        )
    return _LevelChoice(chosen, under, lines, notes, any(len(values) > 1 for _, values in scored))


def _key(override: str) -> str:
    """``+optim.x=1`` -> ``optim.x``."""
    return override.lstrip("+~").partition("=")[0]


def _setting(record: dict, level_key: str) -> tuple:
    """A tuning run's candidate: its swept values, the level and the seed aside."""
    return tuple(sorted((k, str(v)) for k, v in record["factors"].items() if k != level_key))


def _weak_choice(level_key: str, level: str, scored: list, by_seed: dict) -> list[str]:
    """Notes on a choice its evidence does not settle: a numeric setting at the edge of the values tried (one
    past it may be better), and a lead over the next candidate that its seeds do not establish, as independent
    runs (Welch) or, where the two share seeds, paired by seed (``by_seed``: {setting: {seed: value}})."""
    notes = []
    best = dict(scored[0][0])
    tied = len(scored) > 1 and all(same_mean(statistics.fmean(vs), statistics.fmean(scored[0][1])) for _, vs in scored)
    for key, value in best.items() if not tied else ():  # where every candidate ties, no edge means more
        # a negative value is a sentinel (-1: no limit), not a point on the scale the edge is of
        tried = sorted({float(v) for setting, _ in scored for k, v in setting if k == key and _numeric(v)} - {-1.0})
        tried = [v for v in tried if v >= 0]
        if len(tried) < 2 or not _numeric(value) or float(value) < 0:
            continue
        edge = "largest" if float(value) == tried[-1] else "smallest" if float(value) == tried[0] else None
        if edge == "smallest" and float(value) == 0:  # nothing below none (no dropout, no warm-up)
            continue
        if edge:
            values = ", ".join(f"{v:g}" for v in tried)
            notes.append(
                f"note: {level_key}={level}: the chosen {key}={value} is the {edge} value tried ({values}): one "
                f"{'above' if edge == 'largest' else 'below'} it may be better; try it before the factorial"
            )
    if len(scored) > 1:
        (_, values), (next_setting, next_values) = scored[0], scored[1]
        name = " ".join(f"{k}={v}" for k, v in next_setting)
        if len({v for _, vs in scored for v in vs}) == 1:  # every run scored alike (0 BLEU, say)
            notes.append(
                f"note: {level_key}={level}: every candidate scored {values[0]:.2f}: the metric does not tell them "
                "apart (too short a training?), and the choice is the first listed"
            )
        elif same_mean(statistics.fmean(values), statistics.fmean(next_values)):  # every tied candidate named
            best = statistics.fmean(values)
            tied = [" ".join(f"{k}={v}" for k, v in s) for s, vs in scored[1:] if same_mean(statistics.fmean(vs), best)]
            among = f"{len(tied)} others ({'; '.join(tied)})" if len(tied) > 1 else f"the next ({name})"
            notes.append(
                f"note: {level_key}={level}: the chosen candidate ties with {among} at {best:.2f}: the choice "
                f"{'among' if len(tied) > 1 else 'between'} them is arbitrary (the first listed)"
            )
        elif lead := _lead_note(by_seed[scored[0][0]], by_seed[next_setting]):
            notes.append(f"note: {level_key}={level}: the chosen candidate leads the next ({name}) by {lead}")
    return notes


def _cut_by_the_maximum(level_key: str, level: str, listed: list, chosen: tuple, config: dict) -> list[str]:
    """A note where tuning runs that stop early ended at their maximum instead (a reviewer's trial: the candidate
    whose runs were cut ranked as if converged): the choice then says which learns fastest in that budget. A
    run cut by a time cap (max_time) is said whatever the budget: a fixed budget ends every run at its maximum
    by design, never at a cap on the time."""
    cut = {"max_steps", "max_epochs", "max_time"} if config.get("early_stopping.patience") else {"max_time"}
    mine = [record.get("ended_by") for _, setting, record in listed if setting == chosen]
    others = [record.get("ended_by") for _, setting, record in listed if setting != chosen]
    if not any(reason in cut for reason in mine + others):
        return []
    reasons = sorted({reason for reason in mine + others if reason in cut})
    said = f"{sum(r in cut for r in mine)} of {len(mine)} runs of the chosen candidate"
    if others:
        said += f" and {sum(r in cut for r in others)} of {len(others)} of the others'"
    patience = config.get("early_stopping.patience")
    how = f"not by early stopping (patience {patience})" if patience else "not at the end of their budget"
    return [
        f"note: {level_key}={level}: {said} ended at a limit ({', '.join(reasons)}), {how}: those had not "
        "converged, so the choice may favour what learns fastest within this budget over what ends best; raise the "
        "maximum and tune again where that matters"
    ]


def _stopped_in_warmup(level_key: str, level: str, listed: list, chosen: tuple) -> list[str]:
    """A note where early stopping ended tuning runs inside their learning rate's warm-up (their record's
    ``stopped_in_warmup``): a trial's Noam candidates of long warm-ups scored 0 and ranked last, unsaid by tune
    (the tuning sweep's report said it), so a factorial quoting tune's notes showed a clean choice."""
    mine = [bool(record.get("stopped_in_warmup")) for _, setting, record in listed if setting == chosen]
    others = {}
    for _, setting, record in listed:
        if setting != chosen:
            others.setdefault(setting, []).append(bool(record.get("stopped_in_warmup")))
    if not any(mine) and not any(any(v) for v in others.values()):
        return []
    said = f"{sum(mine)} of {len(mine)} runs of the chosen candidate"
    if others:
        stopped = [" ".join(f"{k}={v}" for k, v in setting) for setting, runs in others.items() if any(runs)]
        said += f" and {sum(sum(v) for v in others.values())} of {sum(len(v) for v in others.values())} of the others'"
        said += f" ({'; '.join(stopped)})" if stopped else ""
    return [
        f"note: {level_key}={level}: {said} were stopped by early stopping inside their learning rate's warm-up, "
        "before it peaked (the patience counted from the start): those ranked by the stopping rule, not by their "
        "settings; run the tuning sweep again, every candidate, with early_stopping.after_warmup=true under a "
        "sweep_name of its own, and tune from that sweep"
    ]


def _lead_note(chosen: dict, following: dict) -> str:
    """How the chosen candidate's lead over the next stands where its seeds do not establish it (``chosen``,
    ``following``: {seed: score}), else ''. The test is fixed by the design before any score is read: paired by
    seed where the two ran the same seeds (two or more: runs of one seed share their batches' order, so a seed
    is a block, as in the factorial's fit), else Welch's over their seeds as independent runs, with the
    pairing over the seeds they share said beside it (a description: it decides nothing)."""
    welch = welch_test(list(chosen.values()), list(following.values()))
    pair = paired_test(chosen, following)
    gap = abs(welch["diff"])
    lead = f"{gap:.2f}" if gap >= 0.005 or gap == 0 else f"{gap:.2g}"  # a loss's 3e-6 was "0.00"
    if welch["ci95"] == 0:  # every seed of each alike: the seeds varied nothing (paired, no scatter either)
        return f"{lead}, and each one's seeds scored alike: the seeds varied nothing, so they cannot test the lead"
    if set(chosen) == set(following) and len(chosen) >= 2:
        if pair["p"] >= 0.05:
            return (
                f"{lead}, not established by their seeds (paired by seed over the {pair['n']} seeds both ran: p = "
                f"{pair['p']:.2f}; Welch p = {welch['p']:.2f}): the two may be equally good"
            )
        return ""
    if welch["p"] != welch["p"]:  # nan: a side with one seed
        return f"{lead}, with too few seeds to test it (one on a side): the two may be equally good"
    if welch["p"] < 0.05:
        return ""
    beside = ""
    if pair["n"] >= 2 and pair["p"] == pair["p"]:  # some seeds shared, with a scatter
        if pair["diff"] * welch["diff"] > 0:
            beside = f"; paired by seed over the {pair['n']} seeds both ran, p = {pair['p']:.2f}"
        else:  # on the shared seeds the next one leads (or neither): the pairing is no support
            shared = set(chosen) & set(following)
            mine, theirs = (statistics.fmean(side[s] for s in shared) for side in (chosen, following))
            beside = (
                f"; on the {pair['n']} seeds both ran it does not lead, {mine:.2f} against {theirs:.2f}, paired by "
                f"seed p = {pair['p']:.2f}"
            )
    return f"{lead}, not established by their seeds (Welch p = {welch['p']:.2f}{beside}): the two may be equally good"


def _numeric(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _unlike_tuning(level_key: str, under: dict) -> list[str]:
    """A note where the levels' winning tuning runs differ in a setting that is no level's own (a budget, the
    corpus): the levels were not tuned alike."""
    levels = [level for level in under if under[level].get("config")]
    notes = []
    for level in levels[1:]:
        first = levels[0]
        a, b = under[first]["config"], under[level]["config"]
        # a setting a level's level_settings gave it that is not its own (a budget) is said too: the file carries
        # it into the factorial, but the levels were still tuned unlike
        said = [
            f"{key}: {a.get(key, ABSENT)} for {first}, {b.get(key, ABSENT)} for {level}"
            for key in sorted(set(a) | set(b))
            if a.get(key, ABSENT) != b.get(key, ABSENT)
            and not any(own_setting(level_key, lv, key) for lv in (first, level))
        ]
        if said:
            notes.append(
                f"note: the tuning runs of {level_key}={first} and {level_key}={level} differ in settings that are "
                f"neither level's own ({'; '.join(said)}): their levels were not tuned alike"
            )
    return notes


def default_metric(sweep_dirs) -> str:
    """The validation counterpart of the score the tuning runs' task ranks by (test_cer -> best_val_cer, test_ppl
    -> best_val_ppl), the best along each run as the checkpoint callback kept it; TUNING_METRIC where the runs
    name none or several (a refusal of their own then says which they record)."""
    ranked = {r.get("report_metric") for d in sweep_dirs if Path(d).is_dir() for r in collect_records(Path(d))}
    ranked.discard(None)
    if len(ranked) == 1 and (metric := ranked.pop()).startswith("test_"):
        return "best_val_" + metric.removeprefix("test_")
    return TUNING_METRIC


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python sweep.py tune", description="choose each level's settings")
    parser.add_argument("sweep_dirs", nargs="+", help="finished tuning sweeps (several of one level are pooled)")
    parser.add_argument("--level", required=True, help="the factor whose levels get settings (e.g. optim)")
    parser.add_argument(
        "--metric",
        help=f"a validation metric the runs recorded (default: best_val_<the score their task ranks by>, as "
        f"{TUNING_METRIC} for translation, best_val_cer for transliteration)",
    )
    parser.add_argument("--out", help="write the level_settings block here (e.g. conf/tuned/factorial.yaml)")
    parser.add_argument("--replace", action="store_true", help="--out may write over a file that holds another choice")
    args = parser.parse_args(argv)
    if args.metric is None:
        args.metric = default_metric(args.sweep_dirs)
    if args.metric.startswith("test"):
        score = args.metric.removeprefix("test").lstrip("_") or "bleu"
        parser.error(
            f"--metric {args.metric}: settings are chosen on validation data, never on the test set: leave --metric "
            "out (the best validation score along each run of the score its task ranks by, best_val_bleu for "
            f"translation), or give a validation score the runs record (val_as_test_{score}: the final model's, "
            "scored as the test set is)"
        )
    if args.metric in (*RUN_FACTS, "seed"):  # results.csv's other columns
        parser.error(f"--metric {args.metric}: a fact of each run, not a validation score (e.g. {TUNING_METRIC})")
    if args.out is not None:  # before the tuning is read and printed: a folder lost the block in a traceback
        if not args.out.strip():
            parser.error("--out '': name the file to write, e.g. conf/tuned/<name>.yaml")
        if Path(args.out).is_dir():
            parser.error(f"--out {args.out}: a folder; name the file to write, e.g. conf/tuned/<name>.yaml")
        if not args.out.endswith(".yaml"):  # +tuned=<name> loads <name>.yaml: another name is loaded by none
            stem = args.out.removesuffix(".yml")
            parser.error(f"--out {args.out}: name a .yaml file ({stem}.yaml): +tuned=<name> loads "
                         "conf/tuned/<name>.yaml")  # fmt: skip
        try:
            check_output_file("--out", args.out)  # below a file
        except ValueError as err:
            parser.error(str(err))
    try:
        tuned = tune(args.sweep_dirs, args.level, args.metric)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print("\n".join(tuned.lines))
    print(json.dumps(tuned.settings, indent=2))
    if args.out:
        folder = Path(args.out).resolve().parent
        if folder != CONF / "tuned":  # +tuned=<name> reads tuned/<name>.yaml of each config folder Hydra searches
            print(
                f"note: {args.out} is not in conf/tuned/: +tuned={Path(args.out).stem} loads it with "
                f"'hydra.searchpath=[file://{folder.parent}]'"
                if folder.name == "tuned"
                else f"note: {args.out} is in no folder named tuned/, so +tuned=<name> cannot load it (it reads "
                "tuned/<name>.yaml in conf/ or in a folder of hydra.searchpath)"
            )
        # a factorial that loaded the old file means it by +tuned=<name>: written over, that name means other
        # settings (the factorial then refuses to go on, and its report quoted the old choice)
        replaced = replaced_settings(Path(args.out), tuned.settings)
        if replaced and not args.replace:
            parser.error(f"--out {args.out}: {replaced}; give the new choice a new name, or --replace to write over it")
        dirs = " ".join(str(d) for d in args.sweep_dirs)
        command = f"python sweep.py tune {dirs} --level {args.level} --metric {args.metric}"
        write_tuned_file(args.out, tuned.settings, [f"chosen by: {command}", *tuned.lines], tuned.under)
        print(f"written to {args.out}" + (f" (--replace: {replaced})" if replaced else ""))
