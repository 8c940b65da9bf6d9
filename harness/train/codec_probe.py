"""The codec cost of the fp16 and bf16 compress hooks, probed once at the end of a run and fitted to
ms = fixed_ms + ms_per_melement × numel / 1e6.

The advisor predicts what a compress hook would cost on this device even for a run that used another hook,
so the run times the hook's own codec on bucket-like buffers: exactly what hook.py's compress hook does per
bucket, `hook.compress` (the cast and the pre-division) then the copy back into the fp32 bucket, for float16
and bfloat16, on the training device. Sizes run geometrically (×SIZE_FACTOR) from SMALLEST_NUMEL, or a
sixteenth of the model for a smaller one, up to the model's trainable elements (one bucket holding every
gradient); each gets a warm-up call, then the median of REPS calls. Times come from the hook's clock: CUDA
events around the calls, with a synchronize after each, on the GPU; perf_counter on the CPU.

The fit is harness.common.metrics.fit_alpha_beta, the raw sweep's: least squares on relative error, the fixed
cost kept >= 0, so the small sizes (most buckets) weigh as much as the large ones.

CommTimingCallback runs it on rank 0 only, after the last step and its rank gathers, when the run completed
with a timed hook: no step is affected, and the other ranks wait for it at Lightning's end of fit (about 1 s
for resnet50 on 2 CPU cores, well under a second on a GPU).
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import numpy as np
import torch

from harness.common.metrics import fit_alpha_beta
from harness.train.hook import compress
from harness.train.stamps import StepStamps

PROBE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
SMALLEST_NUMEL = 2**18  # 1 MiB of fp32 gradients: DDP's first bucket, below which the fixed cost dominates
SIZE_FACTOR = 4
REPS = 5


def probe_sizes(total_numel: int) -> list[int]:
    """The bucket sizes (elements) to time: ×SIZE_FACTOR from SMALLEST_NUMEL (or total / 16 for a smaller
    model, so a fit still spans a range), each at least half of the total below it, then the total itself."""
    if total_numel < 1:
        return []
    size = max(1, min(SMALLEST_NUMEL, total_numel // 16))
    sizes = []
    while size * 2 <= total_numel:
        sizes.append(size)
        size *= SIZE_FACTOR
    return [*sizes, total_numel]


def codec_ms(
    buffer: torch.Tensor, dtype: torch.dtype, world_size: int, clock: StepStamps, reps: int, gap_s: float = 0.0
) -> float:
    """Median ms over `reps` calls (after one warm-up) of the compress hook's codec on `buffer`; `gap_s`: a pause
    after each call, as between buckets (bench.codec_contention), none when the probe runs alone."""
    times = []
    for rep in range(reps + 1):
        start = clock.now()
        buffer.copy_(compress(buffer, dtype, world_size))
        end = clock.now()
        if rep > 0:  # the first call warms the kernels and the allocator
            times.append(clock.elapsed_ms(start, end))  # waits for the GPU: the probe runs outside any step
        clock.release(start)
        clock.release(end)
        if world_size > 1:  # untimed: undo the pre-division, or every call would shrink the values 1/world_size
            buffer.mul_(world_size)  # more, to float16's subnormals within a few calls, unlike any real bucket
        if gap_s:
            time.sleep(gap_s)
    return float(np.median(times))


def probe_codec(
    total_numel: int, device: torch.device, world_size: int, grad_dtype: torch.dtype = torch.float32, reps: int = REPS
) -> dict[str, Any]:
    """summary.json's "codec_probe": per dtype, the fit and its points [numel, median ms]."""
    use_cuda = device.type == "cuda"
    clock = StepStamps(use_cuda)
    sizes = probe_sizes(total_numel)
    result: dict[str, Any] = {"device": str(device), "reps": reps}
    on_device = torch.cuda.device(device) if use_cuda else contextlib.nullcontext()
    with on_device, torch.no_grad():
        # Values spread around 0 like gradients; one buffer, of which each size takes a prefix.
        gradients = torch.linspace(-1e-2, 1e-2, max(sizes, default=0), dtype=grad_dtype, device=device)
        for name, dtype in PROBE_DTYPES.items():
            points = [[numel, codec_ms(gradients[:numel], dtype, world_size, clock, reps)] for numel in sizes]
            result[name] = {**_fit(points), "points": points}
        del gradients
    return result


def _fit(points: list[list[float]]) -> dict[str, float]:
    """fixed_ms and ms_per_melement of ms = fixed + per element × numel (NaN, written null, with one size)."""
    fitted = fit_alpha_beta([n for n, _ in points], [ms * 1e3 for _, ms in points])  # sizes in elements, times in µs
    if fitted is None:
        return {"fixed_ms": math.nan, "ms_per_melement": math.nan}
    alpha_us, beta, _ = fitted
    # t_us = alpha + numel / (beta·1e3), so 1e6 elements take 1e3 / beta µs = 1 / beta ms.
    return {"fixed_ms": alpha_us / 1e3, "ms_per_melement": 0.0 if math.isinf(beta) else 1.0 / beta}
