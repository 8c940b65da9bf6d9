"""A calibration step's gradients, averaged across the ranks after backward (the all_reduce its hook skipped), and
the collectives that averaging makes, stamped: the advisor's rate of a collective with backward over.

Apart from the calibration schedule (calibration.py), which train.py's option checks read before torch is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
import torch.distributed as dist

from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB
from harness.train.hook import dtype_name

# The most gradient bytes averaged in one all_reduce: DDP's default bucket, so the transient flat copy stays small.
AVERAGE_CHUNK_BYTES = int(DEFAULT_BUCKET_CAP_MB * MIB)


# One collective a calibration step makes after backward: (stamp name, dtype name, bytes). Its stamps are
# `stamp_names(name)`; the callback reads them when the step resolves.
AfterBackward = tuple[str, str, int]

# The dtypes the compress hooks send (hook.py), whose all_reduce rate the timeline steps probe after backward.
WIRE_PROBE_DTYPES = (torch.float16, torch.bfloat16)


def average_gradients(
    parameters: Iterable[torch.nn.Parameter],
    group: dist.ProcessGroup | None = None,
    stamp: Callable[[str], None] | None = None,
    probe_dtypes: bool = False,
) -> list[AfterBackward]:
    """Average a calibration step's gradients across the ranks, as DDP would have during backward: each rank's
    gradient divided by the world size, then summed. Called after backward and before the optimizer step, on every
    rank at the same point; a parameter without a gradient (unused this step) counts as zeros, as in DDP.

    The gradients go in chunks of at most AVERAGE_CHUNK_BYTES, in parameter order (the same on every rank). Each
    chunk's all_reduce is the training's own collective with backward over and nothing else running, so with
    `stamp` it is stamped apart from the copies around it (on the current stream): the advisor's rate of a
    collective after backward. With `probe_dtypes` (the timeline steps; every rank alike) it then all_reduces as
    many zeros as the first chunk has elements in each of WIRE_PROBE_DTYPES: a backend's rate per byte need not
    be the same in every dtype (gloo sums float16 on the CPU element by element, so on loopback, where the cores
    bound the collective, half the bytes take about as long). Returns every collective made ([] at world size 1)."""
    world_size = dist.get_world_size(group)
    if world_size == 1:
        return []
    grads = []
    for p in parameters:
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    if stamp is not None:
        # Calibration steps skip communication in backward, so nothing has lined the ranks up: without this, the
        # first chunk's time would hold this rank's wait for the slowest one's backward.
        dist.all_reduce(torch.zeros(1, device=grads[0].device if grads else None), group=group)
    made = []
    first_numel = 0
    for index, chunk in enumerate(_chunks(grads)):
        flat = torch.cat([g.reshape(-1) for g in chunk]).div_(world_size)
        made.append(stamped_all_reduce(flat, group, stamp, f"average_{index}"))
        first_numel = first_numel or flat.numel()
        for grad, averaged in zip(chunk, flat.split([g.numel() for g in chunk]), strict=True):
            grad.copy_(averaged.view(grad.shape))
    if probe_dtypes and first_numel:
        for dtype in WIRE_PROBE_DTYPES:
            zeros = torch.zeros(first_numel, dtype=dtype, device=grads[0].device)
            made.append(stamped_all_reduce(zeros, group, stamp, f"wire_{dtype_name(dtype)}"))
    return made


def stamped_all_reduce(
    tensor: torch.Tensor, group: dist.ProcessGroup | None, stamp: Callable[[str], None] | None, name: str
) -> AfterBackward:
    """A blocking all_reduce (sum) of `tensor`, with `stamp` (if any) called on `stamp_names(name)` around it: on
    NCCL the current stream then waits for the collective, so the stamp recorded after it is its end."""
    start, done = stamp_names(name)
    if stamp is not None:
        stamp(start)
    dist.all_reduce(tensor, group=group)
    if stamp is not None:
        stamp(done)
    return name, dtype_name(tensor.dtype), tensor.numel() * tensor.element_size()


def stamp_names(name: str) -> tuple[str, str]:
    """The names of the stamps around the collective called `name` (StepStamps.mark)."""
    return f"{name}_start", f"{name}_done"


def _chunks(grads: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Consecutive gradients of one dtype and device, up to AVERAGE_CHUNK_BYTES each (a larger one alone)."""
    chunk: list[torch.Tensor] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        if chunk and (
            size + nbytes > AVERAGE_CHUNK_BYTES or (grad.dtype, grad.device) != (chunk[0].dtype, chunk[0].device)
        ):
            yield chunk
            chunk, size = [], 0
        chunk.append(grad)
        size += nbytes
    if chunk:
        yield chunk
