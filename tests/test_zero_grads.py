"""harness/train/zero_grads.py, the zeroing train.py runs between steps. With bucket views the gradients must stay
the same tensors and be zero before the next backward, whatever replaced them since the last step: DDP replaces
the views when it rebuilds its buckets, and the zeroing keeps its groups from one step to the next, so a stale
group would leave a new gradient unzeroed and the next step would add to it. torch.profiler is the witness for how
the zeroing runs: one multi-tensor call a device and dtype, no kernel a gradient."""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import pytest
import torch

from harness.train.zero_grads import GradientZeroing


def _model_with_grads() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Two float32 layers and a float64 one, each gradient filled with ones."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2), torch.nn.Linear(2, 2).double())
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _top_level_ops(fn) -> Counter[str]:
    """The operators `fn` calls itself, by name (on the CPU a multi-tensor call runs one zero_ a tensor inside)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(event.name for event in prof.events() if event.cpu_parent is None)


def test_in_place_zeroing_keeps_each_gradient_and_runs_one_multi_tensor_call_per_dtype() -> None:
    model, optimizer = _model_with_grads()
    grads = [param.grad for param in model.parameters()]
    zero = GradientZeroing(optimizer, in_place=True)
    for step in range(3):  # the first call sorts the groups, the later ones reuse them
        for grad in grads:
            grad.fill_(step + 1.0)
        ops = _top_level_ops(zero)
        assert [param.grad is grad for param, grad in zip(model.parameters(), grads, strict=True)] == [True] * 6
        assert all(not grad.any() for grad in grads), f"step {step}: a gradient was not zeroed"
        assert ops["aten::_foreach_zero_"] == 2, ops  # float32 and float64
        assert ops["aten::zero_"] == 0, ops  # not one call a gradient


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_each_device_and_dtype_is_one_multi_tensor_call_and_no_kernel_a_gradient() -> None:
    # As train.py's bf16-true model beside a float32 one on the GPU, and a float32 layer left on the CPU: three groups.
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8).cuda().bfloat16(), torch.nn.Linear(8, 8).cuda(), torch.nn.Linear(8, 8).cuda()
    )
    cpu_layer = torch.nn.Linear(8, 8)
    params = [*model.parameters(), *cpu_layer.parameters()]
    for param in params:
        param.grad = torch.ones_like(param)
    grads = [param.grad for param in params]
    zero = GradientZeroing(torch.optim.SGD(params, lr=0.1), in_place=True)
    for step in range(3):
        for grad in grads:
            grad.fill_(step + 1.0)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as prof:
            zero()
            torch.cuda.synchronize()
        ops = Counter(event.name for event in prof.events() if event.cpu_parent is None)
        assert all(param.grad is grad for param, grad in zip(params, grads, strict=True))
        assert all(not grad.any() for grad in grads), f"step {step}: a gradient was not zeroed"
        assert ops["aten::_foreach_zero_"] == 3, ops  # cuda bf16, cuda float32, cpu float32
        assert ops["aten::zero_"] == 0, ops
        # The GPU's 6 gradients in 2 groups: a few multi-tensor kernels, not one a gradient.
        launches = [event.name for event in prof.events() if "LaunchKernel" in event.name or "Memset" in event.name]
        assert 1 <= len(launches) <= 2, [event.name for event in prof.events()]


def test_a_gradient_replaced_between_steps_is_zeroed_too() -> None:
    # As DDP's bucket rebuild after the first step: each parameter's gradient becomes a new tensor.
    model, optimizer = _model_with_grads()
    zero = GradientZeroing(optimizer, in_place=True)
    zero()
    params = list(model.parameters())
    params[1].grad = torch.full_like(params[1], 5.0)
    params[4].grad = torch.full_like(params[4], 7.0)
    for grad in (params[0].grad, params[5].grad):
        grad.fill_(3.0)
    zero()
    assert [float(param.grad.abs().sum()) for param in params] == [0.0] * 6
    params[1].grad.fill_(2.0)  # the new gradient is kept from here on
    zero()
    assert float(params[1].grad.abs().sum()) == 0.0


def test_gradients_that_appear_later_or_in_a_new_param_group_are_zeroed() -> None:
    model, optimizer = _model_with_grads()
    params = list(model.parameters())
    params[2].grad = None  # no gradient yet (a layer a step did not reach)
    zero = GradientZeroing(optimizer, in_place=True)
    zero()
    assert params[2].grad is None
    params[2].grad = torch.ones_like(params[2])
    extra = torch.nn.Parameter(torch.zeros(3))
    optimizer.add_param_group({"params": [extra]})
    extra.grad = torch.ones(3)
    zero()
    assert float(params[2].grad.abs().sum()) == 0.0
    assert float(extra.grad.abs().sum()) == 0.0


def test_a_gradient_with_history_is_cut_from_it() -> None:
    weight = torch.nn.Parameter(torch.ones(3))
    source = torch.ones(3, requires_grad=True)
    weight.grad = source * 2  # as backward(create_graph=True) leaves it
    GradientZeroing(torch.optim.SGD([weight], lr=0.1), in_place=True)()
    assert weight.grad.grad_fn is None and not weight.grad.any()


def test_a_sparse_gradient_accumulated_in_place_is_zeroed_every_step() -> None:
    # A sparse embedding's backward adds into the same gradient tensor: the identity check alone would pass it by.
    embedding = torch.nn.Embedding(6, 2, sparse=True)
    dense = torch.nn.Linear(2, 1)
    zero = GradientZeroing(torch.optim.SGD([*embedding.parameters(), *dense.parameters()], lr=0.1), in_place=True)
    sparse_grad = None
    for step in range(3):
        dense(embedding(torch.tensor([step, 5]))).sum().backward()
        sparse_grad = sparse_grad if sparse_grad is not None else embedding.weight.grad
        assert embedding.weight.grad is sparse_grad, "the premise: backward accumulates into the same tensor"
        assert float(embedding.weight.grad.to_dense().abs().sum()) > 0
        zero()
        assert float(embedding.weight.grad.to_dense().abs().sum()) == 0.0, f"step {step}"
        assert all(not param.grad.any() for param in dense.parameters()), f"step {step}"


def _assert_zeroed_but_the_dropped(params: list[torch.nn.Parameter], dropped: int) -> None:
    """The parameter at `dropped` still has no gradient; every other one's is zero."""
    assert params[dropped].grad is None
    assert [float(p.grad.abs().sum()) for i, p in enumerate(params) if i != dropped] == [0.0] * (len(params) - 1)


def test_a_replaced_or_dropped_gradient_is_not_kept_alive_and_then_not_zeroed() -> None:
    # DDP's bucket rebuild drops the old buckets: the zeroing must not hold them (one more copy of the gradients).
    model, optimizer = _model_with_grads()
    zero = GradientZeroing(optimizer, in_place=True)
    zero()
    params = list(model.parameters())
    old = weakref.ref(params[0].grad)
    params[0].grad = torch.ones_like(params[0])
    params[3].grad = None  # dropped, and nothing else holds it
    gc.collect()
    assert old() is None, "the zeroing kept a replaced gradient alive"
    zero()  # the dropped one is not picked (a None in a multi-tensor call would raise)
    _assert_zeroed_but_the_dropped(params, dropped=3)


def test_a_gradient_dropped_with_nothing_else_changed_is_left_out() -> None:
    # Freed, its weak reference reads None, as a parameter without a gradient does: the groups must not keep it.
    model, optimizer = _model_with_grads()
    zero = GradientZeroing(optimizer, in_place=True)
    zero()
    params = list(model.parameters())
    params[3].grad = None
    for index in (0, 5):
        params[index].grad.fill_(2.0)
    zero()  # a None in a multi-tensor call would raise
    _assert_zeroed_but_the_dropped(params, dropped=3)


def test_a_parameter_added_to_an_existing_group_is_zeroed() -> None:
    _model, optimizer = _model_with_grads()
    zero = GradientZeroing(optimizer, in_place=True)
    zero()
    extra = torch.nn.Parameter(torch.zeros(2))
    extra.grad = torch.ones(2)
    optimizer.param_groups[0]["params"].append(extra)
    zero()
    assert not extra.grad.any()


def test_without_bucket_views_the_gradients_are_set_to_none() -> None:
    model, optimizer = _model_with_grads()
    GradientZeroing(optimizer, in_place=False)()
    assert all(param.grad is None for param in model.parameters())


def test_each_way_bench_zero_grads_cost_times_zeroes_the_gradients_in_place(capsys) -> None:
    # The bench compares these ways' host cost: each must do the whole job, in place, or the comparison is void.
    from bench.zero_grads_cost import main, variants

    model, optimizer = _model_with_grads()
    grads = [param.grad for param in model.parameters()]
    for name, zero in variants(optimizer).items():
        for grad in grads:
            grad.fill_(1.0)
        zero()
        assert all(param.grad is grad for param, grad in zip(model.parameters(), grads, strict=True)), name
        assert all(not grad.any() for grad in grads), name
    assert main(["--model", "resnet_tiny", "--blocks", "2", "--calls", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["kept", "sorted", "foreach_only", "torch_zero_grad"]
    assert all(float(line.split()[1]) > 0 for line in lines[1:])


def _buckets_rebuilt_under_the_zeroing(rank: int, world_size: int) -> dict[str, int]:
    """Two steps of resnet_tiny under DDP with bucket views, zeroed as train.py zeroes them; how many of step 0's
    gradients DDP replaced by step 1's backward (its bucket rebuild), and how many of those were still alive."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from models import get_model_spec

    spec = get_model_spec("resnet_tiny")
    torch.manual_seed(0)
    ddp = DDP(spec.build(image_size=32), gradient_as_bucket_view=True, bucket_cap_mb=0.05)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    zero = GradientZeroing(optimizer, in_place=True)
    batch = spec.make_batch(2, torch.device("cpu"), rank, image_size=32)
    spec.loss(ddp, batch).backward()
    optimizer.step()
    zero()
    before = [weakref.ref(param.grad) for param in ddp.parameters()]
    spec.loss(ddp, batch).backward()  # the forward rebuilds DDP's buckets: new views
    gc.collect()
    replaced = sum(ref() is not param.grad for ref, param in zip(before, ddp.parameters(), strict=True))
    alive = sum(
        ref() is not None and ref() is not param.grad for ref, param in zip(before, ddp.parameters(), strict=True)
    )
    zero()
    return {"replaced": replaced, "alive": alive, "nonzero": sum(bool(p.grad.any()) for p in ddp.parameters())}


def test_ddps_bucket_rebuild_frees_the_old_views_with_the_zeroing_in_place(tmp_path) -> None:
    """On 2 real gloo ranks: DDP replaces the views when it rebuilds its buckets (the premise of sorting again), the
    zeroing keeps none of the old ones alive (they would be one more copy of the gradients at that step's peak), and
    it zeroes the new ones."""
    from tests.multiproc import run_workers

    for result in run_workers(_buckets_rebuilt_under_the_zeroing, 2, tmp_path):
        assert result["replaced"] > 0, result
        assert result["alive"] == 0, result
        assert result["nonzero"] == 0, result
