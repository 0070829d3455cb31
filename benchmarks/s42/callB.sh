#!/usr/bin/env bash
# Session 42 call B (one H200), after the block-type embedding lost its fp16 table (rows made from its blocks when
# read; the GPU's host copy and the int8 head made from them): make test-gpu (test_gguf's test_quantized_embedding
# now runs on the GPU too), that test again with BITNET_GPU_HOST_EMB=0 (each decode step uploads its row), the
# converter check for Q6_K and Q4_0 embeddings, and issue 6's decode benchmark (64-token prompt, 128 tokens).
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
mkdir -p "$OUT/conv"
( OUT=$OUT/conv BNC_TGZ=$PWD/.bitnetcpp/bnc.tgz TIKTOKEN=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken BACKENDS="cpu cuda" JOBS=12 \
    EMBD_TYPES="q6_k q4_0" HF=0 bash tools/bitnetcpp_convert_check.sh > /tmp/conv.log 2>&1; echo "convert check exit $? ($((SECONDS - t0)) s)" >> /tmp/conv.log ) &
cv=$!
BITNET_TIKTOKEN=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
BITNET_REQUIRE_GPU=1 BITNET_GPU_HOST_EMB=0 build/tests/test_gguf 2>&1 | grep -E "quantized|passed"
wait $cv
tail -1 /tmp/conv.log
grep -E "VERDICT|embedding|differ|teacher-forced" "$OUT/conv/summary.txt"
build/bitnet gen-model --preset 2b4t --tiktoken .bitnetcpp/llama3-tokenizer.tiktoken -o /tmp/2b4t.gguf > /dev/null 2>&1
build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; grep -v "^#" "$OUT/bench.txt" | tail -12
