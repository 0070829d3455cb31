#!/usr/bin/env bash
# Device script for the GPU kernels (issue 5), run on the GPU machine from the repository root:
#   tools/gpu_kernels.sh full    make test-gpu; build/bitnet bench-kernels --backend cuda (with
#                                bitnet.cpp side by side when .bitnetcpp/ is there); compute-sanitizer
#                                memcheck and racecheck on build/tests/test_gpu_kernels
#   tools/gpu_kernels.sh tune    tests/test_gpu_kernels (make test-gpu with TEST_GPU=1), the full bench-kernels, then --quick runs (ours,
#                                M = 1) for each environment in $CONFIGS (';'-separated; A/B of the GEMV forms),
#                                then compute-sanitizer
#   tools/gpu_kernels.sh dev     the CuPy harness tools/gpu_kernels_dev.py: kernel checks and
#                                variant sweeps while tuning
# bitnet.cpp's kernel is built from .bitnetcpp/ (gpu/bitnet_kernels/bitnet_kernels.{cu,h} of a
# fetched microsoft/BitNet checkout, carried in the device sync folder and never committed) with
# its own compile.sh flags, for this GPU. Logs and JSON go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_kernels_out}
mkdir -p "$OUT"
mode=${1:-full}
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-/tmp/bitnet-jit-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader

BNCPP=""
build_bitnetcpp() {
  [ -f .bitnetcpp/bitnet_kernels.cu ] || return 0
  nvcc -std=c++17 -Xcudafe --diag_suppress=177 --compiler-options -fPIC -lineinfo --shared \
    .bitnetcpp/bitnet_kernels.cu -lcuda -gencode=arch=compute_90,code=sm_90 -o /tmp/libbitnet.so \
    >"$OUT/bitnetcpp_build.log" 2>&1
}

case "$mode" in
full)
  build_bitnetcpp & bpid=$!
  make -j16 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  set +e
  make -j16 test-gpu >"$OUT/test-gpu.log" 2>&1; echo "make test-gpu: exit $?"
  grep -E "^(FAIL|== )|  FAIL|passed, " "$OUT/test-gpu.log" | grep -v "^== " | tail -25
  wait $bpid && [ -f /tmp/libbitnet.so ] && BNCPP=/tmp/libbitnet.so || echo "bitnet.cpp build failed (bitnetcpp_build.log)"
  timeout 200 build/bitnet bench-kernels --backend cuda ${BNCPP:+--bitnetcpp $BNCPP} --json "$OUT/bench-kernels.json" \
    >"$OUT/bench-kernels.log" 2>"$OUT/bench-kernels.err"; echo "bench-kernels: exit $?"
  grep -v "^bitnet info" "$OUT/bench-kernels.log"
  for tool in memcheck racecheck; do
    BITNET_REQUIRE_GPU=1 BITNET_TEST_SMALL=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      build/tests/test_gpu_kernels >"$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1) | $(grep -E 'passed, ' "$OUT/sanitizer-$tool.log" | tail -1)"
  done
  ;;
tune)
  build_bitnetcpp & bpid=$!
  make -j16 all build/tests/test_gpu_kernels >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  set +e
  if [ -n "${TEST_GPU:-}" ]; then
    timeout 240 make -j16 test-gpu >"$OUT/test-gpu.log" 2>&1; echo "make test-gpu: exit $?"
    grep -E "^(FAIL|== )|  FAIL|passed, " "$OUT/test-gpu.log" | grep -v "^== " | tail -25
  else
    BITNET_REQUIRE_GPU=1 timeout 120 build/tests/test_gpu_kernels >"$OUT/test_gpu_kernels.log" 2>&1
    echo "test_gpu_kernels: exit $?"; grep -E "FAIL|passed, " "$OUT/test_gpu_kernels.log" | tail -8
  fi
  wait $bpid && [ -f /tmp/libbitnet.so ] && BNCPP=/tmp/libbitnet.so || echo "bitnet.cpp build failed (bitnetcpp_build.log)"
  timeout 200 build/bitnet bench-kernels --backend cuda ${BNCPP:+--bitnetcpp $BNCPP} --json "$OUT/bench-kernels.json" \
    >"$OUT/bench-kernels.log" 2>"$OUT/bench-kernels.err"; echo "bench-kernels: exit $?"
  grep -v "^bitnet info" "$OUT/bench-kernels.log"
  IFS=';' read -ra cfgs <<<"${CONFIGS:-BITNET_TGEMV_PDL=0;BITNET_TGEMV_PDL=1;BITNET_TGEMV_WARPS=16 BITNET_TGEMV_U=8;BITNET_TGEMV_WARPS=8 BITNET_TGEMV_U=4}"
  for cfg in "${cfgs[@]}"; do
    env $cfg timeout 60 build/bitnet bench-kernels --backend cuda --quick >>"$OUT/quick.log" 2>&1
    echo "$cfg:"; grep -E "^[0-9]+x[0-9]+ +1 " "$OUT/quick.log" | tail -6
  done
  for tool in memcheck racecheck; do
    BITNET_REQUIRE_GPU=1 BITNET_TEST_SMALL=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
      build/tests/test_gpu_kernels >"$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? | $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1) | $(grep -E 'passed, ' "$OUT/sanitizer-$tool.log" | tail -1)"
  done
  ;;
dev)
  build_bitnetcpp && [ -f /tmp/libbitnet.so ] && BNCPP=/tmp/libbitnet.so
  mkdir -p /tmp/mods
  cat >/tmp/dump.c <<'CEOF'
#include <stdio.h>
#include "bitnet_cuda_kernels.h"
int main(int argc, char **argv) {
    char p[512]; FILE *f;
#define W(name, sym, sm, a_sm) snprintf(p, sizeof p, "%s/" #name ".cu", argv[1]); f = fopen(p, "w"); \
    fputs(bitnet_cuda_src_common, f); fputs(sym, f); fclose(f);
    BITNET_CUDA_MODULES(W)
    return 0;
}
CEOF
  cc -I. -o /tmp/dump /tmp/dump.c && /tmp/dump /tmp/mods || exit 1
  PYTHONUNBUFFERED=1 python3 tools/gpu_kernels_dev.py /tmp/mods ${DEV_ARGS:---check --bench} \
    ${BNCPP:+--bitnetcpp $BNCPP} --json "$OUT/dev.json" 2>&1 | tee "$OUT/dev.log"
  ;;
esac
