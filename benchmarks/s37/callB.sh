#!/usr/bin/env bash
# session 37 call B: make test-gpu on the helper change; decode attention under the sanitizers
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
timeout 240 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^(FAIL|== )|  FAIL|passed, " $OUT/test-gpu.log | grep -v "^== " | tail -14
python3 -c "import xformers" 2>&1 | tail -1
export BITNET_REQUIRE_GPU=1
BITNET_TEST_ONLY=test_random_hd128_gqa4 timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 build/tests/test_cuda_forward > $OUT/race-tcf.log 2>&1
echo "racecheck test_random_hd128_gqa4: exit $? | $(grep -E 'RACECHECK SUMMARY' $OUT/race-tcf.log | tail -1) | $(grep 'passed, ' $OUT/race-tcf.log | tail -1) ($((SECONDS - t0)) s)"
timeout $((575 - SECONDS + t0)) compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward > $OUT/mem-tcf.log 2>&1
echo "memcheck test_cuda_forward: exit $? | $(grep -E 'ERROR SUMMARY' $OUT/mem-tcf.log | tail -1) | $(grep 'passed, ' $OUT/mem-tcf.log | tail -1) ($((SECONDS - t0)) s)"
