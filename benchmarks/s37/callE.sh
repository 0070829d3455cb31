#!/usr/bin/env bash
# session 37 call E: make test-gpu on the kernel-fetch helper; bench_cuda_forward (its rebuilt-module and PDL paths)
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
cc -O2 -std=c11 -Wall -Wextra -o build/bench_cuda_forward tools/bench_cuda_forward.c -lm -ldl -lpthread 2>&1 | tail -3
timeout 240 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -3
BENCH_BUILDS="-DBF_NQ=4" timeout 300 build/bench_cuda_forward > $OUT/bcf.txt 2>&1; echo "bench_cuda_forward: exit $? ($((SECONDS - t0)) s)"
grep -E "tokens/s|build|without|with programmatic|agree|FAIL|error" $OUT/bcf.txt | head -30
