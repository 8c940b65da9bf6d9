"""Trainer overhead: the harness's training throughput against a plain hand-written DDP loop.

    python -m bench.trainer_overhead --model resnet50 --batch-size 128          # one GPU, bf16, channels_last

Same model, batch, precision, optimizer and DDP settings. Each round runs three variants, in rotating order:
- plain: the hand-written loop, --steps steps;
- lightning: Lightning alone with the harness's module and strategy (no hook, callback, logger or progress bar);
- harness: the full harness Trainer (timed hook, per-step TensorBoard logging, progress bar).
The Trainers run --warmup-steps + --steps steps. All are timed by wall clock over their last --steps steps
with the GPU drained at both ends. Ratios are variant ms / plain ms per round (1.0: it costs nothing), and
the throughput fraction is plain / harness.

Each variant's CPU time per step over the same window is reported too, of the main thread
(`time.thread_time`: the training loop, the callbacks, the forward) and of the whole process
(`time.process_time`: also autograd's backward thread, where the comm hook runs on the GPU, and the
TensorBoard writer's thread). A step is host-bound once the main thread's CPU time nears the wall time, so
the gap is the host headroom, and the harness's extra CPU per step is what it costs once that headroom is
gone (a busy host, a small batch). `--profile FILE` runs one more harness round, not counted, under
cProfile (main thread only) and writes its statistics to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import tempfile
import time

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from bench.ab import interleave, summarize, time_block
from bench.plain_ddp import build_loop
from harness.common.cli import OneLineParser, check_count, check_writable, run_cli
from harness.common.local_launch import spawn_local
from harness.common.metrics import percentile
from harness.common.run_info import run_info
from harness.train.config import TrainConfig
from harness.train.ddp_strategy import SameStreamDDPStrategy
from harness.train.module import CommBenchModule, make_dataloader
from harness.train.trainer import _without_lightning_sigterm, prepare_process_env, run_training
from models import get_model_spec


def cpu_now() -> tuple[float, float]:
    """(main thread, whole process) CPU seconds so far; call it on the main thread."""
    return time.thread_time(), time.process_time()


def cpu_ms_since(start: tuple[float, float], steps: int) -> tuple[float, float]:
    """(main thread, whole process) CPU ms per step since `start`."""
    thread_s, process_s = cpu_now()
    return (thread_s - start[0]) * 1e3 / steps, (process_s - start[1]) * 1e3 / steps


class WallClockWindow(pl.Callback):
    """Wall-clock ms per step from the start of step `first_step` to the end of training, GPU drained."""

    def __init__(self, first_step: int, cuda: bool) -> None:
        self.first_step, self.cuda = first_step, cuda
        self.start = 0.0
        self.cpu_start = (0.0, 0.0)
        self.ms_per_step = float("nan")
        self.cpu_ms_per_step = (float("nan"), float("nan"))

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.first_step and self.start == 0.0:
            self._sync()
            self.start = time.perf_counter()
            self.cpu_start = cpu_now()

    def on_train_end(self, trainer, pl_module) -> None:
        self._sync()
        steps = trainer.global_step - self.first_step
        self.ms_per_step = (time.perf_counter() - self.start) * 1e3 / steps
        self.cpu_ms_per_step = cpu_ms_since(self.cpu_start, steps)


def round_config(args: argparse.Namespace, cuda: bool, logdir: str, round_index: int) -> TrainConfig:
    return TrainConfig(
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


def lightning_round(args: argparse.Namespace, cuda: bool, logdir: str, round_index: int, cpu_ms: list) -> float:
    """Lightning alone: the harness's module, strategy and precision, without the timing callback, hook, logger
    or progress bar. Separates what Lightning's loop costs from what the harness adds to it."""
    cfg = round_config(args, cuda, logdir, round_index)
    window = WallClockWindow(args.warmup_steps, cuda)
    trainer = pl.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        strategy=SameStreamDDPStrategy(process_group_backend="nccl" if cuda else "gloo"),
        precision=cfg.precision,
        max_steps=cfg.max_steps,
        max_epochs=-1,
        logger=False,
        callbacks=[window],
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        benchmark=cuda,
        use_distributed_sampler=False,
    )
    _without_lightning_sigterm(trainer)  # as the harness does: no per-step broadcast of Lightning's flag
    trainer.fit(CommBenchModule(get_model_spec(cfg.model), cfg), make_dataloader(cfg))
    cpu_ms.append(window.cpu_ms_per_step)
    return window.ms_per_step


def harness_round(args: argparse.Namespace, cuda: bool, logdir: str, round_index: int, cpu_ms: list) -> float:
    """One harness Trainer run; returns wall ms per step over the window and appends CPU ms per step."""
    cfg = round_config(args, cuda, logdir, round_index)
    window = WallClockWindow(args.warmup_steps, cuda)
    run_training(cfg, extra_callbacks=[window])
    cpu_ms.append(window.cpu_ms_per_step)
    return window.ms_per_step


def profiled_harness_round(args: argparse.Namespace, cuda: bool, logdir: str) -> None:
    """One more harness round under cProfile, after the measured ones (profiling slows it down)."""
    with cProfile.Profile() as profile:
        harness_round(args, cuda, logdir, args.rounds, [])
    if dist.get_rank() == 0:
        profile.dump_stats(args.profile)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def timed_plain_block(step, steps: int, cuda: bool, cpu_ms: list) -> float:
    """`time_block` of the plain loop; appends its (main thread, process) CPU ms per step."""
    cpu_start = cpu_now()
    wall_ms = time_block(step, steps, cuda)
    cpu_ms.append(cpu_ms_since(cpu_start, steps))
    return wall_ms


def worker(args: argparse.Namespace) -> None:
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = cuda  # as the harness Trainer sets it on GPU
    step = build_loop(args.model, args.batch_size, args.image_size, device).step
    time_block(step, args.warmup_steps, cuda)
    cpu_ms: dict[str, list[tuple[float, float]]] = {"plain": [], "lightning": [], "harness": []}
    with tempfile.TemporaryDirectory() as logdir:
        lightning_rounds, harness_rounds = iter(range(args.rounds)), iter(range(args.rounds))
        runners = {
            "plain": lambda: timed_plain_block(step, args.steps, cuda, cpu_ms["plain"]),
            "lightning": lambda: lightning_round(args, cuda, logdir, next(lightning_rounds), cpu_ms["lightning"]),
            "harness": lambda: harness_round(args, cuda, logdir, next(harness_rounds), cpu_ms["harness"]),
        }
        samples = interleave(runners, args.rounds)
        if args.profile:
            profiled_harness_round(args, cuda, logdir)
    if dist.get_rank() == 0:
        for r in range(args.rounds):
            cells = []
            for name in samples:
                main_ms, process_ms = cpu_ms[name][r]
                cells.append(f"{name} {samples[name][r]:.2f} ms/step (CPU main {main_ms:.2f}, all {process_ms:.2f})")
            print(f"round {r}: " + ", ".join(cells), flush=True)
        # harness_vs_plain ratio: harness ms / plain ms per round; throughput fraction = 1 / ratio.
        summary = summarize(samples, "plain")
        summary["harness_throughput_fraction_p50"] = 1.0 / summary["harness_vs_plain_ratio_p50"]
        for name, values in cpu_ms.items():
            summary[f"{name}_main_thread_cpu_ms_per_step_p50"] = percentile([v[0] for v in values], 50)
            summary[f"{name}_process_cpu_ms_per_step_p50"] = percentile([v[1] for v in values], 50)
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


PROG = "python -m bench.trainer_overhead"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", help="append the result as a JSON line to this file")
    parser.add_argument("--profile", help="profile one more harness round (not counted); statistics to this file")
    args = parser.parse_args()
    for option, value in (("--batch-size", args.batch_size), ("--image-size", args.image_size),
                          ("--steps", args.steps), ("--rounds", args.rounds)):  # fmt: skip
        check_count(option, value)
    check_count("--warmup-steps", args.warmup_steps, least=0)
    check_writable(args.out, "--out")
    check_writable(args.profile, "--profile")
    # harness off: the probe sets the environment and claims no run directory (it has no run name)
    cfg_probe = TrainConfig(accelerator="gpu" if args.device == "cuda" else "cpu", devices=1, harness="off")
    prepare_process_env(cfg_probe)  # NVLS off, NCCL timing on, before any process group
    backend = "nccl" if args.device == "cuda" else "gloo"
    raise SystemExit(spawn_local(worker, 1, (args,), backend=backend))


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
