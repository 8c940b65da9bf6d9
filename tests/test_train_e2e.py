"""train.py end to end, started as a user starts it: real processes, gloo, real TensorBoard event files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from harness.common import tags
from harness.common.openmp_spin import teams_spin
from harness.train.timeline import TIMELINE_FILE
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
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0, "images": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_two_process_run_writes_promised_tags(tmp_path):
    # 2 warm-up steps (0, 1), a calibration block (2, 3), the 2 timeline steps (4, 5) and one calibration step
    # every 4 after that (6, 10): communication skipped in backward there. The headline series hold the measured
    # steps only; the timeline steps give no compute-only sample.
    steps = 14
    calibration_steps, timeline_steps, measured_steps = [2, 3, 6, 10], [4, 5], [7, 8, 9, 11, 12, 13]
    proc = run_train(
        [
            "--model", "resnet_tiny", "--max-steps", str(steps), "--bucket-cap-mb", "0.5", "--gather-every", "2",
            "--calibration-steps", "2", "--calibration-every", "4",
        ],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    acc = load_events(run_dir)
    written = acc.Tags()["scalars"]
    for tag in PROMISED_TAGS:
        assert tag in written, f"missing {tag}"
        assert [e.step for e in acc.Scalars(tag)] == measured_steps, tag
    assert [e.step for e in acc.Scalars(tags.WARMUP_STEP_MS)] == [0, 1]
    assert [e.step for e in acc.Scalars(tags.CALIBRATION_STEP_MS)] == sorted(calibration_steps + timeline_steps)
    assert [e.step for e in acc.Scalars(tags.CALIBRATION_COMPUTE_ONLY_MS)] == calibration_steps
    buckets_per_step = [int(e.value) for e in acc.Scalars(tags.BUCKETS)]
    assert min(buckets_per_step) > 1, buckets_per_step
    for i in range(buckets_per_step[-1]):
        for name in BUCKET_TAGS:
            assert tags.bucket_tag(i, name) in written
    # fp32 with the plain hook: every measured step moves exactly 4 bytes per trainable parameter.
    params = trainable_parameters(get_model_spec("resnet_tiny").build())
    assert [e.value for e in acc.Scalars(tags.BYTES)] == [4 * params] * len(measured_steps)
    # Bucket bytes add up to the step's bytes.
    bucket_bytes = sum(acc.Scalars(tags.bucket_tag(i, "bytes"))[-1].value for i in range(buckets_per_step[-1]))
    assert bucket_bytes == 4 * params
    assert all(e.value > 0 for e in acc.Scalars(tags.STEP_MS))
    assert tags.BUCKET_TIME_HISTOGRAM in acc.Tags()["histograms"]
    # Exposed communication against the calibrated compute-only step, and its parts, on every measured step;
    # the compute-only reference is logged beside it.
    for tag in (tags.EXPOSED_MS, tags.TAIL_MS, tags.INTERFERENCE_MS, tags.CODEC_MS, tags.COMPUTE_ONLY_MS):
        assert [e.step for e in acc.Scalars(tag)] == measured_steps, tag
    for exposed, tail, interference in zip(
        *(acc.Scalars(tag) for tag in (tags.EXPOSED_MS, tags.TAIL_MS, tags.INTERFERENCE_MS)), strict=True
    ):
        assert interference.value == pytest.approx(exposed.value - tail.value, abs=1e-3)
    # The run's exposed p50 with its 95 % interval, written with the final summary at the last step.
    interval = [acc.Scalars(tag) for tag in tags.EXPOSED_INTERVAL]
    assert [[e.step for e in series] for series in interval] == [[steps - 1]] * 3
    assert interval[1][0].value <= interval[0][0].value <= interval[2][0].value
    # Each bucket's band: p10/p50/p90 of its own time over the measured steps so far (warm-up and
    # calibration left out), recomputed here from the bucket's logged times.
    for i in range(buckets_per_step[-1]):
        times = {e.step: e.value for e in acc.Scalars(tags.bucket_tag(i, "time_ms"))}
        band = {q: acc.Scalars(tags.bucket_tag(i, f"time_ms_p{q}")) for q in (10, 50, 90)}
        assert [e.step for e in band[50]] == measured_steps, i
        for p10, p50, p90 in zip(band[10], band[50], band[90], strict=True):
            window = [times[step] for step in measured_steps if step <= p50.step]
            # numpy's percentile (linear interpolation), computed apart from the harness's own
            assert p50.value == pytest.approx(float(numpy.percentile(window, 50)), rel=1e-5)
            assert p10.value == pytest.approx(float(numpy.percentile(window, 10)), rel=1e-5)
            assert p10.value <= p50.value <= p90.value
    # Cross-rank gathers every 2 steps, on measured steps only.
    for tag in (tags.STEP_MS_SKEW, tags.SLOWEST_RANK, tags.BUSBW_FASTEST_RANK_GBPS):
        assert [e.step for e in acc.Scalars(tag)] == [8, 12], tag
    assert all(e.value in (0, 1) for e in acc.Scalars(tags.SLOWEST_RANK))

    summary = json.loads((run_dir / "summary.json").read_text())
    totals = summary["totals"]
    assert summary["completed"] is True
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    # gloo's worker threads, read from the real process group's options (torch's default, 2): the advisor
    # queues buckets on that many.
    assert summary["collectives_at_once"] == torch.distributed.ProcessGroupGloo._Options()._threads == 2
    assert totals["steps_measured"] == len(measured_steps), "warm-up and calibration steps are left out"
    assert totals["bytes_per_step"] == 4 * params
    assert sum(b["bytes"] for b in summary["buckets"]) == 4 * params
    assert {b["time_source"] for b in summary["buckets"]} == {"cpu_clock"} and totals["time_source"] == "cpu_clock"
    # The hook's call on its thread holds its division by the world size (the codec on the CPU, ready → launch).
    assert all(b["host_ms_p50"] > 0 and b["host_ms_p50"] >= 0.9 * b["codec_ms_p50"] for b in summary["buckets"])
    assert summary["settings"]["model"] == "resnet_tiny"
    assert summary["versions"]["torch"] and "lightning" in summary["versions"]
    assert summary["ddp_logging"]["comm_hook"] == "timed_allreduce_hook"
    # DDP's own comm time, read at the iterations it sampled (steps 0–9 here), against the harness's span on
    # the measured ones among them: DDP's window starts before the hook is entered and ends after it finalised
    # backward, so it holds the harness's span and a little more.
    check = summary["ddp_crosscheck"]
    assert check["compared_steps"] == len([s for s in measured_steps if s <= 9]), check
    assert sorted(int(s) for s in check["ratios_by_step"]) == [s for s in measured_steps if s <= 9]
    assert 0.98 <= check["median_ratio"] <= 1.5, check
    assert check["excluded_samples"] == 7 and not check["mismatches"], check  # steps 0, 1 (warm-up), 2–6
    assert summary["calibration_sample_steps"] == calibration_steps and len(summary["calibration_samples_ms"]) == 4
    assert totals["compute_only_ms"] > 0 and totals["calibration_every"] == 4
    low, high = totals["exposed_ms_ci95"]
    assert low <= totals["exposed_ms_p50"] <= high
    assert isinstance(totals["exposure_resolved"], bool) and totals["exposure_verdict"]
    assert totals["codec_ms_p50"] >= 0 and summary["last_rank_spread"]["step"] == 12
    assert totals["calibration_steps"] == 4 and totals["timeline_steps"] == 2
    assert summary["backward_timeline"]["steps"] == timeline_steps
    # Every calibration step's averaging after backward (resnet_tiny: one chunk of every gradient byte), and the
    # two timeline steps' float16 and bfloat16 probes of as many elements: each one kept, once.
    after = summary["after_backward_all_reduces"]
    kept = sorted(zip(after["dtype"], after["bytes"], strict=True))
    probes = [("bfloat16", 2 * params)] * 2 + [("float16", 2 * params)] * 2
    assert kept == probes + [("float32", 4 * params)] * 6, kept
    assert all(ms > 0 for ms in after["ms"])
    overhead = summary["overhead_s"]
    assert overhead["gathers"] == 2 and overhead["calibration"] > 0 and overhead["between_steps"] > 0
    # Calibration is 4 of the run's steps, so it is a part of all steps' time, never all of it.
    assert overhead["calibration"] < overhead["all_steps"]
    # Net of the exposure those steps would have paid as measured steps: a part of the all_reduce's time, or all of it.
    assert 0.0 <= overhead["calibration_beyond_exposed"] <= overhead["calibration"]
    assert all(
        key.startswith(("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_", "OMP_", "GOMP_", "WORLD", "LOCAL", "MASTER"))
        or key.startswith("SLURM")
        for key in summary["env"]
    )
    assert summary["env"]["NCCL_NVLS_ENABLE"] == "0" and "OMP_" in summary["env_prefixes"]
    # The table on stdout: one row per bucket, the interval and the verdict in words.
    assert "# Gradient communication: 2 ranks, gloo" in proc.stdout
    assert "95 % interval" in proc.stdout and totals["exposure_verdict"] in proc.stdout
    assert (
        "# harness overhead: calibration" in proc.stdout
        and "all_reduce of 6 of 14 steps, run after backward" in proc.stdout
        and " ms of exposed communication a measured step pays, " in proc.stdout
    )
    # hparams live in the run's own event file (the HParams plugin's session data).
    assert "_hparams_/session_start_info" in acc.summary_metadata
    # The last measured step's timeline: a PNG beside summary.json, and the same image in the Images tab.
    png = (run_dir / TIMELINE_FILE).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    (image,) = acc.Images(tags.TIMELINE_IMAGE)
    assert image.step == measured_steps[-1] and image.encoded_image_string == png
    assert image.width > 1000 and image.height > 200


@pytest.mark.slow
def test_fp16_hook_halves_bytes_with_accumulation(tmp_path):
    proc = run_train(
        [
            "--model", "gpt_tiny", "--max-steps", "5", "--comm-hook", "fp16", "--accumulate-grad-batches", "2",
            "--calibration-steps", "0", "--cpu-threads", "2",
        ],
        tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = load_events(only_run_dir(tmp_path))
    params = trainable_parameters(get_model_spec("gpt_tiny").build())
    # Hooks fire only on the micro-batch that steps the optimizer: one point per optimizer step after warm-up.
    assert [e.value for e in acc.Scalars(tags.BYTES)] == [2 * params] * 3
    # The cast to fp16 and the copy back are the hook's own compute, timed apart from the collective.
    assert all(e.value > 0 for e in acc.Scalars(tags.CODEC_MS))
    # --cpu-threads 2 gives every rank 2 threads, whatever the cores (2 ranks on 2 cores would get 1 each).
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert [rank["intra_op_threads"] for rank in summary["ranks"]] == [2, 2]
    assert summary["settings"]["cpu_threads"] == 2
    # The OpenMP note: only where a rank has several threads and their teams may spin.
    threads = summary["ranks"][0]["intra_op_threads"]
    noted = "note: the fp16 hook on CPU ranks here (" in proc.stdout
    assert noted == teams_spin(threads, os.environ), proc.stdout


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


@pytest.mark.slow
def test_a_run_too_short_for_the_timeline_steps_keeps_its_compute_only_samples(tmp_path):
    # Warm-up 0, 1; the calibration block 2, 3; the timeline steps would be 4, 5, which would leave no measured
    # step: they are left out, and 4, 5 are measured against the block's samples.
    args = ["--model", "resnet_tiny", "--devices", "1", "--max-steps", "6", "--calibration-steps", "2"]
    proc = run_train([*args, "--no-progress-bar"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    note = "# a run of 6 steps leaves none after warm-up and calibration: the backward timeline's steps are left out"
    assert note in proc.stdout
    assert "calibration 0.000 s (2 of 6 steps, which at world size 1 have no gradients to average)" in proc.stdout
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    totals = summary["totals"]
    assert (totals["steps_measured"], totals["calibration_steps"], totals["timeline_steps"]) == (2, 2, 0)
    assert summary["calibration_sample_steps"] == [2, 3] and summary["backward_timeline"] is None
    assert totals["compute_only_ms"] > 0 and isinstance(totals["exposed_ms_p50"], float)  # measured, not null


def test_true_half_precision_trains_an_image_model_on_synthetic_images(tmp_path):
    """bf16-true converts the model's weights to bf16; the synthetic images, made in float32, must follow them
    (before, the first convolution failed on the dtype mismatch, in either loop)."""
    args = ["--model", "resnet_tiny", "--image-size", "32", "--batch-size", "2", "--max-steps", "8"]
    proc = run_train([*args, "--precision", "bf16-true", "--no-progress-bar"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((only_run_dir(tmp_path) / "summary.json").read_text())
    assert summary["completed"] is True and summary["settings"]["precision"] == "bf16-true"
    assert summary["totals"]["steps_measured"] > 0
