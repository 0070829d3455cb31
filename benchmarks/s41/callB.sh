#!/usr/bin/env bash
# Session 41 call B (one H200): decode at long contexts on 2B-4T (bitnet bench), and bench_cuda_forward's
# breakdown of a decode step (every kernel kind timed alone by graph replay).
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
cc -O2 -std=c11 -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o /tmp/2b4t.gguf > /dev/null 2>&1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512,2048,3968 --gen-tokens 64 --runs 2 > "$OUT/bench-long.txt" 2>&1
echo "bench ($((SECONDS - t0)) s)"; tail -14 "$OUT/bench-long.txt"
timeout 300 build/bench_cuda_forward /tmp/2b4t.gguf > "$OUT/bench-cuda-forward.txt" 2>&1
echo "bench_cuda_forward: exit $? ($((SECONDS - t0)) s)"; tail -60 "$OUT/bench-cuda-forward.txt"
