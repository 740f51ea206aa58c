"""benchmarks/op_count.py: the operators of one update as a GPU runs it, counted on the CPU."""

from benchmarks import op_count
from benchmarks.stacked import RECIPE_SPEC, recipe_model
from nmt.modules.attention import MultiHeadAttention
from nmt.training.weight_casts import linear_weights


def test_the_count_takes_the_gpus_attention_and_shows_the_casts_saved(capsys):
    result = op_count.main(["--top", "40", "--loss-tokens", "64"])
    table = capsys.readouterr().out
    assert MultiHeadAttention.explicit_cpu_training  # restored for the rest of the process
    assert "| _scaled_dot_product_flash_attention_for_cpu_backward |" in table  # PyTorch's kernel, not the formula
    linear = len(linear_weights(recipe_model(RECIPE_SPEC.vocab, 0.0)))
    operators, casts = result["operators"], result["casts"]
    # each linear tensor's cast forward and its gradient's backward, less the concatenations and casts made
    # once in their place (the three projections of each self-attention are already one cast)
    assert casts["per_use"] - casts["once"] > linear
    assert operators["per_use"] - operators["once"] == casts["per_use"] - casts["once"] - 2  # + 2 cats
    assert 0 < result["validation_loss_pass"] < operators["once"]  # a forward pass, no backward, no step
    # the loss the GPU computes uncompiled passes over the logits less than the formula's autograd
    loss = result["loss_over_logits"]
    assert len(loss["fused"]["passes"]) < len(loss["formula"]["passes"])
    assert loss["fused"]["mb_kept"] <= loss["formula"]["mb_kept"]
