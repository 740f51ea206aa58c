"""Each value of the composed config against its rule (a positive integer, a probability, one of a list),
and the checks that compare two values; every problem names the key, the value and what is allowed."""

import re
from collections.abc import Callable

from omegaconf import DictConfig, ListConfig, OmegaConf

from nmt.training.config_groups import switches
from nmt.training.optim import DECAYS

MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision


# Lightning's accelerators that need nothing beyond torch ("gpu" is CUDA's or MPS's, whichever there is)
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


# keys whose null their reader takes as its default (a trainer's null: Lightning's own, as build_trainer passes
# none; these: highest, 1, no averaging, no compile), though their rules name no null
NULL_IS_DEFAULT = frozenset({"matmul_precision", "check_every", "test_average_last", "compile"})


# switches whose default is null (chosen by the device), which conf/ therefore does not write as true or false
NULLABLE_SWITCHES = frozenset({"data.batches_on_device", "optim.optimizer.fused"})


def number(value: object) -> bool:
    """An int or float, not a bool (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def interpolated(cfg: DictConfig, key: str) -> bool:
    """Whether ``key`` takes its value from another key (``optim.optimizer.lr: ${lr}``), whose own rule says
    it once."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return isinstance(node, DictConfig) and leaf in node and node._get_node(leaf)._is_interpolation()


def _rules() -> list[tuple[str, Callable[[object], bool], str]]:
    positive = (lambda v: number(v) and isinstance(v, int) and v > 0, "a positive integer")
    non_negative = (lambda v: number(v) and isinstance(v, int) and v >= 0, "an integer >= 0")
    probability = (lambda v: number(v) and 0 <= v < 1, "a number in [0, 1)")
    positive_or_null = (lambda v: number(v) and isinstance(v, int) and v > 0, "a positive integer or null")
    non_negative_or_null = (lambda v: number(v) and isinstance(v, int) and v >= 0, "an integer >= 0 or null (0: off)")

    def batches_or_share(v) -> bool:  # Lightning's int (batches) or float (a share of an epoch)
        return (number(v) and not isinstance(v, float) and v > 0) or (isinstance(v, float) and 0 < v <= 1)

    rules = []
    for key in ("d_model", "num_heads", "ffn_dim", "hidden_size", "embed_dim"):
        rules.append((f"model.{key}", *positive))
    for key in ("encoder_layers", "decoder_layers", "num_layers"):
        rules.append((f"model.{key}", *positive))
    for key in ("dropout", "attention_dropout"):
        rules.append((f"model.{key}", *probability))
    rules.append(("model.activation_dropout", probability[0], "a number in [0, 1), or null (model.dropout's)"))
    rules += [
        ("smoothing.smoothing", *probability),
        ("smoothing.fused", lambda v: isinstance(v, bool), "true or false"),
        ("data.max_tokens", *positive),
        ("data.eval_max_tokens", positive[0], "a positive integer, or null (data.max_tokens)"),
        ("data.max_len", *positive),
        ("data.num_workers", *non_negative),
        ("data.tokenizer.vocab_size", lambda v: number(v) and isinstance(v, int) and v >= 8, "an integer >= 8"),
        (
            "data.tokenizer.character_coverage",
            lambda v: number(v) and 0 < v <= 1,
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
        ("early_stopping.after_warmup", lambda v: isinstance(v, bool), "true or false"),
        (
            "trainer.max_epochs",
            lambda v: number(v) and isinstance(v, int) and v >= -1,
            "an integer >= -1, or null (Lightning's default: trainer.max_steps alone, else 1000 epochs)",
        ),
        # Lightning's own checks of these say a bare name, or nothing: a negative count of sanity batches
        # and a deterministic='maybe' trained without a word
        ("trainer.num_nodes", *positive),
        (
            "trainer.num_sanity_val_steps",
            lambda v: number(v) and isinstance(v, int) and v >= -1,
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
        ("seed", lambda v: number(v) and isinstance(v, int) and 0 <= v < 2**32, "an integer from 0 to 4294967295"),
        # the seed of the splits cut from a pool: a word was taken as a seed of its own
        ("data.split_seed", lambda v: number(v) and isinstance(v, int), "an integer"),
        (
            "progress.every_s",
            lambda v: number(v) and 0 <= v < float("inf"),
            "a number of seconds >= 0 (0: a line at every update)",
        ),
        (
            "trainer.limit_val_batches",
            lambda v: (number(v) and isinstance(v, int) and v >= 0) or (isinstance(v, float) and 0 <= v <= 1),
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
        ("model.teacher_forcing", number, "a number (a probability in [0, 1])"),
        ("model.teacher_forcing_final", number, "a number (a probability in [0, 1]), or null"),
        ("data.test_size", *non_negative),
        ("lr", lambda v: number(v) and 0 < v < float("inf"), "a positive finite number"),
        ("weight_decay", lambda v: number(v) and v >= 0, "a number >= 0"),
        ("max_bad_steps", *non_negative),
        # the optimiser's and schedule's values: torch refuses some only once the data is read, others never
        ("optim.optimizer.lr", lambda v: number(v) and 0 < v < float("inf"), "a positive finite number"),
        ("optim.optimizer.eps", lambda v: number(v) and v >= 0, "a number >= 0"),
        ("optim.optimizer.weight_decay", lambda v: number(v) and v >= 0, "a number >= 0"),
        (
            "optim.optimizer.betas",
            lambda v: isinstance(v, list | ListConfig) and len(v) == 2 and all(number(b) and 0 <= b < 1 for b in v),
            "two numbers in [0, 1), as [0.9, 0.98]",
        ),
        (
            "optim.scheduler.min_ratio",
            lambda v: number(v) and 0 <= v <= 1,
            "a number in [0, 1] (the share of the peak rate the decay ends at)",
        ),
        ("optim.scheduler.factor", lambda v: number(v) and 0 < v < float("inf"), "a positive finite number"),
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


def ruled_keys() -> frozenset[str]:
    """The keys with a rule of their own here."""
    return frozenset(key for key, _, _ in _rules())


def value_problems(cfg: DictConfig) -> list[str]:
    """Every value against its rule, every switch given true or false, and the values that must agree."""
    problems = []
    rules = _rules()
    absent = object()
    for key, ok, allowed in rules:
        value = OmegaConf.select(cfg, key, default=absent)
        if value is absent or interpolated(cfg, key):
            continue
        if value is None:  # null where the rule takes none: model.teacher_forcing=null failed at the first update
            if "null" not in allowed and not key.startswith("trainer.") and key not in NULL_IS_DEFAULT:
                problems.append(f"  {key}=null: must be {allowed}")
            continue
        # a number's test takes no true or false (number): Python counts True as 1, and lr=true trained at 1.0
        if not ok(value):
            problems.append(f"  {key}={value!r}: must be {allowed}")
    ruled = {key for key, _, _ in rules}
    for key in sorted((switches() | NULLABLE_SWITCHES) - ruled):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not isinstance(value, bool) and not interpolated(cfg, key):
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
    low, high = (OmegaConf.select(cfg, f"data.{k}_words", default=None) for k in ("min", "max"))
    if number(low) and number(high) and low > high:
        problems.append(f"  data.min_words={low} is above data.max_words={high}: the toy sentences need min <= max")
    scheduler = OmegaConf.select(cfg, "optim.scheduler", default=None)
    decay, floor = (OmegaConf.select(cfg, f"optim.scheduler.{k}", default=None) for k in ("decay", "min_ratio"))
    if decay in ("inverse_sqrt", "constant") and number(floor) and floor != 0:
        problems.append(
            f"  optim.scheduler.min_ratio={floor}: decay={decay} does not read it (cosine and linear decay to it); "
            "leave it 0, or choose optim.scheduler.decay=cosine or linear"
        )
    if (
        isinstance(scheduler, DictConfig)
        and "d_model" in scheduler
        and interpolated(cfg, "optim.scheduler.d_model")
        and OmegaConf.select(cfg, "model.d_model", default=None) is None
    ):  # the schedule's fallback of 512 would scale the rate by a width the model does not have
        problems.append(
            "  optim.scheduler.d_model: the schedule scales its rate by d_model ** -0.5, and this model has no "
            "model.d_model: set optim.scheduler.d_model (e.g. the model's hidden size), or choose optim=adamw"
        )
    return problems
