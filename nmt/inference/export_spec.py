"""What CTranslate2's Transformer specification holds of a model of this project: the specification built
from it (:func:`build_spec`), and what it cannot hold refused in one line naming the option
(:func:`check_exportable`). The export itself: :mod:`nmt.inference.export`.

The Transformer's variants map onto it, but for the position encodings named below as refused:
pre- or post-norm, LayerNorm or RMSNorm, ReLU or GELU, sinusoidal or learned absolute positions (their table is written
out, so CTranslate2 adds exactly ours), none, Shaw et al.'s relative positions (keys and values, clipped
distances), rotary positions (the half-split layout, their base), T5's bucketed bias (CTranslate2's own, with
T5's bucket rule), and tied or separate embeddings. Recurrent models, language models, relative positions
without value vectors, ALiBi and any other encoding or norm by its exact class are refused.
"""

import numpy as np
import torch

from nmt.inference.loading import LoadedModel
from nmt.modules.norm import LayerNorm, RMSNorm
from nmt.modules.position import (
    BucketBias,
    LearnedPosition,
    PositionEncoding,
    RelativePosition,
    RotaryPosition,
    SinusoidalPosition,
    sinusoid_table,
)
from nmt.utils.configs import CONF

MAX_POSITIONS = 1024  # rows of the absolute position table written for CTranslate2


def _model_option(target: str, group: str = "model") -> str:
    """The option of config group ``group`` whose config builds ``target`` (what a user names it), else the
    class name."""
    from omegaconf import OmegaConf

    for path in sorted((CONF / group).glob("*.yaml")):
        if OmegaConf.load(path).get("_target_") == target:
            return path.stem
    return target.rsplit(".", 1)[-1]


def _option(part, group: str) -> str:
    """The ``group`` option (pos, norm) that built the module ``part``."""
    return _model_option(f"{type(part).__module__}.{type(part).__qualname__}", group)


class ExportError(ValueError):
    """A model the target format cannot represent; the message names the option."""


def _norm_kind(norm) -> tuple[bool, float]:
    """(rms, eps) of one of our norms (check_exportable refused any other)."""
    return isinstance(norm, RMSNorm), float(norm.eps)


def _array(tensor: torch.Tensor):
    """A float32 copy: CTranslate2 converts and quantizes its arrays in place, which must not reach the
    model's own parameters (``.numpy()`` of a float32 tensor shares its memory)."""
    return tensor.detach().to(torch.float32).cpu().numpy().copy()


def _set_norm(spec, norm) -> None:
    spec.gamma = _array(norm.weight)
    if hasattr(norm, "bias"):
        spec.beta = _array(norm.bias)


def _linear(spec, *layers) -> None:
    """One CTranslate2 linear from one or several of ours (fused along the output axis)."""
    spec.weight = _array(torch.cat([layer.weight for layer in layers]))
    biases = [layer.bias for layer in layers]
    if all(b is not None for b in biases):
        spec.bias = _array(torch.cat(biases))


def check_exportable(loaded: LoadedModel) -> None:
    """ExportError naming what CTranslate2's Transformer specification cannot represent."""
    from nmt.models.transformer import Transformer

    if not loaded.task.reads_source:
        raise ExportError(f"task={loaded.task.name}: a language model; the export writes encoder-decoder models only")
    model = loaded.model
    if type(model) is not Transformer:  # by exact class: a subclass may compute otherwise (scaled logits, say)
        target = str(loaded.config["model"].get("_target_", "?"))
        subclass = isinstance(model, Transformer)
        raise ExportError(
            f"model={_model_option(target)} ({target.rsplit('.', 1)[-1]}, "
            f"{'a subclass of Transformer, another model' if subclass else 'not a Transformer'}): CTranslate2's "
            f"Transformer specification holds {Transformer.__module__}.Transformer only; "
            + ("add the subclass's mapping in nmt/inference/export_spec.py, or " if subclass else "")
            + "translate with translate.py"
        )
    position = model.src_pos
    if isinstance(position, RelativePosition) and not position.use_values:
        raise ExportError("pos.use_values=false: CTranslate2's relative positions always add value vectors")
    # by exact class: a new encoding or norm written as a subclass of one of these (a scaled sinusoid) is
    # another model, which would be written as its parent
    known = (PositionEncoding, SinusoidalPosition, LearnedPosition, RelativePosition, RotaryPosition, BucketBias)
    if type(position) not in known:
        takes = ", ".join(sorted(_model_option(f"{c.__module__}.{c.__qualname__}", "pos") for c in known))
        raise ExportError(f"pos={_option(position, 'pos')}: no CTranslate2 equivalent (it takes {takes})")
    norm = model.encoder[0].attn_block.norm
    if type(norm) not in (LayerNorm, RMSNorm):
        takes = ", ".join(
            sorted(_model_option(f"{c.__module__}.{c.__qualname__}", "norm") for c in (LayerNorm, RMSNorm))
        )
        raise ExportError(f"norm={_option(norm, 'norm')}: no CTranslate2 equivalent (it takes {takes})")
    activation = loaded.config["model"].get("activation", "relu")
    if activation not in ("relu", "gelu"):
        raise ExportError(f"model.activation={activation}: CTranslate2 takes relu or gelu here")


def build_spec(loaded: LoadedModel):
    """CTranslate2's TransformerSpec holding this model's weights."""
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(loaded)
    model = loaded.model
    first = model.encoder[0]
    pre_norm = first.attn_block.pre_norm
    rms, eps = _norm_kind(first.attn_block.norm)
    position = model.src_pos
    relative = isinstance(position, RelativePosition)
    rotary = isinstance(position, RotaryPosition)
    buckets = isinstance(position, BucketBias)
    activation = (
        common_spec.Activation.GELU
        if loaded.config["model"].get("activation") == "gelu"
        else common_spec.Activation.RELU
    )
    heads = first.self_attn.num_heads
    options = {
        "pre_norm": pre_norm,
        "activation": activation,
        "relative_position": relative,
        "relative_attention_bias": buckets,
        "rms_norm": rms,
    }
    if rotary:
        options |= {"rotary_dim": 0, "rotary_interleave": False, "rotary_base": float(_rotary_base(position))}
    encoder = transformer_spec.TransformerEncoderSpec(len(model.encoder), heads, **options)
    decoder = transformer_spec.TransformerDecoderSpec(len(model.decoder), heads, **options)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    encoder.embeddings[0].weight = _array(model.src_embed.weight)
    decoder.embeddings.weight = _array(model.tgt_embed.weight)
    for stack, ours in ((encoder, model.src_pos), (decoder, model.tgt_pos)):
        if hasattr(stack, "position_encodings"):
            stack.position_encodings.encodings = _array(_absolute_table(ours, model.d_model))
    for layer, theirs in zip(model.encoder, encoder.layer, strict=True):
        _attention(theirs.self_attention, layer.self_attn, layer.attn_block.norm, self_attention=True)
        _ffn(theirs.ffn, layer.ffn, layer.ffn_block.norm)
    for layer, theirs in zip(model.decoder, decoder.layer, strict=True):
        _attention(theirs.self_attention, layer.self_attn, layer.self_block.norm, self_attention=True)
        _attention(theirs.attention, layer.cross_attn, layer.cross_block.norm, self_attention=False)
        _ffn(theirs.ffn, layer.ffn, layer.ffn_block.norm)
    if pre_norm:
        _set_norm(encoder.layer_norm, model.encoder_norm)
        _set_norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = _array(model.output.weight)
    if relative:
        for stack, ours in ((encoder, model.src_pos), (decoder, model.tgt_pos)):
            for layer in stack.layer:
                layer.self_attention.relative_position_keys = _array(ours.keys.weight)
                layer.self_attention.relative_position_values = _array(ours.vals.weight)
    if buckets:  # CTranslate2's T5 bias: T5's buckets (both sides in an encoder, keys behind in a decoder), a
        # (buckets, heads) table added to the scores after their scaling, as ours; one table a stack, in each layer
        for stack, ours in ((encoder, model.src_pos), (decoder, model.tgt_pos)):
            for layer in stack.layer:
                layer.self_attention.relative_attention_bias = _array(ours.table.weight)
                layer.self_attention.relative_attention_max_distance = np.int32(ours.max_distance)
    spec.config.layer_norm_epsilon = eps
    spec.config.add_source_eos = True  # our encoder reads the source pieces and then </s>
    spec.register_source_vocabulary(_vocabulary(loaded.src_tokenizer))
    spec.register_target_vocabulary(_vocabulary(loaded.tgt_tokenizer))
    return spec


def _rotary_base(position: RotaryPosition) -> float:
    inv_freq = position.inv_freq  # base ** (-2i / head_dim): the second entry gives the base back
    head_dim = 2 * len(inv_freq)
    return float(inv_freq[1] ** (-head_dim / 2)) if len(inv_freq) > 1 else 10000.0


def _absolute_table(position, d_model: int) -> torch.Tensor:
    """What our stack adds to its scaled embeddings at positions 0.. (zeros: nothing)."""
    if isinstance(position, SinusoidalPosition):
        return sinusoid_table(torch.arange(MAX_POSITIONS), d_model)
    if isinstance(position, LearnedPosition):
        return position.table.weight.detach().float()
    return torch.zeros(MAX_POSITIONS, d_model)


def _attention(spec, attention, norm, self_attention: bool) -> None:
    if self_attention:
        _linear(spec.linear[0], attention.q_proj, attention.k_proj, attention.v_proj)
        _linear(spec.linear[1], attention.out_proj)
    else:
        _linear(spec.linear[0], attention.q_proj)
        _linear(spec.linear[1], attention.k_proj, attention.v_proj)
        _linear(spec.linear[2], attention.out_proj)
    _set_norm(spec.layer_norm, norm)


def _ffn(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.up)
    _linear(spec.linear_1, ffn.down)
    _set_norm(spec.layer_norm, norm)


def _vocabulary(tokenizer) -> list[str]:
    return [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.sp.get_piece_size())]


# every file an export writes or has written: CTranslate2's model, its config and vocabularies (JSON; text
# in its older versions), our SentencePiece models and manifest
