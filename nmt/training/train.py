"""train(cfg): everything ``train.py`` does, as a plain function of the composed config."""

import logging
import time
from datetime import datetime
from pathlib import Path

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from nmt.data.report import write_report
from nmt.data.tokenizer import PAD_ID
from nmt.inference.checkpoint import epoch_checkpoints
from nmt.inference.loading import load_model
from nmt.models.build import count_parameters
from nmt.tasks import build_task
from nmt.training.config import check_config, describe_recipe
from nmt.training.loggers import log_results_to_wandb
from nmt.training.module import TaskModule
from nmt.training.trainer import build_trainer, resolve_precision
from nmt.utils.instantiate import instantiate
from nmt.utils.io import atomic_write_bytes, atomic_write_json, atomic_write_text

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


def train(cfg: DictConfig) -> dict:
    """Train a model as ``cfg`` says, test its best checkpoint, and return the results (also written to
    <run_dir>/results.json)."""
    task = build_task(cfg.task)
    check_config(cfg)
    if str(cfg.trainer.precision) == "auto":  # the checkpoint's config records what was used
        cfg.trainer.precision = resolve_precision("auto", cfg.trainer.accelerator)
        log.info("trainer.precision=auto: %s", cfg.trainer.precision)
    run_dir = resolve_run_dir(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.set_float32_matmul_precision(cfg.get("matmul_precision") or "highest")
    config = OmegaConf.to_container(cfg, resolve=True)
    config["run_dir"] = str(run_dir)
    # everything that can reject an option is built before any data is read
    datamodule = task.build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    loss = instantiate(cfg.smoothing, pad_id=PAD_ID)
    checkpoint_dir = run_dir / "checkpoints"
    resume = resolve_resume(cfg, checkpoint_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule.prepare_data()
    src_tokenizer, tgt_tokenizer = datamodule.build_tokenizers()
    model = task.build_model(cfg.model, src_tokenizer, tgt_tokenizer)
    if cfg.get("compile"):
        # in place: parameter names (and so checkpoints) stay those of the plain model; dynamic shapes
        # because every batch has its own lengths
        model.compile(dynamic=True)
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
    )
    trainer = build_trainer(cfg, run_dir, task)
    if trainer.is_global_zero:
        print(f"Run directory: {run_dir}")
        print(describe_recipe(cfg))
        print(f"Data: {datamodule.describe()}; model: {count_parameters(model):,} parameters")
        atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
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
        if cfg.test_after_training and Path(best_path).is_file():
            results["test"] = _final_test(cfg, task, trainer, best_path, checkpoint_dir, run_dir)
            wandb = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
            if wandb:
                log_results_to_wandb(wandb, results)
        atomic_write_json(run_dir / "results.json", results)
        print(f"Results: {run_dir / 'results.json'}")
    return results


def _final_test(cfg: DictConfig, task, trainer: L.Trainer, best_path: str, checkpoint_dir: Path, run_dir: Path):
    """The task's test of the best checkpoint (or of the mean of the last epochs, test_average_last)."""
    average = _test_average(cfg, checkpoint_dir)
    if average:
        print(f"Testing the average of the last {average} epoch checkpoints (test_average_last)")
    # Lightning moves the module back to the CPU when fit ends: test on the device that trained
    device = str(trainer.strategy.root_device)
    loaded = load_model(best_path, average, device)
    wandb = any(isinstance(lg, WandbLogger) for lg in trainer.loggers)
    out_dir = run_dir / "eval" / task.test_tag(cfg, average)
    return task.test(loaded, cfg, out_dir, attention_maps=[0] if wandb else ())


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
