"""A decoder-only Transformer language model, built from the same modules as the translation Transformer.

Every ``pos`` and ``norm`` option works here as there. It offers the incremental interface of every nmt
model, so the search code generates from it unchanged: ``encode(prompt)`` runs the prompt once and
caches its keys and values; the first ``decode_step`` returns the prediction after the prompt (the
search's start token is not needed: the prompt already begins the sequence), later steps feed one token.
"""

import math

import torch
from torch import nn

from nmt.models.state import DecoderState
from nmt.models.transformer import LayerSpec, NormFactory, PositionFactory
from nmt.modules.dropout import Dropout
from nmt.modules.position import PositionEncoding, checked_positions


class CausalLayer(nn.Module):
    """Masked self-attention and a feed-forward block: a decoder layer without cross-attention."""

    def __init__(self, spec: LayerSpec, position: PositionEncoding) -> None:
        super().__init__()
        self.self_attn = spec.attention(position)
        self.ffn = spec.feedforward()
        self.attn_block = spec.residual()
        self.ffn_block = spec.residual()

    def forward(self, x, positions, causal, past_k=None, past_v=None):
        """x: (batch, len, d_model) at positions ``positions``; causal: each position sees itself and
        those before it only (a step of generation has no later one to hide); past_k/v: (batch, heads,
        past, head_dim). Returns x and the keys/values of every position so far."""
        cache = {}

        def self_attend(h: torch.Tensor) -> torch.Tensor:
            q, k, v = self.self_attn.project_qkv(h, positions)
            if past_k is not None:
                k, v = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
            cache["k"], cache["v"] = k, v
            k_pos = positions if past_k is None else torch.arange(k.size(2), device=k.device)
            return self.self_attn(h, k, v, None, positions, k_pos, causal=causal, q=q)

        x = self.attn_block(x, self_attend)
        return self.ffn_block(x, self.ffn), cache["k"], cache["v"]


class TransformerLM(nn.Module):
    """p(w_t | w_<t) with a stack of causal self-attention layers; the output layer shares the embedding
    table unless ``tie_output`` is false (Press and Wolf 2017)."""

    # graph_updates=true may record its training step: it reads nothing from the device and keeps no Python
    # value that changes between batches
    replayable_updates = True

    decoder_only = True  # reads no source: tasks that translate refuse it, task=lm requires it

    def __init__(
        self,
        tgt_vocab_size: int,
        pad_id: int,
        position: PositionFactory,
        norm: NormFactory,
        src_vocab_size: int | None = None,
        d_model: int = 256,
        num_heads: int = 4,
        num_layers: int = 4,
        ffn_dim: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float | None = None,
        activation: str = "relu",
        norm_position: str = "pre",
        tie_output: bool = True,
        fused_attention: bool = True,
        joint_projections: bool = True,
    ) -> None:
        super().__init__()
        # the builder passes both vocabulary sizes; a prompt is text of the same vocabulary
        if src_vocab_size is not None and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"a language model has one vocabulary; got sizes {src_vocab_size} and {tgt_vocab_size}")
        self.pad_id = pad_id
        self.d_model = d_model
        self.embed_scale = math.sqrt(d_model)
        pre_norm = norm_position == "pre"
        self.embed = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.pos = position(d_model=d_model, head_dim=d_model // num_heads)
        self.pos.causal = True  # its self-attention looks back only
        self.pos.check_stack()
        self.dropout = Dropout(dropout)
        spec = LayerSpec.build(
            d_model,
            num_heads,
            ffn_dim,
            dropout,
            attention_dropout,
            activation_dropout,
            activation,
            norm,
            norm_position,
            fused_attention,
            joint_projections,
        )
        self.layers = nn.ModuleList(CausalLayer(spec, self.pos) for _ in range(num_layers))
        self.final_norm = norm(d_model) if pre_norm else nn.Identity()
        self.output = nn.Linear(d_model, tgt_vocab_size, bias=False)
        self._init_weights()
        if tie_output:
            self.output.weight = self.embed.weight

    def repeated_layers(self) -> list[nn.Module]:
        """The layers ``compile=layers`` compiles one by one: one compile serves them all."""
        return list(self.layers)

    def _init_weights(self) -> None:
        for name, param in self.named_parameters():
            if name.startswith("pos.") or ".pos." in name:
                continue  # position modules initialise their own tables
            if name.endswith("weight") and param.dim() == 2:
                if name.startswith("embed"):
                    nn.init.normal_(param, std=self.d_model**-0.5)  # unit variance after the sqrt(d) scale
                else:
                    nn.init.xavier_uniform_(param)
            elif name.endswith("bias") and "norm" not in name:
                nn.init.zeros_(param)
        nn.init.zeros_(self.embed.weight[self.pad_id])

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, causal: bool, past: dict | None):
        """tokens: (batch, len) at ``positions`` -> logits (batch, len, vocab) and the per-layer caches."""
        x = self.dropout(self.pos.embed(self.embed(tokens) * self.embed_scale, positions))
        cache = {}
        for i, layer in enumerate(self.layers):
            past_k, past_v = (past[f"self_k{i}"], past[f"self_v{i}"]) if past else (None, None)
            x, cache[f"self_k{i}"], cache[f"self_v{i}"] = layer(x, positions, causal, past_k, past_v)
        return self.output(self.final_norm(x)), cache

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: (batch, len) -> logits (batch, len, vocab); position t sees tokens 0..t only.
        Padding may only follow the real tokens (the causal mask keeps it out of their context)."""
        positions = checked_positions(self.pos, 0, tokens.size(1), tokens.device)
        return self._run(tokens, positions, True, None)[0]

    # ---- generation: the incremental interface -------------------------------------------------
    def position_limits(self) -> tuple[int | None, int | None]:
        """The positions the model can encode (a learned table's size), None for any: prompts and their
        continuations share them (``continuation_room``)."""
        return self.pos.max_positions, self.pos.max_positions

    def encode(self, prompt: torch.Tensor) -> DecoderState:
        """prompt: (batch, len) of equal-length prompts (no padding) -> the state after the prompt."""
        if (prompt == self.pad_id).any():
            raise ValueError("a language model generates from prompts of equal length: give one prompt per batch")
        length = prompt.size(1)
        positions = checked_positions(self.pos, 0, length, prompt.device)
        logits, cache = self._run(prompt, positions, True, None)
        return DecoderState({**cache, "next_logits": logits[:, -1]}, step=length)

    def decode_step(self, prev_tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """prev_tokens: (batch,) -> logits (batch, vocab) of the next token. The first call after
        :meth:`encode` returns the prediction that follows the prompt and ignores ``prev_tokens``."""
        tensors = dict(state.tensors)
        if "next_logits" in tensors:
            return tensors.pop("next_logits"), DecoderState(tensors, state.step)
        positions = checked_positions(self.pos, state.step, 1, prev_tokens.device)
        logits, cache = self._run(prev_tokens[:, None], positions, False, tensors)
        return logits[:, -1], DecoderState(cache, state.step + 1)

    @torch.no_grad()
    def attention_maps(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """Self-attention per layer over ``tokens``: {"layer<i>": (batch, heads, len, len)}, row t = what
        position t attended to (only positions <= t can be non-zero)."""
        layers = [layer.self_attn for layer in self.layers]
        for attention in layers:
            attention.keep_weights = True
        try:
            self.forward(tokens)
            return {f"layer{i}": attention.last_weights for i, attention in enumerate(layers)}
        finally:
            for attention in layers:
                attention.keep_weights, attention.last_weights = False, None
