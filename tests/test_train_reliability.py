"""train.py when things go wrong, run as a user runs it: bad options, a killed rank (without a launcher and
under torchrun), Ctrl-C, what may appear in its outputs, and memory over a long run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from harness.common import tags
from harness.common.cli import run_cli
from tests.train_runs import HARNESS_COLLECTIVE, STARTED_SESSIONS, default_sighup, measured_steps_upto
from train import main

REPO = Path(__file__).resolve().parents[1]
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "SLURM_PROCID", "SLURM_NTASKS")
TIMEOUT_S = 10  # train.py's --timeout in these tests
SLACK_S = 15  # survivors must be gone within --timeout plus this
# A run that would go on for hours: the tests stop it once it has logged a few steps.
ENDLESS = ["--model", "resnet_tiny", "--max-steps", "1000000", "--timeout", str(TIMEOUT_S)]
SECRET = "do-not-record-me"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "COMMBENCH_RUN_VERSION"}
    return env | {"GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"} | extra


def _image_folder(root: Path, images: int, loose: bool = False) -> Path:
    """`images` small PNGs in DIR/class0/ (or, with `loose`, directly in DIR, where ImageFolder never looks)."""
    folder = root if loose else root / "class0"
    folder.mkdir(parents=True)
    for i in range(images):
        Image.new("RGB", (8, 8)).save(folder / f"{i}.png")
    return root


# ---- bad input: one line, exit 2, nothing started ----------------------------------------------------------

MISTAKES = {
    # names
    "model": (["--model", "resnet5"], "unknown model 'resnet5' for --model; choose one of: convnext_tiny"),
    "precision": (["--precision", "fp8"], "--precision 'fp8' is not known; choose one of: 32-true"),
    "hook": (["--comm-hook", "gzip"], "--comm-hook 'gzip' is not known; choose one of: allreduce"),
    "accelerator": (["--accelerator", "tpu"], "--accelerator 'tpu' is not known; choose one of: auto"),
    "unknown-option": (["--bucket-size", "5"], "unrecognized arguments: --bucket-size 5"),
    # numbers
    "batch": (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    "steps": (["--max-steps", "-3"], "--max-steps must be a positive integer, got -3"),
    "devices": (["--devices", "0"], "--devices must be a positive integer, got 0"),
    "accumulate": (["--accumulate-grad-batches", "0"], "--accumulate-grad-batches must be a positive integer"),
    "bucket-cap": (["--bucket-cap-mb", "nan"], "--bucket-cap-mb must be a positive number of MiB, got nan"),
    "timeout": (["--timeout", "0"], "--timeout must be a positive number of seconds, got 0.0"),
    "timeout-inf": (["--timeout", "inf"], "--timeout must be a positive number of seconds, got inf"),
    "calibration": (["--calibration-steps", "-1"], "--calibration-steps must be 0 or more, got -1"),
    "cpu-threads": (["--cpu-threads", "0"], "--cpu-threads must be a positive integer, got 0"),
    "seed": (["--seed", "-1"], "--seed must be an integer from 0 to 2**62, got -1"),
    "not-a-number": (["--batch-size", "many"], "argument --batch-size: invalid int value: 'many'"),
    "seq-len": (["--model", "gpt_tiny", "--seq-len", "100000"], "--seq-len 100000 is out of range for gpt_tiny"),
    # the batch against the world and the model
    "batch-norm-of-one": (
        ["--model", "resnet50", "--batch-size", "1", "--image-size", "32"],
        "--batch-size 1 is too small for resnet50 at --image-size 32: in training, BatchNorm layer 'layer4.0.bn2'",
    ),
    "too-few-images": (
        ["--model", "resnet_tiny", "--batch-size", "2", "--data-dir", "{few}"],
        "holds 3 images, fewer than one step needs: --batch-size 2 × 2 ranks = 4; use --batch-size 1 or less",
    ),
    # setup
    "gpu-without-gpu": (["--accelerator", "gpu"], "--accelerator gpu was asked for, but torch sees no CUDA GPU"),
    "nodes-without-launcher": (["--num-nodes", "2"], "--num-nodes above 1 needs a launcher"),
    "data-dir-missing": (["--data-dir", "/no/such/images"], "--data-dir '/no/such/images' is not a directory"),
    "data-dir-loose": (["--data-dir", "{loose}"], "holds no images in class folders (images directly in it"),
    "data-dir-tokens": (["--model", "gpt_tiny", "--data-dir", "{few}"], "--data-dir reads images; gpt_tiny is a"),
    "channels-last-tokens": (["--model", "gpt_tiny", "--channels-last"], "--channels-last applies to image models"),
    "image-size-tokens": (["--model", "gpt_tiny", "--image-size", "64"], "--image-size applies to image models"),
    "logdir-unwritable": (["--logdir", "/proc/runs"], "--logdir '/proc/runs' cannot be written"),
    "logdir-under-file": (["--logdir", "/etc/passwd/runs"], "--logdir '/etc/passwd/runs' cannot be written: Not a"),
    "logdir-is-a-file": (["--logdir", "/etc/passwd"], "--logdir: '/etc/passwd' is a file; give a directory"),
    "run-name-escapes": (["--run-name", "../../escape"], "--run-name '../../escape': give a name, one directory"),
    "run-name-nested": (["--run-name", "a/b"], "--run-name 'a/b': give a name, one directory under --logdir"),
    "run-name-empty": (["--run-name", ""], "--run-name '': give a name, one directory under --logdir"),
}
LAUNCHED = {  # a torchrun world that disagrees with the options
    "devices-vs-torchrun": (
        ["--devices", "4"],
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        "--devices 4 does not match the torchrun launcher's 2 processes per node; leave --devices out",
    ),
    "nodes-vs-torchrun": (
        ["--num-nodes", "3"],
        {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
        "--num-nodes 3 does not match the torchrun launcher's 2 nodes",
    ),
}
# One of each kind from the shell (every case runs through the same run_cli; a Python start costs seconds
# on 2 cores, so these run side by side): a name, a number, the batch against the world.
FROM_THE_SHELL = ("model", "timeout-inf", "too-few-images")


@pytest.fixture
def folders(tmp_path) -> dict[str, str]:
    return {
        "few": str(_image_folder(tmp_path / "few", 3)),
        "loose": str(_image_folder(tmp_path / "loose", 2, loose=True)),
    }


def _argv(case: str, folders: dict[str, str], logdir: Path) -> list[str]:
    return [arg.format(**folders) for arg in MISTAKES[case][0]] + (
        [] if "--logdir" in MISTAKES[case][0] else ["--logdir", str(logdir)]
    )


@pytest.mark.parametrize("case", list(MISTAKES) + list(LAUNCHED))
def test_each_mistake_is_one_line_and_exit_2(case, folders, tmp_path, capsys, monkeypatch):
    for key in LAUNCHER_VARS:
        monkeypatch.delenv(key, raising=False)
    if case in LAUNCHED:
        argv, env, message = LAUNCHED[case]
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        argv = [*argv, "--logdir", str(tmp_path / "runs")]
    else:
        if case == "gpu-without-gpu" and torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        argv, message = _argv(case, folders, tmp_path / "runs"), MISTAKES[case][1]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main(argv), "train.py")
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("train.py: error: "), captured.err
    assert message in captured.err, captured.err
    assert captured.out == ""
    assert not (tmp_path / "runs").exists()  # nothing was started, not even the log directory


def test_mistakes_from_the_shell_start_nothing(folders, tmp_path):
    procs = {
        case: subprocess.Popen(
            [sys.executable, str(REPO / "train.py"), *_argv(case, folders, tmp_path / case)],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in FROM_THE_SHELL
    }
    for case, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case, err)
        assert err.count("\n") == 1 and err.startswith("train.py: error: ") and "Traceback" not in err, (case, err)
        assert MISTAKES[case][1] in err and out == "", (case, err)
        assert not (tmp_path / case).exists()


# ---- a dead rank, an interrupt ------------------------------------------------------------------------------

LAUNCHERS = {
    "standalone": [sys.executable],
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
}
ROLL = re.compile(r"# train\.py: 2 ranks \(gloo\): 0 pid (\d+) on \S+ cpu, 1 pid (\d+) on \S+ cpu")


def start_train(
    tmp_path: Path, launcher: list[str], extra: tuple[str, ...] = (), **env: str
) -> tuple[subprocess.Popen, Path]:
    """train.py (with `extra` arguments) in a session of its own (a terminal's Ctrl-C reaches its process group),
    stdout to a file."""
    logdir = tmp_path / "runs"
    stdout = open(tmp_path / "stdout.txt", "w")  # noqa: SIM115 (the child writes it; closed with the test)
    proc = subprocess.Popen(
        [*launcher, str(REPO / "train.py"), *ENDLESS, *extra, "--logdir", str(logdir)],
        cwd=tmp_path,
        env=_env(**env),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sighup,
    )
    STARTED_SESSIONS.append(proc)
    stdout.close()
    return proc, logdir


def steps_logged(logdir: Path) -> int:
    for run in logdir.glob("*/*"):
        if list(run.glob("events.out.tfevents.*")):
            acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
            acc.Reload()
            if tags.STEP_MS in acc.Tags()["scalars"]:
                return len(acc.Scalars(tags.STEP_MS))
    return 0


def wait_for_steps(proc: subprocess.Popen, tmp_path: Path, logdir: Path, steps: int = 10) -> list[int]:
    """Once the events on disk hold `steps` steps (10: past the 2 warm-up, 3 calibration and 2 timeline steps), the
    ranks' pids (rank 0 prints them at the start)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        roll = ROLL.search((tmp_path / "stdout.txt").read_text())
        if roll and steps_logged(logdir) >= steps:
            return [int(roll.group(1)), int(roll.group(2))]
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("no steps were logged")


def _finish(proc: subprocess.Popen, within: float) -> tuple[int, str, float]:
    struck_at = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within + 30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err, time.monotonic() - struck_at


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone too, only not yet reaped
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def all_gone(pids: list[int], within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return all(gone(pid) for pid in pids)


def _kept(logdir: Path) -> tuple[dict, EventAccumulator]:
    """The partial summary.json and the events of the one run under `logdir`, both readable."""
    (summary_path,) = logdir.glob("*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    acc = EventAccumulator(str(summary_path.parent), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars(tags.STEP_MS)]
    # Every measured step up to the failure, in order (warm-up and calibration steps are under setup/).
    assert steps and steps == measured_steps_upto(steps[-1])
    assert len(steps) >= 5
    assert summary["completed"] is False and summary["totals"]["steps_measured"] >= 1
    assert "_hparams_/session_start_info" in acc.summary_metadata  # hparams written on the way out
    return summary, acc


# What rank 0 names when its peer vanishes: the step and the collective that failed.
# A launcher's SIGTERM may come first, and is then named first.
FAILED_COLLECTIVE = re.compile(
    r"rank 0: (interrupted by SIGTERM; then )?(step \d+, (gradient all_reduce of bucket \d+ \([\d,]+ B, [\d,]+ "
    r"float32 elements\)|DDP's broadcast of the model's buffers from rank 0 \([\d,]+ B, before the forward\))"
    rf"|{HARNESS_COLLECTIVE}) failed: RuntimeError: "
)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_a_killed_rank_stops_the_others_and_keeps_the_measurements(launcher, tmp_path):
    proc, logdir = start_train(tmp_path, LAUNCHERS[launcher])
    pids = wait_for_steps(proc, tmp_path, logdir)
    os.kill(pids[1], signal.SIGKILL)
    code, err, took = _finish(proc, TIMEOUT_S + SLACK_S)
    assert code != 0 and took < TIMEOUT_S + SLACK_S, (code, took, err[-3000:])
    survivor = next(line for line in err.splitlines() if line.startswith("train.py: rank 0: "))
    summary, _ = _kept(logdir)
    if launcher == "torchrun":
        # torchrun SIGTERMs the survivors once it sees the death: rank 0 may stop for that at a step boundary.
        assert "Root Cause" in err and "SIGKILL" in err, err[-3000:]  # torchrun's own report
        assert FAILED_COLLECTIVE.search(survivor) or "interrupted by SIGTERM at the start of step" in survivor
    else:
        assert "local launch: rank1" in err and "killed by SIGKILL" in err
        assert FAILED_COLLECTIVE.search(survivor), survivor
        assert "Traceback" not in err
    # One line: the summary's reason in the same words, then where that summary is.
    (summary_path,) = logdir.glob("*/*/summary.json")
    assert survivor == f"train.py: {summary['reason']}; what was measured is in {summary_path} (completed: false)"
    assert [r["pid"] for r in summary["ranks"]] == pids
    assert all_gone(pids)


def _listening_addresses(pid: int) -> set[str]:
    """Local addresses of the TCP sockets `pid` listens on (from /proc/net/tcp{,6} and its fds)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.add(fields[1].split(":")[0])
    return addresses


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc/net/tcp{,6} show them


@pytest.mark.slow
@pytest.mark.parametrize("where", [(), ("--resolve-thread",)], ids=["loop-thread", "resolve-thread"])
def test_ctrl_c_keeps_the_measurements_and_leaves_no_rank(tmp_path, where):
    """Also with the steps resolved on the harness's own thread (--resolve-thread), which the interrupted main
    thread may be waiting for."""
    proc, logdir = start_train(tmp_path, LAUNCHERS["standalone"], where, MY_API_TOKEN=SECRET, OMP_WAIT_POLICY="PASSIVE")
    pids = wait_for_steps(proc, tmp_path, logdir)
    # Without a launcher nothing listens beyond loopback: the ranks meet through a file, gloo binds to lo.
    for pid in pids:
        addresses = _listening_addresses(pid)
        assert addresses and addresses <= LOOPBACK, (pid, addresses)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to train.py and every rank
    code, err, took = _finish(proc, SLACK_S)
    assert code == 130 and took < SLACK_S, (code, took, err[-3000:])
    assert "Traceback" not in err
    summary, _ = _kept(logdir)
    # Each rank gets the signal itself: rank 0 stops at a step boundary, or, when its peer reached a boundary first
    # and left a collective, says the signal came first and names what then failed: a step's gradient all_reduce,
    # or a collective of the harness's own (a rank gather, a calibration step's average).
    then_failed = rf"; then (step \d+, .*|{HARNESS_COLLECTIVE}) failed: .*"
    stopped = rf"rank 0: interrupted by SIGINT( at (the start of )?step \d+.*|{then_failed})"
    assert re.fullmatch(stopped, summary["reason"]), summary
    (summary_path,) = logdir.glob("*/*/summary.json")
    assert f"train.py: {summary['reason']}; what was measured is in {summary_path} (completed: false)\n" in err
    assert all_gone(pids)
    # Outputs carry NCCL, TORCH, CUDA, communication and launcher variables only, never the rest.
    run_dir = next(logdir.glob("*/*"))
    for path in run_dir.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path
    allowed = ("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_", "OMP_", "GOMP_", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    assert all(key.startswith((*allowed, "MASTER_")) for key in summary["env"]), summary["env"]
    assert summary["env"]["MASTER_ADDR"] == "127.0.0.1"
    # OpenMP's wait policy moved a CPU run's fp16 hook up to 2.6x; the advisor reads it from here.
    assert summary["env"]["OMP_WAIT_POLICY"] == "PASSIVE"


# ---- memory over a long run -----------------------------------------------------------------------------------

MEMORY_STEPS = 600
MEMORY_GROWTH_LIMIT_MB = 20  # measured about 4 MB from step 100 to 600; 5,000 steps stay under 50 (bench)


@pytest.mark.benchmark
def test_memory_stays_flat_over_a_long_run(tmp_path):
    from bench.memory_soak import soak

    args = ["--model", "resnet_tiny", "--max-steps", str(MEMORY_STEPS), "--logdir", str(tmp_path / "runs")]
    record = soak(args, every=100)
    rank0 = record["ranks"][0]
    assert rank0["rank"] == 0 and (rank0["from_step"], rank0["to_step"]) == (100, MEMORY_STEPS)
    assert rank0["growth_mb"] < MEMORY_GROWTH_LIMIT_MB, rank0
    assert rank0["max_growth_mb"] < MEMORY_GROWTH_LIMIT_MB, rank0
    print(f"\nrank 0 VmRSS growth from step 100 to {MEMORY_STEPS}: {rank0['growth_mb']:+.1f} MB")
