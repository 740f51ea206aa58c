"""``data=lm_files``: a language model's corpus from one's own text files, one per split.

Each file holds one sentence (or paragraph) a line, its words separated by spaces, as Penn Treebank's are:
the vocabulary is the training file's words (at most ``max_vocab``, the rarer ones the unknown word), so
text should be tokenised first (e.g. ``sacremoses tokenize``), or "world." and "world" are two words."""

from nmt.data.file_specs import checked_corpus_name
from nmt.data.lm import LanguageModelDataModule, read_text_file

SPLITS = ("train", "val", "test")


class TextFilesDataModule(LanguageModelDataModule):
    """Word-level text for ``task=lm``: ``data.train``, ``data.val`` and ``data.test`` (paths, ``~`` and
    ``.gz`` allowed; a relative one from the folder the command runs in)."""

    name = "lm_files"

    def __init__(
        self,
        train: str | None = None,
        val: str | None = None,
        test: str | None = None,
        name: str | None = None,
        **kwargs,
    ) -> None:
        self.name = checked_corpus_name(name, TextFilesDataModule.name)  # a corpus of one's own: its conf/data file's
        given = {"train": train, "val": val, "test": test}
        missing = [f"data.{split}" for split, path in given.items() if path in (None, "")]
        if missing:
            raise ValueError(
                f"data=lm_files needs {', '.join(missing)}: a text file per split, one sentence a line "
                "(data.train=corpus/train.txt data.val=corpus/valid.txt data.test=corpus/test.txt)"
            )
        super().__init__(**kwargs)
        self.paths = given

    def read_split(self, split: str) -> list[str]:
        if split not in SPLITS:
            raise ValueError(f"data=lm_files has splits {list(SPLITS)}, not {split!r}")
        try:
            return read_text_file(self.paths[split])
        except (FileNotFoundError, IsADirectoryError, ValueError) as err:
            raise type(err)(f"data.{split}={err}") from None

    def describe(self) -> str:
        # no path: a run's data is its text (hashed), so the same files moved are the same corpus
        return f"{self.name} (block {self.block_size}, eval stride {self.eval_stride})"
