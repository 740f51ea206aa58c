"""A deterministic toy translation task the project generates itself (no download).

Source sentences are random strings of English words from a 20-word lexicon (numbers, colours, a few
nouns); the target is each word translated into German, in reverse order ("one two three" -> "drei zwei
eins"). Learning it needs a lexicon and long-range reordering through attention, yet a tiny model masters
it in minutes on a CPU.
"""

import random

from nmt.data.datamodule import ParallelDataModule

LEXICON = {
    "zero": "null",
    "one": "eins",
    "two": "zwei",
    "three": "drei",
    "four": "vier",
    "five": "fünf",
    "six": "sechs",
    "seven": "sieben",
    "eight": "acht",
    "nine": "neun",
    "ten": "zehn",
    "eleven": "elf",
    "twelve": "zwölf",
    "red": "rot",
    "green": "grün",
    "blue": "blau",
    "cat": "Katze",
    "dog": "Hund",
    "house": "Haus",
    "tree": "Baum",
}


def toy_pairs(count: int, seed: int, min_len: int = 3, max_len: int = 9) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    words = sorted(LEXICON)
    src, tgt = [], []
    for _ in range(count):
        sentence = [rng.choice(words) for _ in range(rng.randint(min_len, max_len))]
        src.append(" ".join(sentence))
        tgt.append(" ".join(LEXICON[w] for w in reversed(sentence)))
    return src, tgt


class ToyDataModule(ParallelDataModule):
    """``data=toy``: sizes and lengths configurable, the same corpus for the same settings."""

    name = "toy"

    def __init__(
        self,
        train_size: int = 4000,
        val_size: int = 200,
        test_size: int = 200,
        min_words: int = 3,
        max_words: int = 9,
        **kwargs,
    ) -> None:
        for key, lang in (("src_lang", "en"), ("tgt_lang", "de")):
            # the pairs are English words and German ones, whatever is given: another code only
            # relabelled the data and changed how the references are tokenised for BLEU
            if kwargs.get(key, lang) != lang:
                raise ValueError(
                    f"data.{key}={kwargs[key]}: the toy task is English words to German ones "
                    f"({key} {lang}); leave it out"
                )
            kwargs[key] = lang
        super().__init__(**kwargs)
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.min_words, self.max_words = min_words, max_words

    def read_split(self, split: str) -> tuple[list[str], list[str]]:
        if split not in self.sizes:
            raise ValueError(f"toy data has splits {sorted(self.sizes)}, not {split!r}")
        # the corpus seed is fixed per split (not the run seed): every run sees the same data
        offset = {"train": 0, "val": 1, "test": 2}[split]
        return toy_pairs(self.sizes[split], 1234 + offset, self.min_words, self.max_words)
