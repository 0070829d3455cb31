#!/usr/bin/env bash
# Session 44 call E (one H200): tools/fwd_divergence.c mended (the decode attention's form set per position, as a
# step's graph has it: it had launched a stale form, the over-warps kernel that head_dim 256 does not have; the GPU
# model with the fp16 head for the op check, whose reference is the CPU's fp16 head) on hd64, hd128, tiny.gguf and
# the falcon3-1b file; test_cuda_forward after the form's choice moved into bitnet__gpu_att_form.
set -uo pipefail
t0=$SECONDS
TK=$PWD/.bitnetcpp/llama3-tokenizer.tiktoken
make -j"$(nproc)" build/bitnet build/impl.o build/tests/test_cuda_forward > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
cc -O2 -std=c11 -o build/fwd_divergence tools/fwd_divergence.c -lm -ldl -lpthread || exit 1
BITNET_REQUIRE_GPU=1 build/tests/test_cuda_forward > "$OUT/test_cuda_forward.txt" 2>&1
echo "test_cuda_forward ($((SECONDS - t0)) s): $(tail -1 "$OUT/test_cuda_forward.txt")"
build/bitnet gen-model --preset falcon3-1b --arch llama --pre falcon3 --tiktoken "$TK" -o /tmp/f3.gguf > /dev/null 2>&1
for m in hd64 hd128 tests/data/tiny.gguf /tmp/f3.gguf; do
  timeout 150 build/fwd_divergence "$m" --n-pre 40 --n-dec 20 --greedy 16 > "$OUT/div-${m##*/}.txt" 2>&1
  echo "fwd_divergence $m rc=$? ($((SECONDS - t0)) s)"; grep -E "op check|MISMATCH|ATTENTION|gpu:|head \(fp16\)|greedy" "$OUT/div-${m##*/}.txt" | cut -c1-160 | head -8
done
