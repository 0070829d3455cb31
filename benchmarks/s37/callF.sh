#!/usr/bin/env bash
# session 37 call F: make test-gpu on main's final code (chat bookkeeping, argmax, load fixes)
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
timeout 240 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -4
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > /dev/null 2>&1
timeout 120 build/bitnet bench -m $M --backend all --prompt-tokens 64 --gen-tokens 64 --runs 1 --check-determinism > $OUT/det.txt 2>&1; echo "bench: $? $(grep determinism $OUT/det.txt)"
grep "^cuda\|^cpu" $OUT/det.txt
echo "end: $((SECONDS - t0)) s"
