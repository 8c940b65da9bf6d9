"""Exposed communication and overlap with a 95 % interval, from measured steps and compute-only samples.

A measured step s costs fwd_bwd_s (step start to the end of backward, DDP having waited for every bucket).
A calibration step runs the same code with communication skipped, so its fwd_bwd is compute only. The
calibration steps are spread through the run (a block after warm-up, then one every K steps) because the
compute-only time drifts (clocks, caches, a busy neighbour); each measured step is compared with the
compute-only time near it:

    ref_s      = median of the NEAREST_SAMPLES calibration samples closest to s in step index
                 (ties broken towards the earlier sample; all of them if there are fewer)
    exposed_s  = fwd_bwd_s − ref_s
    overlap_s  = 100 · clip(1 − exposed_s / comm_s, 0, 1) %   (NaN where comm_s ≤ 0: nothing to hide)

The headline figures are the medians over steps of exposed_s and overlap_s.

The interval. Calibration samples are few (about 2 % of the steps) and on a busy machine they spread more
than the exposure itself, so the headline comes with a 95 % percentile bootstrap interval over two sources
of noise. Each draw resamples the measured steps with replacement, and rebuilds the calibration samples as
their local reference plus noise drawn with replacement from the samples' own noise; the noise is read from
successive differences of the step-ordered samples, (x_{j+1} − x_j) / √2 and its negative, which a slow
drift barely touches. The references are recomputed from the rebuilt samples with the same neighbour sets,
and the medians taken again. Below 30 samples the interval is widened about the estimate by Student's t
over the normal quantile (a bootstrap from few samples takes their spread as known); a single sample gives
no interval at all (−∞, +∞), and the overlap interval is then the whole 0 to 100 %.

The verdict. Let h be the interval's half-width and tolerance = max(10 % of |exposed p50|, 1 % of the
median step time). The estimate is resolved when h ≤ tolerance: a tenth of the answer, or an amount nobody
would act on. A resolved interval that contains 0 reads "indistinguishable from 0 (±h ms)". An unresolved
one names h and the remedy: about (h / tolerance)² times as many calibration samples (a longer run or more
frequent calibration), or, where the compute-only samples spread over 5 % of a step, a quieter machine.

Pure functions: numpy only, no torch, no process group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Five samples: the median of five shrugs off two outliers (a busy machine's stray slow step), while the
# window stays short enough in step index (five calibration intervals) to follow a slow drift.
NEAREST_SAMPLES = 5

# A percentile bootstrap from n samples is about as wide as a normal interval with the samples' own spread,
# which for few samples is too narrow: it takes that spread as known. Below this many samples the interval
# is widened by Student's t quantile over the normal one, as a t interval would be (at 5 samples, 1.4×).
MIN_SAMPLES_FOR_INTERVAL = 30

# Resolved when the half-width is at most this share of |exposed p50| ...
RELATIVE_TOLERANCE = 0.10
# ... or at most this share of the median step time: an amount too small to matter to a step.
STEP_TOLERANCE = 0.01
# Compute-only samples spreading more than this share of a step: the machine's noise is the remedy.
NOISY_MACHINE_SHARE = 0.05

# Two-sided 97.5 % quantiles of Student's t for 1..29 degrees of freedom (the normal's is 1.960).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045,
)  # fmt: skip
_Z975 = 1.959964

# Values (draws × steps) the bootstrap handles at once: a block this size stays in cache.
_BLOCK_VALUES = 10_000
# Draws whose references are computed at once: one np.median call for many, memory draws × samples × 5.
_REFERENCE_DRAWS = 100


def overlap_pct(exposed_ms: float | np.ndarray, comm_ms: float | np.ndarray) -> float | np.ndarray:
    """Share of the busy communication time hidden behind compute, in %: 100 · (1 − exposed / comm),
    clamped to [0, 100] because noise can make exposed slightly negative or larger than comm.

    NaN where comm ≤ 0 (nothing was communicated, so nothing could be hidden) or either input is NaN.
    Floats in give a float out; arrays broadcast.
    """
    if isinstance(exposed_ms, float | int) and isinstance(comm_ms, float | int):
        # One step's, on the training loop every step: plain floats cost a tenth of numpy's scalar path.
        if not comm_ms > 0 or math.isnan(exposed_ms):
            return math.nan
        return 100.0 * min(max(1.0 - exposed_ms / comm_ms, 0.0), 1.0)
    exposed = np.asarray(exposed_ms, dtype=float)
    comm = np.asarray(comm_ms, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = np.where(comm > 0, 100.0 * np.clip(1.0 - exposed / comm, 0.0, 1.0), np.nan)
    return float(pct) if pct.ndim == 0 else pct


def _window_starts(queries: np.ndarray, sample_steps: np.ndarray, k: int) -> np.ndarray:
    """For each query step, the first index of its k nearest samples in `sample_steps` (sorted).

    The k nearest samples of a sorted list are a contiguous window, found by bisection on its start: move
    right while the sample leaving on the left is strictly farther than the one entering on the right, so a
    tie keeps the earlier sample. All queries bisect together, in about log2(samples) numpy passes.
    """
    n = len(sample_steps)
    lo = np.zeros(len(queries), dtype=np.intp)
    hi = np.full(len(queries), n - k, dtype=np.intp)
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = (lo + hi) // 2
        leaving = queries - sample_steps[mid]
        entering = sample_steps[np.minimum(mid + k, n - 1)] - queries
        move_right = active & (leaving > entering)
        lo = np.where(move_right, mid + 1, lo)
        hi = np.where(active & ~move_right, mid, hi)


@dataclass(frozen=True)
class _Neighbours:
    """Calibration samples in step order and each query's window of nearest samples, shared by the
    point estimate and every bootstrap draw (many steps share one window)."""

    values: np.ndarray  # sample ms, in step order
    windows: np.ndarray  # (distinct windows, k): sample indices of each window
    of_query: np.ndarray  # per query: its row in `windows`

    def references(self, values: np.ndarray) -> np.ndarray:
        """Median of each window, for sample values of shape (samples,) or (draws, samples)."""
        return np.median(values[..., self.windows], axis=-1)


def _neighbours(queries: np.ndarray, calibration: Sequence[tuple[int, float]], nearest: int) -> _Neighbours:
    if nearest < 1:
        raise ValueError(f"nearest must be at least 1, got {nearest}")
    sample_steps = np.array([step for step, _ in calibration], dtype=np.int64)
    sample_ms = np.array([ms for _, ms in calibration], dtype=float)
    order = np.argsort(sample_steps, kind="stable")
    sample_steps, sample_ms = sample_steps[order], sample_ms[order]
    k = min(nearest, len(sample_steps))
    starts = _window_starts(queries, sample_steps, k)
    distinct, of_query = np.unique(starts, return_inverse=True)
    return _Neighbours(sample_ms, distinct[:, None] + np.arange(k), of_query.reshape(-1))


def reference_ms(
    steps: Sequence[int], calibration: Sequence[tuple[int, float]], nearest: int = NEAREST_SAMPLES
) -> np.ndarray:
    """Per step, the compute-only time near it: the median of the `nearest` calibration samples (step, ms)
    closest in step index, ties broken towards the earlier sample; all samples if there are fewer.

    Local rather than one run-wide median, because the compute-only time drifts over a run and an early
    reference would charge the drift to communication. NaN for every step when there is no sample. Samples
    are expected at distinct steps; of two at one step, which enters a window at its edge is unspecified.
    """
    queries = np.asarray(steps, dtype=np.int64).reshape(-1)
    if not calibration:
        return np.full(len(queries), np.nan)
    found = _neighbours(queries, calibration, nearest)
    return found.references(found.values)[found.of_query]


def _noise(values: np.ndarray) -> np.ndarray:
    """The calibration samples' own noise, centred and symmetric: successive differences of the step-ordered
    samples over √2 (each has the variance of one sample's noise if the drift between neighbours is small),
    with their negatives."""
    half = np.diff(values) / math.sqrt(2.0)
    return np.concatenate([half, -half])


def _small_sample_widening(samples: int) -> float:
    """Student's t over the normal 97.5 % quantile, for an interval from `samples` calibration samples."""
    if samples >= MIN_SAMPLES_FOR_INTERVAL:
        return 1.0
    return _T975[samples - 2] / _Z975


@dataclass(frozen=True)
class ExposureEstimate:
    """The run's exposed communication and overlap, each a median over steps with its 95 % interval."""

    exposed_ms_p50: float
    exposed_ms_ci95: tuple[float, float]
    overlap_pct_p50: float
    overlap_pct_ci95: tuple[float, float]
    steps: int  # measured steps used (finite forward + backward)
    calibration_samples: int  # compute-only samples used (finite)
    resolved: bool
    verdict: str  # one sentence for the end-of-run line

    def as_dict(self) -> dict:
        """The fields summary.json carries (NaN and ±∞ stay floats: json_safe writes them as null)."""
        return {
            "exposed_ms_p50": self.exposed_ms_p50,
            "exposed_ms_ci95": list(self.exposed_ms_ci95),
            "overlap_pct_p50": self.overlap_pct_p50,
            "overlap_pct_ci95": list(self.overlap_pct_ci95),
            "exposure_resolved": self.resolved,
            "exposure_verdict": self.verdict,
        }


def _not_measured(steps: int, samples: int, why: str) -> ExposureEstimate:
    nan2 = (math.nan, math.nan)
    return ExposureEstimate(math.nan, nan2, math.nan, nan2, steps, samples, False, f"exposure not measured: {why}.")


def _middle(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two middle order statistics along the last axis (the same one twice for an odd count): their mean
    is the median, and a decreasing function's median is the mean of its values there. np.partition avoids
    np.median's NaN scan, which costs three times the partition itself."""
    half = values.shape[-1] // 2
    if values.shape[-1] % 2:
        middle = np.partition(values, half, axis=-1)[..., half]
        return middle, middle
    parted = np.partition(values, half - 1, axis=-1)
    return parted[..., half - 1], parted[..., half:].min(axis=-1)


def _pick(values: np.ndarray, picked: np.ndarray) -> np.ndarray:
    """values[row, picked[row]] for every row; np.take_along_axis is four times slower."""
    if len(values) == 1:
        return values[0][picked[0]][None]
    return values.reshape(-1)[picked + np.arange(len(values))[:, None] * values.shape[1]]


def _bootstrap(
    fwd_bwd: np.ndarray,
    comm: np.ndarray,
    found: _Neighbours,
    samples_of: np.ndarray,
    draws: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Medians of exposed ms and overlap % over `draws` bootstrap runs (see the module docstring).

    Draws go through the steps in blocks of about _BLOCK_VALUES values, one draw at a time for long runs:
    a gather from a block that fits in cache is fast, which keeps 1,000 draws of 10,000 steps well under
    0.5 s, and short runs still pay numpy's per-call cost only once per block.
    """
    rng = np.random.default_rng(seed)
    fitted = found.references(found.values)[samples_of]  # each sample's local reference, at its own step
    noise = _noise(found.values)
    n_steps = len(fwd_bwd)
    overlap_steps = np.flatnonzero(comm > 0)
    same_steps = len(overlap_steps) == n_steps  # the usual case: overlap from the very same resample
    with np.errstate(divide="ignore"):
        inverse_comm = np.where(comm > 0, 1.0 / comm, np.nan)
    per_block = max(1, _BLOCK_VALUES // n_steps)
    per_chunk = per_block * math.ceil(_REFERENCE_DRAWS / per_block)
    exposed_draws = np.empty(draws)
    ratio_middles = np.full((2, draws), np.nan)  # the middle two exposed / comm of each draw
    for chunk in range(0, draws, per_chunk):
        count = min(per_chunk, draws - chunk)
        chunk_refs = found.references(fitted + rng.choice(noise, size=(count, len(fitted))))  # (draws, windows)
        for first in range(0, count, per_block):
            refs = chunk_refs[first : first + per_block]
            rows = slice(chunk + first, chunk + first + len(refs))
            exposed = fwd_bwd - refs[:, found.of_query]  # (draws, steps)
            picked = rng.integers(0, n_steps, size=exposed.shape, dtype=np.int32)
            lo, hi = _middle(_pick(exposed, picked))
            exposed_draws[rows] = (lo + hi) / 2
            if not same_steps:
                if not len(overlap_steps):
                    continue
                picked = overlap_steps[rng.integers(0, len(overlap_steps), size=(len(refs), len(overlap_steps)))]
            ratio_middles[:, rows] = _middle(_pick(exposed * inverse_comm, picked))
    # overlap % decreases with exposed / comm, so its median is the mean of its values at that ratio's middle.
    return exposed_draws, overlap_pct(ratio_middles, 1.0).mean(axis=0)


def _interval(draws: np.ndarray, point: float, widening: float) -> tuple[float, float]:
    """95 % percentile interval of the draws, widened about the point estimate for few samples."""
    if np.isnan(draws).all() or math.isnan(point):
        return math.nan, math.nan
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(point - widening * (point - lo)), float(point + widening * (hi - point))


def _verdict(
    exposed: float, ci: tuple[float, float], overlap: float, step_ms_p50: float, noise_ms: float, samples: int
) -> tuple[bool, str]:
    """(resolved, sentence) by the rule in the module docstring."""
    half = (ci[1] - ci[0]) / 2
    step_ms = step_ms_p50 if math.isfinite(step_ms_p50) and step_ms_p50 > 0 else 0.0
    tolerance = max(RELATIVE_TOLERANCE * abs(exposed), STEP_TOLERANCE * step_ms)
    overlap_words = f", overlap {overlap:.0f} %" if math.isfinite(overlap) else ""
    if half <= tolerance:
        if ci[0] <= 0 <= ci[1]:
            return True, f"exposed communication indistinguishable from 0 (±{half:.2f} ms){overlap_words}."
        return True, (
            f"exposed communication {exposed:.2f} ms per step (95 % interval {ci[0]:.2f} to {ci[1]:.2f} ms)"
            f"{overlap_words}."
        )
    if tolerance > 0:
        needed = math.ceil(samples * min((half / tolerance) ** 2, 1e6))
        remedy = f"about {needed} calibration samples instead of {samples} (a longer run or more frequent calibration)"
    else:
        remedy = "more calibration samples (a longer run or more frequent calibration)"
    if step_ms and noise_ms > NOISY_MACHINE_SHARE * step_ms:
        remedy += (
            f", or a quieter machine (compute-only samples spread ±{noise_ms:.2f} ms, "
            f"{100 * noise_ms / step_ms:.0f} % of a step)"
        )
    return False, (
        f"exposed communication not resolved: {exposed:.2f} ms ± {half:.2f} ms (95 %) against the "
        f"±{tolerance:.2f} ms needed; it would take {remedy}."
    )


def estimate_exposure(
    steps: Sequence[int],
    fwd_bwd_ms: Sequence[float],
    comm_ms: Sequence[float],
    calibration: Sequence[tuple[int, float]],
    step_ms_p50: float,
    nearest: int = NEAREST_SAMPLES,
    draws: int = 1000,
    seed: int = 0,
) -> ExposureEstimate:
    """Median exposed ms and overlap % over the measured steps, each with a 95 % interval, and a verdict.

    `steps`, `fwd_bwd_ms` and `comm_ms` describe the measured steps (calibration steps left out);
    `calibration` holds the compute-only samples as (step, fwd_bwd ms); `step_ms_p50` is the median step
    time, the scale for "too small to matter". Steps or samples with a NaN time are dropped. The same
    inputs and seed give the same estimate.
    """
    step_index = np.asarray(steps, dtype=float).reshape(-1)
    fwd_bwd = np.asarray(fwd_bwd_ms, dtype=float).reshape(-1)
    comm = np.asarray(comm_ms, dtype=float).reshape(-1)
    if not len(step_index) == len(fwd_bwd) == len(comm):
        lengths = f"{len(step_index)}, {len(fwd_bwd)}, {len(comm)}"
        raise ValueError(f"steps, fwd_bwd_ms and comm_ms differ in length: {lengths}")
    kept = np.isfinite(fwd_bwd) & np.isfinite(step_index)
    step_index, fwd_bwd, comm = step_index[kept].astype(np.int64), fwd_bwd[kept], comm[kept]
    samples = [(int(step), float(ms)) for step, ms in calibration if math.isfinite(step) and math.isfinite(ms)]
    if not samples:
        why = (
            "no compute-only (calibration) samples, so there is no reference to subtract (calibration off, or the run "
            "ended before its calibration steps)"
        )
        return _not_measured(len(fwd_bwd), 0, why)
    if not len(fwd_bwd):
        return _not_measured(0, len(samples), "no measured step has a forward + backward time")

    sample_steps = np.array([step for step, _ in samples], dtype=np.int64)
    found = _neighbours(np.concatenate([step_index, np.sort(sample_steps, kind="stable")]), samples, nearest)
    references = found.references(found.values)[found.of_query]
    exposed = fwd_bwd - references[: len(fwd_bwd)]
    overlap = overlap_pct(exposed, comm)
    exposed_p50 = float(np.median(exposed))
    overlap_p50 = float(np.nanmedian(overlap)) if np.isfinite(overlap).any() else math.nan

    if len(samples) < 2:
        unbounded = (-math.inf, math.inf)
        overlap_ci = (0.0, 100.0) if math.isfinite(overlap_p50) else (math.nan, math.nan)
        verdict = (
            f"exposed communication not resolved: {exposed_p50:.2f} ms per step from a single compute-only "
            "sample, whose noise is unknown, so there is no interval; more calibration samples "
            "(a longer run or more frequent calibration) would give one."
        )
        return ExposureEstimate(exposed_p50, unbounded, overlap_p50, overlap_ci, len(fwd_bwd), 1, False, verdict)

    step_part = _Neighbours(found.values, found.windows, found.of_query[: len(fwd_bwd)])
    exposed_draws, overlap_draws = _bootstrap(fwd_bwd, comm, step_part, found.of_query[len(fwd_bwd) :], draws, seed)
    widening = _small_sample_widening(len(samples))
    exposed_ci = _interval(exposed_draws, exposed_p50, widening)
    overlap_ci = _interval(overlap_draws, overlap_p50, widening)
    if math.isfinite(overlap_ci[0]):
        overlap_ci = (max(0.0, overlap_ci[0]), min(100.0, overlap_ci[1]))
    noise_ms = float(np.std(_noise(found.values)))
    resolved, verdict = _verdict(exposed_p50, exposed_ci, overlap_p50, step_ms_p50, noise_ms, len(samples))
    return ExposureEstimate(
        exposed_p50, exposed_ci, overlap_p50, overlap_ci, len(fwd_bwd), len(samples), resolved, verdict
    )
