"""Every loss of conf/smoothing/, a new one too, against what training reads of it: its value is the
quantity it differentiates (gradcheck; a step against the gradient lowers it), its second output the plain
NLL that val_loss and val_ppl are made of (checkpoints and early stopping choose by them), its third the
target tokens; padding has no say in any of them. The formula of a loss is its own file's test: these hold
whatever it computes (tested against a negated loss and one that counts padding)."""

import pytest
import torch
from torch.nn import functional as F

from nmt.data.tokenizer import PAD_ID
from nmt.modules.loss import LabelSmoothedCrossEntropy
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
    check_contract(instantiate(compose_train(f"smoothing={name}").smoothing, pad_id=PAD_ID))


class Negated(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, logits, target):
        value, nll, tokens = self.inner(logits, target)
        return -value, nll, tokens


class CountsPadding(torch.nn.Module):
    def forward(self, logits, target):
        tokens = (target != PAD_ID).sum()
        flat = logits.reshape(-1, logits.size(-1))
        value = F.cross_entropy(flat, target.reshape(-1), reduction="sum") / tokens
        nll = F.cross_entropy(flat.detach(), target.reshape(-1), ignore_index=PAD_ID, reduction="sum")
        return value, nll, tokens


@pytest.mark.parametrize("broken", [Negated(LabelSmoothedCrossEntropy(0.1, pad_id=PAD_ID)), CountsPadding()])
def test_the_contract_fails_a_negated_loss_and_one_that_counts_padding(broken):
    with pytest.raises(AssertionError):
        check_contract(broken)


def check_contract(loss_fn) -> None:
    logits, target = batch()
    logits.requires_grad_(True)
    value, nll, tokens = loss_fn(logits, target)
    assert value.dim() == 0 and value.requires_grad and torch.isfinite(value)
    assert int(tokens) == int((target != PAD_ID).sum())
    plain = logits.detach().reshape(-1, VOCAB)
    reference = F.cross_entropy(plain, target.reshape(-1), ignore_index=PAD_ID, reduction="sum")
    assert float(nll) == pytest.approx(float(reference), rel=1e-6)  # plain, summed (fp32 inside, or float64)
    assert not nll.requires_grad  # a sum to log, not a second loss
    # padding has no say: other logits at padded positions (not a constant, which a softmax ignores) leave
    # every output as it was
    changed = logits.detach().clone()
    padded = target == PAD_ID
    changed[padded] = torch.randn(
        int(padded.sum()), VOCAB, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
    )
    again = loss_fn(changed, target)
    assert float(again[0]) == pytest.approx(float(value.detach()), rel=1e-6)
    assert float(again[1]) == pytest.approx(float(nll), rel=1e-6)
    # the gradient is the value's own (one of another quantity fails), and a step against it lowers the value
    # and the plain NLL alike, from these random logits: a loss returned negated would raise the NLL
    torch.autograd.gradcheck(lambda x: loss_fn(x, target)[0], (logits.detach().clone().requires_grad_(),))
    value.backward()
    stepped = (logits - 1e-2 * logits.grad).detach()
    after = loss_fn(stepped, target)
    assert float(after[0]) < float(value.detach()) and float(after[1]) < float(nll)
