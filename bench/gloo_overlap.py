"""How much gloo's worker threads overlap collectives: ten all_reduces issued together against ten one by one.

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 -m bench.gloo_overlap

gloo runs as many collectives at once as its process group has worker threads (2 by default), and the
advisor's step model lets the latencies of collectives in flight together overlap wholly. This measures how
far they do on this host, with nothing else running: for each size, 30 interleaved trials of ten all_reduces
launched together (async, then all waited for) and ten one after another, each trial started after a barrier.
Rank 0 prints the medians and their ratio (2.0 would be two threads fully overlapped). Figures:
docs/BENCHMARKS.md, "Tried and reverted: a probe of how much latency overlaps on gloo's two threads".
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from harness.common.cli import OneLineParser, check_torchrun, run_cli

PROG = "python -m bench.gloo_overlap"

SIZES_ELEMENTS = (1024, 16384, 262144)  # 4 KB, 64 KB, 1 MB of float32
COLLECTIVES = 10
TRIALS, WARMUP = 30, 3


def trial_ms(size: int, together: bool) -> float:
    tensors = [torch.ones(size) for _ in range(COLLECTIVES)]
    dist.barrier()
    start = time.perf_counter()
    if together:
        for work in [dist.all_reduce(t, async_op=True) for t in tensors]:
            work.wait()
    else:
        for t in tensors:
            dist.all_reduce(t)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    OneLineParser(prog=PROG, description=__doc__.splitlines()[0]).parse_args()  # no options: --help, or a refusal
    check_torchrun("OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 -m bench.gloo_overlap")
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    try:
        for size in SIZES_ELEMENTS:
            for _ in range(WARMUP):
                trial_ms(size, True), trial_ms(size, False)
            together, serial = [], []
            for _ in range(TRIALS):
                together.append(trial_ms(size, True))
                serial.append(trial_ms(size, False))
            if dist.get_rank() == 0:
                one_by_one, at_once = statistics.median(serial), statistics.median(together)
                print(
                    f"{size * 4 // 1024} KB x{COLLECTIVES}: one by one {one_by_one:.2f} ms, issued together "
                    f"{at_once:.2f} ms, ratio {one_by_one / at_once:.2f}",
                    flush=True,
                )
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
