"""graph_updates=true: each whole update (forward, loss, backward, guard, optimiser step) one CUDA graph
replay per batch shape. Checked on the CPU with a stand-in for the recording that runs the recorded
update on the recording's input tensors: the first batch of each shape updates eagerly and is recorded,
later ones are copied in and replayed, and the run ends as the run whose updates Lightning makes. Only
recording itself needs a GPU (the GPU benchmark times it)."""

import pytest
import torch

from nmt.tasks.translation import TranslationTask
from nmt.training import graph_updates
from nmt.training.graph_updates import Recording
from nmt.training.module import TaskModule

from .conftest import NO_FINAL_SCORES, compose_train


class ReplayedOnTheCpu:
    """A recording's stand-in: replaying runs the update on the recording's inputs and writes its outputs
    into the recording's output tensors, as a graph's replay would."""

    def __init__(self, step, inputs):
        self.step, self.inputs, self.replays = step, inputs, 0
        self.outputs = (
            torch.zeros(()),
            torch.zeros((), dtype=torch.long),
            torch.zeros(()),
            torch.zeros((), dtype=torch.bool),
        )

    def replay(self):
        self.replays += 1
        for static, value in zip(self.outputs, self.step(self.inputs), strict=True):
            static.copy_(value)


def on_the_cpu(monkeypatch) -> list[ReplayedOnTheCpu]:
    recordings: list[ReplayedOnTheCpu] = []

    def recorder(step, inputs, stream, pool):
        assert stream is None and pool is None  # no side stream and no pool off a GPU
        graph = ReplayedOnTheCpu(step, inputs)
        recordings.append(graph)
        return Recording(graph, inputs, graph.outputs)

    monkeypatch.setattr(graph_updates, "record", recorder)
    return recordings


@pytest.mark.slow
def test_a_run_of_replayed_updates_ends_as_the_run_lightning_updates(monkeypatch, tmp_path, capsys):
    """Two toy runs with the deferred guard and a NaN loss in the third batch, one with graph_updates: the
    same weights, optimiser state, schedule, step count and skipped update; every shape recorded once after
    its first (eager) update, and replayed for its later batches."""
    from nmt.training.train import train

    recordings = on_the_cpu(monkeypatch)
    real_loss = TranslationTask.training_loss
    calls: list[int] = []

    def third_batch_nan(self, model, loss, batch):
        value, tokens = real_loss(self, model, loss, batch)
        calls.append(1)
        return (value * float("nan") if len(calls) == 3 else value), tokens

    monkeypatch.setattr(TranslationTask, "training_loss", third_batch_nan)
    real_configure = TaskModule.configure_optimizers

    def rate_on_the_device(self):
        """The Lightning-updated run with the graphed run's rate, a float32 tensor: a Python number rounds
        otherwise in the optimiser's arithmetic, and the noise that is the whole gradient of an attention
        key's bias (the softmax ignores it) then turns either way under Adam's normalisation."""
        factory = self.optimizer_factory

        def made(params):
            optimizer = factory(params)
            graph_updates.learning_rates_on_device(optimizer, self.device, capturable=False)
            return optimizer

        if not self.graph_updates:
            self.optimizer_factory = made
        return real_configure(self)

    monkeypatch.setattr(TaskModule, "configure_optimizers", rate_on_the_device)
    ends = {}
    for graphed in (False, True):
        calls.clear()
        run_dir = tmp_path / str(graphed)
        cfg = compose_train(
            "optim.optimizer.fused=true",
            "check_every=4",
            "trainer.gradient_clip_val=0.5",  # clipped, in the graph as Lightning clips
            f"graph_updates={str(graphed).lower()}",
            "trainer.max_epochs=3",
            "validation.bleu_every_n_epochs=0",
            "checkpoint.monitor=val_loss",
            "checkpoint.mode=min",
            "early_stopping.monitor=val_loss",
            "early_stopping.mode=min",
            *NO_FINAL_SCORES,
            f"run_dir={run_dir}",
        )
        torch.manual_seed(0)
        train(cfg)
        ends[graphed] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    eager, graphed = ends[False], ends[True]
    assert capsys.readouterr().out.count("1 update(s) with a non-finite loss or gradient skipped") == 2
    steps = graphed["global_step"]
    assert steps == eager["global_step"] > 10
    replays = sum(r.replays for r in recordings)
    assert len(recordings) + replays == steps and replays > 0  # each shape: one eager update, then replays
    assert len({tuple(r.inputs["src"].shape) + tuple(r.inputs["tgt_in"].shape) for r in recordings}) == len(recordings)
    assert graphed["lr_schedulers"] == eager["lr_schedulers"]
    for k, v in eager["state_dict"].items():
        assert torch.equal(graphed["state_dict"][k], v), k
    (state_eager,), (state_graphed,) = eager["optimizer_states"], graphed["optimizer_states"]
    for index, values in state_eager["state"].items():
        for name, value in values.items():
            assert torch.equal(state_graphed["state"][index][name], value), (index, name)
    rate = state_graphed["param_groups"][0]["lr"]  # a tensor the schedule filled in place
    assert isinstance(rate, torch.Tensor) and torch.equal(rate, state_eager["param_groups"][0]["lr"])


def test_graph_updates_are_refused_where_an_update_cannot_be_one_recording():
    from nmt.training.config import ConfigError, check_config

    ok = (
        "graph_updates=true",
        "optim.optimizer.fused=true",
        "check_every=50",
        "trainer.accelerator=gpu",
    )
    check_config(compose_train(*ok))
    cases = {
        ("check_every=1",): "set check_every",
        ("optim.optimizer.fused=false",): "set optim.optimizer.fused=true",
        ("trainer.accumulate_grad_batches=2",): "set trainer.accumulate_grad_batches=1",
        ("trainer.precision=16-mixed",): "precision=16-mixed has a loss scaler",
        ("compile=reduce-overhead",): "cannot hold compile=reduce-overhead's: use compile=true",
        ("trainer.devices=2",): "trains on one device",
        ("trainer.accelerator=cpu",): "records CUDA graphs: train on a GPU",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError, match=message.replace("=", r"=").replace("(", r"\(")):
            check_config(compose_train(*ok, *overrides))


def test_a_recording_that_fails_names_the_batch_and_what_to_do(monkeypatch):
    """The batch's own update is made (eagerly) before the recording; a recording that fails stops the run
    with the batch's shapes and the way out, not a bare CUDA error."""

    def fails(step, inputs, stream, pool):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore")

    made = []
    param = torch.nn.Parameter(torch.zeros(2))

    def step(batch):
        made.append(batch["src"].shape)
        return torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros(()), torch.zeros((), dtype=torch.bool)

    monkeypatch.setattr(graph_updates, "record", fails)
    updates = graph_updates.GraphedUpdates(step, [param])
    with pytest.raises(
        RuntimeError, match=r"batch of src \(3, 5\) could not be recorded.*not permitted.*graph_updates=false"
    ):
        updates.update({"src": torch.zeros(3, 5, dtype=torch.long), "refs": ["a", "b", "c"]})
    assert made == [(3, 5)]


def test_a_model_that_does_not_say_its_step_can_be_recorded_is_refused(monkeypatch, tmp_path):
    """The RNN's teacher-forcing schedule is a Python number read from the device: recorded, it would stay
    frozen. A model is recorded only where it declares ``replayable_updates``."""
    from nmt.training.train import train

    on_the_cpu(monkeypatch)
    cfg = compose_train(
        "model=rnn",
        "optim.optimizer.fused=true",
        "check_every=4",
        "graph_updates=true",
        *NO_FINAL_SCORES,
        f"run_dir={tmp_path}",
    )
    with pytest.raises(ValueError, match="RNNSeq2Seq does not say its training step can be recorded"):
        train(cfg)


@pytest.mark.slow
def test_a_fused_optimiser_clips_under_bf16_mixed(tmp_path):
    """Lightning refuses to clip for a fused optimiser under any mixed precision (under 16-mixed it would clip
    scaled gradients); under bf16-mixed there is no scaler, and the recipes that clip (the default) with the
    deferred guard (check_every > 1, fused) must train, on a GPU as here."""
    from nmt.training.train import train

    cfg = compose_train(
        "optim.optimizer.fused=true",
        "check_every=4",
        "trainer.precision=bf16-mixed",
        "trainer.gradient_clip_val=0.5",
        "trainer.max_steps=3",
        *NO_FINAL_SCORES,
        f"run_dir={tmp_path}",
    )
    train(cfg)
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3


@pytest.mark.parametrize("algorithm", ["norm", "value"])
def test_clipping_without_a_loss_scaler_is_torchs(algorithm):
    from types import SimpleNamespace

    g = torch.Generator().manual_seed(2)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (3, 7)]
    grads = [3 * torch.randn(p.shape, generator=g) for p in params]
    expected = [x.clone() for x in grads]
    clip = torch.nn.utils.clip_grad_value_ if algorithm == "value" else torch.nn.utils.clip_grad_norm_
    for p, x in zip(params, grads, strict=True):
        p.grad = x.clone()
    reference = [torch.nn.Parameter(torch.zeros(p.shape)) for p in params]
    for p, x in zip(reference, expected, strict=True):
        p.grad = x
    clip(reference, 0.5)
    optimizer = torch.optim.AdamW(params, fused=True)
    TaskModule.configure_gradient_clipping(SimpleNamespace(_grad_scaler=lambda: None), optimizer, 0.5, algorithm)
    for p, r in zip(params, reference, strict=True):
        assert torch.equal(p.grad, r.grad)
