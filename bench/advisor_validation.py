"""How far the advisor's predicted step is from measured training, over bucket caps and hooks, and across world sizes.

    python -m bench.advisor_validation --model resnet50 --nproc 2 --image-size 64
    python -m bench.advisor_validation --model gpt_tiny --nproc 4 --extrapolate ""
    python -m bench.advisor_validation --model resnet50 --nproc 2 --image-size 64 --caps 25 --hooks allreduce \
        --repeat 1 --extrapolate 3,4                        # world sizes only

One train.py run at DDP's default cap with the allreduce hook is the only input: `python -m harness.advise
--run` predicts every setting of --caps × --hooks from it (and, with --extrapolate, the run's own setting at
other world sizes). Then every setting is run --repeat times, interleaved (harness.grid's schedule: every
other pass reversed), each run's step p50 taken, and the median compared with the prediction:
error = predicted / measured − 1. It prints a Markdown table and the verdicts the issue asks for: the median
and worst |error|, and whether the recommended setting is the measured best or within the measured spread
of it (its fastest run no slower than the best setting's slowest). `--two-hosts RATE` runs every train.py on
two network-namespace hosts joined by a tbf-shaped veth link of RATE Mbit/s, one rank each (root only). With
`--switch` the hosts hang off one switch instead, each by a link of RATE Mbit/s (tests/netns.py,
switched_hosts): the base run and the grid on --nproc hosts, and each world size of --extrapolate on as many
hosts, so that a 2-rank run predicts 3 and 4 ranks whose every rank has a link of its own.

A single run is itself a noisy sample. The report's noise floor says how far one run's step lies from the median
of its setting's other repeats: the error a perfect model, predicting from one run, would still show. With
`--bases-in-grid` there is no separate base run: each of the grid's default-cap allreduce runs is the base in
turn (measured interleaved with the settings it predicts, so the machine's drift between an early base run and
the grid is not charged to the model), and the errors are pooled over the bases.

`--resume` runs only the grid's runs that an earlier call, cut by a time limit, did not finish under --out (each
run name's completed summaries count against its first entries in the schedule), then predicts and compares all of
them; `--reuse` runs nothing.

A run whose own compute-only forward+backward (measured in its calibration steps, with no communication) lies far
from the grid's median was slowed or sped up by the host, not by its setting: no model of communication can predict
it from another run. `--drop-drifted PCT` lists the runs more than PCT % off and adds a second verdict with them
left out (as bases and as repeats); the verdict as measured, every run counted, stays first and is the one --pool
reads (the second's tables are headed "setting, drifted runs left out").

`--pool REPORT...` runs nothing: it pools the step errors of earlier report.md files, the base setting's rows
left out, into the median and worst that `harness.analysis.advice.VALIDATED_ERROR` quotes.

Measured figures, with their dates and machine: docs/BENCHMARKS.md, "Issue 13: validation".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import grid
from harness.advise import config_of, measured_runs, measured_steps
from harness.analysis.advice import ADVISOR_HOOKS
from harness.analysis.step_model import Candidate, cap_candidate, default_candidate
from harness.common.cli import OneLineParser, check_count, check_seconds, check_writable, run_cli
from harness.common.dist_env import NVLS_OFF_ENV
from harness.common.failures import SignalLatch

ROOT = Path(__file__).resolve().parents[1]
BASE = "base"


def workload_args(args: argparse.Namespace) -> list[str]:
    extra = ["--max-steps", str(args.max_steps), "--no-progress-bar"]
    extra += ["--calibration-every", str(args.calibration_every)]
    if args.image_size:
        extra += ["--image-size", str(args.image_size)]
    if args.batch_size:
        extra += ["--batch-size", str(args.batch_size)]
    if args.seq_len:
        extra += ["--seq-len", str(args.seq_len)]
    if args.cpu_threads:
        extra += ["--cpu-threads", str(args.cpu_threads)]
    return extra


def devices(args: argparse.Namespace, ranks: int) -> list[str]:
    """train.py's --devices for `ranks` on loopback; none on namespace hosts, where torchrun gives each host one."""
    return [] if args.two_hosts else ["--devices", str(ranks)]


def run_base(args: argparse.Namespace, out: Path) -> Path:
    """The one measured run everything is predicted from: default cap, allreduce."""
    logdir = out / "base"
    schedule = [(1, {"--comm-hook": "allreduce"})]
    train = [*devices(args, args.nproc), *workload_args(args)]
    run_schedule(args, schedule, logdir, train, args.nproc)
    found = sorted(logdir.glob("*/*/summary.json"))
    if not found:
        sys.exit(f"the base run left no summary.json under {logdir} (see {logdir}/logs)")
    return found[-1].parent


def still_to_run(
    schedule: list[tuple[int, dict[str, str]]], logdir: Path, model: str
) -> list[tuple[int, dict[str, str]]]:
    """The entries of `schedule` (repeat, config) not yet measured under `logdir`: per run name, as many of its
    first entries as it has runs the comparison counts (harness.advise.measured_runs: completed, with a step p50)
    are dropped. A run that was stopped has no completed summary, so it runs again."""
    done = {name: len(runs) for name, runs in measured_runs(logdir, "step_ms_p50").items()}
    left = []
    for repeat, config in schedule:
        name = grid.run_name(model, config)
        if done.get(name, 0) > 0:
            done[name] -= 1
        else:
            left.append((repeat, config))
    return left


def run_schedule(args: argparse.Namespace, schedule: list, logdir: Path, train: list[str], ranks: int) -> None:
    """Run `schedule` under `logdir`: `ranks` ranks on loopback (train.py's --devices, in `train`), or one a
    namespace host. With --resume, only what an earlier, cut call did not finish."""
    if args.reuse and any(logdir.glob("*/*/summary.json")):
        print(f"--reuse: the runs already under {logdir}", flush=True)
        return
    if args.resume:
        left = still_to_run(schedule, logdir, args.model)
        print(f"--resume: {len(schedule) - len(left)} of {len(schedule)} runs already under {logdir}", flush=True)
        schedule = left
    grid.prepare_logdir(logdir)
    if args.two_hosts:
        from tests.two_host_train import run_schedule_on_hosts

        run_schedule_on_hosts(
            schedule, args.model, logdir, train, args.two_hosts, ranks, args.switch, timeout_s=args.run_timeout
        )
    else:
        grid.run_schedule(schedule, args.model, logdir, [], train, SignalLatch().install())


def run_sweep(args: argparse.Namespace, out: Path) -> Path:
    """A raw all_reduce sweep where the grid runs (--nproc ranks on loopback, or one rank on each of --nproc
    namespace hosts over the same shaped links): the network for a base run whose buckets cannot be fitted (one
    bucket at DDP's default, as gpt_tiny's)."""
    path = out / "sweep.jsonl"
    if args.reuse and path.exists():
        return path
    sweep = ["-m", "harness.raw_sweep", "--collectives", "all_reduce", "-b", "4K", "-e", "64M", "--json", str(path)]
    if args.two_hosts:
        from tests.two_host_train import run_on_hosts, shaped_hosts

        with shaped_hosts(args.nproc, args.switch, args.two_hosts, "hxsw") as hosts:
            procs = run_on_hosts(hosts, sweep, timeout_s=args.run_timeout)
        failed = [f"host {n}: {p.stderr.strip()[-500:]}" for n, p in enumerate(procs) if p.returncode != 0]
        if failed:
            sys.exit(f"the raw sweep over {args.nproc} hosts failed: {'; '.join(failed)}")
        return path
    cmd = [sys.executable, *sweep, "--nproc", str(args.nproc), "--backend", "gloo"]
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, **NVLS_OFF_ENV}, stdout=subprocess.DEVNULL)
    return path


def advise_json(run_dir: Path, out: Path, extra: list[str], sweep: Path | None = None, tag: str = "") -> dict[str, Any]:
    """harness.advise's JSON for `run_dir`, kept (with its printed text) under `out`, named by `extra` and `tag`."""
    path = out / f"advise{'-'.join(extra).replace('-', '_')}{tag}.json"
    cmd = [sys.executable, "-m", "harness.advise", "--run", str(run_dir), "--json", str(path), *extra]
    if sweep is not None:
        cmd += ["--sweep", str(sweep)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **NVLS_OFF_ENV})
    if proc.returncode != 0:
        sys.exit(f"advise failed: {proc.stderr.strip()}")
    (out / f"{path.stem}.txt").write_text(proc.stdout)
    return json.loads(path.read_text())


def row_key(row: dict[str, Any]) -> tuple[Any, str]:
    return (row["bucket_cap_mb"] if row["kind"] != "default" else "default", row["hook"])


def grid_candidates(caps: list[float], hooks: list[str]) -> list[Candidate]:
    return [default_candidate(h) for h in hooks] + [cap_candidate(c, h) for c in caps for h in hooks]


def pooled_errors(report: str) -> list[float]:
    """Every |error| in a report.md's grid tables (those headed "| setting | predicted ms | ..." with an "error"
    column), as fractions, less the base setting's rows: DDP's default cap with allreduce is anchored to the base
    run, so its error is the base run's noise, not the model's."""
    anchored = f"{default_candidate('allreduce').label}, allreduce"
    errors, column = [], None
    for line in report.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            column = None
        elif cells[:2] == ["setting", "predicted ms"] and "error" in cells:
            column = cells.index("error")
        elif column is not None and cells[0] != anchored and len(cells) > column and cells[column].endswith(" %"):
            errors.append(abs(float(cells[column].removesuffix(" %"))) / 100)
    return errors


def pool_reports(paths: list[Path], parser: argparse.ArgumentParser) -> str:
    """Per report and over all of them: how many predictions, their median and worst |error| (what
    harness.analysis.advice.VALIDATED_ERROR quotes)."""
    lines, pooled = [], []
    for path in paths:
        try:
            errors = pooled_errors(path.read_text())
        except OSError as error:
            parser.error(f"--pool: cannot read {path}: {error.strerror}")
        if not errors:
            parser.error(f"--pool: {path} holds no grid table that bench.advisor_validation wrote")
        pooled += errors
        lines.append(f"{path}: {spread_of(errors)}")
    lines.append(f"all {len(paths)} reports: {spread_of(pooled)}")
    return "\n".join(lines)


def median_and_worst(median: float, worst: float) -> str:
    """How every line of the report states a spread of |error| (fractions)."""
    return f"median |error| {100 * median:.1f} %, worst {100 * worst:.1f} %"


def spread_of(errors: list[float]) -> str:
    return f"{len(errors)} predictions, {median_and_worst(statistics.median(errors), max(errors))}"


def run_grid(args: argparse.Namespace, out: Path, candidates: list[Candidate]) -> Path:
    """Every candidate --repeat times, interleaved; the directory the runs are under."""
    logdir = out / "grid"
    train = [*devices(args, args.nproc), *workload_args(args)]
    run_schedule(args, grid.run_order([config_of(c) for c in candidates], args.repeat), logdir, train, args.nproc)
    return logdir


def base_runs(logdir: Path, name: str, left_out: frozenset[Path] = frozenset()) -> list[Path]:
    """The version directories of run `name` under `logdir` that measured a step, less those in `left_out`: the
    grid's bases."""
    return [path for path, _ in measured_runs(logdir, "step_ms_p50").get(name, []) if path not in left_out]


def without_runs(runs: dict[str, list[tuple[Path, float]]], left_out: frozenset[Path]) -> dict[str, list[float]]:
    """measured_runs' values by run name, less the versions in `left_out`."""
    return {name: [value for path, value in found if path not in left_out] for name, found in runs.items()}


def drifted_runs(logdir: Path, pct: float) -> tuple[float, dict[Path, float]]:
    """The median compute-only ms of the runs under `logdir`, and {version directory: its compute-only ms} of those
    whose compute-only forward+backward lies more than `pct` % from it: the host, not the setting, changed their
    step."""
    compute = [(path, ms) for found in measured_runs(logdir, "compute_only_ms").values() for path, ms in found]
    if not compute:
        return math.nan, {}
    median = statistics.median(ms for _, ms in compute)
    return median, {path: ms for path, ms in compute if is_drifted(ms, median, pct)}


def is_drifted(compute_ms: float, median_ms: float, pct: float) -> bool:
    """Whether a run's compute-only ms lies more than `pct` % from the grid's median."""
    return abs(compute_ms / median_ms - 1) * 100 > pct


def drifted_section(
    logdir: Path, pct: float, verdict: Callable[[frozenset[Path]], list[str]], base: Path | None = None
) -> list[str]:
    """--drop-drifted's part of the report: which runs drifted, and `verdict`'s lines with them left out. `base`: a
    base run outside the grid, judged against the grid's median too (a drifted base leaves no second verdict)."""
    median, drifted = drifted_runs(logdir, pct)
    head = f"#### Runs whose compute-only forward+backward lies over {pct:g} % from the grid's median ({median:.1f} ms)"
    if base is not None:
        base_ms = dict(measured_runs(base.parent.parent, "compute_only_ms").get(base.parent.name, [])).get(base)
        if base_ms is not None and is_drifted(base_ms, median, pct):
            return ["", head, "", f"- the base run drifted ({base_ms:.1f} ms): no verdict without drift from it"]
    if not drifted:
        return ["", head, "", "- none: the verdict above is the only one"]
    listed = "; ".join(f"{path.parent.name}/{path.name} {ms:.1f} ms" for path, ms in sorted(drifted.items()))
    return [
        "",
        head,
        "",
        f"- left out ({len(drifted)}): {listed}",
        "- the verdict with them left out is the model's error without the host's drift, not the grid as measured",
        "",
        *verdict(frozenset(drifted)),
    ]


def noise_floor(steps: dict[str, list[float]]) -> tuple[float, float, int]:
    """How far one run's step is from the median of its setting's other repeats: the median and worst |error|
    that a perfect model, predicting from one run, would still show on this machine (and the runs counted)."""
    deviations = [
        abs(run / statistics.median(runs[:n] + runs[n + 1 :]) - 1)
        for runs in steps.values()
        if len(runs) > 1
        for n, run in enumerate(runs)
    ]
    return (statistics.median(deviations), max(deviations), len(deviations)) if deviations else (math.nan, math.nan, 0)


@dataclass
class GridVerdict:
    lines: list[str]
    errors: list[float]
    """|error| of every setting but the base's."""
    within: bool
    """The recommended setting is the measured best or within its spread."""


def grid_verdict(
    args: argparse.Namespace,
    out: Path,
    base: Path,
    candidates: list[Candidate],
    logdir: Path,
    sweep: Path | None,
    in_grid: bool = False,
    left_out: frozenset[Path] = frozenset(),
) -> GridVerdict:
    """The advisor's predictions from `base` against the grid's measured runs; `in_grid`: `base` is one of the
    grid's runs, left out of its setting's measured repeats (and its advice kept under its own name); `left_out`:
    runs not counted (drifted_runs), whose table is headed so that --pool does not read it."""
    caps = sorted({c.bucket_cap_mb for c in candidates if c.bucket_cap_mb is not None})
    hooks = list(dict.fromkeys(c.hook for c in candidates))
    extra = ["--caps", ",".join(f"{c:g}" for c in caps), "--hooks", ",".join(hooks)]
    advice = advise_json(base, out, extra, sweep, tag=f"_{base.name}" if in_grid else "")
    predicted = {row_key(r): r["predicted_step_ms"] for r in advice["rows"] if r["kind"] != "list"}
    predicted_exposed = {row_key(r): r["predicted_exposed_ms"] for r in advice["rows"] if r["kind"] != "list"}
    # The base run, where it is one of the grid's, is left out of its setting's repeats (by its directory).
    steps = without_runs(measured_runs(logdir, "step_ms_p50"), left_out | {base})
    # Each run's exposed (forward+backward − its own compute-only): what communication cost it, free of the
    # compute drift between runs that the step time carries.
    exposed = without_runs(measured_runs(logdir, "exposed_ms_p50"), left_out | {base})
    setting = "setting, drifted runs left out" if left_out else "setting"
    lines = [
        f"| {setting} | predicted ms | measured ms (median) | runs | error | predicted exposed ms "
        "| measured exposed ms (runs) |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    errors, measured_median = [], {}
    for cand in candidates:
        config = config_of(cand)
        key = ("default" if cand.kind == "default" else cand.bucket_cap_mb, cand.hook)
        name = grid.run_name(args.model, config)
        runs = steps.get(name, [])
        pred = predicted.get(key)
        if not runs or pred is None:
            lines.append(f"| {cand.label}, {cand.hook} | {pred} | no run | | |")
            continue
        median = statistics.median(runs)
        measured_median[key] = (median, runs)
        error = pred / median - 1
        if key != ("default", "allreduce"):
            errors.append(abs(error))
        runs_exposed = ", ".join(f"{e:.1f}" for e in exposed.get(name, []))
        lines.append(
            f"| {cand.label}, {cand.hook} | {pred:.1f} | {median:.1f} | {', '.join(f'{r:.1f}' for r in runs)} | "
            f"{100 * error:+.1f} % | {predicted_exposed.get(key, float('nan')):.1f} | {runs_exposed} |"
        )
    if not measured_median:  # every run of every setting left out (drifted_runs) or none finished
        return GridVerdict([*lines, "", "- no setting has a measured run to compare"], errors, False)
    rec_key = row_key(advice["best_single_cap"])  # train.py runs one cap: the pick among what the grid ran
    best_key = min(measured_median, key=lambda k: measured_median[k][0])
    rec_runs = measured_median.get(rec_key, (float("nan"), []))[1]
    best_runs = measured_median[best_key][1]
    within = bool(rec_runs) and (rec_key == best_key or min(rec_runs) <= max(best_runs))
    compute = [
        c for values in without_runs(measured_runs(logdir, "compute_only_ms"), left_out).values() for c in values
    ]
    spread = (
        f"{median_and_worst(statistics.median(errors), max(errors))} over the {len(errors)} settings besides the base's"
        if errors
        else "no setting besides the base's was measured"
    )
    drift = (
        f"- compute-only forward+backward over the grid's {len(compute)} runs: {min(compute):.1f} to "
        f"{max(compute):.1f} ms (median {statistics.median(compute):.1f}): the machine's run-to-run drift"
        if compute
        else "- no run measured a compute-only forward+backward"
    )
    lines += [
        "",
        drift,
        f"- {spread} (default cap + allreduce: anchored, so its error is the noise between the base run and its "
        "repeats)",
        f"- recommended: {rec_key}; measured best: {best_key} (median {measured_median[best_key][0]:.1f} ms); "
        f"recommended {'is the measured best or within its spread' if within else 'is NOT within the best spread'}",
        f"- advisor: {advice['confidence']}",
        f"- advisor: κ = {advice['kappa']:.3f} (range {advice['kappa_range'][0]:.2f}–{advice['kappa_range'][1]:.2f}), "
        f"residual {advice['residual_ms']:.1f} ms, h {advice.get('hook_host_ms', 0.0):.3f} ms a bucket, network "
        f"{advice['network']['source']}, α {advice['network']['alpha_us']:.0f} µs, "
        f"B_bus {advice['network']['busbw_gbps']:.3g} GB/s; {advice['layout_check']}",
    ]
    return GridVerdict(lines, errors, within)


def floor_line(logdir: Path, left_out: frozenset[Path] = frozenset()) -> str:
    median, worst, runs = noise_floor(without_runs(measured_runs(logdir, "step_ms_p50"), left_out))
    if not runs:
        return "- noise floor: unknown, no setting ran twice"
    return (
        f"- noise floor: one run's step against the median of its setting's other repeats, over {runs} runs: "
        f"{median_and_worst(median, worst)} (what a perfect model, predicting from one run, would still show here)"
    )


def validate_grid(
    args: argparse.Namespace, out: Path, base: Path, caps: list[float], hooks: list[str], sweep: Path | None
) -> list[str]:
    """Predictions from the separate base run, against the grid run after it."""
    candidates = grid_candidates(caps, hooks)
    logdir = run_grid(args, out, candidates)

    def verdict(left_out: frozenset[Path] = frozenset()) -> list[str]:
        return [*grid_verdict(args, out, base, candidates, logdir, sweep, left_out=left_out).lines,
                floor_line(logdir, left_out)]  # fmt: skip

    lines = verdict()
    if args.drop_drifted is None:
        return lines
    return lines + drifted_section(logdir, args.drop_drifted, verdict, base=base)


def validate_grid_bases(
    args: argparse.Namespace, out: Path, caps: list[float], hooks: list[str], sweep: Path | None
) -> list[str]:
    """Each of the grid's own default-cap, allreduce runs taken in turn as the one base run: the base is then
    measured interleaved with what it predicts, and the error is pooled over as many bases as --repeat."""
    candidates = grid_candidates(caps, hooks)
    logdir = run_grid(args, out, candidates)
    base_name = grid.run_name(args.model, config_of(default_candidate("allreduce")))
    found = len(base_runs(logdir, base_name))
    if found < 2:
        sys.exit(f"--bases-in-grid needs two completed {base_name} runs under {logdir}, found {found}")

    def verdict(left_out: frozenset[Path] = frozenset()) -> list[str]:
        return bases_verdict(args, out, candidates, logdir, sweep, base_name, left_out)

    lines = verdict()
    return lines + (drifted_section(logdir, args.drop_drifted, verdict) if args.drop_drifted is not None else [])


def bases_verdict(
    args: argparse.Namespace,
    out: Path,
    candidates: list[Candidate],
    logdir: Path,
    sweep: Path | None,
    base_name: str,
    left_out: frozenset[Path] = frozenset(),
) -> list[str]:
    """--bases-in-grid's verdict: each run `base_name` (the grid's default-cap allreduce runs) not in `left_out` as the
    base in turn, pooled."""
    bases = base_runs(logdir, base_name, left_out)
    if len(bases) < 2:
        return [f"- {len(bases)} base run left: too few to pool (two or more)"]
    lines, pooled, within = [], [], 0
    for base in bases:
        verdict = grid_verdict(args, out, base, candidates, logdir, sweep, in_grid=True, left_out=left_out)
        lines += [f"#### base run {base}", "", *verdict.lines, ""]
        pooled += verdict.errors
        within += verdict.within
    spread = (
        f"{median_and_worst(statistics.median(pooled), max(pooled))} over {len(pooled)} predictions"
        if pooled
        else "no setting besides the base's was measured"
    )
    lines += [
        f"Pooled over the {len(bases)} base runs: {spread}; the recommended setting was the measured best or "
        f"within its spread from {within} of {len(bases)} bases",
        "",
        floor_line(logdir, left_out),
    ]
    return lines


def validate_world_sizes(
    args: argparse.Namespace, out: Path, base: Path, sizes: list[int], sweep: Path | None
) -> list[str]:
    lines = ["| world size | predicted ms | measured ms | runs | error |", "|---:|---:|---:|---|---:|"]
    for n in sizes:
        advice = advise_json(base, out, ["--world-size", str(n), "--caps", "25", "--hooks", "allreduce"], sweep)
        pred = advice["current"]["predicted_step_ms"]
        logdir = out / f"world{n}"
        schedule = [(r, {"--comm-hook": "allreduce"}) for r in range(1, args.repeat + 1)]
        run_schedule(args, schedule, logdir, [*devices(args, n), *workload_args(args)], n)
        runs = [s for v in measured_steps(logdir).values() for s in v]
        if not runs:
            lines.append(f"| {n} | {pred:.1f} | no run | | |")
            continue
        median = statistics.median(runs)
        listed = ", ".join(f"{r:.1f}" for r in runs)
        lines.append(f"| {n} | {pred:.1f} | {median:.1f} | {listed} | {100 * (pred / median - 1):+.1f} % |")
    return lines


PROG = "python -m bench.advisor_validation"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of the base run and the grid")
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--seq-len", type=int, help="token models: the sequence length")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument(
        "--cpu-threads",
        type=int,
        help="train.py's --cpu-threads for every run: with --extrapolate on a host with a core per thread, each "
        "rank computes alike at every world size, as the prediction assumes (default: train.py's share of the cores)",
    )
    parser.add_argument("--calibration-every", type=int, default=10, help="more compute-only samples than the default")
    parser.add_argument("--caps", default="1,5,25,100")
    parser.add_argument("--hooks", default="allreduce,fp16")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--extrapolate", default="", help="world sizes to predict from the base run, e.g. 3,4")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="a raw sweep first, where the grid runs; the in-run fit where it exists, else the sweep",
    )
    parser.add_argument(
        "--two-hosts", type=float, default=0, metavar="RATE", help="netns hosts, one rank each, links of RATE Mbit/s"
    )
    parser.add_argument(
        "--switch",
        action="store_true",
        help="with --two-hosts: --nproc hosts behind one switch, each link RATE; --extrapolate's sizes on as many",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep the runs an earlier call left under --out; predict and compare again"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run only what an earlier, cut call left unfinished under --out (the grid in the same order), then "
        "predict and compare",
    )
    parser.add_argument(
        "--bases-in-grid",
        action="store_true",
        help="no separate base run: each of the grid's default-cap allreduce runs in turn is the base",
    )
    parser.add_argument(
        "--drop-drifted",
        type=float,
        metavar="PCT",
        help="also give the verdict without the runs whose compute-only forward+backward lies over PCT %% from the "
        "grid's median (the host's drift); the verdict as measured stays first",
    )
    parser.add_argument("--run-timeout", type=float, default=600.0, help="seconds a run on namespace hosts may take")
    parser.add_argument("--out", default="bench-out/advisor")
    parser.add_argument("--pool", nargs="+", metavar="REPORT",
                        help="run nothing: pool these report.md files' errors (advice.VALIDATED_ERROR)")  # fmt: skip
    args = parser.parse_args()
    if args.pool:
        print(pool_reports([Path(name) for name in args.pool], parser))
        return
    try:
        sizes = [int(n) for n in args.extrapolate.split(",") if n]
    except ValueError:
        parser.error(f"--extrapolate takes world sizes such as 3,4, not {args.extrapolate!r}")
    if min([args.nproc, *sizes]) < 2:
        parser.error("--nproc and --extrapolate: world sizes of 2 or more (nothing is communicated at 1)")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        parser.error(f"--cpu-threads takes a positive number of threads, not {args.cpu_threads}")
    if args.drop_drifted is not None and not args.drop_drifted > 0:
        parser.error(f"--drop-drifted takes a percentage above 0, not {args.drop_drifted:g}")
    if args.resume and args.reuse:
        parser.error("--resume runs what is missing, --reuse runs nothing: give one")
    if args.switch and not args.two_hosts:
        parser.error("--switch joins namespace hosts: give their link's rate with --two-hosts RATE")
    if args.two_hosts and not args.switch and any(n != 2 for n in [args.nproc, *sizes]):
        parser.error("two hosts joined by one link run 2 ranks: other world sizes need --switch")
    for option, value in (("--max-steps", args.max_steps), ("--repeat", args.repeat), ("--batch-size", args.batch_size),
                          ("--image-size", args.image_size), ("--seq-len", args.seq_len)):  # fmt: skip
        check_count(option, value)
    check_count("--calibration-every", args.calibration_every, least=0)
    check_seconds("--run-timeout", args.run_timeout)
    if not (math.isfinite(args.two_hosts) and args.two_hosts >= 0):
        parser.error(f"--two-hosts takes a link rate in Mbit/s above 0, not {args.two_hosts:g}")
    # --caps "" --hooks "": no grid (the world sizes of --extrapolate alone).
    caps = grid.parse_list("--caps", args.caps, float, "1,5,25") if args.caps.strip(", ") else []
    if not all(math.isfinite(cap) and cap > 0 for cap in caps):
        parser.error(f"--caps {args.caps!r}: every cap must be a positive number of MiB")
    hooks = grid.parse_list("--hooks", args.hooks, str, "allreduce,fp16") if args.hooks.strip(", ") else []
    if unknown := [hook for hook in hooks if hook not in ADVISOR_HOOKS]:
        parser.error(f"--hooks {', '.join(unknown)}: the advisor models {', '.join(ADVISOR_HOOKS)}")
    check_writable(args.out, "--out", directory=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sweep = run_sweep(args, out) if args.sweep else None
    where = f"{args.nproc} ranks, loopback"
    if args.two_hosts:
        joined = "behind one switch, each link" if args.switch else "joined by a link of"
        where = f"{args.nproc} namespace hosts {joined} tbf {args.two_hosts:g} Mbit/s"
    if args.bases_in_grid:
        report = [f"### {args.model}, {where}, each default-cap allreduce run of the grid as the base", ""]
        report += validate_grid_bases(args, out, caps, hooks, sweep)
        base = base_runs(out / "grid", grid.run_name(args.model, config_of(default_candidate("allreduce"))))[0]
    else:
        base = run_base(args, out)
        report = [f"### {args.model}, {where}, base run {base}", ""]
        if caps and hooks and args.repeat > 0:
            report += validate_grid(args, out, base, caps, hooks, sweep)
    if sizes:
        report += ["", f"World sizes predicted from the {args.nproc}-rank base run:", ""]
        report += validate_world_sizes(args, out, base, sizes, sweep)
    text = "\n".join(report)
    (out / "report.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
