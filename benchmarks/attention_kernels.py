"""``python -m benchmarks.attention_kernels [--device cuda]``: the device time of each attention kernel, forward
and backward, at the shapes of the tiny recipe's three attentions, so that the kernel a small model trains with
is chosen by measurement.

A tiny model's update on a GPU is bound by its kernels' device time (the fifth lease: 8.0 ms an update, with
cuDNN's attention forward and backward about 0.8 ms each over the update's twelve attentions, for arithmetic
of a few microseconds). PyTorch chooses cuDNN's kernel on an H100 (``cudnn_attention=null``); without it
(``false``) flash attention takes the decoder's causal self-attention and the memory-efficient kernel the
masked ones; the written-out formula (``model.fused_attention=false``) is a few small kernels. Each row here: one
attention's forward and the gradients of its queries, keys and values, under the model's masks (a key padding
mask of shape (batch, 1, 1, keys) for the encoder's self-attention and the cross-attention, ``is_causal`` and
no mask for the decoder's self-attention), in bf16; on a GPU timed as CUDA graph replays (the device's time
alone, as a replayed update pays it), elsewhere by the wall clock; beside it, what a call at a shape not
seen before costs beyond a second call (a plan built per shape: a replayed update records each batch shape
once, and the fifth lease's first epoch took about 1 s for each of its 25 new shapes). Then the two
attentions of a greedy decoding step as validation decodes (float32, one query a sentence, forward only):
in the fifth lease a validation batch spent 20.4 of its 44.7 ms of device time in the memory-efficient
kernel. Each kernel's output and gradients are compared with the written-out formula in float32; a kernel
that cannot take a call says why.
"""

import argparse
import functools
import json
import math
import time

import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.options import check_device_and_json, run_main
from nmt.utils.io import atomic_write_json
from nmt.utils.machine import cpu_name

BACKENDS = {
    "pytorch's choice": None,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
    "written out": "explicit",
}


def written_out(q, k, v, mask, causal: bool) -> torch.Tensor:
    """The formula as ``MultiHeadAttention._explicit`` writes it (no dropout, no position bias)."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    if causal:
        future = torch.ones(q.size(2), k.size(2), dtype=torch.bool, device=q.device).tril()
        mask = future if mask is None else mask & future
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


def attention(backend, q, k, v, mask, causal: bool) -> torch.Tensor:
    if backend == "explicit":
        return written_out(q, k, v, mask, causal)
    if causal:  # as the decoder calls it: no mask tensor
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def kinds(batch: int, src_len: int, tgt_len: int, heads: int, head_dim: int, device, dtype, seed: int = 0):
    """The three attentions of an encoder-decoder layer: name -> (q, k, v, mask, causal, grad of the output)."""
    g = torch.Generator().manual_seed(seed)
    src_lengths = torch.randint(max(1, src_len // 2), src_len + 1, (batch,), generator=g)
    src_lengths[0] = src_len  # the longest sentence sets the batch's length, as a padded batch has one
    key_mask = (torch.arange(src_len)[None, :] < src_lengths[:, None])[:, None, None, :].to(device)

    def t(length: int) -> torch.Tensor:
        return torch.randn(batch, heads, length, head_dim, generator=g).to(device, dtype)

    return {
        "encoder self-attention (padding mask)": (t(src_len), t(src_len), t(src_len), key_mask, False, t(src_len)),
        "decoder self-attention (is_causal)": (t(tgt_len), t(tgt_len), t(tgt_len), None, True, t(tgt_len)),
        "cross-attention (padding mask)": (t(tgt_len), t(src_len), t(src_len), key_mask, False, t(tgt_len)),
    }


def decoding_kinds(batch: int, src_len: int, room: int, heads: int, head_dim: int, device, seed: int = 0):
    """The two attentions of a greedy decoding step as validation runs it (float32, no gradients, one query
    a sentence): self-attention over a cache of fixed size whose written slots a mask names, and
    cross-attention over the source with its padding mask. name -> (q, k, v, mask, causal, None)."""
    g = torch.Generator().manual_seed(seed)
    src_lengths = torch.randint(max(1, src_len // 2), src_len + 1, (batch,), generator=g)
    src_lengths[0] = src_len
    key_mask = (torch.arange(src_len)[None, :] < src_lengths[:, None])[:, None, None, :].to(device)
    written = (torch.arange(room) <= room // 2)[None, None, None, :].to(device)  # a step halfway through

    def t(length: int) -> torch.Tensor:
        return torch.randn(batch, heads, length, head_dim, generator=g).to(device)

    return {
        "decoding step: self-attention over the cache (mask)": (t(1), t(room), t(room), written, False, None),
        "decoding step: cross-attention (padding mask)": (t(1), t(src_len), t(src_len), key_mask, False, None),
    }


def step(backend, q, k, v, mask, causal, grad_out):
    """One forward and, given the output's gradient, the gradients of q, k and v."""
    context = sdpa_kernel(backend) if isinstance(backend, SDPBackend) else _nothing()
    with context:
        if grad_out is None:  # decoding: no gradients
            with torch.no_grad():
                return attention(backend, q, k, v, mask, causal), ()
        out = attention(backend, q, k, v, mask, causal)
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
    return out, grads


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def time_call(call, device: torch.device, reps: int, iters: int) -> float:
    """Microseconds per call: on a GPU, ``reps`` calls recorded as one CUDA graph and replayed ``iters``
    times between two events; elsewhere, the wall clock over ``iters`` calls."""
    if device.type != "cuda":
        call()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        return (time.perf_counter() - start) / iters * 1e6
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph, as CUDA graphs ask
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / (iters * reps)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def new_shape_ms(backend, kind: str, lengths: list[int], args, device: torch.device) -> float:
    """What a call at a shape not seen before costs beyond a second call at it (a kernel's plan for the
    shape, a library's choice of algorithm), in ms, the mean over ``lengths`` (source and target positions
    alike). A replayed update records each batch shape once, so each new shape pays this at its first batch."""
    extra = []
    for length in lengths:
        q, k, v, mask, causal, grad_out = kinds(
            args.batch, length, length, args.heads, args.head_dim, device, torch.bfloat16
        )[kind]
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        seconds = []
        for _ in range(2):
            _sync(device)
            start = time.perf_counter()
            step(backend, q, k, v, mask, causal, grad_out)
            _sync(device)
            seconds.append(time.perf_counter() - start)
        extra.append(seconds[0] - seconds[1])
    return sum(extra) / len(extra) * 1e3


def measure(args) -> list[dict]:
    device = torch.device(args.device)
    dtype = torch.bfloat16
    rows = []
    unseen = args.src_len + max(args.src_len, args.tgt_len)  # lengths no row has used, 3 new ones a row
    shapes = kinds(args.batch, args.src_len, args.tgt_len, args.heads, args.head_dim, device, dtype)
    room = round(1.5 * args.src_len + 10)  # validation's greedy search: at most 1.5 x source + 10 tokens
    shapes |= decoding_kinds(args.decode_batch, args.src_len, room, args.heads, args.head_dim, device)
    for kind, (q, k, v, mask, causal, grad_out) in shapes.items():
        training = grad_out is not None
        q, k, v = (x.requires_grad_(training) for x in (q, k, v))
        ref_inputs = [x.detach().float().requires_grad_(training) for x in (q, k, v)]
        ref_out, ref_grads = step("explicit", *ref_inputs, mask, causal, grad_out.float() if training else None)
        for name, backend in BACKENDS.items():
            row = {"attention": kind, "kernel": name}
            try:
                out, grads = step(backend, q, k, v, mask, causal, grad_out)
                differences = [(out.float() - ref_out).abs().max().item()]
                differences += [(g.float() - r).abs().max().item() for g, r in zip(grads, ref_grads, strict=True)]
                row["max_difference_from_fp32"] = max(differences)
                call = functools.partial(step, backend, q, k, v, mask, causal, grad_out)
                row["us_per_call"] = round(time_call(call, device, args.reps, args.iters), 2)
                if args.new_shapes and training:
                    lengths = list(range(unseen, unseen + args.new_shapes))
                    unseen += args.new_shapes
                    row["ms_new_shape"] = round(new_shape_ms(backend, kind, lengths, args, device), 2)
            except RuntimeError as error:  # a kernel that cannot take the call (flash: no mask tensor)
                row["failed"] = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0][:160]
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=512, help="sentences (the recipe's 8k tokens: about 500)")
    parser.add_argument("--src-len", type=int, default=16)
    parser.add_argument("--tgt-len", type=int, default=16)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20, help="calls in one recorded graph (GPU)")
    parser.add_argument("--iters", type=int, default=20, help="graph replays (GPU) or calls (CPU) timed")
    parser.add_argument("--decode-batch", type=int, default=338, help="sentences a validation batch decodes")
    parser.add_argument("--new-shapes", type=int, default=3, help="unseen shapes timed a row (0: none)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    for option in ("batch", "src_len", "tgt_len", "heads", "head_dim", "reps", "iters", "decode_batch"):
        if getattr(args, option) < 1:  # --iters 0 ended on a ZeroDivisionError after the first rows
            parser.error(f"--{option.replace('_', '-')} {getattr(args, option)}: at least 1")
    if args.new_shapes < 0:
        parser.error(f"--new-shapes {args.new_shapes}: 0 or more")
    check_device_and_json(parser, args.device, args.json)
    rows = measure(args)
    shape = f"{args.batch} x {args.heads} heads x {args.src_len} / {args.tgt_len} positions x {args.head_dim}"
    print(
        f"| attention ({shape}, bf16; decoding: {args.decode_batch} sentences, fp32) | kernel | "
        "us a forward and backward (decoding: a forward) | ms more at a new shape | "
        "largest difference from fp32 |"
    )
    print("|---|---|---|---|---|")
    for row in rows:
        timing = f"{row['us_per_call']:,.1f}" if "us_per_call" in row else f"failed: {row['failed']}"
        new_shape = f"{row['ms_new_shape']:,.2f}" if "ms_new_shape" in row else ""
        difference = f"{row['max_difference_from_fp32']:.2e}" if "max_difference_from_fp32" in row else ""
        print(f"| {row['attention']} | {row['kernel']} | {timing} | {new_shape} | {difference} |")
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else cpu_name()
    result = {"device": device, "torch": torch.__version__, "shape": shape, "rows": rows}
    if args.json:
        atomic_write_json(args.json, result)  # its folders made, as --json's check said
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    return result


if __name__ == "__main__":
    run_main(main)
