#!/usr/bin/env bash
# Raw sweep on CPU: 2 and 4 gloo processes on loopback.
#
#   bench/raw_sweep_cpu.sh [OUTDIR]        # OUTDIR defaults to $OUT, else out/raw_sweep_cpu
#
# For each world size: the whole default sweep (`python -m harness.raw_sweep --nproc N`, all_reduce 8 B to
# 32 MiB) timed from the shell, then every collective at 2, 8 and 32 MiB. Prints busbw at the large sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/raw_sweep_cpu}}"
mkdir -p "$out"
export GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}"
echo "# $(date -u +%FT%TZ) $(hostname) $(nproc) cores, torch $(python3 -c 'import torch; print(torch.__version__)')" \
    | tee "$out/machine.txt"

for n in 2 4; do
    start=$(date +%s.%N)
    python3 -m harness.raw_sweep --nproc "$n" --backend gloo \
        --json "$out/default_np$n.jsonl" --csv "$out/default_np$n.csv" > "$out/default_np$n.txt"
    echo "default sweep, nproc $n: $(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s wall" | tee -a "$out/machine.txt"
    python3 -m harness.raw_sweep --nproc "$n" --backend gloo --collectives all -b 2M -e 32M -f 4 \
        --json "$out/all_np$n.jsonl" --csv "$out/all_np$n.csv" > "$out/all_np$n.txt"
done

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("\n| ranks | collective | size | out-of-place time us | busbw GB/s | in-place time us | busbw GB/s |")
print("|---:|---|---:|---:|---:|---:|---:|")
for n in (2, 4):
    rows = [json.loads(l) for l in (out / f"all_np{n}.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["record"] == "row"]
    for name in dict.fromkeys(r["collective"] for r in rows):
        for size in sorted({r["size_bytes"] for r in rows if r["collective"] == name})[-2:]:
            cells = []
            for placement in ("out_of_place", "in_place"):
                r = next(r for r in rows if (r["collective"], r["size_bytes"], r["placement"]) == (name, size, placement))
                cells += ["n/a", "n/a"] if r["time_us"] is None else [f"{r['time_us']:.0f}", f"{r['busbw_gbps']:.2f}"]
            print(f"| {n} | {name} | {size} | " + " | ".join(cells) + " |")
PY
