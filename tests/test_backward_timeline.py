"""The measured backward timeline and the codec probe in summary.json (grad_ready.py, codec_probe.py), against
ground truth the harness did not write: DDP's own bucket rebuild and ready order, the registry's model, and
sleeps of known length.

One real train.py run (2 gloo ranks, resnet_tiny, gradient accumulation so the hooks fire on two micro-batches
a step) is shared by the end-to-end checks; the recorder's own checks run in process on small modules.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from harness.analysis.bucket_layout import bucket_limits_bytes
from harness.common.names import SUMMARY_FILE
from harness.train.codec_probe import PROBE_DTYPES, probe_codec, probe_sizes
from harness.train.grad_ready import GradReadyRecorder
from harness.train.stamps import StepStamps
from models import get_model_spec, trainable_parameters
from models.synthetic import sleep_in_backward
from tests.test_exposure import BACKWARD_SLEEP_S
from tests.train_runs import run_train

MODEL = "resnet_tiny"
BUCKET_CAP_MB = 0.1  # five buckets of resnet_tiny's 1.2 MB: several boundaries for the ready order to place
TIMELINE_STEPS = [5, 6]  # after warm-up 0, 1 and the calibration block 2, 3, 4; then measured 7..9
RUN = [
    "--model", MODEL, "--max-steps", "10", "--calibration-steps", "3", "--calibration-every", "0",
    "--accumulate-grad-batches", "2", "--bucket-cap-mb", str(BUCKET_CAP_MB), "--gather-every", "0",
    "--no-progress-bar",
]  # fmt: skip


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    logdir = tmp_path_factory.mktemp("timeline") / "runs"
    proc = run_train(RUN, logdir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = logdir.glob(f"*/*/{SUMMARY_FILE}")
    return json.loads(Path(path).read_text())


def registry_parameters() -> list[tuple[str, torch.nn.Parameter]]:
    """The model's trainable parameters as the run's LightningModule names them (it holds the model as `model`)."""
    with torch.device("meta"):
        model = get_model_spec(MODEL).build()
    return [(f"model.{name}", p) for name, p in model.named_parameters() if p.requires_grad]


def ready_order(timeline: dict) -> list[int]:
    return [p["index"] for p in sorted(timeline["params"], key=lambda p: (p["ready_ms"], p["index"]))]


@pytest.mark.slow
def test_measured_ready_order_rebuilds_ddps_buckets(summary):
    # DDP rebuilt its buckets after step 0 in the order the gradients became ready; the measured order, grouped
    # by torch's own function under the same limits, must give DDP's buckets byte for byte.
    params = [p for _, p in registry_parameters()]
    limits = bucket_limits_bytes(BUCKET_CAP_MB)

    def bucket_bytes(order: list[int]) -> list[int]:
        groups, _ = dist._compute_bucket_assignment_by_size([params[i] for i in order], limits, [], order)
        return [sum(params[i].numel() * params[i].element_size() for i in group) for group in groups]

    ddp = summary["ddp_logging"]
    rebuilt = [int(size) for size in ddp["rebuilt_bucket_sizes"].split(",")]
    order = ready_order(summary["backward_timeline"])
    assert bucket_bytes(order) == rebuilt
    assert bucket_bytes(list(range(len(params)))) != rebuilt, "the check has teeth: registration order differs"
    # DDP also logs the order it saw gradients ready in (its last sampled iteration): the same, index for
    # index, where the reverse of registration order is not (a block's BatchNorm weight and bias swap).
    assert [int(i) for i in ddp["prev_iteration_grad_ready_order_indices"].split(",")] == order
    assert order != list(reversed(range(len(params))))


@pytest.mark.slow
def test_every_parameter_once_ready_within_backward(summary):
    timeline = summary["backward_timeline"]
    assert timeline["time_source"] == "cpu_clock"
    assert timeline["samples"] == len(TIMELINE_STEPS) and timeline["steps"] == TIMELINE_STEPS
    assert summary["calibration_sample_steps"] == [2, 3, 4], "the timeline steps give no compute-only sample"
    expected = registry_parameters()
    assert [(p["index"], p["name"], p["numel"], p["itemsize"]) for p in timeline["params"]] == [
        (index, name, p.numel(), 4) for index, (name, p) in enumerate(expected)
    ]
    assert sum(p["numel"] for p in timeline["params"]) == trainable_parameters(get_model_spec(MODEL).build())
    backward_ms = timeline["backward_ms"]
    assert timeline["forward_ms"] > 0 and backward_ms > 0
    for p in timeline["params"]:
        assert 0 <= p["ready_ms_p10"] <= p["ready_ms"] <= p["ready_ms_p90"], p
        assert p["ready_ms"] <= backward_ms, p
    # The stem's weight is the last gradient of every step, so its median is the median backward.
    ready = {p["name"]: p["ready_ms"] for p in timeline["params"]}
    assert ready["model.stem.0.weight"] == pytest.approx(backward_ms)
    assert max(ready["model.fc.weight"], ready["model.fc.bias"]) < ready["model.stem.0.weight"]
    # One micro-batch of the two is recorded (the last, which synchronises): its forward and backward are about
    # half a compute-only sample, which holds both micro-batches (stamps mixing the two would be nearly all of it).
    one_micro_batch = timeline["forward_ms"] + backward_ms
    assert one_micro_batch < 0.75 * statistics.median(summary["calibration_samples_ms"]), (timeline, summary)


@pytest.mark.slow
def test_codec_probe_grows_with_size(summary):
    probe = summary["codec_probe"]
    assert probe["device"] == "cpu" and probe["reps"] == 5
    total = trainable_parameters(get_model_spec(MODEL).build())
    for name in PROBE_DTYPES:
        points = probe[name]["points"]
        assert [numel for numel, _ in points] == probe_sizes(total), name
        times = [ms for _, ms in points]
        assert all(ms > 0 for ms in times) and times == sorted(times), (name, points)
        assert probe[name]["ms_per_melement"] > 0 and probe[name]["fixed_ms"] >= 0, probe[name]


class TwoLayers(torch.nn.Module):
    """Two linear layers with BACKWARD_SLEEP_S of sleep between them in backward, and FORWARD_SLEEP_S in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(FORWARD_SLEEP_S)
        return self.second(sleep_in_backward(self.first(x), BACKWARD_SLEEP_S))


FORWARD_SLEEP_S = 0.02
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
    ),
]


def recorder_for(module: torch.nn.Module, device: str) -> GradReadyRecorder:
    names = {id(p): name for name, p in module.named_parameters()}  # as hook.make_hook_state builds them
    return GradReadyRecorder(module, names, StepStamps(use_cuda=device == "cuda"))


def train_step(module: torch.nn.Module, recorder: GradReadyRecorder | None, step: int, device: str) -> None:
    x = torch.randn(4, 8, device=device)
    if recorder is not None:
        recorder.begin(step)
        recorder.forward_start()
    loss = module(x).sum()
    if recorder is not None:
        recorder.backward_start()
    loss.backward()
    if recorder is not None:
        recorder.end_backward()


@pytest.mark.parametrize("device", DEVICES)
def test_known_backward_gap_is_measured(device):
    # Backward reaches the second layer, sleeps BACKWARD_SLEEP_S, then reaches the first: the gap between their
    # ready times is the sleep, plus only the first layer's tiny backward.
    module = TwoLayers().to(device)
    recorder = recorder_for(module, device)
    # A step first, as train.py's warm-up: on a GPU the first backward carries CUDA's lazy set-up (114 ms of it
    # fell between the two layers on the H200), which is not the model's timeline.
    train_step(module, None, -1, device)
    for step in range(3):
        train_step(module, recorder, step, device)
    recorder.resolve(upto=2, wait=True)
    timeline = recorder.timeline()
    assert timeline["samples"] == 3 and timeline["steps"] == [0, 1, 2]
    for sample in recorder.samples:
        first, second = sample.ready_ms[:2], sample.ready_ms[2:]
        gap_ms = min(first) - max(second)
        assert BACKWARD_SLEEP_S * 1e3 <= gap_ms < BACKWARD_SLEEP_S * 1e3 + 30, sample
        assert sample.forward_ms >= FORWARD_SLEEP_S * 1e3, sample
    assert [p["name"] for p in timeline["params"]] == ["first.weight", "first.bias", "second.weight", "second.bias"]


def test_hooks_only_in_recorded_steps():
    module = TwoLayers()
    recorder = recorder_for(module, "cpu")
    recorder.begin(0)
    assert all(len(p._backward_hooks) == 1 for p in module.parameters())
    recorder.forward_start()
    recorder.backward_start()
    module(torch.randn(4, 8)).sum().backward()
    recorder.end_backward()
    # A measured step: no hook left on any parameter (None: not even torch's wrapper), and nothing recorded.
    assert all(p._backward_hooks is None and p._post_accumulate_grad_hooks is None for p in module.parameters())
    train_step(module, None, 1, "cpu")
    recorder.resolve(upto=1)
    assert [s.step for s in recorder.samples] == [0]


def test_torch_drops_a_gradient_hook_but_not_a_post_accumulate_one():
    # Why grad_ready.py uses gradient hooks: with the Python dict set to None, torch clears a gradient hook's
    # wrapper, so a backward runs none of it; a post-accumulate hook's wrapper stays and still calls the old dict.
    calls = []
    gradient, post = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    gradient.register_hook(lambda grad: calls.append("gradient"))
    post.register_post_accumulate_grad_hook(lambda param: calls.append("post"))
    gradient._backward_hooks = None
    post._post_accumulate_grad_hooks = None
    (gradient.sum() + post.sum()).backward()
    assert calls == ["post"]


def test_codec_probe_fit_on_larger_buffers():
    # Sizes ×4 apart from 256K elements: the codec's time grows with them on any device. Between neighbours a busy
    # 2-core machine can swap them (0.19 ms at 256K, 0.17 at 1M, 2026-12-06), so the test holds the ends, 16× apart.
    probe = probe_codec(2**22, torch.device("cpu"), world_size=2, reps=3)
    for name in PROBE_DTYPES:
        points = probe[name]["points"]
        assert [n for n, _ in points] == [2**18, 2**20, 2**22]
        assert points[-1][1] > points[0][1], points
        assert probe[name]["ms_per_melement"] > 0
