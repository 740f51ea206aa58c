"""What one sitting of a run builds before it trains, in the order that refuses a bad option soonest: the
torch settings, everything that can reject an option (before any data is read), the checkpoint it resumes
and whose it is, then the data and its checks against the folder's record, the tokenizers, the model and
Lightning's objects; and the run folder's files that make it self-contained."""

import dataclasses
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from nmt.data.overlap import save_training_sentences
from nmt.data.report import write_report
from nmt.data.tokenizer import PAD_ID
from nmt.metrics.corpus import unknown_language_note
from nmt.models.build import count_parameters
from nmt.training.compile import compile_model
from nmt.training.final import mark_evaluations
from nmt.training.loggers import WANDB_ID
from nmt.training.module import TaskModule
from nmt.training.resume import (
    check_checkpoint_elsewhere,
    check_checkpoint_task,
    check_weights_fit,
    global_step,
    resolve_resume,
)
from nmt.training.run_description import describe_recipe, logged_config
from nmt.training.run_folder import RunFolderError
from nmt.training.run_identity import (
    check_data,
    comparable_data,
    data_differences,
    data_identity,
    moved_without_text,
    record_identity,
    saved_data_record,
)
from nmt.training.trainer import build_trainer
from nmt.utils.instantiate import instantiate
from nmt.utils.io import atomic_write_bytes, atomic_write_text


@dataclasses.dataclass
class Sitting:
    """What one sitting of a run builds before it trains: everything that can reject an option, built before
    any data is read, then the data, the tokenizers, the model and Lightning's objects."""

    datamodule: object
    module: TaskModule
    trainer: L.Trainer
    checkpoint_dir: Path
    resume: str | None  # the checkpoint this sitting continues, if any
    resumed_from: int | None  # its update
    elsewhere: bool  # a checkpoint of another folder (ckpt_path=...), not this run's own


def build_sitting(cfg: DictConfig, task, run_dir: Path, config: dict, identity: dict, main_process: bool) -> Sitting:
    """Everything a sitting of the run in ``run_dir`` trains with. ``identity``: the run's record, to which a
    continuation under other settings or data (resume=force) is added, and which is written with its data's
    identity; ``main_process``: the process that owns the folder (it checks, prints and writes)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")
    # set at every run (not only when false), so that one run's choice never carries into the next in a process
    torch.backends.cuda.enable_cudnn_sdp(cfg.get("cudnn_attention") is not False)
    # everything that can reject an option is built before any data is read
    datamodule = task.build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    loss = instantiate(cfg.smoothing, pad_id=PAD_ID)
    checkpoint_dir = run_dir / "checkpoints"
    resume = resolve_resume(cfg, checkpoint_dir)
    # read now: the run's own last.ckpt is rewritten as it trains
    resumed_from = max(global_step(Path(resume)), 0) if resume is not None else None
    if resumed_from is not None and main_process:  # evaluations of the weights so far: set aside if it goes on
        mark_evaluations(run_dir, resumed_from)
    if resume is None and main_process:  # trained afresh (an attempt killed before its first checkpoint): a
        (run_dir / WANDB_ID).unlink(missing_ok=True)  # W&B run of its own, not the attempt's steps again
    elsewhere = resume is not None and Path(resume).resolve().parent not in (
        checkpoint_dir.resolve(),
        run_dir.resolve(),
    )
    if elsewhere:  # its own folder's checkpoints are of this run: its fingerprint was checked
        check_checkpoint_task(resume, task)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule.prepare_data()
    src_tokenizer, tgt_tokenizer = datamodule.build_tokenizers()
    force = str(cfg.get("resume", "auto")) == "force"
    if elsewhere:
        changed = check_checkpoint_elsewhere(resume, identity, force, src_tokenizer, tgt_tokenizer)
        if changed and main_process:
            print(f"warning: resume=force: continuing {resume} under other settings ({'; '.join(changed)})")
            _add_forced(identity, {"changed": changed, "from_step": global_step(Path(resume)), "from": resume})
    data_report = datamodule.report() if main_process else None
    if main_process:
        check_evaluation_sets(cfg, datamodule, data_report)
    asked = OmegaConf.select(cfg, "data.tokenizer.vocab_size", default=None)
    sizes = sorted({src_tokenizer.vocab_size, tgt_tokenizer.vocab_size})
    if main_process and isinstance(asked, int) and sizes[0] < asked:  # SentencePiece stops where the text does
        print(
            f"note: data.tokenizer.vocab_size={asked}: the training text supports fewer pieces; the vocabularies "
            f"have {' and '.join(map(str, sizes))}"
        )
    text_hashes = datamodule.text_hashes()
    if main_process:  # the data too must be the data the folder's run was trained on
        data = data_identity(datamodule.describe(), data_report, text_hashes, src_tokenizer, tgt_tokenizer)
        _check_and_record_data(run_dir, config, identity, data, resume, force)
    model = task.build_model(cfg.model, src_tokenizer, tgt_tokenizer)
    if resume is not None:
        check_weights_fit(resume, model)
    compile_model(model, cfg.get("compile"), loss)
    module = TaskModule(
        task=task,
        model=model,
        loss=loss,
        optimizer=instantiate(cfg.optim.optimizer),
        scheduler=instantiate(cfg.optim.scheduler) if cfg.optim.scheduler else None,
        src_tokenizer=src_tokenizer,
        tgt_tokenizer=tgt_tokenizer,
        config=config,
        val_metrics=task.validation_metrics(datamodule),
        max_bad_steps=cfg.max_bad_steps,
        check_every=cfg.get("check_every") or 1,
        graph_updates=bool(cfg.get("graph_updates")),
        cast_weights_once=cfg.get("cast_weights_once"),
    )
    module.data_text = text_hashes
    trainer = build_trainer(cfg, run_dir, task)
    if trainer.is_global_zero:
        _describe_run(cfg, run_dir, datamodule, model)
        _write_run_files(run_dir, config, datamodule, data_report, src_tokenizer, tgt_tokenizer)
    if resume:
        if main_process:
            print(f"Resuming from {resume}")
    for logger in trainer.loggers:
        logger.log_hyperparams(logged_config(cfg, config))
    return Sitting(datamodule, module, trainer, checkpoint_dir, resume, resumed_from, elsewhere)


def check_evaluation_sets(cfg: DictConfig, datamodule, report: dict) -> None:
    """An empty validation set where the run validates (the best checkpoint, early stopping), or an empty
    test set where it scores one: said now, not after training (a seeded test_size=0 is held to
    test_after_training=false by the config check)."""
    validates = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None) not in (0, 0.0)
    for split, needed in (("val", validates), ("test", bool(cfg.get("test_after_training")))):
        counts = report.get(split) or {}
        pairs, empty = counts.get("pairs"), (counts.get("dropped") or {}).get("empty_kept", 0)
        if needed and (pairs == 0 or (pairs is not None and pairs == empty)):
            what = "no pair" if pairs == 0 else f"{pairs} pair(s), each with an empty side, and no other"
            official = getattr(datamodule, "official", None)
            if pairs == 0 and official is not None and not official(split):  # split off the training pairs
                raise ValueError(
                    f"data: the {split} set of {datamodule.describe()} has no pair: the seeded split found no group of "
                    "pairs to take (pairs that share a source or a target go to one split whole: docs/data.md, "
                    f"'Splits'); give the {split} set as files (data=files: data.{split}=...)"
                )
            raise ValueError(
                f"data: the {split} set of {datamodule.describe()} has {what}: give one that holds sentences "
                f"(data=files: data.{split})"
            )


def _add_forced(identity: dict, forced: dict) -> None:
    """On the run's record: it went on under other settings or data (resume=force) from ``forced["from_step"]``;
    a rerun from the same place is the same record, kept once."""
    if forced not in identity.get("forced", []):
        identity["forced"] = [*identity.get("forced", []), forced]


def _check_and_record_data(
    run_dir: Path, config: dict, identity: dict, data: dict, resume: str | None, force: bool
) -> None:
    """The run's data compared with the data the folder's run was trained on (refused unless resume=force,
    which goes on record), then the run's identity written with it."""
    identity["data"] = data
    saved_data = saved_data_record(run_dir)
    moved = [] if saved_data.get("text") else moved_without_text(run_dir, config)
    if moved and resume is not None and not force:  # no text recorded to compare: its paths decide
        raise RunFolderError(
            f"{run_dir} holds a run trained on other files ({'; '.join(moved)}), recorded before text was "
            "compared; choose another run_dir, or pass resume=force to continue it anyway"
        )
    warning = check_data(run_dir, identity, force, resuming=resume is not None)
    if warning:
        print(warning)
        # on record as a setting's change is: the folder's run continued on other data (an edited validation
        # file, whose scores the best checkpoint and early stopping then compared)
        step = global_step(Path(resume)) if resume is not None else 0
        _add_forced(identity, {"changed": data_differences(*comparable_data(saved_data, data)), "from_step": step})
    record_identity(run_dir, identity)


def _describe_run(cfg: DictConfig, run_dir: Path, datamodule, model) -> None:
    """The run's header: its folder, its recipe, its data, how each side is cut into words before SentencePiece
    (a jieba user dictionary or segmenter=none otherwise showed only in config.yaml), and its size."""
    print(f"Run directory: {run_dir}")
    print(describe_recipe(cfg))
    segmenters = getattr(datamodule, "segmenters", None) or {}
    cut = [
        f"{lang} by {seg.name}"
        + (" with a user dictionary" if seg.name.startswith("jieba") and (seg.user_dict or seg.user_words) else "")
        for lang, seg in segmenters.items()
        if seg.name != "none"
    ]
    said = f"; words: {', '.join(cut)}" if cut else ""
    print(f"Data: {datamodule.describe()}{said}; model: {count_parameters(model):,} parameters")
    note = unknown_language_note("data.tgt_lang", OmegaConf.select(cfg, "data.tgt_lang", default=""))
    if note:
        print(note)


def _write_run_files(run_dir: Path, config: dict, datamodule, data_report, src_tokenizer, tgt_tokenizer) -> None:
    """What makes the run folder self-contained: its resolved config, its tokenizers, the data report, and the
    training sentences' hashes that evaluation checks later sets against."""
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
    atomic_write_bytes(run_dir / "tokenizers" / "src.model", src_tokenizer.model_proto)
    atomic_write_bytes(run_dir / "tokenizers" / "tgt.model", tgt_tokenizer.model_proto)
    write_report(data_report or datamodule.report(), datamodule.describe(), run_dir)
    if (sentences := datamodule.training_sentences()) is not None:  # for sets scored later
        settings = getattr(datamodule, "tokenizer_settings", None)
        save_training_sentences(run_dir, *sentences, getattr(settings, "normalization", None))
