"""Python's garbage collections in a training process: how many, and how long, by generation.

    python -m bench.gc_pauses --after-s 5 -- train.py --model resnet_tiny --batch-size 2 --image-size 32
    python -m bench.gc_pauses --after-s 5 -- -m bench.plain_ddp --model resnet_tiny --batch-size 2 --image-size 32

Runs the program in this process (a script path, or -m and a module) with a `gc.callbacks` hook on, and at exit
prints one JSON line: per generation, the collections and their total and longest ms, over the whole run and over
the part after --after-s seconds (the steps, past the imports). Why: a gen-2 collection stops every thread for tens
of ms, and train.py makes more Python objects a step than the hand-written loop, so its pauses could be what makes
some of its runs slower than the loop's (docs/BENCHMARKS.md, 2026-12-06). For one process (world size 1): torchrun's
variables for a lone rank are set where absent, so train.py takes its torchrun path.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib.util
import json
import math
import os
import runpy
import sys
import time
import zipfile

from harness.common.cli import OneLineParser, UsageError, run_cli
from harness.common.dist_env import free_port, lone_rank_env


class GcLog:
    """Each collection's generation, start (seconds since this log began) and duration, from `gc.callbacks`."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()
        self.collections: list[tuple[int, float, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
        else:
            self.collections.append((info["generation"], self._started - self.origin, now - self._started))

    def summary(self, after_s: float) -> dict[str, object]:
        """Per generation: count, total ms and longest ms, over all collections ("whole_run") and over those that
        started `after_s` or later ("after")."""

        def table(rows: list[tuple[int, float, float]]) -> dict[str, dict[str, float]]:
            return {
                str(generation): {
                    "collections": len(durations),
                    "total_ms": round(sum(durations) * 1e3, 2),
                    "max_ms": round(max(durations) * 1e3, 2),
                }
                for generation in (0, 1, 2)
                if (durations := [d for g, _, d in rows if g == generation])
            }

        return {
            "whole_run": table(self.collections),
            "after_s": after_s,
            "after": table([row for row in self.collections if row[1] >= after_s]),
        }


def check_module(name: str) -> None:
    """A UsageError unless `name` is a module that `python -m` could run: found, and for a package, with a
    __main__ module."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package of it is missing, or a relative or empty name
        spec = None
    if spec is None:
        raise UsageError(f"no such module: {name}")
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        try:
            runnable = importlib.util.find_spec(f"{name}.__main__") is not None
        except ImportError:
            runnable = False
        if not runnable:
            raise UsageError(f"{name} is a package with no __main__ module: name a module in it")


def check_script(path: str) -> None:
    """A UsageError unless `path` is a file of Python that compiles (or a zip application), read now: else it would
    fail with a traceback once the collections are being logged, and print a record of nothing."""
    if not os.path.isfile(path):
        raise UsageError(f"no such script: {path}")
    if zipfile.is_zipfile(path):  # a zip application, which runpy runs as python does: its __main__.py
        return
    try:
        with open(path, "rb") as script:
            compile(script.read(), path, "exec")
    except OSError as err:
        raise UsageError(f"cannot read the script {path}: {err.strerror}") from None
    except (SyntaxError, ValueError) as err:  # ValueError: null bytes, in Python 3.11
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        message = err.msg if isinstance(err, SyntaxError) else str(err)
        raise UsageError(f"{path} is not a Python script: {message}{where}") from None


PROG = "python -m bench.gc_pauses"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--after-s", type=float, default=5.0, help="also count only the collections after this")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- then a script and its arguments, or -m MODULE …")
    args = parser.parse_args()
    if not (math.isfinite(args.after_s) and args.after_s >= 0):
        raise UsageError(f"--after-s must be 0 or more seconds, got {args.after_s:g}")
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program or program == ["-m"]:
        raise UsageError("name a program after --: a script, or -m and a module")
    if program[0] == "-m":
        check_module(program[1])
    else:
        check_script(program[0])
    for key, value in lone_rank_env(free_port()).items():
        os.environ.setdefault(key, value)
    log = GcLog()
    gc.callbacks.append(log)
    atexit.register(lambda: print(json.dumps({"gc_pauses": log.summary(args.after_s)}), flush=True))
    if program[0] == "-m":
        sys.argv = program[1:]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = program
        sys.path.insert(0, os.path.dirname(os.path.abspath(program[0])))
        runpy.run_path(program[0], run_name="__main__")


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
