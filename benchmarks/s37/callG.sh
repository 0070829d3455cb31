#!/usr/bin/env bash
# session 37 call G: the Python tools after the HF_NAMES refactor
set -uo pipefail
cd "$(dirname "$0")/.."
make -j16 build/bitnet > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
python3 tools/hf_parity.py --no-hf --gguf tests/data/tiny.gguf --out $OUT/hfp 2>&1 | tail -2
M=/tmp/bitnet-2b4t.gguf
build/bitnet gen-model --preset 2b4t --seed 1 -o $M > /dev/null 2>&1
timeout 150 python3 tools/hf_decode_speed.py --gguf $M --forms dense --runs 1 --gen-tokens 32 --out $OUT/hf 2>&1 | grep -v -i "warn\|Loading" | tail -4
