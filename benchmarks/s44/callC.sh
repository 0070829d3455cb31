#!/usr/bin/env bash
# Session 44 call C (one H200), the final tree: make test-gpu; the falcon3-1b file through --chat in Falcon 3's
# template on both backends; issue 6's benchmark on 2B-4T.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|worst" "$OUT/test-gpu.log" | head
build/bitnet gen-model --preset falcon3-1b --arch llama --pre falcon3 --tiktoken "$TK" -o /tmp/f3.gguf > /dev/null 2>&1
for b in cpu cuda; do
  build/bitnet run -m /tmp/f3.gguf --chat --chat-template falcon3 -p "What is the capital of France?" -n 48 --temp 0 --backend $b > /tmp/chat_$b.txt 2> /tmp/chat_$b.err
  echo "$b rc=$?: $(head -c 100 /tmp/chat_$b.txt | tr '\n' ' ')"
done
cmp /tmp/chat_cpu.txt /tmp/chat_cuda.txt && echo "falcon3-1b shape, --chat --chat-template falcon3, 48 greedy tokens: the same text on cpu and cuda" | tee "$OUT/f3-chat.txt"
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf > /dev/null 2>&1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
echo "bench 2b4t ($((SECONDS - t0)) s):"; grep -E "^cuda|roofline|prompt (64|512):" "$OUT/bench.txt" | cut -c1-300
