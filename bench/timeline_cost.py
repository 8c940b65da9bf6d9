"""What recording the backward timeline costs a step: forward + backward with and without the gradient-ready hooks
of harness.train.grad_ready, alternating step by step in one DDP process.

    torchrun --standalone --nproc-per-node 1 -m bench.timeline_cost --model resnet50 --batch-size 128 --steps 120
    torchrun --standalone --nproc-per-node 1 -m bench.timeline_cost --model resnet_tiny --batch-size 8

Why it matters: a calibration step's forward + backward is the compute-only reference that exposed communication is
measured against. If the timeline's stamps (one CUDA event or clock read per parameter, inside backward) made
that reference slower, every measured step would show negative exposed time. The timeline therefore has steps of
its own (calibration.py); this bench measures how large the bias would have been.

The loop is bench.plain_ddp's (the same model, batch, optimizer and autocast) with DDP's built-in all_reduce.
Steps alternate between recorded (hooks registered before the step, removed after backward, as the callback does)
and not, after --warmup steps. Each step's forward + backward is timed with the harness's own StepStamps (CUDA
events on the GPU, the monotonic clock on the CPU), the device drained once per step. Rank 0 prints one JSON line:
the median forward + backward of each kind, their difference, and the difference's 95 % interval from a bootstrap
over the steps.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.distributed as dist

from bench.plain_ddp import build_loop, check_model, start_rank
from harness.common.cli import OneLineParser, check_torchrun, run_cli
from harness.train.grad_ready import GradReadyRecorder
from harness.train.stamps import StepStamps


def measure(args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    loop = build_loop(args.model, args.batch_size, args.image_size, device)
    names = {id(p): name for name, p in loop.ddp.module.named_parameters()}
    cuda = device.type == "cuda"
    stamps = StepStamps(cuda)
    recorder = GradReadyRecorder(loop.ddp.module, names, stamps)
    times: dict[bool, list[float]] = {False: [], True: []}
    for step in range(args.warmup + args.steps):
        recorded = step % 2 == 1
        if recorded:
            recorder.begin(step)  # before the clock starts, as the callback registers them
        start = stamps.now()
        if recorded:
            recorder.forward_start()
        loss = loop.forward()
        if recorded:
            recorder.backward_start()
        loss.backward()
        end = stamps.now()
        if recorded:
            recorder.end_backward()
        loop.optimizer_step()
        elapsed = stamps.elapsed_ms(start, end)
        stamps.release(start)
        stamps.release(end)
        recorder.resolve(step, wait=True)
        if step >= args.warmup:
            times[recorded].append(elapsed)
    without, with_ = np.array(times[False]), np.array(times[True])
    rng = np.random.default_rng(0)
    draws = [
        np.median(rng.choice(with_, with_.size)) - np.median(rng.choice(without, without.size)) for _ in range(2000)
    ]
    return {
        "params": len(recorder.params),
        "steps_each": int(min(with_.size, without.size)),
        "fwd_bwd_ms_without": float(np.median(without)),
        "fwd_bwd_ms_with": float(np.median(with_)),
        "cost_ms": float(np.median(with_) - np.median(without)),
        "cost_ms_ci95": [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))],
        "timeline_samples": len(recorder.samples),
    }


PROG = "python -m bench.timeline_cost"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--steps", type=int, default=120, help="measured steps, half of them recorded")
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    if args.steps < 4 or args.warmup < 2:
        parser.error("--steps must be at least 4 and --warmup at least 2 (DDP rebuilds its buckets after step 0)")
    check_model(args.model, args.batch_size, args.image_size)
    check_torchrun("torchrun --standalone --nproc-per-node 1 -m bench.timeline_cost")
    device = start_rank()
    try:
        result = measure(args, device)
        if dist.get_rank() == 0:
            print(json.dumps({"timeline_cost": result, "model": args.model, "batch_size": args.batch_size}), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
