"""The raw sweep as a user runs it: the command line, its outputs, its exit codes, and the alpha-beta fit."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from harness.common.cli import run_cli
from harness.common.local_launch import spawn_local
from harness.common.metrics import alpha_beta_time_us, fit_alpha_beta
from harness.raw_sweep import PROG, build_parser, load_fits, main, make_plan
from harness.sweep import collectives
from harness.sweep.output import ROW_FIELDS, format_time
from harness.sweep.rank import sweep_worker

REPO = Path(__file__).resolve().parents[1]
METRICS_FIELDS = ("collective", "size_bytes", "count", "dtype", "world_size", "placement", "time_us")
METRICS_FIELDS += ("algbw_gbps", "busbw_gbps", "wrong")
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


@pytest.fixture
def no_launcher(monkeypatch):
    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)


def _sweep(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    return subprocess.run(
        [sys.executable, "-m", "harness.raw_sweep", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- the command line --------------------------------------------------------------------------------------


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["-h"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--min-bytes", "--step-factor", "--sizes", "--collectives", "--cuda-graph", "--json", "--nproc"):
        assert flag in help_text


def test_empty_arguments_give_nccl_tests_defaults():
    plan = make_plan(build_parser().parse_args([]), "gloo", 2, 1, "local")
    assert plan.collectives == ["all_reduce"]
    assert plan.sizes[0] == 8 and plan.sizes[-1] == 32 * 1024**2 and plan.sizes[1] == 16
    assert (plan.warmup, plan.iters, plan.check) == (5, 20, 1)  # nccl-tests' -w 5 -n 20 -c 1
    assert plan.placements == ["out_of_place", "in_place"]
    assert plan.modes == ["throughput"] and plan.graph_launches == 0
    assert plan.op == "sum" and plan.dtype == "float32" and plan.root == 0
    assert plan.min_time_s == pytest.approx(0.05)


def test_options_resolve():
    argv = ["--sizes", "seed", "-d", "half", "--mode", "both", "--placements", "in-place", "-o", "MAX"]
    plan = make_plan(build_parser().parse_args(argv), "gloo", 3, 1, "local")
    assert plan.sizes == [2 * n for n in (1, 1024, 2048, 4096, 8192, 256 << 10, 512 << 10, 1 << 20, 4 << 20, 256 << 20)]
    assert plan.dtype == "float16" and plan.op == "max"
    assert plan.modes == ["throughput", "latency"] and plan.placements == ["in_place"]
    plan = make_plan(build_parser().parse_args(["-b", "1K", "-e", "4K", "-i", "1K"]), "gloo", 2, 1, "local")
    assert plan.sizes == [1024, 2048, 3072, 4096]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-b", "12X"], "--min-bytes: invalid size '12X'"),
        (["-b", "1M", "-e", "1K"], "larger than --max-bytes"),
        (["--collectives", "all_reduce,allreduse"], "unknown collective 'allreduse'"),
        (["--cuda-graph"], "--cuda-graph needs NCCL"),
        (["-n", "0"], "--iters must be at least 1"),
        (["-o", "avg", "-d", "int32"], "--op avg needs a floating-point"),
        (["-o", "xor"], "--op: unknown reduction"),
        (["-r", "2"], "--root 2 is not a rank of a world of 2"),
        (["--sizes", "1K", "-b", "8"], "--sizes replaces"),
        (["--mode", "fast"], "--mode: unknown value 'fast'"),
        (["--placements", "sideways"], "--placements: unknown value"),
        (["--json", "/no/such/dir/sweep.jsonl"], "--json: directory"),
        (["--backend", "nccl"], "nccl"),
        (["--nproc", "0"], "--nproc must be at least 1"),
        (["--iters", "many"], "invalid int value"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_user_mistakes_give_one_line_and_exit_2(argv, message, capsys, no_launcher):
    if argv == ["--backend", "nccl"] and torch.cuda.is_available():
        pytest.skip("this machine has GPUs")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(argv), PROG)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{PROG}: error: ") and message in err, err


def test_nproc_under_a_launcher_is_a_mistake(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(["--nproc", "4"]), PROG)
    assert exit_info.value.code == 2
    assert "--nproc starts local processes" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["-b", "12X"], ["-b", "1M", "-e", "1K"], ["--collectives", "allreduse"]],
    ids=["bad-size", "inverted-range", "unknown-collective"],
)
def test_mistakes_from_the_shell_exit_2_without_traceback(argv):
    result = _sweep(*argv, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"{PROG}: error: "), result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


# ---- full runs -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_full_run_writes_jsonl_csv_tensorboard_and_fits(tmp_path):
    jsonl, csv_path, logdir = tmp_path / "sweep.jsonl", tmp_path / "sweep.csv", tmp_path / "tb"
    args = ["--collectives", "all", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "--min-time-ms", "0"]
    result = _sweep(*args, "--json", str(jsonl), "--csv", str(csv_path), "--logdir", str(logdir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "# Out of bounds values : 0 OK" in result.stdout and "# Avg bus bandwidth" in result.stdout

    records = _records(jsonl)
    header, rows = records[0], [r for r in records if r["record"] == "row"]
    assert header["record"] == "header" and header["world_size"] == 2 and header["nodes"] == 1
    assert header["backend"] == "gloo" and header["versions"]["torch"] == torch.__version__
    assert all(k.startswith(("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_")) or "_" in k for k in header["env"])
    assert header["env"]["NCCL_NVLS_ENABLE"] == "0" and "PATH" not in header["env"]
    assert len(header["ranks"]) == 2

    keys = [(r["collective"], r["size_bytes"], r["placement"]) for r in rows]
    assert len(keys) == len(set(keys)) == 7 * 3 * 2  # one row per (collective, size, placement)
    assert {r["collective"] for r in rows} == set(collectives.COLLECTIVES)
    for row in rows:
        assert set(METRICS_FIELDS) <= row.keys() and set(ROW_FIELDS) <= row.keys()
        assert row["world_size"] == 2 and row["mode"] == "throughput" and row["cuda_graph"] is False
        if row["skipped"]:
            assert row["placement"] == "in_place" and row["collective"] in ("all_to_all", "send_recv")
            assert row["time_us"] is None
        else:
            assert row["wrong"] == 0 and row["time_us"] > 0 and row["busbw_gbps"] >= 0 and row["iters"] == 3
    assert {r["emulated"] for r in rows if r["collective"] == "all_reduce"} == {True, False}
    assert {r["timing"] for r in rows if not r["skipped"]} == {"run"}
    assert any("emulated" in note for note in header["notes"]) and "run" in header["timing_methods"]
    assert records[-1] == {"record": "end", "status": "ok", "reason": "", "at": "", "rows": len(rows)}

    with open(csv_path) as handle:
        csv_rows = list(csv.DictReader(handle))
    assert len(csv_rows) == len(rows) and tuple(csv_rows[0]) == ROW_FIELDS
    assert [(r["collective"], int(r["size_bytes"]), r["placement"]) for r in csv_rows] == keys
    assert all(float(r["time_us"]) > 0 for r in csv_rows if not r["skipped"])

    fits = [r for r in records if r["record"] == "fit"]
    assert {(f["collective"], f["placement"]) for f in fits} >= {
        ("all_reduce", "in_place"),
        ("send_recv", "out_of_place"),
    }
    assert all(f["alpha_us"] >= 0 and (f["beta_gbps"] is None or f["beta_gbps"] > 0) for f in fits)
    loaded = load_fits(str(jsonl))
    assert "all_reduce" in loaded and "send_recv" not in loaded  # send_recv has no in-place rows
    # Times this small are noise on a loaded CPU, so beta may come out inf; the prediction is still >= alpha.
    assert loaded["all_reduce"].predict_time_us(1 << 20) >= loaded["all_reduce"].alpha_us
    assert "send_recv" in load_fits(str(jsonl), placement="out_of_place")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "raw_sweep/all_reduce/throughput/in_place/busbw_gbps" in tags
    steps = [e.step for e in events.Scalars("raw_sweep/all_reduce/throughput/in_place/time_us")]
    assert steps == [10, 13, 16]  # log2 of the sizes
    assert "raw_sweep/table/text_summary" in events.Tags()["tensors"]


@pytest.mark.slow
def test_world_size_one_latency_and_graphless_modes(tmp_path):
    jsonl = tmp_path / "one.jsonl"
    args = ["--nproc", "1", "--collectives", "all_reduce,send_recv", "--mode", "both", "-b", "8", "-e", "512"]
    result = _sweep(*args, "-f", "8", "-n", "7", "-w", "1", "--min-time-ms", "0", "--json", str(jsonl))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "world size 1: busbw is 0 by definition" in result.stderr
    rows = [r for r in _records(jsonl) if r["record"] == "row"]
    latency = [r for r in rows if r["mode"] == "latency" and not r["skipped"]]
    assert len(latency) == 3 * 2  # all_reduce: 3 sizes, 2 placements
    for row in latency:
        assert row["iters"] == 7 and row["time_us"] == row["p50_us"] and row["timing"] == "call"
        assert row["min_us"] <= row["p50_us"] <= row["p90_us"] <= row["p99_us"] <= row["max_us"]
        assert row["skew_us"] == 0 and row["busbw_gbps"] == 0 and row["wrong"] == 0
    send_recv = [r for r in rows if r["collective"] == "send_recv"]
    assert send_recv and all(r["skipped"] for r in send_recv)
    assert all(
        "gloo cannot send to its own rank" in r["skipped"] for r in send_recv if r["placement"] == "out_of_place"
    )


def _broken_sweep(plan) -> None:
    """The sweep, with an all_reduce that gets one element wrong on rank 1."""
    original = collectives.COLLECTIVES["all_reduce"]

    def run(bufs, args):
        original.run(bufs, args)
        if dist.get_rank() == 1:
            bufs.recv[0] += 1

    collectives.COLLECTIVES["all_reduce"] = dataclasses.replace(original, run=run)
    sweep_worker(plan)


@pytest.mark.slow
def test_a_wrong_element_is_counted_and_fails_the_run(tmp_path, capfd):
    jsonl = tmp_path / "broken.jsonl"
    argv = ["--sizes", "64,4K", "-n", "2", "-w", "0", "-c", "2", "--min-time-ms", "0", "--json", str(jsonl)]
    plan = make_plan(build_parser().parse_args(argv), "gloo", 2, 1, "local")
    assert spawn_local(_broken_sweep, 2, (plan,), backend="gloo", init_process_group=False) == 1
    rows = [r for r in _records(jsonl) if r["record"] == "row"]
    assert [r["wrong"] for r in rows] == [2, 2, 2, 2]  # one wrong element on one rank, in each of 2 checks
    assert "# Out of bounds values : 4 FAILED" in capfd.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_graph_mode_reports_host_overhead(tmp_path):
    jsonl = tmp_path / "gpu.jsonl"
    args = ["--nproc", "1", "-G", "--mode", "both", "-b", "8", "-e", "64K", "-f", "8", "-n", "20"]
    result = _sweep(*args, "--json", str(jsonl))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in _records(jsonl) if r["record"] == "row"]
    graph = [r for r in rows if r["cuda_graph"]]
    assert graph and all(r["backend"] == "nccl" and r["wrong"] == 0 for r in rows)
    assert all(r["host_overhead_us"] is not None for r in graph)
    assert {r["timing"] for r in rows if r["mode"] == "throughput"} == {"run"}
    assert {r["timing"] for r in rows if r["mode"] == "latency" and not r["cuda_graph"]} == {"call"}
    assert {r["timing"] for r in graph if r["mode"] == "latency"} <= {"call_in_graph", "replay"}
    assert _records(jsonl)[-1] == {"record": "end", "status": "ok", "reason": "", "at": "", "rows": len(rows)}


# ---- the fit and the table -------------------------------------------------------------------------------


def test_fit_recovers_alpha_and_beta():
    sizes = [8 * 2**k for k in range(28)]
    alpha, beta, worst = fit_alpha_beta(sizes, [alpha_beta_time_us(s, 6.0, 150.0) for s in sizes])
    assert alpha == pytest.approx(6.0) and beta == pytest.approx(150.0) and worst < 1e-9


def test_fit_weights_small_sizes_by_relative_error():
    # 10% noise on the largest sizes must not swamp the latency floor, as a plain least squares would.
    sizes = [8 * 2**k for k in range(28)]
    times = [alpha_beta_time_us(s, 6.0, 150.0) * (1.1 if s > 1 << 28 else 1.0) for s in sizes]
    alpha, beta, _ = fit_alpha_beta(sizes, times)
    assert alpha == pytest.approx(6.0, rel=0.02) and beta == pytest.approx(150.0, rel=0.1)


def test_fit_edge_cases():
    assert fit_alpha_beta([1024], [5.0]) is None
    assert fit_alpha_beta([8, 16], [5.0, 5.0])[:2] == (5.0, math.inf)
    alpha, beta, _ = fit_alpha_beta([1 << 20, 1 << 21], [10.0, 20.0])  # through zero: alpha stays at 0
    assert alpha == pytest.approx(0.0, abs=1e-9) and beta == pytest.approx((1 << 20) / 10.0 / 1e3)


def test_load_fits_filters_by_mode_placement_and_graph(tmp_path):
    path = tmp_path / "fits.jsonl"
    base = {"record": "fit", "collective": "all_reduce", "placement": "in_place", "mode": "throughput"}
    base |= {"cuda_graph": False, "alpha_us": 5.0, "beta_gbps": 100.0, "max_rel_error": 0.1}
    base |= {"world_size": 8, "dtype": "float32"}
    lines = [{"record": "header"}, base, base | {"cuda_graph": True, "alpha_us": 1.0}, base | {"mode": "latency"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fit = load_fits(str(path))["all_reduce"]
    assert fit.alpha_us == 5.0 and fit.predict_time_us(100e3) == pytest.approx(6.0)
    assert load_fits(str(path), cuda_graph=True)["all_reduce"].alpha_us == 1.0


def test_time_column_follows_nccl_tests():
    assert format_time(6.25) == "   6.25"
    assert format_time(123.45) == "  123.5"
    assert format_time(12345.6) == "  12346"
    assert format_time(None) == "N/A"
