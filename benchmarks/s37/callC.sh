#!/usr/bin/env bash
# session 37 call C: bench with its roofline line, and the transformers anchor, in one call
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > $OUT/gen-model.txt 2>&1; echo "gen-model: $? ($((SECONDS - t0)) s)"
timeout 120 build/bitnet bench -m $M --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > $OUT/bench.txt 2>&1; echo "bench: $?"
grep -v "^bitnet \(info\|debug\)" $OUT/bench.txt
echo "before hf: $((SECONDS - t0)) s"
timeout $((560 - SECONDS + t0)) python3 tools/hf_decode_speed.py --gguf $M --out $OUT/hf 2>&1 | grep -v -i "warn\|Loading weights" | tail -12
echo "end: $((SECONDS - t0)) s"
