"""The loss off the CPU (``FusedSmoothedCrossEntropy``, ``smoothing.fused=true``): PyTorch's own label-smoothed
cross-entropy as the reference for its values and gradient, the written-out formula for its bf16 rounding,
and what it saves for backward and how many passes it makes over the (tokens x vocab) logits."""

import pytest
import torch
from torch.nn import functional as F

from benchmarks.op_count import loss_traffic
from nmt.modules.loss import FusedSmoothedCrossEntropy, LabelSmoothedCrossEntropy, smoothed_cross_entropy_sums

PAD = 0


def _batch(tokens: int, vocab: int, dtype=torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(tokens, vocab, generator=g, dtype=torch.float64)).to(dtype)
    target = torch.randint(1, vocab, (tokens,), generator=g)
    target[::5] = PAD  # padding rows
    return logits, target


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_fused_loss_is_pytorchs_label_smoothed_cross_entropy_with_its_gradient(smoothing):
    """In fp64: the summed loss and its gradient equal ``F.cross_entropy(label_smoothing=eps)`` (PyTorch's own
    convention: 1 - eps on the reference, eps / V on every token), padding ignored; the NLL equals the
    unsmoothed cross-entropy."""
    logits, target = _batch(23, 11)
    ours, ref = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss_sum, nll_sum = FusedSmoothedCrossEntropy.apply(ours, target, smoothing, PAD)
    expected = F.cross_entropy(ref, target, ignore_index=PAD, reduction="sum", label_smoothing=smoothing)
    (2.5 * loss_sum).backward()  # an upstream gradient other than 1
    (2.5 * expected).backward()
    torch.testing.assert_close(loss_sum, expected.detach())
    torch.testing.assert_close(nll_sum, F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum"))
    torch.testing.assert_close(ours.grad, ref.grad)
    assert not nll_sum.requires_grad
    assert ours.grad[target == PAD].abs().max() == 0  # padding rows get no gradient


def test_fused_loss_passes_gradcheck():
    logits, target = _batch(7, 5)
    logits.requires_grad_()
    assert torch.autograd.gradcheck(lambda x: FusedSmoothedCrossEntropy.apply(x, target, 0.1, PAD)[0], (logits,))


def test_fused_loss_from_bf16_logits_rounds_as_the_formula_does():
    """From bf16 logits (autocast's output projection) under autocast: the loss in fp32 equal to the
    formula's (which casts the logits to fp32 first), the gradient in bf16, each element within one bf16
    rounding of the formula's."""
    logits, target = _batch(300, 1000, dtype=torch.bfloat16, seed=1)
    ours, formula = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_sum, nll_sum = FusedSmoothedCrossEntropy.apply(ours, target, 0.1, PAD)
        expected, expected_nll = smoothed_cross_entropy_sums(formula, target, 0.1, PAD)
    (loss_sum / 240).backward()
    (expected / 240).backward()
    assert loss_sum.dtype == torch.float32 and ours.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss_sum, expected.detach(), rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(nll_sum, expected_nll.detach(), rtol=1e-6, atol=1e-3)
    torch.testing.assert_close(ours.grad, formula.grad, rtol=2**-7, atol=1e-9)


def test_fused_loss_moves_less_over_the_logits_and_keeps_no_more():
    """What the fused path is for. Under autocast from bf16 logits (here on a CPU, whose log-softmax takes a
    cast first, as a GPU's does for bf16), autograd of the formula passes over the (tokens x vocab) logits
    in seven operators: the cast, the log-softmax, the sum over the vocabulary read in fp32, the NLL's
    zero-filled gradient, the two gradients added, the log-softmax's gradient and the cast back. The fused
    path passes in five (the cast, the log-softmax, the mean logit read in bf16, the probabilities, the
    gradient written in bf16), moving under two thirds of the bytes, and keeps no more for backward (the
    fp32 log-probabilities, as the formula)."""
    logits, target = _batch(64, 500, dtype=torch.bfloat16)
    fused_saved, fused_ops, fused_bytes = loss_traffic(FusedSmoothedCrossEntropy.apply, logits, target, 0.1)
    formula_saved, formula_ops, formula_bytes = loss_traffic(smoothed_cross_entropy_sums, logits, target, 0.1)
    assert fused_ops == ["_to_copy", "_log_softmax", "mean", "exp", "addcmul"], fused_ops
    assert len(formula_ops) >= 7, formula_ops
    # in units of the bf16 logits' bytes: 15 against 24 (the formula also reads the expanded per-row vector)
    assert fused_bytes == 15 * logits.numel() * 2, fused_bytes
    assert fused_bytes <= 0.63 * formula_bytes, (fused_ops, fused_bytes, formula_ops, formula_bytes)
    log_prob_bytes = logits.numel() * 4
    assert log_prob_bytes <= fused_saved <= formula_saved, (fused_saved, formula_saved)


def test_the_loss_module_takes_the_path_its_setting_names(monkeypatch):
    """fused=true: blocks on a CPU, the fused function elsewhere (a meta tensor stands for a GPU's), the
    compiled formula once compiled off the CPU; fused=false: the formula everywhere. A non-boolean is refused."""
    import nmt.modules.loss as loss_module

    taken = []
    for name in ("BlockedSmoothedCrossEntropy", "FusedSmoothedCrossEntropy"):
        real = getattr(loss_module, name)

        def apply(*args, _real=real, _name=name):
            taken.append(_name)
            on_cpu = args[0].device.type == "cpu"  # a meta tensor has no values: two sums of its kind
            return _real.apply(*args) if on_cpu else (args[0].new_zeros(()), args[0].new_zeros(()))

        spy = type(name, (), {"apply": staticmethod(apply)})
        monkeypatch.setattr(loss_module, name, spy)
    monkeypatch.setattr(loss_module, "smoothed_cross_entropy_sums", None)  # the module's own reference is used

    def path(fused: bool, device: str, compiled: bool = False) -> str:
        loss = LabelSmoothedCrossEntropy(0.1, pad_id=PAD, fused=fused)
        if compiled:
            loss._sums, loss._compiled = (
                lambda *a: (taken.append("compiled formula"), smoothed_cross_entropy_sums(*a))[1],
                True,
            )
        elif not fused:
            loss._sums = lambda *a: (taken.append("formula"), smoothed_cross_entropy_sums(*a))[1]
        logits, target = _batch(6, 9, dtype=torch.float32)
        taken.clear()
        loss(logits.to(device)[None], target.to(device)[None])
        return taken[-1]

    assert path(True, "cpu") == "BlockedSmoothedCrossEntropy"
    assert path(True, "meta") == "FusedSmoothedCrossEntropy"
    assert path(True, "meta", compiled=True) == "compiled formula"
    assert path(True, "cpu", compiled=True) == "BlockedSmoothedCrossEntropy"
    assert path(False, "cpu") == "formula"
    assert path(False, "meta") == "formula"
    assert path(False, "meta", compiled=True) == "compiled formula"
    with pytest.raises(ValueError, match="smoothing.fused='yes' must be true or false"):
        LabelSmoothedCrossEntropy(0.1, fused="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_fused_loss_on_a_gpu_equals_the_formula_and_records_in_a_cuda_graph():
    """On a GPU under autocast: equal to the formula, and the same inside a recorded CUDA graph (no host
    synchronisation in it), as a replayed update runs it."""
    logits, target = _batch(512, 10000, dtype=torch.bfloat16)
    logits, target = logits.cuda(), target.cuda()
    loss = LabelSmoothedCrossEntropy(0.1, pad_id=PAD)
    formula = LabelSmoothedCrossEntropy(0.1, pad_id=PAD, fused=False)
    results = []
    for module in (loss, formula):
        x = logits.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            value, nll, _ = module(x[None], target[None])
        value.backward()
        results.append((value.detach(), nll, x.grad))
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, rtol=2**-7, atol=1e-6)
    x = logits.clone().requires_grad_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # a warm-up outside the graph, as CUDA graphs ask
        loss(x[None], target[None])[0].backward()
    torch.cuda.current_stream().wait_stream(stream)
    graph, x.grad = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        value = loss(x[None], target[None])[0]
        value.backward()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(value.detach(), results[0][0])
    torch.testing.assert_close(x.grad, results[0][2])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_fused_loss_under_a_loss_scale_and_a_retained_graph(dtype):
    """16-mixed's fp16 logits with a loss scaler's large upstream gradient, and fp32 logits: the gradient in
    the logits' dtype, within one rounding of it of PyTorch's; backward twice through a retained graph adds
    the same gradient again; a second derivative is refused, not silently zero."""
    logits, target = _batch(40, 30, dtype=dtype, seed=2)
    ours, ref = logits.clone().requires_grad_(), logits.double().requires_grad_()
    loss_sum, _ = FusedSmoothedCrossEntropy.apply(ours, target, 0.1, PAD)
    expected = F.cross_entropy(ref, target, ignore_index=PAD, reduction="sum", label_smoothing=0.1)
    (1024.0 * loss_sum).backward(retain_graph=True)
    (1024.0 * expected).backward()
    assert ours.grad.dtype == dtype
    rtol, atol = {torch.float16: (2**-10, 1e-4), torch.float32: (1e-5, 1e-5)}[dtype]  # atol: fp16's subnormals
    torch.testing.assert_close(ours.grad.double(), ref.grad, rtol=rtol, atol=atol)
    first = ours.grad.clone()
    (1024.0 * loss_sum).backward()
    torch.testing.assert_close(ours.grad, 2 * first)
    x, weight = logits.float().requires_grad_(), torch.tensor(2.0, requires_grad=True)
    (grad,) = torch.autograd.grad(
        weight * FusedSmoothedCrossEntropy.apply(x, target, 0.1, PAD)[0], x, create_graph=True
    )
    with pytest.raises(RuntimeError, match="once_differentiable"):
        grad.sum().backward()


def test_a_model_trained_through_the_fused_loss_trains_as_through_the_cpus_blocked_loss():
    """Ten Adam updates of a small Transformer under bf16 autocast, the loss once through the fused function
    (a GPU's path) and once through the CPU's blocks, from the same start on the same batches: the same
    losses and weights."""
    from nmt.modules.loss import BlockedSmoothedCrossEntropy

    from .test_transformer import batch, make_model

    def train(loss_sums) -> tuple[list[float], torch.nn.Module]:
        model = make_model(seed=5)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses = []
        for step in range(10):
            src, tgt = batch(seed=step, batch_size=4)
            tgt[:, -2:] = PAD
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(src, tgt[:, :-1])
            loss_sum = loss_sums(logits.flatten(0, 1), tgt[:, 1:].flatten())
            (loss_sum / (tgt[:, 1:] != PAD).sum()).backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss_sum.item())
        return losses, model

    fused_losses, fused = train(lambda x, t: FusedSmoothedCrossEntropy.apply(x, t, 0.1, PAD)[0])
    blocked_losses, blocked = train(lambda x, t: BlockedSmoothedCrossEntropy.apply(x, t, 0.1, PAD)[0].sum())
    assert fused_losses == pytest.approx(blocked_losses, rel=1e-6)
    assert fused_losses[-1] < fused_losses[0]  # it trains
    # the weights move by about 1e-2 in these updates; the two paths' gradients, each rounded once into bf16
    # from fp32, leave them equal to fp32's rounding (on this machine's CPU, bit for bit)
    for (name, a), b in zip(fused.named_parameters(), blocked.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
