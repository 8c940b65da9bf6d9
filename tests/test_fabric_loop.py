"""train.py's Fabric loop calls the harness's callbacks as Lightning's Trainer does (harness/train/fabric_loop.py).

Lightning's Trainer is the reference: real runs of 2 gloo ranks under torchrun, one per loop (and one of Fabric's
with DDP's gradient copies), started at once and shared by the tests, with gradient accumulation, record every hook
the harness's callbacks implement (tests/hook_order_probe.py). The sequences must be the same, hook by hook, with
the same global_step and batch index at each, and the same world; and each optimizer step must see the same
gradients.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.train_runs import REPO, stop, train_env

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
ARGS = ["--model", "resnet_tiny", "--image-size", "32", "--batch-size", "2", "--max-steps", "4"]
ARGS += ["--accumulate-grad-batches", "2", "--calibration-steps", "0", "--no-progress-bar"]


RUNS = {"fabric": ("fabric",), "trainer": ("trainer",), "copies": ("fabric", "--no-gradient-as-bucket-view")}


@pytest.fixture(scope="module")
def hook_runs(tmp_path_factory) -> dict[str, dict[str, list]]:
    """The three probe runs, started at once (torchrun --standalone gives each its own port)."""
    tmp = tmp_path_factory.mktemp("fabric_loop")
    env = {**train_env(), "PYTHONPATH": str(REPO)}
    procs = {}
    try:
        for name, (loop, *extra) in RUNS.items():
            cmd = [*TORCHRUN, str(REPO / "tests" / "hook_order_probe.py"), *ARGS, "--loop", loop, *extra]
            cmd += ["--logdir", str(tmp / name)]
            with open(tmp / f"{name}.out", "w") as out, open(tmp / f"{name}.err", "w") as err:
                procs[name] = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err)
        for proc in procs.values():
            proc.wait(timeout=300)
    finally:  # a run that hung or failed to start leaves none of the others behind
        for proc in procs.values():
            stop(proc, grace_s=10)  # SIGTERM first: torchrun passes it on to its ranks, which a SIGKILL would leave
    runs = {}
    for name, proc in procs.items():
        stdout, stderr = ((tmp / f"{name}.{kind}").read_text() for kind in ("out", "err"))
        assert proc.returncode == 0, f"{name}: {stderr[-3000:]}"
        line = next(line for line in stdout.splitlines() if line.startswith("HOOKS "))
        runs[name] = json.loads(line.removeprefix("HOOKS "))
    return runs


def test_fabric_loop_calls_the_hooks_as_the_trainer_does(hook_runs):
    fabric_run, trainer_run = hook_runs["fabric"], hook_runs["trainer"]
    fabric, trainer = fabric_run["calls"], trainer_run["calls"]
    # 4 optimizer steps of 2 micro-batches: 8 batches, each with its start, backward hooks and end.
    assert [call[0] for call in trainer].count("on_train_batch_start") == 8
    assert [call[0] for call in trainer].count("on_before_optimizer_step") == 4
    assert {tuple(call[4:]) for call in trainer} == {(2, 0)}, "rank 0 of a world of 2"
    # Hook, global_step and batch index alike; whether gradients exist differs only where zero_grad falls (the
    # Trainer zeroes them between forward and backward, Fabric's loop after the optimizer step): compared apart.
    assert [call[:3] for call in fabric] == [call[:3] for call in trainer]
    assert [call[4:] for call in fabric] == [call[4:] for call in trainer]
    # Every step's optimizer sees gradients in both, and the same ones: the same weights and data, the micro-batches'
    # losses averaged as the Trainer averages them (summed, they would be twice the Trainer's here).
    for calls in (fabric, trainer):
        assert all(call[3] for call in calls if call[0] == "on_before_optimizer_step")
    assert len(fabric_run["grad_norms"]) == len(trainer_run["grad_norms"]) == 4
    assert fabric_run["grad_norms"] == pytest.approx(trainer_run["grad_norms"], rel=1e-4)


def test_bucket_views_step_on_the_gradients_that_ddps_copies_give(hook_runs):
    """train.py's default keeps the gradients as DDP's bucket views, zeroed in place, across accumulated
    micro-batches (DDP's no_sync) too: every optimizer step must see the gradients that DDP's own copies give."""
    views, copies = hook_runs["fabric"], hook_runs["copies"]
    assert len(views["grad_norms"]) == len(copies["grad_norms"]) == 4
    assert views["grad_norms"] == pytest.approx(copies["grad_norms"], rel=1e-4)
    assert len(set(views["grad_norms"])) == 4  # the steps differ, so a stale or zeroed gradient would show
