#!/usr/bin/env bash
# Session 49 call C (one H200): the logit bias and the presence / frequency penalties in the device's penalize kernel:
# make test-gpu (test_cuda_forward's sampled(): the device's path against the whole row on the host, 15 samplers),
# compute-sanitizer memcheck on test_cuda_forward, decode speeds with and without the new adjustments on the 2B-4T shape,
# and hf_convert_check (its falcon3 step with ignore_merges off, as llama.cpp's falcon3 merges every piece).
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
P="Write a short story about the sea:"
{
  for s in "--temp 0" "--temp 0 --logit-bias 13+1.5 --logit-bias 11-inf" "--temp 0 --frequency-penalty 0.4 --presence-penalty 0.2" \
           "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05" "--temp 0.8 --top-k 40 --top-p 0.95 --min-p 0.05 --frequency-penalty 0.4 --presence-penalty 0.2 --logit-bias 13+1.5" \
           "--temp 0.8 --top-k 40 --repeat-penalty 1.1"; do
    build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "$P" -n 128 --ignore-eos --seed 1 $s > /dev/null 2>/tmp/s.err
    echo "cuda [$s]: $(tail -1 /tmp/s.err)"
  done
} 2>&1 | tee "$OUT/callC-speed.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep -aE "FAIL" "$OUT/test-gpu.log" | head
grep -a "sampled:" "$OUT/test-gpu.log"
tail -5 "$OUT/test-gpu.log" > "$OUT/callC-test-gpu-tail.txt"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  BITNET_REQUIRE_GPU=1 timeout 240 "$CS" --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward > "$OUT/callC-memcheck.txt" 2>&1
  echo "memcheck test_cuda_forward rc $? ($((SECONDS - t0)) s): $(grep -a "ERROR SUMMARY" "$OUT/callC-memcheck.txt" | tail -1)"
fi
python3 tools/hf_convert_check.py --tiktoken .dev/llama3-tokenizer.tiktoken --out $OUT --layers 2 > $OUT/callC-hf_convert_check.stdout 2>&1
echo "hf_convert_check rc $?"
grep -aE "falcon3|of them|MISMATCH|overall" $OUT/callC-hf_convert_check.stdout | head -12
echo "total $((SECONDS - t0)) s"
