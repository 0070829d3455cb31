#!/usr/bin/env python3
"""Greedy tokens of Hugging Face transformers' BitNetForCausalLM on the checkpoint that
tools/bitnetcpp_ckpt.py wrote (bf16 master weights), through its quantized path in online mode
(AutoBitLinear: absmean ternary weights and per-token int8 activations, the arithmetic that
bitnet.cpp's preprocess + I2_S apply), float32, no KV cache (each step a full forward).
  python3 tools/bitnetcpp_hf_greedy.py CKPT_DIR N ID,ID,...   -> prints "hf: ids" and "hf_gap: ..."
"""
import json, os, sys, tempfile


def main():
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    ckpt, n, ids = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
    d = tempfile.mkdtemp()
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    cfg["quantization_config"] = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "online"}
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_theta"]}
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    os.symlink(os.path.abspath(os.path.join(ckpt, "model.safetensors")), os.path.join(d, "model.safetensors"))
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        m = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    m = m.to(dev).eval()
    lin = m.model.layers[0].self_attn.q_proj
    print("hf_model: transformers %s, q_proj %s, weight %s, on %s" % (transformers.__version__, type(lin).__name__,
                                                                     lin.weight.dtype, dev))
    seq, gen, gaps = list(ids), [], []
    with torch.no_grad():
        for _ in range(n):
            lg = m(input_ids=torch.tensor([seq], device=dev)).logits[0, -1].float()
            top = torch.topk(lg, 2)
            gen.append(int(top.indices[0]))
            gaps.append(float(top.values[0] - top.values[1]))
            seq.append(gen[-1])
    print("hf: " + ",".join(map(str, gen)))
    print("hf_gap: " + ",".join("%.4g" % g for g in gaps))


if __name__ == "__main__":
    main()
