/* Quick throughput check of the >>cpu-math hot paths the forward pass uses per token:
   bitnet_gemv_f16 on the 2B-4T tied LM head (128256 x 2560 fp16 = 657 MB, far larger than any
   cache) against a plain memory read of the same matrix, with 1 and 2 threads (rows split over
   pthreads here, as bitnet__parallel will do), and the fused RMSNorm + quantization.
   Build and run:  cc -O2 -std=c11 -o build/bench_cpu_math tools/bench_cpu_math.c -lm -ldl -lpthread
                   build/bench_cpu_math */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <pthread.h>
enum { N = 128256, K = 2560 };
static uint16_t *W; static float *X, *O;
typedef struct { size_t r0, r1; } span;
static void *worker(void *p) { span *s = (span *)p; bitnet_gemv_f16(W + s->r0 * K, s->r1 - s->r0, K, X, O + s->r0); return NULL; }
/* The memory-read reference: XOR the same rows with 256-bit loads. */
__attribute__((target("avx2"))) static void *readw(void *p) {
    span *s = (span *)p;
    const __m256i *q = (const __m256i *)(const void *)(W + s->r0 * K);
    size_t n = (s->r1 - s->r0) * K / 16, i;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (i = 0; i + 4 <= n; i += 4) {
        a = _mm256_xor_si256(a, _mm256_loadu_si256(q + i));
        b = _mm256_xor_si256(b, _mm256_loadu_si256(q + i + 1));
        c = _mm256_xor_si256(c, _mm256_loadu_si256(q + i + 2));
        d = _mm256_xor_si256(d, _mm256_loadu_si256(q + i + 3));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    O[s->r0] = (float)_mm256_extract_epi32(a, 0);
    return NULL;
}
static double run(int nt, void *(*fn)(void *)) {
    pthread_t th[2]; span sp[2]; int t; double t0 = bitnet__now();
    for (t = 0; t < nt; t++) { sp[t].r0 = (size_t)N * t / nt; sp[t].r1 = (size_t)N * (t + 1) / nt; pthread_create(&th[t], NULL, fn, &sp[t]); }
    for (t = 0; t < nt; t++) pthread_join(th[t], NULL);
    return bitnet__now() - t0;
}
int main(void) {
    size_t i; int nt, rep, isa;
    double bytes = (double)N * K * 2;
    W = (uint16_t *)malloc((size_t)N * K * 2); X = (float *)malloc(K * 4); O = (float *)malloc(N * 4);
    for (i = 0; i < (size_t)N * K; i++) W[i] = bitnet_fp32_to_fp16((float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f);
    for (i = 0; i < K; i++) X[i] = (float)(i % 7) * 0.1f;
    for (nt = 1; nt <= 2; nt++) {
        double best = 1e9;
        for (rep = 0; rep < 5; rep++) { double t = run(nt, readw); if (t < best) best = t; }
        printf("memory read  %d thread(s): %.2f GB/s\n", nt, bytes / best / 1e9);
        for (isa = BITNET_ISA_SCALAR; isa <= BITNET_ISA_AVX512; isa++) {
            if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
            bitnet_cpu_set_isa((bitnet_isa)isa);
            best = 1e9;
            for (rep = 0; rep < (isa == BITNET_ISA_SCALAR ? 1 : 5); rep++) { double t = run(nt, worker); if (t < best) best = t; }
            printf("gemv_f16 %-6s %d thread(s): %7.2f ms  %.2f GB/s\n", bitnet_isa_name((bitnet_isa)isa), nt, best * 1e3, bytes / best / 1e9);
        }
    }
    { /* rmsnorm+quantize, k = 2560 and 6912 */
        static float x[6912], w[6912]; static int8_t q[6912]; float s; int32_t sm; int ks[2] = {2560, 6912}, j;
        for (i = 0; i < 6912; i++) { x[i] = (float)(i % 13) - 6; w[i] = 1.0f + (float)(i % 5) * 0.1f; }
        for (j = 0; j < 2; j++) for (isa = BITNET_ISA_SCALAR; isa <= BITNET_ISA_AVX512; isa++) {
            double t0; int it, n = 20000;
            bitnet_cpu_set_isa((bitnet_isa)isa);
            t0 = bitnet__now();
            for (it = 0; it < n; it++) bitnet__rmsnorm_quantize(x, w, ks[j], 1e-5f, q, &s, &sm);
            t0 = (bitnet__now() - t0) / n;
            printf("rmsnorm_quantize k=%d %-6s: %.2f us  (%.1f GB/s of x+w)\n", ks[j], bitnet_isa_name((bitnet_isa)isa), t0 * 1e6, ks[j] * 8.0 / t0 / 1e9);
        }
    }
    return 0;
}
