#!/bin/bash
# Session 48 call E: `bitnet convert` against transformers and tokenizers, now with a ternary LLaMA (step 5).
cd "$(dirname "$0")/../.."
make -j16 all > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
python3 tools/hf_convert_check.py --tiktoken .dev/llama3-tokenizer.tiktoken --out $OUT --layers 2 > $OUT/hf_convert_check.stdout 2>&1
echo "check rc $?"
grep -v "Loading weights" $OUT/hf_convert_check.stdout | tail -22
