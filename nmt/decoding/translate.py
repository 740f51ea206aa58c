"""Decoding raw sentences: encode, batch by length, search, detokenise, in input order."""

import logging
import sys
import time
from collections.abc import Sequence

import torch

from nmt.data.batching import token_batches
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.constraints import position_limits
from nmt.decoding.search import decode
from nmt.decoding.settings import SearchConfig

log = logging.getLogger(__name__)


def input_limit(data_cfg) -> int:
    """The subword tokens a source is truncated to when no limit is given: a model trained on truncated
    sources (a summariser's ``data.max_src_len``) reads them truncated the same way, others 256."""
    return data_cfg.get("max_src_len") or 256


def input_limit_for(model, max_input_len: int, warn: bool = True) -> int:
    """``max_input_len``, lowered (with a warning, where ``warn``: a limit the user gave) to what the model's
    source positions hold: a source is its pieces and the end token, and a learned position table has a
    fixed size."""
    table = position_limits(model)[0]
    if table is not None and max_input_len > table - 1:
        if not warn:
            return table - 1
        log.warning(
            "max_input_len=%d lowered to %d: the model's learned position table (pos.max_len=%d) holds no longer "
            "source with its end token",
            max_input_len,
            table - 1,
            table,
        )
        return table - 1
    return max_input_len


@torch.no_grad()
def translate_lines(
    model: torch.nn.Module,
    src_tokenizer,
    tgt_tokenizer,
    lines: Sequence[str],
    search: SearchConfig,
    max_tokens: int = 6000,
    max_input_len: int = 256,
    progress: bool = False,
) -> list[str]:
    """Translate raw sentences: batched by length for speed, returned in input order. Empty lines stay
    empty; inputs longer than ``max_input_len`` subword tokens are truncated (counted in a warning).
    ``progress``: a bar on a terminal, else a plain line on standard error every 30 seconds."""
    device = next(model.parameters()).device
    max_input_len = input_limit_for(model, max_input_len)
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
    batches = length_batches(encoded, max_tokens, search.hypotheses)
    with DecodingProgress(sum(map(len, batches)), enabled=progress) as shown:
        for batch in batches:
            src = torch.nn.utils.rnn.pad_sequence(
                [torch.tensor(encoded[i] + [EOS_ID]) for i in batch], batch_first=True, padding_value=PAD_ID
            ).to(device)
            for i, ids in zip(
                batch, decode(model, src, BOS_ID, EOS_ID, search, numbers=[i + 1 for i in batch]), strict=True
            ):
                outputs[i] = tgt_tokenizer.decode(ids)
            shown.advance(len(batch))
    return outputs


def length_batches(encoded: list[list[int]], max_tokens: int, rows_per_line: int = 1) -> list[list[int]]:
    """The indices of the non-empty sources (token ids, the end token not counted), sorted by length and cut
    into batches of about ``max_tokens`` source tokens counting each line ``rows_per_line`` times (its beam's
    or its draws' rows; a line longer than the budget is a batch of its own). Empty sources are left out:
    their outputs are empty."""
    non_empty = [i for i, ids in enumerate(encoded) if ids]
    lengths = {i: len(encoded[i]) + 1 for i in non_empty}
    order = sorted(non_empty, key=lengths.__getitem__)
    budget = max(max_tokens // max(rows_per_line, 1), max(lengths.values(), default=1))
    return list(token_batches(lengths, budget, order))


class DecodingProgress:
    """Sentences decoded so far: a rich bar on a terminal, a plain line every 30 s in a log file."""

    def __init__(self, total: int, enabled: bool, every_s: float = 30.0) -> None:
        self.total, self.done, self.every_s = total, 0, every_s
        self.enabled = enabled and total > 0
        self.bar = None
        self.started = self.last = time.monotonic()

    def __enter__(self) -> "DecodingProgress":
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("decoding", total=self.total)
        return self

    def advance(self, sentences: int) -> None:
        self.done += sentences
        if self.bar is not None:
            self.bar.update(self.task, advance=sentences)
        elif self.enabled and time.monotonic() - self.last >= self.every_s:
            self.last = time.monotonic()
            rate = self.done / max(self.last - self.started, 1e-9)
            print(f"[decode] {self.done}/{self.total} sentences, {rate:.1f}/s", file=sys.stderr, flush=True)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
