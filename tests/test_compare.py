"""harness.compare and harness.analysis' runs, comparison and tables: the delta arithmetic and baseline choice
alone, then on real runs that train.py makes here, then the command line."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import compare
from harness.analysis.comparison import (
    build_rows,
    change_pct,
    change_pt,
    measured,
    mixed_workloads,
    select_baseline,
    sort_rows,
)
from harness.analysis.comparison_tables import format_csv, format_markdown, format_text
from harness.analysis.runs import RunData, load_runs, runs_in_directory
from harness.analysis.step_bars_plot import DPI, ROW_HEIGHT_IN, SEGMENTS, step_bars_figure
from harness.common import tags
from harness.common.cli import UsageError, run_cli
from harness.common.run_identity import workload_hash
from tests.test_hostile_inputs import summary, usage_error, write_run
from tests.train_runs import train_env

REPO = Path(__file__).resolve().parent.parent
# Two runs that differ in what travels: a small bucket cap with DDP's averaging, and fp16 compression.
VARIANTS = {"bucket0.5": ["--bucket-cap-mb", "0.5"], "fp16": ["--comm-hook", "fp16"]}
RUN_TIMEOUT_S = 240
PCT_METRICS = ("samples_per_s", "step_ms", "comm_ms", "exposed_ms", "codec_ms")


def make_runs(logdir: Path, variants: dict[str, list[str]], run_name: str | None = None) -> dict[str, Path]:
    """Run train.py once per variant (all at once: the runs' numbers are only compared to their own
    summary.json), each under its variant's name or all under `run_name`, and return each run's directory,
    `<logdir>/<name>/<version>`, as train.py's last line names it."""
    procs = {}
    for name, args in variants.items():
        # 2 warm-up, 2 calibration, 2 timeline and 3 measured steps: the events hold steps summary.json leaves out.
        cmd = [sys.executable, str(REPO / "train.py"), "--model", "resnet_tiny", "--max-steps", "9"]
        cmd += ["--calibration-steps", "2", "--no-progress-bar"]
        cmd += ["--logdir", str(logdir), "--run-name", run_name or name, *args]
        out, err = (open(logdir.parent / f"{name}.{kind}", "w") for kind in ("out", "err"))  # noqa: SIM115
        procs[name] = (subprocess.Popen(cmd, cwd=logdir.parent, env=train_env(), stdout=out, stderr=err), out, err)
    try:
        for name, (proc, out, err) in procs.items():
            proc.wait(timeout=RUN_TIMEOUT_S)
            out.close()
            err.close()
            logs = [(logdir.parent / f"{name}.{kind}").read_text()[-3000:] for kind in ("out", "err")]
            assert proc.returncode == 0, logs
    finally:
        for proc, out, err in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            out.close()
            err.close()
    return {name: run_directory_printed(logdir, (logdir.parent / f"{name}.out").read_text()) for name in variants}


def run_directory_printed(logdir: Path, stdout: str) -> Path:
    """The run directory that train.py's last line names; the line also gives the command to view the run."""
    last = stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"# run directory: (.+) — view: tensorboard --logdir (.+)", last)
    assert match and match[2] == str(logdir), last
    run_dir = Path(match[1])
    assert run_dir.parent.parent == logdir and (run_dir / "summary.json").is_file(), last
    return run_dir


def run_compare(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.compare", *args],
        cwd=cwd,
        env={**train_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("compare")
    logdir = root / "runs"
    logdir.mkdir()
    return logdir, make_runs(logdir, VARIANTS)


@pytest.fixture(scope="module")
def one_name_two_workloads(real_runs, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """One run name that ran two workloads, as --run-name given twice does (and as default names did before
    they held the image size): real_runs' bucket0.5 run (copied), a repeat of it, and the same settings at
    --image-size 64 (resnet_tiny's default is 32). Two new runs, the smallest that show both."""
    _, run_dirs = real_runs
    logdir = tmp_path_factory.mktemp("identity") / "runs"
    copied = logdir / "bucket0.5" / run_dirs["bucket0.5"].name
    shutil.copytree(run_dirs["bucket0.5"], copied)
    settings = ["--bucket-cap-mb", "0.5"]
    made = make_runs(logdir, {"repeat": settings, "image64": [*settings, "--image-size", "64"]}, run_name="bucket0.5")
    return logdir, {"copied": copied, **made}


# -- pure: no files ---------------------------------------------------------------------------------------


def test_change_arithmetic():
    assert change_pct(110.0, 100.0) == pytest.approx(10.0)
    assert change_pct(75.0, 100.0) == pytest.approx(-25.0)
    assert change_pct(5.0, 5.0) == 0.0
    assert change_pct(-5.0, -10.0) == pytest.approx(50.0), "a rise reads + even from a negative base (exposed ms)"
    assert change_pct(1.0, 0.0) is None, "no relative change from 0"
    assert change_pct(None, 1.0) is None and change_pct(1.0, None) is None
    assert change_pct(math.nan, 1.0) is None
    assert change_pt(62.5, 50.0) == pytest.approx(12.5), "overlap changes in points, not %"
    assert change_pt(None, 50.0) is None


def test_baseline_selection():
    names = ["b/fp16/v1", "a/bucket0.5/v1", "a/bucket0.5/v10"]
    assert select_baseline(names, None) == "a/bucket0.5/v1", "default: first by name"
    assert select_baseline(names, "fp16") == "b/fp16/v1", "unique substring"
    assert select_baseline(names, "a/bucket0.5/v1") == "a/bucket0.5/v1", "an exact name wins over substrings"
    assert select_baseline(names, "a/bucket0.5/v1/") == "a/bucket0.5/v1", "a trailing slash is ignored"
    with pytest.raises(UsageError, match=r"ambiguous.*a/bucket0\.5/v1, a/bucket0\.5/v10"):
        select_baseline(names, "bucket")
    with pytest.raises(UsageError, match=r"matches no run; runs: a/bucket0\.5/v1, a/bucket0\.5/v10, b/fp16/v1"):
        select_baseline(names, "bf16")


def summary_with(completed: bool = True, **totals: float | None) -> dict:
    settings = {"model": "gpt_tiny", "batch_size": 2, "bucket_cap_mb": None, "comm_hook": "allreduce"}
    settings |= {"precision": "32-true", "accumulate_grad_batches": 1}
    return {
        "completed": completed,
        "reason": "" if completed else "KeyboardInterrupt: ",
        "settings": settings,
        "world_size": 4,
        "backend": "gloo",
        "sample_unit": "token",
        "totals": {f"{key}_p50": value for key, value in totals.items()},
    }


def test_rows_from_loaded_data():
    base = summary_with(
        samples_per_s=1000.0, step_ms=40.0, comm_ms=20.0, exposed_ms=8.0, overlap_pct=60.0, busbw_gbps=1.5
    )
    other = summary_with(
        completed=False, samples_per_s=1250.0, step_ms=32.0, comm_ms=10.0, exposed_ms=None, overlap_pct=75.0
    )
    other["settings"] |= {"bucket_cap_mb": 0.5, "comm_hook": "powersgd", "powersgd_rank": 2}
    other["settings"]["accumulate_grad_batches"] = 4
    rows = build_rows([RunData("z/other", summary=other), RunData("a/base", summary=base)], baseline="base")
    assert [r.name for r in rows] == ["a/base", "z/other"]
    b, o = rows
    assert b.is_baseline and not o.is_baseline
    assert b.changes == {
        "samples_per_s": 0.0, "step_ms": 0.0, "comm_ms": 0.0, "exposed_ms": 0.0, "overlap_pct": 0.0, "codec_ms": None
    }, "codec time is not in this summary: unknown"  # fmt: skip
    assert o.changes["samples_per_s"] == pytest.approx(25.0)
    assert o.changes["step_ms"] == pytest.approx(-20.0)
    assert o.changes["comm_ms"] == pytest.approx(-50.0)
    assert o.changes["exposed_ms"] is None, "null in summary.json: unknown, not 0"
    assert o.changes["overlap_pct"] == pytest.approx(15.0), "points"
    assert o.values["busbw_gbps"] is None, "missing, and no events to compute it from"
    assert b.settings == {
        "model": "gpt_tiny",
        "world_size": "4",
        "backend": "gloo",
        "bucket_cap_mb": "default",
        "comm_hook": "allreduce",
        "precision": "32-true",
        "batch": "2",
    }
    assert o.settings["bucket_cap_mb"] == "0.5" and o.settings["comm_hook"] == "powersgd2"
    assert o.settings["batch"] == "2×4", "per-device batch × accumulation"
    assert b.complete and not o.complete and "KeyboardInterrupt" in o.note

    text = format_text(rows)
    assert text.splitlines()[0].split()[:2] == ["run", "model"] and "tokens/s" in text.splitlines()[0]
    other_line = next(line for line in text.splitlines() if line.startswith("z/other"))
    assert "+25.0%" in other_line and "-20.0%" in other_line and "+15.0 pt" in other_line and "incomplete" in other_line
    markdown = format_markdown(rows).splitlines()
    assert markdown[0].startswith("| run | model |") and set(markdown[1]) <= set("|-:")
    assert markdown[2].startswith("| **`a/base`** |") and markdown[3].startswith("| `z/other` |")
    assert len({line.count("|") for line in markdown[:4]}) == 1, "every table line has the same columns"
    records = list(csv.DictReader(io.StringIO(format_csv(rows))))
    assert records[1]["samples_per_s_change_pct"] == "25.0" and records[1]["exposed_ms"] == ""
    assert records[1]["overlap_pct_change_pt"] == "15.0" and records[0]["baseline"] == "True"


def test_event_medians_leave_out_warmup_and_rebuild_missing_values():
    steps = range(6)
    # An earlier version's run, as load_runs gives it: warm-up marked on every step, the tags renamed to today's.
    scalars = {
        tags.WARMUP_TAG: [(s, 1.0 if s < 2 else 0.0) for s in steps],
        tags.STEP_MS: [(s, 1000.0 if s < 2 else 10.0 + s) for s in steps],  # warm-up steps are slow
        tags.SAMPLES_PER_S: [(s, 400.0) for s in steps],
        tags.SAMPLES_PER_S_PER_DEVICE: [(s, 100.0) for s in steps],  # 4 ranks
        tags.COMM_MS: [(s, 2.0 * s) for s in steps],
        tags.BYTES: [(s, 8e6 if s == 0 else 4e6) for s in steps],  # step 0's single bucket
        tags.COMPUTE_ONLY_MS: [(s, 9.0 + s) for s in steps],
    }
    assert measured(scalars, tags.STEP_MS) == [12.0, 13.0, 14.0, 15.0]
    assert measured({"x": [(s, float(s)) for s in steps]}, "x") == [2.0, 3.0, 4.0, 5.0], "no mark: steps 0, 1"
    (row,) = build_rows([RunData("killed/v0", scalars=scalars)])
    assert row.values["step_ms"] == pytest.approx(13.5)
    assert row.values["comm_ms"] == pytest.approx(7.0)
    assert row.compute_only_ms == pytest.approx(12.5), "the compute-only reference from its per-step series"
    assert row.settings["world_size"] == "4", "samples/s over samples/s per device"
    assert row.values["busbw_gbps"] == pytest.approx(4e6 * 2 * 3 / 4 / 7e-3 / 1e9), "bytes × 2(n−1)/n / p50 time"
    assert row.values["exposed_ms"] is None and row.settings["model"] == "—"
    assert not row.complete and "no summary.json" in row.note


def test_rows_in_natural_order_numbers_by_value():
    names = ["sweep/bucket100/v", "sweep/bucket25/v", "sweep/bucket0.5/v", "sweep/bucket1/v", "sweep/bucket0.25/v"]
    rows = build_rows([RunData(name, summary=summary_with(step_ms=10.0)) for name in names])
    expected = ["sweep/bucket0.25/v", "sweep/bucket0.5/v", "sweep/bucket1/v", "sweep/bucket25/v", "sweep/bucket100/v"]
    assert [r.name for r in rows] == expected
    assert rows[0].is_baseline, "the default baseline is the first in that order"
    assert [r.name for r in sort_rows(rows, "run", descending=True)] == expected[::-1]


def test_group_repeats_takes_each_columns_median_and_the_step_spread():
    def run(name: str, step: float, comm: float, busbw: float | None, completed: bool = True) -> RunData:
        totals = {"step_ms": step, "comm_ms": comm, "busbw_gbps": busbw, "samples_per_s": 1000.0 / step}
        return RunData(name, summary=summary_with(completed=completed, **totals))

    runs = [
        run("bucket25/v1", 22.0, 2.0, None),
        run("bucket25/v2", 20.0, 3.0, 2.0),
        run("bucket1/v3", 12.0, 6.0, 1.0),
        run("bucket1/v1", 10.0, 4.0, 1.5),
        run("bucket1/v2", 11.0, 5.0, 1.2),
        run("bucket1/v4", 50.0, 50.0, 0.1, completed=False),  # killed: left out of the medians
        run("bucket0.5/v1", 30.0, 9.0, 0.5, completed=False),  # every run failed: the median of all of them
        run("bucket0.5/v2", 32.0, 9.0, 0.5, completed=False),
    ]
    one, many = build_rows(runs), build_rows(runs, group_repeats=True)
    assert len(one) == 8 and all(r.runs == 1 and r.step_spread_pct is None for r in one)
    assert [r.name for r in many] == ["bucket0.5", "bucket1", "bucket25"], "group names in natural order"
    b05, b1, b25 = many
    assert b1.runs == 3 and b1.values["step_ms"] == pytest.approx(11.0) and b1.values["comm_ms"] == 5.0
    assert b1.step_spread_pct == pytest.approx((12.0 - 10.0) / 11.0 * 100)
    # busbw ∝ 1 / comm time for the same bytes: from the median comm time, not a median of bandwidths.
    assert b1.values["busbw_gbps"] == pytest.approx(1.5 * 4.0 / 5.0)
    assert b1.complete and "bucket1/v4 left out: did not finish" in b1.note
    assert b25.values["step_ms"] == pytest.approx(21.0), "an even count: the mean of the middle two"
    assert b25.values["busbw_gbps"] == pytest.approx(2.0 * 3.0 / 2.5), "from the run that has one"
    assert b05.runs == 2 and b05.values["step_ms"] == pytest.approx(31.0) and not b05.complete
    assert b05.is_baseline and b1.changes["step_ms"] == pytest.approx((11.0 - 31.0) / 31.0 * 100)

    text = format_text(many).splitlines()
    assert "runs" in text[0] and "step spread %" in text[0]
    assert text[2].split()[:1] == ["bucket1"] and " 3  " in text[2] and "18.2" in text[2]
    assert any("median of its runs" in line for line in text)
    assert any(line.startswith("# bucket1: bucket1/v4 left out") for line in text), "a note, though complete"
    assert "runs" not in format_text(one).splitlines()[0].split(), "single runs: no repeat columns"
    records = list(csv.DictReader(io.StringIO(format_csv(many))))
    assert records[1]["runs"] == "3" and float(records[1]["step_spread_pct"]) == pytest.approx(18.18, abs=0.01)
    assert records[0]["complete"] == "False" and records[2]["complete"] == "True"


def test_group_repeats_of_versions_given_by_their_run_directory(tmp_path):
    for version, step in (("20260101-000001", 10.0), ("20260101-000002", 14.0)):
        run_dir = tmp_path / "resnet50-bucket5" / version
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps(summary_with(step_ms=step)))
    (row,) = build_rows(load_runs([str(tmp_path / "resnet50-bucket5")]), group_repeats=True)
    assert row.name == "resnet50-bucket5" and row.runs == 2 and row.values["step_ms"] == pytest.approx(12.0)


def with_settings(name: str, completed: bool = True, step_ms: float = 10.0, **settings) -> RunData:
    """A run of resnet_tiny at image size 32 (summary_with's other settings), with `settings` changed."""
    data = summary_with(completed=completed, step_ms=step_ms)
    data["settings"] |= {"model": "resnet_tiny", "image_size": 32, **settings}
    return RunData(name, summary=data)


def test_group_repeats_only_of_equal_settings():
    """One run name, two workloads (--run-name given twice): two rows, each named with its settings hash. A run
    killed before it recorded settings joins its name's runs when they ran one workload."""
    runs = [
        with_settings("same/v1", step_ms=10.0),
        with_settings("same/v2", step_ms=12.0),
        with_settings("same/v3", step_ms=50.0, image_size=64),
        with_settings("alone/v1", step_ms=20.0),
        RunData("alone/v2", scalars={"step/time_ms": [(2, 30.0)]}),  # killed: events only, settings unknown
    ]
    small, large = (workload_hash(run.settings) for run in (runs[0], runs[2]))
    rows = {row.name: row for row in build_rows(runs, group_repeats=True)}
    assert set(rows) == {"alone", f"same [{small}]", f"same [{large}]"}
    assert rows[f"same [{small}]"].runs == 2 and rows[f"same [{small}]"].values["step_ms"] == pytest.approx(11.0)
    assert rows[f"same [{large}]"].runs == 1 and rows[f"same [{large}]"].members == ("same/v3",)
    assert "ran more than one workload" in rows[f"same [{large}]"].note
    assert rows["alone"].members == ("alone/v1", "alone/v2") and "alone/v2 left out" in rows["alone"].note
    # Without grouping nothing changes: one row per run, named by its path.
    assert [row.name for row in build_rows(runs)] == ["alone/v1", "alone/v2", "same/v1", "same/v2", "same/v3"]


def test_mixed_workloads_warn_once_per_kind_of_what_is_trained():
    runs = [
        with_settings("a-base/v"),
        with_settings("b/v", model="resnet18"),
        with_settings("c/v", model="resnet18", batch_size=8),
        with_settings("d/v", comm_hook="fp16", bucket_cap_mb=0.5, precision="bf16-mixed", devices=4),
        with_settings("e/v", data_dir="/data/train", max_steps=500),
        with_settings("f/v", model="gpt_tiny", image_size=None, seq_len=64),  # a token model: no image size
        RunData("g/v", scalars={"step/time_ms": [(2, 30.0)]}),  # settings unknown: not judged
    ]
    lines = mixed_workloads(build_rows(runs))
    assert lines == [
        "mixed workloads: model gpt_tiny in 1 row, resnet18 in 2 rows, against the baseline's resnet_tiny: their Δ "
        "compares different workloads, not the communication alone",
        "mixed workloads: batch size 8 in 1 row, against the baseline's 2: their Δ compares different workloads, "
        "not the communication alone",
        "mixed workloads: data source /data/train in 1 row, against the baseline's synthetic: their Δ compares "
        "different workloads, not the communication alone",
    ], "hook, bucket cap, precision, world size and steps are what runs are compared for: no line"
    assert mixed_workloads(build_rows([runs[0], runs[3]])) == []
    notes = format_text(build_rows(runs)).splitlines()
    assert sum(line.startswith("# warning: mixed workloads:") for line in notes) == 3, "under the table too"


def test_baseline_given_as_a_run_directory(tmp_path, capsys):
    root = tmp_path / "runs"
    one = write_run(root, "one", summary(step_ms=10.0))
    for version in ("v1", "v2"):
        (root / "two" / version).mkdir(parents=True)
        (root / "two" / version / "summary.json").write_text(json.dumps(summary(step_ms=20.0)))
    runs = load_runs([str(root)])

    def baseline(query: str, group: bool = False) -> str:
        rows = build_rows(runs, query, group, runs_in_directory(runs, query))
        return next(row.name for row in rows if row.is_baseline)

    assert baseline(str(one)) == "one/v0", "a version's directory"
    assert baseline(str(root / "one")) == "one/v0", "a run name's directory holding one version"
    assert baseline(str(root / "two" / "v2")) == "two/v2"
    assert baseline(str(root / "two"), group=True) == "two", "with --group-repeats: its repeats"
    assert baseline("two/v1") == "two/v1", "a name still works"
    assert runs_in_directory(runs, str(tmp_path / "nowhere")) is None
    usage_error(compare.main, compare.PROG, [str(root), "--baseline", str(root / "two")], capsys,
                f"--baseline '{root / 'two'}' is ambiguous: that directory holds two/v1, two/v2; give one "
                "version's directory, or --group-repeats to take them as one")  # fmt: skip


def test_sort_puts_unknown_values_last():
    rows = build_rows(
        [
            RunData("a", summary=summary_with(step_ms=30.0)),
            RunData("b", summary=summary_with(step_ms=None)),
            RunData("c", summary=summary_with(step_ms=10.0)),
        ]
    )
    assert [r.name for r in sort_rows(rows, "step_ms")] == ["c", "a", "b"]
    assert [r.name for r in sort_rows(rows, "step_ms", descending=True)] == ["a", "c", "b"]
    assert [r.name for r in sort_rows(rows, "run", descending=True)] == ["c", "b", "a"]


def test_help_and_empty_command_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        compare.main(["-h"])
    assert exit_info.value.code == 0 and "--baseline" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: compare.main([]), compare.PROG)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"{compare.PROG}: error: the following arguments are required: DIR\n"


# -- real runs --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_runs_deltas_match_their_summaries(real_runs):
    logdir, run_dirs = real_runs
    out = logdir.parent
    proc = run_compare(
        str(logdir), "--baseline", "bucket0.5", "--csv", str(out / "c.csv"), "--markdown", str(out / "c.md"), cwd=out
    )
    assert proc.returncode == 0, proc.stderr
    assert "mixed workloads" not in proc.stderr, "a bucket cap and a hook are what runs are compared for"
    summaries = {name: json.loads((d / "summary.json").read_text()) for name, d in run_dirs.items()}
    names = {name: d.relative_to(logdir).as_posix() for name, d in run_dirs.items()}
    records = {r["run"]: r for r in csv.DictReader(io.StringIO((out / "c.csv").read_text()))}
    assert set(records) == set(names.values())
    base_totals = summaries["bucket0.5"]["totals"]
    for name, run_summary in summaries.items():
        record, totals = records[names[name]], run_summary["totals"]
        assert record["baseline"] == str(name == "bucket0.5") and record["complete"] == "True"
        assert record["world_size"] == "2" and record["backend"] == "gloo" and record["model"] == "resnet_tiny"
        for key in (*PCT_METRICS, "overlap_pct", "busbw_gbps"):
            value = totals.get(f"{key}_p50")
            if value is not None:  # else "—", or a median of the event file's scalars where it has the tag
                assert record[key] == repr(float(value)), key
        for key in PCT_METRICS:
            value, base = totals.get(f"{key}_p50"), base_totals.get(f"{key}_p50")
            if value is None or base is None:  # not in summary.json: the change of what the table shows
                value, base = records[names[name]][key], records[names["bucket0.5"]][key]
                if value == "" or base == "":
                    assert record[f"{key}_change_pct"] == "", key
                    continue
                value, base = float(value), float(base)
            expected = (value - base) / abs(base) * 100  # exposed ms can be below 0 on a busy machine
            assert float(record[f"{key}_change_pct"]) == pytest.approx(expected, rel=1e-9, abs=1e-9), key
            if name == "fp16":  # the printed table shows the same change, rounded
                line = next(line for line in proc.stdout.splitlines() if line.startswith(names[name]))
                assert f"{expected:+.1f}%" in line, (key, line)
        # The exposed interval and the codec time come from summary.json as they are.
        low, high = totals["exposed_ms_ci95"]
        for end, column in ((low, "exposed_ms_ci95_low"), (high, "exposed_ms_ci95_high")):
            assert record[column] == ("" if end is None else repr(float(end))), column
        assert record["codec_ms"] == repr(float(totals["codec_ms_p50"]))
        if totals.get("overlap_pct_p50") is not None and base_totals.get("overlap_pct_p50") is not None:
            expected = totals["overlap_pct_p50"] - base_totals["overlap_pct_p50"]
            assert float(record["overlap_pct_change_pt"]) == pytest.approx(expected, abs=1e-9)
    assert records[names["fp16"]]["comm_hook"] == "fp16" and records[names["fp16"]]["bucket_cap_mb"] == "default"
    assert records[names["bucket0.5"]]["bucket_cap_mb"] == "0.5"
    markdown = (out / "c.md").read_text().splitlines()
    assert markdown[2].startswith(f"| **`{names['bucket0.5']}`** |") and markdown[3].startswith(f"| `{names['fp16']}`")
    assert proc.stdout.splitlines()[0].split()[:2] == ["run", "model"] and "images/s" in proc.stdout.splitlines()[0]


@pytest.mark.slow
def test_run_without_summary_is_shown_from_its_events(real_runs, tmp_path):
    """A killed run leaves event files but no summary.json: its medians come from the per-step scalars."""
    _, run_dirs = real_runs
    killed = tmp_path / "runs" / "fp16-killed" / "v0"
    killed.mkdir(parents=True)
    for event_file in run_dirs["fp16"].glob("events.out.tfevents.*"):
        shutil.copy(event_file, killed)
    shutil.copytree(run_dirs["bucket0.5"], tmp_path / "runs" / "bucket0.5" / "v0")
    rows = {r.name: r for r in build_rows(load_runs([str(tmp_path / "runs")]), baseline="bucket0.5")}
    row = rows["fp16-killed/v0"]
    assert not row.complete and "no summary.json" in row.note
    totals = json.loads((run_dirs["fp16"] / "summary.json").read_text())["totals"]
    assert totals["steps_measured"] == 3 and totals["calibration_steps"] == 2
    for key in ("samples_per_s", "step_ms", "comm_ms", "busbw_gbps"):
        # Event files hold float32: the same medians to float32 precision.
        assert row.values[key] == pytest.approx(totals[f"{key}_p50"], rel=1e-6), key
    # The warm-up and calibration steps are in the events under setup/ only: the headline series, which the
    # medians come from, never hold them.
    (events,) = killed.glob("events.out.tfevents.*")
    scalars = load_runs([str(killed)])[0].scalars
    calibration = [s for s, _ in scalars[tags.CALIBRATION_STEP_MS]]
    assert calibration == [2, 3, 4, 5], events
    assert [s for s, _ in scalars[tags.WARMUP_STEP_MS]] == [0, 1]
    assert not {s for s, _ in scalars[tags.COMM_MS]} & {0, 1, *calibration}
    assert row.settings["world_size"] == "2" and row.settings["comm_hook"] == "fp16"
    line = next(line for line in format_text(list(rows.values())).splitlines() if line.startswith("fp16-"))
    assert "incomplete" in line


@pytest.mark.slow
def test_real_runs_group_as_repeats_only_with_equal_settings(one_name_two_workloads):
    """Three runs named bucket0.5, one at another image size: two rows, not one row of three "repeats", and one
    warning line for the one thing the rows train differently. The baseline is given by its run directory."""
    logdir, run_dirs = one_name_two_workloads
    out = logdir.parent
    args = ["--group-repeats", "--baseline", str(run_dirs["copied"]), "--csv", str(out / "g.csv")]
    proc = run_compare(str(logdir), *args, "--plot", str(out / "g.png"), cwd=out)
    assert proc.returncode == 0, proc.stderr
    summaries = {name: json.loads((d / "summary.json").read_text()) for name, d in run_dirs.items()}
    same, other = (workload_hash(summaries[name]["settings"]) for name in ("copied", "image64"))
    assert workload_hash(summaries["repeat"]["settings"]) == same != other
    assert summaries["copied"]["settings"]["image_size"] == 32 and summaries["image64"]["settings"]["image_size"] == 64
    records = {r["run"]: r for r in csv.DictReader(io.StringIO((out / "g.csv").read_text()))}
    assert set(records) == {f"bucket0.5 [{same}]", f"bucket0.5 [{other}]"}
    repeats, alone = records[f"bucket0.5 [{same}]"], records[f"bucket0.5 [{other}]"]
    assert repeats["runs"] == "2" and alone["runs"] == "1" and repeats["baseline"] == "True"
    steps = sorted(summaries[name]["totals"]["step_ms_p50"] for name in ("copied", "repeat"))
    assert float(repeats["step_ms"]) == pytest.approx(sum(steps) / 2), "the median of the two repeats"
    assert float(alone["step_ms"]) == pytest.approx(summaries["image64"]["totals"]["step_ms_p50"])
    warning = (
        f"{compare.PROG}: warning: mixed workloads: image size 64 in 1 row, against the baseline's 32: their Δ "
        "compares different workloads, not the communication alone"
    )
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [warning]
    assert f"# {warning.split(': ', 1)[1]}" in proc.stdout.splitlines(), "the table's notes say it too"
    # The plot: one bar per row, as many pixels as its figure promises, and the compute-only colour in it.
    image = matplotlib_image().imread(out / "g.png")
    assert image.shape[1] == 10 * DPI and abs(image.shape[0] - (1.5 + ROW_HEIGHT_IN * 2) * DPI) <= 1, image.shape
    assert (np.abs(image[..., :3] - np.array([0x00, 0x72, 0xB2]) / 255).max(axis=-1) < 0.02).sum() > 1000


@pytest.mark.slow
def test_real_runs_each_against_another_workload_warn_and_plot(one_name_two_workloads):
    """Without grouping, against the run at image size 64: the other two are the rows that differ. The plot's
    bars are read back from the figure: one stacked bar (three segments) per row, a whisker where an interval
    is known, each row named."""
    logdir, run_dirs = one_name_two_workloads
    proc = run_compare(str(logdir), "--baseline", str(run_dirs["image64"]), cwd=logdir.parent)
    assert proc.returncode == 0, proc.stderr
    assert "warning: mixed workloads: image size 32 in 2 rows, against the baseline's 64" in proc.stderr
    proc = run_compare(str(logdir), "--baseline", str(logdir / "bucket0.5"), cwd=logdir.parent)
    assert_one_line_usage_error(proc, "is ambiguous: that directory holds bucket0.5/")
    assert "--group-repeats" not in proc.stderr, "they are not repeats of one workload"

    from matplotlib.container import BarContainer, ErrorbarContainer

    rows = build_rows(load_runs([str(logdir)]), baseline=run_dirs["image64"].relative_to(logdir).as_posix())
    axes = step_bars_figure(rows).axes[0]
    bars = [c for c in axes.containers if isinstance(c, BarContainer)]
    assert len(bars) == len(SEGMENTS) and all(len(bar) == len(rows) == 3 for bar in bars), "no unsplit bars"
    for row, *patches in zip(rows, *bars, strict=True):
        widths = [patch.get_width() for patch in patches]
        assert widths[0] == pytest.approx(row.compute_only_ms)
        assert widths[1] == pytest.approx(max(row.values["exposed_ms"], 0))
        assert sum(widths) == pytest.approx(max(row.values["step_ms"], widths[0] + widths[1]))
    whiskers = [c for c in axes.containers if isinstance(c, ErrorbarContainer)]
    assert len(whiskers) == sum(row.exposed_ci95 is not None and None not in row.exposed_ci95 for row in rows)
    texts = [text.get_text() for text in axes.texts]
    assert all(row.name in texts for row in rows) and sum("(baseline)" in t for t in texts) == 1


def matplotlib_image():
    import matplotlib.image

    return matplotlib.image


def test_events_without_hparams_or_summary(tmp_path):
    """A run killed before its end wrote no hparams either: settings unknown, world size from the scalars."""
    from torch.utils.tensorboard import SummaryWriter

    from harness.train.tb_writer import write_step

    run_dir = tmp_path / "runs" / "killed" / "v0"
    writer = SummaryWriter(str(run_dir))
    for step in range(5):  # the tags an earlier version wrote: load_runs reads them under today's names
        warm = step < 2
        scalars = {"step/time_ms": 500.0 if warm else 20.0 + step, "step/samples_per_s": 80.0}
        scalars |= {"step/samples_per_s_per_device": 40.0, "step/warmup": float(warm), "comm/time_ms": 4.0}
        scalars |= {"comm/bytes": 1e6}
        write_step(writer, step, scalars)
    writer.close()
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.values["step_ms"] == pytest.approx(23.0) and row.values["comm_ms"] == pytest.approx(4.0)
    assert row.settings["world_size"] == "2" and row.settings["backend"] == "—"
    assert row.values["busbw_gbps"] == pytest.approx(1e6 / 4e-3 / 1e9)
    assert not row.complete


def assert_one_line_usage_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m harness.compare: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_cli_no_runs(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_one_line_usage_error(run_compare(str(tmp_path / "empty"), cwd=tmp_path), "no runs found")
    assert_one_line_usage_error(run_compare(str(tmp_path / "missing"), cwd=tmp_path), "is not a directory")
    # An output path that cannot be written is refused before any run is read.
    proc = run_compare(str(tmp_path / "empty"), "--markdown", str(tmp_path / "no" / "cmp.md"), cwd=tmp_path)
    assert_one_line_usage_error(proc, "--markdown", "does not exist")
    assert_one_line_usage_error(run_compare(str(tmp_path / "empty"), "--bogus", cwd=tmp_path), "--bogus")


@pytest.mark.slow
def test_cli_unknown_and_ambiguous_baseline(real_runs):
    logdir, run_dirs = real_runs
    names = [d.relative_to(logdir).as_posix() for d in run_dirs.values()]
    proc = run_compare(str(logdir), "--baseline", "nosuchrun", cwd=logdir.parent)
    assert_one_line_usage_error(proc, "--baseline 'nosuchrun' matches no run", *names)
    proc = run_compare(str(logdir), "--baseline", "/", cwd=logdir.parent)
    assert_one_line_usage_error(proc, "ambiguous", *names)


# -- outputs: never lost or mixed (more hostile cases: tests/test_hostile_inputs.py) -------------------------


def test_compare_output_mistakes(tmp_path, capsys):
    run_dir = write_run(tmp_path / "runs", "r", summary())
    runs = str(tmp_path / "runs")
    out = str(tmp_path / "cmp.txt")
    usage_error(compare.main, compare.PROG, [runs, "--markdown", out, "--csv", out], capsys,
                f"--csv '{out}' is the same file as --markdown '{out}'")  # fmt: skip
    # The same file through another spelling, and through a symbolic link.
    (tmp_path / "alias.txt").symlink_to(out)
    usage_error(compare.main, compare.PROG, [runs, "--markdown", out, "--csv", str(tmp_path / "alias.txt")], capsys,
                "is the same file as")  # fmt: skip
    usage_error(compare.main, compare.PROG, [runs, "--csv", str(tmp_path / ".." / tmp_path.name / "cmp.txt"),
                "--markdown", out], capsys, "is the same file as")  # fmt: skip
    # An output over a file the comparison reads would destroy the run.
    line = usage_error(compare.main, compare.PROG, [runs, "--csv", str(run_dir / "summary.json")], capsys,
                       "--csv", "is an input file")  # fmt: skip
    assert json.loads((run_dir / "summary.json").read_text())["completed"] is True, line
    usage_error(compare.main, compare.PROG, [runs, "--csv", str(tmp_path)], capsys, "--csv", "is a directory")
    if Path("/dev/full").exists():  # every write fails with ENOSPC: a full disk
        usage_error(compare.main, compare.PROG, [runs, "--markdown", "/dev/full"], capsys, "--markdown", "/dev/full")


def test_compare_output_into_stdouts_own_file_is_refused(tmp_path):
    """`--csv F > F` would mix the table into the CSV."""
    write_run(tmp_path / "runs", "r", summary())
    out = tmp_path / "out.txt"
    cmd = f"{sys.executable} -m harness.compare {tmp_path / 'runs'} --csv {out} > {out}"
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env={**train_env(), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    message = f"--csv {str(out)!r} is the same file as stdout (the table); give each output its own"
    assert proc.returncode == 2 and proc.stderr == f"{compare.PROG}: error: {message}\n", proc.stderr


def test_compare_into_a_closed_pipe_is_quiet_and_keeps_its_files(tmp_path):
    root = tmp_path / "runs"
    for i in range(400):  # about 90 kB of table: more than a pipe holds, so the writer meets the closed end
        write_run(root, f"run{i:03d}", summary(step_ms=40.0 + i))
    csv_path = tmp_path / "c.csv"
    cmd = f'{sys.executable} -m harness.compare {root} --csv {csv_path} | head -1; echo "rc=${{PIPESTATUS[0]}}"'
    proc = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env={**train_env(), "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.stdout.splitlines()[0].startswith("run  ") and proc.stdout.splitlines()[-1] == "rc=141", proc.stdout
    assert proc.stderr == "", proc.stderr
    assert len(csv_path.read_text().splitlines()) == 401, "written before the table: head loses nothing"
