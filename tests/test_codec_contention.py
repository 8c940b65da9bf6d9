"""bench.codec_contention as a user runs it: rank processes at once, each phase timed on each rank, the threads
counted. Its figures (docs/BENCHMARKS.md, 2026-12-06) need a core per thread; this only checks that it measures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("main", "side", "side+backward", "main+backward")


def test_every_phase_is_timed_on_every_rank():
    cmd = [sys.executable, "-m", "bench.codec_contention", "--ranks", "2", "--threads", "1", "--reps", "2"]
    cmd += ["--load-s", "0.2", "--model", "resnet18", "--image-size", "32", "--batch-size", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("# 2 ranks x 1 threads, resnet18 32px batch 2"), proc.stdout
    timed = re.findall(r"^\s*(\S+)\s+(\d+) elements:((?:\s+[\d.]+)+)$", proc.stdout, flags=re.MULTILINE)
    assert [(phase, int(numel)) for phase, numel, _ in timed] == [
        (phase, numel) for phase in PHASES for numel in (2**18, 2**20, 2**22)
    ]
    for _, _, values in timed:
        ms = [float(v) for v in values.split()]
        assert len(ms) == 2 and all(0 < v < 1000 for v in ms), values
    counts = dict(re.findall(r"^(threads_\S+): (.+)$", proc.stdout, flags=re.MULTILINE))
    at_start, after_side = ([int(n) for n in counts[key].split()] for key in ("threads_at_start", "threads_after_side"))
    # The second thread is alive and counted from then on: each rank has at least one more thread.
    assert all(after > start for start, after in zip(at_start, after_side, strict=True)), counts
