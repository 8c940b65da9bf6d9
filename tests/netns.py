"""Simulated hosts on one machine: network namespaces joined by veth links (root only).

    from tests.netns import netns_unavailable, switched_hosts, two_hosts

    @pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
    def test_something(tmp_path):
        with two_hosts() as hosts:
            subprocess.run(hosts.exec_args(0) + ["python3", "-m", "..."], env=hosts.env(0))

Host i lives in namespace hosts.namespaces[i], with the interface hosts.interfaces[i] at hosts.addresses[i]
(10.200.0.1 and 10.200.0.2, /24) and its own loopback up. The addresses exist only inside these namespaces,
so traffic between the hosts never leaves the machine, and a port chosen in them cannot collide with
anything outside. Both namespaces (and with them the veth pair) are deleted on the way out, whatever
happened inside. Names carry the test process's pid, so parallel sessions do not collide.

A link slower than the machine's memory: `two_hosts(rate_mbit=200)`, or `hosts.shape(200)` at any time,
puts a token-bucket filter (`tc qdisc replace ... root tbf`) on both ends of the veth pair, so each
direction carries at most 200 Mbit/s (decimal, as tc counts). `hosts.shaped_rate_mbit(i)` reads the rate
back from `tc qdisc show` on host i (None when that end is not shaped). `shaping_unavailable()` says why
shaping cannot be done here, or None.

More than two hosts: `switched_hosts(n, rate_mbit=800)` gives n namespaces, each joined by its own veth link to
one bridge (a switch) in a namespace of its own, at 10.201.0.1, .2, ... Each link is shaped at both ends (the
host's egress and the switch port's egress toward the host), so every host has a full-duplex link of that rate,
as a cluster's hosts have behind one switch. A ring all_reduce sends each host's data to one neighbour and takes
it from the other, so each link carries one flow each way: the ring's bus bandwidth is the link rate at any n.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ADDRESSES = ("10.200.0.1", "10.200.0.2")
SWITCHED_SUBNET = "10.201.0"  # switched_hosts: host i at .(i + 1)
PREFIX_LEN = 24
IP_TIMEOUT_S = 20

# The token bucket's size and queue (tc-tbf(8)), chosen for rates of 50 to 500 Mbit/s:
# - burst: bytes that may leave at the veth's own speed once the bucket is full. It must hold the largest
#   packet the kernel hands the qdisc: veth does segmentation offload, so TCP gives it 64 KiB super-packets
#   (bigger ones tbf must cut up itself). It must also cover what the rate earns between two of tbf's
#   wake-ups (about a millisecond), or the link idles while the bucket refills and runs below the rate:
#   500 Mbit/s × 1 ms = 62.5 kB. 64 KiB covers both up to 500 Mbit/s; above that the millisecond's worth
#   is used. Against the megabytes of a gradient bucket an unshaped 64 KiB is noise (0.1 % of ResNet-18's).
# - latency: the longest a packet may wait in tbf's queue, which sets the queue's length (rate × latency
#   + burst). Too short and packets are dropped whenever a TCP window overshoots it, so the flow spends time
#   recovering and runs below the rate; longer only adds delay under load, and a local TCP flow never fills
#   it (TCP small queues keep about a millisecond of its data in the qdisc). 50 ms is 312 kB at 50 Mbit/s
#   and 3.1 MB at 500 Mbit/s: no drops from one flow, yet bounded.
TBF_BURST_BYTES = 64 * 1024
TBF_BURST_S = 1e-3
TBF_LATENCY_MS = 50.0


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _tc(namespace: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tc", "-n", namespace, *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)


def _checked_tc(namespace: str, *args: str) -> str:
    result = _tc(namespace, *args)
    if result.returncode != 0:
        raise RuntimeError(f"tc -n {namespace} {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


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


@functools.cache
def shaping_unavailable() -> str | None:
    """Why a shaped link cannot be made here (no namespaces, no `tc`, no tbf in the kernel), or None."""
    if (reason := netns_unavailable()) is not None:
        return reason
    if shutil.which("tc") is None:
        return "needs the `tc` command (Debian/Ubuntu package iproute2)"
    probe = f"hxtbf{os.getpid()}"
    _checked_ip("netns", "add", probe)
    try:
        added = _tc(probe, "qdisc", "add", "dev", "lo", "root", "tbf", *_tbf_args(100.0, None, TBF_LATENCY_MS))
        if added.returncode != 0:
            return f"`tc qdisc add ... tbf` failed here (kernel module sch_tbf?): {added.stderr.strip()}"
    finally:
        _ip("netns", "del", probe)
    return None


def _tbf_args(rate_mbit: float, burst_bytes: int | None, latency_ms: float) -> list[str]:
    """tbf's options for `rate_mbit`, with the burst and latency explained at TBF_BURST_BYTES."""
    if not rate_mbit > 0:
        raise ValueError(f"rate_mbit must be positive, got {rate_mbit}")
    if burst_bytes is None:
        burst_bytes = max(TBF_BURST_BYTES, round(rate_mbit * 1e6 / 8 * TBF_BURST_S))
    return ["rate", f"{rate_mbit * 1e3:.0f}kbit", "burst", str(burst_bytes), "latency", f"{latency_ms * 1e3:.0f}us"]


_TC_RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12, "bps": 8.0}


def _rate_bits(value: object) -> float:
    """A rate from tc's JSON in bit/s: a number is bytes per second (iproute2's JSON), a string such as
    "200Mbit" is read with its unit (older iproute2)."""
    if isinstance(value, (int, float)):
        return float(value) * 8
    match = re.fullmatch(r"([0-9.]+)\s*([A-Za-z]+)", str(value).strip())
    if match is None or match.group(2).lower() not in _TC_RATE_UNITS:
        raise ValueError(f"unreadable tc rate {value!r}")
    return float(match.group(1)) * _TC_RATE_UNITS[match.group(2).lower()]


@dataclass(frozen=True)
class Hosts:
    """Host i: its namespace, its interface (the link's end inside it) and its address."""

    namespaces: tuple[str, ...]
    interfaces: tuple[str, ...]
    addresses: tuple[str, ...]
    # switched_hosts: the switch's namespace and its port toward each host (shaped too: the switch's egress).
    switch: str | None = None
    ports: tuple[str, ...] = ()

    def exec_args(self, host: int) -> list[str]:
        """The prefix that runs a command on host `host`."""
        return ["ip", "netns", "exec", self.namespaces[host]]

    def env(self, host: int, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (os.environ by default) with gloo and NCCL bound to the host's veth interface."""
        env = dict(os.environ if base is None else base)
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = self.interfaces[host]
        return env

    def shape(self, rate_mbit: float, burst_bytes: int | None = None, latency_ms: float = TBF_LATENCY_MS) -> None:
        """Limit each direction of every link to `rate_mbit` Mbit/s (1e6 bit/s): a tbf qdisc at the root of both
        veth ends, replacing any there. Burst and latency default as explained at TBF_BURST_BYTES."""
        options = _tbf_args(rate_mbit, burst_bytes, latency_ms)
        for ns, dev in self._link_ends():
            _checked_tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", *options)

    def unshape(self) -> None:
        """Take the tbf qdiscs off again: the links run at the veth's own speed."""
        for ns, dev in self._link_ends():
            _tc(ns, "qdisc", "del", "dev", dev, "root")

    def _link_ends(self) -> list[tuple[str, str]]:
        """(namespace, interface) of every veth end: the hosts' and the switch's ports."""
        ends = list(zip(self.namespaces, self.interfaces, strict=True))
        return ends + [(self.switch, port) for port in self.ports] if self.switch else ends

    def shaped_rate_mbit(self, host: int) -> float | None:
        """The tbf rate on host `host`'s end of the link, in Mbit/s, as `tc qdisc show` reports it; None
        when no tbf qdisc is at its root."""
        return _tbf_rate_mbit(self.namespaces[host], self.interfaces[host])

    def port_rate_mbit(self, host: int) -> float | None:
        """switched_hosts: the tbf rate on the switch's end of host `host`'s link (its egress toward the host)."""
        if self.switch is None:
            raise ValueError("port_rate_mbit: these hosts have no switch")
        return _tbf_rate_mbit(self.switch, self.ports[host])


def _tbf_rate_mbit(namespace: str, device: str) -> float | None:
    """The rate of the tbf qdisc at `device`'s root, in Mbit/s, as `tc qdisc show` reports it; None if none."""
    out = _checked_tc(namespace, "-j", "qdisc", "show", "dev", device)
    for qdisc in json.loads(out or "[]"):
        if qdisc.get("kind") == "tbf" and qdisc.get("root"):
            return _rate_bits(qdisc["options"]["rate"]) / 1e6
    return None


def _bring_up_host(namespace: str, device: str, address: str) -> None:
    """Move a link's end `device` into the host's namespace, give it `address`, and bring it and loopback up."""
    _checked_ip("link", "set", device, "netns", namespace)
    _checked_ip("-n", namespace, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", device)
    _checked_ip("-n", namespace, "link", "set", "lo", "up")
    _checked_ip("-n", namespace, "link", "set", device, "up")


@contextmanager
def two_hosts(prefix: str = "hx", rate_mbit: float | None = None) -> Iterator[Hosts]:
    """Create the two namespaces and the veth pair between them (shaped to `rate_mbit` Mbit/s each way if
    given, see Hosts.shape); delete them on exit."""
    tag = f"{prefix}{os.getpid()}"
    hosts = Hosts((f"{tag}n0", f"{tag}n1"), (f"{tag}a"[:15], f"{tag}b"[:15]), ADDRESSES)
    try:
        for ns in hosts.namespaces:
            _checked_ip("netns", "add", ns)
        _checked_ip("link", "add", hosts.interfaces[0], "type", "veth", "peer", "name", hosts.interfaces[1])
        for ns, dev, address in zip(hosts.namespaces, hosts.interfaces, hosts.addresses, strict=True):
            _bring_up_host(ns, dev, address)
        if rate_mbit is not None:
            hosts.shape(rate_mbit)
        yield hosts
    finally:
        for ns in hosts.namespaces:
            _ip("netns", "del", ns)  # takes its end of the veth pair with it
        _ip("link", "del", hosts.interfaces[0])  # only there if setup failed before the move


@contextmanager
def switched_hosts(count: int, prefix: str = "hs", rate_mbit: float | None = None) -> Iterator[Hosts]:
    """Create `count` host namespaces, each with a veth link to one bridge in a switch namespace (every link shaped
    to `rate_mbit` Mbit/s each way if given, see Hosts.shape); delete them on exit."""
    if count < 2:
        raise ValueError(f"switched_hosts needs at least 2 hosts, got {count}")
    tag = f"{prefix}{os.getpid()}"
    hosts = Hosts(
        namespaces=tuple(f"{tag}n{i}" for i in range(count)),
        interfaces=tuple(f"{tag}h{i}"[:15] for i in range(count)),
        addresses=tuple(f"{SWITCHED_SUBNET}.{i + 1}" for i in range(count)),
        switch=f"{tag}sw",
        ports=tuple(f"{tag}p{i}"[:15] for i in range(count)),
    )
    bridge = "br0"
    try:
        _checked_ip("netns", "add", hosts.switch)
        _checked_ip("-n", hosts.switch, "link", "add", bridge, "type", "bridge")  # no STP: ports forward at once
        _checked_ip("-n", hosts.switch, "link", "set", bridge, "up")
        links = zip(hosts.namespaces, hosts.interfaces, hosts.ports, hosts.addresses, strict=True)
        for ns, dev, port, address in links:
            _checked_ip("netns", "add", ns)
            _checked_ip("link", "add", dev, "type", "veth", "peer", "name", port)
            _checked_ip("link", "set", port, "netns", hosts.switch)
            _checked_ip("-n", hosts.switch, "link", "set", port, "master", bridge)
            _checked_ip("-n", hosts.switch, "link", "set", port, "up")
            _bring_up_host(ns, dev, address)
        if rate_mbit is not None:
            hosts.shape(rate_mbit)
        yield hosts
    finally:
        for ns in (*hosts.namespaces, hosts.switch):
            _ip("netns", "del", ns)  # takes its ends of the veth links with it
        for dev in hosts.interfaces:
            _ip("link", "del", dev)  # only there if setup failed before the move
