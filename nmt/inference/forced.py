"""Given outputs scored, not decoded: each target's log-probability given its source (a language model: given
its prompt), teacher-forced in one pass. fairseq's ``--score-reference`` and ``eval-lm``'s per-sentence scores,
OpenNMT-py's gold score: to rerank candidates, to ask whether a contrastive test set's right translation is
scored above its minimally changed wrong one, to filter training pairs, to read one sentence's perplexity.

A target is scored whole, with its end token, so that its log-probability is the one the model gives the
sentence: a target longer than the model's learned position table is refused (a cut target's score would be
another sentence's), never cut. A source longer than ``max_input_len`` is cut or refused as translation cuts or
refuses it (``on_long_input``).
"""

import logging
from collections.abc import Callable, Sequence

import torch
from torch.nn import functional as F

from nmt.data.batching import token_batches
from nmt.data.text_io import tabbed_line
from nmt.data.tokenizer import EOS_ID
from nmt.decoding.constraints import position_limits
from nmt.inference.hypothesis import Hypothesis, InputError, check_texts

log = logging.getLogger(__name__)


def checked_texts(lines: Sequence[str] | None, targets: Sequence[str], continues: bool) -> tuple[list[str], list[str]]:
    """The sources (or prompts) and the targets as lists of str, one source per target: None only for a
    language model (every target then follows a sentence start)."""
    if isinstance(targets, (str, bytes)) or not hasattr(targets, "__iter__"):
        raise TypeError(f"targets={targets!r}: give a list of str, one target per line")
    targets = list(targets)
    if lines is None:
        if not continues:
            raise ValueError("lines=None: a translation model scores each target given its source; give the sources")
        lines = [""] * len(targets)
    if isinstance(lines, (str, bytes)) or not hasattr(lines, "__iter__"):
        raise TypeError(f"lines={lines!r}: give a list of str, one source per target")
    lines = list(lines)
    if len(lines) != len(targets):
        raise ValueError(f"{len(targets)} targets for {len(lines)} lines: give one target per line")
    # a lone surrogate too: SentencePiece's TypeError named nothing
    return check_texts(lines, "line"), check_texts(targets, "target")


def score_targets(
    translator,
    lines: Sequence[str] | None,
    targets: Sequence[str],
    first_line: int = 1,
    on_batch: Callable[[int], object] | None = None,
) -> list[Hypothesis]:
    """Per line, a :class:`Hypothesis` of its target: ``text`` the target as given, ``score`` and ``log_prob``
    its total log-probability (natural log, its tokens and the end token), ``tokens`` and ``token_log_probs``
    per piece; a translation model's also ``alignment`` and ``src_tokens``, as ``translate_nbest`` gives them.
    ``first_line``: the number of the first line in its file, for messages; ``on_batch``: called with the
    number of lines each batch scored."""
    lines, targets = checked_texts(lines, targets, translator.continues)
    if not translator.continues and (problem := tabbed_line(lines, first_line)):
        raise InputError(problem)
    if problem := tabbed_line(targets, first_line):  # a TSV given as targets: its source read as the target's text
        raise InputError("target " + problem.replace("one source text", "one target text").split("; give")[0]
                         + "; give the target column alone (cut -f2)")  # fmt: skip
    tokenizer = translator.tgt_tokenizer
    target_ids = tokenizer.encode_batch(targets)
    _warn_unknown(tokenizer, targets, first_line)
    table = position_limits(translator.model)[1]
    if translator.continues:
        prompts = translator.encode_sources(lines, first_line, keep_end=True)
        _check_positions([len(ids) + 1 for ids in target_ids], table, first_line, "a sentence start and ")
        if table is not None:  # the target whole; the prompt's last tokens in what room is left, as generation does
            rooms = [table - 1 - len(ids) for ids in target_ids]
            cut = [n for n, (prompt, room) in enumerate(zip(prompts, rooms, strict=True)) if len(prompt) > room]
            if cut:
                log.warning(
                    "%s: the prompt is cut to its last tokens, to leave the target its positions in the model's "
                    "learned position table (pos.max_len=%d)",
                    f"line {first_line + cut[0]}"
                    if len(cut) == 1
                    else f"{len(cut)} lines (first: line {first_line + cut[0]})",
                    table,
                )
                prompts = [
                    prompt[len(prompt) - room :] if n in cut else prompt
                    for n, (prompt, room) in enumerate(zip(prompts, rooms, strict=True))
                ]
        inputs = [[EOS_ID, *prompt, *ids] for prompt, ids in zip(prompts, target_ids, strict=True)]
        return _score_continuations(translator, prompts, target_ids, inputs, targets, on_batch)
    sources = translator.encode_sources(lines, first_line)
    _check_positions([len(ids) + 1 for ids in target_ids], table, first_line, "the start token and ")
    results = [Hypothesis(text, float("nan"), float("nan")) for text in targets]
    lengths = [max(len(src), len(tgt)) + 1 for src, tgt in zip(sources, target_ids, strict=True)]
    order = sorted(range(len(lines)), key=lengths.__getitem__)
    # the teacher-forced pass keeps (rows, target length, vocabulary) log-probabilities: a translation's budget
    budget = max(translator.max_tokens, max(lengths, default=1))
    for batch in token_batches(lengths, budget, order):
        src = translator.pad([sources[i] + [EOS_ID] for i in batch])
        found = [[(float("nan"), target_ids[i])] for i in batch]
        translator.teacher_force(src, batch, sources, found, [[h] for h in results], with_attention=False)
        if on_batch is not None:
            on_batch(len(batch))
    return results


def _score_continuations(translator, prompts, target_ids, inputs, targets, on_batch) -> list[Hypothesis]:
    """A language model's: each row is a sentence start, the prompt and the target, padded at its end (the
    causal mask keeps padding out of every real token's context)."""
    tokenizer, results = translator.tgt_tokenizer, [None] * len(inputs)
    order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
    budget = max(translator.max_tokens, max((len(row) for row in inputs), default=1))
    for batch in token_batches([len(row) for row in inputs], budget, order):
        rows = translator.pad([inputs[i] for i in batch])
        log_probs = F.log_softmax(translator.model(rows).float(), dim=-1)  # (batch, len, vocab)
        for row, i in enumerate(batch):
            start, ids = len(prompts[i]), target_ids[i]  # position `start` predicts the target's first token
            wanted = torch.tensor([*ids, EOS_ID], device=rows.device)
            picked = log_probs[row, start : start + len(wanted)].gather(-1, wanted[:, None]).squeeze(-1)
            values = [float(x) for x in picked]
            results[i] = Hypothesis(
                targets[i],
                sum(values),
                sum(values),
                tokens=tokenizer.pieces(ids),
                token_log_probs=values,
                src_tokens=tokenizer.pieces(prompts[i]),
            )
        if on_batch is not None:
            on_batch(len(batch))
    return results


def _check_positions(lengths: list[int], table: int | None, first_line: int, read: str) -> None:
    """A target whose positions a learned table cannot hold is refused, naming its line."""
    if table is None:
        return
    over = next((n for n, length in enumerate(lengths) if length > table), None)
    if over is not None:
        raise InputError(
            f"target line {first_line + over}: the model reads {read}the target in {lengths[over]} positions, more "
            f"than its learned position table holds (pos.max_len={table}); a target is scored whole (a cut one's "
            "score would be another sentence's): shorten the line or leave it out"
        )


def _warn_unknown(tokenizer, targets: list[str], first_line: int) -> None:
    """Once a call: a target holding what the vocabulary cannot spell is scored with <unk> in its place,
    whose probability is not the text's."""
    unknown = [(n, words) for n, text in enumerate(targets) if text and (words := tokenizer.unknown_text(text))]
    if unknown:
        n, words = unknown[0]
        where = (
            f"target line {first_line + n}"
            if len(unknown) == 1
            else f"{len(unknown)} targets (first: line {first_line + n})"
        )
        log.warning(
            "%s: outside the target vocabulary, scored as <unk> (the probability of <unk>, not of the text): %s",
            where,
            "; ".join(words),
        )
