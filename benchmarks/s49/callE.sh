#!/usr/bin/env bash
# Session 49 call E (one H200): the final library code: make test-gpu, and decode speeds under json.gbnf / a JSON schema with
# a pattern, an integer range and a format (greedy and top-k 40), beside none, on the 2B-4T shape.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
P="Write the answer as JSON with the fields name and age:"
S='{"type": "object", "properties": {"name": {"type": "string", "pattern": "^[A-Z][a-z]{1,15}( [A-Z][a-z]{1,15})?$"}, "age": {"type": "integer", "minimum": 0, "maximum": 130}, "born": {"type": "string", "format": "date"}}, "required": ["name", "age", "born"]}'
{
  for s in "--temp 0" "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05"; do
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s > /dev/null 2>/tmp/s.err
    echo "cuda [$s] no grammar: $(tail -1 /tmp/s.err)"
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s --grammar-file examples/grammars/json.gbnf > /dev/null 2>/tmp/s.err
    echo "cuda [$s] json.gbnf: $(tail -1 /tmp/s.err)"
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s -j "$S" > /tmp/s.out 2>/tmp/s.err
    echo "cuda [$s] -j schema (pattern, range, format): $(tail -1 /tmp/s.err); output: $(head -c 300 /tmp/s.out)"
  done
} 2>&1 | tee "$OUT/callE-grammar.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -aE "FAIL" "$OUT/test-gpu.log" | head
grep -a "sampled:" "$OUT/test-gpu.log" | head -2
grep -aE "^== |passed," "$OUT/test-gpu.log" | paste - - > "$OUT/callE-test-gpu-summary.txt"
echo "total $((SECONDS - t0)) s"
