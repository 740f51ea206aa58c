"""evaluate(cfg): rebuild a model from a checkpoint alone, decode, score, report."""

import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from nmt.build import build_datamodule, build_model
from nmt.checkpoint import CheckpointError, average_state_dicts, epoch_checkpoints, load_checkpoint
from nmt.data.batching import token_batches
from nmt.data.files import read_split_files
from nmt.data.sources import decode_lines, locate, read_lines, read_parallel
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from nmt.data.vocab import load_tokenizer
from nmt.lit import CHECKPOINT_KEY
from nmt.metrics import corpus_scores
from nmt.plots import save_attention_maps
from nmt.search import SearchConfig, decode

log = logging.getLogger(__name__)
console = Console(stderr=True)


@dataclass
class LoadedModel:
    model: torch.nn.Module
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    config: dict
    checkpoints: list[str]


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_model(ckpt_path: str | os.PathLike, average_last: int = 0, device: str = "auto") -> LoadedModel:
    """The model, tokenizers and config stored in a checkpoint; with ``average_last=N`` the weights are
    the mean of the run's last N epoch checkpoints."""
    checkpoint = load_checkpoint(ckpt_path)
    paths = [str(ckpt_path)]
    state_dict = checkpoint["state_dict"]
    if average_last > 1:
        candidates = epoch_checkpoints(Path(ckpt_path).expanduser().parent)[-average_last:]
        if len(candidates) < 2:
            raise CheckpointError(
                f"average_last={average_last}: found {len(candidates)} epoch*.ckpt beside "
                f"{ckpt_path}; keep more with checkpoint.keep_last_epochs when training"
            )
        paths = [str(p) for p in candidates]
        state_dict = average_state_dicts([load_checkpoint(p)["state_dict"] for p in candidates])
    section = checkpoint[CHECKPOINT_KEY]
    src_tokenizer = load_tokenizer(section["src_tokenizer"], section.get("src_segmenter"))
    tgt_tokenizer = load_tokenizer(section["tgt_tokenizer"], section.get("tgt_segmenter"))
    config = section["config"]
    model = build_model(config["model"], src_tokenizer.vocab_size, tgt_tokenizer.vocab_size)
    weights = {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}
    model.load_state_dict(weights)
    model.to(pick_device(device)).eval()
    return LoadedModel(model, src_tokenizer, tgt_tokenizer, config, paths)


@torch.no_grad()
def translate_lines(
    loaded: LoadedModel,
    lines: Sequence[str],
    search: SearchConfig,
    max_tokens: int = 6000,
    max_input_len: int = 256,
) -> list[str]:
    """Translate raw sentences: batched by length for speed, returned in input order. Empty lines stay
    empty; inputs longer than ``max_input_len`` subword tokens are truncated (counted in a warning)."""
    device = next(loaded.model.parameters()).device
    encoded = loaded.src_tokenizer.encode_batch(list(lines))
    long_lines = [number for number, ids in enumerate(encoded, start=1) if len(ids) > max_input_len]
    if long_lines:
        log.warning(
            "%d input line(s) longer than max_input_len=%d subword tokens were truncated (first: line %d)",
            len(long_lines),
            max_input_len,
            long_lines[0],
        )
        encoded = [ids[:max_input_len] for ids in encoded]
    outputs = [""] * len(lines)
    non_empty = [i for i, ids in enumerate(encoded) if ids]
    lengths = {i: len(encoded[i]) + 1 for i in non_empty}
    order = sorted(non_empty, key=lengths.__getitem__)
    budget = max(
        max_tokens // max(search.beam_size if search.strategy == "beam" else 1, 1), max(lengths.values(), default=1)
    )
    for batch in token_batches(lengths, budget, order):
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.tensor(encoded[i] + [EOS_ID]) for i in batch], batch_first=True, padding_value=PAD_ID
        ).to(device)
        for i, ids in zip(batch, decode(loaded.model, src, BOS_ID, EOS_ID, search), strict=True):
            outputs[i] = loaded.tgt_tokenizer.decode(ids)
    return outputs


def evaluate_checkpoint(
    ckpt_path: str,
    split: str = "test",
    search: SearchConfig | None = None,
    data_overrides: dict | None = None,
    average_last: int = 0,
    device: str = "auto",
    max_tokens: int = 6000,
    out_dir: str | None = None,
    samples: int = 5,
    attention_maps: Sequence[int] = (),
    rouge: bool | None = None,
) -> dict:
    """Decode a split of the checkpoint's corpus, score it, write hypotheses and metrics, print a table.
    ROUGE is scored when ``rouge`` is true (None: when the run scored it in validation)."""
    search = search or SearchConfig()
    loaded = load_model(ckpt_path, average_last, device)
    data_cfg = OmegaConf.create(loaded.config["data"])
    if (data_overrides or {}).get("eval_stride") is not None:
        raise ValueError("data.eval_stride is a language-model setting (task=lm); this checkpoint translates")
    for key, value in (data_overrides or {}).items():
        if value is not None:
            data_cfg[key] = value
    split_name = split
    datamodule = build_datamodule(data_cfg, loaded.config["cache_dir"], loaded.config["seed"])
    sources, references, description = load_eval_set(split, datamodule, data_cfg, loaded.config)
    # a model trained on truncated sources (summarisation) reads test sources truncated the same way
    max_input_len = data_cfg.get("max_src_len") or 256
    hypotheses = translate_lines(loaded, sources, search, max_tokens, max_input_len)
    rouge = bool(loaded.config.get("rouge")) if rouge is None else rouge
    scores = corpus_scores(hypotheses, references, datamodule.tgt_lang, rouge=rouge)
    tag = f"{split_name.replace(':', '_').replace('/', '_')}_{search.strategy}"
    tag += str(search.beam_size) if search.strategy == "beam" else ""
    if average_last > 1:
        tag += f"_avg{average_last}"
    run_dir = Path(ckpt_path).expanduser().resolve().parent.parent
    out = Path(out_dir) if out_dir else run_dir / "eval" / tag
    out.mkdir(parents=True, exist_ok=True)
    (out / "hypotheses.txt").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    (out / "references.txt").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    (out / "sources.txt").write_text("".join(" ".join(s.splitlines()) + "\n" for s in sources), encoding="utf-8")
    result = {
        "checkpoints": loaded.checkpoints,
        "data": description,
        "split": split_name,
        "search": search.__dict__,
        **scores,
        "hypotheses": str(out / "hypotheses.txt"),
        "references": str(out / "references.txt"),
        "sources": str(out / "sources.txt"),
    }
    if attention_maps:
        result["attention_maps"] = [
            str(p) for p in write_attention_maps(loaded, sources, hypotheses, attention_maps, out / "attention")
        ]
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    _report(result, sources, references, hypotheses, samples)
    return result


IWSLT16_FOLDER = "iwslt16_de_en_devtest"


def load_eval_set(split: str, datamodule, data_cfg, config: dict) -> tuple[list[str], list[str], str]:
    """(sources, references, description) of an evaluation set:

    - ``train`` / ``val`` / ``test``: the corpus' own splits;
    - another test set of the corpus (e.g. ``test_2017_flickr`` for Multi30k);
    - ``iwslt16:<set>`` (e.g. ``iwslt16:tst2014``): IWSLT16 TED de-en, from data.root or
      $NMT_DATA/iwslt16_de_en_devtest (files IWSLT16.TED.<set>.de-en.<lang>.gz);
    - ``files:<prefix>`` or ``files:<file.tsv>``: any line-aligned pair of files.
    """
    src_lang, tgt_lang = datamodule.src_lang, datamodule.tgt_lang
    if split in ("train", "val", "test"):
        return *datamodule.text(split), f"{datamodule.describe()} {split}"
    if split.startswith("iwslt16:"):
        name = split.split(":", 1)[1]
        corpus = "TEDX" if name.startswith("TEDX.") else "TED"
        name = name.removeprefix("TEDX.").removeprefix("TED.")
        files = [f"IWSLT16.{corpus}.{name}.de-en.{lang}.gz" for lang in (src_lang, tgt_lang)]
        folder = locate(IWSLT16_FOLDER, files, data_cfg.get("root"), config["cache_dir"], download=False)
        return *read_parallel(folder / files[0], folder / files[1]), f"IWSLT16 {corpus} {name} {src_lang}-{tgt_lang}"
    if split.startswith("files:"):
        spec = split.split(":", 1)[1]
        return *read_split_files(spec, src_lang, tgt_lang), f"{spec} {src_lang}-{tgt_lang}"
    if "test_set" in data_cfg:
        data_cfg.test_set = split
        other = build_datamodule(data_cfg, config["cache_dir"], config["seed"])
        return *other.text("test"), other.describe()
    raise ValueError(f"split={split!r}: use train, val, test, iwslt16:<set> or files:<prefix>")


@torch.no_grad()
def write_attention_maps(
    loaded: LoadedModel, sources: Sequence[str], hypotheses: Sequence[str], indices: Sequence[int], folder: Path
) -> list[Path]:
    """Heatmaps of how each hypothesis token attended to the source (teacher-forced on the hypothesis)."""
    device = next(loaded.model.parameters()).device
    paths = []
    for index in indices:
        if not 0 <= index < len(sources):
            raise ValueError(f"attention_maps: sentence {index} does not exist (the set has {len(sources)})")
        src_ids = loaded.src_tokenizer.encode(sources[index]) + [EOS_ID]
        hyp_ids = loaded.tgt_tokenizer.encode(hypotheses[index])
        src = torch.tensor([src_ids], device=device)
        tgt_in = torch.tensor([[BOS_ID, *hyp_ids]], device=device)
        maps = {name: weights[0] for name, weights in loaded.model.attention_maps(src, tgt_in).items()}
        src_tokens = loaded.src_tokenizer.pieces(src_ids[:-1]) + ["</s>"]
        tgt_tokens = loaded.tgt_tokenizer.pieces(hyp_ids) + ["</s>"]
        # row t of the maps is the step that predicts hypothesis token t
        paths += save_attention_maps(maps, src_tokens, tgt_tokens, folder, f"sentence{index}")
    return paths


def _interval(result: dict, key: str) -> str:
    if key not in result:
        return ""
    lower, upper = result[key]
    return f"  (95% bootstrap interval {lower:.2f}-{upper:.2f}, {result['bootstrap']['resamples']} resamples)"


def _report(result: dict, sources, references, hypotheses, samples: int) -> None:
    table = Table(title=f"{result['data']} - {result['split']} ({result['sentences']} sentences)")
    for column in ("metric", "value"):
        table.add_column(column)
    table.add_row("BLEU (sacreBLEU, cased)", f"{result['bleu']:.2f}{_interval(result, 'bleu_ci95')}")
    table.add_row("BLEU 1-4 precisions", " / ".join(f"{p:.1f}" for p in result["bleu_precisions"]))
    table.add_row("brevity penalty / length ratio", f"{result['brevity_penalty']:.3f} / {result['length_ratio']:.3f}")
    table.add_row("chrF", f"{result['chrf']:.2f}")
    table.add_row("BLEU (lowercased, tokenised)", f"{result['bleu_tok_lc']:.2f}{_interval(result, 'bleu_tok_lc_ci95')}")
    table.add_row("signature", result["bleu_signature"])
    for key in ("rouge1", "rouge2", "rougeL"):
        if key in result:
            table.add_row(f"ROUGE-{key.removeprefix('rouge')} (F)", f"{result[key]:.2f}")
    console.print(table)
    if samples:
        examples = Table(title="sample translations", show_lines=True)
        for column in ("source", "reference", "hypothesis"):
            examples.add_column(column)
        for i in range(min(samples, len(sources))):
            examples.add_row(sources[i], references[i], hypotheses[i])
        console.print(examples)
    console.print(f"hypotheses and metrics: {Path(result['hypotheses']).parent}")


def evaluate(cfg: DictConfig) -> dict:
    """``evaluate.py``: score a split, or translate ``input`` (a file or "-" for stdin)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if load_checkpoint(cfg.ckpt_path)[CHECKPOINT_KEY]["config"].get("task") == "lm":
        from nmt.evaluation_lm import evaluate_lm

        return evaluate_lm(cfg)
    if cfg.get("prompt") is not None:
        raise ValueError(f"prompt={cfg.prompt!r}: prompts are for language-model checkpoints (task=lm)")
    search = SearchConfig(**cfg.decode)
    if cfg.input is None:
        overrides = OmegaConf.to_container(cfg.data, resolve=True)
        splits = list(cfg.split) if OmegaConf.is_list(cfg.split) else [cfg.split]
        if len(splits) > 1:
            results = {split: _evaluate_one(cfg, split, search, overrides, True) for split in splits}
            _summary(results)
            return results
        return _evaluate_one(cfg, splits[0], search, overrides, False)
    loaded = load_model(cfg.ckpt_path, cfg.average_last, cfg.device)
    if cfg.input == "-":
        lines = decode_lines(sys.stdin.buffer, "<stdin>")
    else:
        lines = read_lines(cfg.input)
    translations = translate_lines(loaded, lines, search, cfg.max_tokens, cfg.max_input_len)
    text = "".join(t + "\n" for t in translations)
    if cfg.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(cfg.output).write_text(text, encoding="utf-8")
        console.print(f"{len(translations)} translations written to {cfg.output}")
    return {"translations": len(translations), "output": cfg.output or "-"}


def _summary(results: dict) -> None:
    table = Table(title="all evaluation sets")
    for column in ("set", "sentences", "BLEU", "chrF", "BLEU (lc, tok)"):
        table.add_column(column)
    for split, r in results.items():
        table.add_row(split, str(r["sentences"]), f"{r['bleu']:.2f}", f"{r['chrf']:.2f}", f"{r['bleu_tok_lc']:.2f}")
    console.print(table)


def _evaluate_one(cfg: DictConfig, split: str, search: SearchConfig, overrides: dict, several: bool) -> dict:
    out_dir = cfg.out_dir
    if out_dir and several:  # one sub-folder per set
        out_dir = str(Path(out_dir) / split.replace(":", "_").replace("/", "_"))
    return evaluate_checkpoint(
        cfg.ckpt_path,
        split,
        search,
        overrides,
        cfg.average_last,
        cfg.device,
        cfg.max_tokens,
        out_dir,
        cfg.samples,
        list(cfg.attention_maps),
        cfg.get("rouge"),
    )
