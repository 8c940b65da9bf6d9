"""sleep_chain's backward timeline and DDP bucket layouts are the ones models/synthetic.py documents.

In process, no process group: one forward + backward with a post-accumulate-grad hook on every parameter,
and DDP's bucket assignment from harness.analysis.bucket_layout (checked against a real two-rank run's
rebuilt buckets by bench.known_answer's "layout as predicted" column and tests/test_advise_known_answer.py).
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.analysis.bucket_layout import model_bucket_layout
from models import get_model_spec, trainable_parameters
from models.synthetic import BACKWARD_SLEEP_S, CHAIN_BLOCKS

SLEEP_MS = BACKWARD_SLEEP_S * 1e3
# Above the sleep: one Linear's backward (gaps of 82–87 ms for an 80 ms sleep, one thread, here) and whatever
# another process on the machine takes. A gap beyond this would blur the bucket timeline.
GAP_SLACK_MS = 25.0
PASSES = 3  # the smallest of three passes per gap: another process on a 2-core machine only ever adds time


def _ready_times_ms(model: torch.nn.Module, batch) -> tuple[dict[str, float], float]:
    """Each parameter's gradient-ready time and the end of backward, in ms after backward starts."""
    stamps: dict[str, float] = {}
    handles = [
        p.register_post_accumulate_grad_hook(lambda _p, name=name: stamps.__setitem__(name, time.perf_counter()))
        for name, p in model.named_parameters()
    ]
    try:
        model.zero_grad(set_to_none=True)
        loss = get_model_spec("sleep_chain").loss(model, batch)
        start = time.perf_counter()
        loss.backward()
        end = time.perf_counter()
    finally:
        for handle in handles:
            handle.remove()
    return {name: (t - start) * 1e3 for name, t in stamps.items()}, (end - start) * 1e3


@pytest.fixture
def one_thread():
    """One intra-op thread, as each of two ranks on this 2-core machine gets from train.py: with two, every
    OpenMP region of the Linear backward waits for a thread the other cores' load may hold off (gaps of 70–90
    ms were seen on a loaded machine, where one thread gave 42–51)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_block_gradients_are_ready_one_sleep_apart_in_reverse_order(one_thread):
    spec = get_model_spec("sleep_chain")
    torch.manual_seed(0)
    model = spec.build()
    batch = spec.make_batch(4, "cpu", 0)
    _ready_times_ms(model, batch)  # the first backward also sets autograd and the allocator up: not timed
    passes = [_ready_times_ms(model, batch) for _ in range(PASSES)]

    for ready, end_ms in passes:
        # The ready order is the reverse of registration (bias before weight in each Linear): what DDP's
        # rebuild sees, and what bucket_layout assumes.
        assert sorted(ready, key=ready.get) == [name for name, _ in model.named_parameters()][::-1]
        assert ready["head.weight"] < SLEEP_MS  # the head has no sleep below it
        assert ready["inp.weight"] - ready["blocks.0.weight"] < GAP_SLACK_MS  # nor does the input layer
        assert end_ms - ready["inp.weight"] < 5.0  # backward ends with the input layer's gradient
    # Block k's weight gradient: (CHAIN_BLOCKS - k) sleeps after backward starts, one sleep after block k+1's.
    gaps = {
        k: [ready[f"blocks.{k}.weight"] - (ready[f"blocks.{k + 1}.weight"] if k + 1 < CHAIN_BLOCKS else 0.0)
            for ready, _ in passes]
        for k in range(CHAIN_BLOCKS)
    }  # fmt: skip
    for k, gap in gaps.items():
        assert min(gap) >= SLEEP_MS, (k, gap)  # a sleep is never shorter than asked
        assert min(gap) < SLEEP_MS + GAP_SLACK_MS, (k, gap)


MIB = 2**20
BLOCK_BYTES = (1024 * 1024 + 1024) * 4  # one block's weight and bias, fp32
# The layouts the docstring of models/synthetic.py gives: each bucket as (first, last parameter) in launch
# order, with its bytes. "head+7" is head.bias .. blocks.7.weight.
HEAD_BYTES = (1024 * 10 + 10) * 4
INP_BYTES = (3 * 1024 + 1024) * 4
ONE_BLOCK_EACH = [("head.bias", "blocks.7.weight", HEAD_BYTES + BLOCK_BYTES)] + [
    (f"blocks.{k}.bias", f"blocks.{k}.weight", BLOCK_BYTES) for k in range(6, -1, -1)
] + [("inp.bias", "inp.weight", INP_BYTES)]  # fmt: skip
ONE_BUCKET = [("head.bias", "inp.weight", HEAD_BYTES + 8 * BLOCK_BYTES + INP_BYTES)]
LAYOUTS = {
    1: ONE_BLOCK_EACH,
    2: ONE_BLOCK_EACH,
    5: [
        ("head.bias", "blocks.6.weight", HEAD_BYTES + 2 * BLOCK_BYTES),
        ("blocks.5.bias", "blocks.4.weight", 2 * BLOCK_BYTES),
        ("blocks.3.bias", "blocks.2.weight", 2 * BLOCK_BYTES),
        ("blocks.1.bias", "blocks.0.weight", 2 * BLOCK_BYTES),
        ("inp.bias", "inp.weight", INP_BYTES),
    ],
    10: [
        ("head.bias", "blocks.5.weight", HEAD_BYTES + 3 * BLOCK_BYTES),
        ("blocks.4.bias", "blocks.2.weight", 3 * BLOCK_BYTES),
        ("blocks.1.bias", "inp.weight", 2 * BLOCK_BYTES + INP_BYTES),
    ],
    25: [
        ("head.bias", "blocks.1.weight", HEAD_BYTES + 7 * BLOCK_BYTES),
        ("blocks.0.bias", "inp.weight", BLOCK_BYTES + INP_BYTES),
    ],
    None: [  # DDP's default: a 1 MiB first bucket, then 25 MiB
        ("head.bias", "blocks.7.weight", HEAD_BYTES + BLOCK_BYTES),
        ("blocks.6.bias", "blocks.0.weight", 7 * BLOCK_BYTES),
        ("inp.bias", "inp.weight", INP_BYTES),
    ],
    50: ONE_BUCKET,
    100: ONE_BUCKET,
    200: ONE_BUCKET,
}


@pytest.mark.parametrize("cap", list(LAYOUTS), ids=lambda cap: f"cap{cap or 'default'}")
def test_bucket_layout_per_cap_is_the_documented_one(cap):
    layout = [(b.first_param, b.last_param, b.numel * b.grad_itemsize) for b in model_bucket_layout("sleep_chain", cap)]
    assert layout == LAYOUTS[cap]


def test_sizes():
    model = get_model_spec("sleep_chain").build()
    assert BLOCK_BYTES == 4 * MIB + 4096  # 4 MiB + 4 KiB a block: over 1 and 2 MiB caps alike, under 5 MiB
    assert trainable_parameters(model) * 4 == HEAD_BYTES + 8 * BLOCK_BYTES + INP_BYTES
