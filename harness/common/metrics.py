"""The one home of the bandwidth formulas (nccl-tests' definitions, see docs/METRICS.md).

Both the training hook and the raw sweep compute algbw and busbw here, so their numbers are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

# Bus-bandwidth factor per collective, as a function of the world size n. The factor turns algorithm
# bandwidth into the per-link bandwidth a ring would need, so different collectives read on one scale.
BUSBW_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}

GB = 1e9  # bandwidth is decimal GB/s, as in nccl-tests


def busbw_factor(collective: str, world_size: int) -> float:
    """Factor from algbw to busbw. With one rank no data crosses a link, so busbw is 0 by definition."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if world_size == 1:
        return 0.0
    return BUSBW_FACTORS[collective](world_size)


def algbw_gbps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth S / t in GB/s; NaN when no time was measured."""
    if time_s <= 0 or not math.isfinite(time_s):
        return math.nan
    return size_bytes / time_s / GB


def busbw_gbps(collective: str, size_bytes: float, time_s: float, world_size: int) -> float:
    """Bus bandwidth algbw × factor(n) in GB/s."""
    return algbw_gbps(size_bytes, time_s) * busbw_factor(collective, world_size)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; NaN for no values."""
    return percentiles(values, (q,))[0]


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """`percentile` for each q in `qs`, from one sort of `values` (a band's p50, p10 and p90 every step)."""
    if not values:
        return [math.nan] * len(qs)
    ordered = sorted(values)
    last = len(ordered) - 1
    out = []
    for q in qs:
        pos = last * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, last)
        out.append(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))
    return out


def fit_alpha_beta(size_bytes: Sequence[float], time_us: Sequence[float]) -> tuple[float, float, float] | None:
    """Fit time = α + S/β to measured (S, time) points: α in µs, β in GB/s. Returns (α, β, max relative error).

    Least squares on the relative error: minimise Σ ((α + S/β − t) / t)², which is linear in α and 1/β.
    Plain least squares on time would fit the largest sizes only (a 50 ms point outweighs a 5 µs point by
    10⁴); on relative error every size counts alike, so both the latency floor and the bandwidth are
    fitted. α is kept ≥ 0 (refitted as S/β alone when it would go negative); β is inf where time does not
    grow with size. None with fewer than two distinct sizes or no usable time.
    """
    points = [(s, t) for s, t in zip(size_bytes, time_us, strict=True) if t > 0 and math.isfinite(t)]
    if len({s for s, _ in points}) < 2:
        return None
    # Unknowns α (µs) and γ = 1/β in µs per byte; each point gives α/t + γ·S/t ≈ 1.
    suu = sum(1 / t**2 for _, t in points)
    suv = sum(s / t**2 for s, t in points)
    svv = sum((s / t) ** 2 for s, t in points)
    su = sum(1 / t for _, t in points)
    sv = sum(s / t for s, t in points)
    det = suu * svv - suv**2
    alpha, gamma = ((svv * su - suv * sv) / det, (suu * sv - suv * su) / det) if det > 0 else (-1.0, 0.0)
    if alpha < 0:
        alpha, gamma = 0.0, sv / svv
    if gamma * max(s for s, _ in points) <= 1e-9 * alpha:  # no growth with size beyond rounding
        alpha, gamma = su / suu, 0.0
    beta = math.inf if gamma == 0 else 1.0 / (gamma * 1e3)  # µs per byte -> GB/s (1e9 B/s)
    worst = max(abs(alpha_beta_time_us(s, alpha, beta) - t) / t for s, t in points)
    return alpha, beta, worst


def alpha_beta_time_us(size_bytes: float, alpha_us: float, beta_gbps: float) -> float:
    """Time of one operation of S bytes under the α-β model: α + S/β, in µs."""
    return alpha_us + size_bytes / (beta_gbps * 1e3)


def busy_ms(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (gloo runs up to two collectives at once): the harness's
    comm time, and the step model's communication under backward."""
    total = 0.0
    current_start = current_end = None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def median_ci95(values: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 95 % interval of the median of `values`: a percentile bootstrap over them (fixed seed, so a report
    printed twice from the same data reads the same; sorted first, so the same values in another order, such as
    several calls' pairs pooled in another order, read the same too)."""
    samples = np.sort(np.asarray(values, dtype=float))
    rng = np.random.default_rng(0)
    medians = np.median(rng.choice(samples, size=(draws, samples.size)), axis=1)
    return float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))
