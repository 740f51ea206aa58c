"""Decoding raw sentences: encode, batch by length, search, detokenise, in input order."""

import logging
from collections.abc import Sequence

import torch

from nmt.data.batching import token_batches
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.search import SearchConfig, decode

log = logging.getLogger(__name__)


@torch.no_grad()
def translate_lines(
    model: torch.nn.Module,
    src_tokenizer,
    tgt_tokenizer,
    lines: Sequence[str],
    search: SearchConfig,
    max_tokens: int = 6000,
    max_input_len: int = 256,
) -> list[str]:
    """Translate raw sentences: batched by length for speed, returned in input order. Empty lines stay
    empty; inputs longer than ``max_input_len`` subword tokens are truncated (counted in a warning)."""
    device = next(model.parameters()).device
    encoded = src_tokenizer.encode_batch(list(lines))
    long_lines = [number for number, ids in enumerate(encoded, start=1) if len(ids) > max_input_len]
    if long_lines:
        log.warning(
            "%d input line(s) longer than max_input_len=%d subword tokens were truncated (first: line %d)",
            len(long_lines),
            max_input_len,
            long_lines[0],
        )
        encoded = [ids[:max_input_len] for ids in encoded]
    outputs = [""] * len(lines)
    non_empty = [i for i, ids in enumerate(encoded) if ids]
    lengths = {i: len(encoded[i]) + 1 for i in non_empty}
    order = sorted(non_empty, key=lengths.__getitem__)
    beams = search.beam_size if search.strategy == "beam" else 1
    budget = max(max_tokens // max(beams, 1), max(lengths.values(), default=1))
    for batch in token_batches(lengths, budget, order):
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encoded[i] + [EOS_ID]) for i in batch], batch_first=True, padding_value=PAD_ID
        ).to(device)
        for i, ids in zip(batch, decode(model, src, BOS_ID, EOS_ID, search), strict=True):
            outputs[i] = tgt_tokenizer.decode(ids)
    return outputs
