"""task=transliteration: CER and word accuracy (against an edit distance written out here), lower-is-better CER
for checkpoints, early stopping, a sweep's ranking and tune's default metric."""

import json
from types import SimpleNamespace

import pytest
from hydra import compose, initialize_config_dir

from nmt.metrics import lower_is_better, metric_range
from nmt.sweep.records import RESULT, run_record
from nmt.tasks import build_task
from nmt.tasks.transliteration import TransliterationTask, transliteration_scores

from .conftest import CONF, tiny_overrides


def levenshtein(a, b) -> int:
    """Edits turning sequence a into b: characters of strings, tokens of lists."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


@pytest.mark.parametrize(
    ("hypotheses", "references"),
    [
        (["kitten", "abc"], ["sitting", "abd"]),
        (["шыюрелёв", "", "zafar ben"], ["шырювёв", "хоцен", "zafar"]),  # a deletion of all, insertions past 100
        (["aaaaaaaa"], ["a"]),
    ],
)
def test_cer_is_the_summed_edit_distance_over_the_references_characters(hypotheses, references):
    scores = transliteration_scores(hypotheses, references)
    edits = sum(levenshtein(h, r) for h, r in zip(hypotheses, references, strict=True))
    chars = sum(len(r) for r in references)
    assert scores["cer"] == pytest.approx(100 * edits / chars)
    assert (scores["char_edits"], scores["reference_chars"]) == (edits, chars)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    assert scores["word_acc"] == pytest.approx(100 * exact / len(references))


@pytest.mark.parametrize(
    ("hypotheses", "references"),
    [
        (["K AE1 T", "D AA1 G Z", ""], ["K AE1 T S", "D AO1 G", "R IY1 D"]),  # a deletion, substitutions, all deleted
        (["HH AH0  L OW1", "AH0 AH0 AH0 AH0"], ["HH AH0 L OW1", "AH0"]),  # two spaces split as one; insertions
    ],
)
def test_wer_is_the_summed_token_edit_distance_over_the_references_tokens(hypotheses, references):
    # phonemes with spaces between them: G2P's phoneme error rate
    scores = transliteration_scores(hypotheses, references)
    edits = sum(levenshtein(h.split(), r.split()) for h, r in zip(hypotheses, references, strict=True))
    tokens = sum(len(r.split()) for r in references)
    assert scores["wer"] == pytest.approx(100 * edits / tokens)
    assert (scores["token_edits"], scores["reference_tokens"]) == (edits, tokens)


def test_cer_falls_and_word_accuracy_rises_as_they_improve():
    assert lower_is_better("test_cer") and lower_is_better("val_cer") and lower_is_better("best_val_cer")
    assert lower_is_better("test_wer") and lower_is_better("best_val_wer")
    assert not lower_is_better("test_word_acc")
    assert metric_range("test_cer") == (0.0, float("inf"))  # insertions take CER past 100
    assert metric_range("val_as_test_word_acc") == (0.0, 100.0)  # a percentage, not val_acc's fraction


def test_the_task_config_monitors_cer_downwards_and_ranks_by_it():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["task=transliteration", "name=test"])
    task = build_task(cfg.task)
    assert isinstance(task, TransliterationTask) and task.report_metric == "test_cer"
    assert cfg.checkpoint.monitor == cfg.early_stopping.monitor == "val_cer"
    assert cfg.checkpoint.mode == cfg.early_stopping.mode == "min"
    assert {"val_cer", "val_wer", "val_word_acc"} <= task.validation_metric_names()
    names = task.sweep_metrics({})
    assert {"test_cer", "test_wer", "test_word_acc", "val_as_test_cer", "best_val_cer", "best_val_wer"} <= set(names)
    assert all(value is None for value in names.values())


def test_checkpoints_on_cer_the_wrong_way_are_refused_before_any_data_is_read():
    from nmt.training.config import ConfigError, check_config

    overrides = [*tiny_overrides(), "task=transliteration"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        wrong = compose("train", overrides=[*overrides, "checkpoint.mode=max"])
        undecoded = compose("train", overrides=[*overrides, "validation.bleu_every_n_epochs=0"])
    with pytest.raises(ConfigError, match=r"checkpoint.mode=max: checkpoint.monitor=val_cer is better lower"):
        check_config(wrong)
    with pytest.raises(ConfigError, match=r"validation.bleu_every_n_epochs=0: transliteration picks"):
        check_config(undecoded)


def test_a_transliteration_run_scores_cer_and_word_accuracy_and_a_sweep_records_them(tmp_path, capsys):
    from nmt.evaluation.evaluate import evaluate
    from nmt.sweep.tuning import default_metric
    from nmt.training.train import train

    run_dir = tmp_path / "sweep" / "run1"
    overrides = [
        *tiny_overrides(),
        "task=transliteration",
        "trainer.max_epochs=2",
        "validation.bleu_every_n_epochs=1",
        f"run_dir={run_dir}",
    ]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        results = train(compose("train", overrides=overrides))
    assert results["best_val_cer"] == min(
        float(row.split(",")[header.index("val_cer")])
        for lines in [(run_dir / "logs" / "metrics.csv").read_text().splitlines()]
        for header in [lines[0].split(",")]
        for row in lines[1:]
        if row.split(",")[header.index("val_cer")]
    )
    folder = run_dir / "eval" / "test_beam5"
    hypotheses = (folder / "hypotheses.txt").read_text().splitlines()
    references = (folder / "references.txt").read_text().splitlines()
    expected = transliteration_scores(hypotheses, references)
    assert results["test"]["cer"] == pytest.approx(expected["cer"])
    assert results["test"]["wer"] == pytest.approx(expected["wer"])
    assert json.loads((folder / "metrics.json").read_text())["word_acc"] == results["test"]["word_acc"]
    # validation logged the token error rate beside CER, its best in results.json
    log = (run_dir / "logs" / "metrics.csv").read_text().splitlines()
    column = log[0].split(",").index("val_wer")
    logged = [float(row.split(",")[column]) for row in log[1:] if row.split(",")[column]]
    assert logged and results["best_val_wer"] == min(logged)
    # the saved outputs rescored as the final scores were (it gave BLEU and chrF alone)
    from nmt.evaluation.score import main as score

    rescored = score(
        [str(folder / "hypotheses.txt"), str(folder / "references.txt"), "--lang", "en", "--bootstrap", "0"]
    )
    assert rescored["cer"] == results["test"]["cer"] and rescored["word_acc"] == results["test"]["word_acc"]
    assert rescored["wer"] == results["test"]["wer"]

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        eval_cfg = compose(
            "evaluate", overrides=[f"ckpt_path={results['best_checkpoint']}", f"out_dir={tmp_path / 'e'}"]
        )
    assert evaluate(eval_cfg)["cer"] == pytest.approx(results["test"]["cer"])
    # a decoding grid ranks by the task's own score, the lowest CER first (it chose by BLEU alone, refusing cer)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        grid_cfg = compose(
            "evaluate",
            overrides=[
                f"ckpt_path={results['best_checkpoint']}",
                f"out_dir={tmp_path / 'g'}",
                "decode.beam_size=[1,2]",
                "split=val",
            ],
        )
    capsys.readouterr()
    grid = evaluate(grid_cfg)
    assert grid["select_by"] == "cer" and grid["best_score"] == min(row["scores"]["cer"] for row in grid["rows"])
    # the choice flatters the chosen CER downwards (it said "upward", as of BLEU)
    assert "The chosen setting's own score is biased downward by the choice" in capsys.readouterr().err

    record = run_record(run_dir, {}, seed=1)
    assert record["report_metric"] == "test_cer" and record["metrics"]["test_cer"] == results["test"]["cer"]
    (run_dir / RESULT).write_text(json.dumps(record))  # as a sweep records the finished run
    assert default_metric([tmp_path / "sweep"]) == "best_val_cer"  # sweep.py tune's choice: not best_val_bleu


def test_validation_logs_the_scores_the_final_evaluation_computes():
    task = TransliterationTask()
    datamodule = SimpleNamespace(tgt_lang="en", build_tokenizers=lambda: (None, SimpleNamespace(lowercases=False)))
    metrics = task.validation_metrics(datamodule)
    batches = [(["kitten", "abc"], ["sitting", "abc"]), (["", "zafar ben", "x"], ["hoc", "zafar", "x"])]
    for hypotheses, references in batches:
        task.update_decoded_metrics(metrics, hypotheses, references)
    logged = {}
    task.log_decoded_metrics(
        SimpleNamespace(log=lambda name, value, **_: logged.__setitem__(name, float(value))), metrics
    )
    expected = transliteration_scores(*(sum(side, []) for side in zip(*batches, strict=True)))
    assert expected["word_acc"] == pytest.approx(40.0)  # "abc" and "x" of 5
    for key in ("cer", "wer", "word_acc"):
        assert logged[f"val_{key}"] == pytest.approx(expected[key], rel=1e-6), key
