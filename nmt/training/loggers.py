"""Logger factories that need more than a class constructor."""

import csv
import os
import time
import uuid
from pathlib import Path

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from nmt.tasks.base import FINAL_RESULTS
from nmt.training.run_folder import owns_run_folder
from nmt.utils.io import atomic_path, atomic_write_text

WANDB_ID = "wandb_id"  # in a run folder: the id of its W&B run, which every sitting of the run continues
FINAL_ROW = "final_weights"  # 1 in the row of the final weights' validation, logged at the last update's step
ROW_PLACE = ("step", "epoch", FINAL_ROW)  # logged with that row to place it: no measures of the weights


def charted(metrics: dict) -> dict:
    """The values a logger draws as curves: FINAL_ROW marks a row of the CSV log for a resumed run, and was a
    chart of one point in TensorBoard and W&B."""
    return {key: value for key, value in metrics.items() if key != FINAL_ROW}


def checked_log(path: str) -> tuple[list[str], list[dict]]:
    """The columns and rows of a run's metrics.csv that a resumed sitting continues. A last line cut short (a
    kill while a row was appended) is dropped, said; a file that is not such a log (other bytes, rows that do
    not fit its header, a step that is no number) is a ValueError naming it and what to do: it stopped the
    resume on a bare "'utf-8' codec can't decode" or "dict contains fields not in fieldnames"."""

    def damaged(why: str) -> ValueError:
        return ValueError(
            f"{path}: not a readable metrics log ({why}); it is damaged: move it aside (mv {path} {path}.damaged) "
            "and rerun, and the log starts again from this sitting"
        )

    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except UnicodeDecodeError as err:
        raise damaged(f"invalid UTF-8 at byte {err.start}") from None
    if text and not text.endswith("\n"):
        cut = text.rpartition("\n")
        print(f"warning: {path}: its last line was cut short (a kill while it was written); dropped: {cut[2][:60]!r}")
        text = cut[0] + cut[1]
        atomic_write_text(Path(path), text)
    reader = csv.DictReader(text.splitlines(keepends=True))
    columns = list(reader.fieldnames or [])
    if columns and "step" not in columns:
        raise damaged("no step column in its first line")
    rows = []
    for number, row in enumerate(reader, start=2):
        if None in row or None in row.values():
            raise damaged(f"line {number} has {'more' if None in row else 'fewer'} fields than its header")
        try:
            float(row.get("step") or 0)
        except ValueError:
            raise damaged(f"line {number}: step {row['step']!r} is no number") from None
        rows.append(row)
    return columns, rows


class _KeepingWriter(ExperimentWriter):
    """Lightning's CSV writer, except that it keeps the rows already in metrics.csv (and their columns) and
    lets the first row of a resumed process decide which of them are redone (see ResumableCSVLogger)."""

    def _check_log_dir_exists(self) -> None:
        self.resuming = self._fs.isfile(self.metrics_file_path)
        if self.resuming:
            self.metrics_keys = checked_log(self.metrics_file_path)[0]

    def log_metrics(self, metrics_dict: dict, step: int | None = None) -> None:
        if self.resuming and step is not None:
            # the first row of this process: rows from this step on were logged by the killed process after
            # its last checkpoint, and are about to be logged again; a process that trains nothing (killed
            # after training) first logs the final weights' validation, at the last update's step, where the
            # training's own rows of that update stay
            self.drop_rows_from(step, final_only=FINAL_ROW in metrics_dict)
        super().log_metrics(metrics_dict, step)

    def drop_rows_from(self, step: int, final_only: bool = False) -> None:
        """Forget the rows logged at ``step`` or later (``final_only``: at ``step``, the final weights'
        validation alone)."""
        self.resuming = False
        if not self._fs.isfile(self.metrics_file_path):
            return

        def kept(row: dict) -> bool:
            at = int(float(row.get("step") or 0))
            return at < step or (final_only and at == step and not row.get(FINAL_ROW))

        rows = [row for row in checked_log(self.metrics_file_path)[1] if kept(row)]
        with atomic_path(self.metrics_file_path) as tmp, open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(rows)


class ResumableCSVLogger(CSVLogger):
    """Lightning's CSVLogger for runs that are killed and resumed. Lightning's deletes metrics.csv whenever a
    logger starts, so each resumed sitting of a killed run would lose the curve so far, and it writes rows
    to disk every 100 steps, so a kill loses those not yet written. This one writes every row as it is
    logged (appending a line: cheap), keeps the earlier rows when it starts, and when the resumed process
    logs its first row, at step s, drops the rows at step s or later: the killed process logged them after
    its last checkpoint, and training is redoing those steps. A run started from scratch in the same folder
    clears the log (resume.ResumeLogs)."""

    def __init__(self, *args, flush_logs_every_n_steps: int = 1, **kwargs) -> None:
        super().__init__(*args, flush_logs_every_n_steps=flush_logs_every_n_steps, **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> _KeepingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _KeepingWriter(log_dir=self.log_dir)
        return self._experiment


class ResumableTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoardLogger for runs that are killed and resumed, and for runs started again in the
    folder of an earlier one: every sitting writes its own event file into the same folder, and TensorBoard
    showed the steps that a resumed sitting redid twice (and an earlier run's curve under a new one's).
    When a resumed run's training starts (resume.ResumeLogs), the first scalars this process logs, at step
    s, reopen the writer with ``purge_step=s`` (SummaryWriter's own option): TensorBoard then hides the
    events of earlier sittings at step s or later, the ones the killed process logged after its last
    checkpoint. A run started from scratch deletes the earlier runs' event files (``drop_earlier``), as the
    CSV log starts anew. Both need ``version: ""`` (conf/logger/tensorboard.yaml): another version gives each
    sitting a folder of its own."""

    def __init__(self, *args, default_hp_metric: bool = False, **kwargs) -> None:
        # Lightning's hp_metric is a placeholder (-1 at step 0) that nothing fills in: every run showed -1 in
        # the HPARAMS view; the final scores are logged as scalars instead (log_results)
        super().__init__(*args, default_hp_metric=default_hp_metric, **kwargs)
        self.purge_at_next_log = False
        # made before this process writes any: Lightning logs the hyperparameters before training starts
        self.earlier_files = sorted(Path(self.log_dir).glob("events.out.tfevents.*"))

    @rank_zero_only
    def drop_earlier(self) -> None:
        """Delete the event files of earlier runs in this folder (this process's own stay), and their
        hparams.yaml, which Lightning writes only where there is none."""
        for path in self.earlier_files:
            path.unlink(missing_ok=True)
        if self.earlier_files:
            (Path(self.log_dir) / self.NAME_HPARAMS_FILE).unlink(missing_ok=True)
        self.earlier_files = []
        # the run's start marked too (a purge from step 0, of nothing): TensorBoard's event accumulator (its
        # --load_fast=false reader, tbparse's) takes the first mark it reads for the start, not a restart, so
        # a first resume's mark hid nothing there and the redone steps showed twice
        self._reopen(purge_step=0)
        self.save()  # this run's hparams.yaml, now, not at its end (a run killed before had none)

    @rank_zero_only
    def purge_from(self, step: int) -> None:
        """Hide the events of earlier sittings at ``step`` or later; this sitting's events from here on stay."""
        self.purge_at_next_log = False
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None
        # TensorBoard reads a folder's event files in the order of their names, which hold the second they
        # were opened, then the process id and a counter (not zero-padded): the file holding the purge must
        # be opened in a later second than every file it purges, or it may be read before them
        seconds = [p.name.split(".")[3] for p in Path(self.log_dir).glob("events.out.tfevents.*")]
        newest = max((int(s) for s in seconds if s.isdigit()), default=0)
        while int(time.time()) <= newest:
            time.sleep(0.05)
        self._reopen(purge_step=step)

    def _reopen(self, purge_step: int) -> None:
        """A writer of a new event file that opens with a purge from ``purge_step`` (SummaryWriter's option)."""
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None
        self._kwargs["purge_step"] = purge_step
        self.experiment  # noqa: B018  the writer opens with the purge event first
        self._kwargs.pop("purge_step")

    @rank_zero_only
    def log_metrics(self, metrics, step: int | None = None) -> None:
        if self.purge_at_next_log and step is not None:
            self.purge_from(step)
        super().log_metrics(charted(metrics), step)


class ChartedWandbLogger(WandbLogger):
    """Lightning's WandbLogger without the CSV log's row mark (:func:`charted`)."""

    @rank_zero_only
    def log_metrics(self, metrics, step: int | None = None) -> None:
        super().log_metrics(charted(metrics), step)


def wandb_has_credentials() -> bool:
    """An API key in WANDB_API_KEY, or the one `wandb login` stored in the netrc file for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


_SAID_OFFLINE = []


def wandb_offline(dir: str) -> bool:
    """Offline when WANDB_MODE says so, or when it is unset and there are no credentials (said once per
    process, with the command that uploads later); otherwise online, as `wandb login` users expect."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode in ("offline", "dryrun")
    if wandb_has_credentials():
        return False
    if not _SAID_OFFLINE:
        print(f"W&B: no credentials (wandb login or WANDB_API_KEY): logging offline; upload later with: "
              f"wandb sync {dir}/wandb/offline-run-* (a resumed run's sittings: one folder each, one run)")  # fmt: skip
        _SAID_OFFLINE.append(True)
    return True


def wandb_logger(
    save_dir: str,
    project: str = "nmt",
    group: str | None = None,
    tags=(),
    name: str | None = None,
    config: dict | None = None,
    dir: str | None = None,
) -> ChartedWandbLogger:
    """W&B, offline when there are no credentials or WANDB_MODE=offline (then: `wandb sync
    <dir>/wandb/offline-run-*`).

    W&B writes its files under ``<dir>/wandb`` (``dir`` defaults to the run's folder). A sweep points every
    run at its own folder, so one ``wandb sync`` uploads the whole group and ``wandb leet <dir>/wandb``
    browses it in a terminal without an account."""
    dir = dir or save_dir
    check_writable_folder("logger.dir", Path(dir).expanduser() / "wandb")
    offline = wandb_offline(dir)
    # one W&B run per run folder: a resumed run continues its W&B run (each sitting was a new one)
    logger = ChartedWandbLogger(
        project=project,
        group=group,
        tags=list(tags),
        name=name,
        save_dir=dir,
        offline=offline,
        id=wandb_run_id(Path(save_dir)),
        resume="allow",
    )
    if config:
        logger.log_hyperparams(config)
    return logger


def check_writable_folder(key: str, folder: Path) -> None:
    """A folder a logger writes into, made (or found) writable before training: W&B, given one it cannot
    write, fell back to a /tmp/wandb that every such run shares, with warnings, and the run went on. ValueError
    naming the key otherwise."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".writable.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise ValueError(
            f"{key}: cannot write {folder} ({err.strerror or err}); give a folder this user can write"
        ) from None


def wandb_run_id(run_dir: Path) -> str | None:
    """The W&B run id of a run folder, made at its first sitting and kept in the folder (``wandb_id``) by the
    process that owns the folder (DDP's other processes log nothing to W&B, and would each make another)."""
    path = run_dir / WANDB_ID
    if path.is_file() and path.read_text().strip():
        return path.read_text().strip()
    if not owns_run_folder():
        return None
    run_id = uuid.uuid4().hex[:16]
    atomic_write_text(path, run_id + "\n")
    return run_id


# numbers of a split's results that describe the set or the output, not score the model: charted in
# TensorBoard beside the scores, they read as metrics (a column and a curve of the test set's size); W&B's
# summary keeps them
NOT_SCORES = tuple(
    f"_{k}" for k in ("sentences", "tokens", "max_input_len", "length_ratio", "brevity_penalty", "also_in_train")
)


def final_scores_of(results: dict) -> dict[str, float]:
    """The final model's scores of a run's results (``test_bleu``, ``val_as_test_bleu``, ...)."""
    scores = {}
    for split in ("test", FINAL_RESULTS["val"]):
        values = results.get(split) or {}
        scores.update(
            {f"{split}_{k}": v for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        )
    return scores


def log_results(loggers: list, results: dict, params: dict | None = None) -> None:
    """The final scores where a run's logger shows them: W&B's run summary (with the results' other
    numbers) and the test attention heatmaps as images, each under its own name (one list of images of
    unlike sizes, a figure of every layer beside one of their mean, W&B draws wrongly); TensorBoard's
    scalars at the last update's step, and its HPARAMS view: the run's ``params`` (its config groups'
    choices and seed) beside those scores, so that the runs of a sweep compare in one table."""
    scores = final_scores_of(results)
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            numbers = {k: v for k, v in results.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            logger.experiment.summary.update({**scores, **numbers})
            for path in (results.get("test") or {}).get("attention_maps") or []:
                name = Path(path).stem
                logger.log_image(f"test_attention/{name}", images=[str(path)], caption=[name])
        elif isinstance(logger, TensorBoardLogger) and scores:
            shown = {k: v for k, v in scores.items() if not k.endswith(NOT_SCORES)}
            # at the last update's step, where the curves' last validation is (Lightning's 0-based numbering)
            logger.log_metrics(shown, step=max(int(results.get("steps") or 0) - 1, 0))
            if params:
                _log_hparams(logger, params, shown)
            logger.save()


@rank_zero_only
def _log_hparams(logger: TensorBoardLogger, params: dict, scores: dict) -> None:
    """TensorBoard's HPARAMS record of the run: its ``params``, beside its scalars (the final scores logged
    above, and the curves' last values), which the view reads. Lightning writes one only with metrics, which
    it has not at the start of a run: the view was empty. The session's start and end alone: an experiment
    summary of its own (as ``hparams()`` makes) fixed the table's columns, and TensorBoard takes the first run's
    of a sweep, so the keys of other runs' level settings were left out and no column offered its levels to
    filter by; without one, TensorBoard makes the columns of every run's keys and values."""
    from torch.utils.tensorboard.summary import hparams

    plain = {k: v if isinstance(v, bool | int | float | str) else str(v) for k, v in params.items()}
    writer = logger.experiment._get_file_writer()
    _experiment, start, end = hparams(plain, scores)
    for summary in (start, end):
        writer.add_summary(summary)
