#!/usr/bin/env bash
# GPU-vs-CPU divergence diagnostics on the GPU machine, in one call (issues 4 and 6):
# build, tests/test_cuda_forward, tools/fwd_divergence.c on the test's random models, tiny.gguf and
# a gen-model 2b4t GGUF, then tools/hf_parity.py (ours on the CPU and on CUDA). Logs to $OUT.
#   usage: tools/gpufix_run.sh [STAGE...]   stages: test div divhd64 hf hf4 hfcuda bench speed memcheck testgpu (default: test div hf)
set -u
OUT=${OUT:-/tmp/gpufix}
L=/tmp/gpufix-logs   # every log; $OUT gets them as logs.tgz after each step (few files come back)
mkdir -p "$OUT" "$L"
export BITNET_CACHE_DIR=${BITNET_CACHE_DIR:-$PWD/.jitcache}
mkdir -p "$BITNET_CACHE_DIR"
stages=${*:-test div hf}
has() { case " $stages " in *" $1 "*) return 0;; esac; return 1; }
step() { # step NAME SECONDS CMD...
  local name=$1 lim=$2; shift 2
  echo "== $name: $*"
  local t0=$(date +%s.%N)
  timeout "$lim" "$@" > "$L/$name.log" 2>&1; local rc=$?
  tail -n 25 "$L/$name.log"
  echo "== $name: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}') s"
  tar -C "$L" -czf "$OUT/logs.tgz" --exclude='*.gguf' --exclude='*.f32' .
  return $rc
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$L/gpu.txt"
step build 200 make -j"$(nproc)" all build/tests/test_cuda_forward || exit 1
step build-div 120 cc -O2 -std=c11 -o build/fwd_divergence tools/fwd_divergence.c -lm -ldl -lpthread || exit 1
tk=llama3-tokenizer.tiktoken; [ -f "$tk" ] || tk=../shared/data/llama3-tokenizer.tiktoken
if has testgpu; then step test-gpu 300 make test-gpu; fi
if has test; then BITNET_REQUIRE_GPU=1 step test 120 build/tests/test_cuda_forward; fi
if has div || has bench || has divhd64 || has speed; then
  [ -f /tmp/2b4t.gguf ] || step gen-2b4t 120 build/bitnet gen-model --preset 2b4t --tiktoken "$tk" -o /tmp/2b4t.gguf
fi
if has divhd64; then step div-hd64 60 build/fwd_divergence hd64; fi
if has div; then
  step div-hd64 60 build/fwd_divergence hd64
  step div-hd128 60 build/fwd_divergence hd128
  step div-tiny 60 build/fwd_divergence tests/data/tiny.gguf --n-pre 70 --n-dec 30
  step div-2b4t 200 build/fwd_divergence /tmp/2b4t.gguf --n-pre 64 --n-dec 8 --greedy 64 --prompt 64
fi
if has hf; then
  step hf-cpu 150 python3 tools/hf_parity.py --bitnet build/bitnet --gguf tests/data/tiny.gguf --structured-layers 2 --out "$L/hf-cpu" --backend cpu
  step hf-cuda 150 python3 tools/hf_parity.py --bitnet build/bitnet --gguf tests/data/tiny.gguf --structured-layers 2 --out "$L/hf-cuda" --backend cuda
fi
if has bench; then # cuda = cpu greedy: default heads (cuda fp16, cpu int8), then like for like
  B="--backend all --prompt-tokens 64 --gen-tokens 64 --runs 1 --warmup 0 --check-determinism --require-gpu"
  step det-tiny 60 build/bitnet bench -m tests/data/tiny.gguf $B
  step det-tiny-f16 60 env BITNET_HEAD=f16 build/bitnet bench -m tests/data/tiny.gguf $B
  step det-2b4t-f16 150 env BITNET_HEAD=f16 build/bitnet bench -m /tmp/2b4t.gguf $B
  step det-2b4t 150 build/bitnet bench -m /tmp/2b4t.gguf $B
fi
if has speed; then # this branch, then the main checkout the device copied (its own build), same command
  S="--backend cuda --prompt-tokens 64,512 --gen-tokens 128 --runs 3 --require-gpu"
  step speed 120 build/bitnet bench -m /tmp/2b4t.gguf $S
  if [ -f ../../bitnet.h ]; then
    step build-main 120 make -C ../.. BUILD=build-gpufix-main build-gpufix-main/bitnet
    step speed-main 120 ../../build-gpufix-main/bitnet bench -m /tmp/2b4t.gguf $S
  fi
fi
if has memcheck; then
  step memcheck 150 env BITNET_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_cuda_forward
fi
if has hfcuda; then
  step hf-cuda 150 python3 tools/hf_parity.py --bitnet build/bitnet --gguf tests/data/tiny.gguf --structured-layers 2 --out "$L/hf-cuda" --backend cuda
fi
if has hf4; then
  step hf4-cuda 150 python3 tools/hf_parity.py --bitnet build/bitnet --structured-layers 4 --out "$L/hf4-cuda" --backend cuda
fi
