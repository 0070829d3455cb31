#!/usr/bin/env bash
# Session 40 call D (warm, 4 GPUs): gemm_once A/B of the split GEMM (base = 204ff7e's tree) on GPU 0;
# racecheck and memcheck of the whole test_gpu_kernels on GPUs 1 and 2.
set -uo pipefail
t0=$SECONDS
mkdir -p .base/build && cc -O2 -std=c11 -o .base/build/gemm_once .base/tools/gemm_once.c -lm -ldl -lpthread
k=build/tests/test_gpu_kernels
OUT=$OUT/san PAIRS="racecheck $k - 1
memcheck $k - 2" JOBS=2 PAIR_TIMEOUT=300 GIT_COMMIT=${GC:-?} tools/gpu_sanitize.sh racecheck memcheck > "$OUT/san.log" 2>&1 &
san=$!
export CUDA_VISIBLE_DEVICES=0
for round in 1 2 3; do for d in .base .; do for shape in "2560 2560 16" "2560 2560 64" "3840 2560 64" "13824 2560 64" "2560 6912 64" "2560 6912 160" "2560 2560 192"; do
  echo "$d $shape: $(BITNET_CACHE_DIR=/tmp/c$d $d/build/gemm_once $shape 300 | tail -1)"; done; done; done | tee "$OUT/gemm_once.txt"
wait $san
echo "done ($((SECONDS - t0)) s)"; cat "$OUT/san/sanitize_summary.txt"
