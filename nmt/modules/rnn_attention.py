"""Attention scoring functions for the RNN decoder (config group ``attention``).

Each compares a decoder state (the query) with every encoder output (the keys) and returns a
distribution over the non-padding source positions plus the weighted sum of the encoder outputs.
Key-side work that does not depend on the query is done once per sentence in :meth:`prepare_keys`.
"""

import math

import torch
from torch import nn


class RNNAttention(nn.Module):
    """Base class: ``score(query, keys)`` differs between the variants, the rest is shared."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def prepare_keys(self, memory: torch.Tensor) -> torch.Tensor:
        """memory: (batch, src_len, dim) -> keys used by :meth:`score` (same shape here)."""
        return memory

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query: (batch, tgt_len, dim), keys: (batch, src_len, dim) -> (batch, tgt_len, src_len)."""
        raise NotImplementedError

    def forward(self, query, keys, memory, src_mask):
        """query: (batch, tgt_len, dim); memory: (batch, src_len, dim); src_mask: (batch, src_len), True
        at real tokens. Returns context (batch, tgt_len, dim) and weights (batch, tgt_len, src_len)."""
        scores = self.score(query, keys).masked_fill(~src_mask[:, None, :], float("-inf"))
        weights = scores.softmax(dim=-1)
        return weights @ memory, weights


class DotAttention(RNNAttention):
    """Scaled dot product: q . k / sqrt(dim) (Luong et al. 2015 "dot", scaled as in Vaswani et al.)."""

    def score(self, query, keys):
        return query @ keys.transpose(1, 2) / math.sqrt(self.dim)


class MultiplicativeAttention(RNNAttention):
    """Luong et al. 2015 "general": q^T W k, a learned bilinear map."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.weight = nn.Linear(dim, dim, bias=False)

    def prepare_keys(self, memory):
        return self.weight(memory)  # W k, once per sentence

    def score(self, query, keys):
        return query @ keys.transpose(1, 2)


class AdditiveAttention(RNNAttention):
    """Bahdanau et al. 2015: v^T tanh(W_q q + W_k k)."""

    def __init__(self, dim: int, attention_dim: int | None = None) -> None:
        super().__init__(dim)
        attention_dim = attention_dim or dim
        self.query_proj = nn.Linear(dim, attention_dim, bias=False)
        self.key_proj = nn.Linear(dim, attention_dim)
        self.v = nn.Linear(attention_dim, 1, bias=False)

    def prepare_keys(self, memory):
        return self.key_proj(memory)  # W_k k, once per sentence

    def score(self, query, keys):
        # (batch, tgt_len, 1, att) + (batch, 1, src_len, att) -> (batch, tgt_len, src_len)
        return self.v(torch.tanh(self.query_proj(query)[:, :, None, :] + keys[:, None, :, :])).squeeze(-1)
