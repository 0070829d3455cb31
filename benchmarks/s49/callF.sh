#!/usr/bin/env bash
# Session 49 call F (one H200): bitnet serve on the GPU (2B-4T shape): a chat reply whole and streamed (the deltas joined
# against the whole), a second turn that reuses the first's text, /completion's timings against `run`'s speed.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.dev/llama3-tokenizer.tiktoken
make -j"$(nproc)" all > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
build/bitnet gen-model --preset 2b4t --tiktoken "$TK" -o /tmp/2b4t.gguf 2>&1 | tail -1
build/bitnet serve -m /tmp/2b4t.gguf --backend cuda --port 18080 -c 4096 2> "$OUT/callF-serve.err" &
SP=$!
for i in $(seq 1 60); do curl -s localhost:18080/health > /dev/null && break; sleep 0.5; done
{
  echo "== health: $(curl -s localhost:18080/health)"
  C='{"messages": [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name three colors."}], "max_tokens": 64, "temperature": 0'
  curl -s localhost:18080/v1/chat/completions -d "$C}" > /tmp/whole.json
  curl -sN localhost:18080/v1/chat/completions -d "$C, \"stream\": true}" > /tmp/stream.txt
  python3 - <<'PY'
import json
w = json.load(open("/tmp/whole.json"))
deltas = [json.loads(l[6:]) for l in open("/tmp/stream.txt") if l.startswith("data: {")]
joined = "".join(d["choices"][0]["delta"].get("content", "") for d in deltas)
print("chat whole: %d completion tokens, finish %s; streamed: %d events, joined == whole: %s, [DONE]: %s" % (
    w["usage"]["completion_tokens"], w["choices"][0]["finish_reason"], len(deltas), joined == w["choices"][0]["message"]["content"],
    "data: [DONE]" in open("/tmp/stream.txt").read()))
PY
  P='{"prompt": "Write a short story about the sea:", "n_predict": 128, "temperature": 0, "ignore_eos": true}'
  for i in 1 2 3; do
    curl -s localhost:18080/completion -d "$P" | python3 -c "import json,sys; d=json.load(sys.stdin); print('completion %s: evaluated %d, predicted %d, prompt %.1f tokens/s, predicted %.1f tokens/s' % ('$i', d['tokens_evaluated'], d['tokens_predicted'], d['timings']['prompt_per_second'], d['timings']['predicted_per_second']))"
  done
  build/bitnet run -m /tmp/2b4t.gguf --backend cuda -p "Write a short story about the sea:" -n 128 --temp 0 --ignore-eos > /dev/null 2>/tmp/r.err
  echo "run, the same: $(tail -1 /tmp/r.err)"
  curl -s localhost:18080/v1/chat/completions -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 32, "temperature": 0.8, "top_k": 40, "presence_penalty": 0.5, "logit_bias": {"13": -100}, "stop": ["."]}' | python3 -c "import json,sys; d=json.load(sys.stdin); print('sampled chat: %d tokens, finish %s' % (d['usage']['completion_tokens'], d['choices'][0]['finish_reason']))"
} 2>&1 | tee "$OUT/callF-serve.txt"
kill $SP; wait $SP 2>/dev/null
tail -3 "$OUT/callF-serve.err"
echo "total $((SECONDS - t0)) s"
