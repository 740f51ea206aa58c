"""Any parallel corpus from files: a pair of line-aligned files or one TSV file per split."""

from collections import Counter

from nmt.data.datamodule import ParallelDataModule
from nmt.data.file_specs import (
    SPEC_FORMS,
    checked_columns,
    checked_pair,
    checked_spec,
    missing_file,
    read_split_files,
    spec_paths,
)
from nmt.data.splits import check_split_sizes, pool_drops, seeded_split
from nmt.data.tokenizer import reading_form


class FilesDataModule(ParallelDataModule):
    """``data=files``: ``data.train`` / ``data.val`` / ``data.test`` each [src, tgt], a TSV or a prefix.
    Without val/test, they are split off the training data with ``split_seed``."""

    name = "files"

    def __init__(
        self,
        train,
        val=None,
        test=None,
        columns=(0, 1),
        valid_size: int = 1000,
        test_size: int = 1000,
        split_seed: int = 1,
        src_lang: str = "src",
        tgt_lang: str = "tgt",
        **kwargs,
    ) -> None:
        if train is None:
            raise ValueError(f"data=files needs data.train: {SPEC_FORMS}")
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.specs = {
            split: checked_spec(split, spec) for split, spec in (("train", train), ("val", val), ("test", test))
        }
        for split, spec in self.specs.items():
            checked_pair(split, spec, self.src_lang, self.tgt_lang)
        self.columns = checked_columns(columns)
        check_split_sizes(valid_size if val is None else None, test_size if test is None else None)
        self.valid_size, self.test_size, self.split_seed = valid_size, test_size, split_seed

    def official(self, split: str) -> bool:
        return split != "train" and self.specs.get(split) is not None  # given as files, not cut from train

    def read_split(self, split: str) -> tuple[list[str], list[str]]:
        if split not in self.specs:
            raise ValueError(f"data=files has splits ['train', 'val', 'test'], not {split!r}")
        # a missing file named first, not after a split of the others: for training, every split given; for an
        # evaluation, the file it reads (the training files may be gone where a finished run is scored)
        needed = (
            ("train", "val", "test") if split == "train" else (split if self.specs[split] is not None else "train",)
        )
        for given in needed:
            for path in spec_paths(self.specs[given], self.src_lang, self.tgt_lang):
                if not path.exists():
                    raise missing_file(given, self.specs[given], path, self.src_lang, self.tgt_lang)
        if self.specs["val"] is None or self.specs["test"] is None:
            src, tgt = read_split_files(self.specs["train"], self.src_lang, self.tgt_lang, self.columns)
            reading = reading_form(self.tokenizer_settings.normalization)  # sentences the model reads alike
            splits = seeded_split(
                src,
                tgt,
                self.valid_size if self.specs["val"] is None else 0,
                self.test_size if self.specs["test"] is None else 0,
                self.split_seed,
                reading=reading,
            )
            drops = self.dropped.setdefault("train", Counter())  # the pool's, in the data report (set, not added:
            drops["empty"], drops["duplicate"] = pool_drops(src, tgt, reading)  # this may run once per split)
            if self.specs[split] is None or split == "train":
                return splits[split]
        return read_split_files(self.specs[split], self.src_lang, self.tgt_lang, self.columns)
