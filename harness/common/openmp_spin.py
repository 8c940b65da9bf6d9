"""Whether a CPU rank's OpenMP teams spin beside backward: what the fp16 and bf16 hooks pay on gloo ranks of
several threads.

The compress hooks copy each bucket back in the collective's callback, on one of gloo's worker threads (torch's own
hooks and the harness's alike). Under libgomp, the OpenMP of torch's CPU wheels, each thread that starts a parallel
region gets a team of its own, and with OMP_WAIT_POLICY unset a team's idle threads spin before they sleep. On 4
gloo ranks of 4 intra-op threads (16 cores) the codec on that thread took 16-30 ms beside backward against 0.13-0.17
ms alone (bench.codec_contention), and the fp16 hook at a 1 MiB cap ran 845 ms a step, 327-402 ms with
OMP_WAIT_POLICY=PASSIVE (docs/BENCHMARKS.md, 2026-12-06). A rank of one thread starts no team.

train.py's start-up note and the advisor's note on its fp16/bf16 rows both ask `teams_spin`.
"""

from __future__ import annotations

from collections.abc import Mapping

WAIT_POLICY = "OMP_WAIT_POLICY"
REMEDY = f"{WAIT_POLICY}=PASSIVE"
MEASURED = (
    "at 4 gloo ranks of 4 threads, fp16 at a 1 MiB cap took 845 ms a step, and 327-402 ms with "
    f"{REMEDY} (docs/BENCHMARKS.md, 2026-12-06)"
)


def teams_spin(intra_op_threads: int | None, env: Mapping[str, str]) -> bool:
    """True where a CPU rank of several intra-op threads (None: a number not recorded) runs with OpenMP's idle
    threads spinning: OMP_WAIT_POLICY anything but PASSIVE (OpenMP reads it case-insensitively)."""
    if intra_op_threads is not None and intra_op_threads <= 1:
        return False
    return env.get(WAIT_POLICY, "").strip().upper() != "PASSIVE"


def policy_text(env: Mapping[str, str]) -> str:
    """'OMP_WAIT_POLICY unset', or with its value."""
    return f"{WAIT_POLICY} {env.get(WAIT_POLICY) or 'unset'}"
