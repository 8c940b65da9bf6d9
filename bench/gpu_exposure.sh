#!/usr/bin/env bash
# Issue 10's GPU checks at world size 1, in one device call (see docs/BENCHMARKS.md, "Measurement truth"):
#   1. the GPU tests: bucket comm time against NCCL's kernels in a torch.profiler trace, and peak memory of
#      the timed fp16/bf16 hooks against torch's own;
#   2. train.py resnet50 (bf16, batch 128): allreduce and noop interleaved (an A/B: at world size 1 exposed
#      must be ~0 and step(allreduce) − step(noop) too), then powersgd and fp16 (comm ≈ 0, codec carries the
#      compute).
# Usage: OUT=dir bash bench/gpu_exposure.sh [steps]   (each run's summary.json is copied to $OUT/NAME.json;
# the runs and their logs stay under $RUNS, /tmp/gpu_exposure by default)
set -u
STEPS=${1:-1000}
OUT=${OUT:-out}
RUNS=${RUNS:-/tmp/gpu_exposure}
mkdir -p "$OUT" "$RUNS"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python -m pytest -q -m gpu tests/test_comm_hook.py 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
run() {  # name, extra train.py args...
  local name=$1; shift
  python train.py --model resnet50 --batch-size 128 --logdir "$RUNS/runs" --run-name "$name" "$@" \
    >"$RUNS/$name.log" 2>&1
  echo "== $name (exit $?)"; grep '^#' "$RUNS/$name.log" | grep -v '^# train.py' | head -20
  cp "$RUNS"/runs/"$name"/*/summary.json "$OUT/$name.json" 2>/dev/null
}
run allreduce-a --max-steps "$STEPS"
run noop-a --max-steps "$STEPS" --comm-hook noop
run allreduce-b --max-steps "$STEPS"
run noop-b --max-steps "$STEPS" --comm-hook noop
run powersgd --max-steps 300 --comm-hook powersgd
run fp16 --max-steps 300 --comm-hook fp16
python - "$RUNS/runs" <<'PY'
import json, pathlib, sys
print("| run | steps | step p50 ms | exposed p50 ms | 95 % interval | comm p50 ms | codec p50 ms | verdict |")
print("|---|---:|---:|---:|---|---:|---:|---|")
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*/summary.json")):
    t = json.loads(path.read_text())["totals"]
    ci = t.get("exposed_ms_ci95") or [None, None]
    fmt = lambda v: "—" if v is None else f"{v:.3f}"
    print(f"| {path.parent.parent.name} | {t['steps_measured']} | {fmt(t['step_ms_p50'])} | {fmt(t['exposed_ms_p50'])} "
          f"| [{fmt(ci[0])}, {fmt(ci[1])}] | {fmt(t['comm_ms_p50'])} | {fmt(t.get('codec_ms_p50'))} | {t.get('exposure_verdict')} |")
PY
