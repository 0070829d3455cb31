#!/usr/bin/env bash
# Prefill on the GPU machine, in one call (branch s3prefill): build; the CPU-agreement tests
# (tests/test_cuda_forward: every row within 1e-5, identical greedy tokens; tests/test_gpu_kernels
# with the GEMM's token tile left to the library and forced to 64 and 128); gen-model 2b4t;
# tools/bench_prefill.c (prefill wall time, each step kind alone, GEMM tiles A/B, attention builds
# checked against a host double attention); `bitnet bench` prefill 512 for this tree and, when
# BASE is a checkout (default: the repository root two levels up, i.e. main on the device), for
# it too in the same call; last the cuda = cpu determinism check. Logs in $OUT (logs.tgz).
#   OUT=$OUT TIKTOKEN=../shared/llama3-tokenizer.tiktoken tools/gpu_prefill.sh [quick|full]
# (full: also `make test-gpu` last, every test binary with a GPU required, in what is left of
# BUDGET seconds (default 380))
set -u
OUT=${OUT:-/tmp/gpu_prefill}
mkdir -p "$OUT/logs"
L=$OUT/logs
BASE=${BASE:-../..}
model=/tmp/2b4t.gguf
step() { # step NAME TIMEOUT CMD...: output to $L/NAME.log, its tail to the screen
  local name=$1 lim=$2; shift 2
  local t0=$(date +%s)
  echo "== $name: $*"
  timeout "$lim" "$@" >"$L/$name.log" 2>&1; local rc=$?
  tail -n "${TAILN:-12}" "$L/$name.log"
  echo "== $name: exit $rc, $(( $(date +%s) - t0 )) s"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step build 240 make -j"$(nproc)" all build/tests/test_cuda_forward build/tests/test_gpu_kernels || { tar czf "$OUT/logs.tgz" -C "$OUT" logs; exit 1; }
cc -O2 -std=c11 -Wall -Wextra -o build/bench_prefill tools/bench_prefill.c -lm -ldl -lpthread 2>&1 | tail -5
if [ -f "$BASE/bitnet.h" ]; then
  make -C "$BASE" BUILD=/tmp/basebuild -j"$(nproc)" /tmp/basebuild/bitnet >"$L/build-base.log" 2>&1 || echo "base build failed"
fi
[ -f $model ] || step gen-model 120 build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o $model
BITNET_REQUIRE_GPU=1 TAILN=4 step test-cuda-forward 200 build/tests/test_cuda_forward
if [ "${1:-}" != quick ]; then
  BITNET_REQUIRE_GPU=1 TAILN=2 step test-gpu-kernels 200 build/tests/test_gpu_kernels
  BITNET_TGEMM_TN=64 BITNET_REQUIRE_GPU=1 TAILN=2 step test-gpu-kernels-tn64 200 build/tests/test_gpu_kernels
  BITNET_TGEMM_TN=128 BITNET_REQUIRE_GPU=1 TAILN=2 step test-gpu-kernels-tn128 200 build/tests/test_gpu_kernels
  BITNET_TGEMM_TN=32 BITNET_REQUIRE_GPU=1 TAILN=2 step test-gpu-kernels-tn32 200 build/tests/test_gpu_kernels
  BITNET_TGEMM_TN=32 BITNET_REQUIRE_GPU=1 TAILN=2 step test-cuda-forward-tn32 200 build/tests/test_cuda_forward
fi
TAILN=30 step bench-prefill 200 build/bench_prefill $model 512
for r in 1 2; do
  TAILN=3 step "bench-$r" 120 build/bitnet bench -m $model --backend cuda --prompt-tokens 512 --gen-tokens 128 --runs 3
  [ -x /tmp/basebuild/bitnet ] && TAILN=3 step "bench-base-$r" 120 /tmp/basebuild/bitnet bench -m $model --backend cuda --prompt-tokens 512 --gen-tokens 128 --runs 3
done
BITNET_TGEMM_TN=64 TAILN=3 step bench-tn64 120 build/bitnet bench -m $model --backend cuda --prompt-tokens 512 --gen-tokens 128 --runs 3
TAILN=8 step determinism 240 build/bitnet bench -m $model --backend all --prompt-tokens 64,512 --gen-tokens 128 --runs 1 --check-determinism --require-gpu
left=$(( ${BUDGET:-380} - SECONDS ))
[ "${1:-}" = full ] && [ $left -gt 30 ] && TAILN=3 step test-gpu $left env ${TIKTOKEN:+BITNET_TIKTOKEN="$PWD/$TIKTOKEN"} make test-gpu
tar czf "$OUT/logs.tgz" -C "$OUT" logs
