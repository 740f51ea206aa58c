"""Scoring checkpoints and saved outputs: the function behind evaluate.py, and the score command."""
