"""Command line and settings of a training run: one typed dataclass, checked before any process starts.

Defaults that depend on the machine ("auto") are resolved here, in one place, from the launcher's
environment and the devices present, so every rank derives the same settings.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.common import dist_env
from harness.common.cli import DefaultsHelpFormatter, OneLineParser, UsageError, check_writable
from harness.common.names import HOOK_NAMES
from harness.common.run_identity import workload_hash
from harness.train.calibration import DEFAULT_BLOCK_STEPS, DEFAULT_EVERY, TIMELINE_STEPS, Calibration

PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true")
ACCELERATORS = ("auto", "cpu", "gpu")
# --comm-hook none: no timed hook at all, DDP's built-in all_reduce (steps are still timed). A choice of train.py
# only, mapped here before any hook is built: the hooks themselves are HOOK_NAMES.
NO_HOOK = "none"
COMM_HOOKS = (*HOOK_NAMES, NO_HOOK)
# --harness off: Lightning alone, the same loop, model and data without the timing callback.
HARNESS_MODES = ("on", "off")
# --loop: what drives the training steps. Lightning Fabric with the harness's dozen-line loop, or Lightning's
# Trainer, whose own loop costs a host-bound step several % (harness/train/fabric_loop.py). Either way DDP,
# precision and the process group are Lightning's, and the same callbacks time the steps.
LOOPS = ("fabric", "trainer")
# torchvision's ImageFolder reads these (its IMG_EXTENSIONS), from DIR/<class>/..., never from DIR itself.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MAX_SEED = 2**62  # seed + rank must fit torch's 64-bit seed

# Sized so that `python train.py --model resnet50` on a 2-core machine (2 gloo processes) finishes in
# about a minute, and a GPU run is long enough for stable medians.
CPU_DEFAULTS = {"devices": 2, "max_steps": 20, "image_batch": 4, "token_batch": 2}
GPU_DEFAULTS = {"max_steps": 200, "image_batch": 64, "token_batch": 8}


@dataclass
class TrainConfig:
    """A training run's settings. Fields left None are resolved by `resolve()`."""

    model: str = "resnet50"
    """Registered model name (see models/registry.py)."""
    batch_size: int | None = None
    """Samples per device per micro-batch (images, or sequences for token models)."""
    max_steps: int | None = None
    """Optimizer steps to run."""
    precision: str | None = None
    """Lightning precision; default bf16-mixed on GPU, 32-true on CPU."""
    accelerator: str = "auto"
    devices: int | None = None
    """Processes per node. Under torchrun or SLURM, taken from the launcher."""
    num_nodes: int | None = None
    accumulate_grad_batches: int = 1
    bucket_cap_mb: float | None = None
    """DDP bucket cap in MiB; None keeps DDP's default (25, with a 1 MiB first bucket)."""
    gradient_as_bucket_view: bool = True
    """Gradients are DDP's bucket views, zeroed in place between steps. With a comm hook (the harness's timed one)
    DDP otherwise copies every gradient into its bucket and back out each step; with the views it copies none
    (docs/BENCHMARKS.md, 2026-12-07 06:03 UTC: train.py 1.20× the plain loop's speed on 2 gloo ranks with them,
    1.00× without)."""
    static_graph: bool = False
    comm_hook: str = "allreduce"
    """A timed hook (HOOK_NAMES), or "none": DDP's built-in all_reduce, untimed; steps are still timed."""
    powersgd_rank: int = 1
    """PowerSGD's matrix approximation rank."""
    image_size: int | None = None
    seq_len: int | None = None
    data_dir: str | None = None
    """An ImageFolder to read instead of synthetic images."""
    channels_last: bool | None = None
    """Image models in channels-last layout; default on for GPUs."""
    seed: int = 0
    cpu_threads: int | None = None
    """Intra-op threads of each rank; None: on the CPU, the cores this process may use divided by the ranks on this
    host (on a GPU, torch's own default). Fixed, each rank computes alike at any world size on a host with a core
    per thread: what a prediction of other world sizes from one run assumes (harness.advise --world-size)."""
    logdir: str = "runs"
    run_name: str | None = None
    timeout_s: float = 600.0
    """Bound on the rendezvous and every collective (gloo raises; NCCL's watchdog aborts)."""
    calibration_steps: int = DEFAULT_BLOCK_STEPS
    """Compute-only steps after warm-up (no communication in backward, gradients averaged after it); 0: off."""
    calibration_every: int = DEFAULT_EVERY
    """After that block, one compute-only step every this many steps, so drift cannot bias it; 0: the block only."""
    gather_every: int = 50
    """Gather every rank's times every this many steps, to log the skew across ranks; 0: never."""
    harness: str = "on"
    """"off": Lightning alone (the same loop, model and data; no timing callback, hook, events or summary)."""
    loop: str = "fabric"
    """What drives the training steps (LOOPS): Lightning Fabric and the harness's own loop, or Lightning's Trainer."""
    log_every: int = 1
    """Rank 0 writes the per-step scalars of every this many steps only; summary.json still uses every step."""
    progress_bar: bool = True
    resolve_thread: bool = False
    """Resolve and log each step on the harness's own thread while backward runs; False: on the training loop's
    thread, between steps. Off by default: on the CPU the loop's thread runs backward itself and the thread only
    competes with it for cores; on an H200 at resnet50 batch 32 (a step the host bounds) train.py was 13 % slower
    with it in 3 of 3 rotations, and at batch 128 no faster (docs/BENCHMARKS.md, 2026-12-06 23:04)."""
    window_start: int | None = None
    """Wall and CPU time per step are reported from the start of this step to the start of the last one; None:
    the first step after warm-up and the calibration block (set by resolve())."""
    launcher: str = "none"
    """Set by resolve(): torchrun, slurm or none."""

    def __post_init__(self) -> None:
        from models import get_model_spec

        get_model_spec(self.model)  # raises a UsageError listing the names
        _check_choice("--precision", self.precision, PRECISIONS, allow_none=True)
        _check_choice("--accelerator", self.accelerator, ACCELERATORS)
        _check_choice("--loop", self.loop, LOOPS)
        _check_choice("--comm-hook", self.comm_hook, COMM_HOOKS)
        _check_choice("--harness", self.harness, HARNESS_MODES)
        for flag, value in (
            ("--batch-size", self.batch_size),
            ("--max-steps", self.max_steps),
            ("--devices", self.devices),
            ("--num-nodes", self.num_nodes),
            ("--accumulate-grad-batches", self.accumulate_grad_batches),
            ("--powersgd-rank", self.powersgd_rank),
            ("--image-size", self.image_size),
            ("--seq-len", self.seq_len),
            ("--log-every", self.log_every),
            ("--cpu-threads", self.cpu_threads),
        ):
            if value is not None and value < 1:
                raise UsageError(f"{flag} must be a positive integer, got {value}")
        for flag, value in (
            ("--calibration-steps", self.calibration_steps),
            ("--calibration-every", self.calibration_every),
            ("--gather-every", self.gather_every),
            ("--window-start", self.window_start),
        ):
            if value is not None and value < 0:
                raise UsageError(f"{flag} must be 0 or more, got {value}")
        if self.bucket_cap_mb is not None and not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise UsageError(f"--bucket-cap-mb must be a positive number of MiB, got {self.bucket_cap_mb}")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise UsageError(f"--timeout must be a positive number of seconds, got {self.timeout_s}")
        if not 0 <= self.seed < MAX_SEED:
            raise UsageError(f"--seed must be an integer from 0 to 2**62, got {self.seed}")
        if self.harness == "off" and self.comm_hook not in ("allreduce", NO_HOOK):
            raise UsageError(
                f"--comm-hook {self.comm_hook} needs the harness: with --harness off DDP runs its built-in all_reduce"
            )
        if self.data_dir is not None:
            _check_image_folder(self.data_dir)
        if self.run_name is not None and (self.run_name.strip() in ("", ".", "..") or "/" in self.run_name):
            raise UsageError(
                f"--run-name {self.run_name!r}: give a name, one directory under --logdir (no '/', not '.' or '..')"
            )

    @property
    def use_gpu(self) -> bool:
        return self.accelerator == "gpu"

    @property
    def world_size(self) -> int:
        return (self.devices or 1) * (self.num_nodes or 1)

    def resolve(self, environ: dict[str, str] | None = None) -> TrainConfig:
        """Fill every "auto" field from the launcher and the machine; check they agree."""
        # torch is loaded here, for the checks that need the model and the machine, not at import: an option
        # mistyped is refused by the parse alone (0.2 s on the 2-core machine, against 2-3 s with torch).
        import torch

        from models import get_model_spec

        spec = get_model_spec(self.model)
        launch = dist_env.detect(environ)
        self.launcher = launch.launcher
        has_gpu = torch.cuda.is_available()
        if self.accelerator == "auto":
            self.accelerator = "gpu" if has_gpu else "cpu"
        if self.accelerator == "gpu" and not has_gpu:
            raise UsageError("--accelerator gpu was asked for, but torch sees no CUDA GPU; use --accelerator cpu")
        if launch.launcher != "none":
            if self.devices is not None and self.devices != launch.local_world_size:
                raise UsageError(
                    f"--devices {self.devices} does not match the {launch.launcher} launcher's "
                    f"{launch.local_world_size} processes per node; leave --devices out under a launcher"
                )
            if self.num_nodes is not None and self.num_nodes != launch.num_nodes:
                raise UsageError(
                    f"--num-nodes {self.num_nodes} does not match the {launch.launcher} launcher's "
                    f"{launch.num_nodes} nodes; leave --num-nodes out under a launcher"
                )
            self.devices, self.num_nodes = launch.local_world_size, launch.num_nodes
        else:
            if self.num_nodes not in (None, 1):
                raise UsageError("--num-nodes above 1 needs a launcher: start each node with torchrun or srun")
            self.num_nodes = 1
            if self.devices is None:
                self.devices = torch.cuda.device_count() if self.use_gpu else CPU_DEFAULTS["devices"]
        if self.use_gpu and self.devices > torch.cuda.device_count():
            raise UsageError(
                f"--devices {self.devices} asks for more GPUs than this node has ({torch.cuda.device_count()})"
            )
        defaults = GPU_DEFAULTS if self.use_gpu else CPU_DEFAULTS
        if self.max_steps is None:
            self.max_steps = defaults["max_steps"]
        if self.batch_size is None:
            self.batch_size = defaults["image_batch" if spec.kind == "image" else "token_batch"]
        if self.precision is None:
            self.precision = "bf16-mixed" if self.use_gpu else "32-true"
        if self.channels_last is None:
            self.channels_last = self.use_gpu and spec.kind == "image"
        if spec.kind == "image":
            self.image_size = spec.resolve_image_size(self.image_size)
            if self.seq_len is not None:
                raise UsageError(f"--seq-len applies to token models; {self.model} takes images (--image-size)")
            if self.batch_size == 1:
                _check_batch_norm(spec, self.image_size)
            if self.data_dir is not None:
                _check_enough_images(self.data_dir, self.batch_size, self.world_size)
        else:
            self.seq_len = spec.resolve_seq_len(self.seq_len)
            if self.image_size is not None:
                raise UsageError(f"--image-size applies to image models; {self.model} takes tokens (--seq-len)")
            if self.data_dir is not None:
                raise UsageError(f"--data-dir reads images; {self.model} is a token model")
            if self.channels_last:
                raise UsageError(f"--channels-last applies to image models; {self.model} takes tokens")
        if (
            self.loop == "trainer"
            and self.precision == "16-mixed"
            and self.world_size > 1
            and self.harness == "on"
            and self.comm_hook != NO_HOOK
            and self.calibration_steps > 0
        ):
            # Lightning's MixedPrecision.optimizer_step unscales (finding inf per rank) before on_before_optimizer_step,
            # where a calibration step's gradients are averaged: a rank that found none would apply the averaged
            # inf/NaN gradients (NaN weights) while another skipped. Fabric's loop averages before its scaler steps.
            raise UsageError(
                "--loop trainer with --precision 16-mixed on more than one rank: the Trainer checks each rank's "
                "gradients for inf before the harness averages a calibration step's, so ranks could disagree about "
                "skipping it; use --loop fabric (the default) or --calibration-steps 0"
            )
        if self.window_start is None:
            self.window_start = Calibration(self.calibration_steps, 0, TIMELINE_STEPS).setup_end
        elif self.window_start >= self.max_steps - 1:
            raise UsageError(
                f"--window-start {self.window_start} leaves no step to time: it must be below --max-steps - 1 "
                f"({self.max_steps - 1})"
            )
        if self.run_name is None:
            self.run_name = default_run_name(self)
        check_writable(self.logdir, "--logdir", create=True)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The run's version: its directory under --logdir/<run name>, named by its start time. It is fixed once, by
# the process that starts the ranks (train.py without a launcher) or by rank 0 under torchrun and SLURM, and
# shared through this variable: spawned ranks inherit it, and under a launcher the other ranks take rank 0's
# when the ranks first meet (harness.train.rank). Set it yourself and the run uses that name as it is.
RUN_VERSION_ENV = "COMMBENCH_RUN_VERSION"
MAX_VERSION_SUFFIX = 1000  # runs of one name started in one second; beyond this, something else is wrong


def _start_stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def run_version() -> str:
    """The run's version: the one fixed for this run if there is one, else this process's start time."""
    return os.environ.setdefault(RUN_VERSION_ENV, _start_stamp())


def claim_run_version(run_dir: str | os.PathLike, stamp: str | None = None) -> str:
    """Create the run's version directory under `run_dir` (--logdir/<run name>) and fix its name for this
    run (RUN_VERSION_ENV): the start time (or `stamp`), then -2, -3, ... while another run holds the name.
    os.mkdir fails on an existing directory, atomically, so two runs started in the same second can never
    both have one: each keeps its own summary.json. A version already fixed is used as it is."""
    root = Path(run_dir)
    fixed = os.environ.get(RUN_VERSION_ENV)
    try:
        if fixed:
            (root / fixed).mkdir(parents=True, exist_ok=True)
            return fixed
        root.mkdir(parents=True, exist_ok=True)
        base = stamp or _start_stamp()
        for n in range(1, MAX_VERSION_SUFFIX + 1):
            version = base if n == 1 else f"{base}-{n}"
            try:
                (root / version).mkdir()
            except FileExistsError:
                continue
            os.environ[RUN_VERSION_ENV] = version
            return version
    except OSError as err:
        raise UsageError(f"--logdir: cannot create the run directory in {str(root)!r}: {err.strerror}") from None
    raise UsageError(f"--logdir: {MAX_VERSION_SUFFIX} runs named {root.name!r} started at {base}; give --run-name")


def default_run_name(cfg: TrainConfig) -> str:
    """Short and readable, and unique per workload: the model, the world, the hook and the bucket cap, then the
    hash of every setting that defines the workload (harness.common.run_identity), so two runs that differ in
    anything else (image size, sequence length, batch, precision, data, steps, ...) get names of their own.
    The name is also TensorBoard's trial name and compare's row label, hence no longer: HParams and compare's
    columns show the settings themselves."""
    bucket = "default" if cfg.bucket_cap_mb is None else f"{cfg.bucket_cap_mb:g}"
    hook = f"{cfg.comm_hook}{cfg.powersgd_rank}" if cfg.comm_hook == "powersgd" else cfg.comm_hook
    world = f"{cfg.num_nodes}x{cfg.devices}{'gpu' if cfg.use_gpu else 'cpu'}"
    parts = [cfg.model, world, hook, f"bucket{bucket}", workload_hash(cfg.to_dict())]
    if cfg.harness == "off":
        parts.append("lightning-alone")
    return "-".join(parts)


def _check_choice(flag: str, value: str | None, choices: tuple[str, ...], allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if value not in choices:
        raise UsageError(f"{flag} {value!r} is not known; choose one of: {', '.join(choices)}")


def _class_folders(root: Path) -> list[Path]:
    return sorted(entry for entry in root.iterdir() if entry.is_dir() and not entry.name.startswith("."))


def _images(folder: Path):
    """Image files under `folder`, as ImageFolder finds them (recursively, by suffix)."""
    for dirpath, _, files in os.walk(folder, followlinks=True):
        for name in files:
            if name.lower().endswith(IMAGE_SUFFIXES):
                yield os.path.join(dirpath, name)


def _check_image_folder(path: str) -> None:
    """--data-dir exists and holds at least one image in a class folder (ImageFolder's DIR/<class>/<image>)."""
    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"--data-dir {path!r} is not a directory; give an ImageFolder: DIR/<class>/<image>")
    for folder in _class_folders(root):
        if next(_images(folder), None) is not None:
            return
    loose = next((name for name in os.listdir(root) if name.lower().endswith(IMAGE_SUFFIXES)), None)
    hint = f" (images directly in it, such as {loose!r}, are not read: move them into a class folder)" if loose else ""
    raise UsageError(f"--data-dir {path!r} holds no images in class folders{hint}; layout: DIR/<class>/<image>")


def _check_enough_images(path: str, batch_size: int, world_size: int) -> None:
    """One optimizer step reads batch × world size images (drop_last): the folder must hold at least that many.
    Counting stops there, so a large dataset is not walked to the end."""
    need = batch_size * world_size
    found = 0
    for folder in _class_folders(Path(path)):
        for _ in _images(folder):
            found += 1
            if found >= need:
                return
    raise UsageError(
        f"--data-dir {path!r} holds {found} images, fewer than one step needs: --batch-size {batch_size} × "
        f"{world_size} ranks = {need}; use --batch-size {max(1, found // world_size)} or less, or more images"
    )


class _TooSmall(Exception):
    def __init__(self, layer: str, shape: tuple[int, ...]):
        super().__init__(layer)
        self.layer, self.shape = layer, shape


def _check_batch_norm(spec: Any, image_size: int) -> None:
    """A per-rank batch of 1 fails in training wherever a BatchNorm layer then sees one value per channel (a
    1×1 map). Found by running the model on the meta device: shapes only, no memory and no compute."""
    import torch

    with torch.device("meta"):
        model = spec.build(image_size=image_size)
    norms = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return

    def check(name: str):
        def hook(module: torch.nn.Module, inputs: tuple) -> None:
            x = inputs[0]
            if x.numel() // x.shape[1] <= 1:
                raise _TooSmall(name, tuple(x.shape))

        return hook

    for name, module in norms:
        module.register_forward_pre_hook(check(name))
    model.train()
    try:
        model(torch.empty(1, 3, image_size, image_size, device="meta"))
    except _TooSmall as small:
        shape = "×".join(str(d) for d in small.shape)
        raise UsageError(
            f"--batch-size 1 is too small for {spec.name} at --image-size {image_size}: in training, BatchNorm "
            f"layer {small.layer!r} would see one value per channel (input {shape}); use --batch-size 2 or more, "
            f"or a larger --image-size"
        ) from None


def _default(field_name: str) -> Any:
    """The dataclass default, so the command line and TrainConfig can never disagree."""
    return TrainConfig.__dataclass_fields__[field_name].default


class _ModelNames:
    """The registered model names, for --model's help: the registry (and torch with it) is loaded only when the
    help is printed, not for every parse."""

    def __str__(self) -> str:
        from models import MODEL_NAMES

        return ", ".join(MODEL_NAMES)


class _ModelOption(argparse._StoreAction):
    """--model, whose help names the registered models (%(model_names)s, filled in when the help is printed). Set
    on the action as it is made, so that an argparse that checks help strings as options are added finds it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model_names = _ModelNames()


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="train.py",
        description="Train a real model with Lightning DDP and time every bucketed gradient all_reduce.",
        formatter_class=DefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--model", action=_ModelOption, default=_default("model"), help="one of: %(model_names)s")
    add(
        "--batch-size",
        type=int,
        help="samples per device per micro-batch (default: 4 images / 2 sequences on CPU, 64 / 8 on GPU)",
    )
    add("--max-steps", type=int, help="optimizer steps (default: 20 on CPU, 200 on GPU)")
    add("--precision", help=f"one of: {', '.join(PRECISIONS)} (default: bf16-mixed on GPU, 32-true on CPU)")
    add("--accelerator", default=_default("accelerator"), help=f"one of: {', '.join(ACCELERATORS)}")
    add("--devices", type=int, help="processes per node (default: from torchrun/SLURM, all GPUs, or 2 on CPU)")
    add("--num-nodes", type=int, help="nodes (default: from torchrun/SLURM, else 1)")
    add(
        "--accumulate-grad-batches",
        type=int,
        default=_default("accumulate_grad_batches"),
        help="micro-batches per optimizer step (DDP communicates once per step)",
    )
    add("--bucket-cap-mb", type=float, help="DDP bucket cap in MiB (default: DDP's 25)")
    add(
        "--gradient-as-bucket-view",
        action=argparse.BooleanOptionalAction,
        default=_default("gradient_as_bucket_view"),
        help="gradients alias DDP's bucket buffers and are zeroed in place, so no step copies them into the buckets "
        "and back (default: on)",
    )
    add("--static-graph", action="store_true", help="tell DDP the graph does not change between steps")
    add(
        "--comm-hook",
        default=_default("comm_hook"),
        help=f"one of: {', '.join(COMM_HOOKS)} (none: no timed hook, DDP's built-in all_reduce; steps are still "
        "timed, communication and exposed time are not measured)",
    )
    add("--powersgd-rank", type=int, default=_default("powersgd_rank"), help="PowerSGD's matrix approximation rank")
    add("--image-size", type=int, help="image side for image models (default: the model's, 224 for torchvision)")
    add("--seq-len", type=int, help="sequence length for token models (default: the model's)")
    add("--data-dir", help="an ImageFolder of real images instead of synthetic ones")
    add(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="channels-last memory format for image models (default: on for GPU)",
    )
    add(
        "--seed",
        type=int,
        default=_default("seed"),
        help="seed for weights; each rank's synthetic data uses seed + rank",
    )
    add(
        "--cpu-threads",
        type=int,
        help="intra-op threads of each rank (default on CPU: the cores this process may use divided by the ranks "
        "on this host); fixed, each rank computes alike at any world size, given a core per thread",
    )
    add("--logdir", default=_default("logdir"), help="TensorBoard log root")
    add(
        "--run-name",
        help="run directory under --logdir (default: model, world, hook, bucket cap and a hash of the workload's "
        "settings, e.g. resnet50-1x2cpu-allreduce-bucketdefault-1a2b3c)",
    )
    add(
        "--timeout",
        dest="timeout_s",
        type=float,
        default=_default("timeout_s"),
        help="seconds bounding the rendezvous and every collective: a rank that loses a peer stops within it",
    )
    add(
        "--calibration-steps",
        type=int,
        default=_default("calibration_steps"),
        help="steps after warm-up whose backward skips communication, to time the compute-only step for "
        "exposed communication; their gradients are averaged after backward, so they train (0: off)",
    )
    add(
        "--calibration-every",
        type=int,
        default=_default("calibration_every"),
        help="then one such step every N steps, so drift over the run cannot bias exposed time (0: none)",
    )
    add(
        "--gather-every",
        type=int,
        default=_default("gather_every"),
        help="gather all ranks' times every N steps for skew (0: never)",
    )
    add(
        "--log-every",
        type=int,
        default=_default("log_every"),
        help="rank 0 writes the per-step TensorBoard scalars of every N-th step only (summary.json and the "
        "end-of-run table still use every step)",
    )
    add(
        "--progress-bar",
        action=argparse.BooleanOptionalAction,
        default=_default("progress_bar"),
        help="the progress bar (refreshed at most every 0.5 s)",
    )
    add(
        "--resolve-thread",
        action=argparse.BooleanOptionalAction,
        default=_default("resolve_thread"),
        help="resolve and log each step on a thread of the harness's own while backward runs (--no-resolve-thread: "
        "on the training loop's thread, between steps, the default)",
    )
    add(
        "--harness",
        default=_default("harness"),
        help="on, or off: Lightning alone (the same loop, model and data without the timing callback, its "
        "hook, events and summary.json); prints the step count and the time per step only",
    )
    add(
        "--loop",
        default=_default("loop"),
        help="what drives the training steps: fabric (Lightning Fabric and a plain step loop, the cheaper on a "
        "host-bound step) or trainer (Lightning's Trainer); the same DDP, hook and measurements either way",
    )
    add(
        "--window-start",
        type=int,
        help="report wall and CPU time per step from the start of this step to the start of the last one "
        "(default: the first step after warm-up and the calibration block, 2 + --calibration-steps)",
    )
    return parser


def parse_config(argv: list[str] | None = None, resolve: bool = True) -> TrainConfig:
    """Parse the command line into a checked TrainConfig (raises UsageError on a bad value), resolved against this
    machine as train.py started here without a launcher sees it; `resolve=False` for a command line that another
    machine or a launcher's ranks will run, whose devices this one cannot judge."""
    config = TrainConfig(**vars(build_parser().parse_args(argv)))
    return config.resolve() if resolve else config
