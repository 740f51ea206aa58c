"""sweep.py: statistics checked by hand, the report, a real 2 x 2 sweep through joblib, W&B offline."""

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from nmt.metrics.bootstrap import paired_bootstrap
from nmt.sweep import analysis
from nmt.sweep import report as sweep_report
from nmt.sweep import runner as sweep
from nmt.sweep.report import write_report

from .conftest import ROOT, tiny_overrides


def record(pos, norm, seed, bleu, run_dir="/nonexistent"):
    return {
        "factors": {"pos": pos, "norm": norm},
        "seed": seed,
        "metrics": {"test_bleu": bleu},
        "epochs": 1,
        "steps": 1,
        "parameters": 1,
        "wall_time_s": 60.0,
        "run_dir": run_dir,
    }


# pos x norm, 3 seeds each; numbers chosen so that every statistic is easy to compute by hand
BLEU = {
    ("absolute", "layer"): [30.0, 31.0, 32.0],
    ("absolute", "rms"): [29.0, 30.0, 31.0],
    ("relative", "layer"): [33.0, 34.0, 35.0],
    ("relative", "rms"): [33.0, 34.0, 38.0],
}
RECORDS = [record(p, n, s + 1, v) for (p, n), values in BLEU.items() for s, v in enumerate(values)]


def test_mean_and_confidence_interval_by_hand():
    mean, half = analysis.mean_ci([30.0, 31.0, 32.0])
    assert mean == 31.0 and half == pytest.approx(4.302653 * 1.0 / math.sqrt(3))
    assert math.isnan(analysis.mean_ci([5.0])[1])


def test_ranking_by_hand():
    rows = analysis.ranking(RECORDS, "test_bleu")
    assert [(r["pos"], r["norm"]) for r in rows] == [
        ("relative", "rms"),
        ("relative", "layer"),
        ("absolute", "layer"),
        ("absolute", "rms"),
    ]
    top = rows[0]  # 33, 34, 38: mean 35, sample std sqrt(7)
    assert top["mean"] == 35.0 and top["std"] == pytest.approx(math.sqrt(7))
    assert top["ci95"] == pytest.approx(4.302653 * math.sqrt(7) / math.sqrt(3))


def test_main_effects_by_hand():
    effects = analysis.main_effects(RECORDS, "test_bleu")
    pos = effects["pos"]
    assert pos["levels"]["absolute"] == {
        "n": 6,
        "mean": 30.5,
        "std": pytest.approx(math.sqrt(1.1)),
        "min": 29.0,
        "max": 32.0,
    }
    assert pos["levels"]["relative"]["mean"] == pytest.approx(34.5)
    diff = pos["differences"]["relative - absolute"]
    # the factorial effect, seeds paired: per seed, relative - absolute within layer (3, 3, 3) and within
    # rms (4, 4, 7), averaged over norm: 3.5, 3.5, 5.0 -> mean 4.0, std sqrt(0.75), t(2) interval
    assert diff["diff"] == pytest.approx(4.0) and diff["seeds"] == 3 and diff["unbalanced"] == []
    assert diff["ci95"] == pytest.approx(stats.t.ppf(0.975, 2) * math.sqrt(0.75) / math.sqrt(3))


def test_effect_p_values_are_the_t_test_of_the_paired_seeds():
    effects = analysis.main_effects(RECORDS, "test_bleu")
    interaction = analysis.interaction_effect(RECORDS, "test_bleu", "norm", "pos")
    # per seed: pos 3.5, 3.5, 5.0; norm (rms - layer) -0.5, -0.5, 1.0; interaction 1, 1, 4 (by hand)
    for effect, per_seed in [
        (effects["pos"]["differences"]["relative - absolute"], [3.5, 3.5, 5.0]),
        (effects["norm"]["differences"]["rms - layer"], [-0.5, -0.5, 1.0]),
        (interaction, [1.0, 1.0, 4.0]),
    ]:
        assert effect["p"] == pytest.approx(stats.ttest_1samp(per_seed, 0.0).pvalue)
        # the test and the interval agree: p < 0.05 exactly when the interval excludes zero
        assert (effect["p"] < 0.05) == (abs(effect["diff"]) > effect["ci95"])
    assert analysis.one_sample_p([2.0, 2.0]) == 0.0 and analysis.one_sample_p([0.0, 0.0]) == 1.0
    assert math.isnan(analysis.one_sample_p([1.0]))


def test_welch_interval_uses_the_exact_quantile():
    a, b = [33.0, 34.0, 35.0, 33.0, 34.0, 38.0], [30.0, 31.0, 32.0, 29.0, 30.0, 31.0]
    diff, ci = analysis.welch_difference(a, b)
    va, vb = 3.5 / 6, 1.1 / 6
    df = (va + vb) ** 2 / (va**2 / 5 + vb**2 / 5)
    assert diff == pytest.approx(4.0) and 7 < df < 8
    # the exact quantile at Welch's fractional df (scipy), not a table lookup rounded down
    assert ci == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(va + vb))


def test_factorial_effect_weights_cells_equally_and_reports_missing_runs():
    # cell (relative, rms) lost seed 3: the pooled mean would weight the cells unequally; the factorial
    # effect uses the seeds present everywhere (1, 2) and says which cell is short
    records = [r for r in RECORDS if not (r["factors"] == {"pos": "relative", "norm": "rms"} and r["seed"] == 3)]
    diff = analysis.main_effects(records, "test_bleu")["pos"]["differences"]["relative - absolute"]
    assert diff["seeds"] == 2 and diff["diff"] == pytest.approx(3.5)  # seeds 1, 2: (3 + 4) / 2 each
    assert diff["unbalanced"] == ["pos=relative, norm=rms"]


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (7.9, 2.3111), (31, 2.0395), (60, 2.0003), (1000, 1.9623)])
def test_t_critical_is_exact_beyond_30_degrees_of_freedom(df, expected):
    assert analysis.t_critical(df) == pytest.approx(expected, abs=1e-4)


def test_holm_by_hand():
    adjusted = analysis.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.5})
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, then made monotone
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.5})


def test_levels_sort_numerically():
    records = [{"factors": {"beam": b}, "seed": 1, "metrics": {"m": float(b)}} for b in ("10", "2", "5")]
    assert sorted(["10", "2", "5", "none"], key=analysis.level_order) == ["2", "5", "10", "none"]
    diffs = analysis.main_effects(records, "m")["beam"]["differences"]
    assert list(diffs) == ["5 - 2", "10 - 2"]


def test_interactions_by_hand():
    table = analysis.interactions(RECORDS, "test_bleu")[("norm", "pos")]
    assert table[("layer", "absolute")] == 31.0 and table[("rms", "relative")] == 35.0


def test_paired_bootstrap_detects_a_real_difference_and_not_a_fake_one():
    refs = [f"sentence number {i} is here ." for i in range(100)]
    good = list(refs)
    bad = [r.replace("number", "nummer").replace("here", "there") for r in refs]
    assert paired_bootstrap([bad], [good], refs, n_samples=200) < 0.05
    one_changed = [*good[:-1], bad[-1]]
    assert paired_bootstrap([one_changed], [good], refs, n_samples=200) > 0.05


def test_paired_bootstrap_of_systems_that_never_differ_is_one():
    # every resample ties exactly: no evidence of a difference, so p = 1 (sacreBLEU's > count gives 1/(n+1))
    refs = [f"sentence number {i} is here ." for i in range(50)]
    same = [r.replace("here", "there") for r in refs]
    assert paired_bootstrap([same], [list(same)], refs, n_samples=100) == 1.0
    empty = [""] * len(refs)  # two systems that both score 0 BLEU on every resample
    assert paired_bootstrap([empty], [["x"] * len(refs)], refs, n_samples=100) == 1.0


def _noisy_systems(n: int = 80):
    rng = random.Random(3)
    refs = [f"the {w} dog number {i} runs over the green field ." for i, w in enumerate(rng.choices("abc", k=n))]
    base = [r.replace("green", "grey") if rng.random() < 0.4 else r for r in refs]
    system = [r.replace("runs", "walks") if rng.random() < 0.35 else r for r in refs]
    return refs, base, system


def test_copied_seeds_add_no_evidence():
    refs, base, system = _noisy_systems()
    p = [paired_bootstrap([base] * k, [system] * k, refs, n_samples=300) for k in (1, 3, 5)]
    assert 0.01 < p[0] < 0.99 and p[0] == p[1] == p[2]


def test_bootstrap_leaves_the_environment_alone(monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    refs, base, system = _noisy_systems(20)
    paired_bootstrap([base], [system], refs, n_samples=20)
    assert "SACREBLEU_SEED" not in os.environ


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_bootstrap_equals_sacrebleu_paired_bs_command(metric, tmp_path):
    refs, base, system = _noisy_systems()
    for name, lines in (("refs", refs), ("base", base), ("sys", system)):
        (tmp_path / f"{name}.txt").write_text("".join(line + "\n" for line in lines))
    command = [sys.executable, "-m", "sacrebleu", "refs.txt", "-i", "base.txt", "sys.txt", "--paired-bs"]
    command += ["--paired-bs-n", "300", "-m", metric, "-f", "text"]
    env = {**os.environ, "SACREBLEU_SEED": "12345"}
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout
    theirs = float(re.search(r"\(p = ([0-9.]+)\)", out).group(1))
    ours = paired_bootstrap([base], [system], refs, metric=metric, n_samples=300, seed=12345)
    assert 0.01 < ours < 0.99  # a case where the p-value is informative
    assert round(ours, 4) == theirs


def test_significance_uses_the_target_languages_tokenizer(tmp_path):
    (tmp_path / "config.yaml").write_text("data:\n  tgt_lang: zh\n")
    assert sweep_report._bleu_tokenize({"run_dir": str(tmp_path)}) == "zh"
    assert sweep_report._bleu_tokenize({"run_dir": str(tmp_path / "missing")}) == "13a"


def synthetic_sweep(tmp_path):
    """The runs of RECORDS on disk, with test outputs: relative positions translate right, absolute wrong."""
    refs = [f"a small test sentence {i} ." for i in range(40)]
    for r in RECORDS:
        run_dir = tmp_path / f"pos={r['factors']['pos']},norm={r['factors']['norm']},seed={r['seed']}"
        run_dir.mkdir()
        hyps = refs if r["factors"]["pos"] == "relative" else [h.replace("small", "big") for h in refs]
        (run_dir / "hyps.txt").write_text("\n".join(hyps) + "\n")
        (run_dir / "refs.txt").write_text("\n".join(refs) + "\n")
        (run_dir / "sweep_result.json").write_text(
            json.dumps(
                {
                    **r,
                    "run_dir": str(run_dir),
                    "hypotheses": str(run_dir / "hyps.txt"),
                    "references": str(run_dir / "refs.txt"),
                }
            )
        )


def test_report_from_synthetic_runs(tmp_path):
    synthetic_sweep(tmp_path)
    report = write_report(tmp_path).read_text()
    assert "| 1 | rms | relative | 3 | 35.00 |" in report
    assert "Main effect relative - absolute: 4.00" in report
    assert "| layer | 31.00 | 34.00 |" in report  # norm x pos interaction row
    assert (tmp_path / "interaction_norm_pos.png").read_bytes().startswith(b"\x89PNG")
    lines = (tmp_path / "results.csv").read_text().splitlines()
    assert lines[0].startswith("norm,pos,seed,test_bleu") and len(lines) == 13
    baseline_row = next(line for line in report.splitlines() if "| layer | absolute |" in line)
    assert baseline_row.endswith("| baseline |  |")
    relative_row = next(line for line in report.splitlines() if "| layer | relative |" in line)
    assert float(relative_row.rstrip(" |").rsplit("|", 1)[1]) < 0.05  # clearly better hypotheses
    # every effect in one table, Holm-adjusted as one family of 3 (sorted p times 3, 2, 1, made monotone)
    raw = {
        name: stats.ttest_1samp(v, 0.0).pvalue
        for name, v in [("pos", [3.5, 3.5, 5.0]), ("norm", [-0.5, -0.5, 1.0]), ("norm x pos", [1.0, 1.0, 4.0])]
    }
    first, second, third = sorted(raw, key=raw.get)
    holm = {first: min(1.0, 3 * raw[first])}
    holm[second] = min(1.0, max(holm[first], 2 * raw[second]))
    holm[third] = min(1.0, max(holm[second], raw[third]))
    assert "## Effects at a glance" in report
    pos_ci = analysis.main_effects(RECORDS, "test_bleu")["pos"]["differences"]["relative - absolute"]["ci95"]
    pos_row = next(line for line in report.splitlines() if line.startswith("| pos: relative - absolute |"))
    assert pos_row == f"| pos: relative - absolute | 4.00 | {pos_ci:.2f} | 3 | {raw['pos']:.4f} | {holm['pos']:.4f} |"
    assert any(
        line.startswith("| norm x pos | 2.00 | ") and line.endswith(f"| {holm['norm x pos']:.4f} |")
        for line in report.splitlines()
    )


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
def test_two_by_two_sweep_through_joblib_reports_and_resumes(tmp_path):
    command = [sys.executable, str(ROOT / "sweep.py"), *SWEEP, f"hydra.sweep.dir={tmp_path}"]
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert first.stdout.count("[sweep] running:") == 4
    runs = sorted(p.parent.name for p in tmp_path.glob("*/sweep_result.json"))
    assert runs == [
        "norm=layer,pos=absolute,seed=1",
        "norm=layer,pos=rope,seed=1",
        "norm=rms,pos=absolute,seed=1",
        "norm=rms,pos=rope,seed=1",
    ]
    report = (tmp_path / "report.md").read_text()
    assert "factors: norm, pos" in report and (tmp_path / "results.csv").exists()
    second = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert second.returncode == 0 and second.stdout.count("done already, skipped") == 4
    assert "[sweep] running:" not in second.stdout


@pytest.mark.slow
def test_a_wandb_sweep_logs_every_run_and_the_report_into_one_offline_folder(tmp_path):
    """Each run's metrics, samples, tags and name, and the report run's panels and level means, all under
    <sweep>/wandb, where one `wandb sync` uploads the group and `wandb leet` browses it."""
    overrides = [o for o in SWEEP if not o.startswith(("hydra/launcher", "hydra.launcher", "norm="))]
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        *overrides,
        "logger=wandb",
        "sweep_name=g1",
        "trainer.log_every_n_steps=1",
        f"hydra.sweep.dir={tmp_path}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("WANDB_API_KEY", None)
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert not list(tmp_path.glob("*/wandb"))  # nothing W&B in the run folders
    files = {path: path.read_bytes() for path in tmp_path.glob("wandb/offline-run-*/run-*.wandb")}
    reports = [data for data in files.values() if b"g1-report" in data]
    runs = [data for data in files.values() if b"g1-report" not in data]
    assert len(files) == 3 and len(reports) == 1
    for data in runs:
        for key in (b"val_loss", b"train_loss", b"val_samples", b"test_bleu", b"g1", b"pos:"):
            assert key in data, key
    for key in (b"pos_by_level", b"results", b"report"):
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
    assert set(summaries) == {"g1-report", "pos=absolute,seed=1", "pos=rope,seed=1"}
    for name in ("pos=absolute,seed=1", "pos=rope,seed=1"):
        result = json.loads((tmp_path / name / "sweep_result.json").read_text())
        assert summaries[name]["tags"] == [name.split(",")[0].replace("=", ":")]
        assert summaries[name]["summary"]["test_bleu"] == pytest.approx(result["metrics"]["test_bleu"])
        level = name.split(",")[0].replace("=", "/")  # one seed: the level's mean is this run's score
        assert summaries["g1-report"]["summary"][level] == pytest.approx(result["metrics"]["test_bleu"])


@pytest.mark.slow
def test_a_sweep_of_ddp_runs_on_two_cpu_processes(tmp_path):
    """Hydra multirun + Lightning DDP: each run is its own process tree, so DDP's re-launch is harmless."""
    overrides = [o for o in SWEEP if not o.startswith(("hydra/launcher", "hydra.launcher", "pos=", "norm="))]
    command = [
        sys.executable,
        str(ROOT / "sweep.py"),
        *overrides,
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
        "pos=absolute,rope",
        f"hydra.sweep.dir={tmp_path}",
    ]
    run_two_cell_sweep(command, tmp_path)
    assert not list(tmp_path.glob("*/.hydra/multirun.yaml"))  # no nested sweep started by a DDP rank
    config = (tmp_path / "pos=rope,seed=1" / "config.yaml").read_text()
    assert "strategy: ddp" in config and "devices: 2" in config


def test_report_files_split_on_newline_only(tmp_path):
    # U+2028, U+0085 and form feeds are characters inside a sentence, not line ends (str.splitlines
    # would split there and misalign hypotheses with references)
    path = tmp_path / "hyps.txt"
    path.write_text("a\u2028b\nc\x0cd\u0085e\n", encoding="utf-8")
    assert sweep_report.read_lines(path) == ["a\u2028b", "c\x0cd\u0085e"]


def test_a_perplexity_report_ranks_lower_first_and_makes_no_bleu_test(tmp_path):
    for r in RECORDS:
        run_dir = tmp_path / f"pos={r['factors']['pos']},norm={r['factors']['norm']},seed={r['seed']}"
        run_dir.mkdir()
        ppl = {**r, "metrics": {"test_ppl": r["metrics"]["test_bleu"] * 3, "test_bleu": None}}
        (run_dir / "sweep_result.json").write_text(json.dumps({**ppl, "run_dir": str(run_dir)}))
    report = write_report(tmp_path).read_text()  # metric "auto": test_ppl, as the runs are language models
    assert "metric: `test_ppl`" in report and "Lower is better" in report
    assert "| 1 | rms | absolute | 3 | 90.00 |" in report  # the lowest perplexity ranks first
    assert "Main effect relative - absolute: 12.00" in report
    assert "p vs baseline" not in report


def test_the_language_model_grids_compose(tmp_path):
    from hydra import compose, initialize_config_dir

    from .conftest import CONF

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("sweep", overrides=["grid=lm_position"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.task == "lm"
    assert cfg.hydra.sweeper.params.pos.split(",") == ["none", "absolute", "learned", "relative", "rope"]


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


@pytest.mark.parametrize(("text", "seconds"), [("00:00:00", 0.0), ("02:15:30", 8130.0), ("30:00:00", 108000.0)])
def test_start_runs_for_reads_hours_minutes_seconds(text, seconds):
    assert sweep.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2h", "01:30", "1:x:00", ""])
def test_start_runs_for_rejects_other_formats_with_an_example(text):
    with pytest.raises(ValueError, match="HH:MM:SS"):
        sweep.parse_duration(text)


@pytest.mark.slow
def test_the_readme_sweep_command_runs_as_typed_in_a_fresh_folder(tmp_path):
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

    # the plan of the same sweep: both runs done (their recorded settings are the ones it would use)
    plan = subprocess.run([*command, "plan=true"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "factor pos: absolute, relative   [command line]" in plan.stdout
    assert "done: 2 (0 of them under other settings); to run: 0" in plan.stdout
    # another budget under the same sweep name: stopped before any run, naming the key that changed
    other = [c if c != "trainer.max_steps=2" else "trainer.max_steps=3" for c in command]
    changed = subprocess.run(other, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert changed.returncode == 2 and "[sweep] running" not in changed.stdout
    assert "were made under other settings or code" in changed.stderr and "trainer.max_steps: 2 -> 3" in changed.stderr


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
