"""One rank of the raw sweep from rendezvous to teardown, under any launcher (spawn_local, torchrun, SLURM).

The process group is created here with --timeout, which bounds the rendezvous and every collective (the
backend's own timeout: gloo raises, NCCL's watchdog aborts); harness.sweep.clock bounds every wait for the GPU.
A rank that fails prints one line naming the collective, size, placement, mode, phase, step and rank, and
exits EXIT_FAILED; under torchrun the same line goes to the error file that torchrun's failure report
reads. An output that rank 0 can no longer write stops every rank: rank 0's line names the output, the
others' say they stopped with it; a closed stdout (`| head`) stops them quietly with EXIT_BROKEN_PIPE, as
SIGPIPE would. SIGINT, SIGTERM and SIGHUP stop the sweep and exit 128 + the signal (130, 143, 129). Rows
already measured stay in the outputs either way, which end with an `end` record saying how the sweep ended.
"""

from __future__ import annotations

import os
import sys

import torch.distributed as dist

from harness.common.dist_env import apply_safe_nccl_env, detect
from harness.common.failures import (
    Interrupted,
    OutputFailed,
    PeerStopped,
    SignalLatch,
    failure_text,
    quiet_writer_threads,
    report_failure,
    say,
    signal_name,
)
from harness.common.local_launch import exit_with, join_process_group
from harness.common.names import EXIT_BROKEN_PIPE, EXIT_FAILED, EXIT_WRONG
from harness.sweep.clock import GpuWaitTimeout
from harness.sweep.engine import PROG, run_sweep
from harness.sweep.plan import Plan, Where


def run_rank(plan: Plan) -> int:
    """One rank from rendezvous to teardown, under any launcher; returns its exit code.

    The process group is created here with plan.timeout_s, which bounds the rendezvous and every collective.
    0: nothing wrong; EXIT_WRONG: the check found wrong elements; EXIT_FAILED: something failed, a peer died
    or timed out (one line on stderr names the collective, size, phase, step and rank), or an output could not
    be written (the line names it); EXIT_BROKEN_PIPE: stdout was closed; 128 + N: signal N.
    """
    signals = SignalLatch().install()
    quiet_writer_threads()
    rank = detect().rank
    where = Where(phase="rendezvous")
    initialised, code, failure = False, EXIT_FAILED, None
    signals.armed = True
    try:
        apply_safe_nccl_env()
        device = join_process_group(plan.backend, plan.timeout_s)
        initialised = True
        ok = run_sweep(plan, device, where)
        signals.armed = False
        code = 0 if ok else EXIT_WRONG
    except Interrupted:
        pass  # reported below, with the signal
    except Exception as err:  # a collective failed or timed out, a peer died, the GPU never finished
        failure = err
    signals.armed = False
    if isinstance(failure, OutputFailed | PeerStopped):  # every rank stopped together, between rows
        code = EXIT_BROKEN_PIPE if failure.broken_pipe else EXIT_FAILED
        if not failure.broken_pipe:  # the reader of a closed pipe took what it wanted: nothing to say
            report_failure(PROG, f"rank {rank}: {failure}")
    elif failure is not None:  # reported even if a launcher's SIGTERM came meanwhile: it says more
        code = EXIT_FAILED
        report_failure(PROG, f"rank {rank}: {where} failed: {failure_text(failure)}")
        if isinstance(failure, GpuWaitTimeout):
            # A kernel is stuck on the GPU: destroying the communicator would wait for it. Leave now.
            sys.stdout.flush()
            os._exit(EXIT_FAILED)
    elif signals.received is not None:
        code = 128 + signals.received
        if rank == 0:
            kept = f"; rows so far are in {plan.json_path}" if plan.json_path else ""
            name = signal_name(signals.received)
            say(PROG, f"rank 0: interrupted by {name} during {where}{kept}")
    if initialised:
        dist.destroy_process_group()
    signals.restore()
    return code


def sweep_worker(plan: Plan) -> None:
    """spawn_local's worker (with init_process_group=False): run_rank, its code as the process's exit code."""
    exit_with(run_rank(plan))
