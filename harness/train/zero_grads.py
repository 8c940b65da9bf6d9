"""Zeroing the gradients between optimizer steps, as train.py does it.

With DDP's gradient_as_bucket_view (train.py's default) the gradients are views of DDP's buckets and must stay so:
set to None, the next backward would make new ones and DDP would copy each into its bucket and back out again,
the two copies a gradient the views are there to remove. They are zeroed in place instead. torch's
`Optimizer.zero_grad(set_to_none=False)` zeroes them one kernel a gradient unless the optimizer was built with
foreach=True (SGD's default is None): 161 CUDA launches a step for resnet50, as many as the copies it replaced
(docs/BENCHMARKS.md, 2026-12-07 07:04 UTC, torch.profiler's runtime calls). `torch._foreach_zero_` zeroes each
device's and dtype's gradients in a few multi-tensor kernels, as the optimizer itself does with foreach=True.

Sorting the gradients by device and dtype is Python over every parameter, on the training loop's thread of a step
the host may bound (about 40 µs a step for resnet50 on the 2-core machine, docs/BENCHMARKS.md). The views are the
same tensors from one step to the next (DDP replaces them when it rebuilds its buckets, after the first step), so
the sorting is kept, as each group's positions in the parameter list, and done again only when a gradient is not
the tensor it was. The gradients themselves are held by weak references only: a strong one would keep the buckets
DDP dropped at its rebuild alive through the next step, one more copy of the gradients at that step's peak.
"""

from __future__ import annotations

import operator
import weakref
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch


def _no_gradient() -> None:
    """The weak reference kept for a parameter that had no gradient."""
    return None


def _picker(positions: list[int]) -> Callable[[list[torch.Tensor | None]], Sequence[torch.Tensor]]:
    """The gradients at `positions` of a step's list, picked in C."""
    if len(positions) == 1:
        only = positions[0]
        return lambda grads: (grads[only],)
    return operator.itemgetter(*positions)


class GradientZeroing:
    """Zeroes `optimizer`'s gradients between steps: in place, a multi-tensor kernel per device and dtype
    (`in_place`, for bucket views), or set to None as torch's default does. Call it once a step."""

    def __init__(self, optimizer: torch.optim.Optimizer, in_place: bool) -> None:
        self.optimizer = optimizer
        self.in_place = in_place
        self._params: list[torch.Tensor] = []
        self._params_read_from: tuple[tuple[int, int], ...] = ()  # each group's params list: (id, length)
        self._grad_refs: list[Callable[[], torch.Tensor | None]] = []  # the gradients the groups were sorted from
        self._stale = [True]  # set when one of them is freed (its weak reference's callback), or one is sparse
        self._pickers: list[Callable[[list[torch.Tensor | None]], Sequence[torch.Tensor]]] = []  # per device, dtype

    def __call__(self) -> None:
        if not self.in_place:
            self.optimizer.zero_grad(set_to_none=True)
            return
        read_from = tuple((id(group["params"]), len(group["params"])) for group in self.optimizer.param_groups)
        if read_from != self._params_read_from:  # a group added, or parameters added to one
            self._params_read_from = read_from
            self._params = [param for group in self.optimizer.param_groups for param in group["params"]]
            self._grad_refs = []
        grads = [param.grad for param in self._params]
        if (
            self._stale[0]
            or len(grads) != len(self._grad_refs)
            or not all(map(operator.is_, grads, [ref() for ref in self._grad_refs]))
        ):
            self._regroup(grads)
        for pick in self._pickers:
            torch._foreach_zero_(pick(grads))

    def _regroup(self, grads: list[torch.Tensor | None]) -> None:
        """Sort `grads` into the groups, zeroing here what a multi-tensor kernel cannot take (sparse ones)."""
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = defaultdict(list)
        sparse = False
        for position, grad in enumerate(grads):
            if grad is None:
                continue
            if grad.grad_fn is not None:  # as Optimizer.zero_grad: a gradient with history is cut from it first
                grad.detach_()
            if grad.is_sparse:
                grad.zero_()
                sparse = True
            else:
                groups[(grad.device, grad.dtype)].append(position)
        self._pickers = [_picker(positions) for positions in groups.values()]
        # A freed gradient would read as None, like a parameter without one: its callback marks the groups stale.
        # A sparse gradient is zeroed here only, so with one the groups stay stale and every call sorts again.
        stale = [sparse]

        def freed(_ref: weakref.ref, stale: list[bool] = stale) -> None:
            stale[0] = True

        self._stale = stale
        self._grad_refs = [_no_gradient if grad is None else weakref.ref(grad, freed) for grad in grads]
