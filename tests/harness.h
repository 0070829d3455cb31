/* Tiny test harness: TEST_CHECK records a failure and keeps going; each test function is run by
   RUN_TEST; test_summary() prints "N passed, M failed, K skipped" and returns the exit code. */
#ifndef BITNET_TEST_HARNESS_H
#define BITNET_TEST_HARNESS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test__passed, test__failed, test__skipped, test__cur_failed, test__cur_skipped;

#define TEST_CHECK(cond) \
    do { if (!(cond)) { test__cur_failed = 1; \
        fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define TEST_CHECKF(cond, ...) \
    do { if (!(cond)) { test__cur_failed = 1; \
        fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
/* Ends the current test as skipped, with the reason printed. */
#define TEST_SKIP(...) \
    do { test__cur_skipped = 1; printf("  skip: "); printf(__VA_ARGS__); printf("\n"); return; } while (0)

/* GPU tests: skip without a usable GPU, but fail under BITNET_REQUIRE_GPU=1 (make test-gpu).
   ok: whether the file's GPU is usable; why: the reason when it is not. */
#define TEST_NEED_GPU(ok, why) \
    do { if (!(ok)) { \
        if (test_require_gpu()) { TEST_CHECKF(0, "BITNET_REQUIRE_GPU=1 but no usable GPU: %s", why); return; } \
        TEST_SKIP("no usable CUDA GPU: %s", why); } } while (0)

/* BITNET_TEST_ONLY=name runs that test alone (e.g. one test under a slow sanitizer) */
#define RUN_TEST(fn) test__run(#fn, fn)
static void test__run(const char *name, void (*fn)(void)) {
    const char *only = getenv("BITNET_TEST_ONLY");
    if (only && *only && strcmp(only, name) != 0) return;
    test__cur_failed = 0;
    test__cur_skipped = 0;
    fn();
    if (test__cur_failed) { test__failed++; printf("FAIL %s\n", name); }
    else if (test__cur_skipped) { test__skipped++; printf("skip %s\n", name); }
    else { test__passed++; printf("ok   %s\n", name); }
    fflush(stdout);
}
static int test_summary(void) {
    printf("%d passed, %d failed, %d skipped\n", test__passed, test__failed, test__skipped);
    return test__failed ? 1 : 0;
}

/* xorshift64* for reproducible random inputs (not every test uses every helper). */
#if defined(__GNUC__) || defined(__clang__)
#define TEST__UNUSED __attribute__((unused))
#else
#define TEST__UNUSED
#endif
static unsigned long long test__rng = 0x9E3779B97F4A7C15ull;
TEST__UNUSED static int test_require_gpu(void) {
    const char *e = getenv("BITNET_REQUIRE_GPU");
    return e && strcmp(e, "1") == 0;
}
#if defined(BITNET_H) /* included after bitnet.h: the GPU detected once, at the first GPU test */
TEST__UNUSED static char test__gpu_reason[1024];
TEST__UNUSED static int test_gpu_usable(void) {
    static int ok = -1;
    if (ok < 0) {
        ok = bitnet_gpu_available();
        snprintf(test__gpu_reason, sizeof test__gpu_reason, "%s", bitnet_last_error());
    }
    return ok;
}
#endif
TEST__UNUSED static void test_seed(unsigned long long s) { test__rng = s ? s : 1; }
TEST__UNUSED static unsigned long long test_rand_u64(void) {
    test__rng ^= test__rng >> 12; test__rng ^= test__rng << 25; test__rng ^= test__rng >> 27;
    return test__rng * 2685821657736338717ull;
}
TEST__UNUSED static float test_rand_float(float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64() >> 40) * (1.0 / 16777216.0));
}
TEST__UNUSED static int test_rand_int(int lo, int hi) { return lo + (int)(test_rand_u64() % (unsigned long long)(hi - lo + 1)); }
#endif
