"""Per-parameter gradient-ready times, taken in calibration steps only: recording, resolving and aggregating them.

The advisor predicts the best bucket cap and hook from one run; for that it needs when each gradient becomes
ready in backward, which no bucket timing shows (a bucket is ready when its last gradient is). During a
timeline step (a calibration step kept for it, calibration.py) `GradReadyRecorder` registers a gradient hook
(`Tensor.register_hook`) on every trainable parameter and takes it off entirely when backward is over, so
measured steps carry no hook and pay nothing. Calibration steps skip communication, so their ready times are
backward's own, undisturbed by collectives (gloo's threads take CPU cores; NCCL kernels take SMs).

Facts this rests on (checked with torch 2.14 on CPU, under DDP; tests/test_backward_timeline.py):
- A parameter's gradient hook runs in its AccumulateGrad node when the gradient has been computed, just
  before it is accumulated into `.grad` and DDP's own hook on that node marks the parameter ready; so the
  recorded order is the order in which DDP saw gradients ready (the order it rebuilt its buckets in).
- Why not `register_post_accumulate_grad_hook`, which runs just after the accumulation: once registered,
  torch keeps its C++ wrapper on the parameter for good (removing the handle, or setting
  `_post_accumulate_grad_hooks` to None, leaves it calling the old, emptied dict), and every later backward
  pays for it: about 1 µs per parameter on a 2-core CPU. Setting `_backward_hooks` to None does drop a
  gradient hook's wrapper (torch clears the tensor's hooks): measured, no cost left.
- Under gradient accumulation the hooks fire on every micro-batch, `no_sync` ones included. Every stamp of
  the step is overwritten by the next micro-batch, so what is kept is the last micro-batch: the one that
  synchronises, whose backward DDP buckets.

Like the comm hook, a ready hook only records: a CUDA event (one per parameter, acquired before the step,
recorded again on each micro-batch) on the current stream, or `time.perf_counter_ns()` on the CPU, into a
preallocated slot. Nothing synchronises, reads a tensor or writes. A step's stamps are resolved with the
callback's other stamps, RESOLVE_LAG_STEPS later (skipped while an event is not yet complete, so this never
waits), and at the end of training.

Every rank records (a calibration step costs the same on each), and rank 0's timeline is the one written to
summary.json under "backward_timeline" (docs/METRICS.md).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils.hooks import RemovableHandle

from harness.train.stamps import Stamp, StepStamps

# summary.json's names for the time source of the timeline.
CUDA_EVENT = "cuda_event"
CPU_CLOCK = "cpu_clock"


@dataclass(slots=True)
class _StepRecord:
    """One calibration step's raw stamps; `ready` is filled by the hooks, by parameter index."""

    step: int
    ready: list[Stamp | None]
    events: list[torch.cuda.Event] = field(default_factory=list)  # GPU: the event each parameter's hook records
    forward_start: Stamp | None = None
    backward_start: Stamp | None = None


class ReadySample(NamedTuple):
    """One calibration step's timeline, in ms: forward start → backward start, and each parameter's ready time
    from backward start (by parameter index)."""

    step: int
    forward_ms: float
    ready_ms: list[float]


class GradReadyRecorder:
    """Records when each trainable parameter's gradient is ready, in the steps it is told to; aggregates them.

    `module` is the model inside DDP; its trainable parameters, in `named_parameters()` order, are DDP's
    parameter indices (the order of `dist._compute_bucket_assignment_by_size`). Names come from `param_names`,
    the timed hook's mapping (hook.make_hook_state), so the timeline and the bucket table name layers alike.
    `stamps` is the hook's StepStamps: the same clock, and on the GPU the same event pool.

    The callback calls, for a step to record: `begin` before the step's clock starts, `forward_start` at each
    micro-batch's start, `backward_start` before each backward, and `end_backward` once backward is over and
    the backward's end is stamped; then `resolve` later, and `timeline` for the summary. Registering and removing
    the hooks costs about 17 µs a parameter on a 2-core CPU (2.8 ms for resnet50), outside the step's clock that
    way; the hooks' calls inside backward add about 5 µs a parameter on that CPU (0.2 ms of resnet_tiny's 16 ms),
    and a CUDA event each on the GPU. So the steps recorded are calibration.py's timeline steps, which give no
    compute-only sample.
    """

    def __init__(self, module: torch.nn.Module, param_names: dict[int, str], stamps: StepStamps) -> None:
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.names = [param_names[id(p)] for p in self.params]
        self.stamps = stamps
        self.samples: list[ReadySample] = []
        self._open: _StepRecord | None = None  # the step being recorded (its hooks registered)
        self._handles: list[RemovableHandle] = []
        self._pending: list[_StepRecord] = []  # backward over, not yet resolved

    # -- recording (the training loop's thread, except the hooks) --------------------------------------------

    def begin(self, step: int) -> None:
        """Register the hooks that record `step` (dropping a step that never reached its end)."""
        self._drop_open()
        self._open = self._begin(step)

    def forward_start(self) -> None:
        """A micro-batch of the step being recorded starts (a later micro-batch's stamp replaces the earlier)."""
        if self._open is not None:
            self._replace(self._open, "forward_start")

    def backward_start(self) -> None:
        """Backward of the step being recorded starts (the loss is computed); replaces an earlier micro-batch's."""
        if self._open is not None:
            self._replace(self._open, "backward_start")

    def end_backward(self) -> None:
        """Backward is over: remove the hooks, so no later step carries them, and queue the step to resolve."""
        record = self._open
        self._remove_hooks()
        if record is not None:
            self._open = None
            self._pending.append(record)

    def close(self) -> None:
        """The end of training (or a failure): remove any hooks, and drop a step stopped before its end."""
        self._drop_open()

    def _begin(self, step: int) -> _StepRecord:
        record = _StepRecord(step, [None] * len(self.params))
        if self.stamps.use_cuda:
            record.events = [self.stamps.events.acquire() for _ in self.params]
        self._handles = [p.register_hook(self._ready_hook(record, index)) for index, p in enumerate(self.params)]
        return record

    def _ready_hook(self, record: _StepRecord, index: int):
        """The hook of parameter `index`: runs on the autograd thread, so it only records (never blocks)."""
        ready = record.ready
        if record.events:
            event = record.events[index]

            def stamp_event(_grad: torch.Tensor) -> None:
                event.record()  # on the current stream: when the GPU has computed this gradient
                ready[index] = event

            return stamp_event
        clock = time.perf_counter_ns  # StepStamps' CPU clock

        def stamp_clock(_grad: torch.Tensor) -> None:
            ready[index] = clock()

        return stamp_clock

    def _replace(self, record: _StepRecord, name: str) -> None:
        previous = getattr(record, name)
        setattr(record, name, self.stamps.now())
        if previous is not None:
            self.stamps.release(previous)

    def _remove_hooks(self) -> None:
        if not self._handles:
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        # With no Python gradient hook left (others' keep the dict and their wrapper), None makes torch clear the
        # parameter's hook list, the wrapper that would still run every backward included.
        for p in self.params:
            if not p._backward_hooks:
                p._backward_hooks = None

    def _drop_open(self) -> None:
        self._remove_hooks()
        if self._open is not None:
            self._release(self._open)
            self._open = None

    # -- resolving and aggregating (between steps, and at the end) -------------------------------------------

    def resolve(self, upto: int, wait: bool = False) -> None:
        """Turn the stamps of the recorded steps up to `upto` into a `ReadySample` each. On the GPU a step whose
        events are not all complete waits for a later call, unless `wait` (the end of training). A step with a
        parameter that got no gradient (or without its start stamps) gives no sample."""
        kept = []
        for record in self._pending:
            if record.step > upto or not (wait or self._reached(record)):
                kept.append(record)
                continue
            sample = self._sample(record)
            if sample is not None:
                self.samples.append(sample)
            self._release(record)
        self._pending = kept

    def _reached(self, record: _StepRecord) -> bool:
        """Whether the GPU has passed every stamp of the step (always, on the CPU); never waits."""
        if not self.stamps.use_cuda:
            return True
        stamps = (record.forward_start, record.backward_start, *record.ready)
        return all(stamp is None or stamp.query() for stamp in stamps)

    def _sample(self, record: _StepRecord) -> ReadySample | None:
        if record.forward_start is None or record.backward_start is None or any(r is None for r in record.ready):
            return None
        start = record.backward_start
        forward_ms = self.stamps.elapsed_ms(record.forward_start, start)
        return ReadySample(record.step, forward_ms, [self.stamps.elapsed_ms(start, r) for r in record.ready])

    def _release(self, record: _StepRecord) -> None:
        for stamp in (record.forward_start, record.backward_start):
            if stamp is not None:
                self.stamps.release(stamp)
        if record.events:
            self.stamps.events.release(*record.events)

    def timeline(self) -> dict[str, Any] | None:
        """summary.json's "backward_timeline": medians (and p10/p90 of the ready times) over the samples so far,
        or None with none. Ready times are from backward start; backward_ms runs to the last parameter ready."""
        if not self.samples:
            return None
        ready = np.array([s.ready_ms for s in self.samples], dtype=float)  # samples × parameters
        p10, p50, p90 = np.percentile(ready, [10, 50, 90], axis=0)
        return {
            "time_source": CUDA_EVENT if self.stamps.use_cuda else CPU_CLOCK,
            "samples": len(self.samples),
            "steps": [s.step for s in self.samples],
            "forward_ms": float(np.median([s.forward_ms for s in self.samples])),
            "backward_ms": float(np.median(ready.max(axis=1))) if ready.size else math.nan,
            "params": [
                {
                    "index": index,
                    "name": self.names[index],
                    "numel": p.numel(),
                    "itemsize": p.element_size(),
                    "ready_ms": float(p50[index]),
                    "ready_ms_p10": float(p10[index]),
                    "ready_ms_p90": float(p90[index]),
                }
                for index, p in enumerate(self.params)
            ],
        }
