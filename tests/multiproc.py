"""Runs a function in N real processes joined by a gloo process group, and returns each rank's result.

Rendezvous goes through a FileStore in the test's own temporary folder (free ports race), and every
worker destroys its process group in `finally`. Results travel back through a queue, so the test asserts
on what each rank saw rather than only on exit codes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

WORKER_TIMEOUT_S = 240


def _entry(fn: Callable[..., Any], rank: int, world_size: int, store_path: str, queue: Any, args: tuple) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)  # 2-core machines: one thread a rank keeps ranks from starving each other
    try:
        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        try:
            queue.put((rank, "ok", fn(rank, world_size, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        queue.put((rank, "error", traceback.format_exc()))


def run_workers(fn: Callable[..., Any], world_size: int, tmp_path: Path, *args: Any) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` gloo ranks; return results ordered by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    store_path = str(tmp_path / f"store-{fn.__name__}-{os.getpid()}-{world_size}")
    procs = [
        ctx.Process(target=_entry, args=(fn, rank, world_size, store_path, queue, args)) for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    results: dict[int, Any] = {}
    errors = []
    try:
        for _ in range(world_size):
            rank, status, value = queue.get(timeout=WORKER_TIMEOUT_S)
            if status == "ok":
                results[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
                break
    finally:
        for proc in procs:
            proc.join(timeout=5 if errors else 30)
            if proc.is_alive():
                proc.kill()
    if errors:
        raise AssertionError("worker failed: " + "\n".join(errors))
    return [results[rank] for rank in range(world_size)]
