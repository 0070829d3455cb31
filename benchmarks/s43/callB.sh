#!/usr/bin/env bash
# Session 43 call B (one H200): call A found the GLU GEMMs slower with silu inlined into bn_glu (relu^2, M = 512:
# 44.7 against 40.2 us). This tree has silu out of line (bn_silu_mul, __noinline__): gemm_once, GLU=1 and 2,
# against main before (7ab90a3, in .base/), alternating, three rounds.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" build/bitnet build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread
(cd .base && cp ../tools/gemm_once.c tools/ && cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread)
echo "built ($((SECONDS - t0)) s)"
for r in 1 2 3; do
  for sh in "13824 2560 512" "13824 2560 96" "13824 2560 8" "13824 2560 1" "2560 6912 512"; do
    for t in . .base; do echo "$t $(cd $t && GLU=1 build/gemm_once $sh 40)"; done
    echo ". $(GLU=2 build/gemm_once $sh 40)"
  done
done 2>&1 | tee "$OUT/gemm-glu.txt"
echo "($((SECONDS - t0)) s)"
