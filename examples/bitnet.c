/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>

typedef int (*cmd_fn)(int argc, char **argv);
typedef struct { const char *name; cmd_fn fn; const char *usage; } command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("bitnet %s (cpu path %s)\n", BITNET_VERSION_STRING, bitnet_isa_name(bitnet_cpu_isa()));
    return 0;
}

/* >>cli-commands: one function per subcommand, listed in the table below. */

/* ---- devices, kernels (GPU runtime) ---- */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}
static const char *yes(int v) { return v ? "yes" : "no"; }
static const char *jbool(int v) { return v ? "true" : "false"; }

static void print_device_json(const bitnet_gpu_device_info *d) {
    printf("{\"ordinal\": %d, \"name\": ", d->ordinal);
    json_str(d->name);
    printf(", \"pci_bus_id\": ");
    json_str(d->pci_bus_id);
    printf(", \"compute_capability\": \"%d.%d\", \"jit_target\": ", d->cc_major, d->cc_minor);
    json_str(d->jit_target);
    printf(", \"total_mem\": %llu, \"free_mem\": %llu, \"sm_count\": %d, \"max_threads_per_block\": %d, "
           "\"smem_per_block\": %d, \"smem_per_block_optin\": %d, \"l2_bytes\": %d, \"clock_khz\": %d, "
           "\"mem_clock_khz\": %d, \"mem_bus_bits\": %d, \"mem_bandwidth_gbs\": %.1f, \"fp16\": %s, \"bf16\": %s, "
           "\"int8_tensor_cores\": %s, \"fp8\": %s}",
           (unsigned long long)d->total_mem, (unsigned long long)d->free_mem, d->sm_count, d->max_threads_per_block,
           d->smem_per_block, d->smem_per_block_optin, d->l2_bytes, d->clock_khz, d->mem_clock_khz, d->mem_bus_bits,
           d->mem_bandwidth_gbs, jbool(d->fp16), jbool(d->bf16), jbool(d->int8_tensor_cores), jbool(d->fp8));
}

static void print_device_text(const bitnet_gpu_device_info *d) {
    printf("device %d: %s%s%s%s\n", d->ordinal, d->name, d->pci_bus_id[0] ? " (PCI " : "", d->pci_bus_id,
           d->pci_bus_id[0] ? ")" : "");
    printf("  compute capability %d.%d, JIT target %s\n", d->cc_major, d->cc_minor,
           d->jit_target[0] ? d->jit_target : "none (no NVRTC)");
    printf("  %d SMs at %d MHz, %d threads per block\n", d->sm_count, d->clock_khz / 1000, d->max_threads_per_block);
    printf("  memory %.2f GiB total, %.2f GiB free; %d-bit bus at %d MHz: %.1f GB/s theoretical\n",
           (double)d->total_mem / 1073741824.0, (double)d->free_mem / 1073741824.0, d->mem_bus_bits,
           d->mem_clock_khz / 1000, d->mem_bandwidth_gbs);
    printf("  L2 %.1f MiB; shared memory per block %d KiB (%d KiB opt-in)\n", d->l2_bytes / 1048576.0,
           d->smem_per_block / 1024, d->smem_per_block_optin / 1024);
    printf("  fp16 %s, bf16 %s, int8 tensor cores %s, fp8 %s\n", yes(d->fp16), yes(d->bf16), yes(d->int8_tensor_cores),
           yes(d->fp8));
}

static int cmd_devices(int argc, char **argv) {
    bitnet_gpu_backends b;
    int i, json = 0, n;
    const char *fake = getenv("BITNET_GPU_FAKE");
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return fprintf(stderr, "usage: bitnet devices [--json]\n"), 2;
    }
    bitnet_gpu_backends_get(&b);
    n = b.mocked ? 0 : b.device_count;
    if (json) {
        printf("{\"mocked\": %s", jbool(b.mocked));
        if (b.mocked) printf(", \"mock\": "), json_str(fake ? fake : "");
        printf(", \"backends\": {\"cuda\": %s, \"rocm\": %s, \"metal\": %s, \"webgpu\": %s}", jbool(b.cuda), jbool(b.rocm),
               jbool(b.metal), jbool(b.webgpu));
        printf(", \"cuda_driver_version\": %d, \"nvrtc_version\": %d, \"device_count\": %d, \"reason\": ",
               b.cuda_driver_version, b.nvrtc_version, n);
        json_str(b.reason);
        printf(", \"devices\": [");
        for (i = 0; i < n; i++) {
            bitnet_gpu_device_info d;
            if (i) printf(", ");
            if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_json(&d);
            else printf("{\"ordinal\": %d, \"error\": ", i), json_str(bitnet_last_error()), printf("}");
        }
        printf("]}\n");
        return 0;
    }
    if (b.mocked) printf("detection mocked by BITNET_GPU_FAKE=\"%s\"\n", fake ? fake : "");
    printf("backends: cuda %s, rocm %s, metal %s, webgpu %s\n", yes(b.cuda), yes(b.rocm), yes(b.metal), yes(b.webgpu));
    if (b.cuda_driver_version) printf("CUDA driver %d.%d\n", b.cuda_driver_version / 1000, b.cuda_driver_version % 1000 / 10);
    if (b.nvrtc_version) printf("NVRTC %d.%d\n", b.nvrtc_version / 1000, b.nvrtc_version % 1000 / 10);
    for (i = 0; i < n; i++) {
        bitnet_gpu_device_info d;
        if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_text(&d);
        else printf("device %d: %s\n", i, bitnet_last_error());
    }
    if (n == 0) printf("no CUDA device: %s\n", b.reason);
    else if (b.reason[0]) printf("note: %s\n", b.reason);
    return 0;
}

static int cmd_kernels(int argc, char **argv) {
    const char *arch = NULL;
    char arch_buf[32];
    int i, json = 0, use_cache = 0, cc = 0, ok = 0, failed = 0, n = bitnet_gpu_builtin_count();
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--cache") == 0) use_cache = 1;
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[++i];
        else return fprintf(stderr, "usage: bitnet kernels [--arch sm_XX] [--json] [--cache]\n"), 2;
    }
    if (!arch) { /* the first device's own arch */
        bitnet_gpu_device_info d;
        if (!bitnet_gpu_available() || bitnet_gpu_device_info_get(0, &d) != BITNET_OK)
            return fprintf(stderr, "bitnet kernels: no GPU to take the arch from (%s); give --arch sm_XX\n",
                           bitnet_last_error()), 2;
        snprintf(arch_buf, sizeof arch_buf, "sm_%d%d", d.cc_major, d.cc_minor);
        arch = arch_buf;
    }
    if (sscanf(arch, "sm_%d", &cc) != 1 && sscanf(arch, "compute_%d", &cc) != 1) cc = 0;
    if (json) printf("{\"arch\": "), json_str(arch), printf(", \"modules\": [");
    for (i = 0; i < n; i++) {
        bitnet_gpu_jit_info info;
        const char *name = bitnet_gpu_builtin_name(i);
        int min_sm = bitnet_gpu_builtin_min_sm(i);
        bitnet_result r;
        if (json && i) printf(", ");
        if (cc && cc < min_sm) {
            if (json) printf("{\"name\": \"%s\", \"status\": \"skipped\", \"min_sm\": %d}", name, min_sm);
            else printf("  %-16s skipped (needs sm_%d)\n", name, min_sm);
            continue;
        }
        r = bitnet_gpu_jit_builtin(i, arch, use_cache, &info);
        if (r == BITNET_OK) ok++;
        else failed++;
        if (json) {
            printf("{\"name\": \"%s\", \"status\": \"%s\"", name, r == BITNET_OK ? "ok" : "failed");
            if (r == BITNET_OK)
                printf(", \"target\": \"%s\", \"format\": \"%s\", \"bytes\": %zu, \"ms\": %.1f, \"from_cache\": %s", info.target,
                       info.cubin ? "cubin" : "ptx", info.bytes, info.ms, jbool(info.from_cache));
            else printf(", \"error\": "), json_str(bitnet_last_error());
            printf("}");
        } else if (r == BITNET_OK) {
            printf("  %-16s %s %s, %zu bytes, %.1f ms%s\n", name, info.target, info.cubin ? "cubin" : "PTX", info.bytes,
                   info.ms, info.from_cache ? " (cache)" : "");
        } else {
            printf("  %-16s FAILED: %s\n", name, bitnet_last_error());
        }
    }
    if (json) printf("], \"compiled\": %d, \"failed\": %d, \"summary\": \"compiled %d modules for %s, %d failed\"}\n", ok,
                     failed, ok, arch, failed);
    else printf("compiled %d modules for %s, %d failed\n", ok, arch, failed);
    return failed ? 1 : 0;
}

/* ---- bench-kernels --backend cuda: W2A8 GEMV/GEMM and the fp16 LM head against the device's copy
   bandwidth, cuBLAS bf16 and (with --bitnetcpp LIB) bitnet.cpp's W2A8 kernel, side by side ----
   Protocol: every kernel is captured into a CUDA graph over R copies of its weights (R * bytes >= 1
   GiB, so each replay reads DRAM, not L2), and timed with device events around graph replays
   (median of 5). The copy bandwidth (bytes read + written, the better of a device memcpy and a
   16-byte copy kernel) is measured in the same run. cuBLAS is dlopen'd (BITNET_CUBLAS, else
   libcublas.so.13 / .12 / .so) and skipped when absent; its calls go on the runtime's stream, so the
   graph captures them. bitnet.cpp's library (built from a microsoft/BitNet checkout: gpu/
   bitnet_kernels) is called the same way, through its bitlinear_int8xint2 entry. */
#if !defined(_WIN32)
typedef int (*bk_gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                             const void *, void *, int, int, int, int);
typedef struct bk_cublas {
    void *lib, *handle;
    bitnet_devptr workspace;
    int (*create)(void **);
    int (*destroy)(void *);
    int (*set_stream)(void *, void *);
    int (*set_workspace)(void *, void *, size_t);
    bk_gemm_ex_fn gemm_ex;
} bk_cublas;
typedef void (*bk_bitnetcpp_fn)(void *, void *, void *, void *, void *, int, int, int, void *);

typedef struct bk_ctx {
    bitnet_gpu *gpu;
    int kind;                        /* 0 ours W2A8, 1 cuBLAS, 2 bitnet.cpp, 3 ours fp16 dense, 4 memcpy, 5 copy kernel, 6 nop */
    bitnet_gpu_ternary w;            /* ours: w.data is replaced per copy */
    bitnet_devptr base;              /* copy r lives at base + r * stride */
    size_t stride, m, n, k;
    bitnet_gpu_act *a;
    bitnet_devptr x, out, aux, aux2; /* activations (cuBLAS / bitnet.cpp / dense), output, scales */
    int dtype;                       /* cuBLAS: 14 bf16, 2 fp16 */
    bk_cublas *cb;
    bk_bitnetcpp_fn bnc;
    bitnet_gpu_kernel *kern;
} bk_ctx;

static void *bk_ptr(bitnet_devptr p) { return (void *)(uintptr_t)p; }

static bitnet_result bk_issue(bk_ctx *c, int r) {
    bitnet_devptr wr = c->base + (bitnet_devptr)r * c->stride;
    switch (c->kind) {
    case 0: {
        bitnet_gpu_ternary w = c->w;
        w.data = wr;
        return bitnet_gpu_ternary_matmul(c->gpu, &w, c->a, c->out, BITNET_PRECISION_FP32, 0);
    }
    case 1: {
        float one = 1.0f, zero = 0.0f;
        /* out (m x n row-major) = x (m x k) . W^T: column-major C (n x m) = W^T(n x k) . x^T(k x m) */
        int st = c->cb->gemm_ex(c->cb->handle, 1, 0, (int)c->n, (int)c->m, (int)c->k, &one, bk_ptr(wr), c->dtype, (int)c->k,
                                bk_ptr(c->x), c->dtype, (int)c->k, &zero, bk_ptr(c->out), c->dtype == 2 ? 0 : c->dtype, (int)c->n,
                                68 /* CUBLAS_COMPUTE_32F */, -1 /* CUBLAS_GEMM_DEFAULT */);
        return st ? bitnet__err(BITNET_ERR_CUDA, "cublasGemmEx: status %d", st) : BITNET_OK;
    }
    case 2:
        c->bnc(bk_ptr(c->x), bk_ptr(wr), bk_ptr(c->out), bk_ptr(c->aux), bk_ptr(c->aux2), 1, (int)c->n, (int)c->k,
               bitnet_gpu_raw_stream(c->gpu));
        return BITNET_OK;
    case 3:
        return bitnet_gpu_matmul(c->gpu, BITNET_PRECISION_FP16, wr, c->x, c->m, c->n, c->k, c->out, BITNET_PRECISION_FP32);
    case 4:
        return bitnet_gpu_copy(c->gpu, c->out, c->base, c->stride);
    case 5: {
        unsigned long long n16 = c->stride / 16;
        unsigned grid[3] = {0, 1, 1}, block[3] = {512, 1, 1};
        void *args[3];
        args[0] = &c->base, args[1] = &c->out, args[2] = &n16;
        grid[0] = (unsigned)(4 * c->m); /* m holds the multiprocessor count here */
        return bitnet_gpu_launch(c->gpu, c->kern, grid, block, 0, args);
    }
    default: {
        int z = 0;
        unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
        void *args[1];
        args[0] = &z;
        return bitnet_gpu_launch(c->gpu, c->kern, grid, block, 0, args);
    }
    }
}

/* Median microseconds per launch over graph replays of reps launches (copies 0..reps-1). */
static double bk_time(bk_ctx *c, int reps) {
    bitnet_gpu_graph *g = NULL;
    double ms = 0, t[5], tmp;
    int i, j, iters;
    for (i = 0; i < 2 && i < reps; i++)
        if (bk_issue(c, i) != BITNET_OK) return -1; /* warm-up: JIT, library init */
    if (bitnet_gpu_sync(c->gpu) != BITNET_OK || bitnet_gpu_graph_begin(c->gpu) != BITNET_OK) return -1;
    for (i = 0; i < reps; i++)
        if (bk_issue(c, i) != BITNET_OK) break;
    if (bitnet_gpu_graph_end(c->gpu, &g) != BITNET_OK || i < reps) {
        bitnet_gpu_graph_free(g);
        return -1;
    }
    if (bitnet_gpu_timer_begin(c->gpu) != BITNET_OK || bitnet_gpu_graph_launch(c->gpu, g) != BITNET_OK ||
        bitnet_gpu_timer_end(c->gpu, &ms) != BITNET_OK) {
        bitnet_gpu_graph_free(g);
        return -1;
    }
    iters = ms > 0 ? (int)(10.0 / ms) : 10;
    iters = iters < 2 ? 2 : (iters > 200 ? 200 : iters);
    for (j = 0; j < 5; j++) {
        if (bitnet_gpu_timer_begin(c->gpu) != BITNET_OK) break;
        for (i = 0; i < iters; i++) bitnet_gpu_graph_launch(c->gpu, g);
        if (bitnet_gpu_timer_end(c->gpu, &ms) != BITNET_OK) break;
        t[j] = ms * 1e3 / ((double)iters * reps);
    }
    bitnet_gpu_graph_free(g);
    if (j < 5) return -1;
    for (i = 0; i < 5; i++) /* median */
        for (j = i + 1; j < 5; j++)
            if (t[j] < t[i]) tmp = t[i], t[i] = t[j], t[j] = tmp;
    return t[2];
}

static int bk_reps(size_t bytes) {
    size_t r = ((size_t)1 << 30) / bytes + 1;
    return (int)(r < 2 ? 2 : (r > 2048 ? 2048 : r));
}

/* Fills the device buffer with copies of one random host block: 16-bit values (bf16 / fp16 in
   [-1, 1]) when dtype is set, else random bytes. */
static bitnet_result bk_fill(bitnet_gpu *gpu, bitnet_devptr base, size_t bytes, int reps, int dtype, uint64_t *rng) {
    unsigned char *h = (unsigned char *)malloc(bytes);
    size_t i;
    int r;
    bitnet_result res;
    if (!h) return BITNET_ERR_OUT_OF_MEMORY;
    for (i = 0; i + 1 < bytes; i += 2) {
        uint16_t v;
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        if (dtype) {
            float f = (float)((*rng >> 40) & 0xFFFF) / 32768.0f - 1.0f;
            v = dtype == 14 ? bitnet_fp32_to_bf16(f) : bitnet_fp32_to_fp16(f);
        } else {
            v = (uint16_t)(*rng >> 24);
        }
        memcpy(h + i, &v, 2);
    }
    res = bitnet_gpu_upload(gpu, base, h, bytes);
    for (r = 1; r < reps && res == BITNET_OK; r++) res = bitnet_gpu_copy(gpu, base + (bitnet_devptr)r * bytes, base, bytes);
    free(h);
    return res;
}

typedef struct bk_row { char shape[32]; int m; const char *impl; double us, gbps, ratio; } bk_row;

static int bench_kernels_cuda(int argc, char **argv) {
    static const size_t shapes[][2] = {{2560, 2560}, {3840, 2560}, {13824, 2560}, {2560, 6912}, {20480, 3200}, {55296, 5120}};
    const char *json = NULL, *bnc_path = NULL, *cb_env = getenv("BITNET_CUBLAS");
    static const char *const cb_names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    bitnet_gpu *gpu = NULL;
    bitnet_gpu_device_info info;
    bk_cublas cb;
    bk_bitnetcpp_fn bnc = NULL;
    bk_ctx c;
    bk_row rows[64];
    int nrows = 0, device = 0, i, s, mi;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    double copy_memcpy, copy_kernel, copy_bw, nop_us;
    bitnet_devptr big = 0;
    FILE *jf;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) i++;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--bitnetcpp") == 0 && i + 1 < argc) bnc_path = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bitnet bench-kernels --backend cuda [--json FILE] [--bitnetcpp LIB] [--device N]\n");
            return 2;
        }
    }
    bitnet_set_logger(bitnet_log_stderr, NULL);
    if (bitnet_gpu_open(device, &gpu) != BITNET_OK || bitnet_gpu_device_info_get(device, &info) != BITNET_OK) {
        fprintf(stderr, "bench-kernels: no CUDA device: %s\n", bitnet_last_error());
        return 1;
    }
    printf("bench-kernels --backend cuda: %s (sm_%d%d, %d SMs, %.0f GB/s theoretical), bitnet.h %s\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, info.mem_bandwidth_gbs, BITNET_VERSION_STRING);
    /* cuBLAS: bound to the runtime's context and stream, so graph capture records its kernels */
    memset(&cb, 0, sizeof cb);
    {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        int (*set_ctx)(void *) = cuda ? (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent") : NULL;
        if (set_ctx) set_ctx(bitnet_gpu_raw_context(gpu));
        for (i = cb_env ? -1 : 0; i < 3 && !cb.lib; i++) cb.lib = dlopen(i < 0 ? cb_env : cb_names[i], RTLD_NOW | RTLD_LOCAL);
        if (cb.lib) {
            cb.create = (int (*)(void **))dlsym(cb.lib, "cublasCreate_v2");
            cb.destroy = (int (*)(void *))dlsym(cb.lib, "cublasDestroy_v2");
            cb.set_stream = (int (*)(void *, void *))dlsym(cb.lib, "cublasSetStream_v2");
            cb.set_workspace = (int (*)(void *, void *, size_t))dlsym(cb.lib, "cublasSetWorkspace_v2");
            cb.gemm_ex = (bk_gemm_ex_fn)dlsym(cb.lib, "cublasGemmEx");
            if (!cb.create || !cb.destroy || !cb.set_stream || !cb.set_workspace || !cb.gemm_ex || cb.create(&cb.handle) ||
                cb.set_stream(cb.handle, bitnet_gpu_raw_stream(gpu)) ||
                bitnet_gpu_alloc(gpu, 64u << 20, &cb.workspace) != BITNET_OK ||
                cb.set_workspace(cb.handle, bk_ptr(cb.workspace), 64u << 20)) {
                printf("cuBLAS: found but unusable; skipped\n");
                cb.handle = NULL;
            }
        }
        if (!cb.handle) printf("cuBLAS: not found (BITNET_CUBLAS, libcublas.so.13/.12); skipped\n");
    }
    if (bnc_path) {
        void *lib = dlopen(bnc_path, RTLD_NOW | RTLD_LOCAL);
        if (lib) bnc = (bk_bitnetcpp_fn)dlsym(lib, "bitlinear_int8xint2");
        if (!bnc) printf("bitnet.cpp: cannot use %s (%s); skipped\n", bnc_path, lib ? "no bitlinear_int8xint2" : dlerror());
    }

    /* the yardsticks: copy bandwidth (read + write) and an empty kernel */
    memset(&c, 0, sizeof c);
    c.gpu = gpu;
    c.stride = (size_t)1 << 30;
    if (bitnet_gpu_alloc(gpu, c.stride, &c.base) != BITNET_OK || bitnet_gpu_alloc(gpu, c.stride, &c.out) != BITNET_OK ||
        bitnet_gpu_memset(gpu, c.base, 1, c.stride) != BITNET_OK) {
        fprintf(stderr, "bench-kernels: %s\n", bitnet_last_error());
        return 1;
    }
    c.kind = 4;
    copy_memcpy = 2.0 * (double)c.stride / (bk_time(&c, 1) * 1e3);
    c.kind = 5;
    c.m = (size_t)info.sm_count;
    copy_kernel = bitnet_gpu_builtin_kernel(gpu, "bitnet_k_copy16", &c.kern) == BITNET_OK
                      ? 2.0 * (double)c.stride / (bk_time(&c, 1) * 1e3) : 0;
    c.kind = 6;
    nop_us = bitnet_gpu_builtin_kernel(gpu, "bitnet_k_nop", &c.kern) == BITNET_OK ? bk_time(&c, 200) : -1;
    copy_bw = copy_memcpy > copy_kernel ? copy_memcpy : copy_kernel;
    printf("copy bandwidth: %.0f GB/s (memcpy %.0f, copy kernel %.0f; bytes read + written); empty kernel %.2f us\n", copy_bw,
           copy_memcpy, copy_kernel, nop_us);
    bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.out);
    printf("%-14s %4s  %-22s %10s %12s %8s\n", "shape (NxK)", "M", "kernel", "us", "weight GB/s", "x copy");

#define BK_ROW(SHAPE, M, IMPL, US, WBYTES) \
    do { \
        bk_row *r_ = &rows[nrows++]; \
        snprintf(r_->shape, sizeof r_->shape, "%s", SHAPE); \
        r_->m = (M), r_->impl = (IMPL), r_->us = (US); \
        r_->gbps = r_->us > 0 ? (double)(WBYTES) / (r_->us * 1e3) : 0; \
        r_->ratio = r_->gbps / copy_bw; \
        if (r_->us > 0) printf("%-14s %4d  %-22s %10.2f %12.0f %8.3f\n", r_->shape, r_->m, r_->impl, r_->us, r_->gbps, r_->ratio); \
        else printf("%-14s %4d  %-22s %10s\n", r_->shape, r_->m, r_->impl, "failed"); \
        fflush(stdout); \
    } while (0)

    for (s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        size_t n = shapes[s][0], k = shapes[s][1], wb = n * k / 4, nrep;
        char shape[32];
        int8_t *codes = (int8_t *)malloc(n * k);
        uint8_t *i2s = (uint8_t *)malloc(wb + 32);
        float *xh = (float *)malloc(512 * k * 4);
        bitnet_gpu_i2s_part part;
        bitnet_gpu_act a;
        bitnet_devptr dx = 0;
        snprintf(shape, sizeof shape, "%zux%zu", n, k);
        if (!codes || !i2s || !xh) return fprintf(stderr, "bench-kernels: out of host memory\n"), 1;
        for (i = 0; i < (int)(n * k); i++) rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, codes[i] = (int8_t)(rng % 3) - 1;
        for (i = 0; i < (int)(512 * k); i++) rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17,
                                              xh[i] = (float)((rng >> 40) & 0xFFFF) / 16384.0f - 2.0f;
        memset(&c, 0, sizeof c);
        c.gpu = gpu;
        c.n = n, c.k = k;
        part.data = i2s, part.bytes = wb + 32, part.n = n;
        if (bitnet_i2s_pack(codes, n, k, 0.5f, i2s, wb + 32) != BITNET_OK ||
            bitnet_gpu_ternary_upload(gpu, &part, 1, k, 0, &c.w) != BITNET_OK || bitnet_gpu_act_alloc(gpu, 512, k, &a) != BITNET_OK ||
            bitnet_gpu_alloc(gpu, 512 * k * 4, &dx) != BITNET_OK || bitnet_gpu_upload(gpu, dx, xh, 512 * k * 4) != BITNET_OK ||
            bitnet_gpu_quantize_act(gpu, dx, 512, k, 0, 0, &a) != BITNET_OK ||
            bitnet_gpu_alloc(gpu, 512 * n * 4, &c.out) != BITNET_OK) {
            fprintf(stderr, "bench-kernels %s: %s\n", shape, bitnet_last_error());
            return 1;
        }
        /* ours: the uploaded T32 image copied reps times */
        c.stride = c.w.n_pad * k / 4;
        nrep = (size_t)bk_reps(c.stride);
        if (bitnet_gpu_alloc(gpu, nrep * c.stride, &c.base) != BITNET_OK) return fprintf(stderr, "%s\n", bitnet_last_error()), 1;
        for (i = 0; i < (int)nrep; i++) bitnet_gpu_copy(gpu, c.base + (bitnet_devptr)i * c.stride, c.w.data, c.stride);
        c.a = &a;
        c.kind = 0;
        for (mi = 0; mi < 2; mi++) {
            a.m = mi ? 512 : 1;
            BK_ROW(shape, (int)a.m, "bitnet.h W2A8", bk_time(&c, (int)BITNET__MIN(nrep, mi ? (size_t)64 : nrep)), wb);
        }
        bitnet_gpu_free(gpu, c.base);
        /* bitnet.cpp, M = 1: int8 activations, its own packed layout (random bytes), bf16 scales */
        if (bnc) {
            uint16_t s1[1] = {0x42FE}, ws4[4] = {0x3F00, 0x3F00, 0x3F00, 0x3F00};
            c.kind = 2, c.bnc = bnc, c.stride = wb, c.x = a.q;
            nrep = (size_t)bk_reps(wb);
            if (bitnet_gpu_alloc(gpu, nrep * wb, &c.base) == BITNET_OK && bk_fill(gpu, c.base, wb, (int)nrep, 0, &rng) == BITNET_OK &&
                bitnet_gpu_alloc(gpu, 2, &c.aux) == BITNET_OK && bitnet_gpu_alloc(gpu, 8, &c.aux2) == BITNET_OK &&
                bitnet_gpu_upload(gpu, c.aux, s1, 2) == BITNET_OK && bitnet_gpu_upload(gpu, c.aux2, ws4, 8) == BITNET_OK)
                BK_ROW(shape, 1, "bitnet.cpp W2A8", bk_time(&c, (int)nrep), wb);
            bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.aux), bitnet_gpu_free(gpu, c.aux2);
            c.base = c.aux = c.aux2 = 0;
        }
        /* cuBLAS bf16, M = 1 and 512 */
        if (cb.handle) {
            size_t bb = n * k * 2;
            c.kind = 1, c.cb = &cb, c.dtype = 14, c.stride = bb;
            nrep = (size_t)bk_reps(bb);
            if (bitnet_gpu_alloc(gpu, nrep * bb, &c.base) == BITNET_OK && bk_fill(gpu, c.base, bb, (int)nrep, 14, &rng) == BITNET_OK &&
                bitnet_gpu_alloc(gpu, 512 * k * 2, &c.x) == BITNET_OK &&
                bk_fill(gpu, c.x, 512 * k * 2, 1, 14, &rng) == BITNET_OK)
                for (mi = 0; mi < 2; mi++) {
                    c.m = mi ? 512 : 1;
                    BK_ROW(shape, (int)c.m, "cuBLAS bf16", bk_time(&c, (int)nrep), bb);
                }
            bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.x);
            c.base = c.x = 0;
        }
        bitnet_gpu_free(gpu, c.out), bitnet_gpu_free(gpu, dx);
        bitnet_gpu_act_free(gpu, &a);
        bitnet_gpu_ternary_free(gpu, &c.w);
        free(codes), free(i2s), free(xh);
    }
    /* the fp16 LM head (tied embedding), M = 1 */
    {
        size_t n = 128256, k = 2560, bb = n * k * 2, nrep = (size_t)bk_reps(bb);
        memset(&c, 0, sizeof c);
        c.gpu = gpu, c.n = n, c.k = k, c.m = 1, c.stride = bb;
        if (bitnet_gpu_alloc(gpu, nrep * bb, &big) == BITNET_OK && bk_fill(gpu, big, bb, (int)nrep, 2, &rng) == BITNET_OK &&
            bitnet_gpu_alloc(gpu, k * 2, &c.x) == BITNET_OK && bk_fill(gpu, c.x, k * 2, 1, 2, &rng) == BITNET_OK &&
            bitnet_gpu_alloc(gpu, n * 4, &c.out) == BITNET_OK) {
            c.base = big;
            c.kind = 3;
            BK_ROW("128256x2560", 1, "bitnet.h fp16 head", bk_time(&c, (int)nrep), bb);
            if (cb.handle) {
                c.kind = 1, c.cb = &cb, c.dtype = 2;
                BK_ROW("128256x2560", 1, "cuBLAS fp16 head", bk_time(&c, (int)nrep), bb);
            }
        } else {
            printf("lm head: %s\n", bitnet_last_error());
        }
        bitnet_gpu_free(gpu, big), bitnet_gpu_free(gpu, c.x), bitnet_gpu_free(gpu, c.out);
    }
#undef BK_ROW
    /* side by side: ours against each reference on the same shape and M */
    printf("\nspeedup of bitnet.h (same run):\n");
    for (i = 0; i < nrows; i++) {
        int j;
        if (strncmp(rows[i].impl, "bitnet.h", 8) || rows[i].us <= 0) continue;
        for (j = 0; j < nrows; j++)
            if (j != i && rows[j].m == rows[i].m && strcmp(rows[j].shape, rows[i].shape) == 0 && strncmp(rows[j].impl, "bitnet.h", 8) &&
                rows[j].us > 0)
                printf("  %-14s M=%-4d vs %-18s %6.2fx\n", rows[i].shape, rows[i].m, rows[j].impl, rows[j].us / rows[i].us);
    }
    if (json) {
        jf = fopen(json, "w");
        if (!jf) return fprintf(stderr, "bench-kernels: cannot write %s\n", json), 1;
        fprintf(jf, "{\"device\": \"%s\", \"cc\": \"%d.%d\", \"copy_gbps\": %.1f, \"copy_memcpy_gbps\": %.1f, "
                    "\"copy_kernel_gbps\": %.1f, \"empty_kernel_us\": %.3f, \"protocol\": \"CUDA graph replay, weights rotated "
                    "through >= 1 GiB, CUDA events, median of 5\", \"rows\": [",
                info.name, info.cc_major, info.cc_minor, copy_bw, copy_memcpy, copy_kernel, nop_us);
        for (i = 0; i < nrows; i++)
            fprintf(jf, "%s\n  {\"shape\": \"%s\", \"m\": %d, \"kernel\": \"%s\", \"us\": %.3f, \"weight_gbps\": %.1f, "
                        "\"ratio_to_copy_bw\": %.4f}", i ? "," : "", rows[i].shape, rows[i].m, rows[i].impl, rows[i].us, rows[i].gbps,
                    rows[i].ratio);
        fprintf(jf, "\n]}\n");
        fclose(jf);
        printf("wrote %s\n", json);
    }
    if (cb.handle) cb.destroy(cb.handle);
    if (cb.workspace) bitnet_gpu_free(gpu, cb.workspace);
    bitnet_gpu_close(gpu);
    return 0;
}
#else
static int bench_kernels_cuda(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "bench-kernels --backend cuda: not built for Windows\n");
    return 1;
}
#endif

/* bench-kernels: this branch carries the CUDA side only (the CPU side comes with the CPU kernels). */
static int cmd_bench_kernels(int argc, char **argv) {
    int i;
    for (i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--backend") == 0 && strcmp(argv[i + 1], "cuda") == 0) return bench_kernels_cuda(argc, argv);
    fprintf(stderr, "bench-kernels: this build has --backend cuda only\n");
    return 2;
}

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"devices", cmd_devices, "devices [--json]             GPU backends and every CUDA device"},
    {"kernels", cmd_kernels, "kernels [--arch sm_XX] [--json] [--cache]  compile every built-in CUDA module (no GPU needed)"},
    {"bench-kernels", cmd_bench_kernels, "bench-kernels --backend cuda [--json FILE] [--bitnetcpp LIB]  GPU kernel speed, side by side"},
    {"help", cmd_help, "help                         this list"},
};

static int cmd_help(int argc, char **argv) {
    size_t i;
    (void)argc; (void)argv;
    printf("usage: bitnet <command> [options]\n");
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) printf("  %s\n", commands[i].usage);
    return 0;
}

int main(int argc, char **argv) {
    size_t i;
    if (argc < 2) return cmd_help(argc, argv), 2;
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "bitnet: unknown command '%s' (try: bitnet help)\n", argv[1]);
    return 2;
}
