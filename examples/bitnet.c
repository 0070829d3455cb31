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

/* ---- bench-kernels: ternary GEMV/GEMM speed against the machine's memory-read bandwidth ----- */
#if defined(__linux__) || defined(__APPLE__)
#include <sys/mman.h>
#endif

typedef struct { const uint8_t *p; size_t n; uint64_t part[256]; } bench_mem;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) static uint64_t bench_sum_avx512(const uint8_t *p, size_t n) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i;
    for (i = 0; i + 256 <= n; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p + i + 64)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p + i + 128)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}
__attribute__((target("avx2"))) static uint64_t bench_sum_avx2(const uint8_t *p, size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    uint64_t o[4];
    size_t i;
    for (i = 0; i + 128 <= n; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    _mm256_storeu_si256((__m256i *)(void *)o, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return o[0] + o[1] + o[2] + o[3];
}
#endif

static uint64_t bench_sum_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i;
    for (i = 0; i + 4 <= n / 8; i += 4) { s0 += q[i]; s1 += q[i + 1]; s2 += q[i + 2]; s3 += q[i + 3]; }
    return s0 + s1 + s2 + s3;
}

/* Each thread sums its own 4 KB-aligned slice with the widest loads the CPU has. */
static void bench_mem_task(void *arg, int ith, int nth) {
    bench_mem *b = (bench_mem *)arg;
    size_t per = (b->n / (size_t)nth) & ~(size_t)4095;
    const uint8_t *p = b->p + per * (size_t)ith;
    size_t len = ith == nth - 1 ? b->n - per * (size_t)ith : per;
    uint64_t s;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (bitnet_cpu_has_isa(BITNET_ISA_AVX512)) s = bench_sum_avx512(p, len);
    else if (bitnet_cpu_has_isa(BITNET_ISA_AVX2)) s = bench_sum_avx2(p, len);
    else
#endif
        s = bench_sum_scalar(p, len);
    b->part[ith] = s;
}

/* Best of 3 passes over the buffer, GB/s. */
static double bench_mem_bw(const uint8_t *p, size_t n) {
    bench_mem b;
    double best = 0;
    int rep;
    memset(&b, 0, sizeof b);
    b.p = p;
    b.n = n;
    for (rep = 0; rep < 3; rep++) {
        double t = bitnet__now();
        bitnet__parallel(bench_mem_task, &b);
        t = bitnet__now() - t;
        if ((double)n / t / 1e9 > best) best = (double)n / t / 1e9;
    }
    return best;
}

static void bench_nop(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

typedef struct { size_t n, k; } bench_shape;
typedef struct { char shape[32]; size_t m; bitnet_isa isa; int threads; double us, gbps, gops, ratio; } bench_row;

/* Best mean time of one call, in seconds: a warm-up call (which alone is the measure when a call
   is slow, as the scalar GEMM is), then ~50 ms batches for `budget` seconds. Every call takes the
   next of the `copies` weight copies, so the weights come from DRAM. */
static double bench_time(const uint8_t *arena, size_t stride, size_t copies, size_t n, size_t k, const int8_t *a,
                         const float *as, const int32_t *asum, size_t m, float *out, double budget) {
    const size_t wb = n * k / 4 + 32;
    double best = 1e30, spent = 0, t = bitnet__now();
    size_t idx = 0;
    bitnet_gemm_i2s(arena, wb, n, k, a, as, asum, m, out);
    t = bitnet__now() - t;
    if (t > 0.1) return t;
    while (spent < budget) {
        int calls = 0;
        double t0 = bitnet__now(), dt;
        do {
            idx = (idx + 1) % copies;
            bitnet_gemm_i2s(arena + idx * stride, wb, n, k, a, as, asum, m, out);
            calls++;
        } while ((dt = bitnet__now() - t0) < 0.05);
        spent += dt;
        if (dt / calls < best) best = dt / calls;
    }
    return best;
}

static int cmd_bench_kernels(int argc, char **argv) {
    static const bench_shape shapes[] = {{2560, 2560}, {3840, 2560}, {13824, 2560}, {2560, 6912}, {20480, 3200}};
    enum { N_SHAPES = sizeof shapes / sizeof shapes[0], N_PASSES = 2 };
    static const size_t ms[] = {1, 64};
    const size_t rotate = (size_t)512 << 20, arena_bytes = rotate + ((size_t)32 << 20);
    const char *backend = "cpu", *json = NULL;
    bench_row rows[128];
    int n_rows = 0, i, th, pass;
    size_t si, mi, c;
    uint8_t *arena;
    double mem_bw, mem_bw1, t_start = bitnet__now();
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: bitnet bench-kernels [--backend cpu|cuda] [--json FILE]\n");
            return 2;
        }
    }
    if (strcmp(backend, "cuda") == 0) {
        printf("bench-kernels: cuda backend not built yet\n");
        return 2;
    }
    if (strcmp(backend, "cpu") != 0) {
        fprintf(stderr, "bench-kernels: unknown backend '%s' (cpu or cuda)\n", backend);
        return 2;
    }

    /* One arena: memory bandwidth is measured over it, and each shape's weights are laid out in
       it as distinct copies (>= 512 MB in all) that the calls rotate through, so every call reads
       its weights from DRAM, not from the caches. Random valid codes (no 3s). */
#if defined(__linux__) || defined(__APPLE__)
    arena = (uint8_t *)mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == (uint8_t *)MAP_FAILED) arena = NULL;
#if defined(MADV_HUGEPAGE)
    if (arena) madvise(arena, arena_bytes, MADV_HUGEPAGE);
#endif
#else
    arena = (uint8_t *)malloc(arena_bytes);
#endif
    if (!arena) {
        fprintf(stderr, "bench-kernels: cannot allocate %zu MB\n", arena_bytes >> 20);
        return 1;
    }
    {
        uint64_t x = 0x9E3779B97F4A7C15ull, *q = (uint64_t *)(void *)arena;
        for (c = 0; c < arena_bytes / 8; c++) {
            uint64_t v;
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
            v = x * 2685821657736338717ull;
            q[c] = v & ~(((v >> 1) & v & 0x5555555555555555ull) << 1); /* code 3 -> 1 */
        }
    }

    /* The bandwidth is measured again before each shape and the best value is the reference,
       so a busy moment during one measurement cannot flatter the ratios. */
    bitnet_set_num_threads(2);
    mem_bw = bench_mem_bw(arena, arena_bytes);
    {
        double t = bitnet__now();
        for (i = 0; i < 10000; i++) bitnet__parallel(bench_nop, NULL);
        t = (bitnet__now() - t) / 10000;
        bitnet_set_num_threads(1);
        mem_bw1 = bench_mem_bw(arena, arena_bytes);
        printf("memory read bandwidth: %.2f GB/s with 2 threads (%.2f with 1); pool dispatch %.2f us\n", mem_bw, mem_bw1,
               t * 1e6);
    }
    printf("%-12s %4s %-7s %3s %12s %10s %9s %7s\n", "shape", "m", "isa", "thr", "us", "weight_GB/s", "GOPS", "ratio");

    /* Two passes over every row (the scalar rows only once: they are slow and only a reference);
       each row keeps its best time, so one busy moment on this shared machine does not decide it. */
    for (pass = 0; pass < N_PASSES; pass++) {
        int row = 0;
        for (si = 0; si < N_SHAPES; si++) {
            const size_t n = shapes[si].n, k = shapes[si].k, wb = n * k / 4 + 32;
            const size_t stride = (wb + 4095) & ~(size_t)4095;
            size_t copies = rotate / stride + 1;
            float one = 1.0f, *out = (float *)malloc(64 * n * sizeof(float));
            if (copies * stride > arena_bytes) copies = arena_bytes / stride;
            for (c = 0; c < copies; c++) memcpy(arena + c * stride + n * k / 4, &one, 4);
            if (pass == 0 && si > 0) {
                double bw;
                bitnet_set_num_threads(2);
                bw = bench_mem_bw(arena, arena_bytes);
                if (bw > mem_bw) mem_bw = bw;
            }
            for (mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const size_t m = ms[mi];
                int8_t *a = (int8_t *)malloc(m * k);
                float *as = (float *)malloc(m * sizeof(float));
                int32_t *asum = (int32_t *)malloc(m * sizeof(int32_t));
                int isa;
                for (c = 0; c < m; c++) {
                    size_t j;
                    asum[c] = 0;
                    as[c] = 1.0f;
                    for (j = 0; j < k; j++) asum[c] += a[c * k + j] = (int8_t)((j * 7 + c * 13) % 255 - 127);
                }
                for (isa = BITNET_ISA_SCALAR; isa < BITNET_ISA_COUNT; isa++) {
                    if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
                    bitnet_cpu_set_isa((bitnet_isa)isa);
                    for (th = 1; th <= 2; th++) {
                        bench_row *r = &rows[row++];
                        double t;
                        if (pass == 0) {
                            snprintf(r->shape, sizeof r->shape, "%zux%zu", n, k);
                            r->m = m;
                            r->isa = (bitnet_isa)isa;
                            r->threads = th;
                            r->us = 1e30;
                            n_rows = row;
                        } else if (isa == BITNET_ISA_SCALAR || bitnet__now() - t_start > 45) {
                            continue; /* the second pass is skipped where it would end past ~50 s */
                        }
                        bitnet_set_num_threads(th);
                        t = bench_time(arena, stride, copies, n, k, a, as, asum, m, out, 0.15) * 1e6;
                        if (t < r->us) r->us = t;
                        r->gbps = (double)(n * k / 4) / r->us / 1e3;
                        r->gops = 2.0 * (double)m * (double)n * (double)k / r->us / 1e3;
                        printf("%-12s %4zu %-7s %3d %12.1f %10.2f %9.1f %7.3f%s\n", r->shape, m, bitnet_isa_name(r->isa), th,
                               t, (double)(n * k / 4) / t / 1e3, 2.0 * (double)m * (double)n * (double)k / t / 1e3,
                               (double)(n * k / 4) / t / 1e3 / mem_bw, pass ? "  (pass 2)" : "");
                        fflush(stdout);
                    }
                }
                free(a);
                free(as);
                free(asum);
            }
            free(out);
        }
    }
    bitnet_cpu_set_isa(BITNET_ISA_AUTO);
    bitnet_set_num_threads(0);
#if defined(__linux__) || defined(__APPLE__)
    munmap(arena, arena_bytes);
#else
    free(arena);
#endif
    /* The final table (markdown): best time per row, ratios against the best bandwidth of the run. */
    printf("\nmemory read bandwidth (2 threads, best of the run): %.2f GB/s\n\n", mem_bw);
    printf("| shape | m | isa | threads | us | weight GB/s | GOPS | ratio to mem bw |\n|---|---|---|---|---|---|---|---|\n");
    for (i = 0; i < n_rows; i++) {
        rows[i].ratio = rows[i].gbps / mem_bw;
        printf("| %s | %zu | %s | %d | %.1f | %.2f | %.1f | %.3f |\n", rows[i].shape, rows[i].m, bitnet_isa_name(rows[i].isa),
               rows[i].threads, rows[i].us, rows[i].gbps, rows[i].gops, rows[i].ratio);
    }
    printf("\ntotal %.1f s\n", bitnet__now() - t_start);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "bench-kernels: cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "{\"mem_bw_gbps\": %.3f, \"rows\": [", mem_bw);
        for (i = 0; i < n_rows; i++)
            fprintf(f, "%s\n  {\"shape\": \"%s\", \"m\": %zu, \"isa\": \"%s\", \"threads\": %d, \"us\": %.2f, "
                       "\"weight_gbps\": %.3f, \"gops\": %.2f, \"ratio_to_mem_bw\": %.4f}",
                    i ? "," : "", rows[i].shape, rows[i].m, bitnet_isa_name(rows[i].isa), rows[i].threads, rows[i].us,
                    rows[i].gbps, rows[i].gops, rows[i].ratio);
        fprintf(f, "\n]}\n");
        fclose(f);
    }
    return 0;
}

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"bench-kernels", cmd_bench_kernels, "bench-kernels [--backend cpu|cuda] [--json FILE]  kernel speed vs memory bandwidth"},
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
