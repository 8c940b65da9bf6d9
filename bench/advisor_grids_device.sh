#!/usr/bin/env bash
# Issue 13's 4-rank loopback cells on a host with a core per rank: the device machine's 16 CPU cores, gloo, no GPU.
# On the 2-core CPU machine, 4 ranks put one run 21-32 % from its own setting's repeats (the noise floor), above the
# 20 % worst-error bar, so those cells cannot be decided there (docs/BENCHMARKS.md, "the validated error over twelve
# grids"). The grids are the ones run there (resnet50 64 px batch 8 at caps 1 and 100 MiB; gpt2 seq 32 batch 2 at 5
# and 100 MiB; each with DDP's default, allreduce and fp16, 3 repeats, the bases in the grid), so the two hosts'
# figures compare. train.py gives each of the 4 ranks (usable cores)/4 threads; the script prints what it sees.
# Usage: OUT=dir [GRIDS=resnet50|gpt2|"resnet50 gpt2"] [GRID_S=seconds per grid] [RESUME=GRID_runs.tar.gz]
#        bash bench/advisor_grids_device.sh
# One grid a call by default: 18 runs of 4 ranks, whose second base run is the 12th, in a call of at most 600 s.
# Each grid's report.md comes back as report_GRID.md only when the grid finished; its runs (summaries and logs)
# come back as GRID_runs.tar.gz whether it finished or was cut by GRID_S. Where all 18 runs finished and only the
# predictions were cut, unpack it and predict here:
# `python -m bench.advisor_validation <the grid's flags> --reuse --out <GRID dir>`.
# On the H100 host (2026-12-06) resnet50's runs took 25-36 s each (the 18 in 540 s, predictions cut) and gpt2's
# 51-65 s: gpt2's grid needs about 17 minutes, more than one call. So a cut grid can go on in the next call: put
# its GRID_runs.tar.gz in the repo (docs/validation/ keeps grids' runs) and give RESUME=<its path> (one grid in
# GRIDS): the runs it holds are kept and only the rest run (bench.advisor_validation --resume).
# Each report also gives, second and declared here before the runs, the verdict without the runs whose own
# compute-only forward+backward lies over DRIFT_PCT (25) % from the grid's median: on a freshly started machine
# (2026-12-06 18:43 UTC) four runs 1-4 minutes in computed 1.3-2.0x slower than the other eleven, and a run slowed
# by the host is not the model's error. The verdict as measured stays first, and is the one --pool reads.
# Run it with OMP_WAIT_POLICY=PASSIVE in the environment, as the cells were last measured: with the policy unset,
# the fp16 hook's OpenMP teams spin on these 4-thread ranks and its rows run up to 2.5x slower than anything the
# model knows of (docs/BENCHMARKS.md, "fp16's miss at 4 ranks of 4 threads is OpenMP's spin").
set -u
OUT=${OUT:-out}
WORK=${WORK:-/tmp/advisor_grids}
mkdir -p "$OUT" "$WORK"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=""  # torch sees no GPU, so train.py runs its ranks on CPU with gloo
python - <<'PY'
import os
quota = open("/sys/fs/cgroup/cpu.max").read().strip() if os.path.exists("/sys/fs/cgroup/cpu.max") else "none found"
print(f"# {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} in this process's affinity (train.py divides these),"
      f" cgroup cpu.max {quota}, load {os.getloadavg()[0]:.2f}")
PY
for GRID in ${GRIDS:-resnet50}; do
  case "$GRID" in
    resnet50) WORKLOAD="--model resnet50 --image-size 64 --batch-size 8 --caps 1,100" ;;
    gpt2) WORKLOAD="--model gpt2 --seq-len 32 --batch-size 2 --caps 5,100" ;;
    *) echo "advisor_grids_device: no grid named $GRID (resnet50, gpt2)" >&2; exit 2 ;;
  esac
  rm -rf "${WORK:?}/$GRID"  # a warm machine may hold an earlier call's grid: never report it as this one
  RESUMING=""
  if [ -n "${RESUME:-}" ]; then  # an earlier call's cut grid: its finished runs count, the rest run now
    tar -xzf "$RESUME" -C "$WORK" || { echo "advisor_grids_device: cannot unpack RESUME=$RESUME" >&2; exit 2; }
    [ -d "$WORK/$GRID/grid" ] || { echo "advisor_grids_device: $RESUME holds no $GRID grid" >&2; exit 2; }
    RESUMING="--resume"
  fi
  date -u +"== $GRID from %H:%M:%S UTC"
  timeout -k 30 "${GRID_S:-480}" python -m bench.advisor_validation $WORKLOAD --nproc 4 --max-steps 30 \
    --calibration-every 5 --repeat 3 --bases-in-grid --drop-drifted "${DRIFT_PCT:-25}" $RESUMING \
    --out "$WORK/$GRID" >"$WORK/$GRID.log" 2>&1
  CODE=$?
  echo "exit $CODE"; tail -12 "$WORK/$GRID.log"
  if [ "$CODE" = 0 ] && [ -f "$WORK/$GRID/report.md" ]; then
    cp "$WORK/$GRID/report.md" "$OUT/report_$GRID.md"
  else  # cut or failed: a report.md written from part of the grid is not the grid's
    cp "$WORK/$GRID.log" "$OUT/${GRID}_cut.log"
  fi
  # The runs come back either way: a finished grid's are what docs/validation keeps beside its report (to
  # predict them again with a later model), a cut grid's are what RESUME goes on from.
  tar -czf "$OUT/${GRID}_runs.tar.gz" --exclude="*.png" --exclude="events.out.tfevents.*" -C "$WORK" "$GRID"
done
