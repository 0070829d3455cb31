#!/usr/bin/env bash
# Session 43 call D (one H200), the final tree: make test-gpu; a model with the silu FFN and a SentencePiece
# vocabulary (gen-model --preset small --arch bitnet --vocab spm) greedy on the GPU against the CPU through the
# CLI; issue 6's decode benchmark on 2B-4T.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|silu|spm" "$OUT/test-gpu.log" | head -20
build/bitnet gen-model --preset small --seed 5 --arch bitnet --vocab spm -o /tmp/s_spm.gguf > /dev/null 2>&1
for b in cpu cuda; do
  build/bitnet run -m /tmp/s_spm.gguf -p "The capital of France" -n 64 --temp 0 --backend $b > /tmp/run_$b.txt 2> /tmp/run_$b.err
  echo "$b rc=$?: $(head -c 200 /tmp/run_$b.txt | tr '\n' ' ')"; tail -1 /tmp/run_$b.err
done
cmp /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "64 greedy tokens: the same text on cpu and cuda" | tee "$OUT/spm-run.txt"
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf > /dev/null 2>&1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; grep -v "^#" "$OUT/bench.txt" | tail -8
