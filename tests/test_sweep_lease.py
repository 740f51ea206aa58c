"""benchmarks.sweep_lease: a sweep in pieces, each carrying back its finished runs without checkpoints, and
the next piece skipping them."""

import json
import os
import subprocess
import sys
import tarfile

import pytest

from benchmarks.sweep_lease import carried, sweep_folder

from .conftest import ROOT


def test_the_bundle_carries_finished_runs_without_their_checkpoints_and_no_unfinished_run(tmp_path):
    sweep = tmp_path / "sweeps" / "x"
    done, running = sweep / "pos=absolute,seed=1", sweep / "pos=rope,seed=1"
    for path in (
        sweep / "plan.json",
        done / "sweep_result.json",
        done / "results.json",
        done / "eval" / "test" / "hypotheses.txt",
        done / "checkpoints" / "last.ckpt",
        done / "checkpoints" / "epoch001.ckpt",
        done / ".last.ckpt.12.tmp",
        done / ".lock",
        done / "tokenizers" / "src.model",
        running / "results.json",
        running / "checkpoints" / "last.ckpt",
        sweep / "jobs" / "0" / "x.log",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    names = sorted(str(p.relative_to(sweep)) for p in carried(sweep))
    assert names == [
        "plan.json",
        "pos=absolute,seed=1/eval/test/hypotheses.txt",
        "pos=absolute,seed=1/results.json",
        "pos=absolute,seed=1/sweep_result.json",
    ]


def test_a_sweep_folder_is_its_name_under_sweeps_or_the_one_given():
    assert str(sweep_folder(["grid=none", "sweep_name=tune_adam"])) == "sweeps/tune_adam"
    assert str(sweep_folder(["hydra.sweep.dir=elsewhere/y"])) == "elsewhere/y"
    with pytest.raises(SystemExit, match="add sweep_name=NAME"):
        sweep_folder(["grid=none", "seed=1,2"])


@pytest.mark.slow
def test_a_second_piece_restores_the_first_ones_runs_and_skips_them(tmp_path):
    sweep = (
        "grid=none data=toy pos=absolute seed=1 trainer.max_steps=2 trainer.enable_progress_bar=false threads=1 "
        "sweep_name=piece"
    )
    command = [sys.executable, "-m", "benchmarks.sweep_lease", "--minutes", "8", "--run-minutes", "4"]
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir(), second_dir.mkdir()
    env = {"PYTHONPATH": str(ROOT)}
    first = subprocess.run(
        [*command, "--bundle", str(tmp_path / "one.tgz"), sweep],
        capture_output=True, text=True, cwd=first_dir, timeout=600, env={**os.environ, **env},
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "[sweep_lease] sweeps/piece: 1 runs finished, 0 failed, 0 stopped at the deadline" in first.stdout
    with tarfile.open(tmp_path / "one.tgz") as tar:
        names = tar.getnames()
    assert "sweeps/piece/seed=1/sweep_result.json" in names
    assert not [n for n in names if n.endswith((".ckpt", ".model", ".lock"))]
    second = subprocess.run(
        [*command, "--restore", str(tmp_path / "one.tgz"), "--bundle", str(tmp_path / "two.tgz"), sweep],
        capture_output=True, text=True, cwd=second_dir, timeout=600, env={**os.environ, **env},
    )  # fmt: skip
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "done already, skipped: seed=1" in second.stdout and "[sweep] running:" not in second.stdout
    assert "1 runs finished" in second.stdout
    record = json.loads((second_dir / "sweeps" / "piece" / "seed=1" / "sweep_result.json").read_text())
    assert record["run_dir"] == str((second_dir / "sweeps" / "piece" / "seed=1").resolve())  # not the first's


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--bundle", "{tmp}"], ": a folder; name the file to write"),  # an IsADirectoryError after every sweep ran
        (["--bundle", "{tmp}/b.tgz", "--run-minutes", "-5"], "--run-minutes -5: the longest a run takes, more than 0"),
        (["--bundle", "{tmp}/b.tgz", "--restore", "{tmp}/none.tgz"], "--restore {tmp}/none.tgz: no such bundle"),
    ],
)
def test_a_lease_whose_options_cannot_work_is_refused_before_any_sweep(tmp_path, capsys, argv, said):
    from benchmarks.sweep_lease import main

    given = [a.format(tmp=tmp_path) for a in argv]
    minutes = [] if "--run-minutes" in given else ["--run-minutes", "4"]
    with pytest.raises(SystemExit):
        main(["--minutes", "8", *minutes, *given, "grid=none data=toy"])
    assert said.format(tmp=tmp_path) in capsys.readouterr().err
