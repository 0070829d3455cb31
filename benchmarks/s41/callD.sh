#!/usr/bin/env bash
# Session 41 call D (one H200), main's final tree (after d7aad72: the CUDA load names a corrupt matrix as the CPU does): make test-gpu; the model fuzzer's corpus (.dev/fzm) through the
# CUDA backend, plain and under compute-sanitizer memcheck, with the error each input stopped at counted per backend.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O1 -g -std=c11 -o build/fuzz_replay_model tools/fuzz_replay.c tests/fuzz_model.c build/impl.o -lm -ldl -lpthread || exit 1
echo "built ($((SECONDS - t0)) s); corpus: $(ls .dev/fzm | wc -l) inputs"
for b in cpu cuda; do
  BITNET_FUZZ_BACKEND=$b build/fuzz_replay_model tests/corpus/model .dev/fzm > "/tmp/replay-$b.log" 2>&1
  echo "replay $b: exit $? ($((SECONDS - t0)) s): $(tail -1 "/tmp/replay-$b.log")"
  grep -o 'last error: .*' "/tmp/replay-$b.log" | sed -E 's/blk\.[0-9]+\.[a-z_]+\.weight/blk.N.X.weight/; s/^(.{0,80}).*/\1/' | sort | uniq -c | sort -rn > "/tmp/err-$b.txt"
done
cat /tmp/err-cuda.txt > "$OUT/replay-errors-cuda.txt"
echo "cpu and cuda stop at the same errors: $(diff -q /tmp/err-cpu.txt /tmp/err-cuda.txt > /dev/null && echo yes || echo NO)"
diff /tmp/err-cpu.txt /tmp/err-cuda.txt | head -20
BITNET_FUZZ_BACKEND=cuda timeout ${MT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  build/fuzz_replay_model tests/corpus/model .dev/fzm > "$OUT/replay-cuda-memcheck.log" 2>&1 &
mc=$!
BITNET_TIKTOKEN=$PWD/.dev/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
wait $mc; rc=$?
echo "replay cuda memcheck: exit $rc ($((SECONDS - t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/replay-cuda-memcheck.log" | tail -1); $(grep -c 'bytes,' "$OUT/replay-cuda-memcheck.log") inputs"
