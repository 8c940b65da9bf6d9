"""Why a peak-memory comparison of comm hooks needs a pause after each step (tests/test_comm_hook.py).

    python -m bench.hook_peak_memory --runs 6

Runs torch's own `fp16_compress_hook` on one GPU (NCCL, world size 1) for six steps of the memory test's model,
`--runs` times back to back and `--runs` times with a pause after each step, and prints each run's peak allocated
MiB. NCCL's process group keeps a collective's tensors until its watchdog thread sees the collective done, so
without the pause each run's peak depends on when that thread woke; with it, the peak is what the hook holds.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.common.dist_env import apply_safe_nccl_env


def peak_mib(device: torch.device, pause_s: float, steps: int = 6) -> float:
    """Peak allocated MiB over `steps` steps of torch's fp16 hook, pausing `pause_s` after each (0: none)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)], torch.nn.Linear(2048, 10))
    ddp = DDP(model.to(device), device_ids=[device.index], bucket_cap_mb=25)
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    x = torch.randn(64, 2048, device=device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for _ in range(steps):
        ddp(x).square().mean().backward()
        if pause_s:
            torch.cuda.synchronize()
            time.sleep(pause_s)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    del ddp, model
    torch.cuda.empty_cache()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="runs of each kind")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds after each step in the paused runs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.exit(2, "hook_peak_memory: needs a CUDA GPU\n")
    if args.runs < 1 or args.pause <= 0:
        parser.exit(2, "hook_peak_memory: --runs must be ≥ 1 and --pause > 0\n")
    apply_safe_nccl_env()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    device = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    try:
        print("back to back, MiB:", [round(peak_mib(device, 0.0), 1) for _ in range(args.runs)])
        print(f"pause {args.pause} s, MiB:", [round(peak_mib(device, args.pause), 1) for _ in range(args.runs)])
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
