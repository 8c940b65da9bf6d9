"""Finding train.py's runs on disk and loading what each left behind: summary.json and its event files.

A run is a directory holding summary.json and/or TensorBoard event files (`<logdir>/<run_name>/<version>/`
as train.py writes them). Loading only reads: RunData holds plain data, and harness.analysis.comparison
turns it into rows. Nothing is unpickled: summary.json is JSON and event files are protocol buffers, read
with tensorboard's reader (imported where used, so that finding runs costs nothing).

Files are read defensively (harness.analysis.checked): only regular files are opened, so a FIFO or a device
named like a run's file never blocks or floods the reader, and summary.json's fields are checked for type and
range (read_summary). A file that fails is a problem of its run, one line naming the file, the field and what
was expected; the run keeps whatever else it has.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.checked import BadFile, Fields, check_regular, read_json_object
from harness.common.cli import UsageError
from harness.common.names import EVENT_FILE_PREFIX, SUMMARY_FILE
from harness.common.numbers import is_number
from harness.common.tags import current_tag, hparam_setting

# summary.json's totals, each a number >= this minimum (None: any finite number), or null where unknown.
# Exposed time is negative when communication makes backward faster than the calibration steps (noise), and
# overlap then exceeds 100 %.
TOTALS_MINIMUM: dict[str, float | None] = {
    "steps_measured": 0, "warmup_steps": 0, "calibration_steps": 0, "bytes_per_step": 0,
    "step_ms_p50": 0, "step_ms_p90": 0, "samples_per_s_p50": 0, "comm_ms_p50": 0, "comm_ms_p90": 0,
    "max_bucket_ms_p50": 0, "tail_ms_p50": None, "compute_only_ms": 0, "fwd_bwd_ms_p50": 0,
    "exposed_ms_p50": None, "exposed_ms_p90": None, "overlap_pct_p50": None, "algbw_gbps_p50": 0,
    "busbw_gbps_p50": 0, "comm_share_of_step_p50": 0, "codec_ms_p50": 0, "interference_ms_p50": None,
    "between_steps_ms_p50": None,
}  # fmt: skip
# [low, high], each a number or null (unbounded)
INTERVALS = ("exposed_ms_ci95", "overlap_pct_ci95", "interference_ms_ci95")


@dataclass
class RunData:
    """What was loaded from one run directory: no computation yet, so rows can be built from plain data."""

    name: str
    summary: dict[str, Any] | None = None  # checked by read_summary; None if absent or unusable
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # tag -> [(step, value)], finite
    hparams: dict[str, Any] = field(default_factory=dict)  # the HParams plugin's values in the event file
    summary_problem: str = ""  # why summary.json, which exists, could not be used (one line)
    problems: list[str] = field(default_factory=list)  # the same for each event file, and their hparams
    group: str = ""  # the run name its repeats share (default: the name without its last part)
    directory: Path | None = None  # where it was found (None for data made in memory)

    @property
    def settings(self) -> dict[str, Any]:
        """The run's settings as recorded: summary.json's, else (key by key) the event file's hparams; {} where
        neither holds any (a run killed before its end)."""
        return {**self.hparams, **((self.summary or {}).get("settings") or {})}


def read_summary(path: Path | str) -> dict[str, Any]:
    """summary.json as a dict whose fields compare and predict use are known to have their types and ranges;
    a BadFile naming the file, the field and what was expected otherwise."""
    top = read_json_object(path)
    top.flag("completed", required=True)
    top.text("reason")
    top.number("world_size", integer=True, minimum=1, required=True)
    top.text("backend")
    top.text("sample_unit")
    check_settings(top.section("settings", required=True))
    totals = top.section("totals", required=True)
    for key, minimum in TOTALS_MINIMUM.items():
        totals.number(key, minimum=minimum)
    for key in INTERVALS:
        interval = totals.data.get(key)
        if interval is not None and not (
            isinstance(interval, list) and len(interval) == 2 and all(v is None or is_number(v) for v in interval)
        ):
            raise totals.fail(key, "a list of two numbers (null for an unbounded end), or null")
    seen: set[int] = set()
    for bucket in top.items("buckets"):  # compare needs none; predict asks for at least one
        index = bucket.number("index", integer=True, minimum=0, required=True)
        if index in seen:
            raise BadFile(f"{path}: {bucket.name('index')} is {index} again; expected each bucket index once")
        seen.add(index)
        bucket.number("numel", integer=True, minimum=1, required=True)
        bucket.number("bytes", integer=True, minimum=0, required=True)  # 0: the noop hook sends nothing
        bucket.number("num_params", integer=True, minimum=0)
        for key in ("time_ms_p50", "time_ms_p90", "busbw_gbps_p50"):
            bucket.number(key, minimum=0)
        for key in ("first_param", "last_param", "time_source", "dtype"):
            bucket.text(key)
    for _ in top.items("ranks"):  # each a JSON object: the advisor reads their threads and devices
        pass
    after = top.section("after_backward_all_reduces")
    for key, kind in (("dtype", str), ("bytes", int), ("ms", int | float | None)):
        values = after.data.get(key, []) if after is not None else []
        if not isinstance(values, list) or not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
            raise after.fail(key, f"a list of {'strings' if kind is str else 'numbers'}")
    return top.data


def check_settings(settings: Fields) -> None:
    """The settings compare shows, from summary.json or the event file's hparams: types and ranges."""
    for key in ("model", "comm_hook", "precision"):
        settings.text(key)
    settings.number("bucket_cap_mb", above=0)
    for key in ("batch_size", "accumulate_grad_batches", "powersgd_rank"):
        settings.number(key, integer=True, minimum=1)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds something named summary.json or like an event file itself (not in a subdirectory).
    Names alone: whatever they are (a FIFO, a directory) is said when the run is loaded, not opened here."""
    try:
        return any(entry.name == SUMMARY_FILE or entry.name.startswith(EVENT_FILE_PREFIX) for entry in path.iterdir())
    except OSError:
        return False


def find_runs(paths: Sequence[str]) -> list[tuple[str, Path]]:
    """(name, directory) of every run under `paths`: a name is the path relative to the directory given, or
    `<run_name>/<version>` for a run directory given itself. A run found twice is listed once. Symbolic links
    to directories are not followed, so a link loop costs nothing."""
    found: dict[Path, tuple[str, Path]] = {}  # the real directory -> (name, the path as found under its root)
    for arg in paths:
        root = Path(arg)
        if not root.is_dir():
            raise UsageError(f"{arg!r} is not a directory")
        for here in _directories(root):
            if not is_run_dir(here):
                continue
            name = here.relative_to(root).as_posix() if here != root else _own_name(root)
            found.setdefault(here.resolve(), (name, here))
    names = [name for name, _ in found.values()]
    if len(set(names)) < len(names):  # the same relative path under two roots: use the paths as given
        return sorted(((str(path), path) for _, path in found.values()), key=lambda item: item[0])
    return sorted(found.values(), key=lambda item: item[0])


def _directories(root: Path) -> Iterator[Path]:
    """`root` and every directory under it, depth first in name order, without following symbolic links (a
    link loop costs nothing). A stack, not os.walk: Python 3.11's os.walk recurses, and a tree nested 1,000
    deep would end in a RecursionError. Directories that cannot be listed are skipped, as os.walk does."""
    stack = [root]
    while stack:
        here = stack.pop()
        yield here
        try:
            with os.scandir(here) as entries:
                children = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        stack.extend(sorted(children, reverse=True))


def _own_name(run_dir: Path) -> str:
    parts = run_dir.resolve().parts
    return "/".join(parts[-2:]) if len(parts) >= 2 else run_dir.name


def load_runs(paths: Sequence[str]) -> list[RunData]:
    """Every run under `paths`, loaded; a UsageError when there is none."""
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
    return runs


def runs_in_directory(runs: Sequence[RunData], path: str) -> list[str] | None:
    """The names of the runs found in directory `path` or under it (a version directory, or a run name's
    directory that holds its versions), however either is spelled; None when `path` is no directory, so that
    it is taken as a name."""
    target = Path(path)
    if not target.is_dir():
        return None
    target = target.resolve()
    names = []
    for run in runs:
        if run.directory is not None:
            found = run.directory.resolve()
            if found == target or target in found.parents:
                names.append(run.name)
    return names


def run_files(run_dir: Path) -> list[Path]:
    """The paths in `run_dir` that compare reads: summary.json and the event files (whatever they are)."""
    try:
        names = sorted(p.name for p in run_dir.iterdir())
    except OSError:
        return []
    return [run_dir / n for n in names if n == SUMMARY_FILE or n.startswith(EVENT_FILE_PREFIX)]


def load_run(name: str, run_dir: Path) -> RunData:
    """summary.json (plain JSON, checked), and the scalars and hparams of the directory's event files."""
    run = RunData(name=name, directory=run_dir)
    files = run_files(run_dir)
    if run_dir / SUMMARY_FILE in files:
        try:
            run.summary = read_summary(run_dir / SUMMARY_FILE)
        except BadFile as err:
            run.summary_problem = str(err)
    event_files = [p for p in files if p.name != SUMMARY_FILE]
    if event_files:
        run.scalars, run.hparams, problems = load_events(event_files)
        run.problems += problems
    return run


def load_events(paths: Sequence[Path]) -> tuple[dict[str, list[tuple[int, float]]], dict[str, Any], list[str]]:
    """Every finite scalar of the event files (no reservoir sampling; one value per tag and step, the last
    file's where files repeat a step), the HParams plugin's values, and a line for each file not read."""
    scalars: dict[str, dict[int, float]] = {}
    hparams: dict[str, Any] = {}
    problems: list[str] = []
    for path in paths:
        try:
            check_regular(path)
            file_scalars, file_hparams = _read_event_file(path)
        except BadFile as err:
            problems.append(f"{err}; its events left out")
            continue
        for tag, points in file_scalars.items():
            scalars.setdefault(tag, {}).update(points)
        hparams.update(file_hparams)
    if hparams:
        try:
            fields = Fields(hparams, f"the hparams of {paths[0].parent / (EVENT_FILE_PREFIX + '*')}")
            check_settings(fields)
            fields.number("world_size", integer=True, minimum=1)
            fields.text("backend")
        except BadFile as err:
            problems.append(f"{err}; the settings in them left out")
            hparams = {}
    return {tag: sorted(points.items()) for tag, points in scalars.items()}, hparams, problems


def _read_event_file(path: Path) -> tuple[dict[str, dict[int, float]], dict[str, Any]]:
    """One event file's finite scalars ({tag: {step: value}}) and hparams; a BadFile if it holds no events."""
    from google.protobuf import json_format
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    try:
        acc.Reload()
        scalars = {current_tag(tag): {e.step: e.value for e in acc.Scalars(tag) if math.isfinite(e.value)}
                   for tag in acc.Tags()["scalars"]}  # fmt: skip
        hparams: dict[str, Any] = {}
        metadata = acc.summary_metadata.get("_hparams_/session_start_info")
        if metadata is not None:
            data = plugin_data_pb2.HParamsPluginData.FromString(metadata.plugin_data.content)
            for key, value in data.session_start_info.hparams.items():
                hparams[hparam_setting(key)] = _hparam_value(json_format.MessageToDict(value))
    except Exception as err:  # tensorboard's reader raises its own kinds (protobuf, its own errors) on damage
        reason = " ".join(f"{type(err).__name__}: {err}".split())  # one line, whatever the reader's message
        raise BadFile(f"{path} cannot be read as TensorBoard events ({reason})") from None
    if acc.file_version is None:  # every event file starts with its version; a damaged record stops the reader
        raise BadFile(f"{path} holds no readable event; expected a TensorBoard event file")
    return scalars, hparams


def _hparam_value(value: Any) -> Any:
    """HParams stores None as "None" and integers and booleans as floats; undo that for display."""
    if value == "None":
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
