"""Speed of the training loss alone, forward and backward, on a CPU: the blocked path that training uses
there against the one-log-softmax formula that GPUs use, on random logits of a real batch's shape.

    python -m benchmarks.loss --threads 2 --tokens 4096 --vocab 8000 --dtype bf16
"""

import argparse
import statistics
import time

import torch

from benchmarks.options import run_main
from nmt.modules.loss import BlockedSmoothedCrossEntropy, smoothed_cross_entropy_sums
from nmt.utils.machine import cpu_name

DTYPES = {"32": torch.float32, "bf16": torch.bfloat16}


def time_loss(tokens: int, vocab: int, dtype: torch.dtype, smoothing: float, repeats: int) -> dict[str, float]:
    """Median milliseconds of forward + backward for each path; the paths alternate, so a busy machine
    slows both alike."""
    torch.manual_seed(0)
    logits = (torch.randn(tokens, vocab) * 3).to(dtype).requires_grad_()
    target = torch.randint(1, vocab, (tokens,))
    paths = {
        "formula": lambda: smoothed_cross_entropy_sums(logits, target, smoothing, 0)[0],
        "blocked": lambda: BlockedSmoothedCrossEntropy.apply(logits, target, smoothing, 0)[0].sum(),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, loss in paths.items():
            logits.grad = None
            start = time.perf_counter()
            loss().backward()
            times[name].append(1000 * (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    parser.add_argument("--smoothing", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for option, value in (("--repeats", args.repeats), ("--tokens", args.tokens), ("--vocab", args.vocab)):
        if value < 1:
            parser.error(f"{option} {value}: 1 or more")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads {args.threads}: 1 or more (leave it out for PyTorch's default)")
    if args.threads:
        torch.set_num_threads(args.threads)
    ms = time_loss(args.tokens, args.vocab, DTYPES[args.dtype], args.smoothing, args.repeats)
    print(
        f"{args.tokens} x {args.vocab} {'fp32' if args.dtype == '32' else args.dtype} logits, {cpu_name()}, "
        f"{torch.get_num_threads()} threads: "
        f"formula {ms['formula']:.1f} ms, blocked {ms['blocked']:.1f} ms ({ms['formula'] / ms['blocked']:.2f}x)"
    )


if __name__ == "__main__":
    run_main(main)
