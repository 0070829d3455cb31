#!/usr/bin/env bash
# Session 49 call G (one H200): bitnet serve --parallel 2 on the GPU (2B-4T shape): two 256-token greedy completions at once
# against one alone (each slot's text equal to the single run's), tokens/s each and in all.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
build/bitnet serve -m /tmp/2b4t.gguf --backend cuda --port 18080 -c 2048 --parallel 2 2> "$OUT/callG-serve.err" &
SP=$!
for i in $(seq 1 60); do curl -s localhost:18080/health > /dev/null && break; sleep 0.5; done
P1='{"prompt": "Write a short story about the sea:", "n_predict": 256, "temperature": 0, "ignore_eos": true}'
P2='{"prompt": "List the planets of the solar system:", "n_predict": 256, "temperature": 0, "ignore_eos": true}'
{
  curl -s localhost:18080/completion -d "$P1" > /tmp/a1.json
  curl -s localhost:18080/completion -d "$P2" > /tmp/b1.json
  curl -s localhost:18080/health > /dev/null
  # the slots now hold these texts; a different start so that both evaluate their prompts again
  s=$(date +%s.%N)
  curl -s localhost:18080/completion -d "${P1/sea/ships}" > /tmp/a2.json &
  curl -s localhost:18080/completion -d "${P2/planets/moons}" > /tmp/b2.json &
  wait %1 %2 2>/dev/null; wait
  e=$(date +%s.%N)
  curl -s localhost:18080/completion -d "${P1/sea/ships}" > /tmp/a3.json
  curl -s localhost:18080/completion -d "${P2/planets/moons}" > /tmp/b3.json
  python3 - "$s" "$e" <<'PY'
import json, sys
s, e = float(sys.argv[1]), float(sys.argv[2])
for tag, f in (("alone 1", "/tmp/a1.json"), ("alone 2", "/tmp/b1.json"), ("together 1", "/tmp/a2.json"), ("together 2", "/tmp/b2.json"),
               ("again alone 1", "/tmp/a3.json"), ("again alone 2", "/tmp/b3.json")):
    d = json.load(open(f))
    print("%-14s predicted %d, %.1f tokens/s, cached %d" % (tag, d["tokens_predicted"], d["timings"]["predicted_per_second"], d["tokens_cached"]))
a2, b2, a3, b3 = (json.load(open(f))["content"] for f in ("/tmp/a2.json", "/tmp/b2.json", "/tmp/a3.json", "/tmp/b3.json"))
print("together == alone (greedy): %s, %s; both together: %.2f s wall, %.1f tokens/s in all" % (a2 == a3, b2 == b3, e - s, 512 / (e - s)))
PY
} 2>&1 | tee "$OUT/callG-serve.txt"
kill $SP; wait $SP 2>/dev/null
tail -2 "$OUT/callG-serve.err"
echo "total $((SECONDS - t0)) s"
