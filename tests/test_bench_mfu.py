"""The MFU benchmark's FLOP count against PyTorch's own FLOP counter."""

import json
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
    from nmt.utils.machine import cpu_name  # the CPU's model beside the figures, as the other benchmarks say it

    assert f"64 x 300 bf16 logits, {cpu_name()}, 1 threads: formula" in result.stdout and "blocked" in result.stdout


def test_an_mfu_variant_that_fails_is_a_failed_row_and_the_others_run(monkeypatch, capsys):
    """Variants for finding where a step's time goes (the dropout; on a GPU the attention kernel): one that
    fails (a kernel that cannot take the call, memory) is a row with its reason, and the others are measured."""
    from benchmarks import mfu

    real_measure = mfu.measure

    def fails_in_bf16(shape, precision, *args):
        if precision == "bf16":
            raise RuntimeError("No available kernel. Aborting execution.\nmore")
        return real_measure(shape, precision, *args)

    monkeypatch.setattr(mfu, "measure", fails_in_bf16)
    small = "--d-model 32 --layers 1 --heads 4 --ffn 48 --vocab 60 --batch 2 --src-len 5 --tgt-len 4 --steps 1"
    mfu.main([*small.split(), "--precision", "32", "bf16", "--dropout", "0"])
    out = capsys.readouterr().out
    measured, failed = (json.loads(line) for line in out.splitlines() if line.startswith("{"))
    assert measured["dropout"] == 0.0 and measured["attention"] == "default" and measured["step_ms"] > 0
    assert failed["error"] == "RuntimeError: No available kernel. Aborting execution."
    assert "| 32 x 1+1 | bf16 | failed: RuntimeError: No available kernel" in out
    with pytest.raises(SystemExit):  # a CPU trains with attention written out: no kernel to choose
        mfu.main([*small.split(), "--attention", "cudnn"])
    assert "on a GPU only" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # the second model's row was an IndexError, after the first model's rows were measured
        (["--d-model", "64", "32", "--layers", "1"], "--layers: give one per --d-model (2), got 1"),
        (["--json", "."], "--json=.: a folder, not a file"),
        (["--steps", "0"], "--steps and --batch: at least 1"),
    ],
)
def test_bad_options_are_said_before_any_model_is_measured(capsys, argv, said):
    from benchmarks import mfu

    with pytest.raises(SystemExit):
        mfu.main(argv)
    assert said in capsys.readouterr().err
