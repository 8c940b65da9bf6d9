"""The timed hook on real gloo processes: DDP's numerics kept bit for bit, bytes counted exactly, stamps sane."""

from __future__ import annotations

import os
import time
from functools import partial

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

from harness.common.dist_env import NVLS_OFF_ENV
from harness.train.hook import TimedHookState, make_hook_state, register_timed_hook
from harness.train.stamps import BucketRecord, CollectiveStamps, ResolvedStep, StepStamps
from tests.multiproc import run_workers

STEPS = 4  # step 0 has one bucket, step 1 rebuilds, PowerSGD compresses from step 2


def _small_model() -> torch.nn.Module:
    torch.manual_seed(0)  # same initial weights on every rank and for both DDP copies
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 6 * 6, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    )


def _train_grads(ddp: DDP, rank: int, on_step=None, backward_ns: list | None = None) -> list[torch.Tensor]:
    """Run STEPS steps with inputs that differ per rank; return the flattened gradients of every step.
    `backward_ns` receives each step's (start, end) of `loss.backward()` on the test's own perf_counter_ns."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    grads = []
    for step in range(STEPS):
        if on_step:
            on_step(step)
        x = torch.randn(4, 3, 8, 8, generator=gen)
        y = torch.randint(0, 10, (4,), generator=gen)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        backward_start = time.perf_counter_ns()
        loss.backward()
        if backward_ns is not None:
            backward_ns.append((backward_start, time.perf_counter_ns()))
        grads.append(torch.cat([p.grad.flatten() for p in ddp.parameters()]).clone())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return grads


def _next_step(state: TimedHookState):
    """What the training loop does at each step's start: end the previous step, then begin this one."""

    def on_step(step: int) -> None:
        state.stamps.end(step - 1)
        state.begin_step(step)

    return on_step


def _resolve_all(state: TimedHookState) -> list[ResolvedStep]:
    """Resolve every step, as the callback does at the end of training (the last one ends now)."""
    state.stamps.end(STEPS - 1)
    return [state.stamps.resolve(s) for s in range(STEPS)]


SMALL_BUCKET_MB = 0.005  # a few KB: several buckets for the small model
ONE_BUCKET_MB = 100.0


def _reference_ddp(hook_name: str, bucket_cap_mb: float) -> DDP:
    ddp = DDP(_small_model(), bucket_cap_mb=bucket_cap_mb)
    if hook_name == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook_name == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook_name == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
    return ddp  # "allreduce": DDP's own built-in reduction, no hook at all


def _compare_worker(rank: int, world_size: int, hook_name: str, bucket_cap_mb: float) -> dict:
    reference = _train_grads(_reference_ddp(hook_name, bucket_cap_mb), rank)

    ddp = DDP(_small_model(), bucket_cap_mb=bucket_cap_mb)
    state = make_hook_state(hook_name, ddp.module, use_cuda=False, max_buckets=16)
    register_timed_hook(ddp, state)
    backward_ns: list[tuple[int, int]] = []
    starts: list[int] = []  # gloo: perf_counter_ns, as the test's clock
    begin = _next_step(state)

    def on_step(step: int) -> None:
        begin(step)
        starts.append(state.stamps._starts[step])

    timed = _train_grads(ddp, rank, on_step=on_step, backward_ns=backward_ns)
    resolved = _resolve_all(state)
    trainable = sum(p.numel() for p in ddp.parameters() if p.requires_grad)
    return {
        "bitwise_equal": [torch.equal(a, b) for a, b in zip(reference, timed, strict=True)],
        "differs_across_steps": not torch.equal(timed[0], timed[1]),
        "grad_sample": timed[-1][:4].tolist(),
        "step_bytes": [sum(t.bytes for t in r.timings) for r in resolved],
        "bucket_counts": [len(r.timings) for r in resolved],
        "step_ms": [r.step_ms for r in resolved],
        # Every bucket became ready during its step's backward, its collectives ran after that, and its future
        # finished before backward returned (DDP waits for every bucket's future there), as the test's own
        # clock saw that backward.
        "stamps_within_backward": all(
            (bwd_start - start) / 1e6 <= t.ready_ms
            and all(t.ready_ms <= a <= b <= t.finished_ms for a, b in t.intervals)
            and t.finished_ms <= (bwd_end - start) / 1e6
            for r, start, (bwd_start, bwd_end) in zip(resolved, starts, backward_ns, strict=True)
            for t in r.timings
        ),
        "collectives": [[len(t.intervals) for t in r.timings] for r in resolved],
        "sources": sorted({r.source for r in resolved}),
        "dtypes": sorted({t.dtype for r in resolved for t in r.timings}),
        "pending_after": state.stamps.pending_steps(),
        "trainable": trainable,
        "comm_hook": ddp._get_ddp_logging_data().get("comm_hook"),
    }


# The gloo cases below run in two spawned worlds, one of 1 rank and one of 2, each running its cases one after
# another (_cases_worker): a spawn costs seconds of imports, a case a fraction of one.
ONE_RANK_CASES = [("allreduce", SMALL_BUCKET_MB), ("fp16", SMALL_BUCKET_MB)]
# torch's own PowerSGD races on gloo with several buckets (its chained collectives are issued from gloo's
# threads), so its reference runs with one bucket; the timed hook's per-bucket groups are checked with many.
TWO_RANK_CASES = [
    ("allreduce", SMALL_BUCKET_MB),
    ("fp16", SMALL_BUCKET_MB),
    ("bf16", SMALL_BUCKET_MB),
    ("powersgd", ONE_BUCKET_MB),
]
POWERSGD_MANY_BUCKETS, NOOP = "powersgd_many_buckets", "noop"  # the other 2-rank workers' results, by key


def _cases_worker(rank: int, world_size: int, cases: list[tuple[str, float]]) -> dict:
    """Each compare case's result, by case; in the world of 2 also the PowerSGD and noop workers'. A case that
    raises ends the world; its traceback names the case (every test of the world then reports it)."""
    runs: dict = {case: partial(_compare_worker, rank, world_size, *case) for case in cases}
    if world_size == 2:
        runs[POWERSGD_MANY_BUCKETS] = partial(_powersgd_many_buckets_worker, rank, world_size)
        runs[NOOP] = partial(_noop_worker, rank, world_size)
    results = {}
    for case, run in runs.items():
        try:
            results[case] = run()
        except Exception as err:
            err.add_note(f"in the case {case!r} of {world_size} ranks")
            raise
    return results


@pytest.fixture(scope="module")
def one_rank_results(tmp_path_factory) -> dict:
    (results,) = run_workers(_cases_worker, 1, tmp_path_factory.mktemp("one_rank"), ONE_RANK_CASES)
    return results


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory) -> list[dict]:
    return run_workers(_cases_worker, 2, tmp_path_factory.mktemp("two_ranks"), TWO_RANK_CASES)


@pytest.mark.parametrize("case", ONE_RANK_CASES, ids=[name for name, _ in ONE_RANK_CASES])
def test_one_rank_skips_the_division_and_keeps_numerics(one_rank_results, case):
    # At world size 1 the timed hooks leave out the division by 1 (a pass over every bucket): the gradients
    # are still those of DDP's own reduction and torch's fp16 hook, bit for bit.
    res = one_rank_results[case]
    assert all(res["bitwise_equal"]) and res["differs_across_steps"]
    assert res["stamps_within_backward"] and res["pending_after"] == []


@pytest.mark.parametrize(("hook_name", "bucket_cap_mb"), TWO_RANK_CASES)
def test_timed_hook_keeps_numerics_and_counts_bytes(two_rank_results, hook_name, bucket_cap_mb):
    results = [by_case[(hook_name, bucket_cap_mb)] for by_case in two_rank_results]
    for rank, res in enumerate(results):
        assert all(res["bitwise_equal"]), f"rank {rank}: gradients differ from the reference per step"
        assert res["differs_across_steps"]
        assert res["comm_hook"].startswith("timed_")
        assert res["bucket_counts"][0] == 1, "DDP's step 0 uses one bucket"
        if bucket_cap_mb == SMALL_BUCKET_MB:
            assert res["bucket_counts"][2] > 1, "the tiny cap must give several buckets after the rebuild"
        assert res["stamps_within_backward"]
        assert all(ms > 0 for ms in res["step_ms"])
        assert res["sources"] == ["cpu_clock"]
        assert res["pending_after"] == []
        full = 4 * res["trainable"]
        if hook_name == "allreduce":
            assert res["step_bytes"] == [full] * STEPS
            assert res["dtypes"] == ["float32"]
            assert all(n == [1] * len(n) for n in res["collectives"]), "one all_reduce per bucket"
        elif hook_name in ("fp16", "bf16"):
            assert res["step_bytes"] == [full // 2] * STEPS
            assert res["dtypes"] == ["float16" if hook_name == "fp16" else "bfloat16"]
        else:
            # Plain all_reduce until compression starts at step 2, then strictly fewer bytes.
            assert res["step_bytes"][:2] == [full, full]
            assert all(0 < b < full for b in res["step_bytes"][2:])
            # Its own collectives, each timed: the plain all_reduce, then P and Q (and the uncompressed rest).
            assert res["collectives"][:2] == [[1], [1]]
            assert all(n in (2, 3) for n in res["collectives"][2])
    # The averaged gradients are the same on every rank.
    assert results[0]["grad_sample"] == results[1]["grad_sample"]


def _powersgd_many_buckets_worker(rank: int, world_size: int) -> dict:
    ddp = DDP(_small_model(), bucket_cap_mb=SMALL_BUCKET_MB)
    state = make_hook_state("powersgd", ddp.module, use_cuda=False, max_buckets=16)
    register_timed_hook(ddp, state)
    grads = _train_grads(ddp, rank, on_step=_next_step(state))
    resolved = _resolve_all(state)
    return {
        "grad_sample": grads[-1][:8].tolist(),
        "step_bytes": [sum(t.bytes for t in r.timings) for r in resolved],
        "buckets": [len(r.timings) for r in resolved],
        "full": 4 * sum(p.numel() for p in ddp.parameters()),
    }


def test_powersgd_with_many_buckets_on_gloo(two_rank_results):
    results = [by_case[POWERSGD_MANY_BUCKETS] for by_case in two_rank_results]
    for res in results:
        assert res["buckets"][2] > 1
        assert res["step_bytes"][:2] == [res["full"]] * 2
        assert all(0 < b < res["full"] for b in res["step_bytes"][2:])
    assert results[0]["grad_sample"] == results[1]["grad_sample"], "replicas must agree after compression"


def _noop_worker(rank: int, world_size: int) -> dict:
    ddp = DDP(_small_model(), bucket_cap_mb=SMALL_BUCKET_MB)
    state = make_hook_state("noop", ddp.module, use_cuda=False)
    register_timed_hook(ddp, state)
    grads = _train_grads(ddp, rank, on_step=_next_step(state))
    bytes_ = [sum(t.bytes for t in r.timings) for r in _resolve_all(state)]
    gathered = [torch.zeros_like(grads[0]) for _ in range(world_size)]
    dist.all_gather(gathered, grads[0])
    return {"bytes": bytes_, "ranks_differ": not torch.equal(gathered[0], gathered[1])}


def test_noop_hook_sends_nothing(two_rank_results):
    for res in (by_case[NOOP] for by_case in two_rank_results):
        assert res["bytes"] == [0] * STEPS
        assert res["ranks_differ"], "without communication each rank keeps its own gradients"


def _nccl_world_of_one(tmp_path) -> None:
    if dist.is_initialized():  # an earlier GPU test in this process made it
        return
    os.environ.update(NVLS_OFF_ENV)
    # NCCL's own per-kernel timing, the ground truth of test_nccl_bucket_time_agrees_with_nccls_own_timing
    # (read only by the test; it must be set before the process group exists).
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"
    torch.cuda.set_device(0)
    store = dist.FileStore(str(tmp_path / "nccl-store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_path_keeps_numerics(tmp_path):
    _nccl_world_of_one(tmp_path)
    device = torch.device("cuda", 0)
    reference = DDP(_small_model().to(device), device_ids=[0], bucket_cap_mb=SMALL_BUCKET_MB)
    timed = DDP(_small_model().to(device), device_ids=[0], bucket_cap_mb=SMALL_BUCKET_MB)
    state = make_hook_state("allreduce", timed.module, use_cuda=True)
    register_timed_hook(timed, state)
    x = torch.randn(4, 3, 8, 8, device=device)
    y = torch.randint(0, 10, (4,), device=device)
    on_step = _next_step(state)
    for step in range(STEPS):
        on_step(step)
        for ddp in (reference, timed):
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
        for a, b in zip(reference.parameters(), timed.parameters(), strict=True):
            assert torch.equal(a.grad, b.grad)
            a.grad = b.grad = None
    resolved = _resolve_all(state)
    timings = [t for r in resolved for t in r.timings]
    assert len(timings) > STEPS, "several buckets after the rebuild"
    assert {r.source for r in resolved} == {"cuda_events"}
    assert all(0 <= t.ready_ms <= t.done_ms <= t.finished_ms for t in timings)
    assert all(r.step_ms > 0 for r in resolved)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_nccl_bucket_time_agrees_with_nccls_own_timing(tmp_path, monkeypatch):
    """Bucket comm time from CUDA events and the serial-stream rule, against NCCL's own execution time
    (`work._get_duration()`, which needs TORCH_NCCL_ENABLE_TIMING before the group exists). The test keeps the
    Works itself; the hook does not. At world size 1 NCCL moves nothing (no kernel runs; a torch.profiler trace
    shows none), so this checks that the events leave out the backward compute around each collective: the
    model's layers take milliseconds, the collectives microseconds."""
    _nccl_world_of_one(tmp_path)
    if os.environ.get("TORCH_NCCL_ENABLE_TIMING") != "1" or dist.get_backend() != "nccl":
        pytest.skip("the process group was made before NCCL timing could be switched on")
    from harness.train import hook as hook_module

    works: list[dist.Work] = []
    launch = hook_module.all_reduce_sum

    def keep_work(tensor: torch.Tensor, group: dist.ProcessGroup) -> dist.Work:
        works.append(launch(tensor, group))
        return works[-1]

    monkeypatch.setattr(hook_module, "all_reduce_sum", keep_work)
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    big = torch.nn.Sequential(torch.nn.Flatten(), *[torch.nn.Linear(4096, 4096) for _ in range(6)])
    ddp = DDP(big.to(device), device_ids=[0], bucket_cap_mb=64)
    state = make_hook_state("allreduce", ddp.module, use_cuda=True)
    register_timed_hook(ddp, state)
    x = torch.randn(8192, 4096, device=device)
    on_step = _next_step(state)
    for step in range(STEPS):
        on_step(step)
        ddp(x).square().mean().backward()
    torch.cuda.synchronize()
    resolved = _resolve_all(state)
    ours = [t.comm_ms for r in resolved for t in r.timings]
    theirs = [float(w._get_duration()) for w in works]
    assert len(ours) == len(theirs) > STEPS, (ours, theirs)
    compute_ms = [r.fwd_bwd_ms or r.step_ms for r in resolved]
    for mine, nccl in zip(ours, theirs, strict=True):
        # The floor of the method: one CUDA event pair across two stream waits, tens of µs on a busy host.
        assert abs(mine - nccl) <= 0.15, f"bucket comm {mine:.4f} ms, NCCL's own {nccl:.4f} ms ({compute_ms} ms steps)"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("hook_name", ["fp16", "bf16"])
def test_compression_hooks_use_no_more_memory_than_torchs(tmp_path, hook_name):
    """Peak GPU memory with the timed fp16/bf16 hook against torch's own hook on the same model, measured by
    bench.hook_peak_memory: the timed hook keeps stamps only, never a collective's output, so it may not hold more.

    Each step is followed by a pause for NCCL's watchdog: the process group keeps a collective's tensors until its
    watchdog sees the collective done. Back to back, how many steps' compressed buffers are still held when the next
    step allocates depends on when the watchdog woke: torch's own fp16 hook peaked at 355.4 to 528.6 MiB over six runs
    on an H100 (one step's fp16 copies are 64.1 MiB), and 227.3 MiB in all four runs with the pause. After the pause,
    what is left is what the hook holds."""
    from bench.hook_peak_memory import peak_mib

    _nccl_world_of_one(tmp_path)
    device = torch.device("cuda", 0)
    torch_hook = default_hooks.fp16_compress_hook if hook_name == "fp16" else default_hooks.bf16_compress_hook

    def theirs(ddp: DDP) -> None:
        ddp.register_comm_hook(None, torch_hook)

    def ours(ddp: DDP):
        state = make_hook_state(hook_name, ddp.module, use_cuda=True)
        register_timed_hook(ddp, state)

        def after_backward(step: int) -> None:
            if step >= 2:
                state.stamps.resolve(step - 2)  # as the callback does, two steps behind

        return _next_step(state), after_backward

    pause_s = 0.3
    before, timed, after = (peak_mib(device, register, pause_s) for register in (theirs, ours, theirs))
    reference = max(before, after)
    assert timed <= reference * 1.02 + 1.0, f"timed {hook_name} peaks at {timed:.1f} MiB, torch's at {reference:.1f}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_stamps_are_recorded_on_the_current_stream():
    """The hook's stamps use their own lookup of the current stream (stamps.current_stream, cheaper than torch's):
    it must name the stream torch.cuda.current_stream() names, on the default stream and inside a side stream, and a
    stamp pair around a GPU sleep on a side stream must time that sleep, not the idle default stream."""
    from harness.train.stamps import StepStamps, current_stream

    torch.cuda.set_device(0)
    stamps = StepStamps(use_cuda=True)
    side = torch.cuda.Stream()
    assert current_stream() == torch.cuda.current_stream()
    # torch's own events around the same sleep: a sleep is counted in GPU cycles, so two sleeps apart would differ
    # by the clock's ramp from idle.
    reference_start, reference_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        assert current_stream() == torch.cuda.current_stream() == side
        reference_start.record()
        before = stamps.now()
        torch.cuda._sleep(50_000_000)  # tens of ms of GPU time on `side` only
        after = stamps.now()
        reference_end.record()
    assert current_stream() == torch.cuda.current_stream() != side
    torch.cuda.synchronize()
    slept_ms = stamps.elapsed_ms(before, after)
    expected_ms = reference_start.elapsed_time(reference_end)
    assert expected_ms > 5
    assert abs(slept_ms - expected_ms) < 0.25 * expected_ms, (slept_ms, expected_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_stamp_read_before_the_gpu_reaches_it_waits_for_it():
    """`elapsed_ms` reads an event pair with one call and waits only when torch refuses that read (an event still
    pending). Two GPU sleeps: a pair around the first, read while the GPU is still in it, must give that sleep's time;
    then the step, resolved while the GPU is still in the second sleep (its end pending), must give both sleeps' time,
    as torch's own events read after a synchronize give them."""
    from harness.train.stamps import StepStamps

    torch.cuda.set_device(0)
    stamps = StepStamps(use_cuda=True)
    reference = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    reference[0].record()
    stamps.begin(7)
    before = stamps.now()
    torch.cuda._sleep(100_000_000)  # tens of ms of GPU time each: the reads below come before the GPU is done
    after = stamps.now()
    reference[1].record()
    torch.cuda._sleep(100_000_000)
    stamps.end(7)
    reference[2].record()
    assert not after.query(), "the first sleep was over before the read: this test would not test the wait"
    slept_ms = stamps.elapsed_ms(before, after)
    assert not stamps._ends[7].query(), "the second sleep was over before the resolve: it would not test the wait"
    resolved = stamps.resolve(7)
    torch.cuda.synchronize()
    first_ms, step_ms = reference[0].elapsed_time(reference[1]), reference[0].elapsed_time(reference[2])
    assert first_ms > 10
    assert abs(slept_ms - first_ms) < 0.25 * first_ms, (slept_ms, first_ms)
    assert abs(resolved.step_ms - step_ms) < 0.25 * step_ms, (resolved.step_ms, step_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("codec_of_bucket", [None, 3])
def test_a_callback_stamp_comes_after_the_work_of_the_callbacks_stream(codec_of_bucket):
    """`callback_now` records on the stamps' own stream, made to wait for the current one (a future callback's pool
    stream, made to wait for the collective): a stamp taken after a GPU sleep on the current stream must come when
    the sleep is over, as torch's own events on that stream time it, not when the stamps' idle stream is reached."""
    from harness.train.stamps import StepStamps

    torch.cuda.set_device(0)
    stamps = StepStamps(use_cuda=True)
    callback_stream = torch.cuda.Stream()
    reference_start, reference_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(callback_stream):
        reference_start.record()
        before = stamps.now()
        torch.cuda._sleep(50_000_000)  # tens of ms of GPU time on the callback's stream only
        done = stamps.callback_now(codec_of_bucket)
        reference_end.record()
    torch.cuda.synchronize()
    expected_ms = reference_start.elapsed_time(reference_end)
    assert expected_ms > 5
    stamped_ms = stamps.elapsed_ms(before, done)
    assert abs(stamped_ms - expected_ms) < 0.25 * expected_ms, (stamped_ms, expected_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_slow_decompression_holds_back_no_other_stamp():
    """Each bucket's end of decompression, and the collectives' done, are stamped in lanes of their own: after one
    bucket's codec stamp that waits for a long GPU sleep, a collective's done and another bucket's codec stamp, their
    own callback stream idle, come at once, not after the sleep."""
    from harness.train.stamps import StepStamps

    torch.cuda.set_device(0)
    stamps = StepStamps(use_cuda=True)
    slow_callback, quick_callback = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(slow_callback):
        start = stamps.now()
        torch.cuda._sleep(50_000_000)
        slow_codec_end = stamps.callback_now(codec_of_bucket=0)
    with torch.cuda.stream(quick_callback):
        done = stamps.callback_now()
        quick_codec_end = stamps.callback_now(codec_of_bucket=1)
    torch.cuda.synchronize()
    slow_ms = stamps.elapsed_ms(start, slow_codec_end)
    quick_ms = [stamps.elapsed_ms(start, stamp) for stamp in (done, quick_codec_end)]
    assert slow_ms > 5
    assert max(quick_ms) < 0.25 * slow_ms, (quick_ms, slow_ms)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_dropped_step_gives_back_every_stamp_and_leaves_the_others(device):
    """`StepStamps.drop` frees a step unread (bench.hook_overhead's timed_unresolved): on the GPU every event it took
    goes back to the pool, and the next step still resolves."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    stamps = StepStamps(use_cuda=device == "cuda")
    for step in (0, 1):
        stamps.begin(step)
        record = BucketRecord(step=step, index=0, num_params=1, numel=4, bytes=16, dtype="float32", ready=stamps.now())
        record.collectives.append(CollectiveStamps(stamps.now(), stamps.now()))
        stamps.records[step].append(record)
        stamps.mark_backward_end(step)
        stamps.end(step)
    stamps.drop(0)
    assert stamps.pending_steps() == [1]
    if device == "cuda":
        assert len(stamps.events._free) == 6  # start, end, end of backward, ready, launch, done
    resolved = stamps.resolve(1)
    assert resolved.step == 1 and len(resolved.timings) == 1 and resolved.step_ms >= 0
