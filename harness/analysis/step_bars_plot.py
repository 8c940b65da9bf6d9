"""compare's --plot: one stacked bar per row, what a step is made of, to paste into a pull request.

Each bar is a row's step time split into compute-only (forward + backward without communication, the
calibration steps' median) | exposed communication (its p50, with the 95 % interval as a whisker where the
row has one) | the rest of the step (optimizer, data loading, ...: the step time less the other two). The
three are medians of their own, so the rest is what the step's median leaves; a row without the split
(no calibration, --comm-hook none) is drawn as its whole step. Each bar carries its step time and the change
against the baseline's. matplotlib is imported here, only when a plot is asked for, without pyplot (no
global backend, no display): compare answers without it otherwise.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.analysis.comparison import Row
from harness.analysis.comparison_tables import format_change, format_number
from harness.common.cli import UsageError

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
# (label, colour) of the segments, left to right; colour-blind-safe (Okabe–Ito), with a grey for the rest
SEGMENTS = (
    ("compute-only", "#0072B2"),
    ("exposed communication (95 % interval)", "#D55E00"),
    ("rest of the step", "#BBBBBB"),
)
UNSPLIT = ("step, not split (exposure not measured)", "#888888")
BAR_HEIGHT_IN = 0.45  # figure height per bar, so that a long comparison stays readable
LABEL_ROOM = 1.45  # the x axis runs this far past the longest bar, for the labels at the bars' ends
DPI = 110  # about 1,100 pixels wide: sharp in a pull request without being heavy


def check_plot_path(path: str) -> None:
    """A UsageError unless `path` names a format the plot is written in."""
    if Path(path).suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {path!r}: give a file name ending in {', '.join(PLOT_SUFFIXES)}")


def segments(row: Row) -> tuple[float, float, float] | None:
    """(compute-only, exposed, rest) in ms, each ≥ 0 (exposed below 0 is noise: no segment, the whisker says
    it), or None where the row has no compute-only reference or no exposed time to split its step by."""
    step, exposed, compute = row.values["step_ms"], row.values["exposed_ms"], row.compute_only_ms
    if step is None or exposed is None or compute is None:
        return None
    shown = max(exposed, 0.0)
    return compute, shown, max(step - compute - shown, 0.0)


def step_bars_figure(rows: Sequence[Row]) -> Any:
    """The figure (matplotlib.figure.Figure): one horizontal bar per row, top to bottom in the rows' order."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 1.6 + BAR_HEIGHT_IN * len(rows)), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    ys = list(range(len(rows)))
    split = [segments(row) for row in rows]
    left = [0.0] * len(rows)
    for i, (label, colour) in enumerate(SEGMENTS):
        widths = [parts[i] if parts else 0.0 for parts in split]
        axes.barh(ys, widths, left=left, height=0.6, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    unsplit = [_unsplit_ms(row, parts) for row, parts in zip(rows, split, strict=True)]
    if any(unsplit):
        axes.barh(ys, unsplit, height=0.6, color=UNSPLIT[1], hatch="//", label=UNSPLIT[0])
    for y, row, parts in zip(ys, rows, split, strict=True):
        if parts is not None and row.exposed_ci95 is not None and None not in row.exposed_ci95:
            (low, high), exposed = row.exposed_ci95, row.values["exposed_ms"]
            error = [[exposed - low], [high - exposed]]
            axes.errorbar(parts[0] + exposed, y, xerr=error, fmt="none", ecolor="black", elinewidth=1.2, capsize=4)
    largest = max([sum(p) for p in split if p] + [u for u in unsplit if u] + [1e-9])
    for y, row, parts, whole in zip(ys, rows, split, unsplit, strict=True):
        end = sum(parts) if parts else whole
        axes.text(end + largest * 0.01, y, _bar_label(row), va="center", fontsize=9)
    axes.set_yticks(ys, [row.name for row in rows], fontsize=9)
    axes.invert_yaxis()  # the first row on top, as in the table
    axes.set_xlim(0, largest * LABEL_ROOM)
    axes.set_xlabel("ms per optimizer step (medians of the measured steps)")
    base = next((row.name for row in rows if row.is_baseline), "")
    axes.set_title(f"What a step is made of (Δ: step time against {base})", fontsize=11, loc="left")
    figure.legend(loc="outside lower center", ncols=4, fontsize=9, frameon=False)
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    return figure


def _unsplit_ms(row: Row, parts: tuple[float, float, float] | None) -> float:
    """The whole step of a row that cannot be split (0 where it can, or has no step time)."""
    return (row.values["step_ms"] or 0.0) if parts is None else 0.0


def _bar_label(row: Row) -> str:
    step = row.values["step_ms"]
    if step is None:
        return "no step time"
    change = "baseline" if row.is_baseline else f"Δ {format_change(row.changes.get('step_ms'), 'pct')}"
    exposed = row.values["exposed_ms"]
    return f"{format_number(step)} ms ({change})" + (
        "" if exposed is None else f" · exposed {format_number(exposed)} ms"
    )


def render_step_bars(rows: Sequence[Row], path: str) -> bytes:
    """The plot as the bytes of a file in `path`'s format (its suffix, one of PLOT_SUFFIXES)."""
    out = io.BytesIO()
    step_bars_figure(rows).savefig(out, format=Path(path).suffix.lower().lstrip("."))
    return out.getvalue()
