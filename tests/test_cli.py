"""The command line: misspelt keys get a suggestion, options the model does not use are refused, and the
default recipe is announced."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from nmt.cli import (
    foreign_group_message,
    hydra_dir_from_run_dir,
    quoted_paths,
    run_dir_message,
    unknown_key_message,
    unknown_option_message,
    unparsable_message,
    user_message,
)
from nmt.training.config import ConfigError, check_config
from nmt.training.config_unread import unused_groups

from .conftest import CONF, NO_FINAL_SCORES, ROOT, compose_train


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (["modle=rnn"], "'model'"),
        (["model.d_modle=64"], "'model.d_model'"),
        (["model=rnn", "model.hiden_size=64"], "'model.hidden_size'"),  # keys of the chosen model
        (["trainer.max_epoch=1"], "'trainer.max_epochs'"),
        (["~warmpu"], "'warmup'"),
    ],
)
def test_a_misspelt_key_gets_the_closest_names(argv, suggestion):
    message = unknown_key_message(argv, "train")
    assert message is not None and suggestion in message and message.count("\n") == 0


def test_a_key_given_under_another_block_is_told_where_it_lives():
    """model.attention_dim was answered "did you mean 'model.attention'?": the key is the additive attention's."""
    message = unknown_key_message(["model=rnn", "model.attention_dim=32"], "train")
    assert "attention_dim is a key of attention=additive (attention.attention_dim)" in message
    assert "did you mean" not in message and message.count("\n") == 0
    # a name the config itself has under another block is that key (the config's own seed, not a grid's)
    assert "did you mean 'seed'" in unknown_key_message(["data.seed=3"], "train")
    assert "did you mean 'model.dropout'?" in unknown_key_message(["data.dropout=0.1"], "train")


def test_a_key_of_swept_models_but_not_of_the_default_one_is_set_with_two_pluses():
    """sweep.py model=rnn,transformer model.hidden_size=32 was Hydra's error (Key 'hidden_size' is not in
    struct): Hydra composes a sweep's config with model=transformer before any level. ``++`` sets it in every
    run, and a level without the key is then refused by the sweep's own check."""
    from hydra import compose, initialize_config_dir

    argv = ["grid=none", "model=rnn,transformer", "model.hidden_size=32"]
    assert unknown_key_message(argv, "sweep") == (
        "error: 'model.hidden_size' (on the command line): a sweep's config is composed first with "
        "model=transformer (the default), which has no such key, and with model=rnn,transformer only after; "
        "write ++model.hidden_size=32 to set it in every run (every level of model must then take it)"
    )
    assert unknown_key_message(["grid=none", "model=rnn", "model.hidden_size=32"], "sweep") is None
    assert unknown_key_message(["grid=none", "model=transformer,rnn", "model.d_model=32"], "sweep") is None
    # either order: a key of the default and of some levels is left to the plan, which names the others
    assert unknown_key_message(["grid=none", "model=rnn,transformer", "model.d_model=32"], "sweep") is None
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("sweep", overrides=["grid=none", "++model.hidden_size=32"])
    assert cfg.model.hidden_size == 32


def test_a_launchers_key_under_another_launcher_names_the_launcher_to_choose(monkeypatch):
    """sweep.py pos=a,b hydra.launcher.n_jobs=2 (no joblib launcher) blamed the comma list for a missing -m;
    with -m, Hydra's five lines named BasicLauncherConf. sweep.py now runs as with -m, and the key is one line."""
    from nmt.cli import check_command_line, launcher_key_message

    assert launcher_key_message(["hydra.launcher.n_jobs=2", "pos=absolute,rope"]) == (
        "error: 'hydra.launcher.n_jobs' (on the command line) is not a key of hydra/launcher=basic: choose "
        "hydra/launcher=joblib"
    )
    assert launcher_key_message(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]) is None
    assert launcher_key_message(["hydra/launcher=joblib", "hydra.launcher.gpus_per_node=1"]).endswith(
        "is not a key of hydra/launcher=joblib: choose hydra/launcher=submitit_local or hydra/launcher=submitit_slurm"
    )
    # a key under one the launcher has: Hydra's own message (add it with +); a launcher not installed is skipped
    assert launcher_key_message(["hydra/launcher=submitit_slurm", "hydra.launcher.additional_parameters.x=1"]) is None
    monkeypatch.setattr("nmt.cli.sweep_args.LAUNCHERS", ("not_installed", "basic", "joblib"))
    assert launcher_key_message(["hydra.launcher.n_jobs=2"]).endswith("choose hydra/launcher=joblib")
    assert launcher_key_message(["hydra.launcher.gpus_per_node=1"]).endswith("no installed launcher has gpus_per_node")
    monkeypatch.setattr(sys, "argv", ["sweep.py", "grid=none", "pos=absolute,rope"])
    check_command_line("sweep")
    assert sys.argv == ["sweep.py", "-m", "grid=none", "pos=absolute,rope"]
    monkeypatch.setattr(sys, "argv", ["sweep.py", "--cfg", "job"])  # Hydra's own flags are left as given
    check_command_line("sweep")
    assert sys.argv == ["sweep.py", "--cfg", "job"]


def test_a_search_option_validation_does_not_list_is_added_with_a_plus_and_then_read(tmp_path):
    """validation.search lists only what it sets (greedy): a beam size for validation is added with +, as
    the message says, and validation then searches with it."""
    message = unknown_key_message(["validation.search.beam_size=3"], "train")
    assert message == (
        "error: 'validation.search.beam_size' (on the command line): validation.search takes every search "
        "option, but lists only those it sets: add this one with +validation.search.beam_size=... (it applies with "
        "validation.search.strategy=beam)"
    )
    assert "did you mean" in unknown_key_message(["validation.search.beam_sise=3"], "train")
    # the likest name alone where the others are far less like it; a search block is not added to with +
    message = unknown_key_message(["decode.beam_sise=3"], "translate")
    assert "did you mean 'decode.beam_size'? (python translate.py --help lists its keys)" in message, message
    # a program of keys alone (no groups): it advised +zzzz=..., which is then refused as read by nothing
    for program in ("translate", "serve", "export", "evaluate"):
        message = unknown_key_message(["zzzz=3"], program)
        assert message.endswith(f"(python {program}.py --help lists its keys)"), message
    assert "+zzzz=... adds a new key" in unknown_key_message(["zzzz=3"], "train")
    cfg = compose_train("data=toy", "validation.search.strategy=beam", "+validation.search.beam_size=3")
    check_config(cfg)
    from nmt.decoding.settings import SearchConfig

    assert SearchConfig(**cfg.validation.search) == SearchConfig(strategy="beam", beam_size=3)


@pytest.mark.parametrize(
    "argv",
    [
        ["model=rnn", "model.hidden_size=64"],
        ["data=toy", "lr=1e-3", "trainer.max_epochs=2"],
        ["+new_key=1", "hydra.run.dir=x"],  # additions and Hydra's own keys are Hydra's business
        ["pos=absolute,relative", "seed=1,2"],  # sweep lists
        ["model=nonexistent"],  # a bad group option: unknown_option_message's, below
    ],
)
def test_known_keys_pass(argv):
    assert unknown_key_message(argv, "train") is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["pos=rotary"], "error: pos=rotary (on the command line): not an option of group pos; valid: "
         + ", ".join(sorted(f.stem for f in (ROOT / "conf" / "pos").glob("*.yaml")))),
        (["data=toy", "norm=rsm"], "error: norm=rsm (on the command line): not an option of group norm (did you mean "
         "norm=rms?); valid: " + ", ".join(sorted(f.stem for f in (ROOT / "conf" / "norm").glob("*.yaml")))),
        (["-m", "pos=absolute,relatve"], "error: pos=relatve (on the command line): not an option of group pos "
         "(did you mean pos=relative?)"),
        (["+tuned=nothing_tuned"], "error: tuned=nothing_tuned (on the command line): not an option of group tuned"),
        # a setting of an option, given as an option: the README's "GRU/LSTM encoder-decoder" is model=rnn's cell
        (["model=lstm"], "error: model=lstm (on the command line): not an option of group model (model=rnn "
         "model.cell=lstm?); valid: " + ", ".join(sorted(f.stem for f in (CONF / "model").glob("*.yaml")))),
        (["model=gru"], "error: model=gru (on the command line): not an option of group model (model=rnn "
         "model.cell=gru?)"),  # the option's default value too
        # the hint keeps the +
        (["+tuned=factorial_converged_toi"], "error: tuned=factorial_converged_toi (on the command line): not an "
         "option of group tuned (did you mean +tuned=factorial_converged_toy?)"),
        # without the +: Hydra's three lines ("Could not override 'tuned'. No match in the defaults list.")
        (["tuned=factorial_converged_toy"], "error: tuned=factorial_converged_toy (on the command line): no config "
         "chooses a tuned by default, so one is added, not replaced: +tuned=factorial_converged_toy"),
        # Hydra's "Config group override must be a string or a list. Got NoneType", in a traceback
        (["norm=null"], "error: norm=null (on the command line): a group takes one of its options, not null (leave "
         "it out for its default); valid: " + ", ".join(sorted(f.stem for f in (CONF / "norm").glob("*.yaml")))),
        (["-m", "grid=null"], "error: grid=null (on the command line): a group takes one of its options, not null "
         "(grid=none chooses its option none); valid: " + ", ".join(sorted(f.stem for f in CONF.glob("grid/*.yaml")))),
        # one of Hydra's own groups: its report of the search path spanned a screen
        (["-m", "hydra/launcher=jobllib"], "error: hydra/launcher=jobllib (on the command line): not an option of "
         "group hydra/launcher (did you mean hydra/launcher=joblib?)"),  # valid: the launchers installed
    ],
)  # fmt: skip
def test_a_misspelt_group_option_is_one_line_with_the_valid_ones(argv, expected):
    """The valid options are the group's files, whatever a new position encoding or norm adds."""
    message = unknown_option_message(argv)
    assert message.startswith(expected) and "\n" not in message
    assert "valid:" not in expected or message == expected


def test_a_group_option_in_a_folder_added_to_hydras_search_path_is_an_option(tmp_path):
    """task=exact_match from hydra.searchpath=[file://<folder>] composes (tests/test_tasks.py does so), but the
    command line's check, reading conf/ alone, said "not an option of group task"."""
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "exact_match.yaml").write_text("# @package _global_\n")
    added = f"hydra.searchpath=[file://{tmp_path}]"
    assert unknown_option_message(["task=exact_match", added]) is None
    assert unknown_option_message(["task=exact_match,translation", f"+{added}"]) is None
    assert unknown_option_message(["task=exact_matc", added]).startswith(
        "error: task=exact_matc (on the command line): not an option of group task (did you mean task=exact_match?)"
    )
    assert unknown_option_message(["task=exact_match"]).startswith("error: task=exact_match (on the command line)")
    assert unknown_option_message(["task=exact_match", "hydra.searchpath=[pkg://elsewhere.conf]"]) is None
    assert unknown_option_message(["-cd", str(tmp_path), "task=exact_match"]) is None  # Hydra's flag, both forms
    assert unknown_option_message([f"--config-dir={tmp_path}", "task=exact_match"]) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["pos=absolute,relative", "norm=rms", "data=toy"],
        ["hydra/launcher=joblib", "pos=choice(absolute,relative)", "~norm", "+tuned=factorial_converged_toy"],
        ["hydra/job_logging=stderr", "hydra.launcher.n_jobs=2", "hydra.run.dir=x/y"],
        ["experiment=multi30k_tiny_lc", "model.d_model=64", "lr=1e-3"],
    ],
)
def test_group_options_that_exist_or_hydras_sweep_syntax_pass(argv):
    assert unknown_option_message(argv) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # a setting of the whole sweep made a factor by Hydra: every cell ran under each grid, into one folder
        (["-m", "grid=none,rnn", "data=toy"], "error: grid=none,rnn: grid is a setting of the whole sweep, not a "
         "factor: give it one value (a sweep for each value is a command for each)"),
        (["sweep_name=a,b"], "error: sweep_name=a,b: sweep_name is a setting of the whole sweep"),
        (["report_metric=test_chrf,test_bleu"], "error: report_metric=test_chrf,test_bleu: report_metric is a "),
        (["+tuned=factorial_converged,factorial_converged_toy"], "error: +tuned=factorial_converged,factorial_"),
        (["plan=choice(true,false)"], "error: plan=choice(true,false): plan is a setting of the whole sweep"),
        # a mistyped subcommand: Hydra's "missing EQUAL at '<EOF>'"
        (["-m", "reports", "sweeps/none"], "error: reports: not a subcommand of sweep.py (did you mean report?) nor "
         "key=value; python sweep.py report DIR, python sweep.py tune DIR --level KEY, or python sweep.py [key=value"),
        (["-m", "report", "sweeps/x"], "error: report: a subcommand goes first, without -m: python sweep.py report "
         "sweeps/x"),
        (["-m", "grid=none", "pos=absolute,rope", "seed=1,2", "baseline={pos: absolute}"], None),
        (["-m", "level_settings={optim: {adam: ['optim.optimizer.lr=0.001']}}", "optim=adam,noam"], None),
    ],
)  # fmt: skip
def test_a_setting_of_the_whole_sweep_takes_one_value_and_a_subcommand_is_spelt(argv, expected):
    from nmt.cli import sweep_argument_message

    said = sweep_argument_message(argv)
    assert said == expected if expected is None else said.startswith(expected)


def test_the_settings_of_a_whole_sweep_are_those_the_sweep_keeps_out_of_its_runs():
    """The keys the command line check refuses as factors are those the runs do not get (one list: conf/)."""
    from nmt.cli import sweep_settings
    from nmt.sweep.summary import SWEEP_KEYS

    assert sweep_settings() == set(SWEEP_KEYS)


LEVELS = "level_settings={optim: {adam: ['optim.optimizer.lr=0.001'], noam: ['warmup=400']}}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        # unquoted in the shell: Hydra was given "level_settings={optim:" and blamed '[optim.optimizer.lr'
        (["optim=adam,noam", "level_settings={optim:", "{adam:", "[optim.optimizer.lr=0.001]}}"],
         f'error: level_settings={{optim:: Hydra cannot read it (no viable alternative at input \'{{optim:\'); the '
         f'shell split the value at its spaces: quote the whole argument, as "{LEVELS}"'),
        # quoted, its items not: Hydra's bare "no viable alternative" and a traceback hint
        (["level_settings={optim: {adam: [optim.optimizer.lr=0.001]}}"],
         "error: level_settings={optim: {adam: [optim.optimizer.lr=0.001]}}: Hydra cannot read it (no viable "
         "alternative at input '{optim: {adam: [optim.optimizer.lr='); quote each key=value item of a list, as "
         f'"{LEVELS}"'),
        (["data.max_samples=(1"], "error: data.max_samples=(1: Hydra cannot read it"),
        ([LEVELS, "-m", "pos=absolute,relative", "lr=choice(1e-3,2e-3)", "name=a b", "--help"], None),
    ],
)  # fmt: skip
def test_an_argument_hydra_cannot_read_is_one_line_saying_how_to_quote_it(argv, message):
    said = unparsable_message(argv)
    assert said == message if message is None or message.endswith('"') else said.startswith(message)


@pytest.mark.parametrize(
    "value",
    ['The Company SAID, "Hello"!', "it's 5 = 2 + 3, isn't it?", "a [b] {c} (d): e", "C:\\dir\\: x!",
     'x\\"y, z', "a\\\\: b!", """it's "x", ok"""],
)  # fmt: skip
def test_a_value_hydra_cannot_read_is_answered_with_a_quoting_that_reads_it_back(value):
    """evaluate.py prompt="The Company SAID, \\"Hello\\"!" was told to "quote a value": it was quoted, for the
    shell. The answer is the argument as typed with Hydra's quotes inside the shell's, and typed so, the shell
    and Hydra read the value back as it was."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    said = unparsable_message([f"prompt={value}"])
    assert said.startswith(f"error: prompt={value}: Hydra cannot read it (") and said.endswith(
        " (docs/configuration.md)"
    )
    typed = said.split("inside the shell's: ")[1].removesuffix(" (docs/configuration.md)")
    (arg,) = shlex.split(typed)  # as the shell passes it
    assert OverridesParser.create().parse_overrides([arg])[0].value() == value


def test_train_py_stops_at_a_misspelt_group_option_with_one_line():
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "pos=rotary"], capture_output=True, text=True, timeout=120
    )
    valid = ", ".join(sorted(f.stem for f in (ROOT / "conf" / "pos").glob("*.yaml")))  # a new encoding included
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: pos=rotary (on the command line): not an option of group pos; valid: {valid}"
    ]
    assert valid.startswith("absolute, ") and ", rope" in valid


def test_sweep_and_evaluate_keys_are_checked_against_their_own_configs():
    assert "'baseline'" in unknown_key_message(["baseline_cell=x"], "sweep")
    assert "'beam_size'" not in (unknown_key_message(["decode.beam_size=4"], "evaluate") or "")
    assert "'decode.beam_size'" in unknown_key_message(["decode.beam_sise=4"], "evaluate")


@pytest.mark.parametrize(
    ("model", "group", "option"),
    [("rnn", "pos", "relative"), ("rnn", "norm", "rms"), ("transformer", "attention", "additive")],
)
def test_a_group_the_model_does_not_use_is_refused(model, group, option):
    cfg = compose_train(f"model={model}", f"{group}={option}")
    choices = {"model": model, group: option}
    problems = unused_groups(cfg, choices, [f"model={model}", f"{group}={option}"])
    assert len(problems) == 1 and f"{group}={option}: model={model} does not use group '{group}'" in problems[0]


def test_a_key_inside_a_group_the_model_does_not_use_is_refused():
    """model=rnn norm.eps=1e-3 trained as if nothing were said: the default norm's keys always exist."""
    cfg = compose_train("model=rnn", "norm.eps=0.001")
    problems = unused_groups(cfg, {"model": "rnn", "norm": "layer"}, ["model=rnn", "norm.eps=0.001"])
    assert len(problems) == 1 and "norm.eps: model=rnn does not use group 'norm'" in problems[0]


@pytest.mark.parametrize(
    ("optim", "given", "refused"),
    [
        ("adam", ["lr=0.001", "warmup=30", "weight_decay=0.1"], ["lr", "warmup", "weight_decay"]),
        ("noam", ["lr=0.001", "warmup=30"], ["lr"]),
        ("adamw", ["lr=0.001", "warmup=30", "weight_decay=0.1"], []),
    ],
)
def test_a_top_level_rate_the_optimiser_does_not_read_is_refused(optim, given, refused):
    """optim=adam lr=1e-3 trained at adam's own 5e-4 and recorded lr=0.001 (a sweep over lr: equal cells)."""
    cfg = compose_train(f"optim={optim}", *given)
    problems = unused_groups(cfg, {"optim": optim}, [f"optim={optim}", *given])
    assert [p.split("=")[0].strip() for p in problems] == refused
    assert all(f"optim={optim} does not read the top-level" in p for p in problems)
    if "lr" in refused:
        assert "(read by optim=adamw)" in problems[0]
    # where it goes instead: Noam's peak is its schedule's factor, not optim.optimizer.lr (which multiplies it)
    own = "optim.scheduler.factor (optim.optimizer.lr stays 1.0" if optim == "noam" else "own key, optim.optimizer.lr"
    assert all(own in p for p in problems if p.strip().startswith("lr="))


@pytest.mark.parametrize("experiment", ["multi30k_transformer", "summarization", "ptb_lm"])
def test_an_experiments_rate_is_the_top_level_key_the_command_line_sets(experiment):
    """These experiments set optim.optimizer.lr in place of ${lr}: lr= was refused as a key optim=adamw
    does not read ("read by optim=adamw"). Now they set lr itself, and lr= on the command line applies."""
    cfg = compose_train(f"experiment={experiment}", "lr=0.002", "weight_decay=0.05", tiny=False)
    assert unused_groups(cfg, {"optim": "adamw", "experiment": experiment}, ["lr=0.002", "weight_decay=0.05"]) == []
    assert cfg.optim.optimizer.lr == 0.002 and cfg.optim.optimizer.weight_decay == 0.05
    # a key set in place of the top-level one is named as such, not as one the optimiser never reads
    cfg = compose_train(f"experiment={experiment}", "optim.optimizer.lr=0.003", "lr=0.002", tiny=False)
    problems = unused_groups(cfg, {"optim": "adamw", "experiment": experiment}, ["lr=0.002"])
    assert len(problems) == 1 and f"experiment={experiment} sets optim=adamw's own key in place of" in problems[0]


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        (["checkpoint.monitor=val_loss"], "checkpoint.mode=min"),
        (["early_stopping.patience=2", "early_stopping.monitor=val_loss"], "early_stopping.mode=min"),
        (["data=multi30k", "early_stopping.monitor=val_bleu"], "early_stopping.mode=max"),
    ],
)
def test_a_mode_against_its_metrics_direction_is_refused(overrides, fix):
    """checkpoint.monitor=val_loss kept mode=max: best.ckpt was the checkpoint of the highest loss."""
    section, metric = fix.split(".")[0], overrides[-1].split("=")[1]
    better = "lower" if fix.endswith("min") else "higher"
    # the direction is read from the name's ending, which the message says (a task's new metric that falls is
    # refused as "better higher" until it is named so)
    why = "its name ends in loss" if better == "lower" else r"its name ends in none of ppl, loss, .*LOWER_IS_BETTER\)"
    with pytest.raises(
        ConfigError, match=rf"{section}\.mode=\w+: {section}\.monitor={metric} is better {better}, as {why}; set {fix}"
    ):
        check_config(compose_train(*overrides))
    check_config(compose_train(*overrides, fix))


@pytest.mark.parametrize(("metric", "mode"), [("val_ter", "min"), ("val_wer", "min"), ("val_chrf", "max")])
def test_the_mode_check_reads_the_direction_the_sweep_ranks_by(metric, mode):
    """An error rate improves downwards for checkpointing as for the sweep's ranking (one rule for both):
    mode=min on val_ter is accepted, mode=max refused."""
    from omegaconf import OmegaConf

    from nmt.sweep.analysis import ranking
    from nmt.training.config_task import mode_problems

    cfg = OmegaConf.create({"checkpoint": {"monitor": metric, "mode": mode}})
    assert mode_problems(cfg, "checkpoint", metric) == []
    cfg.checkpoint.mode = "max" if mode == "min" else "min"
    assert mode_problems(cfg, "checkpoint", metric)
    records = [
        {"factors": {"cell": cell}, "seed": 1, "metrics": {metric: value}} for cell, value in (("a", 1.0), ("b", 2.0))
    ]
    assert ranking(records, metric)[0]["cell"] == ("a" if mode == "min" else "b")


@pytest.mark.parametrize("task", ["lm", "translation"])
def test_a_validation_search_where_validation_decodes_nothing_is_refused(task):
    """task=lm validation.search.beam_size=3 trained as if nothing were said: a language model decodes nothing
    in validation, and neither does a translator with validation.bleu_every_n_epochs=0."""
    given = ["validation.search.strategy=beam", "+validation.search.beam_size=3"]
    off = ["validation.bleu_every_n_epochs=0"] if task == "translation" else []
    if task == "translation":  # early stopping is off here: its monitor is neither needed nor taken
        off += ["checkpoint.monitor=val_loss", "checkpoint.mode=min"]
    cfg = compose_train(f"task={task}", *off, *given)
    problems = unused_groups(cfg, {"task": task}, [f"task={task}", *off, *given])
    assert [p.split(":")[0].strip() for p in problems] == given
    assert all("validation decodes no sentences here (validation.bleu_every_n_epochs=0)" in p for p in problems)
    # said once (above): the config check does not also ask for a strategy that reads it
    check_config(compose_train(f"task={task}", *off, "+validation.search.beam_size=3"))
    # the whole validation block given as one value, its search inside it
    whole = "validation={bleu_every_n_epochs:0,search:{strategy:beam}}"
    cfg = compose_train(f"task={task}", *off[1:], whole)
    [problem] = unused_groups(cfg, {}, [whole])
    assert problem.strip().startswith(f"{whole}: validation decodes") and problem.endswith("remove its search")
    # deleting the block is no option given
    assert unused_groups(cfg, {"task": task}, [f"task={task}", *off, "~validation.search"]) == []
    if task == "translation":  # where validation decodes, its search applies
        cfg = compose_train(*given)
        assert unused_groups(cfg, {"task": task}, given) == []


def test_groups_the_model_uses_are_accepted():
    cfg = compose_train("model=rnn", "attention=additive")
    assert unused_groups(cfg, {"model": "rnn", "attention": "additive"}, ["model=rnn", "attention=additive"]) == []
    cfg = compose_train("pos=relative", "norm=rms")
    assert unused_groups(cfg, {"model": "transformer"}, ["pos=relative", "norm=rms"]) == []


def test_a_language_model_option_on_a_translation_run_is_refused():
    cfg = compose_train("task=lm", "validation.bleu_every_n_epochs=1")
    with pytest.raises(ConfigError, match="validation.bleu_every_n_epochs=1: a language model decodes nothing"):
        check_config(cfg)


def run_train(*args: str, cwd) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "train.py"), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_train_py_refuses_an_unused_group_and_a_misspelt_key(tmp_path, monkeypatch):
    """... before Lightning is imported: a refusal takes seconds less."""
    quick = ["data=toy", "trainer.max_epochs=0", "trainer.enable_progress_bar=false", *NO_FINAL_SCORES]
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # each module imported, a line of stderr
    result = run_train(*quick, "model=rnn", "pos=relative", cwd=tmp_path)
    assert result.returncode == 2 and "model=rnn does not use group 'pos'" in result.stderr
    imported = [line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if "import time:" in line]
    assert "torch" in imported and "lightning" not in imported
    monkeypatch.delenv("PYTHONPROFILEIMPORTTIME")
    # a task's own refusal, in its own words (the task is built before the other checks, as train() builds it)
    result = run_train(*quick, "task=summarization", "task.rouge=false", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: task.rouge=false: summarisation is scored by ROUGE; use task=translation instead"
    )
    assert "Traceback" not in result.stderr and not list(tmp_path.glob("runs/rnn_toy/*/config.yaml"))  # before any data
    result = run_train("modle=rnn", cwd=tmp_path)
    assert result.returncode == 2 and "did you mean 'model'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], "Recipe: multi30k_transformer, the default for data=multi30k model=transformer"),
        (["model=rnn"], "Recipe: multi30k_rnn, the default for data=multi30k model=rnn"),
        (["data=tatoeba_de_en"], "Recipe: none (no conf/recipe/tatoeba_de_en_transformer.yaml"),
        (["recipe=none"], "Recipe: none (recipe=none)"),
        (["data=files", "recipe=toy_transformer"], "Recipe: toy_transformer, as given (recipe=toy_transformer; conf/"),
        (["experiment=course_baseline"], "Recipe: none (experiment=course_baseline is a recipe of its own)"),
        # an experiment pins its recipe in the place of the data's default: data=toy under it applied both
        (
            ["experiment=multi30k_tiny", "data=toy"],
            "Recipe: multi30k_transformer, pinned by experiment=multi30k_tiny (conf/recipe/multi30k_transformer.yaml",
        ),
        (
            ["experiment=multi30k_tiny"],
            "Recipe: multi30k_transformer, the default for data=multi30k model=transformer, pinned by "
            "experiment=multi30k_tiny",
        ),
        (
            ["experiment=multi30k_tiny", "recipe=none"],
            "Recipe: none (recipe=none, in place of experiment=multi30k_tiny's recipe=multi30k_transformer)",
        ),
        (
            ["experiment=course_baseline", "recipe=multi30k_transformer"],
            "Recipe: multi30k_transformer, as given (recipe=multi30k_transformer; "
            "conf/recipe/multi30k_transformer.yaml, the default of data=multi30k model=transformer), "
            "in place of experiment=course_baseline's recipe=none",
        ),
        (["experiment=ptb_lm"], "Recipe: none (experiment=ptb_lm is a recipe of its own; no conf/recipe/"),
        # pinned by the experiment it builds on (factorial_converged on factorial_tiny), not typed
        (["experiment=factorial_converged"], "Recipe: none (experiment=factorial_converged is a recipe of its own)"),
        (["task=lm"], "Recipe: none (no conf/recipe/ptb_transformer_lm.yaml"),
    ],
)
def test_the_recipe_line_names_the_file_that_applied_or_why_none_did(overrides, expected):
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from nmt.training.run_description import describe_recipe

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    try:
        assert describe_recipe(cfg).startswith(expected)
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.fresh_processes  # a fresh interpreter, as typed (docs/testing.md)
@pytest.mark.slow
def test_training_into_a_file_prints_plain_progress_lines(tmp_path):
    quick = ["data=toy", "trainer.max_steps=6", "progress.every_s=0", *NO_FINAL_SCORES, "threads=1"]
    result = run_train(*quick, f"run_dir={tmp_path / 'run'}", cwd=tmp_path)  # stdout is a pipe, not a terminal
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Recipe: toy_transformer, the default for data=toy model=transformer" in result.stdout
    assert (tmp_path / "run" / "config.yaml").is_file()
    # Lightning's lines once (its own console handler printed each again), and in the run's train.log
    output = result.stdout + result.stderr
    assert output.count("GPU available: False") == 1 and "GPU available" in (tmp_path / "run" / "train.log").read_text()
    lines = [line for line in result.stdout.splitlines() if line.startswith("[train] update ")]
    assert len(lines) >= 5 and lines[-1].startswith("[train] update 6/6, epoch 0, loss ")
    assert all(" tokens/s" in line for line in lines) and "ETA" in lines[0]
    assert "The final updates validate best (val_bleu=" in result.stdout  # max_steps ended mid-epoch: validated
    valid = [line for line in result.stdout.splitlines() if line.startswith("[valid] update ")]
    assert valid[-1].startswith("[valid] update 6, the final weights: val_acc ") and " val_bleu " in valid[-1]


def test_without_a_progress_bar_each_validation_still_prints_its_line(tmp_path, capsys):
    """trainer.enable_progress_bar=false dropped the [valid] lines with the bar: a run's scores went unsaid."""
    from nmt.training.train import train

    quick = ["trainer.max_epochs=2", "trainer.enable_progress_bar=false", *NO_FINAL_SCORES, "threads=1"]
    train(compose_train(*quick, f"run_dir={tmp_path / 'run'}"))
    out = capsys.readouterr().out
    valid = [line for line in out.splitlines() if line.startswith("[valid] update ")]
    assert [line.split(":")[0] for line in valid] == [
        "[valid] update 5, epoch 0",
        "[valid] update 10, epoch 1",
        "[valid] update 10, the final weights",
    ]
    assert all(" val_loss " in line for line in valid) and " val_bleu " in valid[-1] and "[train] update" not in out


def test_a_progress_line_counts_the_tokens_of_every_epoch_its_interval_spans(monkeypatch, capsys):
    """Epochs shorter than the interval between two lines (small models on a GPU): the rate is the tokens
    trained on since the last line, across the epochs' resets of their count, over the time since then."""
    from types import SimpleNamespace

    from nmt.training import progress

    times = iter([0.0, 1.0, 5.0, 11.0])  # start, first batch (the baseline), a batch, a batch of the next epoch
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(times))
    bar = progress.PlainProgress(every_s=10)
    trainer = SimpleNamespace(is_global_zero=True, global_step=0, current_epoch=0, callback_metrics={}, max_steps=-1)
    trainer.max_epochs = None
    counted = {"tokens": 0.0}
    module = SimpleNamespace(epoch_tokens_so_far=lambda: counted["tokens"])
    bar.on_train_start(trainer, module)
    for step, epoch, epoch_tokens in ((1, 0, 100.0), (5, 0, 500.0), (None, 0, 600.0), (9, 1, 400.0)):
        counted["tokens"] = epoch_tokens
        if step is None:  # the epoch ends with 600 tokens; the module's own hook then resets its count
            bar.on_train_epoch_end(trainer, module)
            continue
        trainer.global_step, trainer.current_epoch = step, epoch
        bar.on_train_batch_end(trainer, module, None, None, 0)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["[train] update 9, epoch 1, 90 tokens/s"]  # (600 + 400 - 100) tokens in 10 s
    # two processes: the count is the first's, and the line said so nowhere (half the run's rate)
    times = iter([31.0])
    trainer.world_size, trainer.global_step = 2, 10
    counted["tokens"] = 600.0  # 200 more in 20 s on this process
    bar.on_train_batch_end(trainer, module, None, None, 0)
    assert capsys.readouterr().out.splitlines() == ["[train] update 10, epoch 1, 20 tokens/s (this process's x 2)"]


def test_a_key_of_another_option_of_its_group_is_named_so():
    message = unknown_key_message(["model=rnn", "model.num_heads=4"], "train")
    assert message is not None and "it is a key of model=transformer" in message and "not of model=rnn" in message
    assert "adds a new key" not in message  # +model.num_heads=4 is refused too: it advised what cannot work
    # a key whose value is null in its option (additive's attention_dim) is that option's key all the same
    message = unknown_key_message(["model=rnn", "attention.attention_dim=16"], "train")
    assert "it is a key of attention=additive, not of attention=multiplicative" in (message or "")
    # an option of a group whose files set top-level keys (task=lm): it suggested task._target_
    message = unknown_key_message(["task=lm", "task.rouge=true"], "train")
    assert "it is a key of task=summarization or task=translation, not of task=lm" in (message or ""), message
    # a key of a group the model does not read: the other option was advised, and then refused for that
    message = unknown_key_message(["model=rnn", "pos.base=100"], "train")
    assert "model=rnn does not use group 'pos' (a key of pos=rope); remove it" in (message or ""), message
    message = unknown_key_message(["pos.base=100"], "train")
    assert "it is a key of pos=rope, not of pos=absolute" in (message or ""), message
    # a sweep of levels of which one lacks the key: that level is named, and the way out (it named the
    # default model alone, as if the key were given for it)
    message = unknown_key_message(["grid=none", "model=transformer,rnn", "model.cell=gru,lstm"], "sweep")
    assert "it is a key of model=rnn, not of model=transformer, and a sweep sets it in every run: sweep those " \
        "levels apart (a sweep of model=rnn alone takes model.cell)" in (message or ""), message  # fmt: skip
    # a command without a task group or block (evaluate.py): the likest key of its own, not "no keys"
    message = unknown_key_message(["task.rouge=true"], "evaluate")
    assert "did you mean 'rouge'?" in (message or "") and "block takes only" not in message, message
    # evaluate.py's data block is its own, not the data group: the keys it lists are named, and the + that
    # gives another it takes (it said "takes only", and then took +data.max_src_len=10); one it refuses even
    # with + is not advised to be added, and a misspelt one gets its likest
    message = unknown_key_message(["data.max_src_len=32"], "evaluate")
    assert "evaluate.py's data block lists only data.root, data.eval_stride" in message and "None" not in message
    assert "give this one with +data.max_src_len=..." in message
    assert "did you mean 'data.eval_stride'?" in unknown_key_message(["data.eval_strid=2"], "evaluate")
    refused = unknown_key_message(["data.tgt_lang=de"], "evaluate")
    assert "+data.tgt_lang" not in refused and "evaluate.py takes these of a run's data keys: data.root" in refused


def test_model_keys_that_the_chosen_model_does_not_take_are_refused_before_the_data():
    cfg = compose_train("model=transformer", "recipe=toy_rnn")  # the RNN's recipe with the Transformer
    with pytest.raises(ConfigError, match=r"model\.embed_dim, model\.hidden_size.*: not options of model="):
        check_config(cfg)
    check_config(compose_train("model=rnn", "recipe=toy_rnn"))  # its own model: accepted


def test_a_monitored_score_that_no_validation_computes_is_refused():
    never = ["validation.bleu_every_n_epochs=0", "checkpoint.monitor=val_bleu", "checkpoint.mode=max"]
    with pytest.raises(ConfigError, match=r"checkpoint.monitor='val_bleu': validation.bleu_every_n_epochs=0 never"):
        check_config(compose_train(*never))
    check_config(compose_train(*never, "trainer.limit_val_batches=0"))  # no validation at all: nothing to monitor
    # both keys on one score: one line naming both (it was said twice, word for word)
    both = [*never, "early_stopping.patience=3", "early_stopping.monitor=val_bleu", "early_stopping.mode=max"]
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train(*both))
    said = str(refused.value)
    assert said.count("never decodes") == 1
    assert (
        "checkpoint.monitor='val_bleu' and early_stopping.monitor='val_bleu': validation.bleu_every_n_epochs=0" in said
    )
    # a summariser refuses the setting itself, with its reason: said once, not three times
    with pytest.raises(ConfigError) as refused:
        check_config(
            compose_train("experiment=summarization", "data.train=x", "validation.bleu_every_n_epochs=0", tiny=False)
        )
    said = str(refused.value)
    assert said.count("bleu_every_n_epochs=0") == 1 and "summarisation picks its best checkpoint" in said


def test_every_place_a_missing_corpus_was_looked_for_is_in_its_one_line(tmp_path, monkeypatch):
    from nmt.data.sources import locate

    monkeypatch.setenv("NMT_DATA", str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError) as missing:
        locate("multi30k", ["train.en"], None, tmp_path / "cache", download=False)
    message = user_message(missing.value)
    assert "\n" not in message and f"$NMT_DATA/multi30k: {tmp_path / 'none' / 'multi30k'}" in message
    assert f"cache: {tmp_path / 'cache' / 'multi30k'}" in message and "Fix: set data.root=" in message
    # a data.root given without the corpus: that root named, in one line
    with pytest.raises(FileNotFoundError) as missing:
        locate("multi30k", ["train.en"], tmp_path / "none", tmp_path / "cache", download=False)
    message = user_message(missing.value)
    assert "\n" not in message and message.startswith(f"data.root={tmp_path / 'none'} does not exist: it should hold")


def test_an_existing_path_with_hydras_grammar_in_its_name_is_quoted(tmp_path):
    run = tmp_path / "pos=rope,seed=1"
    run.mkdir()
    assert quoted_paths([f"ckpt_path={run}", "pos=absolute,rope", f"ckpt_path=[{run},{run}]"]) == [
        f"ckpt_path='{run}'",  # one path, not a key and a list
        "pos=absolute,rope",  # a sweep's list: no such path
        f"ckpt_path=['{run}','{run}']",  # a list of such paths (an ensemble of sweep runs), each quoted
    ]
    plain = tmp_path / "plain"
    plain.mkdir()
    for as_written in (
        f"ckpt_path=[{plain},{plain}]",
        f"ckpt_path=[{run},{tmp_path / 'none'}]",
        "decode.beam_size=[4,5]",
    ):
        assert quoted_paths([as_written]) == [as_written]  # paths Hydra reads, or not all existing: untouched
    assert quoted_paths([f"ckpt_path=[{plain},{run}]"]) == [f"ckpt_path=['{plain}','{run}']"]
    # a mistyped run of a sweep, in a folder that exists: quoted, so that the command's "no such run folder; did
    # you mean" says it (Hydra's grammar error told the user to quote what was quoted)
    typo = tmp_path / "pos=rop,seed=1"
    assert quoted_paths([f"ckpt_path={typo}"]) == [f"ckpt_path='{typo}'"]
    assert quoted_paths([f"data.root={tmp_path / 'a'},{tmp_path / 'b'}"]) == [
        f"data.root={tmp_path / 'a'},{tmp_path / 'b'}"
    ]
    files = f"data.train={tmp_path / 'a.tsv'},b.tsv"  # a factor of two files, the first in a folder that exists
    assert quoted_paths([files]) == [files]


def test_train_pys_run_dir_is_hydras_output_folder_too(tmp_path, monkeypatch):
    new = tmp_path / "new"
    assert hydra_dir_from_run_dir([f"run_dir={new}"]) == [f"run_dir={new}", f"hydra.run.dir={new}"]
    # after a flag, Hydra's parser refused it ("unrecognized arguments: hydra.run.dir=..."): beside run_dir
    assert hydra_dir_from_run_dir([f"run_dir={new}", "--cfg", "job"]) == [
        f"run_dir={new}",
        f"hydra.run.dir={new}",
        "--cfg",
        "job",
    ]
    # ~ expanded as run_dir expands it: Hydra made a folder named "~" in the working directory
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hydra_dir_from_run_dir(["run_dir=~/rr"]) == ["run_dir=~/rr", f"hydra.run.dir='{tmp_path / 'rr'}'"]
    for argv in (["data=toy"], ["run_dir=null"], ["run_dir=/x", "hydra.run.dir=/z"], ["-m", "run_dir=/x"]):
        assert hydra_dir_from_run_dir(argv) == argv
    (tmp_path / "file").write_text("")
    assert hydra_dir_from_run_dir([f"run_dir={tmp_path / 'file' / 'run'}"]) == [f"run_dir={tmp_path / 'file' / 'run'}"]
    assert run_dir_message([f"run_dir={tmp_path / 'file' / 'run'}"]).endswith(
        "a file stands where the run folder or one of its parents should be"
    )
    assert run_dir_message([f"run_dir={tmp_path / 'file'}"]) and not run_dir_message([f"run_dir={tmp_path}"])
    assert not run_dir_message(["-m", f"run_dir={tmp_path / 'file'}"]) and not run_dir_message(["run_dir=null"])
    run = tmp_path / "run"  # a run's folder: Hydra's record of it is not rewritten before train.py's checks
    run.mkdir()
    (run / "fingerprint.json").write_text("{}")
    assert hydra_dir_from_run_dir([f"run_dir={run}"])[-1] == "hydra.output_subdir=null"


@pytest.mark.slow
def test_train_py_writes_nothing_outside_its_run_dir(tmp_path):
    work, run = tmp_path / "work", tmp_path / "run"
    work.mkdir()
    quick = ["data=toy", "trainer.max_epochs=0", "trainer.enable_progress_bar=false", *NO_FINAL_SCORES]
    result = run_train(*quick, f"run_dir={run}", "threads=1", cwd=work)
    assert result.returncode == 0, result.stderr
    assert not list(work.iterdir())  # no runs/<name>/<date>/ of Hydra's beside it
    assert (run / ".hydra" / "config.yaml").is_file() and (run / "train.log").is_file()
    # a file where the run folder should be: refused before Hydra makes a folder of its own for the run
    (tmp_path / "file").write_text("")
    refused = run_train(*quick, f"run_dir={tmp_path / 'file' / 'run'}", cwd=work)
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"error: run_dir={tmp_path / 'file' / 'run'}: a file stands where the run folder or one of its parents "
        "should be"
    )
    assert not list(work.iterdir()) and (tmp_path / "file").read_text() == ""


def test_translate_names_a_missing_input_file_before_loading_any_model(tmp_path):
    from omegaconf import OmegaConf

    from nmt.inference.stream import run_translate

    cfg = OmegaConf.create({"ckpt_path": str(tmp_path / "no.ckpt"), "input": str(tmp_path / "missing.en")})
    with pytest.raises(ValueError, match=r"^input=.*missing\.en: no such file"):
        run_translate(cfg)  # not the missing checkpoint's error: the input is checked first
    folder = OmegaConf.create({"ckpt_path": str(tmp_path / "no.ckpt"), "input": str(tmp_path)})
    with pytest.raises(ValueError, match=r"^input=.*: a folder, not a file \(the source sentences"):
        run_translate(folder)
    # input= given empty was the current folder (".: Is a directory")
    empty = OmegaConf.create({"ckpt_path": str(tmp_path / "no.ckpt"), "input": ""})
    with pytest.raises(ValueError, match=r"^input='': give a file of the source sentences"):
        run_translate(empty)
    # the input as the output: the translations replaced the sentences without a word
    source = tmp_path / "same.en"
    source.write_text("one two\n")
    same = OmegaConf.create({"ckpt_path": str(tmp_path / "no.ckpt"), "input": str(source), "output": str(source)})
    with pytest.raises(ValueError, match=r"^output=.*same\.en: the same file as input=; the output would replace"):
        run_translate(same)
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text("eins\n")
    same_prefix = OmegaConf.merge(same, {"output": str(prefixes), "prefix_file": str(prefixes)})
    with pytest.raises(ValueError, match=r"^output=.*prefixes\.de: the same file as prefix_file="):
        run_translate(same_prefix)
    assert source.read_text() == "one two\n" and prefixes.read_text() == "eins\n"


def fake_run_folder(folder):
    """What makes a folder a run's and an evaluation's, as train.py and evaluate.py write them."""
    (folder / "eval" / "test_beam5").mkdir(parents=True)
    (folder / "checkpoints").mkdir()
    (folder / "fingerprint.json").write_text("{}")
    (folder / "train.log").write_text("trained\n")
    record = {"checkpoints": [str(folder / "checkpoints" / "best.ckpt")], "hypotheses": "hypotheses.txt"}
    (folder / "eval" / "test_beam5" / "metrics.json").write_text(json.dumps(record))
    (folder / "eval" / "test_beam5" / "hypotheses.txt").write_text("eins\n")
    return folder


def test_translations_written_over_an_evaluation_or_a_runs_records_are_refused(tmp_path):
    """translate.py output=<run>/eval/test_beam5/hypotheses.txt replaced the hypotheses the run's final scores
    were made of, and said "3 translations written"; a run's records are not replaced either, while a file of
    one's own beside them is written again by the same command."""
    from hydra import compose, initialize_config_dir

    from nmt.inference.stream import run_translate

    run = fake_run_folder(tmp_path / "run")
    (tmp_path / "link").symlink_to(run / "checkpoints")
    source = tmp_path / "source.en"
    source.write_text("one two\n")

    def translate_into(output):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            given = compose("translate", overrides=[f"ckpt_path={tmp_path / 'no.ckpt'}", f"input={source}",
                                                    f"output={output}"])  # fmt: skip
        run_translate(given)

    for output, said in [
        (run / "eval" / "test_beam5" / "hypotheses.txt", r"in the folder of an evaluation, whose metrics.json records"),
        (run / "eval" / "test_beam5" / "mine.txt", r"in the folder of an evaluation"),  # beside what it scored
        (run / "train.log", rf"the run's own train.log \(run folder {run}\); write beside them or elsewhere"),
        (run / "results.json", r"the run's own results.json"),  # not written yet: the run's all the same
        (run / "checkpoints" / "notes.txt", r"in the run's checkpoints/ folder, which holds its records"),
        (tmp_path / "link" / "x.txt", r"in the run's checkpoints/ folder"),  # through a link
        (run / "eval" / "x" / ".." / "mine.txt", r"in the run's eval/ folder"),
    ]:
        with pytest.raises(ValueError, match=rf"^output={re.escape(str(output))}: {said}"):
            translate_into(output)  # before the checkpoint is read
    assert (run / "eval" / "test_beam5" / "hypotheses.txt").read_text() == "eins\n"
    # a file of one's own in the run folder (again: the same command twice), or outside it: the checkpoint is next
    (run / "translations.txt").write_text("earlier\n")
    (tmp_path / "stats").mkdir()
    (tmp_path / "stats" / "metrics.json").write_text('{"loss": 1}')  # another tool's file of that name
    for output in (run / "translations.txt", run / "mine" / "out.txt", tmp_path / "out.txt", tmp_path / "stats" / "a"):
        with pytest.raises(ValueError, match="no such checkpoint file"):
            translate_into(output)


def test_an_out_dir_inside_a_run_must_be_one_of_its_evaluation_folders(tmp_path, monkeypatch):
    """evaluate.py out_dir=<run>/eval laid hypotheses.txt and metrics.json loose beside the evaluation folders,
    out_dir=<run>/checkpoints among the checkpoints; refused before the checkpoint is read. A grid, or several
    sets, write folders of their own into <run>/eval, as they do by default."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    run = fake_run_folder(tmp_path / "run")
    monkeypatch.chdir(tmp_path)  # a relative out_dir too

    def evaluate_with(out_dir, *overrides):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            given = [f"ckpt_path={tmp_path / 'no.ckpt'}", f"out_dir={out_dir}", *overrides]
            return evaluate(compose("evaluate", overrides=given))

    for out_dir, said in [
        (run, "the run folder itself, which holds its checkpoints and records"),
        ("run/eval", "the run's folder of evaluations, one sub-folder each"),
        ("run/eval/x/..", "the run's folder of evaluations, one sub-folder each"),
        (run / "checkpoints", rf"in the run folder {run}, among its records \(checkpoints/\)"),
        (
            run / "eval_before_update_10" / "x",
            rf"in the run folder {run}, among its records \(eval_before_update_10/\)",
        ),
    ]:
        with pytest.raises(
            ValueError, match=rf"^out_dir={re.escape(str(out_dir))}: {said}; give a folder of its own, "
        ):
            evaluate_with(out_dir)
    for out_dir in ("run/eval/mine", run / "eval" / "test_beam5", tmp_path / "elsewhere"):
        with pytest.raises(ValueError, match="no such checkpoint file"):  # accepted: the checkpoint is read next
            evaluate_with(out_dir)
    for several in ("decode.beam_size=[1,2]", "split=[val,test]"):  # folders of their own in eval/, as by default
        with pytest.raises(ValueError, match="no such checkpoint file"):
            evaluate_with("run/eval", several)


def test_evaluate_names_a_missing_input_file_before_reading_the_checkpoint(tmp_path):
    """evaluate.py input=<missing file> read the checkpoint and loaded the model before saying the file was
    not there."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    def evaluate_with(*overrides):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return evaluate(
                compose("evaluate", overrides=[f"ckpt_path={tmp_path / 'no.ckpt'}", "device=cpu", *overrides])
            )

    with pytest.raises(ValueError, match=r"^input=.*missing\.en: no such file \(the source sentences"):
        evaluate_with(f"input={tmp_path / 'missing.en'}")  # not the missing checkpoint's error
    with pytest.raises(ValueError, match=r"^input=.*: a folder, not a file"):
        evaluate_with(f"input={tmp_path}")
    with pytest.raises(ValueError, match="no such checkpoint file"):  # standard input: the checkpoint is read
        evaluate_with("input=-")
    # the input as the output: refused by the translation task's check, before any model is loaded
    from nmt.tasks.translation import TranslationTask

    source = tmp_path / "same.en"
    source.write_text("one two\n")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        same = compose("evaluate", overrides=["ckpt_path=x", f"input={source}", f"output={source}"])
    with pytest.raises(ValueError, match=r"^output=.*same\.en: the same file as input=; the output would replace"):
        TranslationTask().check_evaluation(same)


@pytest.mark.parametrize(
    ("name", "given", "said"),
    [
        ("translate", "output=null", "output=null (on the command line): output takes a value, not null; leave it out "
         "for its default (-)"),
        ("translate", "device=null", "device takes a value, not null; leave it out for its default (auto)"),
        ("serve", "host=null", "host takes a value, not null; leave it out for its default (127.0.0.1)"),
        ("evaluate", "samples=NULL", "samples takes a value, not null; leave it out for its default (5)"),
        ("export", "out=null", "out takes a value, not null; export.py needs it"),
        ("translate", "decode=null", "decode is a block of options, not a value: set them one by one"),
        ("translate", "+beam_size=1", "+beam_size=1 (on the command line): translate.py reads the keys of its config "
         "alone, and a key added with + is read by nothing: did you mean 'decode.beam_size'?"),
        ("serve", "++nbest=3", "a key added with + is read by nothing"),
        ("evaluate", "+num_sample=3", "did you mean 'num_samples'"),
        # it said "strategy is a key of trainer=ddp (trainer.strategy)"
        ("export", "decode.strategy=epsilon", "export.py carries the run's own search (its decode settings, in "
         "nmt_export.json); give a search option where the export translates: CTranslate2Model(...).translate("),
    ],
)  # fmt: skip
def test_a_null_where_a_value_belongs_and_a_key_added_with_a_plus_are_one_line(name, given, said):
    """translate.py output=null, device=null, serve.py host=null: tracebacks at their first use; decode=null:
    'Input cfg is not an OmegaConf config object'; translate.py +beam_size=1: taken, and read by nothing."""
    from nmt.cli import checkpoint_use_message

    message = checkpoint_use_message(["ckpt_path=x", given], name)
    assert message is not None and message.startswith("error: ") and said in message
    # where null is a value (a search option: the run's own), and the keys evaluate.py's data block may add
    for fine in ("decode.beam_size=null", "max_input_len=null", "n_best=3"):
        assert checkpoint_use_message(["ckpt_path=x", fine], "translate") is None
    assert checkpoint_use_message(["+data.test=x.de", "output=null"], "evaluate") is None
    assert checkpoint_use_message(["split=null"], "evaluate") is None  # its default: the test set
    assert checkpoint_use_message(["+model.x=1", "trainer.max_steps=null"], "train") is None


@pytest.mark.parametrize("name", ["translate", "evaluate", "serve", "export"])
def test_a_multirun_of_a_program_of_a_checkpoint_is_refused(name):
    """evaluate.py split=test decode.beam_size=1,3 -m scored both on the test set (a decoding grid is chosen
    on validation alone) and left a multirun/ folder; without -m, Hydra's five lines suggested -m."""
    from nmt.cli import multirun_message

    message = multirun_message(["ckpt_path=x", "split=test", "decode.beam_size=4", "-m"], name)
    assert message.startswith(f"error: -m (on the command line): {name}.py runs once, not a multirun")
    listed = multirun_message(["ckpt_path=x", "decode.beam_size=1,3"], name)
    assert listed.startswith("error: decode.beam_size=1,3 (on the command line): Hydra reads it as the sweep of a")
    if name == "evaluate":
        assert "(decode.beam_size=[4,5] split=val)" in message
        assert "give a list, decode.beam_size=[1,3], with split=val" in listed
        sets = multirun_message(["ckpt_path=x", "split=test,iwslt16:tst2014"], name)
        assert sets.endswith("a list is written in brackets: split=[test,iwslt16:tst2014]")
    else:
        assert "give one value (evaluate.py scores the values of a list" in listed
    # a value that holds a comma (a file to write) is quoted; a sweep of Hydra's functions is one line too
    one = multirun_message(["ckpt_path=x", "out=results,beam5.txt"], name)
    assert one.startswith("error: out=results,beam5.txt (on the command line): a value holding a comma is quoted ")
    assert "('out=\"results,beam5.txt\"')" in one  # as the shell is given it: Hydra's quotes in the shell's
    for function in ("decode.top_p=interval(0,1)", "decode.beam_size=glob(*)", "decode.beam_size=range(1,3)"):
        assert "Hydra reads it as the sweep of a multirun" in multirun_message(["ckpt_path=x", function], name)
    if name in ("translate", "serve"):  # an ensemble
        assert multirun_message(["ckpt_path=a,b"], name).endswith("a list is written in brackets: ckpt_path=[a,b]")
    for fine in ("decode.beam_size=[1,3]", "input='a, b.txt'", "ckpt_path=[a.ckpt,b.ckpt]"):
        assert multirun_message(["ckpt_path=x", fine], name) is None
    assert multirun_message(["pos=a,b", "-m"], "train") is None and multirun_message(["pos=a,b"], "sweep") is None
    # Hydra's five lines suggested key=[a,b], nothing for a group
    # the keys a sweep sets per run (refused by sweep.py) are left out of the command it suggests
    given = ["run_dir=runs/mine", "hydra.run.dir=runs/mine", "pos=absolute,rope"]
    assert "python sweep.py grid=none pos=absolute,rope (or" in multirun_message(given, "train")
    assert multirun_message(["data=toy", "pos=absolute,rope"], "train") == (
        "error: pos=absolute,rope (on the command line): train.py trains one run; runs of several values are a "
        "sweep, with a report: python sweep.py grid=none data=toy pos=absolute,rope (or Hydra's multirun: train.py "
        "-m ...; a value holding a comma is quoted: key='a,b')"
    )


@pytest.mark.parametrize("name", ["translate", "evaluate", "serve", "export"])
def test_a_training_group_given_to_a_program_of_a_checkpoint_is_refused(name):
    """translate.py pos=rope got Hydra's hint to write +pos=rope, which was then accepted and read by nothing."""
    for given in ("pos=rope", "+model=rnn", "data=toy"):
        message = foreign_group_message(["ckpt_path=x", given], name)
        assert message.startswith(f"error: {given} (on the command line): {name}.py takes no ")
    # a key of such a group's node: "did you mean 'smoothing'?" offered the group, refused in turn
    message = foreign_group_message(["ckpt_path=x", "smoothing.smoothing=0.2"], name)
    assert message.startswith(f"error: smoothing.smoothing=0.2 (on the command line): {name}.py takes no smoothing "
                              "group, nor its keys, the checkpoint's own settings apply")  # fmt: skip
    assert foreign_group_message(["ckpt_path=x", "decode.beam_size=4", "hydra.verbose=true"], name) is None
    # data.root: a key of evaluate.py's own data block; the others read no data ("did you mean 'data'?" before)
    data = foreign_group_message(["ckpt_path=x", "data.root=/d"], name)
    refused = f"error: data.root=/d (on the command line): {name}.py takes no data group, nor its keys"
    assert data is None if name == "evaluate" else data.startswith(refused)
    for name in ("train", "sweep"):  # their groups, an optional one too
        for given in ("pos=rope", "recipe=none", "+grid=rnn", "+tuned=factorial_converged_toy", "data=toy"):
            assert foreign_group_message([given], name) is None


@pytest.mark.parametrize("program", ["translate", "evaluate", "export", "serve"])
def test_the_help_of_a_command_using_a_checkpoint_lists_its_keys_not_train_pys_groups(program):
    """translate.py --help listed model=, pos= ... which translate.py then refused, pointing back to --help."""
    shown = subprocess.run(
        [sys.executable, str(ROOT / f"{program}.py"), "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith(f"python {program}.py ckpt_path=PATH") and "\nckpt_path: ???" in shown.stdout
    assert "Configuration groups" not in shown.stdout and "pos: absolute" not in shown.stdout


def test_train_pys_help_says_which_of_its_groups_are_sweep_pys():
    """train.py --help listed grid= and tuned= among its groups, which train.py reads nothing of."""
    shown = {
        program: subprocess.run(
            [sys.executable, str(ROOT / f"{program}.py"), "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        ).stdout
        for program in ("train", "sweep")
    }
    assert "grid and tuned are sweep.py's" in shown["train"] and "\ngrid: " in shown["train"]
    assert "grid: the\nfactorial's preset" in shown["sweep"] and "sweep.py's" not in shown["sweep"]


def test_averaging_for_final_scores_that_are_not_made_is_refused():
    """test_average_last=3 with val_after_training=false test_after_training=false ran, and averaged nothing."""
    off = ["val_after_training=false", "test_after_training=false"]
    cfg = compose_train("test_average_last=3", *off)
    (problem,) = unused_groups(cfg, {}, ["test_average_last=3", *off])
    assert problem.strip().startswith("test_average_last=3: the checkpoints the final scores average")
    cfg = compose_train("test_average_last=3", off[0])  # the test is scored: it applies
    assert unused_groups(cfg, {}, ["test_average_last=3", off[0]]) == []


def test_a_value_reading_an_unset_environment_variable_is_named_with_what_to_do(tmp_path, monkeypatch):
    """A corpus's paths written from ${oc.env:NMT_DATA} (ARCHITECTURE.md) with NMT_DATA unset gave OmegaConf's
    'KeyError raised while resolving interpolation' and no key: now the keys that read it and what to do."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    from nmt.cli.run import user_message

    env = {k: v for k, v in os.environ.items() if k != "NMT_DATA"}
    given = [
        "data=files",
        "data.train=[${oc.env:NMT_DATA}/a.de,${oc.env:NMT_DATA}/a.en]",
        "data.test=${oc.env:NMT_DATA}/t",
    ]
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *given, f"run_dir={tmp_path / 'run'}", "threads=1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused: no folder of Hydra's record and an empty log left
    assert result.stderr.strip().splitlines()[-1] == (
        "error: data.train, data.test read ${oc.env:NMT_DATA}, and NMT_DATA is not set: export NMT_DATA=... (the "
        "folder holding the corpora: docs/data.md), or give data.train=... on the command line"
    )
    monkeypatch.delenv("NMT_UNSET_FOR_TEST", raising=False)
    cfg = OmegaConf.create({"out": {"dir": "${oc.env:NMT_UNSET_FOR_TEST}/x", "keep": 1}})
    with pytest.raises(InterpolationResolutionError) as caught:
        _ = cfg.out.dir  # read: the error names its key itself
    assert user_message(caught.value) == (
        "out.dir reads ${oc.env:NMT_UNSET_FOR_TEST}, and NMT_UNSET_FOR_TEST is not set: export "
        "NMT_UNSET_FOR_TEST=..., or give out.dir=... on the command line"
    )
    assert user_message(ValueError("data.name='a b': not a name")) == "data.name='a b': not a name"


def test_a_refused_run_leaves_no_folder_but_one_that_was_there(tmp_path):
    """A config train.py refused left runs/<name>/<date_time> (Hydra's .hydra/ and an empty train.log), one
    more after each try; a run_dir that existed before is kept as it was."""
    refused = ["data=toy", "model.dropout=2", "threads=1"]
    result = run_train(*refused, cwd=tmp_path)
    assert result.returncode == 2 and "model.dropout=2" in result.stderr
    assert not (tmp_path / "runs" / "transformer_toy").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("kept")
    assert run_train(*refused, f"run_dir={tmp_path / 'mine'}", cwd=tmp_path).returncode == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "kept"
    (tmp_path / "empty").mkdir()
    assert run_train(*refused, f"run_dir={tmp_path / 'empty'}", cwd=tmp_path).returncode == 2
    assert (tmp_path / "empty").is_dir()  # the user's own folder, though Hydra's record is all it holds
    assert run_train(*refused, f"hydra.run.dir={tmp_path / 'empty'}", cwd=tmp_path).returncode == 2
    assert (tmp_path / "empty").is_dir()  # named as Hydra's output folder: the same
    # refused once the folder is locked (its data): nothing of a run written there either
    result = run_train("data=files", f"data.train={tmp_path / 'nope.tsv'}", "threads=1", cwd=tmp_path)
    assert result.returncode == 2 and "nope.tsv" in result.stderr
    assert not (tmp_path / "runs" / "transformer_files").exists()


def test_a_file_error_in_the_cache_says_to_give_another_cache_folder(tmp_path):
    """A read-only cache, or NMT_CACHE naming a file, said "Permission denied" / "Not a directory" of a path
    inside it and no more."""
    from omegaconf import OmegaConf

    from nmt.cli.run import user_message

    cfg = OmegaConf.create({"cache_dir": str(tmp_path / "cache")})
    inside = PermissionError(13, "Permission denied", str(tmp_path / "cache" / "tokenizers" / ".x.tmp"))
    assert user_message(inside, cfg) == (
        f"{inside.filename}: Permission denied (in the cache, cache_dir={tmp_path / 'cache'}: give a folder this "
        "user can write, cache_dir=... or $NMT_CACHE)"
    )
    outside = PermissionError(13, "Permission denied", str(tmp_path / "out.txt"))
    assert user_message(outside, cfg) == f"{outside.filename}: Permission denied"


def test_a_refusal_keeps_a_folder_another_run_holds(tmp_path, monkeypatch):
    """Two runs started in one second share Hydra's dated folder: the one refused removed the other's folder
    and lock while that one read its data (its fingerprint not yet written)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from nmt.cli import arguments
    from nmt.training.run_folder import RunLock

    folder = tmp_path / "runs" / "transformer_toy" / "2026-12-07_18-00-00"
    (folder / ".hydra").mkdir(parents=True)
    (folder / "train.log").write_text("")
    cfg = compose_train("data=toy", tiny=False, hydra=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(folder)
    monkeypatch.setattr(arguments, "_BEFORE_HYDRA", {})
    HydraConfig.instance().set_config(cfg)
    try:
        with RunLock(folder):  # the other run, training there
            arguments.drop_refused_output()
            assert (folder / ".hydra").is_dir()
        arguments.drop_refused_output()  # no one holds it: Hydra's record of a refused run, removed
        assert not folder.exists() and not folder.parent.exists()
    finally:
        HydraConfig.instance().cfg = None


def test_the_command_line_is_checked_before_torch_is_imported():
    """A mistyped key or group is said at once: nmt.cli imported torch through one function's import, so that
    `train.py model=lstm` waited for torch to load before it said its line."""
    probe = (
        "import sys, nmt.cli, nmt.cli.keys, nmt.cli.arguments; "
        "print(sorted(m for m in ('torch', 'lightning') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_multirun_flag_after_an_override_is_read_as_hydra_reads_it_first(monkeypatch):
    """`sweep.py threads=1 -m grid=none ...` printed argparse's usage block and "unrecognized arguments" (Hydra
    reads its flags before the overrides only); the docs call -m optional, so it was easy to add last or
    between."""
    from nmt import cli

    for given in (["threads=1", "-m", "grid=none", "pos=absolute,rope"], ["threads=1", "grid=none", "--multirun"]):
        monkeypatch.setattr(sys, "argv", ["sweep.py", *given])
        monkeypatch.setattr(cli, "unknown_key_message", lambda *a, **k: None)  # composing is not this test's
        cli.check_command_line("sweep")
        flag = next(a for a in given if a.startswith("-"))
        assert sys.argv == ["sweep.py", flag, *(a for a in given if a != flag)]
    # every flag of Hydra's, with its value (--info's only where it names a topic), in its order
    from nmt.cli.arguments import hydra_flags_first

    given = ["a=1", "--cfg", "job", "b=2", "-i", "searchpath", "c=3", "--info", "d=4", "-cd", "mine", "e=5"]
    assert hydra_flags_first(given) == [
        *("--cfg", "job", "-i", "searchpath", "--info", "-cd", "mine"),
        *("a=1", "b=2", "c=3", "d=4", "e=5"),
    ]
    shown = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "data=toy", "--cfg", "job", "seed=7"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0 and "seed: 7" in shown.stdout, shown.stderr[-1000:]


@pytest.mark.parametrize("program", ["train", "sweep"])
def test_a_group_the_defaults_choose_given_with_plus_says_to_drop_the_plus(program):
    """``+experiment=x`` (the usual Hydra idiom where a group has no default) gave Hydra's "Multiple values
    for experiment. To override a value use 'override experiment: x'", the fix of a config file."""
    from nmt.cli import added_default_group_message

    said = added_default_group_message(["data=toy", "+experiment=factorial_tiny"], program)
    assert said == (
        "error: +experiment=factorial_tiny (on the command line): the config chooses group experiment already, so "
        "it takes no +; write experiment=factorial_tiny"
    )
    assert added_default_group_message(["+recipe=none"], program).endswith("write recipe=none")
    # a group no default chooses takes its +, and ++ or a key of a group is no choice of it
    for fine in (["+tuned=x"], ["++experiment=x"], ["+model.x=1"], ["experiment=x"]):
        assert added_default_group_message(fine, program) is None, fine
    grid = added_default_group_message(["+grid=none"], program)
    assert (grid is not None) == (program == "sweep")


def test_the_last_run_dir_given_is_hydras_output_folder_as_hydra_takes_the_last_value():
    """run_dir given twice: Hydra's config takes the last; its output folder must be that one too (found by
    mutation: the first was taken and nothing failed)."""
    from nmt.cli.arguments import hydra_dir_from_run_dir

    given = ["run_dir=/tmp/a", "run_dir=/tmp/b"]
    assert hydra_dir_from_run_dir(given)[-1] == "hydra.run.dir=/tmp/b"
    assert compose_train(*given, tiny=False).run_dir == "/tmp/b"
