"""bench.plain_ddp, the hand-written loop train.py is measured against: each --comm-hook it offers (DDP's built-in
all_reduce, torch's Python allreduce_hook, torch's C++ ALLREDUCE hook) must train the same model, so that a pair's
difference is the hook's cost and nothing else. Checked on 2 real gloo ranks whose batches differ: a hook that
summed without dividing, or skipped a bucket, would leave other weights. With --gradient-as-bucket-view the
gradients are the buckets' views: torch.profiler must see no copy into or out of a bucket in the step."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook

from tests.multiproc import run_workers


def _weights_after_two_steps(rank: int, world_size: int) -> dict[str, list[float]]:
    from bench.plain_ddp import COMM_HOOKS, build_loop

    weights = {}
    for hook in (*COMM_HOOKS, "unreduced"):
        loop = build_loop("resnet_tiny", 2, 32, torch.device("cpu"), "builtin" if hook == "unreduced" else hook)
        if hook == "unreduced":  # each rank steps on its own gradient: what the check must tell apart
            loop.ddp.register_comm_hook(None, noop_hook)
        for _ in range(2):
            loop.step()
        flat = torch.cat([p.detach().reshape(-1) for p in loop.ddp.parameters()])
        weights[hook] = flat.tolist()
    for hook in ("builtin", "cpp_allreduce"):
        for bucket_view in (False, True):
            name = f"{hook}_bucket_view" if bucket_view else f"{hook}_profiled"
            loop = build_loop("resnet_tiny", 2, 32, torch.device("cpu"), hook, gradient_as_bucket_view=bucket_view)
            loop.step()
            with torch.profiler.profile() as prof:  # the second step: the first copies the fresh gradients in
                loop.step()
            weights[name] = torch.cat([p.detach().reshape(-1) for p in loop.ddp.parameters()]).tolist()
            weights[f"{name}_ops"] = Counter(event.name for event in prof.events())
    return weights


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return run_workers(_weights_after_two_steps, 2, tmp_path_factory.mktemp("plain_ddp"))


def test_every_comm_hook_trains_the_same_weights_as_ddps_builtin_path(ranks):
    builtin = torch.tensor(ranks[0]["builtin"])
    for rank in ranks:
        assert {"builtin", "allreduce", "cpp_allreduce", "unreduced"} <= set(rank)
        for hook in ("builtin", "allreduce", "cpp_allreduce", "builtin_bucket_view", "cpp_allreduce_bucket_view"):
            torch.testing.assert_close(torch.tensor(rank[hook]), builtin, rtol=1e-5, atol=1e-6, msg=hook)
        # The tolerance has teeth: the ranks' batches differ, so a rank stepping on its own gradient lands elsewhere.
        assert (torch.tensor(rank["unreduced"]) - builtin).abs().max() > 1e-3


def test_bucket_views_take_the_gradient_copies_out_of_the_step(ranks):
    """DDP's reducer names its copies (torch's reducer.cpp): `reducer::copy_` (into a bucket, with a comm hook),
    `reducer::mul_out` (into a bucket, scaled, without one) and `copy_bucket_to_grad` (back out after the
    all_reduce). The plain loop's default runs one of each per gradient; with bucket views the comm-hook path
    runs none, and the built-in path divides each gradient in place instead (its `div_`). What the views cost
    instead is counted too: autograd adds each new gradient into its zeroed view, and the zeroing itself."""
    copies = ("reducer::copy_", "reducer::mul_out", "reducer::copy_bucket_to_grad")

    def reducer_copies(ops: dict[str, int]) -> int:
        return sum(n for name, n in ops.items() if name.endswith(copies))

    for rank in ranks:
        for hook in ("builtin", "cpp_allreduce"):
            assert reducer_copies(rank[f"{hook}_profiled_ops"]) == 2 * 38, hook  # in and out, each gradient
            assert reducer_copies(rank[f"{hook}_bucket_view_ops"]) == 0, hook
        assert rank["builtin_bucket_view_ops"]["aten::div_"] >= 38  # resnet_tiny's 38 gradients, each in place
        for hook in ("builtin", "cpp_allreduce"):
            # Zeroed as train.py zeroes them: one multi-tensor call (on a GPU a few kernels, not one a gradient)...
            assert rank[f"{hook}_bucket_view_ops"]["aten::_foreach_zero_"] == 1, hook
            # ...and backward then adds into each zeroed gradient where it handed over a new one: what the views cost.
            added = rank[f"{hook}_bucket_view_ops"]["aten::add_"] - rank[f"{hook}_profiled_ops"]["aten::add_"]
            assert added == 38, hook
