"""train.py and evaluate.py as a user runs them: the toy task is learnt, and the checkpoint alone
reproduces the scores."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.inference.checkpoint import CheckpointError, epoch_checkpoints, load_checkpoint, weights_checksum
from nmt.inference.loading import load_model, resolve_checkpoint_path

from .conftest import ROOT

pytestmark = pytest.mark.slow


def run(script: str, *args: str, stdin: str | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        cwd=cwd,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """`python train.py data=toy` with its own defaults (the advertised demo)."""
    run_dir = tmp_path_factory.mktemp("toy_run")
    # from a scratch folder: Hydra's dated record of the command goes there, not into the checkout's runs/
    result = run("train.py", "data=toy", f"run_dir={run_dir}", "trainer.enable_progress_bar=false", cwd=run_dir.parent)
    assert f"Run directory: {run_dir}" in result.stdout
    return run_dir


def test_toy_model_learns_the_task(toy_run):
    results = json.loads((toy_run / "results.json").read_text())
    assert results["test"]["bleu"] >= 80, results["test"]
    # one sitting: the run's time (every sitting's training, validation and final scores) within the sitting's own
    # (the final validation was counted twice: 11.1 s against 10.8)
    assert 0 < results["wall_time_s"] <= results["sitting_wall_time_s"]
    assert results["best_val_bleu"] >= 80
    for name in (
        "config.yaml",
        "checkpoints/best.ckpt",
        "checkpoints/last.ckpt",
        "tokenizers/src.model",
        "logs/metrics.csv",
    ):
        assert (toy_run / name).is_file(), name


def test_each_validation_logs_how_spread_the_decoders_attention_over_the_source_is(toy_run):
    """val_cross_attn_entropy, averaged over the decoder's layers, never above val_cross_attn_even (a row's
    entropy is at most the log of its source's length); a model that learnt the task attends, so it ends
    well below the even spread."""
    import csv

    rows = [r for r in csv.DictReader((toy_run / "logs" / "metrics.csv").open()) if r.get("val_cross_attn_entropy")]
    assert len(rows) >= 2
    for row in rows:
        entropy, even = float(row["val_cross_attn_entropy"]), float(row["val_cross_attn_even"])
        assert 0 < entropy <= even + 1e-4
    assert float(rows[-1]["val_cross_attn_entropy"]) < 0.8 * float(rows[-1]["val_cross_attn_even"])


def test_evaluate_reproduces_the_test_score_from_the_checkpoint_alone(toy_run, tmp_path, monkeypatch):
    """... without importing Lightning (seconds of its start-up), which only training needs, nor matplotlib,
    which only attention maps need."""
    results = json.loads((toy_run / "results.json").read_text())
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # each module imported, a line of stderr
    done = run("evaluate.py", f"ckpt_path={results['best_checkpoint']}", f"out_dir={tmp_path}", "samples=0")
    imported = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert "torch" in imported and "sacrebleu" in imported
    assert not [name for name in imported if name.split(".")[0] in ("lightning", "pytorch_lightning", "matplotlib")]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["bleu"] == results["test"]["bleu"]
    assert metrics["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert len((tmp_path / "hypotheses.txt").read_text().splitlines()) == 200


def test_the_validation_set_is_scored_as_the_test_is_and_evaluate_reproduces_it(toy_run, tmp_path):
    """results.json's val_as_test: the final model with the run's own search on the validation set, in the
    folder evaluate.py names for those settings, with evaluate.py's score."""
    results = json.loads((toy_run / "results.json").read_text())
    val, test = results["val_as_test"], results["test"]
    assert val["split"] == "val" and val["search"] == test["search"] and val["checkpoints"] == test["checkpoints"]
    assert Path(val["hypotheses"]).parent.name == Path(test["hypotheses"]).parent.name.replace("test", "val", 1)
    run("evaluate.py", f"ckpt_path={results['best_checkpoint']}", "split=val", f"out_dir={tmp_path}", "samples=0")
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["bleu"] == val["bleu"] and metrics["bleu_tok_lc"] == val["bleu_tok_lc"]
    assert len((tmp_path / "hypotheses.txt").read_text().splitlines()) == len(
        Path(val["hypotheses"]).read_text().splitlines()
    )


def test_greedy_validation_bleu_matches_training(toy_run, tmp_path):
    results = json.loads((toy_run / "results.json").read_text())
    run(
        "evaluate.py",
        f"ckpt_path={results['best_checkpoint']}",
        "split=val",
        "decode.strategy=greedy",
        f"out_dir={tmp_path}",
        "samples=0",
    )
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["bleu"] == pytest.approx(results["best_val_bleu"], abs=0.01)


def test_translate_standard_input_keeps_empty_lines(toy_run):
    ckpt = toy_run / "checkpoints" / "best.ckpt"
    out = run("evaluate.py", f"ckpt_path={ckpt}", "input=-", stdin="one two three\n\nred cat\n").stdout
    lines = out.splitlines()
    assert lines[0] == "drei zwei eins" and lines[1] == "" and lines[2] == "Katze rot"


def test_checkpoint_averaging(toy_run):
    single = load_model(toy_run / "checkpoints" / "last.ckpt")
    averaged = load_model(toy_run / "checkpoints" / "last.ckpt", average_last=3)
    assert len(averaged.checkpoints) == 3
    w1 = single.model.state_dict()["output.weight"]
    w3 = averaged.model.state_dict()["output.weight"]
    assert not torch.equal(w1, w3)


def test_an_epoch_checkpoint_missing_among_the_last_n_is_refused_not_replaced_by_an_older_one(toy_run, tmp_path):
    """With epoch N-1 deleted, average_last=3 took epochs N-3, N-2 and N, and the scores were labelled the last
    three epochs' (the run's final test score too)."""
    folder = tmp_path / "checkpoints"
    shutil.copytree(toy_run / "checkpoints", folder)
    epochs = epoch_checkpoints(folder)
    assert len(epochs) >= 4
    load_model(epochs[-2], average_last=3)  # all there: the three up to it
    epochs[-2].unlink()
    for given in (folder / "last.ckpt", folder / "best.ckpt", epochs[-1]):
        with pytest.raises(CheckpointError, match=rf"average_last=3: {epochs[-2].name}, among the last 3 epoch"):
            load_model(given, average_last=3)
    load_model(epochs[-1], average_last=1)
    load_model(epochs[-3], average_last=3)  # up to an epoch before the gap: nothing missing
    epochs[-1].unlink()  # the newest gone too: last.ckpt's own record names it, and fewer cannot help
    with pytest.raises(CheckpointError) as refused:
        load_model(folder / "last.ckpt", average_last=2)
    assert f"{epochs[-2].name}, {epochs[-1].name}, among the last 2" in str(refused.value)
    assert str(refused.value).endswith(f"up to {epochs[-3].name}: ckpt_path={epochs[-3]} average_last=2")


def test_a_checkpoint_named_from_the_folder_a_command_runs_in_is_recorded_by_its_absolute_path(toy_run, monkeypatch):
    """metrics.json recorded `runs/t1/checkpoints/best.ckpt` as given, which reads as nothing from elsewhere."""
    monkeypatch.chdir(toy_run)
    for average in (0, 2):
        loaded = load_model(Path("checkpoints") / "last.ckpt", average_last=average)
        assert all(Path(p).is_absolute() and Path(p).is_file() for p in loaded.checkpoints), loaded.checkpoints


def test_checkpoints_load_with_weights_only(toy_run):
    checkpoint = load_checkpoint(toy_run / "checkpoints" / "best.ckpt")  # uses weights_only=True
    assert checkpoint["nmt"]["config"]["data"]["_target_"] == "nmt.data.toy.ToyDataModule"


def test_foreign_files_get_a_clear_error(tmp_path):
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    empty = tmp_path / "empty.ckpt"  # torch's errors: a bare KeyError, an EOFError without a message
    empty.write_bytes(b"")
    cut = tmp_path / "cut.ckpt"
    torch.save({"state_dict": {}}, cut)
    cut.write_bytes(cut.read_bytes()[:300])
    for path in (text, empty, cut):
        with pytest.raises(CheckpointError, match=r"is not a PyTorch checkpoint, or was cut short .*; pass a \.ckpt"):
            load_checkpoint(path)
    pickled = tmp_path / "pickled.ckpt"  # torch's advice, to load it with weights_only=False, is never given
    torch.save({"state_dict": {}, "nmt": {"config": Path("x")}}, pickled)
    with pytest.raises(CheckpointError, match=r"not a readable PyTorch checkpoint \(it holds objects other than"):
        load_checkpoint(pickled)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}}, other)
    with pytest.raises(CheckpointError, match="not a checkpoint of nmt"):
        load_checkpoint(other)
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        load_checkpoint(tmp_path / "missing.ckpt")
    # a run folder's name mistyped was "no such checkpoint file": said as either, with the nearest names there
    (tmp_path / "rnn_tiny2").mkdir()
    with pytest.raises(CheckpointError) as missing:
        load_checkpoint(resolve_checkpoint_path(tmp_path / "rnn_tny"))
    assert str(missing.value) == (
        f"{tmp_path / 'rnn_tny'}: no such run folder or checkpoint file (train.py writes runs as "
        f"<run_dir>/checkpoints/*.ckpt); did you mean {tmp_path / 'rnn_tiny2'}?"
    )
    with pytest.raises(CheckpointError, match=r"^ckpt_path is empty: give a checkpoint file or a run folder"):
        resolve_checkpoint_path("")  # was read as ckpt_path=. (the current folder)


def edited_checkpoint(toy_run: Path, tmp_path: Path, edit) -> Path:
    """The run's best checkpoint with ``edit(state_dict)`` applied, saved without its checksum (as a checkpoint
    written before the checksum was, or an edit that dropped it)."""
    checkpoint = torch.load(toy_run / "checkpoints" / "best.ckpt", weights_only=True)
    del checkpoint["nmt"]["weights_crc32"]
    edit(checkpoint["state_dict"])
    edited = tmp_path / "edited.ckpt"
    torch.save(checkpoint, edited)
    return edited


def test_a_checkpoint_whose_weights_do_not_fit_its_model_is_named_in_one_line(toy_run, tmp_path):
    def edit(weights: dict) -> None:
        del weights["model.output.weight"]
        weights["model.extra"] = torch.zeros(1)

    edited = edited_checkpoint(toy_run, tmp_path, edit)
    with pytest.raises(
        CheckpointError,
        match=rf"^{edited}: the weights do not fit the model its config describes: it lacks 1 weight\(s\) "
        r"\(output\.weight\); has unknown 1 weight\(s\) \(extra\); the file is damaged",
    ):
        load_model(edited, device="cpu")


def test_an_evaluation_under_other_code_keeps_the_runs_own_and_goes_into_a_folder_of_its_own(
    toy_run, tmp_path, monkeypatch, capsys
):
    """evaluate.py after an edit of nmt/ wrote into eval/test_beam5, the folder of the run's final scores:
    results.json then disagreed with the metrics beside it, and nothing said which code made which."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate
    from nmt.utils import code

    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    own = run / "eval" / "test_beam5" / "metrics.json"
    made = json.loads(own.read_text())
    assert made["code"] == code.code_hash()  # recorded with the scores
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("evaluate", overrides=[f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}", "device=cpu"])
    evaluate(cfg.copy())  # the same code: the same folder, as before
    assert json.loads(own.read_text())["bleu"] == made["bleu"]
    monkeypatch.setattr(code, "code_hash", lambda: "f" * 16)  # as after an edit of nmt/
    # scores made before the code was recorded in them: taken as made with the run's code (its fingerprint.json)
    own.write_text(json.dumps({k: v for k, v in json.loads(own.read_text()).items() if k != "code"}))
    before = own.read_bytes()
    result = evaluate(cfg.copy())
    assert own.read_bytes() == before  # the run's own scores kept
    other = run / "eval" / "test_beam5_codeffffffff"
    assert (
        Path(result["hypotheses"]).parent == other
        and json.loads((other / "metrics.json").read_text())["code"] == "f" * 16
    )
    assert (
        f"holds an evaluation made under other code (its code {made['code'][:8]}, this ffffffff)"
        in capsys.readouterr().out
    )


def test_a_grid_under_other_code_keeps_the_earlier_grids_file_and_writes_one_of_its_own(
    toy_run, tmp_path, monkeypatch, capsys
):
    """A grid's file had no code in its name or record: a grid after an edit of nmt/ replaced it, its rows
    pointing at the new code's folders."""
    from nmt.utils import code

    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    first = evaluate_here(f"ckpt_path={run}", "split=val", "decode.beam_size=[1,2]")
    saved = Path(first["json"])
    assert json.loads(saved.read_text())["code"] == code.code_hash()
    before = saved.read_bytes()
    monkeypatch.setattr(code, "code_hash", lambda: "f" * 16)  # as after an edit of nmt/
    again = evaluate_here(f"ckpt_path={run}", "split=val", "decode.beam_size=[1,2]")
    assert saved.read_bytes() == before  # the earlier grid's record kept
    assert Path(again["json"]) == saved.with_name(f"{saved.stem}_codeffffffff.json")
    assert json.loads(Path(again["json"]).read_text())["code"] == "f" * 16
    assert all(Path(row["folder"]).name.endswith("_codeffffffff") for row in again["rows"])
    assert "holds a decoding grid made under other code" in capsys.readouterr().out


def test_a_checkpoint_damaged_after_it_was_written_is_named_not_used(toy_run, tmp_path):
    """A few bytes of a weight changed (a bad disk, a broken copy): the model loaded and translated wrongly."""
    checkpoint = torch.load(toy_run / "checkpoints" / "best.ckpt", weights_only=True)
    assert load_checkpoint(toy_run / "checkpoints" / "best.ckpt")["nmt"]["weights_crc32"] == weights_checksum(
        checkpoint["state_dict"]
    )
    weight = checkpoint["state_dict"]["model.output.weight"]
    weight.view(-1)[weight.numel() // 2] += 1.0
    damaged = tmp_path / "damaged.ckpt"
    torch.save(checkpoint, damaged)
    with pytest.raises(CheckpointError, match=rf"^{damaged}: its weights differ from the checksum written with them"):
        load_model(damaged, device="cpu")


def test_a_checkpoint_whose_optimiser_state_was_damaged_is_named_not_resumed(toy_run, tmp_path):
    """A byte of the optimiser's state flipped on disk: its weights' checksum matched, torch.load read it, and
    a resumed run took the damaged state without a word. The zip archive's own checksums cover every part."""
    import zipfile

    damaged = tmp_path / "last.ckpt"
    shutil.copy(toy_run / "checkpoints" / "last.ckpt", damaged)
    with zipfile.ZipFile(damaged) as archive:  # torch.save stores each tensor uncompressed, in pickling order:
        parts = [i for i in archive.infolist() if "/data/" in i.filename]  # the optimiser's state after the weights
        last = max(parts, key=lambda i: int(i.filename.rsplit("/", 1)[1]))
    with damaged.open("r+b") as handle:
        handle.seek(last.header_offset + 26)
        name_length, extra_length = int.from_bytes(handle.read(2), "little"), int.from_bytes(handle.read(2), "little")
        at = last.header_offset + 30 + name_length + extra_length + last.file_size // 2
        handle.seek(at)
        byte = handle.read(1)
        handle.seek(at)
        handle.write(bytes([byte[0] ^ 0x40]))
    checkpoint = torch.load(damaged, weights_only=True)  # read without a word, the weights as written
    assert weights_checksum(checkpoint["state_dict"]) == checkpoint["nmt"]["weights_crc32"]
    with pytest.raises(CheckpointError, match=rf"^{damaged}: its part .*/data/\d+ differs from the checksum the zip"):
        load_checkpoint(damaged)


def test_a_checkpoint_with_nan_weights_and_no_checksum_is_named_not_used(toy_run, tmp_path):
    """An edited file without the checksum: its NaN weights decoded every sentence to nothing, silently."""
    norm, embed = "model.decoder_norm.weight", "model.src_embed.weight"

    def edit(weights: dict, bad: bool = True) -> None:
        weights[embed][3, 5], weights[norm][0] = (float("nan"), float("inf")) if bad else (0.0, 1.0)

    edited = edited_checkpoint(toy_run, tmp_path, edit)
    with pytest.raises(
        CheckpointError,
        match=rf"^{edited}: 2 of its weight tensors hold NaN or infinite values "
        r"\(model\.decoder_norm\.weight, model\.src_embed\.weight\): the file was edited or damaged",
    ):
        load_model(edited, device="cpu")
    edited = edited_checkpoint(toy_run, tmp_path, lambda weights: edit(weights, bad=False))
    load_model(edited, device="cpu")  # finite again: loaded


def legacy_config(config: dict) -> dict:
    """The config section as checkpoints wrote it before tasks were objects and modules moved into rooms:
    the task a name, ROUGE a top-level key, the loss and schedules under their old module paths."""
    old = {k: v for k, v in config.items() if k != "task"}
    old["task"] = "translation"
    old["rouge"] = False
    old["smoothing"] = {**config["smoothing"], "_target_": "nmt.loss.LabelSmoothedCrossEntropy"}
    old.pop("recipe", None)
    return old


def test_a_checkpoint_written_before_the_restructuring_still_evaluates(toy_run, tmp_path):
    results = json.loads((toy_run / "results.json").read_text())
    checkpoint = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=True)
    checkpoint["nmt"]["config"] = legacy_config(checkpoint["nmt"]["config"])
    old = tmp_path / "run" / "checkpoints" / "old.ckpt"
    old.parent.mkdir(parents=True)
    torch.save(checkpoint, old)
    evaluate_here(f"ckpt_path={old}", f"out_dir={tmp_path / 'eval'}")
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert metrics["bleu"] == pytest.approx(results["test"]["bleu"], abs=0.01)


def evaluate_here(*overrides: str) -> dict:
    """evaluate.py's function in this process (the entry point itself is run by the tests above)."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return evaluate(compose("evaluate", overrides=["samples=0", *overrides]))


def test_an_out_dir_holding_an_evaluation_under_other_settings_is_refused_and_kept(
    toy_run, tmp_path, capsys, monkeypatch
):
    """out_dir=<run>/eval/test_beam5 decode.beam_size=2 replaced the run's own final scores without a word
    (results.json then named beam 5 beside beam 2's metrics), as any out_dir took the last evaluation in."""
    import torch

    from nmt.inference.checkpoint import CHECKPOINT_KEY, CHECKSUM_KEY

    out = tmp_path / "out"
    first = evaluate_here(f"ckpt_path={toy_run}", f"out_dir={out}")
    # the weights it scored: the checkpoint's update and the checksum written with them, as the file holds them
    saved = torch.load(toy_run / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=True)
    assert first["weights"] == [{"update": saved["global_step"], "crc32": saved[CHECKPOINT_KEY][CHECKSUM_KEY]}]
    assert json.loads((out / "metrics.json").read_text())["weights"] == first["weights"]
    before = (out / "metrics.json").read_bytes()
    with pytest.raises(ValueError) as refused:
        evaluate_here(f"ckpt_path={toy_run}", "decode.beam_size=2", f"out_dir={out}")
    assert str(refused.value) == (
        f"out_dir={out} holds an evaluation made under other settings (search.beam_size: 5 -> 2): it is kept; "
        "give another out_dir, or remove that folder to replace it"
    )
    first_epoch = sorted((toy_run / "checkpoints").glob("epoch*.ckpt"))[0]  # other weights
    with pytest.raises(ValueError, match=rf"\(checkpoints: best.ckpt -> {first_epoch.name}; weights: updates \d+ -> "):
        evaluate_here(f"ckpt_path={first_epoch}", f"out_dir={out}")
    assert (out / "metrics.json").read_bytes() == before
    # the same weights copied elsewhere (a run folder moved): the same evaluation, scored again in place
    (tmp_path / "moved").mkdir()
    shutil.copy(toy_run / "checkpoints" / "best.ckpt", tmp_path / "moved" / "best.ckpt")
    again = evaluate_here(f"ckpt_path={tmp_path / 'moved' / 'best.ckpt'}", f"out_dir={out}")
    assert again["bleu"] == first["bleu"] and "note:" not in capsys.readouterr().out
    # the run's own final scores, which results.json names
    own = toy_run / "eval" / "test_beam5"
    kept = (own / "metrics.json").read_bytes()
    with pytest.raises(ValueError, match=r"holds an evaluation made under other settings \(search.beam_size: 5 -> 2"):
        evaluate_here(f"ckpt_path={toy_run}", "decode.beam_size=2", f"out_dir={own}")
    assert (own / "metrics.json").read_bytes() == kept
    # a mean of epochs records each one's weights, oldest first
    monkeypatch.chdir(tmp_path)  # a relative out_dir: its files recorded by absolute paths, as the run's own are
    mean = evaluate_here(f"ckpt_path={toy_run}", "average_last=2", "out_dir=mean")
    assert len(mean["weights"]) == 2 and mean["weights"][0]["update"] < mean["weights"][1]["update"]
    recorded = json.loads((tmp_path / "mean" / "metrics.json").read_text())
    assert Path(recorded["hypotheses"]).is_absolute()
    assert Path(recorded["hypotheses"]).resolve() == (tmp_path / "mean" / "hypotheses.txt").resolve()


def test_an_out_dir_holding_files_no_evaluation_record_accounts_for_is_refused_and_kept(toy_run, tmp_path):
    """A folder holding a user's hypotheses.txt, or a metrics.json that is not an evaluation's record (unreadable,
    another program's), had its files replaced without a word."""
    cases = {"loose": {"hypotheses.txt": "mine\n"}, "broken": {"metrics.json": "{not json", "hypotheses.txt": "x\n"},
             "foreign": {"metrics.json": '{"foo": 1}'}}  # fmt: skip
    for name, files in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        for file, text in files.items():
            (folder / file).write_text(text)
        with pytest.raises(ValueError, match=rf"^out_dir={folder} holds .*which no evaluation's record there accounts"):
            evaluate_here(f"ckpt_path={toy_run}", "split=val", f"out_dir={folder}")
        assert {file: (folder / file).read_text() for file in files} == files
    # an empty folder is taken, and marked before the first file: an evaluation cut short there (its outputs
    # written, not yet its metrics.json) is taken up again, not refused as a stranger's files
    from nmt.tasks.eval_folders import MARK

    (tmp_path / "empty").mkdir()
    assert evaluate_here(f"ckpt_path={toy_run}", "split=val", f"out_dir={tmp_path / 'empty'}")["bleu"] >= 0
    assert (tmp_path / "empty" / MARK).is_file()
    (tmp_path / "empty" / "metrics.json").unlink()
    assert evaluate_here(f"ckpt_path={toy_run}", "split=val", f"out_dir={tmp_path / 'empty'}")["bleu"] >= 0


def test_attention_maps_in_a_reused_folder_are_only_those_of_its_last_evaluation(toy_run, tmp_path):
    """The maps are drawn over the hypotheses that metrics.json describes: an earlier evaluation's maps of
    other sentences are not left beside them."""
    evaluate_here(f"ckpt_path={toy_run}", "attention_maps=[0,3]", f"out_dir={tmp_path}")
    assert {p.name.partition("_")[0] for p in (tmp_path / "attention").glob("*.png")} == {"sentence0", "sentence3"}
    evaluate_here(f"ckpt_path={toy_run}", "attention_maps=[1]", f"out_dir={tmp_path}")
    drawn = json.loads((tmp_path / "metrics.json").read_text())["attention_maps"]
    assert sorted(str(p) for p in (tmp_path / "attention").glob("*.png")) == sorted(drawn)
    assert drawn and all(Path(p).name.startswith("sentence1_") for p in drawn)
    evaluate_here(f"ckpt_path={toy_run}", f"out_dir={tmp_path}")
    assert not list((tmp_path / "attention").glob("*.png"))


def test_evaluate_takes_a_run_folder_and_never_overwrites_an_evaluation_of_other_settings(toy_run, tmp_path):
    evaluate_here(f"ckpt_path={toy_run}")  # the folder: its best checkpoint
    evaluate_here(f"ckpt_path={toy_run}", "decode.length_penalty=0.6")
    evaluate_here(f"ckpt_path={toy_run / 'checkpoints' / 'last.ckpt'}")
    own = (toy_run / "eval" / "test_beam5" / "metrics.json").read_bytes()
    assert "rouge1" in evaluate_here(f"ckpt_path={toy_run}", "rouge=true")  # scores the run did not make
    assert (toy_run / "eval" / "test_beam5" / "metrics.json").read_bytes() == own  # rouge=false emptied a summariser's
    folders = {p.name for p in (toy_run / "eval").iterdir()}
    assert {"test_beam5", "test_beam5_lp0.6", "last_test_beam5", "test_beam5_rouge"} <= folders, folders
    lp = json.loads((toy_run / "eval" / "test_beam5_lp0.6" / "metrics.json").read_text())
    assert lp["search"]["length_penalty"] == 0.6 and lp["checkpoints"][0].endswith("best.ckpt")


def test_average_last_beyond_the_epoch_checkpoints_is_refused_with_the_number_there_is(toy_run):
    kept = len(list((toy_run / "checkpoints").glob("epoch*.ckpt")))
    with pytest.raises(
        CheckpointError, match=rf"average_last=99: only {kept} epoch checkpoint\(s\).*average_last={kept} or fewer"
    ):
        evaluate_here(f"ckpt_path={toy_run}", "average_last=99")


def test_a_decoding_grid_scores_each_setting_as_evaluate_does_alone_and_chooses_the_best(toy_run, tmp_path, capsys):
    axes = ["average_last=[0,2]", "decode.beam_size=[1,3]"]
    grid = evaluate_here(f"ckpt_path={toy_run}", "split=val", *axes)
    table = capsys.readouterr().err  # the checkpoint alone by its name, as the folders name it (not avg0)
    assert "best.ckpt beam1" in table and "avg2 beam3" in table and "avg0 beam" not in table
    assert [row["setting"] for row in grid["rows"]] == [
        {"average_last": a, "decode.beam_size": b} for a in (0, 2) for b in (1, 3)
    ]  # every combination, the first axis slowest
    for row in grid["rows"]:
        alone = evaluate_here(f"ckpt_path={toy_run}", "split=val", *(f"{k}={v}" for k, v in row["setting"].items()))
        assert Path(row["folder"]) == Path(alone["hypotheses"]).parent  # the folder evaluate.py names
        cell = json.loads((Path(row["folder"]) / "metrics.json").read_text())
        for key in ("search", "checkpoints", "bleu", "chrf", "bleu_tok_lc"):  # the same evaluation
            assert cell[key] == alone[key], (row["setting"], key)
        assert row["scores"]["bleu"] == alone["bleu"]
    chosen = next(row for row in grid["rows"] if row["setting"] == grid["best"])
    assert chosen["scores"]["bleu"] == max(row["scores"]["bleu"] for row in grid["rows"]) == grid["best_score"]
    # each p-value is the paired randomisation test that rescoring the two folders' outputs gives
    for row in grid["rows"]:
        if row is chosen:
            assert row["p_vs_chosen"] is None
            continue
        cli = score_against(Path(chosen["folder"]), Path(row["folder"]))
        assert row["p_vs_chosen"] == pytest.approx(cli["paired_ar_p"]), row["setting"]
    assert min(row["p_vs_chosen"] or 1 for row in grid["rows"]) < 0.05  # outputs that differ: a real test
    saved = Path(grid["json"])
    assert saved.parent == toy_run / "eval" and saved.name.startswith("val_grid_avg0-2_beam1-3_bybleu_")
    assert json.loads(saved.read_text())["best"] == grid["best"]
    # the command it prints scores the test with the chosen setting
    test = evaluate_here(*shlex.split(grid["test_command"])[2:], f"out_dir={tmp_path / 'test'}")
    assert test["split"] == "test" and test["search"]["beam_size"] == grid["best"]["decode.beam_size"]
    assert len(test["checkpoints"]) == max(1, grid["best"]["average_last"])


def score_against(baseline: Path, system: Path) -> dict:
    """python -m nmt.evaluation.score SYSTEM REFS --baseline BASELINE: the paired test of saved outputs."""
    command = [sys.executable, "-m", "nmt.evaluation.score", str(system / "hypotheses.txt")]
    command += [str(system / "references.txt"), "--baseline", str(baseline / "hypotheses.txt"), "--lang", "de"]
    result = subprocess.run(command + ["--bootstrap", "0"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_a_grid_scores_same_evaluations_once_and_names_its_file_and_test_command_by_every_option(toy_run, tmp_path):
    options = ("split=val", "decode.strategy=[greedy,beam]", "decode.length_penalty=[0.6,1.0]", "max_tokens=3000")
    grid = evaluate_here(f"ckpt_path={toy_run}", *options, "decode.beam_size=3", f"out_dir={tmp_path}")
    greedy = [row for row in grid["rows"] if row["setting"]["decode.strategy"] == "greedy"]
    assert len(grid["rows"]) == 3 and len(greedy) == 1  # greedy search reads no length penalty: one evaluation
    assert greedy[0]["also"] == [{"decode.strategy": "greedy", "decode.length_penalty": 1.0}]
    assert {Path(row["folder"]).name for row in grid["rows"]} == {"val_greedy", "val_beam3_lp0.6", "val_beam3"}
    # under out_dir, the cells are in the grid's own folder (another grid's, of another limit or checkpoint,
    # wrote over them), named as its file; that name holds the checkpoint
    assert {Path(row["folder"]).parent for row in grid["rows"]} == {Path(grid["json"]).with_suffix("")}
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        f"val_grid_greedy-beam_lp0.6-1.0_beam3_bybleu_{Path(grid['json']).stem.rsplit('_', 1)[1]}.json"
    ]
    # the test command holds every option the chosen search reads, and no other: which search wins on the
    # toy model depends on the CPU's arithmetic, so the check follows the choice
    chosen = next(row for row in grid["rows"] if row["setting"] == grid["best"])
    command = shlex.split(grid["test_command"])
    beam = chosen["setting"]["decode.strategy"] == "beam"
    assert ("decode.beam_size=3" in command) == beam and "max_tokens=3000" in command
    assert ("decode.length_penalty=" + str(chosen["setting"]["decode.length_penalty"]) in command) == beam
    # another checkpoint, or another score to choose by: another file
    evaluate_here(f"ckpt_path={toy_run / 'checkpoints' / 'last.ckpt'}", *options, f"out_dir={tmp_path / 'last'}")
    assert [p.name.split("_by")[0] for p in (tmp_path / "last").glob("*.json")] == [
        "last_val_grid_greedy-beam_lp0.6-1.0"
    ]
    copied = tmp_path / "copied_run"
    shutil.copytree(toy_run, copied)
    other = evaluate_here(f"ckpt_path={copied}", *options, "decode.beam_size=3", f"out_dir={tmp_path}")
    assert Path(other["json"]).name != Path(grid["json"]).name
    by_chrf = evaluate_here(
        f"ckpt_path={toy_run}", *options, "decode.beam_size=3", "select_by=chrf", f"out_dir={tmp_path}"
    )
    assert Path(by_chrf["json"]).name != Path(grid["json"]).name and len(list(tmp_path.glob("*.json"))) == 3


def test_a_grids_p_values_are_paired_tests_of_the_score_it_chooses_by(toy_run, tmp_path):
    from nmt.metrics.corpus import tokenized_lowercase_scoring
    from nmt.metrics.randomization import paired_randomization, sentence_statistics

    for metric in ("chrf", "bleu_tok_lc"):
        grid = evaluate_here(
            f"ckpt_path={toy_run}", "split=val", "average_last=[0,2]", f"select_by={metric}", f"out_dir={tmp_path}"
        )
        chosen, other = sorted(grid["rows"], key=lambda row: row["p_vs_chosen"] is not None)
        texts = [
            [(Path(row["folder"]) / f"{n}.txt").read_text().split("\n")[:-1] for n in ("hypotheses", "references")]
            for row in (chosen, other)
        ]
        if metric == "bleu_tok_lc":  # sacreBLEU's BLEU of the Moses-tokenised lowercased texts, no tokenizer
            options, prepare = tokenized_lowercase_scoring("de")
            texts = [[[prepare(t) for t in side] for side in pair] for pair in texts]
            stats = [sentence_statistics(h, r, "bleu", options["tokenize"]) for h, r in texts]
            expected = paired_randomization([stats[0]], [stats[1]], "bleu", options["tokenize"])
        else:
            stats = [sentence_statistics(h, r, "chrf") for h, r in texts]
            expected = paired_randomization([stats[0]], [stats[1]], "chrf")
        assert other["p_vs_chosen"] == pytest.approx(expected) and expected < 0.05  # averaging helps the toy model


def test_a_grid_chooses_among_equal_scores_the_setting_nearest_the_runs_own(capsys):
    """Two length penalties that gave the same outputs: the first listed was chosen, and the test went into
    another folder than the run's own; now the run's own setting, and the tie is said."""
    from nmt.evaluation.grid import choose, print_grid

    def row(setting, score):
        return {"setting": setting, "also": [], "p_vs_chosen": None, "scores": {"bleu": score}}

    rows = [
        row({"average_last": 5, "decode.length_penalty": 0.6}, 30.0),
        row({"average_last": 5, "decode.length_penalty": 1.0}, 31.0),
        row({"average_last": 10, "decode.length_penalty": 0.6}, 31.0),
        row({"average_last": 10, "decode.length_penalty": 1.0}, 31.0),
    ]
    run = {"decode": {"beam_size": 5, "length_penalty": 1.0}, "test_average_last": 10}
    best, tied = choose(rows, "bleu", run)
    assert best is rows[3] and tied == [rows[1], rows[2]]
    # nothing at the run's own values: the first of the equals, as before
    best, _ = choose(rows, "bleu", {"decode": {"length_penalty": 2.0}, "test_average_last": 0})
    assert best is rows[1]
    # a lower-is-better score ties the same way
    cer = [{**row({"decode.beam_size": n}, 0), "scores": {"cer": 5.0}} for n in (2, 5)]
    best, tied = choose([*cer, {**row({"decode.beam_size": 4}, 0), "scores": {"cer": 7.0}}], "cer", run)
    assert best["setting"] == {"decode.beam_size": 5} and len(tied) == 1
    print_grid(rows, rows[3], "bleu", Path("grid.json"), "python evaluate.py ...", "best.ckpt", [rows[1], rows[2]])
    err = capsys.readouterr().err
    assert "2 other setting(s) score the same bleu as the chosen one" in err and "nearest the run's own" in err
    table = [line for line in err.splitlines() if "31.00" in line]
    assert "chosen" in table[0]  # first among its equals in the table


@pytest.mark.parametrize(("metric", "tested"), [("rougeL", False), ("cer", False), ("bleu", True)])
def test_a_grids_table_shows_a_p_column_only_for_a_score_the_paired_test_covers(capsys, metric, tested):
    """select_by=rougeL showed a column "p (rougeL) vs chosen" left blank under a note on the test's 10,000
    trials: a score the paired test does not cover has no such column, and the note says so."""
    from nmt.evaluation.grid import print_grid

    rows = [
        {
            "setting": {"decode.beam_size": n},
            "also": [],
            "p_vs_chosen": p,
            "scores": {metric: s, "brevity_penalty": 1.0},
        }
        for n, s, p in ((2, 40.0, 0.2 if tested else None), (4, 41.0, None))
    ]
    print_grid(rows, rows[1], metric, Path("grid.json"), "python evaluate.py ...", "best.ckpt")
    err = capsys.readouterr().err
    assert (f"p ({metric}) vs chosen" in err) == tested and ("0.2000" in err) == tested
    if tested:
        assert "p: paired approximate randomisation over the validation sentences (10,000 trials)" in err
    else:
        assert f"No paired test of {metric} here: the paired randomisation test covers bleu, bleu_tok_lc, chrf" in err
        assert "10,000 trials" not in err


def test_a_grids_test_command_holds_only_what_the_chosen_search_reads(toy_run, tmp_path):
    """A grid over strategies that chose greedy search printed decode.temperature and decode.seed in its
    test command, which evaluate.py then refused (greedy search does not read them)."""
    options = ("split=val", "decode.strategy=[greedy,sample]", "decode.temperature=[1.5,3.0]", "decode.seed=1")
    grid = evaluate_here(f"ckpt_path={toy_run}", *options, f"out_dir={tmp_path}")
    chosen = next(row for row in grid["rows"] if row["setting"] == grid["best"])
    command = grid["test_command"]
    assert ("decode.temperature" in command) == ("decode.seed" in command) == (chosen["strategy"] == "sample")
    test = evaluate_here(*shlex.split(command)[2:], f"out_dir={tmp_path / 'test'}")  # accepted as printed
    assert test["split"] == "test" and test["search"]["strategy"] == chosen["strategy"]


def test_a_grids_test_command_reads_back_a_sweep_runs_folder_name(toy_run, tmp_path):
    run_dir = tmp_path / "optim.optimizer.lr=0.001,seed=1"  # how a sweep names its runs
    shutil.copytree(toy_run / "checkpoints", run_dir / "checkpoints")
    from nmt.evaluation.grid import hydra_escape

    grid = evaluate_here(f"ckpt_path={hydra_escape(run_dir)}", "split=val", "decode.beam_size=[1,2]")
    test = evaluate_here(*shlex.split(grid["test_command"])[2:], f"out_dir={tmp_path / 'test'}")
    assert test["checkpoints"] == [str(run_dir / "checkpoints" / "best.ckpt")] and test["split"] == "test"


def test_a_grid_is_refused_off_the_validation_set_and_its_options_are_checked(toy_run, tmp_path, tmp_path_factory):
    grid = ("decode.beam_size=[1,3]",)
    source = tmp_path_factory.mktemp("input") / "x.txt"  # not in tmp_path, which must stay empty
    source.write_text("one two\n")
    refusals = {
        r"split=test: a grid of decoding settings .*\(split=val\), never on a test set": grid,
        r"split=\['val', 'test'\]: a grid": ("split=[val,test]", *grid),
        r"split=test: a grid": ("average_last=[0,2]",),
        # an input file that is there (a missing one is named first, before the checkpoint is read)
        r"input= with decode.beam_size=\[1, 3\]: a grid scores the validation set": (f"input={source}", *grid),
        r"select_by=chrf: it ranks a grid": ("split=val", "select_by=chrf"),
        r"decode.beam_size=\[\]: a grid axis needs at least one value": ("split=val", "decode.beam_size=[]"),
        r"decode.min_len=\[None, 2\]: null in a grid": ("split=val", "decode.min_len=[null,2]"),
        # a grid of one setting, "chosen" over itself with a p-value legend
        r"decode.beam_size=\[2, 2\]: 2 given twice; give distinct values": ("split=val", "decode.beam_size=[2,2]"),
        r"decode.length_penalty=\[1, 1.0\]: 1 given twice": ("split=val", "decode.length_penalty=[1,1.0]"),
        # sample translations, printed by no cell: dropped unsaid
        r"samples=3 with decode.beam_size=\[1, 3\]: a grid prints its cells' scores": ("split=val", "samples=3", *grid),
        # the luckiest draw chosen on validation, as if a better setting
        r"decode.seed=\[1, 2\]: a sampling seed is chance, not a setting to choose": (
            "split=val",
            "decode.strategy=sample",
            "decode.seed=[1,2]",
        ),
        r"select_by=ppl: not a score of these evaluations; valid: bleu, bleu_tok_lc, chrf$": (
            "split=val",
            "select_by=ppl",
            *grid,
        ),
        r"select_by=rougeL: .*\(ROUGE needs rouge=true\)": ("split=val", "select_by=rougeL", *grid),
        r"average_last=\[2, 99\]: only (\d+) epoch checkpoint.*; give values up to \1, or keep more with ": (
            "split=val",
            "average_last=[2,99]",
        ),
        r"decode.beam_size=0 must be a whole number, at least 1": (
            "split=val",
            "decode.beam_size=[3,0]",
            f"out_dir={tmp_path}",
        ),
        r"decode.top_p=0.9: no strategy of this grid \(beam\) reads it": (
            "split=val",
            "decode.top_p=0.9",
            *grid,
            f"out_dir={tmp_path}",
        ),
        r"decode.beam_size=4: no strategy of this grid \(greedy, sample\) reads it": (
            "split=val",
            "decode.strategy=[greedy,sample]",
            "decode.seed=1",
            "decode.beam_size=4",
            f"out_dir={tmp_path}",
        ),
        # sampling without a seed was refused once the greedy setting had been decoded
        r"decode.strategy=sample without decode.seed": (
            "split=val",
            "decode.strategy=[greedy,sample]",
            f"out_dir={tmp_path}",
        ),
        # an axis no strategy reads would score one evaluation under several names
        r"decode.top_p=\[0.5, 0.9\]: no strategy of this grid \(beam\) reads it": (
            "split=val",
            "decode.top_p=[0.5,0.9]",
            f"out_dir={tmp_path}",
        ),
    }
    for message, options in refusals.items():
        with pytest.raises(ValueError, match=message):
            evaluate_here(f"ckpt_path={toy_run}", *options)
    # an epoch checkpoint averages the N up to it: counted so before the first setting is decoded
    first = sorted((toy_run / "checkpoints").glob("epoch*.ckpt"))[0]
    with pytest.raises(
        ValueError, match=rf"average_last=\[0, 2\]: only 1 epoch checkpoint\(s\) beside {first} up to it"
    ):
        evaluate_here(f"ckpt_path={first}", "split=val", "average_last=[0,2]", f"out_dir={tmp_path}")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # refused before anything was decoded
    # an ensemble is translate.py's: evaluate.py names the way in one line
    with pytest.raises(ValueError, match=r"evaluate.py scores one checkpoint .* translate.py ckpt_path=\[\.\.\.\]"):
        evaluate_here(f"ckpt_path=[{toy_run},{toy_run}]")
