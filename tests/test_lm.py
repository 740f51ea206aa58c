"""task=lm: the decoder-only Transformer, perplexity over a stream, PTB-format data, generation."""

import json
import math
import random
import re

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch.nn import functional as F

from nmt.data.lm import BlockDataset, LanguageModelDataModule, collate_blocks, windows
from nmt.data.ptb import PTBDataModule
from nmt.data.sources import DataNotFoundError
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.data.vocab import WordVocabulary, load_tokenizer
from nmt.decoding.search import decode
from nmt.decoding.settings import SearchConfig
from nmt.inference.loading import load_model
from nmt.models.transformer_lm import TransformerLM
from nmt.tasks.language_model import LanguageModelTask, generate, stream_perplexity
from nmt.training.config import ConfigError, check_config
from nmt.training.train import train

from .conftest import CONF, NO_FINAL_SCORES, compose_train
from .test_end_to_end import run

POSITIONS = sorted(p.stem for p in (CONF / "pos").glob("*.yaml"))  # a new encoding is tested unlisted
NORMS = sorted(p.stem for p in (CONF / "norm").glob("*.yaml"))


def language_model(pos: str = "absolute", norm: str = "layer", vocab: int = 23, **kwargs) -> TransformerLM:
    cfg = compose_train("task=lm", f"pos={pos}", f"norm={norm}")
    torch.manual_seed(0)
    model = TransformerLM(
        tgt_vocab_size=vocab,
        pad_id=PAD_ID,
        position=instantiate(cfg.pos),
        norm=instantiate(cfg.norm),
        d_model=32,
        num_heads=4,
        num_layers=2,
        ffn_dim=64,
        **kwargs,
    )
    return model.eval()


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("norm", NORMS)
def test_a_prediction_never_sees_later_tokens(pos, norm):
    model = language_model(pos, norm)
    tokens = torch.randint(4, 23, (2, 12))
    changed = tokens.clone()
    changed[:, 7:] = torch.randint(4, 23, (2, 5))
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-5)  # positions 0..6 see tokens 0..6 only
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("pos", POSITIONS)
def test_padding_after_the_tokens_changes_nothing_before_it(pos):
    model = language_model(pos)
    tokens = torch.randint(4, 23, (1, 9))
    padded = torch.cat((tokens, torch.full((1, 4), PAD_ID)), dim=1)
    with torch.no_grad():
        assert torch.allclose(model(tokens), model(padded)[:, :9], atol=1e-5)


@pytest.mark.parametrize("pos", POSITIONS)
def test_generation_from_the_cache_equals_recomputation(pos):
    """Greedy decoding through encode/decode_step equals taking the argmax of a full forward pass over
    the whole sequence so far, step after step."""
    model = language_model(pos)
    prompt = torch.tensor([[EOS_ID, 5, 9, 14]])
    cached = decode(model, prompt, BOS_ID, EOS_ID, SearchConfig(strategy="greedy", max_len_a=0, max_len_b=15))[0]
    sequence = prompt[0].tolist()
    recomputed = []
    with torch.no_grad():
        for _ in range(14):
            token = int(model(torch.tensor([sequence]))[0, -1].argmax())
            if token == EOS_ID:
                break
            recomputed.append(token)
            sequence.append(token)
    assert cached == recomputed and len(cached) > 0
    # and the logits themselves agree along the way
    state = model.encode(prompt)
    logits, state = model.decode_step(torch.tensor([BOS_ID]), state)
    with torch.no_grad():
        assert torch.allclose(logits, model(prompt)[:, -1], atol=1e-5)
        for token in cached[:5]:
            prompt = torch.cat((prompt, torch.tensor([[token]])), dim=1)
            logits, state = model.decode_step(torch.tensor([token]), state)
            assert torch.allclose(logits, model(prompt)[:, -1], atol=1e-4)


@pytest.mark.parametrize("pos", ["absolute", "relative"])
def test_attention_maps_are_causal_distributions(pos):
    model = language_model(pos)
    maps = model.attention_maps(torch.randint(4, 23, (1, 7)))
    assert sorted(maps) == ["layer0", "layer1"]
    for weights in maps.values():
        assert weights.shape == (1, 4, 7, 7)
        assert torch.allclose(weights.sum(-1), torch.ones(1, 4, 7), atol=1e-5)
        assert torch.all(weights.triu(diagonal=1) == 0)  # nothing from the future


def test_beam_of_one_equals_greedy_for_a_language_model():
    model = language_model("rope")
    prompt = torch.tensor([[EOS_ID, 7, 8]])
    greedy = decode(model, prompt, BOS_ID, EOS_ID, SearchConfig(strategy="greedy", max_len_a=0, max_len_b=12))
    beam = decode(model, prompt, BOS_ID, EOS_ID, SearchConfig(strategy="beam", beam_size=1, max_len_a=0, max_len_b=12))
    assert greedy == beam


class Uniform(torch.nn.Module):
    """Equal logits for every token: a model whose perplexity is the vocabulary size."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # gives the model a device

    def forward(self, tokens):
        return torch.zeros(*tokens.shape, self.vocab)


@pytest.mark.parametrize(("block", "stride", "batch"), [(8, 8, 3), (8, 3, 2), (5, 1, 7)])
def test_a_uniform_model_has_perplexity_equal_to_the_vocabulary_size(block, stride, batch):
    stream = torch.randint(4, 50, (103,), dtype=torch.int32)
    dataset = BlockDataset(stream, block, stride)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch, collate_fn=collate_blocks)
    result = stream_perplexity(Uniform(50), loader)
    assert result["tokens"] == 102  # every token after the first, once
    assert result["ppl"] == pytest.approx(50.0, rel=1e-5)


def test_perplexity_is_one_total_not_a_mean_of_batch_means():
    """Two windows with different losses and different sizes: exp(total NLL / total tokens)."""

    class Knows(torch.nn.Module):
        # certain of the right token in the first window (p ~ 1), uniform over 4 in the second
        def __init__(self):
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            logits = torch.zeros(*tokens.shape, 4)
            if tokens[0, 0] == 0:
                logits[..., :] = torch.tensor([0.0, 50.0, 0.0, 0.0])
            return logits

    batches = [
        {"input": torch.tensor([[0, 1, 1]]), "target": torch.tensor([[1, 1, 1]])},  # 3 tokens, NLL ~ 0
        {"input": torch.tensor([[2]]), "target": torch.tensor([[3]])},  # 1 token, NLL ln 4
    ]
    result = stream_perplexity(Knows(), batches)
    assert result["tokens"] == 4
    assert result["ppl"] == pytest.approx(math.exp(math.log(4) / 4), rel=1e-6)  # a mean of batch means would give 2


@pytest.mark.parametrize("length", [2, 9, 10, 11, 57])
@pytest.mark.parametrize(("block", "stride"), [(10, 10), (10, 4), (10, 1), (3, 2)])
def test_windows_score_every_token_of_the_stream_exactly_once(length, block, stride):
    stream = torch.arange(100, 100 + length, dtype=torch.int32)
    dataset = BlockDataset(stream, block, stride)
    scored = []
    for i in range(len(dataset)):
        inputs, targets = dataset[i]
        assert len(inputs) <= block and len(inputs) == len(targets)
        # targets are the inputs shifted by one along the stream
        begin = int(inputs[0]) - 100
        assert torch.equal(inputs, stream[begin : begin + len(inputs)].long())
        for offset, target in enumerate(targets.tolist()):
            if target != PAD_ID:
                assert target == int(stream[begin + offset + 1])
                scored.append(target - 100)
    assert scored == list(range(1, length))
    # sliding windows give each scored token at least block - stride tokens of context (after the start)
    for begin, _end, first in windows(length, block, stride):
        if begin > 0:
            assert first - begin + 1 >= block - stride


def test_invalid_strides_are_rejected():
    with pytest.raises(ValueError, match="eval_stride"):
        windows(20, 8, 9)


def evaluate_config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("evaluate", overrides=["ckpt_path=x", *overrides])


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["num_samples=0", "prompt=the"], r"num_samples=0: how many continuations to sample, an integer >= 1"),
        (["max_new_tokens=-3", "prompt=the"], r"max_new_tokens=-3: the words a continuation may add"),
        (
            ["rouge=true"],
            r"rouge=True: ROUGE beside .*, which task=lm does not read; a language model is scored by "
            "perplexity",
        ),
        (["samples=3"], r"samples=3: the sample outputs printed of a decoded split, which task=lm does not read"),
        (["decode.beam_size=8"], r"decode.beam_size=8: options of generation from a prompt; without prompt="),
        (["max_new_tokens=5", "num_samples=2"], r"max_new_tokens=5, num_samples=2: options of generation"),
        (["attention_maps=[0]"], r"attention_maps=\[0\]: options of generation"),
        # options that did nothing, said nothing: each named with what does the job
        (
            ["max_input_len=20"],
            r"max_input_len=20: the source length a decoded source is cut at, which task=lm does "
            "not read; it reads no source",
        ),
        (
            ["data.columns=[0,1]"],
            r"data.columns=\[0, 1\]: the source and target fields of a split=files:<x.tsv> of "
            "pairs, which task=lm does not read",
        ),
        (["input=a.txt"], r"input='a.txt': .*, which task=lm does not read; it continues a prompt \(prompt=...\)"),
        (["prompt=the", "data.eval_stride=8"], r"data.eval_stride=8: options of scoring perplexity; with prompt="),
        (["prompt=the", "split=val"], r"split=val: options of scoring perplexity"),
        (["prompt=the", "split=test"], r"split=test: options of scoring perplexity"),  # the default is null
        (["prompt=the", "decode.max_len_b=5"], r"decode.max_len_b=5: an output's limit .* max_new_tokens=N sets"),
        (["prompt=the", "decode.min_len=5", "max_new_tokens=3"], r"decode.min_len=5: more than the 3 words"),
        (
            ["prompt=the", "decode.min_len=60"],
            r"decode.min_len=60: more than the 50 words .*\(max_new_tokens null: 50\)",
        ),
    ],
)
def test_evaluate_options_that_a_language_model_cannot_use_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        LanguageModelTask().check_evaluation(evaluate_config(*overrides))


def test_num_samples_is_refused_for_a_checkpoint_that_translates():
    from nmt.tasks.translation import TranslationTask

    with pytest.raises(ValueError, match=r"num_samples=3: continuations of a language model's prompt"):
        TranslationTask().check_evaluation(evaluate_config("num_samples=3"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["samples=-1"], r"^samples=-1: the sample translations printed, a whole number >= 0 \(0: none\)"),
        (["samples=two"], r"^samples='two': the sample translations printed"),
        # each call drew other outputs into one folder and replaced the last call's score
        (["decode.strategy=sample"], r"^decode.strategy=sample without decode.seed: a split's score from draws"),
    ],
)
def test_a_split_scored_by_draws_needs_a_seed_and_samples_is_a_count(overrides, message):
    from nmt.tasks.translation import TranslationTask

    with pytest.raises(ValueError, match=message):
        TranslationTask().check_evaluation(evaluate_config(*overrides))
    TranslationTask().check_evaluation(evaluate_config("decode.strategy=sample", "decode.seed=1", "samples=0"))
    TranslationTask().check_evaluation(evaluate_config("decode.strategy=sample", "input=x.txt"))  # translations only


def test_options_of_generation_are_taken_with_a_prompt_and_a_zero_stride_is_refused():
    LanguageModelTask().check_evaluation(evaluate_config("prompt=the", "decode.beam_size=8", "max_new_tokens=0"))
    # a min_len that is no number is left to the search's check, which names it (it was a TypeError's traceback)
    LanguageModelTask().check_evaluation(evaluate_config("prompt=the", "decode.min_len=ten"))
    with pytest.raises(ValueError, match=r"data.eval_stride=0 must be in \[1, data.block_size=16\]"):
        LanguageModelDataModule(block_size=16, eval_stride=0)


def test_the_word_vocabulary_keeps_unk_as_a_word_and_round_trips():
    vocab = WordVocabulary.build(["the cat <unk> sat", "the dog"], max_size=None)
    ids = vocab.encode("the <unk> dog zebra")
    assert ids[1] == UNK_ID and ids[3] == UNK_ID  # the corpus' <unk>, and a word outside the vocabulary
    assert vocab.decode(vocab.encode("the cat <unk> sat")) == "the cat <unk> sat"
    assert vocab.encode("the")[0] == 4  # most frequent first, after the 4 special ids
    again = load_tokenizer(vocab.model_proto)
    assert isinstance(again, WordVocabulary) and again.words == vocab.words
    assert WordVocabulary.build(["a b c d e f"], max_size=6).vocab_size == 6


# ---- a PTB-format corpus, generated ---------------------------------------------------------------
WORDS = [f"w{i}" for i in range(20)]


def counting_sentences(n: int, seed: int) -> list[str]:
    """Runs of consecutive words (w3 w4 w5 ...): after the first word, every next word is determined."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        start, length = rng.randrange(12), rng.randrange(3, 8)
        words = WORDS[start : start + length]
        if rng.random() < 0.1:
            words[rng.randrange(len(words))] = "<unk>"
        lines.append(" " + " ".join(words) + " ")
    return lines


@pytest.fixture
def ptb_folder(tmp_path):
    folder = tmp_path / "ptb"
    folder.mkdir()
    for name, n, seed in (("train", 600, 1), ("valid", 60, 2), ("test", 60, 3)):
        (folder / f"ptb.{name}.txt").write_text("\n".join(counting_sentences(n, seed)) + "\n")
    return folder


def test_the_ptb_module_reads_the_stream_with_sentence_ends(ptb_folder, tmp_path):
    data = PTBDataModule(root=str(ptb_folder), download=False, block_size=16, cache_dir=str(tmp_path / "c"))
    lines = data.text("test")
    stream = data.stream("test")
    words = sum(len(line.split()) for line in lines)
    assert len(stream) - 1 == words + len(lines)  # words and one end per sentence are scored
    assert stream[0] == EOS_ID and stream[-1] == EOS_ID
    report = data.report()
    assert report["test"]["scored_tokens"] == words + len(lines)
    assert report["train"]["out_of_vocabulary_words"] == 0


def test_a_damaged_encoded_stream_in_the_cache_is_made_again_and_said(ptb_folder, tmp_path, caplog):
    """A cut-short stream of a language model's split was a traceback of torch's zip reader."""
    data = PTBDataModule(root=str(ptb_folder), download=False, block_size=16, cache_dir=str(tmp_path / "c"))
    expected = data.stream("val").tolist()
    for path in (tmp_path / "c").glob("encoded/*.pt"):
        path.write_bytes(path.read_bytes()[:100])
    again = PTBDataModule(root=str(ptb_folder), download=False, block_size=16, cache_dir=str(tmp_path / "c"))
    with caplog.at_level("WARNING"):
        assert again.stream("val").tolist() == expected
    assert "cannot be read" in caplog.text and "encoding the split again" in caplog.text
    caplog.clear()
    for path in (tmp_path / "c").glob("encoded/*.pt"):  # one bit of one id: another word, read in silence before
        saved = torch.load(path, weights_only=True)
        saved["stream"][5] ^= 1 << 3
        torch.save(saved, path)
    third = PTBDataModule(root=str(ptb_folder), download=False, block_size=16, cache_dir=str(tmp_path / "c"))
    with caplog.at_level("WARNING"):
        assert third.stream("val").tolist() == expected
    assert "(its ids do not match their digest): encoding the split again" in caplog.text


def test_data_root_wins_over_another_copy_whatever_its_compression(ptb_folder, tmp_path, monkeypatch):
    import gzip

    other = tmp_path / "elsewhere" / "ptb"
    other.mkdir(parents=True)
    for name in ("train", "valid", "test"):
        with gzip.open(other / f"ptb.{name}.txt.gz", "wt") as handle:
            handle.write(" another corpus \n")
    monkeypatch.setenv("NMT_DATA", str(tmp_path / "elsewhere"))
    data = PTBDataModule(root=str(ptb_folder), download=False, cache_dir=str(tmp_path / "c"))
    assert len(data.text("train")) == 600  # data.root's plain files, not $NMT_DATA's .gz ones
    assert PTBDataModule(download=False, cache_dir=str(tmp_path / "c")).text("train") == [" another corpus "]


def test_a_missing_ptb_corpus_gets_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_DATA", raising=False)
    data = PTBDataModule(root=str(tmp_path / "nowhere"), download=False, cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataNotFoundError, match="data.root"):
        data.text("train")


def test_task_lm_rejects_a_translation_model():
    cfg = compose_train("task=lm", "model=transformer", tiny=False)
    with pytest.raises(ConfigError, match="model=transformer_lm"):
        check_config(cfg)


@pytest.mark.slow
def test_a_tiny_language_model_learns_the_counting_corpus_and_generates(ptb_folder, tmp_path):
    run_dir = tmp_path / "run"
    cfg = compose_train(
        "task=lm",
        f"data.root={ptb_folder}",
        "data.download=false",
        "data.block_size=16",
        "data.batch_size=16",
        "data.eval_stride=8",
        "model.dropout=0.0",
        "model.attention_dropout=0.0",
        "optim.optimizer.lr=3e-3",
        "warmup=50",
        "trainer.max_epochs=6",
        f"run_dir={run_dir}",
    )
    results = train(cfg)
    vocab_size = 4 + 20  # special ids and the 20 words (<unk> is the unknown id)
    test = results["test"]
    assert test["tokens"] == sum(len(s.split()) + 1 for s in counting_sentences(60, 3))
    # uniform guessing would give ~24; the structure leaves only the first word and the end uncertain
    assert test["ppl"] < vocab_size / 3, test
    assert results["best_val_ppl"] == pytest.approx(min(results["best_val_ppl"], test["ppl"] * 2))
    # the best checkpoint's perplexity of the validation stream, scored at the end as the test is: the number
    # validation logged for it
    assert results["val_as_test"]["ppl"] == pytest.approx(results["best_val_ppl"], rel=1e-4)
    assert results["val_as_test"]["tokens"] == sum(len(s.split()) + 1 for s in counting_sentences(60, 2))
    loaded = load_model(results["best_checkpoint"])
    assert isinstance(loaded.tgt_tokenizer, WordVocabulary)
    text = generate(loaded, "w3 w4", SearchConfig(strategy="greedy"), max_new_tokens=5)[0]
    assert text.startswith("w3 w4 w5")  # the counting continues
    samples = generate(loaded, "w3", SearchConfig(strategy="sample", seed=1), num_samples=3, max_new_tokens=4)
    # the Translator continues prompts the same way, with n-best scores that are the model's log-probabilities
    from nmt.inference.translator import Translator

    greedy = Translator.from_checkpoint(results["best_checkpoint"], strategy="greedy", max_new_tokens=5)
    assert greedy.translate(["w3 w4"]) == [text]
    beam = Translator.from_checkpoint(results["best_checkpoint"], beam_size=3, length_penalty=0.0, max_new_tokens=5)
    (hypotheses,) = beam.translate_nbest(["w3 w4"], n_best=2)
    assert hypotheses[0].text.startswith("w3 w4 w5") and len(hypotheses) == 2
    for h in hypotheses:
        assert h.score == pytest.approx(h.log_prob, abs=1e-4) and len(h.token_log_probs) == len(h.tokens) + 1
    assert len(samples) == 3 and all(s.startswith("w3") and len(s.split()) <= 5 for s in samples)
    # evaluate.py prompt= and translate.py drew other samples (seeded 1, 2, 3 against 1, 1.1, 1.2) in another order
    sampler = Translator.from_checkpoint(results["best_checkpoint"], strategy="sample", seed=1, max_new_tokens=4)
    assert [h.text for h in sampler.translate_nbest(["w3"], n_best=3)[0]] == samples
    assert sampler.translate(["w3"]) == generate(loaded, "w3", SearchConfig(strategy="sample", seed=1), 1, 4)
    # what evaluate.py's prompt=... refuses is refused here too, not ignored (a length as a multiple of a source,
    # more words than a continuation may add, the cross-attention of a model without a source)
    with pytest.raises(ValueError, match=r"^decode.max_len_a=2: an output's limit as a multiple of its source"):
        Translator.from_checkpoint(results["best_checkpoint"], max_len_a=2)
    with pytest.raises(ValueError, match=r"^decode.min_len=60: more than the 5 words a continuation may add"):
        Translator.from_checkpoint(results["best_checkpoint"], min_len=60, max_new_tokens=5)
    with pytest.raises(ValueError, match=r"^with_attention=True: a language model reads no source"):
        greedy.translate_nbest(["w3"], with_attention=True)
    # a prompt is written back with its continuation: a tab in it split the n-best lines' fields; a space now, as
    # the model read it
    (tabbed,) = beam.translate_nbest(["w3\tw4"], n_best=2)
    assert [h.text for h in tabbed] == [h.text for h in hypotheses] and "\t" not in tabbed[0].text
    # a prompt longer than max_input_len keeps its end, which the continuation follows (it kept its start)
    short = Translator.from_checkpoint(results["best_checkpoint"], strategy="greedy", max_new_tokens=1, max_input_len=2)
    assert short.translate(["w1 w2 w3 w4"]) == ["w1 w2 w3 w4 w5"]
    metrics = json.loads((run_dir / "data_report.json").read_text())
    assert metrics["splits"]["train"]["lines"] == 600
    # evaluate.py from the checkpoint alone: the same test perplexity, and a prompt continued
    checkpoint = results["best_checkpoint"]
    run("evaluate.py", f"ckpt_path={checkpoint}", "split=test", f"out_dir={tmp_path / 'eval'}")
    again = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert again["ppl"] == pytest.approx(test["ppl"], rel=1e-6) and again["tokens"] == test["tokens"]
    # another evaluation stride scores the same tokens (with more context each), into its own folder
    run("evaluate.py", f"ckpt_path={checkpoint}", "split=test", "data.eval_stride=1")
    strided = json.loads((run_dir / "eval" / "test_ppl_stride1" / "metrics.json").read_text())
    assert strided["tokens"] == test["tokens"] and "eval stride 1" in strided["data"]
    printed = run(
        "evaluate.py",
        f"ckpt_path={checkpoint}",
        "prompt='w5 w6'",
        "decode.strategy=greedy",
        "attention_maps=[0]",
        f"out_dir={tmp_path / 'maps'}",
    ).stdout
    assert any(line.startswith("w5 w6 w7") for line in printed.splitlines())
    assert (tmp_path / "maps" / "self_attention_layer0.png").read_bytes().startswith(b"\x89PNG")
    # options that give nothing here are refused, not ignored
    with pytest.raises(ValueError, match=r"num_samples=2: only sampling gives several continuations"):
        LanguageModelTask().evaluate(
            evaluate_config("prompt=w3", "decode.strategy=greedy", "num_samples=2"), lambda: loaded
        )
    from nmt.inference.stream import run_translate

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        translate_cfg = compose("translate", overrides=[f"ckpt_path={checkpoint}", "alignments=true", "input=-"])
    with pytest.raises(ValueError, match=r"alignments=true: a language model's continuation has no source"):
        run_translate(translate_cfg)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        translate_cfg = compose("translate", overrides=[f"ckpt_path={checkpoint}", "decode.max_len_b=2", "input=-"])
    with pytest.raises(ValueError, match=r"^decode.max_len_b=2: an output's limit as a multiple"):
        run_translate(translate_cfg)
    (tmp_path / "starts.txt").write_text("w9\n")  # refused before any line is read, not at each line's decoding
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        given = [f"ckpt_path={checkpoint}", f"prefix_file={tmp_path / 'starts.txt'}", "input=-"]
        translate_cfg = compose("translate", overrides=given)
    with pytest.raises(ValueError, match=r"prefix_file=.*starts.txt: a language model continues each line, its prompt"):
        run_translate(translate_cfg)
    # a grid of settings chooses by decoded scores, which perplexity is not
    with pytest.raises(AssertionError, match="a grid chooses by the scores of decoded outputs"):
        run("evaluate.py", f"ckpt_path={checkpoint}", "split=val", "average_last=[0,2]")


@pytest.mark.slow
def test_a_language_model_trains_on_ones_own_text_files_and_scores_any_text_file(ptb_folder, tmp_path):
    """task=lm read Penn Treebank alone, and scored no text but its corpus's splits: data=lm_files trains on
    one's own files, and evaluate.py split=files:<path> scores any text with the trained vocabulary (as
    fairseq-eval-lm). The same text as the test split, given as a file, scores the test's perplexity exactly;
    the unknown words' share is counted as the words outside the training vocabulary."""
    from nmt.evaluation.evaluate import evaluate

    files = {
        split: ptb_folder / f"ptb.{name}.txt"
        for split, name in (("train", "train"), ("val", "valid"), ("test", "test"))
    }
    run_dir = tmp_path / "run"
    cfg = compose_train(
        "task=lm",
        "data=lm_files",
        *(f"data.{split}={path}" for split, path in files.items()),
        "data.block_size=16",
        "data.max_vocab=16",  # fewer than the corpus's words: some are unknown
        "trainer.max_steps=20",
        f"run_dir={run_dir}",
    )
    results = train(cfg)
    assert results["test"]["tokens"] == sum(len(s.split()) + 1 for s in counting_sentences(60, 3))
    new = tmp_path / "new.txt"
    new.write_text(files["test"].read_text())
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        scored = evaluate(compose("evaluate", overrides=[f"ckpt_path={run_dir}", f"split=files:{new}", "device=cpu"]))
        test = evaluate(compose("evaluate", overrides=[f"ckpt_path={run_dir}", "split=test", "device=cpu"]))
    assert scored["ppl"] == test["ppl"] and scored["tokens"] == test["tokens"] and scored["split"] == f"files:{new}"
    vocab = load_model(results["best_checkpoint"]).tgt_tokenizer
    words = [w for line in counting_sentences(60, 3) for w in line.split()]
    unknown = sum(1 for w in words if w not in vocab.ids or w == "<unk>")
    assert scored["unk_rate"] == round(unknown / (len(words) + 60), 5) > 0
    assert len(list((run_dir / "eval").glob("files_*_ppl/metrics.json"))) == 1  # a folder of its own
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        missing = compose("evaluate", overrides=[f"ckpt_path={run_dir}", f"split=files:{tmp_path / 'no.txt'}"])
    with pytest.raises(
        FileNotFoundError, match=rf"^split=files:{re.escape(str(tmp_path / 'no.txt'))}: .* no such file"
    ):
        evaluate(missing)


def test_lm_files_names_the_files_it_lacks_and_task_lm_lists_the_corpora_it_reads():
    from nmt.data.text_files import TextFilesDataModule

    with pytest.raises(ValueError, match=r"^data=lm_files needs data.val, data.test: a text file per split"):
        TextFilesDataModule(train="t.txt")
    lm_corpora = r"use data=lm_files or data=ptb"
    with pytest.raises(ConfigError, match=rf"task=lm cannot read nmt.data.multi30k.Multi30kDataModule: {lm_corpora}"):
        check_config(compose_train("task=lm", "data=multi30k", tiny=False))


def test_both_kinds_of_vocabulary_name_the_words_they_read_as_unknown():
    from nmt.data.tokenizer import Tokenizer, TokenizerSettings

    words = WordVocabulary.build(["a b c", "b c"])
    assert words.unknown_words("a zz <unk> c") == ["zz"]
    pieces = Tokenizer.train(["a b c abc", "b c a"] * 50, TokenizerSettings(vocab_size=10, byte_fallback=False))
    assert pieces.unknown_words("abc zq cab") == ["zq"]
    # as messages name them: a word vocabulary's whole word, a subword vocabulary's unspellable characters
    assert words.unknown_text("a zz <unk> c") == ["zz"]
    assert pieces.unknown_text("abc zq azc qzba") == ["zq", "z in azc", "q, z in qzba"]


@pytest.mark.parametrize(("new_tokens", "kept", "room"), [(3, 4, 4), (20, 1, 7)])
def test_a_continuation_stays_within_a_learned_position_table(new_tokens, kept, room):
    """A prompt and its continuation share the table's positions: the prompt keeps its end and the limit is
    what the table leaves (a long prompt or max_new_tokens failed at the table's end while decoding)."""
    from nmt.decoding.constraints import continuation_room
    from nmt.decoding.search import decode
    from nmt.decoding.settings import SearchConfig

    model = language_model("learned")
    model.pos.max_len = 8
    prompt = list(range(4, 10))
    ids, limit = continuation_room(model, prompt, new_tokens)
    assert ids == prompt[-kept:] and limit == room
    for strategy in ("greedy", "beam"):
        search = SearchConfig(strategy=strategy, beam_size=2, max_len_a=0.0, max_len_b=limit)
        (out,) = decode(model, torch.tensor([[EOS_ID, *ids]]), BOS_ID, EOS_ID, search)  # no position beyond 7
        assert len(out) <= limit
    assert continuation_room(language_model("absolute"), prompt, new_tokens) == (prompt, new_tokens + 1)


def test_an_evaluation_stride_for_the_training_split_is_refused():
    """split=train is scored in disjoint blocks whatever the stride: data.eval_stride=8 and 32 gave the same
    perplexity, each recorded under its own stride, in a folder of its own."""
    from types import SimpleNamespace

    with pytest.raises(ValueError, match=r"^data.eval_stride=8 with split=train: the training split is scored in"):
        LanguageModelTask().evaluate_split(SimpleNamespace(), "train", {"eval_stride": 8})


def test_a_continuation_adds_a_word_at_least_unless_max_new_tokens_is_zero(ptb_folder, tmp_path, caplog):
    """A barely trained model's beam (the checkpoint's decode block: beam 5) ended at once, so translate.py,
    serve.py and evaluate.py prompt=... gave the prompt back with nothing added: task=lm's decode.min_len is 1
    (fairseq's default), which max_new_tokens=0 (nothing to add) asks no word of."""
    run_dir = tmp_path / "run"
    given = [f"data.root={ptb_folder}", "data.download=false", "data.block_size=16", "trainer.max_steps=2"]
    train(compose_train("task=lm", *given, *NO_FINAL_SCORES, f"run_dir={run_dir}"))
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    loaded = load_model(checkpoint)
    assert loaded.config["decode"]["min_len"] == 1 and loaded.config["decode"]["strategy"] == "beam"
    from nmt.inference.translator import Translator

    for prompt in ("w3", "w1 w2 w3 w4 w5"):
        (text,) = Translator.from_checkpoint(checkpoint, max_new_tokens=3).translate([prompt])
        assert text.startswith(prompt) and 1 <= len(text.split()) - len(prompt.split()) <= 3
        search = SearchConfig(strategy="beam", beam_size=5, min_len=loaded.config["decode"]["min_len"])
        assert len(generate(loaded, prompt, search, max_new_tokens=3)[0].split()) > len(prompt.split())
    with caplog.at_level("WARNING"):
        assert Translator.from_checkpoint(checkpoint, max_new_tokens=0).translate(["w3"]) == ["w3"]
        assert generate(loaded, "w3", SearchConfig(strategy="beam", min_len=1), max_new_tokens=0) == ["w3"]
    assert "min_len" not in caplog.text


def test_words_of_equal_count_are_ordered_alphabetically():
    # c twice; b and a once each, b read first: the ties go alphabetically, not in reading order
    assert WordVocabulary.build(["b a c", "c"]).words[4:] == ["c", "a", "b"]


class Lines(LanguageModelDataModule):
    name = "probe"

    def __init__(self, lines, **kwargs):
        super().__init__(**kwargs)
        self.lines = lines

    def read_split(self, split):
        return self.lines


def test_training_windows_are_disjoint_blocks_whatever_the_evaluation_stride(tmp_path):
    # a stream of 32 ids (</s>, 30 words, </s>): 31 targets; blocks of 8 -> 4 training windows, each target once
    dm = Lines([" ".join(f"w{i}" for i in range(30))], block_size=8, eval_stride=2, cache_dir=str(tmp_path))
    assert dm.dataset("train").windows == [(0, 8, 0), (8, 16, 8), (16, 24, 16), (23, 31, 24)]
    # evaluation slides by 2 after the first block: 8, 10, ..., 30, then 31: 13 windows
    assert len(dm.dataset("val").windows) == 13


def test_a_pre_norm_language_model_normalises_before_its_output_layer():
    model = language_model("absolute", "layer")  # norm_position=pre: a final LayerNorm (gain 1, bias 0 at init)
    seen = []
    model.output.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    with torch.no_grad():
        model(torch.randint(4, 23, (2, 9)))
    h = seen[0]
    torch.testing.assert_close(h, F.layer_norm(h, (h.size(-1),)), atol=1e-4, rtol=1e-4)
    assert h.var(-1, unbiased=False).sub(1).abs().max() < 1e-3
