#!/usr/bin/env bash
# Session 43 call A (one H200): the "bitnet" architecture's silu(gate) * up FFN.
#  - make test-gpu (test_gpu_kernels' silu GLU cases, bit for bit against bitnet_glu; test_cuda_forward's
#    test_random_silu), and compute-sanitizer memcheck on the silu tests;
#  - the GLU GEMM/GEMV (gemm_once, GLU=1 relu^2) against main before (7ab90a3, unpacked in .base/), alternating,
#    and GLU=2 (silu) on this tree;
#  - issue 6's decode benchmark on 2B-4T (relu^2), and on the same shape with --arch bitnet (silu);
#  - our CUDA eval teacher-forced on bitnet.cpp's greedy tokens (its CPU build, run on the session machine, files
#    beside this script) from gen-model --preset 2b4t --seed 9, --arch bitnet and bitnet-b1.58.
set -uo pipefail
t0=$SECONDS
S=benchmarks/s43
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread
(cd .base && cp ../tools/gemm_once.c tools/ && make -j"$(nproc)" build/bitnet > /tmp/base-build.log 2>&1 &&
 cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread) || { echo "base build failed"; tail -20 /tmp/base-build.log; }
echo "built ($((SECONDS - t0)) s)"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|silu|worst" "$OUT/test-gpu.log" | head -20
( BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_silu compute-sanitizer --tool memcheck build/tests/test_cuda_forward 2>&1 | tail -4
  BITNET_REQUIRE_GPU=1 BITNET_TEST_FORM=0 BITNET_TEST_ONLY=test_gpu_ternary_gemm compute-sanitizer --tool memcheck build/tests/test_gpu_kernels 2>&1 | tail -4
) > "$OUT/memcheck.txt" 2>&1
echo "memcheck ($((SECONDS - t0)) s):"; cat "$OUT/memcheck.txt"
{
for r in 1 2; do
  for sh in "13824 2560 512" "13824 2560 96" "13824 2560 8" "13824 2560 1"; do
    for t in . .base; do echo "$t $(cd $t && GLU=1 build/gemm_once $sh 40)"; done
    echo ". $(GLU=2 build/gemm_once $sh 40)"
  done
done
} > "$OUT/gemm-glu.txt" 2>&1
echo "gemm A/B ($((SECONDS - t0)) s):"; cat "$OUT/gemm-glu.txt"
for a in bitnet-b1.58 bitnet; do
  build/bitnet gen-model --preset 2b4t --seed 9 --arch $a --tiktoken "$TK" -o /tmp/b2_$a.gguf > /dev/null 2>&1
done
{
echo "== this tree, bitnet-b1.58 (relu^2)"; build/bitnet bench -m /tmp/b2_bitnet-b1.58.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -v "^#"
echo "== main before (7ab90a3), bitnet-b1.58"; .base/build/bitnet bench -m /tmp/b2_bitnet-b1.58.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -v "^#"
echo "== this tree, bitnet (silu)"; build/bitnet bench -m /tmp/b2_bitnet.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -v "^#"
} > "$OUT/bench.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; cat "$OUT/bench.txt" | tail -30
for a in bitnet bitnet-b1.58; do
  f=$S/bitnetcpp-greedy-2b4t-seed9-arch-$a.txt
  P=$(sed -n 's/^prompt: //p' $f); G=$(sed -n 's/^gen: //p' $f)
  for h in f16 q8; do
    build/bitnet eval -m /tmp/b2_$a.gguf --tokens $P,$G --logits-out /tmp/ev.f32 --backend cuda --head $h > /dev/null 2>&1
    build/bitnet eval -m /tmp/b2_$a.gguf --tokens $P,$G --logits-out /tmp/evc.f32 --backend cpu --head $h > /dev/null 2>&1
    python3 - /tmp/ev.f32 /tmp/evc.f32 "$P" "$G" "$a $h" <<'PY'
import sys, numpy as np
f, fc, p, g, label = sys.argv[1:6]
P = p.split(","); G = [int(x) for x in g.split(",")]
L = np.fromfile(f, dtype=np.float32).reshape(len(P) + len(G), -1)
C = np.fromfile(fc, dtype=np.float32).reshape(len(P) + len(G), -1)
am = L[len(P) - 1:len(P) - 1 + len(G)].argmax(1)
same = int((am == np.array(G)).sum())
rel = float(np.linalg.norm(L - C) / np.linalg.norm(C))
print("%s: cuda teacher-forced argmax = bitnet.cpp's greedy at %d/%d steps; cuda vs cpu logits rel L2 %.3g; argmax cuda = cpu at %d/%d"
      % (label, same, len(G), rel, int((L.argmax(1) == C.argmax(1)).sum()), len(L)))
PY
  done
done > "$OUT/teacher.txt" 2>&1
echo "teacher-forced ($((SECONDS - t0)) s):"; cat "$OUT/teacher.txt"
