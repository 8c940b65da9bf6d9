"""The known-answer runs: sleep_chain trained across two namespace hosts on a tbf-shaped link, one row per setting.

    python -m bench.known_answer                                    # the raw 4 MiB all_reduce, then 5 settings
    python -m bench.known_answer --settings 1:fp16,1:bf16,2:allreduce --repeats 2 --out rows.jsonl

models/synthetic.py works out by hand which bucket cap and hook make sleep_chain's step fastest on this link;
this bench measures it (docs/BENCHMARKS.md, "Issue 13"). Both hosts (tests/netns.py) share this machine's
cores, but sleep_chain's backward is sleeps, so the link is the one resource the settings contend for.

First, unless --no-sweep: the raw gloo all_reduce of one block's gradient (4 MiB) and of the whole model's
(32 MiB) on the link, `harness.raw_sweep` under torchrun across the hosts. Then each setting CAP:HOOK (CAP in
MiB, or "default" for DDP's 25 MiB with its 1 MiB first bucket) is one train.py run of --steps steps, with a
calibration step every CALIBRATION_EVERY so the in-run exposed figure has samples throughout. Each row gives
step p50, exposed p50 (train.py's in-run estimate), comm p50, the compute-only forward + backward, the bucket
count, and whether DDP's rebuilt buckets are the ones harness.analysis.bucket_layout predicts. Rows go to
stdout as Markdown as each run ends; with --out, one JSON line per run too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from harness.analysis.bucket_layout import model_bucket_layout
from harness.common.cli import (
    DefaultsHelpFormatter,
    OneLineParser,
    UsageError,
    check_count,
    check_fresh,
    check_positive,
    check_writable,
    parse_cap_mib,
    run_cli,
)
from harness.common.names import HOOK_NAMES, SUMMARY_FILE
from tests.netns import shaping_unavailable, two_hosts
from tests.two_host_train import MASTER_PORT, run_on_hosts, train_on_hosts

PROG = "python -m bench.known_answer"
# One 4 MiB block's all_reduce takes about 44 ms at this rate, against 80 ms of sleep per block: hidden behind
# the next block's sleep with room to spare, yet long enough that halving it (fp16) outweighs the casts.
RATE_MBIT = 800.0
STEPS = 30
CALIBRATION_EVERY = 5  # steps 2–4, then 7, 12, ...: 8 compute-only samples and 20 measured steps in 30
DEFAULT_SETTINGS = "1:fp16,1:allreduce,5:allreduce,100:allreduce,default:allreduce"
SWEEP_SIZES = "4M,32M"
RUN_TIMEOUT_S = 120.0


def train_args(bucket_cap_mb: float | None, hook: str, steps: int = STEPS) -> list[str]:
    """train.py's arguments for one sleep_chain run; None for DDP's default bucket cap."""
    args = ["--model", "sleep_chain", "--max-steps", str(steps), "--comm-hook", hook]
    args += ["--calibration-every", str(CALIBRATION_EVERY), "--timeout", "60", "--no-progress-bar"]
    return args + ([] if bucket_cap_mb is None else ["--bucket-cap-mb", f"{bucket_cap_mb:g}"])


def parse_settings(text: str) -> list[tuple[float | None, str]]:
    """The settings of --settings: "1:fp16,default:allreduce" -> [(1.0, "fp16"), (None, "allreduce")]."""
    settings = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        cap, _, hook = item.partition(":")
        if hook not in HOOK_NAMES:
            raise UsageError(f"--settings {item!r}: the hook must be one of {', '.join(HOOK_NAMES)}")
        try:
            settings.append((parse_cap_mib(cap), hook))
        except ValueError as err:
            raise UsageError(f"--settings {item!r}: the cap must be {err}") from None
    if not settings:
        raise UsageError("--settings: give at least one CAP:HOOK")
    return settings


def run_dir_name(repeat: int, index: int) -> str:
    """The --logdir of a run, under the bench's root: repeat `repeat` of the setting at `index` in --settings."""
    return f"r{repeat}s{index}"


def sweep(hosts, port: int) -> list[dict]:
    """The raw all_reduce rows (in place, latency mode: one call at a time) on the link."""
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = Path(tmp) / "sweep.jsonl"
        args = ["-m", "harness.raw_sweep", "--sizes", SWEEP_SIZES, "--collectives", "all_reduce"]
        args += ["--placements", "in_place", "--mode", "latency", "--timeout", "60", "--json", str(jsonl)]
        procs = run_on_hosts(hosts, args, port, RUN_TIMEOUT_S)
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError(f"raw_sweep failed: {procs[0].stderr[-2000:]}{procs[1].stderr[-2000:]}")
        records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    return [r for r in records if r["record"] == "row"]


def run_record(summary: dict, run_dir: Path, bucket_cap_mb: float | None, hook: str) -> dict:
    totals = summary["totals"]
    # DDP logs its rebuilt buckets' sizes in bytes of the (fp32) gradients, whatever the hook sends.
    predicted = [b.numel * b.grad_itemsize for b in model_bucket_layout("sleep_chain", bucket_cap_mb)]
    rebuilt = [int(n) for n in str(summary["ddp_logging"].get("rebuilt_bucket_sizes", "")).split(",") if n.strip()]
    return {
        "bucket_cap_mb": bucket_cap_mb,
        "hook": hook,
        "run_dir": str(run_dir),
        "step_ms_p50": totals["step_ms_p50"],
        "exposed_ms_p50": totals["exposed_ms_p50"],
        "exposed_ms_ci95": totals.get("exposed_ms_ci95"),
        "comm_ms_p50": totals["comm_ms_p50"],
        "compute_only_ms": totals["compute_only_ms"],
        "steps_measured": totals["steps_measured"],
        "bucket_ms_p50": [b["time_ms_p50"] for b in summary["buckets"]],
        "rebuilt_bucket_numel": rebuilt,
        "layout_as_predicted": rebuilt == predicted,
        "load_1m": os.getloadavg()[0],
    }


COLUMNS = ["cap MiB", "hook", "step p50 ms", "exposed p50 ms [95 %]", "comm p50 ms", "compute-only ms",
           "buckets", "last bucket p50 ms", "layout as predicted", "load"]  # fmt: skip


def markdown_row(rec: dict) -> str:
    ci = rec["exposed_ms_ci95"]
    cells = [
        "default" if rec["bucket_cap_mb"] is None else f"{rec['bucket_cap_mb']:g}",
        rec["hook"],
        f"{rec['step_ms_p50']:.1f}",
        f"{rec['exposed_ms_p50']:.1f}" + ("" if not ci else f" [{ci[0]:.1f}, {ci[1]:.1f}]"),
        f"{rec['comm_ms_p50']:.1f}",
        f"{rec['compute_only_ms']:.1f}",
        str(len(rec["bucket_ms_p50"])),
        f"{rec['bucket_ms_p50'][-1]:.1f}",
        "yes" if rec["layout_as_predicted"] else "NO",
        f"{rec['load_1m']:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0], formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help="comma-separated CAP:HOOK")
    parser.add_argument("--rate-mbit", type=float, default=RATE_MBIT, help="the link's rate each way, Mbit/s")
    parser.add_argument("--steps", type=int, default=STEPS, help="train.py --max-steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per setting, the settings interleaved")
    parser.add_argument("--no-sweep", action="store_true", help="skip the raw all_reduce on the link")
    parser.add_argument("--out", help="append one JSON line per run here")
    parser.add_argument("--logdir", help="keep the runs under this folder (default: a temporary one, removed)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = parse_settings(args.settings)
    check_count("--steps", args.steps, least=10)
    check_count("--repeats", args.repeats)
    check_positive("--rate-mbit", args.rate_mbit, "Mbit/s")
    check_writable(args.out, "--out")
    check_writable(args.logdir, "--logdir", directory=True)
    check_fresh(
        "--logdir", args.logdir, [run_dir_name(r, i) for r in range(args.repeats) for i in range(len(settings))]
    )
    if (why := shaping_unavailable()) is not None:
        raise UsageError(f"needs network namespaces and tc: {why}")
    check_writable(args.logdir, "--logdir", directory=True, create=args.logdir is not None)
    port = MASTER_PORT
    with two_hosts("hxka", rate_mbit=args.rate_mbit) as hosts, contextlib.ExitStack() as stack:
        root = args.logdir or stack.enter_context(tempfile.TemporaryDirectory())
        rates = [hosts.shaped_rate_mbit(host) for host in (0, 1)]
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"# link shaped to {rates[0]:g} / {rates[1]:g} Mbit/s each way (read back from tc), {date}", flush=True)
        if not args.no_sweep:
            for row in sweep(hosts, port):
                print(f"# raw all_reduce {row['size_bytes'] / 2**20:g} MiB: {row['time_us'] / 1e3:.1f} ms, "
                      f"busbw {row['busbw_gbps']:.4f} GB/s", flush=True)  # fmt: skip
        print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS), flush=True)
        for repeat in range(args.repeats):
            for index, (cap, hook) in enumerate(settings):
                port += 1  # a port of its own: the last run's may still be in TIME_WAIT
                logdir = Path(root) / run_dir_name(repeat, index)
                procs, run_dir = train_on_hosts(hosts, train_args(cap, hook, args.steps), logdir, port, RUN_TIMEOUT_S)
                if any(p.returncode != 0 for p in procs) or run_dir is None:
                    print(f"{PROG}: error: {cap}:{hook} failed: {procs[0].stderr[-2000:]}", file=sys.stderr)
                    return 1
                rec = run_record(json.loads((run_dir / SUMMARY_FILE).read_text()), run_dir, cap, hook)
                print(markdown_row(rec), flush=True)
                if args.out:
                    with open(args.out, "a") as out:
                        out.write(json.dumps({"rate_mbit": rates[0], "repeat": repeat, **rec}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
