"""Raw collective sweep, nccl-tests style: what the network alone can do, to read training numbers against.

    python -m harness.raw_sweep                                  # no launcher: 2 local processes
    python -m harness.raw_sweep --nproc 4 --backend gloo
    torchrun --nproc-per-node 8 -m harness.raw_sweep -b 8 -e 1G -f 2 --collectives all
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m harness.raw_sweep --json sweep.jsonl --csv sweep.csv
    MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1) MASTER_PORT=29500 \\
        srun --ntasks-per-node 8 python -m harness.raw_sweep --collectives all     # SLURM, a task per GPU
    python -m harness.raw_sweep --nproc 1 --mode throughput,latency --cuda-graph  # 1 GPU: host overhead

Without a launcher it starts --nproc processes on loopback: NCCL when there is a GPU for each, else gloo.
Each process uses GPU LOCAL_RANK. The semantics are nccl-tests' (docs/METRICS.md): size S and count as
nccl-tests prints them, algbw = S/t, busbw = algbw × factor(n), out-of-place then in-place, -w 5 -n 20
-c 1. Where this differs, on purpose:
- An operation's time across ranks is the slowest rank's (nccl-tests averages by default, its -a 1);
  the spread across ranks is skew_us.
- Modes. throughput is nccl-tests' meaning: `iters` calls back to back between two CUDA events, time
  per call. latency times each call alone, with a barrier outside the timed window; it reports p50, p90,
  p99, min and max of the per-iteration time of the slowest rank, and the p50 of the per-iteration spread
  as skew_us; its time_us is the p50 (give -n 100 or more for a meaningful p99). On a GPU an eager
  latency sample starts on an idle GPU, so it holds the host's launch of the call as well.
- --cuda-graph (nccl-tests -G) captures the calls once and replays them, without host launch costs.
  Each mode is then measured eager and replayed, and graph rows carry host_overhead_us = eager − graph:
  the per-call host cost that a training step pays. Graph latency times each call inside one replay,
  with timing events captured between the calls (no barrier between them). Each row's `timing` field
  names its method (harness.sweep.engine).
- On CPU (gloo) the clock is time.perf_counter and the iteration count grows until a timed run lasts
  --min-time-ms (as gloo's own benchmark does). On GPU it is exactly -n unless --min-time-ms is given.
- torch has no out-of-place all_reduce, broadcast or reduce: their out_of_place rows copy the input into
  the output and make the in-place call (emulated=true; the time includes the copy). In-place all_to_all
  and send_recv are skipped, as nccl-tests does not check them either (see harness.sweep.collectives).
- The check (-c N) runs after timing, eagerly, on fresh inputs whose exact result is known; each row
  counts the wrong elements over all ranks, and any wrong element makes the exit code 1.
- World size 1 is allowed: busbw is then 0 by definition, and the run says so.
- Failures: --timeout bounds the rendezvous, every collective and every wait for the GPU. A rank that
  fails or loses a peer says what was running (collective, size, phase, step, rank) and exits 3; SIGINT,
  SIGTERM and SIGHUP exit 130, 143 and 129. An output that can no longer be written (a full disk, a file
  or directory removed during the sweep) stops every rank after the row in progress, with one line each
  naming it, exit 3; a closed stdout (`| head`) stops them quietly, exit 141. Every row measured before stays
  in the outputs still writable: the JSONL ends with an `end` record. A size that does not fit in memory is
  a skipped row with its reason, and the sweep goes on.
- Mistakes in the options exit 2 with one line, before any process starts, among them two outputs (or an
  output and stdout) that are one file, however spelled.
Per collective and placement, time = alpha + S/beta is fitted over the sizes (harness.common.metrics), printed
under each table and written as a "fit" record; `load_fits(path)` reads them back for predictions.
"""

from __future__ import annotations

import argparse
import math
import os

import torch

from harness.common.cli import OneLineParser, UsageError, check_distinct_outputs, check_writable, run_cli
from harness.common.dist_env import default_backend, detect
from harness.common.local_launch import exit_without_teardown, spawn_local
from harness.common.names import GRACE_S
from harness.common.sweep_fits import Fit, load_fits
from harness.sweep.collectives import COLLECTIVES, DTYPES, PLACEMENTS, REDUCE_OPS, parse_collectives, parse_dtype
from harness.sweep.engine import PROG, run_sweep
from harness.sweep.plan import Plan
from harness.sweep.rank import run_rank, sweep_worker
from harness.sweep.sizes import parse_size, parse_size_list, size_range

__all__ = ["Fit", "Plan", "load_fits", "main", "run_sweep"]

MODES = ("throughput", "latency")
# Defaults by device: the CPU default sweep must finish in seconds on 2 cores; a GPU sweep goes to 1 GiB.
DEFAULT_MAX_BYTES = {"cpu": "32M", "cuda": "1G"}
DEFAULT_MIN_TIME_MS = {"cpu": 50.0, "cuda": 0.0}
DEFAULT_TIMEOUT_S = 300.0  # a 1 GiB collective over a slow link stays well inside it


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Raw collective sweep with nccl-tests' semantics. Sizes take K/M/G (binary) suffixes.",
        epilog="launch:\n" + (__doc__ or "\n\n").split("\n\n")[1] + "\n\nsemantics and differences from nccl-tests: "
        "python -c 'import harness.raw_sweep as m; help(m)'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sizes = parser.add_argument_group("sizes (bytes)")
    sizes.add_argument("-b", "--min-bytes", help="smallest size (default 8)")
    sizes.add_argument("-e", "--max-bytes", help="largest size (default 32M on CPU/gloo, 1G on GPU/NCCL)")
    sizes.add_argument("-f", "--step-factor", type=int, help="multiply the size by this (default 2)")
    sizes.add_argument("-i", "--step-bytes", help="add this to the size instead of multiplying")
    sizes.add_argument("--sizes", help="explicit list (1K,64K,4M), or 'seed': float32 buffers of 1, 1K, 2K, "
                       "4K, 8K, 256K, 512K, 1M, 4M and 256M elements (elements scale with --dtype)")  # fmt: skip
    what = parser.add_argument_group("what to run")
    what.add_argument("--collectives", default="all_reduce", help=f"list or 'all': {', '.join(COLLECTIVES)}")
    what.add_argument("-d", "--dtype", default="float32", help=f"{', '.join(DTYPES)} (default float32)")
    what.add_argument("-o", "--op", default="sum", help=f"reduction: {', '.join(REDUCE_OPS)} (default sum)")
    what.add_argument("-r", "--root", type=int, default=0, help="root of broadcast and reduce (default 0)")
    what.add_argument(
        "--placements",
        default="out_of_place,in_place",
        help="out_of_place, in_place (default both; out_of_place all_reduce, broadcast and reduce "
        "copy, then call in place: torch has no out-of-place form)",
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument("--mode", default="throughput", help="throughput, latency, or both (default throughput)")
    timing.add_argument("-G", "--cuda-graph", type=int, nargs="?", const=1, default=0, metavar="LAUNCHES",
                        help="also measure with CUDA graph replay, LAUNCHES replays per run (NCCL only)")  # fmt: skip
    timing.add_argument("-w", "--warmup", type=int, default=5, help="warm-up calls per size (default 5)")
    timing.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size (default 20)")
    timing.add_argument(
        "-c", "--check", type=int, default=1, help="checked calls per size after timing (default 1; 0: none)"
    )
    timing.add_argument("--min-time-ms", type=float, help="grow the iteration count until a timed run lasts "
                        "this long (default 50 on CPU, 0 = exactly -n on GPU)")  # fmt: skip
    world = parser.add_argument_group("world")
    world.add_argument("--nproc", type=int, help="local processes without a launcher (default 2)")
    world.add_argument("--backend", choices=("gloo", "nccl"), help="default: NCCL with a GPU per process, else gloo")
    world.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                       help=f"bounds the rendezvous and every collective (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    output = parser.add_argument_group("output (rank 0)")
    output.add_argument("--json", metavar="PATH", help="JSON Lines: header, one row per line, fits")
    output.add_argument("--csv", metavar="PATH", help="CSV of the rows")
    output.add_argument("--logdir", metavar="DIR", help="TensorBoard: busbw and time against size, and the table")
    return parser


def _parse_choices(text: str, choices: tuple[str, ...], option: str, both: str) -> list[str]:
    if text.strip().lower() in (both, "all"):
        return list(choices)
    chosen = []
    for part in (p.strip().lower().replace("-", "_") for p in text.split(",") if p.strip()):
        if part not in choices:
            raise UsageError(f"{option}: unknown value {part!r}; choose from {', '.join(choices)}, {both}")
        if part not in chosen:
            chosen.append(part)
    if not chosen:
        raise UsageError(f"{option}: empty list")
    return [c for c in choices if c in chosen]  # canonical order: out_of_place before in_place, as nccl-tests


def _sizes(args: argparse.Namespace, device_kind: str, element_size: int) -> tuple[list[int], str]:
    range_given = any(v is not None for v in (args.min_bytes, args.max_bytes, args.step_factor, args.step_bytes))
    if args.sizes is not None:
        if range_given:
            raise UsageError("--sizes replaces -b/-e/-f/-i; give one or the other")
        return parse_size_list(args.sizes, element_size), f"sizes: {args.sizes}"
    low = parse_size(args.min_bytes or "8", "--min-bytes")
    high = parse_size(args.max_bytes or DEFAULT_MAX_BYTES[device_kind], "--max-bytes")
    step = None if args.step_bytes is None else parse_size(args.step_bytes, "--step-bytes")
    sizes = size_range(low, high, args.step_factor, step)
    how = f"step: {args.step_factor or 2}(factor)" if step is None else f"step: {step}(bytes)"
    return sizes, f"minBytes {low} maxBytes {high} {how}"


def make_plan(
    args: argparse.Namespace, backend: str, world_size: int, nodes: int, launcher: str, writes_outputs: bool = True
) -> Plan:
    """Check every option against the world it will run in; a UsageError names the option at fault.
    `writes_outputs`: this process is the one that writes them (rank 0), so check that it can."""
    device_kind = "cuda" if backend == "nccl" else "cpu"
    if backend == "nccl" and not torch.cuda.is_available():
        raise UsageError("--backend nccl needs CUDA GPUs, and none is visible")
    if args.cuda_graph and backend != "nccl":
        raise UsageError("--cuda-graph needs NCCL on GPUs (gloo collectives cannot be captured)")
    for option, value, low in (("--iters", args.iters, 1), ("--warmup", args.warmup, 0), ("--check", args.check, 0)):
        if value < low:
            raise UsageError(f"{option} must be at least {low}, got {value}")
    if args.cuda_graph < 0:
        raise UsageError(f"--cuda-graph must be at least 1 launch, got {args.cuda_graph}")
    if not 0 <= args.root < world_size:
        raise UsageError(f"--root {args.root} is not a rank of a world of {world_size}")
    dtype = parse_dtype(args.dtype)
    op = args.op.lower()
    if op not in REDUCE_OPS:
        raise UsageError(f"--op: unknown reduction {args.op!r}; choose from {', '.join(REDUCE_OPS)}")
    if op == "avg" and not DTYPES[dtype].is_floating_point:
        raise UsageError(f"--op avg needs a floating-point --dtype, not {dtype}")
    min_time_ms = DEFAULT_MIN_TIME_MS[device_kind] if args.min_time_ms is None else args.min_time_ms
    if not (math.isfinite(min_time_ms) and min_time_ms >= 0):
        raise UsageError(f"--min-time-ms must be 0 or more, got {min_time_ms}")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if writes_outputs:
        check_writable(args.json, "--json")
        check_writable(args.csv, "--csv")
        check_writable(args.logdir, "--logdir", directory=True)
        check_distinct_outputs({"--json": args.json, "--csv": args.csv, "--logdir": args.logdir})
    element_size = torch.empty((), dtype=DTYPES[dtype]).element_size()
    sizes, size_spec = _sizes(args, device_kind, element_size)
    return Plan(
        collectives=parse_collectives(args.collectives),
        sizes=sizes,
        size_spec=size_spec,
        dtype=dtype,
        op=op,
        root=args.root,
        placements=_parse_choices(args.placements, PLACEMENTS, "--placements", "both"),
        modes=_parse_choices(args.mode, MODES, "--mode", "both"),
        graph_launches=args.cuda_graph,
        warmup=args.warmup,
        iters=args.iters,
        check=args.check,
        min_time_s=min_time_ms / 1e3,
        timeout_s=args.timeout,
        backend=backend,
        world_size=world_size,
        nodes=nodes,
        launcher=launcher,
        json_path=args.json,
        csv_path=args.csv,
        logdir=args.logdir,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse and check, then start the ranks and return their exit code; under a launcher, be one rank and end the
    process with its code (exit_without_teardown)."""
    args = build_parser().parse_args(argv)
    env = detect()
    if env.launcher == "none":
        nproc = 2 if args.nproc is None else args.nproc
        if nproc < 1:
            raise UsageError(f"--nproc must be at least 1, got {nproc}")
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        backend = args.backend or ("nccl" if gpus >= nproc else "gloo")
        if backend == "nccl" and gpus < nproc:
            raise UsageError(f"--backend nccl with --nproc {nproc} needs {nproc} GPUs; {gpus} visible")
        plan = make_plan(args, backend, nproc, nodes=1, launcher="local")
        grace_s = plan.timeout_s + GRACE_S
        return spawn_local(sweep_worker, nproc, (plan,), backend=backend, init_process_group=False, grace_s=grace_s)
    if args.nproc is not None:
        raise UsageError(f"--nproc starts local processes; under {env.launcher} the launcher sets the world size")
    backend = args.backend or default_backend()
    if backend == "nccl" and env.local_rank >= torch.cuda.device_count():
        raise UsageError(f"LOCAL_RANK {env.local_rank} has no GPU ({torch.cuda.device_count()} visible)")
    if env.launcher == "slurm" and not {"MASTER_ADDR", "MASTER_PORT"} <= os.environ.keys():
        raise UsageError("under SLURM, export MASTER_ADDR (the first node) and MASTER_PORT before srun")
    plan = make_plan(args, backend, env.world_size, env.num_nodes, env.launcher, writes_outputs=env.rank == 0)
    exit_without_teardown(run_rank(plan))  # never returns: the interpreter's teardown can abort a rank


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
