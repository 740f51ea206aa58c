"""Settings given on the command line that the run would read nothing by: a model-part group the chosen
model does not use, a top-level optimiser key its optimiser does not read, validation's search where
validation decodes nothing, early stopping's metric where its patience is off, the final scores'
averaging where none is made."""

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nmt.training.config_groups import MODEL_PART_GROUPS, NOAM, unused_model_parts
from nmt.utils.configs import CONF


def unused_groups(cfg: DictConfig, choices: dict | None = None, overrides: list[str] | None = None) -> list[str]:
    """A model-part group given on the command line (``model=rnn pos=relative``) that the chosen model
    does not use: one line naming it and the groups that do apply. ``choices`` and ``overrides`` default
    to Hydra's record of this run (no check when the config was composed without Hydra's runtime)."""
    if choices is None or overrides is None:
        if not HydraConfig.initialized():
            return []
        runtime = HydraConfig.get()
        choices, overrides = dict(runtime.runtime.choices), list(runtime.overrides.task)
    # a group's option (norm=rms) or a key inside it (norm.eps=1e-3): a key of a group the model does not use
    # is read by nothing, and the default option's keys always exist, so Hydra accepts it
    given: dict[str, str] = {}
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        given.setdefault(key.split(".", 1)[0], key)
    problems = _unread_shared_keys(cfg, choices, overrides) + _unread_validation_search(cfg, overrides)
    problems += _unread_where_off(cfg, overrides)
    used = set(MODEL_PART_GROUPS) - unused_model_parts(cfg)
    for group in MODEL_PART_GROUPS:
        if group in given and group not in used:
            applies = ", ".join(sorted(used)) or "none of them"
            named = given[group] if "." in given[group] else f"{group}={choices.get(group)}"
            problems.append(
                f"  {named}: model={choices.get('model')} does not use group '{group}' "
                f"(of {', '.join(MODEL_PART_GROUPS)} it uses {applies}); remove it"
            )
    return problems


def _unread_where_off(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """Settings given on the command line for a part of the run that is off: the final scores' averaging
    where no final score is made; early stopping's metric, direction or after_warmup where its patience is off
    (null or 0: accepted, they stopped nothing). A sweep's plan checks each cell so, with the sweep's command line: a
    cell whose recipe has no patience is refused before any run, not run by run."""
    given = {o.lstrip("+").split("=", 1)[0]: o.lstrip("+") for o in overrides if not o.startswith("~")}
    problems = []
    patience = OmegaConf.select(cfg, "early_stopping.patience", default=None)
    if not patience:
        shown = "null" if patience is None else patience
        problems += [
            f"  {given[key]}: early stopping is off (early_stopping.patience={shown}); set early_stopping.patience=N "
            "(validations without improvement) to stop on it, or remove it"
            for key in ("early_stopping.monitor", "early_stopping.mode", "early_stopping.after_warmup")
            if key in given
        ]
    scored = [k for k in ("val_after_training", "test_after_training") if OmegaConf.select(cfg, k, default=True)]
    if "test_average_last" in given and not scored:
        problems.append(
            f"  {given['test_average_last']}: the checkpoints the final scores average, and val_after_training=false "
            "test_after_training=false make no final score; remove it, or let the run score"
        )
    return problems


def _unread_validation_search(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """``validation.search.*`` given on the command line where validation decodes nothing
    (``validation.bleu_every_n_epochs=0``, which a language model requires): no search reads it."""
    every = OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=None)
    if every:
        return []
    return [
        f"  {override}: validation decodes no sentences here (validation.bleu_every_n_epochs={every}), so no "
        f"search reads it; remove {'its search' if override.lstrip('+').startswith('validation=') else 'it'}"
        for override in overrides
        if not override.startswith("~") and _sets_validation_search(override)
    ]


def _sets_validation_search(override: str) -> bool:
    """Whether an override sets something under ``validation.search``: a key under it, or the whole
    ``validation`` block given as one value that holds a ``search`` (``validation={search:{strategy:beam}}``)."""
    key = override.lstrip("+").split("=", 1)[0]
    if key.split(".")[:2] == ["validation", "search"]:
        return True
    if key != "validation":
        return False
    from hydra.core.override_parser.overrides_parser import OverridesParser

    value = OverridesParser.create().parse_overrides([override])[0].value()
    return isinstance(value, dict) and "search" in value


# top-level keys that the optimiser groups read where they apply (conf/optim/*.yaml: ${lr}, ${warmup}, ...)
SHARED_KEYS = ("lr", "warmup", "weight_decay")


def _own_keys(cfg: DictConfig, key: str) -> list[str]:
    """The chosen optimiser's and scheduler's keys named ``key`` (``optim.optimizer.lr``), as composed."""
    absent = object()
    return [
        f"optim.{part}.{key}"
        for part in ("optimizer", "scheduler")
        if OmegaConf.select(cfg, f"optim.{part}.{key}", default=absent, throw_on_missing=False) is not absent
    ]


def _unread_shared_keys(cfg: DictConfig, choices: dict, overrides: list[str]) -> list[str]:
    """``lr=``, ``warmup=`` or ``weight_decay=`` given on the command line that nothing in the config reads
    (``optim=adam lr=1e-3`` trained at adam's own rate, and a sweep over lr under it gave equal cells)."""
    text = str(OmegaConf.to_container(cfg, resolve=False))
    folder = CONF / "optim"
    problems = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key in SHARED_KEYS and "${" + key + "}" not in text:
            readers = sorted(p.stem for p in folder.glob("*.yaml") if "${" + key + "}" in p.read_text())
            optim, experiment = choices.get("optim"), choices.get("experiment")
            if optim in readers:  # the group reads it, but something composed after it set the key itself
                setter = f"experiment={experiment}" if experiment else "the recipe or the command line"
                problems.append(
                    f"  {key}={value}: {setter} sets optim={optim}'s own key in place of the top-level {key}; "
                    "set that key (optim.optimizer.*, optim.scheduler.*)"
                )
                continue
            named = _own_keys(cfg, key)  # optim=adam's own optim.optimizer.lr, say
            own = (
                f"its own key, {' or '.join(named)}" if named else "its own key (optim.optimizer.*, optim.scheduler.*)"
            )
            if key == "lr" and OmegaConf.select(cfg, "optim.scheduler._target_", default=None) == NOAM:
                own = "the peak of its schedule, optim.scheduler.factor (optim.optimizer.lr stays 1.0: it multiplies)"
            problems.append(
                f"  {key}={value}: optim={optim} does not read the top-level {key} (read by optim="
                f"{', '.join(readers) or 'none'}); set {own}"
            )
    return problems
