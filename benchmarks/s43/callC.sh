#!/usr/bin/env bash
# Session 43 call C (one H200): every glu kernel now built once for each activation (template argument; silu's
# named ..._silu). make test-gpu; memcheck on the silu tests; gemm_once GLU=1 / 2 against main before (7ab90a3,
# in .base/), alternating, two rounds; prefill and decode on 2B-4T against .base; bitnet.cpp teacher-forced again.
set -uo pipefail
t0=$SECONDS
S=benchmarks/s43
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread
(cd .base && mkdir -p build && cp ../tools/gemm_once.c tools/ && make -j"$(nproc)" build/bitnet > /tmp/base-build.log 2>&1 &&
 cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread) || { echo "base build failed"; tail -20 /tmp/base-build.log; }
echo "built ($((SECONDS - t0)) s)"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|silu|worst" "$OUT/test-gpu.log" | head -20
( BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_silu compute-sanitizer --tool memcheck build/tests/test_cuda_forward 2>&1 | tail -3
  for t in test_gpu_ternary_gemv test_gpu_ternary_gemv_splits; do
    BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=$t compute-sanitizer --tool memcheck build/tests/test_gpu_kernels 2>&1 | tail -3; done
  BITNET_REQUIRE_GPU=1 BITNET_TEST_FORM=0 BITNET_TEST_ONLY=test_gpu_ternary_gemm compute-sanitizer --tool memcheck build/tests/test_gpu_kernels 2>&1 | tail -3
) > "$OUT/memcheck.txt" 2>&1
echo "memcheck ($((SECONDS - t0)) s):"; grep -E "ERROR SUMMARY|passed" "$OUT/memcheck.txt"
for r in 1 2; do
  for sh in "13824 2560 512" "13824 2560 96" "13824 2560 8" "13824 2560 1" "2560 6912 512"; do
    for t in . .base; do echo "$t $(cd $t && GLU=1 build/gemm_once $sh 40)"; done
    echo ". $(GLU=2 build/gemm_once $sh 40)"
  done
done > "$OUT/gemm-glu.txt" 2>&1
echo "gemm ($((SECONDS - t0)) s):"; cat "$OUT/gemm-glu.txt"
for a in bitnet-b1.58 bitnet; do
  build/bitnet gen-model --preset 2b4t --seed 9 --arch $a --tiktoken "$TK" -o /tmp/b2_$a.gguf > /dev/null 2>&1
done
{
for r in 1 2; do
echo "== this tree, bitnet-b1.58 (relu^2)"; build/bitnet bench -m /tmp/b2_bitnet-b1.58.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 64 --runs 3 2>&1 | grep -E "^cuda"
echo "== main before (7ab90a3), bitnet-b1.58"; .base/build/bitnet bench -m /tmp/b2_bitnet-b1.58.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 64 --runs 3 2>&1 | grep -E "^cuda"
done
echo "== this tree, bitnet (silu)"; build/bitnet bench -m /tmp/b2_bitnet.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 64 --runs 3 2>&1 | grep -E "^cuda|kernels"
} > "$OUT/bench.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; cat "$OUT/bench.txt"
f=$S/bitnetcpp-greedy-2b4t-seed9-arch-bitnet.txt
P=$(sed -n 's/^prompt: //p' $f); G=$(sed -n 's/^gen: //p' $f)
build/bitnet eval -m /tmp/b2_bitnet.gguf --tokens $P,$G --logits-out /tmp/ev.f32 --backend cuda --head f16 > /dev/null 2>&1
python3 - /tmp/ev.f32 "$P" "$G" <<'PY'
import sys, numpy as np
f, p, g = sys.argv[1:4]
P = p.split(","); G = [int(x) for x in g.split(",")]
L = np.fromfile(f, dtype=np.float32).reshape(len(P) + len(G), -1)
am = L[len(P) - 1:len(P) - 1 + len(G)].argmax(1)
print("arch bitnet, cuda, head f16: teacher-forced argmax = bitnet.cpp's greedy at %d/%d steps" % (int((am == np.array(G)).sum()), len(G)))
PY
echo "($((SECONDS - t0)) s)"
