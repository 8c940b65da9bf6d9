"""bench.trainer_overhead runs: one tiny round of its three loops on the CPU (it crashed on every call once, when
train.py's set-up began claiming a run directory that its environment probe has none of), and refuses a count
below 1 in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.train_runs import REPO

PROG = "python -m bench.trainer_overhead"
TINY = ["--device", "cpu", "--model", "resnet_tiny", "--batch-size", "2", "--image-size", "32", "--warmup-steps", "1"]


@pytest.mark.slow
def test_one_round_of_each_loop_runs_and_reports():
    cmd = [sys.executable, "-m", "bench.trainer_overhead", *TINY, "--rounds", "1", "--steps", "4"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["bench"] == "trainer_overhead" and result["rounds"] == 1
    for loop in ("plain", "lightning", "harness"):
        assert math.isfinite(result[f"{loop}_step_ms_p50"]) and result[f"{loop}_step_ms_p50"] > 0


@pytest.mark.parametrize(("args", "says"), [(["--rounds", "0"], "--rounds must be at least 1, got 0"),
                                            (["--steps", "-1"], "--steps must be at least 1, got -1")])  # fmt: skip
def test_a_count_below_1_is_one_line(args, says):
    proc = subprocess.run([sys.executable, "-m", "bench.trainer_overhead", *TINY, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr == f"{PROG}: error: {says}\n", proc.stderr
