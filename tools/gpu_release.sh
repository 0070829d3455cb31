#!/usr/bin/env bash
# The release check on the GPU machine, in one call: build, make test-gpu, then the end-to-end
# bench of a 2b4t-shaped model on cuda and cpu with receipts, each verified with release gates.
# Usage (GPU machine, repo root): TIKTOKEN=path/to/llama3-tokenizer.tiktoken tools/gpu_release.sh
# Writes logs and receipts to $OUT (default ./out).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
TIKTOKEN=${TIKTOKEN:-../shared/data/llama3-tokenizer.tiktoken}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
make -j"$(nproc)" all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
build/bitnet devices | tee "$OUT/devices.txt"
( time make test-gpu ) >"$OUT/test-gpu.log" 2>&1; echo "test-gpu: $(grep -E '^[0-9]+ passed' "$OUT/test-gpu.log" | tail -1)"
grep -E "^FAIL|  FAIL" "$OUT/test-gpu.log" | head -20
build/bitnet gen-model --preset 2b4t --tiktoken "$TIKTOKEN" -o /tmp/2b4t.gguf >"$OUT/gen.log" 2>&1 || { tail "$OUT/gen.log"; exit 1; }
build/bitnet bench -m /tmp/2b4t.gguf --backend all --prompt-tokens 64,512 --gen-tokens 128 --runs 3 \
  --check-determinism --require-gpu --json "$OUT/bench.json" --receipt "$OUT/h100-2b4t.json" 2>&1 | tee "$OUT/bench.log"
for r in "$OUT"/h100-2b4t.cuda.json; do
  build/bitnet verify-receipt "$r" --require-gpu-kernels --min-tps 1000 --max-p95-ms 5 --max-wall-ms 2000; echo "verify cuda: $?"
done
for r in "$OUT"/h100-2b4t.cpu.json; do
  build/bitnet verify-receipt "$r" --min-tps 10 --max-wall-ms 60000; echo "verify cpu: $?"
done
