"""Deterministic, leak-free train/valid/test splits for corpora that come without one."""

import random
from collections.abc import Sequence


def pool_drops(src: Sequence[str], tgt: Sequence[str]) -> tuple[int, int]:
    """What :func:`seeded_split` leaves out of a pool of pairs, for the data report: (pairs with an empty
    or blank side, copies of an earlier pair)."""
    kept = [(s, t) for s, t in zip(src, tgt, strict=True) if s.strip() and t.strip()]
    return len(src) - len(kept), len(kept) - len(set(kept))


def check_split_sizes(valid_size, test_size, max_samples=None) -> None:
    """The sizes of a seeded split, refused at start-up. Validation needs pairs (early stopping, the best
    checkpoint); a test set may be left out (``test_size=0``), which the run's own check then holds to
    ``test_after_training=false`` (nmt.training.config)."""
    for key, size, least in (("valid_size", valid_size, 1), ("test_size", test_size, 0)):
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < least):
            also = " (0: no test set, with test_after_training=false)" if least == 0 else ""
            raise ValueError(
                f"data.{key}={size!r}: the pairs a seeded split sets aside must be a number >= {least}{also}"
            )
    if max_samples is not None and max_samples <= (valid_size or 0) + (test_size or 0):
        raise ValueError(
            f"data.max_samples={max_samples} leaves no training pairs after data.valid_size={valid_size} and "
            f"data.test_size={test_size}: raise it above {(valid_size or 0) + (test_size or 0)}, or null for every pair"
        )


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
    in two splits. ``max_samples`` caps the pairs used in all (a random subset, also seeded). Pairs with an
    empty or blank side count towards no split's size (they were dropped from its parts after the split, and a
    corpus with many, such as Europarl, gave one group of them, an empty source, a split's whole share); the
    shuffle is of the same sources as before, so a corpus without such pairs splits as it always did."""
    groups: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for s, t in zip(src, tgt, strict=True):
        if (s, t) not in seen:
            seen.add((s, t))
            groups.setdefault(s, []).append(t)
    sources = list(groups)
    random.Random(seed).shuffle(sources)
    kept = {source: [t for t in targets if source.strip() and t.strip()] for source, targets in groups.items()}
    splits: dict[str, tuple[list[str], list[str]]] = {name: ([], []) for name in ("test", "val", "train")}
    usable = sum(len(targets) for targets in kept.values())
    budget = {
        "test": test_size,
        "val": valid_size,
        "train": max_samples - valid_size - test_size if max_samples else usable,
    }
    order = iter(sources)
    for name in ("test", "val", "train"):
        out_src, out_tgt = splits[name]
        while len(out_src) < budget[name]:
            source = next(order, None)
            if source is None:
                break
            out_src += [source] * len(kept[source])
            out_tgt += kept[source]
    if not splits["train"][0]:
        raise ValueError(
            f"nothing left for training after taking {valid_size} validation and {test_size} test pairs out of "
            f"{usable} unique pairs: lower data.valid_size / data.test_size"
        )
    return splits
