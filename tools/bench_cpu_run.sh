#!/usr/bin/env bash
# CPU speed of `bitnet run` on a 2B-4T-shaped model (random weights, gen-model --preset 2b4t):
#   gen: a 64-token prompt, then 128 generated tokens (greedy): generation tokens/s
#   pp:  a 512-token prompt, 1 generated token: prompt-processing tokens/s
# Prompts are counted with the model's own tokenizer (BOS included). Each is run REPS times and
# every line is printed, with the load average before it: on a shared machine the spread is real.
#   tools/bench_cpu_run.sh [MODEL.gguf (default build/2b4t.gguf, made if absent)] [THREADS] [REPS]
# (gen-model reads ../shared/data/llama3-tokenizer.tiktoken; TIKTOKEN=FILE points elsewhere.)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-build/2b4t.gguf}; threads=${2:-2}; reps=${3:-3}
bin=build/bitnet
[ -x $bin ] || make -j2 $bin >/dev/null
[ -f "$model" ] || $bin gen-model --preset 2b4t ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o "$model"

# A prompt of n tokens (or the nearest below): the first k words of a fixed text, k found by
# bisection with the model's tokenizer.
words=(the river ran past an old mill where seven quiet workers counted grain and wrote small
  numbers into a long ledger before the evening bells rang over the town)
text_of() { local k=$1 out="" i; for ((i = 0; i < k; i++)); do out="${out:+$out }${words[$((i % ${#words[@]}))]}"; done; printf '%s' "$out"; }
count() { $bin tokenize -m "$model" -p "$(text_of "$1")" 2>/dev/null | tr ',' '\n' | wc -l; }
prompt() {
  local n=$1 lo=1 hi=$((2 * $1)) mid
  while [ $lo -lt $hi ]; do
    mid=$(((lo + hi + 1) / 2))
    if [ "$(count $mid)" -le "$n" ]; then lo=$mid; else hi=$((mid - 1)); fi
  done
  text_of $lo
}
p64=$(prompt 64); p512=$(prompt 512)
echo "model $model, $threads threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for r in $(seq "$reps"); do
  echo "gen  (load $(cut -d' ' -f1 /proc/loadavg)): $($bin run -m "$model" -p "$p64" -n 128 --temp 0 -t "$threads" 2>&1 >/dev/null | tail -n 1)"
  echo "pp   (load $(cut -d' ' -f1 /proc/loadavg)): $($bin run -m "$model" -p "$p512" -n 1 --temp 0 -t "$threads" 2>&1 >/dev/null | tail -n 1)"
done
