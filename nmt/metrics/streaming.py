"""Validation's BLEU and chrF, computed as sacreBLEU computes the test's, batch by batch.

Each batch adds its sentences' sufficient statistics (n-gram matches and counts, extracted by sacreBLEU
itself) to a running sum; the processes of a multi-process run sum theirs (torchmetrics' reduction), and
the corpus score comes from the sum, with sacreBLEU's formula and smoothing. So a validation score is the
number ``evaluate.py`` gives for the same outputs. torchmetrics' own CHRFScore counts n-grams in Python
objects per sentence pair, many times slower than sacreBLEU's extraction: a host cost that every decoded
validation paid, longer than a small model's training epoch on a GPU.

Imported only where validation metrics are built: torchmetrics loads scipy, which inference does not need.
"""

from collections.abc import Sequence

import torch
from torchmetrics import Metric

from nmt.metrics.randomization import METRICS, scorer

# batches whose references' n-grams are kept: validation scores the same batches every epoch, and
# extracting the references' n-grams is about half of scoring a batch
REFERENCE_BATCHES_KEPT = 64


class SacreScore(Metric):
    """sacreBLEU's corpus BLEU or chrF (``metric``) over every update since the last reset, as a fraction
    (torchmetrics' text metrics' convention: 0.4123 for 41.23). ``update(hypotheses, references)`` takes
    one list of references per hypothesis, as torchmetrics' SacreBLEUScore does."""

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, metric: str = "bleu", tokenize: str = "13a", lowercase: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        if metric not in METRICS:
            raise ValueError(f"metric={metric!r} is not one of {list(METRICS)}")
        self.metric, self.tokenize, self.lowercase = metric, tokenize, lowercase
        self._scorer = scorer(metric, tokenize, lowercase)
        width = len(self._scorer._extract_corpus_statistics(["a"], [["a"]])[0])
        # integer counts: exact at any corpus size, and a dtype every device has (MPS has no float64)
        self.add_state("stats", default=torch.zeros(width, dtype=torch.long), dist_reduce_fx="sum")
        self._references: dict[tuple, list] = {}  # a batch's references -> sacreBLEU's cache of their n-grams

    def update(
        self,
        hypotheses: Sequence[str] = (),
        references: Sequence[Sequence[str]] = (),
        statistics: torch.Tensor | None = None,
    ) -> None:
        """Add a batch: its hypotheses and references, or its summed statistics (:meth:`statistics`, computed
        elsewhere) without them."""
        summed = self.statistics(hypotheses, references) if statistics is None else statistics
        if summed is not None:
            self.stats += summed.to(self.stats.device)

    def add(self, summed: torch.Tensor) -> None:
        """Add the summed sentence statistics of a batch (:meth:`statistics`), through :meth:`update`, so
        that torchmetrics counts the update and forgets a computed value."""
        self.update(statistics=summed)

    def statistics(self, hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> torch.Tensor | None:
        """A batch's sentence statistics, summed, on the host (None for no sentences): the costly part of an
        update, touching nothing but the references' cache, so that a worker thread may compute it while
        the caller goes on (one thread at a time: the scorer holds the batch's references)."""
        if len(hypotheses) != len(references):
            raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference lists")
        if not hypotheses:
            return None
        counts = {len(refs) for refs in references}
        if len(counts) != 1:
            raise ValueError(f"every hypothesis needs the same number of references; got {sorted(counts)}")
        streams = [list(stream) for stream in zip(*references, strict=True)]  # sacreBLEU: one list per reference
        key = tuple(map(tuple, streams))
        cached = self._references.get(key)
        if cached is None:
            cached = self._scorer._cache_references(streams)
            if len(self._references) < REFERENCE_BATCHES_KEPT:  # full: the first batches stay (each epoch's)
                self._references[key] = cached
        self._scorer._ref_cache = cached  # what sacreBLEU reads when no references are passed
        rows = self._scorer._extract_corpus_statistics(list(hypotheses), None)
        return torch.tensor(rows, dtype=torch.long).sum(dim=0)

    def compute(self) -> torch.Tensor:
        score = self._scorer._compute_score_from_stats(self.stats.cpu().double().numpy()).score
        return torch.tensor(score / 100.0, dtype=torch.float32)
