"""Builds and runs the Lightning Trainer for a resolved TrainConfig: DDP, TensorBoard, the timing callback."""

from __future__ import annotations

import datetime
import os

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy

from harness import dist_env
from harness.lit_module import CommBenchModule, make_dataloader
from harness.progress_bar import CommProgressBar
from harness.timing_callback import CommTimingCallback
from harness.train_config import TrainConfig
from models import get_model_spec

# Lightning's own launcher re-runs train.py for ranks 1..n-1; they inherit the environment, so the run's
# version (its sub-directory) is fixed once, by the first process, and shared through this variable.
RUN_VERSION_ENV = "COMMBENCH_RUN_VERSION"


def prepare_process_env(cfg: TrainConfig) -> None:
    """Environment that must be in place before the process group exists (and for child processes)."""
    dist_env.apply_safe_nccl_env()
    if cfg.use_gpu:
        os.environ.update(dist_env.NCCL_TIMING_ENV)
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo") if cfg.launcher == "none" else None
        # One process per core share on CPU: more threads than cores makes ranks starve each other.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, cfg.devices)))
    os.environ.setdefault(RUN_VERSION_ENV, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))


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
        gather_every=cfg.gather_every,
    )
    logger = TensorBoardLogger(
        save_dir=cfg.logdir, name=cfg.run_name, version=os.environ[RUN_VERSION_ENV], default_hp_metric=False
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
    return trainer, CommBenchModule(spec, cfg), timing


def run_training(cfg: TrainConfig) -> CommTimingCallback:
    """Train as configured; returns the timing callback (its aggregate holds the run's measurements)."""
    prepare_process_env(cfg)
    trainer, module, timing = build_trainer(cfg)
    trainer.fit(module, make_dataloader(cfg))
    return timing
