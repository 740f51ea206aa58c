"""Any parallel corpus from files: per split a pair of line-aligned files, a TSV file or a prefix; the
training split may be several such corpora, named."""

from collections import Counter
from collections.abc import Mapping

from nmt.data.datamodule import ParallelDataModule
from nmt.data.file_specs import (
    CORPORA_FORM,
    SPEC_FORMS,
    checked_columns,
    checked_corpus_name,
    checked_pair,
    checked_spec,
    corpora,
    missing_file,
    read_split_files,
    spec_paths,
)
from nmt.data.splits import check_split_sizes, pool_drops, read_pairs, seeded_split
from nmt.data.tokenizer import reading_form


class FilesDataModule(ParallelDataModule):
    """``data=files``: ``data.train`` / ``data.val`` / ``data.test`` each [src, tgt], a TSV or a prefix;
    ``data.train`` may be ``{name: files, ...}``, several corpora read one after the other (the data report
    gives each one's pairs), and ``upsample`` ({name: N}) repeats a corpus's training pairs N times (fairseq's
    --upsample-primary, OpenNMT-py's corpus weights as whole numbers; the tokenizers learn from each pair
    once). Without val/test, they are split off
    the training data with ``split_seed`` (before any repeat: a repeated pair is never also a test pair)."""

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
        upsample=None,
        name: str | None = None,
        **kwargs,
    ) -> None:
        self.name = checked_corpus_name(name, FilesDataModule.name)  # a corpus of one's own: its conf/data file's
        if train is None:
            raise ValueError(f"data=files needs data.train: {SPEC_FORMS}, or {CORPORA_FORM}")
        super().__init__(src_lang=src_lang, tgt_lang=tgt_lang, **kwargs)
        self.specs = {
            split: checked_spec(split, spec) for split, spec in (("train", train), ("val", val), ("test", test))
        }
        for split, spec in self.specs.items():
            checked_pair(split, spec, self.src_lang, self.tgt_lang)
        self.columns = checked_columns(columns)
        check_split_sizes(valid_size if val is None else None, test_size if test is None else None)
        self.valid_size, self.test_size, self.split_seed = valid_size, test_size, split_seed
        self.corpus_pairs: dict[str, int] = {}  # several training corpora: each one's pairs, once read
        self.upsample = checked_upsample(upsample, self.specs["train"])
        self._origins: list[str] = []  # with upsample: the corpus of each training pair as read
        self._once: tuple[list[str], list[str]] = ([], [])  # the training pairs before any repeat
        self._carved_said = False
        self._seeded: tuple | None = None  # the pool read, its reading and its seeded split

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
            for key, files in corpora(given, self.specs[given]):
                for path in spec_paths(files, self.src_lang, self.tgt_lang):
                    if not path.exists():
                        raise missing_file(key, files, path, self.src_lang, self.tgt_lang)
                    if path.is_dir():
                        raise ValueError(
                            f"data.{key}: {path} is a folder; give a file of the split's sentences (or a prefix: "
                            f"{path}/train for {path}/train.{self.src_lang} and .{self.tgt_lang})"
                        )
        if self.specs["val"] is None or self.specs["test"] is None:
            if self._seeded is None:  # once: each split reads it (its warnings said once, not per split)
                src, tgt = self._read_train()
                reading = reading_form(self.tokenizer_settings.normalization)  # sentences the model reads alike
                splits = seeded_split(
                    src,
                    tgt,
                    self.valid_size if self.specs["val"] is None else 0,
                    self.test_size if self.specs["test"] is None else 0,
                    self.split_seed,
                    reading=reading,
                )
                drops = self.dropped.setdefault("train", Counter())  # the pool's, in the data report
                drops["empty"], drops["duplicate"] = pool_drops(src, tgt, reading)
                self._seeded = (src, tgt, reading, splits)
            src, tgt, reading, splits = self._seeded
            if split == "train":
                if not self._carved_said:  # the training split is read again by later stages: said once
                    _say_carved(splits, self.specs)
                    self._carved_said = True
                self._once = splits["train"]
                return self._repeated(*splits["train"], pool=(src, tgt), reading=reading)
            if self.specs[split] is None:
                return splits[split]
        if split == "train":
            src, tgt = self._read_train()
            self._once = (src, tgt)
            return self._repeated(src, tgt)
        return read_split_files(self.specs[split], self.src_lang, self.tgt_lang, self.columns)

    def _repeated(self, src: list[str], tgt: list[str], pool=None, reading=None) -> tuple[list[str], list[str]]:
        """The training pairs with each pair of an upsampled corpus N times where it stands. ``src``, ``tgt``:
        the pairs as read (each pair's corpus known), or the training split cut from ``pool``, the pairs as
        read, whose copies the split kept once (as ``reading`` reads them): such a pair takes the largest N
        of the corpora that held it. A pair with an empty side is not repeated: training drops it."""
        if not self.upsample:
            return src, tgt
        key = (lambda pairs: read_pairs(pairs, reading)) if reading else list
        if pool is None:
            times = [self.upsample.get(name, 1) for name in self._origins]
        else:
            most: dict[tuple[str, str], int] = {}
            for read, name in zip(key(list(zip(*pool, strict=True))), self._origins, strict=True):
                most[read] = max(most.get(read, 1), self.upsample.get(name, 1))
            times = [most.get(read, 1) for read in key(list(zip(src, tgt, strict=True)))]
        pairs = [
            pair
            for pair, n in zip(zip(src, tgt, strict=True), times, strict=True)
            for _ in range(n if pair[0].strip() and pair[1].strip() else 1)
        ]
        return [s for s, _ in pairs], [t for _, t in pairs]

    def tokenizer_text(self) -> tuple[list[str], list[str]]:
        """With upsample, the training pairs once each (OpenNMT-py's vocabulary and fairseq's BPE likewise
        count a corpus as it is, whatever its weight), empty pairs dropped as training drops them."""
        src, tgt = self.text("train")
        if not self.upsample:
            return src, tgt
        once = [(s, t) for s, t in zip(*self._once, strict=True) if s.strip() and t.strip()]
        return [s for s, _ in once], [t for _, t in once]

    def _read_train(self) -> tuple[list[str], list[str]]:
        """The training files' pairs, each corpus's count kept for the data report (as read: before empty
        pairs are dropped and any validation or test pairs are split off)."""
        src, tgt, self.corpus_pairs, origins = [], [], {}, []
        for key, files in corpora("train", self.specs["train"]):
            more_src, more_tgt = read_split_files(files, self.src_lang, self.tgt_lang, self.columns)
            if not any(s.strip() and t.strip() for s, t in zip(more_src, more_tgt, strict=True)):
                # said here, naming the file: the tokenizer's training, which met it first, knew only the key
                named = ", ".join(str(p) for p in spec_paths(files, self.src_lang, self.tgt_lang))
                held = f"{len(more_src)} pair(s), each with an empty side" if more_src else "no line"
                raise ValueError(f"data.{key}: {named} holds {held}: give a training file that holds sentences")
            src += more_src
            tgt += more_tgt
            if isinstance(self.specs["train"], dict):
                name = key.removeprefix("train.")
                self.corpus_pairs[name] = len(more_src)
                if self.upsample:
                    origins += [name] * len(more_src)
        self._origins = origins
        return src, tgt

    def report(self) -> dict:
        report = super().report()
        if self.corpus_pairs:
            report["train"]["corpora_read"] = dict(self.corpus_pairs)
        if self.upsample:
            report["train"]["upsampled"] = dict(self.upsample)
        return report


def _say_carved(splits: dict, specs: dict) -> None:
    """The validation and test pairs a seeded split took out of data.train (those not given as files), in one
    line: a small corpus lost most of its training pairs to the defaults (1,000 each) without a word."""
    carved = {name: len(splits[name][0]) for name in ("val", "test") if specs[name] is None}
    if not any(carved.values()):  # test_size=0 beside a validation file: nothing taken
        return
    kept = len(splits["train"][0])
    keys = {"val": "data.valid_size", "test": "data.test_size"}
    said = " and ".join(
        f"{n} {'validation' if name == 'val' else 'test'} pairs ({keys[name]})" for name, n in carved.items()
    )
    share = sum(carved.values()) / max(kept + sum(carved.values()), 1)
    print(
        f"{'warning' if share > 0.5 else 'note'}: data.{'/'.join(carved)} not given: {said} were split off data.train, "
        f"leaving {kept} to train ({share:.0%} set aside); give {' and '.join(f'data.{n}=' for n in carved)} "
        f"{'files' if len(carved) > 1 else 'a file'}, or lower {'those sizes' if len(carved) > 1 else 'its size'}"
    )


def checked_upsample(upsample, train_spec) -> dict[str, int]:
    """data.upsample as {corpus name: times}, each a corpus of data.train and a whole number >= 1 (1: as
    read; a corpus not named: once), or ValueError naming the key."""
    if upsample is None:
        return {}
    if not isinstance(upsample, Mapping):
        raise ValueError(
            f"data.upsample={upsample!r}: {{corpus name: times, ...}}, e.g. 'data.upsample={{indomain: 3}}'"
        )
    if not isinstance(train_spec, dict):
        raise ValueError(
            f"data.upsample={dict(upsample)!r}: repeats corpora of data.train, which names one corpus here; name "
            f"several: {CORPORA_FORM}"
        )
    checked = {}
    for name, times in upsample.items():
        if str(name) not in train_spec:
            raise ValueError(f"data.upsample.{name}: not a corpus of data.train (its corpora: {', '.join(train_spec)})")
        if type(times) is not int or times < 1:
            raise ValueError(f"data.upsample.{name}={times!r}: the times its pairs are read, a whole number >= 1")
        checked[str(name)] = times
    return {name: n for name, n in checked.items() if n > 1}
