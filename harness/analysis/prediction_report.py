"""The prediction as text: a bucket table, the step totals, measured/predicted, and the formulas with numbers.

Input is the result dict of harness.analysis.prediction.predict, as harness.predict completes it (model,
layout, compute source, formulas, and an `efficiency` prediction when the run differs in world size or hook).
"""

from __future__ import annotations

from typing import Any

from harness.common.metrics import busbw_factor
from harness.common.names import MB
from harness.common.numbers import is_finite, plural


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return format(value, spec) if is_finite(value) else "n/a"


def _pct(share: float | None) -> str:
    return f"{100 * share:.1f} %" if is_finite(share) else "n/a"


def format_report(result: dict[str, Any]) -> str:
    """The whole report: header, the bucket table, step totals, efficiency against a run, the formulas."""
    net, t = result["network"], result["totals"]
    n = result["world_size"]
    lines = [
        f"# harness.predict: {result['model']}, {plural(t['buckets'], 'bucket')} ({result['layout']}), hook "
        f"{result['hook']}, "
        f"world size {n}",
        f"# network: {net['source']}",
        f"# α = {net['alpha_us']:.2f} µs at {plural(net['ref_world_size'], 'rank')}, α({n}) = "
        f"{net['alpha_at_world_size_us']:.2f}"
        f" µs ({net['alpha_scaling']}); B_bus = {net['busbw_gbps']:.4g} GB/s",
    ]
    error = net.get("fit_max_rel_error")
    if net.get("fit_max_size_bytes"):
        lines.append(
            f"# fit: measured over {net['fit_min_size_bytes']:,} to {net['fit_max_size_bytes']:,} bytes, "
            f"its largest relative error there {_pct(error)} (max_rel_error)"
        )
    if result.get("ready_times"):
        lines.append(f"# bucket ready times: {result['ready_times']}")
    lines += [f"# warning: {w}" for w in result.get("warnings", [])]
    lines += _bucket_table(result)
    fit_error = f"; the fit's own error is up to {_pct(error)}" if error is not None else ""
    lines.append(
        f"# predicted comm {t['comm_ms']:.3f} ms per step for {t['bytes_per_step'] / MB:.2f} MB"
        f" (sum of the buckets' times{fit_error})"
    )
    if "exposed_ms" in t:
        measured_ready = str(result.get("ready_times", "")).startswith("measured")
        share = "" if measured_ready else f"backward share {t['backward_share']:.2f} (assumed), "
        lines.append(
            f"# predicted exposed {t['exposed_ms']:.3f} ms of a {t['step_ms']:.3f} ms step "
            f"({100 * t['exposed_share_of_step']:.1f} %; overlap {_fmt(t['overlap_pct'], '.1f')} %); compute-only "
            f"forward+backward {t['compute_ms']:.3f} ms from {result['compute_source']}, {share}"
            f"other {t['other_ms']:.3f} ms"
        )
    else:
        lines.append("# exposure not predicted: give --compute-ms (forward + backward without communication) or --run")
    eff = result.get("efficiency")
    if eff is not None:
        lines.append(
            f"# efficiency against the run {result['run']} at its own world size {eff['world_size']} and hook "
            f"{eff['hook']}:"
        )
        lines += _bucket_table(eff)
        lines += _efficiency_lines(eff)
    elif "run" in result:
        lines += _efficiency_lines(result)
    lines.append("Formulas:")
    lines += [f"  {f}" for f in result["formulas"]]
    lines += _worked_example(result)
    return "\n".join(lines)


def _worked_example(result: dict[str, Any]) -> list[str]:
    """The formulas with this prediction's numbers, for bucket 0."""
    net, n = result["network"], result["world_size"]
    factor = busbw_factor("all_reduce", n)
    lines = [f"  here: n = {n}, 2(n−1)/n = {factor:.4f}, α({n}) = {net['alpha_at_world_size_us']:.2f} µs, "
             f"B_bus = {net['busbw_gbps']:.4g} GB/s"]  # fmt: skip
    if result["buckets"]:
        b = result["buckets"][0]
        lines.append(
            f"  t_0 = {net['alpha_at_world_size_us']:.2f} µs + {b['bytes']} B × {factor:.4f} / "
            f"{net['busbw_gbps']:.4g} GB/s = {b['predicted_ms']:.3f} ms"
        )
    return lines


def _bucket_table(result: dict[str, Any]) -> list[str]:
    measured = "measured_ms" in (result["buckets"][0] if result["buckets"] else {})
    head = f"{'bucket':>6} {'MB':>9} {'predicted ms':>13}"
    if measured:
        head += f" {'measured ms':>12} {'meas/pred':>9}"
    lines = [head]
    for b in result["buckets"]:
        line = f"{b['index']:>6} {b['bytes'] / MB:>9.3f} {b['predicted_ms']:>13.3f}"
        if measured:
            line += f" {_fmt(b['measured_ms']):>12} {_fmt(b['measured_over_predicted'], '.2f'):>9}"
        lines.append(line)
    return lines


def _efficiency_lines(result: dict[str, Any]) -> list[str]:
    t = result["totals"]
    lines = [
        f"# network efficiency (measured/predicted comm per step): {_fmt(t['comm_measured_over_predicted'], '.2f')}"
        f" = {_fmt(t['measured_comm_ms'])} / {t['comm_ms']:.3f} ms"
    ]
    if "measured_exposed_ms" in t:
        lines.append(
            f"# exposed: measured {_fmt(t['measured_exposed_ms'])} ms, predicted {t['exposed_ms']:.3f} ms; step: "
            f"measured {_fmt(t['measured_step_ms'])} ms, predicted {t['step_ms']:.3f} ms"
        )
    if result.get("measured_time_source") in ("ready_to_done", "cpu_clock"):
        lines.append(
            "# measured bucket times are from the CPU clock (gloo): launch to done, so they include waiting behind "
            "the collective gloo runs beside them and the CPU shared with backward"
        )
    return lines
