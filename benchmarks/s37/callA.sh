#!/usr/bin/env bash
# session 37 call A: validation of main (helper change), our bench, HF anchor
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
pip list 2>/dev/null | grep -i -E "^(torch|transformers|xformers|safetensors|numpy) " 
t0=$SECONDS
OUT=$OUT/full timeout 260 tools/gpu_kernels.sh full 2>&1 | tail -40
echo "validation: $((SECONDS - t0)) s"
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > $OUT/gen-model.txt 2>&1; echo "gen-model: $? ($((SECONDS - t0)) s)"
timeout 90 build/bitnet bench -m $M --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > $OUT/bench.txt 2>&1; echo "bench: $?"
grep -v "^bitnet info" $OUT/bench.txt | tail -25
echo "before hf: $((SECONDS - t0)) s"
timeout $((570 - SECONDS + t0)) python3 tools/hf_decode_speed.py --gguf $M --out $OUT/hf 2>&1 | grep -v Warning | tail -30
echo "end: $((SECONDS - t0)) s"
