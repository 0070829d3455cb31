#!/usr/bin/env bash
# bench-kernels of this tree and of another tree (BASE, e.g. an older main) in one call, alternating,
# with bitnet.cpp's kernel (built from BNC, a folder holding bitnet_kernels.{cu,h}) side by side.
#   OUT=$OUT BASE=.devsync/s2base BNC=.devsync/s2base/.bitnetcpp tools/gpu_kernels_ab.sh
set -u
out=${OUT:-/tmp/kab}; mkdir -p "$out"
make -j"$(nproc)" build/bitnet >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
( cd "$BASE" && make -j"$(nproc)" build/bitnet >"$out/build-base.log" 2>&1 ) || { tail -20 "$out/build-base.log"; exit 1; }
nvcc -std=c++17 -Xcudafe --diag_suppress=177 --compiler-options -fPIC -lineinfo --shared "$BNC/bitnet_kernels.cu" -lcuda \
  -gencode=arch=compute_90,code=sm_90 -o /tmp/libbitnet.so >"$out/bitnetcpp_build.log" 2>&1 || echo "bitnet.cpp build failed"
bn=; [ -f /tmp/libbitnet.so ] && bn="--bitnetcpp /tmp/libbitnet.so"
for r in 1 2; do
  timeout 200 build/bitnet bench-kernels --backend cuda $bn --json "$out/now$r.json" > "$out/now$r.txt" 2>&1
  timeout 200 "$BASE"/build/bitnet bench-kernels --backend cuda $bn --json "$out/base$r.json" > "$out/base$r.txt" 2>&1
done
for f in now1 base1 now2 base2; do echo "== $f"; grep -E "copy bandwidth|^(13824x2560|20480x3200|55296x5120|2560x2560|3840x2560|2560x6912) +1 " "$out/$f.txt"; done
