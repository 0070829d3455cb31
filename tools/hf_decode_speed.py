#!/usr/bin/env python3
"""Issue 6's anchor, measured: Hugging Face transformers decoding a GGUF's weights on this GPU.

The GGUF (for the anchor, `bitnet gen-model --preset 2b4t`: the exact 2B-4T shapes) goes into
transformers' BitNetForCausalLM in bf16 in two forms:
  * packed: the quantized path the released 2B-4T checkpoint loads through (quant_method "bitnet",
    AutoBitLinear offline: packed 2-bit weights with a scale, int8 activations per token);
  * dense:  plain bf16 nn.Linear holding the ternary weights times their scale (cuBLAS GEMVs; what
    a bf16 model of this size costs transformers).
Each form: a warm-up, then --runs greedy generations of --gen-tokens tokens (EOS suppressed) after a
--prompt-tokens prompt, and one of a single token for the prefill. Decode tokens/s is
(gen - 1) / (t(gen tokens) - t(1 token)), medians over runs; the model's default dynamic cache and
eager attention, as `generate` runs out of the box.

Run on the GPU machine, with torch and transformers (never a dependency of the library):
  python3 tools/hf_decode_speed.py --gguf /tmp/bitnet-2b4t.gguf --out $OUT
"""
import argparse, json, os, sys, time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity import HF_NAMES, Reader, hf_checkpoint  # noqa: E402


def f32(a):
    import torch
    return torch.from_numpy(np.array(a, np.float32))  # a copy: the reader's arrays are read-only


def dense_model(r, cfg):
    import torch
    from transformers import BitNetConfig, BitNetForCausalLM
    c = {k: v for k, v in cfg.items() if k not in ("quantization_config", "torch_dtype", "dtype", "architectures")}
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):  # random init on the GPU: fast; every weight is replaced below
        model = BitNetForCausalLM(BitNetConfig(**c))
    torch.set_default_dtype(torch.float32)
    sd = {}
    for l in range(cfg["num_hidden_layers"]):
        for ours, theirs in HF_NAMES.items():
            t = r.tensor("blk.%d.%s.weight" % (l, ours))
            if isinstance(t, tuple):  # ternary times its scale, rounded once to bf16
                q, scale = t
                w = torch.from_numpy(q).to(torch.float32) * scale
            else:
                w = f32(t)
            sd["model.layers.%d.%s.weight" % (l, theirs)] = w.to(torch.bfloat16)
    sd["model.embed_tokens.weight"] = f32(r.tensor("token_embd.weight")).to(torch.bfloat16)
    sd["model.norm.weight"] = f32(r.tensor("output_norm.weight")).to(torch.bfloat16)
    if "output.weight" in r.tensors:
        sd["lm_head.weight"] = f32(r.tensor("output.weight")).to(torch.bfloat16)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and cfg["tie_word_embeddings"])]
    assert not missing and not unexpected, (missing, unexpected)
    if cfg["tie_word_embeddings"]:
        model.tie_weights()
    return model.eval()


def packed_model(d):
    import torch
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, device_map="cuda")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.bfloat16, device_map="cuda")
    return m.eval()


def time_generate(model, ids, n):
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    assert out.shape[1] == ids.shape[1] + n, out.shape
    return dt, out[0, ids.shape[1]:].tolist()


def measure(label, model, ids, gen, runs, log):
    import torch
    time_generate(model, ids, 8)  # warm-up: kernels, allocator, caches
    t1 = sorted(time_generate(model, ids, 1)[0] for _ in range(runs))[runs // 2]
    tg, toks = [], None
    for _ in range(runs):
        dt, toks = time_generate(model, ids, gen)
        tg.append(dt)
    tg = sorted(tg)[runs // 2]
    row = {"form": label, "prompt_tokens": int(ids.shape[1]), "gen_tokens": gen, "prefill_s": t1, "generate_s": tg,
           "decode_tok_s": (gen - 1) / (tg - t1), "prompt_tok_s": ids.shape[1] / t1,
           "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20, "first_tokens": toks[:8]}
    log("%-7s prompt %d: %.1f ms (%.0f tokens/s); %d tokens %.1f ms; decode %.2f tokens/s; peak GPU %.0f MB" % (
        label, ids.shape[1], 1e3 * t1, row["prompt_tok_s"], gen, 1e3 * tg, row["decode_tok_s"], row["peak_gpu_mb"]))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--forms", default="packed,dense")
    ap.add_argument("--out", default="/tmp/hf_decode_speed")
    a = ap.parse_args()
    import torch, transformers
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "hf_decode_speed.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")

    log("torch %s, transformers %s, %s" % (torch.__version__, transformers.__version__, torch.cuda.get_device_name()))
    t0 = time.time()
    r = Reader(a.gguf)
    rng = np.random.default_rng(1)
    vocab = r.tensors["token_embd.weight"][0][1]
    ids = torch.tensor([rng.integers(1000, min(vocab, 100000), a.prompt_tokens).tolist()], device="cuda")
    d = os.path.join("/tmp", "hf_decode_speed_ckpt")
    cfg, _ = hf_checkpoint(r, d, "autobitlinear")  # packed weights; its config serves the dense form too
    rows = []
    for form in a.forms.split(","):
        model = packed_model(d) if form == "packed" else dense_model(r, cfg)
        log("%s: %d layers, loaded in %.1f s (%s)" % (form, cfg["num_hidden_layers"], time.time() - t0,
                                                  type(model.model.layers[0].self_attn.q_proj).__name__))
        torch.cuda.reset_peak_memory_stats()
        rows.append(measure(form, model, ids, a.gen_tokens, a.runs, log))
        del model
        torch.cuda.empty_cache()
        t0 = time.time()
    json.dump(rows, open(os.path.join(a.out, "hf_decode_speed.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
