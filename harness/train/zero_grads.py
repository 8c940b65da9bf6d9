"""Zeroing the gradients between optimizer steps, as train.py does it.

With DDP's gradient_as_bucket_view (train.py's default) the gradients are views of DDP's buckets and must stay so:
set to None, the next backward would make new ones and DDP would copy each into its bucket and back out again,
the two copies a gradient the views are there to remove. They are zeroed in place instead. torch's
`Optimizer.zero_grad(set_to_none=False)` zeroes them one kernel a gradient unless the optimizer was built with
foreach=True (SGD's default is None): 161 CUDA launches a step for resnet50, as many as the copies it replaced
(docs/BENCHMARKS.md, 2026-12-07 07:04 UTC, torch.profiler's runtime calls). `torch._foreach_zero_` zeroes each
device's and dtype's gradients in a few multi-tensor kernels, as the optimizer itself does with foreach=True.

Sorting the gradients by device and dtype is Python over every parameter, on the training loop's thread of a step
the host may bound: about 60 µs a step for resnet50 on the 2-core machine. The views are the same tensors from one
step to the next (DDP replaces them only when it rebuilds its buckets, after the first step), so the groups are
kept and rebuilt only when a gradient is not the tensor it was; telling that is one attribute read a parameter.
"""

from __future__ import annotations

import operator
from collections import defaultdict

import torch


class GradientZeroing:
    """Zeroes `optimizer`'s gradients between steps: in place, a multi-tensor kernel per device and dtype
    (`in_place`, for bucket views), or set to None as torch's default does. Call it once a step."""

    def __init__(self, optimizer: torch.optim.Optimizer, in_place: bool) -> None:
        self.optimizer = optimizer
        self.in_place = in_place
        self._params: list[torch.Tensor] = []
        self._param_groups = 0  # how many param groups _params was read from (add_param_group adds one)
        self._grads: list[torch.Tensor | None] = []  # the gradients the groups were sorted from
        self._groups: list[list[torch.Tensor]] = []  # per device and dtype, for torch._foreach_zero_

    def __call__(self) -> None:
        if not self.in_place:
            self.optimizer.zero_grad(set_to_none=True)
            return
        if len(self.optimizer.param_groups) != self._param_groups:
            self._param_groups = len(self.optimizer.param_groups)
            self._params = [param for group in self.optimizer.param_groups for param in group["params"]]
            self._grads = []
        grads = [param.grad for param in self._params]
        if len(grads) != len(self._grads) or not all(map(operator.is_, grads, self._grads)):
            self._regroup(grads)
        for group in self._groups:
            torch._foreach_zero_(group)

    def _regroup(self, grads: list[torch.Tensor | None]) -> None:
        """Sort `grads` into the groups, zeroing here what a multi-tensor kernel cannot take (sparse ones)."""
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        for grad in grads:
            if grad is None:
                continue
            if grad.grad_fn is not None:  # as Optimizer.zero_grad: a gradient with history is cut from it first
                grad.detach_()
            if grad.is_sparse:
                grad.zero_()
            else:
                groups[(grad.device, grad.dtype)].append(grad)
        # A sparse gradient is zeroed once here; kept out of _grads, a later step sorts again and zeroes it again.
        self._grads = grads if not any(grad is not None and grad.is_sparse for grad in grads) else []
        self._groups = list(groups.values())
