"""The compute-only step: forward + backward of the training batch with no gradient communication.

Run on every rank before training, under DDP's `no_sync()`, with the gradients thrown away afterwards
so replicas never diverge. Its median is what a step would cost if communication were free; the
difference to a real step's forward + backward is the exposed communication (step_stats.exposure).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable

import torch

from harness.metrics import percentile

# The first calibration steps pay for cuDNN autotuning and allocator growth; they are run, not timed.
CALIBRATION_WARMUP_STEPS = 1


def measure_compute_only_ms(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    forward_backward: Callable[[], None],
    steps: int,
    use_cuda: bool,
) -> tuple[float, list[float]]:
    """Median ms of `steps` timed calls of `forward_backward` under `no_sync()` (after warm-up calls).

    Returns (median, every timed sample). Gradients are set to None after each call. `steps` = 0 skips it.
    """
    if steps <= 0:
        return math.nan, []
    samples: list[float] = []
    with ddp_model.no_sync():
        for i in range(CALIBRATION_WARMUP_STEPS + steps):
            start, end = _stamp(use_cuda), None
            forward_backward()
            end = _stamp(use_cuda)
            if i >= CALIBRATION_WARMUP_STEPS:
                samples.append(_elapsed_ms(start, end, use_cuda))
            ddp_model.zero_grad(set_to_none=True)
    return percentile(samples, 50), samples


def _stamp(use_cuda: bool) -> float | torch.cuda.Event:
    if use_cuda:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def _elapsed_ms(start: float | torch.cuda.Event, end: float | torch.cuda.Event, use_cuda: bool) -> float:
    if use_cuda:
        end.synchronize()
        return start.elapsed_time(end)
    return (end - start) * 1e3


def autocast_context(precision_plugin: object) -> contextlib.AbstractContextManager:
    """The autocast a Lightning precision plugin applies around training_step (none for 32-true)."""
    forward_context = getattr(precision_plugin, "forward_context", None)
    return forward_context() if forward_context is not None else contextlib.nullcontext()
