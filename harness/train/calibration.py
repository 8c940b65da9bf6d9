"""The compute-only step, measured inside the training loop: a few steps with communication skipped.

Right after the warm-up steps, `steps` optimizer steps run the very same code path (Lightning, DDP, the
timed hook) except that the hook skips the collective and each rank keeps its own gradients. Those
gradients are zeroed before the optimizer step, so every rank applies the same update (momentum and
weight decay act on state that was synchronised) and replicas never diverge; the calibration steps make
no progress on the loss. The median of their forward + backward time is what a step would cost if
communication were free; a real step's excess over it is the exposed communication (step_stats.exposure).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from harness.common.metrics import percentile
from harness.common.names import WARMUP_STEPS


class Calibration:
    """Which steps calibrate, and the compute-only time their forward + backward gives."""

    def __init__(self, steps: int) -> None:
        self.first_step = WARMUP_STEPS  # right after warm-up, once DDP's buckets are final
        self.steps = steps
        self.samples_ms: list[float] = []

    def is_calibration_step(self, step: int) -> bool:
        return self.first_step <= step < self.first_step + self.steps

    def add(self, fwd_bwd_ms: float | None) -> None:
        if fwd_bwd_ms is not None and math.isfinite(fwd_bwd_ms):
            self.samples_ms.append(fwd_bwd_ms)

    @property
    def compute_only_ms(self) -> float:
        """Median forward + backward without communication; NaN until every calibration step is in."""
        if self.steps == 0 or len(self.samples_ms) < self.steps:
            return math.nan
        return percentile(self.samples_ms, 50)


def zero_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Zero the unsynchronised gradients of a calibration step before the optimizer sees them."""
    for p in parameters:
        if p.grad is not None:
            p.grad.zero_()
