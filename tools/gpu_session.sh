#!/usr/bin/env bash
# Lead's batch on the GPU machine. Default: validate main, then the racecheck bisect.
#   tools/gpu_session.sh race      the bisect and racecheck on test_gpu_runtime only
#   tools/gpu_session.sh final     validate, then bench-kernels
set -u
export OUT=${OUT:-/tmp/o}
case "${1:-all}" in
final) # validate, then the kernel benchmark (no bitnet.cpp library: its column is skipped)
  TIKTOKEN=${TIKTOKEN:-} RUNS=${RUNS:-2} tools/gpu_validate.sh
  timeout 240 build/bitnet bench-kernels --backend cuda --json "$OUT/bench-kernels.json" > "$OUT/bench-kernels.txt" 2>&1
  tail -45 "$OUT/bench-kernels.txt" ;;
race)
  TESTS=build/tests/test_gpu_runtime tools/gpu_sanitize.sh racecheck > "$OUT/race_runtime.txt" 2>&1 &
  VARIANTS="8:nodl 8:event 8:full" tools/gpu_race_bisect.sh
  wait; tail -8 "$OUT/race_runtime.txt"; cat "$OUT/sanitize_first_reports.txt" 2>/dev/null | head -20 ;;
*)
  TIKTOKEN=${TIKTOKEN:-} RUNS=${RUNS:-2} tools/gpu_validate.sh
  tools/gpu_race_bisect.sh ;;
esac
