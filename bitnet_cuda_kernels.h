/* bitnet_cuda_kernels.h - CUDA kernel sources for bitnet.h, JIT-compiled at run time by NVRTC.

   Plain C header with no dependency on bitnet.h. Each module is one string literal of
   self-contained CUDA C++: no #include, fixed-width types declared locally, every kernel
   extern "C" __global__ bitnet_k_<name> so the loader finds it by its plain name. Tuning
   constants are #ifndef defaults that -D options may override.

   BITNET_CUDA_MODULES(X) lists X(module_name, source_symbol, min_sm) and BITNET_CUDA_KERNELS(X)
   lists X(kernel_name, module_name); the loader uses both to compile, look up and report.
   BITNET_CUDA_KERNELS_VERSION feeds the JIT cache key: bump it when any source changes meaning.
*/
#ifndef BITNET_CUDA_KERNELS_H
#define BITNET_CUDA_KERNELS_H

#define BITNET_CUDA_KERNELS_VERSION 2

/* >>kernels-common: types and helpers shared by every module (prepended by the loader) */
static const char bitnet_cuda_src_common[] =
    "typedef signed char int8_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef short int16_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef int int32_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef long long int64_t;\n"
    "typedef unsigned long long uint64_t;\n";

/* >>kernels-util: small kernels the runtime itself uses and tests. Grid-stride loops: any grid
   covers any n. fill_u32: p[i] = v. add_u32: p[i] += v (a read-modify-write, so a copy that is not
   ordered after it shows). */
static const char bitnet_cuda_src_util[] =
    "extern \"C\" __global__ void bitnet_k_fill_u32(uint32_t *p, uint32_t v, uint64_t n) {\n"
    "    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)\n"
    "        p[i] = v;\n"
    "}\n"
    "extern \"C\" __global__ void bitnet_k_add_u32(uint32_t *p, uint32_t v, uint64_t n) {\n"
    "    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)\n"
    "        p[i] += v;\n"
    "}\n";

/* >>kernels-gpu-kernels:begin (bitnet.h's >>cuda-kernels section drives these modules) */
/* Device helpers that every gpu-kernels module starts with (helpers are static inline, so a
   module only emits what it uses). */
#define BITNET_CUDA_SRC_KHELPERS \
    "/* helpers shared by the kernel modules below (each module string starts with them) */\n" \
    "#pragma nv_diag_suppress 177\n" \
    "#define BN_DEV static __device__ __forceinline__\n" \
    "/* Precision codes are bitnet_precision's values: 1 fp32, 2 fp16, 3 bf16. */\n" \
    "#define BN_F32 1\n" \
    "#define BN_F16 2\n" \
    "#define BN_BF16 3\n" \
    "/* Row segments of a fused ternary matrix, passed by value: rows [end[i-1], end[i]) use scale[i]. */\n" \
    "struct bitnet_k_segs { int n; int end[8]; float scale[8]; };\n" \
    "\n" \
    "BN_DEV unsigned short bn_f2h(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n" \
    "BN_DEV float bn_h2f(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n" \
    "BN_DEV unsigned short bn_f2bf(float f) {\n" \
    "#if __CUDA_ARCH__ >= 800\n" \
    "    unsigned short h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h;\n" \
    "#else\n" \
    "    unsigned int u = __float_as_uint(f);\n" \
    "    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);\n" \
    "    u += 0x7fffu + ((u >> 16) & 1u);\n" \
    "    return (unsigned short)(u >> 16);\n" \
    "#endif\n" \
    "}\n" \
    "BN_DEV float bn_bf2f(unsigned short b) { return __uint_as_float((unsigned int)b << 16); }\n" \
    "BN_DEV float bn_load(const void *p, long long i, int ty) {\n" \
    "    if (ty == BN_F32) return ((const float *)p)[i];\n" \
    "    if (ty == BN_F16) return bn_h2f(((const unsigned short *)p)[i]);\n" \
    "    return bn_bf2f(((const unsigned short *)p)[i]);\n" \
    "}\n" \
    "BN_DEV void bn_store(void *p, long long i, float v, int ty) {\n" \
    "    if (ty == BN_F32) ((float *)p)[i] = v;\n" \
    "    else if (ty == BN_F16) ((unsigned short *)p)[i] = bn_f2h(v);\n" \
    "    else ((unsigned short *)p)[i] = bn_f2bf(v);\n" \
    "}\n" \
    "/* Weights are read once: skip L1, ask L2 for whole 256-byte lines. */\n" \
    "BN_DEV uint4 bn_ld_stream(const void *p) {\n" \
    "    uint4 v;\n" \
    "#if __CUDA_ARCH__ >= 800\n" \
    "    asm(\"ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\"\n" \
    "        : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p));\n" \
    "#else\n" \
    "    asm(\"ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\" : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p));\n" \
    "#endif\n" \
    "    return v;\n" \
    "}\n" \
    "/* Unsigned 2-bit codes times signed int8 activations. */\n" \
    "BN_DEV int bn_dp4a_us(unsigned int a, int b, int c) {\n" \
    "    int d; asm(\"dp4a.u32.s32 %0, %1, %2, %3;\" : \"=r\"(d) : \"r\"(a), \"r\"(b), \"r\"(c)); return d;\n" \
    "}\n" \
    "/* The CPU's epilogue, operation for operation (no contraction): (acc - sum) / a_scale * w_scale. */\n" \
    "BN_DEV float bn_dequant(int acc, int asum, float ascale, float wscale) {\n" \
    "    return __fmul_rn(__fdiv_rn((float)(acc - asum), ascale), wscale);\n" \
    "}\n" \
    "BN_DEV float bn_seg_scale(const bitnet_k_segs &s, int row) {\n" \
    "    float sc = s.scale[0];\n" \
    "#pragma unroll\n" \
    "    for (int i = 1; i < 8; i++)\n" \
    "        if (i < s.n && row >= s.end[i - 1]) sc = s.scale[i];\n" \
    "    return sc;\n" \
    "}\n" \
    "BN_DEV float bn_warp_sum(float v) {\n" \
    "#pragma unroll\n" \
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n" \
    "    return v;\n" \
    "}\n" \
    "/* Block-wide reductions (any blockDim.x*y*z up to 1024); every thread gets the result. */\n" \
    "BN_DEV double bn_block_sum_d(double v, double *sh) {\n" \
    "    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n" \
    "    int nt = blockDim.x * blockDim.y * blockDim.z;\n" \
    "#pragma unroll\n" \
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n" \
    "    __syncthreads();\n" \
    "    if ((t & 31) == 0) sh[t >> 5] = v;\n" \
    "    __syncthreads();\n" \
    "    v = 0;\n" \
    "    for (int i = 0; i < (nt + 31) / 32; i++) v += sh[i];\n" \
    "    return v;\n" \
    "}\n" \
    "BN_DEV float bn_block_max_f(float v, float *sh) {\n" \
    "    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n" \
    "    int nt = blockDim.x * blockDim.y * blockDim.z;\n" \
    "#pragma unroll\n" \
    "    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));\n" \
    "    __syncthreads();\n" \
    "    if ((t & 31) == 0) sh[t >> 5] = v;\n" \
    "    __syncthreads();\n" \
    "    v = 0.0f;\n" \
    "    for (int i = 0; i < (nt + 31) / 32; i++) v = fmaxf(v, sh[i]);\n" \
    "    return v;\n" \
    "}\n" \
    "BN_DEV int bn_block_sum_i(int v, int *sh) {\n" \
    "    int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n" \
    "    int nt = blockDim.x * blockDim.y * blockDim.z;\n" \
    "#pragma unroll\n" \
    "    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n" \
    "    __syncthreads();\n" \
    "    if ((t & 31) == 0) sh[t >> 5] = v;\n" \
    "    __syncthreads();\n" \
    "    v = 0;\n" \
    "    for (int i = 0; i < (nt + 31) / 32; i++) v += sh[i];\n" \
    "    return v;\n" \
    "}\n" \
    "/* sm_80+ building blocks: cp.async ring and ldmatrix (only emitted where used) */\n" \
    "BN_DEV unsigned int bn_smem_addr(const void *p) { return (unsigned int)__cvta_generic_to_shared(p); }\n" \
    "BN_DEV void bn_cp_async16(unsigned int dst, const void *src, int bytes) {\n" \
    "    asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\\n\" :: \"r\"(dst), \"l\"(src), \"r\"(bytes));\n" \
    "}\n" \
    "BN_DEV void bn_cp_commit() { asm volatile(\"cp.async.commit_group;\\n\" ::); }\n" \
    "template <int N> BN_DEV void bn_cp_wait() { asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(N)); }\n" \
    "BN_DEV void bn_ldsm_x4(unsigned int addr, unsigned int &r0, unsigned int &r1, unsigned int &r2, unsigned int &r3) {\n" \
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\\n\"\n" \
    "                 : \"=r\"(r0), \"=r\"(r1), \"=r\"(r2), \"=r\"(r3) : \"r\"(addr));\n" \
    "}\n"

static const char bitnet_cuda_src_ternary[] = BITNET_CUDA_SRC_KHELPERS
    "/* ---- ternary: T32 repack, activation quantization, W2A8 GEMV, GPU absmean quantization ----\n"
    "\n"
    "   T32 layout (the GPU form of a ternary matrix, built once at upload from I2_S):\n"
    "   rows are grouped by 32 (\"groups\"), K by 64 (\"chunks\", 16 bytes per row). The 32 rows' copies\n"
    "   of one chunk are contiguous (512 bytes), so a warp whose lane l owns row l of a group reads one\n"
    "   coalesced 512-byte line per chunk, and a group's K/64 chunks follow each other. Offset of\n"
    "   (row r, chunk c) in 16-byte units: ((r/32) * (K/64) + c) * 32 + r%32. Inside a chunk, word j\n"
    "   (0..3) holds K positions 16j..16j+15: position 16j + 4i + b is byte b's bit pair i (code =\n"
    "   w + 1, as in I2_S), so `word & (3 << 2i)` per byte lines up with the activation word\n"
    "   a[16j + 4i .. +3] and one dp4a needs no shift. Rows are padded to a multiple of 128 with code\n"
    "   1 (weight 0). A fused gate||up matrix (\"glu\") interleaves groups: gate rows 32p..32p+31, then\n"
    "   up rows 32p..32p+31, so one block or warp tile holds both halves of its outputs. */\n"
    "\n"
    "#ifndef BITNET_TGEMV_UNROLL\n"
    "#define BITNET_TGEMV_UNROLL 2   /* chunks in flight per lane (2 measured best on H100) */\n"
    "#endif\n"
    "\n"
    "/* One thread per destination chunk of one I2_S part. glu_part < 0: rows go to row_off + r;\n"
    "   0 / 1: gate / up rows of the interleaved glu layout. *bad gets 1 on a code-3 weight. */\n"
    "extern \"C\" __global__ void bitnet_k_t32_repack(const unsigned char *__restrict__ src, int n, int k,\n"
    "                                               uint4 *__restrict__ dst, int row_off, int glu_part, int *bad) {\n"
    "    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    int nc = k >> 6;\n"
    "    if (idx >= (long long)n * nc) return;\n"
    "    int r = (int)(idx / nc), c = (int)(idx % nc);\n"
    "    const unsigned char *blk = src + ((long long)r * k + (long long)(c >> 1) * 128) / 4;\n"
    "    int h = c & 1, badv = 0;\n"
    "    unsigned int wd[4] = {0u, 0u, 0u, 0u};\n"
    "#pragma unroll\n"
    "    for (int t = 0; t < 64; t++) {\n"
    "        int jj = 64 * h + t;\n"
    "        int code = (blk[jj & 31] >> (6 - 2 * (jj >> 5))) & 3;\n"
    "        badv |= code == 3;\n"
    "        wd[t >> 4] |= (unsigned int)code << (8 * (t & 3) + 2 * ((t >> 2) & 3));\n"
    "    }\n"
    "    int prow = glu_part < 0 ? row_off + r : ((r >> 5) * 64 + glu_part * 32 + (r & 31));\n"
    "    dst[((long long)(prow >> 5) * nc + c) * 32 + (prow & 31)] = make_uint4(wd[0], wd[1], wd[2], wd[3]);\n"
    "    if (badv) atomicOr(bad, 1);\n"
    "}\n"
    "\n"
    "/* Per-token absmax int8 quantization, one block per row, optionally after RMSNorm (nw != 0).\n"
    "   Bit-identical to bitnet_rmsnorm + bitnet_quantize_act: double sum of squares, the same\n"
    "   operation order, no contraction, round half to even, clamp. */\n"
    "extern \"C\" __global__ void bitnet_k_quant_act(const float *__restrict__ x, long long ldx, int k,\n"
    "                                              const float *__restrict__ nw, float eps, signed char *__restrict__ q,\n"
    "                                              long long ldq, float *__restrict__ scale, int *__restrict__ sum) {\n"
    "    __shared__ double shd[32];\n"
    "    __shared__ float shf[32];\n"
    "    __shared__ int shi[32];\n"
    "    const float *xr = x + blockIdx.x * ldx;\n"
    "    signed char *qr = q + blockIdx.x * ldq;\n"
    "    float r = 1.0f, amax = 0.0f;\n"
    "    int acc = 0;\n"
    "    if (nw) {\n"
    "        double ss = 0.0;\n"
    "        for (int i = threadIdx.x; i < k; i += blockDim.x) {\n"
    "            double v = (double)xr[i];\n"
    "            ss = __dadd_rn(ss, __dmul_rn(v, v));\n"
    "        }\n"
    "        ss = bn_block_sum_d(ss, shd);\n"
    "        r = (float)__ddiv_rn(1.0, sqrt(__dadd_rn(__ddiv_rn(ss, (double)k), (double)eps)));\n"
    "    }\n"
    "    for (int i = threadIdx.x; i < k; i += blockDim.x) {\n"
    "        float y = nw ? __fmul_rn(__fmul_rn(xr[i], r), nw[i]) : xr[i];\n"
    "        amax = fmaxf(amax, fabsf(y));\n"
    "    }\n"
    "    amax = bn_block_max_f(amax, shf);\n"
    "    float s = __fdiv_rn(127.0f, amax > 1e-5f ? amax : 1e-5f);\n"
    "    for (int i = threadIdx.x; i < k; i += blockDim.x) {\n"
    "        float y = nw ? __fmul_rn(__fmul_rn(xr[i], r), nw[i]) : xr[i];\n"
    "        int v = __float2int_rn(__fmul_rn(y, s));\n"
    "        v = v > 127 ? 127 : (v < -128 ? -128 : v);\n"
    "        qr[i] = (signed char)v;\n"
    "        acc += v;\n"
    "    }\n"
    "    acc = bn_block_sum_i(acc, shi);\n"
    "    if (threadIdx.x == 0) {\n"
    "        scale[blockIdx.x] = s;\n"
    "        if (sum) sum[blockIdx.x] = acc;\n"
    "    }\n"
    "}\n"
    "\n"
    "/* W2A8 GEMV for m <= MT tokens. Block (32, W): lane = row of a group, warps split the chunks\n"
    "   (glu: even warps the gate group, odd warps the up group). Integer partial sums meet in shared\n"
    "   memory; warp 0 applies the epilogue. Four accumulators per token, one per bit pair (plane i\n"
    "   holds 4^i times its sum), so decoding is one AND per dp4a. Needs K <= 262144. */\n"
    "template <int MT>\n"
    "BN_DEV void bn_tgemv(const uint4 *__restrict__ w, int n_out, int nc, const bitnet_k_segs &segs, int glu,\n"
    "                     const signed char *__restrict__ a, long long lda, const float *__restrict__ a_scale,\n"
    "                     const int *__restrict__ a_sum, int m, void *out, long long ldo, int out_type,\n"
    "                     const void *res, long long ldr) {\n"
    "    __shared__ int red[4096];\n"
    "    const int U = BITNET_TGEMV_UNROLL;\n"
    "    const int lane = threadIdx.x, wid = threadIdx.y, nw = blockDim.y;\n"
    "    const int rg = glu ? 2 : 1, wk = wid / rg, nwk = nw / rg;\n"
    "    const long long group = (long long)blockIdx.x * rg + (wid % rg);\n"
    "    const uint4 *wp = w + group * nc * 32 + lane;\n"
    "    int acc[MT][4];\n"
    "#pragma unroll\n"
    "    for (int mm = 0; mm < MT; mm++) acc[mm][0] = acc[mm][1] = acc[mm][2] = acc[mm][3] = 0;\n"
    "    for (int c0 = wk; c0 < nc; c0 += nwk * U) {\n"
    "        uint4 wv[U];\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++) {\n"
    "            int c = c0 + u * nwk;\n"
    "            wv[u] = c < nc ? bn_ld_stream(wp + (long long)c * 32) : make_uint4(0u, 0u, 0u, 0u);\n"
    "        }\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++) {\n"
    "            int c = c0 + u * nwk;\n"
    "            if (c < nc) {\n"
    "#pragma unroll\n"
    "                for (int mm = 0; mm < MT; mm++) {\n"
    "                    if (mm < m) {\n"
    "                        const int4 *ap = (const int4 *)(a + mm * lda + (long long)c * 64);\n"
    "                        unsigned int wj[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};\n"
    "#pragma unroll\n"
    "                        for (int j = 0; j < 4; j++) {\n"
    "                            int4 av = __ldg(ap + j);\n"
    "                            acc[mm][0] = bn_dp4a_us(wj[j] & 0x03030303u, av.x, acc[mm][0]);\n"
    "                            acc[mm][1] = bn_dp4a_us(wj[j] & 0x0c0c0c0cu, av.y, acc[mm][1]);\n"
    "                            acc[mm][2] = bn_dp4a_us(wj[j] & 0x30303030u, av.z, acc[mm][2]);\n"
    "                            acc[mm][3] = bn_dp4a_us(wj[j] & 0xc0c0c0c0u, av.w, acc[mm][3]);\n"
    "                        }\n"
    "                    }\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int mm = 0; mm < MT; mm++)\n"
    "        red[(wid * MT + mm) * 32 + lane] = acc[mm][0] + (acc[mm][1] >> 2) + (acc[mm][2] >> 4) + (acc[mm][3] >> 6);\n"
    "    __syncthreads();\n"
    "    if (wid != 0) return;\n"
    "    const int f = blockIdx.x * 32 + lane;\n"
    "    if (f >= n_out) return;\n"
    "    const float ws0 = glu ? segs.scale[0] : bn_seg_scale(segs, f), ws1 = segs.scale[1];\n"
    "    for (int mm = 0; mm < m; mm++) { /* a plain loop: small code for every MT */\n"
    "        int s0 = 0, s1 = 0;\n"
    "        for (int ww = 0; ww < nw; ww++) {\n"
    "            int v = red[(ww * MT + mm) * 32 + lane];\n"
    "            if (glu && (ww & 1)) s1 += v; else s0 += v;\n"
    "        }\n"
    "        float y;\n"
    "        if (glu) {\n"
    "            float g = bn_dequant(s0, a_sum[mm], a_scale[mm], ws0), up = bn_dequant(s1, a_sum[mm], a_scale[mm], ws1);\n"
    "            g = g > 0.0f ? g : 0.0f;\n"
    "            y = __fmul_rn(__fmul_rn(g, g), up);\n"
    "        } else {\n"
    "            y = bn_dequant(s0, a_sum[mm], a_scale[mm], ws0);\n"
    "        }\n"
    "        if (res) y = __fadd_rn(bn_load(res, mm * ldr + f, out_type), y);\n"
    "        bn_store(out, mm * ldo + f, y, out_type);\n"
    "    }\n"
    "}\n"
    "\n"
    "#define BN_TGEMV(MT)                                                                                              \\\n"
    "    extern \"C\" __global__ void bitnet_k_tgemv_m##MT(                                                              \\\n"
    "        const uint4 *__restrict__ w, int n_out, int nc, bitnet_k_segs segs, int glu,                              \\\n"
    "        const signed char *__restrict__ a, long long lda, const float *__restrict__ a_scale,                      \\\n"
    "        const int *__restrict__ a_sum, int m, void *out, long long ldo, int out_type, const void *res,            \\\n"
    "        long long ldr) {                                                                                          \\\n"
    "        bn_tgemv<MT>(w, n_out, nc, segs, glu, a, lda, a_scale, a_sum, m, out, ldo, out_type, res, ldr);           \\\n"
    "    }\n"
    "BN_TGEMV(1)\n"
    "BN_TGEMV(2)\n"
    "BN_TGEMV(4)\n"
    "BN_TGEMV(8)\n"
    "\n"
    "/* Absmean, step 1: per-block double sums of |w| (fixed order for a fixed launch shape). */\n"
    "extern \"C\" __global__ void bitnet_k_absmean_partial(const float *__restrict__ w, unsigned long long n,\n"
    "                                                    double *__restrict__ partial) {\n"
    "    __shared__ double sh[32];\n"
    "    double s = 0.0;\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x)\n"
    "        s = __dadd_rn(s, fabs((double)w[i]));\n"
    "    s = bn_block_sum_d(s, sh);\n"
    "    if (threadIdx.x == 0) partial[blockIdx.x] = s;\n"
    "}\n"
    "\n"
    "/* Absmean, step 2 (one block): scale = max((float)(sum / n), 1e-5), as bitnet_quantize_ternary. */\n"
    "extern \"C\" __global__ void bitnet_k_absmean_final(const double *__restrict__ partial, int np, unsigned long long n,\n"
    "                                                  float *__restrict__ scale) {\n"
    "    __shared__ double sh[32];\n"
    "    double s = 0.0;\n"
    "    for (int i = threadIdx.x; i < np; i += blockDim.x) s = __dadd_rn(s, partial[i]);\n"
    "    s = bn_block_sum_d(s, sh);\n"
    "    if (threadIdx.x == 0) {\n"
    "        float f = (float)__ddiv_rn(s, (double)n);\n"
    "        if (!(f >= 1e-5f)) f = 1e-5f;\n"
    "        *scale = f;\n"
    "    }\n"
    "}\n"
    "\n"
    "/* Absmean, step 3: q = clamp(round_half_even(w * (1 / scale)), -1, 1); NaN gives 0. */\n"
    "extern \"C\" __global__ void bitnet_k_ternary_codes(const float *__restrict__ w, unsigned long long n,\n"
    "                                                  const float *__restrict__ scale, signed char *__restrict__ q) {\n"
    "    float inv = __fdiv_rn(1.0f, *scale);\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "        int v = __float2int_rn(__fmul_rn(w[i], inv));\n"
    "        q[i] = (signed char)(v > 1 ? 1 : (v < -1 ? -1 : v));\n"
    "    }\n"
    "}\n"
    "\n"
    "/* I2_S packing of nk ternary codes (nk a multiple of 128) plus the 32-byte tail holding *scale. */\n"
    "extern \"C\" __global__ void bitnet_k_i2s_pack(const signed char *__restrict__ q, unsigned long long nk,\n"
    "                                             const float *__restrict__ scale, unsigned char *__restrict__ dst,\n"
    "                                             int *bad) {\n"
    "    unsigned long long nb = nk / 4;\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < nb;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "        const signed char *s = q + (i >> 5) * 128 + (i & 31);\n"
    "        unsigned int b = 0;\n"
    "        int badv = 0;\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 4; j++) {\n"
    "            int v = s[32 * j];\n"
    "            badv |= v < -1 || v > 1;\n"
    "            b |= (unsigned int)((v + 1) & 3) << (6 - 2 * j);\n"
    "        }\n"
    "        dst[i] = (unsigned char)b;\n"
    "        if (badv) atomicOr(bad, 1);\n"
    "    }\n"
    "    if (blockIdx.x == 0 && threadIdx.x < 8) {\n"
    "        unsigned int v = threadIdx.x == 0 ? __float_as_uint(*scale) : 0u;\n"
    "        ((unsigned int *)(dst + nb))[threadIdx.x] = v;\n"
    "    }\n"
    "}\n";

static const char bitnet_cuda_src_tgemm[] = BITNET_CUDA_SRC_KHELPERS
    "/* ---- tgemm: W2A8 GEMM on int8 tensor cores (mma.sync m16n8k32, sm_80+) for prefill ----\n"
    "   Block tile: 128 T32 rows x 128 tokens, 4 warps of 64 x 64, K in 64-wide chunks through a\n"
    "   cp.async ring of BITNET_TGEMM_STAGES stages. Weights stay 2-bit in shared memory (2 KB per\n"
    "   stage) and are widened to codes 0..2 in registers (an s8 operand, like the activations); the\n"
    "   epilogue subtracts the activation sum, as the CPU does. The L2 is asked up front for the block's\n"
    "   whole weight slab. The epilogue stages the accumulators through shared memory, 64 tokens at a\n"
    "   time, so its code stays small and its stores are coalesced along the rows. */\n"
    "\n"
    "#ifndef BITNET_TGEMM_STAGES\n"
    "#define BITNET_TGEMM_STAGES 4\n"
    "#endif\n"
    "#if BITNET_TGEMM_STAGES < 3\n"
    "#error \"BITNET_TGEMM_STAGES must be at least 3 (the epilogue reuses the ring)\"\n"
    "#endif\n"
    "#define BN_TG_XROW 80   /* 64 activation bytes + 16 of padding: ldmatrix rows hit distinct banks */\n"
    "#define BN_TG_STAGE (128 * 16 + 128 * BN_TG_XROW)\n"
    "#define BN_TG_SROW 132  /* epilogue tile row (ints): conflict-free fragment stores */\n"
    "\n"
    "BN_DEV void bn_mma_s8(int *c, const unsigned int *a, unsigned int b0, unsigned int b1) {\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, \"\n"
    "                 \"{%0,%1,%2,%3};\\n\"\n"
    "                 : \"+r\"(c[0]), \"+r\"(c[1]), \"+r\"(c[2]), \"+r\"(c[3])\n"
    "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "}\n"
    "\n"
    "extern \"C\" __global__ void __launch_bounds__(128)\n"
    "bitnet_k_tgemm(const uint4 *__restrict__ w, int n_out, int nc, bitnet_k_segs segs, int glu,\n"
    "               const signed char *__restrict__ a, long long lda, const float *__restrict__ a_scale,\n"
    "               const int *__restrict__ a_sum, int m, void *out, long long ldo, int out_type, const void *res,\n"
    "               long long ldr) {\n"
    "    const int S = BITNET_TGEMM_STAGES;\n"
    "    __shared__ __align__(16) unsigned char smem[S * BN_TG_STAGE];\n"
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
    "    const int g = lane >> 2, t = lane & 3;\n"
    "    const int wr = (warp & 1) * 64, wc = (warp >> 1) * 64;\n"
    "    const long long n0 = (long long)blockIdx.x * 128;\n"
    "    const int m0 = blockIdx.y * 128;\n"
    "\n"
    "    /* this thread's copies: one weight row, four 16-byte activation pieces */\n"
    "    const uint4 *wsrc = w + ((n0 >> 5) + (tid >> 5)) * (long long)nc * 32 + (tid & 31);\n"
    "    {\n"
    "        const char *slab = (const char *)(w + ((n0 >> 5) + (tid >> 5)) * (long long)nc * 32);\n"
    "        for (long long o = (tid & 31) * 128; o < (long long)nc * 512; o += 32 * 128)\n"
    "            asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(slab + o));\n"
    "    }\n"
    "    const signed char *xsrc[4];\n"
    "    int xbytes[4];\n"
    "    unsigned int xdst[4];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++) {\n"
    "        int p = tid + 128 * i, tok = p >> 2, part = p & 3;\n"
    "        bool ok = m0 + tok < m;\n"
    "        xsrc[i] = a + (ok ? (long long)(m0 + tok) * lda : 0) + part * 16;\n"
    "        xbytes[i] = ok ? 16 : 0; /* zero fill past the last token */\n"
    "        xdst[i] = 128 * 16 + tok * BN_TG_XROW + part * 16;\n"
    "    }\n"
    "    const unsigned int s0 = bn_smem_addr(smem);\n"
    "\n"
    "    int acc[4][8][4];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 8; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0;\n"
    "\n"
    "#pragma unroll\n"
    "    for (int s = 0; s < S - 1; s++) {\n"
    "        if (s < nc) {\n"
    "            bn_cp_async16(s0 + s * BN_TG_STAGE + tid * 16, wsrc + (long long)s * 32, 16);\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++) bn_cp_async16(s0 + s * BN_TG_STAGE + xdst[i], xsrc[i] + s * 64, xbytes[i]);\n"
    "        }\n"
    "        bn_cp_commit();\n"
    "    }\n"
    "\n"
    "    /* ldmatrix lane addresses for the B (activation) fragments: matrix q = lane / 8 */\n"
    "    const int q = lane >> 3, rr = lane & 7;\n"
    "    const unsigned int boff = (unsigned int)(128 * 16 + (wc + 8 * (q >> 1) + rr) * BN_TG_XROW + 16 * (q & 1));\n"
    "\n"
    "    for (int kt = 0; kt < nc; kt++) {\n"
    "        bn_cp_wait<S - 2>();\n"
    "        __syncthreads();\n"
    "        {\n"
    "            int kn = kt + S - 1;\n"
    "            if (kn < nc) {\n"
    "                unsigned int sb = s0 + (kn % S) * BN_TG_STAGE;\n"
    "                bn_cp_async16(sb + tid * 16, wsrc + (long long)kn * 32, 16);\n"
    "#pragma unroll\n"
    "                for (int i = 0; i < 4; i++) bn_cp_async16(sb + xdst[i], xsrc[i] + kn * 64, xbytes[i]);\n"
    "            }\n"
    "            bn_cp_commit();\n"
    "        }\n"
    "        const int s = kt % S;\n"
    "        const uint4 *wrow = (const uint4 *)(smem + s * BN_TG_STAGE);\n"
    "        uint4 wlo[4], whi[4];\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < 4; i++) {\n"
    "            wlo[i] = wrow[wr + 16 * i + g];\n"
    "            whi[i] = wrow[wr + 16 * i + g + 8];\n"
    "        }\n"
    "        const unsigned int sxs = s0 + s * BN_TG_STAGE + boff;\n"
    "#pragma unroll\n"
    "        for (int ks = 0; ks < 2; ks++) {\n"
    "            unsigned int b[8][2];\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 8; j += 2)\n"
    "                bn_ldsm_x4(sxs + j * 8 * BN_TG_XROW + ks * 32, b[j][0], b[j][1], b[j + 1][0], b[j + 1][1]);\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++) {\n"
    "                unsigned int af[4];\n"
    "                unsigned int l0 = ks ? wlo[i].z : wlo[i].x, l1 = ks ? wlo[i].w : wlo[i].y;\n"
    "                unsigned int h0 = ks ? whi[i].z : whi[i].x, h1 = ks ? whi[i].w : whi[i].y;\n"
    "                af[0] = (l0 >> (2 * t)) & 0x03030303u;\n"
    "                af[1] = (h0 >> (2 * t)) & 0x03030303u;\n"
    "                af[2] = (l1 >> (2 * t)) & 0x03030303u;\n"
    "                af[3] = (h1 >> (2 * t)) & 0x03030303u;\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < 8; j++) bn_mma_s8(acc[i][j], af, b[j][0], b[j][1]);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "    bn_cp_wait<0>();\n"
    "    __syncthreads();\n"
    "\n"
    "    /* epilogue, in two passes of 64 tokens (the warps with wc == 64 * pass hold them) */\n"
    "    int *st = (int *)smem;\n"
    "    float *srs = (float *)(smem + 64 * BN_TG_SROW * 4), *sas = srs + 128;\n"
    "    int *ssu = (int *)(sas + 64);\n"
    "    srs[tid] = glu ? ((tid & 32) ? segs.scale[1] : segs.scale[0]) : bn_seg_scale(segs, (int)(n0 + tid));\n"
    "    const int nrow = glu ? 64 : 128;\n"
    "    for (int pass = 0; pass < 2; pass++) {\n"
    "        if (tid < 64) {\n"
    "            int tok = m0 + 64 * pass + tid;\n"
    "            sas[tid] = tok < m ? a_scale[tok] : 1.0f;\n"
    "            ssu[tid] = tok < m ? a_sum[tok] : 0;\n"
    "        }\n"
    "        if ((warp >> 1) == pass) {\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < 8; j++)\n"
    "#pragma unroll\n"
    "                    for (int e = 0; e < 4; e++)\n"
    "                        st[(8 * j + 2 * t + (e & 1)) * BN_TG_SROW + wr + 16 * i + g + 8 * (e >> 1)] = acc[i][j][e];\n"
    "        }\n"
    "        __syncthreads();\n"
    "        for (int e = tid; e < 64 * nrow; e += 128) {\n"
    "            const int tl = e / nrow, rl = e - tl * nrow;\n"
    "            const long long tok = m0 + 64 * pass + tl;\n"
    "            if (tok >= m) break; /* tokens only grow with e */\n"
    "            const int *sr = st + tl * BN_TG_SROW;\n"
    "            long long col;\n"
    "            float y;\n"
    "            if (glu) {\n"
    "                const int gr = (rl >> 5) * 64 + (rl & 31);\n"
    "                col = (n0 >> 1) + rl;\n"
    "                if (col >= n_out) continue;\n"
    "                float gv = bn_dequant(sr[gr], ssu[tl], sas[tl], srs[gr]);\n"
    "                float uv = bn_dequant(sr[gr + 32], ssu[tl], sas[tl], srs[gr + 32]);\n"
    "                gv = gv > 0.0f ? gv : 0.0f;\n"
    "                y = __fmul_rn(__fmul_rn(gv, gv), uv);\n"
    "            } else {\n"
    "                col = n0 + rl;\n"
    "                if (col >= n_out) continue;\n"
    "                y = bn_dequant(sr[rl], ssu[tl], sas[tl], srs[rl]);\n"
    "            }\n"
    "            if (res) y = __fadd_rn(bn_load(res, tok * ldr + col, out_type), y);\n"
    "            bn_store(out, tok * ldo + col, y, out_type);\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "}\n";

static const char bitnet_cuda_src_dense[] = BITNET_CUDA_SRC_KHELPERS
    "/* ---- dense: fp32 / fp16 / bf16 weights times activations of the same type, fp32 accumulation ----\n"
    "   GEMV (m <= 8): a warp owns BITNET_DGEMV_ROWS rows and streams them with 16-byte loads, lanes\n"
    "   side by side along K (fully coalesced), BITNET_DGEMV_UNROLL steps in flight; the activation\n"
    "   vector is read once per step and reused for every row. GEMM: a plain 64x64 shared-memory tile\n"
    "   on the CUDA cores (fp32, and the 16-bit types before sm_80; dense_tc has the tensor-core one).\n"
    "   Layout: w is [n][ldw], x is [m][ldx], out is [m][ldo], all row-major. */\n"
    "\n"
    "#ifndef BITNET_DGEMV_ROWS\n"
    "#define BITNET_DGEMV_ROWS 2\n"
    "#endif\n"
    "#ifndef BITNET_DGEMV_UNROLL\n"
    "#define BITNET_DGEMV_UNROLL 4\n"
    "#endif\n"
    "\n"
    "template <int TY> BN_DEV void bn_unpack16(const uint4 &v, float *f) {\n"
    "    if (TY == BN_F32) {\n"
    "        f[0] = __uint_as_float(v.x); f[1] = __uint_as_float(v.y); f[2] = __uint_as_float(v.z); f[3] = __uint_as_float(v.w);\n"
    "    } else {\n"
    "        unsigned int u[4] = {v.x, v.y, v.z, v.w};\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < 4; i++) {\n"
    "            if (TY == BN_F16) {\n"
    "                f[2 * i] = bn_h2f((unsigned short)(u[i] & 0xffffu));\n"
    "                f[2 * i + 1] = bn_h2f((unsigned short)(u[i] >> 16));\n"
    "            } else {\n"
    "                f[2 * i] = __uint_as_float(u[i] << 16);\n"
    "                f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n"
    "\n"
    "/* k must be a multiple of the 16-byte vector (4 fp32 or 8 16-bit values); ldw, ldx likewise. */\n"
    "template <int TY, int MT>\n"
    "BN_DEV void bn_dgemv(const unsigned char *__restrict__ w, const unsigned char *__restrict__ x, int n, int k,\n"
    "                     long long ldw, long long ldx, int m, void *out, long long ldo, int out_type) {\n"
    "    const int E = TY == BN_F32 ? 4 : 8, ES = TY == BN_F32 ? 4 : 2;\n"
    "    const int R = BITNET_DGEMV_ROWS, U = MT == 1 ? BITNET_DGEMV_UNROLL : 1; /* m > 1 is compute-heavier anyway */\n"
    "    const int lane = threadIdx.x;\n"
    "    const long long row0 = ((long long)blockIdx.x * blockDim.y + threadIdx.y) * R;\n"
    "    if (row0 >= n) return;\n"
    "    const int kv = k / E;\n"
    "    float acc[MT][R];\n"
    "#pragma unroll\n"
    "    for (int mm = 0; mm < MT; mm++)\n"
    "#pragma unroll\n"
    "        for (int r = 0; r < R; r++) acc[mm][r] = 0.0f;\n"
    "    const unsigned char *wr[R];\n"
    "#pragma unroll\n"
    "    for (int r = 0; r < R; r++) wr[r] = w + (row0 + r < n ? row0 + r : row0) * ldw * ES;\n"
    "    for (int v0 = lane; v0 < kv; v0 += 32 * U) {\n"
    "        uint4 wv[U][R];\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++)\n"
    "#pragma unroll\n"
    "            for (int r = 0; r < R; r++) {\n"
    "                int v = v0 + 32 * u;\n"
    "                wv[u][r] = v < kv ? bn_ld_stream(wr[r] + (long long)v * 16) : make_uint4(0u, 0u, 0u, 0u);\n"
    "            }\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++) {\n"
    "            int v = v0 + 32 * u;\n"
    "            if (v < kv) {\n"
    "#pragma unroll\n"
    "                for (int mm = 0; mm < MT; mm++) {\n"
    "                    if (mm < m) {\n"
    "                        float xf[8], wf[8];\n"
    "                        bn_unpack16<TY>(__ldg((const uint4 *)(x + (mm * ldx) * ES + (long long)v * 16)), xf);\n"
    "#pragma unroll\n"
    "                        for (int r = 0; r < R; r++) {\n"
    "                            bn_unpack16<TY>(wv[u][r], wf);\n"
    "#pragma unroll\n"
    "                            for (int e = 0; e < E; e++) acc[mm][r] = fmaf(wf[e], xf[e], acc[mm][r]);\n"
    "                        }\n"
    "                    }\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int mm = 0; mm < MT; mm++)\n"
    "#pragma unroll\n"
    "        for (int r = 0; r < R; r++) acc[mm][r] = bn_warp_sum(acc[mm][r]);\n"
    "#pragma unroll\n"
    "    for (int mm = 0; mm < MT; mm++)\n"
    "#pragma unroll\n"
    "        for (int r = 0; r < R; r++)\n"
    "            if (lane == (mm * R + r) % 32 && mm < m && row0 + r < n) bn_store(out, mm * ldo + row0 + r, acc[mm][r], out_type);\n"
    "}\n"
    "\n"
    "#define BN_DGEMV(NAME, TY, MT)                                                                                    \\\n"
    "    extern \"C\" __global__ void bitnet_k_dgemv_##NAME##_m##MT(const unsigned char *__restrict__ w,                 \\\n"
    "        const unsigned char *__restrict__ x, int n, int k, long long ldw, long long ldx, int m, void *out,        \\\n"
    "        long long ldo, int out_type) {                                                                            \\\n"
    "        bn_dgemv<TY, MT>(w, x, n, k, ldw, ldx, m, out, ldo, out_type);                                           \\\n"
    "    }\n"
    "BN_DGEMV(f32, BN_F32, 1)\n"
    "BN_DGEMV(f32, BN_F32, 8)\n"
    "BN_DGEMV(f16, BN_F16, 1)\n"
    "BN_DGEMV(f16, BN_F16, 8)\n"
    "BN_DGEMV(bf16, BN_BF16, 1)\n"
    "BN_DGEMV(bf16, BN_BF16, 8)\n"
    "\n"
    "/* CUDA-core GEMM: 64x64 output tile per 256-thread block, 4x4 per thread, K in steps of 16. */\n"
    "template <int TY>\n"
    "BN_DEV void bn_sgemm(const void *__restrict__ w, const void *__restrict__ x, int n, int k, long long ldw,\n"
    "                     long long ldx, int m, void *out, long long ldo, int out_type) {\n"
    "    __shared__ float sw[16][65], sx[16][65];\n"
    "    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;\n"
    "    const long long n0 = (long long)blockIdx.x * 64, m0 = (long long)blockIdx.y * 64;\n"
    "    float acc[4][4];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;\n"
    "    for (int k0 = 0; k0 < k; k0 += 16) {\n"
    "#pragma unroll\n"
    "        for (int i = 0; i < 4; i++) {\n"
    "            int e = tid + 256 * i, r = e >> 4, kk = e & 15;\n"
    "            long long gn = n0 + r, gm = m0 + r;\n"
    "            int gk = k0 + kk;\n"
    "            sw[kk][r] = (gn < n && gk < k) ? bn_load(w, gn * ldw + gk, TY) : 0.0f;\n"
    "            sx[kk][r] = (gm < m && gk < k) ? bn_load(x, gm * ldx + gk, TY) : 0.0f;\n"
    "        }\n"
    "        __syncthreads();\n"
    "#pragma unroll\n"
    "        for (int kk = 0; kk < 16; kk++) {\n"
    "            float a[4], b[4];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++) { a[i] = sw[kk][ty + 16 * i]; b[i] = sx[kk][tx + 16 * i]; }\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 4; j++) {\n"
    "            long long gn = n0 + ty + 16 * i, gm = m0 + tx + 16 * j;\n"
    "            if (gn < n && gm < m) bn_store(out, gm * ldo + gn, acc[i][j], out_type);\n"
    "        }\n"
    "}\n"
    "\n"
    "#define BN_SGEMM(NAME, TY)                                                                                        \\\n"
    "    extern \"C\" __global__ void __launch_bounds__(256) bitnet_k_sgemm_##NAME(const void *__restrict__ w,           \\\n"
    "        const void *__restrict__ x, int n, int k, long long ldw, long long ldx, int m, void *out, long long ldo,  \\\n"
    "        int out_type) {                                                                                           \\\n"
    "        bn_sgemm<TY>(w, x, n, k, ldw, ldx, m, out, ldo, out_type);                                               \\\n"
    "    }\n"
    "BN_SGEMM(f32, BN_F32)\n"
    "BN_SGEMM(f16, BN_F16)\n"
    "BN_SGEMM(bf16, BN_BF16)\n"
    "\n"
    "/* Conversions between fp32 and the 16-bit types (round to nearest even; NaN stays NaN). */\n"
    "extern \"C\" __global__ void bitnet_k_convert(const void *__restrict__ src, int src_type, void *__restrict__ dst,\n"
    "                                            int dst_type, unsigned long long n) {\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x)\n"
    "        bn_store(dst, (long long)i, bn_load(src, (long long)i, src_type), dst_type);\n"
    "}\n"
    "\n"
    "/* Device copy (16-byte vectors), the bandwidth yardstick of the kernel benchmark. */\n"
    "extern \"C\" __global__ void bitnet_k_copy16(const uint4 *__restrict__ src, uint4 *__restrict__ dst, unsigned long long n) {\n"
    "    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "    for (; i + 3 * stride < n; i += 4 * stride) { /* four loads in flight */\n"
    "        uint4 a = bn_ld_stream(src + i), b = bn_ld_stream(src + i + stride);\n"
    "        uint4 c = bn_ld_stream(src + i + 2 * stride), e = bn_ld_stream(src + i + 3 * stride);\n"
    "        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = e;\n"
    "    }\n"
    "    for (; i < n; i += stride) dst[i] = bn_ld_stream(src + i);\n"
    "}\n"
    "\n"
    "/* An empty kernel: the launch-overhead floor of the kernel benchmark. */\n"
    "extern \"C\" __global__ void bitnet_k_nop(int x) { (void)x; }\n";

static const char bitnet_cuda_src_dense_tc[] = BITNET_CUDA_SRC_KHELPERS
    "/* ---- dense_tc: fp16 / bf16 GEMM on tensor cores (mma.sync m16n8k16, fp32 accumulation, sm_80+) ----\n"
    "   Block tile 128 weight rows x 128 tokens, 4 warps of 64 x 64, K in steps of 32 through a\n"
    "   double-buffered cp.async ring; both operands come from padded shared rows with ldmatrix.\n"
    "   k must be a multiple of 8 and ldw, ldx multiples of 8 (16-byte rows). */\n"
    "\n"
    "#define BN_HG_ROW 80 /* 32 values (64 bytes) + 16 bytes of padding */\n"
    "\n"
    "/* One stage: 512 16-byte pieces per operand (row = p / 4, 8 values each), zero-filled outside. */\n"
    "BN_DEV void bn_hg_load(unsigned int sa, unsigned int sb, const unsigned short *w, const unsigned short *x, int n, int m,\n"
    "                       int k, long long ldw, long long ldx, long long n0, long long m0, int kt, int tid) {\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++) {\n"
    "        int p = tid + 128 * i, r = p >> 2, part = p & 3, kk = kt * 32 + part * 8;\n"
    "        bool okw = n0 + r < n && kk < k, okx = m0 + r < m && kk < k;\n"
    "        bn_cp_async16(sa + r * BN_HG_ROW + part * 16, w + (okw ? (n0 + r) * ldw + kk : 0), okw ? 16 : 0);\n"
    "        bn_cp_async16(sb + r * BN_HG_ROW + part * 16, x + (okx ? (m0 + r) * ldx + kk : 0), okx ? 16 : 0);\n"
    "    }\n"
    "    bn_cp_commit();\n"
    "}\n"
    "template <int TY> BN_DEV void bn_mma_16(float *c, const unsigned int *a, unsigned int b0, unsigned int b1) {\n"
    "    if (TY == BN_F16)\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, \"\n"
    "                     \"{%0,%1,%2,%3};\\n\"\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "    else\n"
    "        asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, \"\n"
    "                     \"{%0,%1,%2,%3};\\n\"\n"
    "                     : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                     : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n"
    "}\n"
    "\n"
    "template <int TY>\n"
    "BN_DEV void bn_hgemm(const unsigned short *__restrict__ w, const unsigned short *__restrict__ x, int n, int k,\n"
    "                     long long ldw, long long ldx, int m, void *out, long long ldo, int out_type) {\n"
    "    __shared__ __align__(16) unsigned char sm[4 * 128 * BN_HG_ROW]; /* A stages 0, 1, then B stages 0, 1 */\n"
    "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
    "    const int g = lane >> 2, t = lane & 3;\n"
    "    const int wr = (warp & 1) * 64, wc = (warp >> 1) * 64;\n"
    "    const long long n0 = (long long)blockIdx.x * 128, m0 = (long long)blockIdx.y * 128;\n"
    "    const int nk = (k + 31) / 32;\n"
    "    const unsigned int sa0 = bn_smem_addr(sm), sb0 = sa0 + 2 * 128 * BN_HG_ROW;\n"
    "    float acc[4][8][4];\n"
    "#pragma unroll\n"
    "    for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "        for (int j = 0; j < 8; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;\n"
    "\n"
    "    bn_hg_load(sa0, sb0, w, x, n, m, k, ldw, ldx, n0, m0, 0, tid);\n"
    "    const int q = lane >> 3, rr = lane & 7;\n"
    "    /* A: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15); B: (tokens 0-7, k 0-7 | 8-15), next 8 tokens */\n"
    "    const unsigned int aoff = (unsigned int)((wr + rr + 8 * (q & 1)) * BN_HG_ROW + 16 * (q >> 1));\n"
    "    const unsigned int boff = (unsigned int)((wc + rr + 8 * (q >> 1)) * BN_HG_ROW + 16 * (q & 1));\n"
    "    for (int kt = 0; kt < nk; kt++) {\n"
    "        if (kt + 1 < nk)\n"
    "            bn_hg_load(sa0 + ((kt + 1) & 1) * 128 * BN_HG_ROW, sb0 + ((kt + 1) & 1) * 128 * BN_HG_ROW, w, x, n, m, k, ldw,\n"
    "                       ldx, n0, m0, kt + 1, tid);\n"
    "        else bn_cp_commit();\n"
    "        bn_cp_wait<1>();\n"
    "        __syncthreads();\n"
    "        const int s = kt & 1;\n"
    "#pragma unroll\n"
    "        for (int ks = 0; ks < 2; ks++) {\n"
    "            unsigned int af[4][4], b[8][2];\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++)\n"
    "                bn_ldsm_x4(sa0 + s * 128 * BN_HG_ROW + aoff + 16 * i * BN_HG_ROW + ks * 32, af[i][0], af[i][1], af[i][2],\n"
    "                           af[i][3]);\n"
    "#pragma unroll\n"
    "            for (int j = 0; j < 8; j += 2)\n"
    "                bn_ldsm_x4(sb0 + s * 128 * BN_HG_ROW + boff + 8 * j * BN_HG_ROW + ks * 32, b[j][0], b[j][1], b[j + 1][0],\n"
    "                           b[j + 1][1]);\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < 8; j++) bn_mma_16<TY>(acc[i][j], af[i], b[j][0], b[j][1]);\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "    /* epilogue: two passes of 64 tokens through shared memory (the pipeline buffers), so the\n"
    "       code stays small and the stores run along the rows */\n"
    "    bn_cp_wait<0>();\n"
    "    __syncthreads();\n"
    "    float *st = (float *)sm; /* 64 x 132 floats (33 KB) over the 40 KB of stages */\n"
    "    for (int pass = 0; pass < 2; pass++) {\n"
    "        if ((warp >> 1) == pass) {\n"
    "#pragma unroll\n"
    "            for (int i = 0; i < 4; i++)\n"
    "#pragma unroll\n"
    "                for (int j = 0; j < 8; j++)\n"
    "#pragma unroll\n"
    "                    for (int e = 0; e < 4; e++)\n"
    "                        st[(8 * j + 2 * t + (e & 1)) * 132 + wr + 16 * i + g + 8 * (e >> 1)] = acc[i][j][e];\n"
    "        }\n"
    "        __syncthreads();\n"
    "        for (int e = tid; e < 64 * 128; e += 128) {\n"
    "            const int tl = e >> 7, rl = e & 127;\n"
    "            const long long tok = m0 + 64 * pass + tl, row = n0 + rl;\n"
    "            if (tok >= m) break;\n"
    "            if (row < n) bn_store(out, tok * ldo + row, st[tl * 132 + rl], out_type);\n"
    "        }\n"
    "        __syncthreads();\n"
    "    }\n"
    "}\n"
    "\n"
    "#define BN_HGEMM(NAME, TY)                                                                                        \\\n"
    "    extern \"C\" __global__ void __launch_bounds__(128) bitnet_k_hgemm_##NAME(const unsigned short *__restrict__ w, \\\n"
    "        const unsigned short *__restrict__ x, int n, int k, long long ldw, long long ldx, int m, void *out,       \\\n"
    "        long long ldo, int out_type) {                                                                            \\\n"
    "        bn_hgemm<TY>(w, x, n, k, ldw, ldx, m, out, ldo, out_type);                                               \\\n"
    "    }\n"
    "BN_HGEMM(f16, BN_F16)\n"
    "BN_HGEMM(bf16, BN_BF16)\n";

/* >>kernels-gpu-kernels:end */

#define BITNET_CUDA_MODULES(X) \
    X(util, bitnet_cuda_src_util, 70) \
    X(ternary, bitnet_cuda_src_ternary, 70) \
    X(tgemm, bitnet_cuda_src_tgemm, 80) \
    X(dense, bitnet_cuda_src_dense, 70) \
    X(dense_tc, bitnet_cuda_src_dense_tc, 80)

#define BITNET_CUDA_KERNELS(X) \
    X(bitnet_k_fill_u32, util) \
    X(bitnet_k_add_u32, util) \
    X(bitnet_k_t32_repack, ternary) \
    X(bitnet_k_quant_act, ternary) \
    X(bitnet_k_tgemv_m1, ternary) \
    X(bitnet_k_tgemv_m2, ternary) \
    X(bitnet_k_tgemv_m4, ternary) \
    X(bitnet_k_tgemv_m8, ternary) \
    X(bitnet_k_absmean_partial, ternary) \
    X(bitnet_k_absmean_final, ternary) \
    X(bitnet_k_ternary_codes, ternary) \
    X(bitnet_k_i2s_pack, ternary) \
    X(bitnet_k_tgemm, tgemm) \
    X(bitnet_k_dgemv_f32_m1, dense) \
    X(bitnet_k_dgemv_f32_m8, dense) \
    X(bitnet_k_dgemv_f16_m1, dense) \
    X(bitnet_k_dgemv_f16_m8, dense) \
    X(bitnet_k_dgemv_bf16_m1, dense) \
    X(bitnet_k_dgemv_bf16_m8, dense) \
    X(bitnet_k_sgemm_f32, dense) \
    X(bitnet_k_sgemm_f16, dense) \
    X(bitnet_k_sgemm_bf16, dense) \
    X(bitnet_k_convert, dense) \
    X(bitnet_k_copy16, dense) \
    X(bitnet_k_nop, dense) \
    X(bitnet_k_hgemm_f16, dense_tc) \
    X(bitnet_k_hgemm_bf16, dense_tc)

#endif /* BITNET_CUDA_KERNELS_H */
