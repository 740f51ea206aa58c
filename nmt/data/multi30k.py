"""Multi30k task 1 (Elliott et al. 2016): image descriptions in en, de, fr, cs."""

from nmt.data.datamodule import ParallelDataModule
from nmt.data.sources import locate
from nmt.data.text_io import read_parallel

UPSTREAM = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
LANGUAGES = ("en", "de", "fr", "cs")
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2018_flickr", "test_2017_mscoco")


class Multi30kDataModule(ParallelDataModule):
    """``data=multi30k``: reads upstream-named ``{split}.{lang}.gz`` files (train, val, and the test set
    chosen by ``test_set``) from data.root, $NMT_DATA/multi30k, the cache, or a download."""

    name = "multi30k"
    translations = True

    def __init__(
        self,
        root: str | None = None,
        download: bool = True,
        test_set: str = "test_2016_flickr",
        src_lang: str = "en",
        tgt_lang: str = "de",
        **kwargs,
    ) -> None:
        for key, lang in (("data.src_lang", src_lang), ("data.tgt_lang", tgt_lang)):
            if lang not in LANGUAGES:
                raise ValueError(f"{key}={lang!r} is not a Multi30k language; choose from {list(LANGUAGES)}")
        if src_lang == tgt_lang:
            raise ValueError(f"data.src_lang and data.tgt_lang are both {src_lang!r}")
        if test_set not in TEST_SETS:
            raise ValueError(f"data.test_set={test_set!r} is not a Multi30k test set; choose from {list(TEST_SETS)}")
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.root, self.download, self.test_set = root, download, test_set
        # set by evaluate.py for a test set other than the run's: data.root need not hold it
        self.other_test_set = False

    def describe(self) -> str:
        return f"multi30k {self.src_lang}-{self.tgt_lang} (test: {self.test_set})"

    def official(self, split: str) -> bool:
        return split != "train"  # val and every test set are published files

    def _own_files(self) -> list[str]:
        """The files of the training and validation sets and the default test set, one copy of the corpus."""
        sets = ("train", "val", *([] if self.other_test_set else [self.test_set]))
        return [f"{name}.{lang}.gz" for name in sets for lang in (self.src_lang, self.tgt_lang)]

    def read_split(self, split: str) -> tuple[list[str], list[str]]:
        upstream = {"train": "train", "val": "val", "test": self.test_set}
        if split not in upstream:
            raise ValueError(f"Multi30k has splits {sorted(upstream)}, not {split!r}")
        files = [f"{upstream[split]}.{lang}.gz" for lang in (self.src_lang, self.tgt_lang)]
        folder = locate(
            "multi30k",
            files,
            root=self.root,
            cache_dir=self.cache_dir,
            url_for={f: f"{UPSTREAM}/{f}" for f in files},
            download=self.download,
            # a test set the root lacks (evaluate.py split=test_2017_flickr with the run's root, which held
            # its training sets) is looked for further on; the run's own sets must be there
            strict_root=split != "test" or not self.other_test_set,
            # the run's own splits come from one copy: $NMT_DATA/multi30k holding the training files and not
            # these was the cache's copy of them, mixed in
            corpus_files=[] if split == "test" and self.other_test_set else self._own_files(),
        )
        return read_parallel(folder / files[0], folder / files[1])
