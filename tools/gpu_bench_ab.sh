#!/usr/bin/env bash
# End-to-end A/B on the GPU machine in one call: this tree and others side by side, alternating.
# Each VARIANT is name=DIR or name=DIR:VAR=VALUE[,VAR=VALUE] (DIR: a tree with its own Makefile, e.g.
# .base from `git archive`); each is built, gets its own JIT cache and runs `bitnet bench` ROUNDS
# times over PROMPTS. TEST=1 first runs `make test-gpu` on this tree. Rows in $OUT/bench-NAME-ROUND.txt.
#   OUT=$OUT VARIANTS="base=.base new=. newoff=.:BITNET_X=0" PROMPTS=16,64,512 tools/gpu_bench_ab.sh
set -uo pipefail
out=${OUT:-/tmp/gpu_bench_ab}; mkdir -p "$out"
t0=$SECONDS
model=/tmp/bitnet-2b4t.gguf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
make -j"$(nproc)" all >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
for v in $VARIANTS; do
  dir=${v#*=}; dir=${dir%%:*}
  [ "$dir" = . ] || (cd "$dir" && make -j"$(nproc)" build/bitnet >"$out/build-${v%%=*}.log" 2>&1) || { echo "build of $v failed"; exit 1; }
done
echo "built ($((SECONDS - t0)) s)"
if [ "${TEST:-0}" = 1 ]; then
  timeout "${TEST_TIMEOUT:-300}" make -j"$(nproc)" test-gpu >"$out/test-gpu.log" 2>&1
  echo "make test-gpu: exit $? ($((SECONDS - t0)) s): $(grep -E 'passed, ' "$out/test-gpu.log" | tail -1)"
  grep -E "FAIL" "$out/test-gpu.log" | head -10
fi
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken "${TIKTOKEN:-.dev/llama3-tokenizer.tiktoken}" -o $model >/dev/null 2>&1 || echo "gen-model failed"
run() { # run VARIANT ARGS...: the variant's bitnet with its environment and cache
  local name=${1%%=*} spec=${1#*=} dir envs=; shift
  dir=${spec%%:*}; [ "$spec" != "$dir" ] && envs=${spec#*:}
  timeout 150 env BITNET_CACHE_DIR=/tmp/bn-cache-$name ${envs//,/ } "$dir/build/bitnet" "$@"
}
for v in $VARIANTS; do run "$v" bench -m $model --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 >/dev/null 2>&1; done
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    f=$out/bench-${v%%=*}-$round.txt
    run "$v" bench -m $model --backend cuda --prompt-tokens "${PROMPTS:-16,64,160,512}" \
      --gen-tokens "${GEN:-16}" --runs "${RUNS:-5}" >"$f" 2>&1
    echo "${v%%=*} $round: $(grep '^cuda' "$f" | awk '{printf "%s: %s / %s  ", $2, $5, $6}')"
  done
done
echo "end ($((SECONDS - t0)) s)"
