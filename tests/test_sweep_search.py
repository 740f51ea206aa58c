"""A search (``hydra/sweeper=search``, nmt/sweep/search.py): Optuna's sampler chooses each trial's settings from
the validation scores before it. Its trials are checked against Optuna itself, told the same scores; a rerun
asks the same trials and reuses their runs; a failed trial is recorded as failed and the search goes on; what a
search cannot do (a test score, a searched seed, an unseeded sampler, ...) is refused before any run."""

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from nmt.sweep.levels import expand, sweep_levels
from nmt.sweep.search import (
    SEARCH,
    held_values,
    read_search,
    search_metric,
    search_problem,
    search_settings,
    searched,
    write_search,
)
from nmt.sweep.search_report import write_search_report
from nmt.sweep.summary import PLAN
from nmt.utils.configs import ROOT
from tests.conftest import tiny_overrides
from tests.test_report_html import browser, rendered

LR = "optim.optimizer.lr"
SPACE = f"{LR}=tag(log,interval(1e-4,1e-2))"
HELD = ["grid=none", *[o for o in tiny_overrides() if not o.startswith("name=")], "threads=1", "seed=101"]


def search_config(tmp_path, *given: str, space: tuple[str, ...] = (SPACE,), sweeper: str = "search"):
    """A search's config as its sweep's start reads it: the command line's held settings composed in, the
    searched keys left in hydra.overrides.task (Hydra composes no sweep into the config)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "sweep",
            overrides=[f"hydra/sweeper={sweeper}", *given, f"hydra.sweep.dir={tmp_path}"],
            return_hydra_config=True,
        )
    with open_dict(cfg):
        cfg.hydra.overrides.task = [f"hydra/sweeper={sweeper}", *given, *space]
    return cfg


def replayed(told: list[float], asks: int, startup: int) -> list[float]:
    """The learning rates Optuna's TPE sampler (seed 1) asks, told ``told`` in turn: what a search must ask."""
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=startup))
    asked = []
    for number in range(asks):
        trial = study.ask()
        asked.append(trial.suggest_float(LR, 1e-4, 1e-2, log=True))
        if number < len(told):
            study.tell(trial, told[number])
    return asked


@pytest.mark.slow
def test_a_search_asks_what_optuna_asks_tells_it_each_runs_validation_score_and_resumes(tmp_path, capsys):
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        "hydra/sweeper=search",
        *HELD,
        "test_after_training=false",
        "report_metric=final_val_loss",
        "hydra.sweeper.sampler.n_startup_trials=1",  # the second trial on is chosen from the scores before it
        SPACE,
        f"hydra.sweep.dir={tmp_path}",
    ]
    first = subprocess.run(
        [*command, "hydra.sweeper.n_trials=1"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    trials = read_search(tmp_path)["trials"]
    assert [t["state"] for t in trials] == ["done"]
    for trial in trials:  # each run trained with its trial's value, and told the score it recorded
        run = tmp_path / trial["run"]
        config = (run / "config.yaml").read_text()
        assert f"lr: {trial['values'][LR]}" in config
        assert trial["value"] == json.loads((run / "sweep_result.json").read_text())["metrics"]["final_val_loss"]
    told = [t["value"] for t in trials]
    assert [t["values"][LR] for t in trials] == pytest.approx(replayed(told, 1, startup=1), rel=1e-12)

    again = subprocess.run(
        [*command, "hydra.sweeper.n_trials=2"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert again.stdout.count("done already, skipped") == 1 and again.stdout.count("[sweep] running:") == 1
    trials = read_search(tmp_path)["trials"]
    told = [t["value"] for t in trials]
    assert [t["values"][LR] for t in trials] == pytest.approx(replayed(told, 2, startup=1), rel=1e-12)
    report = (tmp_path / "search.md").read_text()
    best = min(trials, key=lambda t: t["value"])
    assert f"Best: trial {best['number']}, {LR}={best['values'][LR]:.4g}: final_val_loss" in report
    rows = [line for line in report.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [float(row.split(" | ")[3]) for row in rows] == sorted(round(v, 2) for v in told)  # lowest first
    assert "validation, lower is better" in report and "seed=201,202,203" in report

    plan = subprocess.run(
        [*command, "hydra.sweeper.n_trials=3", "plan=true"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "trials asked before: 2 (2 done, 0 failed)" in plan.stdout and "trials to run: 1" in plan.stdout
    # refused before any run, as the sweep's start checks them (in this process: the command line's path to
    # that start is the one above):
    from nmt.sweep.callback import SweepReport

    held = [c for c in command[2:-2] if not c.startswith(("hydra/sweeper", "hydra.sweeper"))]
    sampler = ["hydra.sweeper.sampler.n_startup_trials=1", "hydra.sweeper.n_trials=2"]
    # a held setting changed: the same trials would be asked, and their runs were made under other settings
    changed = search_config(tmp_path, *held, *sampler, "model.dropout=0.3")
    with open_dict(changed):  # Hydra's own settings are not the task's
        changed.hydra.overrides.task = [o for o in changed.hydra.overrides.task if not o.startswith("hydra.")]
    with pytest.raises(SystemExit) as refused:
        SweepReport().on_multirun_start(changed)
    said = capsys.readouterr().err
    assert refused.value.code == 2 and "made under other settings or code" in said and "model.dropout" in said
    # a grid in the search's folder would mix its runs with the trials
    grid = search_config(tmp_path, *held, space=(f"{LR}=0.001",), sweeper="basic")
    with pytest.raises(SystemExit) as refused:
        SweepReport().on_multirun_start(grid)
    assert refused.value.code == 2 and "holds a search; a grid in its folder" in capsys.readouterr().err
    # the report written again from the folder, as a stopped search's message says
    (tmp_path / "search.md").unlink()
    from nmt.sweep.report import main as report_main

    report_main([str(tmp_path)])
    assert f"Best: trial {best['number']}," in (tmp_path / "search.md").read_text()


class FakeReturn:
    def __init__(self, outcome):
        self.outcome = outcome

    @property
    def return_value(self):  # as Hydra's JobReturn: raises what the job raised
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class FakeLauncher:
    """Runs nothing: the job of ``failing`` raises, the one of ``unrun`` returns nothing (another process
    trains it), the others record a score."""

    def __init__(self, failing: int | None = 1, unrun: int | None = None):
        self.launched, self.failing, self.unrun = [], failing, unrun
        self.scores = {}  # a run's score, the same whenever it is launched again (its record reused)

    def launch(self, overrides, initial_job_idx):
        returns = []
        for number, trial in enumerate(overrides, initial_job_idx):
            self.launched.append(list(trial))
            if number == self.failing:
                outcome = RuntimeError("loss not finite for 11 batches")
            else:
                score = self.scores.setdefault(tuple(trial), 5.0 - number)
                outcome = None if number == self.unrun else {"metrics": {"final_val_loss": score}}
            returns.append(FakeReturn(outcome))
        return returns


def searched_with(tmp_path, cfg, n_trials: int, launcher=None, n_jobs: int = 1, startup: int = 10) -> FakeLauncher:
    """run_search as Hydra's sweeper calls it, with the plugin's own sweeper and a launcher that runs nothing."""
    from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl

    from nmt.sweep.search_sweeper import run_search

    sampler = optuna.samplers.TPESampler(seed=1, n_startup_trials=startup)
    impl = OptunaSweeperImpl(sampler, "auto", None, None, n_trials, n_jobs, None, None, None)
    impl.config, impl.launcher, impl.job_idx = cfg, launcher or FakeLauncher(), 0
    (tmp_path / PLAN).write_text(json.dumps({"search": search_settings(cfg, "final_val_loss")}))
    run_search(impl, list(cfg.hydra.overrides.task[1:]))
    return impl.launcher


def test_a_failed_trial_is_recorded_as_failed_and_the_search_goes_on(tmp_path):
    cfg = search_config(tmp_path, *HELD, "report_metric=final_val_loss", "hydra.sweeper.n_trials=3")
    launcher = searched_with(tmp_path, cfg, 3)
    trials = read_search(tmp_path)["trials"]
    assert [t["state"] for t in trials] == ["done", "failed", "done"]
    assert trials[1]["error"] == "loss not finite for 11 batches" and "value" not in trials[1]
    # the held settings reach each run as typed, the searched one as sampled
    assert all(launched[: len(HELD)] == HELD for launched in launcher.launched)
    assert launcher.launched[0][-1] == f"{LR}={trials[0]['values'][LR]}"
    report = (tmp_path / "search.md").read_text()
    assert "Failed (1; not scored, so the sampler learns nothing from them):" in report
    assert "- trial 1 (" in report and "loss not finite for 11 batches; its run failed: a rerun runs it again" in report
    assert "Best: trial 2," in report  # 3.0 against 5.0: lower is better
    # a sitting of fewer trials asks the first ones again and keeps the later ones in the record
    searched_with(tmp_path, cfg, 2)
    assert read_search(tmp_path)["trials"] == trials


def test_a_rerun_asks_the_trials_asked_before_then_goes_on_where_the_sampler_left_off(tmp_path):
    """A trial that failed or did not run in the first sitting scores in the second: the rerun still asks the
    first sitting's trials with their values (told as then; the new scores once past them), and its new trials
    are the sampler's next draws, not its first ones again (Optuna itself, asked six trials in a row, is the
    reference: in TPE's random start the draws do not depend on the scores)."""
    cfg = search_config(tmp_path, *HELD, "report_metric=final_val_loss", "hydra.sweeper.n_trials=4")
    searched_with(tmp_path, cfg, 4, FakeLauncher(failing=1, unrun=2))
    first = read_search(tmp_path)["trials"]
    assert [t["state"] for t in first] == ["done", "failed", "asked", "done"]  # asked: not told, not run here
    searched_with(tmp_path, cfg, 6, FakeLauncher(failing=None))
    again = read_search(tmp_path)["trials"]
    assert [t["values"] for t in again[:4]] == [t["values"] for t in first]
    assert [t["state"] for t in again] == ["done"] * 6
    assert [t["values"][LR] for t in again] == pytest.approx(replayed([], 6, startup=10), rel=1e-12)


def test_a_trial_that_scored_late_is_told_as_late_in_every_later_rerun(tmp_path):
    """TPE from the second trial: a trial failed in the first sitting and scored in the second was told after
    the second had asked every recorded trial; a third sitting must tell it there again, or the draws of the
    trials after it change and the record's runs are lost."""
    cfg = search_config(tmp_path, *HELD, "report_metric=final_val_loss", "hydra.sweeper.n_trials=3")
    searched_with(tmp_path, cfg, 3, FakeLauncher(failing=1), startup=1)
    searched_with(tmp_path, cfg, 4, FakeLauncher(failing=None), startup=1)
    second = read_search(tmp_path)["trials"]
    assert [t["state"] for t in second] == ["done"] * 4 and second[1]["told_at"] == 3 and second[0]["told_at"] == 1
    searched_with(tmp_path, cfg, 4, FakeLauncher(failing=None), startup=1)
    assert read_search(tmp_path)["trials"] == second and not list(tmp_path.glob("search_aside_*"))
    # scored then, failing now (its run removed, say): the score the sampler drew the later trials from stands
    searched_with(tmp_path, cfg, 4, FakeLauncher(failing=2), startup=1)
    assert read_search(tmp_path)["trials"] == second and not list(tmp_path.glob("search_aside_*"))


def test_a_rerun_told_other_scores_than_its_record_says_so_and_sets_the_rest_aside(tmp_path):
    cfg = search_config(tmp_path, *HELD, "report_metric=final_val_loss", "hydra.sweeper.n_trials=3")
    searched_with(tmp_path, cfg, 3, FakeLauncher(failing=None), startup=1)  # TPE's draws follow the scores
    first = read_search(tmp_path)["trials"]
    edited = [{**first[0], "value": 0.5}, *first[1:]]  # a record edited: trial 0 the best, not the worst
    write_search(tmp_path, {k: v for k, v in read_search(tmp_path).items() if k != "trials"}, edited)
    launcher = FakeLauncher(failing=None)
    launcher.scores[tuple(first[0]["overrides"])] = 0.5
    searched_with(tmp_path, cfg, 3, launcher, startup=1)
    again = read_search(tmp_path)["trials"]
    assert [t["values"] for t in again[:2]] == [t["values"] for t in first[:2]]
    assert again[2]["values"] != first[2]["values"]
    (aside,) = tmp_path.glob("search_aside_2_*.json")
    assert read_search(tmp_path, aside.name)["trials"] == first[2:]


def test_a_run_asked_twice_in_a_batch_is_launched_once_and_reported_once(tmp_path):
    cfg = search_config(tmp_path, *HELD, "report_metric=final_val_loss", space=("model.dropout=choice(0.1)",))
    launcher = searched_with(tmp_path, cfg, 4, FakeLauncher(failing=None), n_jobs=2)
    assert len(launcher.launched) == 2  # two batches of one run each
    trials = read_search(tmp_path)["trials"]
    assert len({t["run"] for t in trials}) == 1 and [t["state"] for t in trials] == ["done"] * 4
    report = (tmp_path / "search.md").read_text()
    assert "| 1 | 0, 1, 2, 3 | 0.1 |" in report and "ties" not in report


def written_search(tmp_path):
    """A search of two keys, four trials scored (two tied), recorded as its sweeper records them."""
    settings = {
        "metric": "best_val_bleu",
        "direction": "maximize",
        "space": {LR: "tag(log,interval(1e-4,1e-2))", "warmup": "int(interval(400,3200))"},
        "held": {"data": "toy", "optim": "noam", "seed": "101", "test_after_training": "false"},
        "held_lines": ["grid=none", "data=toy", "optim=noam", "seed=101", "test_after_training=false", "~logger"],
        "n_trials": 4,
        "n_jobs": 1,
        "sampler": "TPESampler",
        "sampler_seed": 1,
    }
    trials = [  # lr 1.1e-4 is 2% of the log range from its low end; warm-up 1800 mid-range
        {"number": n, "run": f"r{n}", "values": {LR: lr, "warmup": w, "seed": "101"}, "state": "done", "value": v}
        for n, lr, w, v in ((0, 3e-3, 900, 20.0), (1, 1.1e-4, 1800, 31.5), (2, 5e-4, 3000, 31.5), (3, 1e-3, 500, 9.0))
    ]
    write_search(tmp_path, settings, trials)
    return trials


def test_the_search_report_says_a_tie_an_end_of_the_range_and_how_to_compare_the_first_trials(tmp_path):
    written_search(tmp_path)
    report = write_search_report(tmp_path).read_text()
    assert f"Best: trial 1, {LR}=0.00011 warmup=1800: best_val_bleu 31.50." in report
    assert "It ties with trials 2, run with other settings: best_val_bleu does not tell them apart" in report
    assert f"Its {LR} lies at the end of the range searched (0.0001)" in report and "Its warmup" not in report
    # two keys: one sweep per trial (a grid would cross their values), pooled by tune on the search's metric
    common = (
        "python sweep.py grid=none data=toy optim=noam test_after_training=false '~logger' report_metric=best_val_bleu"
    )
    assert f"{common} {LR}=0.00011 warmup=1800 seed=201,202,203 sweep_name=<name>_t1" in report
    assert f"{common} {LR}=0.003 warmup=900 seed=201,202,203 sweep_name=<name>_t0" in report
    assert "sweep.py tune sweeps/<name>_t1 sweeps/<name>_t2 sweeps/<name>_t0 --level" in report
    assert "--metric best_val_bleu" in report
    # the same report as one page: the ranking, both figures embedded, the commands as written
    page = (tmp_path / "search.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2 and page.count("<tr>") == 1 + 4
    assert f"{common} {LR}=0.00011 warmup=1800 seed=201,202,203 sweep_name=&lt;name&gt;_t1" in page
    assert "![best_val_bleu of each trial in the order asked" in report and "](search_slices.png)" in report
    if browser() is not None:  # both figures decode, the table renders, no script error
        shown = rendered(tmp_path / "search.html")
        assert shown["figures"] == shown["figures-rendered"] == 2 and shown["tables"] == 1
        assert "Uncaught" not in shown["stderr"] and ":ERROR:CONSOLE" not in shown["stderr"]


def test_the_search_figures_draw_each_trial_the_best_so_far_and_a_log_range_on_a_log_axis(tmp_path, monkeypatch):
    from nmt.sweep import figures

    drawn, save = {}, figures.atomic_save_figure

    def saved(figure, path, **kwargs):  # each figure kept to read what it draws (closing one keeps its axes)
        drawn[path.name] = figure
        save(figure, path, **kwargs)

    monkeypatch.setattr(figures, "atomic_save_figure", saved)
    trials = written_search(tmp_path)
    write_search_report(tmp_path)
    (history,) = drawn["search_history.png"].axes
    points, best = history.lines  # the scores in the order asked, and the best so far as a step line
    assert list(points.get_ydata()) == [t["value"] for t in trials]
    assert list(best.get_ydata()) == [20.0, 31.5, 31.5, 31.5]  # higher is better: a running maximum
    lr_axis, warmup_axis = (ax for ax in drawn["search_slices.png"].axes if ax.get_xlabel() in (LR, "warmup"))
    assert lr_axis.get_xscale() == "log" and warmup_axis.get_xscale() == "linear"
    lr_points = lr_axis.collections[0].get_offsets()  # one point per run: (value, score)
    assert sorted(map(tuple, lr_points.tolist())) == sorted((t["values"][LR], t["value"]) for t in trials)
    # the best trial ringed in each panel, at its own value
    assert list(lr_axis.lines[0].get_xdata()) == [1.1e-4] and list(warmup_axis.lines[0].get_xdata()) == [1800]
    # a search whose trials were set aside (none scored now): no figure of theirs is left beside the report
    write_search(tmp_path, read_search(tmp_path), [])
    drawn.clear()
    write_search_report(tmp_path)
    assert not drawn and not list(tmp_path.glob("search_*.png"))


def test_a_search_logged_to_wandb_holds_its_trials_panels_and_best_trial_once(tmp_path, monkeypatch, capsys):
    from nmt.sweep import dashboard
    from nmt.sweep.callback import SweepReport

    trials = written_search(tmp_path)
    record = read_search(tmp_path)  # a choice of a word and a number: one W&B column takes one type
    record["space"]["batch"] = "choice(auto,64)"
    for trial in trials:
        trial["values"]["batch"] = "auto" if trial["number"] % 2 else 64
    write_search(tmp_path, {k: v for k, v in record.items() if k != "trials"}, trials)
    write_search_report(tmp_path)
    logged = []  # the search's end logs its report where its runs log to W&B (the sweep's group)
    monkeypatch.setattr(dashboard, "log_search_to_wandb", lambda *args, **kwargs: logged.append((args, kwargs)))
    SweepReport().on_multirun_end(search_config(tmp_path, *HELD, "logger=wandb", "sweep_name=s1"))
    assert logged == [((str(tmp_path),), {"project": "nmt", "group": "s1"})]
    monkeypatch.undo()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    import wandb

    try:
        dashboard.log_search_to_wandb(tmp_path, project="nmt", group="s1")
    finally:
        wandb.teardown()  # W&B's service address left in os.environ would reach later subprocesses
    (path,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    for key in (b"trials", b"history", f"{LR}_slice".encode(), b"warmup_slice", b"report", b"search_slices"):
        assert key in data, key
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("wandb")), "leet", "inspect", "--summary", "--json", str(path)],
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        pytest.skip(f"`wandb leet inspect` not available: {shown.stderr[-300:]}")
    run = json.loads(shown.stdout)
    assert run["name"] == "s1-report"
    best = {k: v for k, v in run["summary"].items() if k.startswith("best/")}
    assert best == {
        "best/best_val_bleu": 31.5,
        "best/trial": 1,
        f"best/{LR}": 1.1e-4,
        "best/warmup": 1800,
        "best/batch": "auto",
    }
    dashboard.log_search_to_wandb(tmp_path, project="nmt", group="s1")  # the same report again: not logged
    assert "already holds this report; not logged again" in capsys.readouterr().out
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb")) == [path]


def test_trials_stopped_early_before_they_learned_are_said_to_be_ranked_by_the_stopping_rule(tmp_path):
    settings = {
        "metric": "best_val_bleu",
        "direction": "maximize",
        "space": {"warmup": "int(interval(100,3200))"},
        "n_trials": 3,
        "n_jobs": 1,
        "sampler": "TPESampler",
        "sampler_seed": 1,
    }
    trials = []
    for number, (warmup, value, ended) in enumerate(((300, 99.1, "early stopping"), (3000, 0.0, "early stopping"))):
        run = tmp_path / f"r{number}"
        run.mkdir()
        record = {"metrics": {"best_val_bleu": value}, "epochs": 6, "ended_by": ended, "seed": 101, "factors": {}}
        (run / "sweep_result.json").write_text(json.dumps(record))
        values = {"warmup": warmup, "seed": "101"}
        trials.append({"number": number, "run": run.name, "values": values, "state": "done", "value": value})
    write_search(tmp_path, settings, trials)
    report = write_search_report(tmp_path).read_text()
    assert "Trials 1 scored 0.00 and were stopped early: they had learned nothing" in report
    assert "Trials 0 " not in report
    # runs that record whether early stopping ended them inside their warm-up: said from the record, whatever
    # their score (trial 0 stopped inside it too, having learned something by then)
    for number, inside in ((0, True), (1, False)):
        path = tmp_path / f"r{number}" / "sweep_result.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "stopped_in_warmup": inside}))
    report = write_search_report(tmp_path).read_text()
    assert "Trials 0 were stopped by early stopping inside their learning rate's warm-up (scoring 99.10)" in report
    assert "Trials 1 " not in report and "learned nothing" not in report


def test_a_search_none_of_whose_trials_scored_ends_with_status_1(tmp_path):
    from nmt.sweep.callback import SweepReport

    cfg = search_config(tmp_path, *HELD)
    trial = {"number": 0, "run": "r0", "values": {LR: 1e-3, "seed": "101"}, "state": "failed", "error": "no score"}
    write_search(tmp_path, {}, [trial])
    with pytest.raises(SystemExit) as ended:
        SweepReport().on_multirun_end(cfg)
    assert ended.value.code == 1


def test_a_search_with_a_trial_killed_by_a_signal_ends_with_status_1(tmp_path, capsys):
    """A trial's run killed (kill -9, the kernel's OOM killer) was a failed trial like a diverged one, and the
    search ended 0: a script could not tell that trials are left to run again."""
    from nmt.sweep.callback import SweepReport

    cfg = search_config(tmp_path, *HELD)
    done = {"number": 0, "run": "r0", "values": {LR: 1e-3, "seed": "101"}, "state": "done", "value": 3.0}
    diverged = {"number": 1, "run": "r1", "values": {LR: 1e-2, "seed": "101"}, "state": "failed", "error": "no score"}
    write_search(tmp_path, {}, [done, diverged])
    SweepReport().on_multirun_end(cfg)  # a failed trial's outcome: the search stands
    killed = {**diverged, "number": 2, "run": "r2", "error": "killed by signal 9; its log ends: epoch 3"}
    write_search(tmp_path, {}, [done, diverged, killed])
    with pytest.raises(SystemExit) as ended:
        SweepReport().on_multirun_end(cfg)
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert "1 trial(s) of" in err and "were killed (trial 2): rerun the search to run them again" in err
    # SIGTERM too (a scheduler's preemption); a crash by another signal is the trial's own outcome
    for signum, status in ((15, 1), (11, None)):
        ended_by = {**killed, "error": f"killed by signal {signum}; its log ends: epoch 3"}
        write_search(tmp_path, {}, [done, diverged, ended_by])
        if status is None:
            SweepReport().on_multirun_end(cfg)
            continue
        with pytest.raises(SystemExit) as ended:
            SweepReport().on_multirun_end(cfg)
        assert ended.value.code == status


def test_what_a_search_holds_searches_and_follows(tmp_path):
    cfg = search_config(tmp_path, *HELD, "optim=noam", space=(SPACE, "warmup=int(interval(400,3200))"))
    assert searched(cfg) == {LR: "tag(log,interval(1e-4,1e-2))", "warmup": "int(interval(400,3200))"}
    assert held_values(cfg)["optim"] == "noam" and held_values(cfg)["seed"] == "101" and LR not in held_values(cfg)
    # the runs are checked before any starts at each interval's two ends
    assert sweep_levels(cfg)[LR] == ["0.0001", "0.01"] and sweep_levels(cfg)["warmup"] == ["400", "3200"]
    assert search_metric(cfg, "test_bleu") == "best_val_bleu"
    assert search_metric(cfg, "test_cer") == "best_val_cer"
    assert search_settings(cfg, "best_val_cer")["direction"] == "minimize"
    assert search_problem(cfg, "best_val_bleu") is None
    with pytest.raises(ValueError, match="an interval is not a grid.*hydra/sweeper=search"):
        expand([SPACE])  # in a grid sweep


@pytest.mark.parametrize(
    "given, space, said",
    [
        (["report_metric=test_bleu"], (SPACE,), "a search follows a validation score"),
        ([], (SPACE, "seed=choice(1,2)"), "seed=choice(1,2): a search trains each trial at one seed"),
        ([], (), "no key is searched"),
        (
            ["hydra.sweeper.direction=minimize"],
            (SPACE,),
            "direction=minimize: best_val_bleu is better higher; give maximize",
        ),
        (["hydra.sweeper.sampler.seed=null"], (SPACE,), "a rerun would ask other trials"),
        (["hydra.sweeper.storage=sqlite:///x.db"], (SPACE,), "a search's record is its folder"),
        (["+baseline={optim: adam}"], (SPACE,), "a search has no cells to test against a baseline"),
        (
            ["grid=default"],
            (SPACE,),
            "the default grid=transformer would add norm, optim, pos, smoothing to the search",
        ),
        (
            ["hydra.sweeper.n_jobs=2"],
            (SPACE,),
            "would run 1 at a time; add hydra/launcher=joblib hydra.launcher.n_jobs=2",
        ),
        (
            ["gpu_pool=true", "runs_per_gpu=4"],
            (SPACE,),
            "the GPUs take 4 runs at once, and a search launches hydra.sweeper.n_jobs=1",
        ),
        (["on_changed=move"], (SPACE,), "on_changed=move: a grid's"),
        (["report_sentence=3"], (SPACE,), "report_sentence=3: a search's report shows no test sentence"),
        ([], ("model.encoder_layers=range(1,4)",), "the sampler would draw range's end too"),
        ([], (f"++{LR}=interval(1e-4,1e-2)",), "a searched key is written without a prefix"),
    ],
)
def test_a_search_refuses_what_it_cannot_do(tmp_path, given, space, said):
    held = [o for o in HELD if o != "grid=none"] if "grid=default" in given else HELD
    cfg = search_config(tmp_path, *held, *(g for g in given if g != "grid=default"), space=space)
    try:
        problem = search_problem(cfg, search_metric(cfg, "test_bleu"))
    except ValueError as err:
        problem = str(err)
    assert problem is not None and said in problem


def test_a_range_in_a_search_is_refused_before_its_levels_are_composed(tmp_path, monkeypatch):
    """warmup=range(400,3200) composed 2,800 grid cells (minutes without a word) before it was refused."""
    from nmt.sweep import inputs

    monkeypatch.setattr(inputs, "sweep_levels", lambda config: pytest.fail("levels composed"))
    cfg = search_config(tmp_path, *HELD, space=("warmup=range(400,3200)",))
    assert "warmup=range(400,3200): in a search, the sampler would draw range's end too" in inputs.input_problem(cfg)
    # an interval written backwards: Optuna's "The low value must be smaller ..." named no key
    cfg = search_config(tmp_path, *HELD, space=("warmup=int(interval(400,100))",))
    assert inputs.input_problem(cfg) == (
        "warmup=int(interval(400,100)): the interval runs from 400 down to 100; write its low end first: "
        "interval(100,400)"
    )


def test_held_settings_are_repeated_as_typed_and_sampled_values_as_hydra_reads_them(tmp_path):
    from nmt.sweep.search import held_lines, other_search
    from nmt.sweep.search_sweeper import _as_value

    cfg = search_config(tmp_path, *HELD, "+tuned=factorial_converged_toy", "~logger", "+model.extra='a b'")
    lines = held_lines(cfg)
    assert lines["tuned"] == "+tuned=factorial_converged_toy" and lines["logger"] == "~logger"
    assert lines["model.extra"] == "+model.extra='a b'" and "seed" not in lines and "grid" not in lines
    assert [_as_value(v) for v in ("a,b", None, True, "rope", 0.5)] == ["'a,b'", "null", "true", "rope", "0.5"]
    # one range written two ways is one search
    a = search_settings(cfg, "best_val_bleu")
    b = search_settings(
        search_config(tmp_path, *HELD, space=(f"{LR}=tag(log, interval(0.0001, 0.01))",)), "best_val_bleu"
    )
    assert other_search(a, b) is None
    c = search_settings(search_config(tmp_path, *HELD, space=(f"{LR}=tag(log,interval(1e-4,1e-1))",)), "best_val_bleu")
    assert other_search(a, c).startswith("it searches")  # another range: its trials would be asked otherwise
    for other in ("seed=102", "hydra.sweeper.n_jobs=2", "hydra.sweeper.sampler.n_startup_trials=3"):
        assert other_search(a, search_settings(search_config(tmp_path, *HELD, other), "best_val_bleu"))
    assert other_search(a, search_settings(search_config(tmp_path, *HELD, "hydra.sweeper.n_trials=40"), "x"))
    assert (
        other_search(a, search_settings(search_config(tmp_path, *HELD, "hydra.sweeper.n_trials=40"), "best_val_bleu"))
        is None
    )


def test_the_optuna_plugins_own_sweeper_is_refused_for_the_search_that_goes_on_past_a_failure(tmp_path):
    cfg = search_config(tmp_path, *HELD, sweeper="optuna")
    assert "goes through hydra/sweeper=search" in search_problem(cfg, "best_val_bleu")


def test_a_search_refuses_an_interval_of_a_group_and_a_final_score_its_runs_do_not_make(tmp_path):
    from nmt.sweep.inputs import RunConfigs, metric_problem

    with pytest.raises(ValueError, match="pos is a config group, whose options are names; search them with pos=choice"):
        sweep_levels(search_config(tmp_path, *HELD, space=("pos=interval(1,2)",)))
    cfg = search_config(tmp_path, *HELD, "val_after_training=false")
    runs = RunConfigs()
    assert runs.read(cfg, sweep_levels(cfg)) is None
    assert "val_after_training=false" in metric_problem(cfg, runs, "val_as_test_bleu")
    assert metric_problem(cfg, runs, "best_val_bleu") is None


def test_a_search_of_a_test_score_stops_before_any_run(tmp_path):
    command = [sys.executable, str(ROOT / "sweep.py"), "hydra/sweeper=search", *HELD, SPACE]

    def search(*given: str):
        args = [*command, *given, f"hydra.sweep.dir={tmp_path}"]
        return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)

    result = search("report_metric=test_bleu")
    assert result.returncode == 2 and "report_metric=test_bleu: a search follows a validation score" in result.stderr
    assert not (tmp_path / SEARCH).exists() and not any(tmp_path.glob("*seed=*"))
    # one sitting of a search at a time: a second would ask the same trials and write over the first's record
    from nmt.training.run_folder import RunLock

    with RunLock(tmp_path):
        second = search("test_after_training=false")
    assert second.returncode == 2 and f"another process runs the search in {tmp_path}" in second.stderr
