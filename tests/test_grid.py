"""harness.grid: a real grid of train.py runs, then the comparison table; its CLI errors; and its old name."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from harness.common.cli import UsageError
from harness.grid import PROG, build_command, grid, parse_list, run_order

REPO = Path(__file__).resolve().parent.parent


def test_grid_and_command():
    configs = grid([1.0, 25.0], ["allreduce", "fp16"])
    assert len(configs) == 4 and {"--bucket-cap-mb": "25", "--comm-hook": "fp16"} in configs
    cmd = build_command(["torchrun", "--nproc-per-node", "8"], "gpt2", configs[0], Path("runs/x"), ["--max-steps", "9"])
    assert cmd[:4] == ["torchrun", "--nproc-per-node", "8", str(REPO / "train.py")]
    assert cmd[-2:] == ["--max-steps", "9"] and "--run-name" in cmd
    with pytest.raises(UsageError, match="--bucket-cap-mb"):
        parse_list("--bucket-cap-mb", "1,five", float, "1,5,25")


def test_repeats_alternate_the_order():
    a, b, c = ({"--comm-hook": hook} for hook in ("allreduce", "fp16", "bf16"))
    assert run_order([a, b, c], 1) == [(1, a), (1, b), (1, c)]
    assert run_order([a, b, c], 3) == [(1, a), (1, b), (1, c), (2, c), (2, b), (2, a), (3, a), (3, b), (3, c)]


@pytest.mark.slow
def test_sweep_runs_every_configuration_and_compares(tmp_path):
    logdir = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.grid",
            "--model",
            "resnet_tiny",
            "--bucket-cap-mb",
            "0.25,5",
            "--comm-hook",
            "allreduce",
            "--logdir",
            str(logdir),
            "--repeat",
            "2",
            "--",
            "--max-steps",
            "4",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # Two configurations, twice each: two versions under each run name, the second pass in reverse order.
    summaries = sorted(logdir.glob("*/*/summary.json"))
    assert len(summaries) == 4 and len({path.parent.parent for path in summaries}) == 2
    started = [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("[") and "train.py" in line]
    assert started == [
        "[1/4] resnet_tiny-bucket0.25-allreduce (repeat 1)",
        "[2/4] resnet_tiny-bucket5-allreduce (repeat 1)",
        "[3/4] resnet_tiny-bucket5-allreduce (repeat 2)",
        "[4/4] resnet_tiny-bucket0.25-allreduce (repeat 2)",
    ]
    assert len(list((logdir / "logs").glob("*-repeat2.log"))) == 2
    with open(logdir / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert [row["bucket_cap_mb"] for row in rows] == ["0.25", "5"], "one row per configuration, numbers in order"
    assert [row["runs"] for row in rows] == ["2", "2"] and all(row["step_spread_pct"] for row in rows)
    markdown = (logdir / "comparison.md").read_text()
    assert "| run |" in markdown and "step spread %" in markdown


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--comm-hook", "gzip"], "--comm-hook"),
        (["--bucket-cap-mb", "0,5"], "--bucket-cap-mb"),
        (["--model", "nope"], "--model"),
        (["--repeat", "0"], "--repeat"),
        (["--repeat", "two"], "--repeat"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--bucket-cap-mb", "5,nan"], "every cap must be a positive number of MiB"),
        (["--bucket-cap-mb", "25,25"], "names a value twice; --repeat N runs every setting N times"),
        (["--comm-hook", ","], "needs at least one value, e.g. --comm-hook allreduce,fp16"),
        (["--launcher", "nosuchlauncher -x"], "'nosuchlauncher' is not a program on PATH"),
        (["--launcher", 'torchrun "'], "No closing quotation"),
        (["--baseline", "nosuch"], "--baseline 'nosuch' matches no run; runs: resnet50-bucket1-allreduce, "),
        # train.py's arguments, checked as train.py checks them before any run (each run would fail alike)
        (["--", "--bogus"], "after -- (train.py's arguments): unrecognized arguments: --bogus"),
        (["--", "--max-steps", "-5"], "--max-steps must be a positive integer, got -5"),
        (["--", "--bucket-cap-mb=5"], "after --: --bucket-cap-mb is the grid's to set; give it before --"),
        (["--", "--model", "resnet18"], "after --: --model is the grid's to set"),
        (["--", "--bucket", "5"], "after --: --bucket-cap-mb is the grid's to set"),  # argparse takes the prefix
        (["--", "--logd", "/tmp/elsewhere"], "after --: --logdir is the grid's to set"),
        (["--comm-hook", "fp16", "--", "--harness", "off"], "train.py would refuse run resnet50-bucket1-fp16: --comm"),
        (["--baseline", "bucket1"], "--baseline 'bucket1' is ambiguous; it matches: resnet50-bucket1-allreduce, "),
    ],
)
def test_bad_grid_is_one_line_exit_2(args, flag, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "harness.grid", "--logdir", str(tmp_path), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"{PROG}: error:") and flag in lines[0]
    if args[:1] == ["--model"]:  # the grid's own option, not train.py's arguments
        assert "after --" not in lines[0], lines[0]


def test_old_name_still_runs_the_grid(tmp_path):
    """`python -m harness.sweep_settings` (the name before harness.grid) is the same command."""
    old = [sys.executable, "-m", "harness.sweep_settings", "--repeat", "0", "--logdir", str(tmp_path)]
    proc = subprocess.run(old, cwd=REPO, capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == "python -m harness.grid: error: --repeat 0: must be at least 1"
    usage = subprocess.run([*old[:3], "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and "--bucket-cap-mb" in usage.stdout


def test_a_logdir_that_holds_runs_is_refused_before_any_run(tmp_path):
    """The table would mix the earlier runs with the grid's own (and take one of them as the baseline)."""
    (tmp_path / "old-run" / "20260101-000000").mkdir(parents=True)
    (tmp_path / "old-run" / "20260101-000000" / "summary.json").write_text("{}")
    cmd = [sys.executable, "-m", "harness.grid", "--model", "resnet_tiny", "--logdir", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "already holds 1 run; give a new directory" in proc.stderr
    assert not (tmp_path / "logs").exists()


def test_mistakes_that_need_no_model_are_refused_before_torch_loads(tmp_path):
    """torch (seconds to load) is for the model and train.py's own checks, which come last."""
    code = (
        "import sys\nfrom harness import grid\nfrom harness.common.cli import UsageError\n"
        f"try:\n    grid.main(['--baseline', 'nomatch', '--logdir', {str(tmp_path)!r}])\n"
        "except UsageError as err:\n    print('refused:', err)\nprint('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("refused: --baseline 'nomatch' matches no run") and proc.stdout.endswith("False\n")
