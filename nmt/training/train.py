"""train(cfg): everything ``train.py`` does, as a plain function of the composed config."""

import contextlib
import logging
import time
from pathlib import Path

from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from nmt.models.build import count_parameters
from nmt.tasks import Task
from nmt.training import weight_casts
from nmt.training.config import ConfigError, checked_task
from nmt.training.config_device import resolve_precision
from nmt.training.config_groups import warmup_past_the_end
from nmt.training.final import (
    as_float,
    final_scores,
    final_splits,
    monitor_never_moved,
    set_aside_evaluations,
    stopped_by_signals,
    validate_final_weights,
)
from nmt.training.lightning_data import lightning_data
from nmt.training.logger_options import logger_problems
from nmt.training.loggers import log_results
from nmt.training.resume import (
    global_step,
    how_to_rerun,
    is_smoke_run,
    resolve_run_dir,
)
from nmt.training.run_description import run_params
from nmt.training.run_folder import (
    RESULTS,
    RunFolderError,
    RunLock,
    finished_results,
    folder_records,
    follow_first_process,
    holds_work,
    owns_run_folder,
    restore_records,
    saved_states,
    trained_results,
)
from nmt.training.run_identity import (
    FINGERPRINT,
    changed_splits,
    check_identity,
    current_text,
    differences,
    fingerprint,
    moved_without_text,
    record_identity,
    saved_fingerprint,
    saved_text,
    unfinished_alike,
)
from nmt.training.sitting import Sitting, build_sitting
from nmt.training.stopping import what_ended
from nmt.training.timing import WallClock
from nmt.training.trainer import check_accelerator
from nmt.utils.io import RUN_FILES, atomic_write_json
from nmt.utils.machine import machine_record

log = logging.getLogger(__name__)


def train(cfg: DictConfig, task: Task | None = None) -> dict:
    """Train a model as ``cfg`` says, score its final model on the validation and test sets, and return the
    results (also written to <run_dir>/results.json). The run folder is locked while the run lives; a
    finished run with the same settings is reported, not trained again; a run folder made under other
    settings is refused. ``task``: :func:`checked_task`'s, where the caller checked the config already
    (train.py, before Lightning is imported)."""
    follow_first_process()  # a process of a multi-process run dies with the run's first process
    task = task or checked_task(cfg)
    check_accelerator(cfg)
    if problems := logger_problems(cfg):  # its classes import Lightning: checked here, not with the rest
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))
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
    main_process = owns_run_folder()  # DDP starts one process per device, each running this function
    if main_process and (said := warmup_past_the_end(cfg)):
        print(said)
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
        # a fast_dev_run's checkpoints are a start for no run: a real one, or another smoke run (of other
        # settings, which its record would refuse; of the same, which would resume past its one batch)
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
    if not cfg.run_dir and not real_work and (alike := unfinished_alike(run_dir, identity)):
        print(
            f"note: {alike[0]} holds a run of these settings that stopped before its end (its last.ckpt at update "
            f"{global_step(alike[0] / 'checkpoints' / 'last.ckpt')}); this one trains afresh in {run_dir}: to "
            f"continue that one instead, stop this and run the same command with run_dir={alike[0]}"
        )
    # every sitting continued under other settings stays on record (at which update: once the checkpoint is
    # known), so that the fingerprint, which now holds this command's settings, does not pass for the run's
    identity["forced"] = list((saved or {}).get("forced", []))
    if warning:
        last = run_dir / "checkpoints" / "last.ckpt"  # what a rerun resumes from (-1: unreadable)
        step = global_step(last) if last.is_file() else 0
        identity["forced"].append({"changed": differences(saved, identity), "from_step": step})
    # the data is checked once it is read (check_data): keep the folder's record of it until then
    saved_data = (saved or {}).get("data")
    finished = finished_results(run_dir)
    if finished is not None and not warning:
        return finished  # said by the caller, once the text is compared
    if finished is not None:  # a finished run goes on (resume=force): its results no longer say where it ends, and
        # a rerun of this command, were it stopped before its end, would take them for its own and train nothing
        atomic_write_json(run_dir / RESULTS, {**finished, "finished": False, "stage": "continued"})
    record_identity(run_dir, {**identity, "data": saved_data} if saved_data else identity)
    return None


def _check_finished_on_this_text(cfg: DictConfig, task, run_dir: Path) -> None:
    """A finished run is reported again only where the text it was trained and scored on is the text this
    command reads: an edited file got the old results back. Where the data is gone, its results stand."""
    saved = saved_text(run_dir)
    if not saved:  # recorded before text hashes were: its files' paths, which it recorded, decide
        moved = moved_without_text(run_dir, OmegaConf.to_container(cfg, resolve=True))
        if moved:
            raise RunFolderError(
                f"{run_dir} holds a run finished on other files ({'; '.join(moved)}), recorded before text was "
                "compared; choose another run_dir (or move this folder aside) to train on these"
            )
        return
    try:
        now = current_text(cfg, task)
    except Exception as err:  # noqa: BLE001 - gone, damaged or refused by a later check: the results stand
        print(f"note: {run_dir}: its data's text could not be read to compare ({type(err).__name__}); reported as is")
        return
    changed = changed_splits(saved, now)
    if changed:
        raise RunFolderError(
            f"{run_dir} holds a run finished on other text (its {', '.join(changed)} split(s) changed since); "
            "choose another run_dir (or move this folder aside) to train on this data"
        )


def _text_changed_too(cfg: DictConfig, task, run_dir: Path) -> str:
    """Where a folder is refused for its settings: whether its data's text changed too, so that one refusal
    says both (a corrected command was refused again, for the text); "" where it did not or cannot be read."""
    saved = saved_text(run_dir)
    if not saved:
        return ""
    try:
        changed = changed_splits(saved, current_text(cfg, task))
    except Exception:  # noqa: BLE001 - the refusal stands as it is; the data is checked once it is read
        return ""
    return f". Its data's text changed too (the {', '.join(changed)} split(s))" if changed else ""


def _remove_cut_writes(run_dir: Path) -> None:
    """The folder is locked: a temporary file of the run's own in it is a write that a kill cut short, never
    one under way (eval*/ is evaluate.py's, which does not take the lock: left alone)."""
    own = [run_dir / name for name in ("checkpoints", "logs", "tokenizers")]
    stale = [p for folder in own for p in folder.glob(".*.tmp")]
    stale += [p for name in RUN_FILES for p in run_dir.glob(f".{name}.*.tmp")]
    for path in stale:
        path.unlink(missing_ok=True)


def _train_in_folder(cfg: DictConfig, task, run_dir: Path, config: dict, main_process: bool) -> dict:
    identity = fingerprint(config)
    # a resumed sitting that stops before its first update (resume.SamePlaceInData) puts the folder's
    # records back as they were, so that the command of the run they describe still continues it
    records = folder_records(run_dir) if main_process else None
    if main_process:
        try:
            finished = _claim_folder(cfg, run_dir, identity)
        except RunFolderError as err:
            raise RunFolderError(f"{err}{_text_changed_too(cfg, task, run_dir)}") from None
        if finished is not None:
            _check_finished_on_this_text(cfg, task, run_dir)
            print(
                f"{run_dir} holds this run, finished ({run_dir / RESULTS}); nothing to train. "
                "Choose another run_dir to train again."
            )
            return finished
        _remove_cut_writes(run_dir)
    # a sitting refused before its first update (a checkpoint of other shapes under resume=force, other
    # tokenizers, a data check) puts the folder's records back: they describe the run its checkpoints hold,
    # whose own command must still continue it
    try:
        sitting = build_sitting(cfg, task, run_dir, config, identity, main_process)
    except BaseException:
        if records is not None:
            restore_records(run_dir, records)
        raise
    start = time.time()
    # a run stopped during its final scores: its training's record stands, only the scores are computed again
    trained = None if str(cfg.get("resume", "auto")) == "force" else trained_results(run_dir)
    if trained is not None:
        if main_process:
            print(f"Training ended in an earlier sitting ({run_dir / RESULTS}): scoring the final model")
        fit_end, earlier = time.time(), float(trained.get("wall_time_s") or 0.0)
        results = {k: v for k, v in trained.items() if k not in ("stage", "finished")}
        best_path = str(sitting.checkpoint_dir / Path(results["best_checkpoint"]).name)  # the folder may have moved
        results.update(run_dir=str(run_dir), best_checkpoint=best_path)
    else:
        results, fit_end, earlier = _fit(cfg, task, run_dir, config, identity, sitting, records, main_process)
    if sitting.trainer.is_global_zero:
        _score_and_record(cfg, task, run_dir, config, sitting, results, started=start, fit_end=fit_end, earlier=earlier)
    return results


def _fit(
    cfg: DictConfig, task, run_dir: Path, config: dict, identity: dict, sitting: Sitting, records, main_process: bool
) -> tuple[dict, float, float]:
    """Train and validate the final weights; on global rank zero, where final scores follow (not a smoke run),
    write the training's record (``results.json`` at its stage "trained", which a sitting stopped during the
    final scores resumes from). Returns the results so far, the time training ended, and the seconds every
    sitting trained and validated up to then. ``records``: the folder's records as the sitting found them (put
    back where it stops before its first checkpoint); None on a rank that does not own the folder."""
    trainer, module, datamodule, resume = sitting.trainer, sitting.module, sitting.datamodule, sitting.resume
    checkpoint_dir, elsewhere = sitting.checkpoint_dir, sitting.elsewhere

    try:
        _train(cfg, sitting, run_dir, records, main_process)
        fit_end = time.time()
        # every sitting of a resumed run counts: training and validation from the checkpointed clock, read as
        # training ends (the clock runs on: read later, the final validation was counted twice)
        earlier = next(c for c in trainer.callbacks if isinstance(c, WallClock)).elapsed()
        if elsewhere and not saved_states(run_dir) and trainer.global_step <= max(global_step(Path(resume)), 0):
            # another run's checkpoint at the end of this command's budget: nothing trained, nothing written
            # here, and the final scores had no checkpoint of this folder to score (skipped, unsaid)
            budget = f"trainer.max_epochs={cfg.trainer.max_epochs}, trainer.max_steps={cfg.trainer.max_steps}"
            raise RunFolderError(
                f"ckpt_path={resume}: it has trained this command's whole budget already (update "
                f"{trainer.global_step}; {budget}), so nothing was trained in {run_dir}; raise trainer.max_epochs "
                "or trainer.max_steps (with resume=force: another budget is another setting) to train it "
                f"further, or score it with evaluate.py ckpt_path={resume}"
            )
        ended_by = what_ended(trainer)  # before the final weights' validation below
        final_metrics = {k: as_float(v) for k, v in trainer.callback_metrics.items()}
        # a sitting that trained nothing (resumed at training's end) logged no training values: the checkpoint's
        final_metrics = {**module.restored_metrics, **final_metrics}
        if not is_smoke_run(config):
            again = how_to_rerun(cfg, run_dir)
            with stopped_by_signals(
                "the final validation", "it trains no more, and validates the final weights", again
            ):
                final_metrics.update(validate_final_weights(cfg, trainer, module, datamodule, checkpoint_dir))
    finally:
        task.stop_workers(module)  # validation's workers (a scoring process), started as training started
    results = _training_results(cfg, trainer, module, run_dir, checkpoint_dir, identity, ended_by, final_metrics)
    if trainer.is_global_zero:
        results.update(task.results_from_log(run_dir / "logs" / "metrics.csv"))
        if final_splits(cfg, quiet=True) and not is_smoke_run(config):
            # the training's record, kept if the final scores are stopped: a rerun only scores
            results["wall_time_s"] = round(earlier + (time.time() - fit_end), 1)
            atomic_write_json(run_dir / RESULTS, {**results, "finished": False, "stage": "trained"})
    return results, fit_end, earlier


def _train(cfg: DictConfig, sitting: Sitting, run_dir: Path, records, main_process: bool) -> None:
    """``trainer.fit``: a signal stops it with its state saved and the command to resume said; a sitting that
    stops before its first checkpoint puts the folder's records back."""
    trainer, module, resume = sitting.trainer, sitting.module, sitting.resume
    try:
        trainer.fit(module, datamodule=lightning_data(sitting.datamodule), ckpt_path=resume)
    except SIGTERMException:
        signal_name = getattr(trainer, "nmt_stop_signal", "a signal")
        if main_process:  # one message, from the rank that owns the folder
            print(
                f"Stopped by {signal_name}; the state is saved in {sitting.checkpoint_dir / 'last.ckpt'}. "
                f"Run {how_to_rerun(cfg, run_dir)} to resume."
            )
        raise SystemExit(130 if signal_name == "SIGINT" else 143) from None
    except BaseException:
        # a resumed sitting stopped before it wrote a checkpoint (another order of the data, an optimiser
        # state of other shapes under resume=force, any fault at Lightning's start) left the folder's
        # checkpoints as they were: their records are put back, so the run's own command continues it
        wrote = getattr(trainer.strategy.checkpoint_io, "saves", 1)  # another writer: taken as written
        if records is not None and resume is not None and not wrote:
            restore_records(run_dir, records)
        raise


def _training_results(
    cfg: DictConfig, trainer, module, run_dir: Path, checkpoint_dir: Path, identity: dict, ended_by, final_metrics
) -> dict:
    """The training's results: its best checkpoint (in this folder) and score, epochs, updates, how it ended,
    the model's size, the machine and the final metrics; what resume=force changed; a monitor that never
    moved, warned of."""
    best = trainer.checkpoint_callbacks[0]
    # a copied run folder carries the original's absolute path in its checkpoint state: use this folder's
    best_path = str(checkpoint_dir / Path(best.best_model_path).name) if best.best_model_path else ""
    if not Path(best_path).is_file():
        best_path = str(checkpoint_dir / "last.ckpt")
    results = {
        "run_dir": str(run_dir),
        "best_checkpoint": best_path,
        "best_" + cfg.checkpoint.monitor: as_float(best.best_model_score),
        # the epochs trained in: Lightning's counter, restored in a sitting resumed at training's end, says
        # the epoch in progress or the next one, depending on where its checkpoint was written
        "epochs": module.trained_epoch + 1,
        "steps": trainer.global_step,
        "ended_by": ended_by,  # max_time: cut short by a time cap, not trained to its end
        "parameters": count_parameters(module.model),
        # the last sitting's CPU, threads and GPU: they change float sums' order, not the settings (not compared)
        "machine": machine_record(trainer.strategy.root_device.type),
        "wall_time_s": None,  # below, once the final scores are in
        "final_metrics": final_metrics,
    }
    if identity.get("forced"):  # continued under other settings (resume=force): from which update, what changed
        results["continued_under_other_settings"] = identity["forced"]
    flat = monitor_never_moved(run_dir / "logs" / "metrics.csv", cfg.checkpoint.monitor, best_path)
    if flat and trainer.is_global_zero:
        results["monitor_never_moved"] = flat
        print(
            f"warning: {flat['metric']} was {flat['value']:g} at each of the {flat['validations']} validations: it "
            f"told no weights apart, so {flat['best']} is no better than the others, and the final scores use it; "
            "monitor a score that moves (checkpoint.monitor=val_loss checkpoint.mode=min), or train until it does"
        )
    return results


def _score_and_record(
    cfg: DictConfig,
    task,
    run_dir: Path,
    config: dict,
    sitting: Sitting,
    results: dict,
    *,
    started: float,
    fit_end: float,
    earlier: float,
) -> None:
    """On global rank zero: the final scores of the best checkpoint, the loggers' summary and ``results.json``.
    ``started``: when this sitting started; ``fit_end``: when its training ended; ``earlier``: the seconds of
    training and validation of every sitting up to that end."""
    trainer, resumed_from, checkpoint_dir = sitting.trainer, sitting.resumed_from, sitting.checkpoint_dir
    best_path = results["best_checkpoint"]
    if not is_smoke_run(config):  # evaluations of weights the run has trained past (mark_evaluations)
        set_aside_evaluations(run_dir, trainer.global_step, resumed_from or 0)
    splits = final_splits(cfg)
    if splits and Path(best_path).is_file() and not is_smoke_run(config):
        if results.get("steps") == 0:  # trainer.max_epochs=0, max_steps=0: a quick check, not a model
            ended = results.get("ended_by", "unknown")
            print(f"Trained 0 updates (ended by {ended}): the scores below are those of the initial weights")
        rerun = "it only scores the final model, whose training is recorded"
        with stopped_by_signals("the final scores", rerun, how_to_rerun(cfg, run_dir)):
            results.update(final_scores(cfg, task, trainer, splits, best_path, checkpoint_dir, run_dir))
    # the final scores of this sitting on top of the training and validation of every sitting
    results["wall_time_s"] = round(earlier + (time.time() - fit_end), 1)
    results["sitting_wall_time_s"] = round(time.time() - started, 1)
    if splits and Path(best_path).is_file() and not is_smoke_run(config):  # the loggers' summary: these times
        log_results(trainer.loggers, results, run_params(cfg))
    results["finished"] = not is_smoke_run(config)
    atomic_write_json(run_dir / RESULTS, results)
    print(f"Results: {run_dir / RESULTS}")
