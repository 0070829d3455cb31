#!/usr/bin/env python3
"""`bitnet convert` against Hugging Face's own reading of the same checkpoint (GPU machine).

1. A random BitNet checkpoint in the layout of microsoft/bitnet-b1.58-2B-4T-bf16 (2B-4T shapes,
   a few layers, bf16 master weights, LLaMA 3 tokenizer.json; tools/bitnetcpp_ckpt.py), with the
   -bf16 repo's quantization_config (AutoBitLinear, online), goes through `bitnet convert`.
2. Tokenizer: the `tokenizers` library reading that tokenizer.json against `bitnet tokenize -m`
   on the converted file, on tools/tokenizer_parity.py's texts (unicode, digits, white space, code,
   special tokens); every id must match.
3. Logits: transformers' BitNetForCausalLM on the checkpoint (float32, its quantized path) against
   `bitnet eval` on the converted file, as tools/hf_parity.py compares them (fp16 K/V on HF's side;
   rel L2 per position <= --tol, greedy tokens teacher-forced >= --min-greedy of --gen).
4. Packed: the converted file written back as a packed checkpoint (hf_parity.hf_checkpoint: uint8
   [n/4][k] + weight_scale, as microsoft/bitnet-b1.58-2B-4T; both linear classes) and converted
   again: every tensor the same bytes (BitLinear's inverse scale: within 1e-6).
5. A ternary LLaMA (Llama3-8B-1.58's kind, transformers' LlamaForCausalLM with quantization_config
   {"quant_method": "bitnet"}: BitLinear, packed, weight_scale divides): `gen-model --arch llama`'s
   file written as that checkpoint (q and k rows back in Hugging Face's order), converted: the same
   bytes as the file; and transformers' logits on the checkpoint against ours on the conversion.
6. Step 5's checkpoint with Llama 3.1's RoPE scaling (rope_scaling "llama3", a short original
   context so that most frequencies move): the frequencies our rope_freqs.weight gives against
   transformers' inv_freq, the logits and greedy tokens as in 3, and (the control) step 5's
   unscaled conversion against the scaled model.
Step 2b: step 1's vocabulary under Falcon 3's pre-tokenizer (Punctuation, ByteLevel, Digits), as the
   converter recognises it (tokenizer.ggml.pre "falcon3"), against `tokenizers`; the only
   mismatches allowed are texts holding a byte that Hugging Face's Digits step sees as a number
   after ByteLevel (llama.cpp's falcon3, which bitnet.h follows, cuts at ASCII digits only).

  python3 tools/hf_convert_check.py --tiktoken llama3-tokenizer.tiktoken --out DIR [--layers 2]
"""
import argparse, json, os, shutil, subprocess, sys, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bitnetcpp_ckpt  # noqa: E402
import hf_parity  # noqa: E402
import tokenizer_parity  # noqa: E402


def run(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("failed: %s\n%s%s" % (" ".join(cmd), p.stdout[-2000:], p.stderr[-2000:]))
    return p, time.time() - t0


# Llama 3.1's RoPE scaling with a short original context, so that it moves most frequencies
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}
# Falcon 3's pre-tokenizer steps (llama.cpp's "falcon3": punctuation runs, GPT-2's pattern, single digits)
FALCON3_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    {"type": "Digits", "individual_digits": True}]}
# bytes whose byte-level characters are numbers (2 3 1 1/4 1/2 3/4): Hugging Face's Digits step, after
# ByteLevel, cuts at them inside a UTF-8 sequence; llama.cpp's [0-9] does not
HF_DIGIT_BYTES = {0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE}


def llama_checkpoint(r, d, rope_scaling=None):
    """A packed LlamaForCausalLM BitNet checkpoint (BitLinear: weight_scale = 1 / scale) and a
    byte-level tokenizer.json from GGUF r (arch "llama": q and k rows in llama.cpp's RoPE order)."""
    from safetensors.numpy import save_file
    kv = r.kv
    g = lambda k, dflt=None: kv.get("llama." + k, dflt)
    dim, heads, kvh, layers = int(g("embedding_length")), int(g("attention.head_count")), int(g("attention.head_count_kv")), int(g("block_count"))
    hd = dim // heads
    tied = "output.weight" not in r.tensors
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": int(r.tensors["token_embd.weight"][0][1]),
           "hidden_size": dim, "intermediate_size": int(g("feed_forward_length")), "num_hidden_layers": layers,
           "num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": hd, "hidden_act": "silu",
           "max_position_embeddings": int(g("context_length")), "rms_norm_eps": float(g("attention.layer_norm_rms_epsilon")),
           "rope_theta": float(g("rope.freq_base")), "rope_scaling": rope_scaling,
           "tie_word_embeddings": tied, "attention_bias": False,
           "mlp_bias": False, "torch_dtype": "float32", "bos_token_id": int(kv["tokenizer.ggml.bos_token_id"]),
           "eos_token_id": int(kv["tokenizer.ggml.eos_token_id"]), "quantization_config": {"quant_method": "bitnet"}}
    sd = {"model.embed_tokens.weight": r.tensor("token_embd.weight"), "model.norm.weight": r.tensor("output_norm.weight")}
    if not tied:
        sd["lm_head.weight"] = r.tensor("output.weight")
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for l in range(layers):
        for ours, theirs in names.items():
            key = "model.layers.%d.%s" % (l, theirs)
            t = r.tensor("blk.%d.%s.weight" % (l, ours))
            if not isinstance(t, tuple):
                sd[key + ".weight"] = np.ascontiguousarray(t)
                continue
            q, scale = t
            if ours in ("attn_q", "attn_k"):  # GGUF row (h, 2i + j) is Hugging Face's (h, j * hd / 2 + i)
                nh = q.shape[0] // hd
                q = q.reshape(nh, hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(q.shape)
            n4 = q.shape[0] // 4
            codes = (q + 1).astype(np.uint8).reshape(4, n4, q.shape[1])
            sd[key + ".weight"] = codes[0] | (codes[1] << 2) | (codes[2] << 4) | (codes[3] << 6)
            sd[key + ".weight_scale"] = np.array([1.0 / scale], np.float32)
    os.makedirs(d, exist_ok=True)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, os.path.join(d, "model.safetensors"))
    tokens, types, merges = kv["tokenizer.ggml.tokens"], list(kv["tokenizer.ggml.token_type"]), kv["tokenizer.ggml.merges"]
    tok = {"version": "1.0", "normalizer": None,
           "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(tokens) if types[i] == 3],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": bitnetcpp_ckpt.PATTERN}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
           "model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(tokens) if types[i] == 1}, "merges": list(merges)}}
    json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w"), ensure_ascii=False)
    return cfg


def compare_tokenizer(a, tk_path, gguf, texts, label, log, show=None):
    """tokenizers reading tk_path against `bitnet tokenize` on gguf; the mismatching texts' indices.
    show(i): whether mismatch i is printed (where it starts, HF's pieces there)."""
    from tokenizers import Tokenizer
    import tokenizers
    tk = Tokenizer.from_file(tk_path)
    ref = [e.ids for e in tk.encode_batch(texts, add_special_tokens=False)]
    hexf = os.path.join(a.work, "texts.hex")
    with open(hexf, "w") as fh:
        for t in texts:
            fh.write(t.encode("utf-8").hex() + "\n")
    out, _ = run([a.bitnet, "tokenize", "-m", gguf, "--hex-lines", hexf, "--no-bos"])
    rows = out.stdout.split("\n")[:len(texts)]
    ours = [[int(x) for x in r.split(",")] if r else [] for r in rows]
    bad = [i for i in range(len(texts)) if i >= len(ours) or ours[i] != ref[i]]
    for i in [i for i in bad if show is None or show(i)][:8]:
        o = ours[i] if i < len(ours) else []
        at = next((k for k in range(min(len(o), len(ref[i]))) if o[k] != ref[i][k]), min(len(o), len(ref[i])))
        lo = max(0, at - 2)
        log("  MISMATCH %r\n    from token %d: HF %s\n                   bitnet %s" % (
            texts[i][:160], at, [tk.id_to_token(x) for x in ref[i][lo:at + 4]], [tk.id_to_token(x) for x in o[lo:at + 4]]))
    log("%s: tokenizers %s reading tokenizer.json vs bitnet tokenize -m (converted): %d texts, %d characters, %d tokens, "
        "%d mismatches" % (label, tokenizers.__version__, len(texts), sum(map(len, texts)), sum(map(len, ref)), len(bad)))
    return bad


def against_hf(a, m, gguf, vocab, toks, label, log):
    """Ours (`bitnet eval` on gguf, fp16 head) against HF model m: logits at every position, and HF's
    greedy tokens as our argmax teacher-forced. True when both are within the tolerances."""
    ref = hf_parity.hf_logits(m, toks)
    mine = hf_parity.our_logits(a.bitnet, gguf, toks, vocab, "f16", a.work)
    per = [hf_parity.rel_l2(mine[i], ref[i]) for i in range(len(toks))]
    log("%s logits: ours (converted, fp16 head) vs transformers (fp16 K/V): rel L2 max %.3g, mean %.3g"
        % (label, max(per), float(np.mean(per))))
    log("  per position: " + " ".join("%.2g" % x for x in per))
    seq = toks[:a.prompt]
    for _ in range(a.gen):
        seq.append(int(np.argmax(hf_parity.hf_logits(m, seq)[-1])))
    mine = hf_parity.our_logits(a.bitnet, gguf, seq[:-1], vocab, "f16", a.work)
    agree = [int(np.argmax(mine[i])) == seq[i + 1] for i in range(a.prompt - 1, len(seq) - 1)]
    log("%s greedy: %d of %d of transformers' tokens are our argmax (teacher-forced)" % (label, sum(agree), a.gen))
    return max(per) <= a.tol and sum(agree) >= a.min_greedy


def tensor_diff(r1, r2, scale_tol):
    """r1's tensors that r2 lacks or holds otherwise (I2_S scales within scale_tol, relative)."""
    diff = []
    for name, (ne, t, off) in r1.tensors.items():
        ne2, t2, off2 = r2.tensors.get(name, (None, None, None))
        n = int(np.prod(ne))
        nb = {hf_parity.T_F32: 4 * n, hf_parity.T_F16: 2 * n, hf_parity.T_I2S: n // 4}[t]
        if ne2 != ne or t2 != t or r1.buf[off:off + nb] != r2.buf[off2:off2 + nb]:
            diff.append(name)
        elif t == hf_parity.T_I2S:
            s1 = np.frombuffer(r1.buf[off + nb:off + nb + 4], np.float32)[0]
            s2 = np.frombuffer(r2.buf[off2 + nb:off2 + nb + 4], np.float32)[0]
            if abs(s1 - s2) > scale_tol * s1:
                diff.append(name + " scale")
    return diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiktoken", required=True)
    ap.add_argument("--bitnet", default="build/bitnet")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/hf_convert_check")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--count", type=int, default=12000)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--gen", type=int, default=40)
    ap.add_argument("--min-greedy", type=int, default=32)
    ap.add_argument("--tol", type=float, default=5e-2)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    logf = open(os.path.join(a.out, "hf_convert_check.log"), "w")
    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()
    ok = True

    # 1. the checkpoint and its conversion
    ck = os.path.join(a.work, "ckpt-bf16")
    run([sys.executable, os.path.join(os.path.dirname(__file__), "bitnetcpp_ckpt.py"), "--tiktoken", a.tiktoken, "--out", ck,
         "--layers", str(a.layers)])
    cfg_path = os.path.join(ck, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["quantization_config"] = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"}
    json.dump(cfg, open(cfg_path, "w"), indent=1)
    g1 = os.path.join(a.work, "from-bf16.gguf")
    p, secs = run([a.bitnet, "convert", ck, "-o", g1])
    log("converted %s (%d layers, bf16 master weights) in %.2f s: %s" % (ck, a.layers, secs, p.stderr.strip()))
    info, _ = run([a.bitnet, "info", g1])
    log("  bitnet info: " + " | ".join(l.strip() for l in info.stdout.splitlines()[:3]))

    # 2. tokenizer
    texts = tokenizer_parity.make_texts(1, a.count)
    ok &= not compare_tokenizer(a, os.path.join(ck, "tokenizer.json"), g1, texts, "tokenizer", log)

    # 2b. the same vocabulary under Falcon 3's pre-tokenizer: converted with tokenizer.ggml.pre "falcon3"
    ckf = os.path.join(a.work, "ckpt-falcon3")
    shutil.copytree(ck, ckf)
    tj = json.load(open(os.path.join(ck, "tokenizer.json")))
    tj["pre_tokenizer"] = FALCON3_PRE
    tj["model"]["ignore_merges"] = False  # llama.cpp's falcon3 (which bitnet.h follows) merges every piece; only llama-bpe skips
    json.dump(tj, open(os.path.join(ckf, "tokenizer.json"), "w"), ensure_ascii=False)
    gf = os.path.join(a.work, "from-falcon3.gguf")
    run([a.bitnet, "convert", ckf, "-o", gf])
    pre = hf_parity.Reader(gf).kv.get("tokenizer.ggml.pre")
    has_db = lambda i: bool(HF_DIGIT_BYTES & set(texts[i].encode("utf-8")))
    bad = compare_tokenizer(a, os.path.join(ckf, "tokenizer.json"), gf, texts, "falcon3 tokenizer (pre %r)" % pre, log,
                            show=lambda i: not has_db(i))
    digit_bytes = [i for i in bad if HF_DIGIT_BYTES & set(texts[i].encode("utf-8"))]
    n_db = sum(1 for t in texts if HF_DIGIT_BYTES & set(t.encode("utf-8")))
    log("  of them %d in the %d texts whose UTF-8 holds a byte HF's Digits cuts at (B2 B3 B9 BC BD BE: llama.cpp's [0-9] "
        "does not), %d in the other %d" % (len(digit_bytes), n_db, len(bad) - len(digit_bytes), len(texts) - n_db))
    ok &= pre == "falcon3" and len(bad) == len(digit_bytes)

    # 3. logits and greedy tokens against transformers on the checkpoint itself
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = cfg["vocab_size"]
    rng = np.random.default_rng(1)
    toks = [int(x) for x in rng.integers(0, 128000, a.tokens)]
    m = hf_parity.hf_load(ck, log)
    hf_parity.hf_round_kv(m, True)
    ok &= against_hf(a, m, g1, vocab, toks, "bitnet", log)
    del m
    torch.cuda.empty_cache()

    # 4. packed checkpoints of the converted file, converted again
    r1 = hf_parity.Reader(g1)
    for mode in ("autobitlinear", "bitlinear"):
        d = os.path.join(a.work, "ckpt-packed-" + mode)
        hf_parity.hf_checkpoint(r1, d, mode)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(ck, f), d)
        c = json.load(open(os.path.join(d, "config.json")))
        c["bos_token_id"], c["eos_token_id"] = cfg["bos_token_id"], cfg["eos_token_id"]
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=1)
        g2 = os.path.join(a.work, "from-packed-%s.gguf" % mode)
        _, secs = run([a.bitnet, "convert", d, "-o", g2])
        diff = tensor_diff(r1, hf_parity.Reader(g2), 1e-6 if mode == "bitlinear" else 0.0)
        log("packed (%s, weight_scale %s): converted in %.2f s; %d of %d tensors differ from the first conversion%s" % (
            mode, "1/scale" if mode == "bitlinear" else "scale", secs, len(diff), len(r1.tensors),
            (": " + ", ".join(diff[:5])) if diff else ""))
        ok &= not diff

    # 5. a ternary LLaMA
    src = os.path.join(a.work, "llama-src.gguf")
    run([a.bitnet, "gen-model", "--preset", "small", "--arch", "llama", "--seed", "5", "-o", src])
    rs = hf_parity.Reader(src)
    d = os.path.join(a.work, "ckpt-llama")
    lcfg = llama_checkpoint(rs, d)
    g3 = os.path.join(a.work, "from-llama.gguf")
    _, secs = run([a.bitnet, "convert", d, "-o", g3])
    diff = tensor_diff(rs, hf_parity.Reader(g3), 1e-6)
    log("llama (gen-model --preset small --arch llama, as a packed LlamaForCausalLM checkpoint): converted in %.2f s; %d of %d "
        "tensors differ from the file%s" % (secs, len(diff), len(rs.tensors), (": " + ", ".join(diff[:5])) if diff else ""))
    ok &= not diff
    m = hf_parity.hf_load(d, log)
    import transformers.models.llama.modeling_llama as ml
    hf_parity.hf_round_kv(m, True, ml)
    ok &= against_hf(a, m, g3, lcfg["vocab_size"], [int(x) for x in rng.integers(0, lcfg["vocab_size"] - 3, a.tokens)], "llama", log)

    # 6. step 5's LLaMA with Llama 3.1's RoPE scaling (rope_scaling llama3 -> rope_freqs.weight)
    d = os.path.join(a.work, "ckpt-llama-rope")
    llama_checkpoint(rs, d, LLAMA3_ROPE)
    g4 = os.path.join(a.work, "from-llama-rope.gguf")
    _, secs = run([a.bitnet, "convert", d, "-o", g4])
    r4 = hf_parity.Reader(g4)
    diff = tensor_diff(rs, r4, 1e-6)
    log("llama with rope_scaling %s: converted in %.2f s; %d of %d tensors differ from step 5's file%s" % (
        json.dumps(LLAMA3_ROPE), secs, len(diff), len(rs.tensors), (": " + ", ".join(diff[:5])) if diff else ""))
    ok &= not diff and "rope_freqs.weight" in r4.tensors
    m = hf_parity.hf_load(d, log)
    hf_parity.hf_round_kv(m, True, ml)
    hd = lcfg["hidden_size"] // lcfg["num_attention_heads"]
    theirs = m.model.rotary_emb.inv_freq.float().cpu().numpy()
    ours = (1.0 / lcfg["rope_theta"] ** (np.arange(0, hd, 2) / hd)) / r4.tensor("rope_freqs.weight").astype(np.float64)
    plain = 1.0 / lcfg["rope_theta"] ** (np.arange(0, hd, 2) / hd)
    rel = np.abs(ours - theirs) / theirs
    log("  inv_freq: ours (theta^(-2i/d) / rope_freqs) against transformers' rotary_emb.inv_freq: max rel diff %.3g over %d; "
        "%d of them scaled (not theta^(-2i/d))" % (rel.max(), len(rel), int(np.sum(np.abs(plain - theirs) / theirs > 1e-3))))
    ok &= rel.max() < 1e-6
    toks = [int(x) for x in rng.integers(0, lcfg["vocab_size"] - 3, a.tokens)]
    ok &= against_hf(a, m, g4, lcfg["vocab_size"], list(toks), "llama rope llama3", log)
    # the control: step 5's conversion (the same weights without the scaling) against the scaled model
    ref = hf_parity.hf_logits(m, toks)
    mine = hf_parity.our_logits(a.bitnet, g3, toks, lcfg["vocab_size"], "f16", a.work)
    per = [hf_parity.rel_l2(mine[i], ref[i]) for i in range(len(toks))]
    log("  control: the unscaled conversion against the scaled model: rel L2 max %.3g (position 0: %.2g)" % (max(per), per[0]))
    log("overall: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
