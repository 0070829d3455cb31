#!/bin/bash
# Session 48 call A: `bitnet convert` against transformers and tokenizers on the GPU machine.
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
make -j16 > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
build/tests/test_convert > $OUT/test_convert.txt 2>&1
python3 tools/hf_convert_check.py --tiktoken .dev/llama3-tokenizer.tiktoken --out $OUT --layers 2 > $OUT/hf_convert_check.stdout 2>&1
echo "check rc $?"
tail -25 $OUT/hf_convert_check.stdout
# the whole 2B-4T shape: bf16 master weights (30 layers) converted, then loaded and run
timeout 240 python3 tools/bitnetcpp_ckpt.py --tiktoken .dev/llama3-tokenizer.tiktoken --out /tmp/ck30 --layers 30 > /dev/null &&
  { /usr/bin/time -v build/bitnet convert /tmp/ck30 -o /tmp/ck30.gguf 2>&1 | grep -E "wrote|Elapsed|Maximum resident"; ls -l /tmp/ck30.gguf /tmp/ck30/model.safetensors;
    build/bitnet run -m /tmp/ck30.gguf --backend cuda -p "Hello" -n 32 --temp 0 2>&1 | tail -2; } > $OUT/full-2b4t.txt 2>&1
cat $OUT/full-2b4t.txt
