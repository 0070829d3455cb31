# M = 512 anchors through torch (cuBLASLt) on the GPU machine, for BENCHMARKS.md: bf16, int8
# (torch._int_mm) and fp8 e4m3 (torch._scaled_mm; the same tensor-core peak as int8 on Hopper), on
# issue 5's shapes. Weights rotated over min(64, 1 GB / size + 1) copies (always more than the L2),
# a CUDA graph of the rotation, events, median of 5.
#   python3 tools/torch_gemm_8bit.py
import torch
torch.backends.cuda.matmul.allow_tf32 = False
def bench(fn, ws):
    for w in ws[:2]: fn(w)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for w in ws: fn(w)
    ts = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10): g.replay()
        e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / (10 * len(ws)))
    return sorted(ts)[2]
print(torch.__version__, torch.cuda.get_device_name())
for n, k in [(2560, 2560), (3840, 2560), (13824, 2560), (2560, 6912), (20480, 3200), (55296, 5120)]:
    m = 512
    row = [f"{n}x{k} M={m}"]
    for kind in ["bf16", "int8", "fp8"]:
        eb = 2 if kind == "bf16" else 1
        reps = max(2, min(64, (1 << 30) // (n * k * eb) + 1))
        try:
            if kind == "bf16":
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(reps)]
                fn = lambda w: torch.matmul(x, w.t())
            elif kind == "int8":
                x = torch.randint(-128, 127, (m, k), device="cuda", dtype=torch.int8)
                ws = [torch.randint(-128, 127, (n, k), device="cuda", dtype=torch.int8) for _ in range(reps)]
                fn = lambda w: torch._int_mm(x, w.t())
            else:
                x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
                ws = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn) for _ in range(reps)]
                one = torch.ones((), device="cuda")
                fn = lambda w: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            us = bench(fn, ws)
            row.append(f"{kind} {us:.2f} us ({2*m*n*k/us/1e6:.0f} TOPS)")
            del ws
        except Exception as ex:
            row.append(f"{kind} failed: {str(ex)[:80]}")
        torch.cuda.empty_cache()
    print(" | ".join(row), flush=True)
