"""Settings that go with a factor's level (a fair factorial: each level tuned): given to each run, checked
before the sweep starts, and trained with (choosing them on validation data: test_sweep_tuning.py)."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from nmt.sweep.levels import level_overrides, level_settings_problem

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
        ({"norm": {"rms": ["warmup=3"]}}, r"level_settings.norm: norm is not a key of this sweep .*; make it one"),
        ({"optim": {"adam": ["warmup"]}}, r"level_settings.optim.adam: 'warmup' is not key=value"),
        # each place's value named: the message gave neither, nor that one value in both is taken
        (
            {"optim": {"adam": ["pos=relative"]}},
            r"pos is also set by the command line or grid \(pos=absolute\); set "
            r"it in one place \(the same value in both is taken\)",
        ),  # fmt: skip
        ({"optim": {"adam": ["seed=3"]}}, r"seed is also a factor of this sweep \(1, 2\); set it in one place"),
        ({"optim": ["lr=1"]}, r"expected level: \[key=value, ...\]"),
        # a misspelt level would give its runs nothing, and the report would call the levels tuned
        (
            {"optim": {"noma": ["warmup=4"]}},
            r"level_settings.optim.noma: noma is not an option of group optim \(did you mean noam\? options",
        ),
        # settings of levels this sweep does not run: given to no run, without a word (a tuned file's may hold
        # more levels than a sweep runs, and is checked as a whole)
        ({"pos": {"rope": ["warmup=4"]}}, r"^level_settings.pos: this sweep runs none of its levels \(rope; pos here"),
        ({"seed": {"7": ["warmup=4"]}}, r"^level_settings.seed: this sweep runs none of its levels \(7; seed here: "),
        # one level run and one not: the other's settings (adamw where noam was meant) went to no run unsaid
        (
            {"optim": {"adam": ["warmup=4"], "adamw": ["warmup=5"]}},
            r"^level_settings.optim.adamw: adamw is not a level of this sweep \(optim here: adam, noam\)",
        ),
        ({"seed": {2: ["warmup=4"]}}, None),  # a level Hydra reads as a number: compared as its string
    ],
)
def test_level_settings_that_cannot_work_are_one_line(settings, message):
    if message is None:
        assert level_settings_problem(settings, LEVELS) is None
        return
    if "runs none of its levels" in message or "is not a level of this sweep" in message:
        assert level_settings_problem(settings, LEVELS, from_file=True) is None
    assert level_settings_problem(settings, LEVELS) is not None
    assert __import__("re").search(message, level_settings_problem(settings, LEVELS))
    assert level_settings_problem(SETTINGS, LEVELS) is None


SWEEP = [
    "grid=none",
    *[o for o in tiny_overrides() if not o.startswith("name=")],
    "trainer.max_steps=2",
    "validation.bleu_every_n_epochs=0",
    "checkpoint.monitor=val_loss",
    "checkpoint.mode=min",
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
    # from a tuned file: its name, where the plan said [level_settings] as for settings given by hand
    given = [o for o in command if not o.startswith("level_settings=")]
    tuned = subprocess.run([*given, "+tuned=factorial_converged_toy", "plan=true"], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)  # fmt: skip
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-2000:]
    origin = "[+tuned=factorial_converged_toy (conf/tuned/factorial_converged_toy.yaml)]"
    assert f"with optim=adam: optim.optimizer.lr=0.001   {origin}" in tuned.stdout
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


def test_a_setting_the_command_line_gives_alike_is_no_conflict_however_written():
    """optim.optimizer.weight_decay=0 on the command line against a tuned 0.0 was refused as set twice: the
    docs promise the same value passes however written."""
    levels = {**LEVELS, "optim.optimizer.weight_decay": ["0"], "warmup": ["400"]}
    settings = {"optim": {"noam": ["optim.optimizer.weight_decay=0.0", "warmup=400.0"]}}
    assert level_settings_problem(settings, levels) is None
    other = {"optim": {"noam": ["optim.optimizer.weight_decay=0.01"]}}
    assert "is also set by the command line or grid" in level_settings_problem(other, levels)


@pytest.mark.parametrize(
    "text", ["/a/my corpus", "it's", "a\\", "a\\'b", "ünï,=[]{}()", 'a"b', "%2F'%25", "\\\\", "a${x}", "a\\${x}\\"]
)
def test_a_quoted_value_reads_back_as_written_and_a_quoted_level_names_its_folder_without_quotes(text):
    """As the run's config holds it: Hydra's grammar read, then OmegaConf's interpolations (``${``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from nmt.sweep.levels import hydra_quoted, plain_level

    value = OverridesParser.create().parse_override(f"run_dir={hydra_quoted(text)}").value()
    assert OmegaConf.create({"run_dir": value, "x": "X"}).run_dir == text
    if "${" not in text:
        assert plain_level(hydra_quoted(text)) == text
    assert plain_level("abc") == "abc" and plain_level("'a',b") == "'a',b"
