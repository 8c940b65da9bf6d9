"""Builds and runs the Lightning Trainer for a resolved TrainConfig: DDP, TensorBoard, the timing callback.

One rank's whole life (process group, signals, failures, exit code) is harness.train.rank; train.py starts
the ranks.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy

from harness.common import dist_env
from harness.train.callback import CommTimingCallback
from harness.train.config import TrainConfig, claim_run_version, run_version
from harness.train.module import CommBenchModule, make_dataloader
from harness.train.progress_bar import CommProgressBar
from models import get_model_spec

# How often the TensorBoard writer's own thread flushes events to disk (SummaryWriter's default is 120 s): a
# run that is killed outright loses at most this much.
EVENTS_FLUSH_S = 5
# NCCL's watchdog enforces the process group's timeout (--timeout) on every collective; in this mode it
# aborts the process when one times out or a peer fails (torch's default, set in case the environment
# disabled it).
NCCL_ERROR_HANDLING_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}


def prepare_process_env(cfg: TrainConfig) -> None:
    """Environment that must be in place before the process group exists (and for child processes)."""
    dist_env.apply_safe_nccl_env()
    if cfg.use_gpu:
        for key, value in NCCL_ERROR_HANDLING_ENV.items():
            if os.environ.get(key, "0") == "0":
                os.environ[key] = value
    else:
        if cfg.launcher == "none":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        # One process per core share on CPU: more threads than cores makes ranks starve each other.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, cfg.devices)))
    if dist_env.detect().rank == 0:  # the one rank that writes into the run's directory claims it
        claim_run_version(Path(cfg.logdir) / cfg.run_name)
    else:
        run_version()


def build_trainer(
    cfg: TrainConfig, extra_callbacks: list[pl.Callback] | None = None
) -> tuple[pl.Trainer, CommBenchModule, CommTimingCallback]:
    """The Trainer, the module and the timing callback; `extra_callbacks` run before the timing callback."""
    spec = get_model_spec(cfg.model)
    ddp_kwargs = {
        "gradient_as_bucket_view": cfg.gradient_as_bucket_view,
        "static_graph": cfg.static_graph,
    }
    if cfg.bucket_cap_mb is not None:
        ddp_kwargs["bucket_cap_mb"] = cfg.bucket_cap_mb
    strategy = DDPStrategy(
        process_group_backend="nccl" if cfg.use_gpu else "gloo",
        timeout=datetime.timedelta(seconds=cfg.timeout_s),
        **ddp_kwargs,
    )
    samples_per_step = (
        spec.samples_per_batch(cfg.batch_size, cfg.seq_len) * cfg.accumulate_grad_batches * cfg.world_size
    )
    timing = CommTimingCallback(
        hook_name=cfg.comm_hook,
        samples_per_step=samples_per_step,
        sample_unit=spec.sample_unit,
        settings=cfg.to_dict(),
        powersgd_rank=cfg.powersgd_rank,
        bucket_cap_mb=cfg.bucket_cap_mb,
        calibration_steps=cfg.calibration_steps,
        calibration_every=cfg.calibration_every,
        gather_every=cfg.gather_every,
    )
    logger = TensorBoardLogger(
        save_dir=cfg.logdir,
        name=cfg.run_name,
        version=run_version(),
        default_hp_metric=False,
        flush_secs=EVENTS_FLUSH_S,
    )
    trainer = pl.Trainer(
        accelerator=cfg.accelerator,
        devices=cfg.devices,
        num_nodes=cfg.num_nodes,
        strategy=strategy,
        precision=cfg.precision,
        max_steps=cfg.max_steps,
        max_epochs=-1,
        accumulate_grad_batches=cfg.accumulate_grad_batches,
        logger=logger,
        callbacks=[*(extra_callbacks or []), timing, CommProgressBar(timing)],
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        benchmark=cfg.use_gpu,
        use_distributed_sampler=cfg.data_dir is not None,
    )
    _without_lightning_sigterm(trainer)
    return trainer, CommBenchModule(spec, cfg), timing


def _without_lightning_sigterm(trainer: pl.Trainer) -> None:
    """Switch off Lightning's SIGTERM handling (2.6): its handler broadcasts from inside the signal handler,
    a collective issued at an arbitrary point that need not match the other ranks', and every training step
    begins with a broadcast of that flag, with `.item()` (a GPU sync each step on NCCL). Every rank here gets
    the signal from its own launcher and stops at a step boundary (harness.train.rank.TrainSignals)."""
    connector = getattr(trainer, "_signal_connector", None)
    if connector is not None and hasattr(connector, "register_signal_handlers"):
        connector.register_signal_handlers = lambda: None
    epoch_loop = trainer.fit_loop.epoch_loop
    if hasattr(epoch_loop, "_broadcast_sigterm_tensor"):
        epoch_loop._broadcast_sigterm_tensor = lambda: None


def run_training(cfg: TrainConfig, extra_callbacks: list[pl.Callback] | None = None) -> CommTimingCallback:
    """Train in this process, inside an existing world; returns the timing callback (its aggregate holds the
    run's measurements). train.py goes through harness.train.rank, which adds signals and failure reports."""
    prepare_process_env(cfg)
    trainer, module, timing = build_trainer(cfg, extra_callbacks)
    trainer.fit(module, make_dataloader(cfg))
    return timing
