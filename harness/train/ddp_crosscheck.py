"""DDP's own sampled runtime statistics, read once per optimizer step and attributed to the step they measure.

Why: DDP times its iterations itself (`ddp_model._get_ddp_logging_data()`), independently of our comm hook's
stamps, so it can cross-check the harness's communication span, but only if both describe the same
iteration and the same window. Reading DDP's running averages once at the end cannot: they mix warm-up and
calibration iterations. What DDP does (torch/csrc/distributed/c10d, reducer.cpp / logger.cpp /
reducer_timer.hpp, and torch/nn/parallel/distributed.py; checked on torch 2.14 with real gloo ranks in
tests/test_ddp_crosscheck.py):

- Iterations. `Reducer::prepare_for_forward` increments `num_iterations_` in every DDP forward that runs
  with grad enabled and gradient sync on (not under `no_sync`, not in validation under no_grad), so with
  Lightning and gradient accumulation 1, iteration n (1-based) is the forward of optimizer step
  `global_step == n - 1` (of a fresh DDP wrapper; it restarts at 1 after a resume).
- Sampling. `should_collect_runtime_stats()` is true for iterations 1..10 and every multiple of the sample
  rate (`kDDPRuntimeLoggingSampleRate = 100`, changeable with `_set_ddp_runtime_logging_sample_rate`).
  The timer events of a sampled iteration are recorded during its forward and backward.
- Visibility. `DistributedDataParallel._pre_forward` calls `logger.set_runtime_stats_and_log()` before
  `reducer.prepare_for_forward()`: in the forward of iteration n+1, with `num_iterations_` still n, DDP turns
  iteration n's events into numbers and sets `"iteration"` to n. So the stats of step s appear during the
  forward of step s + 1; the last iteration of a run is never reported.
- Per-iteration values. Besides the running averages (`avg = (x + avg * (k - 1)) // k` over the k
  iterations recorded so far, integer ns; no count of k is exposed, it is the number of sampled iterations
  <= "iteration"), the logging data holds the raw value of the latest sampled iteration, reset to 0 then
  set each time: `forward_compute_time`, `backward_compute_time`, `backward_comm_time`,
  `backward_compute_comm_overlap_time`, and the host timestamps `forward_compute_time_start`,
  `backward_compute_time_start/_end`, `backward_comm_time_start/_end` (ns, CLOCK_REALTIME, i.e. the clock of
  `time.time_ns()`). No differencing of averages is needed (it does agree: n * avg_n - (n-1) * avg_{n-1}).
- Windows (timer events):
  * forward: kForwardStart (prepare_for_forward, before bucket rebuild and buffer sync) to
    kBackwardComputeStart, which `prepare_for_backward` records at the end of the forward
    (`_post_forward`), not when backward starts.
  * backward compute: kBackwardComputeStart to kBackwardComputeEnd, recorded in the autograd engine's
    final callback queued once the last bucket was launched; so it includes loss computation and whatever
    runs between forward and `backward()`.
  * comm (`backward_comm_time`): kBackwardCommStart, recorded in `mark_bucket_ready` just before the first
    bucket's `run_comm_hook` (before our hook is entered), to kBackwardCommEnd, recorded at the end of
    `finalize_backward`, after DDP waited on every bucket's future (the future our hook returns, so after
    its `then` callback) and copied each bucket's result into `.grad` (a real copy when
    gradient_as_bucket_view is False). On CUDA both are CUDA events on the current stream at those
    points (elapsed_time, 0.5 us resolution): from the GPU reaching the first launch to the stream having
    waited for every bucket's collective plus the copy-back kernels.
  * "overlap" (`backward_compute_comm_overlap_time`): kBackwardCommStart to kBackwardComputeEnd, the
    backward compute still running after the first bucket was launched. It is not the time a collective
    actually ran alongside compute; comm minus it is the exposed tail, compute end to comm end.
- A comm hook changes none of this: the events are recorded around `run_comm_hook` whatever it does
  (noop or compressing hooks included). Iteration 1 has a single bucket, launched after all of backward
  (DDP disables bucketing until the rebuild), and with static_graph iteration 1 records compute end and
  comm start together: both are warm-up.

So DDP's comm time of step s matches the harness span "first bucket's hook entry (ready) -> last
completion of a future the hook returned (finished)" of the same step, and exceeds it by DDP's own edges:
the hook entry latency at the start (tens of us) and, at the end, waking the autograd thread plus copying
results into `.grad` (none with gradient_as_bucket_view). It is never smaller.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

DDP_DEFAULT_SAMPLE_RATE = 100  # kDDPRuntimeLoggingSampleRate in reducer.hpp
DDP_ALWAYS_SAMPLED = 10  # should_collect_runtime_stats(): iterations 1..10 are always sampled


def ddp_samples_iteration(iteration: int, sample_rate: int = DDP_DEFAULT_SAMPLE_RATE) -> bool:
    """Whether DDP records runtime stats for its `iteration`-th synced forward/backward (1-based)."""
    return iteration > 0 and (iteration <= DDP_ALWAYS_SAMPLED or iteration % sample_rate == 0)


@dataclass(frozen=True, slots=True)
class DDPSample:
    """DDP's own timing of one sampled iteration, attributed to the optimizer step it belongs to.

    Times are milliseconds, None where DDP could not measure (it leaves 0 then). The `*_ns` stamps are
    host CLOCK_REALTIME (`time.time_ns()`) stamps, on CUDA too (where the durations come from CUDA events).
    """

    step: int
    iteration: int  # DDP's num_iterations_ for this step's forward (1-based)
    comm_ms: float | None  # first bucket launch -> every bucket waited for and copied into .grad
    forward_ms: float | None  # DDP forward start -> end of forward
    backward_compute_ms: float | None  # end of forward -> autograd's final callback
    overlap_ms: float | None  # first bucket launch -> autograd's final callback
    forward_start_ns: int
    comm_start_ns: int
    comm_end_ns: int
    compute_end_ns: int
    num_buckets: int | None  # buckets DDP reduced, where this torch reports it

    @property
    def exposed_ms(self) -> float | None:
        """Communication left after backward compute ended (compute end -> comm end)."""
        if self.comm_ms is None or self.overlap_ms is None:
            return None
        return self.comm_ms - self.overlap_ms


class _DDPLike(Protocol):
    """The two private methods of `DistributedDataParallel` used here."""

    def _get_ddp_logging_data(self) -> dict[str, Any]: ...

    def _set_ddp_runtime_logging_sample_rate(self, sample_rate: int) -> None: ...


def _ms(value: Any) -> float | None:
    return value / 1e6 if isinstance(value, int) and value > 0 else None


class DDPStatsReader:
    """Reads DDP's per-iteration stats when a sampled iteration becomes visible, and names its step.

    Create it before the first training forward of the DDP wrapper (e.g. in `on_fit_start`), then call
    `poll(step)` exactly once per optimizer step, after that step's forward and before the next one
    (`on_before_optimizer_step`, `on_train_batch_end` or after `backward()`; the same point every step).
    The n-th call is DDP iteration n; when iteration n - 1 was sampled, its numbers became visible in this
    step's forward and `poll` returns them with the step that was passed for iteration n - 1.

    Cost (2-core CPU host): on steps after which DDP publishes nothing, one `time.time_ns()` and some
    arithmetic, about 2 us; on the 10 + 1-in-`sample_rate` steps that do, one `_get_ddp_logging_data()`, a
    locked copy of DDP's maps turned into a dict: 17-30 us (100 parameters), more under load and for models
    with many parameters (its strings list parameter indices). Reading it every step would cost that always.

    Each sample is checked against DDP's own "iteration" and against the wall-clock window of the forward
    it claims (between the previous poll and the poll of its step); a sample failing either is not
    attributed and its reason is kept in `mismatches` (an extra synced forward, a missed poll, a reader
    made mid-run).
    """

    def __init__(self, ddp_model: _DDPLike, sample_rate: int | None = None) -> None:
        """`sample_rate` None leaves DDP's rate (100); a number sets it on `ddp_model`. A smaller rate gives
        more samples, but on CUDA each sampled iteration records 5 events and the next forward waits for
        them, so keep the default where the CPU must run ahead of the GPU."""
        if sample_rate is not None:
            if sample_rate < 1:
                raise ValueError(f"sample_rate must be >= 1, got {sample_rate}")
            ddp_model._set_ddp_runtime_logging_sample_rate(sample_rate)
        self.sample_rate = sample_rate if sample_rate is not None else DDP_DEFAULT_SAMPLE_RATE
        self._ddp = ddp_model
        published = ddp_model._get_ddp_logging_data().get("iteration", 0)
        if published:
            raise ValueError(f"DDP already ran {published}+ iterations: create the reader before training")
        self._iteration = 0
        self._last_poll_ns = time.time_ns()
        # iteration -> (step, wall clock before its forward, wall clock after it), for sampled iterations
        self._pending: dict[int, tuple[int, int, int]] = {}
        self.samples: list[DDPSample] = []
        self.mismatches: list[str] = []

    def poll(self, step: int) -> DDPSample | None:
        """Note that `step`'s forward has run; return the sample DDP published in it, if any."""
        now = time.time_ns()
        self._iteration += 1
        iteration = self._iteration
        if ddp_samples_iteration(iteration, self.sample_rate):
            self._pending[iteration] = (step, self._last_poll_ns, now)
        self._last_poll_ns = now
        window = self._pending.pop(iteration - 1, None)
        if window is None:
            return None
        sample_step, after_ns, before_ns = window
        data = self._ddp._get_ddp_logging_data()
        published = data.get("iteration")
        if published != iteration - 1:
            self.mismatches.append(
                f"step {step}: DDP published iteration {published}, expected {iteration - 1} (step {sample_step})"
            )
            return None
        forward_start = int(data.get("forward_compute_time_start", 0))
        if not after_ns <= forward_start <= before_ns:
            self.mismatches.append(
                f"step {sample_step}: DDP's forward start is outside that step's forward "
                f"({(forward_start - after_ns) / 1e6:.3f} ms after the previous poll, "
                f"{(before_ns - after_ns) / 1e6:.3f} ms window)"
            )
            return None
        comm_start = int(data.get("backward_comm_time_start", 0))
        comm_end = int(data.get("backward_comm_time_end", 0))
        stale = not forward_start <= comm_start <= comm_end <= now  # events left from an earlier iteration
        buckets = data.get("num_buckets_reduced")
        sample = DDPSample(
            step=sample_step,
            iteration=iteration - 1,
            comm_ms=None if stale else _ms(data.get("backward_comm_time")),
            forward_ms=_ms(data.get("forward_compute_time")),
            backward_compute_ms=_ms(data.get("backward_compute_time")),
            overlap_ms=None if stale else _ms(data.get("backward_compute_comm_overlap_time")),
            forward_start_ns=forward_start,
            comm_start_ns=comm_start,
            comm_end_ns=comm_end,
            compute_end_ns=int(data.get("backward_compute_time_end", 0)),
            num_buckets=buckets if isinstance(buckets, int) else None,
        )
        self.samples.append(sample)
        return sample


@dataclass(frozen=True, slots=True)
class CommAgreement:
    """How DDP's comm time compares with the harness's span on the steps both measured."""

    compared: int  # steps with both figures
    median_ratio: float | None  # median of ddp_comm_ms / harness_span_ms
    median_excess_ms: float | None  # median of ddp_comm_ms - harness_span_ms (DDP's own edges)
    ratios: dict[int, float]  # by step
    excluded: int  # samples on steps the caller excluded
    unmatched: int  # samples with no harness span, or no DDP comm time, for their step


def compare_comm(
    samples: Iterable[DDPSample],
    harness_span_ms: Mapping[int, float],
    excluded_steps: Collection[int] = (),
) -> CommAgreement:
    """Compare DDP's comm time with the harness's span per step (`harness_comm_span_ms`).

    `harness_span_ms` maps a step to that span; `excluded_steps` are steps whose samples must not count
    (warm-up, calibration with the noop hook, the single-bucket first iteration). A ratio a little above 1
    is expected (see the module docstring); below 1 means the two disagree on the window or the step.
    """
    ratios: dict[int, float] = {}
    excess: list[float] = []
    excluded = unmatched = 0
    for sample in samples:
        if sample.step in excluded_steps:
            excluded += 1
            continue
        span = harness_span_ms.get(sample.step)
        if sample.comm_ms is None or span is None or span <= 0:
            unmatched += 1
            continue
        ratios[sample.step] = sample.comm_ms / span
        excess.append(sample.comm_ms - span)
    return CommAgreement(
        compared=len(ratios),
        median_ratio=statistics.median(ratios.values()) if ratios else None,
        median_excess_ms=statistics.median(excess) if excess else None,
        ratios=ratios,
        excluded=excluded,
        unmatched=unmatched,
    )


def harness_comm_span_ms(ready_ms: Iterable[float], finished_ms: Iterable[float]) -> float | None:
    """The harness figure DDP's comm time matches, for one step: the earliest bucket's hook entry ("ready")
    to the latest completion of a future the hook returned ("finished", after any decompression: DDP waits
    on that future, not on the collective), in ms; None for a step without buckets."""
    ready, finished = list(ready_ms), list(finished_ms)
    if not ready or not finished:
        return None
    return max(finished) - min(ready)
