"""Paired approximate randomisation of two systems' outputs on the same test sentences (Noreen 1989;
Riezler and Maxwell 2005; sacreBLEU's ``--paired-ar``): could the difference in corpus score between the
two sets of outputs have arisen by chance, given these outputs?

The test works on per-sentence sufficient statistics (BLEU's n-gram matches and counts, chrF's character
and word n-gram counts), so it needs no text once they are extracted: a sweep keeps them in a small file
and re-reports without the runs' outputs. It answers a question about *trained models*: another seed of
the same configurations would give other outputs, which this test does not see (a sweep compares
configurations with a test over seeds; this one is labelled as conditional on the models).
"""

import math
from collections.abc import Sequence

import numpy as np

METRICS = ("bleu", "chrf")


def scorer(metric: str = "bleu", tokenize: str = "13a", lowercase: bool = False):
    """sacreBLEU's metric; ``lowercase`` ignores case (it only changes the statistics, not the score formula)."""
    import sacrebleu

    if metric == "chrf":
        return sacrebleu.metrics.CHRF(lowercase=lowercase)
    if metric == "bleu":
        # tokenize="none": texts tokenised beforehand (the lowercased tokenised BLEU), no warning about it
        return sacrebleu.metrics.BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    raise ValueError(f"metric={metric!r} is not one of {list(METRICS)}")


def sentence_statistics(
    hypotheses: Sequence[str],
    references: Sequence[str],
    metric: str = "bleu",
    tokenize: str = "13a",
    lowercase: bool = False,
) -> np.ndarray:
    """(sentences, statistics) integer array: each sentence's sufficient statistics for ``metric`` (ignoring
    case with ``lowercase``: a model that writes lowercase text); their column sums give the corpus score
    (:func:`corpus_score`)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    stats = scorer(metric, tokenize, lowercase)._extract_corpus_statistics(list(hypotheses), [list(references)])
    return np.asarray(stats, dtype=np.int64).reshape(len(hypotheses), -1)


def corpus_score(summed: np.ndarray, metric: str = "bleu", tokenize: str = "13a") -> float:
    """The corpus score from summed sentence statistics (what sacreBLEU's corpus_score computes)."""
    return scorer(metric, tokenize)._compute_score_from_stats(np.asarray(summed, dtype=float)).score


def corpus_scores(summed: np.ndarray, metric: str = "bleu", tokenize: str = "13a") -> np.ndarray:
    """Corpus scores of many rows of summed statistics (rows, statistics) at once. BLEU is computed here
    with sacreBLEU's formula (exp smoothing, brevity penalty, four orders), vectorised; chrF row by row."""
    summed = np.asarray(summed, dtype=float)
    if metric != "bleu":
        score = scorer(metric, tokenize)._compute_score_from_stats
        return np.array([score(row).score for row in summed])
    order = (summed.shape[1] - 2) // 2
    sys_len, ref_len = summed[:, 0], summed[:, 1]
    correct, total = summed[:, 2 : 2 + order], summed[:, 2 + order :]
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        counted = np.cumprod(total > 0, axis=1).astype(bool)  # sacreBLEU stops at the first order with no n-gram
        unmatched = (correct == 0) & counted
        smoothing = 2.0 ** np.cumsum(unmatched, axis=1)  # exp smoothing: 1/2, 1/4, ... for unmatched orders
        precisions = np.where(unmatched, 100.0 / (smoothing * total), 100.0 * correct / total)
        precisions = np.where(counted, precisions, 0.0)
        logs = np.where(precisions > 0, np.log(np.where(precisions > 0, precisions, 1.0)), -9999999999.0)
    scores = brevity * np.exp(logs.sum(axis=1) / order)
    return np.where(correct.any(axis=1), scores, 0.0)


def samples_for(comparisons: int, alpha: float = 0.05, minimum: int = 10_000) -> int:
    """Trials enough for ``comparisons`` Holm-adjusted tests: the smallest attainable p, 1 / (trials + 1),
    is at most a twentieth of the strictest Holm threshold alpha / comparisons."""
    return max(minimum, math.ceil(20 * max(comparisons, 1) / alpha))


def paired_randomization(
    baseline: Sequence[np.ndarray],
    system: Sequence[np.ndarray],
    metric: str = "bleu",
    tokenize: str = "13a",
    n_samples: int = 10_000,
    seed: int = 12345,
) -> float:
    """Two-sided p-value of the paired approximate randomisation test of ``system`` against ``baseline``.

    Each side holds one (sentences, statistics) array per seed (:func:`sentence_statistics`), seeds paired.
    A trial swaps the two sides' outputs of each sentence with probability 1/2 (the same sentences swapped
    for every seed pair) and scores both pseudo-systems; a side's score is the mean over its seeds. p is
    (trials whose |difference| reaches the observed one + 1) / (trials + 1): exact under the null
    hypothesis that the outputs are exchangeable, so never below 1 / (n_samples + 1). With one seed this is
    sacreBLEU's ``--paired-ar`` (same trials for the same seed) except on exact ties, which count here (two
    identical outputs give p = 1, not the smallest p).
    """
    if len(baseline) != len(system) or not baseline:
        raise ValueError(
            f"paired_randomization needs the same seeds on both sides; got {len(baseline)} and {len(system)}"
        )
    shapes = {np.shape(s) for s in (*baseline, *system)}
    if len(shapes) != 1:
        raise ValueError(f"every side needs the statistics of the same sentences; got shapes {sorted(shapes)}")
    rng = np.random.default_rng(seed)
    n_sentences = np.shape(baseline[0])[0]
    keep = rng.integers(2, size=(n_samples, n_sentences), dtype=bool)  # sacreBLEU's draw for one seed
    swap = ~keep
    sums = np.stack([np.asarray(x, dtype=float).sum(0) for x in (*baseline, *system)])
    totals = corpus_scores(sums, metric, tokenize)
    observed = abs(float(np.mean(totals[: len(baseline)])) - float(np.mean(totals[len(baseline) :])))
    side_a, side_b = np.zeros(n_samples), np.zeros(n_samples)
    for b, s in zip(baseline, system, strict=True):
        b, s = np.asarray(b, dtype=float), np.asarray(s, dtype=float)
        side_a += corpus_scores(keep @ b + swap @ s, metric, tokenize)
        side_b += corpus_scores(swap @ b + keep @ s, metric, tokenize)
    trials = np.abs(side_a - side_b) / len(baseline)
    reached = np.sum((trials > observed) | np.isclose(trials, observed, rtol=0, atol=1e-9))
    return float((reached + 1) / (n_samples + 1))
