"""The compute-only step, measured inside the training loop: steps with communication skipped, spread
through the run.

A calibration step runs the very same code path (Lightning, DDP, the timed hook) except that the hook skips
the collective and each rank keeps its own gradients. Those gradients are zeroed before the optimizer step,
so every rank applies the same update (momentum and weight decay act on state that was synchronised) and
replicas never diverge; a calibration step makes no progress on the loss.

The steps are a short block right after warm-up, then one every `every` steps: a host, its clocks and its
allocator drift over a run, and a reference taken only at the start would charge that drift to communication.
Each measured step is judged against the compute-only samples nearest to it in time (exposure_estimate.py):
while training, the nearest of those taken so far; in the summary, the nearest on either side.

With `every` = 75 a 1,000-step run spends 16 steps (1.6 %) calibrating, a 200-step run 5. The spread steps
sit at first + 75·j, never on a multiple of 100, where DDP samples its own statistics (ddp_crosscheck.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from harness.common.metrics import percentile
from harness.common.names import WARMUP_STEPS
from harness.train.exposure_estimate import reference_ms

DEFAULT_BLOCK_STEPS = 3
DEFAULT_EVERY = 75


class Calibration:
    """Which steps calibrate, and the compute-only samples (step, forward + backward ms) they give."""

    def __init__(self, steps: int, every: int = 0) -> None:
        self.first_step = WARMUP_STEPS  # right after warm-up, once DDP's buckets are final
        self.steps = steps  # the first block; 0 turns calibration off
        self.every = every if steps > 0 else 0  # then one step in every `every`; 0: the block only
        self.samples: list[tuple[int, float]] = []
        self._latest_reference = (0, math.nan)  # (samples it was computed from, value)

    def is_calibration_step(self, step: int) -> bool:
        if self.steps == 0 or step < self.first_step:
            return False
        if step < self.first_step + self.steps:
            return True
        return self.every > 0 and (step - self.first_step) % self.every == 0

    def count_upto(self, last_step: int) -> int:
        """How many of the steps up to `last_step` calibrate."""
        return sum(self.is_calibration_step(step) for step in range(last_step + 1))

    def add(self, step: int, fwd_bwd_ms: float | None) -> None:
        if fwd_bwd_ms is not None and math.isfinite(fwd_bwd_ms):
            self.samples.append((step, fwd_bwd_ms))

    @property
    def samples_ms(self) -> list[float]:
        return [ms for _, ms in self.samples]

    def reference_ms(self, step: int) -> float:
        """The compute-only forward + backward to judge `step` by: the median of the samples so far nearest to
        it; NaN until the first block is complete. Called every step, so the common case (a step after every
        sample so far, whose nearest are the latest) is computed once per new sample."""
        if self.steps == 0 or len(self.samples) < self.steps:
            return math.nan
        if self.samples[-1][0] <= step:
            if self._latest_reference[0] != len(self.samples):
                self._latest_reference = (len(self.samples), float(reference_ms([step], self.samples)[0]))
            return self._latest_reference[1]
        return float(reference_ms([step], self.samples)[0])

    @property
    def compute_only_ms(self) -> float:
        """Median forward + backward without communication over every sample so far (NaN before any)."""
        return percentile(self.samples_ms, 50) if self.samples else math.nan


def zero_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Zero the unsynchronised gradients of a calibration step before the optimizer sees them."""
    for p in parameters:
        if p.grad is not None:
            p.grad.zero_()
