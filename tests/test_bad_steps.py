"""The non-finite gradient check: consecutive failures stop a run; the fp16 loss scaler's own overflow
steps are not failures (simulated on the CPU with a real GradScaler)."""

from types import SimpleNamespace

import pytest
import torch

from nmt.tasks.translation import TranslationTask
from nmt.training.guard import UpdateGuard
from nmt.training.module import TaskModule


def module_with(scaler=None, max_bad_steps: int = 3, check_every: int = 1, printed: list | None = None) -> TaskModule:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    module = TaskModule(
        task=TranslationTask(),
        model=model,
        loss=torch.nn.Identity(),
        optimizer=None,
        scheduler=None,
        src_tokenizer=None,
        tgt_tokenizer=None,
        config={},
        max_bad_steps=max_bad_steps,
        check_every=check_every,
    )
    module._trainer = SimpleNamespace(precision_plugin=SimpleNamespace(scaler=scaler), global_step=0)
    module.log = lambda *args, **kwargs: None  # no logger attached
    module.print = (lambda *args, **kwargs: None) if printed is None else printed.append
    return module


def set_grads(module: TaskModule, value: float) -> None:
    for p in module.parameters():
        p.grad = torch.full_like(p, value)


def test_consecutive_failures_stop_the_run_and_a_good_step_ends_a_streak():
    module = module_with(max_bad_steps=3)
    for _ in range(5):  # 3 bad, 1 good, repeated: never 4 in a row
        for _ in range(3):
            set_grads(module, float("nan"))
            module.on_before_optimizer_step(None)
            assert all(p.grad is None for p in module.parameters())  # the bad update changes nothing
        set_grads(module, 1.0)
        module.on_before_optimizer_step(None)
        assert module.guard.bad_steps == 0
    for _ in range(3):
        set_grads(module, float("inf"))
        module.on_before_optimizer_step(None)
    set_grads(module, float("inf"))
    with pytest.raises(FloatingPointError, match="4 bad batches in a row"):
        module.on_before_optimizer_step(None)


def test_loss_scaler_overflow_steps_are_not_failures():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    module = module_with(scaler, max_bad_steps=3)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    before = [p.detach().clone() for p in module.parameters()]
    # a long fp16 run: 11 overflows, each handled as Lightning does (scale the loss, backward, unscale,
    # our hook, the scaler's step, which skips, and its update, which halves the scale)
    huge = torch.full((2, 4), 1e37)  # times a loss scale above 34, the gradients overflow float32
    for _ in range(11):
        scaler.scale(module.model(huge).sum()).backward()
        scaler.unscale_(optimizer)
        module.on_before_optimizer_step(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    assert module.guard.bad_steps == 0 and module.guard.scaler_skips == 11
    assert scaler.get_scale() == 2.0**16 / 2**11
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))  # nothing applied


def test_non_finite_gradients_count_once_the_scale_is_below_one():
    scaler = torch.amp.GradScaler("cpu", init_scale=0.5)  # overflow even unscaled: the gradients are broken
    module = module_with(scaler, max_bad_steps=1)
    set_grads(module, float("nan"))
    module.on_before_optimizer_step(None)
    assert module.guard.bad_steps == 1
    set_grads(module, float("nan"))
    with pytest.raises(FloatingPointError):
        module.on_before_optimizer_step(None)


def test_the_deferred_guard_skips_the_same_updates_without_reading_the_device():
    """check_every > 1: a non-finite update is skipped by the fused optimiser on the device (found_inf),
    with no read by the host in the update; the weights and optimiser state are those of the guard that
    reads every update, and the counts, read every few updates, warn and stop the run as that one does."""
    from .host_reads import HostReads

    printed: list[str] = []
    deferred, every_update = module_with(max_bad_steps=2, check_every=4, printed=printed), module_with(max_bad_steps=2)
    optimizers = [torch.optim.Adam(m.parameters(), lr=0.1, fused=True) for m in (deferred, every_update)]
    for value in [1.0, float("nan"), 1.0, float("inf"), float("nan"), 0.5, 2.0, 1.0]:
        for module, optimizer in zip((deferred, every_update), optimizers, strict=True):
            set_grads(module, value)
            with HostReads() as reads:
                module.on_before_optimizer_step(optimizer)
            assert module is every_update or reads.calls == []
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(deferred.parameters(), every_update.parameters(), strict=True):
        assert torch.equal(a, b)
        state_a, state_b = (opt.state[p] for opt, p in zip(optimizers, (a, b), strict=True))
        assert all(torch.equal(state_a[k], state_b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert state_a["step"] == 5  # 8 updates, 3 skipped
    deferred.read_guard()
    assert deferred.guard.bad_steps == 0 and printed == [
        "warning: 3 update(s) with a non-finite loss or gradient skipped by step 0 (0 in a row now, 2 allowed)"
    ]
    # three in a row and a good one before the read: the streak is over, but it was longer than allowed
    for value in [float("nan")] * 3 + [1.0]:
        set_grads(deferred, value)
        deferred.on_before_optimizer_step(optimizers[0])
        optimizers[0].step()
    with pytest.raises(FloatingPointError, match="3 updates in a row"):
        deferred.read_guard()


def test_the_deferred_guard_needs_a_fused_optimiser():
    module = module_with(check_every=8)
    module.optimizer_factory = lambda params: torch.optim.Adam(params)
    with pytest.raises(ValueError, match="check_every=8 needs .*fused=true"):
        module.configure_optimizers()


@pytest.mark.slow
def test_a_run_with_the_deferred_guard_trains_as_one_that_checks_every_update(monkeypatch, tmp_path, capsys):
    """A toy run whose third batch has a NaN loss: with check_every=4 nothing in an update reads the
    device (the task's token count comes from the host), and the run ends with the weights, step count,
    schedule and token count of the run that checks every update."""
    import csv

    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train, nan_loss_in_batch
    from .host_reads import HostReads

    calls = nan_loss_in_batch(monkeypatch, 3)

    reads: dict[str, list[str]] = {}
    for hook in ("training_step", "on_before_optimizer_step", "on_train_batch_end"):
        real_hook = getattr(TaskModule, hook)

        def counted(self, *args, _hook=real_hook, **kwargs):
            with HostReads() as seen:
                result = _hook(self, *args, **kwargs)
            if self.check_every > 1:
                reads.setdefault(_hook.__name__, []).extend(seen.calls)
            return result

        monkeypatch.setattr(TaskModule, hook, counted)
    runs = {}
    for every in (1, 4):
        calls.clear()  # the same batch is the third of each run
        run_dir = tmp_path / f"every{every}"
        cfg = compose_train(
            "optim.optimizer.fused=true",
            f"check_every={every}",
            *NO_FINAL_SCORES,
            f"run_dir={run_dir}",
            "checkpoint.monitor=val_loss",
            "checkpoint.mode=min",
            "early_stopping.monitor=val_loss",
            "early_stopping.mode=min",
        )
        torch.manual_seed(0)
        train(cfg)
        rows = list(csv.DictReader((run_dir / "logs" / "metrics.csv").open()))
        checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
        runs[every] = (checkpoint, [r["train_tokens"] for r in rows if r.get("train_tokens")])
    (first, tokens_first), (second, tokens_second) = runs[1], runs[4]
    printed = capsys.readouterr().out
    assert "non-finite loss at step 2; batch skipped" in printed
    assert "1 update(s) with a non-finite loss or gradient skipped" in printed
    # the updates read nothing; the guard's counts are read once every 4 updates (after updates 4, 8, ...)
    steps = second["global_step"]
    assert reads["training_step"] == reads["on_before_optimizer_step"] == []
    assert reads["on_train_batch_end"] == ["tolist"] * (steps // 4)
    assert first["global_step"] == second["global_step"] > 3
    assert first["lr_schedulers"] == second["lr_schedulers"]
    assert tokens_first == tokens_second
    assert all(torch.equal(first["state_dict"][k], v) for k, v in second["state_dict"].items())


def test_a_skipped_batch_is_said_under_the_plain_progress_of_a_log_file(monkeypatch, tmp_path, capsys):
    """Output to a file or a pipe (a sweep's runs, nohup) shows plain progress lines; the module's warning of a
    skipped batch goes through the progress bar Lightning finds, which lacked what it reads (is_enabled), so
    the first non-finite loss ended such runs with an AttributeError instead of skipping the batch."""
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train, nan_loss_in_batch

    calls = nan_loss_in_batch(monkeypatch, which=2)
    monkeypatch.setattr("nmt.training.trainer.plain_output", lambda: True)
    cfg = compose_train(
        "trainer.enable_progress_bar=true", "trainer.max_steps=4", *NO_FINAL_SCORES, f"run_dir={tmp_path}"
    )
    train(cfg)
    printed = capsys.readouterr().out
    assert len(calls) >= 4 and "non-finite loss at step 1; batch skipped" in printed, printed[-2000:]
    assert "Results:" in printed  # the run went on to its end


def test_the_deferred_guard_is_refused_where_it_cannot_skip_an_update():
    from nmt.training.config import ConfigError, check_config

    from .conftest import compose_train

    check_config(compose_train("check_every=8", "optim.optimizer.fused=true"))
    with pytest.raises(ConfigError, match=r"check_every=8: needs optim.optimizer.fused=true"):
        check_config(compose_train("check_every=8"))
    with pytest.raises(ConfigError, match=r"check_every=8: trainer.precision=16-mixed has a loss scaler"):
        check_config(compose_train("check_every=8", "optim.optimizer.fused=true", "trainer.precision=16-mixed"))
    with pytest.raises(ConfigError, match=r"check_every=0: must be a positive integer"):
        check_config(compose_train("check_every=0"))


@pytest.mark.slow
def test_throughput_timed_only_at_logged_updates_counts_every_batch(monkeypatch, tmp_path):
    """The throughput monitor as on a GPU (timing, so synchronising, only at the updates it logs): the
    target tokens it reports are every batch's, equal to the epochs' own counts, and its rates appear
    once three logged updates span a window."""
    import csv

    from nmt.training import timing
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train

    real_init = timing.Throughput.__init__
    monkeypatch.setattr(timing.Throughput, "__init__", lambda self, *a, **k: real_init(self, *a, **k, sparse=True))
    cfg = compose_train(
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=2",
        *NO_FINAL_SCORES,
        f"run_dir={tmp_path}",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=min",
        "early_stopping.monitor=val_loss",
        "early_stopping.mode=min",
    )
    train(cfg)
    rows = list(csv.DictReader((tmp_path / "logs" / "metrics.csv").open()))
    timed = [r for r in rows if r.get("train/lengths")]
    assert [int(r["step"]) % 2 for r in timed] == [1] * len(timed)  # logged (0-based) steps 1, 3, 5, ...
    epoch_tokens = sum(float(r["train_tokens"]) for r in rows if r.get("train_tokens"))
    assert max(int(r["step"]) for r in rows if r.get("step")) == int(timed[-1]["step"])  # 10 updates, 2 epochs
    assert float(timed[-1]["train/lengths"]) == epoch_tokens  # the monitor's total covers every batch
    rates = [r for r in timed if r.get("train/device/items_per_sec")]
    assert len(rates) == len(timed) - 2 and all(float(r["train/device/items_per_sec"]) > 0 for r in rates)


@pytest.mark.slow
def test_throughput_timed_only_at_logged_updates_keeps_the_updates_before_each_validation_on_its_clock(
    monkeypatch, tmp_path
):
    """Timed only at logged updates, the updates between the last one and a validation dropped out of the
    training clock (Lightning moves it past the validation from the last timed update): a window spanning a
    validation read up to twice as fast as training ran. On a clock that only updates (1 s each) and
    validation batches (10 s each) move, every window reads 1 update a second exactly."""
    import csv
    import time
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import Callback, throughput_monitor

    from nmt.training import sitting as sitting_module
    from nmt.training import timing
    from nmt.training import train as train_module

    from .conftest import NO_FINAL_SCORES, compose_train

    clock = [0.0]

    class Clock(Callback):
        def on_train_batch_start(self, *args):
            clock[0] += 1.0

        def on_validation_batch_start(self, trainer, *args):
            if not trainer.sanity_checking:
                clock[0] += 10.0

    fake = SimpleNamespace(perf_counter=lambda: clock[0], monotonic=time.monotonic)
    monkeypatch.setattr(throughput_monitor, "time", fake)
    monkeypatch.setattr(timing, "time", fake)
    real_init = timing.Throughput.__init__
    monkeypatch.setattr(timing.Throughput, "__init__", lambda self, *a, **k: real_init(self, *a, **k, sparse=True))
    real_build = sitting_module.build_trainer  # where the sitting is built
    monkeypatch.setattr(sitting_module, "build_trainer", lambda *a, **k: _with_callback(real_build(*a, **k), Clock()))
    saved, real_state = [], timing.Throughput.state_dict
    monkeypatch.setattr(timing.Throughput, "state_dict", lambda self: saved.append(real_state(self)) or saved[-1])
    cfg = compose_train(
        "trainer.max_epochs=4",
        "trainer.log_every_n_steps=2",
        "checkpoint.every_n_train_steps=3",  # saves between logged updates
        *NO_FINAL_SCORES,
        f"run_dir={tmp_path}",
        "checkpoint.monitor=val_loss",
        "checkpoint.mode=min",
        "early_stopping.monitor=val_loss",
        "early_stopping.mode=min",
    )
    train_module.train(cfg)
    rows = list(csv.DictReader((tmp_path / "logs" / "metrics.csv").open()))
    rates = [float(r["train/device/batches_per_sec"]) for r in rows if r.get("train/device/batches_per_sec")]
    assert len(rates) >= 6 and rates == pytest.approx([1.0] * len(rates)), rates  # 5 updates an epoch
    last = next(r for r in reversed(rows) if r.get("train/time"))
    assert float(last["train/time"]) == pytest.approx(float(last["train/batches"]))  # the total too
    # and so does every checkpoint's, whose totals a resumed sitting goes on from (it lagged by the updates
    # since the last logged one)
    assert len(saved) >= 6 and all(state["time"] == pytest.approx(state["batches"]) for state in saved), saved


def _with_callback(trainer, callback):
    trainer.callbacks.append(callback)
    return trainer


def _logging_run(monkeypatch, tmp_path, *overrides: str, stop_at: int | None = None) -> dict:
    """A toy run that records, per scalar, the updates (1-based) it was logged at and each update's loss;
    with ``stop_at``, a callback stops it at the end of that update, as a time cap does."""
    import csv

    from lightning.pytorch.callbacks import Callback

    from nmt.training import trainer as trainer_module
    from nmt.training.module import TaskModule
    from nmt.training.train import train

    from .conftest import NO_FINAL_SCORES, compose_train

    seen = {"logged": {}, "losses": [], "tokens": [], "at_validation": []}
    real_log, real_loss = TaskModule.log, TaskModule._log_training

    def log(self, name, value, *args, **kwargs):
        if name in ("train_loss", "grad_norm", "lr"):
            update = self.trainer.fit_loop.epoch_loop._batches_that_stepped + 1  # the update whose value it is
            seen["logged"].setdefault(name, set()).add(update)
        return real_log(self, name, value, *args, **kwargs)

    def log_training(self, loss, tokens, batch):
        seen["losses"].append(float(loss))
        seen["tokens"].append(self.task.batch_target_tokens(batch))
        return real_loss(self, loss, tokens, batch)

    class Watch(Callback):
        def on_validation_start(self, trainer, pl_module):
            if trainer.state.fn == "fit":  # not the final weights' validation, after fit
                seen["at_validation"].append(float(trainer.callback_metrics["train_loss"]))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if stop_at is not None and trainer.global_step == stop_at:
                trainer.should_stop = True

    build = trainer_module._callbacks
    monkeypatch.setattr(trainer_module, "_callbacks", lambda *a, **k: [*build(*a, **k), Watch()])
    monkeypatch.setattr(TaskModule, "log", log)
    monkeypatch.setattr(TaskModule, "_log_training", log_training)
    settings = ["checkpoint.monitor=val_loss", "checkpoint.mode=min", "early_stopping.monitor=val_loss"]
    settings += ["early_stopping.mode=min", *NO_FINAL_SCORES, f"run_dir={tmp_path}", *overrides]
    seen["results"] = train(compose_train(*settings))
    seen["rows"] = list(csv.DictReader((tmp_path / "logs" / "metrics.csv").open()))
    return seen


@pytest.mark.slow
def test_update_scalars_are_logged_where_they_are_read_and_the_token_count_stays_exact(monkeypatch, tmp_path):
    """train_loss, grad_norm and lr are logged at the updates the loggers write, at each epoch's last
    batch, before a validation and at the run's last update (each ``self.log`` costs host time that a
    small model's update on a GPU feels), and nowhere else; each is that update's own value; the epoch's
    token count, added up on the device between reads, is every batch's target tokens."""
    from .conftest import compose_train, steps_per_epoch

    epoch = steps_per_epoch(compose_train())
    assert epoch >= 4
    steps = 2 * epoch + 2  # ends inside the third epoch
    # validation every 4 updates, not a multiple of the loggers' 3
    seen = _logging_run(
        monkeypatch,
        tmp_path,
        "trainer.max_epochs=3",
        f"trainer.max_steps={steps}",
        "trainer.log_every_n_steps=3",
        "trainer.val_check_interval=4",
        "trainer.check_val_every_n_epoch=null",
    )
    validated = {u for u in range(1, steps + 1) if u % 4 == 0}
    expected = {u for u in range(1, steps + 1) if u % 3 == 0} | {epoch, 2 * epoch, steps} | validated
    assert seen["logged"] == {"train_loss": expected, "grad_norm": expected, "lr": expected}
    # a validation sees the loss of the update just before it, not an older one
    assert seen["at_validation"][: len(validated)] == [seen["losses"][u - 1] for u in sorted(validated)]
    rows = seen["rows"]
    written = {int(r["step"]) + 1: float(r["train_loss"]) for r in rows if r.get("train_loss")}
    assert {u for u in range(1, steps + 1) if u % 3 == 0} <= set(written) <= expected  # the loggers' updates
    assert written == {u: seen["losses"][u - 1] for u in written}  # each update's own loss
    assert sorted(written) == sorted(int(r["step"]) + 1 for r in rows if r.get("lr"))
    # every batch's target tokens are in the epochs' counts (the last epoch's too, cut by max_steps)
    per_epoch = [int(float(r["train_tokens"])) for r in rows if r.get("train_tokens")]
    assert len(seen["tokens"]) == steps and sum(per_epoch) == sum(seen["tokens"])


def test_an_accumulated_updates_loss_is_the_mean_of_its_micro_batches(monkeypatch, tmp_path):
    """trainer.accumulate_grad_batches=2: train_loss was the second micro-batch's loss alone."""
    seen = _logging_run(
        monkeypatch, tmp_path, "trainer.accumulate_grad_batches=2", "trainer.max_steps=3", "trainer.log_every_n_steps=1"
    )
    written = {int(r["step"]) + 1: float(r["train_loss"]) for r in seen["rows"] if r.get("train_loss")}
    losses = seen["losses"]  # one per micro-batch; the toy epoch's 5 batches make updates of 2, 2 and 1
    assert len(losses) == 5 and sorted(written) == [1, 2, 3]
    for update, parts in ((1, losses[0:2]), (2, losses[2:4]), (3, losses[4:])):
        assert written[update] == pytest.approx(sum(parts) / len(parts), rel=1e-6)
    assert losses[1] != losses[0] and losses[3] != losses[2]


@pytest.mark.slow
def test_a_run_stopped_between_logged_updates_keeps_its_last_updates_values(monkeypatch, tmp_path):
    """A stop decided at the end of an update (a time cap) logs that update's values, which the loggers
    write and results.json keeps."""
    from .conftest import compose_train, steps_per_epoch

    assert steps_per_epoch(compose_train()) > 3  # update 3 does not end an epoch
    seen = _logging_run(monkeypatch, tmp_path, "trainer.log_every_n_steps=50", "trainer.max_epochs=3", stop_at=3)
    assert len(seen["losses"]) == 3 and 3 in seen["logged"]["train_loss"] and 3 in seen["logged"]["grad_norm"]
    assert seen["logged"]["train_loss"] == {3}  # nothing read the first two
    assert seen["results"]["final_metrics"]["train_loss"] == pytest.approx(seen["losses"][-1])
    last = [r for r in seen["rows"] if r.get("train_loss")][-1]
    assert int(last["step"]) == 2 and float(last["train_loss"]) == pytest.approx(seen["losses"][-1])


@pytest.mark.slow
def test_a_watched_update_scalar_is_logged_at_every_update(monkeypatch, tmp_path):
    """checkpoint.monitor=train_loss: a checkpoint callback may read it at any update; the rate is still
    logged where it is read (here the stop at update 4)."""
    seen = _logging_run(
        monkeypatch,
        tmp_path,
        "trainer.max_steps=6",
        "trainer.max_epochs=3",
        "trainer.log_every_n_steps=50",
        "checkpoint.monitor=train_loss",
        stop_at=4,
    )
    assert seen["logged"]["train_loss"] == seen["logged"]["grad_norm"] == set(range(1, 5))
    assert seen["logged"]["lr"] == {4} and seen["results"]["final_metrics"]["lr"] > 0


def test_the_logged_training_loss_is_the_mean_over_processes(monkeypatch):
    """Under DDP train_loss was the first process's loss alone (its half of the update), in metrics.csv, the
    progress line and a checkpoint monitoring it; it is reduced over the processes (a no-op in one)."""
    from types import SimpleNamespace

    import torch

    from nmt.training import update_scalars
    from nmt.training.update_scalars import UpdateScalars

    logged = {}
    module = SimpleNamespace(
        trainer=SimpleNamespace(global_step=0),
        optimizers=lambda: SimpleNamespace(param_groups=[{"lr": 1e-3}]),
        log=lambda name, value, **kwargs: logged.setdefault(name, []).append(kwargs),
    )
    monkeypatch.setattr(update_scalars, "read_next", lambda trainer: True)
    for every_update in (False, True):  # logged where read, or at each update (a callback watches it)
        scalars = UpdateScalars()
        scalars.every_update = every_update
        scalars.loss_made(module, torch.tensor(2.0), 10)
        scalars.batch_ended(module)
    assert len(logged["train_loss"]) == 2 and all(kwargs["sync_dist"] for kwargs in logged["train_loss"])


def test_the_deferred_guard_warns_of_each_skipped_update_once():
    printed: list[str] = []
    guard = UpdateGuard(max_bad_steps=5, check_every=4, say=printed.append)
    for read_at, bad in ((4, [True, False, False, False]), (8, [False, True, False, False]), (12, [False] * 4)):
        for flag in bad:
            guard.count(torch.tensor(flag))
        guard.read(read_at)
    assert printed == [
        "warning: 1 update(s) with a non-finite loss or gradient skipped by step 4 (0 in a row now, 5 allowed)",
        "warning: 1 update(s) with a non-finite loss or gradient skipped by step 8 (0 in a row now, 5 allowed)",
    ]
