#!/usr/bin/env bash
# Session 41 call E (one H200): the model fuzzer's corpus (.dev/fzm) on the CPU and the GPU with BITNET_FUZZ_PRINT=1:
# every input that evaluates its prompt prints a hash of the logits' bits and their argmax; the backends' are compared.
set -uo pipefail
t0=$SECONDS
make -j"$(nproc)" build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O1 -g -std=c11 -o build/fuzz_replay_model tools/fuzz_replay.c tests/fuzz_model.c build/impl.o -lm -ldl -lpthread || exit 1
for b in cpu cuda; do
  BITNET_FUZZ_PRINT=1 BITNET_FUZZ_BACKEND=$b build/fuzz_replay_model tests/corpus/model .dev/fzm > "/tmp/replay-$b.log" 2>&1
  awk '/^logits/ {l = $2 " " $4; next} /bytes,/ {f = $1; sub(/:$/, "", f); print f, (l == "" ? "-" : l); l = ""}' \
    "/tmp/replay-$b.log" > "$OUT/digest-$b.txt"
  echo "replay $b ($((SECONDS - t0)) s): $(tail -1 "/tmp/replay-$b.log"); prompts evaluated: $(grep -vc ' -$' "$OUT/digest-$b.txt")"
done
echo "inputs whose logits differ (hash or argmax) between the backends:"
paste -d' ' "$OUT/digest-cpu.txt" "$OUT/digest-cuda.txt" | awk '$2 != $5 || $3 != $6 {n++; print} END {print n + 0, "differ"}' | tail -25
