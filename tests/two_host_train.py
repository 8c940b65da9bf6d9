"""Run train.py (or any module) under `torchrun --nnodes N` across the namespace hosts of tests/netns.py: the two
of `two_hosts`, or the N of `switched_hosts`.

    from tests.netns import two_hosts
    from tests.two_host_train import train_on_hosts

    with two_hosts(rate_mbit=1000) as hosts:
        procs, run_dir = train_on_hosts(hosts, ["--model", "resnet_tiny", "--max-steps", "10"], tmp_path / "runs")
    assert all(p.returncode == 0 for p in procs), procs[0].stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())

Host i runs node i with one rank (so rank i), rendezvous on host 0's address, pinned to its own share of the
machine's cores (with more hosts than cores, host i shares core i mod cores): a real host has cores of its own,
and train.py sizes its thread pool to the cores it may run on. Unpinned, each rank ran as many threads as the
whole machine has cores, and on this quiet 2-core machine sleep_chain's fp32 step at a 1 MiB cap took 916 ms
instead of 745–758, its compute-only forward + backward 835 ms instead of about 685 (docs/BENCHMARKS.md, "Issue
13"). All torchruns start at once and are waited for together; whatever is still running at the timeout is
killed. Several runs on one set of hosts each need a port of their own: the last run's may still be in TIME_WAIT.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from harness.common.names import SUMMARY_FILE
from tests.netns import Hosts

REPO = Path(__file__).resolve().parents[1]
TRAIN_PY = REPO / "train.py"
MASTER_PORT = 29511  # inside a fresh namespace nothing else listens: no free-port race
RUN_TIMEOUT_S = 150.0
# Set by an outer launcher (a test run under torchrun, say); the inner torchrun must choose its own.
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def host_cpus(node: int, nodes: int = 2) -> list[int]:
    """The cores host `node` of `nodes` runs on: its share of those this process may use, or, with fewer cores
    than hosts, core `node` mod the cores (so hosts share a core rather than all of them)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < nodes:
        return [cpus[node % len(cpus)]]
    share = len(cpus) // nodes
    return cpus[node * share : len(cpus) if node == nodes - 1 else (node + 1) * share]


def torchrun_command(hosts: Hosts, node: int, port: int, args: list[str]) -> list[str]:
    """`torchrun --nnodes N` for node `node` (one rank), run inside that host's namespace and on its own cores
    (host_cpus); `args` is what torchrun runs: a script and its arguments, or "-m" and a module."""
    nodes = len(hosts.namespaces)
    return [
        *hosts.exec_args(node),
        "taskset", "--cpu-list", ",".join(map(str, host_cpus(node, nodes))),
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(nodes), "--node-rank", str(node), "--nproc-per-node", "1",
        "--master-addr", hosts.addresses[0], "--master-port", str(port),
        *args,
    ]  # fmt: skip


def node_env(hosts: Hosts, node: int) -> dict[str, str]:
    """This process's environment for host `node`: gloo bound to its veth end, no outer launcher's variables."""
    return {k: v for k, v in hosts.env(node).items() if k not in LAUNCHER_VARS}


class HostsTimedOut(subprocess.TimeoutExpired):
    """torchrun was still running on some host at the limit. Carries every host's output up to the kill, which its
    message ends with: a hang in CI is otherwise a bare timeout that says nothing of where the hosts were."""

    def __init__(self, cmd: list[str], timeout: float, results: list[subprocess.CompletedProcess]) -> None:
        super().__init__(cmd, timeout)
        self.results = results

    def __str__(self) -> str:
        return f"{super().__str__()}; each host's output until it was killed:\n{hosts_output(self.results, 2000)}"


def hosts_output(results: list[subprocess.CompletedProcess], tail: int | None = None) -> str:
    """Each host's exit code, stdout and stderr (the last `tail` characters of each, if given), host by host."""

    def last(text: str) -> str:
        return text[-tail:] if tail else text

    return "\n".join(
        f"## host {node} (exit {proc.returncode})\n{last(proc.stdout)}\n{last(proc.stderr)}"
        for node, proc in enumerate(results)
    )


def run_on_hosts(
    hosts: Hosts, args: list[str], port: int = MASTER_PORT, timeout_s: float = RUN_TIMEOUT_S
) -> list[subprocess.CompletedProcess]:
    """torchrun `args` on every host at once; the finished processes (text output), in host order. Each host's
    output goes to a file of its own, so no host blocks on a pipe that is not being read; at `timeout_s` after
    the start, every host still running is killed and HostsTimedOut (a subprocess.TimeoutExpired) raised, with
    what each host printed until then."""
    with contextlib.ExitStack() as stack:
        new_file = functools.partial(tempfile.TemporaryFile, "w+")
        outputs = [(stack.enter_context(new_file()), stack.enter_context(new_file())) for _ in hosts.namespaces]
        procs = [
            subprocess.Popen(
                torchrun_command(hosts, node, port, args),
                cwd=REPO,
                env=node_env(hosts, node),
                stdout=out,
                stderr=err,
                text=True,
            )
            for node, (out, err) in enumerate(outputs)
        ]
        deadline = time.monotonic() + timeout_s
        timed_out = False
        try:
            for proc in procs:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        results = []
        for proc, files in zip(procs, outputs, strict=True):
            text = []
            for file in files:
                file.seek(0)
                text.append(file.read())
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, *text))
        if timed_out:
            raise HostsTimedOut(procs[0].args, timeout_s, results)
        return results


def train_on_hosts(
    hosts: Hosts, train_args: list[str], logdir: Path, port: int = MASTER_PORT, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[list[subprocess.CompletedProcess], Path | None]:
    """train.py with `train_args` and `--logdir logdir` on every host; the finished processes and the run
    directory that holds rank 0's summary.json (None when the run left none).

    `logdir` must hold no other run: the run directory is found as the one summary.json under it.
    """
    procs = run_on_hosts(hosts, [str(TRAIN_PY), *train_args, "--logdir", str(logdir)], port, timeout_s)
    summaries = sorted(Path(logdir).glob(f"*/*/{SUMMARY_FILE}"))  # <logdir>/<run name>/<version>/
    if len(summaries) > 1:
        raise ValueError(f"{logdir} holds {len(summaries)} runs: give each run a --logdir of its own")
    return procs, summaries[0].parent if summaries else None


@contextlib.contextmanager
def shaped_hosts(nodes: int, switched: bool, rate_mbit: float, prefix: str) -> Iterator[Hosts]:
    """`nodes` namespace hosts with links of `rate_mbit` Mbit/s: behind one switch (netns.switched_hosts), or, for
    two hosts not `switched`, a veth pair between them (netns.two_hosts)."""
    from tests.netns import switched_hosts, two_hosts

    if not switched and nodes != 2:
        raise ValueError(f"{nodes} hosts need a switch: a veth pair joins two")
    with switched_hosts(nodes, prefix, rate_mbit) if switched else two_hosts(prefix, rate_mbit) as hosts:
        yield hosts


def run_schedule_on_hosts(
    schedule: list[tuple[int, dict[str, str]]],
    model: str,
    logdir: Path,
    train_args: list[str],
    rate_mbit: float,
    nodes: int = 2,
    switched: bool = False,
    timeout_s: float = RUN_TIMEOUT_S,
) -> list[str]:
    """harness.grid's schedule, each run on `nodes` fresh namespace hosts (shaped_hosts) with links of `rate_mbit`
    Mbit/s, one rank each: the same run names and logs/ as `harness.grid.run_schedule`, so its readers find the
    runs. The names of the runs that failed."""
    from harness import grid

    failed = []
    where = f"{nodes} hosts{' behind a switch' if switched else ''}, {rate_mbit:g} Mbit/s"
    with shaped_hosts(nodes, switched, rate_mbit, "hxgr") as hosts:
        for i, (repeat, config) in enumerate(schedule):
            name = grid.run_name(model, config)
            script_and_args = grid.build_command([], model, config, logdir, train_args)[1:]  # no interpreter
            print(f"[{i + 1}/{len(schedule)}] {name} (repeat {repeat}) on {where}", flush=True)
            log_path = logdir / "logs" / f"{name}-repeat{repeat}.log"
            try:
                procs = run_on_hosts(hosts, script_and_args, MASTER_PORT + i, timeout_s)  # a port a run: TIME_WAIT
            except HostsTimedOut as hung:  # one hung run is a failed run, not the end of the schedule
                log_path.write_text(
                    f"killed: still running {timeout_s:g} s after it started\n{hosts_output(hung.results)}"
                )
                failed.append(name)
                continue
            log_path.write_text(hosts_output(procs))
            if any(p.returncode != 0 for p in procs):
                failed.append(name)
    return failed
