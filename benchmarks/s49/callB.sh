#!/bin/bash
# Session 49 call B: tools/hf_convert_check.py with the Falcon 3 pre-tokenizer step (2b) and the Llama 3.1 RoPE scaling step (6).
cd "$(dirname "$0")/../.."
make -j16 all > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 tools/hf_convert_check.py --tiktoken .dev/llama3-tokenizer.tiktoken --out $OUT --layers 2 > $OUT/callB-hf_convert_check.stdout 2>&1
echo "check rc $?"
grep -v "Loading weights" $OUT/callB-hf_convert_check.stdout | tail -40
