"""Builds and runs the training loop for a resolved TrainConfig: DDP, TensorBoard, the timing callback.

The loop is Lightning Fabric's (harness/train/fabric_loop.py, the default) or Lightning's Trainer (--loop trainer);
both call the same callbacks. With --harness off the loop, model and data are the same but nothing of the harness
is attached (no timing callback, hook, logger, events or summary.json): Lightning alone, against which the
harness's cost is measured.
Either way WindowClock reads the wall clock and the CPU clocks at the start of two steps, for the time per step.

One rank's whole life (process group, signals, failures, exit code) is harness.train.rank; train.py starts
the ranks.
"""

from __future__ import annotations

import datetime
import os
import re
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from harness.common import dist_env
from harness.common.failures import say
from harness.common.thread_cpu import WAITS_KEY, Clocks, describe, describe_waits, read_clocks, window_times
from harness.train.callback import CommTimingCallback
from harness.train.config import RUN_VERSION_ENV, TrainConfig, claim_run_version, run_version
from harness.train.ddp_strategy import SameStreamDDPStrategy, SameStreamFabricDDPStrategy
from harness.train.fabric_loop import FabricLoop
from harness.train.module import CommBenchModule, make_dataloader
from harness.train.progress_bar import StepProgressBar
from harness.train.quiet import silence_third_party_noise
from harness.train.tb_writer import use_fast_event_checksums
from models import get_model_spec

# How often the TensorBoard writer's own thread flushes events to disk (SummaryWriter's default is 120 s): a
# run that is killed outright loses at most this much.
EVENTS_FLUSH_S = 5
# NCCL's watchdog enforces the process group's timeout (--timeout) on every collective; in this mode it
# aborts the process when one times out or a peer fails (torch's default, set in case the environment
# disabled it).
NCCL_ERROR_HANDLING_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}


def prepare_process_env(cfg: TrainConfig) -> None:
    """Environment that must be in place before the process group exists (and for child processes)."""
    dist_env.apply_safe_nccl_env()
    if cfg.use_gpu:
        for key, value in NCCL_ERROR_HANDLING_ENV.items():
            if os.environ.get(key, "0") == "0":
                os.environ[key] = value
    elif cfg.launcher == "none":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if cfg.cpu_threads:  # --cpu-threads: the user's count, on the CPU and beside a GPU alike
        torch.set_num_threads(cfg.cpu_threads)
    elif not cfg.use_gpu:
        # One process per core share on CPU: more threads than cores makes ranks starve each other. The cores
        # are those this process may run on (a cpuset, taskset), not all the machine's: simulated hosts pinned
        # to shares of one machine (tests/two_host_train.py) would otherwise each run too many.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        torch.set_num_threads(max(1, cores // max(1, cfg.devices)))
    if cfg.harness == "off":  # nothing is written: no run directory (drop the one train.py claimed, if empty)
        _drop_empty_run_dir(cfg)
    elif dist_env.detect().rank == 0:  # the one rank that writes into the run's directory claims it
        claim_run_version(Path(cfg.logdir) / cfg.run_name)
    else:
        run_version()


def _drop_empty_run_dir(cfg: TrainConfig) -> None:
    """Rank 0 of a --harness off run removes the version directory train.py claimed before starting the ranks
    (and the run name's, if that leaves it empty). rmdir removes empty directories only."""
    version = os.environ.get(RUN_VERSION_ENV)
    if dist_env.detect().rank != 0 or not version:
        return
    run_dir = Path(cfg.logdir) / cfg.run_name
    for path in (run_dir / version, run_dir):
        try:
            path.rmdir()
        except OSError:
            return


class WindowClock(pl.Callback):
    """Wall time and CPU time (main thread, whole process) per step over a window of steps: from the start of
    step `first` to the start of the last step (max_steps - 1), as bench.plain_ddp times its own loop. The
    clocks are read once at each end, in on_train_batch_start before the harness's work of that step (this
    callback comes before the timing callback), with the GPU drained there; nothing is done between.

    With `report`, the loop's name (--harness off), rank 0 prints window_line() at the end of training."""

    def __init__(self, first: int, max_steps: int, cuda: bool, report: str | None = None) -> None:
        self.first, self.last = first, max_steps - 1
        self.cuda = cuda
        self.report = report
        self._start: Clocks | None = None
        self._end: Clocks | None = None
        self._train_start = 0.0
        self.train_s = float("nan")
        self.steps = 0

    def _now(self, opening: bool = False) -> Clocks:
        if self.cuda:
            torch.cuda.synchronize()
        return read_clocks(opening)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train_start = time.perf_counter()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int):
        step = trainer.global_step
        if step == self.first and self._start is None and self.first < self.last:
            self._start = self._now(opening=True)
        elif step == self.last and self._end is None and self._start is not None:
            self._end = self._now()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_s = time.perf_counter() - self._train_start
        self.steps = trainer.global_step
        if self.report and trainer.is_global_zero:
            print(self.window_line(), flush=True)

    def result(self) -> dict[str, Any] | None:
        """The window's ms per step (wall, main-thread CPU, process CPU, each thread's CPU and the time each waited
        for a CPU), once both ends were read; else None."""
        if self._start is None or self._end is None:
            return None
        times = window_times(self._start, self._end, self.last - self.first)
        return {
            "first_step": self.first,
            "last_step": self.last,
            "wall_ms_per_step": times.wall_ms,
            "main_thread_cpu_ms_per_step": times.thread_ms,
            "process_cpu_ms_per_step": times.process_ms,
            "thread_cpu_ms_per_step": times.threads_ms,
            WAITS_KEY: times.threads_wait_ms,
        }

    def window_line(self) -> str:
        """The end line of a --harness off run (bench.vs_plain reads it with WINDOW_LINE)."""
        loop = f", {LOOP_NAMES[self.report]}" if self.report in LOOP_NAMES else ""
        head = f"# Lightning alone (--harness off{loop}): {self.steps} steps in {self.train_s:.1f} s"
        window = self.result()
        if window is None:
            return f"{head}; too few steps to time a window from step {self.first} (--window-start)"
        line = (
            f"{head}; steps {self.first} to {self.last}: {window['wall_ms_per_step']:.3f} ms/step, CPU "
            f"{window['main_thread_cpu_ms_per_step']:.3f} ms main thread, {window['process_cpu_ms_per_step']:.3f} "
            "ms process per step (rank 0); no timing hook, events or summary.json"
        )
        if threads := window["thread_cpu_ms_per_step"]:
            line += f"\n{THREADS_HEAD}{describe(threads, None)}"
        if (waits := window[WAITS_KEY]) is not None:  # the kernel kept them; "none" where none waited
            line += f"\n{WAITS_HEAD}{describe_waits(waits, None)}"
        return line


# --loop's names, in WindowClock's line.
LOOP_NAMES = {"fabric": "Fabric's loop", "trainer": "the Trainer's loop"}

# The line of each thread's CPU per step over the window (harness.common.thread_cpu.describe), after the window line;
# then the line of the time each waited for a CPU (describe_waits; absent where the kernel keeps none).
THREADS_HEAD = "# CPU ms per step by thread: "
WAITS_HEAD = "# ms per step each thread waited for a CPU: "
# What WindowClock.window_line() says, for bench.vs_plain: first, last, wall, main-thread CPU, process CPU.
WINDOW_LINE = re.compile(
    r"steps (\d+) to (\d+): ([\d.]+) ms/step, CPU ([\d.]+) ms main thread, ([\d.]+) ms process per step"
)


def build_trainer(
    cfg: TrainConfig, extra_callbacks: list[pl.Callback] | None = None
) -> tuple[pl.Trainer | FabricLoop, CommBenchModule, CommTimingCallback | None]:
    """The training loop (--loop: Fabric's, or Lightning's Trainer; either has `fit(module, loader)`), the module
    and the timing callback (None with --harness off); `extra_callbacks` run before the timing callback."""
    silence_third_party_noise()
    spec = get_model_spec(cfg.model)
    ddp_kwargs = {
        "gradient_as_bucket_view": cfg.gradient_as_bucket_view,
        "static_graph": cfg.static_graph,
    }
    if cfg.bucket_cap_mb is not None:
        ddp_kwargs["bucket_cap_mb"] = cfg.bucket_cap_mb
    strategy_kwargs = {
        "process_group_backend": "nccl" if cfg.use_gpu else "gloo",
        "timeout": datetime.timedelta(seconds=cfg.timeout_s),
        **ddp_kwargs,
    }
    harness_on = cfg.harness == "on"
    clock = WindowClock(cfg.window_start, cfg.max_steps, cuda=cfg.use_gpu, report=None if harness_on else cfg.loop)
    timing, logger = None, None
    if harness_on:
        samples_per_step = (
            spec.samples_per_batch(cfg.batch_size, cfg.seq_len) * cfg.accumulate_grad_batches * cfg.world_size
        )
        timing = CommTimingCallback(
            hook_name=cfg.comm_hook,
            samples_per_step=samples_per_step,
            sample_unit=spec.sample_unit,
            settings=cfg.to_dict(),
            powersgd_rank=cfg.powersgd_rank,
            bucket_cap_mb=cfg.bucket_cap_mb,
            calibration_steps=cfg.calibration_steps,
            calibration_every=cfg.calibration_every,
            gather_every=cfg.gather_every,
            log_every=cfg.log_every,
            clock=clock,
            resolve_thread=cfg.resolve_thread,
        )
        if not use_fast_event_checksums() and dist_env.detect().rank == 0:
            say(
                "train.py",
                "TensorBoard checksums its events in pure Python here, about 0.3 ms per KiB, holding the GIL the "
                "training loop needs; pip install google-crc32c (in requirements.txt) makes that 1000 times faster",
            )
        logger = TensorBoardLogger(
            save_dir=cfg.logdir,
            name=cfg.run_name,
            version=run_version(),
            default_hp_metric=False,
            flush_secs=EVENTS_FLUSH_S,
        )
    # The harness's bar, before the clock and the timing callback: it closes before their end lines. With
    # --harness off under the Trainer, Lightning's own bar instead (as a Lightning user has it).
    # (It does nothing as a step starts, where the clock reads its clocks.)
    own_bar = cfg.progress_bar and (harness_on or cfg.loop == "fabric")
    bar = [StepProgressBar(timing)] if own_bar else []
    callbacks = [*(extra_callbacks or []), *bar, clock, *([timing] if timing is not None else [])]
    module = CommBenchModule(spec, cfg)
    if cfg.loop == "fabric":
        return FabricLoop(cfg, SameStreamFabricDDPStrategy(**strategy_kwargs), callbacks, logger), module, timing
    strategy = SameStreamDDPStrategy(**strategy_kwargs)
    trainer = pl.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        num_nodes=cfg.num_nodes,
        strategy=strategy,
        precision=cfg.precision,
        max_steps=cfg.max_steps,
        max_epochs=-1,
        accumulate_grad_batches=cfg.accumulate_grad_batches,
        logger=logger or False,
        callbacks=callbacks,
        enable_progress_bar=cfg.progress_bar and not own_bar,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        benchmark=cfg.use_gpu,
        use_distributed_sampler=cfg.data_dir is not None,
    )
    _without_lightning_sigterm(trainer)
    return trainer, module, timing


def _without_lightning_sigterm(trainer: pl.Trainer) -> None:
    """Switch off Lightning's SIGTERM handling (2.6): its handler broadcasts from inside the signal handler,
    a collective issued at an arbitrary point that need not match the other ranks', and every training step
    begins with a broadcast of that flag, with `.item()` (a GPU sync each step on NCCL). Every rank here gets
    the signal from its own launcher and stops at a step boundary (harness.train.rank.TrainSignals)."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is not None and hasattr(connector, "register_signal_handlers"):
        connector.register_signal_handlers = lambda: None
    epoch_loop = trainer.fit_loop.epoch_loop
    if hasattr(epoch_loop, "_broadcast_sigterm_tensor"):
        epoch_loop._broadcast_sigterm_tensor = lambda: None


def run_training(cfg: TrainConfig, extra_callbacks: list[pl.Callback] | None = None) -> CommTimingCallback | None:
    """Train in this process, inside an existing world; returns the timing callback (its aggregate holds the
    run's measurements; None with --harness off). train.py goes through harness.train.rank, which adds signals
    and failure reports."""
    prepare_process_env(cfg)
    trainer, module, timing = build_trainer(cfg, extra_callbacks)
    trainer.fit(module, make_dataloader(cfg))
    return timing
