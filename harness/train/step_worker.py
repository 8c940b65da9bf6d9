"""A thread of the harness's own that runs its per-step work (resolving a finished step's stamps, aggregating
it, writing its TensorBoard event) while the training loop's thread waits in backward.

Why: where the host bounds the step, every millisecond of Python on the training loop's thread is step time
(process CPU = wall for resnet50 b128 on the lent H200, docs/BENCHMARKS.md). During backward that thread runs no
Python: on the GPU it waits for autograd's device thread, on the CPU it runs the engine's C++ with the GIL
released. A job handed over as backward starts and waited for at the next step's start (about a millisecond,
against a backward of tens) so leaves the loop's critical path.

The GIL: the only Python that runs during backward is the timed comm hook, once per bucket on autograd's thread.
A thread that wants the GIL waits up to `sys.getswitchinterval()` (5 ms by default) before it asks the holder to
let go, so a job could stall the hook, and every backward kernel launched after it, for as long as the job runs.
While a job runs the interval is JOB_SWITCH_INTERVAL_S, which bounds that stall per bucket; the previous
interval is put back when it ends.

Off by default (train.py --resolve-thread turns it on): measured, it did not pay. On an H200 at resnet50 batch 32,
where the host bounds the step, train.py was slower with it in 3 of 3 rotations (0.807 of a plain loop's speed
against 0.907 without it), its autograd thread spending 1.3 ms more CPU a step; at batch 128 it was no faster
(0.999 either way, 2 rotations); on the CPU it was slower in 6 of 8 (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable

JOB_SWITCH_INTERVAL_S = 1e-4


class StepWorker:
    """Runs one job at a time on a daemon thread: `submit` it, `wait` for it (which raises what it raised)."""

    def __init__(self, name: str = "harness-step-worker") -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self.cpu_s = 0.0  # the thread's CPU time in jobs: the harness's work moved off the loop's thread
        self.jobs = 0
        # A daemon: a run that dies mid-job must not hang at exit on it (the job only resolves and logs).
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def submit(self, job: Callable[[], None]) -> None:
        """Start `job` on the thread; the one before it must have been waited for."""
        if self.busy:
            raise RuntimeError("StepWorker.submit: the previous job was not waited for")
        self._idle.clear()
        self._jobs.put(job)

    def wait(self) -> None:
        """Block until the job in hand (if any) is done, and raise the exception it raised, once."""
        self._idle.wait()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for the job in hand, dropping any error it raised, and end the thread."""
        self._idle.wait()
        self._error = None
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            cpu = time.thread_time()
            previous = sys.getswitchinterval()
            sys.setswitchinterval(JOB_SWITCH_INTERVAL_S)
            try:
                job()
            except BaseException as err:  # handed to the loop's thread by wait()
                self._error = err
            finally:
                sys.setswitchinterval(previous)
                self.cpu_s += time.thread_time() - cpu
                self.jobs += 1
                self._idle.set()
