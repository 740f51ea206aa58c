"""Training loss (config group ``smoothing``)."""

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

# rows of logits per block on a CPU: 2^18 fp32 values (1 MiB) stay in a core's cache between passes
CPU_BLOCK_VALUES = 2**18


class LabelSmoothedCrossEntropy(nn.Module):
    """Cross-entropy against a target distribution that puts ``1 - smoothing`` on the reference token and
    spreads ``smoothing`` uniformly over the vocabulary (Szegedy et al. 2016). Padding is ignored."""

    def __init__(self, smoothing: float = 0.0, pad_id: int = 0, fused: bool = True) -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing.smoothing={smoothing} must be in [0, 1)")
        if not isinstance(fused, bool):
            raise ValueError(f"smoothing.fused={fused!r} must be true or false")
        self.smoothing = smoothing
        self.pad_id = pad_id
        self.fused = fused
        self._sums = smoothed_cross_entropy_sums  # the formula; :meth:`compile` replaces it
        self._compiled = False

    def compile(self, *args, **kwargs) -> None:
        """Compile the formula (``torch.compile``'s arguments): off the CPU, Inductor fuses it into kernels
        that read the logits once forward and write their gradient once backward, so the compiled formula
        replaces :class:`FusedSmoothedCrossEntropy` there. With ``fused`` the CPU's loss stays as it is (a
        loop over blocks that Dynamo would unroll for each batch size); ``fused=false`` takes the compiled
        formula everywhere."""
        self._sums = torch.compile(smoothed_cross_entropy_sums, *args, **kwargs)
        self._compiled = True

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """logits: (batch, len, vocab), target: (batch, len).
        Returns (loss per target token, summed NLL without smoothing, number of target tokens)."""
        flat_logits = logits.reshape(-1, logits.size(-1))  # (tokens, vocab)
        flat_target = target.reshape(-1)  # (tokens,)
        tokens = (flat_target != self.pad_id).sum()
        on_cpu = flat_logits.device.type == "cpu"
        if self.fused and on_cpu:
            loss_rows, nll_rows = BlockedSmoothedCrossEntropy.apply(
                flat_logits, flat_target, self.smoothing, self.pad_id
            )
            return loss_rows.sum() / tokens.clamp(min=1), nll_rows.sum(), tokens
        if self.fused and not self._compiled:
            loss_sum, nll_sum = FusedSmoothedCrossEntropy.apply(flat_logits, flat_target, self.smoothing, self.pad_id)
        else:  # fused=false (the formula op by op, to compare), or compiled off the CPU (Inductor fuses it)
            loss_sum, nll_sum = self._sums(flat_logits, flat_target, self.smoothing, self.pad_id)
        return loss_sum / tokens.clamp(min=1), nll_sum.detach(), tokens


def smoothed_cross_entropy_sums(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed smoothed loss, summed NLL) of (tokens, vocab) logits, from one fp32 log-softmax: the
    formula as written, which autograd differentiates op by op; compiled off the CPU, Inductor fuses it."""
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
    @once_differentiable  # its gradient is written out, not differentiable again: a second derivative is refused
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


class FusedSmoothedCrossEntropy(torch.autograd.Function):
    """The summed loss and NLL of (tokens, vocab) logits in the fewest passes over them that PyTorch's own
    kernels allow: the path off the CPU when the loss is not compiled. A tiny model's update on a GPU is
    bound by its kernels, and the loss's are the largest: the logits are a (tokens x vocab) tensor, 8k x 10k
    in the tiny recipe, so each pass over them moves hundreds of megabytes.

    Forward: one log-softmax in fp32 (kept for backward, as autograd of the formula keeps it), the
    reference's log-probability gathered from it, and (with smoothing) the mean logit read in the logits'
    own dtype with fp32 accumulation: -(1/V) sum_k log p_k = log Z - mean logit, where log Z = x_ref -
    log p_ref, so that a row's loss is -log p_ref + eps (x_ref - mean logit). Backward: the probabilities,
    the reference's share subtracted in place, and one product that writes the gradient, (p - (1 - eps)
    onehot - eps / V) * upstream, rounded once into the logits' dtype. Autograd of the formula passes over
    the logits' size more often: the sum over the vocabulary read in fp32, a zero-filled gradient for the
    NLL, the two gradients added, the log-softmax's backward and a cast back (``python -m
    benchmarks.op_count`` measures both). Autocast is off inside, so that it adds no casts of its own."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, smoothing: float, pad_id: int):
        """logits: (tokens, vocab) of any float dtype, target: (tokens,) -> (loss sum, NLL sum), 0-dim, in
        fp32 (fp64 for fp64 logits)."""
        acc = torch.promote_types(logits.dtype, torch.float32)  # fp32, or fp64 for fp64 logits (gradcheck)
        keep = target != pad_id
        with torch.autocast(logits.device.type, enabled=False):
            log_probs = F.log_softmax(logits, dim=-1, dtype=acc)  # (tokens, vocab)
            ref_log_prob = log_probs.gather(1, target[:, None]).squeeze(1)  # (tokens,)
            if smoothing == 0.0:
                nll_sum = -torch.where(keep, ref_log_prob, 0.0).sum()
                loss_sum = nll_sum.clone()
            else:
                # a row's loss: -(1 - eps) log p_ref + eps (log Z - mean logit) = -log p_ref + eps (x_ref - mean logit)
                ref_minus_mean = logits.gather(1, target[:, None]).squeeze(1) - logits.mean(dim=-1, dtype=acc)
                sums = torch.where(keep, torch.stack((ref_log_prob, ref_minus_mean)), 0.0).sum(dim=1)  # (2,)
                nll_sum = -sums[0]
                loss_sum = torch.add(nll_sum, sums[1], alpha=smoothing)
        ctx.save_for_backward(log_probs, target, keep)
        ctx.smoothing, ctx.logits_dtype = smoothing, logits.dtype
        ctx.mark_non_differentiable(nll_sum)
        return loss_sum, nll_sum

    @staticmethod
    @once_differentiable  # its gradient is written out, not differentiable again: a second derivative is refused
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        log_probs, target, keep = ctx.saved_tensors
        eps, vocab = ctx.smoothing, log_probs.size(-1)
        with torch.autocast(log_probs.device.type, enabled=False):
            scale = torch.where(keep, grad_loss.to(log_probs.dtype), 0.0)  # (tokens,): upstream, 0 at padding
            probs = log_probs.exp()  # (tokens, vocab); not in place, so that a retained graph stays intact
            probs.scatter_add_(1, target[:, None], probs.new_full((probs.size(0), 1), -(1.0 - eps)))
            grad = torch.empty(log_probs.shape, dtype=ctx.logits_dtype, device=log_probs.device)
            # (p - (1 - eps) onehot - eps / V) * scale, rounded once into the logits' dtype
            torch.addcmul(scale[:, None] * (-eps / vocab), probs, scale[:, None], out=grad)
        return grad, None, None, None
