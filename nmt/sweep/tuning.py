"""Choosing each level's settings on validation data: ``python sweep.py tune``.

One tuning sweep per level holds the level (``optim=noam``) and sweeps its candidate settings over seeds.
``tune`` takes each level's candidate with the best mean validation metric (the test set is never looked
at) and says where that choice is weak: at the edge of the values tried, or ahead of the next candidate by
less than its seeds establish. ``--out`` writes the choice as a config (``conf/tuned/<name>.yaml``) that a
factorial loads with ``+tuned=<name>``, with the command, the candidates and what the levels were tuned
under (budget, stopping rule, config groups, settings held fixed). A factorial that loads the file is
checked against the latter before it runs, and its report says what differs.
"""

import difflib
import json
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig, OmegaConf

from nmt.metrics import lower_is_better
from nmt.sweep.analysis import check_same_measure, mean_ci, welch_test
from nmt.sweep.levels import plain_settings, sweep_levels
from nmt.sweep.records import collect_records
from nmt.sweep.summary import not_a_setting

CONF = Path(__file__).resolve().parents[2] / "conf"
SAME_CASE_ON_VALIDATION = (
    "rank them by --metric best_val_bleu_tok_lc or val_as_test_bleu_tok_lc (validation, lowercased for every "
    "run), or tune each kind of run in a sweep of its own"
)
# why a finished run may lack a validation metric, by the metric's first word
_WITHOUT = {
    "best": "without decoded validations (validation.bleu_every_n_epochs=0)",
    "final": "without a decoded validation of the final weights (validation.bleu_every_n_epochs=0, or an interval "
    "whose last validation did not decode, with checkpoint.monitor=val_loss)",
    "val": "without the final decode of the validation set (val_after_training=false)",
}
TUNING_METRIC = "best_val_bleu"  # validation, never test: tuned settings are chosen where the test is not seen
# the budget and stopping rule, compared as the composed config has them (an experiment or the command line)
BUDGET = ("trainer.max_steps", "trainer.max_epochs", "early_stopping.patience", "early_stopping.monitor")
UNDER = "tuned under: "  # the tuned file's comment line that records each level's tuning context, as JSON


class Tuned(NamedTuple):
    settings: dict  # {level_key: {level: [key=value, ...]}}
    lines: list[str]  # the table of candidates, then notes
    under: dict  # {level_key: {level: sweep_context of its tuning sweep}}


def tune(sweep_dirs: list[str | Path], level_key: str, metric: str = TUNING_METRIC) -> Tuned:
    """From finished tuning sweeps, each level's best candidate by its mean over seeds, the table of every
    candidate (mean, 95% interval, seeds) with notes where a choice is weak, and what each level was tuned
    under. Settings a tuning sweep held fixed that are the level's own (``optim.*`` for ``--level optim``, or
    a key its config reads, ``warmup`` for noam) go with its chosen candidate."""
    lower = lower_is_better(metric)
    chosen, under, notes = {}, {}, []
    lines = [f"| {level_key} | candidate | {metric} (mean ± 95% CI) | seeds |", "|---|---|---|---|"]
    replicated = False
    for sweep_dir in map(Path, sweep_dirs):
        level, records = _candidates(sweep_dir, level_key, metric)
        if level in chosen:
            raise ValueError(f"{sweep_dir}: a second tuning sweep of {level_key}={level}; give one sweep per level")
        candidates: dict[tuple, list[float]] = {}
        for record in records:
            setting = tuple(sorted((k, str(v)) for k, v in record["factors"].items() if k != level_key))
            candidates.setdefault(setting, []).append(float(record["metrics"][metric]))
        scored = sorted(candidates.items(), key=lambda item: (sum(item[1]) / len(item[1])) * (1 if lower else -1))
        for setting, values in scored:
            mean, half = mean_ci(values)
            name = " ".join(f"{k}={v}" for k, v in setting) or "(one candidate)"
            interval = f" ± {half:.2f}" if len(values) > 1 else ""
            replicated = replicated or len(values) > 1
            lines.append(f"| {level} | {name} | {mean:.2f}{interval} | {len(values)} |")
        context = sweep_context(OmegaConf.load(sweep_dir / "multirun.yaml"))
        own = {k: v for k, v in context["held"].items() if _own_setting(level_key, level, k)}
        context["held"] = {k: v for k, v in context["held"].items() if k not in own}
        chosen[level] = [f"{k}={v}" for k, v in scored[0][0]] + [f"{k}={v}" for k, v in sorted(own.items())]
        under[level] = context
        notes += _weak_choice(level_key, level, scored)
        counts = {len(values) for _, values in scored}
        if len(counts) > 1:  # a failed run leaves its candidate fewer seeds: a mean of less evidence can win
            notes.append(
                f"note: the candidates of {level_key}={level} ran {min(counts)} to {max(counts)} seeds (failed or "
                f"unfinished runs); the chosen one ran {len(scored[0][1])}: rerun the tuning sweep to finish them"
            )
        if own:
            notes.append(
                f"note: {level_key}={level}'s tuning sweep held {' '.join(chosen[level][len(scored[0][0]) :])}, "
                "its own settings: they go with its choice"
            )
    notes += _unlike_tuning(level_key, under, chosen)
    if not replicated:  # one seed a candidate: no interval to head a column with
        lines[0] = f"| {level_key} | candidate | {metric} (one seed each: no interval) | seeds |"
    return Tuned({level_key: chosen}, lines + notes, {level_key: under})


def _candidates(sweep_dir: Path, level_key: str, metric: str) -> tuple[str, list[dict]]:
    """The level a tuning sweep held, and its finished runs, every one with ``metric`` (or a one-line error)."""
    level = _constant_level(sweep_dir, level_key)
    finished = collect_records(sweep_dir)
    records = [r for r in finished if r["metrics"].get(metric) is not None]
    if not finished:
        raise ValueError(f"{sweep_dir}: no finished run; finish the tuning sweep first")
    if not records:  # a misspelt or unrecorded metric: name those the runs record
        recorded = sorted({name for r in finished for name, value in r["metrics"].items() if value is not None})
        close = difflib.get_close_matches(metric, recorded, n=1)
        hint = f" (did you mean --metric {close[0]}?)" if close else ""
        raise ValueError(
            f"{sweep_dir}: no run records {metric}{hint}; its runs record: {', '.join(recorded)} (choose by a "
            "validation metric)"
        )
    if len(records) < len(finished):  # never a choice among some of the candidates without saying so
        missing = sorted(Path(r.get("run_dir", "?")).name for r in finished if r["metrics"].get(metric) is None)
        why = _WITHOUT.get(metric.split("_")[0], _WITHOUT["best"])
        raise ValueError(
            f"{sweep_dir}: {len(missing)} of {len(finished)} finished runs have no {metric} "
            f"({', '.join(missing)}): made by an earlier version or {why}; run them again (on_changed=move) "
            "or choose another --metric"
        )
    # a test measure is no way out here: settings are chosen on validation data
    check_same_measure(records, metric, SAME_CASE_ON_VALIDATION)
    return level, records


def _constant_level(sweep_dir: Path, key: str) -> str:
    """The value a tuning sweep held ``key`` at (one value, on its command line or in its grid)."""
    saved = sweep_dir / "multirun.yaml"
    if not saved.is_file():
        raise ValueError(f"{sweep_dir}: not a sweep folder (no multirun.yaml)")
    levels = sweep_levels(OmegaConf.load(saved))
    values = levels.get(key)
    if not values:
        held = [f"{k}={v[0]}" for k, v in levels.items() if len(v) == 1 and k != "seed"]
        raise ValueError(
            f"{sweep_dir}: --level {key}: this tuning sweep does not set {key} on its command line or grid; "
            f"--level names the factor it holds at the level being tuned, one of {held or 'none given'}"
        )
    if len(values) != 1:
        raise ValueError(f"{sweep_dir}: a tuning sweep holds {key} at one level; this one sweeps it over {values}")
    return values[0]


def _own_setting(level_key: str, level: str, key: str) -> bool:
    """Whether ``key`` is a setting of the level itself: under its group (``optim.scheduler.factor``), or a
    top-level key that the level's config file reads (noam's ``${warmup}``)."""
    if key.startswith(level_key + "."):
        return True
    option = CONF / level_key / f"{level}.yaml"
    return option.is_file() and "${" + key + "}" in option.read_text()


def _weak_choice(level_key: str, level: str, scored: list) -> list[str]:
    """Notes on a choice its evidence does not settle: a numeric setting at the edge of the values tried (one
    past it may be better), and a lead over the next candidate that its seeds do not establish."""
    notes = []
    best = dict(scored[0][0])
    for key, value in best.items():
        tried = sorted({float(v) for setting, _ in scored for k, v in setting if k == key and _numeric(v)})
        if len(tried) < 2 or not _numeric(value):
            continue
        edge = "largest" if float(value) == tried[-1] else "smallest" if float(value) == tried[0] else None
        if edge:
            values = ", ".join(f"{v:g}" for v in tried)
            notes.append(
                f"note: {level_key}={level}: the chosen {key}={value} is the {edge} value tried ({values}): one "
                f"{'above' if edge == 'largest' else 'below'} it may be better; try it before the factorial"
            )
    if len(scored) > 1:
        (_, values), (next_setting, next_values) = scored[0], scored[1]
        test = welch_test(values, next_values)
        lead = abs(test["diff"])
        name = " ".join(f"{k}={v}" for k, v in next_setting)
        if lead == 0:
            notes.append(
                f"note: {level_key}={level}: the chosen candidate ties with the next ({name}) at "
                f"{sum(values) / len(values):.2f}: the choice between them is arbitrary (the first listed)"
            )
        elif test["p"] != test["p"]:  # nan: a side with one seed
            notes.append(
                f"note: {level_key}={level}: the chosen candidate leads the next ({name}) by {lead:.2f}, with too "
                "few seeds to test it (one on a side): the two may be equally good"
            )
        elif test["p"] >= 0.05:
            notes.append(
                f"note: {level_key}={level}: the chosen candidate leads the next ({name}) by {lead:.2f}, not "
                f"established by their seeds (Welch p = {test['p']:.2f}): the two may be equally good"
            )
    return notes


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def sweep_context(config: DictConfig) -> dict:
    """What a sweep's runs train under beside what it sweeps: the budget and stopping rule, the config groups
    chosen, the settings held at one value (command line or grid), and its seeds."""
    choices = OmegaConf.select(config, "hydra.runtime.choices", default=None) or {}
    groups = {str(g): str(v) for g, v in choices.items() if not not_a_setting(str(g))}
    budget = {}
    for key in BUDGET:
        try:
            budget[key] = OmegaConf.select(config, key, default=None)
        except Exception:  # noqa: BLE001 - an interpolation that resolves only in a run: not compared
            budget[key] = None
    levels = sweep_levels(config)
    held = {
        k: v[0]
        for k, v in levels.items()
        if len(v) == 1 and k not in groups and k not in BUDGET and k != "seed" and not not_a_setting(k)
    }
    # a budget key the sweep sweeps is not in its composed config (Hydra leaves a sweep's values to its jobs)
    budget.update({k: ",".join(levels[k]) for k in BUDGET if len(levels.get(k) or []) > 1})
    seeds = levels.get("seed") or [str(OmegaConf.select(config, "seed", default=""))]
    return {"budget": budget, "groups": groups, "held": held, "seeds": seeds}


def context_differences(
    before: dict, now: dict, skip: set[str], names: tuple[str, str], config: DictConfig | None = None
) -> list[str]:
    """``key: value in <names[0]>, value in <names[1]>`` for each setting of two sweep contexts that differs,
    leaving out the keys in ``skip`` (factors, the level's own settings, seeds). A key one side does not set
    is its default there, shown as ``config`` (the second side's) composes it."""
    said = []
    for part in ("budget", "groups", "held"):
        a, b = before.get(part) or {}, now.get(part) or {}
        for key in sorted(set(a) | set(b)):
            if key in skip or str(a.get(key)) == str(b.get(key)):
                continue
            shown = [f"{x[key]}" if key in x else "the default" for x in (a, b)]
            if key not in b and config is not None:
                default = OmegaConf.select(config, key, default=None, throw_on_resolution_failure=False)
                shown[1] += f" ({default})" if default is not None and not OmegaConf.is_config(default) else ""
            said.append(f"{key}: {shown[0]} {names[0]}, {shown[1]} {names[1]}")
    return said


def _unlike_tuning(level_key: str, under: dict, chosen: dict) -> list[str]:
    """A note where the levels' tuning sweeps ran under different settings: they were not tuned alike."""
    levels = list(under)
    notes = []
    for level in levels[1:]:
        skip = {level_key, *(o.partition("=")[0] for s in chosen.values() for o in s)}
        first = levels[0]
        said = context_differences(under[first], under[level], skip, (f"for {first}", f"for {level}"))
        if said:
            notes.append(
                f"note: the tuning sweeps of {level_key}={first} and {level_key}={level} ran under different "
                f"settings ({'; '.join(said)}): their levels were not tuned alike"
            )
    return notes


def write_level_settings(path: str | Path, tuned: Tuned, note: str) -> None:
    """A config file of the chosen settings: ``python sweep.py +tuned=<name>`` (conf/tuned/<name>.yaml), with
    the command that chose them, the table of candidates and what each level was tuned under as comments,
    which a sweep that loads it checks and its report quotes."""
    from nmt.utils.io import atomic_write_text

    body = OmegaConf.to_yaml(OmegaConf.create({"level_settings": tuned.settings}))
    notes = "".join(f"# {line}\n" for line in [note, *tuned.lines] if line.strip())
    context = f"# {UNDER}{json.dumps(tuned.under, sort_keys=True)}\n" if tuned.under else ""
    atomic_write_text(Path(path), f"# @package _global_\n{notes}{context}{body}")


def tuned_file(config: DictConfig) -> dict | None:
    """The tuned file a sweep's level settings came from (``+tuned=<name>``): its name, the notes ``python
    sweep.py tune`` wrote above the settings (its command, the candidates' table), which the report quotes,
    and what each level was tuned under (absent from a file written by hand)."""
    name = OmegaConf.select(config, "hydra.runtime.choices.tuned", default=None)
    path = CONF / "tuned" / f"{name}.yaml"
    return read_tuned_file(path) if name and path.is_file() else None


def read_tuned_file(path: Path) -> dict:
    """A tuned file's name, notes and (where ``tune`` wrote it) what each level was tuned under."""
    name = path.stem
    notes = [line[2:].rstrip() for line in path.read_text().splitlines() if line.startswith("# ")]
    tuned = {"name": str(name), "notes": [n for n in notes if not n.startswith(("@package", UNDER))]}
    for line in notes:
        if line.startswith(UNDER):
            try:
                tuned["under"] = json.loads(line.removeprefix(UNDER))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}: its '# {UNDER}' line is not JSON ({err}); write the file again") from None
    return tuned


def tuned_differences(tuned: dict, config: DictConfig, factors: list[str]) -> dict[str, list[str]]:
    """For each tuned level, how this sweep's settings differ from those it was tuned under: its budget,
    stopping rule, config groups and settings held fixed, leaving out the sweep's factors and the keys that
    the level settings set."""
    now = sweep_context(config)
    settings = plain_settings(config.get("level_settings"))
    set_by_levels = {o.lstrip("+~").partition("=")[0] for by in settings.values() for s in by.values() for o in s}
    differs = {}
    for level_key, by_level in (tuned.get("under") or {}).items():
        for level, context in by_level.items():
            skip = {*factors, level_key, "seed", *set_by_levels}
            said = context_differences(context, now, skip, ("in tuning", "here"), config)
            if said:
                differs[f"{level_key}={level}"] = said
    return differs


def reused_seeds(tuned: dict, config: DictConfig) -> list[str]:
    """This sweep's seeds that the tuning sweeps also ran: a run at a tuned setting with one of them may repeat
    the tuning run whose validation score chose that setting."""
    tuning = {str(s) for by in (tuned.get("under") or {}).values() for c in by.values() for s in c.get("seeds") or []}
    return sorted(tuning & set(sweep_context(config)["seeds"]), key=lambda s: (len(s), s))


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python sweep.py tune", description="choose each level's settings")
    parser.add_argument("sweep_dirs", nargs="+", help="finished tuning sweeps, one per level")
    parser.add_argument("--level", required=True, help="the factor whose levels get settings (e.g. optim)")
    parser.add_argument("--metric", default=TUNING_METRIC, help="a validation metric the runs recorded")
    parser.add_argument("--out", help="write the level_settings block here (e.g. conf/tuned/factorial.yaml)")
    args = parser.parse_args(argv)
    if args.metric.startswith("test"):
        parser.error(f"--metric {args.metric}: settings are chosen on validation data, never on the test set")
    try:
        tuned = tune(args.sweep_dirs, args.level, args.metric)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print("\n".join(tuned.lines))
    print(json.dumps(tuned.settings, indent=2))
    if args.out:
        dirs = " ".join(str(d) for d in args.sweep_dirs)
        command = f"python sweep.py tune {dirs} --level {args.level} --metric {args.metric}"
        write_level_settings(args.out, tuned, f"chosen by: {command}")
        print(f"written to {args.out}")
