"""How a run is described to its user and its loggers: the recipe that shaped it, its config as the loggers
get it, and the settings that tell it from the other runs of a sweep."""

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nmt.training.config_groups import hydra_choices, unused_model_parts
from nmt.utils.configs import CONF


def recipe_applied(recipe: str | None) -> bool:
    """Whether the recipe Hydra records as chosen was applied: Hydra records the optional default's name
    (``<data>_<model>``) even when no such file exists."""
    return recipe not in (None, "none") and (CONF / "recipe" / f"{recipe}.yaml").is_file()


def describe_recipe(cfg: DictConfig) -> str:
    """One line saying which recipe (conf/recipe/<name>.yaml) shaped this run and why: the default of its data
    and model, the one an experiment pins, or the one the command line gave."""
    if not HydraConfig.initialized():
        return "Recipe: (config composed without Hydra's runtime; see config.yaml)"
    choices = HydraConfig.get().runtime.choices
    recipe, data, model = choices.get("recipe"), choices.get("data"), choices.get("model")
    experiment = choices.get("experiment")
    pinned = experiment_recipe(experiment)  # "none" for an experiment that is a recipe of its own
    # an experiment's pinned recipe replaced on the command line (experiment=multi30k_tiny recipe=none)
    instead = f", in place of experiment={experiment}'s recipe={pinned}" if pinned not in (None, recipe) else ""
    if not recipe_applied(recipe):
        if pinned == "none" and recipe in (None, "none"):
            why = f"experiment={experiment} is a recipe of its own"
        elif experiment and pinned is None and recipe not in (None, "none"):
            why = f"experiment={experiment} is a recipe of its own; no conf/recipe/{recipe}.yaml"
        elif recipe in (None, "none"):
            why = f"recipe=none{instead}"
        else:
            why = f"no conf/recipe/{recipe}.yaml for data={data} model={model}"
        return f"Recipe: none ({why}); every value comes from the groups and the command line"
    default = recipe == f"{data}_{model}"
    if pinned == recipe:
        where = f"the default for data={data} model={model}, " if default else ""
        return (
            f"Recipe: {recipe}, {where}pinned by experiment={experiment} (conf/recipe/{recipe}.yaml, its values "
            f"under the experiment's own); the resolved config is saved in the run folder as config.yaml"
        )
    if not default or instead:  # named on the command line
        which = "the default" if default else "not the default"
        return (
            f"Recipe: {recipe}, as given (recipe={recipe}; conf/recipe/{recipe}.yaml, {which} of data={data} "
            f"model={model}){instead}; the resolved config is saved in the run folder as config.yaml"
        )
    return (
        f"Recipe: {recipe}, the default for data={data} model={model} (conf/recipe/{recipe}.yaml){instead}; "
        "recipe=none trains without it; the resolved config is saved in the run folder as config.yaml"
    )


def experiment_recipe(experiment: str | None) -> str | None:
    """The recipe an experiment's file pins in the place of the data's default (``override /recipe: <name>``;
    ``none`` for an experiment that is a recipe of its own), or None where it leaves the default to apply."""
    path = CONF / "experiment" / f"{experiment}.yaml"
    if not experiment or not path.is_file():
        return None
    own, built_on = None, None
    for entry in OmegaConf.load(path).get("defaults") or []:
        if OmegaConf.is_dict(entry) and "override /recipe" in entry:
            own = str(entry["override /recipe"])
        elif isinstance(entry, str) and entry != "_self_":
            # another experiment it builds on (factorial_converged on factorial_tiny; /experiment/x, x@_here_):
            # its pin, unless this one's
            name = entry.partition("@")[0].removeprefix("/").removeprefix("experiment/")
            if "/" not in name:  # not another group's config (/recipe/x, /data/y)
                built_on = experiment_recipe(name) or built_on
    return own if own is not None else built_on


def logged_config(cfg: DictConfig, config: dict | None = None) -> dict:
    """The run's resolved config (``config``, as config.yaml holds it: its run_dir filled in; else ``cfg``
    resolved) as the loggers get it (W&B's config, TensorBoard's hparams.yaml): without the model-part groups
    the model does not read, whose defaults (attention=multiplicative for a Transformer) read as settings of
    the run where runs are grouped by config. config.yaml keeps everything."""
    unread = unused_model_parts(cfg)
    config = OmegaConf.to_container(cfg, resolve=True) if config is None else config
    return {key: value for key, value in config.items() if key not in unread}


# keys of a command line that say where a run is written, how it is named or which machine's resources it
# takes, not how it trains
BOOKKEEPING = ("run_dir", "group", "tags", "name", "cache_dir", "ckpt_path", "resume", "threads")


def run_params(cfg: DictConfig) -> dict:
    """What tells a run from the others of a sweep, for a table of runs: its groups' options (model, pos,
    norm, optim, smoothing, data, recipe, ...; not Hydra's own or the logger's, nor a model part the model
    does not read), its seed, and the settings its command line gave by key, as the run read them (a
    sweep's factors of values, ``model.dropout=0.1,0.3``, and its level settings: a table of group options
    alone showed a dropout grid's runs alike but for their seed)."""
    unread = unused_model_parts(cfg)
    choices = {
        k: v for k, v in hydra_choices().items() if "/" not in k and k not in ("hydra", "logger") and k not in unread
    }
    params = {**{k: str(v) for k, v in sorted(choices.items())}, "seed": cfg.get("seed")}
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    # a key deleted (~key) has no value to show: its column would read as key=null
    given = [o.lstrip("+").split("=", 1)[0] for o in overrides if not o.startswith("~")]
    for key in sorted(set(given)):
        if key in params or key in BOOKKEEPING or key.startswith(("hydra.", "logger.")) or key in hydra_choices():
            continue
        # never an error: this row is logged after training, before the run's results are written
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        params[key] = value if isinstance(value, bool | int | float | str) else str(value)
    return params
