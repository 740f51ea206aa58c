"""A language model's continuations of one prompt: the search both ``evaluate.py prompt=`` and
``translate.py`` (the Python ``Translator``) run, so that one prompt, one seed and one search give the
same continuations, in the same order, from either.

The prompt follows a sentence end, as every sentence of the training stream does. Prompts are not padded,
so they are continued one at a time.
"""

import math
from dataclasses import dataclass, replace

import torch
from torch.nn import functional as F

from nmt.data.tokenizer import BOS_ID, EOS_ID
from nmt.decoding.constraints import continuation_room
from nmt.decoding.search import decode, ranked_hypotheses
from nmt.decoding.settings import SearchConfig


def draw_number(number: int, draw: int) -> int | str:
    """What seeds draw ``draw`` of line ``number`` (sentence_generators): the line's number for its first draw,
    so that one draw is what a single sample of the line is, then ``"number.draw"``."""
    return number if draw == 0 else f"{number}.{draw}"


@dataclass
class Continuation:
    """One continuation: its token ids (no end token), its search score (NaN where the search ranks nothing:
    greedy, sampling), and, where asked or needed to rank draws, each token's log-probability with the end
    token last (empty otherwise)."""

    ids: list[int]
    score: float
    token_log_probs: list[float]

    @property
    def log_prob(self) -> float:
        return sum(self.token_log_probs) if self.token_log_probs else math.nan


@torch.no_grad()
def continue_prompt(
    model, prompt: list[int], search: SearchConfig, n: int, max_new_tokens: int, number: int = 1, scores: bool = False
) -> tuple[list[int], list[Continuation]]:
    """(the prompt's tokens the model reads, at most ``n`` continuations best first). A beam gives its n best;
    sampling draws ``n``, each seeded by ``number`` and its draw (:func:`draw_number`), ranked by their
    log-probability under the model when there are several; greedy gives one. ``scores``: every
    continuation's token log-probabilities. A prompt longer than a learned position table keeps its end."""
    kept, room = continuation_room(model, prompt, max_new_tokens)
    device = next(model.parameters()).device
    context = torch.tensor([[EOS_ID, *kept]], device=device)  # (1, 1 + prompt)
    # the limit counts the end token; a min_len kept from training's config asks no more than max_new_tokens
    search = replace(search, max_len_a=0.0, max_len_b=room, min_len=min(search.min_len, max_new_tokens))
    if search.ranks:
        found = ranked_hypotheses(model, context, BOS_ID, EOS_ID, search, numbers=[number])[0][:n] or [(0.0, [])]
        continuations = [Continuation(ids, score, []) for score, ids in found]
    else:
        draws = n if search.samples else 1
        drawn = [draw_number(number, k) for k in range(draws)]
        outputs = decode(model, context.expand(draws, -1), BOS_ID, EOS_ID, search, numbers=drawn)
        continuations = [Continuation(ids, math.nan, []) for ids in outputs]
    ranked_by_log_prob = not search.ranks and len(continuations) > 1
    if scores or ranked_by_log_prob:
        for continuation in continuations:
            continuation.token_log_probs = token_log_probs(model, kept, continuation.ids)
    if ranked_by_log_prob:
        continuations.sort(key=lambda c: -c.log_prob)
    return kept, continuations


def token_log_probs(model, prompt: list[int], ids: list[int]) -> list[float]:
    """Each token of ``ids`` and the end token after them: its log-probability after the prompt, teacher-forced."""
    device = next(model.parameters()).device
    sequence = torch.tensor([[EOS_ID, *prompt, *ids]], device=device)  # (1, 1 + prompt + ids)
    log_probs = F.log_softmax(model(sequence).float(), dim=-1)[0]  # (len, vocab)
    start = len(prompt)  # the prediction after the prompt's last token
    targets = torch.tensor([*ids, EOS_ID], device=device)
    return [float(x) for x in log_probs[start : start + len(targets)].gather(-1, targets[:, None]).squeeze(-1)]
