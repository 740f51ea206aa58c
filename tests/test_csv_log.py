"""The CSV log of a run that is killed and resumed keeps the whole curve, each step once."""

import csv
from pathlib import Path

import pytest

from nmt.training.loggers import FINAL_ROW, ResumableCSVLogger

from .conftest import compose_train


def rows(run_dir) -> list[tuple[str, str, str]]:
    with open(run_dir / "logs" / "metrics.csv", newline="") as handle:
        return [(r["step"], r["train_loss"], r.get("val_bleu", "")) for r in csv.DictReader(handle)]


def first_sitting(run_dir, steps: int) -> None:
    """Logs steps 1..steps, then is killed: no save(), no finalize()."""
    logger = ResumableCSVLogger(str(run_dir), name="logs", version="")
    for step in range(1, steps + 1):
        logger.log_metrics({"train_loss": float(step)}, step=step)


def test_every_row_is_on_disk_as_soon_as_it_is_logged(tmp_path):
    first_sitting(tmp_path, steps=3)
    assert rows(tmp_path) == [("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", "")]


def test_a_resumed_log_keeps_earlier_rows_and_drops_those_it_logs_again(tmp_path):
    first_sitting(tmp_path, steps=5)  # last checkpoint after step 3: steps 4 and 5 are redone
    resumed = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    resumed.log_metrics({"train_loss": 40.0}, step=4)
    resumed.log_metrics({"val_bleu": 1.5}, step=4)  # a new column: the file is rewritten with it
    resumed.log_metrics({"train_loss": 50.0}, step=5)
    assert rows(tmp_path) == [
        ("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", ""), ("4", "40.0", ""), ("4", "", "1.5"), ("5", "50.0", "")
    ]  # fmt: skip


def test_a_row_cut_short_by_a_kill_is_dropped_and_a_damaged_log_is_named(tmp_path, capsys):
    """A half row stayed in the curve (a cut-off number read as a value); a damaged file stopped the resume on a
    bare "'utf-8' codec can't decode" or "dict contains fields not in fieldnames", naming no file."""
    first_sitting(tmp_path, steps=3)
    log = tmp_path / "logs" / "metrics.csv"
    log.write_text(log.read_text() + "4,4.")  # killed while step 4's row was appended
    resumed = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    resumed.log_metrics({"train_loss": 40.0}, step=4)
    assert rows(tmp_path) == [("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", ""), ("4", "40.0", "")]
    assert "metrics.csv: its last line was cut short (a kill while it was written); dropped: '4,4.'" in (
        capsys.readouterr().out
    )
    for damage, why in (
        (b"\xf8\x01garbage\n", "invalid UTF-8 at byte 0"),
        (b"hello world\nfoo,bar\n", "no step column in its first line"),
        (b"step,train_loss\n1,2,3,4\n", "line 2 has more fields than its header"),
        (b"step,train_loss\n1\n", "line 2 has fewer fields than its header"),
        (b"step,train_loss\nnotanumber,1\n", "line 2: step 'notanumber' is no number"),
    ):
        log.write_bytes(damage)
        with pytest.raises(ValueError) as refused:
            ResumableCSVLogger(str(tmp_path), name="logs", version="").experiment  # noqa: B018
        assert str(refused.value) == (
            f"{log}: not a readable metrics log ({why}); it is damaged: move it aside (mv {log} {log}.damaged) and "
            "rerun, and the log starts again from this sitting"
        )


def test_a_process_that_trains_nothing_redoes_the_final_weights_row_alone(tmp_path):
    """Killed after training, during the final weights' validation (logged at the last update's step, as
    training's own validation of that update): the rerun trains nothing, and its first row is that
    validation again. Training's rows of that step stay; the killed process's final row goes."""
    killed = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    for step in range(1, 6):
        killed.log_metrics({"train_loss": float(step)}, step=step)
    killed.log_metrics({"val_bleu": 2.0}, step=5)  # training validated the weights of step 5
    killed.log_metrics({"val_bleu": 3.0, FINAL_ROW: 1.0}, step=5)  # then the final weights', and was killed
    rerun = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    rerun.log_metrics({"val_bleu": 3.5, FINAL_ROW: 1.0}, step=5)
    assert rows(tmp_path) == [
        ("1", "1.0", ""), ("2", "2.0", ""), ("3", "3.0", ""), ("4", "4.0", ""), ("5", "5.0", ""), ("5", "", "2.0"),
        ("5", "", "3.5"),
    ]  # fmt: skip


def test_a_run_started_from_scratch_in_the_same_folder_starts_a_new_log(tmp_path):
    first_sitting(tmp_path, steps=5)
    again = ResumableCSVLogger(str(tmp_path), name="logs", version="")
    again.experiment.drop_rows_from(0)  # what resume.ResumeLogs does when training starts at step 0
    again.log_metrics({"train_loss": 7.0}, step=1)
    assert rows(tmp_path) == [("1", "7.0", "")]


def test_wandb_is_online_after_wandb_login_and_follows_wandb_mode(tmp_path, monkeypatch, capsys):
    from nmt.training import loggers

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setattr(loggers, "_SAID_OFFLINE", [])
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert loggers.wandb_offline("d") and loggers.wandb_offline("d")  # no credentials: offline ...
    assert capsys.readouterr().out.count("logging offline") == 1  # ... said once
    netrc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")  # what `wandb login` writes
    netrc.chmod(0o600)
    assert not loggers.wandb_offline("d")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert loggers.wandb_offline("d")
    monkeypatch.setenv("WANDB_MODE", "online")
    netrc.unlink()
    assert not loggers.wandb_offline("d")
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert not loggers.wandb_offline("d")


def test_every_sitting_of_a_run_logs_to_one_wandb_run(tmp_path, monkeypatch):
    """A killed and resumed run became two offline W&B runs, the second without the first's history."""
    from nmt.training import loggers

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = loggers.wandb_logger(save_dir=str(tmp_path))
    again = loggers.wandb_logger(save_dir=str(tmp_path))
    other = loggers.wandb_logger(save_dir=str(tmp_path / "other"))
    assert first._wandb_init["id"] == again._wandb_init["id"] == (tmp_path / "wandb_id").read_text().strip()
    assert first._wandb_init["resume"] == "allow" and other._wandb_init["id"] != first._wandb_init["id"]


def test_a_wandb_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path, monkeypatch):
    """logger.dir=<a path under a file>: W&B fell back to a /tmp/wandb that every such run shared, with three
    warnings, and the run went on."""
    from nmt.training import loggers

    monkeypatch.setenv("WANDB_MODE", "offline")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match=r"^logger.dir: cannot write .*a_file/wandb \(.*\); give a folder this user"):
        loggers.wandb_logger(save_dir=str(tmp_path / "run"), dir=str(tmp_path / "a_file"))
    assert not (tmp_path / "run").exists()


def test_the_loggers_config_leaves_out_the_model_parts_the_model_does_not_read():
    """A Transformer's W&B config held attention=multiplicative, the RNN's attention it never reads: grouped
    by config, runs read as differing (or agreeing) in a setting they do not have."""
    from nmt.training.run_description import logged_config

    transformer = logged_config(compose_train("data=toy"))
    assert "attention" not in transformer and {"pos", "norm", "model"} <= set(transformer)
    rnn = logged_config(compose_train("data=toy", "model=rnn"))
    assert "pos" not in rnn and "norm" not in rnn and rnn["attention"]["_target_"].endswith("Attention")
    # the run's own config, as config.yaml holds it (its run_dir filled in: null in the composed config)
    cfg = compose_train("data=toy")
    assert logged_config(cfg, {"run_dir": "runs/x", "attention": {}, "pos": {}}) == {"run_dir": "runs/x", "pos": {}}


def test_only_the_process_that_owns_the_folder_makes_its_wandb_id(tmp_path, monkeypatch):
    """Under DDP every process built the logger: each would have written its own id, racing."""
    from nmt.training import loggers

    monkeypatch.setenv("LOCAL_RANK", "1")
    assert loggers.wandb_run_id(tmp_path) is None and not (tmp_path / "wandb_id").exists()
    monkeypatch.setenv("LOCAL_RANK", "0")
    made = loggers.wandb_run_id(tmp_path)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert loggers.wandb_run_id(tmp_path) == made  # read, once there


def tensorboard_scalars(log_dir, tag: str = "train_loss") -> list[tuple[int, float]]:
    """What TensorBoard itself shows of ``tag`` (its own reader, which hides purged steps), checked the same
    by the reader of its server's --load_fast=false and of tbparse, which takes the first restart mark it
    reads for the run's start (the redone steps of a first resume showed twice there)."""
    from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
    from tensorboard.util import tensor_util

    events = event_accumulator.EventAccumulator(str(log_dir), purge_orphaned_data=True)
    events.Reload()
    shown = [(e.step, e.value) for e in events.Scalars(tag)]
    served = plugin_event_accumulator.EventAccumulator(str(log_dir))
    served.Reload()
    assert [(e.step, tensor_util.make_ndarray(e.tensor_proto).item()) for e in served.Tensors(tag)] == shown
    return shown


def tensorboard_tags(log_dir) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return events.Tags()["scalars"]


def test_the_final_scores_reach_tensorboard_and_wandb_and_each_heatmap_is_its_own_image(tmp_path):
    """TensorBoard showed no final score (and -1 as hp_metric); W&B took the heatmaps of every layer and of
    their mean as one list of images of unlike sizes, which its page draws wrongly."""
    from types import SimpleNamespace

    from lightning.pytorch.loggers import WandbLogger

    from nmt.training.loggers import ResumableTensorBoardLogger, log_results

    class RecordedWandb(WandbLogger):
        def __init__(self) -> None:
            self.summary, self.images = {}, []

        @property
        def experiment(self):
            return SimpleNamespace(summary=self.summary)

        def log_image(self, key, images, **kwargs) -> None:
            self.images.append((key, images, kwargs))

    maps = [str(tmp_path / "sentence0_layers.png"), str(tmp_path / "sentence0_mean.png")]
    results = {
        "steps": 120,
        "test": {
            "bleu": 31.5,
            "chrf": 55.0,
            "attention_maps": maps,
            "sentences": 20,
            "length_ratio": 0.98,
            "tokens": 9,
        },
        "val_as_test": {"bleu": 33.0, "max_input_len": 256},
    }
    board = ResumableTensorBoardLogger(str(tmp_path), name="tensorboard", version="")
    wandb = RecordedWandb()
    log_results([board, wandb], results, {"pos": "rope", "seed": 2})
    board.experiment.flush()
    assert tensorboard_scalars(tmp_path / "tensorboard", "test_bleu") == [(119, 31.5)]  # the last validation's step
    # the HPARAMS view (empty before: Lightning writes its record only with metrics): the run's choices and seed,
    # and the final scores' names, whose values the view reads from the scalars above
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()

    def plugin_data(tag: str):
        return HParamsPluginData.FromString(events.SummaryMetadata(tag).plugin_data.content)

    # no experiment record of its own: TensorBoard takes the first run's of a sweep for the table's columns (the
    # keys of other runs' level settings were left out); without one it makes them of every run's
    assert "_hparams_/experiment" not in events.Tags()["tensors"] + list(events.summary_metadata)
    session = plugin_data("_hparams_/session_start_info").session_start_info.hparams
    assert (session["pos"].string_value, session["seed"].number_value) == ("rope", 2)
    assert tensorboard_scalars(tmp_path / "tensorboard", "val_as_test_bleu") == [(119, 33.0)]
    # the set's size and the output's length are no scores: no curve or column of them (W&B's summary keeps them)
    assert sorted(tensorboard_tags(tmp_path / "tensorboard")) == ["test_bleu", "test_chrf", "val_as_test_bleu"]
    assert wandb.summary["test_sentences"] == 20 and wandb.summary["val_as_test_max_input_len"] == 256
    assert wandb.summary["test_tokens"] == 9  # a language model's scored tokens: no score either
    assert {
        "test_bleu": 31.5,
        "test_chrf": 55.0,
        "val_as_test_bleu": 33.0,
        "steps": 120,
    }.items() <= wandb.summary.items()
    assert wandb.images == [
        ("test_attention/sentence0_layers", [maps[0]], {"caption": ["sentence0_layers"]}),
        ("test_attention/sentence0_mean", [maps[1]], {"caption": ["sentence0_mean"]}),
    ]


def test_a_runs_table_row_holds_the_settings_its_command_line_gave_by_key():
    """A reviewer's trial: a sweep of model.dropout=0.0,0.3 showed in TensorBoard's HPARAMS table as runs alike
    but for their seed (the row held group options alone), and a level's settings (a tuned rate) not at all."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    from nmt.training.run_description import run_params

    CONF = Path(__file__).resolve().parents[1] / "conf"
    overrides = ["data=toy", "model=rnn", "model.dropout=0.3", "+optim.optimizer.amsgrad=true", "seed=7"]
    overrides += ["optim.optimizer.betas=[0.9,0.98]", "run_dir=/x", "tags=[a]", "logger.name=x", "hydra.verbose=false"]
    overrides += ["~optim.optimizer.weight_decay", "threads=1"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # as train.py's @hydra.main leaves it
    try:
        with open_dict(cfg):
            del cfg["hydra"]
        params = run_params(cfg)
    finally:
        HydraConfig.instance().cfg = None
    assert params["model"] == "rnn" and params["data"] == "toy" and params["seed"] == 7
    # the keys given, as the run read them (typed; a list as text), where a run is written and named left out
    assert params["model.dropout"] == 0.3 and params["optim.optimizer.amsgrad"] is True
    assert params["optim.optimizer.betas"] == "[0.9, 0.98]"
    # an RNN reads no pos; a key deleted has no value (its column read as null); a machine's threads are no setting
    assert not {"run_dir", "tags", "logger.name", "hydra.verbose", "pos", "norm", "threads"} & set(params)
    assert "optim.optimizer.weight_decay" not in params


def tensorboard_sitting(logger_class, run_dir, steps, resumed: bool = False, from_scratch: bool = False):
    logger = logger_class(str(run_dir), name="tensorboard", version="")
    if resumed:
        logger.purge_at_next_log = True  # what resume.ResumeLogs does when a resumed run starts training
    if from_scratch:
        logger.drop_earlier()  # ... and when a run starts from step 0
    for step in steps:
        logger.log_metrics({"train_loss": float(step * (10 if resumed else 1))}, step=step)
    logger.experiment.flush()  # a killed process: no finalize()
    return logger


def test_tensorboard_shows_each_step_of_a_resumed_run_once(tmp_path, monkeypatch):
    """Steps 4 and 5 were logged after the last checkpoint, then redone by the resumed sitting: TensorBoard
    showed both copies (Lightning's logger); it now shows the resumed sitting's. The event files' counter
    starts at 9 here: a second sitting's file opened in the same second as the first's, numbered 10, would
    sort (and be read) before it, and purge nothing."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.summary.writer import event_file_writer

    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(9))

    from nmt.training.loggers import ResumableTensorBoardLogger

    for logger_class, expected in [  # ours first: its two files are numbered 9 and 10
        (ResumableTensorBoardLogger, [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]),
        (TensorBoardLogger, [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (4, 40.0), (5, 5.0), (5, 50.0), (6, 60.0)]),
    ]:
        run_dir = tmp_path / logger_class.__name__
        ours = logger_class is ResumableTensorBoardLogger
        tensorboard_sitting(logger_class, run_dir, range(1, 6), from_scratch=ours)  # as a run's first sitting
        tensorboard_sitting(logger_class, run_dir, range(4, 7), resumed=True)
        shown = tensorboard_scalars(run_dir / "tensorboard")
        assert (shown if logger_class is ResumableTensorBoardLogger else sorted(shown)) == expected, logger_class


def test_tensorboard_of_a_run_started_from_scratch_in_the_same_folder_starts_anew(tmp_path):
    from nmt.training.loggers import ResumableTensorBoardLogger

    tensorboard_sitting(ResumableTensorBoardLogger, tmp_path, range(1, 6))
    first = ResumableTensorBoardLogger(str(tmp_path), name="tensorboard", version="")
    first.log_hyperparams({"lr": 0.1})
    first.save()
    again = ResumableTensorBoardLogger(str(tmp_path), name="tensorboard", version="")
    again.log_hyperparams({"lr": 0.2})  # before training starts, as Lightning does: kept
    again.drop_earlier()
    # written as training starts, not at the end alone: a run killed before its end had none
    assert "lr: 0.2" in (tmp_path / "tensorboard" / "hparams.yaml").read_text()
    again.log_metrics({"train_loss": 7.0}, step=1)
    again.save()
    again.experiment.flush()
    assert tensorboard_scalars(tmp_path / "tensorboard") == [(1, 7.0)]
    assert "hp_metric" not in tensorboard_tags(tmp_path / "tensorboard")  # Lightning's placeholder, never filled in
    assert "lr: 0.2" in (tmp_path / "tensorboard" / "hparams.yaml").read_text()  # not the earlier run's


def test_the_final_weights_row_mark_is_in_the_csv_log_only(tmp_path, monkeypatch):
    """FINAL_ROW places the final weights' validation in metrics.csv for a resumed run; TensorBoard and W&B
    drew it as a chart of one point."""
    from lightning.pytorch.loggers import WandbLogger

    from nmt.training.loggers import ChartedWandbLogger, ResumableTensorBoardLogger

    row = {"val_bleu": 3.0, FINAL_ROW: 1.0}
    board = ResumableTensorBoardLogger(str(tmp_path), name="tensorboard", version="")
    board.log_metrics(row, step=5)
    board.experiment.flush()
    assert tensorboard_tags(tmp_path / "tensorboard") == ["val_bleu"]
    sent = []
    monkeypatch.setattr(WandbLogger, "log_metrics", lambda self, metrics, step=None: sent.append(metrics))
    ChartedWandbLogger.log_metrics(object.__new__(ChartedWandbLogger), row, step=5)
    assert sent == [{"val_bleu": 3.0}]
    csv_log = ResumableCSVLogger(str(tmp_path), name="csv", version="")
    csv_log.log_metrics(row, step=5)
    assert FINAL_ROW in (Path(csv_log.log_dir) / "metrics.csv").read_text()


def test_a_validations_rows_are_at_its_update_not_at_its_batch_index(tmp_path):
    """Lightning's throughput monitor logged each validation's rate at the validation's own batch index as the
    step: rows at steps 1, 2, 3 straight after update 5's, out of order in metrics.csv."""
    from nmt.training.train import train

    quick = ["trainer.max_epochs=2", "trainer.log_every_n_steps=1", "data.eval_max_tokens=60", "threads=1"]
    train(compose_train(*quick, "test_after_training=false", "val_after_training=false", f"run_dir={tmp_path}"))
    with open(tmp_path / "logs" / "metrics.csv", newline="") as handle:
        logged = list(csv.DictReader(handle))
    assert not [key for key in logged[0] if key.startswith("validate/")]
    steps = [int(row["step"]) for row in logged if row["step"]]
    assert steps == sorted(steps) and any(row.get("val_loss") for row in logged)
