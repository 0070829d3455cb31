#!/usr/bin/env bash
# One call on the GPU machine for the lead's validation of main: build, make test-gpu, then the
# 2b4t bench (cuda and cpu, determinism check). Logs in $OUT.
#   OUT=/tmp/o TIKTOKEN=.devsync/shared/llama3-tokenizer.tiktoken tools/gpu_validate.sh
set -uo pipefail
out=${OUT:-/tmp/validate-out}; mkdir -p "$out"
make -j"$(nproc)" all >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
env ${TIKTOKEN:+BITNET_TIKTOKEN="$PWD/$TIKTOKEN"} make test-gpu >"$out/test-gpu.log" 2>&1
echo "make test-gpu: $(tail -1 "$out/test-gpu.log")"; grep -E "FAIL" "$out/test-gpu.log" | head -20
model=/tmp/2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o $model >/dev/null 2>&1 || echo "gen-model failed"
build/bitnet bench -m $model --backend all --prompt-tokens 64,512 --gen-tokens 128 --runs ${RUNS:-2} \
  --check-determinism --require-gpu 2>&1 | tee "$out/bench.txt" | tail -25
