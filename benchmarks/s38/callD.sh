#!/usr/bin/env bash
# session 38 call D: the prefill's last-layer attention on its one row: make test-gpu, memcheck, prefill A/B against main (.base), determinism
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
export BITNET_CACHE_DIR=/tmp/bn-cache-new
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
(cd .base && make -j16 build/bitnet > $OUT/build-base.log 2>&1) || { tail -20 $OUT/build-base.log; exit 1; }
timeout 300 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -4
BITNET_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward > $OUT/mem-tcf.log 2>&1
echo "memcheck test_cuda_forward: exit $? | $(grep -E 'ERROR SUMMARY' $OUT/mem-tcf.log | tail -1) | $(grep 'passed, ' $OUT/mem-tcf.log | tail -1) ($((SECONDS - t0)) s)"
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > /dev/null 2>&1; echo "gen-model: $?"
BITNET_CACHE_DIR=/tmp/bn-cache-base .base/build/bitnet bench -m $M --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /dev/null 2>&1
for round in 1 2; do
  for b in base new; do
    bin=build/bitnet; cache=/tmp/bn-cache-new; [ $b = base ] && bin=.base/build/bitnet && cache=/tmp/bn-cache-base
    BITNET_CACHE_DIR=$cache timeout 100 $bin bench -m $M --backend cuda --prompt-tokens 16,64,160,512,2048 --gen-tokens 16 --runs 5 > $OUT/bench-$b-$round.txt 2>&1
    echo "$b round $round: $(grep '^cuda' $OUT/bench-$b-$round.txt | awk '{printf "%s: %s (%s ms)  ", $2, $5, $7}')"
  done
done
build/bitnet bench -m $M --backend all --prompt-tokens 64,512 --gen-tokens 64 --runs 1 --check-determinism > $OUT/det.txt 2>&1; echo "determinism: $? $(grep determinism $OUT/det.txt)"
echo "end: $((SECONDS - t0)) s"
