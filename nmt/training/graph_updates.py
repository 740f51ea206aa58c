"""Each training update replayed as one CUDA graph (``graph_updates=true``, on a GPU).

A small model's update on a GPU is bound by the host: Lightning's loop, the autograd engine, the optimiser
and the guard issue a few hundred launches and Python calls for a few milliseconds of kernels
(BENCHMARKS.md). ``compile=reduce-overhead`` replays the model's forward and backward as graphs; here the
whole update is one graph: the forward, the loss, the backward, the gradient norm that guards against a
non-finite update, the clipping, and the fused optimiser's step (skipped on the device when the norm is
not finite).

A graph replays fixed kernels on fixed memory, so per batch shape (source and target lengths, batch size;
a sorted corpus's token batches take few):

- the first batch of a shape is an ordinary update, run eagerly (it also warms up what a recording must
  not do for the first time: kernels chosen, optimiser state made), and the update is then recorded;
- its later batches are copied into the recording's input tensors, and the graph replays;
- the learning rate is a tensor on the device that the schedule fills in place (a number would be baked
  into the recording), and the optimiser is told it runs in a graph (``capturable``).

The gradients live in the graphs' memory: after an update the parameters hold none, so Lightning's own
optimiser step (which still runs, as does the schedule's) finds nothing to do. The recordings share one
memory pool (they never run at the same time, and nothing one of them leaves in it is read by another)
and are kept until training ends.

A model is recorded only where it says its training step can be (``replayable_updates``): one that reads
the device or keeps a Python number that changes between batches (the RNN's teacher-forcing schedule)
would have that value frozen into its recording.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # loss, tokens, gradient norm, bad


def not_recordable(model_class: type) -> str | None:
    """Why graph_updates=true cannot record ``model_class``'s training step (None: it can)."""
    if getattr(model_class, "replayable_updates", False):
        return None
    return (
        f"graph_updates=true: {model_class.__name__} does not say its training step can be recorded "
        "(replayable_updates: it reads nothing from the device and keeps no changing Python value)"
    )


def unsupported(
    *, check_every, fused, accumulate, precision, compile, world_size: int = 1, accelerator: str = "gpu"
) -> list[str]:
    """Why a run with these settings cannot replay its updates as graphs, each with what to do (none: it
    can). Checked from the config before a run starts, and again from the trainer."""
    problems = []
    if record is RECORD_ON_GPU:  # (the tests record on the CPU with a stand-in)
        if str(accelerator) == "cpu":
            problems.append("graph_updates=true records CUDA graphs: train on a GPU (trainer=gpu)")
        elif str(accelerator) == "auto" and not torch.cuda.is_available():  # Lightning would choose the CPU
            problems.append(
                "graph_updates=true records CUDA graphs, and this machine has no CUDA GPU (trainer.accelerator=auto "
                "trains without one): train where there is one, or leave graph_updates off"
            )
    if world_size > 1:
        problems.append("graph_updates=true trains on one device: the gradient exchange of several is not recorded")
    if accumulate and accumulate > 1:
        problems.append("graph_updates=true makes one update per batch: set trainer.accumulate_grad_batches=1")
    if str(precision).startswith("16"):
        problems.append(f"graph_updates=true: precision={precision} has a loss scaler, not recorded; use bf16-mixed")
    if not isinstance(check_every, int) or check_every <= 1:
        problems.append("graph_updates=true reads no guard inside an update: set check_every (e.g. 50)")
    if fused is not True:
        problems.append("graph_updates=true needs a fused optimiser: set optim.optimizer.fused=true (Adam or AdamW)")
    if str(compile) == "reduce-overhead":
        problems.append(
            "graph_updates=true records the whole update as one graph, which cannot hold "
            "compile=reduce-overhead's: use compile=true or compile=layers"
        )
    return problems


def learning_rates_on_device(optimizer: torch.optim.Optimizer, device: torch.device, capturable: bool) -> None:
    """Each group's rate as a one-element tensor on ``device`` (kept a tensor: the schedule fills it in
    place), its schedule's base rate (``initial_lr``) kept a number. ``capturable``: the optimiser may run
    inside a recording (on a GPU)."""
    for group in optimizer.param_groups:
        rate = float(group["lr"])  # a number, or a tensor restored from a checkpoint (once, before training)
        group.setdefault("initial_lr", rate)
        if isinstance(group["initial_lr"], torch.Tensor):
            group["initial_lr"] = float(group["initial_lr"])
        group["lr"] = torch.tensor(rate, dtype=torch.float32, device=device)
        if capturable:
            group["capturable"] = True


@dataclass
class Recording:
    graph: object  # torch.cuda.CUDAGraph (a stand-in on the CPU)
    inputs: dict[str, torch.Tensor]  # the batch's tensors the graph reads
    outputs: Outputs


def shape_of(batch: dict) -> tuple:
    return tuple((k, tuple(v.shape), v.dtype) for k, v in batch.items() if isinstance(v, torch.Tensor))


MAX_RECORDINGS = 256  # batch shapes recorded; later new shapes update eagerly (a corpus of very many shapes)


def record(run: Callable[[dict], Outputs], inputs: dict[str, torch.Tensor], stream, pool) -> Recording:
    """One update recorded as a CUDA graph on ``stream`` (the one its eager updates ran on) into ``pool``,
    after the work queued before it is done; only this thread's unsafe calls end a recording (a loader's
    pinning thread may run beside it). Unlike ``torch.cuda.graph``, the allocator's cache is not emptied at
    each recording (a new batch shape), and a recording that fails leaves its own error, not the one of
    ending a broken recording."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    # weights cast by autocast before the recording (the eager update, same autocast region) must not be
    # reused inside it: the replays would read those casts, not the updated weights
    torch.clear_autocast_cache()
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            outputs = run(inputs)
        except BaseException:
            with contextlib.suppress(RuntimeError):  # "a previous error during capture": the cause is raised
                graph.capture_end()
            raise
        graph.capture_end()
    return Recording(graph, inputs, outputs)


RECORD_ON_GPU = record  # the recorder that needs a GPU (tests put a stand-in in its place on the CPU)


class GraphedUpdates:
    """The updates of a run, each a replay of the recording of its batch's shape; ``step`` is the update
    itself (forward, loss, backward, guard, optimiser step) on a batch, written once for both paths. The
    recordings share one memory pool and one stream, the run's own: the allocator reuses a freed block only
    on the stream it was made on, and a pool outliving the run's recordings could not be recorded into by a
    later run (PyTorch's ``use_count > 0``)."""

    def __init__(self, step: Callable[[dict], Outputs], params: list[torch.nn.Parameter], optimizer=None) -> None:
        self.step, self.params, self.optimizer = step, params, optimizer
        self.recordings: dict[tuple, Recording] = {}
        self.eager_updates = 0  # the first of each shape (and every update of a shape past MAX_RECORDINGS)
        self.replays = 0
        on_gpu = next(iter(params)).is_cuda
        self.stream = torch.cuda.Stream() if on_gpu else None
        self.pool = torch.cuda.graph_pool_handle() if on_gpu else None

    def update(self, batch: dict) -> Outputs:
        """One update on ``batch``; its loss, target tokens, gradient norm and whether it was skipped (copies:
        a recording's outputs change at its next replay)."""
        key = shape_of(batch)
        recording = self.recordings.get(key)
        if recording is None:
            with self._on_side_stream():
                outputs = self.step(batch)  # an ordinary update, and the warm-up of the recording
                self.eager_updates += 1
                self._drop_grads()
                if len(self.recordings) < MAX_RECORDINGS:
                    inputs = {k: v.clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
                    self.recordings[key] = self._record(inputs)
        else:
            for name, tensor in recording.inputs.items():
                tensor.copy_(batch[name], non_blocking=True)
            recording.graph.replay()
            self.replays += 1
            outputs = recording.outputs
        self._drop_grads()
        return tuple(t.detach().clone() for t in outputs)

    def _record(self, inputs: dict[str, torch.Tensor]) -> Recording:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in inputs.items())
        states = len(self.optimizer.state) if self.optimizer is not None else None
        try:
            recording = record(self.step, inputs, self.stream, self.pool)
        except RuntimeError as err:
            # out of memory: the eager warm-up's blocks stay cached beside the recording's own pool, so a
            # batch that trains eagerly may still not fit twice
            remedy = (
                "train on smaller batches (data.max_tokens, or data.batch_size where batches count sentences or "
                "windows) or with graph_updates=false"
                if isinstance(err, torch.OutOfMemoryError)
                else "train with graph_updates=false"
            )
            raise RuntimeError(
                f"graph_updates=true: the update of a batch of {shapes} could not be recorded as a CUDA "
                f"graph ({str(err).splitlines()[0]}); {remedy}"
            ) from err
        if states is not None and len(self.optimizer.state) != states:
            # state made inside a recording is made again at each replay: the moments would restart every update
            raise RuntimeError(
                f"graph_updates=true: the update of a batch of {shapes} gave a gradient to weights that the "
                "earlier updates did not, so their optimiser state was created inside the recording; train "
                "with graph_updates=false"
            )
        return recording

    @contextlib.contextmanager
    def _on_side_stream(self):
        """On a GPU, a new shape's eager update and recording run on the run's side stream (PyTorch's recipe:
        lazy set-up on the stream the recording uses), after the default stream's work and before its next."""
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream())
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:
            torch.cuda.current_stream().wait_stream(self.stream)

    def _drop_grads(self) -> None:
        for p in self.params:
            p.grad = None
