"""Given outputs scored, not decoded (``Translator.score``, ``translate.py targets=``): each score is the one
the model's own step-by-step computation gives the same tokens (a search's score with no length penalty; a
language model's cache, token by token), whatever the batching; the command line writes what it says, and
refuses what does not apply."""

import math
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.inference.hypothesis import InputError
from nmt.inference.translator import Translator
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, compose_train
from .test_lm import counting_sentences

SOURCES = ["one two three", "seven eight", "four four nine two", "five"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny Transformer and a tiny RNN on the toy task, and a tiny language model whose learned position
    table holds 12 positions, each briefly trained."""
    paths = {}
    for name, extra in (("transformer", ["seed=1"]), ("rnn", ["model=rnn", "seed=1"])):
        run_dir = tmp_path_factory.mktemp(name)
        train(compose_train(*extra, "trainer.max_epochs=5", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"))
        paths[name] = str(run_dir / "checkpoints" / "best.ckpt")
    folder = tmp_path_factory.mktemp("ptb")
    for split, n, seed in (("train", 300, 1), ("valid", 30, 2), ("test", 30, 3)):
        (folder / f"ptb.{split}.txt").write_text("\n".join(counting_sentences(n, seed)) + "\n")
    run_dir = tmp_path_factory.mktemp("lm")
    overrides = ["task=lm", f"data.root={folder}", "data.download=false", "data.block_size=12", "pos=learned"]
    overrides += ["pos.max_len=12", "trainer.max_epochs=2", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"]
    train(compose_train(*overrides))
    paths["lm"] = str(run_dir / "checkpoints" / "best.ckpt")
    return paths


TARGETS = ["drei zwei eins", "acht sieben", "zwei neun vier vier", "fünf"]


def stepwise(model, prefix: list[int], ids: list[int], source: list[int] | None = None) -> list[float]:
    """Each of ``ids`` and the end token's log-probability, as the model's incremental interface gives them:
    encode (a source, or a language model's ``prefix``), then one decode_step a token."""
    if source is not None:
        state, previous = model.encode(torch.tensor([[*source, EOS_ID]])), torch.tensor([BOS_ID])
    else:
        state, previous = model.encode(torch.tensor([prefix])), torch.tensor([0])
    found = []
    for token in [*ids, EOS_ID]:
        logits, state = model.decode_step(previous, state)
        found.append(float(F.log_softmax(logits.float(), -1)[0, token]))
        previous = torch.tensor([token])
    return found


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_a_given_outputs_score_is_what_the_decoder_gives_it_step_by_step(models, model):
    """Teacher-forced over a padded batch of several lengths, each target's per-token log-probabilities are
    those of the decoder's cache, one step a token; one pair given as strings gives the same."""
    translator = Translator.from_checkpoint(models[model], device="cpu")
    scored = translator.score(SOURCES, TARGETS)
    for line, target, given in zip(SOURCES, TARGETS, scored, strict=True):
        ids = translator.tgt_tokenizer.encode(target)
        expected = stepwise(translator.model, [], ids, source=translator.src_tokenizer.encode(line))
        assert given.text == target and given.tokens == translator.tgt_tokenizer.pieces(ids)
        assert given.token_log_probs == pytest.approx(expected, abs=1e-4)
        assert given.score == given.log_prob == pytest.approx(sum(expected), abs=1e-4)
        source = translator.src_tokenizer.encode(line)  # pieces aligned to the source's end token are left out
        assert all(0 <= s < len(source) and 0 <= t < len(ids) for s, t in given.alignment)
        assert translator.score(line, target).log_prob == pytest.approx(given.log_prob, abs=1e-5)


def searched_then_scored(translator: Translator, n_best: int):
    """(the scored hypothesis, the searched one) of every n-best output of SOURCES whose text the tokenizer
    spells as the search did: a search that spelt it otherwise (a barely trained model's "▁ ▁ ▁", shown as
    "") scored other tokens. Most outputs are compared."""
    found = translator.translate_nbest(SOURCES, n_best=n_best)
    lines = [line for line, hyps in zip(SOURCES, found, strict=True) for _ in hyps]
    outputs = [h for hyps in found for h in hyps]
    scored = translator.score(lines, [h.text for h in outputs])
    same = [(g, s) for g, s in zip(scored, outputs, strict=True) if g.tokens == s.tokens]
    assert len(same) >= len(outputs) - 2
    return same, lines, outputs, scored


def test_a_searchs_output_scored_again_is_its_search_score(models):
    """With no length penalty a beam's score is its output's log-probability: scoring the output's text
    gives it again, with the same alignment."""
    translator = Translator.from_checkpoint(models["transformer"], beam_size=4, length_penalty=0.0, device="cpu")
    same, *_ = searched_then_scored(translator, 3)
    for given, searched in same:
        assert given.text == searched.text
        assert given.score == pytest.approx(searched.score, abs=1e-4)
        assert given.token_log_probs == pytest.approx(searched.token_log_probs, abs=1e-4)
        assert given.alignment == searched.alignment


def test_an_ensemble_scores_a_target_as_its_search_scores_it(models):
    """A Transformer and an RNN of one vocabulary: at each token the renormalised mean of their
    log-probabilities, as the ensemble's beam search (no length penalty) scores its own outputs."""
    both = Translator.from_checkpoint(
        [models["transformer"], models["rnn"]], beam_size=4, length_penalty=0.0, device="cpu"
    )
    same, lines, outputs, scored = searched_then_scored(both, 2)
    for given, searched in same:
        assert given.log_prob == pytest.approx(searched.score, abs=1e-4)
    alone = Translator.from_checkpoint(models["transformer"], device="cpu").score(lines, [h.text for h in outputs])
    assert [g.log_prob for g in scored] != pytest.approx([a.log_prob for a in alone], abs=1e-3)  # not one member's


def test_a_language_model_scores_a_target_as_its_cache_predicts_it_token_by_token(models):
    """After a sentence start and the prompt, each target token's log-probability as the incremental interface
    (encode, then decode_step) gives it; prompts and targets of several lengths scored in one padded batch
    give what each gives alone."""
    translator = Translator.from_checkpoint(models["lm"], device="cpu")
    prompts = ["w3 w4", "", "w7", "w1 w2 w3 w4"]
    targets = ["w5 w6 w7", "w2 w3", "w8 w9 w10 w11", ""]
    together = translator.score(prompts, targets)
    vocabulary = translator.tgt_tokenizer
    for prompt, target, hypothesis in zip(prompts, targets, together, strict=True):
        ids = vocabulary.encode(target)
        expected = stepwise(translator.model, [EOS_ID, *vocabulary.encode(prompt)], ids)
        assert hypothesis.token_log_probs == pytest.approx(expected, abs=1e-4)
        assert hypothesis.log_prob == pytest.approx(sum(expected), abs=1e-4)
        assert hypothesis.tokens == vocabulary.pieces(ids)
        assert translator.score(prompt, target).log_prob == pytest.approx(hypothesis.log_prob, abs=1e-5)
    # no prompts: every target from a sentence start, as an empty prompt
    alone = translator.score(None, targets)
    assert [h.log_prob for h in alone] == pytest.approx([h.log_prob for h in translator.score([""] * 4, targets)])


def test_a_target_is_scored_whole_or_refused_naming_its_line(models, caplog):
    """A learned position table of 12: a target it cannot hold whole is refused (a cut one's score would be
    another sentence's), with its line; what the vocabulary cannot spell is said; the shapes are checked."""
    lm = Translator.from_checkpoint(models["lm"], device="cpu")
    long = " ".join(["w3"] * 11)  # a sentence start, 11 words: 12 inputs, predicting 11 words and the end
    assert len(lm.score(None, ["w1", long])[1].token_log_probs) == 12
    with pytest.raises(InputError, match=r"^target line 3: the model reads a sentence start and the target in 13 "
                                         r"positions, more than .* \(pos\.max_len=12\)"):  # fmt: skip
        lm.score(None, ["w1", long, long + " w4"])
    # a prompt leaves the target its positions: its last tokens are kept, as generation keeps them, and said
    with caplog.at_level("WARNING"):
        ten = " ".join(f"w{n}" for n in range(1, 11))
        cut = lm.score([ten, "w9 " * 30], ["w4 w5", long])
    assert "2 lines (first: line 1): the prompt is cut to its last tokens" in caplog.text
    assert cut[1].log_prob == pytest.approx(lm.score(None, [long])[0].log_prob, abs=1e-5)  # no room left: none
    nine = ten.split(" ", 1)[1]  # 12 positions: the start, 9 of the prompt, the target's 2
    assert cut[0].log_prob == pytest.approx(lm.score([nine], ["w4 w5"])[0].log_prob, abs=1e-5)
    caplog.clear()
    translator = Translator.from_checkpoint(models["transformer"], device="cpu")
    with caplog.at_level("WARNING"):
        translator.score(SOURCES[:2], ["drei ☃", "acht"])
    assert any(
        "target line 1: outside the target vocabulary, scored as <unk>" in r.getMessage() for r in caplog.records
    )
    with pytest.raises(InputError, match=r"^target line 2: holds a tab: each line is one target text.*\(cut -f2\)$"):
        translator.score(SOURCES[:2], ["drei", "acht\tsieben"])
    with pytest.raises(ValueError, match=r"^1 targets for 2 lines: give one target per line$"):
        translator.score(SOURCES[:2], ["drei"])
    with pytest.raises(ValueError, match=r"^lines=None: a translation model scores each target given its source"):
        translator.score(None, ["drei"])
    with pytest.raises(TypeError, match=r"^target 2: int, not text"):
        translator.score(SOURCES[:2], ["drei", 3])
    with pytest.raises(
        InputError, match=r"^target 1: not valid Unicode \(a lone surrogate"
    ):  # SentencePiece's TypeError
        translator.score(SOURCES[:1], ["\ud800"])


def command(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "translate.py", *args, "threads=1", "device=cpu"],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_translate_py_targets_writes_each_score_and_the_totals_and_refuses_what_does_not_apply(models, tmp_path):
    """Each line ``log_prob<TAB>tokens<TAB>text`` as the API scores it, and the totals the lines add up to;
    standard input pairs with the targets' lines; decoding options, n-best and the like are refused."""
    sources, targets = tmp_path / "src.txt", tmp_path / "tgt.txt"
    sources.write_text("\n".join(SOURCES) + "\n")
    targets.write_text("drei zwei eins\nacht sieben\nzwei neun vier vier\nfünf\n")
    ckpt = f"ckpt_path={models['transformer']}"
    done = command(ckpt, f"input={sources}", f"targets={targets}", "alignments=true")
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    expected = Translator.from_checkpoint(models["transformer"], device="cpu").score(
        SOURCES, targets.read_text().splitlines()
    )
    for row, hypothesis in zip(rows, expected, strict=True):
        assert float(row[0]) == pytest.approx(hypothesis.log_prob, abs=1e-4)
        assert int(row[1]) == len(hypothesis.tokens) + 1 and row[2] == hypothesis.text
        assert row[3] == " ".join(f"{s}-{t}" for s, t in hypothesis.alignment)
    total, tokens = sum(h.log_prob for h in expected), sum(int(row[1]) for row in rows)
    summary = done.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"4 targets scored: {tokens} tokens (with each end token), log-probability ")
    assert float(summary.rsplit(" ", 1)[1]) == pytest.approx(math.exp(-total / tokens), rel=1e-3)
    piped = command(ckpt, f"targets={targets}", stdin=sources.read_text())
    assert piped.returncode == 0 and piped.stdout == "".join("\t".join(r[:3]) + "\n" for r in rows)
    # the refusals, in this process (the command line's own path is the one above): each names the key
    from nmt.inference.stream import run_translate

    from .test_translator import translate_config

    (tmp_path / "short.txt").write_text("drei\n")
    (tmp_path / "tabbed.txt").write_text("drei\nacht\tsieben\nvier\nfünf\n")
    for args, message in (
        (["decode.beam_size=3"], "decode.beam_size=3: targets= scores given outputs and decodes nothing"),
        (["n_best=2"], "n_best=2: targets= scores the one target given per line"),
        (["scores=true"], "scores=true: targets= writes each target's log-probability already"),
        ([f"prefix_file={targets}"], "prefix_file="),
        (["input=null"], "input=null: a translation model scores each target given its source"),
        ([f"targets={tmp_path / 'none.txt'}"], f"targets={tmp_path / 'none.txt'}: no such file"),
        (
            [f"targets={tmp_path / 'short.txt'}"],
            f"targets={tmp_path / 'short.txt'} has 1 lines but {sources} has 4: give one per line",
        ),
        ([f"targets={tmp_path / 'tabbed.txt'}"], f"{tmp_path / 'tabbed.txt'}, line 2: holds a tab"),
    ):
        given = [ckpt, f"input={sources}", f"targets={targets}", "device=cpu", *args]
        with pytest.raises(ValueError) as refused:
            run_translate(translate_config(*given))
        assert str(refused.value).startswith(message), refused.value


def test_translate_py_scores_a_language_models_sentences_from_a_sentence_start(models, tmp_path):
    """input=null: each target from a sentence start, as the API scores it with no prompts; alignments have no
    source to follow."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("w3 w4 w5\nw8 w9\n")
    done = command(f"ckpt_path={models['lm']}", "input=null", f"targets={sentences}")
    assert done.returncode == 0, done.stderr
    expected = Translator.from_checkpoint(models["lm"], device="cpu").score(None, ["w3 w4 w5", "w8 w9"])
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [(float(r[0]), int(r[1]), r[2]) for r in rows] == [
        (pytest.approx(h.log_prob, abs=1e-4), len(h.tokens) + 1, h.text) for h in expected
    ]
    from nmt.inference.stream import run_translate

    from .test_translator import translate_config

    lm = [f"ckpt_path={models['lm']}", "input=null", "device=cpu"]
    with pytest.raises(ValueError, match=r"^alignments=true: a language model reads no source"):
        run_translate(translate_config(*lm, f"targets={sentences}", "alignments=true"))
    with pytest.raises(ValueError, match=r"^input=null: give a file of source lines"):  # null without targets=
        run_translate(translate_config(*lm))


def test_a_language_model_draws_n_best_continuations_each_scored_as_a_given_one(models):
    """Sampling with n_best: that many continuations of a prompt, best first, the first draw the single sample;
    each one's log-probability is what scoring its words after the prompt gives."""
    # (a continuation of at most 5 words leaves the whole prompt in the table of 12 positions)
    translator = Translator.from_checkpoint(
        models["lm"], strategy="sample", seed=2, temperature=2.0, max_new_tokens=5, device="cpu"
    )
    drawn = translator.translate_nbest(["w3 w4"], n_best=3)[0]
    assert len(drawn) == 3 and [h.log_prob for h in drawn] == sorted((h.log_prob for h in drawn), reverse=True)
    assert translator.translate("w3 w4") in [h.text for h in drawn]
    for h in drawn:
        continuation = h.text.removeprefix("w3 w4").strip()
        assert h.score == h.log_prob == pytest.approx(translator.score("w3 w4", continuation).log_prob, abs=1e-4)


def test_a_language_models_server_refuses_attention_asked_for_and_answers_without_it(models):
    """ "attention": true was accepted of a language model's server, which answered {} without a word."""
    from fastapi.testclient import TestClient

    from nmt.inference.web import create_app

    app = TestClient(create_app(Translator.from_checkpoint(models["lm"], device="cpu", max_new_tokens=3)))
    asked = app.post("/api/translate", json={"text": "w3 w4", "attention": True})
    assert asked.status_code == 422 and "a language model reads no source" in asked.json()["error"]
    answer = app.post("/api/translate", json={"text": "w3 w4"})  # the page asks so: no heatmap to draw
    assert answer.status_code == 200 and answer.json()["attention"] == {}
    assert "attention" not in app.post("/api/translate", json={"text": "w3", "attention": False}).json()
    # a prompt read cut keeps its last tokens (the ones it continues), and the answer says so
    short = Translator.from_checkpoint(models["lm"], device="cpu", max_new_tokens=3, max_input_len=2)
    cut = TestClient(create_app(short)).post("/api/translate", json={"text": "w3 w4 w5 w6 w7"}).json()
    assert cut["truncated"]["end"] == "last" and cut["truncated"]["kept"] == 2
