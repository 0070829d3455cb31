#!/usr/bin/env bash
# A GGUF written by bitnet.cpp's own converter loads in bitnet.h and gives bitnet.cpp's greedy tokens.
#
#  1. tools/bitnetcpp_ckpt.py writes a random Hugging Face BitNetForCausalLM checkpoint (2B-4T
#     architecture and widths, LAYERS layers, bf16, LLaMA 3 tokenizer.json from the tiktoken file);
#  2. bitnet.cpp's documented path for such a checkpoint (README "Convert from .safetensors"):
#     utils/convert-helper-bitnet.py = preprocess-huggingface-bitnet.py (absmean ternary weights)
#     + convert-ms-to-gguf-bitnet.py (F32 GGUF, arch bitnet-25) + llama-quantize ... I2_S 1;
#     bitnet.cpp itself is built as setup_env.py does for 2B-4T on x86 (codegen_tl2.py, cmake with
#     BITNET_X86_TL2=OFF), only the targets needed, plus tools/bitnetcpp_greedy.cpp (prints ids);
#  3. ours: `bitnet info`, `tokenize`, `run --temp 0` on each backend, and `eval` teacher-forced on
#     bitnet.cpp's greedy sequence (each of our argmaxes equal to bitnet.cpp's next token at every
#     step = the same free-running greedy tokens); bitnet.cpp: greedy ids from the same prompt ids,
#     and llama-simple's greedy text beside our `run` text;
#  4. for each type in EMBD_TYPES (llama-quantize --token-embedding-type, bitnet.cpp's embedding
#     quantization; its src/README.md recommends Q6_K): the same F32 GGUF quantized to I2_S with the
#     embedding (the tied head) in that type; tools/dequant_check.c compares bitnet_dequantize with
#     ggml's to_float (tools/bitnetcpp_dequant.cpp) bit for bit, and our eval, teacher-forced on
#     bitnet.cpp's greedy tokens from that file, gives the argmax agreement per backend.
# bitnet.cpp is fetched, never committed: BNC names its unpacked tree (or BNC_TGZ a tarball of it).
#   OUT=out BNC_TGZ=bitnetcpp.tgz TIKTOKEN=llama3-tokenizer.tiktoken BACKENDS="cpu cuda" tools/bitnetcpp_convert_check.sh
# Writes $OUT/summary.txt (the verdict and the ids) and $OUT/logs.tgz (every step's log).
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/out}
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
WORK=${WORK:-$(mktemp -d)}
BNC=${BNC:-$WORK/bitnetcpp}
BNC_TGZ=${BNC_TGZ:-}
TIKTOKEN=${TIKTOKEN:-../shared/data/llama3-tokenizer.tiktoken}
LAYERS=${LAYERS:-2}
CKPT_ARGS=${CKPT_ARGS:-}
N=${N:-32}
PROMPT=${PROMPT:-The capital of France is Paris, and the capital of Germany is}
PROMPT2=${PROMPT2-"Hello, world!!! 12345 apples... (x+y)=z;   tabs	and  'quotes'"}
HF=${HF:-1}
EMBD_TYPES=${EMBD_TYPES-q6_k q8_0 q5_0 q4_0 q4_k}
BACKENDS=${BACKENDS:-cpu cuda}
JOBS=${JOBS:-$(nproc)}
PY=${PY:-python3}
THREADS=${THREADS:-$JOBS}
LOGS=$OUT/logs
mkdir -p "$LOGS" "$WORK"
SUM=$OUT/summary.txt
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a "$SUM"; }
finish() {
    tar -C "$OUT" -czf "$OUT/logs.tgz" logs 2>/dev/null && rm -rf "$LOGS"
    stamp "done"
}
trap finish EXIT

say "== bitnet.cpp converter check $(date -u +%FT%TZ) on $(hostname), $(nproc) cores"
say "bitnet.h commit: $(cat .commit 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
TIKTOKEN=$(cd "$(dirname "$TIKTOKEN")" && pwd)/$(basename "$TIKTOKEN")
[ -f "$TIKTOKEN" ] || { say "FAIL: no tiktoken file at $TIKTOKEN"; exit 1; }

# ---- tools present here --------------------------------------------------------------------------
for t in cmake gcc g++ make nvcc; do say "tool $t: $(command -v $t >/dev/null && ($t --version 2>&1 | head -1) || echo absent)"; done
PYSTUB=$WORK/pystub
mkdir -p "$PYSTUB"
for m in numpy torch safetensors sentencepiece transformers; do
    v=$($PY -c "import $m; print(getattr($m, '__version__', 'present'))" 2>/dev/null || echo absent)
    say "python $m: $v"
    if [ "$m" = sentencepiece ] && [ "$v" = absent ]; then
        # convert-ms-to-gguf-bitnet.py imports it at the top; --vocab-type bpe never uses it.
        printf 'class SentencePieceProcessor:\n    def __init__(self, *a, **k):\n        raise ImportError("sentencepiece is absent")\n' > "$PYSTUB/sentencepiece.py"
        say "  (a stub sentencepiece module stands in: the BPE vocabulary path does not use it)"
    fi
done

# ---- bitnet.cpp: unpack, generate the kernel header as setup_env.py does, build -------------------
if [ -n "$BNC_TGZ" ]; then rm -rf "$BNC" && mkdir -p "$BNC" && tar -C "$BNC" -xzf "$BNC_TGZ"; fi
[ -f "$BNC/utils/convert-helper-bitnet.py" ] || { say "FAIL: no bitnet.cpp tree at $BNC"; exit 1; }
say "bitnet.cpp tree: $(cat "$BNC/SOURCE" 2>/dev/null | head -3 | tr '\n' ' ')"
export PYTHONPATH=$PYSTUB:$BNC/3rdparty/llama.cpp/gguf-py${PYTHONPATH:+:$PYTHONPATH}
if [ "$($PY -c 'import numpy; print(numpy.__version__.split(".")[0])')" -ge 2 ]; then
    # bitnet.cpp pins numpy~=1.26 (requirements-convert_legacy_llama.txt); NumPy 2 dropped scalar
    # newbyteorder, which convert-ms-to-gguf-bitnet.py's little-endian probe calls first thing. With
    # no registry on the GPU machine the probe (it only offers q8_0 output) becomes sys.byteorder.
    sed -i 's/if np.uint32(1) == np.uint32(1).newbyteorder("<"):/if sys.byteorder == "little":/' "$BNC/utils/convert-ms-to-gguf-bitnet.py"
    say "NumPy 2 here: convert-ms-to-gguf-bitnet.py's endianness probe replaced by sys.byteorder ($(grep -c 'sys.byteorder == "little"' "$BNC/utils/convert-ms-to-gguf-bitnet.py") line)"
fi
build_bnc() {
    cd "$BNC" || return 1
    $PY utils/codegen_tl2.py --model bitnet_b1_58-3B --BM 160,320,320 --BK 96,96,96 --bm 32,32,32 || return 1
    # gcc: bitnet.cpp's CMakeLists adds -fpermissive for it (clang rejects a const cast in ggml-bitnet-mad.cpp).
    cmake -B build -DBITNET_X86_TL2=OFF -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE=Release || return 1
    cmake --build build --target llama-quantize llama-simple -j"$JOBS" || return 1
    local libs
    libs=$(find build -name 'libllama.*' -o -name 'libggml.*' | xargs -n1 dirname | sort -u)
    g++ -O2 -std=c++17 "$ROOT/tools/bitnetcpp_greedy.cpp" -I 3rdparty/llama.cpp/include -I 3rdparty/llama.cpp/ggml/include \
        $(for d in $libs; do echo "-L$d -Wl,-rpath,$BNC/$d"; done) -lllama -lggml -lpthread -o build/bin/bitnetcpp_greedy || return 1
    g++ -O2 -std=c++17 "$ROOT/tools/bitnetcpp_dequant.cpp" -I 3rdparty/llama.cpp/ggml/include \
        $(for d in $libs; do echo "-L$d -Wl,-rpath,$BNC/$d"; done) -lggml -lpthread -o build/bin/bitnetcpp_dequant
}
stamp "building bitnet.cpp (background) and bitnet.h"
( build_bnc ) > "$LOGS/bnc_build.log" 2>&1 &
BNC_PID=$!
make -j"$JOBS" build/bitnet build/impl.o > "$LOGS/make.log" 2>&1 || { say "FAIL: make build/bitnet"; tail -20 "$LOGS/make.log"; exit 1; }
cc -O2 -o build/dequant_check tools/dequant_check.c build/impl.o -lm -ldl -lpthread >> "$LOGS/make.log" 2>&1 || { say "FAIL: dequant_check"; exit 1; }

# ---- the Hugging Face checkpoint and bitnet.cpp's conversion --------------------------------------
CKPT=$WORK/ckpt
stamp "writing the HF checkpoint"
$PY tools/bitnetcpp_ckpt.py --tiktoken "$TIKTOKEN" --out "$CKPT" --layers "$LAYERS" $CKPT_ARGS 2>&1 | tee -a "$SUM" || { say "FAIL: checkpoint"; exit 1; }
wait $BNC_PID
bnc_rc=$?
stamp "bitnet.cpp build rc=$bnc_rc"
[ $bnc_rc = 0 ] || { say "FAIL: bitnet.cpp build"; tail -30 "$LOGS/bnc_build.log"; exit 1; }
QUANT=$BNC/build/bin/llama-quantize
SIMPLE=$BNC/build/bin/llama-simple
GREEDY=$BNC/build/bin/bitnetcpp_greedy
stamp "running bitnet.cpp's convert-helper-bitnet.py"
(cd "$BNC" && $PY utils/convert-helper-bitnet.py "$CKPT") > "$LOGS/convert.log" 2>&1
GGUF=$CKPT/ggml-model-i2s-bitnet.gguf
[ -s "$GGUF" ] || { say "FAIL: the converter wrote no $GGUF"; tail -30 "$LOGS/convert.log"; exit 1; }
grep -E 'llama_model_quantize_internal: (model|quant) size|general.architecture|type +i2_s|type +f16|type +f32' "$LOGS/convert.log" | head -8 | tee -a "$SUM"
say "gguf: $(basename "$GGUF") $(stat -c %s "$GGUF") bytes, sha256 $(sha256sum "$GGUF" | cut -c1-16)"

# ---- ours ----------------------------------------------------------------------------------------
stamp "bitnet info / tokenize"
if build/bitnet info "$GGUF" > "$LOGS/info.txt" 2>&1; then say "bitnet info: ok"; else say "FAIL: bitnet info"; tail -5 "$LOGS/info.txt" | tee -a "$SUM"; exit 1; fi
grep -E -i 'architecture|I2_S|tokenizer.ggml.(model|pre)|check|tensors' "$LOGS/info.txt" | head -12 > "$LOGS/info_head.txt"
head -c 1500 "$LOGS/info_head.txt" >> "$SUM"
P_OURS=$(build/bitnet tokenize -m "$GGUF" -p "$PROMPT" 2> "$LOGS/tokenize.err")
say "prompt: $PROMPT"
say "our prompt ids: $P_OURS"

stamp "bitnet.cpp greedy ($N tokens) from our prompt ids"
LOGITS_OUT=$WORK/bnc_logits.f32 "$GREEDY" "$GGUF" "$N" "$P_OURS" "$PROMPT" "$THREADS" > "$LOGS/bnc_greedy.txt" 2> "$LOGS/bnc_greedy.err" || { say "FAIL: bitnetcpp_greedy"; tail -20 "$LOGS/bnc_greedy.err" | tee -a "$SUM"; exit 1; }
cat "$LOGS/bnc_greedy.txt" | tee -a "$SUM"
"$SIMPLE" -m "$GGUF" -n "$N" "$PROMPT" > "$LOGS/bnc_simple.txt" 2> "$LOGS/bnc_simple.err"
say "llama-simple rc=$? text: $(head -c 600 "$LOGS/bnc_simple.txt" | tr '\n' ' ')"
G_BNC=$(sed -n 's/^gen: //p' "$LOGS/bnc_greedy.txt")

if [ -n "$PROMPT2" ]; then  # tokenization only: a file without tokenizer.ggml.pre gets llama.cpp's 'default' split
    P2=$(build/bitnet tokenize -m "$GGUF" -p "$PROMPT2" 2>/dev/null)
    L2=$("$GREEDY" "$GGUF" 1 "$P2" "$PROMPT2" "$THREADS" 2>/dev/null | sed -n 's/^llama_tokenize: //p')
    say "prompt 2: $PROMPT2"
    say "  ours:       $P2"
    say "  bitnet.cpp: $L2"
    say "  equal: $([ "$P2" = "$L2" ] && echo yes || echo no)"
fi

HF_IDS=
if [ "$HF" = 1 ] && $PY -c "import transformers" 2>/dev/null; then
    stamp "transformers greedy on the same checkpoint"
    $PY tools/bitnetcpp_hf_greedy.py "$CKPT" "$N" "$P_OURS" > "$LOGS/hf_greedy.txt" 2> "$LOGS/hf_greedy.err" && cat "$LOGS/hf_greedy.txt" | tee -a "$SUM" \
        || { say "transformers greedy failed:"; tail -5 "$LOGS/hf_greedy.err" | tee -a "$SUM"; }
    HF_IDS=$(sed -n 's/^hf: //p' "$LOGS/hf_greedy.txt" 2>/dev/null)
fi

for be in $BACKENDS; do
    stamp "ours, backend $be"
    for head in f16 default; do
        hf=; [ $head = f16 ] && hf="--head f16"
        build/bitnet run -m "$GGUF" -p "$PROMPT" -n "$N" --temp 0 --backend "$be" $hf > "$LOGS/run_${be}_$head.txt" 2> "$LOGS/run_${be}_$head.err"
        say "bitnet run --backend $be ${hf:-(default head)} rc=$? text: $(head -c 600 "$LOGS/run_${be}_$head.txt" | tr '\n' ' ')"
        build/bitnet eval -m "$GGUF" --tokens "$P_OURS,$G_BNC" --logits-out "$WORK/ev_${be}_$head.f32" --backend "$be" $hf > "$LOGS/eval_${be}_$head.txt" 2>&1
        say "bitnet eval --backend $be ${hf:-(default head)} rc=$?"
    done
    if [ -n "$HF_IDS" ]; then
        build/bitnet eval -m "$GGUF" --tokens "$P_OURS,$HF_IDS" --logits-out "$WORK/evhf_${be}_f16.f32" --backend "$be" --head f16 > "$LOGS/evalhf_$be.txt" 2>&1
    fi
done

# ---- verdict -------------------------------------------------------------------------------------
$PY - "$WORK" "$LOGS" "$P_OURS" "$G_BNC" "$BACKENDS" "$PROMPT" "$HF_IDS" <<'EOF' 2>&1 | tee -a "$SUM"
import os, sys
import numpy as np
work, logs, p, g, backends, prompt, hf = sys.argv[1:8]
backends = backends.split()
P = [int(x) for x in p.split(",")]
G = [int(x) for x in g.split(",")]
H = [int(x) for x in hf.split(",")] if hf else []
lt = open(os.path.join(logs, "bnc_greedy.txt")).read()
line = [l for l in lt.splitlines() if l.startswith("llama_tokenize:")]
if line:
    ids = [int(x) for x in line[0].split(":", 1)[1].split(",")]
    print("prompt ids equal (ours vs llama.cpp's tokenizer): %s" % (ids == P))
BL = None
if os.path.exists(os.path.join(work, "bnc_logits.f32")):
    BL = np.fromfile(os.path.join(work, "bnc_logits.f32"), dtype=np.float32).reshape(len(G), -1)
simple = open(os.path.join(logs, "bnc_simple.txt"), errors="replace").read()
simple = simple[simple.find(prompt) + len(prompt):].strip() if prompt in simple else None  # after the echoed prompt
if H:
    same = sum(a == b for a, b in zip(H, G))
    first = next((i for i, (a, b) in enumerate(zip(H, G)) if a != b), None)
    print("transformers vs bitnet.cpp greedy: %d/%d equal, first difference at step %s" % (same, len(G), first))

def teacher(f, seq, label):
    L = np.fromfile(f, dtype=np.float32)
    L = L.reshape(len(P) + len(seq), -1)[len(P) - 1:len(P) - 1 + len(seq)]
    ours = [int(np.argmax(r)) for r in L]
    same = sum(a == b for a, b in zip(ours, seq))
    first = next((i for i, (a, b) in enumerate(zip(ours, seq)) if a != b), None)
    print("%s: teacher-forced argmax equal at %d/%d steps%s" % (label, same, len(seq), "" if first is None else
          " (first difference at step %d: ours %d, theirs %d)" % (first, ours[first], seq[first])))
    for i, (a, b) in enumerate(zip(ours, seq)):
        if a != b:  # how close the call was: our logit gap between the two tokens, and theirs
            print("    step %d: our logit[%d] - logit[%d] = %.4g%s" % (i, a, b, L[i][a] - L[i][b], "" if BL is None or label.find("bitnet.cpp") < 0
                  else "; bitnet.cpp's logit[%d] - logit[%d] = %.4g" % (b, a, BL[i][b] - BL[i][a])))
    return L, first

ok_all = True
for be in backends:
    for head in ("f16", "default"):
        f = os.path.join(work, "ev_%s_%s.f32" % (be, head))
        if not os.path.exists(f) or os.path.getsize(f) == 0:
            print("%s/%s: no logits" % (be, head)); ok_all = False; continue
        L, first = teacher(f, G, "%s, head %s, vs bitnet.cpp" % (be, head))
        if BL is not None:
            rel = [float(np.linalg.norm(L[i] - BL[i]) / np.linalg.norm(BL[i])) for i in range(len(G))]
            print("    logits rel L2 vs bitnet.cpp per step: first %.3g, median %.3g, max %.3g" % (rel[0], np.median(rel), max(rel)))
        run = open(os.path.join(logs, "run_%s_%s.txt" % (be, head)), errors="replace").read().strip()
        text_same = bool(run) and simple is not None and (run.startswith(simple) or simple.startswith(run))
        print("    `bitnet run --temp 0` text equals llama-simple's greedy text: %s" % text_same)
        if head == "f16":
            ok_all = ok_all and first is None and text_same
    fh = os.path.join(work, "evhf_%s_f16.f32" % be)
    if H and os.path.exists(fh) and os.path.getsize(fh):
        teacher(fh, H, "%s, head f16, vs transformers" % be)
print("VERDICT (fp16 head, as bitnet.cpp's F16 token_embd): %s" % ("PASS, the same greedy tokens" if ok_all else "MISMATCH (see above)"))
EOF

# ---- the embedding in llama.cpp's block types (bitnet.cpp's --token-embedding-type) ---------------
F32GGUF=$CKPT/ggml-model-f32-bitnet.gguf
for T in $EMBD_TYPES; do
    [ -s "$F32GGUF" ] || { say "embedding types: no $F32GGUF"; break; }
    E=$WORK/emb_$T.gguf
    stamp "embedding $T: llama-quantize --token-embedding-type $T ... I2_S"
    "$QUANT" --token-embedding-type "$T" "$F32GGUF" "$E" I2_S 1 > "$LOGS/quant_$T.log" 2>&1 || { say "embedding $T: llama-quantize failed"; tail -5 "$LOGS/quant_$T.log" | tee -a "$SUM"; continue; }
    say "embedding $T: $(build/bitnet info "$E" 2>&1 | grep -E '^ *token_embd.weight' | awk '{print $1, $2, $3, $4}') file $(stat -c %s "$E") bytes"
    "$BNC/build/bin/bitnetcpp_dequant" "$E" token_embd.weight "$WORK/ref_$T.f32" > "$LOGS/dequant_$T.txt" 2>&1
    build/dequant_check "$E" token_embd.weight "$WORK/ref_$T.f32" 2>&1 | sed "s/^/  /" | tee -a "$SUM"
    "$GREEDY" "$E" "$N" "$P_OURS" "$PROMPT" "$THREADS" > "$LOGS/bnc_greedy_$T.txt" 2> "$LOGS/bnc_greedy_$T.err" || { say "  bitnetcpp_greedy failed"; continue; }
    GT=$(sed -n 's/^gen: //p' "$LOGS/bnc_greedy_$T.txt")
    say "  bitnet.cpp greedy: $GT"
    for be in $BACKENDS; do
        for head in f16 default; do
            hf=; [ $head = f16 ] && hf="--head f16"
            build/bitnet eval -m "$E" --tokens "$P_OURS,$GT" --logits-out "$WORK/emb_${T}_${be}_$head.f32" --backend "$be" $hf > "$LOGS/eval_${T}_${be}_$head.txt" 2>&1
            $PY - "$WORK/emb_${T}_${be}_$head.f32" "$P_OURS" "$GT" "$be" "$head" <<'PYEOF' 2>&1 | tee -a "$SUM"
import os, sys
import numpy as np
f, p, g, be, head = sys.argv[1:6]
P = [int(x) for x in p.split(",")]
G = [int(x) for x in g.split(",")]
if not os.path.exists(f) or os.path.getsize(f) == 0:
    print("  %s, head %s: no logits" % (be, head)); sys.exit(0)
L = np.fromfile(f, dtype=np.float32).reshape(len(P) + len(G), -1)[len(P) - 1:len(P) - 1 + len(G)]
ours = [int(np.argmax(r)) for r in L]
same = sum(a == b for a, b in zip(ours, G))
first = next((i for i, (a, b) in enumerate(zip(ours, G)) if a != b), None)
print("  %s, head %s: teacher-forced argmax equal to bitnet.cpp's greedy at %d/%d steps%s" % (be, head, same, len(G), "" if first is None else
      " (first difference at step %d: our logit[%d] - logit[%d] = %.4g)" % (first, ours[first], G[first], L[first][ours[first]] - L[first][G[first]])))
PYEOF
        done
    done
done
