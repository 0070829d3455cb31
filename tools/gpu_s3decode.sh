#!/usr/bin/env bash
# Decode speed work (session 3) on the GPU machine, in one call: build; tests/test_cuda_forward;
# `bitnet bench` (2B-4T, batch 1, 64-token prompt, 128 tokens) of this tree and of a base tree
# beside it (before/after from the same run); bench_cuda_forward (step time, per-kernel times, the
# attention's L2 pulls and other builds compared); with `check`, the CPU/GPU determinism bench too.
#   usage: [BASE=dir] [TIKTOKEN=file] [BENCH_BUILDS="opts|opts"] [BENCH_ENVS="VAR=v VAR=v|VAR=v"] tools/gpu_s3decode.sh [quick|check]
#   BASE: a directory with bitnet.h, bitnet_cuda_kernels.h, examples/bitnet.c and
#   tools/bench_cuda_forward.c of the commit to compare with (skipped when absent).
set -u
what=${1:-quick}
OUT=${OUT:-/tmp/gpu_s3decode}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-/tmp/jitcache}
mkdir -p "$BITNET_CACHE_DIR"
status=0
step() { # step NAME CMD...: its output to $OUT/all.log, the tail to the screen
  local name=$1; shift
  echo "== $name: $*" | tee -a "$OUT/all.log"
  local t0=$(date +%s.%N)
  "$@" > "$OUT/$name.tmp" 2>&1; local rc=$?
  cat "$OUT/$name.tmp" >> "$OUT/all.log"
  tail -n ${TAILN:-8} "$OUT/$name.tmp"; rm -f "$OUT/$name.tmp"
  echo "== $name: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s" | tee -a "$OUT/all.log"
  [ $rc -eq 0 ] || status=1
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
step build make -j16 build/bitnet build/tests/test_cuda_forward ${GIT_COMMIT:+GIT_COMMIT="$GIT_COMMIT"} || exit 1
step build-bench cc -O2 -std=c11 -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1
base=${BASE:-}
if [ -n "$base" ] && [ -f "$base/bitnet.h" ]; then
  step build-base sh -c "cc -O2 -std=c11 -o $base/bitnet $base/examples/bitnet.c -lm -ldl -lpthread && cc -O2 -std=c11 -o $base/bench_cuda_forward $base/tools/bench_cuda_forward.c -lm -ldl -lpthread" || base=
else base=; fi
alt= # ALT_SED: this tree with a sed expression applied to bitnet_cuda_kernels.h (another default), benched too
if [ -n "${ALT_SED:-}" ]; then
  alt=/tmp/alt; rm -rf $alt; mkdir -p $alt/examples $alt/tests
  cp bitnet.h bitnet_cuda_kernels.h $alt/ && cp examples/bitnet.c $alt/examples/ && sed -i -e "$ALT_SED" $alt/bitnet_cuda_kernels.h
  cp tests/test_cuda_forward.c tests/harness.h tests/rmodel.h tests/impl.c $alt/tests/
  step build-alt sh -c "diff bitnet_cuda_kernels.h $alt/bitnet_cuda_kernels.h; cc -O2 -std=c11 -o $alt/bitnet $alt/examples/bitnet.c -lm -ldl -lpthread &&
    cc -O2 -std=c11 -c -o $alt/impl.o $alt/tests/impl.c && cc -O2 -std=c11 -o $alt/test_cuda_forward $alt/tests/test_cuda_forward.c $alt/impl.o -lm -ldl -lpthread" || alt=
  [ -n "$alt" ] && TAILN=3 BITNET_REQUIRE_GPU=1 step test-alt timeout 150 $alt/test_cuda_forward
fi
TAILN=12 BITNET_REQUIRE_GPU=1 step test timeout 150 build/tests/test_cuda_forward
tk=${TIKTOKEN:-llama3-tokenizer.tiktoken}
step gen-model build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken "$tk" -o /tmp/2b4t.gguf || exit 1
b="bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens ${PROMPTS:-64} --gen-tokens 128 --runs 5"
[ -n "$base" ] && step bench-base $base/bitnet $b
step bench build/bitnet $b
[ -n "$alt" ] && step bench-alt $alt/bitnet $b
IFS='|' read -r -a envs <<< "${BENCH_ENVS:-}" # tuning variables for more runs of this tree
for e in "${envs[@]}"; do [ -n "$e" ] && step "bench-$e" env $e build/bitnet $b; done
[ -n "$base" ] && step bench-base2 $base/bitnet $b
step bench2 build/bitnet $b
[ -n "$alt" ] && step bench-alt2 $alt/bitnet $b
[ -n "$base" ] && TAILN=14 step fwd-base timeout 60 sh -c "$base/bench_cuda_forward /tmp/2b4t.gguf | head -20"
TAILN=90 step fwd timeout 240 build/bench_cuda_forward /tmp/2b4t.gguf
if [ "$what" = check ]; then
  TAILN=30 step determinism build/bitnet bench -m /tmp/2b4t.gguf --backend all --prompt-tokens 64,512 --gen-tokens 128 \
    --runs 2 --check-determinism --require-gpu
fi
exit $status
