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
    from tokenizers import Tokenizer
    import tokenizers
    tk = Tokenizer.from_file(os.path.join(ck, "tokenizer.json"))
    texts = tokenizer_parity.make_texts(1, a.count)
    ref = [e.ids for e in tk.encode_batch(texts, add_special_tokens=False)]
    hexf = os.path.join(a.work, "texts.hex")
    with open(hexf, "w") as fh:
        for t in texts:
            fh.write(t.encode("utf-8").hex() + "\n")
    out, _ = run([a.bitnet, "tokenize", "-m", g1, "--hex-lines", hexf, "--no-bos"])
    rows = out.stdout.split("\n")[:len(texts)]
    ours = [[int(x) for x in r.split(",")] if r else [] for r in rows]
    bad = [i for i in range(len(texts)) if i >= len(ours) or ours[i] != ref[i]]
    for i in bad[:10]:
        log("  MISMATCH %r\n    HF     %s\n    bitnet %s" % (texts[i][:120], ref[i][:30], ours[i][:30] if i < len(ours) else None))
    log("tokenizer: tokenizers %s reading tokenizer.json vs bitnet tokenize -m (converted): %d texts, %d characters, %d tokens, "
        "%d mismatches" % (tokenizers.__version__, len(texts), sum(map(len, texts)), sum(map(len, ref)), len(bad)))
    ok &= not bad

    # 3. logits and greedy tokens against transformers on the checkpoint itself
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    vocab = cfg["vocab_size"]
    rng = np.random.default_rng(1)
    toks = [int(x) for x in rng.integers(0, 128000, a.tokens)]
    m = hf_parity.hf_load(ck, log)
    hf_parity.hf_round_kv(m, True)
    ref_logits = hf_parity.hf_logits(m, toks)
    mine = hf_parity.our_logits(a.bitnet, g1, toks, vocab, "f16", a.work)
    per = [hf_parity.rel_l2(mine[i], ref_logits[i]) for i in range(len(toks))]
    log("logits: ours (converted, fp16 head) vs transformers on the bf16 checkpoint (fp16 K/V): rel L2 max %.3g, mean %.3g"
        % (max(per), float(np.mean(per))))
    log("  per position: " + " ".join("%.2g" % x for x in per))
    seq = toks[:a.prompt]
    for _ in range(a.gen):
        seq.append(int(np.argmax(hf_parity.hf_logits(m, seq)[-1])))
    mine = hf_parity.our_logits(a.bitnet, g1, seq[:-1], vocab, "f16", a.work)
    agree = [int(np.argmax(mine[i])) == seq[i + 1] for i in range(a.prompt - 1, len(seq) - 1)]
    log("greedy: %d of %d of transformers' tokens are our argmax (teacher-forced)" % (sum(agree), a.gen))
    ok &= max(per) <= a.tol and sum(agree) >= a.min_greedy
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
        r2 = hf_parity.Reader(g2)
        diff = []
        for name, (ne, t, off) in r1.tensors.items():
            if name not in r2.tensors:
                diff.append(name + " missing")
                continue
            ne2, t2, off2 = r2.tensors[name]
            n = hf_parity.np.prod(ne)
            nbytes = {hf_parity.T_F32: 4 * n, hf_parity.T_F16: 2 * n, hf_parity.T_I2S: n // 4 + 32}[t]
            b1, b2 = r1.buf[off:off + nbytes], r2.buf[off2:off2 + nbytes]
            if ne2 != ne or t2 != t:
                diff.append(name + " type/shape")
            elif t == hf_parity.T_I2S and mode == "bitlinear":
                s1, s2 = np.frombuffer(b1[n // 4:n // 4 + 4], np.float32)[0], np.frombuffer(b2[n // 4:n // 4 + 4], np.float32)[0]
                if b1[:n // 4] != b2[:n // 4] or abs(s1 - s2) > 1e-6 * s1:
                    diff.append(name)
            elif b1 != b2:
                diff.append(name)
        log("packed (%s, weight_scale %s): converted in %.2f s; %d of %d tensors differ from the first conversion%s" % (
            mode, "1/scale" if mode == "bitlinear" else "scale", secs, len(diff), len(r1.tensors),
            (": " + ", ".join(diff[:5])) if diff else ""))
        ok &= not diff
    log("overall: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
