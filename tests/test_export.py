"""export.py: every Transformer variant CTranslate2's specification can hold decodes token for token as
ours does (greedy), and what it cannot hold is refused in one line naming the option."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nmt.decoding import settings
from nmt.decoding.settings import SAMPLED, STRATEGIES, SearchConfig
from nmt.inference.checkpoint import load_checkpoint
from nmt.inference.export import (
    STRATEGY_OPTIONS,
    CTranslate2Model,
    decoding_defaults,
    export_ctranslate2,
    translate_pieces,
)
from nmt.inference.export_spec import ExportError, check_exportable
from nmt.inference.hypothesis import InputError
from nmt.inference.loading import CheckpointError, load_model, resolve_checkpoint_path
from nmt.inference.translator import Translator
from nmt.tasks.language_model import LanguageModelTask
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, STRATEGY_NEEDS, compose_train

pytest.importorskip("ctranslate2", reason="ctranslate2 is a dependency of the export (make install)")

LINES = ["one two three", "seven eight", "four four nine two", "five six seven eight nine", "two", "three one"]
VARIANTS = {
    "absolute-layer-pre-relu": [],
    "absolute-rms-post-gelu": ["norm=rms", "model.norm_position=post", "model.activation=gelu"],
    "learned-layer-post": ["pos=learned", "model.norm_position=post"],
    "relative-layer-pre": ["pos=relative"],
    "rope-rms-pre": ["pos=rope", "norm=rms"],
    "t5-layer-post": ["pos=t5", "model.norm_position=post"],
    "none-layer-pre-tied": ["pos=none", "model.tie_embeddings=all"],
}


_TRAINED: dict[str, str] = {}


def trained(tmp_path_factory, name: str, overrides: list[str]) -> str:
    """A briefly trained toy model of this variant (trained once per test session)."""
    if name not in _TRAINED:
        run_dir = tmp_path_factory.mktemp(name)
        overrides = [*overrides, "trainer.max_epochs=4", *NO_FINAL_SCORES, "threads=1"]
        train(compose_train(*overrides, f"run_dir={run_dir}"))
        _TRAINED[name] = str(run_dir / "checkpoints" / "best.ckpt")
    return _TRAINED[name]


@pytest.fixture(scope="module")
def default_checkpoint(tmp_path_factory):
    return trained(tmp_path_factory, "absolute-layer-pre-relu", [])


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    return request.param, trained(tmp_path_factory, request.param, VARIANTS[request.param])


def test_ctranslate2_greedy_output_is_token_identical(variant, tmp_path):
    name, checkpoint = variant
    loaded = load_model(checkpoint, device="cpu")
    export_ctranslate2(loaded, tmp_path / "ct2")
    greedy = SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=40)
    (ours,) = [Translator([loaded], greedy).translate_nbest(LINES, scores=True)]
    # our search never outputs the start or padding token (the wrapper suppresses them in CTranslate2's), and
    # its limit of 40 counts the end token: CTranslate2 is told the same
    theirs = translate_pieces(tmp_path / "ct2", LINES, beam_size=1, max_decoding_length=39)
    assert [h[0].text for h in ours] == theirs, name
    assert any(theirs), name  # a model that says something


@pytest.mark.parametrize("group", ["pos", "norm"])
def test_each_option_of_conf_is_compared_token_for_token_or_refused_naming_it(group, default_checkpoint):
    """A new position encoding or norm needed a case written here by hand, and nothing failed without one:
    each file of conf/pos/ and conf/norm/ is now either held by CTranslate2's specification, and then among
    the variants decoded token for token above, or refused in one line naming it."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    compared = {"pos": {"absolute"}, "norm": {"layer"}}[group]  # the default variant's
    compared |= {o.split("=", 1)[1] for v in VARIANTS.values() for o in v if o.startswith(f"{group}=")}
    paths = sorted((ROOT / "conf" / group).glob("*.yaml"))
    assert paths, f"conf/{group}/ holds no option"
    for path in paths:
        loaded = load_model(default_checkpoint, device="cpu")
        model = loaded.model
        build = instantiate(OmegaConf.load(path))  # a partial, as the model builder gets it
        if group == "pos":
            model.src_pos = model.tgt_pos = build(d_model=model.d_model, head_dim=model.src_pos.head_dim)
        else:
            for module in model.modules():
                for name, child in list(module.named_children()):
                    if "norm" in name and not isinstance(child, torch.nn.Identity):
                        setattr(module, name, build(model.d_model))
        try:
            check_exportable(loaded)
        except ExportError as err:
            assert str(err).startswith(f"{group}={path.stem}:"), (path.stem, str(err))
        else:
            assert path.stem in compared, f"{group}={path.stem} is exported but not compared: add it to VARIANTS"


def test_each_variant_scores_every_token_as_ours_on_long_sources(variant, tmp_path):
    """The greedy test above reads short lines of a briefly trained model: a mapping wrong only far away (T5's
    max_distance, Shaw's clipping), or a position term too small to move the argmax, passed it (T5's
    max_distance halved did). Here sources run to 189 pieces, the learned relative tables are scaled up
    eightfold so that they dominate, and each token's log-probability of CTranslate2's output is compared
    with ours."""
    import ctranslate2
    import numpy as np

    from nmt.data.tokenizer import BOS_ID, EOS_ID
    from nmt.modules.position import BucketBias, RelativePosition

    name, checkpoint = variant
    loaded = load_model(checkpoint, device="cpu")
    model = loaded.model.eval()
    with torch.no_grad():
        for position in (model.src_pos, model.tgt_pos):
            if isinstance(position, BucketBias):
                position.table.weight.mul_(8.0)
            if isinstance(position, RelativePosition):
                position.keys.weight.mul_(8.0)
                position.vals.weight.mul_(8.0)
    export_ctranslate2(loaded, tmp_path / "ct2")
    theirs = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    src_tok = loaded.src_tokenizer
    words = "one two three four five six seven eight nine".split()
    rng = np.random.default_rng(0)
    for count in (5, 45, 70):
        src = src_tok.encode(" ".join(rng.choice(words, count)))
        pieces = src_tok.pieces(src)
        (found,) = theirs.translate_batch([pieces], beam_size=1, max_decoding_length=60)
        hyp = [loaded.tgt_tokenizer.sp.piece_to_id(p) for p in found.hypotheses[0]]
        with torch.no_grad():
            logits = model(torch.tensor([[*src, EOS_ID]]), torch.tensor([[BOS_ID, *hyp]]))
        ours = torch.log_softmax(logits.float(), -1)[0, torch.arange(len(hyp)), torch.tensor(hyp)]
        (scored,) = theirs.score_batch([pieces], [found.hypotheses[0]])
        assert len(hyp) > 10, name
        np.testing.assert_allclose(scored.log_probs[: len(hyp)], ours.numpy(), atol=1e-4, err_msg=name)


@pytest.mark.fresh_processes  # a fresh interpreter, as typed (docs/testing.md)
def test_export_py_writes_a_model_folder(default_checkpoint, tmp_path):
    checkpoint = default_checkpoint
    out = tmp_path / "int8"
    result = subprocess.run(
        # threads=: accepted as by translate.py, evaluate.py and serve.py (it was "no key ... has a similar name")
        [sys.executable, str(ROOT / "export.py"), f"ckpt_path={checkpoint}", f"out={out}", "quantization=int8",
         "threads=1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert {p.name for p in out.iterdir()} >= {"model.bin", "config.json", "source.model", "target.model"}
    assert len(translate_pieces(out, LINES[:2], beam_size=2)) == 2
    # one line given as a string is translated as one line, as Translator.translate does (it was read as its
    # characters: a list of one translation each)
    model = CTranslate2Model(out)
    assert model.translate(LINES[0], beam_size=2) == model.translate([LINES[0]], beam_size=2)[0]
    with pytest.raises(TypeError, match=r"^lines=b'six': give a list of str"):  # bytes were read as numbers
        model.translate(b"six")
    # an option CTranslate2 does not take: one line with the closest it does (it was pybind's whole signature)
    with pytest.raises(TypeError, match=r"^beam=3 \(did you mean beam_size\?\): not an option of CTranslate2's"):
        model.translate(LINES[0], beam=3)
    with pytest.raises(ValueError, match=r"^line 2: holds a tab: each line is one source text"):  # as ours refuses it
        model.translate([LINES[0], "eins\tone"])
    # a run folder that holds an export, not a checkpoint: said, with what reads it
    with pytest.raises(CheckpointError, match=r"is a CTranslate2 export \(nmt_export.json\), which this program"):
        resolve_checkpoint_path(out)
    # its model.bin given as a checkpoint: named as the export's (it was "not a PyTorch checkpoint, or cut short")
    with pytest.raises(CheckpointError, match=r"model.bin is a file of a CTranslate2 export \(nmt_export.json beside"):
        load_checkpoint(out / "model.bin")
    # threads= is applied, not only accepted: a value torch cannot take is refused
    refused = subprocess.run(
        [sys.executable, str(ROOT / "export.py"), f"ckpt_path={checkpoint}", f"out={tmp_path / 'x'}", "threads=-1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert refused.returncode != 0 and "threads=-1: must be an integer >= 0" in refused.stderr


def test_what_ctranslate2_cannot_hold_is_refused_naming_the_option(tmp_path_factory, default_checkpoint):
    rnn = load_model(trained(tmp_path_factory, "rnn", ["model=rnn"]), device="cpu")
    with pytest.raises(
        ExportError,
        match=r"^model=rnn \(RNNSeq2Seq, not a Transformer\): CTranslate2's Transformer specification holds "
        r"nmt.models.transformer.Transformer only",
    ):
        check_exportable(rnn)
    keys_only = load_model(trained(tmp_path_factory, "keys", ["pos=relative", "pos.use_values=false"]), device="cpu")
    with pytest.raises(ExportError, match=r"^pos.use_values=false: CTranslate2's relative positions always add value"):
        check_exportable(keys_only)
    with pytest.raises(ExportError, match=r"^task=lm: a language model"):
        check_exportable(replace(keys_only, task=LanguageModelTask()))

    # a norm of another kind (here one with a weight and no bias, which must not pass for RMSNorm)
    class ScaleNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight, self.eps = torch.nn.Parameter(torch.ones(1)), 1e-5

    other = load_model(default_checkpoint, device="cpu")
    for layer in [*other.model.encoder, *other.model.decoder]:
        for module in layer.modules():
            if hasattr(module, "norm") and isinstance(module.norm, torch.nn.Module):
                module.norm = ScaleNorm()
    with pytest.raises(ExportError, match=r"^norm=ScaleNorm: no CTranslate2 equivalent \(it takes layer, rms\)"):
        check_exportable(other)
    # a new option written as a subclass of one it can hold is another model: refused, not written as its parent
    from nmt.modules.norm import LayerNorm
    from nmt.modules.position import SinusoidalPosition

    class ScaledSinusoid(SinusoidalPosition):
        pass

    class CentredNorm(LayerNorm):
        pass

    subclassed = load_model(default_checkpoint, device="cpu")
    subclassed.model.src_pos.__class__ = ScaledSinusoid
    with pytest.raises(
        ExportError,
        match=r"^pos=ScaledSinusoid: no CTranslate2 equivalent "
        r"\(it takes absolute, learned, none, relative, rope, t5\)$",
    ):
        check_exportable(subclassed)
    subclassed = load_model(default_checkpoint, device="cpu")
    subclassed.model.encoder[0].attn_block.norm.__class__ = CentredNorm
    with pytest.raises(ExportError, match=r"^norm=CentredNorm: no CTranslate2 equivalent"):
        check_exportable(subclassed)
    # the model itself, too: a subclass that scaled its logits was written as a plain Transformer
    from nmt.models.transformer import Transformer

    class ScaledLogits(Transformer):
        pass

    subclassed = load_model(default_checkpoint, device="cpu")
    subclassed.model.__class__ = ScaledLogits
    with pytest.raises(ExportError, match=r"^model=transformer \(Transformer, a subclass of Transformer, another "):
        check_exportable(subclassed)


def test_exporting_leaves_the_model_untouched(default_checkpoint, tmp_path):
    """CTranslate2 quantizes its arrays in place: they must be copies, not the model's parameters."""
    import torch

    loaded = load_model(default_checkpoint, device="cpu")
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    export_ctranslate2(loaded, tmp_path / "int8", quantization="int8")
    assert all(torch.equal(before[k], v) for k, v in loaded.model.state_dict().items())


def test_an_export_that_fails_leaves_the_previous_one_whole(default_checkpoint, tmp_path):
    """A failure half-way (a full disk, say) leaves the folder's previous export byte for byte, and nothing
    beside it."""

    loaded = load_model(default_checkpoint, device="cpu")

    class UnwritableTokenizer:  # the real one, whose model cannot be written
        def __getattr__(self, name):
            return getattr(loaded.tgt_tokenizer, name)

        @property
        def model_proto(self):
            raise OSError("No space left on device")

    out = tmp_path / "model"
    export_ctranslate2(loaded, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OSError, match="No space left"):
        export_ctranslate2(replace(loaded, tgt_tokenizer=UnwritableTokenizer()), out, quantization="int8")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_an_export_into_an_earlier_ones_folder_leaves_none_of_its_files_behind(default_checkpoint, tmp_path):
    """An earlier export's separate vocabularies beside this one's shared one: CTranslate2 read the wrong
    one and translated garbage. Files an export never writes are the user's and stay."""
    loaded = load_model(default_checkpoint, device="cpu")
    out = tmp_path / "model"
    export_ctranslate2(loaded, out)
    written = sorted(p.name for p in out.iterdir())
    assert "shared_vocabulary.json" in written  # the toy model's joint vocabulary
    for name in ("source_vocabulary.json", "target_vocabulary.json", "notes.txt"):
        (out / name).write_text('["<unk>", "stale"]')
    export_ctranslate2(loaded, out)
    assert sorted(p.name for p in out.iterdir()) == sorted([*written, "notes.txt"])
    export_ctranslate2(loaded, tmp_path / "fresh")
    assert translate_pieces(out, LINES, beam_size=1) == translate_pieces(tmp_path / "fresh", LINES, beam_size=1)


def test_an_export_killed_while_moving_in_leaves_no_manifest_of_the_previous_one(
    default_checkpoint, tmp_path, monkeypatch
):
    """Files moved in from a new export next to the old manifest would be read as the old export: the manifest
    goes first, so the folder is refused until an export completes."""
    import os

    loaded = load_model(default_checkpoint, device="cpu")
    out = tmp_path / "model"
    export_ctranslate2(loaded, out)
    replace_file, moves = os.replace, []

    def dies_on_the_second_move(src, dst):
        moves.append(dst)
        if len(moves) == 2:
            raise KeyboardInterrupt
        replace_file(src, dst)

    monkeypatch.setattr(os, "replace", dies_on_the_second_move)
    with pytest.raises(KeyboardInterrupt):
        export_ctranslate2(loaded, out, quantization="int8")
    monkeypatch.undo()
    assert not (out / "nmt_export.json").exists()
    with pytest.raises(ValueError, match=r": an export cut short \(no nmt_export.json yet\); run export.py into it"):
        translate_pieces(out, LINES[:1])
    # and export.py completes it in that folder (one holding such files without the mark is another program's)
    from omegaconf import OmegaConf

    from nmt.inference.export import PARTIAL, run_export

    assert (out / PARTIAL).is_file()
    cfg = {"format": "ctranslate2", "ckpt_path": str(default_checkpoint), "average_last": 1, "quantization": "int8"}
    run_export(OmegaConf.create({**cfg, "out": str(out)}))
    assert len(translate_pieces(out, LINES[:2], beam_size=2)) == 2
    assert not (out / PARTIAL).exists()


def test_an_unknown_quantization_is_refused_naming_the_key(default_checkpoint, tmp_path):
    loaded = load_model(default_checkpoint, device="cpu")
    with pytest.raises(ValueError, match=r"^quantization=int3: .*int8"):
        export_ctranslate2(loaded, tmp_path / "model", quantization="int3")
    assert not any(tmp_path.iterdir())


def test_an_unknown_format_is_refused_listing_the_formats(default_checkpoint, tmp_path):
    from omegaconf import OmegaConf

    from nmt.inference.export import run_export

    cfg = OmegaConf.create(
        {
            "ckpt_path": default_checkpoint,
            "format": "onnx",
            "out": str(tmp_path),
            "average_last": 0,
            "quantization": None,
        }
    )
    with pytest.raises(ValueError, match=r"^format=onnx: not one of \['ctranslate2'\]$"):
        run_export(cfg)


def test_a_missing_ctranslate2_is_said_in_one_line_before_the_checkpoint_is_read(tmp_path, monkeypatch):
    """A broken install without ctranslate2 failed with the converter's import error, after the checkpoint was
    loaded."""
    import importlib.util

    from omegaconf import OmegaConf

    from nmt.inference.export import run_export

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ctranslate2" else real(name, *a))
    cfg = {"format": "ctranslate2", "average_last": 0, "quantization": None, "ckpt_path": str(tmp_path / "no.ckpt")}
    with pytest.raises(ValueError, match=r"^format=ctranslate2: the ctranslate2 package is not installed"):
        run_export(OmegaConf.create({**cfg, "out": str(tmp_path / "m")}))  # not the missing checkpoint's error


def test_an_ensemble_or_a_file_as_the_folder_is_refused_in_one_line(tmp_path):
    from omegaconf import OmegaConf

    from nmt.inference.export import run_export

    taken = tmp_path / "taken"
    taken.write_text("a file")
    base = {"format": "ctranslate2", "average_last": 0, "quantization": None}
    with pytest.raises(ValueError, match=r"^ckpt_path=\['a', 'b'\]: export.py writes one model"):
        run_export(OmegaConf.create({**base, "ckpt_path": ["a", "b"], "out": str(tmp_path / "m")}))
    with pytest.raises(ValueError, match=rf"^out={taken}: a file stands there"):
        run_export(OmegaConf.create({**base, "ckpt_path": "a", "out": str(taken)}))
    # a file above the folder: named before the checkpoint is read (it named the staging folder, after loading)
    with pytest.raises(ValueError, match=rf"^out={taken}/sub/m: {taken} is a file, not a folder; name another"):
        run_export(OmegaConf.create({**base, "ckpt_path": "a", "out": str(taken / "sub" / "m")}))
    # a training run's own folders: model.bin and the tokenizers landed among its checkpoints or evaluations
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "fingerprint.json").write_text("{}")
    for out, where in ((run, "the run folder itself"), (run / "checkpoints", "the run's checkpoints/ folder"),
                       (run / "eval" / "test_beam5", "the run's eval/ folder")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^out={out}: {where}, which holds the run's records"):
            run_export(OmegaConf.create({**base, "ckpt_path": "a", "out": str(out)}))
    with pytest.raises(Exception, match="^a: no such run folder or checkpoint"):  # a folder of its own: on to loading
        run_export(OmegaConf.create({**base, "ckpt_path": "a", "out": str(run / "ctranslate2")}))


def test_a_learned_table_travels_as_ctranslate2s_default_limits_and_only_one_best_is_returned(
    tmp_path_factory, tmp_path
):
    """CTranslate2's default limit (256 steps) ran past a learned table of fewer positions ("No position
    encodings are defined for positions >= 64"); num_hypotheses > 1 returned the first alone, silently."""
    import json

    from nmt.inference.export import CTranslate2Model

    checkpoint = trained(tmp_path_factory, "learned-layer-post", VARIANTS["learned-layer-post"])
    export_ctranslate2(load_model(checkpoint, device="cpu"), tmp_path / "ct2")
    assert json.loads((tmp_path / "ct2" / "nmt_export.json").read_text())["position_limits"] == [512, 512]
    model = CTranslate2Model(tmp_path / "ct2")
    assert model.position_limits == [512, 512] and len(model.translate(LINES[:2])) == 2
    with pytest.raises(ValueError, match=r"^num_hypotheses=2: translate returns each line's best"):
        model.translate(LINES[:2], beam_size=2, num_hypotheses=2)
    export_ctranslate2(
        load_model(trained(tmp_path_factory, "absolute-layer-pre-relu", []), device="cpu"), tmp_path / "a"
    )
    assert CTranslate2Model(tmp_path / "a").position_limits == [None, None]


def recording(model) -> list[dict]:
    """The options each translate_batch call of ``model`` (a CTranslate2Model) is given, from now on."""
    given, real = [], model.translator

    class Recording:
        def translate_batch(self, batch, **options):
            given.append(options)
            return real.translate_batch(batch, **options)

    model.translator = Recording()
    return given


def test_an_exported_summariser_keeps_its_minimum_length_and_ngram_blocking(tmp_path_factory, tmp_path, caplog):
    """The export carried none of the run's search: a summariser's CTranslate2 model decoded with
    CTranslate2's beam of 2, no minimum length and no trigram blocking, its outputs ending where the run's
    never do. The run's settings are now the wrapper's defaults, and mean what ours mean (greedy decodes
    token for token as ours, both counting the tokens before the end token)."""
    from nmt.inference.export import CTranslate2Model

    run_dir = tmp_path_factory.mktemp("ends")  # trained until its outputs end before the length limit
    train(compose_train("trainer.max_epochs=40", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"))
    loaded = load_model(str(run_dir / "checkpoints" / "best.ckpt"), device="cpu")
    loaded.config["decode"].update(beam_size=4, length_penalty=2.0, min_len=12, no_repeat_ngram_size=2)
    export_ctranslate2(loaded, tmp_path / "ct2")
    manifest = json.loads((tmp_path / "ct2" / "nmt_export.json").read_text())
    # the beam goes on past the first 4 finished hypotheses, as ours (decode.early_stopping=false)
    assert manifest["decode"] == {"min_decoding_length": 12, "no_repeat_ngram_size": 2, "beam_size": 4, "patience": 2.0}

    def ours(**constraints) -> list[str]:
        search = SearchConfig(strategy="greedy", max_len_a=0.0, max_len_b=40, **constraints)
        return [h[0].text for h in Translator([loaded], search).translate_nbest(LINES)]

    free = ours()
    assert min(len(loaded.tgt_tokenizer.encode_batch([t])[0]) for t in free) < 12  # the floor matters
    model = CTranslate2Model(tmp_path / "ct2")
    limits = {"max_decoding_length": 39}
    kept = ours(min_len=12, no_repeat_ngram_size=2)
    assert model.translate(LINES, beam_size=1, **limits) == kept != free
    given = recording(model)
    model.translate(LINES[:1], **limits)
    model.translate(LINES[:1], no_repeat_ngram_size=0, **limits)  # what is given stands
    assert [(o["beam_size"], o["min_decoding_length"], o["no_repeat_ngram_size"]) for o in given] == [
        (4, 12, 2),
        (4, 12, 0),
    ]
    assert "length_penalty" not in given[0]  # CTranslate2's is another formula: not carried
    # never the start or padding token, as ours (a briefly trained model's outputs were <s> alone: empty)
    assert given[0]["suppress_sequences"] == [["<s>"], ["<pad>"]]
    # exported before the manifest held the beam's end: it goes on as the run's default search does
    before = {**manifest, "decode": {k: v for k, v in manifest["decode"].items() if k != "patience"}}
    (tmp_path / "ct2" / "nmt_export.json").write_text(json.dumps(before))
    before_model = CTranslate2Model(tmp_path / "ct2")
    given = recording(before_model)
    before_model.translate(LINES[:1], **limits)
    assert given[0]["patience"] == 2.0 and given[0]["beam_size"] == 4
    del manifest["decode"]  # an export made before the manifest held the run's search: said, and as it was
    (tmp_path / "ct2" / "nmt_export.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING"):
        old = CTranslate2Model(tmp_path / "ct2")
    assert "was exported before its manifest held the run's decoding settings" in caplog.text
    assert old.translate(LINES, beam_size=1, **limits) == [
        old.target.decode([old.target.sp.piece_to_id(p) for p in r.hypotheses[0]])
        for r in old.translator.translate_batch(
            [old.source.pieces(old.source.encode(line)) for line in LINES],
            beam_size=1,
            max_input_length=manifest["max_input_len"] + 1,
            suppress_sequences=[["<s>"], ["<pad>"]],
            **limits,
        )
    ]


def test_sources_are_cut_where_our_translator_cuts_them(tmp_path_factory, tmp_path, caplog):
    """CTranslate2 counts the end token it appends within max_input_length: the wrapper cut sources one piece
    shorter than our translator (a learned table's size less two), and a model without a table at 1,024
    pieces, not at the run's limit."""
    from nmt.inference.export import CTranslate2Model

    loaded = load_model(trained(tmp_path_factory, "absolute-layer-pre-relu", []), device="cpu")
    loaded.config["data"]["max_src_len"] = 4  # as a run trained on sources cut to 4 pieces
    export_ctranslate2(loaded, tmp_path / "ct2")
    model = CTranslate2Model(tmp_path / "ct2")
    assert model.max_input_len == 4
    pieces = model.source.pieces(model.source.encode("one two three four five six seven"))
    assert len(pieces) > 5

    def score(source, limit):  # CTranslate2's own score of its greedy output for this source
        options = {"beam_size": 1, "max_decoding_length": 8, "return_scores": True, "max_input_length": limit}
        return model.translator.translate_batch([source], **options)[0].scores[0]

    # max_input_length=5 reads 4 pieces and the end token: as our translator reads a source cut to 4
    assert score(pieces, 5) == score(pieces[:4], 0) != score(pieces[:3], 0)
    given = recording(model)
    caplog.clear()
    assert len(model.source.pieces(model.source.encode("one"))) <= 4
    with caplog.at_level("WARNING"):
        model.translate(["one"])
        assert "truncated" not in caplog.text
        model.translate(["one", "one two three four five six seven"], max_input_length=0)
        assert "truncated" not in caplog.text  # 0: CTranslate2 cuts nothing, nor says it does
        # cut as our translator cuts it, and said as it says it (it was silent: a shorter source, unsaid)
        model.translate(["one", "one two three four five six seven"])
    assert "1 input line(s) longer than 4 subword tokens were truncated (first: line 2)" in caplog.text
    # by default ours; told, as told (a call per output limit: the two lines' sources are of two lengths)
    assert [options["max_input_length"] for options in given] == [5, 0, 0, 5, 5]
    caplog.clear()
    # an export made before the manifest held the run's limit keeps CTranslate2's own, and says so
    manifest = json.loads((tmp_path / "ct2" / "nmt_export.json").read_text())
    del manifest["max_input_len"]
    (tmp_path / "ct2" / "nmt_export.json").write_text(json.dumps(manifest))
    with caplog.at_level("WARNING"):
        old = CTranslate2Model(tmp_path / "ct2")
    assert "was exported before its manifest held the run's source limit" in caplog.text
    given = recording(old)
    old.translate(["one two"])
    # CTranslate2's limit: none given (the output's limit is the run's, relative to the source)
    assert [set(options) for options in given] == [{*manifest["decode"], "suppress_sequences", "max_decoding_length"}]


UNMAPPED = ("epsilon",)  # the strategies the export refuses: translate_batch has nothing like them


def test_the_runs_search_maps_onto_ctranslate2s_options_and_a_strategy_without_a_mapping_is_refused(monkeypatch):
    """Each strategy becomes translate_batch's options (sampling with its filters, beam with its width). One
    added since, with no mapping here, was exported as greedy search: the exported model then translated
    otherwise than the run, without a word. It is refused, before any file is written."""
    for strategy in (s for s in STRATEGIES if s not in UNMAPPED):
        options = decoding_defaults({"strategy": strategy, "seed": 1 if strategy in SAMPLED else None})
        assert options["beam_size"] == (SearchConfig().beam_size if strategy == "beam" else 1)
        assert ("sampling_temperature" in options) == (strategy in SAMPLED)
    # CTranslate2 has no epsilon sampling (translate_batch's sampling: top-k, top-p and temperature alone)
    for strategy in UNMAPPED:
        decode = {"strategy": strategy, "seed": 1, **STRATEGY_NEEDS.get(strategy, {})}
        with pytest.raises(ExportError, match=rf"^decode.strategy={strategy} \(the run's search\): CTranslate2's"):
            decoding_defaults(decode)
    assert decoding_defaults({"strategy": "sample", "top_k": 7, "temperature": 0.5, "seed": 1})["sampling_topk"] == 7
    # a beam ends as ours does: at beam_size finished hypotheses only where the run's search stops there
    assert decoding_defaults({"strategy": "beam"})["patience"] == 2.0
    assert decoding_defaults({"strategy": "beam", "early_stopping": True})["patience"] == 1.0
    # a sampling strategy added as ARCHITECTURE.md says (its name, what it reads), but not mapped in export.py: a
    # made-up name, never one a newcomer may add for real ("typical" was, and failed this test for another reason)
    monkeypatch.setattr(settings, "STRATEGIES", (*STRATEGIES, "made_up"))
    monkeypatch.setattr(settings, "SAMPLED", (*SAMPLED, "made_up"))
    monkeypatch.setitem(settings.READS, "made_up", settings.READS["sample"])
    monkeypatch.setitem(settings.UNREAD, "made_up", settings.UNREAD["sample"])
    with pytest.raises(
        ExportError,
        match=r"^decode.strategy=made_up \(the run's search\): CTranslate2's .* maps greedy, beam, sample \(",
    ):
        decoding_defaults({"strategy": "made_up", "seed": 1})
    # its mapping added where the message says: exported with it, the other strategies' as they were
    monkeypatch.setitem(STRATEGY_OPTIONS, "made_up", lambda search: {"beam_size": 1, "sampling_topk": 3})
    assert decoding_defaults({"strategy": "made_up", "seed": 1})["sampling_topk"] == 3


def test_each_output_stops_at_the_runs_limit_relative_to_its_source(default_checkpoint, tmp_path, caplog):
    """CTranslate2 has one fixed limit (256 by default) where the run stops at max_len_a x source + max_len_b:
    an export of a barely trained en->zh model ran on past ours in 274 of 2,000 greedy test outputs. The
    manifest carries the run's limit and each source length decodes under its own."""
    loaded = load_model(default_checkpoint, device="cpu")
    export_ctranslate2(loaded, tmp_path / "ct2")
    manifest = json.loads((tmp_path / "ct2" / "nmt_export.json").read_text())
    own = SearchConfig(**loaded.config["decode"])
    assert manifest["length_limit"] == {"max_len_a": own.max_len_a, "max_len_b": own.max_len_b}
    # a tight limit, so that outputs reach it: given to both
    manifest["length_limit"] = {"max_len_a": 0.5, "max_len_b": 2}
    (tmp_path / "ct2" / "nmt_export.json").write_text(json.dumps(manifest))
    tight = SearchConfig(strategy="greedy", max_len_a=0.5, max_len_b=2)
    ours = Translator([loaded], tight).translate(LINES)
    model = CTranslate2Model(tmp_path / "ct2")
    calls = recording(model)
    assert model.translate(LINES, beam_size=1) == ours
    # one call per limit: a source of n tokens with its end token may have int(0.5 n + 2) with the output's end
    sizes = [len(loaded.src_tokenizer.encode(line)) + 1 for line in LINES]
    assert sorted(call["max_decoding_length"] for call in calls) == sorted({int(0.5 * n + 2) - 1 for n in sizes})
    assert ours != Translator([loaded], replace(tight, max_len_b=40)).translate(LINES)  # the limit cut them
    assert "reached the length limit" not in caplog.text  # greedy: token for token ours, limit or not
    # a beam at the limit ranks a hypothesis cut there without an end token's cost (ours with it): said
    model.translate(LINES, beam_size=3)
    assert "output(s) reached the length limit (first: line " in caplog.text
    calls.clear()  # a limit given is the call's, for every line
    model.translate(LINES, beam_size=1, max_decoding_length=5)
    assert [call["max_decoding_length"] for call in calls] == [5]
    # a minimum length above a line's limit: the limit ends it, as ours (CTranslate2 refused the whole call)
    floor = Translator([loaded], replace(tight, min_len=4)).translate(LINES)
    assert model.translate(LINES, beam_size=1, min_decoding_length=4) == floor
    # a limit of the end token alone: empty outputs, as ours (CTranslate2 takes no limit of 0)
    manifest["length_limit"] = {"max_len_a": 0.0, "max_len_b": 1}
    (tmp_path / "ct2" / "nmt_export.json").write_text(json.dumps(manifest))
    none = Translator([loaded], replace(tight, max_len_a=0.0, max_len_b=1)).translate(LINES)
    assert CTranslate2Model(tmp_path / "ct2").translate(LINES, beam_size=1) == none == [""] * len(LINES)


def test_the_export_wrapper_samples_with_beam_1_and_checks_its_input_as_our_translator(default_checkpoint, tmp_path):
    """sampling_topk beside the run's beam (5) crashed the process in CTranslate2 (a segfault); a None or a
    number among the lines was a TypeError of `in`, a lone surrogate pybind11's cast error, and a run folder a
    FileNotFoundError of nmt_export.json."""
    import ctranslate2

    from nmt.inference.export import CTranslate2Model

    export_ctranslate2(load_model(default_checkpoint, device="cpu"), tmp_path / "ct2")
    model = CTranslate2Model(tmp_path / "ct2", intra_threads=1)
    assert model.decoding["beam_size"] == 5  # the run's beam, which a sample does not take
    asked = []

    class Recorded:  # CTranslate2's translator, each call's options kept
        def __getattr__(self, name):
            return getattr(real, name)

        def translate_batch(self, batch, **options):
            asked.append(options)
            return real.translate_batch(batch, **options)

    real, model.translator = model.translator, Recorded()
    sampled = model.translate(LINES, sampling_topk=5)
    assert len(sampled) == len(LINES) and all(isinstance(text, str) for text in sampled)
    assert asked and all(options["beam_size"] == 1 and options["sampling_topk"] == 5 for options in asked)
    with pytest.raises(ValueError, match=r"^sampling_topk=5 with beam_size=3: CTranslate2 samples with beam_size=1"):
        model.translate(LINES, sampling_topk=5, beam_size=3)
    with pytest.raises(TypeError, match=r"^line 2: NoneType, not text; give a str for every line"):
        model.translate(["one", None])
    with pytest.raises(TypeError, match=r"^line 1: int, not text"):
        model.translate([5])
    with pytest.raises(InputError, match=r"^line 1: not valid Unicode \(a lone surrogate at character 1"):
        model.translate(["\ud800 six"])
    run_dir = Path(default_checkpoint).parent.parent
    with pytest.raises(ValueError, match=r": not a folder export.py wrote \(it holds no nmt_export.json\)"):
        CTranslate2Model(run_dir)
    if ctranslate2.get_cuda_device_count() == 0:  # CTranslate2's "CUDA driver version is insufficient"
        with pytest.raises(ValueError, match=r"^device=cuda: CTranslate2 sees no CUDA GPU on this machine"):
            CTranslate2Model(tmp_path / "ct2", device="cuda")


def test_an_exported_sampler_keeps_the_runs_temperature_and_nucleus():
    """decode.temperature=0.5 and top_p=0.9 become translate_batch's sampling_temperature and sampling_topp
    (kills export.py fixing either at 1.0)."""
    from nmt.inference.export import decoding_defaults

    options = decoding_defaults({"strategy": "sample", "temperature": 0.5, "top_p": 0.9, "seed": 1})
    assert options["sampling_temperature"] == 0.5 and options["sampling_topp"] == 0.9 and options["beam_size"] == 1
