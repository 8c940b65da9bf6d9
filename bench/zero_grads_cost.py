"""The host's cost of zeroing a model's gradients between steps, the ways train.py and torch can do it.

    python -m bench.zero_grads_cost --model resnet50                  # host work only (meta tensors), any machine
    python -m bench.zero_grads_cost --model resnet50 --device cuda    # with the CUDA launches, on a GPU

Why: at resnet50 batch 32 on one GPU the host bounds the step, so every µs of Python on the training loop's thread
is step time (docs/BENCHMARKS.md, issue 11). train.py zeroes DDP's bucket views in place
(harness/train/zero_grads.py); this times, per call, in interleaved blocks of --calls calls each:
  - `kept`: GradientZeroing as train.py runs it, its groups kept from the last step;
  - `sorted`: the same with its groups marked stale every call, so that it sorts them again: a call's cost when a
    gradient changed (DDP's bucket rebuild), the identity check included. Before the groups were kept, every call
    sorted, in one pass without that check (docs/BENCHMARKS.md has that version's time, measured once);
  - `foreach_only`: the multi-tensor call alone on a ready list, the floor;
  - `torch_zero_grad`: `Optimizer.zero_grad(set_to_none=False)`, torch's own in-place zeroing (a call a gradient).
On the meta device no kernel runs and nothing is allocated: what is timed is the host's work, which is what a
host-bound step pays. Prints each variant's median µs per call, with the spread of the blocks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from harness.common.cli import OneLineParser, UsageError, run_cli
from harness.train.zero_grads import GradientZeroing
from models import MODEL_NAMES, get_model_spec

PROG = "python -m bench.zero_grads_cost"


def variants(optimizer: torch.optim.Optimizer) -> dict[str, Callable[[], None]]:
    """Each way of zeroing `optimizer`'s gradients in place, by name (see the module's docstring)."""
    kept = GradientZeroing(optimizer, in_place=True)
    resorted = GradientZeroing(optimizer, in_place=True)
    grads = [param.grad for group in optimizer.param_groups for param in group["params"]]

    def sorted_each_call() -> None:
        resorted._stale[0] = True  # as when a gradient was freed: the call sorts them again
        resorted()

    return {
        "kept": kept,
        "sorted": sorted_each_call,
        "foreach_only": lambda: torch._foreach_zero_(grads),
        "torch_zero_grad": lambda: optimizer.zero_grad(set_to_none=False),
    }


def us_per_call(fn: Callable[[], None], calls: int, cuda: bool) -> float:
    """Host µs per call of `fn` over `calls` calls (on the GPU, the queue drained before the clock starts)."""
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        default="resnet50",
        choices=MODEL_NAMES,
        metavar="MODEL",
        help="a model of the registry (default resnet50)",
    )
    parser.add_argument("--device", default="meta", choices=("meta", "cpu", "cuda"))
    parser.add_argument("--blocks", type=int, default=15, help="interleaved blocks per variant (default 15)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per block (default 1000)")
    args = parser.parse_args(argv)
    if args.blocks < 1 or args.calls < 1:
        raise UsageError("--blocks and --calls must be at least 1")
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")
    model = get_model_spec(args.model).build().to(args.device)
    for param in model.parameters():
        param.grad = torch.zeros_like(param)
    ways = variants(torch.optim.SGD(model.parameters(), lr=0.1))
    times: dict[str, list[float]] = {name: [] for name in ways}
    for fn in ways.values():  # warm-up: the first call sorts the kept groups
        us_per_call(fn, 10, cuda)
    for block in range(args.blocks):
        order = list(ways)[block % len(ways) :] + list(ways)[: block % len(ways)]  # rotating
        for name in order:
            times[name].append(us_per_call(ways[name], args.calls, cuda))
    grads = sum(1 for _ in model.parameters())
    print(
        f"# {args.model}, {grads} gradients on {args.device}: host µs per call, median [min, max] of {args.blocks} "
        f"blocks of {args.calls} calls"
    )
    for name, values in times.items():
        print(f"{name:<16} {statistics.median(values):8.1f}  [{min(values):.1f}, {max(values):.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
