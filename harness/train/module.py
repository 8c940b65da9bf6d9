"""The LightningModule that trains a registry model, and the data it reads (synthetic by default).

Synthetic batches are made once, on the device, from seed + global rank: the data loader then costs
nothing per step and never limits a communication benchmark, and ranks see different data.
"""

from __future__ import annotations

from collections.abc import Iterator

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset

from harness.train.config import TrainConfig
from harness.train.zero_grads import GradientZeroing
from models import ModelSpec

SGD_LR = 0.01
SGD_MOMENTUM = 0.9


class StepIndices(IterableDataset):
    """An endless stream of step numbers: the loader's item when the batch itself lives on the device."""

    def __iter__(self) -> Iterator[int]:
        step = 0
        while True:
            yield step
            step += 1


class CommBenchModule(pl.LightningModule):
    """Trains `spec`'s model with SGD on synthetic (or ImageFolder) batches."""

    def __init__(self, spec: ModelSpec, cfg: TrainConfig) -> None:
        super().__init__()
        self.spec = spec
        self.cfg = cfg
        torch.manual_seed(cfg.seed)  # same initial weights on every rank
        self.model = spec.build(image_size=cfg.image_size, seq_len=cfg.seq_len)
        if cfg.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self._synthetic: tuple[torch.Tensor, torch.Tensor] | None = None
        self._zero_gradients: GradientZeroing | None = None  # the Trainer's (optimizer_zero_grad)

    def on_fit_start(self) -> None:
        self.make_synthetic(self.global_rank)

    def make_synthetic(self, rank: int) -> None:
        """Make this rank's synthetic batch on the module's device, which every step then trains on (nothing with
        --data-dir: the loader's batches are trained on)."""
        if self.cfg.data_dir is not None:
            return
        inputs, targets = self.spec.make_batch(
            self.cfg.batch_size,
            self.device,
            self.cfg.seed + rank,
            image_size=self.cfg.image_size,
            seq_len=self.cfg.seq_len,
        )
        if inputs.is_floating_point():  # images in the weights' dtype: bf16-true and 16-true convert the model
            inputs = inputs.to(next(self.model.parameters()).dtype)
        if self.cfg.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        self._synthetic = (inputs, targets)

    def forward(self, batch: object) -> torch.Tensor:
        """The loss of one batch: the synthetic one if there is one, else `batch` from the data loader. Fabric's
        loop calls it through DDP; the Trainer calls it from training_step."""
        data = self._synthetic if self._synthetic is not None else batch
        if self.cfg.channels_last and self._synthetic is None:
            data = (data[0].contiguous(memory_format=torch.channels_last), data[1])
        return self.spec.loss(self.model, data)

    def training_step(self, batch: object, batch_idx: int) -> torch.Tensor:
        return self.forward(batch)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """The Trainer's zeroing, as Fabric's loop does it (harness/train/zero_grads.py)."""
        if self._zero_gradients is None or self._zero_gradients.optimizer is not optimizer:
            self._zero_gradients = GradientZeroing(optimizer, in_place=self.cfg.gradient_as_bucket_view)
        self._zero_gradients()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=SGD_LR, momentum=SGD_MOMENTUM)


def make_dataloader(cfg: TrainConfig) -> DataLoader:
    """Step indices for synthetic data, or an ImageFolder (Lightning adds the distributed sampler)."""
    if cfg.data_dir is None:
        return DataLoader(StepIndices(), batch_size=None)
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(cfg.image_size),
            transforms.ToTensor(),
            transforms.Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
        ]
    )
    dataset = datasets.ImageFolder(cfg.data_dir, transform=transform)
    return DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=min(4, max(1, (torch.get_num_threads() or 1) // 2)),
        pin_memory=cfg.use_gpu,
        persistent_workers=True,
    )
