"""Language-model data: each split is one stream of word ids, cut into windows of ``block_size`` tokens.

The stream of a split is ``</s> w w w </s> w w </s> ...``: every line ends with the end-of-sentence id,
and one more at the start gives the first word a context. Every token after the first is a target
exactly once, so perplexity counts words plus sentence ends (the convention of Mikolov's PTB numbers).

Evaluation windows may overlap (``eval_stride`` < ``block_size``): each then scores only the targets that
the previous window did not, so each target is still scored once, with at least
``block_size - eval_stride`` tokens of context (the sliding-window perplexity).
"""

import hashlib
import io
import logging
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from nmt.data.batching import FixedBatchSampler
from nmt.data.loaders import STAGE_SPLITS, sharded_loader
from nmt.data.text_io import read_lines
from nmt.data.tokenizer import EOS_ID, PAD_ID, UNK_ID, content_hash
from nmt.data.vocab import SPECIALS, UNK_WORD, WordVocabulary
from nmt.utils.io import atomic_write_bytes

log = logging.getLogger(__name__)


def is_file_split(split: str) -> bool:
    return split.startswith("files:")


def read_text_file(path: str) -> list[str]:
    """The non-empty lines of a text file (``.gz`` too), one sentence a line, words split by spaces; a missing
    file or one without a word is one line naming it."""
    file = Path(path).expanduser()
    if file.is_dir():
        raise IsADirectoryError(f"{path}: a folder; give a text file, one sentence a line")
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no such file (a text file, one sentence a line)")
    lines = [line for line in read_lines(file) if line.strip()]
    if not lines:
        raise ValueError(f"{path}: holds no word; give a text that holds words")
    return lines


def _digest(stream: torch.Tensor) -> str:
    """The SHA-256 of an id stream, kept beside it in its cache file."""
    return hashlib.sha256(stream.contiguous().numpy().tobytes()).hexdigest()


def windows(stream_len: int, block_size: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first_scored) per window over a stream of ``stream_len`` ids: inputs are
    stream[begin:end], targets stream[begin+1:end+1], and targets at stream positions > first_scored are
    the ones this window scores. Together the windows score positions 1..stream_len-1 once each."""
    if not (isinstance(stride, int) and not isinstance(stride, bool) and 0 < stride <= block_size):
        raise ValueError(f"data.eval_stride={stride} must be in [1, data.block_size={block_size}]")
    last = stream_len - 1  # the last target position
    result, scored_to, end = [], 0, min(block_size, last)
    while scored_to < last:
        begin = max(end - block_size, 0)
        result.append((begin, end, scored_to))
        scored_to = end
        end = min(end + stride, last)
    return result


class BlockDataset(Dataset):
    """Windows of a stream: item i is (inputs, targets) with targets outside the scored part set to PAD."""

    def __init__(self, stream: torch.Tensor, block_size: int, stride: int) -> None:
        self.stream = stream
        self.windows = windows(len(stream), block_size, stride)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        begin, end, scored_to = self.windows[index]
        inputs = self.stream[begin:end].long()
        targets = self.stream[begin + 1 : end + 1].long().clone()
        targets[: scored_to - begin] = PAD_ID  # positions begin+1..scored_to were scored before
        return inputs, targets


def collate_blocks(items) -> dict:
    """Pad windows at the end (only a split's last window can be shorter): the causal mask keeps the
    padding out of every real token's context, and PAD targets are not scored."""
    inputs, targets = zip(*items, strict=True)
    return {
        "input": pad_sequence(list(inputs), batch_first=True, padding_value=PAD_ID),
        "target": pad_sequence(list(targets), batch_first=True, padding_value=PAD_ID),
        "target_tokens": sum(int((t != PAD_ID).sum()) for t in targets),  # counted here, on the host
    }


class LanguageModelDataModule:
    """Splits ``train``, ``val``, ``test`` of a word-level corpus; a subclass says where the lines come
    from (:meth:`read_split`). The vocabulary is the training split's words (at most ``max_vocab``)."""

    name = "lm"
    trainer = None  # the Lightning trainer running this data, once attached (nmt.training.lightning_data)

    def __init__(
        self,
        block_size: int = 128,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        eval_stride: int | None = None,
        max_vocab: int | None = None,
        lang: str = "en",
        num_workers: int = 0,
        seed: int = 1,
        cache_dir: str = "~/.cache/nmt",
    ) -> None:
        if block_size < 1:
            raise ValueError(f"data.block_size={block_size} must be at least 1")
        for key, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            if value is not None and (type(value) is not int or value < 1):  # told now, not at validation
                raise ValueError(
                    f"data.{key}={value!r}: must be a whole number >= 1" + (" or null" if "eval" in key else "")
                )
        if max_vocab is not None and (type(max_vocab) is not int or max_vocab <= len(SPECIALS)):
            # 0 or fewer left the special tokens alone: every word <unk>, a perplexity that looks fine
            raise ValueError(
                f"data.max_vocab={max_vocab!r}: the vocabulary's size with its {len(SPECIALS)} special tokens, a whole "
                f"number > {len(SPECIALS)}, or null for every training word"
            )
        self.block_size, self.batch_size = block_size, batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.eval_stride = block_size if eval_stride is None else eval_stride
        windows(block_size + 2, block_size, self.eval_stride)  # rejects an invalid stride now
        self.max_vocab = max_vocab
        self.src_lang = self.tgt_lang = lang
        self.num_workers, self.seed = num_workers, seed
        self.cache_dir = Path(cache_dir).expanduser()
        self.vocab: WordVocabulary | None = None
        self.datasets: dict[str, BlockDataset] = {}
        self._text: dict[str, list[str]] = {}

    # ---- what a corpus provides ----------------------------------------------------------------
    def read_split(self, split: str) -> list[str]:
        raise NotImplementedError

    def text(self, split: str) -> list[str]:
        """A split's lines (:meth:`read_split`), or ``files:<path>``: any text file, one sentence a line,
        scored with the trained vocabulary (evaluate.py split=files:<path>, as fairseq-eval-lm scores a file)."""
        if split not in self._text:
            self._text[split] = (
                read_text_file(split.split(":", 1)[1]) if is_file_split(split) else self.read_split(split)
            )
        return self._text[split]

    def describe(self) -> str:
        return f"{self.name} (block {self.block_size}, eval stride {self.eval_stride})"

    def text_hash(self, split: str) -> str:
        """A hash of a split's text as read."""
        return content_hash(split, lines=self.text(split))

    def text_hashes(self) -> dict[str, str]:
        """Per split, :meth:`text_hash` (part of a run's identity, and kept in its checkpoints)."""
        return {split: self.text_hash(split) for split in ("train", "val", "test")}

    def training_sentences(self) -> None:
        """None: a stream of text has no sentence pairs whose reuse at evaluation could be counted."""
        return None

    # ---- vocabulary and streams ------------------------------------------------------------------
    def set_tokenizers(self, src, tgt) -> None:
        self.vocab = tgt

    def build_tokenizers(self) -> tuple[WordVocabulary, WordVocabulary]:
        if self.vocab is None:
            self.vocab = WordVocabulary.build(self.text("train"), self.max_vocab)
        return self.vocab, self.vocab

    def stream(self, split: str) -> torch.Tensor:
        """The split as one id stream (cached by the vocabulary and the text)."""
        vocab = self.build_tokenizers()[1]
        lines = self.text(split)
        key = content_hash(self.name, split, hashlib.sha256(vocab.model_proto).hexdigest(), lines=lines)
        named = "files" if is_file_split(split) else split  # a path is no file name: its text is in the key
        path = self.cache_dir / "encoded" / f"{self.name}-{named}-{key}.pt"
        if path.exists():
            try:
                cached = torch.load(path, weights_only=True)
                stream = cached.get("stream") if isinstance(cached, dict) else None
                if not isinstance(stream, torch.Tensor) or stream.dim() != 1:
                    problem = "not an id stream" if not isinstance(cached, torch.Tensor) else "written without a digest"
                elif cached.get("digest") != _digest(stream):  # a flipped bit read as another word
                    problem = "its ids do not match their digest"
                else:
                    return stream
            except Exception as err:  # noqa: BLE001  (a zip, pickle or EOF error, whichever the damage makes)
                problem = str(err).splitlines()[0] if str(err) else type(err).__name__
            # derived, its name the hash of what it derives from: said aloud and made again, as a translation
            # corpus's encoded split is (a damaged file was a traceback)
            log.warning("%s cannot be read (%s): encoding the split again", path, problem)
        ids = [EOS_ID]
        for line in lines:
            ids += vocab.encode(line) + [EOS_ID]
        stream = torch.tensor(ids, dtype=torch.int32)
        buffer = io.BytesIO()  # written as bytes: a full disk is an OSError naming the file, not torch's C++ error
        torch.save({"stream": stream, "digest": _digest(stream)}, buffer)
        atomic_write_bytes(path, buffer.getbuffer())  # parallel jobs may both write it
        return stream

    def dataset(self, split: str) -> BlockDataset:
        if split not in self.datasets:
            stride = self.block_size if split == "train" else self.eval_stride
            self.datasets[split] = BlockDataset(self.stream(split), self.block_size, stride)
        return self.datasets[split]

    def report(self) -> dict:
        """Per split: lines, scored tokens (words + sentence ends), windows, and the rate of the unknown
        id, split into the corpus' own ``<unk>`` words and words outside the vocabulary."""
        vocab = self.build_tokenizers()[1]
        report = {}
        for split in ("train", "val", "test"):
            stream = self.stream(split)
            words = [w for line in self.text(split) for w in line.split()]
            outside = sum(1 for w in words if w != UNK_WORD and w not in vocab.ids)
            report[split] = {
                "lines": len(self.text(split)),
                "scored_tokens": len(stream) - 1,
                "windows": len(self.dataset(split)),
                "unk_rate": round(float((stream == UNK_ID).float().mean()), 5),
                "out_of_vocabulary_words": outside,
            }
        return report

    # ---- the hooks of a LightningDataModule ---------------------------------------------------------
    def prepare_data(self) -> None:
        for split in ("train", "val", "test"):
            # an empty text trained nothing, or scored 0 tokens as perplexity 1.00: said before training, and
            # a missing file before a tokenizer is trained on the others
            if not any(line.split() for line in self.text(split)):
                raise ValueError(
                    f"data: the {split} text of {self.describe()} has no word; give a text that holds words"
                )
        for split in ("train", "val", "test"):
            self.stream(split)

    def setup(self, stage: str | None = None) -> None:
        for split in STAGE_SPLITS.get(stage, ("train", "val", "test")):
            self.dataset(split)

    def loader(self, split: str, shuffle: bool = False) -> DataLoader:
        dataset = self.dataset(split)
        size = self.batch_size if shuffle else self.eval_batch_size

        def sampler(num_replicas: int, rank: int) -> FixedBatchSampler:
            return FixedBatchSampler(
                len(dataset), size, shuffle=shuffle, seed=self.seed, num_replicas=num_replicas, rank=rank
            )

        return sharded_loader(self, dataset, sampler, collate_blocks, self.num_workers, resumable=shuffle, split=split)

    def train_dataloader(self) -> DataLoader:
        return self.loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.loader("test")
