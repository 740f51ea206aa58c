"""Tatoeba sentence pairs in manythings.org's format: ``English<TAB>Other[<TAB>attribution]``."""

import zipfile
from pathlib import Path

from nmt.data.sources import DataNotFoundError, locate, read_lines
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
    """The manythings text file for ``lang``: ``<stem>.txt`` or ``<stem>.txt.gz`` in data.root,
    $NMT_DATA/<folder>, the cache; else the upstream zip, downloaded and extracted into the cache."""
    stem, folder = TATOEBA[lang]
    name = f"{stem}.txt"
    try:
        found = locate(folder, [name], root, cache_dir, download=False, suffixes=("", ".gz"))
        return found / name if (found / name).is_file() else found / f"{name}.gz"
    except DataNotFoundError:
        if not download:
            raise
    archive = f"{stem}-eng.zip"
    try:
        folder_path = locate(folder, [archive], root, cache_dir, url_for={archive: f"{MANYTHINGS}/{archive}"})
    except DataNotFoundError as err:
        raise DataNotFoundError(f"{err}\nOr put {name} (the text file inside the zip; .gz allowed) there.") from None
    with zipfile.ZipFile(folder_path / archive) as bundle:
        bundle.extract(f"{stem}.txt", Path(cache_dir).expanduser() / folder)
    return Path(cache_dir).expanduser() / folder / f"{stem}.txt"


class TatoebaDataModule(UnsplitCorpusDataModule):
    """``data=tatoeba_de_en`` (and the ``tatoeba`` source of ``data=zh_en``): one direction of a
    manythings file, deduplicated and split with a seed."""

    name = "tatoeba"

    def __init__(self, root: str | None = None, download: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        other = self.tgt_lang if self.src_lang == "en" else self.src_lang
        if "en" not in (self.src_lang, self.tgt_lang) or other not in TATOEBA:
            raise ValueError(
                f"Tatoeba pairs are English with one of {sorted(TATOEBA)}; "
                f"got data.src_lang={self.src_lang!r}, data.tgt_lang={self.tgt_lang!r}"
            )
        self.root, self.download, self.other = root, download, other

    def load_pairs(self) -> tuple[list[str], list[str]]:
        english, other = read_manythings(locate_tatoeba(self.other, self.root, self.cache_dir, self.download))
        return (english, other) if self.src_lang == "en" else (other, english)
