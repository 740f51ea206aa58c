"""What a sweep says before it trains, read from sweep folders made here (no training): its plan
(``plan=true``: done, to run, the cost of the rest), a run's "running:" line, its W&B group."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

import nmt.sweep.inputs as inputs
import nmt.sweep.plan as plan

from .conftest import files_corpus

ROOT = Path(__file__).resolve().parents[1]


def sweep_config(sweep_dir: Path, *swept: str):
    """The sweep's config as the multirun saves it: its command line's comma lists in hydra.overrides.task."""
    given = ["grid=none", "data=toy"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[*given, f"hydra.sweep.dir={sweep_dir}"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = [*given, *swept]
    return cfg


def finished(run: Path, process_s: float) -> None:
    run.mkdir(parents=True)
    record = {"process_s": process_s, "metrics": {}, "factors": {}, "seed": 1}
    (run / "sweep_result.json").write_text(json.dumps(record))


def test_a_run_stopped_part_way_under_other_settings_is_to_run_not_done(tmp_path, monkeypatch, capsys):
    finished(tmp_path / "pos=absolute,seed=1", 600.0)
    (tmp_path / "pos=relative,seed=1").mkdir()  # checkpoints only: stopped before its end
    monkeypatch.setattr(plan, "changed_runs", lambda *_: {"pos=relative,seed=1": ["trainer.max_steps: 2 -> 3"]})
    plan.print_plan(tmp_path, sweep_config(tmp_path, "pos=absolute,relative", "seed=1"))
    out = capsys.readouterr().out
    assert "done: 1 (0 of them under other settings); to run: 1 (1 of them partly trained under other settings)" in (
        out
    )
    assert "under other settings: pos=relative,seed=1: trainer.max_steps: 2 -> 3" in out


def test_a_finished_run_whose_corpus_file_was_edited_is_under_other_settings(tmp_path, capsys, monkeypatch):
    """Only settings and code were compared: a rerun after an edited corpus file said "done already" for
    every run, and new seeds or cells would have trained on the new text beside results of the old. The
    corpus is read once for all the runs (its text depends on no level here, nor on the seed)."""
    from nmt.tasks import build_task
    from nmt.training import run_identity
    from nmt.training.run_identity import current_text

    reads = []
    monkeypatch.setattr(run_identity, "current_text", lambda *a: reads.append(1) or current_text(*a))
    corpus = tmp_path / "corpus"
    files = files_corpus(corpus)
    sweep = tmp_path / "sweep"
    config = sweep_config(sweep, "pos=absolute,relative", "seed=1,2")
    with open_dict(config):
        config.hydra.overrides.task = [*files, "pos=absolute,relative", "seed=1,2"]
    for values in plan.planned_values(config):  # each run recorded as train.py records it
        overrides = plan.run_overrides(config, values)
        run = sweep / plan.run_name(values, {"pos", "seed"})
        finished(run, 60.0)
        cfg = plan.compose_train(overrides)
        identity = {**plan.expected_fingerprint(overrides), "data": {"text": current_text(cfg, build_task(cfg.task))}}
        (run / "fingerprint.json").write_text(json.dumps(identity))
    reads.clear()
    assert plan.changed_runs(sweep, config) == {} and len(reads) == 1
    (corpus / "train.tgt").write_text((corpus / "train.tgt").read_text().replace("one", "uno"))
    said = ["data: the text of its train split(s) changed since it was read"]
    runs = [f"pos={pos},seed={seed}" for seed in (1, 2) for pos in ("absolute", "relative")]
    assert plan.changed_runs(sweep, config) == dict.fromkeys(runs, said)
    (corpus / "train.tgt").unlink()  # the data gone: the results stand, as train.py keeps them
    assert plan.changed_runs(sweep, config) == {}
    assert "cannot read the data of pos=absolute,seed=1 to compare its text" in capsys.readouterr().out


def test_a_level_that_is_a_path_names_one_folder():
    """data.train=corp/a.tsv,corp/b.tsv made folders within folders (sweeps/x/data.train=corp/a.tsv,seed=1/):
    their runs finished, and the sweep said 0 done, 0 failed, and no report."""
    swept = {"data.train", "seed"}
    names = [plan.run_name({"data.train": path, "seed": "1"}, swept) for path in ("corp/a.tsv", "/abs/b", "a%2Fb")]
    assert names == ["data.train=corp%2Fa.tsv,seed=1", "data.train=%2Fabs%2Fb,seed=1", "data.train=a%252Fb,seed=1"]
    assert all("/" not in name for name in names)


def test_the_cost_of_new_seeds_is_estimated_from_the_seeds_finished_in_the_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan, "changed_runs", lambda *_: {})  # settings checks: tests/test_sweep.py
    finished(tmp_path / "pos=absolute,seed=1", 600.0)
    finished(tmp_path / "pos=relative,seed=1", 1200.0)
    plan.print_plan(tmp_path, sweep_config(tmp_path, "pos=absolute,relative", "seed=2,3"))
    out = capsys.readouterr().out
    assert "done: 0 (0 of them under other settings); to run: 4" in out
    # 4 runs at the mean 900 s of the two others: 1.0 h
    assert "expected cost: about 1.0 h of run time (the mean of 2 other finished run(s) in this folder" in out
    # the folder's own runs are preferred where some of the planned ones finished
    finished(tmp_path / "pos=absolute,seed=2", 60.0)
    plan.print_plan(tmp_path, sweep_config(tmp_path, "pos=absolute,relative", "seed=2,3"))
    assert "about 3.0 min of run time (the mean of the 1 finished runs)" in capsys.readouterr().out


def test_two_sweeps_in_folders_of_their_own_under_the_default_name_get_two_wandb_groups():
    assert plan.wandb_group("factorial", "sweeps/factorial", []) == "factorial"  # the default folder
    assert plan.wandb_group("factorial", "/scratch/a/adam_grid", ["hydra.sweep.dir=/scratch/a/adam_grid"]) == (
        "adam_grid"
    )
    assert plan.wandb_group("factorial", "/scratch/b/noam_grid", []) == "noam_grid"
    # a name the command gave names the group wherever the folder is
    assert plan.wandb_group("g1", "/tmp/x", ["sweep_name=g1", "hydra.sweep.dir=/tmp/x"]) == "g1"


def test_a_runs_line_says_what_its_folder_makes_train_py_do(tmp_path):
    from nmt.sweep.runner import run_state

    assert run_state(tmp_path) == ""  # a fresh folder: trained from the start
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert run_state(tmp_path) == "resumed from its last checkpoint; "
    (tmp_path / "results.json").write_text(json.dumps({"stage": "trained"}))
    assert run_state(tmp_path) == "trained already, its final scores made now; "
    (tmp_path / "results.json").write_text(json.dumps({"stage": "trained", "finished": True}))
    assert run_state(tmp_path) == "trained already, recorded now; "


def test_a_run_ended_by_the_signal_itself_is_said_as_its_folder_stands(tmp_path):
    """A signal that reaches train.py before it handles signals (as it starts) or after (as it exits) ends it
    with a negative status: said as what its folder holds, not as a failure to read in an empty log."""
    from nmt.sweep.child import _state

    assert _state(-15, tmp_path) == "was ended by SIGTERM as it started, before its first checkpoint: a rerun starts it"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert (
        _state(-2, tmp_path) == "was ended by SIGINT before it could save (a rerun resumes it from its last checkpoint)"
    )
    (tmp_path / "results.json").write_text(json.dumps({"stage": "trained"}))
    assert _state(-15, tmp_path).startswith("was ended by SIGTERM making its final scores")
    (tmp_path / "results.json").write_text(json.dumps({"finished": True, "run_dir": str(tmp_path)}))
    assert _state(-15, tmp_path) == "had finished when SIGTERM ended it (its results are kept)"
    assert _state(1, tmp_path) == "ended with status 1 (its train_stderr.log)"  # a failure: its log says why


def test_a_sweep_given_a_run_name_is_planned():
    """name=test stopped every sweep before it started: "HydraConfig was not set" (its default reads Hydra's
    choices, which the check of the sweep's keys resolved outside Hydra)."""
    config = sweep_config(Path("/nowhere"), "name=test", "pos=absolute,relative", "seed=1")
    assert inputs.input_problem(config) is None
    config = sweep_config(Path("/nowhere"), "nme=test", "pos=absolute,relative", "seed=1")
    assert inputs.input_problem(config).startswith("nme: not a key of the config")


def test_a_grid_file_without_its_package_line_is_refused_not_run_as_one_cell():
    """A conf/grid/ file without '# @package hydra.sweeper' put its params under grid.params, which no sweep
    reads: the sweep planned one run of the defaults ("1 cells x 1 seeds"), without a word."""
    for path in sorted((ROOT / "conf" / "grid").glob("*.yaml")):
        assert path.read_text().splitlines()[0] == "# @package hydra.sweeper", path
    config = sweep_config(Path("/nowhere"), "seed=1")
    assert inputs.input_problem(config) is None
    with open_dict(config):
        config.grid = {"params": {"seed": "1", "norm": "layer,rms"}}
        config.hydra.runtime.choices.grid = "mine"
    assert inputs.input_problem(config) == (
        "grid=mine: conf/grid/mine.yaml lacks its first line '# @package hydra.sweeper', so its params became "
        "grid.* keys, which no sweep reads: add that line"
    )


def test_a_baseline_names_a_numeric_level_by_its_value():
    """baseline={model.dropout: 0} was refused as "not a level" of 0.0,0.1, though level_settings and the
    report's order read numbers by value."""
    config = sweep_config(Path("/nowhere"), "model.dropout=0.0,0.1", "seed=1")
    with open_dict(config):
        config.baseline = {"model.dropout": 0}
    assert inputs.input_problem(config) is None
    with open_dict(config):
        config.baseline = {"model.dropout": 0.3}
    assert (
        inputs.input_problem(config)
        == "baseline: model.dropout=0.3 is not a level of model.dropout (levels: ['0.0', '0.1'])"
    )


def test_a_level_written_otherwise_than_the_same_number_in_the_folders_runs_is_refused(tmp_path):
    """model.dropout=0,0.1 in a folder whose runs ran as 0.0: the sweep trained them again in folders of their
    own (model.dropout=0,seed=1 beside model.dropout=0.0,seed=1), and its report set the finished ones aside."""
    (tmp_path / "model.dropout=0.0,seed=1").mkdir()
    (tmp_path / "model.dropout=0.1,seed=1").mkdir()
    config = sweep_config(tmp_path, "model.dropout=0.0,0.1", "seed=1")
    with open_dict(config):
        config.hydra.sweep.dir = str(tmp_path)
    assert inputs.spelling_problem(config, {"model.dropout": ["0.0", "0.1"], "seed": ["1"]}) is None
    assert inputs.spelling_problem(config, {"model.dropout": ["0", "0.1"], "seed": ["1", "2"]}) == (
        f"model.dropout=0: {tmp_path} holds runs of model.dropout=0.0, the same number written otherwise, which this "
        "sweep would train again beside them; write it as they do (model.dropout=0.0), or give the sweep a folder of "
        "its own (hydra.sweep.dir=...)"
    )
    # where Lightning reads 1 as one batch and 1.0 as the whole epoch, they are two levels
    (tmp_path / "seed=1,trainer.limit_train_batches=1.0").mkdir()
    assert inputs.spelling_problem(config, {"trainer.limit_train_batches": ["0.5", "1"], "seed": ["1"]}) is None


def test_a_tasks_sweep_metrics_that_fail_on_no_results_or_miss_its_report_metric_are_said_before_any_run(
    monkeypatch,
):
    """A new task whose sweep_metrics read results["test"] stopped the sweep with "error: 'test'"; one whose
    report_metric its sweep_metrics never records trained every run, then failed in the report."""
    import nmt.tasks
    from nmt.tasks.translation import TranslationTask

    class Indexing(TranslationTask):
        name = "indexing"

        def sweep_metrics(self, results):
            return {"test_exact": results["test"]["exact"]}

    class Misnamed(TranslationTask):
        name = "misnamed"
        report_metric = "test_exact_match"

        def sweep_metrics(self, results):
            return {"test_exact": (results.get("test") or {}).get("exact")}

    config = sweep_config(Path("/nowhere"), "pos=absolute,relative", "seed=1")
    assert inputs.input_problem(config) is None
    monkeypatch.setattr(nmt.tasks, "build_task", lambda cfg: Indexing())
    assert inputs.input_problem(config) == (
        "task=indexing: sweep_metrics({}) raised KeyError: 'test'; given no results it lists the names a run can "
        "record, each None (docs/tasks.md, 'Adding a task')"
    )
    monkeypatch.setattr(nmt.tasks, "build_task", lambda cfg: Misnamed())
    assert inputs.input_problem(config) == (
        "task=misnamed: its report_metric test_exact_match is not among the metrics its sweep_metrics records "
        "(['test_exact']); name one of those"
    )


@pytest.mark.parametrize("grid", sorted(path.stem for path in (ROOT / "conf" / "grid").glob("*.yaml")))
def test_every_sweep_preset_plans_without_a_problem(grid):
    """A preset's misspelt key (model.encodr) passed every test and was found when the sweep ran: each one is
    checked here as `sweep.py grid=<name>` checks it before anything trains, its inputs and every cell's
    config as train.py would check it (model.ffn_dim=-5 included)."""
    given = [f"grid={grid}"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[*given, "hydra.sweep.dir=/nowhere"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = given
    assert inputs.input_problem(cfg) is None
    assert plan.run_config_problem(cfg) is None


def test_a_grid_key_whose_group_the_command_line_replaced_says_so():
    """grid=rnn model=transformer: the grid's model.teacher_forcing was "not a key of the config", naming
    neither the grid's model=rnn nor the command line's model that replaced it."""
    given = ["grid=rnn", "data=toy", "model=transformer"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[*given, "hydra.sweep.dir=/nowhere"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = given
    assert inputs.input_problem(cfg) == (
        "model.teacher_forcing: not a key of the config, so it cannot be a factor (the grid sets model=rnn, and the "
        "command line's model=transformer replaces it)"
    )


def test_the_plan_names_each_runs_recipe_and_budget(tmp_path, capsys):
    """plan=true said nothing of how long each run trains, nor of the recipe applied (data=toy model=rnn:
    toy_rnn's 8 epochs); cells of other models may each have their own."""
    plan.print_plan(tmp_path, sweep_config(tmp_path, "pos=absolute,relative", "seed=1"))
    assert (
        "  each run: recipe toy_transformer (conf/recipe/toy_transformer.yaml); at most 12 epochs; no early stopping"
        in capsys.readouterr().out
    )
    plan.print_plan(tmp_path, sweep_config(tmp_path, "model=transformer,rnn", "seed=1"))
    out = capsys.readouterr().out
    assert "  runs of model=rnn: recipe toy_rnn (conf/recipe/toy_rnn.yaml); at most 8 epochs" in out
    assert "  runs of model=transformer: recipe toy_transformer" in out
    # a factor that is no group: the first cell's budget was said for every run (6 epochs, where one trains 20)
    plan.print_plan(tmp_path, sweep_config(tmp_path, "trainer.max_epochs=6,20", "seed=1,2"))
    out = capsys.readouterr().out
    assert (
        "  runs of trainer.max_epochs=6: recipe toy_transformer (conf/recipe/toy_transformer.yaml); at most 6 " in out
    )
    assert (
        "  runs of trainer.max_epochs=20: recipe toy_transformer (conf/recipe/toy_transformer.yaml); at most 20 " in out
    )


def test_an_experiment_that_sets_its_factors_is_swept_as_written_and_not_under_another_grid(tmp_path):
    """An experiment's own hydra.sweeper.params were replaced by the default grid's, composed after it (a 2 x 2
    of it ran as the grid's 2^4, every factor shown as the grid's); and one found through hydra.searchpath,
    which train.py reads, was refused by the sweep as "not an option of group experiment"."""
    import subprocess
    import sys

    mine = tmp_path / "mine" / "experiment"
    mine.mkdir(parents=True)
    (mine / "ablation.yaml").write_text(
        "# @package _global_\n# norm x pos, two seeds\nhydra:\n  sweeper:\n    params:\n"
        "      seed: 1,2\n      norm: layer,rms\n      pos: absolute,rope\n"
    )

    def sweep(*given: str) -> subprocess.CompletedProcess:
        command = [sys.executable, str(ROOT / "sweep.py"), "experiment=ablation", "data=toy", "threads=1", "plan=true"]
        command += [f"hydra.searchpath=[file://{tmp_path / 'mine'}]", f"hydra.sweep.dir={tmp_path / 'sweep'}", *given]
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)

    refused = sweep()
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: experiment=ablation sets the sweep's factors (seed, norm, pos), and so does grid=transformer (the "
        "default): its levels of seed, pos replace the experiment's; it adds optim, smoothing. Add grid=none to "
        "sweep the experiment's factors alone, or move them into a grid of their own (conf/grid/<name>.yaml, "
        "grid=<name>)"
    )
    planned = sweep("grid=none")
    assert planned.returncode == 0, planned.stderr
    assert "  factor norm: layer, rms   [experiment=ablation]" in planned.stdout
    assert "  factor pos: absolute, rope   [experiment=ablation]" in planned.stdout
    assert "  4 cells x 2 seeds = 8 runs" in planned.stdout
    assert not (tmp_path / "sweep").exists() or not any((tmp_path / "sweep").glob("*seed=*"))  # nothing trained
    # its runs compose the experiment from the same folder (train.py is given the sweep's searchpath)
    ran = sweep("grid=none", "plan=false", "seed=1", "norm=layer,rms", "pos=rope", "trainer.max_epochs=1")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "[sweep] 2/2 done, 0 failed" in ran.stdout


def test_a_plan_printed_into_a_closed_pipe_launches_nothing(tmp_path):
    """`sweep.py ... plan=true 2>&1 | head -2`: the plan's print failed, and so did the error's, into the closed
    pipe; Hydra took the callback's exception for a warning and launched every run of the sweep."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # as head does once it has its lines
    command = [sys.executable, str(ROOT / "sweep.py"), "grid=none", "data=toy", "pos=absolute,rope", "threads=1"]
    command += ["plan=true", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    try:
        done = subprocess.run(command, stdout=write, stderr=write, cwd=ROOT, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 2
    assert not (tmp_path / "sweep").exists()  # no multirun.yaml, no jobs, no run folders


def test_the_run_names_and_overrides_a_sweep_writes():
    """Hand values of the sweep's small rules: a folder's name is its values in key order, whatever order the
    command line gave them (a reordered rerun made new folders); ``~key`` deletes, ``~key=value`` deletes that
    value only; of a level's settings written two ways (400 and 400.0), the first that matches applies."""
    from nmt.sweep.levels import level_overrides

    assert plan.run_name({"seed": "1", "optim": "adam"}, {"seed", "optim"}) == "optim=adam,seed=1"
    assert plan.as_override("pos", "rope", "~") == "~pos=rope" and plan.as_override("pos", "", "~") == "~pos"
    assert level_overrides({"warmup": {"400": ["a=1"], "400.0": ["a=2"]}}, {"warmup": "400"}) == ["a=1"]
    # the expected cost: tenths of an hour from six minutes, minutes below
    assert plan.run_time([1800.0], 1) == "0.5 h" and plan.run_time([360.0], 1) == "0.1 h"
    assert plan.run_time([60.0], 1) == "1.0 min" and plan.run_time([7200.0, 3600.0], 4) == "6.0 h"


def test_a_key_deleted_on_the_command_line_is_deleted_in_every_run(tmp_path):
    """``~model.activation_dropout`` reached the runs as ``~model.activation_dropout=null`` (which deletes the key
    only where its value is null) where the level was read as "null"; the runs' configs lack the key."""
    config = sweep_config(tmp_path, "pos=absolute,rope", "~model.activation_dropout")
    levels = plan.sweep_levels(config)
    assert levels["model.activation_dropout"] == [""]
    overrides = plan.run_overrides(config, {"pos": "rope", "model.activation_dropout": ""})
    assert "~model.activation_dropout" in overrides
    assert "activation_dropout" not in plan.compose_train(overrides).model


def test_the_fingerprint_a_plan_expects_resolves_the_precision_as_train_py_does(monkeypatch):
    """trainer.precision=auto is resolved by train.py before it records the run (bf16-mixed on a CPU with bf16
    units): a plan that compared "auto" would call every finished run of such a machine changed."""
    from nmt.training import config_device

    monkeypatch.setattr(config_device, "_cpu_has_bf16_units", lambda: True)
    expected = plan.expected_fingerprint(["data=toy", "trainer.accelerator=cpu", "trainer.precision=auto"])
    assert expected["config"]["trainer.precision"] == "bf16-mixed"
