"""Zeroing the gradients between optimizer steps, as train.py does it.

With DDP's gradient_as_bucket_view (train.py's default) the gradients are views of DDP's buckets and must stay so:
set to None, the next backward would make new ones and DDP would copy each into its bucket and back out again,
the two copies a gradient the views are there to remove. They are zeroed in place instead. torch's
`Optimizer.zero_grad(set_to_none=False)` zeroes them one kernel a gradient unless the optimizer was built with
foreach=True (SGD's default is None): 161 CUDA launches a step for resnet50, as many as the copies it replaced
(docs/BENCHMARKS.md, 2026-12-07 07:04 UTC, torch.profiler's runtime calls). `torch._foreach_zero_` zeroes each
device's and dtype's gradients in a few multi-tensor kernels, as the optimizer itself does with foreach=True.
"""

from __future__ import annotations

from collections import defaultdict

import torch


def zero_gradients(optimizer: torch.optim.Optimizer, in_place: bool) -> None:
    """Zero `optimizer`'s gradients: in place, a multi-tensor kernel per device and dtype (`in_place`, for bucket
    views), or set to None as torch's default does."""
    if not in_place:
        optimizer.zero_grad(set_to_none=True)
        return
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = param.grad
            if grad is None:
                continue
            if grad.grad_fn is not None:  # as Optimizer.zero_grad: a gradient with history is cut from it first
                grad.detach_()
            if grad.is_sparse:
                grad.zero_()
            else:
                groups[(grad.device, grad.dtype)].append(grad)
    for grads in groups.values():
        torch._foreach_zero_(grads)
