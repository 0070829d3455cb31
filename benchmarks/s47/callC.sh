#!/usr/bin/env bash
# Session 47 call C (one H200): the final grammar code (memoized masks, the mask cache, the matcher's scratch).
# As call B (make test-gpu, the JSON grammar's greedy text on the CPU and cuda, cuda's decode speed with and
# without a grammar, and with BITNET_GPU_TOPK=0), then compute-sanitizer memcheck on test_tiny_gguf (grammar()).
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
} 2>&1 | tee "$OUT/callC-grammar.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E "grammar:|chat:" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callC-test-gpu-tail.txt"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
BITNET_TEST_ONLY=test_tiny_gguf timeout 200 "$CS" --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward > "$OUT/callC-memcheck.txt" 2>&1
echo "memcheck rc=$?: $(grep -E 'ERROR SUMMARY|passed' "$OUT/callC-memcheck.txt" | tr '\n' ' ')"
echo "total $((SECONDS - t0)) s"
