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
ROW_HEIGHT_IN = 0.62  # figure height per row (its name above its bar), so that a long comparison stays readable
BAR_HEIGHT = 0.5  # of a row's height; its name takes the rest
LABEL_ROOM = 1.5  # the x axis runs this far past the longest bar or whisker, for the labels at their ends
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


def whisker(row: Row) -> tuple[float, float, float] | None:
    """(low, centre, high) of the exposed interval on the bar's axis (after the compute-only segment), or None
    where the row has no split or no bounded interval (one calibration sample, a group of runs)."""
    parts = segments(row)
    if parts is None or row.exposed_ci95 is None or None in row.exposed_ci95:
        return None
    low, high = row.exposed_ci95
    return parts[0] + low, parts[0] + row.values["exposed_ms"], parts[0] + high


def step_bars_figure(rows: Sequence[Row]) -> Any:
    """The figure (matplotlib.figure.Figure): one horizontal bar per row, top to bottom in the rows' order,
    each row's name above its bar (names are long: they would squeeze the bars as tick labels)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 1.5 + ROW_HEIGHT_IN * len(rows)), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    ys = list(range(len(rows)))
    split = [segments(row) for row in rows]
    left = [0.0] * len(rows)
    for i, (label, colour) in enumerate(SEGMENTS):
        widths = [parts[i] if parts else 0.0 for parts in split]
        axes.barh(ys, widths, left=left, height=BAR_HEIGHT, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    unsplit = [(row.values["step_ms"] or 0.0) if parts is None else 0.0 for row, parts in zip(rows, split, strict=True)]
    if any(unsplit):
        axes.barh(ys, unsplit, height=BAR_HEIGHT, color=UNSPLIT[1], hatch="//", label=UNSPLIT[0])
    ends = [max(a, b) for a, b in zip(left, unsplit, strict=True)]  # where each bar ends
    for y, row in zip(ys, rows, strict=True):
        interval = whisker(row)
        if interval is not None:
            low, centre, high = interval
            axes.errorbar(centre, y, xerr=[[centre - low], [high - centre]], fmt="none", ecolor="black", capsize=4)
            ends[y] = max(ends[y], high)
    largest = max(ends, default=0.0) or 1.0  # 1 ms where no row has a step time: an axis, not 1e-9
    for y, row in zip(ys, rows, strict=True):
        axes.text(ends[y] + largest * 0.01, y, _bar_label(row), va="center", fontsize=9)
        axes.text(largest * 0.003, y - BAR_HEIGHT / 2 - 0.04, row.name, va="bottom", fontsize=9, weight=_weight(row))
    axes.set_yticks([])
    axes.set_ylim(len(rows) - 0.5, -0.75)  # the first row on top, as in the table; room for its name
    axes.set_xlim(0, largest * LABEL_ROOM)
    axes.set_xlabel("ms per optimizer step (medians of the measured steps)")
    base = next((row.name for row in rows if row.is_baseline), "")
    axes.set_title(f"What a step is made of (Δ: step time against {base})", fontsize=10, loc="left")
    figure.legend(loc="outside lower center", ncols=4, fontsize=9, frameon=False)
    axes.grid(axis="x", alpha=0.3)
    axes.set_axisbelow(True)
    return figure


def _weight(row: Row) -> str:
    return "bold" if row.is_baseline else "normal"


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
