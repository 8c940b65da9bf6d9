"""The timed DDP communication hook: stamps every bucketed gradient collective, keeping DDP's numerics.

The hook runs on the autograd thread while DDP holds its reducer lock, so it only reads a clock or
records a CUDA event, appends to this step's record list, and launches the collective. Turning the
stamps into milliseconds happens later, in `stamps.StepStamps.resolve`, never inside the hook.

Per bucket it stamps ready (hook entry), the launch and done of each collective, and finished (after any
decompression), so communication and the hook's own compute (codec) are timed apart (stamps.py says how).
- CUDA: events recorded on the current stream; a done event is taken inside the future's callback, where a
  stream that waits on the collective is current, and recorded on the stamps' own stream made to wait for that
  one (`StepStamps.callback_now`), so it completes when the collective has.
- gloo (CPU): gloo completes the future on its worker thread when the collective is done, so a monotonic
  clock read in the callback is a valid done stamp.
Nothing keeps a collective's Work or output tensor: a bucket's compressed copy is freed as soon as DDP has
taken the result, as with torch's own hooks.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB
from harness.train.stamps import BucketContents, BucketRecord, CollectiveStamps, StepStamps
from models import gradient_bytes

_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def dtype_name(dtype: torch.dtype) -> str:
    """'float32' for torch.float32: the dtype names summary.json uses (a dict first: the hook calls this per bucket)."""
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


@dataclass
class TimedHookState:
    """State passed to DDP with the hook: the process group, the base hook's kind, and the stamps of the
    steps not yet resolved (`stamps`, read by the training loop)."""

    process_group: dist.ProcessGroup | None
    hook_name: str
    use_cuda: bool
    step: int = -1
    # Calibration steps (calibration.py): every hook passes its bucket through untouched, as noop does.
    skip_communication: bool = False
    powersgd_rank: int = 1
    # PowerSGD: one state per bucket, and on gloo one process group per bucket (see make_hook_state).
    powersgd_groups: list[dist.ProcessGroup] = field(default_factory=list)
    _powersgd_states: dict[int, powersgd.PowerSGDState] = field(default_factory=dict)
    # Parameter names by id(parameter), and what each bucket carries by bucket index; a bucket's entry is
    # refreshed whenever its size changes (steps 0 and 1).
    param_names: dict[int, str] = field(default_factory=dict)
    bucket_contents: dict[int, BucketContents] = field(default_factory=dict)
    stamps: StepStamps = field(init=False)

    def __post_init__(self) -> None:
        self.stamps = StepStamps(self.use_cuda)

    def begin_step(self, step: int) -> None:
        """Mark the start of optimizer step `step` (on the GPU timeline where CUDA is used)."""
        self.step = step
        self.stamps.begin(step)

    def mark_backward_end(self) -> None:
        """Mark the end of the current step's backward, once DDP has waited for every bucket's collective
        (just before the optimizer step): start to here is forward + backward + exposed communication."""
        self.stamps.mark_backward_end(self.step)

    def powersgd_state_for(self, bucket_index: int) -> powersgd.PowerSGDState:
        ps_state = self._powersgd_states.get(bucket_index)
        if ps_state is None:
            group = self.process_group
            if self.powersgd_groups:
                if bucket_index >= len(self.powersgd_groups):
                    raise RuntimeError(
                        f"PowerSGD on gloo: bucket {bucket_index} but only {len(self.powersgd_groups)} groups"
                    )
                group = self.powersgd_groups[bucket_index]
            ps_state = powersgd.PowerSGDState(
                process_group=group,
                matrix_approximation_rank=self.powersgd_rank,
                start_powerSGD_iter=POWERSGD_START_STEP,
            )
            self._powersgd_states[bucket_index] = ps_state
        # PowerSGD counts steps on the last bucket of its own state; with a state per bucket, the
        # optimizer step is the shared count.
        ps_state.iter = max(self.step, 0)
        return ps_state

    def launch(
        self,
        record: BucketRecord,
        tensor: torch.Tensor,
        group: dist.ProcessGroup,
        then: Callable[[list[torch.Tensor]], Any] | None = None,
    ) -> torch.futures.Future[Any]:
        """Launch the bucket's all_reduce (sum) of `tensor`, stamping its launch now and its done when it
        completes. The future's value is `then(result)` (run after the done stamp), or the result itself."""
        collective = CollectiveStamps(self.stamps.now())
        record.collectives.append(collective)
        work = all_reduce_sum(tensor, group)

        def stamp_done(fut: torch.futures.Future[list[torch.Tensor]]) -> Any:
            collective.done = self.stamps.callback_now()
            try:
                result = fut.value()
            except Exception:
                collective.failed = True  # for the failure message (failure_naming), then DDP sees the error
                raise
            return then(result) if then is not None else result

        return work.get_future().then(stamp_done)

    def _new_record(
        self, bucket: dist.GradBucket, buffer: torch.Tensor, bytes_: int, dtype: torch.dtype
    ) -> BucketRecord:
        """This step's record of `bucket`, stamped ready now."""
        index = bucket.index()
        contents = self.bucket_contents.get(index)
        if contents is None or contents.numel != buffer.numel():
            params = bucket.parameters()
            first = self.param_names.get(id(params[0]), "?") if params else "-"
            last = self.param_names.get(id(params[-1]), "?") if params else "-"
            contents = BucketContents(len(params), buffer.numel(), first, last)
            self.bucket_contents[index] = contents
        record = BucketRecord(
            step=self.step,
            index=index,
            num_params=contents.num_params,
            numel=buffer.numel(),
            bytes=bytes_,
            dtype=dtype_name(dtype),
        )
        record.host_ns = -time.perf_counter_ns()  # negative until the hook returns (`returned`)
        record.ready = self.stamps.now()
        self.stamps.records.setdefault(self.step, []).append(record)
        return record


def returned(record: BucketRecord, future: torch.futures.Future[Any]) -> torch.futures.Future[Any]:
    """`future`, once the hook's host time (from `_new_record`) is stamped on `record`."""
    record.host_ns += time.perf_counter_ns()
    return future


def all_reduce_sum(tensor: torch.Tensor, group: dist.ProcessGroup) -> dist.Work:
    """`dist.all_reduce(tensor, group=group, async_op=True)` without its Python wrapper.

    The wrapper's argument checks and logging decorators cost tens of µs a call on the autograd thread;
    the process group's own method launches the same collective (sum is AllreduceOptions' default).
    """
    return group.allreduce([tensor], dist.AllreduceOptions())


def _group(state: TimedHookState) -> dist.ProcessGroup:
    return state.process_group if state.process_group is not None else dist.group.WORLD


def timed_allreduce_hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's `allreduce_hook`, timed: pre-divide by world size, then sum, exactly as DDP's default."""
    if state.skip_communication:
        return timed_noop_hook(state, bucket)
    group = _group(state)
    tensor = bucket.buffer()
    record = state._new_record(bucket, tensor, tensor.numel() * tensor.element_size(), tensor.dtype)
    pre_divide(tensor, group.size())
    return returned(record, state.launch(record, tensor, group, then=lambda result: result[0]))


def _timed_compress_hook(
    state: TimedHookState, bucket: dist.GradBucket, dtype: torch.dtype
) -> torch.futures.Future[torch.Tensor]:
    """torch's `fp16_compress_hook` / `bf16_compress_hook`, timed; the bytes counted are the compressed ones.

    The cast and division before the collective and the copy back after it are codec time, not communication.
    """
    if state.skip_communication:
        return timed_noop_hook(state, bucket)
    group = _group(state)
    buffer = bucket.buffer()
    record = state._new_record(bucket, buffer, buffer.numel() * dtype.itemsize, dtype)
    compressed = compress(buffer, dtype, group.size())

    def decompress(result: list[torch.Tensor]) -> torch.Tensor:
        buffer.copy_(result[0])
        record.finished = state.stamps.callback_now(codec_of_bucket=record.index)
        return buffer

    return returned(record, state.launch(record, compressed, group, then=decompress))


def compress(buffer: torch.Tensor, dtype: torch.dtype, world_size: int) -> torch.Tensor:
    """The compress hooks' codec before the collective: a `dtype` copy of the bucket, pre-divided by the world
    size as torch's hooks do (the copy back into the bucket is the rest). codec_probe.py times this very code."""
    return pre_divide(buffer.to(dtype), world_size)


def pre_divide(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    """`tensor` divided by the world size in place, as torch's hooks do before the sum; at world size 1 left as it
    is (x / 1 is x exactly), which spares a pass over every bucket (2 ms a step for resnet18 on a CPU)."""
    return tensor.div_(world_size) if world_size > 1 else tensor


def timed_fp16_hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return _timed_compress_hook(state, bucket, torch.float16)


def timed_bf16_hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return _timed_compress_hook(state, bucket, torch.bfloat16)


def timed_powersgd_hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """torch's `powerSGD_hook`, timed: each of its collectives apart, its compression as codec time.

    PowerSGD issues up to three all_reduces per bucket (uncompressed tensors, P, Q), the later ones from
    future callbacks. torch's PowerSGD module reaches them through its global `dist`, which `_StampedDist`
    stands in for, so each is stamped on this bucket's record. Before PowerSGD starts compressing it would
    run the plain all_reduce, which is the timed allreduce hook exactly. The bytes that travel are read from
    PowerSGD's own count of elements after compression, which it advances by exactly what it sends.
    """
    if state.skip_communication:
        return timed_noop_hook(state, bucket)
    ps_state = state.powersgd_state_for(bucket.index())
    if ps_state.iter < ps_state.start_powerSGD_iter:
        return timed_allreduce_hook(state, bucket)
    buffer = bucket.buffer()
    numel_before = ps_state.total_numel_after_compression
    record = state._new_record(bucket, buffer, 0, buffer.dtype)
    group = ps_state.process_group if ps_state.process_group is not None else dist.group.WORLD
    _STAMPED_DIST.records[group] = (state, record)
    fut = powersgd.powerSGD_hook(ps_state, bucket)
    record.bytes = (ps_state.total_numel_after_compression - numel_before) * buffer.element_size()

    def finished(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        record.finished = state.stamps.callback_now(codec_of_bucket=record.index)
        return fut.value()

    return returned(record, fut.then(finished))


class _StampedWork:
    """What `_StampedDist.all_reduce` returns: the Work's future, with the done stamp taken first."""

    def __init__(self, future: torch.futures.Future[list[torch.Tensor]]) -> None:
        self._future = future

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        return self._future

    def wait(self) -> bool:
        self._future.wait()
        return True


class _StampedDist:
    """Stands in for `torch.distributed` inside torch's PowerSGD module, whose collectives are otherwise out
    of reach (issued from its own future callbacks). An async all_reduce on a group that a timed PowerSGD
    bucket has registered is launched through that bucket's record (`TimedHookState.launch` semantics);
    everything else passes straight to torch.distributed.

    The registry is keyed by process group: on NCCL the three collectives of a bucket are issued within the
    hook call (NCCL's futures complete at launch, so the callbacks run at once), before the next bucket
    registers; on gloo every bucket has a group of its own (make_hook_state), so a callback on gloo's thread
    finds its bucket's record.
    """

    def __init__(self) -> None:
        self.records: dict[dist.ProcessGroup, tuple[TimedHookState, BucketRecord]] = {}

    def __getattr__(self, name: str) -> object:
        return getattr(dist, name)

    def all_reduce(self, tensor: torch.Tensor, op=dist.ReduceOp.SUM, group=None, async_op: bool = False):
        key = group if group is not None else dist.group.WORLD
        entry = self.records.get(key)
        if entry is None or not async_op or op != dist.ReduceOp.SUM:
            return dist.all_reduce(tensor, op=op, group=group, async_op=async_op)
        state, record = entry
        return _StampedWork(state.launch(record, tensor, key))


_STAMPED_DIST = _StampedDist()


def timed_noop_hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """No communication at all: each rank keeps its own gradients. Measures the compute-only step."""
    buffer = bucket.buffer()
    record = state._new_record(bucket, buffer, 0, buffer.dtype)  # ready, with no collective: finished at once
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return returned(record, fut)


TIMED_HOOKS: dict[str, Callable[[TimedHookState, dist.GradBucket], torch.futures.Future[torch.Tensor]]] = {
    "allreduce": timed_allreduce_hook,
    "fp16": timed_fp16_hook,
    "bf16": timed_bf16_hook,
    "powersgd": timed_powersgd_hook,
    "noop": timed_noop_hook,
}


# PowerSGD compresses from this step on, once DDP has rebuilt its buckets; 2 is the least it accepts with
# error feedback. Before that it runs the plain all_reduce.
POWERSGD_START_STEP = 2


def max_bucket_count(module: torch.nn.Module, bucket_cap_mb: float | None) -> int:
    """An upper bound on DDP's bucket count: every bucket but the last reaches the cap (the first 1 MiB)."""
    total = gradient_bytes(module)
    cap = (bucket_cap_mb if bucket_cap_mb is not None else DEFAULT_BUCKET_CAP_MB) * MIB
    return math.ceil(total / cap) + 2


def make_hook_state(
    hook_name: str,
    module: torch.nn.Module,
    use_cuda: bool,
    process_group: dist.ProcessGroup | None = None,
    powersgd_rank: int = 1,
    max_buckets: int = 0,
) -> TimedHookState:
    """Build the hook's state for `module` (the model inside DDP, whose parameter names are recorded).

    Call it on every rank at the same point: for PowerSGD on gloo it creates process groups.
    """
    state = TimedHookState(process_group, hook_name, use_cuda)
    state.param_names = {id(p): name for name, p in module.named_parameters()}
    if hook_name == "powersgd":
        # torch's PowerSGD module calls the collectives through its global `dist`: see _StampedDist.
        powersgd.dist = _STAMPED_DIST
        state.powersgd_rank = powersgd_rank
        group = process_group if process_group is not None else dist.group.WORLD
        if dist.get_backend(group) == "gloo":
            # PowerSGD launches its second and third all_reduce from future callbacks. gloo runs those on
            # its own threads, so with several buckets the ranks can issue them in different orders and
            # mismatch. One group per bucket keeps each bucket's chain ordered on its own channel.
            ranks = dist.get_process_group_ranks(group)
            count = max(max_buckets, 1)
            state.powersgd_groups = [dist.new_group(ranks, backend="gloo") for _ in range(count)]
    return state


def register_timed_hook(ddp_model: torch.nn.parallel.DistributedDataParallel, state: TimedHookState) -> None:
    """Register the timed hook on a DDP model and check that DDP really holds it."""
    hook = TIMED_HOOKS[state.hook_name]
    ddp_model.register_comm_hook(state, hook)
    attached = ddp_model._get_ddp_logging_data().get("comm_hook")
    if attached != hook.__qualname__:
        raise RuntimeError(f"DDP reports comm hook {attached!r}, expected {hook.__qualname__!r}")
