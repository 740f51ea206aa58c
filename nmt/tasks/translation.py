"""Translation: a parallel corpus, teacher-forced training of an encoder-decoder, and BLEU / chrF (ROUGE
on request) of decoded sentences in validation and test."""

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf
from torch import nn

from nmt.data.datamodule import ParallelDataModule
from nmt.data.overlap import shared_with_training
from nmt.data.report import leaks
from nmt.data.text_io import decode_lines, read_lines, tabbed_line
from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, content_hash
from nmt.decoding.search import decode
from nmt.decoding.settings import SAMPLED, SearchConfig, search_problems, search_settings
from nmt.decoding.translate import input_limit, input_limit_for, translate_lines
from nmt.metrics.corpus import ROUGE_KEYS, bleu_tokenizer, corpus_scores, rouge_metric, tokenized_lowercase_signature
from nmt.metrics.score_jobs import ScoreJobs
from nmt.metrics.validation_scores import ScoreSpec
from nmt.tasks.base import (
    FINAL_RESULTS,
    Task,
    best_logged,
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
from nmt.tasks.translation_eval import (
    broken_characters,
    check_attention_indices,
    columns_tag,
    eval_folder_name,
    length_warning,
    load_eval_set,
    print_scores,
    print_summary,
    set_name,
    split_tag,
    swapped_sides,
    tsv_columns,
    write_attention_maps,
    write_outputs,
)
from nmt.utils.io import atomic_write_json, atomic_write_text, check_output_file

log = logging.getLogger(__name__)


def seen_in_training(loaded, split: str, sources, references) -> dict | None:
    """How many of the set's sources and references the training text holds (the run folder's hashes), with
    a warning where that is a large share, as the data report warns of the corpus's own sets; None, with a
    note for a set beyond the corpus's own, where the run folder keeps no hashes."""
    seen = shared_with_training(loaded.run_dir, sources, references)
    if seen is None:
        if split not in ("train", "val", "test"):  # the corpus's own: the data report at training counted them
            print(
                f"note: {loaded.run_dir} keeps no hashes of its training sentences (a run trained before they were "
                f"kept, or a checkpoint away from its folder): whether {split} repeats training text is not checked",
                file=sys.stderr,
            )
        return None
    if split != "train":  # the training text itself: every sentence is there, as asked
        for line in leaks({split: {"pairs": len(sources), **seen}}):
            print(line, file=sys.stderr)
    return seen


class TranslationTask(Task):
    """Sentence pairs; validation reports loss, perplexity and token accuracy of the references, and every
    ``bleu_every_n_epochs`` epochs BLEU, chrF and the lowercased tokenised BLEU (and ROUGE with ``rouge``) of
    greedy/beam outputs."""

    name = "translation"
    report_metric = "test_bleu"
    decoded_metrics = ("val_bleu", "val_chrf", "val_bleu_tok_lc", *(f"val_{key}" for key in ROUGE_KEYS))
    #: what it logs at every validation (and training), decoding or not; a subclass adds its own such scores
    #: here, and its scores logged on decoded epochs alone to decoded_metrics (the config check holds it to that)
    every_epoch_metrics = frozenset({"val_loss", "val_ppl", "val_acc", "train_loss"})
    evaluation_options = frozenset({"input", "output", "max_input_len", "rouge", "samples", "data.columns"})
    instead_of = {
        "prompt": "it maps a source to an output: give the source as input=... (a file, or - for standard input)",
        "max_new_tokens": "its output ends at the end token or at decode.max_len_a x source length + max_len_b",
        "num_samples": "several outputs a sentence: translate.py n_best=N, with beam search or sampling",
    }

    def __init__(
        self,
        val_search: dict | None = None,
        bleu_every_n_epochs: int = 1,
        rouge: bool = False,
        scores_in: str | None = None,
    ) -> None:
        self.scoring = ScoreJobs(scores_in)
        val_search = val_search or {"strategy": "greedy"}
        problems = search_problems(val_search, "validation.search")  # SearchConfig's own would name decode
        if problems:
            raise ValueError(problems[0])
        self.val_search = SearchConfig(**val_search)
        self.bleu_every_n_epochs = int(bleu_every_n_epochs)
        self.rouge = bool(rouge)
        self.val_samples: list[tuple[str, str, str]] = []

    # ---- configuration ---------------------------------------------------------------------------
    def check(self, cfg: DictConfig) -> list[str]:
        problems = []
        # a subclass's score logged on decoded epochs alone, left out of decoded_metrics: a checkpoint monitoring it
        # failed after the first epoch that did not decode, in Lightning's words, not the config check's
        undeclared = sorted(self.validation_metric_names() - self.every_epoch_metrics - set(self.decoded_metrics))
        if undeclared:
            them = "it" if len(undeclared) == 1 else "them"
            problems.append(
                f"  task={self.name}: {', '.join(undeclared)} {'is' if len(undeclared) == 1 else 'are'} in neither "
                f"decoded_metrics (logged on epochs that decode: validation.bleu_every_n_epochs) nor "
                f"every_epoch_metrics (logged at every validation): add {them} to the one that holds"
            )
        if decoder_only(cfg.get("model")):
            problems.append(f"  task={self.name} cannot train {model_named(cfg.model)}: use {model_options(False)}")
        data = OmegaConf.select(cfg, "data._target_", default=None)
        if data is not None and not issubclass(get_class(data), ParallelDataModule):
            problems.append(
                f"  task={self.name} cannot read {data}: use a parallel corpus (multi30k, zh_en, files, ...)"
            )
        final = [key for key in ("val_after_training", "test_after_training") if cfg.get(key)]
        search = cfg.get("decode") or {}
        if final and search.get("strategy") in SAMPLED and search.get("seed") is None:
            # as evaluate.py refuses it: scores of draws that cannot be drawn again
            problems.append(
                f"  decode.strategy={search.get('strategy')} without decode.seed: {'/'.join(final)}=true would "
                "score draws that cannot be drawn again; give decode.seed=N"
            )
        scores_in = OmegaConf.select(cfg, "validation.scores_in", default=None)
        every = OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1)
        if scores_in is not None and not every:
            problems.append(
                f"  validation.scores_in={scores_in}: where decoded validation sentences are scored, and "
                f"validation.bleu_every_n_epochs={every} decodes none; leave it null, or decode"
            )
        return problems

    def validation_metric_names(self) -> set[str]:
        rouge = {f"val_{key}" for key in ROUGE_KEYS} if self.rouge else set()
        return {*self.every_epoch_metrics, "val_bleu", "val_chrf", "val_bleu_tok_lc", *rouge}

    def check_evaluation(self, cfg: DictConfig) -> None:
        super().check_evaluation(cfg)
        if cfg.get("output") is not None and cfg.get("input") is None:
            raise ValueError(
                f"output={cfg.output}: where the translations of input= go; a split's hypotheses and scores go to "
                "out_dir (default: <run folder>/eval/<split>_<search>)"
            )
        if cfg.get("output") not in (None, "-"):
            check_output_file("output", cfg.output, {"input": cfg.get("input")})
        if cfg.get("input") is not None:  # translations only: what scores a split would be ignored
            given = {
                "split": cfg.get("split") is not None,
                "out_dir": cfg.get("out_dir") is not None,
                "attention_maps": bool(cfg.get("attention_maps")),
                "rouge": cfg.get("rouge") is not None,
                "samples": cfg.get("samples", 5) != 5,  # evaluate.yaml's default: the scored split's printed
            }
            # the data options say where a split's corpus is and how a TSV's fields are read: input= reads
            # plain lines (data.columns=[1,0] left whole TSV lines translated)
            data = OmegaConf.to_container(cfg.get("data") or OmegaConf.create(), resolve=True)
            given.update({f"data.{key}": value is not None for key, value in data.items()})
            for key in (key for key, set_ in given.items() if set_):
                raise ValueError(
                    f"{key}={OmegaConf.select(cfg, key)} with input={cfg.input}: input= translates a file of plain "
                    f"lines (output= says where to), and {key} belongs to scoring a split; drop one of them"
                )
        samples = cfg.get("samples", 5)
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"samples={samples!r}: the sample translations printed, a whole number >= 0 (0: none)")
        search = cfg.get("decode") or {}
        strategy = search.get("strategy")
        if cfg.get("input") is None and strategy in SAMPLED and search.get("seed") is None:
            # each call drew other outputs into one folder (eval/<split>_<strategy>), over the last call's score
            raise ValueError(
                f"decode.strategy={strategy} without decode.seed: a split's score from draws that cannot be "
                f"drawn again; give decode.seed=N (the folder's name then ends in _seedN)"
            )

    # ---- training --------------------------------------------------------------------------------
    def training_loss(self, model, loss, batch):
        logits = model(batch["src"], batch["tgt_in"])  # (batch, tgt_len, vocab)
        value, _, tokens = loss(logits, batch["tgt_out"])
        return value, tokens

    def validation_metrics(self, datamodule) -> nn.ModuleDict:
        # the test's scorers, batch by batch; a model that writes lowercase text
        # (data.tokenizer.normalization=lowercase) is scored ignoring case
        scored = self.scoring.prepare(ScoreSpec(datamodule.tgt_lang, datamodule.build_tokenizers()[1].lowercases))
        self.tok_lc_signature = tokenized_lowercase_signature(datamodule.tgt_lang)  # results.json says which
        metrics = nn.ModuleDict({**target_metrics(), **scored})
        if self.rouge:  # summarisation: ROUGE-1/2/L F-measures of the decoded validation set
            metrics["rouge"] = rouge_metric()
        return metrics

    def decodes_now(self, module) -> bool:
        """Every ``bleu_every_n_epochs`` epochs, and when the weights after the last update are validated
        (a run stopped by max_steps between two decoded epochs)."""
        if self.bleu_every_n_epochs <= 0:
            return False
        return getattr(module, "final_validation", False) or (module.current_epoch + 1) % self.bleu_every_n_epochs == 0

    def validation_step(self, module, batch, batch_idx):
        metrics = module.val_metrics
        logits = module.model(batch["src"], batch["tgt_in"])
        _, nll, tokens = module.loss(logits, batch["tgt_out"])
        update_target_metrics(metrics, logits, batch["tgt_out"], nll, tokens)
        if batch_idx == 0 and hasattr(module.model, "cross_attention_entropy"):
            # how spread the decoder's attention over the source is, on the first batch: pinned at the even
            # level, the decoder reads only the mean of the encoder's states (a stalled run)
            entropies, even = module.model.cross_attention_entropy(batch["src"], batch["tgt_in"])
            self.cross_attention = (entropies.mean(), even)
        if not self.decodes_now(module):
            return
        # decoded as evaluate.py decodes, in the weights' own precision: the score is the one evaluate.py
        # gives these weights, and no step casts the weights again (a mixed-precision run's autocast, which
        # Lightning creates without its cache of cast weights, cast every weight anew at every step)
        with torch.autocast(batch["src"].device.type, enabled=False):
            outputs = decode(module.model, batch["src"], BOS_ID, EOS_ID, self.val_search)
        hypotheses = [module.tgt_tokenizer.decode(ids) for ids in outputs]
        # scored beside the next batches' decoding (a worker thread on a CPU, a worker process on a GPU); the
        # sums reach the metrics at the epoch's end
        self.scoring.submit(batch["src"].device, hypotheses, list(batch["refs"]))
        self.update_decoded_metrics(metrics, hypotheses, list(batch["refs"]))
        if batch_idx == 0:
            sources = [module.src_tokenizer.decode(s.tolist()) for s in batch["src"][:3]]
            self.val_samples = list(zip(sources, batch["refs"][:3], hypotheses[:3], strict=True))

    def update_decoded_metrics(self, metrics, hypotheses: list[str], references: list[str]) -> None:
        """A decoded validation batch's outputs given to the metrics a task adds to BLEU and chrF (ROUGE
        here; a subclass adds its own and calls this)."""
        if "rouge" in metrics:
            metrics["rouge"].update(hypotheses, references)

    def log_decoded_metrics(self, module, metrics) -> None:
        """The epoch's values of the metrics :meth:`update_decoded_metrics` fed, logged on decoded epochs."""
        if "rouge" in metrics:
            scores = metrics["rouge"].compute()
            for key in ROUGE_KEYS:
                module.log(f"val_{key}", scores[f"{key}_fmeasure"] * 100)

    def extra_scores(self, hypotheses: list[str], references: list[str]) -> dict:
        """Scores a subclass adds to every evaluation of a split (metrics.json, results.json, the printed
        table, whose rows ``score_rows`` names): none for translation."""
        return {}

    #: (key of extra_scores, its label) for the printed tables
    score_rows: tuple[tuple[str, str], ...] = ()

    def start_workers(self, module) -> None:
        # a worker process is started before the sanity check, so that it has imported and built its scorers
        # by the first decoded batch
        if self.bleu_every_n_epochs > 0:
            self.scoring.start(module.device)

    def stop_workers(self, module) -> None:
        self.scoring.stop()

    def validation_epoch_end(self, module):
        metrics = module.val_metrics
        self.scoring.collect(metrics)
        log_target_metrics(module, metrics)
        spread, self.cross_attention = getattr(self, "cross_attention", None), None
        if spread is not None and not module.trainer.sanity_checking:
            module.log("val_cross_attn_entropy", spread[0])
            module.log("val_cross_attn_even", spread[1])
        if self.decodes_now(module) and not module.trainer.sanity_checking:
            module.log("val_bleu", metrics["bleu"].compute() * 100, prog_bar=True)
            module.log("val_chrf", metrics["chrf"].compute() * 100)
            module.log("val_bleu_tok_lc", metrics["bleu_tok_lc"].compute() * 100)
            self.log_decoded_metrics(module, metrics)
            for logger in module.loggers:
                if hasattr(logger, "log_text") and self.val_samples:  # W&B: a table of sample translations
                    rows = [
                        [getattr(module, "validation_epoch", module.current_epoch), *sample]
                        for sample in self.val_samples
                    ]
                    logger.log_text("val_samples", columns=["epoch", "source", "reference", "hypothesis"], data=rows)

    def batch_sequences(self, batch):
        return batch["src"].size(0)

    def batch_target_tokens(self, batch):
        if "target_tokens" in batch:  # counted by the collate function: no wait for the device
            return batch["target_tokens"]
        return int((batch["tgt_out"] != PAD_ID).sum())

    # ---- evaluation ------------------------------------------------------------------------------
    def evaluate_split(
        self,
        loaded,
        split: str = "test",
        search: SearchConfig | None = None,
        data_overrides: dict | None = None,
        max_tokens: int = 6000,
        out: Path | None = None,
        samples: int = 5,
        attention_maps=(),
        rouge: bool | None = None,
        prepared: tuple | None = None,
        max_input_len: int | None = None,
        own: bool = False,
    ) -> dict:
        """Decode a split of the checkpoint's corpus (or another evaluation set), score it, write the
        hypotheses and metrics into ``out``, print a table. ROUGE when ``rouge`` (None: as the run).
        ``prepared``: the set as ``_eval_set`` read it already. ``max_input_len``: sources longer than it
        are truncated (None: as the run's data, :func:`input_limit`). ``own``: ``out`` is the run's own folder of
        these settings (its final scores), not a chosen out_dir (:mod:`nmt.tasks.eval_folders`)."""
        search = search or SearchConfig()
        datamodule, data_cfg, (sources, references, description) = prepared or self._eval_set(
            loaded, split, data_overrides
        )
        bleu_tokenizer(datamodule.tgt_lang)  # a scorer's missing package stops here, not after the decoding
        check_attention_indices(attention_maps, len(sources))  # and a sentence the set lacks
        seen = seen_in_training(loaded, split, sources, references)
        requested = max_input_len or input_limit(data_cfg)
        # recorded as applied (a learned table's size); said where the limit was given, not for the default
        max_input_len = input_limit_for(loaded.model, requested, warn=max_input_len is not None)
        rouge = self.rouge if rouge is None else rouge
        given_columns = (data_overrides or {}).get("columns")
        own_columns = (loaded.config.get("data") or {}).get("columns")
        name = eval_folder_name(loaded, split, search) + columns_tag(split, data_cfg, given_columns, own_columns)
        # sources cut elsewhere than the run's own data settings cut them: a folder of its own
        if requested != input_limit(loaded.config.get("data") or {}):
            name += f"_maxin{max_input_len}"
        if rouge != self.rouge:  # other scores than the run's own (rouge=false dropped a summariser's ROUGE there)
            name += "_rouge" if rouge else "_norouge"
        identity = {
            "checkpoints": loaded.checkpoints,
            "weights": loaded.weights,  # each checkpoint's update and checksum: a run continued since, told apart
            "data": description,
            "split": split,
            "tgt_lang": datamodule.tgt_lang,  # what the scores tokenised by (rescoring, paired tests)
            **({"columns": list(read)} if (read := tsv_columns(split, data_cfg, given_columns)) else {}),
            "search": search.__dict__,
            "max_input_len": max_input_len,
            "rouge": rouge,  # whether ROUGE was scored (an out_dir's ROUGE was lost to a rerun without it)
            # of the sources and references scored: an edited file's evaluation never replaces it
            "text": content_hash("evaluation set", lines=[*sources, *references]),
        }
        # out_dir: taken as it is (its files recorded by absolute paths, as the run's own folders are)
        folder = Path(out).expanduser().absolute() if out else loaded.run_dir / "eval" / name
        out, code = evaluation_folder(folder, bool(out) and not own, loaded.run_dir, identity)  # before decoding
        hypotheses = translate_lines(
            loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, sources, search, max_tokens, max_input_len, True
        )
        lowercase = loaded.tgt_tokenizer.lowercases
        scores = corpus_scores(hypotheses, references, datamodule.tgt_lang, rouge=rouge, lowercase=lowercase)
        scores.update(self.extra_scores(hypotheses, references))
        if said := length_warning(split, scores["length_ratio"], search, sum(len(r.split()) for r in references)):
            log.warning(said)
        if said := broken_characters(split, hypotheses, references):
            log.warning(said)
        result = {
            **identity,
            "code": code,  # the hash of the code that decoded and scored (nmt.utils.code)
            **({"also_in_train": seen} if seen is not None else {}),
            **scores,
            **write_outputs(out, sources, references, hypotheses),
        }
        folder = out / "attention"
        for stale in folder.glob("sentence*_*.png"):  # an earlier evaluation's maps: not of these hypotheses
            stale.unlink()
        if attention_maps:
            paths = write_attention_maps(loaded, sources, hypotheses, attention_maps, folder)
            result["attention_maps"] = [str(p) for p in paths]
        atomic_write_json(out / "metrics.json", result)
        print_scores(result, sources, references, hypotheses, samples, self.score_rows)
        return result

    def _eval_set(self, loaded, split: str, data_overrides: dict | None):
        """(data module, data config, (sources, references, description)) of an evaluation set, checked."""
        # data.columns also reads a split=files: TSV, whatever the run's corpus
        overrides = dict(data_overrides or {})
        if split.startswith("files:"):  # read by load_eval_set alone: the run's own data module keeps its own
            overrides.pop("columns", None)
        data_cfg = evaluation_data_config(loaded, overrides, elsewhere=("columns",))
        datamodule = self.build_datamodule(data_cfg, loaded.config["cache_dir"], loaded.config["seed"])
        columns = (data_overrides or {}).get("columns")
        found = load_eval_set(split, datamodule, data_cfg, loaded.config, self, columns)
        if not found[0]:  # said before decoding, not by sacreBLEU's IndexError after it
            raise ValueError(f"split={split}: the set holds no sentence ({found[2]}); give one that does")
        if split in ("train", "val", "test"):
            check_split_text(loaded, datamodule, split, "or score other text with split=files:<prefix>")
        elif split.startswith("files:") and (
            said := swapped_sides(
                split, *found[:2], datamodule.src_lang, datamodule.tgt_lang, tsv_columns(split, data_cfg, columns)
            )
        ):
            log.warning(said)
        return datamodule, data_cfg, found

    def final_tag(self, cfg, split, average_last):
        return split_tag(split, SearchConfig(**cfg.decode), average_last)  # best.ckpt, the run's own search

    def evaluation_folder(self, loaded, split, search):
        return eval_folder_name(loaded, split, search)

    def final_score(self, loaded, cfg, split, out_dir, attention_maps=()):
        return self.evaluate_split(
            loaded, split, SearchConfig(**cfg.decode), out=out_dir, attention_maps=attention_maps, own=True
        )

    def evaluate(self, cfg: DictConfig, load: Callable[[], object]) -> dict:
        """Score ``split`` (one or a list), or translate ``input`` (a file, or "-" for standard input)."""
        loaded = load()
        search = search_settings(loaded.config.get("decode"), OmegaConf.to_container(cfg.decode, resolve=True))
        if cfg.input is not None:
            return self._translate_input(cfg, loaded, search)
        overrides = OmegaConf.to_container(cfg.data, resolve=True)
        splits = evaluation_splits(cfg.split)
        # every set found and read before the first is decoded (a missing one came after it), and read once
        prepared = {split: self._eval_set(loaded, split, overrides) for split in splits} if len(splits) > 1 else {}
        for _, _, (sources, _, _) in prepared.values():  # an index one of the sets lacks, before any is decoded
            check_attention_indices(list(cfg.attention_maps), len(sources))
        results = {}
        for split in splits:
            out = cfg.out_dir
            if out and len(splits) > 1:  # one sub-folder per set
                out = str(Path(out) / set_name(split))  # two paths that flatten alike: two folders
            results[split] = self.evaluate_split(
                loaded,
                split,
                search,
                overrides,
                cfg.max_tokens,
                Path(out) if out else None,
                cfg.samples,
                list(cfg.attention_maps),
                cfg.get("rouge"),
                prepared.get(split),
                cfg.get("max_input_len"),
            )
        if len(splits) == 1:
            return results[splits[0]]
        print_summary(results, self.score_rows)
        return results

    def _translate_input(self, cfg, loaded, search: SearchConfig) -> dict:
        lines = decode_lines(sys.stdin.buffer, "<stdin>") if cfg.input == "-" else read_lines(cfg.input)
        if problem := tabbed_line(lines):
            raise ValueError(f"input={cfg.input}, {problem}")
        translations = translate_lines(
            loaded.model,
            loaded.src_tokenizer,
            loaded.tgt_tokenizer,
            lines,
            search,
            cfg.max_tokens,
            cfg.get("max_input_len") or input_limit(loaded.config["data"]),
            progress=cfg.input != "-",  # a file: a bar on the terminal; standard input: nothing but translations
        )
        text = "".join(t + "\n" for t in translations)
        if cfg.output in (None, "-"):
            sys.stdout.write(text)
            sys.stdout.flush()  # here, where a full disk is said, not in the interpreter's last flush
        else:
            atomic_write_text(cfg.output, text)
            print(f"{len(translations)} translations written to {cfg.output}", file=sys.stderr)
        return {"translations": len(translations), "output": cfg.output or "-"}

    def results_from_log(self, csv_log: Path) -> dict:
        # the measure cased and lowercase runs share, at its best over the run
        best = best_logged(csv_log, "val_bleu_tok_lc")
        if best is None:
            return {}
        signature = getattr(self, "tok_lc_signature", None)  # set where validation's scorers are built
        return {"best_val_bleu_tok_lc": best, **({"bleu_tok_lc_signature": signature} if signature else {})}

    # ---- sweeps ----------------------------------------------------------------------------------
    def sweep_metrics(self, results: dict) -> dict:
        test, final = results.get("test") or {}, results.get("final_metrics") or {}
        val = results.get(FINAL_RESULTS["val"]) or {}
        return {
            "test_bleu": test.get("bleu"),
            "test_chrf": test.get("chrf"),
            "test_bleu_tok_lc": test.get("bleu_tok_lc"),
            # the final model and search on the validation set: what to choose a recipe by
            "val_as_test_bleu": val.get("bleu"),
            "val_as_test_chrf": val.get("chrf"),
            "val_as_test_bleu_tok_lc": val.get("bleu_tok_lc"),
            "best_val_bleu": results.get("best_val_bleu"),
            "best_val_bleu_tok_lc": results.get("best_val_bleu_tok_lc"),  # comparable across cased and lowercase
            "final_val_bleu": final.get("val_bleu"),
            "final_val_loss": final.get("val_loss"),
        }
