"""bench.vs_plain: --report pools the pairs of several calls (each call's --out file) into one table and refuses a
file that is not one of its own in one line; a leftover run is a Python process running train.py or the plain loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    # Ratios 0.75, 1, 1: a resample's median is 0.75 when two or three of its three draws are (7 in 27), so the
    # bootstrap's 2.5th percentile is 0.75 and its 97.5th is 1.
    assert lines[-1] == (
        "# train.py: train.py as shipped; plain/train.py median 1.000, 95 % interval of the median [0.750, 1.000]"
        " (bootstrap over the 3 pairs)"
    )


def test_report_splits_each_ratio_by_where_the_variant_ran(tmp_path):
    """Rotated orders: train.py 25 % slower whenever it ran second, at the plain loop's speed elsewhere. The pooled
    median hides that; the line by place shows it (and none is written for one order throughout)."""
    orders = [["plain", "train.py"], ["train.py", "plain"], ["plain", "train.py"], ["train.py", "plain"]]
    records = []
    for number, order in enumerate(orders):
        train_ms = 40.0 if order.index("train.py") == 1 else 30.0
        runs = {"plain": {"ms_per_step": 30.0}, "train.py": {"ms_per_step": train_ms}}
        record = {"pair": number, "order": order, **{name: runs[name] for name in order}, "variants": {"train.py": []}}
        records.append(json.dumps(record) + "\n")
    rotated, fixed = tmp_path / "rotated.jsonl", tmp_path / "fixed.jsonl"
    rotated.write_text("".join(records))
    fixed.write_text(records[0] + records[2])
    proc = report(rotated)
    assert proc.returncode == 0, proc.stderr
    assert "# plain/train.py, median by where train.py ran in its pair: 1st 1.000 (2 pairs), 2nd 0.750 (2 pairs)" in (
        proc.stdout.splitlines()
    )
    assert "by where" not in report(fixed).stdout


def test_a_checkout_run_as_a_variant_is_named_and_set_against_train_py_pair_by_pair(tmp_path):
    """--tree NAME=DIR's runs: the table names DIR's train.py, and every variant gets a line against train.py as
    shipped, from each pair's own two runs (here the checkout is 10 % slower in every pair, whatever the plain
    loop's drift)."""
    records = []
    for number, plain_ms in enumerate([30.0, 36.0, 33.0]):
        runs = {"plain": {"ms_per_step": plain_ms}, "train.py": {"ms_per_step": 40.0 + number}}
        runs["before"] = {"ms_per_step": (40.0 + number) * 1.1}
        runs["train.py"]["harness_cpu_ms_per_step"] = 0.5 + number / 100  # 0.50, 0.51, 0.52
        runs["before"]["harness_cpu_ms_per_step"] = 0.6  # so train.py − before: −0.10, −0.09, −0.08
        record = {"pair": number, "order": list(runs), **runs, "variants": {"train.py": [], "before": []}}
        records.append(json.dumps({**record, "trees": {"before": "/tmp/old_checkout"}}) + "\n")
    path = tmp_path / "trees.jsonl"
    path.write_text("".join(records))
    proc = report(path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("# before: /tmp/old_checkout/train.py (another checkout) as shipped;") for line in lines)
    assert lines[-2] == (
        "# train.py/before median 0.909, 95 % interval of the median [0.909, 0.909] (above 1: train.py as shipped "
        "is the slower)"
    )
    assert lines[-1] == (
        "# harness CPU ms a step, train.py − before, pair by pair: median -0.090 (from -0.100 to -0.080, 3 pairs)"
    )


def test_report_refuses_one_name_for_two_checkouts(tmp_path):
    """Pooled files where one variant name ran two different checkouts: not one row of two programs."""
    paths = []
    for number, tree in enumerate(["/tmp/checkout_a", "/tmp/checkout_b"]):
        runs = {"plain": {"ms_per_step": 30.0}, "train.py": {"ms_per_step": 31.0}, "before": {"ms_per_step": 32.0}}
        record = {"pair": 0, "order": list(runs), **runs, "variants": {"train.py": [], "before": []}}
        paths.append(tmp_path / f"call{number}.jsonl")
        paths[-1].write_text(json.dumps({**record, "trees": {"before": tree}}) + "\n")
    proc = report(*paths)
    assert proc.returncode == 2
    assert "'before' ran /tmp/checkout_a in one pair and /tmp/checkout_b in another" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("before", "expected NAME=DIR"),
        ("before=/nonexistent/checkout", "has no train.py"),
        ("plain=.", "is taken"),
        ("plain_torch_hook=.", "is taken"),  # a ready-made variant's name, even one not asked for
        ("cpus=.", "is taken"),
    ],
)
def test_a_tree_variant_that_cannot_run_is_refused_in_one_line(spec, says):
    cmd = [sys.executable, "-m", "bench.vs_plain", "--pairs", "1", "--tree", spec]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--pairs", "0"], "--pairs must be at least 1, got 0"),
        (["--nproc", "-1"], "--nproc must be at least 1, got -1"),
        (["--image-size", "0"], "--image-size must be at least 1, got 0"),
        (["--steps", "-5"], "--steps must be at least 2, got -5"),
        (["--steps", "10", "--window-start", "9"], "--window-start must be at least 0 and below --steps - 1 (9)"),
        (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0"),
        (["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
        (["--variant", "noequals"], "--variant 'noequals': give NAME=\"ARGS\""),
        (["--out", "/nonexistent/dir/pairs.jsonl"], "--out: directory '/nonexistent/dir' does not exist"),
    ],
)
def test_a_mistake_is_refused_before_any_run(args, says):
    """Each in one line and exit 2 at once, not as a traceback after a pair has run (or a run that never ends)."""
    cmd = [sys.executable, "-m", "bench.vs_plain", "--model", "resnet_tiny", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"python -m bench.vs_plain: error: {says}"), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_report_refuses_damaged_times_and_a_file_given_twice(tmp_path):
    """A step time of 0, a string or NaN would divide by zero, fail to divide or print NaN ratios; one file named
    twice would count its pairs twice."""
    good = tmp_path / "good.jsonl"
    good.write_text(pair(0, 30.0, 31.0))
    for value in ("0", '"fast"', "NaN", "-3"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(pair(0, 30.0, 31.0).replace('"ms_per_step": 31.0', f'"ms_per_step": {value}'))
        proc = report(good, bad)
        assert proc.returncode == 2, (value, proc.stdout)
        assert f"{bad}:1 has a run whose ms_per_step is not a positive number" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    twice = report(good, tmp_path / ".." / tmp_path.name / "good.jsonl")
    assert twice.returncode == 2 and "again; give each file once" in twice.stderr, twice.stderr


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

    # Each in a session of its own, so that killing its group ends the shell's sleep too. Each says "ready" once it
    # runs: Popen returns inside the child's execve, before the kernel has set the new argv, and a /proc read in that
    # window finds an empty cmdline (CI found neither process once, 2026-12-06).
    shell = subprocess.Popen(
        ["bash", "-c", "echo ready; sleep 30; echo train.py"], start_new_session=True, stdout=subprocess.PIPE
    )
    python = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)", "train.py"],
        start_new_session=True,
        stdout=subprocess.PIPE,
    )
    try:
        assert [proc.stdout.readline() for proc in (shell, python)] == [b"ready\n"] * 2
        found = leftover_runs()
        assert python.pid in found
        assert shell.pid not in found
    finally:
        for proc in (shell, python):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize(
    ("argv", "measured"),
    [
        ([b"/usr/bin/python3", b"-u", b"train.py", b"--model", b"resnet50"], True),
        ([b"python3.11", b"/abs/path/train.py"], True),
        ([b"/venv/bin/python", b"-m", b"bench.plain_ddp", b"--steps", b"300"], True),
        ([b"/bin/bash", b"-c", b"python train.py"], False),
        ([b"/venv/bin/python", b"-m", b"bench.vs_plain"], False),
        ([b"/venv/bin/python", b"my_train.py"], False),
        ([], False),
    ],
)
def test_is_measured_run_names_python_running_train_py_or_the_plain_loop(argv, measured):
    from bench.vs_plain import is_measured_run

    assert is_measured_run(argv) is measured


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the host's CPU counters come from Linux's /proc/stat")
def test_host_during_run_counts_a_process_that_burns_one_cpu_as_busy():
    """The kernel's own counters against a known load: a child burning one CPU for 0.6 s makes at least its share
    of the host's CPUs (one of os.cpu_count()) busy over that time, whatever else the host runs."""
    from bench.vs_plain import host_during_run, host_jiffies

    before = host_jiffies()
    burn = "import time\nend = time.perf_counter() + 0.6\nwhile time.perf_counter() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True, timeout=60)
    shares = host_during_run(before)
    one_cpu = 100 / os.cpu_count()
    assert shares["host_busy_pct"] >= 0.8 * one_cpu, shares
    assert 0 <= shares["host_steal_pct"] <= 100, shares
    assert host_during_run(None) == {}


def test_host_during_run_reads_each_field_of_proc_stat_where_the_kernel_puts_it(monkeypatch):
    """Two "cpu" lines of /proc/stat, 1000 ticks apart: user 300, nice 50, system 100, idle 400, iowait 50, irq 20,
    softirq 30, steal 50, and guest 200 (already inside user, so not counted again). Busy is what ran: 500 of 1000;
    stolen 50."""
    import bench.vs_plain as vs_plain

    before = [1000, 100, 500, 9000, 200, 10, 20, 5, 300, 0]
    delta = [300, 50, 100, 400, 50, 20, 30, 50, 200, 0]
    monkeypatch.setattr(vs_plain, "host_jiffies", lambda: [b + d for b, d in zip(before, delta, strict=True)])
    shares = vs_plain.host_during_run(before)
    assert shares == {"host_busy_pct": pytest.approx(50.0), "host_steal_pct": pytest.approx(5.0)}


SCHEDSTAT = "/proc/thread-self/schedstat"  # this thread's CPU run and its wait for a CPU, in ns


def waited_ns() -> int:
    """How long this thread has waited for a CPU so far, in ns."""
    return int(Path(SCHEDSTAT).read_text().split()[1])


def probe_on(cpu: int, hog: bool) -> tuple[float, float, float]:
    """cpu_probe_ms on `cpu` (with a busy process pinned there too, or not), the ms it took in all, and the ms this
    thread waited for the CPU meanwhile (the kernel's run_delay)."""
    from bench.vs_plain import cpu_probe_ms
    from tests.contender import on_cpu

    with on_cpu(cpu, hog):
        waited_before = waited_ns()
        start = time.perf_counter()
        probe = cpu_probe_ms()
        took = (time.perf_counter() - start) * 1e3
        waited = (waited_ns() - waited_before) / 1e6
    return probe, took, waited


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or not os.path.exists(SCHEDSTAT),
    reason="pinning to a CPU and reading a thread's wait for it need Linux",
)
def test_the_cpu_probe_runs_slower_on_a_cpu_shared_with_a_busy_process():
    """A known cause: a process spinning on the probe's one CPU. The scheduler shares that CPU between the two, so
    the probe, which spans several time slices, takes about twice as long. The probe alone is taken where the kernel
    says the CPU was free (it waited under a tenth of the time): on a busy machine another task may share it."""
    cpu = max(os.sched_getaffinity(0))
    free = []
    for _ in range(5):
        probe, took, waited = probe_on(cpu, hog=False)
        if waited < 0.1 * took:
            free.append(probe)
    if not free:
        pytest.skip(f"{cpu=} was never free of other tasks for the probe alone (waited {waited:.1f} of {took:.1f} ms)")
    # The fastest of the free readings: this virtual machine's CPU itself ran the probe in 25-41 ms over ten readings
    # alone (2026-12-07), and against one slow reading a shared CPU read only 1.37x (a fresh-clone CI run).
    alone = min(free)
    shared, _, _ = probe_on(cpu, hog=True)
    assert shared >= 1.4 * alone, (alone, shared)


def fake_topology(root: Path, cores: dict[int, int]) -> Path:
    """A sysfs-shaped CPU topology: logical CPU -> its core's id, all on package 0."""
    for cpu, core in cores.items():
        base = root / f"cpu{cpu}" / "topology"
        base.mkdir(parents=True)
        (base / "physical_package_id").write_text("0\n")
        (base / "core_id").write_text(f"{core}\n")
    return root


def test_pick_cpus_takes_one_cpu_of_each_physical_core_or_the_list_given(tmp_path):
    from bench.vs_plain import pick_cpus

    # Hyperthreads numbered as Linux numbers them on many hosts: CPUs 0-3 the first thread of cores 0-3, 4-7 their
    # second threads.
    topology = fake_topology(tmp_path, {cpu: cpu % 4 for cpu in range(8)})
    allowed = set(range(8))
    assert pick_cpus("cores:3", allowed, topology) == [0, 1, 2]
    assert pick_cpus("cores:2", {1, 5, 6, 2}, topology) == [1, 2]  # 5 shares core 1 with CPU 1
    with pytest.raises(ValueError, match="4 physical cores only"):
        pick_cpus("cores:5", allowed, topology)
    assert pick_cpus("0-2,6", allowed, topology) == [0, 1, 2, 6]
    for bad in ("cores:0", "cores:x", "a-b", "1-", "3-1", "", "9"):
        with pytest.raises(ValueError):
            pick_cpus(bad, allowed, topology)


def test_cpus_the_process_may_not_use_get_a_one_line_error():
    cmd = [sys.executable, "-m", "bench.vs_plain", "--pairs", "1", "--cpus", "100000"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--cpus: '100000': this process may run on CPUs" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_report_says_where_the_runs_were_pinned(tmp_path):
    pinned, free = tmp_path / "pinned.jsonl", tmp_path / "free.jsonl"
    record = json.loads(pair(0, 30.0, 30.0))
    pinned.write_text(json.dumps({**record, "cpus": [0, 2]}) + "\n")
    free.write_text(pair(1, 30.0, 30.0))
    proc = report(pinned)
    assert proc.returncode == 0, proc.stderr
    assert "# where the runs could run (--cpus): CPUs 0,2" in proc.stdout
    assert "# where the runs could run (--cpus): CPUs 0,2; not pinned" in report(pinned, free).stdout


def test_a_run_that_refuses_its_arguments_is_one_line_and_exit_2(tmp_path):
    """The pair's first run (the plain loop) refuses the image size the user gave: the user's mistake, so one line
    that carries the run's own refusal, exit 2, and no traceback (before, a RuntimeError's)."""
    out = tmp_path / "pairs.jsonl"
    cmd = [sys.executable, "-m", "bench.vs_plain", "--nproc", "1", "--model", "resnet_tiny", "--image-size", "16"]
    cmd += ["--pairs", "1", "--steps", "5", "--window-start", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    refusal = [line for line in proc.stderr.splitlines() if line.startswith("python -m bench.vs_plain: error:")]
    assert len(refusal) == 1 and "refused its arguments" in refusal[0] and "--image-size 16 is too small" in refusal[0]
    assert not out.exists() or out.read_text() == ""  # no pair was measured, so none is written
