"""Predict a training step's gradient communication from a sweep's α and β, for any world size and network.

    python -m harness.predict --sweep sweep.jsonl --model resnet50 --world-size 64
    python -m harness.predict --model resnet50 --world-size 64 --alpha-us 30 --busbw-gbps 50   # 400 Gb/s
    python -m harness.predict --sweep sweep.jsonl --run runs/NAME/VERSION        # measured / predicted

The bucket layout comes from a run's summary.json (`--run`, exact) or from DDP's own bucket assignment
applied to the model (`--model`, harness.analysis.bucket_layout). Each bucket's all_reduce time follows the α-β
model with the ring's bus-bandwidth factor; buckets are reduced one after another, each starting once
its gradients are ready, and whatever runs past the end of backward is exposed. Every formula is printed
with the numbers (FORMULAS), and `--json` writes the same as one object (before the report is printed, so
`| head` does not lose it).

Inputs are checked where they are read: a sweep line that is not JSON, a fit that cannot describe a network
(β <= 0, α < 0, a value not finite), a summary.json of the wrong shape are each one line naming the file, the
field and what was expected, and exit 2. The sweep's fit holds for the sizes it measured: buckets outside them
are refused unless `--extrapolate` is given (then a warning says so), and the fit's own error is shown with
the prediction.

This file is the command line alone: the model is harness.analysis.prediction, the text
harness.analysis.prediction_report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from harness.analysis.backward_timeline import read_timeline
from harness.analysis.bucket_layout import PlannedBucket, layout_from_summary, model_bucket_layout
from harness.analysis.checked import BadFile, check_outputs, write_output
from harness.analysis.prediction import (
    ALPHA_SCALINGS,
    ASSUMED_READY,
    DEFAULT_BACKWARD_SHARE,
    FORMULAS,
    HOOKS,
    MEASURED_READY,
    Network,
    add_efficiency,
    check_fit_range,
    network_from_sweep,
    other_ms_of_run,
    predict,
)
from harness.analysis.prediction_report import format_report
from harness.analysis.runs import read_summary
from harness.common.cli import OneLineParser, UsageError, run_cli
from harness.common.failures import say
from harness.common.names import SUMMARY_FILE, WARMUP_STEPS
from harness.common.numbers import is_finite
from harness.common.run_info import json_safe

PROG = "python -m harness.predict"
# DDP takes its cap in bytes as a C size; 1 TiB is beyond any model's gradients and far inside that range.
MAX_BUCKET_CAP_MB = 2**20


def build_parser() -> argparse.ArgumentParser:
    """The command line; a mistake is one line and exit 2 (OneLineParser, through run_cli)."""
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0] + " Formulas are printed with the results.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n\n")[1:2]),
    )
    net = parser.add_argument_group("network (a sweep, or α and the bus bandwidth; either overrides the sweep's)")
    net.add_argument("--sweep", metavar="PATH", help="raw_sweep JSON Lines (--json) with an all_reduce fit")
    net.add_argument("--alpha-us", type=float, help="all_reduce latency α in µs (at the sweep's world size)")
    net.add_argument(
        "--busbw-gbps",
        type=float,
        help="bus bandwidth per rank in GB/s (bytes; a 400 Gb/s link is 50); nccl-tests' busbw of large sizes",
    )
    net.add_argument(
        "--alpha-scaling",
        choices=ALPHA_SCALINGS,
        default="constant",
        help="α at another world size: constant (default), or ring: proportional to n−1",
    )
    net.add_argument(
        "--extrapolate",
        action="store_true",
        help="predict buckets outside the sizes the sweep measured (refused otherwise; a warning says so)",
    )
    what = parser.add_argument_group("what is trained")
    what.add_argument("--model", help="registered model name: its buckets from DDP's assignment rule")
    what.add_argument("--run", metavar="DIR", help="a train.py run directory: its measured buckets and times")
    what.add_argument("--world-size", type=int, help="ranks to predict for (default: the run's, else the sweep's)")
    what.add_argument("--bucket-cap-mb", type=float, help="DDP bucket cap in MiB (default DDP's 25, 1 MiB first)")
    what.add_argument("--comm-hook", choices=HOOKS, help="allreduce, fp16 or bf16 (default: the run's, else allreduce)")
    step = parser.add_argument_group("exposure (needs the compute time)")
    step.add_argument("--compute-ms", type=float, help="forward + backward without communication, ms (default: run's)")
    step.add_argument(
        "--backward-share",
        type=float,
        help="share of --compute-ms spent in backward, where no run's timeline gives the ready times (default 2/3)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the prediction as one JSON object")
    return parser


def load_summary(run_dir: str) -> dict[str, Any]:
    """A --run's summary.json, which must hold measured buckets; a UsageError saying what is wrong otherwise."""
    path = Path(run_dir) / SUMMARY_FILE
    if not os.path.exists(run_dir):  # a dangling link too
        raise UsageError(f"--run {run_dir!r} does not exist")
    if not os.path.isdir(run_dir):
        raise UsageError(
            f"--run {run_dir!r} is a file; give the run's directory, as train.py's last line names it "
            "(<logdir>/<run name>/<version>)"
        )
    if not os.path.lexists(path):
        raise UsageError(
            f"--run {run_dir!r} has no {SUMMARY_FILE}; give a run's directory, as train.py's last line names it "
            "(<logdir>/<run name>/<version>)"
        )
    try:
        summary = read_summary(path)
    except BadFile as err:
        raise UsageError(f"--run: {err}") from None
    if not summary.get("buckets"):
        raise UsageError(
            f"--run {run_dir!r} measured no buckets (too few steps after the {WARMUP_STEPS} warm-up steps?)"
        )
    if (summary["settings"].get("comm_hook") or "allreduce") == "allreduce":
        # Unhooked, a bucket's bytes are its gradients': numel × the element size, which predict takes from them.
        for i, bucket in enumerate(summary["buckets"]):
            if bucket["bytes"] not in [bucket["numel"] * size for size in (1, 2, 4, 8)]:
                raise UsageError(
                    f"--run: {path}: buckets[{i}].bytes is {bucket['bytes']}; expected numel ({bucket['numel']}) "
                    "× 1, 2, 4 or 8 bytes per element"
                )
    return summary


def resolve_network(args: argparse.Namespace) -> Network:
    """--sweep's fit, with --alpha-us and --busbw-gbps overriding it; or those two alone."""
    # Written as `not (in range)` so that NaN, which compares False with everything, is refused too.
    if args.alpha_us is not None and not 0 <= args.alpha_us < math.inf:
        raise UsageError(f"--alpha-us must be >= 0 and finite, got {args.alpha_us}")
    if args.busbw_gbps is not None and not 0 < args.busbw_gbps < math.inf:
        raise UsageError(f"--busbw-gbps must be positive and finite, got {args.busbw_gbps}")
    if args.sweep is None:
        if args.alpha_us is None or args.busbw_gbps is None:
            raise UsageError("give --sweep PATH, or both --alpha-us and --busbw-gbps")
        return Network(args.alpha_us, args.busbw_gbps, 0, args.alpha_scaling, "given on the command line")
    net = network_from_sweep(args.sweep, args.alpha_scaling)
    if args.alpha_us is None and args.busbw_gbps is None:
        return net
    given = ", ".join(f for f, v in (("α", args.alpha_us), ("busbw", args.busbw_gbps)) if v is not None)
    return dataclasses.replace(
        net,
        alpha_us=net.alpha_us if args.alpha_us is None else args.alpha_us,
        busbw_gbps=net.busbw_gbps if args.busbw_gbps is None else args.busbw_gbps,
        source=f"{net.source}; {given} given",
        # A given bandwidth holds at every size: the fit's range and error then speak only for its α.
        fit_range_bytes=net.fit_range_bytes if args.busbw_gbps is None else None,
    )


def check_args(args: argparse.Namespace) -> None:
    """Mistakes that need no file read, as one-line UsageErrors."""
    if args.world_size is not None and args.world_size < 1:
        raise UsageError(f"--world-size must be at least 1, got {args.world_size}")
    if args.compute_ms is not None and not 0 <= args.compute_ms < math.inf:
        raise UsageError(f"--compute-ms must be >= 0 and finite, got {args.compute_ms}")
    if args.backward_share is not None and not 0 <= args.backward_share <= 1:
        raise UsageError(f"--backward-share must be between 0 and 1, got {args.backward_share}")
    if args.bucket_cap_mb is not None and not 0 < args.bucket_cap_mb <= MAX_BUCKET_CAP_MB:
        raise UsageError(
            f"--bucket-cap-mb must be positive and at most {MAX_BUCKET_CAP_MB} (1 TiB), got {args.bucket_cap_mb}"
        )
    if args.model is None and args.run is None:
        raise UsageError("give --model NAME (buckets from DDP's rule) or --run DIR (measured buckets)")
    if args.run is not None and args.bucket_cap_mb is not None:
        raise UsageError("--bucket-cap-mb applies to --model; a --run has its measured buckets")
    inputs = [p for p in (args.sweep, args.run and str(Path(args.run) / SUMMARY_FILE)) if p]
    check_outputs({"--json": args.json}, inputs)


def resolve_layout(args: argparse.Namespace, summary: dict[str, Any] | None) -> tuple[list[PlannedBucket], str, str]:
    """(buckets, where they come from, model name): the run's measured ones, else DDP's rule on the model."""
    if summary is not None:
        run_model = summary["settings"].get("model") or "?"
        if args.model is not None and args.model != run_model:
            raise UsageError(f"--model {args.model} differs from the run's model {run_model}")
        return layout_from_summary(summary), f"measured in {args.run}", run_model
    from models import get_model_spec

    get_model_spec(args.model)  # a UsageError naming the models
    layout = "DDP's bucket assignment, gradients taken as ready in reverse registration order"
    return model_bucket_layout(args.model, args.bucket_cap_mb), layout, args.model


def predict_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The prediction the command line asks for, as one dict (what --json writes); UsageError on a mistake."""
    check_args(args)
    network = resolve_network(args)
    summary = load_summary(args.run) if args.run else None
    buckets, layout, model = resolve_layout(args, summary)
    run = summary["totals"] if summary else {}
    run_hook = (summary["settings"].get("comm_hook") or "allreduce") if summary else None
    run_world = summary["world_size"] if summary else None
    hook = args.comm_hook or run_hook or "allreduce"
    if hook not in HOOKS:
        raise UsageError(f"the run used --comm-hook {hook}, which is not modelled; give --comm-hook {'/'.join(HOOKS)}")
    world_size = args.world_size or run_world or network.ref_world_size
    if not world_size:
        raise UsageError("give --world-size (no sweep or run to take it from)")
    if network.ref_world_size == 0:  # α was given for the world size predicted
        network = Network(network.alpha_us, network.busbw_gbps, world_size, network.alpha_scaling, network.source)
    compute_ms, compute_source = args.compute_ms, "--compute-ms"
    if compute_ms is None and is_finite(run.get("compute_only_ms")):
        compute_ms, compute_source = run["compute_only_ms"], f"the run's compute-only step ({args.run})"
    other_ms = other_ms_of_run(run)  # the optimizer and the rest of a step; 0 without a run
    ready_ms, ready_note = measured_ready(summary, args.run, buckets, compute_ms) if summary else (None, "")
    if args.backward_share is not None and (compute_ms is None or ready_ms is not None):
        # Where it would change nothing, a given share is a mistake about what predict does, not a no-op to hide.
        raise UsageError(
            "--backward-share places assumed ready times within --compute-ms: "
            + ("give --compute-ms too" if compute_ms is None else "this run's measured timeline gives them")
        )
    share = DEFAULT_BACKWARD_SHARE if args.backward_share is None else args.backward_share
    result = predict(buckets, network, world_size, hook, compute_ms, other_ms, share, ready_ms)
    result.update(model=model, layout=layout, compute_source=compute_source if compute_ms is not None else None)
    if summary is not None and run_hook in HOOKS:
        # Efficiency compares like with like: the run's own world size and hook, whatever is predicted above.
        if (world_size, hook) == (run_world, run_hook):
            add_efficiency(result, summary)
        else:
            result["efficiency"] = predict(buckets, network, run_world, run_hook, compute_ms, other_ms, share, ready_ms)
            add_efficiency(result["efficiency"], summary)
        result["run"] = args.run
    sizes = [b["bytes"] for r in (result, result.get("efficiency") or {"buckets": []}) for b in r["buckets"]]
    warning = check_fit_range(network, sizes, args.extrapolate, args.sweep)
    result["warnings"] = [warning] if warning else []
    if summary is not None and not summary["completed"]:
        reason = summary.get("reason") or "no reason recorded"
        result["warnings"].append(
            f"--run {args.run!r} did not complete ({reason}): its figures are of the steps it ran"
        )
    formulas = list(FORMULAS)
    if ready_ms is not None:
        formulas[formulas.index(ASSUMED_READY)] = MEASURED_READY
    result["formulas"] = formulas
    result["ready_times"] = ready_note or "assumed in proportion to bytes over backward (no --run with a timeline)"
    return result


def measured_ready(
    summary: dict[str, Any], run: str, buckets: list[PlannedBucket], compute_ms: float | None
) -> tuple[list[float] | None, str]:
    """Each of the run's buckets' ready time from the start of forward, from its measured backward timeline
    (the buckets rebuilt from the timeline must be the run's own), and a line saying where they came from.

    The timeline's steps are slower than the compute-only step C (a stamp per parameter inside backward:
    bench.timeline_cost), so its times are scaled onto C, keeping their shape: otherwise the last bucket would be
    ready after the backward that `exposed` is measured from, and a step would expose more than its communication."""
    from harness.analysis.step_model import assign_buckets, run_candidate

    timeline = read_timeline(summary, f"{run}/{SUMMARY_FILE}")
    if timeline is None:
        return None, "assumed in proportion to bytes over backward: the run has no backward timeline"
    setting = run_candidate(summary["settings"].get("bucket_cap_mb"), "allreduce")
    rebuilt = assign_buckets(timeline.ready_order(), setting.limits_bytes)
    if [b.numel for b in rebuilt] != [b.numel for b in buckets]:
        return None, (
            "assumed in proportion to bytes over backward: the buckets rebuilt from the run's timeline differ from "
            "its measured ones"
        )
    span = timeline.forward_ms + timeline.backward_ms
    scale = compute_ms / span if compute_ms is not None and span > 0 else 1.0
    ready = [(timeline.forward_ms + b.ready_ms) * scale for b in rebuilt]
    source = f"{timeline.samples} calibration steps, {timeline.time_source}"
    scaled = f"; its {span:.2f} ms scaled to C = {compute_ms:.2f} ms" if scale != 1.0 else ""
    return ready, f"measured: the run's backward timeline ({source}{scaled})"


def main(argv: list[str] | None = None) -> int:
    """Print the report (and write --json first); 0, or a UsageError for run_cli to report."""
    args = build_parser().parse_args(argv)
    try:
        result = predict_from_args(args)
    except BadFile as err:  # a section read after load_summary's checks (the backward timeline)
        raise UsageError(f"--run: {err}") from None
    for warning in result["warnings"]:
        say(PROG, f"warning: {warning}")
    if args.json:
        write_output(args.json, json.dumps(json_safe(result), indent=2) + "\n", "--json")
    print(format_report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
