"""A hand-written DDP training loop, timed by wall clock: the baseline that train.py is compared against.

    torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp --model resnet50 --batch-size 128 --steps 300
    torchrun --standalone --nproc-per-node 2 -m bench.plain_ddp --model resnet18 --batch-size 4 --image-size 64
    torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp --comm-hook allreduce   # torch's own Python hook
    torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp --comm-hook cpp_allreduce   # its C++ twin
    torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp --gradient-as-bucket-view   # as train.py's gradients

What a user without the harness would write: the same registry model, synthetic batch on the device, SGD
with momentum, DDP with its defaults, bf16 autocast and channels_last on the GPU (fp32 on the CPU),
cudnn.benchmark on the GPU. With --comm-hook allreduce, torch's own `allreduce_hook` (untimed Python, the same
sum DDP's built-in path runs) replaces DDP's built-in all_reduce: what any Python comm hook costs, the harness's
timed one included, before it times anything. With --comm-hook cpp_allreduce, torch's C++ ALLREDUCE hook
(`_register_builtin_comm_hook`) does the same with no Python: DDP takes its comm-hook path (it copies each gradient
into its bucket instead of scaling it there), so the two hooks' difference is the Python call on the autograd thread.
With --gradient-as-bucket-view the gradients are DDP's bucket views, zeroed in place as train.py zeroes them
(harness/train/zero_grads.py): no copy into or out of a bucket.
Rank 0 prints one JSON line: wall ms per step from the start of step --window-start to the start of the last step
(the device drained at both ends), and the CPU ms per step of the main thread, of the whole process and of each
thread (harness.common.thread_cpu) over the same window.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.common.cli import OneLineParser, check_count, check_torchrun, run_cli
from harness.common.dist_env import apply_safe_nccl_env
from harness.common.thread_cpu import WAITS_KEY, read_clocks, window_times
from harness.train.zero_grads import GradientZeroing
from models import get_model_spec

# --comm-hook: DDP's built-in all_reduce (C++, no hook), torch's own Python allreduce_hook, or torch's C++
# ALLREDUCE comm hook.
COMM_HOOKS = ("builtin", "allreduce", "cpp_allreduce")


@dataclass
class PlainLoop:
    """A hand-written DDP training step for one registry model: the parts, for benches that time them apart."""

    ddp: DDP
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]], torch.Tensor]
    batch: tuple[torch.Tensor, torch.Tensor]
    cuda: bool

    def __post_init__(self) -> None:
        self.zero_gradients = GradientZeroing(self.optimizer, in_place=self.ddp.gradient_as_bucket_view)

    def forward(self) -> torch.Tensor:
        """The loss of the synthetic batch (bf16 autocast on the GPU)."""
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if self.cuda else contextlib.nullcontext()
        with autocast:
            return self.loss_fn(self.ddp, self.batch)

    def optimizer_step(self) -> None:
        self.optimizer.step()
        self.zero_gradients()  # views stay views

    def step(self) -> None:
        """One whole training step."""
        self.forward().backward()
        self.optimizer_step()


def build_loop(
    model_name: str,
    batch_size: int,
    image_size: int | None,
    device: torch.device,
    comm_hook: str = "builtin",
    gradient_as_bucket_view: bool = False,
) -> PlainLoop:
    """The hand-written DDP loop for `model_name` (the process group must exist). With `gradient_as_bucket_view`
    the gradients are DDP's bucket views and are zeroed in place, so backward copies none into the buckets."""
    spec = get_model_spec(model_name)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    memory_format = torch.channels_last if cuda and spec.kind == "image" else torch.contiguous_format
    model = spec.build(image_size=image_size).to(device, memory_format=memory_format)
    ddp = DDP(model, device_ids=[device.index] if cuda else None, gradient_as_bucket_view=gradient_as_bucket_view)
    if comm_hook == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif comm_hook == "cpp_allreduce":
        ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    inputs, targets = spec.make_batch(batch_size, device, dist.get_rank(), image_size=image_size)
    batch = (inputs.contiguous(memory_format=memory_format), targets)
    return PlainLoop(ddp, opt, spec.loss, batch, cuda)


def check_model(model_name: str, batch_size: int, image_size: int | None) -> None:
    """A UsageError for what build_loop would refuse in every rank, after the process group: an unknown model, a
    batch below 1, an image size the model cannot take."""
    check_count("--batch-size", batch_size)
    check_count("--image-size", image_size)
    spec = get_model_spec(model_name)  # a UsageError listing the names
    if spec.kind == "image" and image_size is not None:
        spec.resolve_image_size(image_size)


def start_rank() -> torch.device:
    """This torchrun rank's device (its local GPU, else the CPU) with cudnn.benchmark on the GPU, and its process
    group (NCCL, else gloo), with NVLink multicast off as train.py runs."""
    apply_safe_nccl_env()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = cuda
    dist.init_process_group("nccl" if cuda else "gloo")
    return device


def timed_run(step: Callable[[], None], steps: int, window_start: int, cuda: bool) -> dict[str, Any]:
    """Run `steps` steps; wall and CPU ms per step from the start of step `window_start` to the start of the
    last step, the device drained at both ends."""
    last = steps - 1
    for i in range(steps):
        if i in (window_start, last):
            if cuda:
                torch.cuda.synchronize()
            now = read_clocks(opening=i == window_start)
            if i == window_start:
                start = now
            else:
                times = window_times(start, now, last - window_start)
                result = {
                    "ms_per_step": times.wall_ms,
                    "main_thread_cpu_ms_per_step": times.thread_ms,
                    "process_cpu_ms_per_step": times.process_ms,
                    "thread_cpu_ms_per_step": times.threads_ms,
                    WAITS_KEY: times.threads_wait_ms,
                }
        step()
    return result


PROG = "python -m bench.plain_ddp"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window-start", type=int, default=50)
    parser.add_argument("--comm-hook", choices=COMM_HOOKS, default="builtin")
    parser.add_argument(
        "--gradient-as-bucket-view", action="store_true", help="gradients alias DDP's buckets, zeroed in place"
    )
    args = parser.parse_args()
    if not 0 <= args.window_start < args.steps - 1:
        parser.error("--window-start must be at least 0 and below --steps - 1")
    check_model(args.model, args.batch_size, args.image_size)
    check_torchrun("torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp")
    device = start_rank()
    try:
        step = build_loop(
            args.model, args.batch_size, args.image_size, device, args.comm_hook, args.gradient_as_bucket_view
        ).step
        result = timed_run(step, args.steps, args.window_start, device.type == "cuda")
        if dist.get_rank() == 0:
            print(json.dumps({"plain_ddp": result, "world_size": dist.get_world_size()}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
