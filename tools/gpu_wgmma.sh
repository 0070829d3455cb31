#!/usr/bin/env bash
# The wgmma GEMM (issue 5, M = 512) on the GPU machine, in one call: build; tests/test_gpu_kernels
# (every GEMM form against the CPU); bench-kernels with the wgmma kernel and with the mma.sync one
# (BITNET_TGEMM_WG=0), alternating; then 2B-4T prefill (`bitnet bench --prompt-tokens 512`) and
# tests/test_cuda_forward. Logs in $OUT.
#   OUT=$OUT TIKTOKEN=.dev/llama3-tokenizer.tiktoken tools/gpu_wgmma.sh [quick|ncu|final]
# final: make test-gpu, then 2B-4T `bitnet bench` (prefill with each GEMM, decode), the cuda = cpu
# determinism check, and bench-kernels.
# ncu: Nsight Compute on the GEMM of bench-kernels' 13824x2560, M = 512 (both kernels).
set -u
OUT=${OUT:-/tmp/gpu_wgmma}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=/tmp/bitnet-jit-cache
step() { # step NAME TIMEOUT CMD...: output to $OUT/NAME.log
  local name=$1 lim=$2; shift 2
  local t0=$(date +%s)
  timeout "$lim" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name: exit $rc, $(( $(date +%s) - t0 )) s"
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step build 300 make -j"$(nproc)" all build/tests/test_gpu_kernels build/tests/test_cuda_forward || { tail -30 "$OUT/build.log"; exit 1; }
if [ "${1:-}" = final ]; then
  step test-gpu 420 make -j"$(nproc)" test-gpu
  grep -E "^(FAIL|  FAIL)|passed, " "$OUT/test-gpu.log" | tail -14
  step gen-model 120 build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o /tmp/2b4t.gguf
  for v in 1 0 1 0; do
    BITNET_TGEMM_WG=$v step prefill-wg$v 120 build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 512 --gen-tokens 16 --runs 3
    echo "WG=$v: $(grep -E "^cuda" "$OUT/prefill-wg$v.log" | tail -1)"
  done
  step decode 200 build/bitnet bench -m /tmp/2b4t.gguf --backend all --prompt-tokens 64,512 --gen-tokens 128 --runs 2 --check-determinism --require-gpu
  grep -E "^(cuda|cpu)|determinism" "$OUT/decode.log"
  step bench-kernels 150 build/bitnet bench-kernels --backend cuda --json "$OUT/bench-kernels.json"
  grep -E " 512 |copy bandwidth" "$OUT/bench-kernels.log"
  exit 0
fi
if [ "${1:-}" = ncu ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread
  for v in 1 0; do
    BITNET_TGEMM_WG=$v build/gemm_once ${NCU_SHAPE:-13824 2560 512} 50
    BITNET_TGEMM_WG=$v timeout 200 "$ncu" -k regex:'tgemm' --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor_op_.*cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum' \
      build/gemm_once ${NCU_SHAPE:-13824 2560 512} 3 > "$OUT/ncu-wg$v.txt" 2>&1
    grep -E 'bitnet_k_|Duration|Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|L2 Hit|stalled|pipe_tensor|lts__|inst_executed' "$OUT/ncu-wg$v.txt" | grep -v '^    ---' | awk '$NF != "0" && $NF != "0.00"' | head -60
  done
  exit 0
fi
BITNET_REQUIRE_GPU=1 step test-gpu-kernels 240 build/tests/test_gpu_kernels
grep -E "FAIL|passed, " "$OUT/test-gpu-kernels.log" | head -20
cc -O2 -std=c11 -o build/gemm_once tools/gemm_once.c -lm -ldl -lpthread
for shape in "13824 2560" "2560 6912" "3840 2560"; do
  for tn in 64 128; do BITNET_TGEMM_TN=$tn build/gemm_once $shape 512 50 | sed "s/^/TN=$tn /"; done
  BITNET_TGEMM_WG=0 build/gemm_once $shape 512 50 | sed "s/^/mma.sync /"
done
for i in 1 2; do
  step bench-wg$i 150 build/bitnet bench-kernels --backend cuda --json "$OUT/bench-wg$i.json"
  grep -E " 512 " "$OUT/bench-wg$i.log"
  [ "${1:-}" = quick ] && break
  BITNET_TGEMM_WG=0 step bench-mma$i 150 build/bitnet bench-kernels --backend cuda
  grep -E " 512 " "$OUT/bench-mma$i.log" | grep "bitnet.h"
done
[ "${1:-}" = quick ] && exit 0
step gen-model 120 build/bitnet gen-model --preset 2b4t --seed 1 ${TIKTOKEN:+--tiktoken "$TIKTOKEN"} -o /tmp/2b4t.gguf
for v in 1 0 1 0; do
  BITNET_TGEMM_WG=$v step prefill-wg$v 120 build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens 512 --gen-tokens 16 --runs 3
  echo "WG=$v: $(grep -E "^cuda" "$OUT/prefill-wg$v.log" | tail -1)"
done
BITNET_REQUIRE_GPU=1 step test-cuda-forward 200 build/tests/test_cuda_forward
grep -E "FAIL|passed, " "$OUT/test-cuda-forward.log" | tail -5
for tool in memcheck racecheck; do
  BITNET_REQUIRE_GPU=1 BITNET_TEST_SMALL=1 step sanitizer-$tool 200 compute-sanitizer --tool $tool --error-exitcode 9 build/tests/test_gpu_kernels
  echo "compute-sanitizer $tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer-$tool.log" | tail -1) | $(grep -E 'passed, ' "$OUT/sanitizer-$tool.log" | tail -1)"
done
