"""What calibration costs a run, by an A/B of whole runs: train.py as shipped against `--calibration-steps 0`.

    python -m bench.calibration_cost --pairs 6 -- --model resnet50

Each pair runs both, as separate processes, in alternating order. A run's time is the sum of its step times and
the harness's work between them (summary.json's `overhead_s`: all_steps + between_steps), so start-up and the end
of the run, which calibration does not touch, are left out. The difference in each pair is what calibrating cost
that pair; its median over the pairs, with the pairs' range, is set beside what the calibrated runs printed:
`overhead_s.calibration` (their all_reduce after backward) and `calibration_beyond_exposed` (that, net of the
exposed communication those steps would have paid as measured steps). Arguments after `--` go to train.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.common.cli import OneLineParser, UsageError, check_count, run_cli

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"calibrated": [], "uncalibrated": ["--calibration-steps", "0"]}


def run_seconds(train_args: list[str], extra: list[str], logdir: Path) -> dict[str, float | None]:
    """One train.py run: its steps' time and, for a calibrated run, what it printed for calibration (the net
    figure None where the run had no exposed time to net it against)."""
    cmd = [sys.executable, str(ROOT / "train.py"), *train_args, *extra, "--logdir", str(logdir), "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"train.py failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    (path,) = logdir.glob("*/*/summary.json")
    overhead = json.loads(path.read_text())["overhead_s"]
    return {
        "run_s": overhead["all_steps"] + overhead.get("between_steps", 0.0),
        "calibration_s": overhead.get("calibration", 0.0),
        "beyond_exposed_s": overhead.get("calibration_beyond_exposed"),
    }


def check_train_args(train_args: list[str]) -> None:
    """Both runs' train.py command lines checked as train.py checks its own (harness.train.config.parse_config:
    its parser, then its TrainConfig against this machine, as train.py started without a launcher sees it), so that
    a mistake after -- is one line now rather than a failed first run; and none that leaves calibration nothing to
    cost, or writes no summary.json to read. Loads torch."""
    from harness.train.config import NO_HOOK, parse_config

    with tempfile.TemporaryDirectory() as logdir:
        try:
            calibrated, _ = (parse_config([*train_args, *extra, "--logdir", logdir]) for extra in VARIANTS.values())
        except UsageError as err:
            raise UsageError(f"after -- (train.py's arguments): {err}") from None
    if calibrated.harness == "off":
        raise UsageError("after --: --harness off writes no summary.json, whose overhead_s this bench reads")
    if calibrated.comm_hook == NO_HOOK:
        raise UsageError(f"after --: --comm-hook {NO_HOOK} calibrates nothing: calibration needs the timed hook")
    if calibrated.calibration_steps == 0:
        raise UsageError("after --: --calibration-steps 0 would leave the calibrated run uncalibrated too")


PROG = "python -m bench.calibration_cost"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="after --: train.py's arguments")
    args = parser.parse_args()
    train_args = [a for a in args.train_args if a != "--"] or ["--model", "resnet50"]
    check_count("--pairs", args.pairs)
    check_train_args(train_args)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = list(VARIANTS) if pair % 2 == 0 else list(reversed(VARIANTS))
            got = {name: run_seconds(train_args, VARIANTS[name], Path(tmp) / f"{pair}-{name}") for name in order}
            diff = got["calibrated"]["run_s"] - got["uncalibrated"]["run_s"]
            rows.append((diff, got["calibrated"]["calibration_s"], got["calibrated"]["beyond_exposed_s"]))
            print(
                f"pair {pair}: calibrated {got['calibrated']['run_s']:.2f} s, uncalibrated "
                f"{got['uncalibrated']['run_s']:.2f} s, difference {diff:+.2f} s; printed: all_reduce "
                f"{rows[-1][1]:.3f} s, beyond exposed {seconds(rows[-1][2])}",
                flush=True,
            )
    diffs = [d for d, _, _ in rows]
    printed = statistics.median(r[1] for r in rows)
    nets = [r[2] for r in rows if r[2] is not None]
    beyond = statistics.median(nets) if nets else None
    print(
        f"A/B over {len(rows)} pairs: calibration cost {statistics.median(diffs):+.2f} s median "
        f"(pairs {min(diffs):+.2f} to {max(diffs):+.2f}); printed: all_reduce {printed:.3f} s, beyond exposed "
        f"{seconds(beyond)} (medians; the net figure from {len(nets)} of the {len(rows)} calibrated runs)"
    )


def seconds(value: float | None) -> str:
    """A printed figure in seconds, or why there is none."""
    return "not measured (no exposed time)" if value is None else f"{value:.3f} s"


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
