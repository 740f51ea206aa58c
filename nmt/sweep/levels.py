"""A sweep's keys with their levels, and the settings that go with a factor's level.

A fair factorial gives each level its own good settings: Adam at a fixed rate needs its rate, Noam its
warm-up and scale. ``level_settings`` maps a sweep key's level to train.py overrides that every run at that
level gets::

    level_settings:
      optim:
        adam: [optim.optimizer.lr=0.001]
        noam: [warmup=400, optim.scheduler.factor=2.0]

``python sweep.py tune`` chooses them on validation data and writes that block (nmt/sweep/tuning.py).
"""

import difflib
import re

from omegaconf import DictConfig, OmegaConf

from nmt.sweep.summary import SWEEP_KEYS
from nmt.utils.configs import CONF


def hydra_quoted(text: str) -> str:
    """``text`` as one quoted value of Hydra's override grammar, read back as written: a run folder named by
    a quoted level (``data.train='my corpus/a'``) holds quotes and spaces. In a quoted value the backslash
    escapes only a quote (and the backslashes before one), and ``${`` would be read as an interpolation."""
    # OmegaConf reads "\\${" as an escaped "${": the backslashes before one doubled, then the "${" escaped
    body = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", str(text))
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", body)
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body) + "'"


def plain_level(value: str) -> str:
    """A level as it reads, without the quotes Hydra's grammar needs (``'my corpus/a'`` -> ``my corpus/a``):
    the name of its run folder, so that a level quoted or not names one folder (so ``1`` and ``'1'``, a
    number and a string, would name one folder: no option here tells them apart)."""
    value = str(value)
    if value[:1] not in ("'", '"'):
        return value
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"level={value}").value()
    except Exception:  # noqa: BLE001 - not one quoted value (a list, say): named as written
        return value
    return parsed if isinstance(parsed, str) else value


def override_pairs(overrides) -> list[tuple[str, str]]:
    pairs = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key not in SWEEP_KEYS and not key.startswith("hydra"):
            pairs.append((key, value))
    return pairs


def is_search(config: DictConfig) -> bool:
    """Whether the sweep's sweeper samples trials (``hydra/sweeper=search``, nmt/sweep/search.py) rather than
    walking a grid."""
    return OmegaConf.select(config, "hydra.sweeper.n_trials", default=None) is not None


def sweep_levels(config: DictConfig) -> dict[str, list[str]]:
    """Each key of the sweep with its values, as Hydra's sweeper expands and writes them into the jobs'
    overrides (``a,b``, ``range(1,4)``, ``choice(x,y)``; ``1e-3`` becomes ``0.001``): the grid's
    parameters, then the command line's (a key given there replaces the grid's). In a search, an interval's
    levels are its two ends: the values its runs are checked at before any starts."""
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    given = [o for o in config.hydra.overrides.task if o.lstrip("+~").partition("=")[0] in dict(override_pairs([o]))]
    ends = is_search(config)
    return {**expand(params, ends), **expand(given, ends)}


def expand(overrides: list[str], interval_ends: bool = False) -> dict[str, list[str]]:
    """Each override's key with its values as Hydra's parser writes them (``true`` -> ``True``, ``5e-1`` ->
    ``0.5``, ``a,b`` -> two values); an interval's two ends where ``interval_ends`` (a search's), else
    refused (a grid has no values for it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    levels = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if type(override.value()).__name__ == "Glob":  # glob(): a group's options, matched by a loader
            raise ValueError(
                f"{override.input_line}: glob() is not supported in a sweep; list the levels ({key}=a,b,...)"
            )
        if override.is_interval_sweep():
            if interval_ends and (CONF / key).is_dir():
                raise ValueError(
                    f"{override.input_line}: {key} is a config group, whose options are names; search them with "
                    f"{key}=choice(a,b)"
                )
            if interval_ends:
                interval = override.value()
                levels[key] = [str(interval.start), str(interval.end)]
                continue
            raise ValueError(
                f"{override.input_line}: an interval is not a grid; give levels (a,b or range(...)), or search it "
                "with hydra/sweeper=search (conf/hydra/sweeper/search.yaml)"
            )
        if override.is_delete():
            levels[key] = [""]  # ~key: deleted in every run
        elif override.is_sweep_override():
            levels[key] = [str(v) for v in override.sweep_string_iterator()]
        else:
            levels[key] = [override.get_value_element_as_str() or ""]
    return levels


def plain_settings(level_settings) -> dict:
    """level_settings as plain dicts and lists (empty when unset); a level's one setting given without a
    list (``{noam: warmup=400}``) as a list of one, so that no reader walks its letters."""
    if OmegaConf.is_config(level_settings):
        level_settings = OmegaConf.to_container(level_settings, resolve=True)
    if not isinstance(level_settings, dict):
        return level_settings or {}
    return {  # a level as a string, as the sweep's levels are: Hydra reads {warmup: {400: [...]}} with an int
        key: {str(level): [s] if isinstance(s, str) else s for level, s in by_level.items()}
        if isinstance(by_level, dict)
        else by_level
        for key, by_level in level_settings.items()
    }


# Lightning's keys whose int counts batches and whose float is a share of the epoch: 1 and 1.0 differ there
BATCHES_OR_SHARE = (
    "trainer.limit_train_batches",
    "trainer.limit_val_batches",
    "trainer.limit_test_batches",
    "trainer.limit_predict_batches",
    "trainer.val_check_interval",
)


def same_level(a, b, key: str | None = None) -> bool:
    """Whether two spellings name one level of ``key``: as written, or as numbers (Hydra reads level_settings'
    2 as written in a sweep's ``factor=0.5,2`` but its own ``{2.0: [...]}`` as 2.0), except where an int and
    a float mean different things (:data:`BATCHES_OR_SHARE`)."""
    if str(a) == str(b):
        return True
    try:
        equal = float(a) == float(b)
    except (TypeError, ValueError):
        return False
    if equal and key in BATCHES_OR_SHARE:
        return _is_int(a) == _is_int(b)
    return equal


def _is_int(value) -> bool:
    try:
        int(str(value))
    except ValueError:
        return False
    return True


def runs_level(levels: dict[str, list[str]], key: str, level) -> bool:
    """Whether a sweep of ``levels`` ({key: [level, ...]}) runs ``level`` of ``key``, by value (a tuned file's
    0.0 is a sweep's 0), as :func:`level_overrides` gives a run its level's settings."""
    return any(same_level(here, level, key) for here in levels.get(key, []))


def level_overrides(level_settings, values: dict[str, str]) -> list[str]:
    """The overrides that the levels in ``values`` (a run's {key: value}) bring, in a stable order."""
    settings = plain_settings(level_settings)
    overrides = []
    for key, by_level in sorted((settings or {}).items()):
        if key in values:
            for level, given in (by_level or {}).items():
                if same_level(level, values[key], key):
                    overrides += [str(o) for o in given]
                    break
    return overrides


def level_settings_problem(level_settings, levels: dict[str, list[str]], from_file: bool = False) -> str | None:
    """One line for level settings that cannot work: a key the sweep does not set, a setting that is not
    key=value, one that the command line or the sweep's factors also set (which would win is unclear), or,
    unless they come from a tuned file (``from_file``), settings of a key none of whose levels this sweep runs."""
    settings = plain_settings(level_settings)
    if not isinstance(settings, dict):
        return (
            f"level_settings={settings!r}: expected {{key: {{level: [key=value, ...]}}}}, as "
            "\"level_settings={optim: {adam: ['optim.optimizer.lr=0.001']}}\" (each key=value quoted)"
        )
    for key, by_level in settings.items():
        if key not in levels:
            return (
                f"level_settings.{key}: {key} is not a key of this sweep (its keys: {sorted(levels)}); make it one "
                f"({key}=a,b, a factor, or {key}=a to hold one level), or give no settings for it"
            )
        if not isinstance(by_level, dict):
            return f"level_settings.{key}: expected level: [key=value, ...], got {by_level!r}"
        for level, overrides in by_level.items():
            # a group's level is one of its options: a misspelt one (noma) would give its runs nothing; a key's
            # other values may be levels of another sweep (a tuned file's), and a value cannot be misspelt
            group = CONF / key
            options = sorted(p.stem for p in group.glob("*.yaml")) if group.is_dir() else []
            if options and str(level) not in options:
                close = difflib.get_close_matches(str(level), options, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                return (
                    f"level_settings.{key}.{level}: {level} is not an option of group {key} ({hint}options: {options})"
                )
            for override in overrides if isinstance(overrides, list) else [overrides]:
                name, sep, _ = str(override).lstrip("+~").partition("=")
                where = f"level_settings.{key}.{level}: {override!r}"
                if not sep and not str(override).startswith("~"):  # ~key deletes it
                    return f"{where} is not key=value"
                given, setting = levels.get(name), expand([str(override)]).get(name)
                if sep and key != name and given and setting and len(given) == len(setting) == 1:
                    if same_level(given[0], setting[0], name):  # 0 and 0.0 alike: one value however written
                        continue  # the command line gives it the same value (as its tuning sweep had it): no doubt
                if name in levels:
                    if len(levels[name]) > 1:
                        factor = ", ".join(levels[name])
                        return f"{where}: {name} is also a factor of this sweep ({factor}); set it in one place"
                    here = f"{name}={levels[name][0]}" if levels[name][0] else f"~{name}"
                    return (
                        f"{where}: {name} is also set by the command line or grid ({here}); set it in one place (the "
                        "same value in both is taken)"
                    )
        run_by = [level for level in by_level if any(same_level(level, ran, key) for ran in levels[key])]
        if not from_file and by_level and not run_by:
            # a tuned file may hold more levels than a sweep runs (checked_tuned_file refuses one that applies to
            # no run at all); settings written for this sweep that no run gets are a mistake
            return (
                f"level_settings.{key}: this sweep runs none of its levels ({', '.join(map(str, by_level))}; "
                f"{key} here: {', '.join(levels[key])}), so no run would get its settings"
            )
        unrun = [str(level) for level in by_level if level not in run_by]
        if not from_file and unrun:  # a level no run has (adamw where the sweep runs adam,noam): given to nobody
            return (
                f"level_settings.{key}.{unrun[0]}: {unrun[0]} is not a level of this sweep ({key} here: "
                f"{', '.join(levels[key])}), so no run would get its settings; write it as the sweep does, or drop it"
            )
    return None
