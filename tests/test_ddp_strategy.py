"""DDP built by train.py accumulates gradients on the training stream, as plain DDP does (GPU only).

Lightning's own DDPStrategy (the Trainer's and Fabric's) builds DDP on a side stream, so every parameter's gradient
is accumulated there (harness.train.ddp_strategy); torch 2.10 and later say so with a warning from the backward
pass. The test runs a real train.py on the GPU, with either loop, and looks for that warning; the probe builds DDP
on a side stream as Lightning does, to show the warning is there to be seen on this torch.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
STREAM_MISMATCH = "AccumulateGrad node's stream does not match"

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@functools.cache  # once per process: torch gives the warning once, so a second probe would see none
def _side_stream_ddp_warns() -> bool:
    """DDP built inside torch.cuda.stream(side stream), then one backward on the default stream."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    store = dist.HashStore()
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 1)).cuda()
        with torch.cuda.stream(torch.cuda.Stream()):
            ddp = DistributedDataParallel(model, device_ids=[0])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ddp(torch.randn(8, 64, device="cuda")).sum().backward()
            torch.cuda.synchronize()
        return any(STREAM_MISMATCH in str(w.message) for w in caught)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("loop", ["fabric", "trainer"])
def test_train_py_accumulates_gradients_on_the_training_stream(tmp_path, loop):
    if not _side_stream_ddp_warns():
        pytest.skip("this torch does not warn of a stream mismatch (it came in 2.10): nothing to see it by")
    env = {**os.environ, "PYTHONWARNINGS": "always"}
    args = ["--model", "resnet_tiny", "--devices", "1", "--max-steps", "8", "--batch-size", "8", "--loop", loop]
    run = subprocess.run(
        [sys.executable, "train.py", *args, "--logdir", str(tmp_path), "--no-progress-bar"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert STREAM_MISMATCH not in run.stderr + run.stdout
