"""The encoder-decoder Transformer (Vaswani et al. 2017), assembled from the modules in nmt.modules.

Position encoding and normalisation arrive as factories (config groups ``pos`` and ``norm``), so the
same code builds every variant; ``norm_position`` places the norm before (pre) or after (post) each
residual block.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from nmt.models.state import DecoderState
from nmt.modules.attention import MultiHeadAttention, attention_entropy
from nmt.modules.dropout import Dropout
from nmt.modules.feedforward import ACTIVATIONS, FeedForward
from nmt.modules.position import PositionEncoding, checked_positions

NormFactory = Callable[[int], nn.Module]
PositionFactory = Callable[..., PositionEncoding]

TIE_OPTIONS = ("none", "decoder", "all")
NORM_POSITIONS = ("pre", "post")
# xavier: every projection Xavier-uniform, every bias 0; fairseq: as fairseq's Transformer (the code of the
# published tiny recipe), whose query, key and value projections take gain 1/sqrt(2) (the scale of the one
# combined projection they replaced) and keep PyTorch's default bias, uniform in +-1/sqrt(d_model)
INITS = ("xavier", "fairseq")
QKV = ("q_proj", "k_proj", "v_proj")


class Residual(nn.Module):
    """x + dropout(f(norm(x))) with pre-norm, norm(x + dropout(f(x))) with post-norm."""

    def __init__(self, d_model: int, norm: NormFactory, dropout: float, pre_norm: bool) -> None:
        super().__init__()
        self.norm = norm(d_model)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


@dataclass(frozen=True)
class LayerSpec:
    """The hyperparameters every encoder and decoder layer shares."""

    d_model: int
    num_heads: int
    ffn_dim: int
    dropout: float  # on each sublayer's output, before the residual add
    attention_dropout: float
    activation_dropout: float  # inside the feed-forward block
    activation: str
    norm: NormFactory
    pre_norm: bool
    fused: bool
    joint: bool = True  # self-attention's three projections (cross-attention's two) one product in training

    @classmethod
    def build(
        cls,
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
        joint_projections: bool = True,
    ) -> "LayerSpec":
        """From the models' constructor options (activation_dropout None: the same as dropout)."""
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"model.norm_position={norm_position!r} is not one of {list(NORM_POSITIONS)}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r} is not one of {sorted(ACTIVATIONS)}")
        if d_model % num_heads:
            raise ValueError(f"model.d_model={d_model} is not divisible by model.num_heads={num_heads}")
        return cls(
            d_model=d_model,
            num_heads=num_heads,
            ffn_dim=ffn_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=dropout if activation_dropout is None else activation_dropout,
            activation=activation,
            norm=norm,
            pre_norm=norm_position == "pre",
            fused=fused_attention,
            joint=joint_projections,
        )

    def attention(self, position: PositionEncoding | None) -> MultiHeadAttention:
        return MultiHeadAttention(
            self.d_model, self.num_heads, self.attention_dropout, position, self.fused, self.joint
        )

    def feedforward(self) -> FeedForward:
        return FeedForward(self.d_model, self.ffn_dim, self.activation_dropout, self.activation)

    def residual(self) -> Residual:
        return Residual(self.d_model, self.norm, self.dropout, self.pre_norm)


class EncoderLayer(nn.Module):
    def __init__(self, spec: LayerSpec, position: PositionEncoding) -> None:
        super().__init__()
        self.self_attn = spec.attention(position)
        self.ffn = spec.feedforward()
        self.attn_block = spec.residual()
        self.ffn_block = spec.residual()

    def forward(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: (batch, src_len, d_model); mask: (batch, 1, 1, src_len)
        def attend(h: torch.Tensor) -> torch.Tensor:
            q, k, v = self.self_attn.project_qkv(h, positions)
            return self.self_attn(h, k, v, mask, positions, positions, q=q)

        x = self.attn_block(x, attend)
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(self, spec: LayerSpec, position: PositionEncoding) -> None:
        super().__init__()
        self.self_attn = spec.attention(position)
        self.cross_attn = spec.attention(None)
        self.ffn = spec.feedforward()
        self.self_block = spec.residual()
        self.cross_block = spec.residual()
        self.ffn_block = spec.residual()

    def forward(self, x, positions, causal, cross_k, cross_v, cross_mask, past_k=None, past_v=None, fixed=False):
        """x: (batch, tgt_len, d_model) for tgt positions ``positions``; causal: each position attends to
        itself and those before it only (training; a step of decoding has no later position to hide);
        past_k/v: (batch, heads, past, hd) cached keys/values of earlier positions. Returns x and the
        keys/values of all positions so far. ``fixed``: past_k/v are a cache of fixed size (batch, heads,
        room, hd) into which this one step's keys/values are written at ``positions`` (a (1,) tensor on
        the device), in place; the step attends to the slots up to its own (the shapes never change, so
        a CUDA graph can replay the step)."""
        cache = {}

        def self_attend(h: torch.Tensor) -> torch.Tensor:
            q, k, v = self.self_attn.project_qkv(h, positions)
            mask = None
            if fixed:
                # in the cache's dtype, as the growing cache's cat promotes: under autocast the projections
                # give bf16 and the cache is the encoder state's fp32
                past_k.index_copy_(2, positions, k.to(past_k.dtype))
                past_v.index_copy_(2, positions, v.to(past_v.dtype))
                k, v = past_k, past_v
                k_pos = torch.arange(k.size(2), device=k.device)
                mask = (k_pos <= positions)[None, None, None, :]  # the slots written so far, this one included
            elif past_k is not None:
                k, v = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
            cache["k"], cache["v"] = k, v
            if not fixed:  # the whole target at once (training) attends to its own positions
                k_pos = positions if past_k is None else torch.arange(k.size(2), device=k.device)
            # padding only follows the real tokens, so the causal mask alone keeps it out of their context
            return self.self_attn(h, k, v, mask, positions, k_pos, causal=causal, q=q)

        x = self.self_block(x, self_attend)
        x = self.cross_block(x, lambda h: self.cross_attn(h, cross_k, cross_v, cross_mask))
        x = self.ffn_block(x, self.ffn)
        return x, cache["k"], cache["v"]


class Transformer(nn.Module):
    """Encoder-decoder Transformer with the incremental decoding interface of every nmt model:

    ``encode(src) -> state``, ``decode_step(prev_tokens, state) -> (logits, state)``, ``state.reorder``.
    """

    # graph_updates=true may record its training step: it reads nothing from the device and keeps no Python
    # value that changes between batches
    replayable_updates = True

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        pad_id: int,
        position: PositionFactory,
        norm: NormFactory,
        d_model: int = 512,
        num_heads: int = 8,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        ffn_dim: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float | None = None,
        activation: str = "relu",
        norm_position: str = "pre",
        tie_embeddings: str = "decoder",
        fused_attention: bool = True,
        init: str = "xavier",
        joint_projections: bool = True,
    ) -> None:
        super().__init__()
        if init not in INITS:
            raise ValueError(f"model.init={init!r} is not one of {list(INITS)}")
        if tie_embeddings not in TIE_OPTIONS:
            raise ValueError(f"model.tie_embeddings={tie_embeddings!r} is not one of {list(TIE_OPTIONS)}")
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"model.norm_position={norm_position!r} is not one of {list(NORM_POSITIONS)}")
        if d_model % num_heads:
            raise ValueError(f"model.d_model={d_model} is not divisible by model.num_heads={num_heads}")
        if tie_embeddings == "all" and src_vocab_size != tgt_vocab_size:
            raise ValueError(
                "model.tie_embeddings='all' shares one table between source and target, which needs a joint "
                f"vocabulary (data.tokenizer.joint=true); got sizes {src_vocab_size} and {tgt_vocab_size}"
            )
        self.pad_id = pad_id
        self.d_model = d_model
        self.embed_scale = math.sqrt(d_model)
        head_dim = d_model // num_heads
        pre_norm = norm_position == "pre"

        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = (
            self.src_embed if tie_embeddings == "all" else nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        )
        # one position module per stack: learned/relative tables are not shared between encoder and decoder
        self.src_pos = position(d_model=d_model, head_dim=head_dim)
        self.tgt_pos = position(d_model=d_model, head_dim=head_dim)
        self.tgt_pos.causal = True  # its self-attention looks back only
        self.src_pos.check_stack()
        self.tgt_pos.check_stack()
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
        self.encoder = nn.ModuleList(EncoderLayer(spec, self.src_pos) for _ in range(encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(spec, self.tgt_pos) for _ in range(decoder_layers))
        # pre-norm leaves the residual stream unnormalised: one final norm per stack
        self.encoder_norm = norm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = norm(d_model) if pre_norm else nn.Identity()
        self.output = nn.Linear(d_model, tgt_vocab_size, bias=False)
        self._init_weights(init)
        if tie_embeddings != "none":
            self.output.weight = self.tgt_embed.weight

    def repeated_layers(self) -> list[nn.Module]:
        """The layers ``compile=layers`` compiles one by one: one compile serves every layer of a kind."""
        return [*self.encoder, *self.decoder]

    def _init_weights(self, init: str = "xavier") -> None:
        for name, param in self.named_parameters():
            qkv = init == "fairseq" and name.split(".")[-2] in QKV
            if name.endswith("weight") and param.dim() == 2 and "_pos." not in name:
                if "embed" in name:
                    # std d^-1/2: with the sqrt(d) scale, embeddings enter at unit variance
                    nn.init.normal_(param, std=self.d_model**-0.5)
                else:
                    nn.init.xavier_uniform_(param, gain=2**-0.5 if qkv else 1.0)
            elif name.endswith("bias") and "_pos." not in name and "norm" not in name and not qkv:
                nn.init.zeros_(param)
        for embed in (self.src_embed, self.tgt_embed):
            nn.init.zeros_(embed.weight[self.pad_id])

    # ---- shared pieces -------------------------------------------------------------------------
    def _embed(self, table: nn.Embedding, pos: PositionEncoding, tokens: torch.Tensor, positions: torch.Tensor):
        # tokens: (batch, len) -> (batch, len, d_model)
        return self.dropout(pos.embed(table(tokens) * self.embed_scale, positions))

    def _encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src: (batch, src_len) -> memory (batch, src_len, d_model), mask (batch, 1, 1, src_len)."""
        src_mask = (src != self.pad_id)[:, None, None, :]
        positions = checked_positions(self.src_pos, 0, src.size(1), src.device)
        x = self._embed(self.src_embed, self.src_pos, src, positions)
        for layer in self.encoder:
            x = layer(x, src_mask, positions)
        return self.encoder_norm(x), src_mask

    # ---- training: the whole target in parallel ------------------------------------------------
    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src: (batch, src_len), tgt_in: (batch, tgt_len) -> logits (batch, tgt_len, tgt_vocab)."""
        memory, src_mask = self._encode(src)
        tgt_len = tgt_in.size(1)
        positions = checked_positions(self.tgt_pos, 0, tgt_len, src.device)
        x = self._embed(self.tgt_embed, self.tgt_pos, tgt_in, positions)
        for layer in self.decoder:
            cross_k, cross_v = layer.cross_attn.project_kv(memory)
            x, _, _ = layer(x, positions, True, cross_k, cross_v, src_mask)
        return self.output(self.decoder_norm(x))

    def cross_attention_entropy(self, src: torch.Tensor, tgt_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """How spread each decoder layer's attention over the source is on a teacher-forced batch: (layers,)
        entropies in nats (mean over heads and real target tokens), and the entropy of attention spread evenly
        over each query's source. At that even level in every layer the decoder reads only the mean of the
        encoder's states (BENCHMARKS.md: a seed stalled so for 1,900 updates)."""
        attentions = [layer.cross_attn for layer in self.decoder]
        before = [(a.keep_weights, a.last_weights) for a in attentions]  # an attention-map tool's, kept
        for attention in attentions:
            attention.keep_weights = True  # the explicit path, which keeps its weights
        try:
            with torch.no_grad():
                self(src, tgt_in)
            queries = tgt_in != self.pad_id
            entropies = torch.stack([attention_entropy(a.last_weights, queries) for a in attentions])
        finally:
            for attention, (keep, weights) in zip(attentions, before, strict=True):
                attention.keep_weights, attention.last_weights = keep, weights
        source_lengths = (src != self.pad_id).sum(1).float()
        even = (source_lengths.log()[:, None] * queries).sum() / queries.sum()
        return entropies, even

    # ---- inference: one step at a time from a cache --------------------------------------------
    def position_limits(self) -> tuple[int | None, int | None]:
        """The source and target positions the model can encode (a learned table's size), None for any:
        a search caps its outputs by the second, a translator its inputs by the first."""
        return self.src_pos.max_positions, self.tgt_pos.max_positions

    def encode(self, src: torch.Tensor) -> DecoderState:
        """Run the encoder and project its output for every cross-attention once per sentence."""
        memory, src_mask = self._encode(src)
        tensors = {"src_mask": src_mask}
        batch = src.size(0)
        for i, layer in enumerate(self.decoder):
            tensors[f"cross_k{i}"], tensors[f"cross_v{i}"] = layer.cross_attn.project_kv(memory)
            empty = memory.new_zeros(batch, layer.self_attn.num_heads, 0, layer.self_attn.head_dim)
            tensors[f"self_k{i}"], tensors[f"self_v{i}"] = empty, empty
        return DecoderState(tensors, step=0)

    def fixed_cache(self, state: DecoderState, room: int) -> DecoderState:
        """``state`` (from :meth:`encode`, no step taken) with self-attention caches of ``room`` positions,
        filled in place by :meth:`decode_step`, and its position a tensor on the device that each step
        advances in place: a step then has the same shapes and memory at every position, which a CUDA
        graph needs (``nmt.decoding.graphed``). ValueError when the position encoding cannot encode
        ``room`` positions."""
        self.tgt_pos.check_positions(room)
        tensors = dict(state.tensors)
        for i in range(len(self.decoder)):
            past = tensors[f"self_k{i}"]
            tensors[f"self_k{i}"] = past.new_zeros(past.size(0), past.size(1), room, past.size(3))
            tensors[f"self_v{i}"] = past.new_zeros(past.size(0), past.size(1), room, past.size(3))
        position = torch.zeros(1, dtype=torch.long, device=past.device)
        return DecoderState(tensors, step=state.step, position=position)

    def decode_step(self, prev_tokens: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        """prev_tokens: (batch,) the token at position ``state.step`` -> logits (batch, tgt_vocab).
        A state of :meth:`fixed_cache` is updated in place (its caches and position) and returned."""
        t = state.tensors
        fixed = state.position is not None
        if fixed:
            positions = state.position
        else:
            positions = checked_positions(self.tgt_pos, state.step, 1, prev_tokens.device)
        x = self._embed(self.tgt_embed, self.tgt_pos, prev_tokens[:, None], positions)  # (batch, 1, d_model)
        new = dict(t)
        for i, layer in enumerate(self.decoder):
            x, new[f"self_k{i}"], new[f"self_v{i}"] = layer(
                x,
                positions,
                False,
                t[f"cross_k{i}"],
                t[f"cross_v{i}"],
                t["src_mask"],
                t[f"self_k{i}"],
                t[f"self_v{i}"],
                fixed,
            )
        logits = self.output(self.decoder_norm(x))[:, -1]
        if fixed:
            state.position += 1
            return logits, state
        return logits, DecoderState(new, state.step + 1)

    @torch.no_grad()
    def attention_maps(self, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[str, torch.Tensor]:
        """Teacher-forced cross-attention per decoder layer: {"layer<i>": (batch, heads, tgt_len, src_len)}."""
        layers = [layer.cross_attn for layer in self.decoder]
        for attention in layers:
            attention.keep_weights = True
        try:
            self.forward(src, tgt_in)
            return {f"layer{i}": attention.last_weights for i, attention in enumerate(layers)}
        finally:
            for attention in layers:
                attention.keep_weights, attention.last_weights = False, None
