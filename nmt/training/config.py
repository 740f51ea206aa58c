"""Checks of the composed config, run before any data is read: each problem names the key, the value
and what is allowed; options the chosen task or model does not use are errors too. (Unknown group
options are rejected by Hydra itself; misspelt keys by nmt.cli with a suggestion.)"""

from omegaconf import DictConfig, OmegaConf

from nmt.decoding.settings import search_problems, unreachable_min_len, unread_problems
from nmt.metrics.corpus import bleu_tokenizer
from nmt.tasks import build_task
from nmt.training.config_device import device_problems
from nmt.training.config_groups import (
    MODEL_PART_GROUPS,
    added_key_problems,
    built_node_problems,
    data_key_problems,
    filled_key_problems,
    hydra_choices,
    model_key_problems,
    optim_node_problems,
    target_class,
)
from nmt.training.config_model import (
    loss_build_problems,
    model_build_problems,
    model_class_problems,
    model_value_problems,
)
from nmt.training.config_rules import value_problems
from nmt.training.config_targets import target_problems
from nmt.training.config_task import task_problems
from nmt.training.config_types import setting_type_problems
from nmt.training.config_unread import unused_groups


class ConfigError(ValueError):
    """The config asks for something impossible; the message lists every problem found."""


def checked_task(cfg: DictConfig):
    """The run's task, built first (its own refusals in its own words), then the whole config checked."""
    if built_node_problems(cfg, ("task",)) or target_problems(cfg):  # the task's build would stop on Hydra's words
        check_config(cfg)  # said with every other problem of the config instead
    task = build_task(cfg.task)
    check_config(cfg)
    return task


def unread_data_problems(cfg: DictConfig) -> list[str]:
    """Data options a training run would read nothing by (checked for training only: an evaluation rebuilds
    the data module from a checkpoint's config, where an older run may hold them): data.columns where no
    split is a TSV, data.user_dict without a jieba segmenter."""
    from nmt.data.file_specs import is_tsv

    problems = []
    data = OmegaConf.select(cfg, "data", default=None)
    if not isinstance(data, DictConfig):
        return problems
    columns = data.get("columns")
    specs = [data.get(split) for split in ("train", "val", "test")]
    if "columns" in data and columns is not None and list(columns) != [0, 1] and not any(map(is_tsv, specs)):
        problems.append(
            f"  data.columns={list(columns)}: picks the fields of a TSV, and none of data.train, data.val and "
            "data.test is one (a prefix or a pair of files: their languages say which is the source): leave it out"
        )
    problems += split_size_problems(data)
    segmenters = data.get("segmenter") or {}
    if data.get("user_dict") and not any(str(name).startswith("jieba") for name in segmenters.values()):
        problems.append(
            f"  data.user_dict={data.user_dict}: a jieba dictionary, read by a jieba segmenter only, and neither "
            "language has one: add data.segmenter.<lang>=jieba, or leave it out"
        )
    return problems


def split_size_problems(data: DictConfig) -> list[str]:
    """The sizes and seed of the sets split off data.train, given where a file gives the set (data=files with
    data.val or data.test): nothing is split, so nothing reads them (and a sweep over data.split_seed trained
    cells of one data). A value other than the data module's default is refused; the default cannot be told
    from a value not given."""
    if "val" not in data or "test" not in data or "split_seed" not in data:
        return []
    import inspect

    from hydra.utils import get_class

    try:
        defaults = {key: param.default for key, param in inspect.signature(get_class(data._target_)).parameters.items()}
    except Exception:  # noqa: BLE001 - a target that cannot be read is said by its own check
        return []
    given = {split: data.get(split) is not None for split in ("val", "test")}
    problems = []
    for key, split, name in (("valid_size", "val", "validation"), ("test_size", "test", "test")):
        if given[split] and key in defaults and data.get(key) != defaults[key]:
            problems.append(
                f"  data.{key}={data.get(key)}: the size of a {name} set split off data.train, and data.{split} "
                f"gives the {name} set as files: nothing is split for it; leave data.{key} out"
            )
    if all(given.values()) and "split_seed" in defaults and data.get("split_seed") != defaults["split_seed"]:
        problems.append(
            f"  data.split_seed={data.get('split_seed')}: seeds the split of validation and test pairs off "
            "data.train, and data.val and data.test are both given as files: nothing is split; leave it out"
        )
    return problems


def legacy_option_problems(cfg: DictConfig) -> list[str]:
    """Options a model part still takes from older checkpoints' configs and reads nothing by
    (``pos=absolute +pos.max_len=5``: accepted, and no table was sized by it): refused for training."""
    problems = []
    for part in MODEL_PART_GROUPS:
        node = OmegaConf.select(cfg, part, default=None)
        built = target_class(cfg, part) if isinstance(node, DictConfig) else None
        for key, why in getattr(built, "legacy_options", {}).items():
            if key in node:
                problems.append(f"  {part}.{key}={node[key]}: {why}; leave it out")
    return problems


def check_config(cfg: DictConfig, choices: dict | None = None) -> None:
    """Raise ConfigError listing every invalid value in ``cfg``, and every option that its task
    (``task.check``) or its model (groups it does not use, :func:`unused_groups`) cannot take."""
    targets = target_problems(cfg, choices)
    if targets:  # the checks below build these nodes or read their classes: said first, with the values alone
        raise ConfigError("invalid configuration:\n" + "\n".join(targets + value_problems(cfg)))
    problems = value_problems(cfg)
    for key in ("decode", "validation.search"):  # checked now, not when the final decode meets them
        if key == "validation.search" and not OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1):
            continue  # no search reads it: one on the command line is refused as such (unused_groups)
        block = OmegaConf.select(cfg, key, default=None)
        if isinstance(block, DictConfig):
            values = OmegaConf.to_container(block, resolve=True)
            found = search_problems(values, key)
            found = found or [said for said in [unreachable_min_len(values, key)] if said]
            problems += [f"  {problem}" for problem in found or _given_unread(unread_problems(values, key), key)]
    problems += model_key_problems(cfg, choices) + filled_key_problems(cfg)
    problems += data_key_problems(cfg)
    problems += optim_node_problems(cfg, choices if choices is not None else hydra_choices())
    problems += built_node_problems(cfg)
    problems += added_key_problems(cfg, choices if choices is not None else hydra_choices())
    problems += unread_data_problems(cfg) + legacy_option_problems(cfg)
    problems += device_problems(cfg)
    problems += model_class_problems(cfg)
    target = OmegaConf.select(cfg, "data.tgt_lang", default=None)
    if target:  # scoring its text may need extra packages: say so before any data is read
        try:
            bleu_tokenizer(str(target))
        except ValueError as err:
            problems.append(f"  data.tgt_lang={target!r}: {err}")
    problems += task_problems(cfg, quiet=bool(problems))
    problems += model_value_problems(cfg)
    average = OmegaConf.select(cfg, "test_average_last", default=0)
    kept = OmegaConf.select(cfg, "checkpoint.keep_last_epochs", default=None)
    if isinstance(average, int) and isinstance(kept, int) and average > 1 and kept < average:
        problems.append(
            f"  test_average_last={average}: the final scores would average {average} epoch checkpoints, and "
            f"checkpoint.keep_last_epochs={kept} keeps {kept}; keep at least {average}, or average fewer"
        )
    problems += unused_groups(cfg)
    said = {problem.split("=", 1)[0] for problem in problems}  # a key's own rule said it: not again by its kind
    problems += [problem for problem in setting_type_problems(cfg) if problem.split("=", 1)[0] not in said]
    # the constructor's own checks beside every other problem, except where a model setting is among them (a
    # bad model.d_model, a group the model does not use), which the constructor would name a second time
    if not any(problem.lstrip().startswith(("model", "pos.", "norm.", "attention.")) for problem in problems):
        problems += model_build_problems(cfg)
    if not any(problem.lstrip().startswith("smoothing") for problem in problems):  # the same for the loss
        problems += loss_build_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))


def _command_line_keys() -> list[str] | None:
    """The keys the command line gave (``+``/``~`` stripped); None without Hydra's record of it (a config
    composed in code)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]


def _given_unread(problems: list[str], key: str) -> list[str]:
    """Of the options a search block's strategy does not read, those the command line gave: a task's or an
    experiment's own values for another strategy (summarisation's beam_size=4 and length_penalty=2.0 with
    decode.strategy=greedy) are not the user's to remove. Without Hydra's record of the command line (the
    config composed in code), every one."""
    given = _command_line_keys()
    if given is None:
        return problems
    if key in given:  # the whole block given at once
        return problems
    return [p for p in problems if p.split("=", 1)[0] in given]
