#!/usr/bin/env bash
# Session 45 call A (one H200): make test-gpu on the tree with float files' own scales and padded FFN widths
# (CPU-side changes the GPU tests compare with); issue 6's benchmark on 2B-4T as a regression check; the
# 1bitLLM-3B shape (head_dim 100, FFN 8640) under --backend auto (the CPU, with the reason) and cuda (an error).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callA-test-gpu-tail.txt"
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/callA-bench.txt" 2>&1
grep -iE "decode|prompt|roofline|tokens/s" "$OUT/callA-bench.txt" | head -12
build/bitnet gen-model --preset 1bitllm-3b --type f16 --arch bitnet --vocab spm --tiktoken "$TK" -o /tmp/b3.gguf 2>&1 | tail -1
{ echo "== auto"; build/bitnet run -m /tmp/b3.gguf -p "Hello world" -n 16 --temp 0 --backend auto 2>&1; echo "rc=$?";
  echo "== cuda"; build/bitnet run -m /tmp/b3.gguf -p "Hello world" -n 16 --temp 0 --backend cuda 2>&1; echo "rc=$?"; } > "$OUT/callA-3b.txt"
cat "$OUT/callA-3b.txt" | cut -c1-400
echo "total $((SECONDS - t0)) s"
