"""The attention-entropy diagnostic (benchmarks/attention_entropy.py) against entropies computed by hand."""

import math

import pytest
import torch

from benchmarks.attention_entropy import entropies, mean_entropy
from benchmarks.stacked import recipe_model
from nmt.data.tokenizer import PAD_ID


def test_mean_entropy_of_even_and_of_one_hot_attention():
    even = torch.full((2, 3, 4, 5), 1 / 5)  # (batch, heads, queries, keys)
    one_hot = torch.zeros(2, 3, 4, 5)
    one_hot[..., 2] = 1.0
    queries = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])  # padded queries are left out
    assert mean_entropy(even, queries) == pytest.approx(math.log(5))
    assert mean_entropy(one_hot, queries) == pytest.approx(0.0, abs=1e-6)


def test_a_decoder_whose_queries_are_zero_attends_evenly_over_each_source():
    """The model's own measure (logged at each validation) and the diagnostic's, against the even spread
    worked out by hand."""
    torch.manual_seed(0)
    model = recipe_model(40, 0.0, d_model=16, num_heads=2, encoder_layers=2, decoder_layers=2, ffn_dim=24).eval()
    for layer in model.decoder:  # a zero query scores every key alike: attention even over the real source
        torch.nn.init.zeros_(layer.cross_attn.q_proj.weight)
        torch.nn.init.zeros_(layer.cross_attn.q_proj.bias)
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, PAD_ID, PAD_ID]])  # sources of 5 and 3 tokens
    tgt_in = torch.tensor([[2, 11, 12], [2, 13, PAD_ID]])  # 3 and 2 real queries
    measured = entropies(model, src, tgt_in)
    even = (3 * math.log(5) + 2 * math.log(3)) / 5  # each real query over its own source
    by_layer, model_even = model.cross_attention_entropy(src, tgt_in)
    assert model_even.item() == pytest.approx(even, abs=1e-5)
    assert by_layer.tolist() == pytest.approx([even, even], abs=1e-4)
    assert measured["even_over_the_source"] == pytest.approx(even, abs=1e-3)
    assert measured["cross_attention_by_layer"] == pytest.approx([even, even], abs=1e-3)
    assert all(0 <= e <= math.log(5) for e in measured["encoder_self_attention_by_layer"])
    assert not any(layer.cross_attn.keep_weights for layer in model.decoder)  # put back as found


def test_a_model_without_cross_attention_is_refused():
    with pytest.raises(ValueError, match="no Transformer decoder with cross-attention"):
        entropies(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
