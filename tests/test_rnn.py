"""The RNN encoder-decoder: attention distributions, padding, teacher forcing, incremental decoding."""

import csv
import itertools
import json
import math
import re

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from nmt.data.tokenizer import PAD_ID
from nmt.decoding.search import beam_search, greedy
from nmt.decoding.settings import SearchConfig
from nmt.models.build import build_model
from nmt.training.config import check_config
from nmt.utils.instantiate import instantiate

from .conftest import CONF, compose_train
from .test_end_to_end import run

ATTENTIONS = sorted(p.stem for p in (CONF / "attention").glob("*.yaml"))
CELLS = ["gru", "lstm"]
VOCAB = 25
BOS, EOS = 2, 3


def make_rnn(attention="multiplicative", cell="gru", input_feeding=True, dropout=0.0, seed=0, **extra):
    torch.manual_seed(seed)
    cfg = OmegaConf.load(CONF / "model" / "rnn.yaml")
    cfg.attention = OmegaConf.load(CONF / "attention" / f"{attention}.yaml")
    cfg.update(cell=cell, embed_dim=16, hidden_size=24, input_feeding=input_feeding, dropout=dropout, **extra)
    return build_model(cfg, VOCAB, VOCAB).eval()


def batch(seed=1, batch_size=3, src_len=7, tgt_len=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (batch_size, src_len), generator=g)
    src[1, 5:] = PAD_ID
    return src, torch.randint(4, VOCAB, (batch_size, tgt_len), generator=g)


VARIANTS = list(itertools.product(ATTENTIONS, CELLS, [True, False]))


def test_attention_group_has_the_three_scoring_functions():
    assert set(ATTENTIONS) == {"dot", "multiplicative", "additive"}


@pytest.mark.parametrize("attention,cell,feeding", VARIANTS)
def test_attention_is_a_distribution_over_real_source_tokens(attention, cell, feeding):
    model = make_rnn(attention, cell, feeding)
    src, tgt = batch()
    weights = model.attention_maps(src, tgt)["attention"]  # (batch, 1, tgt_len, src_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 6))
    assert weights[1, :, :, 5:].abs().max() == 0


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_the_attention_spread_validation_logs_is_the_entropy_of_each_real_row(attention):
    """RNN runs logged no val_cross_attn_entropy (the Transformer's stalled-attention signal): the RNN's one
    attention gives it, against each real target row's entropy worked out by hand over its own source."""
    import math

    model = make_rnn(attention)
    src, tgt = batch()
    tgt[2, 4:] = PAD_ID  # padded target rows are left out
    entropy, even = model.cross_attention_entropy(src, tgt)
    weights = model.attention_maps(src, tgt)["attention"][:, 0]  # (batch, tgt_len, src_len)
    rows, evens = [], []
    for b in range(src.size(0)):
        length = int((src[b] != PAD_ID).sum())
        for t in range(tgt.size(1)):
            if tgt[b, t] != PAD_ID:
                rows.append(-sum(float(w) * math.log(float(w)) for w in weights[b, t, :length] if w > 0))
                evens.append(math.log(length))
    assert entropy.shape == (1,) and float(entropy[0]) == pytest.approx(sum(rows) / len(rows), abs=1e-5)
    assert float(even) == pytest.approx(sum(evens) / len(evens), abs=1e-6)
    assert all(r <= e + 1e-6 for r, e in zip(rows, evens, strict=True))


@pytest.mark.parametrize("attention,cell,feeding", VARIANTS)
def test_source_padding_does_not_change_outputs(attention, cell, feeding):
    model = make_rnn(attention, cell, feeding)
    src, tgt = batch()
    padded = torch.cat([src, torch.full((3, 3), PAD_ID)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), model(padded, tgt), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attention,cell,feeding", VARIANTS)
def test_teacher_forced_pass_equals_the_step_by_step_likelihood(attention, cell, feeding):
    """With teacher forcing 1 the training loss is the reference's likelihood under incremental decoding."""
    model = make_rnn(attention, cell, feeding, dropout=0.0, encoder_layers=2, decoder_layers=2)
    model.train()  # the training path (teacher forcing 1), with dropout 0 so the comparison is exact
    src, tgt = batch()
    full = model(src, tgt).log_softmax(-1)
    with torch.no_grad():
        state = model.encode(src)
        for t in range(tgt.size(1)):
            logits, state = model.decode_step(tgt[:, t], state)
            torch.testing.assert_close(logits.log_softmax(-1), full[:, t].detach(), atol=1e-5, rtol=1e-4)


def test_teacher_forcing_zero_feeds_back_the_model_s_own_predictions():
    """Ratio 0 in training (dropout off) is exactly a greedy rollout: each input is the previous argmax."""
    model = make_rnn(teacher_forcing=0.0)
    model.train()
    src, tgt = batch()
    free_running = model(src, tgt).argmax(-1)  # (batch, tgt_len)
    model.eval()
    with torch.no_grad():
        state, prev = model.encode(src), torch.full((3,), BOS)
        for t in range(tgt.size(1)):
            logits, state = model.decode_step(tgt[:, 0] if t == 0 else prev, state)
            prev = logits.argmax(-1)
            assert torch.equal(prev, free_running[:, t])


def test_teacher_forcing_ratio_decays_linearly():
    model = make_rnn(teacher_forcing=1.0, teacher_forcing_final=0.5, teacher_forcing_decay_steps=10)
    model.train()
    src, tgt = batch()
    ratios = []
    for update in range(12):
        model.set_update(update)
        ratios.append(model.teacher_forcing_ratio())
        model(src, tgt)
    assert ratios[0] == 1.0 and ratios[5] == pytest.approx(0.75) and ratios[-1] == 0.5
    from nmt.training.config import ConfigError, check_config

    for given in ("model.teacher_forcing_final=0.5", "model.teacher_forcing_decay_steps=10"):  # a decay half set
        with pytest.raises(ConfigError, match=r"model\.teacher_forcing_final=.* with model\.teacher_forcing_decay_st"):
            check_config(compose_train("model=rnn", given))
    make_rnn(teacher_forcing_final=0.5)  # a checkpoint made before the check still loads (its ratio: constant)
    # a negative decay was told to set what was set; attention_dim=0 trained at the hidden size, as null does
    refused = {
        ("model.teacher_forcing_decay_steps=-5", "model.teacher_forcing_final=0.1"): (
            r"model\.teacher_forcing_decay_steps=-5: must be a whole number >= 0 \(0: no decay\)$"
        ),
        ("attention=additive", "attention.attention_dim=0"): (
            r"attention\.attention_dim=0: must be a whole number >= 1, or null \(the hidden size\)$"
        ),
    }
    for given, message in refused.items():
        with pytest.raises(ConfigError) as err:
            check_config(compose_train("model=rnn", *given))
        assert len(str(err.value).splitlines()) == 2 and re.search(message, str(err.value).splitlines()[1]), err.value
    check_config(compose_train("model=rnn", "attention=additive", "attention.attention_dim=8"))


def test_a_decaying_teacher_forcing_ratio_is_compiled_once_not_every_update():
    """compile=true with a decay: the ratio, a new number each update, made the compiler recompile the model
    every update until its limit (8), then run it uncompiled. It is a tensor now; the outputs are the same."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    settings = dict(teacher_forcing=1.0, teacher_forcing_final=0.0, teacher_forcing_decay_steps=10, seed=3)
    model, plain = make_rnn(**settings).train(), make_rnn(**settings).train()
    model.compile(backend="eager", dynamic=True)
    src, tgt = batch()
    frames = []  # frames the compiler has translated so far: a recompile adds some
    for update in range(6):
        for each in (model, plain):
            each.set_update(update)
        torch.manual_seed(update)  # the same draws for both: which steps feed the model's own predictions
        got = model(src, tgt)
        torch.manual_seed(update)
        assert torch.allclose(got, plain(src, tgt), atol=1e-5)
        frames.append(counters["frames"]["total"])
    assert frames[0] > 0 and frames[-1] == frames[0], frames  # before: 16 after the first update, 19 at the end
    torch._dynamo.reset()


def test_teacher_forcing_decays_by_updates_not_micro_batches(tmp_path):
    """trainer.accumulate_grad_batches=2 decayed the ratio twice as fast: it counted forward passes."""
    from nmt.inference.checkpoint import load_checkpoint
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES

    decay = ["model.teacher_forcing_final=0.0", "model.teacher_forcing_decay_steps=20"]
    run = ["model=rnn", *decay, "trainer.accumulate_grad_batches=2", "trainer.max_steps=2", "threads=1"]
    train(compose_train(*run, *NO_FINAL_SCORES, "trainer.log_every_n_steps=1", f"run_dir={tmp_path}"))
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert (
        checkpoint["global_step"] == 2 and int(checkpoint["state_dict"]["model.train_steps"]) == 1
    )  # the last update's
    # the ratio each update trained with is logged: 1 - update / 20
    rows = list(csv.DictReader((tmp_path / "logs" / "metrics.csv").open()))
    logged = {int(row["step"]): float(row["teacher_forcing"]) for row in rows if row.get("teacher_forcing")}
    assert logged == {0: 1.0, 1: pytest.approx(0.95)}


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_beam_one_equals_greedy(attention):
    model = make_rnn(attention, seed=3)
    src, _ = batch(seed=4, batch_size=5)
    cfg = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=4, early_stopping=True)
    assert beam_search(model, src, BOS, EOS, cfg) == greedy(model, src, BOS, EOS, cfg)


@pytest.mark.parametrize("attention,cell", list(itertools.product(ATTENTIONS, CELLS)))
def test_every_attention_and_cell_composes_and_trains_a_step(attention, cell):
    cfg = compose_train(
        "model=rnn",
        f"attention={attention}",
        f"model.cell={cell}",
        "model.hidden_size=16",
        "model.embed_dim=8",
        "model.teacher_forcing=0.5",
    )
    check_config(cfg)
    model = build_model(cfg.model, 30, 30)
    optimizer = instantiate(cfg.optim.optimizer)(model.parameters())
    src, tgt = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 6))
    loss, _, _ = instantiate(cfg.smoothing, pad_id=PAD_ID)(model(src, tgt[:, :-1]), tgt[:, 1:])
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("experiment", ["multi30k_rnn", "course_rnn"])
def test_rnn_presets_compose(experiment):
    cfg = compose_train(f"experiment={experiment}", tiny=False)
    check_config(cfg)
    build_model(cfg.model, 100, 100)


def test_course_rnn_has_the_reported_shape():
    m = compose_train("experiment=course_rnn", tiny=False).model
    assert (m.cell, m.encoder_layers, m.bidirectional, m.hidden_size, m.embed_dim, m.dropout) == (
        "gru",
        2,
        False,
        512,
        256,
        0.3,
    )
    assert m.teacher_forcing == 0.5 and m.attention._target_.endswith("MultiplicativeAttention")


@pytest.mark.slow
def test_tiny_rnn_learns_the_toy_task_and_evaluate_reproduces_it(tmp_path):
    run_dir = tmp_path / "rnn"
    run("train.py", "data=toy", "model=rnn", f"run_dir={run_dir}", "trainer.enable_progress_bar=false", cwd=tmp_path)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["test"]["bleu"] >= 80, results["test"]
    # the attention's spread logged at each validation: a learnt model's below the even spread
    logged = [r for r in csv.DictReader((run_dir / "logs" / "metrics.csv").open()) if r.get("val_cross_attn_entropy")]
    assert logged and float(logged[-1]["val_cross_attn_entropy"]) < 0.8 * float(logged[-1]["val_cross_attn_even"])
    out = tmp_path / "eval"
    run("evaluate.py", f"ckpt_path={results['best_checkpoint']}", f"out_dir={out}", "samples=0", "attention_maps=[0,3]")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["bleu"] == results["test"]["bleu"]
    pngs = sorted(p.name for p in (out / "attention").glob("*.png"))
    assert pngs == ["sentence0_attention.png", "sentence3_attention.png"]
    assert (out / "attention" / pngs[0]).read_bytes().startswith(b"\x89PNG")


def test_the_rnns_first_step_follows_its_equations_with_torchs_own_gru():
    """Bridge h0 = tanh(W_b [h_fwd; h_bwd] + b) of the top encoder layer; h1 = GRU(embed(y0), h0); scaled dot
    attention over memory = W_m outputs; a = tanh(W_c [h1; c]); logits = W_out a (docstring of rnn.py)."""
    model = make_rnn("dot", "gru", input_feeding=False, encoder_layers=2, decoder_layers=1)
    hidden = model.hidden_size
    src, tgt = torch.tensor([[5, 9, 7, 3]]), torch.tensor([[2, 11]])
    encoder = nn.GRU(16, hidden, 2, batch_first=True, bidirectional=True)
    encoder.load_state_dict(model.encoder.state_dict())
    decoder = nn.GRU(16, hidden, 1, batch_first=True)
    decoder.load_state_dict(model.decoder.state_dict())
    with torch.no_grad():
        outputs, h_n = encoder(model.src_embed.weight[src])  # h_n: layer 0 fwd, bwd, layer 1 fwd, bwd
        memory = outputs[0] @ model.memory_proj.weight.T  # (src_len, hidden)
        h0 = torch.tanh(model.bridge.weight @ torch.cat([h_n[2, 0], h_n[3, 0]]) + model.bridge.bias)
        h1 = decoder(model.tgt_embed.weight[tgt[:, :1]], h0[None, None])[0][0, 0]
        weights = (memory @ h1 / math.sqrt(hidden)).softmax(-1)
        attentional = torch.tanh(model.combine.weight @ torch.cat([h1, weights @ memory]))
        expected = model.output.weight @ attentional
        torch.testing.assert_close(model(src, tgt)[0, 0], expected, atol=1e-5, rtol=1e-5)
        logits, _ = model.decode_step(tgt[:, 0], model.encode(src))
        torch.testing.assert_close(logits[0], expected, atol=1e-5, rtol=1e-5)


def test_teacher_forcing_zero_reads_no_reference_token_after_the_first():
    model = make_rnn(teacher_forcing=0.0).train()  # dropout 0: only the inputs differ between the paths
    src, tgt = batch()
    other = tgt.clone()
    other[:, 1:] = (tgt[:, 1:] - 4 + 1) % (VOCAB - 4) + 4  # every later reference token replaced
    with torch.no_grad():
        free = model(src, tgt)
        torch.testing.assert_close(model(src, other), free)
        state, prev = model.encode(src), tgt[:, 0]
        for t in range(tgt.size(1)):  # its logits are those of a greedy rollout from the first token
            logits, state = model.decode_step(prev, state)
            torch.testing.assert_close(logits, free[:, t], atol=1e-5, rtol=1e-5)
            prev = logits.argmax(-1)
