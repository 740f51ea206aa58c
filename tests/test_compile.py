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
    CUDA graphs of reduce-overhead are recorded per shape without a recompile, on a GPU only). The first
    batch has equal source and target lengths, as a sorted corpus's batches mostly do: Dynamo's duck sizing
    would give both one symbol, and the first batch whose lengths differ would be compiled again."""
    from torch.fx.experimental import _config as fx_config

    from nmt.training.compile import compile_model

    with fx_config.patch(use_duck_shape=fx_config.use_duck_shape):  # compile_model turns it off: restored after
        _one_graph_for_every_shape(compile_model)


def _one_graph_for_every_shape(compile_model) -> None:
    from torch._dynamo.utils import counters

    limit = torch._dynamo.config.recompile_limit
    shapes = [(3, 6, 6)] + [(2 + i % 3, 5 + i, 4 + (2 * i) % 7) for i in range(limit + 2)]
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


def test_validation_runs_a_compiled_model_eagerly():
    """The eval mode of a compiled model would be compiled a second time (Dynamo guards on ``training``),
    for a validation of a few batches: the module's validation step runs it eagerly, compiling nothing."""
    from types import SimpleNamespace

    from torch._dynamo.utils import counters

    from nmt.training.module import TaskModule

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = our_transformer(vocab=60, d_model=32, heads=4, layers=1, ffn=64, dropout=0.0)
    model.compile(backend="aot_eager", dynamic=True)  # Dynamo's side alone: no kernels to build
    src, tgt = torch.randint(4, 60, (3, 7)), torch.randint(4, 60, (3, 6))
    model(src, tgt).sum().backward()
    assert counters["stats"]["unique_graphs"] == 1  # training compiled
    model.eval()
    seen = []
    task = SimpleNamespace(validation_step=lambda module, batch, index: seen.append(model(*batch)))
    with torch.no_grad():
        TaskModule.validation_step(SimpleNamespace(task=task), (src, tgt), 0)
        expected = model.forward(src, tgt)  # the plain module's forward, not the compiled call
    torch.testing.assert_close(seen[0], expected)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["recompiles"])  # nothing compiled for eval
    with torch.no_grad():
        model(src, tgt)  # outside validation the eval mode is compiled: the test would see it
    assert counters["stats"]["unique_graphs"] == 2


def test_the_compiled_loss_gives_the_written_out_formula_and_its_gradient_for_every_batch_shape():
    """compile=true compiles the loss's path off the CPU (the formula written out, several passes over the
    logits) with the model: Inductor's kernels must give the same loss, NLL and gradient, in fp32 and from
    bf16 logits as autocast gives them, for token counts of every batch, compiled once."""
    from torch._dynamo.utils import counters
    from torch.fx.experimental import _config as fx_config

    from nmt.modules.loss import LabelSmoothedCrossEntropy, smoothed_cross_entropy_sums
    from nmt.training.compile import compile_model

    loss = LabelSmoothedCrossEntropy(0.1, pad_id=0)
    torch._dynamo.reset()
    counters.clear()
    with fx_config.patch(use_duck_shape=fx_config.use_duck_shape):  # compile_model turns it off: restored after
        compile_model(torch.nn.Linear(2, 2), True, loss)
        assert loss._sums is not smoothed_cross_entropy_sums
        assert loss._compiled  # off the CPU the compiled formula then replaces the fused loss
        g = torch.Generator().manual_seed(4)
        for dtype in (torch.float32, torch.bfloat16):
            for tokens in (37, 90, 64):
                logits = (3 * torch.randn(tokens, 50, generator=g)).to(dtype)
                target = torch.randint(1, 50, (tokens,), generator=g)
                target[::7] = 0  # padding
                results = []
                for sums in (smoothed_cross_entropy_sums, loss._sums):
                    x = logits.clone().requires_grad_()
                    value, nll = sums(x, target, 0.1, 0)
                    value.backward()
                    results.append((value.detach(), nll.detach(), x.grad))
                for expected, got in zip(*results, strict=True):
                    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
                    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)
    assert counters["frames"]["ok"] <= 2, dict(counters["frames"])  # one per dtype, not one per shape


def test_compile_layers_compiles_one_graph_per_kind_of_layer_for_every_shape(monkeypatch):
    """compile=layers: each repeated layer compiled on its own, the layers of one kind sharing one compile
    (the encoder's and the decoder's: two graphs for four layers and every batch shape), the model around
    them left eager, the outputs and parameter names those of the plain model."""
    from torch._dynamo.utils import counters
    from torch.fx.experimental import _config as fx_config

    from nmt.training.compile import compile_model

    real = torch.nn.Module.compile
    # Dynamo's side alone (no kernels to build): what is compiled, and how often, is Dynamo's choice
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: real(self, backend="aot_eager", **kw))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = our_transformer(vocab=60, d_model=32, heads=4, layers=2, ffn=64, dropout=0.0).eval()
    names = list(model.state_dict())
    shapes = [(3, 6, 6), (2, 9, 5), (4, 5, 11), (3, 12, 7)]
    batches = [(torch.randint(4, 60, (b, s)), torch.randint(4, 60, (b, t))) for b, s, t in shapes]
    with torch.no_grad(), fx_config.patch(use_duck_shape=fx_config.use_duck_shape):
        expected = [model(src, tgt) for src, tgt in batches]
        compile_model(model, "layers")
        got = [model(src, tgt) for src, tgt in batches]
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    layers = model.repeated_layers()
    assert len(layers) == 4 and all(layer._compiled_call_impl is not None for layer in layers)
    assert model._compiled_call_impl is None  # the embeddings and the output projection stay eager
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["recompiles"])
    assert not counters["recompiles"], dict(counters["recompiles"])
    assert list(model.state_dict()) == names


def test_compile_layers_is_refused_by_a_model_without_repeated_layers():
    from benchmarks.systems import our_rnn
    from nmt.training.compile import compile_model

    with pytest.raises(ValueError, match=r"compile=layers: RNNSeq2Seq has no repeated layers .* compile=true"):
        compile_model(our_rnn(vocab=60, hidden=16, layers=1), "layers")


def test_compile_layers_is_refused_before_any_data_for_a_model_class_without_repeated_layers():
    from nmt.training.config import ConfigError, check_config

    from .conftest import compose_train

    with pytest.raises(ConfigError, match=r"compile=layers: RNNSeq2Seq has no repeated layers .* compile=true"):
        check_config(compose_train("model=rnn", "compile=layers"))
    check_config(compose_train("model=transformer", "compile=layers"))  # a Transformer lists its layers


@pytest.mark.parametrize("kind", ["transformer", "lm"])
def test_compile_layers_trains_as_the_plain_model_one_graph_per_kind_of_layer(monkeypatch, kind):
    """In training (the setting's use): the loss and every gradient those of the plain model, for batches
    of several shapes, with one compiled graph per kind of layer (the forward's; the backward is compiled
    from it, never traced again)."""
    import copy

    from torch._dynamo.utils import counters
    from torch.fx.experimental import _config as fx_config

    from nmt.data.tokenizer import PAD_ID
    from nmt.modules.loss import LabelSmoothedCrossEntropy
    from nmt.training.compile import compile_model

    from .test_lm import language_model

    real = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: real(self, backend="aot_eager", **kw))
    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    if kind == "lm":
        plain, kinds = language_model(dropout=0.0).train(), 1
        shapes = [(3, 6), (2, 9), (4, 5)]
        batches = [(torch.randint(4, 23, (b, t + 1)),) for b, t in shapes]
    else:
        plain, kinds = our_transformer(vocab=60, d_model=32, heads=4, layers=2, ffn=64, dropout=0.0).train(), 2
        shapes = [(3, 6, 6), (2, 9, 5), (4, 5, 11)]
        batches = [(torch.randint(4, 60, (b, s)), torch.randint(4, 60, (b, t + 1))) for b, s, t in shapes]
    compiled = copy.deepcopy(plain)
    loss = LabelSmoothedCrossEntropy(0.1, PAD_ID)

    def loss_and_grads(model, batch):
        *src, tgt = batch
        model.zero_grad(set_to_none=True)
        value = loss(model(*src, tgt[:, :-1]), tgt[:, 1:])[0]
        value.backward()
        return value.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    with fx_config.patch(use_duck_shape=fx_config.use_duck_shape):
        compile_model(compiled, "layers")
        for batch in batches:
            expected, expected_grads = loss_and_grads(plain, batch)
            got, grads = loss_and_grads(compiled, batch)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            assert grads.keys() == expected_grads.keys()
            for name, grad in grads.items():
                torch.testing.assert_close(grad, expected_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    assert counters["stats"]["unique_graphs"] == kinds, dict(counters["recompiles"])
    assert not counters["recompiles"], dict(counters["recompiles"])
