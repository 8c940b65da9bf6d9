"""A run's measured backward timeline and codec cost, read back from its summary.json for the advisor.

train.py records, in its calibration steps only (harness.train.grad_ready), when each parameter's gradient
became ready, measured from the start of backward, and at the end of the run how long the fp16 and bf16
hooks' cast and copy back take for buffers of several sizes (harness.train.codec_probe). This module reads
both, each field checked (a BadFile of one line naming the field otherwise), into plain dataclasses: the
step model (harness.analysis.step_model) needs no torch and no summary layout.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from harness.analysis.checked import BadFile, Fields
from harness.common.names import COMPRESS_HOOKS


@dataclass(frozen=True)
class ParamReady:
    """One trainable parameter: its place in DDP's parameter order, its size, and when its gradient is ready."""

    index: int
    """Position among the model's trainable parameters (named_parameters() order, DDP's parameter index)."""
    name: str
    numel: int
    itemsize: int
    ready_ms: float
    """Median over the calibration steps, from the start of backward."""


@dataclass(frozen=True)
class BackwardTimeline:
    """When the gradients of one run's model become ready, without communication (calibration steps)."""

    params: tuple[ParamReady, ...]
    forward_ms: float
    backward_ms: float
    """From the start of backward to the last gradient ready."""
    samples: int
    time_source: str

    def ready_order(self) -> list[ParamReady]:
        """The parameters in the order their gradients became ready: DDP's order for its bucket rebuild.

        Equal times (a CPU clock's resolution) keep DDP's default assumption, later parameters first."""
        return sorted(self.params, key=lambda p: (p.ready_ms, -p.index))


@dataclass(frozen=True)
class CodecCost:
    """What one compress hook costs per bucket, on the run's device: cast + divide, then copy back."""

    fixed_ms: float
    ms_per_melement: float
    source: str
    points: tuple[tuple[int, float], ...] = ()
    """(numel, ms) as probed. On a CPU the cost per element grows with size (caches), so a straight line fitted
    on relative error is right for small buffers and 4x low at 25M elements: between and beyond the points the
    cost is interpolated along them instead (the line only where there are fewer than two)."""

    def ms(self, numel: int) -> float:
        pts = sorted(self.points)
        if len(pts) < 2:
            return max(0.0, self.fixed_ms + self.ms_per_melement * numel / 1e6)
        for (n0, t0), (n1, t1) in itertools.pairwise(pts):
            if numel <= n1 or (n1, t1) == pts[-1]:
                return max(0.0, t0 + (t1 - t0) * (numel - n0) / (n1 - n0))
        return pts[-1][1]


def read_timeline(summary: dict[str, Any], path: str) -> BackwardTimeline | None:
    """The run's backward timeline (None where it has none: no calibration steps, or an older run)."""
    if summary.get("backward_timeline") is None:
        return None
    top = Fields(summary, path).section("backward_timeline")
    forward = top.number("forward_ms", minimum=0, required=True)
    backward = top.number("backward_ms", minimum=0, required=True)
    samples = top.number("samples", integer=True, minimum=1, required=True)
    source = top.text("time_source") or "?"
    params, seen = [], set()
    for item in top.items("params", required=True):
        index = item.number("index", integer=True, minimum=0, required=True)
        if index in seen:
            raise BadFile(f"{path}: {item.name('index')} is {index} again; expected each parameter once")
        seen.add(index)
        params.append(
            ParamReady(
                index=index,
                name=item.text("name") or f"param{index}",
                numel=item.number("numel", integer=True, minimum=1, required=True),
                itemsize=item.number("itemsize", integer=True, minimum=1, required=True),
                ready_ms=item.number("ready_ms", minimum=0, required=True),
            )
        )
    if not params:
        raise BadFile(f"{path}: backward_timeline.params is empty; expected every trainable parameter")
    return BackwardTimeline(tuple(sorted(params, key=lambda p: p.index)), forward, backward, samples, source)


def read_codec_costs(summary: dict[str, Any], path: str) -> dict[str, CodecCost]:
    """{hook: CodecCost} from the run's codec probe; empty where the run has none."""
    if summary.get("codec_probe") is None:
        return {}
    probe = Fields(summary, path).section("codec_probe")
    device = probe.text("device") or "?"
    costs = {}
    for hook in COMPRESS_HOOKS:
        fit = probe.section(hook)
        if fit is None:
            continue
        fixed = fit.number("fixed_ms", required=True)
        slope = fit.number("ms_per_melement", minimum=0, required=True)
        if not math.isfinite(fixed):
            raise fit.fail("fixed_ms", "a finite number")
        raw = fit.data.get("points") or []
        points = tuple(
            (int(n), float(t)) for n, t in raw if isinstance(n, int) and isinstance(t, (int, float)) and n > 0
        )
        costs[hook] = CodecCost(fixed, slope, f"codec probe on {device} at the end of the run", points)
    return costs
