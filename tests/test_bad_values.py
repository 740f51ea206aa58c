"""Values of the wrong kind or range, each refused in one line naming its key before anything is read or
trained (a review fed each command bad input; these were accepted, trained wrongly, or a traceback)."""

import pytest
from omegaconf import OmegaConf

from nmt.cli import unknown_key_message
from nmt.evaluation.evaluate import check_scoring_options
from nmt.inference.export import run_export
from nmt.inference.loading import resolve_checkpoint_path
from nmt.sweep.levels import level_overrides, level_settings_problem, plain_settings
from nmt.tasks.translation import TranslationTask
from nmt.training.config import ConfigError, check_config

from .conftest import compose_train


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # a negative floor made the rate negative: the run trained away from the data and ended as usual
        (["optim=adamw", "optim.scheduler.decay=linear", "optim.scheduler.min_ratio=-1"], "min_ratio=-1: must be"),
        (["optim=adamw", "optim.scheduler.min_ratio=5"], "optim.scheduler.min_ratio=5: must be a number in [0, 1]"),
        (["optim=adam", "optim.optimizer.lr=-1"], "optim.optimizer.lr=-1: must be a positive finite number"),
        (["optim.optimizer.betas=[2,3]"], "optim.optimizer.betas=[2, 3]: must be two numbers in [0, 1)"),
        (["optim.optimizer.eps=-1"], "optim.optimizer.eps=-1: must be a number >= 0"),
        (["trainer.val_check_interval=0"], "trainer.val_check_interval=0: must be a positive number of batches"),
        (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0: must be a positive integer"),
        (["trainer.limit_train_batches=0"], "trainer.limit_train_batches=0: must be a positive number of batches"),
        (["checkpoint.every_n_train_steps=abc"], "checkpoint.every_n_train_steps='abc': must be an integer >= 0"),
        (["data.tokenizer.character_coverage=2"], "data.tokenizer.character_coverage=2: must be a number in (0, 1]"),
    ],
)
def test_optimiser_schedule_and_trainer_values_are_checked_before_any_data(overrides, message):
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train(*overrides))
    assert message in str(refused.value)


def test_the_good_values_of_those_keys_pass():
    check_config(
        compose_train(
            "optim=adamw",
            "optim.scheduler.decay=cosine",
            "optim.scheduler.min_ratio=0.1",
            "trainer.val_check_interval=0.5",
        )
    )
    check_config(compose_train("trainer.val_check_interval=20", "trainer.check_val_every_n_epoch=null"))
    check_config(compose_train("checkpoint.every_n_train_steps=50", "trainer.limit_train_batches=0.25"))
    check_config(compose_train("checkpoint.every_n_train_steps=0"))  # 0: off
    check_config(compose_train("trainer.val_check_interval=00:00:05:00"))  # validation on the clock (Lightning's)
    cfg = compose_train("trainer.val_check_interval={minutes: 5}")
    assert cfg.trainer.val_check_interval.minutes == 5
    check_config(cfg)
    # the edges of the ranges: 1.0 is the whole epoch to Lightning, a range may be one length wide, and the
    # validation set alone may be scored from the averaged weights
    check_config(compose_train("trainer.limit_train_batches=1.0", "trainer.val_check_interval=1.0"))
    check_config(compose_train("data=toy", "data.min_words=3", "data.max_words=3"))
    check_config(
        compose_train(
            "test_average_last=2",
            "checkpoint.keep_last_epochs=2",
            "val_after_training=true",
            "test_after_training=false",
        )
    )


def test_a_key_that_takes_its_value_from_another_is_said_once():
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("optim=adamw", "lr=-1"))  # optim.optimizer.lr: ${lr}
    assert str(refused.value).count("must be a positive finite number") == 1, refused.value


def test_a_switch_given_a_word_is_refused_a_key_whose_words_are_its_values_is_not():
    """Hydra keeps joint=no as the string 'no', which is true to an if: one joint vocabulary was trained."""
    assert unknown_key_message(["data=toy", "data.tokenizer.joint=no"], "train") == (
        "error: data.tokenizer.joint=no (on the command line): 'no' is read as a word (true to an if), not as a "
        "switch; give true or false"
    )
    assert "'off' is read as a word" in unknown_key_message(["test_after_training=off"], "train")
    assert "'no' is read as a word" in unknown_key_message(["grid=none", "val_after_training=true,no"], "sweep")
    assert "'off' is read as a word" in unknown_key_message(["++test_after_training=off"], "train")
    assert unknown_key_message(["compile=layers", "data.tokenizer.joint=false"], "train") is None
    assert "'No' is read as a word" in unknown_key_message(["data=toy", "data.tokenizer.joint=No"], "train")
    assert unknown_key_message(["data=files", "data.src_lang=no"], "train") is None  # Norwegian, not a switch
    # a key whose default interpolates Hydra's runtime (name), which the check composes without: no error
    assert unknown_key_message(["name=test", "data=toy", "threads=1"], "train") is None


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"split": 5}, "split=5: not the name of a set"),
        ({"split": []}, "split=[]: names no set to score"),
        # decoded twice into one folder, listed twice in the table of every set
        ({"split": ["test", "val", "test"]}, "split=['test', 'val', 'test']: test given twice; name each set once"),
        ({"rouge": "no"}, "rouge='no': give true, false or null"),
        ({"attention_maps": "abc"}, "attention_maps='abc': a list of sentence indices"),
    ],
)
def test_evaluate_refuses_scoring_options_of_the_wrong_kind(option, message):
    cfg = OmegaConf.create({"split": "test", "rouge": None, "attention_maps": [], "out_dir": None, **option})
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_scoring_options(cfg)


def test_evaluate_refuses_a_file_as_out_dir_before_decoding(tmp_path):
    (tmp_path / "f").write_text("x")
    cfg = OmegaConf.create({"split": ["val", "test"], "rouge": True, "attention_maps": [0], "out_dir": str(tmp_path)})
    check_scoring_options(cfg)
    cfg.out_dir = str(tmp_path / "f")
    with pytest.raises(ValueError, match="a file is there; give a folder"):
        check_scoring_options(cfg)


def test_a_run_folder_named_by_digits_is_found(tmp_path, monkeypatch):
    (tmp_path / "2016" / "checkpoints").mkdir(parents=True)
    (tmp_path / "2016" / "checkpoints" / "best.ckpt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint_path(2016) == tmp_path.joinpath("2016", "checkpoints", "best.ckpt").relative_to(tmp_path)


def test_validation_search_values_are_named_as_validation_search():
    with pytest.raises(ValueError, match=r"^validation\.search\.strategy='foo' is not one of"):
        TranslationTask(val_search={"strategy": "foo"})
    with pytest.raises(ValueError, match=r"^validation\.search\.max_len_a=-1 must be a finite number >= 0"):
        TranslationTask(val_search={"strategy": "greedy", "max_len_a": -1})


def test_level_settings_of_the_wrong_shape_are_refused_and_one_setting_needs_no_list():
    levels = {"optim": ["adam", "noam"], "seed": ["1"]}
    for bad in (5, [1], "abc"):
        assert level_settings_problem(bad, levels).startswith(f"level_settings={bad!r}: expected {{key: {{level:")
    one = {"optim": {"noam": "warmup=400"}}  # was walked letter by letter: 'w', 'a', ...
    assert level_settings_problem(one, levels) is None
    assert level_overrides(one, {"optim": "noam"}) == ["warmup=400"]
    assert plain_settings(OmegaConf.create(one)) == {"optim": {"noam": ["warmup=400"]}}  # as plan.json and the report


def test_export_writes_over_no_other_program_s_files(tmp_path):
    (tmp_path / "config.json").write_text('{"mine": 1}')
    cfg = OmegaConf.create({"format": "ctranslate2", "ckpt_path": "x", "out": str(tmp_path), "average_last": 1})
    with pytest.raises(ValueError, match="holds config.json and no nmt_export.json"):
        run_export(cfg)
    assert (tmp_path / "config.json").read_text() == '{"mine": 1}'
    cfg.out = ""
    with pytest.raises(ValueError, match="out is empty"):
        run_export(cfg)


def test_an_empty_list_of_checkpoints_names_the_key():
    from nmt.inference.translator import Translator

    with pytest.raises(ValueError, match=r"^ckpt_path=\[\]: names no checkpoint; give one, or a list of several"):
        Translator.from_checkpoint([])
