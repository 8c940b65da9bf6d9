"""How often the exposed-time interval holds the truth: train.py runs whose exposed communication is exactly 0.

    python -m bench.exposure_coverage --runs 20                      # resnet18 at 32 px, 2 gloo ranks, 300 steps
    python -m bench.exposure_coverage --reanalyze coverage.jsonl      # the same runs, today's estimator

With `--comm-hook noop` a measured step and a calibration step run the same code (no communication at all), so
the true exposed time is 0 and a 95 % interval should hold it in 95 % of runs. Each run is a `python train.py`
of its own on loopback (bench.exposed_ab's runner). Per run one JSON line goes to --out as it ends: the
interval summary.json gave, and the estimator's inputs (each measured step's forward + backward, read back from
the run's TensorBoard events with TensorBoard's reader, and the calibration samples from summary.json), so
`--reanalyze` can put another estimator to the same runs. The end line gives the coverage with its 95 %
Wilson interval: with 20 runs, 19 holding 0 is consistent with anything from about 76 % to 99 %.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from bench.exposed_ab import RunFailed, check_train_args, cpu_hog, run_loopback, summary_path, train_args
from harness.analysis.checked import BadFile, Fields, read_regular
from harness.common import tags
from harness.common.cli import OneLineParser, UsageError, check_count, check_seconds, check_writable, run_cli
from harness.common.metrics import percentile
from harness.train.exposure_estimate import estimate_exposure


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion hits / n."""
    if n == 0:
        return math.nan, math.nan
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def measured_steps(run_dir: Path) -> tuple[list[int], list[float]]:
    """Each measured step's forward + backward ms, from the run's event files (TensorBoard's own reader)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tags.FWD_BWD_MS)
    return [e.step for e in events], [e.value for e in events]


def record(summary: dict, run_dir: Path, seconds: float) -> dict:
    totals = summary["totals"]
    steps, fwd_bwd = measured_steps(run_dir)
    samples = list(zip(summary["calibration_sample_steps"], summary["calibration_samples_ms"], strict=True))
    return {
        "run_dir": str(run_dir),
        "seconds": round(seconds, 1),
        "exposed_ms_p50": totals["exposed_ms_p50"],
        "exposed_ms_ci95": totals["exposed_ms_ci95"],
        "resolved": totals.get("exposure_resolved"),
        "step_ms_p50": totals["step_ms_p50"],
        "steps": steps,
        "fwd_bwd_ms": fwd_bwd,
        "calibration": samples,
    }


def _numbers(values: object) -> bool:
    """A list of JSON numbers (NaN among them: the estimator drops a step or sample without a time)."""
    return isinstance(values, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def parse_record(text: str, where: str) -> dict:
    """One line of a --out file as a run's record (what `reanalyze` and `line` read of it); a BadFile naming the
    field where it is not one."""
    try:
        value = json.loads(text)
    except ValueError as err:
        raise BadFile(f"{where} is not JSON ({err})") from None
    rec = Fields(value, where)
    for key in ("step_ms_p50", "seconds"):
        rec.number(key, minimum=0, required=True)
    for key in ("steps", "fwd_bwd_ms"):
        if not _numbers(rec.data.get(key)):
            raise rec.fail(key, "a list of numbers")
    if len(rec.data["steps"]) != len(rec.data["fwd_bwd_ms"]):
        raise BadFile(f"{where}: steps and fwd_bwd_ms differ in length; expected one forward + backward a step")
    calibration = rec.data.get("calibration")
    if not (isinstance(calibration, list) and all(_numbers(sample) and len(sample) == 2 for sample in calibration)):
        raise rec.fail("calibration", "a list of [step, ms] pairs")
    return rec.data


def read_records(path: str) -> list[dict]:
    """The runs in a --out file, one record a line (blank lines skipped); a UsageError naming the file, line and
    field where the file cannot be read, is not such a one, or holds none."""
    try:
        text = read_regular(path).decode("utf-8", errors="replace")  # a byte that is not UTF-8 fails its line
        numbered = enumerate(text.splitlines(), 1)
        records = [parse_record(rec, f"{path} line {number}") for number, rec in numbered if rec.strip()]
    except BadFile as err:
        raise UsageError(f"--reanalyze: {err}") from None
    if not records:
        raise UsageError(f"--reanalyze: {path} holds no runs; expected one JSON line per run, as --out writes them")
    return records


def reanalyze(rec: dict) -> dict:
    """The record's interval recomputed by today's estimate_exposure from the inputs it kept."""
    est = estimate_exposure(
        rec["steps"], rec["fwd_bwd_ms"], [0.0] * len(rec["steps"]), rec["calibration"], rec["step_ms_p50"]
    )
    return {**rec, "exposed_ms_p50": est.exposed_ms_p50, "exposed_ms_ci95": list(est.exposed_ms_ci95)}


def holds_zero(rec: dict) -> bool:
    lo, hi = rec["exposed_ms_ci95"]
    return lo is not None and hi is not None and lo <= 0.0 <= hi


def report(records: list[dict]) -> str:
    hits = sum(holds_zero(r) for r in records)
    lo, hi = wilson(hits, len(records))
    widths = [r["exposed_ms_ci95"][1] - r["exposed_ms_ci95"][0] for r in records]
    steps = [r["step_ms_p50"] for r in records]
    return (
        f"# coverage: {hits} of {len(records)} intervals hold the true 0 ({100 * hits / len(records):.0f} %, "
        f"95 % Wilson interval {100 * lo:.0f}–{100 * hi:.0f} %); interval width p50 {percentile(widths, 50):.2f} ms "
        f"of a {percentile(steps, 50):.1f} ms step"
    )


def line(i: int, rec: dict) -> str:
    lo, hi = rec["exposed_ms_ci95"]
    mark = "holds 0" if holds_zero(rec) else "MISSES 0"
    return (
        f"# run {i}: exposed p50 {rec['exposed_ms_p50']:+.2f} ms, 95 % interval [{lo:+.2f}, {hi:+.2f}] {mark}; "
        f"{len(rec['calibration'])} samples, step {rec['step_ms_p50']:.1f} ms, {rec['seconds']:.0f} s"
    )


PROG = "python -m bench.exposure_coverage"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hog", action="store_true", help="a busy-loop process per core beside every run")
    parser.add_argument("--train-args", default="", help="more train.py arguments")
    parser.add_argument("--out", default="", help="append one JSON line per run here")
    parser.add_argument("--reanalyze", default="", help="a JSON Lines file of earlier runs: recompute, run nothing")
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    for option, value in (("--runs", args.runs), ("--image-size", args.image_size), ("--batch-size", args.batch_size),
                          ("--steps", args.steps)):  # fmt: skip
        check_count(option, value)
    check_seconds("--timeout", args.timeout)
    check_writable(args.out or None, "--out")
    if args.reanalyze:
        records = [reanalyze(rec) for rec in read_records(args.reanalyze)]
        for i, rec in enumerate(records):
            print(line(i, rec))
        print(report(records))
        return 0
    base = train_args(args.model, args.image_size, args.batch_size, args.steps, args.train_args.split())
    base.append("--no-progress-bar")
    from models import get_model_spec  # both load torch (seconds): after the checks that need nothing

    get_model_spec(args.model)
    check_train_args(base, f"--train-args {args.train_args!r}")
    logdir = Path(tempfile.mkdtemp(prefix="coverage-"))
    records = []
    for i in range(args.runs):
        name = f"noop{i}"
        start = time.monotonic()
        try:
            with cpu_hog() if args.hog else contextlib.nullcontext():
                summary = run_loopback(base, "noop", logdir, name, args.timeout)
        except RunFailed as err:  # as bench.exposed_ab reports one; the runs before it are in --out already
            print(f"{PROG}: error: {err}", file=sys.stderr, flush=True)
            return 1
        rec = record(summary, summary_path(logdir, name).parent, time.monotonic() - start)
        records.append(rec)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
        print(line(i, rec), flush=True)
    print(report(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
