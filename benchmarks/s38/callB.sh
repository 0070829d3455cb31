#!/usr/bin/env bash
# session 38 call B: two wgmma groups in flight at 64-token tiles: base (main) / v1 (ring of 5) / new (ring of 8)
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
export BITNET_CACHE_DIR=/tmp/bn-cache-new
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
make -j16 all > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread || exit 1
for t in .base .v1; do (cd $t && make -j16 build/bitnet > $OUT/build$t.log 2>&1 && cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread) || { tail -20 $OUT/build$t.log; exit 1; }; done
echo "built ($((SECONDS - t0)) s)"
timeout 300 make -j16 test-gpu > $OUT/test-gpu.log 2>&1; echo "make test-gpu: exit $? ($((SECONDS - t0)) s)"; for tn in 64; do BITNET_TGEMM_TN=$tn BITNET_REQUIRE_GPU=1 timeout 60 build/tests/test_gpu_kernels > $OUT/tgk-tn$tn.log 2>&1; echo "test_gpu_kernels TN=$tn: $? $(tail -1 $OUT/tgk-tn$tn.log)"; done
grep -E "^FAIL|  FAIL|passed, " $OUT/test-gpu.log | tail -4
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 --tiktoken .dev/llama3-tokenizer.tiktoken -o $M > /dev/null 2>&1; echo "gen-model: $?"
bin() { case $1 in base) echo .base/build/$2;; v1) echo .v1/build/$2;; new) echo build/$2;; esac; }
for b in base v1 new; do BITNET_CACHE_DIR=/tmp/bn-cache-$b $(bin $b bitnet) bench -m $M --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /dev/null 2>&1; done
for round in 1 2; do
  for b in base v1 new; do
    BITNET_CACHE_DIR=/tmp/bn-cache-$b timeout 100 $(bin $b bitnet) bench -m $M --backend cuda --prompt-tokens 8,16,64,160,512 --gen-tokens 16 --runs 5 > $OUT/bench-$b-$round.txt 2>&1
    echo "$b round $round: $(grep '^cuda' $OUT/bench-$b-$round.txt | awk '{printf "%s: %s (%s ms)  ", $2, $5, $7}')"
  done
done
echo "bench done ($((SECONDS - t0)) s)"
for shape in "13824 2560" "2560 6912" "3840 2560" "2560 2560"; do
  for m in 8 16 64 160; do
    line="$shape M=$m:"
    for b in base v1 new; do
      t=$(BITNET_CACHE_DIR=/tmp/bn-cache-$b timeout 20 $(bin $b gemm_once) $shape $m 40 2>&1 | tail -1 | awk '{print $5}')
      line="$line $b $t |"
    done
    echo "$line"
  done
done | tee $OUT/gemm_once.txt
echo "end: $((SECONDS - t0)) s"
