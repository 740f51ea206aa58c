"""Checks of the chosen model before any data is read: the methods its class offers, what its constructor
refuses (built on the meta device), and its settings that go together."""

import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from torch.overrides import TorchFunctionMode

from nmt.models.build import REQUIRED_METHODS, build_model, missing_methods
from nmt.training import graph_updates
from nmt.training.config_groups import target_class


def model_class_problems(cfg: DictConfig) -> list[str]:
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
            f"{', '.join(REQUIRED_METHODS)} (ARCHITECTURE.md, 'A model, step by step')"
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


def model_build_problems(cfg: DictConfig) -> list[str]:
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
            model = build_model(cfg.model, vocab, vocab)
    except ValueError as err:
        return [f"  {err}"]
    except InstantiationException as err:  # the constructor's own TypeError: a setting of the wrong type
        return _wrong_type(cfg, "model", err)
    except Exception:  # noqa: BLE001
        return []
    return position_table_problems(cfg, model)


def position_table_problems(cfg: DictConfig, model) -> list[str]:
    """A learned position table (``pos=learned``, or a model's own) too short for the training text: the
    longest pair data.max_len keeps (a side of up to max_len - 1 subword tokens, and its end or start token),
    a language model's data.block_size window, a source cut to data.max_src_len with its end token. It was
    found at the first batch that reached past it, after the data was read and the tokenizers trained."""
    limits = getattr(model, "position_limits", None)
    if limits is None:
        return []
    src_table, tgt_table = limits()
    data = cfg.get("data") or {}
    needs = []  # (key, positions it needs, the table)
    if getattr(model, "decoder_only", False):
        if isinstance(data.get("block_size"), int):
            needs.append((f"data.block_size={data.block_size}", data.block_size, tgt_table))
    elif isinstance(data.get("max_len"), int):
        needs.append((f"data.max_len={data.max_len}", data.max_len, tgt_table))
        max_src_len = data.get("max_src_len")
        if isinstance(max_src_len, int):
            needs.append((f"data.max_src_len={max_src_len}", max_src_len + 1, src_table))
        else:
            needs.append((f"data.max_len={data.max_len}", data.max_len, src_table))
    said = set()
    problems = []
    for key, need, table in needs:
        if table is not None and table < need and key not in said:
            said.add(key)
            size = f"pos.max_len={table}" if OmegaConf.select(cfg, "pos.max_len", default=None) == table else str(table)
            problems.append(
                f"  {key} trains on up to {need} positions, and the model's learned position table holds {size}: "
                f"raise the table to {need} or more, or lower {key.split('=')[0]}"
            )
    return problems


def _wrong_type(cfg: DictConfig, node: str, err: InstantiationException) -> list[str]:
    """One line for a constructor's TypeError (a setting of the wrong type: ``model.kernel_size=abc``),
    naming the class; nothing for another failure, left to the real build."""
    if not isinstance(err.__cause__, TypeError):
        return []
    target = str(OmegaConf.select(cfg, f"{node}._target_")).rsplit(".", 1)[-1]
    return [
        f"  {node} ({target}) could not be built: TypeError: {str(err.__cause__).splitlines()[0]}; a "
        f"{node}.<key> of the wrong type? (each as its conf/{node}/ file gives it)"
    ]


def loss_build_problems(cfg: DictConfig) -> list[str]:
    """The loss built as training builds it (cheap: no weights to speak of): what its constructor refuses
    (``smoothing.smoothing=1.5``, a new loss's option out of range) or a setting of the wrong type, said now,
    in one line, not after the run folder is made."""
    from nmt.data.tokenizer import PAD_ID
    from nmt.utils.instantiate import instantiate

    if OmegaConf.select(cfg, "smoothing._target_", default=None) is None:
        return []
    try:
        instantiate(cfg.smoothing, pad_id=PAD_ID)
    except ValueError as err:
        return [f"  {err}"]
    except InstantiationException as err:
        return _wrong_type(cfg, "smoothing", err)
    except Exception:  # noqa: BLE001  left to the real build, which reports it in its own words
        return []
    return []


def no_repeated_layers(model_class: type) -> str:
    """Why compile=layers cannot apply to ``model_class``, and what to set instead."""
    return (
        f"compile=layers: {model_class.__name__} has no repeated layers to compile one by one; "
        "use compile=true (or false)"
    )


def model_value_problems(cfg: DictConfig) -> list[str]:
    """An RNN's attention size and its teacher-forcing schedule."""
    problems = []
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
    return problems
