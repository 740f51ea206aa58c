"""A run's identity: what determines its result, recorded in its folder's ``fingerprint.json`` and compared
when the folder is used again.

- The settings: the resolved config minus the keys that cannot change the result (output paths, loggers,
  progress display, threads: :data:`NOT_RESULT_KEYS`).
- The code: the hash of ``nmt/`` and the config groups training composes (nmt.utils.code; with the git
  commit, and the libraries' versions, recorded but not compared: an upgrade would otherwise void every
  finished run).
- The data, once read: the corpus, each split's size and text hash, the tokenizers and segmenters.

A rerun resumes only a run of the same identity; otherwise it stops and lists what differs
(``resume=force`` continues anyway and says so, except with other tokenizers, whose pieces the
checkpoint's embeddings index)."""

import json
import subprocess
from pathlib import Path

from nmt.inference.checkpoint import FINGERPRINT
from nmt.training.run_folder import RunFolderError, finished_results, holds_work, resumable
from nmt.utils.code import code_hash
from nmt.utils.io import atomic_write_json

# keys that say where and how a run is shown or stored, never what it computes
NOT_RESULT_KEYS = (
    "run_dir",
    "ckpt_path",
    "cache_dir",
    "resume",
    "name",
    "group",
    "tags",
    "logger",
    "threads",
    "data.root",
    # where one's own files are (data=files, lm_files), not what they hold: their text is the run's identity
    # (data.text, each split's hash, compared once read), so a corpus moved is the same data, an edited one not
    "data.train",
    "data.val",
    "data.test",
    "data.num_workers",
    "data.batches_on_device",
    "check_every",  # when the guard is read, not what it skips (the same updates, tested)
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "progress",
    "checkpoint.resume_fallback",
    "checkpoint.every_n_train_steps",  # when last.ckpt is written between epochs, not what training does (tested)
    "checkpoint.write_behind",  # when a checkpoint's bytes are written, not what they hold
    "validation.scores_in",  # where validation's scores are computed, not what they are (tested)
    "task.scores_in",
)


# the libraries whose versions a result may depend on (numerics, scoring, tokenisation): recorded with every
# run and shown in a sweep's report, not compared (an upgrade would otherwise void every finished run)
LIBRARIES = ("torch", "lightning", "numpy", "sentencepiece", "sacrebleu")


def library_versions() -> dict:
    """Python's and :data:`LIBRARIES`' versions, as installed (read without importing them)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def code_version() -> dict:
    """The hash of the code that computes results (compared), with the git commit and whether it had
    uncommitted changes, or the package version outside git, and the libraries' versions (for the record)."""
    try:
        return {"hash": code_hash(), **_git_version(), "libraries": library_versions()}
    except OSError:
        return {"hash": "unknown", "libraries": library_versions()}


def _git_version() -> dict:
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "nmt", "conf"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return {"package": version("nmt")}
        except PackageNotFoundError:
            return {"package": "unknown"}


def _flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        flat = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


# where data=files gives a set as files, the size (and, both given, the seed) of a set split off data.train: read
# by nothing, so out of the identity (a run that gave one before they were refused still matches its command)
UNREAD_SPLIT_KEYS = {"val": ("data.valid_size",), "test": ("data.test_size",), "both": ("data.split_seed",)}


def result_config(config: dict) -> dict:
    """The flattened config keys that can change a run's result."""
    flat = _flatten(config)
    unread = set()
    if all(f"data.{key}" in flat for key in ("val", "test", "split_seed")):  # data=files' keys
        given = [split for split in ("val", "test") if flat[f"data.{split}"] not in (None, "")]
        unread = {key for split in given for key in UNREAD_SPLIT_KEYS[split]}
        unread |= set(UNREAD_SPLIT_KEYS["both"]) if len(given) == 2 else set()
    return {
        key: value
        for key, value in flat.items()
        if key not in unread and not any(key == k or key.startswith(k + ".") for k in NOT_RESULT_KEYS)
    }


def fingerprint(config: dict) -> dict:
    return {"config": result_config(config), "code": code_version()}


def differences(saved: dict, current: dict) -> list[str]:
    """One entry per key whose value differs: 'key: saved -> current'. A key that no longer counts (added to
    NOT_RESULT_KEYS after the folder's run was recorded with it) is left out on both sides."""
    old, new = result_config(saved.get("config", {})), result_config(current.get("config", {}))
    lines = [
        f"{key}: {old.get(key, '(absent)')!r} -> {new.get(key, '(absent)')!r}"
        for key in sorted(set(old) | set(new))
        if old.get(key, "(absent)") != new.get(key, "(absent)")
    ]
    old_code, new_code = saved.get("code", {}), current.get("code", {})
    if "hash" in old_code and old_code.get("hash") != new_code.get("hash"):
        before, now = old_code.get("commit", "?")[:12], new_code.get("commit", "?")[:12]
        edits = {(False, True): ", now with uncommitted changes", (True, False): ", then with uncommitted changes"}
        edits[True, True] = ", each time with uncommitted changes"
        edited = edits.get((bool(old_code.get("dirty")), bool(new_code.get("dirty"))), "")
        commits = f" (commit {before} -> {now}{edited})" if before != now else f" (commit {now} both times{edited})"
        lines.append(f"code: the source of nmt/ or of a config group changed{commits}")
    return lines


def unfinished_alike(run_dir: Path, current: dict) -> list[Path]:
    """The folders beside ``run_dir`` (a name's dated folders, runs/<name>/<date_time>) holding a run of these
    settings and code that stopped before its end with a state to resume from, newest first: a killed command
    run again without run_dir trains afresh in a new dated folder, which it then says."""
    found = []
    for folder in sorted(run_dir.parent.glob("*/" + FINGERPRINT), reverse=True):
        folder = folder.parent
        if folder == run_dir or not resumable(folder) or finished_results(folder) is not None:
            continue
        try:
            saved = json.loads((folder / FINGERPRINT).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(saved, dict) and not differences(saved, current):
            found.append(folder)
    return found


def saved_fingerprint(run_dir: Path, force: bool = False, holds: bool | None = None) -> tuple[dict | None, str | None]:
    """The folder's recorded fingerprint and, where it had to be rebuilt, a line saying so. Without a
    readable ``fingerprint.json`` a folder that holds work is judged by its ``config.yaml`` (the settings;
    the code version is then unknown); without either, its settings cannot be checked: RunFolderError,
    unless ``force``. None for a folder with nothing recorded (``holds``: whether it holds work, if the
    caller knows better than its checkpoints and results, e.g. a sweep's record of the run)."""
    path = run_dir / FINGERPRINT
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if isinstance(saved, dict):
                return saved, None
            problem = f"{path} is not a fingerprint (a JSON object)"
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            problem = f"{path} cannot be read ({err})"
    else:
        problem = f"{run_dir} holds a run's checkpoints or results but no {FINGERPRINT}"
    if not (holds_work(run_dir) if holds is None else holds):
        return None, None  # nothing trained here: whatever the record says binds no run
    config_path = run_dir / "config.yaml"
    try:
        import yaml

        config = yaml.safe_load(config_path.read_text())
        if not isinstance(config, dict):
            raise ValueError("not a mapping")
    except (OSError, ValueError, yaml.YAMLError) as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        if force:
            return None, f"warning: resume=force: {problem}, and {config_path} cannot be read ({detail}): continuing"
        raise RunFolderError(
            f"{problem}, and {config_path} cannot be read ({detail}): the run's settings cannot be checked; "
            "choose another run_dir, or pass resume=force to continue it as this command's run"
        ) from None
    note = f"note: {problem}: its settings are taken from {config_path} (its code version is unknown)"
    return {"config": result_config(config), "code": {}}, note


def check_identity(run_dir: Path, current: dict, force: bool, saved: dict | None = None) -> str | None:
    """Compare the folder's recorded fingerprint (``saved``: :func:`saved_fingerprint`) with this run's.
    Same (or nothing recorded): None. Other settings: RunFolderError listing the keys, unless ``force``,
    which returns a warning to print."""
    if saved is None:
        return None
    changed = differences(saved, current)
    if not changed:
        return None
    listing = "; ".join(changed[:12]) + (f"; and {len(changed) - 12} more" if len(changed) > 12 else "")
    code = sum(line.startswith("code: ") for line in changed)  # an edit of nmt/ or conf/ alone is not a setting
    other = "other code" if code == len(changed) else "other settings and code" if code else "other settings"
    if force:
        return f"warning: resume=force: continuing {run_dir} under {other} ({listing})"
    raise RunFolderError(
        f"{run_dir} holds a run made with {other} ({listing}); choose another run_dir, or pass "
        f"resume=force to continue it anyway{scoring_only(run_dir, saved, current)}"
    )


def scoring_only(run_dir: Path, saved: dict, current: dict) -> str:
    """Where only the final scores' decoding differs (decode.*, test_average_last): the evaluate.py command
    that scores the trained run so, without training it again (resume=force was the only way offered)."""
    old, new = result_config(saved.get("config", {})), result_config(current.get("config", {}))
    changed = [key for key in sorted(set(old) | set(new)) if old.get(key, "(absent)") != new.get(key, "(absent)")]
    if not changed or not all(key.startswith("decode.") or key == "test_average_last" for key in changed):
        return ""
    if (saved.get("code") or {}).get("hash") != (current.get("code") or {}).get("hash"):
        return ""  # other code too: a rerun trains under it

    def value(v) -> str:
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    average = new.get("test_average_last") or 0
    where = (
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'} average_last={average}"
        if average > 1
        else (f"ckpt_path={run_dir}")
    )
    options = " ".join(f"{key}={value(new.get(key))}" for key in changed if key.startswith("decode."))
    return (
        "; only how its final scores decode differs, which needs no training: python evaluate.py "
        f"{where} {options} scores it so (split=val to choose the decoding, as the test is never tuned on)"
    )


# counts of the data report that the identity leaves out: derived from the text its hashes already cover, the
# tokenizers and the settings, and added after runs were recorded without them, or counted otherwise since
# (src_truncated; the sentences seen in training, now as the model reads them); left out of a folder's
# recorded identity too when it is compared
REPORT_ONLY = ("sources_also_in_train", "targets_also_in_train", "src_truncated")


def data_identity(description: str, report: dict, text: dict, src_tokenizer, tgt_tokenizer) -> dict:
    """What the data was: the corpus and languages, the pairs (or tokens) of each split, a hash of each
    split's text, a hash of the tokenizers trained on it, and the word segmenters before them."""
    import hashlib

    digest = hashlib.sha256(src_tokenizer.model_proto + tgt_tokenizer.model_proto).hexdigest()[:16]
    sizes = {
        split: {k: v for k, v in counts.items() if isinstance(v, int) and k not in REPORT_ONLY}
        for split, counts in report.items()
    }
    segmenters = [src_tokenizer.segmenter.spec(), tgt_tokenizer.segmenter.spec()]
    return {"corpus": description, "splits": sizes, "text": text, "tokenizers": digest, "segmenters": segmenters}


# a checkpoint's embeddings index its tokenizers' pieces of its segmenters' words: continued with others, the
# model would read every token as another, so not even resume=force continues it (a folder's record from
# before the segmenters were part of it has none, and only its tokenizers are compared)
READS_THE_PIECES = ("tokenizers", "segmenters")


def data_differences(saved: dict, data: dict) -> list[str]:
    """One entry per data record that differs, the text's by split: ``data.text (val)``."""
    said = []
    for key in sorted(set(saved) | set(data)):
        before, now = saved.get(key), data.get(key)
        if before == now:
            continue
        if key == "text" and isinstance(before, dict) and isinstance(now, dict):
            splits = [s for s in sorted(set(before) | set(now)) if before.get(s) != now.get(s)]
            said.append(f"data.text ({', '.join(splits)})")
        else:
            said.append(f"data.{key}")
    return said


def comparable_data(saved: dict | None, data: dict) -> tuple[dict | None, dict]:
    """A folder's data record and this run's, as they are compared: a record from before segmenters kept
    their user dictionary's words names only its file, and counts left out of the record since are dropped."""
    data = dict(data)
    if saved and len(saved.get("segmenters") or []) == len(data.get("segmenters") or []):
        # a record from before segmenters kept their user dictionary's words named only its file: compared so
        data["segmenters"] = [
            {k: v for k, v in now.items() if k != "user_words" or "user_words" in before}
            for before, now in zip(saved["segmenters"], data["segmenters"], strict=True)
        ]
    if saved and isinstance(saved.get("splits"), dict):  # counts left out since the folder's run recorded them
        saved = {
            **saved,
            "splits": {
                split: {k: v for k, v in counts.items() if k not in REPORT_ONLY} if isinstance(counts, dict) else counts
                for split, counts in saved["splits"].items()
            },
        }
    return saved, data


def check_data(run_dir: Path, current: dict, force: bool, resuming: bool = False) -> str | None:
    """After the data is read: the folder's run was trained on the same data, or RunFolderError (a
    warning with ``force``, unless a checkpoint is resumed whose tokenizers or segmenters differ)."""
    path = run_dir / FINGERPRINT
    saved = json.loads(path.read_text()).get("data") if path.is_file() else None
    saved, data = comparable_data(saved, current["data"])
    if not saved or saved == data:
        return None
    changed = [k for k in sorted(set(saved) | set(data)) if saved.get(k) != data.get(k)]
    what = ", ".join(data_differences(saved, data))
    unreadable = [k for k in READS_THE_PIECES if k in changed and k in saved]
    if resuming and unreadable:
        # the tokenizers are trained on the training text: where that text changed, it is the cause to name
        text_before, text_now = saved.get("text") or {}, data.get("text") or {}
        retrained = bool(text_before) and bool(text_now) and text_before.get("train") != text_now.get("train")
        why = (
            "its training text changed since (data.text differs for train), and the tokenizers trained on it with "
            "it: give the text the run was trained on, or choose another run_dir"
            if retrained
            else "give the data settings the run had (its config.yaml: data.tokenizer, data.segmenter), or choose "
            "another run_dir. If they are the run's, its training text holds tabs or other separators: a tokenizer "
            "made before they were read as spaces kept them, and one made now does not"
        )
        raise RunFolderError(
            f"{run_dir} holds a checkpoint trained with other {' and '.join(unreadable)} ({what} differ), whose "
            f"embeddings index other pieces: not even resume=force continues it; {why}"
        )
    if force:
        return f"warning: resume=force: continuing {run_dir} on other data ({what})"
    raise RunFolderError(
        f"{run_dir} holds a run trained on other data ({what} differ); choose another run_dir, or pass "
        "resume=force to continue it anyway"
    )


def saved_data_record(run_dir: Path) -> dict:
    """The folder's record of its data ({} where it has none or it cannot be read)."""
    try:
        return json.loads((run_dir / FINGERPRINT).read_text()).get("data") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def saved_text(run_dir: Path) -> dict | None:
    """The folder's record of its data's text, a hash per split (None: unreadable, or recorded before text
    hashes were)."""
    try:
        saved = json.loads((run_dir / FINGERPRINT).read_text()).get("data") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return saved.get("text") or None


def current_text(cfg, task) -> dict:
    """The text hash per split of the data ``cfg`` reads now (never downloading it); raises where the data
    cannot be read."""
    from omegaconf import OmegaConf

    data = OmegaConf.create(OmegaConf.to_container(cfg.data, resolve=True))
    if "download" in data:  # never a download to compare a run's text
        data.download = False
    return task.build_datamodule(data, cfg.cache_dir, cfg.seed).text_hashes()


def moved_without_text(run_dir: Path, config: dict) -> list[str]:
    """A folder recorded before text hashes were: the data files' paths it recorded that ``config`` (this
    command's, resolved) gives otherwise, as 'key: saved -> now'. Their text cannot be compared, and the paths
    left the identity for the text to decide: such a run is not taken for this data."""
    try:
        recorded = json.loads((run_dir / FINGERPRINT).read_text()).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return []
    now = _flatten(config)
    keys = [f"data.{split}" for split in ("train", "val", "test")]
    return [
        f"{key}: {recorded[key]!r} -> {now.get(key)!r}"
        for key in keys
        if key in recorded and recorded[key] != now.get(key)
    ]


def changed_splits(saved: dict, now: dict) -> list[str]:
    """The splits whose text differs between a folder's record and the data read now."""
    return sorted(split for split in set(saved) | set(now) if saved.get(split) != now.get(split))


def record_identity(run_dir: Path, current: dict) -> None:
    atomic_write_json(run_dir / FINGERPRINT, current)
