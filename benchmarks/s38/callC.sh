#!/usr/bin/env bash
# session 38 call C: make test-gpu and the determinism bench on main's final tree
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
export BITNET_CACHE_DIR=/tmp/bn-cache-c
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
timeout 300 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -4
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > /dev/null 2>&1; echo "gen-model: $?"
build/bitnet bench -m $M --backend all --prompt-tokens 64 --gen-tokens 64 --runs 1 --check-determinism > $OUT/det.txt 2>&1; echo "determinism: $? $(grep determinism $OUT/det.txt)"
timeout 120 build/bitnet bench -m $M --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > $OUT/bench.txt 2>&1; echo "bench: $?"; cat $OUT/bench.txt | grep -v "^ *$" | head -12
echo "end: $((SECONDS - t0)) s"
