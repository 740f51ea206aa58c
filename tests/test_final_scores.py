"""The final scores after training: the validation set decoded exactly as the test is (the same
checkpoints, the same search), then the test; each switched on or off on its own."""

import json
import os
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import OmegaConf

from nmt.sweep.records import run_record
from nmt.tasks.base import Task
from nmt.tasks.translation import TranslationTask
from nmt.training.config import ConfigError, check_config
from nmt.training.stopping import SittingEarlyStopping
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, compose_train

pytestmark = pytest.mark.slow

# the search options beam search reads (sampling's temperature, top_k, top_p and seed are not)
READ_BY_BEAM = (
    "beam_size",
    "length_penalty",
    "max_len_a",
    "max_len_b",
    "early_stopping",
    "min_len",
    "no_repeat_ngram_size",
)


def test_both_splits_score_the_mean_of_the_last_epochs_with_the_run_search(tmp_path):
    run_dir = tmp_path / "run"
    results = train(
        compose_train(
            "trainer.max_epochs=3",
            "checkpoint.keep_last_epochs=2",
            "test_average_last=2",
            "decode.beam_size=3",
            "threads=1",
            f"run_dir={run_dir}",
        )
    )
    val, test = results["val_as_test"], results["test"]
    assert len(val["checkpoints"]) == 2 and val["checkpoints"] == test["checkpoints"]
    assert val["search"] == test["search"] and val["search"]["beam_size"] == 3  # decode.*, not validation.search
    assert Path(val["hypotheses"]).parent == run_dir / "eval" / "val_beam3_avg2"
    assert Path(test["hypotheses"]).parent == run_dir / "eval" / "test_beam3_avg2"
    written = json.loads((run_dir / "eval" / "val_beam3_avg2" / "metrics.json").read_text())
    assert written["bleu"] == val["bleu"] and written["split"] == "val"
    assert json.loads((run_dir / "results.json").read_text())["val_as_test"]["bleu"] == val["bleu"]
    record = run_record(run_dir, {"pos": "absolute"}, seed=1)
    metrics = record["metrics"]
    assert metrics["val_as_test_bleu"] == val["bleu"] and metrics["val_as_test_chrf"] == val["chrf"]
    # how the scores were made, for the sweep's report: the checkpoints, the search, sacreBLEU's signatures
    assert record["scoring"] == {
        "checkpoints": "the mean of 2 checkpoints",
        "search": "beam " + " ".join(f"{k}={v}" for k, v in test["search"].items() if k in READ_BY_BEAM),
        "bleu_signature": test["bleu_signature"],
        "chrf_signature": test["chrf_signature"],
    }
    assert record["scoring"]["search"].startswith("beam beam_size=3 length_penalty=1.0 max_len_a=")
    assert metrics["val_as_test_bleu_tok_lc"] == val["bleu_tok_lc"]
    # last.ckpt: a copy of the newest epoch checkpoint (the state serialised once an epoch), a file of its own
    folder = run_dir / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["best.ckpt", "epoch001.ckpt", "epoch002.ckpt", "last.ckpt"]
    last = folder / "last.ckpt"
    assert not last.is_symlink() and not os.path.samefile(last, folder / "epoch002.ckpt")
    assert last.read_bytes() == (folder / "epoch002.ckpt").read_bytes()


@pytest.mark.parametrize(
    ("switches", "expected"),
    [
        (["val_after_training=true", "test_after_training=false"], {"val_as_test"}),
        (["val_after_training=false", "test_after_training=true"], {"test"}),
        (
            ["trainer.limit_val_batches=0", "checkpoint.monitor=train_loss", "checkpoint.mode=min"],
            {"test"},
        ),  # not validated: not at the end
    ],
)
def test_each_final_score_is_switched_on_its_own(tmp_path, capsys, switches, expected):
    results = train(compose_train("trainer.max_epochs=1", "threads=1", *switches, f"run_dir={tmp_path / 'run'}"))
    assert {"val_as_test", "test"} & set(results) == expected
    skipped = "val_after_training: the validation set is not decoded at the end (trainer.limit_val_batches=0)"
    assert (skipped in capsys.readouterr().out) == ("trainer.limit_val_batches=0" in switches)


class LegacyTranslationTask(TranslationTask):
    """A task written before final_score existed: it scored the test set with ``test`` and ``test_tag``."""

    final_score = Task.final_score
    final_tag = Task.final_tag

    def test(self, loaded, cfg, out_dir, attention_maps=()):
        raise AssertionError("never called")


def test_a_task_without_final_scores_is_refused_before_training():
    """Otherwise it would train for hours, then fail where the final scores begin."""
    assert TranslationTask().scores_final_model() and not LegacyTranslationTask().scores_final_model()
    legacy = "task._target_=tests.test_final_scores.LegacyTranslationTask"
    with pytest.raises(ConfigError, match=r"val_after_training/test_after_training=true: task=translation does not"):
        check_config(compose_train(legacy))
    with pytest.raises(ConfigError, match=r"  test_after_training=true: .*formerly test and test_tag"):
        check_config(compose_train(legacy, "val_after_training=false"))
    check_config(compose_train(legacy, *NO_FINAL_SCORES))  # nothing to score: it may train


def test_mixed_precision_validation_decodes_as_the_final_score_does(tmp_path, monkeypatch):
    """Under bf16-mixed, validation's search runs outside the training's autocast, in the weights' own
    precision, as the final score (evaluate.py's decode) does: its greedy BLEU of the best epoch is the one
    the final score gives the same checkpoint."""
    import torch

    from nmt.tasks import translation

    under_autocast = []

    def recording(*args, **kwargs):
        under_autocast.append(torch.is_autocast_enabled("cpu"))
        return translation_decode(*args, **kwargs)

    translation_decode = translation.decode
    monkeypatch.setattr(translation, "decode", recording)
    results = train(
        compose_train(
            "trainer.precision=bf16-mixed",
            "trainer.max_epochs=3",
            "decode.strategy=greedy",
            "test_after_training=false",
            "threads=1",
            f"run_dir={tmp_path / 'run'}",
        )
    )
    assert under_autocast and not any(under_autocast)  # each validation batch, none under autocast
    assert results["val_as_test"]["search"]["strategy"] == "greedy"
    assert results["val_as_test"]["bleu"] == pytest.approx(results["best_val_bleu"], abs=0.01)


@pytest.mark.parametrize(
    ("limits", "ended_by"),
    [
        (["trainer.max_epochs=1"], "max_epochs"),
        (["trainer.max_epochs=50", "trainer.max_steps=3"], "max_steps"),
        # a rate too small to learn anything: validation BLEU never improves on the first
        (["trainer.max_epochs=50", "lr=1e-9", "validation.bleu_every_n_epochs=1"], "early stopping"),
        (["trainer.max_epochs=10000", "+trainer.max_time=00:00:00:03"], "max_time"),
        # the cap strikes inside the last epoch allowed: that epoch counts as done, yet max_epochs did not end it
        (["trainer.max_epochs=1", "data.train_size=120000", "+trainer.max_time=00:00:00:01"], "max_time"),
    ],
)
def test_results_say_what_ended_the_training(tmp_path, limits, ended_by):
    """A run cut short by a cap on its time says so: it is not trained to its end (a sweep's report warns)."""
    patience = ["early_stopping.patience=1"] if ended_by == "early stopping" else []
    results = train(compose_train(*limits, *patience, *NO_FINAL_SCORES, "threads=1", f"run_dir={tmp_path / 'r'}"))
    assert results["ended_by"] == ended_by
    assert json.loads((tmp_path / "r" / "results.json").read_text())["ended_by"] == ended_by


@pytest.mark.parametrize("after_warmup", [False, True])
def test_a_warmup_early_stopping_would_cut_is_waited_for_with_after_warmup(tmp_path, after_warmup):
    """A warm-up longer than the patience: its validations (BLEU unmoved: the rate has barely risen) stop the
    run in its second epoch, which a warning says; with after_warmup they do not count, and the run trains
    to its maximum."""
    overrides = ["optim=noam", "warmup=100000", "early_stopping.patience=1", "trainer.max_epochs=3"]
    overrides.append("validation.bleu_every_n_epochs=1")  # val_bleu, early stopping's metric, every epoch
    config = compose_train(*overrides, f"early_stopping.after_warmup={after_warmup}", *NO_FINAL_SCORES, "threads=1")
    config.run_dir = str(tmp_path / "r")
    if after_warmup:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            results = train(config)
        assert not [w for w in said if "warm-up" in str(w.message)]
    else:
        with pytest.warns(UserWarning, match="inside its warm-up of 100000 updates") as said:
            results = train(config)
        (warned,) = [w for w in said if "warm-up" in str(w.message)]
        assert "early_stopping.after_warmup=true" in str(warned.message)
    assert results["ended_by"] == ("max_epochs" if after_warmup else "early stopping")
    assert results["epochs"] == (3 if after_warmup else 2)


def test_after_warmup_skips_the_warmups_validations_but_not_a_score_that_is_not_finite():
    """Exact: validations at updates 1-5 against a warm-up of 3 and a patience of 1."""
    from types import SimpleNamespace

    import torch
    from lightning.pytorch.trainer.states import TrainerFn

    from nmt.training.stopping import SittingEarlyStopping

    def stopped_at(losses, after_warmup):
        stopping = SittingEarlyStopping(monitor="val_loss", mode="min", patience=1, warmup=3, after_warmup=after_warmup)
        strategy = SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision)
        trainer = SimpleNamespace(should_stop=False, state=SimpleNamespace(fn=TrainerFn.FITTING), strategy=strategy)
        trainer.sanity_checking = trainer.fast_dev_run = False
        for step, loss in enumerate(losses, 1):
            trainer.global_step, trainer.callback_metrics = step, {"val_loss": torch.tensor(loss)}
            trainer.current_epoch = step
            stopping.on_validation_end(trainer, None)
            if trainer.should_stop:
                return step, stopping.best_score.item()
        return None, stopping.best_score.item()

    losses = [5.0, 6.0, 7.0, 4.0, 4.5]
    with pytest.warns(UserWarning, match="at update 2, inside its warm-up of 3 updates"):
        assert stopped_at(losses, after_warmup=False) == (2, 5.0)  # inside the warm-up, said
    assert stopped_at(losses, after_warmup=True) == (5, 4.0)  # the best counted from update 3 on
    with warnings.catch_warnings(record=True) as said:  # a diverged run stops in the warm-up too, unwarned:
        warnings.simplefilter("always")  # counting from the warm-up's end would not have kept it going
        assert stopped_at([5.0, float("nan")], after_warmup=True)[0] == 2
        assert stopped_at([5.0, float("nan")], after_warmup=False)[0] == 2
    assert not [w for w in said if "warm-up" in str(w.message)]


def test_a_resumed_sitting_starts_without_the_early_stop_decision_its_checkpoint_kept():
    """The decision is restored from a checkpoint with the patience count, but the stop it caused is not:
    the resumed sitting trains on, and what ends it is its own. Checkpoints of Lightning's EarlyStopping
    restore into the project's (the same state key)."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import EarlyStopping

    from nmt.training.stopping import SittingEarlyStopping

    ours = SittingEarlyStopping(monitor="val_loss", mode="min", patience=3)
    assert ours.state_key == EarlyStopping(monitor="val_loss", mode="min").state_key
    decided = EarlyStopping(monitor="val_loss", mode="min", patience=3)
    decided.stopped_epoch, decided.wait_count = 7, 3
    decided.stopping_reason = type(decided.stopping_reason)["PATIENCE_EXHAUSTED"]
    ours.load_state_dict(decided.state_dict())
    ours.on_train_start(SimpleNamespace(), SimpleNamespace())
    assert ours.stopping_reason.name == "NOT_STOPPED" and ours.stopped_epoch == 0
    assert ours.wait_count == 3  # the patience already spent is kept


def test_a_run_of_zero_updates_says_its_scores_are_of_the_initial_weights(tmp_path, capsys):
    results = train(compose_train("trainer.max_epochs=0", "val_after_training=false", f"run_dir={tmp_path / 'run'}"))
    assert results["steps"] == 0 and results["test"]["bleu"] >= 0
    assert "Trained 0 updates (ended by max_epochs): the scores below are those of the initial weights" in (
        capsys.readouterr().out
    )


def test_after_warmup_counts_the_validation_at_the_warmups_last_update():
    """warmup=3: updates 0, 1, 2 have rates 1/3, 2/3, 1 (warmup_decay), so after 3 updates the rate has
    peaked and the validation at global_step 3 counts (the best is set there)."""
    stopping = SittingEarlyStopping(monitor="val_loss", mode="min", patience=1, warmup=3, after_warmup=True)
    strategy = SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision)
    trainer = SimpleNamespace(should_stop=False, state=SimpleNamespace(fn=TrainerFn.FITTING), strategy=strategy)
    trainer.sanity_checking = trainer.fast_dev_run = False
    stopped = None
    for step, loss in enumerate([5.0, 6.0, 4.0, 9.0], 1):
        trainer.global_step, trainer.current_epoch = step, step
        trainer.callback_metrics = {"val_loss": torch.tensor(loss)}
        stopping.on_validation_end(trainer, None)
        if trainer.should_stop:
            stopped = step
            break
    assert (stopped, stopping.best_score.item()) == (4, 4.0)


def test_average_last_takes_the_number_asked_not_every_epoch_checkpoint(tmp_path):
    """test_average_last=2 with 3 epoch checkpoints averages 2 (min(wanted, found)); test_average_last=1 is
    best.ckpt alone (0), not the last epoch (kills final.py `return found` and `wanted < 1`)."""
    from nmt.training.final import checkpoints_to_average

    for epoch in range(3):
        (tmp_path / f"epoch{epoch:03d}.ckpt").write_bytes(b"")
    assert checkpoints_to_average(OmegaConf.create({"test_average_last": 2}), tmp_path) == 2
    assert checkpoints_to_average(OmegaConf.create({"test_average_last": 1}), tmp_path) == 0


@pytest.mark.parametrize(
    ("mode", "final", "replaces"), [("max", 31.0, True), ("max", 29.0, False), ("min", 2.0, True), ("min", 4.0, False)]
)
def test_the_final_weights_become_best_ckpt_only_where_they_score_better(tmp_path, mode, final, replaces):
    """Updates after the last validation are validated at the end, and kept as best.ckpt only where their
    monitored score beats the best so far (30 for a score to maximise, 3 for one to minimise), in the
    checkpoint's own direction: a reversed comparison kept the worse weights as the run's best."""
    from nmt.training.final import validate_final_weights

    best = SimpleNamespace(best_model_score=torch.tensor(30.0 if mode == "max" else 3.0), best_model_path="e.ckpt")
    saved = []
    trainer = SimpleNamespace(checkpoint_callbacks=[best], global_step=10, limit_val_batches=1.0, is_global_zero=True)
    trainer.callback_metrics = {}
    trainer.validate = lambda *a, **k: trainer.callback_metrics.update(val_x=torch.tensor(final), step=10)
    trainer.save_checkpoint = lambda path, weights_only: saved.append(path)
    module = SimpleNamespace(task=SimpleNamespace(decoded_metrics=()), last_validated_step=5, last_decoded_step=5)
    cfg = OmegaConf.create({"checkpoint": {"monitor": "val_x", "mode": mode}})
    metrics = validate_final_weights(cfg, trainer, module, SimpleNamespace(trainer=None), tmp_path)
    assert metrics == {"val_x": final}  # the step it was logged at is no measure of the weights
    assert saved == ([tmp_path / "best.ckpt"] if replaces else [])
    assert best.best_model_path == (str(tmp_path / "best.ckpt") if replaces else "e.ckpt")
    assert float(best.best_model_score) == (final if replaces else 30.0 if mode == "max" else 3.0)
