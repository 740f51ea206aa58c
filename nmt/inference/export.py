"""A checkpoint as a CTranslate2 model, for fast CPU and GPU serving (``python export.py``).

Every Transformer variant of this project maps onto CTranslate2's Transformer specification: pre- or
post-norm, LayerNorm or RMSNorm, ReLU or GELU, sinusoidal or learned absolute positions (their table is
written out, so CTranslate2 adds exactly ours), none, Shaw et al.'s relative positions (keys and values,
clipped distances), rotary positions (the half-split layout), and tied or separate embeddings. What the
specification cannot hold is refused in one line naming the option: recurrent models, language models,
and relative positions without value vectors are not exported.

The folder holds CTranslate2's model and vocabularies plus our SentencePiece models (``source.model``,
``target.model``): pieces in, pieces out, as :func:`translate_pieces` shows.
"""

import json
import logging
import os
import shutil
from pathlib import Path

import torch

from nmt.decoding.constraints import position_limits
from nmt.decoding.settings import search_settings
from nmt.decoding.translate import input_limit
from nmt.inference.loading import LoadedModel
from nmt.modules.norm import LayerNorm, RMSNorm
from nmt.modules.position import (
    LearnedPosition,
    PositionEncoding,
    RelativePosition,
    RotaryPosition,
    SinusoidalPosition,
    sinusoid_table,
)
from nmt.utils.io import atomic_write_text

log = logging.getLogger(__name__)
MAX_POSITIONS = 1024  # rows of the absolute position table written for CTranslate2
FORMATS = ("ctranslate2",)
CT2_MAX_INPUT_LENGTH = 1024  # translate_batch's default max_input_length: pieces a source keeps, end token in


def _model_option(target: str, group: str = "model") -> str:
    """The option of config group ``group`` whose config builds ``target`` (what a user names it), else the
    class name."""
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[2] / "conf"  # the configs beside the package
    for path in sorted((conf / group).glob("*.yaml")):
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
    if not isinstance(model, Transformer):
        target = str(loaded.config["model"].get("_target_", "?"))
        raise ExportError(
            f"model={_model_option(target)} ({target.rsplit('.', 1)[-1]}): CTranslate2's Transformer "
            "specification holds Transformers only (recurrent models are not exported)"
        )
    position = model.src_pos
    if isinstance(position, RelativePosition) and not position.use_values:
        raise ExportError("pos.use_values=false: CTranslate2's relative positions always add value vectors")
    # by exact class: a new encoding or norm written as a subclass of one of these (a scaled sinusoid) is
    # another model, which would be written as its parent
    known = (PositionEncoding, SinusoidalPosition, LearnedPosition, RelativePosition, RotaryPosition)
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
    activation = (
        common_spec.Activation.GELU
        if loaded.config["model"].get("activation") == "gelu"
        else common_spec.Activation.RELU
    )
    heads = first.self_attn.num_heads
    options = {"pre_norm": pre_norm, "activation": activation, "relative_position": relative, "rms_norm": rms}
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
EXPORT_FILES = {
    "model.bin",
    "config.json",
    *(f"{side}vocabulary.{ext}" for side in ("shared_", "source_", "target_", "") for ext in ("json", "txt")),
    "source.model",
    "target.model",
    "nmt_export.json",
}


PARTIAL = ".nmt_export_partial"  # in an export's folder from its first file moved in until its manifest


def decoding_defaults(decode: dict | None) -> dict:
    """The run's own search (its config's ``decode`` block) as ``translate_batch`` options, those whose
    meaning CTranslate2 shares: the strategy and its beam or sampling settings, the minimum output length
    (both count the tokens before the end token) and n-gram blocking, so that an exported summariser keeps
    its floor and its trigram blocking. The length penalty is not carried (CTranslate2's is another formula),
    nor the length limit relative to the source (CTranslate2 has a fixed one)."""
    search = search_settings(decode, None, refuse_unread=False)
    options = {"min_decoding_length": search.min_len, "no_repeat_ngram_size": search.no_repeat_ngram_size}
    if search.strategy == "beam":
        return {**options, "beam_size": search.beam_size}
    if search.strategy == "sample":  # CTranslate2 samples where beam_size is 1; top_k 0: the whole vocabulary
        return {
            **options,
            "beam_size": 1,
            "sampling_topk": search.top_k,
            "sampling_topp": search.top_p,
            "sampling_temperature": search.temperature,
        }
    return {**options, "beam_size": 1}  # greedy


def export_ctranslate2(loaded: LoadedModel, out_dir: str | Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model of ``loaded`` (weights in ``quantization``: None keeps float32; int8,
    int8_float32, float16, bfloat16, ...) with our SentencePiece models beside it."""
    out_dir = Path(out_dir).resolve()  # "." and ".." have no name to put a staging folder beside
    spec = build_spec(loaded)
    spec.validate()
    try:
        spec.optimize(quantization=quantization)
    except ValueError as err:  # CTranslate2's list of the types it accepts, with the key named
        raise ValueError(f"quantization={quantization}: {err}") from None
    # written whole into a folder beside it, then moved in file by file (each a rename), the previous manifest
    # removed first and ours written last: a killed export leaves the previous export whole, or a folder
    # without nmt_export.json (which loading refuses), never a half-written file or a mismatched manifest
    staging = out_dir.with_name(f".{out_dir.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        spec.save(str(staging))
        (staging / "source.model").write_bytes(loaded.src_tokenizer.model_proto)
        (staging / "target.model").write_bytes(loaded.tgt_tokenizer.model_proto)
        out_dir.mkdir(parents=True, exist_ok=True)
        # an export under way says so until its manifest is written: a killed one is ours to complete
        atomic_write_text(out_dir / PARTIAL, "an export of nmt under way (nmt_export.json comes last)\n")
        (out_dir / "nmt_export.json").unlink(missing_ok=True)
        # an earlier export's files this one does not write (its separate vocabularies where this one has a
        # shared one): CTranslate2 would read them beside ours; files of other names are the user's, kept
        for stale in EXPORT_FILES - {path.name for path in staging.iterdir()}:
            (out_dir / stale).unlink(missing_ok=True)
        for path in sorted(staging.iterdir()):
            os.replace(path, out_dir / path.name)
        tok = loaded.src_tokenizer, loaded.tgt_tokenizer
        segmenters = {"source": tok[0].segmenter.spec(), "target": tok[1].segmenter.spec()}
        manifest = {
            "checkpoints": loaded.checkpoints,
            "quantization": quantization,
            "segmenters": segmenters,
            # a learned position table's sizes (source, target), which CTranslate2's default limits pass
            "position_limits": list(position_limits(loaded.model)),
            # the subword tokens our translator cuts a source to (the run's data.max_src_len, else 256)
            "max_input_len": input_limit(loaded.config.get("data") or {}),
            # the run's search as CTranslate2's options: CTranslate2Model.translate's defaults
            "decode": decoding_defaults(loaded.config.get("decode")),
        }
        atomic_write_text(out_dir / "nmt_export.json", json.dumps(manifest, indent=1) + "\n")
        (out_dir / PARTIAL).unlink(missing_ok=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


class CTranslate2Model:
    """An exported folder ready to translate raw lines: our tokenizers (SentencePiece, and the word
    segmenter of languages that need one) around a ``ctranslate2.Translator`` loaded once."""

    def __init__(self, model_dir: str | Path, device: str = "cpu", **translator_options) -> None:
        import ctranslate2

        from nmt.data.tokenizer import Tokenizer

        model_dir = Path(model_dir)
        manifest = json.loads((model_dir / "nmt_export.json").read_text())
        segmenters = manifest.get("segmenters", {})
        self.position_limits = manifest.get("position_limits") or [None, None]
        # exported before the manifest held our limit: CTranslate2's own (1,024) stands, as it did, and is said
        self.max_input_len = manifest.get("max_input_len")
        if self.max_input_len is None:
            log.warning(
                "%s was exported before its manifest held the run's source limit: sources are cut at CTranslate2's "
                "own (1,024 pieces, or a learned table's size), not where this project's translator cuts them; "
                "export it again to cut them alike",
                model_dir,
            )
        # exported before the manifest held the run's search: CTranslate2's defaults (beam 2, no minimum
        # length, no n-gram blocking) stand, as they did, and are said
        self.decoding = manifest.get("decode")
        if self.decoding is None:
            log.warning(
                "%s was exported before its manifest held the run's decoding settings: CTranslate2's defaults "
                "(beam_size=2, min_decoding_length=1, no n-gram blocking) stand, not the run's; export it again "
                "to keep them (a summariser's minimum length and trigram blocking)",
                model_dir,
            )
        self.source = Tokenizer((model_dir / "source.model").read_bytes(), segmenters.get("source"))
        self.target = Tokenizer((model_dir / "target.model").read_bytes(), segmenters.get("target"))
        self.translator = ctranslate2.Translator(str(model_dir), device=device, **translator_options)

    def translate(self, lines: list[str], **options) -> list[str]:
        """The best translation of each line. ``options`` go to ``translate_batch`` (beam_size,
        max_decoding_length, ...); those not given are the run's own search (``decoding``: its beam size,
        minimum length and n-gram blocking), with the start and padding tokens suppressed as ours never outputs
        them. By default a source is cut where our translator cuts it (the
        run's limit, and a learned position table's size less the end token) and a model with such a table
        decodes outputs as long as it holds."""
        # our search never outputs the start or padding token; CTranslate2 may (a model trained briefly chose
        # <s> at every step, which decoding drops: an empty translation, unsaid)
        options.setdefault("suppress_sequences", [["<s>"], ["<pad>"]])
        for key, value in (self.decoding or {}).items():
            if key.startswith("sampling_") and options.get("beam_size", 1) != 1:
                continue  # a beam asked of a sampling run's export: CTranslate2 samples only with beam 1
            options.setdefault(key, value)
        if options.get("num_hypotheses", 1) != 1:
            raise ValueError(
                f"num_hypotheses={options['num_hypotheses']}: translate returns each line's best; for n-best lists "
                "call self.translator.translate_batch on self.source's pieces"
            )
        source, target = self.position_limits
        limits = [n for n in (self.max_input_len, None if source is None else source - 1) if n is not None]
        if limits:  # CTranslate2 counts the end token it appends within max_input_length (its default: 1,024)
            options.setdefault("max_input_length", min(limits) + 1)
        if target is not None:
            options.setdefault("max_decoding_length", target)
        batch = [self.source.pieces(self.source.encode(line)) for line in lines]
        cut = options.get("max_input_length", CT2_MAX_INPUT_LENGTH)  # 0: CTranslate2 cuts nothing
        long_lines = [n for n, pieces in enumerate(batch) if cut and len(pieces) + 1 > cut]
        if long_lines:  # as our translator's on_long_input=truncate says it: never a silently shorter source
            log.warning(
                "%d input line(s) longer than %d subword tokens were truncated (first: line %d)",
                len(long_lines),
                cut - 1,
                long_lines[0] + 1,
            )
        results = self.translator.translate_batch(batch, **options)
        return [self.target.decode([self.target.sp.piece_to_id(p) for p in r.hypotheses[0]]) for r in results]


def run_export(cfg) -> Path:
    """export.py: the checkpoint (or run folder) of ``cfg.ckpt_path`` written in ``cfg.format`` to ``cfg.out``."""
    import sys

    from omegaconf import OmegaConf

    from nmt.inference.loading import load_model, resolve_checkpoint_path

    if cfg.format not in FORMATS:
        raise ValueError(f"format={cfg.format}: not one of {list(FORMATS)}")
    if OmegaConf.is_list(cfg.ckpt_path):
        raise ValueError(
            f"ckpt_path={list(cfg.ckpt_path)}: export.py writes one model; an ensemble is not exported (export each "
            "checkpoint, or the mean of a run's last epochs with average_last=N)"
        )
    if cfg.out is None or not str(cfg.out).strip():
        raise ValueError("out is empty: name the folder the export goes to (out=exports/<name>)")
    out = Path(str(cfg.out))
    if out.exists() and not out.is_dir():
        raise ValueError(f"out={cfg.out}: a file stands there; the export is a folder: name another out=")
    # a file where a folder above it must be: said before the model is loaded, not as the staging folder's error
    above = next((p for p in out.absolute().parents if p.exists() and not p.is_dir()), None)
    if above is not None:
        raise ValueError(f"out={cfg.out}: {above} is a file, not a folder; name another out=")
    # an earlier export's files are replaced; the same names in a folder no export of ours wrote are the user's
    theirs = sorted(p.name for p in out.glob("*") if p.name in EXPORT_FILES) if out.is_dir() else []
    if theirs and not (out / "nmt_export.json").is_file() and not (out / PARTIAL).is_file():
        raise ValueError(
            f"out={cfg.out} holds {', '.join(theirs)} and no nmt_export.json (not an export of this project): name "
            "another out=, or remove those files"
        )
    loaded = load_model(resolve_checkpoint_path(cfg.ckpt_path), cfg.average_last, "cpu")
    out = export_ctranslate2(loaded, cfg.out, cfg.quantization)
    print(f"CTranslate2 model written to {out} (quantization: {cfg.quantization or 'none, float32'})", file=sys.stderr)
    return out


def translate_pieces(model_dir: str | Path, lines: list[str], device: str = "cpu", **options) -> list[str]:
    """Translate raw lines with an exported folder (loaded for this call; see CTranslate2Model)."""
    return CTranslate2Model(model_dir, device).translate(lines, **options)
