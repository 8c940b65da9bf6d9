"""Across ranks: every N steps, gather each rank's step and bucket times over a separate gloo group.

The gather runs on its own gloo group on the CPU, so it never enters the NCCL stream that carries the
gradients. An NCCL kernel's time includes waiting for the slowest peer, so bandwidth is taken from the
fastest rank's time and the spread (max − min) is reported as skew.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from harness.common.metrics import busbw_gbps
from harness.train.step_stats import StepStats


@dataclass(frozen=True)
class RankSpread:
    """One step's times across ranks."""

    step: int
    step_ms_skew: float
    comm_ms_skew: float
    slowest_rank: int  # by step time
    bucket_ms_skew_max: float  # the largest spread of any single bucket
    busbw_fastest_gbps: float  # step bytes over the fastest rank's communication time


class RankGatherer:
    """Owns the gloo group; `gather(stats, bucket_ms)` must be called on every rank for the same step."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        # new_group is collective: every rank creates it at the same point (fit start). At world size 1 the
        # callback makes none: one rank has no skew, and the gloo round trip cost 2–7 ms a gather on the H200.
        self.group = dist.new_group(backend="gloo")

    def gather(self, stats: StepStats, bucket_ms: list[float]) -> RankSpread:
        local = torch.tensor([stats.step_ms, stats.comm_ms, *bucket_ms], dtype=torch.float64)
        gathered = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(gathered, local, group=self.group)
        table = torch.stack(gathered)  # ranks × (step_ms, comm_ms, bucket times...)
        spread = table.max(dim=0).values - table.min(dim=0).values
        fastest_comm_s = float(table[:, 1].min()) / 1e3
        return RankSpread(
            step=stats.step,
            step_ms_skew=float(spread[0]),
            comm_ms_skew=float(spread[1]),
            slowest_rank=int(table[:, 0].argmax()),
            bucket_ms_skew_max=float(spread[2:].max()) if len(bucket_ms) else 0.0,
            busbw_fastest_gbps=busbw_gbps("all_reduce", stats.bytes, fastest_comm_s, self.world_size),
        )
