"""train.py end to end, started as a user starts it: real processes, gloo, real TensorBoard event files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from models import get_model_spec, trainable_parameters
from tests import train_runs
from tests.train_runs import BUCKET_TAGS, PROMISED_TAGS


def run_train(args: list[str], tmp_path: Path, launcher: list[str] | None = None, timeout: int = 300):
    return train_runs.run_train(args, tmp_path / "runs", launcher, timeout)


def only_run_dir(tmp_path: Path) -> Path:
    summaries = list((tmp_path / "runs").glob("*/*/summary.json"))
    assert len(summaries) == 1, f"expected one run, found {summaries}"
    return summaries[0].parent


def load_events(run_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_two_process_run_writes_promised_tags(tmp_path):
    steps = 10  # 2 warm-up, 5 calibration (communication skipped), 3 measured
    proc = run_train(
        ["--model", "resnet_tiny", "--max-steps", str(steps), "--bucket-cap-mb", "0.5", "--gather-every", "2"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    acc = load_events(run_dir)
    tags = acc.Tags()["scalars"]
    for tag in PROMISED_TAGS:
        assert tag in tags, f"missing {tag}"
        assert [e.step for e in acc.Scalars(tag)] == list(range(steps)), tag
    buckets_per_step = [int(e.value) for e in acc.Scalars("comm/buckets")]
    assert buckets_per_step[0] == 1 and buckets_per_step[-1] > 1, buckets_per_step
    for i in range(buckets_per_step[-1]):
        for name in BUCKET_TAGS:
            assert f"comm/bucket_{i:02d}/{name}" in tags
    # fp32 with the plain hook: every step moves exactly 4 bytes per trainable parameter, except the
    # calibration steps, which skip communication.
    params = trainable_parameters(get_model_spec("resnet_tiny").build())
    calibration = [int(e.value) for e in acc.Scalars("step/calibration")]
    assert calibration == [0, 0, 1, 1, 1, 1, 1, 0, 0, 0]
    assert [e.value for e in acc.Scalars("comm/bytes")] == [0 if c else 4 * params for c in calibration]
    # Bucket bytes add up to the step's bytes.
    last = steps - 1
    bucket_bytes = sum(acc.Scalars(f"comm/bucket_{i:02d}/bytes")[-1].value for i in range(buckets_per_step[last]))
    assert bucket_bytes == 4 * params
    assert all(e.value > 0 for e in acc.Scalars("step/time_ms"))
    assert "comm/bucket_time_ms" in acc.Tags()["histograms"]
    # Exposed communication against the calibrated compute-only step, on every step after calibration.
    for tag in ("comm/exposed_ms", "comm/overlap_pct"):
        assert [e.step for e in acc.Scalars(tag)] == [7, 8, 9], tag
    assert [e.step for e in acc.Scalars("step/fwd_bwd_ms")] == list(range(steps))
    # Each bucket's band: p10/p50/p90 of its own time over the measured steps so far (warm-up and
    # calibration left out), recomputed here from the bucket's logged times.
    for i in range(buckets_per_step[last]):
        times = {e.step: e.value for e in acc.Scalars(f"comm/bucket_{i:02d}/time_ms")}
        band = {q: acc.Scalars(f"comm/bucket_{i:02d}/time_ms_p{q}") for q in (10, 50, 90)}
        assert [e.step for e in band[50]] == [7, 8, 9], i
        for p10, p50, p90 in zip(band[10], band[50], band[90], strict=True):
            window = [times[step] for step in range(7, p50.step + 1)]
            # numpy's percentile (linear interpolation), computed apart from the harness's own
            assert p50.value == pytest.approx(float(numpy.percentile(window, 50)), rel=1e-5)
            assert p10.value == pytest.approx(float(numpy.percentile(window, 10)), rel=1e-5)
            assert p10.value <= p50.value <= p90.value
    # Cross-rank gathers every 2 steps.
    for tag in ("ranks/step_ms_skew", "ranks/slowest_rank", "comm/busbw_fastest_rank_gbps"):
        assert [e.step for e in acc.Scalars(tag)] == [0, 2, 4, 6, 8], tag
    assert all(e.value in (0, 1) for e in acc.Scalars("ranks/slowest_rank"))

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["completed"] is True
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    assert summary["totals"]["steps_measured"] == steps - 2 - 5, "warm-up and calibration steps are left out"
    assert summary["totals"]["bytes_per_step"] == 4 * params
    assert sum(b["bytes"] for b in summary["buckets"]) == 4 * params
    assert summary["settings"]["model"] == "resnet_tiny"
    assert summary["versions"]["torch"] and "lightning" in summary["versions"]
    assert summary["ddp_logging"]["comm_hook"] == "timed_allreduce_hook"
    assert summary["totals"]["compute_only_ms"] > 0 and len(summary["calibration_samples_ms"]) == 5
    assert summary["totals"]["exposed_ms_p50"] is not None and summary["last_rank_spread"]["step"] == 8
    overhead = summary["overhead_s"]
    assert overhead["gathers"] == 5 and overhead["calibration"] > 0
    # Calibration is 5 of the run's steps, so it is a part of all steps' time, never all of it.
    assert overhead["calibration"] + overhead["rank_gathers"] < overhead["all_steps"]
    assert all(
        key.startswith(("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_", "WORLD", "LOCAL", "MASTER", "SLURM"))
        for key in summary["env"]
    )
    assert summary["env"]["NCCL_NVLS_ENABLE"] == "0"
    # The table on stdout: one row per bucket.
    assert "# Gradient communication: 2 ranks, gloo" in proc.stdout
    assert "# harness overhead: calibration" in proc.stdout and "(5 of 10 steps)" in proc.stdout
    # hparams live in the run's own event file (the HParams plugin's session data).
    assert "_hparams_/session_start_info" in acc.summary_metadata


@pytest.mark.slow
def test_fp16_hook_halves_bytes_with_accumulation(tmp_path):
    proc = run_train(
        ["--model", "gpt_tiny", "--max-steps", "3", "--comm-hook", "fp16", "--accumulate-grad-batches", "2"],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = load_events(only_run_dir(tmp_path))
    params = trainable_parameters(get_model_spec("gpt_tiny").build())
    # Hooks fire only on the micro-batch that steps the optimizer: one point per optimizer step.
    assert [e.value for e in acc.Scalars("comm/bytes")] == [2 * params] * 3


@pytest.mark.slow
def test_resnet50_without_launcher(tmp_path):
    proc = run_train(["--model", "resnet50", "--max-steps", "3", "--batch-size", "2", "--image-size", "64"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["totals"]["bytes_per_step"] == 4 * 25_557_032


@pytest.mark.slow
def test_resnet50_under_torchrun(tmp_path):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = run_train(
        ["--model", "resnet50", "--max-steps", "3", "--batch-size", "2", "--image-size", "64"], tmp_path, torchrun
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["settings"]["launcher"] == "torchrun"
    assert summary["world_size"] == 2
    assert summary["env"]["WORLD_SIZE"] == "2"
