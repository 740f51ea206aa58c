"""The one LightningModule that trains and validates every nmt model, whatever its task."""

import math
import warnings

import lightning as L
import torch
from lightning.pytorch.utilities import GradClipAlgorithmType
from torch import nn

from nmt.data.tokenizer import Tokenizer
from nmt.inference.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_KEY
from nmt.tasks import Task, exact_sum
from nmt.training import graph_updates, weight_casts
from nmt.training.graph_updates import GraphedUpdates
from nmt.training.guard import UpdateGuard
from nmt.training.loggers import FINAL_ROW
from nmt.training.optim import optimizer_settings, restore_settings
from nmt.training.update_scalars import UpdateScalars
from nmt.utils.machine import machine_record, resume_machine_note


class TaskModule(L.LightningModule):
    """The optimiser and schedule, the guard against non-finite updates, and checkpoints that carry the
    resolved config and the tokenizers (plain data only); the task says what a training and validation
    step compute and which metrics validation logs.

    The task, model, loss, optimiser and schedule arrive built (or as factories), so nothing here depends
    on the architecture or on the task.
    """

    def __init__(
        self,
        task: Task,
        model: torch.nn.Module,
        loss: torch.nn.Module,
        optimizer,
        scheduler,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        config: dict,
        val_metrics: nn.ModuleDict | None = None,
        max_bad_steps: int = 10,
        check_every: int = 1,
        graph_updates: bool = False,
        cast_weights_once: bool | None = None,
    ) -> None:
        super().__init__()
        self.task = task
        self.last_validated_step = -1  # the update whose weights the last validation scored
        self.last_decoded_step = -1  # ... and the last validation that decoded (BLEU and the like)
        self.final_validation = False  # set while the weights after the last update are validated
        self.trained_epoch = -1  # the epoch of the last update of this process
        self.saved_data_place: tuple[int, int] | None = None  # the resumed checkpoint's (epoch, batches done)
        self.saved_data_order: int | None = None  # and the checksum of that epoch's batch order
        self.validation_epoch = 0  # the epoch a validation is logged under (W&B's sample table too)
        self.val_metrics = val_metrics if val_metrics is not None else nn.ModuleDict()
        self.model = model
        self.loss = loss
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.config = config
        self.restored_metrics: dict[str, float] = {}  # the values logged before the checkpoint resumed
        self.data_text: dict[str, str] | None = None  # each split's text hash: evaluation checks it reads the same
        # non-finite updates skipped, and the run stopped past max_bad_steps in a row; checked on the host
        # every check_every updates (nmt/training/guard.py); its warnings through self.print, as Lightning's
        self.guard = UpdateGuard(max_bad_steps, check_every, say=self._say)
        self.check_every = check_every
        self.graph_updates = graph_updates  # each update one CUDA graph replay (nmt/training/graph_updates.py)
        self._graphed: GraphedUpdates | None = None
        # linear weights cast to the autocast dtype once per update (nmt/training/weight_casts.py); None:
        # where updates are replayed as graphs (mixed precision, the model not compiled, one device)
        self.cast_weights_once = cast_weights_once
        self._cast_once: weight_casts.CastOnce | bool | None = None  # made at the first update; False: off
        self._last_tokens: torch.Tensor | None = None  # (deferred) this update's target tokens
        self._params: list[torch.Tensor] | None = None  # the trained parameters, listed once (see _grads)
        self._rng_to_restore: torch.Tensor | None = None
        self._cuda_rng_to_restore: torch.Tensor | None = None
        # target tokens trained on in this epoch, summed over processes; kept across a mid-epoch resume. The
        # updates add theirs to _pending_tokens, an integer on the device (exact at any count), and the
        # metric takes it where it is read (epoch_tokens_so_far): a metric's update costs the host more than
        # a small model's update leaves it on a GPU
        self.epoch_tokens = exact_sum()
        self._pending_tokens: torch.Tensor | None = None
        self._tokens_to_restore: float | None = None
        self._cut_epoch_tokens = 0.0  # those of an epoch max_steps cut short, for a run extended into its rest
        self._configured: list[dict] = []  # the optimiser's settings as the config built them, by group
        self.update_scalars = UpdateScalars()  # train_loss, grad_norm and lr, logged where they are read

    def _say(self, text: str) -> None:
        self.print(text)  # a method, not a lambda: the module stays picklable, and print is looked up per call

    def _log_training(self, loss: torch.Tensor, tokens: torch.Tensor, batch: dict) -> None:
        tokens = tokens.detach()
        self._pending_tokens = tokens if self._pending_tokens is None else self._pending_tokens + tokens
        self._last_tokens = tokens if self._last_tokens is None else self._last_tokens + tokens
        # the batch size from the host's own count: reading ``tokens`` would wait for the device
        self.update_scalars.loss_made(self, loss, self.task.batch_target_tokens(batch))

    def epoch_tokens_so_far(self) -> float:
        """Target tokens trained on in this epoch by this process (one read of the device)."""
        self._count_pending_tokens()
        return float(self.epoch_tokens.sum_value)

    def _count_pending_tokens(self) -> None:
        if self._pending_tokens is not None:
            self.epoch_tokens.update(self._pending_tokens)
            self._pending_tokens = None

    def _grads(self) -> list[torch.Tensor]:
        """The gradients of this update. The parameters are listed once: walking the module tree at every
        update costs the host about as much as the fused optimiser's step."""
        if self._params is None:
            self._params = [p for p in self.parameters() if p.requires_grad]
        return [p.grad for p in self._params if p.grad is not None]

    def _training_model(self):
        """The model as an update calls it: with its linear weights cast once (``cast_weights_once``), decided
        at the first update, once the trainer's precision and devices are known."""
        if self._cast_once is None:
            precision, compile = self.trainer.precision, self.config.get("compile")
            setting = self.cast_weights_once
            if setting is None:
                setting = weight_casts.applies(
                    precision=precision,
                    compile=compile,
                    world_size=self.trainer.world_size,
                    graph_updates=self.graph_updates,
                )
            elif setting:
                problems = weight_casts.unsupported(precision=precision, compile=compile)
                if problems:
                    raise ValueError("; ".join(problems))
            self._cast_once = weight_casts.CastOnce(self.model) if setting else False
        return self._cast_once or self.model

    # ---- training ------------------------------------------------------------------------------
    def on_before_optimizer_step(self, optimizer) -> None:
        pending_tokens, self._last_tokens = self._last_tokens, None  # this update's batches' target tokens
        grads = self._grads()
        if not grads:  # the batch was skipped (non-finite loss): nothing to check
            return
        # one fused kernel per dtype and device rather than one per parameter: on a GPU a small model's
        # step is bound by kernel launches
        norm = torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))
        if self.check_every > 1:  # skipped on the device if not finite, without a read by the host
            self._guarded_on_device(norm, self.guard.skip_on_device(optimizer, norm), pending_tokens)
            return
        # 16-mixed: Lightning unscales before this hook, so an fp16 overflow shows here as inf
        passed = self.guard.norm_ok(norm, self.global_step, self._grad_scaler())
        if passed:
            self.update_scalars.norm_made(self, norm)
        elif passed is False:
            for p in self.parameters():
                p.grad = None  # optimisers skip parameters without a gradient: the step changes nothing

    def _guarded_on_device(self, norm: torch.Tensor, bad: torch.Tensor, tokens: torch.Tensor | None) -> None:
        """The logged norm and the epoch's tokens of an update the deferred guard let through or skipped."""
        self.update_scalars.norm_made(self, norm)
        if tokens is not None:  # a skipped update's tokens were not trained on
            untrained = -tokens * bad
            self._pending_tokens = untrained if self._pending_tokens is None else self._pending_tokens + untrained

    def read_guard(self) -> None:
        """The deferred guard's counts read: a warning for skipped updates, the run stopped past the limit."""
        self.guard.read(self.global_step)

    def on_train_start(self) -> None:
        self.update_scalars.start(self.trainer)
        if self._configured:  # a resumed optimiser trains with the settings the config gives, not those saved
            schedulers = self.lr_schedulers()
            scheduler = schedulers[0] if isinstance(schedulers, list) else schedulers
            restore_settings(self.optimizers().optimizer, scheduler, self._configured)
        if self._graphed is not None:  # a resumed optimiser's rates come back as they were saved
            optimizer = self.optimizers().optimizer
            graph_updates.learning_rates_on_device(optimizer, self.device, capturable=self.device.type == "cuda")

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        self.trained_epoch = self.current_epoch
        if self.check_every > 1 and self.global_step % self.check_every == 0:
            self.read_guard()
        self.update_scalars.batch_ended(self)

    def on_train_end(self) -> None:
        self.read_guard()
        self._graphed = None  # the recordings and their memory, not needed by the final scores

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Lightning's clipping, but also for a fused optimiser under bf16-mixed: Lightning refuses that pair
        under any mixed precision, because under 16-mixed such an optimiser unscales the gradients itself
        (they would be clipped while scaled); without a loss scaler the gradients are the true ones."""
        if gradient_clip_val is None or gradient_clip_val <= 0:
            return
        # only the pair Lightning refuses without cause; every other case (16-mixed, FSDP, ...) is Lightning's
        if self._grad_scaler() is not None or not getattr(optimizer, "_step_supports_amp_scaling", False):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    def _grad_scaler(self):
        """The loss scaler of 16-mixed precision, or None."""
        return getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None)

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameters())
        if self.graph_updates:
            self._graphed = self._graph_updates(optimizer)
        if self.check_every > 1 and not (
            getattr(optimizer, "_step_supports_amp_scaling", False) and optimizer.defaults.get("fused")
        ):
            raise ValueError(
                f"check_every={self.check_every} needs an optimiser that skips an update on the device: "
                f"{type(optimizer).__name__} with optim.optimizer.fused=true (Adam or AdamW), or check_every=1"
            )
        scheduler = None
        if self.scheduler_factory is not None:
            scheduler = self.scheduler_factory(optimizer, total_steps=self._planned_steps())
        self._configured = optimizer_settings(optimizer)
        if scheduler is None:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _graph_updates(self, optimizer) -> GraphedUpdates:
        """graph_updates=true: checked, the learning rate made a tensor on the device (before the schedule
        reads its base rate), and the whole update written once for its eager run and its recording."""
        trainer, device = self.trainer, self.device
        problems = graph_updates.unsupported(
            check_every=self.check_every,
            fused=optimizer.defaults.get("fused"),
            accumulate=trainer.accumulate_grad_batches,
            precision=trainer.precision,
            compile=self.config.get("compile"),
            world_size=trainer.world_size,
            accelerator="gpu" if device.type == "cuda" else "cpu",
        )
        unrecordable = graph_updates.not_recordable(type(self.model))
        if unrecordable:
            problems.append(unrecordable)
        if problems:
            raise ValueError("; ".join(problems))
        # the step returns no loss on purpose (the update is made in it): Lightning's warning says so once
        warnings.filterwarnings("ignore", message=r".*`training_step` returned `None`")
        graph_updates.learning_rates_on_device(optimizer, device, capturable=device.type == "cuda")
        params = [p for p in self.parameters() if p.requires_grad]
        self._params = params
        clip, clip_by = trainer.gradient_clip_val, trainer.gradient_clip_algorithm

        def update(batch: dict) -> graph_updates.Outputs:
            loss, tokens = self.task.training_loss(self._training_model(), self.loss, batch)
            # the rest outside the precision's autocast (this runs inside training_step), as Lightning runs it
            with torch.autocast(device.type, enabled=False):
                loss.backward()
                grads = [p.grad for p in params if p.grad is not None]
                norm = torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))
                bad = ~torch.isfinite(norm)
                optimizer.found_inf = bad.float()  # the fused optimiser skips a non-finite update on the device
                if clip:  # as Lightning clips after the hook that guards (the norm above is the unclipped one)
                    self.configure_gradient_clipping(optimizer, clip, clip_by)
                optimizer.step()
            # a recording's tensor, which the next recording's memory may overwrite: no later step may read it
            optimizer.found_inf = None
            return loss.detach(), tokens, norm, bad

        return GraphedUpdates(update, params, optimizer)

    def _planned_steps(self) -> int:
        """Optimiser steps the run will take (for schedules that decay to the end). Counted from a fresh
        loader: Lightning's estimated_stepping_batches would build the training loader before a resumed
        run restores its position in the epoch."""
        trainer = self.trainer
        if trainer.max_steps and trainer.max_steps > 0:
            return trainer.max_steps
        batches = len(trainer.datamodule.train_dataloader())
        return math.ceil(batches / trainer.accumulate_grad_batches) * max(trainer.max_epochs or 1, 1)

    def on_train_epoch_end(self) -> None:
        self.read_guard()  # the epoch's token count below is exact only once skipped batches are known
        # not a logged Metric object: Lightning would restore its state on resume into the wrong epoch
        self._count_pending_tokens()
        tokens = self.epoch_tokens.compute() if self.epoch_tokens.update_called else 0.0
        self.log("train_tokens", tokens)
        # an epoch cut short (max_steps): its checkpoint, written after this, keeps the count, so that a run
        # extended into the epoch's rest (resume=force) ends it with the whole epoch's tokens, not its rest's
        cut = not self.trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        self._cut_epoch_tokens = float(tokens) if cut else 0.0
        self.epoch_tokens.reset()

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        if self._tokens_to_restore is not None:
            # resumed mid-epoch (the first batch is not the epoch's first): the epoch's tokens so far, the
            # total of every process, counted once
            if batch_idx > 0 and self.global_rank == 0 and self._tokens_to_restore:
                self.epoch_tokens.update(torch.tensor(self._tokens_to_restore))
            self._tokens_to_restore = None
        if self._rng_to_restore is not None:
            # resumed mid-epoch: continue with the random numbers (dropout) the killed run would have used,
            # on the CPU and on the GPU
            torch.set_rng_state(self._rng_to_restore)
            if self._cuda_rng_to_restore is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state(self._cuda_rng_to_restore)
            self._rng_to_restore = self._cuda_rng_to_restore = None

    # ---- checkpoints: plain data only, so they load with weights_only=True --------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        self._count_pending_tokens()
        checkpoint[CHECKPOINT_KEY] = {
            "format": CHECKPOINT_FORMAT,
            "config": self.config,
            "src_tokenizer": self.src_tokenizer.model_proto,
            "tgt_tokenizer": self.tgt_tokenizer.model_proto,
            "src_segmenter": self.src_tokenizer.segmenter.spec(),
            "tgt_segmenter": self.tgt_tokenizer.segmenter.spec(),
            "rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state()
            if torch.cuda.is_available() and torch.cuda.is_initialized()
            else None,
            "bad_steps": self.guard.streak(),
            # what computed it: another thread count or CPU sums floats in another order (resume_machine_note)
            "machine": machine_record(self.trainer.strategy.root_device.type),
            "data_text": self.data_text,
            "trained_epoch": self.trained_epoch,
            # the values logged so far (train_loss, lr, ...): a sitting resumed at training's end logs none
            "metrics": {k: float(v) for k, v in self.trainer.callback_metrics.items() if v.numel() == 1},
            # every process saves (DDP calls this hook on all of them), so the sum over processes is exact
            "epoch_tokens": float(self.epoch_tokens.compute())
            if self.epoch_tokens.update_called
            else self._cut_epoch_tokens,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        section = checkpoint.get(CHECKPOINT_KEY, {})
        self._rng_to_restore = section.get("rng_state")
        self._cuda_rng_to_restore = section.get("cuda_rng_state")
        self.guard.bad_steps = section.get("bad_steps", 0)
        saved = section.get("machine")  # absent from checkpoints written before the machine was kept
        if saved and self.trainer.is_global_zero:
            if said := resume_machine_note(saved, self.trainer.strategy.root_device.type):
                print(said)
        self.restored_metrics = dict(section.get("metrics") or {})
        self._tokens_to_restore = section.get("epoch_tokens")
        # a sitting that trains nothing (resumed at training's end) saves the count it was given, not 0
        self._cut_epoch_tokens = float(section.get("epoch_tokens") or 0.0)
        # where the training loader stood (epoch, batches of it trained), as it recorded itself: what a resumed
        # run's loader must find again (resume.SamePlaceInData)
        self.saved_data_place = saved_data_place(checkpoint)
        self.saved_data_order = saved_data_order(checkpoint)
        # a process resumed at training's end trains nothing, and Lightning's restored epoch counter says the
        # epoch in progress or the next one, depending on where the checkpoint was written; a checkpoint made
        # before it was kept: the epoch of the loader's place (its previous one at an epoch's start)
        if "trained_epoch" in section:
            self.trained_epoch = int(section["trained_epoch"])
        elif self.saved_data_place is not None:
            epoch, done = self.saved_data_place
            self.trained_epoch = epoch if done else epoch - 1

    # ---- the task's steps ------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        if self._graphed is not None:
            # the whole update made here; None: Lightning's backward is skipped, and its optimiser step
            # finds no gradients (the schedule still steps)
            loss, tokens, norm, bad = self._graphed.update(batch)
            self._log_training(loss, tokens, batch)
            self.guard.count(bad)
            self._guarded_on_device(norm, bad, tokens)
            return None
        if hasattr(self.model, "set_update"):  # a model with a schedule of its own (the RNN's teacher forcing)
            self.model.set_update(self.global_step)
            for name, value in getattr(self.model, "scheduled_values", dict)().items():  # the ratio a decay reached
                self.log(name, value, on_step=True, on_epoch=False, batch_size=1)
        loss, tokens = self.task.training_loss(self._training_model(), self.loss, batch)
        # (deferred guard: a non-finite loss shows as a non-finite gradient norm, without a read here)
        if self.check_every == 1 and not self.guard.loss_ok(loss, self.global_step):
            return None  # Lightning skips backward and the optimiser step
        self._log_training(loss, tokens, batch)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        # a compiled model (compile=true) runs eagerly here: its eval mode would be compiled a second time, and
        # CUDA graphs recorded for each validation shape, to save milliseconds in a validation of a few batches
        with torch.compiler.set_stance("force_eager"):
            self.task.validation_step(self, batch, batch_idx)

    def on_fit_start(self) -> None:
        self.task.start_workers(self)  # stopped by train(), after the final weights' validation too

    def on_validation_epoch_start(self) -> None:
        self.validation_epoch = self.current_epoch
        if self.final_validation:  # after fit the epoch counter has moved past the last epoch trained
            self.validation_epoch = self.trained_epoch if self.trained_epoch >= 0 else max(self.current_epoch - 1, 0)
        # Lightning keeps a metric logged at an earlier validation among the current ones: a validation that
        # does not decode would pass the last decoded BLEU on to early stopping (counted as no improvement)
        # and to the printed line and the progress bar, as if measured now
        for name in self.task.decoded_metrics:
            self.trainer.callback_metrics.pop(name, None)
            self.trainer.progress_bar_metrics.pop(name, None)

    def on_validation_epoch_end(self) -> None:
        self.task.validation_epoch_end(self)
        if self.final_validation:
            # logged where training's own validation of these weights is: Lightning logs a validation at the
            # last update's 0-based index and the epoch it ran in, and after fit both counters have moved on,
            # so the same weights would be two points of the curves, one at an epoch that never ran
            self.log("step", float(self.global_step - 1))
            self.log("epoch", float(self.validation_epoch))
            self.log(FINAL_ROW, 1.0)  # a resumed process redoes this row alone (loggers.ResumableCSVLogger)
        if not self.trainer.sanity_checking:
            self.last_validated_step = self.global_step
            if any(name in self.trainer.callback_metrics for name in self.task.decoded_metrics):
                self.last_decoded_step = self.global_step
        for metric in self.val_metrics.values():
            metric.reset()  # the next validation starts from zero


def _loader_state(checkpoint: dict) -> dict | None:
    """What a checkpoint's training loader recorded of itself (ResumableDataLoader.state_dict), or None."""
    loop = (checkpoint.get("loops") or {}).get("fit_loop") or {}
    loaders = (loop.get("state_dict") or {}).get("combined_loader")
    state = loaders[0] if isinstance(loaders, list) and loaders else None
    return state if isinstance(state, dict) else None


def saved_data_order(checkpoint: dict) -> int | None:
    """The checksum of the batch order of the epoch a checkpoint stopped in (None: not recorded)."""
    state = _loader_state(checkpoint)
    return int(state["order"]) if state is not None and state.get("order") is not None else None


def saved_data_place(checkpoint: dict) -> tuple[int, int] | None:
    """Where a checkpoint's training loader stood (epoch, batches of it trained), as the loader recorded it
    (None: not recorded)."""
    state = _loader_state(checkpoint)
    if state is None or "epoch" not in state or "batches_done" not in state:
        return None
    return int(state["epoch"]), int(state["batches_done"])
