"""Atomic file writes: every file the project writes either appears whole or not at all.

A process killed while writing (Ctrl-C, a preempted job, a full disk) leaves the previous version of the
file, never half of a new one. Write through :func:`atomic_path` (for writers that take a path, such as
``torch.save``) or the ``atomic_write_*`` helpers.
"""

import errno
import functools
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename, on failure
    it is removed. The name holds the process id, so parallel writers (sweep jobs sharing a cache) never
    write into each other's temporary file. A link to a file has its file replaced, the link kept; a path that
    is no file (a device, a named pipe, a socket) or a process's descriptor (/dev/stdout, which a command's
    output= refuses: :func:`check_output_file`) is yielded itself, written through: a rename put a plain file
    in its place (the device node gone, a pipe's reader waiting for ever)."""
    path = Path(path)
    if not is_plain_file_or_nothing(path) or _through_descriptors(path):
        with _named_if_full(path):
            yield path
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with _named_if_full(path):
            yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def _named_if_full(path: Path) -> Iterator[None]:
    """A full disk met while writing, with ``path`` as its file name where the write named none (a write or
    close of an open file does not): the one line that says it names what was being written."""
    try:
        yield
    except OSError as err:
        if err.errno in DISK_FULL and not err.filename:
            err.filename = str(path)
        raise


DESCRIPTOR = re.compile(r"/dev/(std(in|out|err)$|fd/)|/proc/[^/]+/fd/")  # paths of a process's descriptors


def _through_descriptors(path: Path) -> bool:
    """Whether ``path`` is, or links through, a process's open descriptor (/dev/stdout, /proc/self/fd/1,
    /dev/fd/N): replacing what it resolves to (standard output sent to a file) wiped that file, or left the
    shell's handle on a deleted one. Such a path is never replaced: a command's output= refuses it, and
    :func:`atomic_path` writes through it."""
    hops = 0
    while hops < 40:
        if DESCRIPTOR.match(str(path.absolute())):
            return True
        if not path.is_symlink():
            return False
        path, hops = path.parent / os.readlink(path), hops + 1
    return False


def is_plain_file_or_nothing(path: str | os.PathLike) -> bool:
    """Whether ``path``, its links followed, is a regular file or nothing yet (not a device, pipe or socket)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return True


# a full disk or quota: said in one line naming what was being written (the command line's last resort)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

# what makes a folder a training run's (every run writes it first) and an evaluation's (what it scored)
RUN_RECORD, EVALUATION_RECORD = "fingerprint.json", "metrics.json"
# what a training run writes into its folder: files at its top, and folders whose every file is the run's
RUN_FILES = (RUN_RECORD, "config.yaml", "results.json", "train.log", "train_stdout.log", "train_stderr.log",
             "data_report.json", "data_report.txt", "train_sentences.npz", "eval_before_update")  # fmt: skip
RUN_FOLDERS = ("checkpoints", "logs", "tokenizers", ".hydra", "wandb", "tensorboard")  # and eval*, the evaluations'


def run_folder_above(path: str | os.PathLike) -> Path | None:
    """The training run's folder at or above ``path`` (the nearest holding a run's fingerprint.json; links and
    ``..`` resolved), or None."""
    path = Path(path).expanduser().resolve()
    return next((folder for folder in (path, *path.parents) if (folder / RUN_RECORD).is_file()), None)


def is_evaluation_folder(folder: Path) -> bool:
    """Whether ``folder`` holds an evaluation's record: a metrics.json naming the checkpoints or hypotheses."""
    try:
        record = json.loads((folder / EVALUATION_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return is_evaluation_record(record)


def is_evaluation_record(record) -> bool:
    """Whether ``record`` (a metrics.json's JSON) is an evaluation's: it names the checkpoints or hypotheses."""
    return isinstance(record, dict) and bool({"checkpoints", "hypotheses"} & record.keys())


def run_record_at(path: str | os.PathLike) -> tuple[Path, str] | None:
    """(run folder, what) where ``path`` is one of a training run's records (a file it writes at its top, or
    a file in one of its own folders: checkpoints/, logs/, eval*/, ...), else None."""
    path = Path(path).expanduser().resolve()
    run = run_folder_above(path.parent)
    if run is None:
        return None
    parts = path.relative_to(run).parts
    if len(parts) == 1:
        return (run, f"the run's own {parts[0]}") if parts[0] in RUN_FILES else None
    if parts[0] in RUN_FOLDERS or parts[0].startswith("eval"):
        return run, f"in the run's {parts[0]}/ folder, which holds its records"
    return None


def check_output_file(key: str, path: str | os.PathLike, reads: dict | None = None) -> None:
    """A file the command will write, checked before the work that fills it: not a folder, not below a file
    (its folders are made as it is written), not one of the files the command reads (``reads``: their
    keys and paths, None or "-" for none), which the output would replace, not in an evaluation's folder (whose
    metrics.json scored the hypotheses there) and not one of a training run's records. ValueError naming the key
    otherwise."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{key}={path}: a folder, not a file; name the file to write (e.g. {path / 'out.txt'})")
    if _through_descriptors(path):  # opened anew, a file standard output was appended to (>>) was truncated
        raise ValueError(
            f"{key}={path}: a descriptor of this process; for standard output leave {key} out (or {key}=-) and "
            "redirect it with the shell (> or >>)"
        )
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"{key}={path}: {above} is a file, not a folder")
    if is_evaluation_folder(path.parent):
        raise ValueError(
            f"{key}={path}: in the folder of an evaluation, whose {EVALUATION_RECORD} records the files there "
            "(the hypotheses it scored); write elsewhere"
        )
    if (record := run_record_at(path)) is not None:
        run, what = record
        raise ValueError(f"{key}={path}: {what} (run folder {run}); write beside them or elsewhere")
    for read_key, read in (reads or {}).items():
        if read in (None, "", "-") or not path.exists() or not Path(read).exists():
            continue
        if path.samefile(read):
            raise ValueError(
                f"{key}={path}: the same file as {read_key}=; the output would replace what it holds: name another "
                f"{key}="
            )


# what input= holds, as translate.py and evaluate.py say it
SOURCE_LINES = "the source sentences, one per line, or input=- for standard input"


def check_input_file(key: str, path, what: str) -> None:
    """A file the command will read, checked before the model is loaded, so that a misspelt name is told at
    once: ``path`` (None: not given; "-": standard input) must name a file or a pipe, not a folder or nothing.
    ValueError naming the key and ``what`` the file holds otherwise."""
    if path is None or str(path) == "-":
        return
    if str(path).strip() == "":  # Path("") is the current folder
        raise ValueError(f"{key}={str(path)!r}: give a file of {what}")
    if not Path(path).exists() or Path(path).is_dir():  # a pipe (a process substitution) is readable
        found = "a folder, not a file" if Path(path).is_dir() else "no such file"
        raise ValueError(f"{key}={path}: {found} ({what})")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def atomic_save_figure(figure, path: str | os.PathLike, **savefig_kwargs) -> None:
    """``figure.savefig`` through a temporary file: the format is the one given, else the suffix of ``path``
    (which the temporary name lacks), else matplotlib's default."""
    if not savefig_kwargs.get("format"):
        import matplotlib

        savefig_kwargs["format"] = Path(path).suffix.lstrip(".") or matplotlib.rcParams["savefig.format"]
    with atomic_path(path) as tmp:
        figure.savefig(tmp, **savefig_kwargs)


def literal_text(draw):
    """A drawing function whose labels are data (a level, a token): matplotlib reads a "$" in them as a dollar
    sign, never as mathtext (a level d$x_1$ was drawn as dx1, and one that is no formula stopped the drawing),
    here alone, not in other figures of the process. Tick labels are made as the figure is drawn, so the
    function saves its figure within."""

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn
