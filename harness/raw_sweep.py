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
Each process uses GPU LOCAL_RANK. The semantics are nccl-tests' (shared METRICS.md): size S and count as
nccl-tests prints them, algbw = S/t, busbw = algbw × factor(n), out-of-place then in-place, -w 5 -n 20
-c 1. Where this differs, on purpose:
- An operation's time across ranks is the slowest rank's (nccl-tests averages by default, its -a 1);
  the spread across ranks is skew_us.
- Modes. throughput is nccl-tests' meaning: `iters` calls back to back between two CUDA events, time
  per call. latency times each call alone, with a barrier outside the timed window; it reports p50, p90,
  p99, min and max of the per-iteration time of the slowest rank, and the p50 of the per-iteration spread
  as skew_us; its time_us is the p50 (give -n 100 or more for a meaningful p99).
- --cuda-graph (nccl-tests -G) captures the calls once and replays them, without host launch costs.
  Each mode is then measured eager and replayed, and graph rows carry host_overhead_us = eager − graph:
  the per-call host cost that a training step pays.
- On CPU (gloo) the clock is time.perf_counter and the iteration count grows until a timed run lasts
  --min-time-ms (as gloo's own benchmark does). On GPU it is exactly -n unless --min-time-ms is given.
- torch has no out-of-place all_reduce, broadcast or reduce: their out_of_place rows copy the input into
  the output and make the in-place call (emulated=true; the time includes the copy). In-place all_to_all
  and send_recv are skipped, as nccl-tests does not check them either (see harness.collectives).
- The check (-c N) runs after timing, eagerly, on fresh inputs whose exact result is known; each row
  counts the wrong elements over all ranks, and any wrong element makes the exit code 1.
- World size 1 is allowed: busbw is then 0 by definition, and the run says so.
Per collective and placement, time = alpha + S/beta is fitted over the sizes (harness.metrics), printed
under each table and written as a "fit" record; `load_fits(path)` reads them back for predictions.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from harness.collectives import (
    COLLECTIVES,
    DTYPES,
    PLACEMENTS,
    REDUCE_OPS,
    CallArgs,
    count_wrong,
    fill_input,
    layout,
    make_buffers,
    nccl_tests_type_name,
    parse_collectives,
    parse_dtype,
    skip_reason,
)
from harness.dist_env import apply_safe_nccl_env, default_backend, detect
from harness.errors import UsageError, run_cli
from harness.local_launch import spawn_local
from harness.metrics import algbw_gbps, busbw_factor, busbw_gbps, percentile
from harness.run_info import run_info
from harness.sizes import parse_size, parse_size_list, size_range
from harness.sweep_output import Fit, NullOutput, SweepOutput, load_fits

__all__ = ["Fit", "Plan", "load_fits", "main", "run_sweep"]

PROG = "python -m harness.raw_sweep"
MODES = ("throughput", "latency")
# Defaults by device: the CPU default sweep must finish in seconds on 2 cores; a GPU sweep goes to 1 GiB.
DEFAULT_MAX_BYTES = {"cpu": "32M", "cuda": "1G"}
DEFAULT_MIN_TIME_MS = {"cpu": 50.0, "cuda": 0.0}
MAX_ITERS = 1_000_000  # the adaptive count stops here even for the fastest call


@dataclass(frozen=True)
class Plan:
    """Everything a sweep does, resolved and checked before any process group exists."""

    collectives: list[str]
    sizes: list[int]
    size_spec: str
    dtype: str
    op: str
    root: int
    placements: list[str]
    modes: list[str]
    graph_launches: int  # 0: eager only; else graph replays per timed run (nccl-tests -G)
    warmup: int
    iters: int
    check: int
    min_time_s: float
    backend: str
    world_size: int
    nodes: int
    launcher: str
    json_path: str | None
    csv_path: str | None
    logdir: str | None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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


def _check_output_path(path: str | None, option: str) -> None:
    if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UsageError(f"{option}: directory of {path!r} does not exist")


def make_plan(args: argparse.Namespace, backend: str, world_size: int, nodes: int, launcher: str) -> Plan:
    """Check every option against the world it will run in; a UsageError names the option at fault."""
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
    if min_time_ms < 0:
        raise UsageError(f"--min-time-ms must be 0 or more, got {min_time_ms}")
    _check_output_path(args.json, "--json")
    _check_output_path(args.csv, "--csv")
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
        backend=backend,
        world_size=world_size,
        nodes=nodes,
        launcher=launcher,
        json_path=args.json,
        csv_path=args.csv,
        logdir=args.logdir,
    )


# ---- the engine: one timing loop for every collective ----------------------------------------------------


class _Clock:
    """CUDA events on the current stream on a GPU; the monotonic perf_counter on CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _barrier(device: torch.device) -> None:
    dist.barrier()
    _sync(device)  # NCCL's barrier is a collective on the GPU: wait for it before starting a clock


def _all_max(value: int, device: torch.device) -> int:
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def _gather(values: list[float], device: torch.device) -> torch.Tensor:
    """(world_size, len(values)) on the CPU: every rank's values. Called outside any timed window."""
    local = torch.tensor(values, dtype=torch.float64, device=device)
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local)
    return torch.stack(parts).cpu()


def _first_call(call: Callable[[], None], device: torch.device) -> str | None:
    """Run the call once (nccl-tests' sync call); if any rank cannot run it, why, agreed by all ranks."""
    error = None
    try:
        call()
        _sync(device)
    except (RuntimeError, ValueError, NotImplementedError) as err:
        error = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:200]}"
    if _all_max(1 if error else 0, device):
        return error or "another rank could not run this call"
    return None


def _capture(call: Callable[[], None], calls: int) -> torch.cuda.CUDAGraph:
    """`calls` calls captured into one CUDA graph, replayed once so the timed replays find it uploaded.
    Thread-local capture mode lets NCCL's watchdog thread keep querying its events meanwhile."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(calls):
            call()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _agreed_reps(reps: int, measured_s: float, min_time_s: float, device: torch.device) -> int:
    """How many repetitions reach min_time_s, the same on every rank (the largest any rank needs)."""
    if min_time_s <= 0:
        return reps
    want = reps if measured_s >= min_time_s else math.ceil(reps * min_time_s / max(measured_s, 1e-9))
    return _all_max(min(want, MAX_ITERS), device)


def _timed_run(step: Callable[[], None], reps: int, clock: _Clock, device: torch.device) -> float:
    _barrier(device)
    start = clock.mark()
    for _ in range(reps):
        step()
    return clock.seconds(start, clock.mark())


def _throughput(call, graph: bool, plan: Plan, device: torch.device) -> dict:
    """nccl-tests' time: calls back to back between two clock marks, per call; slowest rank, and skew."""
    clock = _Clock(device)
    if graph:
        step, calls, reps = _capture(call, plan.iters).replay, plan.iters, plan.graph_launches
    else:
        step, calls, reps = call, 1, plan.iters
    elapsed = _timed_run(step, reps, clock, device)
    more = _agreed_reps(reps, elapsed, plan.min_time_s, device)
    if more > reps:  # extend the run: time per call is then the sum of times over the sum of calls
        reps, elapsed = more, elapsed + _timed_run(step, more - reps, clock, device)
    per_rank = _gather([elapsed / (reps * calls)], device)[:, 0]
    return {
        "iters": reps * calls,
        "time_us": float(per_rank.max()) * 1e6,
        "skew_us": float(per_rank.max() - per_rank.min()) * 1e6,
    }


def _samples(step: Callable[[], None], count: int, clock: _Clock, device: torch.device) -> list[float]:
    marks = []
    for _ in range(count):
        _barrier(device)  # outside the timed window
        start = clock.mark()
        step()
        marks.append((start, clock.mark()))
    return [clock.seconds(start, end) for start, end in marks]


def _latency(call, graph: bool, plan: Plan, device: torch.device) -> dict:
    """Each call timed alone; an iteration's time is its slowest rank's; skew is the per-iteration spread."""
    clock = _Clock(device)
    step = _capture(call, 1).replay if graph else call
    samples = _samples(step, plan.iters, clock, device)
    more = _agreed_reps(plan.iters, sum(samples), plan.min_time_s, device)
    if more > plan.iters:
        samples += _samples(step, more - plan.iters, clock, device)
    table = _gather(samples, device)
    slowest = (table.max(dim=0).values * 1e6).tolist()
    spread = ((table.max(dim=0).values - table.min(dim=0).values) * 1e6).tolist()
    return {
        "iters": len(samples),
        "time_us": percentile(slowest, 50),
        "p50_us": percentile(slowest, 50),
        "p90_us": percentile(slowest, 90),
        "p99_us": percentile(slowest, 99),
        "min_us": min(slowest),
        "max_us": max(slowest),
        "skew_us": percentile(spread, 50),
    }


def _check(name: str, bufs, lay, args: CallArgs, times: int, device: torch.device) -> int | None:
    """Wrong elements over all ranks in `times` checked calls on fresh inputs; None when not checked."""
    if times == 0:
        return None
    wrong = 0
    for _ in range(times):
        fill_input(name, bufs, args)
        COLLECTIVES[name].run(bufs, args)
        _sync(device)
        wrong += count_wrong(name, bufs, lay, args)
    total = torch.tensor([wrong], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return int(total.item())


def measure_row(plan: Plan, name: str, size: int, placement: str, mode: str, graph: bool, device) -> dict:
    """One row: (collective, size, placement, mode, graph) measured and checked, on every rank alike."""
    rank, n = dist.get_rank(), dist.get_world_size()
    coll, dtype = COLLECTIVES[name], DTYPES[plan.dtype]
    lay = layout(name, size, dtype, n)
    row = dict.fromkeys(("iters", "time_us", "algbw_gbps", "busbw_gbps", "wrong", "skipped"))
    row |= dict.fromkeys(("p50_us", "p90_us", "p99_us", "min_us", "max_us", "skew_us", "host_overhead_us"))
    row |= {
        "collective": name,
        "size_bytes": lay.size_bytes,
        "count": lay.count,
        "dtype": plan.dtype,
        "world_size": n,
        "nodes": plan.nodes,
        "placement": placement,
        "mode": mode,
        "cuda_graph": graph,
        "op": plan.op if coll.reduces else "none",
        "root": plan.root if coll.rooted else -1,
        "emulated": placement == "out_of_place" and coll.out_of_place_copy,
        "backend": plan.backend,
        "device": device.type,
    }
    reason = skip_reason(name, placement, plan.backend, n)
    if reason:
        return row | {"skipped": reason}
    bufs = make_buffers(name, lay, placement, rank, dtype, device)
    args = CallArgs(rank, n, plan.op if coll.reduces else None, plan.root)
    fill_input(name, bufs, args)

    def call() -> None:
        coll.run(bufs, args)

    reason = _first_call(call, device)
    if reason:
        return row | {"skipped": reason}
    for _ in range(plan.warmup):
        call()
    _sync(device)
    row |= (_throughput if mode == "throughput" else _latency)(call, graph, plan, device)
    row["wrong"] = _check(name, bufs, lay, args, plan.check, device)
    seconds = row["time_us"] / 1e6
    row["algbw_gbps"] = algbw_gbps(lay.size_bytes, seconds)
    row["busbw_gbps"] = busbw_gbps(name, lay.size_bytes, seconds, n)
    return row


# ---- the sweep -------------------------------------------------------------------------------------------


def _rank_devices(device: torch.device) -> list[dict]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    mine = {"rank": dist.get_rank(), "host": socket.gethostname(), "pid": os.getpid(), "device": str(device)}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine | {"name": name})
    return everyone


def _header(plan: Plan, ranks: list[dict], device: torch.device) -> tuple[dict, list[str]]:
    notes = ["time across ranks is the slowest rank's (max); skew_us is the spread"]
    if plan.world_size == 1:
        notes.append("world size 1: busbw is 0 by definition (no data crosses a link)")
    info = run_info() if dist.get_rank() == 0 else {}  # it imports lightning and torchvision: seconds
    record = {"record": "header", "tool": "harness.raw_sweep", "argv": sys.argv[1:], **info}
    record |= {"launcher": plan.launcher, "backend": plan.backend, "device": device.type}
    record |= {"world_size": plan.world_size, "nodes": plan.nodes, "ranks": ranks, "notes": notes}
    record["plan"] = {k: v for k, v in asdict(plan).items() if k not in ("json_path", "csv_path", "logdir")}
    lines = [
        f"# harness.raw_sweep: {', '.join(plan.collectives)} | backend {plan.backend} | world size "
        f"{plan.world_size} on {plan.nodes} node(s) | launcher {plan.launcher} | torch {torch.__version__}",
        f"# {plan.size_spec} warmup iters: {plan.warmup} iters: {plan.iters} validation: {plan.check} "
        f"graph: {plan.graph_launches} min time: {plan.min_time_s * 1e3:g} ms | mode: {', '.join(plan.modes)}",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {r['rank']:2d} Pid {r['pid']:7d} on {r['host']:>10} device {r['device']:>7} {r['name']}"
        for r in ranks
    ]
    lines += [f"# Note: {note}" for note in notes]
    return record, lines


def run_sweep(plan: Plan) -> bool:
    """Run the plan in an initialised process group (every rank calls it). True when nothing was wrong."""
    env = detect()
    device = torch.device("cuda", env.local_rank) if plan.backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rank, n = dist.get_rank(), dist.get_world_size()
    record, preamble = _header(plan, _rank_devices(device), device)
    if rank == 0 and n == 1:
        print(f"{PROG}: warning: world size 1: busbw is 0 by definition (no data crosses a link)", file=sys.stderr)
    log2_x = all(size > 0 and size & (size - 1) == 0 for size in plan.sizes)
    out = SweepOutput(plan.json_path, plan.csv_path, plan.logdir, log2_x, sys.stdout) if rank == 0 else NullOutput()
    eager_us: dict[tuple, float | None] = {}
    wrong = 0
    try:
        out.header(record, preamble)
        for name in plan.collectives:
            for mode in plan.modes:
                for graph in (False, True) if plan.graph_launches else (False,):
                    out.begin_table(name, mode, graph, plan.placements)
                    for size in plan.sizes:
                        for placement in plan.placements:
                            row = measure_row(plan, name, size, placement, mode, graph, device)
                            key = (name, mode, size, placement)
                            if not graph:
                                eager_us[key] = row["time_us"]
                            elif row["time_us"] is not None and eager_us.get(key) is not None:
                                row["host_overhead_us"] = eager_us[key] - row["time_us"]
                            wrong += row["wrong"] or 0
                            out.row(row, nccl_tests_type_name(plan.dtype))
                    out.end_table(busbw_factor(name, n))
    finally:
        out.close()
    return wrong == 0


def _spawned(plan: Plan) -> None:
    if not run_sweep(plan):
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> int:
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
        return spawn_local(_spawned, nproc, (plan,), backend=backend)
    if args.nproc is not None:
        raise UsageError(f"--nproc starts local processes; under {env.launcher} the launcher sets the world size")
    backend = args.backend or default_backend()
    if backend == "nccl" and env.local_rank >= torch.cuda.device_count():
        raise UsageError(f"LOCAL_RANK {env.local_rank} has no GPU ({torch.cuda.device_count()} visible)")
    if env.launcher == "slurm" and not {"MASTER_ADDR", "MASTER_PORT"} <= os.environ.keys():
        raise UsageError("under SLURM, export MASTER_ADDR (the first node) and MASTER_PORT before srun")
    plan = make_plan(args, backend, env.world_size, env.num_nodes, env.launcher)
    apply_safe_nccl_env()
    device_id = None
    if backend == "nccl":
        torch.cuda.set_device(env.local_rank)
        device_id = torch.device("cuda", env.local_rank)
    dist.init_process_group(backend, rank=env.rank, world_size=env.world_size, device_id=device_id)
    try:
        ok = run_sweep(plan)
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
