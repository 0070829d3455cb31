#!/usr/bin/env bash
# Session 43 call E (one H200): test_cuda_forward with test_random_silu's second model, head_dim 96 without GQA
# (bitnet_b1_58-large's heads), then that test under compute-sanitizer memcheck.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" build/impl.o build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
BITNET_REQUIRE_GPU=1 build/tests/test_cuda_forward 2>&1 | tee "$OUT/test_cuda_forward.txt" | tail -12
BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_silu compute-sanitizer --tool memcheck build/tests/test_cuda_forward 2>&1 | tail -4 | tee "$OUT/memcheck.txt"
echo "($((SECONDS - t0)) s)"
