"""Every option of every config group composes and runs; invalid values fail before data is read."""

import itertools
import os
import re

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf, open_dict

from nmt.data.build import build_datamodule
from nmt.data.tokenizer import PAD_ID
from nmt.decoding.settings import STRATEGIES
from nmt.inference.checkpoint import CHECKPOINT_KEY, load_checkpoint
from nmt.models.build import build_model
from nmt.training.config import ConfigError, check_config
from nmt.training.config_device import resolve_precision
from nmt.training.run_description import experiment_recipe
from nmt.training.train import train
from nmt.utils.instantiate import instantiate

from .conftest import CONF, NO_FINAL_SCORES, ROOT, compose_train


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "pos,norm,optim,smoothing",
    list(itertools.product(options("pos"), options("norm"), options("optim"), options("smoothing"))),
)
def test_every_group_option_composes_and_trains_one_step(pos, norm, optim, smoothing):
    cfg = compose_train(f"pos={pos}", f"norm={norm}", f"optim={optim}", f"smoothing={smoothing}")
    check_config(cfg)
    torch.manual_seed(0)
    model = build_model(cfg.model, 40, 40)
    loss_fn = instantiate(cfg.smoothing, pad_id=PAD_ID)
    optimizer = instantiate(cfg.optim.optimizer)(model.parameters())
    scheduler = instantiate(cfg.optim.scheduler)(optimizer, total_steps=10) if cfg.optim.scheduler else None
    src, tgt = torch.randint(4, 40, (2, 5)), torch.randint(4, 40, (2, 6))
    loss, _, _ = loss_fn(model(src, tgt[:, :-1]), tgt[:, 1:])
    loss.backward()
    optimizer.step()
    if scheduler:
        scheduler.step()
    assert torch.isfinite(loss)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_experiment_presets_compose(experiment):
    # a recipe over data=files needs the user's files
    files = ["data.train=/tmp/unused/train"] if experiment == "summarization" else []
    cfg = compose_train(f"experiment={experiment}", *files, tiny=False)
    check_config(cfg)
    build_model(cfg.model, 100, 100)
    build_datamodule(cfg.data, "/tmp/unused", 1)  # constructing reads nothing


@pytest.mark.parametrize("grid", ["position", "lm_position"])
def test_the_position_sweep_presets_hold_every_position_encoding(grid):
    """Their comment says "every position encoding": a new file of conf/pos/ is swept with the others."""
    params = OmegaConf.load(CONF / "grid" / f"{grid}.yaml").params
    swept = sorted(str(params.pos).split(","))
    missing, extra = sorted(set(options("pos")) - set(swept)), sorted(set(swept) - set(options("pos")))
    assert swept == options("pos"), f"conf/grid/{grid}.yaml's pos omits {missing}, names {extra} of no conf/pos file"


def test_the_norm_sweep_preset_holds_every_norm():
    """Its comment says "every norm": a new file of conf/norm/ is swept with the others."""
    swept = sorted(str(OmegaConf.load(CONF / "grid" / "norm.yaml").params.norm).split(","))
    assert swept == options("norm"), f"conf/grid/norm.yaml's norm: {swept}, conf/norm/ holds {options('norm')}"


def plain(*overrides: str) -> dict:
    """The composed config as plain data, its run name aside (it names the chosen groups)."""
    cfg = compose_train("name=run", *overrides, tiny=False)
    return OmegaConf.to_container(cfg, resolve=True)


def test_python_train_py_alone_trains_the_multi30k_tiny_recipe():
    """The default data gets its best recipe, not a Transformer-base shape; model=rnn gets the RNN recipe."""
    assert plain() == plain("experiment=multi30k_tiny")
    assert plain("model=rnn") == plain("experiment=multi30k_rnn")
    model = compose_train(tiny=False).model
    assert (model.d_model, model.encoder_layers, model.ffn_dim, model.norm_position) == (128, 4, 256, "post")


def test_the_fitted_recipe_is_a_default_that_any_choice_overrides():
    cfg = compose_train("pos=relative", "norm=rms", "model.d_model=256", "optim=noam", tiny=False)
    assert cfg.model.d_model == 256 and cfg.model.encoder_layers == 4  # the rest of the recipe stays
    assert (
        cfg.optim.scheduler._target_ == "nmt.training.optim.noam" and cfg.optim.optimizer.lr == 1.0
    )  # not adamw's peak
    assert plain("data=toy")["model"]["d_model"] == 64  # another corpus, its own recipe


@pytest.mark.parametrize(
    "experiment",
    [e for e in options("experiment") if e != "summarization" and experiment_recipe(e) in (None, "none")],
)  # an experiment that pins a recipe: the next test
def test_no_experiment_changes_with_the_corpus_default_recipe(experiment):
    """A recipe means what its file says: the fitted default of its corpus (conf/recipe) never leaks into it."""
    data = [] if "override /data" in (CONF / "experiment" / f"{experiment}.yaml").read_text() else ["data=multi30k"]
    assert plain(f"experiment={experiment}", *data) == plain(f"experiment={experiment}", *data, "~recipe")


def _keys_set(path) -> set[str]:
    """The dotted keys a config file sets (its defaults list aside)."""
    node = OmegaConf.load(path)
    node.pop("defaults", None)

    def walk(value, prefix):
        if OmegaConf.is_dict(value):
            return set().union(*(walk(v, f"{prefix}{k}.") for k, v in value.items()), set())
        return {prefix[:-1]}

    return walk(node, "")


def _value(config: dict, key: str):
    for part in key.split("."):
        config = config.get(part, "(absent)") if isinstance(config, dict) else "(absent)"
    return config


@pytest.mark.parametrize("experiment", [e for e in options("experiment") if experiment_recipe(e) not in (None, "none")])
def test_an_experiment_that_pins_a_recipe_takes_nothing_from_another_corpus_default(experiment, monkeypatch):
    """experiment=multi30k_rnn data=toy applied the toy recipe before the experiment's own (its validation every
    2 epochs stayed): an experiment's recipe takes the default recipe's place, so that another corpus's default
    adds nothing, and the run records the recipe that applied."""
    pinned = experiment_recipe(experiment)
    # a corpus of plain files writes its paths from ${oc.env:NMT_DATA} (ARCHITECTURE.md): resolved here
    monkeypatch.setenv("NMT_DATA", os.environ.get("NMT_DATA") or "/corpora")
    defaults = OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml").defaults
    assert not [d for d in defaults if isinstance(d, str) and d.startswith("/recipe/")]  # pinned, not included
    model = compose_train(f"experiment={experiment}", tiny=False, hydra=True).hydra.runtime.choices.model
    others = [p for p in sorted((CONF / "recipe").glob(f"*_{model}.yaml")) if p.stem != pinned]
    assert others, f"no other corpus has a recipe for model={model} to try"
    for other in others:
        data = other.stem.removesuffix(f"_{model}")
        run = compose_train(f"experiment={experiment}", f"data={data}", tiny=False, hydra=True)
        assert run.hydra.runtime.choices.recipe == pinned
        composed = plain(f"experiment={experiment}", f"data={data}")
        bare = plain(f"experiment={experiment}", f"data={data}", "recipe=none")  # neither recipe
        own = _keys_set(CONF / "recipe" / f"{pinned}.yaml") | _keys_set(CONF / "experiment" / f"{experiment}.yaml")
        for key in sorted(_keys_set(other) - own):
            assert _value(composed, key) == _value(bare, key), f"{key} from conf/recipe/{other.name}"


def test_a_task_s_own_settings_follow_an_experiment_s_recipe_as_they_follow_the_default():
    """An experiment's recipe in the recipe's place: the task's metrics apply after it, as after the default."""
    for task, monitor in (("summarization", "val_rougeL"), ("transliteration", "val_cer")):
        pinned = compose_train("experiment=multi30k_tiny", f"task={task}", tiny=False)
        default = compose_train(f"task={task}", tiny=False)
        assert pinned.early_stopping.monitor == default.early_stopping.monitor == monitor


def test_course_baseline_has_the_reported_shape():
    cfg = compose_train("experiment=course_baseline", tiny=False)
    m = cfg.model
    assert (m.d_model, m.num_heads, m.encoder_layers, m.decoder_layers, m.ffn_dim, m.dropout) == (
        384,
        8,
        4,
        4,
        1536,
        0.25,
    )
    assert (cfg.optim.scheduler.factor, cfg.optim.scheduler.warmup, cfg.smoothing.smoothing) == (2.0, 1500, 0.1)


@pytest.mark.parametrize(
    "override,expected",
    [
        ("model.num_heads=5", "not divisible by model.num_heads=5"),
        ("decode.beam_size=0", "decode.beam_size=0"),
        ("decode.beam_size=2.5", "decode.beam_size=2.5 must be a whole number, at least 1"),
        ("decode.top_k=1.5", "decode.top_k=1.5 must be a whole number >= 0 (0: off)"),
        ("smoothing.smoothing=1.0", "smoothing.smoothing=1.0"),
        ("model.dropout=1.5", "model.dropout=1.5"),
        ("data.max_tokens=-3", "data.max_tokens=-3"),
        ("model.norm_position=middle", "['pre', 'post']"),
        ("trainer.precision=fp8", "['auto', '32-true', 'bf16-mixed'"),
        ("matmul_precision=fast", "['highest', 'high', 'medium']"),
        ("checkpoint.write_behind=sometimes", "checkpoint.write_behind='sometimes': must be true, false or null"),
        ("cudnn_attention=off", "cudnn_attention='off': must be true, false or null"),
        ("cudnn_attention=false trainer.accelerator=cpu", "a CPU run has none of cuDNN's"),
        ("trainer.max_steps=abc", "trainer.max_steps='abc': must be an integer >= -1"),
        ("seed=x", "seed='x': must be an integer"),
        ("smoothing.fused=maybe", "smoothing.fused='maybe': must be true or false"),
        ("smoothing.fused=null", "smoothing.fused=None: must be true or false"),
        # values that passed, then failed later (a ZeroDivisionError after the data was read, a TypeError at
        # the first validation without a better score, a run without last.ckpt to resume)
        ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0: must be a positive integer"),
        ("trainer.num_nodes=0", "trainer.num_nodes=0: must be a positive integer"),
        ("trainer.num_sanity_val_steps=-5", "trainer.num_sanity_val_steps=-5: must be an integer >= -1"),
        ("trainer.deterministic=maybe", "trainer.deterministic='maybe': must be true, false, 'warn' or null"),
        ("trainer.deterministic=0", "trainer.deterministic=0: must be true, false, 'warn' or null"),
        ("trainer.max_time=abc", "trainer.max_time='abc': must be a duration DD:HH:MM:SS"),
        ("trainer.accelerator=tpu", "trainer.accelerator='tpu': must be one of ['auto', 'cpu', 'gpu', 'cuda', 'mps']"),
        ("trainer.accumulate_grad_batches=true", "trainer.accumulate_grad_batches=True: must be a positive integer"),
        # true or false where a number goes (Python counts True as 1: lr=true trained at a rate of 1.0)
        ("lr=true", "lr=True: must be a positive finite number"),
        ("model.dropout=false", "model.dropout=False: must be a number in [0, 1)"),
        ("warmup=true", "warmup=True: must be an integer >= 0"),
        ("threads=true", "threads=True: must be a positive integer"),
        ("compile=1", "compile=1: must be true, false, 'reduce-overhead' or 'layers'"),  # 1 == True passed
        # boundaries and the cases each rule names (found by mutation: a bound moved, a case dropped passed)
        ("data.tokenizer.vocab_size=7", "data.tokenizer.vocab_size=7: must be an integer >= 8"),
        ("optim.scheduler.decay=constant optim.scheduler.min_ratio=0.5", "min_ratio=0.5: decay=constant does not"),
        ("trainer=ddp trainer.strategy=ddp_fork", "trainer.strategy='ddp_fork': runs start their processes through"),
        ("trainer.devices=0", "trainer.devices=0: must be 'auto', -1 (all), a positive number of devices"),
        # a word where conf/ writes true or false: read as true wherever the key was tested for truth
        ("task.rouge=maybe", "task.rouge='maybe': must be true or false"),
        ("model=rnn model.bidirectional=maybe", "model.bidirectional='maybe': must be true or false"),
        ("trainer.enable_progress_bar=maybe", "trainer.enable_progress_bar='maybe': must be true or false"),
        ("data.tokenizer.joint=maybe", "data.tokenizer.joint='maybe': must be true or false"),
        ("pos=relative pos.use_values=1", "pos.use_values=1: must be true or false"),
        ("optim.optimizer.fused=maybe", "optim.optimizer.fused='maybe': must be true, false or null"),
        ("optim.scheduler.warmup=-1", "optim.scheduler.warmup=-1: must be an integer >= 0"),
        ("model=rnn optim=noam", "optim.scheduler.d_model: the schedule scales its rate by d_model ** -0.5, and"),
        # a key its target does not take, said with what it takes (Hydra's "Error in call to target" once the
        # data was read)
        ("+optim.optimizer.foo=1", "optim.optimizer.foo is not an option of AdamW; it takes amsgrad, betas,"),
        ("+optim.scheduler.foo=1", "optim.scheduler.foo is not an option of warmup_decay; it takes decay,"),
        ("+smoothing.foo=1", "smoothing.foo is not an option of LabelSmoothedCrossEntropy; it takes fused, smoothing"),
        ("+task.foo=1", "task.foo is not an option of TranslationTask; it takes bleu_every_n_epochs,"),
        (
            "+data.tokenizer.split_digits=true",
            "data.tokenizer.split_digits is not a setting of the tokenizer; it takes",
        ),
        ("seed=-1", "seed=-1: must be an integer from 0 to 4294967295"),
        ("data=europarl data.split_seed=abc", "data.split_seed='abc': must be an integer"),
        ("progress.every_s=-1", "progress.every_s=-1: must be a number of seconds >= 0"),
        ("progress.every_s=abc", "progress.every_s='abc': must be a number of seconds >= 0"),
        ("trainer.limit_val_batches=-1", "trainer.limit_val_batches=-1: must be a number of batches >= 0"),
        ("data=toy data.train_size=0", "data.train_size=0: must be a positive integer"),
        ("data=toy data.max_words=2.5", "data.max_words=2.5: must be a positive integer"),
        ("data=toy data.min_words=9 data.max_words=3", "data.min_words=9 is above data.max_words=3"),
        # a key added where the code reads key by key: read by nothing, the run went on without it
        (
            "+checkpoint.keep_last=3",
            "checkpoint.keep_last: not read by any part of a run (added with +, or by a config of another folder?); "
            "did you mean checkpoint.keep_last_epochs? checkpoint takes",
        ),
        (
            "+early_stopping.foo=1",
            "early_stopping.foo: not read by any part of a run (added with +, or by a config of another folder?); "
            "early_stopp",
        ),
        ("+validation.foo=1 +progress.bar=1", "validation.foo: not read by any part of a run"),
        (
            "+foo=1",
            "foo: not read by any part of a run (added with +, or by a config of another folder?); the config takes "
            "attention, cache_dir,",
        ),
        ("threads=0", "threads=0: must be a positive integer, or null for PyTorch's default"),
        ("optim=noam optim.scheduler.d_model=-1", "optim.scheduler.d_model=-1: must be a positive integer"),
        ("pos=relative pos.clip=-1", "pos.clip=-1: must be a positive integer"),
        (
            "model=rnn model.teacher_forcing=maybe",
            "model.teacher_forcing='maybe': must be a number (a probability in [0, 1])",
        ),
        ("optim.scheduler.min_ratio=0.5", "optim.scheduler.min_ratio=0.5: decay=inverse_sqrt does not read it"),
        ("+plan=true", "plan: not read by any part of a run (a sweep's own setting: give it on sweep.py's command"),
        ("+task.foo=1 trainer.num_nodes=0", "trainer.num_nodes=0: must be a positive integer"),  # both said
        ("trainer.log_every_n_steps=-3", "trainer.log_every_n_steps=-3: must be an integer >= 0 (0: no per-update"),
        ("trainer.log_every_n_steps=2.5", "trainer.log_every_n_steps=2.5: must be an integer >= 0"),
        # a model part given as a key, not its group: a Hydra error block about a str not being callable
        ("model.position=rope", "model.position='rope': set by the config group pos: choose it as pos=rope"),
        ("model=rnn model.attention=additive", "model.attention='additive': set by the config group attention"),
        # a key added to a model part its class does not take: a TypeError in Hydra's many lines before
        (
            "model=rnn attention=dot +attention.attention_dim=8",
            "attention.attention_dim: not an option of attention=dot; it takes no options",
        ),
        ("pos=relative +pos.max_len=100", "pos.max_len: not an option of pos=relative; it takes clip, use_values"),
        ("+norm.bias=true +norm.scale=2", "norm.bias, norm.scale: not options of norm=layer; it takes eps, fused"),
        # processes started from the training process: a pickling traceback once the data was read
        ("trainer.devices=2 trainer.strategy=ddp_spawn", "trainer.strategy='ddp_spawn': runs start their processes"),
        ("trainer=ddp trainer.strategy=ddp_notebook", "use trainer.strategy=ddp (trainer=ddp)"),
        # a GPU kernel choice for a model that calls no fused attention
        (
            "model=rnn cudnn_attention=false trainer.accelerator=gpu",
            "cudnn_attention=False: chooses among the kernels of PyTorch",
        ),
        ("early_stopping.patience=abc", "early_stopping.patience='abc': must be an integer >= 0 or null"),
        ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val=-1: must be a number >= 0 or null"),
        ("threads=two", "threads='two': must be a positive integer"),
        ("trainer.devices=abc", "trainer.devices='abc': must be 'auto', -1 (all), a positive number"),
        ("checkpoint.keep_last_epochs=0", "checkpoint.keep_last_epochs=0: must be a positive integer (last.ckpt"),
        ("test_average_last=3 checkpoint.keep_last_epochs=1", "test_average_last=3: the final scores would average 3"),
        # every search option, before training (not when the final decode meets it), naming its own block
        ("decode.strategy=sample decode.top_p=0", "decode.top_p=0 must be in (0, 1]"),
        # the final scores of sampling: draws no rerun makes again (evaluate.py refuses a split's alike)
        (
            "decode.strategy=sample test_after_training=true",
            "sample without decode.seed: val_after_training/test_after_training=true",
        ),
        ("decode.temperature=0", "decode.temperature=0 must be positive"),
        ("decode.max_len_a=-1", "decode.max_len_a=-1 must be a finite number >= 0"),
        ("decode.max_len_a=inf", "decode.max_len_a=inf must be a finite number >= 0"),
        ("decode.length_penalty=nan", "decode.length_penalty=nan must be a finite number"),
        ("decode.strategy=sample decode.seed=1 decode.temperature=inf", "decode.temperature=inf must be positive and"),
        ("decode.early_stopping=2", "decode.early_stopping=2 must be true or false"),
        ("validation.search.strategy=nucleus", "validation.search.strategy='nucleus' is not one of"),
        (
            "decode.strategy=bean",
            f"decode.strategy='bean' is not one of {list(STRATEGIES)} (did you mean beam?)",
        ),
        ("+validation.search.top_p=0", "validation.search.top_p=0 must be in (0, 1]"),
        ("decode.strategy=epsilon decode.seed=1", "decode.epsilon=0.0 drops no token: decode.strategy=epsilon needs"),
        ("decode.strategy=epsilon decode.epsilon=1 decode.seed=1", "decode.epsilon=1 must be in [0, 1) (0: off)"),
        (
            "decode.strategy=sample decode.epsilon=3e-4 decode.seed=1",
            "decode.epsilon=0.0003: decode.strategy=sample does not read it (it applies with decode.strategy=epsilon)",
        ),
        (
            "decode.strategy=epsilon decode.epsilon=3e-4 decode.seed=1 decode.top_p=0.9",
            "decode.top_p=0.9: decode.strategy=epsilon does not read it",
        ),
        ("decode.strategy=epsilon decode.epsilon=3e-4", "epsilon without decode.seed: val_after_training/test_after_t"),
        # an option set that its strategy does not read: an error, not a silent default
        ("decode.top_p=0.9", "decode.top_p=0.9: decode.strategy=beam does not read it (it applies with decode.strat"),
        ("+validation.search.beam_size=4", "validation.search.beam_size=4: validation.search.strategy=greedy does no"),
        # refused by the model's constructor or the schedule, once the data was read and the tokenizers trained
        (
            "model=rnn model.tie_embeddings=all",
            "model.tie_embeddings='all' is not one of ['none', 'decoder'] for the RNN",
        ),
        ("model=rnn model.cell=lstmx", "model.cell='lstmx' is not one of ['gru', 'lstm']"),
        # separate vocabularies of the size asked for passed the model's size check: one row, two pieces
        (
            "data.tokenizer.joint=false model.tie_embeddings=all",
            "model.tie_embeddings='all' shares one table between source and target pieces, which needs one",
        ),
        ("model.init=foo", "model.init='foo' is not one of ['xavier', 'fairseq']"),
        ("model.teacher_forcing=2 model=rnn", "model.teacher_forcing=2 must be in [0, 1]"),
        ("data=files data.train=x.tsv +data.max_samples=9", "data.max_samples is not an option of FilesDataModule; it"),
        ("optim=adam +optim.scheduler.factor=0.5", "optim.scheduler.factor: the chosen optim has no scheduler (optim"),
        # Noam's rate is its schedule's and multiplies lr: 1e-3 trained at a thousandth of it, unsaid. The peak,
        # 2 / sqrt(32 x 1500) = 0.00913 (the tests' d_model 32), and the factor that gives 1e-3, 1e-3 x sqrt(48000)
        (
            "experiment=course_baseline optim.optimizer.lr=1e-3",
            "optim.optimizer.lr=0.001: under optim=noam the schedule gives the rate, and lr multiplies it (its peak "
            "now: 0.001 x 0.00913); keep optim.optimizer.lr=1.0 and set the peak with optim.scheduler.factor (peak = "
            "factor x d_model^-0.5 x warmup^-0.5: 2.0 gives 0.00913, 0.219 gives 0.001) and warmup",
        ),
        # the schedule's own d_model (an RNN gives it): 1 / sqrt(256 x 400) = 0.003125, and 0.5 x 320 = 160
        (
            "model=rnn optim=noam optim.scheduler.d_model=256 warmup=400 optim.optimizer.lr=0.5",
            "optim.optimizer.lr=0.5: under optim=noam the schedule gives the rate, and lr multiplies it (its peak now: "
            "0.5 x 0.00313); keep optim.optimizer.lr=1.0 and set the peak with optim.scheduler.factor (peak = factor x "
            "d_model^-0.5 x warmup^-0.5: 1.0 gives 0.00313, 160 gives 0.5)",
        ),
        ("optim.scheduler.decay=cosin", "optim.scheduler.decay='cosin': must be one of ['inverse_sqrt', 'cosine'"),
        (
            "model=rnn graph_updates=true check_every=50 optim.optimizer.fused=true trainer=gpu",
            "graph_updates=true: RNNSeq2Seq does not say its training step can be recorded",
        ),
    ],
)
def test_invalid_values_are_rejected_with_the_key_and_what_is_allowed(override, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        check_config(compose_train(*override.split()))


def test_a_model_the_constructor_refuses_stops_the_run_before_any_data_is_read(tmp_path):
    """train() says it at once: no corpus folder is made, no tokenizer trained."""
    cfg = compose_train(
        "model=rnn", "model.cell=lstmx", f"cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}"
    )
    with pytest.raises(ConfigError, match="model.cell='lstmx'"):
        train(cfg)
    assert not (tmp_path / "cache").exists()


def test_the_constructors_refusal_is_said_with_the_other_problems_of_the_config():
    """One round of fixes: a trainer value and a model option the constructor refuses, both named at once; a bad
    model value the rules name is not named a second time by the constructor."""
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("model=rnn", "model.cell=lstmx", "trainer.num_nodes=0"))
    lines = str(refused.value).splitlines()[1:]
    assert len(lines) == 2 and "trainer.num_nodes=0" in lines[0] and "model.cell='lstmx'" in lines[1], lines
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("model.d_model=-8", "trainer.num_nodes=0"))
    assert [line.split("=")[0].strip() for line in str(refused.value).splitlines()[1:]] == [
        "model.d_model",
        "trainer.num_nodes",
    ]


class ConvEncoderStandIn(torch.nn.Module):
    """A new model's constructor that leaves an option's type to PyTorch (nn.Conv1d's kernel_size)."""

    def __init__(self, src_vocab_size, tgt_vocab_size, pad_id, kernel_size: int = 3):
        super().__init__()
        self.conv = torch.nn.Conv1d(8, 8, kernel_size)


def test_a_model_setting_of_the_wrong_type_is_said_before_any_data_is_read():
    """A TypeError of the constructor (model.kernel_size=abc) was left to the real build: after the data was
    read, in Hydra's lines. Said now, naming the model."""
    from nmt.training.config_model import model_build_problems

    cfg = OmegaConf.create({"model": {"_target_": f"{__name__}.ConvEncoderStandIn", "kernel_size": 3}})
    assert model_build_problems(cfg) == []
    cfg.model.kernel_size = "abc"
    (problem,) = model_build_problems(cfg)
    assert problem.startswith("  model (ConvEncoderStandIn) could not be built: TypeError: ") and "\n" not in problem
    assert problem.endswith("a model.<key> of the wrong type? (each as its conf/model/ file gives it)")


class FocalStandIn(torch.nn.Module):
    """A new loss whose constructor checks its option's range and leaves its type to Python."""

    def __init__(self, gamma: float = 2.0, pad_id: int = 0):
        super().__init__()
        if float(gamma) < 0:
            raise ValueError(f"smoothing.gamma={gamma} must be >= 0")
        self.gamma, self.pad_id = gamma, pad_id


def test_a_losss_own_refusal_or_a_setting_of_the_wrong_type_is_said_before_any_data_is_read():
    """smoothing.gamma=-1 of a new loss was refused only once train.py built the loss, after the run folder
    was made, and a sweep's plan accepted it; gamma=null ended in Hydra's lines."""
    from nmt.training.config_model import loss_build_problems

    cfg = OmegaConf.create({"smoothing": {"_target_": f"{__name__}.FocalStandIn", "gamma": 2.0}})
    assert loss_build_problems(cfg) == []
    cfg.smoothing.gamma = -1
    assert loss_build_problems(cfg) == ["  smoothing.gamma=-1 must be >= 0"]
    cfg.smoothing.gamma = None
    (problem,) = loss_build_problems(cfg)
    assert problem.startswith("  smoothing (FocalStandIn) could not be built: TypeError: ") and "\n" not in problem
    assert loss_build_problems(OmegaConf.create({"smoothing": {"_target_": f"{__name__}.FocalStandIn"}})) == []


def test_a_setting_of_another_kind_than_its_class_declares_is_said_once_whatever_python_would_take():
    """gamma=true trained at gamma 1 (Python counts True as 1), a bucket count of 6.0 or true passed the
    constructor's own range check, and a word for an option read later failed at its first use: each is said
    by the option's annotation, once (the constructor's own check does not say it again)."""
    from nmt.training.config_types import setting_type_problems

    cfg = OmegaConf.create({"smoothing": {"_target_": f"{__name__}.FocalStandIn", "gamma": 2.0}})
    assert setting_type_problems(cfg) == []
    for value, accepted in ((2, True), (True, False), ("two", False), (None, False)):
        cfg.smoothing.gamma = value
        said = setting_type_problems(cfg)
        assert said == ([] if accepted else [f"  smoothing.gamma={value!r}: FocalStandIn takes a number as gamma"])
    for overrides, line in (
        (["pos=t5", "pos.num_buckets=true"], "pos.num_buckets=True: BucketBias takes a whole number as num_buckets"),
        (["pos=t5", "pos.max_distance=64.0"], "pos.max_distance=64.0: BucketBias takes a whole number as max_distance"),
        (["model.activation=1"], "model.activation=1: Transformer takes a word as activation"),
        (  # a key with a rule of its own: its rule's words alone
            ["model=rnn", "attention=additive", "+attention.attention_dim=true"],
            "attention.attention_dim=True: must be a whole number >= 1, or null (the hidden size)",
        ),
    ):
        with pytest.raises(ConfigError) as refused:
            check_config(compose_train(*overrides))
        assert str(refused.value).splitlines()[1:] == [f"  {line}"]


def test_alibi_refuses_an_encoder_of_one_head_before_any_data_and_takes_a_language_model_of_one():
    """One head: an encoder's keys ahead take the reversed slopes, which are its one slope, so its bias is
    symmetric and the encoder could not tell a sentence from its reverse (the shared test has 4 heads); a
    language model's causal stack has the paper's bias whatever its heads."""
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("pos=alibi", "model.num_heads=1"))
    assert "pos=alibi with model.num_heads=1: an encoder's one head weighs keys ahead and behind alike" in str(
        refused.value
    )
    check_config(compose_train("pos=alibi", "model.num_heads=2"))
    check_config(compose_train("task=lm", "pos=alibi", "model.num_heads=1"))


def test_an_option_kept_for_older_checkpoints_is_refused_for_training():
    """pos=absolute +pos.max_len=5 trained, though no table is sized by it (sentences far longer than 5)."""
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("pos=absolute", "+pos.max_len=5"))
    assert "pos.max_len=5: sinusoidal positions are computed for any length, with no table to size" in str(
        refused.value
    )
    check_config(compose_train("pos=learned", "pos.max_len=128"))  # a learned table's size
    from nmt.modules.position import SinusoidalPosition

    SinusoidalPosition(8, 4, max_len=5)  # an older checkpoint's config still builds


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["pos.max_len=63"], "data.max_len=64 trains on up to 64 positions, and the model's learned position table "
         "holds pos.max_len=63: raise the table to 64 or more, or lower data.max_len"),
        (["pos.max_len=64", "data.max_len=65"], "data.max_len=65 trains on up to 65 positions"),
        (["task=lm", "data.block_size=130"], "data.block_size=130 trains on up to 130 positions, and the model's "
         "learned position table holds pos.max_len=128"),
    ],
)  # fmt: skip
def test_a_learned_position_table_shorter_than_the_training_text_is_refused_before_any_data(overrides, said):
    """It was found at the first batch that reached past it, after the data was read and the tokenizers trained."""
    base = ["pos=learned"] + (["pos.max_len=128"] if overrides[0] == "task=lm" else ["data=toy"])
    with pytest.raises(ConfigError, match=re.escape(said)):
        check_config(compose_train(*base, *overrides))
    check_config(compose_train("data=toy", "pos=learned", "pos.max_len=64"))  # pairs of up to 63 tokens and an end
    check_config(compose_train("task=lm", "pos=learned", "pos.max_len=128", "data.block_size=128"))


def test_a_source_length_limit_given_to_a_language_model_is_refused():
    """Kept in its checkpoint and read by no generation (a prompt's continuation has max_new_tokens), where
    translate.py refused the same keys."""
    for given in (["decode.max_len_a=0"], ["decode.max_len_a=0", "decode.max_len_b=3"]):
        with pytest.raises(ConfigError) as refused:
            check_config(compose_train("task=lm", *given))
        said = ", ".join(given) + ": an output's limit as a multiple of its source's length; a continuation has"
        assert said in str(refused.value)
    check_config(compose_train("task=lm", "decode.beam_size=3"))  # the checkpoint's default for generation


@pytest.mark.parametrize("given", ["+model.pad_id=5", "+model.src_vocab_size=10", "+smoothing.pad_id=3"])
def test_a_key_the_run_sets_from_its_tokenizers_is_refused_not_overridden(given):
    """+model.pad_id=5 trained with the tokenizers' padding id, without a word; and a loss's unknown key was
    answered with "it takes pad_id", inviting it."""
    key = given.lstrip("+").split("=")[0]
    with pytest.raises(ConfigError, match=rf"{re.escape(key)}: set by the run from its tokenizers .*; remove it"):
        check_config(compose_train(given))
    with pytest.raises(ConfigError) as refused:
        check_config(compose_train("+smoothing.factor=0.2"))
    assert "smoothing.factor is not an option of" in str(refused.value) and "pad_id" not in str(refused.value)


def test_search_options_that_their_strategy_reads_are_accepted():
    check_config(compose_train("decode.strategy=sample", "decode.top_p=0.9", "decode.seed=3"))
    check_config(compose_train("decode.strategy=epsilon", "decode.epsilon=3e-4", "decode.seed=3"))
    check_config(compose_train("validation.search.strategy=beam", "+validation.search.beam_size=4"))
    check_config(compose_train("decode.top_p=1.0"))  # the default, which no strategy needs to read


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # read the data, then skipped every batch as non-finite
        (["norm.eps=-1"], r"norm.eps=-1: must be a number > 0"),
        (["norm=rms", "norm.eps=0"], r"norm.eps=0: must be a number > 0 \(this norm's default: 1e-06\)"),
        (["norm=scale", "norm.eps=-1e-5"], r"norm.eps=-1e-05: must be a number > 0 \(this norm's default: 1e-05\)"),
        (["pos=rope", "pos.base=0"], r"pos.base=0: must be a finite number > 1"),
        (["pos=rope", "pos.base=-100.0"], r"pos.base=-100.0: must be a finite number > 1"),
        # named no key: "RoPE needs an even head dimension, got 9"
        (
            ["pos=rope", "model.d_model=36", "model.num_heads=4"],
            r"pos=rope rotates pairs of a head's dimensions, and a head has 9 \(model.d_model / model.num_heads\)",
        ),
    ],
)
def test_a_module_setting_that_cannot_work_names_its_key_before_any_data_is_read(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(compose_train(*overrides))


def test_a_negative_d_model_is_named_once_without_an_empty_list_of_head_counts():
    with pytest.raises(ConfigError) as caught:
        check_config(compose_train("model.d_model=-5"))
    assert "model.d_model=-5: must be a positive integer" in str(caught.value)
    assert "valid head counts" not in str(caught.value)


def test_trainer_gpu_without_a_gpu_is_one_line_naming_the_key_before_any_data_is_read(monkeypatch, tmp_path):
    from nmt.training import train as train_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(train_module, "_train_in_folder", lambda *a: pytest.fail("went on past the checks"))
    cfg = compose_train("trainer=gpu", "trainer.accelerator=gpu", f"run_dir={tmp_path}")  # the tests pin the CPU
    with pytest.raises(ValueError, match=r"trainer.accelerator=gpu \(trainer=gpu\): this process sees no GPU"):
        train_module.train(cfg)
    cfg = compose_train("trainer.accelerator=cuda", f"run_dir={tmp_path}")
    with pytest.raises(ValueError, match=r"^trainer.accelerator=cuda: this process sees no GPU"):
        train_module.train(cfg)
    refused = {
        # float16 on a CPU: Lightning trained bf16-mixed, and config.yaml and fingerprint.json said 16-mixed
        "trainer.precision=16-mixed": r"^trainer.precision=16-mixed: float16 mixed precision needs a CUDA GPU",
        # CUDA graphs on a CPU: Inductor compiled as under compile=true, and the run's records said otherwise
        "compile=reduce-overhead": r"^compile=reduce-overhead: replays CUDA graphs, and this run trains on",
        "trainer.devices=-1": r"^trainer.devices=-1: every GPU, or a list of them, and this run trains",  # a TypeError
        "cudnn_attention=false": r"cudnn_attention=False: chooses among a GPU's attention kernels",
    }
    from nmt.training.trainer import CLUSTER_VARIABLES

    for name in CLUSTER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # several machines without a launcher that names their ranks: the processes waited for the others until
    # Lightning's timeout, without a word
    refused["trainer.num_nodes=2"] = r"^trainer.num_nodes=2: a run over several machines is started on each of"
    for accelerator in ("cpu", "auto"):
        for override, message in refused.items():
            cfg = compose_train(override, f"trainer.accelerator={accelerator}", f"run_dir={tmp_path}")
            with pytest.raises(ValueError, match=message):
                train_module.train(cfg)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")  # set by hand with NODE_RANK on each machine: goes on
    with pytest.raises(pytest.fail.Exception, match="went on past the checks"):
        train_module.train(compose_train("trainer.num_nodes=2", "trainer.accelerator=cpu", f"run_dir={tmp_path}"))


@pytest.mark.parametrize(
    "cuda,cuda_bf16,avx512_bf16,amx,accelerator,expected",
    [
        (False, False, True, False, "auto", "bf16-mixed"),  # a CPU with AVX512-BF16
        (False, False, False, True, "cpu", "bf16-mixed"),  # a CPU with AMX
        (False, False, False, False, "auto", "32-true"),  # bf16 would be emulated: slower than fp32
        (True, True, False, False, "auto", "bf16-mixed"),  # an Ampere or later GPU
        (True, False, True, False, "gpu", "32-true"),  # an older GPU: its CPU does not matter
        (True, True, True, False, "cpu", "bf16-mixed"),  # the CPU asked for, though a GPU is there
    ],
)
def test_precision_auto_picks_bf16_where_the_device_has_bf16_units(
    monkeypatch, cuda, cuda_bf16, avx512_bf16, amx, accelerator, expected
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: cuda_bf16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert resolve_precision("auto", accelerator) == expected
    assert resolve_precision("16-mixed", accelerator) == "16-mixed"  # an explicit choice is kept


@pytest.mark.slow
def test_a_run_with_precision_auto_records_the_precision_it_used(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert compose_train("experiment=multi30k_tiny", tiny=False).trainer.precision == "auto"  # the recipe's
    cfg = compose_train("trainer.precision=auto", "trainer.max_steps=2", *NO_FINAL_SCORES, f"run_dir={tmp_path}")
    train(cfg)
    assert OmegaConf.load(tmp_path / "config.yaml").trainer.precision == "bf16-mixed"
    checkpoint = load_checkpoint(tmp_path / "checkpoints" / "last.ckpt")
    assert checkpoint[CHECKPOINT_KEY]["config"]["trainer"]["precision"] == "bf16-mixed"


def test_unknown_group_option_lists_the_valid_ones():
    with pytest.raises(ConfigCompositionException, match="rope"):
        compose_train("pos=sinusoid")


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigCompositionException):
        compose_train("model.num_hedas=4")


def test_config_resolves_to_plain_data():
    cfg = compose_train()
    plain = OmegaConf.to_container(cfg, resolve=True)
    assert plain["model"]["position"]["_target_"].startswith("nmt.modules.position")


@pytest.mark.parametrize(
    ("document", "header", "left_out"),
    [
        # tuned/: values that `python sweep.py tune` writes, loaded with +tuned=<name> (docs/sweeps.md)
        ("README.md", "| group | options | what |", {"tuned"}),
        ("docs/configuration.md", "| group | options | keys |", set()),
    ],
)
def test_the_documents_list_every_option_of_every_config_group(document, header, left_out):
    """The tables of groups (the README's, and the one with every key) are how a newcomer finds an option:
    each file of conf/<group>/ is named there, and nothing that is not one."""
    import re

    text = (ROOT / document).read_text(encoding="utf-8")
    table = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    rows = {}
    for line in table:
        group, options = re.match(r"\| `([\w-]+)` \| (.*?) \|", line).groups()
        rows[group] = set(re.findall(r"`([\w.-]+)`", options))
    groups = {p.name for p in CONF.iterdir() if p.is_dir() and any(p.glob("*.yaml"))} - left_out
    assert set(rows) == groups, f"groups missing from {document}'s table: " + ", ".join(sorted(groups - set(rows)))
    for group, listed in rows.items():
        options = {p.stem for p in (CONF / group).glob("*.yaml")}
        extra, missing = sorted(listed - options), sorted(options - listed)
        assert listed == options, f"{document}, group {group}: lists {extra}, omits {missing}"


def test_cudnn_attention_is_set_at_every_run_so_that_none_carries_into_the_next(tmp_path, monkeypatch):
    """cudnn_attention=false leaves PyTorch's cuDNN attention kernels out of a run, and the next run in the
    same process (a sweep's in-process runs, a notebook) gets PyTorch's choice back unless it asks too."""
    from nmt.training import train as train_module
    from nmt.training import trainer as trainer_module

    seen = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", seen.append)
    for module in (train_module, trainer_module):  # a CPU run refuses the GPU's setting: here it trains on one
        monkeypatch.setattr(module, "check_accelerator", lambda cfg: None)
    for setting in ("false", "null"):
        run = tmp_path / setting
        overrides = ["trainer.max_steps=1", "threads=1", *NO_FINAL_SCORES, "trainer.accelerator=auto"]
        train(compose_train(*overrides, f"cudnn_attention={setting}", f"run_dir={run}"))
    assert seen == [False, True]


def test_lightnings_own_refusal_of_a_trainer_setting_names_the_config_key():
    """What the config checks leave to Lightning (a strategy's name, a duration's units) is said with the key
    Lightning names, as the config writes it."""
    import lightning as L
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from nmt.training.trainer import lightnings_refusal

    for args, said in (
        ({"strategy": "foo"}, "trainer.strategy='foo': Lightning refused it: You selected an invalid strategy name"),
        ({"max_time": {"minutes": "abc"}}, "trainer: Lightning refused these settings: unsupported type"),
    ):
        with pytest.raises((MisconfigurationException, ValueError, TypeError)) as refused:
            L.Trainer(**args, logger=False, enable_checkpointing=False)
        assert lightnings_refusal(str(refused.value), args).startswith(said), str(refused.value)


def test_a_files_package_is_read_from_the_header_hydra_reads():
    from nmt.training.config_groups import _package

    assert _package("# @package _global_\nlr: 1\n", "recipe") == ""
    assert _package("# a recipe\n\n# @package _global_.model\nd_model: 8\n", "recipe") == "model"
    assert _package("# @package _group_\neps: 1\n", "norm") == "norm"
    assert _package("eps: 1\n# @package _global_\n", "norm") == "norm"  # past the opening comments: not a header
    assert _package("# @package hydra.sweeper\nparams: {}\n", "grid") is None


def test_the_switches_are_the_keys_conf_writes_as_true_or_false():
    """Read from conf/ itself, so a switch added to a group is checked without a list to keep: its keys dotted
    as the composed config holds them, a group's under the group, a recipe's (package _global_) as written."""
    from nmt.training.config_groups import switches

    found = switches()
    assert {"task.rouge", "model.input_feeding", "data.tokenizer.joint", "norm.fused", "val_after_training"} <= found
    assert {"trainer.enable_progress_bar", "pos.use_values", "checkpoint.resume_fallback"} <= found
    assert not {"scores", "alignments", "defaults"} & found  # other programs' keys (translate.py's), Hydra's list
    check_config(compose_train("model=rnn", "task.rouge=false", "val_after_training=false"))


@pytest.mark.parametrize("model", ["transformer", "rnn", "transformer_lm"])
def test_the_models_check_builds_its_layers_without_initialising_them(model):
    """The meta-device build that checks the constructor skips weight initialisation: the same modules and
    shapes as a real build, and no random fill (on the meta device those went through PyTorch's reference
    kernels, which imported torch._dynamo: a second of every sweep plan and refused run)."""
    from nmt.training.config_model import _WithoutInit

    given = {"transformer": ["model.init=fairseq"], "rnn": ["model=rnn"], "transformer_lm": ["task=lm"]}[model]
    cfg = compose_train(*given)
    real = build_model(cfg.model, 50, 50)
    with torch.device("meta"), _WithoutInit():
        meta = build_model(cfg.model, 50, 50)
    assert [(n, p.shape) for n, p in meta.named_parameters()] == [(n, p.shape) for n, p in real.named_parameters()]
    assert all(p.is_meta for p in meta.parameters())


def test_checking_a_config_loads_no_compiler():
    import subprocess
    import sys

    code = (
        "import sys; from tests.conftest import compose_train; from nmt.training.config import check_config; "
        "check_config(compose_train('data=toy')); print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_early_stoppings_monitor_given_with_early_stopping_off_is_refused():
    """early_stopping.monitor=val_loss early_stopping.mode=min with patience null (off, the default) were
    accepted: they stopped nothing. An experiment's own monitor, with its patience turned off on the command
    line, is not the command line's to remove."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from nmt.training.config import ConfigError, check_config

    def check(*overrides):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=["data=toy", *overrides], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # as train.py's @hydra.main leaves it
        with open_dict(cfg):
            del cfg["hydra"]
        check_config(cfg)

    try:
        for off in ([], ["early_stopping.patience=0"]):
            with pytest.raises(ConfigError, match=r"early_stopping.monitor=val_loss: early stopping is off"):
                check(*off, "early_stopping.monitor=val_loss", "early_stopping.mode=min")
        with pytest.raises(ConfigError, match=r"early_stopping.mode=max: early stopping is off \(early_stopping.pat"):
            check("early_stopping.mode=max")
        with pytest.raises(ConfigError, match=r"early_stopping.after_warmup=true: early stopping is off"):
            check("early_stopping.after_warmup=true")
        with pytest.raises(ConfigError, match=r"early_stopping.after_warmup=.*true or false"):
            check("early_stopping.patience=3", "early_stopping.after_warmup=2")
        check("early_stopping.patience=3", "early_stopping.monitor=val_loss", "early_stopping.mode=min")
        check("early_stopping.patience=3", "early_stopping.after_warmup=true", "optim=adam")  # no warm-up: from 0
        # a schedule whose warm-up is not read from `warmup` (here removed from adamw's) would wait for nothing
        with pytest.raises(ConfigError, match=r"optim.scheduler \(nmt.training.optim.warmup_decay\) has no `warmup`"):
            check(
                "early_stopping.patience=3",
                "early_stopping.after_warmup=true",
                "optim=adamw",
                "~optim.scheduler.warmup",
            )
        check("experiment=multi30k_transformer", "early_stopping.patience=null")  # its own monitor
    finally:
        HydraConfig.instance().cfg = None


def test_a_tasks_own_values_for_another_strategy_are_not_the_command_lines_to_remove():
    """experiment=summarization decode.strategy=greedy was refused for decode.beam_size=4 and
    decode.length_penalty=2.0, the task's own values (=null is refused, so only restating the defaults got
    past); an option the command line gives that the strategy does not read is still refused."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from nmt.training.config import ConfigError, check_config

    def composed(*overrides):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)  # as train.py's @hydra.main leaves it
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    try:
        check_config(composed("experiment=summarization", "decode.strategy=greedy"))
        with pytest.raises(ConfigError, match=r"decode.beam_size=8: decode.strategy=greedy does not read it"):
            check_config(composed("experiment=summarization", "decode.strategy=greedy", "decode.beam_size=8"))
    finally:
        HydraConfig.instance().cfg = None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["norm._target_=nmt.modules.norm.LayerNrom"],
            r"norm._target_=nmt.modules.norm.LayerNrom: nmt.modules.norm has no LayerNrom; did you mean "
            r"nmt.modules.norm.LayerNorm\?",
        ),
        (
            ["optim.optimizer._target_=torch.optim.AdamX"],
            r"optim.optimizer._target_=torch.optim.AdamX: torch.optim has no AdamX; did you mean torch.optim.Adam\?",
        ),
        (["task._target_=nmt.tasks.nope.Task"], r"task._target_=nmt.tasks.nope.Task: no module nmt.tasks.nope"),
        (
            ["pos._partial_=false"],
            r"pos: the model builds nmt.modules.position.SinusoidalPosition once per size, so (conf/pos/\w+\.yaml|the "
            r"pos node) needs _partial_: true",
        ),
    ],
)
def test_a_target_that_names_nothing_is_one_line_with_the_closest_name(overrides, message, caplog):
    """A misspelt _target_ (a new norm's file, say) stopped the run in a screen of Hydra's words ("Error locating
    target ... set env var HYDRA_FULL_ERROR=1") naming no close name, after an error logged by Hydra; the
    task's own, at its build. A model part without _partial_: true was built by Hydra with no size ("missing 1
    required positional argument: 'dim'")."""
    from nmt.training.config import checked_task

    with pytest.raises(ConfigError, match=message):
        checked_task(compose_train(*overrides))
    assert "Error getting class" not in caplog.text


def test_a_target_whose_module_fails_here_for_a_reason_of_its_own_is_left_to_its_build(tmp_path, monkeypatch):
    """A module that is there but imports a package missing on this machine (a GPU library, say, on a login
    node planning a sweep) was said to be "no module", and one raising another error stopped the check on a
    traceback: both are left to the node's build, which says why. A path that is no dotted path is named."""
    from nmt.training.config_targets import target_problems

    (tmp_path / "needs_more.py").write_text("import not_installed_anywhere_xyz\nclass Thing: ...\n")
    (tmp_path / "needs_a_gpu.py").write_text("raise RuntimeError('needs CUDA')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for target in ("needs_more.Thing", "needs_a_gpu.Thing", "torch.optim.AdamW"):
        assert target_problems(compose_train(f"optim.optimizer._target_={target}"), {}) == []
    assert target_problems(compose_train("optim.optimizer._target_=.Foo"), {}) == [
        "  optim.optimizer._target_=.Foo: not a dotted path (module.Name)"
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=rnn", "model.teacher_forcing=null"], r"model.teacher_forcing=null: must be a number"),
        (["model=rnn", "model.hidden_size=null"], r"model.hidden_size=null: must be a positive integer"),
        (["model.dropout=null"], r"model.dropout=null: must be a number in \[0, 1\)"),
        (["lr=null"], r"lr=null: must be a positive finite number"),
    ],
)
def test_null_where_a_setting_takes_none_is_named_before_any_data_is_read(overrides, message):
    """null passed every check (each value's rule was read only for values given), and model.teacher_forcing=null
    failed at the first update on a TypeError, others in Hydra's traceback; a rule that takes null says so
    (model.activation_dropout=null: model.dropout's)."""
    with pytest.raises(ConfigError, match=message):
        check_config(compose_train(*overrides))
    check_config(compose_train("model.activation_dropout=null"))
    # nulls that mean something: Lightning's epoch default (training by steps), the training batches' budget
    check_config(compose_train("trainer.max_epochs=null", "trainer.max_steps=10", "data.eval_max_tokens=null"))
    # a trainer's null is Lightning's default (build_trainer passes none), and these readers take null as theirs
    check_config(compose_train("trainer.num_sanity_val_steps=null", "trainer.precision=null", "check_every=null"))
    check_config(compose_train("matmul_precision=null", "test_average_last=null", "compile=null"))


def test_a_warm_up_longer_than_the_run_is_said_with_the_share_of_the_peak_reached(monkeypatch):
    """data=zh_en trained 300 updates under the default 4,000-update warm-up: at 7.5% of its peak rate it
    learnt nothing, and nothing said why."""
    from nmt.training import config_groups
    from nmt.training.config_groups import warmup_past_the_end

    said = warmup_past_the_end(compose_train("optim=noam", "warmup=4000", "trainer.max_steps=300"))
    assert said == (
        "warning: the schedule's warm-up (4000 updates, warmup=) is longer than the run's 300 updates "
        "(trainer.max_steps): the learning rate rises for the whole run and ends at 8% of its peak; for a short run "
        "lower warmup (an experiment's recipe sets both, e.g. experiment=factorial_tiny)"
    )
    # a course run shrunk by epochs and batches (warm-up 1,500): its updates counted as Lightning counts them
    shrunk = ("experiment=course_baseline", "trainer.max_epochs=4", "trainer.limit_train_batches=10")
    said = warmup_past_the_end(compose_train(*shrunk))
    assert "longer than the run's 40 updates (trainer.max_epochs x limit_train_batches)" in said and "at 3% " in said
    # the experiment chosen is not offered as the fix (experiment=factorial_tiny's own short run was told to take it)
    monkeypatch.setattr(config_groups, "hydra_choices", lambda: {"experiment": "course_baseline"})
    said = warmup_past_the_end(compose_train(*shrunk))
    assert said.endswith("for a short run lower warmup= (experiment=course_baseline sets it for its own length)")
    monkeypatch.undo()
    said = warmup_past_the_end(compose_train(*shrunk, "trainer.accumulate_grad_batches=2"))
    assert "the run's 20 updates (trainer.max_epochs x limit_train_batches / accumulate_grad_batches)" in said
    assert "the run's 30 updates (trainer.max_steps)" in warmup_past_the_end(
        compose_train(*shrunk, "trainer.max_steps=30")
    )
    assert warmup_past_the_end(compose_train(*shrunk, "trainer.limit_train_batches=0.5")) is None  # of an unknown epoch
    # a smoke run of 1 update under 2,000 of warm-up: 0.05%, not "0%"
    tiny = warmup_past_the_end(compose_train("optim=noam", "warmup=2000", "trainer.max_steps=1"))
    assert "ends at 0.05% of its peak" in tiny
    near = warmup_past_the_end(compose_train("optim=noam", "warmup=200", "trainer.max_steps=199"))
    assert "ends at 99.50% of its peak" in near  # not "100%"
    assert warmup_past_the_end(compose_train(*shrunk[:2], "trainer.limit_train_batches=400")) is None
    assert warmup_past_the_end(compose_train("optim=adamw", "warmup=4000", "trainer.max_steps=300")).startswith("warn")
    assert warmup_past_the_end(compose_train("optim=noam", "warmup=300", "trainer.max_steps=300")) is None
    assert warmup_past_the_end(compose_train("optim=noam", "warmup=4000", "trainer.max_steps=-1")) is None
    assert warmup_past_the_end(compose_train("optim=adam", "trainer.max_steps=300")) is None  # a fixed rate


@pytest.mark.parametrize(
    "written, said",
    [
        ("early_stoping:\n  patience: 2\n", "early_stoping: not read by any part of a run (written in "
         "conf/experiment/mine.yaml); did you mean early_stopping? the config takes"),
        ("early_stopping:\n  patiense: 2\n", "early_stopping.patiense: not read by any part of a run (written in "
         "conf/experiment/mine.yaml); did you mean early_stopping.patience? early_stopping takes"),
    ],
)  # fmt: skip
def test_a_misspelt_key_in_an_experiment_file_is_refused_naming_the_file(tmp_path, monkeypatch, written, said):
    """``early_stoping: {patience: 2}`` in an experiment trained without early stopping, unsaid: the keys an
    experiment writes counted as the schema, where the same key given with + was refused."""
    import shutil

    from hydra import compose, initialize_config_dir

    from nmt.training import config_groups
    from nmt.utils.configs import CONF

    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / "mine.yaml").write_text(f"# @package _global_\n# a trial\n{written}")
    monkeypatch.setattr(config_groups, "CONF", conf)
    config_groups.schema_keys.cache_clear()
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            cfg = compose("train", overrides=["experiment=mine"])
        assert [p.strip() for p in config_groups.added_key_problems(cfg)][0].startswith(said)
        # another experiment with the same misspelling is not blamed for this run's, given the run's choices
        (conf / "experiment" / "other.yaml").write_text(f"# @package _global_\n# another\n{written}")
        config_groups.schema_keys.cache_clear()
        both = config_groups.added_key_problems(cfg)[0]
        assert "conf/experiment/mine.yaml or conf/experiment/other.yaml" in both
        own = config_groups.added_key_problems(cfg, {"experiment": "mine", "recipe": "none"})[0]
        assert "(written in conf/experiment/mine.yaml)" in own
        # a key the experiment writes for its own interpolation is read, by that interpolation
        (conf / "experiment" / "sized.yaml").write_text(
            "# @package _global_\n# a trial\nd: 64\nmodel:\n  d_model: ${d}\n"
        )
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            assert config_groups.added_key_problems(compose("train", overrides=["experiment=sized"])) == []
        # the same key a group's option writes is read: the experiments that ship pass
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            assert config_groups.added_key_problems(compose("train", overrides=["experiment=factorial_tiny"])) == []
    finally:
        config_groups.schema_keys.cache_clear()
