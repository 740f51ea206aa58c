"""evaluate(cfg): everything ``evaluate.py`` does, as a plain function of its config.

The checkpoint alone says what it is (config, tokenizers, weights, task); its task decides what scoring
means (BLEU of decoded sentences, perplexity of a stream, ...) and which options apply."""

import torch
from omegaconf import DictConfig

from nmt.inference.loading import checkpoint_task, load_model


def evaluate(cfg: DictConfig) -> dict:
    """Score a split of a checkpoint's corpus, or use the model on new input, as its task does."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    task = checkpoint_task(cfg.ckpt_path)
    task.check_evaluation(cfg)
    return task.evaluate(cfg, lambda: load_model(cfg.ckpt_path, cfg.average_last, cfg.device))
