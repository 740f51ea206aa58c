"""compile=true: the compiled model computes what the plain one does, for batches of different shapes,
and keeps the plain model's parameter names (checkpoints load either way)."""

import pytest
import torch

from benchmarks.systems import our_transformer

pytestmark = pytest.mark.slow


def test_compiled_model_matches_eager():
    torch.manual_seed(0)
    model = our_transformer(vocab=60, d_model=32, heads=4, layers=2, ffn=64, dropout=0.0).eval()
    names = list(model.state_dict())
    expected = []
    shapes = [(3, 7, 5), (2, 11, 9)]
    batches = [(torch.randint(4, 60, (b, s)), torch.randint(4, 60, (b, t))) for b, s, t in shapes]
    with torch.no_grad():
        expected = [model(src, tgt) for src, tgt in batches]
        model.compile(dynamic=True)
        got = [model(src, tgt) for src, tgt in batches]
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    assert list(model.state_dict()) == names
