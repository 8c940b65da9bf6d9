"""What many small buckets cost DDP itself, with no harness: forward + backward at several bucket caps, each with
DDP's built-in (C++) all_reduce, torch's own Python `allreduce_hook`, and no communication at all.

    torchrun --standalone --nproc-per-node 2 -m bench.small_buckets --model gpt_tiny --caps default,0.01,0.1

One process per rank holds one DDP model per (cap, communication) pair, all copies of one model, and runs them in
turn, round after round, so the host's drift falls alike on every pair; each forward + backward starts after a
barrier. Rank 0 prints each pair's p50 and its exposed time against no communication at the same cap. It answers
whether a cost the advisor does not predict (gpt_tiny's small buckets on CPU gloo, docs/BENCHMARKS.md) is DDP's
and gloo's or the timed hook's: the built-in path has no Python hook at all.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook

from harness.common.cli import OneLineParser, UsageError, check_count, check_torchrun, parse_cap_mib, run_cli
from models import get_model_spec

PATHS = ("builtin", "python_hook", "none")


def build(model: torch.nn.Module, cap_mb: float | None, path: str) -> torch.nn.parallel.DistributedDataParallel:
    ddp = torch.nn.parallel.DistributedDataParallel(
        copy.deepcopy(model), **({} if cap_mb is None else {"bucket_cap_mb": cap_mb})
    )
    if path == "python_hook":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif path == "none":  # torch's own hook that sends nothing: the compute-only reference at the same cap
        ddp.register_comm_hook(None, noop_hook)
    return ddp


def parse_caps(text: str) -> list[float | None]:
    """'default,0.01,0.1' as caps in MiB (None: DDP's default); a UsageError for anything else."""
    try:
        return [parse_cap_mib(item) for item in text.split(",")]
    except ValueError as err:
        raise UsageError(f"--caps {text!r}: each cap is {err}") from None


PROG = "python -m bench.small_buckets"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt_tiny")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--caps", default="default,0.01,0.1", help="MiB, comma-separated; 'default' is DDP's")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    caps = parse_caps(args.caps)
    check_count("--batch-size", args.batch_size)
    check_count("--warmup", args.warmup, least=0)
    check_count("--rounds", args.rounds, least=args.warmup + 1)  # the rounds after warm-up are the ones timed
    check_torchrun("torchrun --standalone --nproc-per-node 2 -m bench.small_buckets")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    spec = get_model_spec(args.model)
    model = spec.build()
    batch = spec.make_batch(args.batch_size, torch.device("cpu"), 0)
    pairs = {(cap, path): build(model, cap, path) for cap in caps for path in PATHS}
    times: dict[tuple[float | None, str], list[float]] = {key: [] for key in pairs}
    for round_ in range(args.rounds):
        for key, ddp in pairs.items():
            dist.barrier()
            start = time.perf_counter_ns()
            spec.loss(ddp, batch).backward()
            elapsed_ms = (time.perf_counter_ns() - start) / 1e6
            ddp.zero_grad(set_to_none=True)
            if round_ >= args.warmup:
                times[key].append(elapsed_ms)
    if dist.get_rank() == 0:
        world = dist.get_world_size()
        print(f"# {args.model}, batch {args.batch_size}, {world} gloo ranks, {args.rounds - args.warmup} rounds")
        print("cap MiB  communication  fwd+bwd p50 ms  exposed vs none ms")
        for (cap, path), samples in times.items():
            p50 = statistics.median(samples)
            none = statistics.median(times[(cap, "none")])
            label = "default" if cap is None else f"{cap:g}"
            print(f"{label:>7}  {path:>13}  {p50:14.2f}  {p50 - none:18.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
