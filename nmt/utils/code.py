"""The hash of the code that computes results: the package's source and the configs training composes.

A run folder records it with the settings (nmt.training.run_identity), and an evaluation with its scores, so
that a result made under other code is never taken, or overwritten, as one made under this code."""

import hashlib
import io
import tokenize
from pathlib import Path

import yaml

# configs that no training run composes: the other entry points', and the sweeps' grids and tuned settings,
# which reach a run as command-line overrides (in its recorded config): writing conf/tuned/<name>.yaml, as
# `sweep.py tune` does, leaves every finished run valid
NOT_TRAINING_CONFIGS = ("evaluate.yaml", "translate.yaml", "serve.yaml", "export.yaml", "sweep.yaml", "grid", "tuned")


def code_hash() -> str:
    """A hash of what computes a result: the package's source and the configs training composes, their
    comments and blank lines aside (:func:`meaning`). A commit that changes neither (documents, tests,
    benchmarks, a grid, a comment) keeps it; an uncommitted edit of the code changes it."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    configs = [
        p for p in (root / "conf").rglob("*.yaml") if p.relative_to(root / "conf").parts[0] not in NOT_TRAINING_CONFIGS
    ]
    for path in sorted([*(root / "nmt").rglob("*.py"), *configs]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + _cached_meaning(path) + b"\0")
    return digest.hexdigest()[:16]


_MEANINGS: dict[tuple[str, str], bytes] = {}  # a sweep's plan hashes the code once per run


def _cached_meaning(path: Path) -> bytes:
    key = (path.suffix, hashlib.sha256(path.read_bytes()).hexdigest())  # by content: an edit is another key
    if key not in _MEANINGS:
        _MEANINGS[key] = meaning(path)
    return _MEANINGS[key]


def meaning(path: Path) -> bytes:
    """A file's text less what cannot change a result: Python without its comments and blank lines (cut where
    the tokenizer finds a comment, so a ``#`` inside a string stays; docstrings are kept, as code may read
    them), a YAML file as the data it holds with Hydra's ``# @package`` line. A file that cannot be read so
    is taken byte for byte."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
        if path.suffix == ".py":
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
