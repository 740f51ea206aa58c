"""The one LightningModule that trains and validates every nmt model."""

import math

import lightning as L
import torch
from torchmetrics import SumMetric
from torchmetrics.text import CHRFScore, SacreBLEUScore
from torchmetrics.text.rouge import ROUGEScore

from nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from nmt.metrics import ROUGE_KEYS
from nmt.search import SearchConfig, decode

CHECKPOINT_KEY = "nmt"
CHECKPOINT_FORMAT = 1
# below this loss scale an fp16 overflow is no longer the scaler's business: the gradients themselves are
# non-finite (a scale of 1 means fp16 overflows even unscaled)
MIN_LOSS_SCALE = 1.0


class TrainingModule(L.LightningModule):
    """What every task's module shares: the optimiser and schedule, the guard against non-finite
    updates, and checkpoints that carry the resolved config and the tokenizers (plain data only).

    The model, loss, optimiser and schedule arrive built (or as factories), so nothing here depends on
    the architecture; a task adds its training and validation steps.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss: torch.nn.Module,
        optimizer,
        scheduler,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        config: dict,
        max_bad_steps: int = 10,
    ) -> None:
        super().__init__()
        self.model = model
        self.loss = loss
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.config = config
        self.max_bad_steps = max_bad_steps
        self.bad_steps = 0  # consecutive batches with a non-finite loss or gradient
        self.scaler_skips = 0  # 16-mixed: updates the loss scaler skipped after an overflow (not failures)
        self._rng_to_restore: torch.Tensor | None = None

    def _log_training(self, loss: torch.Tensor, tokens: torch.Tensor) -> None:
        self.log("train_loss", loss, prog_bar=True, batch_size=int(tokens))
        self.log("train_tokens", tokens.float(), reduce_fx="sum", on_step=False, on_epoch=True)
        self.log("lr", self.optimizers().param_groups[0]["lr"], on_step=True, on_epoch=False)

    def _check_loss(self, loss: torch.Tensor) -> bool:
        """False (and counted) when the loss is not finite: the step then returns None, and Lightning
        skips backward and the optimiser step."""
        if torch.isfinite(loss):
            return True
        self._bad_step(f"non-finite loss at step {self.global_step}")
        return False

    # ---- training ------------------------------------------------------------------------------
    def on_before_optimizer_step(self, optimizer) -> None:
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        if not grads:  # the batch was skipped (non-finite loss): nothing to check
            return
        # one fused kernel per dtype and device rather than one per parameter: on a GPU a small model's
        # step is bound by kernel launches
        norm = torch.linalg.vector_norm(torch.stack([n.float() for n in torch._foreach_norm(grads)]))
        if torch.isfinite(norm):
            self.bad_steps = 0  # the limit is on consecutive failures: a good update ends a streak
            self.log("grad_norm", norm, on_step=True, on_epoch=False)
            return
        scaler = self._grad_scaler()
        if scaler is not None and scaler.get_scale() >= MIN_LOSS_SCALE:
            # 16-mixed: Lightning unscales before this hook, so an fp16 overflow shows here as inf. The
            # scaler skips this update itself and lowers its scale; that is its normal working, not a
            # failure, and must not count (a long fp16 run has many of them)
            self.scaler_skips += 1
            return
        self._bad_step(f"non-finite gradient norm at step {self.global_step}")
        for p in self.parameters():
            p.grad = None  # optimisers skip parameters without a gradient: the step changes nothing

    def _grad_scaler(self):
        """The loss scaler of 16-mixed precision, or None."""
        return getattr(getattr(self._trainer, "precision_plugin", None), "scaler", None)

    def _bad_step(self, what: str) -> None:
        self.bad_steps += 1
        if self.bad_steps > self.max_bad_steps:
            raise FloatingPointError(
                f"{what} ({self.bad_steps} bad batches in a row, more than max_bad_steps={self.max_bad_steps}): "
                "lower the learning rate, clip gradients (trainer.gradient_clip_val) or use precision=32-true"
            )
        self.print(f"warning: {what}; batch skipped ({self.bad_steps}/{self.max_bad_steps} in a row allowed)")

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer, total_steps=self._planned_steps())
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _planned_steps(self) -> int:
        """Optimiser steps the run will take (for schedules that decay to the end). Counted from a fresh
        loader: Lightning's estimated_stepping_batches would build the training loader before a resumed
        run restores its position in the epoch."""
        trainer = self.trainer
        if trainer.max_steps and trainer.max_steps > 0:
            return trainer.max_steps
        batches = len(trainer.datamodule.train_dataloader())
        return math.ceil(batches / trainer.accumulate_grad_batches) * max(trainer.max_epochs or 1, 1)

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        if self._rng_to_restore is not None:
            # resumed mid-epoch: continue with the random numbers (dropout) the killed run would have used
            torch.set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    # ---- checkpoints: plain data only, so they load with weights_only=True --------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = {
            "format": CHECKPOINT_FORMAT,
            "config": self.config,
            "src_tokenizer": self.src_tokenizer.model_proto,
            "tgt_tokenizer": self.tgt_tokenizer.model_proto,
            "src_segmenter": self.src_tokenizer.segmenter.spec(),
            "tgt_segmenter": self.tgt_tokenizer.segmenter.spec(),
            "rng_state": torch.get_rng_state(),
            "bad_steps": self.bad_steps,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        section = checkpoint.get(CHECKPOINT_KEY, {})
        self._rng_to_restore = section.get("rng_state")
        self.bad_steps = section.get("bad_steps", 0)


class TranslationModule(TrainingModule):
    """Teacher-forced training with a (label-smoothed) loss; validation loss, perplexity, token accuracy,
    and every ``bleu_every_n_epochs`` epochs BLEU and chrF of decoded validation sentences."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss: torch.nn.Module,
        optimizer,
        scheduler,
        src_tokenizer: Tokenizer,
        tgt_tokenizer: Tokenizer,
        config: dict,
        val_search: SearchConfig,
        bleu_every_n_epochs: int = 1,
        max_bad_steps: int = 10,
        bleu_tokenize: str = "13a",
        rouge: bool = False,
    ) -> None:
        super().__init__(model, loss, optimizer, scheduler, src_tokenizer, tgt_tokenizer, config, max_bad_steps)
        self.val_search = val_search
        self.bleu_every_n_epochs = bleu_every_n_epochs
        # sums, not means, so that perplexity is exact per token even across processes
        self.val_nll, self.val_tokens, self.val_correct = SumMetric(), SumMetric(), SumMetric()
        self.val_bleu = SacreBLEUScore(tokenize=bleu_tokenize)
        self.val_chrf = CHRFScore(n_word_order=0)
        # summarisation: ROUGE-1/2/L F-measures of the decoded validation set
        self.val_rouge = ROUGEScore(rouge_keys=ROUGE_KEYS) if rouge else None
        self.val_samples: list[tuple[str, str, str]] = []

    # ---- training ------------------------------------------------------------------------------
    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        logits = self.model(batch["src"], batch["tgt_in"])  # (batch, tgt_len, vocab)
        loss, _, tokens = self.loss(logits, batch["tgt_out"])
        if not self._check_loss(loss):
            return None
        self._log_training(loss, tokens)
        return loss

    # ---- validation ----------------------------------------------------------------------------
    def decodes_this_epoch(self) -> bool:
        return self.bleu_every_n_epochs > 0 and (self.current_epoch + 1) % self.bleu_every_n_epochs == 0

    def translate(self, src: torch.Tensor, search: SearchConfig) -> list[str]:
        """A padded source batch -> detokenised translations."""
        return [self.tgt_tokenizer.decode(ids) for ids in decode(self.model, src, BOS_ID, EOS_ID, search)]

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits = self.model(batch["src"], batch["tgt_in"])
        _, nll, tokens = self.loss(logits, batch["tgt_out"])
        target = batch["tgt_out"]
        correct = ((logits.argmax(dim=-1) == target) & (target != PAD_ID)).sum()
        self.val_nll.update(nll)
        self.val_tokens.update(tokens)
        self.val_correct.update(correct)
        if self.decodes_this_epoch():
            hypotheses = self.translate(batch["src"], self.val_search)
            self.val_bleu.update(hypotheses, [[r] for r in batch["refs"]])
            self.val_chrf.update(hypotheses, [[r] for r in batch["refs"]])
            if self.val_rouge is not None:
                self.val_rouge.update(hypotheses, list(batch["refs"]))
            if batch_idx == 0:
                sources = [self.src_tokenizer.decode(s.tolist()) for s in batch["src"][:3]]
                self.val_samples = list(zip(sources, batch["refs"][:3], hypotheses[:3], strict=True))

    def on_validation_epoch_end(self) -> None:
        tokens = self.val_tokens.compute().clamp(min=1)
        nll = self.val_nll.compute() / tokens
        self.log("val_loss", nll, prog_bar=True)
        self.log("val_ppl", torch.exp(nll.clamp(max=50)))
        self.log("val_acc", self.val_correct.compute() / tokens)
        if self.decodes_this_epoch() and not self.trainer.sanity_checking:
            self.log("val_bleu", self.val_bleu.compute() * 100, prog_bar=True)
            self.log("val_chrf", self.val_chrf.compute() * 100)
            if self.val_rouge is not None:
                scores = self.val_rouge.compute()
                for key in ROUGE_KEYS:
                    self.log(f"val_{key}", scores[f"{key}_fmeasure"] * 100)
                self.val_rouge.reset()
            for logger in self.loggers:
                if hasattr(logger, "log_text") and self.val_samples:  # W&B: a table of sample translations
                    rows = [[self.current_epoch, *sample] for sample in self.val_samples]
                    logger.log_text("val_samples", columns=["epoch", "source", "reference", "hypothesis"], data=rows)
        for metric in (self.val_nll, self.val_tokens, self.val_correct, self.val_bleu, self.val_chrf):
            metric.reset()
