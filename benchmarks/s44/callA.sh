#!/usr/bin/env bash
# Session 44 call A (one H200): head_dim 256 on the GPU (Falcon 3's heads). test_cuda_forward (its test_random_hd256:
# a "llama" model of head_dim 256, 3 query heads a kv head, CPU against GPU), memcheck and racecheck on it; a
# falcon3-1b-shaped file greedy on both backends through the CLI, its logits, its speed; make test-gpu; 2B-4T's speed.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o $(ls tests/test_*.c | sed "s#tests/#build/tests/#; s#\.c$##") > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "built ($((SECONDS - t0)) s)"
BITNET_REQUIRE_GPU=1 build/tests/test_cuda_forward > "$OUT/test_cuda_forward.txt" 2>&1
echo "test_cuda_forward ($((SECONDS - t0)) s): $(tail -1 "$OUT/test_cuda_forward.txt")"; grep -E "FAIL|worst|hd256" "$OUT/test_cuda_forward.txt" | head
for tool in memcheck racecheck; do
  BITNET_REQUIRE_GPU=1 BITNET_TEST_ONLY=test_random_hd256 timeout 150 compute-sanitizer --tool $tool build/tests/test_cuda_forward 2>&1 | tail -3 > "$OUT/$tool-hd256.txt"
  echo "$tool ($((SECONDS - t0)) s): $(tr '\n' ' ' < "$OUT/$tool-hd256.txt")"
done
build/bitnet gen-model --preset falcon3-1b --arch llama --pre falcon3 --tiktoken "$TK" -o /tmp/f3.gguf > /dev/null 2>&1
for b in cpu cuda; do
  build/bitnet run -m /tmp/f3.gguf -p "The capital of France, 1234" -n 64 --temp 0 --backend $b > /tmp/run_$b.txt 2> /tmp/run_$b.err
  echo "$b rc=$?: $(head -c 100 /tmp/run_$b.txt | tr '\n' ' ')"
done
cmp /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "falcon3-1b shape, 64 greedy tokens: the same text on cpu and cuda" | tee "$OUT/f3-run.txt"
TOK=$(build/bitnet tokenize -m /tmp/f3.gguf -p "The capital of France is Paris, and the capital of Germany is 2024")
for b in cpu cuda; do build/bitnet eval -m /tmp/f3.gguf --tokens "$TOK" --logits-out /tmp/l_$b.f32 --backend $b > /dev/null 2>&1; done
python3 -c "
import numpy as np
c=np.fromfile('/tmp/l_cpu.f32',dtype=np.float32); g=np.fromfile('/tmp/l_cuda.f32',dtype=np.float32); n=len(c)//128256
c=c.reshape(n,-1); g=g.reshape(n,-1)
print('falcon3-1b shape, %d positions: cuda vs cpu logits rel L2 %.3g (worst row %.3g), argmax equal %d/%d' % (n, np.linalg.norm(g-c)/np.linalg.norm(c), max(np.linalg.norm(g[i]-c[i])/np.linalg.norm(c[i]) for i in range(n)), (g.argmax(1)==c.argmax(1)).sum(), n))" | tee "$OUT/f3-eval.txt"
build/bitnet bench -m /tmp/f3.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench-f3.txt" 2>&1
echo "bench falcon3-1b ($((SECONDS - t0)) s):"; grep -E "^cuda|roofline" "$OUT/bench-f3.txt" | cut -c1-300
BITNET_TIKTOKEN=$TK timeout $((560 - (SECONDS - t0) - 60)) make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf > /dev/null 2>&1
timeout $((590 - (SECONDS - t0))) build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench.txt" 2>&1
echo "bench 2b4t ($((SECONDS - t0)) s):"; grep -E "^cuda|roofline" "$OUT/bench.txt" | cut -c1-300
