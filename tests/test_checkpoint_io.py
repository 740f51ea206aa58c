import math

import torch


def test_epoch_checkpoints_are_ordered_by_their_epoch_past_three_digits(tmp_path):
    """Sorted by name, epoch1000.ckpt came before epoch999.ckpt: average_last took the wrong files."""
    from nmt.inference.checkpoint import epoch_checkpoints

    for epoch in (998, 999, 1000, 1001):
        (tmp_path / f"epoch{epoch:03d}.ckpt").write_bytes(b"")
    assert [p.name for p in epoch_checkpoints(tmp_path)] == [
        "epoch998.ckpt", "epoch999.ckpt", "epoch1000.ckpt", "epoch1001.ckpt"
    ]  # fmt: skip


def test_step_checkpoints_added_removed_or_reset_on_resume_leave_no_callback_state_unmatched(tmp_path, train_config):
    """The step checkpointer's state key held its interval (Lightning's ModelCheckpoint key): a run resumed
    with another checkpoint.every_n_train_steps, or with none, warned that the checkpoint held a callback the
    run lacked. Its key is now one key; a checkpoint saved under Lightning's key is read under it."""
    import torch

    from nmt.tasks import build_task
    from nmt.training.checkpoint_io import STEP_CHECKPOINT_KEY, AtomicCheckpointIO, best_checkpoint_key
    from nmt.training.trainer import _callbacks

    def keys(steps: int) -> set[str]:
        cfg = train_config(f"checkpoint.every_n_train_steps={steps}")
        return {c.state_key for c in _callbacks(cfg, tmp_path, build_task(cfg.task))}

    assert keys(4) == keys(7) == keys(0)
    assert STEP_CHECKPOINT_KEY in keys(0)

    # Lightning's key: the class's name and its settings
    lightnings = "FolderCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': %s, 'every_n_epochs': 0, "
    epochs = "EpochCheckpoints{'monitor': 'step', 'mode': 'max', 'every_n_train_steps': 0, 'every_n_epochs': 1, "
    saved = {
        (lightnings % 4) + "'train_time_interval': None}": {"last_model_path": "last.ckpt"},
        epochs + "'train_time_interval': None}": {"best_model_score": 3},
    }
    best = "FolderCheckpoint{'monitor': 'val_bleu', 'mode': 'max', 'every_n_train_steps': 0, 'every_n_epochs': 2, "
    saved[best + "'train_time_interval': None}"] = {"best_model_score": 31.5}
    torch.save({"callbacks": saved}, tmp_path / "old.ckpt")
    read = AtomicCheckpointIO().load_checkpoint(tmp_path / "old.ckpt", weights_only=True)["callbacks"]
    assert read == {
        STEP_CHECKPOINT_KEY: {"last_model_path": "last.ckpt"},
        best_checkpoint_key("val_bleu", "max"): {"best_model_score": 31.5},
        **{k: v for k, v in saved.items() if "step'" in k},  # the epoch checkpoints keep Lightning's key
    }


def test_the_best_checkpoints_state_follows_its_score_not_how_often_it_is_saved(tmp_path, train_config):
    """validation.bleu_every_n_epochs set the best checkpoint's every_n_epochs, which Lightning's state key
    holds: a run resumed under resume=force with another interval lost its best score (the next validation
    replaced best.ckpt whatever it scored). Another monitored score is another state."""
    from nmt.tasks import build_task
    from nmt.training.checkpoints import BestCheckpoint
    from nmt.training.trainer import _callbacks

    def best_key(*overrides: str) -> str:
        cfg = train_config("checkpoint.monitor=val_bleu", "checkpoint.mode=max", *overrides)
        callbacks = _callbacks(cfg, tmp_path, build_task(cfg.task))
        return next(c for c in callbacks if isinstance(c, BestCheckpoint)).state_key

    assert best_key("validation.bleu_every_n_epochs=1") == best_key("validation.bleu_every_n_epochs=3")
    assert best_key() != best_key("checkpoint.monitor=val_loss", "checkpoint.mode=min")


def test_a_nan_python_float_in_the_optimizer_state_is_named():
    """A NaN learning rate (a Python float in param_groups) is non-finite by math.isfinite; the check must name it
    (kills checkpoint_io.py dropping the float branch)."""
    from nmt.training.checkpoint_io import non_finite_tensors

    checkpoint = {"state_dict": {"w": torch.ones(2)}, "optimizer_states": [{"param_groups": [{"lr": math.nan}]}]}
    assert non_finite_tensors(checkpoint) == ["optimizer_states.0.param_groups.0.lr"]
