"""harness.sweep_settings: a real grid of train.py runs, then the comparison table; and its CLI errors."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.sweep_settings import build_command, grid, parse_list

REPO = Path(__file__).resolve().parent.parent


def test_grid_and_command():
    configs = grid([1.0, 25.0], ["allreduce", "fp16"])
    assert len(configs) == 4 and {"--bucket-cap-mb": "25", "--comm-hook": "fp16"} in configs
    cmd = build_command(["torchrun", "--nproc-per-node", "8"], "gpt2", configs[0], Path("runs/x"), ["--max-steps", "9"])
    assert cmd[:4] == ["torchrun", "--nproc-per-node", "8", str(REPO / "train.py")]
    assert cmd[-2:] == ["--max-steps", "9"] and "--run-name" in cmd
    with pytest.raises(UsageError, match="--bucket-cap-mb"):
        parse_list("--bucket-cap-mb", "1,five", float)


@pytest.mark.slow
def test_sweep_runs_every_configuration_and_compares(tmp_path):
    logdir = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.sweep_settings",
            "--model",
            "resnet_tiny",
            "--bucket-cap-mb",
            "0.25,5",
            "--comm-hook",
            "allreduce",
            "--logdir",
            str(logdir),
            "--",
            "--max-steps",
            "4",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert len(list(logdir.glob("*/*/summary.json"))) == 2
    with open(logdir / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(row["bucket_cap_mb"] for row in rows) == ["0.25", "5"], rows
    assert "| run |" in (logdir / "comparison.md").read_text()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--comm-hook", "gzip"], "--comm-hook"),
        (["--bucket-cap-mb", "0,5"], "--bucket-cap-mb"),
        (["--model", "nope"], "--model"),
    ],
)
def test_bad_grid_is_one_line_exit_2(args, flag, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.sweep_settings", *args, "--logdir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert flag in proc.stderr.strip().splitlines()[-1]
