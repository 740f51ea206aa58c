"""The CMU Pronouncing Dictionary (``cmudict.dict``): English words and their ARPAbet pronunciations, the
usual corpus of grapheme-to-phoneme conversion (``experiment=cmudict_g2p``, ``task=transliteration``).

A line is ``word PH PH ...``, a further pronunciation of a word ``word(2) PH ...``, and ``# ...`` a comment
(``d'artagnan D AH0 R T AE1 NG Y AH0 N # foreign french``). Each pair is a word, as written (lowercase, with
its apostrophes, hyphens and dots), and its phonemes separated by spaces, stress digits kept (``K AE1 T``).
"""

import re
from pathlib import Path

from nmt.data.sources import locate, read_lines
from nmt.data.unsplit import UnsplitCorpusDataModule

UPSTREAM = "https://raw.githubusercontent.com/cmusphinx/cmudict/master"
FILENAME = "cmudict.dict"
# ARPAbet as the dictionary writes it: 39 phonemes, vowels with a stress digit (0 none, 1 primary, 2 secondary)
PHONEME = re.compile(r"[A-Z]{1,2}[012]?")
_VARIANT = re.compile(r"\((\d+)\)$")
PRONUNCIATIONS = ("first", "all")


def read_cmudict(path: Path, pronunciations: str = "first") -> tuple[list[str], list[str]]:
    """(words, pronunciations) from a ``cmudict.dict`` file. ``first``: each word with its first
    pronunciation (the dictionary lists the most common first), so that each test word has the one reference
    its score is counted against; ``all``: every pronunciation, a pair each. A line that is not ``word PH
    ...`` with ARPAbet phonemes is an error naming the file and line."""
    if pronunciations not in PRONUNCIATIONS:
        raise ValueError(f"data.pronunciations={pronunciations!r} is not one of {list(PRONUNCIATIONS)}")
    words, phones, seen = [], [], set()
    for number, line in enumerate(read_lines(path), start=1):
        text = line.split("#", 1)[0].split()
        if not text:
            continue
        word, sounds = text[0], text[1:]
        bad = [p for p in sounds if not PHONEME.fullmatch(p)]
        if not sounds or bad:
            what = f"{bad[0]!r} is not an ARPAbet phoneme" if bad else "a word without phonemes"
            raise ValueError(f"{path}, line {number}: {what}; expected 'word PH PH ...' (e.g. 'cat K AE1 T')")
        word = _VARIANT.sub("", word)
        if pronunciations == "first" and word in seen:
            continue
        seen.add(word)
        words.append(word)
        phones.append(" ".join(sounds))
    return words, phones


class CMUDictDataModule(UnsplitCorpusDataModule):
    """``data=cmudict``: words -> phonemes (``src_lang: en``, ``tgt_lang: phonemes``; the reverse direction,
    phonemes -> spelling, with the two swapped), split with ``split_seed`` so that no word and no
    pronunciation is in two splits (homophones such as "their" and "there" stay together). From data.root,
    $NMT_DATA/cmudict, the cache, or a download of the upstream file."""

    name = "cmudict"
    # a word and its pronunciation are one text in two forms: task=summarization refuses it, as translations
    translations = True
    pairs_are = "words and their pronunciations"

    def __init__(self, root: str | None = None, download: bool = True, pronunciations: str = "first", **kwargs) -> None:
        super().__init__(**kwargs)
        sides = {self.src_lang, self.tgt_lang}
        if sides != {"en", "phonemes"}:
            raise ValueError(
                f"data=cmudict pairs English words with their phonemes: data.src_lang and data.tgt_lang are 'en' "
                f"and 'phonemes' (either way round); got {self.src_lang!r} and {self.tgt_lang!r}"
            )
        if pronunciations not in PRONUNCIATIONS:
            raise ValueError(f"data.pronunciations={pronunciations!r} is not one of {list(PRONUNCIATIONS)}")
        self.root, self.download, self.pronunciations = root, download, pronunciations

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
        path = folder / FILENAME if (folder / FILENAME).is_file() else folder / f"{FILENAME}.gz"
        words, phones = read_cmudict(path, self.pronunciations)
        return (words, phones) if self.src_lang == "en" else (phones, words)
