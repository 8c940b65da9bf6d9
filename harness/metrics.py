"""The one home of the bandwidth formulas (nccl-tests' definitions, see shared METRICS.md).

Both the training hook and the raw sweep compute algbw and busbw here, so their numbers are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
