/* The M = 1 ternary GEMV on the CPU from DRAM (session 35): random N x K weights packed to I2_S and
   copied until the copies pass 600 MB, cycled through so that each call reads DRAM; prints the best
   of 5 passes. cc -O2 -std=c11 -DBITNET_NO_CUDA -o gv cpu-gemv-harness.c -lm -ldl -lpthread;
   ./gv N K THREADS [COPIES] (COPIES 1: the weights stay in the caches). */
#define BITNET_IMPLEMENTATION
#include "../../bitnet.h"
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    size_t n = atol(argv[1]), k = atol(argv[2]); int th = atoi(argv[3]); size_t copies = argc > 4 ? atol(argv[4]) : 0;
    size_t wb = bitnet_i2s_bytes(n, k), i, c;
    if (!copies) copies = (600u << 20) / wb + 1;
    int8_t *q = malloc(n * k), *a = malloc(k); uint8_t *w = malloc(wb * copies); float sc, *out = malloc(n * 4); int32_t sum; float as;
    uint32_t s = 1;
    for (i = 0; i < n * k; i++) s = s * 1664525u + 1013904223u, q[i] = (int8_t)((s >> 24) % 3) - 1;
    float *x = malloc(k * 4); for (i = 0; i < k; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    bitnet_quantize_act(x, 1, k, a, &as, &sum);
    bitnet_i2s_pack(q, n, k, 0.5f, w, wb);
    for (c = 1; c < copies; c++) memcpy(w + c * wb, w, wb);
    bitnet_set_num_threads(th);
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now(); size_t it = 0;
        for (c = 0; c < copies * 3; c++, it++) bitnet_gemm_i2s(w + (c % copies) * wb, wb, n, k, a, &as, &sum, 1, out);
        double t = (now() - t0) / it; if (t < best) best = t;
    }
    printf("%zux%zu threads %d copies %zu: %.1f us, %.1f GB/s\n", n, k, th, copies, best * 1e6, wb / best / 1e9);
    return 0;
}
