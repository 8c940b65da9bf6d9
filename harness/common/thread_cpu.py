"""CPU time of each of this process's threads, by name: where a host-bound step's time goes.

Why: on the GPU a training step's host work runs on two threads one after the other, the main thread (forward, the
optimizer) and autograd's device thread (backward, and the comm hook's Python), beside the harness's own thread,
TensorBoard's event writer and the process group's watchdog. time.thread_time() sees only the calling thread and
time.process_time() only the sum, so neither says which thread a step's extra host time is on (issue 11).

Linux only: each thread's CPU from /proc/self/task/<tid>/schedstat (nanoseconds run), or from stat's utime + stime
(clock ticks) where the kernel keeps no schedstat. Elsewhere `thread_cpu_s()` is empty and callers print nothing.

A thread's label is "main" for the main thread; a Python thread's name, without the "Thread-N" that Python gives
unnamed ones (then its target or class); else the name the OS has for it (pt_autograd_0, pt_nccl_watchdg, ...).
Differences are taken thread by thread, then summed by label: a thread that ended between two readings counts
nothing, and one started between them counts from 0.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import NamedTuple

TASKS = Path("/proc/self/task")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_UNNAMED = re.compile(r"Thread-\d+(?: \((?P<target>.*)\))?")

# {thread id: (label, CPU seconds so far)}
ThreadTimes = dict[int, tuple[str, float]]


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


def window_times(start: Clocks, end: Clocks, steps: int) -> WindowTimes:
    """Ms per step of each clock from `start` to `end`, `steps` steps apart."""
    return WindowTimes(
        (end.wall_s - start.wall_s) * 1e3 / steps,
        (end.thread_s - start.thread_s) * 1e3 / steps,
        (end.process_s - start.process_s) * 1e3 / steps,
        per_step_ms(start.threads, end.threads, steps),
    )


def python_thread_label(thread: threading.Thread) -> str:
    """'main', the thread's own name, or for an unnamed one ('Thread-3 (_serve)') its target, else its class."""
    if thread is threading.main_thread():
        return "main"
    unnamed = _UNNAMED.fullmatch(thread.name)
    if unnamed is None:
        return thread.name
    return unnamed.group("target") or type(thread).__name__


def _cpu_s(task: Path) -> float | None:
    try:
        return int((task / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        fields = (task / "stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime: fields 14 and 15 of stat
    except (OSError, ValueError, IndexError):
        return None  # the thread ended meanwhile


def thread_cpu_s() -> ThreadTimes:
    """Each thread of this process: its label and the CPU seconds it has run so far; {} where /proc is not Linux's."""
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
        cpu = _cpu_s(task)
        if cpu is None:
            continue
        tid = int(task.name)
        label = python_labels.get(tid)
        if label is None:
            try:
                label = (task / "comm").read_text().strip() or task.name
            except OSError:
                continue
        times[tid] = (label, cpu)
    return times


def per_step_ms(start: ThreadTimes, end: ThreadTimes, steps: int) -> dict[str, float]:
    """Each label's CPU ms per step between two readings, busiest first; labels under 0.005 ms a step are left out."""
    ms: dict[str, float] = {}
    for tid, (label, cpu) in end.items():
        before = start.get(tid)
        used = cpu - (before[1] if before is not None and before[0] == label else 0.0)  # a reused id: a new thread
        ms[label] = ms.get(label, 0.0) + used * 1e3 / steps
    return dict(sorted(((k, v) for k, v in ms.items() if v >= 0.005), key=lambda kv: -kv[1]))


def describe(ms_per_step: dict[str, float], limit: int | None = 6) -> str:
    """The busiest threads' CPU ms per step: 'main 15.21, pt_autograd_0 14.02, ..., 3 others 0.31' (parse reads it;
    limit None: every thread)."""
    shown = list(ms_per_step.items())[:limit]
    rest = list(ms_per_step.values())[len(shown) :]
    if rest:
        shown.append((f"{len(rest)} others", sum(rest)))
    return ", ".join(f"{label} {ms:.2f}" for label, ms in shown)


def parse(text: str) -> dict[str, float]:
    """`describe`'s text back into {label: ms} (a label that holds ", " would not read back; thread names don't)."""
    out = {}
    for item in text.split(", "):
        label, _, ms = item.rpartition(" ")
        out[label] = float(ms)
    return out
