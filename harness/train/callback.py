"""Lightning callback that attaches the timed hook, resolves each step's stamps, and logs them.

The first steps after warm-up measure the compute-only step (calibration.py). Per step, on rank 0: TensorBoard
scalars under METRICS.md's names, a histogram of bucket times, and samples/s, comm ms and exposed ms in
the progress bar. Every `gather_every` steps, every rank's times are gathered to log the skew across
ranks. At the end: the per-bucket table and summary.json.

Stamps of step k are resolved at the start of step k + 2 (and the rest at the end of training), so the
GPU has long finished them and nothing here waits on it in the steady state.

When the run stops early (a failed or timed-out collective, a dead peer, an interrupt), `on_exception` names
what was running (`activity()`: the phase, or the step and the gradient all_reduce in flight with its bucket
and size), keeps every finished step, and rank 0 writes summary.json with "completed": false and that
reason, and flushes the events. Rank 0 also rewrites a partial summary.json every SUMMARY_EVERY_S while
training, so a run killed outright (SIGKILL, NCCL's watchdog abort) still leaves one behind.
"""

from __future__ import annotations

import math
import time
import traceback
from collections import deque
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from harness.common.failures import Interrupted, failure_text, signal_name
from harness.common.metrics import busbw_gbps, percentile
from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB
from harness.train import summary as run_summary
from harness.train.calibration import Calibration, zero_gradients
from harness.train.hook import BucketTiming, ResolvedStep, TimedHookState, make_hook_state, register_timed_hook
from harness.train.rank_gather import RankGatherer, RankSpread
from harness.train.step_stats import RunAggregate, StepStats, step_stats
from harness.train.tb_writer import write_step

RESOLVE_LAG_STEPS = 2
SUMMARY_EVERY_S = 60.0  # rank 0 rewrites a partial summary.json this often while training (a few ms each)


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
        calibration_steps: int = 0,
        gather_every: int = 0,
    ) -> None:
        self.hook_name = hook_name
        self.samples_per_step = samples_per_step  # all ranks, all micro-batches of one optimizer step
        self.sample_unit = sample_unit
        self.settings = settings
        self.powersgd_rank = powersgd_rank
        self.bucket_cap_mb = bucket_cap_mb
        self.calibration = Calibration(calibration_steps)
        self.gather_every = gather_every  # 0: never
        self.state: TimedHookState | None = None
        self.aggregate: RunAggregate | None = None
        self.gatherer: RankGatherer | None = None
        self.last_stats: StepStats | None = None
        self.last_spread: RankSpread | None = None
        self.world_size = 1
        # Wall time the harness itself adds to the run (reported in summary.json under "overhead_s"), and the
        # time of all the run's steps that it is a share of.
        self.overhead_s = {"calibration": 0.0, "rank_gathers": 0.0, "all_steps": 0.0}
        self.gathers = 0
        # Each bucket's last measured times, for its p10/p50/p90 band; the layout is written once they exist.
        self._bucket_windows: dict[int, deque[float]] = {}
        self._layout_written = False
        self._current_step = -1
        self._writer = None
        self._trainer: pl.Trainer | None = None
        self._last_summary_s = time.monotonic()
        self._step_open = False  # between begin_step and the optimizer step's end
        self._final_summary_written = False
        self.finished = False
        # What is running, for the message when something fails (see activity()).
        self.phase = "rendezvous"
        self.ranks: list[dict[str, Any]] = []  # every rank's host and pid, when train_rank gathered them
        self.stop_reason = ""  # why the run stopped early, as on_exception found it
        self.signal_before_failure: int | None = None  # set by train_rank when a signal preceded an error
        self.summary_path: str | None = None
        self.buffer_bytes = 0  # what DDP broadcasts from rank 0 before every forward (BatchNorm statistics)

    # -- what is running ----------------------------------------------------------------------------

    def activity(self, err: BaseException | None = None) -> str:
        """What this rank is doing: the phase, or the step and the collective in flight (the gradient
        all_reduce of a bucket with its bytes and elements, or DDP's broadcast of the buffers), for a failure
        message. Reads the hook's records and the error's traceback; never waits."""
        if self.phase != "step":
            return self.phase
        text = f"step {self._current_step}"
        record = _stuck_record(self.state._records.get(self._current_step, [])) if self.state else None
        if record is not None:
            name = "all_reduce" if self.hook_name != "powersgd" else "PowerSGD all_reduces"
            return (
                f"{text}, gradient {name} of bucket {record.index} ({record.bytes:,} B, {record.numel:,} "
                f"{record.dtype} elements)"
            )
        if err is not None and _raised_in(err, DDP_BUFFER_SYNC):
            bytes_ = f"{self.buffer_bytes:,} B"
            return f"{text}, DDP's broadcast of the model's buffers from rank 0 ({bytes_}, before the forward)"
        if err is not None and _raised_in(err, ("backward",)):
            return f"{text}, backward"
        return text

    # -- set-up -------------------------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.phase = "DDP set-up (the broadcast of the initial weights from rank 0)"

    # -- set-up -------------------------------------------------------------------------------------

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's DDPStrategy registers a hook passed to it only on CUDA; registering it here, once the
        # strategy has wrapped the model and before any backward, works on every device.
        self.phase = "fit start (hook registration, the rank-gather group)"
        self._trainer = trainer
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
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in ddp_model.module.buffers())
        self.aggregate = RunAggregate(world_size=self.world_size)
        if 0 < trainer.max_steps <= self.calibration.first_step + self.calibration.steps:
            if trainer.is_global_zero:
                print(f"# {trainer.max_steps} steps leave none after warm-up and calibration: exposed time is off")
            self.calibration = Calibration(0)
        if self.gather_every > 0:
            self.gatherer = RankGatherer(self.world_size)
        if trainer.is_global_zero and trainer.logger is not None:
            self._writer = trainer.logger.experiment
        self.phase = "the first step (Lightning's barrier before training)"

    # -- per step -----------------------------------------------------------------------------------

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int):
        step = trainer.global_step
        if step == self._current_step:
            return  # a later micro-batch of the same optimizer step (gradient accumulation)
        self._current_step = step
        self.phase = "step"
        self._step_open = True
        self.state.begin_step(step)
        self.state.skip_communication = self.calibration.is_calibration_step(step)
        self._resolve_ready(upto=step - RESOLVE_LAG_STEPS)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Backward is over and DDP has waited for every bucket's collective: what lies between the step's
        # start and here, beyond the compute-only time, is exposed communication.
        self.state.mark_backward_end()
        if self.state.skip_communication:
            zero_gradients(pl_module.parameters())

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx: int):
        if trainer.global_step > self._current_step:  # the optimizer stepped: this step is whole
            self._step_open = False

    def _resolve_ready(self, upto: int, gather: bool = True) -> None:
        for step in self.state.pending_steps():
            if step > upto:
                break
            self._finish_step(self.state.resolve_step(step, self.state.start_stamp(step + 1)), gather)

    def _finish_step(self, resolved: ResolvedStep, gather: bool = True) -> None:
        calibrating = self.calibration.is_calibration_step(resolved.step)
        self.overhead_s["all_steps"] += resolved.step_ms / 1e3
        if calibrating:
            self.calibration.add(resolved.fwd_bwd_ms)
            self.overhead_s["calibration"] += resolved.step_ms / 1e3
            self.aggregate.compute_only_ms = self.calibration.compute_only_ms
        stats = step_stats(
            resolved, self.samples_per_step, self.world_size, self.calibration.compute_only_ms, calibrating
        )
        self.aggregate.add(stats, resolved.timings, self.state.bucket_layout)
        self.last_stats = stats
        spread = None
        if gather and self.gatherer is not None and stats.step % self.gather_every == 0:
            # Every rank resolves the same steps in the same order, so this collective lines up.
            start = time.perf_counter()
            phase, self.phase = self.phase, f"all_gather of every rank's times for step {stats.step} (rank gather)"
            spread = self.gatherer.gather(stats, [t.time_ms for t in resolved.timings])
            self.phase = phase
            self.overhead_s["rank_gathers"] += time.perf_counter() - start
            self.gathers += 1
            self.last_spread = spread
        measured = self._writer is not None and not (stats.warmup or calibrating)  # bands are rank 0's alone
        bands = self._bucket_bands(resolved.timings) if measured else {}
        if self._writer is not None:
            if bands and not self._layout_written:  # DDP's buckets are final once warm-up is over
                self._write_layout()
            _log_step(self._writer, stats, resolved.timings, self.world_size, spread, bands)
            if not self.finished and time.monotonic() - self._last_summary_s > SUMMARY_EVERY_S:
                self._last_summary_s = time.monotonic()
                reason = (
                    f"in progress at step {stats.step}: rank 0 rewrites this every {SUMMARY_EVERY_S:g} s until the "
                    "run ends; if it is the last one, the run was killed before it could report"
                )
                self._write_summary(self._trainer, completed=False, reason=reason, final=False)

    def _bucket_bands(self, timings: list[BucketTiming]) -> dict[int, tuple[float, float, float]]:
        """Each bucket's (p50, p10, p90) time over its last BUCKET_BAND_STEPS measured steps, this one included."""
        bands = {}
        for t in timings:
            window = self._bucket_windows.setdefault(t.index, deque(maxlen=run_summary.BUCKET_BAND_STEPS))
            window.append(t.time_ms)
            bands[t.index] = (percentile(window, 50), percentile(window, 10), percentile(window, 90))
        return bands

    def _write_layout(self) -> None:
        run_summary.add_custom_scalar_layout(self._writer, sorted(self._bucket_windows))
        self._layout_written = True

    # -- the end ------------------------------------------------------------------------------------

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.phase = "end of training (the last steps' rank gathers, the summary)"
        self._finish(trainer, completed=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Name what was running before anything is resolved, then keep what was measured: resolve the steps
        # that finished and write a summary marked unfinished.
        activity = self.activity(exception)
        self.stop_reason = stop_reason(exception, activity, trainer.global_rank, self.signal_before_failure)
        if self.state is None or self._final_summary_written:
            return
        try:
            if not self.finished:
                self._finish(trainer, completed=False, reason=self.stop_reason)
            elif trainer.is_global_zero:  # it failed while finishing: what was aggregated still counts
                self._write_summary(trainer, completed=False, reason=self.stop_reason)
        except Exception as err:  # reported, but the error that stopped the run stays the one raised
            print(f"rank {trainer.global_rank}: could not keep the partial results: {failure_text(err)}", flush=True)

    def _finish(self, trainer: pl.Trainer, completed: bool, reason: str = "") -> None:
        self.finished = True
        end = self.state.stamp_now()
        pending = self.state.pending_steps()
        # A step stopped midway is incomplete: dropped, after the step before it has used its start stamp.
        incomplete = pending.pop() if pending and self._step_open else None
        for step in pending:
            next_start = end if step == pending[-1] and incomplete is None else self.state.start_stamp(step + 1)
            # A peer may be gone after a failure: no cross-rank gathers then.
            self._finish_step(self.state.resolve_step(step, next_start), gather=completed)
        if incomplete is not None:
            self.state.resolve_step(incomplete, end)
        self.state.release_stamp(end)
        if trainer.is_global_zero:
            self._write_summary(trainer, completed, reason)

    def _write_summary(self, trainer: pl.Trainer, completed: bool, reason: str, final: bool = True) -> None:
        """summary.json in the run's directory (rank 0). The final one also prints the table (if the run
        completed), logs hparams and flushes the event file; a periodic one (final=False) only writes the file."""
        summary = run_summary.build_summary(
            self.aggregate,
            settings=self.settings,
            world_size=self.world_size,
            backend=dist.get_backend() if dist.is_initialized() else "none",
            sample_unit=self.sample_unit,
            completed=completed,
            reason=reason,
            ddp_logging=_ddp_logging(trainer),
            calibration_samples_ms=self.calibration.samples_ms,
            last_rank_spread=self.last_spread.__dict__ if self.last_spread else None,
            overhead_s={**self.overhead_s, "gathers": self.gathers},
        )
        if self.ranks:
            summary["ranks"] = self.ranks
        log_dir = trainer.logger.log_dir if trainer.logger is not None else "."
        self.summary_path = str(run_summary.write_summary(summary, log_dir))
        if not final:
            return
        if completed:
            print(run_summary.format_table(summary), flush=True)
        if self._writer is not None:
            if not self._layout_written:  # a run that ended before its first measured step
                self._write_layout()
            run_summary.log_hparams(trainer.logger, summary)
            self._writer.flush()
        self._final_summary_written = True

    # -- progress bar -------------------------------------------------------------------------------

    def progress_bar_metrics(self) -> dict[str, float | str]:
        """Plain strings for the progress bar: no tensors, so showing them never syncs the GPU."""
        stats = self.last_stats
        if stats is None:
            return {}
        metrics = {
            f"{self.sample_unit}s/s": f"{stats.samples_per_s:.4g}",
            "comm_ms": f"{stats.comm_ms:.3g}",
            "step_ms": f"{stats.step_ms:.3g}",
        }
        if not math.isnan(stats.exposed_ms):
            metrics["exposed_ms"] = f"{stats.exposed_ms:.3g}"
        return metrics


def _log_step(
    writer: Any,
    stats: StepStats,
    timings: list[BucketTiming],
    world_size: int,
    spread: RankSpread | None,
    bands: dict[int, tuple[float, float, float]],
) -> None:
    scalars = {
        "step/time_ms": stats.step_ms,
        "step/samples_per_s": stats.samples_per_s,
        "step/samples_per_s_per_device": stats.samples_per_s_per_device,
        "step/warmup": float(stats.warmup),
        "step/calibration": float(stats.calibration),
        "step/fwd_bwd_ms": stats.fwd_bwd_ms,
        "comm/bytes": stats.bytes,
        "comm/buckets": stats.buckets,
        "comm/time_ms": stats.comm_ms,
        "comm/algbw_gbps": stats.algbw_gbps,
        "comm/busbw_gbps": stats.busbw_gbps,
        "comm/max_bucket_ms": stats.max_bucket_ms,
        "comm/tail_ms": stats.tail_ms,
        "comm/exposed_ms": stats.exposed_ms,
        "comm/overlap_pct": stats.overlap_pct,
    }
    for t in timings:
        prefix = f"comm/bucket_{t.index:02d}"
        scalars[f"{prefix}/time_ms"] = t.time_ms
        scalars[f"{prefix}/bytes"] = t.bytes
        scalars[f"{prefix}/busbw_gbps"] = busbw_gbps("all_reduce", t.bytes, t.time_ms / 1e3, world_size)
        scalars[f"{prefix}/ready_to_done_ms"] = t.ready_to_done_ms
        if t.exec_ms is not None:
            scalars[f"{prefix}/exec_ms"] = t.exec_ms
        if t.index in bands:
            scalars.update(zip(run_summary.bucket_band_tags(t.index), bands[t.index], strict=True))
    if spread is not None:
        scalars.update(
            {
                "ranks/step_ms_skew": spread.step_ms_skew,
                "ranks/comm_ms_skew": spread.comm_ms_skew,
                "ranks/slowest_rank": spread.slowest_rank,
                "ranks/bucket_ms_skew_max": spread.bucket_ms_skew_max,
                "comm/busbw_fastest_rank_gbps": spread.busbw_fastest_gbps,
            }
        )
    write_step(writer, stats.step, scalars, {"comm/bucket_time_ms": [t.time_ms for t in timings]})


# DDP's functions that broadcast the module's buffers from rank 0 before each forward (broadcast_buffers).
DDP_BUFFER_SYNC = ("_sync_buffers", "_sync_module_buffers", "_default_broadcast_coalesced")


def _raised_in(err: BaseException, functions: tuple[str, ...]) -> bool:
    """Whether any frame of the error's traceback is one of these functions."""
    return any(frame.f_code.co_name in functions for frame, _ in traceback.walk_tb(err.__traceback__))


def _stuck_record(records: list) -> Any:
    """The bucket to name when a step fails: the first (launch order) whose collective failed, else the first
    still in flight; None when every launched collective finished. On NCCL a future completes at enqueue, so
    this finds none there (NCCL's watchdog names the collective in its own report)."""
    in_flight = None
    for record in records:
        future = record.work.get_future() if record.work is not None else None
        if future is None:  # PowerSGD chains its own futures: only the done stamp tells
            unfinished = record.done_ns == 0 and record.done_event is None
            in_flight = in_flight or (record if unfinished else None)
            continue
        if not future.done():
            in_flight = in_flight or record
            continue
        try:
            future.value()
        except Exception:  # the collective failed: this is the one
            return record
    return in_flight


def stop_reason(err: BaseException, activity: str, rank: int, signal_first: int | None = None) -> str:
    """One line: the rank, what it was doing, and why it stopped (a signal, or the error; a signal that came
    before the error first, as the error is then likely its consequence: a peer that stopped for it)."""
    if isinstance(err, Interrupted):
        return f"rank {rank}: interrupted by {signal_name(err.signum)} at {activity}"
    then = f"interrupted by {signal_name(signal_first)}; then " if signal_first is not None else ""
    return f"rank {rank}: {then}{activity} failed: {failure_text(err)}"


def _max_buckets(module: torch.nn.Module, bucket_cap_mb: float | None) -> int:
    """An upper bound on DDP's bucket count: every bucket but the last reaches the cap (the first 1 MiB)."""
    total = sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)
    cap = (bucket_cap_mb if bucket_cap_mb is not None else DEFAULT_BUCKET_CAP_MB) * MIB
    return math.ceil(total / cap) + 2


def _ddp_logging(trainer: pl.Trainer) -> dict[str, Any]:
    """DDP's own measurements (sampled on iterations <= 10 and every 100th): an independent cross-check.

    Times are DDP's averages in ns; the overlap it reports is the part of backward compute that ran while
    communication was in flight.
    """
    try:
        data = trainer.strategy.model._get_ddp_logging_data()
    except (AttributeError, RuntimeError):
        return {}
    keys = (
        "comm_hook",
        "backend_name",
        "iteration",
        "avg_forward_compute_time",
        "avg_backward_compute_time",
        "avg_backward_comm_time",
        "avg_backward_compute_comm_overlap_time",
        "bucket_sizes",
        "rebuilt_bucket_sizes",
    )
    out = {key: data[key] for key in keys if key in data}
    comm, overlap = out.get("avg_backward_comm_time"), out.get("avg_backward_compute_comm_overlap_time")
    if comm:
        out["overlap_pct"] = 100.0 * overlap / comm if overlap is not None else None
        out["exposed_ms"] = (comm - (overlap or 0)) / 1e6
    return out
