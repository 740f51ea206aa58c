"""Decoding strategies, written once against the incremental interface every model offers:

    state = model.encode(src)
    logits, state = model.decode_step(prev_tokens, state)
    state = state.reorder(index)

Nothing here knows which architecture it drives. Here: the two entries (``decode``, the best output of each
sentence; ``ranked_hypotheses``, the n-best of a ranking search), greedy search and sampling. The options
are in ``settings.py``, what every search obeys at each step in ``constraints.py``, the batched beam search
in ``beam.py``.
"""

import hashlib
import logging
from collections.abc import Sequence

import torch

from nmt.decoding.beam import beam_hypotheses
from nmt.decoding.constraints import (
    constrain,
    force_prefixes,
    max_lengths,
    never_emitted,
    position_limits,
    with_prefixes,
)
from nmt.decoding.graphed import graphed_greedy, supports_graphs
from nmt.decoding.settings import RANKED, STRATEGIES, SearchConfig

log = logging.getLogger(__name__)


@torch.no_grad()
def decode(
    model,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    cfg: SearchConfig,
    prefixes: list[list[int]] | None = None,
    numbers: Sequence[int] | None = None,
) -> list[list[int]]:
    """Translate a padded batch src: (batch, src_len); returns token ids per sentence, without BOS/EOS.
    ``prefixes``: per sentence, target tokens the output must begin with (forced, then searched on).
    ``numbers``: per sentence, its number in the input (its line, from 1; default: 1 to batch), from which
    seeded sampling draws its random stream (:func:`sentence_generators`)."""
    if cfg.min_len:
        _warn_if_min_len_unreachable(src, model.pad_id, cfg, position_limits(model)[1])
    if cfg.ranks:
        found = ranked_hypotheses(model, src, bos_id, eos_id, cfg, prefixes, numbers)
        return [hyps[0][1] if hyps else [] for hyps in found]
    if cfg.strategy == "greedy" and not (cfg.constrains or prefixes):
        return _greedy(model, src, bos_id, eos_id, cfg)
    if cfg.strategy == "greedy" or cfg.samples:  # one token a step, with constraints or drawn
        return _step_by_step(model, src, bos_id, eos_id, cfg, prefixes, numbers)
    raise ValueError(f"decode.strategy={cfg.strategy!r}: in STRATEGIES but not dispatched here; valid: {STRATEGIES}")


def ranked_hypotheses(
    model,
    src,
    bos_id: int,
    eos_id: int,
    cfg: SearchConfig,
    prefixes: list[list[int]] | None = None,
    numbers: Sequence[int] | None = None,
) -> list[list[tuple[float, list[int]]]]:
    """Per sentence, the hypotheses of a ranking search (``cfg.ranks``) as (score, token ids), best first.
    ``numbers`` as for :func:`decode`: a ranking search that draws at random seeds each sentence's stream
    from its number (:func:`sentence_generators`), so that its outputs do not depend on the batching."""
    if cfg.strategy == "beam":
        return beam_hypotheses(model, src, bos_id, eos_id, cfg, prefixes)
    raise ValueError(f"decode.strategy={cfg.strategy!r}: not a ranking search ({list(RANKED)}) dispatched here")


_WARNED_MIN_LEN: set = set()


def _warn_if_min_len_unreachable(src: torch.Tensor, pad_id: int, cfg: SearchConfig, cap: int | None = None) -> None:
    """Once per setting: decode.min_len at or above a sentence's output limit cannot hold (the limit ends it)."""
    key = (cfg.min_len, cfg.max_len_a, cfg.max_len_b)
    if key in _WARNED_MIN_LEN:
        return
    shortest = int(max_lengths(src, pad_id, cfg, cap).min()) - 1  # tokens before the end token
    if shortest < cfg.min_len:
        _WARNED_MIN_LEN.add(key)
        log.warning(
            "decode.min_len=%d is more than the %d tokens some outputs may have (decode.max_len_a=%s x source "
            "length + max_len_b=%s): those end at their limit, shorter than min_len",
            cfg.min_len,
            shortest,
            cfg.max_len_a,
            cfg.max_len_b,
        )


def read_every(device: torch.device) -> int:
    """Steps between two reads of which sentences have ended, in greedy search: every step, on every device.
    A read makes the host wait for an accelerator, where reading every few steps would let the host queue
    steps ahead; but an ended sentence then rides along until the next read, and on an H100 that cost more
    than the waits (greedy validation of Multi30k's 1,014 sentences, BENCHMARKS.md). The benchmark times
    both, one timing each so far (``benchmarks/gpu_measures.py`` replaces this function, which is why it
    still takes the device)."""
    return 1


def use_graphs(model, device: torch.device) -> bool:
    """Whether greedy search replays each step as a CUDA graph (``nmt.decoding.graphed``): on a GPU, for a
    model with caches of fixed size. Elsewhere nothing waits on kernel launches, and leaving ended
    sentences in the batch would only add arithmetic. Not under autocast: its cache of cast weights
    cannot be recorded into a graph (validation decodes with autocast off). (``benchmarks/gpu_measures.py``
    replaces this function to time both.)"""
    return device.type == "cuda" and supports_graphs(model) and not torch.is_autocast_enabled(device.type)


def greedy(model, src, bos_id: int, eos_id: int, cfg: SearchConfig | None = None) -> list[list[int]]:
    cfg = cfg or SearchConfig()
    return decode(model, src, bos_id, eos_id, SearchConfig(**{**cfg.__dict__, "strategy": "greedy"}))


@torch.no_grad()
def _greedy(model, src, bos_id: int, eos_id: int, cfg: SearchConfig, every: int | None = None) -> list[list[int]]:
    """Greedy search with the chosen tokens kept on the device: one read every ``every`` steps (default
    :func:`read_every`) says which sentences have ended, and they leave the batch; one read at the end
    fetches the outputs. The tokens are those of :func:`_step_by_step` (a sentence's rows are computed
    alike whichever other sentences share its batch)."""
    batch, device, pad_id = src.size(0), src.device, model.pad_id
    limits = max_lengths(src, pad_id, cfg, position_limits(model)[1])  # (batch,) tokens allowed, counting the EOS
    if every is None and use_graphs(model, device):
        outputs = graphed_greedy(
            model, src, limits, bos_id, eos_id, lambda x: never_emitted(x, bos_id, pad_id).argmax(-1)
        )
        if outputs is not None:
            return outputs
    every = every or read_every(device)
    steps = int(limits.max())
    state = model.encode(src)
    out = torch.full((batch, steps), pad_id, dtype=torch.long, device=device)  # padding where nothing was chosen
    rows = torch.arange(batch, device=device)  # the sentence of each row still in the batch
    ended = torch.zeros(batch, dtype=torch.bool, device=device)  # (rows,)
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=device)
    for step in range(steps):
        logits, state = model.decode_step(prev, state)  # (rows, vocab)
        prev = never_emitted(logits, bos_id, pad_id).argmax(dim=-1)  # (rows,)
        # the last step allowed ends a sentence (as if EOS were forced), like beam search does
        ended = ended | (prev == eos_id) | (limits[rows] <= step + 1)
        out[rows, step] = prev.masked_fill(ended, pad_id)
        if (step + 1) % every == 0 and step + 1 < steps:
            going = (~ended).nonzero().squeeze(1)  # the read
            if going.numel() == 0:
                break
            if going.numel() < rows.numel():  # shrink the batch: ended sentences cost nothing from here on
                state, prev, rows, ended = state.reorder(going), prev[going], rows[going], ended[going]
    # a sentence's tokens are written one after another from its first step, and padding is never chosen
    return [ids[: ids.index(pad_id)] if pad_id in ids else ids for ids in out.tolist()]


@torch.no_grad()
def sentence_generators(cfg: SearchConfig, numbers: Sequence[int], device: torch.device) -> list | None:
    """Seeded sampling (``decode.seed``): one random stream per sentence, seeded by the seed and the
    sentence's number in its input, so that a sentence's sample depends neither on the batch it is decoded
    in nor on the lines before it, and two lines (equal ones too) draw apart. None: not sampling, or no
    seed (the global stream)."""
    if not cfg.samples or cfg.seed is None:
        return None
    seeds = [hashlib.blake2b(f"{cfg.seed}:{n}".encode(), digest_size=8).digest() for n in numbers]
    return [torch.Generator(device=device).manual_seed(int.from_bytes(s, "little") >> 1) for s in seeds]


def _step_by_step(
    model, src, bos_id: int, eos_id: int, cfg: SearchConfig, prefixes=None, numbers=None
) -> list[list[int]]:
    """Sampling, and greedy search with a minimum length, n-gram blocking or forced prefixes: one token per
    sentence per step; finished sentences leave the batch. Bookkeeping stays on the host, so a GPU waits
    for it once per step (reading the new tokens)."""
    batch = src.size(0)
    limits = with_prefixes(
        max_lengths(src, model.pad_id, cfg, cap := position_limits(model)[1]), prefixes, cap
    ).tolist()
    state = model.encode(src)
    alive = list(range(batch))  # original row of each row still decoding
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=src.device)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    generators = sentence_generators(cfg, numbers or range(1, batch + 1), src.device)
    for step in range(max(limits)):
        logits, state = model.decode_step(prev, state)  # (alive, vocab)
        logits = never_emitted(logits, bos_id, model.pad_id)
        if cfg.constrains:
            logits = constrain(logits, [outputs[row] for row in alive], eos_id, cfg)
        if prefixes:
            logits = force_prefixes(logits.float(), step, [prefixes[row] for row in alive])
        if cfg.strategy == "greedy":
            next_tokens = logits.argmax(dim=-1)
        else:
            next_tokens = _sample(logits.float(), cfg, generators=generators and [generators[row] for row in alive])
        # the last step allowed ends the sentence (as if EOS were forced), like beam search does
        tokens = next_tokens.tolist()
        keep = [token != eos_id and limits[row] > step + 1 for row, token in zip(alive, tokens, strict=True)]
        for row, token, goes_on in zip(alive, tokens, keep, strict=True):
            if goes_on:
                outputs[row].append(token)
        if not any(keep):
            break
        if not all(keep):
            # shrink the batch so finished sentences cost nothing in later steps
            index = torch.tensor([i for i, goes_on in enumerate(keep) if goes_on], device=src.device)
            state, next_tokens = state.reorder(index), next_tokens[index]
            alive = [row for row, goes_on in zip(alive, keep, strict=True) if goes_on]
        prev = next_tokens
    return outputs


def _sample(logits: torch.Tensor, cfg: SearchConfig, generator=None, generators=None) -> torch.Tensor:
    """One token per row of ``logits`` (rows, vocab) drawn after temperature, epsilon, top-k and top-p; from
    ``generator`` for all rows, or from ``generators``, one per row."""
    logits = logits / cfg.temperature
    if cfg.epsilon > 0:
        # epsilon sampling (Hewitt et al. 2022): drop every token whose probability (after temperature and the
        # step's constraints) is below epsilon, the most probable one always kept, then renormalise
        probs = logits.softmax(dim=-1)
        drop = (probs < cfg.epsilon).scatter(1, probs.argmax(dim=-1, keepdim=True), False)
        logits = logits.masked_fill(drop, float("-inf"))
    if cfg.top_k > 0:
        kth = logits.topk(min(cfg.top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach top_p (the top token always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= cfg.top_p
        drop = drop_sorted.scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    if generators:
        return torch.cat(
            [torch.multinomial(row[None], 1, generator=g)[0] for row, g in zip(probs, generators, strict=True)]
        )
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def beam_search(model, src, bos_id: int, eos_id: int, cfg: SearchConfig) -> list[list[int]]:
    """The best hypothesis of each sentence (see ``beam.beam_hypotheses``)."""
    return decode(model, src, bos_id, eos_id, SearchConfig(**{**cfg.__dict__, "strategy": "beam"}))
