"""Refusals that test_cli_refusals.py's table cannot set up: a directory that already holds runs, runs that are not
the ones a bench reads, a program missing from PATH. Each is one line and exit 2 before anything runs (each was a
run of minutes that failed at its end, or a wait for runs that never came)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_runs import REPO


def refusal(program: str, args: list[str], env: dict[str, str] | None = None) -> str:
    """`python -m program args`'s one line on stderr, asserting exit 2. Started in a session of its own, so that
    a version that starts its runs instead is stopped whole (train.py and its ranks too) at the time limit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", program, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"{program} {args} ran for 60 s instead of refusing") from None
    assert proc.returncode == 2 and stderr.count("\n") == 1, stderr
    return stderr.strip()


def fake_run(directory: Path) -> None:
    """A run directory as the harness finds one: a summary.json in it."""
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text("{}")


def test_tensorboard_screenshots_refuses_without_chromium_before_its_runs(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing on PATH: no chromium, whatever this machine has
    said = refusal("bench.tensorboard_screenshots", ["--logdir", str(tmp_path / "runs")], env)
    assert said == "python -m bench.tensorboard_screenshots: error: no chromium on PATH for the screenshots " + (
        "(Debian: apt-get install -y chromium)"
    )
    assert not (tmp_path / "runs").exists()


def test_tensorboard_screenshots_refuses_a_logdir_that_already_holds_runs(tmp_path):
    fake_run(tmp_path / "earlier" / "20260101-000000")
    said = refusal("bench.tensorboard_screenshots", ["--logdir", str(tmp_path)])
    assert said == (
        f"python -m bench.tensorboard_screenshots: error: --logdir {str(tmp_path)!r} already holds runs; give a new "
        "directory, or --reuse them"
    )


def test_tensorboard_screenshots_refuses_to_reuse_runs_that_are_not_its_own(tmp_path):
    for n in range(10):
        fake_run(tmp_path / f"other-{n}" / "20260101-000000")
    said = refusal("bench.tensorboard_screenshots", ["--reuse", "--logdir", str(tmp_path)])
    assert said == (
        f"python -m bench.tensorboard_screenshots: error: --logdir {str(tmp_path)!r} has 0 matches of "
        "*-allreduce-bucketdefault-*, not 1: not this script's runs"
    )


@pytest.mark.parametrize("model", ["resnet_tiny", "gpt_tiny"])
def test_predict_error_refuses_an_out_that_holds_a_run_of_the_same_name(tmp_path, model):
    """Refused after train.py's checks of each run, so a token model, which takes no --image-size, passes them."""
    fake_run(tmp_path / "runs" / f"predict-{model}-2" / "20260101-000000")
    args = ["--world-sizes", "2", "--model", model, "--max-steps", "3", "--max-bytes", "1M"]
    said = refusal("bench.predict_error", [*args, "--out", str(tmp_path)])
    assert said == (
        f"python -m bench.predict_error: error: --out {str(tmp_path)!r} already holds a run predict-{model}-2; "
        "give a new directory"
    )
