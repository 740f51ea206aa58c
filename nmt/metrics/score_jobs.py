"""Where validation's decoded scores are computed while the next batches decode, and the batches' jobs
pending until the epoch's end: inline, in a worker thread, or in a worker process
(``validation.scores_in``). Each process keeps its own thread, worker process and jobs: a forked process's
parent's thread does not run in it, and its parent's jobs never finish there."""

import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from nmt.metrics.validation_scores import BatchScorer, ScoreSpec, ScoringProcess

SCORES_IN = ("inline", "thread", "process")


class _Inline:
    """An executor that runs each job as it is given (validation's scores where no thread computes them)."""

    @staticmethod
    def submit(fn, *args) -> Future:
        job = Future()
        try:
            job.set_result(fn(*args))
        except Exception as err:  # noqa: BLE001 - raised where the jobs are collected, as the thread's are
            job.set_exception(err)
        return job


_INLINE = _Inline()


class ScoreJobs:
    """A run's validation scoring: :meth:`prepare` gives the metrics for a :class:`ScoreSpec`, :meth:`submit`
    scores a batch's hypotheses beside the decoding, :meth:`collect` adds the statistics to the metrics."""

    def __init__(self, scores_in: str | None = None) -> None:
        if scores_in is not None and scores_in not in SCORES_IN:
            raise ValueError(f"validation.scores_in={scores_in!r} is not one of {[*SCORES_IN, None]}")
        self.scores_in = scores_in
        self.spec: ScoreSpec | None = None

    def prepare(self, spec: ScoreSpec) -> dict:
        """The metrics (SacreScore, by name) that the batches' statistics are added to."""
        self.spec, self._batch_scorer = spec, BatchScorer(spec)
        return self._batch_scorer.metrics

    def statistics(self, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
        """One batch's statistics, computed here and now."""
        return self._batch_scorer.statistics(hypotheses, references)

    def place(self, device: torch.device) -> str:
        """Where the scores are computed: ``scores_in``, or by default a thread on a CPU (it made a validation
        epoch faster on one CPU, BENCHMARKS.md) and a process on a GPU, whose decoding hands the interpreter
        back and forth at each graph replay and read, which a busy thread would hold for up to the switch
        interval each time (a process holds it only to pickle a batch; not yet timed on a GPU)."""
        return self.scores_in or ("thread" if device.type == "cpu" else "process")

    def start(self, device: torch.device) -> None:
        """Starts the worker process now, where scores go to one: it imports and builds its scorers before
        the first decoded batch."""
        if self.place(device) == "process":
            self._process()

    def submit(self, device: torch.device, hypotheses: Sequence[str], references: Sequence[str]) -> None:
        if self.place(device) == "process":
            job = self._process().submit(hypotheses, references)
        else:
            job = self._executor(device).submit(self.statistics, hypotheses, references)
        self._jobs().append(job)

    def collect(self, metrics) -> None:
        """Wait for the batches' statistics and add them to the metrics. A scoring error is raised here,
        the jobs not yet started cancelled (an exit would otherwise wait for them)."""
        pending = list(self._jobs())
        self._jobs().clear()
        try:
            for job in pending:
                for name, summed in job.result().items():
                    if summed is not None:
                        metrics[name].add(summed)
        except BaseException:
            for job in pending:
                job.cancel()
            raise

    def stop(self) -> None:
        """Ends this process's worker process, if it started one."""
        pid, worker = getattr(self, "_worker", (None, None))
        if worker is not None and pid == os.getpid():
            worker.shutdown()
        self._worker = (None, None)

    def _process(self) -> ScoringProcess:
        """This process's scoring process (started once per run; it builds its scorers as it starts)."""
        pid, worker = getattr(self, "_worker", (None, None))
        if pid != os.getpid() or worker.spec != self.spec:
            worker = ScoringProcess(self.spec)
            self._worker = (os.getpid(), worker)
        return worker

    def _executor(self, device: torch.device):
        """This process's scoring thread, or, where scores are computed inline, an executor that runs each
        job as it is given."""
        if self.place(device) == "inline":
            return _INLINE
        pid, executor = getattr(self, "_thread", (None, None))
        if pid != os.getpid():
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="validation-scores")
            self._thread = (os.getpid(), executor)
        return executor

    def _jobs(self) -> list:
        pid, jobs = getattr(self, "_pending", (None, []))
        if pid != os.getpid():
            jobs = []
            self._pending = (os.getpid(), jobs)
        return jobs

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)  # a thread, a worker process and futures do not travel to another process
        for key in ("_thread", "_worker", "_pending"):
            state.pop(key, None)
        return state
