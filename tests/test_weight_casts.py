"""Linear weights cast once per update (``cast_weights_once``) against autocast's cast at each use: the same
loss and gradients bit for bit (a tied table's gradient summed in another order), fewer casts, the same run."""

from functools import partial

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nmt.models.rnn import RNNSeq2Seq
from nmt.models.transformer import Transformer
from nmt.models.transformer_lm import TransformerLM
from nmt.modules.loss import smoothed_cross_entropy_sums
from nmt.modules.norm import LayerNorm
from nmt.modules.position import SinusoidalPosition
from nmt.modules.rnn_attention import AdditiveAttention
from nmt.training import weight_casts
from nmt.training.weight_casts import CastOnce, linear_weights
from tests.conftest import NO_FINAL_SCORES, compose_train

VOCAB = 50


class Casts(TorchDispatchMode):
    """Counts the dtype casts dispatched."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func.overloadpacket.__name__ == "_to_copy"
        return func(*args, **(kwargs or {}))


def transformer(tie: str) -> Transformer:
    torch.manual_seed(0)
    return Transformer(
        VOCAB, VOCAB, 0, SinusoidalPosition, LayerNorm, d_model=32, num_heads=4, encoder_layers=2,
        decoder_layers=2, ffn_dim=64, dropout=0.0, tie_embeddings=tie,
    )  # fmt: skip


def language_model() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(VOCAB, 0, SinusoidalPosition, LayerNorm, d_model=32, num_heads=4, num_layers=2,
                         ffn_dim=64, dropout=0.0, tie_output=False)  # fmt: skip


def rnn() -> RNNSeq2Seq:
    torch.manual_seed(0)
    return RNNSeq2Seq(VOCAB, VOCAB, 0, AdditiveAttention, embed_dim=16, hidden_size=24, dropout=0.0)


def update(model, call, inputs, target, autocast=True):
    """One forward and backward pass of ``call`` under bf16 autocast: the loss, every gradient by name, and
    the casts it dispatched."""
    model.zero_grad(set_to_none=True)
    with Casts() as casts:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = call(*inputs)
        loss, _ = smoothed_cross_entropy_sums(logits.reshape(-1, VOCAB), target.reshape(-1), 0.1, 0)
        loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, casts.count


def batch(decoder_only: bool = False):
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(3, VOCAB, (4, 7), generator=generator)
    tgt = torch.randint(3, VOCAB, (4, 6), generator=generator)
    src[0, 5:], tgt[1, 4:] = 0, 0  # padding
    return ((tgt[:, :-1],) if decoder_only else (src, tgt[:, :-1])), tgt[:, 1:]


@pytest.mark.parametrize("build", [partial(transformer, "none"), language_model, rnn], ids=["transformer", "lm", "rnn"])
def test_one_update_equals_autocasts_bit_for_bit_with_fewer_casts(build):
    model = build()
    inputs, target = batch(decoder_only=build is language_model)
    loss, grads, casts = update(model, model, inputs, target)
    loss_once, grads_once, casts_once = update(model, CastOnce(model), inputs, target)
    assert torch.equal(loss_once, loss)
    assert grads_once.keys() == grads.keys() == {name for name, _ in model.named_parameters()}
    for name, grad in grads.items():
        assert torch.equal(grads_once[name], grad), name
    linear = len(linear_weights(model))
    assert linear > 0
    # autocast casts each linear tensor where it is used (three concatenated projections once) and its
    # gradient back; once: one cast each way in all
    assert casts_once < casts - linear, (casts_once, casts, linear)


def test_a_tied_table_takes_the_same_gradient_summed_in_another_order():
    """The output layer's weight is the embedding table (tie_embeddings=all): the embeddings read the float32
    table, the output layer its one cast copy; the table's gradient sums the same three parts, the output
    layer's last, so it may differ in the last bits, and every other gradient is the same bit for bit."""
    model = transformer("all")
    assert "output.weight" in linear_weights(model) and "src_embed.weight" not in linear_weights(model)
    inputs, target = batch()
    loss, grads, _ = update(model, model, inputs, target)
    loss_once, grads_once, _ = update(model, CastOnce(model), inputs, target)
    assert torch.equal(loss_once, loss)
    for name, grad in grads.items():
        if name == "src_embed.weight":  # the one table
            torch.testing.assert_close(grads_once[name], grad, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(grads_once[name], grad), name


def test_without_autocast_the_model_is_called_as_it_is():
    model = transformer("decoder")
    inputs, target = batch()
    loss, grads, casts = update(model, model, inputs, target, autocast=False)
    loss_once, grads_once, casts_once = update(model, CastOnce(model), inputs, target, autocast=False)
    assert torch.equal(loss_once, loss) and casts_once == casts
    assert all(torch.equal(grads_once[name], grad) for name, grad in grads.items())
    assert CastOnce(model).pad_id == model.pad_id  # other attributes are the model's


def test_an_unused_linear_layer_gets_no_gradient_as_under_autocast():
    """Not zeros: the optimiser skips a parameter without a gradient (no weight decay, no moments' step)."""
    model = transformer("none")
    model.unused = torch.nn.Linear(32, 32)
    inputs, target = batch()
    _, grads, _ = update(model, CastOnce(model), inputs, target)
    assert "unused.weight" in linear_weights(model)
    assert all(p.grad is None for p in model.unused.parameters())
    assert grads["output.weight"].abs().sum() > 0  # the layers in use have theirs


def test_where_it_applies_and_where_it_is_refused(monkeypatch, tmp_path):
    from nmt.training.config import ConfigError, check_config

    where = {"precision": "bf16-mixed", "compile": False, "world_size": 1, "graph_updates": True}
    assert weight_casts.applies(**where)
    for key, value in {"precision": "32-true", "compile": True, "world_size": 2, "graph_updates": False}.items():
        assert not weight_casts.applies(**{**where, key: value}), key
    check_config(compose_train("cast_weights_once=true", "trainer.precision=bf16-mixed"))
    with pytest.raises(ConfigError, match=r"trainer.precision=32-true casts none"):
        check_config(compose_train("cast_weights_once=true", "trainer.precision=32-true"))
    with pytest.raises(ConfigError, match=r"compile=true fuses the casts"):
        check_config(compose_train("cast_weights_once=true", "trainer.precision=bf16-mixed", "compile=true"))
    with pytest.raises(ConfigError, match=r"cast_weights_once.*true, false or null"):
        check_config(compose_train("cast_weights_once=auto", "trainer.precision=bf16-mixed"))
    # precision=auto: refused once resolved, before any data is read or folder made
    from nmt.training import train as training

    monkeypatch.setattr(training, "resolve_precision", lambda precision, accelerator: "32-true")
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"trainer.precision=32-true casts none"):
        training.train(compose_train("cast_weights_once=true", "trainer.precision=auto", f"run_dir={run_dir}"))
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_bf16_mixed_run_that_casts_once_ends_as_autocasts(monkeypatch, tmp_path):
    """Two toy runs from the same seed under bf16-mixed (untied embeddings), updated by Lightning, one with
    autocast's own casts: the same weights and optimiser state at the end, bit for bit; the first cast once
    at every update, the second never (null, the default, casts once only where updates are replayed)."""
    from nmt.training.train import train

    calls = []
    real = weight_casts._CastAll.apply
    monkeypatch.setattr(weight_casts._CastAll, "apply", lambda *a: calls.append(1) or real(*a))
    ends, updates = {}, {}
    for setting in ("true", "null"):
        calls.clear()
        cfg = compose_train(
            "trainer.precision=bf16-mixed",
            "model.tie_embeddings=none",
            "trainer.max_epochs=2",
            "validation.bleu_every_n_epochs=0",
            "checkpoint.monitor=val_loss",
            "checkpoint.mode=min",
            "early_stopping.monitor=val_loss",
            "early_stopping.mode=min",
            *NO_FINAL_SCORES,
            f"cast_weights_once={setting}",
            f"run_dir={tmp_path / setting}",
        )
        torch.manual_seed(0)
        train(cfg)
        ends[setting] = torch.load(tmp_path / setting / "checkpoints" / "last.ckpt", weights_only=True)
        updates[setting] = len(calls)
    steps = ends["true"]["global_step"]
    assert steps == ends["null"]["global_step"] > 5
    assert updates == {"true": steps, "null": 0}
    for name, value in ends["null"]["state_dict"].items():
        assert torch.equal(ends["true"]["state_dict"][name], value), name
    (adam,), (adam_once,) = ends["null"]["optimizer_states"], ends["true"]["optimizer_states"]
    for index, values in adam["state"].items():
        for key, value in values.items():
            assert torch.equal(adam_once["state"][index][key], value), (index, key)


@pytest.mark.slow
def test_replayed_updates_cast_once_by_default_and_end_as_lightnings_with_autocasts(monkeypatch, tmp_path):
    """graph_updates=true under bf16-mixed (its recording's stand-in on the CPU): null casts once there, and
    the run ends bit for bit where the run Lightning updates with autocast's own casts ends."""
    from tests.test_graph_updates import lightning_and_graphed_runs, lightning_runs_with_a_tensor_rate, on_the_cpu

    recordings = on_the_cpu(monkeypatch)
    calls = []
    real = weight_casts._CastAll.apply
    monkeypatch.setattr(weight_casts._CastAll, "apply", lambda *a: calls.append(1) or real(*a))
    lightning_runs_with_a_tensor_rate(monkeypatch, capturable=False)
    eager, graphed = lightning_and_graphed_runs(
        tmp_path, "trainer.precision=bf16-mixed", "model.tie_embeddings=none", before_each=calls.clear
    )
    steps = graphed["global_step"]
    assert steps == eager["global_step"] > 10 and recordings
    assert len(calls) == steps  # the graphed run's: each eager update and each replay (the stand-in runs it)
    for name, value in eager["state_dict"].items():
        assert torch.equal(graphed["state_dict"][name], value), name
