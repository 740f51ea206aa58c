"""Runs that never lose or mislabel work: each fault found by trying to break training, reproduced and
checked (on the toy task, or with a fake file system or process where a real one is impractical)."""

import csv
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from nmt.cli import run_cli
from nmt.inference.checkpoint import CheckpointError
from nmt.sweep.callback import SweepReport
from nmt.training.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError
from nmt.training.config import ConfigError, check_config
from nmt.training.resume import resolve_resume, resolve_run_dir
from nmt.training.run_folder import RunFolderError, RunLock
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, compose_train, steps_per_epoch

QUICK = ["trainer.max_epochs=2", *NO_FINAL_SCORES, "threads=1"]


# ---- 1, 2: max_steps between two decoded validations; rerunning a finished run ------------------------
@pytest.mark.slow
def test_max_steps_between_decoded_epochs_validates_the_last_updates_and_a_rerun_keeps_the_results(tmp_path):
    probe = compose_train("validation.bleu_every_n_epochs=2")
    steps = 3 * steps_per_epoch(probe)  # ends with epoch 3, whose validation does not decode
    args = ["validation.bleu_every_n_epochs=2", "trainer.max_epochs=6", f"trainer.max_steps={steps}"]
    cfg = compose_train(*args, f"run_dir={tmp_path}")
    results = train(cfg)
    assert results["steps"] == steps and results["finished"]
    assert results["best_checkpoint"].endswith("best.ckpt") and Path(results["best_checkpoint"]).is_file()
    assert "val_bleu" in results["final_metrics"]  # the final weights were decoded
    assert results["test"]["bleu"] is not None
    saved = (tmp_path / "results.json").read_text()

    again = train(compose_train(*args, f"run_dir={tmp_path}"))
    assert again == json.loads(saved) and (tmp_path / "results.json").read_text() == saved


@pytest.mark.slow
def test_a_run_shorter_than_the_decoding_interval_still_gets_a_best_checkpoint(tmp_path):
    """Two epochs, BLEU decoded every third, checkpoint.monitor=val_bleu: no validation computed the score,
    so the final weights are validated decoding, and they become best.ckpt."""
    results = train(compose_train("validation.bleu_every_n_epochs=3", *QUICK, f"run_dir={tmp_path}"))
    assert results["epochs"] == 2 and results["best_val_bleu"] is not None
    assert results["best_checkpoint"] == str(tmp_path / "checkpoints" / "best.ckpt")
    assert Path(results["best_checkpoint"]).is_file()


# ---- 3: an unreadable last.ckpt ----------------------------------------------------------------------
@pytest.mark.slow
def test_a_truncated_last_checkpoint_is_named_in_one_line_or_replaced_when_the_config_says_so(tmp_path, capsys):
    train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    (tmp_path / "results.json").unlink()  # as if killed before the end
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    config_before = (tmp_path / "config.yaml").stat().st_mtime_ns
    with pytest.raises(CheckpointError, match=r"cannot resume: .*last\.ckpt.*checkpoint\.resume_fallback=true"):
        train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    assert (tmp_path / "config.yaml").stat().st_mtime_ns == config_before  # nothing rewritten

    results = train(compose_train(*QUICK, "checkpoint.resume_fallback=true", f"run_dir={tmp_path}"))
    out = capsys.readouterr().out
    assert "last.ckpt cannot be read; resuming from" in out and "epoch001.ckpt (checkpoint.resume_fallback=true)" in out
    assert results["finished"]


def test_a_foreign_checkpoint_offers_the_fallback_only_where_there_is_one(tmp_path):
    """A checkpoint of another program in a folder of its own was answered with "pass
    checkpoint.resume_fallback=true", which then failed for want of epoch checkpoints beside it."""
    foreign = tmp_path / "elsewhere" / "dict.ckpt"
    foreign.parent.mkdir()
    torch.save({"weights": torch.zeros(2)}, foreign)
    cfg = OmegaConf.create({"ckpt_path": str(foreign), "checkpoint": {"resume_fallback": False}})
    with pytest.raises(CheckpointError) as refused:
        resolve_resume(cfg, tmp_path / "run" / "checkpoints")
    assert "resume_fallback" not in str(refused.value)
    assert str(refused.value).endswith(
        "give another ckpt_path (a checkpoint train.py wrote), or leave it out to train afresh"
    )
    (foreign.parent / "epoch001.ckpt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="pass checkpoint.resume_fallback=true to resume from the newest"):
        resolve_resume(cfg, tmp_path / "run" / "checkpoints")


def _fake_checkpoint(path: Path, step: int) -> None:
    section = {"config": {"x": 1}, "src_tokenizer": b"s", "tgt_tokenizer": b"t"}
    torch.save({"nmt": section, "state_dict": {}, "global_step": step}, path)


def test_a_slurm_requeue_resumes_from_lightnings_preemption_checkpoint_when_it_is_newer(tmp_path, capsys):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    cfg = OmegaConf.create({"ckpt_path": None, "checkpoint": {"resume_fallback": False}})
    _fake_checkpoint(checkpoints / "last.ckpt", 100)
    assert resolve_resume(cfg, checkpoints) == str(checkpoints / "last.ckpt")
    for n, step in ((1, 150), (2, 180)):  # Lightning numbers its saves; the highest is the newest
        _fake_checkpoint(tmp_path / f"hpc_ckpt_{n}.ckpt", step)
    assert resolve_resume(cfg, checkpoints) == str(tmp_path / "hpc_ckpt_2.ckpt")
    assert "saved by Lightning on SLURM's preemption signal" in capsys.readouterr().out
    _fake_checkpoint(checkpoints / "last.ckpt", 200)  # the requeued run went on and saved again
    assert resolve_resume(cfg, checkpoints) == str(checkpoints / "last.ckpt")
    (tmp_path / "hpc_ckpt_3.ckpt").write_bytes(b"truncated")  # an unreadable save never wins
    assert resolve_resume(cfg, checkpoints) == str(checkpoints / "last.ckpt")
    (checkpoints / "last.ckpt").write_bytes(b"truncated")  # nor does an older one over an unreadable last.ckpt
    with pytest.raises(CheckpointError, match=r"cannot resume: .*last\.ckpt"):
        resolve_resume(cfg, checkpoints)


# ---- 4, 5: what a checkpoint write refuses, and a full disk ------------------------------------------
def good_checkpoint(value: float = 1.0) -> dict:
    return {
        "state_dict": {"w": torch.full((2,), value)},
        "optimizer_states": [{"state": {0: {"exp_avg": torch.ones(2)}}}],
    }


@pytest.mark.parametrize("where", ["state_dict", "optimizer_states"])
def test_a_checkpoint_with_non_finite_tensors_is_not_written(tmp_path, where):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(good_checkpoint(1.0), path)
    bad = good_checkpoint(1.0)
    if where == "state_dict":
        bad["state_dict"]["w"][0] = float("inf")
    else:
        bad["optimizer_states"][0]["state"][0]["exp_avg"][1] = float("nan")
    with pytest.warns(UserWarning, match=rf"not writing .*last\.ckpt: 1 tensor\(s\).*{where}"):
        io.save_checkpoint(bad, path)
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.ones(2))  # the good one


def test_the_non_finite_check_names_each_bad_tensor_with_one_read_of_the_device():
    """Every NaN or infinity named, in the checkpoint's order, integer tensors and finite floats left out,
    and the values read once (on a GPU each read waits for the device; a checkpoint holds hundreds)."""
    from nmt.training.checkpoint_io import non_finite_tensors

    from .host_reads import HostReads

    checkpoint = {
        "state_dict": {"a": torch.ones(3), "b": torch.tensor([1.0, float("nan")]), "steps": torch.tensor([7])},
        "optimizer_states": [{"state": {0: {"exp_avg": torch.tensor([float("-inf")]), "step": torch.tensor(3.0)}}}],
    }
    with HostReads() as reads:
        bad = non_finite_tensors(checkpoint)
    assert bad == ["state_dict.b", "optimizer_states.0.state.0.exp_avg"]
    assert reads.calls == ["tolist"]
    assert non_finite_tensors(good_checkpoint()) == []


def test_last_ckpt_is_copied_atomically_from_the_epoch_checkpoint_this_save_wrote(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from nmt.training.checkpoints import EpochCheckpoints

    io, epoch, last = AtomicCheckpointIO(), tmp_path / "epoch003.ckpt", tmp_path / "last.ckpt"
    barriers = []
    strategy = SimpleNamespace(checkpoint_io=io, barrier=lambda: barriers.append(1))
    trainer = SimpleNamespace(is_global_zero=True, strategy=strategy)

    def weights(path):
        return float(torch.load(path, weights_only=True)["state_dict"]["w"][0])

    io.save_checkpoint(good_checkpoint(1.0), last)
    io.save_checkpoint(good_checkpoint(3.0), epoch)
    EpochCheckpoints._link_checkpoint(trainer, str(epoch), str(last))
    assert last.read_bytes() == epoch.read_bytes() and not os.path.samefile(last, epoch)
    assert sorted(p.name for p in tmp_path.iterdir()) == [epoch.name, last.name]  # no temporary file left
    epoch.unlink()  # rotated away: last.ckpt keeps the state
    assert weights(last) == 3.0
    # this save's epoch checkpoint not written (non-finite values), whether or not an older file has its
    # name (an earlier sitting's): the previous last.ckpt stays
    bad = good_checkpoint(4.0)
    bad["state_dict"]["w"][0] = float("nan")
    for older in (None, 2.0):
        if older is not None:
            torch.save(good_checkpoint(older), epoch)
        with pytest.warns(UserWarning, match="not writing"):
            io.save_checkpoint(bad, epoch)
        EpochCheckpoints._link_checkpoint(trainer, str(epoch), str(last))
        assert weights(last) == 3.0
    # a full disk while copying: named, the previous last.ckpt intact, and the other processes not left waiting
    io.save_checkpoint(good_checkpoint(5.0), epoch)

    def full_disk(source, target):
        Path(target).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("shutil.copyfile", full_disk)
    with pytest.raises(CheckpointWriteError, match=r"no space left on .* to write last\.ckpt"):
        EpochCheckpoints._link_checkpoint(trainer, str(epoch), str(last))
    assert weights(last) == 3.0 and sorted(p.name for p in tmp_path.iterdir()) == [epoch.name, last.name]
    assert len(barriers) == 4  # every call, the failed one too


@pytest.mark.parametrize(
    "failure", [OSError(errno.ENOSPC, "No space left on device"), RuntimeError("[enforce fail] unexpected pos 512")]
)
def test_a_full_disk_is_named_and_leaves_the_earlier_checkpoint_and_no_temporary_file(tmp_path, monkeypatch, failure):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(good_checkpoint(1.0), path)
    real_save = torch.save

    def full_disk(obj, target, *args, **kwargs):
        Path(target).write_bytes(b"partial")
        raise failure

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(CheckpointWriteError, match=rf"no space left on {tmp_path} to write last\.ckpt"):
        io.save_checkpoint(good_checkpoint(2.0), path)
    monkeypatch.setattr(torch, "save", real_save)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.ones(2))


# ---- 6: two runs in one folder -----------------------------------------------------------------------
def test_a_second_run_in_a_locked_folder_refuses_and_names_the_holder(tmp_path):
    with RunLock(tmp_path):
        with pytest.raises(RunFolderError, match=rf"{tmp_path} is in use by pid {os.getpid()} on .*choose another"):
            train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    with RunLock(tmp_path):  # released when its holder ends
        pass


def test_a_lock_dies_with_its_holder(tmp_path):
    script = (
        f"from nmt.training.run_folder import RunLock; lock = RunLock({str(tmp_path)!r}).__enter__(); "
        "import time; print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(RunFolderError, match=f"pid {holder.pid}"), RunLock(tmp_path):
        pass
    holder.kill()
    holder.wait()
    with RunLock(tmp_path):
        pass


# ---- identity: other settings, smoke runs ------------------------------------------------------------
def test_a_run_trained_afresh_gets_a_wandb_run_of_its_own(tmp_path, monkeypatch):
    """An attempt killed before its first checkpoint left its W&B id in the folder: the retrain from update 0
    logged into the same W&B run, the two histories merged on upload. A resumed sitting keeps the id."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    import wandb

    (tmp_path / "wandb_id").write_text("0123456789abcdef\n")  # the killed attempt's
    try:
        train(compose_train(*QUICK, "trainer.max_epochs=1", "logger=wandb", f"run_dir={tmp_path}"))
        fresh = (tmp_path / "wandb_id").read_text().strip()
        assert fresh != "0123456789abcdef" and len(fresh) == 16
        train(compose_train(*QUICK, "trainer.max_epochs=2", "logger=wandb", "resume=force", f"run_dir={tmp_path}"))
    finally:
        wandb.teardown()  # its service's address would stay in os.environ for later subprocesses
    assert (tmp_path / "wandb_id").read_text().strip() == fresh  # continued: the same W&B run
    assert {p.name.rsplit("-", 1)[1] for p in tmp_path.glob("wandb/offline-run-*")} == {fresh}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Hydra's four lines (CSVLogger.__init__() got an unexpected keyword argument), without the keys it takes
        (["+logger.project=x"], "logger.project is not an option of ResumableCSVLogger; it takes "
         "flush_logs_every_n_steps, name, prefix, version"),
        # a traceback once training had started, and from TensorBoard's writer thread
        (["+logger.flush_logs_every_n_steps=abc"], "logger.flush_logs_every_n_steps='abc': ResumableCSVLogger "
         "takes a whole number as flush_logs_every_n_steps"),
        (["logger=tensorboard", "+logger.flush_secs=abc"], "logger.flush_secs='abc': ResumableTensorBoardLogger "
         "takes a whole number as flush_secs"),
        (["logger=tensorboard", "+logger.flush_secs=-5"], "logger.flush_secs=-5: must be > 0"),
        (["logger=tensorboard", "+logger.log_graph=1"], "logger.log_graph=1: ResumableTensorBoardLogger takes "
         "true or false as log_graph"),
        (["logger=wandb", "+logger.entity=me"], "logger.entity is not an option of wandb_logger; it takes config, "
         "dir, group, name, project, tags"),
        (["+logger.save_dir=/tmp/x"], "logger.save_dir is set by the run (its folder); it takes"),
        # Lightning passes the folder as root_dir (a TypeError of two values); SummaryWriter reads comment only
        # where it names the folder itself, which it never does here
        (["logger=tensorboard", "+logger.root_dir=/tmp/x"], "logger.root_dir is set by the run (its folder)"),
        (["logger=tensorboard", "+logger.comment=x"], "logger.comment is not an option of ResumableTensorBoardLogger"),
    ],
)  # fmt: skip
def test_a_logger_option_it_does_not_take_is_one_line_before_any_data_is_read(tmp_path, overrides, message):
    cfg = compose_train(*QUICK, *overrides, f"run_dir={tmp_path}")
    with pytest.raises(ConfigError) as refused:
        train(cfg)
    assert message in str(refused.value) and not (tmp_path / "logs").exists()


def test_a_logger_option_of_tensorboards_writer_is_taken(tmp_path):
    from nmt.training.logger_options import logger_problems

    assert (
        logger_problems(compose_train(*QUICK, "logger=tensorboard", "+logger.flush_secs=5", "+logger.max_queue=2"))
        == []
    )
    assert logger_problems(compose_train(*QUICK, "+logger.prefix=p", "+logger.flush_logs_every_n_steps=10")) == []


def test_a_monitored_score_that_never_moved_is_said_and_recorded(tmp_path, capsys):
    """val_exact stuck at 0 for a whole run (the loss falling) chose best.ckpt among equals and the final scores
    used it, unsaid. Three decoded validations of an untrained toy model: BLEU 0 at each."""
    from nmt.tasks.base import best_logged

    results = train(
        compose_train(*QUICK, "trainer.max_epochs=3", "validation.bleu_every_n_epochs=1", f"run_dir={tmp_path}")
    )
    log = tmp_path / "logs" / "metrics.csv"
    bleu = [row["val_bleu"] for row in csv.DictReader(log.open()) if row.get("val_bleu")]
    assert len(bleu) >= 3 and len(set(bleu)) == 1, bleu  # the premise: the score never moved
    assert results["monitor_never_moved"] == {
        "metric": "val_bleu",
        "value": float(bleu[0]),
        "validations": len(bleu),
        "best": "best.ckpt",
    }
    assert (
        f"warning: val_bleu was {float(bleu[0]):g} at each of the {len(bleu)} validations: it told no weights apart"
        in (capsys.readouterr().out)
    )
    # a score that improves downwards is best at its lowest (a task's val_wer was taken at its worst)
    log.write_text("step,val_wer,val_acc\n1,30.0,0.2\n2,12.5,0.5\n3,20.0,0.4\n")
    assert best_logged(log, "val_wer") == 12.5 and best_logged(log, "val_acc") == 0.5


def test_loader_workers_change_nothing_trained(tmp_path):
    """data.num_workers=2 trained other weights than 0 (test BLEU 35.12 against 27.11), and such a run killed and
    resumed matched neither: the validation loader drew its workers' seed from the global random numbers once
    (persistent workers) or at every validation (none), moving the dropout masks that followed. A key the
    fingerprint leaves out must change nothing trained."""
    import torch

    runs = {}
    for workers in (0, 1):
        run_dir = tmp_path / f"w{workers}"
        overrides = ("trainer.max_epochs=3", "validation.bleu_every_n_epochs=1", f"data.num_workers={workers}")
        runs[workers] = train(compose_train(*QUICK, *overrides, f"run_dir={run_dir}"))
        runs[workers]["weights"] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert runs[0]["final_metrics"]["val_loss"] == runs[1]["final_metrics"]["val_loss"]
    assert all(torch.equal(runs[0]["weights"][k], runs[1]["weights"][k]) for k in runs[0]["weights"])


def test_a_sitting_on_another_thread_count_is_said_and_the_machine_recorded(tmp_path, capsys):
    """threads=2 trains other low-order bits than threads=1 (float sums in another order): a resume under
    another count went on without a word, and no record said what computed a run."""
    from nmt.utils.machine import cpu_name, resume_machine_note

    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))  # QUICK: threads=1
    capsys.readouterr()
    results = train(compose_train(*QUICK, "threads=2", "resume=force", f"run_dir={tmp_path}"))
    assert results["machine"] == {"cpu": cpu_name(), "threads": 2}
    assert (
        "note: this sitting computes on another machine than the checkpoint's (threads 1 -> 2)"
        in capsys.readouterr().out
    )
    assert resume_machine_note(None) is None and resume_machine_note({"cpu": cpu_name()}) is None  # the same
    assert "cpu another -> " in resume_machine_note({"cpu": "another"})


def test_evaluations_are_set_aside_even_when_the_sitting_that_went_on_was_killed_before_its_end(tmp_path, monkeypatch):
    """The move came at the end of the sitting that trained further: killed after training (during its final
    validation, say), its rerun resumed at the last update, trained nothing, and left the old evaluations
    among the new results. The update they are of is kept in a marker until a sitting's end moves them. (The
    rerun had also found the first end's results.json, still "finished", and trained and recorded nothing.)"""
    from nmt.training import train as training

    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    (tmp_path / "eval" / "val_beam5").mkdir(parents=True)
    (tmp_path / "eval" / "val_beam5" / "metrics.json").write_text('{"bleu": 2.0}')

    def killed(*args, **kwargs):
        raise SystemExit(137)

    with monkeypatch.context() as patched:
        patched.setattr(training, "set_aside_evaluations", killed)
        with pytest.raises(SystemExit):
            train(compose_train(*QUICK, "resume=force", f"run_dir={tmp_path}"))  # to 2 epochs, then "killed"
    assert (tmp_path / "eval" / "val_beam5").is_dir()  # not moved yet
    # the same command: resumed at its last update (results.json of the first end no longer passes for its own)
    results = train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    assert results["epochs"] == 2 and results["finished"]
    first_epoch = steps_per_epoch(compose_train(*QUICK))
    aside = tmp_path / f"eval_before_update_{first_epoch}" / "val_beam5" / "metrics.json"
    assert aside.read_text() == '{"bleu": 2.0}' and not (tmp_path / "eval_before_update").exists()
    # a sitting resumed at its end that trains nothing moves nothing
    (tmp_path / "eval" / "x").mkdir(parents=True)
    train(compose_train(*QUICK, "resume=force", "checkpoint.keep_last_epochs=3", f"run_dir={tmp_path}"))
    assert (tmp_path / "eval" / "x").is_dir() and not (tmp_path / "eval_before_update").exists()


def test_an_evaluation_made_while_a_sitting_trained_is_set_aside_at_its_end(tmp_path, capsys):
    """evaluate.py on last.ckpt at update 120 wrote eval/last_test_beam5, which stayed beside the final scores of
    update 360 under a name that then meant other weights: only those in eval/ when a sitting resumed were moved."""
    from nmt.training.final import set_aside_evaluations

    (tmp_path / "eval" / "last_test_beam5").mkdir(parents=True)
    assert set_aside_evaluations(tmp_path, 360, trained_from=360) is None  # a sitting that trained nothing
    moved = set_aside_evaluations(tmp_path, 360)
    assert moved == tmp_path / "eval_before_update_360" and (moved / "last_test_beam5").is_dir()
    assert "held evaluations made while the run trained, of weights before its end at update 360" in (
        capsys.readouterr().out
    )
    assert set_aside_evaluations(tmp_path, 360) is None  # nothing held: nothing moved
    # a resumed sitting (from update 190, eval/ empty then): an evaluation made while it trained goes too
    (tmp_path / "eval" / "last_test_beam5").mkdir(parents=True)
    assert set_aside_evaluations(tmp_path, 400, trained_from=190) == tmp_path / "eval_before_update_400"


def test_a_finished_run_asked_for_another_decoding_is_pointed_to_evaluate_py(tmp_path):
    """decode.beam_size=3 on a finished run was refused with resume=force as the way out: continuing a run
    to change how it decodes. Only its scores differ: the refusal gives the evaluate.py command."""
    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    with pytest.raises(RunFolderError) as refused:
        train(
            compose_train(
                *QUICK,
                "trainer.max_epochs=1",
                "decode.beam_size=3",
                "decode.length_penalty=1.5",
                f"run_dir={tmp_path}",
            )
        )
    assert str(refused.value).endswith(
        f"only how its final scores decode differs, which needs no training: python evaluate.py ckpt_path={tmp_path} "
        "decode.beam_size=3 decode.length_penalty=1.5 scores it so (split=val to choose the decoding, as the test "
        "is never tuned on)"
    )
    with pytest.raises(RunFolderError) as refused:  # a setting of the training too: no such advice
        train(compose_train(*QUICK, "decode.beam_size=3", f"run_dir={tmp_path}"))
    assert "evaluate.py" not in str(refused.value) and "trainer.max_epochs: 1 -> 2" in str(refused.value)


@pytest.mark.slow
def test_a_folder_made_under_other_settings_is_refused_listing_the_keys_unless_forced(tmp_path, capsys):
    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    # an evaluation of the first end's weights (evaluate.py's folder, as it writes one)
    (tmp_path / "eval" / "test_beam5").mkdir(parents=True)
    (tmp_path / "eval" / "test_beam5" / "metrics.json").write_text('{"bleu": 1.0}')
    with pytest.raises(RunFolderError, match=r"other settings \(trainer\.max_epochs: 1 -> 2\).*resume=force"):
        train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    results = train(compose_train(*QUICK, "resume=force", f"run_dir={tmp_path}"))
    said = capsys.readouterr().out
    assert "resume=force: continuing" in said and results["epochs"] == 2
    # the record says from which update the run went on under which other settings
    first_epoch = steps_per_epoch(compose_train(*QUICK))
    # and the evaluations of the weights before it went on are set aside whole, not left among the new ones
    aside = tmp_path / f"eval_before_update_{first_epoch}"
    assert (aside / "test_beam5" / "metrics.json").read_text() == '{"bleu": 1.0}' and not (tmp_path / "eval").exists()
    assert f"before the run went on from update {first_epoch}: moved to {aside}" in said
    assert not (tmp_path / "eval_before_update").exists()  # the marker, done with
    forced = [{"changed": ["trainer.max_epochs: 1 -> 2"], "from_step": first_epoch}]
    assert results["continued_under_other_settings"] == forced
    assert json.loads((tmp_path / "fingerprint.json").read_text())["forced"] == forced


@pytest.mark.slow
def test_a_run_continued_with_epochs_of_other_batches_is_refused_before_its_first_update(tmp_path):
    """resume=force with settings that change an epoch's batches (here max_tokens; the number of processes
    alike): the loader found its place from the count of batches trained, so the continued run went on
    inside the first epoch while Lightning counted the second, which ended early without its validation."""
    cfg = compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}")
    train(cfg)
    records = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "logs" not in p.parts}
    records.pop(tmp_path / ".lock")  # the folder's lock, written by each sitting that holds it
    records[tmp_path / "logs" / "hparams.yaml"] = (tmp_path / "logs" / "hparams.yaml").read_bytes()  # the settings
    shorter = f"data.max_tokens={cfg.data.max_tokens // 3}"
    with pytest.raises(ValueError, match=r"^the checkpoint stopped at the start of epoch 1; under this run's"):
        train(compose_train(*QUICK, shorter, "resume=force", f"run_dir={tmp_path}"))
    # the folder as it was (its record held the refused settings, so the run's own command was refused)
    assert {p: p.read_bytes() for p in records} == records
    again = train(compose_train(*QUICK, "resume=force", f"run_dir={tmp_path}"))  # max_epochs 1 -> 2: goes on
    assert again["steps"] == 2 * steps_per_epoch(cfg) and again["epochs"] == 2


def test_a_run_resumed_mid_epoch_under_another_seed_is_refused_before_its_first_update(tmp_path):
    """resume=force seed=2 on a run stopped mid-epoch: the loader skipped the batches trained, counted in the
    new seed's order, so the rest of the epoch trained some sentences twice and skipped others. At an epoch's
    start another seed is a whole other epoch, and goes on."""
    cfg = compose_train(*QUICK, f"run_dir={tmp_path}")
    half = steps_per_epoch(cfg) + steps_per_epoch(cfg) // 2
    train(compose_train(*QUICK, f"trainer.max_steps={half}", f"run_dir={tmp_path}"))
    (tmp_path / "results.json").unlink()  # as if killed mid-epoch: a rerun resumes
    fingerprint = (tmp_path / "fingerprint.json").read_bytes()
    with pytest.raises(ValueError, match=r"^the checkpoint stopped \d+ batches into epoch 1, and under this run's "
                       r"settings that epoch's batches come in another order \(the seed"):  # fmt: skip
        train(compose_train(*QUICK, "seed=2", "resume=force", f"run_dir={tmp_path}"))  # to QUICK's epochs
    assert (tmp_path / "fingerprint.json").read_bytes() == fingerprint  # the folder's records left as they were
    # from the first epoch's checkpoint (an epoch's start), another seed goes on
    first = tmp_path / "checkpoints" / "epoch000.ckpt"
    again = train(compose_train(*QUICK, "seed=2", "resume=force", f"ckpt_path={first}", f"run_dir={tmp_path}"))
    assert again["finished"]


def test_a_resumed_sitting_that_fails_inside_training_before_its_first_checkpoint_puts_the_records_back(
    tmp_path, monkeypatch
):
    """A fault inside Lightning's fit before the sitting wrote a checkpoint (an optimiser state of other shapes
    restored under resume=force was one) left that sitting's settings in fingerprint.json, describing
    checkpoints made under others: the run's own command was then refused. Once the sitting has written a
    checkpoint, its records are those of the folder's checkpoints and stay."""
    from nmt.training.module import TaskModule

    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    fingerprint = (tmp_path / "fingerprint.json").read_bytes()

    def fault(*args, **kwargs):
        raise RuntimeError("a fault inside fit")

    monkeypatch.setattr(TaskModule, "on_train_start", fault)
    with pytest.raises(RuntimeError, match="a fault inside fit"):
        train(compose_train(*QUICK, "resume=force", f"run_dir={tmp_path}"))  # max_epochs 1 -> 2
    assert (tmp_path / "fingerprint.json").read_bytes() == fingerprint
    # a fault after the sitting's first checkpoint: the folder now holds checkpoints of the new settings
    monkeypatch.undo()
    monkeypatch.setattr(TaskModule, "on_train_end", fault)
    with pytest.raises(RuntimeError, match="a fault inside fit"):
        train(compose_train(*QUICK, "resume=force", f"run_dir={tmp_path}"))
    assert json.loads((tmp_path / "fingerprint.json").read_text())["config"]["trainer.max_epochs"] == 2


def test_a_finished_run_copied_elsewhere_reports_the_copys_files(tmp_path):
    """A finished run's folder copied and its command rerun on the copy: its results named the original's
    folder and best checkpoint (which may be gone)."""
    import shutil

    first = train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path / 'a'}"))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "a")
    again = train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path / 'b'}"))
    assert again["run_dir"] == str(tmp_path / "b")
    assert again["best_checkpoint"] == str(tmp_path / "b" / "checkpoints" / Path(first["best_checkpoint"]).name)
    assert Path(again["best_checkpoint"]).is_file()
    assert {k: v for k, v in again.items() if k not in ("run_dir", "best_checkpoint")} == {
        k: v for k, v in first.items() if k not in ("run_dir", "best_checkpoint")
    }


class RatesSeen(L.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        group = trainer.optimizers[0].param_groups[0]
        scheduler = trainer.lr_scheduler_configs[0].scheduler
        self.seen = (
            group["lr"],
            group["initial_lr"],
            group["weight_decay"],
            scheduler.lr_lambdas[0](scheduler.last_epoch),
        )


@pytest.mark.slow
def test_another_runs_checkpoint_at_the_end_of_the_budget_is_refused_not_left_unscored(tmp_path):
    """ckpt_path=<a finished run>/checkpoints/last.ckpt run_dir=<new> under the same budget trained nothing,
    wrote no checkpoint, skipped the final scores unsaid, and results.json said finished with a best_checkpoint
    that did not exist. A larger budget trains on from it, and is scored."""
    train(compose_train("trainer.max_epochs=1", "threads=1", f"run_dir={tmp_path / 'a'}"))
    last = tmp_path / "a" / "checkpoints" / "last.ckpt"
    with pytest.raises(RunFolderError, match=r"it has trained this command's whole budget already \(update \d+; "):
        train(compose_train("trainer.max_epochs=1", "threads=1", f"ckpt_path={last}", f"run_dir={tmp_path / 'b'}"))
    more = ["trainer.max_epochs=2", "threads=1", "resume=force", f"ckpt_path={last}", f"run_dir={tmp_path / 'b'}"]
    results = train(compose_train(*more))
    assert results["finished"] and results["test"] and Path(results["best_checkpoint"]).is_file()


def test_a_run_continued_under_another_rate_trains_with_it(tmp_path, monkeypatch):
    """A resumed optimiser comes back with the rate it was saved with; continued under other settings
    (resume=force), it trains with the config's rate and weight decay, at the schedule's position."""
    from nmt.training import trainer as trainer_module

    train(compose_train(*QUICK, "trainer.max_epochs=1", "lr=1e-3", f"run_dir={tmp_path}"))
    seen, built = RatesSeen(), trainer_module._callbacks
    monkeypatch.setattr(trainer_module, "_callbacks", lambda *args: [*built(*args), seen])
    train(compose_train(*QUICK, "lr=4e-3", "weight_decay=0.5", "resume=force", f"run_dir={tmp_path}"))
    lr, initial, decay, factor = seen.seen
    assert (initial, decay) == (4e-3, 0.5) and lr == pytest.approx(4e-3 * factor, rel=1e-12)


@pytest.mark.slow
def test_a_run_folder_without_a_readable_fingerprint_is_judged_by_its_config(tmp_path, capsys):
    """A lost or damaged fingerprint.json never lets other settings reuse the run: its config.yaml says what
    it was made with; without either, the folder is refused (resume=force takes it as this command's)."""
    train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    (tmp_path / "fingerprint.json").unlink()
    capsys.readouterr()
    assert train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))["finished"]
    out = capsys.readouterr().out
    assert f"no fingerprint.json: its settings are taken from {tmp_path / 'config.yaml'}" in out
    assert "holds this run, finished" in out
    (tmp_path / "fingerprint.json").write_text("{not json")
    with pytest.raises(RunFolderError, match=r"other settings \(trainer\.max_epochs: 1 -> 2\)"):
        train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    assert "fingerprint.json cannot be read (Expecting property name" in capsys.readouterr().out
    (tmp_path / "config.yaml").unlink()
    with pytest.raises(RunFolderError, match=r"config\.yaml cannot be read .*: the run's settings cannot be checked"):
        train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))


@pytest.mark.slow
def test_a_damaged_results_file_is_named_and_the_run_scored_again(tmp_path, capsys):
    results = train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    text = (tmp_path / "results.json").read_text()
    (tmp_path / "results.json").write_text(text[: len(text) // 2])
    capsys.readouterr()
    again = train(compose_train(*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"))
    assert f"warning: {tmp_path / 'results.json'} cannot be read" in capsys.readouterr().out
    assert again["finished"] and again["steps"] == results["steps"]


@pytest.mark.slow
def test_a_folder_where_nothing_was_trained_takes_the_corrected_command(tmp_path):
    """A run that stopped on a mistake after claiming its folder (its data missing, say) left only its
    fingerprint: the command with the mistake fixed trains there, not refused as another run's."""
    from nmt.training.run_identity import record_identity

    record_identity(tmp_path, {"config": {"data.train": "/a/wrong/path"}, "code": {}})
    results = train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    assert results["finished"] and results["epochs"] == 2
    assert "data.train" not in json.loads((tmp_path / "fingerprint.json").read_text())["config"]
    damaged = tmp_path / "damaged"  # a record that cannot even be read binds nothing either
    damaged.mkdir()
    (damaged / "fingerprint.json").write_text("{not json")
    assert train(compose_train(*QUICK, f"run_dir={damaged}"))["finished"]


@pytest.mark.slow
def test_a_smoke_run_leaves_nothing_that_a_real_run_resumes(tmp_path, capsys):
    train(compose_train(*QUICK, "++trainer.fast_dev_run=true", f"run_dir={tmp_path}"))
    # a second smoke run with other settings trains afresh too (its record refused it: "other settings")
    train(compose_train(*QUICK, "++trainer.fast_dev_run=true", "decode.beam_size=3", f"run_dir={tmp_path}"))
    assert "held a smoke run (trainer.fast_dev_run): its checkpoints are removed" in capsys.readouterr().out
    results = train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    out = capsys.readouterr().out
    assert "held a smoke run (trainer.fast_dev_run)" in out and "Resuming" not in out
    assert results["epochs"] == 2 and results["finished"]
    # a smoke run never writes into a real run's folder, even forced: the next real rerun would purge it
    kept = {p: p.read_bytes() for p in [tmp_path / "results.json", *tmp_path.glob("checkpoints/*.ckpt")]}
    smoke = compose_train(*QUICK, "++trainer.fast_dev_run=true", "resume=force", f"run_dir={tmp_path}")
    with pytest.raises(RunFolderError, match=r"smoke run \(trainer\.fast_dev_run\) never writes into it"):
        train(smoke)
    assert {p: p.read_bytes() for p in kept} == kept
    assert train(compose_train(*QUICK, f"run_dir={tmp_path}")) == results  # still finished, nothing purged


# ---- 7, 8: sweeps ------------------------------------------------------------------------------------
def sweep_running(tmp_path, child: str) -> subprocess.Popen:
    """A sweep process running ``child`` (Python source that creates tmp_path/ready, then sleeps) as its run,
    Ctrl-C raising KeyboardInterrupt in it as in a terminal (a test runner's worker may ignore SIGINT);
    returned once the child is ready."""
    parent = (
        "import signal, sys; from pathlib import Path; from nmt.sweep.child import run_child; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"run_child([sys.executable, '-c', {child!r}], dict(__import__('os').environ), Path({str(tmp_path)!r}))"
    )
    sweep = subprocess.Popen([sys.executable, "-c", parent], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "ready").exists():
        assert time.time() < deadline, "the child never started"
        time.sleep(0.05)
    return sweep


@pytest.mark.parametrize(
    ("name", "saves"), [("SIGINT", True), ("SIGTERM", True), ("SIGINT", False), ("SIGTERM", "trained")]
)
def test_a_stopped_sweep_passes_its_run_the_one_signal_and_ends_in_one_line(tmp_path, name, saves):
    """Ctrl-C (or SIGTERM) to the sweep: its run gets that signal once, saves, and the sweep says so in one
    line, exit 130 (143); a traceback and a SIGTERM to the run after the terminal's SIGINT were before. A run
    stopped before it had a state to save (preparing its data) was said to have saved it."""
    seen, last = tmp_path / "seen", tmp_path / "checkpoints" / "last.ckpt"
    save = f"__import__('os').makedirs({str(last.parent)!r}); open({str(last)!r}, 'w').close(); " if saves else ""
    if saves == "trained":  # stopped making its final scores: its training recorded, as train.py records it
        results = tmp_path / "results.json"
        save = f"open({str(results)!r}, 'w').write('{{\"stage\": \"trained\"}}'); "
    child = (  # it exits as train.py does once saved: 128 + the signal
        f"import signal, sys, time\n"
        f"def got(n, f):\n    {save}open({str(seen)!r}, 'a').write(signal.Signals(n).name + '\\n'); "
        "sys.exit(128 + n)\n"
        "signal.signal(signal.SIGINT, got); signal.signal(signal.SIGTERM, got)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(60)"
    )
    sweep = sweep_running(tmp_path, child)
    sweep.send_signal(getattr(signal, name))
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == (130 if name == "SIGINT" else 143), err
    state = {
        True: "saved its state",
        False: "was stopped before its first checkpoint (preparing its data, or its first updates): a rerun starts it",
        "trained": "was stopped making its final scores (its training is kept; a rerun makes them)",
    }[saves]
    assert err.strip().splitlines() == [
        f"[sweep] stopped by {name}: {tmp_path.name} {state}; run the same command again to resume the "
        "sweep (finished runs are kept), or `python sweep.py report "
        f"{tmp_path.parent}` for a report of the runs finished so far"
    ]
    assert seen.read_text() == f"{name}\n"


def test_a_second_ctrl_c_stops_the_sweeps_run_at_once_still_in_one_line(tmp_path):
    """A run slow to save after the first Ctrl-C: the second stops it at once (a traceback before)."""
    child = (
        "import signal, time\nsignal.signal(signal.SIGINT, lambda n, f: None)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(60)"
    )
    sweep = sweep_running(tmp_path, child)
    sweep.send_signal(signal.SIGINT)
    time.sleep(1)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, err
    assert err.strip().splitlines() == [
        f"[sweep] stopped by SIGINT: {tmp_path.name} was stopped at once by a second Ctrl-C (its last checkpoint "
        "stands); run the same command again to resume the sweep (finished runs are kept), or `python sweep.py "
        f"report {tmp_path.parent}` for a report of the runs finished so far"
    ]


def test_a_sweeps_training_child_stops_when_the_sweep_process_is_killed(tmp_path):
    pid_file = tmp_path / "child.pid"
    child = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = (
        "import sys; from pathlib import Path; from nmt.sweep.child import run_child; "
        f"run_child([sys.executable, '-c', {child!r}], dict(__import__('os').environ), Path({str(tmp_path)!r}))"
    )
    sweep = subprocess.Popen([sys.executable, "-c", parent], cwd=ROOT)
    deadline = time.time() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.time() < deadline, "the child never started"
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    sweep.kill()  # SIGKILL: the sweep gets no chance to clean up
    sweep.wait()
    deadline = time.time() + 20
    while Path(f"/proc/{child_pid}").exists() and "Z" not in Path(f"/proc/{child_pid}/stat").read_text().split()[2]:
        assert time.time() < deadline, "the training child outlived its sweep"
        time.sleep(0.05)
    assert "sitting started" in (tmp_path / "train_stdout.log").read_text()  # its log was opened as it ran


JOBLIB_SWEEP = """
import os, sys, time
from pathlib import Path
from joblib import Parallel, delayed
from nmt.sweep.child import handle_sweep_signals, mark_sweep_process, run_child

here = Path(sys.argv[1])
CHILD = (
    "import signal, sys, time\\n"
    "def got(n, f):\\n    __import__('os').makedirs(sys.argv[1] + '/checkpoints'); "
    "open(sys.argv[1] + '/checkpoints/last.ckpt', 'w').close(); "
    "open(sys.argv[1] + '/seen', 'w').write(signal.Signals(n).name); sys.exit(128 + n)\\n"
    "signal.signal(signal.SIGTERM, got); signal.signal(signal.SIGINT, got)\\n"
    "open(sys.argv[1] + '/started', 'w').close(); time.sleep(60)"
)

def run(n):
    folder = here / f"run{n}"
    folder.mkdir()
    run_child([sys.executable, "-c", CHILD, str(folder)], dict(os.environ), folder)
    (folder / "returned").touch()  # a worker going on after its sweep had gone

mark_sweep_process()
handle_sweep_signals()
Parallel(n_jobs=2, backend="loky")(delayed(run)(n) for n in range(4))
"""


@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM", "SIGTERM to the group", "Ctrl-C"])
def test_a_joblib_sweeps_runs_save_and_stop_and_no_run_starts_after_the_sweep_stops(tmp_path, stop):
    """Four runs, two at a time, through joblib's loky workers. A signal to the sweep process reached
    neither the workers nor their runs, which trained on, and the workers started the next runs; a Ctrl-C
    made joblib kill the workers and their runs at once, unsaved. Each run now gets one signal, saves (here:
    says which signal it got) and stops, and no further run starts."""
    sweep = subprocess.Popen(
        [sys.executable, "-c", JOBLIB_SWEEP, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own group, as a terminal gives a command
    )  # fmt: skip
    deadline = time.time() + 90
    while len(list(tmp_path.glob("run*/started"))) < 2:
        assert time.time() < deadline and sweep.poll() is None, "the runs never started"
        time.sleep(0.05)
    if stop == "SIGKILL":
        sweep.kill()
    elif stop == "SIGTERM":
        sweep.send_signal(signal.SIGTERM)
    else:
        os.killpg(sweep.pid, signal.SIGINT if stop == "Ctrl-C" else signal.SIGTERM)
    _, err = sweep.communicate(timeout=60)
    deadline = time.time() + 30
    while len(list(tmp_path.glob("run*/seen"))) < 2:
        assert time.time() < deadline, f"a run was not stopped: {err}"
        time.sleep(0.05)
    expected = "SIGINT" if stop == "Ctrl-C" else "SIGTERM"
    assert sorted(p.read_text() for p in tmp_path.glob("run*/seen")) == [expected, expected]
    time.sleep(2)  # a worker that went on would start a third run here
    assert len(list(tmp_path.glob("run*/started"))) == 2 and not list(tmp_path.glob("run*/returned")), err
    if stop != "SIGKILL":
        assert f"[sweep] stopped by {stop.split()[0].replace('Ctrl-C', 'SIGINT')}: " in err, err
    assert err.count("saved its state; run the same command again to resume the sweep") == 2, err


def test_a_workers_run_gets_one_signal_when_its_launcher_passes_on_another(tmp_path):
    """submitit's local controller passes the terminal's Ctrl-C to its job, then SIGTERM: the worker took
    the second signal for a second Ctrl-C and killed its run before it had saved (or a signal between the
    two raised out of the worker). The run now gets the first signal alone, and saves."""
    from nmt.sweep.child import SWEEP_PROCESS, process_identity

    seen = tmp_path / "seen"
    child = (
        "import signal, sys, time\n"
        f"def got(n, f):\n    open({str(seen)!r}, 'a').write(signal.Signals(n).name + '\\n'); time.sleep(1); "
        f"__import__('os').makedirs({str(tmp_path / 'checkpoints')!r}); "
        f"open({str(tmp_path / 'checkpoints' / 'last.ckpt')!r}, 'w').close(); sys.exit(128 + n)\n"
        "signal.signal(signal.SIGINT, got); signal.signal(signal.SIGTERM, got)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').close(); time.sleep(60)"
    )
    env = {**os.environ, SWEEP_PROCESS: process_identity(os.getpid())}  # a worker of this (live) process
    worker = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from nmt.sweep.child import run_child; "
         f"run_child([sys.executable, '-c', {child!r}], dict(__import__('os').environ), Path({str(tmp_path)!r}))"],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 60
    while not (tmp_path / "ready").exists():
        assert time.time() < deadline, "the run never started"
        time.sleep(0.05)
    worker.send_signal(signal.SIGINT)
    time.sleep(0.2)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 130 and seen.read_text() == "SIGINT\n", err
    assert err.strip().splitlines() == [
        f"[sweep] stopped by SIGINT: {tmp_path.name} saved its state; run the same command again to resume the "
        "sweep (finished runs are kept)"
    ]  # a launcher's worker, one of several: the sweep process's own line names the report


def sweep_config(sweep_dir: Path, params: dict, command_line: list[str]):
    return OmegaConf.create(
        {
            "start_runs_for": None,
            "seed": 1,
            "hydra": {
                "sweep": {"dir": str(sweep_dir)},
                "sweeper": {"params": params},
                "overrides": {"task": command_line},
            },
        }
    )


def test_every_seed_is_checked_before_any_run_not_the_first_alone(tmp_path, capsys):
    """seed=1,01 planned two seeds; each run of seed 01 then failed (train.py: must be an integer), after the
    runs before it had taken their time: the plan checked each cell at its first seed."""
    from nmt.sweep.plan import run_config_problem

    assert run_config_problem(sweep_config(tmp_path, {"seed": "range(1,3)"}, ["trainer.max_steps=1"])) is None
    problem = run_config_problem(sweep_config(tmp_path, {}, ["seed=1,01", "trainer.max_steps=1"]))
    assert problem == "seed=01: a seed is a whole number, as train.py reads it (1,01 given)"
    with pytest.raises(SystemExit):
        SweepReport().on_multirun_start(sweep_config(tmp_path, {}, ["seed=1,01", "pos=absolute,rope"]))
    assert "error: seed=01: a seed is a whole number" in capsys.readouterr().err
    assert not (tmp_path / "plan.json").exists()
    # a list, as train.py's own keys take several values, is one value to a sweep: said how to write seeds
    listed = run_config_problem(sweep_config(tmp_path, {}, ["seed=[1, 2]", "trainer.max_steps=1"]))
    assert listed.endswith("([1,2] given); for several seeds, seed=1,2"), listed


def test_a_seed_list_hydra_cannot_read_is_said_as_seeds_are_written():
    """seed=1,,2 was told to quote itself (seed="1,,2"), which then failed as "a seed is a whole number"."""
    from nmt.cli import unparsable_message

    for given in ("seed=1,,2", "seed=1;2"):
        assert unparsable_message([given]).endswith("seeds are whole numbers, a comma between two: seed=1,2,3")


def test_a_second_sweep_with_other_factors_under_one_name_is_refused_before_any_run(tmp_path, capsys):
    callback = SweepReport()
    callback.on_multirun_start(sweep_config(tmp_path, {"seed": "1,2"}, ["pos=absolute,relative"]))
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["factors"] == {"pos": ["absolute", "relative"], "seed": ["1", "2"]} and plan["runs"] == 4
    assert plan["run_names"] == [
        "pos=absolute,seed=1",
        "pos=relative,seed=1",
        "pos=absolute,seed=2",
        "pos=relative,seed=2",
    ]
    callback.on_multirun_start(sweep_config(tmp_path, {"seed": "1,2,3"}, ["pos=absolute,rope"]))  # more levels: fine
    with pytest.raises(SystemExit) as stopped:
        callback.on_multirun_start(sweep_config(tmp_path, {"seed": "1,2"}, ["norm=layer,rms"]))
    assert stopped.value.code == 2
    assert "holds a sweep of the factors ['pos']; this one sweeps ['norm']" in capsys.readouterr().err
    # a researcher's trial: one candidate added alone (pos=learned) reads as another design; said, and how
    with pytest.raises(SystemExit):
        callback.on_multirun_start(sweep_config(tmp_path, {"seed": "1,2"}, ["pos=learned"]))
    assert (
        "holds a sweep of the factors ['pos']; this one sweeps [] (pos=learned: one value, held, not swept; to add "
        "it to this sweep, give every value, pos=absolute,rope,learned: its finished runs are kept)"
    ) in capsys.readouterr().err


def test_a_command_line_factor_replaces_the_grids_factor_of_the_same_key(tmp_path):
    callback = SweepReport()
    callback.on_multirun_start(sweep_config(tmp_path, {"seed": "1,2,3", "pos": "absolute,relative"}, ["pos=rope"]))
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["factors"] == {"seed": ["1", "2", "3"]} and plan["runs"] == 3


def test_sweep_levels_are_expanded_as_hydras_sweeper_writes_them(tmp_path, capsys):
    """range(), choice() and numbers in other spellings: the plan and the run folders use the values the
    jobs receive (lr=1e-3 reaches a job as lr=0.001)."""
    callback = SweepReport()
    callback.on_multirun_start(
        sweep_config(tmp_path, {"seed": "range(1,3)"}, ["lr=1e-3,5e-4", "pos=choice(absolute,rope)"])
    )
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["factors"] == {"lr": ["0.001", "0.0005"], "pos": ["absolute", "rope"], "seed": ["1", "2"]}
    assert plan["runs"] == 8 and "lr=0.0005,pos=rope,seed=2" in plan["run_names"]
    with pytest.raises(SystemExit):
        callback.on_multirun_start(sweep_config(tmp_path / "b", {}, ["lr=interval(0,1)"]))
    assert "lr=interval(0,1): an interval is not a grid" in capsys.readouterr().err


def test_runs_made_under_other_settings_stop_the_sweep_or_are_moved_aside(tmp_path, capsys):
    """on_changed=stop (the default) lists them and launches nothing; on_changed=move keeps them in
    superseded/ (nothing computed is lost) and leaves their folders free for the runs of these settings."""
    from nmt.sweep.plan import expected_fingerprint, run_overrides

    config = sweep_config(tmp_path, {"seed": "1"}, ["pos=absolute,relative", "trainer.max_steps=3"])
    fingerprint = expected_fingerprint(
        run_overrides(config, {"seed": "1", "pos": "absolute", "trainer.max_steps": "3"})
    )
    fingerprint["config"]["trainer.max_steps"] = 2  # the folder's run had another budget
    run = tmp_path / "pos=absolute,seed=1"
    run.mkdir()
    (run / "fingerprint.json").write_text(json.dumps(fingerprint))
    (run / "sweep_result.json").write_text("{}")
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(config)
    err = capsys.readouterr().err
    assert (
        stopped.value.code == 2
        and "pos=absolute,seed=1 (trainer.max_steps: 2 -> 3)" in err
        and "on_changed=move" in err
    )
    assert run.is_dir() and not (tmp_path / "plan.json").exists()

    # the report of the earlier runs, and their statistics, from which `sweep.py report` would write it again
    from nmt.sweep import store
    from nmt.sweep.report import write_report

    stored = {"factors": {"pos": "absolute"}, "seed": 1, "metrics": {"test_bleu": 5.0}}
    other = {"factors": {"pos": "relative"}, "seed": 1, "metrics": {"test_bleu": 6.0}}  # its folder is gone
    store.save(tmp_path, {run.name: stored}, {"name": "earlier"}, {"pos=relative,seed=1": other})
    for name in ("report.md", "report.html", "results.csv", "main_effects.png", "curves_pos.png"):
        (tmp_path / name).write_text("the earlier runs' report")
    # the earlier sweep's settings (report_metric, baseline): a report of the runs set aside fell back to the
    # task's metric and first level without them
    (tmp_path / "multirun.yaml").write_text("report_metric: test_chrf\n")
    config.on_changed = "move"
    SweepReport().on_multirun_start(config)
    assert "moved to" in capsys.readouterr().out and not run.exists()
    (moved,) = (tmp_path / "superseded").glob("*/pos=absolute,seed=1")
    assert json.loads((moved / "fingerprint.json").read_text()) == fingerprint
    assert (tmp_path / "plan.json").is_file()
    # the report and the moved run's statistics went with it: nothing reports them as this sweep's runs
    aside = moved.parent
    assert sorted(p.name for p in aside.iterdir() if p.is_file()) == sorted(
        ["report.md", "report.html", "results.csv", "main_effects.png", "curves_pos.png", store.STATISTICS]
        + ["multirun.yaml"]
    )
    assert (aside / "multirun.yaml").read_text() == "report_metric: test_chrf\n"
    assert store.load(aside)["runs"] == {run.name: stored}
    assert store.load(tmp_path) == {"runs": {}, "facts": {"name": "earlier"}, "kept": {"pos=relative,seed=1": other}}
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        write_report(tmp_path)
    # a run set aside part-trained was in no report: the report of the others stays
    from nmt.sweep.report import set_aside

    (tmp_path / "report.md").write_text("this sweep's report")
    later = tmp_path / "superseded" / "later"
    later.mkdir()
    set_aside(tmp_path, later, ["pos=relative,seed=2"])
    assert (tmp_path / "report.md").read_text() == "this sweep's report" and not list(later.iterdir())


def test_a_sweep_run_without_its_fingerprint_is_judged_by_its_config(tmp_path, capsys):
    """A sweep's finished run whose fingerprint.json was lost is not reused as if made with these settings:
    its config.yaml says what it was made with, and with neither the run is listed as unverifiable."""
    import yaml

    from nmt.sweep.plan import expected_fingerprint, run_overrides

    config = sweep_config(tmp_path, {"seed": "1"}, ["pos=absolute,relative", "trainer.max_steps=3"])
    for pos, budget in (("absolute", 3), ("relative", 2)):
        flat = expected_fingerprint(run_overrides(config, {"seed": "1", "pos": pos, "trainer.max_steps": "3"}))
        nested: dict = {}
        for key, value in {**flat["config"], "trainer.max_steps": budget}.items():
            *parents, leaf = key.split(".")
            node = nested
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        run = tmp_path / f"pos={pos},seed=1"
        run.mkdir()
        (run / "config.yaml").write_text(yaml.safe_dump(nested))
        (run / "sweep_result.json").write_text("{}")
    (tmp_path / "pos=absolute,seed=1" / "config.yaml").write_text(": not yaml")
    with pytest.raises(SystemExit):
        SweepReport().on_multirun_start(config)
    err = capsys.readouterr().err
    assert "pos=relative,seed=1 (trainer.max_steps: 2 -> 3)" in err
    assert "pos=absolute,seed=1 (its settings cannot be checked" in err


# ---- 11, 12: one line for each user error, before data loads ------------------------------------------
@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("warmup=-5", "warmup=-5: must be an integer >= 0"),
        ("lr=-1", "lr=-1: must be a positive finite number"),
        ("weight_decay=-0.1", "weight_decay=-0.1: must be a number >= 0"),
        ("checkpoint.monitor=val_blue", "checkpoint.monitor='val_blue': task=translation logs"),
        ("trainer.devices=0", "trainer.devices=0: must be 'auto', -1 (all), a positive number of devices"),
        ("resume=always", "resume='always': must be one of ['auto', 'force']"),
    ],
)
def test_settings_that_cannot_work_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        check_config(compose_train(override))
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (FloatingPointError("non-finite loss at step 3 (11 bad batches in a row ...): lower the learning rate"),
         "error: non-finite loss at step 3"),
        (NotADirectoryError(errno.ENOTDIR, "Not a directory", "/x/file/run"), "error: /x/file/run: Not a directory"),
    ],
)  # fmt: skip
def test_user_errors_end_in_one_line(error, line, capsys):
    def fail(cfg):
        raise error

    with pytest.raises(SystemExit) as stopped:
        run_cli(fail, None)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith(line) and err.count("\n") == 1


def test_a_user_error_is_said_once_by_the_first_process_of_each_machine(capsys, monkeypatch):
    """Every process of a DDP run failed the same check and said so: two or three copies, run together on one
    line ("...or train anewerror: the checkpoint stopped...")."""

    def fail(cfg):
        raise ValueError("data.max_tokens=200: the checkpoint stopped elsewhere in the data")

    line = "error: data.max_tokens=200: the checkpoint stopped elsewhere in the data\n"
    # the second process of this machine is quiet; the first process of another machine says its own
    for local, node, said in (("1", "0", ""), ("0", "0", line), ("0", "1", line)):
        monkeypatch.setenv("LOCAL_RANK", local)
        monkeypatch.setenv("NODE_RANK", node)
        with pytest.raises(SystemExit) as stopped:
            run_cli(fail, None)
        assert stopped.value.code == 2 and capsys.readouterr().err == said


def test_a_checkpoint_outside_a_checkpoints_folder_needs_a_run_dir(tmp_path):
    cfg = OmegaConf.create({"run_dir": None, "ckpt_path": str(tmp_path / "model.ckpt"), "name": "x"})
    with pytest.raises(ValueError, match="not inside a run's checkpoints/ folder.*add run_dir="):
        resolve_run_dir(cfg)
    cfg.ckpt_path = str(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert resolve_run_dir(cfg) == tmp_path / "run"


def test_entry_points_answer_user_errors_in_one_line(tmp_path, capsys):
    """What train.py and evaluate.py run (run_cli around train and evaluate), in this process."""
    from hydra import compose, initialize_config_dir

    from nmt.evaluation.evaluate import evaluate

    (tmp_path / "file").write_text("")
    trap = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trap.parent.mkdir(parents=True)
    torch.save({"payload": signal.Signals.SIGTERM}, trap)  # not plain data: refused by weights_only
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        no_checkpoint = compose("evaluate")
    cases = [
        (evaluate, no_checkpoint, "error: ckpt_path is required and has no value: add ckpt_path=..."),
        (train, compose_train(*QUICK, f"run_dir={tmp_path / 'file' / 'run'}"), "a file stands where the run folder"),
        # (a folder with a checkpoint and no record of its settings is refused as such, unless forced)
        (train, compose_train(*QUICK, f"run_dir={trap.parent.parent}"), "the run's settings cannot be checked"),
        (train, compose_train(*QUICK, "resume=force", f"run_dir={trap.parent.parent}"), "error: cannot resume: "),
        (train, compose_train(*QUICK, "trainer.devices=0", f"run_dir={tmp_path / 'd'}"), "trainer.devices=0"),
    ]
    for function, cfg, text in cases:
        with pytest.raises(SystemExit) as stopped:
            run_cli(function, cfg)
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and text in err and err.startswith("error:"), err


# every option of the group, a new encoding's too
POS_OPTIONS = sorted(path.stem for path in (ROOT / "conf" / "pos").glob("*.yaml"))


@pytest.mark.parametrize(
    ("params", "command_line", "baseline", "message"),
    [
        (
            {},
            ["pos=absolute,relativ"],
            None,
            f"pos=relativ: not an option of group pos; did you mean pos=relative? valid: {', '.join(POS_OPTIONS)}",
        ),
        ({}, ["model.d_modle=64,128"], None, "model.d_modle: not a key of the config"),
        (  # a factor of an experiment's own file, which the command line's check does not read
            {},
            ["model.teacher_forcing=0.5,1.0"],
            None,
            "model.teacher_forcing: not a key of the config, so it cannot be a factor (it is a key of model=rnn)",
        ),
        (
            {},
            ["model=transformer,rnn", "model.d_model=32"],
            None,
            "model.d_model: not a key of the runs of model=rnn, so it cannot be set (model.d_model=32); sweep those",
        ),
        ({}, ["pos=absolute,rope"], {"norm": "rms"}, "baseline: norm is not a factor of this sweep (factors: ['pos'])"),
        ({}, ["pos=absolute,rope"], {"pos": "relative"}, "baseline: pos=relative is not a level of pos"),
        ({}, ["pos=absolute,rope"], 5, "baseline=5: expected {factor: level, ...}, as baseline={pos: absolute}"),
        ({}, ["pos=absolute,rope"], {"seed": 1}, "baseline: seed is not a factor of this sweep (factors: ['pos'])"),
        ({}, ["pos=rope,rope"], None, "pos=rope,rope: the factor has one level (rope given 2 times)"),
        ({}, ["pos=rope,absolute,rope"], None, "pos=rope,absolute,rope: the factor repeats a level (rope given 2"),
        ({}, ["pos=absolute,rope", "seed=1,2,1"], None, "seed=1,2,1: repeats a seed (1 given 2 times); give distinct"),
        ({}, ["norm=layer,rmss"], None, "norm=rmss: not an option of group norm; did you mean norm=rms? valid: "),
    ],
)
def test_bad_sweep_input_stops_before_any_run_with_one_line(tmp_path, capsys, params, command_line, baseline, message):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("sweep", overrides=["grid=none", "name=x"], return_hydra_config=True)
    config.hydra.sweep.dir = str(tmp_path / "sweep")
    config.hydra.overrides.task = command_line
    config.baseline = baseline
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(config)
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "sweep").exists()


def test_a_group_the_grid_sets_and_the_model_does_not_use_is_said_to_come_from_the_grid(tmp_path):
    """sweep.py model=rnn (the default grid=transformer) said "pos=absolute: ... remove it", naming nothing the
    user typed; the grid is named, and what to give instead."""
    from hydra import compose, initialize_config_dir

    from nmt.sweep.plan import run_config_problem

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("sweep", overrides=["name=x", "model=rnn"], return_hydra_config=True)
    config.hydra.sweep.dir = str(tmp_path / "sweep")
    config.hydra.overrides.task = ["model=rnn"]
    problem = run_config_problem(config)
    assert "pos=absolute: model=rnn does not use group 'pos'" in problem, problem
    assert "remove it (it is a factor of grid=transformer: give grid=none, or a grid for this model)" in problem
    config.hydra.overrides.task = ["model=rnn", "optim.optimizer.eps=-1"]  # a key under a grid's group, typed
    problem = run_config_problem(config)
    assert (
        "optim.optimizer.eps=-1: must be a number >= 0" in problem
        and "optim.optimizer.eps=-1: must be a number >= 0 (" not in problem
    )
    config.hydra.overrides.task = ["model=rnn", "pos=absolute,rope"]  # typed: no word of the grid
    assert (
        "pos=absolute: model=rnn does not use group 'pos' (of pos, norm, attention it uses attention); remove it;"
        in (run_config_problem(config))
    )


def composed_sweep(tmp_path, factors: list[str], settings: list[str]):
    """The sweep's config as its callback sees it: ``settings`` composed, ``factors`` (comma lists) and
    both on its command line."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("sweep", overrides=["grid=none", "name=x", *settings], return_hydra_config=True)
    config.hydra.sweep.dir = str(tmp_path / "sweep")
    config.hydra.overrides.task = [*factors, *settings]
    return config


def test_a_misspelt_level_setting_or_a_failing_plan_stops_the_sweep_before_any_run(tmp_path, capsys, monkeypatch):
    """A level setting's misspelt key would fail every run of its level; any failure while the sweep starts
    (Hydra makes a callback's exception a warning and launches the runs: plan=true trained) stops it."""
    from nmt.sweep import callback

    settings = "level_settings={optim: {adam: ['optim.optimizer.lrr=0.001']}}"
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(composed_sweep(tmp_path, ["optim=adam,noam"], [settings]))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "the runs of optim=adam cannot be composed: Could not override" in err
    assert "(did you mean optim.optimizer.lr?)" in err
    # a key of another option of the group: that option named, not a key of like spelling
    settings = "level_settings={optim: {adam: ['optim.scheduler.factor=2']}}"
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(composed_sweep(tmp_path, ["optim=adam,noam"], [settings]))
    assert "Could not override 'optim.scheduler.factor'. (it is a key of optim=noam)" in capsys.readouterr().err

    def broken(*args):
        raise json.JSONDecodeError("Invalid control character", "{", 0)

    monkeypatch.setattr(callback, "print_plan", broken)
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(composed_sweep(tmp_path, ["pos=absolute,rope"], ["plan=true"]))
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith("error: the sweep did not start: Invalid control character")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("on_changed=mvoe", "on_changed='mvoe': must be one of ['stop', 'move']"),
        ("plan=maybe", "plan='maybe': must be true or false"),
        ("report_sentence=-1", "report_sentence=-1: must be a test sentence's index"),
        ("report_sentence=true", "report_sentence=True: must be a test sentence's index"),  # True is 1 to Python
        ("sweep_name=/tmp/elsewhere", "sweep_name='/tmp/elsewhere': the name of a folder under sweeps/"),
        # read for their truth: a word or a number turned the pool on, plan=1 planned, null was stop
        ("gpu_pool=maybe", "gpu_pool='maybe': must be true or false"),
        ("gpu_pool=2", "gpu_pool=2: must be true or false"),
        ("gpu_mps=maybe", "gpu_mps='maybe': must be true or false"),
        ("plan=1", "plan=1: must be true or false"),
        ("on_changed=null", "on_changed=None: must be one of ['stop', 'move']"),
        # a folder outside sweeps/: '..' wrote the sweep into the working folder, '' into sweeps/ itself
        ("sweep_name=..", "sweep_name='..': the name of a folder under sweeps/ (not empty, not absolute, no '..')"),
        ("sweep_name=../elsewhere", "sweep_name='../elsewhere': the name of a folder under sweeps/"),
        ("sweep_name=", "sweep_name='': the name of a folder under sweeps/"),
        ("sweep_name=null", "sweep_name=None: the name of a folder under sweeps/"),
        ("sweep_name=.", "sweep_name='.': the name of a folder under sweeps/"),
        # not a time: 00:99:99 was 1 h 40 min 39 s
        ("start_runs_for='00:99:99'", "start_runs_for='00:99:99': minutes and seconds go from 00 to 59"),
        # set by the sweep for each run, after the user's: the given value went unused, without a word
        ("run_dir=/tmp/elsewhere", "run_dir=/tmp/elsewhere: a sweep gives each run its own folder"),
        ("group=mine", "group=mine: a sweep sets each run's W&B group to the sweep's name"),
        ("tags=[a]", "tags=[a]: a sweep sets each run's W&B tags to its factor values"),
        # W&B's: every run one name; the runs' files in one folder, the report run's in the sweep's, which the
        # printed `wandb sync` line named
        (("logger=wandb", "logger.name=mine"), "logger.name=mine: a sweep names each W&B run by its factor values"),
        (("logger=wandb", "logger.dir=/tmp/w"), "logger.dir=/tmp/w: a sweep keeps the W&B files of its runs and of"),
        # a group option given settings that no run of the sweep has (adamw where noam was meant)
        (
            "level_settings={pos: {absolute: ['model.dropout=0.2'], learned: ['model.dropout=0.3']}}",
            "level_settings.pos.learned: learned is not a level of this sweep (pos here: absolute, rope)",
        ),
        # a misspelt key in a level's settings: Hydra's "Could not override", without the nearest key the
        # command line's typo gets
        (
            "level_settings={pos: {absolute: ['model.dropoutt=0.2']}}",
            "Could not override 'model.dropoutt'. (did you mean model.dropout?)",
        ),
        # settings for levels this sweep does not run: given to no run, without a word
        (
            "level_settings={pos: {learned: ['model.dropout=0.2']}}",
            "level_settings.pos: this sweep runs none of its levels (learned; pos here: absolute, rope)",
        ),
        # the runs trained, then the report failed for want of the metric
        (
            ("report_metric=val_as_test_bleu", "val_after_training=false"),
            "report_metric=val_as_test_bleu: the final model's score on the val set, and every run of this sweep "
            "has val_after_training=false",
        ),
        (
            "test_after_training=false",  # report_metric=auto: the task's test_bleu
            "report_metric=auto ranks by test_bleu: the final model's score on the test set, and every run of this "
            "sweep has test_after_training=false",
        ),
        # early stopping's metric where its patience is off: the plan passed, and each run was refused alone
        (
            ("data=toy", "early_stopping.monitor=val_loss"),  # the toy recipe has no patience
            # every cell alike: said of every run, not of the first cell ("the runs of pos=absolute")
            "every run would be refused: early_stopping.monitor=val_loss: early stopping is off "
            "(early_stopping.patience=null)",
        ),
        # joblib's ValueError, a traceback after the plan was written
        (
            ("hydra/launcher=joblib", "hydra.launcher.n_jobs=0"),
            "hydra.launcher.n_jobs=0: must be a whole number of runs at once, >= 1 (or -1: one per CPU core)",
        ),
        # +tuned= and level_settings= merged by Hydra: whose settings won was unclear
        (
            ("+tuned=factorial_converged_toy", "level_settings={optim: {adam: ['warmup=3']}}"),
            "level_settings={optim: {adam: ['warmup=3']}}: +tuned=factorial_converged_toy gives the level settings;",
        ),
    ],
)
def test_a_sweep_setting_out_of_its_values_stops_the_sweep_in_one_line(tmp_path, capsys, setting, message):
    """on_changed=mvoe was taken as stop, and plan=maybe as true."""
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(
            composed_sweep(tmp_path, ["pos=absolute,rope"], [setting] if isinstance(setting, str) else list(setting))
        )
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_a_glob_of_levels_stops_the_sweep_in_one_line(tmp_path, capsys):
    """Hydra's glob() needs a config loader the sweep's check has not: "ConfigLoader is not set"."""
    with pytest.raises(SystemExit) as stopped:
        SweepReport().on_multirun_start(composed_sweep(tmp_path, ["pos=absolute,rope", "norm=glob(*)"], []))
    said = "norm=glob(*): glob() is not supported in a sweep; list the levels (norm=a,b,...)"
    assert stopped.value.code == 2 and said in capsys.readouterr().err


def test_a_numbered_sweep_name_is_a_folder_and_a_tuned_file_is_named_in_its_problems(tmp_path, capsys):
    """sweep_name=2026 (an int to Hydra) is the folder sweeps/2026; a tuned file's settings that cannot apply
    are said as the file's (+tuned=), the key the user gave."""
    from nmt.sweep.inputs import input_problem, sweep_name_problem

    assert sweep_name_problem(2026) is None and sweep_name_problem("factorial/zh_en") is None
    config = composed_sweep(tmp_path, ["pos=absolute,rope"], ["+tuned=factorial_converged_toy"])
    assert input_problem(config).startswith(
        "+tuned=factorial_converged_toy: level_settings.optim: optim is not a key of this sweep"
    )


def test_a_level_given_as_a_number_gets_its_settings(tmp_path):
    """{seed: {1: [...]}} is read with an int level; the runs' levels are strings: no run got the settings."""
    from nmt.sweep.levels import level_overrides

    assert level_overrides(OmegaConf.create({"seed": {1: ["warmup=3"]}}), {"seed": "1"}) == ["warmup=3"]


def test_a_sweep_given_its_folder_is_told_to_choose_another_folder_not_a_name(tmp_path):
    """With hydra.sweep.dir given, sweep_name names nothing: the advice names the option that applies."""
    from nmt.sweep.plan import own_folder

    config = composed_sweep(tmp_path, ["pos=absolute,rope"], [])
    assert own_folder(config) == "hydra.sweep.dir=..."
    config.hydra.sweep.dir = f"sweeps/{config.sweep_name}"
    assert own_folder(config) == "sweep_name=..."


def test_seeds_added_to_a_one_seed_sweep_are_the_same_sweep(tmp_path, capsys):
    """A one-seed sweep's plan has no seed factor: adding seeds (docs: rerun with more seeds) was refused
    as another sweep, with the advice to remove the folder of finished runs."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "plan.json").write_text(json.dumps({"factors": {"pos": ["absolute", "rope"]}, "runs": 2}))
    SweepReport().on_multirun_start(composed_sweep(tmp_path, ["pos=absolute,rope", "seed=1,2"], []))
    plan = json.loads((sweep / "plan.json").read_text())
    assert plan["factors"] == {"pos": ["absolute", "rope"], "seed": ["1", "2"]} and len(plan["run_names"]) == 4
    assert "pos=rope,seed=2" in plan["run_names"]
    # the start line names the factors and the seeds apart: seeds are replicates, not a factor's levels
    assert "[sweep] 4 runs: pos ['absolute', 'rope'], seeds 1, 2\n" in capsys.readouterr().out


@pytest.mark.slow
def test_a_folder_trained_on_other_data_is_refused(tmp_path, capsys):
    args = [*QUICK, "trainer.max_epochs=1", f"run_dir={tmp_path}"]
    train(compose_train(*args))
    (tmp_path / "results.json").unlink()  # as if killed: a rerun would resume
    saved = json.loads((tmp_path / "fingerprint.json").read_text())
    assert saved["data"]["splits"]["train"]["pairs"] > 0 and saved["data"]["tokenizers"]
    assert sorted(saved["data"]["text"]) == ["test", "train", "val"]
    # the same settings and sizes, another test text (a test file edited in place; the tokenizers, trained
    # on the training text, are the same)
    saved["data"]["text"]["test"] = "0" * 16
    (tmp_path / "fingerprint.json").write_text(json.dumps(saved))
    with pytest.raises(RunFolderError, match=r"trained on other data \(data\.text \(test\) differ\).*resume=force"):
        train(compose_train(*args))
    # refused for a setting, the text's change is said in the same refusal (it took a second try to learn it)
    with pytest.raises(
        RunFolderError, match=r"other settings \(trainer\.max_epochs: 1 -> 2\).*Its data's text changed too \(the test"
    ):
        train(compose_train(*args, "trainer.max_epochs=2"))
    capsys.readouterr()
    train(compose_train(*args, "resume=force"))
    assert "resume=force: continuing" in capsys.readouterr().out
    # on record, as a setting's change is: the results and the folder's record say the run went on on other text
    results = json.loads((tmp_path / "results.json").read_text())
    assert [forced["changed"] for forced in results["continued_under_other_settings"]] == [["data.text (test)"]]
    # from the update its checkpoint holds: the one epoch's
    assert [forced["from_step"] for forced in results["continued_under_other_settings"]] == [
        steps_per_epoch(compose_train(*args))
    ]
    record = json.loads((tmp_path / "fingerprint.json").read_text())
    assert record["forced"] == results["continued_under_other_settings"] and record["data"]["text"]["test"] != "0" * 16
    # other tokenizers (here: other segmenters before them): the checkpoint's embeddings would index other
    # pieces, so not even resume=force continues it
    (tmp_path / "results.json").unlink()
    saved = json.loads((tmp_path / "fingerprint.json").read_text())
    assert saved["data"]["segmenters"] == [{"name": "none", "user_dict": None}] * 2
    saved["data"]["segmenters"][1] = {"name": "moses", "user_dict": None, "lang": "de", "hyphens": "kept"}
    (tmp_path / "fingerprint.json").write_text(json.dumps(saved))
    with pytest.raises(
        RunFolderError, match=r"trained with other segmenters \(data\.segmenters differ\).*config\.yaml"
    ):
        train(compose_train(*args, "resume=force"))
    # other tokenizers because the training text changed (they are trained on it): that is the cause named
    saved["data"]["segmenters"][1] = {"name": "none", "user_dict": None}
    saved["data"]["tokenizers"], saved["data"]["text"]["train"] = "1" * 16, "2" * 16
    (tmp_path / "fingerprint.json").write_text(json.dumps(saved))
    with pytest.raises(RunFolderError, match=r"other tokenizers .*; its training text changed since") as refused:
        train(compose_train(*args, "resume=force"))
    assert "config.yaml" not in str(refused.value)


def test_a_checkpoint_is_written_from_host_copies_with_its_mappings_as_they_were(tmp_path):
    """The checkpoint's tensors reach the file through host copies made together (on a GPU one wait, not one
    per tensor); the mappings keep their kind and attributes (a state dict's ``_metadata``, which
    ``load_state_dict`` reads), and the values are the checkpoint's."""
    from collections import OrderedDict

    from nmt.training.checkpoint_io import on_host

    state = torch.nn.Linear(3, 2).state_dict()
    checkpoint = {"state_dict": state, "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0)}}}], "epoch": 4}
    moved = on_host(checkpoint)
    assert isinstance(moved["state_dict"], OrderedDict) and moved["state_dict"]._metadata == state._metadata
    assert all(torch.equal(moved["state_dict"][k], v) for k, v in state.items())
    io, path = AtomicCheckpointIO(), tmp_path / "a.ckpt"
    io.save_checkpoint(checkpoint, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded["epoch"] == 4 and torch.equal(loaded["state_dict"]["weight"], state["weight"])
    assert loaded["state_dict"]._metadata == state._metadata


def test_a_changed_code_hash_says_whether_the_commit_changed_or_only_uncommitted_edits():
    from nmt.training.run_identity import differences

    saved = {"config": {"seed": 1}, "code": {"hash": "a", "commit": "1" * 40, "dirty": False}}
    edited = {"config": {"seed": 1}, "code": {"hash": "b", "commit": "1" * 40, "dirty": True}}
    committed = {"config": {"seed": 1}, "code": {"hash": "c", "commit": "2" * 40, "dirty": False}}
    assert differences(saved, edited) == [
        "code: the source of nmt/ or of a config group changed (commit 111111111111 both times, now with "
        "uncommitted changes)"
    ]
    assert differences(saved, committed) == [
        "code: the source of nmt/ or of a config group changed (commit 111111111111 -> 222222222222)"
    ]
    assert differences(saved, {**saved}) == []


def test_a_setting_given_on_one_side_only_is_a_difference():
    """A key the folder's run was made with and this command lacks (or the reverse), such as a key added with
    +: its run differs, said as absent on the side without it."""
    from nmt.training.run_identity import differences

    code = {"hash": "a"}
    plain = {"config": {"seed": 1}, "code": code}
    added = {"config": {"seed": 1, "optim.optimizer.amsgrad": True}, "code": code}
    assert differences(added, plain) == ["optim.optimizer.amsgrad: True -> '(absent)'"]
    assert differences(plain, added) == ["optim.optimizer.amsgrad: '(absent)' -> True"]


def test_a_folder_whose_run_differs_only_in_its_code_says_other_code_not_other_settings(tmp_path):
    """Same settings, nmt/ edited since: the refusal said "a run made with other settings (code: ...)"."""
    from nmt.training.run_folder import RunFolderError
    from nmt.training.run_identity import check_identity

    saved = {"config": {"seed": 1}, "code": {"hash": "a", "commit": "1" * 40, "dirty": False}}
    for config, other in (({"seed": 1}, "other code"), ({"seed": 2}, "other settings and code")):
        with pytest.raises(RunFolderError, match=rf"holds a run made with {other} \("):
            check_identity(tmp_path, {"config": config, "code": {"hash": "b", "commit": "1" * 40}}, False, saved)
    with pytest.raises(RunFolderError, match=r"holds a run made with other settings \(seed: 1 -> 2\)"):
        check_identity(tmp_path, {"config": {"seed": 2}, "code": saved["code"]}, False, saved)
    warning = check_identity(tmp_path, {"config": {"seed": 1}, "code": {"hash": "b"}}, True, saved)
    assert warning.startswith(f"warning: resume=force: continuing {tmp_path} under other code (code: ")


def stopped_by_sigterm_in(step: str, args: list[str], tmp_path: Path, monkeypatch) -> tuple[dict, Path]:
    """The uninterrupted run of ``args`` (its results), and the folder of the same run stopped by SIGTERM in
    ``nmt.training.train.<step>`` (exit 143), the step restored for a rerun."""
    from nmt.training import train as training

    reference = train(compose_train(*args, f"run_dir={tmp_path / 'reference'}"))
    real = getattr(training, step)

    def stopped(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once
        raise AssertionError(f"SIGTERM did not stop {step}")

    monkeypatch.setattr(training, step, stopped)
    run = tmp_path / "stopped"
    with pytest.raises(SystemExit) as stop:
        train(compose_train(*args, f"run_dir={run}"))
    assert stop.value.code == 143
    monkeypatch.setattr(training, step, real)
    return reference, run


@pytest.mark.slow
def test_a_stop_during_the_final_scores_is_said_and_a_rerun_only_scores(tmp_path, monkeypatch, capsys):
    """SIGTERM while the final model is scored: one line and exit 143; the training's record is kept, so the
    rerun neither trains nor validates again (no extra row in the log) and ends with the uninterrupted
    run's results."""
    args = [*QUICK, "trainer.max_epochs=1", "val_after_training=true", "test_after_training=true"]
    reference, run = stopped_by_sigterm_in("final_scores", args, tmp_path, monkeypatch)
    assert "Stopped by SIGTERM during the final scores; run the same command again" in capsys.readouterr().out
    assert json.loads((run / "results.json").read_text())["stage"] == "trained"
    log = (run / "logs" / "metrics.csv").read_text()
    again = train(compose_train(*args, f"run_dir={run}"))
    assert "Training ended in an earlier sitting" in capsys.readouterr().out
    assert (run / "logs" / "metrics.csv").read_text() == log
    assert again["finished"] and "stage" not in json.loads((run / "results.json").read_text())
    for key in ("steps", "epochs", "ended_by"):
        assert again[key] == reference[key], key
    for split in ("test", "val_as_test"):  # the scores (their files lie in each run's own folder)
        numbers = [{k: v for k, v in r[split].items() if isinstance(v, float)} for r in (again, reference)]
        assert numbers[0] == numbers[1] and "bleu" in numbers[0], split
    assert again["final_metrics"].keys() == reference["final_metrics"].keys()


class SeenAtValidationEnd(L.Callback):
    def __init__(self):
        self.seen = []

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            stopping = next(c for c in trainer.callbacks if type(c).__name__ == "SittingEarlyStopping")
            decoded = "val_bleu" in trainer.callback_metrics
            # a progress bar shows what was measured now, not the BLEU of an earlier validation
            assert decoded == ("val_bleu" in trainer.progress_bar_metrics)
            self.seen.append((trainer.current_epoch, decoded, stopping.wait_count))


@pytest.mark.slow
def test_early_stopping_counts_only_validations_that_decoded(tmp_path, monkeypatch):
    """Patience on a decoded metric (val_bleu, decoded every second epoch) counts decoded validations: the
    validation between two decoded ones has no val_bleu, neither for early stopping nor for the printed
    line or the progress bar, and leaves the patience spent as it was."""
    from nmt.training import trainer as trainer_module

    watcher, built = SeenAtValidationEnd(), trainer_module._callbacks
    monkeypatch.setattr(trainer_module, "_callbacks", lambda *args: [*built(*args), watcher])
    args = [*QUICK, "trainer.max_epochs=6", "validation.bleu_every_n_epochs=2", "early_stopping.patience=1"]
    train(compose_train(*args, f"run_dir={tmp_path}"))
    seen = watcher.seen
    assert len(seen) >= 4
    assert [decoded for _, decoded, _ in seen] == [epoch % 2 == 1 for epoch, *_ in seen]
    for (epoch, decoded, waited), (_, _, before) in zip(seen[1:], seen, strict=False):
        if not decoded:
            assert waited == before, f"epoch {epoch}: a validation without val_bleu spent patience"


@pytest.mark.slow
def test_a_missing_last_checkpoint_beside_epoch_checkpoints_resumes_from_the_newest_not_afresh(tmp_path, capsys):
    train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    (tmp_path / "results.json").unlink()
    (tmp_path / "checkpoints" / "last.ckpt").unlink()
    capsys.readouterr()
    results = train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    newest = tmp_path / "checkpoints" / "epoch001.ckpt"
    assert f"last.ckpt is missing; resuming from {newest}, the newest epoch checkpoint" in capsys.readouterr().out
    assert (
        results["finished"]
        and results["epochs"] == 2
        and results["steps"] == 2 * steps_per_epoch(compose_train(*QUICK))
    )


def test_writing_tuned_settings_a_grid_an_experiment_or_a_recipe_leaves_the_code_hash_as_it_was(monkeypatch, tmp_path):
    """`sweep.py tune --out conf/tuned/<name>.yaml` (docs/sweeps.md) changed the hash of every finished run, and
    so did a user's new experiment file, which no run used (every sweep refused as "made under other code"):
    configs that only set values are not part of it (their values are the runs' settings); a group is."""
    import shutil

    from nmt.utils import code

    root = tmp_path / "copy"
    (root / "nmt" / "utils").mkdir(parents=True)
    shutil.copytree(ROOT / "conf", root / "conf")
    (root / "nmt" / "x.py").write_text("x = 1\n")
    monkeypatch.setattr(code, "__file__", str(root / "nmt" / "utils" / "code.py"))
    before = code.code_hash()
    (root / "conf" / "tuned" / "mine.yaml").write_text("level_settings: {}\n")
    (root / "conf" / "grid" / "mine.yaml").write_text("hydra: {}\n")
    (root / "conf" / "experiment" / "mine.yaml").write_text("# @package _global_\nwarmup: 80\n")
    (root / "conf" / "recipe" / "mine.yaml").write_text("# @package _global_\nmodel: {}\n")
    assert code.code_hash() == before
    (root / "conf" / "model" / "mine.yaml").write_text("width: 4\n")
    assert code.code_hash() != before


def test_an_edited_experiment_is_named_by_the_settings_it_changed(tmp_path):
    """Experiments and recipes are out of the code hash: what guards a run made with one edited since is its
    settings, which hold the experiment's values and are compared key by key."""
    import shutil

    from hydra import compose, initialize_config_dir

    from nmt.training.run_identity import differences

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)

    def config() -> dict:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            return OmegaConf.to_container(compose("train", overrides=["experiment=factorial_tiny"]), resolve=True)

    before = config()
    path = conf / "experiment" / "factorial_tiny.yaml"
    path.write_text(path.read_text().replace("warmup: 200", "warmup: 300"))
    assert differences({"config": before}, {"config": config()}) == [
        "optim.scheduler.warmup: 200 -> 300",
        "warmup: 200 -> 300",
    ]


def test_a_comment_or_blank_line_keeps_the_code_hash_and_any_edit_of_code_strings_or_settings_changes_it(
    monkeypatch, tmp_path
):
    """A reviewer's trial: one comment added to nmt/ marked every run of a sweep "other code", to be retrained.
    Comments and blank lines are not code; a ``#`` inside a string, a blank line inside a string of several
    lines, a docstring, a YAML value and Hydra's ``# @package`` line are."""
    from nmt.utils import code

    root = tmp_path / "copy"
    (root / "nmt" / "utils").mkdir(parents=True)
    (root / "conf" / "model").mkdir(parents=True)
    module, config = root / "nmt" / "x.py", root / "conf" / "model" / "m.yaml"
    source = 'def f(x):\n    """Twice x."""\n    text = """a\n\nb"""\n    return 2 * x, "#", text\n'
    module.write_text(source)
    config.write_text("# @package model\nwidth: 4  # the width\n")
    monkeypatch.setattr(code, "__file__", str(root / "nmt" / "utils" / "code.py"))
    before = code.code_hash()

    def hashed(path, text):
        path.write_text(text)
        return code.code_hash()

    commented = source.replace("    return", "    # doubled, as the paper\n\n    return").replace("(x):", "(x):  # f ")
    assert hashed(module, commented + "\n# the end\n") == before
    assert hashed(config, "# a comment\n# @package model\n\nwidth: 4\n") == before
    for path, text in [
        (module, source.replace("2 * x", "3 * x")),
        (module, source.replace('"#"', '"# no"')),
        (module, source.replace("a\n\nb", "a\nb")),  # a blank line inside a string
        (module, source.replace('"""a\n', '"""a  \n')),  # spaces ending a string's first line
        (config, "# @package model\nwidth: 4\n1: x\n"),  # a key added
        (module, source.replace("Twice x.", "Double x.")),
        (config, "# @package model\nwidth: 5\n"),
        (config, "# @package _global_\nwidth: 4\n"),
    ]:
        assert hashed(path, text) != before, text
        module.write_text(source)
        config.write_text("# @package model\nwidth: 4  # the width\n")
        assert code.code_hash() == before
    assert hashed(config, "# @package model\n1: x\n") != hashed(config, "# @package model\n'1': x\n")  # 1 is not "1"


def test_the_code_hash_is_read_from_the_cache_for_the_same_bytes_and_computed_again_for_any_other(
    monkeypatch, tmp_path
):
    """Every run, evaluation and plan hashed the meaning of some 200 files anew (more than a second): the hash
    is kept in the cache under the digest of the files' bytes. The same bytes read it back without reading
    any file's meaning; an edited byte, even a comment's, computes it again (and a comment keeps its value);
    a damaged entry is computed again, not trusted."""
    from nmt.utils import code

    root = tmp_path / "copy"
    (root / "nmt" / "utils").mkdir(parents=True)
    (root / "conf" / "model").mkdir(parents=True)
    module = root / "nmt" / "x.py"
    module.write_text("x = 1\n")
    (root / "conf" / "model" / "m.yaml").write_text("width: 4\n")
    monkeypatch.setattr(code, "__file__", str(root / "nmt" / "utils" / "code.py"))
    monkeypatch.setenv("NMT_CACHE", str(tmp_path / "cache"))
    meanings, real = [], code.meaning
    monkeypatch.setattr(code, "meaning", lambda *a: meanings.append(a) or real(*a))

    def fresh():  # as a new process finds it: nothing held in memory
        code._HASHES.clear()
        meanings.clear()
        return code.code_hash()

    first = fresh()
    assert len(meanings) == 2 and re.fullmatch(r"[0-9a-f]{16}", first)
    (stored,) = (tmp_path / "cache" / "code_hash").iterdir()
    assert fresh() == first and meanings == []  # read back, no file's meaning read
    module.write_text("x = 1  # one\n")
    assert fresh() == first and len(meanings) == 2  # other bytes: computed, the same meaning
    module.write_text("x = 2\n")
    assert fresh() != first and len(meanings) == 2
    module.write_text("x = 1\n")
    stored.write_text("not a hash\n")
    assert fresh() == first and len(meanings) == 2 and stored.read_text() == first + "\n"
    # the cache unwritable: the hash is still computed, and the same
    monkeypatch.setenv("NMT_CACHE", str(module))  # a file, not a folder
    assert fresh() == first and len(meanings) == 2


def test_a_checkpoint_of_another_run_is_held_to_that_runs_tokenizers_and_settings(tmp_path, capsys):
    """ckpt_path=<another run's checkpoint> run_dir=<new>: other tokenizers trained on (their ids read as
    other pieces) and other settings went unchecked and unrecorded."""
    first = tmp_path / "first"
    done = train(compose_train(*QUICK, f"run_dir={first}"))
    ckpt = first / "checkpoints" / "last.ckpt"
    with pytest.raises(RunFolderError, match=r"ckpt_path=.*last\.ckpt: its model was trained with other tokenizers"):
        train(
            compose_train(*QUICK, f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'a'}", "data.tokenizer.model_type=unigram")
        )
    # another task's checkpoint: said as that, before any of this run's data is read (the corpus is not there)
    with pytest.raises(
        RunFolderError, match=r"last\.ckpt: a checkpoint of task=translation, whose model reads a source"
    ):
        train(compose_train("task=lm", f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'lm'}", f"data.root={tmp_path}/no"))
    # a task of the same kind of model is another setting: a translator continues as a summariser when forced
    forced = [*QUICK, "task=summarization", f"ckpt_path={ckpt}", f"run_dir={tmp_path / 's'}", "trainer.max_epochs=3"]
    with pytest.raises(RunFolderError, match=r"task\._target_: .*TranslationTask.* -> .*SummarizationTask"):
        train(compose_train(*forced))
    assert train(compose_train(*forced, "resume=force"))["finished"]
    other = (
        r"was trained with other settings \(lr: [\d.]+ -> 0\.001; optim\.optimizer\.lr: [\d.]+ -> 0\.001\); pass resume"
    )
    with pytest.raises(RunFolderError, match=other):
        train(compose_train(*QUICK, f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'b'}", "lr=0.001"))
    capsys.readouterr()
    more = ["lr=0.001", "trainer.max_epochs=3", "resume=force"]
    results = train(compose_train(*QUICK, f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'c'}", *more))
    assert "warning: resume=force: continuing" in capsys.readouterr().out
    (record,) = results["continued_under_other_settings"]
    assert [line.split(":")[0] for line in record["changed"]] == ["lr", "optim.optimizer.lr", "trainer.max_epochs"]
    assert record["from"] == str(ckpt) and record["from_step"] == done["steps"] < results["steps"]
    # the same settings pass the check, and their budget is spent: nothing to train, said (it "finished" without
    # a checkpoint of its own folder, and would have been scored by none)
    with pytest.raises(RunFolderError, match=r"it has trained this command's whole budget already"):
        train(compose_train(*QUICK, f"ckpt_path={ckpt}", f"run_dir={tmp_path / 'd'}"))


def test_a_stopped_run_without_run_dir_names_the_folder_to_resume_in(tmp_path):
    """Without run_dir a rerun of the same command makes a new dated folder and trains afresh: the stop's
    line said "run the same command again" all the same."""
    from nmt.training.resume import how_to_rerun

    named = {"run_dir": str(tmp_path), "ckpt_path": None}
    assert how_to_rerun(OmegaConf.create(named), tmp_path) == "the same command again"
    in_folder = {"run_dir": None, "ckpt_path": str(tmp_path / "checkpoints" / "last.ckpt")}
    assert how_to_rerun(OmegaConf.create(in_folder), tmp_path) == "the same command again"
    # another checkpoint named (an epoch's, another run's): the same command would start from it again
    for other in (tmp_path / "checkpoints" / "epoch010.ckpt", tmp_path.parent / "x" / "checkpoints" / "last.ckpt"):
        given = {"run_dir": str(tmp_path), "ckpt_path": str(other)}
        assert how_to_rerun(OmegaConf.create(given), tmp_path) == (
            f"the same command with run_dir={tmp_path} and without ckpt_path (it resumes from the run's last.ckpt)"
        )
    dated = {"run_dir": None, "ckpt_path": None}
    assert how_to_rerun(OmegaConf.create(dated), tmp_path) == f"the same command with run_dir={tmp_path}"


def test_a_resumed_checkpoint_of_another_model_is_one_line(tmp_path):
    """resume=force with model.d_model changed gave Lightning's list of every missing and misshapen weight."""
    first = tmp_path / "first"
    train(compose_train(*QUICK, f"run_dir={first}"))
    (first / "results.json").unlink()  # as if killed: a rerun resumes
    with pytest.raises(
        RunFolderError, match=r"last\.ckpt does not hold this run's model: it has other shapes of \d+ weight"
    ):
        train(compose_train(*QUICK, f"run_dir={first}", "model.ffn_dim=48", "resume=force"))
    # the refused sitting left the folder's records as they were: the run's own command still continues it (it
    # said "other settings (model.ffn_dim: 48 -> 32)", the refused sitting's record in place of the run's)
    before = json.loads((first / "fingerprint.json").read_text())["config"]["model.ffn_dim"]
    again = train(compose_train(*QUICK, f"run_dir={first}"))
    assert before != 48 and not again.get("continued_under_other_settings")


def test_a_results_file_that_is_not_a_runs_results_is_said_as_an_unreadable_one_is(tmp_path, capsys):
    """[1,2] in results.json was taken up silently; a file that was not JSON at all was said."""
    from nmt.training.run_folder import finished_results

    for text, said in (("[1, 2]", "holds a list, not a run's results"), ("{oops", "cannot be read")):
        (tmp_path / "results.json").write_text(text)
        assert finished_results(tmp_path) is None
        assert f"{tmp_path / 'results.json'} {said}" in capsys.readouterr().out
    (tmp_path / "results.json").write_text('{"finished": false}')  # a run stopped in its final scores: unsaid
    assert finished_results(tmp_path) is None and capsys.readouterr().out == ""


def test_a_write_cut_short_by_a_kill_leaves_no_temporary_file_after_the_rerun(tmp_path):
    """SIGKILL while best.ckpt was written left .best.ckpt.<pid>.tmp in the folder for good (the data report's
    and training sentences' too)."""
    train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    (tmp_path / "results.json").unlink()  # as if killed: a rerun resumes
    stale = tmp_path / "checkpoints" / ".best.ckpt.999999.tmp"
    stale.write_bytes(b"half a checkpoint")
    # and the run's other records, cut short the same way (kills while a sitting started)
    others = [tmp_path / ".data_report.txt.999999.tmp", tmp_path / ".train_sentences.npz.999998.tmp"]
    for other in others:
        other.write_bytes(b"half")
    theirs = tmp_path / "eval" / "x" / ".hypotheses.txt.999997.tmp"  # evaluate.py's, which takes no lock: kept
    theirs.parent.mkdir(parents=True)
    theirs.write_bytes(b"being written")
    train(compose_train(*QUICK, f"run_dir={tmp_path}"))
    assert not stale.exists() and (tmp_path / "checkpoints" / "best.ckpt").is_file()
    assert not any(other.exists() for other in others) and theirs.exists()


@pytest.mark.slow
def test_a_stop_during_the_final_validation_reruns_to_the_uninterrupted_runs_metrics(tmp_path, monkeypatch, capsys):
    """SIGTERM while the final weights were validated: the rerun (which trains nothing) kept no training values
    in its final metrics (train_loss, lr, grad_norm, train_tokens), which the uninterrupted run has."""
    args = [*QUICK, "trainer.max_epochs=1"]
    reference, run = stopped_by_sigterm_in("validate_final_weights", args, tmp_path, monkeypatch)
    assert "Stopped by SIGTERM during the final validation" in capsys.readouterr().out
    again = train(compose_train(*args, f"run_dir={run}"))
    assert again["final_metrics"].keys() == reference["final_metrics"].keys()
    for key in ("train_loss", "lr", "train_tokens", "val_loss"):
        assert again["final_metrics"][key] == pytest.approx(reference["final_metrics"][key], rel=1e-6), key
    # the log: the rerun's first row, the final weights' validation at the last update's step, kept the
    # training's own rows of that step, and is logged in the epoch of that update (one that ran)
    steps_and_keys = [logged_rows(folder) for folder in (reference["run_dir"], run)]
    assert steps_and_keys[0] == steps_and_keys[1]
    final = [row for row in steps_and_keys[1] if row[2]]
    assert final == [(str(again["steps"] - 1), str(float(again["epochs"] - 1)), True)], steps_and_keys[1]
    assert not {"step", "epoch", "final_weights"} & set(again["final_metrics"])


@pytest.mark.slow
def test_a_rerun_that_only_validates_the_final_weights_logs_them_as_the_uninterrupted_run(tmp_path):
    """Killed after training stopped by max_steps inside an epoch, before the final weights' validation: the
    rerun trains nothing, and its row of that validation was put in the epoch before (Lightning's restored
    counter is the epoch in progress there) and had no time, so the curves left it out."""
    steps = steps_per_epoch(compose_train(*QUICK)) * 3 // 2
    args = [*QUICK, f"trainer.max_steps={steps}", "validation.bleu_every_n_epochs=1"]
    first = train(compose_train(*args, f"run_dir={tmp_path}"))
    assert first["epochs"] == 2  # the epochs it trained in: the second cut short
    log = tmp_path / "logs" / "metrics.csv"
    with open(log, newline="") as handle:
        rows = list(csv.DictReader(handle))
    final = [(r["step"], r["epoch"], bool(r["wall_time_s"])) for r in rows if r.get("final_weights")]
    assert final == [(str(steps - 1), "1.0", True)]
    results = json.loads((tmp_path / "results.json").read_text())
    saved = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)["nmt"]["metrics"]
    for keys in (results["final_metrics"], saved):  # what placed the row is no measure of the weights
        assert not {"step", "epoch", "final_weights"} & set(keys), sorted(keys)
    (tmp_path / "results.json").unlink()  # as if killed before the final weights' validation logged its row
    with open(log, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(r for r in rows if not r.get("final_weights"))
    rerun = train(compose_train(*args, f"run_dir={tmp_path}"))
    assert rerun["epochs"] == 2  # said 1: Lightning's counter, restored in a sitting that trains nothing
    with open(log, newline="") as handle:
        again = [
            (r["step"], r["epoch"], bool(r["wall_time_s"])) for r in csv.DictReader(handle) if r.get("final_weights")
        ]
    assert again == final


def test_a_checkpoint_made_before_the_trained_epoch_was_kept_gives_it_by_the_loaders_place():
    """A sitting resumed at training's end from such a checkpoint put the final weights' row in the epoch
    before the one its last update ran in, where training stopped inside an epoch (max_steps)."""
    from types import SimpleNamespace

    from nmt.inference.checkpoint import CHECKPOINT_KEY
    from nmt.training.module import TaskModule

    for place, epoch in (((1, 40), 1), ((2, 0), 1)):  # 40 batches into epoch 1; at the start of epoch 2
        module = SimpleNamespace(guard=SimpleNamespace(bad_steps=0), trained_epoch=-1)
        loader = {"epoch": place[0], "batches_done": place[1]}
        checkpoint = {CHECKPOINT_KEY: {}, "loops": {"fit_loop": {"state_dict": {"combined_loader": [loader]}}}}
        TaskModule.on_load_checkpoint(module, checkpoint)
        assert (module.saved_data_place, module.trained_epoch) == (place, epoch)
    TaskModule.on_load_checkpoint(module, {CHECKPOINT_KEY: {"trained_epoch": 4}})  # kept since: as kept
    assert (module.saved_data_place, module.trained_epoch) == (None, 4)


def logged_rows(run_dir) -> list[tuple[str, str, bool]]:
    """(step, epoch, whether the final weights' validation) of every row of a run's CSV log."""
    with open(Path(run_dir) / "logs" / "metrics.csv", newline="") as handle:
        return [(r["step"], r["epoch"], bool(r.get("final_weights"))) for r in csv.DictReader(handle)]


def test_a_killed_run_of_the_same_settings_beside_a_new_dated_folder_is_found(tmp_path):
    """python train.py ..., killed by kill -9 (which prints nothing), then run again: without run_dir the rerun
    trained afresh in a new dated folder and said nothing of the unfinished one beside it."""
    from nmt.training.run_identity import fingerprint, unfinished_alike

    config = OmegaConf.to_container(compose_train("data=toy"), resolve=True)
    identity = fingerprint(config)
    other = fingerprint(OmegaConf.to_container(compose_train("data=toy", "seed=2"), resolve=True))

    def folder(name, record, last=True, finished=None):
        run = tmp_path / "runs" / "transformer_toy" / name
        (run / "checkpoints").mkdir(parents=True)
        (run / "fingerprint.json").write_text(json.dumps(record))
        if last:
            (run / "checkpoints" / "last.ckpt").write_bytes(b"state")
        if finished is not None:
            (run / "results.json").write_text(json.dumps({"finished": finished}))
        return run

    older = folder("2026-12-06_10-00-00", identity)
    newer = folder("2026-12-06_11-00-00", identity, finished=False)  # stopped during its final scores
    seed2 = folder("2026-12-06_12-00-00", other)  # another seed
    folder("2026-12-06_13-00-00", identity, finished=True)  # finished: nothing to continue
    folder("2026-12-06_14-00-00", identity, last=False)  # stopped before its first checkpoint
    now = tmp_path / "runs" / "transformer_toy" / "2026-12-06_15-00-00"
    now.mkdir()
    assert unfinished_alike(now, identity) == [newer, older]
    assert unfinished_alike(now, other) == [seed2]  # each command its own settings' runs


def test_a_user_error_a_check_did_not_raise_says_how_to_see_where(capsys):
    """Every ValueError ended in one line and status 2: a fault (a builtin's or a library's ValueError) read as a
    user's mistake, with no way to tell where it came from."""
    import json

    def zipped(cfg):
        for _ in zip([1, 2], [1], strict=True):
            pass

    def checked(cfg):
        raise ValueError("data.max_len=0: must be at least 1")

    def interpolated(cfg):  # the user's own config ('lr=${nothing}'), which OmegaConf raises in: no fault
        OmegaConf.select(OmegaConf.create({"lr": "${nothing}"}), "lr")

    for function, fault in (
        (zipped, True),
        (lambda cfg: json.loads("{"), True),
        (checked, False),
        (interpolated, False),
    ):
        with pytest.raises(SystemExit) as stopped:
            run_cli(function, None)
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1
        assert err.endswith(" (NMT_DEBUG=1 shows where: a fault of this program?)\n") == fault, err
    assert err == "error: lr: Interpolation key 'nothing' not found\n"  # the key, which OmegaConf said on a 2nd line


def test_sweep_inputs_that_must_pass(tmp_path):
    """Checks that refused too much would stop sweeps that work: a null option of a group (a grid may sweep a
    part's absence), and logger.name of a logger that is not W&B's (the csv logger's own folder name)."""
    from nmt.sweep.inputs import input_problem, levels_problem

    assert levels_problem({"attention": ["dot", "null"]}) is None
    assert input_problem(composed_sweep(tmp_path, ["pos=absolute,rope"], ["logger.name=mylogs"])) is None


def test_a_seed_that_is_not_a_number_is_refused_in_any_place_of_the_list(tmp_path):
    """Each cell is composed at its first seed: seed=1,true sent true (a bool, which Python counts as 1) to
    train.py, whose runs then failed one by one."""
    from nmt.sweep.plan import run_config_problem

    problem = run_config_problem(composed_sweep(tmp_path, ["seed=1,true"], ["trainer.max_steps=1"]))
    assert problem is not None and problem.startswith("seed=True: a seed is a whole number"), problem


def test_a_group_only_some_cells_cannot_use_names_those_cells_not_every_run(tmp_path):
    """model=transformer,rnn with pos=rope: the RNN's runs are refused, the Transformer's are not; said as
    "every run would be refused", the message sent the user to change the command line, not the cells."""
    from nmt.sweep.plan import run_config_problem

    problem = run_config_problem(composed_sweep(tmp_path, ["model=transformer,rnn"], ["pos=rope"]))
    assert problem.startswith("the runs of model=rnn would be refused: pos=rope: model=rnn does not use group 'pos'")
