"""Greedy search replayed as one CUDA graph per step.

A small model's decoding step on a GPU is a few hundred kernel launches of microseconds each: the host
issuing them, not the device running them, sets the pace (a validation batch's kernels ran a small share
of its time: BENCHMARKS.md, the second H100 lease). Recorded once as a CUDA graph, a step is one
launch. A graph replays the same kernels on the same memory, so the step keeps every shape and address:

- the model's caches have a fixed size (``model.fixed_cache``), written in place at a position held on
  the device, which the step advances itself;
- sentences that ended stay in the batch (their tokens are no longer written) instead of leaving it;
- the chosen token, what ended and the outputs live in buffers the step updates in place.

The host then replays the graph and reads whether every sentence ended every :data:`READ_EVERY` steps.
The tokens are those of :func:`nmt.decoding.search._greedy` up to floating-point rounding: the attention
of a step spans the whole cache, its unwritten slots masked out (tested on the CPU, where the same step
runs without a graph).
"""

import contextlib
import threading
import warnings
from collections.abc import Callable

import torch

READ_EVERY = 8  # steps between two reads of whether every sentence ended; each read waits for the device


def supports_graphs(model) -> bool:
    """Whether ``model`` offers caches of fixed size (the Transformer does; others decode eagerly)."""
    return callable(getattr(model, "fixed_cache", None))


class GreedyStep:
    """One greedy step on fixed buffers: ``prev`` (rows,) in, the next token chosen by ``choose`` from the
    logits (rows, vocab), ``ended`` and ``out`` (rows, steps) updated, the model's state advanced;
    :meth:`run` takes it, :meth:`reset` rewinds. ``limits``: (rows,) tokens allowed, counting the EOS."""

    Choose = Callable[[torch.Tensor], torch.Tensor]

    def __init__(self, model, src: torch.Tensor, limits: torch.Tensor, bos_id: int, eos_id: int, choose: Choose):
        self.model, self.bos_id, self.eos_id, self.pad_id = model, bos_id, eos_id, model.pad_id
        self.limits, self.choose = limits, choose
        self.steps = int(self.limits.max())  # the one read before decoding
        self.state = model.fixed_cache(model.encode(src), self.steps)
        rows, device = src.size(0), src.device
        self.prev = torch.full((rows,), bos_id, dtype=torch.long, device=device)
        self.ended = torch.zeros(rows, dtype=torch.bool, device=device)
        self.out = torch.full((rows, self.steps), self.pad_id, dtype=torch.long, device=device)

    def run(self) -> None:
        position = self.state.position.clone()  # this step's (the model advances the state's)
        logits, _ = self.model.decode_step(self.prev, self.state)  # (rows, vocab)
        chosen = self.choose(logits)  # (rows,)
        # the last step allowed ends a sentence (as if EOS were forced), as the eager search does
        self.ended |= (chosen == self.eos_id) | (self.limits <= position + 1)
        self.out.index_copy_(1, position, chosen.masked_fill(self.ended, self.pad_id)[:, None])
        self.prev.copy_(chosen)

    def reset(self) -> None:
        self.state.position.zero_()
        self.prev.fill_(self.bos_id)
        self.ended.zero_()
        self.out.fill_(self.pad_id)

    def tokens(self) -> list[list[int]]:
        # a sentence's tokens are written one after another from its first step, and padding is never chosen
        return [ids[: ids.index(self.pad_id)] if self.pad_id in ids else ids for ids in self.out.tolist()]


class RecordingError(RuntimeError):
    """The step could not be recorded as a CUDA graph (an error inside the recording, not in the warm-up
    run before it, which the step-by-step search would meet as well)."""


# (device, thread) -> the memory pool its graphs share (graphs recorded at the same time, searches in
# several threads, must not share one), the last graph recorded in it, and the stream they are recorded
# on. That graph is kept until its successor is recorded: a pool whose every graph was destroyed counts no
# users, and PyTorch's allocator refuses to record into it again (an internal assertion, ``use_count > 0``).
_POOLS: dict[tuple[int, int], list] = {}


def record(step: GreedyStep) -> torch.cuda.CUDAGraph:
    """The step recorded as a CUDA graph on a side stream, after one run there (PyTorch's recipe: lazy
    initialisations happen outside the recording); the buffers are rewound after both. Unlike
    ``torch.cuda.graph``, no ``empty_cache`` and garbage collection at every recording (validation records
    a graph per batch, and emptying the allocator's cache would make training allocate anew); instead the
    graphs of a device and thread share one memory pool, which a graph's successor reuses (a graph is
    replayed only inside its own search, never beside another). The stream is left even when recording fails, and
    only this thread's unsafe calls end a recording (a data loader's pinning thread may run beside it)."""
    key = (torch.cuda.current_device(), threading.get_ident())
    if key not in _POOLS:
        _POOLS[key] = [torch.cuda.graph_pool_handle(), None, torch.cuda.Stream()]
    pool = _POOLS[key]
    side = pool[2]  # one stream for the pool's recordings: the allocator reuses a block on its own stream only
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(side):
            step.run()
            torch.cuda.synchronize()  # the warm-up's work done before the recording begins
            try:
                graph.capture_begin(pool=pool[0], capture_error_mode="thread_local")
            except RuntimeError as err:
                raise RecordingError(f"{type(err).__name__}: {str(err).splitlines()[0]}") from err
            try:
                step.run()
            except BaseException as err:
                with contextlib.suppress(RuntimeError):  # "a previous error during capture": the cause is err
                    graph.capture_end()
                if isinstance(err, RuntimeError):
                    raise RecordingError(f"{type(err).__name__}: {str(err).splitlines()[0]}") from err
                raise
            try:
                graph.capture_end()
            except RuntimeError as err:
                raise RecordingError(f"{type(err).__name__}: {str(err).splitlines()[0]}") from err
    finally:  # the buffers are not used again before the side stream's work on them is done
        torch.cuda.current_stream().wait_stream(side)
    step.reset()
    pool[1] = graph  # the pool keeps a user until the next recording (its predecessor released only now)
    return graph


FELL_BACK: dict[str, int] = {}  # why a step could not be recorded: how many searches fell back for it
FAILED: list[str] = []  # the reason recording failed in this process: graphs are off for the rest of it
RECORDED = 0  # searches that replayed a recorded step (the GPU benchmark checks that its figure is theirs)


def _fall_back(reason: str, first: bool) -> None:
    FELL_BACK[reason] = FELL_BACK.get(reason, 0) + 1
    if first:
        warnings.warn(
            f"greedy search decodes step by step without CUDA graphs for the rest of this process: its step "
            f"could not be recorded ({reason})",
            stacklevel=3,
        )


@torch.no_grad()
def graphed_greedy(model, src, limits, bos_id: int, eos_id: int, choose: GreedyStep.Choose) -> list[list[int]] | None:
    """Greedy search (``choose``: logits (rows, vocab) -> tokens (rows,)) of a padded CUDA batch src:
    (batch, src_len), each step one graph replay; token ids per sentence, without BOS/EOS. None where
    the caller decodes step by step instead: the model cannot hold a cache of this size (a learned position
    table shorter than ``limits``, which the search caps at the size a model reports through
    ``position_limits``), or a step could not
    be recorded, in this search or an earlier one (a warning says why, once: a failed recording may leave
    the allocator's bookkeeping behind, so it is not tried again)."""
    if FAILED:
        _fall_back(FAILED[0], first=False)
        return None
    # streams and graph on the batch's device, whichever is current (a CPU batch: the tests' stand-in graph)
    with torch.cuda.device(src.device) if src.is_cuda else contextlib.nullcontext():
        try:
            step = GreedyStep(model, src, limits, bos_id, eos_id, choose)
        except ValueError:
            return None
        try:
            graph = record(step)
        except RecordingError as err:
            FAILED.append(str(err))
            _fall_back(FAILED[0], first=True)
            return None
        for done in range(1, step.steps + 1):
            graph.replay()
            if done % READ_EVERY == 0 and done < step.steps and bool(step.ended.all()):
                break
        global RECORDED
        RECORDED += 1
        return step.tokens()
