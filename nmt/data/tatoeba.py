"""Tatoeba sentence pairs in manythings.org's format: ``English<TAB>Other[<TAB>attribution]``."""

import zipfile
from pathlib import Path

from nmt.data.sources import locate_or_extract
from nmt.data.text_io import read_lines
from nmt.data.unsplit import UnsplitCorpusDataModule

MANYTHINGS = "https://www.manythings.org/anki"
# language code -> (manythings file stem, folder name under $NMT_DATA)
TATOEBA = {"de": ("deu", "tatoeba_deu_eng"), "zh": ("cmn", "tatoeba_cmn_eng")}


def read_manythings(path: Path) -> tuple[list[str], list[str]]:
    """(english, other) from a manythings file; a line without a tab is an error naming file and line."""
    english, other = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise ValueError(f"{path}, line {number}: expected 'English<TAB>translation[<TAB>attribution]'")
        english.append(fields[0].strip())
        other.append(fields[1].strip())
    return english, other


def locate_tatoeba(lang: str, root, cache_dir, download: bool) -> Path:
    """The manythings text file for ``lang``: ``<stem>.txt`` (or ``.txt.gz``), or the upstream zip
    (extracted into the cache), from data.root, $NMT_DATA/<folder> or the cache, the first place holding
    either; otherwise the zip downloaded."""
    stem, folder = TATOEBA[lang]
    name, archive = f"{stem}.txt", f"{stem}-eng.zip"

    def extract(path: Path, target: Path) -> None:
        with zipfile.ZipFile(path) as bundle:
            bundle.extract(name, target)

    found = locate_or_extract(
        folder,
        [name],
        archive,
        extract,
        root,
        cache_dir,
        url=f"{MANYTHINGS}/{archive}",
        download=download,
        suffixes=("", ".gz"),
    )
    return found / name if (found / name).is_file() else found / f"{name}.gz"


class TatoebaDataModule(UnsplitCorpusDataModule):
    """``data=tatoeba_de_en`` (and the ``tatoeba`` source of ``data=zh_en``): one direction of a
    manythings file, deduplicated and split with a seed."""

    name = "tatoeba"
    translations = True

    def __init__(self, root: str | None = None, download: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        other = self.tgt_lang if self.src_lang == "en" else self.src_lang
        if other == "zh" and "en" in (self.src_lang, self.tgt_lang):  # its own module segments the Chinese side
            raise ValueError(
                f"data.src_lang={self.src_lang!r}, data.tgt_lang={self.tgt_lang!r}: Tatoeba Chinese-English is "
                "data=zh_en (data.source=tatoeba, the default), which segments Chinese with jieba; this module "
                "reads German-English"
            )
        if "en" not in (self.src_lang, self.tgt_lang) or other not in TATOEBA:
            raise ValueError(
                "data=tatoeba_de_en reads Tatoeba's German-English pairs (Chinese-English: data=zh_en); "
                f"got data.src_lang={self.src_lang!r}, data.tgt_lang={self.tgt_lang!r}"
            )
        self.root, self.download, self.other = root, download, other

    def load_pairs(self) -> tuple[list[str], list[str]]:
        english, other = read_manythings(locate_tatoeba(self.other, self.root, self.cache_dir, self.download))
        return (english, other) if self.src_lang == "en" else (other, english)
