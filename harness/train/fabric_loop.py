"""The training loop on Lightning Fabric: DDP, precision, devices and the process group as Lightning sets them up,
and a step loop of a dozen lines in place of the Trainer's.

Why: on a host-bound step every millisecond of Python in the loop is step time. On the H100, resnet50 bf16 at batch
32 ran 0.872 of a hand-written DDP loop's speed under the Trainer with nothing of the harness attached
(docs/BENCHMARKS.md, issue 11); a cProfile of the Trainer's loop found its cost spread over dozens of property
reads, hook dispatches and the data fetcher, with nothing to switch off.

The harness's callbacks are Lightning callbacks. This loop calls the hooks they use in the Trainer's order, and
passes itself as their `trainer`, with the attributes they read (`global_step`, `max_steps`, `global_rank`,
`world_size`, `is_global_zero`, `logger`, and `strategy.model`, the DDP module, with `strategy.root_device`), so the
same callbacks run under either loop:

    setup, on_fit_start, on_train_start,
    per batch: on_train_batch_start, [forward], on_before_backward, [backward], on_after_backward,
               after the step's last micro-batch: on_before_optimizer_step, [step, zero_grad], global_step + 1;
               on_train_batch_end
    on_train_end; on an exception, on_exception, then it is raised again.

The loss of each micro-batch is divided by their number before backward, as the Trainer does, so accumulated
gradients are the mean. The logger is finalized at the end, "success" or "failed", as the Trainer does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric import Fabric
from lightning.pytorch.loggers import Logger
from torch.utils.data import DataLoader

from harness.train.config import TrainConfig
from harness.train.ddp_strategy import SameStreamFabricDDPStrategy
from harness.train.module import CommBenchModule
from harness.train.zero_grads import GradientZeroing


class FabricLoop:
    """Trains a CommBenchModule with DDP under Lightning Fabric for cfg.max_steps optimizer steps, calling
    `callbacks`' hooks as the Trainer would; `fit` has the Trainer's signature."""

    def __init__(
        self,
        cfg: TrainConfig,
        strategy: SameStreamFabricDDPStrategy,
        callbacks: list[pl.Callback],
        logger: Logger | None,
    ) -> None:
        self.strategy = strategy  # the callbacks read the DDP module from it, as from the Trainer's strategy
        self.fabric = Fabric(
            accelerator=cfg.accelerator,
            devices=cfg.devices,
            num_nodes=cfg.num_nodes,
            strategy=self.strategy,
            precision=cfg.precision,
        )
        self.cfg = cfg
        self.callbacks = callbacks
        self.logger = logger
        self.max_steps = cfg.max_steps
        self.global_step = 0  # optimizer steps taken, as the Trainer counts them

    @property
    def global_rank(self) -> int:
        return self.fabric.global_rank

    @property
    def world_size(self) -> int:
        return self.fabric.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.fabric.is_global_zero

    def _call(self, hook: str, module: CommBenchModule, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, module, *args)

    def fit(self, module: CommBenchModule, loader: DataLoader) -> None:
        """Train `module` on `loader`'s batches (the step indices of harness.train.module, for synthetic data)."""
        try:
            self._fit(module, loader)
        except BaseException as err:
            self._call("on_exception", module, err)
            if self.logger is not None:
                # The events' writer may be what failed (a full disk): the timing callback has said so, and a
                # second error here must not hide the first.
                with contextlib.suppress(OSError):
                    self.logger.finalize("failed")
            raise

    def _fit(self, module: CommBenchModule, loader: DataLoader) -> None:
        fabric = self.fabric
        fabric.launch()  # the process group under torchrun and SLURM (train.py's own ranks have it already)
        torch.backends.cudnn.benchmark = self.cfg.use_gpu  # as the Trainer's benchmark=True
        self._call("setup", module, "fit")
        model, optimizer = fabric.setup(module, module.configure_optimizers())
        zero_gradients = GradientZeroing(optimizer, in_place=self.cfg.gradient_as_bucket_view)
        module.make_synthetic(self.global_rank)
        if self.cfg.data_dir is not None:
            loader = fabric.setup_dataloaders(loader)  # a distributed sampler, and batches moved to the device
        self._call("on_fit_start", module)
        self._call("on_train_start", module)
        batches = _endless(loader)
        micro_batches = self.cfg.accumulate_grad_batches
        batch_idx = 0
        while self.global_step < self.max_steps:
            for micro in range(micro_batches):
                batch = next(batches)
                self._call("on_train_batch_start", module, batch, batch_idx)
                last = micro == micro_batches - 1
                # Gradient accumulation: all_reduce once, in the last micro-batch. Fabric's context is entered only to
                # skip the sync; with it disabled it is a null context reached through a dozen calls, every step.
                with fabric.no_backward_sync(model) if not last else contextlib.nullcontext():
                    loss = model(batch)
                    if micro_batches > 1:  # the mean over the micro-batches, as the Trainer normalizes the loss
                        loss = loss / micro_batches
                    self._call("on_before_backward", module, loss)
                    fabric.backward(loss)
                self._call("on_after_backward", module)
                if last:
                    self._call("on_before_optimizer_step", module, optimizer)
                    optimizer.step()
                    zero_gradients()  # bucket views stay so
                    self.global_step += 1
                self._call("on_train_batch_end", module, loss, batch, batch_idx)
                batch_idx += 1
        self._call("on_train_end", module)
        if self.logger is not None:  # inside the try, as the Trainer's teardown: a failure here is the run's
            self.logger.finalize("success")


def _endless(loader: DataLoader) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (Fabric's loader sets the sampler's epoch on each pass)."""
    while True:
        yield from loader
