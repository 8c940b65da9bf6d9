"""What each thread does per training step, counted under torch.profiler: train.py against the hand-written loop.

    python -m bench.op_census --model resnet50 --batch-size 32 --variants plain,plain_torch_hook,train.py  # one GPU
    python -m bench.op_census --model resnet18 --image-size 32 --batch-size 4 --variants plain,train.py    # a CPU

Why: where the host bounds the step (resnet50 b32 on the lent H100s and H200s: every thread's CPU adds up to the
wall time), each operator, CUDA runtime call and Python call a thread makes is step time. The pairs of
bench.vs_plain time whole processes, and on these hosts their plain loop spreads by 30-50 %, so a 1 ms difference
takes dozens of pairs to resolve. How many calls each thread makes per step does not move with the host: it is an
exact count, and the profiler is a witness no one here wrote.

Each variant runs in a process of its own, as torchrun's rank 0 of 1 (dist_env.lone_rank_env). torch.optim's global
step hook (`register_optimizer_step_post_hook`, which train.py's and the plain loop's optimizers both call, once a
step) opens two windows of --steps steps each after step --start:
  1. torch.profiler: every thread's operators and CUDA runtime calls, and the device's kernels. Runtime calls are
     leaves on their thread, so their host times add up. A runtime call made inside an operator is counted on that
     operator's thread; one made outside any (a CUDA event's query or synchronize from Python) came back with the
     process's id on torch 2.11, so it is counted under main whichever thread made it: train.py's resolve thread
     and --no-resolve-thread show the same 57 event queries a step under main.
  2. the main thread's Python calls, counted by a profile function (PythonCalls says why not the profiler's).
A window of train.py's default 25 steps holds one calibration step, as a run's steps do.

Per thread it prints the calls per step, then the calls whose count per step differs most from the first
variant's; `--out DIR` keeps each variant's census as JSON (`python -m bench.op_census --report DIR/*.json` prints
the tables again).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.vs_plain import PLAIN_VARIANTS, VARIANTS, common_args
from harness.analysis.checked import BadFile, read_json_object
from harness.common.cli import (
    OneLineParser,
    UsageError,
    check_count,
    check_port,
    check_seconds,
    check_writable,
    run_cli,
)
from harness.common.dist_env import apply_safe_nccl_env, lone_rank_env
from harness.common.numbers import is_number

REPO = Path(__file__).resolve().parent.parent
PROG = "python -m bench.op_census"
# The programs a variant may run: the plain loop (and its variants), train.py (and bench.vs_plain's variants of it).
PROGRAMS: dict[str, tuple[str, list[str]]] = {
    "plain": ("bench.plain_ddp", []),
    **{name: ("bench.plain_ddp", extra) for name, extra in PLAIN_VARIANTS.items()},
    "train.py": ("train.py", []),
    **{name: ("train.py", extra) for name, extra in VARIANTS.items()},
}
GPU = "GPU"  # the label of the device's kernels and copies
# A thread that runs one of these is autograd's (on the CPU backward runs on the thread that called it: main's).
AUTOGRAD_MARK = "autograd::engine::evaluate_function"


def thread_label(tid: int, main_tid: int, autograd_tids: set[int]) -> str:
    """A readable name for the profiler's thread id: main (the window's marker's thread, or the process's id, which
    runtime calls outside any operator came back with), autograd (a thread that ran autograd's nodes), the name of a
    thread of this process with that id, else the id."""
    if tid in (main_tid, os.getpid()):
        return "main"
    if tid in autograd_tids:
        return "autograd"
    try:
        name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:
        return f"thread {tid}"
    return "autograd" if name.startswith("pt_autograd") else name


MAIN_MARK = "op_census: main thread"  # recorded as each window opens, on the thread that runs the optimizer


def census(events: list[Any], steps: int) -> dict[str, dict[str, list[float]]]:
    """Per thread label, per call name: [calls per step, µs per step] (the device's events under GPU)."""
    from torch.autograd import DeviceType

    main_tid = next((e.start_thread_id() for e in events if e.name() == MAIN_MARK), os.getpid())
    autograd_tids = {e.start_thread_id() for e in events if e.name().startswith(AUTOGRAD_MARK)} - {main_tid}
    labels: dict[int, str] = {}
    table: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for event in events:
        if event.name() == MAIN_MARK:
            continue
        if event.device_type() != DeviceType.CPU:
            label = GPU
        else:
            tid = event.start_thread_id()
            label = labels.get(tid) or labels.setdefault(tid, thread_label(tid, main_tid, autograd_tids))
        entry = table[label][event.name()[:120]]
        entry[0] += 1 / steps
        entry[1] += event.duration_ns() / 1e3 / steps
    return {label: dict(calls) for label, calls in table.items()}


def is_runtime_call(name: str) -> bool:
    """A CUDA runtime or driver call (a leaf on its thread: the times of these add up)."""
    return name.startswith("cu") and not name.startswith("cudnn")


PYTHON_CALLS = "main, Python calls"  # the census's label for the second window's counts


class PythonCalls:
    """`sys.setprofile`'s function on the main thread: counts every Python and C function called, by name.

    Why not torch.profiler's Python tracer (`with_stack`): in train.py's process it corrupted the heap on torch 2.14
    (glibc's "free(): invalid next size" in the first garbage collection after the window). A profile function slows
    the thread many times over, so its window is apart from the one whose runtime call times are read; the counts
    are exact either way. `sys.setprofile` sets the calling thread's function only, so the comm hooks' Python on
    autograd's thread is not counted. A generator's every resume is a call event: a recursive walk such as
    `Module.named_modules` counts once per module per level."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            self.counts[f"{short_path(code.co_filename)}: {getattr(code, 'co_qualname', code.co_name)}"] += 1
        elif event == "c_call":
            self.counts[f"<C> {getattr(arg, '__qualname__', None) or repr(arg)[:80]}"] += 1


def short_path(filename: str) -> str:
    """A source file's path from its package on: site-packages' or this repository's."""
    for root in ("site-packages/", "dist-packages/", f"{REPO}/"):
        if root in filename:
            return filename.split(root, 1)[1]
    return filename


class Window:
    """torch.optim's global step hook: after step `start`, `steps` steps under torch.profiler, then `steps` steps
    with the main thread's Python calls counted (PythonCalls); then it writes the census to `out`."""

    def __init__(self, start: int, steps: int, out: Path) -> None:
        self.start, self.steps, self.out = start, steps, out
        self.step = 0  # optimizer steps done
        self.profiler: Any = None
        self.python: PythonCalls | None = None
        self.opened_ns = 0
        self.result: dict[str, Any] = {"start": start, "steps": steps}

    def __call__(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        import time

        import torch

        self.step += 1
        if self.step not in (self.start, self.start + self.steps, self.start + 2 * self.steps):
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the window holds its steps' launches, and none before or after
        if self.step == self.start:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.start()
            with torch.profiler.record_function(MAIN_MARK):
                pass
            self.opened_ns = time.perf_counter_ns()
        elif self.step == self.start + self.steps:
            self.profiler.stop()
            self.result["wall_ms_per_step"] = (time.perf_counter_ns() - self.opened_ns) / 1e6 / self.steps
            self.result["threads"] = census(self.profiler.profiler.kineto_results.events(), self.steps)
            self.profiler = None
            self.python = PythonCalls()
            sys.setprofile(self.python)
        else:
            sys.setprofile(None)
            calls = {name: [n / self.steps, 0.0] for name, n in self.python.counts.items()}
            self.result["threads"][PYTHON_CALLS] = calls
            self.out.write_text(json.dumps(self.result))  # the run goes on to its last step, uncounted


def child(out: Path, start: int, steps: int, program: str, argv: list[str]) -> None:
    """Run `program` (train.py, or a module) in this process, with the window hooked onto every optimizer step."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(Window(start, steps, out))
    if program.endswith(".py"):
        sys.argv = [str(REPO / program), *argv]
        runpy.run_path(str(REPO / program), run_name="__main__")
    else:
        sys.argv = [program, *argv]
        runpy.run_module(program, run_name="__main__", alter_sys=True)


def run_variant(args: argparse.Namespace, name: str, out: Path, scratch: Path) -> dict[str, Any]:
    """One variant's process; its census (the JSON the windows wrote), named."""
    program, extra = PROGRAMS[name]
    total = args.start + 2 * args.steps + 3  # the run ends a few steps after the windows
    argv = [*common_args(args), *extra]
    if program == "train.py":
        argv += ["--max-steps", str(total), "--logdir", str(scratch / "runs"), "--run-name", name]
    else:
        argv += ["--steps", str(total), "--window-start", str(min(50, total - 2))]
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)
    env = {**os.environ, **lone_rank_env(args.port, run_id=name)}
    cmd = [sys.executable, "-m", "bench.op_census", "--child", str(path), str(args.start), str(args.steps), program]
    proc = subprocess.run([*cmd, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0 or not path.is_file():
        log = out / f"{name}.log"
        log.write_text(proc.stdout + proc.stderr)
        raise RuntimeError(f"{name} exited {proc.returncode} with no census; its output is in {log}")
    result = json.loads(path.read_text())
    result["variant"] = name
    path.write_text(json.dumps(result))  # flushed as each variant ends: a later failure keeps it
    return result


def summary_row(threads: dict[str, dict[str, list[float]]]) -> str:
    """Per thread: operators and runtime calls (with their host ms) per step; the main thread's Python calls; the
    device's kernels and copies."""
    cells = []
    for label in sorted(threads, key=lambda t: (t != "main", t != PYTHON_CALLS, t != "autograd", t == GPU, t)):
        calls = threads[label].values()
        n, us = (sum(v[i] for v in calls) for i in (0, 1))
        if label in (GPU, PYTHON_CALLS):
            cells.append(f"GPU {n:.0f} kernels and copies ({us / 1e3:.2f} ms)" if label == GPU else f"{label} {n:.0f}")
            continue
        runtime = [v for k, v in threads[label].items() if is_runtime_call(k)]
        rt_n, rt_us = sum(v[0] for v in runtime), sum(v[1] for v in runtime)
        cells.append(f"{label} {n - rt_n:.0f} ops, {rt_n:.0f} runtime calls ({rt_us / 1e3:.2f} ms)")
    return "; ".join(cells)


def differences(base: dict[str, Any], other: dict[str, Any], top: int) -> list[str]:
    """Per thread, the calls whose count per step differs most between two variants' censuses."""
    lines = []
    a, b = base["threads"], other["threads"]
    for label in sorted(set(a) | set(b)):
        mine, theirs = a.get(label, {}), b.get(label, {})
        delta = {k: [theirs.get(k, [0, 0])[i] - mine.get(k, [0, 0])[i] for i in (0, 1)] for k in mine | theirs}
        changed = sorted((k for k in delta if abs(delta[k][0]) >= 0.5), key=lambda k: (-abs(delta[k][0]), k))
        if changed:
            lines.append(f"  {label}: {len(changed)} names differ by half a call a step or more")
            for k in changed[:top]:
                timed = label == GPU or (label != PYTHON_CALLS and is_runtime_call(k))
                ms = f", {delta[k][1] / 1e3:+.3f} ms" if timed else ""
                lines.append(f"    {delta[k][0]:+8.1f} a step{ms}  {k}")
    return lines


def report(results: list[dict[str, Any]], top: int = 15) -> str:
    """Each variant's calls per step, thread by thread, then each against the first."""
    first = results[0]
    lines = [f"# calls per step over steps {first['start'] + 1}-{first['start'] + first['steps']}"]
    for r in results:
        lines.append(f"{r['variant']} ({r['wall_ms_per_step']:.2f} ms/step, profiled): {summary_row(r['threads'])}")
    for r in results[1:]:
        lines.append(f"# {r['variant']} against {first['variant']}")
        lines += differences(first, r, top)
    return "\n".join(lines)


def read_census(path: Path) -> dict[str, Any]:
    """One variant's census as --out keeps it (run_variant's JSON); a UsageError naming the field where the file is
    not one."""
    try:
        census = read_json_object(path)
        census.text("variant", required=True)
        for key in ("start", "steps"):
            census.number(key, integer=True, minimum=1, required=True)
        census.number("wall_ms_per_step", minimum=0, required=True)
        threads = census.section("threads", required=True)
        for label in threads.data:
            calls = threads.section(label, required=True)
            for name, counted in calls.data.items():  # [calls per step, µs per step]
                if not (isinstance(counted, list) and len(counted) == 2 and all(is_number(v) for v in counted)):
                    raise calls.fail(name, "[calls per step, µs per step]")
    except BadFile as err:
        raise UsageError(f"--report: {err}") from None
    return census.data


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--variants", default="plain,train.py", help=f"comma-separated, from: {', '.join(PROGRAMS)}")
    parser.add_argument("--start", type=int, default=75, help="the window opens after this many steps")
    parser.add_argument(
        "--steps", type=int, default=25, help="steps in the window (with 25, one is train.py's calibration step)"
    )
    parser.add_argument("--out", type=Path, help="keep each variant's census here (JSON)")
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--report", nargs="+", type=Path, metavar="JSON", help="run nothing: print these censuses")
    args = parser.parse_args()
    if args.report:
        print(report([read_census(path) for path in args.report]))
        return
    names = [name for name in args.variants.split(",") if name]
    unknown = [name for name in names if name not in PROGRAMS]
    if unknown or not names:
        raise UsageError(f"--variants: {', '.join(unknown) or 'none given'}; choose from: {', '.join(PROGRAMS)}")
    for option, value in (("--batch-size", args.batch_size), ("--image-size", args.image_size),
                          ("--start", args.start), ("--steps", args.steps)):  # fmt: skip
        check_count(option, value)
    check_seconds("--timeout", args.timeout)
    check_port("--port", args.port)
    check_writable(None if args.out is None else str(args.out), "--out", directory=True)
    from models import get_model_spec  # loads torch (seconds): last

    get_model_spec(args.model)
    apply_safe_nccl_env()  # NVLink multicast off in the children too (they inherit this environment)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for name in names:
            results.append(run_variant(args, name, out, Path(scratch)))
            print(f"# {name}: done", flush=True)
        print(report(results))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        out, start, steps, program, *argv = sys.argv[2:]
        child(Path(out), int(start), int(steps), program, argv)
    else:
        raise SystemExit(run_cli(main, PROG))
