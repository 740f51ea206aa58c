"""Where an evaluation writes: one folder per evaluation, and none made under other settings replaced unsaid.

A run's own folders (``<run_dir>/eval/<split>_<search>...``) are named by the settings, so another setting
gets another folder; what the name cannot say is kept beside it: an evaluation of other text (a ``files:`` set
edited since) goes into ``<folder>_text<hash>``, of other code into ``<folder>_code<hash>``. A folder given
by ``out_dir`` is taken as it is, so one that holds an evaluation made under other settings (another beam,
checkpoint or set: the run's own final scores, say) is refused, naming what differs; the same settings are
scored again in place. Every record names the weights it scored (each checkpoint's update and checksum), so
that a run continued since (last.ckpt, best.ckpt of other weights under the same name) is told apart.
"""

import json
from pathlib import Path

from nmt.utils import code as code_record
from nmt.utils.io import is_evaluation_record  # looked up at each call (tests stand in for an edit of nmt/)


def evaluation_folder(folder: Path, chosen: bool, run_dir: Path, identity: dict) -> tuple[Path, str]:
    """Where an evaluation of ``identity`` (what its metrics.json records of its settings: checkpoints,
    weights, split, search, text, ...) writes, and the code's hash: ``folder`` as its settings name it, or as
    ``out_dir`` gave it (``chosen``), by the rules above."""
    folder = evaluation_folder_for_text(folder, chosen, identity["text"])  # then, of that text, other code's
    folder, code = evaluation_folder_for_code(folder, chosen, run_dir)
    made = _record(folder / "metrics.json")
    if chosen and (unknown := _unrecorded_files(folder, made)):  # a user's files: no record says what made them
        raise ValueError(
            f"out_dir={folder} holds {', '.join(unknown)}, which no evaluation's record there accounts for, and this "
            "evaluation would replace: they are kept; give another out_dir, or remove them"
        )
    if chosen:  # before its first file: an evaluation cut short (a full disk, Ctrl-C) is taken up again there
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MARK).touch()
    differences = settings_differences(made, {**identity, "code": code}) if made else []
    if chosen and [d for d in differences if not d.startswith("code:")]:
        raise ValueError(
            f"out_dir={folder} holds an evaluation made under other settings ({'; '.join(differences)}): it is "
            "kept; give another out_dir, or remove that folder to replace it"
        )
    if differences:  # a run's own folder of weights since replaced (a run continued), or out_dir's of older code
        print(f"note: {folder} held an evaluation of the same name made under other settings "
              f"({'; '.join(differences)}): replaced by this one")  # fmt: skip
    return folder, code


def settings_differences(made: dict, identity: dict) -> list[str]:
    """``key: old -> new`` for each of ``identity``'s keys that ``made`` (an earlier record) holds otherwise;
    a key an older record lacks is not compared (nor a search option added since). The same weights at another
    path (a run folder moved or copied: checksums recorded and equal) are the same checkpoints."""
    differences = []
    same_weights = made.get("weights") == identity.get("weights") and all(
        isinstance(w, dict) and w.get("crc32") is not None for w in identity.get("weights") or [None]
    )
    for key, value in identity.items():
        if key not in made or made[key] == value or (key == "checkpoints" and same_weights):
            continue
        old = made[key]
        if isinstance(value, dict) and isinstance(old, dict):  # the search: its options one by one
            differences += [f"{key}.{k}: {old[k]!r} -> {value[k]!r}" for k in value if k in old and old[k] != value[k]]
        elif _shown(key, old) == _shown(key, value):  # the same file names in other folders
            differences.append(f"{key}: {old!r} -> {value!r}")
        else:
            differences.append(f"{key}: {_shown(key, old)} -> {_shown(key, value)}")
    return differences


def _shown(key: str, value) -> str:
    if key == "weights" and isinstance(value, list):  # each checkpoint's update
        return "updates " + ", ".join(str(w.get("update") if isinstance(w, dict) else w) for w in value)
    if key == "checkpoints" and isinstance(value, list):
        return ", ".join(Path(str(p)).name for p in value)
    if key in ("code", "text") and isinstance(value, str):
        return value[:8]
    return repr(value)


# what an evaluation writes into its folder (attention maps aside, which are its own by their names), and the
# mark an out_dir gets before the first of them
EVALUATION_FILES = ("metrics.json", "hypotheses.txt", "references.txt", "sources.txt")
MARK = ".nmt_evaluation"


def _unrecorded_files(folder: Path, made: dict | None) -> list[str]:
    """The files of ``folder`` an evaluation would write over where no evaluation's record there names them:
    its metrics.json unreadable, not an evaluation's, or missing beside outputs (they were replaced unsaid)."""
    present = [name for name in EVALUATION_FILES if (folder / name).is_file()]
    if (folder / MARK).is_file() or is_evaluation_record(made):
        return []
    return present


def _record(path: Path) -> dict | None:
    try:
        made = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return made if isinstance(made, dict) else None


def evaluation_folder_for_code(folder: Path, chosen: bool, run_dir: Path) -> tuple[Path, str]:
    """Where an evaluation writes, and the hash of the code it is made with (recorded in its metrics.json).
    ``folder``: the folder its settings name (``chosen``: given by out_dir, taken as it is). A run's folder
    that holds an evaluation made under other code (the run's own final scores, say) keeps it: this one goes
    into ``<folder>_code<hash>``, said once. An evaluation recorded without its code (made before the code
    was recorded) is taken as made with the code of the run in ``run_dir`` (its fingerprint.json); without
    that either, it is replaced, as before."""
    return _for_code(folder, folder / "metrics.json", chosen, run_dir, "an evaluation")


def evaluation_folder_for_text(folder: Path, chosen: bool, text: str) -> Path:
    """Where an evaluation of a set whose text hashes to ``text`` writes: a folder that holds one of other text
    under the same name (a ``files:`` set edited since) keeps it, and this one goes into
    ``<folder>_text<hash>``, said once. One recorded without its text (made before texts were recorded) is
    replaced, as before; ``chosen`` (out_dir): taken as it is."""
    record = folder / "metrics.json"
    if chosen or not record.is_file():
        return folder
    try:
        made = json.loads(record.read_text()).get("text")
    except (OSError, ValueError, AttributeError):
        made = None
    if made in (None, text):
        return folder
    other = folder.with_name(f"{folder.name}_text{text[:8]}")
    print(f"note: {folder} holds an evaluation of other text under this set's name (its text {str(made)[:8]}, "
          f"this {text[:8]}): kept; this one goes into {other}")  # fmt: skip
    return other


def grid_file_for_code(path: Path, chosen: bool, run_dir: Path) -> tuple[Path, str]:
    """Where a decoding grid's record goes, and the code's hash, as :func:`evaluation_folder_for_code` says
    for an evaluation: a grid recorded under other code is kept, and this one goes into
    ``<name>_code<hash>.json``."""
    return _for_code(path, path, chosen, run_dir, "a decoding grid", ".json")


def _for_code(path: Path, record: Path, chosen: bool, run_dir: Path, what: str, suffix: str = "") -> tuple[Path, str]:
    code = code_record.code_hash()
    made = None
    if record.is_file():
        for source, read in ((record, lambda d: d.get("code")),
                             (run_dir / "fingerprint.json", lambda d: (d.get("code") or {}).get("hash"))):  # fmt: skip
            try:
                made = read(json.loads(source.read_text()))
            except (OSError, ValueError, AttributeError):
                made = None
            if made:
                break
    if chosen or made in (None, code):
        return path, code
    other = path.with_name(f"{path.name.removesuffix(suffix)}_code{code[:8]}{suffix}")  # a folder: no suffix
    print(f"note: {path} holds {what} made under other code (its code {made[:8]}, this {code[:8]}): kept; this one "
          f"goes into {other}")  # fmt: skip
    return other, code
