"""bench.gc_pauses: its log sees CPython's real collections, and the CLI refuses a missing program in one line."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from bench.gc_pauses import GcLog
from tests.train_runs import REPO


def test_the_log_records_a_real_full_collection_and_splits_by_time():
    log = GcLog()
    gc.callbacks.append(log)
    try:
        gc.collect(2)
    finally:
        gc.callbacks.remove(log)
    full = [(started_s, duration_s) for generation, started_s, duration_s in log.collections if generation == 2]
    assert len(full) == 1  # gc.collect(2)'s own; an automatic young collection may also have run meanwhile
    started_s, duration_s = full[0]
    assert started_s >= 0 and duration_s > 0
    summary = log.summary(after_s=started_s + 3600)  # an hour later: nothing after it
    assert summary["whole_run"]["2"]["collections"] == 1
    assert summary["whole_run"]["2"]["max_ms"] == round(duration_s * 1e3, 2)
    assert summary["after"] == {}


@pytest.mark.parametrize(
    ("program", "error"),
    [
        (["no_such_script.py"], "python -m bench.gc_pauses: error: no such script: no_such_script.py"),
        (["-m", "no_such_package.module"], "python -m bench.gc_pauses: error: no such module: no_such_package.module"),
        (["-m", "bench.no_such_module"], "python -m bench.gc_pauses: error: no such module: bench.no_such_module"),
        (
            ["-m", "bench.no_such_package.module"],
            "python -m bench.gc_pauses: error: no such module: bench.no_such_package.module",
        ),
        ([], "python -m bench.gc_pauses: error: name a program after --: a script, or -m and a module"),
    ],
)
def test_a_missing_program_is_one_line_exit_2_and_nothing_measured(program, error):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.gc_pauses", "--", *program], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == error
    assert proc.stdout == ""  # no measurement line for a program that never ran
