"""Each bucket's time band (p10, p50, p90) covers its own last BUCKET_BAND_STEPS measured steps, no more."""

from __future__ import annotations

import statistics

import pytest

from harness.common.tags import bucket_band_tags
from harness.train.dashboards import BUCKET_BAND_STEPS
from harness.train.stamps import BucketTiming
from harness.train.step_log import BucketBands


def timing(step: int, index: int, ms: float) -> BucketTiming:
    return BucketTiming(step, index, 1, 1000, 4000, "float32", 1.0, 1.0 + ms, ms, 0.0, ((1.0, 1.0 + ms),))


def test_band_is_each_buckets_last_window():
    bucket_bands = BucketBands()
    steps = BUCKET_BAND_STEPS + 15
    bucket0 = [float(step) for step in range(steps)]  # rising: an unbounded window would lag behind
    bucket1 = [100.0 + (step % 7) for step in range(steps)]
    for step in range(steps):
        bands = bucket_bands.add([timing(step, 0, bucket0[step]), timing(step, 1, bucket1[step])])
    for index, times in ((0, bucket0), (1, bucket1)):
        window = times[-BUCKET_BAND_STEPS:]
        # Linear interpolation between closest ranks (numpy's default), which "inclusive" quantiles are.
        deciles = statistics.quantiles(window, n=10, method="inclusive")
        p50, p10, p90 = bands[index]
        assert p50 == pytest.approx(statistics.median(window))
        assert p10 == pytest.approx(deciles[0]) and p90 == pytest.approx(deciles[8])
    assert bands[0][0] == pytest.approx(steps - BUCKET_BAND_STEPS / 2 - 0.5), "median of the last 20 of 0..34"


def test_band_tags_are_a_margin_charts_value_lower_upper():
    prefix = "per_bucket/03/time_ms"
    assert bucket_band_tags(3) == (f"{prefix}_p50", f"{prefix}_p10", f"{prefix}_p90")
