"""What the layers above ask of every model of conf/model/, checked on each file there, so that a new model
is held to it without a test of its own: the methods (``REQUIRED_METHODS``), a step-by-step decode that
equals the teacher-forced pass (the searches decode with one, training and n-best scores use the other),
outputs that padding does not change, attention maps of the shape n-best alignments and heatmaps read, and
beam search of width 1 equal to greedy search."""

import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.search import beam_search, greedy
from nmt.decoding.settings import SearchConfig
from nmt.models.build import REQUIRED_METHODS, build_model, missing_methods
from nmt.training.config import ConfigError, check_config

from .conftest import CONF, compose_train

MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
VOCAB = 23


def decoder_only(name: str) -> bool:
    return bool(getattr(get_class(OmegaConf.load(CONF / "model" / f"{name}.yaml")._target_), "decoder_only", False))


def tiny(name: str) -> torch.nn.Module:
    """The model of option ``name`` at small sizes, composed as train.py composes it, without dropout."""
    cfg = compose_train(f"model={name}", *(["task=lm"] if decoder_only(name) else []))
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        if key in cfg.model:
            cfg.model[key] = 0.0
    torch.manual_seed(0)
    return build_model(cfg.model, VOCAB, VOCAB).eval()


def tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def test_every_model_is_covered():
    assert {"transformer", "rnn", "transformer_lm"} <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_a_model_offers_what_the_layers_above_call_and_steps_as_its_whole_pass(name):
    model = tiny(name)
    assert missing_methods(type(model)) == []
    with torch.no_grad():
        if decoder_only(name):  # forward(tokens); encode(prompt), whose first step predicts what follows it
            seq = tokens(3, 6)
            full = model(seq).log_softmax(-1)  # (batch, len, vocab)
            state = model.encode(seq[:, :1])
            for t in range(seq.size(1)):  # the first step ignores its token: it predicts the prompt's next
                logits, state = model.decode_step(seq[:, t], state)
                torch.testing.assert_close(logits.log_softmax(-1), full[:, t], atol=1e-5, rtol=1e-4)
            maps = model.attention_maps(seq)
            expected = (3, seq.size(1), seq.size(1))
        else:  # forward(src, tgt_in); encode(src), then one decode_step per target token
            src, tgt = tokens(3, 7), tokens(3, 5, seed=2)
            full = model(src, tgt).log_softmax(-1)  # (batch, tgt_len, vocab)
            assert full.shape == (3, 5, VOCAB)
            state = model.encode(src)
            for t in range(tgt.size(1)):
                logits, state = model.decode_step(tgt[:, t], state)
                torch.testing.assert_close(logits.log_softmax(-1), full[:, t], atol=1e-5, rtol=1e-4)
            padded = torch.cat([src, torch.full((3, 3), PAD_ID)], dim=1)
            torch.testing.assert_close(model(padded, tgt).log_softmax(-1), full, atol=1e-5, rtol=1e-4)
            maps = model.attention_maps(padded, tgt)
            expected = (3, tgt.size(1), padded.size(1))
    assert maps and all(isinstance(name, str) for name in maps)
    for weights in maps.values():  # (batch, heads, target positions, attended positions): each row a distribution
        assert weights.dim() == 4 and (weights.size(0), *weights.shape[2:]) == expected
        torch.testing.assert_close(weights.float().sum(-1), torch.ones(weights.shape[:3]), atol=1e-4, rtol=0)
        if not decoder_only(name):
            assert weights[..., -3:].abs().max() < 1e-6  # nothing on the source's padding


@pytest.mark.parametrize("name", [m for m in MODELS if not decoder_only(m)])
def test_beam_search_of_width_one_is_greedy_search(name):
    """Under early stopping: without it a width-1 beam searches on past its first finished hypothesis."""
    model, src = tiny(name), tokens(5, 6, seed=4)
    cfg = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=4, early_stopping=True)
    assert beam_search(model, src, BOS_ID, EOS_ID, cfg) == greedy(model, src, BOS_ID, EOS_ID, cfg)


class NoMaps(torch.nn.Module):
    """A model without ``attention_maps``: it trains and decodes, while n-best scores would fail on it."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, pad_id: int) -> None:
        super().__init__()
        self.pad_id = pad_id

    def forward(self, src, tgt_in): ...

    def encode(self, src): ...

    def decode_step(self, prev_tokens, state): ...


class NoForward(NoMaps):
    def attention_maps(self, src, tgt_in): ...

    forward = torch.nn.Module.forward  # what every Module has: it raises NotImplementedError


def test_a_model_without_a_required_method_is_refused_before_any_data_naming_it():
    assert missing_methods(NoForward) == ["forward"]
    cfg = compose_train()
    cfg.model = {"_target_": f"{__name__}.NoMaps"}
    with pytest.raises(ConfigError) as refused:
        check_config(cfg)
    assert f"model=NoMaps does not define attention_maps: every model offers {', '.join(REQUIRED_METHODS)}" in str(
        refused.value
    )


class OwnChoices(NoMaps):
    """A model whose keys share names with the Transformer's and take other values."""

    def __init__(self, src_vocab_size, tgt_vocab_size, pad_id, activation="tanh", norm_position="middle") -> None:
        super().__init__(src_vocab_size, tgt_vocab_size, pad_id)

    def attention_maps(self, src, tgt_in): ...


def test_a_model_s_keys_are_checked_by_its_own_class_not_by_the_transformer_s_values():
    cfg = compose_train()
    cfg.model = {"_target_": f"{__name__}.OwnChoices", "activation": "tanh", "norm_position": "middle"}
    check_config(cfg)
    for key, value, allowed in [
        ("activation", "tanh", "['gelu', 'relu']"),
        ("norm_position", "mid", "['pre', 'post']"),
    ]:
        for model in ("transformer", "transformer_lm"):
            with pytest.raises(ConfigError, match=rf"model\.{key}='{value}' is not one of \{allowed}"):
                check_config(
                    compose_train(f"model={model}", f"model.{key}={value}", *(["task=lm"] * decoder_only(model)))
                )


def test_a_task_names_the_models_it_trains_from_conf():
    from nmt.tasks.language_model import LanguageModelTask
    from nmt.tasks.translation import TranslationTask

    seq2seq = " or ".join(f"model={m}" for m in MODELS if not decoder_only(m))
    lm = " or ".join(f"model={m}" for m in MODELS if decoder_only(m))
    assert f"use {seq2seq}" in " ".join(TranslationTask().check(compose_train("model=transformer_lm")))
    assert f"use {lm}" in " ".join(LanguageModelTask().check(compose_train("task=lm", "model=rnn")))
