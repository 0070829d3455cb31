#!/usr/bin/env python3
"""Writes a random Hugging Face transformers BitNet checkpoint (BitNetForCausalLM, the 2B-4T
architecture) in the layout of microsoft/bitnet-b1.58-2B-4T-bf16, the input of bitnet.cpp's
utils/convert-helper-bitnet.py: config.json, model.safetensors (bf16 master weights, tied head),
and a LLaMA 3 tokenizer.json (byte-level BPE) built from the tiktoken ranks file.

Only numpy is needed (no torch, no transformers), so it runs anywhere the converter runs.
  python3 tools/bitnetcpp_ckpt.py --tiktoken llama3-tokenizer.tiktoken --out DIR [--layers 2]
"""
import argparse, base64, json, os, struct

import numpy as np

SPECIAL = ["begin_of_text", "end_of_text", "reserved_special_token_0", "reserved_special_token_1",
           "finetune_right_pad_id", "reserved_special_token_2", "start_header_id", "end_header_id",
           "eom_id", "eot_id", "python_tag"]
PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's byte-to-unicode table: printable bytes map to themselves, the rest to 256 + n."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def merges_from_ranks(ranks):
    """The merge list of a tiktoken vocabulary as Hugging Face's LLaMA 3 tokenizer.json has it: for
    every token, each split into two tokens of the vocabulary, ordered by the rank of the token, then
    by the ranks of the two halves."""
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        local = [(tok[:i], tok[i:]) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
        local.sort(key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))
        merges += local
    return merges


def tokenizer_json(tiktoken_path):
    ranks = {}
    for line in open(tiktoken_path, "rb"):
        if line.strip():
            b64, r = line.split()
            ranks[base64.b64decode(b64)] = int(r)
    bc = byte_chars()
    enc = lambda b: "".join(bc[x] for x in b)
    n = len(ranks)
    vocab = {enc(t): r for t, r in ranks.items()}
    specials = ["<|%s|>" % (SPECIAL[i] if i < len(SPECIAL) else "reserved_special_token_%d" % (i - 8)) for i in range(256)]
    added = [{"id": n + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    merges = [enc(a) + " " + enc(b) for a, b in merges_from_ranks(ranks)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [n],
                                                                     "tokens": ["<|begin_of_text|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }, n + 256, specials


def bf16(a):
    """float32 -> bfloat16 bits, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, arr in tensors:
        b = arr.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiktoken", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=2560)
    ap.add_argument("--ffn", type=int, default=6912)
    ap.add_argument("--heads", type=int, default=20)
    ap.add_argument("--kv-heads", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    tok, vocab, specials = tokenizer_json(a.tiktoken)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    base = vocab - 256
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast",
                   "added_tokens_decoder": {str(base + i): {"content": s, "special": True, "lstrip": False, "rstrip": False,
                                                            "normalized": False, "single_word": False}
                                            for i, s in enumerate(specials)}}, f)
    cfg = {"architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "vocab_size": vocab, "hidden_size": a.dim,
           "intermediate_size": a.ffn, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "hidden_act": "relu2", "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True, "bos_token_id": base,
           "eos_token_id": base + 1, "torch_dtype": "bfloat16", "attention_bias": False, "use_cache": True}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)

    rng = np.random.default_rng(a.seed)
    kv = a.kv_heads * (a.dim // a.heads)
    # The scales of tools/hf_parity.py's structured model: every layer moves the residual stream
    # (absmean scale about U(0.5, 2)/sqrt(k)), and the tied embedding (std 0.05) does not decide
    # the next token alone (with a large one, each token just predicts itself).
    norm = lambda n: bf16(rng.uniform(0.5, 1.5, n).astype(np.float32))
    mat = lambda n, k: bf16(rng.standard_normal((n, k), dtype=np.float32) * np.float32(rng.uniform(0.5, 2.0) * 1.25 / np.sqrt(k)))
    t = [("model.embed_tokens.weight", bf16(rng.standard_normal((vocab, a.dim), dtype=np.float32) * np.float32(0.05)))]
    for l in range(a.layers):
        p = "model.layers.%d." % l
        t += [(p + "input_layernorm.weight", norm(a.dim)),
              (p + "self_attn.q_proj.weight", mat(a.dim, a.dim)), (p + "self_attn.k_proj.weight", mat(kv, a.dim)),
              (p + "self_attn.v_proj.weight", mat(kv, a.dim)), (p + "self_attn.o_proj.weight", mat(a.dim, a.dim)),
              (p + "self_attn.attn_sub_norm.weight", norm(a.dim)), (p + "post_attention_layernorm.weight", norm(a.dim)),
              (p + "mlp.gate_proj.weight", mat(a.ffn, a.dim)), (p + "mlp.up_proj.weight", mat(a.ffn, a.dim)),
              (p + "mlp.down_proj.weight", mat(a.dim, a.ffn)), (p + "mlp.ffn_sub_norm.weight", norm(a.ffn))]
    t.append(("model.norm.weight", norm(a.dim)))
    write_safetensors(os.path.join(a.out, "model.safetensors"), t)
    print("wrote %s: %d layers, dim %d, ffn %d, heads %d/%d, vocab %d" % (a.out, a.layers, a.dim, a.ffn, a.heads, a.kv_heads, vocab))


if __name__ == "__main__":
    main()
