#!/usr/bin/env bash
# Session 44 call B (one H200): compute-sanitizer memcheck and racecheck on test_cuda_forward's test_random_hd256
# (head_dim 256: the prefill attention's _h256 build, the decode attention's long form with 256 threads).
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
for tool in memcheck racecheck; do
  BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_hd256 timeout 250 compute-sanitizer --tool $tool build/tests/test_cuda_forward > /tmp/$tool.txt 2>&1
  tail -4 /tmp/$tool.txt > "$OUT/$tool-hd256.txt"
  echo "$tool ($((SECONDS - t0)) s): $(tr '\n' ' ' < "$OUT/$tool-hd256.txt")"
done
