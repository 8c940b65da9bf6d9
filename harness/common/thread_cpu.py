"""CPU time of each of this process's threads, by name: where a host-bound step's time goes.

Why: on the GPU a training step's host work runs on two threads one after the other, the main thread (forward, the
optimizer) and autograd's device thread (backward, and the comm hook's Python), beside the harness's own thread,
TensorBoard's event writer and the process group's watchdog. time.thread_time() sees only the calling thread and
time.process_time() only the sum, so neither says which thread a step's extra host time is on (issue 11).

Linux only: each thread's CPU from /proc/self/task/<tid>/schedstat (nanoseconds run), or from stat's utime + stime
(clock ticks) where the kernel keeps no schedstat. Elsewhere `thread_cpu_s()` is empty and callers print nothing.

schedstat's second field is the time the thread was ready to run but waited for a CPU (the scheduler's run_delay):
the host's contention, as the kernel saw it. A host-bound step that slows while its threads' waits stay near 0 was
not slowed by other tasks taking its cores (a slower clock, a busy sibling hyperthread or the caches can still slow
it); one whose waits grew was. Without schedstat the wait is unknown (NaN) and left out.

A thread's label is "main" for the main thread; a Python thread's name, without the "Thread-N" that Python gives
unnamed ones (then its target or class); else the name the OS has for it (pt_autograd_0, pt_nccl_watchdg, ...).
Differences are taken thread by thread, then summed by label: a thread that ended between two readings counts
nothing, and one started between them counts from 0.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from pathlib import Path
from typing import NamedTuple

TASKS = Path("/proc/self/task")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_UNNAMED = re.compile(r"Thread-\d+(?: \((?P<target>.*)\))?")

# The key under which a timed window's result (train.py's summary.json overhead_s, bench.plain_ddp's line) holds
# each thread's wait for a CPU, in ms per step, beside "thread_cpu_ms_per_step".
WAITS_KEY = "thread_cpu_wait_ms_per_step"
# What a line of waits says where the kernel kept them and no label waited 0.005 ms a step (parse reads it as {}).
NONE_WAITED = "none waited 0.005 ms a step"

# {thread id: (label, CPU seconds so far, seconds it waited for a CPU so far: NaN where unknown)}
ThreadTimes = dict[int, tuple[str, float, float]]


class Clocks(NamedTuple):
    """One reading of a window's clocks: wall, the calling thread's CPU, the process's CPU (seconds), and each
    thread's (`thread_cpu_s`)."""

    wall_s: float
    thread_s: float
    process_s: float
    threads: ThreadTimes


def read_clocks(opening: bool = False) -> Clocks:
    """The clocks a timed window reads at each end (after the caller drained the GPU). /proc costs a file read per
    thread, which the wall and CPU clocks should not include: a window's opening reads it first, its close last."""
    threads = thread_cpu_s() if opening else None
    wall, thread, process = time.perf_counter(), time.thread_time(), time.process_time()
    return Clocks(wall, thread, process, threads if threads is not None else thread_cpu_s())


class WindowTimes(NamedTuple):
    """Each clock's ms per step between two readings of `read_clocks`."""

    wall_ms: float
    thread_ms: float  # the thread that read the clocks
    process_ms: float
    threads_ms: dict[str, float]  # per label, busiest first (per_step_ms)
    # Per label, the time it waited for a CPU, longest first ({}: none waited 0.005 ms a step); None: not kept.
    threads_wait_ms: dict[str, float] | None


def window_times(start: Clocks, end: Clocks, steps: int) -> WindowTimes:
    """Ms per step of each clock from `start` to `end`, `steps` steps apart."""
    return WindowTimes(
        (end.wall_s - start.wall_s) * 1e3 / steps,
        (end.thread_s - start.thread_s) * 1e3 / steps,
        (end.process_s - start.process_s) * 1e3 / steps,
        per_step_ms(start.threads, end.threads, steps),
        per_step_ms(start.threads, end.threads, steps, wait=True) if waits_kept(end.threads) else None,
    )


def waits_kept(times: ThreadTimes) -> bool:
    """Whether the kernel kept the threads' waits for a CPU (schedstat) in this reading."""
    return any(not math.isnan(waited) for _, _, waited in times.values())


def python_thread_label(thread: threading.Thread) -> str:
    """'main', the thread's own name, or for an unnamed one ('Thread-3 (_serve)') its target, else its class."""
    if thread is threading.main_thread():
        return "main"
    unnamed = _UNNAMED.fullmatch(thread.name)
    if unnamed is None:
        return thread.name
    return unnamed.group("target") or type(thread).__name__


def _cpu_and_wait_s(task: Path) -> tuple[float, float] | None:
    try:
        ran_ns, waited_ns = (task / "schedstat").read_text().split()[:2]
        return int(ran_ns) / 1e9, int(waited_ns) / 1e9
    except (OSError, ValueError):
        pass
    try:
        fields = (task / "stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) * _TICK_S, math.nan  # utime, stime: fields 14 and 15 of stat
    except (OSError, ValueError, IndexError):
        return None  # the thread ended meanwhile


def thread_cpu_s() -> ThreadTimes:
    """Each thread of this process: its label, the CPU seconds it has run so far and the seconds it has waited for
    a CPU so far (NaN without schedstat); {} where /proc is not Linux's."""
    if not TASKS.is_dir():
        return {}
    # A thread Python did not start (autograd's, running a hook that asked for threading.current_thread()) has a
    # placeholder "Dummy-N" there: the OS's name says more.
    python_labels = {
        t.native_id: python_thread_label(t)
        for t in threading.enumerate()
        if t.native_id is not None and not isinstance(t, threading._DummyThread)
    }
    times: ThreadTimes = {}
    for task in TASKS.iterdir():
        times_s = _cpu_and_wait_s(task)
        if times_s is None:
            continue
        tid = int(task.name)
        label = python_labels.get(tid)
        if label is None:
            try:
                label = (task / "comm").read_text().strip() or task.name
            except OSError:
                continue
        times[tid] = (label, *times_s)
    return times


def per_step_ms(start: ThreadTimes, end: ThreadTimes, steps: int, wait: bool = False) -> dict[str, float]:
    """Each label's CPU ms per step between two readings (wait: the ms per step it waited for a CPU instead), largest
    first; labels under 0.005 ms a step, and waits the kernel did not keep, are left out."""
    field = 2 if wait else 1
    ms: dict[str, float] = {}
    for tid, entry in end.items():
        label, value = entry[0], entry[field]
        if math.isnan(value):
            continue
        before = start.get(tid)
        same_thread = before is not None and before[0] == label  # else a reused id: a new thread, from 0
        if same_thread and math.isnan(before[field]):
            continue  # its first reading kept no wait: unknown, not the whole wait since it started
        used = value - (before[field] if same_thread else 0.0)
        ms[label] = ms.get(label, 0.0) + used * 1e3 / steps
    return dict(sorted(((k, v) for k, v in ms.items() if v >= 0.005), key=lambda kv: -kv[1]))


def describe(ms_per_step: dict[str, float], limit: int | None = 6) -> str:
    """The largest labels' ms per step (CPU, or waits): 'main 15.21, pt_autograd_0 14.02, ..., 3 others 0.31' (parse
    reads it; limit None: every label)."""
    shown = list(ms_per_step.items())[:limit]
    rest = list(ms_per_step.values())[len(shown) :]
    if rest:
        shown.append((f"{len(rest)} others", sum(rest)))
    return ", ".join(f"{label} {ms:.2f}" for label, ms in shown)


def describe_waits(waits_ms_per_step: dict[str, float], limit: int | None = 6) -> str:
    """`describe` for the threads' waits for a CPU: NONE_WAITED where none waited 0.005 ms a step (parse reads either
    back)."""
    return describe(waits_ms_per_step, limit) if waits_ms_per_step else NONE_WAITED


def parse(text: str) -> dict[str, float]:
    """`describe`'s text back into {label: ms} (a label that holds ", " would not read back; thread names don't);
    NONE_WAITED into {}."""
    if text == NONE_WAITED:
        return {}
    out = {}
    for item in text.split(", "):
        label, _, ms = item.rpartition(" ")
        out[label] = float(ms)
    return out
