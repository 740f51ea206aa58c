"""Position encodings (config group `pos`).

A position encoding can act in four places, so the base class offers hooks for each, every one a no-op:

- ``embed``: added to the token embeddings (sinusoidal, learned);
- ``rotate``: applied to queries and keys of self-attention (RoPE);
- ``scores`` / ``values``: terms that depend on the query-key distance, added to the attention scores
  and to the attended values (Shaw et al. 2018 relative position representations);
- ``bias``: a term of the positions alone added to the scaled scores (ALiBi, T5's relative buckets).

The embedding layer calls ``embed``; self-attention calls the others; cross-attention calls none.
Every class takes ``d_model`` and ``head_dim`` from the model builder (the heads are ``d_model // head_dim``),
and its own options from yaml. A model sets ``causal`` on the encoding of a stack that looks back only,
after building it: an encoding that differs there reads it inside its hooks, not in its constructor.
"""

import math

import torch
from torch import nn


class PositionEncoding(nn.Module):
    """No position information at all (``pos=none``): the model sees a bag of tokens."""

    #: True when the encoding adds to the attended values, which needs the explicit attention weights
    needs_attention_weights = False
    #: the positions it can encode (a table's size), None for any number
    max_positions: int | None = None
    #: True when positions reach the model only through their distances, so that moving every position by the
    #: same amount changes nothing (no positions, RoPE, Shaw et al.'s); False where an absolute position does.
    #: Each encoding says which, and tests/test_layers.py holds it to that in both directions
    distance_only = True
    #: set by the model, after building the encoding, on that of a stack whose self-attention looks back only
    #: (a decoder's, a language model's): an encoding that differs there reads it in its hooks (T5's buckets
    #: all go to keys behind), since its constructor runs before it is set
    causal = False

    def __init__(self, d_model: int, head_dim: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.head_dim = head_dim

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (batch, len, d_model), positions: (len,) -> (batch, len, d_model)."""
        return x

    def check_positions(self, count: int) -> None:
        """Raise ValueError when positions 0 .. count - 1 cannot all be encoded (a table of fixed size)."""

    def check_stack(self) -> None:
        """Raise ValueError when the encoding cannot serve its stack, as ``causal`` says which (an encoder's
        needs to tell a sentence from its reverse): the model calls it once ``causal`` is set."""

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: (batch, heads, len, head_dim) queries or keys -> same shape."""
        return x

    def scores(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """A term added to the raw scores q k^T (batch, heads, q_len, k_len), or None. It is added *before*
        the division by sqrt(head_dim), as Shaw et al.'s q a^T is: a bias meant for the scaled scores (ALiBi,
        T5's buckets) belongs in :meth:`bias`. The heads are ``d_model // head_dim``."""
        return None

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """A term of the positions alone added *after* the division by sqrt(head_dim), to the scores the
        softmax reads: (heads, q_len, k_len) or (1, q_len, k_len), or None. ALiBi's -m_h (i - j) and T5's
        learned bucket biases are of this kind."""
        return None

    def values(self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """Term added to the attention output (batch, heads, q_len, head_dim), or None."""
        return None


def sinusoid_table(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Vaswani et al.'s table: sin on even, cos on odd channels. positions: (len,) -> (len, dim)."""
    inv_freq = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions.float()[:, None] * inv_freq[None, :]  # (len, dim/2)
    table = torch.zeros(len(positions), dim, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)[:, : dim // 2]
    return table


class SinusoidalPosition(PositionEncoding):
    """Fixed sinusoidal absolute positions added to the embeddings (``pos=absolute``), for any length."""

    distance_only = False
    # options kept only so that older checkpoints' configs still build; training refuses them (read by nothing)
    legacy_options = {"max_len": "sinusoidal positions are computed for any length, with no table to size"}

    def __init__(self, d_model: int, head_dim: int, max_len: int | None = None) -> None:
        super().__init__(d_model, head_dim)  # max_len: still accepted from the configs of older checkpoints

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # computed for the positions at hand, not looked up in a precomputed table: choosing between a
        # table and the formula needs the largest position on the host, a device sync on a GPU and a graph
        # break under torch.compile; a few sines are cheaper than either
        return x + sinusoid_table(positions, self.d_model).to(x.dtype)  # (len, d_model) broadcasts


def checked_positions(encoding: PositionEncoding, start: int, count: int, device: torch.device) -> torch.Tensor:
    """Positions ``start .. start + count - 1`` as a (count,) tensor on ``device``, made there (no copy from the
    host). An encoding of fixed size (a learned table) refuses them here, from the host's numbers (ValueError)."""
    encoding.check_positions(start + count)
    return torch.arange(start, start + count, device=device)


class LearnedPosition(PositionEncoding):
    """A trained embedding per absolute position (``pos=learned``), as in BERT and GPT-2."""

    distance_only = False

    def __init__(self, d_model: int, head_dim: int, max_len: int = 512) -> None:
        super().__init__(d_model, head_dim)
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=d_model**-0.5)

    @property
    def max_positions(self) -> int:
        return self.max_len

    def check_positions(self, count: int) -> None:
        if count > self.max_len:
            raise ValueError(
                f"position {count - 1} is beyond pos.max_len={self.max_len} of the learned position table "
                "(training: raise pos.max_len or lower data.max_len; decoding: a shorter input, max_input_len, "
                "or a lower decode.max_len_a / max_len_b)"
            )

    def embed(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # the positions' range was checked on the host where they were made (``positions``): reading their
        # largest here would wait for the device at every decoding step
        return x + self.table(positions)


class RotaryPosition(PositionEncoding):
    """RoPE (Su et al. 2021): rotate channel pairs of queries and keys by a position-dependent angle,
    so that their dot product depends only on the distance between the two positions (``pos=rope``)."""

    def __init__(self, d_model: int, head_dim: int, base: float = 10000.0) -> None:
        super().__init__(d_model, head_dim)
        if head_dim % 2:
            raise ValueError(
                f"pos=rope rotates pairs of a head's dimensions, and a head has {head_dim} (model.d_model / "
                "model.num_heads): choose d_model and num_heads whose quotient is even"
            )
        if isinstance(base, bool) or not isinstance(base, int | float) or not 1 < base < math.inf:
            # 0 or below made every angle non-finite, and training skipped every batch after the data was read
            raise ValueError(
                f"pos.base={base!r}: must be a finite number > 1 (the wavelengths of the pairs run from 2 pi to "
                "2 pi x base; the default 10000)"
            )
        inv_freq = base ** (-torch.arange(0, head_dim, 2).float() / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: (batch, heads, len, head_dim); pairs are (first half, second half) of the channels
        angles = positions.float()[:, None] * self.inv_freq[None, :]  # (len, head_dim/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class RelativePosition(PositionEncoding):
    """Shaw et al. 2018 relative position representations (``pos=relative``).

    Learned vectors a^K and a^V for each clipped distance j - i in [-clip, clip]: the score of query i
    and key j gains q_i . a^K_ij, and the output of query i gains sum_j w_ij a^V_ij. One table per
    encoder or decoder stack, shared by its layers and heads (the paper shares them across heads).
    """

    needs_attention_weights = True

    def __init__(self, d_model: int, head_dim: int, clip: int = 16, use_values: bool = True) -> None:
        super().__init__(d_model, head_dim)
        self.clip = clip
        self.use_values = use_values
        self.needs_attention_weights = use_values
        self.keys = nn.Embedding(2 * clip + 1, head_dim)
        self.vals = nn.Embedding(2 * clip + 1, head_dim) if use_values else None
        nn.init.normal_(self.keys.weight, std=head_dim**-0.5)
        if self.vals is not None:
            nn.init.normal_(self.vals.weight, std=head_dim**-0.5)

    def _distance_ids(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = k_pos[None, :] - q_pos[:, None]  # (q_len, k_len)
        return distance.clamp(-self.clip, self.clip) + self.clip

    def scores(self, q: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        rel_k = self.keys(self._distance_ids(q_pos, k_pos)).to(q.dtype)  # (q_len, k_len, head_dim)
        return torch.einsum("bhqd,qkd->bhqk", q, rel_k)

    def values(self, weights: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        if self.vals is None:
            return None
        rel_v = self.vals(self._distance_ids(q_pos, k_pos)).to(weights.dtype)  # (q_len, k_len, head_dim)
        return torch.einsum("bhqk,qkd->bhqd", weights, rel_v)


class BucketBias(PositionEncoding):
    """T5's relative position bias (Raffel et al. 2020, ``pos=t5``).

    A learned scalar per head for each bucket of the distance j - i, added to the scaled scores: the nearest
    distances one bucket each, then buckets logarithmically wider out to ``max_distance``, beyond which all
    share the last. An encoder splits its buckets between keys behind (and the query itself) and keys ahead;
    a causal stack (``causal``: a decoder, a language model) gives them all to keys behind, as T5's decoder
    does. One table per encoder or decoder stack, shared by its layers, as T5 shares it.
    """

    def __init__(self, d_model: int, head_dim: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__(d_model, head_dim)
        if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 4 or num_buckets % 2:
            raise ValueError(
                f"pos.num_buckets={num_buckets!r}: must be an even whole number of at least 4 (an encoder's half "
                "for keys behind, half for keys ahead; T5's 32)"
            )
        exact = num_buckets // 2  # the distances of one bucket each in a causal stack (an encoder's: half that)
        if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance <= exact:
            raise ValueError(
                f"pos.max_distance={max_distance!r}: must be a whole number above {exact} (pos.num_buckets / 2, "
                "the distances a decoder gives a bucket each; T5's 128)"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, d_model // head_dim)  # (buckets, heads)
        nn.init.normal_(self.table.weight, std=d_model**-0.5)

    def buckets(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The bucket of each query-key pair: (q_len, k_len) integers in [0, num_buckets)."""
        distance = k_pos[None, :] - q_pos[:, None]  # (q_len, k_len): > 0 for keys ahead
        if self.causal:  # keys behind only (those ahead are masked): every bucket theirs
            count, far, side = self.num_buckets, (-distance).clamp(min=0), 0
        else:
            count, far = self.num_buckets // 2, distance.abs()
            side = (distance > 0).long() * count  # keys ahead: the upper half
        exact = count // 2
        wide = (
            exact
            + (
                torch.log(far.float().clamp(min=1) / exact) / math.log(self.max_distance / exact) * (count - exact)
            ).long()
        )  # truncated, as T5's
        return side + torch.where(far < exact, far, wide.clamp(max=count - 1))

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        return self.table(self.buckets(q_pos, k_pos)).permute(2, 0, 1)  # (heads, q_len, k_len)


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes, as the paper's code makes them: for H a power of 2, the geometric sequence
    2^(-8/H), 2^(-16/H), ..., 2^(-8); otherwise those of the largest power of 2 below H, then every other slope
    of twice that power for the heads left."""
    if heads & (heads - 1) == 0:
        return [2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)]
    below = 2 ** int(math.log2(heads))
    return alibi_slopes(below) + alibi_slopes(2 * below)[0::2][: heads - below]


class LinearBias(PositionEncoding):
    """ALiBi (Press et al. 2022, ``pos=alibi``): no embedding, a fixed bias -m_h x distance added to the scaled
    scores, with head h's slope m_h from :func:`alibi_slopes`. A causal stack (a decoder, a language model)
    sees keys behind only: -m_h (i - j), as the paper, which is about decoder-only models. An encoder sees keys
    on both sides, and a bias symmetric in |i - j| cannot tell a sentence from its reverse: there, this
    project's choice, keys ahead take the heads' slopes in reverse order (head 1, the steepest behind, is the
    gentlest ahead), so that the heads weigh the two sides differently (with an odd number of heads the middle
    one weighs them alike; one head alone would, so an encoder of one head is refused). Nothing is learned."""

    def __init__(self, d_model: int, head_dim: int) -> None:
        super().__init__(d_model, head_dim)
        slopes = torch.tensor(alibi_slopes(d_model // head_dim))  # (heads,)
        self.register_buffer("slopes", slopes, persistent=False)

    def check_stack(self) -> None:
        if not self.causal and self.slopes.numel() == 1:  # reversed, one slope is itself: a symmetric bias
            raise ValueError(
                "pos=alibi with model.num_heads=1: an encoder's one head weighs keys ahead and behind alike, so it "
                "cannot tell a sentence from its reverse; give model.num_heads=2 or more"
            )

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (q_len, k_len): > 0 for keys behind
        behind = distance.clamp(min=0)
        slopes = self.slopes.float()  # float32 whatever the model's dtype (bf16-true rounds 2^-0.5)
        if self.causal:  # keys ahead are masked: the paper's bias
            return -slopes[:, None, None] * behind[None]
        ahead = (-distance).clamp(min=0)
        return -(slopes[:, None, None] * behind[None] + slopes.flip(0)[:, None, None] * ahead[None])
