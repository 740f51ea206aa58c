"""data=cmudict: the CMU Pronouncing Dictionary read as word -> phonemes pairs (variants, comments, bad lines),
split with no word and no pronunciation in two splits, found like the other corpora, and
experiment=cmudict_g2p training on a generated dictionary."""

import gzip
import os
import random
from pathlib import Path

import pytest

from nmt.data.cmudict import PHONEMES, CMUDictDataModule, read_cmudict
from nmt.data.sources import DataNotFoundError
from nmt.metrics.corpus import transliteration_scores, unknown_language_note
from nmt.training.train import train

from .conftest import compose_train

# the real dictionary, where a corpus folder holds it (CI's shared data, or $NMT_DATA)
REAL_DICT = next(
    (
        folder / "cmudict" / "cmudict.dict"
        for folder in (Path(__file__).resolve().parents[2] / "shared" / "data", Path(os.environ.get("NMT_DATA", "/-")))
        if (folder / "cmudict" / "cmudict.dict").is_file()
    ),
    None,
)

HEAD = [
    "'bout B AW1 T",
    "a AH0",
    "a(2) EY1",
    "d'artagnan D AH0 R T AE1 NG Y AH0 N # foreign french",
    "read R IY1 D",
    "read(2) R EH1 D",
    "red R EH1 D",
    "redd R EH1 D",
]
LETTERS = {"a": "AE1", "b": "B", "d": "D", "e": "EH0", "k": "K", "l": "L", "m": "M", "n": "N", "o": "OW1", "s": "S",
           "t": "T"}  # fmt: skip


def generated(n: int, seed: int = 3) -> list[str]:
    """``n`` made-up words, each letter one phoneme, so that a model can learn them; distinct words and
    distinct pronunciations (no homophones beyond HEAD's)."""
    rng, lines, seen = random.Random(seed), [], set()
    while len(lines) < n:
        word = "".join(rng.choice(sorted(LETTERS)) for _ in range(rng.randint(3, 7)))
        if word not in seen:
            seen.add(word)
            lines.append(f"{word} {' '.join(LETTERS[c] for c in word)}")
    return lines


def write_dict(folder: Path, lines, gz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("cmudict.dict.gz" if gz else "cmudict.dict")
    data = "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_a_word_takes_its_first_pronunciation_and_comments_are_not_phonemes(tmp_path):
    words, phones = read_cmudict(write_dict(tmp_path, HEAD))
    pairs = dict(zip(words, phones, strict=True))
    assert words == ["'bout", "a", "d'artagnan", "read", "red", "redd"]  # a(2), read(2): further pronunciations
    assert pairs["a"] == "AH0" and pairs["read"] == "R IY1 D"
    assert pairs["d'artagnan"] == "D AH0 R T AE1 NG Y AH0 N"  # "# foreign french" dropped


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("cat K AE1 T", None),
        ("cat\tK AE1 T", None),
        ("cat", "a word without phonemes"),
        ("cat K ae1 T", "'ae1' is not an ARPAbet phoneme"),
        ("cat K AE3 T", "'AE3' is not an ARPAbet phoneme"),
        ("cat K AE T", "'AE' is not an ARPAbet phoneme"),  # a vowel has its stress
        ("cat K1 AE1 T", "'K1' is not an ARPAbet phoneme"),  # a consonant has none
        ("cat XX AE1 T", "'XX' is not an ARPAbet phoneme"),
        ("cat(b) K AE1 T", "'cat\\(b\\)' is not a word or a word's further pronunciation"),
        (";;; # CMUdict  --  Major Version: 0.07", "a ';;;' comment, as the old cmudict-0.7b writes them"),
    ],
)
def test_a_line_that_is_not_a_word_and_its_phonemes_is_refused_by_file_and_line(tmp_path, line, said):
    path = write_dict(tmp_path, ["a AH0", "", line])
    if said is None:
        assert read_cmudict(path)[1][-1] == "K AE1 T"
        return
    with pytest.raises(ValueError, match=rf"cmudict.dict, line 3: {said}"):
        read_cmudict(path)


def small(tmp_path, **kwargs) -> CMUDictDataModule:
    kwargs = {"src_lang": "en", "tgt_lang": "phonemes", "root": str(tmp_path / "cmudict"), **kwargs}
    return CMUDictDataModule(
        valid_size=40,
        test_size=40,
        download=False,
        tokenizer={"vocab_size": 40, "byte_fallback": False, "joint": False},
        cache_dir=str(tmp_path / "cache"),
        **kwargs,
    )


@pytest.mark.parametrize("gz", [False, True])
def test_no_word_and_no_pronunciation_is_in_two_splits(tmp_path, gz):
    write_dict(tmp_path / "cmudict", HEAD + generated(400), gz=gz)
    splits = {split: small(tmp_path).text(split) for split in ("train", "val", "test")}
    assert [len(splits[s][0]) for s in ("val", "test")] == [40, 40]
    assert sum(len(src) for src, _ in splits.values()) == 6 + 400  # each word once
    for side in (0, 1):  # words, then pronunciations
        seen = [set(splits[s][side]) for s in ("train", "val", "test")]
        assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    # the homophones "read" (its first pronunciation, R IY1 D, is its own) and "red"/"redd" (R EH1 D) together
    where = {word: s for s, (words, _) in splits.items() for word in words}
    assert where["red"] == where["redd"]


def test_other_directions_and_a_missing_dictionary_say_what_to_give(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"data.src_lang=en, data.tgt_lang=phonemes \(got 'en', 'de'\)"):
        small(tmp_path, tgt_lang="de")
    with pytest.raises(ValueError, match=r"got 'phonemes', 'en'\); the reverse has several right spellings"):
        small(tmp_path, src_lang="phonemes", tgt_lang="en")
    monkeypatch.delenv("NMT_DATA", raising=False)
    (tmp_path / "cmudict").mkdir()
    with pytest.raises(DataNotFoundError, match=r"data.root=.*cmudict holds none of these files: it should hold "
                       r"cmudict.dict"):  # fmt: skip
        small(tmp_path).text("train")
    with pytest.raises(DataNotFoundError, match=r"cmudict.dict"):
        small(tmp_path, root=None).text("train")


@pytest.mark.slow
def test_the_g2p_experiment_trains_and_scores_its_phoneme_outputs(tmp_path, capsys):
    """experiment=cmudict_g2p (the tests' tiny model, two epochs): its test CER and word accuracy are those of
    its saved outputs against ARPAbet references, and no note calls the phonemes a language to name."""
    write_dict(tmp_path / "data" / "cmudict", HEAD + generated(600))
    cfg = compose_train(
        "experiment=cmudict_g2p",
        "data=cmudict",  # (not the toy task of the tests' tiny overrides)
        f"data.root={tmp_path / 'data' / 'cmudict'}",
        "data.download=false",
        "data.valid_size=40",
        "data.test_size=40",
        "data.max_tokens=600",
        "trainer.max_epochs=2",
        "decode.beam_size=2",
        f"run_dir={tmp_path / 'run'}",
    )
    assert cfg.task._target_.endswith("TransliterationTask") and cfg.early_stopping.monitor == "val_cer"
    results = train(cfg)
    assert "names no language known here" not in capsys.readouterr().out
    assert unknown_language_note("data.tgt_lang", "phonemes") is None  # (and for a code of no language, a note)
    assert "names no language known here" in unknown_language_note("data.tgt_lang", "tgt")
    assert results["epochs"] == 2 and results["best_val_cer"] > 0
    folder = tmp_path / "run" / "eval" / "test_beam2"
    hypotheses = (folder / "hypotheses.txt").read_text().splitlines()
    references = (folder / "references.txt").read_text().splitlines()
    assert all(set(r.split()) <= PHONEMES for r in references) and len(references) == 40
    scores = transliteration_scores(hypotheses, references)
    assert results["test"]["cer"] == pytest.approx(scores["cer"]) and results["test"]["cer"] > 0
    assert results["test"]["word_acc"] == pytest.approx(scores["word_acc"])
    assert results["test"]["wer"] == pytest.approx(scores["wer"])  # phonemes as tokens: the PER


@pytest.mark.skipif(REAL_DICT is None, reason="the real cmudict.dict not available")
def test_the_real_dictionary_reads_whole():
    words, phones = read_cmudict(REAL_DICT)
    assert len(words) > 120_000 and len(set(words)) == len(words)
    assert dict(zip(words, phones, strict=True))["cat"] == "K AE1 T"
