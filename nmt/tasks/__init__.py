"""Tasks: what differs between translation, language modelling and summarisation (see base.Task).

A task is chosen with the config group ``task`` (``conf/task/<name>.yaml``, whose ``task._target_``
names the class), so adding one is a module here and a config file there; nothing else changes."""

from nmt.tasks.base import Task, exact_sum
from nmt.utils.instantiate import as_config, instantiate

# checkpoints written before tasks were objects name their task ("translation", "lm") and keep ROUGE in
# a top-level key; this maps them to today's task configs, so that they still load
_LEGACY = {
    "translation": "nmt.tasks.translation.TranslationTask",
    "lm": "nmt.tasks.language_model.LanguageModelTask",
}


def task_config(config: dict) -> dict:
    """The task section of a run's resolved config (as saved in config.yaml and in checkpoints)."""
    task = config.get("task", "translation")
    if not isinstance(task, str):
        return task
    if task not in _LEGACY:
        raise ValueError(f"task={task!r} in a saved config: must be one of {sorted(_LEGACY)}")
    validation = config.get("validation", {})
    options = {}
    if task == "translation":
        options = {
            "val_search": dict(validation.get("search", {})),
            "bleu_every_n_epochs": validation.get("bleu_every_n_epochs", 1),
            "rouge": bool(config.get("rouge")),
        }
    return {"_target_": _LEGACY[task], **options}


def build_task(task_cfg) -> Task:
    """The task object of a ``task`` config node (or of a saved run's task section)."""
    task = instantiate(as_config(task_cfg), _convert_="all")
    if not isinstance(task, Task):
        raise ValueError(f"task._target_={task_cfg['_target_']!r} is not a subclass of nmt.tasks.base.Task")
    return task


__all__ = ["Task", "build_task", "exact_sum", "task_config"]
