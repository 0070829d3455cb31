#!/usr/bin/env bash
# The GPU forward pass on the GPU machine, in one call: build, tests/test_cuda_forward (GPU vs CPU
# logits and greedy tokens), tools/fwd_divergence.c (each GPU kernel against the CPU's op on the
# same inputs), the 2B-4T benchmark
# (tools/bench_cuda_forward.c: decode and prefill tokens/s, device memory at a 4096-token context,
# CPU agreement at full scale) and `bitnet run --backend cuda` on a gen-model 2b4t GGUF when this
# build can write one, and last the test under compute-sanitizer memcheck. Logs go to $OUT (default /tmp/gpu_forward); the JIT cache to
# $BITNET_CACHE_DIR (default .jitcache here), which is also tarred into $OUT.
#   usage: tools/gpu_forward.sh [test|bench|all]   (default all)
set -u
what=${1:-all}
OUT=${OUT:-/tmp/gpu_forward}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-$PWD/.jitcache}
mkdir -p "$BITNET_CACHE_DIR"
status=0
step() { # step NAME CMD...: runs CMD, its output to $OUT/NAME.log and the screen
  local name=$1; shift
  echo "== $name: $*"
  local t0=$(date +%s.%N)
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  tail -n 40 "$OUT/$name.log"
  echo "== $name: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  [ $rc -eq 0 ] || status=1
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/gpu.txt"
step build make -j"$(nproc)" all build/tests/test_cuda_forward || { echo "build failed"; exit 1; }
step build-bench cc -O2 -std=c11 -Wall -Wextra -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1

if [ "$what" != bench ]; then
  BITNET_REQUIRE_GPU=1 step test build/tests/test_cuda_forward
  # every GPU kernel on its own inputs against the CPU's op (immune to int8 flip cascades)
  step build-div cc -O2 -std=c11 -o build/fwd_divergence tools/fwd_divergence.c -lm -ldl -lpthread &&
    for m in hd64 hd128 tests/data/tiny.gguf; do step "div-${m##*/}" build/fwd_divergence "$m"; done
  step run-tiny-cuda build/bitnet run -m tests/data/tiny.gguf -p "Hello there" -n 48 --temp 0 --backend cuda
  step run-tiny-cpu build/bitnet run -m tests/data/tiny.gguf -p "Hello there" -n 48 --temp 0 --backend cpu
fi

if [ "$what" != test ]; then
  model=""
  if [ -f ../shared/data/llama3-tokenizer.tiktoken ] || [ -f shared/data/llama3-tokenizer.tiktoken ]; then
    tk=../shared/data/llama3-tokenizer.tiktoken; [ -f "$tk" ] || tk=shared/data/llama3-tokenizer.tiktoken
    if build/bitnet gen-model --preset 2b4t --tiktoken "$tk" -o /tmp/2b4t.gguf > "$OUT/gen-model.log" 2>&1; then
      model=/tmp/2b4t.gguf
    else
      echo "gen-model 2b4t: $(tail -n 1 "$OUT/gen-model.log") -- benchmarking in-memory 2B-4T-shaped weights"
    fi
  fi
  step bench build/bench_cuda_forward $model
  if [ -n "$model" ]; then
    step run build/bitnet run -m "$model" -p "The capital of France is a city that" -n 128 --backend cuda
  fi
fi
if [ "$what" != bench ]; then
  if command -v compute-sanitizer >/dev/null; then
    BITNET_REQUIRE_GPU=1 step memcheck timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
      build/tests/test_cuda_forward
    BITNET_REQUIRE_GPU=1 step racecheck timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
      build/tests/test_cuda_forward
  else
    echo "compute-sanitizer: not found"
  fi
fi
tar -C "$BITNET_CACHE_DIR" -czf "$OUT/jitcache.tgz" . 2>/dev/null
exit $status
