#!/usr/bin/env bash
# Session 47 call D (one H200): make test-gpu on the final code (since call C only host code changed: the mask walk's
# depth bound, a NULL-buffer copy, stop ids outside the vocabulary, the matcher's scratch zeroed), and the grammar's
# decode speeds on cuda once more.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
P="Write the answer as JSON with the fields name and age:"
J=examples/grammars/json.gbnf
{
  for s in "--temp 0" "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05" "--temp 0.8 --top-k 0 --top-p 1 --min-p 0"; do
    for g in none json; do
      ga=""; [ $g = json ] && ga="--grammar-file $J"
      build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s $ga > /dev/null 2>/tmp/s.err
      echo "cuda [$s] grammar $g: $(tail -1 /tmp/s.err)"
    done
  done
} 2>&1 | tee "$OUT/callD-grammar.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E "grammar:" "$OUT/test-gpu.log" | head -3
tail -5 "$OUT/test-gpu.log" > "$OUT/callD-test-gpu-tail.txt"
echo "total $((SECONDS - t0)) s"
