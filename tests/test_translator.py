"""The Translator API and translate.py: n-best with scores equal to the model's own log-probabilities,
prefixes, alignments from attention, ensembles checked against their members, and the command line in a
pipe (line by line, flushed), with its bad-input messages."""

import json
import os
import re
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

from nmt.data.segmenter import Segmenter
from nmt.data.tokenizer import BOS_ID, EOS_ID, Tokenizer, TokenizerSettings
from nmt.decoding.settings import RANKED, SAMPLED, SearchConfig
from nmt.decoding.translate import translate_lines
from nmt.inference.checkpoint import CheckpointError
from nmt.inference.loading import load_model
from nmt.inference.translator import Hypothesis, InputError, Translator
from nmt.tasks.language_model import LanguageModelTask
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, STRATEGY_NEEDS, compose_train

SOURCES = ["one two three", "seven eight", "", "four four nine two"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two tiny Transformers on the toy task (seeds 1 and 2) and a tiny RNN, briefly trained."""
    paths = {}
    for name, extra in (("seed1", ["seed=1"]), ("seed2", ["seed=2"]), ("rnn", ["model=rnn", "seed=1"])):
        run_dir = tmp_path_factory.mktemp(name)
        train(compose_train(*extra, "trainer.max_epochs=5", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"))
        paths[name] = str(run_dir / "checkpoints" / "best.ckpt")
    return paths


def exact(**search) -> dict:
    return {"beam_size": 4, "length_penalty": 0.0, "device": "cpu", **search}


def test_translate_equals_the_decoding_evaluate_uses(checkpoints):
    translator = Translator.from_checkpoint(checkpoints["seed1"], beam_size=3, device="cpu")
    loaded = load_model(checkpoints["seed1"], device="cpu")
    expected = translate_lines(
        loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, SOURCES, SearchConfig(beam_size=3)
    )
    assert translator.translate(SOURCES) == expected and expected[2] == ""


@pytest.mark.parametrize("strategy", SAMPLED)
def test_a_sampling_seed_fixes_each_lines_sample_whatever_the_batching(checkpoints, strategy):
    """decode.seed: a line's sample depends on the seed and its line number only: the same in a batch of
    all lines, one line at a time, and in evaluate.py's batches; equal lines draw apart (each call once
    restarted one stream: copies, and samples that changed with the batching)."""
    needs = STRATEGY_NEEDS.get(strategy, {})
    settings = {"strategy": strategy, "seed": 3, "temperature": 3.0, "device": "cpu", **needs}
    lines = ["one two three four five six"] * 6
    translator = Translator.from_checkpoint(checkpoints["seed1"], **settings)
    together = translator.translate(lines)
    assert len(set(together)) > 1, together
    one_by_one = [translator.translate_nbest([line], first_line=n)[0][0].text for n, line in enumerate(lines, 1)]
    assert one_by_one == together
    loaded = load_model(checkpoints["seed1"], device="cpu")
    search = SearchConfig(strategy=strategy, seed=3, temperature=3.0, **needs)
    for max_tokens in (8, 6000):  # one line a batch, all lines in one
        assert (
            translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, lines, search, max_tokens)
            == together
        )
    other_seed = Translator.from_checkpoint(checkpoints["seed1"], **{**settings, "seed": 4}).translate(lines)
    assert other_seed != together


@pytest.mark.parametrize("strategy", [s for s in SAMPLED if s not in RANKED])
def test_sampling_n_best_draws_each_line_n_times_ranked_by_log_probability(checkpoints, strategy, tmp_path):
    """fairseq's --sampling --nbest N: N draws a line (for minimum-Bayes-risk decoding, sampled back-translation),
    best first; sampling gave one output, and n_best > 1 was refused. Seeded, a line's draws depend on the seed
    and its line number alone, and its first draw is its single sample."""
    needs = STRATEGY_NEEDS.get(strategy, {})
    settings = {"strategy": strategy, "seed": 3, "temperature": 3.0, "device": "cpu", **needs}
    translator = Translator.from_checkpoint(checkpoints["seed1"], **settings)
    lines = ["one two three four five six", "seven eight", ""]
    drawn = translator.translate_nbest(lines, n_best=4)
    single = translator.translate(lines)
    compared = []
    for line, hyps, alone in zip(lines, drawn, single, strict=True):
        if not line:
            assert [h.text for h in hyps] == [""]
            continue
        assert len(hyps) == 4 and [h.log_prob for h in hyps] == sorted((h.log_prob for h in hyps), reverse=True)
        assert alone in [h.text for h in hyps]
        for h in hyps:  # each draw's score is its own log-probability, teacher-forced again by the scorer
            again = translator.score(line, h.text)  # where the text is spelt as drawn (a draw may spell it otherwise)
            assert h.score == h.log_prob
            if again.tokens == h.tokens:
                compared.append(h.log_prob == pytest.approx(again.log_prob, abs=1e-4))
    assert compared and all(compared)
    assert len({h.text for h in drawn[0]}) > 1  # draws, not copies
    alone = translator.translate_nbest(lines[1:2], n_best=4, first_line=2)[0]
    assert [h.text for h in alone] == [h.text for h in drawn[1]]
    with pytest.raises(ValueError, match=r"^n_best=0: must be >= 1 \(sampling draws n_best outputs a line\)$"):
        translator.translate_nbest(lines, n_best=0)
    greedy = Translator.from_checkpoint(checkpoints["seed1"], strategy="greedy", device="cpu")
    # it spoke of greedy search's "beam size (1)", which greedy search has none of
    with pytest.raises(ValueError, match=r"^n_best=2: greedy search gives one output a line; for more, search with"):
        greedy.translate_nbest(lines, n_best=2)
    done = subprocess.run(
        [sys.executable, str(ROOT / "translate.py"), f"ckpt_path={checkpoints['seed1']}", "n_best=3", "threads=1"]
        + [f"decode.{key}={value}" for key, value in settings.items() if key != "device"],
        input="seven eight\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert done.returncode == 0 and [r[0] for r in rows] == ["0", "0", "0"], done.stderr
    assert [r[2] for r in rows] == [h.text for h in translator.translate_nbest(["seven eight"], n_best=3)[0]]


def test_a_ranking_search_is_told_each_lines_number_whatever_the_batching(checkpoints, monkeypatch):
    """A ranking search that draws at random (none ships; a new one may) seeds each line's stream from its
    number, as sampling does, so its outputs cannot depend on the batching: the Translator and evaluate.py's
    decoding hand ranked_hypotheses each row's line number (they once handed it none)."""
    import nmt.decoding.search as search
    import nmt.inference.translator as translator_module

    lines = ["one two", "three four five six", "seven", "eight nine"]
    loaded = load_model(checkpoints["seed1"], device="cpu")
    told: list[dict] = []

    def recording(model, src, bos_id, eos_id, cfg, prefixes=None, numbers=None):
        rows = [[t for t in row if t != 0] for row in src.tolist()]
        told[-1].update({number: row for number, row in zip(numbers, rows, strict=True)})
        return real(model, src, bos_id, eos_id, cfg, prefixes, numbers)

    real = search.ranked_hypotheses
    monkeypatch.setattr(search, "ranked_hypotheses", recording)
    monkeypatch.setattr(translator_module, "ranked_hypotheses", recording)
    expected = {n: loaded.src_tokenizer.encode(line) + [EOS_ID] for n, line in enumerate(lines, 1)}
    for max_tokens in (8, 6000):  # one line a batch, then all in one
        told.append({})
        Translator.from_checkpoint(checkpoints["seed1"], beam_size=2, max_tokens=max_tokens, device="cpu").translate(
            lines
        )
        told.append({})
        translate_lines(
            loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, lines, SearchConfig(beam_size=2), max_tokens
        )
    assert told == [expected] * 4
    told.append({})  # a line numbered as the caller says
    Translator.from_checkpoint(checkpoints["seed1"], beam_size=2, device="cpu").translate_nbest(
        lines[1:2], first_line=2
    )
    assert told[-1] == {2: expected[2]}


@pytest.mark.parametrize("model", ["seed1", "rnn"])
def test_nbest_scores_are_the_models_own_log_probabilities(checkpoints, model):
    """With no length penalty the search's score of a hypothesis is its log-probability, which a separate
    teacher-forced pass computes again token by token."""
    translator = Translator.from_checkpoint(checkpoints[model], **exact())
    for line, hyps in zip(SOURCES, translator.translate_nbest(SOURCES, n_best=3), strict=True):
        if not line:
            assert [(h.text, h.score) for h in hyps] == [("", 0.0)]
            continue
        assert len(hyps) == 3 and [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob, abs=1e-4)
            assert len(h.token_log_probs) == len(h.tokens) + 1 and all(p <= 0 for p in h.token_log_probs)
            assert translator.tgt_tokenizer.decode(translator.tgt_tokenizer.sp.piece_to_id(h.tokens)) == h.text


def test_a_prefix_starts_every_output(checkpoints, caplog):
    """A prefix given for an empty source line vanished without a word (the line is not decoded)."""
    translator = Translator.from_checkpoint(checkpoints["seed1"], **exact())
    prefixes = ["acht", "zwei zwei", "vier", "drei"]
    assert SOURCES[2] == ""
    for strategy in ("beam", "greedy"):
        translator.search = replace(translator.search, strategy=strategy)
        found = translator.translate_nbest(SOURCES, prefixes=prefixes)
        for prefix, line, hyps in zip(prefixes, SOURCES, found, strict=True):
            if line:
                assert hyps[0].text.startswith(prefix), (strategy, prefix, hyps[0].text)
        assert found[2][0].text == ""
    said = "line 3: the source line is empty, so it is not translated and its output is empty, without its prefix"
    assert said in caplog.text and "line 1:" not in caplog.text
    caplog.clear()
    translator.translate_nbest(["", "one", ""], prefixes=["acht", "", "zwei"], first_line=7)
    assert "2 lines (first: line 7): the source line is empty" in caplog.text
    with pytest.raises(ValueError, match="2 prefixes for 4 lines"):
        translator.translate_nbest(SOURCES, prefixes=prefixes[:2])


def test_any_iterable_of_lines_is_read_once_and_an_unspellable_prefix_is_named(checkpoints, caplog):
    """A generator of lines failed (read twice: IndexError); a prefix the target vocabulary cannot spell is
    forced as <unk> pieces, so the output does not begin with its text: said, with the line."""
    translator = Translator.from_checkpoint(checkpoints["seed1"], **exact())
    assert translator.translate(line for line in SOURCES) == translator.translate(SOURCES)
    found = translator.translate_nbest(iter(SOURCES[:2]), prefixes=iter(["acht", "Xylophon QQ"]), first_line=5)
    assert found[0][0].text.startswith("acht") and not found[1][0].text.startswith("Xylophon")
    # the characters outside the target vocabulary's pieces are named: they alone are <unk>, the rest is spelt
    tgt = translator.loaded[0].tgt_tokenizer
    spelling = [i for i in range(tgt.vocab_size) if not (tgt.sp.is_control(i) or tgt.sp.is_unknown(i))]
    alphabet = set("".join(tgt.pieces(spelling)))  # not <pad>, <s>, </s>, <unk>: they spell no text
    assert [c for c in "Xylophon" if c not in alphabet] == ["X", "y", "p"] and "Q" not in alphabet
    assert (
        "line 6: the prefix holds what the target vocabulary cannot spell, forced as <unk> and shown as ⁇, so the "
        "output does not begin with the prefix as written: X, y, p in Xylophon; QQ"
    ) in caplog.text
    assert "line 5:" not in caplog.text


def test_alignments_follow_the_attention_of_the_last_layer(checkpoints):
    translator = Translator.from_checkpoint(checkpoints["seed1"], **exact())
    (best,) = translator.translate_nbest(["one two three"], with_attention=True)[0]
    loaded = translator.loaded[0]
    src = torch.tensor([[*loaded.src_tokenizer.encode("one two three"), EOS_ID]])
    ids = [loaded.tgt_tokenizer.sp.piece_to_id(piece) for piece in best.tokens]
    maps = loaded.model.attention_maps(src, torch.tensor([[BOS_ID, *ids]]))
    last = maps[list(maps)[-1]][0].mean(0)  # (tgt, src), heads averaged
    expected = [(s, t) for t, s in enumerate(last[: len(ids)].argmax(-1).tolist()) if s < src.size(1) - 1]
    assert best.alignment == expected and best.alignment
    assert best.src_tokens[-1] == "</s>" and len(best.src_tokens) == src.size(1)
    assert {name: w.shape for name, w in best.attention.items()} == {"layer0": (4, len(ids) + 1, src.size(1))}


def test_an_alignment_layer_the_model_lacks_is_refused_naming_its_layers(checkpoints):
    """The toy models have one decoder layer: layer 1 (an IndexError before) and -2 are refused, 0 is -1. They
    are refused as the translator is built (they were, only once a first batch had been searched; translate(),
    which scores nothing, never said so), as is a layer that is no number; each member of an ensemble too."""
    for layer in (1, -2):
        for paths in (checkpoints["seed1"], [checkpoints["seed1"], checkpoints["seed2"]]):
            with pytest.raises(
                ValueError,
                match=r"alignment_layer=-?\d: the model has 1 cross-attention layer\(s\) \(layer0\); pass one of "
                r"-1..0",
            ):
                Translator.from_checkpoint(paths, alignment_layer=layer, **exact())
    for layer in ("last", 1.0, True):
        with pytest.raises(ValueError, match=r"must be a whole number, a decoder layer \(-1: the last\)$"):
            Translator.from_checkpoint(checkpoints["seed1"], alignment_layer=layer, **exact())
    assert Translator.from_checkpoint(checkpoints["rnn"], alignment_layer=0, **exact()).translate("one") is not None
    first, last = (
        Translator.from_checkpoint(checkpoints["seed1"], alignment_layer=layer, **exact()).translate_nbest(SOURCES)
        for layer in (0, -1)
    )
    assert [[h.alignment for h in hyps] for hyps in first] == [[h.alignment for h in hyps] for hyps in last]


def test_an_ensembles_alignments_average_each_members_own_last_layer(checkpoints):
    """A Transformer with an RNN: each member's last layer (the RNN's one attention), heads averaged, then
    their mean (the merged maps' last name was the RNN's alone)."""
    translator = Translator.from_checkpoint([checkpoints["seed1"], checkpoints["rnn"]], **exact())
    (best,) = translator.translate_nbest(["one two three"])[0]
    first = translator.loaded[0]
    src = torch.tensor([[*first.src_tokenizer.encode("one two three"), EOS_ID]])
    tgt_in = torch.tensor([[BOS_ID, *[first.tgt_tokenizer.sp.piece_to_id(p) for p in best.tokens]]])
    lasts = []
    for loaded in translator.loaded:
        maps = loaded.model.attention_maps(src, tgt_in)
        lasts.append(maps[list(maps)[-1]][0].float().mean(0))
    mean = torch.stack(lasts).mean(0)[: len(best.tokens)]
    expected = [(s, t) for t, s in enumerate(mean.argmax(-1).tolist()) if s < src.size(1) - 1]
    assert best.alignment == expected and best.alignment


def test_an_ensemble_of_a_model_with_itself_is_that_model(checkpoints):
    one = Translator.from_checkpoint(checkpoints["seed1"], **exact())
    two = Translator.from_checkpoint([checkpoints["seed1"], checkpoints["seed1"]], **exact())
    for a, b in zip(one.translate_nbest(SOURCES, n_best=2), two.translate_nbest(SOURCES, n_best=2), strict=True):
        assert [h.text for h in a] == [h.text for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_an_ensemble_scores_the_renormalised_mean_of_its_members(checkpoints):
    ensemble = Translator.from_checkpoint([checkpoints["seed1"], checkpoints["seed2"]], **exact())
    members = [m.model for m in ensemble.loaded]
    tokenizer = ensemble.loaded[0]
    for line, hyps in zip(SOURCES, ensemble.translate_nbest(SOURCES, n_best=2), strict=True):
        if not line:
            continue
        src = torch.tensor([[*tokenizer.src_tokenizer.encode(line), EOS_ID]])
        for h in hyps:
            ids = [tokenizer.tgt_tokenizer.sp.piece_to_id(piece) for piece in h.tokens]
            tgt_in, target = torch.tensor([[BOS_ID, *ids]]), torch.tensor([*ids, EOS_ID])
            with torch.no_grad():
                each = [F.log_softmax(m(src, tgt_in)[0].float(), dim=-1) for m in members]
            mean = F.log_softmax(torch.stack(each).mean(0), dim=-1)
            expected = mean[torch.arange(len(target)), target]
            assert h.token_log_probs == pytest.approx(expected.tolist(), abs=1e-4)
            assert h.score == pytest.approx(float(expected.sum()), abs=1e-4)
            # the ensemble's probability of its output lies between its members' (a geometric mean, renormalised)
            alone = [float(e[torch.arange(len(target)), target].sum()) for e in each]
            assert (
                min(alone) - 1e-4
                <= float(torch.stack(each).mean(0)[torch.arange(len(target)), target].sum())
                <= max(alone) + 1e-4
            )


def test_ensembles_of_other_vocabularies_or_tasks_and_language_models_are_refused(checkpoints):
    a, b = load_model(checkpoints["seed1"], device="cpu"), load_model(checkpoints["seed2"], device="cpu")
    words = [f"wort{i} ding{i % 7} sache{i % 5}" for i in range(400)]
    elsewhere = Tokenizer.train(words, TokenizerSettings(vocab_size=300, byte_fallback=True))
    other = replace(b, tgt_tokenizer=elsewhere)  # a checkpoint trained on other text
    with pytest.raises(CheckpointError, match="different tgt vocabularies"):
        Translator([a, other], SearchConfig())
    # the same subwords over Moses-tokenised text: the members would read and write different text
    tokenised = replace(b, tgt_tokenizer=Tokenizer(b.tgt_tokenizer.model_proto, Segmenter("moses", lang="de")))
    with pytest.raises(CheckpointError, match="different tgt vocabularies or word segmentation"):
        Translator([a, tokenised], SearchConfig())
    lm = replace(a, task=LanguageModelTask())
    with pytest.raises(
        CheckpointError, match="is a LanguageModelTask, .* a TranslationTask: ensemble checkpoints of one task"
    ):
        Translator([a, lm], SearchConfig())
    with pytest.raises(CheckpointError, match="is a language model: ensembles are of encoder-decoder models only"):
        Translator([lm, lm], SearchConfig())
    with pytest.raises(ValueError, match=r"n_best=3: greedy search gives one output a line"):
        Translator([a], SearchConfig(strategy="greedy")).translate_nbest(SOURCES, n_best=3)


def test_sources_are_cut_where_the_run_cut_them_as_evaluate_cuts_them(checkpoints, caplog):
    """A run trained on truncated sources (data.max_src_len: a summariser's) is read with them cut the same
    way by the translator (translate.py, serve.py, the API), as evaluate.py decodes, unless told another
    limit: the translator kept 256 and translated such inputs otherwise than evaluate.py."""
    loaded = load_model(checkpoints["seed1"], device="cpu")
    loaded.config["data"]["max_src_len"] = 3
    search = SearchConfig(beam_size=2, length_penalty=0.0)
    lines = ["one two three four five six", "seven", "two two nine nine four four"]
    evaluated = translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, lines, search, 6000, 3)
    translator = Translator([loaded], search)
    assert translator.max_input_len == 3 and translator.translate(lines) == evaluated
    assert "2 input line(s) longer than max_input_len=3 subword tokens were truncated" in caplog.text
    assert Translator([loaded], search, max_input_len=256).max_input_len == 256  # a limit given is kept
    assert Translator([load_model(checkpoints["seed1"], device="cpu")], search).max_input_len == 256  # no run limit


def test_a_long_line_is_truncated_with_a_warning_or_refused_naming_it(checkpoints, caplog):
    translator = Translator.from_checkpoint(checkpoints["seed1"], max_input_len=5, device="cpu", beam_size=2)
    long = " ".join(["seven"] * 20)
    assert len(translator.translate(["one", long])) == 2
    assert "truncated (first: line 2)" in caplog.text
    strict = Translator.from_checkpoint(checkpoints["seed1"], max_input_len=5, on_long_input="error", device="cpu")
    with pytest.raises(InputError, match=r"line 12: \d+ subword tokens, more than max_input_len=5; shorten it, raise"):
        strict.translate_nbest(["one", long], first_line=11)
    # where a learned position table sets the limit, a larger max_input_len would be lowered to it again
    loaded = load_model(checkpoints["seed1"], device="cpu")
    loaded.model.position_limits = lambda: (6, None)
    at_table = Translator([loaded], SearchConfig(beam_size=2), max_input_len=100, on_long_input="error")
    assert at_table.max_input_len == 5
    with pytest.raises(
        InputError,
        match=r"line 2: \d+ subword tokens, more than max_input_len=5; shorten it \(the model's learned position "
        r"table, pos\.max_len=6, holds no longer source\), or pass on_long_input=truncate$",
    ):
        at_table.translate(["one", long])


# ---- translate.py -------------------------------------------------------------------------------------
def command(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "translate.py"), *args, "decode.beam_size=3", "threads=1", "device=cpu"]


def test_translate_py_writes_each_line_as_soon_as_it_is_read(checkpoints):
    """In a pipe: the first output arrives while standard input is still open (flushed line by line)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command(f"ckpt_path={checkpoints['seed1']}"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        process.stdin.write("one two three\n")
        process.stdin.flush()
        first = process.stdout.readline()
        process.stdin.write("\nseven eight\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(timeout=120) == 0, process.stderr.read()
    finally:
        process.kill()
    expected = Translator.from_checkpoint(checkpoints["seed1"], beam_size=3, device="cpu").translate(
        ["one two three", "", "seven eight"]
    )
    assert [first, *rest.splitlines(keepends=True)] == [t + "\n" for t in expected]


def test_translate_py_nbest_alignments_and_prefixes(checkpoints, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("one two three\nseven eight\n", encoding="utf-8")
    (tmp_path / "prefix.txt").write_text("zwei\n\n", encoding="utf-8")
    out = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", f"input={source}", "n_best=2", "alignments=true",
                f"prefix_file={tmp_path / 'prefix.txt'}"),
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == ["0", "0", "1", "1"]
    for line in lines:
        index, score, text, alignment = line.split("\t")
        assert float(score) <= 0 and all(len(pair.split("-")) == 2 for pair in alignment.split())
    assert lines[0].split("\t")[2].startswith("zwei") and lines[1].split("\t")[2].startswith("zwei")


def test_translate_py_from_standard_input_refuses_a_prefix_file_with_lines_left_over(checkpoints, tmp_path):
    """A file input with another count of prefixes was refused; standard input ignored the extra ones."""
    (tmp_path / "prefix.txt").write_text("zwei\n\ndrei\n", encoding="utf-8")
    out = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", f"prefix_file={tmp_path / 'prefix.txt'}"),
        input="one two\nthree\n", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert len(out.stdout.splitlines()) == 2 and out.returncode == 2
    assert f"error: prefix_file={tmp_path / 'prefix.txt'} has 3 lines but standard input had 2" in out.stderr


@pytest.mark.parametrize("script", ["translate.py", "export.py"])
def test_putting_a_model_to_use_never_loads_lightning(checkpoints, script, tmp_path):
    """Lightning is the training loop's: translating and exporting a checkpoint never import it (several
    seconds of a translate.py's start went to it, most of the wait before the first line)."""
    args = [f"ckpt_path={checkpoints['seed1']}", "threads=1", "device=cpu"]
    if script == "export.py":
        args = [args[0], f"out={tmp_path / 'exported'}"]
    code = (
        "import atexit, runpy, sys; "
        "atexit.register(lambda: print('lightning loaded:', 'lightning' in sys.modules, file=sys.stderr)); "
        f"sys.argv = sys.argv[1:]; runpy.run_path({str(ROOT / script)!r}, run_name='__main__')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code, script, *args], input="one two\n", capture_output=True, text=True,
        env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lightning loaded: False" in done.stderr


@pytest.mark.fresh_processes  # a fresh interpreter, as typed (docs/testing.md)
def test_translate_py_warnings_go_to_standard_error_not_among_the_translations(checkpoints):
    """The truncation warning was logged to standard output: a pipe got one line more than it gave."""
    stdin = "one two\n" + "seven " * 30 + "\nthree\n"
    out = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", "max_input_len=4"), input=stdin, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert len(out.stdout.splitlines()) == 3 and "truncated" not in out.stdout
    # the first long line ("one two" is longer too) said as it is read, and the count at the end
    assert "2 input line(s) longer than max_input_len=4 subword tokens were truncated (first: line 1)" in out.stderr
    assert "Ctrl-D" not in out.stderr  # read from a pipe: no telling how to type lines
    quiet = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", "max_input_len=4", "hydra/job_logging=disabled"), input=stdin,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert quiet.returncode == 0 and quiet.stdout == out.stdout, quiet.stderr[-2000:]  # Hydra's other options too


@pytest.mark.parametrize(
    ("stdin", "args", "message"),
    [
        (b"one\n\xff\xfe two\n", [], "error: <stdin>, line 2: invalid UTF-8"),
        (b"one\ntw\x00o\n", [], "error: <stdin>, line 2: a NUL byte at character 3, not text"),
        (b"one\n" + b"seven " * 40 + b"\n", ["max_input_len=8", "on_long_input=error"], "error: <stdin>, line 2: "),
        (b"one\n", ["n_best=9"], "error: n_best=9: must be between 1 and the beam size (3"),
        (b"one\n", ["max_new_tokens=5"], "error: max_new_tokens=5: the words a language model adds to a prompt"),
        (b"one\nein haus\ta house\n", [], "error: <stdin>, line 2: holds a tab: each line is one source text"),
    ],
)
def test_translate_py_bad_input_is_one_line_naming_it(checkpoints, stdin, args, message):
    result = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", *args), input=stdin, capture_output=True, timeout=300
    )
    err = result.stderr.decode()
    assert result.returncode == 2 and message in err and "Traceback" not in err, err[-2000:]


def test_translate_py_at_a_terminal_says_how_to_use_it_and_translates_each_line_as_typed(checkpoints):
    """With no input file and no pipe, translate.py waited on the terminal without a word."""
    import os
    import pty

    main, terminal = pty.openpty()
    process = subprocess.Popen(
        command(f"ckpt_path={checkpoints['seed1']}"), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    os.close(terminal)
    os.write(main, b"one two three\n\x04")  # a line, then Ctrl-D at the start of the next
    out, err = process.communicate(timeout=300)
    os.close(main)
    assert process.returncode == 0, err.decode()[-2000:]
    assert "type a line and Enter for its output; Ctrl-D ends" in err.decode()
    assert len(out.decode().splitlines()) == 1


def test_nbest_output_has_n_lines_for_every_input_an_empty_line_too():
    """An empty line is not decoded: its one empty output is padded, so that every input has N lines."""
    from omegaconf import OmegaConf

    from nmt.inference.stream import format_output

    cfg = OmegaConf.create({"n_best": 3, "scores": False, "alignments": False})
    assert format_output(4, [Hypothesis("", 0.0, 0.0)], cfg) == "4\t0.0000\t\n4\t-inf\t\n4\t-inf\t\n"


def test_a_string_is_one_line_and_bad_limits_or_devices_are_refused_before_loading(checkpoints):
    """A string given where lines are expected is one sentence (it was translated character by character);
    a negative max_input_len cut lines from their end."""
    translator = Translator.from_checkpoint(checkpoints["seed1"], beam_size=3, device="cpu")
    assert translator.translate("one two three") == translator.translate(["one two three"])[0]
    (hypotheses,) = translator.translate_nbest(["one two three"], n_best=2)
    assert [h.text for h in translator.translate_nbest("one two three", n_best=2)] == [h.text for h in hypotheses]
    for limit, value in (("max_input_len", -5), ("max_input_len", 0), ("max_tokens", -3)):
        null = " or null" if limit == "max_input_len" else ""  # null: the run's own limit
        with pytest.raises(ValueError, match=rf"^{limit}={value}: must be an integer >= 1{null}$"):
            Translator.from_checkpoint("nowhere.ckpt", **{limit: value})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"^device=cuda: this machine has no CUDA GPU"):
            Translator.from_checkpoint("nowhere.ckpt", device="cuda")
    for b in (0, 1):  # a limit that counts the end token and leaves no room before it: every output was empty
        with pytest.raises(ValueError, match=rf"^decode.max_len_b={b} with decode.max_len_a=0: the limit counts the"):
            Translator.from_checkpoint(checkpoints["seed1"], max_len_a=0, max_len_b=b, device="cpu")
    assert (
        Translator.from_checkpoint(checkpoints["seed1"], max_len_a=0, max_len_b=2, device="cpu").search.max_len_b == 2
    )
    for device in ("mps", "xpu", "meta"):  # PyTorch's traceback, or a failure at every line (meta)
        with pytest.raises(ValueError, match=rf"^device={device}: not a device this program decodes on; use auto, "):
            Translator.from_checkpoint("nowhere.ckpt", device=device)


def test_the_python_api_takes_numpy_numbers_a_progress_counts_every_line_and_none_is_no_path(checkpoints):
    """A notebook's numbers (numpy's int64 and float32) are numbers: beam_size=np.int64(4) was refused as "must
    be a whole number". on_batch's counts sum to the lines given (empty lines, answered without decoding, were
    never counted), and a line given as a string reaches it too (it was dropped). A None path names itself."""
    import numpy as np

    from nmt.inference.checkpoint import CheckpointError

    plain = Translator.from_checkpoint(checkpoints["seed1"], beam_size=4, length_penalty=0.5, device="cpu")
    given = Translator.from_checkpoint(
        checkpoints["seed1"], beam_size=np.int64(4), length_penalty=np.float32(0.5), device="cpu"
    )
    assert given.search == plain.search and type(given.search.beam_size) is int
    assert [h.text for h in given.translate_nbest(SOURCES[0], n_best=np.int64(2))] == [
        h.text for h in plain.translate_nbest(SOURCES[0], n_best=2)
    ]
    counts = []
    plain.translate_nbest([*SOURCES, " ", ""], on_batch=counts.append)
    assert sum(counts) == len(SOURCES) + 2
    counts.clear()
    plain.translate_nbest("one two", on_batch=counts.append)
    assert counts == [1]
    with pytest.raises(CheckpointError, match=r"^ckpt_path is empty: give a checkpoint file or a run folder"):
        Translator.from_checkpoint(None)


def test_a_negative_average_or_an_unknown_search_option_is_refused_not_ignored(checkpoints):
    """average_last=-3 loaded the checkpoint's own weights; beamsize=5 was a TypeError's traceback."""
    from nmt.inference.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"^average_last=-3: 0 or 1 \(the checkpoint's own weights\) or N >= 2"):
        Translator.from_checkpoint(checkpoints["seed1"], average_last=-3, device="cpu")
    # a keyword of the API, named as one, with the API's own keywords beside the search's (it was named a
    # decode. key, and listed the search options alone)
    with pytest.raises(
        ValueError,
        match=r"^beamsize=5: not a keyword of Translator.from_checkpoint \(did you mean beam_size\?\); its own: "
        r"device, average_last, .*alignment_layer; the search's: strategy, beam_size",
    ):
        Translator.from_checkpoint(checkpoints["seed1"], beamsize=5, device="cpu")
    with pytest.raises(ValueError, match=r"\(did you mean device\?\)"):
        Translator.from_checkpoint(checkpoints["seed1"], devcie="cpu")
    with pytest.raises(ValueError, match=r"^threads=1: .* sets its threads with torch.set_num_threads\(1\)$"):
        Translator.from_checkpoint(checkpoints["seed1"], threads=1)
    translator = Translator.from_checkpoint(checkpoints["seed1"], device="cpu")
    with pytest.raises(TypeError, match=r"^line 2: NoneType, not text; give a str for every line"):
        translator.translate(["one", None])  # SentencePiece's TypeError named no line
    with pytest.raises(TypeError, match=r"^prefix 8: int, not text"):
        translator.translate_nbest(["one", "two"], prefixes=["", 8], first_line=7)
    # a lone surrogate (text read with errors="surrogateescape"): SentencePiece's TypeError named nothing
    with pytest.raises(
        ValueError, match=r"^line 2: not valid Unicode \(a lone surrogate at character 5: 'six \\udcff'"
    ):
        translator.translate(["one", "six \udcff"])
    # a raw TypeError of Python's own, or a string read as one-character prefixes ("4 prefixes for 2 lines")
    with pytest.raises(TypeError, match=r"^lines=None: give a list of str"):
        translator.translate(None)
    with pytest.raises(TypeError, match=r"^prefixes='eins': give a list, one prefix per line"):
        translator.translate_nbest(["one", "two"], prefixes="eins")
    with pytest.raises(ValueError, match=r"^n_best='2': must be a whole number >= 1 \(outputs per line\)"):
        translator.translate_nbest(["one"], n_best="2")
    # a None prefix is no prefix, as it was, and UTF-8 bytes are text to SentencePiece
    assert translator.translate_nbest(["one", b"two"], prefixes=[None, ""]) == translator.translate_nbest(
        ["one", "two"]
    )
    # bytes that are not UTF-8 were read as <unk> in silence (the same bytes in a file or on stdin are refused),
    # and bytes with text outside the vocabulary, as a prefix or a target, were a TypeError of the warning's code
    with pytest.raises(InputError, match=r"^line 2: invalid UTF-8 \(invalid start byte at byte 4\)"):
        translator.translate(["one", b"six \xff two"])
    with pytest.raises(InputError, match=r"^target 1: invalid UTF-8"):
        translator.score(["one"], [b"\xffeins"])
    assert translator.translate_nbest(["one"], prefixes=["Katze é"]) == translator.translate_nbest(
        ["one"], prefixes=["Katze é".encode()]
    )
    assert (
        translator.score(["one"], ["Katze é".encode()])[0].log_prob
        == translator.score(["one"], ["Katze é"])[0].log_prob
    )
    # a tab in a prefix was read as a space, where a line's is refused
    with pytest.raises(InputError, match=r"^prefix 2: holds a tab, which would be read as a space"):
        translator.translate_nbest(["one", "two"], prefixes=["", "zwei\tdrei"])
    out = subprocess.run(
        command(f"ckpt_path={checkpoints['seed1']}", "+decode.foo=1"), input="one\n", capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2 and "error: decode.foo=1: not a search option" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_a_line_holding_a_tab_is_refused_naming_it_not_translated_with_its_other_field(checkpoints, tmp_path):
    """A TSV of "document<TAB>summary" given as input= was translated whole, the reference read as part of
    the source, and the outputs looked like translations of the sources alone: refused, naming the line and
    the two ways on, by the Python API, translate.py (above) and evaluate.py input= alike."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    translator = Translator.from_checkpoint(checkpoints["seed1"], device="cpu")
    with pytest.raises(InputError, match=r"^line 3: holds a tab: .* \(cut -f1\), or score a TSV of pairs with"):
        translator.translate(["one", "two", "three\tdrei"])
    with pytest.raises(InputError, match=r"^line 2: holds a tab"):  # UTF-8 bytes are text here too
        translator.translate(["one", b"two\tzwei"])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("one\teins\ntwo\tzwei\n")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt_path={checkpoints['seed1']}", f"input={pairs}", "device=cpu"])
    with pytest.raises(ValueError, match=rf"^input={re.escape(str(pairs))}, line 1: holds a tab: .*split=files:"):
        evaluate(cfg)


def test_evaluate_output_without_input_is_refused():
    from hydra import compose, initialize_config_dir

    from nmt.tasks.translation import TranslationTask

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=["ckpt_path=x", "split=val", "output=out.txt"])
    with pytest.raises(ValueError, match=r"^output=out.txt: where the translations of input= go"):
        TranslationTask().check_evaluation(cfg)


@pytest.mark.parametrize(
    "given", ["split=val", "split=test", "out_dir=somewhere", "attention_maps=[0]", "rouge=true", "data.columns=[1,0]",
              "data.root=/corpus", "+data.test=/corpus/test", "samples=3"]
)  # fmt: skip
def test_evaluate_input_refuses_the_options_of_scoring_a_split(given):
    """They were accepted and ignored: input= printed the translations, wrote no heatmaps and no folder."""
    from hydra import compose, initialize_config_dir

    from nmt.tasks.translation import TranslationTask

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=["ckpt_path=x", "input=in.txt", given])
    key = re.escape(given.split("=")[0].lstrip("+"))
    with pytest.raises(ValueError, match=rf"^{key}=.* with input=in.txt: input= translates a file .* drop one of them"):
        TranslationTask().check_evaluation(cfg)


def test_evaluate_applies_max_input_len_to_a_split_and_checks_attention_indices_before_decoding(
    checkpoints, tmp_path, monkeypatch
):
    """A split ignored max_input_len (the run's limit, or 256, stood); an attention map of a sentence the set
    lacks failed after the whole set was decoded, leaving a folder without metrics."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate
    from nmt.tasks import translation

    def evaluate_val(*overrides):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            base = [f"ckpt_path={checkpoints['seed1']}", "split=val", "device=cpu", "threads=1", "samples=0"]
            return evaluate(compose("evaluate", overrides=[*base, *overrides]))

    limits = []
    real = translation.translate_lines
    monkeypatch.setattr(translation, "translate_lines", lambda *a, **k: limits.append(a[6]) or real(*a, **k))
    evaluate_val(f"out_dir={tmp_path / 'a'}")
    assert evaluate_val(f"out_dir={tmp_path / 'b'}", "max_input_len=2")["max_input_len"] == 2
    assert limits == [256, 2]
    # without out_dir: a folder of its own, not the one of the run's own limit
    evaluate_val("max_input_len=2")
    assert limits == [256, 2, 2] and (Path(checkpoints["seed1"]).parents[1] / "eval" / "val_beam5_maxin2").is_dir()
    # the same limit from the data options (+data.max_src_len=3) went into the folder of the run's own limit
    evaluate_val("+data.max_src_len=3")
    assert limits[-1] == 3 and (Path(checkpoints["seed1"]).parents[1] / "eval" / "val_beam5_maxin3").is_dir()
    with pytest.raises(ValueError, match=r"attention_maps: sentence 999 does not exist \(the set has \d+: indices 0"):
        evaluate_val(f"out_dir={tmp_path / 'c'}", "attention_maps=[0,999]")
    assert len(limits) == 4 and not (tmp_path / "c").exists()  # nothing decoded, nothing written
    # a learned source table of 6 positions lowers the limit to 5: metrics.json records the limit applied, not
    # the one asked for
    from nmt.decoding import translate

    monkeypatch.setattr(translate, "position_limits", lambda model: (6, None))
    result = evaluate_val(f"out_dir={tmp_path / 'd'}")
    assert result["max_input_len"] == 5 and limits[-1] == 5


def test_outputs_far_longer_than_the_references_are_said_with_the_options_that_shaped_them(
    checkpoints, tmp_path, caplog
):
    """A summariser's final search (a minimum length of 20, length penalty 2.0) gave short summaries outputs
    8.7 times their length, and only the table's length ratio showed it: more than twice (or less than half)
    the references' length is said, naming the search's options that shape lengths (those its strategy reads)
    and the way to choose them on validation."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate
    from nmt.tasks.translation_eval import length_warning

    beam = SearchConfig(min_len=20, length_penalty=2.0, max_len_b=100)
    said = length_warning("test", 8.7, beam)
    assert said.startswith("split=test: the outputs are 8.70 times as long as the references (words); the search ")
    assert (
        "shaped them with decode.min_len=20, decode.length_penalty=2.0, decode.max_len_a=1.5, decode.max_len_b=100"
        in (said)
    )
    assert "e.g. evaluate.py split=val decode.min_len=[0,5,10]" in said
    greedy = length_warning("val", 0.4, SearchConfig(strategy="greedy", length_penalty=2.0))
    assert "0.40 times" in greedy and "length_penalty" not in greedy  # greedy search reads no length penalty
    assert length_warning("test", 2.0, beam) is None and length_warning("test", 0.5, beam) is None  # "more than"
    assert length_warning("test", 8.7, beam, references=0) is None  # empty references: no ratio to speak of
    from nmt.tasks.base import grid_cell_scoring

    with grid_cell_scoring():  # a decoding grid's cell: the grid is what the warning would advise
        assert length_warning("test", 8.7, beam) is None
    assert length_warning("test", 8.7, beam) is not None
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        base = [f"ckpt_path={checkpoints['seed1']}", "split=val", "device=cpu", "threads=1", "samples=0"]
        cfg = compose("evaluate", overrides=[*base, f"out_dir={tmp_path}", "decode.min_len=40", "decode.max_len_b=60"])
    with caplog.at_level("WARNING"):
        result = evaluate(cfg)
    assert result["length_ratio"] > 2
    assert f"split=val: the outputs are {result['length_ratio']:.2f} times as long" in caplog.text
    assert "decode.min_len=40" in caplog.text


def test_evaluation_refuses_a_split_whose_text_is_not_the_one_the_model_was_trained_with(tmp_path):
    """The checkpoint keeps each split's text hash: the run's test file edited after training (or another
    copy found first) is refused, not scored as the run's test set (it was, silently)."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    def evaluate_test(ckpt):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                "evaluate", overrides=[f"ckpt_path={ckpt}", "split=test", "device=cpu", "threads=1", "samples=0"]
            )
        return evaluate(cfg)

    pairs = [f"{' '.join(['one', 'two', 'three'][: 1 + i % 3])} {i % 7}\teins {i % 7}" for i in range(300)]
    (tmp_path / "train.tsv").write_text("".join(p + "\n" for p in pairs))
    (tmp_path / "test.tsv").write_text("".join(p + "\n" for p in pairs[:20]))
    run_dir = tmp_path / "run"
    data = ["data=files", f"data.train={tmp_path / 'train.tsv'}", f"data.test={tmp_path / 'test.tsv'}"]
    sizes = ["data.valid_size=20", "data.tokenizer.vocab_size=40", "data.tokenizer.byte_fallback=false"]
    train(compose_train(*data, *sizes, "trainer.max_steps=2", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"))
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    loaded = load_model(ckpt, device="cpu")
    assert set(loaded.data_text) == {"train", "val", "test"}
    scored = evaluate_test(ckpt)
    assert scored["bleu"] is not None
    (tmp_path / "test.tsv").write_text("".join(p + "\n" for p in pairs[20:40]))
    with pytest.raises(
        ValueError, match=r"split=test: the test text of files .* read now is not the text .* was trained with"
    ):
        evaluate_test(ckpt)


def test_average_last_ends_at_the_epoch_checkpoint_given(checkpoints):
    """evaluate.py ckpt_path=.../epoch002.ckpt average_last=2 averaged the newest two epochs, said it was
    epoch002's, and wrote into the folder of the newest mean."""
    from pathlib import Path

    folder = Path(checkpoints["seed1"]).parent
    epochs = sorted(p.name for p in folder.glob("epoch*.ckpt"))
    assert len(epochs) >= 4
    middle = load_model(folder / epochs[2], average_last=2, device="cpu")
    assert [Path(p).name for p in middle.checkpoints] == epochs[1:3] and middle.name == Path(epochs[2]).stem
    newest = load_model(folder / "best.ckpt", average_last=2, device="cpu")
    assert [Path(p).name for p in newest.checkpoints] == epochs[-2:] and newest.name == "best"
    with pytest.raises(CheckpointError, match=r"average_last=4: only 3 epoch checkpoint\(s\) beside .* up to it"):
        load_model(folder / epochs[2], average_last=4, device="cpu")


def test_a_list_of_sets_is_read_whole_before_the_first_is_decoded(checkpoints, tmp_path):
    """split=[val, <a set that is missing>] decoded val, then stopped at the missing one."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    out = tmp_path / "eval"
    overrides = [f"ckpt_path={checkpoints['seed2']}", f"split=[val,files:{tmp_path / 'none.tsv'}]", f"out_dir={out}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, "device=cpu", "threads=1", "samples=0"])
    with pytest.raises(FileNotFoundError):
        evaluate(cfg)
    assert not out.exists()  # val was not decoded (its folder, out/val, was written first)


def test_a_checkpoint_from_before_the_text_hashes_is_checked_against_its_run_folders_record(tmp_path):
    """Checkpoints saved before they kept each split's text hash were scored on whatever split was read (a
    seeded split that changed could overlap their training pairs): the run folder's record stands in."""
    import json

    from nmt.inference.loading import recorded_text

    run = tmp_path / "run"
    train(compose_train("trainer.max_steps=2", *NO_FINAL_SCORES, "threads=1", f"run_dir={run}"))
    recorded = json.loads((run / "fingerprint.json").read_text())["data"]["text"]
    assert recorded_text(run) == recorded == load_model(run / "checkpoints" / "last.ckpt", device="cpu").data_text
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    del checkpoint["nmt"]["data_text"]  # as saved before
    torch.save(checkpoint, run / "checkpoints" / "old.ckpt")
    assert load_model(run / "checkpoints" / "old.ckpt", device="cpu").data_text == recorded
    assert recorded_text(tmp_path) is None  # no record: not checked


def test_a_checkpoint_kept_outside_a_run_folder_is_evaluated_beside_itself(tmp_path):
    """work/models/en-de.ckpt wrote its evaluations into work/eval/ (the folder above), as if work/ were its
    run folder; a run's checkpoints/ folder still means the run folder."""
    from nmt.inference.loading import LoadedModel

    def run_dir(path):
        return LoadedModel(None, None, None, {}, [str(path)], None).run_dir

    assert run_dir(tmp_path / "work" / "models" / "en-de.ckpt") == tmp_path / "work" / "models"
    assert run_dir(tmp_path / "run" / "checkpoints" / "best.ckpt") == tmp_path / "run"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["decode.beam_size=[4,5]", "+decode.foo=1"], r"^decode.foo=1: not a search option; valid: "),  # a TypeError
        (["average_last=[0,-1]"], r"^average_last=\[0, -1\]: each value 0 \(the checkpoint's own weights\) or N >= 2"),
        (["max_tokens=null"], r"^max_tokens=None: must be an integer >= 1$"),  # after loading, a TypeError
    ],
)
def test_an_evaluation_grid_or_limit_is_checked_before_anything_is_decoded(checkpoints, given, message):
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt_path={checkpoints['seed1']}", "split=val", "device=cpu", *given])
    with pytest.raises(ValueError, match=message):
        evaluate(cfg)


def translate_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("translate", overrides=list(overrides))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["output=."], r"^output=\.: a folder, not a file; name the file to write"),
        (["output=in.txt/out.txt"], r"^output=in.txt/out.txt: in.txt is a file, not a folder$"),
        # opened anew: a file standard output was appended to (>>) was truncated, or replaced by a rename
        (["output=/dev/stdout"], r"^output=/dev/stdout: a descriptor of this process; for standard output leave"),
        (["n_best=2.7"], r"^n_best=2.7: must be a whole number >= 1"),  # was cut to 2
        (["n_best=two"], r"^n_best='two': must be a whole number >= 1"),
        (["scores=maybe"], r"^scores='maybe': must be true or false$"),  # was taken as true
        (["alignments=0"], r"^alignments=0: must be true or false$"),
        # n_best's lines carry their scores: scores=true changed nothing, unsaid (targets= refused it)
        (["scores=true", "n_best=2"], r"^scores=true with n_best=2: n_best's lines carry each score already"),
        (["threads=-2"], r"^threads=-2: must be an integer >= 0"),  # was torch's RuntimeError
    ],
)
def test_translate_py_options_and_its_output_file_are_checked_before_the_model_is_read(
    tmp_path, monkeypatch, args, message
):
    """A folder as output= lost every translation at the end, in a traceback; the other values were read
    loosely or failed in torch."""
    from nmt.inference.stream import run_translate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("one two\n")
    cfg = translate_config("ckpt_path=nowhere.ckpt", "input=in.txt", *args)
    with pytest.raises(ValueError, match=message):
        run_translate(cfg)


def test_standard_input_translated_into_a_file_in_a_new_folder_makes_the_folder(checkpoints, tmp_path, monkeypatch):
    """A file input's output= made its folders; standard input's ended on FileNotFoundError naming no key."""
    import io

    from nmt.inference.stream import run_translate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one two three\nseven eight\n")))
    cfg = translate_config(
        f"ckpt_path={checkpoints['seed1']}", "output=new/deeper/out.txt", "device=cpu", "decode.beam_size=3"
    )
    assert run_translate(cfg)["translations"] == 2
    expected = Translator.from_checkpoint(checkpoints["seed1"], beam_size=3, device="cpu")
    expected = expected.translate(["one two three", "seven eight"])
    assert (tmp_path / "new/deeper/out.txt").read_text(encoding="utf-8") == "".join(t + "\n" for t in expected)


def test_evaluate_checks_its_output_file_and_threads_before_decoding(checkpoints, tmp_path):
    from nmt.evaluation.evaluate import evaluate

    (tmp_path / "in.txt").write_text("one two\n")
    base = [f"ckpt_path={checkpoints['seed1']}", f"input={tmp_path / 'in.txt'}", "device=cpu"]
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        folder = compose("evaluate", overrides=[*base, f"output={tmp_path}"])
        threads = compose("evaluate", overrides=[*base, "threads=-2"])
    with pytest.raises(ValueError, match=rf"^output={tmp_path}: a folder, not a file"):
        evaluate(folder)
    with pytest.raises(ValueError, match=r"^threads=-2: must be an integer >= 0"):
        evaluate(threads)


def test_a_files_progress_moves_with_each_batch(checkpoints):
    """The bar of a file moved once per 2,000 lines: a file of fewer stood at 0% until its end."""
    translator = Translator.from_checkpoint(checkpoints["seed1"], beam_size=2, device="cpu", max_tokens=40)
    batches = []
    lines = ["one two three", "", "four five", "six", "seven eight nine one", "two two"]
    translator.translate_nbest(lines, on_batch=batches.append)
    assert len(batches) > 2 and sum(batches) == 6 and batches[-1] == 1  # the empty line: counted last, not decoded


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(tmp_path):
    """translate.py ... | head -1: a BrokenPipeError traceback; now the exit of a command ended by SIGPIPE,
    as when standard output is a socket whose reader left."""
    script = (
        "from nmt.cli import run_cli\n"
        "def talk(cfg):\n"
        "    for _ in range(200000):\n"
        "        print('one two three', flush=True)\n"
        "run_cli(talk, None)\n"
    )
    result = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "$0" | head -1; echo "status ${{PIPESTATUS[0]}}" >&2', script],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.stdout == "one two three\n"
    assert "Traceback" not in result.stderr and "status 141" in result.stderr, result.stderr[-2000:]
    # standard output a socket whose reader leaves: a hang-up (POLLHUP, not a pipe's POLLERR), met as a broken
    # pipe or, with lines left unread, a reset, as the timing falls
    import socket

    reader, writer = socket.socketpair()
    talker = subprocess.Popen(
        [sys.executable, "-c", script], stdout=writer, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    writer.close()
    first = b""
    while b"\n" not in first and len(first) < 14:  # a socket may hand the line over in parts
        part = reader.recv(14 - len(first))
        first += part
        if not part:
            break
    assert first == b"one two three\n"
    reader.close()
    stderr = talker.communicate(timeout=120)[1]
    assert talker.returncode == 141 and "Traceback" not in stderr, stderr[-2000:]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device whose every write fails full")
def test_a_full_disk_is_one_line_naming_the_output_and_a_link_or_pipe_is_written_through(checkpoints, tmp_path):
    """output= a link or a named pipe was replaced by a plain file (the pipe's reader waited for ever; as root,
    output=/dev/null would have replaced the device); a full disk under standard output was a traceback."""
    import threading

    (tmp_path / "in.txt").write_text("one two\nseven eight\n")
    args = (f"ckpt_path={checkpoints['seed1']}", f"input={tmp_path / 'in.txt'}")
    expected = subprocess.run(command(*args), capture_output=True, text=True, timeout=300).stdout
    assert expected.count("\n") == 2
    full = subprocess.run(command(*args), stdout=open("/dev/full", "w"), stderr=subprocess.PIPE, text=True,  # noqa: SIM115
                          timeout=300)  # fmt: skip
    assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr[-2000:]
    assert full.stderr.strip().splitlines()[-1] == (
        "error: standard output: No space left on device; free some space, or write elsewhere"
    )
    (tmp_path / "full").symlink_to("/dev/full")
    linked = subprocess.run(command(*args, f"output={tmp_path / 'full'}"), capture_output=True, text=True,
                            timeout=300)  # fmt: skip
    assert linked.returncode == 2 and f"error: {tmp_path / 'full'}: No space left on device" in linked.stderr
    assert (tmp_path / "full").is_symlink() and Path("/dev/full").is_char_device()
    # a link to a file: the file replaced, the link kept; a named pipe: written into, its reader given the lines
    (tmp_path / "out.txt").write_text("old\n")
    (tmp_path / "out_link").symlink_to(tmp_path / "out.txt")
    assert subprocess.run(command(*args, f"output={tmp_path / 'out_link'}"), timeout=300).returncode == 0
    assert (tmp_path / "out_link").is_symlink() and (tmp_path / "out.txt").read_text() == expected
    os.mkfifo(tmp_path / "pipe")
    received = []
    reader = threading.Thread(target=lambda: received.append((tmp_path / "pipe").read_text()), daemon=True)
    reader.start()
    assert subprocess.run(command(*args, f"output={tmp_path / 'pipe'}"), timeout=300).returncode == 0
    reader.join(timeout=60)
    assert received == [expected] and stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)


def test_sigterm_while_translating_into_a_file_leaves_no_temporary_file(checkpoints, tmp_path):
    """SIGTERM ended translate.py at once (status -15, no word) and left .out.<pid>.tmp, half the translations,
    in the output's folder; Ctrl-C removed it."""
    import signal

    source = tmp_path / "in.txt"
    source.write_text("one two three four five six seven\n" * 20000)
    out = tmp_path / "out" / "out.txt"
    command = [sys.executable, str(ROOT / "translate.py"), f"ckpt_path={checkpoints['seed1']}", f"input={source}",
               f"output={out}", "threads=1"]  # fmt: skip
    translating = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "out").glob(".out.txt.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.1)  # translating: its temporary file is there
    translating.send_signal(signal.SIGTERM)
    stderr = translating.communicate(timeout=120)[1]
    assert translating.returncode == 143 and stderr.rstrip().endswith("terminated"), stderr[-2000:]
    assert "Traceback" not in stderr and not list((tmp_path / "out").glob(".*.tmp")) and not out.exists()


def test_ctrl_c_while_translating_ends_without_a_traceback(monkeypatch, capsys):
    from nmt.inference import stream

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(stream, "_run_translate", interrupted)
    with pytest.raises(SystemExit) as ended:
        stream.run_translate(None)
    assert ended.value.code == 130 and capsys.readouterr().err == "interrupted\n"
    # any command, where no stage of its own handles it (train.py preparing its data, say): the same
    from nmt.cli import run_cli

    monkeypatch.delenv("NMT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as ended:
        run_cli(interrupted, None)
    assert ended.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_a_line_too_long_in_a_file_is_named_with_its_file(checkpoints, tmp_path, monkeypatch):
    from nmt.inference.stream import run_translate

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("one\n" + "seven " * 40 + "\n")
    cfg = translate_config(
        f"ckpt_path={checkpoints['seed1']}", "input=in.txt", "max_input_len=8", "on_long_input=error", "device=cpu"
    )
    with pytest.raises(InputError, match=r"^in.txt, line 2: "):
        run_translate(cfg)


def test_evaluate_reads_a_tsv_in_the_columns_given_whatever_corpus_the_checkpoint_trained_on(checkpoints, tmp_path):
    """data.columns reached the toy corpus's module, which takes none: a traceback."""
    from hydra import compose, initialize_config_dir

    from nmt.data.toy import toy_pairs
    from nmt.evaluation.evaluate import evaluate

    en, de = toy_pairs(4, seed=3)
    (tmp_path / "rev.tsv").write_text("".join(f"{d}\t{e}\n" for e, d in zip(en, de, strict=True)))
    overrides = [f"ckpt_path={checkpoints['seed1']}", f"split=files:{tmp_path / 'rev.tsv'}", "device=cpu"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, "data.columns=[1,0]", f"out_dir={tmp_path / 'out'}"])
    result = evaluate(cfg)
    assert result["sentences"] == 4 and result["columns"] == [1, 0]  # which fields were read, recorded
    assert (tmp_path / "out" / "sources.txt").read_text().splitlines() == en


def test_outputs_holding_broken_characters_are_said_where_the_references_hold_none():
    """A briefly trained en->zh model wrote U+FFFD in 304 of 2,000 greedy test outputs (byte pieces that form
    no character), which nothing said."""
    from nmt.tasks.base import grid_cell_scoring
    from nmt.tasks.translation_eval import broken_characters

    said = broken_characters("test", ["我的\ufffd\ufffd", "好", "\ufffd"], ["我的书", "好", "对"])
    assert said == (
        "split=test: 2 of 3 outputs hold U+FFFD (first: sentence 1): byte pieces (data.tokenizer.byte_fallback) "
        "that form no character, as a model not yet trained enough writes them; they are scored as written"
    )
    assert broken_characters("test", ["好"], ["好"]) is None
    assert broken_characters("test", ["\ufffd"], ["\ufffd"]) is None  # the references hold one: the text's own
    with grid_cell_scoring():
        assert broken_characters("test", ["\ufffd"], ["好"]) is None


def test_an_edited_files_set_is_evaluated_beside_its_earlier_evaluation_not_over_it(checkpoints, tmp_path, capsys):
    """The folder of a files: set is named by its path: after an edit, its evaluation replaced the earlier one,
    whose metrics.json kept no trace of the text scored."""
    from hydra import compose, initialize_config_dir

    from nmt.data.toy import toy_pairs
    from nmt.evaluation.evaluate import evaluate

    en, de = toy_pairs(6, seed=4)
    (tmp_path / "set.tsv").write_text("".join(f"{e}\t{d}\n" for e, d in zip(en, de, strict=True)))
    overrides = [f"ckpt_path={checkpoints['seed1']}", f"split=files:{tmp_path / 'set.tsv'}", "device=cpu", "samples=0"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=overrides)
    first = evaluate(cfg)
    folder = Path(first["hypotheses"]).parent
    (tmp_path / "set.tsv").write_text("".join(f"{e}\t{d}\n" for e, d in zip(en[:4], de[:4], strict=True)))
    capsys.readouterr()
    second = evaluate(cfg)
    moved = Path(second["hypotheses"]).parent
    assert moved == folder.with_name(f"{folder.name}_text{second['text'][:8]}") and second["text"] != first["text"]
    assert f"note: {folder} holds an evaluation of other text under this set's name" in capsys.readouterr().out
    assert json.loads((folder / "metrics.json").read_text())["sentences"] == 6  # kept
    assert json.loads((moved / "metrics.json").read_text())["sentences"] == 4
    assert Path(evaluate(cfg)["hypotheses"]).parent == moved  # the same text again: its own folder, replaced


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ("test", r"^data.columns=\[1, 0\]: split=test is not read from a TSV; "),
        ("files:{tmp}/pair", r"^data.columns=\[1, 0\]: split=files:.*/pair names two files by a prefix, not a TSV"),
    ],
)
def test_evaluate_refuses_columns_for_a_set_that_is_not_a_tsv(checkpoints, tmp_path, split, message):
    """data.columns with the corpus's own test set or a prefix of two files changed nothing, without a word."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    for lang in ("en", "de"):
        (tmp_path / f"pair.{lang}").write_text("one two\n")
    overrides = [f"ckpt_path={checkpoints['seed1']}", f"split={split.format(tmp=tmp_path)}", "device=cpu"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, "data.columns=[1,0]", f"out_dir={tmp_path / 'out'}"])
    with pytest.raises(ValueError, match=message):
        evaluate(cfg)
    assert not (tmp_path / "out").exists()


def test_a_single_attention_map_is_not_labelled_as_a_head(tmp_path, monkeypatch):
    """The mean over layers and an RNN's one map were drawn as 'head 0'."""
    import matplotlib.pyplot as plt

    from nmt.utils import plots

    titles = []
    drawn = plots.attention_figure

    def recorded(*args, **kwargs):
        figure = drawn(*args, **kwargs)
        titles.append([ax.get_title() for ax in figure.axes if ax.get_title()])
        return figure

    monkeypatch.setattr(plots, "attention_figure", recorded)
    two_layers = {"layer0": torch.rand(2, 3, 4), "layer1": torch.rand(2, 3, 4)}
    plots.save_attention_maps(two_layers, list("abcd"), list("xyz"), tmp_path, "s0")
    plots.save_attention_maps({"rnn": torch.rand(1, 3, 4)}, list("abcd"), list("xyz"), tmp_path, "s1")
    assert titles == [
        ["head 0", "head 1", "mean of heads"],
        ["head 0", "head 1", "mean of heads"],
        ["mean of heads and layers"],
        ["attention"],
    ]
    plt.close("all")


def test_lines_truncated_across_a_files_chunks_and_a_stream_are_said_in_one_warning(
    checkpoints, tmp_path, monkeypatch, caplog, capsys
):
    """A file is translated in chunks, a stream line by line: each chunk with a long line, and each long line
    of a stream, gave a warning of its own ("one warning", the docs said)."""
    import io
    import logging

    from hydra import compose, initialize_config_dir

    from nmt.inference import stream

    from .conftest import CONF

    monkeypatch.setattr(stream, "CHUNK", 2)
    long = "seven " * 30
    (tmp_path / "in.txt").write_text("\n".join(["one", long, "two", long, long]) + "\n")
    given = [f"ckpt_path={checkpoints['seed1']}", "max_input_len=4", "device=cpu"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        from_file = compose("translate", overrides=[*given, f"input={tmp_path / 'in.txt'}"])
        from_stdin = compose("translate", overrides=[*given, "input=-"])
    with caplog.at_level(logging.WARNING, logger="nmt.inference.translator"):
        stream.run_translate(from_file)
    said = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert said == ["3 input line(s) longer than max_input_len=4 subword tokens were truncated (first: line 2)"]
    caplog.clear()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((tmp_path / "in.txt").read_bytes())))
    with caplog.at_level(logging.WARNING, logger="nmt.inference.translator"):
        stream.run_translate(from_stdin)
    said = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert said == [  # the first as it is read, then all of them at the end
        "1 input line(s) longer than max_input_len=4 subword tokens were truncated (first: line 2) (each later one "
        "is counted, and said at the end)",
        "3 input line(s) longer than max_input_len=4 subword tokens were truncated (first: line 2)",
    ]
    assert len(capsys.readouterr().out.splitlines()) == 10  # both runs' translations, in full


def test_an_empty_evaluation_set_is_named_before_decoding_and_by_the_scorer(checkpoints, tmp_path, capsys):
    """An empty files: set decoded nothing, then failed in sacreBLEU with an IndexError's traceback; the
    rescoring command on empty files did the same."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation import score
    from nmt.evaluation.evaluate import evaluate

    for side in ("en", "de"):
        (tmp_path / f"empty.{side}").write_text("")
    given = [f"ckpt_path={checkpoints['seed1']}", f"split=files:{tmp_path / 'empty'}", "device=cpu", "samples=0"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=given)
    with pytest.raises(ValueError, match=r"^split=files:.*empty: the set holds no sentence \(.*\); give one that does"):
        evaluate(cfg)
    with pytest.raises(SystemExit):
        score.main([str(tmp_path / "empty.de"), str(tmp_path / "empty.de"), "--lang", "de"])
    assert "empty.de holds no line: there is nothing to score" in capsys.readouterr().err


def test_a_set_scored_later_is_checked_for_sentences_the_training_text_holds(checkpoints, tmp_path, capsys):
    """A set beyond the corpus's own (files:, iwslt16:) was scored without a word when it repeated training
    pairs: training keeps a hash of each training sentence in the run folder, and evaluation counts the set's
    sentences found there (as the data report counts the corpus's own sets), warns of a large share and
    records the counts."""
    import shutil

    import numpy as np
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from nmt.data.overlap import FILE
    from nmt.data.toy import toy_pairs
    from nmt.evaluation.evaluate import evaluate

    loaded = load_model(checkpoints["seed1"], device="cpu")
    data = loaded.task.build_datamodule(OmegaConf.create(loaded.config["data"]), loaded.config["cache_dir"], 1)
    train_src, train_tgt = data.text("train")
    with np.load(loaded.run_dir / FILE) as kept:  # each distinct training sentence once
        assert (len(kept["sources"]), len(kept["targets"])) == (len(set(train_src)), len(set(train_tgt)))
    new = [(e, d) for e, d in zip(*toy_pairs(40, seed=99), strict=True) if e not in train_src and d not in train_tgt]
    pairs = [*zip(train_src[:6], train_tgt[:6], strict=True), train_src[0:1] + train_tgt[0:1], *new[:3]]
    pairs[6] = (train_src[0], new[3][1])  # a training source with a new reference: counted on its side only
    (tmp_path / "mix.en").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "mix.de").write_text("".join(t + "\n" for _, t in pairs))
    by_hand = (sum(s in set(train_src) for s, _ in pairs), sum(t in set(train_tgt) for _, t in pairs))
    assert by_hand == (7, 6)

    def scored(ckpt: str, out: str) -> dict:
        overrides = [f"ckpt_path={ckpt}", f"split=files:{tmp_path / 'mix'}", "device=cpu", f"out_dir={tmp_path / out}"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return evaluate(compose("evaluate", overrides=overrides))

    result = scored(checkpoints["seed1"], "out")
    assert result["also_in_train"] == {"sources_also_in_train": 7, "targets_also_in_train": 6}
    err = capsys.readouterr().err
    assert f"warning: 7 of the 10 files:{tmp_path / 'mix'} sources are also training sources" in err
    assert "warning: 6 of the 10" in err and "references are also training targets" in err
    # a checkpoint away from its run folder: not checked, and said
    (tmp_path / "away").mkdir()
    shutil.copy(checkpoints["seed1"], tmp_path / "away" / "best.ckpt")
    result = scored(str(tmp_path / "away" / "best.ckpt"), "out2")
    assert "also_in_train" not in result
    assert "keeps no hashes of its training sentences" in capsys.readouterr().err


class _Tok:
    """One id per word: a line of n words is n subword tokens."""

    def encode_batch(self, lines):
        return [[5 + i for i, _ in enumerate(line.split())] for line in lines]

    def pieces(self, ids):
        return [f"p{i}" for i in ids]


def test_a_line_one_token_over_max_input_len_is_cut_and_said():
    """max_input_len=3: a 4-token line is longer than the limit, so it is cut to its first 3 tokens and its
    number said; a 3-token line is not (kills translator.py's `> max_input_len + 1` threshold)."""
    said = []
    fake = SimpleNamespace(
        src_tokenizer=_Tok(),
        max_input_len=3,
        on_long_input="truncate",
        _cut=None,
        _warn_truncated=lambda numbers, keep_end, later="": said.append(list(numbers)),
    )
    got = Translator.encode_sources(fake, ["a b c", "a b c d"], first_line=1)
    assert got == [[5, 6, 7], [5, 6, 7]] and said == [[2]]


class _Model:
    """Uniform logits; one cross-attention layer whose every target position attends to the source's last
    position (the end token)."""

    def __call__(self, src, tgt_in):
        return torch.zeros(src.shape[0], tgt_in.shape[1], 10)

    def attention_maps(self, src, tgt_in):
        maps = torch.zeros(src.shape[0], 1, tgt_in.shape[1], src.shape[1])
        maps[..., -1] = 1.0
        return {"dec.0.cross": maps}


def test_a_target_token_attending_to_the_end_token_has_no_alignment():
    """src_tokens are the source pieces plus "</s>"; an alignment pair (s, t) names a real source piece, so a
    target piece whose strongest attention is the end token (index len(source)) is left unaligned (kills
    translator.py dropping `if s < len(source)`)."""
    fake = SimpleNamespace(model=_Model(), alignment_layer=-1, device="cpu", src_tokenizer=_Tok(), tgt_tokenizer=_Tok())
    fake.pad = lambda rows: Translator.pad(fake, rows)
    fake._alignment_weights = lambda maps: Translator._alignment_weights(fake, maps)
    source = [5, 6]
    src = fake.pad([source + [2]])
    results = [[Hypothesis("x", float("nan"), float("nan"))]]
    Translator.teacher_force(fake, src, [0], [source], [[(float("nan"), [7, 8])]], results, with_attention=False)
    h = results[0][0]
    assert h.src_tokens == ["p5", "p6", "</s>"] and h.alignment == []
    # and the uniform model's log-probabilities: each of 2 tokens and the end token log(1/10)
    assert len(h.token_log_probs) == 3 and abs(h.log_prob - 3 * torch.log(torch.tensor(0.1)).item()) < 1e-5
