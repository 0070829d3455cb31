#!/usr/bin/env bash
# Session 43 call F (one H200): the "llama" architecture (no sub-norms, silu). make test-gpu (test_cuda_forward's
# test_random_silu has a llama model); memcheck on it; a llama file of 2B-4T's shape (gen-model --arch llama) greedy
# on the GPU against the CPU through the CLI, and its decode speed beside 2B-4T's.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL|silu|llama" "$OUT/test-gpu.log" | head -20
BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_silu compute-sanitizer --tool memcheck build/tests/test_cuda_forward 2>&1 | tail -3 | tee "$OUT/memcheck.txt"
build/bitnet gen-model --preset small --seed 5 --arch llama -o /tmp/s_llama.gguf > /dev/null 2>&1
for b in cpu cuda; do
  build/bitnet run -m /tmp/s_llama.gguf -p "The capital of France" -n 64 --temp 0 --backend $b > /tmp/run_$b.txt 2> /tmp/run_$b.err
  echo "$b rc=$?: $(head -c 120 /tmp/run_$b.txt | tr '\n' ' ')"
done
cmp /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "llama small, 64 greedy tokens: the same text on cpu and cuda" | tee "$OUT/llama-run.txt"
build/bitnet gen-model --preset 2b4t --arch llama --tiktoken "$TK" -o /tmp/l2b.gguf > /dev/null 2>&1
build/bitnet eval -m /tmp/l2b.gguf --tokens 128000,791,6864,315,9822,374,12366,11,323,279,6864,315,10057,374 --logits-out /tmp/lc.f32 --backend cpu > /dev/null 2>&1
build/bitnet eval -m /tmp/l2b.gguf --tokens 128000,791,6864,315,9822,374,12366,11,323,279,6864,315,10057,374 --logits-out /tmp/lg.f32 --backend cuda > /dev/null 2>&1
python3 -c "
import numpy as np
c=np.fromfile('/tmp/lc.f32',dtype=np.float32).reshape(14,-1); g=np.fromfile('/tmp/lg.f32',dtype=np.float32).reshape(14,-1)
print('llama 2b4t shape, 14 positions: cuda vs cpu logits rel L2 %.3g, argmax equal %d/14' % (np.linalg.norm(g-c)/np.linalg.norm(c), (g.argmax(1)==c.argmax(1)).sum()))" | tee "$OUT/llama-2b4t-eval.txt"
build/bitnet bench -m /tmp/l2b.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench-llama.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; grep -E "^cuda|kernels" "$OUT/bench-llama.txt" | cut -c1-400
