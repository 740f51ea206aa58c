"""Building a model from its config group: the sub-configs (``pos``, ``norm``, ...) arrive as factories."""

from torch import nn

from nmt.data.tokenizer import PAD_ID
from nmt.utils.instantiate import as_config, instantiate


def build_model(model_cfg, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    """The model of group ``model`` for these vocabulary sizes."""
    return instantiate(
        as_config(model_cfg), src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, pad_id=PAD_ID
    )


# what the layers above call on every model (training, the searches, n-best scores, alignments, heatmaps and
# serve.py): ARCHITECTURE.md ("a model") gives their shapes
REQUIRED_METHODS = ("forward", "encode", "decode_step", "attention_maps")


def missing_methods(model_class: type) -> list[str]:
    """The methods of :data:`REQUIRED_METHODS` that ``model_class`` does not define."""
    own = {name: getattr(model_class, name, None) for name in REQUIRED_METHODS}
    # nn.Module's own forward only raises NotImplementedError
    return [name for name, method in own.items() if not callable(method) or method is nn.Module.forward]


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
