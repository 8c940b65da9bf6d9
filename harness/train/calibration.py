"""The compute-only step, measured inside the training loop: steps with communication skipped during backward,
spread through the run.

A calibration step runs the very same code path (Lightning, DDP, the timed hook) except that the hook skips
the collective, so its forward + backward is the step without communication: the compute-only sample. Its
gradients are then averaged across the ranks after backward (calibration_average.py: the all_reduce the hook
skipped, divided by the world size as DDP's is), before the optimizer step, so a calibration step trains like
any other and replicas never diverge. What it costs is that one all_reduce run after backward instead of
hidden under it: nothing at world size 1, where there is nothing to average.

The sample steps are a short block right after warm-up, then one every `every` steps: a host, its clocks and
its allocator drift over a run, and a reference taken only at the start would charge that drift to
communication. Each measured step is judged against the compute-only samples nearest to it in time
(exposure_estimate.py): while training, the nearest of those taken so far; in the summary, the nearest on either
side. Between the block and the spread steps come the timeline steps: calibration steps too, which record when
each gradient is ready for the advisor (grad_ready.py). Those stamps are host work inside backward, so a
timeline step gives no compute-only sample: it would make the reference slower than the measured steps it judges
(bench.timeline_cost: +2.57 ms a step, 95 % interval [+0.99, +3.28], for resnet50's 161 CUDA events on the H200).

With `every` = 25 a 1,000-step run takes 42 samples (3 in the block, 39 spread), a 200-step run 10. The spread
steps sit at first + 25·j, never on a step 100·k − 1, where DDP samples its own statistics after its first ten
iterations (ddp_crosscheck.py compares those samples with measured steps).
"""

from __future__ import annotations

import math

from harness.common.metrics import percentile
from harness.common.names import WARMUP_STEPS
from harness.train.exposure_estimate import reference_ms

DEFAULT_BLOCK_STEPS = 3
DEFAULT_EVERY = 25
# Calibration steps right after the block that record the backward timeline for the advisor.
TIMELINE_STEPS = 2


class Calibration:
    """Which steps calibrate, and the compute-only samples (step, forward + backward ms) they give.

    The layout from `first_step`: the block of `steps` sample steps, then `timeline_steps` steps that record
    the backward timeline (grad_ready.py) and give no sample, then one sample step every `every` steps."""

    def __init__(self, steps: int, every: int = 0, timeline_steps: int = 0) -> None:
        self.first_step = WARMUP_STEPS  # right after warm-up, once DDP's buckets are final
        self.steps = steps  # the first block; 0 turns calibration off
        self.every = every if steps > 0 else 0  # then one step in every `every`; 0: the block only
        self.timeline_steps = timeline_steps if steps > 0 else 0
        self.samples: list[tuple[int, float]] = []
        self._latest_reference = (0, math.nan)  # (samples it was computed from, value)

    @property
    def setup_end(self) -> int:
        """The first step after the block and the timeline steps."""
        return self.first_step + self.steps + self.timeline_steps

    def is_calibration_step(self, step: int) -> bool:
        """Whether `step` skips communication in backward (a sample step or a timeline step)."""
        if self.steps == 0 or step < self.first_step:
            return False
        if step < self.setup_end:
            return True
        return self.every > 0 and (step - self.first_step) % self.every == 0

    def is_timeline_step(self, step: int) -> bool:
        """Whether `step` records the backward timeline: a calibration step whose forward + backward is no
        compute-only sample, because the timeline's per-parameter stamps are host work that backward pays for."""
        return self.first_step + self.steps <= step < self.setup_end

    def count_upto(self, last_step: int) -> int:
        """How many of the steps up to `last_step` calibrate."""
        return sum(self.is_calibration_step(step) for step in range(last_step + 1))

    def add(self, step: int, fwd_bwd_ms: float | None) -> None:
        """Keep `step`'s compute-only sample (a timeline step's is none)."""
        if self.is_timeline_step(step):
            return
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
