#!/usr/bin/env bash
# Session 42 call A (one H200): bitnet.cpp's converter check with the embedding in llama.cpp's block types
# (tools/bitnetcpp_convert_check.sh, EMBD_TYPES: llama-quantize --token-embedding-type T, ggml's to_float against
# bitnet_dequantize, greedy tokens against bitnet.cpp on cpu and cuda), beside make test-gpu.
# bitnet.cpp is the fetched tarball .bitnetcpp/bnc.tgz (carried, never committed).
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
mkdir -p "$OUT/conv"
( OUT=$OUT/conv BNC_TGZ=$PWD/.bitnetcpp/bnc.tgz TIKTOKEN=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken BACKENDS="cpu cuda" JOBS=12 \
    bash tools/bitnetcpp_convert_check.sh > /tmp/conv.log 2>&1; echo "convert check exit $? ($((SECONDS - t0)) s)" >> /tmp/conv.log ) &
cv=$!
BITNET_TIKTOKEN=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
wait $cv
tail -1 /tmp/conv.log
grep -E "VERDICT|embedding|differ|teacher-forced|bitnet.cpp greedy" "$OUT/conv/summary.txt"
