/* device_query: what the GPU runtime finds, then a check of each device: open it, load every
   built-in kernel module (timed; run twice with one BITNET_CACHE_DIR for cold and warm), fill a
   buffer with a kernel, read it back, print the statistics. No GPU: says why and exits 0. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <time.h>

static double ms_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(void) {
    char msg[4096];
    double t0 = ms_now(), t_driver, t_nvrtc;
    int n = 0, i, m, failed = 0;
    bitnet_gpu_device_count(&n); /* loads the driver and runs cuInit */
    t_driver = ms_now() - t0;
    t0 = ms_now();
    bitnet_gpu_nvrtc_info(NULL, NULL, NULL);
    t_nvrtc = ms_now() - t0;
    if (!bitnet_gpu_available()) {
        bitnet_gpu_preflight(msg, sizeof msg);
        printf("no CUDA device: %s\n", msg);
        return 0;
    }
    bitnet_gpu_summary(msg, sizeof msg);
    printf("%s\ndriver load + cuInit %.1f ms, NVRTC load %.1f ms\n", msg, t_driver, t_nvrtc);
    for (i = 0; i < n; i++) {
        enum { N = 1 << 20 };
        static uint32_t h[N];
        bitnet_gpu *gpu = NULL;
        bitnet_gpu_kernel *fill = NULL;
        bitnet_gpu_pool_stats ps;
        bitnet_gpu_stats st;
        bitnet_gpu_jit_info ji;
        bitnet_devptr p = 0;
        uint32_t v = 0xC0FFEE00u + (uint32_t)i;
        uint64_t count = N;
        unsigned grid[3] = {1024, 1, 1}, block[3] = {256, 1, 1};
        void *args[3];
        double t1 = ms_now(), t_open, t_mods;
        size_t k, bad = 0, cached = 0;
        if (bitnet_gpu_open(i, &gpu) != BITNET_OK) {
            printf("device %d: open failed: %s\n", i, bitnet_last_error());
            failed = 1;
            continue;
        }
        t_open = ms_now() - t1;
        t1 = ms_now();
        if (bitnet_gpu_builtin_load_all(gpu) != BITNET_OK) {
            printf("device %d: modules failed: %s\n", i, bitnet_last_error());
            failed = 1;
            bitnet_gpu_close(gpu);
            continue;
        }
        t_mods = ms_now() - t1;
        for (m = 0; m < bitnet_gpu_builtin_count(); m++)
            if (bitnet_gpu_builtin_jit_info(gpu, m, &ji) == BITNET_OK) cached += (size_t)ji.from_cache;
        printf("device %d: context+stream %.1f ms, %d built-in modules %.1f ms (%zu from cache, target %s): warm start %.1f ms\n",
               i, t_open, bitnet_gpu_builtin_count(), t_mods, cached, ji.target, t_open + t_mods);
        args[0] = &p, args[1] = &v, args[2] = &count;
        if (bitnet_gpu_alloc(gpu, sizeof h, &p) != BITNET_OK || bitnet_gpu_memset(gpu, p, 0, sizeof h) != BITNET_OK ||
            bitnet_gpu_builtin_kernel(gpu, "bitnet_k_fill_u32", &fill) != BITNET_OK ||
            bitnet_gpu_launch(gpu, fill, grid, block, 0, args) != BITNET_OK || bitnet_gpu_download(gpu, h, p, sizeof h) != BITNET_OK) {
            printf("device %d: kernel check failed: %s\n", i, bitnet_last_error());
            failed = 1;
        } else {
            for (k = 0; k < N; k++) bad += h[k] != v;
            printf("device %d: fill of %d values: %s\n", i, N, bad ? "WRONG" : "ok");
            failed |= bad != 0;
        }
        bitnet_gpu_free(gpu, p);
        bitnet_gpu_pool_stats_get(gpu, &ps);
        bitnet_gpu_stats_get(gpu, &st);
        printf("device %d: pool peak %llu bytes, %llu allocations; %llu launches, %llu bytes up, %llu bytes down\n", i,
               (unsigned long long)ps.peak, (unsigned long long)ps.allocations, (unsigned long long)st.launches,
               (unsigned long long)st.h2d_bytes, (unsigned long long)st.d2h_bytes);
        bitnet_gpu_close(gpu);
    }
    return failed;
}
