"""TensorBoard's names for what train.py writes: sections, scalar tags, HParams columns. One torch-free home.

train.py writes these and compare reads some of them, so both take them from here. TensorBoard's Scalars tab
shows one section per tag prefix (the part before the first "/"), sections and the charts in each in sorted
order, and pins nothing: the headline section is named "1_headline" so that it comes first. Definitions and
units: docs/METRICS.md, "TensorBoard tags".
"""

from __future__ import annotations

import functools

# -- sections ------------------------------------------------------------------------------------------------
HEADLINE = "1_headline"  # the answer, per measured step: what runs are compared by
STEP = "step"  # the rest of the step: throughput, forward + backward
COMM = "comm"  # the rest of the communication: bytes, buckets, algbw, the slowest bucket, tail, interference
PER_BUCKET = "per_bucket"  # each bucket's own series: per_bucket/<index>/<name>
RANKS = "ranks"  # the skew across ranks, at gathered steps
SETUP = "setup"  # warm-up and calibration steps, kept out of every other section

# -- the headline section (measured steps only) ---------------------------------------------------------------
# Numbered: TensorBoard sorts the charts by name, and these lead with the answer (step, exposed, comm time).
STEP_MS = f"{HEADLINE}/1_step_ms"
EXPOSED_MS = f"{HEADLINE}/2_exposed_ms"
COMM_MS = f"{HEADLINE}/3_comm_ms"
OVERLAP_PCT = f"{HEADLINE}/4_overlap_pct"
COMPUTE_ONLY_MS = f"{HEADLINE}/5_compute_only_ms"
BUSBW_GBPS = f"{HEADLINE}/6_busbw_gbps"
CODEC_MS = f"{HEADLINE}/7_codec_ms"
# The run's exposed p50 and its 95 % interval so far, written with each summary.json, in a margin chart's
# (value, lower, upper) order.
EXPOSED_INTERVAL = (
    f"{HEADLINE}/8_exposed_ms_p50",
    f"{HEADLINE}/8_exposed_ms_ci95_low",
    f"{HEADLINE}/8_exposed_ms_ci95_high",
)

# -- the rest of a measured step --------------------------------------------------------------------------------
SAMPLES_PER_S = f"{STEP}/samples_per_s"
SAMPLES_PER_S_PER_DEVICE = f"{STEP}/samples_per_s_per_device"
FWD_BWD_MS = f"{STEP}/fwd_bwd_ms"
BYTES = f"{COMM}/bytes"
BUCKETS = f"{COMM}/buckets"
ALGBW_GBPS = f"{COMM}/algbw_gbps"
MAX_BUCKET_MS = f"{COMM}/max_bucket_ms"
TAIL_MS = f"{COMM}/tail_ms"
INTERFERENCE_MS = f"{COMM}/interference_ms"
BUCKET_TIME_HISTOGRAM = f"{COMM}/bucket_time_ms"  # a histogram (the Histograms tab): the step's bucket times

# -- across ranks, at gathered steps -------------------------------------------------------------------------------
STEP_MS_SKEW = f"{RANKS}/step_ms_skew"
COMM_MS_SKEW = f"{RANKS}/comm_ms_skew"
BUCKET_MS_SKEW_MAX = f"{RANKS}/bucket_ms_skew_max"
SLOWEST_RANK = f"{RANKS}/slowest_rank"
BUSBW_FASTEST_RANK_GBPS = f"{RANKS}/busbw_fastest_rank_gbps"

# -- warm-up and calibration steps ----------------------------------------------------------------------------------
WARMUP_STEP_MS = f"{SETUP}/warmup_step_ms"
CALIBRATION_STEP_MS = f"{SETUP}/calibration_step_ms"
CALIBRATION_COMPUTE_ONLY_MS = f"{SETUP}/compute_only_ms"

# -- each bucket ------------------------------------------------------------------------------------------------------
BUCKET_SERIES = ("time_ms", "codec_ms", "bytes", "busbw_gbps")  # per_bucket/<index>/<one of these>


@functools.cache  # a step writes seven tags a bucket: each string is built once a run (the cache is C, no frame)
def bucket_tag(index: int, name: str) -> str:
    """Bucket `index`'s series `name` (BUCKET_SERIES, or a band's time_ms_p50/_p10/_p90)."""
    return f"{PER_BUCKET}/{index:02d}/{name}"


@functools.cache
def bucket_band_tags(index: int) -> tuple[str, str, str]:
    """The (p50, p10, p90) tags of bucket `index`'s time band, in a margin chart's (value, lower, upper) order."""
    return bucket_tag(index, "time_ms_p50"), bucket_tag(index, "time_ms_p10"), bucket_tag(index, "time_ms_p90")


# -- other tabs -------------------------------------------------------------------------------------------------------
SETTINGS_TEXT = "settings"  # TEXT: every setting of the run, as a Markdown table
TIMELINE_IMAGE = "timeline"  # IMAGES: one measured step's timeline on rank 0

# HParams columns: the settings that tell runs apart, in this order, with the names shown. TensorBoard sorts
# the columns by name (after those whose values differ, when it infers them from the runs), so each name
# carries its place, "1_model"; the tab shows the display name.
HPARAMS = (
    ("model", "model"),
    ("world_size", "world size"),
    ("num_nodes", "nodes"),
    ("comm_hook", "hook"),
    ("bucket_cap_mb", "bucket cap MiB"),
    ("precision", "precision"),
    ("batch_size", "batch"),
    ("backend", "backend"),
)
_HPARAM_NAMES = {setting: f"{place}_{setting}" for place, (setting, _) in enumerate(HPARAMS, start=1)}
_HPARAM_SETTINGS = {name: setting for setting, name in _HPARAM_NAMES.items()}


def hparam_name(setting: str) -> str:
    """The HParams name of a setting in HPARAMS ("model" -> "1_model")."""
    return _HPARAM_NAMES[setting]


def hparam_setting(name: str) -> str:
    """The setting an HParams name stands for ("1_model" -> "model"); other names (older runs') unchanged."""
    return _HPARAM_SETTINGS.get(name, name)


# HParams metrics, the run's headline medians (summary.json's totals keys), in the order shown: TensorBoard
# shows the first five without ticking a box.
HPARAM_METRICS = (
    ("step_ms_p50", "step ms p50"),
    ("exposed_ms_p50", "exposed ms p50"),
    ("overlap_pct_p50", "overlap % p50"),
    ("comm_ms_p50", "comm ms p50"),
    ("busbw_gbps_p50", "busbw GB/s p50"),
    ("codec_ms_p50", "codec ms p50"),
    ("samples_per_s_p50", "samples/s p50"),
)


def hparam_metric_tag(key: str) -> str:
    """The scalar tag of an HParams metric ("step_ms_p50" -> "hp/step_ms_p50")."""
    return f"hp/{key}"


# -- runs written before the headline section (issue 12) ----------------------------------------------------------
# Earlier versions wrote every tag on every step, with these set to 1 on the steps to leave out.
WARMUP_TAG = "step/warmup"
CALIBRATION_TAG = "step/calibration"
# Their names of what is now in the headline section; readers of event files map them to today's.
RENAMED_TAGS = {
    "step/time_ms": STEP_MS,
    "step/compute_only_ms": COMPUTE_ONLY_MS,
    "comm/exposed_ms": EXPOSED_MS,
    "comm/exposed_ms_p50": EXPOSED_INTERVAL[0],
    "comm/exposed_ms_ci95_low": EXPOSED_INTERVAL[1],
    "comm/exposed_ms_ci95_high": EXPOSED_INTERVAL[2],
    "comm/overlap_pct": OVERLAP_PCT,
    "comm/time_ms": COMM_MS,
    "comm/busbw_gbps": BUSBW_GBPS,
    "comm/codec_ms": CODEC_MS,
    "comm/busbw_fastest_rank_gbps": BUSBW_FASTEST_RANK_GBPS,
}


def current_tag(tag: str) -> str:
    """Today's name of a tag read from an event file (an earlier version's name mapped, any other unchanged)."""
    return RENAMED_TAGS.get(tag, tag)
