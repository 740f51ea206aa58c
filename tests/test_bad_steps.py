"""The non-finite gradient check: consecutive failures stop a run; the fp16 loss scaler's own overflow
steps are not failures (simulated on the CPU with a real GradScaler)."""

from types import SimpleNamespace

import pytest
import torch

from nmt.tasks.translation import TranslationTask
from nmt.training.module import TaskModule


def module_with(scaler=None, max_bad_steps: int = 3) -> TaskModule:
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
    )
    module._trainer = SimpleNamespace(precision_plugin=SimpleNamespace(scaler=scaler), global_step=0)
    module.log = lambda *args, **kwargs: None  # no logger attached
    module.print = lambda *args, **kwargs: None
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
        assert module.bad_steps == 0
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
    assert module.bad_steps == 0 and module.scaler_skips == 11
    assert scaler.get_scale() == 2.0**16 / 2**11
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))  # nothing applied


def test_non_finite_gradients_count_once_the_scale_is_below_one():
    scaler = torch.amp.GradScaler("cpu", init_scale=0.5)  # overflow even unscaled: the gradients are broken
    module = module_with(scaler, max_bad_steps=1)
    set_grads(module, float("nan"))
    module.on_before_optimizer_step(None)
    assert module.bad_steps == 1
    set_grads(module, float("nan"))
    with pytest.raises(FloatingPointError):
        module.on_before_optimizer_step(None)
