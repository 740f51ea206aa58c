"""The MFU benchmark's FLOP count against PyTorch's own FLOP counter."""

import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.mfu import Shape, forward_flops, synthetic_batch, training_flops
from benchmarks.systems import our_transformer


@pytest.mark.parametrize(("batch", "src_len", "tgt_len"), [(2, 5, 7), (3, 9, 4)])
def test_flop_count_matches_pytorch_counter(batch, src_len, tgt_len):
    shape = Shape(d_model=32, layers=2, heads=4, ffn=48, vocab=50)
    model = our_transformer(shape.vocab, shape.d_model, shape.heads, shape.layers, shape.ffn, dropout=0.0)
    for module in model.modules():
        if hasattr(module, "fused"):
            # the explicit formula: the counter does not register the CPU fused kernel; both paths run the
            # same products (tested in test_layers)
            module.fused = False
    src, tgt_in, _ = synthetic_batch(shape, batch, src_len, tgt_len, "cpu")
    counter = FlopCounterMode(display=False)
    with counter:
        model(src, tgt_in).sum().backward()
    # the counter sees every matrix product, forward and backward
    assert counter.get_total_flops() == training_flops(shape, batch, src_len, tgt_len)
    with FlopCounterMode(display=False) as forward_only, torch.no_grad():
        model(src, tgt_in)
    assert forward_only.get_total_flops() == forward_flops(shape, batch, src_len, tgt_len)


def test_the_loss_benchmark_times_both_paths_from_the_command_line():
    command = [sys.executable, *"-m benchmarks.loss --threads 1 --tokens 64 --vocab 300 --repeats 1".split()]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "64 x 300 bf16 logits, 1 threads: formula" in result.stdout and "blocked" in result.stdout
