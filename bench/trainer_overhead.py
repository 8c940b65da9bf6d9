"""Trainer overhead: the harness's training throughput against a plain hand-written DDP loop.

    python -m bench.trainer_overhead --model resnet50 --batch-size 128          # one GPU, bf16, channels_last

Same model, batch, precision, optimizer and DDP settings. Each round runs the plain loop for --steps
steps, then a full harness Trainer (timed hook, per-step TensorBoard logging, progress bar) for
--warmup-steps + --steps steps; both are timed by wall clock over their last --steps steps with the GPU
drained at both ends. Rounds alternate which goes first. The ratio is plain ms / harness ms per round,
so 1.0 means the harness costs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from bench.ab import interleave, summarize, time_block
from harness.local_launch import spawn_local
from harness.run_info import run_info
from harness.train_config import TrainConfig
from harness.trainer import prepare_process_env, run_training
from models import get_model_spec


class WallClockWindow(pl.Callback):
    """Wall-clock ms per step from the start of step `first_step` to the end of training, GPU drained."""

    def __init__(self, first_step: int, cuda: bool) -> None:
        self.first_step, self.cuda = first_step, cuda
        self.start = 0.0
        self.ms_per_step = float("nan")

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.first_step and self.start == 0.0:
            self._sync()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        self._sync()
        self.ms_per_step = (time.perf_counter() - self.start) * 1e3 / (trainer.global_step - self.first_step)


def plain_loop(args: argparse.Namespace, device: torch.device):
    """A hand-written DDP training step, as a user without the harness would write it."""
    spec = get_model_spec(args.model)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    memory_format = torch.channels_last if cuda and spec.kind == "image" else torch.contiguous_format
    model = spec.build(image_size=args.image_size).to(device, memory_format=memory_format)
    ddp = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    inputs, targets = spec.make_batch(args.batch_size, device, dist.get_rank(), image_size=args.image_size)
    batch = (inputs.contiguous(memory_format=memory_format), targets)

    def step() -> None:
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
        with autocast:
            loss = spec.loss(ddp, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def harness_round(args: argparse.Namespace, cuda: bool, logdir: str, round_index: int) -> float:
    cfg = TrainConfig(
        model=args.model,
        batch_size=args.batch_size,
        max_steps=args.warmup_steps + args.steps,
        accelerator="gpu" if cuda else "cpu",
        devices=dist.get_world_size(),
        precision="bf16-mixed" if cuda else "32-true",
        image_size=args.image_size,
        logdir=logdir,
        run_name=f"round{round_index}",
    ).resolve()
    window = WallClockWindow(args.warmup_steps, cuda)
    run_training(cfg, extra_callbacks=[window])
    return window.ms_per_step


def worker(args: argparse.Namespace) -> None:
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = cuda  # as the harness Trainer sets it on GPU
    step = plain_loop(args, device)
    time_block(step, args.warmup_steps, cuda)
    with tempfile.TemporaryDirectory() as logdir:
        rounds = iter(range(args.rounds))
        runners = {
            "plain": lambda: time_block(step, args.steps, cuda),
            "harness": lambda: harness_round(args, cuda, logdir, next(rounds)),
        }
        samples = interleave(runners, args.rounds)
    if dist.get_rank() == 0:
        for r, (plain_ms, harness_ms) in enumerate(zip(samples["plain"], samples["harness"], strict=True)):
            print(f"round {r}: plain {plain_ms:.2f} ms/step, harness {harness_ms:.2f} ms/step", flush=True)
        # harness_vs_plain ratio: harness ms / plain ms per round; throughput fraction = 1 / ratio.
        summary = summarize(samples, "plain")
        summary["harness_throughput_fraction_p50"] = 1.0 / summary["harness_vs_plain_ratio_p50"]
        record = {
            "bench": "trainer_overhead",
            "model": args.model,
            "batch_size": args.batch_size,
            "steps": args.steps,
            **summary,
            "run_info": run_info(),
        }
        print(json.dumps(record), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(record) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", help="append the result as a JSON line to this file")
    args = parser.parse_args()
    cfg_probe = TrainConfig(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1)
    prepare_process_env(cfg_probe)  # NVLS off, NCCL timing on, before any process group
    backend = "nccl" if args.device == "cuda" else "gloo"
    raise SystemExit(spawn_local(worker, 1, (args,), backend=backend))


if __name__ == "__main__":
    main()
