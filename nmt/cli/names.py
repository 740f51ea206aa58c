"""The names like a misspelt one, as every command-line check suggests them."""

import difflib


def closest(key: str, names: list[str]) -> list[str]:
    """Up to three of ``names`` like ``key`` (difflib's ratio at least 0.6), only those nearly as like it as
    the likest: ``decode.beam_sise`` suggests ``decode.beam_size``, not ``decode.seed`` beside it."""
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    best = difflib.SequenceMatcher(None, key, close[0]).ratio() if close else 0.0
    return [name for name in close if difflib.SequenceMatcher(None, key, name).ratio() >= best - 0.1]
