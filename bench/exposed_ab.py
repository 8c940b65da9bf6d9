"""Ground truth for the exposed-communication figure: train.py's in-run estimate against an A/B of whole runs.

    python -m bench.exposed_ab                                          # 4 conditions × 3 pairs, resnet18 at 64 px
    python -m bench.exposed_ab --pairs 2 --conditions loopback-quiet,shaped-quiet --out ab.jsonl
    python -m bench.exposed_ab --conditions shaped-quiet --rate-mbit 500 --steps 30

In-run, train.py measures exposed communication as forward + backward with communication minus the
compute-only forward + backward of its calibration steps (docs/METRICS.md). The A/B measures the same thing
from outside: the same settings run once with `--comm-hook allreduce` and once with `--comm-hook noop` (no
communication at all), each as a process of its own; step p50 (allreduce) − step p50 (noop) is what
communication added to the step. The two should agree.

Conditions (`--conditions`, comma-separated; default all four):
- loopback-quiet, loopback-hog: `python train.py` with its 2 local gloo ranks on loopback;
- shaped-quiet, shaped-hog: two simulated hosts (network namespaces joined by a veth pair, tests/netns.py)
  with 1 rank each under `torchrun --nnodes 2`, the link shaped to --rate-mbit each way by a tbf qdisc, so
  communication dominates the step (root only);
- -hog: one busy-loop process per core, started before the condition's pairs and killed after them.

Each condition runs --pairs pairs (allreduce, noop), the order alternating from pair to pair so that a host
that drifts favours neither. Every run gets a fresh --logdir and a fixed run name and version, so its
summary.json is found at <logdir>/<name>/v/summary.json and nowhere else.

Nothing measured waits for the end: each run's numbers go to stderr (lines starting with #) as it ends, with
the host's 1-minute load average then (its own ranks count about 2, the hogs 1 per core; more is other work
on the host, noise in both estimates); each pair likewise; each condition's Markdown row goes to stdout as
soon as its pairs are done; with --out, one JSON line per run, pair and condition is appended at once.
Ctrl-C, SIGTERM or SIGHUP stop the run in progress (the signal is passed on to train.py, which stops at a
step boundary), print the row of the condition's finished pairs, and exit 128 + the signal.

Columns: the in-run exposed p50 (median over the allreduce runs, with their range), its 95 % interval where
summary.json has `exposed_ms_ci95` (the median of the runs' bounds), the A/B estimate (median over pairs,
with their range), in-run / A/B, whether the A/B falls inside the in-run interval (the median A/B inside the
median interval, and per pair: that pair's A/B inside that pair's allreduce interval), the step p50s of both
sides, the communication p50, the overlap, the codec time, and in how many allreduce runs the harness called its
own estimate resolved (`exposure_resolved`; the verdicts' sentences are in the JSON), where summary.json has
them, and the range of the host's load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.common.cli import (
    DefaultsHelpFormatter,
    OneLineParser,
    UsageError,
    check_count,
    check_fresh,
    check_positive,
    check_seconds,
    check_writable,
    run_cli,
)
from harness.common.failures import Interrupted, SignalLatch, signal_name
from harness.common.names import SUMMARY_FILE
from tests.netns import Hosts, shaping_unavailable, two_hosts
from tests.two_host_train import LAUNCHER_VARS, torchrun_command

PROG = "python -m bench.exposed_ab"
REPO = Path(__file__).resolve().parent.parent
TRAIN_PY = REPO / "train.py"
VERSION = "v"  # every run's version directory: each run has a --logdir of its own, so one name is enough
HOOKS = ("allreduce", "noop")
CONDITIONS = ("loopback-quiet", "loopback-hog", "shaped-quiet", "shaped-hog")
MASTER_PORT = 29511  # inside a fresh namespace nothing else listens; each run takes the next port
STOP_GRACE_S = 30.0  # after passing a signal on, how long a run has to stop before what is left is killed
PEER_GRACE_S = 30.0  # after one host's torchrun failed, how long the other has to notice and stop on its own
# A busy loop that ends on its own within milliseconds of the bench's death (its parent changes), so no hog
# outlives a bench killed outright.
HOG_CODE = (
    "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(100_000):\n        pass\n"
)
TOTALS = ("step_ms_p50", "exposed_ms_p50", "exposed_ms_ci95", "overlap_pct_p50", "comm_ms_p50", "compute_only_ms")
OPTIONAL_TOTALS = ("exposure_verdict", "exposure_resolved", "codec_ms_p50")


@dataclass(frozen=True)
class Condition:
    name: str
    shaped: bool
    hog: bool


def condition(name: str) -> Condition:
    return Condition(name, shaped=name.startswith("shaped"), hog=name.endswith("hog"))


class RunFailed(Exception):
    """A train.py run did not finish with a complete summary.json; the message says which and why."""


# -- one run ----------------------------------------------------------------------------------------------------


def train_args(model: str, image_size: int | None, batch_size: int | None, steps: int, extra: list[str]) -> list[str]:
    """train.py's arguments shared by both sides of every pair (hook, logdir and name are added per run)."""
    out = ["--model", model, "--max-steps", str(steps)]
    out += ["--image-size", str(image_size)] if image_size else []
    out += ["--batch-size", str(batch_size)] if batch_size else []
    return out + extra


def _env(base: dict[str, str]) -> dict[str, str]:
    """`base` without a launcher's variables, with the run's version fixed (config.RUN_VERSION_ENV)."""
    env = {k: v for k, v in base.items() if k not in LAUNCHER_VARS}
    env.update(COMMBENCH_RUN_VERSION=VERSION, PYTHONUNBUFFERED="1")
    return env


def summary_path(logdir: Path, name: str) -> Path:
    return logdir / name / VERSION / SUMMARY_FILE


def read_summary(logdir: Path, name: str) -> dict:
    """The run's summary.json, which must say the run completed; RunFailed otherwise."""
    path = summary_path(logdir, name)
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise RunFailed(f"{name}: no readable {path}: {err}") from None
    if summary.get("completed") is not True:
        raise RunFailed(f"{name}: {path} says the run did not complete: {summary.get('reason')}")
    return summary


def _popen(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    # A session of its own: the run (with its ranks, or torchrun's workers) is one process group that this
    # script signals, and a terminal's Ctrl-C reaches this script alone, which passes it on once.
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen], signum: int, grace_s: float) -> None:
    """Pass `signum` to each run's process group, then SIGKILL whatever of it is left after `grace_s`."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the group that did not stop in time
        proc.wait()


def _wait(procs: list[subprocess.Popen], timeout_s: float, signals: SignalLatch | None) -> list[int]:
    """Wait for every process; on a signal (Interrupted from the latch) or the timeout, stop them all. When one
    fails, the others (its peers) have PEER_GRACE_S to stop on their own before they are stopped too."""
    deadline = time.monotonic() + timeout_s
    try:
        if signals is not None:
            signals.armed = True
            if signals.received is not None:  # it came while the run was being started
                raise Interrupted(signals.received)
        while any(proc.poll() is None for proc in procs):
            now = time.monotonic()
            if now > deadline:
                raise subprocess.TimeoutExpired(procs[0].args, timeout_s)
            if any(proc.returncode not in (None, 0) for proc in procs):
                deadline = min(deadline, now + PEER_GRACE_S)
            time.sleep(0.2)
        return [proc.returncode for proc in procs]
    except Interrupted as stop:
        if signals is not None:
            signals.armed = False
        _stop(procs, stop.signum, STOP_GRACE_S)
        raise
    except subprocess.TimeoutExpired:
        _stop(procs, signal.SIGTERM, 5.0)
        codes = [proc.returncode for proc in procs]
        if any(code not in (None, 0, -signal.SIGTERM, -signal.SIGKILL) for code in codes):
            return codes  # a peer failed first: its own exit code says more than the wait
        raise RunFailed(f"timed out after {timeout_s:.0f} s") from None
    finally:
        if signals is not None:
            signals.armed = False


def _last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no output)"
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    return (errors or lines or ["(no output)"])[-1].strip()


def run_loopback(args: list[str], hook: str, logdir: Path, name: str, timeout_s: float,
                 signals: SignalLatch | None = None) -> dict:  # fmt: skip
    """`python train.py` (2 local gloo ranks on loopback) with `--comm-hook hook`; returns its summary."""
    cmd = [sys.executable, str(TRAIN_PY), *args, "--comm-hook", hook, "--logdir", str(logdir), "--run-name", name]
    env = _env(dict(os.environ))
    env["GLOO_SOCKET_IFNAME"] = "lo"
    log = logdir / f"{name}.log"
    (code,) = _wait([_popen(cmd, env, log)], timeout_s, signals)
    if code != 0:
        raise RunFailed(f"{name}: train.py exited {code}: {_last_line(log)} (log: {log})")
    return read_summary(logdir, name)


def run_two_hosts(hosts: Hosts, args: list[str], hook: str, logdir: Path, name: str, port: int,
                  timeout_s: float, signals: SignalLatch | None = None) -> dict:  # fmt: skip
    """train.py with `--comm-hook hook` on both hosts, 1 rank each under `torchrun --nnodes 2`, rendezvous on
    host 0 at `port`; returns the summary that rank 0 (host 0) writes."""
    procs, logs = [], []
    for node in (0, 1):
        run_args = [str(TRAIN_PY), *args, "--comm-hook", hook, "--logdir", str(logdir), "--run-name", name]
        cmd = torchrun_command(hosts, node, port, run_args)
        logs.append(logdir / f"{name}.node{node}.log")
        try:
            procs.append(_popen(cmd, _env(hosts.env(node)), logs[-1]))
        except BaseException:
            _stop(procs, signal.SIGKILL, 0.0)
            raise
    codes = _wait(procs, timeout_s, signals)
    # The host that failed on its own first (a positive code), rather than a peer that was stopped after it.
    for node, code in sorted(enumerate(codes), key=lambda item: (item[1] is None or item[1] <= 0, item[0])):
        if code != 0:
            raise RunFailed(
                f"{name}: torchrun on host {node} exited {code}: {_last_line(logs[node])} (log: {logs[node]})"
            )
    return read_summary(logdir, name)


# -- hogs ---------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def cpu_hog(cores: int | None = None) -> Iterator[list[int]]:
    """One busy-loop process per core (os.cpu_count() by default) while inside; killed by pid on the way out."""
    procs = [
        subprocess.Popen([sys.executable, "-c", HOG_CODE], stdin=subprocess.DEVNULL)
        for _ in range(cores or os.cpu_count() or 1)
    ]
    try:
        yield [proc.pid for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


# -- numbers ------------------------------------------------------------------------------------------------------


def run_record(summary: dict, logdir: Path, name: str) -> dict:
    """What the table needs from one run's summary.json (None where a field is absent)."""
    totals = summary.get("totals", {})
    record = {key: totals.get(key) for key in TOTALS + OPTIONAL_TOTALS}
    return {"run_dir": str(summary_path(logdir, name).parent), "steps_measured": totals.get("steps_measured"), **record}


def inside(value: float | None, interval) -> bool | None:
    """Whether `value` lies in the closed interval [lo, hi]; None when either is missing."""
    if value is None or not isinstance(interval, (list, tuple)) or len(interval) != 2 or None in interval:
        return None
    return interval[0] <= value <= interval[1]


def pair_record(cond: str, pair: int, order: list[str], runs: dict[str, dict]) -> dict:
    """One pair: both runs' numbers, the A/B (step p50 allreduce − step p50 noop) and the in-run figure."""
    ab = runs["allreduce"]["step_ms_p50"] - runs["noop"]["step_ms_p50"]
    in_run = runs["allreduce"]["exposed_ms_p50"]
    return {
        "record": "pair",
        "condition": cond,
        "pair": pair,
        "order": order,
        "ab_ms": ab,
        "in_run_exposed_ms": in_run,
        "in_run_over_ab": in_run / ab if ab else None,
        "ab_in_ci95": inside(ab, runs["allreduce"]["exposed_ms_ci95"]),
        **runs,
    }


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _range(values: list) -> list[float] | None:
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None


def condition_row(cond: str, pairs: list[dict], extra: dict | None = None) -> dict:
    """A condition's summary over its pairs: medians and ranges of both estimates, and their agreement."""
    ar = [p["allreduce"] for p in pairs]
    noop = [p["noop"] for p in pairs]
    in_run = [r["exposed_ms_p50"] for r in ar]
    ab = [p["ab_ms"] for p in pairs]
    cis = [r["exposed_ms_ci95"] for r in ar if inside(0.0, r["exposed_ms_ci95"]) is not None]
    ci = [_median([c[0] for c in cis]), _median([c[1] for c in cis])] if cis else None
    per_pair = [p["ab_in_ci95"] for p in pairs if p["ab_in_ci95"] is not None]
    in_run_p50, ab_p50 = _median(in_run), _median(ab)
    resolved = [r.get("exposure_resolved") for r in ar if r.get("exposure_resolved") is not None]
    return {
        "record": "condition",
        "condition": cond,
        "pairs": len(pairs),
        "in_run_exposed_ms": in_run_p50,
        "in_run_exposed_ms_range": _range(in_run),
        "in_run_ci95_ms": ci,
        "ab_ms": ab_p50,
        "ab_ms_range": _range(ab),
        "in_run_over_ab": in_run_p50 / ab_p50 if in_run_p50 is not None and ab_p50 else None,
        "ab_in_ci95": inside(ab_p50, ci),
        "ab_in_ci95_pairs": [sum(per_pair), len(per_pair)] if per_pair else None,
        "step_ms_allreduce": _median([r["step_ms_p50"] for r in ar]),
        "step_ms_noop": _median([r["step_ms_p50"] for r in noop]),
        "comm_ms": _median([r["comm_ms_p50"] for r in ar]),
        "overlap_pct": _median([r["overlap_pct_p50"] for r in ar]),
        "codec_ms": _median([r["codec_ms_p50"] for r in ar]),
        "resolved_runs": [sum(resolved), len(resolved)] if resolved else None,
        "verdicts": [r["exposure_verdict"] for r in ar if r.get("exposure_verdict") is not None],
        "load_1m_range": _range([r.get("load_1m") for r in ar + noop]),
        **(extra or {}),
    }


# -- the table ----------------------------------------------------------------------------------------------------

COLUMNS = (
    "condition", "pairs", "in-run exposed p50 ms [runs' range]", "in-run 95% CI ms", "A/B ms [pairs' range]",
    "in-run / A/B", "A/B in CI", "step p50 ms allreduce / noop", "comm p50 ms", "overlap %", "codec p50 ms",
    "harness verdict", "host load 1 min",
)  # fmt: skip


def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _span(values: list[float] | None) -> str:
    return "" if values is None else f" [{_ms(values[0])}–{_ms(values[1])}]"


def markdown_header() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def markdown_row(row: dict) -> str:
    if row["ab_in_ci95"] is None:
        in_ci = "n/a (no exposed_ms_ci95)" if row["in_run_ci95_ms"] is None else "–"
    else:
        in_ci = "yes" if row["ab_in_ci95"] else "no"
    if row["ab_in_ci95_pairs"] is not None:
        in_ci += f" ({row['ab_in_ci95_pairs'][0]}/{row['ab_in_ci95_pairs'][1]} pairs)"
    ci = row["in_run_ci95_ms"]
    name = row["condition"] + (f" ({row['rate_mbit']:g} Mbit/s)" if row.get("rate_mbit") else "")
    cells = [
        name + (" (interrupted)" if row.get("interrupted") else ""),
        str(row["pairs"]),
        _ms(row["in_run_exposed_ms"]) + _span(row["in_run_exposed_ms_range"]),
        "–" if ci is None else f"{_ms(ci[0])}–{_ms(ci[1])}",
        _ms(row["ab_ms"]) + _span(row["ab_ms_range"]),
        _ms(row["in_run_over_ab"], 2),
        in_ci,
        f"{_ms(row['step_ms_allreduce'])} / {_ms(row['step_ms_noop'])}",
        _ms(row["comm_ms"]),
        _ms(row["overlap_pct"]),
        _ms(row["codec_ms"], 2),
        "–" if row["resolved_runs"] is None else "resolved in {}/{} runs".format(*row["resolved_runs"]),
        "–" if row["load_1m_range"] is None else f"{row['load_1m_range'][0]:.1f}–{row['load_1m_range'][1]:.1f}",
    ]
    return "| " + " | ".join(cells) + " |"


def run_line(cond: str, pair: int, hook: str, run: dict, seconds: float) -> str:
    return (
        f"# {cond} pair {pair} {hook}: step p50 {_ms(run['step_ms_p50'])} ms, comm p50 {_ms(run['comm_ms_p50'])} ms, "
        f"in-run exposed p50 {_ms(run['exposed_ms_p50'])} ms ({seconds:.0f} s, load {run.get('load_1m', 0):.1f}, "
        f"{run['run_dir']})"
    )


def pair_line(rec: dict) -> str:
    ar, noop = rec["allreduce"], rec["noop"]
    ci = ar["exposed_ms_ci95"]
    return (
        f"# {rec['condition']} pair {rec['pair']} ({' then '.join(rec['order'])}): step p50 allreduce "
        f"{_ms(ar['step_ms_p50'])} ms, noop {_ms(noop['step_ms_p50'])} ms; A/B {_ms(rec['ab_ms'])} ms, in-run "
        f"exposed {_ms(rec['in_run_exposed_ms'])} ms"
        + ("" if ci is None else f" (95% CI {_ms(ci[0])}–{_ms(ci[1])})")
        + f", in-run / A/B {_ms(rec['in_run_over_ab'], 2)}"
    )


# -- the bench ----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="train.py's in-run exposed communication against an A/B of allreduce and noop runs.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="comma-separated subset of these")
    parser.add_argument("--pairs", type=int, default=3, help="(allreduce, noop) pairs per condition")
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help="train.py --max-steps (its warm-up and calibration steps are not measured)",
    )
    parser.add_argument("--model", default="resnet18", help="train.py --model")
    parser.add_argument("--image-size", type=int, default=64, help="train.py --image-size (0: the model's own)")
    parser.add_argument("--batch-size", type=int, help="train.py --batch-size (default: train.py's)")
    parser.add_argument(
        "--rate-mbit",
        type=float,
        default=200.0,
        help="the shaped link's rate each way (Mbit/s): slow enough that communication dominates the step",
    )
    parser.add_argument("--train-args", default="", help='more train.py arguments, e.g. "--bucket-cap-mb 5"')
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one run")
    parser.add_argument("--out", help="append one JSON line per run, pair and condition here, as each completes")
    parser.add_argument("--logdir", help="keep every run under this folder (default: a temporary one, removed)")
    return parser


def _conditions(text: str) -> list[Condition]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CONDITIONS]
    if unknown or not names:
        raise UsageError(f"--conditions {text!r}: choose from {', '.join(CONDITIONS)} (comma-separated)")
    return [condition(name) for name in dict.fromkeys(names)]


def run_name(cond: Condition, pair: int, hook: str) -> str:
    """A run's name, which is also its --logdir's under the bench's root."""
    return f"{cond.name}-p{pair}-{hook}"


def check_train_args(argv: list[str], given: str) -> None:
    """`argv`, train.py's arguments, checked by train.py's own parse and option checks (not yet against this
    machine, which each run's launcher sets), so that an option it would refuse is one line now rather than a failed
    first run; `given` is the bench option they came from. Loads torch (the model's check)."""
    from harness.train.config import parse_config

    try:
        parse_config(argv, resolve=False)
    except UsageError as err:
        raise UsageError(f"{given}: train.py would refuse it: {err}") from None


def _check(args: argparse.Namespace) -> tuple[list[Condition], list[str]]:
    conditions = _conditions(args.conditions)
    check_count("--pairs", args.pairs)
    check_count("--steps", args.steps, least=10)
    check_count("--batch-size", args.batch_size)
    check_count("--image-size", args.image_size, least=0)  # 0: the model's own
    check_positive("--rate-mbit", args.rate_mbit, "Mbit/s")
    check_seconds("--timeout", args.timeout)
    try:
        extra = shlex.split(args.train_args)
    except ValueError as err:
        raise UsageError(f"--train-args {args.train_args!r}: {err}") from None
    owned = {"--comm-hook", "--logdir", "--run-name", "--max-steps", "--model", "--devices", "--num-nodes"}
    clash = sorted({arg.split("=")[0] for arg in extra} & owned)
    if clash:
        raise UsageError(f"--train-args may not set {', '.join(clash)}: the bench sets them")
    check_writable(args.out, "--out")
    check_writable(args.logdir, "--logdir", directory=True)
    names = [run_name(cond, pair, hook) for cond in conditions for pair in range(args.pairs) for hook in HOOKS]
    check_fresh("--logdir", args.logdir, names)
    # Both load torch (seconds), so they come after the checks that need nothing.
    from models import get_model_spec

    get_model_spec(args.model)
    check_train_args(train_args(args.model, args.image_size or None, args.batch_size, args.steps, extra),
                     f"--train-args {args.train_args!r}")  # fmt: skip
    if any(c.shaped for c in conditions) and (why := shaping_unavailable()) is not None:
        raise UsageError(f"the shaped conditions need network namespaces and tc: {why}")
    check_writable(args.logdir, "--logdir", directory=True, create=args.logdir is not None)
    return conditions, extra


def _emit(record: dict, out: str | None) -> None:
    if out:
        with open(out, "a") as file:
            file.write(json.dumps(record) + "\n")


@contextlib.contextmanager
def _link(cond: Condition, rate_mbit: float) -> Iterator[Hosts | None]:
    """The two shaped hosts for a shaped condition (the rate read back from tc), else nothing."""
    if not cond.shaped:
        yield None
        return
    with two_hosts("hxab", rate_mbit=rate_mbit) as hosts:
        for host in (0, 1):
            shaped = hosts.shaped_rate_mbit(host)
            if shaped is None or abs(shaped - rate_mbit) > 0.01 * rate_mbit:
                raise RunFailed(f"host {host}'s link is shaped to {shaped} Mbit/s, not {rate_mbit:g}")
        yield hosts


@dataclass
class Bench:
    """The runs of one invocation: where they go, what they share, and what is written as each ends."""

    args: argparse.Namespace
    shared: list[str]
    root: Path
    signals: SignalLatch
    port: int = MASTER_PORT

    def run(self, cond: Condition, hosts: Hosts | None, pair: int, hook: str) -> dict:
        """One train.py run in a fresh --logdir; its numbers, also written to --out and stderr at once."""
        name = run_name(cond, pair, hook)
        logdir = self.root / name
        logdir.mkdir(parents=True)
        started = time.monotonic()
        a = self.args
        if hosts is None:
            summary = run_loopback(self.shared, hook, logdir, name, a.timeout, self.signals)
        else:
            self.port += 1  # a port of its own: the last run's may still be in TIME_WAIT
            summary = run_two_hosts(hosts, self.shared, hook, logdir, name, self.port, a.timeout, self.signals)
        run = {**run_record(summary, logdir, name), "load_1m": os.getloadavg()[0]}
        seconds = time.monotonic() - started
        _emit({"record": "run", "condition": cond.name, "pair": pair, "hook": hook, "seconds": seconds, **run}, a.out)
        print(run_line(cond.name, pair, hook, run, seconds), file=sys.stderr, flush=True)
        return run

    def condition(self, cond: Condition, pairs: list[dict]) -> None:
        """Append the condition's pairs to `pairs` as each completes (the caller keeps them if this raises)."""
        with _link(cond, self.args.rate_mbit) as hosts, cpu_hog() if cond.hog else contextlib.nullcontext():
            for pair in range(self.args.pairs):
                order = list(HOOKS if pair % 2 == 0 else HOOKS[::-1])
                runs = {}
                for hook in order:
                    if self.signals.received is not None:  # one that came between runs
                        raise Interrupted(self.signals.received)
                    runs[hook] = self.run(cond, hosts, pair, hook)
                record = pair_record(cond.name, pair, order, runs)
                pairs.append(record)
                _emit(record, self.args.out)
                print(pair_line(record), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    conditions, extra = _check(args)
    shared = train_args(args.model, args.image_size or None, args.batch_size, args.steps, extra)
    header = {"record": "header", "argv": sys.argv[1:], "train_args": shared, "rate_mbit": args.rate_mbit,
              "cpus": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    _emit(header, args.out)
    print(f"# train.py {shlex.join(shared)}; {args.pairs} pairs (allreduce, noop) per condition", flush=True)
    print(markdown_header(), flush=True)
    signals = SignalLatch().install()  # armed while a run is waited for; otherwise acted on between runs
    with contextlib.ExitStack() as stack:
        root = Path(args.logdir) if args.logdir else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        bench = Bench(args, shared, root, signals)
        for cond in conditions:
            pairs: list[dict] = []
            extra_cols = {"rate_mbit": args.rate_mbit} if cond.shaped else {}
            try:
                bench.condition(cond, pairs)
            except (Interrupted, RunFailed) as stop:
                if pairs:  # what was measured before the stop
                    row = condition_row(cond.name, pairs, {**extra_cols, "interrupted": True})
                    _emit(row, args.out)
                    print(markdown_row(row), flush=True)
                if isinstance(stop, RunFailed):
                    print(f"{PROG}: error: {cond.name}: {stop}", file=sys.stderr, flush=True)
                    return 1
                print(f"{PROG}: interrupted by {signal_name(stop.signum)} in {cond.name} after {len(pairs)} pairs",
                      file=sys.stderr, flush=True)  # fmt: skip
                return 128 + stop.signum
            row = condition_row(cond.name, pairs, extra_cols)
            _emit(row, args.out)
            print(markdown_row(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
