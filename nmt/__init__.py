"""nmt: scratch-built sequence-to-sequence models for machine translation research."""

__version__ = "0.1.0"
