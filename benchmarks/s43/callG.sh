#!/usr/bin/env bash
# Session 43 call G (one H200), the final tree after review: make test-gpu, and issue 6's benchmark on 2B-4T.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf > /dev/null 2>&1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; grep -E "^cuda|roofline|prompt 64:" "$OUT/bench.txt"
