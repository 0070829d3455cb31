#!/usr/bin/env bash
# Session 46 call I (one H200): the CUDA load without the host's pass over the ternary matrices (the upload
# refuses code 3; the pass names the matrix only then): load time, make test-gpu (test_model's
# test_bad_weights names a corrupt matrix alike on both backends), the fuzzer corpus's errors on cuda.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o /tmp/bench_load tools/bench_load.c -lm -ldl -lpthread || exit 1
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
/tmp/bench_load /tmp/2b4t.gguf cuda 4 > "$OUT/callI-load.txt" 2>&1; cat "$OUT/callI-load.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu: $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
grep -E '^(ok|FAIL) +test_bad_weights' "$OUT/test-gpu.log"
tail -5 "$OUT/test-gpu.log" > "$OUT/callI-test-gpu-tail.txt"
cc -O1 -g -o /tmp/fuzz_replay tools/fuzz_replay.c tests/fuzz_model.c build/impl.o -lm -ldl -lpthread || exit 1
for b in cpu cuda; do BITNET_FUZZ_BACKEND=$b /tmp/fuzz_replay tests/corpus/model .dev/fzm 2>&1 | sed 's/, [0-9.]* ms,/,/' > "$OUT/callI-replay-$b.txt"; done
echo "fuzz corpus: $(wc -l < "$OUT/callI-replay-cpu.txt") lines; cpu and cuda differ at $(diff "$OUT/callI-replay-cpu.txt" "$OUT/callI-replay-cuda.txt" | grep -c '^<') files"
grep -c 'code 3' "$OUT/callI-replay-cuda.txt"
diff "$OUT/callI-replay-cpu.txt" "$OUT/callI-replay-cuda.txt" | head -6
echo "total $((SECONDS - t0)) s"
