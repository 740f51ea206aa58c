"""The CMU Pronouncing Dictionary (``cmudict.dict``): English words and their ARPAbet pronunciations, the
usual corpus of grapheme-to-phoneme conversion (``experiment=cmudict_g2p``, ``task=transliteration``).

A line is ``word PH PH ...``, a further pronunciation of a word ``word(2) PH ...``, and ``# ...`` a comment
(``d'artagnan D AH0 R T AE1 NG Y AH0 N # foreign french``). Each pair is a word, as written (lowercase, with
its apostrophes, hyphens and dots), and its first listed pronunciation, phonemes separated by spaces with their
stress digits (``K AE1 T``): one reference a word, as the task scores it (a further pronunciation would be
a second pair whose output can match only one of the two).
"""

import re
from collections.abc import Iterator
from pathlib import Path

from nmt.data.sources import locate
from nmt.data.text_io import read_lines
from nmt.data.unsplit import UnsplitCorpusDataModule

UPSTREAM = "https://raw.githubusercontent.com/cmusphinx/cmudict/master"
FILENAME = "cmudict.dict"
# ARPAbet as the dictionary writes it: 15 vowels, each with its stress (0 none, 1 primary, 2 secondary), and
# 24 consonants, without
VOWELS = "AA AE AH AO AW AY EH ER EY IH IY OW OY UH UW".split()
CONSONANTS = "B CH D DH F G HH JH K L M N NG P R S SH T TH V W Y Z ZH".split()
PHONEMES = frozenset([f"{v}{stress}" for v in VOWELS for stress in "012"] + CONSONANTS)
_VARIANT = re.compile(r"\(\d+\)$")


def read_entries(path: Path) -> Iterator[tuple[str, str]]:
    """Every (word, pronunciation) of a ``cmudict.dict`` file in its order, a word's further pronunciations
    included (``word(2)`` read as ``word``), phonemes joined by spaces. A line that is not ``word PH PH ...``
    with ARPAbet phonemes is an error naming the file and line."""
    for number, line in enumerate(read_lines(path), start=1):
        text = line.split("#", 1)[0].split()
        if not text:
            continue
        if text[0].startswith(";;;"):
            raise ValueError(
                f"{path}, line {number}: a ';;;' comment, as the old cmudict-0.7b writes them (with uppercase words): "
                f"give the {FILENAME} of github.com/cmusphinx/cmudict (lowercase words, '#' comments)"
            )
        word, sounds = _VARIANT.sub("", text[0]), text[1:]
        bad = [p for p in sounds if p not in PHONEMES]
        problem = (
            "a word without phonemes"
            if not sounds
            else f"{bad[0]!r} is not an ARPAbet phoneme (a vowel with its stress 0-2: AE1; a consonant without: K)"
            if bad
            else f"{text[0]!r} is not a word or a word's further pronunciation ('word(2)')"
            if "(" in word or ")" in word
            else None
        )
        if problem:
            raise ValueError(f"{path}, line {number}: {problem}; expected 'word PH PH ...' (e.g. 'cat K AE1 T')")
        yield word, " ".join(sounds)


def read_cmudict(path: Path) -> tuple[list[str], list[str]]:
    """(words, pronunciations) from a ``cmudict.dict`` file, each word once with its first listed
    pronunciation (:func:`read_entries` says which lines are refused)."""
    first: dict[str, str] = {}
    for word, sounds in read_entries(path):
        first.setdefault(word, sounds)
    return list(first), list(first.values())


class CMUDictDataModule(UnsplitCorpusDataModule):
    """``data=cmudict``: English words -> phonemes, split with ``split_seed`` so that no word and no
    reference pronunciation is in two splits (homophones such as "red" and "redd" stay together; a word's
    further pronunciations, not references, are not kept apart). From data.root, $NMT_DATA/cmudict, the
    cache, or a download of the upstream file."""

    name = "cmudict"
    # a word and its pronunciation are one text in two forms: task=summarization refuses it, as translations
    translations = True
    pairs_are = "words and their pronunciations"

    def __init__(self, root: str | None = None, download: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        if (self.src_lang, self.tgt_lang) != ("en", "phonemes"):
            raise ValueError(
                f"data=cmudict converts English words to phonemes: data.src_lang=en, data.tgt_lang=phonemes (got "
                f"{self.src_lang!r}, {self.tgt_lang!r}); the reverse has several right spellings of one "
                "pronunciation (laurie, lori, lorry), which one reference a pair cannot score"
            )
        self.root, self.download = root, download

    def load_pairs(self) -> tuple[list[str], list[str]]:
        folder = locate(
            "cmudict",
            [FILENAME],
            self.root,
            self.cache_dir,
            url_for={FILENAME: f"{UPSTREAM}/{FILENAME}"},
            download=self.download,
            suffixes=("", ".gz"),
        )
        return read_cmudict(folder / FILENAME if (folder / FILENAME).is_file() else folder / f"{FILENAME}.gz")
