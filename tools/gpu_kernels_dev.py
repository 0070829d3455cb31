#!/usr/bin/env python3
"""Development harness for the kernels in bitnet_cuda_kernels.h, run on the GPU machine by
tools/gpu_kernels.sh: CuPy compiles the exact module strings with NVRTC (dumped from the header
by a small C program), ctypes launches them through cuLaunchKernel as the runtime does, and numpy
mirrors the CPU reference semantics. It checks correctness and times variants and baselines
(CUDA-graph replay, weights rotated through >= 1 GiB, CUDA events). The product benchmark is
`build/bitnet bench-kernels --backend cuda`; this script is for sweeps while tuning.

usage: gpu_kernels_dev.py MODDIR [--check] [--bench] [--bitnetcpp LIB] [--json OUT]
"""
import ctypes, json, math, os, statistics, sys, time
import numpy as np
import cupy as cp

C = ctypes
libcuda = C.CDLL("libcuda.so.1")
libcuda.cuLaunchKernel.argtypes = [C.c_void_p] + [C.c_uint] * 7 + [C.c_void_p, C.c_void_p, C.c_void_p]
libcuda.cuLaunchKernel.restype = C.c_int
DEV = cp.cuda.Device()
PROPS = cp.cuda.runtime.getDeviceProperties(DEV.id)
NSM = PROPS["multiProcessorCount"]
ROT_BYTES = 1 << 30


class Segs(C.Structure):
    _fields_ = [("n", C.c_int), ("end", C.c_int * 8), ("scale", C.c_float * 8)]


def P(x):  # device pointer argument
    return C.c_uint64(0 if x is None else (x if isinstance(x, int) else x.data.ptr))


I, LL, ULL, F = C.c_int, C.c_longlong, C.c_ulonglong, C.c_float
MODS = {}


def module(name, opts=()):
    key = (name, tuple(opts))
    if key not in MODS:
        src = open(os.path.join(MODDIR, name + ".cu")).read()
        MODS[key] = cp.RawModule(code=src, options=("-std=c++14",) + tuple(opts), backend="nvrtc")
    return MODS[key]


class LaunchAttr(C.Structure):
    _fields_ = [("id", C.c_int), ("pad", C.c_char * 4), ("val", C.c_int), ("rest", C.c_char * 60)]


class LaunchConfig(C.Structure):
    _fields_ = [("gx", C.c_uint), ("gy", C.c_uint), ("gz", C.c_uint), ("bx", C.c_uint), ("by", C.c_uint),
                ("bz", C.c_uint), ("smem", C.c_uint), ("stream", C.c_void_p), ("attrs", C.POINTER(LaunchAttr)),
                ("nattrs", C.c_uint)]


libcuda.cuLaunchKernelEx.argtypes = [C.POINTER(LaunchConfig), C.c_void_p, C.c_void_p, C.c_void_p]
PDL = [False]  # launch with programmatic stream serialization (the kernels wait with griddepcontrol)


def launch(mod, kname, grid, block, args, smem=0):
    fn = mod.get_function(kname)
    fn = fn.kernel if hasattr(fn, "kernel") else fn
    arr = (C.c_void_p * len(args))(*[C.cast(C.pointer(a), C.c_void_p) for a in args])
    stream = C.c_void_p(cp.cuda.get_current_stream().ptr)
    if PDL[0]:
        at = LaunchAttr(6, b"", 1, b"")
        cfg = LaunchConfig(grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, C.pointer(at), 1)
        r = libcuda.cuLaunchKernelEx(C.byref(cfg), C.c_void_p(fn.ptr), arr, None)
    else:
        r = libcuda.cuLaunchKernel(C.c_void_p(fn.ptr), grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                   stream, arr, None)
    if r != 0:
        raise RuntimeError(f"cuLaunchKernel({kname}) = {r}")


# ---------------------------------------------------------------- numpy mirrors of the CPU reference
def i2s_pack(q, scale):
    n, k = q.shape
    f = (q.reshape(-1).astype(np.uint8) + 1).reshape(-1, 4, 32)
    b = (f[:, 0] << 6) | (f[:, 1] << 4) | (f[:, 2] << 2) | f[:, 3]
    out = np.zeros(n * k // 4 + 32, np.uint8)
    out[: n * k // 4] = b.reshape(-1)
    out[n * k // 4: n * k // 4 + 4] = np.frombuffer(np.float32(scale).tobytes(), np.uint8)
    return out


def t32_words(codes_rows):
    """codes_rows: (npad, k) uint codes (w+1) in physical row order -> uint32 T32 image."""
    npad, k = codes_rows.shape
    c = codes_rows.astype(np.uint32).reshape(npad, k // 64, 4, 4, 4)  # r, chunk, j, i, b
    sh = (8 * np.arange(4)[None, :] + 2 * np.arange(4)[:, None]).astype(np.uint32)  # [i][b]
    words = (c << sh).sum(axis=(3, 4), dtype=np.uint64).astype(np.uint32)  # r, chunk, j
    return words.reshape(npad // 32, 32, k // 64, 4).transpose(0, 2, 1, 3).reshape(-1)


def rne_bf16(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((x.astype(np.float32).view(np.uint32)[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def quant_act_ref(x, nw=None, eps=1e-5):
    x = x.astype(np.float32)
    m, k = x.shape
    if nw is not None:
        ss = np.cumsum(x.astype(np.float64) ** 2, axis=1)[:, -1]
        r = (1.0 / np.sqrt(ss / k + np.float64(np.float32(eps)))).astype(np.float32)
        y = (x * r[:, None]).astype(np.float32) * nw.astype(np.float32)
    else:
        y = x
    amax = np.abs(y).max(axis=1)
    s = np.float32(127.0) / np.maximum(amax, np.float32(1e-5))
    v = (y * s[:, None]).astype(np.float32)
    q = np.clip(np.rint(v), -128, 127).astype(np.int8)
    return q, s.astype(np.float32), q.astype(np.int32).sum(axis=1).astype(np.int32)


def dequant(acc, asum, ascale, wscale):
    return ((acc - asum).astype(np.float32) / ascale.astype(np.float32)) * np.float32(wscale)


# ---------------------------------------------------------------- host side mirrors (to be C in bitnet.h)
def upload_ternary(parts, glu=False):
    """parts: list of (codes int8 (n,k), scale). Returns dict like bitnet_gpu_ternary."""
    k = parts[0][0].shape[1]
    nrows = sum(p[0].shape[0] for p in parts)
    if glu:
        assert len(parts) == 2 and parts[0][0].shape == parts[1][0].shape
        f = parts[0][0].shape[0]
        npad = -(-(2 * f) // 128) * 128
        npad = max(npad, -(-f // 64) * 128)
    else:
        npad = -(-nrows // 128) * 128
    nc = k // 64
    dst = cp.full(npad * nc * 4, 0x55555555, dtype=cp.uint32)
    bad = cp.zeros(1, cp.int32)
    mod = module("ternary")
    row = 0
    segs = Segs()
    segs.n = len(parts)
    for pi, (q, sc) in enumerate(parts):
        n = q.shape[0]
        src = cp.asarray(i2s_pack(q, sc))
        tot = n * nc
        launch(mod, "bitnet_k_t32_repack", ((tot + 255) // 256, 1, 1), (256, 1, 1),
               [P(src), I(n), I(k), P(dst), I(row), I(pi if glu else -1), P(bad)])
        row += n
        segs.end[pi] = row
        segs.scale[pi] = sc
    cp.cuda.get_current_stream().synchronize()
    assert int(bad.get()[0]) == 0
    n_out = parts[0][0].shape[0] if glu else nrows
    return dict(d=dst, n=nrows, n_out=n_out, k=k, npad=npad, nc=nc, segs=segs, glu=int(glu))


def tgemv_cfg(w, m, warps=None):
    groups = -(-w["n_out"] // 32)
    rg = 2 if w["glu"] else 1
    mt = 1 if m == 1 else 2 if m == 2 else 4 if m <= 4 else 8
    if warps is None:
        want = NSM * 24  # warps in flight across the chip
        warps = max(1, min(w["nc"], -(-want // (groups * rg))))
        warps = min(warps, 128 // mt // rg, 1024 // 32 // rg)
        warps = 1 << (warps - 1).bit_length() if warps & (warps - 1) else warps
        warps = min(warps, 128 // mt // rg, 32 // rg)
    return mt, groups, warps * rg


def tgemv(w, a, m, out, out_type=1, res=None, warps=None, mod=None, wg=0):
    mod = mod or module("ternary")
    mt, groups, nw = tgemv_cfg(w, m, warps)
    launch(mod, f"bitnet_k_tgemv_m{mt}", (groups, 1, 1), (32, nw, 1),
           [P(w["d"]), I(w["n_out"]), I(w["nc"]), w["segs"], I(w["glu"]), P(a["q"]), LL(w["k"]), P(a["s"]),
            P(a["sum"]), I(m), P(out), LL(w["n_out"]), I(out_type), P(res), LL(w["n_out"])])


def tgemm(w, a, m, out, out_type=1, res=None, split=1, mod=None):
    mod = mod or module("tgemm")
    gx, gy = w["npad"] // 128, -(-m // 128)
    launch(mod, "bitnet_k_tgemm", (gx, gy, 1), (128, 1, 1),
           [P(w["d"]), I(w["n_out"]), I(w["nc"]), w["segs"], I(w["glu"]), P(a["q"]), LL(w["k"]), P(a["s"]),
            P(a["sum"]), I(m), P(out), LL(w["n_out"]), I(out_type), P(res), LL(w["n_out"])])


def quant_act(x, nw=None, eps=1e-5):
    m, k = x.shape
    a = dict(q=cp.empty((m, k), cp.int8), s=cp.empty(m, cp.float32), sum=cp.empty(m, cp.int32))
    a["q"].fill(77)
    a["s"].fill(np.nan)
    launch(module("ternary"), "bitnet_k_quant_act", (m, 1, 1), (256, 1, 1),
           [P(x), LL(k), I(k), P(nw), F(eps), P(a["q"]), LL(k), P(a["s"]), P(a["sum"]), P(None)])  # no bit planes
    return a


# ---------------------------------------------------------------- correctness
FAILS = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + (("  " + detail) if detail else ""), flush=True)
    if not ok:
        FAILS.append(name)


def rnd_codes(rng, n, k):
    return rng.integers(-1, 2, size=(n, k), dtype=np.int8)


def run_checks():
    rng = np.random.default_rng(1234)
    # activation quantization, plain and fused with RMSNorm, odd shapes
    for (m, k) in [(1, 128), (3, 2560), (7, 1000), (2, 6912)]:
        x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(np.float32)
        x[0, 5 % k] = 0.5 / 63.5  # a tie
        a = quant_act(cp.asarray(x))
        q, s, su = quant_act_ref(x)
        check(f"quant_act m={m} k={k}", np.array_equal(a["q"].get(), q) and np.array_equal(a["s"].get(), s)
              and np.array_equal(a["sum"].get(), su))
        nw = rng.uniform(0.5, 1.5, k).astype(np.float32)
        a = quant_act(cp.asarray(x), cp.asarray(nw))
        q, s, su = quant_act_ref(x, nw)
        check(f"rmsnorm+quant_act m={m} k={k}", np.array_equal(a["q"].get(), q) and np.array_equal(a["s"].get(), s)
              and np.array_equal(a["sum"].get(), su))
    # repack image
    q = rnd_codes(rng, 200, 384)
    w = upload_ternary([(q, 0.5)])
    codes = np.full((w["npad"], 384), 1, np.uint8)
    codes[:200] = q + 1
    check("t32 repack image", np.array_equal(w["d"].get(), t32_words(codes)))
    q1, q2 = rnd_codes(rng, 96, 256), rnd_codes(rng, 96, 256)
    w = upload_ternary([(q1, 0.5), (q2, 0.25)], glu=True)
    codes = np.full((w["npad"], 256), 1, np.uint8)
    for p in range(3):
        codes[64 * p: 64 * p + 32] = q1[32 * p: 32 * p + 32] + 1
        codes[64 * p + 32: 64 * p + 64] = q2[32 * p: 32 * p + 32] + 1
    check("t32 repack glu image", np.array_equal(w["d"].get(), t32_words(codes)))

    # ternary matmul: GEMV (m <= 8) and tensor-core GEMM, segments, glu, residual, out types
    cases = [  # (segment rows, k, m, glu, path)
        ([37], 128, 1, False, "gemv"), ([300], 384, 3, False, "gemv"), ([2560, 640, 640], 2560, 1, False, "gemv"),
        ([96, 96], 256, 5, True, "gemv"), ([1000], 6912, 8, False, "gemv"), ([33], 128, 2, False, "gemv"),
        ([200, 77], 640, 13, False, "gemm"), ([300], 2560, 130, False, "gemm"), ([160, 160], 384, 70, True, "gemm"),
        ([2560, 640, 640], 2560, 37, False, "gemm"), ([250], 1280, 200, False, "gemm3"),
        ([64, 64], 512, 9, True, "gemm2"),
    ]
    for segsz, k, m, glu, path in cases:
        parts = [(rnd_codes(rng, n, k), float(rng.uniform(0.2, 2.0))) for n in segsz]
        w = upload_ternary(parts, glu)
        x = rng.standard_normal((m, k)).astype(np.float32)
        a = quant_act(cp.asarray(x))
        qa, sa, suma = quant_act_ref(x)
        accs = [(p[0].astype(np.int64) + 1) @ qa.T.astype(np.int64) for p in parts]  # (n, m)
        if glu:
            g = dequant(accs[0].T, suma[:, None], sa[:, None], parts[0][1])
            u = dequant(accs[1].T, suma[:, None], sa[:, None], parts[1][1])
            g = np.maximum(g, np.float32(0))
            ref = (g * g).astype(np.float32) * u
        else:
            ref = np.concatenate([dequant(acc.T, suma[:, None], sa[:, None], p[1]) for acc, p in zip(accs, parts)], 1)
        ref = ref.astype(np.float32)
        nout = ref.shape[1]
        for out_type in (1, 2, 3):
            for use_res in (False, True):
                dt = np.float32 if out_type == 1 else np.uint16
                res = None
                r_host = None
                if use_res:
                    r32 = rng.standard_normal((m, nout)).astype(np.float32)
                    if out_type == 1: r_host = r32
                    elif out_type == 2: r_host = r32.astype(np.float16).view(np.uint16)
                    else: r_host = rne_bf16(r32)
                    res = cp.asarray(r_host)
                out = cp.full((m, nout), 0xFFFF if dt == np.uint16 else np.nan, dtype=dt)
                if path == "gemv":
                    tgemv(w, a, m, out, out_type, res)
                else:
                    split = 3 if path == "gemm3" else 2 if path == "gemm2" else 1
                    tgemm(w, a, m, out, out_type, res, split=split)
                got = out.get()
                want = ref
                if use_res:
                    rf = r_host if out_type == 1 else (r_host.view(np.float16).astype(np.float32) if out_type == 2
                                                       else bf16_to_f32(r_host))
                    want = (rf + ref).astype(np.float32)
                if out_type == 1: exp = want
                elif out_type == 2: exp = want.astype(np.float16).view(np.uint16)
                else: exp = rne_bf16(want)
                ok = np.array_equal(got.view(np.uint32 if dt == np.float32 else np.uint16),
                                    exp.view(np.uint32 if dt == np.float32 else np.uint16))
                detail = ""
                if not ok:
                    bad = np.argwhere(got.view(np.uint32 if dt == np.float32 else np.uint16) !=
                                      exp.view(np.uint32 if dt == np.float32 else np.uint16))
                    detail = f"{len(bad)} mismatches, first {bad[:3].tolist()} got {got[tuple(bad[0])]} want {exp[tuple(bad[0])]}"
                check(f"ternary {path} rows={segsz} k={k} m={m} glu={glu} out={out_type} res={use_res}", ok, detail)

    # programmatic dependent launch: quant_act -> gemv -> gemv chained with early launches
    PDL[0] = True
    for (n, k) in [(2560, 2560), (300, 640)]:
        q = rnd_codes(rng, n, k)
        w = upload_ternary([(q, 0.7)])
        x = rng.standard_normal((1, k)).astype(np.float32)
        X = cp.asarray(x)
        out1 = cp.full((1, n), np.nan, cp.float32)
        out2 = cp.full((1, n), np.nan, cp.float32)
        for _ in range(3):
            a = quant_act(X)
            tgemv(w, a, 1, out1)
            tgemv(w, a, 1, out2, 1, out1)  # reads out1 as the residual
        qa, sa, suma = quant_act_ref(x)
        ref = dequant(((q.astype(np.int64) + 1) @ qa.T.astype(np.int64)).T, suma[:, None], sa[:, None], 0.7)
        ref = ref.astype(np.float32)
        check(f"pdl chain n={n} k={k}", np.array_equal(out1.get(), ref) and np.array_equal(out2.get(), ref + ref))
    PDL[0] = False

    # GPU absmean quantization + I2_S pack, against sequential-double CPU semantics
    for n, k in [(7, 128), (300, 640), (64, 6912)]:
        wf = (rng.standard_normal((n, k)) * 0.02).astype(np.float32)
        if n == 7: wf[0, 0] = np.nan  # the scale becomes 1e-5 and NaN weights give 0
        nn = n * k
        dwf = cp.asarray(wf)
        nb = 64
        part = cp.empty(nb, cp.float64)
        sc = cp.empty(1, cp.float32)
        qd = cp.empty(nn, cp.int8)
        i2 = cp.empty(nn // 4 + 32, cp.uint8)
        bad = cp.zeros(1, cp.int32)
        m_ = module("ternary")
        launch(m_, "bitnet_k_absmean_partial", (nb, 1, 1), (256, 1, 1), [P(dwf), ULL(nn), P(part)])
        launch(m_, "bitnet_k_absmean_final", (1, 1, 1), (256, 1, 1), [P(part), I(nb), ULL(nn), P(sc)])
        launch(m_, "bitnet_k_ternary_codes", (64, 1, 1), (256, 1, 1), [P(dwf), ULL(nn), P(sc), P(qd)])
        launch(m_, "bitnet_k_i2s_pack", (64, 1, 1), (256, 1, 1), [P(qd), ULL(nn), P(sc), P(i2), P(bad)])
        s_ref = np.float32(np.cumsum(np.abs(wf.reshape(-1).astype(np.float64)))[-1] / nn)
        if not (s_ref >= np.float32(1e-5)): s_ref = np.float32(1e-5)
        inv = np.float32(1.0) / s_ref
        v = (wf.reshape(-1) * inv).astype(np.float32)
        v = np.where(np.isnan(v), 0, v)
        q_ref = np.clip(np.rint(v), -1, 1).astype(np.int8)
        check(f"absmean scale n={n} k={k}", sc.get()[0] == s_ref, f"{sc.get()[0]!r} vs {s_ref!r}")
        check(f"ternary codes n={n} k={k}", np.array_equal(qd.get(), q_ref))
        check(f"i2s pack n={n} k={k}", np.array_equal(i2.get(), i2s_pack(q_ref.reshape(n, k), s_ref)))

    # dense GEMV / GEMM in each precision against float64 on the same rounded inputs
    dm = module("dense")
    tcm = module("dense_tc")
    for (n, k, m) in [(37, 64, 1), (300, 2560, 3), (1000, 776, 8), (129, 264, 70), (300, 1024, 256)]:
        for ty, nm in ((1, "f32"), (2, "f16"), (3, "bf16")):
            w32 = rng.standard_normal((n, k)).astype(np.float32)
            x32 = rng.standard_normal((m, k)).astype(np.float32)
            if ty == 1: wd, xd, w64, x64 = w32, x32, w32, x32
            elif ty == 2:
                wd, xd = w32.astype(np.float16).view(np.uint16), x32.astype(np.float16).view(np.uint16)
                w64, x64 = w32.astype(np.float16), x32.astype(np.float16)
            else:
                wd, xd = rne_bf16(w32), rne_bf16(x32)
                w64, x64 = bf16_to_f32(wd), bf16_to_f32(xd)
            ref = x64.astype(np.float64) @ w64.astype(np.float64).T
            out = cp.full((m, n), np.nan, cp.float32)
            W, X = cp.asarray(wd), cp.asarray(xd)
            if m <= 8:
                mt = 1 if m == 1 else 8
                R = 4
                launch(dm, f"bitnet_k_dgemv_{nm}_m{mt}", (-(-n // (8 * R)), 1, 1), (32, 8, 1),
                       [P(W), P(X), I(n), I(k), LL(k), LL(k), I(m), P(out), LL(n), I(1)])
                path = "dgemv"
            elif ty == 1:
                launch(dm, "bitnet_k_sgemm_f32", (-(-n // 64), -(-m // 64), 1), (256, 1, 1),
                       [P(W), P(X), I(n), I(k), LL(k), LL(k), I(m), P(out), LL(n), I(1)])
                path = "sgemm"
            else:
                launch(tcm, f"bitnet_k_hgemm_{nm}", (-(-n // 128), -(-m // 128), 1), (128, 1, 1),
                       [P(W), P(X), I(n), I(k), LL(k), LL(k), I(m), P(out), LL(n), I(1)])
                path = "hgemm"
            got = out.get().astype(np.float64)
            err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            check(f"dense {path} {nm} n={n} k={k} m={m}", np.isfinite(got).all() and err < 1e-5, f"rel err {err:.2e}")
            if ty != 1 and m > 8:  # the CUDA-core fallback for the 16-bit types too
                out.fill(np.nan)
                launch(dm, f"bitnet_k_sgemm_{nm}", (-(-n // 64), -(-m // 64), 1), (256, 1, 1),
                       [P(W), P(X), I(n), I(k), LL(k), LL(k), I(m), P(out), LL(n), I(1)])
                got = out.get().astype(np.float64)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                check(f"dense sgemm {nm} n={n} k={k} m={m}", np.isfinite(got).all() and err < 1e-5, f"rel err {err:.2e}")
    # conversions
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 1000, np.array([np.inf, -np.inf, 0, -0.0,
                        6e-8, 1e-40, 65520, np.nan], np.float32)])
    X = cp.asarray(x)
    for ty, ref in ((2, x.astype(np.float16).view(np.uint16)), (3, rne_bf16(x))):
        o = cp.empty(len(x), cp.uint16)
        launch(dm, "bitnet_k_convert", (8, 1, 1), (256, 1, 1), [P(X), I(1), P(o), I(ty), ULL(len(x))])
        g = o.get()
        fin = ~np.isnan(x)
        nanok = np.all((g[~fin] & 0x7FFF) > (0x7C00 if ty == 2 else 0x7F80))
        check(f"convert f32->{ty}", np.array_equal(g[fin], ref[fin]) and nanok)
        back = cp.empty(len(x), cp.float32)
        launch(dm, "bitnet_k_convert", (8, 1, 1), (256, 1, 1), [P(o), I(ty), P(back), I(1), ULL(len(x))])
        want = ref.view(np.float16).astype(np.float32) if ty == 2 else bf16_to_f32(ref)
        b = back.get()
        check(f"convert {ty}->f32", np.array_equal(b[fin], want[fin]) and np.isnan(b[~fin]).all())


# ---------------------------------------------------------------- timing
def time_graph(launches, iters=20, reps=5):
    """launches: callables, each one kernel. Median per-launch microseconds over graph replays."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for f in launches[: min(4, len(launches))]:
            f()
        s.synchronize()
        s.begin_capture()
        for f in launches:
            f()
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        ts = []
        for _ in range(reps):
            e0.record(s)
            for _ in range(iters):
                g.launch(s)
            e1.record(s)
            e1.synchronize()
            ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / (iters * len(launches)))
    return statistics.median(ts), ts


def copy_bw():
    n = 1 << 30
    a = cp.empty(n, cp.uint8)
    b = cp.empty(n, cp.uint8)
    a.fill(1)
    us, _ = time_graph([lambda: b.data.copy_from_device_async(a.data, n, cp.cuda.get_current_stream())], iters=10)
    memcpy = 2 * n / (us * 1e-6) / 1e9
    dm = module("dense")
    best = 0
    for blocks in (NSM * 2, NSM * 4, NSM * 8):
        us, _ = time_graph([lambda: launch(dm, "bitnet_k_copy16", (blocks, 1, 1), (512, 1, 1), [P(a), P(b), ULL(n // 16)])],
                           iters=10)
        best = max(best, 2 * n / (us * 1e-6) / 1e9)
    nop, _ = time_graph([lambda: launch(dm, "bitnet_k_nop", (1, 1, 1), (32, 1, 1), [I(0)])] * 200)
    nop132, _ = time_graph([lambda: launch(dm, "bitnet_k_nop", (NSM * 4, 1, 1), (256, 1, 1), [I(0)])] * 200)
    print(f"copy: memcpy {memcpy:.0f} GB/s, copy16 kernel {best:.0f} GB/s; empty kernel in a graph {nop:.2f} us, "
          f"528x256 empty {nop132:.2f} us", flush=True)
    del a, b
    return max(memcpy, best)


def rotated(nbytes):
    reps = max(2, -(-ROT_BYTES // nbytes))
    return reps


SHAPES = [(2560, 2560), (3840, 2560), (13824, 2560), (2560, 6912), (20480, 3200), (55296, 5120)]


def bench(bitnetcpp=None, out_json=None):
    rng = np.random.default_rng(7)
    rows = []
    bw = copy_bw()
    print(f"copy bandwidth {bw:.1f} GB/s (read + write)", flush=True)
    import torch
    for (n, k) in SHAPES:
        # ---- ours, M = 1: T32 image of random bytes, rotated
        npad = -(-n // 128) * 128
        wbytes = npad * k // 4
        reps = rotated(n * k // 4)
        big = cp.random.randint(0, 2 ** 31 - 1, size=reps * wbytes // 4, dtype=cp.int32).view(cp.uint32)
        segs = Segs(); segs.n = 1; segs.end[0] = n; segs.scale[0] = 0.5
        x = rng.standard_normal((512, k)).astype(np.float32)
        a512 = quant_act(cp.asarray(x))
        a1 = dict(q=a512["q"][:1], s=a512["s"][:1], sum=a512["sum"][:1])
        out = cp.empty((512, n), cp.float32)
        best = None
        ws = [dict(d=big[r * wbytes // 4:(r + 1) * wbytes // 4], n_out=n, nc=k // 64, segs=segs, glu=0, k=k,
                   npad=npad) for r in range(reps)]
        for pdl in (False, True):
            for U in (2, 4):
                mod = module("ternary", (f"-DBITNET_TGEMV_UNROLL={U}",))
                for warps in (None, 8, 16, 32):
                    PDL[0] = pdl
                    us, _ = time_graph([lambda wd=wd: tgemv(wd, a1, 1, out, 1, None, warps, mod) for wd in ws])
                    PDL[0] = False
                    gbps = n * k / 4 / (us * 1e-6) / 1e9
                    cfg = tgemv_cfg(ws[0], 1, warps)
                    print(f"  tgemv {n}x{k} pdl={int(pdl)} U={U} warps={warps}->{cfg[2]}: {us:.2f} us {gbps:.0f} GB/s "
                          f"ratio {gbps / bw:.3f}", flush=True)
                    key = "pdl" if pdl else "plain"
                    if best is None or us < best.get(key, (1e9,))[0]:
                        best = best or {}
                        best[key] = (us, U, warps)
        for key in ("plain", "pdl"):
            us = best[key][0]
            rows.append(dict(kernel="tgemv" + ("_pdl" if key == "pdl" else ""), n=n, k=k, m=1, us=us,
                             weight_gbps=n * k / 4 / us / 1e3, ratio_to_copy_bw=n * k / 4 / us / 1e3 / bw,
                             cfg=f"U={best[key][1]} warps={best[key][2]}"))
        # ---- ours, M = 512 (tensor cores)
        bestg = None
        for st in (3, 4):
            gm = module("tgemm", (f"-DBITNET_TGEMM_STAGES={st}",))
            for split in (1, 2):
                ws = [dict(d=big[r * wbytes // 4:(r + 1) * wbytes // 4], n_out=n, nc=k // 64, segs=segs, glu=0, k=k,
                           npad=npad) for r in range(min(reps, 64))]
                us, _ = time_graph([lambda wd=wd: tgemm(wd, a512, 512, out, 1, None, split, gm) for wd in ws], iters=5)
                tops = 2 * 512 * n * k / (us * 1e-6) / 1e12
                print(f"  tgemm {n}x{k} m=512 stages={st} split={split}: {us:.1f} us {tops:.0f} TOPS", flush=True)
                if bestg is None or us < bestg[0]:
                    bestg = (us, f"stages={st} split={split}")
        rows.append(dict(kernel="tgemm", n=n, k=k, m=512, us=bestg[0], tops=2 * 512 * n * k / bestg[0] / 1e6,
                         cfg=bestg[1]))
        del big
        # ---- bitnet.cpp's kernel (M = 1 only)
        if bitnetcpp:
            lib = C.CDLL(bitnetcpp)
            fn = lib.bitlinear_int8xint2
            fn.argtypes = [C.c_void_p] * 5 + [C.c_int] * 3 + [C.c_void_p]
            reps2 = rotated(n * k // 4)
            bigb = cp.random.randint(0, 2 ** 31 - 1, size=reps2 * (n * k // 4) // 4, dtype=cp.int32).view(cp.uint32)
            inp = cp.asarray(rng.integers(-128, 128, size=k, dtype=np.int8))
            outb = cp.empty(n, cp.uint16)
            sb = cp.asarray(np.array([0x42fe], np.uint16))  # bf16 127.0
            wsb = cp.asarray(np.array([0x3f00] * 4, np.uint16))
            def one(r):
                fn(C.c_void_p(inp.data.ptr), C.c_void_p(bigb.data.ptr + r * (n * k // 4)), C.c_void_p(outb.data.ptr),
                   C.c_void_p(sb.data.ptr), C.c_void_p(wsb.data.ptr), 1, n, k,
                   C.c_void_p(cp.cuda.get_current_stream().ptr))
            us, _ = time_graph([lambda r=r: one(r) for r in range(reps2)])
            rows.append(dict(kernel="bitnet.cpp", n=n, k=k, m=1, us=us, weight_gbps=n * k / 4 / us / 1e3,
                             ratio_to_copy_bw=n * k / 4 / us / 1e3 / bw))
            print(f"  bitnet.cpp {n}x{k}: {us:.2f} us", flush=True)
            del bigb
        # ---- cuBLAS bf16 through torch, M = 1 and 512
        reps3 = rotated(n * k * 2)
        Wt = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(reps3)]
        for m in (1, 512):
            xt = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ot = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            torch.matmul(xt, Wt[0].t(), out=ot)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            st = torch.cuda.Stream()
            with torch.cuda.stream(st):
                for wt in Wt[:2]:
                    torch.matmul(xt, wt.t(), out=ot)
                st.synchronize()
                with torch.cuda.graph(g, stream=st):
                    for wt in Wt:
                        torch.matmul(xt, wt.t(), out=ot)
            g.replay()
            torch.cuda.synchronize()
            ts = []
            for _ in range(5):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(5):
                    g.replay()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e3 / (5 * len(Wt)))
            us = statistics.median(ts)
            rows.append(dict(kernel="cublas_bf16", n=n, k=k, m=m, us=us, weight_gbps=n * k * 2 / us / 1e3))
            print(f"  cublas bf16 {n}x{k} m={m}: {us:.2f} us", flush=True)
        del Wt
        torch.cuda.empty_cache()
        cp.get_default_memory_pool().free_all_blocks()
    # ---- fp16 lm head
    n, k = 128256, 2560
    reps = rotated(n * k * 2)
    Wl = [cp.random.standard_normal((n, k), dtype=cp.float32).astype(cp.float16) for _ in range(reps)]
    xl = cp.random.standard_normal((1, k), dtype=cp.float32).astype(cp.float16)
    ol = cp.empty((1, n), cp.float32)
    bestl = None
    for R, U, wpb, pdl in ((2, 2, 8, 0), (2, 4, 8, 0), (4, 2, 8, 0), (2, 2, 8, 1), (2, 4, 8, 1)):
            PDL[0] = bool(pdl)
            mod = module("dense", (f"-DBITNET_DGEMV_ROWS={R}", f"-DBITNET_DGEMV_UNROLL={U}"))
            if True:
                def one(wl, mod=mod, R=R, wpb=wpb):
                    launch(mod, "bitnet_k_dgemv_f16_m1", (-(-n // (wpb * R)), 1, 1), (32, wpb, 1),
                           [P(wl), P(xl), I(n), I(k), LL(k), LL(k), I(1), P(ol), LL(n), I(1)])
                us, _ = time_graph([lambda wl=wl: one(wl) for wl in Wl], iters=10)
                PDL[0] = False
                gbps = n * k * 2 / us / 1e3
                print(f"  lm-head f16 R={R} U={U} wpb={wpb} pdl={pdl}: {us:.1f} us {gbps:.0f} GB/s ratio {gbps / bw:.3f}",
                      flush=True)
                if not pdl and (bestl is None or us < bestl[0]):
                    bestl = (us, R, U, wpb)
    rows.append(dict(kernel="dgemv_f16", n=n, k=k, m=1, us=bestl[0], weight_gbps=n * k * 2 / bestl[0] / 1e3,
                     ratio_to_copy_bw=n * k * 2 / bestl[0] / 1e3 / bw, cfg=f"R={bestl[1]} U={bestl[2]} wpb={bestl[3]}"))
    del Wl
    cp.get_default_memory_pool().free_all_blocks()
    Wt = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(reps)]
    xt = torch.randn(1, k, device="cuda", dtype=torch.float16)
    g = torch.cuda.CUDAGraph()
    st = torch.cuda.Stream()
    with torch.cuda.stream(st):
        torch.matmul(xt, Wt[0].t())
        st.synchronize()
        with torch.cuda.graph(g, stream=st):
            for wt in Wt:
                torch.matmul(xt, wt.t())
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        g.replay()
    e1.record()
    e1.synchronize()
    us = e0.elapsed_time(e1) * 1e3 / (10 * len(Wt))
    rows.append(dict(kernel="cublas_f16", n=n, k=k, m=1, us=us, weight_gbps=n * k * 2 / us / 1e3))
    print(f"  cublas f16 lm-head: {us:.1f} us", flush=True)
    print("\nsummary (copy bw %.0f GB/s, device %s)" % (bw, PROPS["name"].decode()))
    for r in rows:
        print("  " + " ".join(f"{a}={b:.3f}" if isinstance(b, float) else f"{a}={b}" for a, b in r.items()))
    if out_json:
        json.dump(dict(copy_gbps=bw, rows=rows), open(out_json, "w"), indent=1)


def profile():
    """A few plain launches for ncu: tgemm and tgemv at 13824x2560, tgemv_wg at 55296x5120."""
    rng = np.random.default_rng(3)
    for (n, k) in [(13824, 2560), (55296, 5120)]:
        npad = -(-n // 128) * 128
        d = cp.random.randint(0, 2 ** 31 - 1, size=npad * k // 16, dtype=cp.int32).view(cp.uint32)
        segs = Segs(); segs.n = 1; segs.end[0] = n; segs.scale[0] = 0.5
        wd = dict(d=d, n_out=n, nc=k // 64, segs=segs, glu=0, k=k, npad=npad)
        a = quant_act(cp.asarray(rng.standard_normal((512, k)).astype(np.float32)))
        out = cp.empty((512, n), cp.float32)
        if n == 13824:
            tgemm(wd, a, 512, out)
    cp.cuda.Device().synchronize()


if __name__ == "__main__":
    MODDIR = sys.argv[1]
    args = sys.argv[2:]
    t0 = time.time()
    if "--check" in args:
        run_checks()
        print(f"checks: {len(FAILS)} failed", flush=True)
    if "--profile" in args:
        profile()
    if "--bench" in args:
        lib = args[args.index("--bitnetcpp") + 1] if "--bitnetcpp" in args else None
        js = args[args.index("--json") + 1] if "--json" in args else None
        bench(lib, js)
    print(f"done in {time.time() - t0:.1f} s")
    sys.exit(1 if FAILS else 0)
