#!/usr/bin/env bash
# Session 44 calls F and G (one H200): make test-gpu on the tree after bitnet__gpu_att_form (F), and again after
# the CPU attention for any head_dim a multiple of 8, which the GPU tests compare with (G).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|worst" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/test-gpu-tail.txt"
