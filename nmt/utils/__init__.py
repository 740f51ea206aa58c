"""What every room may use: atomic file writes, Hydra instantiation, attention heatmaps."""
