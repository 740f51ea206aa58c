"""train(cfg): everything ``train.py`` does, as a plain function of the composed config."""

import json
import logging
import os
import time
import warnings
from datetime import datetime
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import (
    EarlyStopping,
    ModelCheckpoint,
    RichModelSummary,
    RichProgressBar,
    ThroughputMonitor,
)
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from nmt.build import build_datamodule, build_model, count_parameters, instantiate
from nmt.callbacks import ResumeLogs, SaveOnSignal, WallClock
from nmt.checkpoint import AtomicCheckpointIO, epoch_checkpoints
from nmt.config import check_config
from nmt.data.report import write_report
from nmt.data.tokenizer import PAD_ID, atomic_write_bytes
from nmt.lit import TranslationModule
from nmt.lit_lm import LanguageModelModule
from nmt.loggers import ResumableCSVLogger, log_results_to_wandb
from nmt.metrics import bleu_tokenizer
from nmt.search import SearchConfig

log = logging.getLogger(__name__)


def resolve_run_dir(cfg: DictConfig) -> Path:
    """run_dir if given; else the folder of a resumed checkpoint; else Hydra's output folder."""
    if cfg.run_dir:
        return Path(cfg.run_dir).expanduser().resolve()
    if cfg.ckpt_path and cfg.ckpt_path != "last":
        return Path(cfg.ckpt_path).expanduser().resolve().parent.parent
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    return Path("runs", str(cfg.name), datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()


def resolve_resume(cfg: DictConfig, checkpoint_dir: Path) -> str | None:
    """The checkpoint to resume from: ckpt_path if given ("last": the run's last.ckpt); otherwise the
    run directory's last.ckpt when there is one, so that rerunning a killed command continues it."""
    if not cfg.ckpt_path:
        last = checkpoint_dir / "last.ckpt"
        return str(last) if last.is_file() else None
    path = checkpoint_dir / "last.ckpt" if cfg.ckpt_path == "last" else Path(cfg.ckpt_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"ckpt_path={cfg.ckpt_path!r}: {path} does not exist (to resume, pass the "
            "run's checkpoints/last.ckpt, or run_dir=<that run> with ckpt_path=last)"
        )
    return str(path)


def _callbacks(cfg: DictConfig, checkpoint_dir: Path) -> list:
    decoded = cfg.checkpoint.monitor in ("val_bleu", "val_chrf") or cfg.checkpoint.monitor.startswith("val_rouge")
    every = cfg.validation.bleu_every_n_epochs if decoded else 1
    callbacks = [
        ModelCheckpoint(
            dirpath=checkpoint_dir,
            filename="best",
            monitor=cfg.checkpoint.monitor,
            mode=cfg.checkpoint.mode,
            save_top_k=1,
            every_n_epochs=max(every, 1),
            auto_insert_metric_name=False,
            enable_version_counter=False,
        ),
        # the most recent epochs, for resuming (last.ckpt) and for weight averaging
        ModelCheckpoint(
            dirpath=checkpoint_dir,
            filename="epoch{epoch:03d}",
            monitor="step",
            mode="max",
            save_top_k=cfg.checkpoint.keep_last_epochs,
            save_last=True,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        ),
    ]
    if cfg.checkpoint.every_n_train_steps:
        callbacks.append(
            ModelCheckpoint(
                dirpath=checkpoint_dir,
                save_top_k=0,
                save_last=True,
                every_n_train_steps=cfg.checkpoint.every_n_train_steps,
                enable_version_counter=False,
            )
        )
    if cfg.early_stopping.patience:
        callbacks.append(
            EarlyStopping(
                monitor=cfg.early_stopping.monitor,
                mode=cfg.early_stopping.mode,
                patience=cfg.early_stopping.patience,
                strict=False,
                check_on_train_epoch_end=False,
            )
        )
    callbacks.append(SaveOnSignal(checkpoint_dir / "last.ckpt"))
    callbacks.append(WallClock())
    callbacks.append(ResumeLogs())
    # logs train/device/items_per_sec: target tokens per second of training (the speed a sweep can afford);
    # it warns that without a FLOPs count per batch it cannot report MFU (we do not count FLOPs per batch)
    warnings.filterwarnings("ignore", message=".*ThroughputMonitor.*flops_per_batch")
    callbacks.append(ThroughputMonitor(batch_size_fn=batch_sentences, length_fn=batch_target_tokens, window_size=20))
    if cfg.trainer.enable_progress_bar:
        callbacks.append(RichProgressBar())
    if cfg.trainer.enable_model_summary:
        callbacks.append(RichModelSummary(max_depth=2))
    return callbacks


def batch_sentences(batch: dict) -> int:
    """Sequences in a batch: sentence pairs (translation) or windows (language modelling)."""
    return (batch["src"] if "src" in batch else batch["input"]).size(0)


def batch_target_tokens(batch: dict) -> int:
    return int(((batch["tgt_out"] if "tgt_out" in batch else batch["target"]) != PAD_ID).sum())


def _cpu_has_bf16_units() -> bool:
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private: absent from some builds
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(precision: str, accelerator: str = "auto") -> str:
    """``precision=auto``: bf16-mixed where the device multiplies bf16 matrices in hardware (a GPU with
    bf16, a CPU with AVX512-BF16 or AMX), otherwise 32-true (emulated bf16 is slower than fp32). Any other
    value is returned as given."""
    if str(precision) != "auto":
        return precision
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    if accelerator in ("auto", "cpu"):
        return "bf16-mixed" if _cpu_has_bf16_units() else "32-true"
    return "32-true"


def build_trainer(cfg: DictConfig, run_dir: Path) -> L.Trainer:
    # null means "Lightning's default", except for check_val_every_n_epoch where null means "count
    # val_check_interval in updates across epochs"
    trainer_args = {
        k: v
        for k, v in OmegaConf.to_container(cfg.trainer, resolve=True).items()
        if v is not None or k == "check_val_every_n_epoch"
    }
    logger = instantiate(cfg.logger, save_dir=str(run_dir))
    loggers = [logger]
    if not isinstance(logger, CSVLogger):  # curves for sweep reports, whatever the dashboard
        loggers.append(ResumableCSVLogger(str(run_dir), name="logs", version=""))
    return L.Trainer(
        **trainer_args,
        callbacks=_callbacks(cfg, run_dir / "checkpoints"),
        logger=loggers,
        default_root_dir=str(run_dir),
        use_distributed_sampler=False,  # our token-budget sampler shards batches across ranks itself
        plugins=[AtomicCheckpointIO()],
    )


def train(cfg: DictConfig) -> dict:
    """Train a model as ``cfg`` says, test its best checkpoint, and return the results (also written to
    <run_dir>/results.json)."""
    check_config(cfg)
    if str(cfg.trainer.precision) == "auto":  # the checkpoint's config records what was used
        cfg.trainer.precision = resolve_precision("auto", cfg.trainer.accelerator)
        log.info("trainer.precision=auto: %s", cfg.trainer.precision)
    language_model = cfg.get("task", "translation") == "lm"
    run_dir = resolve_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")
    config = OmegaConf.to_container(cfg, resolve=True)
    config["run_dir"] = str(run_dir)
    # everything that can reject an option is built before any data is read
    datamodule = build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    val_search = SearchConfig(**cfg.validation.search)
    test_search = SearchConfig(**cfg.decode)
    loss = instantiate(cfg.smoothing, pad_id=PAD_ID)
    checkpoint_dir = run_dir / "checkpoints"
    resume = resolve_resume(cfg, checkpoint_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule.prepare_data()
    src_tokenizer, tgt_tokenizer = datamodule.build_tokenizers()
    model = build_model(cfg.model, src_tokenizer.vocab_size, tgt_tokenizer.vocab_size)
    if cfg.get("compile"):
        # in place: parameter names (and so checkpoints) stay those of the plain model; dynamic shapes
        # because every batch has its own lengths
        model.compile(dynamic=True)
    common = dict(
        model=model,
        loss=loss,
        optimizer=instantiate(cfg.optim.optimizer),
        scheduler=instantiate(cfg.optim.scheduler) if cfg.optim.scheduler else None,
        src_tokenizer=src_tokenizer,
        tgt_tokenizer=tgt_tokenizer,
        config=config,
        max_bad_steps=cfg.max_bad_steps,
    )
    if language_model:
        module = LanguageModelModule(**common)
    else:
        module = TranslationModule(
            **common,
            val_search=val_search,
            bleu_every_n_epochs=cfg.validation.bleu_every_n_epochs,
            bleu_tokenize=bleu_tokenizer(datamodule.tgt_lang),
            rouge=bool(cfg.get("rouge")),
        )
    trainer = build_trainer(cfg, run_dir)
    if trainer.is_global_zero:
        print(f"Run directory: {run_dir}")
        print(f"Data: {datamodule.describe()}; model: {count_parameters(model):,} parameters")
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
        atomic_write_bytes(run_dir / "tokenizers" / "src.model", src_tokenizer.model_proto)
        atomic_write_bytes(run_dir / "tokenizers" / "tgt.model", tgt_tokenizer.model_proto)
        write_report(datamodule.report(), datamodule.describe(), run_dir)
    if resume:
        print(f"Resuming from {resume}")
    for logger in trainer.loggers:
        logger.log_hyperparams(config)
    start = time.time()
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
    except SIGTERMException:
        print(
            f"Stopped by a signal; the state is saved in {checkpoint_dir / 'last.ckpt'}. "
            "Run the same command again (or pass that file as ckpt_path) to resume."
        )
        raise SystemExit(143) from None

    best = trainer.checkpoint_callbacks[0]
    best_path = best.best_model_path or str(checkpoint_dir / "last.ckpt")
    results = {
        "run_dir": str(run_dir),
        "best_checkpoint": best_path,
        "best_" + cfg.checkpoint.monitor: _float(best.best_model_score),
        "epochs": trainer.current_epoch,
        "steps": trainer.global_step,
        "parameters": count_parameters(model),
        "wall_time_s": round(time.time() - start, 1),
        "final_metrics": {k: _float(v) for k, v in trainer.callback_metrics.items()},
    }
    if trainer.is_global_zero:
        # Lightning moves the module back to the CPU when fit ends: test on the device that trained
        device = str(trainer.strategy.root_device)
        average = _test_average(cfg, checkpoint_dir) if cfg.test_after_training else 0
        if average:
            print(f"Testing the average of the last {average} epoch checkpoints (test_average_last)")
        if cfg.test_after_training and Path(best_path).is_file() and language_model:
            from nmt.evaluation_lm import evaluate_lm_checkpoint

            results["test"] = evaluate_lm_checkpoint(best_path, split="test", average_last=average, device=device)
        elif cfg.test_after_training and Path(best_path).is_file():
            from nmt.evaluation import evaluate_checkpoint

            wandb = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
            results["test"] = evaluate_checkpoint(
                best_path,
                split="test",
                search=test_search,
                data_overrides={},
                average_last=average,
                device=device,
                attention_maps=[0] if wandb else (),
            )
            if wandb:
                log_results_to_wandb(wandb, results)
        tmp = run_dir / ".results.json.tmp"
        tmp.write_text(json.dumps(results, indent=2))
        os.replace(tmp, run_dir / "results.json")
        print(f"Results: {run_dir / 'results.json'}")
    return results


def _test_average(cfg: DictConfig, checkpoint_dir: Path) -> int:
    """How many epoch checkpoints the final test averages (0: test best.ckpt alone)."""
    wanted = int(cfg.get("test_average_last") or 0)
    if wanted <= 1:
        return 0
    found = len(epoch_checkpoints(checkpoint_dir))
    if found < 2:
        print(f"test_average_last={wanted}: only {found} epoch checkpoint(s); testing best.ckpt alone")
        return 0
    return min(wanted, found)


def _float(value) -> float | None:
    if value is None:
        return None
    return float(value.item() if isinstance(value, torch.Tensor) else value)
