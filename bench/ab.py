"""Interleaved measurement of variants: alternate short blocks and report median ratios to a baseline.

A shared GPU or a 2-core machine drifts by more than the 1% being measured, so the variants run in
alternating blocks, the order rotating every round so drift cancels. Each block's time per step is one
sample; ratios are taken between blocks of the same round, and their median and spread are reported,
never a single mean.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from harness.common import thread_cpu
from harness.common.metrics import median_ci95, percentile


def time_block(step: Callable[[], None], steps: int, cuda: bool) -> float:
    """Milliseconds per step over `steps` calls, with the device drained before and after."""
    return time_block_threads(step, steps, cuda).wall_ms


def time_block_threads(step: Callable[[], None], steps: int, cuda: bool) -> thread_cpu.WindowTimes:
    """`time_block`, with each clock's ms per step: wall, the process's CPU and each thread's (which thread a variant's
    extra host time is on: the main thread, or autograd's, where a comm hook runs)."""
    if cuda:
        torch.cuda.synchronize()
    start = thread_cpu.read_clocks(opening=True)
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    return thread_cpu.window_times(start, thread_cpu.read_clocks(), steps)


def interleave(runners: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Run every variant once per round, rotating the order; returns each variant's ms per step per round."""
    names = list(runners)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(runners[name]())
    return samples


def summarize(samples: dict[str, list[float]], baseline: str) -> dict[str, float | int]:
    """Median ms per step of each variant, and per-round ratios variant / baseline (p10, p50, p90)."""
    out: dict[str, float | int] = {"rounds": len(samples[baseline])}
    for name, values in samples.items():
        out[f"{name}_step_ms_p50"] = percentile(values, 50)
        if name == baseline:
            continue
        ratios = [v / b for v, b in zip(values, samples[baseline], strict=True)]
        for q in (10, 50, 90):
            out[f"{name}_vs_{baseline}_ratio_p{q}"] = percentile(ratios, q)
    return out


def paired_difference(values: list[float], baseline: list[float], name: str, draws: int = 2000) -> dict[str, object]:
    """The median of the rounds' differences `values` − `baseline` (each round ran both, side by side) as
    `name`, and its 95 % interval as `name`_ci95: a percentile bootstrap of that median over the rounds."""
    differences = [v - b for v, b in zip(values, baseline, strict=True)]
    return {name: float(np.median(differences)), f"{name}_ci95": list(median_ci95(differences, draws))}
