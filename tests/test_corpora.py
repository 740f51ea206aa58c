"""Every corpus module on small generated files shaped exactly like its source."""

import gzip
import io
import json
import math
import os
import random
import re
import shutil
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nmt.data.europarl import EuroparlDataModule
from nmt.data.files import FilesDataModule
from nmt.data.news_commentary import NewsCommentaryDataModule
from nmt.data.report import render_report
from nmt.data.sources import DataNotFoundError
from nmt.data.splits import pool_drops, seeded_split
from nmt.data.tatoeba import TatoebaDataModule
from nmt.data.toy import toy_pairs
from nmt.data.zh_en import ZhEnDataModule
from nmt.evaluation.evaluate import evaluate
from nmt.training.config import check_config
from nmt.training.run_folder import RunFolderError
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, compose_train
from .test_end_to_end import run

EN, DE = toy_pairs(400, seed=7)
ZH = ["我爱你。", "今天天气很好。", "他们在北京工作。", "这是一本书。", "你好吗？", "我们去学校吧。"] * 60
ZH_EN = [
    "I love you.",
    "The weather is nice today.",
    "They work in Beijing.",
    "This is a book.",
    "How are you?",
    "Let's go to school.",
] * 60
ZH_EN = [f"{s} ({i})" for i, s in enumerate(ZH_EN)]  # distinct sentences
ZH = [f"{s[:-1]}{i}{s[-1]}" for i, s in enumerate(ZH)]  # (a split keeps the translations of one sentence together)
# a pronouncing dictionary of 400 made-up words, each letter one phoneme
CMUDICT = sorted({"".join(random.Random(i).choices("abdeklmnost", k=3 + i % 5)) for i in range(450)})[:400]
PHONE = dict(zip("abdeklmnost", "AE1 B D EH0 K L M N OW1 S T".split(), strict=True))
CMUDICT = [f"{word} {' '.join(PHONE[c] for c in word)}" for word in CMUDICT]


def write(path: Path, lines, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)


def small(cls, **kwargs):
    kwargs.setdefault("tokenizer", {"vocab_size": 80, "byte_fallback": False})
    kwargs.setdefault("download", False)
    return cls(valid_size=30, test_size=30, max_tokens=600, **kwargs)


def test_seeded_split_is_deterministic_deduplicated_and_leak_free():
    src = [f"s{i % 150}" for i in range(400)]  # repeated sources, some with different targets
    tgt = [f"t{i % 170}" for i in range(400)]
    a, b = seeded_split(src, tgt, 20, 20, seed=3), seeded_split(src, tgt, 20, 20, seed=3)
    assert a == b and a != seeded_split(src, tgt, 20, 20, seed=4)
    for side in (0, 1):  # no source and no reference in two splits
        sets = {name: set(pairs[side]) for name, pairs in a.items()}
        assert not (sets["train"] & sets["val"] or sets["train"] & sets["test"] or sets["val"] & sets["test"])
    all_pairs = [p for name in a for p in zip(*a[name], strict=True)]
    assert len(all_pairs) == len(set(all_pairs)) == len(set(zip(src, tgt, strict=True)))


def test_a_sentences_translations_stay_in_one_split_and_both_directions_split_alike():
    """Several translations of one sentence (Tatoeba's du/Sie/ihr, one English line for both Chinese
    scripts): grouped through shared sources and shared targets, so a test reference is never a training
    target; the split of en->de is the split of de->en mirrored; sizes are the ones asked for."""
    family = [("Ich liebe dich.", "I love you."), ("Ich liebe Sie.", "I love you."), ("Ich liebe euch.", "I love you.")]
    family += [("Ich liebe dich.", "I love thee."), ("Ich hab dich lieb.", "I love thee.")]  # linked through others
    de = [d for d, _ in family] + [f"{d} ({i})" for i, d in enumerate(DE)]
    en = [e for _, e in family] + [f"{e} ({i})" for i, e in enumerate(EN)]
    for seed in range(1, 9):
        forward, backward = seeded_split(de, en, 30, 30, seed=seed), seeded_split(en, de, 30, 30, seed=seed)
        assert all(forward[name] == backward[name][::-1] for name in forward), seed
        assert [len(forward[name][0]) for name in ("val", "test")] == [30, 30]
        where = {name for name, (src, _) in forward.items() for d, _ in family if d in src}
        assert len(where) == 1, (seed, where)  # the five pairs of the family together
        for side in (0, 1):
            seen = {name: set(forward[name][side]) for name in forward}
            assert not (seen["train"] & seen["val"] or seen["train"] & seen["test"] or seen["val"] & seen["test"])
    # a group larger than a split's size goes on to training, and the sizes stay exact
    big = [("Hallo.", f"Hello {i}.") for i in range(40)]
    splits = seeded_split([d for d, _ in big] + de, [e for _, e in big] + en, 30, 30, seed=1)
    assert "Hallo." in splits["train"][0] and [len(splits[n][0]) for n in ("val", "test")] == [30, 30]


@pytest.mark.parametrize("normalization", ["lowercase", "nfkc_cf", "nmt_nfkc"])
def test_sentences_a_normalising_tokenizer_reads_alike_go_to_one_split(tmp_path, normalization):
    """Under a tokenizer that lowercases (or folds width and case), "A dog runs." and "a dog runs." are one
    sentence to the model: a split by the text as written let one be a training target and the other a test
    reference. They now join one group, copies as the model reads them are kept once, and the data report
    counts those copies; the reading is SentencePiece's own, as the trained tokenizer normalises."""
    from nmt.data.tokenizer import Tokenizer, TokenizerSettings, reading_form

    variants = [str.upper, str.lower, lambda t: " ".join(t.split()).replace(" ", "  "), lambda t: t]
    de, en = [], []
    for i, (d, e) in enumerate(zip(DE[:150], EN[:150], strict=True)):
        de.append(f"{d} ({i})")
        en.append(variants[i % 4](f"{e} ({i})") if i % 3 else f"{e} ({i})")  # a cased copy of a third's target
        if i % 3 == 0:
            de.append(f"{d} [{i}]")  # another source, its target the same sentence in other case
            en.append(f"{e} ({i})".upper() if normalization != "nmt_nfkc" else f"{e}  ({i})")
    reading = reading_form(normalization)
    settings = TokenizerSettings(vocab_size=200, byte_fallback=False, normalization=normalization)
    trained = Tokenizer.train(de + en, settings)
    for sentence in en[:40] + ["  Ａ  Dog\u00a0runs. "]:  # the split's reading is the tokenizer's normalisation
        assert reading([sentence]) == [trained.sp.normalize(sentence).replace("\u2581", " ").strip()]
    for seed in (1, 2, 3):
        splits = seeded_split(de, en, 30, 30, seed=seed, reading=reading)
        read = {name: set(reading(splits[name][1])) for name in splits}
        assert not (read["train"] & read["val"] or read["train"] & read["test"] or read["val"] & read["test"])
        as_written = seeded_split(de, en, 30, 30, seed=seed)  # the leak this closes, on the same pairs
        written = {name: set(reading(as_written[name][1])) for name in as_written}
        assert written["train"] & (written["val"] | written["test"]), seed
    # pairs that read alike on both sides are one pair (the first kept), as the data report counts them
    twice = [("Ein Hund.", "A dog."), ("ein hund.", "a dog."), ("Ein  Hund.", "A dog.")]
    lowered = reading_form("lowercase")
    assert pool_drops([d for d, _ in twice], [e for _, e in twice], lowered) == (0, 2)
    assert lowered(["Ein\tHund."]) == lowered(["ein hund."])  # a tab reads as a space, as the model encodes it
    assert pool_drops([d for d, _ in twice], [e for _, e in twice]) == (0, 0)
    folder = tmp_path / "files"
    write(folder / "train.de", [d for d, _ in twice] + de)
    write(folder / "train.en", [e for _, e in twice] + en)
    dm = FilesDataModule(
        train=str(folder / "train"),
        src_lang="de",
        tgt_lang="en",
        valid_size=30,
        test_size=30,
        max_tokens=600,
        tokenizer={"vocab_size": 200, "byte_fallback": False, "normalization": normalization},
        cache_dir=str(tmp_path / "c"),
    )
    texts = {name: dm.text(name)[1] for name in ("train", "val", "test")}
    read = {name: set(reading(lines)) for name, lines in texts.items()}
    assert not (read["train"] & read["val"] or read["train"] & read["test"] or read["val"] & read["test"])
    copies = pool_drops([d for d, _ in twice] + de, [e for _, e in twice] + en, reading)[1]
    assert dm.dropped["train"]["duplicate"] == copies >= 1 and sum(map(len, texts.values())) == len(de) + 3 - copies


def test_sentences_that_differ_in_spaces_alone_go_to_one_split_and_are_counted_as_seen(tmp_path):
    """Under the identity tokenizer, "a  dog. " and "a dog." encode to the same tokens: a split by the text as
    written let one be a training pair and the other a test pair (a quarter of a test set in a user's
    corpus), and the data report counted none of them. A corpus without such variants splits as before."""
    from nmt.data.tokenizer import Tokenizer, TokenizerSettings, reading_form

    reading = reading_form("identity")
    spaced = [f"{d.replace(' ', '  ', 1)} " for d in DE[:80]]  # a space doubled, one trailing
    trained = Tokenizer.train(DE[:200] + EN[:200], TokenizerSettings(vocab_size=200, byte_fallback=False))
    for sentence in spaced[:20] + ["Ein Hund."]:  # as the tokenizer reads it
        assert reading([sentence]) == [trained.sp.normalize(sentence).replace("\u2581", " ").strip()]
    for sentence in spaced[:20] + ["a\tdog  runs .", "Ein Hund."]:  # a tab: the tokenizer reads it as a space
        assert trained.encode(sentence) == trained.encode(reading([sentence])[0])
    de, en = DE[:200] + spaced, EN[:200] + [f"{e} " for e in EN[:80]]
    leaked = 0
    for seed in (1, 2, 3):
        splits = seeded_split(de, en, 40, 40, seed=seed, reading=reading)
        read = {name: set(reading(splits[name][0])) for name in splits}
        assert not (read["train"] & read["val"] or read["train"] & read["test"] or read["val"] & read["test"])
        as_written = seeded_split(de, en, 40, 40, seed=seed)  # the leak this closes
        written = {name: set(reading(as_written[name][0])) for name in as_written}
        leaked += len(written["train"] & (written["val"] | written["test"]))
    assert leaked > 0
    for seed in (1, 2):  # no variants: the split of every corpus read so far
        assert seeded_split(DE[:300], EN[:300], 40, 40, seed=seed, reading=reading) == seeded_split(
            DE[:300], EN[:300], 40, 40, seed=seed
        )
    # given test files holding training pairs with other spaces: the data report counts them
    write(tmp_path / "train.de", DE[:300])
    write(tmp_path / "train.en", EN[:300])
    write(tmp_path / "test.de", spaced[:25] + DE[300:325])
    write(tmp_path / "test.en", [f"  {e}" for e in EN[:25]] + EN[300:325])
    dm = FilesDataModule(
        train=str(tmp_path / "train"),
        val=str(tmp_path / "test"),
        test=str(tmp_path / "test"),
        src_lang="de",
        tgt_lang="en",
        max_tokens=600,
        tokenizer={"vocab_size": 200, "byte_fallback": False},
        cache_dir=str(tmp_path / "c"),
    )
    dm.prepare_data()
    dm.setup()
    report = dm.report()["test"]
    assert (report["sources_also_in_train"], report["targets_also_in_train"]) == (25, 25)


def test_a_set_scored_later_counts_training_sentences_as_the_model_reads_them(tmp_path):
    """The run folder's training hashes were of the text as written: a later set's "a  dog. " was not counted
    as the training "a dog.", though the data report now counts it. Hashes kept before say nothing else."""
    import numpy as np

    from nmt.data.overlap import FILE, save_training_sentences, shared_with_training

    save_training_sentences(tmp_path, DE[:50], EN[:50], "identity")
    later = [f"  {d.replace(' ', '   ')}" for d in DE[:10]] + DE[60:65]
    assert shared_with_training(tmp_path, later, [f"{e} " for e in EN[:7]] + EN[60:65]) == {
        "sources_also_in_train": 10,
        "targets_also_in_train": 7,
    }
    save_training_sentences(tmp_path, DE[:50], EN[:50], "lowercase")
    assert shared_with_training(tmp_path, [d.upper() for d in DE[:3]], EN[:2])["sources_also_in_train"] == 3
    save_training_sentences(tmp_path, DE[:50], EN[:50])  # as kept before: the text as written
    assert "normalization" not in np.load(tmp_path / FILE).files
    assert shared_with_training(tmp_path, later, EN[:2]) == {"sources_also_in_train": 0, "targets_also_in_train": 2}


def test_a_split_the_groups_cannot_fill_is_said_and_a_cap_too_small_for_them_named(capsys):
    """One reference with 500 translations and 30 other pairs: test takes the 30, validation none fits."""
    hub = [(f"Ja {i}.", "Yes.") for i in range(500)]
    single = [(f"Satz {i}.", f"Sentence {i}.") for i in range(30)]
    src, tgt = zip(*hub, *single, strict=True)
    splits = seeded_split(list(src), list(tgt), 50, 50, seed=1)
    assert [len(splits[n][0]) for n in ("test", "val", "train")] == [30, 0, 500]
    said = capsys.readouterr().out
    assert "warning: data.test_size=50: the test split holds 30 pairs;" in said and "the largest holds 500" in said
    assert "warning: data.valid_size=50: the val split holds 0 pairs;" in said
    with pytest.raises(
        ValueError, match=r"in groups sharing a sentence, the largest of 500\): lower .* raise data.max"
    ):
        seeded_split(list(src), list(tgt), 15, 15, seed=1, max_samples=100)


def test_pairs_with_an_empty_side_leave_the_pool_before_it_is_split(tmp_path):
    """A quarter of the German side empty (as in Europarl): each split still gets the pairs asked for (the
    empty ones, one group of one empty source, took the whole test share and left it 20 pairs), and the
    data report counts the corpus's empty pairs and copies."""
    de = ["" if i % 4 == 0 else line for i, line in enumerate(DE)]
    splits = seeded_split(de, EN, 30, 30, seed=4)
    assert [len(splits[name][0]) for name in ("val", "test")] == [30, 30]
    assert all(s.strip() and t.strip() for name in splits for s, t in zip(*splits[name], strict=True))
    folder = tmp_path / "ep"
    folder.mkdir()
    write(folder / "europarl-v7.de-en.de", de)
    write(folder / "europarl-v7.de-en.en", EN)
    dm = small(EuroparlDataModule, root=str(folder), cache_dir=str(tmp_path / "c"))
    sizes = {name: len(dm.text(name)[0]) for name in ("train", "val", "test")}
    assert sizes["val"] == 30 and sizes["test"] == 30
    empty, copies = pool_drops(de, EN)
    assert empty == 100 and dm.dropped["train"]["empty"] == 100
    unique = {(d, e) for d, e in zip(de, EN, strict=True) if d}
    assert dm.dropped["train"]["duplicate"] == copies == len(DE) - 100 - len(unique)
    assert sizes["train"] + sizes["val"] + sizes["test"] == len(DE) - 100 - copies
    # the same files gzipped (as Tatoeba's may be): read alike
    write(tmp_path / "gz" / "europarl-v7.de-en.de.gz", de, gz=True)
    write(tmp_path / "gz" / "europarl-v7.de-en.en.gz", EN, gz=True)
    write(tmp_path / "gz" / "europarl-v7.de-en.de", de)  # a plain copy of one side beside: the .gz pair is read
    zipped = small(EuroparlDataModule, root=str(tmp_path / "gz"), cache_dir=str(tmp_path / "c2"))
    assert all(zipped.text(name) == dm.text(name) for name in ("train", "val", "test"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"valid_size": 0}, r"data\.valid_size=0: the pairs a seeded split sets aside must be a number >= 1"),
        ({"test_size": -1}, r"data\.test_size=-1: .* a number >= 0 \(0: no test set, with test_after_training=false\)"),
        ({"valid_size": -5}, r"data\.valid_size=-5"),
        ({"max_samples": 50}, r"data\.max_samples=50 leaves no training pairs .* raise it above 60"),
        ({"max_samples": "abc"}, r"data\.max_samples='abc': must be a whole number of pairs, or null for every pair"),
        ({"max_samples": True}, r"data\.max_samples=True: must be a whole number"),
        ({"max_samples": 1.5}, r"data\.max_samples=1.5: must be a whole number"),
        ({"max_samples": 50.0}, r"data\.max_samples=50.0 leaves no training pairs"),  # 2e5 is a float: whole, taken
    ],
)
def test_split_sizes_that_leave_nothing_are_refused_at_once(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        EuroparlDataModule(cache_dir=str(tmp_path), **{"valid_size": 30, "test_size": 30, **settings})
    if "max_samples" not in settings:
        with pytest.raises(ValueError, match=message):
            small_files(tmp_path, train=str(tmp_path / "t.tsv"), **settings)
    small_files(
        tmp_path, train=str(tmp_path / "t.tsv"), val=str(tmp_path / "v.tsv"), test=str(tmp_path / "v.tsv"), test_size=0
    )


@pytest.mark.slow
def test_a_run_trained_from_prefixes_scores_a_tsv_by_the_columns_given(tmp_path):
    """evaluate.py split=files:x.tsv data.columns=[1,0] with a data=files run trained from prefixes: the
    columns reached the run's own data module, which refused them as reading no TSV."""
    write(tmp_path / "pool.en", EN)
    write(tmp_path / "pool.de", DE)
    write(tmp_path / "rev.tsv", [f"{d}\t{e}" for e, d in zip(EN[:6], DE[:6], strict=True)])
    settings = [f"data.train={tmp_path / 'pool'}", "data.src_lang=en", "data.tgt_lang=de", "data.valid_size=30"]
    settings += ["data.test_size=30", "data.max_tokens=800"]
    settings += ["data.tokenizer.vocab_size=80", "data.tokenizer.byte_fallback=false", "trainer.max_steps=2"]
    run_dir = tmp_path / "run"
    train(compose_train("data=files", *settings, f"run_dir={run_dir}", *NO_FINAL_SCORES))
    overrides = [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"split=files:{tmp_path / 'rev.tsv'}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[*overrides, "data.columns=[1,0]", f"out_dir={tmp_path / 'out'}"])
    result = evaluate(cfg)
    assert result["columns"] == [1, 0] and (tmp_path / "out" / "sources.txt").read_text().splitlines() == EN[:6]


def test_a_corpus_moved_is_the_same_data_and_an_edited_one_is_not(tmp_path, capsys):
    """The paths of a data=files run were part of its identity: the same files moved to another folder were
    refused as other settings (resume=force needed), where its text, compared once read, says what it is."""
    write(tmp_path / "a" / "pool.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    settings = ["data.valid_size=30", "data.test_size=30", "data.tokenizer.vocab_size=80", "data.max_tokens=800"]
    settings += ["data.tokenizer.byte_fallback=false", "trainer.max_steps=2", f"run_dir={tmp_path / 'run'}"]
    train(compose_train("data=files", f"data.train={tmp_path / 'a' / 'pool.tsv'}", *settings, *NO_FINAL_SCORES))
    (tmp_path / "a").rename(tmp_path / "b")
    moved = compose_train("data=files", f"data.train={tmp_path / 'b' / 'pool.tsv'}", *settings, *NO_FINAL_SCORES)
    capsys.readouterr()
    assert train(moved)["finished"] and "holds this run, finished" in capsys.readouterr().out
    # a folder recorded before text was compared: the paths it recorded decide
    record = json.loads((tmp_path / "run" / "fingerprint.json").read_text())
    old = {**record, "config": {**record["config"], "data.train": str(tmp_path / "a" / "pool.tsv")}}
    old["data"] = {k: v for k, v in record["data"].items() if k != "text"}
    (tmp_path / "run" / "fingerprint.json").write_text(json.dumps(old))
    with pytest.raises(
        RunFolderError, match=r"holds a run finished on other files \(data\.train: '.*/a/pool\.tsv' -> "
    ):
        train(moved)
    (tmp_path / "run" / "fingerprint.json").write_text(json.dumps(record))
    write(tmp_path / "b" / "pool.tsv", [f"{e}\t{d}" for e, d in zip(EN[1:], DE[1:], strict=True)])
    with pytest.raises(RunFolderError, match=r"holds a run finished on other text \(its .*train.* changed since\)"):
        train(moved)


@pytest.mark.slow
def test_a_seeded_split_without_a_test_set(tmp_path):
    """data.test_size=0: every pair not held out for validation trains; a run that would score a test set is
    refused before any data is read, and evaluating the missing split says what to score instead."""
    write(tmp_path / "pairs.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    settings = [f"data.train={tmp_path / 'pairs.tsv'}", "data.valid_size=30", "data.test_size=0"]
    settings += ["data.tokenizer.vocab_size=80", "data.tokenizer.byte_fallback=false", "data.max_tokens=800"]
    with pytest.raises(ValueError, match=r"data\.test_size=0 sets no test pairs aside, so test_after_training=true"):
        check_config(compose_train("data=files", *settings, "test_after_training=true"))
    run_dir = tmp_path / "run"
    train(compose_train("data=files", *settings, f"run_dir={run_dir}", *NO_FINAL_SCORES))
    report = json.loads((run_dir / "data_report.json").read_text())["splits"]
    assert report["val"]["pairs"] == 30 and report["test"]["pairs"] == 0
    assert report["train"]["pairs"] == len(set(zip(EN, DE, strict=True))) - 30
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        missing, val = (
            compose("evaluate", overrides=[f"ckpt_path={checkpoint}", f"split={split}", f"out_dir={tmp_path / split}"])
            for split in ("test", "val")
        )
    with pytest.raises(
        ValueError, match=r"split=test: .* has no test pairs; score another set: split=val, split=files:"
    ):
        evaluate(missing)
    assert evaluate(val)["sentences"] == 30
    # a decoding grid chooses on validation and prints the test command: with a placeholder for a test set
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        grid = compose(
            "evaluate",
            overrides=[f"ckpt_path={checkpoint}", "split=val", "decode.beam_size=[1,2]", f"out_dir={tmp_path / 'g'}"],
        )
    command = evaluate(grid)["test_command"]
    assert "'split=files\\:PREFIX'" in command and "split=test" not in command
    # the finished run is not reported again once its text was edited: it was, with the old results
    write(tmp_path / "pairs.tsv", [f"{e}\t{d} ." for e, d in zip(EN, DE, strict=True)])
    with pytest.raises(RunFolderError, match=r"holds a run finished on other text \(its .*train.* changed since\)"):
        train(compose_train("data=files", *settings, f"run_dir={run_dir}", *NO_FINAL_SCORES))


@pytest.mark.slow
def test_a_files_run_scored_from_another_folder_or_with_a_root_says_how_to_name_its_files(tmp_path, monkeypatch):
    """A data=files run keeps its paths as given: scored from another folder, a relative path is not found;
    the error says so and how to name the file (+data.test=PATH), which then scores. data.root, which such a
    corpus does not take, crashed on a TypeError; a prefix given with its language's ending is named."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, pairs in (("train", slice(0, 300)), ("dev", slice(300, 340)), ("test", slice(340, 380))):
        write(corpus / f"{split}.en", EN[pairs])
        write(corpus / f"{split}.de", DE[pairs])
    monkeypatch.chdir(tmp_path)
    settings = ["data.train=corpus/train", "data.val=corpus/dev", "data.test=corpus/test", "data.src_lang=en"]
    settings += ["data.tgt_lang=de", "data.tokenizer.vocab_size=80", "data.tokenizer.byte_fallback=false"]
    settings += ["data.max_tokens=800", "trainer.max_steps=2"]
    with pytest.raises(FileNotFoundError, match=r"data.train=corpus/train.en: a prefix, to which .en and .de are "
                       r"added: data.train=corpus/train, or both"):  # fmt: skip
        train(compose_train("data=files", *settings[1:], "data.train=corpus/train.en", *NO_FINAL_SCORES))
    # the languages forgotten (.src and .tgt looked for) beside files of two other endings: those are named
    unnamed = [s for s in settings if not s.startswith(("data.src_lang", "data.tgt_lang"))]
    with pytest.raises(FileNotFoundError, match=r"corpus/train.de and corpus/train.en are there: name their "
                       r"languages, e.g. data.src_lang=de data.tgt_lang=en"):  # fmt: skip
        train(compose_train("data=files", *unnamed, *NO_FINAL_SCORES))
    train(compose_train("data=files", *settings, f"run_dir={tmp_path / 'run'}", *NO_FINAL_SCORES))
    checkpoint = tmp_path / "run" / "checkpoints" / "last.ckpt"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def scored(*overrides: str):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            given = [f"ckpt_path={checkpoint}", f"out_dir={tmp_path / 'eval'}", "samples=0", *overrides]
            return evaluate(compose("evaluate", overrides=given))

    relative = rf"data.test=corpus/test; .* a relative path, read from the folder the command runs in \({elsewhere}\)"
    with pytest.raises(FileNotFoundError, match=rf"{relative}: .* \(evaluate.py: \+data.test=PATH\)"):
        scored()
    root = r"^data.root=.*: this run's corpus \(FilesDataModule\) takes no root \(its files are named by data.train"
    with pytest.raises(ValueError, match=rf"{root}, data.val and data.test: give .* \+data.<split>=PATH"):
        scored(f"data.root={tmp_path}")
    # a set looked for beside it: the error advised data.root, which the line above then refused
    monkeypatch.delenv("NMT_DATA", raising=False)
    with pytest.raises(DataNotFoundError, match=r"Fix: set the environment variable NMT_DATA to a folder containing "
                       r"'iwslt16_de_en_devtest/' holding .* \(this run's corpus takes no data.root\)\.$"):  # fmt: skip
        scored("split=iwslt16:tst2014")
    assert scored(f"+data.test={corpus / 'test'}")["sentences"] == 40
    # other files given as the run's test set: refused, naming what happens to such a corpus (no data.root,
    # $NMT_DATA or cache to find another copy in); a run whose test set was split off its training files had
    # none to give, and is told to score other files as such
    with pytest.raises(ValueError, match=r"its files changed, or other files were given, or .*; give the run's "):
        scored(f"+data.test={corpus / 'dev'}")
    split_off = [s for s in settings if not s.startswith(("data.val", "data.test"))]
    split_off += ["data.valid_size=30", "data.test_size=30", f"run_dir={tmp_path / 'split'}"]
    monkeypatch.chdir(tmp_path)
    train(compose_train("data=files", *split_off, *NO_FINAL_SCORES))
    checkpoint = tmp_path / "split" / "checkpoints" / "last.ckpt"
    with pytest.raises(ValueError, match=r"this run's test set was split off its training files \(it had no test "):
        scored(f"+data.test={corpus / 'test'}")


def test_evaluation_data_options_apply_where_the_corpus_takes_them_and_are_refused_in_one_line_elsewhere():
    """data.root on a corpus without one (files, toy) and data.columns on a language model were TypeErrors
    from the corpus module; any other option of the data modules (max_src_len, batches_on_device) applies to
    every corpus, saved in its config or not; a grid's test command adds with + what evaluate.py does not list.
    Others (data.tgt_lang) scored under settings the run did not have, into the folder of its own scores."""
    from types import SimpleNamespace

    from nmt.evaluation.grid import test_command
    from nmt.tasks.base import evaluation_data_config

    def data(config: dict, elsewhere=(), **given):
        return evaluation_data_config(SimpleNamespace(config={"data": config}), given, elsewhere)

    multi30k = {"_target_": "nmt.data.multi30k.Multi30kDataModule", "root": None}
    assert data(multi30k, root="/corpora", max_src_len=400, batches_on_device=False, eval_stride=None) == {
        **multi30k,
        "root": "/corpora",
        "max_src_len": 400,
        "batches_on_device": False,
    }
    files = {"_target_": "nmt.data.files.FilesDataModule", "train": "a", "val": None, "test": "b"}
    with pytest.raises(ValueError, match=r"^data.root=/x: this run's corpus \(FilesDataModule\) takes no root \(its"):
        data(files, root="/x")
    with pytest.raises(ValueError, match=r"^data.root=/x: this run's corpus \(ToyDataModule\) takes no root$"):
        data({"_target_": "nmt.data.toy.ToyDataModule"}, root="/x")
    ptb = {"_target_": "nmt.data.ptb.PTBDataModule", "root": None}
    with pytest.raises(ValueError, match=r"^data.columns=\[1, 0\]: this run's corpus \(PTBDataModule\) takes no"):
        data(ptb, columns=[1, 0])
    assert data(files, elsewhere=("columns",), columns=[1, 0]) == files  # read by split=files:x.tsv instead
    # options that would score under settings the run did not have, in the folder of the run's own scores
    for key, value in (("tgt_lang", "zh"), ("test_set", "test_2017_flickr"), ("lowercase", True)):
        with pytest.raises(ValueError, match=rf"^data.{key}={value}: an evaluation scores with the run's own data"):
            data(multi30k, **{key: value})
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        grid = compose("evaluate", overrides=["ckpt_path=c.ckpt", "+data.test=/new/test", "data.root=/r"])
    command = test_command(grid, {"decode.beam_size": 2}, "beam")
    assert " +data.test=/new/test " in command and " data.root=/r " in command


def test_tatoeba_de_en_refuses_other_languages_and_sends_chinese_to_its_own_module(tmp_path):
    """data=tatoeba_de_en data.tgt_lang=zh trained Chinese without jieba and scored it as any text."""
    with pytest.raises(ValueError, match=r"Tatoeba Chinese-English is data=zh_en .* segments Chinese with jieba"):
        small(TatoebaDataModule, src_lang="en", tgt_lang="zh", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"reads Tatoeba's German-English pairs .*got data.src_lang='fr'"):
        small(TatoebaDataModule, src_lang="fr", tgt_lang="en", cache_dir=str(tmp_path))


def test_tatoeba_reads_a_manythings_file(tmp_path):
    write(tmp_path / "deu.txt", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)] + ["\t", "Hi.\tHallo!"])
    dm = small(TatoebaDataModule, root=str(tmp_path), src_lang="de", tgt_lang="en", cache_dir=str(tmp_path / "c"))
    src, tgt = dm.text("train")
    assert len(dm.text("val")[0]) >= 30 and src[0] in DE + ["Hallo!"]
    assert (
        sum(len(dm.text(split)[0]) + dm.dropped[split]["empty"] for split in ("train", "val", "test"))
        == len(set(zip(EN, DE, strict=True))) + 2
    )
    assert sum(dm.dropped[split]["empty"] for split in ("train", "val", "test")) == 1  # the blank pair


def test_tatoeba_cmn_with_attribution_and_jieba(tmp_path):
    rows = [
        f"{e}\t{z}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{i}"
        for i, (e, z) in enumerate(zip(ZH_EN, ZH, strict=True))
    ]
    write(tmp_path / "cmn.txt.gz", rows, gz=True)
    dm = small(
        ZhEnDataModule, source="tatoeba", root=str(tmp_path), segmenter={"zh": "jieba"}, cache_dir=str(tmp_path / "c")
    )
    src_tok, _ = dm.build_tokenizers()
    assert dm.src_lang == "zh" and dm.text("train")[0][0] in ZH
    assert src_tok.decode(src_tok.encode("今天天气很好。")) == "今天天气很好。"  # segmentation undone
    # built alone, as the config builds it: jieba unless told otherwise (its docstring's default)
    alone = small(ZhEnDataModule, source="tatoeba", root=str(tmp_path), cache_dir=str(tmp_path / "c"))
    assert alone.segmenters["zh"].name == "jieba" and alone.segmenters["en"].name == "none"


def test_jieba_segmentation_changes_the_tokenizer_cache_key(tmp_path, monkeypatch):
    from nmt.data import tokenizer

    write(tmp_path / "cmn.txt", [f"{e}\t{z}" for e, z in zip(ZH_EN, ZH, strict=True)])
    for segmenter in ("jieba", "none"):
        small(
            ZhEnDataModule,
            root=str(tmp_path),
            segmenter={"zh": segmenter},
            cache_dir=str(tmp_path / "c"),
            tokenizer={"vocab_size": 80, "joint": True, "byte_fallback": False},
        ).build_tokenizers()
    names = sorted(p.name for p in (tmp_path / "c" / "tokenizers").glob("*.model"))
    assert len(names) == 2 and any("jieba" in n for n in names) and any("-none-none-" in n for n in names)
    # a model for each side: the English one, its text unchanged, is not trained again for another segmenter
    # of the Chinese side, nor for the other direction
    trained = []
    real = tokenizer.Tokenizer.train
    monkeypatch.setattr(tokenizer.Tokenizer, "train", lambda *a, **k: trained.append(1) or real(*a, **k))
    for segmenter, src_lang, tgt_lang in (("jieba", "zh", "en"), ("none", "zh", "en"), ("jieba", "en", "zh")):
        small(
            ZhEnDataModule,
            root=str(tmp_path),
            segmenter={"zh": segmenter},
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            cache_dir=str(tmp_path / "separate"),
            tokenizer={"vocab_size": 80, "joint": False, "byte_fallback": False},
        ).build_tokenizers()
    names = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "separate" / "tokenizers").glob("*.model"))
    assert names == ["zh_en-en-none", "zh_en-zh-jieba", "zh_en-zh-none"] and len(trained) == 3


def test_ted_folder_of_line_aligned_sets(tmp_path, caplog):
    import logging

    for given in ("teds", "TED"):
        with pytest.raises(ValueError, match=rf"data.source='{given}' is not one of \[.*\] \(did you mean ted\?\)"):
            small(ZhEnDataModule, source=given, cache_dir=str(tmp_path / "c"))

    write(tmp_path / "valid.en", ZH_EN[:200])
    write(tmp_path / "valid.zh", ZH[:200])
    write(tmp_path / "test.en.gz", ZH_EN[200:], gz=True)
    write(tmp_path / "test.zh.gz", ZH[200:], gz=True)
    dm = small(
        ZhEnDataModule, source="ted", root=str(tmp_path), src_lang="en", tgt_lang="zh", cache_dir=str(tmp_path / "c")
    )
    with caplog.at_level(logging.INFO, logger="nmt.data.sources"):
        total = sum(len(dm.text(s)[0]) for s in ("train", "val", "test"))
    assert total == len(set(zip(ZH_EN, ZH, strict=True)))
    # the folder read is said into the run's log, as every other corpus's is
    assert f"ted_en_zh: reading {tmp_path} (data.root)" in [r.getMessage() for r in caplog.records]
    # IWSLT's names hold ".en" before the language suffix: its Chinese side is the suffix's, not train.tags.zh-zh
    from nmt.data.zh_en import read_ted_folder

    iwslt = tmp_path / "iwslt"
    write(iwslt / "train.tags.en-zh.en.gz", ZH_EN[:50], gz=True)
    write(iwslt / "train.tags.en-zh.zh.gz", ZH[:50], gz=True)
    assert read_ted_folder(iwslt) == (ZH_EN[:50], ZH[:50])


def test_ted_folder_drops_iwslt_metadata_lines_and_refuses_what_it_cannot_pair(tmp_path, caplog):
    """A researcher's IWSLT train.tags files: each talk's <url> and <talkid> lines, the same on both sides,
    were read as sentence pairs (copies in every split); a set given both plain and gzipped was read twice,
    a hidden ._valid.en stopped the run with a message of no use, and XML sets were passed over unsaid."""
    import logging

    from nmt.data.zh_en import read_ted_folder

    en = [
        "<url>http://www.ted.com/talks/a</url>",
        '<doc docid="1" genre="lectures">',
        "<talkid>1</talkid>",
        "<keywords>talks, science</keywords>",
        '<reviewer href="x">A B</reviewer>',
        "<event>TED2009</event>",  # a tag not listed: kept, and said
        "<title>A talk</title>",
        "<description>TED Talk Subtitles: about a</description>",
        *ZH_EN[:5],
        "<i>Titanic</i> was a film.",  # a sentence that begins with markup is a sentence, not metadata
        "</doc>",
    ]
    zh = [
        "<url>http://www.ted.com/talks/a</url>",
        '<doc docid="1" genre="lectures">',
        "<talkid>1</talkid>",
        "<keywords>演讲, 科学</keywords>",
        '<reviewer href="x">C D</reviewer>',
        "<event>TED2009</event>",
        "<title>一个演讲</title>",
        "<description>TED演讲字幕: 关于a</description>",
        *ZH[:5],
        "<i>泰坦尼克号</i>是一部电影。",
        "</doc>",
    ]
    iwslt = tmp_path / "iwslt"
    write(iwslt / "train.tags.en-zh.en", en)
    write(iwslt / "train.tags.en-zh.zh", zh)
    write(iwslt / "IWSLT17.TED.dev2010.en-zh.en.xml", ['<seg id="1"> Hi </seg>'])
    with caplog.at_level(logging.INFO, logger="nmt.data.zh_en"):
        english, chinese = read_ted_folder(iwslt)
    # the translated title and description are kept without their tags, as IWSLT's preparation keeps them
    assert english == [
        "<event>TED2009</event>",
        "A talk",
        "TED Talk Subtitles: about a",
        *ZH_EN[:5],
        "<i>Titanic</i> was a film.",
    ]
    assert chinese == [
        "<event>TED2009</event>",
        "一个演讲",
        "TED演讲字幕: 关于a",
        *ZH[:5],
        "<i>泰坦尼克号</i>是一部电影。",
    ]
    said = [r.getMessage() for r in caplog.records]
    assert "ted_en_zh: train.tags.en-zh.en: 6 metadata lines of IWSLT's markup dropped" in said
    assert any("lines of markup alone (<event>) kept as sentences: not IWSLT metadata known here" in m for m in said)
    assert any("1 XML file(s) not read (IWSLT17.TED.dev2010.en-zh.en.xml)" in m for m in said)
    # a file of other names than train.tags keeps every line: a sentence is not taken for markup there
    write(tmp_path / "plain" / "valid.en", ["<b>bold</b>", *ZH_EN[:2]])
    write(tmp_path / "plain" / "valid.zh", ["<b>粗</b>", *ZH[:2]])
    assert read_ted_folder(tmp_path / "plain") == (["<b>bold</b>", *ZH_EN[:2]], ["<b>粗</b>", *ZH[:2]])
    # markup on one side only: the files are not aligned, said by line
    write(iwslt / "train.tags.en-zh.zh", ["<url>http://www.ted.com/talks/a</url>", "你好", *zh[2:]])
    with pytest.raises(
        ValueError, match=r"train.tags.en-zh.en:2: '<doc docid=\"1\" genre=\"lectures\">' against '你好'"
    ):
        read_ted_folder(iwslt)
    # a researcher's trial: a Tatoeba folder (cmn.txt split into cmn-eng.en.gz / .zh.gz) trained as TED, unsaid
    tatoeba = tmp_path / "tatoeba_cmn_eng"
    write(tatoeba / "cmn-eng.en.gz", ZH_EN[:3], gz=True)
    write(tatoeba / "cmn-eng.zh.gz", ZH[:3], gz=True)
    dm = small(ZhEnDataModule, source="ted", root=str(tatoeba), cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataNotFoundError, match=r"data.root=.*tatoeba_cmn_eng: cmn-eng.en.gz would be read as TED "
                       r"sets, and are Tatoeba's .*: give data.source=tatoeba for Tatoeba"):  # fmt: skip
        dm.text("train")
    # a hidden copy is no set; one set plain and gzipped is refused, naming both
    other = tmp_path / "other"
    write(other / "valid.en", ZH_EN[:3])
    write(other / "valid.zh", ZH[:3])
    write(other / "._valid.en", ["junk"])
    assert read_ted_folder(other) == (ZH_EN[:3], ZH[:3])
    # a folder kept for every source (a News Commentary TSV beside TED's sets) is read as TED, as it was
    write(other / "news-commentary-v16.en-zh.tsv.gz", ["a\tb"], gz=True)
    assert read_ted_folder(other) == (ZH_EN[:3], ZH[:3])
    write(other / "valid.en.gz", ZH_EN[:3], gz=True)
    write(other / "valid.zh.gz", ZH[:3], gz=True)
    with pytest.raises(ValueError, match=r"valid.en also given gzipped \(valid.en.gz\): keep one of each set"):
        read_ted_folder(other)


def test_missing_ted_sets_and_tatoeba_file_name_the_places_tried_and_the_file(tmp_path, monkeypatch):
    from nmt.data import sources

    monkeypatch.setenv("NMT_DATA", str(tmp_path / "data"))
    (tmp_path / "empty").mkdir()
    dm = small(ZhEnDataModule, source="ted", root=str(tmp_path / "empty"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(sources.DataNotFoundError) as err:
        dm.text("train")
    # a root given without the sets: that root named, never $NMT_DATA's copy read instead
    assert str(err.value).startswith(f"data.root={tmp_path / 'empty'}: no <name>.en or <name>.en.gz file: give a")
    # other names (talks.en.txt) were taken for sets and read as none: "nothing left for training, of 0 pairs"
    write(tmp_path / "odd" / "talks.en.txt", ZH_EN[:80])
    write(tmp_path / "odd" / "talks.zh.txt", ZH[:80])
    with pytest.raises(sources.DataNotFoundError, match=r"odd: no <name>.en or <name>.en.gz file \(talks.en.txt named"):
        small(ZhEnDataModule, source="ted", root=str(tmp_path / "odd"), cache_dir=str(tmp_path / "c")).text("train")
    (tmp_path / "data" / "ted_en_zh").mkdir(parents=True)
    write(tmp_path / "data" / "ted_en_zh" / "a.en", ZH_EN[:80])
    write(tmp_path / "data" / "ted_en_zh" / "a.zh", ZH[:80])
    with pytest.raises(sources.DataNotFoundError, match=r"^data.root=.*empty: no <name>.en or <name>.en.gz file"):
        small(ZhEnDataModule, source="ted", root=str(tmp_path / "empty"), cache_dir=str(tmp_path / "c")).text("train")
    dm = small(ZhEnDataModule, source="ted", cache_dir=str(tmp_path / "c"))  # no root: $NMT_DATA's
    assert len(dm.text("train")[0]) == 80 - 60
    shutil.rmtree(tmp_path / "data")
    with pytest.raises(sources.DataNotFoundError) as err:
        small(ZhEnDataModule, source="ted", cache_dir=str(tmp_path / "c")).text("train")
    assert f"$NMT_DATA/ted_en_zh: {tmp_path / 'data' / 'ted_en_zh'} (no such folder)" in str(err.value)
    # offline, the Tatoeba message names the text file too, not only the zip it would download
    monkeypatch.setattr(sources, "_download", lambda url, target: (_ for _ in ()).throw(OSError("offline")))
    dm = small(TatoebaDataModule, src_lang="de", tgt_lang="en", download=True, cache_dir=str(tmp_path / "c"))
    with pytest.raises(sources.DataNotFoundError, match=r"holding deu\.txt, or the release archive deu-eng\.zip"):
        dm.text("train")


def europarl_archive(path: Path) -> None:
    """A tiny copy of statmt.org's de-en.tgz layout: the two text files at the archive's top level."""
    with tarfile.open(path, "w:gz") as bundle:
        for lang, lines in (("de", DE), ("en", EN)):
            data = "".join(line + "\n" for line in lines).encode()
            info = tarfile.TarInfo(f"europarl-v7.de-en.{lang}")
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))


def test_europarl_extracts_the_release_archive_into_the_cache(tmp_path):
    europarl_archive(tmp_path / "de-en.tgz")
    cache = tmp_path / "c"
    dm = small(EuroparlDataModule, root=str(tmp_path), cache_dir=str(cache), max_samples=300)
    src, tgt = dm.text("train")
    (extracted,) = (cache / "europarl" / "extracted").iterdir()
    assert (extracted / "europarl-v7.de-en.de").exists()
    assert len(src) + 60 <= 300 and src[0] in DE and tgt[0] in EN
    # the extracted files are found next time, even without the archive (and said to be those)
    (tmp_path / "de-en.tgz").unlink()
    again = small(EuroparlDataModule, root=None, cache_dir=str(cache), max_samples=300)
    assert again.text("train") == (src, tgt)


def test_an_archive_replaced_by_one_of_the_same_size_and_time_is_extracted_again(tmp_path):
    """The extraction is named by the archive's bytes: a new release copied over the old one with its size and
    time kept (cp -p, a same-second re-download) was read from the old extraction."""
    archive = tmp_path / "ep" / "de-en.tgz"
    archive.parent.mkdir()
    stats = []
    for word in ("eins", "zwei"):  # words of one length, stored uncompressed, members dated alike: one size
        with tarfile.open(archive, "w:gz", compresslevel=0) as bundle:
            for lang, text in (("de", [f"{line} {word}" for line in DE]), ("en", EN)):
                data = "".join(line + "\n" for line in text).encode()
                info = tarfile.TarInfo(f"europarl-v7.de-en.{lang}")
                info.size, info.mtime = len(data), 0
                bundle.addfile(info, io.BytesIO(data))
        if stats:  # the second archive given the first one's time
            os.utime(archive, ns=(stats[0].st_atime_ns, stats[0].st_mtime_ns))
        stats.append(archive.stat())
        dm = EuroparlDataModule(root=str(archive.parent), cache_dir=str(tmp_path / "c"), valid_size=30, test_size=30)
        assert dm.load_pairs()[0] == [f"{line} {word}" for line in DE]
    assert stats[0].st_size == stats[1].st_size and stats[0].st_mtime_ns == stats[1].st_mtime_ns
    # the archive deleted: its two extractions are one candidate, the newer (not "2 extractions of other archives")
    archive.unlink()
    dm = EuroparlDataModule(cache_dir=str(tmp_path / "c"), download=False, valid_size=30, test_size=30)
    assert dm.load_pairs()[0] == [f"{line} zwei" for line in DE]


def test_an_archive_given_is_read_not_the_extraction_of_another(tmp_path):
    """Two de-en.tgz in two folders given in turn as data.root: each run reads its own (the second read the
    first one's files, extracted into the cache before)."""
    for name, lines in (("one", DE), ("two", [f"{line} zwei" for line in DE])):
        (tmp_path / name).mkdir()
        with tarfile.open(tmp_path / name / "de-en.tgz", "w:gz") as bundle:
            for lang, text in (("de", lines), ("en", EN)):
                data = "".join(line + "\n" for line in text).encode()
                info = tarfile.TarInfo(f"europarl-v7.de-en.{lang}")
                info.size = len(data)
                bundle.addfile(info, io.BytesIO(data))
    cache = tmp_path / "c"
    read = {}
    for name in ("one", "two", "one"):
        dm = EuroparlDataModule(root=str(tmp_path / name), cache_dir=str(cache), valid_size=30, test_size=30)
        read.setdefault(name, []).append(dm.load_pairs()[0])  # German, the default source
    assert read["one"][0] == read["one"][1] == DE and read["two"][0] == [f"{line} zwei" for line in DE]
    assert len(list((cache / "europarl" / "extracted").iterdir())) == 2
    # with both archives gone, two extractions are two candidates: named, not chosen
    for name in ("one", "two"):
        (tmp_path / name / "de-en.tgz").unlink()
    with pytest.raises(FileNotFoundError, match="2 extractions of other archives"):
        EuroparlDataModule(cache_dir=str(cache), download=False).load_pairs()


def test_a_damaged_gzip_is_said_to_be_damaged_not_read_as_other_text(tmp_path):
    """One byte flipped inside a .tgz: tarfile read its members without reaching gzip's checksum at the end, and
    the run trained on the altered text (began -> bogan), unsaid; in a .gz, a byte that is no longer UTF-8 was
    blamed on the text's encoding."""
    folder = tmp_path / "ep"
    folder.mkdir()
    archive = folder / "de-en.tgz"
    with tarfile.open(archive, "w:gz", compresslevel=0) as bundle:  # stored: the text lies in the file as written
        for lang, lines in (("de", DE), ("en", EN)):
            data = "".join(line + "\n" for line in lines).encode()
            info = tarfile.TarInfo(f"europarl-v7.de-en.{lang}")
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    raw = bytearray(archive.read_bytes())
    at = raw.index(EN[3].encode())
    raw[at] = ord("Z") if raw[at] != ord("Z") else ord("Y")  # still text: only the checksum tells
    archive.write_bytes(bytes(raw))
    cache = tmp_path / "c"
    with pytest.raises(ValueError, match=rf"^{archive}: cannot be read as a compressed file .*: it is damaged or was"):
        EuroparlDataModule(root=str(folder), cache_dir=str(cache), valid_size=30, test_size=30).load_pairs()
    assert not any((cache / "europarl" / "extracted").glob("[!.]*"))  # nothing extracted into the cache
    # a .gz whose flipped byte is no longer UTF-8: damaged, not a text to re-encode
    released = write_news_commentary(tmp_path / "nc")
    path = released / "news-commentary-v16.de-en.tsv.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()), compresslevel=0))
    raw = bytearray(path.read_bytes())
    raw[raw.index(DE[3].encode())] = 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"^{path}: cannot be read as a compressed file .*it is damaged") as said:
        small(NewsCommentaryDataModule, root=str(released), cache_dir=str(tmp_path / "c2")).text("train")
    assert "UTF-8" not in str(said.value)


def test_europarl_lines_are_stripped_as_the_other_corpora_fields(tmp_path):
    """A sentence with a trailing space is the same sentence to the tokenizer: kept as written, such copies of
    test pairs trained (67 of 300 in a trial), while the data report counted no overlap."""
    folder = tmp_path / "ep"
    folder.mkdir()
    write(folder / "europarl-v7.de-en.de", [*DE, *(f" {line} " for line in DE[:100])])
    write(folder / "europarl-v7.de-en.en", [*EN, *(f"{line}  " for line in EN[:100])])
    dm = small(EuroparlDataModule, root=str(folder), cache_dir=str(tmp_path / "c"))
    splits = {name: set(zip(*dm.text(name), strict=True)) for name in ("train", "val", "test")}
    assert not splits["test"] & splits["train"] and not splits["val"] & splits["train"]
    assert all(s == s.strip() and t == t.strip() for pairs in splits.values() for s, t in pairs)
    assert dm.dropped["train"]["duplicate"] >= 100  # the copies, counted as copies


def test_europarl_without_data_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("NMT_DATA", raising=False)
    dm = small(EuroparlDataModule, cache_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="de-en.tgz"):
        dm.text("train")
    with pytest.raises(ValueError, match="de-en"):
        EuroparlDataModule(src_lang="de", tgt_lang="zh")


def write_news_commentary(folder: Path, extra=()) -> Path:
    """news-commentary-v16.de-en.tsv.gz as statmt.org publishes it: German<TAB>English, a lone tab between
    articles, and some lines with one side empty (a sentence the other language lacks)."""
    rows = []
    for i, (de, en) in enumerate(zip(DE, EN, strict=True)):
        if i % 50 == 0:
            rows.append("\t")  # an article's end
        rows.append(f"{de}\t" if i % 37 == 5 else f"\t{en}" if i % 41 == 7 else f"{de}\t{en}")
    write(folder / "news-commentary-v16.de-en.tsv.gz", [*rows, *extra], gz=True)
    return folder


def test_news_commentary_reads_the_published_tsv_in_either_direction(tmp_path):
    write_news_commentary(tmp_path / "nc")
    de_en = small(NewsCommentaryDataModule, root=str(tmp_path / "nc"), cache_dir=str(tmp_path / "c"))
    en_de = small(
        NewsCommentaryDataModule, root=str(tmp_path / "nc"), src_lang="en", tgt_lang="de", cache_dir=str(tmp_path / "c")
    )
    assert (de_en.src_lang, de_en.tgt_lang) == ("de", "en")  # the default direction
    sizes = {split: len(de_en.text(split)[0]) for split in ("train", "val", "test")}
    assert sizes["val"] == 30 and sizes["test"] == 30
    # German on the German side, whichever direction: the same split, mirrored
    for split in ("train", "val", "test"):
        src, tgt = de_en.text(split)
        assert en_de.text(split) == (tgt, src) and set(src) <= set(DE) and set(tgt) <= set(EN)
        assert all(s.strip() and t.strip() for s, t in zip(src, tgt, strict=True))
    # the lines with an empty side (8 article ends, 11 without English, 10 without German) in no split, counted
    one_side = [i % 37 == 5 or i % 41 == 7 for i in range(len(DE))]
    assert de_en.dropped["train"]["empty"] == sum(one_side) + 8 == 29
    pairs = [pair for pair, gone in zip(zip(DE, EN, strict=True), one_side, strict=True) if not gone]
    assert sum(sizes.values()) == len(set(pairs)) and de_en.dropped["train"]["duplicate"] == len(pairs) - len(
        set(pairs)
    )
    assert "news_commentary de-en (seeded split 1: 30 val / 30 test)" == de_en.describe()
    # a line that is not German<TAB>English (a tab inside a sentence, another file): refused by its number
    write_news_commentary(tmp_path / "bad", extra=["Ein\tSatz\tzu viel"])
    with pytest.raises(ValueError, match=r"line 409: expected 'de<TAB>en' \(2 tab-separated fields\), found 3"):
        small(NewsCommentaryDataModule, root=str(tmp_path / "bad"), cache_dir=str(tmp_path / "c")).text("train")


def test_news_commentary_without_its_file_says_where_it_looked_and_what_to_do(tmp_path, monkeypatch):
    from nmt.data import sources

    monkeypatch.delenv("NMT_DATA", raising=False)
    monkeypatch.setattr(sources, "_download", lambda url, target: (_ for _ in ()).throw(OSError("offline")))
    name = "news-commentary-v16.de-en.tsv.gz"
    # a root that does not exist, or holds something else: one line naming the key and file
    with pytest.raises(
        DataNotFoundError,
        match=r"^data.root=\S*nowhere does not exist: it should hold news-commentary-v16.de-en.tsv "
        r"\(or each with '.gz'\); give",
    ):
        small(NewsCommentaryDataModule, root=str(tmp_path / "nowhere"), cache_dir=str(tmp_path / "c")).text("train")
    with pytest.raises(DataNotFoundError, match=r"leave data.root out \(then \$NMT_DATA/news_commentary, the cache"):
        small(NewsCommentaryDataModule, root=str(tmp_path / "nowhere"), cache_dir=str(tmp_path / "c")).text("train")
    write(tmp_path / "other" / "news-commentary-v16.de-fr.tsv.gz", ["Hallo\tBonjour"], gz=True)
    with pytest.raises(DataNotFoundError, match=r"^data.root=\S*other holds none of these files: it should hold news"):
        small(NewsCommentaryDataModule, root=str(tmp_path / "other"), cache_dir=str(tmp_path / "c")).text("train")
    # the file decompressed (gunzip): read as the release (it was refused as missing)
    released = write_news_commentary(tmp_path / "released")
    unpacked = tmp_path / "unpacked" / "news-commentary-v16.de-en.tsv"
    unpacked.parent.mkdir()
    unpacked.write_bytes(gzip.decompress((released / name).read_bytes()))
    both = [small(NewsCommentaryDataModule, root=str(folder), cache_dir=str(tmp_path / "c")) for folder in
            (released, unpacked.parent)]  # fmt: skip
    assert both[0].text("test") == both[1].text("test") and len(both[1].text("test")[0]) == 30
    # no root: $NMT_DATA/news_commentary, the cache, the download tried, each said, and the fix
    monkeypatch.setenv("NMT_DATA", str(tmp_path / "data"))
    with pytest.raises(DataNotFoundError) as err:
        small(NewsCommentaryDataModule, download=True, cache_dir=str(tmp_path / "c")).text("train")
    message = str(err.value)
    assert message.startswith("Could not find the news_commentary corpus. Tried, in order:")
    missing = "missing news-commentary-v16.de-en.tsv, or each with '.gz'"
    assert f"$NMT_DATA/news_commentary: {tmp_path / 'data' / 'news_commentary'} ({missing})" in message
    assert "download from https://data.statmt.org/news-commentary/v16/training/: offline" in message
    assert (
        "Fix: set data.root=/path/to/folder (or the environment variable NMT_DATA to a folder containing "
        "'news_commentary/') holding news-commentary-v16.de-en.tsv (or each with '.gz'), or connect to the internet"
        in message
    )
    assert not (tmp_path / "c" / "news_commentary").exists()  # nothing left behind
    offline = small(NewsCommentaryDataModule, download=False, cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataNotFoundError, match=r"download: disabled \(data.download=false\)"):
        offline.text("train")
    # $NMT_DATA/news_commentary holding it: read from there
    write_news_commentary(tmp_path / "data" / "news_commentary")
    assert len(small(NewsCommentaryDataModule, download=False, cache_dir=str(tmp_path / "c")).text("val")[0]) == 30
    # a language named otherwise than by its two-letter code, or one language twice: refused when built
    with pytest.raises(ValueError, match=r"^data.tgt_lang='deu': News Commentary names its languages by two-letter"):
        NewsCommentaryDataModule(src_lang="en", tgt_lang="deu")
    with pytest.raises(ValueError, match=r"^data.src_lang and data.tgt_lang are both 'de': give two languages"):
        NewsCommentaryDataModule(src_lang="de", tgt_lang="de")


def test_news_commentary_downloaded_keeps_the_releases_compressed_name(tmp_path, monkeypatch):
    from nmt.data import sources

    monkeypatch.delenv("NMT_DATA", raising=False)
    released = write_news_commentary(tmp_path / "statmt") / "news-commentary-v16.de-en.tsv.gz"
    fetched = []

    def download(url, target):
        fetched.append((url, target))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(released.read_bytes())

    monkeypatch.setattr(sources, "_download", download)
    dm = small(NewsCommentaryDataModule, download=True, cache_dir=str(tmp_path / "c"))
    assert len(dm.text("val")[0]) == 30
    cached = tmp_path / "c" / "news_commentary" / released.name  # gzip bytes under a .gz name, as published
    assert fetched == [(f"https://data.statmt.org/news-commentary/v16/training/{released.name}", cached)]


def test_news_commentary_reads_any_pair_by_its_file_name_and_zh_en_reads_its_pair_alike(tmp_path):
    """The release names a pair's file by its codes in alphabetical order, the columns' order too: French-
    German is news-commentary-v16.de-fr.tsv.gz, German first, whichever direction is asked for."""
    write(
        tmp_path / "news-commentary-v16.de-fr.tsv.gz",
        [f"{d}\t{e.upper()}" for d, e in zip(DE, EN, strict=True)],
        gz=True,
    )
    fr_de = small(
        NewsCommentaryDataModule, root=str(tmp_path), src_lang="fr", tgt_lang="de", cache_dir=str(tmp_path / "c")
    )
    src, tgt = fr_de.text("train")
    assert set(src) <= {e.upper() for e in EN} and set(tgt) <= set(DE) and len(src) > 300
    # zh_en's news_commentary source: the en-zh file, English first
    write(tmp_path / "news-commentary-v16.en-zh.tsv.gz", [f"{e}\t{z}" for e, z in zip(ZH_EN, ZH, strict=True)], gz=True)
    zh_en = small(ZhEnDataModule, source="news_commentary", root=str(tmp_path), cache_dir=str(tmp_path / "c"))
    src, tgt = zh_en.text("train")
    assert set(src) <= set(ZH) and set(tgt) <= set(ZH_EN) and len(src) > 0


def test_files_module_reads_pairs_tsv_and_prefixes(tmp_path):
    write(tmp_path / "train.src", EN)
    write(tmp_path / "train.tgt", DE)
    write(tmp_path / "dev.tsv", [f"{e}\t{d}" for e, d in zip(EN[:20], DE[:20], strict=True)])
    write(tmp_path / "test.src.gz", EN[:10], gz=True)
    write(tmp_path / "test.tgt.gz", DE[:10], gz=True)
    dm = FilesDataModule(
        train=[str(tmp_path / "train.src"), str(tmp_path / "train.tgt")],
        val=str(tmp_path / "dev.tsv"),
        test=str(tmp_path / "test"),
        cache_dir=str(tmp_path / "c"),
    )
    assert dm.text("train") == (EN, DE)
    assert dm.text("val") == (EN[:20], DE[:20])
    assert dm.text("test") == (EN[:10], DE[:10])
    with pytest.raises(ValueError, match=r"dev\.tsv, line 1: 2 tab-separated fields, needs column 2"):
        FilesDataModule(
            train=str(tmp_path / "dev.tsv"),
            val=str(tmp_path / "dev.tsv"),
            test=str(tmp_path / "dev.tsv"),
            columns=[0, 2],
            cache_dir=str(tmp_path),
        ).text("val")


def test_a_corpus_of_one_s_own_on_files_is_named_by_its_data_name_not_files(tmp_path):
    """A conf/data/<name>.yaml built on data=files (or data=lm_files) was called "files" in the data report,
    the evaluation records and the cache files: two such corpora read alike. data.name names it."""
    from nmt.data.text_files import TextFilesDataModule

    write(tmp_path / "train.en", EN[:100])
    write(tmp_path / "train.de", DE[:100])
    given = {"train": str(tmp_path / "train"), "src_lang": "en", "tgt_lang": "de"}
    tiny = {"tokenizer": {"vocab_size": 80, "byte_fallback": False}, "valid_size": 20, "test_size": 20}
    given = {**given, **tiny}
    dm = FilesDataModule(name="iwslt_mine", cache_dir=str(tmp_path / "c"), **given)
    assert dm.describe().startswith("iwslt_mine en-de")
    dm.prepare_data()
    dm.setup()
    cached = sorted(p.name for p in (tmp_path / "c" / "encoded").iterdir())
    assert cached and all(name.startswith("iwslt_mine-") for name in cached)
    assert FilesDataModule(cache_dir=str(tmp_path / "c"), **given).describe().startswith("files en-de")
    for bad in ("a b", "../up"):
        with pytest.raises(ValueError, match=re.escape(f"data.name={bad!r}: a corpus's name")):
            FilesDataModule(name=bad, **given)
    # a built-in corpus's name (its conf/data file's, or its module's): records that read "multi30k" were one's
    # own; refused for training, while a checkpoint named so before is still read
    from nmt.training.config import ConfigError, check_config

    for taken, data in (("multi30k", "files"), ("tatoeba", "files"), ("ptb", "lm_files")):
        with pytest.raises(ConfigError, match=rf"data.name={taken}: the name of a corpus this project reads itself"):
            check_config(compose_train(f"data={data}", f"data.name={taken}", f"data.train={tmp_path / 'a'}"))
        FilesDataModule(name=taken, **given)
    check_config(compose_train("data=files", "data.name=mine", f"data.train={tmp_path / 'a'}"))
    write(tmp_path / "lm.txt", EN[:40])
    text = {split: str(tmp_path / "lm.txt") for split in ("train", "val", "test")}
    assert TextFilesDataModule(name="my_lm", **text).describe().startswith("my_lm (block")
    assert TextFilesDataModule(**text).describe().startswith("lm_files (block")
    cfg = compose_train("data=files", "data.name=mine", f"data.train={tmp_path / 'train'}", tiny=False)
    check_config(cfg)  # a key of the corpus's own


def test_a_prefix_of_two_files_old_mac_line_ends_and_most_pairs_too_long_are_said(tmp_path, caplog):
    """train.en beside train.en.gz: the plain one was read unsaid. A file whose lines end in CR alone read as
    one line ("line counts differ: 1 lines"). data.max_len dropping nearly every training pair was a number in
    the data report's table alone."""
    write(tmp_path / "train.en", [e.upper() for e in EN[:50]])
    write(tmp_path / "train.en.gz", EN[:50], gz=True)
    write(tmp_path / "train.de", DE[:50])
    with pytest.raises(ValueError, match=r"train: the prefix names both .*train\.en and .*train\.en\.gz; remove one"):
        FilesDataModule(train=str(tmp_path / "train"), src_lang="en", tgt_lang="de").text("train")
    (tmp_path / "mac.en").write_bytes("".join(f"{e}\r" for e in EN[:50]).encode())
    write(tmp_path / "mac.de", DE[:50])
    with pytest.raises(ValueError, match=r"mac\.en: its lines end in a carriage return alone"):
        FilesDataModule(train=str(tmp_path / "mac"), src_lang="en", tgt_lang="de").text("train")
    from nmt.data.text_io import decode_lines  # a stray CR amid line feeds is a space to the tokenizer: kept

    assert decode_lines([b"one\n", b"two \r\r three\n"], "f") == ["one", "two \r\r three"]
    with pytest.raises(ValueError, match=r"^f: its lines end in a carriage return alone"):
        decode_lines([b"a\rb\r"], "f")  # two lines, read as one sentence
    dm = FilesDataModule(
        train=str(tmp_path / "train.tsv"),
        max_len=8,
        valid_size=30,
        test_size=30,
        tokenizer={"vocab_size": 200, "byte_fallback": False},
        cache_dir=str(tmp_path / "c"),
    )
    write(tmp_path / "train.tsv", [f"{e}\t{d}" for e, d in zip(EN[:300], DE[:300], strict=True)])
    with caplog.at_level("WARNING"):
        dm.prepare_data()
        dm.setup()
        dm.report()
    said = [r.getMessage() for r in caplog.records if "data.max_len=8 drops" in r.getMessage()]
    assert len(said) == 1 and "raise data.max_len to keep them" in said[0]
    assert f"drops {dm.dropped['train']['too_long']} of the" in said[0]


def test_a_folder_given_as_a_file_and_a_download_turned_off_are_said_with_what_to_do(tmp_path, monkeypatch):
    """A folder where a split's file goes was "bad/dir.en: Is a directory" (data=files) or "no such file"
    (data=lm_files); data.download=false still advised connecting to the internet."""
    from nmt.data.multi30k import Multi30kDataModule
    from nmt.data.text_files import TextFilesDataModule

    (tmp_path / "dir.en").mkdir()
    write(tmp_path / "dir.de", DE[:5])
    with pytest.raises(ValueError, match=r"^data.train: .*dir.en is a folder; give a file of the split's sentences"):
        FilesDataModule(train=str(tmp_path / "dir"), src_lang="en", tgt_lang="de").text("train")
    write(tmp_path / "lm.txt", EN[:5])
    texts = {"train": str(tmp_path), "val": str(tmp_path / "lm.txt"), "test": str(tmp_path / "lm.txt")}
    with pytest.raises(IsADirectoryError, match=r"^data.train=.*: a folder; give a text file, one sentence a line"):
        TextFilesDataModule(**texts).text("train")
    monkeypatch.delenv("NMT_DATA", raising=False)
    with pytest.raises(DataNotFoundError, match=r"or let it be downloaded \(data.download=true, with internet\)\.$"):
        Multi30kDataModule(download=False, cache_dir=str(tmp_path / "c")).read_split("val")


def test_several_training_corpora_are_read_in_order_reported_and_checked_each_by_name(tmp_path):
    """data.train={name: files, ...}: each corpus in its own form (a prefix, a TSV with data.columns, a pair),
    their pairs one after the other; the data report gives each one's pairs as read; a missing file, a pair in
    the other order or a corpus without files is named by data.train.<name>. An evaluation set is one set."""
    write(tmp_path / "web.en", EN[:200])
    write(tmp_path / "web.de", DE[:200])
    write(tmp_path / "extra.tsv", [f"x\t{d}\t{e}" for e, d in zip(EN[200:300], DE[200:300], strict=True)])
    write(tmp_path / "more.en", EN[300:340])
    write(tmp_path / "more.de", DE[300:340])
    corpora = {"web": str(tmp_path / "web"), "extra": str(tmp_path / "extra.tsv")}
    corpora["more"] = [str(tmp_path / "more.en"), str(tmp_path / "more.de")]
    given = {"src_lang": "en", "tgt_lang": "de", "columns": [2, 1], "cache_dir": str(tmp_path / "c")}
    dm = FilesDataModule(train=corpora, val=str(tmp_path / "more"), test=str(tmp_path / "more"), **given)
    assert dm.text("train") == (EN[:340], DE[:340])
    assert dm.corpus_pairs == {"web": 200, "extra": 100, "more": 40}
    # without val and test: both cut from the pool of all of them, which the report counts as read
    dm = small_files(tmp_path, train=corpora, **{**given, "cache_dir": str(tmp_path / "d")})
    dm.prepare_data()
    split = [*dm.text("train")[0], *dm.text("val")[0], *dm.text("test")[0]]
    assert sorted(split) == sorted(set(EN[:340])) and len(dm.text("val")[0]) == len(dm.text("test")[0]) == 5
    assert dm.report()["train"]["corpora_read"] == {"web": 200, "extra": 100, "more": 40}
    assert "(read: web 200, extra 100, more 40)" in "".join(
        str(cell) for column in render_report(dm.report(), "t").columns for cell in column._cells
    )
    (tmp_path / "more.de").unlink()
    with pytest.raises(FileNotFoundError, match=r"data\.train\.more=\[.*more\.en', .*more\.de'\]"):
        small_files(tmp_path, train=corpora, **{**given, "cache_dir": str(tmp_path / "e")}).text("train")
    refused = {
        "data.train.more=['m.de', 'm.en']: the source file m.de is named for de": {"more": ["m.de", "m.en"]},
        "data.train.more=None: a corpus is [src_file, tgt_file], a .tsv file, or a file prefix": {"more": None},
        "data.train.more={'a': 'b'}: a corpus: ": {"more": {"a": "b"}},
        "data.train={}: no corpus named": {},
    }
    for message, train_spec in refused.items():
        with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
            FilesDataModule(train=train_spec, src_lang="en", tgt_lang="de")
    with pytest.raises(ValueError, match=r"^data.val=\{'a': 'v'\}: one set, scored whole: .* data.train alone"):
        FilesDataModule(train=corpora, val={"a": "v"})


def test_an_upsampled_corpus_repeats_its_training_pairs_after_the_split_and_is_checked_by_name(tmp_path):
    """data.upsample={name: N}: each training pair of that corpus N times where it stands (fairseq's
    --upsample-primary), a pair another corpus holds too once more from there, a pair with an empty side (which
    training drops) not at all; validation and test pairs are cut from the pool first, which keeps one copy of
    a shared pair, so that no repeat of a pair is also a test pair, and the copy kept takes the larger N. The
    data report says so. A name not of data.train, a count below 1 or not whole, and upsampling a data.train
    of one corpus are refused naming the key."""
    write(tmp_path / "web.en", EN[:200])
    write(tmp_path / "web.de", DE[:200])
    extra = [f"{e}\t{d}" for e, d in zip(EN[150:260], DE[150:260], strict=True)]  # 50 pairs as web's last
    write(tmp_path / "extra.tsv", [*extra, f"{EN[270]}\t "])  # and one with an empty side
    write(tmp_path / "dev.en", EN[300:340])
    write(tmp_path / "dev.de", DE[300:340])
    corpora = {"web": str(tmp_path / "web"), "extra": str(tmp_path / "extra.tsv")}
    given = {"src_lang": "en", "tgt_lang": "de", "train": corpora, "upsample": {"extra": 3, "web": 1}}
    dm = FilesDataModule(val=str(tmp_path / "dev"), test=str(tmp_path / "dev"), cache_dir=str(tmp_path / "c"), **given)
    assert dm.text("train") == (
        EN[:200] + [e for e in EN[150:260] for _ in range(3)],
        DE[:200] + [d for d in DE[150:260] for _ in range(3)],
    )
    assert dm.dropped["train"]["empty"] == 1  # read once, dropped once
    # the tokenizers learn from each pair once: the same models as from the corpora without upsample
    assert dm.tokenizer_text() == (EN[:200] + EN[150:260], DE[:200] + DE[150:260])
    tokenizers = {"tokenizer": {"vocab_size": 120, "byte_fallback": False}}
    plain = FilesDataModule(
        val=str(tmp_path / "dev"),
        test=str(tmp_path / "dev"),
        cache_dir=str(tmp_path / "p"),
        **tokenizers,
        **{**given, "upsample": None},
    )
    dm = FilesDataModule(
        val=str(tmp_path / "dev"), test=str(tmp_path / "dev"), cache_dir=str(tmp_path / "u"), **tokenizers, **given
    )
    for ours, theirs in zip(dm.build_tokenizers(), plain.build_tokenizers(), strict=True):
        assert ours.model_proto == theirs.model_proto
    dm = small_files(tmp_path, **given)
    dm.prepare_data()
    src, tgt = dm.text("train")
    held_out = set(dm.text("val")[0]) | set(dm.text("test")[0])
    upsampled = set(EN[150:260])
    assert all(src.count(e) == (3 if e in upsampled else 1) for e in set(src)) and not held_out & set(src)
    assert len(src) == 260 - len(held_out) + 2 * len(upsampled - held_out)
    report = dm.report()["train"]
    assert report["upsampled"] == {"extra": 3} and report["pairs"] == len(src)
    cells = "".join(str(cell) for column in render_report(dm.report(), "t").columns for cell in column._cells)
    assert "(read: web 200, extra 111 x3)" in cells
    refused = {
        "data.upsample.news: not a corpus of data.train (its corpora: web, extra)": {"news": 2},
        "data.upsample.extra=0: the times its pairs are read, a whole number >= 1": {"extra": 0},
        "data.upsample.extra=1.5: the times": {"extra": 1.5},
        "data.upsample=3: {corpus name: times, ...}": 3,
    }
    for message, upsample in refused.items():
        with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
            FilesDataModule(train=corpora, upsample=upsample)
    with pytest.raises(ValueError, match=r"^data.upsample=\{'a': 2\}: repeats corpora of data.train, which names one"):
        FilesDataModule(train=str(tmp_path / "web"), upsample={"a": 2})


def test_a_run_on_several_corpora_is_scored_with_a_moved_one_named_alone(tmp_path, monkeypatch):
    """evaluate.py's +data.train.<name>=PATH gives one moved corpus (the run's test set was cut from all of
    them), the others kept as the run had them; a name the run has not is refused, listing its names."""
    write(tmp_path / "a.en", EN[:250])
    write(tmp_path / "a.de", DE[:250])
    write(tmp_path / "b.tsv", [f"{e}\t{d}" for e, d in zip(EN[250:400], DE[250:400], strict=True)])
    # a name Hydra reads as a number (2016) is kept as one in the run's config: named alike at evaluation
    settings = [f"data.train={{a: {tmp_path / 'a'}, 2016: {tmp_path / 'b.tsv'}}}", "data.src_lang=en"]
    settings += ["data.tgt_lang=de"]
    settings += ["data.valid_size=30", "data.test_size=30", "data.tokenizer.vocab_size=80"]
    settings += ["data.tokenizer.byte_fallback=false", "data.max_tokens=800", "trainer.max_steps=2"]
    train(compose_train("data=files", *settings, f"run_dir={tmp_path / 'run'}", *NO_FINAL_SCORES))
    (tmp_path / "moved").mkdir()
    shutil.move(tmp_path / "b.tsv", tmp_path / "moved" / "b.tsv")

    def scored(*overrides: str):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            given = [f"ckpt_path={tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}", f"out_dir={tmp_path / 'eval'}"]
            return evaluate(compose("evaluate", overrides=[*given, "samples=0", *overrides]))

    with pytest.raises(FileNotFoundError, match=r"data\.train\.2016=.*b\.tsv"):
        scored()
    with pytest.raises(ValueError, match=r"^data\.train\.c: this run's training corpora are a, 2016; give the moved"):
        scored(f"+data.train.c={tmp_path / 'moved' / 'b.tsv'}")
    assert scored(f"+data.train.2016={tmp_path / 'moved' / 'b.tsv'}")["sentences"] == 30
    # another file in its place is other text: refused, saying how to name each moved corpus
    write(tmp_path / "moved" / "other.tsv", [f"{e}\t{d}" for e, d in zip(EN[:150], DE[:150], strict=True)])
    with pytest.raises(
        ValueError, match=r"give the run's training files with \+data\.train\.<name>=PATH for each corpus"
    ):
        scored(f"+data.train.2016={tmp_path / 'moved' / 'other.tsv'}")


def test_a_tsv_line_with_other_fields_than_the_first_is_refused_by_its_number(tmp_path, caplog):
    """A tab inside a sentence would shift (or cut) that line's columns: one pair silently wrong."""
    lines = [f"{e}\t{d}" for e, d in zip(EN[:6], DE[:6], strict=True)]
    lines[3] = f"{EN[3]}\t{DE[3]}\twith a tab"
    write(tmp_path / "train.tsv", lines[:3] + [""] + lines[3:])
    dm = FilesDataModule(train=str(tmp_path / "train.tsv"), valid_size=1, test_size=1, cache_dir=str(tmp_path / "c"))
    with pytest.raises(
        ValueError, match=r"train\.tsv, line 5: 3 tab-separated fields, where line 1 has 2; a tab inside a sentence"
    ):
        dm.text("train")
    # a file of three fields throughout reads the columns asked for
    write(tmp_path / "three.tsv", [f"{i}\t{e}\t{d}" for i, (e, d) in enumerate(zip(EN[:6], DE[:6], strict=True))])
    dm = FilesDataModule(
        train=str(tmp_path / "three.tsv"),
        val=str(tmp_path / "three.tsv"),
        test=str(tmp_path / "three.tsv"),
        columns=[1, 2],
        cache_dir=str(tmp_path / "d"),
    )
    with caplog.at_level("WARNING"):
        assert sorted(zip(*dm.text("train"), strict=True)) == sorted(zip(EN[:6], DE[:6], strict=True))
    # which fields were read, said: an (id, source, target) file read by the default columns trained on its ids
    assert "three.tsv: 3 tab-separated fields a line; source and target read from fields 1 and 2" in caplog.text


def small_files(tmp_path, **settings) -> FilesDataModule:
    """data=files with 5 + 5 pairs split off, a 100-piece tokenizer without byte fallback and its own cache."""
    defaults = {"valid_size": 5, "test_size": 5, "cache_dir": str(tmp_path / "c")}
    return FilesDataModule(**{**defaults, "tokenizer": {"vocab_size": 100, "byte_fallback": False}, **settings})


def test_duplicates_split_off_are_counted_and_a_missing_split_file_is_named_first(tmp_path):
    """Pairs cut into splits from one pool are deduplicated: the copies dropped are in the data report's
    train row. A split file given but missing is named before the others are split (not hidden behind a
    split that could not be made)."""
    write(tmp_path / "pool.src", EN[:60] + EN[:25])  # 25 pairs twice
    write(tmp_path / "pool.tgt", DE[:60] + DE[:25])
    dm = small_files(tmp_path, train=str(tmp_path / "pool"))
    dm.prepare_data()
    report = dm.report()
    assert report["train"]["dropped"]["duplicate"] == 25
    assert sum(report[split]["pairs"] for split in ("train", "val", "test")) == 60
    missing = FilesDataModule(
        train=str(tmp_path / "pool"), val=str(tmp_path / "nope"), test_size=10_000, cache_dir=str(tmp_path / "d")
    )
    with pytest.raises(FileNotFoundError, match=r"No such file or directory \(data\.val=") as caught:
        missing.text("train")
    assert caught.value.filename == str(tmp_path / "nope.src")
    # scoring a given test set needs its own file only (a finished run's training files may be gone)
    scored = FilesDataModule(
        train=str(tmp_path / "gone"), val=str(tmp_path / "pool"), test=str(tmp_path / "pool"), cache_dir=str(tmp_path)
    )
    assert scored.text("test") == (EN[:60] + EN[:25], DE[:60] + DE[:25])


def test_long_inputs_and_length_drops_are_reported(tmp_path):
    long_src = [" ".join(EN[i : i + 40]) for i in range(0, 200)]  # summarisation-like long inputs
    write(tmp_path / "a.src", long_src + ["", "x"])
    write(tmp_path / "a.tgt", DE[:200] + ["y", ""])
    dm = small_files(tmp_path, train=str(tmp_path / "a"), valid_size=10, test_size=10, max_len=300, max_tokens=3000)
    dm.prepare_data()
    report = dm.report()
    assert report["train"]["dropped"]["empty"] == 2
    assert report["train"]["src_len_p50_p90_p99_max"][3] > 100  # long sources kept
    short = small_files(tmp_path, train=str(tmp_path / "a"), valid_size=10, test_size=10, max_len=50, max_tokens=3000)
    with pytest.raises(ValueError, match=r"no training pair is left \(2 empty, 1\d\d too long\)"):  # all dropped
        short.prepare_data()
    assert report["val"]["sources_also_in_train"] == report["val"]["targets_also_in_train"] == 0


def test_data_no_batch_can_hold_is_one_line_naming_the_setting(tmp_path):
    """No training pair left, an empty training text, a validation sentence longer than the evaluation
    budget and too few pieces for the characters each stop in one line naming the setting, before a model
    is built; a blank TSV line is an empty pair (dropped and counted), as in the two-file form."""

    def module(**kwargs) -> FilesDataModule:
        return small_files(tmp_path, **{"train": str(tmp_path / "a"), **kwargs})

    write(tmp_path / "a.src", EN[:60])
    write(tmp_path / "a.tgt", DE[:60])
    nothing_left = r"^data: no training pair is left \(\d+ too long\): check data\.train, or raise data\.max_len \(2\)"
    with pytest.raises(ValueError, match=nothing_left):
        module(max_len=2).prepare_data()
    # a validation split cut from the training file: the pair's place in the split, not a line of the file
    with pytest.raises(ValueError, match=r"^data\.eval_max_tokens=3 is smaller than the longest val sentence "
                       r"\(\d+ tokens, its pair \d+ as kept\)"):  # fmt: skip
        module(eval_max_tokens=3).prepare_data()
    write(tmp_path / "v.src", EN[:5] + [" ".join(EN[:40])] + EN[5:9])  # which pair: the sixth line is the long one
    write(tmp_path / "v.tgt", DE[:10])
    with pytest.raises(
        ValueError, match=r"longest val sentence \(\d+ tokens, its pair 6 in its file\): raise data.eval_max_tokens"
    ):
        module(val=str(tmp_path / "v"), eval_max_tokens=60).prepare_data()
    write(tmp_path / "empty.tsv", [])
    with pytest.raises(ValueError, match=r"^data\.train: .*empty\.tsv holds no line: give a training file that"):
        module(train=str(tmp_path / "empty.tsv"), val=str(tmp_path / "a"), test=str(tmp_path / "a")).prepare_data()
    chars = [" ".join(chr(0x4E00 + 3 * i + j) for j in range(3)) for i in range(120)]  # 360 distinct characters
    write(tmp_path / "b.src", chars)
    write(tmp_path / "b.tgt", chars)
    with pytest.raises(ValueError, match=r"^data\.tokenizer\.vocab_size=100 is smaller than the (\d+) pieces") as err:
        module(train=str(tmp_path / "b")).prepare_data()
    needed, coverage = re.search(r"the (\d+) pieces .*character_coverage=([\d.]+)\)", str(err.value)).groups()
    # the advice starts from the settings given (it said 0.9995 to a corpus at 0.9995 already)
    assert f"raise vocab_size to at least {needed}, or lower character_coverage (below {coverage})" in str(err.value)
    pairs = [f"{e}\t{d}" for e, d in zip(EN[:60], DE[:60], strict=True)]
    write(tmp_path / "blank.tsv", [*pairs[:30], "", *pairs[30:]])
    blank = module(train=str(tmp_path / "blank.tsv"), val=str(tmp_path / "a"), test=str(tmp_path / "a"))
    blank.prepare_data()
    assert blank.report()["train"]["dropped"]["empty"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["tatoeba_de_en", "zh_en", "europarl", "news_commentary", "files", "cmudict"])
def test_a_tiny_transformer_trains_an_epoch_on_each_module(corpus, tmp_path, capsys):
    data = tmp_path / "data"
    write(data / "deu.txt", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    write(data / "cmn.txt", [f"{e}\t{z}" for e, z in zip(ZH_EN, ZH, strict=True)])
    europarl_archive(data / "de-en.tgz")
    write_news_commentary(data)
    write(data / "pairs.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    write(data / "cmudict.dict", CMUDICT)
    extra = {"files": [f"data.train={data / 'pairs.tsv'}", "data.valid_size=30", "data.test_size=30"]}.get(
        corpus, [f"data.root={data}", "data.valid_size=30", "data.test_size=30", "data.download=false"]
    )
    cfg = compose_train(
        f"data={corpus}",
        "data.tokenizer.vocab_size=80",
        "data.tokenizer.byte_fallback=false",
        "data.max_tokens=800",
        *extra,
        f"run_dir={tmp_path / 'run'}",
        *NO_FINAL_SCORES,
    )
    results = train(cfg)
    # one epoch at the start of warm-up barely moves the model: its per-token loss must sit near a uniform
    # guess over the ~80 subwords (ln 80 = 4.4), which a loss summed per batch or per sentence would not,
    # and perplexity must be exp(loss)
    metrics = results["final_metrics"]
    assert results["epochs"] == 1 and abs(metrics["val_loss"] - math.log(80)) < 1.0
    assert metrics["val_ppl"] == pytest.approx(math.exp(metrics["val_loss"]), rel=1e-4)
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert report["splits"]["val"]["pairs"] >= 30
    # files name their languages only when told: without, the scores' tokenisation is not the language's
    unnamed = "note: data.tgt_lang=tgt names no language known here: BLEU tokenises the target as '13a'"
    assert (unnamed in capsys.readouterr().out) == (corpus == "files")


@pytest.mark.slow
def test_evaluate_scores_several_test_sets_including_iwslt16(tmp_path):
    iwslt = tmp_path / "iwslt16_de_en_devtest"
    for name in ("tst2013", "tst2014"):
        write(iwslt / f"IWSLT16.TED.{name}.de-en.de.gz", DE[:15], gz=True)
        write(iwslt / f"IWSLT16.TED.{name}.de-en.en.gz", EN[:15], gz=True)
    write(tmp_path / "deu.txt", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    run_dir = tmp_path / "run"
    cfg = compose_train(
        "data=tatoeba_de_en",
        f"data.root={tmp_path}",
        "data.valid_size=30",
        "data.test_size=30",
        "data.tokenizer.vocab_size=80",
        "data.tokenizer.byte_fallback=false",
        f"run_dir={run_dir}",
        *NO_FINAL_SCORES,
    )
    train(cfg)
    env_data = os.environ.get("NMT_DATA")
    os.environ["NMT_DATA"] = str(tmp_path)
    try:
        run(
            "evaluate.py",
            f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}",
            "split=[test,iwslt16:tst2013,iwslt16:tst2014]",
            f"out_dir={tmp_path / 'eval'}",
            "decode.strategy=greedy",
            "samples=0",
        )
    finally:
        os.environ.pop("NMT_DATA") if env_data is None else os.environ.__setitem__("NMT_DATA", env_data)
    for name in ("test", "iwslt16_tst2013", "iwslt16_tst2014"):
        metrics = json.loads((tmp_path / "eval" / name / "metrics.json").read_text())
        assert metrics["sentences"] == (30 if name == "test" else 15)


SHARED = Path(os.environ.get("NMT_DATA", ROOT.parent / "shared" / "data"))


@pytest.mark.skipif(not (SHARED / "tatoeba_deu_eng" / "deu.txt.gz").exists(), reason="real Tatoeba not available")
def test_real_tatoeba_de_en_split(tmp_path):
    dm = TatoebaDataModule(
        root=str(SHARED / "tatoeba_deu_eng"),
        download=False,
        src_lang="de",
        tgt_lang="en",
        valid_size=2000,
        test_size=2000,
        cache_dir=str(tmp_path),
    )
    sizes = [len(dm.text(s)[0]) for s in ("train", "val", "test")]
    assert sizes[1] >= 2000 and sizes[2] >= 2000 and sum(sizes) > 150_000


def test_official_test_sets_keep_pairs_with_an_empty_side(tmp_path):
    write(tmp_path / "train.src", EN + [""])
    write(tmp_path / "train.tgt", DE + ["leer"])
    write(tmp_path / "test.src", EN[:5] + ["a source whose reference is empty"])
    write(tmp_path / "test.tgt", DE[:5] + [""])
    dm = FilesDataModule(
        train=[str(tmp_path / "train.src"), str(tmp_path / "train.tgt")],
        test=[str(tmp_path / "test.src"), str(tmp_path / "test.tgt")],
        valid_size=5,
        tokenizer={"vocab_size": 100, "byte_fallback": False},
        cache_dir=str(tmp_path / "c"),
    )
    assert dm.text("test") == (EN[:5] + ["a source whose reference is empty"], DE[:5] + [""])
    assert "" not in dm.text("train")[0]  # training and the derived validation split drop it
    dm.prepare_data()
    report = dm.report()
    assert report["test"]["pairs"] == 6 and report["test"]["dropped"] == {"empty_kept": 1}
    assert report["train"]["dropped"]["empty"] == 1
    batch = next(iter(dm._loader("test", shuffle=False)))  # the empty reference makes a valid batch
    assert "" in batch["refs"]


def test_iwslt16_sets_are_refused_for_a_model_of_other_languages():
    from types import SimpleNamespace

    from nmt.tasks.translation_eval import load_eval_set

    zh_en = SimpleNamespace(src_lang="zh", tgt_lang="en")
    with pytest.raises(ValueError, match=r"^split=iwslt16:tst2013: the IWSLT16 TED sets are German-English; this model "
                       r"translates zh-en \(score another set with split=files:<prefix>\)"):  # fmt: skip
        load_eval_set("iwslt16:tst2013", zh_en, {}, {"cache_dir": "/nonexistent"}, None)
    de_en = SimpleNamespace(src_lang="de", tgt_lang="en")  # a set the release lacks: its sets listed, no search
    with pytest.raises(ValueError, match=r"^split=iwslt16:tst2099: not found, and not a set of the IWSLT16 de-en"):
        load_eval_set("iwslt16:tst2099", de_en, {}, {"cache_dir": "/nonexistent"}, None)
    with pytest.raises(ValueError, match=r"iwslt16:TEDX.dev2012, iwslt16:TEDX.tst2013, iwslt16:TEDX.tst2014$"):
        load_eval_set("iwslt16:TEDX.dev2010", de_en, {}, {"cache_dir": "/nonexistent"}, None)


def test_an_unknown_split_names_the_corpus_test_sets_and_every_other_kind():
    from types import SimpleNamespace

    from nmt.tasks.translation import TranslationTask
    from nmt.tasks.translation_eval import load_eval_set

    data = compose_train("data=multi30k").data
    de_en = SimpleNamespace(src_lang="en", tgt_lang="de")
    with pytest.raises(ValueError, match=r"^split=bogus: data\.test_set='bogus' is not a Multi30k test set; choose "
                       r"from \[.*\]; or train, val, test, iwslt16:<set> or files:<prefix>$"):  # fmt: skip
        load_eval_set("bogus", de_en, data, {"cache_dir": "/nonexistent", "seed": 1}, TranslationTask())


def test_a_failed_download_leaves_no_empty_folder_in_the_cache(tmp_path, monkeypatch):
    from nmt.data import sources

    def offline(url, target):
        Path(target).parent.mkdir(parents=True, exist_ok=True)  # as a download starts
        raise OSError("network is unreachable")

    monkeypatch.delenv("NMT_DATA", raising=False)
    monkeypatch.setattr(sources, "_download", offline)
    with pytest.raises(sources.DataNotFoundError, match="network is unreachable"):
        sources.locate("corpus", ["a.txt"], None, tmp_path, url_for={"a.txt": "https://example.org/a.txt"})
    assert not (tmp_path / "corpus").exists()


def test_a_damaged_cache_file_is_made_again_and_said(tmp_path, caplog):
    """A truncated encoded split or tokenizer model in the cache was a raw traceback naming no file."""
    cache = tmp_path / "c"
    first = small(EuroparlDataModule, root=str(write_europarl(tmp_path)), cache_dir=str(cache))
    first.prepare_data()
    expected = [list(map(int, ids)) for ids in first._encoded("val").src_ids]
    for path in [*cache.glob("encoded/*.pt"), *cache.glob("tokenizers/*.model")]:
        path.write_bytes(path.read_bytes()[:40])
    again = small(EuroparlDataModule, root=str(write_europarl(tmp_path)), cache_dir=str(cache))
    with caplog.at_level("WARNING"):
        again.prepare_data()
        assert [list(map(int, ids)) for ids in again._encoded("val").src_ids] == expected
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot be read" in said and "training the tokenizer again" in said and "encoding the split again" in said


def test_an_emptied_tokenizer_or_a_flipped_token_in_the_cache_is_made_again(tmp_path, caplog, monkeypatch):
    """An empty tokenizer file loaded and failed at the first sentence ("Model is not initialized"), in every
    later run; a flipped bit in an encoded split trained on another token in silence, or stopped training on
    an id past the vocabulary. A full disk while caching a split was torch's "unexpected pos" traceback."""
    import errno

    from nmt.utils import io as nmt_io

    cache = tmp_path / "c"
    first = small(EuroparlDataModule, root=str(write_europarl(tmp_path)), cache_dir=str(cache))
    first.prepare_data()
    expected = [list(map(int, ids)) for ids in first._encoded("val").src_ids]
    for path in cache.glob("tokenizers/*.model"):
        path.write_bytes(b"")
    for path in cache.glob("encoded/*.pt"):
        saved = torch.load(path, weights_only=True)
        saved["src"][3] ^= 1 << 4  # one bit of one token
        torch.save(saved, path)
    again = small(EuroparlDataModule, root=str(write_europarl(tmp_path)), cache_dir=str(cache))
    with caplog.at_level("WARNING"):
        again.prepare_data()
        assert [list(map(int, ids)) for ids in again._encoded("val").src_ids] == expected
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "(an empty file): training the tokenizer again" in said
    assert "(its tokens do not match their digest): encoding the split again" in said

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(nmt_io, "atomic_write_bytes", full)
    monkeypatch.setattr(sys.modules["nmt.data.datamodule"], "atomic_write_bytes", full)
    shutil.rmtree(cache / "encoded")
    third = small(EuroparlDataModule, root=str(write_europarl(tmp_path)), cache_dir=str(cache))
    with pytest.raises(OSError, match="No space left") as raised:
        third.prepare_data()
    assert raised.value.errno == errno.ENOSPC and "encoded" in raised.value.filename


def corpus_at_seed(name: str, folder: Path, seed: int):
    """One corpus module of each kind, built from small files in ``folder`` at the training seed ``seed``."""
    from nmt.data.multi30k import Multi30kDataModule
    from nmt.data.ptb import PTBDataModule
    from nmt.data.toy import ToyDataModule

    cache = str(folder / "cache")
    if name == "toy":
        return ToyDataModule(train_size=60, val_size=10, test_size=10, cache_dir=cache, seed=seed)
    if name == "files":  # val and test split off the training files
        write(folder / "train.de", DE)
        write(folder / "train.en", EN)
        return small_files(folder, train=str(folder / "train"), src_lang="de", tgt_lang="en", seed=seed)
    if name == "europarl":
        return small(EuroparlDataModule, root=str(write_europarl(folder)), cache_dir=cache, seed=seed)
    if name == "tatoeba":
        write(folder / "deu.txt", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
        return small(TatoebaDataModule, root=str(folder), src_lang="de", tgt_lang="en", cache_dir=cache, seed=seed)
    if name == "news_commentary":
        return small(NewsCommentaryDataModule, root=str(write_news_commentary(folder)), cache_dir=cache, seed=seed)
    if name == "zh_en":
        write(folder / "cmn.txt", [f"{e}\t{z}" for e, z in zip(ZH_EN, ZH, strict=True)])
        return small(ZhEnDataModule, root=str(folder), cache_dir=cache, seed=seed)
    if name == "multi30k":  # upstream's file names, gzipped
        (folder / "m30k").mkdir(parents=True)
        for i, split in enumerate(("train", "val", "test_2016_flickr")):
            for lang, side in (("en", EN), ("de", DE)):
                with gzip.open(folder / "m30k" / f"{split}.{lang}.gz", "wt", encoding="utf-8") as handle:
                    handle.write("".join(line + "\n" for line in side[40 * i : 40 * i + 40]))
        return Multi30kDataModule(
            root=str(folder / "m30k"),
            download=False,
            cache_dir=cache,
            seed=seed,
            tokenizer={"vocab_size": 80, "byte_fallback": False},
        )
    if name == "lm_files":
        from nmt.data.text_files import TextFilesDataModule

        for i, split in enumerate(("train", "val", "test")):
            write(folder / f"{split}.txt", [e.lower() for e in EN[40 * i : 40 * i + 40]])
        paths = {split: str(folder / f"{split}.txt") for split in ("train", "val", "test")}
        return TextFilesDataModule(**paths, cache_dir=cache, seed=seed)
    if name == "cmudict":
        from nmt.data.cmudict import CMUDictDataModule

        write(folder / "cmudict" / "cmudict.dict", CMUDICT)
        return CMUDictDataModule(
            root=str(folder / "cmudict"),
            src_lang="en",
            tgt_lang="phonemes",
            download=False,
            valid_size=30,
            test_size=30,
            cache_dir=cache,
            seed=seed,
        )
    if name == "ptb":
        for i, split in enumerate(("train", "valid", "test")):
            write(folder / "ptb" / f"ptb.{split}.txt", [e.lower() for e in EN[40 * i : 40 * i + 40]])
        return PTBDataModule(root=str(folder / "ptb"), download=False, cache_dir=cache, seed=seed)
    raise ValueError(f"corpus_at_seed: no branch builds {name!r}; add one for the new module")


@pytest.mark.parametrize(
    "name",
    ["toy", "files", "europarl", "tatoeba", "zh_en", "news_commentary", "multi30k", "ptb", "lm_files", "cmudict"],
)
def test_a_corpus_text_never_depends_on_the_training_seed(tmp_path, name):
    """Every run of a sweep reads one split whatever its seed (split_seed chooses it): so a sweep reads a
    corpus's text once for all its seeds when it checks its finished runs for edited files."""
    first = corpus_at_seed(name, tmp_path / "a", 1).text_hashes()
    assert set(first) == {"train", "val", "test"} and len(set(first.values())) == 3
    assert corpus_at_seed(name, tmp_path / "b", 2).text_hashes() == first
    other = corpus_at_seed(name, tmp_path / "c", 1)
    if hasattr(other, "split_seed"):  # where a seed chooses the split, it is split_seed
        other.split_seed = 2
        assert other.text_hashes() != first


def write_europarl(tmp_path: Path) -> Path:
    folder = tmp_path / "ep"
    write(folder / "europarl-v7.de-en.de", DE)
    write(folder / "europarl-v7.de-en.en", EN)
    return folder


def test_an_evaluation_set_sharing_many_sources_with_training_is_warned_of(tmp_path, capsys):
    """data.val given as the training files: 'sources also in train 2298' of 2,500 in the table, nothing said."""
    from nmt.data.report import write_report

    dm = small_files(tmp_path, train=str(tmp_path / "t.tsv"), val=str(tmp_path / "t.tsv"))
    write(tmp_path / "t.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    dm.prepare_data()
    report = dm.report()
    write_report(report, dm.describe(), tmp_path)
    shared, pairs = report["val"]["sources_also_in_train"], report["val"]["pairs"]
    said = capsys.readouterr().out
    assert shared > 0.05 * pairs and f"warning: {shared} of the {pairs} val sources are also training sources" in said
    assert "test sources" not in said and "test references" not in said  # split off the training data, apart
    # references that are training targets under other sources: counted apart, by the table's own column
    write(tmp_path / "v.tsv", [f"{e} (v)\t{d}" for e, d in zip(EN[:100], DE[:100], strict=True)])
    other = small_files(tmp_path, train=str(tmp_path / "t.tsv"), val=str(tmp_path / "v.tsv"))
    other.prepare_data()
    report = other.report()
    write_report(report, other.describe(), tmp_path)
    train_targets = set(other.text("train")[1])
    expected = sum(d in train_targets for d in other.text("val")[1])
    assert report["val"]["sources_also_in_train"] == 0 and report["val"]["targets_also_in_train"] == expected > 5
    said = capsys.readouterr().out
    assert f"warning: {expected} of the 100 val references are also training targets" in said
    assert "val sources are" not in said and "references in train" in (tmp_path / "data_report.txt").read_text()


def test_an_archive_extracted_by_another_process_meanwhile_is_used_not_removed(tmp_path, monkeypatch):
    """Two sweep jobs extracting one archive: the second removed the folder the first was reading, or failed."""
    from nmt.data import europarl

    europarl_archive(tmp_path / "de-en.tgz")
    cache = tmp_path / "c"
    real = europarl.extract

    def meanwhile(archive, names, target):  # another process finishes the same extraction first
        done = next(iter((cache / "europarl" / "extracted").glob("[!.]*")), None)
        if done is None:
            other = small(EuroparlDataModule, root=str(tmp_path), cache_dir=str(cache))
            monkeypatch.setattr(europarl, "extract", real)
            other.load_pairs()
            (next((cache / "europarl" / "extracted").glob("[!.]*")) / "being-read").touch()  # the other reads it
        real(archive, names, target)

    monkeypatch.setattr(europarl, "extract", meanwhile)
    dm = small(EuroparlDataModule, root=str(tmp_path), cache_dir=str(cache))
    assert dm.load_pairs()[0] == DE
    (folder,) = (cache / "europarl" / "extracted").glob("[!.]*")
    assert sorted(p.name for p in folder.iterdir()) == [
        ".digests.json",
        "ARCHIVE",
        "being-read",
        "europarl-v7.de-en.de",
        "europarl-v7.de-en.en",
    ]
    assert not list((cache / "europarl" / "extracted").glob(".*"))  # no partial folder left


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"train": True},
            r"^data.train=True: a split is \[src_file, tgt_file\], a .tsv file, or a file prefix, or \{name: files, "
            r"\.\.\.\} \(several corpora, for data.train only\)$",
        ),
        ({"train": ["a", "b", "c"]}, r"^data.train=\['a', 'b', 'c'\]: a split is"),
        ({"val": ["only.src"]}, r"^data.val=\['only.src'\]: a split is"),
        ({"columns": ["a", "b"]}, r"^data.columns=\['a', 'b'\]: the TSV fields of the source and the target"),
        ({"columns": 1}, r"^data.columns=1: the TSV fields"),
        ({"columns": [0, 0]}, r"^data.columns=\[0, 0\]: .* two different whole numbers"),  # a copying task
        ({"columns": [0, 1, 2]}, r"^data.columns=\[0, 1, 2\]: the TSV fields"),
    ],
)
def test_what_data_files_is_given_is_refused_in_one_line_when_the_module_is_built(tmp_path, given, message):
    """Tracebacks (a TypeError on len() of an int, on a column named by a letter) once the data was read."""
    with pytest.raises(ValueError, match=message):
        FilesDataModule(**{"train": "t.tsv", "cache_dir": str(tmp_path), **given})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        # the pair in the other order: en->de trained and scored under the names de->en
        (
            {"train": ["t.de-en.en.gz", "t.de-en.de.gz"]},
            r"^data.train=\['t.de-en.en.gz', 't.de-en.de.gz'\]: the source file t.de-en.en.gz is named for en, the "
            r"other side's language \(data.tgt_lang=en\); give \[source file, target file\] in that order",
        ),
        ({"test": ["t.de", "t.de"]}, r"^data.test=\['t.de', 't.de'\]: one file as both sides"),
        ({"val": ["v.de", "./v.de"]}, r"^data.val=\['v.de', 'v.de'\]: one file as both sides"),
        ({"val": ["v.de", "v.de.de"]}, r"^data.val=\['v.de', 'v.de.de'\]: the target file v.de.de is named for de"),
        # two TSVs were read as one corpus's sides: each whole line of the first a source, of the second a target
        (
            {"train": ["a.tsv", "b.tsv.gz"]},
            r"^data.train=\['a.tsv', 'b.tsv.gz'\]: a list is one corpus's \[source file, target file\], and a.tsv "
            r"and b.tsv.gz each hold both sides; give a .tsv alone, or several corpora by name: "
            r"data.train=\{name1: a.tsv, name2: b.tsv.gz\}$",
        ),
        # a prefix with one language on both sides: train.de read as source and target, a copy task trained
        ({"train": "t", "tgt_lang": "de"}, r"^data.train=t: a prefix names t.de for both sides"),
    ],
)
def test_a_pair_of_files_in_the_other_order_or_one_file_twice_is_refused(tmp_path, given, message):
    """Both were trained without a word: a de->en run that learnt en->de, a de->de one that copied."""
    settings = {"train": ["t.de", "t.en"], "src_lang": "de", "tgt_lang": "en", "cache_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=message):
        FilesDataModule(**{**settings, **given})


def test_a_pair_of_files_named_otherwise_or_of_one_language_is_taken_as_given(tmp_path):
    assert FilesDataModule(train=["a.txt", "b.txt"], src_lang="de", tgt_lang="en").specs["train"] == ["a.txt", "b.txt"]
    assert FilesDataModule(train=["c.src", "c.tgt"], src_lang="de", tgt_lang="en").specs["train"] == ["c.src", "c.tgt"]
    # the same language on both sides (a paraphrase corpus, a summary's): its files end alike
    assert FilesDataModule(train=["doc.en", "sum.en"], src_lang="en", tgt_lang="en").specs["train"][1] == "sum.en"


def test_a_prefix_hydra_reads_as_a_number_or_paths_from_python_are_taken():
    assert FilesDataModule(train=2016).specs["train"] == "2016"  # 2016.en and 2016.de
    assert FilesDataModule(train=[Path("a.en"), Path("a.de")]).specs["train"] == ["a.en", "a.de"]


def test_pairs_split_off_the_training_file_are_said_with_what_is_left(tmp_path, capsys):
    """Without val and test files, the defaults (1,000 each) took most of a small corpus without a word."""
    write(tmp_path / "corp.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    pairs = len(set(zip(EN, DE, strict=True)))
    for sizes, level in (((30, 30), "note"), ((pairs // 3, pairs // 3), "warning")):
        dm = FilesDataModule(
            train=str(tmp_path / "corp.tsv"), valid_size=sizes[0], test_size=sizes[1], cache_dir=str(tmp_path / "c")
        )
        kept = len(dm.text("train")[0])
        said = [line for line in capsys.readouterr().out.splitlines() if "split off data.train" in line]
        assert said == [
            f"{level}: data.val/test not given: {sizes[0]} validation pairs (data.valid_size) and {sizes[1]} test "
            f"pairs (data.test_size) were split off data.train, leaving {kept} to train "
            f"({sum(sizes) / (kept + sum(sizes)):.0%} set aside); give data.val= and data.test= files, or lower those "
            "sizes"
        ]
    # a validation file given: the test set alone is split off, and its file named
    corpus = str(tmp_path / "corp.tsv")
    FilesDataModule(train=corpus, val=corpus, test_size=30, cache_dir=str(tmp_path / "c")).text("train")
    said = capsys.readouterr().out
    assert "note: data.test not given: 30 test pairs (data.test_size) were split off" in said
    assert said.rstrip().endswith("set aside); give data.test= a file, or lower its size")
    # a validation file given, and no test set: nothing taken, nothing said
    FilesDataModule(train=corpus, val=corpus, test_size=0, cache_dir=str(tmp_path / "c")).text("train")
    assert "split off" not in capsys.readouterr().out


def test_an_empty_training_file_is_named(tmp_path):
    """It was "the training text is empty ... check data.train", from the tokenizer, with no file named."""
    write(tmp_path / "empty.tsv", [])
    write(tmp_path / "blank.tsv", ["\t", "\t"])
    write(tmp_path / "corp.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    for name, held in (("empty", "no line"), ("blank", "2 pair\\(s\\), each with an empty side")):
        given = {"train": {"web": str(tmp_path / "corp.tsv"), "extra": str(tmp_path / f"{name}.tsv")}}
        dm = FilesDataModule(**given, valid_size=30, test_size=30, cache_dir=str(tmp_path / "c"))
        with pytest.raises(ValueError, match=rf"^data.train.extra: .*{name}.tsv holds {held}: give a training file"):
            dm.text("train")


def test_a_split_file_may_start_at_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / "corp.tsv", [f"{e}\t{d}" for e, d in zip(EN[:20], DE[:20], strict=True)])
    dm = FilesDataModule(train="~/corp.tsv", val="~/corp.tsv", test="~/corp.tsv", cache_dir=str(tmp_path / "c"))
    assert dm.text("val") == (EN[:20], DE[:20])


@pytest.mark.parametrize("split", ["val", "test"])
def test_an_empty_evaluation_file_given_is_refused_before_training(tmp_path, split, capsys):
    """An empty val file trained without validation or best.ckpt, an empty test file trained to its end:
    both ended in an error only afterwards. Where the run neither validates nor tests, it may be empty.
    A vocabulary larger than the text supports is said, with the sizes obtained."""
    write(tmp_path / "pool.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    write(tmp_path / "empty.tsv", [])
    other = "data.test_size=30" if split == "val" else "data.valid_size=30"  # the set split off data.train
    settings = [f"data.train={tmp_path / 'pool.tsv'}", other]
    settings += ["data.tokenizer.vocab_size=80", "data.tokenizer.byte_fallback=false", "data.max_tokens=800"]
    settings += [f"data.{split}={tmp_path / 'empty.tsv'}", f"run_dir={tmp_path / 'run'}"]
    with pytest.raises(ValueError, match=rf"^data: the {split} set of .* has no pair: give one that holds sentences"):
        train(compose_train("data=files", *settings, "test_after_training=true"))
    assert not (tmp_path / "run" / "checkpoints").exists()
    # a file of blank lines alone: kept pairs with an empty side, nothing to score a model by (it chose best.ckpt)
    write(tmp_path / "blank.tsv", ["\t", "\t"])
    blank = [o.replace("empty.tsv", "blank.tsv") for o in settings]
    with pytest.raises(ValueError, match=rf"^data: the {split} set of .* has 2 pair\(s\), each with an empty side"):
        train(compose_train("data=files", *blank, "test_after_training=true"))
    if split == "test":  # scored by nothing: taken
        capsys.readouterr()
        larger = [o.replace("vocab_size=80", "vocab_size=4000") for o in settings]
        assert train(compose_train("data=files", *larger, *NO_FINAL_SCORES))["finished"]
        note = r"note: data\.tokenizer\.vocab_size=4000: the training text supports fewer pieces; the vocabularies have"
        said = re.search(note + r" (\d+)(?: and (\d+))?\n", capsys.readouterr().out)
        import sentencepiece as spm

        models = sorted((tmp_path / "run" / "tokenizers").glob("*.model"))
        pieces = {spm.SentencePieceProcessor(model_file=str(m)).get_piece_size() for m in models}
        assert said and {int(n) for n in said.groups() if n} == pieces and max(pieces) < 4000


def test_a_data_root_holding_part_of_a_corpus_is_refused_not_replaced_by_another_copy(tmp_path):
    from nmt.data.sources import DataNotFoundError, locate

    root, cache = tmp_path / "root", tmp_path / "cache"
    (cache / "corpus").mkdir(parents=True)
    for name in ("a.txt", "b.txt"):
        (cache / "corpus" / name).write_text("x\n")
    # a root without the corpus (a typo, another corpus's folder): an error, where the run read the cache's
    # copy while its config named the root
    with pytest.raises(DataNotFoundError, match=r"data.root=.*root does not exist: it should hold a.txt, b.txt; "):
        locate("corpus", ["a.txt", "b.txt"], root, cache)
    root.mkdir()
    with pytest.raises(
        DataNotFoundError, match=r"root holds none of these files: .*a.txt, b.txt \(or each with '.gz'\)"
    ):
        locate("corpus", ["a.txt", "b.txt"], root, cache, suffixes=("", ".gz"))
    # looked into in passing (the IWSLT sets in a run's training corpus folder): the next place
    assert locate("corpus", ["a.txt", "b.txt"], root, cache, strict_root=False) == cache / "corpus"
    (root / "a.txt").write_text("y\n")
    with pytest.raises(DataNotFoundError, match=r"data.root=.*root holds a.txt but not b.txt: put every file"):
        locate("corpus", ["a.txt", "b.txt"], root, cache)
    (root / "b.txt.gz").write_text("y\n")  # every file, but not under one suffix: said, not "but not" nothing
    # each file named as it is there, and the suffixes it may have (an empty one was shown as a blank)
    with pytest.raises(
        DataNotFoundError,
        match=r"holds a.txt, b.txt.gz: files under different suffixes; give them all one \(none or '.gz'\)",
    ):
        locate("corpus", ["a.txt", "b.txt"], root, cache, suffixes=("", ".gz"))


def test_a_corpus_folder_in_nmt_data_is_read_whole_never_mixed_with_the_cache(tmp_path, monkeypatch):
    """$NMT_DATA/<corpus> holding one side of a split (the other misnamed): the split was read from the
    cache while the others came from $NMT_DATA, with nothing but a log line to say so."""
    from nmt.data.sources import DataNotFoundError, locate

    data, cache = tmp_path / "data", tmp_path / "cache"
    for folder in (data / "corpus", cache / "corpus"):
        folder.mkdir(parents=True)
        for name in ("train.en", "train.de", "val.en", "val.de"):
            (folder / name).write_text("x\n")
    (data / "corpus" / "val.de").rename(data / "corpus" / "valid.de")
    monkeypatch.setenv("NMT_DATA", str(data))
    assert locate("corpus", ["train.en", "train.de"], None, cache) == data / "corpus"
    with pytest.raises(DataNotFoundError, match=r"^\$NMT_DATA/corpus=.*corpus holds val.en but not val.de: put every"):
        locate("corpus", ["val.en", "val.de"], None, cache)
    # a folder there without any of a set's files (a test set kept elsewhere): looked for further on
    for name in ("test.en", "test.de"):
        (cache / "corpus" / name).write_text("x\n")
    assert locate("corpus", ["test.en", "test.de"], None, cache) == cache / "corpus"


def test_the_places_tried_name_only_the_files_missing_under_every_suffix(tmp_path, monkeypatch):
    """ptb.train.txt.gz there was said missing as ptb.train.txt."""
    from nmt.data.sources import DataNotFoundError, locate

    monkeypatch.delenv("NMT_DATA", raising=False)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt.gz").write_bytes(b"")
    with pytest.raises(DataNotFoundError, match=r"cache: .*corpus \(missing b.txt, or each with '.gz'\)\n"):
        locate("corpus", ["a.txt", "b.txt"], None, tmp_path, download=False, suffixes=("", ".gz"))
    (tmp_path / "corpus" / "b.txt").write_bytes(b"")
    with pytest.raises(DataNotFoundError, match=r"\(every file, but not all under one suffix: a.txt.gz, b.txt\)"):
        locate("corpus", ["a.txt", "b.txt"], None, tmp_path, download=False, suffixes=("", ".gz"))


def test_a_multi30k_root_without_the_runs_test_set_is_refused_and_other_test_sets_are_looked_for(tmp_path):
    """data.root holding train and val: the run's test set came from the cache's copy and was scored as the
    root's; another test set (evaluate.py split=test_2017_flickr) may lie elsewhere."""
    from nmt.data.multi30k import Multi30kDataModule
    from nmt.data.sources import DataNotFoundError

    root, cache = tmp_path / "root", tmp_path / "cache"
    for folder, splits in ((root, ("train", "val")), (cache / "multi30k", ("test_2016_flickr", "test_2017_flickr"))):
        folder.mkdir(parents=True)
        for split in splits:
            for lang in ("en", "de"):
                with gzip.open(folder / f"{split}.{lang}.gz", "wt") as handle:
                    handle.write(f"{split} {lang}\n")
    module = Multi30kDataModule(root=str(root), download=False, cache_dir=str(cache))
    assert module.read_split("val") == (["val en"], ["val de"])
    with pytest.raises(
        DataNotFoundError, match=r"data.root=.*root holds none of these files: it should hold test_2016_flickr.en.gz"
    ):
        module.read_split("test")
    other = Multi30kDataModule(root=str(root), download=False, cache_dir=str(cache), test_set="test_2017_flickr")
    other.other_test_set = True  # as evaluate.py sets it
    assert other.read_split("test") == (["test_2017_flickr en"], ["test_2017_flickr de"])


def test_a_multi30k_folder_in_nmt_data_holding_some_splits_is_not_mixed_with_the_cache_s_copy(tmp_path, monkeypatch):
    """$NMT_DATA/multi30k holding the training files alone: validation and test were read from the cache's
    copy, unsaid, though a corpus's folder there is used whole. Another test set may lie elsewhere."""
    from nmt.data.multi30k import Multi30kDataModule
    from nmt.data.sources import DataNotFoundError

    data, cache = tmp_path / "data", tmp_path / "cache"
    for folder, splits in (
        (data / "multi30k", ("train",)),
        (cache / "multi30k", ("train", "val", "test_2016_flickr", "test_2017_flickr")),
    ):
        folder.mkdir(parents=True)
        for split in splits:
            for lang in ("en", "de"):
                with gzip.open(folder / f"{split}.{lang}.gz", "wt") as handle:
                    handle.write(f"{split} {lang} {folder.parent.name}\n")
    monkeypatch.setenv("NMT_DATA", str(data))
    module = Multi30kDataModule(download=False, cache_dir=str(cache))
    assert module.read_split("train") == (["train en data"], ["train de data"])
    for split, name in (("val", "val"), ("test", "test_2016_flickr")):
        with pytest.raises(
            DataNotFoundError, match=rf"holds train.en.gz, train.de.gz but not {name}.en.gz.*used whole"
        ):
            module.read_split(split)
    other = Multi30kDataModule(download=False, cache_dir=str(cache), test_set="test_2017_flickr")
    other.other_test_set = True  # as evaluate.py sets it
    assert other.read_split("test") == (["test_2017_flickr en cache"], ["test_2017_flickr de cache"])


def test_a_missing_validation_file_is_said_before_a_tokenizer_is_trained(tmp_path, monkeypatch):
    """data.root holding Multi30k's train files but not val's: the run trained its tokenizers (minutes on the
    real corpus) and only then said the validation files were missing."""
    import nmt.data.datamodule as datamodule
    from nmt.data.multi30k import Multi30kDataModule
    from nmt.data.sources import DataNotFoundError

    root, cache = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    for lang in ("en", "de"):
        with gzip.open(root / f"train.{lang}.gz", "wt") as handle:
            handle.write(f"train {lang}\n")
    trained = []
    monkeypatch.setattr(datamodule, "load_or_train", lambda *args, **kwargs: trained.append(args) or 1 / 0)
    module = Multi30kDataModule(root=str(root), download=False, cache_dir=str(cache))
    with pytest.raises(
        DataNotFoundError, match=r"data.root=.*root holds none of these files: it should hold val.en.gz"
    ) as said:
        module.prepare_data()
    assert trained == []
    # every split's missing files at once, not one split per try (the test set's too)
    assert str(said.value).endswith(
        "\nNot found either: the test split's test_2016_flickr.en.gz, test_2016_flickr.de.gz"
    )


def test_the_folder_a_corpus_is_read_from_is_said_once_into_the_runs_log(tmp_path, caplog):
    """Which copy a run read (data.root, $NMT_DATA, the cache) was recorded nowhere."""
    import logging

    from nmt.data.sources import locate

    root, cache = tmp_path / "root", tmp_path / "cache"
    for folder in (root, cache / "corpus"):
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text("x\n")
    with caplog.at_level(logging.INFO, logger="nmt.data.sources"):
        for _ in range(2):  # each split reads it: said once
            assert locate("corpus", ["a.txt"], root, cache) == root
        assert locate("corpus", ["a.txt"], None, cache) == cache / "corpus"
    assert [r.getMessage() for r in caplog.records] == [
        f"corpus: reading {root} (data.root)",
        f"corpus: reading {cache / 'corpus'} (cache)",
    ]


def test_files_evaluated_by_path_read_the_runs_columns_and_get_folders_of_their_own(tmp_path, monkeypatch):
    """split=files:x.tsv read columns 0 and 1 of a run trained with data.columns=[1,0]: source and target
    swapped, and scored. Two paths that flatten alike shared one evaluation folder."""
    from types import SimpleNamespace

    from nmt.decoding.settings import SearchConfig
    from nmt.tasks.translation_eval import load_eval_set, split_tag

    write(tmp_path / "rev.tsv", [f"{d}\t{e}" for e, d in zip(EN[:5], DE[:5], strict=True)])
    languages = SimpleNamespace(src_lang="en", tgt_lang="de")
    data_cfg = OmegaConf.create({"columns": [1, 0]})
    sources, references, _ = load_eval_set(f"files:{tmp_path / 'rev.tsv'}", languages, data_cfg, {}, None)
    assert (sources, references) == (EN[:5], DE[:5])
    search = SearchConfig()
    assert split_tag("files:c/a_b", search) != split_tag("files:c/a/b", search)
    assert split_tag("test", search) == "test_beam5"  # the corpus's own sets keep their names
    # files:t given in two folders are two files (the second evaluation wrote over the first's folder)
    import zlib

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    in_folder = []
    for folder in ("a", "b"):
        monkeypatch.chdir(tmp_path / folder)
        in_folder.append(split_tag("files:t", search))
    monkeypatch.chdir(tmp_path)
    assert in_folder[0] != in_folder[1]
    # the hash is of the absolute path: an absolute path's folder name is the one it always had
    absolute = f"files:{tmp_path / 'a' / 't'}"
    crc = f"_{zlib.crc32(absolute.encode()):08x}_beam5"
    assert in_folder[0] == f"files_t{crc}" and split_tag("files:a/t", search) == f"files_a_t{crc}"
    assert split_tag(absolute, search) == absolute.replace(":", "_").replace("/", "_") + crc
    # evaluate.py split=[...] out_dir=D: one sub-folder per set, two paths that flatten alike in two
    from nmt.tasks.translation_eval import set_name

    assert set_name("files:/d/pa/b_c") != set_name("files:/d/pa_b/c")


def test_the_sizes_and_seed_of_a_split_are_refused_where_files_give_the_sets(tmp_path):
    """data.valid_size, data.test_size and data.split_seed were taken without a word beside data.val and
    data.test files, and counted in the run's identity: a sweep over data.split_seed trained cells of one data."""
    train = f"data.train={tmp_path / 'train'}"
    given = [train, f"data.val={tmp_path / 'val'}", f"data.test={tmp_path / 'test'}"]
    said = r"(?s)data.valid_size=5: the size of a validation set split off data.train, and data.val gives the "
    with pytest.raises(ValueError, match=said + r"validation set as files.*data.split_seed=3: seeds"):
        check_config(compose_train("data=files", *given, "data.valid_size=5", "data.split_seed=3"))
    with pytest.raises(ValueError, match=r"data.test_size=4: the size of a test set .*leave data.test_size out$"):
        check_config(compose_train("data=files", train, f"data.test={tmp_path / 'test'}", "data.test_size=4"))
    # where a set is split off, its size and the seed apply; the defaults always pass
    check_config(
        compose_train("data=files", train, f"data.test={tmp_path / 'test'}", "data.valid_size=5", "data.split_seed=3")
    )
    check_config(compose_train("data=files", *given))
    check_config(compose_train("data=news_commentary", "data.split_seed=3"))  # no files: its split is seeded


def test_columns_name_the_folder_and_apply_only_where_a_tsv_is_read(tmp_path):
    """An evaluation of one TSV by other columns wrote into the same folder as the plain one (its results
    gone); data.columns with a data=files run read from prefixes, and data.user_dict without jieba, changed
    nothing without a word; split=files:test.en was read as test.en.en, saying only that it was missing."""
    from types import SimpleNamespace

    from nmt.data.datamodule import ParallelDataModule
    from nmt.tasks.translation_eval import check_columns_apply, columns_tag, load_eval_set

    corpus, files_run = OmegaConf.create({}), OmegaConf.create({"train": "c/train", "test": None, "columns": [0, 1]})
    assert columns_tag("files:x.tsv", corpus, [1, 0], None) == "_cols1-0"
    assert columns_tag("files:x.tsv", corpus, None, None) == columns_tag("files:x.tsv", corpus, [0, 1], None) == ""
    assert columns_tag("files:x.tsv", OmegaConf.create({"columns": [1, 0]}), None, [1, 0]) == ""  # the run's own
    assert columns_tag("files:x.tsv", OmegaConf.create({"columns": [1, 0]}), [0, 1], [1, 0]) == "_cols0-1"
    assert columns_tag("test", OmegaConf.create({"train": "c/all.tsv", "columns": [1, 0]}), None, [0, 1]) == "_cols1-0"
    assert columns_tag("files:x", corpus, [1, 0], None) == ""  # a prefix: no TSV, refused before (below)
    with pytest.raises(ValueError, match=r"split=test of this data=files run is read from files named by a prefix"):
        check_columns_apply("test", files_run, [1, 0])
    check_columns_apply("test", OmegaConf.create({"train": "c/all.tsv.gz", "test": None, "columns": [0, 1]}), [1, 0])
    # refused for training, before any data is read; an evaluation rebuilds the data module from a checkpoint's
    # config, where an older run may hold them, and takes it
    with pytest.raises(ValueError, match=r"data.columns=\[1, 0\]: picks the fields of a TSV, and none of data.train"):
        check_config(compose_train("data=files", f"data.train={tmp_path / 'train'}", "data.columns=[1,0]"))
    check_config(compose_train("data=files", f"data.train={tmp_path / 'all.tsv'}", "data.columns=[1,0]"))
    with pytest.raises(ValueError, match=r"data.user_dict=words.txt: a jieba dictionary, read by a jieba segmenter"):
        check_config(compose_train("data=zh_en", "data.segmenter.zh=none", "+data.user_dict=words.txt"))
    FilesDataModule(train=str(tmp_path / "train"), columns=[1, 0], cache_dir=str(tmp_path / "c"))
    ParallelDataModule(src_lang="en", tgt_lang="zh", user_dict="words.txt", cache_dir=str(tmp_path / "c"))
    languages = SimpleNamespace(src_lang="en", tgt_lang="de")
    write(tmp_path / "test.en", EN[:2])
    write(tmp_path / "test.de", DE[:2])
    spec = tmp_path / "test.en"
    with pytest.raises(FileNotFoundError, match=rf"split=files:{re.escape(str(spec))}: a prefix, to which \.en and "
                       rf"\.de are added: split=files:{re.escape(str(tmp_path / 'test'))}\)"):  # fmt: skip
        load_eval_set(f"files:{spec}", languages, corpus, {}, None)


def test_a_language_models_empty_text_or_vocabulary_of_specials_alone_is_refused(tmp_path):
    """An empty training text trained 0 updates and reported a perplexity; an empty validation text scored
    0 tokens as perplexity 1.00; max_vocab=0 made every word <unk>."""
    from nmt.data.ptb import PTBDataModule

    for name, lines in (("train", []), ("valid", ["a b c"]), ("test", ["a b"])):
        write(tmp_path / f"ptb.{name}.txt", lines)
    with pytest.raises(ValueError, match=r"^data.max_vocab=0: the vocabulary's size with its 4 special tokens"):
        PTBDataModule(root=str(tmp_path), max_vocab=0, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"^data.eval_batch_size=-1: must be a whole number >= 1 or null"):
        PTBDataModule(root=str(tmp_path), eval_batch_size=-1, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"^data: the train text of .* has no word"):
        PTBDataModule(root=str(tmp_path), cache_dir=str(tmp_path / "c"), download=False).prepare_data()


def test_a_damaged_or_cut_short_corpus_file_or_archive_is_one_line_naming_it(tmp_path):
    """A truncated .gz, a file named .gz that is not gzip, and cut-short .zip and .tgz releases gave
    EOFError, BadGzipFile, BadZipFile tracebacks; each is now a ValueError naming the file and what to do."""
    import io
    import tarfile
    import zipfile

    from nmt.data.text_io import read_lines

    whole = gzip.compress("".join(f"{e}\t{d}\n" for e, d in zip(EN, DE, strict=True)).encode())
    (tmp_path / "cut.txt.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "plain.txt.gz").write_text("this is not gzip\n")
    for name in ("cut.txt.gz", "plain.txt.gz"):
        with pytest.raises(
            ValueError, match=rf"^{re.escape(str(tmp_path / name))}: cannot be read .* make or fetch it again"
        ):
            read_lines(tmp_path / name)
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as bundle:
        bundle.writestr("deu.txt", "".join(f"{e}\t{d}\n" for e, d in zip(EN, DE, strict=True)))
    root = tmp_path / "tatoeba"
    write(root / "x", [])
    (root / "deu-eng.zip").write_bytes(zipped.getvalue()[:200])
    with pytest.raises(ValueError, match=r"deu-eng.zip: cannot be read .*BadZipFile"):
        small(TatoebaDataModule, root=str(root), src_lang="de", tgt_lang="en", cache_dir=str(tmp_path / "c")).text(
            "train"
        )
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as bundle:
        for lang, lines in (("de", DE), ("en", EN)):
            data = "".join(f"{line}\n" for line in lines).encode()
            info = tarfile.TarInfo(f"europarl-v7.de-en.{lang}")
            info.size = len(data)
            bundle.addfile(info, io.BytesIO(data))
    root = tmp_path / "europarl"
    write(root / "x", [])
    (root / "de-en.tgz").write_bytes(packed.getvalue()[: len(packed.getvalue()) // 2])
    with pytest.raises(ValueError, match=r"de-en.tgz: cannot be read .*an interrupted copy or download"):
        small(EuroparlDataModule, root=str(root), cache_dir=str(tmp_path / "c")).text("train")
    assert not [p for p in (tmp_path / "c").rglob("*") if p.is_dir() and p.name.startswith(".")]  # no partial left


def test_a_gzip_file_named_without_gz_a_folder_or_a_gz_ending_given_as_a_prefix_is_said_as_such(tmp_path):
    """A .gz file under a plain name was told to be re-encoded from latin1; a folder given as a prefix, and a
    prefix given with its language's .gz ending, were "No such file" of a name the user never gave."""
    from nmt.data.text_io import read_lines

    (tmp_path / "y.de").write_bytes(gzip.compress(b"ein Satz\n"))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 'y.de'))}: gzip-compressed, but its name does "
                       rf"not end in .gz; rename it {re.escape(str(tmp_path / 'y.de.gz'))} "):  # fmt: skip
        read_lines(tmp_path / "y.de")
    (tmp_path / "latin1.de").write_bytes("Gr\xfc\xdfe\n".encode("latin1"))
    with pytest.raises(ValueError, match=r"latin1.de, line 1: invalid UTF-8 .*iconv -f latin1"):  # text, as before
        read_lines(tmp_path / "latin1.de")
    # UTF-16 was told to be converted from latin1, which makes mojibake of it
    (tmp_path / "utf16.de").write_bytes("Grüße\nein Satz\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"utf16.de, line 1: invalid UTF-8 .*looks like UTF-16 .*iconv -f utf-16"):
        read_lines(tmp_path / "utf16.de")
    # without its byte-order mark, ASCII text in UTF-16 is valid UTF-8 with a NUL beside each letter: it was read
    (tmp_path / "utf16le.de").write_bytes("ein Satz\nzwei\n".encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"utf16le.de, line 1: a NUL byte at character 2, not text; .*iconv -f utf-16"):
        read_lines(tmp_path / "utf16le.de")
    (tmp_path / "nul.de").write_bytes(b"ein Satz\nzw\x00ei\n")  # one stray NUL: kept in the sentence before
    with pytest.raises(ValueError, match=r"nul.de, line 2: a NUL byte at character 3, not text; remove it \(tr -d"):
        read_lines(tmp_path / "nul.de")
    for lang in ("de", "en"):
        write(tmp_path / "corpus" / f"train.{lang}", EN[:5])
    languages = {"src_lang": "de", "tgt_lang": "en", "cache_dir": str(tmp_path / "c")}
    with pytest.raises(FileNotFoundError, match=rf"data.train={re.escape(str(tmp_path / 'corpus'))}; .* is a folder: "
                       rf"give the prefix of the files in it \({re.escape(str(tmp_path / 'corpus' / 'train'))} for "
                       r"train.de and train.en\)"):  # fmt: skip
        FilesDataModule(train=str(tmp_path / "corpus"), **languages).text("train")
    gz_prefix = str(tmp_path / "corpus" / "train.de.gz")
    prefix = re.escape(str(tmp_path / "corpus" / "train"))
    with pytest.raises(FileNotFoundError, match=rf"data.train={re.escape(gz_prefix)}: a prefix, to which .de and .en "
                       rf"are added: data.train={prefix}, or both files"):  # fmt: skip
        FilesDataModule(train=gz_prefix, **languages).text("train")


def test_a_run_recorded_before_the_report_counted_references_resumes(tmp_path):
    """The data report's new count of references also in training is not part of a run's data identity: a
    folder recorded without it (every run before it, of any corpus) is the same data, not 'other data'."""
    from nmt.training.run_identity import check_data, data_identity, record_identity

    write(tmp_path / "t.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    dm = small_files(tmp_path, train=str(tmp_path / "t.tsv"))
    dm.prepare_data()
    report = dm.report()
    assert "targets_also_in_train" in report["val"]
    now = data_identity(dm.describe(), report, dm.text_hashes(), *dm.build_tokenizers())
    before = {split: {k: v for k, v in row.items() if k != "targets_also_in_train"} for split, row in report.items()}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record_identity(run_dir, {"data": data_identity(dm.describe(), before, dm.text_hashes(), *dm.build_tokenizers())})
    assert check_data(run_dir, {"data": now}, force=False, resuming=True) is None


def extract(archive: Path, folder: Path) -> None:
    """A stand-in archive format: each of a.txt and b.txt holds the archive's text."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("a.txt", "b.txt"):
        (folder / name).write_text(archive.read_text())


def test_the_cache_s_extraction_says_whether_its_archive_is_gone_or_only_not_looked_in(tmp_path, caplog, monkeypatch):
    """An archive given by an earlier run's data.root, still in place, was said to be "no longer there"."""
    from nmt.data.sources import locate_or_extract

    monkeypatch.delenv("NMT_DATA", raising=False)

    root, cache = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    (root / "c.tgz").write_text("x\n")
    first = locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, root, cache, download=False)
    with caplog.at_level("WARNING"):
        assert locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, None, cache, download=False) == first
        assert "c.tgz (not among the places looked in now)" in caplog.text
        (root / "c.tgz").unlink()
        assert locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, None, cache, download=False) == first
        assert "c.tgz (no longer there)" in caplog.text


def test_an_extracted_file_cut_short_in_the_cache_is_extracted_again_or_named(tmp_path, caplog, monkeypatch):
    """An extraction's file cut short (a full disk, an edit) was read as the corpus, unsaid: fewer pairs."""
    from nmt.data.sources import locate_or_extract

    monkeypatch.delenv("NMT_DATA", raising=False)

    root, cache = tmp_path / "root", tmp_path / "cache"
    root.mkdir()
    (root / "c.tgz").write_text("one\ntwo\nthree\n")
    folder = locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, root, cache, download=False)
    (folder / "a.txt").write_text("one\n")
    with caplog.at_level("WARNING"):
        again = locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, root, cache, download=False)
    assert again == folder and (folder / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert "a.txt changed since it was extracted from" in caplog.text
    # a folder that cannot be removed (half removed, its files still there) was taken as the extraction
    (folder / "a.txt").write_text("one\n")
    monkeypatch.setattr("shutil.rmtree", lambda path, ignore_errors=False: None)
    with pytest.raises(ValueError, match=r"a.txt changed since it was extracted from .*c.tgz, and the folder could not "
                       r"be removed to extract it again .*rm -r"):  # fmt: skip
        locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, root, cache, download=False)
    monkeypatch.undo()
    monkeypatch.delenv("NMT_DATA", raising=False)
    assert locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, root, cache, download=False) == folder
    (folder / "b.txt").write_text("two\n")
    (root / "c.tgz").unlink()  # nothing to extract it again from
    with pytest.raises(ValueError, match=r"b.txt: changed since it was extracted from .*c.tgz, which is not found now"):
        locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", extract, None, cache, download=False)


def test_a_corpus_released_as_an_archive_names_the_files_missing_where_it_looked(tmp_path, monkeypatch):
    """One side misnamed was said as 'neither a.txt and b.txt nor c.tgz', naming no missing file."""
    from nmt.data.sources import DataNotFoundError, locate_or_extract

    monkeypatch.delenv("NMT_DATA", raising=False)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("x\n")
    with pytest.raises(DataNotFoundError, match=r"cache: .*corpus \(missing b.txt; no c.tgz\)"):
        locate_or_extract("corpus", ["a.txt", "b.txt"], "c.tgz", lambda a, f: None, None, tmp_path, download=False)


def test_an_evaluation_of_a_run_with_a_jieba_dictionary_does_not_read_the_file(tmp_path):
    """The dictionary's words travel in the checkpoint's tokenizers, which an evaluation uses: evaluate.py
    rebuilt the data module, which read the file, and a moved or deleted dictionary stopped every split's
    scoring, with advice (data.user_dict=...) that evaluate.py refuses."""
    from types import SimpleNamespace

    from nmt.data.build import build_datamodule
    from nmt.tasks.base import evaluation_data_config

    gone = tmp_path / "moved_away.txt"
    cfg = compose_train("data=zh_en", f"+data.user_dict={gone}", tiny=False)
    with pytest.raises(ValueError, match=r"data.user_dict=.*moved_away.txt: cannot be read"):
        build_datamodule(cfg.data, str(tmp_path / "c"), 1)  # training reads it: its tokenizers are trained
    loaded = SimpleNamespace(config={"data": OmegaConf.to_container(cfg.data)})
    data_cfg = evaluation_data_config(loaded, {})
    assert data_cfg.user_dict is None and data_cfg.segmenter.zh == "jieba"
    build_datamodule(data_cfg, str(tmp_path / "c"), 1)


def test_the_data_line_says_how_each_side_is_cut_into_words(tmp_path, capsys):
    """A jieba user dictionary, or segmenter=none, showed only in config.yaml: the line naming the data now
    says which side a segmenter cuts, and with a user dictionary (none said when neither side has one)."""
    words = tmp_path / "user.dict"
    words.write_text("开心果 5\n", encoding="utf-8")
    given = [
        "trainer.max_steps=1",
        *NO_FINAL_SCORES,
        "+data.segmenter={en: moses, de: jieba}",
        f"+data.user_dict={words}",
    ]
    train(compose_train(*given, f"run_dir={tmp_path / 'cut'}"))
    assert "; words: en by moses, de by jieba with a user dictionary; model:" in capsys.readouterr().out
    train(compose_train("trainer.max_steps=1", *NO_FINAL_SCORES, f"run_dir={tmp_path / 'plain'}"))
    assert "words:" not in next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Data: "))


def test_a_runs_splits_written_as_files_are_read_back_as_the_same_text(tmp_path, capsys):
    """data.md advised keeping a corpus's seeded splits as files across corrections, and nothing wrote them:
    written, and trained on as data=files, each split's text hash is the run's; a language model's too."""
    from nmt.cli.splits import write_splits
    from nmt.data.build import build_datamodule

    from .test_lm import counting_sentences

    write(tmp_path / "pool.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)] + ["\t", EN[0] + "\t" + DE[0]])
    given = [f"data.train={tmp_path / 'pool.tsv'}", "data.valid_size=30", "data.test_size=20", "data.src_lang=en"]
    run = compose_train("data=files", *given, "data.tgt_lang=de")
    said = write_splits(run, tmp_path / "splits")
    assert said.startswith(f"data=files data.train=[{tmp_path / 'splits' / 'train.en'},")
    again = compose_train(*said.split())
    hashes = [build_datamodule(c.data, c.cache_dir, c.seed).text_hashes() for c in (run, again)]
    assert hashes[0] == hashes[1]
    assert len((tmp_path / "splits" / "test.de").read_text().splitlines()) == 20
    folder = tmp_path / "ptb"
    folder.mkdir()
    for name, n, seed in (("train", 60, 1), ("valid", 10, 2), ("test", 10, 3)):
        (folder / f"ptb.{name}.txt").write_text("\n".join(counting_sentences(n, seed)) + "\n")
    lm = compose_train("task=lm", f"data.root={folder}", "data.download=false")
    said = write_splits(lm, tmp_path / "lm")
    assert said.startswith("data=lm_files data.train=") and "note: data=lm_files has" in capsys.readouterr().err
    again = compose_train("task=lm", *said.split())
    assert [build_datamodule(c.data, c.cache_dir, c.seed).text_hashes() for c in (lm, again)] == [
        build_datamodule(lm.data, lm.cache_dir, lm.seed).text_hashes()
    ] * 2


def test_the_splits_command_keeps_splits_written_before_and_reads_paths_as_train_py_does(tmp_path, capsys):
    """Splits written before (kept so that they stay as they were) were written over unsaid; an unquoted
    path holding Hydra's grammar (~) gave Hydra's traceback."""
    from nmt.cli.splits import main

    write(tmp_path / "pool.tsv", [f"{e}\t{d}" for e, d in zip(EN, DE, strict=True)])
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "train.en").write_text("first version\n")
    given = ["data=files", f"data.train={tmp_path / 'pool.tsv'}", "data.src_lang=en", "data.tgt_lang=de"]
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "kept"), *given])
    assert stop.value.code == 2 and (tmp_path / "kept" / "train.en").read_text() == "first version\n"
    assert "kept holds train.en, splits written before; name another folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path / "out"), "data=files", "data.train=~/x", "data.src_lang=en"])
    said = capsys.readouterr().err
    assert (
        stop.value.code == 2
        and "Traceback" not in said
        and said.startswith("error: data.train=~/x: Hydra cannot read it")
    )


def test_a_seeded_split_left_empty_by_its_groups_says_why_not_which_file_to_give(tmp_path):
    """Every pair sharing one target is one group, which training keeps: the validation set was said to have
    no pair, "give one that holds sentences (data=files: data.val)", though no data.val was given."""

    from nmt.training.sitting import check_evaluation_sets

    write(tmp_path / "same.tsv", [f"{d}\tYes." for d in DE[:200]])
    dm = FilesDataModule(train=str(tmp_path / "same.tsv"), valid_size=10, test_size=10)
    assert dm.text("val") == ([], [])
    cfg = OmegaConf.create({"trainer": {"limit_val_batches": 1.0}, "test_after_training": True})
    with pytest.raises(ValueError, match=r"has no pair: the seeded split found no group of pairs to take") as said:
        check_evaluation_sets(cfg, dm, {"val": {"pairs": 0}, "test": {"pairs": 0}})
    assert "give the val set as files (data=files: data.val=...)" in str(said.value)


def test_a_set_read_the_other_way_round_is_said_by_its_script():
    """A researcher's trial: a TSV written English first, scored with a zh->en model, was translated from
    English and scored against Chinese: BLEU 0.02, with a hint to tune the length penalty."""
    from nmt.tasks.translation_eval import swapped_sides

    said = swapped_sides("files:test.tsv", ZH_EN[:50], ZH[:50], "zh", "en")
    assert said == (
        "split=files:test.tsv: the model translates zh->en, but the set's references are in the script of zh (100% "
        "of lines) and its sources not (0%): its sides look swapped; give them the other way round "
        "(data.columns=[1, 0] reads the TSV's fields the other way)"
    )
    # fields 3 and 2 read already: the other way is 2 and 3; files named by language: which one to look at
    assert "(data.columns=[2, 3] reads" in swapped_sides("files:t.tsv", ZH_EN[:50], ZH[:50], "zh", "en", (3, 2))
    said = swapped_sides("files:t", ZH[:50], ZH_EN[:50], "en", "zh")
    assert "the set's sources are in the script of zh" in said and "(the file named .en holds the zh side?)" in said
    # the right way round, a pair of one script, or a set too small to tell: nothing said
    assert swapped_sides("files:t", ZH[:50], ZH_EN[:50], "zh", "en") is None
    assert swapped_sides("files:t", ZH_EN[:50], ZH_EN[:50], "de", "en") is None
    assert swapped_sides("files:t", ZH_EN[:3], ZH[:3], "zh", "en") is None


def test_a_pair_in_two_upsampled_corpora_takes_the_largest_times():
    """A split pair read from corpus "extra" (x3) and again from "web" (x1) is repeated 3 times, the largest N,
    whatever the order the corpora were read in (kills files.py keeping the last corpus's N)."""
    from nmt.data.files import FilesDataModule

    fake = SimpleNamespace(upsample={"extra": 3, "web": 1}, _origins=["extra", "web"])
    src, tgt = FilesDataModule._repeated(fake, ["a"], ["A"], pool=(["a", "a"], ["A", "A"]))
    assert (src, tgt) == (["a"] * 3, ["A"] * 3)


def test_a_blank_tsv_line_is_an_empty_pair_in_its_place(tmp_path):
    """A blank line of a TSV is a pair with both sides empty, as a blank line in the two-file form: line numbers
    (and an evaluation's outputs) stay aligned with the file (kills file_specs.py skipping it)."""
    from nmt.data.file_specs import read_split_files

    path = tmp_path / "dev.tsv"
    path.write_text("a\tA\n\nc\tC\n", encoding="utf-8")
    assert read_split_files(str(path), "en", "de") == (["a", "", "c"], ["A", "", "C"])


def test_corpus_settings_at_their_edges(tmp_path):
    """Found by mutation, each passed the tests: a corpus's name that would be a hidden or parent cache file,
    data=zh_en with one side not Chinese or English, max_src_len=0 taken for "no limit", and the evaluation
    budget's boundary (a batch of exactly the longest sentence's tokens holds it)."""
    from nmt.data.file_specs import checked_corpus_name
    from nmt.data.zh_en import ZhEnDataModule

    assert checked_corpus_name("iwslt16_de-en.v2", "files") == "iwslt16_de-en.v2"
    for name in ("..", ".hidden", "-x", "a/b"):
        with pytest.raises(ValueError, match=re.escape(f"data.name={name!r}: a corpus's name")):
            checked_corpus_name(name, "files")
    with pytest.raises(ValueError, match="data=zh_en translates between 'zh' and 'en', not 'zh' -> 'de'"):
        ZhEnDataModule(src_lang="zh", tgt_lang="de", download=False)
    write(tmp_path / "a.src", EN[:60])
    write(tmp_path / "a.tgt", DE[:60])
    with pytest.raises(ValueError, match=r"data.max_src_len=0 must be a positive number of tokens \(or null\)"):
        small_files(tmp_path, train=str(tmp_path / "a"), max_src_len=0)
    budget, said = 3, None
    for _ in range(3):  # each split's longest sentence in turn (val, then test), until the budget holds them all
        try:
            small_files(tmp_path, train=str(tmp_path / "a"), eval_max_tokens=budget).prepare_data()
            break
        except ValueError as err:
            said = re.search(r"longest (\w+) sentence \((\d+) tokens", str(err))
            budget = int(said.group(2))
    else:
        pytest.fail(f"no budget held the evaluation sets: {said}")
    assert said is not None and budget > 3  # the longest of all, which passed
    with pytest.raises(ValueError, match=rf"longest \w+ sentence \({budget} tokens"):
        small_files(tmp_path, train=str(tmp_path / "a"), eval_max_tokens=budget - 1).prepare_data()
