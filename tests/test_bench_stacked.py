"""Stacked runs (benchmarks/stacked.py): G models trained as one through vmap must train exactly as the same G
models trained one after another, PyTorch's own per-model path being the reference."""

import contextlib
import copy
import functools

import pytest
import torch
from torch.nn.attention import sdpa_kernel

from benchmarks.stacked import (
    RECIPE_SPEC,
    STACK_ATTENTION,
    Stack,
    adamw,
    configured_spec,
    looped_ops,
    loss_of,
    measure,
    members_of,
    separate_update,
    stacked_update,
    synthetic_batch,
)
from nmt.data.tokenizer import PAD_ID

VOCAB = 60
SMALL = {"d_model": 32, "num_heads": 4, "encoder_layers": 2, "decoder_layers": 2, "ffn_dim": 48}
CPU = torch.device("cpu")


@pytest.fixture
def full_precision_products():
    """fp32 matrix products in full precision (not TF32, which an earlier run in the process may have chosen):
    the stacked and separate products have different shapes, so reduced precision would round them apart."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU's attention kernels and dropout")


@pytest.mark.parametrize("device", [CPU, pytest.param(torch.device("cuda"), marks=CUDA, id="on_a_gpu")])
def test_a_stacked_update_is_each_members_own_update(device, full_precision_products):
    """On a CPU the model writes attention out; on a GPU it calls PyTorch's fused attention kernels, whose
    batched forms vmap must find."""
    members = 3
    separate = members_of(members, device, 0.0, VOCAB, **SMALL)
    stack = Stack(members_of(members, device, 0.0, VOCAB, **SMALL))
    start = [{name: p.detach().clone() for name, p in m.named_parameters()} for m in separate]
    # the members start apart (a seed each), and the stack where the separate models do
    assert not torch.equal(start[0]["src_embed.weight"], start[1]["src_embed.weight"])
    for i in range(members):
        for name, p in start[i].items():
            assert torch.equal(stack.member(i)[name], p)

    no_autocast = contextlib.nullcontext()
    # the separate models on the stack's attention too: what is compared is the stacking, not two kernels
    same_attention = functools.partial(sdpa_kernel, STACK_ATTENTION)  # a new context each time
    stacked_optimizer = adamw(stack.params.values(), device, graph=False)
    optimizers = [adamw(m.parameters(), device, graph=False) for m in separate]
    for step in range(3):  # a new batch each update, the same one for every member
        batch = synthetic_batch(6, 7, 5, VOCAB, device, seed=step)
        with torch.no_grad(), same_attention():
            expected = torch.stack([loss_of(m, *batch, 0.1) for m in separate])
            torch.testing.assert_close(stack.losses(*batch), expected, rtol=1e-5, atol=1e-6)
        stacked_update(stack, batch, no_autocast, stacked_optimizer)
        with same_attention():
            separate_update(separate, batch, no_autocast, optimizers)
        if step == 0:  # each member's gradient is its own loss's, the key biases' included (all near zero)
            for i, model in enumerate(separate):
                for name, p in model.named_parameters():
                    torch.testing.assert_close(stack.params[stack.aliases[name]].grad[i], p.grad, rtol=1e-4, atol=1e-6)

    for i, model in enumerate(separate):
        weights = stack.member(i)
        for name, p in model.named_parameters():
            assert not torch.equal(p.detach(), start[i][name])  # the updates moved every weight
            if name.endswith("k_proj.bias"):
                # a key bias adds the same score to every key of a query, which softmax ignores: its gradient
                # is rounding noise, which Adam scales up to steps of the full rate, different on each path
                continue
            torch.testing.assert_close(weights[name], p.detach(), rtol=1e-4, atol=1e-6, msg=f"member {i}, {name}")


def test_the_stacked_models_are_those_of_a_train_py_config():
    """The fair factorial's rows stack the factorial's own model (pre-norm, its vocabulary and dropout), not
    the tiny recipe's; members of a config are the model train.py builds from it, parameter for parameter."""
    from tests.conftest import compose_train

    overrides = ["experiment=factorial_converged", "data=multi30k"]
    spec = configured_spec(overrides)
    assert (spec.vocab, spec.smoothing, spec.model.norm_position, spec.model.dropout) == (8000, 0.1, "pre", 0.1)
    assert (RECIPE_SPEC.vocab, RECIPE_SPEC.model.norm_position) == (10000, "post")
    assert spec.name == "experiment=factorial_converged data=multi30k"

    from nmt.models.build import build_model

    cfg = compose_train(*overrides, tiny=False)
    torch.manual_seed(0)
    expected = build_model(cfg.model, spec.vocab, spec.vocab).state_dict()
    member = members_of(1, CPU, spec.model.dropout, spec.vocab, spec.model)[0].state_dict()
    assert member.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(member[name], tensor), name

    row = measure(2, "stacked", CPU, (4, 5, 5), 1, "32", graph=False, dropout=0.0, spec=spec)
    assert row["model"] == spec.name and row["step_ms"] > 0
    with pytest.raises(ValueError, match="model=rnn|is not the Transformer"):
        configured_spec(["model=rnn"])


def test_stacked_members_on_a_cpu_need_dropout_off():
    with pytest.raises(ValueError, match="--dropout 0"):
        measure(2, "stacked", CPU, (4, 5, 5), 1, "32", graph=False, dropout=0.3)


def test_the_operators_vmap_runs_member_by_member_are_named():
    """A stack is only worth its launches if vmap has a batched kernel for every operator; those it loops
    over are reported (histc has none), and the Transformer's training step on a CPU has none of them."""
    with looped_ops() as looped:
        torch.func.vmap(lambda t: torch.histc(t, bins=4))(torch.randn(3, 5))
    assert looped == {"aten::histc"}
    stack = Stack(members_of(2, CPU, 0.0, VOCAB, **SMALL))
    src, tgt_in, tgt_out = synthetic_batch(6, 7, 5, VOCAB, CPU)
    src[0, -2:] = PAD_ID  # padding: the attention's masked path
    with looped_ops() as looped:
        stack.losses(src, tgt_in, tgt_out).sum().backward()
    assert looped == set()


@CUDA
def test_on_a_gpu_each_member_draws_its_own_dropout_masks():
    twin = members_of(1, torch.device("cuda"), 0.3, VOCAB, **SMALL)[0]
    stack = Stack([twin, copy.deepcopy(twin)])  # the same weights: only the masks can tell them apart
    batch = synthetic_batch(6, 7, 5, VOCAB, torch.device("cuda"))
    with torch.no_grad():
        first, second = stack.losses(*batch).tolist()
    assert first != second


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--steps", "0"], "--steps 0: at least 1"),  # every row failed on an empty median
        (["--members", "2", "0"], "--members 2 0: at least 1"),  # a row of 0.0 ms
        (["--json", "."], "--json=.: a folder, not a file"),  # found after measuring
    ],
)
def test_bad_options_are_said_before_any_row_is_measured(capsys, argv, said):
    from benchmarks import stacked

    with pytest.raises(SystemExit):
        stacked.main(argv)
    assert said in capsys.readouterr().err
