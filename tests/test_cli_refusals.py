"""Every command answers a mistake alike: `PROG: error: message` on one line of stderr and exit code 2, no usage
text and no traceback (harness.common.cli). The harness's own commands are checked option by option in their own
tests; this walks every program under bench/ and harness/ that runs as `python -m`, and train.py, with an option
none of them has, so that a new program that forgets run_cli fails here."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.common.cli import OneLineParser, UsageError
from tests.train_runs import REPO

MAIN_GUARD = 'if __name__ == "__main__":'


def programs() -> list[tuple[list[str], str]]:
    """(the command, the program name it should give) for each module with a main guard, and train.py."""
    found = [([sys.executable, str(REPO / "train.py")], "train.py")]
    for path in sorted([*REPO.glob("bench/*.py"), *REPO.glob("harness/**/*.py")]):
        if MAIN_GUARD in path.read_text():
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found.append(([sys.executable, "-m", module], f"python -m {module}"))
    return found


def refusal(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*command, "--no-such-option"], cwd=REPO, capture_output=True, text=True, timeout=180, check=False
    )


# A module that is another's older name, and answers with that one's program name.
ALIASES = {"python -m harness.sweep_settings": "python -m harness.grid"}


@pytest.mark.slow
def test_every_program_refuses_an_unknown_option_in_one_line_with_exit_2():
    found = programs()
    assert len(found) > 20, "the walk found too few programs: has the layout moved?"
    with ThreadPoolExecutor(max_workers=3) as pool:  # most of the time is importing torch: a few at once
        results = list(pool.map(refusal, [command for command, _ in found]))
    wrong = []
    for (_, name), proc in zip(found, results, strict=True):
        prog = ALIASES.get(name, name)
        lines = proc.stderr.strip().splitlines()
        # The option is named, also by a command with a required argument (argparse would only say that one is
        # missing).
        named = bool(lines) and "--no-such-option" in lines[0]
        if proc.returncode != 2 or len(lines) != 1 or not lines[0].startswith(f"{prog}: error: ") or not named:
            wrong.append(f"{name}: exit {proc.returncode}, stderr {proc.stderr.strip()[-300:]!r}")
    assert not wrong, "\n".join(wrong)


def one_line_parser() -> OneLineParser:
    parser = OneLineParser(prog="p")
    parser.add_argument("dir")
    parser.add_argument("--run", required=True)
    parser.add_argument("--alpha-us", type=float)
    parser.add_argument("-j", type=int)
    return parser


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),  # not "the following arguments are required"
        (["d", "--run", "r", "--bogus=3"], "unrecognized arguments: --bogus=3"),
        (["--ru"], "argument --run: expected one argument"),  # a prefix of --run is --run
        (["d", "-j4"], "the following arguments are required: --run"),  # -j with its value, no unknown option
        (["d", "--alpha-us", "-5"], "the following arguments are required: --run"),  # -5 is a value
        (["d"], "the following arguments are required: --run"),
    ],
)
def test_an_unknown_option_is_named_before_a_missing_argument(argv, says):
    with pytest.raises(UsageError) as refused:
        one_line_parser().parse_args(argv)
    assert str(refused.value) == says


# (program, its arguments, the start of the message it should refuse them with), one row a mistake. Each was a
# traceback, a hang (codec_contention's ranks), a result of nothing, or a run that failed at the end.
BENCH_REFUSALS = [
    ("bench.memory_soak", ["--every", "0"], "--every must be at least 1, got 0"),
    ("bench.memory_soak", ["--max-steps", "4"], "--max-steps must be at least 101, got 4"),
    ("bench.exposure_coverage", ["--runs", "0"], "--runs must be at least 1, got 0"),
    ("bench.exposure_coverage", ["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
    ("bench.list_search", ["--cases", "0"], "--cases must be at least 1, got 0"),
    ("bench.codec_contention", ["--threads", "0"], "--threads must be at least 1, got 0"),
    ("bench.hook_overhead", ["--blocks", "0"], "--blocks must be at least 1, got 0"),
    ("bench.hook_overhead", ["--out", "/nonexistent/x.jsonl"], "--out: directory '/nonexistent' does not exist"),
    ("bench.small_buckets", ["--caps", "nan"], "--caps 'nan': each cap is a positive number of MiB or 'default'"),
    (
        "bench.exposed_ab",
        ["--conditions", "loopback-quiet", "--model", "bogus"],
        "unknown model 'bogus' for --model",
    ),
    (
        "bench.exposed_ab",
        ["--conditions", "loopback-quiet", "--train-args=--bucket-cap-mb=-1"],
        "--train-args '--bucket-cap-mb=-1': train.py would refuse it: --bucket-cap-mb must be a positive number",
    ),
    (
        "bench.known_answer",
        ["--settings", "nan:fp16"],
        "--settings 'nan:fp16': the cap must be a positive number of MiB or 'default'",
    ),
    ("bench.known_answer", ["--rate-mbit", "inf"], "--rate-mbit must be a positive number of Mbit/s, got inf"),
    ("bench.op_census", ["--model", "bogus"], "unknown model 'bogus' for --model"),
    ("bench.op_census", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("bench.op_census", ["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
    ("bench.op_census", ["--port", "70000"], "--port must be a TCP port, 0 to 65535, got 70000"),
    ("bench.op_census", ["--out", "/dev/null"], "--out: '/dev/null' is a file; give a directory"),
    ("bench.host_profile", ["--model", "bogus"], "unknown model 'bogus' for --model"),
    ("bench.host_profile", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("bench.host_profile", ["--timeout", "nan"], "--timeout must be a positive number of seconds, got nan"),
    ("bench.host_profile", ["--attach-after", "inf"], "--attach-after must be 0 (the whole run) or a number of"),
    ("bench.host_profile", ["--port", "70000"], "--port must be a TCP port, 0 to 65535, got 70000"),
    ("bench.host_profile", ["--out", "/dev/null"], "--out: '/dev/null' is a file; give a directory"),
    (
        "bench.host_profile",
        ["--train-args=--bogus"],
        "--train-args '--bogus' (variant shipped): train.py would refuse it: unrecognized arguments: --bogus",
    ),
    ("bench.hook_overhead", ["--model", "bogus"], "unknown model 'bogus' for --model"),
    ("bench.exposure_coverage", ["--model", "bogus"], "unknown model 'bogus' for --model"),
    (
        "bench.exposure_coverage",
        ["--train-args=--bucket-cap-mb=0"],
        "--train-args '--bucket-cap-mb=0': train.py would refuse it: --bucket-cap-mb must be a positive number",
    ),
    (
        "bench.small_buckets",
        [],
        "start it with torchrun: torchrun --standalone --nproc-per-node 2 -m bench.small_b",
    ),
    ("bench.predict_error", ["--world-sizes", "x"], "--world-sizes takes world sizes such as 2,3,4, not 'x'"),
    ("bench.calibration_cost", ["--pairs", "0"], "--pairs must be at least 1, got 0"),
    (
        "bench.calibration_cost",
        ["--pairs", "1", "--", "--model", "nosuch"],
        "after -- (train.py's arguments): unknown model 'nosuch' for --model",
    ),
    (
        "bench.calibration_cost",
        ["--pairs", "1", "--", "--model", "resnet_tiny", "--max-steps", "4", "--harness", "off"],
        "after --: --harness off writes no summary.json",
    ),
    (
        "bench.calibration_cost",
        ["--pairs", "1", "--", "--model", "resnet_tiny", "--max-steps", "4", "--comm-hook", "none"],
        "after --: --comm-hook none calibrates nothing",
    ),
    (
        "bench.calibration_cost",
        ["--pairs", "1", "--", "--model", "resnet_tiny", "--max-steps", "4", "--calibration-steps", "0"],
        "after --: --calibration-steps 0 would leave the calibrated run uncalibrated too",
    ),
    ("bench.gc_pauses", ["--after-s", "nan", "--", "-m", "this"], "--after-s must be 0 or more seconds, got nan"),
    ("bench.gc_pauses", ["--after-s", "-1", "--", "-m", "this"], "--after-s must be 0 or more seconds, got -1"),
    ("bench.gc_pauses", ["--", "-m", "bench"], "bench is a package with no __main__ module: name a module in it"),
    ("bench.gc_pauses", ["--", "-m", ".bench"], "no such module: .bench"),
    ("bench.gc_pauses", ["--", "README.md"], "README.md is not a Python script: "),
    (
        "bench.tensorboard_screenshots",
        ["--logdir", "README.md"],
        "--logdir: 'README.md' is a file; give a directory",
    ),
    ("bench.tensorboard_screenshots", ["--reuse"], "--reuse takes the runs already in --logdir: give --logdir"),
    (
        "bench.tensorboard_screenshots",
        ["--reuse", "--logdir", "README.md/runs"],  # a path no mkdir can make, as root too
        "--logdir 'README.md/runs' is not a directory (--reuse takes the runs already in it)",
    ),
    (
        "bench.tensorboard_screenshots",
        ["--reuse", "--logdir", "models"],
        "--logdir 'models' holds 0 runs, fewer than the 10 this script makes",
    ),
    ("bench.predict_error", ["--max-bytes", "abc"], "--max-bytes: invalid size 'abc'"),
    (
        "bench.predict_error",
        ["--world-sizes", "2", "--model", "resnet_tiny", "--max-steps", "3", "--max-bytes", "256K"],
        "--max-bytes must be at least 512K (the fit needs two sweep sizes from 256K), got '256K'",
    ),
    (
        "bench.predict_error",
        ["--world-sizes", "2,3", "--model", "resnet_tiny", "--max-steps", "3", "--max-bytes", "512K"],
        "--max-bytes must be at least 1M with several world sizes",
    ),
    (
        "bench.predict_error",
        ["--world-sizes", "2,2", "--model", "resnet_tiny", "--max-steps", "3", "--max-bytes", "1M"],
        "--world-sizes '2,2' names a world size twice",
    ),
    (
        "bench.predict_error",
        ["--world-sizes", "2", "--model", "nosuch", "--max-bytes", "1M"],
        "unknown model 'nosuch' for --model",
    ),
    (
        "bench.predict_error",
        ["--world-sizes", "2", "--model", "resnet_tiny", "--max-steps", "2", "--max-bytes", "1M"],
        "--max-steps must be at least 3, got 2",
    ),
    ("bench.plain_ddp", [], "start it with torchrun: torchrun --standalone --nproc-per-node 1 -m bench.plain_ddp"),
    ("bench.plain_ddp", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("bench.plain_ddp", ["--image-size", "16"], "--image-size 16 is too small; the smallest is 32"),
    (
        "bench.timeline_cost",
        [],
        "start it with torchrun: torchrun --standalone --nproc-per-node 1 -m bench.timeline_cost",
    ),
    ("bench.timeline_cost", ["--model", "nosuch"], "unknown model 'nosuch' for --model"),
    ("bench.gloo_overlap", [], "start it with torchrun: OMP_NUM_THREADS=1 torchrun --standalone"),
]


def bench_refusal(row: tuple[str, list[str], str]) -> str | None:
    """What is wrong with the program's answer to the row's mistake, or None if it refused it as it should."""
    program, args, says = row
    proc = subprocess.run([sys.executable, "-m", program, *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    one_line = proc.stderr.count("\n") == 1
    if proc.returncode == 2 and one_line and proc.stderr.startswith(f"python -m {program}: error: {says}"):
        return None
    return f"{program} {' '.join(args)}: exit {proc.returncode}, stderr {proc.stderr.strip()[-300:]!r}"


def test_a_benchmark_refuses_a_count_or_output_it_cannot_use_before_it_runs():
    """Every row of BENCH_REFUSALS, a few programs at once (most of each one's time is importing torch), every wrong
    answer named."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        wrong = [answer for answer in pool.map(bench_refusal, BENCH_REFUSALS) if answer is not None]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("program", "args", "entry"),
    [
        ("bench.exposed_ab", ["--conditions", "loopback-quiet"], "loopback-quiet-p0-allreduce"),
        ("bench.known_answer", ["--settings", "1:fp16", "--no-sweep"], "r0s0"),
    ],
)
def test_a_benchmark_refuses_a_logdir_that_holds_an_earlier_run(tmp_path, program, args, entry):
    """Its first run would fail on the folder already there (exposed_ab), or end by finding two runs' summaries in
    one folder (known_answer)."""
    earlier = tmp_path / entry / "run" / "v0"
    earlier.mkdir(parents=True)
    (earlier / "summary.json").write_text("{}")
    proc = subprocess.run(
        [sys.executable, "-m", program, *args, "--logdir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    says = f"--logdir {str(tmp_path)!r} already holds {entry} from an earlier run; give a new directory"
    assert proc.returncode == 2 and proc.stderr == f"python -m {program}: error: {says}\n", proc.stderr
