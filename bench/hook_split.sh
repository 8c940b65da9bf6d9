#!/usr/bin/env bash
# Where the timed path's cost goes on one GPU (issues 10 and 11), in one device call:
#   1. the GPU tests of the comm hook (tests/test_comm_hook.py -m gpu);
#   2. bench.hook_overhead, its variants interleaved (all, or $VARIANTS): the timed path split into the hook's stamps,
#      the resolve and the statistics, each with the main thread's wall ms in its resolve and statistics; then
#      $PROFILE_STEPS steps of each under torch.profiler (the GPU's kernel time, each CUDA runtime call's host time);
#      the same at each of $MORE_BATCHES;
#   3. with NCCL_TIMING=1, plain DDP and torch's hook again with TORCH_NCCL_ENABLE_TIMING=1 (NCCL's own timing events);
#   4. with PYSPY=1, py-spy --native on the timed variant alone, then on torch's hook alone, each in its steady state:
#      every thread's C/C++ and Python stacks, kept raw for reading offline.
# Usage: OUT=dir [BATCH=128] [MORE_BATCHES="32"] [BLOCKS=30] [VARIANTS=a,b] [PROFILE_STEPS=5] [NCCL_TIMING=1] [PYSPY=1]
#        [BENCH_ARGS=...] bash bench/hook_split.sh          (py-spy comes from ./.wheels where the image lacks it)
set -u
OUT=${OUT:-out}
BATCH=${BATCH:-128}
BENCH_ARGS=${BENCH_ARGS:-"--device cuda --model resnet50 --batch-size $BATCH"}
SPLIT="--blocks ${BLOCKS:-30} --profile-steps ${PROFILE_STEPS:-5} ${VARIANTS:+--variants $VARIANTS}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python -m pytest -q -p no:cacheprovider -m gpu tests/test_comm_hook.py 2>&1 | grep -E "^E |passed|failed" | tail -12
python -m bench.hook_overhead $BENCH_ARGS $SPLIT --out "$OUT/hook_b$BATCH.jsonl" 2>&1 | tail -1 | cut -c1-300
for SMALL in ${MORE_BATCHES:-}; do
  python -m bench.hook_overhead ${BENCH_ARGS/--batch-size $BATCH/--batch-size $SMALL} $SPLIT \
    --out "$OUT/hook_b$SMALL.jsonl" 2>&1 | tail -1 | cut -c1-200
done
if [ "${NCCL_TIMING:-0}" = 1 ]; then
  TORCH_NCCL_ENABLE_TIMING=1 python -m bench.hook_overhead $BENCH_ARGS --blocks "${BLOCKS:-30}" \
    --variants plain,torch_hook --out "$OUT/nccl_timing_b$BATCH.jsonl" 2>&1 | tail -1 | cut -c1-200
fi
if [ "${PYSPY:-0}" = 1 ]; then
  command -v py-spy >/dev/null || python -m pip install -q --no-index --find-links .wheels py-spy 2>&1 | tail -2
  export PATH="$PATH:$HOME/.local/bin:$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
  # One variant per process, so that every sample of its main and autograd threads is that variant's.
  for VARIANT in timed torch_hook; do
    python -m bench.hook_overhead $BENCH_ARGS --blocks 100000 --variants $VARIANT >/dev/null 2>&1 &
    BENCH=$!
    sleep "${ATTACH_AFTER:-40}"
    PID=$(pgrep -f spawn_main | head -1)
    echo "py-spy on $VARIANT, pid ${PID:-none}"
    py-spy record --pid "${PID:-$BENCH}" --threads --native --rate 100 --duration "${DURATION:-15}" --format raw \
      -o "$OUT/native_${VARIANT}_b$BATCH.txt" 2>&1 | tail -1
    pkill -f bench.hook_overhead; pkill -f spawn_main
    wait
  done
fi
ls -l "$OUT"
