"""What a result was measured on: library versions, devices, and the communication variables in force.

Only variables with these prefixes are recorded, never the whole environment: they change NCCL's and
torch's behaviour, and nothing else in a user's environment belongs in a results file.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import socket
from typing import Any

# torch is imported where it is used: predict and compare write JSON through json_safe without loading it.

# OMP_ and GOMP_ too (from 2026-12-06): OpenMP's settings change a CPU run's communication cost. With OMP_WAIT_POLICY
# unset, the fp16 hook on 4 gloo ranks of 4 threads took 845 ms a step at a 1 MiB cap, and 327-402 ms with it PASSIVE
# (docs/BENCHMARKS.md, 2026-12-06); the advisor reads it from here (harness.common.openmp_spin).
RECORDED_ENV_PREFIXES = ("NCCL_", "TORCH_", "CUDA_", "NVSHMEM_", "GLOO_", "OMP_", "GOMP_")
# The launcher's own variables say how the world was built (ranks, nodes, rendezvous).
RECORDED_LAUNCHER_VARS = (
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_NNODES",
    "SLURM_NTASKS",
)


def recorded_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The NCCL, TORCH, CUDA, NVSHMEM, GLOO, OMP and GOMP variables and the launcher's world variables, sorted."""
    environ = os.environ if environ is None else environ
    return {
        key: environ[key]
        for key in sorted(environ)
        if key.startswith(RECORDED_ENV_PREFIXES) or key in RECORDED_LAUNCHER_VARS
    }


def nccl_version() -> str | None:
    """NCCL's version as 'major.minor.patch', or None where torch was built without NCCL."""
    import torch

    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version)
    return str(version)


def versions() -> dict[str, Any]:
    """Versions of Python, torch, CUDA, NCCL, Lightning and torchvision."""
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl_version() if torch.cuda.is_available() else None,
    }
    # Package metadata, not imports: importing lightning and torchvision just to read a version costs seconds.
    for name in ("lightning", "torchvision", "tensorboard"):
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = None
    return info


def device_names() -> list[str]:
    """Names of the visible GPUs (empty on a CPU-only machine)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def run_info() -> dict[str, Any]:
    """Everything above plus the host name and the time, for a results header or a run summary."""
    import datetime

    return {
        "host": socket.gethostname(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "gpus": device_names(),
        "env": recorded_env(),
        # Which variables "env" could hold: a variable absent from it was unset only if its prefix is here.
        "env_prefixes": list(RECORDED_ENV_PREFIXES),
    }


def json_safe(value: Any) -> Any:
    """`value` with every NaN and infinity replaced by None, through dicts, lists and tuples: JSON has no NaN,
    and a value that was not measured is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value
