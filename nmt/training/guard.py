"""The guard against non-finite updates: a batch whose loss or gradient norm is not finite is skipped, and
more than ``max_bad_steps`` of them in a row stop the run with what to change.

With ``check_every`` = 1 every update is checked on the host (free on a CPU). With more, nothing in an
update waits for the device: a non-finite gradient norm sets the fused optimiser's ``found_inf``, the flag
by which it skips an update on the device (as under the fp16 loss scaler), and the counts stay on the
device until :meth:`UpdateGuard.read`, every ``check_every`` updates."""

from collections.abc import Callable

import torch

# below this loss scale an fp16 overflow is no longer the scaler's business: the gradients themselves are
# non-finite (a scale of 1 means fp16 overflows even unscaled)
MIN_LOSS_SCALE = 1.0

ADVICE = "lower the learning rate, clip gradients (trainer.gradient_clip_val) or use precision=32-true"


class UpdateGuard:
    """A run's count of bad batches in a row, its limit, and how an update is checked: on the host
    (:meth:`loss_ok`, :meth:`norm_ok`) or on the device (:meth:`skip_on_device`, :meth:`count`, :meth:`read`)."""

    def __init__(self, max_bad_steps: int = 10, check_every: int = 1, say: Callable[[str], None] = print) -> None:
        self.max_bad_steps, self.check_every, self.say = max_bad_steps, check_every, say
        self.bad_steps = 0  # consecutive batches with a non-finite loss or gradient
        self.scaler_skips = 0  # 16-mixed: updates the loss scaler skipped after an overflow (not failures)
        self._streak: torch.Tensor | None = None  # (deferred) consecutive skipped updates, on the device
        self._worst: torch.Tensor | None = None  # (deferred) the longest streak since the last read
        self._skipped: torch.Tensor | None = None  # (deferred) skipped updates in all
        self._skipped_read = 0

    def loss_ok(self, loss: torch.Tensor, step: int) -> bool:
        """False (and counted) when the loss is not finite: the batch is then skipped."""
        if torch.isfinite(loss):
            return True
        self.bad(f"non-finite loss at step {step}")
        return False

    def norm_ok(self, norm: torch.Tensor, step: int, scaler=None) -> bool | None:
        """The host's check of an update's gradient norm. True: finite (a streak ends). None: an fp16
        overflow that the loss scaler skips itself, lowering its scale: its normal working, not a failure (a
        long fp16 run has many). False: a bad update, counted; the caller drops its gradients."""
        if torch.isfinite(norm):
            self.bad_steps = 0  # the limit is on consecutive failures: a good update ends a streak
            return True
        if scaler is not None and scaler.get_scale() >= MIN_LOSS_SCALE:
            self.scaler_skips += 1
            return None
        self.bad(f"non-finite gradient norm at step {step}")
        return False

    def bad(self, what: str) -> None:
        """One more bad batch in a row: a warning, or the run stopped past ``max_bad_steps``."""
        self.bad_steps += 1
        if self.bad_steps > self.max_bad_steps:
            raise FloatingPointError(
                f"{what} ({self.bad_steps} bad batches in a row, more than max_bad_steps={self.max_bad_steps}): "
                + ADVICE
            )
        self.say(f"warning: {what}; batch skipped ({self.bad_steps}/{self.max_bad_steps} in a row allowed)")

    def skip_on_device(self, optimizer, norm: torch.Tensor) -> torch.Tensor:
        """The deferred guard of one update: the fused optimiser told to skip it if ``norm`` is not finite
        (a non-finite loss gives such a norm), counted on the device. Returns that flag."""
        bad = ~torch.isfinite(norm)
        optimizer.found_inf = bad.float()
        self.count(bad)
        return bad

    def count(self, bad: torch.Tensor) -> None:
        """The deferred counts, on the device, for an update that ``bad`` says the optimiser skipped or made."""
        if self._streak is None:
            self._streak = torch.full((), self.bad_steps, dtype=torch.long, device=bad.device)
            self._worst, self._skipped = self._streak.clone(), torch.zeros_like(self._streak)
        self._streak = torch.where(bad, self._streak + 1, 0)
        self._worst = torch.maximum(self._worst, self._streak)
        self._skipped = self._skipped + bad

    def read(self, step: int) -> None:
        """The deferred counts read (one wait for the device): a warning for skipped updates, and the run
        stopped when more than max_bad_steps came in a row."""
        if self._streak is None:
            return
        streak, worst, skipped = torch.stack((self._streak, self._worst, self._skipped)).tolist()
        self.bad_steps, self._worst = streak, self._streak.clone()
        new, self._skipped_read = skipped - self._skipped_read, skipped
        if worst > self.max_bad_steps:
            raise FloatingPointError(
                f"non-finite loss or gradient norm in {worst} updates in a row by step {step}, more than "
                f"max_bad_steps={self.max_bad_steps}: " + ADVICE
            )
        if new:
            self.say(
                f"warning: {new} update(s) with a non-finite loss or gradient skipped by step {step} "
                f"({streak} in a row now, {self.max_bad_steps} allowed)"
            )

    def streak(self) -> int:
        """The bad batches in a row now, for a checkpoint (the deferred streak read from the device)."""
        if self._streak is not None:
            self.bad_steps = int(self._streak)
        return self.bad_steps
