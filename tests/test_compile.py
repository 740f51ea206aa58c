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


def test_compile_settings_keep_one_graph_across_many_batch_shapes():
    """Token batches come in many shapes. A frame compiled for static shapes is recompiled for each new one
    until Dynamo's recompile limit, then runs eagerly: both settings must compile once for all of them (the
    CUDA graphs of reduce-overhead are recorded per shape without a recompile, on a GPU only)."""
    from torch._dynamo.utils import counters

    from nmt.training.train import compile_model

    limit = torch._dynamo.config.recompile_limit
    shapes = [(2 + i % 3, 5 + i, 4 + (2 * i) % 7) for i in range(limit + 2)]
    for setting in ("reduce-overhead", True):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = our_transformer(vocab=60, d_model=32, heads=4, layers=1, ffn=64, dropout=0.0).eval()
        batches = [(torch.randint(4, 60, (b, s)), torch.randint(4, 60, (b, t))) for b, s, t in shapes]
        with torch.no_grad():
            expected = [model(src, tgt) for src, tgt in batches]
            compile_model(model, setting)
            got = [model(src, tgt) for src, tgt in batches]
        for e, g in zip(expected, got, strict=True):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
        assert counters["frames"]["ok"] <= 2, (setting, dict(counters["frames"]), dict(counters["recompiles"]))
        assert not counters["recompiles"], (setting, dict(counters["recompiles"]))
