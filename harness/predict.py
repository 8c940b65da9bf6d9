"""Predict a training step's gradient communication from a sweep's α and β, for any world size and network.

    python -m harness.predict --sweep sweep.jsonl --model resnet50 --world-size 64
    python -m harness.predict --model resnet50 --world-size 64 --alpha-us 30 --busbw-gbps 50   # 400 Gb/s
    python -m harness.predict --sweep sweep.jsonl --run runs/NAME/VERSION        # measured / predicted

The bucket layout comes from a run's summary.json (`--run`, exact) or from DDP's own bucket assignment
applied to the model (`--model`, harness.analysis.bucket_layout). Each bucket's all_reduce time follows the α-β
model with the ring's bus-bandwidth factor; buckets are reduced one after another, each starting once
its gradients are ready, and whatever runs past the end of backward is exposed. Every formula is printed
with the numbers (FORMULAS), and `--json` writes the same as one object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.analysis.bucket_layout import Bucket, layout_from_summary, model_bucket_layout
from harness.common.cli import UsageError, run_cli
from harness.common.metrics import busbw_factor
from harness.common.names import MB
from harness.common.run_info import json_safe

PROG = "python -m harness.predict"
ALPHA_SCALINGS = ("constant", "ring")
HOOKS = ("allreduce", "fp16", "bf16")  # PowerSGD's traffic depends on its rank and state: not modelled
COMPRESSED_ITEMSIZE = {"fp16": 2, "bf16": 2}
# Backward costs about twice the forward (two matmuls per forward matmul), so 2/3 of forward + backward.
DEFAULT_BACKWARD_SHARE = 2 / 3

FORMULAS = (
    "S_i = numel_i × bytes per element on the wire (4 for fp32 gradients, 2 with the fp16/bf16 hooks)",
    "t_i = α(n) + S_i × 2(n−1)/n / B_bus   (ring all_reduce: each rank sends and receives 2(n−1)/n × S)",
    "B_bus = β_sweep × 2(n_s−1)/n_s   (the sweep fits t = α + S/β at its world size n_s: β is algbw there)",
    "α(n) = α   (--alpha-scaling constant)   or   α × (n−1)/(n_s−1)   (ring: 2(n−1) hops, each α/(2(n_s−1)))",
    "comm = Σ t_i   (buckets are reduced one after another, in index order)",
    "r_i = F + B × (S_0 + … + S_i) / Σ S   (bucket i ready: gradients arrive in proportion to bytes over backward;"
    " F = (1−b)·C forward, B = b·C backward, C = compute-only forward + backward)",
    "start_i = max(r_i, end_{i−1}),  end_i = start_i + t_i,  exposed = max(0, end_last − C)",
    "step = C + exposed + other   (other: the rest of the step, the optimizer; from --run, else 0)",
    "efficiency = measured / predicted   (1.0: training reaches what the sweep's network predicts; above: slower)",
)


@dataclass(frozen=True)
class Network:
    """all_reduce cost on one network: latency α at the reference world size and the bus bandwidth."""

    alpha_us: float
    busbw_gbps: float
    ref_world_size: int
    """The world size α was measured at (the sweep's), for --alpha-scaling ring."""
    alpha_scaling: str = "constant"
    source: str = ""

    def alpha_at_us(self, world_size: int) -> float:
        """α(n): constant, or growing with the ring's 2(n−1) hops."""
        if self.alpha_scaling == "constant" or self.ref_world_size < 2:
            return self.alpha_us
        return self.alpha_us * (world_size - 1) / (self.ref_world_size - 1)

    def all_reduce_us(self, size_bytes: float, world_size: int) -> float:
        """t = α(n) + S × 2(n−1)/n / B_bus, in µs (with one rank nothing travels: t = α)."""
        factor = busbw_factor("all_reduce", world_size)
        transfer = 0.0 if factor == 0 or math.isinf(self.busbw_gbps) else size_bytes * factor / (self.busbw_gbps * 1e3)
        return self.alpha_at_us(world_size) + transfer


def busbw_from_beta(beta_gbps: float, world_size: int) -> float:
    """The bus bandwidth behind a sweep's β (algbw-scale at `world_size`): β × 2(n−1)/n."""
    return beta_gbps * busbw_factor("all_reduce", world_size)


def network_from_sweep(path: str, alpha_scaling: str = "constant") -> Network:
    """The all_reduce fit of a raw sweep's JSON Lines (eager throughput, in place, else out of place)."""
    from harness.sweep.output import load_fits

    if not Path(path).is_file():
        raise UsageError(f"--sweep {path!r} is not a file; write one with python -m harness.raw_sweep --json PATH")
    fit, placement = None, ""
    for placement in ("in_place", "out_of_place"):
        try:
            fit = load_fits(path, placement=placement).get("all_reduce")
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
            raise UsageError(f"--sweep {path!r} is not a raw_sweep JSON Lines file ({err})") from None
        if fit is not None:
            break
    if fit is None:
        raise UsageError(
            f"--sweep {path!r} has no all_reduce fit (eager throughput); run python -m harness.raw_sweep "
            "--collectives all_reduce --json PATH over at least two sizes"
        )
    if fit.world_size < 2:
        raise UsageError(f"--sweep {path!r} ran on 1 rank: no data crossed a link, so it has no bandwidth")
    return Network(
        alpha_us=fit.alpha_us,
        busbw_gbps=busbw_from_beta(fit.beta_gbps, fit.world_size),
        ref_world_size=fit.world_size,
        alpha_scaling=alpha_scaling,
        source=f"sweep {path} (all_reduce {placement}, {fit.world_size} ranks, β {fit.beta_gbps:.4g} GB/s algbw)",
    )


def wire_bytes(bucket: Bucket, hook: str) -> int:
    """Bytes of the bucket's all_reduce: compressed hooks send 2 bytes an element, else the gradient's."""
    return bucket.numel * COMPRESSED_ITEMSIZE.get(hook, bucket.grad_itemsize)


def overlap_timeline(
    times_ms: list[float], sizes: list[int], compute_ms: float, backward_share: float
) -> tuple[list[float], list[float], float]:
    """(ready, end) of each bucket and the exposed ms, with time 0 at the start of forward.

    Bucket i is ready once backward has produced its share of the bytes (r_i), starts when it is ready
    and the previous bucket is done, and what ends after backward (at compute_ms) is exposed.
    """
    total = sum(sizes) or 1
    forward_ms, backward_ms = (1 - backward_share) * compute_ms, backward_share * compute_ms
    ready, ends, done, cumulative = [], [], 0.0, 0
    for t, size in zip(times_ms, sizes, strict=True):
        cumulative += size
        r = forward_ms + backward_ms * cumulative / total
        done = max(r, done) + t
        ready.append(r)
        ends.append(done)
    return ready, ends, max(0.0, done - compute_ms) if ends else 0.0


def predict(
    buckets: list[Bucket],
    network: Network,
    world_size: int,
    hook: str = "allreduce",
    compute_ms: float | None = None,
    other_ms: float = 0.0,
    backward_share: float = DEFAULT_BACKWARD_SHARE,
) -> dict[str, Any]:
    """Per-bucket and per-step predicted communication; exposure too when the compute time is known."""
    sizes = [wire_bytes(b, hook) for b in buckets]
    times_ms = [network.all_reduce_us(s, world_size) / 1e3 for s in sizes]
    comm_ms = sum(times_ms)
    rows = [
        {"index": b.index, "bytes": s, "predicted_ms": t, "first_param": b.first_param, "last_param": b.last_param}
        for b, s, t in zip(buckets, sizes, times_ms, strict=True)
    ]
    totals: dict[str, Any] = {"bytes_per_step": sum(sizes), "buckets": len(buckets), "comm_ms": comm_ms}
    if compute_ms is not None:
        ready, ends, exposed = overlap_timeline(times_ms, sizes, compute_ms, backward_share)
        for row, r, e in zip(rows, ready, ends, strict=True):
            row["ready_ms"], row["end_ms"] = r, e
        step_ms = compute_ms + exposed + other_ms
        totals.update(
            compute_ms=compute_ms,
            other_ms=other_ms,
            backward_share=backward_share,
            exposed_ms=exposed,
            step_ms=step_ms,
            exposed_share_of_step=exposed / step_ms if step_ms > 0 else math.nan,
            overlap_pct=100.0 * (1 - exposed / comm_ms) if comm_ms > 0 else math.nan,
        )
    return {
        "world_size": world_size,
        "hook": hook,
        "network": {
            "alpha_us": network.alpha_us,
            "alpha_at_world_size_us": network.alpha_at_us(world_size),
            "busbw_gbps": network.busbw_gbps,
            "ref_world_size": network.ref_world_size,
            "alpha_scaling": network.alpha_scaling,
            "source": network.source,
        },
        "buckets": rows,
        "totals": totals,
    }


def add_efficiency(prediction: dict[str, Any], summary: dict[str, Any]) -> None:
    """Measured (summary.json) / predicted, per bucket and per step, into `prediction`."""
    measured = {b["index"]: b for b in summary.get("buckets", [])}
    for row in prediction["buckets"]:
        m = measured.get(row["index"], {}).get("time_ms_p50")
        row["measured_ms"] = m
        row["measured_over_predicted"] = _ratio(m, row["predicted_ms"])
    totals, run = prediction["totals"], summary.get("totals", {})
    totals["measured_comm_ms"] = run.get("comm_ms_p50")
    totals["comm_measured_over_predicted"] = _ratio(run.get("comm_ms_p50"), totals["comm_ms"])
    if "exposed_ms" in totals:
        totals["measured_exposed_ms"] = run.get("exposed_ms_p50")
        totals["measured_step_ms"] = run.get("step_ms_p50")
        totals["step_measured_over_predicted"] = _ratio(run.get("step_ms_p50"), totals["step_ms"])
    sources = {b.get("time_source") for b in summary.get("buckets", [])}
    prediction["measured_time_source"] = ",".join(sorted(s for s in sources if s))


def _ratio(measured: float | None, predicted: float) -> float | None:
    if measured is None or not isinstance(measured, int | float) or not math.isfinite(measured) or predicted <= 0:
        return None
    return measured / predicted


# ---- command line -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
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
        default=DEFAULT_BACKWARD_SHARE,
        help="share of --compute-ms spent in backward (default 2/3)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the prediction as one JSON object")
    return parser.parse_args(argv)


def load_summary(run_dir: str) -> dict[str, Any]:
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise UsageError(f"--run {run_dir!r} has no summary.json; give the directory train.py printed")
    try:
        summary = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"--run {run_dir!r}: summary.json is not JSON ({err})") from None
    if not summary.get("buckets"):
        raise UsageError(f"--run {run_dir!r} measured no buckets (too few steps after the 2 warm-up steps?)")
    return summary


def resolve_network(args: argparse.Namespace) -> Network:
    if args.alpha_us is not None and args.alpha_us < 0:
        raise UsageError(f"--alpha-us must be >= 0, got {args.alpha_us}")
    if args.busbw_gbps is not None and args.busbw_gbps <= 0:
        raise UsageError(f"--busbw-gbps must be positive, got {args.busbw_gbps}")
    if args.sweep is None:
        if args.alpha_us is None or args.busbw_gbps is None:
            raise UsageError("give --sweep PATH, or both --alpha-us and --busbw-gbps")
        return Network(args.alpha_us, args.busbw_gbps, 0, args.alpha_scaling, "given on the command line")
    net = network_from_sweep(args.sweep, args.alpha_scaling)
    if args.alpha_us is None and args.busbw_gbps is None:
        return net
    alpha = net.alpha_us if args.alpha_us is None else args.alpha_us
    busbw = net.busbw_gbps if args.busbw_gbps is None else args.busbw_gbps
    given = ", ".join(f for f, v in (("α", args.alpha_us), ("busbw", args.busbw_gbps)) if v is not None)
    return Network(alpha, busbw, net.ref_world_size, args.alpha_scaling, f"{net.source}; {given} given")


def check_args(args: argparse.Namespace) -> None:
    """Mistakes that need no file read, as one-line UsageErrors."""
    if args.world_size is not None and args.world_size < 1:
        raise UsageError(f"--world-size must be at least 1, got {args.world_size}")
    if args.compute_ms is not None and args.compute_ms < 0:
        raise UsageError(f"--compute-ms must be >= 0, got {args.compute_ms}")
    if not 0 <= args.backward_share <= 1:
        raise UsageError(f"--backward-share must be between 0 and 1, got {args.backward_share}")
    if args.bucket_cap_mb is not None and args.bucket_cap_mb <= 0:
        raise UsageError(f"--bucket-cap-mb must be positive, got {args.bucket_cap_mb}")
    if args.model is None and args.run is None:
        raise UsageError("give --model NAME (buckets from DDP's rule) or --run DIR (measured buckets)")
    if args.run is not None and args.bucket_cap_mb is not None:
        raise UsageError("--bucket-cap-mb applies to --model; a --run has its measured buckets")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(f"--json {args.json!r}: its folder does not exist")


def resolve_layout(args: argparse.Namespace, summary: dict[str, Any] | None) -> tuple[list[Bucket], str, str]:
    """(buckets, where they come from, model name): the run's measured ones, else DDP's rule on the model."""
    if summary is not None:
        run_model = summary.get("settings", {}).get("model", "?")
        if args.model is not None and args.model != run_model:
            raise UsageError(f"--model {args.model} differs from the run's model {run_model}")
        return layout_from_summary(summary), f"measured in {args.run}", run_model
    from models import get_model_spec

    get_model_spec(args.model)  # a UsageError naming the models
    layout = "DDP's bucket assignment, gradients taken as ready in reverse registration order"
    return model_bucket_layout(args.model, args.bucket_cap_mb), layout, args.model


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    check_args(args)
    network = resolve_network(args)
    summary = load_summary(args.run) if args.run else None
    buckets, layout, model = resolve_layout(args, summary)
    run = summary.get("totals", {}) if summary else {}
    run_hook = (summary.get("settings", {}).get("comm_hook") or "allreduce") if summary else None
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
    if compute_ms is None and _finite(run.get("compute_only_ms")):
        compute_ms, compute_source = run["compute_only_ms"], f"the run's compute-only step ({args.run})"
    other_ms = 0.0  # the optimizer and the rest of a step, measured by a run
    if _finite(run.get("step_ms_p50")) and _finite(run.get("fwd_bwd_ms_p50")):
        other_ms = max(0.0, run["step_ms_p50"] - run["fwd_bwd_ms_p50"])
    result = predict(buckets, network, world_size, hook, compute_ms, other_ms, args.backward_share)
    result.update(model=model, layout=layout, compute_source=compute_source if compute_ms is not None else None)
    if summary is not None and run_hook in HOOKS:
        # Efficiency compares like with like: the run's own world size and hook, whatever is predicted above.
        if (world_size, hook) == (run_world, run_hook):
            add_efficiency(result, summary)
        else:
            result["efficiency"] = predict(
                buckets, network, run_world, run_hook, compute_ms, other_ms, args.backward_share
            )
            add_efficiency(result["efficiency"], summary)
        result["run"] = args.run
    result["formulas"] = list(FORMULAS)
    print(format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(json_safe(result), indent=2) + "\n")
    return result


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "n/a" if not _finite(value) else format(value, spec)


def format_report(result: dict[str, Any]) -> str:
    net, t = result["network"], result["totals"]
    n = result["world_size"]
    lines = [
        f"# harness.predict: {result['model']}, {t['buckets']} buckets ({result['layout']}), hook {result['hook']}, "
        f"world size {n}",
        f"# network: {net['source']}",
        f"# α = {net['alpha_us']:.2f} µs at {net['ref_world_size']} ranks, α({n}) = {net['alpha_at_world_size_us']:.2f}"
        f" µs ({net['alpha_scaling']}); B_bus = {net['busbw_gbps']:.4g} GB/s",
    ]
    lines += _bucket_table(result)
    lines.append(
        f"# predicted comm {t['comm_ms']:.3f} ms per step for {t['bytes_per_step'] / MB:.2f} MB"
        f" (sum of the buckets' times)"
    )
    if "exposed_ms" in t:
        lines.append(
            f"# predicted exposed {t['exposed_ms']:.3f} ms of a {t['step_ms']:.3f} ms step "
            f"({100 * t['exposed_share_of_step']:.1f} %; overlap {_fmt(t['overlap_pct'], '.1f')} %); compute-only "
            f"forward+backward {t['compute_ms']:.3f} ms from {result['compute_source']}, backward share "
            f"{t['backward_share']:.2f}, other {t['other_ms']:.3f} ms"
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
    if result.get("measured_time_source") == "ready_to_done":
        lines.append(
            "# measured bucket times are ready to done (no backend execution time on gloo): they include waiting "
            "behind earlier buckets and the CPU shared with backward"
        )
    return lines


if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]), PROG)
