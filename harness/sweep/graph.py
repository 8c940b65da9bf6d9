"""CUDA-graph capture for the raw sweep (--cuda-graph, nccl-tests -G), and whether timing events can be captured.

Capture uses thread-local mode, so NCCL's watchdog thread can keep querying its events meanwhile.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from harness.sweep.clock import sync

_external_events_work: bool | None = None


def graph_events_supported() -> bool:
    """Whether timing events can be captured inside a CUDA graph and read after a replay (torch >= 2.8's
    Event(external=True)). Probed once on a private tensor, outside any collective."""
    global _external_events_work
    if _external_events_work is None:
        try:
            x = torch.zeros(1024, device="cuda")
            events = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(2)]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # NCCL's watchdog polls meanwhile
                events[0].record()
                x.add_(1)
                events[1].record()
            graph.replay()
            torch.cuda.synchronize()
            _external_events_work = events[0].elapsed_time(events[1]) >= 0
        except (TypeError, RuntimeError):
            _external_events_work = False
    return _external_events_work


def capture(
    call: Callable[[], None], calls: int, timeout_s: float, marks: list | None = None
) -> tuple[torch.cuda.CUDAGraph, bool]:
    """`calls` calls captured into one CUDA graph, replayed once so the timed replays find it uploaded.
    With `marks` (calls + 1 external timing events) an event is captured before, between and after the
    calls. Returns (graph, empty): empty when the calls enqueued no GPU work at all. Thread-local capture
    mode lets NCCL's watchdog thread keep querying its events meanwhile."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            if marks:
                marks[0].record()
            for i in range(calls):
                call()
                if marks:
                    marks[i + 1].record()
    empty = any("graph is empty" in str(w.message).lower() for w in caught)
    graph.replay()
    sync(torch.device("cuda"), timeout_s)
    return graph, empty
