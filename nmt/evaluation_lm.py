"""Language-model checkpoints: perplexity over a whole split, and generation from a prompt."""

import json
import math
from dataclasses import replace
from pathlib import Path

import torch
from omegaconf import OmegaConf
from rich.console import Console
from rich.table import Table

from nmt.build import build_datamodule
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmt.evaluation import LoadedModel, load_model
from nmt.plots import save_attention_maps
from nmt.search import SearchConfig, decode

console = Console(stderr=True)


@torch.no_grad()
def stream_perplexity(model: torch.nn.Module, loader) -> dict:
    """exp(sum of NLL / number of scored tokens) over every window of ``loader``: one number for the
    whole stream, each token counted once whatever the batch it falls in."""
    device = next(model.parameters()).device
    nll, tokens = 0.0, 0
    for batch in loader:
        logits = model(batch["input"].to(device)).float()  # (batch, block, vocab)
        target = batch["target"].to(device)
        nll += float(
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=PAD_ID, reduction="sum"
            )
        )
        tokens += int((target != PAD_ID).sum())
    loss = nll / max(tokens, 1)
    return {"loss": loss, "ppl": math.exp(loss), "tokens": tokens}


def evaluate_lm_checkpoint(
    ckpt_path: str,
    split: str = "test",
    average_last: int = 0,
    device: str = "auto",
    data_overrides: dict | None = None,
    out_dir: str | None = None,
) -> dict:
    """Perplexity of a split (``val`` or ``test``) of the checkpoint's corpus; writes metrics.json."""
    loaded = load_model(ckpt_path, average_last, device)
    data_cfg = OmegaConf.create(loaded.config["data"])
    for key, value in (data_overrides or {}).items():
        if value is not None:
            data_cfg[key] = value
    datamodule = build_datamodule(data_cfg, loaded.config["cache_dir"], loaded.config["seed"])
    datamodule.set_tokenizers(loaded.src_tokenizer, loaded.tgt_tokenizer)
    if split not in ("train", "val", "test"):
        raise ValueError(f"split={split!r}: a language model is scored on train, val or test")
    result = {
        "checkpoints": loaded.checkpoints,
        "data": datamodule.describe(),
        "split": split,
        **stream_perplexity(loaded.model, datamodule.loader(split)),
    }
    tag = f"{split}_ppl" + (f"_avg{average_last}" if average_last > 1 else "")
    if (data_overrides or {}).get("eval_stride") is not None:  # one folder per evaluation setting
        tag += f"_stride{datamodule.eval_stride}"
    out = Path(out_dir) if out_dir else Path(ckpt_path).expanduser().resolve().parent.parent / "eval" / tag
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    table = Table(title=f"{result['data']} - {split}")
    for column in ("metric", "value"):
        table.add_column(column)
    table.add_row("perplexity (per word and sentence end)", f"{result['ppl']:.2f}")
    table.add_row("loss (nats per token)", f"{result['loss']:.4f}")
    table.add_row("scored tokens", f"{result['tokens']:,}")
    console.print(table)
    return result


@torch.no_grad()
def generate(
    loaded: LoadedModel, prompt: str, search: SearchConfig, num_samples: int = 1, max_new_tokens: int = 50
) -> list[str]:
    """Continuations of ``prompt`` (up to the end of its sentence or ``max_new_tokens`` words), each
    returned with the prompt in front. The prompt follows a sentence end, as every sentence of the
    training stream does; greedy and beam give one continuation, sampling ``num_samples``."""
    vocab = loaded.tgt_tokenizer
    ids = vocab.encode(prompt)
    unknown = [w for w, i in zip(prompt.split(), ids, strict=True) if i == UNK_ID and w != "<unk>"]
    if unknown:
        console.print(f"[yellow]prompt words outside the vocabulary, read as <unk>: {', '.join(unknown)}")
    rows = num_samples if search.strategy == "sample" else 1
    device = next(loaded.model.parameters()).device
    context = torch.tensor([[EOS_ID, *ids]] * rows, device=device)
    limit = replace(search, max_len_a=0.0, max_len_b=max_new_tokens + 1)  # the limit counts the end token
    outputs = decode(loaded.model, context, BOS_ID, EOS_ID, limit)
    return [" ".join(filter(None, (prompt.strip(), vocab.decode(out)))) for out in outputs]


@torch.no_grad()
def write_self_attention_maps(loaded: LoadedModel, text: str, folder: Path) -> list[Path]:
    """Heatmaps of how each word of ``text`` (a prompt and its continuation) attended to the words
    before it, per layer and head."""
    vocab = loaded.tgt_tokenizer
    ids = [EOS_ID, *vocab.encode(text)]
    tokens = torch.tensor([ids], device=next(loaded.model.parameters()).device)
    maps = {name: weights[0] for name, weights in loaded.model.attention_maps(tokens).items()}
    labels = ["</s>", *vocab.pieces(ids[1:])]
    return save_attention_maps(maps, labels, labels, folder, "self_attention")


def evaluate_lm(cfg) -> dict:
    """``evaluate.py`` on a language-model checkpoint: generate from ``prompt`` when given, else the
    perplexity of each split."""
    if cfg.prompt is not None:
        loaded = load_model(cfg.ckpt_path, cfg.average_last, cfg.device)
        search = SearchConfig(**cfg.decode)
        texts = generate(loaded, str(cfg.prompt), search, cfg.num_samples, cfg.max_new_tokens)
        for text in texts:
            print(text)
        result = {"prompt": cfg.prompt, "generations": texts}
        if cfg.attention_maps:
            folder = Path(cfg.out_dir or Path(cfg.ckpt_path).expanduser().resolve().parent.parent / "eval" / "prompt")
            result["attention_maps"] = [str(p) for p in write_self_attention_maps(loaded, texts[0], folder)]
            console.print(f"attention heatmaps: {folder}")
        return result
    overrides = OmegaConf.to_container(cfg.data, resolve=True)
    splits = list(cfg.split) if OmegaConf.is_list(cfg.split) else [cfg.split]
    results = {}
    for split in splits:
        out_dir = str(Path(cfg.out_dir) / split) if cfg.out_dir and len(splits) > 1 else cfg.out_dir
        results[split] = evaluate_lm_checkpoint(cfg.ckpt_path, split, cfg.average_last, cfg.device, overrides, out_dir)
    return results[splits[0]] if len(splits) == 1 else results
