#!/usr/bin/env bash
# Runs every test binary given, prints each one's output, and ends with the summed
# "N passed, M failed, K skipped". $RUNNER (e.g. qemu-aarch64) prefixes each binary.
set -u
p=0; f=0; s=0; crashed=0
for t in "$@"; do
  echo "== $(basename "$t")"
  out=$( ${RUNNER:-} "$t" 2>&1 ); rc=$?
  printf '%s\n' "$out"
  line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -z "$line" ]; then
    echo "FAIL $(basename "$t") exited $rc without a summary"; f=$((f+1)); crashed=1; continue
  fi
  p=$((p + $(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')))
  f=$((f + $(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')))
  s=$((s + $(echo "$line" | sed -nE 's/.* ([0-9]+) skipped.*/\1/p' | grep . || echo 0)))
  if [ $rc -ne 0 ] && [ "$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')" = 0 ]; then
    echo "FAIL $(basename "$t") exited $rc"; f=$((f+1))
  fi
done
echo "$p passed, $f failed, $s skipped"
[ $f -eq 0 ]
