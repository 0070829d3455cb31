#!/usr/bin/env bash
# Session 46 call J (one H200): make test-gpu on the final GPU code (the mapped host memory's error path
# restructured, a state read keeping the device's logits).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -cE 'state of 37' "$OUT/test-gpu.log"
tail -5 "$OUT/test-gpu.log" > "$OUT/callJ-test-gpu-tail.txt"
