"""bench.hook_overhead's fp16 split (its codec-stamp change) and comm-hook path split, each a real run of its variants
on 2 gloo ranks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from bench.hook_overhead import change_codec_stamps
from harness.train.stamps import StepStamps
from tests.train_runs import REPO


@pytest.mark.parametrize("change", ["done_lane", "none"])
def test_a_codec_stamp_change_leaves_the_done_stamps_alone(change):
    stamps = StepStamps(use_cuda=False)
    change_codec_stamps(stamps, change)
    assert isinstance(stamps.callback_now(), int)  # a collective's done stamp: the host's clock, as before
    codec = stamps.callback_now(codec_of_bucket=3)
    assert (codec is None) == (change == "none")


def test_an_unknown_codec_stamp_change_is_refused():
    with pytest.raises(ValueError, match="no such codec stamp change"):
        change_codec_stamps(StepStamps(use_cuda=False), "elsewhere")


def run_variants(variants: list[str]) -> dict:
    """bench.hook_overhead's record for `variants` on 2 gloo ranks of resnet_tiny, two rounds of two steps each."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.hook_overhead", "--device", "cpu", "--nproc", "2", "--model", "resnet_tiny",
         "--batch-size", "2", "--image-size", "32", "--blocks", "2", "--steps-per-block", "2", "--warmup-steps", "1",
         "--variants", ",".join(variants)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in variants:
        assert len(record["round_ms_per_step"][name]) == 2
    return record


def test_the_fp16_split_runs_on_two_gloo_ranks_and_pairs_its_rounds():
    variants = ["torch_fp16", "timed_fp16", "timed_fp16_no_codec_stamp"]
    record = run_variants(variants)
    for name in variants:
        assert record[f"{name}_hook_host_ms_per_step_p50"] > 0  # each hook ran, timed by the same wrapper
    assert record["timed_buckets"] >= 1
    for key in ("timed_fp16_minus_torch_fp16_ms", "timed_fp16_minus_timed_fp16_no_codec_stamp_ms"):
        assert key in record


def test_the_comm_hook_path_split_runs_on_two_gloo_ranks_and_pairs_its_rounds():
    """plain, torch's C++ hook and torch's Python hook: DDP's comm-hook path apart from the Python call."""
    record = run_variants(["plain", "cpp_hook", "torch_hook"])
    assert record["torch_hook_hook_host_ms_per_step_p50"] > 0
    assert "cpp_hook_hook_host_ms_per_step_p50" not in record  # C++ throughout: no Python call to time
    for key in ("cpp_hook_minus_plain_ms", "torch_hook_minus_cpp_hook_ms"):
        assert key in record


def test_device_cuda_is_refused_before_any_worker_starts_where_a_process_would_have_no_gpu():
    """Each worker failed on its own, a traceback apiece (no GPU here), or raced for too few GPUs."""
    nproc = torch.cuda.device_count() + 1
    proc = subprocess.run(
        [sys.executable, "-m", "bench.hook_overhead", "--device", "cuda", "--nproc", str(nproc)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    says = (
        f"--device cuda: --nproc {nproc} needs a GPU per process; this host has {nproc - 1}"
        if torch.cuda.is_available()
        else "--device cuda: torch sees no CUDA GPU here; use --device cpu"
    )
    assert proc.returncode == 2 and proc.stderr == f"python -m bench.hook_overhead: error: {says}\n", proc.stderr
