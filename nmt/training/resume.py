"""Where a run lives and where it continues from: the run folder, the checkpoint a rerun resumes, and, as a
resumed sitting's training starts, its place in the data checked against where its checkpoint stopped and
its logs continued (or started anew for a run from scratch)."""

from datetime import datetime
from pathlib import Path

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from nmt.inference.checkpoint import (
    CHECKPOINT_KEY,
    CheckpointError,
    epoch_checkpoints,
    load_checkpoint,
    weights_misfit,
)
from nmt.training.loggers import ResumableCSVLogger, ResumableTensorBoardLogger
from nmt.training.run_folder import RunFolderError
from nmt.training.run_identity import differences, fingerprint


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


def how_to_rerun(cfg: DictConfig, run_dir: Path) -> str:
    """What continues this run from its own last.ckpt: the same command where it names the folder and no other
    checkpoint; a ckpt_path of another file would start from that file again (the progress since lost), and
    without run_dir a rerun makes a new dated folder."""
    given = cfg.ckpt_path
    if (
        given
        and given != "last"
        and Path(given).expanduser().resolve() != (run_dir / "checkpoints" / "last.ckpt").resolve()
    ):
        return f"the same command with run_dir={run_dir} and without ckpt_path (it resumes from the run's last.ckpt)"
    if cfg.run_dir or given:
        return "the same command again"
    return f"the same command with run_dir={run_dir}"


def resolve_resume(cfg: DictConfig, checkpoint_dir: Path) -> str | None:
    """The checkpoint to resume from: ckpt_path if given ("last": the run's last.ckpt); otherwise the
    run directory's last.ckpt when there is one, so that rerunning a killed command continues it. The file
    is read before anything else happens: an unreadable one is named in one line, or, with
    checkpoint.resume_fallback=true, replaced by the newest readable epoch checkpoint (said aloud)."""
    if not cfg.ckpt_path:
        path = checkpoint_dir / "last.ckpt"
        hpc = _newest_hpc_checkpoint(checkpoint_dir.parent)
        # only against a readable last.ckpt: an unreadable one goes the way below (named, or resume_fallback)
        last_step = global_step(path) if path.is_file() else -1
        if hpc is not None and (not path.is_file() or last_step >= 0) and global_step(hpc) > last_step:
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
        beside = checkpoint_dir if not cfg.ckpt_path else path.parent
        if not OmegaConf.select(cfg, "checkpoint.resume_fallback", default=False):
            # the fallback offered only where there is something to fall back to (a checkpoint of another
            # program in a folder of its own has no epoch checkpoints beside it)
            instead = (
                "pass checkpoint.resume_fallback=true to resume from the newest readable epoch checkpoint instead, "
                "or another ckpt_path"
                if epoch_checkpoints(beside)
                else "give another ckpt_path (a checkpoint train.py wrote), or leave it out to train afresh"
            )
            raise CheckpointError(f"cannot resume: {err}; {instead}") from None
    candidate = _newest_readable_epoch(beside)
    if candidate is None:
        raise CheckpointError(f"cannot resume: {path} cannot be read and no epoch checkpoint beside it can")
    print(f"warning: {path} cannot be read; resuming from {candidate} (checkpoint.resume_fallback=true)")
    return str(candidate)


def check_checkpoint_task(resume: str, task) -> None:
    """A checkpoint of a task whose model is of another kind (a language model continued as a summariser, a
    translator as a language model) refused before any data is read, naming both: its tokenizers would differ
    too, but that says less and comes later. A task of the same kind (a translator continued as a summariser)
    is another setting, which resume=force may continue under (check_checkpoint_elsewhere)."""
    from nmt.tasks import build_task, task_config

    config = load_checkpoint(resume)[CHECKPOINT_KEY]["config"]
    theirs = build_task(task_config(config))
    if theirs.reads_source != task.reads_source:
        kinds = {True: "reads a source (sequence to sequence)", False: "continues a text (a language model)"}
        raise RunFolderError(
            f"ckpt_path={resume}: a checkpoint of task={theirs.name}, whose model {kinds[theirs.reads_source]}; "
            f"this run is task={task.name}, whose model {kinds[task.reads_source]}: continue it with its own run's "
            f"settings (task={theirs.name}), or train afresh without ckpt_path"
        )


def check_checkpoint_elsewhere(resume: str, identity: dict, force: bool, src_tokenizer, tgt_tokenizer) -> list[str]:
    """A run continued from another run's checkpoint (``ckpt_path`` outside its own folder) is held to that
    run's settings as a rerun in its folder is: other tokenizers are refused (the embeddings would read every
    token as another piece), other settings need resume=force and are returned to be put on record."""
    section = load_checkpoint(resume)[CHECKPOINT_KEY]
    if (section["src_tokenizer"], section["tgt_tokenizer"]) != (src_tokenizer.model_proto, tgt_tokenizer.model_proto):
        raise RunFolderError(
            f"ckpt_path={resume}: its model was trained with other tokenizers than this run's data settings build "
            "(data.tokenizer.*, the corpus); its embeddings would read every token as another: continue it with "
            "its own run's settings, or train afresh without ckpt_path"
        )
    changed = [line for line in differences(fingerprint(section["config"]), identity) if not line.startswith("code:")]
    if changed and not force:
        listing = "; ".join(changed[:12]) + (f"; and {len(changed) - 12} more" if len(changed) > 12 else "")
        raise RunFolderError(
            f"ckpt_path={resume} was trained with other settings ({listing}); pass resume=force to continue it "
            "under this command's settings (kept on record in fingerprint.json), or train afresh"
        )
    return changed


def check_weights_fit(resume: str, model) -> None:
    """The checkpoint resumed holds weights of this run's model (a model setting changed under resume=force,
    or another model's checkpoint: one line, not Lightning's list of every missing and misshapen weight)."""
    what = weights_misfit(load_checkpoint(resume)["state_dict"], model)
    if what:
        raise RunFolderError(
            f"{resume} does not hold this run's model: it {what}; a model setting differs from the run it "
            "continues (model.*, tokenizers): continue it with its own settings, or train afresh in another run_dir"
        )


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


def global_step(path: Path) -> int:
    """The update a checkpoint was saved at (-1 when the file cannot be read: the caller's checks name it)."""
    try:
        return int(load_checkpoint(path).get("global_step", -1))
    except CheckpointError:
        return -1


def is_smoke_run(config: dict) -> bool:
    """trainer.fast_dev_run: a check that the code runs, whose weights mean nothing (config nested or flat)."""
    return bool((config.get("trainer") or {}).get("fast_dev_run") or config.get("trainer.fast_dev_run"))


class ResumeLogs(Callback):
    """A run that starts from scratch in a folder that already has a CSV log (loggers.ResumableCSVLogger)
    starts a new log; a resumed run keeps it (the logger drops the rows that training is about to redo).
    TensorBoard's (loggers.ResumableTensorBoardLogger) likewise deletes the earlier runs' event files, or
    hides the events of earlier sittings from the resumed sitting's first logged step on."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, ResumableCSVLogger) and trainer.global_step == 0:
                logger.experiment.drop_rows_from(0)
            if isinstance(logger, ResumableTensorBoardLogger):
                if trainer.global_step == 0:
                    logger.drop_earlier()
                else:
                    logger.purge_at_next_log = True


class DataPlaceError(ValueError):
    """A resumed run whose settings put it elsewhere in the data than where its checkpoint stopped."""


class SamePlaceInData(Callback):
    """A resumed run's training loader finds its place from the count of batches trained, so settings that
    change an epoch's batches (the number of processes, which ``trainer.devices=auto`` counts on each
    machine; ``data.max_tokens``; the corpus) would put it elsewhere in the data order than its checkpoint
    stopped (``module.saved_data_place``), and Lightning, which keeps its own epoch count, would end an epoch
    early without its validation. So would settings that reorder an epoch's batches (the seed, the
    corpus's sentences) for a run resumed mid-epoch: the rest of that epoch would train some sentences twice
    and skip others. Refused before the first update, in one line."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        saved = getattr(pl_module, "saved_data_place", None)
        position = getattr(trainer.train_dataloader, "position", None)
        if saved is None or position is None:
            return
        if position() == saved:
            self._same_order(trainer, pl_module, *saved)
            return

        def place(epoch: int, done: int) -> str:
            return f"at the start of epoch {epoch}" if done == 0 else f"{done} batches into epoch {epoch}"

        raise DataPlaceError(
            f"the checkpoint stopped {place(*saved)}; under this run's settings (an epoch of "
            f"{trainer.train_dataloader.epoch_length()} batches per process) the batches it trained end "
            f"{place(*position())}, so the run cannot go on where it stopped in the data: keep the settings that "
            "make an epoch's batches (the number of processes, trainer.devices=auto counting this machine's GPUs; "
            "data.max_tokens; the corpus) as they were, or train anew"
        )

    @staticmethod
    def _same_order(trainer: L.Trainer, pl_module: L.LightningModule, epoch: int, done: int) -> None:
        saved = getattr(pl_module, "saved_data_order", None)
        digest = getattr(trainer.train_dataloader, "order_digest", None)
        if done == 0 or saved is None or digest is None or digest(epoch) == saved:
            return  # at an epoch's start any order is a whole epoch's
        start = (
            f"resume with the run's own settings to the epoch's end, or continue under these from the checkpoint of "
            f"the epoch before (ckpt_path=<run_dir>/checkpoints/epoch{epoch - 1:03d}.ckpt)"
            if epoch > 0
            else "resume with the run's own settings to the epoch's end, or train anew"
        )
        raise DataPlaceError(
            f"the checkpoint stopped {done} batches into epoch {epoch}, and under this run's settings that epoch's "
            "batches come in another order (the seed, the training sentences, or another torch's random numbers): "
            f"the rest of the epoch would train some sentences twice and skip others; {start}"
        )
