"""The systems ``make bench`` times: our Transformer and GRU, and torch.nn.Transformer of the same shape
(the fused reference). Each measurement runs in a fresh worker process (``python -m benchmarks.systems``)
so that its peak memory is its own. The timing and memory helpers come from ``peers/peer_speed.py``
(torch only, so peers' environments can run it), so ours and the peers are measured by the same code."""

import argparse
import json
import math
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from benchmarks.options import run_main
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.search import decode
from nmt.decoding.settings import SearchConfig
from nmt.models.build import build_model
from nmt.models.recompute import RecomputingDecoder
from nmt.modules.position import sinusoid_table
from peers.peer_speed import peak_rss_mb, timed_decoding, timed_training  # the protocol peers run too

CONF = Path(__file__).resolve().parents[1] / "conf"


class TorchTransformer(nn.Module):
    """torch.nn.Transformer with the same embeddings, positions, pre-norm and tied output as ours."""

    def __init__(self, vocab: int, d_model: int, heads: int, layers: int, ffn: int, dropout: float = 0.1) -> None:
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


def our_transformer(vocab: int, d_model: int, heads: int, layers: int, ffn: int, dropout: float = 0.1) -> nn.Module:
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


def our_rnn(vocab: int, hidden: int, layers: int, dropout: float = 0.1) -> nn.Module:
    """GRU, bidirectional encoder, Luong "general" attention with input feeding, tied decoder embeddings."""
    cfg = OmegaConf.load(CONF / "model" / "rnn.yaml")
    cfg.attention = OmegaConf.load(CONF / "attention" / "multiplicative.yaml")
    cfg.update(
        embed_dim=hidden,
        hidden_size=hidden,
        encoder_layers=layers,
        decoder_layers=layers,
        dropout=dropout,
        tie_embeddings="decoder",
    )
    return build_model(cfg, vocab, vocab)


def train_throughput(model: nn.Module, batches, steps: int, warmup: int = 3) -> float:
    """Target tokens per second of forward + loss + backward + Adam step, after ``warmup`` steps."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch):
        logits = model(batch["src"], batch["tgt_in"])
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch["tgt_out"].flatten(), ignore_index=PAD_ID, label_smoothing=0.1
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return timed_training(step, batches, steps, warmup)


@torch.no_grad()
def decode_throughput(model, chunks, beam: int, out_len: int) -> dict:
    """Sentences per second and mean output length (see ``timed_decoding``): ``out_len`` tokens, as
    random weights never choose EOS within that limit."""
    limit = out_len + 1  # our limit counts the EOS, the peers' does not
    cfg = SearchConfig(strategy="greedy" if beam == 1 else "beam", beam_size=beam, max_len_a=0.0, max_len_b=limit)
    return timed_decoding(lambda src: [len(ids) for ids in decode(model, src, BOS_ID, EOS_ID, cfg)], chunks)


def build(system: str, arch: str, vocab: int, args) -> nn.Module:
    torch.manual_seed(0)
    if arch == "rnn":
        return our_rnn(vocab, args.d_model, args.rnn_layers)
    shape = dict(vocab=vocab, d_model=args.d_model, heads=args.heads, layers=args.layers, ffn=args.ffn)
    return TorchTransformer(**shape) if system == "torch" else our_transformer(**shape)


def main() -> None:
    """One measurement in this process: ``train`` or ``decode`` (``--no-cache``: recompute the prefix)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("system", choices=["ours", "torch"])
    parser.add_argument("batches")
    parser.add_argument("--mode", choices=["train", "decode"], required=True)
    parser.add_argument("--arch", choices=["transformer", "rnn"], default="transformer")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--rnn-layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out-len", type=int, default=30)
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    data = torch.load(args.batches, weights_only=True)
    model = build(args.system, args.arch, data["vocab"], args)
    result = {"baseline_rss_mb": peak_rss_mb()}
    if args.mode == "train":
        result["train_tokens_per_s"] = train_throughput(model, data["train"], args.steps)
    else:
        model.eval()
        decoder = RecomputingDecoder(model) if args.no_cache else model
        result["decode"] = {f"beam {b}": decode_throughput(decoder, data["test"], b, args.out_len) for b in (1, 5)}
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


if __name__ == "__main__":
    run_main(main)
