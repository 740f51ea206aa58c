"""Batches built where the model is (``data.batches_on_device``).

A split's token ids are kept as one flat tensor per side on the model's device, sent there once. The
loader then hands over only a batch's sentence indices (:class:`IndexBatch`), and the padded batch is cut
from the flat tensors by a few gathers on the device: no padded copy assembled on the host and sent at
every step (on a GPU that host work and copy cost more than a small model's update). The result is the
batch :func:`collate` builds.

On a GPU, a small model's update is bound by the host, so the cutting is written for few operators: each
sentence is stored with the tokens it gets in a batch (the source with its EOS, the target between BOS
and EOS), and one gather per side, masked beyond the sentence, gives a side's rows; the target's input and
output are two masked views of one gather.
"""

from collections.abc import Sequence

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


class IndexBatch:
    """What the loader yields when batches are built on the device: the sentence indices as a tensor
    (which the loader pins and Lightning moves to the device) and as a host list (for the batch's shape,
    token count and reference text, known without reading the device). Lightning's transfer and the
    loader's pinning see one object with ``to`` and ``pin_memory``: a plain list of indices they would
    walk element by element, at a cost on the host comparable with a small model's update."""

    __slots__ = ("indices", "tensor")

    def __init__(self, indices: list[int], tensor: torch.Tensor | None = None) -> None:
        self.indices = indices
        self.tensor = torch.tensor(indices, dtype=torch.long) if tensor is None else tensor

    def to(self, device, non_blocking: bool = True, **kwargs) -> "IndexBatch":
        # without waiting by default: Lightning passes non_blocking to tensors only, and calls an object's
        # ``to`` with the device alone; from the loader's pinned memory the copy then waits for nothing
        return IndexBatch(self.indices, self.tensor.to(device, non_blocking=non_blocking, **kwargs))

    def pin_memory(self, *args) -> "IndexBatch":
        return IndexBatch(self.indices, self.tensor.pin_memory(*args))

    def __len__(self) -> int:
        return len(self.indices)


def index_batch(items) -> IndexBatch:
    """The loader's collate function when batches are built on the device: the indices only (the
    dataset's items are (index, src, tgt, ref) tuples)."""
    return IndexBatch([item[0] for item in items])


class PackedPairs:
    """A split's sentence pairs as flat token tensors with offsets, on one device; the lengths and the
    reference text stay on the host, so that a batch's shape and token count need no read of the device."""

    def __init__(self, src_ids: Sequence[torch.Tensor], tgt_ids: Sequence[torch.Tensor], tgt_text: Sequence[str]):
        self.src_len = [len(s) for s in src_ids]
        self.tgt_len = [len(t) for t in tgt_ids]
        self.tgt_text = tgt_text
        # the source as it enters a batch (tokens + EOS), the target as BOS + tokens + EOS: a batch's
        # target input is a row's first len + 1 tokens, its output the len + 1 after the BOS
        self.src_flat, src_start = _flatten(src_ids, before=None, after=EOS_ID)
        self.tgt_flat, tgt_start = _flatten(tgt_ids, before=BOS_ID, after=EOS_ID)
        # per sentence: where each side starts, and how many of its tokens a row holds (both len + 1)
        spans = [torch.tensor(self.src_len) + 1, torch.tensor(self.tgt_len) + 1]
        self.table = torch.stack([src_start, spans[0], tgt_start, spans[1]], dim=1)  # (sentences, 4)
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> "PackedPairs":
        """Move the token tensors to ``device`` (once: the whole split)."""
        for name in ("src_flat", "tgt_flat", "table"):
            setattr(self, name, getattr(self, name).to(device))
        self.device = torch.device(device)
        return self

    def batch(self, indices: IndexBatch | list[int]) -> dict:
        """The batch of sentences ``indices``, as :func:`nmt.data.datamodule.collate` makes it, on this
        object's device. Only the indices travel from the host (pinned by the loader on a GPU)."""
        if not isinstance(indices, IndexBatch):
            indices = IndexBatch(list(indices))
        host = indices.indices
        index = indices.tensor.to(self.device)  # already there when Lightning moved the batch
        src_width = max(self.src_len[i] for i in host) + 1  # + EOS
        tgt_width = max(self.tgt_len[i] for i in host) + 1  # + BOS (in) or EOS (out)
        src_start, src_span, tgt_start, tgt_span = self.table[index].unbind(1)  # (batch,) each
        column = torch.arange(max(src_width, tgt_width + 1), device=index.device)  # one for every row
        tgt = _window(self.tgt_flat, tgt_start, column[: tgt_width + 1])  # (batch, tgt_width + 1): BOS, tokens, EOS
        inside = column[:tgt_width] < tgt_span[:, None]  # (batch, tgt_width)
        return {
            "index": index,
            "src": torch.where(
                column[:src_width] < src_span[:, None], _window(self.src_flat, src_start, column[:src_width]), PAD_ID
            ),
            "tgt_in": torch.where(inside, tgt[:, :-1], PAD_ID),
            "tgt_out": torch.where(inside, tgt[:, 1:], PAD_ID),
            "refs": [self.tgt_text[i] for i in host],
            "target_tokens": sum(self.tgt_len[i] + 1 for i in host),
        }


def _flatten(ids: Sequence[torch.Tensor], before: int | None, after: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(every sentence as [before] + tokens + [after], one after another, then padding as long as the longest
    such sentence), and where each starts. The padding at the end keeps a window of a row's width from the
    last sentence's start inside the tensor. Built with whole-tensor writes, not one piece per sentence: a
    large corpus has millions."""
    lead = 0 if before is None else 1
    n = torch.tensor([len(s) for s in ids], dtype=torch.long)  # tokens per sentence
    spans = n + lead + 1
    starts = torch.cumsum(spans, 0) - spans  # where each sentence starts in the flat tensor
    room = int(spans.max()) if len(ids) else 1
    flat = torch.full((int(spans.sum()) + room,), PAD_ID, dtype=torch.int32)
    if len(ids):
        # int32, as the encoding cache holds them: half the device memory of int64 for a large corpus
        tokens = torch.cat([s.to(torch.int32) for s in ids])
        # positions as int32 where they fit: two of them per token, on the host, for a large corpus
        index = torch.int32 if len(flat) < 2**31 else torch.long
        token_starts = torch.cumsum(n, 0) - n  # where each sentence starts among the tokens alone
        shift = torch.repeat_interleave((starts + lead - token_starts).to(index), n)
        flat[torch.arange(len(tokens), dtype=index).add_(shift)] = tokens
        if before is not None:
            flat[starts] = before
        flat[starts + lead + n] = after
    return flat, starts


def _window(flat: torch.Tensor, starts: torch.Tensor, column: torch.Tensor) -> torch.Tensor:
    """(batch, width): row r holds flat[starts[r] + column], column (width,) being 0 .. width - 1, as int64
    (what the model and the loss take); what lies beyond the row's sentence is masked by the caller."""
    return flat[starts[:, None] + column].long()
