"""Shared test set-up: CPU-only gloo on loopback, and no process group left behind by any test."""

from __future__ import annotations

import os
import signal

import pytest
import torch.distributed as dist

from tests.train_runs import kill_leftover_sessions

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

# A shell without job control starts a background command (`.ci/run &`) with SIGINT ignored, and every process
# the tests start would inherit that and ignore a Ctrl-C. Python's own handler here is reset to the default by
# exec in each child, so the Ctrl-C tests see what a terminal's user gets.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def kill_leftover_training():
    """A test that fails before it stops its endless train.py must not leave the ranks training (they slowed
    the rest of a suite by half once)."""
    yield
    kill_leftover_sessions()


@pytest.fixture(autouse=True)
def destroy_leftover_process_group():
    """A test that fails midway must not leave its process group to the next test."""
    yield
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
