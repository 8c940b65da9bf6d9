"""Hook overhead: step time with the timed hook against DDP with no hook, interleaved in one process.

    python -m bench.hook_overhead --device cuda --model resnet50 --batch-size 128      # one GPU, bf16
    python -m bench.hook_overhead --device cpu --nproc 2 --model resnet50 --batch-size 2 --image-size 96

The variants are DDP copies of one model with the same weights and batch:
- plain: DDP's own built-in (C++) reduction, no hook;
- cpp_hook: torch's C++ ALLREDUCE comm hook (`DDP._register_builtin_comm_hook`): DDP's comm-hook path with no
  Python. With any comm hook DDP copies each gradient into its bucket (a copy, on the GPU a cudaMemcpyAsync) where
  with none it scales it there with one kernel (torch's reducer.cpp), so cpp_hook − plain is what that path costs,
  and torch_hook − cpp_hook what a Python hook adds to it;
- torch_hook: torch's own Python `allreduce_hook`: what a Python hook costs before anything is timed;
- timed: the timed allreduce hook plus the per-step work the training callback does (begin the step,
  resolve the step two back, compute its statistics). TensorBoard writing is not included here;
  bench.trainer_overhead measures the whole harness trainer;
- timed_noop: the same with the timed noop hook, which is the path of a calibration step (the collective
  skipped). timed − timed_noop, per round, is what train.py's in-run exposed estimate measures at this world
  size (issue 10): at world size 1 there is nothing to send, so it is what the timed collective's path costs;
- timed_no_stats: timed, resolving each step's stamps (the CUDA event queries) without computing its statistics;
- timed_unresolved: timed, each step's stamps freed unread: the hook and its stamps alone.
  timed − timed_no_stats is what the statistics cost a step, timed_no_stats − timed_unresolved the resolve's;
- timed_noop_stamped: timed_noop with the stamps of the allreduce path, a launch stamp and a done stamp taken in a
  callback of the future the hook returns: everything of timed but the collective (BENCH_HOOK_CHANGES' noop_stamped).
  timed − timed_noop_stamped is what issuing the collective costs a step among those stamps, timed_noop_stamped −
  timed_noop what the stamps and their resolve cost without it;
- timed_no_done: timed without the done stamp (its collectives count to their launch): the timed hook's collective
  path less the event it records on the future callback's stream;
- timed_done_untimed: timed_no_done, recording in that callback an event without timing instead (never read): whether
  any event there costs, or only a timing one;
- timed_launch_after: timed, its launch stamp taken once the collective is enqueued rather than just before it;
- timed_done_pool: timed with each done stamp recorded on the callback's own pool stream, as the hook did before
  `StepStamps.callback_now` (which records it on the stamps' own stream);
- timed_ready_only: timed with one event a bucket, its ready stamp: no launch or done stamp. Against torch_hook, what
  remains is the hook's Python path with one event;
- with --variants only (not in the default set), the fp16 hook's split: torch_fp16, torch's own `fp16_compress_hook`;
  timed_fp16, the harness's fp16 hook as train.py runs it (each bucket's end-of-decompression stamp on a lane of its
  own); timed_fp16_done_lane, those stamps on the collectives' done lane instead; timed_fp16_no_codec_stamp, no such
  stamp (the casts and the copy back still run; the copy back then goes uncounted). Why: at world size 1 on an
  H100, train.py's fp16 hook reported 1.9 ms of exposed time a step, with 1.5 ms of hook host time
  (docs/BENCHMARKS.md, 2026-12-06 06:22 UTC);
- with --variants only, plain_bucket_view, cpp_hook_bucket_view and timed_bucket_view: those three with DDP's
  gradient_as_bucket_view, the gradients zeroed in place rather than set to None, so they stay the buckets' views
  and backward copies none into a bucket (train.py's default). Why: with a comm hook DDP copies
  each gradient into its bucket, and at batch 32 on a GPU any comm hook, torch's C++ one included, read slower than
  none (docs/BENCHMARKS.md, 2026-12-07 01:58 UTC);

--profile-steps N then runs N more steps of each variant under torch.profiler and reports, per step, the GPU's kernel
time and every CUDA runtime call's host time by name, with its longest single call: a call that waits for the GPU (a
hidden synchronization) shows as a long one, a stalled GPU as kernel time short of the step's wall time.

Each timed variant also reports the main thread's wall time per step in its per-step harness work: the resolve (or
the drop) and the statistics, timed around those calls alone.

Besides the step-time ratios it reports each thread's CPU per step per variant (on the GPU, autograd's thread runs
backward and the hook) and each hook's own host time per step, its calls timed entry to return by one wrapper for
both hooks: what the timed hook costs the thread that runs it, against torch's own hook.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from bench.ab import interleave, paired_difference, summarize, time_block, time_block_threads
from harness.common.cli import OneLineParser, check_count, check_writable, run_cli
from harness.common.local_launch import spawn_local
from harness.common.metrics import percentile
from harness.common.run_info import run_info
from harness.train.hook import TIMED_HOOKS, TimedHookState, all_reduce_sum, make_hook_state, pre_divide, returned
from harness.train.stamps import CollectiveStamps, Stamp, StepStamps
from harness.train.step_stats import step_stats
from harness.train.zero_grads import GradientZeroing
from models import get_model_spec

# The timed variants and the hook each one runs.
TIMED_VARIANTS = {
    "timed": "allreduce",
    "timed_noop": "noop",
    "timed_no_stats": "allreduce",
    "timed_unresolved": "allreduce",
    "timed_noop_stamped": "noop_stamped",
    "timed_no_done": "allreduce_no_done",
    "timed_done_untimed": "allreduce_done_untimed",
    "timed_launch_after": "allreduce_launch_after",
    "timed_ready_only": "allreduce_ready_only",
    "timed_done_pool": "allreduce_done_pool",
    "timed_fp16": "fp16",
    "timed_fp16_done_lane": "fp16",
    "timed_fp16_no_codec_stamp": "fp16",
}
# The fp16 variants that run train.py's fp16 hook with its codec stamps changed (`change_codec_stamps`).
CODEC_STAMP_CHANGES = {"timed_fp16_done_lane": "done_lane", "timed_fp16_no_codec_stamp": "none"}
# Variants run with DDP's gradient_as_bucket_view (the gradients zeroed in place), each named for the one it changes.
BUCKET_VIEW = "_bucket_view"
BUCKET_VIEW_VARIANTS = tuple(f"{name}{BUCKET_VIEW}" for name in ("plain", "cpp_hook", "timed"))
VARIANTS = ("plain", "cpp_hook", "torch_hook", "torch_fp16", *TIMED_VARIANTS, *BUCKET_VIEW_VARIANTS)
# The fp16 split and the bucket views run only when named: the default set stays the allreduce path's, as earlier
# calls ran it.
FP16_VARIANTS = ("torch_fp16", "timed_fp16", "timed_fp16_done_lane", "timed_fp16_no_codec_stamp")
NAMED_ONLY = (*FP16_VARIANTS, *BUCKET_VIEW_VARIANTS)
# Variants whose change exists only on the GPU: an untimed CUDA event, or the stream a stamp is recorded on.
GPU_ONLY = ("timed_done_untimed", "timed_done_pool", "timed_fp16_done_lane")
# (variant, baseline) pairs whose per-round differences are reported: DDP's comm-hook path against its built-in one,
# and a Python hook against that path; the collective's path against the calibration
# path, against the same stamps without the collective, without its done stamp, with its launch stamp after the
# launch, with its ready stamp alone; an untimed event in the done stamp's place; the ready stamp alone against
# torch's hook; the done stamp on the callback's pool stream (as before callback_now) against the hook's own. The fp16
# split: torch's fp16 hook against its allreduce hook (what the codec costs in torch's own hooks), the timed fp16 hook
# against torch's, against no codec stamp (what those stamps cost), against its codec stamps on the done lane (a lane
# a bucket against one shared), and the shared lane against no codec stamp.
PAIRED = (
    ("cpp_hook", "plain"),
    ("torch_hook", "cpp_hook"),
    ("timed", "timed_noop"),
    ("timed", "timed_noop_stamped"),
    ("timed", "timed_no_done"),
    ("timed_done_untimed", "timed_no_done"),
    ("timed", "timed_launch_after"),
    ("timed", "timed_ready_only"),
    ("timed_ready_only", "torch_hook"),
    ("timed_done_pool", "timed"),
    ("timed_done_pool", "timed_no_done"),
    ("torch_fp16", "torch_hook"),
    ("timed_fp16", "torch_fp16"),
    ("timed_fp16", "timed_fp16_no_codec_stamp"),
    ("timed_fp16", "timed_fp16_done_lane"),
    ("timed_fp16_done_lane", "timed_fp16_no_codec_stamp"),
    # The bucket views: DDP's built-in path with them against without, its comm-hook path against its built-in one
    # with them, the timed hook with them against without, and against DDP as a user has it by default.
    ("plain_bucket_view", "plain"),
    ("cpp_hook_bucket_view", "plain_bucket_view"),
    ("timed_bucket_view", "timed"),
    ("timed_bucket_view", "plain"),
)


def _timed_allreduce_variant(
    state: TimedHookState, bucket: dist.GradBucket, done: str, launch: str = "before", send: bool = True
) -> torch.futures.Future[torch.Tensor]:
    """The timed allreduce hook with one thing changed. `done`: "timed", its done stamp as the hook takes it (in the
    callback, `StepStamps.callback_now`: on the stamps' own stream); "pool", recorded on the callback's own (pool)
    stream instead, as the hook did before; "none", no done stamp (its collective counts to its launch); "untimed", an
    event without timing recorded there instead and dropped.
    `launch`: "before", the launch stamp taken just before the collective is enqueued, as the hook takes it;
    "after", once it is enqueued (the same place on the training stream, which NCCL's own event record joins);
    "ready", neither a launch nor a done stamp: the bucket's one event is its ready stamp.
    Without `send`, every stamp is taken but nothing is divided or sent: the future completes at once with the
    bucket as it is, and its callback runs then."""
    if done not in ("timed", "pool", "none", "untimed") or launch not in ("before", "after", "ready"):
        raise ValueError(f"no such bench hook change: done={done!r}, launch={launch!r}")
    group = dist.group.WORLD
    tensor = bucket.buffer()
    sent = tensor.numel() * tensor.element_size() if send else 0
    record = state._new_record(bucket, tensor, sent, tensor.dtype)
    if send:
        pre_divide(tensor, group.size())  # after the ready stamp, before the launch stamp, as the timed hook does
    launched = state.stamps.now() if launch == "before" else None
    if send:
        future = all_reduce_sum(tensor, group).get_future()
    else:
        future = torch.futures.Future()
        future.set_result([tensor])
    if launch == "ready":  # one stamp, the ready one: no collective is recorded (its resolve reads none)
        return returned(record, future.then(lambda fut: fut.value()[0]))
    collective = CollectiveStamps(launched if launched is not None else state.stamps.now())
    record.collectives.append(collective)

    def on_done(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        if done == "timed":
            collective.done = state.stamps.callback_now()
        elif done == "pool":
            collective.done = state.stamps.now()
        elif done == "untimed":
            torch.cuda.Event().record()
        return fut.value()[0]

    return returned(record, future.then(on_done))


# The bench's own hooks: each the timed allreduce hook with the changes given (`_timed_allreduce_variant`'s arguments).
BENCH_HOOK_CHANGES: dict[str, dict[str, object]] = {
    "noop_stamped": {"done": "timed", "send": False},  # every stamp of the allreduce path, and no collective
    "allreduce_no_done": {"done": "none"},
    "allreduce_done_untimed": {"done": "untimed"},
    "allreduce_launch_after": {"done": "timed", "launch": "after"},
    "allreduce_ready_only": {"done": "none", "launch": "ready"},
    "allreduce_done_pool": {"done": "pool"},
}


def _bench_hook(name: str, changes: dict[str, object]) -> Callable[..., torch.futures.Future[torch.Tensor]]:
    def hook(state: TimedHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return _timed_allreduce_variant(state, bucket, **changes)

    hook.__name__ = hook.__qualname__ = name
    # DDP checks a hook's annotations against the types themselves; this module's annotations are strings.
    hook.__annotations__ = {
        "state": TimedHookState,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    return hook


BENCH_HOOKS = {name: _bench_hook(name, changes) for name, changes in BENCH_HOOK_CHANGES.items()}


def change_codec_stamps(stamps: StepStamps, change: str) -> None:
    """Change where `stamps` takes the codec's end-of-decompression stamps (`callback_now(codec_of_bucket=i)`), the
    collectives' done stamps left as they are. `change`: "done_lane", on the done stamps' lane instead of a lane of
    the bucket's own; "none", not at all (the hook's `record.finished` stays None, so the resolve ends the bucket at
    its last collective's done: what comes after it goes uncounted)."""
    if change not in ("done_lane", "none"):
        raise ValueError(f"no such codec stamp change: {change!r}")
    on_its_lane = stamps.callback_now

    def callback_now(codec_of_bucket: int | None = None) -> Stamp | None:
        if codec_of_bucket is None:
            return on_its_lane()
        return on_its_lane() if change == "done_lane" else None

    stamps.callback_now = callback_now  # this instance only: the hook itself is train.py's, unchanged


class Variant:
    """One DDP copy of the model, with or without the timed hook, that runs one training step per call."""

    def __init__(self, model: torch.nn.Module, device: torch.device, hook: str, spec, batch, bf16: bool) -> None:
        cuda = device.type == "cuda"
        bucket_view = hook.endswith(BUCKET_VIEW)
        hook = hook.removesuffix(BUCKET_VIEW)
        self.ddp = DDP(model, device_ids=[device.index] if cuda else None, gradient_as_bucket_view=bucket_view)
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=0.01, momentum=0.9)
        self.zero_gradients = GradientZeroing(self.opt, in_place=self.ddp.gradient_as_bucket_view)
        self.spec, self.batch, self.bf16, self.cuda = spec, batch, bf16, cuda
        timed_hook = TIMED_VARIANTS.get(hook)
        self.state = make_hook_state(timed_hook, self.ddp.module, use_cuda=cuda) if timed_hook else None
        if hook in CODEC_STAMP_CHANGES:
            change_codec_stamps(self.state.stamps, CODEC_STAMP_CHANGES[hook])
        # Per step, the main thread's wall ms in the resolve (or the drop) and in the statistics.
        self.resolve_ms: list[float] = []
        self.stats_ms: list[float] = []
        self.hook_host_ms: list[float] = []  # per step: the hook's calls, entry to return, summed over the buckets
        self._hook_ns = 0
        self.buckets = 0
        if self.state is not None:
            hook_fn = BENCH_HOOKS[timed_hook] if timed_hook in BENCH_HOOKS else TIMED_HOOKS[timed_hook]
            self.ddp.register_comm_hook(self.state, self._host_timed(hook_fn))
        elif hook == "torch_hook":
            self.ddp.register_comm_hook(None, self._host_timed(default_hooks.allreduce_hook))
        elif hook == "cpp_hook":  # C++ all the way: nothing to time on the host from here
            self.ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
        elif hook == "torch_fp16":
            self.ddp.register_comm_hook(None, self._host_timed(default_hooks.fp16_compress_hook))
        self.step_index = 0
        self.world_size = dist.get_world_size()
        self.hook = hook

    def _host_timed(self, hook):
        """`hook`, its calls timed on the thread that makes them (autograd's, on the GPU): both hooks the same way,
        so the timed hook's host cost is read against torch's own."""

        @functools.wraps(hook)
        def timed(state, bucket):
            start = time.perf_counter_ns()
            future = hook(state, bucket)
            self._hook_ns += time.perf_counter_ns() - start
            return future

        return timed

    def step(self) -> None:
        if self.state is not None:
            self.state.stamps.end(self.step_index - 1)
            done = self.step_index - 2
            if done >= 0:
                start = time.perf_counter_ns()
                if self.hook == "timed_unresolved":
                    self.state.stamps.drop(done)
                else:
                    resolved = self.state.stamps.resolve(done)
                    self.buckets = len(resolved.timings)
                resolved_at = time.perf_counter_ns()
                self.resolve_ms.append((resolved_at - start) / 1e6)
                if self.hook not in ("timed_unresolved", "timed_no_stats"):
                    step_stats(resolved, 1.0, self.world_size)
                    self.stats_ms.append((time.perf_counter_ns() - resolved_at) / 1e6)
            self.state.begin_step(self.step_index)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with autocast:
            loss = self.spec.loss(self.ddp, self.batch)
        loss.backward()
        if self._hook_ns:
            self.hook_host_ms.append(self._hook_ns / 1e6)
            self._hook_ns = 0
        self.opt.step()
        self.zero_gradients()  # as train.py zeroes them
        self.step_index += 1


def profile_steps(variant: Variant, steps: int, cuda: bool) -> dict[str, object]:
    """`steps` steps of `variant` under torch.profiler: per step its wall ms, the GPU's kernel ms, and the CUDA
    runtime calls' host ms by name (the busiest ten), each with its longest single call in ms."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        wall_ms = time_block(variant.step, steps, cuda)
    calls: dict[str, list[float]] = {}
    kernel_us = 0.0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernel_us += event.self_device_time_total
        elif event.name.startswith(("cuda", "cu")) and not event.name.startswith("cudnn"):
            calls.setdefault(event.name, []).append(event.cpu_time_total / 1e3)
    busiest = sorted(calls.items(), key=lambda kv: -sum(kv[1]))[:10]
    return {
        "wall_ms_per_step": wall_ms,
        "kernel_ms_per_step": kernel_us / 1e3 / steps,
        "runtime_calls": {
            name: {"ms_per_step": sum(ms) / steps, "calls_per_step": len(ms) / steps, "max_ms": max(ms)}
            for name, ms in busiest
        },
    }


def worker(args: argparse.Namespace) -> None:
    rank = dist.get_rank()
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", 1))))
    spec = get_model_spec(args.model)
    torch.manual_seed(0)
    base = spec.build(image_size=args.image_size)
    memory_format = torch.channels_last if cuda and spec.kind == "image" else torch.contiguous_format
    base = base.to(device, memory_format=memory_format)
    inputs, targets = spec.make_batch(args.batch_size, device, 1000 + rank, image_size=args.image_size)
    batch = (inputs.contiguous(memory_format=memory_format), targets)
    torch.backends.cudnn.benchmark = cuda
    variants = {name: Variant(copy.deepcopy(base), device, name, spec, batch, cuda) for name in args.variants}
    for variant in variants.values():  # warm-up: bucket rebuild, cuDNN autotuning, allocator
        time_block(variant.step, args.warmup_steps, cuda)
        for measured in (variant.hook_host_ms, variant.resolve_ms, variant.stats_ms):
            measured.clear()  # the measured blocks' steps only
    threads_ms: dict[str, dict[str, list[float]]] = {name: {} for name in variants}

    def run_block(name: str) -> float:
        times = time_block_threads(variants[name].step, args.steps_per_block, cuda)
        for label, ms in times.threads_ms.items():
            threads_ms[name].setdefault(label, []).append(ms)
        return times.wall_ms

    samples = interleave({name: functools.partial(run_block, name) for name in variants}, args.blocks)
    profiles: dict[str, object] = {}
    for name, variant in variants.items() if args.profile_steps else ():
        try:
            profiles[name] = profile_steps(variant, args.profile_steps, cuda)
        except Exception as error:  # the profiler's reading is extra: its failure must not lose the rounds above
            profiles[name] = {"error": f"{type(error).__name__}: {error}"}
    if rank == 0:
        record = {
            "bench": "hook_overhead",
            "device": args.device,
            "model": args.model,
            "batch_size": args.batch_size,
            "image_size": args.image_size,
            "world_size": dist.get_world_size(),
            "steps_per_block": args.steps_per_block,
            "nccl_timing": os.environ.get("TORCH_NCCL_ENABLE_TIMING") == "1",
            **summarize(samples, args.variants[0]),
            # The hooks' calls, entry to return, summed over a step's buckets (both timed by the same wrapper).
            **{
                f"{name}_hook_host_ms_per_step_p50": percentile(variant.hook_host_ms, 50)
                for name, variant in variants.items()
                if variant.hook_host_ms
            },
            # PAIRED's differences, round by round (ms per step).
            **{
                key: value
                for name, baseline in PAIRED
                if name in samples and baseline in samples
                for key, value in paired_difference(
                    samples[name], samples[baseline], f"{name}_minus_{baseline}_ms"
                ).items()
            },
            "timed_buckets": max(variant.buckets for variant in variants.values()),
            # The main thread's wall ms per step in each timed variant's resolve (the drop, for timed_unresolved) and
            # statistics, timed around those calls alone.
            "main_thread_harness_ms_per_step_p50": {
                name: {"resolve": percentile(variant.resolve_ms, 50), "stats": percentile(variant.stats_ms, 50)}
                for name, variant in variants.items()
                if variant.state is not None
            },
            # Each thread's CPU ms per step, median over the blocks: on the GPU the main thread runs forward and the
            # optimizer, autograd's thread backward and the comm hook.
            "thread_cpu_ms_per_step_p50": {
                name: {label: percentile(values, 50) for label, values in labels.items()}
                for name, labels in threads_ms.items()
            },
            **({"profiled_steps": args.profile_steps, "profiles": profiles} if args.profile_steps else {}),
            "round_ms_per_step": samples,  # every variant's rounds, in order: other pairings offline
            "run_info": run_info(),
        }
        line = json.dumps(record)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")


PROG = "python -m bench.hook_overhead"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--nproc", type=int, help="local processes (default: 1 on cuda, 2 on cpu)")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--steps-per-block", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument(
        "--variants",
        help=f"comma-separated, the first the ratios' baseline (default: all the device can run but the fp16 split "
        f"and the bucket views ({', '.join(NAMED_ONLY)}), {VARIANTS[0]} first)",
    )
    parser.add_argument("--profile-steps", type=int, default=0, help="then profile this many steps of each variant")
    parser.add_argument("--out", help="append the result as a JSON line to this file")
    args = parser.parse_args()
    for option, value in (("--nproc", args.nproc), ("--batch-size", args.batch_size), ("--image-size", args.image_size),
                          ("--steps-per-block", args.steps_per_block), ("--blocks", args.blocks)):  # fmt: skip
        check_count(option, value)
    check_count("--warmup-steps", args.warmup_steps, least=0)
    check_count("--profile-steps", args.profile_steps, least=0)
    check_writable(args.out, "--out")
    available = [name for name in VARIANTS if args.device == "cuda" or name not in GPU_ONLY]
    default = [name for name in available if name not in NAMED_ONLY]
    args.variants = [name for name in (args.variants or ",".join(default)).split(",") if name]
    unknown = sorted(set(args.variants) - set(available))
    gpu_only = sorted(set(unknown) & set(GPU_ONLY))
    if gpu_only:
        parser.error(f"--variants: {', '.join(gpu_only)} change only what the GPU does; run them with --device cuda")
    if unknown or not args.variants:
        parser.error(
            f"--variants: {', '.join(unknown) or 'none given'}; on {args.device} choose from {', '.join(available)}"
        )
    get_model_spec(args.model)  # here, not as a traceback in every worker
    nproc = args.nproc or (1 if args.device == "cuda" else 2)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here; use --device cpu")
    if args.device == "cuda" and nproc > torch.cuda.device_count():
        parser.error(
            f"--device cuda: --nproc {nproc} needs a GPU per process; this host has {torch.cuda.device_count()}"
        )
    backend = "nccl" if args.device == "cuda" else "gloo"
    raise SystemExit(spawn_local(worker, nproc, (args,), backend=backend))


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
