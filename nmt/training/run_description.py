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
    """One line saying which default recipe (conf/recipe/<data>_<model>.yaml) shaped this run and why."""
    if not HydraConfig.initialized():
        return "Recipe: (config composed without Hydra's runtime; see config.yaml)"
    choices = HydraConfig.get().runtime.choices
    recipe, data, model = choices.get("recipe"), choices.get("data"), choices.get("model")
    chosen = recipe not in (None, "none", f"{data}_{model}")  # named on the command line, not the default
    experiment = choices.get("experiment")
    if not recipe_applied(recipe):
        if experiment:
            why = f"experiment={experiment} is a recipe of its own"
        elif recipe in (None, "none"):
            why = "recipe=none"
        else:
            why = f"no conf/recipe/{recipe}.yaml for data={data} model={model}"
        return f"Recipe: none ({why}); every value comes from the groups and the command line"
    # an experiment that includes a recipe of its own, composed after this one (data=toy under an experiment of
    # Multi30k's recipe): both applied, and the line named this one alone
    included = [r for r in _experiment_recipes(experiment) if r != recipe]
    also = (
        f"; experiment={experiment} applies conf/recipe/{included[0]}.yaml after it (its values win where both set one)"
        if included
        else ""
    )
    if chosen:
        return (
            f"Recipe: {recipe}, as given (recipe={recipe}; conf/recipe/{recipe}.yaml, not the default of data={data} "
            f"model={model}){also}; the resolved config is saved in the run folder as config.yaml"
        )
    return (
        f"Recipe: {recipe}, the default for data={data} model={model} (conf/recipe/{recipe}.yaml){also}; "
        "recipe=none trains without it; the resolved config is saved in the run folder as config.yaml"
    )


def _experiment_recipes(experiment: str | None) -> list[str]:
    """The recipes an experiment's file includes in its defaults (``/recipe/<name>``)."""
    path = CONF / "experiment" / f"{experiment}.yaml"
    if not experiment or not path.is_file():
        return []
    defaults = OmegaConf.load(path).get("defaults") or []
    return [str(d).removeprefix("/recipe/") for d in defaults if isinstance(d, str) and d.startswith("/recipe/")]


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
