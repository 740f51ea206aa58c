"""Which keys apply to a run: keys under ``model`` that the chosen model and its parts take, keys under
``data`` that the chosen corpus's module takes, the keys of the nodes Hydra builds (optimiser, schedule,
loss, task), keys added with ``+`` that nothing reads; and the keys and switches conf/ writes, read from
conf/ itself. Settings a run would not read are in :mod:`nmt.training.config_unread`."""

import difflib
import functools
import inspect
import re
from pathlib import Path

import yaml
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nmt.utils.configs import CONF, VALUE_GROUPS
from nmt.utils.instantiate import locate_target


@functools.cache
def written_keys() -> tuple[frozenset[str], frozenset[str]]:
    """Every key conf/ writes for a run of train.py (train.yaml, each group's options, the recipes and
    experiments), dotted as the composed config holds it, and those of them it writes as true or false.
    OmegaConf keeps no types and takes any key added with ``+``: the checks read the schema from conf/ itself,
    so a key or switch added to a group is checked without a list to keep. The sweep's own keys (sweep.yaml,
    conf/tuned/) are not a run's: its runs are composed from train.yaml."""
    keys, bools = set(), set()
    for _path, written, switched in _keys_by_file():
        keys |= written
        bools |= switched
    return frozenset(keys), frozenset(bools)


@functools.cache
def schema_keys() -> tuple[frozenset[str], dict[str, tuple[str, ...]]]:
    """The keys train.yaml and the groups' options write (the schema), and, for each key only an experiment
    or a recipe writes, those files (``experiment/x.yaml``): they set the schema's values, so a key of theirs
    outside it (``early_stoping:``) is a misspelling that no part of a run reads."""
    schema, elsewhere = set(), {}
    for path, written, _ in _keys_by_file():
        if path.parts[0] in VALUE_GROUPS:
            for key in written:
                elsewhere.setdefault(key, []).append(path.as_posix())
        else:
            schema |= written
    return frozenset(schema), {k: tuple(v) for k, v in elsewhere.items() if k not in schema}


def _keys_by_file() -> list[tuple[Path, set[str], set[str]]]:
    """Each config file a run of train.py may compose (its path under conf/), the keys it writes and those
    it writes as true or false."""
    found = []
    for path in sorted(CONF.rglob("*.yaml")):
        parts = path.relative_to(CONF).parts
        # Hydra's own settings, the grids (their values are lists of levels), the sweep's, the other programs'
        if parts[0] in ("hydra", "grid", "tuned") or (len(parts) == 1 and parts[0] != "train.yaml"):
            continue
        text = path.read_text(encoding="utf-8")
        package = _package(text, ".".join(parts[:-1]))
        if package is None:
            continue
        keys: set[str] = {package} if package else set()
        bools: set[str] = set()
        node = yaml.safe_load(text) or {}
        if isinstance(node, dict):  # a file's defaults list chooses groups (keys of their own files), and hydra:
            node = {k: v for k, v in node.items() if k not in ("defaults", "hydra")}  # is Hydra's
        _walk(node, package, keys, bools)
        found.append((path.relative_to(CONF), keys, bools))
    return found


def _package(text: str, group: str) -> str | None:
    """Where a file's keys go: its ``# @package`` header (read, as Hydra does, from the comments that open the
    file) or its group's path; "" for the root, None for Hydra's own settings."""
    header = re.match(r"(?:[ \t]*(?:#[^\n]*)?\n)*?[ \t]*# @package[ \t]+(\S+)", text)
    package = header.group(1) if header else group
    package = package.replace("_group_", group).replace("_here_", group)
    if package == "_global_":
        return ""
    package = package.removeprefix("_global_.")
    return None if package == "hydra" or package.startswith("hydra.") else package


def switches() -> frozenset[str]:
    """The keys conf/ writes as true or false (``data.tokenizer.joint``, ``model.input_feeding``, ``task.rouge``):
    ``task.rouge=maybe`` was read as true where a key is tested for truth."""
    return written_keys()[1]


def _walk(node, prefix: str, keys: set[str], bools: set[str]) -> None:
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        keys.add(dotted)
        if isinstance(value, bool):
            bools.add(dotted)
        _walk(value, dotted, keys, bools)


# nodes that the training code reads key by key (not built from a _target_, not passed on whole to Lightning or
# a search), where a key added with + was read by nothing
READ_BY_KEY = ("", "checkpoint", "early_stopping", "progress", "validation")


def added_key_problems(cfg: DictConfig, choices: dict | None = None) -> list[str]:
    """Keys added with ``+`` (``+checkpoint.keep_last=3``, ``+foo=1``), or written by an experiment or recipe
    (``early_stoping:``), that nothing reads: said with where they came from and the keys the node takes, where
    the run went on without them. A key the config's own ``${key}`` reads is read. ``choices``: the run's group
    choices (Hydra's record), which name the experiment and recipe a key came from; without them, every file
    that writes it."""
    known, elsewhere = schema_keys()
    problems = []
    text = OmegaConf.to_yaml(cfg)  # unresolved: a key an experiment writes for its own ${key} is read by that
    for node_key in READ_BY_KEY:
        node = OmegaConf.select(cfg, node_key, default=None) if node_key else cfg
        if not isinstance(node, DictConfig):
            continue
        prefix = f"{node_key}." if node_key else ""
        unknown = [
            prefix + str(k)
            for k in node
            if f"{prefix}{k}" not in known
            and f"{prefix}{k}" != "hydra"
            and not re.search(r"\$\{" + re.escape(f"{prefix}{k}") + r"[}.:]", text)
        ]
        if unknown:
            taken = sorted(
                k.removeprefix(prefix) for k in known if k.startswith(prefix) and "." not in k.removeprefix(prefix)
            )
            # a misspelling in an experiment or recipe file: named by the file, not taken for a + of the command line
            files = sorted({f"conf/{f}" for key in unknown for f in elsewhere.get(key, ()) if _chosen(f, choices)})
            source = f"written in {' or '.join(files)}" if files else "added with +, or by a config of another folder?"
            if not node_key and set(unknown) <= _sweep_keys():  # sweep_name in an experiment: the sweep's own
                source = "a sweep's own setting: give it on sweep.py's command line"
            close = [m for k in unknown for m in difflib.get_close_matches(k.removeprefix(prefix), taken, n=1)]
            hint = f"did you mean {', '.join(prefix + m for m in close)}? " if close else ""
            problems.append(
                f"  {', '.join(unknown)}: not read by any part of a run ({source}); "
                f"{hint}{'the config' if not node_key else node_key} takes {', '.join(taken)}"
            )
    return problems


def _chosen(path: str, choices: dict | None) -> bool:
    """Whether ``experiment/x.yaml`` (or a recipe's) is the run's own choice; any file where none are known."""
    group, _, name = path.partition("/")
    return not choices or str(choices.get(group)) == name.removesuffix(".yaml")


@functools.cache
def _sweep_keys() -> frozenset[str]:
    """conf/sweep.yaml's own keys (sweep_name, baseline, ...): a sweep's, which no run reads."""
    node = yaml.safe_load((CONF / "sweep.yaml").read_text(encoding="utf-8")) or {}
    return frozenset(str(k) for k in node if k not in ("defaults", "hydra"))


# keys the training code gives a built node itself, from the tokenizers: one set in the config as well was
# silently overridden (+model.pad_id=5 trained with the tokenizers' padding id)
FILLED_KEYS = {
    "model": ("src_vocab_size", "tgt_vocab_size", "pad_id"),
    "smoothing": ("pad_id",),
}


def filled_key_problems(cfg: DictConfig) -> list[str]:
    """Keys of :data:`FILLED_KEYS` set in the config, which the run would override without a word."""
    problems = []
    for node_key, keys in FILLED_KEYS.items():
        node = OmegaConf.select(cfg, node_key, default=None)
        given = [k for k in keys if isinstance(node, DictConfig) and k in node]
        if given:
            problems.append(
                f"  {', '.join(f'{node_key}.{k}' for k in given)}: set by the run from its tokenizers (the "
                "vocabularies' sizes, the padding id); remove it"
            )
    return problems


def model_key_problems(cfg: DictConfig, choices: dict | None = None) -> list[str]:
    """Keys under ``model`` that the chosen model's class does not take (a recipe or experiment meant for
    another model, ``model=transformer recipe=toy_rnn``): refused here, in one line, rather than by the
    constructor once the data is read."""
    target = OmegaConf.select(cfg, "model._target_", default=None)
    if not target:
        return []
    # model.attention=additive replaced the group's node (conf/model/*.yaml: attention: ${attention}) by a word
    for key, group in PART_KEYS.items():
        value = cfg.model.get(key) if key in cfg.model else None
        if value is not None and not OmegaConf.is_config(value):
            return [f"  model.{key}={value!r}: set by the config group {group}: choose it as {group}={value}"]
    return _own_key_problems(cfg, choices) + _part_key_problems(cfg, choices)


def _own_key_problems(cfg: DictConfig, choices: dict | None) -> list[str]:
    """Keys under ``model`` itself that the model's class does not take."""
    model_class = target_class(cfg, "model")
    if model_class is None:
        return []
    params = inspect.signature(model_class.__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return []
    unknown = [str(k) for k in cfg.model if not str(k).startswith("_") and k not in params]
    if not unknown:
        return []
    if choices is None:
        choices = hydra_choices()
    model = choices.get("model") or model_class.__name__
    source = ""
    recipe = choices.get("recipe")
    recipe_file = CONF / "recipe" / f"{recipe}.yaml"
    if choices.get("experiment"):
        source = f" (experiment={choices['experiment']} or the command line set them?)"
    elif recipe not in (None, "none") and recipe_file.is_file():  # Hydra names an optional recipe that is absent
        source = f" (recipe={recipe} or the command line set them?)"
    taken = sorted(str(k) for k in cfg.model if k in params)  # its own keys (the task gives the vocabularies)
    return [
        f"  {', '.join('model.' + k for k in unknown)}: {'not an option' if len(unknown) == 1 else 'not options'} "
        f"of model={model}{source}; "
        f"it takes {', '.join(taken)}"
    ]


def _part_key_problems(cfg: DictConfig, choices: dict | None) -> list[str]:
    """Keys of a model-part group (``+attention.attention_dim=8`` under ``attention=dot``) that its class does
    not take: one line naming the group's option and the keys it does take, where the constructor would have
    stopped on a TypeError in Hydra's many lines."""
    problems = []
    for key, group in PART_KEYS.items():
        node = cfg.model.get(key) if key in cfg.model else None
        if not OmegaConf.is_config(node) or not node.get("_target_"):
            continue
        part_class = target_class(cfg.model, key)
        taken = keywords(part_class) if part_class is not None else None
        if taken is None:
            continue
        unknown = [str(k) for k in node if not str(k).startswith("_") and k not in taken]
        if not unknown:
            continue
        if choices is None:
            choices = hydra_choices()
        # a config composed without Hydra's runtime records no choices: the option whose file names the class
        named = [f.stem for f in sorted((CONF / group).glob("*.yaml")) if _target_of(f) == node._target_]
        chosen = choices.get(group) or (named[0] if len(named) == 1 else None)
        option = f"{group}={chosen}" if chosen else f"{group} ({part_class.__name__})"
        own = sorted(str(k) for k in node if not str(k).startswith("_") and k in taken)
        problems.append(
            f"  {', '.join(f'{group}.{k}' for k in unknown)}: "
            + ("not an option" if len(unknown) == 1 else "not options")
            + f" of {option}; "
            + (f"it takes {', '.join(own)}" if own else "it takes no options")
        )
    return problems


# groups that configure a part of the model: they matter only when the chosen model's config refers to
# them (conf/model/transformer.yaml has `position: ${pos}`; the RNN has no position encoding)
MODEL_PART_GROUPS = ("pos", "norm", "attention")
PART_KEYS = {"position": "pos", "norm": "norm", "attention": "attention"}  # the model's key: its group


def target_class(cfg: DictConfig, group: str) -> type | None:
    """The class a group's ``_target_`` names (None: none named, or one that does not import, which
    :func:`nmt.training.config_targets.target_problems` reports)."""
    target = OmegaConf.select(cfg, f"{group}._target_", default=None)
    if not target:
        return None
    try:
        found = locate_target(str(target))
    except Exception:  # noqa: BLE001
        return None
    return found if isinstance(found, type) else None


def keywords(cls) -> set[str] | None:
    """The keyword arguments ``cls(...)`` takes, following ``**kwargs`` up the classes it is passed on to
    (None: a class or function that takes any keyword)."""
    if not isinstance(cls, type):  # a function (a schedule's)
        params = inspect.signature(cls).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return None
        return {n for n, p in params.items() if p.kind is not p.VAR_POSITIONAL}
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters
        names |= {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return names
    return None


def data_key_problems(cfg: DictConfig) -> list[str]:
    """Keys under ``data`` that the chosen corpus's module does not take (``data=files +data.max_samples=1000``:
    a splitting option of the downloaded corpora): refused in one line naming the keys it does take, where
    building the module stopped on a TypeError."""
    data_class = target_class(cfg, "data")
    if data_class is None:
        return []
    taken = keywords(data_class)
    if taken is None:
        return []
    unknown = [str(k) for k in cfg.data if not str(k).startswith("_") and k not in taken]
    problems = []
    if unknown:
        options = sorted(taken - {"cache_dir", "seed"})  # those two are the run's, given by train()
        verb = "is not an option" if len(unknown) == 1 else "are not options"
        problems.append(
            f"  {', '.join('data.' + k for k in unknown)} {verb} of {data_class.__name__}; it takes "
            + ", ".join(options)
        )
    name = cfg.data.get("name") if "name" in taken else None
    if isinstance(name, str) and name != getattr(data_class, "name", None):
        from nmt.data.file_specs import corpora_of_this_project

        if name in corpora_of_this_project():  # training only: runs named so before are still evaluated
            problems.append(
                f"  data.name={name}: the name of a corpus this project reads itself, whose records and caches "
                f"would then mix with this one's; name your corpus otherwise (e.g. data.name={name}_mine)"
            )
    tokenizer = cfg.data.get("tokenizer") if "tokenizer" in taken else None
    if isinstance(tokenizer, DictConfig):  # the tokenizer's settings, a dataclass the module builds (a TypeError)
        from dataclasses import fields

        from nmt.data.tokenizer import TokenizerSettings

        settings = [f.name for f in fields(TokenizerSettings)]
        extra = [str(k) for k in tokenizer if k not in settings]
        if extra:
            verb = "is not a setting" if len(extra) == 1 else "are not settings"
            problems.append(
                f"  {', '.join('data.tokenizer.' + k for k in extra)} {verb} of the tokenizer; it takes "
                f"{', '.join(settings)}"
            )
    return problems


# nodes built by Hydra from their ``_target_`` whose keys are checked against it (model, data and the model's
# parts have checks of their own; the logger's targets import Lightning, which a refused run never loads)
BUILT_NODES = ("optim.optimizer", "optim.scheduler", "smoothing", "task")


def built_node_problems(cfg: DictConfig, nodes: tuple[str, ...] = BUILT_NODES) -> list[str]:
    """Keys added to a node that Hydra builds (``+optim.optimizer.foo=1``, ``+task.foo=1``) that its target does
    not take: said in one line naming what it takes, where the build stopped on Hydra's "Error in call to
    target" once the data was read."""
    problems = []
    for node_key in nodes:
        node = OmegaConf.select(cfg, node_key, default=None)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not target:
            continue
        try:
            built = locate_target(str(target))
        except Exception:  # noqa: BLE001  (a target that does not import: target_problems says so)
            continue
        taken = keywords(built)
        if taken is None:
            continue
        unknown = [str(k) for k in node if not str(k).startswith("_") and k not in taken]
        if unknown:
            name = getattr(built, "__name__", str(target))
            verb = "is not an option" if len(unknown) == 1 else "are not options"
            problems.append(
                f"  {', '.join(f'{node_key}.{k}' for k in unknown)} {verb} of {name}; it takes "
                f"{', '.join(sorted(taken - {'params', 'optimizer', 'self', *FILLED_KEYS.get(node_key, ())}))}"
            )
    return problems


def optim_node_problems(cfg: DictConfig, choices: dict | None = None) -> list[str]:
    """Keys added under an optimiser part that the chosen ``optim`` does not have (``optim=adam
    +optim.scheduler.factor=0.5``: Adam at a fixed rate has ``scheduler: null``, and the run died on a
    traceback once the data was read)."""
    problems = []
    for part in ("optimizer", "scheduler"):
        node = OmegaConf.select(cfg, f"optim.{part}", default=None)
        if isinstance(node, DictConfig) and "_target_" not in node:
            optim = f"optim={choices['optim']}" if (choices or {}).get("optim") else "the chosen optim"
            readers = sorted(p.stem for p in (CONF / "optim").glob("*.yaml") if f"{part}:\n  _target_" in p.read_text())
            keys = ", ".join(f"optim.{part}.{k}" for k in node)
            problems.append(
                f"  {keys}: {optim} has no {part} (optim.{part}: null) to set them on; remove them, or choose "
                f"an optim that has one: {', '.join(readers)}"
            )
    scheduler = OmegaConf.select(cfg, "optim.scheduler", default=None)
    problems += _noam_rate_problems(cfg, scheduler)
    after = OmegaConf.select(cfg, "early_stopping.after_warmup", default=False)
    if after is True and isinstance(scheduler, DictConfig) and "_target_" in scheduler and "warmup" not in scheduler:
        # a fixed rate (no scheduler) has no warm-up to wait for: accepted, so that a factorial over optimisers
        # sets it once; a schedule whose warm-up is not read from `warmup` would wait for nothing, unsaid
        problems.append(
            f"  early_stopping.after_warmup=true: optim.scheduler ({scheduler._target_}) has no `warmup` key to say "
            "where its warm-up ends; give it one, or set early_stopping.after_warmup=false"
        )
    return problems


NOAM = "nmt.training.optim.noam"  # whose rate is its schedule's: optim.optimizer.lr multiplies it


def _noam_rate_problems(cfg: DictConfig, scheduler) -> list[str]:
    """optim.optimizer.lr other than 1.0 under Noam's schedule: the schedule gives the rate and multiplies that lr,
    so a student's optim.optimizer.lr=1e-3 (the key the top-level lr= error names) trained at a thousandth of the
    schedule's rate, without a word."""
    from nmt.training.optim import noam_peak  # torch: not where the command line is checked

    if not isinstance(scheduler, DictConfig) or scheduler.get("_target_") != NOAM:
        return []
    lr = OmegaConf.select(cfg, "optim.optimizer.lr", default=None)
    if not isinstance(lr, (int, float)) or lr == 1.0:
        return []
    d_model, warmup = scheduler.get("d_model"), scheduler.get("warmup")  # the schedule's own (an RNN sets it)
    factor = scheduler.get("factor", 1.0)
    said = f"  optim.optimizer.lr={lr}: under optim=noam the schedule gives the rate, and lr multiplies it"
    if all(isinstance(x, (int, float)) for x in (d_model, warmup, factor)) and d_model > 0:
        peak = noam_peak(d_model, warmup, factor)
        wanted = lr * (d_model * max(warmup, 1)) ** 0.5
        said += (
            f" (its peak now: {lr} x {peak:.3g}); keep optim.optimizer.lr=1.0 and set the peak with "
            f"optim.scheduler.factor (peak = factor x d_model^-0.5 x warmup^-0.5: {factor} gives {peak:.3g}, "
            f"{wanted:.3g} gives {lr}) and warmup, or choose optim=adam (a fixed lr) or optim=adamw (lr= is its peak)"
        )
    else:
        said += "; keep optim.optimizer.lr=1.0 and set the peak with optim.scheduler.factor and warmup"
    return [said]


def _target_of(path: Path) -> str | None:
    node = OmegaConf.load(path)
    return node.get("_target_") if isinstance(node, DictConfig) else None


def hydra_choices() -> dict:
    """The group options Hydra chose for this run ({} for a config composed without Hydra's runtime)."""
    return dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}


def unused_model_parts(cfg: DictConfig) -> set[str]:
    """The model-part groups (pos, norm, attention) the chosen model does not read: its config interpolates
    those it does (a Transformer reads no attention=, an RNN no pos= or norm=)."""
    model_cfg = OmegaConf.to_container(cfg.model, resolve=False) if cfg.get("model") is not None else {}
    return {g for g in MODEL_PART_GROUPS if "${" + g + "}" not in str(model_cfg)}


def warmup_past_the_end(cfg: DictConfig) -> str | None:
    """A warning where the schedule's warm-up outlasts trainer.max_steps (or max_epochs x limit_train_batches, when
    both are whole numbers): the learning rate rises for the whole run and never reaches its peak (a short run of
    data=zh_en kept the default 4,000-update warm-up and learnt nothing, without a word). Not an error: a smoke
    run may mean it."""
    scheduler = OmegaConf.select(cfg, "optim.scheduler", default=None)
    steps = OmegaConf.select(cfg, "trainer.max_steps", default=-1)
    if not isinstance(scheduler, DictConfig) or "warmup" not in scheduler or not isinstance(steps, int):
        return None
    limit = "trainer.max_steps"
    epochs = OmegaConf.select(cfg, "trainer.max_epochs", default=None)
    batches = OmegaConf.select(cfg, "trainer.limit_train_batches", default=None)
    accumulate = OmegaConf.select(cfg, "trainer.accumulate_grad_batches", default=1)
    counted = all(type(x) is int and x > 0 for x in (epochs, batches, accumulate))  # a fraction of an epoch: unknown
    if counted and (steps < 1 or epochs * batches // accumulate < steps):  # a course run shrunk by epochs and batches
        steps, limit = epochs * batches // accumulate, "trainer.max_epochs x limit_train_batches"
        limit += "" if accumulate == 1 else " / accumulate_grad_batches"
    warmup = scheduler.warmup
    if not isinstance(warmup, int) or steps < 1 or warmup <= steps:
        return None
    # a smoke run's 1 update: 0.05%, not 0%; 199 of 200: 99.50%, not 100%
    share = f"{steps / warmup:.{0 if 0.01 <= steps / warmup < 0.995 else 2}%}"
    # an experiment's recipe sets both: named where none is chosen (one chosen set a warm-up for its own length)
    chosen = hydra_choices().get("experiment")
    advice = (
        f"lower warmup= (experiment={chosen} sets it for its own length)"
        if chosen
        else "lower warmup (an experiment's recipe sets both, e.g. experiment=factorial_tiny)"
    )
    return (
        f"warning: the schedule's warm-up ({warmup} updates, warmup=) is longer than the run's {steps} updates "
        f"({limit}): the learning rate rises for the whole run and ends at {share} of its peak; for a short run "
        f"{advice}"
    )
