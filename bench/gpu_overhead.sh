#!/usr/bin/env bash
# Issues 10 and 11 on one GPU, in one device call (docs/BENCHMARKS.md, "The harness's cost after the event
# checksums moved to C"):
#   1. TensorBoard's event checksum on this host: its pure-Python CRC-32C against google-crc32c's C code, on
#      records the size of a resnet50 step's event;
#   2. a 1000-step train.py run (resnet50 bf16 b128): the harness's cost lines (issue 10's < 2 % of the run);
#   3. with PROFILE=1, bench.host_profile: py-spy samples of train.py and of Lightning alone, every thread's
#      Python sorted into the harness's work and the rest (where the pairs' gap goes);
#   4. bench.vs_plain pairs: train.py against the hand-written loop, process by process (issue 11).
# Usage:
#   OUT=dir [VARIANTS=a,b] [TREE=name=dir] [PAIRS_S=seconds] [PROFILE=1] [CPUS=0-5|cores:6] \
#     bash bench/gpu_overhead.sh [pairs] [batch] [long-run steps, 0: none]
# VARIANTS=noop makes each pair also an A/B of the exposed time train.py reports; TREE adds another checkout's train.py
# to every pair (bench.vs_plain --tree: a change against what it replaced); CPUS pins every pair's runs to the same
# CPUs (bench.vs_plain --cpus). Each CPU's speed is probed first, in turn.
# google-crc32c and py-spy are installed from ./.wheels (pip download them there) where the image lacks them and
# has no index.
set -u
PAIRS=${1:-5}
BATCH=${2:-128}
LONG=${3:-1000}
OUT=${OUT:-out}
RUNS=${RUNS:-/tmp/gpu_overhead}
mkdir -p "$OUT" "$RUNS"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python -c "import google_crc32c" 2>/dev/null ||
  python -m pip install -q --no-index --find-links .wheels google-crc32c 2>&1 | tail -2
if [ "${PROFILE:-0}" = 1 ]; then
  command -v py-spy >/dev/null || python -m pip install -q --no-index --find-links .wheels py-spy 2>&1 | tail -2
  export PATH="$PATH:$HOME/.local/bin:$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
  python -m bench.host_profile --model resnet50 --batch-size "$BATCH" --steps 300 --out "$RUNS/profile" 2>&1 | tail -30
  cp "$RUNS/profile/host_profile.jsonl" "$OUT/host_profile_b$BATCH.jsonl" 2>/dev/null
fi
python - <<'PY'
import os, time
import google_crc32c
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
data = os.urandom(2400)  # a resnet50 step's event: ~50 scalars and a histogram
def per_call_us(fn, n):
    start = time.perf_counter()
    for _ in range(n):
        fn(data)
    return (time.perf_counter() - start) / n * 1e6
print(f"# CRC-32C of {len(data)} B on this host: TensorBoard's pure Python {per_call_us(masked_crc32c, 200):.1f} us, "
      f"google-crc32c ({google_crc32c.implementation}) {per_call_us(google_crc32c.value, 20000):.2f} us")
PY
if [ "$LONG" -gt 0 ]; then
  python train.py --model resnet50 --batch-size "$BATCH" --max-steps "$LONG" --logdir "$RUNS/runs" \
    --run-name long >"$RUNS/long.log" 2>&1
  echo "== train.py $LONG steps (exit $?)"; grep '^#' "$RUNS/long.log" | grep -v '^# train.py' | head -24
  cp "$RUNS"/runs/long/*/summary.json "$OUT/long_b$BATCH.json" 2>/dev/null
  ls -l "$RUNS"/runs/long/*/events.out.tfevents.* | awk '{print "# event file bytes:", $5}'
fi
python - <<'PY'
import os
from bench.vs_plain import cpu_probe_ms, physical_core
allowed = sorted(os.sched_getaffinity(0))
speeds = []
for cpu in allowed:
    os.sched_setaffinity(0, {cpu})
    speeds.append(f"{cpu}:{cpu_probe_ms():.0f}")
os.sched_setaffinity(0, allowed)
print(f"# {len(allowed)} CPUs on {len({physical_core(cpu) for cpu in allowed})} physical cores; a fixed Python loop "
      f"on each, ms: {' '.join(speeds)}")
PY
# Pairs are appended to the .jsonl as each completes; PAIRS_S bounds this part, keeping the pairs done by then.
timeout "${PAIRS_S:-3600}" python -m bench.vs_plain --model resnet50 --batch-size "$BATCH" --pairs "$PAIRS" \
  ${VARIANTS:+--variants "$VARIANTS"} ${TREE:+--tree "$TREE"} ${CPUS:+--cpus "$CPUS"} --out "$OUT/pairs_b$BATCH.jsonl" 2>&1 | tail -25
