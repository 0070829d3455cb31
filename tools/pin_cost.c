/* What page-locking a 657 MB host table costs (the GPU forward's mapped embedding; BENCHMARKS.md,
   session 46): cuMemHostAlloc against memory of our own, filled first (faults on all cores), then
   cuMemHostRegister'd, with and without large pages (MADV_HUGEPAGE). (The library now does the
   latter: bitnet__gpu_host_alloc.)
     pin_cost [MB (657)] */
#define _GNU_SOURCE
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int (*reg_fn)(void *p, size_t n, unsigned flags);
typedef int (*unreg_fn)(void *p);
typedef int (*halloc_fn)(void **p, size_t n, unsigned flags);

int main(int argc, char **argv) {
    const size_t bytes = (size_t)(argc > 1 ? atof(argv[1]) : 657.0) * 1048576;
    bitnet_gpu *gpu = NULL;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW), *h;
    reg_fn reg = lib ? (reg_fn)dlsym(lib, "cuMemHostRegister_v2") : NULL;
    unreg_fn unreg = lib ? (unreg_fn)dlsym(lib, "cuMemHostUnregister") : NULL, hfree = lib ? (unreg_fn)dlsym(lib, "cuMemFreeHost") : NULL;
    halloc_fn halloc = lib ? (halloc_fn)dlsym(lib, "cuMemHostAlloc") : NULL;
    bitnet_devptr dev;
    unsigned char *src = (unsigned char *)malloc(bytes);
    double t;
    int rep, huge, rc;
    if (!reg || !unreg || !hfree || !halloc || !src || bitnet_gpu_open(0, &gpu) != BITNET_OK) return fprintf(stderr, "setup: %s\n", bitnet_last_error()), 1;
    memset(src, 1, bytes);
    if (system("cat /sys/kernel/mm/transparent_hugepage/enabled") != 0) printf("(no THP setting)\n");
    for (rep = 0; rep < 3; rep++) {
        t = bitnet__now();
        bitnet__ctx_push(gpu->dev->ctx);
        if (halloc(&h, bytes, 0x01 | 0x02) != 0) return 1;
        printf("cuMemHostAlloc %.0f ms", (bitnet__now() - t) * 1e3);
        t = bitnet__now();
        bitnet__copy_parallel(h, src, bytes);
        printf(", copy %.0f ms", (bitnet__now() - t) * 1e3);
        t = bitnet__now();
        hfree(h);
        bitnet__ctx_pop();
        printf(", free %.0f ms\n", (bitnet__now() - t) * 1e3);
        for (huge = 0; huge < 2; huge++) {
            void *p = NULL;
            double t1, t2;
            t = bitnet__now();
            if (posix_memalign(&p, (size_t)2 << 20, bytes)) return 1;
            if (huge) madvise(p, bytes, MADV_HUGEPAGE);
            bitnet__copy_parallel(p, src, bytes);
            t1 = bitnet__now();
            bitnet__ctx_push(gpu->dev->ctx);
            rc = reg(p, bytes, 0x01 | 0x02);
            t2 = bitnet__now();
            if (!rc) rc = bitnet__cuda.cu.cuMemHostGetDevicePointer(&dev, p, 0);
            printf("  %s: alloc + copy %.0f ms, register %.0f ms (rc %d)", huge ? "large pages" : "4 KB pages", (t1 - t) * 1e3,
                   (t2 - t1) * 1e3, rc);
            t = bitnet__now();
            unreg(p);
            bitnet__ctx_pop();
            free(p);
            printf(", unregister + free %.0f ms\n", (bitnet__now() - t) * 1e3);
        }
    }
    bitnet_gpu_close(gpu);
    return 0;
}
