"""Properties of the Transformer that must hold for every position encoding, norm and placement."""

import itertools

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from nmt.models.build import build_model
from nmt.models.transformer import Transformer
from nmt.modules.norm import LayerNorm, RMSNorm, ScaleNorm

from .conftest import CONF

POS_OPTIONS = sorted(p.stem for p in (CONF / "pos").glob("*.yaml"))
NORM_OPTIONS = sorted(p.stem for p in (CONF / "norm").glob("*.yaml"))
VOCAB = 23


def make_model(
    pos: str = "absolute",
    norm: str = "layer",
    norm_position: str = "pre",
    tie: str = "decoder",
    fused: bool = True,
    seed: int = 0,
    init: str = "xavier",
) -> Transformer:
    torch.manual_seed(seed)
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position = (
        OmegaConf.load(CONF / "pos" / f"{pos}.yaml")
        if pos in POS_OPTIONS
        else OmegaConf.create(
            {"_target_": pos, "_partial_": True}  # a class of the tests
        )
    )
    cfg.norm = OmegaConf.load(CONF / "norm" / f"{norm}.yaml")
    cfg.update(
        d_model=32,
        num_heads=4,
        encoder_layers=2,
        decoder_layers=2,
        ffn_dim=48,
        norm_position=norm_position,
        tie_embeddings=tie,
        fused_attention=fused,
        init=init,
    )
    return build_model(cfg, VOCAB, VOCAB).eval()


def batch(seed: int = 1, batch_size: int = 3, src_len: int = 7, tgt_len: int = 6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, VOCAB, (batch_size, src_len), generator=g)
    tgt = torch.randint(4, VOCAB, (batch_size, tgt_len), generator=g)
    return src, tgt


VARIANTS = list(itertools.product(POS_OPTIONS, NORM_OPTIONS, ["pre", "post"]))


def test_the_option_lists_read_from_conf_hold_the_encodings_and_norms_written_here():
    assert {"absolute", "learned", "relative", "rope", "none"} <= set(POS_OPTIONS)
    assert {"layer", "rms", "scale"} <= set(NORM_OPTIONS)


@pytest.mark.parametrize("pos,norm,placement", VARIANTS)
def test_causal_masking(pos, norm, placement):
    """Changing target tokens after position t leaves the outputs at positions <= t unchanged."""
    model = make_model(pos, norm, placement)
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 3:] = (changed[:, 3:] + 5) % (VOCAB - 4) + 4
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(a[:, 3:], b[:, 3:])


@pytest.mark.parametrize("pos,norm,placement", VARIANTS)
def test_source_padding_does_not_change_outputs(pos, norm, placement):
    model = make_model(pos, norm, placement)
    src, tgt = batch()
    padded = torch.cat([src, torch.zeros(src.size(0), 4, dtype=torch.long)], dim=1)  # PAD_ID = 0
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), model(padded, tgt), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pos,norm,placement", VARIANTS)
def test_incremental_decoding_equals_full_forward(pos, norm, placement):
    model = make_model(pos, norm, placement)
    src, tgt = batch()
    src[1, 5:] = 0  # a padded sentence in the batch
    with torch.no_grad():
        full = model(src, tgt).log_softmax(-1)
        state = model.encode(src)
        for t in range(tgt.size(1)):
            logits, state = model.decode_step(tgt[:, t], state)
            torch.testing.assert_close(logits.log_softmax(-1), full[:, t], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fused", [False, True])
def test_an_encoding_through_the_scaled_scores_bias_hook_is_causal_and_decodes_step_by_step_as_in_whole(fused):
    """The ``bias`` hook (ALiBi's kind) in a whole model: the future stays hidden, each decoding step (one query
    at the last position) gives the whole sequence's logits, and the source's order is told apart."""
    model = make_model("tests.test_layers.ScaledBiasPosition", fused=fused)
    src, tgt = batch()
    src[1, 5:] = 0
    changed = tgt.clone()
    changed[:, 3:] = (changed[:, 3:] + 5) % (VOCAB - 4) + 4
    with torch.no_grad():
        full = model(src, tgt)
        torch.testing.assert_close(full[:, :3], model(src, changed)[:, :3], atol=1e-5, rtol=1e-4)
        assert not torch.allclose(full, model(src.flip(1), tgt), atol=1e-5, rtol=1e-4)
        state = model.encode(src)
        for t in range(tgt.size(1)):
            logits, state = model.decode_step(tgt[:, t], state)
            torch.testing.assert_close(logits.log_softmax(-1), full[:, t].log_softmax(-1), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pos", POS_OPTIONS)
def test_every_encoding_but_none_tells_the_source_positions_apart(pos):
    """The tests above check that an encoding is consistent, which one that encoded nothing would pass too.
    Without one the model cannot tell the source's order: attention sums over the source's positions, so
    reversing the source leaves every output unchanged; with one the outputs change."""
    model = make_model(pos)
    src, tgt = batch()
    with torch.no_grad():
        same = torch.allclose(model(src, tgt), model(src.flip(1), tgt), atol=1e-5, rtol=1e-4)
    assert same == (pos == "none"), (
        f"pos={pos}: a reversed source gives {'the same' if same else 'other'} outputs; an encoding that tells "
        "positions apart changes them (a bias symmetric in distance, -m|i-j|, does not: the reversed sentence "
        "has the same distances)"
        if pos != "none"
        else "pos=none: a reversed source changed the outputs, so something else encodes positions"
    )


def test_reordered_state_follows_the_chosen_rows():
    model = make_model("rope")
    src, tgt = batch()
    with torch.no_grad():
        state = model.encode(src)
        _, state = model.decode_step(tgt[:, 0], state)
        order = torch.tensor([2, 0, 0])
        logits, _ = model.decode_step(tgt[order, 1], state.reorder(order))
        full = model(src[order], tgt[order, :2])
    torch.testing.assert_close(logits, full[:, 1], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("pos", POS_OPTIONS)
def test_explicit_and_fused_models_agree(pos):
    explicit, fused = make_model(pos, fused=False), make_model(pos, fused=True)
    src, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(explicit(src, tgt), fused(src, tgt), atol=1e-5, rtol=1e-4)


def test_tied_embeddings_share_storage():
    model = make_model(tie="all")
    assert model.output.weight is model.tgt_embed.weight is model.src_embed.weight
    untied = make_model(tie="none")
    assert untied.output.weight is not untied.tgt_embed.weight


def test_fairseq_init_scales_the_query_key_value_projections_as_fairseq_and_keeps_their_biases():
    """Xavier-uniform draws from +-gain * sqrt(6 / (fan_in + fan_out)) (variance bound^2 / 3); fairseq gives
    the query, key and value projections gain 1/sqrt(2) and leaves their biases as nn.Linear draws them,
    uniform in +-1/sqrt(fan_in). Everything else is initialised as by default."""
    import math

    def projections(model):
        return {n: p for n, p in model.named_parameters() if ".self_attn." in n or ".cross_attn." in n}

    default, fairseq = make_model(seed=3), make_model(seed=3, init="fairseq")
    d = 32
    bound = math.sqrt(6 / (d + d))
    qkv = [n for n in projections(fairseq) if n.split(".")[-2] in ("q_proj", "k_proj", "v_proj")]
    assert len(qkv) == (2 + 2 * 2) * 3 * 2  # 2 encoder attentions, 2 x 2 decoder; 3 projections; weight, bias
    for name in qkv:
        mine, theirs = fairseq.get_parameter(name), default.get_parameter(name)
        if name.endswith("weight"):
            assert mine.abs().max() <= bound / math.sqrt(2) < theirs.abs().max() <= bound
        else:
            assert 0 < mine.abs().max() <= 1 / math.sqrt(d) and not theirs.any()
    stacked = torch.cat([fairseq.get_parameter(n).flatten() for n in qkv if n.endswith("weight")])
    assert stacked.var().item() == pytest.approx((bound / math.sqrt(2)) ** 2 / 3, rel=0.1)
    others = [n for n in projections(fairseq) if n.split(".")[-2] == "out_proj"]
    for name in others:  # the output projections: as by default
        assert fairseq.get_parameter(name).abs().max() <= bound
        if name.endswith("bias"):
            assert not fairseq.get_parameter(name).any()


def test_an_unknown_init_is_refused_with_the_valid_ones():
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position = OmegaConf.load(CONF / "pos" / "absolute.yaml")
    cfg.norm = OmegaConf.load(CONF / "norm" / "layer.yaml")
    cfg.update(d_model=32, num_heads=4, init="kaiming")
    with pytest.raises(ValueError, match=r"model.init='kaiming' is not one of \['xavier', 'fairseq'\]"):
        build_model(cfg, 20, 20)


def test_all_tying_needs_a_joint_vocabulary():
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position = OmegaConf.load(CONF / "pos" / "absolute.yaml")
    cfg.norm = OmegaConf.load(CONF / "norm" / "layer.yaml")
    cfg.update(d_model=32, num_heads=4, tie_embeddings="all")
    with pytest.raises(ValueError, match="joint vocabulary"):
        build_model(cfg, 20, 30)


def test_the_layer_rms_and_scale_options_build_their_classes():
    for name, cls in (("layer", LayerNorm), ("rms", RMSNorm), ("scale", ScaleNorm)):
        assert isinstance(instantiate(OmegaConf.load(CONF / "norm" / f"{name}.yaml"))(8), cls)


@pytest.mark.parametrize("norm", NORM_OPTIONS)
@pytest.mark.parametrize("fused", [True, False])
def test_norm_fused_reaches_every_norm_of_the_model_and_a_saved_config_without_it_builds_the_fused_path(norm, fused):
    norms = OmegaConf.load(CONF / "norm" / f"{norm}.yaml")
    assert norms.fused is True  # the default
    kind = type(instantiate(norms)(8))
    norms.fused = fused
    cfg = OmegaConf.load(CONF / "model" / "transformer.yaml")
    cfg.position, cfg.norm = OmegaConf.load(CONF / "pos" / "absolute.yaml"), norms
    cfg.update(d_model=32, num_heads=4, ffn_dim=64, encoder_layers=1, decoder_layers=1)
    built = [m for m in build_model(cfg, 20, 20).modules() if isinstance(m, kind)]
    assert built and all(m.fused is fused for m in built)
    del cfg.norm["fused"]  # as a checkpoint saved before the option existed
    assert all(m.fused for m in build_model(cfg, 20, 20).modules() if isinstance(m, kind))


def test_no_torch_transformer_building_blocks_inside():
    banned = (torch.nn.Transformer, torch.nn.MultiheadAttention, torch.nn.LayerNorm, torch.nn.RMSNorm)
    for pos, norm in itertools.product(POS_OPTIONS, NORM_OPTIONS):
        assert not any(isinstance(m, banned) for m in make_model(pos, norm).modules())
