"""Which sentences of an evaluation set the training text holds, known at evaluation without reading the
training corpus again (perhaps downloading it): training keeps an 8-byte hash of each distinct training
source and target in the run folder, and an evaluation counts the set's sentences found among them.

The data report at training counts this for the corpus's own validation and test sets; this serves every
other set scored later (``split=files:...``, ``iwslt16:...``, a corpus's other test sets)."""

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from nmt.data.tokenizer import reading_form
from nmt.utils.io import atomic_path

FILE = "train_sentences.npz"  # in the run folder, beside data_report.json


def sentence_hashes(lines: Iterable[str]) -> np.ndarray:
    """Each line's first 8 bytes of BLAKE2b as an unsigned integer: (n,) uint64, in the lines' order. Two
    sentences share a hash by chance with odds of about n / 2^64 per sentence looked up."""
    lines = list(lines)
    digests = (
        int.from_bytes(hashlib.blake2b(line.encode("utf-8"), digest_size=8).digest(), "little") for line in lines
    )
    return np.fromiter(digests, dtype=np.uint64, count=len(lines))  # filled in place: no list of digests


def save_training_sentences(
    run_dir: Path, sources: Sequence[str], targets: Sequence[str], normalization: str | None = None
) -> None:
    """The distinct training sources' and targets' hashes, sorted, written atomically to ``run_dir/FILE``; with
    the tokenizer's ``normalization``, of the sentences as the model reads them (``reading_form``: runs of
    spaces, and case under a lowercasing one, make no other sentence), which a later set is read by too."""
    extra = {}
    if normalization is not None:
        reading = reading_form(normalization)
        sources, targets = reading(list(sources)), reading(list(targets))
        extra = {"normalization": np.array(normalization)}
    with atomic_path(Path(run_dir) / FILE) as tmp, open(tmp, "wb") as handle:
        np.savez(
            handle, sources=np.unique(sentence_hashes(sources)), targets=np.unique(sentence_hashes(targets)), **extra
        )


def shared_with_training(run_dir: Path, sources: Sequence[str], references: Sequence[str]) -> dict | None:
    """How many of the set's sources are training sources, and of its references training targets, as the
    data report counts them (a sentence as often as the set holds it); None when the run folder keeps no
    hashes (a run trained before they were kept, a checkpoint copied without its folder)."""
    path = Path(run_dir) / FILE
    if not path.is_file():
        return None
    with np.load(path) as kept:
        train_sources, train_targets = kept["sources"], kept["targets"]
        normalization = str(kept["normalization"]) if "normalization" in kept.files else None
    if normalization is not None:  # hashed as the model reads them (else as written: kept before it was)
        reading = reading_form(normalization)
        sources, references = reading(list(sources)), reading(list(references))
    return {
        "sources_also_in_train": int(np.isin(sentence_hashes(sources), train_sources, assume_unique=False).sum()),
        "targets_also_in_train": int(np.isin(sentence_hashes(references), train_targets).sum()),
    }
