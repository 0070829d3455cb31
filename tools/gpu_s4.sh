#!/usr/bin/env bash
# Session 4 decode A/B on the GPU machine, one call: this tree against a base tree in base/
# (bitnet.h, bitnet_cuda_kernels.h, examples/bitnet.c, tools/bench_cuda_forward.c of the base
# commit). Build both; tests/test_cuda_forward here; 2B-4T (random weights) `bitnet bench
# --backend cuda` of base and this tree interleaved, twice each; bench_cuda_forward of both.
#   OUT=$OUT TIKTOKEN=<tiktoken> tools/gpu_s4.sh [sweep]
set -u
OUT=${OUT:-/tmp/gpu_s4}; mkdir -p "$OUT"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-/tmp/jitcache}; mkdir -p "$BITNET_CACHE_DIR"
step() { # step NAME CMD...: output to $OUT/NAME.txt, its tail to the screen
  local name=$1; shift
  echo "== $name: $*"
  local t0=$(date +%s)
  "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  tail -n ${TAILN:-6} "$OUT/$name.txt"
  echo "== $name: exit $rc, $(( $(date +%s) - t0 )) s"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step build make -j16 build/bitnet build/tests/test_cuda_forward || exit 1
step build-bench cc -O2 -std=c11 -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1
[ "${1:-}" = sweep ] || step build-base sh -c "cc -O2 -std=c11 -o base/bitnet base/examples/bitnet.c -lm -ldl -lpthread &&
  cc -O2 -std=c11 -o base/bench_cuda_forward base/tools/bench_cuda_forward.c -lm -ldl -lpthread" || exit 1
TAILN=12 step test timeout 180 build/tests/test_cuda_forward
model=/tmp/2b4t.gguf
step gen build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o $model
[ "${1:-}" = sweep ] || for r in 1 2; do
  for t in base build; do
    step bench-$t-$r timeout 120 $t/bitnet bench -m $model --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 5
  done
done
[ "${1:-}" = sweep ] || for t in base build; do TAILN=4 step fwd-$t sh -c "timeout 100 $t/bench_cuda_forward $model | grep -A12 'decode, argmax'"; done
# `sweep`: make test-gpu, then `bitnet bench` with the decode attention's positions a range at least
# (BITNET_GPU_ATT_CMIN) from $CMINS.
if [ "${1:-}" = sweep ]; then
  step test-gpu sh -c "env ${TIKTOKEN:+BITNET_TIKTOKEN=$PWD/$TIKTOKEN} make test-gpu 2>&1 | grep -E 'FAIL|passed,'"
  for c in ${CMINS:-16 64 128 256 16}; do
    BITNET_GPU_ATT_CMIN=$c step bench-cmin$c timeout 120 build/bitnet bench -m $model --backend cuda --prompt-tokens 64,512 \
      --gen-tokens 128 --runs 3
  done
fi
