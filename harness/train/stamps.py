"""What the timed hook records per bucket, and the resolution of a step's stamps into milliseconds.

The hook (hook.py) only takes stamps, on the autograd thread (and, on gloo, in future callbacks on gloo's
threads). `StepStamps` keeps them per step until the training loop resolves the step, two steps later or at
the end of training: only resolution reads CUDA events, and it frees them for reuse.

Each bucket carries four kinds of stamp (docs/METRICS.md, "Bucket times"):
- ready: the hook is called, every gradient of the bucket is computed;
- launch and done of each collective the hook issues (one all_reduce; PowerSGD up to three);
- finished: the hook's future completes, after any decompression, and DDP may copy the bucket back.

A bucket's communication time is the union of its collectives' [start, done] intervals, where on the GPU a
collective starts at max(its launch, the previous collective's done): one process group's NCCL collectives
run one after another on one stream, so a collective launched while another is running waits its turn, and
that wait is not its own time. The hook's own compute (the cast, the division, PowerSGD's compression and
decompression) is the codec time: ready → finished less the union of the collectives' [launch, done].

The time source is fixed per run and named with every timing: CUDA events on the GPU, the CPU's monotonic
clock on gloo. NCCL's own per-kernel timing (TORCH_NCCL_ENABLE_TIMING) is not used: reading it needs each
collective's Work kept until the step is resolved, and the Work holds the collective's output tensor (a
compressed copy of every bucket, two steps long); the serial-stream rule above gives the same time from
events the hook records anyway (checked against a torch.profiler trace in tests/test_comm_hook.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from harness.common.metrics import busy_ms

# A point in time: a recorded CUDA event on the GPU timeline, or perf_counter_ns() on the CPU.
Stamp = int | torch.cuda.Event

CUDA_EVENTS = "cuda_events"
CPU_CLOCK = "cpu_clock"

# Extra stamps taken on the one step whose timeline is drawn (timeline.py), and on no other step.
BACKWARD_START = "backward_start"  # Lightning's on_before_backward: the loss is computed
OPTIMIZER_END = "optimizer_end"  # the optimizer step is done (Lightning's on_train_batch_end)
# Taken on calibration steps at world size > 1: their gradients are averaged (calibration_average.average_gradients).
GRADS_AVERAGED = "grads_averaged"


class BucketContents(NamedTuple):
    """Which parameters a bucket carries (names as in the model inside DDP)."""

    num_params: int
    numel: int
    first_param: str
    last_param: str


@dataclass(slots=True)
class CollectiveStamps:
    """One collective the hook issued for a bucket: when it was launched, and when it was done."""

    launch: Stamp
    done: Stamp | None = None
    failed: bool = False  # its future completed with an error (a peer died, a timeout)


@dataclass(slots=True)
class BucketRecord:
    """Raw stamps of one bucket in one step; never a tensor or a Work. Resolved later into a `BucketTiming`."""

    step: int
    index: int
    num_params: int
    numel: int
    bytes: int
    dtype: str
    ready: Stamp | None = None
    finished: Stamp | None = None  # None: the future completed with the last collective (nothing after it)
    collectives: list[CollectiveStamps] = field(default_factory=list)
    # The hook's own time on the thread that called it, entry to return (perf_counter_ns, whatever the step's
    # time source): the host work a bucket adds, which on the CPU is the thread that runs backward. Negative
    # (minus the entry time) while the hook runs, and in a hook that raised: then it is not a time.
    host_ns: int = 0


@dataclass(frozen=True, slots=True)
class BucketTiming:
    """One bucket in one step, in milliseconds relative to the step's start."""

    step: int
    index: int
    num_params: int
    numel: int
    bytes: int
    dtype: str
    ready_ms: float  # the hook was called: the bucket's gradients are computed
    finished_ms: float  # the hook's future completed, after any decompression
    comm_ms: float  # the union of its collectives' [start, done]: communication only
    codec_ms: float  # the hook's own compute: ready → finished less its collectives' [launch, done]
    intervals: tuple[tuple[float, float], ...] = ()  # each collective's (start, done)
    host_ms: float = math.nan  # the hook's call on its thread, entry to return, by the host's clock

    @property
    def done_ms(self) -> float:
        """When its last collective was done (or when it was ready, if it sent nothing)."""
        return max((done for _, done in self.intervals), default=self.ready_ms)


class ResolvedStep(NamedTuple):
    """One optimizer step's times, resolved after the fact."""

    step: int
    step_ms: float  # this step's start to its end (the next step's training work, before any harness work)
    fwd_bwd_ms: float | None  # start to the end of backward, after DDP waited for communication
    timings: list[BucketTiming]  # in launch order
    source: str = CPU_CLOCK  # CUDA_EVENTS or CPU_CLOCK: every time in the step comes from it
    # This step's end to the next step's start: the harness's own work between the two, outside both steps
    # (None for the last step, or when the next has not started).
    gap_ms: float | None = None
    marks: dict[str, float] | None = None  # the extra stamps (`StepStamps.mark`), ms from the start; or None


_CudaEventBase = getattr(torch._C, "_CudaEventBase", None)  # what torch.cuda.Event.record calls once it has a stream
# A Stream object per (stream id, device index, device type): CUDA's current stream on a device is one of a bounded
# set (the default stream, the pools' streams, the user's).
_STREAMS: dict[tuple[int, int, int], torch.cuda.Stream] = {}


def current_stream() -> torch.cuda.Stream:
    """`torch.cuda.current_stream()`, from two C calls and a cache.

    Why: the hook stamps three times a bucket on the autograd thread, which on a host-bound GPU step is the step's
    critical path. torch.cuda.current_stream() builds a new Stream through several Python layers each call (the device
    index, CUDA's availability read from the environment, Stream.__new__); this asks CUDA's current stream of the
    current device directly and reuses the Stream object made for it the first time.
    """
    key = torch._C._cuda_getCurrentStream(torch._C._cuda_getDevice())
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _STREAMS.setdefault(key, torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2]))
    return stream


class EventPool:
    """Reuses CUDA timing events, so a long run creates a bounded number of them."""

    def __init__(self) -> None:
        self._free: list[torch.cuda.Event] = []

    def acquire(self) -> torch.cuda.Event:
        return self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)

    def release(self, *events: torch.cuda.Event | None) -> None:
        self._free.extend(event for event in events if event is not None)

    def release_list(self, events: list[torch.cuda.Event]) -> None:
        """`release` for a list with no None in it: a step's resolve gives its events back in one call."""
        self._free.extend(events)


class StepStamps:
    """Every unresolved step's stamps: its start and end, its buckets' records (launch order), its end of
    backward.

    The hook appends to `records[step]` and stamps with `now()`; everything else here runs on the training
    loop's thread.
    """

    def __init__(self, use_cuda: bool) -> None:
        self.use_cuda = use_cuda
        self.source = CUDA_EVENTS if use_cuda else CPU_CLOCK
        self.events = EventPool()
        self.records: dict[int, list[BucketRecord]] = {}
        self._starts: dict[int, Stamp] = {}
        self._ends: dict[int, Stamp] = {}
        self._backward_ends: dict[int, Stamp] = {}
        self._marks: dict[int, dict[str, Stamp]] = {}
        # callback_now's lanes by (device index, bucket for a codec stamp or None): a stream and its hand-off event.
        self._stamp_lanes: dict[tuple[int, int | None], tuple[torch.cuda.Stream, torch.cuda.Event]] = {}

    def now(self) -> Stamp:
        """A time stamp on the timeline of the step starts: a CUDA event recorded on the current stream, or a monotonic
        clock."""
        if self.use_cuda:
            event = self.events.acquire()
            _CudaEventBase.record(event, current_stream())
            return event
        return time.perf_counter_ns()

    def callback_now(self, codec_of_bucket: int | None = None) -> Stamp:
        """`now()` for a future's callback: a collective's done, or with `codec_of_bucket` the end of that bucket's
        decompression.

        On the GPU torch runs such a callback on one of its pool streams, made to wait for the collective. The
        stamp is recorded instead on a stream kept for stamps, made to wait for that one: the same point in time.
        Why: a timing event recorded on the callback's pool stream cost a GPU-bound resnet50 step 1.1 ms at world
        size 1 (five a step), where an event without timing there cost nothing (docs/BENCHMARKS.md, "the timed
        path's 1.1 ms is its done stamp").

        A stream runs its stamps in order, so they are kept in lanes that cannot hold one another back: every
        collective's done on one stream (they come in the order one process group's NCCL stream runs them), and each
        bucket's end of decompression on a stream of its own (one bucket's slow decompression, PowerSGD's, finishes
        after a later bucket's). The streams come from torch's high-priority pool, which NCCL does not use unless
        its process group asks for high-priority streams; if it does, a collective could wait for a decompression.
        The pool hands out its 32 streams in turn, so past 31 buckets some buckets' codec lanes share a stream.
        The hand-off to the stamps' stream reuses one event without timing a lane: a stream's wait takes the event as
        it was recorded at the time of the wait, so recording it again after cannot change a wait already queued.
        That needs one caller at a time, which holds: NCCL completes a collective's future when it launches it, so
        every callback runs at once on the thread that adds it, autograd's.
        """
        if not self.use_cuda:
            return time.perf_counter_ns()
        callback_stream = current_stream()
        key = (callback_stream.device_index, codec_of_bucket)
        lane = self._stamp_lanes.get(key)
        if lane is None:
            lane = self._stamp_lanes[key] = (torch.cuda.Stream(callback_stream.device, priority=-1), torch.cuda.Event())
        stamp_stream, hand_off = lane
        # stamp_stream.wait_event(callback_stream.record_event(hand_off)), without its four Python wrappers (this runs
        # on the autograd thread, once a bucket).
        _CudaEventBase.record(hand_off, callback_stream)
        _CudaEventBase.wait(hand_off, stamp_stream)
        event = self.events.acquire()
        _CudaEventBase.record(event, stamp_stream)
        return event

    def begin(self, step: int) -> None:
        """Open step `step`: no records yet, its start stamped now."""
        self.records[step] = []
        self._starts[step] = self.now()

    def end(self, step: int) -> None:
        """Stamp the end of `step` now, replacing an earlier end: the step's optimizer step stamps one, and the
        next step's first moment (before the harness does its own work) moves it later."""
        if step not in self._starts:
            return
        previous = self._ends.get(step)
        self._ends[step] = self.now()
        if previous is not None:
            self.release(previous)

    def mark_backward_end(self, step: int) -> None:
        """Stamp the end of `step`'s backward, once (later micro-batches of the same step keep the first)."""
        if step in self._starts and step not in self._backward_ends:
            self._backward_ends[step] = self.now()

    def mark(self, step: int, name: str) -> None:
        """Stamp `name` in `step` now, replacing an earlier one (the drawn step's extra stamps, a calibration
        step's end of averaging)."""
        if step not in self._starts:
            return
        marks = self._marks.setdefault(step, {})
        previous = marks.get(name)
        marks[name] = self.now()
        if previous is not None:
            self.release(previous)

    def has_end(self, step: int) -> bool:
        return step in self._ends

    def pending_steps(self) -> list[int]:
        return sorted(self.records)

    def resolve(self, step: int) -> ResolvedStep:
        """Turn step `step`'s stamps into times and free them; the step must have an end (`end()`).

        This waits only if the GPU has not yet reached the step's end, which is rare once steps lag by two.
        Why it is written flat: it runs every step on the training loop's thread, where at a host-bound step every
        Python call is step time (docs/BENCHMARKS.md, "the harness's main-thread Python, trimmed").
        """
        records = self.records.pop(step, [])
        start = self._starts.pop(step)
        end = self._ends.pop(step)
        backward_end = self._backward_ends.pop(step, None)
        elapsed_ms = self.elapsed_ms
        used = [start, end]  # every stamp read here, given back at the end
        step_ms = elapsed_ms(start, end)
        next_start = self._starts.get(step + 1)
        gap_ms = elapsed_ms(end, next_start) if next_start is not None else None
        fwd_bwd_ms = None
        if backward_end is not None:
            fwd_bwd_ms = elapsed_ms(start, backward_end)
            used.append(backward_end)
        timings = self._resolve_records(records, start, used)
        marks = self._marks.pop(step, None)
        marks_ms = None
        if marks:
            marks_ms = {name: elapsed_ms(start, stamp) for name, stamp in marks.items()}
            used += marks.values()
        if self.use_cuda:
            self.events.release_list(used)
        return ResolvedStep(step, step_ms, fwd_bwd_ms, timings, self.source, gap_ms, marks_ms)

    def drop(self, step: int) -> None:
        """Free step `step`'s stamps without reading them (bench.hook_overhead's timed_unresolved: what the stamps cost
        a step without the resolve)."""
        stamps = [self._starts.pop(step, None), self._ends.pop(step, None), self._backward_ends.pop(step, None)]
        stamps += (self._marks.pop(step, None) or {}).values()
        for record in self.records.pop(step, []):
            stamps += [record.ready, record.finished]
            stamps += [stamp for collective in record.collectives for stamp in (collective.launch, collective.done)]
        for stamp in stamps:
            if stamp is not None:
                self.release(stamp)

    def elapsed_ms(self, start: Stamp, end: Stamp) -> float:
        """Milliseconds from `start` to `end`; on the GPU waits until both have been reached.

        On the GPU it reads the pair with one call, which torch refuses (RuntimeError) while either event is still
        pending; only then does it wait for them and read again. Why: a step resolved two steps late finds its events
        done, and a synchronize before every read was 17 runtime calls and 35 Python calls a step on the training
        loop's thread (docs/census).
        """
        if not self.use_cuda:
            return (end - start) / 1e6
        try:
            return _CudaEventBase.elapsed_time(start, end)
        except RuntimeError:  # one of them is still pending (torch 2.8+ raises AcceleratorError, a RuntimeError)
            pass
        # Outside the handler, so that an error of the wait or of the second read is reported as itself.
        start.synchronize()
        end.synchronize()
        return _CudaEventBase.elapsed_time(start, end)

    def release(self, stamp: Stamp) -> None:
        """Give a stamp taken with `now()` back once nothing will read it again."""
        if self.use_cuda:
            self.events.release(stamp)

    def _resolve_records(self, records: list[BucketRecord], start: Stamp, used: list[Stamp]) -> list[BucketTiming]:
        """Each record's times from `start`; every stamp read is appended to `used`, for the caller to give back."""
        elapsed_ms = self.elapsed_ms
        on_gpu = self.use_cuda
        timings = []
        stream_free_ms = float("-inf")  # when the previous collective of this step was done (GPU)
        for record in records:
            ready_ms = elapsed_ms(start, record.ready)
            used.append(record.ready)
            spans = []  # each collective's (launch, done)
            intervals = []  # each collective's (start, done): on the GPU it starts once the one before it is done
            last_done_ms = ready_ms  # when its last collective was done (when it was ready, if it sent nothing)
            for collective in record.collectives:
                launch_ms = elapsed_ms(start, collective.launch)
                used.append(collective.launch)
                # A collective whose done stamp is missing never completed (a failed run): it counts to its launch.
                done_ms = launch_ms
                if collective.done is not None:
                    done_ms = elapsed_ms(start, collective.done)
                    used.append(collective.done)
                # On the GPU a collective waits for the one before it on NCCL's stream (see the module's doc).
                start_ms = launch_ms if not on_gpu or launch_ms > stream_free_ms else stream_free_ms
                intervals.append((start_ms if start_ms < done_ms else done_ms, done_ms))
                if done_ms > stream_free_ms:
                    stream_free_ms = done_ms
                if not spans or done_ms > last_done_ms:  # the first collective's done replaces the ready time
                    last_done_ms = done_ms
                spans.append((launch_ms, done_ms))
            if record.finished is not None:
                finished_ms = elapsed_ms(start, record.finished)
                used.append(record.finished)
            else:
                finished_ms = last_done_ms
            if len(spans) == 1:  # one collective (all but PowerSGD's): its union is itself
                comm_ms = intervals[0][1] - intervals[0][0]
                launched_ms = spans[0][1] - spans[0][0]
            else:
                comm_ms, launched_ms = busy_ms(intervals), busy_ms(spans)
            codec_ms = (finished_ms - ready_ms) - launched_ms
            timings.append(
                BucketTiming(
                    step=record.step,
                    index=record.index,
                    num_params=record.num_params,
                    numel=record.numel,
                    bytes=record.bytes,
                    dtype=record.dtype,
                    ready_ms=ready_ms,
                    finished_ms=finished_ms,
                    comm_ms=comm_ms,
                    codec_ms=codec_ms if codec_ms > 0.0 else 0.0,
                    intervals=tuple(intervals),
                    host_ms=record.host_ns / 1e6 if record.host_ns > 0 else math.nan,
                )
            )
        return timings
