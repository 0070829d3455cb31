#!/usr/bin/env bash
# Session 45 call G (one H200, the last minutes): test_cuda_forward after the CPU attention took any head_dim
# (its CPU side is what the GPU is compared with; test_random_padded now meets the SIMD path at head_dim 100).
set -uo pipefail
make -j"$(nproc)" build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_REQUIRE_GPU=1 timeout 100 build/tests/test_cuda_forward > "$OUT/callG-test_cuda_forward.txt" 2>&1; echo "rc=$?"
grep -E 'FAIL|^ok|passed' "$OUT/callG-test_cuda_forward.txt" | tail -12
