"""Summarisation: n-gram blocking and minimum length in every search, ROUGE, truncated long sources."""

import json
import random
import re

import pytest
import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from nmt.decoding.constraints import banned_tokens
from nmt.decoding.search import decode
from nmt.decoding.settings import STRATEGIES, SearchConfig
from nmt.metrics.corpus import ROUGE_KEYS, rouge_scores
from nmt.models.state import DecoderState
from nmt.tasks.summarization import SummarizationTask
from nmt.training.train import train

from .conftest import STRATEGY_NEEDS, compose_train


class Looping:
    """A decoder that always prefers the same short cycle of tokens (5 6 7 5 6 7 ...), or EOS at once:
    what an under-trained summariser does, made deterministic."""

    pad_id = PAD_ID

    def __init__(self, vocab: int = 12, eager_to_stop: bool = False) -> None:
        self.vocab, self.eager_to_stop = vocab, eager_to_stop

    def encode(self, src):
        return DecoderState({"row": torch.arange(src.size(0))}, step=0)

    def decode_step(self, prev, state):
        logits = torch.linspace(0, 1, self.vocab).repeat(prev.size(0), 1)  # a fixed, strict preference order
        cycle = {BOS_ID: 5, 5: 6, 6: 7, 7: 5}
        favourite = torch.tensor([cycle.get(int(p), 5) for p in prev])
        logits[torch.arange(prev.size(0)), favourite] = 10.0
        if self.eager_to_stop:
            logits[:, EOS_ID] = 20.0
        return logits, DecoderState(state.tensors, state.step + 1)


def ngrams(tokens, n):
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_banned_tokens_by_hand():
    assert banned_tokens([5, 6, 7, 5, 6], 3) == [7]  # "5 6" was followed by 7
    assert banned_tokens([5, 6, 7, 5], 2) == [6]
    assert sorted(banned_tokens([5, 6, 5], 1)) == [5, 6]
    assert banned_tokens([5], 3) == [] and banned_tokens([5, 6, 5], 0) == []


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_ngram_blocking_never_emits_a_repeated_ngram(strategy, n):
    src = torch.full((3, 10), 9)
    settings = dict(
        strategy=strategy, beam_size=3, max_len_a=0, max_len_b=10, seed=0, **STRATEGY_NEEDS.get(strategy, {})
    )
    unblocked = decode(Looping(), src, BOS_ID, EOS_ID, SearchConfig(**settings))
    assert any(len(set(ngrams(out, n))) < len(ngrams(out, n)) for out in unblocked)  # it does loop
    blocked = decode(Looping(), src, BOS_ID, EOS_ID, SearchConfig(**settings, no_repeat_ngram_size=n))
    for out in blocked:
        assert len(set(ngrams(out, n))) == len(ngrams(out, n)), out
        assert len(out) >= min(3, 12 - 4)  # blocking changes the tokens, it does not end the output


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_minimum_length_holds(strategy):
    src = torch.full((2, 8), 9)
    settings = dict(
        strategy=strategy, beam_size=2, max_len_a=0, max_len_b=20, seed=0, **STRATEGY_NEEDS.get(strategy, {})
    )
    assert decode(Looping(eager_to_stop=True), src, BOS_ID, EOS_ID, SearchConfig(**settings)) == [[], []]
    outputs = decode(Looping(eager_to_stop=True), src, BOS_ID, EOS_ID, SearchConfig(**settings, min_len=6))
    assert [len(out) for out in outputs] == [6, 6]  # ends as soon as it may


def test_rouge_by_hand():
    # unigrams: 3 of 3 hypothesis words in a 6-word reference: P 1, R 1/2, F 2/3; bigrams: P 1, R 2/5,
    # F 4/7; longest common subsequence 3: as unigrams
    scores = rouge_scores(["The cat sat"], ["the cat sat on the mat"])
    assert scores == pytest.approx({"rouge1": 200 / 3, "rouge2": 400 / 7, "rougeL": 200 / 3}, rel=1e-6)
    # sentence F-measures are averaged over the set: (1 + 0) / 2
    assert rouge_scores(["a b", "c d"], ["a b", "e f"])["rouge1"] == 50.0


def test_rouge_reads_every_script_and_counts_chinese_by_character():
    """torchmetrics' own rule keeps ASCII letters and digits alone: a perfect Chinese summary scored 0.33 and
    Russian text nothing. Chinese and Japanese characters are now a token each (as Chinese summarisation
    scores them) and other letters are kept; English text scores as torchmetrics' own rule scores it."""
    import random

    from torchmetrics.text.rouge import ROUGEScore

    # 我 爱 北 京 against 我 爱 上 海: unigrams 2 of 4 both ways (F 1/2); bigrams 我爱 alone of 3 (F 1/3);
    # the longest common subsequence 我爱 (F 1/2)
    assert rouge_scores(["我爱上海。"], ["我爱北京。"]) == pytest.approx(
        {"rouge1": 50.0, "rouge2": 100 / 3, "rougeL": 50.0}
    )
    references = ["我永遠不會忘記你的親切。", "Привет, мир", "Ça été über-café", "カタカナとひらがな"]
    assert rouge_scores(references, references) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}
    # words of letters and digits: on English text, torchmetrics' own normalisation to the last digit
    words = "the a cat dog sat on mat red blue 12 x-ray it's U.S. run_fast ran (sic)".split()
    rng = random.Random(0)
    hyps, refs = ([" ".join(rng.choice(words) for _ in range(12)) for _ in range(40)] for _ in range(2))
    theirs = ROUGEScore(rouge_keys=("rouge1", "rouge2", "rougeL"))(hyps, refs)
    assert rouge_scores(hyps, refs) == pytest.approx({k: float(theirs[f"{k}_fmeasure"]) * 100 for k in ROUGE_KEYS})


# ---- a generated summarisation corpus: each document is about one topic, which its summary names ----
TOPICS = {f"t{k}": [f"t{k}w{i}" for i in range(6)] for k in range(5)}
NOISE = [f"n{i}" for i in range(10)]


def topic_corpus(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    documents, summaries = [], []
    for _ in range(n):
        topic = rng.choice(sorted(TOPICS))
        words = [rng.choice(TOPICS[topic] if rng.random() < 0.6 else NOISE) for _ in range(rng.randrange(15, 60))]
        documents.append(" ".join(words))
        summaries.append(f"the text is about {topic} .")
    return documents, summaries


def write_split(folder, name, n, seed):
    documents, summaries = topic_corpus(n, seed)
    (folder / f"{name}.doc").write_text("\n".join(documents) + "\n")
    (folder / f"{name}.sum").write_text("\n".join(summaries) + "\n")


@pytest.mark.parametrize("overrides", [[], ["model=rnn"], ["data=toy"], ["experiment=summarization"]])
def test_the_tasks_metrics_hold_whatever_recipe_applies(overrides):
    """The default recipe of Multi30k's Transformer stops early on val_loss, as translation does; under
    task=summarization it picked the task's val_rougeL for checkpoints but kept stopping on val_loss."""
    cfg = compose_train("task=summarization", *overrides, tiny=False)
    assert (cfg.checkpoint.monitor, cfg.checkpoint.mode) == ("val_rougeL", "max")
    assert (cfg.early_stopping.monitor, cfg.early_stopping.mode) == ("val_rougeL", "max")


def test_sources_cut_by_max_src_len_are_kept_whatever_max_len_says(tmp_path):
    """experiment=summarization cuts sources at 400 pieces and drops summaries of 128 or more: a document
    of 200 pieces is trained on, cut, not dropped as a pair with a side over max_len (it was, silently)."""
    from nmt.data.files import FilesDataModule

    documents, summaries = topic_corpus(60, 1)
    (tmp_path / "train.tsv").write_text("".join(f"{d}\t{s}\n" for d, s in zip(documents, summaries, strict=True)))
    summaries[0] = " ".join(["t1w1"] * 40)  # a summary of max_len pieces or more is still dropped
    (tmp_path / "long.tsv").write_text("".join(f"{d}\t{s}\n" for d, s in zip(documents, summaries, strict=True)))
    common = dict(val=str(tmp_path / "train.tsv"), test=str(tmp_path / "train.tsv"), max_len=12, max_src_len=30)
    tokenizer = dict(vocab_size=60, byte_fallback=False)
    dm = FilesDataModule(
        train=str(tmp_path / "train.tsv"), cache_dir=str(tmp_path / "c"), tokenizer=tokenizer, **common
    )
    dm.prepare_data()
    report = dm.report()["train"]
    src_tokenizer = dm.build_tokenizers()[0]
    lengths = [len(ids) for ids in src_tokenizer.encode_batch(documents)]
    assert sum(n >= 12 for n in lengths) > 30 and report["src_truncated"] == sum(n > 30 for n in lengths) > 0
    assert report["pairs"] == 60 and report["dropped"]["too_long"] == 0
    assert report["src_len_p50_p90_p99_max"][-1] == 30
    dm = FilesDataModule(train=str(tmp_path / "long.tsv"), cache_dir=str(tmp_path / "c"), tokenizer=tokenizer, **common)
    dm.prepare_data()
    # the pair dropped for its summary is not counted as a source cut too (more cut sources than pairs were said)
    kept = dm.report()["train"]
    assert kept["pairs"] == 59 and kept["src_truncated"] == sum(n > 30 for n in lengths[1:])
    # a batch budget below the cut sources names the limit that shortens them, not max_len, which does not
    small = {**common, "max_tokens": 20}
    dm = FilesDataModule(train=str(tmp_path / "train.tsv"), cache_dir=str(tmp_path / "c"), tokenizer=tokenizer, **small)
    with pytest.raises(
        ValueError, match=r"data\.max_tokens=20 is smaller .* raise data\.max_tokens or lower data\.max_src_len"
    ):
        dm.prepare_data()


@pytest.mark.slow
def test_the_summarisation_recipe_trains_and_scores_rouge(tmp_path):
    for name, n, seed in (("train", 400, 1), ("val", 40, 2), ("test", 40, 3)):
        write_split(tmp_path, name, n, seed)
    run_dir = tmp_path / "run"
    cfg = compose_train(
        "experiment=summarization",
        "data=files",
        *(f"data.{split}={tmp_path / split}" for split in ("train", "val", "test")),
        "data.src_lang=doc",
        "data.tgt_lang=sum",
        "data.max_src_len=32",
        "data.tokenizer.vocab_size=60",
        "data.tokenizer.byte_fallback=false",
        "data.max_tokens=500",
        "model.dropout=0.0",
        "optim.optimizer.lr=3e-3",
        "warmup=50",
        "trainer.max_epochs=6",
        "early_stopping.patience=null",
        "validation.search.min_len=0",
        "decode.min_len=3",
        "decode.beam_size=2",
        "decode.max_len_b=12",
        f"run_dir={run_dir}",
    )
    results = train(cfg)
    report = json.loads((run_dir / "data_report.json").read_text())["splits"]
    tokenizer = Tokenizer((run_dir / "tokenizers" / "src.model").read_bytes())
    for split in ("train", "test"):
        documents = topic_corpus(400 if split == "train" else 40, 1 if split == "train" else 3)[0]
        long_ones = sum(len(ids) > 32 for ids in tokenizer.encode_batch(documents))
        assert report[split]["src_truncated"] == long_ones > 0
        assert report[split]["pairs"] == len(documents)  # truncated, not dropped
    test = results["test"]
    assert {"rouge1", "rouge2", "rougeL", "bleu"} <= set(test)
    assert results["final_metrics"]["val_rougeL"] >= 0
    assert test["rouge1"] > 90, test  # the topic is learnt (a wrong topic scores 80: 4 of 5 words)
    hypotheses = (run_dir / "eval" / "test_beam2" / "hypotheses.txt").read_text().splitlines()
    assert all(len(tokenizer.encode(h)) >= 3 for h in hypotheses)  # decode.min_len in subword tokens
    # the validation set decoded as the test is: the run's beam and minimum length, not validation.search's
    val = results["val_as_test"]
    assert {"rouge1", "rouge2", "rougeL"} <= set(val) and val["search"] == test["search"]
    metrics = SummarizationTask().sweep_metrics(results)  # every test ROUGE has its validation counterpart
    assert all(metrics[f"val_as_test_{key}"] == val[key] for key in ("rouge1", "rouge2", "rougeL"))
    val_hypotheses = (run_dir / "eval" / "val_beam2" / "hypotheses.txt").read_text().splitlines()
    assert all(len(tokenizer.encode(h)) >= 3 for h in val_hypotheses)


@pytest.mark.parametrize(
    ("data", "refused"),
    [("multi30k", "multi30k (en-de)"), ("tatoeba_de_en", "tatoeba (de-en)"), ("zh_en", "zh_en (zh-en)"),
     ("europarl", "europarl (de-en)"), ("news_commentary", "news_commentary (de-en)"), ("files", None),
     ("toy", None), ("cmudict", "cmudict (en-phonemes)")],
)  # fmt: skip
def test_a_corpus_of_translations_is_refused_as_a_summarisers_data_before_any_run(data, refused):
    """`train.py task=summarization` alone trained on Multi30k en-de and scored German "summaries" of English
    captions by ROUGE, without a word: a corpus of translations is refused, naming it and the way to one's
    own documents; plain files (documents and summaries) and the generated toy task are not."""
    from nmt.training.config import ConfigError, check_config

    cfg = compose_train("task=summarization", f"data={data}", *(["data.train=docs"] if data == "files" else []))
    if refused is None:
        check_config(cfg)
        return
    kind = "words and their pronunciations" if data == "cmudict" else "translations"
    with pytest.raises(ConfigError, match=rf"task=summarization on data={re.escape(refused)}: a corpus of {kind}, "):
        check_config(cfg)
    check_config(compose_train("task.rouge=true", f"data={data}"))  # ROUGE beside a translation's BLEU: asked


def test_task_rouge_false_is_refused_with_the_reason_not_as_an_unknown_key():
    from nmt.tasks import build_task

    cfg = compose_train("task=summarization", "task.rouge=false")
    with pytest.raises(ValueError, match=r"task.rouge=false: summarisation is scored by ROUGE; use task=translation"):
        build_task(cfg.task)


def test_a_minimum_length_beyond_the_output_limit_is_said_once(caplog):
    """min_len=30 with at most 20 output tokens cannot hold: the outputs end at their limit, and a warning
    says so (once), where they ended shorter than min_len in silence."""
    src = torch.full((2, 8), 9)
    cfg = SearchConfig(strategy="greedy", max_len_a=0, max_len_b=20, min_len=30)
    with caplog.at_level("WARNING", logger="nmt.decoding.search"):
        outputs = decode(Looping(eager_to_stop=True), src, BOS_ID, EOS_ID, cfg)
        decode(Looping(eager_to_stop=True), src, BOS_ID, EOS_ID, cfg)
    assert [len(out) for out in outputs] == [19, 19]
    warned = [r.getMessage() for r in caplog.records if "decode.min_len=30" in r.getMessage()]
    assert warned == ["decode.min_len=30 is more than the 19 tokens some outputs may have (decode.max_len_a=0 x "
                      "source length + max_len_b=20): those end at their limit, shorter than min_len"]  # fmt: skip


def test_a_long_document_is_shown_shortened_in_the_sample_table():
    """A summariser's sample table printed each whole document (screens of text) beside its one-line summary."""
    from nmt.tasks.translation_eval import _shortened

    document = " ".join(f"w{i}" for i in range(300))
    assert _shortened(document) == " ".join(f"w{i}" for i in range(80)) + " ... (300 words in all)"
    assert _shortened("a short sentence .") == "a short sentence ."
    assert _shortened("字" * 500) == "字" * 400 + " ... (500 characters in all)"  # no spaces to count words by
