/* Ternary (I2_S) and int8 GEMV/GEMM: every ISA path and thread count against the scalar
   reference, bit for bit; the reference against a naive dot product; ISA and thread-pool
   selection; error paths. */
#define _GNU_SOURCE /* setenv, usleep */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <pthread.h>
#include <unistd.h>

typedef struct {
    size_t n, k, m;
    uint8_t *w;         /* I2_S bytes, or int8 weights for q8 */
    size_t w_bytes;
    float *w_scales;    /* q8 */
    int8_t *q;          /* unpacked ternary weights */
    int8_t *a;
    float *a_scale;
    int32_t *a_sum;
    float *ref, *out;
} problem;

static void problem_free(problem *p) {
    free(p->w); free(p->w_scales); free(p->q); free(p->a); free(p->a_scale); free(p->a_sum); free(p->ref); free(p->out);
    memset(p, 0, sizeof *p);
}

static void fill_act(problem *p) {
    size_t i, c;
    p->a = (int8_t *)malloc(p->m * p->k);
    p->a_scale = (float *)malloc(p->m * sizeof(float));
    p->a_sum = (int32_t *)malloc(p->m * sizeof(int32_t));
    p->ref = (float *)malloc(p->m * p->n * sizeof(float));
    p->out = (float *)malloc(p->m * p->n * sizeof(float));
    for (i = 0; i < p->m; i++) {
        int32_t s = 0;
        for (c = 0; c < p->k; c++) s += p->a[i * p->k + c] = (int8_t)test_rand_int(-128, 127);
        p->a_sum[i] = s;
        p->a_scale[i] = test_rand_float(0.5f, 200.0f);
    }
}

static void make_i2s(problem *p, size_t n, size_t k, size_t m) {
    size_t i;
    memset(p, 0, sizeof *p);
    p->n = n; p->k = k; p->m = m;
    p->w_bytes = bitnet_i2s_bytes(n, k);
    p->w = (uint8_t *)malloc(p->w_bytes);
    p->q = (int8_t *)malloc(n * k);
    for (i = 0; i < n * k; i++) p->q[i] = (int8_t)test_rand_int(-1, 1);
    TEST_CHECK(bitnet_i2s_pack(p->q, n, k, test_rand_float(0.01f, 2.0f), p->w, p->w_bytes) == BITNET_OK);
    fill_act(p);
}

static void make_q8(problem *p, size_t n, size_t k, size_t m) {
    size_t i;
    memset(p, 0, sizeof *p);
    p->n = n; p->k = k; p->m = m;
    p->w = (uint8_t *)malloc(n * k);
    p->w_scales = (float *)malloc(n * sizeof(float));
    for (i = 0; i < n * k; i++) p->w[i] = (uint8_t)test_rand_int(0, 255);
    for (i = 0; i < n; i++) p->w_scales[i] = test_rand_float(0.001f, 0.1f);
    fill_act(p);
}

static bitnet_result run(problem *p, float *out) {
    if (p->w_scales)
        return bitnet_gemm_q8((const int8_t *)p->w, p->w_scales, p->n, p->k, p->a, p->a_scale, p->a_sum, p->m, out);
    return bitnet_gemm_i2s(p->w, p->w_bytes, p->n, p->k, p->a, p->a_scale, p->a_sum, p->m, out);
}

/* The scalar path on one thread gives ref; every available path and thread count must match it
   (AVX-512 twice: with the prefill's AMX form where the CPU has it, and with BITNET_CPU_AMX=0). */
static void check_all_paths(problem *p, const int *threads, int n_threads) {
    int isa, t, amx;
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_SCALAR) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(run(p, p->ref) == BITNET_OK);
    for (isa = BITNET_ISA_SCALAR; isa < BITNET_ISA_COUNT; isa++) {
        if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
        TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)isa) == BITNET_OK);
        for (amx = 0; amx < (isa == BITNET_ISA_AVX512 ? 2 : 1); amx++) {
            if (amx) setenv("BITNET_CPU_AMX", "0", 1);
            for (t = 0; t < n_threads; t++) {
                TEST_CHECK(bitnet_set_num_threads(threads[t]) == BITNET_OK);
                memset(p->out, 0xff, p->m * p->n * sizeof(float));
                TEST_CHECK(run(p, p->out) == BITNET_OK);
                TEST_CHECKF(memcmp(p->out, p->ref, p->m * p->n * sizeof(float)) == 0, "%s%s, %d threads, %s m=%zu n=%zu k=%zu",
                            bitnet_isa_name((bitnet_isa)isa), amx ? " (BITNET_CPU_AMX=0)" : "", threads[t],
                            p->w_scales ? "q8" : "i2s", p->m, p->n, p->k);
            }
            unsetenv("BITNET_CPU_AMX");
        }
    }
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
}

static const int threads_123[3] = {1, 2, 3};
static const int threads_12[2] = {1, 2};

static void check_i2s_shapes(const size_t *ms, int nm, const size_t *ns, int nn, const size_t *ks, int nk, const int *thr,
                             int nthr) {
    int i, j, l;
    for (i = 0; i < nm; i++)
        for (j = 0; j < nn; j++)
            for (l = 0; l < nk; l++) {
                problem p;
                make_i2s(&p, ns[j], ks[l], ms[i]);
                check_all_paths(&p, thr, nthr);
                problem_free(&p);
            }
}

/* The oracle itself: the scalar path equals a naive dot over unpacked weights. */
static void test_scalar_matches_naive(void) {
    problem p;
    size_t i, r, c;
    float ws;
    test_seed(11);
    make_i2s(&p, 37, 384, 5);
    memcpy(&ws, p.w + p.n * p.k / 4, 4);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_SCALAR) == BITNET_OK);
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    for (i = 0; i < p.m; i++)
        for (r = 0; r < p.n; r++) {
            int32_t d = 0;
            for (c = 0; c < p.k; c++) d += p.q[r * p.k + c] * p.a[i * p.k + c];
            TEST_CHECKF(p.out[i * p.n + r] == (float)d / p.a_scale[i] * ws, "i=%zu r=%zu", i, r);
        }
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    problem_free(&p);
}

static void test_i2s_small_shapes(void) {
    const size_t ms[] = {1, 3, 8}, ns[] = {1, 3, 127, 129}, ks[] = {128, 256, 384};
    test_seed(1);
    check_i2s_shapes(ms, 3, ns, 4, ks, 3, threads_12, 2);
}

static void test_i2s_k2560(void) {
    const size_t ms[] = {1, 3, 8}, ns[] = {129, 2560}, ks[] = {2560};
    test_seed(2);
    check_i2s_shapes(ms, 3, ns, 1, ks, 1, threads_123, 3);
    check_i2s_shapes(ms, 3, ns + 1, 1, ks, 1, threads_12, 2);
}

static void test_i2s_k6912(void) {
    const size_t ms[] = {1, 8}, ns[] = {127}, ks[] = {6912};
    test_seed(3);
    check_i2s_shapes(ms, 2, ns, 1, ks, 1, threads_123, 3);
}

static void test_i2s_prefill_m64(void) {
    const size_t ms[] = {64}, ns[] = {129}, ks[] = {2560};
    test_seed(4);
    check_i2s_shapes(ms, 1, ns, 1, ks, 1, threads_123, 3);
}

static void test_i2s_prefill_m129(void) {
    const size_t ms[] = {129}, ns[] = {3, 127}, ks[] = {256};
    test_seed(5);
    check_i2s_shapes(ms, 1, ns, 2, ks, 1, threads_123, 3);
}

/* The AVX-512 prefill path (m >= 32): tiles of 12 rows with tails (32, 41, 46), column
   blocks of 32 with tails (1, 17, 33, 65), and k in one slice of 512, slices with a tail (640),
   and many slices (2304). */
static void test_i2s_prefill_tails(void) {
    const size_t ms[] = {32, 41, 46}, ns[] = {1, 17, 33, 65}, ks[] = {128, 640, 2304};
    test_seed(20);
    check_i2s_shapes(ms, 3, ns, 4, ks, 3, threads_12, 2);
}

/* All-(+1) weights (n x k) with all-(-128) or all-127 activations (m rows): the largest sums a path
   can see; every output equals k times the activation. */
static void check_extremes(size_t n, size_t k, size_t m) {
    problem p;
    size_t i;
    int v;
    for (v = 0; v < 2; v++) {
        make_i2s(&p, n, k, m);
        for (i = 0; i < p.n * p.k; i++) p.q[i] = 1;
        TEST_CHECK(bitnet_i2s_pack(p.q, p.n, p.k, 1.0f, p.w, p.w_bytes) == BITNET_OK);
        for (i = 0; i < p.m * p.k; i++) p.a[i] = (int8_t)(v ? 127 : -128);
        for (i = 0; i < p.m; i++) { p.a_sum[i] = (int32_t)p.k * (v ? 127 : -128); p.a_scale[i] = 1.0f; }
        check_all_paths(&p, threads_12, 2);
        TEST_CHECK(p.ref[0] == (float)((int32_t)p.k * (v ? 127 : -128)));
        TEST_CHECK(p.ref[p.m * p.n - 1] == (float)((int32_t)p.k * (v ? 127 : -128)));
        problem_free(&p);
    }
}

/* The prefill path at the largest sums, and on code-3 bytes. */
static void test_i2s_prefill_extremes(void) {
    problem p;
    test_seed(21);
    check_extremes(33, 6912, 35);
    make_i2s(&p, 35, 1024, 43);
    memset(p.w, 0xFF, p.n * p.k / 4);
    check_all_paths(&p, threads_12, 2);
    problem_free(&p);
}

/* A failed scratch allocation in the prefill path falls back to the tiles: same bits. Without AMX
   the 1st allocation is the packed activations (all of the GEMM falls back), the 2nd and 3rd the
   threads' unpacked blocks (one thread falls back); with AMX (nothing packed) the 1st and 2nd are
   the threads' buffers. Run both ways. */
static void test_i2s_prefill_alloc_failure(void) {
    problem p;
    int f;
    char spec[32];
    test_seed(22);
    make_i2s(&p, 70, 640, 40);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_SCALAR) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(run(&p, p.ref) == BITNET_OK);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(2) == BITNET_OK);
    TEST_CHECK(run(&p, p.out) == BITNET_OK); /* the pool is up before the faults */
    for (f = 1; f <= 6; f++) {
        if (f == 4) setenv("BITNET_CPU_AMX", "0", 1);
        snprintf(spec, sizeof spec, "host_alloc:%d", (f - 1) % 3 + 1);
        memset(p.out, 0xff, p.m * p.n * sizeof(float));
        TEST_CHECK(bitnet_set_fault(spec) == BITNET_OK);
        TEST_CHECK(run(&p, p.out) == BITNET_OK);
        TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
        TEST_CHECKF(memcmp(p.out, p.ref, p.m * p.n * sizeof(float)) == 0, "%s%s", spec, f > 3 ? " (BITNET_CPU_AMX=0)" : "");
    }
    unsetenv("BITNET_CPU_AMX");
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
    problem_free(&p);
}

/* Launches recorded under name since the last reset. */
static uint64_t stat_launches(const char *name) {
    bitnet_kernel_stat ks[64];
    size_t n = 0, i;
    TEST_CHECK(bitnet_kernel_stats(ks, 64, &n) == BITNET_OK);
    for (i = 0; i < n; i++)
        if (strcmp(ks[i].name, name) == 0) return ks[i].launches;
    return 0;
}

/* Prompt-sized GEMMs on AVX-512 take the AMX path exactly where bitnet_cpu_has_amx says the tile
   unit is there (the kernel statistics name the path that ran), and BITNET_CPU_AMX=0 keeps VNNI. */
static void test_i2s_prefill_amx_dispatch(void) {
    problem p;
    if (!bitnet_cpu_has_isa(BITNET_ISA_AVX512)) TEST_SKIP("no AVX-512 path on this CPU or build");
    test_seed(23);
    make_i2s(&p, 40, 256, 48);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AVX512) == BITNET_OK);
    bitnet_kernel_stats_reset();
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECKF(stat_launches("cpu_gemm_i2s_amx") == (uint64_t)(bitnet_cpu_has_amx() ? 1 : 0), "AMX %s, amx launches %llu",
                bitnet_cpu_has_amx() ? "usable" : "not usable", (unsigned long long)stat_launches("cpu_gemm_i2s_amx"));
    setenv("BITNET_CPU_AMX", "0", 1);
    bitnet_kernel_stats_reset();
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECK(stat_launches("cpu_gemm_i2s_amx") == 0 && stat_launches("cpu_gemm_i2s_avx512") == 1);
    unsetenv("BITNET_CPU_AMX");
    p.m = 31; /* below the prompt path */
    bitnet_kernel_stats_reset();
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECK(stat_launches("cpu_gemm_i2s_amx") == 0 && stat_launches("cpu_gemm_i2s_avx512") == 1);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    problem_free(&p);
}

static void test_i2s_gemv_13824x2560(void) {
    const size_t ms[] = {1}, ns[] = {13824}, ks[] = {2560};
    test_seed(6);
    check_i2s_shapes(ms, 1, ns, 1, ks, 1, threads_12, 2);
}

static void test_i2s_gemv_2560x6912(void) {
    const size_t ms[] = {1}, ns[] = {2560}, ks[] = {6912};
    test_seed(7);
    check_i2s_shapes(ms, 1, ns, 1, ks, 1, threads_12, 2);
}

static void test_i2s_extremes(void) {
    test_seed(8);
    check_extremes(5, 6912, 7);
}

/* The largest k of the GEMV fast path (65536) and the first beyond it, at the extreme values. */
static void test_i2s_large_k(void) {
    const size_t ks[2] = {65536, 65536 + 128};
    problem p;
    size_t i;
    int j, m;
    test_seed(18);
    for (j = 0; j < 2; j++)
        for (m = 1; m <= 2; m++) {
            make_i2s(&p, 3, ks[j], (size_t)m);
            for (i = 0; i < p.n * p.k; i++) p.q[i] = (int8_t)(i % 7 ? 1 : -1);
            TEST_CHECK(bitnet_i2s_pack(p.q, p.n, p.k, 0.5f, p.w, p.w_bytes) == BITNET_OK);
            for (i = 0; i < p.m * p.k; i++) p.a[i] = (int8_t)(i % 5 ? -128 : 127);
            for (i = 0; i < p.m; i++) {
                size_t c;
                p.a_sum[i] = 0;
                for (c = 0; c < p.k; c++) p.a_sum[i] += p.a[i * p.k + c];
            }
            check_all_paths(&p, threads_12, 2);
            problem_free(&p);
        }
}

/* Code 3 is not a ternary weight, but every path must still agree with the reference on it. */
static void test_i2s_code3_bytes(void) {
    problem p;
    test_seed(19);
    make_i2s(&p, 9, 1024, 3);
    memset(p.w, 0xFF, p.n * p.k / 4);
    check_all_paths(&p, threads_12, 2);
    problem_free(&p);
}

/* Weights and activations at odd addresses. */
static void test_i2s_unaligned(void) {
    problem p;
    uint8_t *wbuf;
    int8_t *abuf;
    int isa;
    test_seed(9);
    make_i2s(&p, 67, 640, 5);
    wbuf = (uint8_t *)malloc(p.w_bytes + 1);
    abuf = (int8_t *)malloc(p.m * p.k + 3);
    memcpy(wbuf + 1, p.w, p.w_bytes);
    memcpy(abuf + 3, p.a, p.m * p.k);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_SCALAR) == BITNET_OK);
    TEST_CHECK(run(&p, p.ref) == BITNET_OK);
    for (isa = BITNET_ISA_SCALAR; isa < BITNET_ISA_COUNT; isa++) {
        if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
        TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)isa) == BITNET_OK);
        TEST_CHECK(bitnet_gemm_i2s(wbuf + 1, p.w_bytes, p.n, p.k, abuf + 3, p.a_scale, p.a_sum, p.m, p.out) == BITNET_OK);
        TEST_CHECKF(memcmp(p.out, p.ref, p.m * p.n * sizeof(float)) == 0, "%s", bitnet_isa_name((bitnet_isa)isa));
    }
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    free(wbuf);
    free(abuf);
    problem_free(&p);
}

static void test_q8_shapes(void) {
    const size_t ks[] = {1, 15, 16, 31, 33, 63, 64, 65, 127, 129, 200, 2560};
    const size_t ns[] = {1, 3, 5, 127};
    const size_t ms[] = {1, 2, 3, 7};
    int i, j, l;
    test_seed(10);
    for (i = 0; i < 12; i++)
        for (j = 0; j < 4; j++)
            for (l = 0; l < 4; l++) {
                problem p;
                make_q8(&p, ns[j], ks[i], ms[l]);
                check_all_paths(&p, threads_12, 2);
                problem_free(&p);
            }
}

static void test_q8_lm_head(void) {
    problem p;
    test_seed(12);
    make_q8(&p, 1031, 2560, 1);
    check_all_paths(&p, threads_123, 3);
    problem_free(&p);
    make_q8(&p, 515, 2560, 9);
    check_all_paths(&p, threads_12, 2);
    problem_free(&p);
}

/* -128 x -128 over the largest k: the dot is 2^30, exact in every path. */
static void test_q8_extremes(void) {
    problem p;
    size_t i;
    test_seed(13);
    make_q8(&p, 2, 65536, 2);
    memset(p.w, 0x80, p.n * p.k);
    for (i = 0; i < p.m * p.k; i++) p.a[i] = (int8_t)(i < p.k ? -128 : 127);
    p.a_sum[0] = -128 * 65536;
    p.a_sum[1] = 127 * 65536;
    p.a_scale[0] = p.a_scale[1] = 1.0f;
    p.w_scales[0] = p.w_scales[1] = 1.0f;
    check_all_paths(&p, threads_12, 2);
    TEST_CHECK(p.ref[0] == 1073741824.0f);
    TEST_CHECK(p.ref[2] == -128.0f * 127.0f * 65536.0f);
    problem_free(&p);
}

static void test_gemm_errors(void) {
    uint8_t w[64 + 32];
    int8_t a[256], wq[256];
    float s[2] = {1, 1}, out[4];
    int32_t sum[2] = {0, 0};
    memset(w, 0x55, sizeof w);
    memset(a, 1, sizeof a);
    memset(wq, 1, sizeof wq);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 127, a, s, sum, 1, out) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(strstr(bitnet_last_error(), "127") != NULL);
    TEST_CHECK(bitnet_gemm_i2s(NULL, sizeof w, 1, 128, a, s, sum, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, NULL, s, sum, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, a, NULL, sum, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, a, s, NULL, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, a, s, sum, 1, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_i2s(w, 63, 1, 128, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);      /* short buffer */
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 3, 128, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE); /* 3 rows need 128 */
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, a, s, sum, 0, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 0, 128, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_i2s(w, SIZE_MAX, 1, (size_t)1 << 23, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_i2s(w, SIZE_MAX, SIZE_MAX / 64, 128, a, s, sum, 1, out) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_gemm_i2s(w, SIZE_MAX, 1, 128, a, s, sum, SIZE_MAX / 64, out) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_gemm_i2s(w, sizeof w, 1, 128, a, s, sum, 1, out) == BITNET_OK);
    TEST_CHECK(bitnet_gemm_q8(NULL, s, 1, 128, a, s, sum, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_q8(wq, NULL, 1, 128, a, s, sum, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_q8(wq, s, 1, 128, a, s, NULL, 1, out) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gemm_q8(wq, s, 0, 128, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_q8(wq, s, 1, 0, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_q8(wq, s, 1, 128, a, s, sum, 0, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_q8(wq, s, 1, 65537, a, s, sum, 1, out) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gemm_q8(wq, s, SIZE_MAX / 64, 128, a, s, sum, 1, out) == BITNET_ERR_OVERFLOW);
    sum[0] = 128;
    TEST_CHECK(bitnet_gemm_q8(wq, s, 2, 128, a, s, sum, 1, out) == BITNET_OK);
    TEST_CHECK(out[0] == 128.0f && out[1] == 128.0f);
}

static void test_isa_selection(void) {
    int isa;
    TEST_CHECK(bitnet_cpu_has_isa(BITNET_ISA_SCALAR) == 1);
    TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)99) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)-1) == BITNET_ERR_INVALID_ARG);
    for (isa = BITNET_ISA_SCALAR; isa < BITNET_ISA_COUNT; isa++) {
        if (bitnet_cpu_has_isa((bitnet_isa)isa)) {
            TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)isa) == BITNET_OK);
            TEST_CHECK(bitnet_cpu_isa() == (bitnet_isa)isa);
        } else {
            TEST_CHECK(bitnet_cpu_set_isa((bitnet_isa)isa) == BITNET_ERR_UNSUPPORTED_ISA);
            TEST_CHECK(strstr(bitnet_last_error(), bitnet_isa_name((bitnet_isa)isa)) != NULL);
        }
    }
#if defined(__x86_64__)
    TEST_CHECK(bitnet_cpu_has_isa(BITNET_ISA_NEON) == 0);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_NEON) == BITNET_ERR_UNSUPPORTED_ISA);
#elif defined(__aarch64__)
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AVX512) == BITNET_ERR_UNSUPPORTED_ISA);
#endif
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_cpu_isa() != BITNET_ISA_AUTO && bitnet_cpu_has_isa(bitnet_cpu_isa()));
    TEST_CHECK(strcmp(bitnet_isa_name(BITNET_ISA_AVX512), "avx512") == 0);
    TEST_CHECK(strcmp(bitnet_isa_name((bitnet_isa)42), "unknown") == 0);
}

/* BITNET_CPU is read when the path is (re)resolved: at first use, or after set_isa(AUTO). */
static void test_bitnet_cpu_env(void) {
    const char *saved = getenv("BITNET_CPU");
    char *copy = saved ? strdup(saved) : NULL;
    bitnet_isa best;
    unsetenv("BITNET_CPU");
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    best = bitnet_cpu_isa();
    setenv("BITNET_CPU", "scalar", 1);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_cpu_isa() == BITNET_ISA_SCALAR);
    setenv("BITNET_CPU", "bogus", 1);
    bitnet_clear_error();
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_cpu_isa() == best);
    TEST_CHECK(strstr(bitnet_last_error(), "bogus") != NULL);
    setenv("BITNET_CPU", bitnet_cpu_has_isa(BITNET_ISA_NEON) ? "avx2" : "neon", 1);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
    TEST_CHECK(bitnet_cpu_isa() == best);
    if (copy) setenv("BITNET_CPU", copy, 1);
    else unsetenv("BITNET_CPU");
    free(copy);
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
}

/* Runs before anything sets the count: BITNET_NUM_THREADS, else the online cores. */
static void test_num_threads_default(void) {
    const char *env = getenv("BITNET_NUM_THREADS");
    long want = sysconf(_SC_NPROCESSORS_ONLN);
    if (env && atoi(env) > 0) want = atoi(env);
#if defined(BITNET_NO_THREADS)
    want = 1;
#endif
    TEST_CHECKF(bitnet_num_threads() == (int)want, "got %d want %ld", bitnet_num_threads(), want);
}

#if defined(BITNET_NO_THREADS)
#define POOL_SIZE(n) 1
#else
#define POOL_SIZE(n) (n)
#endif
static void test_num_threads_api(void) {
    problem p;
    TEST_CHECK(bitnet_set_num_threads(-1) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_set_num_threads(100000) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_set_num_threads(3) == BITNET_OK);
    TEST_CHECK(bitnet_num_threads() == POOL_SIZE(3));
    test_seed(14);
    make_i2s(&p, 256, 1024, 2);
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECK(bitnet_num_threads() == POOL_SIZE(3)); /* the pool started all of them */
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(bitnet_num_threads() == 1);
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
    TEST_CHECK(bitnet_num_threads() == POOL_SIZE((int)sysconf(_SC_NPROCESSORS_ONLN)));
    problem_free(&p);
}

/* A pool that cannot be allocated leaves the kernels single-threaded and still right. */
static void test_pool_alloc_failure(void) {
    problem p;
    test_seed(15);
    make_i2s(&p, 512, 512, 3);
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(run(&p, p.ref) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(2) == BITNET_OK);
    TEST_CHECK(bitnet_set_fault("host_alloc:1") == BITNET_OK);
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
    TEST_CHECK(memcmp(p.out, p.ref, p.m * p.n * sizeof(float)) == 0);
#if !defined(BITNET_NO_THREADS)
    TEST_CHECK(bitnet_num_threads() == 1);
    TEST_CHECK(bitnet_set_num_threads(2) == BITNET_OK); /* retried after the count is set again */
    TEST_CHECK(run(&p, p.out) == BITNET_OK);
    TEST_CHECK(bitnet_num_threads() == 2);
    TEST_CHECK(memcmp(p.out, p.ref, p.m * p.n * sizeof(float)) == 0);
#endif
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
    problem_free(&p);
}

/* Many back-to-back dispatches, some after pauses long enough for the workers to sleep: a lost
   wake-up would hang, a race would change results. */
static void test_pool_many_dispatches(void) {
    problem p;
    int i, bad = 0;
    test_seed(16);
    make_i2s(&p, 256, 256, 1);
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(run(&p, p.ref) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(3) == BITNET_OK);
    for (i = 0; i < 3000; i++) {
        if (i % 500 == 499) usleep(5000);
        memset(p.out, 0, p.n * sizeof(float));
        if (run(&p, p.out) != BITNET_OK || memcmp(p.out, p.ref, p.n * sizeof(float)) != 0) bad++;
    }
    TEST_CHECKF(bad == 0, "%d of 3000 runs differ", bad);
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
    problem_free(&p);
}

/* Two caller threads at once: one owns the pool, the other runs inline; both are right. */
typedef struct { problem *p; float *out; int bad; } caller_arg;
static void *caller_main(void *arg) {
    caller_arg *c = (caller_arg *)arg;
    int i;
    for (i = 0; i < 200; i++)
        if (run(c->p, c->out) != BITNET_OK || memcmp(c->out, c->p->ref, c->p->m * c->p->n * sizeof(float)) != 0) c->bad++;
    return NULL;
}
static void test_concurrent_callers(void) {
    problem p;
    pthread_t th[2];
    caller_arg ca[2];
    int i;
    test_seed(17);
    make_i2s(&p, 300, 512, 2);
    TEST_CHECK(bitnet_set_num_threads(1) == BITNET_OK);
    TEST_CHECK(run(&p, p.ref) == BITNET_OK);
    TEST_CHECK(bitnet_set_num_threads(2) == BITNET_OK);
    for (i = 0; i < 2; i++) {
        ca[i].p = &p;
        ca[i].out = (float *)malloc(p.m * p.n * sizeof(float));
        ca[i].bad = 0;
        TEST_CHECK(pthread_create(&th[i], NULL, caller_main, &ca[i]) == 0);
    }
    for (i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        TEST_CHECKF(ca[i].bad == 0, "caller %d: %d bad runs", i, ca[i].bad);
        free(ca[i].out);
    }
    TEST_CHECK(bitnet_set_num_threads(0) == BITNET_OK);
    problem_free(&p);
}

int main(void) {
    RUN_TEST(test_num_threads_default);
    RUN_TEST(test_scalar_matches_naive);
    RUN_TEST(test_i2s_small_shapes);
    RUN_TEST(test_i2s_k2560);
    RUN_TEST(test_i2s_k6912);
    RUN_TEST(test_i2s_prefill_m64);
    RUN_TEST(test_i2s_prefill_m129);
    RUN_TEST(test_i2s_prefill_tails);
    RUN_TEST(test_i2s_prefill_extremes);
    RUN_TEST(test_i2s_prefill_alloc_failure);
    RUN_TEST(test_i2s_prefill_amx_dispatch);
    RUN_TEST(test_i2s_gemv_13824x2560);
    RUN_TEST(test_i2s_gemv_2560x6912);
    RUN_TEST(test_i2s_extremes);
    RUN_TEST(test_i2s_unaligned);
    RUN_TEST(test_i2s_large_k);
    RUN_TEST(test_i2s_code3_bytes);
    RUN_TEST(test_q8_shapes);
    RUN_TEST(test_q8_lm_head);
    RUN_TEST(test_q8_extremes);
    RUN_TEST(test_gemm_errors);
    RUN_TEST(test_isa_selection);
    RUN_TEST(test_bitnet_cpu_env);
    RUN_TEST(test_num_threads_api);
    RUN_TEST(test_pool_alloc_failure);
    RUN_TEST(test_pool_many_dispatches);
    RUN_TEST(test_concurrent_callers);
    bitnet_set_num_threads(1); /* joins the workers: leak checkers see a clean exit */
    return test_summary();
}
