"""Using a trained model: loading a checkpoint (config, tokenizers, weights, task) on any machine."""
