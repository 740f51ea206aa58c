"""Settings that go with a factor's level, and choosing them on validation data (tuning).

A fair factorial gives each level its own good settings: Adam at a fixed rate needs its rate, Noam its
warm-up and scale. ``level_settings`` maps a sweep key's level to train.py overrides that every run at that
level gets::

    level_settings:
      optim:
        adam: [optim.optimizer.lr=0.001]
        noam: [warmup=400, optim.scheduler.factor=2.0]

``python sweep.py tune DIR [DIR ...] --level optim`` writes that block from finished tuning sweeps (one
sweep per level, holding the level constant and sweeping the candidate settings): for each, the candidate
with the best mean validation metric over its seeds. The test set is never looked at.
"""

import difflib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from nmt.metrics import lower_is_better
from nmt.sweep.analysis import check_same_measure, mean_ci
from nmt.sweep.records import collect_records
from nmt.sweep.summary import SWEEP_KEYS

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


def override_pairs(overrides) -> list[tuple[str, str]]:
    pairs = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key not in SWEEP_KEYS and not key.startswith("hydra"):
            pairs.append((key, value))
    return pairs


def sweep_levels(config: DictConfig) -> dict[str, list[str]]:
    """Each key of the sweep with its values, as Hydra's sweeper expands and writes them into the jobs'
    overrides (``a,b``, ``range(1,4)``, ``choice(x,y)``; ``1e-3`` becomes ``0.001``): the grid's
    parameters, then the command line's (a key given there replaces the grid's)."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given = [o for o in config.hydra.overrides.task if o.lstrip("+~").partition("=")[0] in dict(override_pairs([o]))]
    return {**_expand(params), **_expand(given)}


def _expand(overrides: list[str]) -> dict[str, list[str]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    levels = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_interval_sweep():
            raise ValueError(f"{override.input_line}: an interval is not a grid; give levels (a,b or range(...))")
        if override.is_delete():
            levels[key] = [""]  # ~key: deleted in every run
        elif override.is_sweep_override():
            levels[key] = [str(v) for v in override.sweep_string_iterator()]
        else:
            levels[key] = [override.get_value_element_as_str() or ""]
    return levels


def plain_settings(level_settings) -> dict:
    """level_settings as plain dicts and lists (empty when unset)."""
    if OmegaConf.is_config(level_settings):
        return OmegaConf.to_container(level_settings, resolve=True) or {}
    return level_settings or {}


def level_overrides(level_settings, values: dict[str, str]) -> list[str]:
    """The overrides that the levels in ``values`` (a run's {key: value}) bring, in a stable order."""
    settings = plain_settings(level_settings)
    overrides = []
    for key, by_level in sorted((settings or {}).items()):
        overrides += [str(o) for o in (by_level or {}).get(str(values.get(key)), [])]
    return overrides


def level_settings_problem(level_settings, levels: dict[str, list[str]]) -> str | None:
    """One line for level settings that cannot work: a key the sweep does not set, a setting that is not
    key=value, or one that the command line or the sweep's factors also set (which would win is unclear)."""
    settings = plain_settings(level_settings)
    for key, by_level in (settings or {}).items():
        if key not in levels:
            return f"level_settings.{key}: {key} is not a key of this sweep (its keys: {sorted(levels)})"
        if not isinstance(by_level, dict):
            return f"level_settings.{key}: expected level: [key=value, ...], got {by_level!r}"
        for level, overrides in by_level.items():
            # a group's level is one of its options: a misspelt one (noma) would give its runs nothing; a key's
            # other values may be levels of another sweep (a tuned file's), and a value cannot be misspelt
            group = Path(__file__).resolve().parents[2] / "conf" / key
            options = sorted(p.stem for p in group.glob("*.yaml")) if group.is_dir() else []
            if options and str(level) not in options:
                return f"level_settings.{key}.{level}: {level} is not an option of group {key} (options: {options})"
            for override in overrides if isinstance(overrides, list) else [overrides]:
                name, sep, _ = str(override).lstrip("+~").partition("=")
                where = f"level_settings.{key}.{level}: {override!r}"
                if not sep:
                    return f"{where} is not key=value"
                if name in levels:
                    source = "a factor of this sweep" if len(levels[name]) > 1 else "set by the command line or grid"
                    return f"{where}: {name} is also {source}; set it in one place"
    return None


def tune(sweep_dirs: list[str | Path], level_key: str, metric: str = TUNING_METRIC) -> tuple[dict, list[str]]:
    """From finished tuning sweeps, the best candidate settings of each level: ({level: [key=value, ...]},
    lines of a table of every candidate with its mean and 95% interval over seeds)."""
    lower = lower_is_better(metric)
    chosen, lines = {}, [f"| {level_key} | candidate | {metric} (mean ± 95% CI) | seeds |", "|---|---|---|---|"]
    replicated = False
    for sweep_dir in map(Path, sweep_dirs):
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
        chosen[level] = [f"{k}={v}" for k, v in scored[0][0]]
        counts = {len(values) for _, values in scored}
        if len(counts) > 1:  # a failed run leaves its candidate fewer seeds: a mean of less evidence can win
            lines.append(
                f"note: the candidates of {level_key}={level} ran {min(counts)} to {max(counts)} seeds (failed or "
                f"unfinished runs); the chosen one ran {len(scored[0][1])}: rerun the tuning sweep to finish them"
            )
    if not replicated:  # one seed a candidate: no interval to head a column with
        lines[0] = f"| {level_key} | candidate | {metric} (one seed each: no interval) | seeds |"
    return {level_key: chosen}, lines


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


def write_level_settings(path: str | Path, settings: dict, note: str, table: list[str] = ()) -> None:
    """A config file of the chosen settings: ``python sweep.py +tuned=<name>`` (conf/tuned/<name>.yaml), with
    the command that chose them and its table of candidates as comments, which a sweep's report quotes."""
    from nmt.utils.io import atomic_write_text

    body = OmegaConf.to_yaml(OmegaConf.create({"level_settings": settings}))
    notes = "".join(f"# {line}\n" for line in [note, *table] if line.strip())
    atomic_write_text(Path(path), f"# @package _global_\n{notes}{body}")


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
        settings, table = tune(args.sweep_dirs, args.level, args.metric)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print("\n".join(table))
    print(json.dumps(settings, indent=2))
    if args.out:
        dirs = " ".join(str(d) for d in args.sweep_dirs)
        command = f"python sweep.py tune {dirs} --level {args.level} --metric {args.metric}"
        write_level_settings(args.out, settings, f"chosen by: {command}", table)
        print(f"written to {args.out}")
