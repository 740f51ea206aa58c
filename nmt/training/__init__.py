"""Training a model: train(cfg), the Lightning module and trainer, callbacks, checkpoint writing, loggers,
optimisers and schedules, and the checks of a run's config."""
