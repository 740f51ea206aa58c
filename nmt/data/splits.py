"""Deterministic, leak-free train/valid/test splits for corpora that come without one: no source sentence and
no reference in two splits, the same split for both directions of a pair."""

import random
from collections.abc import Callable, Sequence

Reading = Callable[[list[str]], list[str]]  # sentences -> as the tokenizer reads them


def pool_drops(src: Sequence[str], tgt: Sequence[str], reading: Reading | None = None) -> tuple[int, int]:
    """What :func:`seeded_split` leaves out of a pool of pairs, for the data report: (pairs with an empty
    or blank side, copies of an earlier pair as ``reading`` reads them)."""
    kept = [(s, t) for s, t in zip(src, tgt, strict=True) if s.strip() and t.strip()]
    return len(src) - len(kept), len(kept) - len(_unique(kept, reading))


def _unique(pairs: Sequence[tuple[str, str]], reading: Reading | None) -> list[tuple[str, str]]:
    """The first of each set of pairs that read alike (both sides), in the pairs' order."""
    if reading is None:
        return list(dict.fromkeys(pairs))
    first: dict[tuple[str, str], tuple[str, str]] = {}
    for pair, read in zip(pairs, read_pairs(pairs, reading), strict=True):
        first.setdefault(read, pair)
    return list(first.values())


def read_pairs(pairs: Sequence[tuple[str, str]], reading: Reading) -> list[tuple[str, str]]:
    """Each pair as the tokenizer reads it (one call per side: the normaliser takes a whole list at once)."""
    sides = [reading([pair[side] for pair in pairs]) for side in (0, 1)]
    return list(zip(*sides, strict=True))


def check_split_sizes(valid_size, test_size, max_samples=None) -> None:
    """The sizes of a seeded split, refused at start-up. Validation needs pairs (early stopping, the best
    checkpoint); a test set may be left out (``test_size=0``), which the run's own check then holds to
    ``test_after_training=false`` (nmt.training.config_task)."""
    for key, size, least in (("valid_size", valid_size, 1), ("test_size", test_size, 0)):
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < least):
            also = " (0: no test set, with test_after_training=false)" if least == 0 else ""
            raise ValueError(
                f"data.{key}={size!r}: the pairs a seeded split sets aside must be a number >= {least}{also}"
            )
    whole = isinstance(max_samples, int) or (isinstance(max_samples, float) and max_samples.is_integer())
    if max_samples is not None and (not whole or isinstance(max_samples, bool)):  # 2e5 reads as a float: taken
        raise ValueError(f"data.max_samples={max_samples!r}: must be a whole number of pairs, or null for every pair")
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
    reading: Reading | None = None,
) -> dict[str, tuple[list[str], list[str]]]:
    """Split pairs into 'train', 'val' and 'test' by a seeded shuffle of *groups of pairs*: identical pairs
    are kept once, and pairs that share a source or a target sentence, directly or through other pairs,
    form one group that goes to one split whole. So no source sentence and no reference is in two splits:
    a corpus with several translations of one sentence (Tatoeba's du/Sie forms, a Chinese line in simplified
    and traditional script with one English reference) keeps them together, where a split by source alone
    let a test reference be a training target. The groups and their order do not depend on the direction,
    so de->en and en->de (or the two directions of any pair) get the same split, mirrored. A split takes the
    next group that fits what is left of its size, so sizes are exact while small groups remain (fewer is
    said); a group larger than that goes on to training. ``max_samples`` caps the pairs used in all (a
    seeded subset; a group larger than what is left of the cap is then in no split).
    Pairs with an empty or blank side are in no split (the data report counts them).
    ``reading`` (the tokenizer's normalisation, :func:`nmt.data.tokenizer.reading_form`) says when two
    sentences are one: pairs that read alike are kept once (the first), and sentences that read alike join
    their groups, so a lowercasing model's test references are not its training targets in other case."""
    pairs = _unique([(s, t) for s, t in zip(src, tgt, strict=True) if s.strip() and t.strip()], reading)
    groups = _groups(read_pairs(pairs, reading) if reading else pairs)
    # an order of the groups that the direction does not change (each pair written with its sentences
    # sorted), then the seeded shuffle
    groups.sort(key=lambda group: min(tuple(sorted(pairs[i])) for i in group))
    random.Random(seed).shuffle(groups)
    usable = len(pairs)
    budget = {
        "test": test_size,
        "val": valid_size,
        "train": max_samples - valid_size - test_size if max_samples else usable,
    }
    taken = [False] * len(groups)
    splits: dict[str, tuple[list[str], list[str]]] = {}
    for name in ("test", "val", "train"):
        chosen: list[int] = []
        left = budget[name]
        for g, group in enumerate(groups):
            if left <= 0:
                break
            if not taken[g] and len(group) <= left:
                taken[g] = True
                chosen += group
                left -= len(group)
        splits[name] = ([pairs[i][0] for i in chosen], [pairs[i][1] for i in chosen])
    largest = max(map(len, groups), default=0)
    if not splits["train"][0]:
        raise ValueError(
            f"nothing left for training after taking {valid_size} validation and {test_size} test pairs out of "
            f"{usable} unique pairs (in groups sharing a sentence, the largest of {largest}): lower "
            "data.valid_size / data.test_size" + (", or raise data.max_samples" if max_samples else "")
        )
    for name, key in (("test", "test_size"), ("val", "valid_size")):
        if len(splits[name][0]) < budget[name]:  # the groups left could not fill it: said, not hidden
            print(
                f"warning: data.{key}={budget[name]}: the {name} split holds {len(splits[name][0])} pairs; pairs "
                f"that share a sentence go to one split whole, and the groups left did not fit (the largest "
                f"holds {largest})"
            )
    return splits


def _groups(pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
    """The indices of ``pairs`` in groups: two pairs are in one group when they share their source or their
    target sentence, directly or through others (union-find), each group in the pairs' order."""
    parent = list(range(len(pairs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for side in (0, 1):
        first: dict[str, int] = {}
        for i, pair in enumerate(pairs):
            j = first.setdefault(pair[side], i)
            if j != i:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(pairs)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())
