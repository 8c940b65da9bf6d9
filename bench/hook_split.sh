#!/usr/bin/env bash
# Where the timed path's host time goes on one GPU (issues 10 and 11), in one device call:
#   1. the GPU cases of the stamps' tests;
#   2. bench.hook_overhead, every variant interleaved: the timed path split into the hook's stamps, the resolve and the
#      statistics, each with the main thread's wall ms in its resolve and statistics;
#   3. py-spy --native on the timed variant alone, then on torch's hook alone, each in its steady state: every thread's
#      C/C++ and Python stacks, kept raw for reading offline (where the timed path's extra host time sits).
# Usage: OUT=dir [BATCH=128] [MORE_BATCHES="32"] [BLOCKS=30] [BENCH_ARGS=...] bash bench/hook_split.sh   (py-spy comes from ./.wheels where the image lacks it)
set -u
OUT=${OUT:-out}
BATCH=${BATCH:-128}
BENCH_ARGS=${BENCH_ARGS:-"--device cuda --model resnet50 --batch-size $BATCH"}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python -m pytest -q -p no:cacheprovider tests/test_comm_hook.py -k "dropped or stamps" 2>&1 | tail -3
python -m bench.hook_overhead $BENCH_ARGS --blocks "${BLOCKS:-30}" --out "$OUT/hook_b$BATCH.jsonl" 2>&1 | tail -2 | cut -c1-400
for SMALL in ${MORE_BATCHES:-}; do  # the same split at other batch sizes (the profile below stays at $BATCH)
  python -m bench.hook_overhead ${BENCH_ARGS/--batch-size $BATCH/--batch-size $SMALL} --blocks "${BLOCKS:-30}" \
    --out "$OUT/hook_b$SMALL.jsonl" 2>&1 | tail -1 | cut -c1-200
done
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
ls -l "$OUT"
