"""The peer comparisons' own code: the JoeyNMT export (our exact splits, tokenizers and an equivalent
configuration), the id mapping of the peer speed harness, and the bench's measurement helpers. The
peers themselves are not installed here: they live in their own environments and run in benchmarks."""

import csv
import json
import re
import subprocess
import sys

import pytest
import sentencepiece as spm
import torch
import yaml

from benchmarks.__main__ import decoding_table, training_table
from benchmarks.systems import decode_throughput, our_rnn, our_transformer, peak_rss_mb
from nmt.data.build import build_datamodule
from nmt.data.tokenizer import EOS_ID
from nmt.training.train import train
from peers.joeynmt_export import export, joeynmt_schedule
from peers.peer_speed import PEER_PAD, output_length, remap

from .conftest import NO_FINAL_SCORES, ROOT, compose_train

# JoeyNMT validates every N updates, and applies its dropout to the attention weights too
STEP_BUDGET = [
    "trainer.max_steps=40",
    "trainer.val_check_interval=20",
    "trainer.check_val_every_n_epoch=null",
    "model.attention_dropout=0.1",
]


def read(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_joeynmt_export_writes_our_splits_tokenizers_and_an_equivalent_config(tmp_path):
    cfg = compose_train(
        "model.tie_embeddings=all", "optim=noam", "warmup=33", "optim.scheduler.factor=0.7", *STEP_BUDGET
    )
    path = export(cfg, tmp_path / "joey")
    dm = build_datamodule(cfg.data, cfg.cache_dir, cfg.seed)
    for ours, theirs in (("train", "train"), ("val", "dev"), ("test", "test")):
        src, tgt = dm.text(ours)
        assert read(tmp_path / "joey" / f"{theirs}.{dm.src_lang}") == src
        assert read(tmp_path / "joey" / f"{theirs}.{dm.tgt_lang}") == tgt  # raw references
    settings = yaml.safe_load(path.read_text())
    training, model = settings["training"], settings["model"]
    assert (training["updates"], training["validation_freq"], training["random_seed"]) == (40, 20, cfg.seed)
    assert (training["scheduling"], training["learning_rate_factor"], training["learning_rate_warmup"]) == (
        "noam",
        0.7,
        33,
    )
    assert training["batch_size"] == cfg.data.max_tokens and training["label_smoothing"] == 0.1
    assert model["tied_embeddings"] and model["tied_softmax"]
    assert model["encoder"]["hidden_size"] == cfg.model.d_model and model["encoder"]["layer_norm"] == "pre"
    # the vocabulary file lists our pieces after our four specials, which JoeyNMT adds itself
    joint = spm.SentencePieceProcessor(model_file=settings["data"]["src"]["tokenizer_cfg"]["model_file"])
    pieces = read(tmp_path / "joey" / "joint.vocab")
    assert pieces == [joint.id_to_piece(i) for i in range(EOS_ID + 1, joint.get_piece_size())]
    assert settings["data"]["src"]["voc_file"] == settings["data"]["trg"]["voc_file"]


@pytest.mark.parametrize(
    "overrides,expected",
    [
        (["optim=noam", "optim.scheduler.factor=0.7"], {"optimizer": "adam", "scheduling": "noam"}),
        (["lr=3e-3", "weight_decay=0.02"], {"optimizer": "adamw", "scheduling": "warmupinversesquareroot"}),
    ],
)
def test_joeynmt_export_maps_our_schedules_to_its_equals(overrides, expected, tmp_path):
    cfg = compose_train(*overrides, "warmup=33", *STEP_BUDGET)
    training = yaml.safe_load(export(cfg, tmp_path / "joey").read_text())["training"]
    assert {key: training[key] for key in expected} == expected
    assert training["learning_rate_warmup"] == 33
    if expected["optimizer"] == "adamw":  # its peak and decoupled weight decay are ours
        assert (training["learning_rate_peak"], training["weight_decay"]) == (3e-3, 0.02)
    else:
        assert training["learning_rate_factor"] == 0.7


@pytest.mark.parametrize("overrides", [["optim=adam"], ["optim.scheduler.decay=cosine"]])
def test_joeynmt_export_of_a_schedule_it_cannot_express_says_so(overrides):
    cfg = compose_train(*overrides, *STEP_BUDGET)
    with pytest.raises(ValueError, match="covers optim=noam and optim=adamw"):
        joeynmt_schedule(cfg)


def test_joeynmt_export_needs_validation_counted_in_updates(tmp_path):
    with pytest.raises(ValueError, match="val_check_interval=N trainer.check_val_every_n_epoch=null"):
        export(compose_train(), tmp_path / "joey")


def test_joeynmt_export_of_a_model_it_cannot_express_says_so(tmp_path):
    """Also: the fairseq initialisation was exported as JoeyNMT's Xavier, and our attention dropout of 0 as its
    dropout, unsaid; a refused export left a folder of splits without a configuration."""
    with pytest.raises(ValueError, match="model=transformer"):
        export(compose_train("model=rnn", *STEP_BUDGET[:3]), tmp_path / "joey")
    for setting, said in (
        ("model.init=fairseq", r"^model.init=fairseq: JoeyNMT's Transformer has xavier only"),
        ("model.attention_dropout=0.0", r"^model.attention_dropout=0.0: JoeyNMT's Transformer has 0.1 only"),
        ("model.activation_dropout=0.3", r"^model.activation_dropout=0.3: JoeyNMT's Transformer has 0.1 only"),
    ):
        with pytest.raises(ValueError, match=said):
            export(compose_train(*STEP_BUDGET, setting), tmp_path / "joey")
    assert not (tmp_path / "joey").exists()
    with pytest.raises(ValueError, match=r"norm: JoeyNMT's Transformer has LayerNorm only, this run has RMSNorm"):
        export(compose_train("norm=rms", *STEP_BUDGET), tmp_path / "joey")
    with pytest.raises(ValueError, match=r"pos: .* SinusoidalPosition only, this run has RotaryPosition.*pos=absolute"):
        export(compose_train("pos=rope", *STEP_BUDGET), tmp_path / "joey")
    assert not (tmp_path / "joey").exists()
    layers = compose_train(*STEP_BUDGET, "model.encoder_layers=3", "model.decoder_layers=1")  # each its own depth
    settings = yaml.safe_load(export(layers, tmp_path / "deep").read_text())["model"]
    assert (settings["encoder"]["num_layers"], settings["decoder"]["num_layers"]) == (3, 1)
    # what JoeyNMT can express is written as ours: the dropout after embeddings and positions, the embeddings'
    # initialisation (normal, std d^-1/2), the activation
    gelu = compose_train(*STEP_BUDGET, "model.activation=gelu")
    settings = yaml.safe_load(export(gelu, tmp_path / "gelu").read_text())["model"]
    assert settings["encoder"]["activation"] == settings["decoder"]["activation"] == "gelu"
    assert settings["encoder"]["embeddings"]["dropout"] == gelu.model.dropout
    assert (settings["embed_initializer"], settings["embed_init_weight"]) == ("normal", gelu.model.d_model**-0.5)


def test_validation_every_n_updates_across_epochs(tmp_path):
    """trainer.check_val_every_n_epoch=null reaches Lightning as None: validation counts updates, also
    when an epoch is shorter than the interval (JoeyNMT's rule, for equal budgets)."""
    cfg = compose_train(
        "trainer.max_steps=12",
        "trainer.max_epochs=10",
        "trainer.val_check_interval=4",
        "trainer.check_val_every_n_epoch=null",
        "data.max_tokens=8000",  # 300 short pairs: about 2 updates per epoch
        "validation.bleu_every_n_epochs=0",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=min",
        *NO_FINAL_SCORES,
        f"run_dir={tmp_path / 'run'}",
    )
    results = train(cfg)
    rows = list(csv.DictReader((tmp_path / "run" / "logs" / "metrics.csv").open()))
    validated = sorted({int(r["step"]) for r in rows if r.get("val_loss")})
    assert results["steps"] == 12 and results["epochs"] > 1
    assert validated == [3, 7, 11]  # after updates 4, 8 and 12 (Lightning logs the 0-based step)


def test_peer_ids_swap_pad_and_unk_only():
    ours = torch.tensor([[5, 1, 3, 0, 0], [2, 9, 1, 4, 3]])
    peer = remap(ours)
    assert peer.tolist() == [[5, 0, 3, PEER_PAD, PEER_PAD], [2, 9, 0, 4, 3]]


def test_peer_output_length_stops_at_eos_or_padding():
    assert output_length([7, 8, 9]) == 3
    assert output_length([7, 8, 3, 5]) == 2
    assert output_length([7, PEER_PAD, PEER_PAD]) == 1


def test_our_decoders_in_the_bench_produce_exactly_the_forced_length():
    """The bench compares decoders at equal work: random weights and a fixed limit give out_len tokens."""
    torch.manual_seed(0)
    src = torch.randint(4, 50, (6, 7))
    for model in (our_transformer(50, 32, 4, 1, 64), our_rnn(50, 32, 1)):
        model.eval()
        for beam in (1, 5):
            assert decode_throughput(model, [src, src], beam, out_len=12)["mean_length"] == 12


def test_peak_memory_is_this_process_own():
    """A child's peak starts afresh (getrusage would report the parent's)."""
    big = torch.ones(64 * 1024 * 1024 // 4)  # 64 MB here
    code = "from benchmarks.systems import peak_rss_mb; print(peak_rss_mb())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout)
    assert peak_rss_mb() > 64 and child < peak_rss_mb() + 1000
    del big


def test_bench_tables_give_ratios_against_ours():
    training = {
        "ours, Transformer": {"train_tokens_per_s": 300.0, "peak_rss_mb": 900.0, "baseline_rss_mb": 400.0},
        "JoeyNMT 2.3, Transformer": {"train_tokens_per_s": 100.0, "peak_rss_mb": 800.0, "baseline_rss_mb": 500.0},
        "OpenNMT-py 3.5, GRU": {},  # a failed worker
    }
    rows = training_table(training)
    assert "| JoeyNMT 2.3, Transformer | 100 | 3.00x | 800 | 300 |" in rows
    assert "| OpenNMT-py 3.5, GRU | - | - | - | - |" in rows
    decode = {
        "beam 1": {"sentences_per_s": 40.0, "mean_length": 30.0},
        "beam 5": {"sentences_per_s": 8.0, "mean_length": 30.0},
    }
    slower = {
        "beam 1": {"sentences_per_s": 10.0, "mean_length": 30.0},
        "beam 5": {"sentences_per_s": 2.0, "mean_length": 30.0},
    }
    rows = decoding_table(
        {"ours, Transformer": {"decode": decode, "peak_rss_mb": 1.0}, "JoeyNMT 2.3, Transformer": {"decode": slower}}
    )
    assert "| JoeyNMT 2.3, Transformer | 10.0 | 2.0 | 4.00x | 30.0 | - |" in rows
    json.dumps(rows)  # plain strings


def test_the_joeynmt_exporter_says_a_bad_override_in_one_line_and_help_is_no_error(capsys):
    """A key of another optimiser (optim.scheduler.factor without optim=noam) ended in Hydra's traceback, and
    --help exited with status 1."""
    from peers.joeynmt_export import main

    main(["--help"])
    assert "joeynmt" in capsys.readouterr().out.lower()
    with pytest.raises(SystemExit, match=r"'optim.scheduler.factor' \(on the command line\) .* a key of optim=noam"):
        main(["out", "optim.scheduler.factor=0.5"])


def test_the_speed_bench_checks_its_output_and_the_peers_before_measuring(tmp_path, capsys):
    """A folder as --output, or a peer's Python that is not there, was found after the measurements (a
    traceback, the results lost)."""
    from benchmarks.__main__ import main

    for argv, said in (
        (["--output", str(tmp_path)], "a folder, not a file"),
        (["--joeynmt", str(tmp_path / "nope" / "python")], "not a Python interpreter here"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # runpy: imported by another module
@pytest.mark.parametrize(
    "module", sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in ("__init__", "__main__"))
)
def test_every_benchmark_module_run_with_help_says_what_it_takes_or_what_to_run(module, monkeypatch, capsys):
    """The benchmarks' shared libraries, run as programs, ended at once with status 0 and no word: a user
    asking one for --help was told nothing."""
    import runpy

    monkeypatch.setattr(sys, "argv", [f"{module}.py", "--help"])
    code = 0
    try:
        runpy.run_module(f"benchmarks.{module}", run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    said = capsys.readouterr().out
    if not code:  # a program: its usage
        assert said.startswith("usage:"), said
    else:  # a library: the program it belongs to, as the exit message
        assert re.search(r"run (that|one of them)", str(code)), code


def test_the_speed_bench_appends_nothing_when_a_measurement_fails(tmp_path, monkeypatch, capsys):
    """A table whose failed rows read "-" would pass for measured: a failure appends nothing to the results
    file and draws no figure, and the command ends 2 naming the first failure."""
    import types

    import benchmarks.__main__ as bench

    output = tmp_path / "BENCHMARKS.md"
    output.write_text("# earlier results\n")
    tokenizer = types.SimpleNamespace(vocab_size=16)
    data = types.SimpleNamespace(build_tokenizers=lambda: (tokenizer, tokenizer))
    monkeypatch.setattr(bench, "load_data", lambda *a: (data, [torch.zeros(2, 3)], [torch.zeros(2, 3)]))
    monkeypatch.setattr(bench, "report_header", lambda *a: ["header"])
    monkeypatch.setattr(bench, "scaling_rows", lambda *a: pytest.fail("a figure drawn after a failure"))

    def worker(toolkit, python, batches, mode, arch, args, extra=()):
        if (toolkit, arch, mode) == ("ours", "rnn", "train"):  # one fails, as run_worker records it
            bench.FAILED.append("ours rnn train: RuntimeError: out of memory")
            return {}
        return {"train_tokens_per_s": 1000.0, "peak_rss_mb": 3.0, "baseline_rss_mb": 1.0}

    monkeypatch.setattr(bench, "run_worker", worker)
    assert bench.main(["--output", str(output), "--rounds", "1"]) == 2
    assert output.read_text() == "# earlier results\n"
    said = capsys.readouterr().err
    assert "measurement(s) failed, nothing appended to" in said and "ours rnn train: RuntimeError" in said
    # the same run with no failure appends its tables
    monkeypatch.setattr(
        bench, "run_worker", lambda *a, **k: {"train_tokens_per_s": 1000.0, "peak_rss_mb": 3.0, "baseline_rss_mb": 1.0}
    )
    assert bench.main(["--output", str(output), "--rounds", "1", "--no-scaling"]) == 0
    assert output.read_text().startswith("# earlier results\nheader\n")
