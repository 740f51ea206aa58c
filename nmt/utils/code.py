"""The hash of the code that computes results: the package's source and the configs training composes.

A run folder records it with the settings (nmt.training.run_identity), and an evaluation with its scores, so
that a result made under other code is never taken, or overwritten, as one made under this code."""

import hashlib
from pathlib import Path

# configs that no training run composes: the other entry points', and the sweeps' grids and tuned settings,
# which reach a run as command-line overrides (in its recorded config): writing conf/tuned/<name>.yaml, as
# `sweep.py tune` does, leaves every finished run valid
NOT_TRAINING_CONFIGS = ("evaluate.yaml", "translate.yaml", "serve.yaml", "export.yaml", "sweep.yaml", "grid", "tuned")


def code_hash() -> str:
    """A hash of what computes a result: the package's source and the configs training composes. A commit
    that changes neither (documents, tests, benchmarks, a grid) keeps it; an uncommitted edit of the code
    changes it."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    configs = [
        p for p in (root / "conf").rglob("*.yaml") if p.relative_to(root / "conf").parts[0] not in NOT_TRAINING_CONFIGS
    ]
    for path in sorted([*(root / "nmt").rglob("*.py"), *configs]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
