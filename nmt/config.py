"""Checks of the composed config, run before any data is read: each problem names the key, the value
and what is allowed. (Unknown group options and unknown keys are rejected by Hydra itself.)"""

from collections.abc import Callable

from omegaconf import DictConfig, OmegaConf

MATMUL_PRECISIONS = ("highest", "high", "medium")  # torch.set_float32_matmul_precision


class ConfigError(ValueError):
    """The config asks for something impossible; the message lists every problem found."""


def _rules() -> list[tuple[str, Callable[[object], bool], str]]:
    positive = (lambda v: isinstance(v, int) and v > 0, "a positive integer")
    non_negative = (lambda v: isinstance(v, int) and v >= 0, "an integer >= 0")
    probability = (lambda v: isinstance(v, int | float) and 0 <= v < 1, "a number in [0, 1)")
    rules = []
    for key in ("d_model", "num_heads", "ffn_dim", "hidden_size", "embed_dim"):
        rules.append((f"model.{key}", *positive))
    for key in ("encoder_layers", "decoder_layers", "num_layers"):
        rules.append((f"model.{key}", *positive))
    for key in ("dropout", "attention_dropout", "activation_dropout"):
        rules.append((f"model.{key}", *probability))
    rules += [
        ("smoothing.smoothing", *probability),
        ("data.max_tokens", *positive),
        ("data.eval_max_tokens", *positive),
        ("data.max_len", *positive),
        ("data.num_workers", *non_negative),
        ("data.tokenizer.vocab_size", lambda v: isinstance(v, int) and v >= 8, "an integer >= 8"),
        ("decode.beam_size", *positive),
        ("validation.search.beam_size", *positive),
        ("validation.bleu_every_n_epochs", *non_negative),
        ("checkpoint.keep_last_epochs", *non_negative),
        ("checkpoint.mode", lambda v: v in ("min", "max"), "one of ['min', 'max']"),
        ("early_stopping.mode", lambda v: v in ("min", "max"), "one of ['min', 'max']"),
        ("trainer.max_epochs", lambda v: isinstance(v, int) and v >= -1, "an integer >= -1"),
        ("matmul_precision", lambda v: v in MATMUL_PRECISIONS, f"one of {list(MATMUL_PRECISIONS)}"),
        (
            "trainer.precision",
            lambda v: str(v) in ("auto", "32-true", "32", "bf16-mixed", "16-mixed", "bf16-true", "64-true"),
            "one of ['auto', '32-true', 'bf16-mixed', '16-mixed', 'bf16-true', '64-true']",
        ),
    ]
    return rules


def check_config(cfg: DictConfig) -> None:
    """Raise ConfigError listing every invalid value in ``cfg``."""
    problems = []
    for key, ok, allowed in _rules():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and not ok(value):
            problems.append(f"  {key}={value!r}: must be {allowed}")
    d_model = OmegaConf.select(cfg, "model.d_model", default=None)
    heads = OmegaConf.select(cfg, "model.num_heads", default=None)
    if isinstance(d_model, int) and isinstance(heads, int) and heads > 0 and d_model % heads:
        divisors = [h for h in range(1, d_model + 1) if d_model % h == 0 and h <= 64]
        problems.append(
            f"  model.d_model={d_model} is not divisible by model.num_heads={heads}; "
            f"valid head counts for this d_model: {divisors}"
        )
    for key, allowed in (
        ("model.norm_position", ["pre", "post"]),
        ("model.activation", ["relu", "gelu"]),
        ("model.tie_embeddings", ["none", "decoder", "all"]),
        ("decode.strategy", ["greedy", "beam", "sample"]),
        ("validation.search.strategy", ["greedy", "beam", "sample"]),
    ):
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None and value not in allowed:
            problems.append(f"  {key}={value!r}: must be one of {allowed}")
    problems += _task_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(problems))


LM_MODELS = ("nmt.models.transformer_lm.TransformerLM",)
LM_DATA = ("nmt.data.ptb.PTBDataModule",)


def _task_problems(cfg: DictConfig) -> list[str]:
    """task=lm needs a language model and a word stream; translation needs neither."""
    task = OmegaConf.select(cfg, "task", default="translation")
    model = OmegaConf.select(cfg, "model._target_", default=None)
    data = OmegaConf.select(cfg, "data._target_", default=None)
    if task not in ("translation", "lm"):
        return [f"  task={task!r}: must be one of ['translation', 'lm']"]
    problems = []
    if model is not None and (model in LM_MODELS) != (task == "lm"):
        wanted = "model=transformer_lm" if task == "lm" else "model=transformer or model=rnn"
        problems.append(f"  task={task} cannot train {model}: use {wanted}")
    if data is not None and (data in LM_DATA) != (task == "lm"):
        wanted = "data=ptb" if task == "lm" else "a parallel corpus (multi30k, zh_en, files, ...)"
        problems.append(f"  task={task} cannot read {data}: use {wanted}")
    return problems
