"""bench.advisor_validation's noise floor (how far one run lies from its setting's other repeats) worked by hand,
--pool, which reads the errors back from the report.md files it wrote (not --drop-drifted's second verdict), --resume's
choice of what is left to run, and --drop-drifted's choice of the runs the host slowed."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bench.advisor_validation import drifted_runs, drifted_section, noise_floor, pooled_errors, still_to_run
from harness import grid
from tests.train_runs import REPO

# A report as bench.advisor_validation writes it: a grid table per base run (the older head said "median of 3"),
# then a world-size table, whose errors are not the grid's.
REPORT = """### resnet50, 4 ranks, loopback, each default-cap allreduce run of the grid as the base

#### base run grid/resnet50-bucketdefault-allreduce/1

| setting | predicted ms | measured ms (median) | runs | error | predicted exposed ms | measured exposed ms (runs) |
|---|---:|---:|---|---:|---:|---|
| default (1, then 25 MiB), allreduce | 1499.8 | 1662.8 | 1666.1, 1659.4 | -9.8 % | 164.2 | 272.3, 253.0 |
| default (1, then 25 MiB), fp16 | 1525.4 | 1598.1 | 1598.1, 1616.0 | -4.5 % | 189.8 | 328.0, 291.8 |
| 1 MiB, fp16 | 1507.3 | 1723.8 | 1743.0, 1723.8 | -12.6 % | 171.7 | 369.8, 378.6 |

- median |error| 8.6 %, worst 12.6 % over the 2 settings besides the base's

OLDER_HEAD
|---|---:|---:|---|---:|---:|---|
| 100 MiB, allreduce | 1583.6 | 1504.4 | 1504.4, 1536.5 | +5.3 % | 248.0 | 167.8, 173.4 |
| 1 MiB, allreduce | 1607.4 | no run | | |

| world size | predicted ms | measured ms | runs | error |
|---:|---:|---:|---|---:|
| 3 | 783.0 | 1186.9 | 1193.0, 1180.7 | -34.0 % |
""".replace(
    "OLDER_HEAD",
    "| setting | predicted ms | measured ms (median of 3) | runs | error | predicted exposed ms "
    "| measured exposed ms (runs) |",
)


def test_noise_floor_is_each_run_against_the_median_of_the_others():
    # 10 against median(12, 11) = 11.5: −13.0 %; 12 against median(10, 11) = 10.5: +14.3 %; 11 against 11: 0.
    # The setting run once has no other repeat to be judged against, so it is not counted.
    median, worst, runs = noise_floor({"a": [10.0, 12.0, 11.0], "b": [20.0]})
    assert runs == 3
    assert median == pytest.approx(1.5 / 11.5)
    assert worst == pytest.approx(1.5 / 10.5)


def test_no_repeats_leave_the_floor_unknown():
    median, worst, runs = noise_floor({"a": [10.0], "b": [20.0]})
    assert runs == 0 and math.isnan(median) and math.isnan(worst)


def test_pool_reads_every_grid_error_but_the_anchored_base_setting_and_the_world_sizes():
    assert pooled_errors(REPORT) == pytest.approx([0.045, 0.126, 0.053])


def test_pool_prints_each_report_and_all_of_them_and_refuses_a_file_without_a_grid(tmp_path):
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    first.write_text(REPORT)
    second.write_text(REPORT.replace("-12.6 %", "+20.0 %"))
    cmd = [sys.executable, "-m", "bench.advisor_validation", "--pool"]
    proc = subprocess.run([*cmd, str(first), str(second)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{first}: 3 predictions, median |error| 5.3 %, worst 12.6 %",
        f"{second}: 3 predictions, median |error| 5.3 %, worst 20.0 %",
        "all 2 reports: 6 predictions, median |error| 5.3 %, worst 20.0 %",
    ]
    stray = tmp_path / "notes.md"
    stray.write_text("# nothing measured here\n")
    refused = subprocess.run([*cmd, str(stray)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().endswith(f"--pool: {stray} holds no grid table that bench.advisor_validation wrote")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--switch"], "--switch joins namespace hosts: give their link's rate with --two-hosts RATE"),
        (["--two-hosts", "800", "--extrapolate", "3,4"], "two hosts joined by one link run 2 ranks"),
        (["--two-hosts", "800", "--nproc", "3"], "two hosts joined by one link run 2 ranks"),
        (["--two-hosts", "800", "--switch", "--extrapolate", "1,3"], "world sizes of 2 or more"),
        (["--extrapolate", "3,four"], "--extrapolate takes world sizes such as 3,4, not '3,four'"),
        (["--cpu-threads", "0"], "--cpu-threads takes a positive number of threads, not 0"),
    ],
)
def test_world_sizes_on_namespace_hosts_need_the_switch(tmp_path, flags, message):
    """A third host has no link to join on a veth pair: refused with one line before anything runs."""
    cmd = [sys.executable, "-m", "bench.advisor_validation", *flags, "--out", str(tmp_path / "out")]
    refused = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert message in refused.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_resume_runs_what_a_cut_grid_left_in_schedule_order(tmp_path):
    """gpt2's grid on the H100 host, cut after 10 of its 18 runs (2026-12-06): the 11th, DDP's default cap with fp16
    in its second repeat, was stopped, and its summary says it did not complete. What is left is the 11th onwards,
    in the schedule's order; under a folder with no runs, all of it."""
    summary = json.loads((REPO / "tests/data/resnet50_4ranks_4cores_each_default_allreduce.json").read_text())
    configs = [{"--comm-hook": hook} for hook in ("allreduce", "fp16")]
    configs += [{"--bucket-cap-mb": cap, "--comm-hook": hook} for cap in ("5", "100") for hook in ("allreduce", "fp16")]
    schedule = grid.run_order(configs, 3)
    for index, (_, config) in enumerate(schedule[:11]):
        run = tmp_path / grid.run_name("gpt2", config) / f"2026120608{index:02d}00"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({**summary, "completed": index < 10}))
    (tmp_path / "logs").mkdir()
    assert still_to_run(schedule, tmp_path, "gpt2") == schedule[10:]
    assert still_to_run(schedule, tmp_path / "nothing here", "gpt2") == schedule


# --drop-drifted's second verdict, as the report appends it: its tables are not the grid as measured.
DRIFTED_SECTION = """
#### Runs whose compute-only forward+backward lies over 25 % from the grid's median (215.8 ms)

- left out (1): resnet50-bucket1-allreduce/20261206-184433 432.9 ms

| setting, drifted runs left out | predicted ms | measured ms (median) | runs | error | predicted exposed ms | \
measured exposed ms (runs) |
|---|---:|---:|---|---:|---:|---|
| 1 MiB, allreduce | 313.3 | 290.4 | 295.8, 285.0 | +7.9 % | 65.7 | 68.3, 45.4 |
"""


def test_pool_leaves_out_the_second_verdict_of_drop_drifted():
    assert pooled_errors(REPORT + DRIFTED_SECTION) == pytest.approx(pooled_errors(REPORT))


def test_drop_drifted_picks_the_runs_whose_own_compute_the_host_slowed(tmp_path):
    """resnet50's 4-rank grid on a fresh H100 host (2026-12-06 18:43-18:52 UTC): the compute-only forward+backward
    of its 15 completed runs. The four from 18:44:33 to 18:46:37 ran 285-433 ms against 201-223 ms for all the
    others; the median is 215.8 ms, and at 25 % exactly those four lie outside it. A run without compute-only
    (none measured) or not completed is not judged."""
    summary = json.loads((REPO / "tests/data/resnet50_4ranks_4cores_each_default_allreduce.json").read_text())
    compute = {
        "184327": 221.4, "184401": 206.4, "184433": 432.9, "184515": 320.9, "184555": 284.9, "184637": 307.1,
        "184716": 215.8, "184749": 200.8, "184822": 217.7, "184856": 204.0, "184930": 223.0, "185002": 209.5,
        "185036": 208.5, "185109": 206.0, "185139": 203.6,
    }  # fmt: skip
    write_runs(tmp_path / "resnet50-grid", {f"20261206-{time}": ms for time, ms in compute.items()})
    stopped = tmp_path / "resnet50-grid" / "20261206-185207"
    stopped.mkdir()
    (stopped / "summary.json").write_text(json.dumps({**summary, "completed": False}))
    median, drifted = drifted_runs(tmp_path, 25)
    assert median == pytest.approx(215.8)
    assert sorted(path.name for path in drifted) == [f"20261206-{t}" for t in ("184433", "184515", "184555", "184637")]
    assert drifted_runs(tmp_path, 200) == (pytest.approx(215.8), {})
    assert drifted_runs(tmp_path / "nothing here", 25)[1] == {}


def write_runs(root, compute: dict[str, float]) -> dict[str, object]:
    """A completed summary.json (a real 4-rank run's, with its compute-only replaced) under root/<version> each."""
    summary = json.loads((REPO / "tests/data/resnet50_4ranks_4cores_each_default_allreduce.json").read_text())
    paths = {}
    for version, ms in compute.items():
        run = root / version
        run.mkdir(parents=True)
        totals = {**summary["totals"], "compute_only_ms": ms}
        (run / "summary.json").write_text(json.dumps({**summary, "totals": totals}))
        paths[version] = run
    return paths


def test_drop_drifted_judges_a_separate_base_run_against_the_grid_too(tmp_path):
    """A base run outside the grid that drifted leaves no second verdict (the verdict is not even asked for); one
    that did not is kept, and the verdict is asked for without the grid's drifted run."""
    grid_runs = write_runs(tmp_path / "grid" / "r", {"1": 200.0, "2": 210.0, "3": 400.0, "4": 205.0})
    slow_base = write_runs(tmp_path / "base" / "b", {"slow": 300.0})["slow"]
    fine_base = write_runs(tmp_path / "base" / "b", {"fine": 208.0})["fine"]
    asked = []

    def verdict(left_out):
        asked.append(left_out)
        return ["the verdict"]

    lines = drifted_section(tmp_path / "grid", 25, verdict, base=slow_base)
    assert asked == [] and "the base run drifted (300.0 ms)" in lines[-1]
    lines = drifted_section(tmp_path / "grid", 25, verdict, base=fine_base)
    assert asked == [frozenset({grid_runs["3"]})] and lines[-1] == "the verdict"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--caps", "x"], "--caps 'x': every item must be a float"),
        (["--caps", "nan"], "--caps 'nan': every cap must be a positive number of MiB"),
        (["--hooks", "powersgd"], "--hooks powersgd: the advisor models allreduce, fp16, bf16"),
        (["--repeat", "0"], "--repeat must be at least 1, got 0"),
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--two-hosts", "nan"], "--two-hosts takes a link rate in Mbit/s above 0, not nan"),
        (["--out", "/etc/passwd"], "--out: '/etc/passwd' is a file; give a directory"),
    ],
)
def test_a_mistake_is_refused_before_the_base_run(args, says):
    """Each was a traceback, or a base run of a minute before the mistake surfaced (or none at all)."""
    cmd = [sys.executable, "-m", "bench.advisor_validation", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr == f"python -m bench.advisor_validation: error: {says}\n", proc.stderr
