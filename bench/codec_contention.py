"""Why the fp16 hook's codec costs ~10 ms a bucket on CPU gloo ranks of several threads, against 0.1 ms when probed.

On 4 gloo ranks of 4 intra-op threads (16 cores), resnet50's fp16 runs paid 3.8-15.5 ms of codec a bucket at a 1 MiB
cap and at DDP's default, and the advisor, which charges the codec probe's 0.05-0.5 ms, predicted those steps 19-54 %
short (docs/BENCHMARKS.md, 2026-12-06). The hook's copy back runs in the collective's callback, on one of gloo's
worker threads, not on the thread that runs backward. This bench times that codec (hook.compress, then the copy
back into the fp32 bucket) on each of N rank processes at once, each with T intra-op threads as train.py gives
them, in four phases:
  - main: on the process's main thread, nothing else running (what codec_probe.py measures);
  - side: on a long-lived second thread (as gloo's worker is), nothing else running;
  - side+backward: on that thread while the main thread runs the model's forward and backward in a loop;
  - main+backward: backward on the second thread, the codec on the main one.
It also counts the process's threads after each phase (each new thread that enters an OpenMP region gets a team of
its own under libgomp) and the backward loop's rate with and without the codec beside it. No process group: the
ranks only share the host's cores, which is what the question is about.

Usage: python -m bench.codec_contention [--ranks 4] [--threads 4] [--model resnet50] [--reps 40]
Run it also with OMP_WAIT_POLICY=PASSIVE (OpenMP's idle threads sleep instead of spinning) to test the spin.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import multiprocessing as mp
import os
import queue
import statistics
import threading
import time
from typing import Any

from harness.common.cli import OneLineParser, check_count, check_seconds, run_cli

SIZES = (2**18, 2**20, 2**22)  # 1, 4 and 16 MiB of fp32 gradients: resnet50's buckets at caps 1 to 25 MiB
GAP_S = 0.002  # between codec calls, as between buckets
WORLD_SIZE = 4  # the hook's pre-division, as on 4 ranks


def _codec_ms(buffers: dict[int, Any], reps: int) -> dict[int, float]:
    """Median ms of the fp16 hook's codec per size, over `reps` calls after one warm-up, on the calling thread: the
    codec probe's own timing (codec_probe.codec_ms), with a gap after each call as between buckets."""
    import torch

    from harness.train.codec_probe import codec_ms
    from harness.train.stamps import StepStamps

    clock = StepStamps(use_cuda=False)
    return {numel: codec_ms(buffer, torch.float16, WORLD_SIZE, clock, reps, GAP_S) for numel, buffer in buffers.items()}


def _thread_count() -> int:
    return len(os.listdir(f"/proc/{os.getpid()}/task"))


def _rank(rank: int, args: argparse.Namespace, barrier: Any, results: Any) -> None:
    import torch
    import torchvision

    torch.set_num_threads(args.threads)
    model = getattr(torchvision.models, args.model)()
    batch = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    buffers = {numel: torch.linspace(-1e-2, 1e-2, numel) for numel in SIZES}
    out: dict[str, Any] = {"rank": rank, "threads_at_start": _thread_count()}

    def backward_steps(stop: threading.Event) -> list[float]:
        steps = []
        while not stop.is_set() or len(steps) < 3:  # the first warms up: at least two to keep
            start = time.perf_counter()
            model(batch).sum().backward()
            steps.append((time.perf_counter() - start) * 1e3)
        return steps

    # One long-lived second thread that runs jobs, as gloo's worker threads do; started now, so that every count
    # after this one holds it.
    side = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    side.submit(lambda: None).result()
    stop = threading.Event()
    timer = threading.Timer(args.load_s, stop.set)
    barrier.wait()
    timer.start()
    backward_steps_alone = backward_steps(stop)
    out["backward_ms_alone"] = statistics.median(backward_steps_alone[1:])
    barrier.wait()
    out["main"] = _codec_ms(buffers, args.reps)
    out["threads_after_main"] = _thread_count()
    barrier.wait()
    out["side"] = side.submit(_codec_ms, buffers, args.reps).result()
    out["threads_after_side"] = _thread_count()
    barrier.wait()
    codec = side.submit(_codec_ms, buffers, args.reps)
    steps = []
    while not codec.done():
        start = time.perf_counter()
        model(batch).sum().backward()
        steps.append((time.perf_counter() - start) * 1e3)
    out["side+backward"] = codec.result()
    out["backward_steps_beside_codec"] = len(steps)  # the first spans the codec's start: kept out of the median
    out["backward_ms_beside_codec"] = statistics.median(steps[1:]) if len(steps) > 1 else math.nan
    out["threads_after_side+backward"] = _thread_count()
    barrier.wait()
    stop = threading.Event()
    loader = side.submit(backward_steps, stop)
    time.sleep(1.0)
    out["main+backward"] = _codec_ms(buffers, args.reps)
    stop.set()
    out["backward_ms_on_side_beside_codec"] = statistics.median(loader.result()[1:])  # backward_steps keeps 3+
    side.shutdown()
    results.put(out)


PROG = "python -m bench.codec_contention"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--load-s", type=float, default=5.0, help="seconds of backward alone, for its rate")
    args = parser.parse_args()
    for option, value in (("--ranks", args.ranks), ("--threads", args.threads), ("--image-size", args.image_size),
                          ("--batch-size", args.batch_size), ("--reps", args.reps)):  # fmt: skip
        check_count(option, value)
    check_seconds("--load-s", args.load_s)
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(args.ranks), ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, args, barrier, results)) for r in range(args.ranks)]
    for proc in procs:
        proc.start()
    try:  # a rank that failed never reports: its traceback is above
        outs = sorted((results.get(timeout=600) for _ in procs), key=lambda o: o["rank"])
    except queue.Empty:
        raise SystemExit("codec_contention: a rank did not report in 600 s") from None
    for proc in procs:
        proc.join()
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(
        f"# {args.ranks} ranks x {args.threads} threads, {args.model} {args.image_size}px batch {args.batch_size}, "
        f"{os.cpu_count()} CPUs, OMP_WAIT_POLICY={policy}; codec ms (median of {args.reps}) per rank"
    )
    for phase in ("main", "side", "side+backward", "main+backward"):
        for numel in SIZES:
            values = [o[phase][numel] for o in outs]
            print(f"{phase:>14} {numel:>8} elements: " + " ".join(f"{v:7.3f}" for v in values))
    for key in ("backward_ms_alone", "backward_ms_beside_codec", "backward_ms_on_side_beside_codec"):
        print(f"{key}: " + " ".join(f"{o[key]:.1f}" for o in outs))
    print("backward_steps_beside_codec: " + " ".join(str(o["backward_steps_beside_codec"]) for o in outs))
    for key in ("threads_at_start", "threads_after_main", "threads_after_side", "threads_after_side+backward"):
        print(f"{key}: " + " ".join(str(o[key]) for o in outs))


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
