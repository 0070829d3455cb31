/* Non-ternary CPU math on every available path against the scalar reference, on random inputs
   of odd sizes: activation quantization and the fused RMSNorm + quantization (bit-identical),
   RMSNorm, softmax, fp32 GEMM and the fp16 GEMV (within the tolerances documented in >>cpu-math),
   plus the error paths. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <stdint.h>

static const size_t sizes[] = {1, 3, 15, 17, 127, 129, 2560, 6912};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
#define MAXK 6912

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* The paths to compare: every ISA this CPU and build can run except scalar (the reference). */
static int simd_isas(bitnet_isa *list) {
    int n = 0, i;
    for (i = BITNET_ISA_SCALAR + 1; i <= BITNET_ISA_NEON; i++)
        if (bitnet_cpu_has_isa((bitnet_isa)i)) list[n++] = (bitnet_isa)i;
    return n;
}
static void use_isa(bitnet_isa isa) { TEST_CHECK(bitnet_cpu_set_isa(isa) == BITNET_OK); }

/* Random activations with a spread of magnitudes (a few outliers, like real hidden states). */
static void fill_act(float *x, size_t n, float scale) {
    size_t i;
    for (i = 0; i < n; i++) {
        x[i] = test_rand_float(-1.0f, 1.0f) * scale;
        if (test_rand_int(0, 50) == 0) x[i] *= 20.0f;
    }
}

static void test_quantize_act_bit_identical(void) {
    static float x[3 * MAXK];
    static int8_t q0[3 * MAXK], q1[3 * MAXK + 1];
    float s0[3], s1[3];
    int32_t u0[3], u1[3];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = simd_isas(isas), t;
    size_t si;
    if (!ni) TEST_SKIP("no SIMD path on this CPU/build");
    test_seed(21);
    for (si = 0; si < N_SIZES; si++) {
        size_t k = sizes[si], m = 3;
        fill_act(x, m * k, si % 2 ? 3.0f : 0.01f);
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_quantize_act(x, m, k, q0, s0, u0) == BITNET_OK);
        for (t = 0; t < ni; t++) {
            size_t i;
            use_isa(isas[t]);
            memset(q1, 0x55, sizeof q1);
            TEST_CHECK(bitnet_quantize_act(x, m, k, q1, s1, u1) == BITNET_OK);
            TEST_CHECKF(memcmp(q0, q1, m * k) == 0, "%s k=%zu: q differs", bitnet_isa_name(isas[t]), k);
            TEST_CHECKF(q1[m * k] == 0x55, "%s k=%zu wrote past q", bitnet_isa_name(isas[t]), k);
            for (i = 0; i < m; i++) {
                TEST_CHECKF(f2u(s0[i]) == f2u(s1[i]), "%s k=%zu row %zu: scale %g vs %g", bitnet_isa_name(isas[t]), k, i, s0[i], s1[i]);
                TEST_CHECKF(u0[i] == u1[i], "%s k=%zu row %zu: sum %d vs %d", bitnet_isa_name(isas[t]), k, i, u0[i], u1[i]);
            }
            /* sum may be NULL */
            TEST_CHECK(bitnet_quantize_act(x, m, k, q1, s1, NULL) == BITNET_OK);
            TEST_CHECK(memcmp(q0, q1, m * k) == 0);
        }
    }
    use_isa(BITNET_ISA_AUTO);
}

/* NaN, +-Inf, all-zero rows, exact halfway products and values past the clamp, on every path:
   hand-checked on the reference, then bit for bit on the others. */
static void test_quantize_act_special_values(void) {
    enum { K = 77 };
    static float x[4 * K];
    int8_t q0[4 * K], q1[4 * K];
    float s0[4], s1[4];
    int32_t u0[4], u1[4];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = simd_isas(isas), t, i;
    /* row 0: max|x| = 127 makes the scale exactly 1, so every x.5 below is an exact tie */
    for (i = 0; i < K; i++) x[i] = (float)((i % 19) - 9) * 0.5f;
    x[40] = 127.0f;
    x[41] = -127.0f;
    x[42] = 126.5f;  /* -> 126 */
    x[43] = -125.5f; /* -> -126 */
    x[44] = 2.5f;    /* -> 2 */
    /* row 1: NaN and a tiny max: NaN -> 0; max|x| under 1e-5 uses 1e-5 */
    for (i = 0; i < K; i++) x[K + i] = (i % 5 == 0) ? NAN : 1e-7f * (float)(i % 3);
    /* row 2: all zero */
    for (i = 0; i < K; i++) x[2 * K + i] = 0.0f;
    /* row 3: +-Inf (the scale becomes 0; Inf * 0 is NaN -> 0) among finite values */
    for (i = 0; i < K; i++) x[3 * K + i] = (float)i - 30.0f;
    x[3 * K + 7] = INFINITY;
    x[3 * K + 70] = -INFINITY;
    use_isa(BITNET_ISA_SCALAR);
    TEST_CHECK(bitnet_quantize_act(x, 4, K, q0, s0, u0) == BITNET_OK);
    TEST_CHECK(s0[0] == 1.0f);
    for (i = 0; i < K; i++) TEST_CHECKF(q0[i] == (int)nearbyintf(x[i]), "x=%g -> %d", x[i], q0[i]);
    TEST_CHECK(q0[42] == 126 && q0[43] == -126 && q0[44] == 2 && q0[1] == -4 && q0[2] == -4); /* -4.0, -3.5 */
    TEST_CHECK(s0[1] == 127.0f / 1e-5f && q0[K] == 0 && u0[2] == 0 && s0[2] == 127.0f / 1e-5f);
    TEST_CHECK(s0[3] == 0.0f && u0[3] == 0);
    for (t = 0; t < ni; t++) {
        use_isa(isas[t]);
        TEST_CHECK(bitnet_quantize_act(x, 4, K, q1, s1, u1) == BITNET_OK);
        TEST_CHECKF(memcmp(q0, q1, sizeof q0) == 0, "%s: q differs", bitnet_isa_name(isas[t]));
        for (i = 0; i < 4; i++)
            TEST_CHECKF(f2u(s0[i]) == f2u(s1[i]) && u0[i] == u1[i], "%s row %d", bitnet_isa_name(isas[t]), i);
    }
    use_isa(BITNET_ISA_AUTO);
}

static void test_rmsnorm_every_isa(void) {
    static float x[3 * MAXK], w[MAXK], o0[3 * MAXK], o1[3 * MAXK + 1];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = simd_isas(isas), t;
    size_t si, i;
    double worst = 0;
    if (!ni) TEST_SKIP("no SIMD path on this CPU/build");
    test_seed(22);
    for (si = 0; si < N_SIZES; si++) {
        size_t k = sizes[si], m = 3;
        fill_act(x, m * k, 2.0f);
        for (i = 0; i < k; i++) w[i] = test_rand_float(0.5f, 1.5f);
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_rmsnorm(x, w, m, k, 1e-5f, o0) == BITNET_OK);
        for (t = 0; t < ni; t++) {
            use_isa(isas[t]);
            o1[m * k] = 12345.0f;
            TEST_CHECK(bitnet_rmsnorm(x, w, m, k, 1e-5f, o1) == BITNET_OK);
            TEST_CHECK(o1[m * k] == 12345.0f);
            for (i = 0; i < m * k; i++) {
                double d = fabs((double)o1[i] - o0[i]);
                if (d / (fabs(o0[i]) + 1e-30) > worst) worst = d / (fabs(o0[i]) + 1e-30);
                if (!(d <= 1e-6 * fabs(o0[i]))) {
                    TEST_CHECKF(0, "%s k=%zu i=%zu: %.9g vs %.9g", bitnet_isa_name(isas[t]), k, i, o1[i], o0[i]);
                    break;
                }
            }
            /* in place (out aliases x) gives the same */
            memcpy(o1, x, m * k * sizeof(float));
            TEST_CHECK(bitnet_rmsnorm(o1, w, m, k, 1e-5f, o1) == BITNET_OK);
            for (i = 0; i < m * k; i++)
                if (!(fabs((double)o1[i] - o0[i]) <= 1e-6 * fabs(o0[i]))) { TEST_CHECKF(0, "in place i=%zu", i); break; }
        }
    }
    printf("  worst relative difference %.3g\n", worst);
    /* the reference itself against double math: mean(x^2) of {3, 4} is 12.5 */
    {
        float a[2] = {3.0f, 4.0f}, ww[2] = {1.0f, 2.0f}, o[2];
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_rmsnorm(a, ww, 1, 2, 0.0f, o) == BITNET_OK);
        TEST_CHECK(fabs(o[0] - 3.0 / sqrt(12.5)) < 1e-6 && fabs(o[1] - 8.0 / sqrt(12.5)) < 1e-6);
    }
    use_isa(BITNET_ISA_AUTO);
}

/* The fused path equals bitnet_rmsnorm then bitnet_quantize_act, bit for bit, on every path. */
static void test_rmsnorm_quantize_fused(void) {
    static float x[2 * MAXK], w[MAXK], y[2 * MAXK];
    static int8_t q0[2 * MAXK], q1[2 * MAXK];
    float s0[2], s1[2];
    int32_t u0[2], u1[2];
    int i;
    size_t si, j;
    test_seed(23);
    for (i = BITNET_ISA_SCALAR; i <= BITNET_ISA_NEON; i++) {
        if (!bitnet_cpu_has_isa((bitnet_isa)i)) continue;
        use_isa((bitnet_isa)i);
        for (si = 0; si < N_SIZES; si++) {
            size_t k = sizes[si], m = 2;
            fill_act(x, m * k, 5.0f);
            for (j = 0; j < k; j++) w[j] = test_rand_float(-2.0f, 2.0f);
            if (si == 3) x[5] = NAN; /* a NaN poisons its row's RMS: both give q = 0, scale 127/1e-5 */
            TEST_CHECK(bitnet_rmsnorm(x, w, m, k, 1e-6f, y) == BITNET_OK);
            TEST_CHECK(bitnet_quantize_act(y, m, k, q0, s0, u0) == BITNET_OK);
            TEST_CHECK(bitnet_rmsnorm_quantize(x, w, m, k, 1e-6f, q1, s1, u1) == BITNET_OK);
            TEST_CHECKF(memcmp(q0, q1, m * k) == 0, "%s k=%zu: q differs", bitnet_isa_name((bitnet_isa)i), k);
            for (j = 0; j < m; j++)
                TEST_CHECKF(f2u(s0[j]) == f2u(s1[j]) && u0[j] == u1[j], "%s k=%zu row %zu: scale/sum differ",
                            bitnet_isa_name((bitnet_isa)i), k, j);
            TEST_CHECK(bitnet_rmsnorm_quantize(x, w, m, k, 1e-6f, q1, s1, NULL) == BITNET_OK);
        }
    }
    use_isa(BITNET_ISA_AUTO);
}

static void test_softmax_every_isa(void) {
    static float x[2 * MAXK], o0[2 * MAXK], o1[2 * MAXK];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = simd_isas(isas), t;
    size_t si, i;
    double worst = 0;
    if (!ni) TEST_SKIP("no SIMD path on this CPU/build");
    test_seed(24);
    for (si = 0; si < N_SIZES; si++) {
        size_t k = sizes[si], m = 2;
        double sum = 0;
        for (i = 0; i < m * k; i++) x[i] = test_rand_float(-30.0f, 30.0f);
        if (k > 3) { x[1] = -INFINITY; x[k + 2] = -INFINITY; x[2] = -200.0f; } /* masked and underflowing */
        memcpy(o0, x, m * k * sizeof(float));
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_softmax(o0, m, k) == BITNET_OK);
        for (i = 0; i < k; i++) sum += o0[i];
        TEST_CHECKF(fabs(sum - 1.0) < 1e-5, "k=%zu: reference sums to %.9g", k, sum);
        for (t = 0; t < ni; t++) {
            use_isa(isas[t]);
            memcpy(o1, x, m * k * sizeof(float));
            TEST_CHECK(bitnet_softmax(o1, m, k) == BITNET_OK);
            if (k > 3) TEST_CHECK(o1[1] == 0.0f && o1[k + 2] == 0.0f);
            for (i = 0; i < m * k; i++) {
                double d = fabs((double)o1[i] - o0[i]);
                if (d / (o0[i] + 1e-12) > worst) worst = d / (o0[i] + 1e-12);
                if (!(d <= 2e-6 * fabs(o0[i]) + 1e-12)) {
                    TEST_CHECKF(0, "%s k=%zu i=%zu: %.9g vs %.9g", bitnet_isa_name(isas[t]), k, i, o1[i], o0[i]);
                    break;
                }
            }
        }
    }
    printf("  worst relative difference %.3g\n", worst);
    { /* one vocabulary-sized row (sampling) */
        enum { V = 128256 };
        float *in = (float *)malloc(V * sizeof(float)), *ref = (float *)malloc(V * sizeof(float));
        float *got = (float *)malloc(V * sizeof(float));
        TEST_CHECK(in && ref && got);
        if (in && ref && got) {
            for (i = 0; i < V; i++) in[i] = test_rand_float(-10.0f, 10.0f);
            memcpy(ref, in, V * sizeof(float));
            use_isa(BITNET_ISA_SCALAR);
            TEST_CHECK(bitnet_softmax(ref, 1, V) == BITNET_OK);
            for (t = 0; t < ni; t++) {
                use_isa(isas[t]);
                memcpy(got, in, V * sizeof(float));
                TEST_CHECK(bitnet_softmax(got, 1, V) == BITNET_OK);
                for (i = 0; i < V; i++)
                    if (!(fabs((double)got[i] - ref[i]) <= 2e-6 * fabs(ref[i]) + 1e-12)) {
                        TEST_CHECKF(0, "%s k=%d i=%zu: %.9g vs %.9g", bitnet_isa_name(isas[t]), V, i, got[i], ref[i]);
                        break;
                    }
            }
        }
        free(in);
        free(ref);
        free(got);
    }
    /* the reference: softmax(0, ln 3) = (1/4, 3/4) */
    {
        float a[2] = {0.0f, (float)log(3.0)};
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_softmax(a, 1, 2) == BITNET_OK);
        TEST_CHECK(fabs(a[0] - 0.25) < 1e-6 && fabs(a[1] - 0.75) < 1e-6);
    }
    use_isa(BITNET_ISA_AUTO);
}

/* |got - want| <= 1e-5 * sum |w_c a_c| (the documented GEMM/GEMV tolerance). */
static int close_dot(float got, float want, double absdot) { return fabs((double)got - want) <= 1e-5 * absdot + 1e-30; }

static void test_gemm_f32_every_isa(void) {
    static const size_t shapes[][3] = {/* m, n, k */
        {1, 1, 1}, {1, 3, 15}, {3, 17, 17}, {2, 5, 127}, {5, 9, 129}, {1, 33, 2560}, {4, 7, 6912}, {3, 129, 3}, {7, 6, 1}};
    static float w[33 * 2560 + 129 * 3 + 7 * 6912], a[7 * 6912], o0[129 * 7], o1[129 * 7 + 1];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = simd_isas(isas), t;
    size_t s, i, r, c;
    if (!ni) TEST_SKIP("no SIMD path on this CPU/build");
    test_seed(25);
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (i = 0; i < n * k; i++) w[i] = test_rand_float(-1.0f, 1.0f);
        for (i = 0; i < m * k; i++) a[i] = test_rand_float(-1.0f, 1.0f);
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_gemm_f32(w, n, k, a, m, o0) == BITNET_OK);
        /* the reference against double */
        for (i = 0; i < m; i++)
            for (r = 0; r < n; r++) {
                double d = 0, ad = 0;
                for (c = 0; c < k; c++) { d += (double)w[r * k + c] * a[i * k + c]; ad += fabs((double)w[r * k + c] * a[i * k + c]); }
                TEST_CHECK(fabs(o0[i * n + r] - d) <= 1e-5 * ad + 1e-30);
            }
        for (t = 0; t < ni; t++) {
            use_isa(isas[t]);
            o1[m * n] = 777.0f;
            TEST_CHECK(bitnet_gemm_f32(w, n, k, a, m, o1) == BITNET_OK);
            TEST_CHECK(o1[m * n] == 777.0f);
            for (i = 0; i < m; i++)
                for (r = 0; r < n; r++) {
                    double ad = 0;
                    for (c = 0; c < k; c++) ad += fabs((double)w[r * k + c] * a[i * k + c]);
                    TEST_CHECKF(close_dot(o1[i * n + r], o0[i * n + r], ad), "%s m=%zu n=%zu k=%zu [%zu][%zu]: %.9g vs %.9g",
                                bitnet_isa_name(isas[t]), m, n, k, i, r, o1[i * n + r], o0[i * n + r]);
                }
        }
    }
    use_isa(BITNET_ISA_AUTO);
}

static void test_gemv_f16_every_isa(void) {
    static const size_t shapes[][2] = {{1, 1}, {3, 15}, {17, 17}, {5, 127}, {9, 129}, {33, 2560}, {6, 6912}, {129, 3}};
    static uint16_t w[33 * 2560 + 6 * 6912];
    static float x[6912], o0[129], o1[130];
    int i;
    size_t s, r, c;
    test_seed(26);
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], k = shapes[s][1];
        for (r = 0; r < n * k; r++) w[r] = bitnet_fp32_to_fp16(test_rand_float(-1.0f, 1.0f));
        for (c = 0; c < k; c++) x[c] = test_rand_float(-1.0f, 1.0f);
        use_isa(BITNET_ISA_SCALAR);
        TEST_CHECK(bitnet_gemv_f16(w, n, k, x, o0) == BITNET_OK);
        for (i = BITNET_ISA_SCALAR; i <= BITNET_ISA_NEON; i++) {
            if (!bitnet_cpu_has_isa((bitnet_isa)i)) continue;
            use_isa((bitnet_isa)i);
            o1[n] = 777.0f;
            TEST_CHECK(bitnet_gemv_f16(w, n, k, x, o1) == BITNET_OK);
            TEST_CHECK(o1[n] == 777.0f);
            for (r = 0; r < n; r++) {
                double d = 0, ad = 0;
                for (c = 0; c < k; c++) {
                    double p = (double)bitnet_fp16_to_fp32(w[r * k + c]) * x[c];
                    d += p;
                    ad += fabs(p);
                }
                TEST_CHECKF(close_dot(o1[r], o0[r], ad), "%s n=%zu k=%zu row %zu: %.9g vs %.9g",
                            bitnet_isa_name((bitnet_isa)i), n, k, r, o1[r], o0[r]);
                TEST_CHECKF(close_dot(o1[r], (float)d, ad), "%s n=%zu k=%zu row %zu: %.9g vs double %.9g",
                            bitnet_isa_name((bitnet_isa)i), n, k, r, o1[r], d);
            }
        }
    }
    use_isa(BITNET_ISA_AUTO);
}

static void test_math_errors(void) {
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o[8], s;
    int8_t q[8];
    int32_t sum;
    uint16_t h[8] = {0};
    const size_t big = SIZE_MAX / 2 + 1;
    TEST_CHECK(bitnet_gemm_f32(NULL, 2, 2, f, 2, o) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(strstr(bitnet_last_error(), "'w'") != NULL);
    TEST_CHECK(bitnet_gemm_f32(f, 2, 2, f, 2, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_f32(f, 0, 2, f, 2, o) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_f32(f, 2, 2, f, 0, o) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_f32(f, big, 4, f, 1, o) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_gemm_f32(f, 4, big, f, 1, o) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_rmsnorm(f, NULL, 1, 8, 1e-5f, o) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_rmsnorm(f, f, 0, 8, 1e-5f, o) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_rmsnorm(f, f, big, 4, 1e-5f, o) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_softmax(NULL, 1, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_softmax(f, 1, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_softmax(f, big, 4) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_quantize_act(f, 1, 8, NULL, &s, &sum) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_quantize_act(f, 0, 8, q, &s, &sum) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_quantize_act(f, big, 4, q, &s, &sum) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_rmsnorm_quantize(f, f, 1, 8, 1e-5f, q, NULL, &sum) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_rmsnorm_quantize(NULL, f, 1, 8, 1e-5f, q, &s, &sum) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_rmsnorm_quantize(f, f, 1, 0, 1e-5f, q, &s, &sum) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_rmsnorm_quantize(f, f, big, 4, 1e-5f, q, &s, &sum) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_gemv_f16(NULL, 1, 8, f, o) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemv_f16(h, 1, 8, NULL, o) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemv_f16(h, 0, 8, f, o) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemv_f16(h, big, 2, f, o) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(strstr(bitnet_last_error(), "bitnet_gemv_f16") != NULL);
    /* a path the CPU lacks is refused, and the active path is unchanged */
    {
        bitnet_isa before = bitnet_cpu_isa();
        int i;
        for (i = BITNET_ISA_SCALAR; i <= BITNET_ISA_NEON; i++)
            if (!bitnet_cpu_has_isa((bitnet_isa)i)) {
                TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)i) == BITNET_ERR_UNSUPPORTED_ISA);
                TEST_CHECK(bitnet_cpu_isa() == before);
            }
    }
}

/* bitnet_expf against exp in double over its range, in units in the last place of the float
   result; its clamps; and bitnet_glu: relu(g)^2 * u rounded as before, silu(g) * u near the double
   reference, an unknown activation NaN. */
static double ulps(float got, double want) {
    float w = (float)want;
    double ulp = ldexp(1.0, ilogb(w) - 23);
    return fabs((double)got - want) / ulp;
}
static void test_expf_and_glu(void) {
    double worst = 0, worst_silu = 0;
    int i;
    for (i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double e = ulps(bitnet_expf(x), exp((double)x));
        worst = e > worst ? e : worst;
    }
    TEST_CHECKF(worst <= 2.0, "bitnet_expf: %.2f ulp at worst", worst);
    TEST_CHECK(bitnet_expf(0.0f) == 1.0f);
    TEST_CHECK(bitnet_expf(-1000.0f) == bitnet_expf(-87.0f) && bitnet_expf(-87.0f) > 0.0f);
    TEST_CHECK(bitnet_expf(1000.0f) == bitnet_expf(88.0f) && isfinite(bitnet_expf(INFINITY)));
    TEST_CHECK(bitnet_expf(NAN) == bitnet_expf(-87.0f));
    for (i = 0; i < 200000; i++) {
        float g = test_rand_float(-40.0f, 40.0f), u = test_rand_float(-3.0f, 3.0f), r = g > 0.0f ? g : 0.0f;
        double want = (double)g / (1.0 + exp(-(double)g)) * u;
        float got = bitnet_glu(BITNET_FFN_SILU, g, u);
        TEST_CHECK(bitnet_glu(BITNET_FFN_RELU2, g, u) == r * r * u);
        if (want != 0.0) {
            double e = ulps(got, want);
            worst_silu = e > worst_silu ? e : worst_silu;
        }
    }
    TEST_CHECKF(worst_silu <= 4.0, "silu(g) * u: %.2f ulp at worst", worst_silu);
    TEST_CHECK(bitnet_glu(BITNET_FFN_SILU, 0.0f, 5.0f) == 0.0f);
    TEST_CHECK(bitnet_glu(BITNET_FFN_SILU, 100.0f, 2.0f) == 200.0f);
    TEST_CHECK(fabsf(bitnet_glu(BITNET_FFN_SILU, -100.0f, 1.0f)) < 1e-30f);
    TEST_CHECK(isnan(bitnet_glu(BITNET_FFN_SILU, NAN, 1.0f)) && isnan(bitnet_glu(0, 1.0f, 1.0f)) && isnan(bitnet_glu(3, 1.0f, 1.0f)));
}

int main(void) {
    RUN_TEST(test_quantize_act_bit_identical);
    RUN_TEST(test_quantize_act_special_values);
    RUN_TEST(test_rmsnorm_every_isa);
    RUN_TEST(test_rmsnorm_quantize_fused);
    RUN_TEST(test_softmax_every_isa);
    RUN_TEST(test_gemm_f32_every_isa);
    RUN_TEST(test_gemv_f16_every_isa);
    RUN_TEST(test_math_errors);
    RUN_TEST(test_expf_and_glu);
    return test_summary();
}
