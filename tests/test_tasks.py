"""Tasks: a new task is one module and one config file; nothing outside the tasks asks which task runs."""

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from torch import nn
from torchmetrics import SumMetric

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from nmt.decoding.search import decode
from nmt.decoding.settings import SearchConfig
from nmt.decoding.translate import translate_lines
from nmt.evaluation.evaluate import evaluate
from nmt.sweep.records import run_record
from nmt.tasks import Task, build_task, task_config
from nmt.tasks.language_model import LanguageModelTask
from nmt.tasks.summarization import SummarizationTask
from nmt.tasks.translation import TranslationTask
from nmt.tasks.transliteration import TransliterationTask
from nmt.training.train import train
from nmt.utils.io import atomic_write_json

from .conftest import CONF, ROOT, compose_train, tiny_overrides


class ExactMatchTask(Task):
    """A task the project does not have: sentence pairs scored by the percentage of outputs that equal
    their reference exactly (validation and test), ranked by that in sweeps."""

    name = "exact_match"
    report_metric = "test_exact"

    def validation_metric_names(self):  # what checkpoint.monitor may name, checked before any data is read
        return {"val_exact"}

    def training_loss(self, model, loss, batch):
        value, _, tokens = loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"])
        return value, tokens

    def validation_metrics(self, datamodule):
        return nn.ModuleDict({"exact": SumMetric(), "sentences": SumMetric()})

    def validation_step(self, module, batch, batch_idx):
        outputs = decode(module.model, batch["src"], BOS_ID, EOS_ID, SearchConfig(strategy="greedy"))
        hypotheses = [module.tgt_tokenizer.decode(ids) for ids in outputs]
        module.val_metrics["exact"].update(sum(h == r for h, r in zip(hypotheses, batch["refs"], strict=True)))
        module.val_metrics["sentences"].update(len(hypotheses))

    def validation_epoch_end(self, module):
        exact, sentences = module.val_metrics["exact"].compute(), module.val_metrics["sentences"].compute()
        module.log("val_exact", 100 * exact / sentences.clamp(min=1))

    def batch_sequences(self, batch):
        return batch["src"].size(0)

    def batch_target_tokens(self, batch):
        return int((batch["tgt_out"] != PAD_ID).sum())

    def final_tag(self, cfg, split, average_last):
        return f"{split}_exact"

    def final_score(self, loaded, cfg, split, out_dir, attention_maps=()):
        datamodule = self.build_datamodule(loaded.config["data"], loaded.config["cache_dir"], loaded.config["seed"])
        sources, references = datamodule.text(split)
        search = SearchConfig(strategy="greedy")
        hypotheses = translate_lines(loaded.model, loaded.src_tokenizer, loaded.tgt_tokenizer, sources, search)
        (Path(out_dir) / "hypotheses.txt").parent.mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "hypotheses.txt").write_text("".join(h + "\n" for h in hypotheses))
        (Path(out_dir) / "references.txt").write_text("".join(r + "\n" for r in references))
        exact = 100 * sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
        result = {"exact": exact, "sentences": len(references), "hypotheses": str(Path(out_dir) / "hypotheses.txt")}
        atomic_write_json(Path(out_dir) / "metrics.json", result)
        return result

    def evaluate(self, cfg, load):
        loaded = load()
        return self.final_score(loaded, cfg, "test", cfg.out_dir or loaded.run_dir / "eval" / "test_exact")

    def sweep_metrics(self, results):  # given {} before any run: every name, None (the sweep checks them)
        return {
            "test_exact": (results.get("test") or {}).get("exact"),
            "val_as_test_exact": (results.get("val_as_test") or {}).get("exact"),
            "best_val_exact": results.get("best_val_exact"),
        }


TASK_YAML = """# @package _global_
task:
  _target_: tests.test_tasks.ExactMatchTask
checkpoint:
  monitor: val_exact
  mode: max
early_stopping:
  monitor: val_exact
  mode: max
"""


@pytest.mark.slow
def test_a_task_defined_in_one_module_and_one_config_file_trains_evaluates_and_reports(tmp_path):
    """The task above plus conf/task/exact_match.yaml (in a folder of its own, added to Hydra's search
    path): train.py's function trains and tests it, evaluate.py's scores its checkpoint, and a sweep
    records its metric, with no other change anywhere."""
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "exact_match.yaml").write_text(TASK_YAML)
    run_dir = tmp_path / "run"
    overrides = [*tiny_overrides(), "task=exact_match", "trainer.max_epochs=2", f"run_dir={run_dir}"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])
    results = train(cfg)

    saved = OmegaConf.load(run_dir / "config.yaml")
    assert saved.task._target_ == "tests.test_tasks.ExactMatchTask"
    assert "val_exact" in results["final_metrics"] and results["best_val_exact"] is not None
    for split, key in (("val", "val_as_test"), ("test", "test")):  # the final model scored on both, by the task
        hypotheses = (run_dir / "eval" / f"{split}_exact" / "hypotheses.txt").read_text().splitlines()
        references = (run_dir / "eval" / f"{split}_exact" / "references.txt").read_text().splitlines()
        assert results[key]["exact"] == pytest.approx(
            100 * sum(h == r for h, r in zip(hypotheses, references, strict=True)) / len(references)
        )

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        eval_cfg = compose(
            "evaluate", overrides=[f"ckpt_path={results['best_checkpoint']}", f"out_dir={tmp_path / 'eval'}"]
        )
    assert evaluate(eval_cfg)["exact"] == pytest.approx(results["test"]["exact"])
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["sentences"] == len(references)

    record = run_record(run_dir, {"pos": "absolute"}, seed=1)
    assert record["report_metric"] == "test_exact"
    assert record["metrics"] == {
        "test_exact": results["test"]["exact"],
        "val_as_test_exact": results["val_as_test"]["exact"],
        "best_val_exact": results["best_val_exact"],
    }


def test_the_example_task_declares_what_it_logs_and_records_so_mistakes_are_refused_before_training(tmp_path):
    """What a new task declares, docs/tasks.md's checklist: its validation metrics (a misspelt monitor is then
    refused before any data is read, not by Lightning after the first epoch) and, given no results, the names
    a sweep may rank by (its report_metric among them)."""
    from nmt.training.config import ConfigError, check_config

    task = ExactMatchTask()
    assert task.sweep_metrics({}) == dict.fromkeys(["test_exact", "val_as_test_exact", "best_val_exact"])
    assert task.report_metric in task.sweep_metrics({})
    (tmp_path / "conf" / "task").mkdir(parents=True)
    (tmp_path / "conf" / "task" / "exact_match.yaml").write_text(TASK_YAML)
    overrides = [*tiny_overrides(), "task=exact_match", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        check_config(compose("train", overrides=overrides))
        misspelt = compose("train", overrides=[*overrides, "checkpoint.monitor=val_exac"])
    with pytest.raises(ConfigError, match=r"checkpoint.monitor='val_exac': task=exact_match logs \['val_exact'\]"):
        check_config(misspelt)


def test_a_decoding_grid_for_a_task_whose_own_score_it_cannot_compute_asks_for_select_by():
    """evaluate.py's grid chose by the task's report metric and, for a task ranking by a score of its own,
    said "select_by=exact: not a score", naming an option that was never given."""
    from nmt.evaluation.grid import choose_by

    given = OmegaConf.create({"select_by": None, "rouge": None})
    asked = r"^a decoding grid chooses by select_by, by default the score task=exact_match ranks by \(test_exact\)"
    with pytest.raises(ValueError, match=rf"{asked}, .*; give select_by=bleu\|bleu_tok_lc\|chrf$"):
        choose_by(given, ExactMatchTask())
    assert choose_by(OmegaConf.merge(given, {"select_by": "chrf"}), ExactMatchTask()) == "chrf"
    assert choose_by(given, TranslationTask()) == "bleu"


def test_evaluate_options_a_task_does_not_read_are_refused_without_it_naming_them():
    """Each task refused the other tasks' evaluate.py options by name: a new task refused none (evaluate.py
    prompt=... on its checkpoint scored the test set and said nothing of the prompt)."""
    from nmt.tasks.base import TASK_OPTIONS

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        given = compose("evaluate", overrides=["ckpt_path=x"])
    ExactMatchTask().check_evaluation(given)  # evaluate.yaml's own values: nothing given
    for key in TASK_OPTIONS:
        value = {"samples": 3, "num_samples": 2, "data.columns": [1, 0]}.get(key, "a.txt")
        with pytest.raises(ValueError, match=rf"^{re.escape(key)}=.*, which task=exact_match does not read; leave it"):
            ExactMatchTask().check_evaluation(OmegaConf.merge(given, OmegaConf.from_dotlist([f"{key}={value}"])))
    # every option is read by some task, and every task refuses what it does not read
    tasks = [TranslationTask(), LanguageModelTask(), SummarizationTask(), TransliterationTask()]
    assert set().union(*(task.evaluation_options for task in tasks)) == set(TASK_OPTIONS)
    with pytest.raises(ValueError, match=r"^prompt='the': a text a language model continues, which task=translation"):
        TranslationTask().check_evaluation(OmegaConf.merge(given, {"prompt": "the"}))


KNOWN_TASKS = {
    "translation": TranslationTask,
    "lm": LanguageModelTask,
    "summarization": SummarizationTask,
    "transliteration": TransliterationTask,
}


@pytest.mark.parametrize("option", sorted(path.stem for path in (CONF / "task").glob("*.yaml")))
def test_each_task_option_builds_its_task(option):
    """Every conf/task/ file, a new task's too: it builds, is named as its option (messages say task=<name>),
    declares what a sweep records (its report_metric among them), and is rebuilt from a saved config."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={option}", "name=test"])
    task = build_task(cfg.task)
    assert type(task) is KNOWN_TASKS.get(option, type(task)) and task.name == option
    assert task.report_metric in task.sweep_metrics({})
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert type(build_task(task_config(resolved))) is type(task)  # as a checkpoint's saved config rebuilds it


@pytest.mark.parametrize("option", sorted(path.stem for path in (CONF / "task").glob("*.yaml")))
def test_each_task_option_watches_and_ranks_its_metric_the_way_it_improves(option):
    """A conf/task/ file's checkpoint and early-stopping modes against their metrics' direction (the run's
    config check refuses a mismatch, but only once a run starts), and the sweep's report_metric ranked the way
    the checkpoints are chosen: the report reads the direction from the name alone, so a lower-is-better score
    named without a suffix of LOWER_IS_BETTER (test_char_errors) would rank its worst cell first."""
    from nmt.metrics import lower_is_better
    from nmt.training.config_task import mode_problems

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"task={option}", "name=test", "early_stopping.patience=3"])
    for section in ("checkpoint", "early_stopping"):
        assert mode_problems(cfg, section, cfg[section].monitor) == []
    task = build_task(cfg.task)
    assert lower_is_better(task.report_metric) == (cfg.checkpoint.mode == "min"), (
        f"task={option} ranks sweeps by {task.report_metric} "
        f"({'lower' if lower_is_better(task.report_metric) else 'higher'} first) but keeps the checkpoint of "
        f"{cfg.checkpoint.mode} {cfg.checkpoint.monitor}"
    )


@pytest.mark.parametrize(
    ("saved", "task_class", "rouge"),
    [
        ({"task": "translation", "rouge": False}, TranslationTask, False),
        ({"task": "translation", "rouge": True}, TranslationTask, True),
        ({"task": "lm"}, LanguageModelTask, None),
        ({}, TranslationTask, False),
    ],
)
def test_configs_saved_before_tasks_were_objects_still_build_their_task(saved, task_class, rouge):
    config = {**saved, "validation": {"search": {"strategy": "greedy"}, "bleu_every_n_epochs": 2}}
    task = build_task(task_config(config))
    assert type(task) is task_class
    if rouge is not None:
        assert task.rouge is rouge and task.bleu_every_n_epochs == 2


def test_a_saved_config_with_an_unknown_task_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"task='mt'.*\['lm', 'translation'\]"):
        task_config({"task": "mt"})


# a comparison of a task's name with a string: `task == "lm"`, `cfg.task != 'translation'`, `"lm" == task`
TASK_NAME_TEST = re.compile(r"""task\w*(\.name)?\s*[!=]=\s*["']|["'](lm|translation|summarization)["']\s*[!=]=""")


def test_no_code_outside_the_tasks_compares_a_task_name_with_a_string():
    offenders = []
    for path in sorted((ROOT / "nmt").rglob("*.py")):
        if "tasks" in path.relative_to(ROOT / "nmt").parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if TASK_NAME_TEST.search(line) or re.search(r"""in \(["'](lm|translation)["']""", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_layers_reach_tasks_only_through_their_interface():
    """Training, evaluation, inference and sweeps import nmt.tasks (the interface and its builder, and the rules
    of where evaluations write, which every task shares), never a particular task's module."""
    offenders = []
    for room in ("training", "evaluation", "inference", "sweep"):
        for path in sorted((ROOT / "nmt" / room).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if re.match(r"\s*(from|import) nmt\.tasks\.(?!base\b|eval_folders\b)\w+", line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_a_task_says_which_checkpoint_metric_needs_decoded_epochs():
    assert "val_bleu" in TranslationTask.decoded_metrics and "val_rougeL" in TranslationTask.decoded_metrics
    assert LanguageModelTask.decoded_metrics == ()


def test_a_translation_subclass_must_declare_the_scores_it_logs_only_when_decoding():
    """A new task's val_exact, logged by log_decoded_metrics but left out of decoded_metrics: the config check
    let it through, and a checkpoint monitoring it failed in Lightning's words after the first epoch that did
    not decode (data=toy decodes every third)."""

    class Correction(TranslationTask):
        name = "correction"

        def validation_metric_names(self):
            return {*super().validation_metric_names(), "val_exact", "val_wer"}

    cfg = compose_train()
    problems = Correction().check(cfg)
    assert problems == [
        "  task=correction: val_exact, val_wer are in neither decoded_metrics (logged on epochs that decode: "
        "validation.bleu_every_n_epochs) nor every_epoch_metrics (logged at every validation): add them to the one "
        "that holds"
    ]
    Correction.every_epoch_metrics = TranslationTask.every_epoch_metrics | {"val_wer"}  # a score of every epoch
    assert "  task=correction: val_exact is in neither decoded_metrics" in Correction().check(cfg)[0]
    Correction.every_epoch_metrics = TranslationTask.every_epoch_metrics
    Correction.decoded_metrics = (*TranslationTask.decoded_metrics, "val_exact", "val_wer")
    assert Correction().check(cfg) == []
    for task in (TranslationTask(), SummarizationTask(), TransliterationTask()):  # the project's own: complete
        assert not [p for p in task.check(cfg) if "decoded_metrics" in p]


def _metric(value):
    return SimpleNamespace(compute=lambda: torch.tensor(value))


def test_each_decoded_validation_score_is_logged_under_its_own_name():
    """Metrics with distinct values (bleu 0.1, chrf 0.2, bleu_tok_lc 0.3, fractions as SacreScore gives them):
    val_bleu must be 10, val_chrf 20, val_bleu_tok_lc 30 (kills translation.py logging one metric under another
    name, which the lowercase toy run cannot see: its BLEU and tokenised-lowercase BLEU coincide)."""
    from nmt.tasks.translation import TranslationTask

    task = TranslationTask()
    logged = {}
    module = SimpleNamespace(
        val_metrics={
            "tokens": _metric(4.0),
            "nll": _metric(4.0),
            "correct": _metric(2.0),
            "bleu": _metric(0.1),
            "chrf": _metric(0.2),
            "bleu_tok_lc": _metric(0.3),
        },
        log=lambda name, value, **kw: logged.__setitem__(name, float(value)),
        trainer=SimpleNamespace(sanity_checking=False),
        current_epoch=0,
        loggers=[],
    )
    task.validation_epoch_end(module)
    assert logged["val_bleu"] == pytest.approx(10) and logged["val_chrf"] == pytest.approx(20)
    assert logged["val_bleu_tok_lc"] == pytest.approx(30)


def test_the_recorded_best_validation_tokenised_bleu_is_that_columns_maximum(tmp_path):
    """A log where val_bleu and val_bleu_tok_lc differ: best_val_bleu_tok_lc is max of its own column, 31.0
    (kills translation.py reading the best of val_bleu instead)."""
    from nmt.tasks.translation import TranslationTask

    log = tmp_path / "metrics.csv"
    with open(log, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["step", "val_bleu", "val_bleu_tok_lc"], [1, 20.0, 25.0], [2, 27.0, 31.0], [3, 26.0, 30.0]])
    assert TranslationTask().results_from_log(log)["best_val_bleu_tok_lc"] == 31.0


def test_outputs_files_stay_line_aligned_when_a_source_holds_a_newline(tmp_path):
    """A source document holding a line break (a summarisation article) is written as one line, so that
    sources.txt, references.txt and hypotheses.txt have one line per sentence each (kills translation_eval.py
    writing sources unjoined)."""
    from nmt.tasks.translation_eval import write_outputs

    paths = write_outputs(tmp_path, ["first para\nsecond para", "two"], ["r1", "r2"], ["h1", "h2"])
    lines = {name: open(path, encoding="utf-8").read().splitlines() for name, path in paths.items()}
    assert lines["sources"] == ["first para second para", "two"]
    assert len(lines["sources"]) == len(lines["references"]) == len(lines["hypotheses"]) == 2
