#!/usr/bin/env bash
# session 37 call D: make test-gpu and memcheck on the cleanup + last-layer trim; prefill A/B against e707dda
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
(cd .base && make -j16 build/bitnet > $OUT/build-base.log 2>&1) || { tail -20 $OUT/build-base.log; exit 1; }
timeout 240 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -3
BITNET_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward > $OUT/mem-tcf.log 2>&1
echo "memcheck test_cuda_forward: exit $? | $(grep -E 'ERROR SUMMARY' $OUT/mem-tcf.log | tail -1) | $(grep 'passed, ' $OUT/mem-tcf.log | tail -1) ($((SECONDS - t0)) s)"
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > /dev/null 2>&1; echo "gen-model: $?"
for round in 1 2; do
  for b in base new; do
    bin=build/bitnet; [ $b = base ] && bin=.base/build/bitnet
    timeout 100 $bin bench -m $M --backend cuda --prompt-tokens 16,64,160,512 --gen-tokens 32 --runs 5 > $OUT/bench-$b-$round.txt 2>&1
    echo "$b round $round: $(grep '^cuda' $OUT/bench-$b-$round.txt | awk '{printf "%s: %s / %s  ", $2, $5, $6}')"
  done
done
build/bitnet bench -m $M --backend all --prompt-tokens 64 --gen-tokens 64 --runs 1 --check-determinism > $OUT/det.txt 2>&1; echo "determinism: $? $(grep determinism $OUT/det.txt)"
echo "end: $((SECONDS - t0)) s"
