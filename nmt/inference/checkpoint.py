"""Reading the checkpoints train.py writes: plain data only, loaded with ``weights_only=True``."""

import os
import re
import zipfile
import zlib
from pathlib import Path

import torch

from nmt.utils.io import RUN_RECORD

CHECKPOINT_KEY = "nmt"  # the checkpoint's section holding the config and tokenizers
FINGERPRINT = RUN_RECORD  # in a run folder: what determines its result, its data's text hashes included
CHECKPOINT_FORMAT = 1
CHECKSUM_KEY = "weights_crc32"  # in the section: weights_checksum of the state_dict as written


class CheckpointError(ValueError):
    """A file that cannot serve as an nmt checkpoint."""


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Load a checkpoint written by train.py with ``weights_only=True`` (no code runs from the file)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(missing_checkpoint(path))
    if not zipfile.is_zipfile(path) and (path.parent / "nmt_export.json").is_file():  # a file of export.py's
        raise CheckpointError(
            f"{path} is a file of a CTranslate2 export (nmt_export.json beside it), which this program does not "
            "read: give the run it was exported from, or translate with the export in Python "
            "(nmt.inference.export.CTranslate2Model, docs/usage.md)"
        )
    if not zipfile.is_zipfile(path):  # torch.save's format: torch's own error would be a bare KeyError or advice
        raise CheckpointError(  # to load it with weights_only=False, which runs code from the file
            f"{path} is not a PyTorch checkpoint, or was cut short (not the whole zip archive torch.save writes); "
            "pass a .ckpt written by train.py"
        )
    damaged = _damaged_member(path)
    if damaged:  # the weights' checksum covers the weights alone: the optimiser's state, the loops' and the
        # scheduler's are what a resumed run also takes, and torch.load reads them without checking the zip's own
        raise CheckpointError(
            f"{path}: {damaged}: the file was damaged after it was written; use another checkpoint of the run "
            "(an epoch checkpoint, last.ckpt)"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for foreign or damaged files, some without a message
        reason = type(err).__name__ + "".join(f": {line}" for line in str(err).splitlines()[:1])
        if "weights_only" in str(err):  # never its advice to load with weights_only=False
            reason = "it holds objects other than tensors and plain data, which are not loaded"
        raise CheckpointError(
            f"{path} is not a readable PyTorch checkpoint ({reason}); pass a .ckpt written by train.py"
        ) from None
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path} is a PyTorch file but not a checkpoint of nmt's train.py (it has no '{CHECKPOINT_KEY}' "
            "section with the config and tokenizers); pass a .ckpt from <run_dir>/checkpoints/"
        )
    section = checkpoint[CHECKPOINT_KEY]
    for key in ("config", "src_tokenizer", "tgt_tokenizer"):
        if not section.get(key):
            raise CheckpointError(
                f"{path}: the checkpoint's '{CHECKPOINT_KEY}' section lacks '{key}'; "
                "it was not written completely: use another checkpoint of the run"
            )
    expected = section.get(CHECKSUM_KEY)  # absent from checkpoints written before it was
    if expected is not None and weights_checksum(checkpoint["state_dict"]) != expected:
        raise CheckpointError(
            f"{path}: its weights differ from the checksum written with them: the file was damaged after it was "
            "written (or edited: an edit that keeps the nmt section deletes its 'weights_crc32'); use another "
            "checkpoint of the run (an epoch checkpoint, last.ckpt)"
        )
    # with a checksum that matched, the weights are as written, and a checkpoint is never written with a NaN
    bad = non_finite_weights(checkpoint["state_dict"]) if expected is None else []
    if bad:  # a model that translates every sentence to nothing, or scores NaN, said once here instead
        raise CheckpointError(
            f"{path}: {len(bad)} of its weight tensors hold NaN or infinite values ({', '.join(bad[:3])}"
            f"{', ...' if len(bad) > 3 else ''}): the file was edited or damaged (training never writes such a "
            "checkpoint); use another checkpoint of the run"
        )
    return checkpoint


# files whose every part passed its CRC, by (path, size, modification time, inode): a resume or an evaluation
# reads one checkpoint several times (its task, its settings, its weights), and each check reads the whole file
_VERIFIED: set[tuple] = set()


def _damaged_member(path: Path) -> str | None:
    """What of a checkpoint's zip archive fails the CRC-32 that torch.save wrote for each part (every part of
    the file: weights, optimiser state, loops), said for a message, or None."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key in _VERIFIED:
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        return f"its zip directory cannot be read ({type(err).__name__})"
    if damaged is not None:
        return f"its part {damaged} differs from the checksum the zip archive holds for it"
    _VERIFIED.add(key)
    return None


def non_finite_weights(state_dict: dict) -> list[str]:
    """The floating-point tensors of ``state_dict`` holding a NaN or an infinity, in key order."""
    return [
        key
        for key in sorted(state_dict)
        if isinstance(state_dict[key], torch.Tensor)
        and state_dict[key].is_floating_point()
        and not bool(torch.isfinite(state_dict[key]).all())
    ]


def missing_checkpoint(path: Path) -> str:
    """What to say of a checkpoint path that is not there: a run folder's name mistyped (runs/rnn_tny) was
    called a missing checkpoint file; the names nearest it in its folder, where there are any."""
    import difflib

    what = "no such checkpoint file" if path.suffix == ".ckpt" else "no such run folder or checkpoint file"
    parent = path.parent if path.parent.is_dir() else None
    names = sorted(p.name for p in parent.iterdir()) if parent else []
    near = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(str(parent / n) for n in near)}?" if near else ""
    return f"{path}: {what} (train.py writes runs as <run_dir>/checkpoints/*.ckpt){hint}"


def weights_checksum(state_dict: dict) -> int:
    """CRC-32 of every tensor's bytes, in key order: written with a checkpoint, checked when it is read, so
    that a file damaged after it was written (a disk, a copy) is named instead of translating wrongly."""
    crc = 0
    for key in sorted(state_dict):
        value = state_dict[key]
        if isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
            crc = zlib.crc32(data, zlib.crc32(key.encode(), crc))
    return crc


def weights_misfit(state_dict: dict, model: torch.nn.Module) -> str:
    """How a checkpoint's ``model.*`` weights do not fit ``model`` ("lacks 2 weight(s) (...); has other shapes
    of ..."), or "" when they fit."""
    weights = {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}
    expected = model.state_dict()
    found = [
        ("lacks", sorted(set(expected) - set(weights))),
        ("has unknown", sorted(set(weights) - set(expected))),
        (
            "has other shapes of",
            sorted(k for k in set(expected) & set(weights) if expected[k].shape != weights[k].shape),
        ),
    ]
    return "; ".join(
        f"{verb} {len(keys)} weight(s) ({', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
        for verb, keys in found
        if keys
    )


def epoch_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """The per-epoch checkpoints of a run, oldest first."""
    # by the epoch's number, not the name: epoch1000.ckpt sorts after epoch999.ckpt (names pad to 3 digits)
    return sorted(Path(folder).glob("epoch*.ckpt"), key=lambda p: (epoch_number(p.name), p.name))


def epochs_to_average(ckpt_path: str | os.PathLike) -> tuple[list[Path], bool]:
    """The epoch checkpoints an ``average_last`` over ``ckpt_path`` takes its last N from: those up to it when
    it is one of them (``epoch040.ckpt``), else all beside it (best.ckpt, last.ckpt); and whether it is one."""
    given = Path(ckpt_path).expanduser()
    available = epoch_checkpoints(given.parent)
    resolved = [p.resolve() for p in available]
    if given.resolve() in resolved:
        return available[: resolved.index(given.resolve()) + 1], True
    return available, False


def epoch_number(name: str) -> int:
    found = re.match(r"epoch(\d+)", name)
    return int(found.group(1)) if found else -1


def average_state_dicts(state_dicts: list[dict], names: list[str] | None = None) -> dict:
    """Element-wise mean of floating-point tensors (Vaswani et al. average the last checkpoints). Weights of
    other names or shapes than the first's (another model's checkpoint among them) are a CheckpointError
    naming the file (``names``), not a KeyError."""
    first_dict = state_dicts[0]
    for index, other in enumerate(state_dicts[1:], start=1):
        misfit = sorted(set(first_dict) ^ set(other)) or [
            k for k in first_dict if getattr(first_dict[k], "shape", None) != getattr(other[k], "shape", None)
        ]
        if misfit:
            name = names[index] if names else f"checkpoint {index + 1}"
            first = names[0] if names else "the first"
            raise CheckpointError(
                f"{name} holds other weights than {first} ({misfit[0]}{' ...' if len(misfit) > 1 else ''}): "
                "checkpoints of one run are averaged, not of other models; remove it, or average fewer"
            )
    averaged = {}
    for key, first in state_dicts[0].items():
        if torch.is_floating_point(first):
            averaged[key] = sum(sd[key].double() for sd in state_dicts).div(len(state_dicts)).to(first.dtype)
        else:
            averaged[key] = first
    return averaged
