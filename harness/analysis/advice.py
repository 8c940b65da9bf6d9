"""The advisor's answer: every candidate bucket cap, list and hook predicted from one run, and the pick.

From a run's summary.json: its backward timeline and codec probe (harness.analysis.backward_timeline), its
compute-only step, its measured step, and a network (the in-run fit of its own buckets, a sweep's fit, or
α and the bus bandwidth given). The step model (harness.analysis.step_model) is anchored on the run's own
setting, then predicts each candidate at the run's world size or another. The recommendation is the
fastest candidate; how sure it is compares the gap to the runner-up with the model's error measured in
validation (VALIDATED_ERROR, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from harness.analysis.backward_timeline import read_codec_costs, read_timeline
from harness.analysis.prediction import Network
from harness.analysis.step_model import (
    ADVISOR_CAPS_MB,
    FORMULAS,
    Candidate,
    MeasuredSetting,
    StepInputs,
    StepPrediction,
    anchor,
    assign_buckets,
    best_list,
    cap_candidate,
    default_candidate,
    predict_candidate,
    run_candidate,
)
from harness.common.cli import UsageError
from harness.common.metrics import fit_alpha_beta, percentile
from harness.common.names import COMPRESS_HOOKS, GLOO_DEFAULT_THREADS
from harness.common.numbers import is_finite
from harness.common.openmp_spin import CAUSE, MEASURED, REMEDY, REMEDY_CAVEAT, conditions_text, spun_hooks

ADVISOR_HOOKS = ("allreduce", "fp16", "bf16")
# Two settings predicted within this fraction of each other are a tie, not a different answer.
TIE_FRACTION = 0.005
# The step model's |error| on CPU gloo: the median and the worst over every setting predicted by this model in the
# grids kept in docs/validation/ (`python -m bench.advisor_validation --pool docs/validation/2026-12-06_*.md`),
# besides each base run's own, each grid's default-cap allreduce runs the base in turn. A gap between two candidates
# smaller than the median is not a prediction the model can make. 189 predictions in 11 grids of 2026-12-06: resnet50
# and gpt2 at 2 loopback ranks and on two tbf-shaped hosts (2-core machine; 84 predictions, median 3.8 %, worst
# 13.2 %), and at 4 loopback ranks of 4 threads each on 16 cores: with OpenMP's wait policy unset resnet50 6.0 %,
# 53.6 % (the worst its fp16 rows under OpenMP's spin, see compressed_rows_note) and gpt2 15.2 %, 29.9 % (two leases
# 2.5 h apart); with OMP_WAIT_POLICY=PASSIVE resnet50 9.7 %, 20.8 %, then 13.0 %, 25.7 %, then 5.6 %, 13.6 %, then
# 7.1 %, 20.2 % (four machines; in the second, four runs computed 1.3-2.0x slower than the rest, the host's drift,
# counted here as measured) and gpt2 4.3 %, 10.1 %. Each as its kept report has it, predicted by the model of its day.
# The 2026-12-05 grids (gpt_tiny's among them) were predicted before two of the model's rules and not kept.
VALIDATED_ERROR = {
    "median": 0.056,
    "worst": 0.54,
    "where": (
        "CPU gloo only: resnet50 and gpt2 at 2 and 4 loopback ranks and on two tbf-shaped hosts, each prediction "
        "from one run"
    ),
}


@dataclass(frozen=True)
class Advice:
    rows: list[StepPrediction]
    """Every candidate, fastest first."""
    current: StepPrediction
    """The run's own setting, at the world size predicted."""
    measured_step_ms: float
    world_size: int
    run_world_size: int
    inputs: StepInputs
    network: Network
    layout_check: str
    notes: list[str]
    across_kappa: list[tuple[float, StepPrediction, StepPrediction]]
    """With κ at each end of its range (kappa_range), where that differs from κ: (κ, the fastest candidate
    there, the pick made at κ itself predicted there)."""
    measured_comm_ms: float = math.nan
    """The run's comm p50 a step as measured: its collectives beside backward, where the model's comm is theirs at
    the network's rates."""


def step_inputs(summary: dict[str, Any], run: str) -> StepInputs:
    """The run's timeline, compute-only step, rest of the step and codec costs; a UsageError saying what is
    missing."""
    path = f"{run}/summary.json"
    timeline = read_timeline(summary, path)
    if timeline is None:
        raise UsageError(
            f"--run {run!r} has no backward timeline (it is recorded in calibration steps; the run had none, or "
            "was made by an older train.py): run train.py again with --calibration-steps 3 or more"
        )
    totals = summary.get("totals", {})
    compute = totals.get("compute_only_ms")
    if not is_finite(compute):
        raise UsageError(f"--run {run!r} has no compute-only step (compute_only_ms); it needs calibration steps")
    step, fwd_bwd = totals.get("step_ms_p50"), totals.get("fwd_bwd_ms_p50")
    if not (is_finite(step) and is_finite(fwd_bwd)):
        raise UsageError(f"--run {run!r} measured no step (step_ms_p50, fwd_bwd_ms_p50): too few steps?")
    inputs = StepInputs(timeline, compute, max(0.0, step - fwd_bwd), read_codec_costs(summary, path))
    inputs.hook_host_ms = hook_host_cost(summary)
    inputs.collectives_at_once = collectives_at_once(summary)
    return inputs


def collectives_at_once(summary: dict[str, Any]) -> int:
    """L (step_model.FORMULAS): how many collectives the run's process group ran at once, as train.py recorded
    it; for a run recorded before it did, gloo's default worker threads, and 1 for NCCL."""
    recorded = summary.get("collectives_at_once")
    if isinstance(recorded, int) and recorded > 0:
        return recorded
    return GLOO_DEFAULT_THREADS if summary.get("backend") == "gloo" else 1


def hook_host_cost(summary: dict[str, Any]) -> float:
    """h (step_model.FORMULAS): what one more bucket costs the thread that runs backward, in ms. The hook's call
    time on its thread, entry to return (summary.json's buckets, host_ms_p50), holds a part per byte (on the CPU
    the division by the world size is a pass over the bucket) and a part per bucket (the record, the launch, the
    future); fitted as fixed + per byte over the run's buckets (metrics.fit_alpha_beta, the codec probe's fit), h
    is the fixed part, or the median call time where the buckets have one size. From an allreduce run only: a
    compress hook's call holds its cast, already charged as codec. Charged on CPU gloo only, where
    the hook runs on the thread that runs backward (cpu_clock times); on the GPU it runs beside the GPU's queue
    and costs the step only where the host bounds it, which one run cannot tell: 0."""
    buckets = [b for b in summary.get("buckets", []) if is_finite(b.get("host_ms_p50")) and b.get("bytes")]
    if not buckets or any(b.get("time_source") != "cpu_clock" for b in buckets):
        return 0.0
    if (summary.get("settings") or {}).get("comm_hook") in COMPRESS_HOOKS:
        return 0.0  # its call holds the cast, whose fixed part the codec cost k already charges
    fitted = fit_alpha_beta([b["bytes"] for b in buckets], [1e3 * b["host_ms_p50"] for b in buckets])
    if fitted is None:
        return percentile([b["host_ms_p50"] for b in buckets], 50)
    return fitted[0] / 1e3


def candidates(hooks: list[str], caps_mb: tuple[float, ...], network: Network, world: int, inputs: StepInputs):
    """Every cap, DDP's default, and the best per-bucket list, for each hook."""
    out: list[Candidate] = []
    for hook in hooks:
        out.append(default_candidate(hook))
        out += [cap_candidate(cap, hook) for cap in caps_mb]
        out.append(best_list(hook, network, world, inputs, caps_mb))
    return out


def advise(
    summary: dict[str, Any],
    run: str,
    network: Network,
    world_size: int | None = None,
    hooks: list[str] | None = None,
    caps_mb: tuple[float, ...] = ADVISOR_CAPS_MB,
) -> Advice:
    """Predict every candidate from the run; the run's own setting anchors the model (step_model.anchor)."""
    inputs = step_inputs(summary, run)
    settings, totals = summary["settings"], summary["totals"]
    run_hook = settings.get("comm_hook") or "allreduce"
    if run_hook not in ADVISOR_HOOKS:
        raise UsageError(
            f"--run used --comm-hook {run_hook}, which the model does not cover; give a run with one of "
            f"{', '.join(ADVISOR_HOOKS)}"
        )
    hooks = hooks or list(ADVISOR_HOOKS)
    notes = []
    missing = [h for h in hooks if h in COMPRESS_HOOKS and h not in inputs.codec]
    if missing:
        notes.append(f"{', '.join(missing)} left out: the run has no codec probe to give their cast's cost")
        hooks = [h for h in hooks if h not in missing]
    if (note := compressed_rows_note(summary, hooks)) is not None:
        notes.append(note)
    if run_hook in COMPRESS_HOOKS and run_hook not in inputs.codec:
        raise UsageError(f"--run used --comm-hook {run_hook} but has no codec probe: run it with a newer train.py")
    run_world = summary["world_size"]
    world = world_size or run_world
    if world > run_world and summary.get("backend") == "gloo" and (settings.get("num_nodes") or 1) == 1:
        notes.append(shared_cores_note(run_world, world, settings.get("cpu_threads")))
    current_setting = run_candidate(settings.get("bucket_cap_mb"), run_hook)
    measured = measured_setting(totals)
    anchor(inputs, current_setting, network, run_world, measured)
    rows = predict_all(hooks, caps_mb, network, world, inputs)
    current = predict_candidate(current_setting, network, world, inputs)
    # The pick again with κ at each end of its range: does the run's noise change it?
    picks = []
    for kappa in inputs.kappa_range:
        varied = replace(inputs, kappa=kappa, residual_ms=0.0)
        if not math.isclose(kappa, inputs.kappa, abs_tol=1e-3):
            # The residual again, so that the run's own setting still predicts what it measured.
            own = predict_candidate(current_setting, network, run_world, varied)
            varied.residual_ms = measured.fwd_bwd_ms - own.fwd_bwd_ms
            ours = predict_candidate(rows[0].candidate, network, world, varied)
            picks.append((varied.kappa, predict_all(hooks, caps_mb, network, world, varied)[0], ours))
    return Advice(
        rows=rows,
        current=current,
        measured_step_ms=totals["step_ms_p50"],
        world_size=world,
        run_world_size=run_world,
        inputs=inputs,
        network=network,
        layout_check=layout_check(summary, inputs, current_setting),
        notes=notes,
        across_kappa=picks,
        measured_comm_ms=totals.get("comm_ms_p50") if is_finite(totals.get("comm_ms_p50")) else math.nan,
    )


def shared_cores_note(run_world: int, world: int, cpu_threads: int | None) -> str:
    """What a larger world on the run's own machine changes that the model holds fixed, as measured."""
    if cpu_threads:
        return (
            f"the run's {run_world} ranks shared one machine's CPU cores; with --cpu-threads {cpu_threads} each rank "
            f"computes alike at {world} ranks, but there the ranks' compute threads take the cores that "
            "communication used, which then slows backward more than the run saw (resnet50 on 16 cores, 4 threads a "
            "rank: compute-only 187 ms at 2 ranks and 176-192 at 3 and 4, exposed 1 ms at 2 and 15-57 at 3 and 4, "
            "steps predicted 14 and 19 % short, docs/BENCHMARKS.md): read it as a lower bound"
        )
    return (
        f"the run's {run_world} ranks shared one machine's CPU cores; the model keeps each rank's compute as "
        f"measured, but {world} ranks on the same cores each compute slower (resnet50 at 3 and 4 ranks on 2 "
        "cores: compute-only 1.6× and 2.2× that at 2, docs/BENCHMARKS.md): predict from a run whose ranks have "
        "cores of their own, or give it --cpu-threads"
    )


def compressed_rows_note(summary: dict[str, Any], hooks: list[str]) -> str | None:
    """A warning where the compress hooks' rows are known to come out too fast: a CPU gloo run whose ranks' OpenMP
    teams could spin (openmp_spin: several intra-op threads a rank, or an unrecorded number, and OMP_WAIT_POLICY not
    PASSIVE, or not recorded), whatever hook it ran. The model charges the codec as probed alone, and does not
    model the spin. None where no such row is predicted, or no team spun (the 2-core machine's grids of one thread
    a rank, where fp16 predicted well)."""
    ranks = summary.get("ranks") or []
    env = summary.get("env") or {}
    spun = spun_hooks(hooks, str(summary.get("backend")), ranks, env)
    if not spun:
        return None
    return (
        f"{', '.join(spun)} rows are likely too fast here ({conditions_text(ranks, env, summary.get('env_prefixes'))}):"
        f" {CAUSE}; {MEASURED}. The model predicted that step 52-54 % short, and within 21 % with {REMEDY}. "
        f"{REMEDY_CAVEAT}; or --verify before choosing one"
    )


def predict_all(
    hooks: list[str], caps_mb: tuple[float, ...], network: Network, world: int, inputs: StepInputs
) -> list[StepPrediction]:
    """Every candidate predicted, fastest first."""
    rows = [predict_candidate(c, network, world, inputs) for c in candidates(hooks, caps_mb, network, world, inputs)]
    return sorted(rows, key=lambda r: r.step_ms)


def measured_setting(totals: dict[str, Any]) -> MeasuredSetting:
    """What the run measured at its own setting (step_model.MeasuredSetting): its forward+backward, its
    interference and that's 95 % interval (for a run made before train.py gave one, the exposed interval's
    reach: both hold the compute-only samples' noise, and the exposed one the tail's too)."""
    interference = totals.get("interference_ms_p50")
    if not is_finite(interference):
        return MeasuredSetting(totals["fwd_bwd_ms_p50"])
    interval = totals.get("interference_ms_ci95")
    point = interference
    if not interval or not all(is_finite(x) for x in interval):
        interval, point = totals.get("exposed_ms_ci95"), totals.get("exposed_ms_p50")
    if not interval or not is_finite(point) or not all(is_finite(x) for x in interval):
        return MeasuredSetting(totals["fwd_bwd_ms_p50"], interference)
    noise = (max(0.0, point - interval[0]), max(0.0, interval[1] - point))
    return MeasuredSetting(totals["fwd_bwd_ms_p50"], interference, noise)


def layout_check(summary: dict[str, Any], inputs: StepInputs, setting: Candidate) -> str:
    """Whether the buckets rebuilt from the measured timeline at the run's own setting are DDP's, as the run's
    summary.json measured them (bucket elements, in order): the check that the model's buckets are real."""
    measured = [b["numel"] for b in sorted(summary.get("buckets", []), key=lambda b: b["index"])]
    rebuilt = [b.numel for b in assign_buckets(inputs.timeline.ready_order(), setting.limits_bytes)]
    if not measured:
        return "the run measured no buckets to check the rebuilt layout against"
    if rebuilt == measured:
        return f"the {len(rebuilt)} buckets rebuilt from the measured timeline are the run's own, element for element"
    return (
        f"warning: the buckets rebuilt from the measured timeline ({len(rebuilt)}: {rebuilt[:6]}) differ from the "
        f"run's ({len(measured)}: {measured[:6]}); gradients were ready in another order in the run's step 0"
    )


def confidence(advice: Advice) -> str:
    """How sure the pick is: its lead over the runner-up (another layout or hook), against the validated error."""
    best = advice.rows[0]
    runner = next((r for r in advice.rows[1:] if not same_buckets(r, best)), None)
    lead_current = 1 - best.step_ms / advice.current.step_ms if advice.current.step_ms > 0 else math.nan
    median, worst = VALIDATED_ERROR["median"], VALIDATED_ERROR["worst"]
    parts = [f"predicted {100 * lead_current:.1f} % faster than the run's setting"]
    if runner is not None:
        lead = 1 - best.step_ms / runner.step_ms
        parts.append(f"{100 * lead:.1f} % ahead of the next different setting ({describe(runner.candidate)})")
    else:
        lead = math.nan
    for kappa, pick in picks_across_kappa(advice):
        parts.append(
            f"not resolved by this run: with κ = {kappa:.2f} (its 95 % range, {kappa_range_text(advice)}) the "
            f"model picks {describe(pick.candidate)}; --verify settles it"
        )
    seen = f"seen in validation ({VALIDATED_ERROR['where']}; docs/BENCHMARKS.md)"
    if not is_finite(median):
        parts.append("the model's error is not validated on this kind of machine: run --verify")
    elif min(lead, lead_current) > worst:
        parts.append(f"clear: the lead exceeds the worst step error {seen}, {100 * worst:.0f} %")
    elif min(lead, lead_current) > median:
        parts.append(
            f"likely: the lead exceeds the median step error {seen}, {100 * median:.0f} %, but not the worst, "
            f"{100 * worst:.0f} %; --verify settles it"
        )
    else:
        parts.append(
            f"not resolved: the lead is within the median step error {seen}, {100 * median:.0f} %; --verify settles it"
        )
    return "; ".join(parts)


def picks_across_kappa(advice: Advice) -> list[tuple[float, StepPrediction]]:
    """(κ, pick) at the ends of κ's range where another setting would be picked, by more than a tie: more than
    TIE_FRACTION faster there than the pick made at κ itself."""
    return [
        (kappa, fastest)
        for kappa, fastest, ours in advice.across_kappa
        if not same_buckets(fastest, ours) and fastest.step_ms < (1 - TIE_FRACTION) * ours.step_ms
    ]


def kappa_range_text(advice: Advice) -> str:
    low, high = advice.inputs.kappa_range
    text = f"{low:.2f} to {high:.2f}"
    if not advice.inputs.kappa_measured:
        text += ", not measured: the run hid no communication under backward"
    return text


def same_buckets(a: StepPrediction, b: StepPrediction) -> bool:
    """Two candidates that build the same buckets with the same hook are one setting."""
    return a.candidate.hook == b.candidate.hook and [x.numel for x in a.buckets] == [x.numel for x in b.buckets]


def describe(candidate: Candidate) -> str:
    return f"{candidate.label}, {candidate.hook}"


def formulas() -> list[str]:
    return list(FORMULAS)
