#!/usr/bin/env bash
# The GPU runtime on a real GPU, in one go: build, `make test-gpu`, `bitnet devices` next to
# nvidia-smi, the built-in kernels for this GPU, cold and warm JIT start-up, the custom kernel
# example. Logs go to $OUT (default ./gpu-check-out); the last lines are a summary.
# Usage: tools/gpu_check.sh            (from the repository root, on a machine with a GPU)
#        SANITIZE=1 tools/gpu_check.sh (also runs the GPU runtime tests under compute-sanitizer memcheck)
set -u
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
step() { echo; echo "=== $* ==="; }
fail=0
run() { "$@" || { echo "*** FAILED ($?): $*"; fail=1; }; }

step "machine"
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total,compute_cap,clocks.max.memory,clocks.max.sm \
  --format=csv | tee "$OUT/nvidia_smi.csv"
step "build"
run make -j"$(nproc)" all
step "make test-gpu"
run make -j"$(nproc)" test-gpu
step "bitnet devices"
run build/bitnet devices
build/bitnet devices --json > "$OUT/devices.json"
step "bitnet kernels (this GPU's arch)"
run build/bitnet kernels
step "no driver: BITNET_LIBCUDA=/nonexistent"
BITNET_LIBCUDA=/nonexistent build/bitnet devices; echo "exit $?"
step "JIT start-up: cold (empty cache), then warm (twice)"
cache=$(mktemp -d)
for run_name in cold warm1 warm2; do
  BITNET_CACHE_DIR=$cache build/device_query | tee "$OUT/jit_$run_name.txt" || fail=1
done
step "custom kernel example"
run build/custom_kernel
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck on the GPU runtime tests"
  BITNET_REQUIRE_GPU=1 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 build/tests/test_gpu_runtime \
    > "$OUT/memcheck.log" 2>&1; echo "memcheck exit $?"; tail -5 "$OUT/memcheck.log"
fi
step "summary"
grep -h "built-in modules" "$OUT"/jit_*.txt | sed 's/^/  /'
grep -E '^[0-9]+ passed' "$OUT/gpu_check.log" | tail -1
echo "gpu_check: $([ $fail -eq 0 ] && echo all steps passed || echo FAILED)"
exit $fail
