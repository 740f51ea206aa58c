"""Killed and signalled runs resume exactly; DDP trains; non-finite losses are skipped, then stop the run."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from nmt.data.build import build_datamodule
from nmt.data.tokenizer import PAD_ID
from nmt.models.build import build_model
from nmt.tasks.translation import TranslationTask
from nmt.training.lightning_data import lightning_data
from nmt.training.module import TaskModule
from nmt.training.timing import WallClock
from nmt.utils.instantiate import instantiate

from .conftest import NO_FINAL_SCORES, ROOT, compose_train, steps_per_epoch, tiny_overrides

pytestmark = pytest.mark.slow

RESUMABLE = [
    *[o for o in tiny_overrides() if not o.startswith(("data.train_size", "trainer.max_epochs"))],
    "data.train_size=1500",
    "data.max_tokens=300",
    "trainer.max_epochs=2",
    "trainer.deterministic=true",
    "checkpoint.every_n_train_steps=4",
    "validation.bleu_every_n_epochs=1",
    *NO_FINAL_SCORES,
    "threads=1",
    "trainer.log_every_n_steps=2",  # rows before the interruption, so that the test sees them kept
]


def train_command(run_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "train.py"), *RESUMABLE, f"run_dir={run_dir}", *extra]


def run_to_end(run_dir: Path, *extra: str) -> dict:
    # from the run's parent folder: Hydra's dated record of each command goes there, not into the checkout
    command = train_command(run_dir, *extra)
    result = subprocess.run(command, capture_output=True, text=True, cwd=run_dir.parent, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    # Lightning's advice to sync values that are summed over the processes already (ten lines per DDP run)
    assert "sync_dist=True" not in result.stderr + result.stdout, result.stderr[-3000:]
    # a callback state of the checkpoint that no callback of the resumed run takes (step checkpoints added,
    # removed or reset were one)
    assert "Please add the following callbacks" not in result.stderr + result.stdout, result.stderr[-3000:]
    return json.loads((run_dir / "results.json").read_text())


def logged_rows(run_dir: Path) -> list[dict]:
    try:
        with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
            return list(csv.DictReader(handle))
    except FileNotFoundError:
        return []


def after_first_step_checkpoint(run_dir: Path) -> bool:
    """The first mid-epoch checkpoint (step 4) is written, and a row after it (step 5) that the resumed run
    must drop and log again. Not earlier: the row of the step that a checkpoint saves is logged just after
    the checkpoint is written (Lightning logs a step's values after its on_train_batch_end hooks), so a
    SIGKILL landing in that millisecond loses the row, and no checkpoint holds its values."""
    steps = [int(row["step"]) for row in logged_rows(run_dir) if row.get("step")]
    return (run_dir / "checkpoints" / "last.ckpt").exists() and max(steps, default=0) >= 5


def in_the_second_epoch(run_dir: Path) -> bool:
    """The first epoch's checkpoint is written and the second epoch has logged a row."""
    epochs = [float(row["epoch"]) for row in logged_rows(run_dir) if row.get("epoch")]
    return (run_dir / "checkpoints" / "epoch000.ckpt").exists() and max(epochs, default=0) >= 1


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(run_dir: Path, signum: int, when=after_first_step_checkpoint, *extra: str) -> subprocess.CompletedProcess:
    """Start a run and send it ``signum`` as soon as ``when(run_dir)`` holds."""
    # a shell that starts the tests in the background makes them ignore SIGINT, and so their children: a
    # terminal's Ctrl-C reaches a program that does not ignore it
    process = subprocess.Popen(train_command(run_dir, *extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=run_dir.parent, preexec_fn=interruptible)  # fmt: skip
    deadline = time.time() + 300
    while process.poll() is None and time.time() < deadline and not when(run_dir):
        time.sleep(0.01)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return {**run_to_end(run_dir), "run_dir": run_dir}


def logged_curves(run_dir: Path) -> list[tuple[int, str, float]]:
    """(step, metric, value) of every training and validation value in the run's CSV log, in log order."""
    # the throughput monitor's totals count from the run's start, not from each sitting's
    totals = ("train/batches", "train/samples", "train/lengths")
    keys = ("epoch", "train_loss", "lr", "val_loss", "val_acc", "val_bleu", "train_tokens", *totals)
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return [(int(row["step"]), k, float(row[k])) for row in csv.DictReader(handle) for k in keys if row.get(k)]


def assert_same_training(resumed: dict, reference: dict, run_dir: Path, lost: tuple = ()) -> None:
    """``lost``: (step, key) of the reference's log that the interrupted run cannot have (the last row of
    each)."""
    assert (resumed["steps"], resumed["epochs"]) == (reference["steps"], reference["epochs"])
    for key in ("val_loss", "val_acc", "val_bleu", "train_loss"):
        assert resumed["final_metrics"][key] == pytest.approx(reference["final_metrics"][key], rel=1e-5), key
    # the log of the interrupted run holds the whole curve once: rows of the first sitting kept, rows
    # logged after its last checkpoint (redone on resume) not repeated
    curve = logged_curves(run_dir)
    reference_curve = logged_curves(reference["run_dir"])
    for step_key in lost:
        reference_curve.pop(max(i for i, row in enumerate(reference_curve) if row[:2] == step_key))
    assert [(step, key) for step, key, _ in curve] == [(step, key) for step, key, _ in reference_curve]
    assert [value for *_, value in curve] == pytest.approx([value for *_, value in reference_curve], rel=1e-5)


def test_sigkill_mid_epoch_then_same_command_resumes_exactly(uninterrupted, tmp_path):
    killed = interrupt(tmp_path, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    step = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert 0 < step < uninterrupted["steps"] / 2, "not killed in the first epoch"
    clocks = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    first_sitting = next(state["elapsed"] for name, state in clocks.items() if name.startswith("WallClock"))
    resumed = run_to_end(tmp_path)
    assert_same_training(resumed, uninterrupted, tmp_path)  # train_tokens of the resumed epoch included
    # the run's cost counts both sittings: the killed one's training time came back with its checkpoint
    assert resumed["wall_time_s"] > first_sitting > 0


def test_sigkill_in_the_second_epoch_resumes_from_the_first_epochs_checkpoint(uninterrupted, tmp_path):
    no_step_checkpoints = "checkpoint.every_n_train_steps=0"
    killed = interrupt(tmp_path, signal.SIGKILL, in_the_second_epoch, no_step_checkpoints)
    assert killed.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["epoch"] == 0 and 0 < saved["global_step"] < uninterrupted["steps"]  # the end of the first epoch
    # resumed with step checkpoints on (the uninterrupted run's): adding them to a run is no other setting
    assert_same_training(run_to_end(tmp_path), uninterrupted, tmp_path)


class SignalAt(L.Callback):
    """Sends this process SIGTERM once, the first time ``hook`` runs in epoch ``epoch`` (at validation
    batch ``batch``): a preemption arriving at an exact point of the loop."""

    def __init__(self, hook: str, epoch: int, batch: int | None = None):
        self.hook, self.epoch, self.batch, self.sent = hook, epoch, batch, False

    def _signal(self, hook: str, trainer: L.Trainer, batch_idx: int | None = None) -> None:
        if hook != self.hook or self.sent or trainer.sanity_checking or trainer.current_epoch != self.epoch:
            return
        if self.batch is None or batch_idx == self.batch:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._signal("validation_batch", trainer, batch_idx)

    def on_validation_end(self, trainer, pl_module):
        self._signal("validation_end", trainer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._signal("train_epoch_start", trainer)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == trainer.num_training_batches - 1:
            self._signal("last_train_batch", trainer)
        self._signal("train_batch", trainer, batch_idx)


# several validation batches, so that a signal can arrive in the middle of validation; no step checkpoints,
# so that the run resumes from the point the signal stopped it; a third epoch, trained after the resume
AT_EPOCH_ENDS = [
    *[o for o in RESUMABLE if not o.startswith(("trainer.max_epochs", "data.train_size"))],
    "trainer.max_epochs=3",
    "data.train_size=750",
    "data.eval_max_tokens=300",
    "checkpoint.every_n_train_steps=0",
]
# a run bounded by updates (as the recipes are) or by epochs alone: Lightning restores the two differently
BOUNDS = {"steps": ("trainer.max_steps=10000",), "epochs": ()}


class BatchOrder(L.Callback):
    """Records the example indices of every training batch, by epoch."""

    def __init__(self):
        self.epochs: dict[int, list[list[int]]] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.epochs.setdefault(trainer.current_epoch, []).append(batch["index"].tolist())

    def then(self, resumed: "BatchOrder") -> dict[int, list[list[int]]]:
        """The batches of two sittings of one run, by epoch."""
        epochs = {epoch: list(batches) for epoch, batches in self.epochs.items()}
        for epoch, batches in resumed.epochs.items():
            epochs.setdefault(epoch, []).extend(batches)
        return epochs


def train_in_process(run_dir: Path, *callbacks: L.Callback, overrides: tuple[str, ...] = ()) -> dict:
    from nmt.training import train as training
    from nmt.training import trainer

    cfg = compose_train(*AT_EPOCH_ENDS, *overrides, f"run_dir={run_dir}", tiny=False)
    threads = torch.get_num_threads()
    built = trainer._callbacks
    try:
        trainer._callbacks = lambda *args: [*built(*args), *callbacks]
        return {**training.train(cfg), "run_dir": run_dir}
    finally:
        trainer._callbacks = built
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def uninterrupted_in_process(tmp_path_factory):
    """The uninterrupted run of each set of overrides, with its batches (trained once per module)."""
    runs = {}

    def run(overrides: tuple[str, ...]) -> tuple[dict, BatchOrder]:
        if overrides not in runs:
            order = BatchOrder()
            runs[overrides] = (
                train_in_process(tmp_path_factory.mktemp("uninterrupted"), order, overrides=overrides),
                order,
            )
        return runs[overrides]

    return run


@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize(
    "point",
    [
        ("validation_batch", 0, 1),  # Lightning alone would skip an epoch on resume
        ("last_train_batch", 0, None),  # Lightning alone would stop in the middle of validation
        ("validation_end", 0, None),
        ("train_epoch_start", 1, None),
    ],
    ids=["mid-validation", "last-batch", "after-validation", "next-epoch-start"],
)
def test_sigterm_around_the_end_of_an_epoch_resumes_exactly(uninterrupted_in_process, tmp_path, point, bound):
    signal_at = SignalAt(*point)
    reference, reference_order = uninterrupted_in_process(BOUNDS[bound])
    first, second = BatchOrder(), BatchOrder()
    with pytest.raises(SystemExit) as stopped:
        train_in_process(tmp_path, signal_at, first, overrides=BOUNDS[bound])
    assert stopped.value.code == 143 and signal_at.sent
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] < reference["steps"]
    assert_same_training(train_in_process(tmp_path, second, overrides=BOUNDS[bound]), reference, tmp_path)
    assert first.then(second) == reference_order.epochs  # the same batches in the same epochs


class CrashAt(L.Callback):
    """Raises (as a crash or SIGKILL would end the process: nothing saved) at a batch of an epoch."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            raise RuntimeError("crashed")


@pytest.mark.parametrize("bound", BOUNDS)
def test_a_crash_resumes_from_the_last_epochs_checkpoint_exactly(uninterrupted_in_process, tmp_path, bound):
    """The epoch checkpoint, saved at the epoch's end, resumes at the next epoch's start with the same batches
    and the same log: a run bounded by max_steps logged each later row one step late (and an empty epoch
    end) before the saved state said where the epoch ended."""
    reference, reference_order = uninterrupted_in_process(BOUNDS[bound])
    first, second = BatchOrder(), BatchOrder()
    with pytest.raises(RuntimeError, match="crashed"):
        train_in_process(tmp_path, CrashAt(1, 3), first, overrides=BOUNDS[bound])
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0
    assert_same_training(train_in_process(tmp_path, second, overrides=BOUNDS[bound]), reference, tmp_path)
    assert {0: first.epochs[0], **second.epochs} == reference_order.epochs  # the crashed epoch redone whole


@pytest.mark.parametrize("stop", ["crash", "sigterm"])
def test_a_run_without_validation_resumes_from_an_epochs_end_with_the_same_log(tmp_path, stop):
    """max_steps with no validation (limit_val_batches=0): a restarted Lightning counts no extra logging step
    where no validation ran at the epoch's end, so the saved state keeps its count; the log, the steps and
    what ended the run are the uninterrupted run's."""
    overrides = (*BOUNDS["steps"], "trainer.limit_val_batches=0")
    reference = train_in_process(tmp_path / "reference", overrides=overrides)
    run = tmp_path / "stopped"
    run.mkdir()
    stopper = CrashAt(1, 3) if stop == "crash" else SignalAt("train_epoch_start", 1)
    with pytest.raises(RuntimeError if stop == "crash" else SystemExit):
        train_in_process(run, stopper, overrides=overrides)
    resumed = train_in_process(run, overrides=overrides)
    assert (resumed["steps"], resumed["ended_by"]) == (reference["steps"], "max_epochs")
    assert reference["ended_by"] == "max_epochs"
    assert [(step, key) for step, key, _ in logged_curves(run)] == [
        (step, key) for step, key, _ in logged_curves(reference["run_dir"])
    ]


def test_a_run_writing_checkpoints_behind_training_resumes_exactly(uninterrupted_in_process, tmp_path):
    """``checkpoint.write_behind=true`` (a GPU's default; here on the CPU): the epoch checkpoints and the
    signal's last.ckpt written by the worker thread are the state at each save, all on disk before the
    process exits, and the run resumes as the one writing them in the foreground trains uninterrupted."""
    behind = (*BOUNDS["steps"], "checkpoint.write_behind=true")
    signal_at = SignalAt("train_epoch_start", 1)
    reference, reference_order = uninterrupted_in_process(BOUNDS["steps"])
    first, second = BatchOrder(), BatchOrder()
    with pytest.raises(SystemExit) as stopped:
        train_in_process(tmp_path, signal_at, first, overrides=behind)
    assert stopped.value.code == 143 and signal_at.sent
    # the first epoch's checkpoint is the state at its save, as the foreground writer's of the reference
    saved = torch.load(tmp_path / "checkpoints" / "epoch000.ckpt", weights_only=True)
    expected = torch.load(reference["run_dir"] / "checkpoints" / "epoch000.ckpt", weights_only=True)
    assert saved["global_step"] == expected["global_step"]
    torch.testing.assert_close(saved["state_dict"], expected["state_dict"], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(saved["optimizer_states"], expected["optimizer_states"], rtol=1e-5, atol=1e-7)
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] < reference["steps"]
    assert_same_training(train_in_process(tmp_path, second, overrides=behind), reference, tmp_path)
    assert first.then(second) == reference_order.epochs


class TrackedAtStart(L.Callback):
    """What the checkpoint callbacks hold once a sitting's state is restored."""

    def on_train_start(self, trainer, pl_module):
        best, epochs = trainer.checkpoint_callbacks[:2]
        self.best = (best.best_model_score, best.best_model_path)
        self.kept = dict(epochs.best_k_models)


def test_a_run_resumed_in_a_moved_folder_keeps_its_best_score_and_its_epoch_checkpoints(
    uninterrupted_in_process, tmp_path
):
    """Lightning forgets a checkpoint callback's best score and kept files when the folder's path changed:
    the next validation would replace best.ckpt by whatever it scored, and the epoch checkpoints of the
    first sitting would never be deleted. A run folder moved between two sittings keeps both."""
    import shutil
    import warnings

    overrides = (*BOUNDS["steps"], "checkpoint.keep_last_epochs=1")
    reference, _ = uninterrupted_in_process(overrides)
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    with pytest.raises(SystemExit):
        train_in_process(before, SignalAt("train_epoch_start", 2), overrides=overrides)
    saved = torch.load(before / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    best_saved = next(state for name, state in saved.items() if name.startswith("BestCheckpoint"))
    shutil.move(before, after)
    tracked = TrackedAtStart()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = train_in_process(after, tracked, overrides=overrides)
    assert not [w for w in caught if "dirpath has changed" in str(w.message)]
    assert tracked.best == (best_saved["best_model_score"], str(after / "checkpoints" / "best.ckpt"))
    assert list(tracked.kept) == [str(after / "checkpoints" / "epoch001.ckpt")]
    assert resumed["best_val_bleu"] == pytest.approx(reference["best_val_bleu"], rel=1e-6)
    assert sorted(p.name for p in (after / "checkpoints").glob("epoch*.ckpt")) == ["epoch002.ckpt"]


def test_sigterm_in_a_validation_in_the_middle_of_an_epoch_resumes_exactly(uninterrupted_in_process, tmp_path):
    """Validation every 50 updates, across epochs (as the language model's recipe): the run stops after the
    next update, and its log goes on at the right steps."""
    overrides = ("trainer.val_check_interval=50", "trainer.check_val_every_n_epoch=null", *BOUNDS["steps"])
    reference, reference_order = uninterrupted_in_process(overrides)
    first, second, signal_at = BatchOrder(), BatchOrder(), SignalAt("validation_batch", 0, 1)
    with pytest.raises(SystemExit):
        train_in_process(tmp_path, signal_at, first, overrides=overrides)
    assert signal_at.sent and len(first.epochs[0]) == 51
    assert_same_training(train_in_process(tmp_path, second, overrides=overrides), reference, tmp_path)
    assert first.then(second) == reference_order.epochs


def test_sigterm_in_the_middle_of_an_accumulated_update_resumes_exactly(uninterrupted_in_process, tmp_path):
    """Two batches an update: a signal in the first batch of an update takes effect after the second."""
    overrides = ("trainer.accumulate_grad_batches=2", *BOUNDS["steps"])
    reference, reference_order = uninterrupted_in_process(overrides)
    first, second, signal_at = BatchOrder(), BatchOrder(), SignalAt("train_batch", 0, 10)
    with pytest.raises(SystemExit):
        train_in_process(tmp_path, signal_at, first, overrides=overrides)
    assert signal_at.sent and len(first.epochs[0]) == 12
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 6
    assert_same_training(train_in_process(tmp_path, second, overrides=overrides), reference, tmp_path)
    assert first.then(second) == reference_order.epochs


def test_a_signal_in_the_validation_where_early_stopping_ends_the_run_lets_it_end(
    uninterrupted_in_process, tmp_path, capsys
):
    """Early stopping's decision is not in a checkpoint: a run saved there would train on when resumed."""
    # a rate too small to learn anything: validation BLEU never improves, and the second validation stops the run
    overrides = ("lr=1e-9", "validation.bleu_every_n_epochs=1", "early_stopping.patience=1")
    reference, _ = uninterrupted_in_process(overrides)
    assert reference["epochs"] == 2, "early stopping did not end the reference run after its second epoch"
    signal_at = SignalAt("validation_batch", 1, 1)
    result = train_in_process(tmp_path, signal_at, overrides=overrides)
    assert signal_at.sent and "SIGTERM arrived as training ended" in capsys.readouterr().out
    assert_same_training(result, reference, tmp_path)


class KilledAt(BaseException):
    """Stands for a kill: no signal handler runs, nothing is saved."""


class KillAtEpochEnd(L.Callback):
    """Kills the run at the end of epoch ``epoch``'s training, before that epoch's checkpoint is written
    (Lightning runs checkpoint callbacks after the others)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == self.epoch:
            raise KilledAt


class KillInValidation(L.Callback):
    """Kills the run in epoch ``epoch``'s validation."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_validation_batch_start(self, trainer, *args):
        if not trainer.sanity_checking and trainer.current_epoch == self.epoch:
            raise KilledAt


def test_a_kill_after_a_step_checkpoint_on_an_epochs_last_batch_resumes_exactly(uninterrupted_in_process, tmp_path):
    """last.ckpt then holds the epoch's last batch, with no validation at the epoch's end (validation every
    second epoch), and no epoch checkpoint written there: the resumed run starts the next epoch whole,
    neither an empty epoch nor a repeated one."""
    probe = compose_train(*AT_EPOCH_ENDS, tiny=False)
    overrides = ("trainer.check_val_every_n_epoch=2", f"checkpoint.every_n_train_steps={steps_per_epoch(probe)}")
    reference, reference_order = uninterrupted_in_process(overrides)
    first, second = BatchOrder(), BatchOrder()
    with pytest.raises(KilledAt):
        train_in_process(tmp_path, KillAtEpochEnd(0), first, overrides=overrides)
    epoch_end = len(first.epochs[0])
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == epoch_end
    # Lightning does not rerun the end of an epoch whose last batch a checkpoint holds: the killed epoch's
    # end-of-epoch row (its token count) is lost, the training is not (that end has no validation)
    lost = ((epoch_end - 1, "epoch"), (epoch_end - 1, "train_tokens"))
    assert_same_training(train_in_process(tmp_path, second, overrides=overrides), reference, tmp_path, lost)
    assert first.then(second) == reference_order.epochs


@pytest.mark.parametrize(
    ("validate_every", "kill"),
    [(1, KillAtEpochEnd(0)), (1, KillInValidation(0)), (2, KillInValidation(1)), (None, KillInValidation(0))],
    ids=["epoch-end", "validation", "validation-every-second-epoch", "validation-every-epochs-updates"],
)
def test_a_kill_where_a_step_checkpoint_fell_on_an_epochs_last_batch_resumes_exactly(
    uninterrupted_in_process, tmp_path, validate_every, kill
):
    """A step checkpoint due on the last batch of an epoch whose end writes last.ckpt is not written: Lightning
    resumed it in the next epoch, never running the end of the epoch it held, so a kill at that epoch's end,
    or in its validation, lost the validation, the epoch checkpoint and the end-of-epoch row, and the run
    trained on differently. The run resumes from the checkpoint before, exactly."""
    epoch = steps_per_epoch(compose_train(*AT_EPOCH_ENDS, tiny=False))
    every = next(epoch // k for k in range(2, epoch) if epoch % k == 0)  # due mid-epoch and on its last batch
    overrides = (f"trainer.check_val_every_n_epoch={validate_every}", f"checkpoint.every_n_train_steps={every}")
    if validate_every is None:  # validation every so many updates, here an epoch's: on each last batch
        overrides = ("trainer.check_val_every_n_epoch=null", f"trainer.val_check_interval={epoch}", overrides[1])
    reference, reference_order = uninterrupted_in_process(overrides)
    first, second = BatchOrder(), BatchOrder()
    with pytest.raises(KilledAt):
        train_in_process(tmp_path, kill, first, overrides=overrides)
    killed_in = kill.epoch + 1  # epochs begun
    assert sum(map(len, first.epochs.values())) == killed_in * epoch
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == (
        killed_in * epoch - every
    )
    assert_same_training(train_in_process(tmp_path, second, overrides=overrides), reference, tmp_path)


def test_each_epoch_draws_its_own_batch_order(uninterrupted_in_process, tmp_path):
    """Lightning sets the epoch of a loader's sampler, not of a batch sampler: without the loader's own
    call every epoch would repeat the first epoch's order."""
    _, order = uninterrupted_in_process(())
    assert set(order.epochs) == {0, 1, 2}
    first, second = order.epochs[0], order.epochs[1]
    assert first != second and sorted(sum(first, [])) == sorted(sum(second, []))  # every pair once, reshuffled
    config = compose_train(*AT_EPOCH_ENDS, f"run_dir={tmp_path}", tiny=False)
    datamodule = build_datamodule(config.data, config.cache_dir, config.seed)
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()  # not attached to a trainer: the sampler as configured
    for epoch in (0, 1, 2):
        loader.batch_sampler.set_epoch(epoch)
        assert [batch["index"].tolist() for batch in loader] == order.epochs[epoch]


@pytest.mark.parametrize(
    ("signum", "code"),
    [(signal.SIGTERM, 143), (signal.SIGUSR1, 143), (signal.SIGINT, 130)],
    ids=["TERM", "USR1", "INT"],
)
def test_preemption_signal_or_ctrl_c_saves_and_the_run_resumes(uninterrupted, tmp_path, signum, code):
    stopped = interrupt(tmp_path, signum)
    assert stopped.returncode == code, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    assert f"Stopped by {signal.Signals(signum).name}" in stopped.stdout
    assert "Run the same command again" in stopped.stdout and "Traceback" not in stopped.stderr
    assert_same_training(run_to_end(tmp_path), uninterrupted, tmp_path)


# optim=noam: its peak scales with this test's d_model 32 (the toy recipe's AdamW rate is fitted to 64)
DDP_COMMON = ["trainer.max_epochs=4", "data.train_size=1500", *NO_FINAL_SCORES,
              "validation.bleu_every_n_epochs=4", "optim=noam"]  # fmt: skip
# two processes, each with half the token budget: the same examples per optimiser step as one with 1500
DDP = [*DDP_COMMON, "trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu", "data.max_tokens=750",
       "trainer.enable_progress_bar=false", "trainer.enable_model_summary=false"]  # fmt: skip


def test_lightning_s_advice_to_sync_is_silenced_only_for_values_summed_or_placed_already():
    import warnings

    from nmt.training.trainer import _quiet_lightning

    names = ("val_loss", "val_bleu", "train_tokens", "wall_time_s", "step", "epoch", "final_weights", "my_value")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _quiet_lightning()
        for name in names:
            warnings.warn(
                f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging",
                UserWarning,
                stacklevel=1,
            )
    assert [str(w.message).split("'")[1] for w in seen] == ["my_value"]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp")
    return {**run_to_end(run_dir, *DDP), "run_dir": run_dir}


def process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (Z: ended, not yet reaped), None when it has gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return None


def started_by(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` and which run as the second device's (Lightning's launcher
    gives them LOCAL_RANK=1): not a short-lived helper, such as git asked for the code's version, which a
    first look could catch (its command line, before it execs, the parent's) and a second not find."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rpartition(")")[2].split()[:2]
            environment = b"\0" + (stat.parent / "environ").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if state != "Z" and int(parent) == pid and b"\0LOCAL_RANK=1\0" in environment:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.fresh_processes  # reads the children of the process it started
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from /proc")
def test_the_other_processes_of_a_ddp_run_die_with_its_first(tmp_path):
    """A first process killed outright (SIGKILL, the out-of-memory killer) while the process it had started
    for the second device was starting left that one waiting for it, 30 minutes. (Once the second has joined
    the process group, the group's broken connection ends it.)"""
    log = tmp_path / "log"
    with open(log, "w") as out:
        first = subprocess.Popen(train_command(tmp_path / "run", *DDP), stdout=out, stderr=out, cwd=tmp_path)
    deadline = time.time() + 300
    while not started_by(first.pid) and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    second = started_by(first.pid)
    assert len(second) == 1, f"the run did not start its second process: {log.read_text()[-3000:]}"
    first.kill()
    first.wait()
    deadline = time.time() + 60
    while process_state(second[0]) not in (None, "Z") and time.time() < deadline:
        time.sleep(0.1)
    assert process_state(second[0]) in (None, "Z")


def test_ddp_on_two_cpu_processes_trains_like_one(ddp_run, tmp_path):
    single = run_to_end(tmp_path / "single", *DDP_COMMON, "data.max_tokens=1500")
    for result in (single, ddp_run):
        assert result["final_metrics"]["val_acc"] > 0.5  # chance is about 1/30
    assert ddp_run["final_metrics"]["val_loss"] == pytest.approx(single["final_metrics"]["val_loss"], rel=0.15)
    assert ddp_run["steps"] == pytest.approx(single["steps"], rel=0.1)


def test_sigterm_under_ddp_stops_every_process_at_one_batch_and_resumes_exactly(ddp_run, tmp_path):
    """Lightning's own handler runs a collective inside the signal handler, which can meet the other
    process at another collective and wait for ever; each process here only notes the signal, and all
    agree when to stop. The resumed run trains the same updates; its metrics are close, not equal: a
    checkpoint holds the first process's random state, which the second takes on (other dropout masks)."""
    stopped = interrupt(tmp_path, signal.SIGTERM, in_the_second_epoch, *DDP)
    assert stopped.returncode == 143, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    resumed = run_to_end(tmp_path, *DDP)
    assert resumed["steps"] == ddp_run["steps"]
    assert resumed["final_metrics"]["val_loss"] == pytest.approx(ddp_run["final_metrics"]["val_loss"], rel=0.03)


class NaNAfter(torch.nn.Module):
    """Wraps a model and poisons its output from call ``after`` on."""

    def __init__(self, model, after: int):
        super().__init__()
        self.model, self.after, self.calls = model, after, 0
        self.pad_id = model.pad_id

    def forward(self, src, tgt_in):
        self.calls += 1
        out = self.model(src, tgt_in)
        return out * float("nan") if self.training and self.calls > self.after else out


# returning None from training_step is Lightning's documented way to skip a step; its notice is expected
@pytest.mark.filterwarnings("ignore:`training_step` returned `None`")
def test_non_finite_losses_are_skipped_then_stop_the_run(tmp_path):
    cfg = compose_train()
    dm = build_datamodule(cfg.data, str(tmp_path), 1)
    dm.prepare_data()
    src_tok, tgt_tok = dm.build_tokenizers()
    model = NaNAfter(build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size), after=2)
    loss = instantiate(cfg.smoothing, pad_id=PAD_ID)
    optimizer = instantiate(cfg.optim.optimizer)
    task = TranslationTask({"strategy": "greedy"}, bleu_every_n_epochs=0)
    module = TaskModule(task, model, loss, optimizer, None, src_tok, tgt_tok, {}, task.validation_metrics(dm), 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu")  # fmt: skip
    with pytest.raises(FloatingPointError, match=r"non-finite loss at step \d+ \(3 bad batches"):
        trainer.fit(module, datamodule=lightning_data(dm))
    assert module.guard.bad_steps == 3
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # the good steps happened
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())  # the bad ones changed nothing


def test_translating_invalid_utf8_from_stdin_names_the_line(tmp_path):
    from nmt.data.text_io import decode_lines

    with pytest.raises(ValueError, match=r"<stdin>, line 2: invalid UTF-8"):
        decode_lines([b"ok\n", b"\xff\n"], "<stdin>")


def test_a_save_that_dies_half_way_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    from nmt.training.checkpoint_io import AtomicCheckpointIO

    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)

    def dying_save(obj, target):
        Path(target).write_bytes(b"half a checkpo")
        raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": 1}


def test_the_final_scores_run_on_the_training_device_wherever_fit_leaves_the_module(tmp_path, monkeypatch):
    """Lightning moves the module to the CPU when fit ends, so GPU runs once decoded their test set on the
    CPU. Here fit leaves the module on the meta device instead; the final scores must still get the trainer's,
    and load the final model once for the validation and test sets."""
    from lightning.pytorch.strategies import SingleDeviceStrategy

    from nmt.training import final
    from nmt.training import train as training

    devices = []
    load = final.load_model
    monkeypatch.setattr(final, "load_model", lambda path, average, device: devices.append(device) or load(path))
    teardown = SingleDeviceStrategy.teardown

    def teardown_elsewhere(self) -> None:
        teardown(self)
        self.lightning_module.to("meta")

    monkeypatch.setattr(SingleDeviceStrategy, "teardown", teardown_elsewhere)
    # the epoch's validation decodes, so the final weights are not validated again after fit (on meta weights)
    training.train(compose_train("trainer.max_epochs=1", "validation.bleu_every_n_epochs=1", f"run_dir={tmp_path}"))
    assert devices == ["cpu"]


def test_token_and_loss_sums_stay_exact_beyond_float32():
    """2^24 + 1 is the first integer float32 cannot hold: a corpus passes it within a few epochs."""
    import torch

    from nmt.tasks import exact_sum

    total = exact_sum()
    total.update(torch.tensor(2.0**24))
    total.update(torch.tensor(1.0))
    assert total.compute().item() == 2**24 + 1


def test_a_run_ended_by_max_steps_inside_an_epoch_extends_as_a_longer_run_trains(uninterrupted_in_process, tmp_path):
    """max_steps ends a run inside an epoch; rerun with a larger max_steps and resume=force, it resumed at the
    next epoch's start: the epoch's rest skipped (its validation, its data), one epoch too many counted, and
    other final weights than a run trained that long at once."""
    epoch = uninterrupted_in_process(())[0]["steps"] // 3  # its 3 epochs
    short, long = epoch + epoch // 2, 2 * epoch + epoch // 3  # each inside an epoch
    reference, _ = uninterrupted_in_process((f"trainer.max_steps={long}",))
    first = train_in_process(tmp_path, overrides=(f"trainer.max_steps={short}",))
    assert first["steps"] == short and first["epochs"] == 2
    extended = train_in_process(tmp_path, overrides=(f"trainer.max_steps={long}", "resume=force"))
    assert (extended["steps"], extended["epochs"]) == (reference["steps"], reference["epochs"]) == (long, 3)
    for key in ("val_loss", "val_acc", "train_loss"):
        assert extended["final_metrics"][key] == pytest.approx(reference["final_metrics"][key], rel=1e-5), key
    # the cut epoch's row at its end counts the whole epoch (it counted the rest alone); the first sitting's
    # row, at its stop, stays: the epoch's tokens as far as it went
    tokens = [
        {step: v for step, key, v in logged_curves(d) if key == "train_tokens"}
        for d in (tmp_path, reference["run_dir"])
    ]
    assert tokens[0].pop(short - 1) < tokens[1][2 * epoch - 1]
    assert tokens[0] == pytest.approx(tokens[1], rel=1e-9)


@pytest.mark.parametrize("lightnings", [False, True], ids=["ours", "lightnings"])
def test_tensorboard_of_a_crashed_and_resumed_run_shows_each_step_once(tmp_path, lightnings):
    """The steps logged after the last checkpoint and redone on resume showed twice in TensorBoard (its
    own reader: the crashed sitting's values beside the resumed one's, as Lightning's logger still shows);
    it now shows the CSV log's curve."""
    from .test_csv_log import tensorboard_scalars

    overrides = (*BOUNDS["steps"], "logger=tensorboard")
    if lightnings:
        overrides += ("logger._target_=lightning.pytorch.loggers.TensorBoardLogger",)
    with pytest.raises(RuntimeError, match="crashed"):
        train_in_process(tmp_path, CrashAt(1, 3), overrides=overrides)
    train_in_process(tmp_path, overrides=overrides)
    curve = [(step, value) for step, key, value in logged_curves(tmp_path) if key == "train_loss"]
    shown = tensorboard_scalars(tmp_path / "tensorboard", "train_loss")
    if lightnings:  # the rows of epoch 1 before the crash, twice
        assert len(shown) > len(curve) and sorted({step for step, _ in shown}) == [step for step, _ in curve]
        return
    assert [step for step, _ in shown] == [step for step, _ in curve]
    assert [value for _, value in shown] == pytest.approx([value for _, value in curve], rel=1e-6)


def test_a_resumed_wall_clock_goes_on_from_the_earlier_sittings_time():
    clock = WallClock()
    clock.load_state_dict({"elapsed": 100.0})
    clock.on_train_start(None, None)
    assert 100.0 <= clock.elapsed() < 110.0
    assert 100.0 <= clock.state_dict()["elapsed"] < 110.0
