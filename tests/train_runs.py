"""Starting train.py as a user does, for tests: a clean environment and the tags every run must carry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN_PY = REPO / "train.py"

# docs/METRICS.md's promise, spelled out (harness.common.tags holds them for the code): the headline tags of every
# measured step, in the section TensorBoard shows first; some of the rest; and those of every bucket
# (per_bucket/{i:02d}/...), in a section of their own.
HEADLINE_TAGS = [
    "1_headline/1_step_ms",
    "1_headline/2_exposed_ms",
    "1_headline/3_comm_ms",
    "1_headline/4_overlap_pct",
    "1_headline/5_compute_only_ms",
    "1_headline/6_busbw_gbps",
    "1_headline/7_codec_ms",
]
PROMISED_TAGS = [
    *HEADLINE_TAGS,
    "step/samples_per_s",
    "comm/bytes",
    "comm/buckets",
    "comm/algbw_gbps",
    "comm/max_bucket_ms",
]
BUCKET_TAGS = ["time_ms", "codec_ms", "bytes", "busbw_gbps"]
# The collectives the harness itself runs beside the steps' gradient all_reduces, as a stop line names one that failed
# (harness.train.callback: the rank gather at a step's start, a calibration step's average after its backward).
HARNESS_COLLECTIVE = (
    r"all_gather of every rank's times for step \d+ \(rank gather\)"
    r"|all_reduce of step \d+'s gradients after its compute-only backward \(calibration, [\d,]+ B\)"
)


def measured_steps_upto(last: int) -> list[int]:
    """The steps a run with the default calibration logs under the headline tags, up to `last`: not warm-up,
    not calibration."""
    from harness.common.names import WARMUP_STEPS
    from harness.train.calibration import DEFAULT_BLOCK_STEPS, DEFAULT_EVERY, TIMELINE_STEPS, Calibration

    calibration = Calibration(DEFAULT_BLOCK_STEPS, DEFAULT_EVERY, TIMELINE_STEPS)
    return [s for s in range(WARMUP_STEPS, last + 1) if not calibration.is_calibration_step(s)]


# Sessions (process groups) that tests started around an endless train.py; conftest kills what is left of them
# after each test, so a test that fails before it stops its run leaves no ranks training into the next tests.
STARTED_SESSIONS: list[subprocess.Popen] = []


def kill_leftover_sessions() -> None:
    """SIGKILL every process still in a session recorded in STARTED_SESSIONS, and forget them."""
    while STARTED_SESSIONS:
        proc = STARTED_SESSIONS.pop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # the whole session is gone already
        proc.wait(timeout=30)


def stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """End `proc` if it still runs: SIGTERM, which a launcher (torchrun, TensorBoard) passes on or handles, so its
    children in sessions of their own end with it; SIGKILL only if it has not ended within `grace_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace_s)


def default_sighup() -> None:
    """A child's preexec_fn: SIGHUP back to its default. A suite started under `nohup` (SIGHUP ignored, which
    every child inherits) would otherwise see train.py and the sweep keep running when a test hangs them up,
    as they rightly do under nohup."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def train_env() -> dict[str, str]:
    """The test's environment without a launcher's or an earlier run's variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE", "COMMBENCH_RUN_VERSION"))
    }
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONUNBUFFERED="1")
    return env


def run_train(
    args: list[str], logdir: Path, launcher: list[str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    """Run train.py (under `launcher`, e.g. torchrun, if given) to completion with --logdir `logdir`."""
    cmd = [*(launcher or [sys.executable]), str(TRAIN_PY), "--logdir", str(logdir), *args]
    return subprocess.run(cmd, cwd=logdir.parent, env=train_env(), capture_output=True, text=True, timeout=timeout)
