"""Train a real model with Lightning DDP and time every bucketed gradient all_reduce.

    python train.py --model resnet50                                  # no launcher: 2 CPU processes (gloo),
                                                                      # or one process per GPU (NCCL)
    torchrun --nproc-per-node 8 train.py --model resnet50             # one node, 8 GPUs
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint host:29500 train.py --model resnet50          # 4 nodes
    srun --ntasks-per-node 8 python train.py --model resnet50        # SLURM
    tensorboard --logdir runs

Per step, rank 0 logs step time, throughput, and each bucket's time, bytes and busbw to TensorBoard;
at the end it prints a per-bucket table and writes summary.json into the run's log directory.
`python train.py --help` lists every option.

Exit codes: 0 done; 2 a mistake in the options (one line, before any process starts); 3 a rank failed, timed
out (--timeout) or lost a peer (one line names the rank, the step and the collective), or rank 0 could no
longer write its outputs (the line names them); 130 / 143 / 129 stopped by SIGINT / SIGTERM / SIGHUP.
Whatever ends a run, summary.json ("completed": false, "reason") and the events keep what was measured. Each
run has a directory of its own, <logdir>/<run name>/<start time>, also when two start in the same second; the
last line of a run that completed names it, with the `tensorboard --logdir` command to view it. The default
run name is the model, the world, the hook, the bucket cap and a hash of every setting that defines the workload
(docs/METRICS.md, run identity).
Without a launcher, the exit code of a rank killed by signal N is 128 + N.
"""

from __future__ import annotations

from pathlib import Path

from harness.common.cli import run_cli
from harness.common.names import GRACE_S
from harness.train.config import claim_run_version, parse_config


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)  # every check runs here, before any process or process group exists
    if cfg.launcher != "none":  # torchrun or SLURM started this process as one rank
        from harness.common.local_launch import exit_without_teardown
        from harness.train.rank import run_rank

        exit_without_teardown(run_rank(cfg))  # never returns: the interpreter's teardown can abort a rank
    # No launcher: this process starts the ranks and watches them. It never loads Lightning (seconds of
    # CPU that the ranks, loading it themselves, need more).
    from harness.common.local_launch import spawn_local

    claim_run_version(Path(cfg.logdir) / cfg.run_name)  # fixed here, inherited by the ranks: one run directory
    backend = "nccl" if cfg.use_gpu else "gloo"
    grace_s = cfg.timeout_s + GRACE_S
    return spawn_local(_rank, cfg.devices, (cfg,), backend=backend, init_process_group=False, grace_s=grace_s)


def _rank(cfg) -> None:
    """One rank started by spawn_local (harness.train.rank.train_worker, imported in the rank only)."""
    from harness.train.rank import train_worker

    train_worker(cfg)


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "train.py"))
