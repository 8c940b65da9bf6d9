"""How a run looks in TensorBoard beyond its per-step scalars: the Custom Scalars layout, the HParams columns and
metrics, and the full settings as a table in the TEXT tab.

Rank 0 writes each once: the layout with the first measured step (DDP's buckets are final once warm-up is over),
the rest with the final summary. Tag names live in harness.common.tags; docs/METRICS.md says what each holds.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from typing import Any

from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

from harness.common import tags
from harness.common.names import DEFAULT_BUCKET_CAP_MB
from harness.train.tb_writer import write_step, write_summary, write_text

# Each bucket's time is also logged as a band: p10, p50 and p90 over its last BUCKET_BAND_STEPS measured steps
# (warm-up and calibration left out), shown as Custom Scalars margin charts.
BUCKET_BAND_STEPS = 20


def _line(tag: str) -> list:
    """A chart of one tag, so that it holds one line per run. TensorBoard reads a chart's tags as regular
    expressions matched from the start: anchored at the end too, exposed_ms does not take in exposed_ms_p50."""
    return ["Multiline", [re.escape(tag) + "$"]]


def custom_scalar_layout(bucket_indices: Sequence[int]) -> dict[str, dict[str, list]]:
    """The Custom Scalars tab, {category: {chart title: [kind, tags]}}: the headline first, one chart per metric
    with one line per run; then the rest of the step, one margin chart per bucket (p50 with its p10–p90 band,
    one bucket at a time), and the ranks."""
    bands = {f"bucket {i:02d}": ["Margin", list(tags.bucket_band_tags(i))] for i in sorted(bucket_indices)}
    return {
        "headline: one line per run": {
            "step ms": _line(tags.STEP_MS),
            "exposed comm ms": _line(tags.EXPOSED_MS),
            "comm ms (busy time)": _line(tags.COMM_MS),
            "overlap %": _line(tags.OVERLAP_PCT),
            "compute-only ms (reference)": _line(tags.COMPUTE_ONLY_MS),
            "exposed ms: run p50, 95 % interval": ["Margin", list(tags.EXPOSED_INTERVAL)],
            "busbw GB/s": _line(tags.BUSBW_GBPS),
            "codec ms": _line(tags.CODEC_MS),
        },
        "step and communication": {
            "samples/s": _line(tags.SAMPLES_PER_S),
            "forward + backward ms": _line(tags.FWD_BWD_MS),
            "tail ms (last ready → last finished)": _line(tags.TAIL_MS),
            "interference ms (exposed − tail)": _line(tags.INTERFERENCE_MS),
            "slowest bucket ms": _line(tags.MAX_BUCKET_MS),
            "algbw GB/s": _line(tags.ALGBW_GBPS),
        },
        f"bucket comm ms: p50, p10–p90 band (last {BUCKET_BAND_STEPS} steps)": bands,
        "ranks (gathered steps)": {
            "step ms skew": _line(tags.STEP_MS_SKEW),
            "comm ms skew": _line(tags.COMM_MS_SKEW),
            "largest bucket ms skew": _line(tags.BUCKET_MS_SKEW_MAX),
            "slowest rank": _line(tags.SLOWEST_RANK),
            "busbw of the fastest rank GB/s": _line(tags.BUSBW_FASTEST_RANK_GBPS),
        },
    }


def add_custom_scalar_layout(writer: Any, bucket_indices: Sequence[int]) -> None:
    """Write the Custom Scalars layout (once per run, when the buckets are known)."""
    writer.add_custom_scalars(custom_scalar_layout(bucket_indices))


def interval_scalars(totals: dict[str, Any]) -> dict[str, float]:
    """The exposed interval's scalars from a summary's totals ({} where exposure was not measured)."""
    p50, (low, high) = totals.get("exposed_ms_p50", math.nan), totals.get("exposed_ms_ci95", (math.nan, math.nan))
    if not all(v is not None and math.isfinite(v) for v in (p50, low, high)):
        return {}
    return dict(zip(tags.EXPOSED_INTERVAL, (p50, low, high), strict=True))


def hparam_values(summary: dict[str, Any]) -> dict[str, Any]:
    """The HParams columns' values (tags.HPARAMS), by setting."""
    settings = {**summary["settings"], "world_size": summary["world_size"], "backend": summary["backend"]}
    if settings.get("bucket_cap_mb") is None:
        # DDP's effective default, so the column holds one type across runs.
        settings["bucket_cap_mb"] = DEFAULT_BUCKET_CAP_MB
    return {setting: settings.get(setting) for setting, _ in tags.HPARAMS}


def write_hparams(writer: Any, summary: dict[str, Any], step: int, trial: str) -> None:
    """The HParams tab: the settings that tell runs apart, in tags.HPARAMS' order and names, and the headline
    medians as its metrics (scalars at `step`). The session's status is the run's: success if it completed.
    `trial` is the row's Trial ID (run_identity.trial_name): without one, TensorBoard shows the run's path, which
    its column cuts to the first 15 characters, the model's name and little more."""
    experiment = api_pb2.Experiment(
        hparam_infos=[
            api_pb2.HParamInfo(name=tags.hparam_name(setting), display_name=shown, type=_hparam_type(setting))
            for setting, shown in tags.HPARAMS
        ],
        metric_infos=[
            api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tags.hparam_metric_tag(key)), display_name=shown)
            for key, shown in tags.HPARAM_METRICS
        ],
    )
    # TensorBoard makes sessions of one group_name one row, so the name must be unique to the run.
    start = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time(), group_name=trial)
    for setting, value in hparam_values(summary).items():
        if isinstance(value, str):
            start.hparams[tags.hparam_name(setting)].string_value = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            start.hparams[tags.hparam_name(setting)].number_value = value
    status = api_pb2.STATUS_SUCCESS if summary["completed"] else api_pb2.STATUS_FAILURE
    end = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
    values = [
        _hparams_value(metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)),
        _hparams_value(metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=start)),
        _hparams_value(metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=end)),
    ]
    write_summary(writer, Summary(value=values), step)
    totals = summary["totals"]
    metrics = {
        tags.hparam_metric_tag(key): totals[key]
        for key, _ in tags.HPARAM_METRICS
        if isinstance(totals.get(key), int | float) and math.isfinite(totals[key])
    }
    write_step(writer, step, metrics)


def _hparam_type(setting: str) -> int:
    numeric = ("world_size", "num_nodes", "bucket_cap_mb", "batch_size")
    return api_pb2.DATA_TYPE_FLOAT64 if setting in numeric else api_pb2.DATA_TYPE_STRING


def _hparams_value(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary.Value:
    return Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR)


def settings_markdown(summary: dict[str, Any]) -> str:
    """Every setting of the run, with its world size and backend, as a Markdown table (the TEXT tab)."""
    rows = {**summary["settings"], "world_size": summary["world_size"], "backend": summary["backend"]}
    if rows.get("bucket_cap_mb") is None:
        rows["bucket_cap_mb"] = f"DDP's default ({DEFAULT_BUCKET_CAP_MB:g}, with a 1 MiB first bucket)"
    lines = ["| setting | value |", "|---|---|"]
    for key, value in rows.items():
        shown = "—" if value is None else str(value).replace("|", "\\|")
        lines.append(f"| {key} | {shown} |")
    return "\n".join(lines)


def write_settings(writer: Any, summary: dict[str, Any], step: int) -> None:
    """The TEXT tab's settings table, at `step`."""
    write_text(writer, tags.SETTINGS_TEXT, settings_markdown(summary), step)
