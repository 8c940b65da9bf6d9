"""One rank of the raw sweep from rendezvous to teardown, under any launcher (spawn_local, torchrun, SLURM).

The process group is created here with --timeout, which bounds the rendezvous and every collective (the
backend's own timeout: gloo raises, NCCL's watchdog aborts); the engine bounds every wait for the GPU.
A rank that fails prints one line naming the collective, size, placement, mode, phase, step and rank, and
exits EXIT_FAILED; under torchrun the same line goes to the error file that torchrun's failure report
reads. SIGINT and SIGTERM stop the sweep and exit 128 + the signal (130, 143). Rows already measured stay
in the outputs either way, which end with an `end` record saying how the sweep ended.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist

from harness import dist_env
from harness.dist_env import apply_safe_nccl_env, detect
from harness.local_launch import init_method
from harness.sweep_engine import PROG, GpuWaitTimeout, Interrupted, Plan, Where, first_line, run_sweep

EXIT_WRONG = 1  # the check found wrong elements
EXIT_FAILED = 3  # the sweep was cut short: a collective failed or timed out, or a peer died


class _Signals:
    """SIGINT/SIGTERM: while armed, the first raises Interrupted in the main thread; otherwise (and after the
    first) they are only remembered, so the cleanup they would interrupt (reporting, flushing, destroying
    the process group) still runs."""

    def __init__(self):
        self.received: int | None = None
        self.armed = False
        self.previous = {}

    def install(self) -> _Signals:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            if self.armed:
                self.armed = False
                raise Interrupted(signum)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def run_rank(plan: Plan) -> int:
    """One rank from rendezvous to teardown, under any launcher; returns its exit code.

    The process group is created here with plan.timeout_s, which bounds the rendezvous and every collective.
    0: nothing wrong; EXIT_WRONG: the check found wrong elements; EXIT_FAILED: something failed, a peer died
    or timed out (one line on stderr names the collective, size, phase, step and rank); 128 + N: signal N.
    """
    signals = _Signals().install()
    env = detect()
    where = Where(phase="rendezvous")
    device = torch.device("cuda", env.local_rank) if plan.backend == "nccl" else torch.device("cpu")
    initialised, code, failure = False, EXIT_FAILED, None
    signals.armed = True
    try:
        apply_safe_nccl_env()
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            plan.backend,
            init_method=init_method(),
            rank=env.rank,
            world_size=env.world_size,
            timeout=datetime.timedelta(seconds=plan.timeout_s),
            device_id=device if device.type == "cuda" else None,
        )
        initialised = True
        ok = run_sweep(plan, device, where)
        signals.armed = False
        code = 0 if ok else EXIT_WRONG
    except Interrupted:
        pass  # reported below, with the signal
    except Exception as err:  # a collective failed or timed out, a peer died, the GPU never finished
        failure = err
    signals.armed = False
    if failure is not None:  # reported even if a launcher's SIGTERM came meanwhile: it says more
        code = EXIT_FAILED
        message = f"rank {env.rank}: {where} failed: {first_line(failure)}"
        print(f"{PROG}: {message}", file=sys.stderr, flush=True)
        dist_env.record_failure_for_torchrun(message)
        if isinstance(failure, GpuWaitTimeout):
            # A kernel is stuck on the GPU: destroying the communicator would wait for it. Leave now.
            sys.stdout.flush()
            os._exit(EXIT_FAILED)
    elif signals.received is not None:
        code = 128 + signals.received
        if env.rank == 0:
            kept = f"; rows so far are in {plan.json_path}" if plan.json_path else ""
            name = signal.Signals(signals.received).name
            print(f"{PROG}: rank 0: interrupted by {name} during {where}{kept}", file=sys.stderr, flush=True)
    if initialised:
        dist.destroy_process_group()
    signals.restore()
    return code


def sweep_worker(plan: Plan) -> None:
    """spawn_local's worker (with init_process_group=False): run_rank, its code as the process's exit code."""
    code = run_rank(plan)
    if code:
        raise SystemExit(code)
