"""A model trained on lowercased text (``data.tokenizer.normalization=lowercase``, as Multi30k papers train)
writes lowercase, and every place that scores it ignores case, as sacreBLEU's own lowercase option does:
validation, the test at the end of training, evaluate.py on its checkpoint, and a sweep's statistics."""

import csv
import json
import re
from pathlib import Path

import pytest
import sacrebleu
from hydra import compose, initialize_config_dir

from nmt.data.build import build_datamodule
from nmt.evaluation.evaluate import evaluate
from nmt.evaluation.score import main as score_main
from nmt.metrics.corpus import tokenized_lowercase_bleu
from nmt.sweep import store
from nmt.sweep.records import resolve_metric, run_record
from nmt.tasks.translation import TranslationTask
from nmt.training.config import check_config
from nmt.training.train import train

from .conftest import CONF, compose_train

REFERENCE = "Die Katze sieht den Hund im Haus"


def test_validation_bleu_and_chrf_ignore_case_only_for_a_lowercasing_tokenizer(tmp_path):
    scores = {}
    for normalization in ("identity", "lowercase"):
        cfg = compose_train(f"data.tokenizer.normalization={normalization}")
        datamodule = build_datamodule(cfg.data, str(tmp_path / normalization), 1)
        metrics = TranslationTask().validation_metrics(datamodule)
        for name in ("bleu", "chrf"):
            metrics[name].update([REFERENCE.lower()], [[REFERENCE]])
        scores[normalization] = {name: float(metrics[name].compute()) * 100 for name in ("bleu", "chrf")}
    for name in ("bleu", "chrf"):
        scorer = sacrebleu.metrics.BLEU(lowercase=True) if name == "bleu" else sacrebleu.metrics.CHRF(lowercase=True)
        expected = scorer.corpus_score([REFERENCE.lower()], [[REFERENCE]]).score
        assert scores["lowercase"][name] == pytest.approx(expected, abs=1e-3)
        assert scores["lowercase"][name] == pytest.approx(100)
        assert scores["identity"][name] < 90  # a cased model's lowercase output still loses


def test_validation_scores_every_model_by_the_lowercased_tokenised_bleu_of_the_test(tmp_path):
    """val_bleu_tok_lc, cased model or lowercase: the number the test's bleu_tok_lc gives for the same texts."""
    hypotheses = ["Ein Mann fährt Fahrrad.", "zwei Hunde spielen im Schnee-Feld", "Eine Frau, die Gitarre spielt."]
    references = ["Ein Mann fährt ein Fahrrad.", "Zwei Hunde spielen im Schnee-Feld.", "Eine Frau spielt Gitarre."]
    expected = tokenized_lowercase_bleu(hypotheses, references, "de")
    for normalization in ("identity", "lowercase"):
        cfg = compose_train(f"data.tokenizer.normalization={normalization}")
        datamodule = build_datamodule(cfg.data, str(tmp_path / normalization), 1)
        task = TranslationTask()
        metrics = task.validation_metrics(datamodule)
        for h, r in zip(hypotheses, references, strict=True):  # batch by batch, as validation feeds it
            metrics["bleu_tok_lc"].add(task.scoring.statistics([h], [r])["bleu_tok_lc"])
        assert float(metrics["bleu_tok_lc"].compute()) * 100 == pytest.approx(expected, abs=1e-3)
    # a measure a run may keep its best checkpoint by, or stop on
    check_config(compose_train("checkpoint.monitor=val_bleu_tok_lc", "early_stopping.monitor=val_bleu_tok_lc"))


def test_a_lowercase_run_is_tested_evaluated_and_swept_ignoring_case(tmp_path):
    run_dir = tmp_path / "run"
    results = train(
        compose_train(
            "data.tokenizer.normalization=lowercase",
            "trainer.max_epochs=2",
            "validation.bleu_every_n_epochs=1",
            f"run_dir={run_dir}",
        )
    )
    test = results["test"]
    assert "case:lc" in test["bleu_signature"] and "case:lc" in test["chrf_signature"]
    hypotheses = Path(test["hypotheses"]).read_text(encoding="utf-8").splitlines()
    references = Path(test["references"]).read_text(encoding="utf-8").splitlines()
    assert all(h == h.lower() for h in hypotheses)
    assert any(r != r.lower() for r in references)  # the references stay as published
    reference = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
    assert test["bleu"] == pytest.approx(reference.score)

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt_path={results['best_checkpoint']}", f"out_dir={tmp_path / 'eval'}"])
    again = evaluate(cfg)
    assert "case:lc" in again["bleu_signature"]
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["bleu"] == again["bleu"]

    rescored = score_main([test["hypotheses"], test["references"], "--lang", "de", "--bootstrap", "0"])
    assert rescored["bleu"] == test["bleu"] and "case:lc" in rescored["bleu_signature"]  # from metrics.json

    record = run_record(run_dir, {"pos": "absolute"}, seed=1)
    assert record["lowercase"] is True
    # which lowercased tokenised BLEU the run's scores are: in results.json, its final scores and its record
    from nmt.metrics.corpus import tokenized_lowercase_signature

    signature = tokenized_lowercase_signature("de")
    assert results["bleu_tok_lc_signature"] == test["bleu_tok_lc_signature"] == signature
    assert record["bleu_tok_lc_signature"] == signature
    # the validation set decoded as the test is: ignoring case too, and the lowercased tokenised BLEU of its texts
    val = results["val_as_test"]
    assert "case:lc" in val["bleu_signature"]
    val_hypotheses = Path(val["hypotheses"]).read_text(encoding="utf-8").splitlines()
    val_references = Path(val["references"]).read_text(encoding="utf-8").splitlines()
    expected = tokenized_lowercase_bleu(val_hypotheses, val_references, "de")
    assert record["metrics"]["val_as_test_bleu_tok_lc"] == val["bleu_tok_lc"] == pytest.approx(expected, abs=0.01)
    # the shared validation measure, at its best over the run's validations (the CSV log's rows)
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        logged = [float(row["val_bleu_tok_lc"]) for row in csv.DictReader(handle) if row.get("val_bleu_tok_lc")]
    assert len(logged) == 2 and record["metrics"]["best_val_bleu_tok_lc"] == results["best_val_bleu_tok_lc"] == max(
        logged
    )
    stored = store.entry(record, "13a", None)["sentences"]["bleu"]
    scorer = sacrebleu.metrics.BLEU(lowercase=True)
    assert stored == [list(map(int, row)) for row in scorer._extract_corpus_statistics(hypotheses, [references])]


def test_a_sweep_refuses_to_compare_the_bleu_of_lowercase_and_cased_runs(tmp_path):
    """Their test_bleu and best_val_bleu are different measures; test_bleu_tok_lc is shared."""
    records = [
        {"lowercase": lowercase, "metrics": {"test_bleu": 40.0, "best_val_bleu": 39.0, "test_bleu_tok_lc": 40.0}}
        for lowercase in (True, False, False)
    ]
    for metric in ("test_bleu", "best_val_bleu"):
        with pytest.raises(ValueError, match=r"1 of 3 runs write lowercase text.*report_metric=test_bleu_tok_lc"):
            resolve_metric(metric, records)
    assert resolve_metric("test_bleu_tok_lc", records) == "test_bleu_tok_lc"
    assert resolve_metric("test_bleu", records[1:]) == "test_bleu"  # one kind of run: comparable


def test_a_sweep_refuses_to_compare_lowercased_tokenised_bleus_that_tokenised_differently():
    """A run scored before the measure kept hyphens inside words (no signature) against one scored after."""
    from nmt.metrics.corpus import corpus_scores

    signature = corpus_scores(["Ein T-Shirt."], ["Ein T-Shirt."], "de")["bleu_tok_lc_signature"]
    assert "hyphens-kept" in signature and "moses-de" in signature
    records = [
        {"bleu_tok_lc_signature": kind, "metrics": {"test_bleu_tok_lc": 40.0}} for kind in (signature, None, None)
    ]
    with pytest.raises(
        ValueError, match=r"tokenised differently \(1 run: lc\|tok:moses-de-hyphens-kept.*; 2 runs: none"
    ):
        resolve_metric("test_bleu_tok_lc", records)
    assert resolve_metric("test_bleu_tok_lc", records[1:]) == "test_bleu_tok_lc"  # one kind: comparable
    assert resolve_metric("test_bleu_tok_lc", records[:1]) == "test_bleu_tok_lc"
    # one definition under another release of the tokenizer: comparable
    other_release = {**records[0], "bleu_tok_lc_signature": signature.rsplit(":", 1)[0] + ":9.9.9"}
    assert resolve_metric("test_bleu_tok_lc", [records[0], other_release]) == "test_bleu_tok_lc"
    # Chinese was tokenised by sacreBLEU's own tokenizer before and after: an unsigned record is today's kind
    from nmt.metrics.corpus import tokenized_lowercase_signature, unsigned_tokenized_lowercase_signature

    assert unsigned_tokenized_lowercase_signature("de") is None
    assert (
        unsigned_tokenized_lowercase_signature("zh")
        == tokenized_lowercase_signature("zh")
        == (corpus_scores(["你好"], ["你好"], "zh")["bleu_tok_lc_signature"])
    )


def test_tuning_refuses_to_rank_lowercase_and_cased_candidates_and_names_a_validation_measure(monkeypatch):
    """Tuning chooses on validation data, so its way out is the validation measure both kinds share, never a
    test score."""
    from nmt.sweep import tuning, tuning_sweep

    runs = ((True, "lowercase", 39.0), (False, "identity", 38.0))
    key = "data.tokenizer.normalization"
    records = [
        {"lowercase": lc, "factors": {"optim": "adam", key: name}, "metrics": {"best_val_bleu": value}, "seed": 1}
        for lc, name, value in runs
    ]
    monkeypatch.setattr(tuning_sweep, "collect_records", lambda sweep_dir: records)
    monkeypatch.setattr(tuning_sweep, "held_level", lambda sweep_dir, key: "adam")
    monkeypatch.setattr(tuning, "own_held", lambda sweep_dir, key, level: [])  # no multirun.yaml here
    # its candidates are a data setting, which tune refuses as a level's (the measure is what is tested here)
    monkeypatch.setattr(tuning, "only_own_swept", lambda *args: None)
    with pytest.raises(ValueError, match=r"1 of 2 runs write lowercase text") as raised:
        tuning.tune(["sweeps/tune_case"], "optim")
    assert "--metric best_val_bleu_tok_lc" in str(raised.value) and "val_as_test_bleu_tok_lc" in str(raised.value)
    assert not re.search(r"\btest_", str(raised.value))  # no test measure suggested
    for record, shared in zip(records, (40.1, 40.3), strict=True):
        record["metrics"]["best_val_bleu_tok_lc"] = shared
    settings, *_ = tuning.tune(["sweeps/tune_case"], "optim", "best_val_bleu_tok_lc")  # the measure both share
    assert settings == {"optim": {"adam": ["data.tokenizer.normalization=identity"]}}
    for record, cased, shared in zip(records, (41.0, 39.0), (40.2, 40.0), strict=True):  # the final models'
        record["metrics"].update(val_as_test_bleu=cased, val_as_test_bleu_tok_lc=shared)
    with pytest.raises(ValueError, match=r"1 of 2 runs write lowercase text"):
        tuning.tune(["sweeps/tune_case"], "optim", "val_as_test_bleu")
    settings, *_ = tuning.tune(["sweeps/tune_case"], "optim", "val_as_test_bleu_tok_lc")
    assert settings == {"optim": {"adam": ["data.tokenizer.normalization=lowercase"]}}
    without = {**records[0], "metrics": {"best_val_bleu": 40.0}, "run_dir": "/s/no_val_decode"}
    monkeypatch.setattr(tuning_sweep, "collect_records", lambda sweep_dir: [*records, without])
    with pytest.raises(ValueError, match=r"no_val_decode\): .*\(val_after_training=false\)"):
        tuning.tune(["sweeps/tune_case"], "optim", "val_as_test_bleu_tok_lc")
    monkeypatch.setattr(tuning_sweep, "collect_records", lambda sweep_dir: records)
    # a finished run without the measure (an earlier version's) is named, not silently left out
    older = {"lowercase": True, "factors": {"optim": "adam", key: "lowercase"}, "metrics": {"best_val_bleu": 41.0}}
    older["seed"] = 1
    monkeypatch.setattr(tuning_sweep, "collect_records", lambda sweep_dir: [*records, {**older, "run_dir": "/s/old"}])
    with pytest.raises(ValueError, match=r"1 of 3 finished runs have no best_val_bleu_tok_lc \(old\)"):
        tuning.tune(["sweeps/tune_case"], "optim", "best_val_bleu_tok_lc")
    monkeypatch.setattr(tuning_sweep, "collect_records", lambda sweep_dir: records[1:])  # one kind: ranked
    settings, *_ = tuning.tune(["sweeps/tune_case"], "optim")
    assert settings == {"optim": {"adam": ["data.tokenizer.normalization=identity"]}}
