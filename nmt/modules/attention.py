"""Multi-head scaled dot-product attention (Vaswani et al. 2017), with two interchangeable paths:

- explicit: the formula written out, softmax(q k^T / sqrt(d) + mask) v, which can keep its weights
  for attention maps and supports every position encoding;
- fused: ``F.scaled_dot_product_attention``, PyTorch's kernel, faster and lighter in memory.

Both give the same result up to floating-point rounding (tested). Shaw-style relative positions add to
the values through the weights, so they always take the explicit path.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

from nmt.modules.dropout import dropout
from nmt.modules.position import PositionEncoding


class MultiHeadAttention(nn.Module):
    """Attention of queries over keys and values, split into ``num_heads`` heads.

    Keys and values are projected by :meth:`project_kv` separately from :meth:`forward`, so that the
    decoder can cache them (self-attention grows its cache one step at a time; cross-attention projects
    the encoder output once per sentence).
    """

    # PyTorch's fused kernel has a slow backward pass on a CPU (a quarter of a bf16 training step of the tiny
    # model; the explicit formula trains faster there, BENCHMARKS.md), so CPU training skips it. False: a CPU
    # trains on the path a GPU takes (benchmarks/op_count.py counts a GPU's operators so)
    explicit_cpu_training = True
    # a decoding step's attention (one query, no gradients) by PyTorch's kernel; True: by the written-out
    # formula, four small kernels where a GPU's fused kernel may cost more for one query over a few dozen keys
    # (benchmarks/attention_kernels.py and the GPU benchmark's validation time both; the kernel stays the
    # default until a GPU has)
    explicit_decoding_steps = False

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        position: PositionEncoding | None = None,
        fused: bool = True,
        joint: bool = True,
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout
        self.position = position
        self.fused = fused
        self.joint = joint  # projections of one input as one product where it pays (_joint_pays)
        self.keep_weights = False  # set by attention-map tools; forces the explicit path
        self.last_weights: torch.Tensor | None = None

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, len, d_model) -> (batch, heads, len, head_dim)
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def _joint(self, x: torch.Tensor, projections: tuple[nn.Linear, ...]) -> tuple[torch.Tensor, ...]:
        """Several projections of the same x as one product: (batch, len, d_model) -> one (batch, heads,
        len, head_dim) per projection. Its weights are concatenated at each call (the parameters stay the
        three modules', as checkpoints and exports hold them)."""
        weight = torch.cat([p.weight for p in projections])
        bias = torch.cat([p.bias for p in projections])
        batch, length, _ = x.shape
        out = F.linear(x, weight, bias).view(batch, length, len(projections), self.num_heads, self.head_dim)
        # unbound along the projections' own dimension, so that backward stacks their gradients straight into
        # the product's layout (unbinding a permuted view would need a copy of the stacked gradient back)
        return tuple(part.transpose(1, 2) for part in out.unbind(2))

    def _joint_pays(self, x: torch.Tensor) -> bool:
        # with gradients (a training update): one product, its two backward products and, under autocast, one
        # cast of x in place of one each per projection; a tiny model's update on a GPU is bound by the count
        # of its kernels. So too without gradients over many positions (validation's loss, encoding). A
        # decoding step (one position) keeps the separate products, which read each weight once, where
        # concatenating would first copy them all at every step
        return self.joint and (torch.is_grad_enabled() or x.size(1) > 1)

    def project_kv(self, x: torch.Tensor, positions: torch.Tensor | None = None):
        """x: (batch, k_len, d_model) -> keys, values: (batch, heads, k_len, head_dim)."""
        if self._joint_pays(x):
            k, v = self._joint(x, (self.k_proj, self.v_proj))
        else:
            k, v = self._split(self.k_proj(x)), self._split(self.v_proj(x))
        if self.position is not None:
            k = self.position.rotate(k, positions)
        return k, v

    def project_qkv(self, x: torch.Tensor, positions: torch.Tensor | None = None):
        """Self-attention's projections of x: (batch, len, d_model) -> queries (not yet rotated: ``forward``
        rotates them), keys and values (as :meth:`project_kv`), each (batch, heads, len, head_dim)."""
        if not self._joint_pays(x):
            return (self._split(self.q_proj(x)), *self.project_kv(x, positions))
        q, k, v = self._joint(x, (self.q_proj, self.k_proj, self.v_proj))
        if self.position is not None:
            k = self.position.rotate(k, positions)
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        q_pos: torch.Tensor | None = None,
        k_pos: torch.Tensor | None = None,
        causal: bool = False,
        q: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: (batch, q_len, d_model) queries; k, v: (batch, heads, k_len, head_dim);
        mask: bool, broadcastable to (batch, heads, q_len, k_len), True where attention is allowed;
        causal: the last query sees every key, each earlier one a key fewer (ANDed with ``mask``);
        q: x already projected (:meth:`project_qkv`), or None to project it here.
        Returns (batch, q_len, d_model)."""
        if q is None:
            q = self._split(self.q_proj(x))  # (batch, heads, q_len, head_dim)
        pos = self.position
        bias = scaled_bias = None
        if pos is not None:
            q = pos.rotate(q, q_pos)
            bias = pos.scores(q, q_pos, k_pos)  # (batch, heads, q_len, k_len) or None
            scaled_bias = pos.bias(q_pos, k_pos)  # (heads or 1, q_len, k_len) or None
        cpu_training = self.explicit_cpu_training and self.training and q.device.type == "cpu"
        decoding_step = self.explicit_decoding_steps and q.size(2) == 1 and not torch.is_grad_enabled()
        explicit = (
            not self.fused
            or cpu_training
            or decoding_step
            or self.keep_weights
            or (pos is not None and pos.needs_attention_weights)
        )
        if explicit:
            out = self._explicit(
                q,
                k,
                v,
                causal_mask(mask, q.size(2), k.size(2), q.device) if causal else mask,
                bias,
                scaled_bias,
                q_pos,
                k_pos,
            )
        else:
            out = self._fused(q, k, v, mask, bias, scaled_bias, causal)
        batch, _, q_len, _ = out.shape
        out = out.transpose(1, 2).reshape(batch, q_len, self.num_heads * self.head_dim)
        return self.out_proj(out)

    def _explicit(self, q, k, v, mask, bias, scaled_bias, q_pos, k_pos) -> torch.Tensor:
        scores = q @ k.transpose(-1, -2)  # (batch, heads, q_len, k_len)
        if bias is not None:
            scores = scores + bias
        scores = scores / math.sqrt(self.head_dim)
        if scaled_bias is not None:
            scores = scores + scaled_bias.to(scores.dtype)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        if self.keep_weights:
            self.last_weights = weights.detach()
        weights = dropout(weights, self.dropout, self.training)
        out = weights @ v  # (batch, heads, q_len, head_dim)
        if self.position is not None:
            extra = self.position.values(weights, q_pos, k_pos)
            if extra is not None:
                out = out + extra
        return out

    def _fused(self, q, k, v, mask, bias, scaled_bias, causal) -> torch.Tensor:
        dropout_p = self.dropout if self.training else 0.0
        if causal and mask is None and bias is None and scaled_bias is None and q.size(2) == k.size(2):
            # no mask tensor: the kernel masks the future itself, and flash attention applies on a GPU
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        if causal:
            mask = causal_mask(mask, q.size(2), k.size(2), q.device)
        attn_mask = mask
        if bias is not None or scaled_bias is not None:
            # the kernel takes one additive mask: fold the (pre-scaling) bias, the scaled one and the boolean
            # mask into it
            attn_mask = bias / math.sqrt(self.head_dim) if bias is not None else 0
            attn_mask = attn_mask + scaled_bias.to(q.dtype) if scaled_bias is not None else attn_mask
            if mask is not None:
                attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)


def causal_mask(mask: torch.Tensor | None, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """``mask`` (or all True) with the future of each query masked, the queries being the last ``q_len``
    of the ``k_len`` positions: (q_len, k_len) broadcast against ``mask``, on ``device`` (the scores')."""
    future = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    return future if mask is None else mask & future


def attention_entropy(weights: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """How spread attention is, in nats: ``weights`` (batch, heads, queries, keys), each row summing to 1;
    ``queries`` (batch, queries), 1 where a query is a real token. The entropy of a row, averaged over the
    heads and the real queries (log of the keys' count for attention spread evenly over them, 0 for one)."""
    rows = -(weights.float().clamp_min(1e-30).log() * weights.float()).sum(-1)  # (batch, heads, queries)
    queries = queries.float()
    return (rows * queries[:, None, :]).sum() / (queries.sum() * weights.size(1))
