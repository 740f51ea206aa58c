"""Batches built where the model is (``data.batches_on_device``).

A split's token ids are kept as one flat tensor per side on the model's device, sent there once. The
loader then hands over only a batch's sentence indices, and the padded batch is cut from the flat tensors
by a few gathers on the device: no padded copy assembled on the host and sent at every step (on a GPU that
host work and copy cost more than a small model's update). The result is the batch :func:`collate` builds.
"""

from collections.abc import Sequence

import torch

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def index_batch(items) -> dict:
    """The loader's collate function when batches are built on the device: the indices only (the
    dataset's items are (index, src, tgt, ref) tuples)."""
    return {"batch_indices": [item[0] for item in items]}


class PackedPairs:
    """A split's sentence pairs as flat token tensors with offsets, on one device; the lengths and the
    reference text stay on the host, so that a batch's shape and token count need no read of the device."""

    def __init__(self, src_ids: Sequence[torch.Tensor], tgt_ids: Sequence[torch.Tensor], tgt_text: Sequence[str]):
        self.src_len = [len(s) for s in src_ids]
        self.tgt_len = [len(t) for t in tgt_ids]
        self.tgt_text = tgt_text
        # one padding token at the end, so that a gather is never out of range, whatever the lengths
        self.src_flat, self.src_start = _flatten(src_ids)
        self.tgt_flat, self.tgt_start = _flatten(tgt_ids)
        self.src_len_t = torch.tensor(self.src_len, dtype=torch.long)
        self.tgt_len_t = torch.tensor(self.tgt_len, dtype=torch.long)
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> "PackedPairs":
        """Move the token tensors to ``device`` (once: the whole split)."""
        for name in ("src_flat", "src_start", "tgt_flat", "tgt_start", "src_len_t", "tgt_len_t"):
            setattr(self, name, getattr(self, name).to(device))
        self.device = torch.device(device)
        return self

    def batch(self, indices: list[int]) -> dict:
        """The batch of sentences ``indices``, as :func:`nmt.data.datamodule.collate` makes it, on this
        object's device. Only the indices travel from the host (from pinned memory on a GPU)."""
        index = torch.tensor(indices, dtype=torch.long)
        if self.device.type == "cuda":
            index = index.pin_memory().to(self.device, non_blocking=True)
        else:
            index = index.to(self.device)
        src_width = max(self.src_len[i] for i in indices) + 1  # + EOS
        tgt_width = max(self.tgt_len[i] for i in indices) + 1  # + BOS (in) or EOS (out)
        src_len, tgt_len = self.src_len_t[index], self.tgt_len_t[index]
        src_start, tgt_start = self.src_start[index], self.tgt_start[index]
        return {
            "index": index,
            "src": _rows(self.src_flat, src_start, src_len, src_width, before=None, after=EOS_ID),
            "tgt_in": _rows(self.tgt_flat, tgt_start, tgt_len, tgt_width, before=BOS_ID, after=None),
            "tgt_out": _rows(self.tgt_flat, tgt_start, tgt_len, tgt_width, before=None, after=EOS_ID),
            "refs": [self.tgt_text[i] for i in indices],
            "target_tokens": sum(self.tgt_len[i] + 1 for i in indices),
        }


def _flatten(ids: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(all tokens, then one padding token), and the start of each sentence in it."""
    lengths = torch.tensor([len(s) for s in ids], dtype=torch.long)
    starts = torch.zeros(len(ids), dtype=torch.long)
    if len(ids) > 1:
        starts[1:] = lengths.cumsum(0)[:-1]
    # int32, as the encoding cache holds them: half the device memory of int64 for a large corpus
    flat = torch.cat([*(s.to(torch.int32) for s in ids), torch.tensor([PAD_ID], dtype=torch.int32)])
    return flat, starts


def _rows(
    flat: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, width: int, before: int | None, after: int | None
) -> torch.Tensor:
    """(batch, width): row r holds [before] + flat[starts[r] : starts[r] + lengths[r]] + [after], then
    padding."""
    shift = 0 if before is None else 1
    column = torch.arange(width, device=flat.device)[None, :] - shift  # (1, width): position among the tokens
    inside = (column >= 0) & (column < lengths[:, None])  # (batch, width)
    gather = (starts[:, None] + column.clamp(min=0)).clamp(max=flat.numel() - 1)
    rows = torch.where(inside, flat[gather].long(), PAD_ID)
    if before is not None:
        rows[:, 0] = before
    if after is not None:
        rows.scatter_(1, (lengths + shift)[:, None], after)
    return rows
