#!/usr/bin/env bash
# Session 45 call E (one H200): the final GPU code. make test-gpu; the A/B against 95cd192 (call C's script, two
# rounds); the 1bitLLM-3B shape on cuda against cpu and its decode speed.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callE-test-gpu-tail.txt"
bash benchmarks/s45/callC.sh; mv "$OUT/callC-ab.txt" "$OUT/callE-ab.txt"
build/bitnet gen-model --preset 1bitllm-3b --type f16 --arch bitnet --vocab spm --tiktoken "$TK" -o /tmp/b3.gguf 2>&1 | tail -1
T=1,708,6961,446,9897,505,12423,270,454,410,6961,446,10130,505
{ for b in cpu cuda; do build/bitnet eval -m /tmp/b3.gguf --backend $b --tokens $T --logits-out /tmp/b3_$b.f32 2>&1 | tail -1; done
  python3 -c "
import numpy as np
a=np.fromfile('/tmp/b3_cpu.f32',dtype=np.float32).reshape(14,-1); b=np.fromfile('/tmp/b3_cuda.f32',dtype=np.float32).reshape(14,-1)
print('3b eval cuda vs cpu: rel L2 per position max %.3g, argmax equal %d/14' % (max(np.linalg.norm(a[i]-b[i])/np.linalg.norm(a[i]) for i in range(14)), int((a.argmax(1)==b.argmax(1)).sum())))"
  for b in cpu cuda; do build/bitnet run -m /tmp/b3.gguf -p "The capital of France is" -n 64 --temp 0 --backend $b > /tmp/run_$b.txt 2>/tmp/run_$b.err; tail -1 /tmp/run_$b.err; done
  cmp /tmp/run_cpu.txt /tmp/run_cuda.txt && echo "3b run: the same 64-token text on cpu and cuda"
  build/bitnet bench -m /tmp/b3.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -E "^cuda|gen tok/s at|peak"; } > "$OUT/callE-3b.txt" 2>&1
cat "$OUT/callE-3b.txt" | cut -c1-300
echo "total $((SECONDS - t0)) s"
