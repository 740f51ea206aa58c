"""Base class for corpora that come without a train/valid/test split."""

from collections import Counter

from nmt.data.datamodule import ParallelDataModule
from nmt.data.splits import check_split_sizes, pool_drops, seeded_split
from nmt.data.tokenizer import reading_form


class UnsplitCorpusDataModule(ParallelDataModule):
    """A corpus read as one list of pairs (:meth:`load_pairs`), split by :func:`seeded_split` with
    ``split_seed`` (not the training seed: every run of a sweep sees the same split)."""

    def __init__(
        self,
        valid_size: int = 2000,
        test_size: int = 2000,
        max_samples: int | None = None,
        split_seed: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        check_split_sizes(valid_size, test_size, max_samples)
        self.valid_size, self.test_size = valid_size, test_size
        self.max_samples, self.split_seed = (None if max_samples is None else int(max_samples)), split_seed
        self._splits: dict | None = None

    def load_pairs(self) -> tuple[list[str], list[str]]:
        """All (source, target) pairs of the corpus, in the configured direction."""
        raise NotImplementedError

    def read_split(self, split: str) -> tuple[list[str], list[str]]:
        if split not in ("train", "val", "test"):
            raise ValueError(f"{self.name} has splits ['train', 'val', 'test'], not {split!r}")
        if self._splits is None:
            src, tgt = self.load_pairs()
            reading = reading_form(self.tokenizer_settings.normalization)  # sentences the model reads alike
            self._splits = seeded_split(
                src, tgt, self.valid_size, self.test_size, self.split_seed, self.max_samples, reading
            )
            drops = self.dropped.setdefault("train", Counter())  # the pool's, in the data report (set, not added:
            drops["empty"], drops["duplicate"] = pool_drops(src, tgt, reading)  # this may run once per split)
        return self._splits[split]

    def describe(self) -> str:
        return (
            f"{self.name} {self.src_lang}-{self.tgt_lang} (seeded split {self.split_seed}: "
            f"{self.valid_size} val / {self.test_size} test)"
        )
