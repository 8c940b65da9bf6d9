"""Outputs and processes when things go wrong, tried as a hostile user would: two outputs in one file, two runs
racing for one name, an output that can no longer be written (/dev/full, a full disk, a directory removed during
the run, a closed stdout), and signals to the grid runner, train.py and the raw sweep. Real files, real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from harness.common import tags
from harness.common.cli import UsageError, run_cli
from harness.grid import PROG as GRID
from harness.raw_sweep import PROG as SWEEP
from harness.raw_sweep import build_parser, main, make_plan
from harness.train.config import RUN_VERSION_ENV, claim_run_version
from tests.test_sweep_reliability import LONG_SWEEP, wait_for_rows
from tests.test_train_reliability import ROLL, all_gone, gone, start_train, steps_logged, wait_for_steps
from tests.train_runs import HARNESS_COLLECTIVE, default_sighup, measured_steps_upto, train_env

REPO = Path(__file__).resolve().parents[1]
SLACK_S = 30  # a run must be over this long after its output was taken away or it was signalled


OUTLASTING_SWEEP = ["-b", "1K", "-e", "16K", "-i", "8", "--min-time-ms", "0"]  # 2 x 1921 rows


def _sweep(*args: str, stdout=subprocess.PIPE, **popen) -> subprocess.Popen:
    popen.setdefault("preexec_fn", default_sighup)
    return subprocess.Popen(
        [sys.executable, "-m", "harness.raw_sweep", *args],
        cwd=REPO,
        env=train_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def _lines(err: str, prog: str) -> list[str]:
    """The tool's own lines on stderr (Lightning's progress bar and warnings left out)."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith(f"{prog}: ")]


def _assert_quiet(err: str) -> None:
    assert "Traceback" not in err and "Exception in thread" not in err and "Exception ignored" not in err, err[-3000:]
    assert "local launch:" not in err, err[-3000:]  # the ranks said why they stopped; the launcher adds nothing


# ---- two outputs in one file: a usage error, before anything starts ---------------------------------------


def _same_file_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "old.jsonl").write_text("keep\n")
    os.link(tmp / "old.jsonl", tmp / "hard.csv")
    (tmp / "link.csv").symlink_to(tmp / "new.jsonl")  # dangling until the sweep would write new.jsonl
    (tmp / "sub").mkdir()
    return {
        "same-path": (["--json", f"{tmp}/a", "--csv", f"{tmp}/a"], f"--csv '{tmp}/a' is the same file as --json"),
        "dot-spelling": (["--json", f"{tmp}/a", "--csv", f"{tmp}/sub/../a"], "is the same file as --json"),
        "symlink": (["--json", f"{tmp}/new.jsonl", "--csv", f"{tmp}/link.csv"], "is the same file as --json"),
        "hard-link": (["--json", f"{tmp}/old.jsonl", "--csv", f"{tmp}/hard.csv"], "is the same file as --json"),
        "logdir": (["--json", f"{tmp}/tb", "--logdir", f"{tmp}/tb"], f"--logdir '{tmp}/tb' is the same file as --json"),
    }


@pytest.mark.parametrize("case", ["same-path", "dot-spelling", "symlink", "hard-link", "logdir"])
def test_two_outputs_in_one_file_are_one_line_and_exit_2(case, tmp_path, capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    argv, message = _same_file_cases(tmp_path)[case]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(argv), SWEEP)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{SWEEP}: error: ") and message in err, err
    assert err.rstrip().endswith("give each output its own")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, nothing started
    assert (tmp_path / "old.jsonl").read_text() == "keep\n"


def test_devices_where_nothing_is_kept_may_take_two_outputs(tmp_path):
    args = build_parser().parse_args(["--json", os.devnull, "--csv", os.devnull])
    make_plan(args, "gloo", 2, 1, "local")  # /dev/null twice mixes nothing
    with pytest.raises(UsageError, match=r"--csv .* is the same file as --json"):
        make_plan(build_parser().parse_args(["--json", f"{tmp_path}/x", "--csv", f"{tmp_path}/x"]), "gloo", 2, 1, "l")


def test_an_output_that_is_stdout_is_a_usage_error(tmp_path):
    """`--json F > F`: the table and the rows would be mixed in F."""
    out = tmp_path / "out.txt"
    with open(out, "w") as stdout:
        proc = _sweep("--json", str(out), stdout=stdout)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert err == f"{SWEEP}: error: --json '{out}' is the same file as stdout (the table); give each output its own\n"
    assert out.read_text() == ""
    # '-' is not stdout here (the table is): it is refused, not written as a file named '-'.
    env = {**train_env(), "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "harness.raw_sweep", "--json", "-"]
    dash = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert dash.returncode == 2
    assert dash.stderr == f"{SWEEP}: error: --json '-': stdout carries the table; give a file name\n"
    assert not (tmp_path / "-").exists()


# ---- a run's version directory is its own, even when two runs start in the same second ------------------


def _claim(root: str, stamp: str, barrier, results) -> None:
    barrier.wait()  # every process calls os.mkdir at about the same instant
    results.put(claim_run_version(root, stamp=stamp))


def test_runs_racing_for_one_version_each_get_their_own(tmp_path, monkeypatch):
    monkeypatch.delenv(RUN_VERSION_ENV, raising=False)
    root, racers = tmp_path / "runs" / "name", 6
    (root / "20260101-000000-3").mkdir(parents=True)  # a suffix already taken by an earlier run is skipped
    ctx = multiprocessing.get_context("fork")  # cheap: the racers only import what this process has
    barrier, results = ctx.Barrier(racers), ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(str(root), "20260101-000000", barrier, results)) for _ in range(racers)]
    for proc in procs:
        proc.start()
    versions = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert sorted(versions) == sorted(["20260101-000000"] + [f"20260101-000000-{n}" for n in (2, 4, 5, 6, 7)])
    assert sorted(p.name for p in root.iterdir()) == sorted([*versions, "20260101-000000-3"])


def test_a_version_fixed_by_the_caller_is_used_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv(RUN_VERSION_ENV, "mine")
    assert claim_run_version(tmp_path / "name") == "mine" == claim_run_version(tmp_path / "name")
    assert (tmp_path / "name" / "mine").is_dir()


RACE = """
import sys, time
sys.path.insert(0, {repo!r})
import train
from harness.common.cli import run_cli
argv = sys.argv[1:]
train.parse_config(argv)  # imports and checks done before the start line, so the race is over os.mkdir alone
print("loaded", flush=True)
start = float(sys.stdin.readline())  # the shared instant, sent once both have loaded
time.sleep(max(0.0, start - time.time()))
raise SystemExit(run_cli(lambda: train.main(argv), "train.py"))
"""


@pytest.mark.slow
def test_two_train_runs_started_in_one_second_with_one_name_keep_their_own_summary(tmp_path):
    logdir = tmp_path / "runs"
    args = ["--model", "resnet_tiny", "--devices", "1", "--max-steps", "3", "--calibration-steps", "0"]
    args += ["--logdir", str(logdir), "--run-name", "same"]
    script = RACE.format(repo=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=tmp_path,
            env=train_env(),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    loaded = [proc.stdout.readline() for proc in procs]
    # On a failure, closing stdin ends the other process too.
    assert loaded == ["loaded\n"] * 2, [proc.communicate(timeout=300)[1][-2000:] for proc in procs]
    # A shared instant early in a second, 1 to 2 s after both have loaded.
    start = float(int(time.time()) + 2) + 0.05
    for proc in procs:
        proc.stdin.write(f"{start!r}\n")
        proc.stdin.flush()
    outs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in outs]
    versions = sorted(p.name for p in (logdir / "same").iterdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(int(start)))
    assert versions == [stamp, f"{stamp}-2"], versions  # one second, one name: two directories
    for version in versions:
        summary = json.loads((logdir / "same" / version / "summary.json").read_text())
        assert summary["completed"] is True and summary["totals"]["steps_measured"] >= 1


# ---- an output that can no longer be written: one line per rank, what was written kept -------------------


def test_json_on_dev_full_stops_every_rank_with_one_line_each(tmp_path):
    csv_path = tmp_path / "rows.csv"
    proc = _sweep("--sizes", "1K,2K", "--min-time-ms", "0", "--json", "/dev/full", "--csv", str(csv_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    _assert_quiet(err)
    why = "cannot write --json '/dev/full' after 0 rows: No space left on device"
    assert sorted(err.splitlines()) == [f"{SWEEP}: rank 0: {why}", f"{SWEEP}: rank 1: stopped because rank 0 {why}"]
    assert csv_path.read_text().count("\n") == 1  # the header: the sweep stopped before its first row
    assert out.splitlines()[-1] == f"# Sweep failed ({why}): 0 rows written"


@pytest.mark.slow
@pytest.mark.parametrize("removed", ["json-directory", "tensorboard-logdir"])
def test_an_output_directory_removed_during_the_sweep_stops_it_and_the_others_keep_the_rows(removed, tmp_path):
    jsonl, csv_path, tb = tmp_path / "json" / "rows.jsonl", tmp_path / "rows.csv", tmp_path / "tb"
    jsonl.parent.mkdir()
    proc = _sweep(*LONG_SWEEP, "--json", str(jsonl), "--csv", str(csv_path), "--logdir", str(tb))
    header = wait_for_rows(proc, jsonl, 3)
    shutil.rmtree(jsonl.parent if removed == "json-directory" else tb)
    out, err = proc.communicate(timeout=SLACK_S)
    assert proc.returncode == 3, err[-2000:]
    _assert_quiet(err)
    lines = _lines(err, SWEEP)
    rank0 = next(line for line in lines if line.startswith(f"{SWEEP}: rank 0: "))
    if removed == "json-directory":
        assert (
            rank0
            == f"{SWEEP}: rank 0: cannot write --json '{jsonl}': it was removed during the sweep, with the rows in it"
        )
        assert not jsonl.parent.exists()  # not made again behind the user's back
    else:
        assert re.fullmatch(
            rf"{SWEEP}: rank 0: cannot write --logdir '{tb}' after \d+ rows: No such file or directory", rank0
        )
    assert sorted(lines) == [rank0, f"{SWEEP}: rank 1: stopped because rank 0 {rank0.split('rank 0: ')[1]}"]
    # What was written is kept: every row the sweep measured is in the CSV and the table, which say how it ended.
    written = int(re.search(r"# Sweep failed \(.*\): (\d+) rows written$", out.splitlines()[-1]).group(1))
    assert csv_path.read_text().count("\n") == 1 + written >= 4
    if removed == "tensorboard-logdir":
        records = [json.loads(line) for line in jsonl.read_text().splitlines()]
        assert records[-1]["record"] == "end" and records[-1]["rows"] == written
        assert records[-1]["reason"] == rank0.split("rank 0: ")[1]
    assert all(gone(rank["pid"]) for rank in header["ranks"])


def test_a_full_or_closed_stdout_stops_the_sweep(tmp_path):
    """`> /dev/full`: one line naming stdout. `| head -2`: the reader took what it wanted; exit 141 quietly,
    as a program killed by SIGPIPE, and the rows are in --json."""
    sizes = ["--sizes", "1K,2K", "--min-time-ms", "0"]
    with open("/dev/full", "w") as full:
        to_full = _sweep(*sizes, stdout=full)
    jsonl = tmp_path / "rows.jsonl"
    to_head = _sweep(*LONG_SWEEP, "--json", str(jsonl))  # long: it is still writing when the reader leaves
    to_head.stdout.readline()
    to_head.stdout.close()  # the reader goes away after one line
    _, err = to_full.communicate(timeout=120)
    assert to_full.returncode == 3, err
    _assert_quiet(err)
    why = "cannot write the table to stdout after 0 rows: No space left on device"
    assert sorted(err.splitlines()) == [f"{SWEEP}: rank 0: {why}", f"{SWEEP}: rank 1: stopped because rank 0 {why}"]
    err = to_head.stderr.read()
    assert to_head.wait(timeout=120) == 141 and err == "", err
    assert json.loads(jsonl.read_text().splitlines()[-1])["reason"].startswith("cannot write the table to stdout")


def _assert_training_stopped(proc: subprocess.Popen, pids: list[int], events_dir: Path, why: str) -> list[str]:
    """train.py exits 3 at once with one line per rank: rank 0's names the output, rank 1's says it stopped
    because of it; no writer-thread traceback, and no rank left."""
    _, err = proc.communicate(timeout=SLACK_S)
    assert proc.returncode == 3, err[-3000:]
    _assert_quiet(err)
    lines = _lines(err, "train.py")
    assert len(lines) == 2, lines
    rank0 = next(line for line in lines if line.startswith("train.py: rank 0: "))
    pattern = re.escape(f"train.py: rank 0: cannot write the TensorBoard events in '{events_dir}' at step ")
    step = re.match(pattern + r"(\d+): " + re.escape(why), rank0)
    assert step, rank0
    rank1 = f"train.py: rank 1: stopped at step {step.group(1)} because rank 0 cannot write the TensorBoard events"
    # The lines whole in the message: pytest's repr of the list cuts them, and rank 1's is the one to read.
    assert any(line.startswith(rank1) for line in lines), "\n".join(lines)
    assert all_gone(pids)
    return lines


@pytest.mark.slow
# With the resolve thread, a rank gather every 3 steps: the worker's failed write reaches the loop's thread at the
# start of a step that opens with a gather on every rank (one step in 3), which rank 0 must join before it stops
# (callback.py), or at one that does not.
@pytest.mark.parametrize(
    "where", [(), ("--resolve-thread", "--gather-every", "3")], ids=["loop-thread", "resolve-thread"]
)
def test_a_run_directory_removed_during_training_ends_it_with_one_line_per_rank(tmp_path, where):
    """Either way the steps are logged (on the loop's thread, or on the harness's own during backward), the ranks
    say they stopped at the same step."""
    proc, logdir = start_train(tmp_path, [sys.executable], where)
    pids = wait_for_steps(proc, tmp_path, logdir)
    (run_dir,) = logdir.glob("*/*")
    _remove_while_written(logdir)
    lines = _assert_training_stopped(proc, pids, run_dir, "No such file or directory")
    rank0 = next(line for line in lines if line.startswith("train.py: rank 0"))
    assert rank0.endswith("; what was measured could not be kept: summary.json: No such file or directory")
    assert not logdir.exists()  # the removed directory is not made again for the summary


def _remove_while_written(directory: Path) -> None:
    """Remove `directory` while a run writes into it: a file the run creates between rmtree's listing and its
    rmdir (the partial summary's temporary file, say) fails that rmdir with ENOTEMPTY, so try again."""
    for _ in range(50):
        try:
            shutil.rmtree(directory)
            return
        except OSError:
            time.sleep(0.1)
    shutil.rmtree(directory)


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB file system of its own (tmpfs), to fill up during a run; root only."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass


@pytest.mark.slow
def test_a_full_disk_ends_training_with_one_line_per_rank_and_keeps_the_events(tmp_path, small_disk):
    (small_disk / "runs").mkdir()
    os.symlink(small_disk / "runs", tmp_path / "runs")  # start_train writes under tmp_path/runs
    proc, logdir = start_train(tmp_path, [sys.executable])
    pids = wait_for_steps(proc, tmp_path, logdir)
    (run_dir,) = logdir.glob("*/*")
    _fill(small_disk)
    lines = _assert_training_stopped(proc, pids, run_dir, "No space left on device")
    rank0 = next(line for line in lines if line.startswith("train.py: rank 0"))
    assert rank0.endswith("; what was measured could not be kept: summary.json: No space left on device")
    (small_disk / "filler").unlink()
    # What reached the disk stays readable: every step up to the failure, in order.
    assert steps_logged(logdir) >= 10
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [event.step for event in acc.Scalars(tags.STEP_MS)]
    # Every measured step up to the failure, in order (warm-up and calibration steps are under setup/).
    assert steps and steps == measured_steps_upto(steps[-1])
    # No summary.json, nor anything else but Lightning's hparams.yaml, which the Trainer writes as training starts
    # (Fabric's loop, train.py's default, only at a successful end).
    assert {p.name for p in run_dir.iterdir() if not p.name.startswith("events.")} <= {"hparams.yaml"}


# ---- signals: every process a tool starts dies with it ----------------------------------------------------


def _process_group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM])  # SIGINT and SIGHUP to train.py: their own tests
def test_a_signal_to_the_grid_stops_its_train_py_and_every_rank(signum, tmp_path):
    logdir = tmp_path / "grid"
    grid = subprocess.Popen(
        [sys.executable, "-m", "harness.grid", "--model", "resnet_tiny", "--bucket-cap-mb", "1,5",
         "--comm-hook", "allreduce", "--logdir", str(logdir), "--", "--max-steps", "1000000", "--timeout", "10"],
        cwd=REPO, env=train_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # the test signals the grid alone, as `kill` would
    )  # fmt: skip
    log = logdir / "logs" / "resnet_tiny-bucket1-allreduce.log"
    deadline = time.monotonic() + 240
    while not (log.exists() and (roll := ROLL.search(log.read_text()))) or steps_logged(logdir) < 3:
        assert grid.poll() is None and time.monotonic() < deadline, grid.communicate()[1][-3000:]
        time.sleep(0.5)
    ranks = [int(roll.group(1)), int(roll.group(2))]
    train = _parent(ranks[0])
    assert _parent(ranks[1]) == train and _parent(train) == grid.pid
    assert set(ranks) | {train} <= set(_process_group(train))  # the run's own process group
    struck = time.monotonic()
    grid.send_signal(signum)
    out, err = grid.communicate(timeout=120)
    took = time.monotonic() - struck
    assert grid.returncode == 128 + signum, (grid.returncode, err[-3000:])
    assert took < SLACK_S, took
    assert all_gone([train, *ranks], within=1)
    deadline = time.monotonic() + 5  # helpers of train.py (multiprocessing's resource tracker) follow it out
    while _process_group(train) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _process_group(train) == []
    name = signal.Signals(signum).name
    assert f"{GRID}: interrupted by {name} after 0 of 2 runs: comparing what was measured" in err
    assert "[1/2] resnet_tiny-bucket1-allreduce: stopped" in out and "[2/2]" not in out  # no next run
    assert "Traceback" not in err
    # The stopped run kept what it measured, as train.py does when signalled, and the table shows it.
    (summary_path,) = logdir.glob("resnet_tiny-bucket1-allreduce/*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert summary["completed"] is False and f"interrupted by {name}" in summary["reason"]
    assert "resnet_tiny-bucket1-allreduce" in out and (logdir / "comparison.csv").exists()


@pytest.mark.slow
def test_sighup_stops_train_py_and_every_rank(tmp_path):
    proc, logdir = start_train(tmp_path, [sys.executable])
    pids = wait_for_steps(proc, tmp_path, logdir)
    proc.send_signal(signal.SIGHUP)  # train.py alone: it passes the signal on to its ranks
    _, err = proc.communicate(timeout=SLACK_S)
    assert proc.returncode == 129, err[-3000:]
    # Each rank gets the signal itself: rank 0 stops at a step boundary, or, when its peer stopped first and
    # left the step's collective, says the signal came first and names what then failed (as for SIGTERM).
    then_failed = rf"; then (step \d+, .*|{HARNESS_COLLECTIVE}) failed: "
    stopped = rf"train\.py: rank 0: interrupted by SIGHUP( at (the start of )?step \d+|{then_failed})"
    assert re.search(stopped, err), err[-3000:]
    assert "Traceback" not in err and all_gone(pids)
    (summary_path,) = logdir.glob("*/*/summary.json")
    assert json.loads(summary_path.read_text())["completed"] is False


@pytest.mark.slow
def test_sighup_stops_the_sweep_unless_it_was_ignored(tmp_path):
    """A terminal that hangs up stops the sweep (exit 129, rows kept); under `nohup` (SIGHUP ignored from the
    start) it goes on, as nohup promises."""
    stopped, ignoring = tmp_path / "stopped.jsonl", tmp_path / "nohup.jsonl"
    hup = _sweep(*LONG_SWEEP, "--json", str(stopped))
    # The nohup'd sweep must still be running when it is terminated, about 10 s after it starts: LONG_SWEEP is
    # all done in 8 s on a quiet 2-core machine (a CI run caught it exiting as the SIGTERM came); this one takes
    # about a minute.
    nohup = _sweep(
        *OUTLASTING_SWEEP, "--json", str(ignoring), preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)
    )
    header = wait_for_rows(hup, stopped, 3)
    wait_for_rows(nohup, ignoring, 3)
    hup.send_signal(signal.SIGHUP)
    nohup.send_signal(signal.SIGHUP)
    _, err = hup.communicate(timeout=SLACK_S)
    assert hup.returncode == 129 and "rank 0: interrupted by SIGHUP during all_reduce" in err, err[-2000:]
    assert json.loads(stopped.read_text().splitlines()[-1])["reason"] == "SIGHUP"
    assert all(gone(rank["pid"]) for rank in header["ranks"])
    time.sleep(1)
    assert nohup.poll() is None, nohup.communicate()[1][-2000:]  # still sweeping
    rows = ignoring.read_text().count('"record": "row"')
    time.sleep(1)
    assert ignoring.read_text().count('"record": "row"') > rows
    nohup.terminate()
    assert nohup.wait(timeout=SLACK_S) == 143


@pytest.mark.parametrize("module", ["harness.raw_sweep", "harness.compare", "harness.predict"])
def test_a_fifo_as_output_is_refused_at_once(module, tmp_path):
    """A FIFO with no reader would block the open forever: it is one line and exit 2, before anything runs."""
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    option = "--csv" if module == "harness.compare" else "--json"
    args = {
        "harness.raw_sweep": [option, str(fifo)],
        "harness.compare": [str(tmp_path), option, str(fifo)],
        "harness.predict": ["--model", "resnet_tiny", "--alpha-us", "10", "--busbw-gbps", "1", option, str(fifo)],
    }[module]
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=repo, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].endswith(f"error: {option}: {str(fifo)!r} is not a regular file; give a file name"), lines
