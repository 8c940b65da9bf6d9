"""Lightning's TQDM progress bar, showing the last measured step's samples/s, step ms and comm ms, refreshed sparingly.

Lightning's bar redraws itself twice on every batch (the count, then the postfix), on the training loop's
thread: a cost paid every step. This one redraws at most every REFRESH_S seconds (and every `refresh_rate`
batches at most, as Lightning's), and once more at the end with the final count. "phase" in the bar says
when the run is in warm-up or calibrating, whose figures are not shown (calibration skips communication).
Its main-thread CPU time is added to the timing callback's (`cpu_s["progress_bar"]`), so the run's summary
counts it with the harness's cost. Lightning's version number (v_num) is left out: the run's directory says it.
The bar closes before the timing callback prints the end-of-run table (trainer.py puts it first), so it is not
drawn again below the table.
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar

from harness.train.callback import CommTimingCallback

REFRESH_S = 0.5  # a person reads no faster; a 30 ms GPU step would otherwise redraw 33 times a second


class CommProgressBar(TQDMProgressBar):
    """Adds the timing callback's latest plain-float figures; nothing here touches a GPU tensor."""

    def __init__(self, timing: CommTimingCallback, refresh_rate: int = 1, refresh_s: float = REFRESH_S) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.timing = timing
        self.refresh_s = refresh_s
        self._last_refresh = float("-inf")
        self._batches = 0

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        metrics.update(self.timing.progress_bar_metrics())
        return metrics

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        cpu = time.thread_time()
        self._batches = batch_idx + 1
        bar = self.train_progress_bar
        now = time.monotonic()
        if (
            bar is not None
            and not bar.disable
            and self._batches % self.refresh_rate == 0
            and now - self._last_refresh >= self.refresh_s
        ):
            self._last_refresh = now
            self._redraw(trainer, pl_module)
        self.timing.cpu_s["progress_bar"] += time.thread_time() - cpu

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bar = self.train_progress_bar
        if bar is not None and not bar.disable:
            self._redraw(trainer, pl_module)
        super().on_train_end(trainer, pl_module)

    def _redraw(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The count and the figures in one redraw (Lightning's bar redraws for each)."""
        bar = self.train_progress_bar
        bar.n = self._batches
        bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
        bar.refresh()
