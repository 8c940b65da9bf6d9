"""Lightning's TQDM progress bar, showing samples/s and the last resolved step's comm ms."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar

from harness.train.callback import CommTimingCallback


class CommProgressBar(TQDMProgressBar):
    """Adds the timing callback's latest plain-float figures; nothing here touches a GPU tensor."""

    def __init__(self, timing: CommTimingCallback) -> None:
        super().__init__()
        self.timing = timing

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.update(self.timing.progress_bar_metrics())
        return metrics
