"""One measured step's timeline, drawn as a PNG: forward, backward, the wait for communication and the optimizer
step on the compute lane, and each bucket's ready → done on the comm lane. Readable at a glance in a pull request.

Rank 0 draws it at the end of a run from the stamps of one step (the last measured one; the callback takes its
two extra stamps, backward start and optimizer end, on that step only), writes it next to summary.json and into
TensorBoard's Images tab. matplotlib is imported here only, when drawing, and draws with Agg (no display).

Times are rank 0's, in ms from the step's start (Lightning's batch start), from the run's time source. Forward
is the step's start to on_before_backward (with gradient accumulation, the earlier micro-batches included);
backward runs to the last bucket's ready stamp, the wait to the end of backward (DDP having every bucket back).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from harness.common.names import DEFAULT_BUCKET_CAP_MB, MB
from harness.train.stamps import BACKWARD_START, OPTIMIZER_END, ResolvedStep
from harness.train.step_stats import StepStats

TIMELINE_FILE = "timeline.png"  # next to summary.json
WIDTH_IN, DPI = 11.0, 110  # 1210 px: a pull request's column shows it unscaled
LANE_IN = 0.30  # inches per bucket row; the figure grows with the buckets, up to MAX_HEIGHT_IN
MAX_HEIGHT_IN = 12.0
# Colours: compute in blues, waiting in grey, communication in orange, the hook's own work in light orange.
COLOURS = {
    "forward": "#4c72b0",
    "backward": "#8fb0d9",
    "wait for comm": "#b0b0b0",
    "optimizer step": "#55a868",
    "collective": "#dd8452",
    "in the hook": "#f5cfae",
}


def step_lanes(resolved: ResolvedStep) -> list[tuple[str, float, float]]:
    """The compute lane: (what, start ms, end ms) for forward, backward, the wait for communication and the
    optimizer step; a part whose stamps are missing is left out."""
    marks = resolved.marks or {}
    backward_start = marks.get(BACKWARD_START)
    backward_end = resolved.fwd_bwd_ms
    optimizer_end = marks.get(OPTIMIZER_END, resolved.step_ms)
    last_ready = max((t.ready_ms for t in resolved.timings), default=None)
    parts: list[tuple[str, float, float]] = []
    if backward_start is not None:
        parts.append(("forward", 0.0, backward_start))
    if backward_start is not None and backward_end is not None:
        compute_end = backward_end if last_ready is None else min(max(last_ready, backward_start), backward_end)
        parts.append(("backward", backward_start, compute_end))
        parts.append(("wait for comm", compute_end, backward_end))
    if backward_end is not None:
        parts.append(("optimizer step", backward_end, optimizer_end))
    return [(what, start, end) for what, start, end in parts if end > start]


def timeline_title(summary: dict[str, Any], stats: StepStats) -> list[str]:
    """Two lines: what ran, and the drawn step's headline figures."""
    settings = summary["settings"]
    cap = settings.get("bucket_cap_mb")
    cap_text = f"{DEFAULT_BUCKET_CAP_MB:g} MiB (DDP's default)" if cap is None else f"{cap:g} MiB"
    what = (
        f"{settings.get('model')} · {summary['world_size']} ranks ({summary['backend']}) · hook "
        f"{settings.get('comm_hook')} · bucket cap {cap_text} · {settings.get('precision')}"
    )
    figures = f"step {stats.step}: {stats.step_ms:.1f} ms, comm {stats.comm_ms:.1f} ms busy"
    # One step's exposed time is mostly noise against its reference: the run's median and interval instead.
    totals = summary["totals"]
    exposed, (low, high) = totals.get("exposed_ms_p50", math.nan), totals.get("exposed_ms_ci95", (None, None))
    if isinstance(exposed, float) and math.isfinite(exposed):
        bounded = all(isinstance(v, float) and math.isfinite(v) for v in (low, high))
        interval = f", 95 % interval [{low:.1f}, {high:.1f}]" if bounded else ""
        figures += f"; the run's exposed comm p50 {exposed:.1f} ms{interval}"
    return [what, figures]


def draw_timeline(resolved: ResolvedStep, title: Sequence[str]) -> bytes:
    """The step's timeline as PNG bytes; `title` is one or two lines above it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    timings = sorted(resolved.timings, key=lambda t: t.index)
    rows = 1 + len(timings)
    height = min(MAX_HEIGHT_IN, 2.1 + LANE_IN * rows)
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    lanes = step_lanes(resolved)
    end_ms = max([resolved.step_ms, *(end for _, _, end in lanes)])
    # Row 0 at the top: the compute lane; below it one row per bucket, in launch order.
    durations: dict[str, float] = {}
    for what, start, end in lanes:
        ax.broken_barh([(start, end - start)], (-0.4, 0.8), color=COLOURS[what])
        _label(ax, f"{what} {end - start:.1f} ms", start, end, 0, end_ms, inside=True)
        durations[what] = end - start
    for row, t in enumerate(timings, start=1):
        ax.broken_barh([(t.ready_ms, t.finished_ms - t.ready_ms)], (row - 0.3, 0.6), color=COLOURS["in the hook"])
        spans = [(start, done - start) for start, done in t.intervals]
        ax.broken_barh(spans, (row - 0.3, 0.6), color=COLOURS["collective"])
        _label(ax, f"{t.comm_ms:.1f} ms", t.ready_ms, t.finished_ms, row, end_ms, inside=False)
    ax.set_yticks(range(rows), ["compute", *(f"bucket {t.index} · {t.bytes / MB:.2f} MB" for t in timings)])
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, end_ms * 1.06 if end_ms > 0 else 1)
    ax.set_xlabel(f"ms from the start of step {resolved.step} (rank 0, {resolved.source})")
    ax.grid(axis="x", color="#e0e0e0")
    ax.set_axisbelow(True)
    if resolved.fwd_bwd_ms is not None:
        ax.axvline(resolved.fwd_bwd_ms, color="#555555", linestyle="--", linewidth=0.8)
    ax.set_title("\n".join(title), loc="left", fontsize=10)
    labels = {what: f"{what} {durations[what]:.1f} ms" if what in durations else what for what in COLOURS}
    labels["collective"] = "collective (comm time)"
    labels["in the hook"] = "in the hook: ready → finished"
    handles = [Patch(color=colour, label=labels[what]) for what, colour in COLOURS.items()]
    if resolved.fwd_bwd_ms is not None:
        handles.append(Line2D([], [], color="#555555", linestyle="--", linewidth=0.8, label="end of backward"))
    fig.legend(handles=handles, loc="outside lower center", ncol=4, frameon=False, fontsize=8)
    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()


def _label(ax: Any, text: str, start: float, end: float, row: int, end_ms: float, inside: bool) -> None:
    """Write `text` inside the bar where it fits (about 7 px a character; the legend has it otherwise), or just
    right of it."""
    if inside:
        if end_ms > 0 and (end - start) / end_ms * WIDTH_IN * DPI * 0.8 > 7 * len(text):
            ax.text((start + end) / 2, row, text, ha="center", va="center", fontsize=8, color="white")
    else:
        ax.text(end + end_ms * 0.005, row, text, ha="left", va="center", fontsize=7, color="#333333")
