"""Validation's scores in a worker process (nmt/metrics/validation_scores.py): the same statistics as in
this process, answers in order, errors and a dead worker reported at once (no wait without an answer)."""

import os
import signal

import pytest
import torch

from nmt.metrics.validation_scores import BatchScorer, ScoreSpec, ScoringProcess

SPEC = ScoreSpec("de", lowercase=False)
BATCHES = [
    (
        ["Ein Hund läuft im Park.", "Zwei Männer spielen Fußball."],
        ["Ein Hund rennt durch den Park.", "Zwei Männer spielen."],
    ),
    (["Eine Frau liest ein Buch."], ["Eine Frau liest."]),
    (
        ["Kinder spielen am Strand.", "Ein Mann fährt Rad.", "Es regnet."],
        ["Kinder am Strand.", "Ein Mann radelt.", "Regen."],
    ),
]
WAIT = 120  # seconds: a test fails, never hangs


@pytest.fixture
def worker():
    process = ScoringProcess(SPEC)
    yield process
    process.shutdown()
    process._process.wait(timeout=WAIT)


def test_the_workers_statistics_are_this_processes_in_the_order_sent(worker):
    jobs = [worker.submit(h, r) for h, r in BATCHES]
    here = BatchScorer(SPEC)
    for job, (hypotheses, references) in zip(jobs, BATCHES, strict=True):
        answer, expected = job.result(timeout=WAIT), here.statistics(hypotheses, references)
        assert answer.keys() == expected.keys() == {"bleu", "chrf", "bleu_tok_lc"}
        for name in expected:
            assert torch.equal(answer[name], expected[name]), name


def test_an_error_in_the_worker_is_raised_here_with_its_message_and_the_worker_goes_on(worker):
    failed = worker.submit(["one hypothesis", "and another"], ["one reference"])
    with pytest.raises(RuntimeError, match="validation's scoring: ValueError: 2 hypotheses for 1 reference lists"):
        failed.result(timeout=WAIT)
    assert worker.submit(*BATCHES[1]).result(timeout=WAIT)["bleu"] is not None


def test_a_cancelled_job_takes_no_answer_and_later_jobs_get_theirs(worker):
    worker.submit(*BATCHES[0]).result(timeout=WAIT)  # started
    os.kill(worker._process.pid, signal.SIGSTOP)  # paused: no answer can come before the cancel
    try:
        first, cancelled, last = (worker.submit(h, r) for h, r in BATCHES)
        assert cancelled.cancel()
    finally:
        os.kill(worker._process.pid, signal.SIGCONT)
    assert first.result(timeout=WAIT) and last.result(timeout=WAIT)["chrf"] is not None
    assert cancelled.cancelled()


def test_the_signals_that_stop_a_run_gracefully_leave_the_worker_answering(worker):
    worker.submit(*BATCHES[0]).result(timeout=WAIT)  # its handlers are set
    for name in ("SIGINT", "SIGTERM", "SIGUSR1"):
        os.kill(worker._process.pid, getattr(signal, name))
    assert worker.submit(*BATCHES[2]).result(timeout=WAIT)["bleu_tok_lc"] is not None
    assert worker._process.poll() is None


def test_a_dead_worker_fails_the_pending_and_every_later_job_at_once(worker):
    worker.submit(*BATCHES[0]).result(timeout=WAIT)
    worker._process.kill()
    worker._process.wait(timeout=WAIT)
    with pytest.raises(RuntimeError, match=r"validation's scoring process ended \(exit code -9\)"):
        worker.submit(*BATCHES[1]).result(timeout=WAIT)
    later = worker.submit(*BATCHES[2])
    assert later.done() and isinstance(later.exception(), RuntimeError)


def test_a_shut_down_worker_ends_once_it_has_answered():
    process = ScoringProcess(SPEC)
    jobs = [process.submit(h, r) for h, r in BATCHES]
    process.shutdown()
    assert all(job.result(timeout=WAIT) for job in jobs)
    assert process._process.wait(timeout=WAIT) == 0


def test_validation_scores_in_takes_the_three_places_and_only_where_sentences_are_decoded():
    from nmt.training.config import ConfigError, check_config
    from tests.conftest import compose_train

    for where in ("inline", "thread", "process"):
        check_config(compose_train(f"validation.scores_in={where}"))
    with pytest.raises(ValueError, match=r"validation.scores_in='elsewhere'.* one of \['inline', 'thread', 'process'"):
        check_config(compose_train("validation.scores_in=elsewhere"))
    with pytest.raises(ConfigError, match=r"validation.scores_in=thread: a language model scores no decoded"):
        check_config(compose_train("task=lm", "validation.scores_in=thread"))
    with pytest.raises(ConfigError, match=r"validation.scores_in=process: where decoded validation sentences are"):
        check_config(compose_train("validation.bleu_every_n_epochs=0", "validation.scores_in=process"))


def test_scorers_that_cannot_be_built_fail_every_batch_with_the_reason():
    process = ScoringProcess("not a ScoreSpec")
    try:
        with pytest.raises(RuntimeError, match="its scorers could not be built: AttributeError"):
            process.submit(*BATCHES[0]).result(timeout=WAIT)
        with pytest.raises(RuntimeError, match="its scorers could not be built"):
            process.submit(*BATCHES[1]).result(timeout=WAIT)
    finally:
        process.shutdown()
        process._process.wait(timeout=WAIT)
