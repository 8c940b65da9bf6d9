"""The comparison as tables: aligned text for the terminal, Markdown for a pull request, CSV for tools.

The text and Markdown tables share their cells (table_cells): numbers to three or four significant figures,
changes as +x.x% or +x.x pt, "—" where unknown, and notes below (the baseline, incomplete runs). The CSV
keeps every value at full precision instead, unknown values empty, so a tool can recompute any change.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from harness.analysis.comparison import METRICS, MISSING, SETTINGS, Row, mixed_workloads

# Beyond this a fixed-point cell grows without bound (1e300 would print 301 digits): exponent notation instead.
HUGE = 1e7


def format_number(value: float | None, spec: str = "") -> str:
    """`spec`, else three or four significant figures without exponent clutter; "—" when unknown."""
    if value is None:
        return MISSING
    if abs(value) >= HUGE:
        return f"{value:.3g}"
    if spec:
        return format(value, spec)
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_change(value: float | None, kind: str) -> str:
    """A change as the tables show it: `+1.5%` for a relative change ("pct"), `+1.5 pt` for points ("pt")."""
    if value is None:
        return MISSING
    text = f"{value:+.3g}" if abs(value) >= HUGE else f"{value:+.1f}"
    return f"{text}%" if kind == "pct" else f"{text} pt"


def format_interval(interval: tuple[float | None, float | None] | None, spec: str = "") -> str:
    """[low, high] for a table; an unbounded end is ∓∞, an unknown interval MISSING."""
    if interval is None:
        return MISSING
    low, high = (format_number(end, spec) if end is not None else None for end in interval)
    return f"[{low or '-∞'}, {high or '∞'}]"


def table_cells(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    """Header and cells shared by the text and Markdown tables."""
    units = {r.sample_unit for r in rows if r.sample_unit}
    rate = f"{units.pop()}s/s" if len(units) == 1 else "samples/s"  # images/s or tokens/s where all agree
    grouped = _grouped(rows)
    header = ["run", *(title for _, title in SETTINGS)]
    if grouped:
        header += ["runs", "step spread %"]
    for metric in METRICS:
        header.append(rate if metric.key == "samples_per_s" else metric.header)
        if metric.change:
            header.append("Δ %" if metric.change == "pct" else "Δ pt")
        if metric.key == "exposed_ms":
            header.append("exposed 95 %")
    header.append("status")
    cells = []
    for row in rows:
        line = [row.name, *(row.settings[key] for key, _ in SETTINGS)]
        if grouped:
            line += [str(row.runs), format_number(row.step_spread_pct, ".1f")]
        for metric in METRICS:
            line.append(format_number(row.values[metric.key], metric.spec))
            if metric.change:
                line.append("base" if row.is_baseline else format_change(row.changes[metric.key], metric.change))
            if metric.key == "exposed_ms":
                line.append(format_interval(row.exposed_ci95, metric.spec))
        line.append("done" if row.complete else "incomplete")
        cells.append(line)
    return header, cells


def _grouped(rows: Sequence[Row]) -> bool:
    return any(r.runs > 1 for r in rows)


def _notes(rows: Sequence[Row]) -> list[str]:
    base = next(r.name for r in rows if r.is_baseline)
    notes = [
        f"baseline: {base}; Δ against it in % (overlap in percentage points); medians of the measured steps "
        "(warm-up and calibration left out)",
    ]
    notes += [f"warning: {line}" for line in mixed_workloads(rows)]
    if _grouped(rows):
        notes.append(
            "each row is the median of its runs (repeats: one run name, equal settings); step spread: (max − min) "
            "/ median of their step ms: a Δ smaller than the spread is within run-to-run noise"
        )
    notes += [f"{'' if r.complete else 'incomplete: '}{r.name}: {r.note}" for r in rows if r.note]
    return notes


def format_text(rows: Sequence[Row]) -> str:
    """An aligned table for the terminal: text columns left-aligned, numbers right-aligned."""
    header, cells = table_cells(rows)
    left = {0, *range(1, len(SETTINGS) + 1), len(header) - 1}
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]

    def render(line: list[str]) -> str:
        padded = (c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        return "  ".join(padded).rstrip()

    return "\n".join([render(header), *(render(line) for line in cells), *(f"# {n}" for n in _notes(rows))])


def format_markdown(rows: Sequence[Row]) -> str:
    """A GitHub table to paste into a pull request, with the baseline and incomplete runs noted below."""
    header, cells = table_cells(rows)
    numeric = range(len(SETTINGS) + 1, len(header) - 1)
    align = ["---:" if i in numeric else "---" for i in range(len(header))]

    def render(line: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in line) + " |"

    lines = [render(header), "|" + "|".join(align) + "|"]
    for row, line in zip(rows, cells, strict=True):
        line = [f"**`{line[0]}`**" if row.is_baseline else f"`{line[0]}`", *line[1:]]
        lines.append(render(line))
    return "\n".join([*lines, "", *(f"- {n}" for n in _notes(rows))]) + "\n"


def format_csv(rows: Sequence[Row]) -> str:
    """Every value at full precision, unknown values empty, changes in their own columns."""
    columns = ["run", *(key for key, _ in SETTINGS), "sample_unit", "runs", "step_spread_pct"]
    for metric in METRICS:
        columns.append(metric.key)
        if metric.change:
            columns.append(f"{metric.key}_change_{metric.change}")
        if metric.key == "exposed_ms":
            columns += ["exposed_ms_ci95_low", "exposed_ms_ci95_high"]
    columns += ["baseline", "complete", "note"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        record: dict[str, Any] = {
            "run": row.name,
            "sample_unit": row.sample_unit or "",
            "runs": row.runs,
            "step_spread_pct": _csv_number(row.step_spread_pct),
        }
        record.update({key: "" if text == MISSING else text for key, text in row.settings.items()})
        for metric in METRICS:
            record[metric.key] = _csv_number(row.values[metric.key])
            if metric.change:
                record[f"{metric.key}_change_{metric.change}"] = _csv_number(row.changes[metric.key])
        low, high = row.exposed_ci95 or (None, None)
        record.update(exposed_ms_ci95_low=_csv_number(low), exposed_ms_ci95_high=_csv_number(high))
        record.update(baseline=row.is_baseline, complete=row.complete, note=row.note)
        writer.writerow(record)
    return out.getvalue()


def _csv_number(value: float | None) -> str:
    return "" if value is None else repr(float(value))
