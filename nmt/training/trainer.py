"""The Lightning Trainer of a run: its callbacks (checkpoints, early stopping, signals, throughput),
loggers, precision and checkpoint writer, all from the config."""

import logging
import os
import re
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import (
    RichModelSummary,
    RichProgressBar,
)
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from nmt.tasks import Task
from nmt.training.checkpoint_io import AtomicCheckpointIO, WriteBehind
from nmt.training.checkpoints import BestCheckpoint, EpochCheckpoints, NoStepCheckpoint, StepCheckpoint
from nmt.training.loggers import ResumableCSVLogger
from nmt.training.progress import PlainProgress, ValidationLines, plain_output
from nmt.training.resume import ResumeLogs, SamePlaceInData
from nmt.training.stopping import SaveOnSignal, SittingEarlyStopping
from nmt.training.timing import Throughput, WallClock
from nmt.utils.instantiate import instantiate


def _callbacks(cfg: DictConfig, checkpoint_dir: Path, task: Task) -> list:
    # a "best" checkpoint on a metric that only decoded epochs compute is saved on those epochs
    decoded = cfg.checkpoint.monitor in task.decoded_metrics
    every = cfg.validation.bleu_every_n_epochs if decoded else 1
    callbacks = [
        BestCheckpoint(
            dirpath=checkpoint_dir,
            filename="best",
            monitor=cfg.checkpoint.monitor,
            mode=cfg.checkpoint.mode,
            save_top_k=1,
            every_n_epochs=max(every, 1),
            # after validation, never at the end of a training epoch: an epoch cut short by max_steps has
            # no validation, and so no monitored value, at its end
            save_on_train_epoch_end=False,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        ),
        # the most recent epochs, for resuming (last.ckpt, a copy of the newest) and for weight averaging
        EpochCheckpoints(
            dirpath=checkpoint_dir,
            filename="epoch{epoch:03d}",
            monitor="step",
            mode="max",
            save_top_k=cfg.checkpoint.keep_last_epochs,
            auto_insert_metric_name=False,
            enable_version_counter=False,
        ),
    ]
    if cfg.checkpoint.every_n_train_steps:
        callbacks.append(
            StepCheckpoint(
                dirpath=checkpoint_dir,
                save_top_k=0,
                save_last=True,
                every_n_train_steps=cfg.checkpoint.every_n_train_steps,
                enable_version_counter=False,
            )
        )
    else:
        callbacks.append(NoStepCheckpoint())
    if cfg.early_stopping.patience:
        callbacks.append(
            SittingEarlyStopping(
                monitor=cfg.early_stopping.monitor,
                mode=cfg.early_stopping.mode,
                patience=cfg.early_stopping.patience,
                strict=False,
                check_on_train_epoch_end=False,
                # the schedule's warm-up, where it has one (optim=adam's fixed rate has none)
                warmup=OmegaConf.select(cfg, "optim.scheduler.warmup", default=None) or 0,
                after_warmup=bool(OmegaConf.select(cfg, "early_stopping.after_warmup", default=False)),
            )
        )
    callbacks.append(SaveOnSignal(checkpoint_dir / "last.ckpt"))
    callbacks.append(WallClock())
    callbacks.append(ResumeLogs())
    callbacks.append(SamePlaceInData())
    # logs train/device/items_per_sec: target tokens per second of training (the speed a sweep can afford);
    # it warns that without a FLOPs count per batch it cannot report MFU (we do not count FLOPs per batch)
    warnings.filterwarnings("ignore", message=".*ThroughputMonitor.*flops_per_batch")
    callbacks.append(Throughput(batch_size_fn=task.batch_sequences, length_fn=task.batch_target_tokens, window_size=20))
    if cfg.trainer.enable_progress_bar:
        every_s = OmegaConf.select(cfg, "progress.every_s", default=30)
        monitor = cfg.checkpoint.monitor
        callbacks.append(PlainProgress(every_s, monitor) if plain_output() else RichProgressBar())
    else:
        callbacks.append(ValidationLines())
    if cfg.trainer.enable_model_summary:
        callbacks.append(RichModelSummary(max_depth=2))
    return callbacks


# Lightning's lines that say nothing about this run: an advertisement, that our own model summary replaces
# its default one, and a deprecation inside Lightning itself (not in code a user can change)
QUIET = ("💡 Tip:", "Trainer already configured with model summary callbacks")


def _quiet_lightning() -> None:
    # Lightning adds a console handler of its own to its logger, whose records also reach the root logger's
    # (Hydra's: the console and train.log): each of its lines was printed twice. Where the root logs, it alone
    if logging.getLogger().handlers:
        own = logging.getLogger("lightning")
        for handler in [h for h in own.handlers if type(h) is logging.StreamHandler]:
            own.removeHandler(handler)
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(getattr(f, "nmt_quiet", False) for f in logger.filters):
        drop = logging.Filter()
        drop.filter = lambda record: not str(record.getMessage()).startswith(QUIET)
        drop.nmt_quiet = True
        logger.addFilter(drop)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated", category=Warning)
    # a multi-process run: Lightning asks for sync_dist on every value logged per epoch, but these are summed
    # over the processes already (torchmetrics' states: the validation scores and losses, the epoch's tokens)
    # or are the first process's by design (its clock; the attention spread of its first batch, docs/metrics.md;
    # the step and epoch that place the final weights' validation, equal in every process)
    warnings.filterwarnings(
        "ignore",
        message=r"It is recommended to use `self.log\('(val_\w+|train_tokens|wall_time_s|step|epoch|final_weights)'",
        category=Warning,
    )


# what the launchers of a run over several machines set (Lightning's cluster environments: SLURM, torchrun,
# LSF, MPI, or MASTER_ADDR and NODE_RANK by hand)
CLUSTER_VARIABLES = (
    "SLURM_NTASKS",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "NODE_RANK",
    "LSB_JOBID",
    "GROUP_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_RANK",
)


def check_accelerator(cfg: DictConfig) -> None:
    """A GPU asked for where this process sees none, or float16 where it would not be used: one line
    naming the key, before any data is read
    (Lightning's own error names no key; an Apple GPU, which its "gpu" would also take, is not one this
    project trains on). Not part of the config's checks: a sweep plans where its runs need not train."""
    accelerator = str(OmegaConf.select(cfg, "trainer.accelerator", default="auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        group = " (trainer=gpu)" if accelerator == "gpu" else ""
        raise ValueError(
            f"trainer.accelerator={accelerator}{group}: this process sees no GPU; train on the CPU with "
            "trainer=default, or run where a GPU is visible"
        )
    on_cpu = accelerator == "cpu" or not torch.cuda.is_available()
    if str(cfg.get("compile")) == "reduce-overhead" and on_cpu:
        raise ValueError(  # Inductor compiles as under compile=true and records nothing: the setting says more
            "compile=reduce-overhead: replays CUDA graphs, and this run trains on the CPU; use compile=true "
            "(the same kernels), or train on a GPU"
        )
    nodes = OmegaConf.select(cfg, "trainer.num_nodes", default=1)
    if isinstance(nodes, int) and nodes > 1 and not any(os.environ.get(name) for name in CLUSTER_VARIABLES):
        raise ValueError(  # else the processes waited for the other machines' until Lightning's timeout, unsaid
            f"trainer.num_nodes={nodes}: a run over several machines is started on each of them by a launcher "
            "that names their ranks (srun under SLURM, torchrun, mpirun, or MASTER_ADDR and NODE_RANK set by "
            "hand), and none is set here; start it so, or train on this machine (trainer.num_nodes=1)"
        )
    devices = OmegaConf.select(cfg, "trainer.devices", default="auto")
    if on_cpu and (devices == -1 or OmegaConf.is_list(devices) or isinstance(devices, list)):
        raise ValueError(  # Lightning's own error is a TypeError in Hydra's many lines, naming no key
            f"trainer.devices={devices}: every GPU, or a list of them, and this run trains on the CPU; give a "
            "number of CPU processes (trainer.devices=2 with trainer=ddp), or train where a GPU is visible"
        )
    if cfg.get("cudnn_attention") is not None and on_cpu:  # the config's check sees trainer.accelerator=cpu only
        raise ValueError(
            f"cudnn_attention={cfg.cudnn_attention}: chooses among a GPU's attention kernels, and this run trains "
            "on the CPU, which has none of cuDNN's (leave it null)"
        )
    precision = str(OmegaConf.select(cfg, "trainer.precision", default="auto"))
    if precision.startswith("16") and on_cpu:
        raise ValueError(  # Lightning would train bf16-mixed, while the run's records said 16-mixed
            f"trainer.precision={precision}: float16 mixed precision needs a CUDA GPU (on a CPU Lightning "
            "trains bf16-mixed instead); use auto, bf16-mixed or 32-true"
        )


def build_trainer(cfg: DictConfig, run_dir: Path, task: Task) -> L.Trainer:
    _quiet_lightning()
    check_accelerator(cfg)
    # null means "Lightning's default", except for check_val_every_n_epoch where null means "count
    # val_check_interval in updates across epochs"
    trainer_args = {
        k: v
        for k, v in OmegaConf.to_container(cfg.trainer, resolve=True).items()
        if v is not None or k == "check_val_every_n_epoch"
    }
    writer = AtomicCheckpointIO()
    callbacks = _callbacks(cfg, run_dir / "checkpoints", task)
    callbacks.append(WriteBehind(writer, OmegaConf.select(cfg, "checkpoint.write_behind", default=None)))
    logger = instantiate(cfg.logger, save_dir=str(run_dir))
    loggers = [logger]
    if not isinstance(logger, CSVLogger):  # curves for sweep reports, whatever the dashboard
        loggers.append(ResumableCSVLogger(str(run_dir), name="logs", version=""))
    try:
        return L.Trainer(
            **trainer_args,
            callbacks=callbacks,
            logger=loggers,
            default_root_dir=str(run_dir),
            use_distributed_sampler=False,  # our token-budget sampler shards batches across ranks itself
            plugins=[writer],
        )
    except (MisconfigurationException, ValueError, TypeError) as err:
        raise ValueError(lightnings_refusal(str(err), trainer_args)) from err


def lightnings_refusal(message: str, trainer_args: dict) -> str:
    """Lightning's refusal of a trainer setting, with the key it names (a bare `strategy` or `num_nodes`) as
    the config's ``trainer.<key>=<value>``; ``trainer: ...`` where it names none of them."""
    first = message.strip().splitlines()[0] if message.strip() else "refused"
    for name in re.findall(r"`(\w+)", first):
        if name in trainer_args:
            return f"trainer.{name}={trainer_args[name]!r}: Lightning refused it: {first}"
    return f"trainer: Lightning refused these settings: {first}"
