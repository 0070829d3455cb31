#!/usr/bin/env bash
# Session 46 call G (one H200): what page-locking the 657 MB embedding costs (tools/pin_cost.c).
set -uo pipefail
cc -O2 -std=c11 -o /tmp/pin_cost tools/pin_cost.c -lm -ldl -lpthread || exit 1
/tmp/pin_cost 657 > "$OUT/callG-pin-cost.txt" 2>&1; echo "rc=$?"
cat "$OUT/callG-pin-cost.txt"
