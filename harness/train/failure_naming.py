"""Names what a training rank was doing when it stopped early, in the one line that reports the failure.

A step's text comes from the hook's records of that step (which bucket's collective failed or is still in
flight) and from the error's traceback (DDP's buffer broadcast, backward); nothing here waits on anything.
"""

from __future__ import annotations

import traceback

from harness.common.failures import Interrupted, failure_text, signal_name
from harness.train.stamps import BucketRecord

# DDP's functions that broadcast the module's buffers from rank 0 before each forward (broadcast_buffers).
DDP_BUFFER_SYNC = ("_sync_buffers", "_sync_module_buffers", "_default_broadcast_coalesced")


def step_activity(
    step: int, records: list[BucketRecord], hook_name: str, buffer_bytes: int, err: BaseException | None
) -> str:
    """What a step was doing: the collective in flight (the gradient all_reduce of a bucket with its bytes
    and elements, or DDP's broadcast of `buffer_bytes` of buffers), backward, or just the step."""
    text = f"step {step}"
    record = _stuck_record(records)
    if record is not None:
        name = "all_reduce" if hook_name != "powersgd" else "PowerSGD all_reduces"
        return (
            f"{text}, gradient {name} of bucket {record.index} ({record.bytes:,} B, {record.numel:,} "
            f"{record.dtype} elements)"
        )
    if err is not None and _raised_in(err, DDP_BUFFER_SYNC):
        return f"{text}, DDP's broadcast of the model's buffers from rank 0 ({buffer_bytes:,} B, before the forward)"
    if err is not None and _raised_in(err, ("backward",)):
        return f"{text}, backward"
    return text


def _raised_in(err: BaseException, functions: tuple[str, ...]) -> bool:
    """Whether any frame of the error's traceback is one of these functions."""
    return any(frame.f_code.co_name in functions for frame, _ in traceback.walk_tb(err.__traceback__))


def _stuck_record(records: list[BucketRecord]) -> BucketRecord | None:
    """The bucket to name when a step fails: the first (launch order) one of whose collectives failed, else the
    first with a collective still in flight; None when every launched collective finished. Read from the done
    stamps the hook's callbacks take (and their failure flag). On NCCL a future completes at enqueue, so this
    finds none there (NCCL's watchdog names the collective in its own report)."""
    in_flight = None
    for record in records:
        if any(c.failed for c in record.collectives):
            return record
        if in_flight is None and any(c.done is None for c in record.collectives):
            in_flight = record
    return in_flight


def stop_reason(err: BaseException, activity: str, rank: int, signal_first: int | None) -> str:
    """One line: the rank, what it was doing, and why it stopped (a signal, or the error; a signal that came
    before the error first, as the error is then likely its consequence: a peer that stopped for it)."""
    if isinstance(err, Interrupted):
        return f"rank {rank}: interrupted by {signal_name(err.signum)} at {activity}"
    then = f"interrupted by {signal_name(signal_first)}; then " if signal_first is not None else ""
    return f"rank {rank}: {then}{activity} failed: {failure_text(err)}"
