"""What the timed hook records per bucket, and the resolution of a step's stamps into milliseconds.

The hook (hook.py) only takes stamps, on the autograd thread. `StepStamps` keeps them per step (the step's
start, each bucket's record, the end of backward) until the training loop resolves the step, two steps
later or at the end of training (see harness.train.hook): only resolution reads CUDA events, and it frees
them for reuse.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.distributed as dist

# A point in time: a recorded CUDA event on the GPU timeline, or perf_counter_ns() on the CPU.
Stamp = int | torch.cuda.Event


class BucketContents(NamedTuple):
    """Which parameters a bucket carries (names as in the model inside DDP)."""

    num_params: int
    numel: int
    first_param: str
    last_param: str


@dataclass(slots=True)
class BucketRecord:
    """Raw stamps of one bucket's collective in one step. Resolved later into a `BucketTiming`."""

    step: int
    index: int
    num_params: int
    numel: int
    bytes: int
    dtype: str
    ready_ns: int = 0
    done_ns: int = 0
    ready_event: torch.cuda.Event | None = None
    done_event: torch.cuda.Event | None = None
    work: dist.Work | None = None  # kept only to ask NCCL for its execution time after the step


@dataclass(frozen=True, slots=True)
class BucketTiming:
    """One bucket's collective in one step, in milliseconds relative to the step's start."""

    step: int
    index: int
    num_params: int
    numel: int
    bytes: int
    dtype: str
    ready_ms: float
    done_ms: float
    exec_ms: float | None  # the collective's own execution time, where the backend reports one (NCCL)

    @property
    def ready_to_done_ms(self) -> float:
        return self.done_ms - self.ready_ms

    @property
    def time_ms(self) -> float:
        """The collective's time: NCCL's own execution time where reported, else ready to done."""
        return self.exec_ms if self.exec_ms is not None else self.ready_to_done_ms


class ResolvedStep(NamedTuple):
    """One optimizer step's times, resolved after the fact."""

    step: int
    step_ms: float  # this step's start to the next step's start
    fwd_bwd_ms: float | None  # start to the end of backward, after DDP waited for communication
    timings: list[BucketTiming]  # in launch order


class EventPool:
    """Reuses CUDA timing events, so a long run creates a bounded number of them."""

    def __init__(self) -> None:
        self._free: list[torch.cuda.Event] = []

    def acquire(self) -> torch.cuda.Event:
        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def release(self, *events: torch.cuda.Event | None) -> None:
        self._free.extend(event for event in events if event is not None)


class StepStamps:
    """Every unresolved step's stamps: its start, its buckets' records (launch order), its end of backward.

    The hook appends to `records[step]` and stamps with `events`; everything else here runs on the training
    loop's thread.
    """

    def __init__(self, use_cuda: bool) -> None:
        self.use_cuda = use_cuda
        self.events = EventPool()
        self.records: dict[int, list[BucketRecord]] = {}
        self._starts: dict[int, Stamp] = {}
        self._backward_ends: dict[int, Stamp] = {}
        # Whether the backend reports execution times; learnt on the first try, since asking a backend that
        # does not (gloo, NCCL without TORCH_NCCL_ENABLE_TIMING) raises a C++ exception, costly every bucket.
        self.exec_timing = True

    def now(self) -> Stamp:
        """A time stamp on the timeline of the step starts: a recorded CUDA event, or a monotonic clock."""
        if self.use_cuda:
            event = self.events.acquire()
            event.record()
            return event
        return time.perf_counter_ns()

    def begin(self, step: int) -> None:
        """Open step `step`: no records yet, its start stamped now."""
        self.records[step] = []
        self._starts[step] = self.now()

    def mark_backward_end(self, step: int) -> None:
        """Stamp the end of `step`'s backward, once (later micro-batches of the same step keep the first)."""
        if step in self._starts and step not in self._backward_ends:
            self._backward_ends[step] = self.now()

    def start(self, step: int) -> Stamp:
        return self._starts[step]

    def pending_steps(self) -> list[int]:
        return sorted(self.records)

    def resolve(self, step: int, next_start: Stamp) -> ResolvedStep:
        """Turn step `step`'s stamps into times and free them.

        `next_start` is the next step's start stamp (or the end of training); the caller keeps it. This
        waits only if the GPU has not yet reached `next_start`, which is rare once steps lag by two.
        """
        records = self.records.pop(step, [])
        start = self._starts.pop(step)
        backward_end = self._backward_ends.pop(step, None)
        step_ms = self.elapsed_ms(start, next_start)
        fwd_bwd_ms = self.elapsed_ms(start, backward_end) if backward_end is not None else None
        timings = [self._resolve_record(record, start) for record in records]
        self.release(start)
        if backward_end is not None:
            self.release(backward_end)
        return ResolvedStep(step, step_ms, fwd_bwd_ms, timings)

    def elapsed_ms(self, start: Stamp, end: Stamp) -> float:
        """Milliseconds from `start` to `end`; on the GPU waits until `end` has been reached."""
        if self.use_cuda:
            end.synchronize()
            return start.elapsed_time(end)
        return (end - start) / 1e6

    def release(self, stamp: Stamp) -> None:
        """Give a stamp taken with `now()` back once nothing will read it again."""
        if self.use_cuda:
            self.events.release(stamp)

    def _resolve_record(self, record: BucketRecord, start: Stamp) -> BucketTiming:
        if self.use_cuda:
            done_ms = self.elapsed_ms(start, record.done_event)
            ready_ms = self.elapsed_ms(start, record.ready_event)
            self.events.release(record.ready_event, record.done_event)
        else:
            ready_ms = (record.ready_ns - start) / 1e6
            done_ms = (record.done_ns - start) / 1e6
        return BucketTiming(
            step=record.step,
            index=record.index,
            num_params=record.num_params,
            numel=record.numel,
            bytes=record.bytes,
            dtype=record.dtype,
            ready_ms=ready_ms,
            done_ms=done_ms,
            exec_ms=self._exec_ms(record.work),
        )

    def _exec_ms(self, work: dist.Work | None) -> float | None:
        if not self.exec_timing or work is None:
            return None
        duration = work_duration_ms(work)
        if duration is None:
            self.exec_timing = False
        return duration


def work_duration_ms(work: dist.Work) -> float | None:
    """NCCL's own execution time of a finished collective; None where the backend does not time it."""
    try:
        return float(work._get_duration())
    except (RuntimeError, AttributeError, ValueError):
        # gloo does not support it; NCCL raises unless TORCH_NCCL_ENABLE_TIMING=1 was set at PG creation.
        return None
