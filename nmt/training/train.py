"""train(cfg): everything ``train.py`` does, as a plain function of the composed config."""

import contextlib
import logging
import os
import signal
import threading
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
from nmt.data.tokenizer import PAD_ID, moses_languages
from nmt.inference.checkpoint import CheckpointError, epoch_checkpoints, load_checkpoint
from nmt.inference.loading import load_model
from nmt.models.build import count_parameters
from nmt.tasks import build_task
from nmt.tasks.base import FINAL_RESULTS
from nmt.training import weight_casts
from nmt.training.callbacks import WallClock, what_ended
from nmt.training.config import ConfigError, check_config, describe_recipe, no_repeated_layers
from nmt.training.loggers import log_results_to_wandb
from nmt.training.module import TaskModule
from nmt.training.run_folder import (
    FINGERPRINT,
    RESULTS,
    RunFolderError,
    RunLock,
    check_data,
    check_identity,
    data_identity,
    differences,
    fingerprint,
    finished_results,
    holds_work,
    record_identity,
    saved_fingerprint,
    saved_states,
    trained_results,
)
from nmt.training.trainer import build_trainer, check_accelerator, resolve_precision
from nmt.utils.instantiate import instantiate
from nmt.utils.io import atomic_write_bytes, atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)


def compile_model(model: torch.nn.Module, setting, loss: torch.nn.Module | None = None) -> None:
    """``compile``: false, true (Inductor's kernels), ``reduce-overhead`` (the same kernels, each batch
    shape captured once as a CUDA graph and replayed without a launch per kernel) or ``layers`` (each of
    the model's ``repeated_layers`` compiled on its own, layers of one kind sharing one compile, so that
    the cold compile is a fraction of the whole model's; the rest runs eagerly: the embeddings, the final
    norms, the decoder's projection of the encoder's output, the output projection; meant with
    ``graph_updates=true``, which records the update whole). In place, so that parameter names (and so
    checkpoints) stay those of the plain model.

    Shapes are dynamic in all three: every batch has its own lengths, and a frame compiled for static shapes
    is recompiled for each new one until Dynamo's recompile limit (8), then runs eagerly. One dynamic
    compile serves every shape, and under ``reduce-overhead`` the CUDA graph trees record a graph per
    shape without recompiling (token batches of a sorted corpus take few shapes: the tiny recipe's, 27
    in 100 epochs of Multi30k). Dynamo's duck sizing is turned off: it gives dimensions of equal size at the
    first trace one symbol, and source and target lengths are mostly equal in a sorted corpus's first batch,
    so the first batch whose lengths differ recompiled the model (a second compile, minutes on a CPU).
    The switch is the process's (Dynamo reads it when it first traces, so it stays off), for any other
    compile in it too. Validation runs the model eagerly (:class:`~nmt.training.module.TaskModule`): the
    eval mode would be compiled again. The loss, where given, is compiled too (``loss.compile``),
    without CUDA graphs (it takes the model's logits, the largest tensor of the update, which a graph would
    copy into its own memory first)."""
    if setting:
        from torch.fx.experimental import _config as fx_config  # private; the switch Dynamo's own hint names

        if hasattr(fx_config, "use_duck_shape"):
            fx_config.use_duck_shape = False
        if setting == "layers":
            layers = getattr(model, "repeated_layers", None)
            if layers is None:
                raise ValueError(no_repeated_layers(type(model)))
            for layer in layers():
                layer.compile(dynamic=True)
        else:
            model.compile(mode="reduce-overhead" if setting == "reduce-overhead" else None, dynamic=True)
        if loss is not None:
            loss.compile(dynamic=True)


def resolve_run_dir(cfg: DictConfig) -> Path:
    """run_dir if given; else the run folder of a resumed checkpoint (<run_dir>/checkpoints/<file>); else
    Hydra's output folder."""
    if cfg.run_dir:
        return Path(cfg.run_dir).expanduser().resolve()
    if cfg.ckpt_path and cfg.ckpt_path != "last":
        path = Path(cfg.ckpt_path).expanduser().resolve()
        if path.parent.name != "checkpoints":
            raise ValueError(
                f"ckpt_path={cfg.ckpt_path}: not inside a run's checkpoints/ folder, so the run folder to "
                "continue in is unknown; add run_dir=<folder for this run>"
            )
        return path.parent.parent
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir).resolve()
    return Path("runs", str(cfg.name), datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()


def resolve_resume(cfg: DictConfig, checkpoint_dir: Path) -> str | None:
    """The checkpoint to resume from: ckpt_path if given ("last": the run's last.ckpt); otherwise the
    run directory's last.ckpt when there is one, so that rerunning a killed command continues it. The file
    is read before anything else happens: an unreadable one is named in one line, or, with
    checkpoint.resume_fallback=true, replaced by the newest readable epoch checkpoint (said aloud)."""
    if not cfg.ckpt_path:
        path = checkpoint_dir / "last.ckpt"
        hpc = _newest_hpc_checkpoint(checkpoint_dir.parent)
        # only against a readable last.ckpt: an unreadable one goes the way below (named, or resume_fallback)
        last_step = _global_step(path) if path.is_file() else -1
        if hpc is not None and (not path.is_file() or last_step >= 0) and _global_step(hpc) > last_step:
            print(f"Resuming from {hpc}: saved by Lightning on SLURM's preemption signal, after last.ckpt")
            path = hpc
        if not path.is_file():
            if not epoch_checkpoints(checkpoint_dir):
                return None
            # trained before, its last.ckpt gone (removed, or a kill before a checkpoint written behind training
            # was copied to it): the newest readable epoch checkpoint, said aloud, not a fresh start over them
            candidate = _newest_readable_epoch(checkpoint_dir)
            if candidate is None:
                raise CheckpointError(f"cannot resume: {path} is missing and no epoch checkpoint beside it can be read")
            print(f"warning: {path} is missing; resuming from {candidate}, the newest epoch checkpoint")
            return str(candidate)
    else:
        path = checkpoint_dir / "last.ckpt" if cfg.ckpt_path == "last" else Path(cfg.ckpt_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(
                f"ckpt_path={cfg.ckpt_path!r}: {path} does not exist (to resume, pass the "
                "run's checkpoints/last.ckpt, or run_dir=<that run> with ckpt_path=last)"
            )
    try:
        load_checkpoint(path)
        return str(path)
    except CheckpointError as err:
        if not OmegaConf.select(cfg, "checkpoint.resume_fallback", default=False):
            raise CheckpointError(
                f"cannot resume: {err}; pass checkpoint.resume_fallback=true to resume from the newest "
                "readable epoch checkpoint instead, or another ckpt_path"
            ) from None
    candidate = _newest_readable_epoch(checkpoint_dir if not cfg.ckpt_path else path.parent)
    if candidate is None:
        raise CheckpointError(f"cannot resume: {path} cannot be read and no epoch checkpoint beside it can")
    print(f"warning: {path} cannot be read; resuming from {candidate} (checkpoint.resume_fallback=true)")
    return str(candidate)


def _newest_readable_epoch(folder: Path) -> Path | None:
    """The newest epoch checkpoint in ``folder`` that can be read, or None."""
    for candidate in reversed(epoch_checkpoints(folder)):
        try:
            load_checkpoint(candidate)
        except CheckpointError:
            continue
        return candidate
    return None


def _newest_hpc_checkpoint(run_dir: Path) -> Path | None:
    """Under SLURM with auto-requeue Lightning saves ``hpc_ckpt_<n>.ckpt`` in the run folder on the preemption
    signal (the highest n is the newest) and requeues the job; that state is newer than last.ckpt."""
    numbered = []
    for path in run_dir.glob("hpc_ckpt_*.ckpt"):
        suffix = path.stem.removeprefix("hpc_ckpt_")
        if suffix.isdigit():
            numbered.append((int(suffix), path))
    return max(numbered)[1] if numbered else None


def _global_step(path: Path) -> int:
    """The update a checkpoint was saved at (-1 when the file cannot be read: the caller's checks name it)."""
    try:
        return int(load_checkpoint(path).get("global_step", -1))
    except CheckpointError:
        return -1


def is_smoke_run(config: dict) -> bool:
    """trainer.fast_dev_run: a check that the code runs, whose weights mean nothing (config nested or flat)."""
    return bool((config.get("trainer") or {}).get("fast_dev_run") or config.get("trainer.fast_dev_run"))


def train(cfg: DictConfig) -> dict:
    """Train a model as ``cfg`` says, score its final model on the validation and test sets, and return the
    results (also written to <run_dir>/results.json). The run folder is locked while the run lives; a
    finished run with the same settings is reported, not trained again; a run folder made under other
    settings is refused."""
    task = build_task(cfg.task)
    check_config(cfg)
    check_accelerator(cfg)
    if str(cfg.trainer.precision) == "auto":  # the checkpoint's config records what was used
        cfg.trainer.precision = resolve_precision("auto", cfg.trainer.accelerator)
        log.info("trainer.precision=auto: %s", cfg.trainer.precision)
        if cfg.get("cast_weights_once"):  # checked again, now that the precision is known
            problems = weight_casts.unsupported(precision=cfg.trainer.precision, compile=cfg.get("compile"))
            if problems:
                raise ConfigError("invalid configuration:\n" + "\n".join(f"  {p}" for p in problems))
    run_dir = resolve_run_dir(cfg)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except (NotADirectoryError, FileExistsError):
        raise ValueError(
            f"run_dir={run_dir}: a file stands where the run folder or one of its parents should be"
        ) from None
    config = OmegaConf.to_container(cfg, resolve=True)
    config["run_dir"] = str(run_dir)
    # DDP starts one process per device, each running this function: rank 0 owns the folder
    ranks = ("LOCAL_RANK", "NODE_RANK", "RANK", "SLURM_PROCID")  # Lightning's launcher, torchrun, srun
    main_process = all(int(os.environ.get(name, 0) or 0) == 0 for name in ranks)
    with RunLock(run_dir) if main_process else contextlib.nullcontext():
        return _train_in_folder(cfg, task, run_dir, config, main_process)


def _claim_folder(cfg: DictConfig, run_dir: Path, identity: dict) -> dict | None:
    """Check the folder against this run's fingerprint before anything is read or written. Returns the
    results of a finished run with the same settings (nothing to do), else None."""
    force = str(cfg.get("resume", "auto")) == "force"
    saved_path = run_dir / FINGERPRINT
    states = saved_states(run_dir)
    real_work = holds_work(run_dir)
    saved, note = saved_fingerprint(run_dir, force)
    if note:
        print(note)
    saved_smoke = saved is not None and is_smoke_run(saved.get("config", {}))
    if is_smoke_run(identity["config"]) and real_work and not saved_smoke:
        # even with resume=force: its fingerprint and results would replace the run's, and the next real run
        # would then purge that run's checkpoints as a smoke run's
        raise RunFolderError(
            f"run_dir={run_dir} holds a run's checkpoints or results; a smoke run (trainer.fast_dev_run) "
            "never writes into it: give the smoke run another run_dir"
        )
    if saved_smoke:
        if not is_smoke_run(identity["config"]):
            # a fast_dev_run's checkpoints are not a start for a real run
            for stale in states:
                stale.unlink()
            (run_dir / RESULTS).unlink(missing_ok=True)
            saved_path.unlink(missing_ok=True)
            saved = None
            print(f"{run_dir} held a smoke run (trainer.fast_dev_run): its checkpoints are removed, training afresh")
    if not real_work and saved_path.is_file():
        # nothing was trained here (a run that stopped on a mistake before its first checkpoint): its record
        # binds nothing, so the corrected command trains in the folder afresh
        saved_path.unlink()
        saved = None
    warning = check_identity(run_dir, identity, force, saved)
    if warning:
        print(warning)
    # every sitting continued under other settings stays on record (at which update: once the checkpoint is
    # known), so that the fingerprint, which now holds this command's settings, does not pass for the run's
    identity["forced"] = list((saved or {}).get("forced", []))
    if warning:
        last = run_dir / "checkpoints" / "last.ckpt"  # what a rerun resumes from (-1: unreadable)
        step = _global_step(last) if last.is_file() else 0
        identity["forced"].append({"changed": differences(saved, identity), "from_step": step})
    # the data is checked once it is read (check_data): keep the folder's record of it until then
    saved_data = (saved or {}).get("data")
    finished = finished_results(run_dir)
    if finished is not None and not warning:
        print(
            f"{run_dir} holds this run, finished ({run_dir / RESULTS}); nothing to train. "
            "Choose another run_dir to train again."
        )
        return finished
    record_identity(run_dir, {**identity, "data": saved_data} if saved_data else identity)
    return None


def _train_in_folder(cfg: DictConfig, task, run_dir: Path, config: dict, main_process: bool) -> dict:
    identity = fingerprint(config)
    if main_process:
        finished = _claim_folder(cfg, run_dir, identity)
        if finished is not None:
            return finished
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
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule.prepare_data()
    src_tokenizer, tgt_tokenizer = datamodule.build_tokenizers()
    data_report = datamodule.report() if main_process else None
    if main_process:  # the data too must be the data the folder's run was trained on
        identity["data"] = data_identity(
            datamodule.describe(), data_report, datamodule.text_hashes(), src_tokenizer, tgt_tokenizer
        )
        force = str(cfg.get("resume", "auto")) == "force"
        warning = check_data(run_dir, identity, force, resuming=resume is not None)
        if warning:
            print(warning)
        record_identity(run_dir, identity)
    model = task.build_model(cfg.model, src_tokenizer, tgt_tokenizer)
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
    trainer = build_trainer(cfg, run_dir, task)
    if trainer.is_global_zero:
        print(f"Run directory: {run_dir}")
        print(describe_recipe(cfg))
        print(f"Data: {datamodule.describe()}; model: {count_parameters(model):,} parameters")
        target = str(OmegaConf.select(cfg, "data.tgt_lang", default="") or "")
        if target and target not in moses_languages() | {"zh", "ja", "ko", "yue"}:
            print(
                f"note: data.tgt_lang={target} names no language known here: BLEU tokenises the target as '13a', "
                "the tokenised BLEU without a language's Moses rules; name it (data.tgt_lang=zh, ja, de, ...)"
            )
        atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
        atomic_write_bytes(run_dir / "tokenizers" / "src.model", src_tokenizer.model_proto)
        atomic_write_bytes(run_dir / "tokenizers" / "tgt.model", tgt_tokenizer.model_proto)
        write_report(data_report or datamodule.report(), datamodule.describe(), run_dir)
    if resume:
        print(f"Resuming from {resume}")
    for logger in trainer.loggers:
        logger.log_hyperparams(config)
    start = time.time()
    # a run stopped during its final scores: its training's record stands, only the scores are computed again
    trained = None if str(cfg.get("resume", "auto")) == "force" else trained_results(run_dir)
    if trained is not None:
        if main_process:
            print(f"Training ended in an earlier sitting ({run_dir / RESULTS}): scoring the final model")
        fit_end, earlier = time.time(), float(trained.get("wall_time_s") or 0.0)
        results = {k: v for k, v in trained.items() if k not in ("stage", "finished")}
        best_path = str(checkpoint_dir / Path(results["best_checkpoint"]).name)  # the folder may have moved
        results.update(run_dir=str(run_dir), best_checkpoint=best_path)
    else:
        try:
            try:
                trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
            except SIGTERMException:
                signal_name = getattr(trainer, "nmt_stop_signal", "a signal")
                if main_process:  # one message, from the rank that owns the folder
                    print(
                        f"Stopped by {signal_name}; the state is saved in {checkpoint_dir / 'last.ckpt'}. "
                        "Run the same command again (or pass that file as ckpt_path) to resume."
                    )
                raise SystemExit(130 if signal_name == "SIGINT" else 143) from None

            fit_end = time.time()
            ended_by = what_ended(trainer)  # before the final weights' validation below
            final_metrics = {k: _float(v) for k, v in trainer.callback_metrics.items()}
            if not is_smoke_run(config):
                with _stopped_by_signals("the final validation", "it trains no more, and validates the final weights"):
                    final_metrics.update(_validate_final_weights(cfg, trainer, module, datamodule, checkpoint_dir))
        finally:
            task.stop_workers(module)  # validation's workers (a scoring process), started as training started
        best = trainer.checkpoint_callbacks[0]
        # a copied run folder carries the original's absolute path in its checkpoint state: use this folder's
        best_path = str(checkpoint_dir / Path(best.best_model_path).name) if best.best_model_path else ""
        if not Path(best_path).is_file():
            best_path = str(checkpoint_dir / "last.ckpt")
        results = {
            "run_dir": str(run_dir),
            "best_checkpoint": best_path,
            "best_" + cfg.checkpoint.monitor: _float(best.best_model_score),
            "epochs": trainer.current_epoch,
            "steps": trainer.global_step,
            "ended_by": ended_by,  # max_time: cut short by a time cap, not trained to its end
            "parameters": count_parameters(model),
            "wall_time_s": None,  # below, once the final scores are in
            "final_metrics": final_metrics,
        }
        if identity.get("forced"):  # continued under other settings (resume=force): from which update, what changed
            results["continued_under_other_settings"] = identity["forced"]
        # every sitting of a resumed run counts: training and validation from the checkpointed clock
        earlier = next(c for c in trainer.callbacks if isinstance(c, WallClock)).elapsed()
        if trainer.is_global_zero:
            results.update(task.results_from_log(run_dir / "logs" / "metrics.csv"))
            if _final_splits(cfg, quiet=True) and not is_smoke_run(config):
                # the training's record, kept if the final scores are stopped: a rerun only scores
                results["wall_time_s"] = round(earlier + (time.time() - fit_end), 1)
                atomic_write_json(run_dir / RESULTS, {**results, "finished": False, "stage": "trained"})
    if trainer.is_global_zero:
        splits = _final_splits(cfg)
        if splits and Path(best_path).is_file() and not is_smoke_run(config):
            with _stopped_by_signals("the final scores", "it only scores the final model, whose training is recorded"):
                results.update(_final_scores(cfg, task, trainer, splits, best_path, checkpoint_dir, run_dir))
            wandb = next((lg for lg in trainer.loggers if isinstance(lg, WandbLogger)), None)
            if wandb:
                log_results_to_wandb(wandb, results)
        # the final scores of this sitting on top of the training and validation of every sitting
        results["wall_time_s"] = round(earlier + (time.time() - fit_end), 1)
        results["sitting_wall_time_s"] = round(time.time() - start, 1)
        results["finished"] = not is_smoke_run(config)
        atomic_write_json(run_dir / RESULTS, results)
        print(f"Results: {run_dir / RESULTS}")
    return results


def _validate_final_weights(cfg: DictConfig, trainer: L.Trainer, module, datamodule, checkpoint_dir: Path) -> dict:
    """A run stopped by max_steps (or early) after its last validation has updates no validation saw:
    validate them, decoding, and keep them as best.ckpt when they are the best. Returns the metrics."""
    best = trainer.checkpoint_callbacks[0]
    # a monitored score that only decoded validations compute may never have been computed (a run shorter
    # than validation.bleu_every_n_epochs): validate the final weights then too, so that a best.ckpt exists
    never_scored = best.best_model_score is None
    # a monitored score that only decoded validations compute: the final weights' validation must have decoded
    decoded = (
        cfg.checkpoint.monitor not in module.task.decoded_metrics or module.last_decoded_step == trainer.global_step
    )
    if (
        trainer.global_step == module.last_validated_step and decoded and not never_scored
    ) or trainer.limit_val_batches == 0:
        return {}
    module.final_validation = True
    try:
        trainer.validate(module, datamodule=datamodule, verbose=False)
    finally:
        module.final_validation = False
    metrics = {k: _float(v) for k, v in trainer.callback_metrics.items()}
    value = trainer.callback_metrics.get(cfg.checkpoint.monitor)
    if value is None:
        return metrics
    score = best.best_model_score
    better = score is None or (value > score if cfg.checkpoint.mode == "max" else value < score)
    if better:
        path = checkpoint_dir / "best.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # as ModelCheckpoint saves best.ckpt
        best.best_model_path, best.best_model_score = str(path), value.detach().clone()
        print(f"The final updates validate best ({cfg.checkpoint.monitor}={float(value):.4f}): saved as {path}")
    return metrics


def _final_splits(cfg: DictConfig, quiet: bool = False) -> list[str]:
    """The splits scored at the end: validation first (a measure to choose recipes by), then test. A run
    told not to validate (trainer.limit_val_batches=0) does not decode the validation set at its end either."""
    splits = [split for split, key in (("val", "val_after_training"), ("test", "test_after_training")) if cfg.get(key)]
    if "val" in splits and OmegaConf.select(cfg, "trainer.limit_val_batches", default=None) == 0:
        if not quiet:
            print("val_after_training: the validation set is not decoded at the end (trainer.limit_val_batches=0)")
        splits.remove("val")
    return splits


class _Stopped(BaseException):
    """A stop signal during the final validation or scores (raised by the handler, as Ctrl-C raises)."""


@contextlib.contextmanager
def _stopped_by_signals(what: str, rerun: str):
    """SIGTERM, SIGUSR1 or Ctrl-C while ``what`` runs (after training: nothing left to save) stops the
    process with one line saying what a rerun of the same command does (``rerun``), exit 143 (130)."""
    names = ("SIGTERM", "SIGUSR1")
    handled = [getattr(signal, n) for n in names if hasattr(signal, n)]
    main = threading.current_thread() is threading.main_thread()

    def stop(signum, frame):
        raise _Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in handled} if main else {}
    try:
        yield
    except (_Stopped, KeyboardInterrupt) as err:
        name = err.args[0] if isinstance(err, _Stopped) else "SIGINT"
        print(f"Stopped by {name} during {what}; run the same command again: {rerun}")
        raise SystemExit(130 if name == "SIGINT" else 143) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _final_scores(
    cfg: DictConfig, task, trainer: L.Trainer, splits, best_path: str, checkpoint_dir: Path, run_dir: Path
):
    """The task's scores of the final model (the best checkpoint, or the mean of the last epochs:
    test_average_last) with the run's own search on ``splits``: {"val_as_test": ..., "test": ...}. The
    validation set is decoded exactly as the test is, so that recipes can be compared on the model and
    search they ship with, and the test is never the one to choose by."""
    average = _test_average(cfg, checkpoint_dir)
    if average:
        print(f"Scoring the average of the last {average} epoch checkpoints (test_average_last)")
    # Lightning moves the module back to the CPU when fit ends: score on the device that trained
    device = str(trainer.strategy.root_device)
    loaded = load_model(best_path, average, device)
    wandb = any(isinstance(lg, WandbLogger) for lg in trainer.loggers)
    scores = {}
    for split in splits:
        out_dir = run_dir / "eval" / task.final_tag(cfg, split, average)
        maps = [0] if wandb and split == "test" else ()
        scores[FINAL_RESULTS[split]] = task.final_score(loaded, cfg, split, out_dir, attention_maps=maps)
    return scores


def _test_average(cfg: DictConfig, checkpoint_dir: Path) -> int:
    """How many epoch checkpoints the final scores average (0: best.ckpt alone)."""
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
