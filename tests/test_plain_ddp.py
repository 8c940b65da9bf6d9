"""bench.plain_ddp, the hand-written loop train.py is measured against: each --comm-hook it offers (DDP's built-in
all_reduce, torch's Python allreduce_hook, torch's C++ ALLREDUCE hook) must train the same model, so that a pair's
difference is the hook's cost and nothing else. Checked on 2 real gloo ranks whose batches differ: a hook that
summed without dividing, or skipped a bucket, would leave other weights."""

from __future__ import annotations

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
    return weights


def test_every_comm_hook_trains_the_same_weights_as_ddps_builtin_path(tmp_path):
    ranks = run_workers(_weights_after_two_steps, 2, tmp_path)
    builtin = torch.tensor(ranks[0]["builtin"])
    for rank in ranks:
        assert set(rank) == {"builtin", "allreduce", "cpp_allreduce", "unreduced"}
        for hook in ("builtin", "allreduce", "cpp_allreduce"):
            torch.testing.assert_close(torch.tensor(rank[hook]), builtin, rtol=1e-5, atol=1e-6, msg=hook)
        # The tolerance has teeth: the ranks' batches differ, so a rank stepping on its own gradient lands elsewhere.
        assert (torch.tensor(rank["unreduced"]) - builtin).abs().max() > 1e-3
