"""Checks of the config against its task: the metrics the task logs (what checkpoints and early stopping watch,
and which way), and the final scores it can give."""

from omegaconf import DictConfig, OmegaConf

from nmt.metrics import LOWER_IS_BETTER, lower_is_better
from nmt.tasks import build_task
from nmt.training.config_groups import built_node_problems


def task_problems(cfg: DictConfig, quiet: bool) -> list[str]:
    """The task built from ``cfg.task`` and asked what it refuses (``task.check``); ``quiet``: other problems
    were found, which name a task's build failure by their own keys."""
    problems = []
    task = None
    if cfg.get("task") is not None and not built_node_problems(cfg, ("task",)):  # else said below, by its key
        try:
            task = build_task(cfg.task)
        except ValueError as err:  # e.g. validation's search, named above by its own key
            if not quiet:
                problems.append(f"  task: {err}")
    if task is not None:
        problems += task.check(cfg)
        # a task that refuses bleu_every_n_epochs=0 itself (a summariser) has said why: not said again below
        decoding_said = task.refuses_undecoded_validation
        names = task.validation_metric_names()
        for key in ("checkpoint.monitor", "early_stopping.monitor"):
            value = OmegaConf.select(cfg, key, default=None)
            if names is not None and value is not None and value not in names:
                problems.append(f"  {key}={value!r}: task={task.name} logs {sorted(names)}")
            problems += mode_problems(cfg, key.split(".")[0], value)
        validates = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None) != 0  # 0: no validation at all
        if validates and not decoding_said and OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1) == 0:
            watched = ["checkpoint.monitor"]
            if OmegaConf.select(cfg, "early_stopping.patience", default=None):  # 0, null: off
                watched.append("early_stopping.monitor")
            decoded = {
                key: value
                for key in watched
                if (value := OmegaConf.select(cfg, key, default=None)) in task.decoded_metrics
            }
            if decoded:  # one line for both keys: the same reason and the same ways out
                named = " and ".join(f"{key}={value!r}" for key, value in decoded.items())
                problems.append(
                    f"  {named}: validation.bleu_every_n_epochs=0 never decodes the validation set, so "
                    f"{' and '.join(sorted(set(decoded.values())))} is never computed; monitor val_loss (mode=min), "
                    "or decode (bleu_every_n_epochs >= 1)"
                )
        test_size = OmegaConf.select(cfg, "data.test_size", default=None)
        if (
            test_size == 0
            and OmegaConf.select(cfg, "data.test", default=None) is None
            and cfg.get("test_after_training")
        ):
            problems.append(
                "  data.test_size=0 sets no test pairs aside, so test_after_training=true has nothing to score: set "
                "test_after_training=false, or data.test_size >= 1"
            )
        final = [key for key in ("val_after_training", "test_after_training") if cfg.get(key)]
        if final and not task.scores_final_model():
            problems.append(
                f"  {'/'.join(final)}=true: task={task.name} does not implement final_score and final_tag (formerly "
                "test and test_tag, for the test set alone); implement them, or set these false"
            )
    return problems


def mode_problems(cfg: DictConfig, section: str, metric) -> list[str]:
    """A ``mode`` against its metric's direction (:func:`nmt.metrics.lower_is_better`: losses, perplexities
    and error rates fall, BLEU, chrF, ROUGE and accuracies rise). Watched the wrong way, best.ckpt was the
    worst checkpoint and early stopping ended runs that were improving."""
    mode = OmegaConf.select(cfg, f"{section}.mode", default=None)
    stopping_off = section == "early_stopping" and not OmegaConf.select(cfg, "early_stopping.patience")
    if not isinstance(metric, str) or mode not in ("min", "max") or stopping_off:
        return []
    falls = lower_is_better(metric)
    if mode == ("max" if falls else "min"):
        # the direction is read from the name alone: say so, and how a metric that falls is named
        why = (
            f"its name ends in {next(e for e in LOWER_IS_BETTER if metric.endswith(e))}"
            if falls
            else f"its name ends in none of {', '.join(LOWER_IS_BETTER)} (nmt.metrics.LOWER_IS_BETTER)"
        )
        return [
            f"  {section}.mode={mode}: {section}.monitor={metric} is better {'lower' if falls else 'higher'}, as "
            f"{why}; set {section}.mode={'min' if falls else 'max'}"
            + ("" if falls else ", or name a metric that improves downwards with one of those endings")
        ]
    return []
