"""train.py against a hand-written DDP loop, as a user runs them: separate processes, interleaved pairs.

    python -m bench.vs_plain --model resnet50 --batch-size 128 --pairs 8                  # one GPU
    python -m bench.vs_plain --nproc 2 --model resnet18 --batch-size 4 --image-size 64 --steps 120 --window-start 30
    python -m bench.vs_plain --pairs 4 --variants all                       # train.py, then one change at a time
    python -m bench.vs_plain --pairs 4 --variants no_hook,lean --variant mine="--bucket-cap-mb 5"
    python -m bench.vs_plain --pairs 8 --variants plain_torch_hook,lightning_alone    # where the gap comes from
    python -m bench.vs_plain --pairs 4 --variants fabric_alone,lightning_no_bar,trainer_loop  # the two loops
    python -m bench.vs_plain --pairs 8 --cpus cores:6      # every run on the same 6 CPUs, one per physical core
    python -m bench.vs_plain --pairs 8 --variants no_bucket_view,plain_bucket_view    # DDP's copies, both ways
    python -m bench.vs_plain --report call1/pairs.jsonl call2/pairs.jsonl   # the pairs of several calls, pooled
    python -m bench.vs_plain --pairs 8 --tree before=/tmp/old_checkout     # this tree's train.py against another's

Each pair runs bench.plain_ddp, train.py as shipped, and every variant (train.py with other arguments), each
under `torchrun --standalone --nproc-per-node N`, in an order that rotates from pair to pair so that a host
that drifts favours none of them. The ready-made variants (VARIANTS, chosen with --variants) change one thing
each, so that train.py's gap to the plain loop can be attributed; `lean` turns on every switch that lowers the
harness's cost while it still measures communication. `plain_torch_hook` is the hand-written loop itself with
torch's own untimed Python `allreduce_hook`: what any Python comm hook costs before anything is timed;
`plain_cpp_hook` the loop with torch's C++ ALLREDUCE hook, the same comm-hook path without the Python.
`no_bucket_view` is train.py with DDP's gradient copies (its default keeps the gradients as DDP's bucket views),
`plain_bucket_view` the loop with the views. --variant NAME="ARGS" adds any other train.py variant, and
--tree NAME=DIR the train.py of another checkout (an earlier commit), run in DIR with DIR's own harness: a change to
the harness measured against what it replaced, in the same rotations as the plain loop. Its runs are read with this
checkout's reader, so the other must take --window-start and write summary.json's "overhead_s" as this one does
(every commit since 2026-12-04's 429db55 does).
A run that refuses the arguments passed on to it ends the bench with that refusal in one line (exit 2).

All are timed over the same window, from the start of step --window-start to the start of the last step, by
rank 0's own clocks read at both ends (the device drained there), nothing in between: wall time, the CPU time
of the main thread (time.thread_time) and of the whole process (time.process_time, also autograd's and gloo's
threads). The plain loop measures itself; train.py is given `--window-start` and its WindowClock
(harness.train.trainer) does the same: read from summary.json's "overhead_s" (with the harness's own share of
the main thread's CPU), or from the end line of a --harness off run, which writes no summary.

Each run also keeps when it started (UTC), the host's 1-minute load average just before, its whole process
time (process_s, start-up included), the host's CPU over the run: the share busy and the share a hypervisor
stole (/proc/stat), and how fast a fixed Python loop ran just before and after it (cpu_probe_ms), so that a slow
run can be set against how busy the host was and how fast its CPU ran.

With --cpus, every run (and the probe) is pinned to the same CPUs: where the scheduler puts a run's threads is
then not a difference between runs. On a host whose CPUs differ in speed, or whose hyperthreads share a core, a
host-bound step (resnet50 at batch 32 on a GPU) otherwise differs from process to process by more than the
effect being measured. `cores:N` picks N CPUs of distinct physical cores, the lowest-numbered first.

The ratio of a pair is plain ms / variant ms (1.0: it costs nothing; 0.97: 3% slower). Printed: each pair as a
JSON line (also appended to --out as it completes, so an interrupted bench keeps what it measured), then a
table: per variant the median ratio with its p10–p90 over the pairs, the median ms per step and CPU ms per
step (main thread, process, and the harness's part of the main thread's), the time the run's threads waited for a
CPU that another task held (the kernel's run_delay, summed over threads: the host's contention), each thread's CPU
ms per step (which thread a variant's extra host time is on: the main thread, autograd's, the harness's own, NCCL's
watchdog), and the plain loop's own spread across the pairs (the host's noise).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.common import thread_cpu
from harness.common.cli import (
    OneLineParser,
    UsageError,
    check_count,
    check_seconds,
    check_writable,
    file_identity,
    refusal_line,
    run_cli,
)
from harness.common.metrics import median_ci95, percentile
from harness.common.names import SUMMARY_FILE
from harness.common.numbers import is_number, plural
from harness.common.thread_cpu import WAITS_KEY

REPO = Path(__file__).resolve().parent.parent
PROBE_KEYS = ("cpu_probe_ms_before", "cpu_probe_ms_after")  # cpu_probe_ms's readings kept with each run

# One change at a time against train.py as shipped (each a train.py argument list).
VARIANTS: dict[str, list[str]] = {
    "no_progress_bar": ["--no-progress-bar"],
    "log_every_50": ["--log-every", "50"],
    "no_hook": ["--comm-hook", "none"],  # also no calibration: it needs the hook to skip communication
    # Lightning's Trainer with nothing of the harness, with its own progress bar as a Trainer user has it, or without.
    "lightning_alone": ["--loop", "trainer", "--harness", "off"],
    "lightning_no_bar": ["--loop", "trainer", "--harness", "off", "--no-progress-bar"],
    # Lightning Fabric's loop (train.py's default) with nothing of the harness and no bar: the loop alone.
    "fabric_alone": ["--loop", "fabric", "--harness", "off", "--no-progress-bar"],
    # train.py on Lightning's Trainer, as it ran before --loop fabric became the default.
    "trainer_loop": ["--loop", "trainer"],
    "no_calibration": ["--calibration-steps", "0"],
    # The harness's per-step work on the training loop's thread, between steps (the default), or on its own thread
    # during backward (the GPU's default until 2026-12-06, 23:36 UTC): the A/B of harness/train/step_worker.py.
    "no_resolve_thread": ["--no-resolve-thread"],
    "resolve_thread": ["--resolve-thread"],
    # The timed noop hook: each pair is then also an A/B of train.py's own exposed-time estimate (issue 10), kept
    # per run as exposed_ms_p50 and its interval.
    "noop": ["--comm-hook", "noop"],
    # Gradients copied into DDP's buckets and back each step (the default until commit 837fa79, 2026-12-07), not
    # its bucket views zeroed in place: with a comm hook DDP copies each in and out; with the views, none.
    "no_bucket_view": ["--no-gradient-as-bucket-view"],
    # Every cost switch that keeps the headline figures (step time, samples/s, comm time): exposed time and the
    # ranks' skew are given up.
    "lean": ["--no-progress-bar", "--log-every", "50", "--calibration-steps", "0", "--gather-every", "0"],
}
# Variants of the hand-written loop itself (each a bench.plain_ddp argument list).
PLAIN_VARIANTS: dict[str, list[str]] = {
    "plain_torch_hook": ["--comm-hook", "allreduce"],
    # torch's C++ ALLREDUCE hook: DDP's comm-hook path with no Python, against plain_torch_hook.
    "plain_cpp_hook": ["--comm-hook", "cpp_allreduce"],
    # The loop with gradients as DDP's bucket views (no copy; the built-in path then divides each in place).
    "plain_bucket_view": ["--gradient-as-bucket-view"],
}
KNOWN_VARIANTS = {**VARIANTS, **PLAIN_VARIANTS}  # what --variants may name
# A pair's JSON line holds a result per run, under its variant's name, beside these.
RECORD_KEYS = {"plain", "pair", "order", "plain_over", "variants", "cpus", "trees"}
# Per run: what its result holds, and the table's column for it.
COLUMNS = {
    "ms_per_step": "ms/step",
    "main_thread_cpu_ms_per_step": "main CPU",
    "process_cpu_ms_per_step": "proc CPU",
    "harness_cpu_ms_per_step": "harness CPU",
    "step_worker_cpu_ms_per_step": "worker CPU",
    "cpu_wait_ms_per_step": "CPU wait",  # every thread's wait for a CPU, summed (column_value)
}


def column_value(run: dict[str, Any], key: str) -> float | None:
    """A run's value for a COLUMNS key; the CPU wait is its threads' waits summed. None where the run has none (the
    kernel kept no waits, or the run was written before they were kept)."""
    if key == "cpu_wait_ms_per_step":
        waits = run.get(WAITS_KEY)
        return sum(waits.values()) if waits is not None else None
    return run.get(key)


def host_before_run() -> dict[str, float | str | int]:
    """When a run starts and how busy the host is then (its 1-minute load average, all of its users counted): a
    run that is slow for the host's sake shows up against the load, not only against its neighbours. Also how
    many processes of an earlier run are still alive (a rank that outlived its torchrun would slow the runs
    after it, and only those)."""
    return {
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_1m_before": os.getloadavg()[0],
        "leftover_processes": len(leftover_runs()),
        "cpu_probe_ms_before": cpu_probe_ms(),
        "_started": time.monotonic(),
        "_jiffies": host_jiffies(),
    }


# A fixed piece of pure-Python work: ~25 ms on the 2-core CPU machine, long enough to span several of the
# scheduler's time slices, so that a CPU shared with another task shows as a slower probe, not as a lucky one.
PROBE_LOOPS = 500_000


def cpu_probe_ms(repeats: int = 3) -> float:
    """The fastest of `repeats` timings of the same fixed Python loop on this process's thread: how fast the host's
    CPU runs this work now. A run that is slow while the probe is not was not slowed by a slower or shared CPU, as
    far as the CPU this probe lands on tells (the scheduler picks it, not necessarily the run's)."""
    fastest = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for number in range(PROBE_LOOPS):
            total += number * number % 7
        fastest = min(fastest, time.perf_counter() - start)
    return fastest * 1e3


def host_jiffies() -> list[int] | None:
    """The host's CPU time counters since boot, summed over its CPUs (/proc/stat's "cpu" line: user, nice, system,
    idle, iowait, irq, softirq, steal, ...); None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            return [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def host_during_run(before: list[int] | None) -> dict[str, float]:
    """The host's whole CPU time over a run (its whole process, start-up included), as shares of it: busy (running
    any process, the run's own included: not idle, not waiting on I/O, not stolen) and stolen (a virtual machine's
    CPUs held by its hypervisor for someone else). A run slowed by a steal or a busy host is told apart from one
    slowed by its own work."""
    after = host_jiffies()
    if before is None or after is None or len(after) < 8:
        return {}
    delta = [a - b for a, b in zip(after, before, strict=False)]
    total = sum(delta[:8])  # guest time (fields 9 and 10) is already counted in user and nice
    if total <= 0:
        return {}
    idle, steal = delta[3] + delta[4], delta[7]
    return {"host_busy_pct": 100 * (total - idle - steal) / total, "host_steal_pct": 100 * steal / total}


def leftover_runs() -> list[int]:
    """The pids of Python processes still running train.py or the plain loop (none should be, between runs).

    Only a Python interpreter with one of them as an argument counts: a shell whose command text merely names
    train.py (a wrapper script's loop) counted 3 in every run of one GPU call."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:  # it ended meanwhile, or is not ours to read
                continue
            if is_measured_run(argv):
                pids.append(int(entry.name))
    return pids


def is_measured_run(argv: list[bytes]) -> bool:
    """Whether a process's argv (from /proc/PID/cmdline) is a Python interpreter running train.py or the plain loop."""
    if not argv or not os.path.basename(argv[0]).startswith(b"python"):
        return False
    return any(arg == b"train.py" or arg.endswith(b"/train.py") or arg == b"bench.plain_ddp" for arg in argv[1:])


CPU_TOPOLOGY = Path("/sys/devices/system/cpu")


def physical_core(cpu: int, topology: Path = CPU_TOPOLOGY) -> tuple[str, str]:
    """The (package, core) a logical CPU belongs to: two hyperthreads of one core share it. A CPU whose topology
    the kernel does not show counts as a core of its own."""
    base = topology / f"cpu{cpu}" / "topology"
    try:
        return (base / "physical_package_id").read_text().strip(), (base / "core_id").read_text().strip()
    except OSError:
        return "cpu", str(cpu)


def pick_cpus(spec: str, allowed: set[int], topology: Path = CPU_TOPOLOGY) -> list[int]:
    """The CPUs --cpus names: a list such as "0-3,8", or "cores:N", N CPUs each of a different physical core (the
    lowest-numbered CPU of each, in order), from those this process may run on. ValueError, in words, where the
    spec is malformed or names CPUs this process may not use."""
    if spec.startswith("cores:"):
        count = spec.removeprefix("cores:")
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"{spec!r}: give cores:N with N a positive integer")
        picked, seen = [], set()
        for cpu in sorted(allowed):
            core = physical_core(cpu, topology)
            if core not in seen:
                seen.add(core)
                picked.append(cpu)
        if len(picked) < int(count):
            raise ValueError(f"{spec!r}: this process may run on {len(picked)} physical cores only")
        return picked[: int(count)]
    cpus: set[int] = set()
    for part in spec.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and (not high.isdigit() or int(high) < int(low))):
            raise ValueError(f"{spec!r}: give CPUs as a list such as 0-3,8, or cores:N")
        cpus.update(range(int(low), int(high if dash else low) + 1))
    if not cpus or not cpus <= allowed:
        raise ValueError(f"{spec!r}: this process may run on CPUs {sorted(allowed)} only")
    return sorted(cpus)


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]


def run(cmd: list[str], args: argparse.Namespace, what: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COMMBENCH_RUN_VERSION"}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if proc.returncode != 0:
        # A run that refused its arguments (an option this bench passed on from the user's) is the user's mistake:
        # its own one line, not a traceback. Anything else is the run's failure, with the end of what it said.
        refusal = refusal_line(proc.stderr)
        if refusal is not None:
            raise UsageError(f"{what} refused its arguments: {refusal}")
        raise RuntimeError(f"{what} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def plain_ms(args: argparse.Namespace, extra: list[str] | None = None) -> dict[str, Any]:
    cmd = [*torchrun(args.nproc), "-m", "bench.plain_ddp", *common_args(args), "--steps", str(args.steps)]
    cmd += extra or []
    proc = run([*cmd, "--window-start", str(args.window_start)], args, "the plain loop")
    line = next(line for line in proc.stdout.splitlines() if line.startswith('{"plain_ddp"'))
    return json.loads(line)["plain_ddp"]


def train_ms(args: argparse.Namespace, extra: list[str], logdir: Path, name: str, tree: Path = REPO) -> dict[str, Any]:
    """One train.py run of `tree` (a checkout; it runs there, importing that checkout's harness)."""
    cmd = [*torchrun(args.nproc), str(tree / "train.py"), *common_args(args), "--max-steps", str(args.steps)]
    cmd += ["--window-start", str(args.window_start), "--logdir", str(logdir), "--run-name", name, *extra]
    program = "train.py" if tree == REPO else str(tree / "train.py")
    proc = run(cmd, args, f"{program} {shlex.join(extra)}", cwd=tree)
    return train_window(logdir / name, proc.stdout)


def train_window(run_root: Path, stdout: str) -> dict[str, Any]:
    """The window's ms per step of one train.py run: from its summary.json's "overhead_s", or (--harness off,
    no summary) from its end line."""
    from harness.train.trainer import THREADS_HEAD, WAITS_HEAD, WINDOW_LINE

    summaries = list(run_root.glob(f"*/{SUMMARY_FILE}"))
    if len(summaries) > 1:
        raise RuntimeError(f"expected one run under {run_root}, found {len(summaries)}")
    if summaries:
        summary = json.loads(summaries[0].read_text())
        overhead, totals = summary["overhead_s"], summary.get("totals", {})
        if "wall_ms_per_step" not in overhead:
            raise RuntimeError(f"{summaries[0]} has no window times (overhead_s.wall_ms_per_step)")
        result = {
            "ms_per_step": overhead["wall_ms_per_step"],
            "main_thread_cpu_ms_per_step": overhead["loop_cpu_ms_per_step"],
            "process_cpu_ms_per_step": overhead["process_cpu_ms_per_step"],
            "harness_cpu_ms_per_step": overhead["harness_cpu_ms_per_step"],
            # Its two parts, kept for attribution (not tabled): the timing callback's per-step work (its TensorBoard
            # events' share apart) and the bar's.
            "callback_cpu_ms_per_step": overhead.get("callback_cpu_ms_per_step"),
            "logging_cpu_ms_per_step": overhead.get("logging_cpu_ms_per_step"),
            "progress_bar_cpu_ms_per_step": overhead.get("progress_bar_cpu_ms_per_step"),
            "step_worker_cpu_ms_per_step": overhead.get("step_worker_cpu_ms_per_step", 0.0),
            "thread_cpu_ms_per_step": overhead.get("thread_cpu_ms_per_step", {}),
            WAITS_KEY: overhead.get(WAITS_KEY),
        }
        # The run's own exposed-time estimate, so that a --comm-hook noop variant makes each pair an A/B of it.
        if totals.get("exposed_ms_ci95"):
            result["exposed_ms_p50"] = totals["exposed_ms_p50"]
            result["exposed_ms_ci95"] = totals["exposed_ms_ci95"]
        return result
    match = WINDOW_LINE.search(stdout)
    if match is None:
        raise RuntimeError(f"train.py left no summary under {run_root} and printed no window line")
    wall, thread, process = (float(value) for value in match.groups()[2:])
    threads, waits = (
        next((line.removeprefix(head) for line in stdout.splitlines() if line.startswith(head)), "")
        for head in (THREADS_HEAD, WAITS_HEAD)
    )
    return {
        "ms_per_step": wall,
        "main_thread_cpu_ms_per_step": thread,
        "process_cpu_ms_per_step": process,
        "thread_cpu_ms_per_step": thread_cpu.parse(threads) if threads else {},
        WAITS_KEY: thread_cpu.parse(waits) if waits else None,  # no line: the kernel kept no waits
    }


def common_args(args: argparse.Namespace) -> list[str]:
    out = ["--model", args.model, "--batch-size", str(args.batch_size)]
    return out + (["--image-size", str(args.image_size)] if args.image_size is not None else [])


def pick_variants(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """train.py as shipped, the ready-made variants asked for (--variants), then the free-form ones (--variant)."""
    variants: dict[str, list[str]] = {"train.py": []}
    names = [name.strip() for name in (args.variants or "").split(",") if name.strip()]
    for name in list(KNOWN_VARIANTS) if names == ["all"] else names:
        if name not in KNOWN_VARIANTS:
            parser.error(f"--variants: {name!r} is not known; choose from: all, {', '.join(KNOWN_VARIANTS)}")
        variants[name] = KNOWN_VARIANTS[name]
    for spec in args.variant:
        name, equals, extra = spec.partition("=")
        if not equals or not name or name in variants or name in RECORD_KEYS:
            parser.error(f'--variant {spec!r}: give NAME="ARGS" with a NAME not used yet')
        variants[name] = shlex.split(extra)
    return variants


def pick_trees(specs: list[str], variants: dict[str, list[str]], parser: argparse.ArgumentParser) -> dict[str, Path]:
    """--tree NAME=DIR, each a checkout with a train.py, under a name no other variant has."""
    trees: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            parser.error(f"--tree: expected NAME=DIR, got {spec!r}")
        if name in trees or name in variants or name in KNOWN_VARIANTS or name in RECORD_KEYS:
            parser.error(f"--tree: the name {name!r} is taken (a variant's, or a field of the pairs' records)")
        tree = Path(directory).resolve()
        if not (tree / "train.py").is_file():
            parser.error(f"--tree: {directory!r} has no train.py")
        trees[name] = tree
    return trees


def report(
    rows: list[dict],
    variants: dict[str, list[str]],
    pinned: list[list[int] | None] | None = None,
    trees: dict[str, str] | None = None,
) -> str:
    """Per variant: the median plain/variant ratio with its p10–p90 over the pairs, the median ms, CPU ms and CPU
    wait ms per step; and the plain loop's own spread across the pairs. `pinned`: each pair's --cpus (None: not
    pinned), said in a line. `trees`: the variants that ran another checkout's train.py, and where it was. Every
    variant is also set against train.py as shipped, pair by pair."""
    trees = trees or {}
    plain = [row["plain"]["ms_per_step"] for row in rows]
    spread = (max(plain) - min(plain)) / percentile(plain, 50) * 100
    ratios = {name: [row["plain"]["ms_per_step"] / row[name]["ms_per_step"] for row in rows] for name in variants}
    ratio_head = "plain/variant p50 [p10, p90]"
    lines = [
        f"# {len(rows)} pairs; ms per step over the window; CPU: main thread (harness: its part of it), process; "
        "CPU wait: every thread's wait for a CPU another task held",
        f"{'variant':<18} {ratio_head:>30} " + " ".join(f"{head:>11}" for head in COLUMNS.values()),
    ]
    for name in ["plain", *variants]:
        cells = []
        for key in COLUMNS:
            values = [value for row in rows if (value := column_value(row[name], key)) is not None]
            cells.append(f"{percentile(values, 50):>11.2f}" if values else f"{'—':>11}")
        if name == "plain":
            ratio = f"{'1 (spread ' + format(spread, '.1f') + ' %)':>30}"
        else:
            q = [percentile(ratios[name], p) for p in (50, 10, 90)]
            ratio = f"{f'{q[0]:.3f} [{q[1]:.3f}, {q[2]:.3f}]':>30}"
        lines.append(f"{name:<18} {ratio} " + " ".join(cells))
    lines += thread_table(rows, ["plain", *variants])
    lines += order_lines(rows, ratios)
    loads = run_values(rows, "loadavg_1m_before")
    if loads:
        lines.append(f"# host load (1-minute average) before each run: p50 {percentile(loads, 50):.2f}, "
                     f"from {min(loads):.2f} to {max(loads):.2f}")  # fmt: skip
    probes = run_values(rows, *PROBE_KEYS)
    if probes:
        lines.append(f"# a fixed Python loop before and after each run: p50 {percentile(probes, 50):.2f} ms, from "
                     f"{min(probes):.2f} to {max(probes):.2f} ms (a slower or shared CPU slows it too)")  # fmt: skip
    for key, what in (("host_busy_pct", "busy"), ("host_steal_pct", "stolen by the hypervisor")):
        shares = run_values(rows, key)
        if shares:
            lines.append(f"# host CPU {what} during each run (start-up included): p50 {percentile(shares, 50):.3g} "
                         f"%, from {min(shares):.3g} to {max(shares):.3g} %")  # fmt: skip
    if pinned:
        kinds = {tuple(cpus) if cpus else None for cpus in pinned}
        said = ["not pinned" if cpus is None else "CPUs " + ",".join(map(str, cpus)) for cpus in kinds]
        lines.append(f"# where the runs could run (--cpus): {'; '.join(sorted(said))}")
    leftovers = sum(run.get("leftover_processes", 0) for row in rows for run in row.values())
    lines.append(f"# processes of earlier runs still alive when a run started: {leftovers} in all")
    lines.append(
        f"# plain loop: p50 {percentile(plain, 50):.2f} ms/step, from {min(plain):.2f} to {max(plain):.2f} "
        f"across the pairs ((max − min) / p50 = {spread:.1f} %: differences below that are noise)"
    )
    for name, extra in variants.items():
        program = "bench.plain_ddp" if name in PLAIN_VARIANTS else "train.py"
        if name in trees:
            program = f"{trees[name]}/train.py (another checkout)"
        low, high = median_ci95(ratios[name], draws=10000)
        median = percentile(ratios[name], 50)
        lines.append(
            f"# {name}: {program} {shlex.join(extra) or 'as shipped'}; plain/{name} median {median:.3f}, 95 % "
            f"interval of the median [{low:.3f}, {high:.3f}] (bootstrap over the {plural(len(rows), 'pair')})"
        )
    for name in variants:
        if name == "train.py" or "train.py" not in variants:
            continue
        # The same pair's two runs, one against the other: the host's drift between pairs cancels here too.
        against = [row["train.py"]["ms_per_step"] / row[name]["ms_per_step"] for row in rows]
        low, high = median_ci95(against, draws=10000)
        lines.append(
            f"# train.py/{name} median {percentile(against, 50):.3f}, 95 % interval of the median [{low:.3f}, "
            f"{high:.3f}] (above 1: train.py as shipped is the slower)"
        )
        # The harness's own main-thread CPU, the two runs of a pair against each other: what a change to the harness
        # (a --tree variant) did to its own cost, which moves far less with the host than the step time does.
        key = "harness_cpu_ms_per_step"
        deltas = [row["train.py"][key] - row[name][key] for row in rows if key in row["train.py"] and key in row[name]]
        if deltas:
            lines.append(
                f"# harness CPU ms a step, train.py − {name}, pair by pair: median {percentile(deltas, 50):+.3f} "
                f"(from {min(deltas):+.3f} to {max(deltas):+.3f}, {plural(len(deltas), 'pair')})"
            )
    return "\n".join(lines)


def run_values(rows: list[dict], *keys: str) -> list[float]:
    """Every run's value of each of `keys`, over every pair's runs, where the run kept it (older lines lack some)."""
    return [run[key] for row in rows for run in row.values() for key in keys if key in run]


def order_lines(rows: list[dict], ratios: dict[str, list[float]]) -> list[str]:
    """Per variant, its plain/variant ratio by where the variant ran in its pair's order (1st, 2nd, ...): the median
    and the number of pairs at each place. The order rotates so that a drift favours no place; ratios that part by
    place say the order itself moved them (at batch 32 on an H100, train.py's four lowest of eleven ratios all came
    second, after the plain loop: docs/BENCHMARKS.md, 2026-12-06, 20:26 UTC). A row's runs are keyed in the order
    they ran, by the bench and by --report alike. Nothing where no variant ran at two places."""
    lines = []
    for name, values in ratios.items():
        by_place: dict[int, list[float]] = {}
        for row, ratio in zip(rows, values, strict=True):
            by_place.setdefault(list(row).index(name), []).append(ratio)
        if len(by_place) > 1:
            cells = ", ".join(
                f"{place + 1}{_ORDINAL.get(place + 1, 'th')} {percentile(found, 50):.3f} ({plural(len(found), 'pair')})"
                for place, found in sorted(by_place.items())
            )
            lines.append(f"# plain/{name}, median by where {name} ran in its pair: {cells}")
    return lines


_ORDINAL = {1: "st", 2: "nd", 3: "rd"}


def thread_table(rows: list[dict], names: list[str], columns: int = 6) -> list[str]:
    """Per variant, each thread's CPU ms per step (median over the pairs; a pair where a thread did not run counts
    0), for the threads busiest in any variant: which thread a variant's extra host time is on. Nothing where no run
    kept its threads' CPU (runs written before it was kept, or not on Linux)."""
    medians: dict[str, dict[str, float]] = {}
    for name in names:
        runs = [row[name].get("thread_cpu_ms_per_step") or {} for row in rows]
        if not any(runs):
            continue
        labels = {label for run in runs for label in run if not label.endswith(" others")}  # a line's summed rest
        medians[name] = {label: percentile([run.get(label, 0.0) for run in runs], 50) for label in labels}
    if not medians:
        return []
    busiest = sorted(
        {label for ms in medians.values() for label in ms}, key=lambda k: -max(m.get(k, 0.0) for m in medians.values())
    )
    shown = busiest[:columns]
    lines = ["# CPU ms per step by thread (median over the pairs; 'rest': the other threads together)"]
    lines.append(f"{'variant':<18} " + " ".join(f"{label[:15]:>15}" for label in [*shown, "rest"]))
    for name, ms in medians.items():
        rest = sum(v for label, v in ms.items() if label not in shown)
        lines.append(f"{name:<18} " + " ".join(f"{ms.get(label, 0.0):>15.2f}" for label in shown) + f" {rest:>15.2f}")
    return lines


def report_of_files(paths: list[Path], parser: argparse.ArgumentParser) -> str:
    """The table of every pair in these --out files, in the order written: pairs of several calls pooled. Only
    the variants every pair ran are tabled."""
    rows, variants, pinned, trees = [], {}, [], {}
    seen: dict[tuple, Path] = {}
    for path in paths:
        if file_identity(path) in seen:  # its pairs would count twice
            parser.error(f"--report: {path} is {seen[file_identity(path)]} again; give each file once")
        seen[file_identity(path)] = path
        try:
            lines = path.read_text().splitlines()
        except OSError as error:
            parser.error(f"--report: cannot read {path}: {error.strerror}")
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                names = [name for name in record["order"] if name != "plain"]
                if not all(is_number(record[name]["ms_per_step"], above=0) for name in record["order"]):
                    parser.error(f"--report: {path}:{number} has a run whose ms_per_step is not a positive number")
                rows.append({name: record[name] for name in record["order"]})
                pinned.append(record.get("cpus"))
                for name, tree in record.get("trees", {}).items():
                    if trees.setdefault(name, tree) != tree:
                        parser.error(f"--report: {name!r} ran {trees[name]} in one pair and {tree} in another")
            except (ValueError, KeyError, TypeError):
                parser.error(f"--report: {path}:{number} is not a pair that bench.vs_plain wrote")
            # Lines written before the arguments were recorded: the ready-made variants' own, train.py as shipped.
            recorded = {"train.py": [], **KNOWN_VARIANTS, **record.get("variants", {})}
            for name in names:
                variants.setdefault(name, recorded.get(name, ["(arguments not recorded)"]))
    if not rows:
        parser.error("--report: no pairs in " + ", ".join(map(str, paths)))
    common = {name: extra for name, extra in variants.items() if all(name in row for row in rows)}
    return report(rows, common, pinned, trees)


PROG = "python -m bench.vs_plain"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--nproc", type=int, default=1, help="processes per run (GPUs, or gloo ranks on CPU)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window-start", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--variants", help=f"comma-separated, from: all, {', '.join(KNOWN_VARIANTS)}")
    parser.add_argument("--variant", action="append", default=[], metavar='NAME="ARGS"',
                        help="also run train.py with these extra arguments in every pair")  # fmt: skip
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                        help="also run DIR's train.py (another checkout) in every pair, as variant NAME")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed for one run")
    parser.add_argument("--out", help="append one JSON line per pair here, as each pair completes")
    parser.add_argument("--cpus", metavar="LIST|cores:N",
                        help="pin every run to these CPUs (0-3,8), or N CPUs of N physical cores")  # fmt: skip
    parser.add_argument("--report", nargs="+", metavar="JSONL",
                        help="run nothing: print the table of the pairs in these --out files, pooled")  # fmt: skip
    args = parser.parse_args()
    if args.report:
        print(report_of_files([Path(name) for name in args.report], parser), flush=True)
        return
    for option, value in (("--pairs", args.pairs), ("--nproc", args.nproc), ("--batch-size", args.batch_size),
                          ("--image-size", args.image_size)):  # fmt: skip
        check_count(option, value)
    check_count("--steps", args.steps, least=2)
    check_seconds("--timeout", args.timeout)
    if not 0 <= args.window_start < args.steps - 1:
        parser.error(f"--window-start must be at least 0 and below --steps - 1 ({args.steps - 1})")
    check_writable(args.out, "--out")  # now, not after the first pair has run
    variants = pick_variants(args, parser)
    trees = pick_trees(args.tree, variants, parser)
    variants.update({name: [] for name in trees})
    cpus = None
    if args.cpus:
        if not hasattr(os, "sched_setaffinity"):
            parser.error("--cpus: this system cannot pin a process to CPUs")
        try:
            cpus = pick_cpus(args.cpus, os.sched_getaffinity(0))
        except ValueError as error:
            parser.error(f"--cpus: {error}")
        os.sched_setaffinity(0, cpus)  # every run is a child of this process, and inherits it
    names = ["plain", *variants]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            shift = pair % len(names)
            order = names[shift:] + names[:shift]
            row = {}
            for name in order:
                host = host_before_run()
                if name == "plain":
                    row[name] = plain_ms(args)
                elif name in PLAIN_VARIANTS:
                    row[name] = plain_ms(args, variants[name])
                else:
                    run_name = f"{name.replace('.', '_').replace('/', '_')}{pair}"  # one directory
                    row[name] = train_ms(args, variants[name], Path(tmp), run_name, trees.get(name, REPO))
                during = host_during_run(host.pop("_jiffies"))
                row[name].update(host, **during, process_s=time.monotonic() - host.pop("_started"))
                row[name]["cpu_probe_ms_after"] = cpu_probe_ms()
            rows.append(row)
            ratios = {name: row["plain"]["ms_per_step"] / row[name]["ms_per_step"] for name in variants}
            record = {"pair": pair, "order": order, **row, "plain_over": ratios, "variants": variants, "cpus": cpus}
            if trees:
                record["trees"] = {name: str(tree) for name, tree in trees.items()}
            print(json.dumps(record), flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(record) + "\n")
    print(report(rows, variants, [cpus] * len(rows), {name: str(tree) for name, tree in trees.items()}), flush=True)


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
