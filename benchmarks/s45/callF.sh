#!/usr/bin/env bash
# Session 45 call F (one H200, the session's last minutes): compute-sanitizer memcheck on test_random_padded
# (the padded heads and FFN on the device).
set -uo pipefail
make -j"$(nproc)" build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
BITNET_TEST_ONLY=test_random_padded BITNET_REQUIRE_GPU=1 timeout 150 "$CS" --tool memcheck --print-limit 20 \
  build/tests/test_cuda_forward > "$OUT/callF-memcheck-padded.txt" 2>&1; echo "rc=$?"
tail -6 "$OUT/callF-memcheck-padded.txt"
