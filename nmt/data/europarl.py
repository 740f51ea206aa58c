"""Europarl v7 (Koehn 2005) for one language pair, from statmt.org's release archive."""

import tarfile
from pathlib import Path

from nmt.data.sources import locate_or_extract
from nmt.data.text_io import read_parallel
from nmt.data.unsplit import UnsplitCorpusDataModule

RELEASE = "https://www.statmt.org/europarl/v7"
PAIRS = (
    "bg-en",
    "cs-en",
    "da-en",
    "de-en",
    "el-en",
    "es-en",
    "et-en",
    "fi-en",
    "fr-en",
    "hu-en",
    "it-en",
    "lt-en",
    "lv-en",
    "nl-en",
    "pl-en",
    "pt-en",
    "ro-en",
    "sk-en",
    "sl-en",
    "sv-en",
)


class EuroparlDataModule(UnsplitCorpusDataModule):
    """``data=europarl``: ``europarl-v7.<pair>.<lang>`` files (or ``.gz``), or the release archive ``<pair>.tgz``
    (extracted into the cache), from data.root, $NMT_DATA/europarl or the cache, the first place holding
    either; otherwise the archive downloaded. Seeded, deduplicated split; ``max_samples`` (e.g. 200000)
    caps its size."""

    name = "europarl"
    translations = True

    def __init__(
        self, root: str | None = None, download: bool = True, src_lang: str = "de", tgt_lang: str = "en", **kwargs
    ) -> None:
        pair = "-".join(sorted((src_lang, tgt_lang), key=lambda lang: lang == "en"))
        if pair not in PAIRS:
            raise ValueError(f"Europarl v7 has no {src_lang}-{tgt_lang} corpus; its pairs are {list(PAIRS)}")
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.root, self.download, self.pair = root, download, pair

    def load_pairs(self) -> tuple[list[str], list[str]]:
        names = [f"europarl-v7.{self.pair}.{lang}" for lang in (self.src_lang, self.tgt_lang)]
        archive = f"{self.pair}.tgz"
        folder = locate_or_extract(
            "europarl",
            names,
            archive,
            lambda path, target: extract(path, names, target),
            self.root,
            self.cache_dir,
            url=f"{RELEASE}/{archive}",
            download=self.download,
            suffixes=("", ".gz"),
        )
        # the suffix under which both sides are there (locate_or_extract's rule; a .gz beside a plain file)
        suffix = next(x for x in ("", ".gz") if all((folder / (name + x)).is_file() for name in names))
        src, tgt = read_parallel(folder / (names[0] + suffix), folder / (names[1] + suffix))
        # stripped, as the readers of the other unsplit corpora (Tatoeba, News Commentary) strip their fields: a
        # sentence with a trailing space is the same sentence to the tokenizer, and the split (which compares
        # text) kept its copies in two splits
        return [line.strip() for line in src], [line.strip() for line in tgt]


def extract(archive: Path, names: list[str], target: Path) -> None:
    """Extract the members called ``names`` (at any depth) of a .tgz into ``target``."""
    with tarfile.open(archive, "r:gz") as bundle:
        members = {Path(m.name).name: m for m in bundle.getmembers() if m.isfile()}
        for name in names:
            if name not in members:
                raise ValueError(f"{archive} has no member {name} (it holds {sorted(members)[:5]})")
            with bundle.extractfile(members[name]) as source:
                (target / name).write_bytes(source.read())
