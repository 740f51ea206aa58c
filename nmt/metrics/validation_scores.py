"""Validation's decoded scores of a batch, as sentence statistics: BLEU, chrF and the lowercased tokenised
BLEU, each summed over the batch for :class:`~nmt.metrics.streaming.SacreScore` to add up.

Computing them is host work in Python (chrF's character n-grams most of it), so the translation task runs it
beside the decoding: in a worker thread on a CPU, in a worker process on a GPU (``validation.scores_in``,
:mod:`nmt.metrics.score_jobs`).
A worker process (:class:`ScoringProcess`) builds its own scorers from a :class:`ScoreSpec` as it starts and
keeps them, with their caches of the references, from one validation to the next.
"""

import collections
import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

# (this module imports nothing heavy at its top: run as the worker, it first moves the process's stdout out of
# the way of its answers, then imports the scorers)

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
        from nmt.metrics.corpus import bleu_tokenizer, tokenized_lowercase_scoring
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


class ScoringProcess:
    """A worker process computing batches' statistics for one :class:`ScoreSpec`, with an executor's
    ``submit`` and ``shutdown``. It runs this module's :func:`serve`, which builds the scorers as it starts, not
    the caller's main script as a process of ``multiprocessing`` would (a script without a main guard would run
    again in it); jobs and answers travel pickled through its stdin and stdout, written and read by two
    threads of the caller, so that a submit never waits for the worker. It ignores the signals that stop a
    run gracefully (Ctrl-C, a cluster's SIGTERM or SIGUSR1: the run still validates before it stops) and
    ends when its stdin closes (the caller's shutdown, or its death). Once it has ended, for whatever
    reason, every job still pending and every later submit fails at once, naming why: no wait is left
    without an answer."""

    SHUTDOWN_GRACE_S = 10.0  # after shutdown: a worker still alive then (its stdin held open) is killed

    def __init__(self, spec: ScoreSpec) -> None:
        self.spec = spec
        package_root = str(Path(__file__).resolve().parents[2])  # where ``nmt`` is imported from here
        self._process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_MAIN, package_root],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C goes to the run, which decides when to stop
        )
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # what the writer sends; None: close stdin
        self._pending: collections.deque[Future] = collections.deque()  # answered in the order sent
        self._lock = threading.Lock()
        self._ended: str | None = None  # why the worker no longer answers
        self._jobs.put(spec)
        threading.Thread(target=self._write, name="validation-scores-writer", daemon=True).start()
        threading.Thread(target=self._read, name="validation-scores-reader", daemon=True).start()

    def submit(self, hypotheses: Sequence[str], references: Sequence[str]) -> Future:
        job = Future()
        with self._lock:
            if self._ended is not None:
                job.set_exception(RuntimeError(self._ended))
                return job
            self._pending.append(job)
            self._jobs.put((list(hypotheses), list(references)))  # in the order of the pending jobs
        return job

    def shutdown(self) -> None:
        """No more jobs: the worker ends once it has answered those sent (its stdin closed), or is killed
        after a grace period."""
        self._jobs.put(None)
        threading.Thread(target=self._reap, name="validation-scores-reaper", daemon=True).start()

    def _reap(self) -> None:
        try:
            self._process.wait(timeout=self.SHUTDOWN_GRACE_S)
        except subprocess.TimeoutExpired:
            self._process.kill()

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
        why = None
        while why is None:
            try:
                ok, value = pickle.load(stdout)
                with self._lock:
                    job = self._pending.popleft()
            except EOFError:
                break
            except Exception as err:  # noqa: BLE001 - an answer out of step or unreadable: the worker is stopped
                why = f"its answer could not be read ({type(err).__name__}: {err})"
                self._process.kill()
                break
            if job.set_running_or_notify_cancel():  # a job cancelled meanwhile takes no answer
                job.set_result(value) if ok else job.set_exception(RuntimeError(f"validation's scoring: {value}"))
        code = self._process.wait()
        with self._lock:
            self._ended = f"validation's scoring process ended (exit code {code}): {why or 'no answer'}"
            pending, self._pending = list(self._pending), collections.deque()
        for job in pending:
            if job.set_running_or_notify_cancel():
                job.set_exception(RuntimeError(self._ended))


# the worker's entry: the package's root first on its path (the caller's own ``nmt``, whatever the cwd)
_WORKER_MAIN = "import sys; sys.path.insert(0, sys.argv[1]); from nmt.metrics.validation_scores import serve; serve()"


def serve() -> None:
    """The worker's loop: a :class:`ScoreSpec`, then (hypotheses, references) jobs until stdin closes, each
    answered with (True, statistics) or (False, the error's text with its traceback)."""
    answers = os.fdopen(os.dup(1), "wb")  # its own descriptor: whatever else writes to stdout goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    jobs = sys.stdin.buffer
    try:  # built before the first batch arrives (while the run starts)
        scorer, failure = BatchScorer(pickle.load(jobs)), None
    except Exception as err:  # noqa: BLE001 - every batch is answered with it
        scorer, failure = None, f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    while True:
        try:
            hypotheses, references = pickle.load(jobs)
        except EOFError:
            return
        try:
            if scorer is None:
                raise RuntimeError(f"its scorers could not be built: {failure}")
            answer = (True, scorer.statistics(hypotheses, references))
        except Exception as err:  # noqa: BLE001 - raised in the caller, where the jobs are collected
            answer = (False, f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
        answers.write(pickle.dumps(answer))
        answers.flush()
