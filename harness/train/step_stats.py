"""Per-step communication statistics from resolved bucket timings, and bounded run-long aggregates.

Pure functions and plain containers: no process group, no Lightning, so the arithmetic is tested alone.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from harness.common.metrics import algbw_gbps, busbw_gbps, busy_ms, percentile
from harness.common.names import WARMUP_STEPS
from harness.train.exposure_estimate import overlap_pct
from harness.train.stamps import BucketContents, ResolvedStep

# Step 0 runs with one bucket holding every gradient and step 1 is the first with DDP's rebuilt buckets
# (DDP rebuilds its buckets once, after step 0), so both are warm-up: logged, but kept out of every summary.

# Per-bucket and per-step samples kept for percentiles. Past this many steps, reservoir sampling keeps a
# uniform sample, so memory stays flat however long the run is.
MAX_SAMPLES = 10_000


@dataclass(frozen=True)
class StepStats:
    """One optimizer step, as logged under the names in docs/METRICS.md."""

    step: int
    step_ms: float
    samples_per_s: float
    samples_per_s_per_device: float
    buckets: int
    bytes: int
    comm_ms: float  # busy time: the union of every collective's [start, done] interval
    codec_ms: float  # the hook's own compute (casts, compression, decompression), summed over buckets
    algbw_gbps: float
    busbw_gbps: float
    max_bucket_ms: float
    tail_ms: float  # last bucket ready to last bucket finished: the wait DDP's finalisation sees
    fwd_bwd_ms: float = math.nan  # step start to the end of backward, DDP having waited for every bucket
    exposed_ms: float = math.nan  # fwd_bwd_ms − the compute-only forward + backward (calibrated)
    overlap_pct: float = math.nan  # share of the busy communication time hidden behind compute
    interference_ms: float = math.nan  # exposed − tail: compute slowed down while communication runs
    calibration: bool = False  # a compute-only step: communication skipped, kept out of summaries
    timeline: bool = False  # a calibration step that recorded the backward timeline: no compute-only sample

    @property
    def warmup(self) -> bool:
        return self.step < WARMUP_STEPS


def exposure(fwd_bwd_ms: float, compute_only_ms: float, comm_ms: float) -> tuple[float, float]:
    """(exposed ms, overlap %) of a step.

    exposed = (forward + backward with communication) − (forward + backward without it). The optimizer
    step is the same in both, so this equals step time − compute-only step time. overlap: exposure_estimate's
    `overlap_pct`, 1 − exposed / busy communication time clamped to [0, 100] % (noise can make exposed slightly
    negative or above comm), NaN without communication.
    """
    if math.isnan(fwd_bwd_ms) or math.isnan(compute_only_ms):
        return math.nan, math.nan
    exposed = fwd_bwd_ms - compute_only_ms
    return exposed, float(overlap_pct(exposed, comm_ms))


def step_stats(
    resolved: ResolvedStep,
    samples_per_step: float,
    world_size: int,
    compute_only_ms: float = math.nan,
    calibration: bool = False,
    timeline: bool = False,
) -> StepStats:
    """Combine one step's resolved times. `samples_per_step` counts every rank's samples (global batch);
    `compute_only_ms` is the calibrated forward + backward without communication (NaN if not measured)."""
    step, step_ms, timings = resolved.step, resolved.step_ms, resolved.timings
    fwd_bwd_ms = resolved.fwd_bwd_ms if resolved.fwd_bwd_ms is not None else math.nan
    # One pass over the buckets (this runs every step on the training loop's thread: no generator per figure).
    step_bytes, codec_ms, max_bucket_ms = 0, 0.0, 0.0
    last_ready_ms = last_finished_ms = -math.inf
    intervals: list[tuple[float, float]] = []
    for t in timings:
        step_bytes += t.bytes
        codec_ms += t.codec_ms
        if t.comm_ms > max_bucket_ms:
            max_bucket_ms = t.comm_ms
        if t.ready_ms > last_ready_ms:
            last_ready_ms = t.ready_ms
        if t.finished_ms > last_finished_ms:
            last_finished_ms = t.finished_ms
        intervals += t.intervals
    comm_ms = busy_ms(intervals)
    comm_s = comm_ms / 1e3
    tail_ms = last_finished_ms - last_ready_ms if timings else 0.0
    samples_per_s = samples_per_step / (step_ms / 1e3) if step_ms > 0 else math.nan
    # A calibration step is itself the compute-only reference: no exposure of its own.
    exposed_ms, overlap_pct = exposure(fwd_bwd_ms, math.nan if calibration else compute_only_ms, comm_ms)
    return StepStats(
        step=step,
        step_ms=step_ms,
        samples_per_s=samples_per_s,
        samples_per_s_per_device=samples_per_s / world_size,
        buckets=len(timings),
        bytes=step_bytes,
        comm_ms=comm_ms,
        codec_ms=codec_ms,
        algbw_gbps=algbw_gbps(step_bytes, comm_s),
        busbw_gbps=busbw_gbps("all_reduce", step_bytes, comm_s, world_size),
        max_bucket_ms=max_bucket_ms,
        tail_ms=tail_ms,
        fwd_bwd_ms=fwd_bwd_ms,
        exposed_ms=exposed_ms,
        overlap_pct=overlap_pct,
        interference_ms=exposed_ms - tail_ms,
        calibration=calibration,
        timeline=timeline,
    )


class BoundedSamples:
    """Keeps every value up to `capacity`, then a uniform reservoir sample (Algorithm R). Values are floats,
    or tuples for `exposure_inputs` (whose percentiles are never asked for)."""

    def __init__(self, capacity: int = MAX_SAMPLES) -> None:
        self.capacity = capacity
        self.values: list = []
        self.seen = 0
        self._rng = random.Random(0)  # seeded: the same run's values give the same sample

    def add(self, value: float | tuple) -> None:
        self.seen += 1
        if len(self.values) < self.capacity:
            self.values.append(value)
        else:
            slot = self._rng.randrange(self.seen)
            if slot < self.capacity:
                self.values[slot] = value

    def percentile(self, q: float) -> float:
        return percentile(self.values, q)


@dataclass
class BucketSummary:
    """Run-long view of one bucket index (after warm-up)."""

    index: int
    num_params: int = 0
    numel: int = 0
    bytes: int = 0
    dtype: str = ""
    first_param: str = ""
    last_param: str = ""
    times_ms: BoundedSamples = field(default_factory=BoundedSamples)  # communication only
    codec_ms: BoundedSamples = field(default_factory=BoundedSamples)  # the hook's own compute
    host_ms: BoundedSamples = field(default_factory=BoundedSamples)  # the hook's call, entry to return (host)


@dataclass
class RunAggregate:
    """Everything the end-of-run table and summary.json need, bounded in memory."""

    world_size: int
    step_ms: BoundedSamples = field(default_factory=BoundedSamples)
    comm_ms: BoundedSamples = field(default_factory=BoundedSamples)
    codec_ms: BoundedSamples = field(default_factory=BoundedSamples)
    max_bucket_ms: BoundedSamples = field(default_factory=BoundedSamples)
    tail_ms: BoundedSamples = field(default_factory=BoundedSamples)
    samples_per_s: BoundedSamples = field(default_factory=BoundedSamples)
    fwd_bwd_ms: BoundedSamples = field(default_factory=BoundedSamples)
    between_steps_ms: BoundedSamples = field(default_factory=BoundedSamples)
    # (step, forward + backward ms, comm ms, tail ms) of measured steps: exposure is judged at the end against the
    # calibration samples nearest each step on either side (exposure_estimate.py).
    exposure_inputs: BoundedSamples = field(default_factory=BoundedSamples)
    compute_only_ms: float = math.nan
    step_bytes: int = 0
    steps_logged: int = 0
    steps_measured: int = 0
    time_source: str = ""
    buckets: dict[int, BucketSummary] = field(default_factory=dict)

    def add(self, stats: StepStats, resolved: ResolvedStep, contents: dict[int, BucketContents]) -> None:
        self.steps_logged += 1
        self.time_source = resolved.source
        if resolved.gap_ms is not None:
            self.between_steps_ms.add(resolved.gap_ms)
        if stats.warmup or stats.calibration:
            return
        self.steps_measured += 1
        self.step_ms.add(stats.step_ms)
        self.comm_ms.add(stats.comm_ms)
        self.codec_ms.add(stats.codec_ms)
        self.max_bucket_ms.add(stats.max_bucket_ms)
        self.tail_ms.add(stats.tail_ms)
        self.samples_per_s.add(stats.samples_per_s)
        if not math.isnan(stats.fwd_bwd_ms):
            self.fwd_bwd_ms.add(stats.fwd_bwd_ms)
            self.exposure_inputs.add((stats.step, stats.fwd_bwd_ms, stats.comm_ms, stats.tail_ms))
        self.step_bytes = stats.bytes
        for t in resolved.timings:
            summary = self.buckets.get(t.index)
            if summary is None:  # not setdefault: a BucketSummary seeds three generators, too dear to throw away
                summary = self.buckets[t.index] = BucketSummary(t.index)
            summary.num_params, summary.numel, summary.bytes, summary.dtype = t.num_params, t.numel, t.bytes, t.dtype
            if t.index in contents:
                summary.first_param, summary.last_param = contents[t.index].first_param, contents[t.index].last_param
            summary.times_ms.add(t.comm_ms)
            summary.codec_ms.add(t.codec_ms)
            if not math.isnan(t.host_ms):
                summary.host_ms.add(t.host_ms)
