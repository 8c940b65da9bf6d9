"""Start N processes on this machine, as torchrun would, for runs without a launcher.

Each process gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE), MASTER_ADDR on
loopback, GLOO_SOCKET_IFNAME=lo and NCCL_SOCKET_IFNAME=lo unless already set, NVLink multicast off, and, like
torchrun, one OpenMP thread (OMP_NUM_THREADS=1) when there are several processes and OMP_NUM_THREADS is unset.
The processes meet through a file in a fresh temporary directory (a `file://` init method), never through a
"free" port: a port found free can be taken by someone else before the rendezvous binds it. Nothing listens
beyond loopback.

    from harness.common.local_launch import spawn_local
    exit_code = spawn_local(my_worker, nproc=2, args=(config,), backend="gloo")

`my_worker(*args)` runs in every process with the default process group initialised (destroyed
afterwards). With `init_process_group=False` it runs without one, and `init_method()` gives the
rendezvous address to pass to `torch.distributed.init_process_group` yourself.

Like torchrun's agent, the parent watches its children: SIGINT, SIGTERM and SIGHUP sent to it are forwarded
to every child, and a child that dies gives the others `grace_s` seconds to stop on their own (their
collectives fail or time out) before they are terminated. Children die with the parent (Linux's parent-death
signal), so a killed parent leaves no orphans. A child that exits with an error code has said why itself;
the parent names only children killed by a signal, which cannot.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import multiprocessing
import multiprocessing.connection
import multiprocessing.util
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from harness.common.dist_env import apply_safe_nccl_env, detect
from harness.common.failures import catch_signals, say

INIT_METHOD_ENV = "HARNESS_INIT_METHOD"  # where spawn_local's processes find their rendezvous
KILL_AFTER_TERM_S = 5.0  # after SIGTERM, how long a child has to clean up before SIGKILL
# After a rank that exited by itself (it reported its failure), how long the others have to follow. Their
# collectives fail at once when a peer's process is gone; one that is hung gets SIGTERM and says where it was.
AFTER_EXIT_GRACE_S = 3.0
_PR_SET_PDEATHSIG = 1  # prctl option: the signal this process gets when its parent dies (Linux)


def init_method() -> str:
    """The rendezvous of processes started by spawn_local, else `env://` (torchrun, SLURM with MASTER_*)."""
    return os.environ.get(INIT_METHOD_ENV, "env://")


def join_process_group(backend: str, timeout_s: float) -> torch.device:
    """Create this rank's process group: NCCL on the rank's own GPU, or gloo on the CPU; `timeout_s` bounds
    the rendezvous and every collective (gloo raises; NCCL's watchdog aborts). Returns the rank's device."""
    env = detect()
    device = torch.device("cuda", env.local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=init_method(),
        rank=env.rank,
        world_size=env.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return device


def exit_with(code: int) -> None:
    """End a worker started by spawn_local with `code` as its process's exit code (0: return normally)."""
    if code:
        raise SystemExit(code)


def _describe(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _as_exit_code(code: int) -> int:
    """A child's exit status as a shell reports it: 128 + N for signal N."""
    return 128 - code if code < 0 else code


class _Children:
    """The started processes, and how to signal, wait for and stop them."""

    def __init__(self, procs: list):
        self.procs = procs

    def alive(self) -> list:
        # A process that never started (its start raised) has no pid and nothing to signal.
        return [p for p in self.procs if p.pid is not None and p.exitcode is None]

    def signal(self, signum: int) -> None:
        for proc in self.alive():
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.kill(proc.pid, signum)

    def wait(self, seconds: float) -> None:
        """Until every child has exited, or `seconds` have passed."""
        deadline = time.monotonic() + seconds
        while self.alive() and time.monotonic() < deadline:
            multiprocessing.connection.wait([p.sentinel for p in self.alive()], timeout=0.2)

    def stop(self) -> None:
        """SIGTERM the survivors, then SIGKILL whoever is left after KILL_AFTER_TERM_S."""
        self.signal(signal.SIGTERM)
        self.signal(signal.SIGCONT)  # a stopped (hung) child handles SIGTERM only once it runs
        self.wait(KILL_AFTER_TERM_S)
        self.signal(signal.SIGKILL)
        self.wait(KILL_AFTER_TERM_S)


def spawn_local(
    worker: Callable[..., Any],
    nproc: int,
    args: tuple = (),
    backend: str = "gloo",
    env: dict[str, str] | None = None,
    init_process_group: bool = True,
    grace_s: float = 30.0,
) -> int:
    """Run `worker(*args)` in `nproc` spawned processes and wait for all of them.

    `worker` must be importable by name (a module-level function). `env` adds variables in every process.
    With backend "nccl" each process uses GPU LOCAL_RANK. Returns 0 when every process succeeded; else,
    after a signal to this process, 128 + its number; else the exit code of the first process that failed:
    1 for an exception (its traceback goes to stderr), the code of a `SystemExit`, 128 + N for signal N.
    Once one is killed by a signal the others get `grace_s` seconds to stop by themselves (3 s once one
    exits with an error of its own), then SIGTERM, then SIGKILL.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    ctx = multiprocessing.get_context("spawn")
    received: list[int] = []
    with tempfile.TemporaryDirectory(prefix="harness-rendezvous-") as tmp:
        rendezvous = "file://" + os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_entry,
                args=(rank, os.getpid(), worker, nproc, args, backend, rendezvous, dict(env or {}), init_process_group),
                name=f"rank{rank}",
            )
            for rank in range(nproc)
        ]
        children = _Children(procs)

        def forward(signum, frame) -> None:
            received.append(signum)
            children.signal(signum)

        previous = catch_signals(forward)
        try:
            for proc in procs:
                proc.start()
            failed = _watch(children, received, grace_s)
        finally:
            children.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if received:
        return 128 + received[0]
    if failed is None:
        return 0
    return _as_exit_code(failed.exitcode)


def _first_failed(procs: list):
    """The child to blame among those that exited with an error (None if none did): of several, one killed by a
    signal is likelier the cause than one whose peer vanished."""
    exited = [p for p in procs if p.exitcode not in (None, 0)]
    return min(exited, key=lambda p: (p.exitcode >= 0, p.name)) if exited else None


def _watch(children: _Children, received: list[int], grace_s: float):
    """Wait for every child; return the first that failed (None if none did)."""
    first = None
    deadline = None
    while children.alive():
        multiprocessing.connection.wait([p.sentinel for p in children.alive()], timeout=0.5)
        if received and deadline is None:
            deadline = time.monotonic() + grace_s  # the children got the signal: let them clean up
        if first is None:
            first = _first_failed(children.procs)
        if first is not None and deadline is None:
            # A rank killed by a signal: the others may need up to their collective timeout to notice.
            wait_s = grace_s if first.exitcode < 0 else min(grace_s, AFTER_EXIT_GRACE_S)
            deadline = time.monotonic() + wait_s
            if not received and first.exitcode < 0:
                what = f"{first.name} (pid {first.pid}) {_describe(first.exitcode)}"
                say("local launch", f"{what}; the other ranks have {wait_s:g} s to stop")
        if deadline is not None and time.monotonic() > deadline:
            break
    # Every child may have exited before the loop first looked (a rank that fails at once): not a success.
    first = first or _first_failed(children.procs)
    for proc in children.procs:
        if proc is not first and proc.exitcode is not None and proc.exitcode < 0 and not received:
            say("local launch", f"{proc.name} (pid {proc.pid}) {_describe(proc.exitcode)}")
    return first


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGTERM this process when its parent dies; exit now if the parent is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: children may outlive a killed parent
    if os.getppid() != parent_pid:
        os._exit(128 + signal.SIGTERM)


def _entry(
    local_rank: int,
    parent_pid: int,
    worker: Callable[..., Any],
    nproc: int,
    args: tuple,
    backend: str,
    rendezvous: str,
    env: dict[str, str],
    init_process_group: bool,
) -> None:
    _die_with_parent(parent_pid)
    os.environ.update(
        {
            "RANK": str(local_rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            INIT_METHOD_ENV: rendezvous,
        }
    )
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # NCCL's bootstrap: one host, so loopback
    os.environ.update(env)
    apply_safe_nccl_env()
    if nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        # As torchrun does: one intra-op thread per process unless told otherwise. Idle OpenMP threads spin
        # after each parallel op and starve the communication threads of the other local processes.
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    code = 0
    try:
        if not init_process_group:
            worker(*args)
        else:
            device_id = None
            if backend == "nccl":
                torch.cuda.set_device(local_rank)
                device_id = torch.device("cuda", local_rank)
            dist.init_process_group(
                backend, init_method=rendezvous, rank=local_rank, world_size=nproc, device_id=device_id
            )
            try:
                worker(*args)
            finally:
                dist.destroy_process_group()
    except SystemExit as stop:  # the worker's exit code (exit_with)
        if isinstance(stop.code, int) or stop.code is None:
            code = stop.code or 0
        else:
            say("local launch", str(stop.code))
            code = 1
    exit_without_teardown(code)


def exit_without_teardown(code: int) -> NoReturn:
    """End a rank whose work is done, skipping the interpreter's teardown. A rank that returned into it died now
    and then of SIGABRT there ("terminate called without an active exception", in C++ teardown after the
    process group was destroyed): twice in about 100 two-rank gloo runs started here on 2026-12-05, and under
    torchrun on two namespace hosts 4 times in 60 runs on 2026-12-06 (and once in CI), each after a complete run whose
    measurements were written. The launch then reported the rank as failed, and torchrun's agent on the other
    host waited at its exit barrier until the test's 150 s limit. Our output is written as it is produced and
    nothing of ours runs at exit, so what exit would still do is done here first: flush the streams and stop the
    rank's own children (multiprocessing's exit handler, which ends DataLoader workers)."""
    with contextlib.suppress(Exception):
        multiprocessing.util._exit_function()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
