"""harness.advise on a real 2-rank gloo run, as a user runs it: the advice, and --verify end to end.

The buckets the advisor rebuilds from the run's measured timeline must be the ones DDP built in that run (the
layout check, against the run's own per-bucket record), and --verify must really run train.py on the settings
it names, with the original run's workload, and set what they measured beside what was predicted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.train_runs import REPO, run_train, train_env

MODEL_ARGS = ["--model", "resnet_tiny", "--image-size", "32", "--max-steps", "12", "--calibration-every", "4"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("advise")
    proc = run_train([*MODEL_ARGS, "--no-progress-bar"], root / "runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (summary,) = (root / "runs").glob("*/*/summary.json")
    return summary.parent


def advise(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.advise", *args],
        cwd=REPO,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_advice_rebuilds_the_runs_own_buckets(base_run, tmp_path):
    out = tmp_path / "advice.json"
    proc = advise("--run", str(base_run), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    advice = json.loads(out.read_text())
    summary = json.loads((base_run / "summary.json").read_text())
    # The layout check compares with the run's per-bucket record; check it here against DDP's own log too.
    assert "are the run's own" in advice["layout_check"], advice["layout_check"]
    rebuilt = [int(s) for s in summary["ddp_logging"]["rebuilt_bucket_sizes"].split(",")]
    assert [b["bytes"] for b in sorted(summary["buckets"], key=lambda b: b["index"])] == rebuilt
    assert advice["current"]["buckets"] == len(rebuilt)
    caps = {r["bucket_cap_mb"] for r in advice["rows"] if r["kind"] == "cap"}
    assert caps == {1, 2, 5, 10, 25, 50, 100, 200}
    assert {r["hook"] for r in advice["rows"]} == {"allreduce", "fp16", "bf16"}
    assert any(r["kind"] == "list" for r in advice["rows"])
    assert advice["network"]["source"].startswith("in-run fit")
    assert "# recommendation:" in proc.stdout and "Formulas:" in proc.stdout
    # Each rank's CPU threads, as train.py shares the cores this process may use between the machine's ranks; the
    # fp16 and bf16 rows carry the advisor's warning only where a rank had more than one.
    cores = len(os.sched_getaffinity(0))
    threads = {rank["intra_op_threads"] for rank in summary["ranks"]}
    assert threads == {max(1, cores // summary["world_size"])}
    assert any("rows are likely too fast here" in note for note in advice["notes"]) == (max(threads) > 1)


def test_verify_runs_the_named_settings_with_the_runs_workload(base_run, tmp_path):
    logdir = tmp_path / "verify"
    out = tmp_path / "advice.json"
    proc = advise(
        "--run", str(base_run), "--caps", "1,100", "--hooks", "allreduce", "--verify", "1", "--verify-repeat", "1",
        "--logdir", str(logdir), "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    verification = json.loads(out.read_text())["verification"]
    assert len(verification["rows"]) == 2 and not verification["failed"]
    assert "# verdict:" in proc.stdout
    base = json.loads((base_run / "summary.json").read_text())["settings"]
    summaries = sorted(logdir.glob("*/*/summary.json"))
    assert len(summaries) == 2
    for path in summaries:
        settings = json.loads(path.read_text())["settings"]
        for key in ("model", "image_size", "max_steps", "batch_size", "devices", "calibration_every"):
            assert settings[key] == base[key], key
    for row in verification["rows"]:
        assert len(row["measured_step_ms"]) == 1 and row["measured_step_ms"][0] > 0
    # The run's own setting (DDP's default cap) ran without a cap flag; the pick with its cap.
    caps = {json.loads(p.read_text())["settings"]["bucket_cap_mb"] for p in summaries}
    assert None in caps and len(caps) == 2
