#!/usr/bin/env bash
# Session 48 call H (one H200): the vocabulary radix-sorted for the mask (23 -> 8 ms), the mask after 256 candidates; make test-gpu and
# decode speeds under json.gbnf and a JSON schema against none, on the 2B-4T shape.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
P="Write the answer as JSON with the fields name and age:"
S='{"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"}, "pets": {"type": "array", "items": {"enum": ["cat", "dog", "bird"]}, "maxItems": 4}}, "required": ["name", "age"]}'
{
  for s in "--temp 0" "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05" "--temp 0.8 --top-k 0 --top-p 1 --min-p 0"; do
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s > /dev/null 2>/tmp/s.err
    echo "cuda [$s] no grammar: $(tail -1 /tmp/s.err)"
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s --grammar-file examples/grammars/json.gbnf > /dev/null 2>/tmp/s.err
    echo "cuda [$s] json.gbnf: $(tail -1 /tmp/s.err)"
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s -j "$S" > /tmp/s.out 2>/tmp/s.err
    echo "cuda [$s] -j schema: $(tail -1 /tmp/s.err); $(wc -c < /tmp/s.out) bytes"
  done
} 2>&1 | tee "$OUT/callH-grammar.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E "^== |passed," "$OUT/test-gpu.log" | paste - - | grep -E "convert|grammar|hostile" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callH-test-gpu-tail.txt"
echo "total $((SECONDS - t0)) s"
