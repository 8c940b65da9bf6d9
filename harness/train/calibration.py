"""The compute-only step, measured inside the training loop: steps with communication skipped during backward,
spread through the run.

A calibration step runs the very same code path (Lightning, DDP, the timed hook) except that the hook skips
the collective, so its forward + backward is the step without communication: the compute-only sample. Its
gradients are then averaged across the ranks after backward (`average_gradients`: the all_reduce the hook
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
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.distributed as dist

from harness.common.metrics import percentile
from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB, WARMUP_STEPS
from harness.train.exposure_estimate import reference_ms
from harness.train.hook import dtype_name

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


# The most gradient bytes averaged in one all_reduce: DDP's default bucket, so the transient flat copy stays small.
AVERAGE_CHUNK_BYTES = int(DEFAULT_BUCKET_CAP_MB * MIB)


# One collective a calibration step makes after backward: (stamp name, dtype name, bytes). Its stamps are
# `stamp_names(name)`; the callback reads them when the step resolves.
AfterBackward = tuple[str, str, int]

# The dtypes the compress hooks send (hook.py), whose all_reduce rate the timeline steps probe after backward.
WIRE_PROBE_DTYPES = (torch.float16, torch.bfloat16)


def average_gradients(
    parameters: Iterable[torch.nn.Parameter],
    group: dist.ProcessGroup | None = None,
    stamp: Callable[[str], None] | None = None,
    probe_dtypes: bool = False,
) -> list[AfterBackward]:
    """Average a calibration step's gradients across the ranks, as DDP would have during backward: each rank's
    gradient divided by the world size, then summed. Called after backward and before the optimizer step, on every
    rank at the same point; a parameter without a gradient (unused this step) counts as zeros, as in DDP.

    The gradients go in chunks of at most AVERAGE_CHUNK_BYTES, in parameter order (the same on every rank). Each
    chunk's all_reduce is the training's own collective with backward over and nothing else running, so with
    `stamp` it is stamped apart from the copies around it (on the current stream): the advisor's rate of a
    collective after backward. With `probe_dtypes` (the timeline steps; every rank alike) it then all_reduces as
    many zeros as the first chunk has elements in each of WIRE_PROBE_DTYPES: a backend's rate per byte need not
    be the same in every dtype (gloo sums float16 on the CPU element by element, so on loopback, where the cores
    bound the collective, half the bytes take about as long). Returns every collective made ([] at world size 1)."""
    world_size = dist.get_world_size(group)
    if world_size == 1:
        return []
    grads = []
    for p in parameters:
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    if stamp is not None:
        # Calibration steps skip communication in backward, so nothing has lined the ranks up: without this, the
        # first chunk's time would hold this rank's wait for the slowest one's backward.
        dist.all_reduce(torch.zeros(1, device=grads[0].device if grads else None), group=group)
    made = []
    first_numel = 0
    for index, chunk in enumerate(_chunks(grads)):
        flat = torch.cat([g.reshape(-1) for g in chunk]).div_(world_size)
        made.append(stamped_all_reduce(flat, group, stamp, f"average_{index}"))
        first_numel = first_numel or flat.numel()
        for grad, averaged in zip(chunk, flat.split([g.numel() for g in chunk]), strict=True):
            grad.copy_(averaged.view(grad.shape))
    if probe_dtypes and first_numel:
        for dtype in WIRE_PROBE_DTYPES:
            zeros = torch.zeros(first_numel, dtype=dtype, device=grads[0].device)
            made.append(stamped_all_reduce(zeros, group, stamp, f"wire_{dtype_name(dtype)}"))
    return made


def stamped_all_reduce(
    tensor: torch.Tensor, group: dist.ProcessGroup | None, stamp: Callable[[str], None] | None, name: str
) -> AfterBackward:
    """A blocking all_reduce (sum) of `tensor`, with `stamp` (if any) called on `stamp_names(name)` around it: on
    NCCL the current stream then waits for the collective, so the stamp recorded after it is its end."""
    start, done = stamp_names(name)
    if stamp is not None:
        stamp(start)
    dist.all_reduce(tensor, group=group)
    if stamp is not None:
        stamp(done)
    return name, dtype_name(tensor.dtype), tensor.numel() * tensor.element_size()


def stamp_names(name: str) -> tuple[str, str]:
    """The names of the stamps around the collective called `name` (StepStamps.mark)."""
    return f"{name}_start", f"{name}_done"


def _chunks(grads: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Consecutive gradients of one dtype and device, up to AVERAGE_CHUNK_BYTES each (a larger one alone)."""
    chunk: list[torch.Tensor] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        if chunk and (
            size + nbytes > AVERAGE_CHUNK_BYTES or (grad.dtype, grad.device) != (chunk[0].dtype, chunk[0].device)
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(grad)
        size += nbytes
    if chunk:
        yield chunk
