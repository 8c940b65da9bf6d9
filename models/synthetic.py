"""sleep_chain: a model whose backward timeline is set by sleeps, so the best bucket cap can be worked out by hand.

    python train.py --model sleep_chain --bucket-cap-mb 1 --comm-hook fp16
    python -m bench.known_answer          # the settings below, on two namespace hosts joined by a shaped link

The image is averaged to 3 numbers, then `inp` Linear(3, 1024), then 8 blocks, each a Linear(1024, 1024)
(blocks.k.weight and blocks.k.bias: 4 MiB + 4 KiB of fp32) followed by an autograd Function that is the
identity in forward and sleeps BACKWARD_SLEEP_S (80 ms) in backward, then `head` Linear(1024, 10). Forward is
a few small matrix products; backward is eight sleeps and eight small ones. time.sleep gives up the GIL and
the core, so the ranks' compute does not compete with gloo for the CPU: the link is the one contended resource,
and the timeline is known in advance.

Backward timeline (S = 80 ms, t = 0 when backward starts). Backward runs the forward in reverse: head, the
sleep after block 7, block 7's Linear, the sleep after block 6, ... block 0's Linear, inp. So:
- head's gradients are ready at t ≈ 0 (no sleep below them);
- block k's weight and bias gradients at t ≈ (8 − k)·S: block 7 at S, block 0 at 8·S = 640 ms;
- inp's right after block 0's, and backward ends there (≈ 8·S).
Each block's gradient is ready one sleep and one Linear backward after the previous block's: gaps of 82–87 ms
measured in process with one thread (what train.py gives each of two ranks on a 2-core machine), and backward
671–683 ms (tests/test_sleep_chain.py checks 80 to 105 ms). Under DDP each gap also holds the copy into the
bucket and the hook's launch: train.py's compute-only forward + backward measured 681–704 ms. Within a Linear
the bias is ready before the weight, so the ready order is exactly the reverse of registration, which
harness.analysis.bucket_layout assumes.

Bucket layouts. DDP takes the gradients in ready order and closes a bucket once it reaches its limit (it can
exceed the limit by one tensor). Sizes: a block 4,198,400 B; head 41,000 B; inp 16,384 B; all 33,644,584 B.
In launch order, "7" meaning blocks.7.bias and blocks.7.weight, each bucket ready when its last gradient is:
- 1 and 2 MiB: [head 7] [6] [5] [4] [3] [2] [1] [0] [inp], ready at S, 2S, ..., 8S, 8S. One block's weight
  (4 MiB) exceeds either cap on its own, so each bucket closes at the first weight it takes: the same layout.
- 5 MiB: [head 7 6] [5 4] [3 2] [1 0] [inp], ready at 2S, 4S, 6S, 8S, 8S.
- 10 MiB: [head 7 6 5] [4 3 2] [1 0 inp], ready at 3S, 6S, 8S.
- 25 MiB: [head 7 6 5 4 3 2 1] [0 inp], ready at 7S, 8S.
- DDP's default (25 MiB with a 1 MiB first bucket): [head 7] [6 5 4 3 2 1 0] [inp], ready at S, 8S, 8S.
- 50, 100 and 200 MiB: [everything], ready at 8S.
Real two-rank runs' rebuilt buckets (summary.json ddp_logging.rebuilt_bucket_sizes) are these at every cap run
(1, 2, 5, 10, 25, 100 MiB and the default; bench.known_answer's "layout as predicted" column).

The worked answer. Two hosts joined by a veth pair shaped with tbf to R = 800 Mbit/s each way (tests/netns.py),
one gloo rank each. At 2 ranks gloo's ring all_reduce sends and receives each rank's whole buffer once (half
in the reduce-scatter, half in the all-gather), plus about 5 % of headers: T, one block's all_reduce, is
4.19 MB × 8 × 1.05 / 800 Mbit/s ≈ 44 ms. Measured by `harness.raw_sweep` across the two hosts: 4 MiB in 44.3
and 46.0 ms, 32 MiB in 355–357 ms (44.4 ms a block), 91–95 % of the link. So T ≈ 44 ms, about 0.55·S: a
block's all_reduce ends before the next block's gradient is ready, with 35 ms to spare. Collectives run one
after another, each starting when its bucket is ready and the one before it is done; exposed = end of the last
collective − end of backward (8S):
- 1 or 2 MiB: every block's collective ends before the next block is ready; block 0's starts at 8S. Exposed
  ≈ T ≈ 44 ms (inp's 16 KiB adds about a millisecond).
- 5 MiB: buckets of 2T, 2S apart; the last holds blocks 1 and 0: ≈ 2T ≈ 89 ms.
- 10 MiB: buckets of 3T, 3S apart (6S + 3T ends before 8S while T < 2S/3); the last holds two blocks: ≈ 2T.
- 25 MiB: 7 blocks ready at 7S end at 7S + 7T; block 0 follows: 7S + 8T − 8S = 8T − S ≈ 275 ms.
- default: [head 7] is done long before 8S; seven blocks then start at 8S: ≈ 7T ≈ 310 ms.
- 50 MiB and up: all eight blocks start at 8S: ≈ 8T ≈ 355 ms.
- fp16 or bf16: half the bytes, so T/2 in place of T (1 or 2 MiB: ≈ 22 ms; 5 MiB: ≈ T), plus the hook's codec,
  measured 1.2–1.4 ms a 4 MiB bucket: the cast before each launch runs on the autograd thread and delays
  backward, and the last bucket's copy back adds to the tail (in-run exposed measured 27–33 ms, not 22).
Ranking: 1 or 2 MiB with fp16 or bf16 (≈ T/2) is best; then 1 or 2 MiB fp32 and 5 MiB fp16 (≈ T); then 5 and
10 MiB fp32 (2T); 25 MiB (8T − S); the default (7T); 50 MiB and up (8T), worst. The step is about 695 ms
(the compute-only forward + backward and the optimizer) plus the exposed time. docs/BENCHMARKS.md
("Issue 13") has the measured steps, which rank the same; tests/test_advise_known_answer.py asks
`harness.advise` for this answer from one run at the default cap.
"""

from __future__ import annotations

import time

import torch
from torch import nn

CHAIN_BLOCKS = 8
CHAIN_WIDTH = 1024  # 1024 × 1024 fp32: 4 MiB a block, over the 1 and 2 MiB caps alike, under 5 MiB
# Long enough that one block's all_reduce on the 800 Mbit/s link (about 44 ms) hides behind the next sleep with
# room to spare, yet that halving it (fp16) saves far more than the hook's casts cost.
BACKWARD_SLEEP_S = 0.080
CHAIN_CLASSES = 10


class SleepInBackward(torch.autograd.Function):
    """Identity in forward; in backward, `time.sleep(seconds)` before passing the gradient on: wall time that
    leaves the cores free, as device compute leaves the host free (two ranks of real compute on a 2-core
    machine starve gloo's threads, which then measures CPU contention rather than overlap)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, seconds: float) -> torch.Tensor:
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(ctx.seconds)
        return grad, None


def sleep_in_backward(x: torch.Tensor, seconds: float) -> torch.Tensor:
    """`x`, with `seconds` of sleep where backward passes through it."""
    return SleepInBackward.apply(x, seconds)


class SleepChain(nn.Module):
    """inp, then `blocks` × (Linear, sleep in backward), then head; the module docstring gives its timeline."""

    def __init__(self, blocks: int = CHAIN_BLOCKS, width: int = CHAIN_WIDTH, num_classes: int = CHAIN_CLASSES) -> None:
        super().__init__()
        self.inp = nn.Linear(3, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.head = nn.Linear(width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.inp(images.mean(dim=(2, 3)))
        for block in self.blocks:
            # The sleep after the Linear runs before the Linear's own backward: block k's gradient is ready one
            # sleep after block k+1's, and the last block's one sleep after the head's.
            x = sleep_in_backward(block(x), BACKWARD_SLEEP_S)
        return self.head(x)


def build_sleep_chain(image_size: int) -> nn.Module:
    """The registry's builder: the image is averaged away, so its side changes nothing."""
    del image_size
    return SleepChain()
