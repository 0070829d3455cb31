#!/usr/bin/env bash
# Device script for the GPU kernels (issue 5), run on the GPU machine from the repository root:
#   tools/gpu_kernels.sh dev     CuPy harness: kernel checks + variant sweeps + baselines
#   tools/gpu_kernels.sh full    make test-gpu, compute-sanitizer memcheck/racecheck on
#                                test_gpu_kernels, then build/bitnet bench-kernels --backend cuda
# bitnet.cpp's kernel is built from .bitnetcpp/ (gpu/bitnet_kernels/*.{cu,h} of a fetched
# microsoft/BitNet checkout, carried in the device sync folder, never committed) when present.
# Logs and JSON go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_kernels_out}
mkdir -p "$OUT"
mode=${1:-dev}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader

BNCPP=""
if [ -f .bitnetcpp/bitnet_kernels.cu ]; then
  # bitnet.cpp's own compile.sh flags, for this GPU's architecture
  if nvcc -std=c++17 -Xcudafe --diag_suppress=177 --compiler-options -fPIC -lineinfo --shared \
       .bitnetcpp/bitnet_kernels.cu -lcuda -gencode=arch=compute_90,code=sm_90 -o /tmp/libbitnet.so \
       >"$OUT/bitnetcpp_build.log" 2>&1; then
    BNCPP=/tmp/libbitnet.so
  else
    echo "bitnet.cpp build failed (see bitnetcpp_build.log)"
  fi
fi

case "$mode" in
dev)
  mkdir -p /tmp/mods
  cat >/tmp/dump.c <<'CEOF'
#include <stdio.h>
#include "bitnet_cuda_kernels.h"
int main(int argc, char **argv) {
    char p[512]; FILE *f;
#define W(name, sym, sm) snprintf(p, sizeof p, "%s/" #name ".cu", argv[1]); f = fopen(p, "w"); \
    fputs(bitnet_cuda_src_common, f); fputs(sym, f); fclose(f);
    BITNET_CUDA_MODULES(W)
    return 0;
}
CEOF
  cc -I. -o /tmp/dump /tmp/dump.c && /tmp/dump /tmp/mods || exit 1
  PYTHONUNBUFFERED=1 python3 tools/gpu_kernels_dev.py /tmp/mods ${DEV_ARGS:---check --bench} \
    ${BNCPP:+--bitnetcpp $BNCPP} --json "$OUT/dev.json" 2>&1 | tee "$OUT/dev.log"
  if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
    timeout 240 ncu -k regex:"bitnet_k_(tgemm|tgemv)" -c 6 --section SpeedOfLight --section WarpStateStats \
      --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      python3 tools/gpu_kernels_dev.py /tmp/mods --profile >"$OUT/ncu.txt" 2>&1
    echo "ncu exit $?"; grep -E "bitnet_k_|Duration|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per" "$OUT/ncu.txt" | head -60
  fi
  ;;
full)
  make -j8 all >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  make -j8 test-gpu 2>&1 | tee "$OUT/test-gpu.log" | tail -25
  for tool in memcheck racecheck; do
    BITNET_REQUIRE_GPU=1 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_gpu_kernels \
      >"$OUT/sanitizer-$tool.log" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitizer-$tool.log") clean summaries)"
    tail -3 "$OUT/sanitizer-$tool.log"
  done
  build/bitnet bench-kernels --backend cuda ${BNCPP:+--bitnetcpp $BNCPP} --json "$OUT/bench-kernels.json" 2>&1 |
    tee "$OUT/bench-kernels.log"
  ;;
esac
