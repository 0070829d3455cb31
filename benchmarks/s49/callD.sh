#!/usr/bin/env bash
# Session 49 call D (one H200): test_gpu_kernels with test_gpu_penalize on the kernel's new arguments (the logit bias, the
# frequency and presence penalties, the counts put back to zero), then the same binary under compute-sanitizer memcheck.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" build/tests/test_gpu_kernels > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_REQUIRE_GPU=1 build/tests/test_gpu_kernels > "$OUT/callD-test_gpu_kernels.txt" 2>&1
echo "test_gpu_kernels rc $? ($((SECONDS - t0)) s): $(tail -1 "$OUT/callD-test_gpu_kernels.txt")"; grep -a FAIL "$OUT/callD-test_gpu_kernels.txt" | head
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
BITNET_REQUIRE_GPU=1 timeout 300 "$CS" --tool memcheck --error-exitcode 9 build/tests/test_gpu_kernels > "$OUT/callD-memcheck.txt" 2>&1
echo "memcheck test_gpu_kernels rc $? ($((SECONDS - t0)) s): $(grep -a "ERROR SUMMARY" "$OUT/callD-memcheck.txt" | tail -1); $(grep -a "passed," "$OUT/callD-memcheck.txt" | tail -1)"
BITNET_REQUIRE_GPU=1 timeout 200 "$CS" --tool racecheck --error-exitcode 9 build/tests/test_gpu_kernels > "$OUT/callD-racecheck.txt" 2>&1
echo "racecheck test_gpu_kernels rc $? ($((SECONDS - t0)) s): $(grep -a "RACECHECK SUMMARY\|ERROR SUMMARY" "$OUT/callD-racecheck.txt" | tail -1); $(grep -a "passed," "$OUT/callD-racecheck.txt" | tail -1)"
echo "total $((SECONDS - t0)) s"
