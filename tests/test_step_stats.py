"""Pure arithmetic of per-step statistics: busy time, tail, bandwidth, warm-up and bounded samples."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from harness.common.metrics import busy_ms, percentile, percentiles
from harness.train.stamps import BucketTiming, ResolvedStep
from harness.train.step_stats import BoundedSamples, RunAggregate, exposure, step_stats


def timing(
    index: int, ready: float, done: float, bytes_: int = 1000, start: float | None = None, finished: float | None = None
) -> BucketTiming:
    """A bucket ready at `ready` whose one collective ran from `start` (default: ready) to `done`, and whose
    future finished at `finished` (default: done); the gaps are codec time."""
    start = ready if start is None else start
    finished = done if finished is None else finished
    codec = (start - ready) + (finished - done)
    return BucketTiming(
        0, index, 2, bytes_ // 4, bytes_, "float32", ready, finished, done - start, codec, ((start, done),)
    )


def test_busy_time_is_the_union_of_intervals():
    assert busy_ms([]) == 0
    assert busy_ms([(0, 2), (1, 3)]) == 3  # overlapping (gloo runs two at once)
    assert busy_ms([(0, 1), (2, 3)]) == 2  # a gap is not busy
    assert busy_ms([(5, 6), (0, 10)]) == 10  # nested, any order


def test_step_stats_from_collective_intervals():
    timings = [timing(0, 1.0, 3.0, 4000), timing(1, 2.0, 5.0, 4000)]
    stats = step_stats(ResolvedStep(7, 10.0, 9.0, timings), samples_per_step=64, world_size=2, compute_only_ms=7.0)
    assert stats.bytes == 8000 and stats.buckets == 2
    assert stats.comm_ms == pytest.approx(4.0)  # union of [1, 3] and [2, 5]
    assert stats.tail_ms == pytest.approx(3.0)  # last ready (2) to last done (5)
    assert stats.samples_per_s == pytest.approx(6400) and stats.samples_per_s_per_device == pytest.approx(3200)
    assert stats.algbw_gbps == pytest.approx(8000 / 4e-3 / 1e9)
    assert stats.busbw_gbps == pytest.approx(stats.algbw_gbps * 2 * (2 - 1) / 2)
    assert stats.max_bucket_ms == pytest.approx(3.0)
    assert not stats.warmup
    assert stats.exposed_ms == pytest.approx(2.0) and stats.overlap_pct == pytest.approx(50.0)

    # A hook with codec work (a cast before, a copy back after): comm covers the collectives only, the tail
    # runs to the last future's finish, and the codec time of the buckets adds up.
    coded = [timing(0, 0.0, 3.0, start=2.0, finished=3.5), timing(1, 0.5, 5.0, start=3.0, finished=6.0)]
    stats = step_stats(ResolvedStep(0, 10.0, None, coded), samples_per_step=8, world_size=1)
    assert stats.comm_ms == pytest.approx(3.0) and stats.max_bucket_ms == pytest.approx(2.0)
    assert stats.codec_ms == pytest.approx((2.0 + 0.5) + (2.5 + 1.0))
    assert stats.tail_ms == pytest.approx(6.0 - 0.5)
    assert stats.busbw_gbps == 0.0, "one rank: busbw is 0 by definition"
    assert stats.warmup
    assert math.isnan(stats.exposed_ms) and math.isnan(stats.overlap_pct), "no backward-end stamp, no exposure"


def test_exposure_clamps_overlap_and_needs_calibration():
    assert exposure(12.0, 10.0, 4.0) == (2.0, 50.0)
    assert exposure(15.0, 10.0, 4.0) == (5.0, 0.0)  # exposed beyond busy time (interference): 0 % overlap
    assert exposure(9.5, 10.0, 4.0) == (-0.5, 100.0)  # noise below the compute-only time: fully hidden
    assert all(math.isnan(v) for v in exposure(12.0, math.nan, 4.0))


def test_bounded_samples_keep_memory_flat_and_stay_exact_below_capacity():
    exact = BoundedSamples(capacity=100)
    for v in range(50):
        exact.add(float(v))
    assert exact.percentile(50) == statistics.median(float(v) for v in range(50))
    bounded = BoundedSamples(capacity=100)
    for v in range(10_000):
        bounded.add(float(v))
    assert len(bounded.values) == 100 and bounded.seen == 10_000
    assert 2000 < bounded.percentile(50) < 8000  # a uniform sample of 0..9999


def test_aggregate_skips_warmup_steps():
    agg = RunAggregate(world_size=2)
    for step in range(5):
        t = [timing(0, 0.0, 1.0 + step)]
        resolved = ResolvedStep(step, 10.0, None, t)
        agg.add(step_stats(resolved, 8, 2), resolved, {})
    assert agg.steps_logged == 5 and agg.steps_measured == 3
    assert agg.buckets[0].times_ms.values == [3.0, 4.0, 5.0]
    assert math.isclose(agg.comm_ms.percentile(50), 4.0)


@pytest.mark.parametrize("count", [1, 2, 7, 100])
def test_percentiles_from_one_sort_are_numpys(count):
    # numpy's default (linear interpolation) is the definition the bands and every p50/p90 follow.
    values = list(np.random.default_rng(count).normal(30.0, 5.0, count))
    qs = (50, 10, 90, 0, 100, 37.5)
    assert percentiles(values, qs) == pytest.approx(list(np.percentile(values, qs)), rel=1e-12)
    assert [percentile(values, q) for q in qs] == percentiles(values, qs)
    assert all(math.isnan(v) for v in percentiles([], qs))


def test_a_bucket_keeps_its_run_long_summary_across_steps():
    agg = RunAggregate(world_size=2)
    for step in range(2, 12):  # past warm-up
        resolved = ResolvedStep(step, 10.0, 8.0, [timing(0, 1.0, 1.0 + step)])
        agg.add(step_stats(resolved, 8, 2, 7.0, False), resolved, {})
    times = agg.buckets[0].times_ms
    assert times.seen == 10 and times.values == [float(step) for step in range(2, 12)]


def test_the_interval_of_a_median_does_not_depend_on_the_order_of_the_values():
    """Pairs pooled from several calls, in whatever order the files are given, read the same interval: the 18
    batch-32 ratios of 2026-12-06 (docs/BENCHMARKS.md), forwards and backwards. And the interval holds the median."""
    from harness.common.metrics import median_ci95

    ratios = [0.944, 1.020, 0.949, 0.987, 0.834, 0.800, 0.885, 0.817, 0.867, 1.390, 0.748]
    ratios += [0.809, 0.928, 0.930, 0.948, 1.001, 1.032, 1.036]
    forwards, backwards = median_ci95(ratios, draws=10000), median_ci95(ratios[::-1], draws=10000)
    assert forwards == backwards
    assert forwards[0] < 0.937 < forwards[1]
