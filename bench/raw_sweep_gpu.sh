#!/usr/bin/env bash
# Raw sweep on one GPU (world size 1): all_reduce from 8 B to 1 GiB in throughput, latency and CUDA-graph modes.
#
#   bench/raw_sweep_gpu.sh [OUTDIR]        # OUTDIR defaults to $OUT, else out/raw_sweep_gpu
#
# Reference on the H200 (nccl-tests all_reduce_perf -g 1): out-of-place 6.0 to 6.7 us from 4 B to 4 MiB,
# in place about 0.3 us; eager torch about 30 us a call. Target: graph mode within 1.3x of nccl-tests at small
# sizes. With one rank busbw is 0 by definition: compare times. torch has no out-of-place all_reduce, so the
# out-of-place rows are a copy plus the in-place call (emulated=true); in-place rows compare directly.
# Writes, per run, the table (.txt), JSON Lines (.jsonl) and CSV (.csv), then prints a summary. ~1 to 2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/raw_sweep_gpu}}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true

sweep() {  # name, then raw_sweep arguments
    local name=$1; shift
    local start=$(date +%s.%N)
    python3 -m harness.raw_sweep --nproc 1 --collectives all_reduce -b 8 -e 1G -f 2 -G "$@" \
        --json "$out/$name.jsonl" --csv "$out/$name.csv" | tee "$out/$name.txt"
    echo "# $name: $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s wall" | tee -a "$out/$name.txt"
}

# 1. nccl-tests' method and defaults (-w 5 -n 20): back to back between two CUDA events, eager and graph.
sweep throughput --mode throughput -w 5 -n 20
# 2. Each call timed alone (barrier outside the window); 200 samples per size for p99; eager and graph.
sweep latency --mode latency -w 20 -n 200

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = [r for name in ("throughput", "latency") for line in (out / f"{name}.jsonl").read_text().splitlines()
        for r in [json.loads(line)] if r["record"] == "row"]
def t(mode, graph, placement, size):
    for r in rows:
        if (r["mode"], r["cuda_graph"], r["placement"], r["size_bytes"]) == (mode, graph, placement, size):
            return r["time_us"]
print("\n| size | placement | throughput eager us | throughput graph us | host overhead us | latency p50 eager | latency p50 graph |")
print("|---:|---|---:|---:|---:|---:|---:|")
for size in (8, 1024, 65536, 1 << 20, 4 << 20, 64 << 20, 1 << 30):
    for placement in ("out_of_place", "in_place"):
        te, tg = t("throughput", False, placement, size), t("throughput", True, placement, size)
        le, lg = t("latency", False, placement, size), t("latency", True, placement, size)
        cells = [f"{x:.2f}" if x is not None else "n/a" for x in (te, tg, te - tg if te and tg else None, le, lg)]
        print(f"| {size} | {placement} | " + " | ".join(cells) + " |")
PY
