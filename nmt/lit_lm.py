"""The LightningModule of ``task=lm``: next-token training and perplexity over a whole split."""

import torch
from torchmetrics import SumMetric

from nmt.data.tokenizer import PAD_ID
from nmt.lit import TrainingModule


class LanguageModelModule(TrainingModule):
    """Trains p(w_t | w_<t) on windows of a token stream; validation reports the per-token loss, the
    perplexity exp(total NLL / total scored tokens) over the whole split (sums, not per-batch means, so
    a short last window weighs what its tokens weigh), and next-token accuracy."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.val_nll, self.val_tokens, self.val_correct = SumMetric(), SumMetric(), SumMetric()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor | None:
        logits = self.model(batch["input"])  # (batch, block, vocab)
        loss, _, tokens = self.loss(logits, batch["target"])
        if not self._check_loss(loss):
            return None
        self._log_training(loss, tokens)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        logits = self.model(batch["input"])
        _, nll, tokens = self.loss(logits, batch["target"])
        target = batch["target"]
        self.val_nll.update(nll)
        self.val_tokens.update(tokens)
        self.val_correct.update(((logits.argmax(dim=-1) == target) & (target != PAD_ID)).sum())

    def on_validation_epoch_end(self) -> None:
        tokens = self.val_tokens.compute().clamp(min=1)
        nll = self.val_nll.compute() / tokens
        self.log("val_loss", nll, prog_bar=True)
        self.log("val_ppl", torch.exp(nll), prog_bar=True)
        self.log("val_acc", self.val_correct.compute() / tokens)
        for metric in (self.val_nll, self.val_tokens, self.val_correct):
            metric.reset()
