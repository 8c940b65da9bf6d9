"""Whether a row of the raw sweep fits in memory: what it needs, what is available, and failed allocations.

Before allocating a row's buffers each rank compares what the row needs with what is available (GPU: free
plus the allocator's unused reserve; CPU: MemAvailable shared by the host's ranks), and an allocation that
fails anyway is caught. Either way the engine skips the row with the reason (starting MEMORY_SKIP), on every
rank, and the sweep goes on.
"""

from __future__ import annotations

import os

import torch

from harness.sweep.collectives import CHUNK

GIB = 1024**3
# Inputs and checks work in int64 chunks of CHUNK elements; about this many int64 temporaries live at once.
CHECK_SCRATCH_INT64 = 6
MEMORY_HEADROOM = 0.9  # a row runs only if it needs at most this fraction of the memory available
MEMORY_SKIP = "memory: "  # how the reason of a row skipped for memory begins


def bytes_needed(send_numel: int, recv_numel: int, element_size: int, aliased: bool) -> int:
    """A row's peak bytes on one rank: its buffers, and the int64 scratch of filling and checking them."""
    buffers = (max(send_numel, recv_numel) if aliased else send_numel + recv_numel) * element_size
    return buffers + min(max(send_numel, recv_numel), CHUNK) * 8 * CHECK_SCRATCH_INT64


def available_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can use: free GPU memory plus the caching allocator's unused reserve, or the
    host's MemAvailable. None where it cannot be known."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def memory_problem(need: int, sharing: int, available: int | None) -> str | None:
    """Why a row that needs `need` bytes on each of `sharing` ranks of this memory cannot run, or None."""
    if available is None or need * sharing <= available * MEMORY_HEADROOM:
        return None
    per = f" on each of {sharing} ranks of this host" if sharing > 1 else ""
    return f"{MEMORY_SKIP}would need {_gib(need)}{per}, {_gib(available)} available"


def _gib(size: float) -> str:
    gib = size / GIB
    return f"{gib:,.0f} GiB" if gib >= 1000 else f"{gib:.3g} GiB"


def is_out_of_memory(err: BaseException) -> bool:
    """An allocation failure: torch's OutOfMemoryError (CUDA), the CPU allocator's RuntimeError, MemoryError."""
    if isinstance(err, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def release_memory(device: torch.device) -> None:
    """Hand the caching allocator's unused blocks back, after a row that did not fit."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
