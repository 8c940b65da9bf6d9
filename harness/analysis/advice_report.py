"""The advisor's answer as text and as one JSON object: the inputs it used, the table, the pick, the formulas."""

from __future__ import annotations

import math
from typing import Any

from harness.analysis.advice import (
    Advice,
    confidence,
    describe,
    formulas,
    kappa_range_text,
    picks_across_kappa,
    same_buckets,
)
from harness.analysis.prediction import Network
from harness.analysis.step_model import Candidate, StepPrediction
from harness.common.numbers import is_finite


def train_flags(candidate: Candidate) -> str:
    """The train.py flags that run `candidate`; for a per-bucket list, which train.py cannot set, the caps."""
    if candidate.kind == "list":
        return f"per-bucket caps {candidate.limits_mb()} MiB, which train.py cannot set (DDP takes one cap)"
    cap = "" if candidate.bucket_cap_mb is None else f"--bucket-cap-mb {candidate.bucket_cap_mb:g} "
    return f"{cap}--comm-hook {candidate.hook}"


def how_to_run(candidate: Candidate) -> str:
    """`train.py --bucket-cap-mb 5 --comm-hook fp16`, or for a per-bucket list what it would take."""
    flags = train_flags(candidate)
    return flags if candidate.kind == "list" else f"train.py {flags}"


def network_line(name: str, network: Network | None) -> str:
    if network is None:
        return f"# {name}: none"
    error = network.fit_max_rel_error
    fit = f", fit error up to {100 * error:.0f} %" if is_finite(error) else ""
    return (
        f"# {name}: α = {network.alpha_us:.1f} µs, B_bus = {network.busbw_gbps:.4g} GB/s at {network.ref_world_size} "
        f"ranks{fit} ({network.source})"
    )


def format_advice(advice: Advice, run: str, model: str, sweep: Network | None) -> str:
    inputs, timeline = advice.inputs, advice.inputs.timeline
    current = advice.current
    lines = [
        f"# harness.advise: {model}, run {run} at {advice.run_world_size} ranks; predicting {advice.world_size} ranks",
        f"# the run as measured: {describe(current.candidate)}, step p50 {advice.measured_step_ms:.2f} ms",
        f"# backward timeline: {len(timeline.params)} parameters, forward {timeline.forward_ms:.2f} ms, backward "
        f"{timeline.backward_ms:.2f} ms (median of {timeline.samples} calibration steps, {timeline.time_source})",
        f"# compute-only forward+backward C = {inputs.compute_only_ms:.2f} ms; other (optimizer) "
        f"{inputs.other_ms:.2f} ms",
        network_line("network used", advice.network),
    ]
    if sweep is not None and sweep is not advice.network:
        lines.append(network_line("sweep fit", sweep))
    if sweep is not None and advice.network.source.startswith("in-run"):
        ratio = efficiency(advice.network, sweep)
        lines.append(f"# training's network efficiency (in-run B_bus / sweep B_bus): {ratio}")
    for hook, cost in sorted(inputs.codec.items()):
        lines.append(
            f"# codec {hook}: {cost.fixed_ms:.3f} ms + {cost.ms_per_melement:.3f} ms per million elements "
            f"({cost.source})"
        )
    if inputs.hook_host_ms > 0:
        lines.append(
            f"# host work per bucket on the thread that runs backward: h = {inputs.hook_host_ms:.3f} ms (the hook's "
            "call time less its per-byte part, from the run's buckets)"
        )
    lines.append(
        f"# anchored on the run's own setting: κ = {inputs.kappa:.3f} ms of backward per ms of hidden communication, "
        f"residual {inputs.residual_ms:.2f} ms; κ over the run's 95 % interval: {kappa_range_text(advice)}"
    )
    lines.append(f"# {advice.layout_check}")
    lines += [f"# note: {note}" for note in advice.notes]
    lines += table(advice)
    best = advice.rows[0]
    lines.append(f"# recommendation: {describe(best.candidate)}: {how_to_run(best.candidate)}")
    if best.candidate.kind == "list":
        runner = next((r for r in advice.rows if r.candidate.kind != "list"), None)
        if runner is not None:
            lines.append(f"# best single cap: {describe(runner.candidate)}: {how_to_run(runner.candidate)}")
    lines.append(f"# how sure: {confidence(advice)}")
    lines.append("Formulas:")
    lines += [f"  {f}" for f in formulas()]
    return "\n".join(lines)


def efficiency(inrun: Network, sweep: Network) -> str:
    if sweep.busbw_gbps <= 0 or not math.isfinite(sweep.busbw_gbps):
        return "n/a"
    return f"{inrun.busbw_gbps / sweep.busbw_gbps:.2f}"


def table(advice: Advice) -> list[str]:
    """One line per distinct setting, fastest first: candidates that build the same buckets with the same hook
    (caps above the model's size, a list equal to a cap) share a line, their labels joined."""
    merged: dict[tuple, tuple[list[str], StepPrediction]] = {}
    for row in advice.rows:
        key = (row.candidate.hook, tuple(b.numel for b in row.buckets))
        merged.setdefault(key, ([], row))[0].append(row.candidate.label)
    labelled = [(joined_label(labels), row) for labels, row in merged.values()]
    width = max([len("setting"), *(len(label) for label, _ in labelled)])
    columns = f"{'hook':<9} {'buckets':>7} {'step ms':>9} {'exposed ms':>10} {'comm ms':>9} {'change':>8}"
    lines = [f"{'setting':<{width}} {columns}"]
    for label, row in labelled:
        mark = " *" if same_buckets(row, advice.current) else ""
        lines.append(
            f"{label:<{width}} {row.candidate.hook:<9} {len(row.buckets):>7} {row.step_ms:>9.2f} "
            f"{row.exposed_ms:>10.2f} {row.comm_ms:>9.2f} {change_pct(row, advice):>+7.1f}%{mark}"
        )
    measured_comm = (
        f"; the run's own comm p50 measured {advice.measured_comm_ms:.2f} ms a step"
        if is_finite(advice.measured_comm_ms)
        else ""
    )
    lines += [
        "# change: predicted step against the run's measured step p50; * the run's own buckets and hook; "
        "settings that build the same buckets share a line",
        f"# comm ms: the model's collective time a step at the network used (a fit, not the run's bucket times"
        f"{measured_comm}); step and exposed are what it predicts and is validated on",
    ]
    return lines


def joined_label(labels: list[str]) -> str:
    """One table line's label for candidates that build the same buckets: '2/5/10 MiB, list of 2'."""
    caps = [label.removesuffix(" MiB") for label in labels if label.endswith(" MiB")]
    return ", ".join(([f"{'/'.join(caps)} MiB"] if caps else []) + [x for x in labels if not x.endswith(" MiB")])


def change_pct(row: StepPrediction, advice: Advice) -> float:
    return 100 * (row.step_ms / advice.measured_step_ms - 1) if advice.measured_step_ms > 0 else math.nan


def row_json(row: StepPrediction, advice: Advice) -> dict[str, Any]:
    c = row.candidate
    return {
        "label": c.label,
        "kind": c.kind,
        "bucket_cap_mb": c.bucket_cap_mb,
        "limits_mb": c.limits_mb(),
        "hook": c.hook,
        "buckets": len(row.buckets),
        "predicted_step_ms": row.step_ms,
        "predicted_exposed_ms": row.exposed_ms,
        "predicted_comm_ms": row.comm_ms,
        "predicted_tail_ms": row.tail_ms,
        "predicted_codec_ms": row.codec_ms,
        "change_pct": change_pct(row, advice),
        "train_flags": train_flags(c),
    }


def advice_json(advice: Advice, run: str, sweep: Network | None) -> dict[str, Any]:
    inputs = advice.inputs
    return {
        "run": run,
        "run_world_size": advice.run_world_size,
        "world_size": advice.world_size,
        "measured_step_ms": advice.measured_step_ms,
        "current": row_json(advice.current, advice),
        "recommendation": row_json(advice.rows[0], advice),
        # What train.py can run today (DDP takes one cap): the fastest candidate that is not a per-bucket list.
        "best_single_cap": row_json(next(r for r in advice.rows if r.candidate.kind != "list"), advice),
        "confidence": confidence(advice),
        "rows": [row_json(r, advice) for r in advice.rows],
        "network": vars(advice.network),
        "sweep_network": vars(sweep) if sweep is not None else None,
        "kappa": inputs.kappa,
        "residual_ms": inputs.residual_ms,
        "hook_host_ms": inputs.hook_host_ms,
        "kappa_range": list(inputs.kappa_range),
        "kappa_measured": inputs.kappa_measured,
        "picks_across_kappa": [{"kappa": k, "pick": row_json(p, advice)} for k, p in picks_across_kappa(advice)],
        "compute_only_ms": inputs.compute_only_ms,
        "other_ms": inputs.other_ms,
        "layout_check": advice.layout_check,
        "notes": advice.notes,
        "formulas": formulas(),
    }
