"""DDP's own sampled stats (harness.train.ddp_crosscheck) on two real gloo ranks: which iterations DDP samples,
when each becomes visible, the step each is attributed to, and that DDP's comm time is the window of a
comm hook's stamps, first bucket launch to last bucket done, on the same iteration.
"""

import dataclasses
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from harness.train.ddp_crosscheck import (
    DDPSample,
    DDPStatsReader,
    compare_comm,
    ddp_samples_iteration,
    harness_comm_span_ms,
)
from tests.multiproc import run_workers

ITERATIONS = 16
SAMPLE_RATE = 3  # sampled: 1..10, 12, 15; the sample of 15 shows in forward 16
STEP_OFFSET = 7  # as after a resume: DDP counts from 1, the optimizer step does not
EXPECTED_ITERATIONS = [*range(1, 11), 12, 15]


def _train(rank: int, world_size: int) -> dict:
    """Train a few Linear layers (6 buckets of 1 MiB) with a hook stamping time.time_ns(), DDP's clock."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(6)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=1, gradient_as_bucket_view=True)
    spans: dict[int, list[int]] = {}  # step -> [first launch, last done], ns
    current = {"step": -1}

    def hook(_state, bucket):  # DDP checks annotations, and would take a string one for a wrong type
        span = spans.setdefault(current["step"], [time.time_ns(), 0])
        tensor = bucket.buffer().div_(world_size)
        fut = dist.group.WORLD.allreduce([tensor], dist.AllreduceOptions()).get_future()

        def done(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
            span[1] = max(span[1], time.time_ns())
            return f.value()[0]

        return fut.then(done)

    ddp.register_comm_hook(None, hook)
    reader = DDPStatsReader(ddp, sample_rate=SAMPLE_RATE)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(64, 512)
    published, poll_us = [], []
    started = time.perf_counter()
    for i in range(1, ITERATIONS + 1):
        step = STEP_OFFSET + i - 1
        current["step"] = step
        out = ddp(x)
        published.append(ddp._get_ddp_logging_data().get("iteration"))  # DDP's own field, after every forward
        t0 = time.perf_counter_ns()
        reader.poll(step)
        poll_us.append((time.perf_counter_ns() - t0) / 1e3)
        out.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return {
        "published": published,
        "samples": [dataclasses.asdict(s) for s in reader.samples],
        "mismatches": reader.mismatches,
        "spans": spans,
        "poll_us": poll_us,
        "loop_s": time.perf_counter() - started,
    }


def test_sampled_iterations_steps_and_comm_window(tmp_path: Path) -> None:
    for rank, result in enumerate(run_workers(_train, 2, tmp_path)):
        # DDP publishes iteration n during forward n + 1, and only for sampled n.
        expected_published = [max([0, *(n for n in EXPECTED_ITERATIONS if n < i)]) for i in range(1, ITERATIONS + 1)]
        assert result["published"] == expected_published, rank
        samples = [DDPSample(**s) for s in result["samples"]]
        assert result["mismatches"] == [], rank
        assert [s.iteration for s in samples] == EXPECTED_ITERATIONS, rank
        assert [s.step for s in samples] == [STEP_OFFSET + n - 1 for n in EXPECTED_ITERATIONS], rank
        assert [s.num_buckets for s in samples if s.iteration > 1] in ([6] * 11, [None] * 11)  # None: torch without it

        spans = result["spans"]
        for s in samples:
            first_launch, last_done = spans[s.step]
            # Causal, on one clock: DDP stamps before calling the hook for bucket 0, and after waiting on the
            # future the hook returned, which completes only once `done` has stamped.
            assert s.comm_start_ns <= first_launch and s.comm_end_ns >= last_done, (rank, s)
            assert s.comm_ms is not None and s.overlap_ms is not None and s.forward_ms is not None
            assert 0 < s.overlap_ms <= s.comm_ms
            assert s.exposed_ms is not None and s.exposed_ms >= 0

        span_ms = {step: (done - launch) / 1e6 for step, (launch, done) in spans.items()}
        warm_up = {STEP_OFFSET}  # iteration 1: one bucket, launched after all of backward
        agreement = compare_comm(samples, span_ms, excluded_steps=warm_up)
        assert agreement.compared == len(EXPECTED_ITERATIONS) - 1 and agreement.excluded == 1, agreement
        # DDP's window only adds its edges: entering the Python hook at the start (15-65 us measured), and
        # waking the autograd thread once the last future completed at the end (30-150 us idle; no copy into
        # .grad with gradient_as_bucket_view). Against 20-160 ms of 6 MiB all_reduce here that is under 1 %;
        # on a 2-core host loaded to 6 by other jobs the wake-up took up to 7 ms on a few iterations (median
        # excess 0.6 ms, ratio 1.02), so the median over 11 iterations is held to 3 ms and 25 %.
        assert agreement.median_ratio is not None and 1.0 <= agreement.median_ratio <= 1.25, agreement
        assert agreement.median_excess_ms is not None and 0.0 <= agreement.median_excess_ms <= 3.0, agreement

        # Polls that read nothing cost about a microsecond; bound generously for a loaded host.
        quiet = [us for i, us in enumerate(result["poll_us"], start=1) if not ddp_samples_iteration(i - 1, SAMPLE_RATE)]
        assert sorted(quiet)[len(quiet) // 2] < 50, quiet


def test_default_sampling_matches_ddp_rule() -> None:
    sampled = [n for n in range(0, 1001) if ddp_samples_iteration(n)]
    assert sampled == [*range(1, 11), *range(100, 1001, 100)]
    # Lightning, accumulation 1: step g is DDP iteration g + 1, so steps 0..9 and 99, 199, ... are sampled.
    assert [g for g in range(300) if ddp_samples_iteration(g + 1)] == [*range(10), 99, 199, 299]


def _sample(step: int, comm_ms: float | None) -> DDPSample:
    return DDPSample(step, step + 1, comm_ms, 1.0, 2.0, 0.5, 0, 0, 0, 0, None)


def test_compare_comm_counts_and_median() -> None:
    samples = [_sample(0, 10.0), _sample(1, 11.0), _sample(2, 12.0), _sample(3, None), _sample(4, 9.0)]
    spans = {0: 5.0, 1: 10.0, 2: 10.0, 3: 10.0}
    agreement = compare_comm(samples, spans, excluded_steps={0})
    assert agreement.compared == 2 and agreement.excluded == 1 and agreement.unmatched == 2
    assert agreement.ratios == {1: 1.1, 2: 1.2}
    assert abs(agreement.median_ratio - 1.15) < 1e-9 and abs(agreement.median_excess_ms - 1.5) < 1e-9
    assert compare_comm([], spans).median_ratio is None


def test_harness_span() -> None:
    # Bucket 1 is launched later but its future completes first; bucket 0's completion closes the span.
    assert harness_comm_span_ms([2.0, 3.0], [5.0, 4.5]) == 3.0
    assert harness_comm_span_ms([], []) is None
