"""Two simulated hosts on one machine: two network namespaces joined by a veth pair (root only).

    from tests.netns import netns_unavailable, two_hosts

    @pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
    def test_something(tmp_path):
        with two_hosts() as hosts:
            subprocess.run(hosts.exec_args(0) + ["python3", "-m", "..."], env=hosts.env(0))

Host i lives in namespace hosts.namespaces[i], with the interface hosts.interfaces[i] at hosts.addresses[i]
(10.200.0.1 and 10.200.0.2, /24) and its own loopback up. The addresses exist only inside these namespaces,
so traffic between the hosts never leaves the machine, and a port chosen in them cannot collide with
anything outside. Both namespaces (and with them the veth pair) are deleted on the way out, whatever
happened inside. Names carry the test process's pid, so parallel sessions do not collide.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ADDRESSES = ("10.200.0.1", "10.200.0.2")
PREFIX_LEN = 24
IP_TIMEOUT_S = 20


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _checked_ip(*args: str) -> None:
    result = _ip(*args)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


@functools.cache
def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (not root, no `ip`, `ip netns add` refused), or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs the `ip` command (Debian/Ubuntu package iproute2)"
    probe = f"hxprobe{os.getpid()}"
    added = _ip("netns", "add", probe)
    if added.returncode != 0:
        return f"`ip netns add` failed here: {added.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass(frozen=True)
class TwoHosts:
    namespaces: tuple[str, str]
    interfaces: tuple[str, str]
    addresses: tuple[str, str]

    def exec_args(self, host: int) -> list[str]:
        """The prefix that runs a command on host 0 or 1."""
        return ["ip", "netns", "exec", self.namespaces[host]]

    def env(self, host: int, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (os.environ by default) with gloo and NCCL bound to the host's veth interface."""
        env = dict(os.environ if base is None else base)
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = self.interfaces[host]
        return env


@contextmanager
def two_hosts(prefix: str = "hx") -> Iterator[TwoHosts]:
    """Create the two namespaces and the veth pair between them; delete them on exit."""
    tag = f"{prefix}{os.getpid()}"
    hosts = TwoHosts((f"{tag}n0", f"{tag}n1"), (f"{tag}a"[:15], f"{tag}b"[:15]), ADDRESSES)
    try:
        for ns in hosts.namespaces:
            _checked_ip("netns", "add", ns)
        _checked_ip("link", "add", hosts.interfaces[0], "type", "veth", "peer", "name", hosts.interfaces[1])
        for ns, dev, address in zip(hosts.namespaces, hosts.interfaces, hosts.addresses, strict=True):
            _checked_ip("link", "set", dev, "netns", ns)
            _checked_ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", dev)
            _checked_ip("-n", ns, "link", "set", "lo", "up")
            _checked_ip("-n", ns, "link", "set", dev, "up")
        yield hosts
    finally:
        for ns in hosts.namespaces:
            _ip("netns", "del", ns)  # takes its end of the veth pair with it
        _ip("link", "del", hosts.interfaces[0])  # only there if setup failed before the move
