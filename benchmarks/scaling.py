"""How a training step's time grows with sequence length (attention is quadratic in it) and batch size:
our Transformer and torch.nn.Transformer of the same shape, on random token batches."""

import os
import statistics
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from benchmarks.systems import TorchTransformer, our_transformer  # noqa: E402
from nmt.data.tokenizer import PAD_ID  # noqa: E402

LENGTHS, FIXED_BATCH = (16, 32, 64, 128, 256), 32
BATCHES, FIXED_LENGTH = (8, 16, 32, 64, 128), 32


def step_time(model, batch: int, length: int, vocab: int, repeats: int = 3) -> float:
    """Median seconds of forward + loss + backward + Adam on a (batch, length) source and target."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (batch, length), generator=generator)
    tgt = torch.randint(4, vocab, (batch, length + 1), generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    times = []
    for i in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD_ID)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def scaling_rows(vocab: int, args, figure: Path, report_dir: Path) -> list[str]:
    shape = dict(vocab=vocab, d_model=args.d_model, heads=args.heads, layers=args.layers, ffn=4 * args.d_model)
    torch.manual_seed(0)
    models = {"ours": our_transformer(**shape), "torch.nn.Transformer": TorchTransformer(**shape)}
    for model in models.values():
        model.train()
    by_length = {n: [step_time(m, FIXED_BATCH, n_len, vocab) for n_len in LENGTHS] for n, m in models.items()}
    by_batch = {n: [step_time(m, n_batch, FIXED_LENGTH, vocab) for n_batch in BATCHES] for n, m in models.items()}

    figure.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name in models:
        left.plot(LENGTHS, [1000 * t for t in by_length[name]], marker="o", label=name)
        right.plot(BATCHES, [1000 * t for t in by_batch[name]], marker="o", label=name)
    left.set(xlabel="sequence length (source = target)", ylabel="ms per training step", xscale="log", yscale="log")
    left.set_title(f"batch of {FIXED_BATCH} sentences")
    right.set(xlabel="sentences per batch", ylabel="ms per training step", xscale="log", yscale="log")
    right.set_title(f"sequences of {FIXED_LENGTH} tokens")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(figure, dpi=120)
    plt.close(fig)

    link = os.path.relpath(figure.resolve(), report_dir.resolve())
    lines = ["", f"Step time against sequence length and batch size (median of 3 steps, ms): ![scaling]({link})", ""]
    lines += ["| batch x length | tokens | ours (ms) | torch.nn.Transformer (ms) | ours, ms per 1k tokens |"]
    lines += ["|---|---|---|---|---|"]
    points = [(FIXED_BATCH, n, i, by_length) for i, n in enumerate(LENGTHS)]
    points += [(b, FIXED_LENGTH, i, by_batch) for i, b in enumerate(BATCHES) if b != FIXED_BATCH]
    for batch, length, i, table in points:
        ours, reference = table["ours"][i], table["torch.nn.Transformer"][i]
        per_k = 1e6 * ours / (batch * length)
        times = f"{1000 * ours:.0f} | {1000 * reference:.0f}"
        lines.append(f"| {batch} x {length} | {batch * length:,} | {times} | {per_k:.1f} |")
    return lines


if __name__ == "__main__":  # a library: run as a program, it measured nothing and said nothing
    raise SystemExit("benchmarks.scaling is a part of `python -m benchmarks`: run that (--help lists its options)")
