/* GPU kernels (issue 5). Without a GPU: argument checks, precision names, the CPU-only quantizer,
   and NVRTC builds of the kernel modules. With a GPU (skipped without one; failures under
   BITNET_REQUIRE_GPU=1): every kernel against the CPU scalar reference on random inputs with odd
   shapes. Integer paths and their fp32 epilogues must match bit for bit (fp16 / bf16 outputs:
   the CPU value rounded the same way); dense fp16 / bf16 products within 1e-5 of a double
   reference on the same rounded inputs. Every output is poisoned (0xFF bytes: NaN) first. */
#define _GNU_SOURCE
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <stdlib.h>

static int gpu_ok;
static char gpu_reason[2048];
static bitnet_gpu *G;

/* BITNET_TEST_SMALL=1 (the compute-sanitizer runs): the same paths on smaller shapes only. */
static int small_only(void) {
    const char *e = getenv("BITNET_TEST_SMALL");
    return e && strcmp(e, "1") == 0;
}
#define NEED_GPU() TEST_NEED_GPU(gpu_ok, gpu_reason)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
    return p;
}
static void rand_codes(int8_t *q, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) q[i] = (int8_t)test_rand_int(-1, 1);
}
static void rand_floats(float *x, size_t n, float scale) {
    size_t i;
    for (i = 0; i < n; i++) x[i] = test_rand_float(-scale, scale);
}
/* A device buffer filled with 0xFF bytes (NaN in fp32, fp16 and bf16). */
static bitnet_devptr poisoned(size_t bytes) {
    bitnet_devptr p = 0;
    if (bitnet_gpu_alloc(G, bytes, &p) != BITNET_OK) return 0;
    if (bitnet_gpu_memset(G, p, 0xFF, bytes) != BITNET_OK) return 0;
    return p;
}
static bitnet_devptr upload(const void *src, size_t bytes) {
    bitnet_devptr p = 0;
    if (bitnet_gpu_alloc(G, bytes, &p) != BITNET_OK || bitnet_gpu_upload(G, p, src, bytes) != BITNET_OK) return 0;
    return p;
}
static uint16_t to16(float v, bitnet_precision t) { return t == BITNET_PRECISION_FP16 ? bitnet_fp32_to_fp16(v) : bitnet_fp32_to_bf16(v); }
static float from16(uint16_t v, bitnet_precision t) { return t == BITNET_PRECISION_FP16 ? bitnet_fp16_to_fp32(v) : bitnet_bf16_to_fp32(v); }

/* ---- no GPU needed ------------------------------------------------------------------------- */

static void test_names_and_validation(void) {
    bitnet_gpu_ternary w;
    bitnet_gpu_act a;
    bitnet_gpu_i2s_part part;
    uint8_t buf[64];
    TEST_CHECK(strcmp(bitnet_precision_name(BITNET_PRECISION_BF16), "bf16") == 0);
    TEST_CHECK(strcmp(bitnet_precision_name(BITNET_PRECISION_FP16), "fp16") == 0);
    TEST_CHECK(strcmp(bitnet_precision_name((bitnet_precision)9), "unknown") == 0);
    TEST_CHECK(bitnet_detect_best_precision(-1) == BITNET_PRECISION_FP32);
    memset(&part, 0, sizeof part);
    part.data = buf, part.bytes = sizeof buf, part.n = 1;
    TEST_CHECK(bitnet_gpu_ternary_upload(NULL, &part, 1, 128, 0, &w) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_act_alloc(NULL, 1, 128, &a) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_ternary_matmul(NULL, &w, &a, 1, BITNET_PRECISION_FP32, 0) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_matmul(NULL, BITNET_PRECISION_FP16, 16, 16, 1, 1, 8, 16, BITNET_PRECISION_FP32) ==
               BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_precision_metrics_get(BITNET_PRECISION_AUTO, NULL) == BITNET_ERR_NULL_POINTER);
    {
        bitnet_gpu_precision_metrics pm;
        TEST_CHECK(bitnet_gpu_precision_metrics_get(BITNET_PRECISION_AUTO, &pm) == BITNET_ERR_INVALID_ARG);
    }
}

/* The quantizer without a GPU runs the CPU functions and counts them. */
static void test_quantizer_cpu_only(void) {
    enum { N = 7, K = 256 };
    float *w = (float *)xmalloc(N * K * 4), s1, s2, as1[N], as2[N];
    int8_t *q1 = (int8_t *)xmalloc(N * K), *q2 = (int8_t *)xmalloc(N * K);
    int32_t su1[N], su2[N];
    uint8_t *i1 = (uint8_t *)xmalloc(N * K / 4 + 32), *i2 = (uint8_t *)xmalloc(N * K / 4 + 32);
    bitnet_quantizer *qz = NULL;
    bitnet_quant_stats st;
    char line[512];
    rand_floats(w, N * K, 0.05f);
    TEST_CHECK(bitnet_quantizer_create(NULL, &qz) == BITNET_OK && qz);
    TEST_CHECK(bitnet_quantizer_ternary(qz, w, N * K, q1, &s1) == BITNET_OK);
    TEST_CHECK(bitnet_quantize_ternary(w, N * K, q2, &s2) == BITNET_OK);
    TEST_CHECK(s1 == s2 && memcmp(q1, q2, N * K) == 0);
    TEST_CHECK(bitnet_quantizer_act(qz, w, N, K, q1, as1, su1) == BITNET_OK);
    TEST_CHECK(bitnet_quantize_act(w, N, K, q2, as2, su2) == BITNET_OK);
    TEST_CHECK(memcmp(q1, q2, N * K) == 0 && memcmp(as1, as2, sizeof as1) == 0 && memcmp(su1, su2, sizeof su1) == 0);
    TEST_CHECK(bitnet_quantizer_i2s(qz, w, N, K, i1, N * K / 4 + 32) == BITNET_OK);
    TEST_CHECK(bitnet_quantize_ternary(w, N * K, q2, &s2) == BITNET_OK &&
               bitnet_i2s_pack(q2, N, K, s2, i2, N * K / 4 + 32) == BITNET_OK);
    TEST_CHECK(memcmp(i1, i2, N * K / 4 + 32) == 0);
    TEST_CHECK(bitnet_quantizer_i2s(qz, w, N, 100, i1, N * K / 4 + 32) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_quantizer_stats(qz, &st) == BITNET_OK);
    TEST_CHECK(st.gpu_ops == 0 && st.cpu_ops == 3 && st.fallbacks == 0 && st.last_gpu_error[0] == 0);
    TEST_CHECKF(st.host_bytes > 0 && st.host_bytes_total >= st.host_bytes + N * K, "%llu %llu",
                (unsigned long long)st.host_bytes, (unsigned long long)st.host_bytes_total);
    TEST_CHECK(bitnet_quantizer_summary(qz, line, sizeof line) == BITNET_OK);
    TEST_CHECKF(strstr(line, "gpu 0 ops") && strstr(line, "cpu 3 ops") && strstr(line, "0 fallbacks"), "%s", line);
    bitnet_quantizer_free(qz);
    free(w), free(q1), free(q2), free(i1), free(i2);
}

/* NVRTC builds each kernel module for sm_80 (the runtime's tests build every module for sm_70,
   80 and 90; this keeps a failure here pointing at the kernels). */
static void test_nvrtc_modules(void) {
    int v, lo, hi, i, mine = 0;
    if (bitnet_gpu_nvrtc_info(&v, &lo, &hi) != BITNET_OK) TEST_SKIP("no NVRTC here: %.150s", bitnet_last_error());
    if (hi < 80) TEST_SKIP("NVRTC builds up to sm_%d only", hi);
    for (i = 0; i < bitnet_gpu_builtin_count(); i++) {
        const char *nm = bitnet_gpu_builtin_name(i);
        bitnet_gpu_jit_info info;
        if (strcmp(nm, "ternary") && strcmp(nm, "tgemm") && strcmp(nm, "dense") && strcmp(nm, "dense_tc")) continue;
        mine++;
        TEST_CHECKF(bitnet_gpu_jit_builtin(i, "sm_80", 1, &info) == BITNET_OK, "%s: %s", nm, bitnet_last_error());
        TEST_CHECK(info.bytes > 0);
    }
    TEST_CHECK(mine == 4);
}

/* ---- GPU: activation quantization ----------------------------------------------------------- */

static void test_gpu_quantize_act(void) {
    static const size_t shapes[][2] = {{1, 128}, {1, 2560}, {3, 2560}, {7, 1000}, {2, 6912}, {1, 6912}, {5, 33}, {600, 2560}, {600, 3600}, {2, 8224}, {1, 8224}};
    /* (600: 128-thread rows; 8224: past the registers; bit planes with m = 1) */
    size_t s;
    NEED_GPU();
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t m = shapes[s][0], k = shapes[s][1], i;
        float *x = (float *)xmalloc(m * k * 4), *y = (float *)xmalloc(m * k * 4), *nw = (float *)xmalloc(k * 4);
        float *sc = (float *)xmalloc(m * 4), *gsc = (float *)xmalloc(m * 4);
        int8_t *q = (int8_t *)xmalloc(m * k), *gq = (int8_t *)xmalloc(m * k);
        int32_t *su = (int32_t *)xmalloc(m * 4), *gsu = (int32_t *)xmalloc(m * 4);
        bitnet_gpu_act a;
        bitnet_devptr dx, dnw;
        int norm;
        rand_floats(x, m * k, test_rand_float(0.1f, 20.0f));
        x[0] = 0.5f / 63.5f; /* ties and zeros */
        if (k > 3) x[1] = 0.0f;
        if (m >= 6 && k > 9) { /* rows with NaN (ignored by the absmax), only signed zeros, +-inf */
            x[2 * k + 5] = NAN;
            for (i = 0; i < k; i++) x[3 * k + i] = i & 1 ? -0.0f : 0.0f;
            x[4 * k + 7] = INFINITY;
            x[5 * k + 9] = -INFINITY, x[5 * k + 3] = NAN;
        }
        for (i = 0; i < k; i++) nw[i] = test_rand_float(0.5f, 1.5f);
        dx = upload(x, m * k * 4);
        dnw = upload(nw, k * 4);
        TEST_CHECK(dx && dnw && bitnet_gpu_act_alloc(G, m, k, &a) == BITNET_OK);
        for (norm = 0; norm < 2; norm++) {
            TEST_CHECK(bitnet_gpu_memset(G, a.q, 0x77, m * k) == BITNET_OK && bitnet_gpu_memset(G, a.scale, 0xFF, m * 4) == BITNET_OK &&
                       bitnet_gpu_memset(G, a.sum, 0xFF, m * 4) == BITNET_OK);
            TEST_CHECKF(bitnet_gpu_quantize_act(G, dx, m, k, norm ? dnw : 0, 1e-5f, &a) == BITNET_OK, "%s", bitnet_last_error());
            TEST_CHECK(bitnet_gpu_download(G, gq, a.q, m * k) == BITNET_OK && bitnet_gpu_download(G, gsc, a.scale, m * 4) == BITNET_OK &&
                       bitnet_gpu_download(G, gsu, a.sum, m * 4) == BITNET_OK);
            if (norm) TEST_CHECK(bitnet_rmsnorm(x, nw, m, k, 1e-5f, y) == BITNET_OK);
            TEST_CHECK(bitnet_quantize_act(norm ? y : x, m, k, q, sc, su) == BITNET_OK);
            TEST_CHECKF(memcmp(q, gq, m * k) == 0 && memcmp(sc, gsc, m * 4) == 0 && memcmp(su, gsu, m * 4) == 0,
                        "m=%zu k=%zu rmsnorm=%d", m, k, norm);
            TEST_CHECK(!a.planes == (k % 32 != 0));
            if (a.planes && m == 1) { /* the bit planes, as bitnet_gpu_act_upload makes them on the host */
                uint8_t *gp = (uint8_t *)xmalloc(2 * k), *hp = (uint8_t *)xmalloc(2 * k);
                bitnet_gpu_act h;
                TEST_CHECK(bitnet_gpu_act_alloc(G, 1, k, &h) == BITNET_OK && bitnet_gpu_act_upload(G, &h, q, sc, su, 1) == BITNET_OK);
                TEST_CHECK(bitnet_gpu_download(G, gp, a.planes, 2 * k) == BITNET_OK && bitnet_gpu_download(G, hp, h.planes, 2 * k) == BITNET_OK);
                TEST_CHECKF(memcmp(gp, hp, 2 * k) == 0, "planes: m=%zu k=%zu rmsnorm=%d", m, k, norm);
                TEST_CHECK(bitnet_gpu_memset(G, a.planes, 0x77, 2 * k) == BITNET_OK); /* poison for the next pass */
                bitnet_gpu_act_free(G, &h);
                free(gp), free(hp);
            }
        }
        TEST_CHECK(bitnet_gpu_quantize_act(G, dx, m + 1 > a.cap ? a.cap + 1 : m, k, 0, 0, &a) == BITNET_ERR_BAD_SIZE);
        bitnet_gpu_act_free(G, &a);
        bitnet_gpu_free(G, dx), bitnet_gpu_free(G, dnw);
        free(x), free(y), free(nw), free(sc), free(gsc), free(q), free(gq), free(su), free(gsu);
    }
}

/* A float a whose row [a, 0, ..., 0] (k wide) has its RMSNorm factor 1 / sqrt(a^2 / k + eps), in
   double as the CPU computes it, within 2^-48 (relative) of a midpoint between two floats: there
   the GPU's fast path (bn_rms_r) must hand over to the exact sequence. Scans floats up from a0. */
static float near_tie_a(size_t k, float eps, float a0) {
    uint32_t u;
    memcpy(&u, &a0, 4);
    for (; u < 0x7f000000u; u++) {
        double y, lo, hi;
        float f, a;
        memcpy(&a, &u, 4);
        y = 1.0 / sqrt((double)a * a / (double)k + (double)eps);
        f = (float)y;
        lo = 0.5 * ((double)f + nextafterf(f, 0.0f)), hi = 0.5 * ((double)f + nextafterf(f, INFINITY));
        if (fmin(y - lo, hi - y) < y / 281474976710656.0) return a; /* 2^48 */
    }
    return 0.0f;
}

static void test_gpu_rms_near_ties(void) {
    enum { M = 4 };
    static const size_t ks[] = {2560, 6912, 1000};
    size_t s, i, r;
    NEED_GPU();
    for (s = 0; s < sizeof ks / sizeof ks[0]; s++) {
        size_t k = ks[s];
        float *x = (float *)xmalloc(M * k * 4), *y = (float *)xmalloc(M * k * 4), *nw = (float *)xmalloc(k * 4), sc[M], gsc[M];
        int8_t *q = (int8_t *)xmalloc(M * k), *gq = (int8_t *)xmalloc(M * k);
        int32_t su[M], gsu[M];
        bitnet_gpu_act a;
        bitnet_devptr dx, dnw;
        memset(x, 0, M * k * 4);
        for (r = 0; r < M; r++) {
            x[r * k] = near_tie_a(k, 1e-5f, test_rand_float(0.5f, 50.0f));
            TEST_CHECKF(x[r * k] != 0.0f, "no near tie found for k=%zu", k);
        }
        for (i = 0; i < k; i++) nw[i] = test_rand_float(0.5f, 1.5f);
        dx = upload(x, M * k * 4);
        dnw = upload(nw, k * 4);
        TEST_CHECK(dx && dnw && bitnet_gpu_act_alloc(G, M, k, &a) == BITNET_OK);
        TEST_CHECK(bitnet_gpu_memset(G, a.q, 0x77, M * k) == BITNET_OK && bitnet_gpu_memset(G, a.scale, 0xFF, M * 4) == BITNET_OK &&
                   bitnet_gpu_memset(G, a.sum, 0xFF, M * 4) == BITNET_OK);
        TEST_CHECKF(bitnet_gpu_quantize_act(G, dx, M, k, dnw, 1e-5f, &a) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECK(bitnet_gpu_download(G, gq, a.q, M * k) == BITNET_OK && bitnet_gpu_download(G, gsc, a.scale, M * 4) == BITNET_OK &&
                   bitnet_gpu_download(G, gsu, a.sum, M * 4) == BITNET_OK);
        TEST_CHECK(bitnet_rmsnorm(x, nw, M, k, 1e-5f, y) == BITNET_OK);
        TEST_CHECK(bitnet_quantize_act(y, M, k, q, sc, su) == BITNET_OK);
        TEST_CHECKF(memcmp(q, gq, M * k) == 0 && memcmp(sc, gsc, sizeof sc) == 0 && memcmp(su, gsu, sizeof su) == 0,
                    "k=%zu: scales %a %a / %a %a", k, sc[0], gsc[0], sc[1], gsc[1]);
        bitnet_gpu_act_free(G, &a);
        bitnet_gpu_free(G, dx), bitnet_gpu_free(G, dnw);
        free(x), free(y), free(nw), free(q), free(gq);
    }
}

/* The decode GEMV (the forward module's bitnet_k_fwd_gemv_store: RMSNorm, int8 quantization and the
   ternary dot products in one kernel) against bitnet_rmsnorm_quantize + bitnet_gemm_i2s, bit for
   bit. Cases: random; two elements that |x * w| and |y| order differently (found by search: a
   prologue that took max|y| from the largest |x * w| would be wrong, BENCHMARKS.md sessions 11 and
   23); an exact tie; x all zero; a norm weight of 1e37. Element ti sits in the part the prologue
   reads again when k = 6912 runs on 8 warps, in registers on 16. */
static int order_differs(const float *x, const float *nw, size_t k, size_t i, size_t j, float *y) {
    double pi = fabs((double)x[i] * nw[i]), pj = fabs((double)x[j] * nw[j]);
    if (bitnet_rmsnorm(x, nw, 1, k, 1e-5f, y) != BITNET_OK) return 0;
    return (pi > pj && fabsf(y[j]) > fabsf(y[i])) || (pj > pi && fabsf(y[i]) > fabsf(y[j]));
}
static void test_gpu_decode_gemv_prologue(void) {
    enum { N = 70 };
    static const size_t ks[] = {2560, 6912};
    static const unsigned warps[] = {8, 16};
    bitnet_gpu_kernel *kern = NULL;
    size_t s, c, v, i;
    NEED_GPU();
    TEST_CHECKF(bitnet_gpu_builtin_kernel(G, "bitnet_k_fwd_gemv_store", &kern) == BITNET_OK, "%s", bitnet_last_error());
    for (s = 0; kern && s < sizeof ks / sizeof ks[0]; s++) {
        size_t k = ks[s], bytes = bitnet_i2s_bytes(N, k), ti = k - 3, tj = 5;
        int8_t *codes = (int8_t *)xmalloc(N * k), *q = (int8_t *)xmalloc(k);
        uint8_t *i2s = (uint8_t *)xmalloc(bytes);
        float *x = (float *)xmalloc(k * 4), *nw = (float *)xmalloc(k * 4), *y = (float *)xmalloc(k * 4);
        float ref[N], out[N], sc, eps = 1e-5f;
        int32_t su;
        int n_out = N, nc = (int)(k / 64);
        bitnet_gpu_i2s_part part;
        bitnet_gpu_ternary w;
        struct { int32_t n; int32_t end[8]; float scale[8]; } segs; /* the kernel's bitnet_k_segs */
        rand_codes(codes, N * k);
        TEST_CHECK(bitnet_i2s_pack(codes, N, k, 0.7f, i2s, bytes) == BITNET_OK);
        part.data = i2s, part.bytes = bytes, part.n = N;
        TEST_CHECKF(bitnet_gpu_ternary_upload(G, &part, 1, k, 0, &w) == BITNET_OK, "%s", bitnet_last_error());
        memset(&segs, 0, sizeof segs);
        segs.n = 1, segs.end[0] = (int32_t)w.part_end[0], segs.scale[0] = w.part_scale[0];
        for (c = 0; c < 5; c++) {
            int tries = 0;
            rand_floats(x, k, 1.0f);
            for (i = 0; i < k; i++) nw[i] = test_rand_float(0.5f, 1.5f);
            if (c == 1) { /* the top two by |x * w| in the other order by |y| */
                do {
                    x[ti] = test_rand_float(8.0f, 9.0f), nw[tj] = test_rand_float(0.9f, 1.1f);
                    /* x[tj] * nw[tj] about x[ti] * nw[ti]; 0 * INFINITY (NaN) gives a NaN x[tj]: no pair, the next try */
                    x[tj] = nextafterf((float)((double)x[ti] * nw[ti] / nw[tj]), (float)test_rand_int(-1, 1) * INFINITY);
                } while (!order_differs(x, nw, k, ti, tj, y) && ++tries < 100000);
                TEST_CHECKF(tries < 100000, "k=%zu: no pair found", k);
            }
            if (c == 2) x[ti] = x[tj] = -9.0f, nw[ti] = nw[tj];
            if (c == 3) memset(x, 0, k * 4);
            if (c == 4) x[tj] = 5e-37f, nw[tj] = 1e37f;
            TEST_CHECK(bitnet_rmsnorm_quantize(x, nw, 1, k, eps, q, &sc, &su) == BITNET_OK);
            TEST_CHECK(bitnet_gemm_i2s(i2s, bytes, N, k, q, &sc, &su, 1, ref) == BITNET_OK);
            for (v = 0; v < sizeof warps / sizeof warps[0]; v++) {
                bitnet_devptr dx = upload(x, k * 4), dnw = upload(nw, k * 4), dout = poisoned(N * 4);
                unsigned grid[3] = {(N + 31) / 32, 1, 1}, block[3] = {32, warps[v], 1}, smem = (unsigned)k + warps[v] * 32 * 4;
                void *args[9];
                int kn = (int)k; /* the norm's mean over all of x */
                args[0] = &w.data, args[1] = &n_out, args[2] = &nc, args[3] = &segs, args[4] = &dx, args[5] = &dnw, args[6] = &eps,
                args[7] = &dout, args[8] = &kn;
                TEST_CHECK(dx && dnw && dout);
                TEST_CHECKF(bitnet_gpu_launch(G, kern, grid, block, smem, args) == BITNET_OK, "%s", bitnet_last_error());
                TEST_CHECK(bitnet_gpu_download(G, out, dout, sizeof out) == BITNET_OK);
                TEST_CHECKF(memcmp(out, ref, sizeof ref) == 0, "k=%zu case %zu, %u warps: %a vs %a", k, c, warps[v], out[0], ref[0]);
                bitnet_gpu_free(G, dx), bitnet_gpu_free(G, dnw), bitnet_gpu_free(G, dout);
            }
        }
        bitnet_gpu_ternary_free(G, &w);
        free(codes), free(q), free(i2s), free(x), free(nw), free(y);
    }
}

/* ---- GPU: W2A8 matmul ------------------------------------------------------------------------ */

typedef struct tcase { int parts; size_t rows[3]; size_t k, m; int glu; } tcase;

/* Random I2_S parts, the CPU reference (bitnet_gemm_i2s per part), and the GPU for every output
   type with and without a residual. big: token 0's activations times 1e33 (its int8 scale ~4e-32,
   which the wgmma epilogue's division by a reciprocal does not take). */
static void check_ternary(const tcase *c, int big) {
    size_t k = c->k, m = c->m, nrows = 0, nout, i, j;
    uint8_t *i2s[3];
    bitnet_gpu_i2s_part parts[3];
    float *x = (float *)xmalloc(m * k * 4), *sc = (float *)xmalloc(m * 4), *ref, *part_out[3];
    int8_t *q = (int8_t *)xmalloc(m * k);
    int32_t *su = (int32_t *)xmalloc(m * 4);
    bitnet_gpu_ternary w;
    bitnet_gpu_act a;
    int p, ti;
    for (p = 0; p < c->parts; p++) {
        size_t n = c->rows[p], bytes = bitnet_i2s_bytes(n, k);
        int8_t *codes = (int8_t *)xmalloc(n * k);
        rand_codes(codes, n * k);
        i2s[p] = (uint8_t *)xmalloc(bytes);
        TEST_CHECK(bitnet_i2s_pack(codes, n, k, test_rand_float(0.2f, 2.0f), i2s[p], bytes) == BITNET_OK);
        parts[p].data = i2s[p], parts[p].bytes = bytes, parts[p].n = n;
        part_out[p] = (float *)xmalloc(m * n * 4);
        nrows += n;
        free(codes);
    }
    rand_floats(x, m * k, 3.0f);
    if (big)
        for (i = 0; i < k; i++) x[i] *= 1e33f;
    TEST_CHECK(bitnet_quantize_act(x, m, k, q, sc, su) == BITNET_OK);
    for (p = 0; p < c->parts; p++)
        TEST_CHECK(bitnet_gemm_i2s(i2s[p], parts[p].bytes, c->rows[p], k, q, sc, su, m, part_out[p]) == BITNET_OK);
    nout = c->glu ? c->rows[0] : nrows;
    ref = (float *)xmalloc(m * nout * 4);
    for (i = 0; i < m; i++) {
        size_t col = 0;
        if (c->glu) {
            for (j = 0; j < nout; j++) ref[i * nout + j] = bitnet_glu(c->glu, part_out[0][i * nout + j], part_out[1][i * nout + j]);
            continue;
        }
        for (p = 0; p < c->parts; p++)
            for (j = 0; j < c->rows[p]; j++) ref[i * nout + col++] = part_out[p][i * c->rows[p] + j];
    }
    TEST_CHECKF(bitnet_gpu_ternary_upload(G, parts, c->parts, k, c->glu, &w) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(w.n == nout && w.n_rows == nrows && w.n_pad % 128 == 0);
    TEST_CHECK(bitnet_gpu_act_alloc(G, m, k, &a) == BITNET_OK);
    TEST_CHECKF(bitnet_gpu_act_upload(G, &a, q, sc, su, m) == BITNET_OK, "%s", bitnet_last_error());
    for (ti = 0; ti < 3; ti++) {
        bitnet_precision ot = ti == 0 ? BITNET_PRECISION_FP32 : ti == 1 ? BITNET_PRECISION_FP16 : BITNET_PRECISION_BF16;
        size_t es = ti == 0 ? 4 : 2, nv = m * nout;
        int res;
        for (res = 0; res < 2; res++) {
            void *host = xmalloc(nv * es), *rh = xmalloc(nv * es), *want = xmalloc(nv * es);
            bitnet_devptr out = poisoned(nv * es), dr = 0;
            size_t bad = 0;
            for (i = 0; i < nv; i++) { /* the residual, and the expected output, in the output type */
                float r = test_rand_float(-4.0f, 4.0f), y;
                if (ti == 0) ((float *)rh)[i] = r;
                else ((uint16_t *)rh)[i] = to16(r, ot), r = from16(((uint16_t *)rh)[i], ot);
                y = res ? r + ref[i] : ref[i];
                if (ti == 0) ((float *)want)[i] = y;
                else ((uint16_t *)want)[i] = to16(y, ot);
            }
            if (res) dr = upload(rh, nv * es);
            TEST_CHECKF(bitnet_gpu_ternary_matmul(G, &w, &a, out, ot, dr) == BITNET_OK, "%s", bitnet_last_error());
            TEST_CHECK(bitnet_gpu_download(G, host, out, nv * es) == BITNET_OK);
            for (i = 0; i < nv; i++)
                bad += es == 4 ? memcmp((float *)host + i, (float *)want + i, 4) != 0 : ((uint16_t *)host)[i] != ((uint16_t *)want)[i];
            TEST_CHECKF(bad == 0, "parts %d rows %zu/%zu/%zu k=%zu m=%zu glu=%d out=%s residual=%d: %zu of %zu differ", c->parts,
                        c->rows[0], c->parts > 1 ? c->rows[1] : 0, c->parts > 2 ? c->rows[2] : 0, k, m, c->glu,
                        bitnet_precision_name(ot), res, bad, nv);
            if (res && ti == 0) { /* in place: out = out + product */
                TEST_CHECK(bitnet_gpu_ternary_matmul(G, &w, &a, dr, ot, dr) == BITNET_OK);
                TEST_CHECK(bitnet_gpu_download(G, host, dr, nv * es) == BITNET_OK);
                TEST_CHECK(memcmp(host, want, nv * es) == 0);
            }
            bitnet_gpu_free(G, out);
            if (dr) bitnet_gpu_free(G, dr);
            free(host), free(rh), free(want);
        }
    }
    bitnet_gpu_act_free(G, &a);
    bitnet_gpu_ternary_free(G, &w);
    for (p = 0; p < c->parts; p++) free(i2s[p]), free(part_out[p]);
    free(x), free(sc), free(q), free(su), free(ref);
}
static void check_ternary_case(const tcase *c) { check_ternary(c, 0); }

static void test_gpu_ternary_gemv(void) {
    static const tcase cases[] = {
        {1, {37, 0, 0}, 128, 1, 0},       {1, {300, 0, 0}, 384, 3, 0},   {3, {2560, 640, 640}, 2560, 1, 0},
        {2, {96, 96, 0}, 256, 5, 1},      {1, {1000, 0, 0}, 6912, 8, 0}, {1, {33, 0, 0}, 128, 2, 0},
        {2, {200, 77, 0}, 640, 4, 0},     {2, {70, 70, 0}, 384, 1, 1},   {2, {96, 96, 0}, 256, 5, 2},
        {2, {70, 70, 0}, 384, 1, 2},
    };
    size_t i, f;
    NEED_GPU();
    for (f = 0; f < 2; f++) { /* the dispatch (sm_90: the wgmma GEMM from 5 tokens), then the GEMV for every m */
        if (f) setenv("BITNET_TGEMM_WG", "0", 1);
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (!small_only() || cases[i].rows[0] * cases[i].k <= 300 * 384) check_ternary_case(&cases[i]);
    }
    unsetenv("BITNET_TGEMM_WG");
}

/* M = 1 through each launch of the GEMV: plain (BITNET_TGEMV_PDL=0, every GPU), and on sm_90
   under programmatic dependent launch with the shape the dispatch picks and with forced ones
   (BITNET_TGEMV_WARPS a group, BITNET_TGEMV_U loads a lane; 3, 5 and 7 warps split K unevenly):
   odd rows, fused parts, glu, K of one slice a warp and of many, more groups than a wave holds. */
static void test_gpu_ternary_gemv_splits(void) {
    static const tcase cases[] = {
        {1, {37, 0, 0}, 128, 1, 0},  {3, {2560, 640, 640}, 2560, 1, 0}, {2, {70, 70, 0}, 384, 1, 1},
        {1, {1000, 0, 0}, 6912, 1, 0}, {2, {96, 96, 0}, 6912, 1, 1},     {2, {200, 77, 0}, 640, 1, 0},
        {1, {300, 0, 0}, 3200, 1, 0},  {1, {4300, 0, 0}, 128, 1, 0},     {2, {4250, 4250, 0}, 128, 1, 1},
        {1, {9001, 0, 0}, 384, 1, 0},  {2, {96, 96, 0}, 6912, 1, 2},
    };
    /* PDL launch, warps a group, loads a lane ("": the dispatch's choice) */
    static const char *const forms[][3] = {{"0", "", ""},  {"", "", ""},   {"1", "16", "8"}, {"1", "8", "4"},
                                           {"1", "3", "4"}, {"1", "5", "8"}, {"1", "1", "4"}, {"1", "7", "4"}};
    static const char *const vars[3] = {"BITNET_TGEMV_PDL", "BITNET_TGEMV_WARPS", "BITNET_TGEMV_U"};
    size_t i, s, v;
    NEED_GPU();
    for (s = 0; s < sizeof forms / sizeof forms[0]; s++) {
        for (v = 0; v < 3; v++)
            if (forms[s][v][0]) setenv(vars[v], forms[s][v], 1);
            else unsetenv(vars[v]);
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (!small_only() || cases[i].rows[0] * cases[i].k <= 300 * 3200) check_ternary_case(&cases[i]);
    }
    for (v = 0; v < 3; v++) unsetenv(vars[v]);
}

/* M > 8 through each GEMM form: on sm_90 the wgmma kernel with each token tile (BITNET_TGEMM_TN
   64, 96, 128, and the default), K split as the dispatch picks (these shapes have few tiles), over a
   cluster of 3, of 2 (128-token tiles), of 4 (96: parts of one and two 16-token pairs), of 8
   (64-token tiles: half the blocks write no outputs) and not at all (BITNET_TGEMM_SPLIT), and the
   mma.sync kernel (BITNET_TGEMM_WG=0); elsewhere the mma.sync kernel each time. Odd rows and
   tokens, partial token tiles, fused parts, glu, K of one stage and K longer than the ring, a token
   of huge activations. The dispatch takes 64-token tiles for the cases of 130, 257, 300 and 513 tokens. */
static void test_gpu_ternary_gemm(void) {
    static const tcase cases[] = {
        {2, {200, 77, 0}, 640, 13, 0}, {1, {300, 0, 0}, 2560, 130, 0}, {2, {160, 160, 0}, 384, 70, 1},
        {3, {2560, 640, 640}, 2560, 37, 0}, {2, {64, 64, 0}, 512, 9, 1}, {1, {129, 0, 0}, 128, 257, 0},
        {2, {96, 96, 0}, 6912, 300, 1}, {1, {250, 0, 0}, 1280, 513, 0}, {2, {160, 160, 0}, 384, 70, 2},
        {2, {96, 96, 0}, 6912, 300, 2},
    };
    static const tcase huge = {1, {384, 0, 0}, 640, 256, 0}; /* token 0 huge: its tile's epilogue takes the calls */
    static const char *const forms[][3] = {{NULL, NULL, NULL}, {"1", "64", NULL}, {"1", "96", NULL},  {"1", "128", NULL},
                                           {"1", NULL, "3"},   {"1", "128", "2"}, {"1", "96", "4"},   {"1", "64", "8"},
                                           {"1", NULL, "1"},   {"0", NULL, NULL}};
    /* BITNET_TEST_FORM=f: form f alone (racecheck takes over 470 s on all ten, H200) */
    const char *only = getenv("BITNET_TEST_FORM");
    size_t i, f;
    NEED_GPU();
    for (f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        if (only && *only && (size_t)atoi(only) != f) continue;
        if (forms[f][0]) setenv("BITNET_TGEMM_WG", forms[f][0], 1);
        else unsetenv("BITNET_TGEMM_WG");
        if (forms[f][1]) setenv("BITNET_TGEMM_TN", forms[f][1], 1);
        else unsetenv("BITNET_TGEMM_TN");
        if (forms[f][2]) setenv("BITNET_TGEMM_SPLIT", forms[f][2], 1);
        else unsetenv("BITNET_TGEMM_SPLIT");
        for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
            if (!small_only() || cases[i].rows[0] * cases[i].k * cases[i].m <= 200 * 640 * 70) check_ternary_case(&cases[i]);
        if (!small_only()) check_ternary(&huge, 1);
    }
    unsetenv("BITNET_TGEMM_WG"), unsetenv("BITNET_TGEMM_TN"), unsetenv("BITNET_TGEMM_SPLIT");
}

/* Three problems in one batch (one barrier), then the same one twice more: identical results. */
static void test_gpu_ternary_batch_and_repeat_body(void) {
    enum { K = 512, N1 = 100, N2 = 260, M = 3 };
    int8_t *codes = (int8_t *)xmalloc(N2 * K), q[M * K];
    uint8_t *i1 = (uint8_t *)xmalloc(N1 * K / 4 + 32), *i2 = (uint8_t *)xmalloc(N2 * K / 4 + 32);
    float x[M * K], sc[M], r1[M * N1], r2[M * N2], g[M * N2];
    int32_t su[M];
    bitnet_gpu_i2s_part p1, p2;
    bitnet_gpu_ternary w1, w2;
    bitnet_gpu_act a;
    bitnet_gpu_matmul_op ops[3];
    bitnet_devptr o1, o2, o3;
    int rep;
    rand_codes(codes, N1 * K);
    TEST_CHECK(bitnet_i2s_pack(codes, N1, K, 0.7f, i1, N1 * K / 4 + 32) == BITNET_OK);
    rand_codes(codes, N2 * K);
    TEST_CHECK(bitnet_i2s_pack(codes, N2, K, 1.3f, i2, N2 * K / 4 + 32) == BITNET_OK);
    rand_floats(x, M * K, 1.0f);
    TEST_CHECK(bitnet_quantize_act(x, M, K, q, sc, su) == BITNET_OK);
    TEST_CHECK(bitnet_gemm_i2s(i1, N1 * K / 4 + 32, N1, K, q, sc, su, M, r1) == BITNET_OK);
    TEST_CHECK(bitnet_gemm_i2s(i2, N2 * K / 4 + 32, N2, K, q, sc, su, M, r2) == BITNET_OK);
    p1.data = i1, p1.bytes = N1 * K / 4 + 32, p1.n = N1;
    p2.data = i2, p2.bytes = N2 * K / 4 + 32, p2.n = N2;
    TEST_CHECK(bitnet_gpu_ternary_upload(G, &p1, 1, K, 0, &w1) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_ternary_upload(G, &p2, 1, K, 0, &w2) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_act_alloc(G, M, K, &a) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_act_upload(G, &a, q, sc, su, M) == BITNET_OK);
    o1 = poisoned(sizeof r1), o2 = poisoned(sizeof r2), o3 = poisoned(sizeof r2);
    memset(ops, 0, sizeof ops);
    ops[0].w = &w1, ops[0].a = &a, ops[0].out = o1, ops[0].out_type = BITNET_PRECISION_FP32;
    ops[1].w = &w2, ops[1].a = &a, ops[1].out = o2, ops[1].out_type = BITNET_PRECISION_AUTO;
    ops[2] = ops[1], ops[2].out = o3;
    for (rep = 0; rep < 3; rep++) {
        TEST_CHECKF(bitnet_gpu_ternary_matmul_batch(G, ops, 3) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECK(bitnet_gpu_download(G, g, o1, sizeof r1) == BITNET_OK && memcmp(g, r1, sizeof r1) == 0);
        TEST_CHECK(bitnet_gpu_download(G, g, o2, sizeof r2) == BITNET_OK && memcmp(g, r2, sizeof r2) == 0);
        TEST_CHECK(bitnet_gpu_download(G, g, o3, sizeof r2) == BITNET_OK && memcmp(g, r2, sizeof r2) == 0);
    }
    ops[1].a = NULL; /* checked before anything runs */
    TEST_CHECK(bitnet_gpu_ternary_matmul_batch(G, ops, 3) == BITNET_ERR_NULL_POINTER);
    bitnet_gpu_free(G, o1), bitnet_gpu_free(G, o2), bitnet_gpu_free(G, o3);
    bitnet_gpu_act_free(G, &a);
    bitnet_gpu_ternary_free(G, &w1), bitnet_gpu_ternary_free(G, &w2);
    free(codes), free(i1), free(i2);
}
static void test_gpu_ternary_batch_and_repeat(void) { /* the GPU check first, so a skip allocates nothing */
    NEED_GPU();
    test_gpu_ternary_batch_and_repeat_body();
}

static void test_gpu_upload_errors(void) {
    enum { N = 40, K = 256 };
    int8_t codes[N * K];
    uint8_t i2s[N * K / 4 + 32];
    bitnet_gpu_i2s_part p[2];
    bitnet_gpu_ternary w;
    bitnet_gpu_act a;
    NEED_GPU();
    rand_codes(codes, N * K);
    TEST_CHECK(bitnet_i2s_pack(codes, N, K, 1.0f, i2s, sizeof i2s) == BITNET_OK);
    p[0].data = i2s, p[0].bytes = sizeof i2s, p[0].n = N;
    p[1] = p[0];
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 1, 200, 0, &w) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 0, K, 0, &w) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 1, K, 1, &w) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 2, K, 3, &w) == BITNET_ERR_INVALID_ARG); /* glu: 0 or a bitnet_ffn_act */
    p[1].n = N - 1;
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 2, K, 1, &w) == BITNET_ERR_BAD_SHAPE);
    p[0].bytes = 10;
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 1, K, 0, &w) == BITNET_ERR_BAD_SIZE);
    p[0].bytes = sizeof i2s;
    i2s[77] |= 0xC0; /* code 3 */
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 1, K, 0, &w) == BITNET_ERR_CORRUPT);
    TEST_CHECK(strstr(bitnet_last_error(), "code 3") != NULL);
    TEST_CHECK(w.data == 0);
    i2s[77] &= 0x3F;
    TEST_CHECK(bitnet_gpu_ternary_upload(G, p, 1, K, 0, &w) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_act_alloc(G, 2, 128, &a) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_act_upload(G, &a, NULL, NULL, NULL, 1) == BITNET_ERR_NULL_POINTER);
    {
        int8_t q[3 * 128] = {0};
        float sc[3] = {1, 1, 1};
        int32_t su[3] = {0};
        TEST_CHECK(bitnet_gpu_act_upload(G, &a, q, sc, su, 3) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_gpu_act_upload(G, &a, q, sc, su, 0) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_gpu_act_upload(G, &a, q, sc, su, 1) == BITNET_OK && a.m == 1);
    }
    TEST_CHECK(bitnet_gpu_ternary_matmul(G, &w, &a, 16, BITNET_PRECISION_FP32, 0) == BITNET_ERR_BAD_SHAPE);
    bitnet_gpu_act_free(G, &a);
    bitnet_gpu_ternary_free(G, &w);
}

/* ---- GPU: dense matmul, conversions, metrics ------------------------------------------------- */

static void test_gpu_dense(void) {
    static const size_t shapes[][3] = {{1, 37, 64}, {3, 300, 2560}, {8, 1000, 776}, {70, 129, 264}, {256, 300, 1024}};
    size_t s;
    int ti;
    NEED_GPU();
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (ti = 1; ti <= 3; ti++) {
            if (small_only() && shapes[s][0] * shapes[s][1] * shapes[s][2] > 8 * 1000 * 776) continue;
            bitnet_precision p = (bitnet_precision)ti;
            size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], es = ti == 1 ? 4 : 2, i, j, c;
            float *w = (float *)xmalloc(n * k * 4), *x = (float *)xmalloc(m * k * 4), *got = (float *)xmalloc(m * n * 4);
            void *wd = xmalloc(n * k * es), *xd = xmalloc(m * k * es);
            double num = 0, den = 0;
            bitnet_devptr dw, dx, out;
            int finite = 1;
            rand_floats(w, n * k, 1.0f);
            rand_floats(x, m * k, 1.0f);
            for (i = 0; i < n * k; i++) {
                if (ti == 1) ((float *)wd)[i] = w[i];
                else ((uint16_t *)wd)[i] = to16(w[i], p), w[i] = from16(((uint16_t *)wd)[i], p);
            }
            for (i = 0; i < m * k; i++) {
                if (ti == 1) ((float *)xd)[i] = x[i];
                else ((uint16_t *)xd)[i] = to16(x[i], p), x[i] = from16(((uint16_t *)xd)[i], p);
            }
            dw = upload(wd, n * k * es), dx = upload(xd, m * k * es), out = poisoned(m * n * 4);
            TEST_CHECKF(bitnet_gpu_matmul(G, p, dw, dx, m, n, k, out, BITNET_PRECISION_FP32) == BITNET_OK, "%s", bitnet_last_error());
            TEST_CHECK(bitnet_gpu_download(G, got, out, m * n * 4) == BITNET_OK);
            for (i = 0; i < m; i++)
                for (j = 0; j < n; j++) {
                    double r = 0, d;
                    for (c = 0; c < k; c++) r += (double)x[i * k + c] * w[j * k + c];
                    d = got[i * n + j] - r;
                    finite &= isfinite(got[i * n + j]) != 0;
                    num += d * d, den += r * r;
                }
            TEST_CHECKF(finite && sqrt(num / den) < 1e-5, "%s m=%zu n=%zu k=%zu: rel err %.3g", bitnet_precision_name(p), m, n, k,
                        sqrt(num / den));
            bitnet_gpu_free(G, dw), bitnet_gpu_free(G, dx), bitnet_gpu_free(G, out);
            free(w), free(x), free(got), free(wd), free(xd);
        }
    TEST_CHECK(bitnet_gpu_matmul(G, BITNET_PRECISION_FP16, 256, 256, 1, 4, 12, 256, BITNET_PRECISION_FP32) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_gpu_matmul(G, (bitnet_precision)7, 256, 256, 1, 4, 16, 256, BITNET_PRECISION_FP32) == BITNET_ERR_INVALID_ARG);
}

static void test_gpu_convert_and_metrics(void) {
    enum { N = 1029 };
    float x[N], back[N];
    uint16_t h[N];
    bitnet_devptr dx, d16, dback;
    bitnet_gpu_precision_metrics pm;
    int ti, i, bad;
    NEED_GPU();
    rand_floats(x, N, 1000.0f);
    x[0] = INFINITY, x[1] = -INFINITY, x[2] = 0.0f, x[3] = -0.0f, x[4] = 6e-8f, x[5] = 1e-40f, x[6] = 65520.0f, x[7] = NAN;
    dx = upload(x, sizeof x);
    d16 = poisoned(sizeof h), dback = poisoned(sizeof back);
    bitnet_gpu_precision_metrics_reset();
    for (ti = 2; ti <= 3; ti++) {
        bitnet_precision p = (bitnet_precision)ti;
        TEST_CHECK(bitnet_gpu_convert(G, dx, BITNET_PRECISION_FP32, d16, p, N) == BITNET_OK);
        TEST_CHECK(bitnet_gpu_convert(G, d16, p, dback, BITNET_PRECISION_FP32, N) == BITNET_OK);
        TEST_CHECK(bitnet_gpu_download(G, h, d16, sizeof h) == BITNET_OK && bitnet_gpu_download(G, back, dback, sizeof back) == BITNET_OK);
        for (i = 0, bad = 0; i < N; i++) {
            if (x[i] != x[i]) bad += !isnan(from16(h[i], p)) || !isnan(back[i]);
            else {
                float f = from16(h[i], p);
                bad += h[i] != to16(x[i], p) || memcmp(&back[i], &f, 4) != 0;
            }
        }
        TEST_CHECKF(bad == 0, "%s: %d of %d differ", bitnet_precision_name(p), bad, N);
    }
    TEST_CHECK(bitnet_gpu_precision_metrics_get(BITNET_PRECISION_FP16, &pm) == BITNET_OK);
    TEST_CHECK(pm.calls == 1 && pm.ops == N && pm.bytes == (uint64_t)N * 6);
    TEST_CHECK(bitnet_gpu_precision_metrics_get(BITNET_PRECISION_FP32, &pm) == BITNET_OK);
    TEST_CHECK(pm.calls == 2 && pm.ops == 2 * N);
    /* a timed dense matmul shows up as operations, bytes and time of its precision */
    TEST_CHECK(bitnet_gpu_set_timing(G, 1) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_matmul(G, BITNET_PRECISION_BF16, d16, d16, 1, 1, 1024, dback, BITNET_PRECISION_FP32) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_sync(G) == BITNET_OK && bitnet_gpu_set_timing(G, 0) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_precision_metrics_get(BITNET_PRECISION_BF16, &pm) == BITNET_OK);
    TEST_CHECKF(pm.calls == 2 && pm.ops == N + 2 * 1024 && pm.ms > 0, "calls %llu ops %llu ms %g", (unsigned long long)pm.calls,
                (unsigned long long)pm.ops, pm.ms);
    TEST_CHECK(bitnet_gpu_convert(G, dx, BITNET_PRECISION_AUTO, d16, BITNET_PRECISION_FP16, N) == BITNET_ERR_INVALID_ARG);
    bitnet_gpu_free(G, dx), bitnet_gpu_free(G, d16), bitnet_gpu_free(G, dback);
}

static void test_gpu_detect_precision(void) {
    bitnet_gpu_device_info info;
    bitnet_precision p;
    NEED_GPU();
    TEST_CHECK(bitnet_gpu_device_info_get(0, &info) == BITNET_OK);
    p = bitnet_detect_best_precision(0);
    TEST_CHECK(p == (info.cc_major >= 8 ? BITNET_PRECISION_BF16 : info.cc_major >= 6 ? BITNET_PRECISION_FP16 : BITNET_PRECISION_FP32));
}

/* ---- GPU: quantization ----------------------------------------------------------------------- */

static void test_gpu_quantize_ternary_and_pack(void) {
    static const size_t shapes[][2] = {{7, 128}, {300, 640}, {64, 6912}, {1, 128}};
    size_t s;
    NEED_GPU();
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], k = shapes[s][1], nk = n * k, ib = bitnet_i2s_bytes(n, k);
        float *w = (float *)xmalloc(nk * 4), sc = 0, gsc = -1;
        int8_t *q = (int8_t *)xmalloc(nk), *gq = (int8_t *)xmalloc(nk);
        uint8_t *i2 = (uint8_t *)xmalloc(ib), *gi2 = (uint8_t *)xmalloc(ib);
        bitnet_devptr dw, dq, ds, di;
        rand_floats(w, nk, 0.03f);
        if (s == 3) w[5] = NAN; /* the scale becomes 1e-5 and NaN weights give 0 */
        dw = upload(w, nk * 4), dq = poisoned(nk), ds = poisoned(4), di = poisoned(ib);
        TEST_CHECKF(bitnet_gpu_quantize_ternary(G, dw, nk, dq, ds) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECKF(bitnet_gpu_i2s_pack(G, dq, n, k, ds, di) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECK(bitnet_gpu_download(G, gq, dq, nk) == BITNET_OK && bitnet_gpu_download(G, &gsc, ds, 4) == BITNET_OK &&
                   bitnet_gpu_download(G, gi2, di, ib) == BITNET_OK);
        TEST_CHECK(bitnet_quantize_ternary(w, nk, q, &sc) == BITNET_OK && bitnet_i2s_pack(q, n, k, sc, i2, ib) == BITNET_OK);
        TEST_CHECKF(sc == gsc, "n=%zu k=%zu scale %.9g vs %.9g", n, k, (double)gsc, (double)sc);
        TEST_CHECKF(memcmp(q, gq, nk) == 0, "n=%zu k=%zu codes differ", n, k);
        TEST_CHECKF(memcmp(i2, gi2, ib) == 0, "n=%zu k=%zu I2_S bytes differ", n, k);
        if (s == 0) { /* a code outside -1..1 is an error */
            gq[9] = 2;
            TEST_CHECK(bitnet_gpu_upload(G, dq, gq, nk) == BITNET_OK);
            TEST_CHECK(bitnet_gpu_i2s_pack(G, dq, n, k, ds, di) == BITNET_ERR_INVALID_ARG);
        }
        bitnet_gpu_free(G, dw), bitnet_gpu_free(G, dq), bitnet_gpu_free(G, ds), bitnet_gpu_free(G, di);
        free(w), free(q), free(gq), free(i2), free(gi2);
    }
}

/* The quantizer uses the GPU, and falls back to the CPU (same results, counted) when it fails. */
static void test_gpu_quantizer_fallback_body(void) {
    enum { N = 33, K = 384 };
    float *w = (float *)xmalloc(N * K * 4), s1, s2, as1[N], as2[N];
    int8_t *q1 = (int8_t *)xmalloc(N * K), *q2 = (int8_t *)xmalloc(N * K);
    int32_t su1[N], su2[N];
    uint8_t *i1 = (uint8_t *)xmalloc(N * K / 4 + 32), *i2 = (uint8_t *)xmalloc(N * K / 4 + 32);
    bitnet_quantizer *qz = NULL;
    bitnet_quant_stats st;
    char line[1024];
    rand_floats(w, N * K, 0.05f);
    TEST_CHECK(bitnet_quantize_ternary(w, N * K, q2, &s2) == BITNET_OK && bitnet_i2s_pack(q2, N, K, s2, i2, N * K / 4 + 32) == BITNET_OK);
    TEST_CHECK(bitnet_quantizer_create(G, &qz) == BITNET_OK);
    TEST_CHECK(bitnet_quantizer_ternary(qz, w, N * K, q1, &s1) == BITNET_OK && s1 == s2 && memcmp(q1, q2, N * K) == 0);
    TEST_CHECK(bitnet_quantizer_i2s(qz, w, N, K, i1, N * K / 4 + 32) == BITNET_OK && memcmp(i1, i2, N * K / 4 + 32) == 0);
    TEST_CHECK(bitnet_quantizer_act(qz, w, N, K, q1, as1, su1) == BITNET_OK);
    TEST_CHECK(bitnet_quantize_act(w, N, K, q2, as2, su2) == BITNET_OK);
    TEST_CHECK(memcmp(q1, q2, N * K) == 0 && memcmp(as1, as2, sizeof as1) == 0 && memcmp(su1, su2, sizeof su1) == 0);
    TEST_CHECK(bitnet_quantizer_stats(qz, &st) == BITNET_OK && st.gpu_ops == 3 && st.cpu_ops == 0 && st.fallbacks == 0);
    /* the next device allocation fails: the CPU takes over */
    TEST_CHECK(bitnet_set_fault("device_alloc:1") == BITNET_OK);
    memset(i1, 0, N * K / 4 + 32);
    TEST_CHECK(bitnet_quantizer_i2s(qz, w, N, K, i1, N * K / 4 + 32) == BITNET_OK);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
    TEST_CHECK(memcmp(i1, i2, N * K / 4 + 32) == 0);
    TEST_CHECK(bitnet_quantizer_stats(qz, &st) == BITNET_OK);
    TEST_CHECKF(st.gpu_ops == 3 && st.cpu_ops == 1 && st.fallbacks == 1 && st.last_gpu_error[0] && st.cpu_ms[BITNET_QUANT_I2S] > 0,
                "gpu %llu cpu %llu fallbacks %llu", (unsigned long long)st.gpu_ops, (unsigned long long)st.cpu_ops,
                (unsigned long long)st.fallbacks);
    TEST_CHECK(st.host_bytes_total >= (uint64_t)N * K && st.gpu_ms[BITNET_QUANT_TERNARY] > 0);
    TEST_CHECK(bitnet_quantizer_summary(qz, line, sizeof line) == BITNET_OK);
    TEST_CHECKF(strstr(line, "gpu 3 ops") && strstr(line, "cpu 1 ops") && strstr(line, "1 fallback (last gpu error"), "%s", line);
    bitnet_quantizer_free(qz);
    free(w), free(q1), free(q2), free(i1), free(i2);
}
static void test_gpu_quantizer_fallback(void) { /* the GPU check first, so a skip allocates nothing */
    NEED_GPU();
    test_gpu_quantizer_fallback_body();
}

/* ---- GPU: sampling candidates (the forward module's topk) ------------------------------------ */

typedef struct tk_cand { float v; int32_t id; } tk_cand;
static int tk_cmp(const void *pa, const void *pb) { /* the host sampler's order: larger value, then lower id */
    const tk_cand *a = (const tk_cand *)pa, *b = (const tk_cand *)pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* One launch of the topk kernel on blocks blocks of 1024 threads (uni: its draw, without the history;
   pub: where the draw publishes io, or 0) */
static int tk_launch(bitnet_gpu_kernel *kern, unsigned blocks, bitnet_devptr dl, int n, float temp, int k, bitnet_devptr part,
                     bitnet_devptr ctr, bitnet_devptr res, bitnet_devptr uni, int nuni, bitnet_devptr io, bitnet_devptr pub) {
    unsigned grid[3], block[3] = {1024, 1, 1};
    bitnet_devptr no_hist = 0;
    int nhist = 0;
    float f0 = 0.0f; /* min-p, its log and top-p: off */
    void *args[16];
    grid[0] = blocks, grid[1] = grid[2] = 1;
    args[0] = &dl, args[1] = &n, args[2] = &temp, args[3] = &k, args[4] = &part, args[5] = &ctr, args[6] = &res;
    args[7] = &uni, args[8] = &nuni, args[9] = &io, args[10] = &f0, args[11] = &f0, args[12] = &f0, args[13] = &no_hist, args[14] = &nhist;
    args[15] = &pub;
    return bitnet_gpu_launch(G, kern, grid, block, 0, args) == BITNET_OK;
}

/* The k best of logits / temp, NaN left out, against a sort on the host: vocabularies below one
   block's 4096 keys (128 a warp) and over them (more a warp), grids of 1 and 32 blocks,
   many ties, NaN (at index 0 too), infinities and signed zeros. Each result poisoned first; two
   launches in a row (the last block resets the counter). */
static void test_gpu_topk(void) {
    static const int ns[] = {7, 50, 777, 9000, 128256, 140001}, ks[] = {2, 40, 128};
    bitnet_gpu_kernel *kern = NULL;
    int ni, ki, pat, nn = small_only() ? 4 : (int)(sizeof ns / sizeof ns[0]);
    NEED_GPU();
    TEST_CHECKF(bitnet_gpu_builtin_kernel(G, "bitnet_k_fwd_topk", &kern) == BITNET_OK, "%s", bitnet_last_error());
    if (!kern) return;
    for (ni = 0; ni < nn; ni++)
        for (pat = 0; pat < 3; pat++) {
            int n = ns[ni], i;
            float *l = (float *)xmalloc((size_t)n * 4), temp = pat == 1 ? 1.0f : 0.7f;
            tk_cand *ref = (tk_cand *)xmalloc((size_t)n * sizeof *ref);
            int nref = 0;
            bitnet_devptr dl, part = 0, ctr = 0, res = 0;
            for (i = 0; i < n; i++) /* 0: random; 1: few distinct values (ties); 2: random with specials */
                l[i] = pat == 1 ? (float)test_rand_int(-3, 2) : test_rand_float(-20.0f, 20.0f);
            if (pat == 2) {
                l[0] = NAN;
                for (i = 1; i < n; i += 5) {
                    int r = test_rand_int(0, 5);
                    l[i] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : r == 3 ? 0.0f : r == 4 ? -0.0f : l[i];
                }
            }
            for (i = 0; i < n; i++) {
                float v = l[i] / temp;
                if (v == v) ref[nref].v = v, ref[nref++].id = i;
            }
            qsort(ref, (size_t)nref, sizeof *ref, tk_cmp);
            dl = upload(l, (size_t)n * 4);
            TEST_CHECK(dl && bitnet_gpu_alloc(G, 32 * 128 * 8, &part) == BITNET_OK && bitnet_gpu_alloc(G, 4, &ctr) == BITNET_OK &&
                       bitnet_gpu_memset(G, ctr, 0, 4) == BITNET_OK);
            for (ki = 0; ki < (int)(sizeof ks / sizeof ks[0]) && dl && part && ctr; ki++) {
                int k = ks[ki], g, rep;
                for (g = 0; g < 2; g++)
                    for (rep = 0; rep < 2; rep++) {
                        const unsigned blocks = g ? 32u : 1u;
                        int32_t *got = (int32_t *)xmalloc((size_t)(1 + 2 * k) * 4), want = nref < k ? nref : k, bad = 0;
                        res = poisoned((size_t)(1 + 2 * k) * 4);
                        TEST_CHECKF(res && tk_launch(kern, blocks, dl, n, temp, k, part, ctr, res, 0, 0, 0, 0), "%s", bitnet_last_error());
                        TEST_CHECK(bitnet_gpu_download(G, got, res, (size_t)(1 + 2 * k) * 4) == BITNET_OK);
                        for (i = 0; i < k; i++) {
                            float v;
                            memcpy(&v, &got[1 + 2 * i], 4);
                            if (i < want ? !(v == ref[i].v && got[2 + 2 * i] == ref[i].id) : got[2 + 2 * i] != -1) bad++;
                        }
                        TEST_CHECKF(got[0] == want && bad == 0, "n=%d pattern %d k=%d blocks %u launch %d: count %d (want %d), %d of %d differ",
                                    n, pat, k, blocks, rep, (int)got[0], (int)want, (int)bad, k);
                        bitnet_gpu_free(G, res);
                        free(got);
                    }
            }
            if (pat == 1 && nref >= 2 && ref[0].v == ref[1].v && dl && part && ctr) { /* the draw (bf_draw): two tied best, top-k 2 */
                static const double us[3] = {0.0, 0.999999, 0.25};
                int k = 2, c;
                for (c = 0; c < 4; c++) {
                    int32_t io[4] = {-7, 6 - c, 0, 0}, pub[8], poison[4];
                    int nuni = c < 3 ? 1 : 0, slot = (6 - c) & 1;
                    bitnet_devptr du = upload(&us[c < 3 ? c : 0], 8), dio = upload(io, 16), dpub = poisoned(32);
                    res = poisoned((size_t)(1 + 2 * k) * 4);
                    TEST_CHECKF(du && dio && res && dpub && tk_launch(kern, 32, dl, n, temp, k, part, ctr, res, du, nuni, dio, dpub),
                                "%s", bitnet_last_error());
                    TEST_CHECK(bitnet_gpu_download(G, io, dio, 16) == BITNET_OK);
                    /* io published to slot io[1] & 1, the other slot untouched */
                    TEST_CHECK(bitnet_gpu_download(G, pub, dpub, 32) == BITNET_OK);
                    memset(poison, 0xFF, sizeof poison);
                    TEST_CHECKF(memcmp(pub + 4 * slot, io, 16) == 0 && memcmp(pub + 4 * (1 - slot), poison, 16) == 0,
                                "n=%d draw %d: io not published to slot %d", n, c, slot);
                    if (dpub) bitnet_gpu_free(G, dpub);
                    /* equal weights: u 0 and 0.25 draw the first, 0.999999 the second; no uniform left: token 0, flag */
                    if (c < 3)
                        TEST_CHECKF(io[0] == ref[c == 1].id && io[2] == 1 && io[3] == 0, "n=%d draw %d: token %d (want %d), index %d, flag %d",
                                    n, c, (int)io[0], (int)ref[c == 1].id, (int)io[2], (int)io[3]);
                    else TEST_CHECKF(io[0] == 0 && io[2] == 0 && io[3] == 1, "n=%d no uniform: token %d, flag %d", n, (int)io[0], (int)io[3]);
                    if (du) bitnet_gpu_free(G, du);
                    if (dio) bitnet_gpu_free(G, dio);
                    if (res) bitnet_gpu_free(G, res);
                }
            }
            if (dl) bitnet_gpu_free(G, dl);
            if (part) bitnet_gpu_free(G, part);
            if (ctr) bitnet_gpu_free(G, ctr);
            free(l), free(ref);
        }
}

/* ---- GPU: the logit adjustments (the forward module's penalize) ------------------------------- */

/* Logits after the logit bias and the penalties against the host's rule (the bias in order, then each
   distinct in-range id of the window once: the repetition penalty, minus count * freq + pres):
   vocabularies of 777 and 140001, histories full of repeats and ids out of range, windows of 1, 64,
   4096 and past the history, the window's end from io or from n, penalties above and below 1, with
   and without the frequency / presence penalties and the bias (a repeated id among its entries).
   The scratch bits start as garbage, the counts at zero; each case launches twice on the same
   scratch, and the counts must be zero again after each launch. */
static void test_gpu_penalize(void) {
    static const int nvs[] = {777, 140001}, wins[] = {1, 64, 4096, 9000}, NH = 6000;
    bitnet_gpu_kernel *kern = NULL;
    int vi, wi, c;
    NEED_GPU();
    TEST_CHECKF(bitnet_gpu_builtin_kernel(G, "bitnet_k_fwd_penalize", &kern) == BITNET_OK, "%s", bitnet_last_error());
    if (!kern) return;
    for (vi = 0; vi < 2; vi++)
        for (wi = 0; wi < 4; wi++)
            for (c = 0; c < 3; c++) {
                int nv = nvs[vi], win = wins[wi], n = c ? NH : NH - 123, e, b, i, rep, bad = 0, badc = 0, n_bias = c ? 5 : 0;
                int32_t *hist = (int32_t *)xmalloc((size_t)NH * 4), io[4] = {0, NH - 7, 0, 0}, bias_id[5];
                float *l = (float *)xmalloc((size_t)nv * 4), *want = (float *)xmalloc((size_t)nv * 4);
                float *got = (float *)xmalloc((size_t)nv * 4), pen = c == 0 ? 1.3f : c == 1 ? 0.8f : 1.0f;
                float freq = c == 1 ? 0.35f : 0.0f, pres = c == 1 ? 0.2f : c == 2 ? -0.5f : 0.0f, bias[5] = {1.5f, -2.25f, -INFINITY, 0.5f, 3.0f};
                int32_t *cnt = (int32_t *)calloc((size_t)nv, 4), *cnt_got = (int32_t *)xmalloc((size_t)nv * 4);
                bitnet_devptr dl, dh, dio = 0, bits = poisoned(((size_t)nv + 31) / 32 * 4), nul = 0, dcnt, dbid, dbias;
                unsigned grid[3] = {1, 1, 1}, block[3] = {256, 1, 1};
                void *args[14];
                for (i = 0; i < nv; i++) l[i] = test_rand_float(-8.0f, 8.0f);
                for (i = 0; i < NH; i++) { /* ids from a small range (many repeats), a few out of range */
                    int r = test_rand_int(0, 49);
                    hist[i] = r == 0 ? -1 : r == 1 ? nv : r == 2 ? nv - 1 : test_rand_int(0, 299);
                }
                for (i = 0; i < 5; i++) bias_id[i] = i == 3 ? bias_id[0] : test_rand_int(0, 350); /* (entry 3 repeats entry 0's id) */
                memcpy(want, l, (size_t)nv * 4);
                for (i = 0; i < n_bias; i++) want[bias_id[i]] += bias[i];
                e = c ? io[1] : n, b = e - win > 0 ? e - win : 0;
                for (i = b; i < e; i++)
                    if (hist[i] >= 0 && hist[i] < nv) cnt[hist[i]]++;
                for (i = b; i < e; i++) {
                    int id = hist[i];
                    volatile float t;
                    if (id < 0 || id >= nv || cnt[id] < 0) continue;
                    if (pen != 1.0f) want[id] = want[id] > 0.0f ? want[id] / pen : want[id] * pen;
                    if (freq != 0.0f || pres != 0.0f) t = (float)(freq != 0.0f ? cnt[id] : 1) * freq, want[id] -= t + pres;
                    cnt[id] = -1; /* (taken) */
                }
                memset(cnt, 0, (size_t)nv * 4);
                dh = upload(hist, (size_t)NH * 4);
                dcnt = upload(cnt, (size_t)nv * 4), dbid = upload(bias_id, sizeof bias_id), dbias = upload(bias, sizeof bias);
                if (c) dio = upload(io, 16);
                for (rep = 0; rep < 2; rep++) {
                    dl = upload(l, (size_t)nv * 4);
                    args[0] = &dl, args[1] = &dh, args[2] = &n, args[3] = c ? &dio : &nul, args[4] = &win, args[5] = &nv;
                    args[6] = &pen, args[7] = &bits, args[8] = &freq, args[9] = &pres, args[10] = &dcnt, args[11] = &dbid, args[12] = &dbias;
                    args[13] = &n_bias;
                    TEST_CHECKF(dl && dh && bits && dcnt && (!c || dio) && bitnet_gpu_launch(G, kern, grid, block, 0, args) == BITNET_OK, "%s",
                                bitnet_last_error());
                    TEST_CHECK(bitnet_gpu_download(G, got, dl, (size_t)nv * 4) == BITNET_OK);
                    TEST_CHECK(bitnet_gpu_download(G, cnt_got, dcnt, (size_t)nv * 4) == BITNET_OK);
                    for (i = 0; i < nv; i++) bad += memcmp(&got[i], &want[i], 4) != 0, badc += cnt_got[i] != 0;
                    if (dl) bitnet_gpu_free(G, dl);
                }
                TEST_CHECKF(bad == 0 && badc == 0, "vocabulary %d window %d case %d (%s): %d logits differ, %d counts left", nv, win, c,
                            c ? "end from io" : "end n", bad, badc);
                if (dh) bitnet_gpu_free(G, dh);
                if (dio) bitnet_gpu_free(G, dio);
                if (bits) bitnet_gpu_free(G, bits);
                if (dcnt) bitnet_gpu_free(G, dcnt);
                if (dbid) bitnet_gpu_free(G, dbid);
                if (dbias) bitnet_gpu_free(G, dbias);
                free(hist), free(l), free(want), free(got), free(cnt), free(cnt_got);
            }
}

int main(void) {
    (void)test_rand_u64;
    test_seed(20261122);
    /* Never the user's cache; a fixed folder, so the repeated suite runs of CI compile once. */
    if (!getenv("BITNET_CACHE_DIR")) setenv("BITNET_CACHE_DIR", "/tmp/bitnet-test-gpu-kernels-cache", 1);
    RUN_TEST(test_names_and_validation);
    RUN_TEST(test_quantizer_cpu_only);
    RUN_TEST(test_nvrtc_modules);
    gpu_ok = bitnet_gpu_available() && bitnet_gpu_open(0, &G) == BITNET_OK;
    if (!gpu_ok) bitnet_gpu_preflight(gpu_reason, sizeof gpu_reason);
    RUN_TEST(test_gpu_quantize_act);
    RUN_TEST(test_gpu_rms_near_ties);
    RUN_TEST(test_gpu_decode_gemv_prologue);
    RUN_TEST(test_gpu_ternary_gemv);
    RUN_TEST(test_gpu_ternary_gemv_splits);
    RUN_TEST(test_gpu_ternary_gemm);
    RUN_TEST(test_gpu_ternary_batch_and_repeat);
    RUN_TEST(test_gpu_upload_errors);
    RUN_TEST(test_gpu_dense);
    RUN_TEST(test_gpu_convert_and_metrics);
    RUN_TEST(test_gpu_detect_precision);
    RUN_TEST(test_gpu_quantize_ternary_and_pack);
    RUN_TEST(test_gpu_quantizer_fallback);
    RUN_TEST(test_gpu_topk);
    RUN_TEST(test_gpu_penalize);
    if (gpu_ok) bitnet_gpu_close(G);
    return test_summary();
}
