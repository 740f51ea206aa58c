"""Position-wise feed-forward block of the Transformer."""

import torch
from torch import nn
from torch.nn import functional as F

from nmt.modules.dropout import Dropout

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    """Two linear maps with a non-linearity between them, applied at every position alike."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float = 0.1, activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not one of {sorted(ACTIVATIONS)}")
        self.up = nn.Linear(d_model, ffn_dim)
        self.down = nn.Linear(ffn_dim, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (batch, len, d_model) -> (batch, len, ffn_dim) -> (batch, len, d_model)
        return self.down(self.dropout(self.activation(self.up(x))))
