"""Export a run's data and configuration for JoeyNMT 2.3, so both toolkits train on identical splits
with the same SentencePiece models, model shape, schedule and budget.

    python -m peers.joeynmt_export OUT_DIR data=tatoeba_de_en [any train.py override ...]
    JOEY_PYTHON -m joeynmt train OUT_DIR/joeynmt.yaml
    JOEY_PYTHON -m joeynmt test OUT_DIR/joeynmt.yaml -o OUT_DIR/hyp      # writes OUT_DIR/hyp.test

The exported ``test.<tgt>`` holds the raw references to score both toolkits' outputs with sacreBLEU.
"""

import sys
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from nmt.cli import unknown_key_message, unknown_option_message
from nmt.data.build import build_datamodule
from nmt.data.segmenter import MOSES
from nmt.data.tokenizer import EOS_ID, Tokenizer, as_spaces

CONF = Path(__file__).resolve().parents[1] / "conf"
SPLITS = {"train": "train", "val": "dev", "test": "test"}  # ours -> JoeyNMT's names


def write_lines(path: Path, lines) -> None:
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")


def write_tokenizer(tokenizer: Tokenizer, out: Path, name: str) -> tuple[Path, Path]:
    """The SentencePiece model and JoeyNMT's vocabulary file: one piece per line in id order, without
    our four specials (JoeyNMT adds its own <unk> <pad> <s> </s>)."""
    model, vocab = out / f"{name}.model", out / f"{name}.vocab"
    model.write_bytes(tokenizer.model_proto)
    write_lines(vocab, (tokenizer.sp.id_to_piece(i) for i in range(EOS_ID + 1, tokenizer.vocab_size)))
    return model, vocab


def joeynmt_schedule(cfg: DictConfig) -> dict:
    """JoeyNMT's optimiser and schedule for ours: optim=noam is its `noam` (the same formula), optim=adamw
    with inverse-sqrt decay its `warmupinversesquareroot` (linear warm-up to the peak, then
    peak * sqrt(warmup / step)); nothing else has an equal there."""
    scheduler = cfg.optim.scheduler
    if scheduler is not None and scheduler._target_ == "nmt.training.optim.noam":
        return {"optimizer": "adam", "scheduling": "noam", "learning_rate_factor": float(scheduler.factor)}
    adamw = cfg.optim.optimizer._target_ == "torch.optim.AdamW"
    if adamw and scheduler is not None and scheduler.get("decay") == "inverse_sqrt":
        peak = float(cfg.optim.optimizer.lr)
        return {
            "optimizer": "adamw",
            "scheduling": "warmupinversesquareroot",
            "learning_rate": peak,
            "learning_rate_peak": peak,
        }
    raise ValueError(
        "the JoeyNMT export covers optim=noam and optim=adamw with optim.scheduler.decay=inverse_sqrt "
        "(JoeyNMT has the same schedules)"
    )


def check_exportable(cfg: DictConfig) -> None:
    """ValueError for a setting of the run that JoeyNMT 2.3's Transformer cannot express, before anything is
    written: its layers apply their one ``dropout`` to the attention weights and after the activation alike,
    and initialise every other weight Xavier-uniform at gain 1 with zero biases."""
    model = cfg.model
    if model._target_.rsplit(".", 1)[-1] != "Transformer":
        raise ValueError("the JoeyNMT export covers model=transformer")
    # JoeyNMT 2.3's Transformer has sinusoidal positions and LayerNorm only: anything else would train
    # another model under the same name
    for group, needed in (("pos", ("position", "SinusoidalPosition")), ("norm", ("norm", "LayerNorm"))):
        key, name = needed
        found = str(model[key]["_target_"]).rsplit(".", 1)[-1]
        if found != name:
            raise ValueError(
                f"{group}: JoeyNMT's Transformer has {name} only, this run has {found}; export a run with "
                f"{'pos=absolute' if group == 'pos' else 'norm=layer'}"
            )
    dropout = float(model.dropout)
    differ = {  # key: (ours, JoeyNMT's, why)
        "model.init": (model.get("init", "xavier"), "xavier", "every weight Xavier-uniform at gain 1"),
        "model.attention_dropout": (
            float(model.get("attention_dropout") or 0.0),
            dropout,
            "its dropout applies to the attention weights too",
        ),
        "model.activation_dropout": (
            dropout if model.get("activation_dropout") is None else float(model.activation_dropout),
            dropout,
            "its dropout applies after the activation too",
        ),
    }
    for key, (ours, theirs, why) in differ.items():
        if ours != theirs:
            raise ValueError(
                f"{key}={ours}: JoeyNMT's Transformer has {theirs} only ({why}); export a run with {key}={theirs}"
            )
    joeynmt_schedule(cfg)


def joeynmt_config(cfg: DictConfig, dm, out: Path, files: dict, validation_freq: int) -> dict:
    """JoeyNMT's configuration equivalent to our Transformer run ``cfg``; it validates every
    ``validation_freq`` updates (JoeyNMT has no per-epoch validation). ``dm`` is the run's data module."""
    model = cfg.model
    check_exportable(cfg)
    schedule = joeynmt_schedule(cfg)
    tied_all = model.tie_embeddings == "all"

    def side(lang: str, key: str) -> dict:
        return {
            "lang": lang,
            "level": "bpe",
            "lowercase": False,
            "normalize": False,
            "max_length": int(dm.max_len),
            "voc_file": str(files[f"{key}_vocab"]),
            "tokenizer_type": "sentencepiece",
            "tokenizer_cfg": {"model_file": str(files[f"{key}_model"]), "pretokenizer": "none"},
        }

    def stack(layers: int) -> dict:
        return {
            "type": "transformer",
            "num_layers": layers,
            "num_heads": int(model.num_heads),
            # ours drops out after the embeddings and positions, as JoeyNMT's emb_dropout does
            "embeddings": {"embedding_dim": int(model.d_model), "scale": True, "dropout": float(model.dropout)},
            "activation": str(model.get("activation", "relu")),
            "hidden_size": int(model.d_model),
            "ff_size": int(model.ffn_dim),
            "dropout": float(model.dropout),
            "layer_norm": model.norm_position,
        }

    return {
        "name": f"joeynmt_{dm.src_lang}_{dm.tgt_lang}",
        "joeynmt_version": "2.3.0",
        "data": {
            "train": str(out / "train"),
            "dev": str(out / "dev"),
            "test": str(out / "test"),
            "dataset_type": "plain",
            "src": side(dm.src_lang, "src"),
            "trg": side(dm.tgt_lang, "tgt"),
        },
        "testing": {
            "n_best": 1,
            "beam_size": int(cfg.decode.beam_size),
            "beam_alpha": float(cfg.decode.length_penalty),
            "batch_size": int(dm.eval_max_tokens),
            "batch_type": "token",
            "max_output_length": int(dm.max_len),
            "eval_metrics": ["bleu"],
            "sacrebleu_cfg": {"tokenize": "13a"},
        },
        "training": {
            "random_seed": int(cfg.seed),
            **schedule,
            "normalization": "tokens",
            "adam_betas": [float(b) for b in cfg.optim.optimizer.betas],
            "learning_rate_warmup": int(cfg.warmup),
            "learning_rate_min": 1.0e-8,
            "weight_decay": float(cfg.optim.optimizer.weight_decay),
            "clip_grad_norm": float(cfg.trainer.gradient_clip_val or 0) or None,
            "label_smoothing": float(cfg.smoothing.smoothing),
            "loss": "crossentropy",
            "batch_size": int(dm.max_tokens),
            "batch_type": "token",
            "batch_multiplier": int(cfg.trainer.accumulate_grad_batches),
            "epochs": int(cfg.trainer.max_epochs),
            "updates": int(cfg.trainer.max_steps) if cfg.trainer.max_steps > 0 else float("inf"),
            "early_stopping_metric": "bleu",
            "validation_freq": validation_freq,
            "logging_freq": 50,
            "model_dir": str(out / "model"),
            "overwrite": True,
            "shuffle": True,
            "use_cuda": False,
            "print_valid_sents": [0],
            "keep_best_ckpts": 1,
        },
        "model": {
            "initializer": "xavier_uniform",
            "bias_initializer": "zeros",
            "init_gain": 1.0,
            # ours: normal at std d^-1/2, so that with the sqrt(d) scale embeddings enter at unit variance
            "embed_initializer": "normal",
            "embed_init_weight": float(model.d_model) ** -0.5,
            "tied_embeddings": tied_all,
            "tied_softmax": model.tie_embeddings in ("decoder", "all"),
            "encoder": stack(int(model.encoder_layers)),
            "decoder": stack(int(model.decoder_layers)),
        },
    }


def export(cfg: DictConfig, out: Path) -> Path:
    """Write the splits (the source side segmented as our tokenizer sees it), tokenizers and config."""
    interval = cfg.trainer.val_check_interval
    if not isinstance(interval, int) or cfg.trainer.check_val_every_n_epoch is not None:  # before anything is written
        raise ValueError(
            "JoeyNMT validates every N updates: give the run trainer.val_check_interval=N "
            "trainer.check_val_every_n_epoch=null so both toolkits validate at the same steps"
        )
    check_exportable(cfg)
    dm = build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    target = dm.segmenters[dm.tgt_lang].name
    if target in MOSES:
        # JoeyNMT would write Moses-tokenised text and score it against the raw references
        raise ValueError(
            f"data.segmenter.{dm.tgt_lang}={target}: JoeyNMT does not detokenise what it writes as ours does; "
            "export a run without a Moses segmenter on the target side"
        )
    dm.prepare_data()  # a corpus not found, or refused: said before the folder is made
    out.mkdir(parents=True, exist_ok=True)
    src_tok, tgt_tok = dm.build_tokenizers()
    src_lang, tgt_lang = dm.src_lang, dm.tgt_lang
    for ours, theirs in SPLITS.items():
        src, tgt = dm.text(ours)
        # tabs and the other separators as spaces, as our tokenizer reads them (JoeyNMT's SentencePiece keeps them)
        write_lines(out / f"{theirs}.{src_lang}", (src_tok.segmenter(as_spaces(s)) for s in src))
        # training targets segmented like ours; dev/test targets raw, they are the BLEU references
        trained = (tgt_tok.segmenter(as_spaces(t)) for t in tgt)
        write_lines(out / f"{theirs}.{tgt_lang}", trained if ours == "train" else tgt)
    files = {}
    if cfg.model.tie_embeddings == "all":
        files["src_model"], files["src_vocab"] = write_tokenizer(src_tok, out, "joint")
        files["tgt_model"], files["tgt_vocab"] = files["src_model"], files["src_vocab"]
    else:
        files["src_model"], files["src_vocab"] = write_tokenizer(src_tok, out, src_lang)
        files["tgt_model"], files["tgt_vocab"] = write_tokenizer(tgt_tok, out, tgt_lang)
    settings = joeynmt_config(cfg, dm, out, files, interval)
    path = out / "joeynmt.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    if not argv or argv[0].startswith("-") or "=" in argv[0]:
        sys.exit(__doc__)  # the first argument is the output folder, then train.py's overrides
    overrides = argv[1:]
    # train.py's own checks of its command line: a misspelt key, or one of another option, in one line
    message = unknown_option_message(overrides) or unknown_key_message(overrides, "train")
    if message:
        sys.exit(message)
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("train", overrides=overrides)
    except Exception as err:  # noqa: BLE001 - Hydra's own message, in one line
        sys.exit(f"error: {str(err).splitlines()[0]}")
    try:
        print(export(cfg, Path(argv[0])))
    except (OSError, ValueError) as err:  # a corpus not found, a setting JoeyNMT cannot follow: one line
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
