#!/usr/bin/env bash
# Session 47 call B (one H200): grammars sampled on cuda from the device's 128 best (the whole row only where
# they run out). As call A: make test-gpu (grammar(): now also top-k 100, and the GPU from the whole row), the
# JSON grammar's greedy text on the CPU and cuda, and cuda's decode speed with and without a grammar; and the
# same with BITNET_GPU_TOPK=0 (the whole row every step, call A's path).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
P="Write the answer as JSON with the fields name and age:"
J=examples/grammars/json.gbnf
{
  for b in cpu cuda; do
    build/bitnet run -m /tmp/2b4t.gguf --backend $b -p "$P" -n 64 --temp 0 --grammar-file $J > /tmp/g-$b.txt 2>/tmp/g-$b.err
    echo "$b greedy under json.gbnf: $(tail -1 /tmp/g-$b.err)"
  done
  cmp /tmp/g-cpu.txt /tmp/g-cuda.txt && echo "json.gbnf greedy, 64 tokens: the same text on cpu and cuda"
  echo "text: $(head -c 300 /tmp/g-cuda.txt | od -An -c | tr -s ' ' | head -c 900)"
  for s in "--temp 0" "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05" "--temp 0.8 --top-k 0 --top-p 1 --min-p 0"; do
    for g in none json; do
      ga=""; [ $g = json ] && ga="--grammar-file $J"
      for rep in 1 2; do
        build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s $ga > /tmp/o1.txt 2>/tmp/s.err
        echo "cuda [$s] grammar $g run $rep: $(tail -1 /tmp/s.err)"
      done
      if [ $g = json ]; then
        BITNET_GPU_TOPK=0 build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s $ga > /tmp/o0.txt 2>/tmp/s.err
        echo "cuda [$s] grammar $g, BITNET_GPU_TOPK=0 (the whole row): $(tail -1 /tmp/s.err)"
        cmp -s /tmp/o0.txt /tmp/o1.txt && echo "  the same text both ways" || echo "  TEXT DIFFERS"
      fi
    done
  done
} 2>&1 | tee "$OUT/callB-grammar.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E "grammar:|chat:" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callB-test-gpu-tail.txt"
echo "total $((SECONDS - t0)) s"
