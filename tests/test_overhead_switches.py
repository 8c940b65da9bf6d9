"""The switches that lower the harness's cost (issue 11): --log-every, --no-progress-bar, --comm-hook none,
--harness off and --no-resolve-thread, as real train.py runs on gloo (resnet_tiny, a dozen steps); the CPU cost
in summary.json; the progress bar's phase; and the one-line refusals of bad values."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bench.vs_plain import train_window
from harness.common import tags, thread_cpu
from harness.common.names import SUMMARY_FILE
from harness.train.callback import CommTimingCallback
from harness.train.stamps import BucketTiming
from harness.train.step_log import StepLog
from harness.train.step_stats import StepStats
from harness.train.trainer import THREADS_HEAD, WAITS_HEAD, WINDOW_LINE
from tests.train_runs import REPO, run_train

STEPS = 12
# Warm-up 0, 1; a calibration block 2, 3, the timeline steps 4, 5 and none later; measured 6..11.
CALIBRATION = ["--calibration-steps", "2", "--calibration-every", "0"]
TINY = ["--model", "resnet_tiny", "--max-steps", str(STEPS), "--gather-every", "0", *CALIBRATION]


def only_summary(logdir: Path) -> dict:
    summaries = list(logdir.glob(f"*/*/{SUMMARY_FILE}"))
    assert len(summaries) == 1, summaries
    return json.loads(summaries[0].read_text())


def events(logdir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(next(logdir.glob(f"*/*/{SUMMARY_FILE}")).parent), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_log_every_writes_every_nth_step_and_the_summary_counts_all(tmp_path):
    logdir = tmp_path / "runs"
    proc = run_train([*TINY, "--log-every", "3", "--no-progress-bar"], logdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = events(logdir)
    for tag in (tags.STEP_MS, tags.COMM_MS, tags.bucket_tag(0, "time_ms"), tags.bucket_band_tags(0)[0]):
        assert [e.step for e in acc.Scalars(tag)] == [6, 9], tag
    assert [e.step for e in acc.Scalars(tags.WARMUP_STEP_MS)] == [0, 1]
    assert [e.step for e in acc.Scalars(tags.CALIBRATION_STEP_MS)] == [2, 3, 4, 5]
    summary = only_summary(logdir)
    assert summary["totals"]["steps_measured"] == 6
    assert summary["settings"]["log_every"] == 3 and summary["settings"]["progress_bar"] is False
    # No bar: neither tqdm's rate nor the bar's fields anywhere in the output.
    assert "it/s" not in proc.stdout + proc.stderr and "comm_ms=" not in proc.stdout + proc.stderr
    # The CPU cost over the window, from the start of step 6 (after warm-up and calibration) to that of step 11.
    overhead = summary["overhead_s"]
    assert (overhead["cpu_window_first_step"], overhead["cpu_window_last_step"]) == (6, 11)
    assert 0 < overhead["harness_cpu_ms_per_step"] < overhead["loop_cpu_ms_per_step"]
    assert overhead["loop_cpu_ms_per_step"] <= overhead["process_cpu_ms_per_step"]
    assert overhead["progress_bar_cpu_ms_per_step"] == 0 and overhead["wall_ms_per_step"] > 0
    # Each thread's CPU, read from /proc: the main thread's agrees with its own clock (time.thread_time), and
    # together the threads make the process's CPU (time.process_time).
    threads = overhead["thread_cpu_ms_per_step"]
    assert threads["main"] == pytest.approx(overhead["loop_cpu_ms_per_step"], rel=0.1, abs=0.5), threads
    assert sum(threads.values()) == pytest.approx(overhead["process_cpu_ms_per_step"], rel=0.15, abs=1.0), threads
    assert "# CPU ms per step by thread, same steps: main " in proc.stdout
    # Each thread's wait for a CPU, the kernel's run_delay: the main thread cannot have run and waited for longer
    # than the window's wall time (2 ranks on this 2-core machine do wait).
    if thread_cpu.waits_kept(thread_cpu.thread_cpu_s()):
        waits = overhead[thread_cpu.WAITS_KEY]
        assert threads["main"] + waits.get("main", 0.0) <= overhead["wall_ms_per_step"] * 1.05 + 0.5, waits
        assert "# waited for a CPU while ready to run (another task held it)" in proc.stdout


@pytest.mark.slow
def test_resolve_thread_logs_the_same_steps_as_the_loops_thread(tmp_path):
    """The StepWorker (--resolve-thread; off by default) resolves and logs off the loop's thread; a step
    with a rank gather (a collective) stays on it. Both ways, on 2 gloo ranks, write the same steps under every tag
    and gather the same step."""
    written = {}
    for mode in ("--resolve-thread", "default"):
        logdir = tmp_path / mode.strip("-")
        flag = [mode] if mode != "default" else []
        args = [*TINY, "--gather-every", "4", "--no-progress-bar", *flag]  # measured 6..11: step 8 is gathered
        proc = run_train(args, logdir)
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = only_summary(logdir)
        assert summary["totals"]["steps_measured"] == 6 and summary["overhead_s"]["gathers"] == 1
        assert summary["settings"]["resolve_thread"] is (mode == "--resolve-thread")
        worker_ms = summary["overhead_s"]["step_worker_cpu_ms_per_step"]
        assert (worker_ms > 0) is (mode == "--resolve-thread"), worker_ms
        # The worker's jobs, timed by the worker itself, are its thread's CPU as /proc has it.
        threads = summary["overhead_s"]["thread_cpu_ms_per_step"]
        assert threads.get("harness-step-worker", 0.0) == pytest.approx(worker_ms, rel=0.2, abs=0.2), threads
        assert ("on the harness's own thread during backward" in proc.stdout) is (mode == "--resolve-thread")
        # The events written on the loop's thread are a part of the callback's CPU, printed beside it: every logged
        # step's by default; with the worker, the gathered step's (a collective, so on the loop's thread).
        overhead = summary["overhead_s"]
        assert 0 < overhead["logging_cpu_ms_per_step"] < overhead["callback_cpu_ms_per_step"], overhead
        assert f"(its TensorBoard events {overhead['logging_cpu_ms_per_step']:.2f}, " in proc.stdout
        acc = events(logdir)
        written[mode] = {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
        assert written[mode][tags.STEP_MS] == list(range(6, STEPS)), written[mode][tags.STEP_MS]
        gathered = [tag for tag in written[mode] if tag.startswith(tags.RANKS + "/")]
        assert gathered, "the gathered step wrote no ranks/ scalars"
    assert written["--resolve-thread"] == written["default"]


@pytest.mark.slow
def test_no_hook_times_steps_only_and_compare_reads_it(tmp_path):
    logdir = tmp_path / "runs"
    proc = run_train([*TINY, "--comm-hook", "none"], logdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = only_summary(logdir)
    totals = summary["totals"]
    # Calibration needs the hook: none ran, so every step after warm-up is measured.
    assert totals["steps_measured"] == STEPS - 2 and totals["calibration_steps"] == 0
    assert totals["step_ms_p50"] > 0 and totals["samples_per_s_p50"] > 0
    assert summary["buckets"] == []
    # No calibration step, so no backward timeline; no timed hook, so no codec probe.
    assert summary["backward_timeline"] is None and summary["codec_probe"] is None
    for key in ("comm_ms_p50", "bytes_per_step", "busbw_gbps_p50", "exposed_ms_p50"):
        assert totals[key] is None, key
    assert "--comm-hook none" in totals["exposure_verdict"] and "--comm-hook none" in proc.stdout
    written = events(logdir).Tags()["scalars"]
    no_comm = (tags.COMM, tags.PER_BUCKET, tags.COMM_MS, tags.EXPOSED_MS)
    assert tags.STEP_MS in written and not [tag for tag in written if tag.startswith(no_comm)]
    # The bar is on, without communication figures.
    assert "step/s" in proc.stdout and "step_ms=" in proc.stdout and "comm_ms=" not in proc.stdout
    # bench.vs_plain keeps the harness's main-thread CPU with its two parts, the timing callback's and the bar's.
    (run_root,) = logdir.iterdir()
    window = train_window(run_root, proc.stdout)
    parts = window["callback_cpu_ms_per_step"], window["progress_bar_cpu_ms_per_step"]
    assert parts[0] > 0 and parts[1] >= 0 and sum(parts) == pytest.approx(window["harness_cpu_ms_per_step"]), window
    compare = subprocess.run(
        [sys.executable, "-m", "harness.compare", str(logdir)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert compare.returncode == 0, compare.stderr
    row = next(line for line in compare.stdout.splitlines() if "resnet_tiny" in line)
    assert " none " in row and "done" in row


@pytest.mark.slow
def test_harness_off_is_lightning_alone_and_writes_nothing(tmp_path):
    logdir = tmp_path / "runs"
    proc = run_train([*TINY, "--harness", "off"], logdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The line follows the bar's last redraw (carriage returns, no newline) on stdout.
    line = next(line for line in proc.stdout.splitlines() if "# Lightning alone" in line)
    assert f"{STEPS} steps in" in line
    match = WINDOW_LINE.search(line)
    assert match is not None and match.group(1, 2) == ("6", "11"), line
    assert float(match.group(3)) > 0
    # bench.vs_plain reads each thread's CPU from the line after it; the main thread's is the window line's.
    threads = next(line for line in proc.stdout.splitlines() if line.startswith(THREADS_HEAD))
    main_ms = thread_cpu.parse(threads.removeprefix(THREADS_HEAD))["main"]
    assert main_ms == pytest.approx(float(match.group(4)), rel=0.1, abs=0.5), (threads, line)
    # ...and each thread's wait for a CPU from the line after that, which is there whenever the kernel keeps them.
    if thread_cpu.waits_kept(thread_cpu.thread_cpu_s()):
        waits_line = next(line for line in proc.stdout.splitlines() if line.startswith(WAITS_HEAD))
        waits = thread_cpu.parse(waits_line.removeprefix(WAITS_HEAD))
        assert main_ms + waits.get("main", 0.0) <= float(match.group(3)) * 1.05 + 0.5, (waits, line)
    assert "Gradient communication" not in proc.stdout  # no table: no timing callback
    assert not [path for path in logdir.rglob("*")], "a --harness off run writes nothing"
    assert "# run directory" not in proc.stdout, "...so it names no run directory either"


def test_bad_switch_is_one_line_exit_2(tmp_path):
    for args in (["--log-every", "0"], ["--harness", "off", "--comm-hook", "fp16"]):
        proc = subprocess.run(
            [sys.executable, str(REPO / "train.py"), *args, "--logdir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[-1].startswith("train.py: error:") and args[-2] in lines[-1]


def stats(step: int, calibration: bool = False) -> StepStats:
    return StepStats(step, 10.0, 400.0, 200.0, 1, 4000, 2.0, 0.0, 1.0, 1.0, 2.0, 0.5, calibration=calibration)


def bucket(step: int, ms: float) -> BucketTiming:
    return BucketTiming(step, 0, 1, 1000, 4000, "float32", 1.0, 1.0 + ms, ms, 0.0, ((1.0, 1.0 + ms),))


class FakeWriter:
    """What StepLog writes through: SummaryWriter's file writer (add_summary) and its custom scalars."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def _get_file_writer(self) -> FakeWriter:
        return self

    def add_summary(self, summary, global_step: int) -> None:
        self.steps.append(global_step)

    def add_custom_scalars(self, layout) -> None:
        pass


def test_steps_not_logged_still_feed_the_bucket_bands():
    writer = FakeWriter()
    log = StepLog(writer, world_size=2, every=3)
    for step in range(2, 11):
        log.write(stats(step), [bucket(step, float(step))], None, measured=True)
    assert writer.steps == [3, 6, 9]
    assert list(log.bands.windows[0]) == [float(step) for step in range(2, 11)]


def test_progress_bar_says_when_the_run_is_calibrating():
    # Warm-up 0, 1; a calibration block 2, 3, the timeline steps 4, 5, then one calibration step every 4 (6, 10, ...).
    timing = CommTimingCallback("allreduce", 8, "image", {}, calibration_steps=2, calibration_every=4)
    timing._current_step = 0
    assert timing.progress_bar_metrics() == {"phase": "warm-up"}
    timing._current_step = 3
    assert timing.progress_bar_metrics() == {"phase": "calibrating"}  # nothing measured to show yet
    timing._current_step = 5
    assert timing.progress_bar_metrics() == {"phase": "calibrating"}, "a timeline step calibrates too"
    timing.last_measured = stats(4)
    timing._current_step = 7
    # The fields that matter, no single step's exposed time (mostly noise; the end of the run gives its interval).
    assert timing.progress_bar_metrics() == {"images/s": "400", "step_ms": "10", "comm_ms": "2"}
    timing._current_step = 6
    assert timing.progress_bar_metrics() == {"phase": "calibrating"}, "the phase alone, no comm figures"
    untimed = CommTimingCallback("none", 8, "image", {})
    untimed.last_measured, untimed._current_step = stats(4), 6
    assert "comm_ms" not in untimed.progress_bar_metrics()
