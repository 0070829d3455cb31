#!/usr/bin/env bash
# racecheck over tools/race_bisect.c variants in parallel (each under a time limit); logs in $OUT.
set -u
out=${OUT:-/tmp/rb-out}; mkdir -p "$out/rb"
cc -O1 -o /tmp/race_bisect tools/race_bisect.c -lpthread -ldl -lm || exit 1
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
/tmp/race_bisect 8 5 full > "$out/rb/plain.log" 2>&1

for v in ${VARIANTS:-2:full 8:nodl 8:serial 8:event 8:full 1:full}; do
  t=${v%%:*}; m=${v#*:}
  ( timeout -k 5 ${RB_TIMEOUT:-120} "$cs" --tool racecheck --racecheck-report hazard --report-api-errors no /tmp/race_bisect "$t" 5 "$m" \
      > "$out/rb/${t}_$m.log" 2>&1; echo "rc=$?" >> "$out/rb/${t}_$m.log" ) &
done
wait
for f in "$out"/rb/*.log; do echo "== $f: $(grep -E 'race_bisect|SUMMARY|Internal|rc=' "$f" | tr '\n' ' ')"; done | tee "$out/rb_summary.txt"
