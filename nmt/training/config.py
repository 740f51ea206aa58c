"""Checks of the composed config, run before any data is read: each problem names the key, the value
and what is allowed; options the chosen task or model does not use are errors too. (Unknown group
options are rejected by Hydra itself; misspelt keys by nmt.cli with a suggestion.)"""

import re
from collections.abc import Callable

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch.overrides import TorchFunctionMode

from nmt.decoding.settings import search_problems, unreachable_min_len, unread_problems
from nmt.metrics import lower_is_better
from nmt.metrics.corpus import bleu_tokenizer
from nmt.models.build import REQUIRED_METHODS, build_model, missing_methods
from nmt.tasks import build_task
from nmt.training import graph_updates, weight_casts
from nmt.training.config_groups import (
    added_key_problems,
    built_node_problems,
    data_key_problems,
    hydra_choices,
    keywords,
    model_key_problems,
    optim_node_problems,
    switches,
    target_class,
    unused_groups,
)
from nmt.training.optim import DECAYS

MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision


# Lightning's accelerators that need nothing beyond torch ("gpu" is CUDA's or MPS's, whichever there is)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


# switches whose default is null (chosen by the device), which conf/ therefore does not write as true or false
NULLABLE_SWITCHES = frozenset({"data.batches_on_device", "optim.optimizer.fused"})


class ConfigError(ValueError):
    """The config asks for something impossible; the message lists every problem found."""


def _number(value: object) -> bool:
    """An int or float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _interpolated(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` takes its value from another key (``optim.optimizer.lr: ${lr}``), whose own rule says
    it once."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node and node._get_node(leaf)._is_interpolation()


def _rules() -> list[tuple[str, Callable[[object], bool], str]]:
    positive = (lambda v: _number(v) and isinstance(v, int) and v > 0, "a positive integer")
    non_negative = (lambda v: _number(v) and isinstance(v, int) and v >= 0, "an integer >= 0")
    probability = (lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)")
    positive_or_null = (lambda v: _number(v) and isinstance(v, int) and v > 0, "a positive integer or null")
    non_negative_or_null = (lambda v: _number(v) and isinstance(v, int) and v >= 0, "an integer >= 0 or null (0: off)")

    def batches_or_share(v) -> bool:  # Lightning's int (batches) or float (a share of an epoch)
        return (_number(v) and not isinstance(v, float) and v > 0) or (isinstance(v, float) and 0 < v <= 1)

    rules = []
    for key in ("d_model", "num_heads", "ffn_dim", "hidden_size", "embed_dim"):
        rules.append((f"model.{key}", *positive))
    for key in ("encoder_layers", "decoder_layers", "num_layers"):
        rules.append((f"model.{key}", *positive))
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        rules.append((f"model.{key}", *probability))
    rules += [
        ("smoothing.smoothing", *probability),
        ("smoothing.fused", lambda v: isinstance(v, bool), "true or false"),
        ("data.max_tokens", *positive),
        ("data.eval_max_tokens", *positive),
        ("data.max_len", *positive),
        ("data.num_workers", *non_negative),
        ("data.tokenizer.vocab_size", lambda v: _number(v) and isinstance(v, int) and v >= 8, "an integer >= 8"),
        (
            "data.tokenizer.character_coverage",
            lambda v: _number(v) and 0 < v <= 1,
            "a number in (0, 1] (the share of characters the vocabulary covers; 1.0 for small alphabets)",
        ),
        ("validation.bleu_every_n_epochs", *non_negative),
        (
            "checkpoint.keep_last_epochs",
            positive[0],
            "a positive integer (last.ckpt, which a rerun resumes from, is a copy of the newest epoch checkpoint)",
        ),
        ("test_average_last", *non_negative),
        ("threads", positive[0], "a positive integer, or null for PyTorch's default"),
        ("trainer.accumulate_grad_batches", *positive),
        (
            "trainer.log_every_n_steps",  # Lightning reads a negative one as its absolute value
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "an integer >= 0 (0: no per-update values logged)",
        ),
        (
            "early_stopping.patience",
            lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 0),
            "an integer >= 0 or null (0, null: off)",
        ),
        (
            "trainer.gradient_clip_val",
            lambda v: v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v >= 0),
            "a number >= 0 or null (0, null: no clipping)",
        ),
        ("checkpoint.mode", lambda v: v in ("min", "max"), "one of ['min', 'max']"),
        ("checkpoint.write_behind", lambda v: isinstance(v, bool), "true, false or null (on an accelerator)"),
        ("early_stopping.mode", lambda v: v in ("min", "max"), "one of ['min', 'max']"),
        ("trainer.max_epochs", lambda v: _number(v) and isinstance(v, int) and v >= -1, "an integer >= -1"),
        # Lightning's own checks of these say a bare name, or nothing: a negative count of sanity batches
        # and a deterministic='maybe' trained without a word
        ("trainer.num_nodes", *positive),
        (
            "trainer.num_sanity_val_steps",
            lambda v: _number(v) and isinstance(v, int) and v >= -1,
            "an integer >= -1 (-1: every validation batch, 0: none)",
        ),
        ("trainer.deterministic", lambda v: isinstance(v, bool) or v == "warn", "true, false, 'warn' or null"),
        (
            "trainer.max_time",
            lambda v: (
                (isinstance(v, str) and bool(re.fullmatch(r"\d+:\d+:\d+:\d+", v))) or isinstance(v, dict | DictConfig)
            ),
            "a duration DD:HH:MM:SS (as '00:02:00:00'), {hours: 2, ...}, or null",
        ),
        (
            "trainer.accelerator",
            lambda v: v in ACCELERATORS,
            f"one of {list(ACCELERATORS)} (others need packages this project does not install)",
        ),
        (
            "trainer.max_steps",
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= -1,
            "an integer >= -1 (-1: no limit)",
        ),
        ("seed", lambda v: _number(v) and isinstance(v, int) and 0 <= v < 2**32, "an integer from 0 to 4294967295"),
        # the seed of the splits cut from a pool: a word was taken as a seed of its own
        ("data.split_seed", lambda v: _number(v) and isinstance(v, int), "an integer"),
        (
            "progress.every_s",
            lambda v: _number(v) and 0 <= v < float("inf"),
            "a number of seconds >= 0 (0: a line at every update)",
        ),
        (
            "trainer.limit_val_batches",
            lambda v: (_number(v) and isinstance(v, int) and v >= 0) or (isinstance(v, float) and 0 <= v <= 1),
            "a number of batches >= 0, a share of the set in [0, 1], or null",
        ),
        # sizes of a corpus's splits: the toy generator's (train_size, val_size, test_size) and a seeded split's
        # (valid_size, test_size; test_size 0: no test set)
        ("data.valid_size", *positive),
        ("data.train_size", *positive),
        ("data.val_size", *positive),
        ("data.min_words", *positive),
        ("data.max_words", *positive),
        ("matmul_precision", lambda v: v in MATMUL_PRECISIONS, f"one of {list(MATMUL_PRECISIONS)}"),
        ("warmup", *non_negative),
        ("optim.scheduler.warmup", *non_negative),  # set directly instead of through warmup
        ("optim.scheduler.d_model", *positive),
        ("pos.clip", *positive),
        # a number here (a word ended the build on a TypeError); its range is the RNN constructor's check
        ("model.teacher_forcing", _number, "a number (a probability in [0, 1])"),
        ("model.teacher_forcing_final", _number, "a number (a probability in [0, 1]), or null"),
        ("data.test_size", *non_negative),
        ("lr", lambda v: _number(v) and 0 < v < float("inf"), "a positive finite number"),
        ("weight_decay", lambda v: _number(v) and v >= 0, "a number >= 0"),
        ("max_bad_steps", *non_negative),
        # the optimiser's and schedule's values: torch refuses some only once the data is read, others never
        ("optim.optimizer.lr", lambda v: _number(v) and 0 < v < float("inf"), "a positive finite number"),
        ("optim.optimizer.eps", lambda v: _number(v) and v >= 0, "a number >= 0"),
        ("optim.optimizer.weight_decay", lambda v: _number(v) and v >= 0, "a number >= 0"),
        (
            "optim.optimizer.betas",
            lambda v: isinstance(v, list | ListConfig) and len(v) == 2 and all(_number(b) and 0 <= b < 1 for b in v),
            "two numbers in [0, 1), as [0.9, 0.98]",
        ),
        (
            "optim.scheduler.min_ratio",
            lambda v: _number(v) and 0 <= v <= 1,
            "a number in [0, 1] (the share of the peak rate the decay ends at)",
        ),
        ("optim.scheduler.factor", lambda v: _number(v) and 0 < v < float("inf"), "a positive finite number"),
        (
            "trainer.val_check_interval",
            lambda v: (
                batches_or_share(v)
                or (isinstance(v, str) and bool(re.fullmatch(r"\d+:\d+:\d+:\d+", v)))  # a duration, DD:HH:MM:SS
                or isinstance(v, dict | DictConfig)  # a duration as {minutes: 5, ...}: Lightning checks its units
            ),
            "a positive number of batches, a share of an epoch in (0, 1], a duration (DD:HH:MM:SS), or null",
        ),
        ("trainer.check_val_every_n_epoch", *positive_or_null),
        (
            "trainer.limit_train_batches",
            batches_or_share,
            "a positive number of batches, a share of an epoch in (0, 1], or null",
        ),
        ("checkpoint.every_n_train_steps", *non_negative_or_null),
        ("data.eval_stride", *positive_or_null),
        ("check_every", *positive),
        (
            "compile",
            lambda v: isinstance(v, bool) or v in ("reduce-overhead", "layers"),  # 1 == True: compile=1 passed
            "true, false, 'reduce-overhead' or 'layers'",
        ),
        ("resume", lambda v: v in ("auto", "force"), "one of ['auto', 'force']"),
        ("cudnn_attention", lambda v: isinstance(v, bool), "true, false or null (PyTorch's choice)"),
        ("cast_weights_once", lambda v: isinstance(v, bool), "true, false or null (with graph_updates=true)"),
        (
            "trainer.devices",
            lambda v: (
                v == "auto"
                or (isinstance(v, int) and not isinstance(v, bool) and (v > 0 or v == -1))
                or isinstance(v, list | ListConfig)
                or (isinstance(v, str) and bool(re.fullmatch(r"\d+(,\d*)*|-1", v)))
            ),
            "'auto', -1 (all), a positive number of devices, or a list of their indices ([0, 2] or '0,2')",
        ),
        (
            "trainer.precision",
            lambda v: str(v) in ("auto", "32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "64-true"),
            "one of ['auto', '32-true', 'bf16-mixed', '16-mixed', 'bf16-true', '64-true']",
        ),
    ]
    return rules


def _cpu_has_bf16_units() -> bool:
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # private: absent from some builds
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def resolve_precision(precision: str, accelerator: str = "auto") -> str:
    """``precision=auto``: bf16-mixed where the device multiplies bf16 matrices in hardware (a GPU with
    bf16, a CPU with AVX512-BF16 or AMX), otherwise 32-true (emulated bf16 is slower than fp32). Any other
    value is returned as given."""
    if str(precision) != "auto":
        return precision
    if accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    if accelerator in ("auto", "cpu"):
        return "bf16-mixed" if _cpu_has_bf16_units() else "32-true"
    return "32-true"


def checked_task(cfg: DictConfig):
    """The run's task, built first (its own refusals in its own words), then the whole config checked."""
    if built_node_problems(cfg, ("task",)):  # a key the task does not take would stop its build on Hydra's words:
        check_config(cfg)  # said with every other problem of the config instead
    task = build_task(cfg.task)
    check_config(cfg)
    return task


def unread_data_problems(cfg: DictConfig) -> list[str]:
    """Data options a training run would read nothing by (checked for training only: an evaluation rebuilds
    the data module from a checkpoint's config, where an older run may hold them): data.columns where no
    split is a TSV, data.user_dict without a jieba segmenter."""
    from nmt.data.file_specs import is_tsv

    problems = []
    data = OmegaConf.select(cfg, "data", default=None)
    if not isinstance(data, DictConfig):
        return problems
    columns = data.get("columns")
    specs = [data.get(split) for split in ("train", "val", "test")]
    if "columns" in data and columns is not None and list(columns) != [0, 1] and not any(map(is_tsv, specs)):
        problems.append(
            f"  data.columns={list(columns)}: picks the fields of a TSV, and none of data.train, data.val and "
            "data.test is one (a prefix or a pair of files: their languages say which is the source): leave it out"
        )
    segmenters = data.get("segmenter") or {}
    if data.get("user_dict") and not any(str(name).startswith("jieba") for name in segmenters.values()):
        problems.append(
            f"  data.user_dict={data.user_dict}: a jieba dictionary, read by a jieba segmenter only, and neither "
            "language has one: add data.segmenter.<lang>=jieba, or leave it out"
        )
    return problems


def check_config(cfg: DictConfig, choices: dict | None = None) -> None:
    """Raise ConfigError listing every invalid value in ``cfg``, and every option that its task
    (``task.check``) or its model (groups it does not use, :func:`unused_groups`) cannot take."""
    problems = []
    rules = _rules()
    for key, ok, allowed in rules:
        value = OmegaConf.select(cfg, key, default=None)
        # a number's test takes no true or false (_number): Python counts True as 1, and lr=true trained at 1.0
        if value is not None and not ok(value) and not _interpolated(cfg, key):
            problems.append(f"  {key}={value!r}: must be {allowed}")
    ruled = {key for key, _, _ in rules}
    for key in sorted((switches() | NULLABLE_SWITCHES) - ruled):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not isinstance(value, bool) and not _interpolated(cfg, key):
            problems.append(
                f"  {key}={value!r}: must be "
                + ("true, false or null" if key in NULLABLE_SWITCHES else "true or false")
            )
    d_model = OmegaConf.select(cfg, "model.d_model", default=None)
    heads = OmegaConf.select(cfg, "model.num_heads", default=None)
    if isinstance(d_model, int) and d_model > 0 and isinstance(heads, int) and heads > 0 and d_model % heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0 and h <= 64]
        problems.append(
            f"  model.d_model={d_model} is not divisible by model.num_heads={heads}; "
            f"valid head counts for this d_model: {divisors}"
        )
    for key, allowed in (
        ("validation.scores_in", ["inline", "thread", "process"]),
        ("optim.scheduler.decay", list(DECAYS)),
    ):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value not in allowed:
            problems.append(f"  {key}={value!r}: must be one of {allowed}")
    for key in ("decode", "validation.search"):  # checked now, not when the final decode meets them
        if key == "validation.search" and not OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1):
            continue  # no search reads it: one on the command line is refused as such (unused_groups)
        block = OmegaConf.select(cfg, key, default=None)
        if isinstance(block, DictConfig):
            values = OmegaConf.to_container(block, resolve=True)
            found = search_problems(values, key)
            found = found or [said for said in [unreachable_min_len(values, key)] if said]
            problems += [f"  {problem}" for problem in found or _given_unread(unread_problems(values, key), key)]
    joint = OmegaConf.select(cfg, "data.tokenizer.joint", default=None)
    if OmegaConf.select(cfg, "model.tie_embeddings", default=None) == "all" and joint is False:
        # separate vocabularies of one size (the size asked for) passed the model's check: one row would then
        # stand for unrelated source and target pieces
        problems.append(
            "  model.tie_embeddings='all' shares one table between source and target pieces, which needs one "
            "vocabulary: data.tokenizer.joint=true, or model.tie_embeddings=decoder"
        )
    if OmegaConf.select(cfg, "smoothing", default=None) is not None and "fused" in cfg.smoothing:
        if cfg.smoothing.fused is None:
            problems.append("  smoothing.fused=None: must be true or false")
    problems += model_key_problems(cfg, choices)
    problems += data_key_problems(cfg)
    problems += optim_node_problems(cfg, choices if choices is not None else hydra_choices())
    problems += built_node_problems(cfg)
    problems += added_key_problems(cfg)
    problems += unread_data_problems(cfg)
    low, high = (OmegaConf.select(cfg, f"data.{k}_words", default=None) for k in ("min", "max"))
    if _number(low) and _number(high) and low > high:
        problems.append(f"  data.min_words={low} is above data.max_words={high}: the toy sentences need min <= max")
    scheduler = OmegaConf.select(cfg, "optim.scheduler", default=None)
    decay, floor = (OmegaConf.select(cfg, f"optim.scheduler.{k}", default=None) for k in ("decay", "min_ratio"))
    if decay in ("inverse_sqrt", "constant") and _number(floor) and floor != 0:
        problems.append(
            f"  optim.scheduler.min_ratio={floor}: decay={decay} does not read it (cosine and linear decay to it); "
            "leave it 0, or choose optim.scheduler.decay=cosine or linear"
        )
    if (
        isinstance(scheduler, DictConfig)
        and "d_model" in scheduler
        and _interpolated(cfg, "optim.scheduler.d_model")
        and OmegaConf.select(cfg, "model.d_model", default=None) is None
    ):  # the schedule's fallback of 512 would scale the rate by a width the model does not have
        problems.append(
            "  optim.scheduler.d_model: the schedule scales its rate by d_model ** -0.5, and this model has no "
            "model.d_model: set optim.scheduler.d_model (e.g. the model's hidden size), or choose optim=adamw"
        )
    problems += _deferred_guard_problems(cfg)
    problems += _model_class_problems(cfg)
    if cfg.get("graph_updates"):
        problems += [
            f"  {problem}"
            for problem in graph_updates.unsupported(
                check_every=cfg.get("check_every"),
                fused=OmegaConf.select(cfg, "optim.optimizer.fused", default=None),
                accumulate=OmegaConf.select(cfg, "trainer.accumulate_grad_batches", default=1),
                precision=OmegaConf.select(cfg, "trainer.precision", default=""),
                compile=cfg.get("compile"),
                world_size=_devices(OmegaConf.select(cfg, "trainer.devices", default=1)),
                accelerator=OmegaConf.select(cfg, "trainer.accelerator", default="auto"),
            )
        ]
    if cfg.get("cast_weights_once"):
        problems += [
            f"  {problem}"
            for problem in weight_casts.unsupported(
                precision=OmegaConf.select(cfg, "trainer.precision", default=""), compile=cfg.get("compile")
            )
        ]
    if cfg.get("cudnn_attention") is not None:
        model_class = target_class(cfg, "model")
        taken = keywords(model_class) if model_class is not None else None
        if OmegaConf.select(cfg, "trainer.accelerator", default="") == "cpu":
            problems.append(
                f"  cudnn_attention={cfg.cudnn_attention}: chooses among a GPU's attention kernels; a CPU run has "
                "none of cuDNN's (leave it null)"
            )
        elif taken is not None and "fused_attention" not in taken:  # the models that call PyTorch's kernel
            problems.append(
                f"  cudnn_attention={cfg.cudnn_attention}: chooses among the kernels of PyTorch's fused attention, "
                f"which {model_class.__name__} does not call (leave it null)"
            )
    strategy = str(OmegaConf.select(cfg, "trainer.strategy", default="auto") or "auto")
    if any(word in strategy for word in ("spawn", "fork", "notebook")):
        # these start the processes from this one: the task and data are pickled to them (which fails) or
        # forked with its threads, and the run stops on a traceback after the data is read
        problems.append(
            f"  trainer.strategy={strategy!r}: runs start their processes through Lightning's launcher (the "
            "command runs once per process); use trainer.strategy=ddp (trainer=ddp)"
        )
    target = OmegaConf.select(cfg, "data.tgt_lang", default=None)
    if target:  # scoring its text may need extra packages: say so before any data is read
        try:
            bleu_tokenizer(str(target))
        except ValueError as err:
            problems.append(f"  data.tgt_lang={target!r}: {err}")
    task = None
    if cfg.get("task") is not None and not built_node_problems(cfg, ("task",)):  # else said below, by its key
        try:
            task = build_task(cfg.task)
        except ValueError as err:  # e.g. validation's search, named above by its own key
            if not problems:
                problems.append(f"  task: {err}")
    if task is not None:
        problems += task.check(cfg)
        names = task.validation_metric_names()
        for key in ("checkpoint.monitor", "early_stopping.monitor"):
            value = OmegaConf.select(cfg, key, default=None)
            if names is not None and value is not None and value not in names:
                problems.append(f"  {key}={value!r}: task={task.name} logs {sorted(names)}")
            problems += _mode_problems(cfg, key.split(".")[0], value)
        validates = OmegaConf.select(cfg, "trainer.limit_val_batches", default=None) != 0  # 0: no validation at all
        if validates and OmegaConf.select(cfg, "validation.bleu_every_n_epochs", default=1) == 0:
            watched = ["checkpoint.monitor"]
            if OmegaConf.select(cfg, "early_stopping.patience", default=None):  # 0, null: off
                watched.append("early_stopping.monitor")
            for key in watched:
                value = OmegaConf.select(cfg, key, default=None)
                if value in task.decoded_metrics:
                    problems.append(
                        f"  {key}={value!r}: validation.bleu_every_n_epochs=0 never decodes the validation set, "
                        f"so {value} is never computed; monitor val_loss (mode=min), or decode "
                        "(bleu_every_n_epochs >= 1)"
                    )
        test_size = OmegaConf.select(cfg, "data.test_size", default=None)
        if (
            test_size == 0
            and OmegaConf.select(cfg, "data.test", default=None) is None
            and cfg.get("test_after_training")
        ):
            problems.append(
                "  data.test_size=0 sets no test pairs aside, so test_after_training=true has nothing to score: set "
                "test_after_training=false, or data.test_size >= 1"
            )
        final = [key for key in ("val_after_training", "test_after_training") if cfg.get(key)]
        if final and not task.scores_final_model():
            problems.append(
                f"  {'/'.join(final)}=true: task={task.name} does not implement final_score and final_tag (formerly "
                "test and test_tag, for the test set alone); implement them, or set these false"
            )
    final = OmegaConf.select(cfg, "model.teacher_forcing_final", default=None)
    decay = OmegaConf.select(cfg, "model.teacher_forcing_decay_steps", default=0) or 0
    attention_dim = OmegaConf.select(cfg, "model.attention.attention_dim", default=None)
    if attention_dim is not None and (
        isinstance(attention_dim, bool) or not isinstance(attention_dim, int) or attention_dim < 1
    ):
        problems.append(
            f"  attention.attention_dim={attention_dim!r}: must be a whole number >= 1, or null (the hidden size)"
        )
    if not isinstance(decay, int) or isinstance(decay, bool) or decay < 0:
        problems.append(f"  model.teacher_forcing_decay_steps={decay!r}: must be a whole number >= 0 (0: no decay)")
    elif (final is None) != (decay <= 0):  # at training only: checkpoints made before load as they were
        problems.append(
            f"  model.teacher_forcing_final={final} with model.teacher_forcing_decay_steps={decay}: they go together "
            "(a decay to the one over the other); set both, or neither"
        )
    average = OmegaConf.select(cfg, "test_average_last", default=0)
    kept = OmegaConf.select(cfg, "checkpoint.keep_last_epochs", default=None)
    if isinstance(average, int) and isinstance(kept, int) and average > 1 and kept < average:
        problems.append(
            f"  test_average_last={average}: the final scores would average {average} epoch checkpoints, and "
            f"checkpoint.keep_last_epochs={kept} keeps {kept}; keep at least {average}, or average fewer"
        )
    problems += unused_groups(cfg)
    # the constructor's own checks beside every other problem, except where a model setting is among them (a
    # bad model.d_model, a group the model does not use), which the constructor would name a second time
    if not any(problem.lstrip().startswith("model") for problem in problems):
        problems += _model_build_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))


def _command_line_keys() -> list[str] | None:
    """The keys the command line gave (``+``/``~`` stripped); None without Hydra's record of it (a config
    composed in code)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    return [o.lstrip("+~").split("=", 1)[0] for o in HydraConfig.get().overrides.task]


def _given_unread(problems: list[str], key: str) -> list[str]:
    """Of the options a search block's strategy does not read, those the command line gave: a task's or an
    experiment's own values for another strategy (summarisation's beam_size=4 and length_penalty=2.0 with
    decode.strategy=greedy) are not the user's to remove. Without Hydra's record of the command line (the
    config composed in code), every one."""
    given = _command_line_keys()
    if given is None:
        return problems
    if key in given:  # the whole block given at once
        return problems
    return [p for p in problems if p.split("=", 1)[0] in given]


def _mode_problems(cfg: DictConfig, section: str, metric) -> list[str]:
    """A ``mode`` against its metric's direction (:func:`nmt.metrics.lower_is_better`: losses, perplexities
    and error rates fall, BLEU, chrF, ROUGE and accuracies rise). Watched the wrong way, best.ckpt was the
    worst checkpoint and early stopping ended runs that were improving."""
    mode = OmegaConf.select(cfg, f"{section}.mode", default=None)
    stopping_off = section == "early_stopping" and not OmegaConf.select(cfg, "early_stopping.patience")
    if not isinstance(metric, str) or mode not in ("min", "max") or stopping_off:
        return []
    falls = lower_is_better(metric)
    if mode == ("max" if falls else "min"):
        return [
            f"  {section}.mode={mode}: {section}.monitor={metric} is better {'lower' if falls else 'higher'}; "
            f"set {section}.mode={'min' if falls else 'max'}"
        ]
    return []


def _devices(devices) -> int:
    """How many devices ``trainer.devices`` names, where the config alone says (1 otherwise)."""
    if isinstance(devices, int) and devices > 1:
        return devices
    if isinstance(devices, list | ListConfig):
        return len(devices)
    return 1


def _model_class_problems(cfg: DictConfig) -> list[str]:
    """What the chosen model's class cannot do, before any data is read: the methods every model offers,
    compile=layers compiles the layers
    it lists (``repeated_layers``), graph_updates=true records a training step it says can be recorded
    (``replayable_updates``)."""
    model_class = target_class(cfg, "model")
    if model_class is None:
        return []
    problems = []
    missing = missing_methods(model_class)
    if missing:  # else training runs, and n-best scores or a decode fail on an AttributeError later
        problems.append(
            f"  model={model_class.__name__} does not define {', '.join(missing)}: every model offers "
            f"{', '.join(REQUIRED_METHODS)} (ARCHITECTURE.md, 'a model')"
        )
    if cfg.get("compile") == "layers" and not hasattr(model_class, "repeated_layers"):
        problems.append(f"  {no_repeated_layers(model_class)}")
    unrecordable = graph_updates.not_recordable(model_class) if cfg.get("graph_updates") else None
    if unrecordable:
        problems.append(f"  {unrecordable}")
    return problems


# the in-place random fills that weight initialisers end in
_RANDOM_FILLS = frozenset(
    {"normal_", "uniform_", "trunc_normal_", "bernoulli_", "exponential_", "geometric_", "log_normal_", "cauchy_"}
)


class _WithoutInit(TorchFunctionMode):
    """Weight initialisation skipped: on the meta device it fills nothing, and its random fills go through
    PyTorch's reference kernels, which import torch._dynamo (about a second of every train.py start and
    sweep plan). Every other call runs as it would."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init" or getattr(func, "__name__", "") in _RANDOM_FILLS:
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **kwargs)


def _model_build_problems(cfg: DictConfig) -> list[str]:
    """The model built on the meta device (no memory, no data) with stand-in vocabularies of the configured
    size: what its constructor refuses (``model.cell=lstmx``, an RNN's ``tie_embeddings=all``,
    ``model.init=foo``) is said now, not after the data is read and the tokenizers trained. Other failures
    are left to the real build, which reports them in its own words."""
    if OmegaConf.select(cfg, "model._target_", default=None) is None:
        return []
    vocab = OmegaConf.select(cfg, "data.tokenizer.vocab_size", default=None)
    vocab = vocab if isinstance(vocab, int) and vocab > 0 else 64
    try:
        with torch.device("meta"), _WithoutInit():
            build_model(cfg.model, vocab, vocab)
    except ValueError as err:
        return [f"  {err}"]
    except Exception:  # noqa: BLE001
        return []
    return []


def no_repeated_layers(model_class: type) -> str:
    """Why compile=layers cannot apply to ``model_class``, and what to set instead."""
    return (
        f"compile=layers: {model_class.__name__} has no repeated layers to compile one by one; "
        "use compile=true (or false)"
    )


def _deferred_guard_problems(cfg: DictConfig) -> list[str]:
    """check_every > 1 leaves skipping a non-finite update to the optimiser on the device."""
    every = cfg.get("check_every")
    if not isinstance(every, int) or every <= 1:
        return []
    problems = []
    if OmegaConf.select(cfg, "optim.optimizer.fused", default=None) is not True:
        problems.append(
            f"  check_every={every}: needs optim.optimizer.fused=true (a fused Adam or AdamW skips a non-finite "
            "update on the device), or check_every=1"
        )
    if str(OmegaConf.select(cfg, "trainer.precision", default="")) in ("16-mixed", "16"):
        problems.append(
            f"  check_every={every}: trainer.precision=16-mixed has a loss scaler that decides which updates "
            "to skip; use check_every=1"
        )
    return problems
