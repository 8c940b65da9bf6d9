"""Two hosts on one machine: network namespaces joined by a veth pair, torchrun --nnodes 2 in each.

Runs as root where `ip netns` works (tests/netns.py); skipped with the reason elsewhere.
"""

from __future__ import annotations

import json

import pytest

from tests.netns import netns_unavailable, two_hosts
from tests.two_host_train import run_on_both, train_on_both

pytestmark = pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))


def test_sweep_across_two_nodes_over_veth(tmp_path):
    jsonl = tmp_path / "two_nodes.jsonl"
    sweep = ["-m", "harness.raw_sweep", "--sizes", "64K,1M,4M", "--timeout", "60", "--json", str(jsonl)]
    with two_hosts() as hosts:
        node0, node1 = run_on_both(hosts, sweep)
    assert node0.returncode == 0, node0.stderr[-3000:]
    assert node1.returncode == 0, node1.stderr[-3000:]

    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    header, rows = records[0], [r for r in records if r["record"] == "row"]
    assert header["launcher"] == "torchrun" and header["nodes"] == 2 and header["world_size"] == 2
    assert [r["node_rank"] for r in header["ranks"]] == [0, 1]
    assert header["env"]["MASTER_ADDR"] == hosts.addresses[0]
    assert header["env"]["GLOO_SOCKET_IFNAME"] == hosts.interfaces[0]
    assert records[-1] == {"record": "end", "status": "ok", "reason": "", "at": "", "rows": 6}
    assert len(rows) == 6 and all(r["nodes"] == 2 and r["wrong"] == 0 for r in rows)
    # Bandwidth measured across the veth link (busbw = algbw for all_reduce on 2 ranks).
    largest = [r for r in rows if r["size_bytes"] == 4 << 20]
    assert all(r["busbw_gbps"] > 0 for r in largest)
    assert "on 2 node(s)" in node0.stdout
    print("\n".join(f"veth all_reduce {r['placement']} 4 MiB: {r['busbw_gbps']:.2f} GB/s busbw" for r in largest))


def test_training_across_two_nodes_over_veth(tmp_path):
    train = ["--model", "resnet_tiny", "--max-steps", "12", "--timeout", "60"]
    with two_hosts() as hosts:
        (node0, node1), run_dir = train_on_both(hosts, train, tmp_path / "runs")
    assert node0.returncode == 0, node0.stderr[-3000:]
    assert node1.returncode == 0, node1.stderr[-3000:]

    summary = json.loads((run_dir / "summary.json").read_text())  # rank 0, on node 0, writes it
    assert summary["completed"] is True and summary["world_size"] == 2 and summary["backend"] == "gloo"
    settings = summary["settings"]
    assert (settings["launcher"], settings["num_nodes"], settings["devices"]) == ("torchrun", 2, 1)
    assert [(r["rank"], r["node_rank"]) for r in summary["ranks"]] == [(0, 0), (1, 1)]
    assert summary["env"]["MASTER_ADDR"] == hosts.addresses[0]
    assert summary["env"]["GLOO_SOCKET_IFNAME"] == hosts.interfaces[0]
    # Gradients crossed the veth link: every measured step moved the model's bytes, at a measured busbw.
    totals = summary["totals"]
    # 12 steps: 2 warm-up, 3 calibration (the block after warm-up), 2 timeline, 5 measured
    assert totals["steps_measured"] == 5 and totals["bytes_per_step"] > 0 and totals["busbw_gbps_p50"] > 0
    assert "# Gradient communication: 2 ranks, gloo" in node0.stdout
    print(f"\nveth training: {totals['bytes_per_step']:,} B per step, busbw p50 {totals['busbw_gbps_p50']:.3f} GB/s")
