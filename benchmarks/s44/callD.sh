#!/usr/bin/env bash
# Session 44 call D (one H200): the tools session 43 left unrun on the GPU after their gemv_sub change, and the
# falcon3-1b file (head_dim 256, llama) op by op: tools/fwd_divergence.c (every GPU kernel of the prefill and decode
# paths against the CPU's op on the same inputs) on hd64, hd128, tiny.gguf and the falcon3-1b file;
# tools/bench_cuda_forward.c on 2B-4T's shapes.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
mkdir -p build
make -j"$(nproc)" build/bitnet > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o build/fwd_divergence tools/fwd_divergence.c -lm -ldl -lpthread || exit 1
cc -O2 -std=c11 -Wall -Wextra -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread || exit 1
build/bitnet gen-model --preset falcon3-1b --arch llama --pre falcon3 --tiktoken "$TK" -o /tmp/f3.gguf > /dev/null 2>&1
for m in hd64 hd128 tests/data/tiny.gguf /tmp/f3.gguf; do
  timeout 150 build/fwd_divergence "$m" --n-pre 40 --n-dec 20 --greedy 16 > "$OUT/div-${m##*/}.txt" 2>&1
  echo "fwd_divergence $m rc=$? ($((SECONDS - t0)) s)"; grep -iE "op check|MISMATCH|ATTENTION|greedy" "$OUT/div-${m##*/}.txt" | head -6
done
timeout $((580 - (SECONDS - t0))) build/bench_cuda_forward > "$OUT/bench_cuda_forward.txt" 2>&1
echo "bench_cuda_forward rc=$? ($((SECONDS - t0)) s)"; grep -iE "tokens/s|agree|greedy|MB" "$OUT/bench_cuda_forward.txt" | head -20
