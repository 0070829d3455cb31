#!/usr/bin/env bash
# Session 46 call A (one H200): make test-gpu with rope_freqs (test_random_rope_freqs) and session states
# between the backends (states() in test_cuda_forward); run --prompt-cache on 2B-4T, cuda and cpu.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E 'state of 37|worst|rope_freqs|test_random' "$OUT/test-gpu.log" | head -20
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
python3 -c "print(' '.join(['The history of the river valley, its towns and its people, told from the start.']*60))" > /tmp/p.txt
{ rm -f /tmp/pc_cuda.bin
  for i in 1 2; do echo "== cuda, --prompt-cache, run $i"; /usr/bin/time -f "wall %e s" build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 32 --temp 0 --backend cuda --prompt-cache /tmp/pc_cuda.bin > /tmp/o_cuda$i.txt 2>/tmp/e; grep -E 'prompt|wall' /tmp/e; done
  echo "== cuda, no cache"; /usr/bin/time -f "wall %e s" build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 32 --temp 0 --backend cuda > /tmp/o_cuda0.txt 2>/tmp/e; grep -E 'prompt|wall' /tmp/e
  cmp /tmp/o_cuda0.txt /tmp/o_cuda1.txt && cmp /tmp/o_cuda0.txt /tmp/o_cuda2.txt && echo "cuda: the same 32-token text with and without the cache"
  ls -la /tmp/pc_cuda.bin
  echo "== cpu (16 threads), the cache written on cuda"; cp /tmp/pc_cuda.bin /tmp/pc_x.bin
  /usr/bin/time -f "wall %e s" build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 32 --temp 0 --backend cpu --prompt-cache /tmp/pc_x.bin > /tmp/o_cpu1.txt 2>/tmp/e; grep -E 'prompt|wall' /tmp/e
  echo "== cpu, no cache"; /usr/bin/time -f "wall %e s" build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 32 --temp 0 --backend cpu > /tmp/o_cpu0.txt 2>/tmp/e; grep -E 'prompt|wall' /tmp/e
  cmp /tmp/o_cpu0.txt /tmp/o_cpu1.txt && echo "cpu: the same text from the cuda cache as without one"
  cmp /tmp/o_cpu0.txt /tmp/o_cuda0.txt && echo "cpu and cuda: the same text"; } > "$OUT/callA-prompt-cache.txt" 2>&1
cat "$OUT/callA-prompt-cache.txt" | cut -c1-300
tail -5 "$OUT/test-gpu.log" > "$OUT/callA-test-gpu-tail.txt"
echo "total $((SECONDS - t0)) s"
