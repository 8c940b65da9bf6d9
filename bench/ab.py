"""Interleaved A/B measurement: alternate short blocks of two variants and report the median ratio.

A shared GPU or a 2-core machine drifts by more than the 1% being measured, so the variants run in
alternating blocks (A B B A ...), each block's time per step is one sample, and the ratio of paired
blocks gives a distribution whose median and spread are reported, never a single mean.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness.metrics import percentile


@dataclass
class ABResult:
    a_ms: list[float]
    b_ms: list[float]

    @property
    def ratios(self) -> list[float]:
        return [b / a for a, b in zip(self.a_ms, self.b_ms, strict=True)]

    def as_dict(self, a_name: str, b_name: str) -> dict[str, float | int]:
        r = self.ratios
        return {
            "blocks": len(r),
            f"{a_name}_step_ms_p50": percentile(self.a_ms, 50),
            f"{b_name}_step_ms_p50": percentile(self.b_ms, 50),
            "ratio_p50": percentile(r, 50),
            "ratio_p10": percentile(r, 10),
            "ratio_p90": percentile(r, 90),
            "ratio_of_medians": percentile(self.b_ms, 50) / percentile(self.a_ms, 50),
        }


def time_block(step: Callable[[], None], steps: int, cuda: bool) -> float:
    """Milliseconds per step over `steps` calls, with the device drained before and after."""
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def interleave(run_a: Callable[[], float], run_b: Callable[[], float], blocks: int) -> ABResult:
    """Run `blocks` pairs, swapping which variant goes first every pair (ABBA), so drift cancels."""
    result = ABResult([], [])
    for i in range(blocks):
        if i % 2 == 0:
            a, b = run_a(), run_b()
        else:
            b, a = run_b(), run_a()
        result.a_ms.append(a)
        result.b_ms.append(b)
    return result
