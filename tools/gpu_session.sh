#!/usr/bin/env bash
# Session start on the GPU machine: validate main, then the racecheck bisect. Logs in $OUT.
set -u
OUT=${OUT:-/tmp/o} TIKTOKEN=${TIKTOKEN:-} RUNS=${RUNS:-2} tools/gpu_validate.sh
OUT=${OUT:-/tmp/o} tools/gpu_race_bisect.sh
