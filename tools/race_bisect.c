/* Bisect for compute-sanitizer racecheck's "failure to track a kernel launch" on one shared handle:
   T threads x R rounds of fill + add (+ download), in a few variants.
   race_bisect THREADS ROUNDS full|nodl|serial|event */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bitnet_gpu *G;
static int T, R;
static const char *mode;
static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;
static int fails;

static int round1(bitnet_devptr p, uint64_t n, uint32_t v, uint32_t *h) {
    bitnet_gpu_kernel *fill, *addk;
    unsigned grid[3] = {1, 1, 1}, block[3] = {256, 1, 1};
    uint32_t add = 1;
    void *args[3];
    if (bitnet_gpu_builtin_kernel(G, "bitnet_k_fill_u32", &fill) || bitnet_gpu_builtin_kernel(G, "bitnet_k_add_u32", &addk)) return 1;
    grid[0] = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    args[0] = &p, args[1] = &v, args[2] = &n;
    if (bitnet_gpu_launch(G, fill, grid, block, 0, args)) return 1;
    args[1] = &add;
    if (bitnet_gpu_launch(G, addk, grid, block, 0, args)) return 1;
    if (strcmp(mode, "nodl") == 0) return 0;
    if (strcmp(mode, "event") == 0) return bitnet_gpu_sync(G) != BITNET_OK;
    return bitnet_gpu_download(G, h, p, n * 4) != BITNET_OK || h[n - 1] != v + 1;
}
static void *worker(void *arg) {
    int id = (int)(intptr_t)arg, r;
    uint64_t n = 65536 + 2 * (uint64_t)id + 1;
    uint32_t *h = (uint32_t *)malloc(n * 4);
    bitnet_devptr p = 0;
    if (bitnet_gpu_alloc(G, n * 4, &p)) { __sync_fetch_and_add(&fails, 1); return NULL; }
    for (r = 0; r < R; r++) {
        int bad;
        if (strcmp(mode, "serial") == 0) pthread_mutex_lock(&serial);
        bad = round1(p, n, 0x01000000u * (uint32_t)(id + 1) + (uint32_t)r, h);
        if (strcmp(mode, "serial") == 0) pthread_mutex_unlock(&serial);
        if (bad) __sync_fetch_and_add(&fails, 1);
    }
    bitnet_gpu_sync(G);
    bitnet_gpu_free(G, p);
    free(h);
    return NULL;
}
int main(int argc, char **argv) {
    pthread_t t[64];
    int i;
    if (argc < 4) return 2;
    T = atoi(argv[1]), R = atoi(argv[2]), mode = argv[3];
    if (T < 1 || T > 64 || bitnet_gpu_open(0, &G) != BITNET_OK) { printf("no gpu: %s\n", bitnet_last_error()); return 2; }
    bitnet_gpu_builtin_load_all(G);
    for (i = 0; i < T; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (i = 0; i < T; i++) pthread_join(t[i], NULL);
    bitnet_gpu_close(G);
    printf("race_bisect %d threads %d rounds %s: %d failures\n", T, R, mode, fails);
    return fails != 0;
}
