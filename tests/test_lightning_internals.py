"""The Lightning internals the training code reaches into, checked on the Lightning installed: the project
allows any lightning 2.x, and a release that renamed one of these would otherwise show as a run that stops
saving on a signal, logs no throughput or resumes at another place in the data, not as an error. A failure
here names the attribute and the module that reads it."""

import inspect

import lightning as L
import pytest
from lightning.fabric.loggers.csv_logs import _ExperimentWriter as FabricWriter
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


@pytest.fixture(scope="module")
def trainer():
    return L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, max_steps=1)


@pytest.mark.parametrize(
    ("path", "reader"),
    [
        ("_logger_connector.should_update_logs", "nmt/training/timing.py, update_scalars.py"),
        ("_logger_connector.log_metrics", "nmt/training/timing.py"),
        ("_accelerator_connector.cluster_environment", "nmt/training/stopping.py"),
        ("_signal_connector.received_sigterm", "nmt/training/stopping.py (SaveOnSignal)"),
        ("fit_loop._can_stop_early", "nmt/training/stopping.py"),
        ("fit_loop._data_fetcher", "nmt/training/checkpoints.py"),
        ("fit_loop.epoch_loop._should_check_val_fx", "nmt/training/checkpoints.py"),
        ("fit_loop.epoch_loop._batches_that_stepped", "nmt/training/stopping.py"),
    ],
)
def test_the_trainer_attributes_the_training_code_reads_exist(trainer, path, reader):
    node = trainer
    for name in path.split("."):
        assert hasattr(node, name), f"Lightning {L.__version__}: Trainer.{path} is gone; {reader} reads it"
        node = getattr(node, name)


def test_the_methods_the_training_code_overrides_are_still_called_by_lightning():
    # the CSV writer's check of an existing log, where a resumed run keeps its rows (training/loggers.py)
    assert "_check_log_dir_exists" in inspect.getsource(FabricWriter.__init__), L.__version__
    assert issubclass(ExperimentWriter, FabricWriter)
    # the throughput monitor's logging step, which adds the earlier sittings' totals (training/timing.py)
    assert any("self._compute(" in inspect.getsource(hook) for _, hook in inspect.getmembers(ThroughputMonitor,
               inspect.isfunction)), L.__version__  # fmt: skip
    assert "iter_num" in inspect.signature(ThroughputMonitor._compute).parameters
