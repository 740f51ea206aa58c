"""The shared data module of every parallel corpus: tokenizers, encoding cache, batching.

A corpus subclass only says where its text comes from (:meth:`ParallelDataModule.read_split`). Its hooks are a
LightningDataModule's by name, without importing Lightning: training hands them to Lightning
(:mod:`nmt.training.lightning_data`).
"""

import hashlib
import io
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

from nmt.data.batching import TokenBatchSampler
from nmt.data.loaders import STAGE_SPLITS, sharded_loader
from nmt.data.packed import IndexBatch, PackedPairs, index_batch
from nmt.data.segmenter import SEGMENTERS, Segmenter
from nmt.data.sources import DataNotFoundError
from nmt.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    TokenizerSettings,
    content_hash,
    load_or_train,
    reading_form,
    separator_key,
)
from nmt.utils.io import atomic_write_bytes

log = logging.getLogger(__name__)


class TranslationDataset(Dataset):
    """Encoded sentence pairs plus the raw target text (the reference for BLEU)."""

    def __init__(self, src_ids: Sequence[torch.Tensor], tgt_ids: Sequence[torch.Tensor], tgt_text: Sequence[str]):
        self.src_ids, self.tgt_ids, self.tgt_text = src_ids, tgt_ids, tgt_text

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, index: int):
        return index, self.src_ids[index], self.tgt_ids[index], self.tgt_text[index]

    def lengths(self) -> list[int]:
        """Padded cost of each pair: the longer side, counting the EOS/BOS each side gets."""
        return [max(len(s), len(t)) + 1 for s, t in zip(self.src_ids, self.tgt_ids, strict=True)]


def collate(items) -> dict:
    """Pad a list of (index, src, tgt, ref) into a batch.

    src: tokens + EOS; tgt_in: BOS + tokens; tgt_out: tokens + EOS (what tgt_in should predict);
    target_tokens: tokens of tgt_out that are not padding, counted on the host (reading them from the batch
    once it is on a GPU would wait for the device).
    """
    index, src, tgt, refs = zip(*items, strict=True)
    eos, bos = torch.tensor([EOS_ID]), torch.tensor([BOS_ID])
    return {
        "index": torch.tensor(index),
        "src": pad_sequence([torch.cat((s.long(), eos)) for s in src], batch_first=True, padding_value=PAD_ID),
        "tgt_in": pad_sequence([torch.cat((bos, t.long())) for t in tgt], batch_first=True, padding_value=PAD_ID),
        "tgt_out": pad_sequence([torch.cat((t.long(), eos)) for t in tgt], batch_first=True, padding_value=PAD_ID),
        "refs": list(refs),
        "target_tokens": sum(len(t) + 1 for t in tgt),
    }


def _read_cache(path: Path) -> dict | None:
    """An encoded split from the cache, or None when absent; one that cannot be read (damaged on disk, cut
    short) is said aloud and made again (it is derived, its name the hash of what it derives from)."""
    if not path.exists():
        return None
    try:
        cached = torch.load(path, weights_only=True)
        if not isinstance(cached, dict) or not {"src", "src_lengths", "tgt", "tgt_lengths"} <= set(cached):
            problem = "not an encoded split"
        elif cached.get("digest") != _digest(cached):  # a flipped bit read as another token, or one past the vocabulary
            problem = "its tokens do not match their digest" if "digest" in cached else "written without a digest"
        else:
            return cached
    except Exception as err:  # noqa: BLE001  (a zip, pickle or EOF error, whichever the damage makes)
        problem = str(err).splitlines()[0] if str(err) else type(err).__name__
    log.warning("%s cannot be read (%s): encoding the split again", path, problem)
    return None


def _digest(encoded: dict) -> str:
    """The SHA-256 of an encoded split's tensors, kept beside them in its cache file."""
    digest = hashlib.sha256()
    for key in ("src", "src_lengths", "tgt", "tgt_lengths"):
        digest.update(encoded[key].contiguous().numpy().tobytes())
    return digest.hexdigest()


def save_encoded(encoded: dict, path: Path) -> None:
    """An encoded split into the cache, with its digest, whole or not at all. Written as bytes: a full disk is
    then an OSError naming the file (torch.save's own writer raised "unexpected pos" from its C++ side)."""
    buffer = io.BytesIO()
    torch.save({**encoded, "digest": _digest(encoded)}, buffer)
    atomic_write_bytes(path, buffer.getbuffer())  # parallel sweep jobs may both write it


class ParallelDataModule:
    """Splits ``train``, ``val`` and ``test`` of a parallel corpus, tokenised with SentencePiece models
    trained on the training split only."""

    name = "parallel"
    # a corpus of translations, each pair one text in two languages: a summariser cannot learn from it, and
    # task=summarization refuses it (plain files and the generated toy task may hold either kind of pairs)
    translations = False
    pairs_are = "translations"  # what its pairs are, as that refusal says
    trainer = None  # the Lightning trainer running this data, once attached: its processes and device

    def __init__(
        self,
        src_lang: str,
        tgt_lang: str,
        tokenizer: dict | None = None,
        max_tokens: int = 4096,
        eval_max_tokens: int | None = None,
        max_len: int = 128,
        num_workers: int = 0,
        seed: int = 1,
        cache_dir: str = "~/.cache/nmt",
        segmenter: dict | None = None,
        user_dict: str | None = None,
        max_src_len: int | None = None,
        batches_on_device: bool | None = None,
    ) -> None:
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.tokenizer_settings = TokenizerSettings(**(tokenizer or {}))
        self.max_tokens = max_tokens
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.max_len = max_len
        # summarisation: sources are cut to this many subword tokens (in every split) instead of dropped
        if max_src_len is not None and max_src_len < 1:
            raise ValueError(f"data.max_src_len={max_src_len} must be a positive number of tokens (or null)")
        self.max_src_len = max_src_len
        self.truncated: dict[str, int] = {}
        self.num_workers = num_workers
        # the split's tokens on the model's device and each batch cut from them there (nmt/data/packed.py);
        # None: when the model is on a GPU
        self.batches_on_device = batches_on_device
        self._packed: dict[str, PackedPairs] = {}
        self.seed = seed
        self.cache_dir = Path(cache_dir).expanduser()
        self.src_tokenizer: Tokenizer | None = None
        self.tgt_tokenizer: Tokenizer | None = None
        self.datasets: dict[str, TranslationDataset] = {}
        # word segmentation per language before SentencePiece, e.g. {"zh": "jieba"} or {"en": "moses", "de": "moses"}
        unknown = sorted(set(segmenter or {}) - {src_lang, tgt_lang})
        if unknown:
            raise ValueError(
                f"data.segmenter names {unknown}, not languages of this pair: give segmenters for "
                f"{[src_lang, tgt_lang]} only (each one of {list(SEGMENTERS)})"
            )
        self.segmenters = {}
        for lang in (src_lang, tgt_lang):
            try:
                self.segmenters[lang] = Segmenter((segmenter or {}).get(lang, "none"), user_dict, lang)
            except ValueError as error:
                raise ValueError(f"data.segmenter.{lang}: {error}") from None
        self.dropped: dict[str, Counter] = {}
        self._text: dict[str, tuple[list[str], list[str]]] = {}

    # ---- what a corpus provides ----------------------------------------------------------------
    def read_split(self, split: str) -> tuple[list[str], list[str]]:
        """Raw (source, target) lines of ``split`` ('train', 'val' or 'test')."""
        raise NotImplementedError

    def official(self, split: str) -> bool:
        """Whether ``split`` is a published evaluation set (read from its own files), which is scored
        whole; splits cut from a pool of pairs by a seeded shuffle are not."""
        return False

    def text(self, split: str) -> tuple[list[str], list[str]]:
        """:meth:`read_split`, read once and kept. Pairs where either side is empty or blank are dropped
        from training and from derived splits; an official validation or test set keeps them (decoded and
        scored as they are, an empty reference included) and the data report counts them."""
        if split not in self._text:
            src, tgt = self.read_split(split)
            empty = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if not (s.strip() and t.strip())]
            if split != "train" and self.official(split):
                self.dropped.setdefault(split, Counter())["empty_kept"] = len(empty)
                self._text[split] = (list(src), list(tgt))
            else:
                skip = set(empty)
                keep = [i for i in range(len(src)) if i not in skip]
                self.dropped.setdefault(split, Counter())["empty"] += len(empty)  # a split pool counted its own
                self._text[split] = ([src[i] for i in keep], [tgt[i] for i in keep])
        return self._text[split]

    def describe(self) -> str:
        return f"{self.name} {self.src_lang}-{self.tgt_lang}"

    def text_hash(self, split: str) -> str:
        """A hash of a split's text as read (source and target lines, after dropping empty pairs)."""
        return content_hash(split, lines=[*self.text(split)[0], *self.text(split)[1]])

    def text_hashes(self) -> dict[str, str]:
        """Per split, :meth:`text_hash`: part of a run's identity, so that edited or replaced corpus files
        are not taken for the same data (kept in its checkpoints too, which evaluation compares)."""
        return {split: self.text_hash(split) for split in ("train", "val", "test")}

    def training_sentences(self) -> tuple[list[str], list[str]] | None:
        """The training sources and targets, whose hashes the run folder keeps so that a set scored later is
        checked for sentences seen in training (nmt.data.overlap)."""
        return self.text("train")

    # ---- tokenizers ----------------------------------------------------------------------------
    def tokenizer_text(self) -> tuple[list[str], list[str]]:
        """The sentences the tokenizers are trained on: the training split, unless a corpus repeats pairs of
        it (then each pair once, so that a repeat weighs the model's updates, not its vocabulary)."""
        return self.text("train")

    def set_tokenizers(self, src: Tokenizer, tgt: Tokenizer) -> None:
        """Use existing tokenizers (from a checkpoint) instead of training new ones."""
        self.src_tokenizer, self.tgt_tokenizer = src, tgt

    def build_tokenizers(self) -> tuple[Tokenizer, Tokenizer]:
        if self.src_tokenizer is None:
            src_seg, tgt_seg = self.segmenters[self.src_lang], self.segmenters[self.tgt_lang]
            src, tgt = self.tokenizer_text()
            src, tgt = [src_seg(s) for s in src], [tgt_seg(t) for t in tgt]
            settings = self.tokenizer_settings
            if settings.joint:
                tag = f"{self.name}-{self.src_lang}-{self.tgt_lang}-{src_seg.name}-{tgt_seg.name}-joint"
                src_proto = tgt_proto = load_or_train(src + tgt, settings, self.cache_dir, tag).model_proto
            else:  # a side's model named by its own language and segmenter alone: the other side's segmenter, or
                # the direction, changed, it is not trained again (its text and settings are in the cache key)
                src_tag, tgt_tag = (
                    f"{self.name}-{lang}-{seg.name}"
                    for lang, seg in ((self.src_lang, src_seg), (self.tgt_lang, tgt_seg))
                )
                src_proto = load_or_train(src, settings, self.cache_dir, src_tag).model_proto
                tgt_proto = load_or_train(tgt, settings, self.cache_dir, tgt_tag).model_proto
            self.src_tokenizer, self.tgt_tokenizer = Tokenizer(src_proto, src_seg), Tokenizer(tgt_proto, tgt_seg)
        return self.src_tokenizer, self.tgt_tokenizer

    # ---- encoding, cached ----------------------------------------------------------------------
    def _encoded(self, split: str) -> TranslationDataset:
        src_text, tgt_text = self.text(split)
        src_tok, tgt_tok = self.build_tokenizers()
        proto_hash = hashlib.sha256(src_tok.model_proto + tgt_tok.model_proto).hexdigest()
        segmenters = (src_tok.segmenter.cache_key(), tgt_tok.segmenter.cache_key())
        key = content_hash(
            self.name, split, proto_hash, segmenters, *separator_key(src_text + tgt_text), lines=src_text + tgt_text
        )
        path = self.cache_dir / "encoded" / f"{self.name}-{split}-{key}.pt"
        cached = _read_cache(path)
        if cached is not None:
            src_ids = list(torch.split(cached["src"], cached["src_lengths"].tolist()))
            tgt_ids = list(torch.split(cached["tgt"], cached["tgt_lengths"].tolist()))
        else:
            src_ids = [torch.tensor(ids, dtype=torch.int32) for ids in src_tok.encode_batch(src_text)]
            tgt_ids = [torch.tensor(ids, dtype=torch.int32) for ids in tgt_tok.encode_batch(tgt_text)]
            encoded = {
                "src": torch.cat(src_ids) if src_ids else torch.zeros(0, dtype=torch.int32),
                "src_lengths": torch.tensor([len(s) for s in src_ids]),
                "tgt": torch.cat(tgt_ids) if tgt_ids else torch.zeros(0, dtype=torch.int32),
                "tgt_lengths": torch.tensor([len(t) for t in tgt_ids]),
            }
            save_encoded(encoded, path)
        cut = [bool(self.max_src_len) and len(ids) > self.max_src_len for ids in src_ids]
        if self.max_src_len:
            src_ids = [ids[: self.max_src_len] for ids in src_ids]
        if split == "train":
            # empty training pairs are dropped, and those with a side of max_len tokens or more, except a source
            # that max_src_len has cut (kept cut, as in every split); evaluation sets are always kept whole
            source_limit = float("inf") if self.max_src_len else self.max_len
            keep = [
                i
                for i, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True))
                if 0 < len(s) < source_limit and 0 < len(t) < self.max_len
            ]
            self.dropped.setdefault(split, Counter())["too_long"] = len(src_ids) - len(keep)
            dropped = len(src_ids) - len(keep)
            said = self.__dict__.setdefault("_said_too_long", set())  # a split is encoded again by later stages
            if len(src_ids) / 10 < dropped < len(src_ids) and (split, dropped) not in said:  # else in a table alone
                said.add((split, dropped))
                log.warning(
                    "data.max_len=%s drops %d of the %d training pairs (%.0f%%: a side of max_len subword tokens or "
                    "more, or empty); raise data.max_len to keep them",
                    self.max_len, dropped, len(src_ids), 100 * dropped / len(src_ids),
                )  # fmt: skip
            src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
            tgt_text, cut = [tgt_text[i] for i in keep], [cut[i] for i in keep]
        if self.max_src_len:  # of the pairs kept: a pair dropped for its target is not also a source cut
            self.truncated[split] = sum(cut)
        return TranslationDataset(src_ids, tgt_ids, tgt_text)

    # ---- the data report ----------------------------------------------------------------------
    def report(self) -> dict:
        """Per split: pairs kept, pairs dropped by reason, subword length percentiles, unknown-token rate;
        and how many validation/test sources, and references, also occur in the training split (as sources,
        as targets), as the model reads them (:func:`reading_form`: runs of spaces, and case under a lowercasing
        tokenizer, make no other sentence)."""
        reading = reading_form(self.tokenizer_settings.normalization)
        train_sources, train_targets = (set(reading(list(side))) for side in self.text("train"))
        report = {}
        for split in ("train", "val", "test"):
            dataset = self.datasets.get(split) or self._encoded(split)
            self.datasets[split] = dataset
            row = {"pairs": len(dataset), "dropped": dict(self.dropped.get(split, {}))}
            if self.max_src_len:
                row["src_truncated"] = self.truncated.get(split, 0)
            for side, ids in (("src", dataset.src_ids), ("tgt", dataset.tgt_ids)):
                lengths = torch.tensor([len(x) for x in ids], dtype=torch.float)
                quantiles = torch.quantile(lengths, torch.tensor([0.5, 0.9, 0.99])).tolist() if len(ids) else [0] * 3
                tokens = torch.cat(list(ids)) if len(ids) else torch.zeros(0)
                row[f"{side}_len_p50_p90_p99_max"] = [round(q, 1) for q in quantiles] + [
                    int(lengths.max()) if len(ids) else 0
                ]
                row[f"{side}_unk_rate"] = round(float((tokens == UNK_ID).float().mean()) if len(tokens) else 0.0, 5)
            if split != "train":
                sources, targets = (reading(list(side)) for side in self.text(split))
                row["sources_also_in_train"] = sum(s in train_sources for s in sources)
                row["targets_also_in_train"] = sum(t in train_targets for t in targets)
            report[split] = row
        return report

    # ---- LightningDataModule -------------------------------------------------------------------
    def prepare_data(self) -> None:
        # runs once per machine: downloads, trains the tokenizers and fills the encoding cache; what no
        # batch could hold is said here, before a model is built. Every split is read first: a missing
        # validation or test file is said before minutes of tokenizer training, not after
        missing = []  # every split's missing files said at once: a corpus read split by split (Multi30k)
        for split in ("train", "val", "test"):
            try:
                self.text(split)
            except DataNotFoundError as err:
                missing.append((split, err))
        if missing:
            first = missing[0][1]
            # the other splits' own files (a corpus split from one pool fails alike for each: said once)
            others = [(s, err) for s, err in missing[1:] if str(err) != str(first)]
            if not others:
                raise first
            listed = "; ".join(f"the {s} split's {err.wanted or 'files'}" for s, err in others)
            raise DataNotFoundError(f"{first}\nNot found either: {listed}") from None
        for split in ("train", "val", "test"):
            dataset = self._encoded(split)
            if split == "train" and len(dataset) == 0:
                dropped = ", ".join(
                    f"{n} {why.replace('_', ' ')}" for why, n in self.dropped.get(split, {}).items() if n
                )
                raise ValueError(
                    f"data: no training pair is left ({dropped or 'the training split is empty'}): check "
                    f"data.train, or raise data.max_len ({self.max_len}) if the pairs are long"
                )
            key, budget = (
                ("data.max_tokens", self.max_tokens)
                if split == "train"
                else ("data.eval_max_tokens", self.eval_max_tokens)
            )
            lengths = list(dataset.lengths())
            longest = max(lengths, default=0)
            if longest > budget:
                if self.max_src_len:  # sources are cut in every split, and max_len no longer limits them
                    remedy = "or lower data.max_src_len" + (" or data.max_len" if split == "train" else "")
                else:
                    remedy = "or lower data.max_len" if split == "train" else "(evaluation sets are kept whole)"
                # a pair's place in its file where the split is a file of its own, read whole; otherwise in the
                # split as kept (a seeded split's pairs come from anywhere in the pool, the training pairs after
                # those max_len dropped)
                place = "as kept" if split == "train" or not self.official(split) else "in its file"
                raise ValueError(
                    f"{key}={budget} is smaller than the longest {split} sentence ({longest} tokens, its pair "
                    f"{lengths.index(longest) + 1} {place}): raise {key} {remedy}"
                )

    def setup(self, stage: str | None = None) -> None:
        for split in STAGE_SPLITS.get(stage, ("train", "val", "test")):
            if split not in self.datasets:
                self.datasets[split] = self._encoded(split)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        dataset = self.datasets.get(split) or self._encoded(split)
        self.datasets[split] = dataset
        budget = self.max_tokens if shuffle else self.eval_max_tokens

        def sampler(num_replicas: int, rank: int) -> TokenBatchSampler:
            lengths = dataset.lengths()
            key = "data.max_tokens" if shuffle else "data.eval_max_tokens"
            return TokenBatchSampler(
                lengths, budget, shuffle=shuffle, seed=self.seed, num_replicas=num_replicas, rank=rank, key=key
            )

        collate_fn = index_batch if self._builds_on_device() else collate
        return sharded_loader(self, dataset, sampler, collate_fn, self.num_workers, resumable=shuffle, split=split)

    def _builds_on_device(self) -> bool:
        if self.batches_on_device is not None:
            return self.batches_on_device
        trainer = getattr(self, "trainer", None)
        return trainer is not None and trainer.strategy.root_device.type == "cuda"

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """Lightning's hook once a batch is on the model's device: a batch of indices becomes the batch."""
        if not isinstance(batch, IndexBatch):
            return batch
        trainer = self.trainer
        split = "train" if trainer.training else "test" if trainer.testing else "val"
        device = trainer.strategy.root_device
        packed = self._packed.get(split)
        if packed is None or packed.device != device:
            dataset = self.datasets[split]
            self._packed[split] = packed = PackedPairs(dataset.src_ids, dataset.tgt_ids, dataset.tgt_text).to(device)
        return packed.batch(batch)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
