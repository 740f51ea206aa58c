"""Greedy search replayed as a CUDA graph (nmt/decoding/graphed.py), checked on the CPU: the model's
caches of fixed size give the logits of its growing caches, a step reads nothing back (a read cannot be
recorded), and the search's buffers, rewinding and reads give the eager search's tokens. Only recording
the graph itself needs a GPU (the GPU benchmark times it)."""

import contextlib
import threading
import warnings
from types import SimpleNamespace

import pytest
import torch

from nmt.decoding import graphed, search
from nmt.decoding.constraints import max_lengths, never_emitted
from nmt.decoding.search import _greedy, decode
from nmt.decoding.settings import SearchConfig

from .conftest import CONF
from .host_reads import HostReads
from .test_transformer import batch, make_model

BOS, EOS = 2, 3
CFG = SearchConfig(strategy="greedy", max_len_a=1.2, max_len_b=3)
POSITIONS = sorted(p.stem for p in (CONF / "pos").glob("*.yaml"))  # every option of `pos`, a new one too


def padded_batch():
    src, _ = batch(seed=13, batch_size=9, src_len=10)
    src[3, 4:] = 0
    src[6, 2:] = 0
    return src


def choose(pad_id):
    return lambda logits: never_emitted(logits, BOS, pad_id).argmax(-1)


@pytest.mark.parametrize(
    ("pos", "norm_position"), [("absolute", "pre"), ("relative", "post"), ("rope", "pre"), ("learned", "pre")]
)
def test_a_fixed_cache_gives_the_logits_of_the_growing_cache(pos, norm_position):
    """Every step's logits from caches of fixed size, written in place and masked beyond the step, equal
    those of the caches that grow by concatenation (float64), for each kind of position encoding."""
    model = make_model(pos, norm_position=norm_position, seed=21).double().eval()
    src = padded_batch()
    with torch.no_grad():
        growing = model.encode(src)
        fixed = model.fixed_cache(model.encode(src), room=7)
        prev = torch.full((src.size(0),), BOS)
        for step in range(7):
            expected, growing = model.decode_step(prev, growing)
            logits, state = model.decode_step(prev, fixed)
            assert state is fixed and int(fixed.position) == step + 1  # advanced in place
            torch.testing.assert_close(logits, expected, rtol=1e-10, atol=1e-10)
            prev = expected.argmax(-1)


def test_a_fixed_cache_under_bf16_autocast_gives_the_logits_of_the_growing_cache():
    """Under autocast the projections give bf16 and the caches are the encoder state's fp32: writing a step
    in place was a dtype error (index_copy_), where the growing cache's concatenation promotes."""
    model = make_model("absolute", norm_position="pre", seed=21).eval()
    src = padded_batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        growing, fixed = model.encode(src), model.fixed_cache(model.encode(src), room=5)
        prev = torch.full((src.size(0),), BOS)
        for _ in range(5):
            expected, growing = model.decode_step(prev, growing)
            logits, _ = model.decode_step(prev, fixed)
            torch.testing.assert_close(logits, expected)  # the same arithmetic, so the same rounding
            prev = expected.argmax(-1)


@pytest.mark.parametrize("pos", ["absolute", "rope"])
def test_decoding_steps_by_the_written_out_formula_give_the_kernels_logits(pos, monkeypatch):
    """``MultiHeadAttention.explicit_decoding_steps``: a step's attentions (one query, no gradients) by the
    written-out formula give the fused kernel's logits over fixed caches (float64), and the switch touches
    nothing else: a training forward and a pass over several positions keep the kernel."""
    from nmt.modules.attention import MultiHeadAttention

    model = make_model(pos, seed=23).double().eval()
    src = padded_batch()
    explicit_calls = []
    real_explicit = MultiHeadAttention._explicit
    monkeypatch.setattr(
        MultiHeadAttention, "_explicit", lambda self, *a: explicit_calls.append(a[0].size(2)) or real_explicit(self, *a)
    )
    logits = {}
    for explicit in (False, True):
        monkeypatch.setattr(MultiHeadAttention, "explicit_decoding_steps", explicit)
        with torch.no_grad():
            state = model.fixed_cache(model.encode(src), room=6)
            prev, logits[explicit] = torch.full((src.size(0),), BOS), []
            for _ in range(6):
                step_logits, state = model.decode_step(prev, state)
                logits[explicit].append(step_logits)
                prev = step_logits.argmax(-1)
    torch.testing.assert_close(torch.stack(logits[True]), torch.stack(logits[False]), rtol=1e-10, atol=1e-10)
    # the written-out formula ran for the steps only: 2 attentions x 2 layers x 6 steps, one query each
    assert explicit_calls == [1] * 24, explicit_calls
    explicit_calls.clear()
    tgt = torch.full((src.size(0), 4), BOS)
    model(src, tgt).sum()  # several positions (encoding, a whole target) with gradients on
    model(src, tgt[:, :1]).sum()  # one position, but gradients on: a training step, not a decoding one
    with torch.no_grad():
        model(src, tgt)
    assert explicit_calls == []


@pytest.mark.parametrize("pos", POSITIONS)
def test_a_fixed_cache_step_reads_nothing_back(pos):
    """A read of the device cannot be recorded in a CUDA graph: the step of a fixed cache makes none."""
    model = make_model(pos, seed=22).eval()
    src = padded_batch()
    with torch.no_grad():
        step = graphed.GreedyStep(model, src, max_lengths(src, 0, CFG), BOS, EOS, choose(model.pad_id))
        with HostReads() as reads:
            for _ in range(3):
                step.run()
    assert reads.calls == []


@pytest.mark.parametrize("pos", POSITIONS)
def test_the_graphed_step_run_to_the_end_chooses_the_tokens_of_the_eager_search(pos):
    """Run without a graph (the kernels a graph would replay), after a run and a rewind as the recording
    does: the outputs are those of the eager greedy search, which drops ended sentences (float64)."""
    model = make_model(pos, seed=12).double().eval()
    src = padded_batch()
    limits = max_lengths(src, model.pad_id, CFG)
    step = graphed.GreedyStep(model, src, limits, BOS, EOS, choose(model.pad_id))
    with torch.no_grad():
        step.run()  # the warm-up run before recording
        step.reset()
        for _ in range(step.steps):
            step.run()
    reference = _greedy(model, src, BOS, EOS, CFG, every=1)
    assert step.tokens() == reference
    assert len({len(o) for o in reference}) > 1  # sentences ended at different steps


class ReplayedOnTheCpu:
    """Stands in for a recorded graph: each replay runs the step (the CPU has no CUDA graphs)."""

    def __init__(self, step):
        step.run()  # what record() does: a run, then a rewind
        step.reset()
        self.step, self.replays = step, 0

    def replay(self):
        self.replays += 1
        self.step.run()


class EndsAt:
    """The Transformer, with each sentence's end token made certain at a chosen step (an untrained model
    rarely ends by itself): the steps ride in the state, so they follow the rows the eager search drops."""

    def __init__(self, model, ends_at: list[int]):
        self.model, self.pad_id, self.ends_at = model, model.pad_id, torch.tensor(ends_at)

    def encode(self, src):
        state = self.model.encode(src)
        state.tensors["ends_at"] = self.ends_at.clone()
        return state

    def fixed_cache(self, state, room):
        return self.model.fixed_cache(state, room)

    def decode_step(self, prev, state):
        step = state.position.clone() if state.position is not None else torch.tensor(state.step)
        ends = state.tensors["ends_at"]
        logits, state = self.model.decode_step(prev, state)
        return logits.index_add(1, torch.tensor([EOS]), 1e3 * (ends <= step).to(logits.dtype)[:, None]), state


def test_the_search_dispatches_to_the_graphed_search_and_stops_at_a_read_once_all_ended(monkeypatch):
    """decode() of a greedy search uses the graphed search where use_graphs says so; it replays until a
    read every READ_EVERY steps sees every sentence ended, and chooses the eager search's tokens."""
    src = padded_batch()
    model = EndsAt(make_model("absolute", seed=12).double().eval(), [3, 5, 2, 5, 4, 6, 3, 8, 5])
    reference = _greedy(model, src, BOS, EOS, CFG, every=1)
    graphs = []
    monkeypatch.setattr(search, "use_graphs", lambda model, device: True)
    monkeypatch.setattr(graphed, "record", lambda step: graphs.append(ReplayedOnTheCpu(step)) or graphs[-1])
    monkeypatch.setattr(graphed, "READ_EVERY", 2)
    assert decode(model, src, BOS, EOS, CFG) == reference
    (graph,) = graphs
    assert [len(o) for o in reference] == [3, 5, 2, 5, 4, 6, 3, 8, 5]  # then the end token
    assert graph.step.steps == 15 and graph.replays == 10  # the first read after the last end (step 9)


def test_a_step_that_cannot_be_recorded_falls_back_to_the_eager_search_and_is_not_tried_again(monkeypatch):
    """A failed recording may leave the allocator's bookkeeping behind: the search decodes step by step,
    warns once with the reason, and later searches do not record again (each fallback is counted, for
    the GPU benchmark)."""
    tries = []

    def cannot(step):
        tries.append(step)
        raise graphed.RecordingError("RuntimeError: operation not permitted when stream is capturing")

    model = make_model("absolute", seed=12).double().eval()
    src = padded_batch()
    reference = _greedy(model, src, BOS, EOS, CFG, every=1)
    monkeypatch.setattr(search, "use_graphs", lambda model, device: True)
    monkeypatch.setattr(graphed, "record", cannot)
    monkeypatch.setattr(graphed, "FELL_BACK", {})
    monkeypatch.setattr(graphed, "FAILED", [])
    with pytest.warns(UserWarning, match=r"step by step without CUDA graphs.*\(RuntimeError: operation not permitted"):
        assert decode(model, src, BOS, EOS, CFG) == reference
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert decode(model, src, BOS, EOS, CFG) == reference
    assert len(tries) == 1 and graphed.FELL_BACK == {graphed.FAILED[0]: 2}


def test_an_error_outside_the_recording_is_raised_not_taken_for_a_step_that_cannot_be_recorded(monkeypatch):
    """An error of the warm-up run (out of memory, a bug in the model) is the step-by-step search's too:
    it is raised, and graphs stay on."""

    def out_of_memory(step):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(search, "use_graphs", lambda model, device: True)
    monkeypatch.setattr(graphed, "record", out_of_memory)
    monkeypatch.setattr(graphed, "FAILED", [])
    with pytest.raises(RuntimeError, match="out of memory"):
        decode(make_model("absolute", seed=12).eval(), padded_batch(), BOS, EOS, CFG)
    assert graphed.FAILED == []


def test_a_cache_the_position_table_cannot_hold_is_decoded_step_by_step(monkeypatch):
    """A learned table shorter than the output limit, in a model that does not report its size (a wrapper
    without ``position_limits``): no fixed cache (the step-by-step search fails only if a sentence gets
    that long); here every sentence ends before it."""
    model = make_model("learned", seed=12).double().eval()
    model.tgt_pos.max_len = 12  # the limit is 15 tokens
    src = padded_batch()
    with pytest.raises(ValueError, match=r"position 14 is beyond pos.max_len=12"):
        model.fixed_cache(model.encode(src), room=15)
    ends = EndsAt(model, [3, 5, 2, 5, 4, 6, 3, 8, 5])
    monkeypatch.setattr(search, "use_graphs", lambda model, device: True)
    monkeypatch.setattr(graphed, "record", lambda step: pytest.fail("no recording without a fixed cache"))
    assert [len(o) for o in decode(ends, src, BOS, EOS, CFG)] == [3, 5, 2, 5, 4, 6, 3, 8, 5]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_outputs_stop_at_what_a_learned_position_table_holds(strategy, caplog):
    """An output limit beyond the target table (decode.max_len_b=100, a table of 12) failed at position 12 of
    any sentence that had not ended; the limit is now the table's size. A source beyond the source table
    is cut to it, saying so (translate.py and serve.py failed with a training hint)."""
    from nmt.data.tokenizer import Tokenizer, TokenizerSettings
    from nmt.inference.loading import LoadedModel
    from nmt.inference.translator import Translator
    from nmt.tasks.translation import TranslationTask

    model = make_model("learned", seed=12).eval()
    model.src_pos.max_len, model.tgt_pos.max_len = 8, 12
    never_ends = SearchConfig(strategy=strategy, beam_size=2, max_len_a=0.0, max_len_b=100)
    outputs = decode(model, padded_batch()[:, :7], BOS, EOS, never_ends)
    assert max(len(o) for o in outputs) <= 11  # 12 positions: 11 tokens and the end token
    words = "one two three four five six seven eight nine ten"
    tokenizer = Tokenizer.train([words] * 20, TokenizerSettings(vocab_size=24, byte_fallback=False))
    loaded = LoadedModel(model, tokenizer, tokenizer, {}, ["x.ckpt"], TranslationTask())
    translator = Translator([loaded], never_ends)
    assert translator.max_input_len == 7 and "lowered" not in caplog.text  # the default: lowered without a word
    assert Translator([loaded], never_ends, max_input_len=256).max_input_len == 7
    assert "max_input_len=256 lowered to 7" in caplog.text  # a limit given: said
    assert len(translator.translate([words])) == 1 and "were truncated (first: line 1)" in caplog.text
    with pytest.raises(ValueError, match=r"^a prefix of 12 tokens and its end token need more than the 12 target"):
        decode(model, padded_batch()[:2, :7], BOS, EOS, never_ends, prefixes=[[5] * 12, [5]])
    # an ensemble holds what every member holds
    from nmt.decoding.ensemble import Ensemble

    other = make_model("learned", seed=13).eval()
    other.src_pos.max_len, other.tgt_pos.max_len = 10, 9
    assert Ensemble([model, other]).position_limits() == (8, 9)
    assert Ensemble([model, make_model("absolute")]).position_limits() == (8, 12)


def test_graphs_only_on_a_gpu_for_models_with_fixed_caches_and_not_under_autocast(monkeypatch):
    from nmt.models.rnn import RNNSeq2Seq

    assert graphed.supports_graphs(make_model()) and not graphed.supports_graphs(RNNSeq2Seq.__new__(RNNSeq2Seq))
    assert not search.use_graphs(make_model(), torch.device("cpu"))
    assert search.use_graphs(make_model(), torch.device("cuda"))
    # autocast's cache of cast weights cannot be recorded (the CPU has no CUDA autocast to switch on)
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda device_type: device_type == "cuda")
    assert not search.use_graphs(make_model(), torch.device("cuda"))


class PoolBookkeeping:
    """A stand-in for torch.cuda's graphs, streams and pools that keeps the caching allocator's count of a
    private pool's users: recording into a pool adds one, destroying a graph takes it away, and a pool
    that is known but has no user left cannot be recorded into again (PyTorch's internal assertion
    ``use_count > 0``). The step runs on the CPU meanwhile."""

    def __init__(self):
        self.users: dict[int, int] = {}
        self.handles = 0
        book = self

        class Graph:
            def __init__(self):
                self.pool = None

            def capture_begin(self, pool, capture_error_mode):
                if pool in book.users and book.users[pool] == 0:
                    raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED")
                book.users[pool] = book.users.get(pool, 0) + 1
                self.pool = pool

            def capture_end(self):
                pass

            def __del__(self):
                if self.pool is not None:
                    book.users[self.pool] -= 1

        self.Graph = Graph

    def handle(self):
        self.handles += 1
        return self.handles

    def install(self, monkeypatch):
        book = self
        book.streams = 0

        class Stream:
            def __init__(self):
                book.streams += 1

            def wait_stream(self, other):
                pass

        cuda = torch.cuda
        for name, value in {
            "CUDAGraph": self.Graph,
            "graph_pool_handle": self.handle,
            "Stream": Stream,
            "current_stream": lambda: SimpleNamespace(wait_stream=lambda other: None),
            "stream": lambda s: contextlib.nullcontext(),
            "synchronize": lambda: None,
            "current_device": lambda: 0,
        }.items():
            monkeypatch.setattr(cuda, name, value)
        monkeypatch.setattr(graphed, "_POOLS", {})


def test_each_recording_finds_the_shared_pool_still_in_use_after_the_last_search_ended(monkeypatch):
    """Validation records a graph per batch into one pool per device and thread. Once a search ends its
    graph is dropped; were it the pool's only user, the next recording into that pool would meet the
    allocator's assertion (seen on an H100). The pool keeps its last graph until the next is recorded."""
    book = PoolBookkeeping()
    book.install(monkeypatch)
    model = make_model("absolute", seed=12).double().eval()
    src = padded_batch()
    limits = max_lengths(src, model.pad_id, CFG)
    for _ in range(3):  # three searches, each recording a graph and dropping it at its end
        graph = graphed.record(graphed.GreedyStep(model, src, limits, BOS, EOS, choose(model.pad_id)))
        del graph
        assert book.users == {1: 1}  # one pool, the last graph its user
    assert book.handles == 1
    assert book.streams == 1  # recorded on one stream: the allocator reuses a freed block on its own stream only


def test_a_recording_the_allocator_refuses_to_begin_is_a_recording_error(monkeypatch):
    """An error at the start of the recording (here the allocator's assertion) is the recording's, so the
    search falls back to steps rather than failing the run."""
    book = PoolBookkeeping()
    book.install(monkeypatch)
    graphed._POOLS[(0, threading.get_ident())] = [1, None, torch.cuda.Stream()]
    book.users[1] = 0  # a pool whose graphs are all gone
    model = make_model("absolute", seed=12).double().eval()
    src = padded_batch()
    step = graphed.GreedyStep(model, src, max_lengths(src, model.pad_id, CFG), BOS, EOS, choose(model.pad_id))
    with pytest.raises(graphed.RecordingError, match="use_count > 0"):
        graphed.record(step)
