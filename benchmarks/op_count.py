"""``python -m benchmarks.op_count [--config <train.py overrides>]``: the operators one training update of a
run's model dispatches on a GPU's path, counted on any machine.

On a GPU a tiny model's update is bound by the count of its kernels, not by their arithmetic (BENCHMARKS.md:
about 8 ms of device time for an update whose products need a fraction of a millisecond). Every operator that
is not a view launches at least one kernel, so the count is the measure of what a change removes, and it
needs no GPU. One update as a GPU trains it: bf16 autocast, PyTorch's fused attention (the path a CPU's
training would otherwise leave for the written-out formula), the loss as a GPU computes it uncompiled
(``FusedSmoothedCrossEntropy``), the backward pass and fused AdamW's step; counted with autocast's casts at
each use, with the weights cast once (``cast_weights_once``), and once more with the loss as the formula
differentiated op by op (``smoothing.fused=false``); and validation's loss pass (eval mode, no gradients,
under autocast). The count does not depend on the batch's size, so a small synthetic batch is used; dropout
is 0 by default (a CPU draws its masks in four operators, a GPU in one).

Prints a table of the operators (not views) by count; the loss's passes over the (tokens x vocab) logits at
the recipe's batch size, with the bytes they move (the fused loss against the formula's autograd); and one
JSON line with the totals.
"""

import argparse
import collections
import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.options import run_main
from benchmarks.stacked import RECIPE_SPEC, configured_spec, recipe_model, synthetic_batch
from nmt.modules.attention import MultiHeadAttention
from nmt.modules.loss import FusedSmoothedCrossEntropy, smoothed_cross_entropy_sums
from nmt.training.weight_casts import CastOnce
from nmt.utils.machine import cpu_name


class Operators(TorchDispatchMode):
    """Counts the operators dispatched, views apart."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter = collections.Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view:
            self.views += 1
        else:
            self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


# indexed operators touch one element a row of a (tokens x vocab) input; the NLL's gradient is zero-filled whole
_INDEXED = ("gather", "scatter_add_", "nll_loss_forward", "nll_loss_backward")


class LogitTraffic(TorchDispatchMode):
    """The operators that read or write a tensor of the logits' size, and the bytes of those tensors: the
    memory traffic of the passes over the logits (an expanded per-row vector counts its own few bytes, an
    allocation nothing), which bounds the loss's kernels on a GPU."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.ops, self.bytes = numel, [], 0

    def _full_size_bytes(self, tensors) -> int:
        full = [t for t in tensors if isinstance(t, torch.Tensor) and t.numel() == self.numel]
        return sum(min(t.untyped_storage().nbytes(), t.numel() * t.element_size()) for t in full)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if func.is_view or name.startswith(("empty", "new_")):  # allocations: no pass over data
            return out
        outs = out if isinstance(out, (tuple, list)) else (out,)
        inputs = [*args, *(value for key, value in (kwargs or {}).items() if key != "out")]  # out=: written
        reads = [] if name in _INDEXED else inputs
        writes = [] if name == "scatter_add_" else outs
        moved = self._full_size_bytes(reads) + self._full_size_bytes(writes)
        if moved:
            self.ops.append(name)
            self.bytes += moved
        return out


def loss_traffic(sums, logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> tuple[int, list[str], int]:
    """The loss ``sums`` (forward and backward, under bf16 autocast) over (tokens, vocab) ``logits``: (bytes
    autograd keeps for backward, the operators that pass over the logits' size, the bytes they move)."""
    saved = {}  # by storage: a tensor saved by two operators is kept once

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = logits.clone().requires_grad_()
    with LogitTraffic(logits.numel()) as traffic, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(logits.device.type, dtype=torch.bfloat16):
            loss_sum, _ = sums(x, target, smoothing, 0)
        loss_sum.backward()
    return sum(saved.values()), traffic.ops, traffic.bytes


def count_update(spec, cast_once: bool, dropout: float, fused_loss: bool = True) -> Operators:
    """The operators of one update (after one uncounted update that makes the optimiser's state)."""
    sums = FusedSmoothedCrossEntropy.apply if fused_loss else smoothed_cross_entropy_sums
    torch.manual_seed(0)
    model = recipe_model(spec.vocab, dropout, spec.model).train()
    call = CastOnce(model) if cast_once else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    src, tgt_in, tgt_out = synthetic_batch(8, 12, 10, spec.vocab, torch.device("cpu"))

    def update() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = call(src, tgt_in)
        loss_sum, _ = sums(logits.flatten(0, 1), tgt_out.flatten(), spec.smoothing, 0)
        (loss_sum / tgt_out.numel()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    update()
    with Operators() as ops:
        update()
    return ops


def count_validation_loss(spec) -> Operators:
    """The operators of validation's loss pass over a batch (eval mode, no gradients, under autocast)."""
    torch.manual_seed(0)
    model = recipe_model(spec.vocab, 0.0, spec.model).eval()
    src, tgt_in, tgt_out = synthetic_batch(8, 12, 10, spec.vocab, torch.device("cpu"))
    with torch.no_grad(), Operators() as ops:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(src, tgt_in)
        FusedSmoothedCrossEntropy.apply(logits.flatten(0, 1), tgt_out.flatten(), spec.smoothing, 0)
    return ops


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="*", default=None, help="train.py overrides (default: the tiny recipe)")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=25, help="operators listed")
    parser.add_argument(
        "--loss-tokens", type=int, default=8192, help="target tokens of the loss's traffic (0: not measured)"
    )
    args = parser.parse_args(argv)
    spec = configured_spec(args.config) if args.config else RECIPE_SPEC
    MultiHeadAttention.explicit_cpu_training = False  # the fused attention a GPU trains with
    try:
        per_use, once = count_update(spec, False, args.dropout), count_update(spec, True, args.dropout)
        formula = count_update(spec, True, args.dropout, fused_loss=False)
        validation = count_validation_loss(spec)
    finally:
        MultiHeadAttention.explicit_cpu_training = True
    print("| operator | autocast's casts at each use | cast_weights_once | and the loss as the formula |")
    print("|---|---|---|---|")
    names = [name for name, _ in (per_use.counts + formula.counts).most_common(args.top)]
    for name in names:
        print(f"| {name} | {per_use.counts[name]} | {once.counts[name]} | {formula.counts[name]} |")
    traffic = {}
    if args.loss_tokens:
        g = torch.Generator().manual_seed(0)
        logits = torch.randn(args.loss_tokens, spec.vocab, generator=g).bfloat16()
        target = torch.randint(1, spec.vocab, (args.loss_tokens,), generator=g)
        size = f"{args.loss_tokens} x {spec.vocab}"
        print(f"\n| the loss over {size} bf16 logits | passes | MB moved | MB kept for backward |")
        print("|---|---|---|---|")
        for name, sums in (("fused", FusedSmoothedCrossEntropy.apply), ("formula", smoothed_cross_entropy_sums)):
            kept, ops, moved = loss_traffic(sums, logits, target, spec.smoothing)
            traffic[name] = {"passes": ops, "mb_moved": round(moved / 1e6), "mb_kept": round(kept / 1e6)}
            print(f"| {name} | {len(ops)}: {', '.join(ops)} | {moved / 1e6:,.0f} | {kept / 1e6:,.0f} |")
    result = {
        "model": spec.name,
        "dropout": args.dropout,
        "operators": {
            "per_use": sum(per_use.counts.values()),
            "once": sum(once.counts.values()),
            "once_formula_loss": sum(formula.counts.values()),
        },
        "casts": {"per_use": per_use.counts["_to_copy"], "once": once.counts["_to_copy"]},
        "views": {"per_use": per_use.views, "once": once.views},
        "validation_loss_pass": sum(validation.counts.values()),
        "loss_over_logits": {"tokens": args.loss_tokens, "vocab": spec.vocab, **traffic},
        "torch": torch.__version__,
        "machine": cpu_name(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_main(main)
