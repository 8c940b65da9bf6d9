"""Run train.py over a grid of communication settings, then show the comparison table.

    python -m harness.grid --model resnet50 --bucket-cap-mb 1,5,25,100 \
        --comm-hook allreduce,fp16,bf16,powersgd
    python -m harness.grid --model gpt2 --bucket-cap-mb 5,25 --launcher "torchrun --nproc-per-node 8" \
        -- --batch-size 8 --max-steps 100

Each configuration runs as its own train.py process (under --launcher, if given) in its own run directory
under --logdir, with its output in <logdir>/logs/<run>.log. A configuration that fails is reported and
the sweep goes on. Arguments after `--` go to every train.py run unchanged. The table is harness.compare's,
also written as Markdown and CSV into --logdir (comparison.md, comparison.csv).

Ctrl-C, SIGTERM or SIGHUP stops the grid: the signal is passed on to the running train.py and its ranks
(which keep a partial summary, as train.py does when signalled), whatever of them is left after STOP_GRACE_S
is killed, the table shows the runs that finished, and the exit code is 128 + the signal. Every train.py
runs in a process group of its own, so that nothing it started outlives the grid.

`--repeat N` runs the whole grid N times, every other pass in reverse order so that a machine that drifts
during the sweep does not favour the configurations that come first. A repeat is another version under the
same run name, and the table then shows one row per configuration: the median of its N runs, with the spread
of their step times, so a difference smaller than the spread reads as noise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.analysis.comparison import build_rows, select_baseline
from harness.analysis.comparison_tables import format_csv, format_markdown, format_text
from harness.analysis.runs import find_runs, load_runs
from harness.common.cli import DefaultsHelpFormatter, OneLineParser, UsageError, run_cli
from harness.common.dist_env import NVLS_OFF_ENV
from harness.common.failures import Interrupted, SignalLatch, say, signal_name
from harness.common.names import HOOK_NAMES
from harness.common.numbers import plural

PROG = "python -m harness.grid"
TRAIN_PY = Path(__file__).resolve().parent.parent / "train.py"
# After passing a signal on, how long a train.py run has to stop its ranks at a step boundary and write their
# partial summary before everything left of it is killed.
STOP_GRACE_S = 60.0


def parse_list(flag: str, text: str, convert: type, example: str) -> list:
    """'1,5,25' -> [1, 5, 25]; a bad item, none, or one given twice (that is --repeat's job) is a UsageError
    naming the flag."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{flag} needs at least one value, e.g. {flag} {example}")
    try:
        values = [convert(item) for item in items]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: every item must be a {convert.__name__}") from None
    if len(set(values)) < len(values):
        raise UsageError(f"{flag} {text!r} names a value twice; --repeat N runs every setting N times")
    return values


# What the grid sets for each run itself (train.py's dest for each): given again after --, in any spelling argparse
# takes, the run's name and the table would disagree with what it ran.
GRID_OWNED = {"model": "--model", "logdir": "--logdir", "run_name": "--run-name", "bucket_cap_mb": "--bucket-cap-mb",
              "comm_hook": "--comm-hook"}  # fmt: skip


def check_train_args(
    model: str, logdir: Path, configs: list[dict[str, str]], train_args: list[str], resolve: bool
) -> None:
    """Each run's train.py command line checked as train.py will check it (with `resolve`, against this machine
    too, as train.py started without a launcher sees it), so that a mistake is one line now rather than a failed
    run per configuration; and none of the grid's own flags given again after --. Loads torch (the model)."""
    from harness.train.config import TrainConfig, build_parser

    parser = build_parser()
    for config in configs:
        name = run_name(model, config)
        own = ["--model", model, "--logdir", str(logdir), "--run-name", name, *itertools.chain(*config.items())]
        try:
            given, parsed = vars(parser.parse_args(own)), parser.parse_args([*own, *train_args])
        except UsageError as err:
            raise UsageError(f"after -- (train.py's arguments): {err}") from None
        changed = [flag for dest, flag in GRID_OWNED.items() if getattr(parsed, dest) != given[dest]]
        if changed:
            raise UsageError(f"after --: {changed[0]} is the grid's to set; give it before --")
        try:
            checked = TrainConfig(**vars(parsed))
            if resolve:
                checked.resolve()
        except UsageError as err:
            raise UsageError(f"train.py would refuse run {name}: {err}") from None


def check_baseline(baseline: str | None, names: list[str]) -> None:
    """A --baseline that names none of the grid's runs, or several, is a UsageError now, by compare's own rule
    (select_baseline), not after the whole grid has run; a directory is left to compare."""
    if baseline and not Path(baseline).is_dir():
        select_baseline(names, baseline)


def parse_launcher(text: str) -> list[str]:
    """--launcher split as a shell would, its program found on PATH; a UsageError otherwise."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise UsageError(f"--launcher {text!r}: {err}") from None
    if words and shutil.which(words[0]) is None:
        raise UsageError(f"--launcher {text!r}: {words[0]!r} is not a program on PATH")
    return words


def grid(bucket_caps: list[float], hooks: list[str]) -> list[dict[str, str]]:
    """Every (bucket cap, hook) combination, as train.py flag values."""
    return [{"--bucket-cap-mb": f"{cap:g}", "--comm-hook": hook} for cap, hook in itertools.product(bucket_caps, hooks)]


def run_order(configs: list[dict[str, str]], repeats: int) -> list[tuple[int, dict[str, str]]]:
    """(repeat, config) in run order: the grid once per repeat, every second pass reversed."""
    order = []
    for repeat in range(1, repeats + 1):
        order += [(repeat, config) for config in (configs if repeat % 2 else configs[::-1])]
    return order


def run_name(model: str, config: dict[str, str]) -> str:
    """<model>-bucket<cap>-<hook>; a config without --bucket-cap-mb runs DDP's default ("bucketdefault")."""
    return f"{model}-bucket{config.get('--bucket-cap-mb', 'default')}-{config['--comm-hook']}"


def build_command(launcher: list[str], model: str, config: dict[str, str], logdir: Path, extra: list[str]) -> list[str]:
    cmd = [*launcher, str(TRAIN_PY)] if launcher else [sys.executable, str(TRAIN_PY)]
    cmd += ["--model", model, "--logdir", str(logdir), "--run-name", run_name(model, config)]
    for flag, value in config.items():
        cmd += [flag, value]
    return cmd + extra


def run_config(cmd: list[str], log_path: Path, signals: SignalLatch) -> tuple[int, float]:
    """Run one train.py to completion, its output to `log_path`; returns (exit code, seconds).

    A signal to the grid (`signals` raises Interrupted while the run is waited for) is passed on to the run's
    process group, and then raised again once the run has stopped."""
    env = {**os.environ, **NVLS_OFF_ENV}
    start = time.perf_counter()
    with open(log_path, "w") as log:
        # A session of its own: train.py, its ranks (and a launcher's workers) form one process group that the
        # grid signals, and a terminal's Ctrl-C reaches the grid alone, which passes it on once.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            signals.armed = True
            if signals.received is not None:  # it came while the run was being started
                raise Interrupted(signals.received)
            code = proc.wait()
        except Interrupted as stop:
            signals.armed = False
            stop_run(proc, stop.signum)
            raise
        finally:
            signals.armed = False
    return code, time.perf_counter() - start


def stop_run(proc: subprocess.Popen, signum: int, grace_s: float = STOP_GRACE_S) -> None:
    """Pass `signum` on to a run's process group, then SIGKILL whatever is left of it after `grace_s`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    # train.py waits for its ranks before it exits; anything of the group still there did not stop in time.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_schedule(
    schedule: list[tuple[int, dict[str, str]]],
    model: str,
    logdir: Path,
    launcher: list[str],
    train_args: list[str],
    signals: SignalLatch,
) -> list[str]:
    """Run every (repeat, config) of `schedule` in order, each as its own train.py under `logdir`; the names of
    the runs that failed. A signal stops the schedule after passing it on to the running train.py (noted on
    stderr; `signals.received` says which), and what finished stays for the comparison."""
    repeats = max((repeat for repeat, _ in schedule), default=1)
    failed: list[str] = []
    finished = 0
    try:
        for i, (repeat, config) in enumerate(schedule, 1):
            if signals.received is not None:
                raise Interrupted(signals.received)
            name = run_name(model, config)
            log_name = f"{name}.log" if repeats == 1 else f"{name}-repeat{repeat}.log"
            progress = f"[{i}/{len(schedule)}] {name}" + (f" (repeat {repeat})" if repeats > 1 else "")
            cmd = build_command(launcher, model, config, logdir, train_args)
            print(f"{progress}: {shlex.join(cmd)}", flush=True)
            try:
                code, seconds = run_config(cmd, logdir / "logs" / log_name, signals)
            except Interrupted:
                print(f"{progress}: stopped (see logs/{log_name})", flush=True)
                raise
            status = "ok" if code == 0 else f"FAILED (exit {code}, see logs/{log_name})"
            print(f"{progress}: {status} in {seconds:.0f} s", flush=True)
            finished += 1
            if code != 0:
                failed.append(name)
    except Interrupted as stop:
        say(
            PROG,
            f"interrupted by {signal_name(stop.signum)} after {finished} of {len(schedule)} runs: "
            "comparing what was measured",
        )
    return failed


def prepare_logdir(logdir: Path) -> None:
    """Create `logdir` and its logs/ folder; a UsageError where that cannot be done."""
    try:
        (logdir / "logs").mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--logdir {str(logdir)!r} cannot be created: {err.strerror}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Run train.py over bucket sizes and comm hooks, then compare the runs.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="resnet50", help="the model every run trains (train.py --model)")
    parser.add_argument("--bucket-cap-mb", default="1,5,25,100", help="comma-separated DDP bucket caps (MiB)")
    parser.add_argument(
        "--comm-hook", default="allreduce,fp16,bf16,powersgd", help=f"comma-separated, from: {', '.join(HOOK_NAMES)}"
    )
    parser.add_argument("--logdir", help="where the runs go (default: runs/sweep-<model>-<time>)")
    parser.add_argument("--launcher", default="", help='prefix for each run, e.g. "torchrun --nproc-per-node 8"')
    parser.add_argument("--baseline", help="baseline run for the table (default: the first)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the grid this many times; the table shows each row's median"
    )
    parser.add_argument("train_args", nargs="*", help="after --: arguments for every train.py run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    caps = parse_list("--bucket-cap-mb", args.bucket_cap_mb, float, "1,5,25")
    if not all(math.isfinite(cap) and cap > 0 for cap in caps):
        raise UsageError(f"--bucket-cap-mb {args.bucket_cap_mb!r}: every cap must be a positive number of MiB")
    hooks = parse_list("--comm-hook", args.comm_hook, str, "allreduce,fp16")
    unknown = [hook for hook in hooks if hook not in HOOK_NAMES]
    if unknown:
        raise UsageError(f"--comm-hook {', '.join(unknown)} not known; choose from: {', '.join(HOOK_NAMES)}")
    if args.repeat < 1:
        raise UsageError(f"--repeat {args.repeat}: must be at least 1")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logdir = Path(args.logdir or f"runs/sweep-{args.model}-{stamp}")
    launcher = parse_launcher(args.launcher)
    configs = grid(caps, hooks)
    check_baseline(args.baseline, [run_name(args.model, config) for config in configs])
    earlier = find_runs([str(logdir)]) if logdir.is_dir() else []
    if earlier:  # the table would mix them with this grid's, and take one of them as the baseline
        raise UsageError(
            f"--logdir {str(logdir)!r} already holds {plural(len(earlier), 'run')}; give a new directory (python -m "
            "harness.compare shows runs of several directories side by side)"
        )
    # An unknown model fails here, not once per configuration; then each run's arguments as train.py checks them.
    # Both load torch (seconds), so they come last: the grid itself runs no model.
    from models import get_model_spec

    get_model_spec(args.model)
    check_train_args(args.model, logdir, configs, args.train_args, resolve=not launcher)
    prepare_logdir(logdir)
    schedule = run_order(configs, args.repeat)
    signals = SignalLatch().install()  # not armed: a signal between runs is acted on before the next
    failed = run_schedule(schedule, args.model, logdir, launcher, args.train_args, signals)

    def exit_code() -> int:  # a signal, even one that came while comparing, says more than a failed run
        return 128 + signals.received if signals.received is not None else 1 if failed else 0

    try:
        runs = load_runs([str(logdir)])
    except UsageError:
        if exit_code() == 0:
            raise
        # Every configuration failed (or was stopped) before writing anything: not a usage mistake.
        say(PROG, f"no run left a summary or event file under {logdir}: nothing to compare")
        return exit_code()
    rows = build_rows(runs, args.baseline, group_repeats=args.repeat > 1)
    print(format_text(rows))
    (logdir / "comparison.md").write_text(format_markdown(rows))
    (logdir / "comparison.csv").write_text(format_csv(rows))
    print(f"# written: {logdir / 'comparison.md'}, {logdir / 'comparison.csv'}")
    return exit_code()


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
