"""Language modelling (``task=lm``): next-token training on windows of a word stream, perplexity over a
whole split, and generation from a prompt."""

import math
from collections.abc import Callable
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from rich.table import Table
from torch import nn

from nmt.data.lm import LanguageModelDataModule, is_file_split
from nmt.data.tokenizer import EOS_ID, PAD_ID, UNK_ID
from nmt.decoding.constraints import NEW_TOKENS
from nmt.decoding.continuation import continue_prompt
from nmt.decoding.settings import SAMPLED, SearchConfig, search_settings
from nmt.tasks.base import (
    FINAL_RESULTS,
    Task,
    check_split_text,
    decoder_only,
    evaluation_data_config,
    evaluation_splits,
    log_target_metrics,
    model_named,
    model_options,
    target_metrics,
    update_target_metrics,
)
from nmt.tasks.eval_folders import evaluation_folder
from nmt.tasks.translation_eval import set_name
from nmt.utils.configs import CONF
from nmt.utils.console import console as log_console
from nmt.utils.io import atomic_write_json

console = log_console(stderr=True)


def lm_corpora() -> list[str]:
    """The corpus configs a language model reads (conf/data files whose module is a LanguageModelDataModule)."""
    found = []
    for path in sorted((CONF / "data").glob("*.yaml")):
        target = OmegaConf.load(path).get("_target_")
        try:
            if target and issubclass(get_class(target), LanguageModelDataModule):
                found.append(path.stem)
        except (ImportError, AttributeError, ValueError):  # a config of a module that does not import: not one
            continue
    return found


class LanguageModelTask(Task):
    """Trains p(w_t | w_<t); validation reports the per-token loss, the perplexity exp(total NLL / total
    scored tokens) over the whole split (sums, not per-batch means, so a short last window weighs what
    its tokens weigh), and next-token accuracy."""

    name = "lm"
    report_metric = "test_ppl"
    reads_source = False
    evaluation_options = frozenset({"prompt", "max_new_tokens", "num_samples", "data.eval_stride"})
    instead_of = {
        "input": "it continues a prompt (prompt=...) or scores a split (split=...)",
        "output": "its continuations are printed",
        "max_input_len": "it reads no source: perplexity is scored in windows of data.block_size, and a prompt "
        "keeps the last words its position table holds",
        "rouge": "a language model is scored by perplexity",
        "samples": "prompt=... prints its continuations",
        "data.columns": "it scores its corpus's splits or a text file's lines (split=files:<path>)",
    }

    # ---- configuration ---------------------------------------------------------------------------
    def check(self, cfg: DictConfig) -> list[str]:
        problems = []
        if cfg.get("model") is not None and not decoder_only(cfg.model):
            problems.append(f"  task={self.name} cannot train {model_named(cfg.model)}: use {model_options(True)}")
        data = OmegaConf.select(cfg, "data._target_", default=None)
        if data is not None and not issubclass(get_class(data), LanguageModelDataModule):
            problems.append(f"  task={self.name} cannot read {data}: use data={' or data='.join(lm_corpora())}")
        every = OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=0)
        if every:
            problems.append(
                f"  validation.bleu_every_n_epochs={every}: a language model decodes nothing in validation "
                "(task=lm reports perplexity); leave it at 0"
            )
        scores_in = OmegaConf.select(cfg, "validation.scores_in", default=None)
        if scores_in is not None:
            problems.append(
                f"  validation.scores_in={scores_in}: a language model scores no decoded sentences in validation "
                "(task=lm reports perplexity); leave it null"
            )
        # kept in the checkpoint and read by no generation (translate.py refuses them: a continuation has no
        # source to be a multiple of); the other decode keys are the checkpoint's defaults for generation
        defaults = OmegaConf.load(CONF / "train.yaml").decode
        decode = cfg.get("decode") or {}
        length = [f"decode.{k}={decode[k]}" for k in ("max_len_a", "max_len_b") if decode.get(k) != defaults[k]]
        if length:
            problems.append(
                f"  {', '.join(length)}: an output's limit as a multiple of its source's length; a continuation "
                "has no source (translate.py and evaluate.py take max_new_tokens=N with prompt=...): leave them out"
            )
        return problems

    def validation_metric_names(self) -> set[str]:
        return {"val_loss", "val_ppl", "val_acc", "train_loss"}

    def check_evaluation(self, cfg: DictConfig) -> None:
        super().check_evaluation(cfg)
        new_tokens = cfg.get("max_new_tokens")
        if new_tokens is not None and (type(new_tokens) is not int or new_tokens < 0):
            raise ValueError(
                f"max_new_tokens={new_tokens!r}: the words a continuation may add, an integer >= 0 (null: {NEW_TOKENS})"
            )
        samples = cfg.get("num_samples", 1)
        if type(samples) is not int or samples < 1:
            raise ValueError(f"num_samples={samples!r}: how many continuations to sample, an integer >= 1")
        data = cfg.get("data") or {}
        if cfg.get("prompt") is not None:  # a continuation: nothing is scored, its length is its own
            decode = cfg.get("decode") or {}
            scored = [f"data.eval_stride={data.eval_stride}"] if data.get("eval_stride") is not None else []
            scored += [f"split={cfg.split}"] if cfg.get("split") is not None else []
            if scored:
                raise ValueError(
                    f"{', '.join(scored)}: options of scoring perplexity; with prompt=... a language model continues "
                    "the prompt and scores nothing: leave them out, or the prompt"
                )
            length = [f"decode.{k}={decode[k]}" for k in ("max_len_a", "max_len_b") if decode.get(k) is not None]
            if length:
                raise ValueError(
                    f"{', '.join(length)}: an output's limit as a multiple of its source's length; a continuation "
                    f"has no source: max_new_tokens=N sets the words it may add (null: {NEW_TOKENS})"
                )
            most = NEW_TOKENS if new_tokens is None else new_tokens
            min_len = decode.get("min_len")
            if type(min_len) is int and min_len > most:  # another value: the search's own check names it
                raise ValueError(
                    f"decode.min_len={min_len}: more than the {most} words a continuation may add (max_new_tokens"
                    f"{'=' + str(new_tokens) if new_tokens is not None else ' null: ' + str(NEW_TOKENS)}); lower it, "
                    "or raise max_new_tokens"
                )
        if "prompt" in cfg and cfg.prompt is None:  # evaluate.py without a prompt: perplexity, nothing generated
            given = [f"decode.{k}={v}" for k, v in (cfg.get("decode") or {}).items() if v is not None]
            given += [f"max_new_tokens={new_tokens}"] if new_tokens is not None else []
            given += [f"num_samples={samples}"] if samples != 1 else []
            given += [f"attention_maps={list(cfg.attention_maps)}"] if cfg.get("attention_maps") else []
            if given:
                raise ValueError(
                    f"{', '.join(given)}: options of generation from a prompt; without prompt=... a language model "
                    'is scored by perplexity: add prompt="..." or leave them out'
                )

    # ---- training --------------------------------------------------------------------------------
    def training_loss(self, model, loss, batch):
        logits = model(batch["input"])  # (batch, block, vocab)
        value, _, tokens = loss(logits, batch["target"])
        return value, tokens

    def validation_metrics(self, datamodule) -> nn.ModuleDict:
        return nn.ModuleDict(target_metrics())

    def validation_step(self, module, batch, batch_idx):
        metrics = module.val_metrics
        logits = module.model(batch["input"])
        _, nll, tokens = module.loss(logits, batch["target"])
        update_target_metrics(metrics, logits, batch["target"], nll, tokens)

    def validation_epoch_end(self, module):
        metrics = module.val_metrics
        log_target_metrics(module, metrics, ppl_in_progress_bar=True)

    def batch_sequences(self, batch):
        return batch["input"].size(0)

    def batch_target_tokens(self, batch):
        if "target_tokens" in batch:  # counted by the collate function: no wait for the device
            return batch["target_tokens"]
        return int((batch["target"] != PAD_ID).sum())

    # ---- evaluation ------------------------------------------------------------------------------
    def evaluate_split(
        self, loaded, split: str = "test", data_overrides: dict | None = None, out=None, own: bool = False
    ) -> dict:
        """Perplexity of a split (train, val or test) of the checkpoint's corpus, or of any text file
        (``files:<path>``, with the trained vocabulary); writes metrics.json."""
        if split not in ("train", "val", "test") and not is_file_split(split):
            raise ValueError(
                f"split={split!r}: a language model is scored on train, val, test or a text file (files:<path>)"
            )
        given_stride = (data_overrides or {}).get("eval_stride")
        if split == "train" and given_stride is not None:
            raise ValueError(
                f"data.eval_stride={given_stride} with split=train: the training split is scored in disjoint blocks "
                "of the block size, as the model trained on it; the stride applies to val and test"
            )
        data_cfg = evaluation_data_config(loaded, data_overrides)
        datamodule = self.build_datamodule(data_cfg, loaded.config["cache_dir"], loaded.config["seed"])
        datamodule.set_tokenizers(loaded.src_tokenizer, loaded.tgt_tokenizer)
        if is_file_split(split):  # a file given by path is new text by definition: read here, to name the key
            try:
                datamodule.text(split)
            except (FileNotFoundError, ValueError) as err:
                raise type(err)(f"split={split}: {err}") from None
        else:
            check_split_text(loaded, datamodule, split, "or score another text with split=files:<path>")
        described = datamodule.describe()
        if split == "train":  # cut into the blocks it trained on, whatever the stride of val and test
            described = f"{datamodule.name} (block {datamodule.block_size}, disjoint blocks)"
        stem = loaded.name
        tag = ("" if stem == "best" else f"{stem}_") + f"{set_name(split)}_ppl"
        tag += f"_avg{len(loaded.checkpoints)}" if len(loaded.checkpoints) > 1 else ""
        own_stride = (loaded.config.get("data") or {}).get("eval_stride") or datamodule.block_size
        if given_stride is not None and datamodule.eval_stride != own_stride:  # one folder per evaluation setting
            tag += f"_stride{datamodule.eval_stride}"
        identity = {
            "checkpoints": loaded.checkpoints,
            "weights": loaded.weights,  # each checkpoint's update and checksum: a run continued since, told apart
            "data": described,
            "split": split,
            "text": datamodule.text_hash(split),  # a files: text edited since: its evaluation kept
        }
        # out_dir: taken as it is (recorded by its absolute path, as the run's own folders are)
        folder = Path(out).expanduser().absolute() if out else loaded.run_dir / "eval" / tag
        out, code = evaluation_folder(folder, bool(out) and not own, loaded.run_dir, identity)  # before scoring
        result = {
            **identity,
            **stream_perplexity(loaded.model, datamodule.loader(split)),
            # the words outside the vocabulary, each the unknown word: new text's perplexity depends on them
            # (the scored tokens: the stream's after its first, each a target once)
            "unk_rate": round(float((datamodule.dataset(split).stream[1:] == UNK_ID).float().mean()), 5),
            "code": code,
        }
        atomic_write_json(out / "metrics.json", result)
        table = Table(title=f"{result['data']} - {split}")
        for column in ("metric", "value"):
            table.add_column(column)
        table.add_row("perplexity (per word and sentence end)", f"{result['ppl']:.2f}")
        table.add_row("loss (nats per token)", f"{result['loss']:.4f}")
        table.add_row("scored tokens", f"{result['tokens']:,}")
        table.add_row("unknown words (share of the tokens)", f"{result['unk_rate']:.2%}")
        console.print(table)
        return result

    def final_tag(self, cfg, split, average_last):
        return f"{split}_ppl" + (f"_avg{average_last}" if average_last > 1 else "")

    def final_score(self, loaded, cfg, split, out_dir, attention_maps=()):
        return self.evaluate_split(loaded, split, out=out_dir, own=True)  # the run's own folder, not out_dir

    def evaluate(self, cfg: DictConfig, load: Callable[[], object]) -> dict:
        """Generate from ``prompt`` when given, else the perplexity of each split."""
        loaded = load()
        if cfg.prompt is not None:
            search = search_settings(loaded.config.get("decode"), OmegaConf.to_container(cfg.decode, resolve=True))
            new_tokens = NEW_TOKENS if cfg.get("max_new_tokens") is None else cfg.max_new_tokens
            if cfg.num_samples != 1 and not search.samples:
                raise ValueError(
                    f"num_samples={cfg.num_samples}: only sampling gives several continuations, and the search is "
                    f"{search.strategy}; add decode.strategy={' or '.join(SAMPLED)}"
                )
            texts = generate(loaded, str(cfg.prompt), search, cfg.num_samples, new_tokens)
            for text in texts:
                print(text)
            result = {"prompt": cfg.prompt, "generations": texts}
            if cfg.attention_maps:
                folder = Path(cfg.out_dir) if cfg.out_dir else loaded.run_dir / "eval" / "prompt"
                result["attention_maps"] = [str(p) for p in write_self_attention_maps(loaded, texts[0], folder)]
                console.print(f"attention heatmaps: {folder}")
            return result
        overrides = OmegaConf.to_container(cfg.data, resolve=True)
        splits = evaluation_splits(cfg.split)
        results = {}
        for split in splits:
            out = Path(cfg.out_dir) / split if cfg.out_dir and len(splits) > 1 else cfg.out_dir
            results[split] = self.evaluate_split(loaded, split, overrides, out)
        return results[splits[0]] if len(splits) == 1 else results

    # ---- sweeps ----------------------------------------------------------------------------------
    def sweep_metrics(self, results: dict) -> dict:
        test, final = results.get("test") or {}, results.get("final_metrics") or {}
        return {
            "test_ppl": test.get("ppl"),
            "val_as_test_ppl": (results.get(FINAL_RESULTS["val"]) or {}).get("ppl"),
            "best_val_ppl": results.get("best_val_ppl"),
            "final_val_ppl": final.get("val_ppl"),
            "final_val_loss": final.get("val_loss"),
        }


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


@torch.no_grad()
def generate(
    loaded, prompt: str, search: SearchConfig, num_samples: int = 1, max_new_tokens: int = NEW_TOKENS
) -> list[str]:
    """Continuations of ``prompt`` (up to the end of its sentence or ``max_new_tokens`` words), each
    returned with the prompt in front: greedy and beam give one, sampling ``num_samples``, ranked by their
    log-probability (:func:`continue_prompt`: the same as ``translate.py`` gives for the prompt as its line 1)."""
    vocab = loaded.tgt_tokenizer
    ids = vocab.encode(prompt)
    unknown = vocab.unknown_text(prompt)
    if unknown:
        console.print(f"[yellow]prompt text outside the vocabulary, read as <unk>: {'; '.join(unknown)}")
    kept, found = continue_prompt(loaded.model, ids, search, num_samples if search.samples else 1, max_new_tokens)
    if len(kept) < len(ids):
        console.print(
            f"[yellow]the continuation follows the prompt's last {len(kept)} words: the model's position table "
            "holds no more"
        )
    return [" ".join(filter(None, (prompt.strip(), vocab.decode(c.ids)))) for c in found]


@torch.no_grad()
def write_self_attention_maps(loaded, text: str, folder: Path) -> list[Path]:
    """Heatmaps of how each word of ``text`` (a prompt and its continuation) attended to the words
    before it, per layer and head."""
    from nmt.utils.plots import save_attention_maps  # matplotlib: only where maps are drawn, not every run

    vocab = loaded.tgt_tokenizer
    ids = [EOS_ID, *vocab.encode(text)]
    tokens = torch.tensor([ids], device=next(loaded.model.parameters()).device)
    maps = {name: weights[0] for name, weights in loaded.model.attention_maps(tokens).items()}
    labels = ["</s>", *vocab.pieces(ids[1:])]
    return save_attention_maps(
        maps, labels, labels, folder, "self_attention", ("earlier piece (attended to)", "piece predicting the next")
    )
