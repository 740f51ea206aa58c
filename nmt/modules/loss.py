"""Training loss (config group ``smoothing``)."""

import torch
from torch import nn
from torch.nn import functional as F

# rows of logits per block on a CPU: 2^18 fp32 values (1 MiB) stay in a core's cache between passes
CPU_BLOCK_VALUES = 2**18


class LabelSmoothedCrossEntropy(nn.Module):
    """Cross-entropy against a target distribution that puts ``1 - smoothing`` on the reference token and
    spreads ``smoothing`` uniformly over the vocabulary (Szegedy et al. 2016). Padding is ignored."""

    def __init__(self, smoothing: float = 0.0, pad_id: int = 0) -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing.smoothing={smoothing} must be in [0, 1)")
        self.smoothing = smoothing
        self.pad_id = pad_id
        self._sums = smoothed_cross_entropy_sums  # the path off the CPU; :meth:`compile` replaces it

    def compile(self, *args, **kwargs) -> None:
        """Compile the loss off the CPU (``torch.compile``'s arguments): written out, the formula makes
        several passes over the (tokens x vocab) logits and their fp32 copy, each its own kernel, where
        Inductor's kernels read the logits once forward and write their gradient once backward. The CPU's
        loss stays as it is: a loop over blocks that Dynamo would unroll for each batch size."""
        self._sums = torch.compile(smoothed_cross_entropy_sums, *args, **kwargs)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits: (batch, len, vocab), target: (batch, len).
        Returns (loss per target token, summed NLL without smoothing, number of target tokens)."""
        flat_logits = logits.reshape(-1, logits.size(-1))  # (tokens, vocab)
        flat_target = target.reshape(-1)  # (tokens,)
        tokens = (flat_target != self.pad_id).sum()
        if flat_logits.device.type == "cpu":
            loss_rows, nll_rows = BlockedSmoothedCrossEntropy.apply(
                flat_logits, flat_target, self.smoothing, self.pad_id
            )
            return loss_rows.sum() / tokens.clamp(min=1), nll_rows.sum(), tokens
        loss_sum, nll_sum = self._sums(flat_logits, flat_target, self.smoothing, self.pad_id)
        return loss_sum / tokens.clamp(min=1), nll_sum.detach(), tokens


def smoothed_cross_entropy_sums(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed smoothed loss, summed NLL) of (tokens, vocab) logits, from one fp32 log-softmax: the
    formula as written, used on GPUs, where fused kernels make the passes over (tokens x vocab) cheap."""
    log_probs = F.log_softmax(logits.float(), dim=-1)
    keep = target != pad_id
    nll_sum = F.nll_loss(log_probs, target, ignore_index=pad_id, reduction="sum")
    if smoothing == 0.0:
        return nll_sum, nll_sum
    # PyTorch's convention: (1 - eps) on the reference, eps / V on every token (the reference too)
    uniform_sum = -(log_probs.sum(dim=-1) * keep).sum() / log_probs.size(-1)
    return (1.0 - smoothing) * nll_sum + smoothing * uniform_sum, nll_sum


class BlockedSmoothedCrossEntropy(torch.autograd.Function):
    """The same loss per row, for a CPU: a block of rows at a time, in fp32 whatever the logits' dtype,
    so that neither fp32 logits nor their log-softmax is ever written whole. The backward pass writes
    the gradient, softmax - (1 - eps) * onehot - eps / V, straight into the logits' dtype. On a CPU this
    is faster than the formula above (BENCHMARKS.md, "The loss in blocks"), where each pass over the whole
    (tokens x vocab) array costs memory traffic, not arithmetic."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int):
        """logits: (tokens, vocab) of any float dtype, target: (tokens,) -> loss, nll: (tokens,) in fp32 (fp64
        for fp64 logits), zero at padding."""
        rows, vocab = logits.shape
        block = max(1, CPU_BLOCK_VALUES // vocab)
        acc = torch.promote_types(logits.dtype, torch.float32)  # fp32, or fp64 for fp64 logits (gradcheck)
        log_z = torch.empty(rows, dtype=acc, device=logits.device)  # log of the softmax normaliser
        nll = torch.empty_like(log_z)
        mean_logit = torch.empty_like(log_z)
        for start in range(0, rows, block):
            rows_here = slice(start, start + block)
            x = logits[rows_here].to(acc)  # (block, vocab), in cache
            log_z[rows_here] = torch.logsumexp(x, dim=-1)
            nll[rows_here] = log_z[rows_here] - x.gather(1, target[rows_here, None]).squeeze(1)
            mean_logit[rows_here] = x.mean(dim=-1)
        keep = (target != pad_id).to(acc)
        nll = nll * keep
        # -(eps / V) * sum_k log p_k = eps * (log Z - mean logit)
        loss = (1.0 - smoothing) * nll + smoothing * (log_z - mean_logit) * keep
        ctx.save_for_backward(logits, target, log_z, keep)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        logits, target, log_z, keep = ctx.saved_tensors
        rows, vocab = logits.shape
        block = max(1, CPU_BLOCK_VALUES // vocab)
        eps = ctx.smoothing
        scale = grad_loss.to(keep.dtype) * keep  # (tokens,)
        grad = torch.empty_like(logits)
        for start in range(0, rows, block):
            rows_here = slice(start, start + block)
            g = torch.exp(logits[rows_here].to(log_z.dtype) - log_z[rows_here, None])  # softmax, (block, vocab)
            g.sub_(eps / vocab)
            g.scatter_add_(1, target[rows_here, None], g.new_full((g.size(0), 1), -(1.0 - eps)))
            grad[rows_here] = g.mul_(scale[rows_here, None])
        return grad, None, None, None
