"""benchmarks/attention_kernels.py: every attention kernel at the model's masks, against the written-out formula."""

import json

import pytest
import torch

from benchmarks import attention_kernels


def test_each_kernel_is_timed_or_says_why_not_and_agrees_with_the_formula(tmp_path, capsys):
    out = tmp_path / "not_yet" / "attention.json"  # its folder made (it was a FileNotFoundError after timing)
    result = attention_kernels.main(
        ["--device", "cpu", "--batch", "4", "--decode-batch", "3", "--src-len", "5", "--tgt-len", "6", "--iters", "1"]
        + ["--json", str(out)]
    )
    rows = result["rows"]
    assert json.loads(out.read_text())["rows"] == rows
    assert len(rows) == 5 * len(attention_kernels.BACKENDS)  # three attentions training, two decoding
    for row in rows:
        if row["kernel"] in ("math", "written out", "pytorch's choice"):  # every device has these
            assert row["us_per_call"] > 0
            # a difference of two wall times (any sign on a CPU); decoding records no new shapes
            assert ("ms_new_shape" in row) == (not row["attention"].startswith("decoding"))
            assert row["max_difference_from_fp32"] < 0.1  # bf16 against fp32: a few roundings
        if row["kernel"] == "cudnn":  # a GPU's kernel: a CPU says it cannot take the call
            assert "No viable backend" in row["failed"]
    assert "| decoder self-attention (is_causal) | written out |" in capsys.readouterr().out


def test_the_shapes_carry_the_models_masks():
    shapes = attention_kernels.kinds(6, 5, 7, 2, 4, torch.device("cpu"), torch.float32)
    q, k, v, mask, causal, grad = shapes["cross-attention (padding mask)"]
    assert q.shape == (6, 2, 7, 4) and k.shape == (6, 2, 5, 4) and grad.shape == q.shape
    assert mask.shape == (6, 1, 1, 5) and mask[0].all() and not causal  # the longest sentence fills the batch
    assert mask.sum(-1).min() >= 2  # every sentence at least half the longest
    assert shapes["decoder self-attention (is_causal)"][3] is None and shapes["decoder self-attention (is_causal)"][4]
    # the written-out formula with its padding mask is PyTorch's own attention with the same mask
    torch.testing.assert_close(
        attention_kernels.written_out(q, k, v, mask, False),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    )
    q, k, v, _, _, _ = shapes["decoder self-attention (is_causal)"]
    torch.testing.assert_close(
        attention_kernels.written_out(q, k, v, None, True),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_a_decoding_step_attends_one_query_over_the_written_slots():
    shapes = attention_kernels.decoding_kinds(3, 5, 8, 2, 4, torch.device("cpu"))
    q, k, v, mask, causal, grad = shapes["decoding step: self-attention over the cache (mask)"]
    assert q.shape == (3, 2, 1, 4) and k.shape == (3, 2, 8, 4) and grad is None and not causal
    assert mask.shape == (1, 1, 1, 8) and mask[0, 0, 0].tolist() == [True] * 5 + [False] * 3
    out, grads = attention_kernels.step("explicit", q, k, v, mask, causal, None)
    assert grads == () and not out.requires_grad
    torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--device", "cpu", "--iters", "0"], "--iters 0: at least 1"),  # a ZeroDivisionError after the first rows
        (["--device", "cpu", "--new-shapes", "-1"], "--new-shapes -1: 0 or more"),
        (["--device", "cpu", "--json", "."], "--json=.: a folder, not a file"),  # lost the rows at the end
    ],
)
def test_bad_options_are_said_before_any_kernel_is_timed(capsys, argv, said):
    with pytest.raises(SystemExit):
        attention_kernels.main(argv)
    assert said in capsys.readouterr().err
