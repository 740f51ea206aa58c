"""data=cmudict: the CMU Pronouncing Dictionary read as word -> phonemes pairs (variants, comments, bad lines),
split with no word and no pronunciation in two splits, found like the other corpora, and
experiment=cmudict_g2p training on a generated dictionary."""

import gzip
import os
import random
from pathlib import Path

import pytest

from nmt.data.cmudict import CMUDictDataModule, read_cmudict
from nmt.data.sources import DataNotFoundError
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, compose_train

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
    words, phones = read_cmudict(write_dict(tmp_path, HEAD), "all")
    assert list(zip(words, phones, strict=True))[1:3] == [("a", "AH0"), ("a", "EY1")]  # the variant's mark dropped
    assert len(words) == len(HEAD)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("cat K AE1 T", None),
        ("cat", "a word without phonemes"),
        ("cat K ae1 T", "'ae1' is not an ARPAbet phoneme"),
        ("cat K AE3 T", "'AE3' is not an ARPAbet phoneme"),
        ("cat\tK AE1 T", None),
    ],
)
def test_a_line_that_is_not_a_word_and_its_phonemes_is_refused_by_file_and_line(tmp_path, line, said):
    path = write_dict(tmp_path, ["a AH0", "", line])
    if said is None:
        assert read_cmudict(path)[1][-1] == "K AE1 T"
        return
    with pytest.raises(ValueError, match=rf"cmudict.dict, line 3: {said}; expected 'word PH PH ...'"):
        read_cmudict(path)
    with pytest.raises(ValueError, match=r"data.pronunciations='some' is not one of \['first', 'all'\]"):
        read_cmudict(path, "some")


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
def test_no_word_and_no_pronunciation_is_in_two_splits_and_the_reverse_direction_mirrors_it(tmp_path, gz):
    write_dict(tmp_path / "cmudict", HEAD + generated(400), gz=gz)
    forward, backward = small(tmp_path), small(tmp_path, src_lang="phonemes", tgt_lang="en")
    splits = {split: forward.text(split) for split in ("train", "val", "test")}
    assert [len(splits[s][0]) for s in ("val", "test")] == [40, 40]
    assert sum(len(src) for src, _ in splits.values()) == 6 + 400  # each word once
    for side in (0, 1):  # words, then pronunciations
        seen = [set(splits[s][side]) for s in ("train", "val", "test")]
        assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    # the homophones "read" (its first pronunciation, R IY1 D, is its own) and "red"/"redd" (R EH1 D) together
    where = {word: s for s, (words, _) in splits.items() for word in words}
    assert where["red"] == where["redd"]
    for split, (words, phones) in splits.items():
        assert backward.text(split) == (phones, words)


def test_other_languages_and_a_missing_dictionary_say_what_to_give(tmp_path, monkeypatch):
    with pytest.raises(
        ValueError, match=r"data.src_lang and data.tgt_lang are 'en' and 'phonemes' .*got 'en' and 'de'"
    ):
        small(tmp_path, tgt_lang="de")
    with pytest.raises(ValueError, match=r"data.pronunciations='every' is not one of \['first', 'all'\]"):
        small(tmp_path, pronunciations="every")
    monkeypatch.delenv("NMT_DATA", raising=False)
    (tmp_path / "cmudict").mkdir()
    with pytest.raises(DataNotFoundError, match=r"data.root=.*cmudict holds none of these files: it should hold "
                       r"cmudict.dict"):  # fmt: skip
        small(tmp_path).text("train")
    with pytest.raises(DataNotFoundError, match=r"cmudict.dict"):
        small(tmp_path, root=None).text("train")


def test_the_g2p_experiment_trains_and_scores_phoneme_strings(tmp_path):
    write_dict(tmp_path / "data" / "cmudict", HEAD + generated(300))
    cfg = compose_train(
        "experiment=cmudict_g2p",
        "data=cmudict",  # (not the toy task of the tests' tiny overrides)
        f"data.root={tmp_path / 'data' / 'cmudict'}",
        "data.download=false",
        "data.valid_size=30",
        "data.test_size=30",
        "data.max_tokens=600",
        "trainer.max_epochs=1",
        f"run_dir={tmp_path / 'run'}",
        *NO_FINAL_SCORES,
    )
    assert cfg.task._target_.endswith("TransliterationTask") and cfg.early_stopping.monitor == "val_cer"
    results = train(cfg)
    metrics = results["final_metrics"]
    assert results["epochs"] == 1 and metrics["val_cer"] > 0 and 0 <= metrics["val_word_acc"] <= 100
    assert results["best_val_cer"] == pytest.approx(metrics["val_cer"])


@pytest.mark.skipif(REAL_DICT is None, reason="the real cmudict.dict not available")
def test_the_real_dictionary_reads_whole():
    words, phones = read_cmudict(REAL_DICT)
    assert len(words) > 120_000 and len(set(words)) == len(words)
    assert dict(zip(words, phones, strict=True))["cat"] == "K AE1 T"
