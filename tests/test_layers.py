"""Our scratch layers against PyTorch's own, with the same weights; explicit vs fused attention;
shift invariance of relative and rotary position encodings."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from nmt.modules.attention import MultiHeadAttention
from nmt.modules.feedforward import FeedForward
from nmt.modules.norm import LayerNorm, RMSNorm, ScaleNorm
from nmt.modules.position import (
    BucketBias,
    LinearBias,
    PositionEncoding,
    RelativePosition,
    RotaryPosition,
    SinusoidalPosition,
)
from nmt.utils.instantiate import instantiate

from .conftest import CONF

torch.manual_seed(0)


# eps at its default and large: rows scaled near it (the first) show an eps that is not the one given
@pytest.mark.parametrize("eps", [1e-5, 0.5])
@pytest.mark.parametrize("fused", [False, True])
def test_layer_norm_equals_torch(fused, eps):
    ours, ref = LayerNorm(16, eps=eps, fused=fused), nn.LayerNorm(16, eps=eps)
    with torch.no_grad():
        ours.weight.normal_(), ours.bias.normal_()
        ref.weight.copy_(ours.weight), ref.bias.copy_(ours.bias)
    x = torch.randn(3, 5, 16) * 4 + 2
    x[0] *= eps**0.5 / 4
    torch.testing.assert_close(ours(x), ref(x))


@pytest.mark.parametrize("eps", [1e-6, 0.5])
@pytest.mark.parametrize("fused", [False, True])
def test_rms_norm_equals_torch(fused, eps):
    ours, ref = RMSNorm(16, eps=eps, fused=fused), nn.RMSNorm(16, eps=eps)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 16) * 3
    x[0] *= eps**0.5 / 3
    torch.testing.assert_close(ours(x), ref(x))


def _scale_norm_by_hand(x, g: float, eps: float):
    """Nguyen & Salazar's ScaleNorm in numpy, row by row: g * x / max(||x||_2, eps)."""
    import numpy as np

    rows = x.reshape(-1, x.shape[-1])
    out = np.stack([g * row / max(math.sqrt(sum(float(v) ** 2 for v in row)), eps) for row in rows])
    return out.reshape(x.shape)


@pytest.mark.parametrize("fused", [False, True])
def test_scale_norm_is_the_papers_formula_with_one_gain_initialised_to_the_square_root_of_dim(fused):
    """No PyTorch counterpart to copy weights into: the formula by hand, in float64, including rows shorter
    than eps (divided by eps, the paper's clamp of the norm) and a zero row (zero out, finite gradient)."""
    for dim in (4, 16, 512):
        built = ScaleNorm(dim, fused=fused)
        (gain,) = built.parameters()  # one scalar, not one per dimension
        assert gain.numel() == 1 and gain.item() == pytest.approx(math.sqrt(dim), rel=1e-7)
    norm = ScaleNorm(16, eps=1e-3, fused=fused).double()
    with torch.no_grad():
        norm.scale.fill_(2.7)
    x = torch.randn(3, 5, 16, dtype=torch.float64) * 3 + 1
    x[0, 0] = 0.0
    x[0, 1] = torch.full((16,), 1e-5, dtype=torch.float64)  # ||x|| = 4e-5 < eps
    x[0, 2] = torch.full((16,), 3e-4, dtype=torch.float64)  # ||x|| = 1.2e-3 > eps: the clamp off
    expected = torch.from_numpy(_scale_norm_by_hand(x.numpy(), 2.7, 1e-3))
    x.requires_grad_()
    y = norm(x)
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-15)
    assert torch.linalg.vector_norm(y[1:], dim=-1).sub(2.7).abs().max() < 1e-12  # on the sphere of radius g
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    assert torch.isfinite(x.grad).all()
    # the gradients by hand: d/dx = g/||x|| (u - x (x.u)/||x||^2) above eps, g u / eps below; d/dg = sum(u x / max)
    xs, n = x.detach(), torch.linalg.vector_norm(x.detach(), dim=-1, keepdim=True)
    above = 2.7 / n * (upstream - xs * (xs * upstream).sum(-1, keepdim=True) / n**2)
    by_hand = torch.where(n > 1e-3, above, 2.7 * upstream / 1e-3)
    torch.testing.assert_close(x.grad, by_hand, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(norm.scale.grad, (upstream * xs / n.clamp_min(1e-3)).sum(), rtol=1e-10, atol=1e-12)


def test_scale_norm_refuses_an_eps_that_cannot_bound_the_norm_naming_its_own_default():
    for eps in (0, -1e-5, True, "small"):
        with pytest.raises(ValueError, match=r"norm.eps=.*must be a number > 0 \(this norm's default: 1e-05\)"):
            ScaleNorm(8, eps=eps)


def _graph(grad_fn) -> list[str]:
    """The kinds of the autograd nodes behind an output: what was computed, not its value."""
    seen, stack = set(), [grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack += [parent for parent, _ in node.next_functions]
    return sorted(type(node).__name__ for node in seen)


@pytest.mark.parametrize("norm", sorted(p.stem for p in (CONF / "norm").glob("*.yaml")))  # every option of `norm`
def test_the_written_out_norm_and_the_one_kernel_agree_in_value_and_gradient(norm):
    """In float64, so that any difference is the formula's, not rounding's: outputs and the gradients of the
    input, weight and bias, on rows far from eps and at it (a zero row, as padding is under pos=none, and rows
    near eps's scale), every gradient finite. The two are two computations: a norm whose ``forward`` ignored
    ``fused`` passed this by comparing one path with itself (a newcomer's trial)."""
    configured = OmegaConf.load(CONF / "norm" / f"{norm}.yaml")
    explicit = instantiate({**configured, "fused": False})(16).double()
    fused = instantiate({**configured, "fused": True})(16).double()
    with torch.no_grad():
        for p in explicit.parameters():
            p.normal_()
    fused.load_state_dict(explicit.state_dict())  # the same parameters: a checkpoint of one loads into the other
    x = torch.randn(4, 7, 16, dtype=torch.float64) * 3 + 1
    x[0, 0] = 0.0
    x[0, 1] = torch.linspace(-1, 1, 16, dtype=torch.float64) * explicit.eps  # about eps's scale
    x[0, 2] = torch.linspace(-1, 1, 16, dtype=torch.float64) * explicit.eps**0.5
    x.requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    upstream = torch.randn(4, 7, 16, dtype=torch.float64)
    (explicit(x) * upstream).sum().backward()
    (fused(x2) * upstream).sum().backward()
    torch.testing.assert_close(fused(x2), explicit(x), rtol=1e-12, atol=1e-12)
    assert torch.isfinite(x.grad).all() and torch.isfinite(x2.grad).all()
    torch.testing.assert_close(x2.grad, x.grad, rtol=1e-10, atol=1e-10)
    assert _graph(explicit(x).grad_fn) != _graph(fused(x2).grad_fn), f"norm={norm}: fused=true and false ran alike"
    for (name, a), b in zip(explicit.named_parameters(), fused.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-10, atol=1e-10, msg=name)


def _copy_into_torch_mha(ours: MultiHeadAttention, d_model: int, heads: int) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(d_model, heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_equals_torch_multihead_attention(fused, causal):
    d_model, heads, batch, q_len, k_len = 32, 4, 3, 6, 6
    ours = MultiHeadAttention(d_model, heads, fused=fused).eval()
    ref = _copy_into_torch_mha(ours, d_model, heads)
    query, memory = torch.randn(batch, q_len, d_model), torch.randn(batch, k_len, d_model)
    if causal:
        memory = query  # causal self-attention
    lengths = torch.tensor([6, 4, 2])
    key_padding = torch.arange(k_len)[None, :] >= lengths[:, None]  # True = padding (torch convention)
    mask = ~key_padding[:, None, None, :]
    torch_mask = None
    if causal:
        allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril()
        mask = mask & allowed
        torch_mask = ~allowed
    k, v = ours.project_kv(memory)
    out = ours(query, k, v, mask)
    expected, _ = ref(query, memory, memory, key_padding_mask=key_padding, attn_mask=torch_mask, need_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fused", [False, True])
def test_causal_attention_equals_torch_with_its_causal_mask(fused):
    """causal=True (the decoder's self-attention in training): torch's attention with the causal mask, also
    for the last queries of a longer key sequence (a prefix already cached)."""
    d_model, heads = 32, 4
    ours = MultiHeadAttention(d_model, heads, fused=fused).eval()
    ref = _copy_into_torch_mha(ours, d_model, heads)
    keys = torch.randn(3, 7, d_model)
    for q_len in (7, 3):
        query = keys[:, -q_len:]
        k, v = ours.project_kv(keys)
        future = ~torch.ones(q_len, 7, dtype=torch.bool).tril(7 - q_len)
        expected, _ = ref(query, keys, keys, attn_mask=future, need_weights=False)
        torch.testing.assert_close(ours(query, k, v, causal=True), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("rotary", [False, True])
def test_joint_projections_equal_the_separate_products_and_their_gradients(rotary):
    """With gradients (a training update) self-attention projects queries, keys and values as one product of
    their concatenated weights, and cross-attention keys and values as one: the same outputs and the same
    gradient for each projection's weight and bias and for x as the separate products (float64), and the
    same outputs as the separate products taken without gradients. The one product is taken where it pays:
    with gradients, or over several positions (validation's loss, encoding), not in a one-position decoding
    step, nor with ``joint=False`` (``model.joint_projections=false``)."""
    d_model, heads = 32, 4
    position = RotaryPosition(d_model, d_model // heads) if rotary else None
    attention = MultiHeadAttention(d_model, heads, position=position, fused=False).double()
    x = torch.randn(3, 5, d_model, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(5)
    upstream = torch.randn(3, 5, d_model, dtype=torch.float64)

    def separate(x):
        q = attention._split(attention.q_proj(x))
        k, v = attention._split(attention.k_proj(x)), attention._split(attention.v_proj(x))
        if position is not None:
            k = position.rotate(k, positions)
        return q, k, v

    def gradients(project):
        attention.zero_grad()
        x.grad = None
        q, k, v = project(x)
        out = attention(x, k, v, None, positions, positions, causal=True, q=q)
        (out * upstream).sum().backward()
        return out.detach(), {name: p.grad.clone() for name, p in attention.named_parameters()}, x.grad.clone()

    joint_out, joint_grads, joint_x = gradients(lambda x: attention.project_qkv(x, positions))
    out, grads, x_grad = gradients(separate)
    torch.testing.assert_close(joint_out, out)
    assert joint_grads.keys() == grads.keys() and len(grads) == 8
    for name in grads:
        torch.testing.assert_close(joint_grads[name], grads[name], msg=name)
    torch.testing.assert_close(joint_x, x_grad)
    with torch.no_grad():
        for joint, alone in zip(attention.project_qkv(x, positions), separate(x), strict=True):
            torch.testing.assert_close(joint, alone)
    # cross-attention's keys and values (project_kv): the same values and gradients
    upstream_kv = torch.randn(2, *separate(x)[1].shape, dtype=torch.float64)
    grads_kv = []
    for project in (lambda x: attention.project_kv(x, positions), lambda x: separate(x)[1:]):
        attention.zero_grad()
        x.grad = None
        keys, values = project(x)
        ((keys * upstream_kv[0]).sum() + (values * upstream_kv[1]).sum()).backward()
        grads_kv.append(({n: p.grad.clone() for n, p in attention.named_parameters() if p.grad is not None}, x.grad))
    assert set(grads_kv[0][0]) == {"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"}
    for name, grad in grads_kv[1][0].items():
        torch.testing.assert_close(grads_kv[0][0][name], grad, msg=name)
    torch.testing.assert_close(grads_kv[0][1], grads_kv[1][1])
    joint_calls = []
    real_joint = attention._joint
    attention._joint = lambda *args: joint_calls.append(1) or real_joint(*args)
    with torch.no_grad():
        attention.project_qkv(x, positions)  # validation's loss pass, an encoder: five positions
        assert len(joint_calls) == 1
        step = attention.project_qkv(x[:, -1:], positions[-1:])  # a decoding step: one position
        assert len(joint_calls) == 1
    for alone, whole in zip(step, separate(x), strict=True):
        torch.testing.assert_close(alone, whole[:, :, -1:])
    attention.joint = False  # model.joint_projections=false: the separate products in training too
    attention.project_qkv(x, positions), attention.project_kv(x, positions)
    assert len(joint_calls) == 1


def test_causal_self_attention_reaches_the_kernel_without_a_mask_tensor(monkeypatch):
    """So that PyTorch may pick its flash kernel (which takes no mask) on a GPU; with a padding mask or a
    position bias the causal mask is built and folded in instead."""
    from nmt.modules import attention as module

    calls = []
    kernel = module.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(module.F, "scaled_dot_product_attention", spy)
    attention = MultiHeadAttention(32, 4, fused=True).eval()
    x = torch.randn(2, 5, 32)
    k, v = attention.project_kv(x)
    attention(x, k, v, causal=True)
    assert calls[-1].get("attn_mask") is None and calls[-1]["is_causal"] is True
    padded = (torch.arange(5) < 4)[None, None, None, :]
    out = attention(x, k, v, padded, causal=True)
    assert calls[-1]["attn_mask"].shape == (1, 1, 5, 5) and not calls[-1].get("is_causal")
    explicit = MultiHeadAttention(32, 4, fused=False).eval()
    explicit.load_state_dict(attention.state_dict())
    torch.testing.assert_close(out, explicit(x, k, v, padded & torch.ones(5, 5, dtype=torch.bool).tril()))


def test_causal_masks_are_built_on_the_device_of_the_scores():
    """A causal mask built for the explicit path or folded into a position bias lives where the scores do
    (on a GPU, a CPU mask fails); "meta" tensors stand in for another device here."""
    x = torch.randn(2, 5, 32, device="meta")
    pos = torch.arange(5, device="meta")
    for fused, position in ((False, None), (True, RelativePosition(32, 8, clip=3, use_values=False))):
        attention = MultiHeadAttention(32, 4, position=position, fused=fused).eval().to("meta")
        k, v = attention.project_kv(x, pos)
        assert attention(x, k, v, None, pos, pos, causal=True).device.type == "meta"


class ScaledBiasPosition(PositionEncoding):
    """ALiBi's kind of encoding through the ``bias`` hook: a slope per head times the distance, steeper for keys
    ahead than behind (so that an encoder tells a sentence from its reverse), added to the scaled scores."""

    def bias(self, q_pos, k_pos):
        slopes = 2.0 ** -torch.arange(1, self.d_model // self.head_dim + 1, dtype=torch.float)  # (heads,)
        distance = (q_pos[:, None] - k_pos[None, :]).float()  # (q_len, k_len): > 0 for keys behind
        return -slopes[:, None, None] * (distance.clamp(min=0) + 2 * (-distance).clamp(min=0))


class ScaledBiasThroughScores(ScaledBiasPosition):
    """The same term through ``scores``, which is added before the division: multiplied by sqrt(head_dim)."""

    def bias(self, q_pos, k_pos):
        return None

    def scores(self, q, q_pos, k_pos):
        term = super().bias(q_pos, k_pos) * math.sqrt(self.head_dim)
        return term.expand(q.size(0), -1, -1, -1)


def _configured(name: str):
    return lambda: instantiate(OmegaConf.load(CONF / "pos" / f"{name}.yaml"))(d_model=32, head_dim=8)


# every option of the `pos` group (a new encoding is tested without being listed here), and variants
POSITIONS = {name: _configured(name) for name in (p.stem for p in (CONF / "pos").glob("*.yaml"))} | {
    "relative_keys": lambda: RelativePosition(32, 8, clip=3, use_values=False),
    "relative": lambda: RelativePosition(32, 8, clip=3),  # clipped nearer than its default: clipping is used
    "scaled_bias": lambda: ScaledBiasPosition(32, 8),
}


@pytest.mark.parametrize("fused", [False, True])
def test_a_bias_on_the_scaled_scores_is_the_same_term_through_scores_times_the_root_of_head_dim(fused):
    """``bias`` is added after the division by sqrt(head_dim), ``scores`` before it: the two hooks give the same
    attention exactly when the second term is the first times sqrt(head_dim), with a padding mask as well."""
    x = torch.randn(2, 7, 32)
    pos = torch.arange(7)
    mask = (torch.arange(7) < torch.tensor([7, 4])[:, None])[:, None, None, :]
    outs = []
    for position in (ScaledBiasPosition(32, 8), ScaledBiasThroughScores(32, 8)):
        torch.manual_seed(0)
        attention = MultiHeadAttention(32, 4, position=position, fused=fused).eval()
        k, v = attention.project_kv(x, pos)
        outs.append(attention(x, k, v, mask, pos, pos))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(POSITIONS))
def test_explicit_and_fused_paths_agree(name):
    position = POSITIONS[name]()
    explicit = MultiHeadAttention(32, 4, position=position, fused=False).eval()
    fused = MultiHeadAttention(32, 4, position=position, fused=True).eval()
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 7, 32)
    pos = torch.arange(7)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()[None, None] & (torch.arange(7) < 5)[None, None, None, :]
    outs = []
    for attention in (explicit, fused):
        k, v = attention.project_kv(x, pos)
        outs.append(attention(x, k, v, mask, pos, pos))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)


def shifted_outputs(position, fused: bool, shift: int) -> torch.Tensor:
    """Self-attention over embeddings, every hook of ``position`` applied, at positions shift .. shift + 5."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, position=position, fused=fused).eval()
    x = torch.randn(2, 6, 32)
    pos = torch.arange(6) + shift
    h = position.embed(x, pos)
    k, v = attention.project_kv(h, pos)
    return attention(h, k, v, None, pos, pos)


@pytest.mark.parametrize("name", sorted(POSITIONS))
@pytest.mark.parametrize("fused", [False, True])
def test_an_encoding_reads_distances_only_exactly_when_it_says_so(name, fused):
    """Moving every position by 11 leaves the output as it was where an encoding declares
    ``distance_only`` (RoPE, relative: scores that depend on distances only), and changes it where it does
    not (absolute positions): each of conf/pos/, a new one too, is held to what it declares."""
    position = POSITIONS[name]()
    outs = [shifted_outputs(position, fused, shift) for shift in (0, 11)]
    if position.distance_only:
        torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)
    else:
        assert not torch.allclose(outs[0], outs[1], atol=1e-3), (
            f"{name}: distance_only = False, yet a shift changes nothing"
        )


def test_sinusoidal_positions_far_out_follow_the_formula():
    """No length limit: position 5,000 gets Vaswani et al.'s values like position 0 does."""
    pos = SinusoidalPosition(16, 4)
    x = torch.zeros(1, 3, 16)
    far = pos.embed(x, torch.arange(5000, 5003))
    i = torch.arange(0, 16, 2)
    angles = torch.arange(5000, 5003, dtype=torch.float64)[:, None] / 10000 ** (i / 16)
    expected = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # sin, cos interleaved
    torch.testing.assert_close(far[0], expected.float(), atol=2e-3, rtol=0)


def test_attention_weights_are_a_distribution_over_unmasked_keys():
    attention = MultiHeadAttention(16, 2, fused=True).eval()
    attention.keep_weights = True
    x = torch.randn(2, 5, 16)
    mask = (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, None, :]
    k, v = attention.project_kv(x)
    attention(x, k, v, mask)
    weights = attention.last_weights  # (batch, heads, q, k)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))
    assert weights[1, :, :, 3:].abs().max() == 0


# T5's buckets by its formula, worked by hand for 32 buckets out to 128. An encoder's: a distance d = j - i
# behind (d <= 0) has bucket |d| below 8, else 8 + floor(ln(|d| / 8) / ln(128 / 8) * 8), at most 15; ahead,
# 16 more
T5_BUCKETS = {
    0: 0,
    -1: 1,
    -7: 7,
    -8: 8,  # 8 + floor(0): the first of the wider buckets
    -15: 9,  # 8 + floor(ln 1.875 / ln 16 * 8) = 8 + floor(1.81)
    -20: 10,  # 8 + floor(ln 2.5 / ln 16 * 8) = 8 + floor(2.64)
    -40: 12,  # 8 + floor(ln 5 / ln 16 * 8) = 8 + floor(4.64)
    -100: 15,  # 8 + floor(ln 12.5 / ln 16 * 8) = 8 + floor(7.29)
    -127: 15,
    -1000: 15,  # past max_distance: the last bucket
    1: 17,
    3: 19,
    8: 24,
    20: 26,
    200: 31,
}


# a decoder's (causal): every bucket for keys behind, |d| below 16, else 16 + floor(ln(|d| / 16) / ln(8) * 16),
# at most 31; keys ahead (masked there) share bucket 0
T5_CAUSAL_BUCKETS = {
    0: 0,
    -1: 1,
    -15: 15,
    -16: 16,
    -20: 17,  # 16 + floor(ln 1.25 / ln 8 * 16) = 16 + floor(1.72)
    -50: 24,  # 16 + floor(ln 3.125 / ln 8 * 16) = 16 + floor(8.77)
    -100: 30,  # 16 + floor(ln 6.25 / ln 8 * 16) = 16 + floor(14.10)
    -127: 31,
    -1000: 31,
    5: 0,
}


@pytest.mark.parametrize(("causal", "expected"), [(False, T5_BUCKETS), (True, T5_CAUSAL_BUCKETS)])
def test_t5_buckets_follow_its_formula_worked_by_hand(causal, expected):
    position = BucketBias(32, 8)
    position.causal = causal
    distances = torch.tensor(list(expected))
    buckets = position.buckets(torch.tensor([0]), distances)[0]
    assert dict(zip(expected, buckets.tolist(), strict=True)) == expected
    moved = position.buckets(torch.tensor([50]), distances + 50)[0]  # the query elsewhere: the same
    assert moved.tolist() == buckets.tolist()


def test_the_models_mark_the_encodings_of_their_causal_stacks():
    """A decoder's and a language model's encoding are told they look back only (T5's buckets differ there)."""
    from nmt.models.transformer import Transformer
    from nmt.models.transformer_lm import TransformerLM

    sizes = {"d_model": 32, "num_heads": 4, "ffn_dim": 32, "position": BucketBias, "norm": LayerNorm}
    model = Transformer(20, 20, 0, encoder_layers=1, decoder_layers=1, **sizes)
    assert (model.src_pos.causal, model.tgt_pos.causal) == (False, True)
    assert TransformerLM(20, 0, num_layers=1, **sizes).pos.causal


@pytest.mark.parametrize("fused", [False, True])
def test_t5_bias_enters_the_scores_after_their_scaling_by_hand(fused):
    """softmax(q k^T / sqrt(head_dim) + table[bucket]) v, written out: the bias is not scaled with the scores."""
    position = BucketBias(32, 8, num_buckets=8, max_distance=16)
    attention = MultiHeadAttention(32, 4, position=position, fused=fused).eval()
    x, pos = torch.randn(2, 9, 32), torch.arange(9)
    k, v = attention.project_kv(x, pos)
    q = attention.q_proj(x).view(2, 9, 4, 8).transpose(1, 2)  # (batch, heads, len, head_dim)
    bias = position.table.weight[position.buckets(pos, pos)].permute(2, 0, 1)  # (heads, q, k)
    weights = (q @ k.transpose(-1, -2) / math.sqrt(8) + bias).softmax(-1)
    expected = attention.out_proj((weights @ v).transpose(1, 2).reshape(2, 9, 32))
    torch.testing.assert_close(attention(x, k, v, None, pos, pos), expected, atol=1e-5, rtol=1e-4)


def test_t5_bias_is_each_heads_learned_scalar_of_the_pairs_bucket():
    position = BucketBias(32, 8, num_buckets=8, max_distance=16)
    q_pos, k_pos = torch.arange(3, 6), torch.arange(9)
    bias = position.bias(q_pos, k_pos)  # (heads, q_len, k_len)
    assert bias.shape == (4, 3, 9)
    for h in range(4):
        for i, q in enumerate(q_pos.tolist()):
            for j, k in enumerate(k_pos.tolist()):
                bucket = position.buckets(torch.tensor([q]), torch.tensor([k]))[0, 0]
                assert bias[h, i, j] == position.table.weight[bucket, h]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_buckets": 6.0}, r"pos.num_buckets=6.0: must be an even whole number of at least 4"),
        ({"num_buckets": 7}, r"pos.num_buckets=7: must be an even whole number"),
        ({"num_buckets": 2}, r"pos.num_buckets=2: must be an even whole number"),
        ({"max_distance": 16}, r"pos.max_distance=16: must be a whole number above 16 \(pos.num_buckets / 2"),
    ],
)
def test_t5_settings_that_make_no_buckets_are_refused_naming_the_key(options, message):
    with pytest.raises(ValueError, match=message):
        BucketBias(32, 8, **options)


def test_alibi_slopes_are_the_papers_geometric_sequence():
    """Press et al.: 8 heads take 1/2, 1/4, ..., 1/256; H heads a power of 2 2^(-8/H), 2^(-16/H), ..., 2^(-8);
    6 heads the 4 heads' slopes, then every other one of 8 heads' (the paper's code)."""
    assert LinearBias(64, 8).slopes.tolist() == [2.0**-k for k in range(1, 9)]
    assert LinearBias(32, 8).slopes.tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    assert LinearBias(48, 8).slopes.tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert LinearBias(8, 8).slopes.tolist() == [2.0**-8]


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_bias_is_minus_the_slope_times_the_distance_by_hand(causal):
    """Keys behind: -m_h (i - j), the paper's bias, on either side; keys ahead (an encoder's only): -m'_h (j - i)
    with the slopes in reverse order, so that no head of an even count weighs the two sides alike; the query
    itself: 0."""
    position = LinearBias(32, 8)
    position.causal = causal
    q_pos, k_pos = torch.arange(3, 6), torch.arange(9)
    bias = position.bias(q_pos, k_pos)
    m = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    for h in range(4):
        for i, q in enumerate(q_pos.tolist()):
            for j, k in enumerate(k_pos.tolist()):
                if k <= q:
                    expected = -m[h] * (q - k)
                elif causal:
                    expected = 0.0  # masked anyway
                else:
                    expected = -m[3 - h] * (k - q)
                assert bias[h, i, j].item() == pytest.approx(expected), (h, q, k)


@pytest.mark.parametrize("fused", [False, True])
def test_alibi_bias_enters_the_scores_after_their_scaling_by_hand(fused):
    """softmax(q k^T / sqrt(head_dim) - m_h |i - j|_side) v, written out, for an encoder and a causal stack."""
    for causal in (False, True):
        position = LinearBias(32, 8)
        position.causal = causal
        attention = MultiHeadAttention(32, 4, position=position, fused=fused).eval()
        x, pos = torch.randn(2, 9, 32), torch.arange(9)
        k, v = attention.project_kv(x, pos)
        q = attention.q_proj(x).view(2, 9, 4, 8).transpose(1, 2)
        slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])
        distance = (pos[:, None] - pos[None, :]).float()
        ahead = slopes.flip(0)[:, None, None] * (-distance).clamp(min=0)
        bias = -(slopes[:, None, None] * distance.clamp(min=0) + (0 if causal else ahead))
        scores = q @ k.transpose(-1, -2) / math.sqrt(8) + bias
        if causal:
            scores = scores.masked_fill(distance < 0, float("-inf"))
        expected = attention.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 9, 32))
        got = attention(x, k, v, None, pos, pos, causal=causal)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_the_feedforward_block_is_linear_activation_dropout_linear():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    ff = FeedForward(8, 16, dropout=0.0, activation="gelu").eval()
    h = x @ ff.up.weight.T + ff.up.bias
    h = 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))  # GELU (Hendrycks and Gimpel), exact form
    torch.testing.assert_close(ff(x), h @ ff.down.weight.T + ff.down.bias)
    # the activation dropout sits between the two maps: everything dropped leaves the second map's bias
    ff = FeedForward(8, 16, dropout=1.0, activation="relu").train()
    torch.testing.assert_close(ff(x), ff.down.bias.expand(2, 3, 8))
