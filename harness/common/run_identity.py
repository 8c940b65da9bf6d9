"""A run's identity: which settings define its workload, and the short stable hash of them in its name.

train.py puts the hash in its default run name (harness.train.config.default_run_name), and compare reads
the same settings back from summary.json to group repeats (only runs of one workload are repeats) and to warn
when runs that train different things are compared against one baseline. Both sides call `workload_hash` on
the settings as TrainConfig.to_dict() gives them, so a name and a summary.json always agree; runs written
before the hash existed get theirs from their summary.json's settings alike. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from typing import Any

# Every setting that changes what a step does or how its gradients travel. Left out, on purpose: the seed (other
# values, the same work), the CPU threads (the same work, faster or slower, as on another host), and what only
# changes the measurement around the steps (calibration, gathers, logging, the progress bar, the window, the
# timeout, where the run is written). The step count is in: the run's medians
# and its calibration samples come from that many steps, and the issue that asked for this counted two runs of
# 20 and 200 steps as repeats of one configuration that they are not.
WORKLOAD_SETTINGS = (
    "model",
    "image_size",
    "seq_len",
    "batch_size",
    "accumulate_grad_batches",
    "precision",
    "accelerator",
    "devices",
    "num_nodes",
    "comm_hook",
    "powersgd_rank",
    "bucket_cap_mb",
    "gradient_as_bucket_view",
    "static_graph",
    "channels_last",
    "data_dir",
    "max_steps",
)
# What is trained, as opposed to how its gradients travel (hook, bucket cap, world, precision: what runs are
# compared for). Changes against a baseline that trains something else compare different workloads.
TRAINED_SETTINGS = {
    "model": "model",
    "image_size": "image size",
    "seq_len": "sequence length",
    "batch_size": "batch size",
    "data_dir": "data source",
}
SYNTHETIC_DATA = "synthetic"  # how a run without --data-dir shows its data source
HASH_CHARS = 6  # 16.7 M values: two workloads of one run name colliding is not a practical worry


def workload(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The workload-defining settings of `settings` (TrainConfig.to_dict(), summary.json's settings or the
    event file's hparams), in one canonical form: integral floats as ints and booleans as 0/1 (the HParams
    plugin stores both as floats), PowerSGD's rank only for PowerSGD, --data-dir as a normalised path. A
    setting that is absent (an older run) is None."""
    values = {key: _canonical(settings.get(key)) for key in WORKLOAD_SETTINGS}
    if values["comm_hook"] != "powersgd":
        values["powersgd_rank"] = None
    if isinstance(values["data_dir"], str):
        values["data_dir"] = os.path.normpath(values["data_dir"])
    return values


def workload_hash(settings: Mapping[str, Any]) -> str:
    """HASH_CHARS hex digits of sha1 over the canonical JSON of workload(settings): equal exactly when the
    workloads are equal (up to the odd collision), the same on every machine and in every Python."""
    text = json.dumps(workload(settings), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:HASH_CHARS]


# A version as train.py makes it (harness.train.config.claim_run_version): the start time, then -2, -3, ... for
# runs of one name started in the same second.
_STAMPED_VERSION = re.compile(r"\d{8}-(\d{6}(?:-\d+)?)")


def trial_name(settings: Mapping[str, Any], version: str) -> str:
    """The run's name in TensorBoard's HParams tab, whose Trial ID column shows about 13 digits whole: the settings
    hash and the start time of day, `67f637 134512` for `...-67f637/20261204-134512` (with -2, -3, ... as the
    version has it, which the column may cut). Unique in a log directory but for two runs of one workload started
    at the same time of day on different days, which the tab shows as one row of two sessions. A version of
    another form is kept whole after the hash."""
    stamped = _STAMPED_VERSION.fullmatch(version)
    return f"{workload_hash(settings)} {stamped[1] if stamped else version}"


def _canonical(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
