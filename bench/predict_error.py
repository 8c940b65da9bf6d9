"""How far harness.predict is from measured training: gloo on this CPU at world sizes 2, 3 and 4.

    python -m bench.predict_error                                 # about 2 minutes on 2 idle cores
    python -m bench.predict_error --world-sizes 2,3 --model resnet_tiny --max-steps 6   # quick look

For each world size n it runs a raw all_reduce sweep at n (python -m harness.raw_sweep) and a train.py run
at n, then predicts the run's per-bucket and per-step communication from the run's measured bucket
layout with (a) the sweep at the same n and (b) the sweep at the smallest n, scaled to n by the formulas
(bus bandwidth constant; α constant or growing as the ring's n−1). Error = (predicted − measured) /
measured. Prints one Markdown table; `--out DIR` keeps the sweeps and runs.

On a 2-core machine every rank shares the cores with the others and with backward, so measured training
communication is slower than the sweep's (which has the cores to itself); the error is mostly that.

Measured figures, with their dates and machine: docs/BENCHMARKS.md, "Prediction against the network".
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.analysis.bucket_layout import layout_from_summary
from harness.analysis.prediction import network_from_sweep, other_ms_of_run, predict
from harness.common.cli import OneLineParser, UsageError, check_count, check_writable, run_cli
from harness.common.names import WARMUP_STEPS
from harness.common.sweep_fits import load_fits
from harness.predict import load_summary
from harness.sweep.sizes import parse_size

ROOT = Path(__file__).resolve().parents[1]
LARGE_BYTES = 2**20  # the sizes of real gradient buckets (DDP's first bucket is 1 MiB)
MIN_BYTES = 256 * 1024  # the sweep's smallest size (its -b 256K); it doubles up to --max-bytes


def run(cmd: list[str], log: Path) -> None:
    with open(log, "w") as out:
        subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=True)


def sweep(n: int, out: Path, max_bytes: str) -> str:
    path = out / f"sweep-{n}.jsonl"
    cmd = [sys.executable, "-m", "harness.raw_sweep", "--nproc", str(n), "--collectives", "all_reduce",
           "--placements", "in_place", "-b", "256K", "-e", max_bytes, "-f", "2", "--json", str(path)]  # fmt: skip
    run(cmd, out / f"sweep-{n}.log")
    return str(path)


def train_args(n: int, out: Path, args: argparse.Namespace) -> list[str]:
    """train.py's arguments for the run at world size `n`."""
    words = ["--model", args.model, "--batch-size", str(args.batch_size), "--max-steps", str(args.max_steps),
             "--devices", str(n), "--logdir", str(out / "runs"), "--run-name", run_name(n, args)]  # fmt: skip
    if args.image_size:
        words += ["--image-size", str(args.image_size)]
    return words


def run_name(n: int, args: argparse.Namespace) -> str:
    return f"predict-{args.model}-{n}"


def run_summaries(n: int, out: Path, args: argparse.Namespace) -> list[str]:
    return glob.glob(str(out / "runs" / run_name(n, args) / "*" / "summary.json"))


def train(n: int, out: Path, args: argparse.Namespace) -> str:
    run([sys.executable, "train.py", *train_args(n, out, args)], out / f"train-{n}.log")
    (summary,) = run_summaries(n, out, args)
    return str(Path(summary).parent)


def check_runs(sizes: list[int], args: argparse.Namespace) -> None:
    """Each run's train.py command line checked as train.py checks its own (harness.train.config.parse_config,
    against this machine as train.py started without a launcher sees it), before the first sweep, not after it;
    and no earlier run of the same name in --out, which would be read in place of the new one. Loads torch."""
    from harness.train.config import parse_config

    with tempfile.TemporaryDirectory() as scratch:  # the runs' --logdir is made later, in --out
        for n in sizes:
            try:
                parse_config(train_args(n, Path(scratch), args))
            except UsageError as err:
                raise UsageError(f"train.py would refuse the run at world size {n}: {err}") from None
    for n in sizes:
        if args.out and run_summaries(n, Path(args.out), args):
            raise UsageError(f"--out {args.out!r} already holds a run {run_name(n, args)}; give a new directory")


def error_pct(predicted: float, measured: float | None) -> float:
    return float("nan") if not measured else 100.0 * (predicted - measured) / measured


def compare(run_dir: str, sweep_path: str, scaling: str) -> dict:
    summary = load_summary(run_dir)
    network = network_from_sweep(sweep_path, scaling)
    totals = summary["totals"]
    compute = totals.get("compute_only_ms")
    other = other_ms_of_run(totals)
    result = predict(layout_from_summary(summary), network, summary["world_size"], "allreduce", compute, other)
    measured = {b["index"]: b["time_ms_p50"] for b in summary["buckets"]}
    bucket_errors = [error_pct(b["predicted_ms"], measured.get(b["index"])) for b in result["buckets"]]
    return {
        "n": summary["world_size"],
        "sweep_n": network.ref_world_size,
        "scaling": scaling,
        "busbw": network.busbw_gbps,
        "alpha_ms": network.alpha_at_us(summary["world_size"]) / 1e3,
        "measured_ms": totals["comm_ms_p50"],
        "predicted_ms": result["totals"]["comm_ms"],
        "error": error_pct(result["totals"]["comm_ms"], totals["comm_ms_p50"]),
        "bucket_errors": bucket_errors,
        "buckets": len(bucket_errors),
        "measured_exposed": totals.get("exposed_ms_p50"),
        "predicted_exposed": result["totals"].get("exposed_ms"),
        "step_ms": totals.get("step_ms_p50"),
    }


def sweep_rows(path: str) -> list[tuple[int, float]]:
    """(size, time µs) of the sweep's measured eager in-place all_reduce rows."""
    rows = []
    with open(path) as lines:
        for line in lines:
            r = json.loads(line)
            if r.get("record") != "row" or r["collective"] != "all_reduce" or r["time_us"] is None:
                continue
            if (r["placement"], r["mode"], r["cuda_graph"]) == ("in_place", "throughput", False):
                rows.append((r["size_bytes"], r["time_us"]))
    return rows


def raw_error(sweep_path: str, base_sweep: str, scaling: str) -> dict:
    """The formulas alone, without training: the sweep at n predicted from the fit at the base world size."""
    network = network_from_sweep(base_sweep, scaling)
    measured = sweep_rows(sweep_path)
    n = json_world_size(sweep_path)
    errors = [error_pct(network.all_reduce_us(size, n), t) for size, t in measured]
    large = [e for (size, _), e in zip(measured, errors, strict=True) if size >= LARGE_BYTES]
    return {"n": n, "sweep_n": network.ref_world_size, "scaling": scaling, "errors": errors, "large": large,
            "sizes": (measured[0][0], measured[-1][0])}  # fmt: skip


def json_world_size(path: str) -> int:
    return load_fits(path)["all_reduce"].world_size


def raw_markdown(rows: list[dict]) -> str:
    lines = [
        "| world size | fit at | α scaling | sizes | error % over all sizes (min / median / max) "
        "| error % at ≥ 1 MiB (median) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        e, big = r["errors"], r["large"]
        lines.append(
            f"| {r['n']} | {r['sweep_n']} | {r['scaling']} "
            f"| {r['sizes'][0] // 1024} KiB to {r['sizes'][1] // 2**20} MiB "
            f"| {min(e):+.0f} / {statistics.median(e):+.0f} / {max(e):+.0f} "
            f"| {statistics.median(big):+.0f} |"
        )
    return "\n".join(lines)


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None or value != value else format(value, spec)


def markdown(rows: list[dict]) -> str:
    lines = [
        "| world size | sweep at | α scaling | α(n) ms | busbw GB/s | measured comm ms | predicted comm ms | error % "
        "| bucket errors % (min / median / max) | measured exposed ms | predicted exposed ms | step ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        errs = [e for e in r["bucket_errors"] if e == e]
        spread = f"{min(errs):+.0f} / {statistics.median(errs):+.0f} / {max(errs):+.0f}" if errs else "n/a"
        lines.append(
            f"| {r['n']} | {r['sweep_n']} | {r['scaling']} | {fmt(r['alpha_ms'], '.2f')} | {fmt(r['busbw'], '.3f')} "
            f"| {fmt(r['measured_ms'])} | {fmt(r['predicted_ms'])} | {r['error']:+.0f} | {spread} "
            f"| {fmt(r['measured_exposed'])} | {fmt(r['predicted_exposed'])} | {fmt(r['step_ms'])} |"
        )
    return "\n".join(lines)


def check_max_bytes(text: str, world_sizes: int) -> None:
    """A UsageError for a --max-bytes that the sweep refuses, or too small for what is read from the sweep at its
    end: an all_reduce fit needs two sizes, and with several world sizes the raw table one of LARGE_BYTES."""
    max_bytes = parse_size(text, "--max-bytes")
    if max_bytes < 2 * MIN_BYTES:
        raise UsageError(f"--max-bytes must be at least 512K (the fit needs two sweep sizes from 256K), got {text!r}")
    if world_sizes > 1 and max_bytes < LARGE_BYTES:
        raise UsageError(
            f"--max-bytes must be at least 1M with several world sizes (the raw table's error at >= 1 MiB), "
            f"got {text!r}"
        )


PROG = "python -m bench.predict_error"
# Small images keep each rank's step short on a few shared cores; a model's own size is often 224.
IMAGE_SIZE = 64


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-sizes", default="2,3,4")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument(
        "--image-size", type=int, help=f"an image model's input size (default {IMAGE_SIZE}); a token model takes none"
    )
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--max-bytes", default="32M", help="largest sweep size (cover the largest bucket)")
    parser.add_argument("--out", help="keep sweeps, runs and logs here (default: a temporary folder)")
    args = parser.parse_args()
    try:
        sizes = [int(n) for n in args.world_sizes.split(",")]
    except ValueError:
        parser.error(f"--world-sizes takes world sizes such as 2,3,4, not {args.world_sizes!r}")
    if min(sizes) < 2:
        parser.error("--world-sizes: 2 or more ranks each (nothing crosses a link at 1)")
    if len(set(sizes)) < len(sizes):
        parser.error(f"--world-sizes {args.world_sizes!r} names a world size twice")
    check_count("--batch-size", args.batch_size)
    if args.image_size is not None:
        check_count("--image-size", args.image_size)
    check_count("--max-steps", args.max_steps, least=WARMUP_STEPS + 1)  # buckets are measured after warm-up
    check_max_bytes(args.max_bytes, len(sizes))
    check_writable(args.out, "--out", directory=True)
    from models import get_model_spec  # loads torch (seconds): after the checks that need nothing

    if args.image_size is None and get_model_spec(args.model).kind == "image":
        args.image_size = IMAGE_SIZE
    check_runs(sizes, args)
    out = Path(args.out or tempfile.mkdtemp(prefix="predict_error-"))
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    sweeps, runs, loads = {}, {}, {}
    for n in sizes:
        before = os.getloadavg()[0]
        sweeps[n] = sweep(n, out, args.max_bytes)
        runs[n] = train(n, out, args)
        loads[n] = (before, os.getloadavg()[0])
        print(f"# n={n}: sweep {sweeps[n]}, run {runs[n]}, load average {loads[n][0]:.2f} -> {loads[n][1]:.2f}",
              flush=True)  # fmt: skip
    base = min(sizes)
    rows = [compare(runs[n], sweeps[n], "constant") for n in sizes]
    rows += [compare(runs[n], sweeps[base], scaling) for scaling in ("constant", "ring") for n in sizes if n != base]
    finished = datetime.datetime.now().isoformat(timespec="seconds")
    print(f"# started {started}, finished {finished}, {os.cpu_count()} cores, model {args.model} image "
          f"{args.image_size or '-'} batch {args.batch_size}, {args.max_steps} steps")  # fmt: skip
    print(f"# command: python -m bench.predict_error {' '.join(sys.argv[1:])}")
    print("\nTraining: the run's measured bucket layout, predicted from the sweep at its own n and at the base n")
    print(markdown(rows))
    raw = [raw_error(sweeps[n], sweeps[base], s) for s in ("constant", "ring") for n in sizes if n != base]
    if raw:
        print(f"\nRaw all_reduce, no training: the sweep at n predicted from the fit at n={base}")
        print(raw_markdown(raw))


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
