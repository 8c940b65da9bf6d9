"""The progress bar: the step count, and the last measured step's samples/s, step ms and comm ms, redrawn sparingly.

One bar for both training loops (harness.train.trainer: Lightning's Trainer or Fabric), drawn with tqdm on rank 0
and driven by the callback hooks both loops call. Lightning's own bar redraws itself twice on every batch (the
count, then the postfix), on the training loop's thread: a cost paid every step. This one redraws at most every
REFRESH_S seconds, and once more at the end with the final count. "phase" in the bar says when the run is in
warm-up or calibrating, whose figures are not shown (calibration skips communication). Its main-thread CPU time
is added to the timing callback's (`cpu_s["progress_bar"]`), so the run's summary counts it with the harness's
cost. The bar closes before the timing callback prints the end-of-run table (trainer.py puts it first), so it is
not drawn again below the table.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import lightning.pytorch as pl
from tqdm import tqdm

from harness.train.callback import CommTimingCallback

REFRESH_S = 0.5  # a person reads no faster; a 30 ms GPU step would otherwise redraw 33 times a second


class StepProgressBar(pl.Callback):
    """Optimizer steps out of --max-steps, with the timing callback's latest plain-float figures (none without
    one: --harness off); nothing here touches a GPU tensor."""

    def __init__(self, timing: CommTimingCallback | None, refresh_s: float = REFRESH_S) -> None:
        self.timing = timing
        self.refresh_s = refresh_s
        self._bar: tqdm | None = None
        self._last_refresh = float("-inf")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:
            self._bar = tqdm(
                total=trainer.max_steps, desc="Training", unit="step", file=sys.stdout, dynamic_ncols=True, smoothing=0
            )

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._bar is None:
            return
        cpu = time.thread_time()
        now = time.monotonic()
        if now - self._last_refresh >= self.refresh_s:
            self._last_refresh = now
            self._redraw(trainer.global_step)
        if self.timing is not None:
            self.timing.cpu_s["progress_bar"] += time.thread_time() - cpu

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._bar is not None:
            self._redraw(trainer.global_step)
        self._close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()

    def _redraw(self, steps: int) -> None:
        """The count and the figures in one redraw."""
        self._bar.n = steps
        if self.timing is not None:
            self._bar.set_postfix(self.timing.progress_bar_metrics(), refresh=False)
        self._bar.refresh()

    def _close(self) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            # Closing draws a last time: on a broken stdout (a closed pipe) that must not replace the error a run
            # is stopping for, which the timing callback still has to keep.
            with contextlib.suppress(OSError, ValueError):
                bar.close()
