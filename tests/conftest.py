"""Shared test set-up: CPU-only gloo on loopback, and no process group left behind by any test."""

from __future__ import annotations

import os

import pytest
import torch.distributed as dist

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")


@pytest.fixture(autouse=True)
def destroy_leftover_process_group():
    """A test that fails midway must not leave its process group to the next test."""
    yield
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
