"""The raw sweep's engine: one timing loop for every collective, rows measured alike on every rank.

Every rank runs the same rows in the same order; anything that decides whether a row runs (a call that
fails, memory that is short) is agreed across ranks first, so no rank waits in a collective the others
skipped. The command line is harness.raw_sweep, one rank's life (process group, signals, failures) is
harness.sweep.rank, the collectives' definitions are harness.sweep.collectives. The pieces the loop uses:
clocks and bounded GPU waits (harness.sweep.clock), memory checks (harness.sweep.capacity), CUDA-graph
capture (harness.sweep.graph), the header (harness.sweep.header) and the outputs (harness.sweep.output).

Timing methods, named in each row's `timing` field:
    run            throughput: calls back to back between two clock reads (CUDA events or perf_counter),
                   time per call (nccl-tests' method). With --cuda-graph the run is graph replays.
    call           latency: each call alone, ranks aligned by a barrier outside the window. On a GPU the
                   window opens on an idle GPU, so it holds the host's launch of the call as well.
    call_in_graph  latency with --cuda-graph: the calls run back to back inside one replay, with timing
                   events captured between them; each sample is one call's GPU time, no host launch, no
                   barrier between calls.
    replay         latency with --cuda-graph where events cannot be captured: each call a one-call graph
                   replayed alone, events around the replay (holds the graph launch, as `call` does).

Memory: a row that does not fit (harness.sweep.capacity says why) is skipped with the reason, on every
rank, and the sweep goes on. Every wait for the GPU is bounded by --timeout. Whatever ends the sweep,
rank 0's outputs keep every row measured so far. An output that rank 0 can no longer write (a full disk, a
removed directory, a closed stdout) stops every rank together, after the row in progress: rank 0 raises
OutputFailed naming it, the others PeerStopped, and no rank is left in a collective the others never reach.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from harness.common.dist_env import detect
from harness.common.failures import Interrupted, OutputFailed, PeerStopped, failure_text, say, signal_name
from harness.common.metrics import algbw_gbps, busbw_factor, busbw_gbps, percentile
from harness.sweep.capacity import (
    MEMORY_SKIP,
    available_bytes,
    bytes_needed,
    is_out_of_memory,
    memory_problem,
    release_memory,
)
from harness.sweep.clock import Clock, barrier, sync
from harness.sweep.collectives import (
    COLLECTIVES,
    DTYPES,
    CallArgs,
    count_wrong,
    fill_input,
    layout,
    make_buffers,
    nccl_tests_type_name,
    skip_reason,
)
from harness.sweep.graph import capture, graph_events_supported
from harness.sweep.header import build_header, rank_devices
from harness.sweep.output import NullOutput, SweepOutput
from harness.sweep.plan import Plan, Where

PROG = "python -m harness.raw_sweep"
MAX_ITERS = 1_000_000  # the adaptive count stops here even for the fastest call


# ---- agreement across ranks ----------------------------------------------------------------------------


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


def _first_problem(problem: Any, device: torch.device) -> tuple[int, Any] | None:
    """None if no rank has a problem, else (rank, problem) of the first rank that has one, the same on every
    rank. One small all_reduce when none has; the problems are gathered only when one has."""
    if not _all_max(1 if problem else 0, device):
        return None
    problems: list = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    return next((r, p) for r, p in enumerate(problems) if p)


def _agreed_problem(problem: str | None, device: torch.device) -> str | None:
    """None if no rank has a problem, else the first rank's, the same on every rank."""
    first = _first_problem(problem, device)
    if first is None:
        return None
    rank, text = first
    return text if dist.get_world_size() == 1 else f"{text} (rank {rank})"


def _stop_if_an_output_failed(out: NullOutput, device: torch.device) -> None:
    """Stop every rank together once rank 0 cannot write an output: rank 0 raises the OutputFailed naming
    it, the others PeerStopped with the same words. Called between rows, outside every timed window."""
    failure = out.failure
    first = _first_problem((str(failure), failure.broken_pipe) if failure else None, device)
    if first is None:
        return
    if failure is not None:
        raise failure
    rank, (text, broken_pipe) = first
    raise PeerStopped(rank, text, broken_pipe)


# ---- the timing loop -----------------------------------------------------------------------------------


def _run_steps(step: Callable[[], None], count: int, where: Where) -> None:
    """`step` count times, back to back; on failure the step index goes to `where` (free when nothing fails)."""
    i = 0
    try:
        for i in range(count):  # noqa: B007 (i is read when a step fails)
            step()
    except BaseException:
        where.at(i, count)
        raise


def _first_call(call: Callable[[], None], device: torch.device, timeout_s: float) -> str | None:
    """Run the call once (nccl-tests' sync call); if any rank cannot run it, why, agreed by all ranks."""
    error = None
    try:
        call()
        sync(device, timeout_s)
    except (RuntimeError, ValueError, NotImplementedError) as err:
        error = err
    try:
        return _agreed_problem(failure_text(error, 200) if error else None, device)
    except Exception:
        if error is not None:  # the peers are gone too: the call's own error (a timeout, a reset) is the cause
            raise error from None
        raise


def _agreed_reps(reps: int, measured_s: float, min_time_s: float, device: torch.device) -> int:
    """How many repetitions reach min_time_s, the same on every rank (the largest any rank needs)."""
    if min_time_s <= 0:
        return reps
    want = reps if measured_s >= min_time_s else math.ceil(reps * min_time_s / max(measured_s, 1e-9))
    return _all_max(min(want, MAX_ITERS), device)


def _timed_run(step: Callable[[], None], reps: int, clock: Clock, device, where: Where) -> float:
    barrier(device, clock.timeout_s)
    start = clock.start()
    _run_steps(step, reps, where)
    return clock.seconds(start, clock.stop())


def _throughput(call, graph: bool, plan: Plan, device: torch.device, where: Where) -> dict:
    """nccl-tests' time: calls back to back between two clock reads, per call; slowest rank, and skew."""
    clock = Clock(device, plan.timeout_s)
    empty = False
    if graph:
        where.enter("capture")
        captured, empty = capture(call, plan.iters, plan.timeout_s)
        step, calls, reps = captured.replay, plan.iters, plan.graph_launches
    else:
        step, calls, reps = call, 1, plan.iters
    where.enter("timed run")
    elapsed = _timed_run(step, reps, clock, device, where)
    more = _agreed_reps(reps, elapsed, plan.min_time_s, device)
    if more > reps:  # extend the run: time per call is then the sum of times over the sum of calls
        reps, elapsed = more, elapsed + _timed_run(step, more - reps, clock, device, where)
    where.enter("gathering times")
    per_rank = _gather([elapsed / (reps * calls)], device)[:, 0]
    return {
        "iters": reps * calls,
        "time_us": float(per_rank.max()) * 1e6,
        "skew_us": float(per_rank.max() - per_rank.min()) * 1e6,
        "timing": "run",
        "note": _EMPTY_GRAPH_NOTE if empty else None,
    }


_EMPTY_GRAPH_NOTE = "the captured calls enqueued no GPU work (empty CUDA graph): the time is launch overhead only"


def _eager_samples(call, count: int, clock: Clock, device, where: Where) -> list[float]:
    samples = []
    for i in range(count):
        try:
            barrier(device, clock.timeout_s)  # outside the timed window
            start = clock.start()
            call()
            samples.append(clock.seconds(start, clock.stop()))
        except BaseException:
            where.at(i, count)
            raise
    return samples


def _graph_samples(call, count: int, plan: Plan, device, where: Where) -> tuple[Callable[[], list[float]], bool]:
    """A function returning `count` per-call GPU times per replay, and whether the graph is empty."""
    if graph_events_supported():
        _, empty = capture(call, 1, plan.timeout_s)  # alone: event nodes would make an empty graph look busy
        marks = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(count + 1)]
        graph, _ = capture(call, count, plan.timeout_s, marks)

        def replay() -> list[float]:
            barrier(device, plan.timeout_s)
            graph.replay()
            sync(device, plan.timeout_s)  # an event recorded after the replay, in stream order
            return [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(count)]

        return replay, empty
    graph, empty = capture(call, 1, plan.timeout_s)
    clock = Clock(device, plan.timeout_s)
    return lambda: _eager_samples(graph.replay, count, clock, device, where), empty


def _latency(call, graph: bool, plan: Plan, device: torch.device, where: Where) -> dict:
    """Each call timed alone; an iteration's time is its slowest rank's; skew is the per-iteration spread."""
    empty = False
    if graph:
        where.enter("capture")
        sample, empty = _graph_samples(call, plan.iters, plan, device, where)
        timing = "call_in_graph" if graph_events_supported() else "replay"
    else:
        clock = Clock(device, plan.timeout_s)

        def sample() -> list[float]:
            return _eager_samples(call, plan.iters, clock, device, where)

        timing = "call"
    where.enter("timed calls")
    samples = sample()
    more = _agreed_reps(plan.iters, sum(samples), plan.min_time_s, device)
    while len(samples) < more:
        samples += sample()
    where.enter("gathering times")
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
        "timing": timing,
        "note": _EMPTY_GRAPH_NOTE if empty else None,
    }


def _check(name: str, bufs, lay, args: CallArgs, times: int, device, timeout_s: float, where: Where):
    """Wrong elements over all ranks in `times` checked calls on fresh inputs (None: not checked), and why
    not where a rank could not check (its scratch memory failed)."""
    if times == 0:
        return None, ""
    wrong, failed = 0, 0
    for i in range(times):
        try:
            fill_input(name, bufs, args)
            COLLECTIVES[name].run(bufs, args)
            sync(device, timeout_s)
            wrong += count_wrong(name, bufs, lay, args)
        except (MemoryError, RuntimeError) as err:
            if not is_out_of_memory(err):
                where.at(i, times)
                raise
            failed = 1
            break
    where.enter("check totals")
    total = torch.tensor([wrong, failed], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    if total[1].item():
        return None, "check not run: out of memory on a rank"
    return int(total[0].item()), ""


def measure_row(
    plan: Plan,
    name: str,
    size: int,
    placement: str,
    mode: str,
    graph: bool,
    device: torch.device,
    where: Where | None = None,
) -> dict:
    """One row: (collective, size, placement, mode, graph) measured and checked, on every rank alike."""
    where = where or Where()
    rank, n = dist.get_rank(), dist.get_world_size()
    coll, dtype = COLLECTIVES[name], DTYPES[plan.dtype]
    lay = layout(name, size, dtype, n)
    where.row(name, lay.size_bytes, placement, mode, graph)
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
        "timing": None,
        "note": None,
    }
    reason = skip_reason(name, placement, plan.backend, n)
    if reason:
        return row | {"skipped": reason}
    where.enter("allocation")
    aliased = placement == "in_place"
    need = bytes_needed(lay.send_numel, lay.recv_numel, lay.element_size, aliased)
    sharing = 1 if device.type == "cuda" else detect().local_world_size
    problem = memory_problem(need, sharing, available_bytes(device))
    bufs = None
    args = CallArgs(rank, n, plan.op if coll.reduces else None, plan.root)
    if problem is None:
        try:
            bufs = make_buffers(name, lay, placement, rank, dtype, device)
            fill_input(name, bufs, args)
        except (MemoryError, RuntimeError) as err:  # no collective runs here: any error is the allocation's
            bufs, problem = None, f"{MEMORY_SKIP}allocation failed: {failure_text(err, 200)}"
    reason = _agreed_problem(problem, device)
    if reason:
        release_memory(device)
        return row | {"skipped": reason}

    def call() -> None:
        coll.run(bufs, args)

    where.enter("first call")
    reason = _first_call(call, device, plan.timeout_s)
    if reason:
        return row | {"skipped": reason}
    where.enter("warm-up")
    _run_steps(call, plan.warmup, where)
    sync(device, plan.timeout_s)
    row |= (_throughput if mode == "throughput" else _latency)(call, graph, plan, device, where)
    where.enter("check")
    row["wrong"], why_not = _check(name, bufs, lay, args, plan.check, device, plan.timeout_s, where)
    if why_not:
        row["note"] = "; ".join(filter(None, (row["note"], why_not)))
    seconds = row["time_us"] / 1e6
    row["algbw_gbps"] = algbw_gbps(lay.size_bytes, seconds)
    row["busbw_gbps"] = busbw_gbps(name, lay.size_bytes, seconds, n)
    return row


# ---- the sweep -------------------------------------------------------------------------------------------


def run_sweep(plan: Plan, device: torch.device | None = None, where: Where | None = None) -> bool:
    """Run the plan in an initialised process group (every rank calls it). True when nothing was wrong.
    Whatever ends it (a failure, an interrupt), rank 0's outputs keep every row measured so far."""
    env = detect()
    if device is None:
        device = torch.device("cuda", env.local_rank) if plan.backend == "nccl" else torch.device("cpu")
    where = where or Where()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rank, n = dist.get_rank(), dist.get_world_size()
    where.enter("header")
    record, preamble = build_header(plan, rank_devices(device), device)
    if rank == 0 and n == 1:
        say(PROG, "warning: world size 1: busbw is 0 by definition (no data crosses a link)")
    log2_x = all(size > 0 and size & (size - 1) == 0 for size in plan.sizes)
    out = SweepOutput(plan.json_path, plan.csv_path, plan.logdir, log2_x, sys.stdout) if rank == 0 else NullOutput()
    eager_us: dict[tuple, float | None] = {}
    wrong, memory_skips = 0, []
    end = {"status": "failed", "reason": "", "at": ""}
    try:
        out.header(record, preamble)
        _stop_if_an_output_failed(out, device)
        for name in plan.collectives:
            for mode in plan.modes:
                for graph in (False, True) if plan.graph_launches else (False,):
                    out.begin_table(name, mode, graph, plan.placements)
                    for size in plan.sizes:
                        for placement in plan.placements:
                            row = measure_row(plan, name, size, placement, mode, graph, device, where)
                            key = (name, mode, size, placement)
                            if not graph:
                                eager_us[key] = row["time_us"]
                            elif row["time_us"] is not None and eager_us.get(key) is not None:
                                row["host_overhead_us"] = eager_us[key] - row["time_us"]
                            wrong += row["wrong"] or 0
                            if (row["skipped"] or "").startswith(MEMORY_SKIP):
                                memory_skips.append(row)
                            out.row(row, nccl_tests_type_name(plan.dtype))
                            _stop_if_an_output_failed(out, device)
                    out.end_table(busbw_factor(name, n))
                    _stop_if_an_output_failed(out, device)
        end = {"status": "wrong" if wrong else "ok", "reason": "", "at": ""}
    except Interrupted as stop:
        end = {"status": "interrupted", "reason": signal_name(stop.signum), "at": str(where)}
        raise
    except (OutputFailed, PeerStopped) as stop:
        end = {"status": "failed", "reason": str(stop), "at": ""}  # between rows: no row to name
        raise
    except BaseException as err:
        end = {"status": "failed", "reason": failure_text(err), "at": str(where)}
        raise
    finally:
        out.close(end)
    if out.failure is not None:  # the last writes (the end record, closing the files) failed: say so
        raise out.failure
    if memory_skips and rank == 0:
        first = memory_skips[0]
        say(PROG, f"warning: {len(memory_skips)} rows skipped, from {first['size_bytes']} B: {first['skipped']}")
    return wrong == 0
