"""Writing checkpoints safely: whole or not at all, never with non-finite numbers, behind training on a GPU, a
full disk named; and reading an older checkpoint's callback states under the keys they have now. Which
checkpoints a run keeps: :mod:`nmt.training.checkpoints`."""

import ast
import copy
import errno
import functools
import math
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from nmt.inference.checkpoint import CHECKPOINT_KEY, CHECKSUM_KEY, weights_checksum
from nmt.utils.io import atomic_path


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk); the earlier checkpoints are intact."""


def non_finite_tensors(checkpoint: dict) -> list[str]:
    """Names of the parameters and optimiser states in ``checkpoint`` that hold a NaN or an infinity.
    One read per device, not one per tensor: on a GPU each read waits for the device, and a checkpoint
    holds hundreds of tensors."""
    found, tensors = [], {}  # device -> [(name, tensor)]

    def visit(node, name: str) -> None:
        if isinstance(node, torch.Tensor):
            if node.is_floating_point():
                tensors.setdefault(node.device, []).append((name, node))
        elif isinstance(node, float):
            if not math.isfinite(node) and not name.endswith(("best_model_score", "best_k_models", "kth_value")):
                found.append(name)
        elif isinstance(node, dict):
            for key, value in node.items():
                visit(value, f"{name}.{key}" if name else str(key))
        elif isinstance(node, list | tuple):
            for index, value in enumerate(node):
                visit(value, f"{name}.{index}")

    visit(checkpoint.get("state_dict", {}), "state_dict")
    visit(checkpoint.get("optimizer_states", []), "optimizer_states")
    for named in tensors.values():
        named = [(name, t) for name, t in named if t.numel()]  # an empty tensor holds nothing non-finite
        if not named:
            continue
        # each tensor's largest magnitude, a NaN where it holds one: a few kernels for all of them, not two
        # per tensor (hundreds of launches on a GPU)
        largest = torch._foreach_norm([t for _, t in named], ord=float("inf"))
        finite = torch.isfinite(torch.stack([x.float() for x in largest])).tolist()  # the one read
        found += [name for (name, _), ok in zip(named, finite, strict=True) if not ok]
    return found


def on_host(checkpoint, snapshot: bool = False):
    """``checkpoint`` with every tensor on an accelerator copied to host memory, the copies queued together
    and waited for once: ``torch.save`` would copy them one at a time, each copy a wait for the device.
    ``snapshot``: for a write in another thread, a copy that training, going on, cannot change (tensors
    already in host memory copied too), in ordinary host memory, each copy waited for: pinned buffers,
    freed in the writer thread, would query the device there, which a CUDA graph being recorded at that
    moment in the training thread forbids."""
    copies, made = [], {}  # the copy of each tensor view, so that tied weights stay one tensor in the file

    def copied(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "cpu" and not snapshot:
            copies.append(tensor.detach().to("cpu", non_blocking=True))  # pinned host memory: nothing waits yet
            return copies[-1]
        return tensor.detach().to("cpu") if tensor.device.type != "cpu" else tensor.detach().clone()

    def visit(node):
        if isinstance(node, torch.Tensor) and (snapshot or node.device.type != "cpu"):
            if node.layout != torch.strided or node.is_conj() or node.is_neg() or not node.numel():
                return copied(node)  # no storage to compare, or one read through a lazy view: never merged
            view = (node.device, node.untyped_storage().data_ptr(), node.storage_offset(), node.shape, node.stride())
            view += (node.dtype,)
            if view not in made:
                made[view] = copied(node)
            return made[view]
        if isinstance(node, dict):
            out = copy.copy(node)  # the same kind of mapping, with its attributes (a state dict's _metadata)
            for key, value in node.items():
                out[key] = visit(value)
            return out
        if isinstance(node, tuple) and hasattr(node, "_fields"):  # a named tuple
            return type(node)(*(visit(value) for value in node))
        if isinstance(node, list | tuple):
            return type(node)(visit(value) for value in node)
        return node

    moved = visit(checkpoint)
    if copies:  # every copy done before the bytes are read
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            accelerator.synchronize()
        else:
            torch.cuda.synchronize()
    return moved


MAX_QUEUED = 2  # checkpoints waiting for the writer thread at most; a save beyond waits for the oldest


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, but through a temporary file and a rename: a process killed
    while saving leaves the previous checkpoint intact, never a truncated one. Weights or optimiser state
    with NaN or infinities are not written (the previous checkpoint stays the last good one), and a full
    disk is reported as such, with the temporary file removed.

    With ``background`` on (:class:`WriteBehind` turns it on while training runs), the state is checked and
    copied to host memory at once, and its bytes are written by one worker thread, in the order the saves,
    copies and removals were asked for: an epoch's end then does not wait for the disk. The thread calls
    nothing of CUDA's (the state it writes is in ordinary host memory), so it cannot disturb a CUDA graph
    that training records meanwhile. A write that fails is raised at the next save or at :meth:`wait`, and
    nothing queued after it is written or removed, so the files written before it stay as they were."""

    last_written: str | None = None  # the file the last save wrote or queued (None: that save wrote nothing)
    saves: int = 0  # the checkpoints written or queued by this writer (0: the folder's are as they were)

    def __init__(self, background: bool = False) -> None:
        super().__init__()
        self.background = background
        self._worker: ThreadPoolExecutor | None = None
        self._queued: list[Future] = []  # every job not known to be done, in order
        self._writes: list[Future] = []  # the writes among them (each holds a copy of the state)
        self._failed: BaseException | None = None

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        path = Path(path)
        # Lightning's save on SLURM's requeue signal is followed at once by the requeue, which kills the job:
        # it is written before the call returns, after every write before it (even if it is itself refused)
        behind = self.background and not path.name.startswith("hpc_ckpt")
        if behind:
            self._raise_failed()
        else:
            self.wait()
        self.last_written = None
        bad = non_finite_tensors(checkpoint)
        if bad:
            rank_zero_warn(
                f"not writing {path}: {len(bad)} tensor(s) hold NaN or infinity (first: {bad[0]}); the previous "
                "checkpoint stays the last good one"
            )
            return
        self._writes = [write for write in self._writes if not write.done()]
        while behind and len(self._writes) >= MAX_QUEUED:  # each holds a copy of the state in host memory
            self._writes.pop(0).result()
        state = on_host(checkpoint, snapshot=behind)
        written = self.then(functools.partial(_write, state, path), behind)
        if written is not None:
            self._writes.append(written)
        self.last_written = os.path.abspath(path)
        self.saves += 1

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        kwargs = {} if map_location is None else {"map_location": map_location}
        checkpoint = super().load_checkpoint(path, weights_only=weights_only, **kwargs)
        states = checkpoint.get("callbacks") or {}
        for key in list(states):  # a checkpoint saved before the keys were ours: read under ours
            ours = _our_key(key)
            if ours is not None:
                states.setdefault(ours, states.pop(key))
        return checkpoint

    def remove_checkpoint(self, path) -> None:
        # queued too: a removal never overtakes a write asked for before it
        self.then(functools.partial(super().remove_checkpoint, path))

    def then(self, job: Callable[[], None], behind: bool | None = None) -> Future | None:
        """Run ``job`` after every write queued before it: now, or in the worker thread while ``background``
        (``behind``: this once, whether in the worker thread; its future is returned)."""
        if not (self.background if behind is None else behind):
            self.wait()
            job()
            return None
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._queued = [queued for queued in self._queued if not queued.done()]
        self._queued.append(self._worker.submit(self._unless_failed, job))
        return self._queued[-1]

    def _unless_failed(self, job: Callable[[], None]) -> None:
        if self._failed is not None:  # after a failed write nothing more is written or removed
            return
        try:
            job()
        except BaseException as err:  # noqa: BLE001 - raised in the training thread, at the next save or wait
            self._failed = err

    def wait(self) -> None:
        """Wait until every queued write is done; raise the first that failed. A signal handler may save
        (synchronously, so waiting too) while this waits: the list is emptied by whichever wait gets there."""
        while self._queued:
            job = self._queued[0]
            job.result()
            if self._queued and self._queued[0] is job:
                self._queued.pop(0)
        self._raise_failed()

    def _raise_failed(self) -> None:
        if self._failed is not None:
            # the jobs queued after the failed one skip themselves first: none runs once the error is raised
            for job in self._queued:
                job.result()
            self._queued = []
            failed, self._failed = self._failed, None
            raise failed

    def teardown(self) -> None:
        """Every queued write done (Lightning's strategy calls this at the end of a fit, an interrupted one
        too). A write that failed is raised, unless another exception is already on its way out: then it is
        named in a warning, and that exception stays the one reported."""
        self.background = False  # a save after a fit (the caller's) is written before it returns
        unwinding = sys.exc_info()[1] is not None
        try:
            self.wait()
        except Exception as err:
            if not unwinding:
                raise
            rank_zero_warn(f"a checkpoint write failed as the run stopped: {err}")
        finally:
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None


def _write(checkpoint: dict, path: Path) -> None:
    section = checkpoint.get(CHECKPOINT_KEY)
    if isinstance(section, dict) and "state_dict" in checkpoint:  # the weights' checksum, checked when read
        section = {**section, CHECKSUM_KEY: weights_checksum(checkpoint["state_dict"])}
        checkpoint = {**checkpoint, CHECKPOINT_KEY: section}
    with full_disk_named(path), atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


class WriteBehind(Callback):
    """Checkpoints written in the background while training runs (``checkpoint.write_behind``): on an
    accelerator by default, where the state has to be copied off the device for any write. On a CPU the
    state would be copied for the writer only, so only when asked. Every write is done before training's
    end returns, and before an interrupted run exits (the writer's teardown waits)."""

    def __init__(self, writer: AtomicCheckpointIO, setting: bool | None) -> None:
        self.writer, self.setting = writer, setting

    def on_train_start(self, trainer, pl_module) -> None:
        on_device = trainer.strategy.root_device.type != "cpu"
        self.writer.background = self.setting if self.setting is not None else on_device

    def on_train_end(self, trainer, pl_module) -> None:
        self.writer.background = False
        self.writer.wait()


@contextmanager
def full_disk_named(path: Path) -> Iterator[None]:
    """A full disk while writing ``path`` as :class:`CheckpointWriteError`, which says what to do."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if isinstance(err, OSError) and err.errno != errno.ENOSPC and "No space" not in str(err):
            raise
        if isinstance(err, RuntimeError) and "unexpected pos" not in str(err) and "No space" not in str(err):
            raise
        raise CheckpointWriteError(
            errno.ENOSPC,
            f"no space left on {path.parent} to write {path.name}; free some space and rerun the "
            "same command to resume from the last checkpoint written",
        ) from None


# The state key of the checkpoint written every N updates. Lightning's own holds N, so a run resumed with
# another N, or with these checkpoints turned off, warned that the checkpoint held a callback the run lacked
STEP_CHECKPOINT_KEY = "StepCheckpoint"


def best_checkpoint_key(monitor: str | None, mode: str) -> str:
    """The best checkpoint's state key: its score, not how often it is saved (Lightning's key holds
    every_n_epochs, which validation.bleu_every_n_epochs sets: a run resumed under resume=force with another
    interval lost its best score, and its next validation replaced best.ckpt whatever it scored)."""
    return f"BestCheckpoint{repr({'monitor': monitor, 'mode': mode})}"


def _our_key(key) -> str | None:
    """Our key for Lightning's key of the step or the best checkpoint (None: another callback's): its class's
    name (FolderCheckpoint, or ModelCheckpoint before that class) and its settings."""
    if not isinstance(key, str):
        return None
    name, brace, rest = key.partition("{")
    if name not in ("FolderCheckpoint", "ModelCheckpoint") or not brace:
        return None
    try:
        settings = ast.literal_eval(brace + rest)
    except (ValueError, SyntaxError):
        return None
    monitor = settings.get("monitor")
    if monitor is None:  # saved every N > 0 updates: the step checkpoint
        return STEP_CHECKPOINT_KEY if settings.get("every_n_train_steps") else None
    if monitor == "step":  # the epoch checkpoints keep Lightning's key, which never changes
        return None
    return best_checkpoint_key(monitor, settings.get("mode", "min"))
