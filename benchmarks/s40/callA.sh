#!/usr/bin/env bash
# Session 40 call A: validate main (ef0e360's GPU code) on a machine of 4 GPUs:
# GPU 0: bench, then make test-gpu and the determinism check; GPUs 1-3: every sanitizer over the
# whole suite, test_gpu_kernels and test_cuda_forward split by test.
set -uo pipefail
t0=$SECONDS
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
bins=$(for s in tests/test_*.c; do b=${s#tests/}; echo "build/tests/${b%.c}"; done)
make -j"$(nproc)" all $bins > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "built ($((SECONDS - t0)) s)"
model=/tmp/2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $model >/dev/null 2>&1 || echo "gen-model failed"
export CUDA_VISIBLE_DEVICES=0
build/bitnet bench -m $model --backend cuda --prompt-tokens 16,64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt"; echo "bench done ($((SECONDS - t0)) s)"
unset CUDA_VISIBLE_DEVICES
mkdir -p "$OUT/san"
OUT=$OUT/san SPLIT="test_gpu_kernels test_cuda_forward" GPUS="1 2 3" JOBS=27 PAIR_TIMEOUT=${PT:-470} GIT_COMMIT=${GC:-?} \
  tools/gpu_sanitize.sh racecheck memcheck initcheck > "$OUT/san.log" 2>&1 &
san=$!
export CUDA_VISIBLE_DEVICES=0
BITNET_TIKTOKEN=$PWD/.dev/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
build/bitnet bench -m $model --backend all --prompt-tokens 64 --gen-tokens 64 --runs 1 --check-determinism --require-gpu 2>&1 | tail -6
wait $san
echo "sanitizers done ($((SECONDS - t0)) s)"
cat "$OUT/san/sanitize_summary.txt"
