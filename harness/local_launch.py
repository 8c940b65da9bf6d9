"""Start N processes on this machine, as torchrun would, for runs without a launcher.

Each process gets torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE), MASTER_ADDR on
loopback, GLOO_SOCKET_IFNAME=lo unless already set, NVLink multicast off, and, like torchrun, one OpenMP
thread (OMP_NUM_THREADS=1) when there are several processes and OMP_NUM_THREADS is unset. The processes meet through
a file in a fresh temporary directory (a `file://` init method), never through a "free" port: a port
found free can be taken by someone else before the rendezvous binds it.

    from harness.local_launch import spawn_local
    exit_code = spawn_local(my_worker, nproc=2, args=(config,), backend="gloo")

`my_worker(*args)` runs in every process with the default process group initialised (destroyed
afterwards). With `init_process_group=False` it runs without one, and `init_method()` gives the
rendezvous address to pass to `torch.distributed.init_process_group` yourself.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from harness.dist_env import apply_safe_nccl_env

INIT_METHOD_ENV = "HARNESS_INIT_METHOD"  # where spawn_local's processes find their rendezvous


def init_method() -> str:
    """The rendezvous of processes started by spawn_local, else `env://` (torchrun, SLURM with MASTER_*)."""
    return os.environ.get(INIT_METHOD_ENV, "env://")


def spawn_local(
    worker: Callable[..., Any],
    nproc: int,
    args: tuple = (),
    backend: str = "gloo",
    env: dict[str, str] | None = None,
    init_process_group: bool = True,
) -> int:
    """Run `worker(*args)` in `nproc` spawned processes and wait for all of them.

    `worker` must be importable by name (a module-level function). `env` adds variables in every process.
    With backend "nccl" each process uses GPU LOCAL_RANK. Returns 0 when every process succeeded, else
    the exit code of the first that failed: 1 for an exception (its traceback goes to stderr), the code
    of a `SystemExit`, 128 + N for signal N. The other processes are then terminated.
    """
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    with tempfile.TemporaryDirectory(prefix="harness-rendezvous-") as tmp:
        rendezvous = "file://" + os.path.join(tmp, "store")
        entry_args = (worker, nproc, args, backend, rendezvous, dict(env or {}), init_process_group)
        try:
            mp.start_processes(_entry, args=entry_args, nprocs=nproc, join=True, start_method="spawn")
        except mp.ProcessRaisedException as err:
            print(f"process {err.error_index} (pid {err.error_pid}) failed:\n{err}", file=sys.stderr)
            return 1
        except mp.ProcessExitedException as err:
            code = err.exit_code
            return 128 - code if code < 0 else (code or 1)
    return 0


def _entry(
    local_rank: int,
    worker: Callable[..., Any],
    nproc: int,
    args: tuple,
    backend: str,
    rendezvous: str,
    env: dict[str, str],
    init_process_group: bool,
) -> None:
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
    os.environ.update(env)
    apply_safe_nccl_env()
    if nproc > 1 and "OMP_NUM_THREADS" not in os.environ:
        # As torchrun does: one intra-op thread per process unless told otherwise. Idle OpenMP threads spin
        # after each parallel op and starve the communication threads of the other local processes.
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    if not init_process_group:
        worker(*args)
        return
    device_id = None
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device_id = torch.device("cuda", local_rank)
    dist.init_process_group(backend, init_method=rendezvous, rank=local_rank, world_size=nproc, device_id=device_id)
    try:
        worker(*args)
    finally:
        dist.destroy_process_group()
