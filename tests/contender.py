"""A known contender for a CPU: a busy process pinned to one CPU, and the calling thread pinned beside it, so that
what a test reads under it (a wait for a CPU, a probe that runs slower) has a cause it set up itself."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def on_cpu(cpu: int, hog: bool) -> Iterator[None]:
    """Pin the calling thread to `cpu` for the block; with `hog`, a process spinning on the same CPU runs throughout."""
    contender = None
    allowed = os.sched_getaffinity(0)
    try:
        if hog:
            spin = f"import os; os.sched_setaffinity(0, {{{cpu}}}); print('ready', flush=True)\nwhile True: pass"
            contender = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
            assert contender.stdout.readline() == b"ready\n"  # pinned, and spinning from here
        os.sched_setaffinity(0, {cpu})  # the calling thread only
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        if contender is not None:
            contender.kill()
            contender.wait(30)
