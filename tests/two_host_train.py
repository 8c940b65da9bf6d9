"""Run train.py (or any module) under `torchrun --nnodes 2` across the two namespace hosts of tests/netns.py.

    from tests.netns import two_hosts
    from tests.two_host_train import train_on_both

    with two_hosts(rate_mbit=1000) as hosts:
        procs, run_dir = train_on_both(hosts, ["--model", "resnet_tiny", "--max-steps", "10"], tmp_path / "runs")
    assert all(p.returncode == 0 for p in procs), procs[0].stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())

Host i runs node i with one rank (so rank i), rendezvous on host 0's address, pinned to its own half of the
machine's cores: a real host has cores of its own, and train.py sizes its thread pool to the cores it may run
on. Unpinned, each rank ran as many threads as the whole machine has cores, and on this quiet 2-core machine
sleep_chain's fp32 step at a 1 MiB cap took 916 ms instead of 745–758, its compute-only forward + backward 835
ms instead of about 685 (docs/BENCHMARKS.md, "Issue 13"). Both torchruns start at once and are waited for
together; whatever is still running at the timeout is killed. Several runs inside one
`two_hosts` block each need a port of their own: the last run's may still be in TIME_WAIT.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.common.names import SUMMARY_FILE
from tests.netns import TwoHosts

REPO = Path(__file__).resolve().parents[1]
TRAIN_PY = REPO / "train.py"
MASTER_PORT = 29511  # inside a fresh namespace nothing else listens: no free-port race
RUN_TIMEOUT_S = 150.0
# Set by an outer launcher (a test run under torchrun, say); the inner torchrun must choose its own.
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def host_cpus(node: int) -> list[int]:
    """The cores host `node` runs on: its half of those this process may use (both share one core if that is
    all there is)."""
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    return (cpus[:half] if node == 0 else cpus[half:]) or cpus


def torchrun_command(hosts: TwoHosts, node: int, port: int, args: list[str]) -> list[str]:
    """`torchrun --nnodes 2` for node `node` (one rank), run inside that host's namespace and on its own cores
    (host_cpus); `args` is what torchrun runs: a script and its arguments, or "-m" and a module."""
    return [
        *hosts.exec_args(node),
        "taskset", "--cpu-list", ",".join(map(str, host_cpus(node))),
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
        "--master-addr", hosts.addresses[0], "--master-port", str(port),
        *args,
    ]  # fmt: skip


def node_env(hosts: TwoHosts, node: int) -> dict[str, str]:
    """This process's environment for host `node`: gloo bound to its veth end, no outer launcher's variables."""
    return {k: v for k, v in hosts.env(node).items() if k not in LAUNCHER_VARS}


def run_on_both(
    hosts: TwoHosts, args: list[str], port: int = MASTER_PORT, timeout_s: float = RUN_TIMEOUT_S
) -> list[subprocess.CompletedProcess]:
    """torchrun `args` on both hosts at once; both finished processes (text output), host 0's first."""
    procs = [
        subprocess.Popen(
            torchrun_command(hosts, node, port, args),
            cwd=REPO,
            env=node_env(hosts, node),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout_s)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def train_on_both(
    hosts: TwoHosts, train_args: list[str], logdir: Path, port: int = MASTER_PORT, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[list[subprocess.CompletedProcess], Path | None]:
    """train.py with `train_args` and `--logdir logdir` on both hosts; the finished processes and the run
    directory that holds rank 0's summary.json (None when the run left none).

    `logdir` must hold no other run: the run directory is found as the one summary.json under it.
    """
    procs = run_on_both(hosts, [str(TRAIN_PY), *train_args, "--logdir", str(logdir)], port, timeout_s)
    summaries = sorted(Path(logdir).glob(f"*/*/{SUMMARY_FILE}"))  # <logdir>/<run name>/<version>/
    if len(summaries) > 1:
        raise ValueError(f"{logdir} holds {len(summaries)} runs: give each run a --logdir of its own")
    return procs, summaries[0].parent if summaries else None


def run_schedule_on_two_hosts(
    schedule: list[tuple[int, dict[str, str]]],
    model: str,
    logdir: Path,
    train_args: list[str],
    rate_mbit: float,
    timeout_s: float = RUN_TIMEOUT_S,
) -> list[str]:
    """harness.grid's schedule, each run on two fresh namespace hosts over a tbf link of `rate_mbit` Mbit/s (one
    rank each): the same run names and logs/ as `harness.grid.run_schedule`, so its readers find the runs. The
    names of the runs that failed."""
    from harness import grid
    from tests.netns import two_hosts

    failed = []
    with two_hosts("hxgr", rate_mbit=rate_mbit) as hosts:
        for i, (repeat, config) in enumerate(schedule):
            name = grid.run_name(model, config)
            script_and_args = grid.build_command([], model, config, logdir, train_args)[1:]  # no interpreter
            print(f"[{i + 1}/{len(schedule)}] {name} (repeat {repeat}) on two hosts, {rate_mbit:g} Mbit/s", flush=True)
            procs = run_on_both(hosts, script_and_args, MASTER_PORT + i, timeout_s)  # a port a run: TIME_WAIT
            log = "\n".join(f"## host {n}\n{p.stdout}\n{p.stderr}" for n, p in enumerate(procs))
            (logdir / "logs" / f"{name}-repeat{repeat}.log").write_text(log)
            if any(p.returncode != 0 for p in procs):
                failed.append(name)
    return failed
