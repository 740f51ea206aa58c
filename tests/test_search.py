"""Decoding: beam 1 equals greedy, beam search finds what greedy misses, limits and sampling."""

import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from nmt.decoding.beam import length_penalty
from nmt.decoding.constraints import with_prefixes
from nmt.decoding.ensemble import Ensemble
from nmt.decoding.search import _sample, beam_search, decode, greedy
from nmt.decoding.settings import STRATEGIES, SearchConfig, search_settings, unreachable_min_len
from nmt.models.state import DecoderState

from .conftest import CONF, STRATEGY_NEEDS
from .test_transformer import batch, make_model

BOS, EOS = 2, 3


class ScriptedModel:
    """A 'model' whose next-token distribution depends only on the previous token, from a table: the
    search code must find the best path with nothing but the incremental interface."""

    pad_id = 0

    def __init__(self, table: dict[int, dict[int, float]], vocab: int = 8):
        self.table, self.vocab = table, vocab

    def encode(self, src):
        return DecoderState({"src": src.clone()}, 0)

    def decode_step(self, prev, state):
        logits = torch.full((prev.size(0), self.vocab), float("-inf"))
        for row, token in enumerate(prev.tolist()):
            for nxt, prob in self.table.get(token, {EOS: 1.0}).items():
                logits[row, nxt] = math.log(prob)
        return logits, DecoderState(state.tensors, state.step + 1)


# greedy takes 4 (p=0.5) then is stuck with p=0.3 paths; beam finds 5 (0.4) -> 6 (0.9) -> EOS
TRAP = {
    BOS: {4: 0.5, 5: 0.4, EOS: 0.1},
    4: {6: 0.3, 7: 0.3, EOS: 0.4},
    5: {6: 0.9, EOS: 0.1},
    6: {EOS: 1.0},
    7: {EOS: 1.0},
}


def test_beam_search_finds_the_path_greedy_misses():
    src = torch.tensor([[5, 5, 3]])
    model = ScriptedModel(TRAP)
    assert greedy(model, src, BOS, EOS) == [[4]]
    cfg = SearchConfig(beam_size=2, length_penalty=0.0)
    assert beam_search(model, src, BOS, EOS, cfg) == [[5, 6]]  # p = 0.4 * 0.9 * 1.0 = 0.36 > 0.5 * 0.4


def test_length_penalty_prefers_longer_outputs():
    # EOS at once: log 0.4 = -0.92; [4, 5, 6]: log 0.216 = -1.53 raw, but -1.53 / ((5 + 4) / 6) ** 2 = -0.68
    table = {BOS: {EOS: 0.4, 4: 0.6}, 4: {5: 0.6, EOS: 0.4}, 5: {6: 0.6, EOS: 0.4}, 6: {EOS: 1.0}}
    model, src = ScriptedModel(table), torch.tensor([[4, 4, 4, 3]])
    assert beam_search(model, src, BOS, EOS, SearchConfig(beam_size=4, length_penalty=0.0)) == [[]]
    assert beam_search(model, src, BOS, EOS, SearchConfig(beam_size=4, length_penalty=2.0)) == [[4, 5, 6]]
    # GNMT's formula away from length 1 (where it is 1 for every alpha, so that point proves nothing)
    for length, alpha in ((4, 2.0), (10, 0.6), (25, 1.0)):
        assert length_penalty(length, alpha) == pytest.approx(((5 + length) / 6) ** alpha)
    assert length_penalty(7, 1.0) == pytest.approx(2.0) and length_penalty(7, 0.0) == 1.0


@pytest.mark.parametrize("pos", ["absolute", "relative", "rope"])
def test_beam_one_equals_greedy(pos):
    model = make_model(pos, seed=3)
    src, _ = batch(seed=5, batch_size=6, src_len=9)
    src[2, 6:] = 0
    # with early stopping, one beam is exactly greedy (without it, the length penalty may extend it)
    cfg = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=4, early_stopping=True)
    assert beam_search(model, src, BOS, EOS, cfg) == greedy(model, src, BOS, EOS, cfg)


def test_batched_beam_search_equals_one_sentence_at_a_time():
    model = make_model("absolute", seed=4)
    src, _ = batch(seed=6, batch_size=4, src_len=8)
    src[1, 5:] = 0
    cfg = SearchConfig(beam_size=4, max_len_a=1.0, max_len_b=3)
    together = beam_search(model, src, BOS, EOS, cfg)
    alone = [beam_search(model, src[i : i + 1, : int((src[i] != 0).sum())], BOS, EOS, cfg)[0] for i in range(4)]
    assert together == alone


def test_outputs_respect_the_length_limit():
    model = ScriptedModel({t: {4: 1.0} for t in range(8)})  # never ends by itself
    src = torch.tensor([[5, 5, 5, 3], [5, 3, 0, 0]])
    cfg = SearchConfig(beam_size=3, max_len_a=2.0, max_len_b=1)  # limits 9 and 5 tokens incl. EOS
    for strategy in STRATEGIES:
        own = {**cfg.__dict__, "strategy": strategy, **STRATEGY_NEEDS.get(strategy, {})}
        out = decode(model, src, BOS, EOS, SearchConfig(**own))
        assert [len(o) for o in out] == [8, 4]


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    model = make_model("absolute", seed=7)
    src, _ = batch(seed=8, batch_size=5)
    sample = SearchConfig(strategy="sample", seed=11, max_len_b=5, temperature=1.5)
    assert decode(model, src, BOS, EOS, sample) == decode(model, src, BOS, EOS, sample)
    top1 = SearchConfig(strategy="sample", top_k=1, seed=1, max_len_b=5)
    assert decode(model, src, BOS, EOS, top1) == greedy(model, src, BOS, EOS, SearchConfig(max_len_b=5))


def test_top_p_keeps_only_the_nucleus():
    table = {BOS: {4: 0.7, 5: 0.2, 6: 0.1}}
    model, src = ScriptedModel(table), torch.zeros(200, 1, dtype=torch.long) + 4
    cfg = SearchConfig(strategy="sample", top_p=0.8, seed=0, max_len_b=2, max_len_a=0.0)
    first = {out[0] for out in decode(model, src, BOS, EOS, cfg) if out}
    assert first == {4, 5}  # 0.7 alone is below 0.8, 0.7 + 0.2 reaches it; 6 is never drawn


def test_epsilon_sampling_never_draws_a_token_below_epsilon_and_draws_each_other():
    table = {BOS: {4: 0.6, 5: 0.3, 6: 0.06, 7: 0.04}}
    model, src = ScriptedModel(table), torch.zeros(300, 1, dtype=torch.long) + 4
    cfg = SearchConfig(strategy="epsilon", epsilon=0.05, seed=0, max_len_b=2, max_len_a=0.0)
    first = [out[0] for out in decode(model, src, BOS, EOS, cfg) if out]
    assert set(first) == {4, 5, 6}  # 7 (0.04) is never drawn
    assert decode(model, src, BOS, EOS, cfg) == decode(model, src, BOS, EOS, cfg)  # seeded
    # above every token's probability: the most probable token, always (greedy)
    alone = SearchConfig(strategy="epsilon", epsilon=0.9, seed=0, max_len_b=2, max_len_a=0.0)
    assert {out[0] for out in decode(model, src, BOS, EOS, alone)} == {4}


def test_epsilon_sampling_refuses_the_options_it_does_not_read_and_a_threshold_that_drops_nothing():
    from nmt.decoding.settings import search_settings

    eps = {"strategy": "epsilon", "epsilon": 3e-4, "seed": 1}
    assert search_settings(None, eps) == SearchConfig(**eps)
    assert search_settings(None, {**eps, "temperature": 0.7}).temperature == 0.7  # read, as sampling's
    for name, value in (("top_p", 0.9), ("top_k", 5), ("beam_size", 4), ("length_penalty", 0.6)):
        with pytest.raises(ValueError, match=rf"^decode.{name}={value}: decode.strategy=epsilon does not read it"):
            search_settings(None, {**eps, name: value})
    for strategy in ("sample", "beam", "greedy"):
        with pytest.raises(
            ValueError,
            match=rf"^decode.epsilon=0.0003: decode.strategy={strategy} does not read it \(it applies with "
            r"decode.strategy=epsilon\)",
        ):
            search_settings(None, {"strategy": strategy, "epsilon": 3e-4, "seed": 1})
    # the run's own threshold stays behind when another strategy is chosen, and is taken when it is not
    assert search_settings(eps, {"strategy": "sample"}).epsilon == 0.0
    assert search_settings(eps, {}).epsilon == 3e-4
    with pytest.raises(ValueError, match=r"^decode.epsilon=0.0 drops no token: decode.strategy=epsilon needs"):
        search_settings(None, {"strategy": "epsilon"})  # plain sampling under another name
    for bad in (1.0, -0.1, float("nan"), "x", True):
        with pytest.raises(ValueError, match=r"^decode.epsilon=.* must be in \[0, 1\)"):
            SearchConfig(strategy="epsilon", epsilon=bad)


@pytest.mark.parametrize(
    "bad",
    [{"beam_size": 0}, {"strategy": "viterbi"}, {"top_p": 0.0}, {"temperature": 0}, {"top_k": "x"}, {"seed": 1.5}],
)
def test_invalid_search_settings_are_rejected(bad):
    (name,) = bad
    with pytest.raises(ValueError, match=rf"^decode\.{name}="):
        SearchConfig(**bad)


def test_every_search_option_is_read_by_a_strategy_and_named_in_evaluation_folders():
    """An option added to SearchConfig must say which strategies read it (else every strategy refuses it),
    and two evaluations that differ in any one option never share a folder."""
    from dataclasses import fields

    from nmt.decoding.settings import READS, STRATEGIES, UNREAD, unread_problems
    from nmt.tasks.translation_eval import split_tag

    names = [f.name for f in fields(SearchConfig) if f.name != "strategy"]
    assert set(READS) == set(UNREAD) == set(STRATEGIES)
    for name in names:
        assert any(name in READS[s] for s in STRATEGIES), f"no strategy reads {name}"
        for s in STRATEGIES:
            assert (name in READS[s]) != (name in UNREAD[s]), (name, s)
    base = SearchConfig(strategy="sample", seed=1)
    changed = {
        "beam_size": 4,
        "length_penalty": 0.6,
        "max_len_a": 2.0,
        "max_len_b": 3,
        "early_stopping": True,
        "temperature": 0.5,
        "top_k": 3,
        "top_p": 0.5,
        "epsilon": 0.01,
        "seed": 2,
        "min_len": 1,
        "no_repeat_ngram_size": 2,
    }
    assert set(changed) == set(names)
    for name, value in changed.items():
        strategy = next(s for s in STRATEGIES if name in READS[s])  # a strategy that reads it
        own = {**base.__dict__, "strategy": strategy, **STRATEGY_NEEDS.get(strategy, {})}
        other = SearchConfig(**{**own, name: value})
        reference = SearchConfig(**own)
        assert split_tag("val", other, reference=base) != split_tag("val", reference, reference=base), name
    # the run's own options that the evaluation's strategy does not read name nothing: a summariser's length
    # penalty in a greedy evaluation, a sampler's top_k in a beam's (both at their defaults in the search)
    from nmt.decoding.settings import search_settings

    for own, given, folder in (
        ({"length_penalty": 2.0}, {"strategy": "greedy"}, "test_greedy"),
        ({"strategy": "sample", "top_k": 10, "seed": 1}, {"strategy": "beam"}, "test_beam5"),
        ({"strategy": "sample", "top_k": 10, "seed": 1}, {"top_k": 5}, "test_sample_topk5"),
    ):
        assert split_tag("test", search_settings(own, given), reference=SearchConfig(**own)) == folder, own
    # a run's config: an option set away from its default that its strategy does not read is named
    assert unread_problems({"strategy": "greedy", "temperature": 0.7}) == [
        "decode.temperature=0.7: decode.strategy=greedy does not read it (it applies with decode.strategy=sample or "
        "decode.strategy=epsilon); remove it, or choose such a strategy"
    ]
    assert unread_problems({"strategy": "greedy", "temperature": 1.0}) == []  # the default: nothing set


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_cached_decoding_equals_recomputing_the_prefix(strategy):
    from nmt.models.recompute import RecomputingDecoder

    model = make_model("relative", seed=9)
    src, _ = batch(seed=10, batch_size=4)
    cfg = SearchConfig(strategy=strategy, beam_size=3, max_len_b=6)
    assert decode(model, src, BOS, EOS, cfg) == decode(RecomputingDecoder(model), src, BOS, EOS, cfg)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_recomputing_decoding_stops_at_a_learned_tables_end_as_cached_decoding_does(strategy):
    """The wrapper passes on the table's size: without it, its search ran past the table and failed."""
    from nmt.models.recompute import RecomputingDecoder

    model = make_model("learned", seed=9).eval()
    model.src_pos.max_len = model.tgt_pos.max_len = 6
    src, _ = batch(seed=10, batch_size=4, src_len=5)
    cfg = SearchConfig(strategy=strategy, beam_size=3, max_len_b=20)  # the table, not max_len_b, bounds them
    wrapped = RecomputingDecoder(model)
    assert wrapped.position_limits() == model.position_limits() == (6, 6)
    assert decode(model, src, BOS, EOS, cfg) == decode(wrapped, src, BOS, EOS, cfg)


def test_beam_search_keeps_searching_past_early_low_scoring_endings():
    """Two unlikely endings found before the best beam ends must not stop the search (beam 2)."""
    table = {
        BOS: {4: 0.5, 5: 0.3, 6: 0.2},
        4: {7: 1.0},
        7: {8: 1.0},
        8: {EOS: 0.9, 7: 0.1},
        5: {EOS: 0.6, 9: 0.4},
        9: {EOS: 1.0},
    }
    model, src = ScriptedModel(table, vocab=10), torch.tensor([[4, 4, 4, 3]])
    cfg = SearchConfig(beam_size=2, length_penalty=0.0, max_len_b=10)
    assert beam_search(model, src, BOS, EOS, cfg) == [[4, 7, 8]]  # p = 0.5 * 0.9
    early = beam_search(model, src, BOS, EOS, SearchConfig(**{**cfg.__dict__, "early_stopping": True}))
    assert early == [[5]]  # p = 0.18: it stopped at the endings [5] and [5, 9]


def test_beam_hypotheses_are_the_n_best_with_their_log_probabilities():
    from nmt.decoding.beam import beam_hypotheses

    (found,) = beam_hypotheses(
        ScriptedModel(TRAP), torch.tensor([[5, 5, 3]]), BOS, EOS, SearchConfig(beam_size=3, length_penalty=0.0)
    )
    # [5, 6]: 0.4 * 0.9 * 1.0; [4]: 0.5 * 0.4; then [4, 6] and [4, 7]: 0.5 * 0.3 * 1.0 each
    assert [ids for _, ids in found[:2]] == [[5, 6], [4]]
    assert [score for score, _ in found[:4]] == pytest.approx(
        [math.log(0.36), math.log(0.2), math.log(0.15), math.log(0.15)]
    )


def _path_log_prob(table: dict, ids: list[int]) -> float:
    """log p of ``ids`` and then EOS, read from a ScriptedModel's table."""
    prev, total = BOS, 0.0
    for token in [*ids, EOS]:
        total += math.log(table.get(prev, {EOS: 1.0})[token])
        prev = token
    return total


@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_beam_scores_under_a_length_penalty_are_log_probabilities_over_gnmt_of_the_length_with_its_end(alpha):
    from nmt.decoding.beam import beam_hypotheses

    (found,) = beam_hypotheses(
        ScriptedModel(TRAP), torch.tensor([[5, 5, 3]]), BOS, EOS, SearchConfig(beam_size=3, length_penalty=alpha)
    )
    assert len(found) >= 3
    for score, ids in found:  # the length counts the end token: [5, 6] is 3 long
        assert score == pytest.approx(_path_log_prob(TRAP, ids) / ((5 + len(ids) + 1) / 6) ** alpha)


def test_beam_search_goes_on_while_a_longer_output_can_still_win_under_the_length_penalty():
    # EOS at once: log 0.6 = -0.51; 4, 5, ..., 11 then EOS: log 0.4 / ((5 + 9) / 6) = -0.39, better. With one
    # beam, an output has ended after the first step: the search must see that the one alive can still beat it
    chain = {BOS: {EOS: 0.6, 4: 0.4}, **{t: {t + 1: 1.0} for t in range(4, 11)}, 11: {EOS: 1.0}}
    model, src = ScriptedModel(chain, vocab=12), torch.tensor([[4, 3]])
    cfg = SearchConfig(beam_size=1, length_penalty=1.0, max_len_a=0.0, max_len_b=20)
    assert beam_search(model, src, BOS, EOS, cfg) == [list(range(4, 12))]
    early = SearchConfig(beam_size=1, length_penalty=1.0, max_len_a=0.0, max_len_b=20, early_stopping=True)
    assert beam_search(model, src, BOS, EOS, early) == [[]]  # stopping at the first ending misses it


def test_a_forced_prefix_is_followed_by_the_best_continuation():
    src = torch.tensor([[5, 5, 3]])
    model = ScriptedModel(TRAP)
    beam = SearchConfig(beam_size=3, length_penalty=0.0)
    assert decode(model, src, BOS, EOS, beam, prefixes=[[4]]) == [[4]]  # 4 then EOS (0.4) beats 4 6 / 4 7 (0.3)
    assert decode(model, src, BOS, EOS, beam, prefixes=[[4, 7]]) == [[4, 7]]
    assert greedy(model, src, BOS, EOS) == [[4]] and decode(
        model, src, BOS, EOS, SearchConfig(strategy="greedy"), [[5]]
    ) == [[5, 6]]
    # a prefix longer than the output limit still fits (the limit grows to hold it and its end)
    assert decode(model, src, BOS, EOS, SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=1), [[5, 6, 6]]) == [
        [5, 6, 6]
    ]


def test_a_token_forced_past_a_minimum_length_or_a_blocked_n_gram_scores_its_own_log_probability():
    """A token that min_len or n-gram blocking ruled out but the search had to take (EOS at the output limit, a
    prefix's repeated piece) was scored -1e4, a floor meant only to keep the hypothesis alive: its score was
    -10000 and more, and the n-best list was not in the order of the hypotheses' log-probabilities."""
    from nmt.decoding.beam import beam_hypotheses

    src = torch.tensor([[5, 5, 3]])
    short = SearchConfig(beam_size=3, length_penalty=0.0, max_len_a=0.0, max_len_b=2, min_len=5)
    (found,) = beam_hypotheses(ScriptedModel(TRAP), src, BOS, EOS, short)
    # the limit (one token and EOS) comes before min_len: each hypothesis ends there, at its own probability
    assert [ids for _, ids in found] == [[4], [5]]
    assert [score for score, _ in found] == pytest.approx([math.log(0.5 * 0.4), math.log(0.4 * 0.1)])
    table = {BOS: {4: 0.5, 5: 0.5}, 4: {4: 0.2, EOS: 0.8}, 5: {EOS: 1.0}}
    blocked = SearchConfig(beam_size=2, length_penalty=0.0, no_repeat_ngram_size=1)
    (found,) = beam_hypotheses(ScriptedModel(table), src, BOS, EOS, blocked, prefixes=[[4, 4]])
    assert found[0] == (pytest.approx(math.log(0.5 * 0.2 * 0.8)), [4, 4])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_sentence_left_with_no_token_allowed_ends(strategy):
    """Every piece blocked (no_repeat_ngram_size) and EOS before min_len: greedy took the first piece of the
    vocabulary again and again, sampling failed on a distribution of nothing, and beam search returned an
    empty output scored 0 (probability 1). The sentence ends there, EOS at its own probability."""
    from nmt.decoding.beam import beam_hypotheses

    model, src = ScriptedModel({BOS: {4: 1.0}, 4: {4: 0.9, EOS: 0.1}}), torch.tensor([[5, 5, 3]])
    cfg = SearchConfig(
        strategy=strategy,
        beam_size=2,
        length_penalty=0.0,
        no_repeat_ngram_size=1,
        min_len=5,
        seed=1,
        **STRATEGY_NEEDS.get(strategy, {}),
    )
    assert decode(model, src, BOS, EOS, cfg) == [[4]]
    if strategy == "beam":
        assert beam_hypotheses(model, src, BOS, EOS, cfg)[0][0] == (pytest.approx(math.log(0.1)), [4])


def test_the_start_and_padding_tokens_are_never_output():
    # a table that prefers BOS and PAD (0) over everything: the search takes the best real token instead
    table = {BOS: {BOS: 0.5, 0: 0.3, 4: 0.15, EOS: 0.05}, 4: {EOS: 1.0}}
    model, src = ScriptedModel(table), torch.tensor([[5, 3]])
    assert greedy(model, src, BOS, EOS) == [[4]]
    assert beam_search(model, src, BOS, EOS, SearchConfig(beam_size=2, length_penalty=0.0)) == [[4]]


def test_an_evaluation_searches_as_the_run_did_unless_told_otherwise():
    """evaluate.py, translate.py and serve.py leave every search option null: a summariser is evaluated
    with its own minimum length and trigram blocking, and an option given on the command line wins."""
    from omegaconf import OmegaConf

    from nmt.decoding.settings import search_settings

    from .conftest import CONF

    own = {"beam_size": 4, "min_len": 5, "no_repeat_ngram_size": 3, "length_penalty": 2.0}
    assert search_settings(own, {"beam_size": None, "length_penalty": 0.6}) == SearchConfig(
        beam_size=4, min_len=5, no_repeat_ngram_size=3, length_penalty=0.6
    )
    assert search_settings(None, {}) == SearchConfig()
    # an option given that the chosen strategy does not read changes nothing: refused, naming who reads it
    with pytest.raises(
        ValueError,
        match=r"^decode.top_p=0.9: decode.strategy=beam does not read it \(it applies with "
        r"decode.strategy=sample\)",
    ):
        search_settings(own, {"top_p": 0.9})
    with pytest.raises(ValueError, match=r"^decode.beam_size=4: decode.strategy=greedy .* with decode.strategy=beam\)"):
        search_settings({"strategy": "greedy"}, {"beam_size": 4})
    with pytest.raises(ValueError, match=r"^decode.length_penalty=0.6: decode.strategy=sample"):
        search_settings(own, {"strategy": "sample", "length_penalty": 0.6})
    # the run's own options that the chosen strategy does not read stay behind: its beam size is not part of a
    # greedy search, nor its sampling filters part of another strategy's (searched with, or recorded)
    assert search_settings(own, {"strategy": "greedy"}) == SearchConfig(
        strategy="greedy", min_len=5, no_repeat_ngram_size=3
    )
    sampled = {"strategy": "sample", "top_k": 1, "top_p": 0.5, "temperature": 0.7, "seed": 3}
    assert search_settings(sampled, {"strategy": "beam"}) == SearchConfig(strategy="beam")
    assert search_settings(sampled, {}) == SearchConfig(**sampled)  # its own strategy reads them all
    assert search_settings(own, {"strategy": "sample", "top_p": 0.9, "seed": 1}).top_p == 0.9
    assert search_settings(own, {"top_p": 0.9}, refuse_unread=False).top_p == 1.0  # a grid's cell: beam, as is
    for name in ("evaluate", "translate", "serve"):
        block = OmegaConf.load(CONF / f"{name}.yaml").decode
        assert set(block) == set(SearchConfig.__dataclass_fields__) and all(v is None for v in block.values()), name


@pytest.mark.parametrize("every", [1, 3, 8])
@pytest.mark.parametrize("pos", ["absolute", "rope"])
def test_greedy_on_the_device_equals_step_by_step_greedy(pos, every):
    """The greedy search that keeps its tokens on the device, reading which sentences ended only every
    few steps, chooses the tokens of the step-by-step search (in float64: no near-ties by rounding)."""
    from nmt.decoding.search import _greedy, _step_by_step

    model = make_model(pos, seed=12).double()
    src, _ = batch(seed=13, batch_size=9, src_len=10)
    src[3, 4:] = 0
    src[6, 2:] = 0
    cfg = SearchConfig(strategy="greedy", max_len_a=1.2, max_len_b=3)
    reference = _step_by_step(model, src, BOS, EOS, cfg)
    assert _greedy(model, src, BOS, EOS, cfg, every=every) == reference
    assert any(len(o) < len(max(reference, key=len)) for o in reference)  # the batch did shrink on the way


def test_greedy_on_the_device_reads_the_device_once_every_few_steps():
    """Reads of tensor values by the host (each one a wait on a GPU): one for the length limit, one per
    ``every`` steps, one for the outputs; the step-by-step search reads at every step."""
    from nmt.decoding.search import _greedy, _step_by_step

    from .host_reads import HostReads

    model = ScriptedModel({t: {4: 1.0} for t in range(8)})  # never ends by itself: runs to its limit
    src = torch.tensor([[5] * 19 + [3]])
    cfg = SearchConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)  # 24 steps
    with HostReads() as device_reads:
        out = _greedy(model, src, BOS, EOS, cfg, every=8)
    with HostReads() as stepwise_reads:
        assert _step_by_step(model, src, BOS, EOS, cfg) == out == [[4] * 23]
    # the scripted model itself reads its input once per step (a real model does not)
    model_reads = 24
    assert device_reads.count - model_reads == 1 + 2 + 1  # limit, steps 8 and 16, outputs
    assert stepwise_reads.count - model_reads >= 24


@pytest.mark.parametrize("pos", [p.stem for p in sorted((CONF / "pos").glob("*.yaml"))])  # a new option too
def test_a_decoding_step_reads_nothing_back(pos):
    """Encoding and each decoding step of the Transformer queue work without reading a value back (a
    learned table read its largest position at every step to check its size)."""
    from .host_reads import HostReads

    model = make_model(pos, seed=14).eval()
    src, _ = batch(seed=15, batch_size=4)
    with HostReads() as reads, torch.no_grad():
        state = model.encode(src)
        prev = torch.full((4,), BOS)
        for _ in range(3):
            logits, state = model.decode_step(prev, state)
            prev = logits.argmax(-1)
    assert reads.calls == []


def test_a_strategy_named_but_not_dispatched_is_an_error_not_a_silent_sample(monkeypatch):
    from nmt.decoding import settings

    monkeypatch.setattr(settings, "STRATEGIES", (*settings.STRATEGIES, "not_dispatched"))
    cfg = SearchConfig(strategy="not_dispatched")
    with pytest.raises(ValueError, match=r"decode.strategy='not_dispatched': in STRATEGIES but not dispatched"):
        decode(make_model(), batch()[0], 1, 2, cfg)


def test_one_predicate_says_which_strategies_rank_hypotheses():
    """n-best limits, batch sizes and evaluation folder names all follow SearchConfig.ranks (they were six
    copies of ``strategy == "beam"``, which a new ranking search had to find)."""
    from nmt.decoding.search import ranked_hypotheses
    from nmt.decoding.settings import RANKED, STRATEGIES

    for strategy in STRATEGIES:  # RANKED names the option that says how many hypotheses a ranking search keeps
        search = SearchConfig(
            strategy=strategy, **{RANKED.get(strategy, "beam_size"): 4}, **STRATEGY_NEEDS.get(strategy, {})
        )
        assert search.ranks == (strategy in RANKED) and search.hypotheses == (4 if strategy in RANKED else 1)
    with pytest.raises(ValueError, match=r"decode.strategy='greedy': not a ranking search"):
        ranked_hypotheses(None, None, BOS, EOS, SearchConfig(strategy="greedy"))


@pytest.mark.parametrize("config", ["train", "evaluate", "translate", "serve"])
def test_every_decode_block_holds_every_search_option(config):
    """A SearchConfig option missing from a config's decode block can be given only with +decode.<option>= (and
    evaluate.py, translate.py and serve.py would not take it from the run): every block lists every option,
    conf/train.yaml at SearchConfig's defaults, the others null (the run's own setting)."""
    from dataclasses import fields

    from omegaconf import OmegaConf

    block = OmegaConf.to_container(OmegaConf.load(CONF / f"{config}.yaml").decode)
    defaults = {f.name: f.default for f in fields(SearchConfig)}
    assert list(block) == list(defaults)
    assert block == (defaults if config == "train" else dict.fromkeys(defaults))


def test_a_learned_table_refuses_positions_beyond_it_from_the_host():
    """The size check of ``pos=learned`` uses the host's numbers: the source, the teacher-forced target and a
    decoding step past the table are refused in one line, for the translation model and the language model."""
    from .test_lm import language_model

    model = make_model("learned", seed=16).eval()
    model.src_pos.max_len = model.tgt_pos.max_len = 6
    src, tgt = batch(seed=17, batch_size=2)
    beyond = r"position 6 is beyond pos.max_len=6 of the learned position table"
    with pytest.raises(ValueError, match=beyond):
        model.encode(torch.cat([src, src], dim=1)[:, :7])
    with pytest.raises(ValueError, match=beyond):
        model(src[:, :5], torch.cat([tgt, tgt], dim=1)[:, :7])
    state, prev = model.encode(src[:, :5]), torch.full((2,), BOS)
    with torch.no_grad():
        for _ in range(6):
            logits, state = model.decode_step(prev, state)
            prev = logits.argmax(-1)
        with pytest.raises(ValueError, match=beyond):
            model.decode_step(prev, state)
    lm = language_model("learned")
    lm.pos.max_len = 6
    with pytest.raises(ValueError, match=beyond):
        lm(torch.randint(4, 23, (1, 7)))
    with pytest.raises(ValueError, match=beyond):
        lm.encode(torch.randint(4, 23, (1, 7)))
    state = lm.encode(torch.randint(4, 23, (1, 5)))
    with torch.no_grad():
        for _ in range(2):  # the prediction after the prompt, then position 5
            logits, state = lm.decode_step(logits.argmax(-1) if _ else prev[:1], state)
        with pytest.raises(ValueError, match=beyond):
            lm.decode_step(logits.argmax(-1), state)


def test_a_minimum_length_no_output_can_reach_is_refused_where_the_limit_does_not_grow():
    """decode.min_len=150 with a summariser's max_len_a=0 max_len_b=100 was accepted, and every output was cut
    at the limit (a language model's max_new_tokens was checked so; these limits were not)."""
    from nmt.decoding.settings import search_settings, unreachable_min_len

    from .conftest import compose_train

    own = {"strategy": "beam", "max_len_a": 0.0, "max_len_b": 100, "min_len": 20}
    with pytest.raises(ValueError, match=r"^decode.min_len=150: no output may end before 150 tokens, .* holds? 99"):
        search_settings(own, {"min_len": 150})
    with pytest.raises(ValueError, match=r"^decode.min_len=100:"):
        search_settings(own, {"min_len": 100})  # the limit counts the end token: 99 words at most
    assert search_settings(own, {"min_len": 99}).min_len == 99
    assert unreachable_min_len({"max_len_a": 1.5, "max_len_b": 10, "min_len": 150}) is None  # grows with the source
    from nmt.training.config import ConfigError, check_config

    with pytest.raises(ConfigError, match=r"validation.search.min_len=200: no output may end before 200"):
        check_config(compose_train("experiment=summarization", "validation.search.min_len=200", tiny=False))


def test_outside_the_search_a_strategy_is_known_by_its_lists_not_by_its_name():
    """Code outside nmt/decoding asks STRATEGIES, RANKED or SAMPLED (SearchConfig.ranks, .samples) what a
    strategy does: one that tested the name "sample" let a strategy added to SAMPLED score a split from
    unseeded draws, where sample is refused (ARCHITECTURE.md, "A decoding strategy, step by step"). The export maps each
    strategy onto CTranslate2's options by name, and refuses one it has no mapping for."""
    names = "|".join(STRATEGIES)
    by_name = re.compile(rf"""strategy\W{{0,4}}\s*(==|!=|\bin\b)\s*[(\[{{]?\s*["']({names})["']""")
    root = Path(__file__).resolve().parents[1]
    mapped = {"nmt/inference/export.py"}
    found = [
        f"{path.relative_to(root)}:{n}"
        for folder in ("nmt", "benchmarks", "peers")
        for path in sorted((root / folder).rglob("*.py"))
        if not path.relative_to(root).as_posix().startswith("nmt/decoding/")
        and path.relative_to(root).as_posix() not in mapped
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_name.search(line)
    ] + [
        f"{path.name}:{n}"
        for path in sorted(root.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if by_name.search(line)
    ]
    assert not found, found
    assert by_name.search('if final and search.get("strategy") == "sample" and')  # the line it caught


def test_the_documents_that_list_the_strategies_name_every_one():
    """A strategy added with its code and tests but not in the docs (a newcomer's epsilon sampling, the docs
    left as they were) failed nothing: translate.py's option comment, docs/usage.md's search options and
    docs/tasks.md's language-model prompt name each strategy of STRATEGIES, and nothing else."""
    root = CONF.parent
    lists = {
        "conf/translate.yaml": re.search(
            r"strategy: null +# \[\w+\] ([\w |]+)", (root / "conf/translate.yaml").read_text()
        )[1],
        "docs/usage.md": re.search(r"`strategy` ([\w ,]+);", (root / "docs/usage.md").read_text())[1],
        "docs/tasks.md": re.search(
            r"\(`decode.strategy` (.+?)continuations", (root / "docs/tasks.md").read_text(), re.S
        )[1],
    }
    words = {"conf/translate.yaml": r"\w+", "docs/usage.md": r"\w+", "docs/tasks.md": r"(?<![`\w])[a-z]+(?=\s+with|,)"}
    for where, text in lists.items():
        named = set(re.findall(words[where], text)) - {"or", "with"}
        assert named == set(STRATEGIES), f"{where} names {sorted(named)}, STRATEGIES {sorted(STRATEGIES)}"


def test_a_prefix_and_its_end_token_must_fit_the_table():
    # 3 forced tokens and the end token take 4 target positions: a table of 4 holds them, one of 3 does not
    assert with_prefixes(torch.tensor([2]), [[4, 5, 6]], cap=4).tolist() == [4]
    with pytest.raises(ValueError, match=r"a prefix of 3 tokens and its end token need more than the 3 target"):
        with_prefixes(torch.tensor([2]), [[4, 5, 6]], cap=3)


@pytest.mark.parametrize(("top_p", "kept"), [(0.5, 2), (0.75, 3)])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p_exactly(top_p, kept):
    # four equal logits: each probability is 1/4 exactly, and the running sums 1/4, 1/2, 3/4, 1 are exact;
    # Holtzman et al.'s nucleus is the smallest set of mass >= p: 2 tokens for p = 1/2, 3 for p = 3/4
    draws = _sample(
        torch.zeros(4000, 4), SearchConfig(strategy="sample", top_p=top_p), torch.Generator().manual_seed(0)
    )
    assert len(set(draws.tolist())) == kept


class Limited(nn.Module):
    pad_id = 0

    def __init__(self, limits):
        super().__init__()
        self.limits = limits

    def position_limits(self):
        return self.limits


class Unlimited(nn.Module):
    pad_id = 0


def test_an_ensemble_encodes_only_the_positions_every_member_can():
    assert Ensemble([Limited((6, 10)), Limited((9, 4)), Unlimited()]).position_limits() == (6, 4)
    assert Ensemble([Limited((None, 7)), Unlimited()]).position_limits() == (None, 7)
    assert Ensemble([Unlimited(), Unlimited()]).position_limits() == (None, None)


def test_a_fixed_limit_with_no_room_before_the_end_token_is_refused():
    # max_len_a=0, max_len_b=1: the limit (1 token, counting EOS) leaves every output empty
    said = unreachable_min_len({"max_len_a": 0.0, "max_len_b": 1})
    assert said and said.startswith("decode.max_len_b=1 with decode.max_len_a=0: the limit counts the end token")
    assert unreachable_min_len({"max_len_a": 0.0, "max_len_b": 2}) is None
    with pytest.raises(ValueError, match=r"^decode.max_len_b=1 with decode.max_len_a=0"):
        search_settings(None, {"max_len_a": 0.0, "max_len_b": 1})
