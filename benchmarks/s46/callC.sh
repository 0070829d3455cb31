#!/usr/bin/env bash
# Session 46 calls C and D (one H200): where the 2B-4T load goes on cuda and on the CPU (tools/bench_load.c;
# call D with the progress stamps inside the GPU upload).
set -uo pipefail
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" build/bitnet > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o /tmp/bench_load tools/bench_load.c -lm -ldl -lpthread || exit 1
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
{ nproc; /tmp/bench_load /tmp/2b4t.gguf cuda 4; /tmp/bench_load /tmp/2b4t.gguf cpu 2
  BITNET_CUDA_CACHE=0 /tmp/bench_load /tmp/2b4t.gguf cuda 1; } > "$OUT/call${CALL:-C}-load.txt" 2>&1
cat "$OUT/call${CALL:-C}-load.txt"
