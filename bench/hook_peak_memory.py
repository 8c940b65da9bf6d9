"""Peak GPU memory of a comm hook over a few steps, and why comparing hooks needs a pause after each step.

    python -m bench.hook_peak_memory --runs 6

The measurement (`peak_mib`) is the one tests/test_comm_hook.py holds the timed fp16/bf16 hooks to against torch's
own. Run as a script, it measures torch's own `fp16_compress_hook` on one GPU (NCCL, world size 1), `--runs` times
back to back and `--runs` times with a pause after each step, and prints each run's peak allocated MiB. NCCL's
process group keeps a collective's tensors until its watchdog thread sees the collective done, so without the pause
a run's peak depends on when that thread woke; with it, the peak is what the hook holds.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.common.cli import OneLineParser, UsageError, run_cli
from harness.common.dist_env import apply_safe_nccl_env

# Called with each step's index, before its forward and after its backward: the training loop's per-step work.
StepCallbacks = tuple[Callable[[int], None], Callable[[int], None]]


def peak_mib(
    device: torch.device, register: Callable[[DDP], StepCallbacks | None], pause_s: float, steps: int = 6
) -> float:
    """Peak allocated MiB above the start over `steps` steps of an MLP (eight 2048×2048 layers and a 2048→10 one, 25
    MiB buckets) whose DDP `register` gives a hook, pausing `pause_s` after each step (0: none). Before it starts,
    the GPU is drained and the process group given a pause too, so an earlier run's tensors are not counted."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)], torch.nn.Linear(2048, 10))
    ddp = DDP(model.to(device), device_ids=[device.index], bucket_cap_mb=25)
    callbacks = register(ddp)
    x = torch.randn(64, 2048, device=device)
    torch.cuda.synchronize()
    time.sleep(max(pause_s, 0.3))  # the watchdog's turn for what came before
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    for step in range(steps):
        if callbacks:
            callbacks[0](step)
        ddp(x).square().mean().backward()
        if callbacks:
            callbacks[1](step)
        if pause_s:
            torch.cuda.synchronize()
            time.sleep(pause_s)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    del ddp, model, callbacks
    torch.cuda.empty_cache()
    return peak


def torch_fp16_hook(ddp: DDP) -> None:
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)


PROG = "python -m bench.hook_peak_memory"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=6, help="runs of each kind")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds after each step in the paused runs")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise UsageError("needs a CUDA GPU")
    if args.runs < 1 or args.pause <= 0:
        raise UsageError("--runs must be ≥ 1 and --pause > 0")
    apply_safe_nccl_env()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as store_dir:
        store = dist.FileStore(str(Path(store_dir) / "store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
        try:
            back_to_back = [round(peak_mib(device, torch_fp16_hook, 0.0), 1) for _ in range(args.runs)]
            print("back to back, MiB:", back_to_back, flush=True)
            paused = [round(peak_mib(device, torch_fp16_hook, args.pause), 1) for _ in range(args.runs)]
            print(f"pause {args.pause} s, MiB:", paused, flush=True)
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
