/* fp16 / bf16 conversions: every half value, hand-picked rounding boundaries, random sweeps
   against independent oracles (nearest representable value found by search, ties to even),
   and every bulk path (scalar, AVX2/F16C, AVX-512, NEON) against the scalar functions bit for bit. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <stdint.h>

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static int is_nan_h(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int is_nan_f(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* The value of a half, computed arithmetically (not with bit tricks). */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e ? ldexp(1024.0 + m, e - 25) : ldexp((double)m, -24);
    return (h & 0x8000) ? -v : v;
}

/* Oracle: fp32 -> fp16 by searching the sorted non-negative halves for the nearest, ties to the
   even pattern; values at or past the midpoint to 65536 round to Inf. NaN handled by the caller. */
static uint16_t oracle_fp16(float f) {
    double a = fabs((double)f);
    uint16_t sign = (uint16_t)(signbit(f) ? 0x8000 : 0), lo = 0, hi = 0x7bff, pick;
    if (isinf(f)) return (uint16_t)(sign | 0x7c00);
    if (a >= 65504.0) return (uint16_t)(sign | (a - 65504.0 < 65536.0 - a ? 0x7bff : 0x7c00)); /* tie: 0x7c00 even */
    while (lo < hi) { /* largest pattern with value <= a */
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (half_value(mid) <= a) lo = mid; else hi = (uint16_t)(mid - 1);
    }
    {
        double d0 = a - half_value(lo), d1 = half_value((uint16_t)(lo + 1)) - a;
        pick = d0 < d1 ? lo : (d1 < d0 ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo));
    }
    return (uint16_t)(sign | pick);
}

/* Oracle: fp32 -> bf16 by comparing the two neighbouring bf16 values in double. */
static uint16_t oracle_bf16(float f) {
    uint32_t u = f2u(f), lo = u & 0xffff0000u, mag = lo & 0x7fffffffu;
    double a = fabs((double)f), vlo = fabs((double)u2f(lo)), vhi;
    if (isinf(f)) return (uint16_t)(u >> 16);
    vhi = (mag + 0x10000u == 0x7f800000u) ? ldexp(1.0, 128) : fabs((double)u2f(lo + 0x10000u));
    if (a - vlo < vhi - a) return (uint16_t)(lo >> 16);
    if (a - vlo > vhi - a) return (uint16_t)((lo + 0x10000u) >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? (lo + 0x10000u) >> 16 : lo >> 16);
}

static void test_fp16_to_fp32_all_values(void) {
    int h, bad = 0;
    for (h = 0; h < 65536; h++) {
        uint32_t got = f2u(bitnet_fp16_to_fp32((uint16_t)h));
        uint32_t want;
        if (is_nan_h((uint16_t)h))
            want = ((uint32_t)(h & 0x8000) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ff) << 13);
        else if ((h & 0x7fff) == 0x7c00) want = (h & 0x8000) ? 0xff800000u : 0x7f800000u;
        else want = f2u((float)half_value((uint16_t)h));
        if (got != want && bad++ < 5) TEST_CHECKF(got == want, "half 0x%04x -> 0x%08x, want 0x%08x", h, got, want);
    }
    TEST_CHECK(bad == 0);
}

static void test_fp16_roundtrip_all_values(void) {
    int h, bad = 0;
    for (h = 0; h < 65536; h++) {
        uint16_t back = bitnet_fp32_to_fp16(bitnet_fp16_to_fp32((uint16_t)h));
        uint16_t want = is_nan_h((uint16_t)h) ? (uint16_t)(h | 0x200) : (uint16_t)h; /* NaN comes back quiet */
        if (back != want && bad++ < 5) TEST_CHECKF(back == want, "half 0x%04x -> 0x%04x", h, back);
    }
    TEST_CHECK(bad == 0);
}

static void test_fp32_to_fp16_boundaries(void) {
    static const struct { uint32_t in; uint16_t want; } c[] = {
        {0x3f800000u, 0x3c00}, /* 1 */
        {0xc0000000u, 0xc000}, /* -2 */
        {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, /* +-0 */
        {0x477fe000u, 0x7bff}, /* 65504, max finite */
        {0x477fefffu, 0x7bff}, /* just below the midpoint to 65536 */
        {0x477ff000u, 0x7c00}, /* 65520: tie, 65504 is odd -> Inf */
        {0xc77ff000u, 0xfc00}, /* -65520 -> -Inf */
        {0x501502f9u, 0x7c00}, /* 1e10 overflows */
        {0x7f800000u, 0x7c00}, {0xff800000u, 0xfc00}, /* Inf */
        {0x3f801000u, 0x3c00}, /* 1 + 2^-11: tie, to even 1.0 */
        {0x3f803000u, 0x3c02}, /* 1 + 3*2^-11: tie, to even 0x3c02 */
        {0x3f801001u, 0x3c01}, /* just above the tie */
        {0x3f800fffu, 0x3c00}, /* just below the tie */
        {0x33800000u, 0x0001}, /* 2^-24: smallest subnormal */
        {0x33000000u, 0x0000}, /* 2^-25: tie, to even 0 */
        {0xb3000000u, 0x8000}, /* -2^-25 -> -0 */
        {0x33000001u, 0x0001}, /* just above 2^-25 */
        {0x32800000u, 0x0000}, /* 2^-26 underflows */
        {0x33c00000u, 0x0002}, /* 1.5 * 2^-24: tie, to even 2 */
        {0x34200000u, 0x0002}, /* 2.5 * 2^-24: tie, to even 2 */
        {0x33a00000u, 0x0001}, /* 1.25 * 2^-24 */
        {0x387fc000u, 0x03ff}, /* 1023 * 2^-24: largest subnormal */
        {0x387fe000u, 0x0400}, /* 1023.5 * 2^-24: tie -> smallest normal */
        {0x38800000u, 0x0400}, /* 2^-14 */
        {0x00000001u, 0x0000}, /* fp32 subnormal */
        {0x80000001u, 0x8000},
        {0x7fc00000u, 0x7e00}, /* quiet NaN */
        {0xffc00001u, 0xfe00}, /* negative NaN, low payload truncated */
        {0x7f800001u, 0x7e00}, /* signalling NaN made quiet */
        {0x7fa00000u, 0x7f00}, /* signalling NaN with a high payload bit: kept */
        {0x7fffffffu, 0x7fff},
    };
    size_t i;
    for (i = 0; i < sizeof c / sizeof c[0]; i++) {
        uint16_t got = bitnet_fp32_to_fp16(u2f(c[i].in));
        TEST_CHECKF(got == c[i].want, "0x%08x -> 0x%04x, want 0x%04x", c[i].in, got, c[i].want);
    }
}

static void test_fp32_to_fp16_random_vs_oracle(void) {
    int i, bad = 0;
    test_seed(11);
    for (i = 0; i < 200000; i++) {
        /* half the samples in the fp16 exponent range (where rounding matters), half any bits */
        uint32_t u = (uint32_t)test_rand_u64();
        uint16_t got, want;
        float f;
        if (i & 1) u = (u & 0x807fffffu) | ((uint32_t)test_rand_int(100, 144) << 23);
        if (i % 16 == 2) u &= 0xffffe000u | 0x1000u; /* exact ties */
        f = u2f(u);
        if (is_nan_f(u)) continue;
        got = bitnet_fp32_to_fp16(f);
        want = oracle_fp16(f);
        if (got != want && bad++ < 5) TEST_CHECKF(got == want, "0x%08x -> 0x%04x, want 0x%04x", u, got, want);
    }
    TEST_CHECK(bad == 0);
}

static void test_bf16_boundaries(void) {
    static const struct { uint32_t in; uint16_t want; } c[] = {
        {0x3f800000u, 0x3f80}, {0xbf800000u, 0xbf80},
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie, to even */
        {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: tie, to even */
        {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80},
        {0x7f7f7fffu, 0x7f7f}, /* largest finite bf16 */
        {0x7f7f8000u, 0x7f80}, /* tie past it -> Inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX -> Inf */
        {0xff7fffffu, 0xff80},
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
        {0x00010000u, 0x0001}, /* subnormal kept */
        {0x00008000u, 0x0000}, /* tie, to even 0 */
        {0x00018000u, 0x0002}, /* tie, to even 2 */
        {0x00000001u, 0x0000}, {0x80000001u, 0x8000},
        {0x007fffffu, 0x0080}, /* largest subnormal rounds up to FLT_MIN */
        {0x7fc00000u, 0x7fc0}, {0x7f800001u, 0x7fc0}, /* NaN: quiet */
        {0xff810000u, 0xffc1}, /* sign and high payload kept */
    };
    static const struct { uint16_t in; uint32_t want; } b[] = {
        {0x3f80, 0x3f800000u}, {0x0001, 0x00010000u}, {0x8000, 0x80000000u}, {0x7f80, 0x7f800000u},
        {0x7f81, 0x7fc10000u}, /* signalling NaN made quiet */
        {0xffc0, 0xffc00000u}, {0x7f7f, 0x7f7f0000u},
    };
    size_t i;
    for (i = 0; i < sizeof c / sizeof c[0]; i++) {
        uint16_t got = bitnet_fp32_to_bf16(u2f(c[i].in));
        TEST_CHECKF(got == c[i].want, "0x%08x -> 0x%04x, want 0x%04x", c[i].in, got, c[i].want);
    }
    for (i = 0; i < sizeof b / sizeof b[0]; i++) {
        uint32_t got = f2u(bitnet_bf16_to_fp32(b[i].in));
        TEST_CHECKF(got == b[i].want, "0x%04x -> 0x%08x, want 0x%08x", b[i].in, got, b[i].want);
    }
}

static void test_bf16_all_values_and_random(void) {
    int i, bad = 0;
    for (i = 0; i < 65536; i++) { /* every bf16 widens exactly and narrows back */
        uint32_t u = f2u(bitnet_bf16_to_fp32((uint16_t)i));
        uint16_t back = bitnet_fp32_to_bf16(u2f(u));
        uint16_t want = is_nan_f((uint32_t)i << 16) ? (uint16_t)(i | 0x40) : (uint16_t)i;
        if (!is_nan_f((uint32_t)i << 16) && u != ((uint32_t)i << 16) && bad++ < 5) TEST_CHECKF(0, "bf16 0x%04x widened to 0x%08x", i, u);
        if (back != want && bad++ < 5) TEST_CHECKF(back == want, "bf16 0x%04x round trip 0x%04x", i, back);
    }
    test_seed(12);
    for (i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)test_rand_u64();
        uint16_t got, want;
        if (i % 8 == 1) u = (u & 0xffff0000u) | 0x8000u; /* exact ties */
        if (i % 8 == 2) u &= 0x807fffffu;               /* subnormals */
        if (is_nan_f(u)) continue;
        got = bitnet_fp32_to_bf16(u2f(u));
        want = oracle_bf16(u2f(u));
        if (got != want && bad++ < 5) TEST_CHECKF(got == want, "0x%08x -> 0x%04x, want 0x%04x", u, got, want);
    }
    TEST_CHECK(bad == 0);
}

/* ---- bulk paths ---------------------------------------------------------------------------- */

static const size_t sizes[] = {1, 3, 15, 17, 127, 129, 2560, 6912};
#define N_SIZES (sizeof sizes / sizeof sizes[0])
#define MAXN 6912

/* fp32 inputs that exercise every branch: specials, NaNs, subnormals, ties, random bits. */
static void fill_fp32_bits(uint32_t *u, size_t n, unsigned long long seed) {
    static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa00000u,
                                       0x00000001u, 0x80000001u, 0x33000000u, 0x33000001u, 0x387fe000u, 0x477ff000u,
                                       0x477fefffu, 0x3f801000u, 0x3f808000u, 0x7f7f8000u, 0x00018000u, 0x80000000u};
    size_t i;
    test_seed(seed);
    for (i = 0; i < n; i++) {
        uint32_t r = (uint32_t)test_rand_u64();
        switch (i % 4) {
        case 0: u[i] = (i % 8) ? r : f2u(test_rand_float(-70000.0f, 70000.0f)); break;
        case 1: u[i] = (r & 0x807fffffu) | ((uint32_t)test_rand_int(100, 144) << 23); break;
        case 2: u[i] = special[(r >> 8) % (sizeof special / sizeof special[0])]; break;
        default: u[i] = (r & 0x807fffffu) | ((uint32_t)test_rand_int(100, 144) << 23 & ~0x1fffu) | 0x1000u; break;
        }
    }
}

static int run_isas(bitnet_isa *list) {
    int n = 0, i;
    for (i = BITNET_ISA_SCALAR; i <= BITNET_ISA_NEON; i++)
        if (bitnet_cpu_has_isa((bitnet_isa)i)) list[n++] = (bitnet_isa)i;
    return n;
}

static void test_bulk_fp16_every_isa(void) {
    static uint16_t h[65536 + 1], h2[MAXN + 2];
    static float f[65536 + 1];
    static uint32_t src[MAXN + 1];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = run_isas(isas), t, i;
    size_t s, j;
    for (i = 0; i < 65536; i++) h[i + 1] = (uint16_t)i;
    for (t = 0; t < ni; t++) {
        TEST_CHECK(bitnet_cpu_set_isa(isas[t]) == BITNET_OK);
        printf("  %s\n", bitnet_isa_name(isas[t]));
        /* all halves to fp32, from a misaligned address */
        TEST_CHECK(bitnet_convert_fp16_to_fp32(h + 1, f + 1, 65536) == BITNET_OK);
        for (i = 0; i < 65536; i++) {
            uint32_t want = f2u(bitnet_fp16_to_fp32((uint16_t)i));
            if (f2u(f[i + 1]) != want) { TEST_CHECKF(0, "%s: half 0x%04x -> 0x%08x want 0x%08x", bitnet_isa_name(isas[t]), i, f2u(f[i + 1]), want); break; }
        }
        /* and back: every non-NaN comes back exactly, NaN quiet */
        for (j = 0; j < 65536; j += MAXN) {
            size_t n = (65536 - j < MAXN ? 65536 - j : MAXN);
            TEST_CHECK(bitnet_convert_fp32_to_fp16(f + 1 + j, h2, n) == BITNET_OK);
            for (s = 0; s < n; s++) {
                uint16_t want = is_nan_h((uint16_t)(j + s)) ? (uint16_t)((j + s) | 0x200) : (uint16_t)(j + s);
                if (h2[s] != want) { TEST_CHECKF(0, "%s: 0x%04x came back 0x%04x", bitnet_isa_name(isas[t]), (unsigned)(j + s), h2[s]); break; }
            }
        }
        /* odd sizes of specials and random bits, misaligned */
        for (s = 0; s < N_SIZES; s++) {
            size_t n = sizes[s];
            fill_fp32_bits(src + 1, n, 100 + s);
            memset(h2, 0xAB, sizeof h2);
            TEST_CHECK(bitnet_convert_fp32_to_fp16((const float *)(src + 1), h2 + 1, n) == BITNET_OK);
            for (j = 0; j < n; j++) {
                uint16_t want = bitnet_fp32_to_fp16(u2f(src[j + 1]));
                if (h2[j + 1] != want) { TEST_CHECKF(0, "%s n=%zu: 0x%08x -> 0x%04x want 0x%04x", bitnet_isa_name(isas[t]), n, src[j + 1], h2[j + 1], want); break; }
            }
            TEST_CHECKF(h2[0] == 0xABAB && h2[n + 1] == 0xABAB, "%s n=%zu wrote outside", bitnet_isa_name(isas[t]), n);
        }
    }
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
}

static void test_bulk_bf16_every_isa(void) {
    static uint16_t b[MAXN + 2];
    static uint32_t src[MAXN + 2], dst[MAXN + 2];
    bitnet_isa isas[BITNET_ISA_COUNT];
    int ni = run_isas(isas), t;
    size_t s, j;
    for (t = 0; t < ni; t++) {
        TEST_CHECK(bitnet_cpu_set_isa(isas[t]) == BITNET_OK);
        printf("  %s\n", bitnet_isa_name(isas[t]));
        for (s = 0; s < N_SIZES; s++) {
            size_t n = sizes[s];
            fill_fp32_bits(src + 1, n, 200 + s);
            memset(b, 0xAB, sizeof b);
            TEST_CHECK(bitnet_convert_fp32_to_bf16((const float *)(src + 1), b + 1, n) == BITNET_OK);
            for (j = 0; j < n; j++) {
                uint16_t want = bitnet_fp32_to_bf16(u2f(src[j + 1]));
                if (b[j + 1] != want) { TEST_CHECKF(0, "%s n=%zu: 0x%08x -> 0x%04x want 0x%04x", bitnet_isa_name(isas[t]), n, src[j + 1], b[j + 1], want); break; }
            }
            TEST_CHECKF(b[0] == 0xABAB && b[n + 1] == 0xABAB, "%s n=%zu wrote outside", bitnet_isa_name(isas[t]), n);
            /* widen random bf16 patterns (NaNs included) */
            for (j = 0; j < n; j++) b[j + 1] = (uint16_t)test_rand_u64();
            memset(dst, 0xAB, sizeof dst);
            TEST_CHECK(bitnet_convert_bf16_to_fp32(b + 1, (float *)(dst + 1), n) == BITNET_OK);
            for (j = 0; j < n; j++) {
                uint32_t want = f2u(bitnet_bf16_to_fp32(b[j + 1]));
                if (dst[j + 1] != want) { TEST_CHECKF(0, "%s n=%zu: 0x%04x -> 0x%08x want 0x%08x", bitnet_isa_name(isas[t]), n, b[j + 1], dst[j + 1], want); break; }
            }
            TEST_CHECKF(dst[0] == 0xABABABABu && dst[n + 1] == 0xABABABABu, "%s n=%zu wrote outside", bitnet_isa_name(isas[t]), n);
        }
    }
    TEST_CHECK(bitnet_cpu_set_isa(BITNET_ISA_AUTO) == BITNET_OK);
}

static void test_convert_errors(void) {
    float f[4] = {0};
    uint16_t h[4] = {0};
    TEST_CHECK(bitnet_convert_fp32_to_fp16(NULL, h, 4) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(strstr(bitnet_last_error(), "bitnet_convert_fp32_to_fp16") != NULL);
    TEST_CHECK(bitnet_convert_fp32_to_fp16(f, NULL, 4) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_convert_fp16_to_fp32(NULL, f, 4) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_convert_fp32_to_bf16(f, NULL, 4) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_convert_bf16_to_fp32(h, NULL, 4) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_convert_fp32_to_fp16(f, h, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_convert_fp16_to_fp32(h, f, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_convert_fp32_to_bf16(f, h, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_convert_bf16_to_fp32(h, f, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_convert_fp32_to_fp16(f, h, SIZE_MAX / 2) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(bitnet_convert_bf16_to_fp32(h, f, SIZE_MAX / 3) == BITNET_ERR_OVERFLOW);
    TEST_CHECK(strstr(bitnet_last_error(), "overflow") != NULL);
}

int main(void) {
    RUN_TEST(test_fp16_to_fp32_all_values);
    RUN_TEST(test_fp16_roundtrip_all_values);
    RUN_TEST(test_fp32_to_fp16_boundaries);
    RUN_TEST(test_fp32_to_fp16_random_vs_oracle);
    RUN_TEST(test_bf16_boundaries);
    RUN_TEST(test_bf16_all_values_and_random);
    RUN_TEST(test_bulk_fp16_every_isa);
    RUN_TEST(test_bulk_bf16_every_isa);
    RUN_TEST(test_convert_errors);
    return test_summary();
}
