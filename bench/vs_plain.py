"""train.py against a hand-written DDP loop, as a user runs them: separate processes, interleaved pairs.

    python -m bench.vs_plain --model resnet50 --batch-size 128 --pairs 8                  # one GPU
    python -m bench.vs_plain --nproc 2 --model resnet18 --batch-size 4 --image-size 64 --steps 120 --window-start 30
    python -m bench.vs_plain --pairs 4 --variant lean="--calibration-steps 0 --gather-every 0"

Each pair runs bench.plain_ddp and train.py (and every --variant: train.py with extra arguments), each under
`torchrun --standalone --nproc-per-node N`, in an order that rotates from pair to pair so that a host that
drifts favours none of them. Both are timed over the same window, from the start of step --window-start to
the start of the last step:
- the plain loop by its own wall clock, the device drained at both ends;
- train.py by the wall time of its per-step TensorBoard events. The event of step k is written when step k
  is resolved, at the start of step k + 2 (after the GPU reached step k + 1's start), so the events of steps
  window_start − 2 and last − 2 bracket the same window; the last two steps, resolved at the end of
  training, are not used.
The ratio of a pair is plain ms / train.py ms (1.0: the harness costs nothing; 0.97: 3% slower). Printed:
each pair, then each variant's median ms per step and the median ratio with its p10–p90 spread over the
pairs, and the plain loop's own spread (the host's noise). One JSON line per pair goes to --out as it
completes, so an interrupted bench keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.common.metrics import percentile
from harness.common.names import EVENT_FILE_PREFIX
from harness.train.callback import RESOLVE_LAG_STEPS

REPO = Path(__file__).resolve().parent.parent
STEP_TAG = "step/time_ms"


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]


def plain_ms(args: argparse.Namespace) -> dict[str, float]:
    cmd = [*torchrun(args.nproc), "-m", "bench.plain_ddp", *common_args(args), "--window-start", str(args.window_start)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"plain loop exited {proc.returncode}: {proc.stderr[-2000:]}")
    line = next(line for line in proc.stdout.splitlines() if line.startswith('{"plain_ddp"'))
    return json.loads(line)["plain_ddp"]


def train_ms(args: argparse.Namespace, extra: list[str], logdir: Path, name: str) -> dict[str, float]:
    cmd = [*torchrun(args.nproc), str(REPO / "train.py"), *common_args(args), "--max-steps", str(args.steps)]
    cmd += ["--logdir", str(logdir), "--run-name", name, *extra]
    env = {k: v for k, v in os.environ.items() if k != "COMMBENCH_RUN_VERSION"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"train.py exited {proc.returncode}: {proc.stderr[-2000:]}")
    return {"ms_per_step": event_window_ms(logdir / name, args.window_start, args.steps - 1)}


def event_window_ms(run_root: Path, first: int, last: int) -> float:
    """ms per step from the start of step `first` to the start of step `last`, from the wall times of the
    events of steps first − lag and last − lag (each written at the start of the step `lag` later)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    event_dirs = sorted({path.parent for path in run_root.rglob(f"{EVENT_FILE_PREFIX}*")})
    if len(event_dirs) != 1:
        raise RuntimeError(f"expected one run under {run_root}, found {len(event_dirs)}")
    acc = EventAccumulator(str(event_dirs[0]), size_guidance={"scalars": 0})
    acc.Reload()
    wall = {event.step: event.wall_time for event in acc.Scalars(STEP_TAG)}
    return (wall[last - RESOLVE_LAG_STEPS] - wall[first - RESOLVE_LAG_STEPS]) * 1e3 / (last - first)


def common_args(args: argparse.Namespace) -> list[str]:
    out = ["--model", args.model, "--batch-size", str(args.batch_size)]
    return out + (["--image-size", str(args.image_size)] if args.image_size else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--nproc", type=int, default=1, help="processes per run (GPUs, or gloo ranks on CPU)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--window-start", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--variant", action="append", default=[], metavar='NAME="ARGS"',
                        help="also run train.py with these extra arguments in every pair")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed for one run")
    parser.add_argument("--out", help="append one JSON line per pair here, as each pair completes")
    args = parser.parse_args()
    if not RESOLVE_LAG_STEPS <= args.window_start < args.steps - 1 - RESOLVE_LAG_STEPS:
        parser.error(f"--window-start must be in [{RESOLVE_LAG_STEPS}, --steps - {RESOLVE_LAG_STEPS + 1})")
    variants: dict[str, list[str]] = {"train.py": []}
    for spec in args.variant:
        name, _, extra = spec.partition("=")
        variants[name] = shlex.split(extra)
    names = ["plain", *variants]
    samples: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            shift = pair % len(names)
            row = {}
            for name in names[shift:] + names[:shift]:
                if name == "plain":
                    row[name] = plain_ms(args)
                else:
                    row[name] = train_ms(args, variants[name], Path(tmp), f"{name.replace('.', '_')}{pair}")
                samples[name].append(row[name]["ms_per_step"])
            ratios = {name: row["plain"]["ms_per_step"] / row[name]["ms_per_step"] for name in variants}
            record = {"pair": pair, "order": names[shift:] + names[:shift], **row, "plain_over": ratios}
            print(json.dumps(record), flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(record) + "\n")
    plain = samples["plain"]
    spread = (max(plain) - min(plain)) / percentile(plain, 50) * 100
    print(f"# plain loop: p50 {percentile(plain, 50):.2f} ms/step, spread (max − min) / p50 {spread:.1f} %")
    for name in variants:
        ratios = [p / t for p, t in zip(plain, samples[name], strict=True)]
        print(
            f"# {name}: p50 {percentile(samples[name], 50):.2f} ms/step; plain / {name} p50 "
            f"{percentile(ratios, 50):.3f} (p10 {percentile(ratios, 10):.3f}, p90 {percentile(ratios, 90):.3f}) "
            f"over {len(ratios)} pairs"
        )


if __name__ == "__main__":
    main()
