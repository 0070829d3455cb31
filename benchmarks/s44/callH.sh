#!/usr/bin/env bash
# Session 44 call H (one H200): Llama3-8B-1.58's shape (gen-model --preset llama3-8b --arch llama: dim 4096, 32 layers,
# 32 / 8 heads of 128, ffn 14336): eval logits and 32 greedy tokens on cpu and cuda; its GPU speed.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" build/bitnet > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset llama3-8b --arch llama --tiktoken "$TK" -o /tmp/l8b.gguf > /dev/null 2>&1
echo "gen-model ($((SECONDS - t0)) s)"
TOK=128000,791,6864,315,9822,374,12366,11,323,279,6864,315,10057,374
for b in cpu cuda; do build/bitnet eval -m /tmp/l8b.gguf --tokens $TOK --logits-out /tmp/l_$b.f32 --backend $b > /dev/null 2>&1; done
python3 -c "
import numpy as np
c=np.fromfile('/tmp/l_cpu.f32',dtype=np.float32).reshape(14,-1); g=np.fromfile('/tmp/l_cuda.f32',dtype=np.float32).reshape(14,-1)
print('llama3-8b shape, 14 positions: cuda vs cpu logits rel L2 %.3g, argmax equal %d/14' % (np.linalg.norm(g-c)/np.linalg.norm(c), (g.argmax(1)==c.argmax(1)).sum()))" | tee "$OUT/l8b-eval.txt"
for b in cpu cuda; do
  build/bitnet run -m /tmp/l8b.gguf -p "The capital of France" -n 32 --temp 0 --backend $b > /tmp/run_$b.txt 2> /tmp/run_$b.err
  echo "$b rc=$?: $(tail -1 /tmp/run_$b.err | cut -c1-120)"
done
cmp /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "llama3-8b shape, 32 greedy tokens: the same text on cpu and cuda" | tee "$OUT/l8b-run.txt"
echo "checks ($((SECONDS - t0)) s)"
timeout $((380 - (SECONDS - t0))) build/bitnet bench -m /tmp/l8b.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 > "$OUT/bench-l8b.txt" 2>&1
echo "bench ($((SECONDS - t0)) s):"; grep -E "^cuda|roofline|prompt (64|512):" "$OUT/bench-l8b.txt" | cut -c1-300
