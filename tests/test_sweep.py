"""sweep.py: plans, folders and resumption, a real 2 x 2 sweep through joblib, W&B offline, clusters."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from nmt.sweep import progress
from nmt.sweep import runner as sweep
from nmt.sweep.callback import SweepReport

from .conftest import NO_FINAL_SCORES, ROOT, tiny_overrides

SWEEP = [
    "grid=none",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    *[o for o in tiny_overrides() if not o.startswith("name=")],
    "threads=1",
    "validation.bleu_every_n_epochs=1",
    "pos=absolute,rope",
    "norm=layer,rms",
    "seed=1",
]


@pytest.mark.slow
def test_two_by_two_sweep_through_joblib_reports_logs_to_wandb_and_resumes(tmp_path):
    """Four runs through joblib, logged to W&B offline: each run's metrics, samples, tags and name, and the
    report run's panels and level means, all under <sweep>/wandb, where one `wandb sync` uploads the group
    and `wandb leet` browses it; run again, nothing is trained or logged again."""
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        *SWEEP,
        "logger=wandb",
        "sweep_name=g1",
        "trainer.log_every_n_steps=1",
        f"hydra.sweep.dir={tmp_path}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert first.stdout.count("[sweep] running:") == 4
    names = sorted(p.parent.name for p in tmp_path.glob("*/sweep_result.json"))
    assert names == [
        "norm=layer,pos=absolute,seed=1",
        "norm=layer,pos=rope,seed=1",
        "norm=rms,pos=absolute,seed=1",
        "norm=rms,pos=rope,seed=1",
    ]
    report = (tmp_path / "report.md").read_text()
    assert "| factor pos | absolute (reference), rope |" in report and (tmp_path / "results.csv").exists()
    assert "| what ended the runs | max_epochs: 4 runs |" in report and "not trained to their end" not in report
    # every run scored the validation set as its test: the ranking shows it beside the test score
    header = next(line for line in report.splitlines() if line.startswith("| rank |"))
    assert header.endswith("| validation mean |") and "mean over seeds of val_as_test_bleu" in report
    # W&B: one offline folder for the sweep, nothing W&B in the run folders
    assert not list(tmp_path.glob("*/wandb"))
    files = {path: path.read_bytes() for path in tmp_path.glob("wandb/offline-run-*/run-*.wandb")}
    reports = [data for data in files.values() if b"g1-report" in data]
    runs = [data for data in files.values() if b"g1-report" not in data]
    assert len(files) == 5 and len(reports) == 1
    for data in runs:
        for key in (b"val_loss", b"train_loss", b"val_samples", b"test_bleu", b"g1", b"pos:", b"norm:"):
            assert key in data, key
    for key in (b"pos_by_level", b"norm_by_level", b"results", b"report"):
        assert key in reports[0], key
    # names, tags and summaries as W&B reads them back (its own reader of the offline log, wandb >= 0.28)
    wandb_cli = Path(sys.executable).with_name("wandb")
    summaries = {}
    for path in files:
        shown = subprocess.run(
            [str(wandb_cli), "leet", "inspect", "--summary", "--json", str(path)], capture_output=True, text=True
        )
        if shown.returncode != 0:
            pytest.skip(f"`wandb leet inspect` not available: {shown.stderr[-300:]}")
        run = json.loads(shown.stdout)
        summaries[run["name"]] = run
    assert set(summaries) == {"g1-report-test_bleu", *names}  # the report run named by its metric
    results = {name: json.loads((tmp_path / name / "sweep_result.json").read_text()) for name in names}
    for name, result in results.items():
        # the cost of the whole process (start-up, data, final scores), not of its training alone
        assert result["process_s"] > result["wall_time_s"] > 0
        assert sorted(summaries[name]["tags"]) == [level.replace("=", ":") for level in name.split(",")[:2]]
        assert summaries[name]["summary"]["test_bleu"] == pytest.approx(result["metrics"]["test_bleu"])
        assert summaries[name]["summary"]["val_as_test_bleu"] == pytest.approx(result["metrics"]["val_as_test_bleu"])
    report = summaries["g1-report-test_bleu"]
    assert report["config"]["metric"] == "test_bleu" and report["config"]["direction"] == "higher is better"
    for level in ("pos=absolute", "pos=rope", "norm=layer", "norm=rms"):  # one seed: the mean of its two cells
        cells = [r["metrics"]["test_bleu"] for name, r in results.items() if level in name.split(",")]
        assert summaries["g1-report-test_bleu"]["summary"][level.replace("=", "/")] == pytest.approx(sum(cells) / 2)
    # the same command again: nothing to train, the same report, which the group already holds
    second = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert second.stdout.count("done already, skipped") == 4 and "[sweep] running:" not in second.stdout
    assert "W&B: the report run g1-report-test_bleu already holds this report; not logged again" in second.stdout
    assert set(tmp_path.glob("wandb/offline-run-*/run-*.wandb")) == set(files)


@pytest.mark.slow
def test_a_sweep_of_ddp_runs_on_two_cpu_processes(tmp_path):
    """Hydra multirun + Lightning DDP: each run is its own process tree, so DDP's re-launch is harmless. The
    runs end by max_steps before their first validation: the final weights are validated, by both processes,
    and saved as best.ckpt, which one of them says."""
    overrides = [o for o in SWEEP if not o.startswith(("hydra/launcher", "hydra.launcher", "pos=", "norm="))]
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        *overrides,
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "trainer.max_steps=2",
        "pos=absolute,rope",
        f"hydra.sweep.dir={tmp_path}",
    ]
    run_two_cell_sweep(command, tmp_path)
    assert not list(tmp_path.glob("*/.hydra/multirun.yaml"))  # no nested sweep started by a DDP rank
    config = (tmp_path / "pos=rope,seed=1" / "config.yaml").read_text()
    assert "strategy: ddp" in config and "devices: 2" in config
    for log in tmp_path.glob("*/train_stdout.log"):
        assert log.read_text().count("The final updates validate best (val_bleu=") == 1, log


def test_the_language_model_grids_compose(tmp_path):
    from hydra import compose, initialize_config_dir

    from .conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("sweep", overrides=["grid=lm_position"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.task == "lm"
    # every encoding of conf/pos (test_config holds the preset to all of them; a new one is swept too)
    assert sorted(cfg.hydra.sweeper.params.pos.split(",")) == sorted(p.stem for p in (CONF / "pos").glob("*.yaml"))


@pytest.mark.parametrize("grid", ["transformer", "rnn"])
def test_a_sweep_runs_seed_by_seed(grid):
    """Hydra's sweeper varies the first key slowest: with the seed first, the first 16 (9) jobs of the
    factorial are one whole replicate, so a sweep cut off early still holds a complete design."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("sweep", overrides=[f"grid={grid}"], return_hydra_config=True)
    params = [f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()]
    overrides = OverridesParser.create().parse_overrides(params + ["seed=1,2,3"])  # command line too
    (jobs,) = BasicSweeper.split_arguments(overrides, max_batch_size=None)
    cells = len(jobs) // 3
    assert len(jobs) == 3 * cells and cells == {"transformer": 16, "rnn": 9}[grid]
    for replicate in range(3):
        block = jobs[replicate * cells : (replicate + 1) * cells]
        assert {job[0] for job in block} == {f"seed={replicate + 1}"}
        assert len({tuple(job[1:]) for job in block}) == cells  # every cell once


def test_no_run_starts_after_start_runs_for(tmp_path):
    """A sweep given a time window starts no run once it has passed (here: at once), says so for each
    run, writes no results and no report, and exits cleanly so that a rerun resumes it."""
    command = [sys.executable, str(ROOT / "sweep.py"), *SWEEP, "start_runs_for=00:00:00", f"hydra.sweep.dir={tmp_path}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count("[sweep] not started (start_runs_for=00:00:00 has passed)") == 4
    assert "[sweep] running:" not in done.stdout and "no report yet" in done.stdout
    assert not list(tmp_path.glob("*/sweep_result.json")) and not (tmp_path / "report.md").exists()


def test_a_cell_another_process_is_training_is_skipped_not_failed(tmp_path):
    """Two sweep processes of one sweep reach the same cell: the second skips it (train.py's run folder
    lock says another process trains there) and writes no failure beside the first one's result."""
    from nmt.training.run_folder import RunLock

    cell = tmp_path / "norm=layer,pos=absolute,seed=1"
    command = [sys.executable, str(ROOT / "sweep.py"), *SWEEP, "start_runs_for=00:00:00", f"hydra.sweep.dir={tmp_path}"]
    with RunLock(cell):
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "[sweep] being trained by another process, skipped: norm=layer,pos=absolute,seed=1" in done.stdout
    assert done.stdout.count("[sweep] not started") == 3 and not list(tmp_path.glob("*/sweep_failed.json"))
    assert not sweep._in_use_elsewhere(cell)  # free again once the holder let go


@pytest.mark.parametrize(("text", "seconds"), [("00:00:00", 0.0), ("02:15:30", 8130.0), ("30:00:00", 108000.0)])
def test_start_runs_for_reads_hours_minutes_seconds(text, seconds):
    assert progress.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2h", "01:30", "1:x:00", ""])
def test_start_runs_for_rejects_other_formats_with_an_example(text):
    with pytest.raises(ValueError, match="HH:MM:SS"):
        progress.parse_duration(text)
    with pytest.raises(ValueError, match="minutes and seconds go from 00 to 59"):  # was 1 h 40 min 39 s
        progress.parse_duration("00:99:99")


@pytest.mark.fresh_processes  # a fresh interpreter, as typed (docs/testing.md)
@pytest.mark.slow
def test_the_readme_sweep_command_runs_as_typed_in_a_fresh_folder(tmp_path, capsys):
    """No hydra.sweep.dir: the sweep folder comes from the grid's name, as for every user's first sweep."""
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        "-m",
        "grid=none",
        "data=toy",
        "pos=absolute,relative",
        "seed=1",
        "trainer.max_steps=2",
        "trainer.enable_progress_bar=false",
        "threads=1",
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "HydraConfig was not set" not in result.stderr
    sweep_dir = tmp_path / "sweeps" / "none"
    assert sorted(p.parent.name for p in sweep_dir.glob("*/sweep_result.json")) == [
        "pos=absolute,seed=1",
        "pos=relative,seed=1",
    ]
    assert (sweep_dir / "report.md").is_file()
    assert "[sweep] 2/2 done, 0 failed" in result.stdout

    # the plan of the same sweep: both runs done (their recorded settings are the ones it would use); read
    # without Lightning's import (seconds)
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    plan = subprocess.run([*command, "plan=true"], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert plan.returncode == 0, plan.stderr[-2000:]
    imported = [line.rpartition("|")[2].strip() for line in plan.stderr.splitlines() if "import time:" in line]
    assert "torch" in imported and "lightning" not in imported
    assert "factor pos: absolute, relative   [command line]" in plan.stdout
    assert "done: 2 (0 of them under other settings); to run: 0" in plan.stdout
    # the rest as the sweep's start checks it, in this process (the command line's path to that start is run
    # above): another budget under the same sweep name is stopped before any run, naming the key that changed
    other = [c if c != "trainer.max_steps=2" else "trainer.max_steps=3" for c in command[3:]]

    def start(given: list[str]) -> tuple[int, str, str]:
        held = [o for o in given if o != "pos=absolute,relative"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("sweep", overrides=[*held, f"hydra.sweep.dir={sweep_dir}"], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.overrides.task = given  # as the multirun saves it: the comma list in it
        with pytest.raises(SystemExit) as stopped:
            SweepReport().on_multirun_start(cfg)
        said = capsys.readouterr()
        return stopped.value.code, said.out, said.err

    # its plan says so first: the sweep would stop; with on_changed=move both runs would be set aside and rerun
    code, out, _ = start([*other, "plan=true"])
    assert code == 0 and "done: 2 (2 of them under other settings); to run: 0" in out
    assert "the sweep would stop before any run, on the 2 run(s) made under other settings" in out
    code, out, _ = start([*other, "plan=true", "on_changed=move"])
    assert code == 0 and "done: 0; to run: 2 (2 made under other settings, set aside first)" in out
    assert "would stop" not in out
    # the cost from the runs to be set aside, said to be of other settings ("unknown" beside two finished runs)
    from nmt.sweep.plan import run_time

    records = [json.loads((run / "sweep_result.json").read_text()) for run in sweep_dir.glob("*seed=1")]
    costs = [max(r.get("process_s") or 0, r.get("wall_time_s") or 0) for r in records]
    guide = "(the mean of the 2 finished run(s) made under other settings, a rough guide)"
    assert f"expected cost: about {run_time(costs, 2)} of run time {guide}" in out
    code, _, err = start(other)
    assert code == 2 and "were made under other settings or code" in err and "trainer.max_steps: 2 -> 3" in err
    assert sorted(p.parent.name for p in sweep_dir.glob("*/sweep_result.json")) == [  # nothing set aside
        "pos=absolute,seed=1",
        "pos=relative,seed=1",
    ]
    # a run whose sweep record is lost (killed as it ended): to run, recorded from its folder, as the plan says;
    # one without its results too: resumed from its last checkpoint
    (sweep_dir / "pos=relative,seed=1" / "sweep_result.json").unlink()
    (sweep_dir / "pos=absolute,seed=1" / "sweep_result.json").unlink()
    (sweep_dir / "pos=absolute,seed=1" / "results.json").unlink()
    code, out, _ = start([*command[3:], "plan=true"])
    assert (
        code == 0
        and (
            "done: 0 (0 of them under other settings); to run: 2 (1 of them trained already, recorded now) (1 of them "
            "resumed from their last checkpoint)"
        )
        in out
    )


def test_a_cell_that_train_py_would_refuse_stops_the_sweep_before_any_run(tmp_path):
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "data=toy", "model=rnn", "pos=absolute,rope"]
    result = subprocess.run(
        [*command, "seed=1", "threads=1"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "error: the runs of pos=absolute would be refused: pos=absolute: model=rnn does not use group 'pos'" in (
        result.stderr
    )
    assert "[sweep] running" not in result.stdout and not list(tmp_path.glob("sweeps/*/*/fingerprint.json"))


def test_a_report_metric_the_runs_do_not_record_stops_the_sweep_before_any_run(tmp_path):
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "data=toy", "pos=absolute,rope", "seed=1"]
    result = subprocess.run(
        [*command, "report_metric=test_bleuu", "threads=1"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "report_metric=test_bleuu: no run of this sweep records it (did you mean test_bleu?)" in result.stderr
    assert "[sweep] running" not in result.stdout and not list(tmp_path.glob("sweeps/*/*/fingerprint.json"))


@pytest.mark.slow
def test_a_sweep_whose_runs_fail_says_why_and_ends_with_status_1(tmp_path, capsys):
    missing = tmp_path / "missing" / "train"  # found only when a run reads its data
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "data=files", f"data.train={missing}"]
    result = subprocess.run(
        [*command, "seed=1,2", "threads=1"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    # each failure with the run's own one-line error, then the sweep's verdict
    assert f"[sweep] FAILED (2): seed=2: error: {missing}.src: No such file or directory" in result.stdout
    assert "error: 2 run(s) of the sweep failed (seed=1, seed=2)" in result.stderr
    assert "rerun the sweep to resume" not in result.stdout  # a rerun would fail the same way
    # the mistake fixed (here: another corpus), the same sweep would train both runs: their folders hold no
    # work, neither done nor made under other settings (its start's plan, in this process; a sweep's training
    # after its plan is run above)
    assert sorted(p.name for p in (tmp_path / "sweeps" / "none").glob("seed=*")) == ["seed=1", "seed=2"]
    fixed = ["grid=none", "data=toy", "threads=1", "plan=true"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "sweep", overrides=[*fixed, f"hydra.sweep.dir={tmp_path / 'sweeps' / 'none'}"], return_hydra_config=True
        )
    with open_dict(cfg):
        cfg.hydra.overrides.task = [*fixed, "seed=1,2"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as planned:
        SweepReport().on_multirun_start(cfg)
    out = capsys.readouterr().out
    assert planned.value.code == 0 and "done: 0 (0 of them under other settings); to run: 2\n" in out, out
    assert "would stop" not in out


def test_a_failed_runs_error_is_that_of_its_last_attempt(tmp_path):
    from nmt.sweep.runner import last_error

    log = tmp_path / "train_stderr.log"
    log.write_text(
        "==== sitting started 1\nerror: a.src: No such file or directory\n"
        "==== sitting started 2\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory\n"
    )
    assert last_error(log) == "torch.OutOfMemoryError: CUDA out of memory"
    # a crash under Hydra ends with its hint, which says nothing of the error: the line before it does
    log.write_text(
        "==== sitting started 1\nTraceback (most recent call last):\nTypeError: 'DictConfig' object is not callable\n\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )
    assert last_error(log) == "TypeError: 'DictConfig' object is not callable"


@pytest.mark.parametrize(("grid", "folder"), [(None, "transformer"), ("rnn", "rnn"), ("none", "none")])
def test_the_sweep_folder_is_named_after_the_grid_without_a_hydra_config(grid, folder):
    """The sweeper reads hydra.sweep.dir before any job exists (HydraConfig unset); a job reads sweep_name
    after Hydra removed its own node: both must give the grid's name."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[f"grid={grid}"] if grid else [], return_hydra_config=True)
    assert not HydraConfig.initialized()
    assert cfg.hydra.sweep.dir == f"sweeps/{folder}"
    HydraConfig.instance().set_config(cfg)
    try:
        job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        assert job.sweep_name == folder
    finally:
        HydraConfig.instance().cfg = None


def test_the_sweep_config_resolves_as_printed_by_hydras_cfg_option():
    """``--cfg job --resolve`` loads none of the runner, whose import once registered the folder's resolver."""
    command = [sys.executable, str(ROOT / "sweep.py"), "--cfg", "job", "--resolve", "grid=rnn"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sweep_name: rnn" in result.stdout.splitlines()


@pytest.mark.slow
def test_levels_that_hydra_needs_quoted_name_their_folders_and_train(tmp_path):
    """A quoted level (a path with a space, or a quote) failed every run: its quotes went into the folder's
    name, which the run's own command line then could not hold. (``name=`` given, as tiny_overrides does,
    stopped a sweep: "HydraConfig was not set".)"""
    from .conftest import files_corpus

    files_corpus(tmp_path / "my corpus")
    files_corpus(tmp_path / "it's")
    spaced, quote = tmp_path / "my corpus" / "train", tmp_path / "it's" / "train"
    levels = f"data.train='{spaced}',\"{quote}\""
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", *tiny_overrides("data=files")]
    command += [f"data.{split}={tmp_path / 'my corpus' / split}" for split in ("val", "test")]
    command += ["data=files", "trainer.max_steps=2", *NO_FINAL_SCORES, "report_metric=best_val_bleu"]
    command += ["threads=1", levels, "seed=1"]
    command += [f"hydra.sweep.dir={sweep_dir}"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    folders = sorted(p.parent.name for p in sweep_dir.glob("*/sweep_result.json"))
    path = str(tmp_path).replace("%", "%25").replace("/", "%2F")
    assert folders == sorted(f"data.train={path}%2F{name}%2Ftrain,seed=1" for name in ("my corpus", "it's"))
    for name in ("my corpus", "it's"):
        run = next(sweep_dir.glob(f"*{name}*"))
        assert OmegaConf.load(run / "config.yaml").data.train == str(tmp_path / name / "train")
        assert OmegaConf.load(run / "config.yaml").run_dir == str(run.resolve())


def run_two_cell_sweep(command: list[str], sweep_dir) -> subprocess.CompletedProcess:
    """Run a sweep of pos=absolute,rope with seed 1 and check that both runs finished."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    runs = sorted(p.parent.name for p in sweep_dir.glob("*/sweep_result.json"))
    assert runs == ["pos=absolute,seed=1", "pos=rope,seed=1"]
    return result


@pytest.mark.slow
def test_the_cluster_path_runs_a_two_run_sweep_through_submitit_local(tmp_path):
    """hydra-submitit-launcher's local executor: the SLURM launcher's path (each run a submitit job,
    pickled and run in a process of its own) on this machine."""
    overrides = [o for o in SWEEP if not o.startswith(("hydra/launcher", "hydra.launcher", "norm="))]
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        *overrides,
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        f"hydra.sweep.dir={tmp_path}",
    ]
    run_two_cell_sweep(command, tmp_path)
    assert (tmp_path / "report.md").is_file() and list(tmp_path.glob(".submitit/*"))


@pytest.mark.parametrize(
    ("grid", "override", "group", "option"),
    [("rnn", "model.hidden_size=64", "model", "rnn"), ("lm_position", "model.num_layers=2", "task", "lm")],
)
def test_a_grid_brings_its_own_model_so_its_keys_can_be_set_on_the_command_line(grid, override, group, option):
    """grid=rnn sweeps an RNN: `grid=rnn model.hidden_size=64` composes (the default model has no such key)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[f"grid={grid}", override], return_hydra_config=True)
    key, value = override.split("=")
    assert str(OmegaConf.select(cfg, key)) == value
    assert cfg.hydra.runtime.choices[group] == option


def test_the_eta_is_at_the_pace_of_every_process_of_this_sitting(tmp_path):
    """A parallel launcher's workers each end runs: the pace is the sweep's on disk, not one worker's; runs
    ended in an earlier sitting count as done but not toward the pace."""
    import time

    launched = time.time() - 600
    (tmp_path / progress.LAUNCHED).write_text(f"{launched:.3f}\n")
    os.utime(tmp_path / progress.LAUNCHED, (launched, launched))  # written when the sweep was launched
    for i in range(4):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / sweep.RESULT).write_text("{}")
    os.utime(tmp_path / "run0" / sweep.RESULT, (launched - 100, launched - 100))  # an earlier sitting's
    (tmp_path / "run4").mkdir()
    (tmp_path / "run4" / sweep.FAILED).write_text("{}")
    # 4 runs ended in the 600 s of this sitting (3 done, 1 failed), 6 remain: 900 s
    assert progress.progress_line(tmp_path, 11, now=launched + 600) == "[sweep] 4/11 done, 1 failed, ETA 15 min"
    assert progress.progress_line(tmp_path, 5) == "[sweep] 4/5 done, 1 failed"  # nothing left
    assert progress.progress_line(tmp_path, 11, now=launched + 10).endswith(", ETA < 1 min")  # not "ETA 0 min"
    for i in range(1, 4):  # only a failure ended in this sitting: no pace to tell
        os.utime(tmp_path / f"run{i}" / sweep.RESULT, (launched - 100, launched - 100))
    assert progress.progress_line(tmp_path, 11, now=launched + 600) == "[sweep] 4/11 done, 1 failed"


def test_the_report_names_the_recipe_only_where_one_was_applied(tmp_path):
    """Hydra records the optional default recipe's name (<data>_<model>) even when no such file exists:
    the report says "none" then, as the runs themselves printed."""
    from nmt.sweep.summary import describe

    for recipe, shown in (("ptb_transformer_lm", "none"), ("toy_transformer", "toy_transformer")):
        run = tmp_path / recipe / "run"
        (run / ".hydra").mkdir(parents=True)
        choices = {"task": "lm", "data": "ptb", "model": "transformer_lm", "recipe": recipe}
        OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": choices}}}), run / ".hydra" / "hydra.yaml")
        assert describe(tmp_path / recipe, [{"run_dir": str(run), "seed": 1}])["choices"]["recipe"] == shown


def test_a_factor_of_models_names_each_models_recipe_in_the_report(tmp_path):
    """model=rnn,transformer: "What ran" named the first run's model and recipe alone (transformer,
    toy_transformer), where the rnn runs trained by toy_rnn."""
    from nmt.sweep.summary import describe

    records = []
    for model, seed in (("transformer", 1), ("rnn", 1), ("transformer", 2), ("rnn", 2)):
        run = tmp_path / f"model={model},seed={seed}"
        (run / ".hydra").mkdir(parents=True)
        choices = {"task": "translation", "data": "toy", "model": model, "recipe": f"toy_{model}"}
        OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": choices}}}), run / ".hydra" / "hydra.yaml")
        records.append({"run_dir": str(run), "seed": seed})
    choices = describe(tmp_path, records)["choices"]
    assert choices["model"] == "transformer, rnn" and choices["data"] == "toy"
    assert choices["recipe"] == "toy_transformer (model=transformer), toy_rnn (model=rnn)"


def test_the_budget_line_names_the_patience_in_words():
    from nmt.sweep.summary import budget_text

    one = budget_text({"max_steps": 300, "max_epochs": None, "patience": 1, "monitor": "val_bleu"})
    assert one == "at most 300 updates; early stopping after 1 validation without a better val_bleu"
    four = budget_text({"max_epochs": 6, "patience": 4, "monitor": "val_loss"})
    assert four.endswith("after 4 validations without a better val_loss")
    counted = budget_text({"max_steps": 12000, "patience": 4, "monitor": "val_bleu", "after_warmup": True})
    assert counted.endswith("without a better val_bleu, counted from the end of the learning rate's warm-up")
    # a patience the budget never reaches: early stopping needs patience + 1 validations to stop a run
    from nmt.sweep.summary import budget_of

    def said(**trainer) -> str:
        return budget_text(budget_of({"trainer": trainer, "early_stopping": {"patience": 5, "monitor": "val_bleu"}}))

    assert said(max_epochs=4).endswith(", which cannot stop a run: the budget allows at most 4 validations")
    assert said(max_epochs=5, check_val_every_n_epoch=1).endswith("at most 5 validations")
    assert said(max_epochs=6).endswith("without a better val_bleu")  # 6 validations: it can
    assert said(max_steps=2000, val_check_interval=500, max_epochs=-1).endswith("at most 4 validations")
    assert said(max_steps=12000, val_check_interval=500).endswith("without a better val_bleu")
    assert said(max_epochs=20, check_val_every_n_epoch=5).endswith("at most 4 validations")
    assert said(max_epochs=3, val_check_interval=0.25).endswith("without a better val_bleu")  # not read: no claim


def test_failures_outside_the_plan_are_not_this_sweeps(tmp_path):
    """A run of an earlier sweep in the folder that failed (a level no longer swept) neither counts as this
    sweep's failure nor stops it."""
    from nmt.sweep.summary import failed_runs

    for name in ("lr=0.01,seed=1", "lr=0.001,seed=1"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep_failed.json").write_text("{}")
    assert failed_runs(tmp_path) == ["lr=0.001,seed=1", "lr=0.01,seed=1"]  # no plan listing its runs: all
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 2, "run_names": ["lr=0.001,seed=1", "lr=0.0003,seed=1"]}))
    assert failed_runs(tmp_path) == ["lr=0.001,seed=1"]
    assert progress.progress_line(tmp_path, 2) == "[sweep] 0/2 done, 1 failed"


def test_a_finished_run_whose_record_cannot_be_made_says_to_rerun_the_sweep(tmp_path):
    """Code edited while a sweep ran made the import of the run's task fail after hours of training, and the
    finished run went unrecorded behind Hydra's "Error locating target"; the message now says what to do."""
    import json

    from omegaconf import OmegaConf

    from nmt.sweep.records import run_record

    run = tmp_path / "pos=rope,seed=1"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"epochs": 1, "steps": 2, "parameters": 3, "wall_time_s": 4}))
    OmegaConf.save(OmegaConf.create({"task": {"_target_": "nmt.tasks.edited_away.Task"}}), run / "config.yaml")
    with pytest.raises(
        RuntimeError,
        match=r"^pos=rope,seed=1: trained, but its record could not be made .* Run the same sweep command again",
    ):
        run_record(run, {"pos": "rope"}, 1)
