"""Compare training runs side by side: one row per run, and each run's change against a baseline run.

    python -m harness.compare runs/                                    # every run under runs/
    python -m harness.compare runs/ ../other/runs/resnet50-.../20260101-120000   # directories and single runs
    python -m harness.compare runs/ --baseline bucket0.5               # baseline: exact path or a unique substring
    python -m harness.compare runs/ --sort samples_per_s --descending
    python -m harness.compare runs/ --markdown cmp.md --csv cmp.csv    # a GitHub table for a pull request
    python -m harness.compare runs/ --group-repeats                    # one row per run name: median of repeats

A run is a directory holding summary.json and/or TensorBoard event files (`<logdir>/<run_name>/<version>/`
as train.py writes them); directories are searched recursively and a run is named by its path relative to
the directory given. Each number comes from summary.json's totals; where summary.json lacks it (a killed
run has no summary.json at all), it is the median of the event file's per-step scalars, warm-up steps
(`step/warmup` = 1) left out. Such a run is marked incomplete. Values that neither holds show as "—".

Runs are ordered by name with numbers compared by value (bucket1, bucket5, bucket25, bucket100). Repeats
of one configuration (train.py run again with the same --run-name, or harness.sweep_settings --repeat) are
versions under one run name; `--group-repeats` shows one row per run name instead: the median over its runs
of each column, how many runs, and how far their step times spread ((max − min) / median), which says
whether a difference between rows is larger than the run-to-run noise.

Changes against the baseline (default: the first row by name) are relative, in %, for samples/s, step ms,
comm ms and exposed ms, and absolute, in percentage points, for overlap. Units as in METRICS.md: ms,
decimal GB/s. Nothing is unpickled: summary.json is JSON and event files are protocol buffers.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.common.cli import UsageError, run_cli
from harness.common.metrics import busbw_gbps, percentile
from harness.common.names import EVENT_FILE_PREFIX, SUMMARY_FILE, WARMUP_STEPS, WARMUP_TAG

MISSING = "—"


@dataclass(frozen=True)
class Metric:
    """One measured column: its summary.json totals key is `<key>_p50`, its per-step TensorBoard tag `tag`."""

    key: str
    header: str
    tag: str | None
    change: str | None  # "pct" (relative change, %), "pt" (absolute change, percentage points) or None
    spec: str = ""  # format spec for the tables; "" keeps three or four significant figures


METRICS = (
    Metric("samples_per_s", "samples/s", "step/samples_per_s", "pct"),
    Metric("step_ms", "step ms", "step/time_ms", "pct"),
    Metric("comm_ms", "comm ms", "comm/time_ms", "pct"),
    Metric("exposed_ms", "exposed ms", "comm/exposed_ms", "pct"),
    Metric("overlap_pct", "overlap %", "comm/overlap_pct", "pt", ".1f"),
    Metric("busbw_gbps", "busbw GB/s", None, None),  # from bytes over the median comm time, never averaged
)
SETTINGS = (  # (key, header) of the settings that tell runs apart
    ("model", "model"),
    ("world_size", "ranks"),
    ("backend", "backend"),
    ("bucket_cap_mb", "bucket MiB"),
    ("comm_hook", "hook"),
    ("precision", "precision"),
    ("batch", "batch"),
)
SORT_KEYS = ("run", *(m.key for m in METRICS))


@dataclass
class RunData:
    """What was loaded from one run directory: no computation yet, so rows can be built from plain data."""

    name: str
    summary: dict[str, Any] | None = None
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # tag -> [(step, value)]
    hparams: dict[str, Any] = field(default_factory=dict)  # the HParams plugin's values in the event file
    problem: str = ""  # why summary.json could not be used, if it exists but is unreadable
    group: str = ""  # the run name its repeats share (default: the name without its last part)


@dataclass(frozen=True)
class Row:
    """One run as shown: settings as text, measured values and changes as numbers (None where unknown)."""

    name: str
    settings: dict[str, str]
    values: dict[str, float | None]
    changes: dict[str, float | None]
    sample_unit: str | None  # "image" or "token"; None where only events were left
    complete: bool
    note: str
    is_baseline: bool = False
    runs: int = 1  # with --group-repeats: how many runs this row is the median of
    step_spread_pct: float | None = None  # with --group-repeats: (max − min) / median of the runs' step ms, %


# -- pure: values, changes, baseline, rows -----------------------------------------------------------


def change_pct(value: float | None, base: float | None) -> float | None:
    """Relative change of `value` against `base` in %, over |base| so that + always means the value rose
    (exposed ms can be slightly negative: noise); None when either is unknown or the base is 0."""
    if not _known(value) or not _known(base) or base == 0:
        return None
    return (value - base) / abs(base) * 100.0


def change_pt(value: float | None, base: float | None) -> float | None:
    """Absolute change in percentage points (for values that are themselves %)."""
    if not _known(value) or not _known(base):
        return None
    return value - base


def natural_key(name: str) -> list[str | float]:
    """Sort key that compares the numbers inside names by value: bucket0.25 < bucket0.5 < bucket1 < bucket25."""
    # re.split with a group alternates text and numbers, so equal positions always hold the same type.
    return [float(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", name))]


def run_group(name: str) -> str:
    """The run name of a run (`<run_name>/<version>` -> `<run_name>`): repeats of one configuration share it."""
    return name.rsplit("/", 1)[0] if "/" in name else name


def select_baseline(names: Sequence[str], query: str | None) -> str:
    """The baseline's name: `query` matching a name exactly, else the one name containing it; default the first
    name in sorted order. A query that matches none or several is a UsageError listing the candidates."""
    if not names:
        raise UsageError("no runs to compare")
    if query is None:
        return min(names, key=natural_key)
    wanted = query.rstrip("/") or query
    if wanted in names:
        return wanted
    matches = sorted((name for name in names if wanted in name), key=natural_key)
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"--baseline {query!r} matches no run; runs: {', '.join(sorted(names, key=natural_key))}")
    raise UsageError(f"--baseline {query!r} is ambiguous; it matches: {', '.join(matches)}")


def measured(scalars: dict[str, list[tuple[int, float]]], tag: str) -> list[float]:
    """A tag's values after warm-up: steps marked `step/warmup` = 1, or steps 0 and 1 where the mark is absent."""
    warmup_marks = scalars.get(WARMUP_TAG)
    warm = {step for step, value in warmup_marks if value == 1} if warmup_marks else set(range(WARMUP_STEPS))
    return [value for step, value in scalars.get(tag, []) if step not in warm]


def run_values(run: RunData) -> dict[str, float | None]:
    """Each metric from summary.json's totals, else the median of its per-step scalars (None if neither)."""
    totals = (run.summary or {}).get("totals") or {}
    world_size = run_world_size(run)
    values: dict[str, float | None] = {}
    for metric in METRICS:
        value = totals.get(f"{metric.key}_p50")
        if not _known(value) and metric.tag is not None:
            value = percentile(measured(run.scalars, metric.tag), 50)
        values[metric.key] = value if _known(value) else None
    if values["busbw_gbps"] is None:
        values["busbw_gbps"] = _busbw_from_events(run.scalars, values["comm_ms"], world_size)
    return values


def run_world_size(run: RunData) -> int | None:
    """From summary.json, the event file's hparams, or samples/s over samples/s per device (a killed run)."""
    for source in ((run.summary or {}).get("world_size"), run.hparams.get("world_size")):
        if _known(source):
            return int(source)
    total = measured(run.scalars, "step/samples_per_s")
    per_device = measured(run.scalars, "step/samples_per_s_per_device")
    if total and per_device and per_device[-1] > 0:
        return round(total[-1] / per_device[-1])
    return None


def run_settings(run: RunData) -> dict[str, str]:
    """The settings that tell runs apart, as text: from summary.json, else the event file's hparams."""
    summary = run.summary or {}
    settings = {**run.hparams, **(summary.get("settings") or {})}
    world_size = run_world_size(run)
    backend = summary.get("backend") or run.hparams.get("backend")
    bucket = settings.get("bucket_cap_mb")
    hook = settings.get("comm_hook")
    if hook == "powersgd" and settings.get("powersgd_rank") is not None:
        hook = f"powersgd{settings['powersgd_rank']}"
    batch = settings.get("batch_size")
    accumulate = settings.get("accumulate_grad_batches") or 1
    if batch is not None and accumulate != 1:
        batch = f"{batch}×{accumulate}"
    text = {
        "model": settings.get("model"),
        "world_size": world_size,
        "backend": backend,
        "bucket_cap_mb": ("default" if "bucket_cap_mb" in settings else None) if bucket is None else f"{bucket:g}",
        "comm_hook": hook,
        "precision": settings.get("precision"),
        "batch": batch,
    }
    return {key: MISSING if value is None else str(value) for key, value in text.items()}


def run_status(run: RunData) -> tuple[bool, str]:
    """(complete, note): a run is complete when summary.json says so."""
    if run.summary is None:
        return False, run.problem or f"no {SUMMARY_FILE}: values from the event file (killed or still running)"
    if not run.summary.get("completed", False):
        return False, f"did not finish: {run.summary.get('reason') or 'no reason recorded'}"
    return True, ""


def build_rows(runs: Sequence[RunData], baseline: str | None = None, group_repeats: bool = False) -> list[Row]:
    """One row per run, or per run name with `group_repeats` (the median of its runs), in natural name order,
    with changes against the baseline row (see select_baseline)."""
    runs = sorted(runs, key=lambda r: natural_key(r.name))
    if group_repeats:
        groups: dict[str, list[RunData]] = {}
        for run in runs:
            groups.setdefault(run.group or run_group(run.name), []).append(run)
        rows = [_group_row(name, groups[name]) for name in sorted(groups, key=natural_key)]
    else:
        rows = [_run_row(run) for run in runs]
    base_name = select_baseline([r.name for r in rows], baseline)
    base = next(r for r in rows if r.name == base_name).values
    return [
        dataclasses.replace(row, changes=_changes(row.values, base), is_baseline=row.name == base_name) for row in rows
    ]


def _run_row(run: RunData) -> Row:
    complete, note = run_status(run)
    return Row(
        name=run.name,
        settings=run_settings(run),
        values=run_values(run),
        changes={},
        sample_unit=(run.summary or {}).get("sample_unit"),
        complete=complete,
        note=note,
    )


def _group_row(name: str, members: Sequence[RunData]) -> Row:
    """The median of each column over a run name's completed runs (over all of them when none completed);
    busbw from the median comm time, as for one run."""
    all_rows = [_run_row(run) for run in members]
    completed = [row for row in all_rows if row.complete]
    member_rows = completed or all_rows
    values: dict[str, float | None] = {}
    for metric in METRICS:
        known = [row.values[metric.key] for row in member_rows if row.values[metric.key] is not None]
        values[metric.key] = percentile(known, 50) if known else None
    # busbw is bytes × factor / time: scale one run's busbw by its comm time over the median comm time.
    values["busbw_gbps"] = next(
        (
            row.values["busbw_gbps"] * row.values["comm_ms"] / values["comm_ms"]
            for row in member_rows
            if row.values["busbw_gbps"] is not None and row.values["comm_ms"] and values["comm_ms"]
        ),
        None,
    )
    steps = [row.values["step_ms"] for row in member_rows if row.values["step_ms"] is not None]
    spread = (max(steps) - min(steps)) / percentile(steps, 50) * 100 if len(steps) > 1 else None
    settings = member_rows[0].settings
    # A failed run is named either way: left out beside completed runs, else the row is made of it.
    failed = [row for row in all_rows if not row.complete]
    notes = [f"{row.name} left out: {row.note}" if completed else f"{row.name}: {row.note}" for row in failed]
    if any(row.settings != settings for row in member_rows):
        notes.append("its runs' settings differ")
    units = {row.sample_unit for row in member_rows}
    return Row(
        name=name,
        settings=settings,
        values=values,
        changes={},
        sample_unit=units.pop() if len(units) == 1 else None,
        complete=all(row.complete for row in member_rows),
        note="; ".join(notes),
        runs=len(member_rows),
        step_spread_pct=spread,
    )


def _changes(values: dict[str, float | None], base: dict[str, float | None]) -> dict[str, float | None]:
    changes: dict[str, float | None] = {}
    for metric in METRICS:
        if metric.change == "pct":
            changes[metric.key] = change_pct(values[metric.key], base[metric.key])
        elif metric.change == "pt":
            changes[metric.key] = change_pt(values[metric.key], base[metric.key])
    return changes


def sort_rows(rows: Sequence[Row], key: str, descending: bool = False) -> list[Row]:
    """Rows ordered by `key` ("run" or a metric key); rows without that value go last either way."""
    if key == "run":
        return sorted(rows, key=lambda r: natural_key(r.name), reverse=descending)
    known = [r for r in rows if r.values.get(key) is not None]
    unknown = [r for r in rows if r.values.get(key) is None]
    return sorted(known, key=lambda r: r.values[key], reverse=descending) + unknown


def _busbw_from_events(
    scalars: dict[str, list[tuple[int, float]]], comm_ms: float | None, world_size: int | None
) -> float | None:
    """Step bytes over the median comm time (METRICS.md: bandwidth from a time percentile, never averaged)."""
    step_bytes = measured(scalars, "comm/bytes")
    if not step_bytes or comm_ms is None or world_size is None:
        return None
    value = busbw_gbps("all_reduce", step_bytes[-1], comm_ms / 1e3, world_size)
    return value if _known(value) else None


def _known(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- formatting -----------------------------------------------------------------------------------------


def format_number(value: float | None, spec: str = "") -> str:
    """`spec`, else three or four significant figures without exponent clutter; "—" when unknown."""
    if value is None:
        return MISSING
    if spec:
        return format(value, spec)
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_change(value: float | None, kind: str) -> str:
    if value is None:
        return MISSING
    return f"{value:+.1f}%" if kind == "pct" else f"{value:+.1f} pt"


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
        line.append("done" if row.complete else "incomplete")
        cells.append(line)
    return header, cells


def _grouped(rows: Sequence[Row]) -> bool:
    return any(r.runs > 1 for r in rows)


def _notes(rows: Sequence[Row]) -> list[str]:
    base = next(r.name for r in rows if r.is_baseline)
    notes = [
        f"baseline: {base}; Δ against it in % (overlap in percentage points); medians after warm-up",
    ]
    if _grouped(rows):
        notes.append(
            "each row is the median of its runs (repeats of one run name); step spread: (max − min) / median of "
            "their step ms: a Δ smaller than the spread is within run-to-run noise"
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
        record.update(baseline=row.is_baseline, complete=row.complete, note=row.note)
        writer.writerow(record)
    return out.getvalue()


def _csv_number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


# -- loading --------------------------------------------------------------------------------------------


def is_run_dir(path: Path) -> bool:
    try:
        return any(
            entry.is_file() and (entry.name == SUMMARY_FILE or entry.name.startswith(EVENT_FILE_PREFIX))
            for entry in path.iterdir()
        )
    except OSError:
        return False


def find_runs(paths: Sequence[str]) -> list[tuple[str, Path]]:
    """(name, directory) of every run under `paths`: a name is the path relative to the directory given, or
    `<run_name>/<version>` for a run directory given itself. A run found twice is listed once."""
    found: dict[Path, str] = {}
    for arg in paths:
        root = Path(arg)
        if not root.is_dir():
            raise UsageError(f"{arg!r} is not a directory")
        for dirpath, dirnames, _ in os.walk(root):
            dirnames.sort()
            here = Path(dirpath)
            if not is_run_dir(here):
                continue
            name = here.relative_to(root).as_posix() if here != root else _own_name(root)
            found.setdefault(here.resolve(), name)
    names = list(found.values())
    if len(set(names)) < len(names):  # the same relative path under two roots: use the paths as given
        return sorted(((str(path), path) for path in found), key=lambda item: item[0])
    return sorted(((name, path) for path, name in found.items()), key=lambda item: item[0])


def _own_name(run_dir: Path) -> str:
    parts = run_dir.resolve().parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else run_dir.name


def load_run(name: str, run_dir: Path) -> RunData:
    """summary.json (plain JSON), and the scalars and hparams of the directory's event files."""
    run = RunData(name=name)
    summary_path = run_dir / SUMMARY_FILE
    if summary_path.is_file():
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError) as err:
            run.problem = f"{SUMMARY_FILE} unreadable ({err}): values from the event file"
        else:
            if isinstance(summary, dict):
                run.summary = summary
            else:
                run.problem = f"{SUMMARY_FILE} is not a JSON object: values from the event file"
    if any(p.name.startswith(EVENT_FILE_PREFIX) for p in run_dir.iterdir() if p.is_file()):
        run.scalars, run.hparams = load_events(run_dir)
    return run


def load_events(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any]]:
    """Every scalar of the directory's event files (no reservoir sampling), and the HParams plugin's values."""
    from google.protobuf import json_format
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    hparams: dict[str, Any] = {}
    metadata = acc.summary_metadata.get("_hparams_/session_start_info")
    if metadata is not None:
        data = plugin_data_pb2.HParamsPluginData.FromString(metadata.plugin_data.content)
        for key, value in data.session_start_info.hparams.items():
            hparams[key] = _hparam_value(json_format.MessageToDict(value))
    return scalars, hparams


def _hparam_value(value: Any) -> Any:
    """HParams stores None as "None" and integers and booleans as floats; undo that for display."""
    if value == "None":
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# -- command line ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description="Compare training runs: one row per run, with changes against a baseline run.",
    )
    parser.add_argument("paths", nargs="+", metavar="DIR", help="log directories (searched recursively) or runs")
    parser.add_argument("--baseline", metavar="NAME", help="baseline run: exact name or a unique substring")
    parser.add_argument("--sort", choices=SORT_KEYS, default="run", help="order rows by this column")
    parser.add_argument("--descending", action="store_true", help="sort from the largest value")
    parser.add_argument("--markdown", metavar="PATH", help="also write a GitHub Markdown table here")
    parser.add_argument("--csv", metavar="PATH", help="also write the rows as CSV here")
    parser.add_argument(
        "--group-repeats",
        action="store_true",
        help="one row per run name: the median of its runs (repeats), their count and step-time spread",
    )
    return parser


def compare(paths: Sequence[str], baseline: str | None = None, group_repeats: bool = False) -> list[Row]:
    """Load every run under `paths` and build the rows (UsageError when there is none)."""
    found = find_runs(paths)
    if not found:
        raise UsageError(
            f"no runs found under {', '.join(paths)} (a run directory holds {SUMMARY_FILE} or "
            f"{EVENT_FILE_PREFIX}* files)"
        )
    runs = []
    for name, path in found:
        run = load_run(name, path)
        if "/" not in name:  # a version found directly under the directory given: its run name is that directory
            run.group = path.parent.name
        runs.append(run)
    return build_rows(runs, baseline, group_repeats)


def _write(path: str, text: str, flag: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as err:
        raise UsageError(f"{flag} {path!r} cannot be written: {err.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = sort_rows(compare(args.paths, args.baseline, args.group_repeats), args.sort, args.descending)
    print(format_text(rows))
    if args.markdown:
        _write(args.markdown, format_markdown(rows), "--markdown")
    if args.csv:
        _write(args.csv, format_csv(rows), "--csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "python -m harness.compare"))
