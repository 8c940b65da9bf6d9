"""Which bucket cap and hook would make the step fastest: predicted from one measured run, then proven by measurement.

    python -m harness.advise --run runs/NAME/VERSION
    python -m harness.advise --run runs/NAME/VERSION --sweep sweep.jsonl --world-size 64
    python -m harness.advise --run runs/NAME/VERSION --verify 2            # runs train.py to prove it

The run's summary.json gives when each gradient becomes ready in backward (its calibration steps), the
compute-only step, the rest of the step and the codec cost of the compress hooks. The network is the in-run
α-β fit of the run's own buckets (the training's all_reduce, with whatever contention it met), or a raw
sweep's fit (`--network sweep`), or α and the bus bandwidth given. The step model (its formulas are printed)
predicts every cap in --caps, DDP's default, the best per-bucket cap list, for each hook in --hooks, at the
run's world size or --world-size, and picks the fastest, saying how sure it is.

`--verify K` runs train.py on the K best settings train.py can run and on the run's own setting, interleaved,
each --verify-repeat times (harness.grid's schedule), then prints predicted against measured, the error, and
whether the pick beat the run's setting by more than the noise: the proof to paste into a pull request.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.analysis.advice import ADVISOR_HOOKS, Advice, advise, describe, same_buckets, step_inputs
from harness.analysis.advice_report import advice_json, format_advice, train_flags
from harness.analysis.checked import BadFile, check_outputs, write_output
from harness.analysis.prediction import (
    ALPHA_SCALINGS,
    Network,
    network_from_run,
    network_from_sweep,
    with_run_latency,
    with_run_rates,
)
from harness.analysis.runs import read_summary
from harness.analysis.step_model import ADVISOR_CAPS_MB, Candidate
from harness.analysis.verification import Verified, format_verification
from harness.common.cli import OneLineParser, UsageError, run_cli
from harness.common.failures import say
from harness.common.names import SUMMARY_FILE
from harness.common.run_info import json_safe
from harness.predict import load_summary

PROG = "python -m harness.advise"
DEFAULT_VERIFY_REPEAT = 3
# train.py settings a verification run repeats from the original run, as (settings key, flag).
REPEATED_SETTINGS = (
    ("batch_size", "--batch-size"),
    ("max_steps", "--max-steps"),
    ("precision", "--precision"),
    ("accelerator", "--accelerator"),
    ("devices", "--devices"),
    ("accumulate_grad_batches", "--accumulate-grad-batches"),
    ("image_size", "--image-size"),
    ("seq_len", "--seq-len"),
    ("data_dir", "--data-dir"),
    ("seed", "--seed"),
    ("cpu_threads", "--cpu-threads"),
    ("calibration_steps", "--calibration-steps"),
    ("calibration_every", "--calibration-every"),
    ("timeout_s", "--timeout"),
)
SWITCHES = (("static_graph", "--static-graph"),)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("--run", metavar="DIR", required=True, help="a train.py run directory (its summary.json)")
    net = parser.add_argument_group("network (default: the in-run fit of the run's own buckets)")
    net.add_argument("--sweep", metavar="PATH", help="raw_sweep JSON Lines with an all_reduce fit, shown beside it")
    net.add_argument(
        "--network", choices=("run", "sweep"), help="which fit predicts: run (default where it exists) or sweep"
    )
    net.add_argument("--alpha-us", type=float, help="all_reduce latency α in µs (overrides the fit's)")
    net.add_argument("--busbw-gbps", type=float, help="bus bandwidth in GB/s (overrides the fit's)")
    net.add_argument("--alpha-scaling", choices=ALPHA_SCALINGS, default="constant", help="α at another world size")
    what = parser.add_argument_group("what is predicted")
    what.add_argument("--world-size", type=int, help="ranks to predict for (default: the run's)")
    what.add_argument("--hooks", default=",".join(ADVISOR_HOOKS), help="comma-separated, from allreduce, fp16, bf16")
    what.add_argument(
        "--caps", default=",".join(str(c) for c in ADVISOR_CAPS_MB), help="comma-separated bucket caps in MiB"
    )
    proof = parser.add_argument_group("proof")
    proof.add_argument(
        "--verify", type=int, default=0, metavar="K", help="run train.py on the K best settings and the run's own"
    )
    proof.add_argument("--verify-repeat", type=int, default=DEFAULT_VERIFY_REPEAT, help="runs of each setting")
    proof.add_argument("--logdir", help="where --verify's runs go (default: runs/advise-<model>-<time>)")
    proof.add_argument("--launcher", default="", help='prefix for each verify run, e.g. "torchrun --nproc-per-node 8"')
    parser.add_argument("--json", metavar="PATH", help="also write the advice (and any verification) as JSON")
    parser.add_argument("train_args", nargs="*", help="after --: extra arguments for every --verify train.py run")
    return parser


def parse_numbers(flag: str, text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated numbers, e.g. {flag} 1,5,25") from None
    if not values or not all(0 < v < math.inf for v in values):
        raise UsageError(f"{flag} {text!r}: expected one or more positive numbers")
    return values


def check_args(args: argparse.Namespace) -> tuple[list[str], tuple[float, ...]]:
    hooks = [h.strip() for h in args.hooks.split(",") if h.strip()]
    unknown = [h for h in hooks if h not in ADVISOR_HOOKS]
    if not hooks or unknown:
        raise UsageError(f"--hooks {args.hooks!r}: choose from {', '.join(ADVISOR_HOOKS)} (PowerSGD is not modelled)")
    caps = parse_numbers("--caps", args.caps)
    if args.world_size is not None and args.world_size < 1:
        raise UsageError(f"--world-size must be at least 1, got {args.world_size}")
    if args.verify < 0 or args.verify_repeat < 1:
        raise UsageError("--verify must be >= 0 and --verify-repeat >= 1")
    if args.alpha_us is not None and not 0 <= args.alpha_us < math.inf:
        raise UsageError(f"--alpha-us must be >= 0 and finite, got {args.alpha_us}")
    if args.busbw_gbps is not None and not 0 < args.busbw_gbps < math.inf:
        raise UsageError(f"--busbw-gbps must be positive and finite, got {args.busbw_gbps}")
    if args.network == "sweep" and args.sweep is None:
        raise UsageError("--network sweep needs --sweep PATH")
    check_outputs({"--json": args.json}, [p for p in (args.sweep, str(Path(args.run) / SUMMARY_FILE)) if p])
    return hooks, caps


def resolve_network(args: argparse.Namespace, summary: dict[str, Any]) -> tuple[Network, Network | None]:
    """(the network that predicts, the sweep's fit if one was given)."""
    sweep = network_from_sweep(args.sweep, args.alpha_scaling) if args.sweep else None
    inrun = network_from_run(summary, args.run, args.alpha_scaling)
    use_sweep = args.network == "sweep" or (args.network is None and inrun is None)
    network = inrun
    if use_sweep:
        # A sweep times fp32 collectives back to back on an idle machine: the run's own buckets give the latency
        # a training's collective pays, and its probes the other dtypes' rates.
        network = sweep and with_run_rates(with_run_latency(sweep, summary), summary, after_backward=False)
    if args.network == "run" and inrun is None:
        raise UsageError(f"--network run: {why_no_inrun_fit(summary)}")
    if network is None and args.alpha_us is not None and args.busbw_gbps is not None:
        world = args.world_size or summary["world_size"]
        network = Network(args.alpha_us, args.busbw_gbps, world, args.alpha_scaling, "given on the command line")
    elif network is not None and (args.alpha_us is not None or args.busbw_gbps is not None):
        network = replace(
            network,
            alpha_us=network.alpha_us if args.alpha_us is None else args.alpha_us,
            busbw_gbps=network.busbw_gbps if args.busbw_gbps is None else args.busbw_gbps,
            alpha_scaling=args.alpha_scaling,
            source=f"{network.source}, with values given on the command line",
        )
    if network is None:
        raise UsageError(
            f"{why_no_inrun_fit(summary)}: give --sweep PATH, or --alpha-us and --busbw-gbps for the network to predict"
        )
    return network, sweep


def why_no_inrun_fit(summary: dict[str, Any]) -> str:
    if summary["world_size"] < 2:
        return "the run had 1 rank, so nothing crossed a link and it holds no network fit"
    return "the run's buckets do not hold two distinct sizes to fit α and β from"


def verify_configs(advice: Advice, k: int) -> tuple[list[Any], Any]:
    """The K best settings train.py can run (one per distinct layout and hook), and the run's own."""
    picked = []
    for row in advice.rows:
        if row.candidate.kind == "list" or same_buckets(row, advice.current):
            continue
        if any(same_buckets(row, p) for p in picked):
            continue
        picked.append(row)
        if len(picked) == k:
            break
    return picked, advice.current


def config_of(candidate: Candidate) -> dict[str, str]:
    config = {"--comm-hook": candidate.hook}
    if candidate.bucket_cap_mb is not None:
        config["--bucket-cap-mb"] = f"{candidate.bucket_cap_mb:g}"
    return config


def repeated_args(settings: dict[str, Any]) -> list[str]:
    """train.py flags that repeat the original run's workload (model aside)."""
    args = []
    for key, flag in REPEATED_SETTINGS:
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    args += [flag for key, flag in SWITCHES if settings.get(key)]
    for key, flag in (("channels_last", "channels-last"), ("gradient_as_bucket_view", "gradient-as-bucket-view")):
        if settings.get(key) is not None:  # both ways: the default may differ from the one the run had
            args.append(f"--{flag}" if settings[key] else f"--no-{flag}")
    return args


def measured_steps(logdir: Path) -> dict[str, list[float]]:
    """{run name: the step p50 of each of its completed versions} under `logdir` (<run name>/<version>/)."""
    return measured_totals(logdir, "step_ms_p50")


def measured_totals(logdir: Path, key: str) -> dict[str, list[float]]:
    """{run name: summary.json's totals[key] of each of its completed versions} under `logdir`."""
    return {name: [value for _, value in runs] for name, runs in measured_runs(logdir, key).items()}


def measured_runs(logdir: Path, key: str) -> dict[str, list[tuple[Path, float]]]:
    """{run name: (version directory, summary.json's totals[key]) of each completed version that has the key}
    under `logdir` (<run name>/<version>/), in version order; a summary.json that cannot be read is left out."""
    found: dict[str, list[tuple[Path, float]]] = {}
    for path in sorted(logdir.glob(f"*/*/{SUMMARY_FILE}")):
        try:
            summary = read_summary(path)
        except BadFile as err:
            say(PROG, f"verify: {err} (left out)")
            continue
        value = summary["totals"].get(key)
        if summary["completed"] and value is not None:
            found.setdefault(path.parent.parent.name, []).append((path.parent, value))
    return found


def verify(args: argparse.Namespace, summary: dict[str, Any], advice: Advice) -> dict[str, Any]:
    """Run the verification (through harness.grid's runner), print its table, and return it for --json."""
    from harness import grid
    from harness.common.failures import SignalLatch

    settings = summary["settings"]
    if (settings.get("num_nodes") or 1) > 1 and not args.launcher:
        raise UsageError("--verify: the run spanned several nodes; give --launcher to start each verify run there")
    model = settings["model"]
    picked, current = verify_configs(advice, args.verify)
    if not picked:
        print("# verify: no other setting to run (every candidate builds the run's own buckets)")
        return {}
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = Path(args.logdir or f"runs/advise-{model}-{stamp}")
    grid.prepare_logdir(logdir)
    configs = [config_of(p.candidate) for p in [*picked, current]]
    schedule = grid.run_order(configs, args.verify_repeat)
    train_args = repeated_args(settings) + list(args.train_args)
    print(f"# verify: {len(schedule)} train.py runs under {logdir}", flush=True)
    signals = SignalLatch().install()
    failed = grid.run_schedule(schedule, model, logdir, shlex.split(args.launcher), train_args, signals)
    steps = measured_steps(logdir)
    rows = [
        Verified(
            label=describe(p.candidate) + (" (run's own)" if p is current else ""),
            flags=train_flags(p.candidate),
            predicted_step_ms=p.step_ms,
            measured_step_ms=steps.get(grid.run_name(model, config_of(p.candidate)), []),
        )
        for p in [*picked, current]
    ]
    print(format_verification(rows, rows[0], rows[-1]))
    if failed:
        print(f"# verify: {len(failed)} runs failed: {', '.join(failed)} (their logs are under {logdir}/logs)")
    if signals.received is not None:
        raise SystemExit(128 + signals.received)
    return {
        "logdir": str(logdir),
        "failed": failed,
        "rows": [{**vars(r), "measured_median_ms": r.measured_median_ms, "error": r.error} for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    hooks, caps = check_args(args)
    summary = load_summary(args.run)
    try:  # the sections only the advisor reads are checked as it reads them
        step_inputs(summary, args.run)  # a run without a timeline is refused before any talk of networks
        network, sweep = resolve_network(args, summary)
        advice = advise(summary, args.run, network, args.world_size, hooks, caps)
    except BadFile as err:
        raise UsageError(f"--run: {err}") from None
    model = summary["settings"].get("model") or "?"
    result = advice_json(advice, args.run, sweep)
    if args.json:  # before the report, so that a reader that stops early does not lose it
        write_output(args.json, json.dumps(json_safe(result), indent=2) + "\n", "--json")
    print(format_advice(advice, args.run, model, sweep), flush=True)
    if args.verify:
        if advice.world_size != advice.run_world_size:
            raise UsageError("--verify runs at the run's own world size; leave out --world-size to verify")
        result["verification"] = verify(args, summary, advice)
        if args.json:
            write_output(args.json, json.dumps(json_safe(result), indent=2) + "\n", "--json")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
