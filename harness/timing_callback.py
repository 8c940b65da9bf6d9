"""Lightning callback that attaches the timed hook, resolves each step's stamps, and logs them.

Per step, on rank 0: TensorBoard scalars under METRICS.md's names, a histogram of bucket times, and
samples/s and comm ms in the progress bar. At the end: the per-bucket table and summary.json.

Stamps of step k are resolved at the start of step k + 2 (and the rest at the end of training), so the
GPU has long finished them and nothing here waits on it in the steady state.
"""

from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from harness import run_summary
from harness.comm_hook import BucketTiming, TimedHookState, make_hook_state, register_timed_hook
from harness.metrics import busbw_gbps
from harness.step_stats import RunAggregate, StepStats, step_stats
from harness.tb_step_writer import write_step

RESOLVE_LAG_STEPS = 2


class CommTimingCallback(pl.Callback):
    """Times every bucketed gradient collective of a Lightning DDP run."""

    def __init__(
        self,
        hook_name: str,
        samples_per_step: float,
        sample_unit: str,
        settings: dict[str, Any],
        powersgd_rank: int = 1,
        bucket_cap_mb: float | None = None,
    ) -> None:
        self.hook_name = hook_name
        self.samples_per_step = samples_per_step  # all ranks, all micro-batches of one optimizer step
        self.sample_unit = sample_unit
        self.settings = settings
        self.powersgd_rank = powersgd_rank
        self.bucket_cap_mb = bucket_cap_mb
        self.state: TimedHookState | None = None
        self.aggregate: RunAggregate | None = None
        self.last_stats: StepStats | None = None
        self.world_size = 1
        self._current_step = -1
        self._writer = None
        self.finished = False

    # -- set-up -------------------------------------------------------------------------------------

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's DDPStrategy registers a hook passed to it only on CUDA; registering it here, once the
        # strategy has wrapped the model and before any backward, works on every device.
        ddp_model = trainer.strategy.model
        if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError(f"expected a DDP-wrapped model, got {type(ddp_model).__name__}")
        self.world_size = trainer.world_size
        self.state = make_hook_state(
            self.hook_name,
            ddp_model.module,
            use_cuda=pl_module.device.type == "cuda",
            powersgd_rank=self.powersgd_rank,
            max_buckets=_max_buckets(ddp_model.module, self.bucket_cap_mb),
        )
        register_timed_hook(ddp_model, self.state)
        self.aggregate = RunAggregate(world_size=self.world_size)
        if trainer.is_global_zero and trainer.logger is not None:
            self._writer = trainer.logger.experiment
            run_summary.add_custom_scalar_layout(self._writer)

    # -- per step -----------------------------------------------------------------------------------

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int):
        step = trainer.global_step
        if step == self._current_step:
            return  # a later micro-batch of the same optimizer step (gradient accumulation)
        self._current_step = step
        self.state.begin_step(step)
        self._resolve_ready(trainer, upto=step - RESOLVE_LAG_STEPS)

    def _resolve_ready(self, trainer: pl.Trainer, upto: int) -> None:
        for step in self.state.pending_steps():
            if step > upto:
                break
            next_start = self.state.start_stamp(step + 1)
            self._finish_step(trainer, step, *self.state.resolve_step(step, next_start))

    def _finish_step(self, trainer: pl.Trainer, step: int, step_ms: float, timings: list[BucketTiming]) -> None:
        stats = step_stats(step, step_ms, timings, self.samples_per_step, self.world_size)
        self.aggregate.add(stats, timings, self.state.bucket_layout)
        self.last_stats = stats
        if self._writer is not None:
            _log_step(self._writer, stats, timings, self.world_size)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, completed=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Keep what was measured: resolve the steps that finished and write a summary marked unfinished.
        if self.state is not None and not self.finished:
            self._finish(trainer, completed=False, reason=f"{type(exception).__name__}: {exception}")

    def _finish(self, trainer: pl.Trainer, completed: bool, reason: str = "") -> None:
        self.finished = True
        end = self.state.stamp_now()
        pending = self.state.pending_steps()
        last = pending[-1] if pending else None
        if not completed and last is not None:
            self.state.resolve_step(last, end)  # the interrupted step is incomplete: drop it
            pending = pending[:-1]
        for step in pending:
            next_start = end if step == last else self.state.start_stamp(step + 1)
            self._finish_step(trainer, step, *self.state.resolve_step(step, next_start))
        self.state.release_stamp(end)
        if trainer.is_global_zero:
            summary = run_summary.build_summary(
                self.aggregate,
                settings=self.settings,
                world_size=self.world_size,
                backend=dist.get_backend() if dist.is_initialized() else "none",
                sample_unit=self.sample_unit,
                completed=completed,
                reason=reason,
                ddp_logging=_ddp_logging(trainer),
            )
            log_dir = trainer.logger.log_dir if trainer.logger is not None else "."
            run_summary.write_summary(summary, log_dir)
            if completed:
                print(run_summary.format_table(summary), flush=True)
            if self._writer is not None:
                run_summary.log_hparams(trainer.logger, summary)
                self._writer.flush()

    # -- progress bar -------------------------------------------------------------------------------

    def progress_bar_metrics(self) -> dict[str, float | str]:
        """Plain floats for the progress bar: no tensors, so showing them never syncs the GPU."""
        stats = self.last_stats
        if stats is None:
            return {}
        return {
            f"{self.sample_unit}s/s": f"{stats.samples_per_s:.4g}",
            "comm_ms": f"{stats.comm_ms:.3g}",
            "step_ms": f"{stats.step_ms:.3g}",
        }


def _log_step(writer: Any, stats: StepStats, timings: list[BucketTiming], world_size: int) -> None:
    step = stats.step
    scalars = {
        "step/time_ms": stats.step_ms,
        "step/samples_per_s": stats.samples_per_s,
        "step/samples_per_s_per_device": stats.samples_per_s_per_device,
        "step/warmup": float(stats.warmup),
        "comm/bytes": stats.bytes,
        "comm/buckets": stats.buckets,
        "comm/time_ms": stats.comm_ms,
        "comm/algbw_gbps": stats.algbw_gbps,
        "comm/busbw_gbps": stats.busbw_gbps,
        "comm/max_bucket_ms": stats.max_bucket_ms,
        "comm/tail_ms": stats.tail_ms,
    }
    for t in timings:
        prefix = f"comm/bucket_{t.index:02d}"
        scalars[f"{prefix}/time_ms"] = t.time_ms
        scalars[f"{prefix}/bytes"] = t.bytes
        scalars[f"{prefix}/busbw_gbps"] = busbw_gbps("all_reduce", t.bytes, t.time_ms / 1e3, world_size)
        scalars[f"{prefix}/ready_to_done_ms"] = t.ready_to_done_ms
        if t.exec_ms is not None:
            scalars[f"{prefix}/exec_ms"] = t.exec_ms
    write_step(writer, step, scalars, {"comm/bucket_time_ms": [t.time_ms for t in timings]})


def _max_buckets(module: torch.nn.Module, bucket_cap_mb: float | None) -> int:
    """An upper bound on DDP's bucket count: every bucket but the last reaches the cap (the first 1 MiB)."""
    total = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    cap = (bucket_cap_mb if bucket_cap_mb is not None else 25.0) * 2**20
    return math.ceil(total / cap) + 2


def _ddp_logging(trainer: pl.Trainer) -> dict[str, Any]:
    """DDP's own measurements (sampled on iterations <= 10 and every 100th): an independent cross-check."""
    try:
        data = trainer.strategy.model._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return {}
    keys = (
        "comm_hook",
        "avg_forward_compute_time",
        "avg_backward_compute_time",
        "avg_backward_comm_time",
        "avg_backward_compute_comm_overlap_time",
        "bucket_sizes",
        "rebuilt_bucket_sizes",
        "backend_name",
    )
    return {key: data[key] for key in keys if key in data}
