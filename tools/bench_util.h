/* Shared by the GPU benchmark tools (bench_cuda_forward.c, bench_prefill.c). */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H
/* The median of v[0..n) (sorts v in place). */
static double median(double *v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
#endif
