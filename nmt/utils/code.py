"""The hash of the code that computes results: the package's source and the config groups training composes.

A run folder records it with the settings (nmt.training.run_identity), and an evaluation with its scores, so
that a result made under other code is never taken, or overwritten, as one made under this code."""

import hashlib
import io
import os
import re
import sys
import tokenize
from pathlib import Path

import yaml

from nmt.utils.configs import VALUE_GROUPS
from nmt.utils.io import atomic_write_text

# configs out of the hash: the other entry points', and the sweeps' grids and tuned settings, which reach a run
# as command-line overrides (in its recorded config): writing conf/tuned/<name>.yaml, as `sweep.py tune` does,
# leaves every finished run valid. Experiments and recipes too: they only set values, which reach a run's
# recorded settings and are compared there key by key (an edited recipe is named by the keys it changed), so
# a user's new experiment file voids no finished run of the others (a new <data>_<model> recipe is those runs'
# default: their settings differ, said so)
NOT_TRAINING_CONFIGS = (
    "evaluate.yaml",
    "translate.yaml",
    "serve.yaml",
    "export.yaml",
    "sweep.yaml",
    "grid",
    "tuned",
    *VALUE_GROUPS,
)


def code_hash() -> str:
    """A hash of what computes a result: the package's source and the config groups training composes (not
    the experiments and recipes, whose values the run's settings hold), their comments and blank lines aside
    (:func:`meaning`). A commit that changes neither (documents, tests, benchmarks, a grid, a recipe, a
    comment) keeps it; an uncommitted edit of the code changes it.

    Reading the meaning of some 200 files takes a second or more, at the start of every run, evaluation and
    sweep plan; the hash is kept in the cache (``NMT_CACHE``) under the digest of the files' bytes, so that
    the same files are read that way once. Any change of a byte, this file's included, is another key."""
    root = Path(__file__).resolve().parents[2]
    configs = [
        p for p in (root / "conf").rglob("*.yaml") if p.relative_to(root / "conf").parts[0] not in NOT_TRAINING_CONFIGS
    ]
    files = [
        (str(path.relative_to(root)), path.read_bytes(), path.suffix)
        for path in sorted([*(root / "nmt").rglob("*.py"), *configs])
    ]
    raw = hashlib.sha256(f"{sys.version_info[:2]} {yaml.__version__}".encode())  # what reads the meaning
    for name, data, _ in files:
        raw.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    key = raw.hexdigest()
    if key in _HASHES:
        return _HASHES[key]
    stored = _stored_hash(key)
    if stored is None:
        digest = hashlib.sha256()
        for name, data, suffix in files:
            digest.update(name.encode() + b"\0" + meaning(data, suffix) + b"\0")
        stored = digest.hexdigest()[:16]
        _store_hash(key, stored)
    _HASHES[key] = stored
    return stored


_HASHES: dict[str, str] = {}  # a sweep's plan hashes the code once per run


def _hash_file(key: str) -> Path:
    return Path(os.environ.get("NMT_CACHE", "~/.cache/nmt")).expanduser() / "code_hash" / key


def _stored_hash(key: str) -> str | None:
    try:
        text = _hash_file(key).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if re.fullmatch(r"[0-9a-f]{16}", text) else None  # a damaged entry is computed again


def _store_hash(key: str, value: str) -> None:
    try:
        atomic_write_text(_hash_file(key), value + "\n")
    except OSError:
        pass  # a cache that cannot be written costs only the time of computing the hash again next time


def meaning(raw: bytes, suffix: str) -> bytes:
    """A file's text less what cannot change a result: Python without its comments and blank lines (cut where
    the tokenizer finds a comment, so a ``#`` inside a string stays; docstrings are kept, as code may read
    them), a YAML file as the data it holds with Hydra's ``# @package`` line. A file that cannot be read so
    is taken byte for byte. ``suffix``: the file's, ``.py`` or a YAML one."""
    try:
        text = raw.decode("utf-8")
        if suffix == ".py":
            # inside: the rows whose end lies within a string of several lines (its first row to the one before
            # its last), kept whole: their trailing spaces, and blank rows among them, are the string's text
            lines, inside = text.splitlines(), set()
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type == tokenize.COMMENT:
                    lines[token.start[0] - 1] = lines[token.start[0] - 1][: token.start[1]]
                inside.update(range(token.start[0], token.end[0]))
            kept = [line if row in inside else line.rstrip() for row, line in enumerate(lines, 1)]
            return "\n".join(line for row, line in enumerate(kept, 1) if row in inside or line).encode()
        package = [line for line in text.splitlines() if line.startswith("# @package")]
        return repr([package, yaml.safe_load(text)]).encode()  # repr: the key 1 is not the key "1"
    except (UnicodeDecodeError, tokenize.TokenError, SyntaxError, ValueError, yaml.YAMLError):
        return raw
