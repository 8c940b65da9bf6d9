"""The bucket-cap advisor against an answer worked out by hand: sleep_chain on a tbf-shaped link.

models/synthetic.py derives which bucket cap and hook make sleep_chain's step fastest on two hosts joined by
an 800 Mbit/s link: 1 or 2 MiB with fp16 or bf16 (the last bucket alone is exposed, at half the bytes), and
among the fp32 settings 1 MiB < 5 MiB < 100 MiB. docs/BENCHMARKS.md ("Issue 13") has the measured steps
that agree. One run at DDP's default cap with the allreduce hook (the run a user would have) is measured
here, and `python -m harness.advise` must find that answer from it.

Root only (network namespaces and tc); skipped with the reason elsewhere. The run takes about 40 s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.known_answer import RATE_MBIT, train_args
from harness.analysis.bucket_layout import model_bucket_layout
from harness.common.names import MIB, SUMMARY_FILE
from tests.netns import shaping_unavailable, two_hosts
from tests.two_host_train import REPO, train_on_hosts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shaping_unavailable() is not None, reason=str(shaping_unavailable())),
]

# 30 steps: 2 warm-up; compute-only (calibration) steps 2–4, 7, 12, 17, 22 and 27 (bench.known_answer's
# --calibration-every 5), so the exposed estimate has 8 reference samples spread through the run; the timeline
# steps 5 and 6; 18 measured.
STEPS = 30
RUN_TIMEOUT_S = 120.0
ADVISE_TIMEOUT_S = 120.0
LINK_GBPS = RATE_MBIT / 8 / 1000  # decimal GB/s, as busbw is reported


@pytest.fixture(scope="module")
def default_cap_run(tmp_path_factory):
    """The run directory of one sleep_chain run, DDP's default cap, allreduce hook, on the shaped link."""
    logdir = tmp_path_factory.mktemp("known_answer") / "runs"
    with two_hosts("hxkt", rate_mbit=RATE_MBIT) as hosts:
        assert hosts.shaped_rate_mbit(0) == hosts.shaped_rate_mbit(1) == RATE_MBIT
        procs, run_dir = train_on_hosts(hosts, train_args(None, "allreduce", STEPS), logdir, timeout_s=RUN_TIMEOUT_S)
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    return run_dir


def test_the_run_is_the_one_the_answer_assumes(default_cap_run):
    """The premises of the worked answer, read from the run: DDP's buckets, the sleeps, and the link."""
    summary = json.loads((default_cap_run / SUMMARY_FILE).read_text())
    assert summary["completed"] is True and summary["world_size"] == 2
    # DDP's rebuilt buckets (bytes of fp32 gradients) are the ones bucket_layout and the docstring give:
    # [head + block 7] (the 1 MiB first bucket), [blocks 6..0], [input layer].
    rebuilt = [int(n) for n in summary["ddp_logging"]["rebuilt_bucket_sizes"].split(",")]
    assert rebuilt == [b.numel * b.grad_itemsize for b in model_bucket_layout("sleep_chain", None)]
    totals = summary["totals"]
    assert totals["timeline_steps"] == 2 and summary["backward_timeline"]["steps"] == [5, 6]
    assert totals["steps_measured"] == STEPS - 2 - len(summary["calibration_samples_ms"]) - 2
    assert len(summary["calibration_samples_ms"]) == 8
    # Compute-only forward + backward is the eight 80 ms sleeps and a little (not CPU-bound).
    assert 640 <= totals["compute_only_ms"] < 800, totals
    # The 7-block bucket crosses the shaped link near its rate (never above it), so its time is the 7 × T of
    # the worked answer.
    big = summary["buckets"][1]
    assert big["bytes"] == 7 * (4 * MIB + 4096)
    assert 0.8 * LINK_GBPS <= big["busbw_gbps_p50"] <= 1.05 * LINK_GBPS, big


# With κ fitted on the whole forward+backward, the pick from one run was 1 MiB fp16 in 2 of 3 runs (50 MiB fp16 once:
# the tail's link noise went into κ). Fitted on the interference (exposed − tail), it was 1 MiB fp16 in 6 of 6 fresh
# runs on 2026-12-04 (docs/BENCHMARKS.md, "Issue 13: validation").
def test_advise_finds_the_worked_answer(default_cap_run, tmp_path):
    out = tmp_path / "advice.json"
    advise = subprocess.run(
        [sys.executable, "-m", "harness.advise", "--run", str(default_cap_run), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=ADVISE_TIMEOUT_S,
    )
    assert advise.returncode == 0, advise.stderr[-3000:]
    result = json.loads(out.read_text())

    # A per-bucket list can tie with 1 MiB (it merges buckets where κ charges their α), but train.py runs one cap:
    # the answer is checked on the best setting it can run.
    recommendation = result["best_single_cap"]
    # The advice's own table goes with every assertion, so that a miss says which pick it made and why. That is
    # how the second miss (2026-12-04, 15:21 UTC) showed a 16 KB bucket holding the in-run fit at 1.15 GB/s on this
    # 800 Mbit/s link (docs/BENCHMARKS.md, "A fragile in-run fit"), which network_from_run now catches.
    shown = f"{recommendation}\n{advise.stdout[-4000:]}"
    assert recommendation["hook"] in ("fp16", "bf16"), shown
    # A bucket closes once it reaches its cap, and one block's weight (4 MiB) already exceeds 1 MiB and 2 MiB:
    # at either cap every bucket holds one block, so 1 and 2 MiB are the same layout and the same answer.
    assert recommendation["bucket_cap_mb"] in (1, 2), shown

    # Among the fp32 (allreduce) rows: one block exposed (1 MiB) < two (5 MiB) < all eight (100 MiB).
    fp32 = {row["bucket_cap_mb"]: row for row in result["rows"] if row["hook"] == "allreduce"}
    ordered = {cap: fp32[cap] for cap in (1, 5, 100)}
    steps = [row["predicted_step_ms"] for row in ordered.values()]
    assert steps == sorted(steps) and len(set(steps)) == 3, f"{ordered}\n{shown}"
