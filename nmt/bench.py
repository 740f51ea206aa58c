"""``make bench``: training and decoding speed of our models, measured side by side with PyTorch's fused
``nn.Transformer`` of identical shape on the same batches; the key/value cache against recomputation.
Results are appended to BENCHMARKS.md with the machine, date and command."""

import argparse
import math
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from nmt.build import build_model
from nmt.data.multi30k import Multi30kDataModule
from nmt.data.sources import DataNotFoundError
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.data.toy import ToyDataModule
from nmt.models.recompute import RecomputingDecoder
from nmt.modules.position import sinusoid_table
from nmt.search import SearchConfig, decode

CONF = Path(__file__).resolve().parents[1] / "conf"


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings, positions, pre-norm and tied output as ours."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.pad_id, self.scale = PAD_ID, math.sqrt(d_model)
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD_ID)
        self.core = nn.Transformer(d_model, heads, layers, layers, ffn, dropout, batch_first=True, norm_first=True)
        self.output = nn.Linear(d_model, vocab, bias=False)
        self.output.weight = self.embed.weight
        self.register_buffer("pe", sinusoid_table(torch.arange(1024), d_model), persistent=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, src, tgt_in):
        def embed(x):
            return self.drop(self.embed(x) * self.scale + self.pe[: x.size(1)])

        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), device=src.device, dtype=torch.bool)
        pad = src == PAD_ID
        out = self.core(
            embed(src),
            embed(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
            tgt_is_causal=True,
        )
        return self.output(out)


def our_transformer(vocab: int, d_model: int, heads: int, layers: int, ffn: int, dropout: float) -> nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position = OmegaConf.load(CONF / "pos" / "absolute.yaml")
    cfg.norm = OmegaConf.load(CONF / "norm" / "layer.yaml")
    cfg.update(
        d_model=d_model,
        num_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        ffn_dim=ffn,
        dropout=dropout,
        tie_embeddings="all",
    )
    return build_model(cfg, vocab, vocab)


def our_rnn(vocab: int, hidden: int, layers: int, dropout: float) -> nn.Module:
    cfg = OmegaConf.load(CONF / "model" / "rnn.yaml")
    cfg.attention = OmegaConf.load(CONF / "attention" / "multiplicative.yaml")
    cfg.update(embed_dim=hidden, hidden_size=hidden, encoder_layers=layers, decoder_layers=layers, dropout=dropout)
    return build_model(cfg, vocab, vocab)


def load_batches(cache_dir: str, max_tokens: int):
    """Training batches and test sources of Multi30k en-de when it can be found, else of the toy task."""
    try:
        dm = Multi30kDataModule(cache_dir=cache_dir, max_tokens=max_tokens, download=False)
        dm.text("train")
    except DataNotFoundError:
        dm = ToyDataModule(cache_dir=cache_dir, max_tokens=max_tokens)
    dm.prepare_data()
    dm.setup("fit")
    train = list(dm.train_dataloader())
    test = next(iter(dm._loader("test", shuffle=False)))  # a length-sorted evaluation batch
    return dm, train, test


def train_throughput(model: nn.Module, batches, steps: int, warmup: int = 3) -> float:
    """Target tokens per second of forward + backward + Adam step, after ``warmup`` steps."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens, elapsed = 0, 0.0
    for i, batch in enumerate(batches[: warmup + steps]):
        start = time.perf_counter()
        logits = model(batch["src"], batch["tgt_in"])
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD_ID, label_smoothing=0.1
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            elapsed += time.perf_counter() - start
            tokens += int((batch["tgt_out"] != PAD_ID).sum())
    return tokens / elapsed


@torch.no_grad()
def decode_speed(model, src: torch.Tensor, cfg: SearchConfig) -> float:
    """Sentences per second."""
    start = time.perf_counter()
    decode(model, src, BOS_ID, EOS_ID, cfg)
    return src.size(0) / (time.perf_counter() - start)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sentences", type=int, default=100)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--output", default="BENCHMARKS.md")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    dm, batches, test = load_batches(
        os.environ.get("NMT_CACHE", str(Path("~/.cache/nmt").expanduser())), args.max_tokens
    )
    vocab = dm.build_tokenizers()[1].vocab_size
    shape = dict(vocab=vocab, d_model=args.d_model, heads=4, layers=args.layers, ffn=4 * args.d_model, dropout=0.1)
    rows = []
    # interleaved rounds so both models see the same machine state
    ours, reference = our_transformer(**shape), TorchTransformer(**shape)
    rnn = our_rnn(vocab, args.d_model, 2, 0.1)
    results = {"ours": [], "torch": [], "rnn": []}
    for _ in range(2):
        results["ours"].append(train_throughput(ours, batches, args.steps))
        results["torch"].append(train_throughput(reference, batches, args.steps))
        results["rnn"].append(train_throughput(rnn, batches, args.steps))
    best = {k: max(v) for k, v in results.items()}
    rows.append(("training, target tokens/s: our Transformer", f"{best['ours']:,.0f}"))
    rows.append(("training, target tokens/s: torch.nn.Transformer, same shape", f"{best['torch']:,.0f}"))
    rows.append(("training: ours / torch.nn.Transformer", f"{best['ours'] / best['torch']:.2f}x"))
    rows.append(("training, target tokens/s: our GRU (2+2 layers, hidden d_model)", f"{best['rnn']:,.0f}"))
    src = test["src"][: args.sentences]
    ours.eval()
    fixed = dict(max_len_a=0.0, max_len_b=31)  # untrained weights never stop early: exactly 30 tokens
    for name, cfg in (
        ("greedy", SearchConfig(strategy="greedy", **fixed)),
        ("beam 5", SearchConfig(beam_size=5, **fixed)),
    ):
        cached = decode_speed(ours, src, cfg)
        recomputed = decode_speed(RecomputingDecoder(ours), src, cfg)
        rows.append((f"decoding {name}, 30-token outputs, sentences/s: with cache", f"{cached:.1f}"))
        rows.append((f"decoding {name}, 30-token outputs, sentences/s: recomputing the prefix", f"{recomputed:.1f}"))
        rows.append((f"decoding {name}: cache speed-up", f"{cached / recomputed:.2f}x"))
    threads = torch.get_num_threads()
    device = f"{platform.machine()} CPU, {os.cpu_count()} cores, torch {torch.__version__}, {threads} threads"
    command = "make bench" + (f" ARGS='{' '.join(argv or sys.argv[1:])}'" if (argv or sys.argv[1:]) else "")
    lines = [
        f"\n## Speed ({date.today().isoformat()})",
        "",
        f"Machine: {device}. Command: `{command}`. Data: {dm.describe()}, batches of at most "
        f"{args.max_tokens} tokens; model d_model {args.d_model}, {args.layers}+{args.layers} layers, 4 heads, "
        f"FFN {4 * args.d_model}, vocabulary {vocab}; {args.steps} timed steps after 3 warm-up steps, best "
        f"of 2 interleaved rounds; decoding {src.size(0)} test sentences in one batch.",
        "",
        "| measurement | value |",
        "|---|---|",
    ] + [f"| {k} | {v} |" for k, v in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.output, "a") as handle:
        handle.write(text)


if __name__ == "__main__":
    main()
