"""The CPU dropout (a mask from raw random bits) behaves as dropout: the right drop rate in every lane of
the random words, exact inverted scaling, gradients through the kept elements only, reproducible under a
seed, and the identity in evaluation. The training-mode attention path on a CPU agrees with the kernel."""

import math

import pytest
import torch

from nmt.modules import attention as attention_module
from nmt.modules.attention import MultiHeadAttention
from nmt.modules.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_each_lane_drops_with_probability_p(p):
    torch.manual_seed(0)
    count = 1 << 20
    mask, p_rounded = keep_mask(torch.Size([count]), p, torch.device("cpu"))
    assert p_rounded == round(p * 65536) / 65536
    # four 16-bit lanes per random word: a biased lane (e.g. a sign bit that is always 0) would show here
    lanes = mask.view(-1, 4).float().mean(dim=0)
    tolerance = 5 * math.sqrt(p * (1 - p) / (count // 4))  # five standard deviations of a lane's mean
    for kept in lanes.tolist():
        assert abs(kept - (1 - p_rounded)) < tolerance


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_survivors_are_scaled_exactly_and_gradients_pass_only_through_them(dtype):
    torch.manual_seed(1)
    x = (torch.rand(4096, dtype=torch.float32) + 0.5).to(dtype).requires_grad_()
    y = dropout(x, 0.3, training=True)
    assert y.dtype == dtype
    kept = y != 0
    scale = 1 / (1 - round(0.3 * 65536) / 65536)
    torch.testing.assert_close(y[kept], (x[kept].float() * scale).to(dtype))
    y.sum().backward()
    expected_grad = kept.float() * scale
    torch.testing.assert_close(x.grad.float(), expected_grad, atol=0.01, rtol=0.01)


def test_the_mean_is_kept_in_expectation():
    torch.manual_seed(2)
    x = torch.full((1 << 20,), 2.0)
    assert dropout(x, 0.3, training=True).mean().item() == pytest.approx(2.0, abs=0.01)


def test_reproducible_under_a_seed_and_identity_in_evaluation():
    x = torch.randn(64, 33)
    torch.manual_seed(3)
    first = dropout(x, 0.3, training=True)
    torch.manual_seed(3)
    torch.testing.assert_close(dropout(x, 0.3, training=True), first)
    module = Dropout(0.3).eval()
    assert module(x) is x
    assert dropout(x, 0.0, training=True) is x
    assert torch.equal(dropout(x, 1.0, training=True), torch.zeros_like(x))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Dropout(1.5)


def test_training_on_a_cpu_takes_the_explicit_path_with_the_kernels_result(monkeypatch):
    """CPU training skips the fused kernel (slow backward); without dropout both give the same output."""
    torch.manual_seed(4)
    attention = MultiHeadAttention(32, 4, dropout=0.0, fused=True)
    x = torch.randn(2, 7, 32)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    k, v = attention.project_kv(x)
    kernel = attention.eval()(x, k, v, mask)

    def no_kernel(*args, **kwargs):
        raise AssertionError("the fused kernel ran in CPU training")

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", no_kernel)
    trained = attention.train()(x, k, v, mask)
    torch.testing.assert_close(trained, kernel, atol=1e-5, rtol=1e-4)


def test_survivors_are_scaled_by_the_rounded_probability_exactly():
    torch.manual_seed(1)
    x = torch.rand(4096, dtype=torch.float64) + 0.5
    y = dropout(x, 0.3, training=True)
    kept = y != 0
    assert torch.equal(y[kept], x[kept] * (65536 / (65536 - round(0.3 * 65536))))
