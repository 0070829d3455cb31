#!/usr/bin/env bash
# Session 45 call C (one H200): A/B of issue 6's decode benchmark, this tree against 95cd192 (before the padded
# heads: the decode GEMV's norm count kn and the attention's hds are new kernel parameters), alternating, two rounds.
# The base is exported into .base (git archive 95cd192 | tar -x -C .base).
set -uo pipefail
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" all > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
(cd .base && make -j"$(nproc)" all > /tmp/build-base.log 2>&1) || { tail -30 /tmp/build-base.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
for round in 1 2; do
  for v in base new; do
    bin=build/bitnet; [ $v = base ] && bin=.base/build/bitnet
    printf '%s round %s: ' $v $round
    $bin bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 2>&1 | grep -E '^cuda' | awk '{printf "%s/%s ", $6, $8} END {print ""}'
  done
done | tee "$OUT/callC-ab.txt"
