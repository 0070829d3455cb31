#!/usr/bin/env bash
# Session 46 call H (one H200): the GPU's mapped host memory as registered pages of our own (the 657 MB
# embedding, the published token): load time (tools/bench_load.c), make test-gpu, and issue 6's decode
# benchmark A/B against af9f97e (the session's start, in .base), alternating, two rounds.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all build/impl.o > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
(cd .base && make -j"$(nproc)" build/bitnet > /tmp/build-base.log 2>&1) || { tail -30 /tmp/build-base.log; exit 1; }
cc -O2 -std=c11 -o /tmp/bench_load tools/bench_load.c -lm -ldl -lpthread || exit 1
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
/tmp/bench_load /tmp/2b4t.gguf cuda 4 > "$OUT/callH-load.txt" 2>&1; cat "$OUT/callH-load.txt"
for round in 1 2; do
  for v in base new; do
    bin=build/bitnet; [ $v = base ] && bin=.base/build/bitnet
    printf '%s round %s: ' $v $round
    $bin bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -E '^cuda' | awk '{printf "%s/%s ", $6, $8} END {print ""}'
  done
done | tee "$OUT/callH-ab.txt"
BITNET_TIKTOKEN=$TK make test-gpu > "$OUT/test-gpu.log" 2>&1
echo "make test-gpu: $(tail -1 "$OUT/test-gpu.log")"; grep -E "FAIL" "$OUT/test-gpu.log" | head
tail -5 "$OUT/test-gpu.log" > "$OUT/callH-test-gpu-tail.txt"
echo "total $((SECONDS - t0)) s"
