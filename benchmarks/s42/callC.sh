#!/usr/bin/env bash
# Session 42 call C (one H200): the block-type embedding's GPU host path under the sanitizers: test_gguf (its
# test_quantized_embedding runs on the GPU) under compute-sanitizer memcheck, and built with AddressSanitizer and
# UBSan, with and without BITNET_GPU_HOST_EMB=0.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o build/tests/test_gguf > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
cc $san -std=c11 -o /tmp/test_gguf_asan tests/test_gguf.c tests/impl.c -lm -ldl -lpthread || exit 1
echo "built ($((SECONDS - t0)) s)"
BITNET_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_gguf > "$OUT/memcheck-test_gguf.log" 2>&1
echo "memcheck test_gguf: exit $? ($((SECONDS - t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-test_gguf.log" | tail -1); $(grep -E 'passed,' "$OUT/memcheck-test_gguf.log" | tail -1)"
for he in 1 0; do
  ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 BITNET_REQUIRE_GPU=1 BITNET_GPU_HOST_EMB=$he /tmp/test_gguf_asan > "/tmp/asan-$he.log" 2>&1
  echo "asan+ubsan test_gguf, HOST_EMB=$he: exit $? ($((SECONDS - t0)) s): $(grep -E 'passed,' "/tmp/asan-$he.log" | tail -1) $(grep -m1 -E 'ERROR|runtime error' "/tmp/asan-$he.log")"
done
cat /tmp/asan-1.log /tmp/asan-0.log > "$OUT/asan-test_gguf.log"
