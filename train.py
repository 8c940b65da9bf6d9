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
"""

from __future__ import annotations

from harness.errors import run_cli
from harness.train_config import parse_config
from harness.trainer import run_training


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    run_training(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, "train.py"))
