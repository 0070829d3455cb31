#!/usr/bin/env bash
# Session 46 call B (one H200): compute-sanitizer memcheck on test_random_rope_freqs (rope_freqs, and
# session states between the backends on a padded-heads model); the CPU's generation after a restored
# state against after its own prefill, alternating (call A saw 12.6 against 16.4 tokens/s once).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" build/bitnet build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
BITNET_TEST_ONLY=test_random_rope_freqs BITNET_REQUIRE_GPU=1 timeout 240 "$CS" --tool memcheck --print-limit 20 \
  build/tests/test_cuda_forward > "$OUT/callB-memcheck.txt" 2>&1; echo "memcheck rc=$? ($((SECONDS - t0)) s)"
tail -4 "$OUT/callB-memcheck.txt"
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
python3 -c "print(' '.join(['The history of the river valley, its towns and its people, told from the start.']*60))" > /tmp/p.txt
rm -f /tmp/pc.bin; build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 1 --temp 0 --backend cuda --prompt-cache /tmp/pc.bin > /dev/null 2>&1
{ lscpu | grep -E 'NUMA node|Model name'
  for t in 16 8; do for r in 1 2 3; do
    printf "t=%d restored: " $t; build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 48 --temp 0 --backend cpu -t $t --prompt-cache /tmp/pc.bin 2>&1 >/dev/null | grep -o 'prompt [0-9]* tokens, [0-9.]* tokens/s; generation.*' 
    printf "t=%d own:      " $t; build/bitnet run -m /tmp/2b4t.gguf -f /tmp/p.txt -n 48 --temp 0 --backend cpu -t $t 2>&1 >/dev/null | grep -o 'prompt [0-9]* tokens, [0-9.]* tokens/s; generation.*'
  done; done; } > "$OUT/callB-cpu-restored.txt" 2>&1
cat "$OUT/callB-cpu-restored.txt"
echo "total $((SECONDS - t0)) s"
