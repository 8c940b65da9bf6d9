"""End of a training run: the per-bucket table on stdout, and summary.json (TensorBoard's views: dashboards.py).

summary.json is written on rank 0 into the run's log directory, also for a run that did not finish
(with "completed": false and the reason), so nothing measured is lost.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from harness.common.metrics import algbw_gbps, busbw_gbps
from harness.common.names import MB, SUMMARY_FILE, WARMUP_STEPS
from harness.common.run_info import json_safe, run_info
from harness.common.thread_cpu import WAITS_KEY, describe, describe_waits
from harness.train.exposure_estimate import estimate_exposure, reference_ms
from harness.train.step_stats import RunAggregate


def build_summary(
    aggregate: RunAggregate,
    settings: dict[str, Any],
    world_size: int,
    backend: str,
    sample_unit: str,
    completed: bool,
    reason: str = "",
    ddp_logging: dict[str, Any] | None = None,
    ddp_crosscheck: dict[str, Any] | None = None,
    calibration_samples: list[tuple[int, float]] | None = None,
    after_backward_all_reduces: list[tuple[str, int, float]] | None = None,
    calibration_every: int = 0,
    timeline_steps: int = 0,
    last_rank_spread: dict[str, Any] | None = None,
    overhead_s: dict[str, Any] | None = None,
    bootstrap_draws: int = 1000,
    backward_timeline: dict[str, Any] | None = None,
    codec_probe: dict[str, Any] | None = None,
    collectives_at_once: int | None = None,
) -> dict[str, Any]:
    """Everything a later comparison needs, as plain JSON types. Warm-up and calibration steps are excluded.
    The advisor's inputs, null where not measured: "backward_timeline", rank 0's per-parameter gradient-ready
    times from the calibration steps (grad_ready.py), and "codec_probe", the fp16/bf16 codec's cost probed at
    the end of a completed run (codec_probe.py); "after_backward_all_reduces", the calibration steps' all_reduces
    after backward (their averaging, chunk by chunk, and on timeline steps a probe of the compress hooks' dtypes),
    each one's dtype, bytes and ms (calibration.py; empty at world size 1).

    Exposed communication is judged here, step by step, against the calibration samples nearest each step on
    either side, with its 95 % interval (exposure_estimate.py); the per-step TensorBoard series could only use
    the samples taken before each step."""
    calibration_samples = calibration_samples or []
    after_backward_all_reduces = after_backward_all_reduces or []
    buckets = []
    for index in sorted(aggregate.buckets):
        b = aggregate.buckets[index]
        p50 = b.times_ms.percentile(50)
        buckets.append(
            {
                "index": index,
                "num_params": b.num_params,
                "numel": b.numel,
                "bytes": b.bytes,
                "dtype": b.dtype,
                "first_param": b.first_param,
                "last_param": b.last_param,
                "time_ms_p50": p50,
                "time_ms_p90": b.times_ms.percentile(90),
                "busbw_gbps_p50": busbw_gbps("all_reduce", b.bytes, p50 / 1e3, world_size),
                "codec_ms_p50": b.codec_ms.percentile(50),
                "host_ms_p50": b.host_ms.percentile(50),
                "time_source": aggregate.time_source,
            }
        )
    comm_p50 = aggregate.comm_ms.percentile(50)
    step_p50 = aggregate.step_ms.percentile(50)
    exposure_steps = aggregate.exposure_inputs.values
    steps = [row[0] for row in exposure_steps]
    fwd_bwd = np.array([row[1] for row in exposure_steps], dtype=float)
    tails = np.array([row[3] for row in exposure_steps], dtype=float)
    estimate = estimate_exposure(
        steps,
        fwd_bwd,
        [row[2] for row in exposure_steps],
        calibration_samples,
        step_p50,
        draws=bootstrap_draws,
    )
    # Interference (exposed − tail: how much later backward ended than compute-only) with its interval, by the
    # same bootstrap: "exposed" of the time to the last bucket's ready. The advisor fits κ on it.
    interference_estimate = estimate_exposure(
        steps, fwd_bwd - tails, [row[2] for row in exposure_steps], calibration_samples, step_p50,
        draws=bootstrap_draws,
    )  # fmt: skip
    exposed = fwd_bwd - reference_ms(steps, calibration_samples) if steps else np.array([])
    measured = np.isfinite(exposed)
    interference = exposed[measured] - tails[measured]
    exposed = exposed[measured]
    totals = {
        "steps_measured": aggregate.steps_measured,
        "warmup_steps": min(WARMUP_STEPS, aggregate.steps_logged),
        "calibration_steps": len(calibration_samples),
        "timeline_steps": timeline_steps,
        "calibration_every": calibration_every,
        "bytes_per_step": aggregate.step_bytes,
        "step_ms_p50": step_p50,
        "step_ms_p90": aggregate.step_ms.percentile(90),
        "samples_per_s_p50": aggregate.samples_per_s.percentile(50),
        "comm_ms_p50": comm_p50,
        "comm_ms_p90": aggregate.comm_ms.percentile(90),
        "codec_ms_p50": aggregate.codec_ms.percentile(50),
        "max_bucket_ms_p50": aggregate.max_bucket_ms.percentile(50),
        "tail_ms_p50": aggregate.tail_ms.percentile(50),
        "compute_only_ms": aggregate.compute_only_ms,
        "fwd_bwd_ms_p50": aggregate.fwd_bwd_ms.percentile(50),
        **estimate.as_dict(),
        "exposed_ms_p90": float(np.percentile(exposed, 90)) if exposed.size else math.nan,
        "interference_ms_p50": float(np.percentile(interference, 50)) if interference.size else math.nan,
        "interference_ms_ci95": list(interference_estimate.exposed_ms_ci95),
        "time_source": aggregate.time_source,
        "between_steps_ms_p50": aggregate.between_steps_ms.percentile(50),
        "algbw_gbps_p50": algbw_gbps(aggregate.step_bytes, comm_p50 / 1e3),
        "busbw_gbps_p50": busbw_gbps("all_reduce", aggregate.step_bytes, comm_p50 / 1e3, world_size),
        "comm_share_of_step_p50": comm_p50 / step_p50 if step_p50 and not math.isnan(step_p50) else math.nan,
    }
    overhead_s = dict(overhead_s or {})
    if world_size > 1 and "calibration" in overhead_s:
        # What calibrating added beyond the exposure those steps would have paid as measured steps (null: unknown).
        overhead_s["calibration_beyond_exposed"] = calibration_beyond_exposed_s(
            overhead_s["calibration"], totals["calibration_steps"] + totals["timeline_steps"], totals["exposed_ms_p50"]
        )
    return {
        "completed": completed,
        "reason": reason,
        "settings": settings,
        "world_size": world_size,
        "backend": backend,
        # How many of the process group's collectives run at once (dist_env.collectives_at_once; the advisor's
        # step model queues buckets on that many); null where the backend does not say.
        "collectives_at_once": collectives_at_once,
        "sample_unit": sample_unit,
        "totals": totals,
        "buckets": buckets,
        "ddp_logging": ddp_logging or {},
        "ddp_crosscheck": ddp_crosscheck or {},
        "calibration_samples_ms": [ms for _, ms in calibration_samples],
        "calibration_sample_steps": [step for step, _ in calibration_samples],
        # The calibration steps' all_reduces after backward, with nothing else running (calibration.py).
        "after_backward_all_reduces": {
            "dtype": [dtype for dtype, _, _ in after_backward_all_reduces],
            "bytes": [size for _, size, _ in after_backward_all_reduces],
            "ms": [ms for _, _, ms in after_backward_all_reduces],
        },
        "last_rank_spread": last_rank_spread,
        "overhead_s": overhead_s,
        "backward_timeline": backward_timeline,
        "codec_probe": codec_probe,
        **run_info(),
    }


def ddp_logging(ddp_model: Any) -> dict[str, Any]:
    """DDP's own running averages at the end of the run, kept raw in summary.json under "ddp_logging" ({} where
    the model is not DDP-wrapped). They mix every iteration DDP sampled (1–10 and each 100th), warm-up and
    calibration included, so they are not compared with the harness's figures: "ddp_crosscheck" does that
    step by step (ddp_crosscheck.py). DDP's "overlap" is the backward compute left after the first bucket's
    launch, not the harness's overlap (docs/METRICS.md). Times in ns."""
    try:
        data = ddp_model._get_ddp_logging_data()
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
        "prev_iteration_grad_ready_order_indices",
    )
    return {key: data[key] for key in keys if key in data}


def write_summary(summary: dict[str, Any], log_dir: str | os.PathLike) -> Path:
    """Write summary.json atomically: a reader never sees half a file, and one that cannot be written whole
    (a full disk) leaves the previous one as it was. The run's directory must exist: one removed during the
    run is not made again behind the user's back (the failure says what could not be kept)."""
    path = Path(log_dir) / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(json_safe(summary), indent=2, sort_keys=False) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # half a file, on a full disk
        raise
    return path


NAME_WIDTH = 28  # the table's layer-name columns; longer names keep their end, where they differ


def _short(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else "…" + name[-(NAME_WIDTH - 1) :]


def format_table(summary: dict[str, Any]) -> str:
    """The per-bucket table and the step totals, as printed at the end of a run."""
    t = summary["totals"]
    unit = summary["sample_unit"]
    header = (
        f"{'bucket':>6} {'params':>7} {'first layer':<{NAME_WIDTH}} {'last layer':<{NAME_WIDTH}} {'MB':>9} "
        f"{'p50 ms':>9} {'p90 ms':>9} {'busbw GB/s':>10} {'codec ms':>9}"
    )
    lines = [
        f"# Gradient communication: {summary['world_size']} ranks, {summary['backend']}, "
        f"{t['steps_measured']} steps measured after {t['warmup_steps']} warm-up and "
        f"{t['calibration_steps'] + t.get('timeline_steps', 0)} calibration ({t.get('timeline_steps', 0)} of them "
        f"recording the backward timeline); bucket times are collectives only ({t.get('time_source')}), "
        "codec is the hook's own compute",
    ]
    if summary["buckets"]:
        lines.append(header)
    for b in summary["buckets"]:
        lines.append(
            f"{b['index']:>6} {b['num_params']:>7} {_short(b['first_param']):<{NAME_WIDTH}} "
            f"{_short(b['last_param']):<{NAME_WIDTH}} "
            f"{b['bytes'] / MB:>9.2f} {b['time_ms_p50']:>9.3f} {b['time_ms_p90']:>9.3f} {b['busbw_gbps_p50']:>10.2f} "
            f"{b['codec_ms_p50']:>9.3f}"
        )
    if t["steps_measured"] > 0:
        lines.append(
            f"# step p50 {t['step_ms_p50']:.2f} ms (p90 {t['step_ms_p90']:.2f}), {t['samples_per_s_p50']:.1f} {unit}s/s"
        )
    else:
        lines.append("# step: no measured step (every step was warm-up or calibration), so no step time")
    if summary["buckets"] and not math.isnan(t["comm_ms_p50"]):  # none without a timed hook (--comm-hook none)
        lines.append(
            f"# comm p50 {t['comm_ms_p50']:.2f} ms per step (p90 {t['comm_ms_p90']:.2f}) for "
            f"{t['bytes_per_step'] / MB:.2f} MB, busbw {t['busbw_gbps_p50']:.2f} GB/s, slowest bucket "
            f"{t['max_bucket_ms_p50']:.2f} ms; codec {t['codec_ms_p50']:.2f} ms per step"
        )
    if not math.isnan(t["exposed_ms_p50"]):
        lo, hi = t["exposed_ms_ci95"]
        olo, ohi = t["overlap_pct_ci95"]
        lines += [
            f"# exposed p50 {t['exposed_ms_p50']:.2f} ms per step, 95 % interval [{lo:.2f}, {hi:.2f}] "
            f"(a step's is its tail + its interference; their medians {t['tail_ms_p50']:.2f} and "
            f"{t['interference_ms_p50']:.2f}); overlap "
            f"{t['overlap_pct_p50']:.1f} % [{olo:.1f}, {ohi:.1f}]; compute-only forward+backward "
            f"{t['compute_only_ms']:.2f} ms from {t['calibration_steps']} samples, with communication "
            f"{t['fwd_bwd_ms_p50']:.2f} ms",
            f"# {t['exposure_verdict']}",
        ]
    elif t.get("exposure_verdict"):
        lines.append(f"# {t['exposure_verdict']}")
    check = summary.get("ddp_crosscheck") or {}
    if check.get("compared_steps"):
        lines.append(
            f"# DDP's own comm time (first launch → backward finalised) is {check['median_ratio']:.3f}× the harness's "
            f"span (first ready → last finished), median over the {check['compared_steps']} measured steps DDP sampled"
        )
    overhead = summary.get("overhead_s") or {}
    if overhead.get("all_steps"):
        between = overhead.get("between_steps", 0.0)
        run_s = overhead["all_steps"] + between
        calibrated = t["calibration_steps"] + t.get("timeline_steps", 0)
        of_steps = f"{calibrated} of {t['steps_measured'] + t['warmup_steps'] + calibrated} steps"
        calibration = (
            f"{of_steps}, which at world size 1 have no gradients to average"
            if summary["world_size"] == 1
            else f"the gradient all_reduce of {of_steps}, run after backward"
        )
        beyond = overhead.get("calibration_beyond_exposed")
        if beyond is not None:
            calibration += (
                f"; {beyond:.3f} s beyond the {t['exposed_ms_p50']:.2f} ms of exposed communication a measured step "
                f"pays, {100 * (beyond + between) / run_s:.2f} % of the run with the work between steps"
            )
        median_between = (
            f"median {t['between_steps_ms_p50']:.2f} ms a step, " if math.isfinite(t["between_steps_ms_p50"]) else ""
        )
        lines.append(
            f"# harness overhead: calibration {overhead['calibration']:.3f} s ({calibration}), work between steps "
            f"{between:.3f} s ({median_between}rank gathers "
            f"{overhead['rank_gathers'] * 1e3:.1f} ms of it in {overhead['gathers']}): "
            f"{100 * (overhead['calibration'] + between) / run_s:.2f} % of the run's {run_s:.1f} s"
        )
    if overhead.get("loop_cpu_ms_per_step") is not None:
        harness, loop = overhead["harness_cpu_ms_per_step"], overhead["loop_cpu_ms_per_step"]
        worker_ms = overhead.get("step_worker_cpu_ms_per_step") or 0.0
        worker = f", and {worker_ms:.2f} ms on the harness's own thread during backward" if worker_ms > 0 else ""
        events_ms = overhead.get("logging_cpu_ms_per_step")  # absent in runs recorded before 2026-12-07 19:45
        events = f" (its TensorBoard events {events_ms:.2f}, which --log-every N thins)" if events_ms else ""
        callback = f"{overhead['callback_cpu_ms_per_step']:.2f}{events}"
        lines.append(
            f"# harness CPU {harness:.2f} ms of the training loop's {loop:.2f} ms main-thread CPU per step "
            f"({100 * harness / loop:.1f} %: callback {callback}, progress bar "
            f"{overhead['progress_bar_cpu_ms_per_step']:.2f}), steps {overhead['cpu_window_first_step']}–"
            f"{overhead['cpu_window_last_step']} on rank 0 (wall {overhead['wall_ms_per_step']:.2f} ms, process "
            f"{overhead['process_cpu_ms_per_step']:.2f} ms CPU per step){worker}; a step without hook and logging "
            "cannot run in the same run (DDP takes one comm hook for its life): bench.vs_plain compares "
            "--comm-hook none"
        )
        if threads := overhead.get("thread_cpu_ms_per_step"):
            roles = (
                "; main launches forward and the optimizer, pt_autograd_N backward and the comm hook"
                if summary.get("backend") == "nccl"
                else ""
            )
            lines.append(
                f"# CPU ms per step by thread, same steps: {describe(threads)} (wall {overhead['wall_ms_per_step']:.2f}"
                f" ms{roles})"
            )
        waits = overhead.get(WAITS_KEY)
        if waits is not None:  # absent in runs before it was kept, None where the kernel keeps no schedstat
            lines.append(
                "# waited for a CPU while ready to run (another task held it), ms per step by thread, same steps: "
                + describe_waits(waits)
            )
    if summary["world_size"] == 1:
        lines.append("# world size 1: busbw is 0 by definition (no data crosses a link)")
    return "\n".join(lines)


def calibration_beyond_exposed_s(calibration_s: float, steps: int, exposed_ms_p50: float) -> float | None:
    """What calibrating added to the run beyond what those `steps` would have cost as measured steps: each
    averages its gradients after backward (`calibration_s` in all) but skips the exposed communication a measured
    step pays (exposed p50, which is the measured step's forward + backward less the compute-only one). None where
    the run has no exposed figure; never below 0."""
    if steps <= 0 or not math.isfinite(exposed_ms_p50):
        return None
    return max(0.0, calibration_s - steps * max(0.0, exposed_ms_p50) / 1e3)
