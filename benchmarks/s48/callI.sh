#!/bin/bash
# Session 48 call I: call E again after tools/hf_convert_check.py was factored (against_hf, tensor_diff; hf_parity.hf_round_kv takes the modeling module).
cd "$(dirname "$0")/../.."
make -j16 all > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 tools/hf_convert_check.py --tiktoken .dev/llama3-tokenizer.tiktoken --out $OUT --layers 2 > $OUT/callI-hf_convert_check.stdout 2>&1
echo "check rc $?"
grep -v "Loading weights" $OUT/callI-hf_convert_check.stdout | tail -22
