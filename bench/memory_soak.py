"""Memory over a long run: the resident memory of train.py's ranks from step 100 to the end stays flat.

    python -m bench.memory_soak                                   # resnet_tiny, 5000 steps, 2 CPU ranks (gloo)
    python -m bench.memory_soak --model gpt_tiny --max-steps 5000 --every 250 --out soak.jsonl

Each rank runs exactly what train.py runs (harness.train.rank.run_rank: the timed hook, per-step TensorBoard
events, rank gathers, summary.json), started as train.py starts them without a launcher, plus a callback
that reads the process's VmRSS from /proc/self/status every --every optimizer steps (and at step 100, the
baseline: DDP has rebuilt its buckets, calibration is over, the allocator has warmed up). It prints one JSON
record: each rank's samples and its growth from step 100 to the last step, in MB (1e6 bytes).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from harness.common.cli import OneLineParser, check_count, check_writable, run_cli
from harness.common.local_launch import spawn_local
from harness.common.names import MB
from harness.common.run_info import run_info
from harness.train.config import parse_config

BASELINE_STEP = 100  # growth is measured from here: warm-up, bucket rebuild and calibration are long over


def rss_bytes() -> int:
    """This process's resident set size (VmRSS in /proc/self/status)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


class RssProbe(pl.Callback):
    """Records VmRSS after optimizer step `BASELINE_STEP`, every `every` steps, and at the end; writes them to
    `out_dir/rss_rank{rank}.json` when training ends."""

    def __init__(self, every: int, out_dir: str) -> None:
        self.every, self.out_dir = every, out_dir
        self.samples: list[tuple[int, int]] = []  # (optimizer steps done, bytes)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx):
        step = trainer.global_step
        if (step == BASELINE_STEP or step % self.every == 0) and (not self.samples or self.samples[-1][0] != step):
            self.samples.append((step, rss_bytes()))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.samples or self.samples[-1][0] != trainer.global_step:
            self.samples.append((trainer.global_step, rss_bytes()))
        path = Path(self.out_dir) / f"rss_rank{trainer.global_rank}.json"
        path.write_text(json.dumps({"rank": trainer.global_rank, "pid": os.getpid(), "samples": self.samples}))


def _rank(cfg, every: int, out_dir: str) -> None:
    from harness.train.rank import run_rank

    code = run_rank(cfg, extra_callbacks=[RssProbe(every, out_dir)])
    if code:
        raise SystemExit(code)


def growth(samples: list[list[int]]) -> dict[str, Any]:
    """Growth from the baseline step to the last sample, in MB, and the largest sample after the baseline."""
    after = [(step, rss) for step, rss in samples if step >= BASELINE_STEP]
    if len(after) < 2:
        raise ValueError(f"need samples from step {BASELINE_STEP} on, got {samples}")
    (first_step, first), (last_step, last) = after[0], after[-1]
    return {
        "from_step": first_step,
        "to_step": last_step,
        "rss_mb_at_from": first / MB,
        "rss_mb_at_to": last / MB,
        "growth_mb": (last - first) / MB,
        "max_growth_mb": (max(rss for _, rss in after) - first) / MB,
    }


def soak(train_args: list[str], every: int, nproc: int = 2) -> dict[str, Any]:
    """Run train.py's ranks with `train_args` (--devices is set to nproc) and the probe; every rank's growth."""
    with tempfile.TemporaryDirectory(prefix="memory-soak-") as out_dir:
        cfg = parse_config([*train_args, "--devices", str(nproc)])
        code = spawn_local(_rank, nproc, (cfg, every, out_dir), init_process_group=False, grace_s=cfg.timeout_s + 5)
        if code:
            raise RuntimeError(f"the training run failed with exit code {code}")
        ranks = [json.loads(path.read_text()) for path in sorted(Path(out_dir).glob("rss_rank*.json"))]
    return {
        "bench": "memory_soak",
        "train_args": train_args,
        "every": every,
        "ranks": [{**r, **growth(r["samples"])} for r in ranks],
    }


PROG = "python -m bench.memory_soak"


def main() -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet_tiny")
    parser.add_argument("--max-steps", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--every", type=int, default=250, help="sample VmRSS every N optimizer steps")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--logdir", help="train.py's --logdir (default: a temporary directory)")
    parser.add_argument("--out", help="append the record as a JSON line to this file")
    args = parser.parse_args()
    for option, value in (("--batch-size", args.batch_size), ("--every", args.every), ("--nproc", args.nproc)):
        check_count(option, value)
    check_count("--max-steps", args.max_steps, least=BASELINE_STEP + 1)  # growth is measured from BASELINE_STEP
    check_writable(args.out, "--out")
    with tempfile.TemporaryDirectory(prefix="memory-soak-runs-") as tmp:
        train_args = ["--model", args.model, "--max-steps", str(args.max_steps), "--batch-size", str(args.batch_size)]
        train_args += ["--logdir", args.logdir or tmp]
        record = soak(train_args, args.every, args.nproc)
    record["run_info"] = run_info()
    for r in record["ranks"]:
        print(
            f"rank {r['rank']}: VmRSS {r['rss_mb_at_from']:.1f} MB at step {r['from_step']}, "
            f"{r['rss_mb_at_to']:.1f} MB at step {r['to_step']}: growth {r['growth_mb']:+.1f} MB "
            f"(largest {r['max_growth_mb']:+.1f} MB)",
            file=sys.stderr,
        )
    print(json.dumps(record), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
