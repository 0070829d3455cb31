#!/usr/bin/env bash
# Decode speed work on the GPU machine, in one call: build, the GPU forward test, the 2B-4T forward
# benchmark (per-kernel times, with and without programmatic dependent launch), `bitnet bench`
# through bitnet_generate, and an nsys kernel summary of the decode when nsys is there.
#   usage: [GIT_COMMIT=hash] tools/gpu_decode.sh [quick|full|final]
#   full: also make test-gpu and compute-sanitizer; final: the receipt of `bitnet bench` (CUDA,
#   64- and 512-token prompts, 128 tokens) verified with --min-tps 800, and the test again with
#   BITNET_GPU_GEMV_ITEMS=4 (a tuning knob the benchmark compares; the default is 5).
# The tiktoken file: llama3-tokenizer.tiktoken beside this checkout's root or in ../shared/data.
set -u
what=${1:-quick}
OUT=${OUT:-/tmp/gpu_decode}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-$PWD/.jitcache}
mkdir -p "$BITNET_CACHE_DIR"
status=0
step() { # step NAME CMD...: its output to $OUT/NAME.log, the tail to the screen
  local name=$1; shift
  echo "== $name: $*"
  local t0=$(date +%s.%N)
  "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  tail -n ${TAILN:-25} "$OUT/$name.log"
  echo "== $name: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  [ $rc -eq 0 ] || status=1
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
rm -f build/bitnet # the commit is baked in when it is built
step build make -j16 all build/tests/test_cuda_forward ${GIT_COMMIT:+GIT_COMMIT="$GIT_COMMIT"} || exit 1
step build-bench cc -O2 -std=c11 -Wall -Wextra -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1
TAILN=12 BITNET_REQUIRE_GPU=1 step test build/tests/test_cuda_forward
tk=llama3-tokenizer.tiktoken; [ -f "$tk" ] || tk=../shared/data/llama3-tokenizer.tiktoken
step gen-model build/bitnet gen-model --preset 2b4t --tiktoken "$tk" -o /tmp/2b4t.gguf || exit 1
if [ "$what" = final ]; then
  TAILN=6 BITNET_REQUIRE_GPU=1 BITNET_GPU_GEMV_ITEMS=4 step test-items4 build/tests/test_cuda_forward
  step receipt build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 5 \
    --require-gpu --receipt "$OUT/h100-2b4t-decode.cuda.json"
  step verify build/bitnet verify-receipt "$OUT/h100-2b4t-decode.cuda.json" --require-gpu-kernels --min-tps 800 --max-p95-ms 1.5
fi
step bench-gen build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64 --gen-tokens 128 --runs 5
BITNET_GPU_PDL=0 step bench-gen-nopdl build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64 --gen-tokens 128 --runs 5
BITNET_HEAD=f16 step bench-gen-f16head build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 5
step run build/bitnet run -m /tmp/2b4t.gguf -p "The capital of France is a city that" -n 128 --backend cuda --temp 0
TAILN=70 step bench-fwd timeout 200 build/bench_cuda_forward /tmp/2b4t.gguf
if command -v nsys >/dev/null && [ "$what" = nsys ]; then
  step nsys timeout 120 nsys profile -o /tmp/dec --force-overwrite true --cuda-graph-trace=node \
    build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64 --gen-tokens 32 --runs 1
  TAILN=40 step nsys-stats nsys stats -r cuda_gpu_kern_sum -f csv -o /tmp/decstats /tmp/dec.nsys-rep
  cp /tmp/decstats*.csv "$OUT/" 2>/dev/null
else
  echo "nsys: not found"
fi
if [ "$what" = full ]; then
  TAILN=4 step test-gpu timeout 150 make test-gpu
  TAILN=6 BITNET_REQUIRE_GPU=1 step memcheck timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward
  TAILN=6 BITNET_REQUIRE_GPU=1 step racecheck timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 build/tests/test_cuda_forward
fi
exit $status
