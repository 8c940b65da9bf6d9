"""Where train.py's host time goes, thread by thread: py-spy samples of a whole run, sorted into the harness's
own work and everything else.

    python -m bench.host_profile --model resnet50 --batch-size 128 --steps 300          # on one GPU
    python -m bench.host_profile --model resnet18 --image-size 32 --batch-size 2 --steps 200  # on a CPU

Why: on a host-bound step every millisecond of host work is step time (issue 11), and the harness's thread_time
counters see only the main thread's callback. py-spy (a sampling profiler outside the process, `pip install
py-spy`) sees every thread: the training loop, the autograd thread's Python (the comm hook), TensorBoard's
event writer. Each variant is one process, run as torchrun's single rank would be (rank 0 of 1, in-process),
under `py-spy record --threads --nonblocking` (it reads the process's memory without stopping it).

A sample is the harness's when its stack holds a frame of harness/ below the training loop (callback, hook,
stamps, step log, progress bar: anything but the entry points and the model's own training_step), or a frame
of TensorBoard's event writer. Only Python stacks are sampled: a thread running C++ with no Python frame (the
autograd engine between hooks, NCCL's threads) is not seen, so the figures are the Python-visible host time.
Per variant it prints, per thread, the ms of samples per training step, and the harness's part with its top
functions; `--out DIR` keeps each variant's raw collapsed stacks and a JSON line of the figures.

--native adds the C/C++ frames (py-spy pauses the process at each sample) and sorts each thread's samples by leaf
function, leaving out samples of a thread that waits. A whole run's native samples are mostly start-up and warm-up
(cuDNN autotuning, NVRTC compiling kernels), so sample the steady state with --attach-after and --duration:

    python -m bench.host_profile --native --batch-size 32 --steps 2000 --attach-after 45 --duration 15 \
        --variants fabric_alone,shipped                                                 # on one GPU
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.exposed_ab import check_train_args
from bench.vs_plain import VARIANTS as PAIR_VARIANTS
from bench.vs_plain import train_window
from harness.common.cli import (
    OneLineParser,
    UsageError,
    check_count,
    check_port,
    check_seconds,
    check_writable,
    run_cli,
)
from harness.common.dist_env import lone_rank_env

REPO = Path(__file__).resolve().parent.parent

# train.py as shipped and bench.vs_plain's one-change-at-a-time variants: the same names, the same arguments.
VARIANTS: dict[str, list[str]] = {"shipped": [], **PAIR_VARIANTS}
# The training loops' own files (--loop fabric, --loop trainer): a main-thread sample outside both is start-up or
# the end of the run.
TRAINING_LOOPS = ("harness/train/fabric_loop.py", "lightning/pytorch/loops/training_epoch_loop.py")
# Frames of harness/ that are entry points, the loop or the model's own work, not the harness's per-step cost.
NOT_HARNESS = ("train.py", "harness/common/cli.py", "harness/train/rank.py", "harness/train/trainer.py",
               "harness/train/module.py", "harness/common/local_launch.py", "models/", TRAINING_LOOPS[0])  # fmt: skip
WRITER = "tensorboard/summary/writer/"
# A --native sample with one of these functions among its last frames is a thread blocked, not running: C library
# and CPython waits, C++'s, Python's (whole names: cudaStreamWaitEvent or WorkNCCL::wait are CPU work, not waits).
BLOCKING = frozenset({
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait", "__pthread_cond_wait",
    "__pthread_cond_timedwait", "__futex_abstimed_wait_common", "__futex_abstimed_wait_common64", "futex_wait",
    "do_futex_wait", "sem_wait", "sem_timedwait", "sem_clockwait", "__new_sem_wait_slow64", "epoll_wait", "poll",
    "__poll", "select", "__select", "nanosleep", "clock_nanosleep", "__clock_nanosleep", "PyThread_acquire_lock_timed",
    "take_gil", "std::condition_variable::wait", "std::condition_variable::__wait_until_impl",
    "torch::autograd::ReadyQueue::pop", "Condition.wait", "Event.wait", "Thread.join", "Thread._wait_for_tstate_lock",
})  # fmt: skip
# How a blocked --native sample that waits for the GIL looks. py-spy folds CPython's own frames (take_gil included)
# into the Python frame they run, or drops them where a C extension called them, so the wait is a timed condition wait
# (CPython's GIL waits with a timeout) right under a Python frame or under the C function that takes the GIL back
# (torch's bindings, pybind11's ~gil_scoped_release). What is not a GIL wait: a Python frame that blocks on a lock
# of its own (BLOCKING's Python names: Condition.wait, ...), C functions that do (WAITS_OF_THEIR_OWN), C++'s
# condition variables, and untimed or semaphore waits.
WAITS_OF_THEIR_OWN = frozenset({
    "_queue_SimpleQueue_get_impl", "_queue_SimpleQueue_get", "lock_PyThread_acquire_lock", "rlock_acquire",
    "PyThread_acquire_lock_timed", "acquire_timed",
})  # fmt: skip


def frame_file(frame: str) -> str:
    """'function (path/file.py:123)' -> 'path/file.py'."""
    inner = frame.rpartition("(")[2]
    return inner.rpartition(":")[0]


def owner(frames: list[str]) -> str | None:
    """The harness function a stack's sample belongs to (its deepest harness frame), 'event writer' for
    TensorBoard's writer thread, or None for anything else."""
    if any(WRITER in f for f in frames):
        return "TensorBoard event writer"
    mine = [f for f in frames if "harness/" in frame_file(f) and not any(p in frame_file(f) for p in NOT_HARNESS)]
    return mine[-1].split(" (")[0] + f" ({frame_file(mine[-1]).split('/')[-1]})" if mine else None


def function_name(frame: str) -> str:
    """'Condition.wait (threading.py:320)' -> 'Condition.wait'; 'std::condition_variable::wait(std::unique_lock<…>&)
    (libstdc++.so.6)' -> 'std::condition_variable::wait'."""
    return frame.partition(" (")[0].partition("(")[0]


def read_samples(raw: Path) -> Iterator[tuple[str, list[str], int]]:
    """py-spy's raw output, sample line by sample line: the thread ("main"; "autograd" for a thread in autograd's
    engine loop; else its id), the frames below the thread's own, the count. Main-thread samples outside the training
    loop (start-up, the end of the run) are left out."""
    lines = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    # py-spy names a thread only once Python has; the main thread's early samples carry its id alone.
    main_ids = {stack.split(":")[0] for stack, _, _ in lines if stack.split(";")[0].endswith(": MainThread")}
    for stack, _, count in lines:
        if not stack:
            continue
        head, *frames = stack.split(";")
        thread_id = head.split(":")[0]
        if thread_id in main_ids:  # first: the main thread also runs the engine's loop while it waits for backward
            if not any(loop in f for f in frames for loop in TRAINING_LOOPS):
                continue
            thread = "main"
        elif any("Engine::thread_main" in f for f in frames):
            thread = "autograd"
        else:
            thread = head.partition(": ")[2] or thread_id  # py-spy's head: 'thread (TID): NAME' once Python named it
        yield thread, frames, int(count)


def attribute(raw: Path, rate: int, steps: float) -> dict:
    """Per thread: ms of samples per step in the training loop (main thread) or anywhere (other threads), the
    harness's part, and its top owners."""
    threads: dict[str, dict] = {}
    for thread, frames, count in read_samples(raw):
        key = "main" if thread == "main" else "other threads"
        entry = threads.setdefault(key, {"samples": 0, "harness": 0, "owners": collections.Counter()})
        entry["samples"] += count
        who = owner(frames)
        if who is not None:
            entry["harness"] += count
            entry["owners"][who] += count
    to_ms = 1e3 / rate / steps
    return {
        thread: {
            "ms_per_step": e["samples"] * to_ms,
            "harness_ms_per_step": e["harness"] * to_ms,
            "top": [(who, n * to_ms) for who, n in e["owners"].most_common(8)],
        }
        for thread, e in threads.items()
    }


def train_args(args: argparse.Namespace, name: str, extra: list[str], out: Path) -> list[str]:
    """train.py's arguments for variant `name` (its own `extra` ones after --train-args)."""
    train = ["--model", args.model, "--batch-size", str(args.batch_size), "--max-steps", str(args.steps),
             "--logdir", str(out / "runs"), "--run-name", name, *args.train_args, *extra]  # fmt: skip
    return train + (["--image-size", str(args.image_size)] if args.image_size else [])


def profile(args: argparse.Namespace, name: str, extra: list[str], out: Path) -> dict:
    raw = out / f"{name}.txt"
    env = {**os.environ, **lone_rank_env(args.port, run_id=name)}
    train = [sys.executable, "train.py", *train_args(args, name, extra, out)]
    # --native pauses the process at each sample to unwind its C stacks (py-spy cannot do both): fewer samples.
    how = ["--native", "--idle"] if args.native else ["--nonblocking"]  # --idle: a thread waiting for the GIL too
    record = [args.py_spy, "record", "--threads", *how, "--rate", str(args.rate), "--format", "raw", "-o", str(raw)]
    leaves = native_leaves if args.native else attribute
    if args.attach_after > 0:
        ms_per_step = profile_window(args, name, train, record, env, out)
        steps = args.duration * 1e3 / ms_per_step
        return {"window_ms_per_step": ms_per_step, "threads": leaves(raw, args.rate, steps)}
    proc = subprocess.run([*record, "--", *train], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=args.timeout)  # fmt: skip
    if proc.returncode != 0 or not raw.is_file():
        (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
        raise RuntimeError(f"{name}: py-spy/train.py exited {proc.returncode}; the output is in {out / name}.log")
    return {"threads": leaves(raw, args.rate, args.steps)}


def profile_window(
    args: argparse.Namespace, name: str, train: list[str], record: list[str], env: dict[str, str], out: Path
) -> float:
    """py-spy attached to a running train.py from --attach-after seconds for --duration seconds, so that start-up,
    cuDNN's autotuning and kernel compilation (which swamp a whole run's native samples) are left out. Returns the
    run's own window time per step (its summary, or --harness off's end line), by which the samples are put per step;
    a paused process runs slower while sampled, so the figures compare variants rather than give exact ms."""
    log = out / f"{name}.log"
    with open(log, "w") as stdout:
        train_proc = subprocess.Popen(train, cwd=REPO, env=env, stdout=stdout, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(args.attach_after)
            if train_proc.poll() is not None:
                raise RuntimeError(f"{name}: train.py ended before --attach-after {args.attach_after} s; add --steps")
            spy = [*record, "--pid", str(train_proc.pid), "--duration", str(args.duration)]
            spy_proc = subprocess.run(spy, capture_output=True, text=True, timeout=args.duration + 120)
            if spy_proc.returncode != 0 or not (out / f"{name}.txt").is_file():
                raise RuntimeError(f"{name}: py-spy exited {spy_proc.returncode}: {spy_proc.stderr.strip()[-300:]}")
            code = train_proc.wait(timeout=args.timeout)
        finally:
            if train_proc.poll() is None:
                train_proc.kill()
    if code != 0:
        raise RuntimeError(f"{name}: train.py exited {code}; its output is in {log}")
    return train_window(out / "runs" / name, log.read_text())["ms_per_step"]


def waits_for_gil(frames: list[str]) -> bool:
    """Whether a --native sample is a thread waiting for the GIL (WAITS_OF_THEIR_OWN's comment says how that shows)."""
    for k in range(len(frames) - 1, max(len(frames) - 5, 0), -1):
        if function_name(frames[k]) == "pthread_cond_timedwait":
            caller = function_name(frames[k - 1])
            if frame_file(frames[k - 1]).endswith(".py"):
                return caller not in BLOCKING
            # An address without a symbol could be anything: not counted, so the figure is a floor.
            return caller not in WAITS_OF_THEIR_OWN and not caller.startswith(("std::", "0x"))
    return False


def leaf_name(frames: list[str]) -> str:
    """Where a --native sample was: its leaf's function ('at::native::add_out (libtorch_cpu.so)' ->
    'at::native::add_out'), or for an address without a symbol its library and the nearest caller that has one
    ('0x7f8a04e1e02a (libcuda.so.1)' under cudaLaunchKernel -> '[libcuda.so.1] < cudaLaunchKernel')."""
    function, _, where = frames[-1].partition(" (")
    if not function.startswith("0x"):
        return function[:120]
    caller = next((f.partition(" (")[0] for f in reversed(frames[:-1]) if not f.startswith("0x")), "?")
    return f"[{where.rstrip(')')}] < {caller[:100]}"


def native_leaves(raw: Path, rate: int, steps: float, top: int = 12) -> dict:
    """--native: per thread (main, autograd's, the others by name; the six busiest), the ms per step of samples in each
    leaf function (where the CPU was), busiest first; a leaf without a symbol counts for its library. Samples of a
    blocked thread (BLOCKING) are left out of those, and the ones among them that wait for the GIL (waits_for_gil: seen
    only where py-spy was given --idle, which keeps sleeping threads' samples) are counted apart."""
    threads: dict[str, dict] = {}
    for thread, frames, count in read_samples(raw):
        entry = threads.setdefault(thread, {"samples": 0, "gil_wait": 0, "leaves": collections.Counter()})
        if any(function_name(frame) in BLOCKING for frame in frames[-4:]):
            if waits_for_gil(frames):
                entry["gil_wait"] += count
            continue
        entry["samples"] += count
        entry["leaves"][leaf_name(frames)] += count
    to_ms = 1e3 / rate / steps
    busiest = sorted(threads.items(), key=lambda kv: -(kv[1]["samples"] + kv[1]["gil_wait"]))[:6]
    return {
        thread: {
            "ms_per_step": e["samples"] * to_ms,
            "gil_wait_ms_per_step": e["gil_wait"] * to_ms,
            "top": [(f, n * to_ms) for f, n in e["leaves"].most_common(top)],
        }
        for thread, e in busiest
    }


PROG = "python -m bench.host_profile"


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--image-size", type=int, default=0, help="0: the model's default")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--variants", default="shipped,lightning_alone", help=f"from: {', '.join(VARIANTS)}")
    parser.add_argument("--train-args", default="", help="more train.py arguments, for every variant")
    parser.add_argument("--native", action="store_true", help="C/C++ frames too: where each thread's CPU is, "
                        "by leaf function (py-spy pauses the process at each sample)")  # fmt: skip
    parser.add_argument("--attach-after", type=float, default=0.0, metavar="S",
                        help="sample only from S seconds after train.py starts, for --duration seconds (0: the "
                        "whole run); give --steps enough to run past both")  # fmt: skip
    parser.add_argument("--duration", type=int, default=10, help="seconds sampled with --attach-after")
    parser.add_argument("--port", type=int, default=29571)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default="", help="keep the raw stacks and a JSON line per variant here")
    args = parser.parse_args(argv)
    args.train_args = args.train_args.split()
    names = args.variants.split(",")
    for name in names:
        if name not in VARIANTS:
            parser.error(f"--variants: {name!r} is not known; choose from: {', '.join(VARIANTS)}")
    for option, value in (("--batch-size", args.batch_size), ("--steps", args.steps), ("--rate", args.rate),
                          ("--duration", args.duration)):  # fmt: skip
        check_count(option, value)
    check_count("--image-size", args.image_size, least=0)  # 0: the model's default
    if not (math.isfinite(args.attach_after) and args.attach_after >= 0):
        raise UsageError(f"--attach-after must be 0 (the whole run) or a number of seconds, got {args.attach_after:g}")
    check_seconds("--timeout", args.timeout)
    check_port("--port", args.port)
    check_writable(args.out or None, "--out", directory=True)
    from models import get_model_spec  # loads torch (seconds): after the checks that need nothing

    get_model_spec(args.model)
    given = f"--train-args {' '.join(args.train_args)!r}"
    for name in names:  # the folder is a stand-in: train.py's option checks do not look at it
        check_train_args(train_args(args, name, VARIANTS[name], Path(args.out or ".")), f"{given} (variant {name})")
    args.py_spy = shutil.which("py-spy")
    if args.py_spy is None:
        parser.error("py-spy is not installed (pip install py-spy)")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="host_profile-"))
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        try:
            result = profile(args, name, VARIANTS[name], out)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            print(f"host_profile: {err}", file=sys.stderr, flush=True)
            return 1
        with open(out / "host_profile.jsonl", "a") as f:
            f.write(json.dumps({"variant": name, "model": args.model, "batch_size": args.batch_size, **result}) + "\n")
        what = "C/C++ and Python" if args.native else "Python-visible"
        over = f"{args.duration} s from {args.attach_after:g} s" if args.attach_after > 0 else f"{args.steps} steps"
        step_ms = result.get("window_ms_per_step")
        window = f"; the run's window: {step_ms:.2f} ms/step" if step_ms is not None else ""
        print(f"== {name}: ms of {what} samples per step (py-spy at {args.rate} Hz over {over}{window})")
        for thread, entry in result["threads"].items():
            harness = f", of which harness {entry['harness_ms_per_step']:.2f}" if "harness_ms_per_step" in entry else ""
            waits = entry.get("gil_wait_ms_per_step")
            gil = f", waiting for the GIL {waits:.2f} ms" if waits is not None else ""
            print(f"   {thread}: {entry['ms_per_step']:.2f} ms{harness}{gil}")
            for who, ms in entry["top"]:
                print(f"      {ms:6.3f} ms  {who}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
