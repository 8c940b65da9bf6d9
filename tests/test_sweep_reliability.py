"""The raw sweep when things go wrong, run as a user runs it: bad options, a dead or hung rank, Ctrl-C and
SIGTERM, sizes that do not fit in memory, and what may appear in its output files."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.common.cli import run_cli
from harness.common.local_launch import AFTER_EXIT_GRACE_S, KILL_AFTER_TERM_S, spawn_local
from harness.common.names import EXIT_FAILED
from harness.raw_sweep import PROG, build_parser, main, make_plan
from harness.sweep import collectives, engine
from harness.sweep.capacity import memory_problem
from harness.sweep.plan import Where
from harness.sweep.rank import sweep_worker
from tests.test_train_reliability import gone

REPO = Path(__file__).resolve().parents[1]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_PROCID", "SLURM_NTASKS")
TIMEOUT_S = 10  # the sweep's --timeout in these tests
HUNG_TIMEOUT_S = 4  # where the test waits for the timeout itself
SLACK_S = 15  # survivors must be gone within --timeout plus this
STOP_HUNG_S = AFTER_EXIT_GRACE_S + KILL_AFTER_TERM_S  # the most the launcher then spends on a hung rank
# Many small sizes, so the sweep is still running when a test strikes (2 x 129 rows of at least 20 calls).
LONG_SWEEP = ["-b", "1K", "-e", "2K", "-i", "8", "--min-time-ms", "0"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    return env | {"GLOO_SOCKET_IFNAME": "lo"} | extra


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- bad input: one line, exit 2, nothing started ----------------------------------------------------------

MISTAKES = {
    # names
    "collective": (["--collectives", "allreduse"], "--collectives: unknown collective 'allreduse'; choose from"),
    "dtype": (["-d", "float8"], "--dtype: unknown dtype 'float8'; choose from float32"),
    "op": (["-o", "xor"], "--op: unknown reduction 'xor'; choose from sum"),
    "mode": (["--mode", "fast"], "--mode: unknown value 'fast'"),
    "placement": (["--placements", "sideways"], "--placements: unknown value 'sideways'"),
    "backend": (["--backend", "mpi"], "--backend: invalid choice: 'mpi'"),
    # numbers
    "size": (["-b", "12X"], "--min-bytes: invalid size '12X'"),
    "negative-size": (["--sizes", "1K,-8"], "--sizes: invalid size '-8'"),
    "inverted-range": (["-b", "1M", "-e", "1K"], "--min-bytes 1048576 is larger than --max-bytes 1024"),
    "iters": (["-n", "0"], "--iters must be at least 1, got 0"),
    "warmup": (["-w", "-1"], "--warmup must be at least 0, got -1"),
    "check": (["-c", "-2"], "--check must be at least 0, got -2"),
    "factor": (["-f", "1"], "--step-factor must be 2 or more, got 1"),
    "step": (["-i", "0"], "--step-bytes must be at least 1, got 0"),
    "nproc": (["--nproc", "0"], "--nproc must be at least 1, got 0"),
    "timeout": (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0.0"),
    "timeout-nan": (["--timeout", "nan"], "--timeout must be a positive number of seconds"),
    "min-time": (["--min-time-ms", "-5"], "--min-time-ms must be 0 or more"),
    "root": (["-r", "5"], "--root 5 is not a rank of a world of 2"),
    "not-a-number": (["--iters", "many"], "argument -n/--iters: invalid int value: 'many'"),
    # setup
    "nccl-without-gpu": (["--backend", "nccl"], "--backend nccl"),
    "missing-dir": (["--json", "/no/such/dir/sweep.jsonl"], "--json: directory '/no/such/dir' does not exist"),
    "unwritable": (["--csv", "/proc/sweep.csv"], "--csv: cannot write in '/proc'"),
    "json-is-dir": (["--json", "/tmp"], "--json: '/tmp' is a directory"),
    "logdir-under-file": (["--logdir", "/etc/passwd/tb"], "--logdir: '/etc/passwd' in '/etc/passwd/tb' is not a"),
}
# One of each kind from the shell too (every case above runs through the same run_cli; a Python start
# costs seconds on 2 cores, so these few run side by side).
FROM_THE_SHELL = ("collective", "inverted-range", "unwritable")  # a name, a number, the setup


@pytest.fixture
def no_launcher(monkeypatch):
    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)


@pytest.mark.parametrize("case", list(MISTAKES))
def test_each_mistake_is_one_line_and_exit_2(case, capsys, no_launcher):
    argv, message = MISTAKES[case]
    if case == "nccl-without-gpu" and torch.cuda.is_available():
        pytest.skip("this machine has GPUs")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(argv), PROG)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"{PROG}: error: "), captured.err
    assert message in captured.err, captured.err
    assert captured.out == ""


def test_mistakes_from_the_shell_start_nothing(tmp_path):
    cases = [c for c in FROM_THE_SHELL if not (c == "nccl-without-gpu" and torch.cuda.is_available())]
    procs = {
        case: subprocess.Popen(
            [sys.executable, "-m", "harness.raw_sweep", *MISTAKES[case][0], "--json", str(tmp_path / f"{case}.jsonl")]
            if case != "unwritable"
            else [sys.executable, "-m", "harness.raw_sweep", *MISTAKES[case][0]],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in cases
    }
    for case, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case, err)
        assert err.count("\n") == 1 and err.startswith(f"{PROG}: error: ") and "Traceback" not in err, (case, err)
        assert MISTAKES[case][1] in err and out == "", (case, err)
    assert list(tmp_path.iterdir()) == []  # no output file was created: nothing started


def test_output_checks_leave_existing_files_alone(tmp_path):
    existing = tmp_path / "old.jsonl"
    existing.write_text("keep\n")
    args = build_parser().parse_args(["--json", str(existing), "--logdir", str(tmp_path / "new" / "tb")])
    make_plan(args, "gloo", 2, 1, "local")
    assert existing.read_text() == "keep\n" and sorted(p.name for p in tmp_path.iterdir()) == ["old.jsonl"]


# ---- a dead or hung rank ----------------------------------------------------------------------------------


def start_sweep(
    tmp_path: Path, launcher: list[str], timeout_s: float = TIMEOUT_S
) -> tuple[subprocess.Popen, Path, Path]:
    jsonl, csv_path = tmp_path / "sweep.jsonl", tmp_path / "sweep.csv"
    sweep = [*LONG_SWEEP, "--timeout", str(timeout_s), "--json", str(jsonl), "--csv", str(csv_path)]
    proc = subprocess.Popen(
        [*launcher, "-m", "harness.raw_sweep", *sweep],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, jsonl, csv_path


def wait_for_rows(proc: subprocess.Popen, jsonl: Path, rows: int, timeout: float = 120) -> dict:
    """Once `rows` rows are on disk, the header (which names every rank's pid)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        lines = jsonl.read_text().splitlines() if jsonl.exists() else []
        if sum('"record": "row"' in line for line in lines) >= rows:
            return json.loads(lines[0])
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("no rows appeared")


def _finish(proc: subprocess.Popen, struck_at: float, within: float) -> tuple[int, str, float]:
    try:
        _, err = proc.communicate(timeout=within + 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err, time.monotonic() - struck_at


def _assert_rows_kept(jsonl: Path, csv_path: Path, statuses: tuple[str, ...]) -> list[dict]:
    records = _records(jsonl)  # every line parses
    rows = [r for r in records if r["record"] == "row"]
    assert len(rows) >= 3 and all(r["time_us"] > 0 and r["wrong"] == 0 for r in rows)
    assert records[-1]["record"] == "end" and records[-1]["status"] in statuses
    assert records[-1]["rows"] == len(rows)
    with open(csv_path) as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)
    return records


ONE_SHOT_PHASES = ("setup", "allocation", "first call", "capture", "timed run", "timed calls", "gathering times")
ONE_SHOT_PHASES += ("check totals",)
LAUNCHERS = {
    "standalone": [sys.executable],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_killed_rank_stops_the_others_and_keeps_the_rows(launcher, tmp_path):
    proc, jsonl, csv_path = start_sweep(tmp_path, LAUNCHERS[launcher])
    header = wait_for_rows(proc, jsonl, 3)
    os.kill(header["ranks"][1]["pid"], signal.SIGKILL)
    code, err, took = _finish(proc, time.monotonic(), TIMEOUT_S + SLACK_S)
    assert code != 0 and took < TIMEOUT_S + SLACK_S, (code, took, err[-2000:])
    survivor = next((line for line in err.splitlines() if line.startswith(f"{PROG}: rank 0: ")), None)
    assert survivor is not None, err[-3000:]
    if launcher == "torchrun":
        # torchrun SIGTERMs the survivors once it sees the death; rank 0 may get that before its own error.
        assert "Root Cause" in err and "SIGKILL" in err  # torchrun's own report
        records = _assert_rows_kept(jsonl, csv_path, ("failed", "interrupted"))
    else:
        assert "rank1" in err and "killed by SIGKILL" in err
        records = _assert_rows_kept(jsonl, csv_path, ("failed",))
        assert "failed" in survivor
        # The step where the phase iterates; else the phase names the moment (a barrier, the time gather).
        assert " step " in survivor or any(f", {phase} failed" in survivor for phase in ONE_SHOT_PHASES), survivor
    # The collective, the size, the phase (and step) and the rank that was running.
    assert "all_reduce" in survivor and " B " in survivor and records[-1]["at"] in survivor
    assert gone(header["ranks"][0]["pid"])


@pytest.mark.slow
def test_a_hung_rank_times_out(tmp_path):
    proc, jsonl, csv_path = start_sweep(tmp_path, LAUNCHERS["standalone"], HUNG_TIMEOUT_S)
    header = wait_for_rows(proc, jsonl, 3)
    survivor, hung = (rank["pid"] for rank in header["ranks"])
    struck_at = time.monotonic()
    os.kill(hung, signal.SIGSTOP)
    while not gone(survivor) and time.monotonic() - struck_at < HUNG_TIMEOUT_S + SLACK_S:
        time.sleep(0.1)
    assert gone(survivor), "rank 0 did not stop within --timeout + 15 s"
    # The launcher then gives the hung rank a few seconds, SIGCONT + SIGTERM, and SIGKILL if need be.
    code, err, took = _finish(proc, struck_at, HUNG_TIMEOUT_S + SLACK_S + STOP_HUNG_S)
    assert code == EXIT_FAILED and took < HUNG_TIMEOUT_S + SLACK_S + STOP_HUNG_S, (code, took, err[-2000:])
    assert f"Timed out waiting {HUNG_TIMEOUT_S * 1000}ms" in err
    _assert_rows_kept(jsonl, csv_path, ("failed",))
    assert all(gone(rank["pid"]) for rank in header["ranks"])


# ---- interrupts and orphans --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_keeps_the_rows_and_tears_down(signum, code, tmp_path):
    proc, jsonl, csv_path = start_sweep(tmp_path, LAUNCHERS["standalone"])
    header = wait_for_rows(proc, jsonl, 3)
    proc.send_signal(signum)  # to the launching process only: it forwards to the ranks
    returncode, err, took = _finish(proc, time.monotonic(), SLACK_S)
    assert returncode == code and took < SLACK_S, (returncode, took, err[-2000:])
    records = _assert_rows_kept(jsonl, csv_path, ("interrupted",))
    assert records[-1]["reason"] == signal.Signals(signum).name
    assert f"rank 0: interrupted by {signal.Signals(signum).name} during all_reduce" in err
    assert "Traceback" not in err
    assert all(gone(rank["pid"]) for rank in header["ranks"])  # the ranks exited: no orphans


@pytest.mark.slow
def test_ranks_die_with_a_killed_launcher(tmp_path):
    proc, jsonl, _ = start_sweep(tmp_path, LAUNCHERS["standalone"])
    header = wait_for_rows(proc, jsonl, 3)
    proc.kill()  # SIGKILL: the launcher cannot forward anything
    proc.communicate(timeout=30)
    deadline = time.monotonic() + SLACK_S
    while not all(gone(rank["pid"]) for rank in header["ranks"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(gone(rank["pid"]) for rank in header["ranks"])
    assert _records(jsonl)[-1]["record"] == "end"  # rank 0 got SIGTERM from the kernel and closed its files


# ---- memory --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_size_too_large_for_memory_is_a_skipped_row_and_the_sweep_goes_on(tmp_path):
    jsonl, csv_path = tmp_path / "big.jsonl", tmp_path / "big.csv"
    sweep = ["--sizes", "64,100000G,128", "-n", "2", "-w", "0", "--min-time-ms", "0"]
    secret = "do-not-record-me"
    result = subprocess.run(
        [sys.executable, "-m", "harness.raw_sweep", *sweep, "--json", str(jsonl), "--csv", str(csv_path)],
        cwd=REPO,
        env=_env(MY_API_TOKEN=secret, HOME_SECRET=secret),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [r for r in _records(jsonl) if r["record"] == "row"]
    assert [r["size_bytes"] for r in rows] == [64, 64, 100000 << 30, 100000 << 30, 128, 128]
    for row in rows:
        if row["size_bytes"] == 100000 << 30:
            assert row["time_us"] is None and row["skipped"].startswith("memory: would need ")
            assert "GiB available" in row["skipped"]
        else:
            assert row["skipped"] is None and row["time_us"] > 0 and row["wrong"] == 0
    assert "rows skipped" in result.stderr and "Traceback" not in result.stderr
    # Output files carry NCCL, TORCH, CUDA, communication and launcher variables only, never the rest.
    for path in (jsonl, csv_path):
        assert secret not in path.read_text()
    assert secret not in result.stdout
    header = _records(jsonl)[0]
    allowed = ("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_", "OMP_", "GOMP_", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    allowed += ("MASTER_",)
    assert all(key.startswith(allowed) for key in header["env"]), header["env"]


def _allocation_fails_on_rank_1(plan) -> None:
    """The sweep, where rank 1 cannot allocate the 4 KiB buffers (as an out-of-memory RuntimeError)."""
    original = collectives.make_buffers

    def make_buffers(name, lay, placement, rank, dtype, device):
        if rank == 1 and lay.size_bytes == 4096:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4096 bytes.")
        return original(name, lay, placement, rank, dtype, device)

    engine.make_buffers = make_buffers  # measure_row looks it up in engine
    sweep_worker(plan)


@pytest.mark.slow
def test_an_allocation_failure_on_one_rank_skips_the_row_on_all(tmp_path):
    jsonl = tmp_path / "alloc.jsonl"
    argv = ["--sizes", "1K,4K,16K", "-n", "2", "-w", "0", "--min-time-ms", "0", "--json", str(jsonl)]
    plan = make_plan(build_parser().parse_args(argv), "gloo", 2, 1, "local")
    assert spawn_local(_allocation_fails_on_rank_1, 2, (plan,), init_process_group=False) == 0
    rows = [r for r in _records(jsonl) if r["record"] == "row"]
    assert [(r["size_bytes"], r["skipped"] is None) for r in rows] == [
        (1024, True), (1024, True), (4096, False), (4096, False), (16384, True), (16384, True),
    ]  # fmt: skip
    assert all(r["skipped"].startswith("memory: allocation failed: RuntimeError: DefaultCPUAllocator") for r in rows
               if r["skipped"])  # fmt: skip
    assert all("(rank 1)" in r["skipped"] for r in rows if r["skipped"])


# ---- the pieces --------------------------------------------------------------------------------------------------


def test_memory_problem_says_what_is_needed_and_available():
    assert memory_problem(1 << 30, 1, 4 << 30) is None
    assert memory_problem(1 << 30, 1, None) is None  # unknown: try, and catch a real failure
    text = memory_problem(3 << 30, 2, 4 << 30)
    assert text == "memory: would need 3 GiB on each of 2 ranks of this host, 4 GiB available"


def test_where_names_the_row_phase_and_step():
    where = Where()
    assert str(where) == "setup"
    where.row("all_gather", 4096, "in_place", "latency", True)
    where.enter("timed calls")
    where.at(6, 200)
    assert str(where) == "all_gather 4096 B in_place latency CUDA graph, timed calls step 7 of 200"


def _exit_3() -> None:
    sys.exit(3)


def test_ranks_that_all_fail_before_the_launcher_looks_are_a_failure():
    """spawn_local's watch, given children that have all exited with an error already (both ranks of a sweep
    whose stdout is full stop within one poll): the first failure, not success. Real processes."""
    from multiprocessing import get_context

    from harness.common.local_launch import _Children, _watch

    procs = [get_context("spawn").Process(target=_exit_3, name=f"rank{rank}") for rank in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [3, 3]
    failed = _watch(_Children(procs), [], grace_s=1.0)
    assert failed is not None and failed.name == "rank0" and failed.exitcode == 3
