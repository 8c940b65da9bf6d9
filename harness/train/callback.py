"""Lightning callback that attaches the timed hook, resolves each step's stamps, and logs them.

The first steps after warm-up measure the compute-only step (calibration.py). Per step, on rank 0: TensorBoard
scalars under docs/METRICS.md's names and a histogram of bucket times (step_log.py; every `log_every`-th step
only, if asked), and samples/s, step ms and comm ms in the progress bar. Every `gather_every` steps, every
rank's times are gathered to log the skew across ranks. At the end: the per-bucket table, summary.json, the
HParams and settings views (dashboards.py), and the timeline of the last measured step (timeline.py), whose two
extra stamps are taken on that step only.
With hook "none" (config.NO_HOOK) no hook is registered, DDP runs its built-in all_reduce, and only the steps
are timed: summary.json has no buckets and no communication figures (null), and says why.

For the advisor, calibration steps also record when each parameter's gradient is ready (grad_ready.py; measured
steps carry no hook for it), and a run that completes with a timed hook ends, on rank 0 after its last step,
with a probe of the fp16/bf16 codec's cost (codec_probe.py): summary.json's "backward_timeline" and
"codec_probe".

The harness's own CPU cost: the main thread's CPU time spent in this callback's per-step work and in the
progress bar is counted (time.thread_time around each), and summary.json's "overhead_s" gives it per step over
WindowClock's window (harness.train.trainer), beside the whole training loop's main-thread CPU per step there,
and the CPU time of the work moved to the StepWorker's thread.

Stamps of step k are resolved at the start of step k + 2 (and the rest at the end of training), so the
GPU has long finished them and nothing here waits on it in the steady state. That work (resolving, aggregating,
rank 0's TensorBoard event) runs on the training loop's thread between steps; with --resolve-thread it runs on
the harness's own thread while step k + 2's backward runs (step_worker.py), and is waited for at step k + 3's
start, except for a step whose work includes a rank gather (a collective, which must stay on the training loop's
thread, in order with DDP's) or a timeline step.

When the run stops early (a failed or timed-out collective, a dead peer, an interrupt), `on_exception` names
what was running (`activity()`: the phase, or the step and the gradient all_reduce in flight with its bucket
and size, worded by failure_naming.py), keeps every finished step, and rank 0 writes summary.json with
"completed": false and that reason, and flushes the events. Rank 0 also rewrites a partial summary.json every
SUMMARY_EVERY_S while training, so a run killed outright (SIGKILL, NCCL's watchdog abort) still leaves one behind.

An output rank 0 can no longer write (the events or summary.json, on a full disk or in a removed directory)
stops the run: OutputFailed names it, rank 0 announces it to the other ranks (whose collectives then fail,
and who say they stopped because of it), keeps what it still can, and stops writing to what failed.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from harness.common import tags
from harness.common.dist_env import collectives_at_once
from harness.common.failures import (
    Interrupted,
    OutputFailed,
    abandon_writer,
    announce_stop,
    announced_stop,
    failure_text,
)
from harness.common.names import WARMUP_STEPS
from harness.common.numbers import plural
from harness.common.run_identity import trial_name
from harness.common.thread_cpu import WAITS_KEY
from harness.train import dashboards
from harness.train import summary as run_summary
from harness.train.calibration import TIMELINE_STEPS, Calibration
from harness.train.calibration_average import AfterBackward, average_gradients, stamp_names
from harness.train.codec_probe import probe_codec
from harness.train.config import NO_HOOK
from harness.train.ddp_crosscheck import DDPStatsReader, compare_comm, ddp_samples_iteration, harness_comm_span_ms
from harness.train.failure_naming import step_activity, stop_reason
from harness.train.grad_ready import GradReadyRecorder
from harness.train.hook import TimedHookState, make_hook_state, max_bucket_count, register_timed_hook
from harness.train.rank_gather import RankGatherer, RankSpread
from harness.train.stamps import BACKWARD_START, GRADS_AVERAGED, OPTIMIZER_END, ResolvedStep
from harness.train.step_log import StepLog
from harness.train.step_stats import RunAggregate, StepStats, step_stats
from harness.train.step_worker import StepWorker
from harness.train.tb_writer import write_png, write_step
from harness.train.timeline import TIMELINE_FILE, draw_timeline, timeline_title
from models import gradient_bytes, trainable_parameters

RESOLVE_LAG_STEPS = 2
# The totals that --comm-hook none cannot measure (no bucket is timed): written as null, not as 0.
COMM_TOTALS = (
    "bytes_per_step", "comm_ms_p50", "comm_ms_p90", "codec_ms_p50", "max_bucket_ms_p50", "tail_ms_p50",
    "interference_ms_p50", "algbw_gbps_p50", "busbw_gbps_p50", "comm_share_of_step_p50",
)  # fmt: skip
NO_HOOK_VERDICT = (
    "--comm-hook none: no timed hook, DDP's built-in all_reduce ran untimed, so communication time, bucket data "
    "and exposed time are not measured (only the steps are timed)"
)
SUMMARY_EVERY_S = 60.0  # rank 0 rewrites a partial summary.json this often while training (a few ms each)
# Resamples for the 95 % interval of exposed time: the final summary's, and a cheaper one for the partial
# summaries rewritten during training (the interval's ends move by well under its width between the two).
BOOTSTRAP_DRAWS = 1000
PARTIAL_BOOTSTRAP_DRAWS = 200


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
        calibration_every: int = 0,
        gather_every: int = 0,
        log_every: int = 1,
        clock: Any = None,
        resolve_thread: bool = False,
    ) -> None:
        self.hook_name = hook_name
        self.timed_comm = hook_name != NO_HOOK  # False: no hook at all, steps timed only
        self.samples_per_step = samples_per_step  # all ranks, all micro-batches of one optimizer step
        self.sample_unit = sample_unit
        self.settings = settings
        self.powersgd_rank = powersgd_rank
        self.bucket_cap_mb = bucket_cap_mb
        self.calibration = Calibration(calibration_steps, calibration_every, TIMELINE_STEPS)
        self.gather_every = gather_every  # 0: never
        self.log_every = log_every
        self.clock = clock  # harness.train.trainer.WindowClock: the window the CPU costs are given over
        # Resolve and log steps on a StepWorker during backward (TrainConfig.resolve_thread says why it is off by
        # default); the worker starts in on_fit_start.
        self.resolve_thread = resolve_thread
        self._worker: StepWorker | None = None
        self._deferred_upto: int | None = None  # steps to resolve on the worker once backward starts
        self.state: TimedHookState | None = None
        self.aggregate: RunAggregate | None = None
        self.gatherer: RankGatherer | None = None
        self.last_stats: StepStats | None = None
        self.last_measured: StepStats | None = None  # the progress bar's figures (not warm-up or calibration)
        self.last_spread: RankSpread | None = None
        self.world_size = 1
        # Wall time the harness itself adds to the run (reported in summary.json under "overhead_s"), and the
        # time of all the run's steps that it is a share of. "between_steps" is the harness's work between one
        # step's end and the next one's start (resolving, logging, gathers, summary rewrites), on the step
        # timeline: it lies outside every measured step.
        self.overhead_s = {"calibration": 0.0, "rank_gathers": 0.0, "between_steps": 0.0, "all_steps": 0.0}
        # Main-thread CPU seconds of the harness's per-step work (this callback's hooks; the progress bar adds its
        # own), and their values when the clock's window opened and closed (with the StepWorker's CPU seconds).
        # "logging" is the part of "callback" spent writing steps' TensorBoard events on the loop's thread: what
        # --log-every N thins, told apart in the run itself.
        self.cpu_s = {"callback": 0.0, "progress_bar": 0.0, "logging": 0.0}
        self._loop_thread: int | None = None  # the thread the training loop runs on (on_fit_start's)
        self._cpu_at: dict[int, dict[str, float]] = {}
        self.gathers = 0
        self.timeline_steps_run = 0  # timeline steps resolved (calibration.py): calibration steps with no sample
        self._current_step = -1
        self._step_log: StepLog | None = None  # rank 0's TensorBoard log; the other ranks write none
        self.timeline_step: int | None = None  # the step whose timeline rank 0 draws (None: none is drawn)
        self._timeline: tuple[ResolvedStep, StepStats] | None = None  # that step, once resolved
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
        self.summary_path: str | None = None  # the last summary.json written (rank 0)
        self.keep_failure = ""  # why what was measured could not be kept, when it could not
        self._stopping = False  # in on_exception: an output that fails now must not stop the keeping
        self.buffer_bytes = 0  # what DDP broadcasts from rank 0 before every forward (BatchNorm statistics)
        self.grad_bytes = 0  # the gradients a calibration step averages after backward
        # The collectives a calibration step makes after backward, with nothing else running: its averaging, chunk
        # by chunk, and on timeline steps the probe of the compress hooks' dtypes (calibration.py). Per step until
        # it is resolved (two steps later); and every one resolved, (dtype, bytes, ms): the advisor's rates after
        # backward.
        self.after_backward_stamps: dict[int, list[AfterBackward]] = {}
        self.after_backward_all_reduces: list[tuple[str, int, float]] = []
        # DDP's own sampled statistics, read at the steps it sampled, and the harness's span on those steps.
        self.ddp_reader: DDPStatsReader | None = None
        self._ddp_spans: dict[int, float] = {}
        self.grad_ready: GradReadyRecorder | None = None  # per-parameter ready times, in calibration steps only
        self.codec_probe: dict[str, Any] | None = None  # rank 0, at the end of a completed run with a timed hook

    # -- what is running ----------------------------------------------------------------------------

    def activity(self, err: BaseException | None = None) -> str:
        """What this rank is doing: the phase, or the step and the collective in flight (the gradient
        all_reduce of a bucket with its bytes and elements, or DDP's broadcast of the buffers), for a failure
        message. Reads the hook's records and the error's traceback; never waits."""
        if self.phase != "step":
            return self.phase
        records = self.state.stamps.records.get(self._current_step, []) if self.state else []
        return step_activity(self._current_step, records, self.hook_name, self.buffer_bytes, err)

    # -- set-up -------------------------------------------------------------------------------------

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.phase = "DDP set-up (the broadcast of the initial weights from rank 0)"

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's DDPStrategy registers a hook passed to it only on CUDA; registering it here, once the
        # strategy has wrapped the model and before any backward, works on every device.
        self.phase = "fit start (hook registration, the rank-gather group)"
        self._trainer = trainer
        self._loop_thread = threading.get_ident()
        ddp_model = trainer.strategy.model
        if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError(f"expected a DDP-wrapped model, got {type(ddp_model).__name__}")
        self.world_size = trainer.world_size
        self.state = make_hook_state(
            self.hook_name,
            ddp_model.module,
            use_cuda=pl_module.device.type == "cuda",
            powersgd_rank=self.powersgd_rank,
            max_buckets=max_bucket_count(ddp_model.module, self.bucket_cap_mb),
        )
        if self.timed_comm:
            register_timed_hook(ddp_model, self.state)
        try:
            self.ddp_reader = DDPStatsReader(ddp_model)
        except ValueError:  # DDP ran forwards before fit (not in train.py): no step-by-step cross-check
            self.ddp_reader = None
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in ddp_model.module.buffers())
        self.grad_bytes = gradient_bytes(ddp_model.module)
        self.aggregate = RunAggregate(world_size=self.world_size)
        if not self.timed_comm:  # calibration skips communication in the hook: without one, none
            self.calibration = Calibration(0)
        elif 0 < trainer.max_steps <= self.calibration.setup_end:
            # Too short for every setup step: the compute-only samples come first, the timeline goes.
            block = self.calibration
            if trainer.max_steps > block.first_step + block.steps:
                self.calibration = Calibration(block.steps, block.every)
                note = "the backward timeline's steps are left out (none is recorded for the advisor)"
            else:
                self.calibration = Calibration(0)
                note = "exposed time is off"
            if trainer.is_global_zero:
                run = plural(trainer.max_steps, "step")
                print(f"# a run of {run} leaves none after warm-up and calibration: {note}")
        if self.calibration.timeline_steps > 0:
            self.grad_ready = GradReadyRecorder(ddp_model.module, self.state.param_names, self.state.stamps)
        if self.gather_every > 0 and self.world_size > 1:  # one rank has no skew to gather
            self.gatherer = RankGatherer(self.world_size)
        if trainer.is_global_zero and trainer.logger is not None:
            self._step_log = StepLog(trainer.logger.experiment, self.world_size, self.log_every, self.timed_comm)
            self.timeline_step = self.last_measured_step(trainer.max_steps)
        if self.resolve_thread:
            self._worker = StepWorker()
        self.phase = "the first step (under the Trainer, Lightning's barrier before it)"

    def last_measured_step(self, max_steps: int) -> int | None:
        """The last step of a run of `max_steps` that is neither warm-up nor calibration (None if none is)."""
        return next(
            (s for s in range(max_steps - 1, WARMUP_STEPS - 1, -1) if not self.calibration.is_calibration_step(s)),
            None,
        )

    # -- per step -----------------------------------------------------------------------------------

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        cpu = time.thread_time()
        step = trainer.global_step
        if step == self._current_step:  # a later micro-batch of the same optimizer step (gradient accumulation)
            if self._recording_timeline():
                self.grad_ready.forward_start()
            return
        # The previous step ends here, before the harness's own work, which then lies between two steps (a wait
        # for the worker's job included: it is not step time).
        self.state.stamps.end(self._current_step)
        self._current_step = step
        self.phase = "step"
        if self._worker is not None:
            try:
                self._wait_for_worker()
            except OutputFailed:
                # The other ranks start this step with its rank gather, if one is due (the loop's thread runs it
                # on every rank): meet them there first, so that all of them stop at this step.
                self._join_due_gathers(step - RESOLVE_LAG_STEPS)
                raise
        if self.clock is not None and step in (self.clock.first, self.clock.last):
            # Where the clock read its clocks, just before this callback.
            self._cpu_at[step] = {**self.cpu_s, "step_worker": self._worker.cpu_s if self._worker else 0.0}
        calibrating = self.calibration.is_calibration_step(step)
        recording = self._recording_timeline()
        upto = step - RESOLVE_LAG_STEPS
        if self._worker is None or recording or self._gather_due(upto):
            self._resolve_ready(upto)
        else:
            self._deferred_upto = upto  # handed to the worker as backward starts (on_before_backward)
        if self.grad_ready is not None:
            self.grad_ready.resolve(upto)
        self._rewrite_partial_summary()
        if recording:
            self.grad_ready.begin(step)  # the ready hooks: registered before the step's clock starts
        self._step_open = True
        self.state.begin_step(step)
        self.state.skip_communication = calibrating
        if recording:
            self.grad_ready.forward_start()  # last, so the forward leaves out the harness's own work
        self.cpu_s["callback"] += time.thread_time() - cpu

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        if self._deferred_upto is not None:  # the first micro-batch's backward: the loop's thread waits in it
            cpu = time.thread_time()
            upto, self._deferred_upto = self._deferred_upto, None
            self._worker.submit(partial(self._resolve_ready, upto, gather=False))
            self.cpu_s["callback"] += time.thread_time() - cpu
        if self._current_step == self.timeline_step:  # the drawn step only: no other step pays for it
            self.state.stamps.mark(self._current_step, BACKWARD_START)
        if self._recording_timeline():
            self.grad_ready.backward_start()

    @contextmanager
    def _collective_phase(self, what: str) -> Iterator[None]:
        """Name a collective the callback runs itself as the phase while it runs, so a peer's failure there says
        which it was (activity()); the phase before it comes back only if it succeeds."""
        previous, self.phase = self.phase, what
        yield
        self.phase = previous

    def _recording_timeline(self) -> bool:
        """Whether this step records the backward timeline (a timeline step, calibration.py)."""
        return self.grad_ready is not None and self.calibration.is_timeline_step(self._current_step)

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        # Backward is over and DDP has waited for every bucket's collective: what lies between the step's
        # start and here, beyond the compute-only time, is exposed communication.
        cpu = time.thread_time()
        self.state.mark_backward_end()
        if self.grad_ready is not None:
            self.grad_ready.end_backward()  # removes the ready hooks: the next step carries none
        if self.ddp_reader is not None:
            self.ddp_reader.poll(self.state.step)
        if self.state.skip_communication and self.world_size > 1:
            # The all_reduce the hook skipped, now that the compute-only sample is stamped: the step trains.
            step, size = self.state.step, f"{self.grad_bytes:,} B"
            with self._collective_phase(
                f"all_reduce of step {step}'s gradients after its compute-only backward (calibration, {size})"
            ):
                self.after_backward_stamps[step] = average_gradients(
                    pl_module.parameters(),
                    self.state.process_group,
                    stamp=partial(self.state.stamps.mark, step),
                    probe_dtypes=self.calibration.is_timeline_step(step),
                )
            self.state.stamps.mark(self.state.step, GRADS_AVERAGED)
        self.cpu_s["callback"] += time.thread_time() - cpu

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step > self._current_step:  # the optimizer stepped: this step is whole
            cpu = time.thread_time()
            self._step_open = False
            if self._current_step == self.timeline_step:
                self.state.stamps.mark(self._current_step, OPTIMIZER_END)
            # Its end, unless the next step's start moves it later (the last step keeps this one, so it leaves
            # out Lightning's end of fit).
            self.state.stamps.end(self._current_step)
            self.cpu_s["callback"] += time.thread_time() - cpu

    def _resolve_ready(self, upto: int, gather: bool = True) -> None:
        """Resolve, aggregate and log every pending step up to `upto` (on the worker: never a gather)."""
        stamps = self.state.stamps
        for step in stamps.pending_steps():
            if step > upto:
                break
            self._finish_step(stamps.resolve(step), gather=gather)

    def _join_due_gathers(self, upto: int) -> None:
        """After this rank's worker failed to write (its writer is gone, so nothing is written here): resolve the
        pending steps up to `upto` with the rank gathers every other rank runs for them, so that they do not wait in
        one for this rank. The write's failure stays the reason: a gather that fails too (a peer already gone) is
        not reported over it."""
        if self._gather_due(upto):
            with contextlib.suppress(Exception):
                self._resolve_ready(upto)

    def _wait_for_worker(self) -> None:
        """Wait for the worker's job. An output it could not write stops the run here, at this step, which is
        where the other ranks will say they stopped."""
        try:
            self._worker.wait()
        except OutputFailed as err:
            here = OutputFailed(err.what, err.why, f"at {self._position()}")
            here.broken_pipe = err.broken_pipe
            raise here from None

    def _gather_due(self, upto: int) -> bool:
        """Whether a pending step up to `upto` may be gathered across ranks (every rank decides alike)."""
        if self.gatherer is None:
            return False
        return any(step <= upto and step % self.gather_every == 0 for step in self.state.stamps.pending_steps())

    def _rewrite_partial_summary(self) -> None:
        """Rank 0 rewrites summary.json every SUMMARY_EVERY_S while training (on the loop's thread, the worker
        idle), so that a run killed outright still leaves one."""
        if self._step_log is None or self.finished or time.monotonic() - self._last_summary_s <= SUMMARY_EVERY_S:
            return
        self._last_summary_s = time.monotonic()
        reason = (
            f"in progress at step {self._current_step}: rank 0 rewrites this every {SUMMARY_EVERY_S:g} s until the "
            "run ends; if it is the last one, the run was killed before it could report"
        )
        self._write_summary(self._trainer, completed=False, reason=reason, final=False)

    def _keep_after_backward_all_reduces(self, step: int, marks: dict[str, float]) -> None:
        """A calibration step's all_reduces after backward: (dtype, bytes, ms) of each whose two stamps it took."""
        for name, dtype, size in self.after_backward_stamps.pop(step, []):
            start, done = (marks.get(stamp) for stamp in stamp_names(name))
            if start is not None and done is not None:
                self.after_backward_all_reduces.append((dtype, size, done - start))

    def _finish_step(self, resolved: ResolvedStep, gather: bool = True) -> None:
        calibrating = self.calibration.is_calibration_step(resolved.step)
        self.overhead_s["all_steps"] += resolved.step_ms / 1e3
        if resolved.gap_ms is not None:
            self.overhead_s["between_steps"] += resolved.gap_ms / 1e3
        timeline = self.calibration.is_timeline_step(resolved.step)
        if calibrating:
            self.calibration.add(resolved.step, resolved.fwd_bwd_ms)
            self.timeline_steps_run += timeline
            # What calibrating cost this step: its gradients' all_reduce, run after backward, not under it.
            averaged_ms = (resolved.marks or {}).get(GRADS_AVERAGED)
            if averaged_ms is not None and resolved.fwd_bwd_ms is not None:
                self.overhead_s["calibration"] += max(0.0, averaged_ms - resolved.fwd_bwd_ms) / 1e3
            self._keep_after_backward_all_reduces(resolved.step, resolved.marks or {})
            self.aggregate.compute_only_ms = self.calibration.compute_only_ms
        stats = step_stats(
            resolved,
            self.samples_per_step,
            self.world_size,
            self.calibration.reference_ms(resolved.step),
            calibrating,
            timeline=timeline,
        )
        self.aggregate.add(stats, resolved, self.state.bucket_contents)
        if self.ddp_reader is not None and ddp_samples_iteration(resolved.step + 1, self.ddp_reader.sample_rate):
            span = harness_comm_span_ms(
                (t.ready_ms for t in resolved.timings), (t.finished_ms for t in resolved.timings)
            )
            if span is not None:
                self._ddp_spans[resolved.step] = span
        self.last_stats = stats
        spread = None
        measured = not (stats.warmup or calibrating)
        if measured:
            self.last_measured = stats
            if stats.step == self.timeline_step:
                self._timeline = (resolved, stats)
        if gather and measured and self.gatherer is not None and stats.step % self.gather_every == 0:
            # Every rank resolves the same steps in the same order, and calibrates the same ones, so this
            # collective lines up. Warm-up and calibration steps are not gathered: their skew is not logged.
            start = time.perf_counter()
            with self._collective_phase(f"all_gather of every rank's times for step {stats.step} (rank gather)"):
                spread = self.gatherer.gather(stats, [t.comm_ms for t in resolved.timings])
            self.overhead_s["rank_gathers"] += time.perf_counter() - start
            self.gathers += 1
            self.last_spread = spread
        step_log = self._step_log
        if step_log is not None:
            if measured and spread is None and not step_log.logs(stats.step):
                step_log.bands.record(resolved.timings)  # a step not logged: its bucket times join the bands only
            else:
                on_loop = threading.get_ident() == self._loop_thread  # else on the StepWorker, whose CPU counts it
                cpu = time.thread_time()
                self._write_events(lambda: step_log.write(stats, resolved.timings, spread, measured))
                if on_loop:
                    self.cpu_s["logging"] += time.thread_time() - cpu

    # -- the end ------------------------------------------------------------------------------------

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.phase = "end of training (the last steps' rank gathers, the summary)"
        self._finish(trainer, completed=True)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # Name what was running before anything is resolved, then keep what was measured: resolve the steps
        # that finished and write a summary marked unfinished.
        rank = trainer.global_rank
        if isinstance(exception, OutputFailed):
            self.stop_reason = f"rank {rank}: {exception}"
            announce_stop(rank, str(exception))  # before this rank's exit breaks the others' collectives
        else:
            # A collective that failed because a peer stopped on its own (its outputs): say so, not which
            # collective this rank happened to be in.
            peer = None if isinstance(exception, Interrupted) else announced_stop(self._position())
            activity = self.activity(exception)
            self.stop_reason = (
                f"rank {rank}: {peer}" if peer else stop_reason(exception, activity, rank, self.signal_before_failure)
            )
        if self.state is None or self._final_summary_written:
            return
        self._stopping = True
        try:
            if not self.finished:
                self._finish(trainer, completed=False, reason=self.stop_reason)
            elif trainer.is_global_zero:  # it failed while finishing: what was aggregated still counts
                self._write_summary(trainer, completed=False, reason=self.stop_reason)
        except OutputFailed as err:  # part of the one line that reports the run (harness.train.rank)
            self.keep_failure = f"summary.json: {err.why}"  # the only output written while keeping
        except Exception as err:
            self.keep_failure = failure_text(err)

    def kept_note(self) -> str:
        """Where what was measured is, or why it is not, for the end of the line that reports a run stopped
        early; empty on ranks that keep nothing (all but rank 0)."""
        if self.keep_failure:
            earlier = f"; {self.summary_path} holds an earlier partial summary" if self._summary_exists() else ""
            return f"; what was measured could not be kept: {self.keep_failure}{earlier}"
        if self.summary_path:
            return f"; what was measured is in {self.summary_path} (completed: false)"
        return ""

    def _summary_exists(self) -> bool:
        return self.summary_path is not None and Path(self.summary_path).is_file()

    def _position(self) -> str:
        """Where the run is, in a few words: the step, or the phase before training."""
        return f"step {self._current_step}" if self.phase == "step" else self.phase

    def _run_dir(self) -> str:
        trainer = self._trainer
        return trainer.logger.log_dir if trainer is not None and trainer.logger is not None else "."

    def _write_events(self, write) -> None:
        """Run `write` (to rank 0's TensorBoard writer); an OSError there (the writer's thread raises what it met
        since, a full disk or a removed directory) becomes OutputFailed, and nothing more is written there."""
        try:
            write()
        except OSError as err:
            writer, self._step_log = self._step_log.writer, None
            abandon_writer(writer)
            if not self._stopping:  # while keeping what was measured, the summary still counts
                events = f"the TensorBoard events in {self._run_dir()!r}"
                raise OutputFailed(events, err, f"at {self._position()}") from None

    def _finish(self, trainer: pl.Trainer, completed: bool, reason: str = "") -> None:
        self.finished = True
        worker_failed: OutputFailed | None = None
        if self._worker is not None:
            worker, self._worker, self._deferred_upto = self._worker, None, None  # the loop below resolves it all
            try:
                if completed:
                    worker.wait()
            except OutputFailed as err:
                # Its job's error ends the run as a failure (on_exception keeps the rest), once the last steps'
                # rank gathers below, which every other rank runs, are done here too (its writer is gone).
                worker_failed = err
            finally:
                worker.close()
        stamps = self.state.stamps
        pending = stamps.pending_steps()
        # A step stopped midway is incomplete: dropped (every step before it has its end).
        incomplete = pending.pop() if pending and self._step_open else None
        if worker_failed is not None:
            self._join_due_gathers(pending[-1] if pending else -1)
            raise worker_failed
        for step in pending:
            # A peer may be gone after a failure: no cross-rank gathers then.
            self._finish_step(stamps.resolve(step), gather=completed)
        if incomplete is not None:
            stamps.end(incomplete)
            stamps.resolve(incomplete)
        if self.grad_ready is not None:
            self.grad_ready.close()
            # After a failure the GPU may never reach a stamp: then only what it did reach.
            self.grad_ready.resolve(self._current_step, wait=completed)
        if trainer.is_global_zero:
            if completed and self.timed_comm:  # after the last step and its gathers: no step is affected
                self.codec_probe = self._probe_codec(trainer)
            self._write_summary(trainer, completed, reason)

    def _probe_codec(self, trainer: pl.Trainer) -> dict[str, Any] | None:
        """The fp16/bf16 codec's cost on this device (codec_probe.py), for buffers up to the whole model's
        gradients; None where they do not fit in the GPU's memory beside the model (the run itself is kept)."""
        module = trainer.strategy.model.module
        grad_dtype = next((p.dtype for p in module.parameters() if p.requires_grad), torch.float32)
        try:
            return probe_codec(trainable_parameters(module), trainer.strategy.root_device, self.world_size, grad_dtype)
        except torch.OutOfMemoryError:
            return None

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
            ddp_logging=run_summary.ddp_logging(trainer.strategy.model),
            ddp_crosscheck=self._ddp_crosscheck(),
            calibration_samples=self.calibration.samples,
            after_backward_all_reduces=self.after_backward_all_reduces,
            timeline_steps=self.timeline_steps_run,
            calibration_every=self.calibration.every,
            bootstrap_draws=BOOTSTRAP_DRAWS if final else PARTIAL_BOOTSTRAP_DRAWS,
            last_rank_spread=self.last_spread.__dict__ if self.last_spread else None,
            overhead_s={**self.overhead_s, "gathers": self.gathers, **self._cpu_overhead()},
            backward_timeline=self.grad_ready.timeline() if self.grad_ready is not None else None,
            codec_probe=self.codec_probe,
            collectives_at_once=collectives_at_once(),
        )
        if not self.timed_comm:
            summary["totals"].update(dict.fromkeys(COMM_TOTALS, math.nan), exposure_verdict=NO_HOOK_VERDICT)
        if self.ranks:
            summary["ranks"] = self.ranks
        log_dir = self._run_dir()
        try:
            self.summary_path = str(run_summary.write_summary(summary, log_dir))
        except OSError as err:
            raise OutputFailed(f"summary.json in {log_dir!r}", err, f"at {self._position()}") from None
        if self._step_log is not None and self._current_step >= 0:
            interval = dashboards.interval_scalars(summary["totals"])
            if interval:
                self._write_events(lambda: write_step(self._step_log.writer, self._current_step, interval, {}))
        if not final:
            return
        if completed:
            print(run_summary.format_table(summary), flush=True)
        png = self._draw_timeline(summary, log_dir)
        if self._step_log is not None:
            step_log, step = self._step_log, max(self._current_step, 0)

            def write() -> None:
                step_log.write_layout()
                trial = trial_name(summary["settings"], Path(log_dir).name)
                dashboards.write_hparams(step_log.writer, summary, step, trial)
                dashboards.write_settings(step_log.writer, summary, step)
                if png is not None:
                    write_png(step_log.writer, tags.TIMELINE_IMAGE, png, self._timeline[0].step)
                step_log.writer.flush()

            self._write_events(write)
        self._final_summary_written = True

    def _draw_timeline(self, summary: dict[str, Any], log_dir: str) -> bytes | None:
        """Draw the timeline step (if it was resolved) and write it next to summary.json; its PNG bytes, or None
        with one line saying why there is none."""
        if self._timeline is None:
            return None
        resolved, stats = self._timeline
        try:
            png = draw_timeline(resolved, timeline_title(summary, stats))
        except ImportError as err:
            print(f"# no {TIMELINE_FILE}: {err} (pip install -r requirements.txt)", flush=True)
            return None
        try:
            (Path(log_dir) / TIMELINE_FILE).write_bytes(png)
        except OSError as err:
            print(f"# {TIMELINE_FILE} not written: {failure_text(err)}", flush=True)
        return png

    def _cpu_overhead(self) -> dict[str, float]:
        """Main-thread CPU ms per step over the clock's window (rank 0's): the training loop's and the harness's
        (this callback's per-step work and the progress bar's); with the window's wall and process CPU ms per
        step. Empty before the window closes (partial summaries) or without one (too few steps)."""
        window = self.clock.result() if self.clock is not None else None
        if window is None or self.clock.first not in self._cpu_at or self.clock.last not in self._cpu_at:
            return {}
        start, end = self._cpu_at[self.clock.first], self._cpu_at[self.clock.last]
        steps = self.clock.last - self.clock.first
        callback_ms, bar_ms, worker_ms, logging_ms = (
            (end[key] - start[key]) * 1e3 / steps for key in ("callback", "progress_bar", "step_worker", "logging")
        )
        return {
            "cpu_window_first_step": self.clock.first,
            "cpu_window_last_step": self.clock.last,
            "wall_ms_per_step": window["wall_ms_per_step"],
            "loop_cpu_ms_per_step": window["main_thread_cpu_ms_per_step"],
            "process_cpu_ms_per_step": window["process_cpu_ms_per_step"],
            "harness_cpu_ms_per_step": callback_ms + bar_ms,
            "callback_cpu_ms_per_step": callback_ms,
            "logging_cpu_ms_per_step": logging_ms,  # part of the callback's: its TensorBoard events
            "progress_bar_cpu_ms_per_step": bar_ms,
            # Off the loop's thread, during backward (step_worker.py): not main-thread CPU, and not in harness's.
            "step_worker_cpu_ms_per_step": worker_ms,
            # Every thread's CPU (the autograd thread runs backward and the comm hook): where a host-bound step goes.
            "thread_cpu_ms_per_step": window["thread_cpu_ms_per_step"],
            # How long each waited for a CPU that another task held: the host's contention, beside its CPU.
            WAITS_KEY: window[WAITS_KEY],
        }

    def _ddp_crosscheck(self) -> dict[str, Any]:
        """DDP's own comm time against the harness's span on the measured steps DDP sampled (warm-up and
        calibration steps left out)."""
        if self.ddp_reader is None:
            return {}
        excluded = {
            s for s in self._ddp_spans if s < self.calibration.first_step or self.calibration.is_calibration_step(s)
        }
        agreement = compare_comm(self.ddp_reader.samples, self._ddp_spans, excluded)
        return {
            "compared_steps": agreement.compared,
            "median_ratio": agreement.median_ratio,
            "median_excess_ms": agreement.median_excess_ms,
            "ratios_by_step": {str(step): ratio for step, ratio in agreement.ratios.items()},
            "excluded_samples": agreement.excluded,
            "unmatched_samples": agreement.unmatched,
            "mismatches": self.ddp_reader.mismatches[:5],
        }

    # -- progress bar -------------------------------------------------------------------------------

    def progress_bar_metrics(self) -> dict[str, float | str]:
        """Plain strings for the progress bar: no tensors, so showing them never syncs the GPU. The figures are
        the last measured step's (resolved two steps late): samples/s, step ms and comm ms. While the current step
        is a warm-up or calibration step, "phase" says so and nothing else is shown: such a step's communication
        is skipped. A single step's exposed time is mostly noise against its reference (it can be negative); the
        end of the run gives its median with a 95 % interval instead."""
        step = self._current_step
        if 0 <= step < self.calibration.first_step:
            return {"phase": "warm-up"}
        if self.calibration.is_calibration_step(step):
            return {"phase": "calibrating"}
        stats = self.last_measured
        if stats is None:
            return {}
        metrics: dict[str, float | str] = {f"{self.sample_unit}s/s": f"{stats.samples_per_s:.4g}"}
        metrics["step_ms"] = f"{stats.step_ms:.3g}"
        if self.timed_comm:
            metrics["comm_ms"] = f"{stats.comm_ms:.3g}"
        return metrics
