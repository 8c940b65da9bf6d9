"""Where this process sits in the distributed world: launcher, ranks, nodes, backend, safe NCCL settings.

torchrun and SLURM are the distributed engines; this module only reads what they set. Without either,
the entry points start their own processes on loopback (the embedded default).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch.distributed as dist

# torch is imported inside the two functions that ask it something, not here: the launchers that only build an
# environment for their children (harness.grid, bench.gc_pauses) then check their arguments without the seconds that
# loading torch takes.

# NVLink multicast (NVLS) stays off: on shared multi-GPU hosts a program using it can take the host's GPUs
# out of service. These are forced in every process we run and in every environment we build for children.
NVLS_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def apply_safe_nccl_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Force NVLink multicast off in `environ` (os.environ by default) and return it."""
    target = os.environ if environ is None else environ
    target.update(NVLS_OFF_ENV)
    return target


def collectives_at_once(group: dist.ProcessGroup | None = None) -> int | None:
    """How many of `group`'s collectives (the default group's if None) can be in flight at once: gloo's worker
    threads, 1 for NCCL; None where the backend does not say (not initialized, another backend, a torch whose
    ProcessGroupGloo has no `options`)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    group = group or dist.distributed_c10d._get_default_group()
    backend = dist.get_backend(group)
    if backend == "nccl":
        return 1
    if backend != "gloo":
        return None
    threads = getattr(getattr(group._get_backend(torch.device("cpu")), "options", None), "_threads", None)
    return threads if isinstance(threads, int) and threads > 0 else None


@dataclass(frozen=True)
class DistEnv:
    """This process's place in the world, as the launcher described it."""

    launcher: str  # "torchrun", "slurm" or "none"
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int


def _int_env(environ: dict[str, str], key: str) -> int:
    return int(environ[key])


def detect(environ: dict[str, str] | None = None) -> DistEnv:
    """Read the launcher's variables. torchrun is recognised by RANK/WORLD_SIZE/LOCAL_RANK, SLURM by
    SLURM_PROCID with more than one task (a plain `salloc` shell with one task counts as no launcher)."""
    env = dict(os.environ if environ is None else environ)
    if all(key in env for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        world = _int_env(env, "WORLD_SIZE")
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        return DistEnv(
            launcher="torchrun",
            rank=_int_env(env, "RANK"),
            local_rank=_int_env(env, "LOCAL_RANK"),
            world_size=world,
            local_world_size=local_world,
            node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", 0))),
            num_nodes=max(1, world // max(1, local_world)),
        )
    if "SLURM_PROCID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        world = _int_env(env, "SLURM_NTASKS")
        nodes = int(env.get("SLURM_NNODES", "1"))
        return DistEnv(
            launcher="slurm",
            rank=_int_env(env, "SLURM_PROCID"),
            local_rank=int(env.get("SLURM_LOCALID", "0")),
            world_size=world,
            local_world_size=int(env.get("SLURM_NTASKS_PER_NODE", str(world // nodes)).split("(")[0]),
            node_rank=int(env.get("SLURM_NODEID", "0")),
            num_nodes=nodes,
        )
    return DistEnv("none", rank=0, local_rank=0, world_size=1, local_world_size=1, node_rank=0, num_nodes=1)


def default_backend() -> str:
    """NCCL where each process has a GPU, gloo otherwise."""
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at `host` now (the OS picks it; another program could still take it first)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def lone_rank_env(master_port: int, run_id: str = "none") -> dict[str, str]:
    """torchrun's variables for rank 0 of a world of one on this host: a program started without torchrun (under a
    profiler, in a bench's own process) then takes the same path it takes under torchrun."""
    return {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RUN_ID": run_id,
    }
