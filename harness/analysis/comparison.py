"""The arithmetic of comparing runs: each run's values and settings, changes against a baseline, rows, order.

Each number comes from summary.json's totals; where summary.json lacks it (a killed run has no summary.json
at all, a damaged one is left out whole), it is the median of the event file's per-step scalars over the steps
summary.json counts: warm-up (`step/warmup` = 1) and calibration (`step/calibration` = 1, whose collective is
skipped, so their comm time is ~0) left out.
Changes against the baseline are relative, in %, for samples/s, step ms, comm ms and exposed ms, and
absolute, in percentage points, for overlap. With group_repeats a row is the median over the runs of one run
name and one workload (harness.common.run_identity: equal settings, not only an equal name), with the spread
of their step times. mixed_workloads says when rows train something else than the baseline (another model,
image size, sequence length, batch size or data), whose changes then compare different workloads. Pure
functions of RunData (harness.analysis.runs): no files.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.runs import RunData
from harness.common import tags
from harness.common.cli import UsageError
from harness.common.metrics import busbw_gbps, percentile
from harness.common.names import SUMMARY_FILE, WARMUP_STEPS
from harness.common.numbers import is_finite
from harness.common.run_identity import SYNTHETIC_DATA, TRAINED_SETTINGS, workload, workload_hash

MISSING = "—"  # a setting or value that neither summary.json nor the event file holds
# 1 on compute-only steps (harness.train.step_log writes it): their hook skips the collective, so their comm
# time is ~0 and their busbw absurd; summary.json leaves them out, and so do the medians of the events.


@dataclass(frozen=True)
class Metric:
    """One measured column: its summary.json totals key is `<key>_p50`, its per-step TensorBoard tag `tag`."""

    key: str
    header: str
    tag: str | None
    change: str | None  # "pct" (relative change, %), "pt" (absolute change, percentage points) or None
    spec: str = ""  # format spec for the tables; "" keeps three or four significant figures
    nonnegative: bool = True  # exposed ms is below 0 (and overlap above 100 %) when it is noise


METRICS = (
    Metric("samples_per_s", "samples/s", tags.SAMPLES_PER_S, "pct"),
    Metric("step_ms", "step ms", tags.STEP_MS, "pct"),
    Metric("comm_ms", "comm ms", tags.COMM_MS, "pct"),
    Metric("exposed_ms", "exposed ms", tags.EXPOSED_MS, "pct", nonnegative=False),
    Metric("codec_ms", "codec ms", tags.CODEC_MS, "pct"),
    Metric("overlap_pct", "overlap %", tags.OVERLAP_PCT, "pt", ".1f", nonnegative=False),
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
    # exposed ms's 95 % interval from summary.json (None: not known, or a group of several runs); an end is None when
    # the interval is unbounded there (one calibration sample)
    exposed_ci95: tuple[float | None, float | None] | None = None
    runs: int = 1  # with --group-repeats: how many runs this row is the median of
    step_spread_pct: float | None = None  # with --group-repeats: (max − min) / median of the runs' step ms, %
    members: tuple[str, ...] = ()  # the names of the runs the row is made of
    workload: dict[str, Any] = field(default_factory=dict)  # run_identity.workload of its settings; {}: unknown
    compute_only_ms: float | None = None  # the compute-only reference (forward + backward without communication)


def change_pct(value: float | None, base: float | None) -> float | None:
    """Relative change of `value` against `base` in %, over |base| so that + always means the value rose
    (exposed ms can be slightly negative: noise); None when either is unknown or the base is 0."""
    if not is_finite(value) or not is_finite(base) or base == 0:
        return None
    change = (value - base) / abs(base) * 100.0
    return change if is_finite(change) else None  # huge values overflow to inf: unknown, not "+inf%"


def change_pt(value: float | None, base: float | None) -> float | None:
    """Absolute change in percentage points (for values that are themselves %)."""
    if not is_finite(value) or not is_finite(base):
        return None
    change = value - base
    return change if is_finite(change) else None


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
    raise UsageError(
        f"--baseline {query!r} is ambiguous; it matches: {', '.join(matches)} (give one of these, or its run directory)"
    )


def _baseline_in_directory(rows: Sequence[Row], query: str, in_directory: Collection[str]) -> str:
    """The one row made of the runs that `--baseline DIR` holds (runs.runs_in_directory, at least one); a
    UsageError listing the candidates when they make several rows."""
    matches = [row.name for row in rows if set(row.members) & set(in_directory)]
    if len(matches) == 1:
        return matches[0]
    repeats = {workload_hash(row.workload) for row in rows if row.name in matches and row.workload}
    hint = ", or --group-repeats to take them as one" if len(repeats) == 1 and len(matches) > 1 else ""
    raise UsageError(
        f"--baseline {query!r} is ambiguous: that directory holds {', '.join(matches)}; give one version's "
        f"directory{hint}"
    )


def measured(scalars: dict[str, list[tuple[int, float]]], tag: str) -> list[float]:
    """A tag's values over the steps summary.json counts, finite values only. Runs write the headline tags on
    measured steps only (warm-up and calibration go under setup/); runs of earlier versions wrote them on every
    step with `step/warmup` and `step/calibration` marks, whose marked steps (or steps 0 and 1 where the mark
    is absent) are left out."""
    left_out = _marked(scalars, tags.CALIBRATION_TAG)
    left_out |= _marked(scalars, tags.WARMUP_TAG) if tags.WARMUP_TAG in scalars else set(range(WARMUP_STEPS))
    return [value for step, value in scalars.get(tag, []) if step not in left_out and is_finite(value)]


def _marked(scalars: dict[str, list[tuple[int, float]]], tag: str) -> set[int]:
    return {step for step, value in scalars.get(tag, []) if value == 1}


def run_values(run: RunData) -> tuple[dict[str, float | None], list[str]]:
    """Each metric from summary.json's totals, else the median of its per-step scalars (None if neither), and
    a note for each median the events hold that cannot be true (a negative time)."""
    totals = (run.summary or {}).get("totals") or {}
    world_size = run_world_size(run)
    values: dict[str, float | None] = {}
    notes: list[str] = []
    for metric in METRICS:
        value = totals.get(f"{metric.key}_p50")
        if not is_finite(value) and metric.tag is not None:
            value = percentile(measured(run.scalars, metric.tag), 50)
            if metric.nonnegative and is_finite(value) and value < 0:
                notes.append(f"the event file's {metric.tag} has median {value:g}; expected >= 0, left out")
                value = None
        values[metric.key] = value if is_finite(value) else None
    if values["busbw_gbps"] is None:
        values["busbw_gbps"] = _busbw_from_events(run.scalars, values["comm_ms"], world_size)
    return values, notes


def run_world_size(run: RunData) -> int | None:
    """From summary.json, the event file's hparams, or samples/s over samples/s per device (a killed run)."""
    for source in ((run.summary or {}).get("world_size"), run.hparams.get("world_size")):
        if is_finite(source) and source >= 1:
            return int(source)
    total = measured(run.scalars, tags.SAMPLES_PER_S)
    per_device = measured(run.scalars, tags.SAMPLES_PER_S_PER_DEVICE)
    if total and per_device and per_device[-1] > 0:
        ratio = total[-1] / per_device[-1]
        if is_finite(ratio) and ratio >= 0.5:  # a tiny per-device rate would make a world of 1e300 ranks
            return round(ratio)
    return None


def run_settings(run: RunData) -> dict[str, str]:
    """The settings that tell runs apart, as text: from summary.json, else the event file's hparams."""
    summary = run.summary or {}
    settings = run.settings
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
    """(complete, note): a run is complete when its summary.json says so; the note also names every file that
    could not be used, and why."""
    if run.summary is None:
        if run.summary_problem:
            source = "shown from its event file instead" if run.scalars else "no event file to show the run from"
            lead = f"{run.summary_problem}; {source}"
        else:
            lead = f"no {SUMMARY_FILE}: {'values from the event file' if run.scalars else 'no values'} (killed or "
            lead += "still running)"
        return False, "; ".join([lead, *run.problems])
    if not run.summary.get("completed", False):
        reason = f"did not finish: {run.summary.get('reason') or 'no reason recorded'}"
        return False, "; ".join([reason, *run.problems])
    return True, "; ".join(run.problems)


def build_rows(
    runs: Sequence[RunData],
    baseline: str | None = None,
    group_repeats: bool = False,
    baseline_runs: Collection[str] | None = None,
) -> list[Row]:
    """One row per run, or with `group_repeats` per run name and workload (the median of its repeats), in
    natural name order, with changes against the baseline row: by default the first row with numbers, else
    `baseline` as select_baseline reads it, or, where `baseline` is no row's name but a directory that holds
    runs, the row of those runs (`baseline_runs`, from runs.runs_in_directory)."""
    runs = sorted(runs, key=lambda r: natural_key(r.name))
    if group_repeats:
        groups = repeat_groups(runs)
        rows = [_group_row(name, groups[name]) for name in sorted(groups, key=natural_key)]
    else:
        rows = [_run_row(run) for run in runs]
    names = [r.name for r in rows]
    # By default the first row by name that has numbers: a damaged or empty run would leave every Δ unknown.
    usable = [r.name for r in rows if any(v is not None for v in r.values.values())]
    if baseline and baseline_runs and baseline.rstrip("/") not in names:
        base_name = _baseline_in_directory(rows, baseline, baseline_runs)
    else:
        base_name = select_baseline(names if baseline or not usable else usable, baseline)
    base = next(r for r in rows if r.name == base_name).values
    return [
        dataclasses.replace(row, changes=_changes(row.values, base), is_baseline=row.name == base_name) for row in rows
    ]


def run_workload(run: RunData) -> dict[str, Any]:
    """run_identity.workload of the run's recorded settings; {} where it recorded none (settings unknown)."""
    settings = run.settings
    return workload(settings) if settings else {}


def repeat_groups(runs: Sequence[RunData]) -> dict[str, list[RunData]]:
    """Repeats: runs of one run name whose workloads are equal (run_identity.workload_hash), keyed by that run
    name, or by `name [hash]` where runs of one name ran different workloads (a --run-name given twice, or
    names from before the hash was in them). A run whose settings are unknown (killed before its end) joins
    its name's runs when they ran one workload, as the repeat it most likely is."""
    keyed: dict[tuple[str, str | None], list[RunData]] = {}
    for run in runs:
        settings = run.settings
        key = (run.group or run_group(run.name), workload_hash(settings) if settings else None)
        keyed.setdefault(key, []).append(run)
    for name, digest in [key for key in keyed if key[1] is None]:
        known = [key for key in keyed if key[0] == name and key[1] is not None]
        if len(known) == 1:
            keyed[known[0]] += keyed.pop((name, digest))
    per_name = Counter(name for name, _ in keyed)
    return {
        name if per_name[name] == 1 else f"{name} [{digest or 'settings unknown'}]": members
        for (name, digest), members in keyed.items()
    }


def mixed_workloads(rows: Sequence[Row]) -> list[str]:
    """One line for each kind of what is trained (run_identity.TRAINED_SETTINGS: model, image size, sequence
    length, batch size, data source) in which rows differ from the baseline row: their changes against it
    compare different workloads. Hook, bucket cap, world size and precision may differ: that is what runs
    are compared for. Rows whose settings are unknown, and sizes a model does not take, are not judged."""
    base = next((row.workload for row in rows if row.is_baseline), {})
    if not base:
        return []
    lines = []
    for key, label in TRAINED_SETTINGS.items():
        sized = key in ("image_size", "seq_len")  # None: the model takes the other kind of input
        differing = Counter(
            _shown(key, row.workload[key])
            for row in rows
            if row.workload
            and row.workload[key] != base[key]
            and not (sized and (row.workload[key] is None or base[key] is None))
        )
        if differing:
            others = ", ".join(f"{value} in {n} row{'s' if n > 1 else ''}" for value, n in sorted(differing.items()))
            lines.append(
                f"mixed workloads: {label} {others}, against the baseline's {_shown(key, base[key])}: their Δ "
                "compares different workloads, not the communication alone"
            )
    return lines


def _shown(key: str, value: Any) -> str:
    if key == "data_dir" and value is None:
        return SYNTHETIC_DATA
    return MISSING if value is None else str(value)


def _compute_only_ms(run: RunData) -> float | None:
    """The compute-only reference: summary.json's, else the median of the event file's per-step series."""
    value = ((run.summary or {}).get("totals") or {}).get("compute_only_ms")
    if not is_finite(value):
        value = percentile(measured(run.scalars, tags.COMPUTE_ONLY_MS), 50)
    return value if is_finite(value) else None


def _run_row(run: RunData) -> Row:
    complete, note = run_status(run)
    values, value_notes = run_values(run)
    return Row(
        name=run.name,
        settings=run_settings(run),
        values=values,
        changes={},
        sample_unit=(run.summary or {}).get("sample_unit"),
        complete=complete,
        note="; ".join(filter(None, [note, *value_notes])),
        exposed_ci95=_interval((run.summary or {}).get("totals", {}).get("exposed_ms_ci95"), values["exposed_ms"]),
        members=(run.name,),
        workload=run_workload(run),
        compute_only_ms=_compute_only_ms(run),
    )


def _interval(value: list[float | None] | None, exposed_ms: float | None) -> tuple[float | None, float | None] | None:
    """A checked [low, high] from summary.json (runs.read_summary) as a tuple. JSON has no NaN or infinity, so
    null ends mean "unbounded" beside a known exposed time (one calibration sample), and "not measured" beside
    none (no calibration, no hook): None then, as where the field is absent."""
    if value is None or exposed_ms is None:
        return None
    return value[0], value[1]


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
    compute_only = [row.compute_only_ms for row in member_rows if row.compute_only_ms is not None]
    spread = (max(steps) - min(steps)) / percentile(steps, 50) * 100 if len(steps) > 1 else None
    settings = member_rows[0].settings
    # A failed run is named either way: left out beside completed runs, else the row is made of it.
    failed = [row for row in all_rows if not row.complete]
    notes = [f"{row.name} left out: {row.note}" if completed else f"{row.name}: {row.note}" for row in failed]
    if any(row.settings != settings for row in member_rows):
        notes.append("its runs' settings differ")
    run_name = members[0].group or run_group(members[0].name)
    if name != run_name:
        notes.append(f"runs named {run_name} ran more than one workload: one row per workload (its settings hash)")
    units = {row.sample_unit for row in member_rows}
    return Row(
        name=name,
        settings=settings,
        values=values,
        changes={},
        sample_unit=units.pop() if len(units) == 1 else None,
        complete=all(row.complete for row in member_rows),
        note="; ".join(notes),
        exposed_ci95=member_rows[0].exposed_ci95 if len(member_rows) == 1 else None,  # no interval of a median
        runs=len(member_rows),
        step_spread_pct=spread,
        members=tuple(row.name for row in all_rows),
        workload=next((row.workload for row in all_rows if row.workload), {}),
        compute_only_ms=percentile(compute_only, 50) if compute_only else None,
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
    """Step bytes over the median comm time (docs/METRICS.md: bandwidth from a time percentile, never averaged)."""
    step_bytes = measured(scalars, tags.BYTES)
    if not step_bytes or step_bytes[-1] < 0 or not comm_ms or comm_ms < 0 or world_size is None:
        return None
    value = busbw_gbps("all_reduce", step_bytes[-1], comm_ms / 1e3, world_size)
    return value if is_finite(value) else None
