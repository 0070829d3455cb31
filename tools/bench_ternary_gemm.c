/* Prefill-side throughput of bitnet_gemm_i2s: GMAC/s (ternary multiply-adds per second) for
   M = 64, 128 and 512 activation rows on the BitNet-2B-4T layer shapes, 1 and 2 threads, every
   ISA path but scalar. Weights stay the same between calls (prefill reuses a layer's weights over
   all its tokens), so this measures the compute side; bench-kernels measures the memory side.
   With 1 thread it also gives the rate per second of CPU time the thread got (on a shared machine
   the wall clock also counts the time other processes held the core).
   Build and run:  cc -O2 -std=c11 -o build/bench_ternary_gemm tools/bench_ternary_gemm.c -lm -ldl -lpthread
                   build/bench_ternary_gemm */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"

static double thread_cpu_seconds(void) {
#if defined(CLOCK_THREAD_CPUTIME_ID)
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#else
    return bitnet__now();
#endif
}

int main(void) {
    static const size_t shapes[][2] = {{2560, 2560}, {640, 2560}, {6912, 2560}, {2560, 6912}};
    static const size_t ms[] = {64, 128, 512};
    size_t si, mi, i;
    int isa, th;
    printf("%-10s %4s %-7s %3s %10s %10s %14s\n", "NxK", "m", "isa", "thr", "ms", "GMAC/s", "GMAC/cpu-s");
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const size_t n = shapes[si][0], k = shapes[si][1], wb = bitnet_i2s_bytes(n, k);
        uint8_t *w = (uint8_t *)malloc(wb);
        float one = 1.0f;
        for (i = 0; i < n * k / 4; i++) w[i] = (uint8_t)((i * 2654435761u) >> 13) & 0x55; /* codes 0 and 1 */
        memcpy(w + n * k / 4, &one, 4);
        for (mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const size_t m = ms[mi];
            int8_t *a = (int8_t *)malloc(m * k);
            float *as = (float *)malloc(m * sizeof(float)), *out = (float *)malloc(m * n * sizeof(float));
            int32_t *sum = (int32_t *)calloc(m, sizeof(int32_t));
            for (i = 0; i < m * k; i++) a[i] = (int8_t)(i * 37 % 255 - 127);
            for (i = 0; i < m; i++) as[i] = 1.0f;
            for (isa = BITNET_ISA_AVX2; isa < BITNET_ISA_COUNT; isa++) {
                if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
                bitnet_cpu_set_isa((bitnet_isa)isa);
                for (th = 1; th <= 2; th++) {
                    double best = 1e30, best_cpu = 1e30, t0;
                    int calls = 0;
                    bitnet_set_num_threads(th);
                    bitnet_gemm_i2s(w, wb, n, k, a, as, sum, m, out); /* warm-up, starts the pool */
                    for (t0 = bitnet__now(); calls < 2 || bitnet__now() - t0 < 0.4; calls++) {
                        double t = bitnet__now(), c = thread_cpu_seconds();
                        bitnet_gemm_i2s(w, wb, n, k, a, as, sum, m, out);
                        t = bitnet__now() - t;
                        c = thread_cpu_seconds() - c;
                        if (t < best) best = t;
                        if (c < best_cpu) best_cpu = c;
                    }
                    printf("%5zux%-4zu %4zu %-7s %3d %10.3f %10.1f", n, k, m, bitnet_isa_name((bitnet_isa)isa), th,
                           best * 1e3, (double)m * (double)n * (double)k / best / 1e9);
                    if (th == 1) printf(" %14.1f", (double)m * (double)n * (double)k / best_cpu / 1e9);
                    printf("\n");
                    fflush(stdout);
                }
            }
            free(a); free(as); free(out); free(sum);
        }
        free(w);
    }
    bitnet_cpu_set_isa(BITNET_ISA_AUTO);
    bitnet_set_num_threads(1);
    return 0;
}
