"""bench.vs_plain --report: the pairs of several calls (each call's --out file) pooled into one table, and a
file that is not one of its own refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.train_runs import REPO


def pair(number: int, plain_ms: float, train_ms: float, noop_ms: float | None = None, old: bool = False) -> str:
    """One JSON line as bench.vs_plain writes it (the fields its table reads); `old`: as it wrote them before each
    line recorded its variants' arguments."""
    runs = {"plain": {"ms_per_step": plain_ms, "main_thread_cpu_ms_per_step": plain_ms / 2}}
    runs["train.py"] = {"ms_per_step": train_ms, "main_thread_cpu_ms_per_step": train_ms / 2}
    variants = {"train.py": []}
    if noop_ms is not None:
        runs["noop"] = {"ms_per_step": noop_ms, "main_thread_cpu_ms_per_step": noop_ms / 2}
        variants["noop"] = ["--comm-hook", "noop"]
    record = {"pair": number, "order": list(runs), **runs, **({} if old else {"variants": variants})}
    return json.dumps(record) + "\n"


def report(*paths) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench.vs_plain", "--report", *map(str, paths)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_report_pools_the_calls_and_tables_only_the_variants_every_pair_ran(tmp_path):
    first, second = tmp_path / "call1.jsonl", tmp_path / "call2.jsonl"
    first.write_text(pair(0, 30.0, 40.0, noop_ms=35.0) + pair(1, 30.0, 30.0, noop_ms=35.0))
    second.write_text(pair(0, 33.0, 33.0, old=True))  # a call without the noop variant, by the older bench
    proc = report(second, first)  # the older line first: its variants come from what the bench knows
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# 3 pairs")
    row = next(line for line in lines if line.startswith("train.py"))
    assert row.split()[1] == "1.000"  # ratios 0.75, 1, 1: the median is 1
    assert not any(line.startswith("noop") for line in lines)  # the second call did not run it
    assert "(max − min) / p50 = 10.0 %" in proc.stdout  # the plain loop's 30, 30, 33 ms
    assert lines[-1] == "# train.py: train.py as shipped"


def test_report_refuses_a_file_it_did_not_write_in_one_line(tmp_path):
    stray = tmp_path / "stray.jsonl"
    stray.write_text(pair(0, 30.0, 31.0) + '{"something": "else"}\n')
    proc = report(stray)
    assert proc.returncode == 2
    assert f"{stray}:2 is not a pair that bench.vs_plain wrote" in proc.stderr
    assert "Traceback" not in proc.stderr
    missing = report(tmp_path / "absent.jsonl")
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr


def test_leftover_runs_counts_python_running_train_py_and_not_a_shell_that_names_it():
    """Real processes: a Python interpreter with train.py as an argument is a leftover run; a shell whose command
    text names train.py (as a device call's wrapper loop did, 3 in every run) is not."""
    from bench.vs_plain import leftover_runs

    shell = subprocess.Popen(["bash", "-c", "sleep 30; echo train.py"])
    python = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "train.py"])
    try:
        found = leftover_runs()
        assert python.pid in found
        assert shell.pid not in found
    finally:
        for proc in (shell, python):
            proc.kill()
            proc.wait()
