"""A trained model from its checkpoint alone: config, tokenizers and weights are all inside it, so a
machine without the training data can use it."""

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.data.tokenizer import Tokenizer
from nmt.data.vocab import load_tokenizer
from nmt.inference.checkpoint import (
    CHECKPOINT_KEY,
    CHECKSUM_KEY,
    FINGERPRINT,
    CheckpointError,
    average_state_dicts,
    epoch_checkpoints,
    epoch_number,
    epochs_to_average,
    load_checkpoint,
    weights_misfit,
)
from nmt.tasks import Task, build_task, task_config


@dataclass
class LoadedModel:
    model: torch.nn.Module
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    config: dict
    checkpoints: list[str]
    task: Task
    data_text: dict[str, str] | None = None  # each split's text hash when trained (older checkpoints: None)
    # each checkpoint's update and weights' checksum: what an evaluation was made of, where a run continued
    # since and the same checkpoint path (last.ckpt, best.ckpt, an average's epochs) holds other weights
    weights: list[dict] | None = None

    @property
    def name(self) -> str:
        """How evaluation folders name the weights: the checkpoint's stem (``best``, ``last``, ``epoch040``);
        a mean of epoch checkpoints as ``best`` when they are the run's newest (the mean its final scores
        use), else by the last of them, so that two means never share a folder."""
        last = Path(self.checkpoints[-1])
        if len(self.checkpoints) == 1:
            return last.stem
        newest = epoch_checkpoints(last.expanduser().parent)
        return "best" if newest and newest[-1].resolve() == last.expanduser().resolve() else last.stem

    @property
    def run_dir(self) -> Path:
        """The run folder of the (first) checkpoint: <run_dir>/checkpoints/<name>.ckpt; a checkpoint kept
        elsewhere (not in a ``checkpoints`` folder) is its own folder's (its evaluations go beside it, not
        into the folder above)."""
        return run_folder_of(self.checkpoints[0])


def pick_device(name: str = "auto") -> torch.device:
    """``device``: auto (a GPU when there is one), cpu, cuda or cuda:N; one that this machine lacks is named."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device={name}: not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):  # mps, xpu: a traceback from PyTorch; meta: a failure at each line
        raise ValueError(f"device={name}: not a device this program decodes on; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name}: this machine has no CUDA GPU that PyTorch can use; use device=auto or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={name}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to cuda:N-1")
    return device


def resolve_checkpoint_path(path: str | os.PathLike) -> Path:
    """A checkpoint file as given, or the best checkpoint of a run folder (or of its checkpoints/ folder);
    a folder without one lists the checkpoints it holds."""
    if path is None or not str(path).strip():  # Path("") is ".", the current folder
        raise CheckpointError("ckpt_path is empty: give a checkpoint file or a run folder (its best.ckpt)")
    path = Path(str(path)).expanduser()  # a folder named by digits (ckpt_path=2016) arrives as a number
    if not path.is_dir():
        return path
    folder = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    if (folder / "best.ckpt").is_file():
        return folder / "best.ckpt"
    found = sorted(p.name for p in folder.glob("*.ckpt"))
    if not found and (path / "nmt_export.json").is_file():  # export.py's output, not a run
        raise CheckpointError(
            f"ckpt_path={path} is a CTranslate2 export (nmt_export.json), which this program does not read: give "
            "the run it was exported from, or translate with the export in Python (nmt.inference.export."
            "CTranslate2Model, docs/usage.md)"
        )
    if not found:
        raise CheckpointError(
            f"ckpt_path={path} is a folder without checkpoints (train.py writes <run_dir>/checkpoints/)"
        )
    raise CheckpointError(f"ckpt_path={path} is a folder without best.ckpt: pass one of {found} inside {folder}")


def checkpoint_task(ckpt_path: str | os.PathLike) -> Task:
    """The task of the run that wrote the checkpoint (without building its model)."""
    return build_task(task_config(load_checkpoint(ckpt_path)[CHECKPOINT_KEY]["config"]))


def load_model(ckpt_path: str | os.PathLike, average_last: int = 0, device: str = "auto") -> LoadedModel:
    """The model, tokenizers, config and task stored in a checkpoint; with ``average_last=N`` the
    weights are the mean of the run's last N epoch checkpoints, those up to ``ckpt_path`` when it is one
    of them (``epoch040.ckpt``: epochs 40-N+1 to 40), else the newest N (best.ckpt, last.ckpt)."""
    if type(average_last) is not int or average_last < 0:  # a negative one loaded the checkpoint's own weights
        raise CheckpointError(
            f"average_last={average_last!r}: 0 or 1 (the checkpoint's own weights) or N >= 2 (the mean of the last "
            "N epoch checkpoints beside it)"
        )
    checkpoint = load_checkpoint(ckpt_path)
    # absolute: the paths are written into the results of evaluations, read later from anywhere
    paths = [str(Path(ckpt_path).expanduser().absolute())]
    state_dict = checkpoint["state_dict"]
    weights = [weights_record(checkpoint)]
    if average_last > 1:
        available, ends_at_given = epochs_to_average(ckpt_path)  # an epoch checkpoint: the N up to it
        if len(available) < average_last:
            fewer = (
                f"pass average_last={len(available)} or fewer, "
                if len(available) >= 2
                else "pass average_last=0 (the checkpoint's own weights), "
            )
            raise CheckpointError(
                f"average_last={average_last}: only {len(available)} epoch checkpoint(s) beside {ckpt_path}"
                f"{' up to it' if ends_at_given else ''}; "
                f"{fewer}or keep more with checkpoint.keep_last_epochs when training"
            )
        candidates = available[-average_last:]
        paths = [str(Path(p).expanduser().absolute()) for p in candidates]
        averaged = [load_checkpoint(p) for p in candidates]
        missing = missing_epochs([checkpoint, averaged[-1]], available, average_last, ends_at_given)
        if missing:  # an older epoch stood in for it, and the scores were labelled the last N epochs' all the same
            newest = available[-1]
            if all(epoch_number(name) > epoch_number(newest.name) for name in missing):  # fewer cannot help
                instead = f"or average the epochs up to {newest.name}: ckpt_path={newest} average_last={average_last}"
            else:
                instead = "or pass fewer (average_last=N over the epochs after it)"
            raise CheckpointError(
                f"average_last={average_last}: {', '.join(missing)}, among the last {average_last} epoch checkpoints "
                f"the run kept beside {ckpt_path}, {'is' if len(missing) == 1 else 'are'} missing (deleted or "
                f"moved?); restore {'it' if len(missing) == 1 else 'them'}, {instead}"
            )
        state_dict = average_state_dicts([c["state_dict"] for c in averaged], paths)
        weights = [weights_record(c) for c in averaged]
    section = checkpoint[CHECKPOINT_KEY]
    src_tokenizer = load_tokenizer(section["src_tokenizer"], section.get("src_segmenter"))
    tgt_tokenizer = load_tokenizer(section["tgt_tokenizer"], section.get("tgt_segmenter"))
    config = section["config"]
    task = build_task(task_config(config))
    model = task.build_model(config["model"], src_tokenizer, tgt_tokenizer)
    what = weights_misfit(state_dict, model)
    if what:
        raise CheckpointError(
            f"{', '.join(paths)}: the weights do not fit the model its config describes: it {what}; the file is "
            "damaged or was edited: use another checkpoint of the run (an epoch checkpoint, last.ckpt)"
        )
    model.load_state_dict({k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")})
    model.to(pick_device(device)).eval()
    data_text = section.get("data_text") or recorded_text(run_folder_of(ckpt_path))
    return LoadedModel(model, src_tokenizer, tgt_tokenizer, config, paths, task, data_text, weights)


def missing_epochs(records: list[dict], available: list[Path], count: int, up_to_given: bool) -> list[str]:
    """The names of the last ``count`` epoch checkpoints the run kept (the epoch checkpoints' callback state in
    ``records``: the checkpoint given and the newest one averaged) that are not among ``available``, up to the
    newest available one when the given checkpoint is itself an epoch's. Epochs are not assumed consecutive
    (validation every N epochs saves every N); checkpoints older than that state tell nothing: []."""
    kept: set[str] = set()
    for record in records:
        for key, state in (record.get("callbacks") or {}).items():
            if str(key).startswith("EpochCheckpoints") and isinstance(state, dict):
                kept |= {Path(str(path)).name for path in state.get("best_k_models") or {}}
    if not kept or not available:
        return []
    names = {p.name for p in available}
    limit = epoch_number(available[-1].name) if up_to_given else None
    ordered = sorted((n for n in kept if limit is None or epoch_number(n) <= limit), key=epoch_number)
    return [name for name in ordered[-count:] if name not in names]


def weights_record(checkpoint: dict) -> dict:
    """A checkpoint's update and the checksum written with its weights (None in checkpoints older than it)."""
    return {"update": checkpoint.get("global_step"), "crc32": checkpoint[CHECKPOINT_KEY].get(CHECKSUM_KEY)}


def run_folder_of(ckpt_path: str | os.PathLike) -> Path:
    """<run_dir> of <run_dir>/checkpoints/<name>.ckpt; a checkpoint kept outside a ``checkpoints`` folder:
    its own folder (its evaluations go beside it, not into the folder above)."""
    folder = Path(ckpt_path).expanduser().resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


def recorded_text(run_dir: Path) -> dict[str, str] | None:
    """Each split's text hash from the run folder's record, for a checkpoint saved before checkpoints kept
    them (None where the checkpoint lies outside its run folder, or the record has none)."""
    try:
        text = json.loads((run_dir / FINGERPRINT).read_text())["data"]["text"]
        return dict(text) if isinstance(text, dict) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
