"""Each thread's CPU time from /proc (harness.common.thread_cpu) against the kernel's own per-thread clock, read by
each thread itself with time.thread_time(): the labels say which thread is which, and the times agree. And each
thread's wait for a CPU against a known contender: a busy process pinned to the thread's one CPU."""

from __future__ import annotations

import _thread
import ctypes
import os
import threading
import time

import pytest

from harness.common import thread_cpu
from tests.contender import on_cpu

pytestmark = pytest.mark.skipif(not thread_cpu.TASKS.is_dir(), reason="per-thread CPU is read from Linux's /proc")


def burn(seconds: float) -> None:
    """Run Python for `seconds` of this thread's own CPU time."""
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        sum(range(1000))


class Burner(threading.Thread):
    """Burns `seconds` of CPU between two readings taken while it is alive: it waits before and after."""

    def __init__(self, seconds: float, **kwargs: object) -> None:
        super().__init__(daemon=True, **kwargs)
        self.seconds = seconds
        self.go, self.done, self.exit = threading.Event(), threading.Event(), threading.Event()
        self.cpu_s = 0.0

    def run(self) -> None:
        self.go.wait()
        start = time.thread_time()
        burn(self.seconds)
        self.cpu_s = time.thread_time() - start
        self.done.set()
        self.exit.wait()


def test_each_threads_cpu_is_read_under_its_label() -> None:
    named = Burner(0.30, name="harness-step-worker")
    unnamed = Burner(0.15)  # Python calls it "Thread-N": its class names it
    threads = [named, unnamed]
    for thread in threads:
        thread.start()
    before = thread_cpu.thread_cpu_s()
    main_start = time.thread_time()
    for thread in threads:  # one at a time: under the GIL, concurrent burners would wait for each other
        thread.go.set()
        thread.done.wait(30)
    burn(0.10)
    main_cpu = time.thread_time() - main_start
    after = thread_cpu.thread_cpu_s()
    for thread in threads:
        thread.exit.set()
    ms = thread_cpu.per_step_ms(before, after, steps=10)  # 10 "steps": ms per step is the CPU s * 100
    assert ms["harness-step-worker"] == pytest.approx(named.cpu_s * 100, rel=0.1, abs=0.5)
    assert ms["Burner"] == pytest.approx(unnamed.cpu_s * 100, rel=0.1, abs=0.5)
    # The main thread also started the burners and read /proc: a little more than it burned.
    assert main_cpu * 100 - 0.5 <= ms["main"] <= main_cpu * 100 + 5
    assert next(iter(ms)) == "harness-step-worker", "busiest first"


def test_unnamed_threads_are_labelled_by_their_target() -> None:
    thread = threading.Thread(target=burn, args=(0.0,))
    assert thread.name.startswith("Thread-")
    assert thread_cpu.python_thread_label(thread) == "burn"
    assert thread_cpu.python_thread_label(threading.main_thread()) == "main"


def test_a_thread_python_did_not_start_is_labelled_by_the_name_the_os_has_for_it() -> None:
    """Threads Python did not start (torch's autograd thread, NCCL's watchdog) are named by the OS's name for them,
    also after they ran Python that asked threading for the current thread (a placeholder "Dummy-N" there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    named, done, leave = threading.Event(), threading.Event(), threading.Event()
    cpu = []

    def native() -> None:  # started with _thread: the threading module does not know it
        libc.prctl(15, b"native_burner", 0, 0, 0)  # PR_SET_NAME: what /proc/<tid>/comm then says
        threading.current_thread()  # registers a _DummyThread for it
        named.set()
        start = time.thread_time()
        burn(0.1)
        cpu.append(time.thread_time() - start)
        done.set()
        leave.wait(30)

    before = thread_cpu.thread_cpu_s()
    _thread.start_new_thread(native, ())
    assert named.wait(30) and done.wait(30)
    after = thread_cpu.thread_cpu_s()
    leave.set()
    ms = thread_cpu.per_step_ms(before, after, steps=10)
    assert not any(label.startswith("Dummy-") for label in ms), ms
    assert ms["native_burner"] == pytest.approx(cpu[0] * 100, rel=0.1, abs=0.5)


def test_a_thread_that_ends_takes_nothing_from_another_of_its_name() -> None:
    """Differences are taken thread by thread: a thread that ended between the readings, with the name of one that
    ran on, does not take its earlier time off the other's."""
    first, second = Burner(0.2, name="w"), Burner(0.1, name="w")
    first.start()
    first.go.set()
    first.done.wait(30)  # 0.2 s of CPU before the window
    second.start()
    before = thread_cpu.thread_cpu_s()
    first.exit.set()
    first.join(30)  # ends inside the window
    second.go.set()
    second.done.wait(30)
    after = thread_cpu.thread_cpu_s()
    second.exit.set()
    ms = thread_cpu.per_step_ms(before, after, steps=10)
    assert ms["w"] == pytest.approx(second.cpu_s * 100, rel=0.1, abs=0.5), ms


def waited_while_burning(cpu: int, hog: bool) -> tuple[float, float]:
    """The main thread's CPU ms and its wait for a CPU in ms while it burns 0.3 s of CPU pinned to `cpu`, with a busy
    process pinned to the same CPU or without one."""
    with on_cpu(cpu, hog):
        before = thread_cpu.thread_cpu_s()
        burn(0.3)
        after = thread_cpu.thread_cpu_s()
    ran = thread_cpu.per_step_ms(before, after, steps=1)["main"]
    return ran, thread_cpu.per_step_ms(before, after, steps=1, wait=True).get("main", 0.0)


@pytest.mark.skipif(not thread_cpu.waits_kept(thread_cpu.thread_cpu_s()), reason="the kernel keeps no schedstat")
def test_a_thread_that_shares_its_cpu_with_a_busy_process_waits_about_as_long_as_it_runs() -> None:
    """The kernel's scheduler shares one CPU between two tasks that both want it: the thread runs about half the
    time and waits the other half. Alone on its CPU it barely waits."""
    cpu = max(os.sched_getaffinity(0))
    ran, waited = waited_while_burning(cpu, hog=True)
    assert 0.5 * ran <= waited <= 2.0 * ran, (ran, waited)
    ran_alone, waited_alone = waited_while_burning(cpu, hog=False)
    assert waited_alone < 0.25 * ran_alone, (ran_alone, waited_alone)


def test_the_text_reads_back() -> None:
    ms = {"main": 15.214, "pt_autograd_0": 14.02, "a b": 0.5, "x": 0.4, "y": 0.3, "z": 0.2, "w": 0.1, "v": 0.05}
    text = thread_cpu.describe(ms)
    assert text == "main 15.21, pt_autograd_0 14.02, a b 0.50, x 0.40, y 0.30, z 0.20, 2 others 0.15"
    assert thread_cpu.parse(text) == {
        "main": 15.21,
        "pt_autograd_0": 14.02,
        "a b": 0.5,
        "x": 0.4,
        "y": 0.3,
        "z": 0.2,
        "2 others": 0.15,
    }
