"""`tensorboard --logdir runs` on real runs: a TensorBoard server on loopback must list the runs, lead with the
headline tags docs/METRICS.md promises (the per-bucket ones in a section of their own), show the settings that
tell runs apart in the HParams tab in their order, every setting in the TEXT tab, our custom-scalar layout and
the step timeline in the Images tab, through its HTTP data API. The runs' own console is checked on the way."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from harness.common import tags
from harness.common.dist_env import free_port
from harness.common.names import SUMMARY_FILE
from harness.common.run_identity import workload_hash
from harness.train.dashboards import custom_scalar_layout
from harness.train.timeline import TIMELINE_FILE
from tests.train_runs import BUCKET_TAGS, HEADLINE_TAGS, PROMISED_TAGS, stop, train_env

BAND_TAGS = ["time_ms_p50", "time_ms_p10", "time_ms_p90"]  # a margin chart's value, lower, upper

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"bucket0.5": ["--bucket-cap-mb", "0.5"], "fp16": ["--comm-hook", "fp16"]}
# docs/METRICS.md: the HParams columns in the order shown (TensorBoard sorts them by name), and the metrics.
HPARAM_NAMES = [
    ("1_model", "model"),
    ("2_world_size", "world size"),
    ("3_num_nodes", "nodes"),
    ("4_comm_hook", "hook"),
    ("5_bucket_cap_mb", "bucket cap MiB"),
    ("6_precision", "precision"),
    ("7_batch_size", "batch"),
    ("8_backend", "backend"),
]
HPARAM_METRICS = ["hp/step_ms_p50", "hp/exposed_ms_p50", "hp/overlap_pct_p50", "hp/comm_ms_p50", "hp/busbw_gbps_p50"]
# Warm-up 0, 1; one calibration step, 2, for the exposed time; the timeline steps 3, 4; measured 5, 6.
STEPS = 7
CALIBRATION = ["--calibration-steps", "1"]
MEASURED = [5, 6]
RUN_TIMEOUT_S = 240
SERVE_TIMEOUT_S = 60  # TensorBoard starts in a few seconds; the first load of the runs follows in the background
HTTP_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, str]]:
    """Two small train.py runs, made at once; returns the log root, each variant's TensorBoard run name and its
    console (stdout and stderr together, in the order written)."""
    root = tmp_path_factory.mktemp("tensorboard")
    logdir = root / "runs"
    procs = []
    for name, args in VARIANTS.items():
        cmd = [sys.executable, str(REPO / "train.py"), "--model", "resnet_tiny", "--max-steps", str(STEPS)]
        cmd += ["--logdir", str(logdir), "--run-name", name, *CALIBRATION, *args]
        procs.append(subprocess.Popen(cmd, cwd=root, env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    consoles = {}
    try:
        for name, proc in zip(VARIANTS, procs, strict=True):
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
            consoles[name] = output.decode(errors="replace")
            assert proc.returncode == 0, consoles[name][-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    names = {}
    for name in VARIANTS:
        (version,) = [p.name for p in (logdir / name).iterdir() if p.is_dir()]
        names[name] = f"{name}/{version}"
    return logdir, names, consoles


def request(port: int, path: str, body: dict | None = None) -> Any:
    """GET (or POST `body` as JSON) http://127.0.0.1:port/path and decode the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as answer:
        return json.loads(answer.read())


def start_tensorboard(logdir: Path, log_path: Path, expected_runs: set[str]) -> tuple[subprocess.Popen, int]:
    """Start TensorBoard on a free loopback port (a second port if another process took the first) and wait
    until /data/runs lists `expected_runs`. The caller stops the process."""
    for _ in range(2):
        port = free_port()
        log = open(log_path, "w")  # noqa: SIM115 (closed once the process has its copy)
        cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1"]
        proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if expected_runs <= set(request(port, "/data/runs")):
                    return proc, port
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        stop(proc)
        if "could not bind" not in log_path.read_text().lower():
            break  # not a port race: do not retry
    pytest.fail(
        f"TensorBoard did not serve {sorted(expected_runs)} within {SERVE_TIMEOUT_S} s:\n{log_path.read_text()}"
    )


def served_chart(chart: dict) -> list:
    """A chart of TensorBoard's layout answer in add_custom_scalars' own form: [kind, tags]."""
    if "multiline" in chart:
        return ["Multiline", chart["multiline"]["tag"]]
    (series,) = chart["margin"]["series"]
    return ["Margin", [series["value"], series["lower"], series["upper"]]]


@pytest.mark.slow
def test_tensorboard_serves_runs_tags_hparams_and_layout(runs, tmp_path):
    logdir, names, _ = runs
    proc, port = start_tensorboard(logdir, tmp_path / "tensorboard.log", set(names.values()))
    try:
        assert set(request(port, "/data/runs")) == set(names.values())
        bucket_indices = check_scalar_tags(port, names)
        check_hparams(port, logdir, names)
        check_settings_text(port, names)
        check_timeline_image(port, logdir, names)

        layout = request(port, "/data/plugin/custom_scalars/layout")
        served = {
            category["title"]: {chart["title"]: served_chart(chart) for chart in category["chart"]}
            for category in layout["category"]
        }
        # TensorBoard merges the runs' layouts: one margin chart for every bucket of any run.
        assert served == custom_scalar_layout(sorted(bucket_indices))
        headline, *_ = served.values()  # the first category: one chart per headline metric, one tag each
        assert [chart[1] for chart in headline.values() if chart[0] == "Multiline"] == [
            [re.escape(tag) + "$"] for tag in HEADLINE_TAGS
        ]
        (bands,) = [charts for title, charts in served.items() if title.startswith("bucket comm ms")]
        assert len(bands) == len(bucket_indices) > 1
        assert bands["bucket 00"] == ["Margin", [f"per_bucket/00/{tag}" for tag in BAND_TAGS]]
    finally:
        stop(proc)


def check_scalar_tags(port: int, names: dict[str, str]) -> set[int]:
    """The headline tags in the section TensorBoard shows first, every bucket's tags in a section of their own;
    returns the bucket indices of all runs."""
    scalar_tags = request(port, "/data/plugin/scalars/tags")
    bucket_indices: set[int] = set()
    for run in names.values():
        assert run in scalar_tags, sorted(scalar_tags)
        run_tags = set(scalar_tags[run])
        missing = [tag for tag in PROMISED_TAGS if tag not in run_tags]
        assert not missing, (run, missing)
        assert min(tag.split("/")[0] for tag in run_tags) == "1_headline"
        assert sorted(tag for tag in run_tags if tag.startswith("1_headline/"))[:3] == HEADLINE_TAGS[:3]
        bucket_tags = {tag for tag in run_tags if re.search(r"/\d\d/", tag)}
        assert bucket_tags and {tag.split("/")[0] for tag in bucket_tags} == {"per_bucket"}, sorted(bucket_tags)
        buckets = sorted({tag.split("/")[1] for tag in bucket_tags})
        assert buckets[0] == "00", (run, buckets)
        for bucket in buckets:
            for name in [*BUCKET_TAGS, *BAND_TAGS]:
                assert f"per_bucket/{bucket}/{name}" in run_tags, (run, bucket, name)
        bucket_indices |= {int(bucket) for bucket in buckets}
    assert "per_bucket/01/time_ms" in scalar_tags[names["bucket0.5"]], "a 0.5 MiB cap makes several buckets"
    for run in names.values():
        query = urllib.parse.urlencode({"run": run, "tag": tags.STEP_MS})
        points = request(port, f"/data/plugin/scalars/scalars?{query}")  # [wall time, step, value]
        # The headline series hold the measured steps only: warm-up and calibration are under setup/.
        assert [step for _, step, _ in points] == MEASURED and all(v > 0 for _, _, v in points)
    return bucket_indices


def check_hparams(port: int, logdir: Path, names: dict[str, str]) -> None:
    """The settings that tell runs apart, in their order with their names shown, and the headline metrics."""
    experiment = request(port, "/data/plugin/hparams/experiment", {"experimentName": ""})
    assert [(info["name"], info["displayName"]) for info in experiment["hparamInfos"]] == HPARAM_NAMES
    assert [info["name"]["tag"] for info in experiment["metricInfos"]][:5] == HPARAM_METRICS
    groups = request(
        port,
        "/data/plugin/hparams/session_groups",
        {
            "experimentName": "",
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [
                *({"hparam": name, "includeInResult": True} for name, _ in HPARAM_NAMES),
                *({"metric": {"tag": tag, "group": ""}, "includeInResult": True} for tag in HPARAM_METRICS),
            ],
            "startIndex": 0,
            "sliceSize": 100,
        },
    )
    # One row per run, named by its short Trial ID (the settings hash and the start time), which TensorBoard's
    # column shows whole (about 13 digits). Each row's one session is the run.
    by_run = {group["sessions"][0]["name"]: group for group in groups["sessionGroups"]}
    assert set(by_run) == set(names.values()) and all(len(g["sessions"]) == 1 for g in groups["sessionGroups"])
    for run, group in by_run.items():
        settings = json.loads((logdir / run / SUMMARY_FILE).read_text())["settings"]
        started = run.split("/")[1]  # the version: YYYYmmdd-HHMMSS
        assert group["name"] == f"{workload_hash(settings)} {started[9:]}", (run, group["name"])
    for variant, run in names.items():
        hparams = by_run[run]["hparams"]
        assert hparams["4_comm_hook"] == ("fp16" if variant == "fp16" else "allreduce")
        assert hparams["5_bucket_cap_mb"] == (0.5 if variant == "bucket0.5" else 25.0)
        assert hparams["1_model"] == "resnet_tiny" and hparams["2_world_size"] == 2 and hparams["8_backend"] == "gloo"
        metrics = {m["name"]["tag"]: m["value"] for m in by_run[run]["metricValues"]}
        assert set(HPARAM_METRICS) <= set(metrics) and metrics["hp/step_ms_p50"] > 0
        assert by_run[run]["sessions"][0]["status"] == "STATUS_SUCCESS"


def check_settings_text(port: int, names: dict[str, str]) -> None:
    """Every setting, as a table in the TEXT tab."""
    for variant, run in names.items():
        query = urllib.parse.urlencode({"run": run, "tag": "settings"})
        (entry,) = request(port, f"/data/plugin/text/text?{query}")
        html = entry["text"]
        assert "<table>" in html and "<td>comm_hook</td>" in html and "<td>gradient_as_bucket_view</td>" in html
        assert ("<td>fp16</td>" in html) == (variant == "fp16") and "<td>world_size</td>" in html


def check_timeline_image(port: int, logdir: Path, names: dict[str, str]) -> None:
    """The step timeline, the same PNG as beside summary.json, in the Images tab."""
    image_tags = request(port, "/data/plugin/images/tags")
    for run in names.values():
        assert "timeline" in image_tags[run], image_tags
        query = urllib.parse.urlencode({"run": run, "tag": "timeline", "sample": 0})
        (image,) = request(port, f"/data/plugin/images/images?{query}")
        assert image["step"] == MEASURED[-1]
        url = f"http://127.0.0.1:{port}/data/plugin/images/individualImage?{image['query']}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            png = answer.read()
        assert png.startswith(b"\x89PNG") and png == (logdir / run / TIMELINE_FILE).read_bytes()


@pytest.mark.slow
def test_console_is_quiet_and_the_bar_ends_before_the_table(runs):
    """What the user reads while the runs above trained: no third-party tips or warnings, the bar's fields (no
    v_num), and nothing of the bar after the end-of-run table."""
    _, _, consoles = runs
    for variant, console in consoles.items():
        noise_lines = ("Tip:", "litlogger", "litmodels", "LeafSpec", "deprecated", "GPU available", "Trainer.fit")
        for noise in (*noise_lines, "v_num"):
            assert noise not in console, (variant, noise)
        assert "phase=warm-up" in console, console[-2000:]
        before, table = console.split("# Gradient communication", 1)
        assert "step/s" in before and "step/s" not in table, table
