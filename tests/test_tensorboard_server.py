"""`tensorboard --logdir runs` on real runs: a TensorBoard server on loopback must list the runs, the tags
docs/METRICS.md promises, the runs' hparams and our custom-scalar layout, through its HTTP data API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.train_runs import BUCKET_TAGS, PROMISED_TAGS, train_env

BAND_TAGS = ["time_ms_p50", "time_ms_p10", "time_ms_p90"]  # a margin chart's value, lower, upper

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"bucket0.5": ["--bucket-cap-mb", "0.5"], "fp16": ["--comm-hook", "fp16"]}
HPARAM_NAMES = ["model", "world_size", "backend", "bucket_cap_mb", "comm_hook", "precision", "batch_size"]
HPARAM_METRICS = ["hp/comm_ms_p50", "hp/step_ms_p50", "hp/samples_per_s_p50", "hp/busbw_gbps_p50"]
STEPS = 4
RUN_TIMEOUT_S = 240
SERVE_TIMEOUT_S = 60  # TensorBoard starts in a few seconds; the first load of the runs follows in the background
HTTP_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Two small train.py runs, made at once; returns the log root and each variant's TensorBoard run name."""
    root = tmp_path_factory.mktemp("tensorboard")
    logdir = root / "runs"
    procs = []
    for name, args in VARIANTS.items():
        cmd = [sys.executable, str(REPO / "train.py"), "--model", "resnet_tiny", "--max-steps", str(STEPS)]
        cmd += ["--logdir", str(logdir), "--run-name", name, *args]
        procs.append(subprocess.Popen(cmd, cwd=root, env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
            assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
    names = {}
    for name in VARIANTS:
        (version,) = [p.name for p in (logdir / name).iterdir() if p.is_dir()]
        names[name] = f"{name}/{version}"
    return logdir, names


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def written_layout(bucket_indices: list[int]) -> dict[str, dict[str, list]]:
    """The layout run_summary.add_custom_scalar_layout hands to the writer: {category: {title: [kind, tags]}}."""
    from harness.train.summary import add_custom_scalar_layout

    captured: list[dict] = []
    add_custom_scalar_layout(SimpleNamespace(add_custom_scalars=captured.append), bucket_indices)
    (layout,) = captured
    return layout


def served_chart(chart: dict) -> list:
    """A chart of TensorBoard's layout answer in add_custom_scalars' own form: [kind, tags]."""
    if "multiline" in chart:
        return ["Multiline", chart["multiline"]["tag"]]
    (series,) = chart["margin"]["series"]
    return ["Margin", [series["value"], series["lower"], series["upper"]]]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.mark.slow
def test_tensorboard_serves_runs_tags_hparams_and_layout(runs, tmp_path):
    logdir, names = runs
    proc, port = start_tensorboard(logdir, tmp_path / "tensorboard.log", set(names.values()))
    try:
        assert set(request(port, "/data/runs")) == set(names.values())

        tags = request(port, "/data/plugin/scalars/tags")
        bucket_indices: set[int] = set()
        for run in names.values():
            assert run in tags, sorted(tags)
            run_tags = set(tags[run])
            missing = [tag for tag in PROMISED_TAGS if tag not in run_tags]
            assert not missing, (run, missing)
            buckets = sorted({tag.split("/")[1] for tag in run_tags if tag.startswith("comm/bucket_")})
            assert buckets and buckets[0] == "bucket_00", (run, buckets)
            for bucket in buckets:
                for name in [*BUCKET_TAGS, *BAND_TAGS]:
                    assert f"comm/{bucket}/{name}" in run_tags, (run, bucket, name)
            bucket_indices |= {int(bucket.removeprefix("bucket_")) for bucket in buckets}
        assert "comm/bucket_01/time_ms" in tags[names["bucket0.5"]], "a 0.5 MiB cap makes several buckets"
        for run in names.values():
            query = urllib.parse.urlencode({"run": run, "tag": "step/time_ms"})
            points = request(port, f"/data/plugin/scalars/scalars?{query}")  # [wall time, step, value]
            # The headline series hold the measured steps only: warm-up (0, 1) is under setup/.
            assert [step for _, step, _ in points] == list(range(2, STEPS)) and all(v > 0 for _, _, v in points)

        experiment = request(port, "/data/plugin/hparams/experiment", {"experimentName": ""})
        hparam_names = {info["name"] for info in experiment["hparamInfos"]}
        assert set(HPARAM_NAMES) <= hparam_names, sorted(hparam_names)
        assert {info["name"]["tag"] for info in experiment["metricInfos"]} >= set(HPARAM_METRICS)
        groups = request(
            port,
            "/data/plugin/hparams/session_groups",
            {
                "experimentName": "",
                "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                "colParams": [
                    *({"hparam": name, "includeInResult": True} for name in ("comm_hook", "model", "world_size")),
                    *({"metric": {"tag": tag, "group": ""}, "includeInResult": True} for tag in HPARAM_METRICS),
                ],
                "startIndex": 0,
                "sliceSize": 100,
            },
        )
        by_run = {group["name"]: group for group in groups["sessionGroups"]}
        assert set(by_run) == set(names.values())
        for variant, run in names.items():
            hparams = by_run[run]["hparams"]
            assert hparams["comm_hook"] == ("fp16" if variant == "fp16" else "allreduce")
            assert hparams["model"] == "resnet_tiny" and hparams["world_size"] == 2
            metrics = {m["name"]["tag"]: m["value"] for m in by_run[run]["metricValues"]}
            assert set(HPARAM_METRICS) <= set(metrics) and metrics["hp/step_ms_p50"] > 0

        layout = request(port, "/data/plugin/custom_scalars/layout")
        served = {
            category["title"]: {chart["title"]: served_chart(chart) for chart in category["chart"]}
            for category in layout["category"]
        }
        # TensorBoard merges the runs' layouts: one margin chart for every bucket of any run.
        assert served == written_layout(sorted(bucket_indices))
        assert served["comm"]["bandwidth"][1][0] == "comm/busbw_gbps"
        (bands,) = [charts for title, charts in served.items() if title.startswith("bucket time: p50")]
        assert len(bands) == len(bucket_indices) > 1
        assert bands["bucket 00"] == ["Margin", [f"comm/bucket_00/{tag}" for tag in BAND_TAGS]]
    finally:
        stop(proc)
