"""train.py's command line: help, parsing, and a one-line error with exit code 2 for each bad value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.common.cli import UsageError
from harness.common.run_identity import workload_hash
from harness.train.config import TrainConfig, build_parser, default_run_name, parse_config

REPO = Path(__file__).resolve().parent.parent


def run_cli(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_help_lists_options_and_models():
    proc = run_cli(["--help"])
    assert proc.returncode == 0
    for text in ("--model", "--bucket-cap-mb", "--comm-hook", "resnet50", "gpt2-medium", "powersgd"):
        assert text in proc.stdout


def test_empty_argument_list_gives_cpu_defaults(tmp_path):
    cfg = parse_config(["--logdir", str(tmp_path)])
    assert cfg.model == "resnet50"
    assert cfg.accelerator == "cpu" and cfg.devices == 2 and cfg.num_nodes == 1
    assert cfg.precision == "32-true" and cfg.image_size == 224 and cfg.comm_hook == "allreduce"
    # The readable settings, then the hash of every setting that defines the workload (test_run_identity.py).
    assert cfg.run_name == f"resnet50-1x2cpu-allreduce-bucketdefault-{workload_hash(cfg.to_dict())}"


def test_cost_switches_default_to_the_full_harness_and_reach_the_settings(tmp_path):
    cfg = parse_config(["--logdir", str(tmp_path)])
    assert (cfg.harness, cfg.log_every, cfg.progress_bar) == ("on", 1, True)
    # The first step after warm-up, the calibration block and the 2 timeline steps.
    assert cfg.window_start == 2 + cfg.calibration_steps + 2
    lean = parse_config(["--logdir", str(tmp_path), "--comm-hook", "none", "--no-progress-bar", "--log-every", "50"])
    assert {k: lean.to_dict()[k] for k in ("comm_hook", "progress_bar", "log_every")} == {
        "comm_hook": "none",
        "progress_bar": False,
        "log_every": 50,
    }
    assert parse_config(["--logdir", str(tmp_path), "--harness", "off"]).run_name.endswith("-lightning-alone")


def test_run_names_differ_with_settings(tmp_path):
    base = parse_config(["--logdir", str(tmp_path)])
    other = parse_config(["--logdir", str(tmp_path), "--bucket-cap-mb", "5", "--comm-hook", "bf16"])
    assert default_run_name(base) != default_run_name(other)
    assert "bucket5" in other.run_name and "bf16" in other.run_name


# Each changes the workload, so the run's name; the first is the issue's own case (names used to omit it).
WORKLOAD_CHANGES = [
    ["--image-size", "64"], ["--batch-size", "8"], ["--max-steps", "30"], ["--precision", "bf16-mixed"],
    ["--accumulate-grad-batches", "2"], ["--no-gradient-as-bucket-view"], ["--static-graph"], ["--channels-last"],
    ["--devices", "1"], ["--comm-hook", "powersgd"], ["--comm-hook", "powersgd", "--powersgd-rank", "2"],
    ["--model", "gpt_tiny"], ["--model", "gpt_tiny", "--seq-len", "32"],
]  # fmt: skip
# ...and these only change how the run is measured or where it is written: the name stays.
MEASUREMENT_CHANGES = [
    "--seed", "3", "--calibration-steps", "4", "--calibration-every", "10", "--gather-every", "0", "--log-every",
    "5", "--no-progress-bar", "--timeout", "30", "--window-start", "8", "--powersgd-rank", "2",
]  # fmt: skip


def test_a_run_name_changes_with_the_workload_and_only_with_it(tmp_path):
    """--data-dir, which needs a folder of images, is in test_run_identity.py with the other settings."""
    base = parse_config(["--model", "resnet_tiny", "--logdir", str(tmp_path)]).run_name
    names = [parse_config(["--model", "resnet_tiny", "--logdir", str(tmp_path), *args]).run_name for args in
             WORKLOAD_CHANGES]  # fmt: skip
    assert len({base, *names}) == len(names) + 1, names
    same = parse_config(["--model", "resnet_tiny", "--logdir", str(tmp_path), *MEASUREMENT_CHANGES])
    assert same.run_name == base


def test_run_names_stay_short(tmp_path):
    """The name is TensorBoard's trial name and compare's row label: the longest model with the longest hook."""
    from models import MODEL_NAMES

    for model in MODEL_NAMES:
        args = ["--model", model, "--comm-hook", "powersgd", "--bucket-cap-mb", "0.25", "--logdir", str(tmp_path)]
        name = parse_config(args).run_name
        assert len(name) <= 48 and name.startswith(f"{model}-1x2cpu-powersgd1-bucket0.25-"), name


def test_launcher_environment_sets_devices_and_nodes(tmp_path):
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1"}
    cfg = TrainConfig(logdir=str(tmp_path)).resolve(env)
    assert (cfg.launcher, cfg.devices, cfg.num_nodes) == ("torchrun", 2, 4)
    with pytest.raises(UsageError, match="--devices 4 does not match"):
        TrainConfig(logdir=str(tmp_path), devices=4).resolve(env)


def test_parser_has_long_flags_only_with_dashes():
    flags = {opt for action in build_parser()._actions for opt in action.option_strings}
    assert all(flag.startswith("--") and "_" not in flag for flag in flags if flag not in ("-h",))


BAD_INPUTS = [
    (["--model", "resnet5"], "--model"),
    (["--batch-size", "0"], "--batch-size"),
    (["--max-steps", "-3"], "--max-steps"),
    (["--precision", "fp8"], "--precision"),
    (["--comm-hook", "gzip"], "--comm-hook"),
    (["--accelerator", "tpu"], "--accelerator"),
    (["--accelerator", "gpu"], "--accelerator gpu"),
    (["--bucket-cap-mb", "0"], "--bucket-cap-mb"),
    (["--model", "resnet50", "--seq-len", "128"], "--seq-len"),
    (["--model", "gpt2", "--seq-len", "4096"], "--seq-len"),
    (["--model", "vit_b_16", "--image-size", "100"], "--image-size"),
    (["--data-dir", "/nonexistent/images"], "--data-dir"),
    (["--num-nodes", "2"], "--num-nodes"),
    (["--batch-size", "many"], "--batch-size"),
    (["--log-every", "0"], "--log-every"),
    (["--harness", "maybe"], "--harness"),
    (["--harness", "off", "--comm-hook", "powersgd"], "--comm-hook"),
    (["--window-start", "-1"], "--window-start"),
    (["--max-steps", "20", "--window-start", "19"], "--window-start"),
    (["--loop", "trainer", "--precision", "16-mixed", "--devices", "2"], "--loop fabric"),
]


@pytest.mark.parametrize(
    "args",
    [
        ["--precision", "16-mixed", "--devices", "2"],  # Fabric's loop averages before its scaler steps
        ["--loop", "trainer", "--precision", "16-mixed", "--devices", "1"],  # one rank: nothing to average
        ["--loop", "trainer", "--precision", "16-mixed", "--devices", "2", "--calibration-steps", "0"],
        ["--loop", "trainer", "--precision", "bf16-mixed", "--devices", "2"],  # no scaler, no inf check
    ],
)
def test_16_mixed_is_refused_only_where_the_trainer_would_check_for_inf_before_averaging(args, tmp_path):
    parse_config([*args, "--logdir", str(tmp_path)])


@pytest.mark.parametrize(("args", "names"), BAD_INPUTS)
def test_bad_input_is_rejected_naming_the_option(args, names, tmp_path):
    """Checked in-process (fast); the subprocess tests below check the exit code and the one line."""
    with pytest.raises(UsageError) as info:  # argparse's own type errors too: the parser raises UsageError
        parse_config([*args, "--logdir", str(tmp_path)])
    assert names in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "args", [["--model", "resnet5"], ["--batch-size", "0"], ["--comm-hook", "gzip"], ["--batch-size", "many"]]
)
def test_bad_input_as_a_user_runs_it_is_one_line_exit_2(args, tmp_path):
    proc = run_cli([*args, "--logdir", str(tmp_path)])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: error:") and args[0] in last


def test_empty_data_dir_is_rejected(tmp_path):
    (tmp_path / "images" / "cat").mkdir(parents=True)
    proc = run_cli(["--data-dir", str(tmp_path / "images"), "--logdir", str(tmp_path)])
    assert proc.returncode == 2
    assert "holds no images" in proc.stderr.strip().splitlines()[-1]


def test_torchrun_devices_mismatch_fails_before_any_process_group(tmp_path):
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    proc = run_cli(["--devices", "4", "--logdir", str(tmp_path)], env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("train.py: error: --devices 4 does not match")
