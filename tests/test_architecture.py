"""The package's layering (pyproject's import-linter contracts) holds, and a change that breaks it fails."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; lint_imports_command()"]


def lint(root: Path) -> subprocess.CompletedProcess:
    command = [*LINT, "--config", str(root / "pyproject.toml"), "--no-cache"]
    return subprocess.run(
        command, cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "COLUMNS": "200"}
    )


def test_every_layer_imports_only_from_the_layers_below_it():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("nmt/tasks/base.py", "import nmt.sweep.analysis", "Layers"),  # a task reaching up into the sweep room
        ("nmt/data/toy.py", "import nmt.models.build", "Layers"),  # data reaching up into models
        ("nmt/sweep/analysis.py", "import nmt.sweep.report", "No import cycles"),  # report <-> analysis
        ("nmt/data/toy.py", "import lightning", "Lightning only"),  # a data module built on Lightning's class
    ],
)
def test_an_upward_import_or_a_cycle_breaks_the_contracts(tmp_path, module, line, contract):
    shutil.copytree(ROOT / "nmt", tmp_path / "nmt", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / module
    path.write_text(path.read_text() + f"\n{line}\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    broken = [row for row in result.stdout.splitlines() if row.endswith("BROKEN")]
    assert any(contract in row for row in broken), result.stdout[-3000:]
