"""compare and predict fed as a hostile user would: files of the wrong shape, FIFOs, devices, link loops, killed
runs; the helpers that build such files, which tests/test_predict.py (summaries and fits that predict must
refuse, flags, outputs) and tests/test_compare.py (outputs, a closed pipe) share.

Every case is a real file on disk (or a real FIFO, link or pipe); none is mocked. What is asserted: one line
naming the file, the field and what was expected, exit 2 (predict; compare where nothing is left to compare);
for compare over many runs, exit 0 with the damaged runs noted and shown without numbers, never with wrong
ones; no traceback, and no hang (FIFOs are tried in a subprocess with a timeout).
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import compare as compare_cli
from harness.analysis.comparison import build_rows
from harness.analysis.runs import load_runs
from harness.common import tags
from harness.common.cli import run_cli
from tests.train_runs import TRAIN_PY, train_env

REPO = Path(__file__).resolve().parent.parent
COMPARE = "python -m harness.compare"
PREDICT = "python -m harness.predict"
UNREADABLE = Path("/proc/sys/vm/drop_caches")  # write-only even for root: open(..., "r") fails


def summary(step_ms: float = 40.0, comm_ms: float = 20.0, bucket_bytes: int = 4_000_000) -> dict:
    """A complete summary.json as train.py writes it: 2 ranks, one all_reduce bucket of `bucket_bytes`."""
    # fmt: off
    return {
        "completed": True, "reason": "", "world_size": 2, "backend": "gloo", "sample_unit": "image",
        "settings": {"model": "resnet_tiny", "batch_size": 4, "bucket_cap_mb": None, "comm_hook": "allreduce",
                     "precision": "32-true", "accumulate_grad_batches": 1},
        "totals": {"steps_measured": 5, "bytes_per_step": bucket_bytes, "step_ms_p50": step_ms,
                   "samples_per_s_p50": 8000 / step_ms, "comm_ms_p50": comm_ms, "exposed_ms_p50": 2.0,
                   "overlap_pct_p50": 90.0, "busbw_gbps_p50": bucket_bytes / comm_ms / 1e6,
                   "compute_only_ms": 30.0, "fwd_bwd_ms_p50": 35.0},
        "buckets": [{"index": 0, "num_params": 3, "numel": bucket_bytes // 4, "bytes": bucket_bytes,
                     "first_param": "fc.bias", "last_param": "conv.weight", "time_ms_p50": comm_ms,
                     "time_ms_p90": comm_ms, "busbw_gbps_p50": 0.2, "time_source": "ready_to_done"}],
    }
    # fmt: on


def write_run(root: Path, name: str, content: str | bytes | dict | list) -> Path:
    """`root/name/v0/summary.json` holding `content` (a dict or list as JSON, text or bytes as they are)."""
    run_dir = root / name / "v0"
    run_dir.mkdir(parents=True)
    path = run_dir / "summary.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return run_dir


def with_change(path: str, value) -> dict:
    """summary() with the field at dotted `path` (`totals.step_ms_p50`, `buckets.0.numel`) set to `value`."""
    data = summary()
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return data


def run_tool(module: str, *args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**train_env(), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,  # a FIFO opened by mistake blocks forever: the timeout turns that into a failure
    )


def in_process(main, prog: str, args: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a command run through run_cli in this process: any exception other than
    the SystemExit that run_cli raises fails the test, as a traceback would."""
    try:
        code = run_cli(lambda: main(args), prog)
    except SystemExit as exit_info:
        code = exit_info.code
    out = capsys.readouterr()
    return code, out.out, out.err


def usage_error(main, prog: str, args: list[str], capsys, *fragments: str) -> str:
    code, _, err = in_process(main, prog, args, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# -- compare: ten runs, most of them damaged ------------------------------------------------------------------

# run name -> (summary.json content, fragments its note must hold: file, field, expectation)
DAMAGED = {
    "totals-list": (with_change("totals", []), ["totals is a list; expected a JSON object"]),
    "settings-string": (with_change("settings", "resnet"), ["settings is the string 'resnet'; expected a JSON"]),
    "buckets-object": (with_change("buckets", {}), ["buckets is a JSON object; expected a list of JSON objects"]),
    "bucket-entry": (with_change("buckets.0.numel", "1000"), ["buckets[0].numel is the string '1000'; expected an"]),
    "bucket-not-object": (with_change("buckets.0", 7), ["buckets[0] is 7; expected a JSON object"]),
    "truncated": (json.dumps(summary())[:150], ["is not valid JSON", "truncated?"]),
    "empty-list": ([], ["holds a list; expected a JSON object"]),
    "number-string": (
        with_change("totals.step_ms_p50", "12.5"),
        ["totals.step_ms_p50 is the string '12.5'; expected a number >= 0, or null"],
    ),
    "nan": (
        json.dumps(summary()).replace('"comm_ms_p50": 20.0', '"comm_ms_p50": NaN'),
        ["totals.comm_ms_p50 is NaN; expected a number >= 0, or null"],
    ),
    "negative": (with_change("totals.comm_ms_p50", -3.0), ["totals.comm_ms_p50 is -3.0; expected a number >= 0"]),
    "overflow": (
        json.dumps(summary()).replace('"step_ms_p50": 40.0', '"step_ms_p50": 1e999'),
        ["totals.step_ms_p50 is Infinity"],
    ),
    "huge-world": (with_change("world_size", 10**30), ["world_size is an integer of about 30 digits"]),
    "bool-world": (with_change("world_size", True), ["world_size is true; expected an integer >= 1"]),
    "no-completed": ({k: v for k, v in summary().items() if k != "completed"}, ["completed is missing"]),
    "not-utf8": (b'{"completed": true, "reason": "\xff\xfe"}', ["is not UTF-8 text (byte 0xff"]),
    "deep": ("[" * 100_000, ["cannot be parsed", "recursion"]),
    "long-int": ('{"world_size": ' + "1" * 5000 + "}", ["cannot be parsed", "digits"]),
    "duplicate-bucket": (with_change("buckets", summary()["buckets"] * 2), ["buckets[1].index is 0 again"]),
}


def make_hostile_runs(root: Path) -> dict[str, list[str]]:
    """A runs directory with one good run and every damaged kind; {run name: fragments its note must hold}."""
    write_run(root, "good", summary())
    expected = {}
    for name, (content, fragments) in DAMAGED.items():
        write_run(root, name, content)
        expected[name] = [f"{name}/v0/summary.json", *fragments]
    huge = write_run(root, "huge-file", summary()) / "summary.json"
    with open(huge, "r+b") as handle:  # sparse: 100 MiB on the file system, nothing on the disk
        handle.truncate(100 * 2**20)
    expected["huge-file"] = ["huge-file/v0/summary.json is larger than 64 MiB; expected a JSON file of a few kB"]
    # Not regular files: opening any of them would hang (FIFO), never end (/dev/zero) or fail (a directory).
    fifo = root / "fifo-summary" / "v0"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "summary.json")
    expected["fifo-summary"] = ["fifo-summary/v0/summary.json is a FIFO; expected a regular file"]
    (root / "dir-summary" / "v0" / "summary.json").mkdir(parents=True)
    expected["dir-summary"] = ["dir-summary/v0/summary.json is a directory; expected a regular file"]
    (root / "device" / "v0").mkdir(parents=True)
    (root / "device" / "v0" / "summary.json").symlink_to("/dev/zero")
    expected["device"] = ["device/v0/summary.json is a character device; expected a regular file"]
    (root / "link-loop" / "v0").mkdir(parents=True)
    (root / "link-loop" / "v0" / "summary.json").symlink_to("summary.json")
    expected["link-loop"] = ["link-loop/v0/summary.json: cannot be read (Too many levels of symbolic links)"]
    if UNREADABLE.exists():  # a regular file that open() refuses even to root (chmod 000 does not stop root)
        (root / "unreadable" / "v0").mkdir(parents=True)
        (root / "unreadable" / "v0" / "summary.json").symlink_to(UNREADABLE)
        expected["unreadable"] = ["unreadable/v0/summary.json: cannot be read (Permission denied)"]
    # A good summary beside an event file that is a FIFO, and one that is random bytes.
    fifo_events = write_run(root, "fifo-events", summary())
    os.mkfifo(fifo_events / "events.out.tfevents.1.host.1.0")
    expected["fifo-events"] = ["events.out.tfevents.1.host.1.0 is a FIFO; expected a regular file; its events left"]
    garbage = write_run(root, "garbage-events", summary())
    (garbage / "events.out.tfevents.2.host.2.0").write_bytes(bytes(range(256)) * 40)
    expected["garbage-events"] = ["events.out.tfevents.2.host.2.0 holds no readable event; expected a TensorBoard"]
    # Directory link loops: not followed, so they neither hang the search nor repeat runs.
    (root / "loop").symlink_to(".")
    (root / "good" / "up").symlink_to("..")
    return expected


def test_compare_shows_damaged_runs_with_a_note_and_no_numbers(tmp_path):
    root = tmp_path / "runs"
    expected = make_hostile_runs(root)
    proc = run_tool("harness.compare", str(root), "--baseline", "good", "--csv", str(tmp_path / "c.csv"),
                    cwd=tmp_path, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    records = {r["run"]: r for r in csv.DictReader(io.StringIO((tmp_path / "c.csv").read_text()))}
    assert set(records) == {"good/v0", *(f"{name}/v0" for name in expected)}, "each run once, none lost"
    good = records.pop("good/v0")
    assert good["complete"] == "True" and float(good["step_ms"]) == 40.0 and float(good["comm_ms"]) == 20.0
    warnings = proc.stderr.strip().splitlines()
    assert all(line.startswith(f"{COMPARE}: warning: ") for line in warnings), warnings
    damaged_summary = {name for name in expected if not name.endswith("-events")}
    for name, fragments in expected.items():
        record = records[f"{name}/v0"]
        for fragment in fragments:
            assert fragment in record["note"], (name, fragment, record["note"])
            assert any(fragment in line for line in warnings), (name, fragment)
        if name in damaged_summary:  # the damaged summary is left out whole: no number of it is shown
            assert record["complete"] == "False"
            assert all(record[key] == "" for key in ("samples_per_s", "step_ms", "comm_ms", "busbw_gbps")), record
            assert record["model"] == "" and record["world_size"] == "", "its settings are not trusted either"
        else:  # the summary is good: its numbers stand, the event file is noted
            assert record["complete"] == "True" and float(record["step_ms"]) == 40.0
    assert len(warnings) == len(expected)
    table = proc.stdout.splitlines()
    assert any(line.startswith("# incomplete: totals-list/v0: ") for line in table)


def test_compare_messages_are_exact(tmp_path, capsys):
    root = tmp_path / "runs"
    write_run(root, "a", with_change("totals", [1, 2]))
    write_run(root, "b", with_change("settings", "x"))
    code, out, err = in_process(compare_cli.main, COMPARE, [str(root)], capsys)
    assert code == 0
    assert err.splitlines() == [
        f"{COMPARE}: warning: {root}/a/v0/summary.json: totals is a list; expected a JSON object",
        f"{COMPARE}: warning: {root}/b/v0/summary.json: settings is the string 'x'; expected a JSON object",
    ]
    note = f"# incomplete: a/v0: {root}/a/v0/summary.json: totals is a list; expected a JSON object; no event file"
    assert note in out


def test_compare_with_only_damaged_runs_still_answers(tmp_path, capsys):
    """One run, its summary damaged and no events: a row of "—" and the note; nothing to compute, no crash."""
    run_dir = write_run(tmp_path / "runs", "only", [])
    code, out, err = in_process(compare_cli.main, COMPARE, [str(run_dir)], capsys)
    assert code == 0 and "holds a list; expected a JSON object" in err
    row = next(line for line in out.splitlines() if line.startswith("only/v0"))
    assert row.count("—") >= 10 and "incomplete" in row


def test_compare_default_baseline_is_the_first_run_with_numbers(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "a-damaged", [])
    write_run(root, "b-good", summary())
    write_run(root, "c-good", summary(step_ms=50.0))
    rows = build_rows(load_runs([str(root)]))
    assert [r.name for r in rows if r.is_baseline] == ["b-good/v0"]
    assert rows[2].changes["step_ms"] == pytest.approx(25.0)
    rows = build_rows(load_runs([str(root)]), baseline="a-damaged")  # asked for: given, Δ unknown
    assert rows[0].is_baseline and rows[2].changes["step_ms"] is None


def test_compare_finds_a_run_nested_1200_directories_deep(tmp_path, capsys):
    """Python 3.11's os.walk recurses and would end in a RecursionError here."""
    levels = [tmp_path / "runs"]
    for _ in range(1200):  # one level at a time: pathlib's and os's makedirs recurse too
        levels.append(levels[-1] / "d")
    try:
        for level in levels:
            level.mkdir()
        (levels[-1] / "summary.json").write_text(json.dumps(summary()))
        code, out, err = in_process(compare_cli.main, COMPARE, [str(levels[0])], capsys)
        assert code == 0 and err == "" and out.splitlines()[1].startswith("d/d/d/")
    finally:  # removed here, bottom up: pytest's own clean-up of old temporary trees (rmtree) recurses
        (levels[-1] / "summary.json").unlink(missing_ok=True)
        for level in reversed(levels):
            if level.exists():
                level.rmdir()


def test_compare_reads_a_summary_with_a_byte_order_mark(tmp_path):
    """An editor that saves UTF-8 with a BOM has not damaged the file."""
    write_run(tmp_path / "runs", "bom", b"\xef\xbb\xbf" + json.dumps(summary()).encode())
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.complete and row.values["step_ms"] == 40.0 and row.note == ""


def test_compare_reads_a_noop_run_whole(tmp_path):
    """The noop hook sends nothing: its buckets hold 0 bytes, and the run is the A/B's baseline, not a damaged
    file (compare had called it incomplete and fallen back to its events, losing its bucket cap)."""
    noop = summary(bucket_bytes=0)
    noop["settings"]["comm_hook"] = "noop"
    noop["totals"].update(comm_ms_p50=0.0, busbw_gbps_p50=0.0, exposed_ms_p50=None, overlap_pct_p50=None)
    noop["buckets"][0].update(numel=1_000_000, time_ms_p50=0.0, time_ms_p90=0.0, busbw_gbps_p50=0.0)
    write_run(tmp_path / "runs", "noop", noop)
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.complete and row.note == "" and row.values["step_ms"] == 40.0 and row.values["comm_ms"] == 0.0


def test_compare_huge_but_finite_numbers_stay_readable(tmp_path, capsys):
    """A step of 1e300 ms is kept (finite, >= 0) but shown in exponent form, and a change that overflows is
    unknown rather than +inf%."""
    root = tmp_path / "runs"
    write_run(root, "a", summary())
    write_run(root, "b", with_change("totals.step_ms_p50", 1e300))
    write_run(root, "c", with_change("totals.exposed_ms_p50", -1.7e308))
    write_run(root, "d", with_change("totals.exposed_ms_p50", 1.7e308))
    code, out, _ = in_process(compare_cli.main, COMPARE, [str(root), "--baseline", "c"], capsys)
    assert code == 0 and max(len(line) for line in out.splitlines()[:5]) < 250, out
    b_line = next(line for line in out.splitlines() if line.startswith("b/v0"))
    assert "1e+300" in b_line and "+2.5e+300%" in b_line
    d_line = next(line for line in out.splitlines() if line.startswith("d/v0"))
    assert "inf" not in d_line, "(1.7e308 − (−1.7e308)) overflows: unknown, not +inf%"


def test_compare_leaves_out_hparams_of_the_wrong_type(tmp_path):
    """hparams in the event file say bucket_cap_mb "lots": the settings from them are left out, and noted."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    from harness.train.tb_writer import write_step

    run_dir = tmp_path / "runs" / "r" / "v0"
    writer = SummaryWriter(str(run_dir))
    _, session_start, _ = hparams({"model": "resnet_tiny", "bucket_cap_mb": "lots", "world_size": 2}, {})
    writer._get_file_writer().add_summary(session_start)
    for step in range(4):
        write_step(writer, step, {"step/warmup": float(step < 2), "step/time_ms": 10.0, "comm/time_ms": 2.0})
    writer.close()
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.settings["model"] == "—" and row.values["step_ms"] == pytest.approx(10.0)
    assert "bucket_cap_mb is the string 'lots'; expected a number > 0, or null" in row.note
    assert "the settings in them left out" in row.note


# -- compare: hangs and outputs -------------------------------------------------------------------------------


def test_compare_never_opens_a_fifo(tmp_path):
    """FIFOs named like an event file and like summary.json, in a run and alone: compare returns at once."""
    run_dir = write_run(tmp_path / "runs", "r", summary())
    os.mkfifo(run_dir / "events.out.tfevents.x")
    alone = tmp_path / "runs" / "fifos-only" / "v0"
    alone.mkdir(parents=True)
    os.mkfifo(alone / "summary.json")
    os.mkfifo(alone / "events.out.tfevents.y")
    started = time.monotonic()
    proc = run_tool("harness.compare", str(tmp_path / "runs"), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60
    assert "events.out.tfevents.x is a FIFO; expected a regular file" in proc.stdout
    assert (
        "fifos-only/v0/summary.json is a FIFO" in proc.stdout and "fifos-only/v0/events.out.tfevents.y" in proc.stdout
    )


# -- a run killed before its summary.json: the same steps as summary.json -------------------------------------


def test_events_leave_out_calibration_and_warmup_like_summary_json(tmp_path):
    """The issue's numbers: calibration steps' comm is skipped (0.007 ms); measured steps take 81.7 ms."""
    from torch.utils.tensorboard import SummaryWriter

    from harness.train.tb_writer import write_step

    run_dir = tmp_path / "runs" / "killed" / "v0"
    writer = SummaryWriter(str(run_dir))
    for step in range(12):
        warmup, calibration = step < 2, 2 <= step < 7
        comm = 0.007 if calibration else 81.7 + (step % 3)
        scalars = {"step/warmup": float(warmup), "step/calibration": float(calibration), "comm/time_ms": comm,
                   "step/time_ms": 200.0 if warmup else 120.0, "comm/bytes": 23_380_000.0,
                   "step/samples_per_s": 64.0, "step/samples_per_s_per_device": 32.0}  # fmt: skip
        write_step(writer, step, scalars)
    writer.close()
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.values["comm_ms"] == pytest.approx(82.7, rel=1e-6), "median of steps 7..11: 81.7, 82.7, 83.7"
    assert row.values["busbw_gbps"] == pytest.approx(23.38e6 / 82.7e-3 / 1e9, rel=1e-6), "not 6,718 GB/s"
    assert row.values["step_ms"] == pytest.approx(120.0) and not row.complete
    assert row.settings["world_size"] == "2" and "no summary.json" in row.note
    # A damaged summary.json beside the same events: left out whole, the row shown from the events.
    (run_dir / "summary.json").write_text(json.dumps(with_change("totals.comm_ms_p50", "81.7")))
    (row,) = build_rows(load_runs([str(tmp_path / "runs")]))
    assert row.values["comm_ms"] == pytest.approx(82.7, rel=1e-6) and not row.complete
    assert "totals.comm_ms_p50 is the string '81.7'" in row.note and "shown from its event file instead" in row.note


@pytest.mark.slow
def test_a_real_run_killed_early_is_read_from_its_events(tmp_path):
    """train.py killed with SIGKILL mid-run: no summary.json, a cut event file. Its row is the median of the
    steps that summary.json would have counted, from the event file, and is marked incomplete."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "runs"
    cmd = [sys.executable, str(TRAIN_PY), "--model", "resnet_tiny", "--max-steps", "100000",
           "--calibration-steps", "3", "--logdir", str(logdir), "--run-name", "killed"]  # fmt: skip
    log = open(tmp_path / "train.log", "w")  # noqa: SIM115 (closed in finally)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=train_env(), stdout=log, stderr=log, start_new_session=True)
    measured_steps = 0
    try:
        deadline = time.monotonic() + 180
        while measured_steps < 6 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            for events in logdir.glob("killed/*/events.out.tfevents.*"):
                acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
                acc.Reload()
                if tags.STEP_MS in acc.Tags()["scalars"]:  # written for measured steps only
                    measured_steps = len(acc.Scalars(tags.STEP_MS))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # train.py and the ranks it started: its own process group
        proc.wait(timeout=60)
        log.close()
    assert measured_steps >= 6, (tmp_path / "train.log").read_text()[-3000:]
    (run_dir,) = logdir.glob("killed/*")
    (run_dir / "summary.json").unlink(missing_ok=True)  # a partial one exists only after 60 s; not this path
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    left_out = {e.step for tag in (tags.WARMUP_STEP_MS, tags.CALIBRATION_STEP_MS) for e in acc.Scalars(tag)}
    assert {0, 1, 2, 3, 4} <= left_out, "warm-up and the calibration block are logged under setup/"
    comm = sorted(e.value for e in acc.Scalars(tags.COMM_MS))
    assert not {e.step for e in acc.Scalars(tags.COMM_MS)} & left_out, "the headline series: measured steps only"
    expected = (comm[(len(comm) - 1) // 2] + comm[len(comm) // 2]) / 2

    proc = run_tool("harness.compare", str(logdir), "--csv", str(tmp_path / "c.csv"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (record,) = csv.DictReader(io.StringIO((tmp_path / "c.csv").read_text()))
    assert record["complete"] == "False" and "no summary.json" in record["note"]
    assert float(record["comm_ms"]) == pytest.approx(expected, rel=1e-6)
    assert record["world_size"] == "2"


# -- predict: files that are not regular files (files of the wrong shape: tests/test_predict.py) ------------


def one_line_error(proc: subprocess.CompletedProcess, prog: str, *fragments: str) -> str:
    """The single error line of a refused command, after checking its shape and fragments."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def test_predict_refuses_a_sweep_that_is_not_a_regular_file(tmp_path):
    run_dir = write_run(tmp_path, "run", summary())
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    (tmp_path / "sweep.d").mkdir()
    (tmp_path / "bytes.jsonl").write_bytes(b"\xff\xfe{}\n")
    for name, fragment in (("fifo.jsonl", "is a FIFO"), ("zero.jsonl", "is a character device"),
                           ("sweep.d", "is a directory"), ("bytes.jsonl", "line 1 is not UTF-8 text")):  # fmt: skip
        proc = run_tool("harness.predict", "--sweep", str(tmp_path / name), "--run", str(run_dir), cwd=tmp_path)
        one_line_error(proc, PREDICT, f"{name}", fragment)
    # A --run whose summary.json is a FIFO: refused without opening it.
    fifo_run = tmp_path / "fifo-run"
    fifo_run.mkdir()
    os.mkfifo(fifo_run / "summary.json")
    proc = run_tool("harness.predict", "--alpha-us", "5", "--busbw-gbps", "5", "--run", str(fifo_run), cwd=tmp_path)
    one_line_error(proc, PREDICT, "fifo-run/summary.json is a FIFO; expected a regular file")
