"""Rank 0's per-step TensorBoard log: every step's scalars under harness.common.tags' names (docs/METRICS.md), and
each bucket's time band.

The band is each bucket's p50 with p10 and p90 over its last BUCKET_BAND_STEPS measured steps (warm-up and
calibration left out), shown as a Custom Scalars margin chart; the chart layout is written once the buckets
are known, that is with the first measured step (DDP's buckets are final once warm-up is over).

With `every` N > 1 (--log-every) a measured step is written only when its number is a multiple of N; the others
cost an append of their bucket times to the bands, no more (and, where the ranks were gathered at such a step,
the ranks/ scalars alone). Warm-up and calibration steps are written every step, under setup/. Without a timed
hook (`timed_comm` False, --comm-hook none) a step has its step/ scalars only.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from harness.common import tags
from harness.common.metrics import algbw_gbps, busbw_factor, percentiles
from harness.train.dashboards import BUCKET_BAND_STEPS, add_custom_scalar_layout
from harness.train.rank_gather import RankSpread
from harness.train.stamps import BucketTiming
from harness.train.step_stats import StepStats
from harness.train.tb_writer import write_step

Band = tuple[float, float, float]  # (p50, p10, p90) ms, a margin chart's (value, lower, upper)


class BucketBands:
    """Each bucket's last measured times, and the (p50, p10, p90) band over them."""

    def __init__(self) -> None:
        self.windows: dict[int, deque[float]] = {}

    def record(self, timings: list[BucketTiming]) -> None:
        """Add one measured step's bucket times, without computing any band."""
        for t in timings:
            window = self.windows.get(t.index)
            if window is None:
                window = self.windows[t.index] = deque(maxlen=BUCKET_BAND_STEPS)
            window.append(t.comm_ms)

    def add(self, timings: list[BucketTiming]) -> dict[int, Band]:
        """Each bucket's band over its last BUCKET_BAND_STEPS measured steps, this one included."""
        self.record(timings)
        bands = {}
        for t in timings:
            window = self.windows[t.index]
            p50, p10, p90 = percentiles(window, (50, 10, 90))
            bands[t.index] = (p50, p10, p90)
        return bands


class StepLog:
    """Writes each resolved step to a SummaryWriter (rank 0's; the other ranks have none and log nothing)."""

    def __init__(self, writer: Any, world_size: int, every: int = 1, timed_comm: bool = True) -> None:
        self.writer = writer
        self.world_size = world_size
        self.every = every  # a measured step is written when its number is a multiple of this
        self.timed_comm = timed_comm  # False: no timed hook, no communication scalars
        self.bands = BucketBands()
        self._layout_written = False

    def logs(self, step: int) -> bool:
        """Whether measured step `step` is written under the headline tags (every `every`-th step)."""
        return step % self.every == 0

    def write(self, stats: StepStats, timings: list[BucketTiming], spread: RankSpread | None, measured: bool) -> None:
        """One step's scalars: a `measured` step's under the headline tags, with its bucket-time histogram and
        bands; a warm-up or calibration step's under setup/ only, so the headline series hold measured steps.
        A measured step that is not logged (`logs`) but was gathered across ranks writes its ranks/ scalars."""
        if not measured:
            write_step(self.writer, stats.step, setup_scalars(stats), {})
            return
        if not self.logs(stats.step):
            self.bands.record(timings)
            if spread is not None:
                write_step(self.writer, stats.step, rank_scalars(spread, self.timed_comm), {})
            return
        if not self.timed_comm:
            scalars = step_time_scalars(stats)
            if spread is not None:
                scalars.update(rank_scalars(spread, timed_comm=False))
            write_step(self.writer, stats.step, scalars, {})
            return
        bands = self.bands.add(timings)
        if bands:
            self.write_layout()
        scalars = step_scalars(stats, timings, self.world_size, spread, bands)
        write_step(self.writer, stats.step, scalars, {tags.BUCKET_TIME_HISTOGRAM: [t.comm_ms for t in timings]})

    def write_layout(self) -> None:
        """The Custom Scalars layout, once per run (also for a run that ends before its first measured step)."""
        if not self._layout_written:
            add_custom_scalar_layout(self.writer, sorted(self.bands.windows))
            self._layout_written = True


def setup_scalars(stats: StepStats) -> dict[str, float]:
    """A warm-up or calibration step: its own time, and for calibration the compute-only sample it gave (a
    timeline step gives none)."""
    if stats.timeline:
        return {tags.CALIBRATION_STEP_MS: stats.step_ms}
    if stats.calibration:
        return {tags.CALIBRATION_STEP_MS: stats.step_ms, tags.CALIBRATION_COMPUTE_ONLY_MS: stats.fwd_bwd_ms}
    return {tags.WARMUP_STEP_MS: stats.step_ms}


def step_scalars(
    stats: StepStats,
    timings: list[BucketTiming],
    world_size: int,
    spread: RankSpread | None,
    bands: dict[int, Band],
) -> dict[str, float]:
    """Every scalar of one step, by tag: the step, its communication, each bucket, and the ranks' skew."""
    scalars = {
        **step_time_scalars(stats),
        tags.COMPUTE_ONLY_MS: stats.fwd_bwd_ms - stats.exposed_ms,
        tags.EXPOSED_MS: stats.exposed_ms,
        tags.OVERLAP_PCT: stats.overlap_pct,
        tags.COMM_MS: stats.comm_ms,
        tags.BUSBW_GBPS: stats.busbw_gbps,
        tags.CODEC_MS: stats.codec_ms,
        tags.BYTES: stats.bytes,
        tags.BUCKETS: stats.buckets,
        tags.ALGBW_GBPS: stats.algbw_gbps,
        tags.MAX_BUCKET_MS: stats.max_bucket_ms,
        tags.TAIL_MS: stats.tail_ms,
        tags.INTERFERENCE_MS: stats.interference_ms,
    }
    factor = busbw_factor("all_reduce", world_size)  # metrics.busbw_gbps, its factor taken once a step, not a bucket
    for t in timings:
        scalars[tags.bucket_tag(t.index, "time_ms")] = t.comm_ms
        scalars[tags.bucket_tag(t.index, "codec_ms")] = t.codec_ms
        scalars[tags.bucket_tag(t.index, "bytes")] = t.bytes
        scalars[tags.bucket_tag(t.index, "busbw_gbps")] = algbw_gbps(t.bytes, t.comm_ms / 1e3) * factor
        if t.index in bands:
            scalars.update(zip(tags.bucket_band_tags(t.index), bands[t.index], strict=True))
    if spread is not None:
        scalars.update(rank_scalars(spread))
    return scalars


def step_time_scalars(stats: StepStats) -> dict[str, float]:
    """The step's own time and throughput: all that a run without a timed hook has."""
    return {
        tags.STEP_MS: stats.step_ms,
        tags.SAMPLES_PER_S: stats.samples_per_s,
        tags.SAMPLES_PER_S_PER_DEVICE: stats.samples_per_s_per_device,
        tags.FWD_BWD_MS: stats.fwd_bwd_ms,
    }


def rank_scalars(spread: RankSpread, timed_comm: bool = True) -> dict[str, float]:
    """The skew across ranks at a gathered step (its communication parts only where buckets were timed)."""
    scalars = {tags.STEP_MS_SKEW: spread.step_ms_skew, tags.SLOWEST_RANK: spread.slowest_rank}
    if timed_comm:
        scalars.update(
            {
                tags.COMM_MS_SKEW: spread.comm_ms_skew,
                tags.BUCKET_MS_SKEW_MAX: spread.bucket_ms_skew_max,
                tags.BUSBW_FASTEST_RANK_GBPS: spread.busbw_fastest_gbps,
            }
        )
    return scalars
