"""A checkpoint as a CTranslate2 model, for fast CPU and GPU serving (``python export.py``), and its use.
What the model becomes there, and what is refused: :mod:`nmt.inference.export_spec`.

The folder holds CTranslate2's model and vocabularies plus our SentencePiece models (``source.model``,
``target.model``): pieces in, pieces out, as :func:`translate_pieces` shows; :class:`CTranslate2Model` takes
text. Its files are moved in one by one, the manifest last, so that a folder killed midway is recognised.
"""

import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from nmt.data.text_io import tabbed_line
from nmt.decoding.constraints import position_limits
from nmt.decoding.settings import search_settings
from nmt.decoding.translate import input_limit
from nmt.inference.export_spec import ExportError, build_spec
from nmt.inference.hypothesis import check_texts
from nmt.inference.loading import LoadedModel
from nmt.utils.io import RUN_FOLDERS, atomic_write_text, run_folder_above

log = logging.getLogger(__name__)

FORMATS = ("ctranslate2",)
CT2_MAX_INPUT_LENGTH = 1024  # translate_batch's default max_input_length: pieces a source keeps, end token in
CT2_MAX_DECODING_LENGTH = 256  # translate_batch's default max_decoding_length
CT2_BEAM_SIZE = 2  # translate_batch's default beam_size
EXPORT_FILES = {
    "model.bin",
    "config.json",
    *(f"{side}vocabulary.{ext}" for side in ("shared_", "source_", "target_", "") for ext in ("json", "txt")),
    "source.model",
    "target.model",
    "nmt_export.json",
}


PARTIAL = ".nmt_export_partial"  # in an export's folder from its first file moved in until its manifest


BEAM_PATIENCE = 2.0  # CTranslate2's beam ends at beam_size x patience finished hypotheses (decoding_defaults)


def decoding_defaults(decode: dict | None) -> dict:
    """The run's own search (its config's ``decode`` block) as ``translate_batch`` options, those whose
    meaning CTranslate2 shares: the strategy and its beam or sampling settings, the minimum output length
    (both count the tokens before the end token) and n-gram blocking, so that an exported summariser keeps
    its floor and its trigram blocking. The length penalty is not carried (CTranslate2's is another formula),
    nor the length limit relative to the source (CTranslate2 has a fixed one a call: :func:`length_limit`, kept
    beside these in the manifest, is applied by :class:`CTranslate2Model`).

    A beam's end: CTranslate2's ends once ``beam_size`` hypotheses have finished (its ``patience`` 1), as ours
    does with ``decode.early_stopping=true``; without it ours goes on while an unfinished hypothesis could
    still win. The first to finish are the short ones, so an export ending there cut translations short (a
    toy model's lost words in a fifth of its outputs): it goes on until twice as many have finished
    (:data:`BEAM_PATIENCE`), which agreed with ours where more did not add (BENCHMARKS.md)."""
    search = search_settings(decode, None, refuse_unread=False)
    options = {"min_decoding_length": search.min_len, "no_repeat_ngram_size": search.no_repeat_ngram_size}
    if search.strategy not in STRATEGY_OPTIONS:
        # a strategy added since: exported as greedy search, it would translate otherwise than the run unsaid
        raise ExportError(
            f"decode.strategy={search.strategy} (the run's search): CTranslate2's translate_batch has no "
            f"equivalent here; the export maps {', '.join(STRATEGY_OPTIONS)} (add its mapping to "
            "STRATEGY_OPTIONS in nmt/inference/export.py)"
        )
    return {**options, **STRATEGY_OPTIONS[search.strategy](search)}


def length_limit(decode: dict | None) -> dict:
    """The run's output limit, ``max_len_a`` x source tokens (with the end token) + ``max_len_b``, counting the
    output's end token, as its search stops."""
    search = search_settings(decode, None, refuse_unread=False)
    return {"max_len_a": search.max_len_a, "max_len_b": search.max_len_b}


def output_limits(source_tokens: Sequence[int], limit: dict, cap: int | None) -> list[int]:
    """Each source's CTranslate2 ``max_decoding_length``: the tokens our search may decode before its end token
    (its limit counts the end token, computed in float32 as it computes it, within a learned table's ``cap``)."""
    import torch

    lengths = torch.tensor(list(source_tokens), dtype=torch.float32)
    limits = (lengths * limit["max_len_a"] + limit["max_len_b"]).long().clamp(min=1, max=cap)
    return [int(n) - 1 for n in limits]  # 0: the end token alone, an empty output


# each strategy the export maps, as translate_batch's options; CTranslate2 samples where beam_size is 1 (its
# sampling_topk 0: the whole vocabulary, as our top_k 0)
STRATEGY_OPTIONS = {
    "greedy": lambda search: {"beam_size": 1},
    "beam": lambda search: {
        "beam_size": search.beam_size,
        "patience": 1.0 if search.early_stopping else BEAM_PATIENCE,
    },
    "sample": lambda search: {
        "beam_size": 1,
        "sampling_topk": search.top_k,
        "sampling_topp": search.top_p,
        "sampling_temperature": search.temperature,
    },
}


def export_ctranslate2(loaded: LoadedModel, out_dir: str | Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model of ``loaded`` (weights in ``quantization``: None keeps float32; int8,
    int8_float32, float16, bfloat16, ...) with our SentencePiece models beside it."""
    out_dir = Path(out_dir).resolve()  # "." and ".." have no name to put a staging folder beside
    spec = build_spec(loaded)
    spec.validate()
    decode = decoding_defaults(loaded.config.get("decode"))  # refused before any file is written
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
            "decode": decode,
            # the run's output limit relative to the source (a x source tokens + b), which CTranslate2 has not:
            # CTranslate2Model.translate decodes each length of source under its own limit
            "length_limit": length_limit(loaded.config.get("decode")),
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
        if not (model_dir / "nmt_export.json").is_file() and (model_dir / PARTIAL).is_file():
            raise ValueError(f"{model_dir}: an export cut short (no nmt_export.json yet); run export.py into it again")
        if not (model_dir / "nmt_export.json").is_file():  # a run folder, a checkpoint: a FileNotFoundError
            raise ValueError(
                f"{model_dir}: not a folder export.py wrote (it holds no nmt_export.json); give the out= folder of "
                "an export, or translate a checkpoint or run folder with nmt.inference.translator.Translator"
            )
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
        # exported before the manifest held it: CTranslate2's fixed limit (256, or a learned table's) stands
        self.length_limit = manifest.get("length_limit")
        if self.decoding and self.decoding.get("beam_size", 1) > 1 and "patience" not in self.decoding:
            # exported before the manifest held the beam's end: the run's default search (early_stopping=false)
            self.decoding = {**self.decoding, "patience": BEAM_PATIENCE}
        if self.decoding is None:
            log.warning(
                "%s was exported before its manifest held the run's decoding settings: CTranslate2's defaults "
                "(beam_size=2, min_decoding_length=1, no n-gram blocking) stand, not the run's; export it again "
                "to keep them (a summariser's minimum length and trigram blocking)",
                model_dir,
            )
        self.source = Tokenizer((model_dir / "source.model").read_bytes(), segmenters.get("source"))
        self.target = Tokenizer((model_dir / "target.model").read_bytes(), segmenters.get("target"))
        if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:  # CTranslate2's "driver version" error
            raise ValueError(f"device={device}: CTranslate2 sees no CUDA GPU on this machine; use device='cpu'")
        self.translator = ctranslate2.Translator(str(model_dir), device=device, **translator_options)

    def translate(self, lines: Sequence[str] | str, **options) -> list[str] | str:
        """The best translation of each line (of one line given as a string: its translation, as
        :meth:`Translator.translate`). ``options`` go to
        ``translate_batch`` (beam_size, max_decoding_length, ...); those not given are the run's own search
        (``decoding``: its beam size, minimum length and n-gram blocking; beam 1 where ``sampling_topk`` is
        given, as CTranslate2 samples), with the start and padding tokens
        suppressed as ours never outputs them. By default a source is cut where our translator cuts it (the
        run's limit, and a learned position table's size less the end token) and each output stops where our
        search stops it (the run's ``max_len_a`` x source + ``max_len_b``, within such a table: one
        ``translate_batch`` call per limit; a ``max_decoding_length`` given holds for every line)."""
        if isinstance(lines, str):
            return self.translate([lines], **options)[0]
        if lines is None or isinstance(lines, bytes) or not hasattr(lines, "__iter__"):
            raise TypeError(f"lines={lines!r}: give a list of str (one str: one line)")
        lines = list(lines)
        lines = check_texts(lines, "line")  # as our translator checks them: a None or a number was a TypeError of `in`
        if problem := tabbed_line(lines):  # as our translator refuses it
            raise ValueError(problem)
        # our search never outputs the start or padding token; CTranslate2 may (a model trained briefly chose
        # <s> at every step, which decoding drops: an empty translation, unsaid)
        options.setdefault("suppress_sequences", [["<s>"], ["<pad>"]])
        if options.get("sampling_topk", 1) != 1:  # sampling: CTranslate2 crashed (the process, a segfault) on a beam
            if options.setdefault("beam_size", 1) != 1:
                raise ValueError(
                    f"sampling_topk={options['sampling_topk']} with beam_size={options['beam_size']}: CTranslate2 "
                    "samples with beam_size=1 alone; leave beam_size out (a sample is drawn with beam 1)"
                )
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
        per_length = self.length_limit is not None and "max_decoding_length" not in options
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
        if per_length:  # our limit is relative to the source, CTranslate2's one per call: one call per limit
            read = [min(len(pieces) + 1, cut) if cut else len(pieces) + 1 for pieces in batch]  # with the end token
            limits = output_limits(read, self.length_limit, target)
        else:
            limits = [options.get("max_decoding_length")] * len(batch)
        outputs: list[list[str]] = [[] for _ in batch]  # each line's output pieces
        for limit in sorted(set(limits), key=lambda n: -1 if n is None else n):
            rows = [n for n, given in enumerate(limits) if given == limit]
            if per_length and limit == 0:  # our search ends these at once (CTranslate2 takes no limit of 0)
                continue
            asked = options
            if per_length:  # where the limit comes first, it ends the output, as our search ends it
                asked = {**options, "max_decoding_length": limit}
                if "min_decoding_length" in options:  # a floor above the limit: CTranslate2 refuses the call
                    asked["min_decoding_length"] = min(options["min_decoding_length"], limit)
            try:
                found = self.translator.translate_batch([batch[n] for n in rows], **asked)
            except TypeError as err:  # pybind's whole signature: the option it does not know said in one line
                raise _unknown_option(err, asked) from None
            for n, result in zip(rows, found, strict=True):
                outputs[n] = result.hypotheses[0]
        if asked_beam(options) > 1:  # a beam's ranking at the limit: ours ends a hypothesis there with its end token
            reached = [n for n, limit in enumerate(limits) if len(outputs[n]) >= (limit or CT2_MAX_DECODING_LENGTH)]
            if reached:
                log.warning(
                    "%d output(s) reached the length limit (first: line %d): CTranslate2's beam ranks a hypothesis "
                    "cut there without the cost of an end token, where this project's search ends it with one, so "
                    "these may differ from the run's own translations",
                    len(reached),
                    reached[0] + 1,
                )
        return [self.target.decode([self.target.sp.piece_to_id(p) for p in pieces]) for pieces in outputs]


def asked_beam(options: dict) -> int:
    """The beam ``translate_batch`` searches with (its default: 2)."""
    return int(options.get("beam_size", CT2_BEAM_SIZE))


def _unknown_option(err: TypeError, options: dict) -> TypeError:
    """``translate_batch``'s error for options it does not take (a list of its whole signature), as one line
    naming each unknown option and the closest known one; any other TypeError as it was."""
    import difflib
    import re

    signature = str(err).partition("*,")[2].partition(")")[0]
    known = re.findall(r"(\w+):", signature)
    unknown = [key for key in options if known and key not in known]
    if not unknown:
        return err
    said = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        said.append(f"{key}={options[key]!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    return TypeError(f"{', '.join(said)}: not an option of CTranslate2's translate_batch; it takes {', '.join(known)}")


def run_export(cfg) -> Path:
    """export.py: the checkpoint (or run folder) of ``cfg.ckpt_path`` written in ``cfg.format`` to ``cfg.out``."""
    import importlib.util
    import sys

    from omegaconf import OmegaConf

    from nmt.inference.loading import load_model, resolve_checkpoint_path
    from nmt.inference.translator import apply_threads

    apply_threads(cfg.get("threads"))
    if cfg.format not in FORMATS:
        raise ValueError(f"format={cfg.format}: not one of {list(FORMATS)}")
    # a dependency of the project, so missing only from a broken install: said before the checkpoint is read,
    # not as the converter's import error after it
    if cfg.format == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        raise ValueError(
            "format=ctranslate2: the ctranslate2 package is not installed in this Python; install it "
            "(pip install 'ctranslate2>=4.0', or make install) and export again"
        )
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
    run = run_folder_above(out)
    inside = out.expanduser().resolve().relative_to(run).parts if run is not None else ()
    if run is not None and (not inside or inside[0] in RUN_FOLDERS or inside[0].startswith("eval")):
        # model.bin, config.json and the tokenizers landed among the run's checkpoints or evaluations
        where = "the run folder itself" if not inside else f"the run's {inside[0]}/ folder"
        raise ValueError(
            f"out={cfg.out}: {where}, which holds the run's records (run folder {run}); export to a folder of its "
            f"own (e.g. out={run / 'ctranslate2'}, or outside the run)"
        )
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
