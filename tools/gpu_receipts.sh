#!/usr/bin/env bash
# Receipts on the GPU machine: builds, writes the 2b4t model (random weights, the exact 2B-4T
# shape), benchmarks cuda and cpu with the determinism check, and verifies each receipt with the
# release gates below. Everything lands in $OUT (receipts, CSV, logs); commit the receipts under
# benchmarks/receipts/ and run tools/receipts_table.py --update BENCHMARKS.md on them.
#   cd <repo> && OUT=/tmp/out GIT_COMMIT=<hash> tools/gpu_receipts.sh
# GIT_COMMIT: the commit the tree is (the receipts carry it); needed where the tree is a copy
# without .git, as on the device machine, else the receipts say "unknown".
# Nothing else may use the GPU meanwhile: a compute-sanitizer run beside it (session 20) slowed
# every kernel about 3.5x and the receipt failed its gate. Run sanitizers before or after.
set -uo pipefail
out=${OUT:-/tmp/receipts-out}; mkdir -p "$out"
tag=${TAG:-h100}
model=${MODEL:-/tmp/bitnet-2b4t.gguf}
# Release gates: a floor under the H100 decode measured so far (930-1199 tokens/s, sessions 5-23; the issue-6 target
# of 1500, CUDA_MIN_TPS=1500 CUDA_MAX_P95_MS=1.0, is not met yet); the CPU floor is the 2-core dev
# machine's target (13.2 tokens/s), which any bigger host must clear.
cuda_gates=(--require-gpu-kernels --min-tps "${CUDA_MIN_TPS:-900}" --max-p95-ms "${CUDA_MAX_P95_MS:-1.5}")
cpu_gates=(--min-tps "${CPU_MIN_TPS:-13.2}")

rm -f build/bitnet # the commit is baked in when it is built: never reuse an older build
make -j"$(nproc)" all ${GIT_COMMIT:+GIT_COMMIT="$GIT_COMMIT"} >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
if [ -n "${TEST_GPU:-}" ]; then # the GPU test suite first, in the same call
  make test-gpu >"$out/test-gpu.log" 2>&1; echo "make test-gpu: $(tail -1 "$out/test-gpu.log")"
  grep -E "^FAIL|  FAIL" "$out/test-gpu.log" | head -20
fi
build/bitnet devices | tee "$out/devices.txt"
if [ ! -f "$model" ]; then
  build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o "$model" 2>&1 | tee "$out/gen-model.txt" || exit 1
fi
build/bitnet bench -m "$model" --backend all --prompt-tokens 64,512 --gen-tokens 128 --runs 5 \
  --check-determinism --require-gpu --receipt "$out/$tag-2b4t.json" --csv "$out/$tag-2b4t.csv" 2>&1 | tee "$out/bench.txt"
rc=${PIPESTATUS[0]}
echo "bench exit $rc" | tee -a "$out/bench.txt"
fail=$rc
build/bitnet verify-receipt "$out/$tag-2b4t.cuda.json" "${cuda_gates[@]}" 2>&1 | tee "$out/verify-cuda.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
build/bitnet verify-receipt "$out/$tag-2b4t.cpu.json" "${cpu_gates[@]}" 2>&1 | tee "$out/verify-cpu.txt"
[ "${PIPESTATUS[0]}" = 0 ] || fail=1
# the CPU receipt must never pass as a GPU one
build/bitnet verify-receipt "$out/$tag-2b4t.cpu.json" --require-gpu-kernels >/dev/null 2>&1 && { echo "cpu receipt passed the GPU gate"; fail=1; }
echo "gpu_receipts: $([ $fail = 0 ] && echo ok || echo FAILED)"
exit $fail
