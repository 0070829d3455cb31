#!/usr/bin/env bash
# Session 40 call E (4 GPUs): main's final code, every binary of make test-gpu under compute-sanitizer
# memcheck and racecheck (tools/gpu_sanitize.sh's defaults: test_cuda_forward and test_hostile test by test).
set -uo pipefail
OUT=$OUT JOBS=32 PAIR_TIMEOUT=${PT:-330} GIT_COMMIT=${GC:-?} tools/gpu_sanitize.sh memcheck racecheck > "$OUT/san.log" 2>&1
echo "exit $?"; cat "$OUT/sanitize_summary.txt"
