"""Deterministic, leak-free train/valid/test splits for corpora that come without one."""

import random
from collections.abc import Sequence


def duplicate_pairs(src: Sequence[str], tgt: Sequence[str]) -> int:
    """How many pairs repeat an earlier one (the copies :func:`seeded_split` keeps once)."""
    return len(src) - len(set(zip(src, tgt, strict=True)))


def seeded_split(
    src: Sequence[str],
    tgt: Sequence[str],
    valid_size: int,
    test_size: int,
    seed: int = 1,
    max_samples: int | None = None,
) -> dict[str, tuple[list[str], list[str]]]:
    """Split pairs into 'train', 'val' and 'test' by a seeded shuffle of *source sentences*: identical
    pairs are kept once, and all pairs sharing a source go to the same split, so no source sentence is
    in two splits. ``max_samples`` caps the pairs used in all (a random subset, also seeded)."""
    groups: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for s, t in zip(src, tgt, strict=True):
        if (s, t) not in seen:
            seen.add((s, t))
            groups.setdefault(s, []).append(t)
    sources = list(groups)
    random.Random(seed).shuffle(sources)
    splits: dict[str, tuple[list[str], list[str]]] = {name: ([], []) for name in ("test", "val", "train")}
    budget = {
        "test": test_size,
        "val": valid_size,
        "train": max_samples - valid_size - test_size if max_samples else len(seen),
    }
    order = iter(sources)
    for name in ("test", "val", "train"):
        out_src, out_tgt = splits[name]
        while len(out_src) < budget[name]:
            source = next(order, None)
            if source is None:
                break
            out_src += [source] * len(groups[source])
            out_tgt += groups[source]
    if not splits["train"][0]:
        raise ValueError(
            f"nothing left for training after taking {valid_size} validation and {test_size} test pairs out of "
            f"{len(seen)} unique pairs: lower data.valid_size / data.test_size"
        )
    return splits
