#!/usr/bin/env bash
# Session 41 call A (one H200): the model fuzzer's corpus (.dev/fzm, minimized from tests/fuzz_model.c's libFuzzer
# runs here) through the CUDA backend, plain, then under compute-sanitizer memcheck beside make test-gpu; then
# the long-form decode attention with q widened once (this tree) against HEAD (.base), alternating, at long contexts.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O1 -g -std=c11 -o build/fuzz_replay_model tools/fuzz_replay.c tests/fuzz_model.c build/impl.o -lm -ldl -lpthread || exit 1
echo "built ($((SECONDS - t0)) s); corpus: $(ls .dev/fzm | wc -l) inputs"
BITNET_FUZZ_BACKEND=cuda build/fuzz_replay_model tests/corpus/model .dev/fzm > "$OUT/replay-cuda.log" 2>&1
echo "replay cuda: exit $? ($((SECONDS - t0)) s): $(tail -1 "$OUT/replay-cuda.log")"
echo "  loaded and ran (last error none): $(grep -c 'last error: none' "$OUT/replay-cuda.log")"
grep -o 'last error: .\{0,70\}' "$OUT/replay-cuda.log" | sort | uniq -c | sort -rn | head -12
BITNET_FUZZ_BACKEND=cuda timeout ${MT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
  build/fuzz_replay_model tests/corpus/model .dev/fzm > "$OUT/replay-cuda-memcheck.log" 2>&1 &
mc=$!
BITNET_TIKTOKEN=$PWD/.dev/llama3-tokenizer.tiktoken make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu ($((SECONDS - t0)) s): $(tail -1 "$OUT/test-gpu.log")"; grep FAIL "$OUT/test-gpu.log" | head
wait $mc; rc=$?
echo "replay cuda memcheck: exit $rc ($((SECONDS - t0)) s): $(grep -E 'ERROR SUMMARY' "$OUT/replay-cuda-memcheck.log" | tail -1); $(grep -c 'bytes,' "$OUT/replay-cuda-memcheck.log") inputs"
grep -B2 -A12 "Invalid\|Error" "$OUT/replay-cuda-memcheck.log" | head -30
OUT=/tmp/ab VARIANTS="base=.base new=." PROMPTS=64,512,2048,3968 GEN=64 RUNS=2 ROUNDS=${ROUNDS:-2} tools/gpu_bench_ab.sh 2>&1 | tail -8
for f in /tmp/ab/bench-*.txt; do echo "== $f"; cat "$f"; done > "$OUT/ab-bench.txt"
