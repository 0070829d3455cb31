#!/usr/bin/env bash
# Session 40 call B (4 GPUs): make test-gpu on GPU 0 (test_hostile's context fix); on GPUs 1-3 the
# sanitizer pairs call A left open: racecheck of the GEMM test form by form with PDL off (and two
# forms with it on), of the GEMV test with PDL off; test_hostile test by test under all three tools;
# initcheck on test_gpu_threads_8x200_own.
set -uo pipefail
t0=$SECONDS
bins=$(for s in tests/test_*.c; do b=${s#tests/}; echo "build/tests/${b%.c}"; done)
make -j"$(nproc)" all $bins > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built ($((SECONDS - t0)) s)"
k=build/tests/test_gpu_kernels h=build/tests/test_hostile
g=(1 2 3); i=0
nx() { local v=${g[i % 3]}; i=$((i + 1)); echo $v; }
pairs=$(
  for f in 0 1 2 3 4 5 6 7 8 9; do echo "racecheck $k test_gpu_ternary_gemm $(nx) BITNET_GPU_PDL=0 BITNET_TEST_FORM=$f"; done
  for f in 0 7; do echo "racecheck $k test_gpu_ternary_gemm $(nx) BITNET_TEST_FORM=$f"; done
  for t in $(sed -nE 's/^ *RUN_TEST\(([a-z0-9_]+)\);.*/\1/p' tests/test_hostile.c); do
    for tool in racecheck memcheck initcheck; do echo "$tool $h $t $(nx)"; done; done
  echo "racecheck $k test_gpu_ternary_gemv $(nx) BITNET_GPU_PDL=0"
  echo "initcheck build/tests/test_gpu_runtime test_gpu_threads_8x200_own $(nx)"
)
echo "$pairs" > "$OUT/pairs.txt"
OUT=$OUT/san PAIRS="$pairs" JOBS=36 PAIR_TIMEOUT=${PT:-480} GIT_COMMIT=${GC:-?} tools/gpu_sanitize.sh > "$OUT/san.log" 2>&1 &
san=$!
CUDA_VISIBLE_DEVICES=0 BITNET_TIKTOKEN=$PWD/.dev/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
grep -A3 "test_context_limits\|test_model_larger" "$OUT/test-gpu.log" | head
wait $san
echo "sanitizers done ($((SECONDS - t0)) s)"
cat "$OUT/san/sanitize_summary.txt"
