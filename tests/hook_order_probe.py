"""Run train.py's training in this torchrun rank with a callback that records every Lightning hook the harness's
callbacks implement, and the gradients' norm at each optimizer step, and print rank 0's record as one JSON line
(tests/test_fabric_loop.py).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/hook_order_probe.py [train.py's options]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import lightning.pytorch as pl
import torch
import torch.distributed as dist

from harness.train.config import parse_config
from harness.train.trainer import run_training

# Every hook that a callback of harness/train implements.
RECORDED_HOOKS = (
    "setup",
    "on_fit_start",
    "on_train_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_end",
)


class HookRecorder(pl.Callback):
    """Each hook's name, with the trainer's global_step and the batch index where the hook is given one, and
    whether the model's gradients exist there (so where zero_grad falls against the hooks is seen too)."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.grad_norms: list[float] = []  # the gradients' norm each optimizer step is given (after the all_reduce)

    def _record(self, hook: str, trainer: Any, module: pl.LightningModule, batch_idx: int | None = None) -> None:
        has_grads = any(p.grad is not None for p in module.parameters())
        self.calls.append([hook, trainer.global_step, batch_idx, has_grads, trainer.world_size, trainer.global_rank])


def _recording(hook: str):
    def method(self: HookRecorder, trainer: Any, module: pl.LightningModule, *args: Any, **kwargs: Any) -> None:
        batch_idx = args[-1] if hook in ("on_train_batch_start", "on_train_batch_end") else None
        self._record(hook, trainer, module, batch_idx)
        if hook == "on_before_optimizer_step":
            grads = [p.grad.double().norm() for p in module.parameters() if p.grad is not None]
            self.grad_norms.append(float(torch.stack(grads).norm()))

    return method


for _hook in RECORDED_HOOKS:
    setattr(HookRecorder, _hook, _recording(_hook))


def main() -> None:
    cfg = parse_config(sys.argv[1:])
    recorder = HookRecorder()
    run_training(cfg, extra_callbacks=[recorder])
    if dist.get_rank() == 0:
        print("HOOKS " + json.dumps({"calls": recorder.calls, "grad_norms": recorder.grad_norms}), flush=True)


if __name__ == "__main__":
    main()
