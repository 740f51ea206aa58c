"""Batched beam search, the one search that keeps several hypotheses per sentence and ranks them (n-best
lists; ``search.ranked_hypotheses`` dispatches it), written against the models' ``encode``/``decode_step``/
``reorder`` like the others."""

import torch
from torch.nn import functional as F

from nmt.decoding.constraints import (
    constrain,
    force_prefixes,
    max_lengths,
    never_emitted,
    position_limits,
    with_prefixes,
)
from nmt.decoding.settings import SearchConfig


def length_penalty(length: int | torch.Tensor, alpha: float):
    """Wu et al. 2016 (GNMT): ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_hypotheses(
    model, src, bos_id: int, eos_id: int, cfg: SearchConfig, prefixes: list[list[int]] | None = None
) -> list[list[tuple[float, list[int]]]]:
    """Batched beam search: all sentences and beams advance together as batch * beam rows. Returns, per
    sentence, its finished hypotheses as (score, token ids) best first (at least beam_size of them unless
    the search ran out): score is the log-probability divided by the length penalty."""
    batch, k = src.size(0), cfg.beam_size
    device = src.device
    limits = with_prefixes(
        max_lengths(src, model.pad_id, cfg, cap := position_limits(model)[1]), prefixes, cap
    )  # (batch,)
    row_prefixes = [p for p in prefixes for _ in range(k)] if prefixes else None
    state = model.encode(src).reorder(torch.arange(batch, device=device).repeat_interleave(k))
    scores = torch.zeros(batch, k, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one until they diverge
    tokens = torch.full((batch * k, 0), bos_id, dtype=torch.long, device=device)  # history without BOS
    prev = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    # the limits and which sentences are done are kept on the host too: each read of the device makes a
    # GPU's host wait, so a step reads what ended and the best scores in a few reads, never one per sentence
    limits_host, done_host = limits.tolist(), [False] * batch
    offsets = (torch.arange(batch, device=device) * k)[:, None]  # (batch, 1)

    for step in range(max(limits_host)):
        logits, state = model.decode_step(prev, state)  # (batch * k, vocab)
        own = never_emitted(F.log_softmax(logits.float(), dim=-1), bos_id, model.pad_id)
        # a token forced (a prefix's, EOS at the limit) scores its own log-probability, never one that a
        # minimum length or n-gram blocking had ruled out: a hypothesis's score is its log-probability
        log_probs = constrain(own, tokens.tolist(), eos_id, cfg) if cfg.constrains else own
        if row_prefixes:
            log_probs = force_prefixes(log_probs, step, row_prefixes, own)
        log_probs = log_probs.view(batch, k, -1)
        vocab = log_probs.size(-1)
        if min(limits_host) <= step + 1:  # some sentence's last step allowed: only EOS may follow
            at_limit = limits <= step + 1  # (batch,)
            # keep EOS's own log-probability (floored, so that a hypothesis always ends), nothing else
            forced = torch.full_like(log_probs, float("-inf"))
            forced[:, :, eos_id] = own.view(batch, k, -1)[:, :, eos_id].clamp(min=-1e4)
            log_probs = torch.where(at_limit[:, None, None], forced, log_probs)
        candidates = (scores[:, :, None] + log_probs).view(batch, k * vocab)
        # 2k candidates guarantee k that do not end, whatever happens to the ending ones
        top_scores, top_ids = candidates.topk(min(2 * k, k * vocab), dim=1)  # (batch, 2k)
        beam_of, token_of = top_ids // vocab, top_ids % vocab
        is_eos = token_of == eos_id

        # hypotheses that end now: EOS among the top k candidates of a sentence still searching
        in_top_k = torch.arange(top_ids.size(1), device=device) < k
        ends = (is_eos & in_top_k & (top_scores > float("-inf")) & ~done[:, None]).nonzero()  # (ending, 2)
        if ends.numel():
            sentence, candidate = ends[:, 0], ends[:, 1]
            histories = tokens[offsets[sentence, 0] + beam_of[sentence, candidate]].tolist()
            divisor = length_penalty(step + 1, cfg.length_penalty)  # length counts the EOS
            ended = zip(sentence.tolist(), top_scores[sentence, candidate].tolist(), histories, strict=True)
            for b, score, history in ended:
                finished[b].append((score / divisor, history))

        # continue with the best k candidates that do not end
        rank = is_eos.float() * top_ids.size(1) + torch.arange(top_ids.size(1), device=device)
        keep = rank.argsort(dim=1)[:, :k]  # (batch, k)
        scores = top_scores.gather(1, keep)
        rows = (offsets + beam_of.gather(1, keep)).view(-1)  # (batch * k,) rows of the previous step
        prev = token_of.gather(1, keep).view(-1)
        tokens = torch.cat((tokens[rows], prev[:, None]), dim=1)
        state = state.reorder(rows)

        best_alive = scores[:, 0].tolist()
        newly_done = [
            b
            for b in range(batch)
            if not done_host[b]
            and (
                limits_host[b] <= step + 1
                or (len(finished[b]) >= k and _is_finished(finished[b], best_alive[b], limits_host[b], cfg))
            )
        ]
        if newly_done:
            for b in newly_done:
                done_host[b] = True
            done = done.index_fill(0, torch.tensor(newly_done, device=device), True)
        scores = scores.masked_fill(done[:, None], float("-inf"))
        if all(done_host):
            break
    return [sorted(hyps, key=lambda h: -h[0]) for hyps in finished]


def _is_finished(hyps, best_alive: float, limit: int, cfg: SearchConfig) -> bool:
    if cfg.early_stopping:
        return True
    # can the best alive beam still beat the k-th best finished one? (its score only falls; the
    # length penalty's divisor grows at most to the limit)
    kth_best = sorted((h[0] for h in hyps), reverse=True)[cfg.beam_size - 1]
    divisor = length_penalty(limit if cfg.length_penalty > 0 else 1, cfg.length_penalty)
    return best_alive / divisor <= kth_best
