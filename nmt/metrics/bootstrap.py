"""Paired bootstrap resampling of test sentences (Koehn 2004): is one system's corpus score better than
another's on the same sentences?"""

import statistics
from collections.abc import Sequence


def _metric(name: str, tokenize: str):
    import sacrebleu

    if name == "chrf":
        return sacrebleu.metrics.CHRF()
    if name == "bleu":
        return sacrebleu.metrics.BLEU(tokenize=tokenize)
    raise ValueError(f"metric={name!r} is not one of ['bleu', 'chrf']")


def paired_bootstrap(
    baseline: Sequence[Sequence[str]],
    system: Sequence[Sequence[str]],
    references: Sequence[str],
    metric: str = "bleu",
    tokenize: str = "13a",
    n_samples: int = 1000,
    seed: int = 12345,
) -> float:
    """p-value of the paired bootstrap resampling test (Koehn 2004) of ``system`` against ``baseline``.

    ``baseline`` and ``system`` hold one list of hypotheses per seed (seeds paired), all over the same
    ``references``. The test resamples *test sentences*: each resample draws sentence indices once and
    scores every seed's output on those sentences, a system's score being the mean over its seeds. Seeds
    are repeated runs on the same sentences, not more sentences, so adding seeds that change nothing
    leaves the p-value unchanged. With one seed this is exactly sacreBLEU's ``--paired-bs`` (same
    resampling indices for the same seed, same statistic, same p-value) except on exact ties (below); the
    seed is passed directly, no process-wide state changes.
    """
    import numpy as np

    if len(baseline) != len(system) or not baseline:
        raise ValueError(f"paired_bootstrap needs the same seeds on both sides; got {len(baseline)} and {len(system)}")
    scorer = _metric(metric, tokenize)
    refs = [list(references)]
    for hyps in (*baseline, *system):
        if len(hyps) != len(references):
            raise ValueError(f"{len(hyps)} hypotheses for {len(references)} references")
    base_stats = [np.array(scorer._extract_corpus_statistics(list(h), refs), dtype="float32") for h in baseline]
    sys_stats = [np.array(scorer._extract_corpus_statistics(list(h), refs), dtype="float32") for h in system]

    def score(stats_per_seed, idxs=None) -> float:
        sums = [(s if idxs is None else s[idxs]).sum(0) for s in stats_per_seed]
        return statistics.fmean(scorer._compute_score_from_stats(x).score for x in sums)

    real = abs(score(base_stats) - score(sys_stats))
    rng = np.random.default_rng(seed)
    n = len(references)
    idxs = rng.choice(n, size=(n_samples, n), replace=True)
    diffs = np.array([abs(score(sys_stats, i) - score(base_stats, i)) for i in idxs])
    centred = diffs - diffs.mean()
    # sacreBLEU counts centred > real; >= differs only on exact ties, where it must: two systems scoring
    # the same on every resample (identical outputs, or both 0 BLEU) get p = 1, not 1 / (n_samples + 1)
    return float((np.sum(centred >= real) + 1) / (n_samples + 1))
