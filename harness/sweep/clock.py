"""The raw sweep's clocks and waits: CUDA events on a GPU, perf_counter on CPU, every GPU wait bounded.

Every wait for the GPU is bounded by --timeout, because NCCL's watchdog does not watch CUDA graph
replays: a dead or stuck peer would otherwise hang the wait forever. Waits poll the event rather than
synchronize, so the bound holds however the kernel hangs; a wait that runs out raises GpuWaitTimeout.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


class GpuWaitTimeout(RuntimeError):
    """The GPU did not finish within --timeout: a peer is dead or stuck (NCCL does not watch graph replays)."""


def _wait_event(event: torch.cuda.Event, timeout_s: float) -> None:
    """Wait for a recorded CUDA event, at most timeout_s. Polls, so a hung NCCL kernel cannot block forever."""
    if event.query():
        return
    deadline = time.monotonic() + timeout_s
    pause = 1e-5
    while not event.query():
        if time.monotonic() > deadline:
            raise GpuWaitTimeout(f"the GPU did not finish within --timeout {timeout_s:g} s")
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


def sync(device: torch.device, timeout_s: float) -> None:
    """Wait for the current stream (collectives are synchronous ops: it waits on NCCL's stream)."""
    if device.type == "cuda":
        event = torch.cuda.Event()
        event.record()
        _wait_event(event, timeout_s)


def barrier(device: torch.device, timeout_s: float) -> None:
    """All ranks meet, and the GPU is idle, before a clock starts."""
    dist.barrier()
    sync(device, timeout_s)  # NCCL's barrier is a collective on the GPU: wait for it before starting a clock


class Clock:
    """Two CUDA events on the current stream on a GPU, created up front so no event is created inside a
    window; the monotonic perf_counter on CPU."""

    def __init__(self, device: torch.device, timeout_s: float):
        self.cuda = device.type == "cuda"
        self.timeout_s = timeout_s
        if self.cuda:
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for event in self.events:  # torch creates the CUDA event at its first record
                event.record()
            _wait_event(self.events[1], timeout_s)

    def start(self) -> torch.cuda.Event | float:
        if not self.cuda:
            return time.perf_counter()
        self.events[0].record()
        return self.events[0]

    def stop(self) -> torch.cuda.Event | float:
        if not self.cuda:
            return time.perf_counter()
        self.events[1].record()
        return self.events[1]

    def seconds(self, start: torch.cuda.Event | float, end: torch.cuda.Event | float) -> float:
        """Seconds between what start() and stop() returned; on a GPU it waits (bounded) for the stop."""
        if not self.cuda:
            return end - start
        _wait_event(end, self.timeout_s)
        return start.elapsed_time(end) / 1e3
