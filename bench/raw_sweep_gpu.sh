#!/usr/bin/env bash
# Raw sweep on one GPU (world size 1): all_reduce from 8 B to 1 GiB in throughput, latency and CUDA-graph modes.
#
#   bench/raw_sweep_gpu.sh [OUTDIR]        # OUTDIR defaults to $OUT, else out/raw_sweep_gpu
#
# Reference on the H200 (nccl-tests all_reduce_perf -g 1): out-of-place 6.0 to 6.7 us from 4 B to 4 MiB,
# in place about 0.3 us; eager torch about 30 us a call. With one rank NCCL moves no data: an in-place
# all_reduce enqueues no GPU work at all (its CUDA graph is empty), and an out-of-place one is a device copy.
# torch has no out-of-place all_reduce, so our out-of-place rows are a copy plus the in-place call
# (emulated=true). Both tools therefore time launch paths here, not communication; busbw is 0 by definition.
#
# 1. throughput: nccl-tests' method (-w 5 -n 20), runs extended to >= 2 ms so host-bound eager rows average
#    over ~100 calls; eager and graph; graph rows carry host = eager - graph.
# 2. latency: 200 samples per size. Eager: each call alone after a barrier (window includes the host launch).
#    Graph: 200 calls in one replay with timing events captured between them (timing=call_in_graph): one
#    call's GPU time, no launch. Rows fall back to timing=replay where torch cannot capture timing events.
# Writes, per run, the table (.txt), JSON Lines (.jsonl) and CSV (.csv), then prints a summary. About 1 minute.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/raw_sweep_gpu}}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true

sweep() {  # name, then raw_sweep arguments
    local name=$1; shift
    local start=$(date +%s.%N)
    python3 -m harness.raw_sweep --nproc 1 --collectives all_reduce -b 8 -e 1G -f 2 -G --timeout 120 "$@" \
        --json "$out/$name.jsonl" --csv "$out/$name.csv" | tee "$out/$name.txt"
    echo "# $name: $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s wall" | tee -a "$out/$name.txt"
}

sweep throughput --mode throughput -w 5 -n 20 --min-time-ms 2
sweep latency --mode latency -w 20 -n 200

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
records = [json.loads(line) for name in ("throughput", "latency") for line in (out / f"{name}.jsonl").read_text().splitlines()]
rows = [r for r in records if r["record"] == "row"]
ends = [r for r in records if r["record"] == "end"]
print("\nend records:", [(e["status"], e["rows"]) for e in ends])
print("timing methods:", sorted({(r["mode"], r["cuda_graph"], r["timing"]) for r in rows if r["timing"]}, key=str))
def row(mode, graph, placement, size):
    return next((r for r in rows if (r["mode"], r["cuda_graph"], r["placement"], r["size_bytes"]) == (mode, graph, placement, size)), None)
def us(r, key="time_us"):
    return f"{r[key]:.2f}" if r and r.get(key) is not None else "n/a"
print("\n| size | placement | thr eager us | thr graph us | host us | lat p50 eager | lat p50 graph | lat p99 graph | note |")
print("|---:|---|---:|---:|---:|---:|---:|---:|---|")
for size in (8, 1024, 65536, 1 << 20, 4 << 20, 64 << 20, 512 << 20, 1 << 30):
    for placement in ("out_of_place", "in_place"):
        te, tg = row("throughput", False, placement, size), row("throughput", True, placement, size)
        le, lg = row("latency", False, placement, size), row("latency", True, placement, size)
        note = "empty graph" if (tg and tg["note"]) or (lg and lg["note"]) else ""
        print(f"| {size} | {placement} | {us(te)} | {us(tg)} | {us(tg, 'host_overhead_us')} | {us(le)} | {us(lg)} "
              f"| {us(lg, 'p99_us')} | {note} |")
small = [r for r in rows if r["size_bytes"] <= 4 << 20 and r["time_us"] is not None]
for mode in ("throughput", "latency"):
    for graph in (False, True):
        for placement in ("out_of_place", "in_place"):
            times = [r["time_us"] for r in small if (r["mode"], r["cuda_graph"], r["placement"]) == (mode, graph, placement)]
            if times:
                print(f"8 B..4 MiB {mode:10} {'graph' if graph else 'eager':5} {placement:12}: "
                      f"{min(times):7.2f} .. {max(times):7.2f} us (nccl-tests -g 1: out-of-place 6.0-6.7, in place ~0.3)")
PY
