"""Finding train.py's runs on disk and loading what each left behind: summary.json and its event files.

A run is a directory holding summary.json and/or TensorBoard event files (`<logdir>/<run_name>/<version>/`
as train.py writes them). Loading only reads: RunData holds plain data, and harness.analysis.comparison
turns it into rows. Nothing is unpickled: summary.json is JSON and event files are protocol buffers, read
with tensorboard's reader (imported where used, so that finding runs costs nothing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.common.cli import UsageError
from harness.common.names import EVENT_FILE_PREFIX, SUMMARY_FILE


@dataclass
class RunData:
    """What was loaded from one run directory: no computation yet, so rows can be built from plain data."""

    name: str
    summary: dict[str, Any] | None = None
    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # tag -> [(step, value)]
    hparams: dict[str, Any] = field(default_factory=dict)  # the HParams plugin's values in the event file
    problem: str = ""  # why summary.json could not be used, if it exists but is unreadable
    group: str = ""  # the run name its repeats share (default: the name without its last part)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds summary.json or an event file itself (not in a subdirectory)."""
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
