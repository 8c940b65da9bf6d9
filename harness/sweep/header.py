"""The raw sweep's header: the JSON `header` record and the table's preamble (devices per rank, notes).

Both say how to read the rows that follow: the plan, every rank's device, notes on emulated and world-size-1
rows, and what each `timing` method means (TIMING_METHODS; harness.sweep.engine implements them).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import asdict

import torch
import torch.distributed as dist

from harness.common.dist_env import detect
from harness.common.run_info import run_info
from harness.sweep.collectives import COLLECTIVES
from harness.sweep.plan import Plan

TIMING_METHODS = {
    "run": "calls back to back between two clock reads, time per call (nccl-tests' method)",
    "call": "each call alone after a barrier; on a GPU the window includes the host's launch of the call",
    "call_in_graph": "calls back to back in one CUDA graph replay, timing events captured between them: "
    "one call's GPU time, no host launch, no barrier",
    "replay": "a one-call CUDA graph replayed alone, events around the replay (includes the graph launch)",
}


def rank_devices(device: torch.device) -> list[dict]:
    """Every rank's host, pid and device, the same list on every rank (a collective: every rank calls it)."""
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


def build_header(plan: Plan, ranks: list[dict], device: torch.device) -> tuple[dict, list[str]]:
    """The header record for the JSON Lines, and the preamble lines printed above the first table."""
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
