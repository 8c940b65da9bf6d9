"""CPU time of each of this process's threads, by name: where a host-bound step's time goes.

Why: on the GPU a training step's host work runs on two threads one after the other, the main thread (forward, the
optimizer) and autograd's device thread (backward, and the comm hook's Python), beside the harness's own thread,
TensorBoard's event writer and the process group's watchdog. time.thread_time() sees only the calling thread and
time.process_time() only the sum, so neither says which thread a step's extra host time is on (issue 11).

Linux only: each thread's CPU from /proc/self/task/<tid>/schedstat (nanoseconds run), or from stat's utime + stime
(clock ticks) where the kernel keeps no schedstat. Elsewhere `thread_cpu_s()` is empty and callers print nothing.

A thread's label is "main" for the main thread; a Python thread's name, without the "Thread-N" that Python gives
unnamed ones (then its target or class); else the name the OS has for it (pt_autograd_0, pt_nccl_watchdg, ...).
Threads with one label are summed. A thread that ended between two readings loses its time in the difference.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

TASKS = Path("/proc/self/task")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_UNNAMED = re.compile(r"Thread-\d+(?: \((?P<target>.*)\))?")


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


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds each thread of this process has run so far, summed by label; {} where /proc is not Linux's."""
    if not TASKS.is_dir():
        return {}
    python_labels = {t.native_id: python_thread_label(t) for t in threading.enumerate() if t.native_id is not None}
    totals: dict[str, float] = {}
    for task in TASKS.iterdir():
        cpu = _cpu_s(task)
        if cpu is None:
            continue
        label = python_labels.get(int(task.name))
        if label is None:
            try:
                label = (task / "comm").read_text().strip() or task.name
            except OSError:
                continue
        totals[label] = totals.get(label, 0.0) + cpu
    return totals


def per_step_ms(start: dict[str, float], end: dict[str, float], steps: int) -> dict[str, float]:
    """Each label's CPU ms per step between two readings (a thread started between them counts from 0), busiest
    first; labels that ran for less than 0.005 ms a step are left out."""
    ms = {label: (cpu - start.get(label, 0.0)) * 1e3 / steps for label, cpu in end.items()}
    return dict(sorted(((k, v) for k, v in ms.items() if v >= 0.005), key=lambda kv: -kv[1]))


def describe(ms_per_step: dict[str, float], limit: int = 6) -> str:
    """The busiest threads' CPU ms per step: 'main 15.21, pt_autograd_0 14.02, ..., 3 others 0.31' (parse reads it)."""
    shown = list(ms_per_step.items())[:limit]
    rest = list(ms_per_step.values())[limit:]
    if rest:
        shown.append((f"{len(rest)} others", sum(rest)))
    return ", ".join(f"{label} {ms:.2f}" for label, ms in shown)


def parse(text: str) -> dict[str, float]:
    """`describe`'s text back into {label: ms}."""
    out = {}
    for item in text.split(", "):
        label, _, ms = item.rpartition(" ")
        out[label] = float(ms)
    return out
