"""Exposed communication with its 95 % interval: the local reference against brute force, the interval's
coverage on simulated runs whose true exposure is known, and the verdict's words."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from harness.common.run_info import json_safe
from harness.train.exposure_estimate import (
    NEAREST_SAMPLES,
    ExposureEstimate,
    estimate_exposure,
    overlap_pct,
    reference_ms,
)
from harness.train.step_stats import exposure
from harness.train.summary import calibration_beyond_exposed_s

TRUE_EXPOSED_MS = 3.0
COMM_MS = 10.0  # constant, so the true overlap is 100 · (1 − 3 / 10) = 70 %
COMPUTE_MS = 100.0


def simulated_run(
    seed: int,
    steps: int = 600,
    every: int = 25,
    block: int = 5,
    noise_ms: float = 4.0,
    drift_ms: float = 8.0,
    exposed_ms: float = TRUE_EXPOSED_MS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, float]]]:
    """(measured steps, fwd_bwd ms, comm ms, calibration samples) of a run whose compute-only time ramps
    up by `drift_ms` over the run, with Gaussian noise on every step, and a constant true exposure.
    Calibration as in train.py: a block right after warm-up (steps 2..), then one step every `every`."""
    rng = np.random.default_rng(seed)
    index = np.arange(2, steps)
    compute = COMPUTE_MS + drift_ms * index / steps + rng.normal(0.0, noise_ms, len(index))
    calibrating = (index < 2 + block) | ((index - 2) % every == 0)
    calibration = [(int(s), float(ms)) for s, ms in zip(index[calibrating], compute[calibrating], strict=True)]
    measured = index[~calibrating]
    return measured, compute[~calibrating] + exposed_ms, np.full(len(measured), COMM_MS), calibration


def estimate(seed: int = 0, draws: int = 200, **run) -> ExposureEstimate:
    measured, fwd_bwd, comm, calibration = simulated_run(seed, **run)
    return estimate_exposure(measured, fwd_bwd, comm, calibration, step_ms_p50=COMPUTE_MS, draws=draws, seed=seed)


def covers(interval: tuple[float, float], truth: float) -> bool:
    return interval[0] <= truth <= interval[1]


def width(interval: tuple[float, float]) -> float:
    return interval[1] - interval[0]


def test_overlap_pct_is_the_step_formula_on_floats_and_arrays():
    for exposed_ms, comm_ms in [(2.0, 4.0), (5.0, 4.0), (-0.5, 4.0), (0.0, 1.0)]:
        assert overlap_pct(exposed_ms, comm_ms) == exposure(10.0 + exposed_ms, 10.0, comm_ms)[1]
    assert isinstance(overlap_pct(2.0, 4.0), float)
    got = overlap_pct(np.array([2.0, 5.0, -0.5, 1.0, math.nan]), np.array([4.0, 4.0, 4.0, 0.0, 4.0]))
    np.testing.assert_array_equal(got, [50.0, 0.0, 100.0, math.nan, math.nan])  # comm 0: nothing to hide
    assert math.isnan(overlap_pct(1.0, -1.0)) and math.isnan(overlap_pct(1.0, math.nan))


def brute_force_reference(step: int, calibration: list[tuple[int, float]], nearest: int) -> float:
    by_distance = sorted(calibration, key=lambda sample: (abs(sample[0] - step), sample[0]))
    return statistics.median(ms for _, ms in by_distance[:nearest])


def test_reference_is_the_median_of_the_nearest_samples_as_brute_force_finds_them():
    rng = np.random.default_rng(1)
    for _ in range(300):
        # Few distinct sample steps and integer values: ties in distance and in value are common.
        sample_steps = rng.choice(60, size=rng.integers(1, 15), replace=False)
        calibration = [(int(s), float(rng.integers(0, 5))) for s in sample_steps]  # in no particular order
        nearest = int(rng.integers(1, 8))  # sometimes more than there are samples
        steps = rng.integers(-5, 70, size=40)
        expected = [brute_force_reference(int(s), calibration, nearest) for s in steps]
        np.testing.assert_allclose(reference_ms(steps, calibration, nearest), expected, rtol=0, atol=1e-12)


def test_reference_breaks_ties_towards_the_earlier_sample_and_is_nan_without_samples():
    assert reference_ms([5], [(10, 2.0), (0, 1.0)], nearest=1)[0] == 1.0
    # From step 5: 4 is nearest, then 0 and 10 tie and 0 is taken; from step 7, 4 and 10 tie for first.
    assert reference_ms([5, 7], [(10, 2.0), (0, 1.0), (4, 7.0)], nearest=2).tolist() == [4.0, 4.5]
    assert reference_ms([0, 100], [(50, 3.0)]).tolist() == [3.0, 3.0]  # fewer samples than NEAREST_SAMPLES
    assert np.isnan(reference_ms([1, 2, 3], [])).all()


def test_the_interval_covers_the_true_exposure_in_about_95_percent_of_runs():
    runs = 240
    local = [estimate(seed, draws=200) for seed in range(runs)]
    exposed_coverage = sum(covers(e.exposed_ms_ci95, TRUE_EXPOSED_MS) for e in local) / runs
    overlap_coverage = sum(covers(e.overlap_pct_ci95, 100 * (1 - TRUE_EXPOSED_MS / COMM_MS)) for e in local) / runs
    print(f"coverage over {runs} runs: exposed {exposed_coverage:.3f}, overlap {overlap_coverage:.3f}")
    assert 0.88 <= exposed_coverage <= 0.99
    assert 0.88 <= overlap_coverage <= 0.99


def test_samples_spread_through_the_run_follow_a_drift_that_an_early_block_cannot():
    """The compute-only time ramps up by 20 ms, five times the noise. Calibrating only right after warm-up
    charges the drift to communication; the same steps with samples spread through the run do not."""
    runs, drift_ms = 100, 20.0
    spread_hits = early_hits = 0
    early_bias = []
    for seed in range(runs):
        measured, fwd_bwd, comm, calibration = simulated_run(seed, drift_ms=drift_ms)
        spread = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, draws=200, seed=seed)
        early = estimate_exposure(measured, fwd_bwd, comm, calibration[:5], COMPUTE_MS, draws=200, seed=seed)
        spread_hits += covers(spread.exposed_ms_ci95, TRUE_EXPOSED_MS)
        early_hits += covers(early.exposed_ms_ci95, TRUE_EXPOSED_MS)
        early_bias.append(early.exposed_ms_p50 - TRUE_EXPOSED_MS)
    print(f"drift {drift_ms} ms: spread coverage {spread_hits / runs:.2f}, early-only {early_hits / runs:.2f}")
    assert spread_hits / runs >= 0.88
    assert early_hits / runs <= 0.2
    # An early reference sees the run's start; the median step sits half a ramp later.
    assert statistics.median(early_bias) == pytest.approx(drift_ms / 2, abs=2.0)


def test_more_or_quieter_calibration_samples_narrow_the_interval():
    def median_width(**run) -> float:
        return statistics.median(width(estimate(seed, **run).exposed_ms_ci95) for seed in range(8))

    sparse, dense = median_width(every=50), median_width(every=10)
    noisy, quiet = median_width(noise_ms=8.0), median_width(noise_ms=2.0)
    assert dense < 0.7 * sparse  # about 2.2× the samples: about 1/1.5 the width
    assert quiet < 0.4 * noisy  # a quarter of the noise: about a quarter of the width


def test_verdict_says_resolved_zero_or_what_would_narrow_the_interval():
    resolved = estimate(steps=3000, every=10, noise_ms=0.5, exposed_ms=10.0)
    assert resolved.resolved, resolved.verdict
    assert resolved.verdict.startswith("exposed communication 10.")
    assert "95 % interval" in resolved.verdict

    zero = estimate(steps=3000, every=10, noise_ms=0.5, exposed_ms=0.0)
    assert zero.resolved and covers(zero.exposed_ms_ci95, 0.0), zero.verdict
    assert "indistinguishable from 0 (±" in zero.verdict

    # 4 ms noise on a 100 ms step with 20 samples: the interval is several ms wide.
    unresolved = estimate(steps=400, every=25, noise_ms=4.0)
    assert not unresolved.resolved
    assert unresolved.verdict.startswith("exposed communication not resolved:")
    assert "calibration samples instead of 20" in unresolved.verdict
    assert "quieter machine" not in unresolved.verdict  # 4 % of a step: more samples is the remedy

    noisy = estimate(steps=400, every=25, noise_ms=10.0)
    assert not noisy.resolved and "quieter machine" in noisy.verdict


def test_the_same_seed_gives_the_same_estimate():
    assert estimate(seed=3) == estimate(seed=3)
    measured, fwd_bwd, comm, calibration = simulated_run(3)
    other = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, draws=200, seed=4)
    assert other.exposed_ms_p50 == estimate(seed=3).exposed_ms_p50  # the point estimate has no randomness
    assert other.exposed_ms_ci95 != estimate(seed=3).exposed_ms_ci95


def test_no_calibration_sample_means_not_measured_and_json_carries_nulls():
    measured, fwd_bwd, comm, _ = simulated_run(0)
    result = estimate_exposure(measured, fwd_bwd, comm, [], COMPUTE_MS)
    assert math.isnan(result.exposed_ms_p50) and math.isnan(result.overlap_pct_p50)
    assert not result.resolved and result.calibration_samples == 0 and result.steps == len(measured)
    assert result.verdict.startswith("exposure not measured: no compute-only (calibration) samples")
    written = json.loads(json.dumps(json_safe(result.as_dict()), allow_nan=False))
    assert written == {
        "exposed_ms_p50": None,
        "exposed_ms_ci95": [None, None],
        "overlap_pct_p50": None,
        "overlap_pct_ci95": [None, None],
        "exposure_resolved": False,
        "exposure_verdict": result.verdict,
    }


def test_one_calibration_sample_gives_a_point_but_no_interval():
    measured, fwd_bwd, comm, calibration = simulated_run(0)
    result = estimate_exposure(measured, fwd_bwd, comm, calibration[:1], COMPUTE_MS)
    assert math.isfinite(result.exposed_ms_p50)
    assert result.exposed_ms_ci95 == (-math.inf, math.inf) and result.overlap_pct_ci95 == (0.0, 100.0)
    assert not result.resolved and "single compute-only sample" in result.verdict

    # Two samples: an interval, but a wide one (Student's t with one degree of freedom).
    two = estimate_exposure(measured, fwd_bwd, comm, calibration[:2], COMPUTE_MS, draws=200)
    assert math.isfinite(width(two.exposed_ms_ci95)) and not two.resolved


def test_nan_steps_and_samples_are_dropped():
    measured, fwd_bwd, comm, calibration = simulated_run(0)
    clean = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, draws=200)
    with_nan = estimate_exposure(
        np.append(measured, 999),
        np.append(fwd_bwd, math.nan),
        np.append(comm, COMM_MS),
        [*calibration, (1000, math.nan)],
        COMPUTE_MS,
        draws=200,
    )
    assert with_nan == clean
    assert clean.steps == len(measured) and clean.calibration_samples == len(calibration)

    nothing = estimate_exposure([1, 2], [math.nan, math.nan], [1.0, 1.0], calibration, COMPUTE_MS)
    assert nothing.steps == 0 and math.isnan(nothing.exposed_ms_p50)
    assert nothing.verdict.startswith("exposure not measured")


def test_no_communication_leaves_exposure_but_no_overlap():
    """One rank with the no-op hook: comm is 0, so there is an exposed time (noise around 0) but no overlap."""
    measured, fwd_bwd, _, calibration = simulated_run(0, exposed_ms=0.0)
    result = estimate_exposure(measured, fwd_bwd, np.zeros(len(measured)), calibration, COMPUTE_MS, draws=200)
    assert covers(result.exposed_ms_ci95, 0.0)
    assert math.isnan(result.overlap_pct_p50) and all(map(math.isnan, result.overlap_pct_ci95))
    assert "overlap" not in result.verdict

    # Only some steps communicated: overlap from those alone.
    comm = np.where(np.arange(len(measured)) % 2 == 0, COMM_MS, 0.0)
    part = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, draws=200)
    expected = np.median(overlap_pct(fwd_bwd - reference_ms(measured, calibration), comm)[comm > 0])
    assert part.overlap_pct_p50 == pytest.approx(expected)
    assert covers(part.overlap_pct_ci95, part.overlap_pct_p50)


def test_nearest_samples_is_used_by_default():
    measured, fwd_bwd, comm, calibration = simulated_run(0)
    by_default = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, draws=50)
    explicit = estimate_exposure(measured, fwd_bwd, comm, calibration, COMPUTE_MS, nearest=NEAREST_SAMPLES, draws=50)
    assert by_default == explicit
    with pytest.raises(ValueError, match="nearest"):
        reference_ms([1], [(1, 1.0)], nearest=0)


def test_one_steps_overlap_is_the_same_as_the_arrays():
    """The per-step float path and the array path of overlap_pct give the same values, edge cases included."""
    exposed = [-3.0, 0.0, 2.5, 10.0, 15.0, math.nan, 4.0, 4.0]
    comm = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 0.0, math.nan]
    as_array = overlap_pct(np.array(exposed), np.array(comm))
    one_by_one = [overlap_pct(e, c) for e, c in zip(exposed, comm, strict=True)]
    np.testing.assert_array_equal(np.array(one_by_one), as_array)
    assert one_by_one[:5] == [100.0, 100.0, 75.0, 0.0, 0.0]


def test_calibration_cost_beyond_exposed_is_what_a_measured_step_would_not_have_paid():
    # 5 steps averaged after backward for 0.884 s in all; a measured step exposes 73.8 ms: 0.884 − 5 × 0.0738.
    assert calibration_beyond_exposed_s(0.884, 5, 73.8) == pytest.approx(0.515)
    # A negative exposed p50 (noise) saves nothing; an averaging faster than the exposure costs nothing.
    assert calibration_beyond_exposed_s(0.884, 5, -2.0) == pytest.approx(0.884)
    assert calibration_beyond_exposed_s(0.100, 5, 73.8) == 0.0
    # No exposed figure, or no calibration step: nothing to say.
    assert calibration_beyond_exposed_s(0.884, 5, math.nan) is None
    assert calibration_beyond_exposed_s(0.0, 0, 73.8) is None
