#!/usr/bin/env bash
# Nsight Compute on one decode step's kernels (2B-4T, random weights): duration, throughput,
# occupancy and warp stall reasons of the attention, the GEMVs and the int8 head. Logs to $OUT.
# PROMPT (default 64) sets where decoding starts: 64 is over warps in one range, 200 in two
# (past 128 positions a head's ranges are combined: on sm_90 in a cluster, elsewhere by their last block,
# ~3 us a layer more, BENCHMARKS.md sessions 22 and 23).
set -u
OUT=${OUT:-/tmp/gpu_ncu}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-$PWD/.jitcache}
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${ncu:-not found}"; ls /usr/local/cuda/bin | tr '\n' ' '; echo
make -j16 build/bitnet > "$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
tk=${TIKTOKEN:-llama3-tokenizer.tiktoken}
[ -f /tmp/2b4t.gguf ] || build/bitnet gen-model --preset 2b4t --tiktoken "$tk" -o /tmp/2b4t.gguf > "$OUT/gen.log" 2>&1 || exit 1
[ -n "$ncu" ] || exit 1
# after the warm-up and the prompt: a decode step in the middle of generation (position ~PROMPT + 36)
timeout 300 "$ncu" -k regex:'fwd_(attn_decode|attn_warps|gemv_store|gemv_res|gemv_glu|head_q8)' --launch-skip 3000 --launch-count 25 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  build/bitnet bench -m /tmp/2b4t.gguf --backend cuda --prompt-tokens "${PROMPT:-64}" --gen-tokens 64 --runs 1 > "$OUT/ncu.txt" 2>&1
echo "ncu exit $?"
grep -E '^  [a-z_]+|bitnet_k_|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issued Warp|Block Size|Grid Size|One or More|No Eligible|L2 Hit|Theoretical Occ|Dynamic Shared|Waves Per' "$OUT/ncu.txt" | grep -v '^    ---' | head -230
