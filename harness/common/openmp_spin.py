"""Whether a CPU rank's OpenMP teams can spin beside backward: what the fp16 and bf16 hooks pay on gloo ranks of
several threads, and the one place that says so (train.py's start-up note and the advisor's note both ask here).

The compress hooks copy each bucket back in the collective's callback, on one of gloo's worker threads (torch's own
hooks and the harness's alike). Under libgomp, the OpenMP of torch's CPU wheels, a thread that starts a parallel
region gets a team of its own (bench.codec_contention counts it: 3 more threads at 4 a rank), and with
OMP_WAIT_POLICY unset a team's idle threads spin before they sleep. On 4 ranks of 4 intra-op threads (16 cores),
the codec on a second thread took 16-30 ms beside backward against 0.13-0.17 ms alone, and train.py's fp16 hook at a
1 MiB cap ran 845 ms a step, 327-402 ms with OMP_WAIT_POLICY=PASSIVE (docs/BENCHMARKS.md, 2026-12-06). That gloo's
own threads start such teams is inferred from the hook's code and from their CPU time, not counted. A rank of one
thread starts no team. Only PASSIVE was measured: GOMP_SPINCOUNT, recorded too, is not read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.common.names import COMPRESS_HOOKS

WAIT_POLICY = "OMP_WAIT_POLICY"
REMEDY = f"{WAIT_POLICY}=PASSIVE"
RECORDED_FROM = "OMP_"  # run_info records this prefix from 2026-12-06 on: before, a run's policy is not known
CAUSE = "the compress hooks copy each bucket back on gloo's threads, whose OpenMP teams can spin against backward's"
MEASURED = (
    "at 4 gloo ranks of 4 threads, fp16 at a 1 MiB cap took 845 ms a step, and 327-402 ms with "
    f"{REMEDY} (docs/BENCHMARKS.md, 2026-12-06)"
)
REMEDY_CAVEAT = (
    f"{REMEDY} is worth a try, but measure it: its effect on allreduce there was not resolved, and backward alone "
    "ran slower with it"
)


def teams_spin(intra_op_threads: int | None, env: Mapping[str, str]) -> bool:
    """True where a CPU rank of several intra-op threads (None: a number not recorded) may have OpenMP's idle
    threads spinning: OMP_WAIT_POLICY anything but PASSIVE (OpenMP reads it case-insensitively), or not recorded."""
    if intra_op_threads is not None and intra_op_threads <= 1:
        return False
    return env.get(WAIT_POLICY, "").strip().upper() != "PASSIVE"


def most_intra_op_threads(ranks: Iterable[Mapping[str, Any]]) -> int | None:
    """The most intra-op threads any of `ranks` (summary.json's "ranks", RankRoll's entries) ran with; None where
    none recorded it (a train.py before 2026-12-06)."""
    threads = [rank["intra_op_threads"] for rank in ranks if isinstance(rank.get("intra_op_threads"), int)]
    return max(threads) if threads else None


def spun_hooks(
    hooks: Iterable[str], backend: str, ranks: Sequence[Mapping[str, Any]], env: Mapping[str, str]
) -> list[str]:
    """The compress hooks among `hooks` that pay the spin here: on gloo, every rank on the CPU, teams_spin. Empty:
    no note to give."""
    compressed = [hook for hook in hooks if hook in COMPRESS_HOOKS]
    on_cpu = backend == "gloo" and all(str(rank.get("device", "cpu")).startswith("cpu") for rank in ranks)
    return compressed if on_cpu and teams_spin(most_intra_op_threads(ranks), env) else []


def conditions_text(
    ranks: Iterable[Mapping[str, Any]], env: Mapping[str, str], env_prefixes: Iterable[str] | None
) -> str:
    """'4 intra-op threads a rank, OMP_WAIT_POLICY unset' (or its value; 'not recorded' where the run's env left
    OpenMP's variables out, `env_prefixes` its recorded prefixes, None where it did not say: an older train.py)."""
    most = most_intra_op_threads(ranks)
    threads = "an unrecorded number of" if most is None else str(most)
    if env_prefixes is None or RECORDED_FROM not in env_prefixes:
        policy = f"{WAIT_POLICY} not recorded"
    else:
        policy = f"{WAIT_POLICY} {env.get(WAIT_POLICY) or 'unset'}"
    return f"{threads} intra-op threads a rank, {policy}"
