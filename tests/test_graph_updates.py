"""graph_updates=true: each whole update (forward, loss, backward, guard, optimiser step) one CUDA graph
replay per batch shape. Checked on the CPU with a stand-in for the recording that runs the recorded
update on the recording's input tensors: the first batch of each shape updates eagerly and is recorded,
later ones are copied in and replayed, and the run ends as the run whose updates Lightning makes. Only
recording itself needs a GPU (the GPU benchmark times it)."""

import contextlib
import itertools
from types import SimpleNamespace

import pytest
import torch

from nmt.training import graph_updates
from nmt.training.graph_updates import Recording
from nmt.training.module import TaskModule

from .conftest import NO_FINAL_SCORES, compose_train, nan_loss_in_batch


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


def lightning_and_graphed_runs(tmp_path, *overrides: str, before_each=None) -> tuple[dict, dict]:
    """Two toy runs from the same seed, their updates made by Lightning and replayed as graphs: fused AdamW,
    the deferred guard, clipping (in the graph as Lightning clips), 3 epochs; their last checkpoints."""
    from nmt.training.train import train

    ends = {}
    for graphed in (False, True):
        if before_each is not None:
            before_each()
        run_dir = tmp_path / str(graphed)
        cfg = compose_train(
            "optim.optimizer.fused=true",
            "check_every=4",
            "trainer.gradient_clip_val=0.5",
            f"graph_updates={str(graphed).lower()}",
            "trainer.max_epochs=3",
            "validation.bleu_every_n_epochs=0",
            "checkpoint.monitor=val_loss",
            "checkpoint.mode=min",
            "early_stopping.monitor=val_loss",
            "early_stopping.mode=min",
            *NO_FINAL_SCORES,
            *overrides,
            f"run_dir={run_dir}",
        )
        torch.manual_seed(0)
        train(cfg)
        ends[graphed] = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    return ends[False], ends[True]


def lightning_runs_with_a_tensor_rate(monkeypatch, capturable: bool) -> None:
    """The Lightning-updated run with the graphed run's rate, a float32 tensor: a Python number rounds
    otherwise in the optimiser's arithmetic, and the noise that is the whole gradient of an attention
    key's bias (the softmax ignores it) then turns either way under Adam's normalisation."""
    real_configure = TaskModule.configure_optimizers

    def rate_on_the_device(self):
        factory = self.optimizer_factory

        def made(params):
            optimizer = factory(params)
            graph_updates.learning_rates_on_device(optimizer, self.device, capturable=capturable)
            return optimizer

        if not self.graph_updates:
            self.optimizer_factory = made
        return real_configure(self)

    monkeypatch.setattr(TaskModule, "configure_optimizers", rate_on_the_device)


@pytest.mark.slow
def test_a_run_of_replayed_updates_ends_as_the_run_lightning_updates(monkeypatch, tmp_path, capsys):
    """Two toy runs with the deferred guard and a NaN loss in the third batch, one with graph_updates: the
    same weights, optimiser state, schedule, step count and skipped update; every shape recorded once after
    its first (eager) update, and replayed for its later batches."""

    recordings = on_the_cpu(monkeypatch)
    calls = nan_loss_in_batch(monkeypatch, 3)

    lightning_runs_with_a_tensor_rate(monkeypatch, capturable=False)
    eager, graphed = lightning_and_graphed_runs(tmp_path, before_each=calls.clear)
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
    if not torch.cuda.is_available():  # auto chooses the CPU here: refused before the data is read, not once trained
        cases[("trainer.accelerator=auto",)] = (
            "this machine has no CUDA GPU (trainer.accelerator=auto trains without one"
        )
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


def test_a_recording_out_of_memory_names_the_batch_size_as_a_way_out(monkeypatch):
    """Out of memory while recording (the eager warm-up's blocks stay cached beside the recording's pool): the
    message offers a smaller batch as well as leaving the recordings off."""

    def fails(step, inputs, stream, pool):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    param = torch.nn.Parameter(torch.zeros(2))

    def step(batch):
        return torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros(()), torch.zeros((), dtype=torch.bool)

    monkeypatch.setattr(graph_updates, "record", fails)
    updates = graph_updates.GraphedUpdates(step, [param])
    with pytest.raises(
        RuntimeError,
        match=r"out of memory.*smaller batches \(data\.max_tokens, or data\.batch_size .*graph_updates=false",
    ):
        updates.update({"src": torch.zeros(3, 5, dtype=torch.long)})


def test_optimiser_state_made_inside_a_recording_is_refused(monkeypatch):
    """Adam makes a weight's state the first time it has a gradient. Made inside a recording, that state would
    be made again at each replay (moments and step count restarting every update), so it is refused."""
    always, sometimes = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.AdamW([always, sometimes], lr=0.1)
    calls = []

    def step(batch):  # the second call (the recording) also reaches a weight the eager update did not
        calls.append(1)
        loss = (always * batch["src"]).sum() + (sometimes.sum() if len(calls) > 1 else 0)
        loss.backward()
        optimizer.step()
        return loss.detach(), torch.zeros((), dtype=torch.long), torch.zeros(()), torch.zeros((), dtype=torch.bool)

    def records_by_running(step, inputs, stream, pool):  # a capture runs the update once
        return Recording(None, inputs, step(inputs))

    monkeypatch.setattr(graph_updates, "record", records_by_running)
    updates = graph_updates.GraphedUpdates(step, [always, sometimes], optimizer)
    with pytest.raises(RuntimeError, match=r"optimiser state was created inside the recording.*graph_updates=false"):
        updates.update({"src": torch.ones(2)})
    assert len(calls) == 2 and len(optimizer.state) == 2


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


class CudaStandIn:
    """torch.cuda's streams, graphs and pools as plain objects that note how they are used, so that the
    GPU path of GraphedUpdates (side stream, pool, recording, replay) runs on the CPU."""

    def __init__(self, monkeypatch):
        self.streams, self.pools, self.captures, self.ended, self.replays = [], [], [], 0, 0
        self.current = ["default"]
        book = self

        class Stream:
            def __init__(self):
                book.streams.append(self)

            def wait_stream(self, other):
                pass

        class Graph:
            def capture_begin(self, pool, capture_error_mode):
                assert capture_error_mode == "thread_local"
                book.captures.append((pool, book.current[-1]))

            def capture_end(self):
                book.ended += 1

            def replay(self):
                book.replays += 1

        @contextlib.contextmanager
        def stream(s):
            book.current.append(s)
            try:
                yield
            finally:
                book.current.pop()

        def handle():
            book.pools.append(object())
            return book.pools[-1]

        for name, value in {
            "Stream": Stream,
            "CUDAGraph": Graph,
            "stream": stream,
            "graph_pool_handle": handle,
            "current_stream": lambda: SimpleNamespace(wait_stream=lambda other: None),
            "synchronize": lambda: None,
        }.items():
            monkeypatch.setattr(torch.cuda, name, value)


def gpu_like_param():
    return SimpleNamespace(is_cuda=True, grad=None)


def test_a_runs_recordings_share_its_one_stream_and_pool_and_later_batches_replay(monkeypatch):
    """On a GPU: each new shape's eager update and recording on the run's one side stream, into its one pool
    (the allocator reuses a freed block on its own stream only); a known shape copies its batch into the
    recording's inputs and replays."""
    cuda = CudaStandIn(monkeypatch)
    steps = []

    def step(batch):
        steps.append((batch["src"].shape, cuda.current[-1]))
        return torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros(()), torch.zeros((), dtype=torch.bool)

    updates = graph_updates.GraphedUpdates(step, [gpu_like_param()])
    (side,) = cuda.streams
    first, second = {"src": torch.ones(2, 3)}, {"src": torch.ones(4, 5)}
    updates.update(first)
    updates.update(second)
    again = {"src": torch.full((2, 3), 7.0)}
    updates.update(again)
    assert len(cuda.streams) == 1 and len(cuda.pools) == 1
    # the eager update and the recording of each new shape on the side stream, both recordings in the pool
    assert steps == [((2, 3), side), ((2, 3), side), ((4, 5), side), ((4, 5), side)]
    assert cuda.captures == [(cuda.pools[0], side)] * 2 and cuda.ended == 2
    assert cuda.replays == 1 and updates.replays == 1 and updates.eager_updates == 2
    recorded = updates.recordings[graph_updates.shape_of(first)]
    assert torch.equal(recorded.inputs["src"], again["src"])  # the batch copied into the recording's inputs


def test_a_recording_that_fails_inside_ends_it_and_raises_its_own_error(monkeypatch):
    """A recording that fails inside (an operation the recording does not allow) is ended, and the run stops
    on that error, not on the one ending a broken recording gives ("a previous error during capture")."""
    cuda = CudaStandIn(monkeypatch)
    calls = []

    def step(batch):
        calls.append(cuda.current[-1])
        if len(calls) == 2:  # the recording's run (the first was the eager update)
            raise RuntimeError("operation not permitted when stream is capturing")
        return torch.zeros(()), torch.zeros((), dtype=torch.long), torch.zeros(()), torch.zeros((), dtype=torch.bool)

    real_end = torch.cuda.CUDAGraph.capture_end

    def broken_end(self):
        real_end(self)
        raise RuntimeError("a previous error during capture")

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", broken_end)
    updates = graph_updates.GraphedUpdates(step, [gpu_like_param()])
    with pytest.raises(
        RuntimeError, match=r"could not be recorded .*\(operation not permitted when stream is capturing\)"
    ):
        updates.update({"src": torch.ones(2, 3)})
    assert cuda.ended == 1 and cuda.current == ["default"]  # the recording ended, the stream left


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="records real CUDA graphs: needs a GPU")


@CUDA
@pytest.mark.parametrize("compiled", ["false", "layers"])
def test_on_a_gpu_replayed_updates_train_as_lightnings(monkeypatch, tmp_path, compiled):
    """The real recordings on a GPU (bf16-mixed, no dropout, clipping): the run ends where the run Lightning
    updates ends, within the rounding of kernels that add in their own order; every shape recorded once.
    Also with each layer compiled (``compile=layers``, both runs): Inductor's kernels inside the recording,
    compiled by each shape's eager update before it is recorded."""

    recorded = []
    real_record = graph_updates.record

    def counted(step, inputs, stream, pool):
        recorded.append(tuple(tuple(t.shape) for t in inputs.values()))
        return real_record(step, inputs, stream, pool)

    monkeypatch.setattr(graph_updates, "record", counted)
    lightning_runs_with_a_tensor_rate(monkeypatch, capturable=True)
    starts = []
    real_start = TaskModule.on_train_start

    def noted(self):
        starts.append({k: v.detach().float().clone() for k, v in self.state_dict().items()})
        return real_start(self)

    monkeypatch.setattr(TaskModule, "on_train_start", noted)
    eager, graphed = lightning_and_graphed_runs(
        tmp_path,
        "trainer=gpu",
        "trainer.accelerator=gpu",  # after the test runs' CPU
        "warmup=1",  # at the full rate from the start: the weights move far, so a wrong update shows
        "model.dropout=0.0",
        f"compile={compiled}",
    )
    assert graphed["global_step"] == eager["global_step"] > 10
    assert recorded and len(set(recorded)) == len(recorded) < graphed["global_step"]  # later batches replayed
    start = starts[0]
    assert all(torch.equal(start[k], starts[1][k]) for k in start)  # both runs start from the same weights
    for name, value in eager["state_dict"].items():
        if name.endswith("k_proj.bias"):  # its gradient is rounding noise, which Adam scales to full steps
            continue
        value = value.float().cpu()  # the runs' weights and the start's may lie on different devices
        moved = (value - start[name].cpu()).norm()  # how far the run took this weight
        difference = (graphed["state_dict"][name].float().cpu() - value).norm()
        assert difference <= 0.02 * moved + 1e-6, (name, difference.item(), moved.item())
    print(f"\nmemory reserved after both runs: {torch.cuda.memory_reserved() / 2**20:.0f} MiB")


@CUDA
def test_on_a_gpu_each_replay_draws_new_dropout_masks():
    weight = torch.nn.Parameter(torch.ones(4096, device="cuda"))
    optimizer = torch.optim.AdamW([weight], lr=torch.tensor(0.0, device="cuda"), fused=True, capturable=True)

    def step(batch):
        loss = torch.nn.functional.dropout(weight * batch["src"], 0.5).sum()
        loss.backward()
        optimizer.step()
        none = torch.zeros((), device="cuda")
        return loss.detach(), none.long(), none, none.bool()

    updates = graph_updates.GraphedUpdates(step, [weight], optimizer)
    batch = {"src": torch.rand(4096, device="cuda")}  # random values: two masks give the same sum only if equal
    losses = [updates.update(batch)[0].item() for _ in range(4)]  # one eager update, then three replays
    assert updates.replays == 3
    assert len(set(losses)) == 4, losses  # a mask fixed at recording would repeat its sum


@CUDA
def test_on_a_gpu_compiled_dropout_draws_new_masks_at_each_replay():
    """Inductor's dropout (compile=layers or true) takes its seeds from the generator at each call: inside
    a recording that draw must be replayed anew, not the seeds of the moment of recording frozen."""
    layer = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).cuda()
    layer.compile(dynamic=True)
    params = list(layer.parameters())
    optimizer = torch.optim.AdamW(params, lr=torch.tensor(0.0, device="cuda"), fused=True, capturable=True)

    def step(batch):
        loss = layer(batch["src"]).sum()
        loss.backward()
        optimizer.step()
        none = torch.zeros((), device="cuda")
        return loss.detach(), none.long(), none, none.bool()

    updates = graph_updates.GraphedUpdates(step, params, optimizer)
    batch = {"src": torch.rand(256, 64, device="cuda")}
    losses = [updates.update(batch)[0].item() for _ in range(4)]  # one eager update (the compile), 3 replays
    assert updates.replays == 3
    assert len(set(losses)) == 4, losses  # the rate is 0: only the masks can change the sum


@CUDA
def test_on_a_gpu_replays_read_the_weights_as_they_are_now_under_autocast():
    """Under autocast with its cast cache on, the eager update and the recording share one region: a
    recording that reused the eager update's bf16 casts would train every replay on the weights of before
    that update. Each replay's loss must be the loss of the weights at that moment."""
    model = torch.nn.Linear(64, 64, device="cuda")
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=torch.tensor(0.05, device="cuda"), fused=True, capturable=True)

    def loss_now(batch):
        return model(batch["src"]).float().pow(2).mean()

    def step(batch):
        loss = loss_now(batch)
        with torch.autocast("cuda", enabled=False):
            loss.backward()
            optimizer.step()
        none = torch.zeros((), device="cuda")
        return loss.detach(), none.long(), none, none.bool()

    updates = graph_updates.GraphedUpdates(step, params, optimizer)
    batch = {"src": torch.randn(32, 64, device="cuda")}
    with torch.autocast("cuda", dtype=torch.bfloat16):  # one region, its cache on, as a step with the recording
        updates.update(batch)  # the eager update, then the recording
        losses = []
        for _ in range(3):
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
                expected = loss_now(batch)
            losses.append(updates.update(batch)[0])
            torch.testing.assert_close(losses[-1], expected, rtol=1e-3, atol=0)
    assert updates.replays == 3
    # each update moves the loss well beyond the tolerance (up or down: Adam at this rate overshoots), so that a
    # replay on stale casts could not pass for one on the weights of the moment
    assert all(abs(b - a) > 1e-2 * abs(a) for a, b in itertools.pairwise(losses)), losses


def test_the_schedules_base_rate_is_kept_when_the_rate_becomes_a_tensor():
    """A resumed run's group holds the scheduled rate (lr) beside the schedule's base (initial_lr): the rate
    made a tensor must leave the base as it was, which a schedule built on the optimiser reads as its base
    rate (PyTorch's LambdaLR, resumed at an update: base_lrs from initial_lr)."""
    from nmt.training.graph_updates import learning_rates_on_device

    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.Adam([weight], lr=1e-5)
    optimizer.param_groups[0]["initial_lr"] = 1e-3  # as a resumed checkpoint's state holds it
    learning_rates_on_device(optimizer, torch.device("cpu"), False)
    group = optimizer.param_groups[0]
    assert group["initial_lr"] == 1e-3 and isinstance(group["lr"], torch.Tensor)
    assert torch.equal(group["lr"], torch.tensor(1e-5, dtype=torch.float32))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5, last_epoch=10)
    assert schedule.base_lrs == [1e-3]
