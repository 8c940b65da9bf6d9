"""bench.codec_contention as a user runs it: rank processes at once, each phase timed on each rank, and the OpenMP
team a second thread gets counted. Its figures (docs/BENCHMARKS.md, 2026-12-06) need a core per thread; this checks
that it measures, and the mechanism it rests on: under libgomp a thread other than the main one that starts a
parallel region gets a team of its own, threads - 1 more threads in the process (+3 at 4 threads on the 16-core
host)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("main", "side", "side+backward", "main+backward")


def _run(ranks: int, threads: int) -> str:
    cmd = [sys.executable, "-m", "bench.codec_contention", "--ranks", str(ranks), "--threads", str(threads)]
    cmd += ["--reps", "2", "--load-s", "0.2", "--model", "resnet18", "--image-size", "32", "--batch-size", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _counts(stdout: str, key: str) -> list[int]:
    (line,) = re.findall(rf"^{re.escape(key)}: (.+)$", stdout, flags=re.MULTILINE)
    return [int(n) for n in line.split()]


@pytest.mark.slow
def test_every_phase_is_timed_on_every_rank():
    stdout = _run(ranks=2, threads=1)
    assert stdout.startswith("# 2 ranks x 1 threads, resnet18 32px batch 2"), stdout
    timed = re.findall(r"^\s*(\S+)\s+(\d+) elements:((?:\s+[\d.]+)+)$", stdout, flags=re.MULTILINE)
    assert [(phase, int(numel)) for phase, numel, _ in timed] == [
        (phase, numel) for phase in PHASES for numel in (2**18, 2**20, 2**22)
    ]
    for _, _, values in timed:
        ms = [float(v) for v in values.split()]
        assert len(ms) == 2 and all(0 < v < 1000 for v in ms), values
    assert all(steps >= 1 for steps in _counts(stdout, "backward_steps_beside_codec"))
    # One thread a rank: the second thread's codec runs alone, no team.
    assert _counts(stdout, "threads_after_side") == _counts(stdout, "threads_after_main"), stdout


@pytest.mark.slow
def test_a_second_thread_gets_an_openmp_team_of_its_own():
    stdout = _run(ranks=1, threads=2)
    (main,), (side,) = _counts(stdout, "threads_after_main"), _counts(stdout, "threads_after_side")
    assert side - main == 2 - 1, stdout
