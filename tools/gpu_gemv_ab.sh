#!/usr/bin/env bash
# M = 1 GEMV A/B on the GPU machine, in one call: this tree against a base tree (.base/: bitnet.h,
# bitnet_cuda_kernels.h, examples/bitnet.c exported from a commit), `bench-kernels --quick`
# alternating (environment for this tree's runs: $NEW_ENV), then the full bench-kernels with bitnet.cpp's
# kernel side by side (.bitnetcpp/: gpu/bitnet_kernels/bitnet_kernels.{cu,h} of a fetched
# microsoft/BitNet, never committed). Logs in $OUT.
#   OUT=$OUT tools/gpu_gemv_ab.sh
set -u
OUT=${OUT:-/tmp/gpu_gemv_ab}
mkdir -p "$OUT"
export BITNET_CACHE_DIR=/tmp/bitnet-jit-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
( [ -f .bitnetcpp/bitnet_kernels.cu ] && nvcc -std=c++17 -Xcudafe --diag_suppress=177 --compiler-options -fPIC -lineinfo --shared \
    .bitnetcpp/bitnet_kernels.cu -lcuda -gencode=arch=compute_90,code=sm_90 -o /tmp/libbitnet.so >"$OUT/bitnetcpp_build.log" 2>&1 ) &
bpid=$!
mkdir -p build
make -j"$(nproc)" build/bitnet >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
[ -f .base/bitnet.h ] && cc -O2 -std=c11 -o /tmp/base_bitnet .base/examples/bitnet.c -lm -ldl -lpthread
quick() { # quick NAME BINARY [ENV...]
  local name=$1 bin=$2; shift 2
  env "$@" timeout 90 "$bin" bench-kernels --backend cuda --quick >"$OUT/$name.log" 2>&1
  echo "$name: $(grep -E '^(13824x2560|20480x3200|2560x2560|3840x2560|2560x6912|55296x5120) +1 ' "$OUT/$name.log" | awk '{printf "%s %s  ", $1, $(NF-2)}')"
}
for i in 1 2; do
  [ -x /tmp/base_bitnet ] && quick base$i /tmp/base_bitnet
  quick new$i build/bitnet ${NEW_ENV:-}
done
wait $bpid
timeout 200 build/bitnet bench-kernels --backend cuda $( [ -f /tmp/libbitnet.so ] && echo --bitnetcpp /tmp/libbitnet.so ) \
  --json "$OUT/bench-kernels.json" >"$OUT/bench-kernels.log" 2>&1
grep -E "copy bandwidth| 1  " "$OUT/bench-kernels.log"
