#!/usr/bin/env bash
# Session 40 call C (4 GPUs): the split GEMM's exchange in its own shared-memory area.
# GPU 0: gemm_once on split shapes and the prefill A/B against .base (HEAD), then make test-gpu.
# GPUs 1-3: racecheck of the GEMM test form by form and of the GEMV test.
set -uo pipefail
t0=$SECONDS
bins=$(for s in tests/test_*.c; do b=${s#tests/}; echo "build/tests/${b%.c}"; done)
make -j"$(nproc)" all $bins > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
for d in . .base; do cc -O2 -std=c11 -o $d/build/gemm_once $d/tools/gemm_once.c -lm -ldl -lpthread; done
(cd .base && make -j"$(nproc)" build/bitnet > /dev/null 2>&1)
echo "built ($((SECONDS - t0)) s)"
k=build/tests/test_gpu_kernels g=(1 2 3); i=0
pairs=$(for f in 0 1 2 3 4 5 6 7; do echo "racecheck $k test_gpu_ternary_gemm ${g[f % 3]} BITNET_TEST_FORM=$f"; done
        echo "racecheck $k test_gpu_ternary_gemv 2"; echo "racecheck $k test_gpu_ternary_batch_and_repeat 3")
OUT=$OUT/san PAIRS="$pairs" JOBS=16 PAIR_TIMEOUT=${PT:-400} GIT_COMMIT=${GC:-?} tools/gpu_sanitize.sh > "$OUT/san.log" 2>&1 &
san=$!
export CUDA_VISIBLE_DEVICES=0
{ for round in 1 2; do for d in .base .; do for shape in "2560 2560 16" "2560 2560 64" "3840 2560 64" "13824 2560 64" "2560 6912 64" "2560 6912 160" "13824 2560 96"; do
    echo "$d $shape: $(BITNET_CACHE_DIR=/tmp/c$d $d/build/gemm_once $shape 200 | tail -1)"; done; done; done; } > "$OUT/gemm_once.txt" 2>&1
cat "$OUT/gemm_once.txt"
OUT=$OUT/ab VARIANTS="base=.base new=." PROMPTS=16,64,160,512 RUNS=5 tools/gpu_bench_ab.sh 2>&1 | tail -6
BITNET_TIKTOKEN=$PWD/.dev/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
wait $san
echo "sanitizers done ($((SECONDS - t0)) s)"
cat "$OUT/san/sanitize_summary.txt"
cd "$OUT" && tar -czf ab.tgz ab && rm -rf ab
