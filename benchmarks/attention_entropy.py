"""How spread a trained Transformer's attention is: the mean entropy (in nats) of each decoder layer's
cross-attention over the source and of each encoder layer's self-attention, teacher-forced on sentence
pairs, beside the entropy of attention spread evenly over the source. A decoder whose cross-attention is
at that even spread in every layer reads only the mean of the encoder's states: it can place the source's
content words, not translate word by word. A run stalled that way keeps a validation BLEU of about a
tenth of training in (BENCHMARKS.md, the Moses-tokenised seed 2):

    python -m benchmarks.attention_entropy runs/A/checkpoints/last.ckpt runs/B/checkpoints/last.ckpt \\
        --src <multi30k>/val.en.gz --tgt <multi30k>/val.de.gz --sentences 200
"""

import argparse
import json

import torch

from benchmarks.options import run_main
from nmt.data.text_io import read_lines
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.inference.loading import load_model
from nmt.modules.attention import attention_entropy


def mean_entropy(weights: torch.Tensor, queries: torch.Tensor) -> float:
    """:func:`nmt.modules.attention.attention_entropy` as a number."""
    return attention_entropy(weights, queries).item()


def padded(rows: list[list[int]]) -> torch.Tensor:
    longest = max(map(len, rows))
    return torch.tensor([r + [PAD_ID] * (longest - len(r)) for r in rows])


def entropies(model, src: torch.Tensor, tgt_in: torch.Tensor) -> dict:
    """One teacher-forced forward pass with every attention keeping its weights."""
    if not hasattr(model, "cross_attention_entropy"):
        raise ValueError(f"{type(model).__name__} has no Transformer decoder with cross-attention to measure")
    cross, even = model.cross_attention_entropy(src, tgt_in)
    encoder = [layer.self_attn for layer in model.encoder]
    for attention in encoder:
        attention.keep_weights = True  # the explicit formula, whose weights it keeps
    try:
        with torch.no_grad():
            model(src, tgt_in)
        sources = src != PAD_ID
        by_layer = [round(mean_entropy(a.last_weights, sources), 3) for a in encoder]
    finally:
        for attention in encoder:
            attention.keep_weights, attention.last_weights = False, None
    return {
        "even_over_the_source": round(even.item(), 3),
        "cross_attention_by_layer": [round(e, 3) for e in cross.tolist()],
        "encoder_self_attention_by_layer": by_layer,
    }


def measure(checkpoint: str, sources: list[str], targets: list[str]) -> dict:
    loaded = load_model(checkpoint, device="cpu")
    src = padded([loaded.src_tokenizer.encode(s) + [EOS_ID] for s in sources])
    tgt_in = padded([[BOS_ID] + loaded.tgt_tokenizer.encode(t) for t in targets])
    step = torch.load(checkpoint, weights_only=True, map_location="cpu").get("global_step")
    return {"checkpoint": checkpoint, "update": step, "sentences": len(sources), **entropies(loaded.model, src, tgt_in)}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or .gz)")
    parser.add_argument("--tgt", required=True, help="their references")
    parser.add_argument("--sentences", type=int, default=200, help="the first N pairs")
    args = parser.parse_args(argv)
    sources, targets = read_lines(args.src)[: args.sentences], read_lines(args.tgt)[: args.sentences]
    if len(sources) != len(targets):
        parser.error(f"--src has {len(sources)} of the first {args.sentences} lines, --tgt {len(targets)}")
    rows = [measure(path, sources, targets) for path in args.checkpoints]
    for row in rows:
        print(json.dumps(row))
    return rows


if __name__ == "__main__":
    run_main(main)
