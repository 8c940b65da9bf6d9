"""The StepWorker (harness/train/step_worker.py), on a real thread: jobs run off the caller's thread, one at a
time; a job's exception reaches the caller at wait(), once; the GIL switch interval is short during a job only."""

from __future__ import annotations

import sys
import threading

import pytest

from harness.train.step_worker import JOB_SWITCH_INTERVAL_S, StepWorker


def test_a_job_runs_on_the_workers_thread_with_a_short_switch_interval():
    worker = StepWorker()
    seen = {}

    def job() -> None:
        seen["thread"] = threading.current_thread().name
        seen["interval"] = sys.getswitchinterval()
        sum(i * i for i in range(200_000))  # CPU time the worker counts

    before = sys.getswitchinterval()
    worker.submit(job)
    worker.wait()
    assert seen == {"thread": "harness-step-worker", "interval": pytest.approx(JOB_SWITCH_INTERVAL_S)}
    assert sys.getswitchinterval() == before != JOB_SWITCH_INTERVAL_S
    assert worker.jobs == 1 and worker.cpu_s > 0 and not worker.busy
    worker.close()


def test_a_jobs_error_is_raised_by_wait_once_and_the_worker_goes_on():
    worker = StepWorker()
    worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        worker.wait()
    worker.wait()  # raised once only
    done = []
    worker.submit(lambda: done.append(True))
    worker.wait()
    assert done == [True]
    worker.close()


def test_submitting_before_the_last_job_was_waited_for_is_refused():
    worker = StepWorker()
    release = threading.Event()
    worker.submit(release.wait)
    with pytest.raises(RuntimeError, match="not waited for"):
        worker.submit(lambda: None)
    release.set()
    worker.wait()
    worker.close()


def test_close_waits_for_the_job_and_drops_its_error():
    worker = StepWorker()
    release, finished = threading.Event(), []

    def job() -> None:
        release.wait()
        finished.append(True)
        raise OSError("disk full")

    worker.submit(job)
    threading.Timer(0.05, release.set).start()
    worker.close()  # no raise: on a failure path the error that stopped the run is the one reported
    assert finished == [True] and not worker._thread.is_alive()
