"""Choosing each level's settings on validation data (``python sweep.py tune``), where that choice is weak,
the file it writes, and a factorial that loads it: checked against what its levels were tuned under."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict
from scipy.stats import t as t_dist
from scipy.stats import ttest_ind, ttest_rel

from nmt.sweep.levels import level_settings_problem
from nmt.sweep.plan import expected_fingerprint, planned_values, run_overrides
from nmt.sweep.tuned import read_tuned_file, reused_seeds, tuned_differences, tuned_file, write_tuned_file
from nmt.sweep.tuning import tune

from .conftest import ROOT, files_corpus


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


def test_candidates_run_on_the_same_seeds_are_compared_paired_by_seed(tmp_path):
    """Runs of one seed share their batches' order, and the CPU's tuning compared candidates paired by seed by
    hand: tune said only Welch's "not established" of a lead that held on every seed. The test is fixed by the
    design (the same seeds: paired), never chosen after the scores are read."""
    rates = {"0.001": [30.0, 34.0, 38.0], "0.002": [29.0, 33.0, 37.5]}  # seeds 1-3 scatter by 4; 0.001 leads on each
    assert ttest_rel(rates["0.001"], rates["0.002"]).pvalue < 0.05 < ttest_ind(*rates.values()).pvalue
    tuning_sweep(tmp_path / "adam", ["optim=adam"], "optim.optimizer.lr", rates)
    assert not [n for n in notes_of(tune([tmp_path / "adam"], "optim")) if "leads the next" in n]  # established
    # the same lead on every seed, whatever the floats' last bits: established (p 0, as scipy's), not left to them
    shifted = {"0.001": [30.1, 34.2, 38.3], "0.002": [29.0, 33.1, 37.2]}
    tuning_sweep(tmp_path / "shift", ["optim=adam"], "optim.optimizer.lr", shifted)
    assert not [n for n in notes_of(tune([tmp_path / "shift"], "optim")) if "leads the next" in n]


def test_a_lead_too_small_for_two_decimals_is_written_in_its_own():
    """A trial's tune on final_val_loss printed a lead of 3e-6 as "by 0.00"."""
    from nmt.sweep.tuning import _lead_note

    said = _lead_note({1: 1.000001, 2: 1.000009}, {1: 1.000006, 2: 1.000010})
    assert said.startswith("3e-06, not established by their seeds")


def test_a_lead_over_candidates_on_other_seeds_is_welchs_with_the_shared_seeds_described():
    """Pooled sweeps may share only some seeds: Welch's test decides, and the pairing over the shared seeds is
    said beside it, as a description; on those seeds the chosen candidate may not lead at all."""
    from nmt.sweep.tuning import _lead_note

    chosen, following = {1: 30.0, 2: 31.0, 3: 40.0, 4: 41.0}, {1: 32.0, 2: 33.5}
    welch = welch_p(list(chosen.values()), list(following.values()))
    pair = f"{ttest_rel([30.0, 31.0], [32.0, 33.5]).pvalue:.2f}"
    assert _lead_note(chosen, following) == (
        f"2.75, not established by their seeds (Welch p = {welch}; on the 2 seeds both ran it does not lead, 30.50 "
        f"against 32.75, paired by seed p = {pair}): the two may be equally good"
    )
    chosen, following = {1: 33.0, 2: 34.5, 3: 40.0, 4: 41.0}, {1: 32.0, 2: 33.0, 5: 40.0}
    welch = welch_p(list(chosen.values()), list(following.values()))
    pair = f"{ttest_rel([33.0, 34.5], [32.0, 33.0]).pvalue:.2f}"
    assert _lead_note(chosen, following) == (
        f"2.12, not established by their seeds (Welch p = {welch}; paired by seed over the 2 seeds both ran, p = "
        f"{pair}): the two may be equally good"
    )
    assert _lead_note({1: 30.0, 3: 31.0}, {2: 20.0, 4: 21.0}) == ""  # Welch establishes it: no note


def test_tune_refuses_a_sweep_cut_short_and_breaks_ties_in_the_order_listed(tmp_path):
    """A tuning sweep stopped after its first seed (start_runs_for; seeds run first) was tuned on one seed of
    each candidate, without a word; tied candidates were chosen by their folders' names (warmup=100 before
    warmup=50), and the tie sent the user past the "edge" of the values tried."""
    (tmp_path / "noam").mkdir()
    fake_tuning_sweep(tmp_path / "noam", "noam", "warmup", {"50": [30.0, 31.0], "100": [30.0, 31.0]})
    names = [f"warmup={w},seed={s}" for s in (1, 2) for w in (50, 100)]  # the plan's order: seeds vary slowest
    (tmp_path / "noam" / "plan.json").write_text(json.dumps({"run_names": names}))
    for run in tmp_path.glob("noam/*"):
        if run.is_dir():  # as read from the folder it is in
            record = json.loads((run / "sweep_result.json").read_text())
            (run / "sweep_result.json").write_text(json.dumps({**record, "run_dir": str(run)}))
    tuned = tune([tmp_path / "noam"], "optim")
    assert tuned.settings == {"optim": {"noam": ["warmup=50"]}}  # the first listed of the tie
    assert not [n for n in notes_of(tuned, unrecorded=False) if "value tried" in n]
    assert any("ties with the next (warmup=100)" in n for n in notes_of(tuned))
    cut = tmp_path / "noam" / "warmup=100,seed=2"
    (cut / "sweep_result.json").unlink()  # not finished
    # what became of it is said, and what to do: "have not run" and "finish the tuning sweep" were said of a run
    # training now, where the sweep's command again would only skip it, and of a run that had trained
    said = r"noam: 1 planned run\(s\) have not finished, so tune would choose on fewer seeds than planned \(warmup="
    states = [
        (r"100,seed=2: not finished\): finish the tuning sweep with the tuning sweep's command again", None),
        (r"100,seed=2: stopped, resumable\): finish the tuning sweep with", "checkpoints/last.ckpt"),
        (r"100,seed=2: trained, its final scores not made\): finish", "results.json"),
        (r"100,seed=2: training now\): wait for the 1 run training to end$", ".lock"),
    ]
    for state, made in states:
        if made:
            (cut / made).parent.mkdir(exist_ok=True)
        if made == "results.json":
            (cut / made).write_text(json.dumps({"stage": "trained", "finished": False}))
        elif made == ".lock":  # as a run's lock names its holder: this process, alive, since it took the lock
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            (cut / made).write_text(f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n")
        elif made:
            (cut / made).write_bytes(b"")
        with pytest.raises(ValueError, match=said + state):
            tune([tmp_path / "noam"], "optim")
    # the lock file stays after its run: a process given the same id later is not its holder, and another
    # machine's processes cannot be seen from here; a text that names no holder is a past run's
    (cut / ".lock").write_text(f"pid {os.getpid()} on {socket.gethostname()}, since 2000-01-01 10:00:00\n")
    with pytest.raises(ValueError, match=said + "100,seed=2: trained, its final"):
        tune([tmp_path / "noam"], "optim")
    (cut / ".lock").write_text(f"pid {os.getpid()} on elsewhere, since 2026-12-05 10:00:00\n")
    with pytest.raises(ValueError, match=said + r"100,seed=2: training on elsewhere \(pid \d+\), if that process still "
                       r"runs there\): wait for the 1 run training to end$"):  # fmt: skip
        tune([tmp_path / "noam"], "optim")
    (cut / ".lock").write_bytes(b"\xff\xfe not text")
    with pytest.raises(ValueError, match=said + "100,seed=2: trained, its final"):
        tune([tmp_path / "noam"], "optim")
    # killed as it ended (a trial's SIGTERM): finished, its sweep's record not written; "stopped, resumable" was said
    (cut / "results.json").write_text(json.dumps({"stage": "final", "finished": True}))
    with pytest.raises(ValueError, match=said + r"100,seed=2: finished, not recorded by the sweep \(its command again"):
        tune([tmp_path / "noam"], "optim")
    (cut / "sweep_failed.json").write_text("{}")  # failed: said by the note on unequal seeds
    assert any("ran 1 to 2 seeds" in n for n in notes_of(tune([tmp_path / "noam"], "optim")))


def test_tuning_chooses_each_levels_best_mean_on_validation(tmp_path):
    (tmp_path / "adam").mkdir(), (tmp_path / "noam").mkdir()
    # 0.001 has the best single run but the lower mean: the mean over seeds decides
    fake_tuning_sweep(tmp_path / "adam", "adam", "optim.optimizer.lr", {"0.0005": [20, 22], "0.001": [25, 10]})
    fake_tuning_sweep(tmp_path / "noam", "noam", "warmup", {"200": [30, 31], "400": [33, 34], "800": [32, 30]})
    tuned = tune([tmp_path / "adam", tmp_path / "noam"], "optim")
    settings, table = tuned.settings, tuned.lines
    assert settings == {"optim": {"adam": ["optim.optimizer.lr=0.0005"], "noam": ["warmup=400"]}}
    assert table[2] == "| adam | optim.optimizer.lr=0.0005 | 21.00 ± 12.71 | 2 |"  # t(0.975, 1) = 12.706
    assert "| noam | warmup=400 | 33.50 ± 6.35 | 2 |" in table
    assert table[0] == "| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |"
    # two seeds 15 apart: t(0.975, 1) x 7.5 = 95.3 reaches below 0 BLEU, and the table says so
    assert (  # 17.50 ± 95.30: both ends past the scale, by t(0.975, 1) x 7.5
        "note: the 95% intervals of optim=adam's optim.optimizer.lr=0.001 (below 0; above 100) reach past the "
        "values best_val_bleu can take: their seeds are too few or too scattered for a t interval (a run far from "
        "the others?); the choice is by the mean, which such a run moves most"
    ) in notes_of(tuned)
    assert "| adam | optim.optimizer.lr=0.001 | 17.50 ± 95.30 | 2 |" in table

    out = tmp_path / "tuned.yaml"
    write_tuned_file(out, tuned.settings, ["chosen by a test", *tuned.lines], tuned.under)
    assert OmegaConf.to_container(OmegaConf.load(out)) == {"level_settings": settings}
    assert out.read_text().startswith("# @package _global_\n# chosen by a test\n# | optim | candidate |")
    assert "# | noam | warmup=400 | 33.50 ± 6.35 | 2 |\n" in out.read_text()  # the candidates, for the report


def test_tune_refuses_unfinished_candidates_and_other_keys_and_carries_the_winners_level_settings(tmp_path):
    """tune chose among the candidates that had finished, saying nothing of those planned but not run; wrote a
    swept key that is not the level's own (pos for --level optim) as the level's setting, so that the
    factorial's runs of that level alone had it; and dropped what the tuning sweep's level_settings gave the
    winning candidate (the factorial then ran it without)."""
    for name in ("adam", "pos", "noam"):
        (tmp_path / name).mkdir()
    fake_tuning_sweep(tmp_path / "adam", "adam", "optim.optimizer.lr", {"1e-3": [20, 22], "4e-3": [25, 24]})
    planned = [f"optim.optimizer.lr={lr},seed={s}" for lr in ("1e-3", "2e-3", "4e-3") for s in (1, 2)]
    (tmp_path / "adam" / "plan.json").write_text(json.dumps({"run_names": planned}))
    with pytest.raises(ValueError, match=r"adam: 1 planned candidate\(s\) have no finished run \(optim.optimizer.lr="
                       r"2e-3\), so tune would choose among the others; their runs \(optim.optimizer.lr=2e-3,"
                       r"seed=1: not started; optim.optimizer.lr=2e-3,seed=2: not started\): finish the tuning "
                       r"sweep"):  # fmt: skip
        tune([tmp_path / "adam"], "optim")
    fake_tuning_sweep(tmp_path / "pos", "adam", "pos", {"absolute": [20, 22], "relative": [25, 24]})
    with pytest.raises(ValueError, match=r"pos: it sweeps pos, not a setting of optim=adam \(those are optim.\* and"):
        tune([tmp_path / "pos"], "optim")
    fake_tuning_sweep(tmp_path / "noam", "noam", "warmup", {"10": [30, 31], "50": [20, 21]})
    paired = {"warmup": {"10": ["optim.scheduler.factor=0.5"], "50.0": ["optim.scheduler.factor=2.0"]}}
    (tmp_path / "noam" / "plan.json").write_text(json.dumps({"level_settings": paired}))
    assert tune([tmp_path / "noam"], "optim").settings == {
        "optim": {"noam": ["warmup=10", "optim.scheduler.factor=0.5"]}
    }


def test_level_settings_match_a_level_by_value_and_refuse_one_the_sweep_does_not_run():
    """level_settings={optim.scheduler.factor: {2.0: [...]}} on a sweep of factor=0.5,2: Hydra read the
    setting's level as 2.0 and the sweep's as 2, and the runs at 2 got nothing, without a word."""
    from nmt.sweep.levels import level_overrides

    settings = {"optim.scheduler.factor": {2.0: ["warmup=50"], 0.5: ["warmup=10"]}}
    assert level_overrides(settings, {"optim.scheduler.factor": "2"}) == ["warmup=50"]
    assert level_overrides(settings, {"optim.scheduler.factor": "5e-1"}) == ["warmup=10"]
    levels = {"optim.scheduler.factor": ["0.5", "2"], "seed": ["1"]}
    assert level_settings_problem(settings, levels) is None
    wrong = {"optim.scheduler.factor": {"0.5": ["warmup=10"], "3": ["warmup=50"]}}
    assert level_settings_problem(wrong, levels) == (
        "level_settings.optim.scheduler.factor.3: 3 is not a level of this sweep (optim.scheduler.factor here: "
        "0.5, 2), so no run would get its settings; write it as the sweep does, or drop it"
    )


def test_a_sweep_with_a_tuned_file_records_it_and_its_report_quotes_how_the_settings_were_chosen(tmp_path):
    """+tuned=<name>: the report named no tuning at all, only each level's values."""
    from hydra import compose, initialize_config_dir

    from nmt.sweep.report import write_report

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
    tuned["notes"] += ["note: optim=adam: the chosen optim.optimizer.lr=0.0005 is the smallest value tried"]
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 12, "level_settings": settings, "tuned": tuned}))
    report = write_report(tmp_path).read_text()
    row = "| level settings from | +tuned=factorial_converged_toy (conf/tuned/factorial_converged_toy.yaml) |"
    assert row in report
    flat = " ".join(report.split())
    assert "How the level settings were chosen, as conf/tuned/factorial_converged_toy.yaml's notes say" in flat
    assert tuned["notes"][0] in flat
    assert "| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |\n|---|---|---|---|\n| adam |" in report
    # tune's notes on a weak choice: each said on its own, not run into the command's sentence
    assert "\n*tune's note:* optim=adam: the chosen optim.optimizer.lr=0.0005 is the smallest value tried\n" in report


def test_tuning_refuses_the_test_set_a_swept_level_and_a_sweep_given_twice(tmp_path, capsys):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    fake_tuning_sweep(tmp_path / "a", "adam", "optim.optimizer.lr", {"0.001": [20.0]})
    fake_tuning_sweep(tmp_path / "b", "adam", "optim.optimizer.lr", {"0.002": [21.0]})
    # two sweeps of one level are pooled, setting by setting from the fingerprints these lack
    with pytest.raises(ValueError, match=r"a: recorded no settings \(fingerprint.json\): pooled tuning sweeps"):
        tune([tmp_path / "a", tmp_path / "b"], "optim")
    with pytest.raises(ValueError, match=r"a: given twice; give each tuning sweep once"):
        tune([tmp_path / "a", tmp_path / "a"], "optim")
    # a grid widened in the same folder (past its edge, as tune's note asks) by a sweep of the new values alone:
    # the first values were dropped without a word, and the new smallest was called the smallest tried
    (tmp_path / "c").mkdir()
    fake_tuning_sweep(tmp_path / "c", "adam", "optim.optimizer.lr", {"0.001": [20.0], "0.002": [21.0]})
    (tmp_path / "c" / "plan.json").write_text(json.dumps({"run_names": ["optim.optimizer.lr=0.002,seed=1"]}))
    with pytest.raises(ValueError, match=r"1 finished run\(s\) of an earlier sweep .*lr=0.001,seed=1\) are not in"):
        tune([tmp_path / "c"], "optim")
    # a key the sweep does not set: the message lists the keys it holds at one level that could be the level (it
    # listed key=value items, the recipe's among them), and a misspelt level's likely key
    with pytest.raises(ValueError, match=r"--level pos: this tuning sweep does not set pos on .* one of: optim \(held "
                       r"at adam\), optim.optimizer.lr \(held at 0.001\)$"):  # fmt: skip
        tune([tmp_path / "a"], "pos")
    with pytest.raises(ValueError, match=r"does not set optm on its command line or grid \(did you mean --level optim"):
        tune([tmp_path / "a"], "optm")
    # a factorial given for a tuning sweep: what to give instead
    with pytest.raises(ValueError, match=r"sweeps it over \['0.001', '0.002'\] \(a factorial\?\): give one tuning "):
        tune([tmp_path / "c"], "optim.optimizer.lr")
    # the level given with its value: "does not set optim=adam", then optim=adam listed among the choices
    with pytest.raises(ValueError, match=r"^--level optim=adam: --level takes the key alone \(--level optim\)"):
        tune([tmp_path / "a"], "optim=adam")
    # a metric no run records (misspelt): the metrics they do record, and the closest, not advice to rerun them
    with pytest.raises(
        ValueError, match=r"no run records best_val_bleuu \(did you mean --metric best_val_bleu\?\); "
    ) as err:
        tune([tmp_path / "a"], "optim", "best_val_bleuu")
    # the scores tune can choose by alone: never a test score
    assert "tune chooses by one of the validation scores its runs record: " in str(err.value)
    assert "test_" not in str(err.value).split("record: ")[1]
    command = [sys.executable, str(ROOT / "sweep.py"), "tune", str(tmp_path / "a"), "--level", "optim"]
    refused = subprocess.run([*command, "--metric", "test_bleu"], capture_output=True, text=True, cwd=ROOT)
    assert (
        refused.returncode == 2 and "never on the test set: leave --metric out (the best validation" in refused.stderr
    )
    assert "best_val_bleu for translation" in refused.stderr  # what to give instead
    refused = subprocess.run([*command, "--metric", "epochs"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and "--metric epochs: a fact of each run, not a validation score" in refused.stderr
    chosen = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert chosen.returncode == 0 and '"optim.optimizer.lr=0.001"' in chosen.stdout
    # one seed a candidate: the table heads no interval it does not give
    assert "| optim | candidate | best_val_bleu (one seed each: no interval) | seeds |" in chosen.stdout

    # a file +tuned=<name> cannot load is said; a loss is ranked lowest first, and the table says so
    from nmt.sweep.tuning import main

    main([str(tmp_path / "a"), "--level", "optim", "--out", str(tmp_path / "out.yaml")])
    said = capsys.readouterr().out
    assert f"note: {tmp_path / 'out.yaml'} is in no folder named tuned/, so +tuned=<name> cannot load it" in said
    assert (tmp_path / "out.yaml").is_file()
    assert said.rstrip().endswith(f"written to {tmp_path / 'out.yaml'}")  # a new file: nothing replaced
    # in a config folder of one's own (its tuned/): how to load it, as docs/sweeps.md says
    main([str(tmp_path / "a"), "--level", "optim", "--out", str(tmp_path / "mine" / "tuned" / "t1.yaml")])
    assert f"+tuned=t1 loads it with 'hydra.searchpath=[file://{tmp_path / 'mine'}]'" in capsys.readouterr().out
    # another choice over it: replaced without a word before, under a factorial that had loaded it
    before = (tmp_path / "out.yaml").read_text()
    with pytest.raises(SystemExit):  # another choice over it was written without a word: +tuned=out then meant it
        main([str(tmp_path / "b"), "--level", "optim", "--out", str(tmp_path / "out.yaml")])
    assert (
        f"--out {tmp_path / 'out.yaml'}: it holds another choice (optim=adam: optim.optimizer.lr=0.001 -> "
        "optim.optimizer.lr=0.002); give the new choice a new name, or --replace to write over it"
    ) in capsys.readouterr().err
    assert (tmp_path / "out.yaml").read_text() == before
    main([str(tmp_path / "b"), "--level", "optim", "--out", str(tmp_path / "out.yaml"), "--replace"])
    replaced = "it holds another choice (optim=adam: optim.optimizer.lr=0.001 -> optim.optimizer.lr=0.002)"
    assert capsys.readouterr().out.rstrip().endswith(f"written to {tmp_path / 'out.yaml'} (--replace: {replaced})")
    main([str(tmp_path / "b"), "--level", "optim", "--out", str(tmp_path / "out.yaml")])  # the same choice again
    assert capsys.readouterr().out.rstrip().endswith(f"written to {tmp_path / 'out.yaml'}")
    for text in ("", "a: 1\n", "level_settings: {optim: [x=1]}\n", "{{ not yaml"):  # not a tuned file: kept
        (tmp_path / "other.yaml").write_text(text)
        with pytest.raises(SystemExit):
            main([str(tmp_path / "b"), "--level", "optim", "--out", str(tmp_path / "other.yaml")])
        assert "other.yaml: it is not a tuned file (no level_settings that tune wrote); give" in capsys.readouterr().err
        assert (tmp_path / "other.yaml").read_text() == text
    # a name without .yaml: written, then loaded by no +tuned=<name> (whose suggestion named another file)
    for out, instead in (("out", "out.yaml"), ("out.yml", "out.yaml")):
        with pytest.raises(SystemExit):
            main([str(tmp_path / "a"), "--level", "optim", "--out", str(tmp_path / out)])
        assert f"--out {tmp_path / out}: name a .yaml file ({tmp_path / instead})" in capsys.readouterr().err
        assert not (tmp_path / out).exists()
    # a folder for --out lost the block in a traceback once the table was printed; '' wrote nothing, silently
    for out, said in (
        (str(tmp_path), ": a folder; name the file to write, e.g. conf/tuned/<name>.yaml"),
        ("", "--out '': name the file to write"),
    ):
        with pytest.raises(SystemExit):
            main([str(tmp_path / "a"), "--level", "optim", "--out", out])
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"nowhere: no such folder; give a finished tuning sweep's folder"):
        main([str(tmp_path / "nowhere"), "--level", "optim"])
    for run in (tmp_path / "a").glob("*/sweep_result.json"):
        run.write_text(run.read_text().replace('"best_val_bleu"', '"best_val_loss"'))
    assert "| best_val_loss, lower is better (one seed each" in "\n".join(
        tune([tmp_path / "a"], "optim", "best_val_loss").lines
    )


def composed(sweep_dir, given: list[str], swept: list[str] = (), grid: dict | None = None):
    """A sweep's config as the multirun saves it (multirun.yaml): composed with its one-valued command-line
    settings, its comma lists left in hydra.overrides.task for the jobs, ``grid``'s in hydra.sweeper.params
    (which Hydra never composes in: they reach the jobs only)."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=[*given, f"hydra.sweep.dir={sweep_dir}"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.overrides.task = [*given, *swept]
        cfg.hydra.sweeper.params = grid or {}
    return cfg


def searching(config, conf) -> None:
    """``config`` composed as with hydra.searchpath=[file://<conf>]: a folder of config files beside conf/."""
    from hydra.conf import ConfigSourceInfo  # the type of the list

    config.hydra.runtime.config_sources.append(ConfigSourceInfo(path=str(conf), schema="file", provider="command-line"))


def tuning_sweep(
    path,
    given: list[str],
    key: str,
    scores: dict[str, list[float]],
    grid=None,
    fingerprints=True,
    text=None,
    first=1,
    ended=None,
):
    """A finished tuning sweep as the multirun leaves it: ``given`` (and ``grid``) held, ``key`` swept over
    seeds; each run folder with the fingerprint train.py records for its overrides (``fingerprints``), and
    ``text``, the hashes of the corpus's splits it read, where given. The toy corpus unless ``given`` names one."""
    seeds = ",".join(str(s + first) for s in range(len(next(iter(scores.values())))))  # from seed ``first``
    path.mkdir()
    corpus = [] if any(g.startswith("data=") for g in given) else ["data=toy"]
    cfg = composed(path, ["grid=none", *corpus, *given], [f"{key}={','.join(scores)}", f"seed={seeds}"], grid)
    OmegaConf.save(cfg, path / "multirun.yaml")
    base = planned_values(cfg)[0]
    for value, by_seed in scores.items():
        for seed, score in enumerate(by_seed, start=first):
            run = path / f"{key}={value},seed={seed}"
            (run / ".hydra").mkdir(parents=True)
            overrides = run_overrides(cfg, {**base, key: value, "seed": str(seed)})
            if fingerprints:
                recorded = expected_fingerprint(overrides)
                if text is not None:
                    recorded["data"] = {"text": text}
                (run / "fingerprint.json").write_text(json.dumps(recorded, default=str))
            choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
            OmegaConf.save({"hydra": {"runtime": {"choices": choices}}}, run / ".hydra" / "hydra.yaml")
            record = {"factors": {key: value}, "seed": seed, "metrics": {"best_val_bleu": score}, "run_dir": str(run)}
            if ended is not None:  # ``ended``: {value: what ended each seed's run}
                record["ended_by"] = ended[value][seed - first]
            (run / "sweep_result.json").write_text(json.dumps(record))


def test_candidates_whose_runs_ended_at_their_maximum_are_said_where_tuning_stops_early(tmp_path):
    """A researcher's trial: with early stopping on, both Adam candidates (and a Noam one) ended at max_epochs,
    and tune ranked them as converged without a word. A fixed budget (no patience) ends every run there: no note."""
    scores, ended = {"0.001": [30.0, 31.0], "0.004": [33.0, 34.0]}, {"0.001": ["early stopping"] * 2}
    ended["0.004"] = ["max_epochs", "early stopping"]  # what train.py records (nmt.training.stopping.what_ended)
    held = ["optim=adam", "early_stopping.patience=3", "trainer.max_epochs=15"]
    tuning_sweep(tmp_path / "adam", held, "optim.optimizer.lr", scores, ended=ended)
    assert [n for n in notes_of(tune([tmp_path / "adam"], "optim")) if "maximum" in n] == [
        "note: optim=adam: 1 of 2 runs of the chosen candidate and 0 of 2 of the others' ended at a limit "
        "(max_epochs), not by early stopping (patience 3): those had not converged, so the choice may favour what "
        "learns fastest within this budget over what ends best; raise the maximum and tune again where that matters"
    ]
    fixed = ["optim=adam", "trainer.max_epochs=15"]
    tuning_sweep(tmp_path / "fixed", fixed, "optim.optimizer.lr", scores, ended={k: ["max_epochs"] * 2 for k in scores})
    assert not [n for n in notes_of(tune([tmp_path / "fixed"], "optim")) if "maximum" in n]
    # a time cap is no budget: said under a fixed budget too
    capped = {"0.001": ["max_epochs"] * 2, "0.004": ["max_time", "max_epochs"]}
    tuning_sweep(tmp_path / "capped", fixed, "optim.optimizer.lr", scores, ended=capped)
    assert [n for n in notes_of(tune([tmp_path / "capped"], "optim")) if "maximum" in n] == [
        "note: optim=adam: 1 of 2 runs of the chosen candidate and 0 of 2 of the others' ended at a limit "
        "(max_time), not at the end of their budget: those had not converged, so the choice may favour what "
        "learns fastest within this budget over what ends best; raise the maximum and tune again where that matters"
    ]


def test_a_setting_level_settings_lent_a_level_in_its_tuning_is_said_and_the_levels_not_tuned_alike(tmp_path):
    """A reviewer's trial: a tuning sweep whose level_settings gave Adam a budget of its own
    (trainer.max_steps) wrote it into Adam's tuned settings as one of the level's own, without a word: the
    factorial then ran Adam alone under that budget, its difference counted as the optimiser's effect, and
    "not tuned alike" was never said, as the setting was in the file."""
    rates = {"0.001": [30.0, 31.0], "0.002": [33.0, 34.0]}
    tuning_sweep(tmp_path / "adam", ["optim=adam", "trainer.max_steps=40"], "optim.optimizer.lr", rates)
    (tmp_path / "adam" / "plan.json").write_text(
        json.dumps({"level_settings": {"optim": {"adam": ["trainer.max_steps=80", "optim.optimizer.eps=1e-6"]}}})
    )
    refingerprint(tmp_path / "adam", lambda r: r["config"].update({"trainer.max_steps": 80}))  # as its runs had it
    tuning_sweep(tmp_path / "noam", ["optim=noam", "trainer.max_steps=40"], "warmup", {"400": [35.0, 36.0]})
    tuned = tune([tmp_path / "adam", tmp_path / "noam"], "optim")
    # carried, as the level was tuned under it: the factorial runs adam as its tuning did
    assert tuned.settings["optim"]["adam"] == [
        "optim.optimizer.lr=0.002",
        "optim.optimizer.eps=1e-6",
        "trainer.max_steps=80",
    ]
    notes = notes_of(tuned)
    # the level's own setting is said as before; the budget, as a difference the factorial takes in
    assert (
        "note: optim=adam's tuning sweep held optim.optimizer.eps=1e-6 (its own settings, or those its "
        "level_settings gave the chosen candidate): they go with its choice" in notes
    )
    assert (
        "note: optim=adam's tuning sweep's level_settings gave it trainer.max_steps=80, not a setting of "
        "optim=adam's own: it goes with its choice, so a factorial that loads this file runs optim=adam alone under "
        "it, and the difference is counted in optim's effect; give it to every level alike (the command line) where "
        "that is not meant" in notes
    )
    assert (
        "note: the tuning runs of optim=adam and optim=noam differ in settings that are neither level's own "
        "(trainer.max_steps: 80 for adam, 40 for noam): their levels were not tuned alike" in notes
    )


def test_candidates_stopped_inside_their_warmup_are_said(tmp_path):
    """A researcher's trial on the toy factorial's experiment (patience counted from the start): Noam's warm-ups
    of 80 and 160 were stopped by early stopping before their rate peaked, scored 0 and ranked last, and tune
    said nothing (the tuning sweep's report did; the factorial's, quoting tune's notes, showed a clean choice)."""
    noam = {"10": [30.0, 31.0], "40": [28.0, 29.0], "80": [0.0, 0.0]}
    tuning_sweep(tmp_path / "noam", ["optim=noam", "early_stopping.patience=3"], "warmup", noam)
    assert not [n for n in notes_of(tune([tmp_path / "noam"], "optim")) if "warm-up" in n]
    for path in (tmp_path / "noam").glob("warmup=80,*/sweep_result.json"):  # as records.stopped_in_warmup marks it
        path.write_text(json.dumps({**json.loads(path.read_text()), "stopped_in_warmup": True}))
    assert [n for n in notes_of(tune([tmp_path / "noam"], "optim")) if "warm-up" in n] == [
        "note: optim=noam: 0 of 2 runs of the chosen candidate and 2 of 4 of the others' (warmup=80) were stopped by "
        "early stopping inside their learning rate's warm-up, before it peaked (the patience counted from the "
        "start): those ranked by the stopping rule, not by their settings; run the tuning sweep again, every "
        "candidate, with early_stopping.after_warmup=true under a sweep_name of its own, and tune from that sweep"
    ]


def welch_p(a, b) -> str:
    return f"{ttest_ind(a, b, equal_var=False).pvalue:.2f}"


def not_established(a, b) -> str:
    """The note's words on two candidates run on the same seeds (in the same order): the paired test decides."""
    paired = f"{ttest_rel(a, b).pvalue:.2f}"
    return f"(paired by seed over the {len(a)} seeds both ran: p = {paired}; Welch p = {welch_p(a, b)})"


def notes_of(tuned, unrecorded: bool = True) -> list[str]:
    """tune's notes (``unrecorded=False``: but the one on runs that recorded no settings)."""
    notes = [line for line in tuned.lines if line.startswith("note:")]
    return notes if unrecorded else [n for n in notes if "recorded no settings" not in n]


def test_tune_says_where_a_choice_is_weak_and_carries_the_levels_own_held_settings(tmp_path):
    """Noam's warm-up was chosen twice at the longest value tried, and tune said nothing; a lead of one seed
    or of overlapping runs was reported as a choice; optim.scheduler.factor=0.5 held by Noam's tuning sweep
    was left out of the file, so the factorial trained Noam at factor 1.0."""
    adam = {"0.0005": [20.0, 22.0], "0.001": [25.0, 10.0]}
    noam = {"200": [30.0, 31.0], "400": [33.0, 34.0], "800": [32.0, 30.0]}
    tuning_sweep(tmp_path / "adam", ["optim=adam", "trainer.max_steps=40"], "optim.optimizer.lr", adam)
    held = ["optim=noam", "trainer.max_steps=80", "optim.scheduler.factor=0.5", "~optim.optimizer.weight_decay"]
    tuning_sweep(tmp_path / "noam", held, "warmup", noam)
    tuned = tune([tmp_path / "adam", tmp_path / "noam"], "optim")
    # the level's own held settings (its group's keys) go with its choice, as written; the factorial would not
    # know them
    own = ["optim.scheduler.factor=0.5", "~optim.optimizer.weight_decay"]
    assert tuned.settings == {"optim": {"adam": ["optim.optimizer.lr=0.0005"], "noam": ["warmup=400", *own]}}
    assert level_settings_problem(tuned.settings, {"optim": ["adam", "noam"]}) is None  # ~key: no value, taken
    # the factorial given the tuning's own command line (warmup=400, as the docs ask): the same value, no doubt,
    # however it is written (Hydra reads true as True, 5e-1 as 0.5)
    assert level_settings_problem(tuned.settings, {"optim": ["adam", "noam"], "warmup": ["400"]}) is None
    restated = {"optim": {"noam": ["+optim.optimizer.amsgrad=true", "optim.scheduler.factor=5e-1"]}}
    given = {"optim": ["noam"], "optim.optimizer.amsgrad": ["True"], "optim.scheduler.factor": ["0.5"]}
    assert level_settings_problem(restated, given) is None
    assert "warmup is also set by the command line" in level_settings_problem(
        tuned.settings, {"optim": ["adam", "noam"], "warmup": ["300"]}
    )
    assert notes_of(tuned) == [
        "note: the 95% intervals of optim=adam's optim.optimizer.lr=0.001 (below 0; above 100) reach past the "
        "values best_val_bleu can take: their seeds are too few or too scattered for a t interval (a run far from "
        "the others?); the choice is by the mean, which such a run moves most",
        "note: optim=adam: the chosen optim.optimizer.lr=0.0005 is the smallest value tried (0.0005, 0.001): one "
        "below it may be better; try it before the factorial",
        "note: optim=adam: the chosen candidate leads the next (optim.optimizer.lr=0.001) by 3.50, not established "
        f"by their seeds {not_established(adam['0.0005'], adam['0.001'])}: the two may be equally good",
        # 400 is inside 200..800: no edge; its lead over 800 is not established either
        "note: optim=noam: the chosen candidate leads the next (warmup=800) by 2.50, not established by their "
        f"seeds {not_established(noam['400'], noam['800'])}: the two may be equally good",
        "note: optim=noam's tuning sweep held optim.scheduler.factor=0.5 ~optim.optimizer.weight_decay (its own "
        "settings, or those its level_settings gave the chosen candidate): they go with its choice",
        # a budget that differs between the levels' tuning runs: not tuned alike (optim.* and warmup are theirs)
        "note: the tuning runs of optim=adam and optim=noam differ in settings that are neither level's own "
        "(trainer.max_steps: 40 for adam, 80 for noam): their levels were not tuned alike",
    ]
    winner = tuned.under["optim"]["noam"]
    assert winner["run"] == "warmup=400,seed=1" and winner["seeds"] == ["1", "2"]
    assert winner["config"]["trainer.max_steps"] == 80 and winner["config"]["warmup"] == 400
    assert "seed" not in winner["config"] and winner["choices"]["optim"] == "noam"

    # a clear lead, inside the grid: nothing to say; one seed each: the lead is not tested; a tie: arbitrary
    clear = {"200": [20, 20.5, 19.5], "400": [30, 30.5, 29.5], "800": [25, 25.5, 24.5]}
    tuning_sweep(tmp_path / "clear", ["optim=noam"], "warmup", clear, fingerprints=False)
    assert notes_of(tune([tmp_path / "clear"], "optim")) == [  # runs without fingerprint.json (made by hand here)
        "note: optim=noam's winning tuning run (warmup=400,seed=1) recorded no settings (fingerprint.json, "
        "config.yaml): a sweep that loads this file cannot check its own against them"
    ]
    one = {"200": [20.0], "400": [30.0], "800": [25.0]}
    tuning_sweep(tmp_path / "one", ["optim=noam"], "warmup", one, fingerprints=False)
    (note,) = notes_of(tune([tmp_path / "one"], "optim"), unrecorded=False)
    assert "leads the next (warmup=800) by 5.00, with too few seeds to test it (one on a side)" in note
    # seeds that scored alike on both sides: not a lead "established" at p 0, but one they cannot test
    alike = {"200": [20.0, 20.0], "400": [30.0, 30.0], "800": [25.0, 25.0]}
    tuning_sweep(tmp_path / "alike", ["optim=noam"], "warmup", alike, fingerprints=False)
    (note,) = notes_of(tune([tmp_path / "alike"], "optim"), unrecorded=False)
    assert "leads the next (warmup=800) by 5.00, and each one's seeds scored alike: the seeds varied nothing" in note
    tie = {"200": [20.0], "400": [20.0], "800": [10.0]}
    tuning_sweep(tmp_path / "tie", ["optim=noam"], "warmup", tie, fingerprints=False)
    assert (
        "the chosen candidate ties with the next (warmup=400) at 20.00: the choice between"
        in (notes_of(tune([tmp_path / "tie"], "optim"), unrecorded=False)[-1])
    )
    # means equal as their tests compute them (exactly), whatever the order of the seeds' scores
    reordered = {"200": [27.5, 37.24, 25.14], "400": [25.14, 37.24, 27.5]}
    tuning_sweep(tmp_path / "reordered", ["optim=noam"], "warmup", reordered, fingerprints=False)
    assert (
        "ties with the next (warmup=400) at 29.96: the choice between them"
        in (notes_of(tune([tmp_path / "reordered"], "optim"), unrecorded=False)[-1])
    )
    # means equal in decimals whose floats differ in the last bits (29.840000000000003 and 29.84) tie too
    decimals = {"200": [30.55, 29.94, 29.03], "400": [29.52, 30.54, 29.46]}
    tuning_sweep(tmp_path / "decimals", ["optim=noam"], "warmup", decimals, fingerprints=False)
    assert (
        "ties with the next (warmup=400) at 29.84: the choice between them"
        in (notes_of(tune([tmp_path / "decimals"], "optim"), unrecorded=False)[-1])
    )
    # ... and the one chosen is the first listed, as the note says, not the one whose float is larger
    swapped = {"200": decimals["400"], "400": decimals["200"]}
    tuning_sweep(tmp_path / "swapped", ["optim=noam"], "warmup", swapped, fingerprints=False)
    tuned = tune([tmp_path / "swapped"], "optim")
    assert "ties with the next (warmup=400)" in notes_of(tuned, unrecorded=False)[-1]
    assert tuned.settings["optim"]["noam"] == ["warmup=200"]
    # a diverged candidate's nan or inf: no mean takes it, and tune says which runs and what to do
    diverged = {"200": [30.0, float("nan")], "400": [29.0, 28.0]}
    tuning_sweep(tmp_path / "diverged", ["optim=noam"], "warmup", diverged, fingerprints=False)
    with pytest.raises(ValueError, match=r"1 run\(s\) recorded best_val_bleu as nan or infinite \(warmup=200,seed=2\)"):
        tune([tmp_path / "diverged"], "optim")
    # a tie of three: each candidate at the best mean is named, not the next alone
    three = {"100": [10.0], "200": [20.0], "400": [20.0], "800": [20.0]}
    tuning_sweep(tmp_path / "three", ["optim=noam"], "warmup", three, fingerprints=False)
    assert notes_of(tune([tmp_path / "three"], "optim"), unrecorded=False)[-1] == (
        "note: optim=noam: the chosen candidate ties with 2 others (warmup=400; warmup=800) at 20.00: the choice "
        "among them is arbitrary (the first listed)"
    )
    # every run alike (0 BLEU after too short a training): no candidate is better, whatever the order says
    zero = {"200": [0.0], "400": [0.0]}
    tuning_sweep(tmp_path / "zero", ["optim=noam"], "warmup", zero, fingerprints=False)
    assert notes_of(tune([tmp_path / "zero"], "optim"), unrecorded=False)[-1] == (
        "note: optim=noam: every candidate scored 0.00: the metric does not tell them apart (too short a "
        "training?), and the choice is the first listed"
    )
    # -1 (no limit) among the values tried (of a level's own setting, as tune takes no other): a choice at the
    # other edge is still one
    sentinel = {"-1": [20, 20.5, 19.5], "5": [25, 25.5, 24.5], "10": [30, 30.5, 29.5]}
    tuning_sweep(tmp_path / "epochs", ["optim=noam"], "optim.scheduler.max_steps", sentinel, fingerprints=False)
    assert notes_of(tune([tmp_path / "epochs"], "optim"), unrecorded=False) == [
        "note: optim=noam: the chosen optim.scheduler.max_steps=10 is the largest value tried (5, 10): one above it "
        "may be better; try it before the factorial"
    ]
    # and at the smallest: -1 sorts first but is no point of the scale
    sentinel = {"-1": [20, 20.5, 19.5], "5": [30, 30.5, 29.5], "10": [25, 25.5, 24.5]}
    tuning_sweep(tmp_path / "epochs5", ["optim=noam"], "optim.scheduler.max_steps", sentinel, fingerprints=False)
    assert notes_of(tune([tmp_path / "epochs5"], "optim"), unrecorded=False) == [
        "note: optim=noam: the chosen optim.scheduler.max_steps=5 is the smallest value tried (5, 10): one below it "
        "may be better; try it before the factorial"
    ]
    # nothing below none: no weight decay chosen is no edge to go past (a clear lead: no other note)
    none = {"0.0": [30, 30.5, 29.5], "0.1": [20, 20.5, 19.5], "0.3": [10, 10.5, 9.5]}
    tuning_sweep(tmp_path / "dropout", ["optim=noam"], "optim.optimizer.weight_decay", none, fingerprints=False)
    assert notes_of(tune([tmp_path / "dropout"], "optim"), unrecorded=False) == []


def ci(a: float, b: float) -> str:
    """The half-width of two seeds' 95% t interval, by scipy: t(0.975, 1) x their standard error."""
    return f"{t_dist.ppf(0.975, 1) * abs(a - b) / 2:.2f}"


def refingerprint(sweep_dir, change, seeds=None) -> None:
    """Edit the fingerprints a sweep's runs recorded (of ``seeds`` alone, where given): ``change(fingerprint)``."""
    for path in sorted(sweep_dir.glob("*/fingerprint.json")):
        if seeds is None or any(path.parent.name.endswith(f"seed={seed}") for seed in seeds):
            recorded = json.loads(path.read_text())
            change(recorded)
            path.write_text(json.dumps(recorded))


def test_pooled_tuning_sweeps_tell_a_count_of_batches_from_a_share(tmp_path):
    """Lightning reads trainer.limit_train_batches=1 as one batch an epoch and 1.0 as all of them: equal as
    numbers, they are not the same training, and sweeps that differ in it were not trained alike."""
    held = ["optim=noam", "trainer.max_steps=40"]
    tuning_sweep(tmp_path / "grid", held, "warmup", {"200": [30.0, 31.0]})
    tuning_sweep(tmp_path / "edge", held, "warmup", {"1600": [34.0, 36.0]})
    sweeps = [tmp_path / "grid", tmp_path / "edge"]
    refingerprint(tmp_path / "grid", lambda r: r["config"].update({"trainer.limit_train_batches": 1.0}))
    refingerprint(tmp_path / "edge", lambda r: r["config"].update({"trainer.limit_train_batches": 1}))
    with pytest.raises(
        ValueError, match=r"were not trained alike: trainer.limit_train_batches is 1.0 in .*grid and 1 in"
    ):
        tune(sweeps, "optim")
    refingerprint(tmp_path / "edge", lambda r: r["config"].update({"trainer.limit_train_batches": 1.0}))
    assert tune(sweeps, "optim").settings == {"optim": {"noam": ["warmup=1600"]}}


def test_tuning_sweeps_of_one_level_pool_by_their_settings_where_they_ran_alike(tmp_path):
    """A candidate past the grid's edge, run as a sweep of its own (as tune's notes and its refusal of a grid
    widened in place ask), could not be compared with the grid's: tune refused a second sweep of the level, so
    the choice was made by hand. Pooled, a candidate is its settings, read from each run's fingerprint: a
    sweep that left optim.scheduler.factor at its default ran at 1.0."""
    held = ["optim=noam", "trainer.max_steps=40"]
    grid = {"200": [30.0, 31.0], "800": [33.0, 34.0]}
    tuning_sweep(tmp_path / "grid", held, "warmup", grid)
    tuning_sweep(tmp_path / "edge", held, "warmup", {"1600": [34.0, 36.0]})
    tuning_sweep(tmp_path / "rate", [*held, "optim.scheduler.factor=2.0"], "warmup", {"1600": [36.0, 37.0]})
    sweeps = [tmp_path / "grid", tmp_path / "edge", tmp_path / "rate"]
    tuned = tune(sweeps, "optim")
    assert tuned.lines[:6] == [
        "| optim | candidate | best_val_bleu (mean ± 95% CI) | seeds |",
        "|---|---|---|---|",
        f"| noam | optim.scheduler.factor=2.0 warmup=1600 | 36.50 ± {ci(36.0, 37.0)} | 2 |",
        f"| noam | optim.scheduler.factor=1.0 warmup=1600 | 35.00 ± {ci(34.0, 36.0)} | 2 |",
        f"| noam | optim.scheduler.factor=1.0 warmup=800 | 33.50 ± {ci(33.0, 34.0)} | 2 |",
        f"| noam | optim.scheduler.factor=1.0 warmup=200 | 30.50 ± {ci(30.0, 31.0)} | 2 |",
    ]
    # the choice as the winning sweep wrote it, with the settings its own candidate held
    assert tuned.settings == {"optim": {"noam": ["optim.scheduler.factor=2.0", "warmup=1600"]}}
    assert tuned.under["optim"]["noam"]["run"] == "warmup=1600,seed=1"
    assert tuned.under["optim"]["noam"]["config"]["optim.scheduler.factor"] == 2.0
    assert notes_of(tuned) == [
        "note: optim=noam: the chosen optim.scheduler.factor=2.0 is the largest value tried (1, 2): one above it may "
        "be better; try it before the factorial",
        "note: optim=noam: the chosen warmup=1600 is the largest value tried (200, 800, 1600): one above it may be "
        "better; try it before the factorial",
        "note: optim=noam: the chosen candidate leads the next (optim.scheduler.factor=1.0 warmup=1600) by 1.50, not "
        f"established by their seeds {not_established([36.0, 37.0], [34.0, 36.0])}: the two may be equally good",
    ]  # the settings the winning sweep held are its candidate's, named in the table: no note that they go with it
    # the same candidate from two sweeps: its seeds pooled (more seeds added later), each seed once
    shutil.copytree(tmp_path / "edge", tmp_path / "more")
    with pytest.raises(ValueError, match=r"more: seed 1 of optim.scheduler.factor=1.0 warmup=1600 ran in .*edge too"):
        tune([*sweeps, tmp_path / "more"], "optim")
    # a setting that is not the level's own, different: not tuned alike
    longer = {"trainer.max_steps": 80, "warmup": 3200, "optim.scheduler.warmup": 3200}  # the scheduler's copies it
    refingerprint(tmp_path / "more", lambda r: r["config"].update(longer))
    said = r"trainer.max_steps is 40 in .*grid and 80 in .*more, which is not a setting of optim=noam"
    with pytest.raises(ValueError, match=r"tuning sweeps of optim=noam were not trained alike: " + said):
        tune([*sweeps, tmp_path / "more"], "optim")

    # a setting of the level that no sweep sets, different (other defaults, other code): between candidates, and
    # between the runs of one
    def eps(recorded):
        recorded["config"]["optim.optimizer.eps"] = 1e-8

    refingerprint(tmp_path / "edge", eps)
    said = r"optim.optimizer.eps is 1e-09 in .*grid and 1e-08 in .*edge\): the candidates would differ in more"
    with pytest.raises(ValueError, match=r"differ in optim.optimizer.eps, which no pooled sweep sets \(" + said):
        tune(sweeps, "optim")
    refingerprint(tmp_path / "edge", lambda r: r["config"].update({"optim.optimizer.eps": 1e-9}), seeds=[2])
    with pytest.raises(
        ValueError, match=r"the pooled runs of one candidate of optim=noam differ in optim.optimizer.eps"
    ):
        tune(sweeps, "optim")
    refingerprint(tmp_path / "edge", lambda r: r["config"].update({"optim.optimizer.eps": 1e-9}))
    assert tune(sweeps, "optim").settings == tuned.settings  # as it was
    # other corpus text: their validation scores do not compare
    refingerprint(tmp_path / "edge", lambda r: r.update({"data": {"text": {"val": "0123"}}}))
    with pytest.raises(ValueError, match=r"optim=noam read other corpus text"):
        tune(sweeps, "optim")
    refingerprint(tmp_path / "edge", lambda r: r.pop("data"))
    # other code: pooled, with a note naming the commits
    refingerprint(tmp_path / "rate", lambda r: r.update({"code": {"hash": "other", "commit": "abcdef0123"}}))
    said = [n for n in notes_of(tune(sweeps, "optim")) if "different code" in n]
    assert len(said) == 1 and f"abcdef0 in {tmp_path / 'rate'}" in said[0]
    assert "their comparison holds only if the changes between them leave results alone" in said[0]


def test_pooled_tuning_compares_values_as_levels_and_writes_a_choice_a_factorial_loads(tmp_path):
    """Review of the pooling: factor 2 in one sweep and 2.0 in another were two candidates (and a seed ran
    twice unseen); a key added with + or deleted with ~ was written as key=value or key=(absent), which
    Hydra refuses when the factorial loads the file; a setting given by level_settings was called one that
    no sweep sets; runs scored as another measure were ranked together; candidates on other seeds, unsaid."""
    held = ["optim=noam", "trainer.max_steps=40"]
    tuning_sweep(tmp_path / "grid", held, "warmup", {"200": [30.0, 31.0], "800": [33.0, 34.0]})
    tuning_sweep(tmp_path / "rate", [*held, "optim.scheduler.factor=2.0"], "warmup", {"1600": [36.0, 37.0]})
    tuning_sweep(tmp_path / "rate_int", [*held, "optim.scheduler.factor=2"], "warmup", {"1600": [35.0, 35.5]})
    with pytest.raises(
        ValueError, match=r"rate_int: seed 1 of optim.scheduler.factor=2.0 warmup=1600 ran in .*rate too"
    ):
        tune([tmp_path / "grid", tmp_path / "rate", tmp_path / "rate_int"], "optim")
    # a key added (+) and a key deleted (~) by the winning sweep: as written, so that the factorial loads them
    changed = [*held, "+optim.optimizer.amsgrad=true", "~optim.optimizer.weight_decay"]
    tuning_sweep(tmp_path / "signs", changed, "warmup", {"1600": [38.0, 38.5]})
    tuned = tune([tmp_path / "grid", tmp_path / "signs"], "optim")
    candidate = "optim.optimizer.amsgrad=true optim.optimizer.weight_decay=(absent) warmup=1600"
    assert tuned.lines[2] == f"| noam | {candidate} | 38.25 ± {ci(38.0, 38.5)} | 2 |"
    chosen = tuned.settings["optim"]["noam"]
    assert chosen == ["+optim.optimizer.amsgrad=true", "~optim.optimizer.weight_decay", "warmup=1600"]
    loaded = composed(tmp_path / "f", ["grid=none", "data=toy", *held, *chosen])
    assert loaded.optim.optimizer.amsgrad is True and "weight_decay" not in loaded.optim.optimizer
    # one sweep of a key it adds (+key=a,b): the choice adds it too, as the factorial must
    (tmp_path / "plus").mkdir()
    fake_tuning_sweep(tmp_path / "plus", "noam", "optim.optimizer.amsgrad", {"true": [30.0], "false": [20.0]})
    saved = OmegaConf.load(tmp_path / "plus" / "multirun.yaml")
    saved.hydra.overrides.task = ["optim=noam", "+optim.optimizer.amsgrad=true,false", "seed=1", "data=toy"]
    OmegaConf.save(saved, tmp_path / "plus" / "multirun.yaml")
    assert tune([tmp_path / "plus"], "optim").settings["optim"]["noam"] == ["+optim.optimizer.amsgrad=true"]
    # the grid winning instead: its recorded values, a key its runs lacked left out
    for path in (tmp_path / "signs").glob("*/sweep_result.json"):
        path.write_text(path.read_text().replace('"best_val_bleu": 38', '"best_val_bleu": 28'))
    chosen = tune([tmp_path / "grid", tmp_path / "signs"], "optim").settings["optim"]["noam"]
    assert chosen == ["optim.optimizer.weight_decay=0.0", "warmup=800"]
    assert composed(tmp_path / "g", ["grid=none", "data=toy", *held, *chosen]).optim.optimizer.weight_decay == 0.0
    # a setting given by a sweep's level_settings is a setting it sets
    settings = {"optim": {"noam": ["optim.scheduler.factor=0.5"]}}
    given = "level_settings={optim: {noam: ['optim.scheduler.factor=0.5']}}"
    tuning_sweep(tmp_path / "half", [*held, given], "warmup", {"1600": [20.0, 21.0]})
    names = [p.parent.name for p in sorted((tmp_path / "half").glob("*/sweep_result.json"))]
    (tmp_path / "half" / "plan.json").write_text(json.dumps({"run_names": names, "level_settings": settings}))
    table = tune([tmp_path / "grid", tmp_path / "half"], "optim").lines
    assert f"| noam | optim.scheduler.factor=0.5 warmup=1600 | 20.50 ± {ci(20.0, 21.0)} | 2 |" in table
    # a key null in one code and no longer recorded by another: one value
    refingerprint(tmp_path / "half", lambda r: r["config"].update({"checkpoint.every_n_train_steps": None}))
    refingerprint(tmp_path / "grid", lambda r: r["config"].pop("checkpoint.every_n_train_steps", None))
    assert tune([tmp_path / "grid", tmp_path / "half"], "optim").settings["optim"]["noam"] == [
        "optim.scheduler.factor=1.0",
        "warmup=800",
    ]
    # other seeds: said
    for path in (tmp_path / "half").glob("*/sweep_result.json"):
        path.write_text(path.read_text().replace('"seed": 1', '"seed": 3').replace('"seed": 2', '"seed": 4'))
    notes = notes_of(tune([tmp_path / "grid", tmp_path / "half"], "optim"))
    assert (
        "note: the pooled candidates of optim=noam ran different seeds (optim.scheduler.factor=1.0 warmup=200: 1, 2; "
        "optim.scheduler.factor=1.0 warmup=800: 1, 2; optim.scheduler.factor=0.5 warmup=1600: 3, 4): each is "
        "compared on its own seeds (Welch's test), not seed for seed as in one sweep; run the seeds they lack to "
        "compare them alike"
    ) in notes
    # another measure in one sweep (lowercased text, scored ignoring case): refused as within a sweep
    for path in (tmp_path / "half").glob("*/sweep_result.json"):
        path.write_text(json.dumps({**json.loads(path.read_text()), "lowercase": True}))
    with pytest.raises(ValueError, match=r"best_val_bleu"):
        tune([tmp_path / "grid", tmp_path / "half"], "optim")


def test_a_factorial_with_a_tuned_file_is_checked_against_its_tuning_runs_setting_by_setting(
    tmp_path, monkeypatch, capsys
):
    """The file recorded only the values: a factorial with another budget, corpus size or model used them
    with no word that they were chosen for other runs."""
    from nmt.sweep.callback import SweepReport

    # Adam's budget held in a grid (never composed into the sweep's config), and a default given again; its
    # test set left undecoded, as docs/sweeps.md's tuning sweeps leave it: not a setting it was tuned under
    adam = {"0.001": [20.0], "0.002": [21.0]}
    tuning_sweep(tmp_path / "adam", ["optim=adam", "trainer.max_epochs=12", "test_after_training=false"],
                 "optim.optimizer.lr", adam, grid={"trainer.max_steps": 40})  # fmt: skip
    tuning_sweep(tmp_path / "noam", ["optim=noam", "trainer.max_steps=80"], "warmup", {"200": [30.0], "400": [31.0]})
    conf = tmp_path / "conf"
    (conf / "tuned").mkdir(parents=True)
    tuned = tune([tmp_path / "adam", tmp_path / "noam"], "optim")
    write_tuned_file(conf / "tuned" / "mine.yaml", tuned.settings, ["chosen by a test", *tuned.lines], tuned.under)
    read = read_tuned_file(conf / "tuned" / "mine.yaml")
    assert read["under"] == json.loads(json.dumps(tuned.under))
    assert read["notes"][0] == "chosen by a test" and not any(n.startswith("tuned under") for n in read["notes"])
    assert OmegaConf.load(conf / "tuned" / "mine.yaml").level_settings.optim.noam == ["warmup=400"]
    assert read["global"]  # its first line puts its keys at the top level, where the sweep reads them

    # the factorial: Adam's budget, a corpus cut short; pos is a factor (tuned at absolute: not a difference)
    given = ["grid=none", "data=toy", "trainer.max_steps=40", "data.train_size=1000"]
    # data.tokenizer.joint: tuned at true, which Hydra writes True among this sweep's levels (no false alarm)
    swept = ["optim=adam,noam", "pos=absolute,relative", "data.tokenizer.joint=true,false", "seed=1,2"]
    factorial = composed(tmp_path / "factorial", given, swept)
    with open_dict(factorial):
        factorial.hydra.runtime.choices.tuned = "mine"  # +tuned=mine, from the folder below
        searching(factorial, conf)
        factorial.level_settings = OmegaConf.load(conf / "tuned" / "mine.yaml").level_settings
    factors = ["optim", "pos", "data.tokenizer.joint", "seed"]
    differs, unchecked = tuned_differences(tuned_file(factorial), factorial, factors)
    assert unchecked == {}
    assert differs == {
        "optim=adam": ["data.train_size: 4000 in tuning, 1000 here"],
        "optim=noam": ["data.train_size: 4000 in tuning, 1000 here", "trainer.max_steps: 80 in tuning, 40 here"],
    }
    SweepReport().on_multirun_start(factorial)  # said before any run trains, and kept for the report
    out = capsys.readouterr().out
    assert (
        "[sweep] warning: optim=noam's settings (+tuned=mine) were chosen under other settings than this sweep's: "
        "data.train_size: 4000 in tuning, 1000 here; trainer.max_steps: 80 in tuning, 40 here" in out
    )
    # a researcher's trial: settings tuned in one cell of the other factors served every cell unremarked
    assert (
        "[sweep] note: optim=adam's settings (+tuned=mine) were chosen at data.tokenizer.joint=True, pos=absolute "
        "and serve every cell: whether other levels of those factors want other settings was not tuned" in out
    )
    plan = json.loads((tmp_path / "factorial" / "plan.json").read_text())
    assert plan["tuned"]["differs"] == differs and plan["tuned"]["name"] == "mine"
    assert plan["tuned"]["tuned_at"]["optim=noam"] == "data.tokenizer.joint=True, pos=absolute"
    # seed 1 ran in the tuning, under other settings: said all the same (the shipped file's after_warmup differs,
    # which changes nothing for Adam: its runs at seed 1 repeat the tuning's, and the note was hidden)
    assert plan["tuned"]["seeds_reused"] == {"optim=adam": ["1"], "optim=noam": ["1"]}
    assert "[sweep] note: seed 1 (optim=adam and optim=noam) also ran in the tuning" in out
    assert plan["tuned"]["compared"] == ["optim=adam", "optim=noam"]
    # each level under its tuning's settings (Noam's budget its own level setting): nothing differs; a level the
    # file tuned that this sweep does not run is not compared
    alike = composed(tmp_path / "alike", ["grid=none", "data=toy"], ["optim=adam,noam", "seed=1"])
    with open_dict(alike):
        alike.hydra.runtime.choices.tuned = "mine"
        searching(alike, conf)
        alike.trainer.max_steps = 40
        alike.hydra.overrides.task.append("trainer.max_steps=40")
        alike.level_settings = {
            "optim": {"adam": ["optim.optimizer.lr=0.002"], "noam": ["warmup=400", "trainer.max_steps=80"]}
        }
    assert tuned_differences(tuned_file(alike), alike, ["optim", "seed"]) == ({}, {})
    # its seed-1 runs repeat the tuning's winners, each level's named
    assert reused_seeds(tuned_file(alike), alike) == {"optim=adam": ["1"], "optim=noam": ["1"]}
    with open_dict(alike):
        alike.hydra.overrides.task[alike.hydra.overrides.task.index("seed=1")] = "seed=1,2"
    assert reused_seeds(tuned_file(alike), alike) == {"optim=adam": ["1"], "optim=noam": ["1"]}
    from nmt.sweep.tuned import seeds_reused_text

    assert seeds_reused_text({"optim=adam": ["1"], "optim=noam": ["1"]}) == "seed 1 (optim=adam and optim=noam)"
    assert seeds_reused_text({"optim=adam": ["1"], "optim=noam": ["1", "2"]}) == (
        "seed 1 (optim=adam); seeds 1, 2 (optim=noam)"
    )
    # the file's settings edited by hand, a level it never tuned added, and pos tuned at a level not run here
    edited = composed(tmp_path / "edited", ["grid=none", "data=toy", "trainer.max_steps=40"],
                      ["optim=adam,adamw", "pos=rope,relative", "seed=1"])  # fmt: skip
    with open_dict(edited):
        edited.hydra.runtime.choices.tuned = "mine"
        searching(edited, conf)
        edited.level_settings = {"optim": {"adam": ["optim.optimizer.lr=0.001"], "adamw": ["lr=0.01"]}}
    differs, unchecked = tuned_differences(tuned_file(edited), edited, ["optim", "pos", "seed"])
    assert unchecked == {"optim=adamw": "its settings are not a choice of the tuning the file records (added by hand?)"}
    assert differs["optim=adam"][0] == "pos: absolute in tuning, not a level here (rope, relative)"
    # other code than the tuning's: said as a run folder says it
    read["under"]["optim"]["adam"]["code"] = {"hash": "0" * 64, "commit": "abcdef123456", "dirty": False}
    (said,) = [line for line in tuned_differences(read, alike, ["optim", "seed"])[0]["optim=adam"]]
    assert said.startswith(
        "code: the source of nmt/ or of a config group changed since the tuning (commit abcdef123456 -> "
    )
    # a file recording no tuning at all, and one whose levels this sweep does not run (refused: it applies to none)
    del read["under"]
    assert tuned_differences(read, alike, ["optim", "seed"])[1]["optim=adam"].startswith("the file does not record")
    from nmt.sweep.tuned import checked_tuned_file

    adamw = composed(tmp_path / "adamw", ["grid=none", "data=toy", "optim=adamw"], ["seed=1"])
    with open_dict(adamw):
        adamw.hydra.runtime.choices.tuned = "mine"
        searching(adamw, conf)
        adamw.level_settings = OmegaConf.load(conf / "tuned" / "mine.yaml").level_settings
    with pytest.raises(SystemExit):
        checked_tuned_file(adamw, ["seed"])
    assert "error: +tuned=mine: this sweep runs none of its levels (optim=adam, optim=noam)" in capsys.readouterr().err
    assert (
        "optim.optimizer.lr: 0.002 in tuning, 0.001 here (a level setting: not the value its tuning chose)"
        in (differs["optim=adam"])
    )


def test_a_tuned_level_is_a_level_of_the_sweep_by_value(tmp_path, monkeypatch, capsys):
    """A reviewer's trial: a file tuned at model.dropout=0.0 (as Hydra wrote the tuning sweep's value) loaded by a
    factorial of model.dropout=0,0.1 gave the 0 runs their settings (matched by value) but was refused as running
    none of its levels (matched as text), and would otherwise have called 0 untuned."""
    from nmt.sweep import tuned as tuned_module
    from nmt.sweep.levels import runs_level

    assert runs_level({"model.dropout": ["0", "0.1"]}, "model.dropout", "0.0")
    assert not runs_level({"model.dropout": ["0", "0.1"]}, "model.dropout", "0.2")
    config = composed(tmp_path / "f", ["grid=none", "data=toy"], ["model.dropout=0,0.1", "seed=1"])
    with open_dict(config):
        config.hydra.runtime.choices.tuned = "drop"
        config.level_settings = {"model.dropout": {"0.0": ["optim.optimizer.lr=0.002"]}}
    monkeypatch.setattr(tuned_module, "tuned_file", lambda _: {"name": "drop", "global": True, "notes": []})
    checked = tuned_module.checked_tuned_file(config, ["model.dropout", "seed"])
    assert checked["unchecked"] == {"model.dropout=0.0": "the file does not record its tuning (written by hand, "
                                    "or before tune recorded it)"}  # fmt: skip
    out = capsys.readouterr().out
    assert "model.dropout=0.1 has no settings in +tuned=drop" in out and "model.dropout=0 has" not in out


ROW = (
    "the settings of this sweep's run of each tuned level, at the tuning's values of its other factors: checked "
    "equal to its winning tuning run's, every setting but the seed; tuning seeds "
)


@pytest.mark.parametrize(
    ("tuned", "row", "warned"),
    [
        (  # every level unchecked: nothing was compared, nothing is called equal
            {"name": "t", "notes": [], "under": {}, "differs": {}, "compared": [], "unchecked": {"optim=adam": "why"}},
            "nothing compared; not checked: optim=adam (why)",
            False,
        ),
        (
            {
                "name": "t",
                "notes": [],
                "under": {},
                "differs": {},
                "compared": ["optim=noam"],
                "unchecked": {"optim=adam": "why"},
            },
            "optim=noam: no difference from their tuning runs' settings, the seed aside; not checked: optim=adam (why)",
            False,
        ),  # fmt: skip
        (
            {"name": "t", "notes": []},
            "not recorded in the file (written by hand, or before sweep.py tune recorded it): not checked",
            False,
        ),
        (
            {"name": "t", "notes": [], "under": {"optim": {"adam": {"seeds": ["10", "2"]}}}, "differs": {}},
            ROW + "2, 10",
            False,
        ),
        (  # a factorial run at a tuned setting with a tuning seed may be the very run that won on validation
            {
                "name": "t",
                "notes": [],
                "under": {"optim": {"a": {"seeds": ["1"]}}},
                "differs": {},
                "seeds_reused": ["1"],
            },
            ROW + "1; seed 1 also tuned: a run at a tuned setting with it may repeat the tuning run whose validation "
            "score chose that setting, so its validation score leans high (its test score does not)",
            False,
        ),
        (  # the text that could not be read when the sweep started: the row says it was not compared
            {
                "name": "t",
                "notes": [],
                "under": {"optim": {"adam": {"seeds": ["1"]}}},
                "differs": {},
                "text_not_compared": ["it cannot be read when the sweep starts (FileNotFoundError: x: gone)"],
            },
            ROW + "1; the corpus text not compared with the tuning's: it cannot be read when the sweep starts "
            "(FileNotFoundError: x: gone)",
            False,
        ),
        (  # since the seeds are kept by level: each level's named
            {
                "name": "t",
                "notes": [],
                "under": {"optim": {"adam": {"seeds": ["1"]}, "noam": {"seeds": ["1", "2"]}}},
                "differs": {},
                "seeds_reused": {"optim=adam": ["1"], "optim=noam": ["1", "2"]},
            },
            ROW + "1, 2; seed 1 (optim=adam); seeds 1, 2 (optim=noam) also tuned: a run at a tuned setting with them "
            "may repeat the tuning run whose validation score chose that setting, so its validation score leans high "
            "(its test score does not)",
            False,
        ),
        (
            {
                "name": "t",
                "notes": [],
                "under": {"optim": {}},
                "differs": {"optim=noam": ["trainer.max_steps: 80 in tuning, 40 here"]},
            },
            "other settings than this sweep's (optim=noam; the warning below)",
            True,
        ),
    ],
)
def test_the_report_says_what_the_levels_were_tuned_under(tmp_path, tuned, row, warned):
    from nmt.sweep.report import write_report

    from .test_statistics import synthetic_sweep

    synthetic_sweep(tmp_path)
    settings = {"pos": {"absolute": ["lr=1e-3"], "relative": ["lr=2e-3"]}}
    (tmp_path / "plan.json").write_text(json.dumps({"runs": 12, "level_settings": settings, "tuned": tuned}))
    report = write_report(tmp_path).read_text()
    assert f"| tuned under | {row} |" in report
    flat = " ".join(report.split())
    warning = (
        "**Warning:** the level settings were chosen under other settings than this sweep's, so they may not be the "
        "best for these runs: optim=noam: trainer.max_steps: 80 in tuning, 40 here."
    )
    caveat = (
        "The levels' settings were tuned under other settings than this sweep's (optim=noam: trainer.max_steps, as "
        "What ran says): a level may have done better"
    )
    assert (warning in flat) is warned and (caveat in flat) is warned


def test_a_factorial_reading_other_text_than_its_tuning_is_told_so(tmp_path, monkeypatch, capsys):
    """The check compared settings only: a corpus file edited between the tuning and the factorial (or another
    copy found under the same settings) passed for the tuning's text."""
    from nmt.data.build import build_datamodule
    from nmt.sweep.tuned import checked_tuned_file

    corpus = tmp_path / "corpus"
    files = files_corpus(corpus)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        run = compose("train", overrides=[*files, "seed=1"])
    # the hashes train.py records in a run's fingerprint.json, read as a run reads the corpus
    text = build_datamodule(run.data, run.cache_dir, 1).text_hashes()
    tuning_sweep(tmp_path / "noam", [*files, "optim=noam", "trainer.max_steps=80"], "warmup",
                 {"200": [30.0], "400": [31.0]}, text=text)  # fmt: skip
    tuned = tune([tmp_path / "noam"], "optim")
    assert tuned.under["optim"]["noam"]["text"] == text  # recorded in the file with the settings
    conf = tmp_path / "conf"
    (conf / "tuned").mkdir(parents=True)
    write_tuned_file(conf / "tuned" / "mine.yaml", tuned.settings, tuned.lines, tuned.under)
    factorial = composed(tmp_path / "factorial", ["grid=none", *files, "trainer.max_steps=80"],
                         ["optim=adamw,noam", "seed=1"])  # fmt: skip
    with open_dict(factorial):
        factorial.hydra.runtime.choices.tuned = "mine"
        searching(factorial, conf)
        factorial.level_settings = OmegaConf.load(conf / "tuned" / "mine.yaml").level_settings
    assert tuned_differences(tuned_file(factorial), factorial, ["optim", "seed"]) == ({}, {})  # the same text
    # the validation file edited since the tuning: the settings are the same, the text is not
    (corpus / "val.tgt").write_text((corpus / "val.tgt").read_text().replace("one", "seven", 1))
    checked = checked_tuned_file(factorial, ["optim", "seed"])
    said = (
        "the corpus text: the val split read here differs from the tuning run's (another copy of the corpus, or "
        "files edited since the tuning)"
    )
    assert checked["differs"] == {"optim=noam": [said]} and checked["compared"] == ["optim=noam"]
    out = capsys.readouterr().out
    assert f"were chosen under other settings than this sweep's: {said}" in out
    # adamw, run beside the tuned noam with no settings of its own: said before any run, not only in the report
    assert (
        "[sweep] warning: optim=adamw has no settings in +tuned=mine (tuned: optim=noam): it runs at the "
        "defaults and the command line's settings, compared untuned with the tuned levels" in out
    )
    # a corpus setting that differs too: the text differs by it, and only the setting is said (its text not read)
    with open_dict(factorial):
        factorial.data.max_len = 100
        factorial.hydra.overrides.task.append("data.max_len=100")
    assert tuned_differences(tuned_file(factorial), factorial, ["optim", "seed"])[0] == {
        "optim=noam": ["data.max_len: 512 in tuning, 100 here"]
    }
    factorial.hydra.overrides.task.pop()
    # a corpus that cannot be read here: said once, not called a difference (its runs fail on it themselves),
    # and kept for the report's "tuned under" row
    for path in corpus.iterdir():
        path.unlink()
    checked = checked_tuned_file(factorial, ["optim", "seed"])
    assert (checked["differs"], checked["unchecked"]) == ({}, {})
    (why,) = checked["text_not_compared"]
    missing = corpus / "train.src"
    assert (
        why
        == f"it cannot be read when the sweep starts (FileNotFoundError: {missing}: No such file or directory "
        + f"(data.train={corpus / 'train'}; a prefix, to which .src and .tgt are added; if it was moved or renamed, "
        + "give its new place (data.train=PATH; evaluate.py: +data.train=PATH)))"
    )
    out = capsys.readouterr().out
    assert out.count(f"the corpus text of the tuned levels' runs is not compared with their tuning's: {why}") == 1


def test_the_shipped_tuned_files_name_by_hand_the_corpus_and_budget_they_were_tuned_under(tmp_path, capsys):
    """A researcher's trial: +tuned=factorial_converged (tuned on Multi30k) ran a toy factorial with a warning
    that its settings were not checked, and the toy's own file was taken at another budget unremarked. Files
    written by hand name the settings their tuning ran with; a sweep compares those with its own."""
    from nmt.sweep.tuned import checked_tuned_file
    from nmt.sweep.what_ran import _tuned_under

    def checked(name, given, swept=("optim=adam,noam", "seed=1")):
        folder = tmp_path / f"{name}{len(given)}{len(swept)}"
        factorial = composed(folder, ["grid=none", *given], list(swept))
        with open_dict(factorial):
            factorial.hydra.runtime.choices.tuned = name
            factorial.level_settings = OmegaConf.load(ROOT / "conf" / "tuned" / f"{name}.yaml").level_settings
        return checked_tuned_file(factorial, [s.partition("=")[0] for s in swept])

    toy = checked("factorial_converged_toy", ["experiment=factorial_converged_toy"])
    assert (toy["differs"], toy["unchecked"]) == ({}, {}) and toy["compared"] == ["optim=adam", "optim=noam"]
    assert _tuned_under(toy).startswith("recorded in part, by hand: data._target_, data.max_tokens, ")
    # the seed it names (1) is a seed of this factorial: said, as for a file tune wrote
    assert toy["seeds_reused"] == {"optim=adam": ["1"], "optim=noam": ["1"]} and "also tuned" in _tuned_under(toy)
    # the Multi30k file at its own experiment: only the patience counted from the warm-up's end differs (its
    # tuning ran before the experiment took it); with pos a factor, the level it held is said
    own = checked("factorial_converged", ["experiment=factorial_converged", "data=multi30k"],
                  ["optim=adam,noam", "pos=absolute,relative", "seed=4"])  # fmt: skip
    after = ["early_stopping.after_warmup: false in tuning, true here"]
    assert (own["differs"], own["unchecked"], own["seeds_reused"]) == (
        {"optim=adam": after, "optim=noam": after},
        {},
        {},
    )
    plain = ["experiment=factorial_converged", "data=multi30k", "early_stopping.after_warmup=false"]
    own = checked("factorial_converged", plain,  # as the tuning ran
                  ["optim=adam,noam", "pos=absolute,relative", "seed=4"])  # fmt: skip
    assert (own["differs"], own["unchecked"], own["seeds_reused"]) == ({}, {}, {})
    assert own["tuned_at"] == {"optim=adam": "pos=absolute", "optim=noam": "pos=absolute"}
    assert "; chosen at optim=adam: pos=absolute; optim=noam: pos=absolute, and used in every cell" in (
        _tuned_under(own)
    )
    shorter = checked("factorial_converged_toy", ["experiment=factorial_converged_toy", "trainer.max_epochs=15"])
    assert shorter["differs"]["optim=adam"] == ["trainer.max_epochs: 60 in tuning, 15 here"]
    multi30k = checked("factorial_converged", ["experiment=factorial_converged_toy"])
    assert (
        "data._target_: nmt.data.multi30k.Multi30kDataModule in tuning, nmt.data.toy.ToyDataModule here"
        in multi30k["differs"]["optim=noam"]
    )
    assert "were chosen under other settings than this sweep's: data._target_: nmt.data.multi30k" in (
        capsys.readouterr().out
    )
    assert _tuned_under(multi30k).startswith("other settings than this sweep's (optim=adam, optim=noam;")


def test_a_tuned_file_in_a_config_folder_hydra_searches_is_the_one_read_and_checked(tmp_path, capsys):
    """+tuned= found in a folder of hydra.searchpath was applied to the runs, but every check of it was skipped
    without a word, and the plan named conf/tuned/<name>.yaml, which did not exist: only conf/tuned/ was read."""
    from nmt.sweep.plan import print_plan
    from nmt.sweep.tuned import checked_tuned_file
    from nmt.sweep.tuned_source import tuned_path

    conf = tmp_path / "conf"
    (conf / "tuned").mkdir(parents=True)
    shipped = (ROOT / "conf" / "tuned" / "factorial_converged_toy.yaml").read_text()
    (conf / "tuned" / "mine_toy.yaml").write_text(shipped)
    factorial = composed(tmp_path / "factorial", ["grid=none", "experiment=factorial_converged_toy",
                         "trainer.max_epochs=5"], ["optim=adam,noam", "seed=1"])  # fmt: skip
    with open_dict(factorial):
        factorial.hydra.runtime.choices.tuned = "mine_toy"
        searching(factorial, conf)
        factorial.level_settings = OmegaConf.load(conf / "tuned" / "mine_toy.yaml").level_settings
    assert tuned_path(factorial) == conf / "tuned" / "mine_toy.yaml"
    checked = checked_tuned_file(factorial, ["optim", "seed"])
    assert checked["name"] == "mine_toy" and checked["path"] == str(conf / "tuned" / "mine_toy.yaml")
    assert checked["differs"] and "trainer.max_epochs" in " ".join(checked["differs"]["optim=adam"])
    assert "[sweep] warning: optim=adam and optim=noam's settings (+tuned=mine_toy)" in capsys.readouterr().out
    print_plan(tmp_path / "factorial", factorial)
    assert f"[+tuned=mine_toy ({conf / 'tuned' / 'mine_toy.yaml'})]" in capsys.readouterr().out
    # the shipped file, found in conf/: named from the repository's root
    with open_dict(factorial):
        factorial.hydra.runtime.choices.tuned = "factorial_converged_toy"
    assert checked_tuned_file(factorial, ["optim", "seed"])["path"] == "conf/tuned/factorial_converged_toy.yaml"


def test_a_tuned_file_without_its_package_line_is_named_as_such(tmp_path, monkeypatch, capsys):
    """A file written by hand without '# @package _global_' was read as tuned.level_settings, and refused as
    "this sweep runs none of its levels (none)", which named nothing to fix."""
    from nmt.sweep.tuned import checked_tuned_file

    (tmp_path / "tuned").mkdir()
    (tmp_path / "tuned" / "hand.yaml").write_text("level_settings:\n  optim:\n    noam: ['warmup=400']\n")
    assert not read_tuned_file(tmp_path / "tuned" / "hand.yaml")["global"]
    source = {"path": str(tmp_path), "schema": "file", "provider": "command-line"}
    config = OmegaConf.create({"hydra": {"runtime": {"choices": {"tuned": "hand"}, "config_sources": [source]}}})
    with pytest.raises(SystemExit):
        checked_tuned_file(config, ["optim"])
    assert "hand.yaml does not begin with '# @package _global_'" in capsys.readouterr().err


def test_a_choice_between_none_and_the_largest_tried_is_at_no_edge():
    """Of model.dropout 0, 0.1 and 0.2, 0.1 chosen is inside the values tried (found by mutation: with 0 left
    out of them, 0.1 was called the smallest value tried); 0.2 is the largest, and 0 is no edge (nothing below
    none)."""
    from nmt.sweep.tuning import _weak_choice

    def scored(best: str) -> list:
        others = [v for v in ("0", "0.1", "0.2") if v != best]
        return [((("model.dropout", v),), [30.0 - i, 30.0 - i]) for i, v in enumerate([best, *others])]

    def edge(best: str) -> list[str]:
        runs = scored(best)
        by_seed = {setting: {"1": values[0], "2": values[1]} for setting, values in runs}
        return [n for n in _weak_choice("optim", "adam", runs, by_seed) if "value tried" in n]

    assert edge("0.1") == [] and edge("0") == []
    assert edge("0.2") == [
        "note: optim=adam: the chosen model.dropout=0.2 is the largest value tried (0, 0.1, 0.2): one above it may "
        "be better; try it before the factorial"
    ]
