"""Model-FLOPs utilisation (MFU) of Transformer training: achieved model FLOP/s over the matrix-product peak
of the same precision, both measured in the same process on the same device.

    python -m benchmarks.mfu --d-model 256 --layers 3 --heads 4 --ffn 1024 --precision 32 bf16
    python -m benchmarks.mfu --device cuda --d-model 512 --layers 6 --ffn 2048 --precision bf16 --compile

FLOPs are counted from the model's shapes (:func:`training_flops`: every matrix product of the forward pass,
attention included, on the padded batch, times 3 for forward + backward), so a faster kernel cannot change
the count; the tests check the count against PyTorch's own FLOP counter. Batches are synthetic (random
tokens, no padding), so the figure needs no corpus and means the same on every machine.
"""

import argparse
import contextlib
import json
import statistics
import time
from dataclasses import dataclass

import torch

from benchmarks.options import check_device_and_json, run_main
from benchmarks.systems import our_transformer
from nmt.data.tokenizer import PAD_ID
from nmt.modules.loss import LabelSmoothedCrossEntropy
from nmt.training.config_rules import MATMUL_PRECISIONS
from nmt.utils.io import atomic_write_json
from nmt.utils.machine import cpu_name

PEAK_SIZES = {"cpu": 2048, "cuda": 8192}
DTYPES = {"32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    d_model: int
    layers: int  # encoder layers = decoder layers
    heads: int
    ffn: int
    vocab: int


def forward_flops(shape: Shape, batch: int, src_len: int, tgt_len: int) -> int:
    """FLOPs (2 per multiply-add) of the matrix products of one forward pass over a padded batch."""
    d, f = shape.d_model, shape.ffn
    s, t = batch * src_len, batch * tgt_len  # source and target positions
    encoder = 4 * s * d * d + 2 * batch * src_len * src_len * d + 2 * s * d * f  # q,k,v,out; qk^T, av; ffn
    decoder = (
        4 * t * d * d
        + 2 * batch * tgt_len * tgt_len * d  # self-attention
        + 2 * t * d * d
        + 2 * s * d * d
        + 2 * batch * tgt_len * src_len * d  # cross-attention: q,out on the target; k,v on the source
        + 2 * t * d * f  # feed-forward
    )
    output = t * d * shape.vocab
    return 2 * (shape.layers * (encoder + decoder) + output)


def training_flops(shape: Shape, batch: int, src_len: int, tgt_len: int) -> int:
    """Forward + backward: the backward pass costs two forward passes (gradients of inputs and weights)."""
    return 3 * forward_flops(shape, batch, src_len, tgt_len)


def gemm_peak(device: torch.device, dtype: torch.dtype, size: int, repeats: int = 10) -> float:
    """FLOP/s of a square matrix product of random data (the best of ``repeats``)."""
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    best = float("inf")
    for _ in range(repeats + 2):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def median_seconds(step, device: torch.device, steps: int) -> float:
    """The median wall time of ``steps`` calls of ``step``, each waited for on the device."""
    times = []
    for _ in range(steps):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def synthetic_batch(shape: Shape, batch: int, src_len: int, tgt_len: int, device, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, shape.vocab, (batch, src_len), generator=generator)
    tgt = torch.randint(4, shape.vocab, (batch, tgt_len + 1), generator=generator)
    return src.to(device), tgt[:, :-1].to(device), tgt[:, 1:].to(device)


def measure(
    shape: Shape,
    precision: str,
    device: torch.device,
    batch: int,
    src_len: int,
    tgt_len: int,
    steps: int,
    compile_model: bool,
    fused_optim: bool,
    profile: bool = False,
    compile_loss: bool = False,
    compile_mode: str | None = None,
    dropout: float = 0.1,
    attention: str = "default",
) -> dict:
    """Median step time of forward, label-smoothed loss, backward and Adam, as Lightning's
    ``bf16-mixed`` runs it (autocast; weights and optimiser in fp32). ``compile_loss`` compiles the loss
    into the same graph as the model, so the fp32 logits over the vocabulary need not be written out."""
    torch.manual_seed(0)
    model = our_transformer(shape.vocab, shape.d_model, shape.heads, shape.layers, shape.ffn, dropout)
    model = model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), fused=fused_optim or None)
    src, tgt_in, tgt_out = synthetic_batch(shape, batch, src_len, tgt_len, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    forward = torch.compile(model, mode=compile_mode) if compile_model and not compile_loss else model
    # training's loss: in blocks on a CPU, with its own backward on a GPU; compiled into the step with the
    # model, the formula, which Inductor fuses (as compile=true trains)
    criterion = LabelSmoothedCrossEntropy(0.1, pad_id=PAD_ID, fused=not compile_loss)

    def loss_of(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        with autocast:
            logits = forward(src, tgt_in)  # (batch, tgt_len, vocab)
        return criterion(logits, tgt_out)[0]

    if compile_loss:
        loss_of = torch.compile(loss_of, mode=compile_mode)

    def step() -> None:
        with attention_kernels(attention):
            loss_of(src, tgt_in, tgt_out).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up (and compilation)
        step()
    if profile:
        print_profile(step, device, f"d_model {shape.d_model}, {precision}")
    seconds = median_seconds(step, device, steps)
    flops = training_flops(shape, batch, src_len, tgt_len)
    peak = gemm_peak(device, DTYPES[precision], PEAK_SIZES.get(device.type, 2048))
    return {
        "d_model": shape.d_model,
        "layers": shape.layers,
        "precision": precision,
        "compile": ("model + loss" if compile_loss else "model" if compile_model else "no")
        + (f" ({compile_mode})" if compile_mode and (compile_model or compile_loss) else ""),
        "fused_optim": fused_optim,
        "dropout": dropout,
        "attention": attention,
        "batch": f"{batch}x{src_len}/{tgt_len}",
        "step_ms": round(seconds * 1000, 2),
        "target_tokens_per_s": round(batch * tgt_len / seconds),
        "model_tflops": round(flops / seconds / 1e12, 4),
        "gemm_peak_tflops": round(peak / 1e12, 3),
        "mfu_percent": round(100 * flops / seconds / peak, 2),
    }


ATTENTION = ["default", "cudnn", "flash", "efficient", "math"]


def attention_kernels(choice: str):
    """PyTorch's scaled-dot-product attention restricted to one kernel ("default": its own choice). A kernel
    that cannot take a call (flash takes no mask tensor) makes the step fail, and the row says so."""
    if choice == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return sdpa_kernel(backends[choice])


def print_profile(step, device: torch.device, title: str, steps: int = 3, top: int = 15) -> None:
    """Where a training step's time goes, by operator (torch.profiler, self time): matrix products
    against casts, softmax, norms, dropout, the loss and the optimiser."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        _sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\nprofile of {steps} steps, {title}:")
    print(prof.key_averages().table(sort_by=key, row_limit=top))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--d-model", type=int, nargs="+", default=[256, 128])
    parser.add_argument("--layers", type=int, nargs="+", default=[3, 4], help="one per --d-model")
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 4], help="one per --d-model")
    parser.add_argument("--ffn", type=int, nargs="+", default=[1024, 256], help="one per --d-model")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--precision", nargs="+", default=["32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--compile-loss", action="store_true", help="torch.compile the model and the loss as one")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode, e.g. max-autotune-no-cudagraphs")
    parser.add_argument("--fused-optim", action="store_true", help="Adam(fused=True)")
    parser.add_argument("--dropout", type=float, default=0.1, help="the model's dropout (what it costs: 0)")
    parser.add_argument(
        "--attention", choices=ATTENTION, default="default", help="the attention kernel (default: PyTorch's choice)"
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--matmul-precision",
        choices=MATMUL_PRECISIONS,
        default="highest",
        help="torch.set_float32_matmul_precision: 'medium' lets fp32 matrix products run on bf16 units",
    )
    parser.add_argument("--profile", action="store_true", help="print where each step's time goes, by operator")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    for option in ("layers", "heads", "ffn"):  # one per model: a short list failed after the first model's rows
        if len(getattr(args, option)) != len(args.d_model):
            parser.error(f"--{option}: give one per --d-model ({len(args.d_model)}), got {len(getattr(args, option))}")
    if args.steps < 1 or args.batch < 1:
        parser.error("--steps and --batch: at least 1")
    check_device_and_json(parser, args.device, args.json)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    device = torch.device(args.device)
    if args.attention != "default" and device.type == "cpu":
        # the model writes attention out when it trains on a CPU (nmt/modules/attention.py): no kernel to choose
        parser.error("--attention chooses PyTorch's attention kernel, which the model trains with on a GPU only")
    rows = []
    for i, d_model in enumerate(args.d_model):
        shape = Shape(d_model, args.layers[i], args.heads[i], args.ffn[i], args.vocab)
        for precision in args.precision:
            try:  # one variant failing (a kernel that cannot take the call, memory) leaves the others
                row = measure(
                    shape,
                    precision,
                    device,
                    args.batch,
                    args.src_len,
                    args.tgt_len,
                    args.steps,
                    args.compile,
                    args.fused_optim,
                    args.profile,
                    args.compile_loss,
                    args.compile_mode,
                    args.dropout,
                    args.attention,
                )
            except Exception as err:  # noqa: BLE001
                row = {"d_model": d_model, "layers": args.layers[i], "precision": precision}
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"{cpu_name()}, {torch.get_num_threads()} threads"
    print(f"\nMFU ({name}, torch {torch.__version__}):")
    print(
        "| d_model x layers | precision | compile | fused Adam | dropout | attention | step (ms) | target tokens/s "
        "| model TFLOP/s | GEMM peak TFLOP/s | MFU |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        head = f"| {r['d_model']} x {r['layers']}+{r['layers']} | {r['precision']} |"
        if "error" in r:
            print(f"{head} failed: {r['error'][:120]} | | | | | | | | |")
            continue
        print(
            f"{head} {r['compile']} | {r['fused_optim']} | {r['dropout']} | {r['attention']} | {r['step_ms']} | "
            f"{r['target_tokens_per_s']:,} | {r['model_tflops']} | {r['gemm_peak_tflops']} | {r['mfu_percent']}% |"
        )
    if args.json:
        atomic_write_json(args.json, rows)  # its folders made, as --json's check said


if __name__ == "__main__":
    run_main(main)
