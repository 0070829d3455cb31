#!/usr/bin/env bash
# Session 45 call D (one H200): call C's A/B again after the attention kernels took isq (the scale) instead of hds;
# tests/test_cuda_forward (padded heads and FFN against the CPU) on this tree.
set -uo pipefail
make -j"$(nproc)" all build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_REQUIRE_GPU=1 build/tests/test_cuda_forward > "$OUT/callD-test_cuda_forward.txt" 2>&1; tail -3 "$OUT/callD-test_cuda_forward.txt"
grep -E 'FAIL' "$OUT/callD-test_cuda_forward.txt" | head -5
OUT_AB=$OUT bash benchmarks/s45/callC.sh
mv "$OUT/callC-ab.txt" "$OUT/callD-ab.txt"
