"""The raw sweep's engine: one timing loop for every collective, rows measured alike on every rank.

Every rank runs the same rows in the same order; anything that decides whether a row runs (a call that
fails, memory that is short) is agreed across ranks first, so no rank waits in a collective the others
skipped. The command line is harness.raw_sweep, one rank's life (process group, signals, failures) is
harness.sweep.rank, the collectives' definitions are harness.sweep.collectives.

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

Memory: before allocating a row's buffers each rank compares what the row needs with what is available
(GPU: free plus the allocator's unused reserve; CPU: MemAvailable shared by the host's ranks), and an
allocation that fails anyway is caught; either way the row is skipped with the reason, on every rank,
and the sweep goes on. Every wait for the GPU is bounded by --timeout (NCCL's watchdog does not watch
graph replays). Whatever ends the sweep, rank 0's outputs keep every row measured so far.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from harness.common.dist_env import detect
from harness.common.failures import Interrupted, failure_text, signal_name
from harness.common.metrics import algbw_gbps, busbw_factor, busbw_gbps, percentile
from harness.common.run_info import run_info
from harness.sweep.collectives import (
    CHUNK,
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
from harness.sweep.output import NullOutput, SweepOutput

PROG = "python -m harness.raw_sweep"
MAX_ITERS = 1_000_000  # the adaptive count stops here even for the fastest call
GIB = 1024**3
# Inputs and checks work in int64 chunks of CHUNK elements; about this many int64 temporaries live at once.
CHECK_SCRATCH_INT64 = 6
MEMORY_HEADROOM = 0.9  # a row runs only if it needs at most this fraction of the memory available
MEMORY_SKIP = "memory: "  # how the reason of a row skipped for memory begins
TIMING_METHODS = {
    "run": "calls back to back between two clock reads, time per call (nccl-tests' method)",
    "call": "each call alone after a barrier; on a GPU the window includes the host's launch of the call",
    "call_in_graph": "calls back to back in one CUDA graph replay, timing events captured between them: "
    "one call's GPU time, no host launch, no barrier",
    "replay": "a one-call CUDA graph replayed alone, events around the replay (includes the graph launch)",
}


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
    timeout_s: float  # bounds the rendezvous, every collective and every wait for the GPU
    backend: str
    world_size: int
    nodes: int
    launcher: str
    json_path: str | None
    csv_path: str | None
    logdir: str | None


# ---- what is running, for the one-line message when something fails -----------------------------------


@dataclass
class Where:
    """The row and phase in progress. Loops fill in the step only when they fail, so timing pays nothing."""

    collective: str | None = None
    size_bytes: int | None = None
    placement: str = ""
    mode: str = ""
    graph: bool = False
    phase: str = "setup"
    step: int | None = None
    steps: int | None = None

    def row(self, collective: str, size_bytes: int, placement: str, mode: str, graph: bool) -> None:
        self.collective, self.size_bytes, self.placement, self.mode, self.graph = (
            collective, size_bytes, placement, mode, graph,
        )  # fmt: skip
        self.enter("setup")

    def enter(self, phase: str) -> None:
        self.phase, self.step, self.steps = phase, None, None

    def at(self, step: int, steps: int) -> None:
        self.step, self.steps = step, steps

    def __str__(self) -> str:
        text = self.phase
        if self.step is not None:
            text += f" step {self.step + 1} of {self.steps}"
        if self.collective is None:
            return text
        variant = "CUDA graph" if self.graph else "eager"
        return f"{self.collective} {self.size_bytes} B {self.placement} {self.mode} {variant}, {text}"


class GpuWaitTimeout(RuntimeError):
    """The GPU did not finish within --timeout: a peer is dead or stuck (NCCL does not watch graph replays)."""


# ---- clocks and waits ----------------------------------------------------------------------------------


def _wait_event(event, timeout_s: float) -> None:
    """Wait for a recorded CUDA event, at most timeout_s. Polls, so a hung NCCL kernel cannot block forever."""
    if event.query():
        return
    deadline = time.monotonic() + timeout_s
    pause = 1e-5
    while not event.query():
        if time.monotonic() > deadline:
            raise GpuWaitTimeout(f"the GPU did not finish within --timeout {timeout_s:g} s")
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


def _sync(device: torch.device, timeout_s: float) -> None:
    """Wait for the current stream (collectives are synchronous ops: it waits on NCCL's stream)."""
    if device.type == "cuda":
        event = torch.cuda.Event()
        event.record()
        _wait_event(event, timeout_s)


class _Clock:
    """Two CUDA events on the current stream on a GPU, created up front so no event is created inside a
    window; the monotonic perf_counter on CPU."""

    def __init__(self, device: torch.device, timeout_s: float):
        self.cuda = device.type == "cuda"
        self.timeout_s = timeout_s
        if self.cuda:
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for event in self.events:  # torch creates the CUDA event at its first record
                event.record()
            _wait_event(self.events[1], timeout_s)

    def start(self):
        if not self.cuda:
            return time.perf_counter()
        self.events[0].record()
        return self.events[0]

    def stop(self):
        if not self.cuda:
            return time.perf_counter()
        self.events[1].record()
        return self.events[1]

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        _wait_event(end, self.timeout_s)
        return start.elapsed_time(end) / 1e3


def _barrier(device: torch.device, timeout_s: float) -> None:
    dist.barrier()
    _sync(device, timeout_s)  # NCCL's barrier is a collective on the GPU: wait for it before starting a clock


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


def _agreed_problem(problem: str | None, device: torch.device) -> str | None:
    """None if no rank has a problem, else the first rank's, the same on every rank."""
    if not _all_max(1 if problem else 0, device):
        return None
    problems: list = [None] * dist.get_world_size()
    dist.all_gather_object(problems, problem)
    rank, text = next((r, p) for r, p in enumerate(problems) if p)
    return text if dist.get_world_size() == 1 else f"{text} (rank {rank})"


# ---- memory --------------------------------------------------------------------------------------------


def bytes_needed(send_numel: int, recv_numel: int, element_size: int, aliased: bool) -> int:
    """A row's peak bytes on one rank: its buffers, and the int64 scratch of filling and checking them."""
    buffers = (max(send_numel, recv_numel) if aliased else send_numel + recv_numel) * element_size
    return buffers + min(max(send_numel, recv_numel), CHUNK) * 8 * CHECK_SCRATCH_INT64


def available_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can use: free GPU memory plus the caching allocator's unused reserve, or the
    host's MemAvailable. None where it cannot be known."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def memory_problem(need: int, sharing: int, available: int | None) -> str | None:
    """Why a row that needs `need` bytes on each of `sharing` ranks of this memory cannot run, or None."""
    if available is None or need * sharing <= available * MEMORY_HEADROOM:
        return None
    per = f" on each of {sharing} ranks of this host" if sharing > 1 else ""
    return f"{MEMORY_SKIP}would need {_gib(need)}{per}, {_gib(available)} available"


def _gib(size: float) -> str:
    gib = size / GIB
    return f"{gib:,.0f} GiB" if gib >= 1000 else f"{gib:.3g} GiB"


def is_out_of_memory(err: BaseException) -> bool:
    """An allocation failure: torch's OutOfMemoryError (CUDA), the CPU allocator's RuntimeError, MemoryError."""
    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def _release_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


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
        _sync(device, timeout_s)
    except (RuntimeError, ValueError, NotImplementedError) as err:
        error = err
    try:
        return _agreed_problem(failure_text(error, 200) if error else None, device)
    except Exception:
        if error is not None:  # the peers are gone too: the call's own error (a timeout, a reset) is the cause
            raise error from None
        raise


_external_events_work: bool | None = None


def _graph_events_supported() -> bool:
    """Whether timing events can be captured inside a CUDA graph and read after a replay (torch >= 2.8's
    Event(external=True)). Probed once on a private tensor, outside any collective."""
    global _external_events_work
    if _external_events_work is None:
        try:
            x = torch.zeros(1024, device="cuda")
            events = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(2)]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # NCCL's watchdog polls meanwhile
                events[0].record()
                x.add_(1)
                events[1].record()
            graph.replay()
            torch.cuda.synchronize()
            _external_events_work = events[0].elapsed_time(events[1]) >= 0
        except (TypeError, RuntimeError):
            _external_events_work = False
    return _external_events_work


def _capture(call: Callable[[], None], calls: int, timeout_s: float, marks: list | None = None):
    """`calls` calls captured into one CUDA graph, replayed once so the timed replays find it uploaded.
    With `marks` (calls + 1 external timing events) an event is captured before, between and after the
    calls. Returns (graph, empty): empty when the calls enqueued no GPU work at all. Thread-local capture
    mode lets NCCL's watchdog thread keep querying its events meanwhile."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            if marks:
                marks[0].record()
            for i in range(calls):
                call()
                if marks:
                    marks[i + 1].record()
    empty = any("graph is empty" in str(w.message).lower() for w in caught)
    graph.replay()
    _sync(torch.device("cuda"), timeout_s)
    return graph, empty


def _agreed_reps(reps: int, measured_s: float, min_time_s: float, device: torch.device) -> int:
    """How many repetitions reach min_time_s, the same on every rank (the largest any rank needs)."""
    if min_time_s <= 0:
        return reps
    want = reps if measured_s >= min_time_s else math.ceil(reps * min_time_s / max(measured_s, 1e-9))
    return _all_max(min(want, MAX_ITERS), device)


def _timed_run(step: Callable[[], None], reps: int, clock: _Clock, device, where: Where) -> float:
    _barrier(device, clock.timeout_s)
    start = clock.start()
    _run_steps(step, reps, where)
    return clock.seconds(start, clock.stop())


def _throughput(call, graph: bool, plan: Plan, device: torch.device, where: Where) -> dict:
    """nccl-tests' time: calls back to back between two clock reads, per call; slowest rank, and skew."""
    clock = _Clock(device, plan.timeout_s)
    empty = False
    if graph:
        where.enter("capture")
        captured, empty = _capture(call, plan.iters, plan.timeout_s)
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


def _eager_samples(call, count: int, clock: _Clock, device, where: Where) -> list[float]:
    samples = []
    for i in range(count):
        try:
            _barrier(device, clock.timeout_s)  # outside the timed window
            start = clock.start()
            call()
            samples.append(clock.seconds(start, clock.stop()))
        except BaseException:
            where.at(i, count)
            raise
    return samples


def _graph_samples(call, count: int, plan: Plan, device, where: Where) -> tuple[Callable[[], list[float]], bool]:
    """A function returning `count` per-call GPU times per replay, and whether the graph is empty."""
    if _graph_events_supported():
        _, empty = _capture(call, 1, plan.timeout_s)  # alone: event nodes would make an empty graph look busy
        marks = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(count + 1)]
        graph, _ = _capture(call, count, plan.timeout_s, marks)

        def replay() -> list[float]:
            _barrier(device, plan.timeout_s)
            graph.replay()
            _sync(device, plan.timeout_s)  # an event recorded after the replay, in stream order
            return [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(count)]

        return replay, empty
    graph, empty = _capture(call, 1, plan.timeout_s)
    clock = _Clock(device, plan.timeout_s)
    return lambda: _eager_samples(graph.replay, count, clock, device, where), empty


def _latency(call, graph: bool, plan: Plan, device: torch.device, where: Where) -> dict:
    """Each call timed alone; an iteration's time is its slowest rank's; skew is the per-iteration spread."""
    empty = False
    if graph:
        where.enter("capture")
        sample, empty = _graph_samples(call, plan.iters, plan, device, where)
        timing = "call_in_graph" if _graph_events_supported() else "replay"
    else:
        clock = _Clock(device, plan.timeout_s)

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
            _sync(device, timeout_s)
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


def measure_row(plan: Plan, name: str, size: int, placement: str, mode: str, graph: bool, device, where=None) -> dict:
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
        _release_memory(device)
        return row | {"skipped": reason}

    def call() -> None:
        coll.run(bufs, args)

    where.enter("first call")
    reason = _first_call(call, device, plan.timeout_s)
    if reason:
        return row | {"skipped": reason}
    where.enter("warm-up")
    _run_steps(call, plan.warmup, where)
    _sync(device, plan.timeout_s)
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


def _rank_devices(device: torch.device) -> list[dict]:
    env = detect()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    mine = {"rank": dist.get_rank(), "node_rank": env.node_rank, "host": socket.gethostname(), "pid": os.getpid()}
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine | {"device": str(device), "name": name})
    return everyone


def _notes(plan: Plan) -> list[str]:
    notes = ["time across ranks is the slowest rank's (max); skew_us is the spread"]
    emulated = [name for name in plan.collectives if COLLECTIVES[name].out_of_place_copy]
    if emulated and "out_of_place" in plan.placements:
        notes.append(
            f"out_of_place {', '.join(emulated)} rows are emulated (emulated=true): torch has no out-of-place form, "
            "so each call copies the input into the output, then calls in place; the time includes the copy. "
            "Compare in_place rows with nccl-tests"
        )
    if plan.world_size == 1:
        notes.append("world size 1: busbw is 0 by definition (no data crosses a link)")
        if plan.backend == "nccl":
            notes.append(
                "world size 1 on NCCL: an in-place reduction has nothing to do and enqueues no GPU work, and an "
                "emulated out-of-place row is a device copy; these rows measure launch costs, not communication"
            )
    return notes


def _header(plan: Plan, ranks: list[dict], device: torch.device) -> tuple[dict, list[str]]:
    notes = _notes(plan)
    info = run_info() if dist.get_rank() == 0 else {}  # it reads package metadata: not needed on every rank
    record = {"record": "header", "tool": "harness.raw_sweep", "argv": sys.argv[1:], **info}
    record |= {"launcher": plan.launcher, "backend": plan.backend, "device": device.type}
    record |= {"world_size": plan.world_size, "nodes": plan.nodes, "ranks": ranks, "notes": notes}
    record["timing_methods"] = TIMING_METHODS
    record["plan"] = {k: v for k, v in asdict(plan).items() if k not in ("json_path", "csv_path", "logdir")}
    lines = [
        f"# harness.raw_sweep: {', '.join(plan.collectives)} | backend {plan.backend} | world size "
        f"{plan.world_size} on {plan.nodes} node(s) | launcher {plan.launcher} | torch {torch.__version__}",
        f"# {plan.size_spec} warmup iters: {plan.warmup} iters: {plan.iters} validation: {plan.check} "
        f"graph: {plan.graph_launches} min time: {plan.min_time_s * 1e3:g} ms | mode: {', '.join(plan.modes)} "
        f"| timeout: {plan.timeout_s:g} s",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank {r['rank']:2d} Node {r['node_rank']:2d} Pid {r['pid']:7d} on {r['host']:>10} device "
        f"{r['device']:>7} {r['name']}"
        for r in ranks
    ]
    lines += [f"# Note: {note}" for note in notes]
    return record, lines


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
    record, preamble = _header(plan, _rank_devices(device), device)
    if rank == 0 and n == 1:
        print(f"{PROG}: warning: world size 1: busbw is 0 by definition (no data crosses a link)", file=sys.stderr)
    log2_x = all(size > 0 and size & (size - 1) == 0 for size in plan.sizes)
    out = SweepOutput(plan.json_path, plan.csv_path, plan.logdir, log2_x, sys.stdout) if rank == 0 else NullOutput()
    eager_us: dict[tuple, float | None] = {}
    wrong, memory_skips = 0, []
    end = {"status": "failed", "reason": "", "at": ""}
    try:
        out.header(record, preamble)
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
                    out.end_table(busbw_factor(name, n))
        end = {"status": "wrong" if wrong else "ok", "reason": "", "at": ""}
    except Interrupted as stop:
        end = {"status": "interrupted", "reason": signal_name(stop.signum), "at": str(where)}
        raise
    except BaseException as err:
        end = {"status": "failed", "reason": failure_text(err), "at": str(where)}
        raise
    finally:
        out.close(end)
    if memory_skips and rank == 0:
        first = memory_skips[0]
        print(f"{PROG}: warning: {len(memory_skips)} rows skipped, from {first['size_bytes']} B: {first['skipped']}",
              file=sys.stderr)  # fmt: skip
    return wrong == 0
