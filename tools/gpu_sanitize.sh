#!/usr/bin/env bash
# Every test binary of `make test-gpu` under compute-sanitizer memcheck, racecheck and initcheck,
# with BITNET_REQUIRE_GPU=1 (a missing GPU fails). Self-contained: builds what it runs, warms the
# JIT cache once, then runs the (tool, binary) pairs JOBS at a time, each under a time limit.
# Writes $OUT/sanitize_summary.txt (one line per tool per binary: sanitizer errors, the tests'
# own result, exit code, PASS/FAIL/TIMEOUT) and $OUT/sanitize_logs.tgz (every log).
# A pair passes when the sanitizer reports 0 errors, the binary ends with "0 failed", and it exits 0.
# Never beside a benchmark: the sanitized kernels slow everything on the GPU (about 3.5x, session 20).
# Usage (repository root, on a machine with a GPU):
#   tools/gpu_sanitize.sh                      all three tools
#   tools/gpu_sanitize.sh memcheck initcheck   some of them (split across calls if time is short)
# Environment: OUT (default ./gpu-sanitize-out), JOBS (parallel pairs, default 12), PAIR_TIMEOUT
# (seconds per pair, default 480: racecheck on test_cuda_forward took 409-437 s alone, H100, 2026-11-27;
# beside 22 other pairs at JOBS=16 it ran past 300 s, so give the long pairs a call of their own with TESTS),
# GIT_COMMIT (the commit the tree is, where its .git is absent or stale, as on the device machine),
# TESTS (binaries, default every build/tests/test_*), SPLIT (binaries whose tests run as pairs of
# their own, one BITNET_TEST_ONLY each; default "test_cuda_forward test_hostile", the two longest:
# racecheck took 261 s on test_random_hd128_gqa4 and 280 s on test_gpu_fault_sweep alone, H200,
# session 40; "" for none), GPUS (the ids of the GPUs the pairs go round,
# e.g. "1 2 3"; default every one nvidia-smi lists; each pair sees its own as CUDA_VISIBLE_DEVICES),
# PAIRS (the pairs themselves, one a line, in place of all the above: "tool binary test|- gpu
# [VAR=VALUE...]", e.g. "racecheck build/tests/test_gpu_kernels test_gpu_ternary_gemm 1 BITNET_TEST_FORM=3"),
# BITNET_TEST_THREAD_TOKENS (tokens per thread in test_hostile's thread test, default 32 here) and
# BITNET_TEST_THREAD_ROUNDS (test_gpu_runtime's 8 threads' rounds, default 20 here): the full 200
# are `make test-gpu`'s; racecheck would take over 5 minutes on them (H100, 2025.3.1).
# Measured (H100, compute-sanitizer 2025.3.1, 16 cores, 2026-11-23): 36 pairs in 344 s, 0 sanitizer
# errors; the longest pass is racecheck test_hostile (~250 s). Racecheck on test_gpu_runtime used to
# stop in test_gpu_threads_8x200_shared after the tool's "Internal Sanitizer Error: Detected a failure
# to track a kernel launch": a cuStreamSynchronize in one thread racing launches on the same stream
# from others (tools/race_bisect.c reproduces it). The handle now waits on an event recorded under
# its lock; racecheck on test_gpu_runtime then passes in 11 s (H100, 2026-11-23, session 3).
# API errors (a CUDA call that returns an error the library handles, as the tests' failure paths
# do on purpose) are not counted: --report-api-errors no. Device leaks at exit are (memcheck
# --leak-check full).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-sanitize-out}
mkdir -p "$OUT"
tools="${*:-memcheck racecheck initcheck}"
JOBS=${JOBS:-12}
PAIR_TIMEOUT=${PAIR_TIMEOUT:-480}
export BITNET_REQUIRE_GPU=1 BITNET_TEST_THREAD_TOKENS=${BITNET_TEST_THREAD_TOKENS:-32}
export BITNET_TEST_THREAD_ROUNDS=${BITNET_TEST_THREAD_ROUNDS:-20}
logdir=$(mktemp -d)/sanitize_logs
mkdir -p "$logdir"
t0=$SECONDS
log() { echo "[$((SECONDS - t0))s] $*"; }

cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$cs" ]; then echo "gpu_sanitize: compute-sanitizer not found" | tee "$OUT/sanitize_summary.txt"; exit 2; fi
log "compute-sanitizer: $cs ($("$cs" --version | grep -i version | head -1))"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /'

tests_src=$(ls tests/test_*.c)
bins=${TESTS:-$(for s in $tests_src; do b=${s#tests/}; echo "build/tests/${b%.c}"; done)}
log "build"
make -j"$(nproc)" all $bins > "$logdir/build.log" 2>&1 || { tail -30 "$logdir/build.log"; echo "gpu_sanitize: build FAILED"; exit 2; }
log "warm the JIT cache (every built-in module for this GPU)"
build/bitnet kernels --cache > "$logdir/kernels.log" 2>&1 || tail -5 "$logdir/kernels.log"

# The slowest first, so the long pairs start early.
order() { for b in $bins; do case $b in *gpu*|*cuda*|*hostile*|*receipt*|*model*) echo "0 $b";; *) echo "1 $b";; esac; done | sort | cut -d' ' -f2; }
# A pair: tool, binary, the test it runs alone ("-": all) and its GPU, dealt round the GPUS.
split_tests() { # binary -> its test names, or "-" where it is not in SPLIT
  local name; name=$(basename "$1")
  case " ${SPLIT-test_cuda_forward test_hostile} " in *" $name "*) sed -nE 's/^ *RUN_TEST\(([a-z0-9_]+)\);.*/\1/p' "tests/$name.c";; *) echo -;; esac
}
read -ra gpus <<< "${GPUS:-$(nvidia-smi -L 2>/dev/null | sed -nE 's/^GPU ([0-9]+):.*/\1/p' | tr '\n' ' ')}"
[ ${#gpus[@]} -ge 1 ] || gpus=(0)
pairs=${PAIRS:-$(i=0; for tool in $tools; do for b in $(order); do for t in $(split_tests "$b"); do
  echo "$tool $b $t ${gpus[i % ${#gpus[@]}]}"; i=$((i + 1)); done; done; done)}

run_pair() { # tool binary test gpu [VAR=VALUE...] -> a summary line
  local tool=$1 bin=$2 only=$3 gpu=$4 name log rc errs tests verdict extra=""
  shift 4
  name=$(basename "$bin")
  [ "$only" != - ] && name="$name:$only"
  [ $# -gt 0 ] && name="$name:$(echo "$*" | tr ' ' ',')"
  log="$logdir/${tool}_$(echo "$name" | tr ':=,' '.__').log"
  case $tool in
    memcheck) extra="--leak-check full";;
    racecheck) extra="--racecheck-report hazard";;
  esac
  local s=$SECONDS
  [ "$only" != - ] && export BITNET_TEST_ONLY=$only
  env "$@" CUDA_VISIBLE_DEVICES="$gpu" timeout -k 10 "$PAIR_TIMEOUT" "$cs" --tool "$tool" $extra --report-api-errors no --target-processes all \
    --error-exitcode 97 "$bin" > "$log" 2>&1
  rc=$?
  errs=$(grep -E '^========= (ERROR|RACECHECK) SUMMARY' "$log" | sed -E 's/.*SUMMARY: ([0-9]+) (errors?|hazards?).*/\1/' \
         | awk '{s+=$1} END {print s+0}')
  # racecheck: the hazard count; its summary line also splits errors and warnings
  if [ "$tool" = racecheck ]; then
    local rerr; rerr=$(grep -E 'RACECHECK SUMMARY' "$log" | sed -nE 's/.*\(([0-9]+) errors?, ([0-9]+) warnings?\).*/\1/p' | awk '{s+=$1} END {print s+0}')
    errs=$rerr
  fi
  tests=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  # A binary that never calls CUDA (the CPU tests) makes the sanitizer exit with an error of its own.
  if grep -q 'terminated before first instrumented API call' "$log" && [ "$errs" = 0 ]; then
    [ $rc = 255 ] && rc=0
    tests="$tests (no CUDA calls)"
  fi
  if [ $rc = 124 ] || [ $rc = 137 ]; then verdict=TIMEOUT
  elif [ $rc = 0 ] && [ "$errs" = 0 ] && echo "$tests" | grep -q ' 0 failed'; then verdict=PASS
  else verdict=FAIL; fi
  printf '%-10s %-44s errors %-5s exit %-4s %-6.0fs %-8s %s\n' "$tool" "$name" "$errs" "$rc" "$((SECONDS - s))" "$verdict" "${tests:-no summary}"
}
export -f run_pair
export cs logdir PAIR_TIMEOUT
log "run $(echo "$pairs" | wc -l) pairs, $JOBS at a time over GPU(s) ${gpus[*]}, ${PAIR_TIMEOUT}s each at most: $tools"
echo "$pairs" | xargs -P "$JOBS" -L 1 bash -c 'run_pair "$0" "$@"' > "$logdir/summary.unsorted"

{
  echo "gpu_sanitize: $(date -u +%FT%TZ), commit ${GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo "tools: $tools; BITNET_REQUIRE_GPU=1; BITNET_TEST_THREAD_TOKENS=$BITNET_TEST_THREAD_TOKENS; BITNET_TEST_THREAD_ROUNDS=$BITNET_TEST_THREAD_ROUNDS; pair limit ${PAIR_TIMEOUT}s"
  printf '%-10s %-44s %-12s %-9s %-7s %-8s %s\n' tool binary "errors" "exit" time verdict tests
  sort "$logdir/summary.unsorted"
  n_fail=$(grep -cvE ' PASS ' "$logdir/summary.unsorted")
  echo "pairs: $(wc -l < "$logdir/summary.unsorted"), not passing: $n_fail, total $((SECONDS - t0))s"
} | tee "$OUT/sanitize_summary.txt"
# The first reports of each failing log, for a quick look.
for f in "$logdir"/*.log; do
  if grep -E '^========= (Invalid|Race|Uninitialized|Leaked|Program hit|Error|Internal)' "$f" | grep -qv 'before first instrumented'; then
    echo "--- $(basename "$f")"; grep -E '^=========' "$f" | head -40
  fi
done > "$OUT/sanitize_first_reports.txt"
tar -czf "$OUT/sanitize_logs.tgz" -C "$(dirname "$logdir")" sanitize_logs
grep -q 'not passing: 0,' "$OUT/sanitize_summary.txt"
