"""After training: the final weights validated, then the final model scored on validation and test."""

import contextlib
import signal
import threading
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from nmt.inference.checkpoint import epoch_checkpoints
from nmt.inference.loading import load_model
from nmt.tasks.base import FINAL_RESULTS
from nmt.training.lightning_data import lightning_data
from nmt.training.loggers import ROW_PLACE
from nmt.utils.io import atomic_write_text
from nmt.utils.ranks import first_process


def validate_final_weights(cfg: DictConfig, trainer: L.Trainer, module, datamodule, checkpoint_dir: Path) -> dict:
    """A run stopped by max_steps (or early) after its last validation has updates no validation saw:
    validate them, decoding, and keep them as best.ckpt when they are the best. Returns the metrics."""
    best = trainer.checkpoint_callbacks[0]
    # a monitored score that only decoded validations compute may never have been computed (a run shorter
    # than validation.bleu_every_n_epochs): validate the final weights then too, so that a best.ckpt exists
    never_scored = best.best_model_score is None
    # a monitored score that only decoded validations compute: the final weights' validation must have decoded
    decoded = (
        cfg.checkpoint.monitor not in module.task.decoded_metrics or module.last_decoded_step == trainer.global_step
    )
    if (
        trainer.global_step == module.last_validated_step and decoded and not never_scored
    ) or trainer.limit_val_batches == 0:
        return {}
    module.final_validation = True
    try:
        trainer.validate(module, datamodule=lightning_data(datamodule), verbose=False)
    finally:
        module.final_validation = False
    # the step and epoch it was logged at (the module's) are no measures of the weights: not in the results,
    # nor in the metrics best.ckpt keeps (below), which a run continued from it would report
    for key in ROW_PLACE:
        trainer.callback_metrics.pop(key, None)
    metrics = {k: as_float(v) for k, v in trainer.callback_metrics.items()}
    value = trainer.callback_metrics.get(cfg.checkpoint.monitor)
    if value is None:
        return metrics
    score = best.best_model_score
    better = score is None or (value > score if cfg.checkpoint.mode == "max" else value < score)
    if better:
        path = checkpoint_dir / "best.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # as ModelCheckpoint saves best.ckpt
        best.best_model_path, best.best_model_score = str(path), value.detach().clone()
        if trainer.is_global_zero:  # every process of a multi-process run saves it together; one says so
            print(f"The final updates validate best ({cfg.checkpoint.monitor}={float(value):.4f}): saved as {path}")
    return metrics


def final_splits(cfg: DictConfig, quiet: bool = False) -> list[str]:
    """The splits scored at the end: validation first (a measure to choose recipes by), then test. A run
    told not to validate (trainer.limit_val_batches=0) does not decode the validation set at its end either."""
    splits = [split for split, key in (("val", "val_after_training"), ("test", "test_after_training")) if cfg.get(key)]
    if "val" in splits and OmegaConf.select(cfg, "trainer.limit_val_batches", default=None) == 0:
        if not quiet:
            print("val_after_training: the validation set is not decoded at the end (trainer.limit_val_batches=0)")
        splits.remove("val")
    return splits


class _Stopped(BaseException):
    """A stop signal during the final validation or scores (raised by the handler, as Ctrl-C raises)."""


@contextlib.contextmanager
def stopped_by_signals(what: str, rerun: str, again: str = "the same command again"):
    """SIGTERM, SIGUSR1 or Ctrl-C while ``what`` runs (after training: nothing left to save) stops the
    process with one line saying what a rerun (``again``: :func:`~nmt.training.resume.how_to_rerun`) does
    (``rerun``), exit 143 (130)."""
    names = ("SIGTERM", "SIGUSR1")
    handled = [getattr(signal, n) for n in names if hasattr(signal, n)]
    main = threading.current_thread() is threading.main_thread()

    def stop(signum, frame):
        raise _Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in handled} if main else {}
    try:
        yield
    except (_Stopped, KeyboardInterrupt) as err:
        name = err.args[0] if isinstance(err, _Stopped) else "SIGINT"
        if first_process():  # one message, not one per process of a DDP run
            print(f"Stopped by {name} during {what}; run {again}: {rerun}")
        raise SystemExit(130 if name == "SIGINT" else 143) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def final_scores(
    cfg: DictConfig, task, trainer: L.Trainer, splits, best_path: str, checkpoint_dir: Path, run_dir: Path
):
    """The task's scores of the final model (the best checkpoint, or the mean of the last epochs:
    test_average_last) with the run's own search on ``splits``: {"val_as_test": ..., "test": ...}. The
    validation set is decoded exactly as the test is, so that recipes can be compared on the model and
    search they ship with, and the test is never the one to choose by."""
    average = checkpoints_to_average(cfg, checkpoint_dir)
    if average:
        print(f"Scoring the average of the last {average} epoch checkpoints (test_average_last)")
    # Lightning moves the module back to the CPU when fit ends: score on the device that trained
    device = str(trainer.strategy.root_device)
    loaded = load_model(best_path, average, device)
    wandb = any(isinstance(lg, WandbLogger) for lg in trainer.loggers)
    scores = {}
    for split in splits:
        out_dir = run_dir / "eval" / task.final_tag(cfg, split, average)
        maps = [0] if wandb and split == "test" else ()
        scores[FINAL_RESULTS[split]] = task.final_score(loaded, cfg, split, out_dir, attention_maps=maps)
    return scores


EVALUATIONS_BEFORE = "eval_before_update"  # a marker in the run folder: the update eval/'s evaluations are of


def mark_evaluations(run_dir: Path, from_update: int) -> None:
    """A sitting resumed at ``from_update`` with evaluations in eval/: the update they are of, kept in a marker
    until the sitting's end says whether it trained further (:func:`set_aside_evaluations`). Written once: a
    sitting killed after training and rerun (resumed at its last update) still moves them."""
    folder, marker = run_dir / "eval", run_dir / EVALUATIONS_BEFORE
    if folder.is_dir() and any(folder.iterdir()) and not marker.is_file():
        atomic_write_text(marker, f"{from_update}\n")


def set_aside_evaluations(run_dir: Path, trained_to: int, trained_from: int = 0) -> Path | None:
    """At a sitting's end, before its final scores: where the run trained past the update its evaluations were
    of (the marker of :func:`mark_evaluations`), eval/ (evaluate.py's folders and decoding grids, the final
    scores of an earlier end) holds weights that best.ckpt, last.ckpt and the newest epochs no longer hold. It
    moves, whole, to ``eval_before_update_<N>`` beside the fresh ``eval``, so that none sits among the new results
    under a name now meaning other weights; the move is said. Without a marker (eval/ was empty when the sitting
    started, at update ``trained_from``), what eval/ holds at its end was evaluated while the sitting trained
    (``last_test_beam5`` of last.ckpt at update 120, beside the final scores of update 360): of weights before
    update ``trained_to``."""
    folder, marker = run_dir / "eval", run_dir / EVALUATIONS_BEFORE
    try:
        from_update = int(marker.read_text())
    except (OSError, ValueError):
        from_update = None
    held = folder.is_dir() and any(folder.iterdir())
    if from_update is None and not (held and trained_to > trained_from):
        return None
    target = None
    if held and (from_update is None or trained_to > from_update):
        before = trained_to if from_update is None else from_update
        target, n = run_dir / f"{EVALUATIONS_BEFORE}_{before}", 1
        while target.exists():  # continued from the same update twice (resume=force after a stop)
            n += 1
            target = run_dir / f"{EVALUATIONS_BEFORE}_{before}_{n}"
        folder.rename(target)
        what = (
            f"evaluations made while the run trained, of weights before its end at update {before}"
            if from_update is None
            else f"evaluations of the weights before the run went on from update {from_update}"
        )
        print(f"note: {folder} held {what}: moved to {target}")
    marker.unlink(missing_ok=True)
    return target


def monitor_never_moved(csv_log: Path, monitor: str, best_path: str) -> dict | None:
    """Where the monitored score took one value at every validation (3 or more: an exact match stuck at 0, BLEU
    0 while the loss fell), it chose best.ckpt among equals and the final scores score those weights, which no
    line said: what results.json records of it (None where the score moved)."""
    from nmt.tasks.base import logged_values

    values = logged_values(csv_log, monitor)
    if len(values) < 3 or len(set(values)) > 1:
        return None
    return {"metric": monitor, "value": values[0], "validations": len(values), "best": Path(best_path).name}


def checkpoints_to_average(cfg: DictConfig, checkpoint_dir: Path) -> int:
    """How many epoch checkpoints the final scores average (0: best.ckpt alone)."""
    wanted = int(cfg.get("test_average_last") or 0)
    if wanted <= 1:
        return 0
    found = len(epoch_checkpoints(checkpoint_dir))
    if found < 2:
        print(f"test_average_last={wanted}: only {found} epoch checkpoint(s); testing best.ckpt alone")
        return 0
    return min(wanted, found)


def as_float(value) -> float | None:
    """A logged value (a tensor, a number or None) as a Python float."""
    if value is None:
        return None
    return float(value.item() if isinstance(value, torch.Tensor) else value)
