"""Settings that go with a factor's level (a fair factorial: each level tuned) and choosing them on
validation data from tuning sweeps."""

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from nmt.sweep.levels import level_overrides, level_settings_problem, tune, write_level_settings

from .conftest import ROOT, tiny_overrides

SETTINGS = {"optim": {"adam": ["optim.optimizer.lr=0.002"], "noam": ["warmup=7", "optim.scheduler.factor=2.0"]}}
LEVELS = {"seed": ["1", "2"], "optim": ["adam", "noam"], "pos": ["absolute"]}


def test_each_run_gets_the_settings_of_its_levels():
    assert level_overrides(SETTINGS, {"optim": "adam", "seed": "1"}) == ["optim.optimizer.lr=0.002"]
    assert level_overrides(SETTINGS, {"optim": "noam"}) == ["warmup=7", "optim.scheduler.factor=2.0"]
    assert level_overrides(SETTINGS, {"optim": "adamw"}) == [] and level_overrides({}, {"optim": "adam"}) == []
    assert level_overrides(OmegaConf.create(SETTINGS), {"optim": "adam"}) == ["optim.optimizer.lr=0.002"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"norm": {"rms": ["warmup=3"]}}, r"level_settings.norm: norm is not a key of this sweep"),
        ({"optim": {"adam": ["warmup"]}}, r"level_settings.optim.adam: 'warmup' is not key=value"),
        ({"optim": {"adam": ["pos=relative"]}}, r"pos is also set by the command line or grid; set it in one place"),
        ({"optim": {"adam": ["seed=3"]}}, r"seed is also a factor of this sweep"),
        ({"optim": ["lr=1"]}, r"expected level: \[key=value, ...\]"),
        # a misspelt level would give its runs nothing, and the report would call the levels tuned
        ({"optim": {"noma": ["warmup=4"]}}, r"level_settings.optim.noma: noma is not an option of group optim"),
        ({"pos": {"rope": ["warmup=4"]}}, None),  # an option of the group, not swept here (a tuned file's): taken
        ({"seed": {"7": ["warmup=4"]}}, None),  # not a group: another sweep's level, taken
    ],
)
def test_level_settings_that_cannot_work_are_one_line(settings, message):
    if message is None:
        assert level_settings_problem(settings, LEVELS) is None
        return
    assert level_settings_problem(settings, LEVELS) is not None
    assert __import__("re").search(message, level_settings_problem(settings, LEVELS))
    assert level_settings_problem(SETTINGS, LEVELS) is None


def fake_tuning_sweep(path, level: str, key: str, scores: dict[str, list[float]]) -> None:
    """A finished tuning sweep: ``level`` held constant, ``key`` swept, seeds as replicates."""
    values = ",".join(scores)
    seeds = ",".join(str(s + 1) for s in range(len(next(iter(scores.values())))))
    task = [f"optim={level}", f"{key}={values}", f"seed={seeds}", "data=toy"]
    OmegaConf.save(
        OmegaConf.create({"hydra": {"sweeper": {"params": {}}, "overrides": {"task": task}}}), path / "multirun.yaml"
    )
    for value, by_seed in scores.items():
        for seed, score in enumerate(by_seed, start=1):
            run = path / f"{key}={value},seed={seed}"
            run.mkdir(parents=True)
            record = {"factors": {key: value}, "seed": seed, "metrics": {"best_val_bleu": score, "test_bleu": 99.0}}
            (run / "sweep_result.json").write_text(json.dumps(record))


def test_tuning_chooses_each_levels_best_mean_on_validation(tmp_path):
    (tmp_path / "adam").mkdir(), (tmp_path / "noam").mkdir()
    # 0.001 has the best single run but the lower mean: the mean over seeds decides
    fake_tuning_sweep(tmp_path / "adam", "adam", "optim.optimizer.lr", {"0.0005": [20, 22], "0.001": [25, 10]})
    fake_tuning_sweep(tmp_path / "noam", "noam", "warmup", {"200": [30, 31], "400": [33, 34], "800": [32, 30]})
    settings, table = tune([tmp_path / "adam", tmp_path / "noam"], "optim")
    assert settings == {"optim": {"adam": ["optim.optimizer.lr=0.0005"], "noam": ["warmup=400"]}}
    assert table[2] == "| adam | optim.optimizer.lr=0.0005 | 21.00 ± 12.71 | 2 |"  # t(0.975, 1) = 12.706
    assert "| noam | warmup=400 | 33.50 ± 6.35 | 2 |" in table
    assert table[0] == "| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |"

    out = tmp_path / "tuned.yaml"
    write_level_settings(out, settings, "chosen by a test", table)
    assert OmegaConf.to_container(OmegaConf.load(out)) == {"level_settings": settings}
    assert out.read_text().startswith("# @package _global_\n# chosen by a test\n# | optim | candidate |")
    assert "# | noam | warmup=400 | 33.50 ± 6.35 | 2 |\n" in out.read_text()  # the candidates, for the report


def test_a_sweep_with_a_tuned_file_records_it_and_its_report_quotes_how_the_settings_were_chosen(tmp_path):
    """+tuned=<name>: the report named no tuning at all, only each level's values."""
    from hydra import compose, initialize_config_dir

    from nmt.sweep.report import write_report
    from nmt.sweep.runner import tuned_file

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=["+tuned=factorial_converged_toy"], return_hydra_config=True)
    tuned = tuned_file(cfg)
    text = (ROOT / "conf" / "tuned" / "factorial_converged_toy.yaml").read_text()
    assert tuned["name"] == "factorial_converged_toy" and tuned["notes"][0] in text
    assert tuned["notes"][0].startswith("chosen by: python sweep.py tune")
    from .test_statistics import synthetic_sweep

    synthetic_sweep(tmp_path)
    settings = {"pos": {"absolute": ["lr=1e-3"], "relative": ["lr=2e-3"]}}
    tuned["notes"] += ["| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |", "|---|---|---|---|"]
    tuned["notes"] += ["| adam | optim.optimizer.lr=0.0005 | 21.00 ± 12.71 | 2 |"]  # as tune writes them
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 12, "level_settings": settings, "tuned": tuned}))
    report = write_report(tmp_path).read_text()
    row = "| level settings from | +tuned=factorial_converged_toy (conf/tuned/factorial_converged_toy.yaml) |"
    assert row in report
    flat = " ".join(report.split())
    assert "How the level settings were chosen, as conf/tuned/factorial_converged_toy.yaml's notes say" in flat
    assert tuned["notes"][0] in flat
    assert "| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |\n|---|---|---|---|\n| adam |" in report


def test_tuning_refuses_the_test_set_a_swept_level_and_two_sweeps_of_one_level(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    fake_tuning_sweep(tmp_path / "a", "adam", "optim.optimizer.lr", {"0.001": [20.0]})
    fake_tuning_sweep(tmp_path / "b", "adam", "optim.optimizer.lr", {"0.002": [21.0]})
    with pytest.raises(ValueError, match=r"a second tuning sweep of optim=adam"):
        tune([tmp_path / "a", tmp_path / "b"], "optim")
    # a key the sweep does not set: the message lists those it holds at one level, the level's among them
    with pytest.raises(ValueError, match=r"--level pos: this tuning sweep does not set pos .* one of \[.*optim=adam"):
        tune([tmp_path / "a"], "pos")
    # a metric no run records (misspelt): the metrics they do record, and the closest, not advice to rerun them
    with pytest.raises(
        ValueError, match=r"no run records best_val_bleuu \(did you mean --metric best_val_bleu\?\); its"
    ):
        tune([tmp_path / "a"], "optim", "best_val_bleuu")
    command = [sys.executable, str(ROOT / "sweep.py"), "tune", str(tmp_path / "a"), "--level", "optim"]
    refused = subprocess.run([*command, "--metric", "test_bleu"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "never on the test set" in refused.stderr
    chosen = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert chosen.returncode == 0 and '"optim.optimizer.lr=0.001"' in chosen.stdout
    # one seed a candidate: the table heads no interval it does not give
    assert "| optim | candidate | best_val_bleu (one seed each: no interval) | seeds |" in chosen.stdout


SWEEP = [
    "grid=none",
    *[o for o in tiny_overrides() if not o.startswith("name=")],
    "trainer.max_steps=2",
    "validation.bleu_every_n_epochs=0",
    "checkpoint.monitor=val_loss",
    "checkpoint.mode=min",
    "early_stopping.monitor=val_loss",
    "early_stopping.mode=min",
    "threads=1",
    "optim=adam,noam",
    "seed=1",
    "level_settings={optim: {adam: ['optim.optimizer.lr=0.002'], noam: ['warmup=7']}}",
]


def test_a_sweep_plans_and_trains_each_level_with_its_settings(tmp_path):
    command = [sys.executable, str(ROOT / "sweep.py"), *SWEEP, f"hydra.sweep.dir={tmp_path}"]
    plan = subprocess.run([*command, "plan=true"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "with optim=adam: optim.optimizer.lr=0.002   [level_settings]" in plan.stdout
    assert "with optim=noam: warmup=7   [level_settings]" in plan.stdout
    conflict = subprocess.run([*command, "warmup=9"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert conflict.returncode == 2 and "[sweep] running" not in conflict.stdout
    assert "level_settings.optim.noam: 'warmup=7': warmup is also set by the command line or grid" in conflict.stderr

    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    adam = OmegaConf.load(tmp_path / "optim=adam,seed=1" / "config.yaml")
    noam = OmegaConf.load(tmp_path / "optim=noam,seed=1" / "config.yaml")
    assert adam.optim.optimizer.lr == 0.002 and noam.warmup == 7 and adam.warmup != 7
    report = (tmp_path / "report.md").read_text()
    assert "| settings with optim=adam | optim.optimizer.lr=0.002 |" in report
    # other tuned values: the finished runs were made under other settings, and the sweep says which
    retuned = [c.replace("warmup=7", "warmup=8") for c in command]
    changed = subprocess.run(retuned, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert changed.returncode == 2 and "warmup: 7 -> 8" in changed.stderr
