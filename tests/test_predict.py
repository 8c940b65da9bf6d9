"""harness.predict and harness.analysis' prediction and bucket layout: the formulas by hand, DDP's bucket layout
against a real DDP, the CLI's mistakes, end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from harness import predict as predict_cli
from harness.analysis.bucket_layout import PlannedBucket, ddp_bucket_layout, layout_from_summary, model_bucket_layout
from harness.analysis.prediction import (
    Network,
    busbw_from_beta,
    network_from_sweep,
    other_ms_of_run,
    overlap_timeline,
    predict,
    wire_bytes,
)
from harness.common.cli import UsageError, run_cli
from harness.common.sweep_fits import load_fits
from models import get_model_spec
from tests.test_hostile_inputs import (
    in_process,
    summary,
    usage_error,
    with_change,
    write_run,
)

REPO = Path(__file__).resolve().parent.parent
PROG = "python -m harness.predict"


def write_sweep(
    path: Path, world_size: int, alpha_us: float, beta_gbps: float | None, collective: str = "all_reduce",
    sizes: tuple[int, int] = (1024, 2**30), max_rel_error: float = 0.01,
):  # fmt: skip
    """A sweep's JSON Lines with one fit record, as harness.raw_sweep writes it (β None: time did not grow)."""
    fit = {"record": "fit", "collective": collective, "placement": "in_place", "mode": "throughput",
           "cuda_graph": False, "dtype": "float32", "world_size": world_size, "nodes": 1, "backend": "gloo",
           "alpha_us": alpha_us, "beta_gbps": beta_gbps, "max_rel_error": max_rel_error, "points": 10,
           "min_size_bytes": sizes[0], "max_size_bytes": sizes[1]}  # fmt: skip
    path.write_text(json.dumps({"record": "header"}) + "\n" + json.dumps(fit) + "\n")
    return str(path)


# ---- formulas ---------------------------------------------------------------------------------------------


def test_busbw_from_beta_is_the_ring_factor():
    assert busbw_from_beta(1.0, 2) == pytest.approx(1.0)
    assert busbw_from_beta(1.0, 4) == pytest.approx(1.5)
    assert busbw_from_beta(3.0, 64) == pytest.approx(3.0 * 2 * 63 / 64)
    assert busbw_from_beta(3.0, 1) == 0.0  # one rank: no link, busbw 0 by definition


def test_prediction_at_the_sweeps_world_size_is_the_fit_itself(tmp_path):
    path = write_sweep(tmp_path / "s.jsonl", world_size=4, alpha_us=50.0, beta_gbps=2.0)
    net = network_from_sweep(path)
    fit = load_fits(path)["all_reduce"]
    assert net.busbw_gbps == pytest.approx(3.0)  # 2 × 2·3/4
    for size in (1024, 10**6, 10**8):
        assert net.all_reduce_us(size, 4) == pytest.approx(fit.predict_time_us(size))


def test_other_world_sizes_keep_bus_bandwidth_and_scale_alpha_as_asked():
    size = 10**8
    constant = Network(alpha_us=100.0, busbw_gbps=10.0, ref_world_size=2)
    ring = Network(alpha_us=100.0, busbw_gbps=10.0, ref_world_size=2, alpha_scaling="ring")
    # t = α(n) + S × 2(n−1)/n / B_bus; S / B_bus = 1e8 B / 10 GB/s = 10,000 µs
    assert constant.all_reduce_us(size, 2) == pytest.approx(100 + 10_000)
    assert constant.all_reduce_us(size, 64) == pytest.approx(100 + 10_000 * 2 * 63 / 64)
    assert ring.all_reduce_us(size, 4) == pytest.approx(300 + 10_000 * 1.5)
    assert ring.all_reduce_us(size, 64) == pytest.approx(6300 + 10_000 * 2 * 63 / 64)
    assert constant.all_reduce_us(size, 1) == pytest.approx(100)  # nothing travels: α alone


def test_compressed_hooks_halve_the_bytes_of_fp32_gradients():
    bucket = PlannedBucket(index=0, numel=1000, grad_itemsize=4, num_params=1, first_param="w", last_param="w")
    assert wire_bytes(bucket, "allreduce") == 4000
    assert wire_bytes(bucket, "fp16") == wire_bytes(bucket, "bf16") == 2000
    net = Network(alpha_us=0.0, busbw_gbps=1.0, ref_world_size=2)
    full = predict([bucket], net, 2, "allreduce")["totals"]["comm_ms"]
    half = predict([bucket], net, 2, "fp16")["totals"]["comm_ms"]
    assert half == pytest.approx(full / 2)


def test_overlap_timeline_by_hand():
    # C = 3 ms, backward 2/3: forward ends at 1, backward at 3. Equal sizes: ready at 2 and 3.
    ready, ends, exposed = overlap_timeline([1.0, 1.0], [1, 1], compute_ms=3.0, backward_share=2 / 3)
    assert ready == pytest.approx([2.0, 3.0])
    assert ends == pytest.approx([3.0, 4.0])
    assert exposed == pytest.approx(1.0)
    # A slow first bucket delays the second: it starts at 2 + 5 = 7, ends at 8.
    _, ends, exposed = overlap_timeline([5.0, 1.0], [1, 1], compute_ms=3.0, backward_share=2 / 3)
    assert ends == pytest.approx([7.0, 8.0])
    assert exposed == pytest.approx(5.0)
    # Communication far shorter than backward: only the last bucket's time is exposed.
    _, _, exposed = overlap_timeline([0.1, 0.1, 0.1], [1, 1, 1], compute_ms=30.0, backward_share=2 / 3)
    assert exposed == pytest.approx(0.1)


def test_step_prediction_adds_exposed_and_other_time():
    buckets = [PlannedBucket(i, 250_000, 4, 1, f"p{i}", f"p{i}") for i in range(2)]  # 1 MB each
    net = Network(alpha_us=1000.0, busbw_gbps=1.0, ref_world_size=2)  # 1 ms + 1 ms per bucket at n = 2
    result = predict(buckets, net, 2, compute_ms=3.0, other_ms=0.5)
    t = result["totals"]
    assert [b["predicted_ms"] for b in result["buckets"]] == pytest.approx([2.0, 2.0])
    assert t["comm_ms"] == pytest.approx(4.0)
    # ready at 2 and 3 ms; ends at 4 and 6; backward ends at 3: exposed 3, step 3 + 3 + 0.5
    assert t["exposed_ms"] == pytest.approx(3.0)
    assert t["step_ms"] == pytest.approx(6.5)
    assert t["exposed_share_of_step"] == pytest.approx(3.0 / 6.5)


def test_other_time_of_a_run_is_step_minus_forward_backward():
    assert other_ms_of_run({"step_ms_p50": 12.0, "fwd_bwd_ms_p50": 9.5}) == pytest.approx(2.5)
    assert other_ms_of_run({"step_ms_p50": 9.0, "fwd_bwd_ms_p50": 9.5}) == 0.0, "noise below 0: none"
    assert other_ms_of_run({"step_ms_p50": 12.0, "fwd_bwd_ms_p50": None}) == 0.0, "unknown: none"
    assert other_ms_of_run({}) == 0.0


# ---- bucket layout -----------------------------------------------------------------------------------------


def test_resnet50_layout_matches_what_ddp_rebuilt():
    # Seen from DDP on torch 2.14 (1 gloo rank, 3 steps): rebuilt_bucket_sizes of resnet50 at the default cap.
    sizes = [b.numel * b.grad_itemsize for b in model_bucket_layout("resnet50")]
    assert sizes == [8196000, 31502336, 26255360, 26550272, 9724160]


@pytest.mark.parametrize(("model_name", "cap_mb"), [("resnet_tiny", None), ("gpt_tiny", 0.05), ("vit_tiny", 0.02)])
def test_layout_matches_a_real_ddp(tmp_path, model_name, cap_mb):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        spec = get_model_spec(model_name)
        torch.manual_seed(0)
        model = spec.build()
        predicted = [b.numel * b.grad_itemsize for b in ddp_bucket_layout(model, cap_mb)]
        ddp = DistributedDataParallel(model, **({} if cap_mb is None else {"bucket_cap_mb": cap_mb}))
        for seed in range(3):  # step 0 records the ready order, step 1 rebuilds, step 2 logs the rebuilt sizes
            spec.loss(ddp, spec.make_batch(2, "cpu", seed)).backward()
        data = ddp._get_ddp_logging_data()
        assert data["has_rebuilt_buckets"] == 1
        assert predicted == [int(s) for s in data["rebuilt_bucket_sizes"].split(",")]
        assert len(predicted) > 1
    finally:
        dist.destroy_process_group()


def test_layout_from_summary_keeps_the_measured_elements():
    summary = {
        "settings": {"comm_hook": "fp16"},
        "buckets": [
            {"index": 1, "numel": 10, "bytes": 20, "num_params": 2, "first_param": "a", "last_param": "b"},
            {"index": 0, "numel": 6, "bytes": 12, "num_params": 1, "first_param": "c", "last_param": "c"},
        ],
    }
    buckets = layout_from_summary(summary)
    assert [(b.index, b.numel, b.grad_itemsize) for b in buckets] == [(0, 6, 4), (1, 10, 4)]
    assert [wire_bytes(b, "fp16") for b in buckets] == [12, 20]


# ---- command line ------------------------------------------------------------------------------------------


def run_predict(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "harness.predict", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _mistakes(tmp_path: Path) -> list[tuple[list[str], str]]:
    no_fit = write_sweep(tmp_path / "gather.jsonl", 2, 10.0, 1.0, collective="all_gather")
    one_rank = write_sweep(tmp_path / "one.jsonl", 1, 10.0, 1.0)
    good = write_sweep(tmp_path / "good.jsonl", 2, 10.0, 1.0)
    (tmp_path / "junk.jsonl").write_text("not json\n")
    return [
        (["--sweep", str(tmp_path / "missing.jsonl"), "--model", "resnet50"], "is not a file"),
        (["--sweep", no_fit, "--model", "resnet50"], "no all_reduce fit"),
        (["--sweep", one_rank, "--model", "resnet50"], "1 rank"),
        (["--sweep", str(tmp_path / "junk.jsonl"), "--model", "resnet50"], "junk.jsonl line 1 is not JSON"),
        (["--sweep", good, "--model", "resnet5O"], "unknown model"),
        (["--sweep", good, "--model", "resnet50", "--world-size", "0"], "--world-size"),
        (["--model", "resnet50", "--world-size", "64"], "--sweep PATH, or both"),
        (["--model", "resnet50", "--alpha-us", "5"], "--sweep PATH, or both"),
        (["--alpha-us", "5", "--busbw-gbps", "50", "--world-size", "8"], "--model NAME"),
        (["--alpha-us", "5", "--busbw-gbps", "0", "--model", "resnet50"], "--busbw-gbps"),
        (["--sweep", good, "--run", str(tmp_path)], "no summary.json"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--model", "resnet50", "--world-size", "many"], "--world-size"),
        (["--sweep", good, "--model", "resnet50", "--json", str(tmp_path / "no" / "p.json")], "--json"),
    ]


def test_help_and_empty_command_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        predict_cli.main(["-h"])
    assert exit_info.value.code == 0 and "--busbw-gbps" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: predict_cli.main([]), PROG)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f"{PROG}: error: give --model NAME")


def test_main_returns_0_and_the_prediction_is_a_function(capsys):
    args = ["--model", "resnet_tiny", "--world-size", "8", "--alpha-us", "10", "--busbw-gbps", "5"]
    result = predict_cli.predict_from_args(predict_cli.build_parser().parse_args(args))
    assert result["world_size"] == 8 and result["model"] == "resnet_tiny" and result["formulas"]
    assert result["totals"]["buckets"] == len(result["buckets"]) > 0
    assert predict_cli.main(args) == 0 and "Formulas:" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--bucket-cap-mb must be positive"):
        predict_cli.predict_from_args(predict_cli.build_parser().parse_args([*args, "--bucket-cap-mb", "nan"]))


def test_cli_mistakes_are_one_line_and_exit_2(tmp_path):
    for args, message in _mistakes(tmp_path):
        proc = run_predict(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"{PROG}: error:") and message in proc.stderr, (args, proc.stderr)


def test_cli_predicts_64_ranks_on_a_400_gbit_fabric(tmp_path):
    out = tmp_path / "p.json"
    proc = run_predict("--model", "resnet50", "--world-size", "64", "--alpha-us", "30", "--busbw-gbps", "50",
                       "--compute-ms", "100", "--comm-hook", "bf16", "--json", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Formulas:" in proc.stdout and "t_i = α(n) + S_i × 2(n−1)/n / B_bus" in proc.stdout
    result = json.loads(out.read_text())
    assert result["totals"]["bytes_per_step"] == 2 * 25_557_032  # bf16: 2 bytes for each resnet50 parameter
    expected = sum(0.030 + b["bytes"] * 2 * 63 / 64 / 50e9 * 1e3 for b in result["buckets"])
    assert result["totals"]["comm_ms"] == pytest.approx(expected)
    assert 0 < result["totals"]["exposed_ms"] < result["totals"]["comm_ms"]


@pytest.mark.slow
def test_end_to_end_sweep_run_and_efficiency(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_RANK", "WORLD_SIZE"))}
    env.update(GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    sweep = tmp_path / "sweep.jsonl"
    for cmd in (
        ["-m", "harness.raw_sweep", "--nproc", "2", "-b", "64K", "-e", "8M", "-f", "4", "--json", str(sweep)],
        ["train.py", "--model", "resnet_tiny", "--max-steps", "5", "--logdir", str(tmp_path / "runs")],
    ):
        proc = subprocess.run([sys.executable, *cmd], cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (summary,) = (tmp_path / "runs").glob("*/*/summary.json")
    out = tmp_path / "predict.json"
    proc = run_predict("--sweep", str(sweep), "--run", str(summary.parent), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "network efficiency (measured/predicted comm per step)" in proc.stdout
    result = json.loads(out.read_text())
    measured = json.loads(summary.read_text())
    assert result["world_size"] == 2 and len(result["buckets"]) == len(measured["buckets"])
    assert result["totals"]["bytes_per_step"] == measured["totals"]["bytes_per_step"]
    ratio = result["totals"]["comm_measured_over_predicted"]
    assert ratio == pytest.approx(measured["totals"]["comm_ms_p50"] / result["totals"]["comm_ms"])
    assert math.isfinite(ratio) and ratio > 0


# ---- what a hostile user tries: flags and fits that cannot describe a network, colliding outputs ----------
# (files of the wrong shape: tests/test_hostile_inputs.py)


def fit_line(**changes) -> str:
    """One fit record of a 2-rank sweep over 1 KiB..256 MiB, as harness.raw_sweep writes it, with `changes`."""
    fit = {"record": "fit", "collective": "all_reduce", "placement": "in_place", "mode": "throughput",
           "cuda_graph": False, "dtype": "float32", "world_size": 2, "nodes": 1, "backend": "gloo",
           "alpha_us": 30.0, "beta_gbps": 1.0, "beta_busbw_gbps": 1.0, "max_rel_error": 0.05, "points": 19,
           "min_size_bytes": 1024, "max_size_bytes": 2**28}  # fmt: skip
    fit.update(changes)
    return json.dumps({k: v for k, v in fit.items() if v != "DROP"})


def write_lines(path: Path, *lines: str) -> str:
    """A sweep's JSON Lines: a header, then `lines` as they are."""
    path.write_text("".join(line + "\n" for line in (json.dumps({"record": "header"}), *lines)))
    return str(path)


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ([], ["--run: ", "summary.json holds a list; expected a JSON object"]),
        (with_change("totals", [1]), ["summary.json: totals is a list; expected a JSON object"]),
        (with_change("settings", "resnet"), ["settings is the string 'resnet'; expected a JSON object"]),
        (with_change("buckets", "0"), ["buckets is the string '0'; expected a list of JSON objects"]),
        (with_change("buckets.0.numel", 2.5), ["buckets[0].numel is 2.5; expected an integer >= 1"]),
        (with_change("buckets.0.bytes", 3), ["buckets[0].bytes is 3; expected numel (1000000) × 1, 2, 4 or 8"]),
        (with_change("buckets.0.time_ms_p50", -1.0), ["buckets[0].time_ms_p50 is -1.0; expected a number >= 0"]),
        (with_change("world_size", "2"), ["world_size is the string '2'; expected an integer >= 1"]),
        (with_change("totals.compute_only_ms", "30"), ["totals.compute_only_ms is the string '30'"]),
        (json.dumps(summary())[:-40], ["summary.json is not valid JSON", "truncated?"]),
        (b"\x89PNG\r\n\x1a\n", ["summary.json is not UTF-8 text"]),
        (with_change("buckets", []), ["measured no buckets"]),
    ],
)
def test_predict_refuses_a_summary_of_the_wrong_shape(tmp_path, capsys, content, fragments):
    run_dir = write_run(tmp_path, "run", content)
    sweep = write_lines(tmp_path / "s.jsonl", fit_line())
    usage_error(predict_cli.main, PROG, ["--sweep", sweep, "--run", str(run_dir)], capsys, *fragments)


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        ([fit_line()[:-30]], ["s.jsonl line 2 is not JSON", "cut short"]),
        ([fit_line(), '{"record": "row", "size_'], ["s.jsonl line 3 is not JSON"]),
        (["[]"], ["line 2 holds []; expected a JSON object"]),
        ([fit_line(alpha_us="DROP")], ["line 2: fit record's alpha_us is missing; expected a finite number >= 0"]),
        ([fit_line(beta_gbps="1.0")], ['fit record\'s beta_gbps is "1.0"; expected a finite number > 0 (GB/s)']),
        ([fit_line(beta_gbps=0)], ["fit record's beta_gbps is 0; expected a finite number > 0"]),
        ([fit_line(beta_gbps=-2.5)], ["fit record's beta_gbps is -2.5; expected a finite number > 0"]),
        ([fit_line(alpha_us=-5.0)], ["fit record's alpha_us is -5.0; expected a finite number >= 0"]),
        ([fit_line().replace('"alpha_us": 30.0', '"alpha_us": NaN')], ["fit record's alpha_us is NaN"]),
        ([fit_line().replace('"beta_gbps": 1.0', '"beta_gbps": Infinity')], ["fit record's beta_gbps is Infinity"]),
        ([fit_line(max_rel_error=None)], ["fit record's max_rel_error is null; expected a finite number >= 0"]),
        ([fit_line(world_size=2.5)], ["fit record's world_size is 2.5; expected an integer >= 1"]),
        ([fit_line(cuda_graph="no")], ['fit record\'s cuda_graph is "no"; expected true or false']),
        ([fit_line(min_size_bytes=2**30)], ["min_size_bytes 1073741824 and max_size_bytes 268435456"]),
        ([fit_line(max_size_bytes="DROP")], ["expected both, min <= max, or neither"]),
    ],
)
def test_predict_refuses_a_sweep_or_fit_that_cannot_describe_a_network(tmp_path, capsys, lines, fragments):
    sweep = write_lines(tmp_path / "s.jsonl", *lines)
    run_dir = write_run(tmp_path, "run", summary())
    usage_error(predict_cli.main, PROG, ["--sweep", sweep, "--run", str(run_dir)], capsys, "--sweep: ", *fragments)


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--alpha-us", "-1", "--busbw-gbps", "5"], "--alpha-us must be >= 0 and finite, got -1.0"),
        (["--alpha-us", "nan", "--busbw-gbps", "5"], "--alpha-us must be >= 0 and finite, got nan"),
        (["--alpha-us", "inf", "--busbw-gbps", "5"], "--alpha-us must be >= 0 and finite, got inf"),
        (["--alpha-us", "5", "--busbw-gbps", "-3"], "--busbw-gbps must be positive and finite, got -3.0"),
        (["--alpha-us", "5", "--busbw-gbps", "nan"], "--busbw-gbps must be positive and finite, got nan"),
        (["--alpha-us", "5", "--busbw-gbps", "inf"], "--busbw-gbps must be positive and finite, got inf"),
        (["--alpha-us", "5", "--busbw-gbps", "5", "--compute-ms", "nan"], "--compute-ms must be >= 0"),
        (["--alpha-us", "5", "--busbw-gbps", "5", "--compute-ms", "-2"], "--compute-ms must be >= 0"),
        (["--alpha-us", "5", "--busbw-gbps", "5", "--backward-share", "nan"], "--backward-share must be between"),
        (["--alpha-us", "5", "--busbw-gbps", "5", "--world-size", "-4"], "--world-size must be at least 1"),
    ],
)
def test_predict_refuses_flags_that_cannot_describe_a_network(tmp_path, capsys, flags, fragment):
    run_dir = write_run(tmp_path, "run", summary())
    usage_error(predict_cli.main, PROG, [*flags, "--run", str(run_dir)], capsys, fragment)


def test_predict_bucket_cap_beyond_any_model_is_refused(capsys):
    args = ["--model", "resnet_tiny", "--alpha-us", "5", "--busbw-gbps", "5", "--bucket-cap-mb", "1e300"]
    usage_error(predict_cli.main, PROG, args, capsys, "--bucket-cap-mb must be positive and at most 1048576")


def test_predict_refuses_buckets_beyond_the_fits_sizes_unless_asked(tmp_path, capsys):
    run_dir = write_run(tmp_path, "run", summary(bucket_bytes=100_000_000))  # one 100 MB bucket
    small = write_sweep(tmp_path / "small.jsonl", 2, 30.0, 1.0, sizes=(1024, 2**20), max_rel_error=1.11)
    args = ["--sweep", small, "--run", str(run_dir)]
    line = usage_error(predict_cli.main, PROG, args, capsys, "--sweep")
    assert line == (
        f"{PROG}: error: --sweep {small}: its all_reduce fit was measured over 1,024 to 1,048,576 bytes, and "
        "1 of 1 buckets lie outside (one of 100,000,000 bytes); sweep sizes that cover the buckets (python -m "
        "harness.raw_sweep -b/-e), or pass --extrapolate to predict beyond the measured sizes"
    )
    out_json = tmp_path / "p.json"
    code, out, err = in_process(predict_cli.main, PROG, [*args, "--extrapolate", "--json", str(out_json)], capsys)
    assert code == 0
    (warning,) = err.splitlines()
    assert warning.startswith(f"{PROG}: warning: --sweep {small}: its all_reduce fit was measured over 1,024")
    assert "predicted beyond the measured sizes, as --extrapolate asks" in warning
    assert "# warning: --sweep" in out
    # The fit's own error, next to the prediction and in the JSON.
    assert "its largest relative error there 111.0 %" in out and "the fit's own error is up to 111.0 %" in out
    result = json.loads(out_json.read_text())
    assert result["network"]["fit_max_rel_error"] == 1.11 and len(result["warnings"]) == 1
    assert result["network"]["fit_max_size_bytes"] == 2**20
    # A given bandwidth holds at every size: no range to keep to.
    code, _, err = in_process(predict_cli.main, PROG, [*args, "--busbw-gbps", "1"], capsys)
    assert code == 0 and err == ""


def test_predict_never_extrapolates_a_fit_without_bandwidth(tmp_path, capsys):
    """β = ∞ (null): time did not grow over 8..64 bytes. That fit says nothing about a 100 MB bucket."""
    run_dir = write_run(tmp_path, "run", summary(bucket_bytes=100_000_000))
    tiny = write_sweep(tmp_path / "tiny.jsonl", 2, 30.0, None, sizes=(8, 64))
    for extra in ([], ["--extrapolate"]):
        usage_error(predict_cli.main, PROG, ["--sweep", tiny, "--run", str(run_dir), *extra], capsys,
                    "measured over 8 to 64 bytes", "100,000,000 bytes", "β = ∞", "even with --extrapolate")  # fmt: skip
    # Within its sizes the same fit is fine: a bucket of 64 bytes takes α.
    inside = write_run(tmp_path, "inside", summary(bucket_bytes=64))
    code, out, _ = in_process(predict_cli.main, PROG, ["--sweep", tiny, "--run", str(inside)], capsys)
    assert code == 0 and "predicted comm 0.030 ms" in out


def test_predict_output_mistakes(tmp_path, capsys):
    run_dir = write_run(tmp_path, "run", summary())
    sweep = write_sweep(tmp_path / "s.jsonl", 2, 30.0, 1.0)
    base = ["--sweep", sweep, "--run", str(run_dir)]
    usage_error(predict_cli.main, PROG, [*base, "--json", str(tmp_path)], capsys, "--json", "is a directory")
    usage_error(predict_cli.main, PROG, [*base, "--json", sweep], capsys, "--json", "is an input file")
    usage_error(predict_cli.main, PROG, [*base, "--json", str(run_dir / "summary.json")], capsys,
                "is an input file")  # fmt: skip
    assert json.loads((run_dir / "summary.json").read_text())["completed"] is True
    assert (tmp_path / "s.jsonl").read_text().count("\n") == 2, "the sweep is untouched"
    if Path("/dev/full").exists():
        usage_error(predict_cli.main, PROG, [*base, "--json", "/dev/full"], capsys, "--json", "/dev/full")


def test_predict_into_a_closed_pipe_is_quiet_and_keeps_its_json(tmp_path):
    run_dir = write_run(tmp_path, "run", summary())
    sweep = write_sweep(tmp_path / "s.jsonl", 2, 30.0, 1.0)
    out_json = tmp_path / "p.json"
    cmd = [sys.executable, "-m", "harness.predict", "--sweep", sweep, "--run", str(run_dir), "--json", str(out_json)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # the reader is gone before predict writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err
    assert json.loads(out_json.read_text())["world_size"] == 2


def test_measured_ready_times_are_scaled_onto_the_compute_only_step(tmp_path, capsys):
    """A timeline step carries a stamp per parameter, so its forward + backward (10 + 30 ms here) can outlast the
    compute-only step (30 ms). Taken as they are, the bucket would be ready 10 ms after the backward that exposed
    time is measured from: 10 ms + its whole all_reduce exposed, more than the communication itself (overlap below
    0 %). Scaled onto C the bucket is ready as backward ends: exactly its all_reduce is exposed."""
    run = summary(bucket_bytes=4_000_000)
    run["backward_timeline"] = {
        "forward_ms": 10.0, "backward_ms": 30.0, "samples": 2, "time_source": "test",
        "params": [{"index": 0, "name": "conv.weight", "numel": 1_000_000, "itemsize": 4, "ready_ms": 30.0}],
    }  # fmt: skip
    run_dir = write_run(tmp_path, "run", run)
    out_json = tmp_path / "p.json"
    args = ["--alpha-us", "100", "--busbw-gbps", "1", "--run", str(run_dir), "--json", str(out_json)]
    code, out, _ = in_process(predict_cli.main, PROG, args, capsys)
    assert code == 0, out
    totals = json.loads(out_json.read_text())["totals"]
    comm = 0.1 + 4_000_000 * 2 * 1 / 2 / 1e6  # α + S × 2(n−1)/n / B_bus, ms: 4.1
    assert totals["comm_ms"] == pytest.approx(comm)
    assert totals["exposed_ms"] == pytest.approx(comm) and totals["overlap_pct"] == pytest.approx(0.0, abs=1e-9)
    assert "its 40.00 ms scaled to C = 30.00 ms" in out
    # An assumed backward share has nothing to place here: the timeline gives the ready times.
    usage_error(predict_cli.main, PROG, [*args[:-2], "--backward-share", "0.5"], capsys, "measured timeline gives them")


def test_a_damaged_timeline_is_one_line(tmp_path, capsys):
    run = summary()
    param = {"index": 0, "name": "w", "numel": 1, "itemsize": 4, "ready_ms": -50}
    run["backward_timeline"] = {
        "forward_ms": 1.0,
        "backward_ms": 2.0,
        "samples": 2,
        "time_source": "t",
        "params": [param],
    }
    run_dir = write_run(tmp_path, "run", run)
    usage_error(predict_cli.main, PROG, ["--alpha-us", "5", "--busbw-gbps", "5", "--run", str(run_dir)], capsys,
                "--run: ", "backward_timeline.params[0].ready_ms is -50; expected a number >= 0")  # fmt: skip


def test_a_run_that_did_not_complete_is_said(tmp_path, capsys):
    run = {**summary(), "completed": False, "reason": "interrupted by SIGTERM at step 9"}
    run_dir = write_run(tmp_path, "run", run)
    code, out, err = in_process(
        predict_cli.main, PROG, ["--alpha-us", "5", "--busbw-gbps", "5", "--run", str(run_dir)], capsys
    )
    assert code == 0
    said = "did not complete (interrupted by SIGTERM at step 9): its figures are of the steps it ran"
    assert said in err and said in out


def test_a_backward_share_that_would_change_nothing_is_refused(tmp_path, capsys):
    """It places assumed ready times within a compute time: without one, or where a run's timeline gives the
    ready times, it was silently ignored."""
    net = ["--alpha-us", "5", "--busbw-gbps", "5", "--model", "resnet_tiny", "--world-size", "2"]
    usage_error(predict_cli.main, PROG, [*net, "--backward-share", "0.5"], capsys, "give --compute-ms too")
    code, out, _ = in_process(predict_cli.main, PROG, [*net, "--backward-share", "0.5", "--compute-ms", "30"], capsys)
    assert code == 0 and "predicted exposed" in out
