"""Checkpoints written behind training (``checkpoint.write_behind``): each file the state at its save, the
writes, copies and removals in the order asked, a failed write raised in the training thread with nothing
after it touched, and every write done when training ends."""

import errno
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nmt.training.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError, WriteBehind
from nmt.training.checkpoints import EpochCheckpoints


def state(value: float) -> dict:
    return {
        "state_dict": {"w": torch.full((3,), value)},
        "optimizer_states": [{"state": {0: {"step": torch.tensor(1.0)}}}],
    }


def full_disk(obj, target, *args, **kwargs):
    """torch.save on a full disk."""
    raise OSError(errno.ENOSPC, "No space left on device")


def weights(path: Path) -> float:
    return float(torch.load(path, weights_only=True)["state_dict"]["w"][0])


@pytest.fixture
def held(monkeypatch):
    """torch.save made to wait for ``release``, so that the test sees what happens while a write is queued."""
    release, started = threading.Event(), threading.Event()
    real_save = torch.save

    def save(obj, target, *args, **kwargs):
        started.set()
        assert release.wait(30)
        return real_save(obj, target, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    return SimpleNamespace(release=release, started=started)


def test_a_checkpoint_written_behind_is_the_state_at_its_save(tmp_path, held):
    io, path = AtomicCheckpointIO(background=True), tmp_path / "epoch000.ckpt"
    checkpoint = state(1.0)
    io.save_checkpoint(checkpoint, path)  # returns while the write waits
    assert held.started.wait(30) and not path.exists()
    checkpoint["state_dict"]["w"].add_(10.0)  # training goes on, in place
    checkpoint["optimizer_states"][0]["state"][0]["step"].add_(1.0)
    held.release.set()
    io.wait()
    saved = torch.load(path, weights_only=True)
    assert torch.equal(saved["state_dict"]["w"], torch.ones(3))
    assert float(saved["optimizer_states"][0]["state"][0]["step"]) == 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left


def test_writes_copies_and_removals_happen_in_the_order_asked(tmp_path, held):
    io = AtomicCheckpointIO(background=True)
    trainer = SimpleNamespace(is_global_zero=True, strategy=SimpleNamespace(checkpoint_io=io, barrier=lambda: None))
    old, new, last = tmp_path / "epoch000.ckpt", tmp_path / "epoch001.ckpt", tmp_path / "last.ckpt"
    io.save_checkpoint(state(1.0), old)
    io.save_checkpoint(state(2.0), new)
    EpochCheckpoints._link_checkpoint(trainer, str(new), str(last))  # the copy: after the write it copies
    io.remove_checkpoint(old)  # a removal never overtakes the write of the same file
    assert held.started.wait(30) and list(tmp_path.iterdir()) == []
    held.release.set()
    io.teardown()  # Lightning's strategy calls this at the end of a fit, and of an interrupted one
    assert sorted(p.name for p in tmp_path.iterdir()) == [new.name, last.name]
    assert weights(last) == weights(new) == 2.0


def test_a_failed_write_is_raised_at_the_next_save_and_nothing_after_it_is_touched(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    trainer = SimpleNamespace(is_global_zero=True, strategy=SimpleNamespace(checkpoint_io=io, barrier=lambda: None))
    epoch, last = tmp_path / "epoch001.ckpt", tmp_path / "last.ckpt"
    io.save_checkpoint(state(1.0), last)  # the state a rerun would resume from
    io.background = True
    real_save = torch.save

    def full_disk(obj, target, *args, **kwargs):
        Path(target).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    io.save_checkpoint(state(2.0), epoch)
    EpochCheckpoints._link_checkpoint(trainer, str(epoch), str(last))
    io.remove_checkpoint(last)
    for job in list(io._queued):
        job.result()
    monkeypatch.setattr(torch, "save", real_save)
    with pytest.raises(CheckpointWriteError, match=r"no space left on .* to write epoch001\.ckpt"):
        io.save_checkpoint(state(3.0), tmp_path / "epoch002.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [last.name] and weights(last) == 1.0
    io.save_checkpoint(state(4.0), epoch)  # the error raised once; later saves write again
    io.wait()
    assert weights(epoch) == 4.0


def test_wait_raises_a_failed_write(tmp_path, monkeypatch):
    io = AtomicCheckpointIO(background=True)

    monkeypatch.setattr(torch, "save", full_disk)
    io.save_checkpoint(state(1.0), tmp_path / "best.ckpt")
    with pytest.raises(CheckpointWriteError, match="to write best.ckpt"):
        io.teardown()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("setting", "device", "background"),
    [(None, "cuda", True), (None, "cpu", False), (True, "cpu", True), (False, "cuda", False)],
)
def test_write_behind_is_on_while_training_runs_where_set(tmp_path, held, setting, device, background):
    io = AtomicCheckpointIO()
    callback = WriteBehind(io, setting)
    trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))
    path = tmp_path / "epoch000.ckpt"
    callback.on_train_start(trainer, None)
    assert io.background is background
    if background:
        io.save_checkpoint(state(1.0), path)
        assert not path.exists()
        threading.Timer(0.2, held.release.set).start()
    callback.on_train_end(trainer, None)  # every write done before training's end returns
    assert io.background is False
    assert path.exists() is background


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph recorded while the writer runs")
def test_on_a_gpu_a_write_behind_leaves_a_recording_whole(tmp_path, held):
    """The writer thread finishing a write, its state freed, while the training thread records a CUDA graph:
    the recording replays right, and the file holds the weights of the save, not those training wrote on the
    device after it (while the write waited)."""
    model = torch.nn.Linear(64, 64).cuda()
    io, path = AtomicCheckpointIO(background=True), tmp_path / "epoch000.ckpt"
    at_save = model.weight.detach().cpu().clone()
    io.save_checkpoint({"state_dict": model.state_dict()}, path)
    with torch.no_grad():
        model.weight.mul_(-2.0)  # training goes on before the writer has written anything
    x = torch.randn(8, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as a recording requires
        model(x)
    torch.cuda.current_stream().wait_stream(side)
    recording = torch.cuda.CUDAGraph()
    with torch.cuda.graph(recording):
        held.release.set()
        time.sleep(0.2)  # the write done and its state freed inside the recording
        y = model(x)
    io.wait()
    with torch.no_grad():
        model.weight.add_(1.0)
    recording.replay()
    torch.testing.assert_close(y, model(x))
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["weight"], at_save)


def test_at_most_two_checkpoints_wait_for_the_writer(tmp_path, held, monkeypatch):
    """Each waiting checkpoint is a copy of the state in host memory: a third save waits for the oldest
    before it copies the state."""
    from nmt.training import checkpoint_io

    copies, real_on_host = [], checkpoint_io.on_host
    monkeypatch.setattr(checkpoint_io, "on_host", lambda *a, **k: copies.append(1) or real_on_host(*a, **k))
    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint(state(1.0), tmp_path / "a.ckpt")
    io.save_checkpoint(state(2.0), tmp_path / "b.ckpt")
    third = threading.Thread(target=io.save_checkpoint, args=(state(3.0), tmp_path / "c.ckpt"))
    third.start()
    third.join(0.5)
    assert third.is_alive() and len(copies) == 2  # blocked behind the first write, no third copy taken
    held.release.set()
    third.join(30)
    io.wait()
    assert len(copies) == 3 and [weights(tmp_path / f"{n}.ckpt") for n in "abc"] == [1.0, 2.0, 3.0]


def test_after_a_failed_write_nothing_queued_runs_though_the_error_is_raised_at_once(tmp_path, monkeypatch):
    """The next save raises the failure as soon as it is known; the copy and the removal queued after the
    failed write skip themselves all the same (they would copy a file never written, remove the last good one)."""
    import time

    io = AtomicCheckpointIO(background=True)
    trainer = SimpleNamespace(is_global_zero=True, strategy=SimpleNamespace(checkpoint_io=io, barrier=lambda: None))
    epoch, last = tmp_path / "epoch001.ckpt", tmp_path / "last.ckpt"
    torch.save(state(1.0), last)
    release, removed = threading.Event(), []

    def full_disk(obj, target, *args, **kwargs):
        assert release.wait(30)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(io, "remove_checkpoint", lambda path: io.then(lambda: removed.append(path)))
    io.save_checkpoint(state(2.0), epoch)
    EpochCheckpoints._link_checkpoint(trainer, str(epoch), str(last))  # would copy a file never written
    io.remove_checkpoint(last)
    release.set()
    deadline = time.monotonic() + 30
    while io._failed is None and time.monotonic() < deadline:
        pass  # the next save comes as soon as the failure is known, before the worker reaches the jobs after it
    with pytest.raises(CheckpointWriteError, match="to write epoch001.ckpt"):
        io.save_checkpoint(state(3.0), tmp_path / "epoch002.ckpt")
    io.teardown()  # nothing more to raise
    assert removed == [] and sorted(p.name for p in tmp_path.iterdir()) == [last.name] and weights(last) == 1.0


def test_a_failed_write_does_not_replace_the_exception_a_run_stops_on(tmp_path, monkeypatch):
    io = AtomicCheckpointIO(background=True)

    monkeypatch.setattr(torch, "save", full_disk)
    io.save_checkpoint(state(1.0), tmp_path / "epoch000.ckpt")
    with pytest.raises(ValueError, match="the run's own error"), pytest.warns(UserWarning, match="no space left"):
        try:
            raise ValueError("the run's own error")
        except ValueError:
            io.teardown()  # as Lightning's strategy tears down while the exception unwinds
            raise
    assert io.background is False  # a save after the fit is written before it returns


def test_lightnings_save_before_a_slurm_requeue_is_written_before_it_returns(tmp_path):
    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint(state(1.0), tmp_path / "hpc_ckpt_1.ckpt")
    assert weights(tmp_path / "hpc_ckpt_1.ckpt") == 1.0 and io._worker is None


def test_a_snapshot_keeps_tied_weights_one_tensor(tmp_path):
    from nmt.training.checkpoint_io import on_host

    shared = torch.arange(6.0)
    checkpoint = {"state_dict": {"embed": shared.detach(), "output": shared.detach(), "half": shared[:3]}}
    copy = on_host(checkpoint, snapshot=True)["state_dict"]
    assert copy["embed"] is copy["output"] and copy["embed"].data_ptr() != shared.data_ptr()
    assert torch.equal(copy["half"], shared[:3])
    shared.add_(1.0)  # the snapshot does not follow the live tensor
    assert torch.equal(copy["embed"], torch.arange(6.0))


def test_a_save_from_a_signal_handler_while_the_writer_is_waited_for(tmp_path, held):
    """Lightning's SLURM handler saves from inside a signal handler, which may run while training waits for
    the writer: the nested save waits for the same writes, and the outer wait then finds nothing left."""
    import os
    import signal

    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint(state(1.0), tmp_path / "epoch000.ckpt")
    previous = signal.signal(signal.SIGUSR1, lambda *_: io.save_checkpoint(state(2.0), tmp_path / "hpc_ckpt_1.ckpt"))
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        threading.Timer(0.5, held.release.set).start()
        io.wait()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert weights(tmp_path / "epoch000.ckpt") == 1.0 and weights(tmp_path / "hpc_ckpt_1.ckpt") == 2.0


def test_a_signals_save_is_written_in_the_foreground_after_an_earlier_write_failed(tmp_path, monkeypatch):
    """SaveOnSignal writes the state to resume from before the run goes on (under DDP, the barrier after it
    lets the other ranks exit); an earlier write that failed in the background is named, not raised."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from nmt.training.stopping import SaveOnSignal

    io = AtomicCheckpointIO(background=True)
    real_save = torch.save

    monkeypatch.setattr(torch, "save", full_disk)
    io.save_checkpoint(state(1.0), tmp_path / "epoch000.ckpt")
    io._queued[-1].result()
    monkeypatch.setattr(torch, "save", real_save)
    last = tmp_path / "last.ckpt"
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(checkpoint_io=io),
        save_checkpoint=lambda path, weights_only: io.save_checkpoint(state(2.0), path),
    )
    callback = SaveOnSignal(last)
    with pytest.warns(UserWarning, match="an earlier checkpoint write failed: .*epoch000.ckpt"):
        callback.on_exception(trainer, None, SIGTERMException())
    assert io.background is False and callback.saved and weights(last) == 2.0  # on disk when the call returns


def test_a_snapshot_copies_lazy_views_and_sparse_tensors_as_they_read():
    from nmt.training.checkpoint_io import on_host

    z = torch.tensor([1 + 2j, 3 - 1j])
    sparse = torch.eye(3).to_sparse()
    copy = on_host(
        {
            "z": z,
            "conj": z.conj(),
            "neg": torch._neg_view(z),
            "sparse": sparse,
            "e": torch.ones(0),
            "f": torch.zeros(0),
        },
        snapshot=True,
    )
    assert torch.equal(copy["conj"].resolve_conj(), z.conj().resolve_conj()) and copy["conj"] is not copy["z"]
    assert torch.equal(copy["neg"].resolve_neg(), -z) and torch.equal(copy["sparse"].to_dense(), torch.eye(3))
    assert copy["e"] is not copy["f"]
