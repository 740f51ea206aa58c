"""What every search obeys at each step, whatever its strategy: how long an output may be (and the size of
a learned position table), a minimum length and n-gram blocking, forced prefixes, and the tokens that are
inputs, never outputs."""

import torch

from nmt.decoding.settings import SearchConfig

NEW_TOKENS = 50  # words a language model's continuation adds when max_new_tokens is not given


def banned_tokens(history: list[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``history`` (n-gram blocking)."""
    if n <= 0 or len(history) < n - 1:
        return []
    if n == 1:
        return list(set(history))
    prefix = tuple(history[len(history) - n + 1 :])
    return [history[i + n - 1] for i in range(len(history) - n + 1) if tuple(history[i : i + n - 1]) == prefix]


def constrain(logits: torch.Tensor, histories: list[list[int]], eos_id: int, cfg: SearchConfig) -> torch.Tensor:
    """logits: (rows, vocab) of the next token after each row's ``histories`` (output so far, no BOS).
    Returns them with EOS forbidden before ``min_len`` and n-gram repeats forbidden (-inf). A row left with
    no token allowed (every piece blocked, EOS before min_len) may end: EOS keeps its own value there, so
    that no search goes on with nothing to choose (greedy took any piece, sampling failed, beam search
    returned an empty output)."""
    given, logits = logits, logits.clone()
    for row, history in enumerate(histories):
        if len(history) < cfg.min_len:
            logits[row, eos_id] = float("-inf")
        banned = banned_tokens(history, cfg.no_repeat_ngram_size)
        if banned:
            logits[row, banned] = float("-inf")
    stuck = (logits == float("-inf")).all(dim=-1)
    if bool(stuck.any()):
        logits[stuck, eos_id] = given[stuck, eos_id]
    return logits


def position_limits(model) -> tuple[int | None, int | None]:
    """The source and target positions ``model`` can encode (a learned position table's size), None for
    any number: models without such a table need not say."""
    limits = getattr(model, "position_limits", None)
    return limits() if limits is not None else (None, None)


def continuation_room(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], int]:
    """A language model's prompt and the output limit (tokens, counting the end) of its continuation, within
    the positions the model can encode: the context (a sentence end, then the prompt) and all but the last
    output token take one each. A prompt that leaves no room for ``max_new_tokens`` keeps its end (at least
    one token); the limit is then what the table leaves. Unbounded models: the prompt and max_new_tokens + 1."""
    table = position_limits(model)[1]
    if table is None:
        return prompt, max_new_tokens + 1
    kept = prompt[-max(table - 1 - max_new_tokens, 1) :] if prompt else prompt
    return kept, max(min(max_new_tokens + 1, table - len(kept)), 1)


def max_lengths(src: torch.Tensor, pad_id: int, cfg: SearchConfig, cap: int | None = None) -> torch.Tensor:
    """(batch,) the number of tokens each output may have, counting the final EOS, at most ``cap`` (the
    target positions the model can encode: output token t is decoded at position t)."""
    src_len = (src != pad_id).sum(dim=1)
    return (src_len.float() * cfg.max_len_a + cfg.max_len_b).long().clamp(min=1, max=cap)


def never_emitted(logits: torch.Tensor, bos_id: int, pad_id: int) -> torch.Tensor:
    """logits or log-probabilities (rows, vocab) with the start and padding tokens ruled out: they are
    inputs, never outputs (a barely trained model may rank them high; its output would hold invisible
    tokens). Not renormalised: a hypothesis keeps its log-probability under the model."""
    logits = logits.clone()
    # two scalar fills: a list index would be copied to the device, and a copy waits for the device
    logits[:, bos_id] = float("-inf")
    logits[:, pad_id] = float("-inf")
    return logits


def force_prefixes(
    log_probs: torch.Tensor, step: int, prefixes: list[list[int]], own: torch.Tensor | None = None
) -> torch.Tensor:
    """log_probs: (rows, vocab) at ``step``; a row whose prefix is longer than ``step`` may only continue
    with its prefix token, at its own log-probability under the model (``own``: the values before n-gram
    blocking or a minimum length ruled any out; a prefix's token is taken whatever they say), floored so
    that the hypothesis lives on."""
    rows = [row for row, prefix in enumerate(prefixes) if step < len(prefix)]
    if not rows:
        return log_probs
    index = torch.tensor(rows, device=log_probs.device)
    tokens = torch.tensor([prefixes[row][step] for row in rows], device=log_probs.device)
    kept = (log_probs if own is None else own)[index, tokens].clamp(min=-1e4)
    log_probs = log_probs.clone()
    log_probs[index] = float("-inf")
    log_probs[index, tokens] = kept
    return log_probs


def with_prefixes(limits: torch.Tensor, prefixes: list[list[int]] | None, cap: int | None = None) -> torch.Tensor:
    """Output limits long enough for each prefix and its end token; a prefix beyond ``cap`` (the target
    positions the model can encode) is refused before decoding (it failed at that step)."""
    if not prefixes:
        return limits
    longest = max(len(p) for p in prefixes)
    if cap is not None and longest + 1 > cap:
        raise ValueError(
            f"a prefix of {longest} tokens and its end token need more than the {cap} target positions of the "
            "model's learned position table (pos.max_len); shorten the prefix"
        )
    needed = torch.tensor([len(p) + 1 for p in prefixes], device=limits.device)
    return torch.maximum(limits, needed)
