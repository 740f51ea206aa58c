"""Validation's decoded scores of a batch, as sentence statistics: BLEU, chrF and the lowercased tokenised
BLEU, each summed over the batch for :class:`~nmt.metrics.streaming.SacreScore` to add up.

Computing them is host work in Python (chrF's character n-grams most of it), so the translation task runs it
beside the decoding: in a worker thread on a CPU, in a worker process on a GPU (``TranslationTask.scores_in``).
A worker process (:class:`ScoringProcess`) builds its own scorers from a :class:`ScoreSpec` and keeps them,
with their caches of the references, from one validation to the next.
"""

import collections
import contextlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from nmt.metrics.corpus import bleu_tokenizer, tokenized_lowercase_scoring

# the references' tokenised forms kept (validation scores the same references every epoch); a bound for
# validation sets far larger than any here
PREPARED_KEPT = 2**17


@dataclass(frozen=True)
class ScoreSpec:
    """What the scores of a run's validation are: the target language, and whether the model writes
    lowercase text (then BLEU and chrF ignore case)."""

    tgt_lang: str
    lowercase: bool


class BatchScorer:
    """The three scorers of a :class:`ScoreSpec`: ``metrics`` (the SacreScore metrics whose states the
    statistics are added to) and :meth:`statistics` (a batch's statistics, touching no metric state)."""

    def __init__(self, spec: ScoreSpec) -> None:
        from nmt.metrics.streaming import SacreScore  # torchmetrics: only where validation runs

        tok_lc, self.prepare = tokenized_lowercase_scoring(spec.tgt_lang)
        self.metrics = {
            "bleu": SacreScore("bleu", bleu_tokenizer(spec.tgt_lang), spec.lowercase),
            "chrf": SacreScore("chrf", lowercase=spec.lowercase),
            # every model by the lowercased tokenised BLEU too: the measure that cased and lowercase runs
            # share (and the one Multi30k papers report), so that validation can choose between them
            "bleu_tok_lc": SacreScore("bleu", **tok_lc),
        }
        self._prepared: dict[str, str] = {}  # the same references every validation: tokenised once

    def statistics(self, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
        """{metric name: the batch's summed statistics (a tensor on the host), or None for no sentences}."""
        prepare, prepared = self.prepare, self._prepared
        if len(prepared) > PREPARED_KEPT:
            prepared.clear()
        for r in references:
            if r not in prepared:
                prepared[r] = prepare(r)
        metrics = self.metrics
        return {
            "bleu": metrics["bleu"].statistics(hypotheses, [[r] for r in references]),
            "chrf": metrics["chrf"].statistics(hypotheses, [[r] for r in references]),
            "bleu_tok_lc": metrics["bleu_tok_lc"].statistics(
                [prepare(h) for h in hypotheses], [[prepared[r]] for r in references]
            ),
        }


_WORKER_SCORERS: dict[ScoreSpec, BatchScorer] = {}  # a worker process's scorers, kept between validations


def statistics_in_worker(spec: ScoreSpec, hypotheses: list[str], references: list[str]) -> dict:
    """:meth:`BatchScorer.statistics` in a worker process, with the scorers it keeps for ``spec`` (no
    sentences: the scorers made, nothing scored, so that a started worker is ready for the first batch)."""
    scorer = _WORKER_SCORERS.get(spec)
    if scorer is None:
        scorer = _WORKER_SCORERS[spec] = BatchScorer(spec)
    return scorer.statistics(hypotheses, references)


class ScoringProcess:
    """A worker process computing batches' statistics for one :class:`ScoreSpec`, with an executor's
    ``submit`` and ``shutdown``. It runs this module (``python -m nmt.metrics.validation_scores``), not the
    caller's main script as a process of ``multiprocessing`` would (a script without a main guard would run
    again in it); jobs and results travel pickled through its stdin and stdout, written and read by two
    threads of the caller, so that a submit never waits for the worker."""

    def __init__(self, spec: ScoreSpec) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # where ``nmt`` is imported from here
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "nmt.metrics.validation_scores"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # what the writer sends; None: close stdin
        self._pending: collections.deque[Future] = collections.deque()  # answered in the order sent
        self._lock = threading.Lock()
        self._jobs.put(spec)
        threading.Thread(target=self._write, name="validation-scores-writer", daemon=True).start()
        threading.Thread(target=self._read, name="validation-scores-reader", daemon=True).start()

    def submit(self, hypotheses: list[str], references: list[str]) -> Future:
        job = Future()
        with self._lock:
            self._pending.append(job)
        self._jobs.put((list(hypotheses), list(references)))
        return job

    def shutdown(self) -> None:
        """No more jobs: the worker ends once it has answered those sent (its stdin closed)."""
        self._jobs.put(None)

    def _write(self) -> None:
        stdin = self._process.stdin
        try:
            while (job := self._jobs.get()) is not None:
                pickle.dump(job, stdin)
                stdin.flush()
        except OSError:  # the worker ended: the reader fails what is pending
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _read(self) -> None:
        stdout = self._process.stdout
        while True:
            try:
                ok, value = pickle.load(stdout)
            except (EOFError, OSError, pickle.UnpicklingError):
                break
            with self._lock:
                job = self._pending.popleft()
            job.set_result(value) if ok else job.set_exception(value)
        code = self._process.wait()
        with self._lock:
            pending, self._pending = list(self._pending), collections.deque()
        for job in pending:
            job.set_exception(RuntimeError(f"validation's scoring process ended (exit code {code}) before its answer"))


def _serve() -> None:
    """The worker's loop: a :class:`ScoreSpec`, then (hypotheses, references) jobs until stdin closes, each
    answered with (True, statistics) or (False, the exception)."""
    answers = sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever an import prints must not enter the answers
    jobs = sys.stdin.buffer
    spec = pickle.load(jobs)
    while True:
        try:
            hypotheses, references = pickle.load(jobs)
        except EOFError:
            return
        try:
            answer = (True, statistics_in_worker(spec, hypotheses, references))
        except Exception as err:  # noqa: BLE001 - raised in the caller, where the jobs are collected
            answer = (False, err)
        try:
            data = pickle.dumps(answer)
        except Exception as err:  # noqa: BLE001 - an exception that does not pickle: its text does
            data = pickle.dumps((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]} ({err})")))
        answers.write(data)
        answers.flush()


if __name__ == "__main__":
    _serve()
