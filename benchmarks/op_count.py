"""``python -m benchmarks.op_count [--config <train.py overrides>]``: the operators one training update of a
run's model dispatches on a GPU's path, counted on any machine.

On a GPU a tiny model's update is bound by the count of its kernels, not by their arithmetic (BENCHMARKS.md:
about 8 ms of device time for an update whose products need a fraction of a millisecond). Every operator that
is not a view launches at least one kernel, so the count is the measure of what a change removes, and it
needs no GPU. One update as a GPU trains it: bf16 autocast, PyTorch's fused attention (the path a CPU's
training would otherwise leave for the written-out formula), the loss as written out for a GPU, the backward
pass and fused AdamW's step; counted twice, with autocast's casts at each use and with the weights cast
once (``cast_weights_once``); and validation's loss pass (eval mode, no gradients, under autocast). The count
does not depend on the batch's size, so a small synthetic batch is used; dropout is 0 by default (a CPU draws
its masks in four operators, a GPU in one).

Prints a table of the operators (not views) by count, and one JSON line with the totals.
"""

import argparse
import collections
import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.gpu_measures import cpu_name
from benchmarks.stacked import RECIPE_SPEC, configured_spec, recipe_model, synthetic_batch
from nmt.modules.attention import MultiHeadAttention
from nmt.modules.loss import smoothed_cross_entropy_sums
from nmt.training.weight_casts import CastOnce


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


def count_update(spec, cast_once: bool, dropout: float) -> Operators:
    """The operators of one update (after one uncounted update that makes the optimiser's state)."""
    torch.manual_seed(0)
    model = recipe_model(spec.vocab, dropout, spec.model).train()
    call = CastOnce(model) if cast_once else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    src, tgt_in, tgt_out = synthetic_batch(8, 12, 10, spec.vocab, torch.device("cpu"))

    def update() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = call(src, tgt_in)
        loss_sum, _ = smoothed_cross_entropy_sums(logits.flatten(0, 1), tgt_out.flatten(), spec.smoothing, 0)
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
        smoothed_cross_entropy_sums(logits.flatten(0, 1), tgt_out.flatten(), spec.smoothing, 0)
    return ops


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", nargs="*", default=None, help="train.py overrides (default: the tiny recipe)")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=25, help="operators listed")
    args = parser.parse_args(argv)
    spec = configured_spec(args.config) if args.config else RECIPE_SPEC
    MultiHeadAttention.explicit_cpu_training = False  # the fused attention a GPU trains with
    try:
        per_use, once = count_update(spec, False, args.dropout), count_update(spec, True, args.dropout)
        validation = count_validation_loss(spec)
    finally:
        MultiHeadAttention.explicit_cpu_training = True
    print("| operator | autocast's casts at each use | cast_weights_once |\n|---|---|---|")
    for name, count in per_use.counts.most_common(args.top):
        print(f"| {name} | {count} | {once.counts[name]} |")
    result = {
        "model": spec.name,
        "dropout": args.dropout,
        "operators": {"per_use": sum(per_use.counts.values()), "once": sum(once.counts.values())},
        "casts": {"per_use": per_use.counts["_to_copy"], "once": once.counts["_to_copy"]},
        "views": {"per_use": per_use.views, "once": once.views},
        "validation_loss_pass": sum(validation.counts.values()),
        "torch": torch.__version__,
        "machine": cpu_name(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
