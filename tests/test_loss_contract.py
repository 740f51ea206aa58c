"""Every loss of conf/smoothing/, a new one too, against what training reads of it: its value is the
quantity it differentiates (gradcheck; a step against the gradient lowers it), its second output the plain
NLL that val_loss and val_ppl are made of (checkpoints and early stopping choose by them), its third the
target tokens; padding has no say in any of them. The formula of a loss is its own file's test: these hold
whatever it computes."""

import pytest
import torch
from torch.nn import functional as F

from nmt.data.tokenizer import PAD_ID
from nmt.utils.instantiate import instantiate

from .conftest import CONF, compose_train

LOSSES = sorted(path.stem for path in (CONF / "smoothing").glob("*.yaml"))
VOCAB = 11


def batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 logits (batch 3, length 5) and targets with padding at the ends of two rows."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, VOCAB, dtype=torch.float64, generator=generator)
    target = torch.randint(4, VOCAB, (3, 5), generator=generator)
    target[0, 3:] = PAD_ID
    target[2, 4] = PAD_ID
    return logits, target


@pytest.mark.parametrize("name", LOSSES)
def test_a_loss_gives_training_what_it_reads(name):
    loss_fn = instantiate(compose_train(f"smoothing={name}").smoothing, pad_id=PAD_ID)
    logits, target = batch()
    logits.requires_grad_(True)
    value, nll, tokens = loss_fn(logits, target)
    assert value.dim() == 0 and value.requires_grad and torch.isfinite(value)
    assert int(tokens) == int((target != PAD_ID).sum())
    plain = logits.detach().reshape(-1, VOCAB)
    reference = F.cross_entropy(plain, target.reshape(-1), ignore_index=PAD_ID, reduction="sum")
    assert float(nll) == pytest.approx(float(reference), rel=1e-9)  # plain, summed, whatever the loss adds
    assert not nll.requires_grad  # a sum to log, not a second loss
    # padding has no say: other logits at padded positions leave every output as it was
    changed = logits.detach().clone()
    changed[target == PAD_ID] += 5.0
    again = loss_fn(changed, target)
    assert float(again[0]) == pytest.approx(float(value.detach()), rel=1e-9)
    assert float(again[1]) == pytest.approx(float(nll), rel=1e-9)
    # the gradient is the value's own (a loss returned negated, or with another quantity's gradient, fails)
    torch.autograd.gradcheck(lambda x: loss_fn(x, target)[0], (logits.detach().clone().requires_grad_(),))
    value.backward()
    stepped = (logits - 1e-2 * logits.grad).detach()
    assert float(loss_fn(stepped, target)[0]) < float(value.detach())
