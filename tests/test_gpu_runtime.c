/* GPU runtime. Without a GPU: loader failures (BITNET_LIBCUDA, BITNET_NVRTC), the BITNET_GPU_FAKE
   matrix, NVRTC for sm_70/80/90, BITNET_CUDA_KERNELS against the compiled kernels, the JIT cache (hit,
   miss, corrupt, read-only), fault injection.
   With a GPU (skipped without one; failures under BITNET_REQUIRE_GPU=1): device info against
   nvidia-smi, copies, kernels, 8 threads x 200 ordered rounds, the pool, BITNET_MEMORY_LIMIT,
   custom kernels, graphs, timing. Tests that need their own environment run in a forked child
   before this process touches CUDA (the driver is loaded once per process). */
#define _GNU_SOURCE
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <pthread.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int gpu_ok;
static char gpu_reason[2048];
static bitnet_gpu *G; /* shared by the GPU tests */

#define NEED_GPU() TEST_NEED_GPU(gpu_ok, gpu_reason)

/* ---- child processes ------------------------------------------------------------------------ */
static char child_log[8192];
static int child_fails;
#define CHILD_CHECK(cond) \
    do { if (!(cond)) { child_fails++; \
        snprintf(child_log + strlen(child_log), sizeof child_log - strlen(child_log), "  %s:%d: %s (last error: %s)\n", \
                 __FILE__, __LINE__, #cond, bitnet_last_error()); } } while (0)
#define CHILD_SKIP 77

/* Runs fn in a fork with env applied ("NAME=value" sets, "NAME" unsets). Returns the exit code:
   0 passed, CHILD_SKIP skipped, else failed; the child's notes land in out. */
static int run_child(const char *const *env, int (*fn)(void), char *out, size_t cap) {
    int fd[2], status = 0;
    pid_t pid;
    ssize_t n, got = 0;
    fflush(stdout);
    fflush(stderr);
    if (pipe(fd) != 0) return -1;
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int rc;
        close(fd[0]);
        for (; env && *env; env++) {
            const char *eq = strchr(*env, '=');
            if (eq) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(eq - *env), *env);
                setenv(name, eq + 1, 1);
            } else {
                unsetenv(*env);
            }
        }
        child_log[0] = 0;
        child_fails = 0;
        rc = fn();
        if (write(fd[1], child_log, strlen(child_log)) < 0) rc = 1;
        _exit(rc == CHILD_SKIP ? CHILD_SKIP : (rc || child_fails) ? 1 : 0);
    }
    close(fd[1]);
    while (got + 1 < (ssize_t)cap && (n = read(fd[0], out + got, cap - 1 - (size_t)got)) > 0) got += n;
    out[got] = 0;
    close(fd[0]);
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}
#define RUN_CHILD(env, fn) \
    do { char out_[8192]; int rc_ = run_child(env, fn, out_, sizeof out_); \
         if (rc_ == CHILD_SKIP) TEST_SKIP("%s", out_); \
         TEST_CHECKF(rc_ == 0, "child exited %d:\n%s", rc_, out_); } while (0)

/* The CPU path after a failed GPU load: ternary GEMV against integer arithmetic. */
static int cpu_path_works(void) {
    int8_t w[2 * 128], a[128], q[256];
    uint8_t packed[2 * 128 / 4 + 32];
    float out[2], a_scale = 2.0f;
    int32_t a_sum = 0, i, r, ok = 1;
    for (i = 0; i < 256; i++) w[i] = (int8_t)(i % 3 - 1);
    for (i = 0; i < 128; i++) a[i] = (int8_t)(i % 7 - 3), a_sum += a[i];
    if (bitnet_i2s_pack(w, 2, 128, 0.5f, packed, sizeof packed) != BITNET_OK) return 0;
    if (bitnet_gemm_i2s(packed, sizeof packed, 2, 128, a, &a_scale, &a_sum, 1, out) != BITNET_OK) return 0;
    for (r = 0; r < 2; r++) {
        int32_t acc = 0;
        for (i = 0; i < 128; i++) acc += w[r * 128 + i] * a[i];
        ok &= out[r] == (float)acc / a_scale * 0.5f;
    }
    return ok && bitnet_i2s_unpack(packed, sizeof packed, 2, 128, q, NULL) == BITNET_OK && memcmp(q, w, 256) == 0;
}

static int child_libcuda_missing(void) {
    bitnet_gpu *g = (bitnet_gpu *)&g;
    bitnet_gpu_backends b;
    char msg[2048], line[4096];
    int n = -1;
    CHILD_CHECK(bitnet_gpu_available() == 0);
    CHILD_CHECK(bitnet_gpu_open(0, &g) == BITNET_ERR_LIBCUDA_NOT_FOUND && g == NULL);
    CHILD_CHECK(strstr(bitnet_last_error(), "/nonexistent") != NULL);
    CHILD_CHECK(strstr(bitnet_last_error(), "cannot open") != NULL || strstr(bitnet_last_error(), "No such") != NULL);
    CHILD_CHECK(bitnet_gpu_device_count(&n) == BITNET_ERR_LIBCUDA_NOT_FOUND && n == 0);
    CHILD_CHECK(bitnet_gpu_preflight(msg, sizeof msg) == BITNET_ERR_LIBCUDA_NOT_FOUND);
    CHILD_CHECK(strstr(msg, "BITNET_LIBCUDA=/nonexistent") != NULL);
    CHILD_CHECK(bitnet_gpu_backends_get(&b) == BITNET_OK && !b.cuda && !b.mocked && b.device_count == 0);
    CHILD_CHECK(strstr(b.reason, "/nonexistent") != NULL);
    CHILD_CHECK(bitnet_gpu_summary(line, sizeof line) == BITNET_OK && strstr(line, "CUDA unavailable") != NULL);
    CHILD_CHECK(cpu_path_works());
    return 0;
}

static int child_libcuda_stub(void) {
    const char *stub = getenv("BITNET_LIBCUDA");
    bitnet_gpu *g = NULL;
    char msg[2048];
    if (access(stub, R_OK) != 0) {
        printf("no stub library at %s\n", stub);
        snprintf(child_log, sizeof child_log, "no CUDA stub library at %s", stub);
        return CHILD_SKIP;
    }
    if (bitnet_gpu_open(0, &g) == BITNET_ERR_LIBCUDA_NOT_FOUND) { /* e.g. an x86 stub under qemu */
        snprintf(child_log, sizeof child_log, "the stub library does not load here: %.300s", bitnet_last_error());
        return CHILD_SKIP;
    }
    CHILD_CHECK(bitnet_gpu_open(0, &g) == BITNET_ERR_CUDA_INIT);
    CHILD_CHECK(strstr(bitnet_last_error(), "stub") != NULL);
    CHILD_CHECK(bitnet_gpu_preflight(msg, sizeof msg) == BITNET_ERR_CUDA_INIT && strstr(msg, "install the NVIDIA driver"));
    CHILD_CHECK(cpu_path_works());
    return 0;
}

static int child_not_cuda(void) { /* a library that loads but is no driver */
    bitnet_gpu *g = NULL;
    CHILD_CHECK(bitnet_gpu_open(0, &g) == BITNET_ERR_CUDA_SYMBOL);
    CHILD_CHECK(strstr(bitnet_last_error(), "cuInit") != NULL);
    return 0;
}

static int child_fake(void) {
    const char *spec = getenv("BITNET_GPU_FAKE");
    bitnet_gpu_backends b;
    bitnet_gpu *g = NULL;
    char line[4096], msg[2048];
    int cuda = strstr(spec, "cuda") != NULL;
    CHILD_CHECK(bitnet_gpu_backends_get(&b) == BITNET_OK);
    CHILD_CHECK(b.mocked == 1);
    CHILD_CHECK(b.cuda == cuda && b.rocm == (strstr(spec, "rocm") != NULL));
    CHILD_CHECK(b.metal == (strstr(spec, "metal") != NULL) && b.webgpu == (strstr(spec, "webgpu") != NULL));
    CHILD_CHECK(b.device_count == 0 && b.cuda_driver_version == 0 && strstr(b.reason, "BITNET_GPU_FAKE") != NULL);
    CHILD_CHECK(bitnet_gpu_available() == cuda);
    CHILD_CHECK(bitnet_gpu_open(0, &g) == BITNET_ERR_NO_DEVICE && g == NULL);
    CHILD_CHECK(strstr(bitnet_last_error(), "mocked") != NULL);
    CHILD_CHECK(bitnet_gpu_summary(line, sizeof line) == BITNET_OK && strstr(line, "mocked") != NULL);
    CHILD_CHECK(bitnet_gpu_preflight(msg, sizeof msg) == (cuda ? BITNET_OK : BITNET_ERR_NO_DEVICE));
    CHILD_CHECK(strstr(msg, "mocked") != NULL);
    CHILD_CHECK(cpu_path_works());
    return 0;
}

static int child_nvrtc_missing(void) {
    bitnet_gpu_jit_info info;
    int v = 1;
    CHILD_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 0, &info) == BITNET_ERR_NVRTC_NOT_FOUND);
    CHILD_CHECK(strstr(bitnet_last_error(), "BITNET_NVRTC=/nonexistent/libnvrtc.so") != NULL);
    CHILD_CHECK(bitnet_gpu_nvrtc_info(&v, NULL, NULL) == BITNET_ERR_NVRTC_NOT_FOUND);
    CHILD_CHECK(bitnet_gpu_available() == 0);
    return 0;
}

static int child_limit_env(void) {
    uint64_t lim = 0;
    CHILD_CHECK(bitnet_gpu_memory_limit(&lim) == BITNET_OK && lim == (uint64_t)512 << 20);
    return 0;
}
static int child_limit_bad(void) {
    uint64_t lim = 1;
    CHILD_CHECK(bitnet_gpu_memory_limit(&lim) == BITNET_ERR_INVALID_ARG && lim == 0);
    CHILD_CHECK(strstr(bitnet_last_error(), "BITNET_MEMORY_LIMIT") != NULL);
    CHILD_CHECK(bitnet_gpu_set_memory_limit(1 << 20) == BITNET_OK && bitnet_gpu_memory_limit(&lim) == BITNET_OK &&
                lim == 1 << 20);
    return 0;
}

/* BITNET_MEMORY_LIMIT=64MB on a real device, in a fresh process. */
static int child_gpu_limit(void) {
    bitnet_gpu *g = NULL;
    bitnet_devptr a = 0, b = 0;
    char msg[2048];
    if (!bitnet_gpu_available()) {
        bitnet_gpu_preflight(msg, sizeof msg);
        snprintf(child_log, sizeof child_log, "no CUDA GPU: %s", msg);
        return test_require_gpu() ? 1 : CHILD_SKIP;
    }
    CHILD_CHECK(bitnet_gpu_open(0, &g) == BITNET_OK);
    if (!g) return 1;
    CHILD_CHECK(bitnet_gpu_alloc(g, 32u << 20, &a) == BITNET_OK);
    CHILD_CHECK(bitnet_gpu_alloc(g, 48u << 20, &b) == BITNET_ERR_DEVICE_OOM && b == 0);
    CHILD_CHECK(strstr(bitnet_last_error(), "BITNET_MEMORY_LIMIT") != NULL);
    CHILD_CHECK(bitnet_gpu_free(g, a) == BITNET_OK); /* cached; the limit makes the pool give it back */
    CHILD_CHECK(bitnet_gpu_alloc(g, 48u << 20, &b) == BITNET_OK);
    CHILD_CHECK(bitnet_gpu_free(g, b) == BITNET_OK);
    bitnet_gpu_close(g);
    return 0;
}

static void test_libcuda_missing(void) {
    static const char *const env[] = {"BITNET_LIBCUDA=/nonexistent", "BITNET_GPU_FAKE", NULL};
    RUN_CHILD(env, child_libcuda_missing);
}
static void test_libcuda_stub(void) {
    static const char *const env[] = {"BITNET_LIBCUDA=/usr/local/cuda/lib64/stubs/libcuda.so", "BITNET_GPU_FAKE", NULL};
    RUN_CHILD(env, child_libcuda_stub);
}
static void test_libcuda_not_a_driver(void) {
    static const char *const env[] = {"BITNET_LIBCUDA=libm.so.6", "BITNET_GPU_FAKE", NULL};
    RUN_CHILD(env, child_not_cuda);
}
static void test_fake_matrix(void) {
    static const char *const specs[] = {"cuda", "cuda,rocm", "", "rocm", "metal,webgpu", "cuda,rocm,metal,webgpu"};
    size_t i;
    for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char var[64], out[8192];
        const char *env[2];
        int rc;
        snprintf(var, sizeof var, "BITNET_GPU_FAKE=%s", specs[i]);
        env[0] = var;
        env[1] = NULL;
        rc = run_child(env, child_fake, out, sizeof out);
        TEST_CHECKF(rc == 0, "BITNET_GPU_FAKE=\"%s\": child exited %d:\n%s", specs[i], rc, out);
    }
}
static void test_nvrtc_missing(void) {
    static const char *const env[] = {"BITNET_NVRTC=/nonexistent/libnvrtc.so", "BITNET_GPU_FAKE", NULL};
    RUN_CHILD(env, child_nvrtc_missing);
}
static void test_memory_limit_env(void) {
    static const char *const ok_env[] = {"BITNET_MEMORY_LIMIT=512MB", NULL};
    static const char *const bad_env[] = {"BITNET_MEMORY_LIMIT=lots", NULL};
    RUN_CHILD(ok_env, child_limit_env);
    RUN_CHILD(bad_env, child_limit_bad);
}
static void test_gpu_memory_limit_env(void) {
    static const char *const env[] = {"BITNET_MEMORY_LIMIT=64MB", "BITNET_GPU_FAKE", NULL};
    RUN_CHILD(env, child_gpu_limit);
}

/* ---- no GPU needed ------------------------------------------------------------------------- */
static void test_api_validation(void) {
    bitnet_gpu_stats st;
    bitnet_gpu_jit_info info;
    bitnet_devptr p = 0;
    bitnet_gpu_kernel *k = NULL;
    unsigned dims[3] = {1, 1, 1};
    int i;
    TEST_CHECK(bitnet_gpu_open(0, NULL) == BITNET_ERR_NULL_POINTER);
    bitnet_gpu_close(NULL);
    bitnet_gpu_module_free(NULL);
    bitnet_gpu_graph_free(NULL);
    TEST_CHECK(bitnet_gpu_sync(NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_alloc(NULL, 16, &p) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_free(NULL, 1) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_upload(NULL, 1, &p, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_download(NULL, &p, 1, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_copy(NULL, 1, 2, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_memset(NULL, 1, 0, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_module_load(NULL, "x", "", NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_kernel_get(NULL, "k", &k) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_launch(NULL, k, dims, dims, 0, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_builtin_kernel(NULL, "bitnet_k_fill_u32", &k) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_pool_stats_get(NULL, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_pool_trim(NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_pool_leaks(NULL, NULL, 0, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_graph_begin(NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_timer_end(NULL, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_summary(NULL, 10) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_backends_get(NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_device_info_get(0, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_stats_get(NULL, &st) == BITNET_OK); /* process totals */
    TEST_CHECK(bitnet_gpu_raw_stream(NULL) == NULL && bitnet_gpu_raw_module(NULL) == NULL && bitnet_gpu_ordinal(NULL) == -1);
    TEST_CHECK(bitnet_gpu_jit_builtin(-1, "sm_80", 0, &info) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_jit_builtin(bitnet_gpu_builtin_count(), "sm_80", 0, &info) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_jit_source("", "", "sm_80", 0, &info) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gpu_jit_source(NULL, "", "sm_80", 0, &info) == BITNET_ERR_NULL_POINTER);
    {
        static const char *const bad[] = {"sm_", "90", "sm_9x", "compute_", "sm_8", "sm_80b", "SM_80", ""};
        size_t j;
        for (j = 0; j < sizeof bad / sizeof bad[0]; j++)
            TEST_CHECKF(bitnet_gpu_jit_builtin(0, bad[j], 0, &info) == BITNET_ERR_INVALID_ARG, "arch '%s'", bad[j]);
        TEST_CHECK(bitnet_gpu_jit_builtin(0, NULL, 0, &info) == BITNET_ERR_NULL_POINTER);
    }
    TEST_CHECK(bitnet_gpu_builtin_count() >= 1);
    for (i = 0; i < bitnet_gpu_builtin_count(); i++)
        TEST_CHECK(bitnet_gpu_builtin_name(i) != NULL && bitnet_gpu_builtin_min_sm(i) >= 30);
    TEST_CHECK(bitnet_gpu_builtin_name(-1) == NULL && bitnet_gpu_builtin_name(bitnet_gpu_builtin_count()) == NULL);
}

static int nvrtc_version, nvrtc_min, nvrtc_max;
static const char *nvrtc_missing(void) {
    static char why[2048];
    if (bitnet_gpu_nvrtc_info(&nvrtc_version, &nvrtc_min, &nvrtc_max) == BITNET_OK) return NULL;
    snprintf(why, sizeof why, "%.150s%s", bitnet_last_error(), strlen(bitnet_last_error()) > 150 ? "..." : "");
    return why;
}

/* Every built-in module for one arch, without the cache (with the 'a' target where the module
   asks for it on this arch and NVRTC has one: CUDA 12 and newer). */
static void compile_all(int cc) {
    const char *why = nvrtc_missing();
    char arch[16], want[24];
    int i;
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    if (cc < nvrtc_min)
        TEST_SKIP("NVRTC %d.%d starts at sm_%d and cannot build sm_%d (CUDA 13 dropped it); BITNET_NVRTC can point at an "
                  "older NVRTC", nvrtc_version / 1000, nvrtc_version % 1000 / 10, nvrtc_min, cc);
    snprintf(arch, sizeof arch, "sm_%d", cc);
    for (i = 0; i < bitnet_gpu_builtin_count(); i++) {
        bitnet_gpu_jit_info info;
        bitnet_result r;
        if (cc < bitnet_gpu_builtin_min_sm(i)) continue;
        r = bitnet_gpu_jit_builtin(i, arch, 0, &info);
        TEST_CHECKF(r == BITNET_OK, "module %s for %s: %s", bitnet_gpu_builtin_name(i), arch, bitnet_last_error());
        if (r != BITNET_OK) continue;
        TEST_CHECK(info.bytes > 0 && !info.from_cache && info.cache_file[0] == 0);
        snprintf(want, sizeof want, "%s%s", arch, bitnet_gpu_builtin_a_sm(i) == cc && nvrtc_version >= 12000 ? "a" : "");
        TEST_CHECKF(strcmp(info.target, want) == 0 && info.cubin == 1, "module %s: target %s cubin %d, want %s",
                    bitnet_gpu_builtin_name(i), info.target, info.cubin, want);
    }
}
static void test_nvrtc_sm70(void) { compile_all(70); }
static void test_nvrtc_sm80(void) { compile_all(80); }
static void test_nvrtc_sm90(void) { compile_all(90); }

/* An arch NVRTC does not know gives PTX for the highest one below it. */
static void test_nvrtc_ptx_fallback(void) {
    bitnet_gpu_jit_info info;
    char arch[16], want[32];
    const char *why = nvrtc_missing();
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    snprintf(arch, sizeof arch, "sm_%d", nvrtc_min + 1);
    snprintf(want, sizeof want, "compute_%d", nvrtc_min);
    TEST_CHECKF(bitnet_gpu_jit_builtin(0, arch, 0, &info) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECKF(strcmp(info.target, want) == 0 && info.cubin == 0, "%s -> %s", arch, info.target);
    /* Older than every NVRTC here (an older NVRTC beside the newest may cover sm_70). */
    TEST_CHECK(bitnet_gpu_jit_source("extern \"C\" __global__ void k(void) {}", "", "sm_30", 0, &info) ==
               BITNET_ERR_UNSUPPORTED);
    TEST_CHECK(strstr(bitnet_last_error(), "BITNET_NVRTC") != NULL);
}

static char tmp_root[256];
static void make_tmp(char *out, size_t cap, const char *name) {
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/bitnet-test-gpu-XXXXXX");
        if (!mkdtemp(tmp_root)) tmp_root[0] = 0;
    }
    snprintf(out, cap, "%s/%s", tmp_root, name);
}
static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}
static void poke_file(const char *path, long offset, unsigned char xor_with) {
    FILE *f = fopen(path, "r+b");
    int c;
    if (!f) return;
    fseek(f, offset, SEEK_SET);
    c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ xor_with, f);
    fclose(f);
}

static void test_jit_cache(void) {
    bitnet_gpu_jit_info a, b, c;
    char dir[512], ro[512], blocker[512];
    const char *why = nvrtc_missing();
    FILE *f;
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    make_tmp(dir, sizeof dir, "cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
    unsetenv("BITNET_CUDA_CACHE");
    /* miss, then hit with the same binary */
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &a) == BITNET_OK && !a.from_cache);
    TEST_CHECK(strncmp(a.cache_file, dir, strlen(dir)) == 0 && file_size(a.cache_file) == (long)a.bytes + 32);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &b) == BITNET_OK && b.from_cache);
    TEST_CHECK(b.binary_hash == a.binary_hash && b.bytes == a.bytes && strcmp(b.cache_file, a.cache_file) == 0);
    /* a flipped payload byte, a bad header, a truncated file, trailing bytes: each a miss, then rewritten */
    poke_file(a.cache_file, 40, 0x5a);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache && c.binary_hash == a.binary_hash);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && c.from_cache && c.binary_hash == a.binary_hash);
    poke_file(a.cache_file, 1, 0xff);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache);
    TEST_CHECK(truncate(a.cache_file, 20) == 0);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache && c.binary_hash == a.binary_hash);
    if ((f = fopen(a.cache_file, "ab")) != NULL) fputc(0, f), fclose(f);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && c.from_cache && c.binary_hash == a.binary_hash);
    /* other arch or options: another entry */
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_90", 1, &c) == BITNET_OK && !c.from_cache && strcmp(c.cache_file, a.cache_file));
    TEST_CHECK(bitnet_gpu_jit_source("extern \"C\" __global__ void k(int *p) { p[0] = N; }", "-DN=1", "sm_80", 1, &b) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_jit_source("extern \"C\" __global__ void k(int *p) { p[0] = N; }", "-DN=2", "sm_80", 1, &c) == BITNET_OK);
    TEST_CHECK(!b.from_cache && !c.from_cache && strcmp(b.cache_file, c.cache_file) != 0 && b.binary_hash != c.binary_hash);
    /* a folder that cannot be written: compiles, no entry, no error */
    if (geteuid() != 0) {
        make_tmp(ro, sizeof ro, "readonly");
        mkdir(ro, 0500);
        chmod(ro, 0500);
    } else { /* root writes anywhere: a path under a plain file cannot be created by anyone */
        make_tmp(blocker, sizeof blocker, "blocker");
        if ((f = fopen(blocker, "wb")) != NULL) fclose(f);
        snprintf(ro, sizeof ro, "%.400s/sub", blocker);
    }
    setenv("BITNET_CACHE_DIR", ro, 1);
    bitnet_clear_error();
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache && c.binary_hash == a.binary_hash);
    TEST_CHECK(file_size(c.cache_file) == -1 && bitnet_last_error()[0] == 0);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && !c.from_cache);
    /* where the folder comes from: XDG_CACHE_HOME, then HOME; BITNET_CUDA_CACHE=0 turns it off */
    {
        char xdg[512], home[512], want[600];
        const char *old_home = getenv("HOME"), *old_xdg = getenv("XDG_CACHE_HOME");
        char saved_home[512] = "", saved_xdg[512] = "";
        if (old_home) snprintf(saved_home, sizeof saved_home, "%s", old_home);
        if (old_xdg) snprintf(saved_xdg, sizeof saved_xdg, "%s", old_xdg);
        unsetenv("BITNET_CACHE_DIR");
        make_tmp(xdg, sizeof xdg, "xdg");
        setenv("XDG_CACHE_HOME", xdg, 1);
        snprintf(want, sizeof want, "%s/bitnet/", xdg);
        TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && strncmp(c.cache_file, want, strlen(want)) == 0);
        unsetenv("XDG_CACHE_HOME");
        make_tmp(home, sizeof home, "home");
        setenv("HOME", home, 1);
        snprintf(want, sizeof want, "%s/.cache/bitnet/", home);
        TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && strncmp(c.cache_file, want, strlen(want)) == 0);
        TEST_CHECK(file_size(c.cache_file) > 32);
        setenv("BITNET_CUDA_CACHE", "0", 1);
        TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &c) == BITNET_OK && c.cache_file[0] == 0 && !c.from_cache);
        unsetenv("BITNET_CUDA_CACHE");
        if (saved_home[0]) setenv("HOME", saved_home, 1);
        else unsetenv("HOME");
        if (saved_xdg[0]) setenv("XDG_CACHE_HOME", saved_xdg, 1);
    }
    make_tmp(dir, sizeof dir, "cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
}

/* BITNET_CUDA_KERNELS against the compiled modules: bitnet_gpu_builtin_kernel finds a kernel through
   that list, so a kernel left out of it, or listed under an old name, would otherwise fail only on a
   GPU. Every listed kernel must be a bitnet_k_ function symbol of its module's sm_90 cubin (read from
   the JIT cache: a 32-byte header, then the ELF), and every such symbol must be listed. */
#define KL_MAX 256
static int kl_n;
static char kl_name[KL_MAX][64], kl_mod[KL_MAX][32];
static void kl_read(void) { /* the X(kernel, module) rows of bitnet_cuda_kernels.h */
    char line[512], *a, *b, *c;
    FILE *f = fopen("bitnet_cuda_kernels.h", "r");
    kl_n = 0;
    if (!f) return;
    while (fgets(line, sizeof line, f) && kl_n < KL_MAX)
        if ((a = strstr(line, "    X(bitnet_k_")) == line && (b = strchr(a, ',')) && (c = strchr(b, ')'))) {
            *b = *c = 0;
            snprintf(kl_name[kl_n], sizeof kl_name[0], "%.63s", a + 6);
            snprintf(kl_mod[kl_n++], sizeof kl_mod[0], "%.31s", b + 2);
        }
    fclose(f);
}
static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    while (n--) v = v << 8 | p[n];
    return v;
}
/* The names of the ELF64 image's function symbols that start with bitnet_k_ (NULL-terminated, in out). */
static int elf_kernels(const unsigned char *e, size_t n, const char **out, int cap) {
    uint64_t shoff, i, k;
    int found = 0, shn, shsz;
    if (n < 64 || memcmp(e, "\177ELF", 4) || e[4] != 2) return -1;
    shoff = le(e + 0x28, 8), shsz = (int)le(e + 0x3a, 2), shn = (int)le(e + 0x3c, 2);
    if (shoff > n || (uint64_t)shn * (uint64_t)shsz > n - shoff || shsz < 64) return -1;
    for (i = 0; i < (uint64_t)shn; i++) {
        const unsigned char *sh = e + shoff + i * (uint64_t)shsz, *st;
        uint64_t off = le(sh + 0x18, 8), size = le(sh + 0x20, 8), link = le(sh + 0x28, 4), soff, ssize;
        if (le(sh + 4, 4) != 2 || off > n || size > n - off || link >= (uint64_t)shn) continue; /* SHT_SYMTAB */
        st = e + shoff + link * (uint64_t)shsz, soff = le(st + 0x18, 8), ssize = le(st + 0x20, 8);
        if (soff > n || ssize > n - soff) return -1;
        for (k = 0; k + 24 <= size; k += 24) {
            const unsigned char *sym = e + off + k;
            uint64_t name = le(sym, 4);
            const char *s = (const char *)e + soff + name;
            if ((sym[4] & 15) != 2 || name >= ssize || !memchr(s, 0, (size_t)(ssize - name))) continue; /* STT_FUNC */
            if (strncmp(s, "bitnet_k_", 9) == 0 && found < cap - 1) out[found++] = s;
        }
    }
    out[found] = NULL;
    return found;
}
static void test_builtin_kernel_list(void) {
    char dir[512];
    const char *why = nvrtc_missing(), *syms[KL_MAX];
    int i, j, k, listed = 0;
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    if (nvrtc_min > 90) TEST_SKIP("NVRTC %d cannot build sm_90", nvrtc_version);
    kl_read();
    TEST_CHECKF(kl_n > 30, "%d kernels read from bitnet_cuda_kernels.h (run from the repository root)", kl_n);
    make_tmp(dir, sizeof dir, "kernel-list");
    setenv("BITNET_CACHE_DIR", dir, 1);
    unsetenv("BITNET_CUDA_CACHE");
    for (i = 0; i < bitnet_gpu_builtin_count(); i++) {
        bitnet_gpu_jit_info info;
        unsigned char *img = NULL;
        long size;
        FILE *f;
        int n = -1;
        if (bitnet_gpu_builtin_min_sm(i) > 90) continue;
        TEST_CHECKF(bitnet_gpu_jit_builtin(i, "sm_90", 1, &info) == BITNET_OK && info.cubin, "module %s: %s",
                    bitnet_gpu_builtin_name(i), bitnet_last_error());
        size = file_size(info.cache_file);
        if (size == (long)info.bytes + 32 && (img = (unsigned char *)malloc((size_t)size)) && (f = fopen(info.cache_file, "rb"))) {
            if (fread(img, 1, (size_t)size, f) == (size_t)size) n = elf_kernels(img + 32, info.bytes, syms, KL_MAX);
            fclose(f);
        }
        TEST_CHECKF(n > 0, "module %s: no kernels read from %s", bitnet_gpu_builtin_name(i), info.cache_file);
        for (k = 0; k < n; k++) {
            for (j = 0; j < kl_n && strcmp(kl_name[j], syms[k]); j++) {}
            TEST_CHECKF(j < kl_n && strcmp(kl_mod[j], bitnet_gpu_builtin_name(i)) == 0,
                        "%s of module %s is not listed under it in BITNET_CUDA_KERNELS", syms[k], bitnet_gpu_builtin_name(i));
        }
        for (j = 0; j < kl_n; j++) {
            if (strcmp(kl_mod[j], bitnet_gpu_builtin_name(i))) continue;
            for (k = 0; k < n && strcmp(kl_name[j], syms[k]); k++) {}
            TEST_CHECKF(k < n, "%s is listed under module %s but not in its cubin", kl_name[j], kl_mod[j]);
            listed++;
        }
        free(img);
    }
    TEST_CHECKF(listed == kl_n, "%d of %d listed kernels belong to a module built for sm_90", listed, kl_n);
}

static void test_jit_fault_nvrtc(void) {
    bitnet_gpu_jit_info info;
    char dir[512];
    const char *why = nvrtc_missing();
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    make_tmp(dir, sizeof dir, "fault-cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
    TEST_CHECK(bitnet_set_fault("nvrtc") == BITNET_OK);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &info) == BITNET_ERR_JIT);
    TEST_CHECK(strstr(bitnet_last_error(), "injected") != NULL);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &info) == BITNET_OK && !info.from_cache);
    TEST_CHECK(bitnet_set_fault("nvrtc") == BITNET_OK); /* a cached module needs no compiler */
    TEST_CHECK(bitnet_gpu_jit_builtin(0, "sm_80", 1, &info) == BITNET_OK && info.from_cache);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
    make_tmp(dir, sizeof dir, "cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
}

static void test_jit_errors_carry_the_log(void) {
    bitnet_gpu_jit_info info;
    const char *why = nvrtc_missing();
    if (why) TEST_SKIP("no NVRTC here: %s", why);
    TEST_CHECK(bitnet_gpu_jit_source("extern \"C\" __global__ void k(int *p) { p[0] = no_such_name; }", "", "sm_80", 0,
                                     &info) == BITNET_ERR_JIT);
    TEST_CHECKF(strstr(bitnet_last_error(), "no_such_name") != NULL, "%s", bitnet_last_error());
    TEST_CHECK(bitnet_gpu_jit_source("extern \"C\" __global__ void k() {}", "--no-such-option", "sm_80", 0, &info) ==
               BITNET_ERR_JIT);
    TEST_CHECKF(strstr(bitnet_last_error(), "no-such-option") != NULL, "%s", bitnet_last_error());
}

/* ---- on a GPU ---------------------------------------------------------------------------------- */
/* nvidia-smi prints 00000000:00:05.0, the driver 0000:00:05.0: compare from the bus number on. */
static const char *pci_tail(const char *id) {
    const char *c = strchr(id, ':');
    return c ? c + 1 : id;
}

static void test_gpu_device_info(void) {
    bitnet_gpu_device_info d;
    int n = 0, i, matched = 0;
    FILE *p;
    char line[1024];
    NEED_GPU();
    TEST_CHECK(bitnet_gpu_device_count(&n) == BITNET_OK && n >= 1);
    for (i = 0; i < n; i++) {
        TEST_CHECK(bitnet_gpu_device_info_get(i, &d) == BITNET_OK);
        TEST_CHECK(d.ordinal == i && d.name[0] && d.cc_major >= 3 && d.total_mem > 0 && d.free_mem <= d.total_mem);
        TEST_CHECK(d.sm_count > 0 && d.max_threads_per_block >= 512 && d.smem_per_block > 0);
        TEST_CHECK(d.smem_per_block_optin >= d.smem_per_block && d.l2_bytes > 0 && d.mem_bus_bits > 0);
        TEST_CHECK(d.mem_bandwidth_gbs > 0 && d.jit_target[0] && d.bf16 == (d.cc_major >= 8));
    }
    TEST_CHECK(bitnet_gpu_device_info_get(n, &d) == BITNET_ERR_INVALID_ARG);
    p = popen("nvidia-smi --query-gpu=pci.bus_id,name,memory.total,compute_cap,clocks.max.memory "
              "--format=csv,noheader,nounits 2>/dev/null", "r");
    while (p && fgets(line, sizeof line, p)) {
        char bus[64], name[256], cap[16];
        double mib, mhz;
        if (sscanf(line, "%63[^,], %255[^,], %lf, %15[^,], %lf", bus, name, &mib, cap, &mhz) != 5) continue;
        for (i = 0; i < n; i++) {
            char want_cap[16];
            if (bitnet_gpu_device_info_get(i, &d) != BITNET_OK || strcasecmp(pci_tail(d.pci_bus_id), pci_tail(bus)) != 0)
                continue;
            matched++;
            snprintf(want_cap, sizeof want_cap, "%d.%d", d.cc_major, d.cc_minor);
            TEST_CHECKF(strcmp(name, d.name) == 0, "name: nvidia-smi '%s', bitnet '%s'", name, d.name);
            TEST_CHECKF(strcmp(cap, want_cap) == 0, "compute capability: nvidia-smi %s, bitnet %s", cap, want_cap);
            TEST_CHECKF(fabs(mib - (double)d.total_mem / 1048576.0) <= 0.01 * mib, "memory: nvidia-smi %.0f MiB, bitnet %.0f MiB",
                        mib, (double)d.total_mem / 1048576.0);
            TEST_CHECKF(fabs(mhz - d.mem_clock_khz / 1000.0) <= 0.02 * mhz, "memory clock: nvidia-smi %.0f MHz, bitnet %d MHz",
                        mhz, d.mem_clock_khz / 1000);
            printf("  device %d matches nvidia-smi: %s, cc %s, %.0f MiB, memory clock %.0f MHz, %.0f GB/s theoretical\n", i,
                   name, cap, mib, mhz, d.mem_bandwidth_gbs);
        }
    }
    if (p) pclose(p);
    if (!matched && test_require_gpu()) TEST_CHECKF(0, "no device matched nvidia-smi's list (is nvidia-smi on the PATH?)");
    else if (!matched) printf("  note: nvidia-smi unavailable, not compared\n");
}

static void test_gpu_copies(void) {
    enum { N = 1000003 };
    unsigned char *src, *dst;
    bitnet_devptr a = 0, b = 0;
    bitnet_gpu_stats s0, s1;
    size_t i;
    NEED_GPU();
    src = (unsigned char *)malloc(N);
    dst = (unsigned char *)malloc(N);
    for (i = 0; i < N; i++) src[i] = (unsigned char)test_rand_u64();
    TEST_CHECK(bitnet_gpu_stats_get(G, &s0) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(G, N, &a) == BITNET_OK && bitnet_gpu_alloc(G, N, &b) == BITNET_OK && a && b && a != b);
    TEST_CHECK(bitnet_gpu_upload(G, a, src, N) == BITNET_OK);
    memset(dst, 0, N);
    TEST_CHECK(bitnet_gpu_download(G, dst, a, N) == BITNET_OK && memcmp(src, dst, N) == 0);
    TEST_CHECK(bitnet_gpu_copy(G, b, a, N) == BITNET_OK && bitnet_gpu_memset(G, b + 7, 0x3c, 1000) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_download(G, dst, b, N) == BITNET_OK);
    for (i = 7; i < 1007; i++) src[i] = 0x3c;
    TEST_CHECK(memcmp(src, dst, N) == 0);
    TEST_CHECK(bitnet_gpu_stats_get(G, &s1) == BITNET_OK);
    TEST_CHECK(s1.h2d_count - s0.h2d_count == 1 && s1.h2d_bytes - s0.h2d_bytes == N);
    TEST_CHECK(s1.d2h_count - s0.d2h_count == 2 && s1.d2h_bytes - s0.d2h_bytes == 2 * (uint64_t)N);
    TEST_CHECK(s1.d2d_count - s0.d2d_count == 1 && s1.d2d_bytes - s0.d2d_bytes == N);
    TEST_CHECK(bitnet_gpu_upload(G, a, src, 0) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gpu_download(G, NULL, a, 8) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gpu_alloc(G, 0, &b) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_gpu_free(G, a) == BITNET_OK && bitnet_gpu_free(G, a) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_free(G, b) == BITNET_OK && bitnet_gpu_free(G, 12345) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_free(G, 0) == BITNET_OK);
    free(src);
    free(dst);
}

/* fill then add on n values, returning the launch status. */
static bitnet_result fill_add(bitnet_gpu *g, bitnet_devptr p, uint64_t n, uint32_t v, uint32_t add) {
    bitnet_gpu_kernel *fill, *addk;
    unsigned grid[3] = {0, 1, 1}, block[3] = {256, 1, 1};
    void *args[3];
    if (bitnet_gpu_builtin_kernel(g, "bitnet_k_fill_u32", &fill) != BITNET_OK) return BITNET_ERR_KERNEL_NOT_FOUND;
    if (bitnet_gpu_builtin_kernel(g, "bitnet_k_add_u32", &addk) != BITNET_OK) return BITNET_ERR_KERNEL_NOT_FOUND;
    grid[0] = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    args[0] = &p, args[1] = &v, args[2] = &n;
    if (bitnet_gpu_launch(g, fill, grid, block, 0, args) != BITNET_OK) return BITNET_ERR_LAUNCH;
    args[1] = &add;
    return bitnet_gpu_launch(g, addk, grid, block, 0, args);
}

static void test_gpu_builtin_kernels(void) {
    enum { N = 100003 };
    uint32_t *h;
    bitnet_devptr p = 0;
    bitnet_gpu_stats s0, s1, t0, t1;
    bitnet_gpu_kernel *k = NULL;
    size_t i, bad = 0;
    int j, fill_seen = 0;
    NEED_GPU();
    h = (uint32_t *)malloc(N * 4);
    TEST_CHECK(bitnet_gpu_builtin_load_all(G) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_builtin_kernel(G, "bitnet_k_nope", &k) == BITNET_ERR_KERNEL_NOT_FOUND && k == NULL);
    TEST_CHECK(bitnet_gpu_stats_get(G, &s0) == BITNET_OK && bitnet_gpu_stats_get(NULL, &t0) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(G, N * 4, &p) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_memset(G, p, 0xab, N * 4) == BITNET_OK); /* poison */
    TEST_CHECK(fill_add(G, p, N, 0x12345678u, 5) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_download(G, h, p, N * 4) == BITNET_OK);
    for (i = 0; i < N; i++) bad += h[i] != 0x1234567du;
    TEST_CHECKF(bad == 0, "%zu of %d values wrong", bad, N);
    TEST_CHECK(bitnet_gpu_stats_get(G, &s1) == BITNET_OK && bitnet_gpu_stats_get(NULL, &t1) == BITNET_OK);
    TEST_CHECK(s1.launches - s0.launches == 2 && t1.launches - t0.launches == 2);
    for (j = 0; j < s1.n_kernels; j++)
        if (strcmp(s1.kernels[j].name, "bitnet_k_fill_u32") == 0) {
            uint64_t before = 0;
            int m;
            for (m = 0; m < s0.n_kernels; m++)
                if (strcmp(s0.kernels[m].name, "bitnet_k_fill_u32") == 0) before = s0.kernels[m].launches;
            TEST_CHECK(s1.kernels[j].launches - before == 1);
            fill_seen = 1;
        }
    TEST_CHECK(fill_seen);
    TEST_CHECK(bitnet_gpu_free(G, p) == BITNET_OK);
    free(h);
}

/* 8 threads x 200 rounds of fill + add + download, on one shared handle and on a handle each. */
typedef struct { bitnet_gpu *g; int id, own, rounds, bad, errors; } round_job;
static void *round_worker(void *arg) {
    round_job *j = (round_job *)arg;
    bitnet_gpu *g = j->g;
    uint64_t n = 65536 + 2 * (uint64_t)j->id + 1;
    uint32_t *h = (uint32_t *)malloc(n * 4);
    bitnet_devptr p = 0;
    int r;
    if (j->own && bitnet_gpu_open(0, &g) != BITNET_OK) g = NULL;
    if (!g || !h || bitnet_gpu_alloc(g, n * 4, &p) != BITNET_OK) {
        j->errors++;
        free(h);
        return NULL;
    }
    for (r = 0; r < j->rounds; r++) {
        uint32_t v = 0x01000000u * (uint32_t)(j->id + 1) + (uint32_t)r * 977u, want = v + (uint32_t)r + 1;
        uint64_t i;
        memset(h, 0, n * 4);
        if (fill_add(g, p, n, v, (uint32_t)r + 1) != BITNET_OK || bitnet_gpu_download(g, h, p, n * 4) != BITNET_OK) {
            j->errors++;
            continue;
        }
        for (i = 0; i < n; i++)
            if (h[i] != want) {
                j->bad++;
                break;
            }
    }
    bitnet_gpu_free(g, p);
    if (j->own) bitnet_gpu_close(g);
    free(h);
    return NULL;
}
static void run_rounds(int own) {
    pthread_t t[8];
    round_job jobs[8];
    int i, bad = 0, errors = 0;
    const char *env = getenv("BITNET_TEST_THREAD_ROUNDS"); /* fewer under compute-sanitizer (tools/gpu_sanitize.sh) */
    int rounds = env && atoi(env) > 0 ? atoi(env) : 200;
    for (i = 0; i < 8; i++) {
        jobs[i].g = G, jobs[i].id = i, jobs[i].own = own, jobs[i].rounds = rounds, jobs[i].bad = jobs[i].errors = 0;
        pthread_create(&t[i], NULL, round_worker, &jobs[i]);
    }
    for (i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        bad += jobs[i].bad;
        errors += jobs[i].errors;
    }
    TEST_CHECKF(bad == 0 && errors == 0, "%s handle: %d rounds with wrong data, %d errors (%s)", own ? "own" : "shared", bad,
                errors, bitnet_last_error());
}
static void test_gpu_threads_8x200_shared(void) {
    NEED_GPU();
    run_rounds(0);
}
static void test_gpu_threads_8x200_own(void) {
    NEED_GPU();
    run_rounds(1);
}

static void test_gpu_pool(void) {
    bitnet_gpu *g = NULL;
    bitnet_gpu_pool_config cfg;
    bitnet_gpu_pool_stats st;
    bitnet_devptr p[3] = {0, 0, 0}, q = 0;
    char report[8192], addr[32];
    size_t live = 99;
    NEED_GPU();
    setenv("BITNET_POOL_BACKTRACE", "1", 1);
    TEST_CHECK(bitnet_gpu_open(0, &g) == BITNET_OK);
    unsetenv("BITNET_POOL_BACKTRACE");
    if (!g) return;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_cached_per_class = 2;
    TEST_CHECK(bitnet_gpu_pool_configure(g, &cfg) == BITNET_OK);
    cfg.tracking = 5;
    TEST_CHECK(bitnet_gpu_pool_configure(g, &cfg) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gpu_alloc(g, 1000, &p[0]) == BITNET_OK && bitnet_gpu_alloc(g, 1000, &p[1]) == BITNET_OK &&
               bitnet_gpu_alloc(g, 1001, &p[2]) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_pool_stats_get(g, &st) == BITNET_OK);
    TEST_CHECK(st.allocations == 3 && st.cache_misses == 3 && st.cache_hits == 0 && st.current == 3001 && st.peak == 3001);
    TEST_CHECK(st.total_allocated == 3001 && st.reserved == 3 * 1024 && st.device == 0);
    /* leak report: every live allocation with address, size, age and stack */
    TEST_CHECK(bitnet_gpu_pool_leaks(g, report, sizeof report, &live) == BITNET_OK && live == 3);
    snprintf(addr, sizeof addr, "0x%llx 1001 bytes, age", p[2]);
    TEST_CHECKF(strstr(report, addr) != NULL, "report:\n%s", report);
#if defined(__GLIBC__)
    TEST_CHECKF(strstr(report, "#0 ") != NULL, "no call stack in:\n%s", report);
#endif
    TEST_CHECK(bitnet_gpu_free(g, p[0]) == BITNET_OK && bitnet_gpu_free(g, p[1]) == BITNET_OK &&
               bitnet_gpu_free(g, p[2]) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_pool_stats_get(g, &st) == BITNET_OK);
    TEST_CHECK(st.frees == 3 && st.current == 0 && st.cached == 2 * 1024 && st.reserved == 2 * 1024);
    TEST_CHECK(bitnet_gpu_alloc(g, 900, &q) == BITNET_OK && (q == p[0] || q == p[1] || q == p[2]));
    TEST_CHECK(bitnet_gpu_pool_stats_get(g, &st) == BITNET_OK && st.cache_hits == 1 && st.cached == 1024);
    TEST_CHECK(bitnet_gpu_pool_trim(g) == BITNET_OK && bitnet_gpu_pool_stats_get(g, &st) == BITNET_OK);
    TEST_CHECK(st.cached == 0 && st.reserved == 1024 && st.reserved_peak == 3 * 1024);
    TEST_CHECK(bitnet_gpu_free(g, q) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_pool_leaks(g, report, sizeof report, &live) == BITNET_OK && live == 0 && report[0] == 0);
    /* size classes: big and odd sizes round up by at most a quarter */
    TEST_CHECK(bitnet_gpu_alloc(g, 5000000, &q) == BITNET_OK && bitnet_gpu_pool_stats_get(g, &st) == BITNET_OK);
    TEST_CHECK(st.reserved >= 5000000 && st.reserved <= 5000000 + 5000000 / 4 + 1024);
    TEST_CHECK(bitnet_gpu_free(g, q) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(g, 4096, &q) == BITNET_OK); /* left live: close reports and frees it */
    bitnet_gpu_close(g);
}

static void test_gpu_memory_limit_api(void) {
    bitnet_gpu *g = NULL;
    bitnet_gpu_pool_stats st;
    bitnet_devptr a = 0, b = 0;
    uint64_t old = 0;
    NEED_GPU();
    TEST_CHECK(bitnet_gpu_memory_limit(&old) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_pool_trim(G) == BITNET_OK && bitnet_gpu_pool_stats_get(G, &st) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_open(0, &g) == BITNET_OK);
    if (!g) return;
    TEST_CHECK(bitnet_gpu_set_memory_limit(st.reserved + (32u << 20)) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(g, 16u << 20, &a) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(g, 24u << 20, &b) == BITNET_ERR_DEVICE_OOM && b == 0);
    TEST_CHECK(strstr(bitnet_last_error(), "BITNET_MEMORY_LIMIT") != NULL);
    TEST_CHECK(bitnet_gpu_alloc(g, 8u << 20, &b) == BITNET_OK); /* still usable after the error */
    TEST_CHECK(bitnet_gpu_set_memory_limit(old) == BITNET_OK);
    bitnet_gpu_free(g, a);
    bitnet_gpu_free(g, b);
    bitnet_gpu_close(g);
}

static void test_gpu_fault_injection(void) {
    bitnet_devptr a = 0, b = 0, c = 0;
    bitnet_gpu_module *m = NULL;
    NEED_GPU();
    TEST_CHECK(bitnet_set_fault("device_alloc:2") == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(G, 64, &a) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_alloc(G, 64, &b) == BITNET_ERR_DEVICE_OOM && strstr(bitnet_last_error(), "injected"));
    TEST_CHECK(bitnet_gpu_alloc(G, 64, &c) == BITNET_OK);
    TEST_CHECK(bitnet_set_fault("module_load") == BITNET_OK);
    TEST_CHECK(bitnet_gpu_module_load(G, "extern \"C\" __global__ void k() {}", "", &m) == BITNET_ERR_MODULE_LOAD && !m);
    TEST_CHECK(strstr(bitnet_last_error(), "injected") != NULL);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
    TEST_CHECK(bitnet_gpu_module_load(G, "extern \"C\" __global__ void k() {}", "", &m) == BITNET_OK && m);
    bitnet_gpu_module_free(m);
    bitnet_gpu_free(G, a);
    bitnet_gpu_free(G, c);
}

/* A user's own kernel through the same JIT and launch path; dynamic shared memory past 48 KiB. */
static const char custom_src[] =
    "extern \"C\" __global__ void mix(unsigned *out, const unsigned *x, unsigned a, unsigned b, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = a * x[i] + (i ^ b) + BIAS;\n"
    "}\n"
    "extern \"C\" __global__ void stage(unsigned *out, int words) {\n"
    "    extern __shared__ unsigned s[];\n"
    "    for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = i * 3u + 1u;\n"
    "    __syncthreads();\n"
    "    for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = s[words - 1 - i];\n"
    "}\n";

static void test_gpu_custom_kernel(void) {
    enum { N = 12345 };
    unsigned x[N], y[N];
    bitnet_gpu_module *m = NULL;
    bitnet_gpu_kernel *mix = NULL, *stage = NULL, *none = NULL;
    bitnet_gpu_jit_info info;
    bitnet_gpu_device_info d;
    bitnet_devptr dx = 0, dy = 0;
    unsigned a = 2654435761u, b = 0x5bd1e995u, grid[3] = {(N + 127) / 128, 1, 1}, block[3] = {128, 1, 1};
    int n = N, i, bad = 0;
    void *args[5];
    NEED_GPU();
    for (i = 0; i < N; i++) x[i] = (unsigned)test_rand_u64();
    TEST_CHECK(bitnet_gpu_module_load(G, custom_src, "-DBIAS=7u", &m) == BITNET_OK);
    if (!m) return;
    TEST_CHECK(bitnet_gpu_module_jit_info(m, &info) == BITNET_OK && info.bytes > 0);
    TEST_CHECK(bitnet_gpu_kernel_get(m, "mix", &mix) == BITNET_OK && bitnet_gpu_kernel_get(m, "stage", &stage) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_kernel_get(m, "missing", &none) == BITNET_ERR_KERNEL_NOT_FOUND && none == NULL);
    TEST_CHECK(bitnet_gpu_raw_module(m) && bitnet_gpu_raw_function(mix) && bitnet_gpu_raw_stream(G) && bitnet_gpu_raw_context(G));
    TEST_CHECK(bitnet_gpu_alloc(G, N * 4, &dx) == BITNET_OK && bitnet_gpu_alloc(G, N * 4, &dy) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_upload(G, dx, x, N * 4) == BITNET_OK && bitnet_gpu_memset(G, dy, 0xee, N * 4) == BITNET_OK);
    args[0] = &dy, args[1] = &dx, args[2] = &a, args[3] = &b, args[4] = &n;
    TEST_CHECK(bitnet_gpu_launch(G, mix, grid, block, 0, args) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_download(G, y, dy, N * 4) == BITNET_OK);
    for (i = 0; i < N; i++) bad += y[i] != a * x[i] + ((unsigned)i ^ b) + 7u;
    TEST_CHECKF(bad == 0, "%d of %d wrong", bad, N);
    /* launch checks */
    block[0] = 4096;
    TEST_CHECK(bitnet_gpu_launch(G, mix, grid, block, 0, args) == BITNET_ERR_INVALID_ARG);
    block[0] = 128, grid[0] = 0;
    TEST_CHECK(bitnet_gpu_launch(G, mix, grid, block, 0, args) == BITNET_ERR_INVALID_ARG);
    grid[0] = 1;
    TEST_CHECK(bitnet_gpu_launch(G, mix, grid, block, 1u << 30, args) == BITNET_ERR_INVALID_ARG);
    /* 64 KiB of dynamic shared memory needs the opt-in, done by the launch path */
    TEST_CHECK(bitnet_gpu_device_info_get(0, &d) == BITNET_OK);
    if (d.smem_per_block_optin >= 65536) {
        int words = N; /* 48 KiB of data in a 64 KiB allocation of shared memory */
        args[0] = &dy, args[1] = &words;
        block[0] = 256;
        TEST_CHECKF(bitnet_gpu_launch(G, stage, grid, block, 65536, args) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECK(bitnet_gpu_download(G, y, dy, (size_t)words * 4) == BITNET_OK);
        for (i = 0, bad = 0; i < words; i++) bad += y[i] != (unsigned)(words - 1 - i) * 3u + 1u;
        TEST_CHECKF(bad == 0, "%d of %d wrong after the shared-memory kernel", bad, words);
    }
    TEST_CHECK(bitnet_gpu_module_load(G, "extern \"C\" __global__ void k() { oops }", "", &m) == BITNET_ERR_JIT);
    TEST_CHECK(strstr(bitnet_last_error(), "oops") != NULL);
    bitnet_gpu_free(G, dx);
    bitnet_gpu_free(G, dy);
}

static void test_gpu_jit_cache_on_device(void) {
    bitnet_gpu_module *m1 = NULL, *m2 = NULL;
    bitnet_gpu_jit_info a, b;
    char dir[512];
    NEED_GPU();
    make_tmp(dir, sizeof dir, "device-cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
    TEST_CHECK(bitnet_gpu_module_load(G, custom_src, "-DBIAS=1u", &m1) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_module_load(G, custom_src, "-DBIAS=1u", &m2) == BITNET_OK);
    if (m1 && m2) {
        TEST_CHECK(bitnet_gpu_module_jit_info(m1, &a) == BITNET_OK && bitnet_gpu_module_jit_info(m2, &b) == BITNET_OK);
        TEST_CHECK(!a.from_cache && b.from_cache && a.binary_hash == b.binary_hash);
        printf("  custom module %s: compiled in %.1f ms, from the cache in %.2f ms\n", a.target, a.ms, b.ms);
    }
    bitnet_gpu_module_free(m1);
    bitnet_gpu_module_free(m2);
    make_tmp(dir, sizeof dir, "cache");
    setenv("BITNET_CACHE_DIR", dir, 1);
}

static void test_gpu_timing_and_graphs(void) {
    enum { N = 4099 };
    uint32_t h[N];
    bitnet_devptr p = 0;
    bitnet_gpu_graph *graph = NULL;
    bitnet_gpu_stats s0, s1;
    double ms = -1;
    int i, j, bad = 0;
    NEED_GPU();
    TEST_CHECK(bitnet_gpu_alloc(G, sizeof h, &p) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_stats_reset(G) == BITNET_OK && bitnet_gpu_set_timing(G, 1) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_timer_begin(G) == BITNET_OK);
    for (i = 0; i < 10; i++) TEST_CHECK(fill_add(G, p, N, 1, 2) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_timer_end(G, &ms) == BITNET_OK && ms > 0);
    TEST_CHECK(bitnet_gpu_sync(G) == BITNET_OK && bitnet_gpu_stats_get(G, &s0) == BITNET_OK);
    TEST_CHECK(s0.launches == 20 && s0.n_kernels == 2);
    for (j = 0; j < s0.n_kernels; j++)
        TEST_CHECKF(s0.kernels[j].launches == 10 && s0.kernels[j].timed == 10 && s0.kernels[j].ms > 0, "%s: %llu %llu %g",
                    s0.kernels[j].name, (unsigned long long)s0.kernels[j].launches,
                    (unsigned long long)s0.kernels[j].timed, s0.kernels[j].ms);
    TEST_CHECK(bitnet_gpu_set_timing(G, 0) == BITNET_OK);
    /* a graph: captured launches run (and count) only on replay */
    TEST_CHECK(bitnet_gpu_graph_begin(G) == BITNET_OK);
    TEST_CHECK(fill_add(G, p, N, 40, 2) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_download(G, h, p, sizeof h) == BITNET_ERR_INVALID_STATE);
    TEST_CHECK(bitnet_gpu_graph_end(G, &graph) == BITNET_OK && graph);
    TEST_CHECK(bitnet_gpu_stats_get(G, &s1) == BITNET_OK && s1.launches == s0.launches);
    TEST_CHECK(bitnet_gpu_download(G, h, p, sizeof h) == BITNET_OK);
    for (i = 0; i < N; i++) bad += h[i] != 3;
    TEST_CHECKF(bad == 0, "capture ran the kernels (%d values changed)", bad);
    for (i = 0; i < 5; i++) TEST_CHECK(bitnet_gpu_graph_launch(G, graph) == BITNET_OK);
    TEST_CHECK(bitnet_gpu_download(G, h, p, sizeof h) == BITNET_OK);
    for (i = 0, bad = 0; i < N; i++) bad += h[i] != 42;
    TEST_CHECKF(bad == 0, "%d of %d wrong after replays", bad, N);
    TEST_CHECK(bitnet_gpu_stats_get(G, &s1) == BITNET_OK && s1.launches == s0.launches + 10);
    bitnet_gpu_graph_free(graph);
    bitnet_gpu_free(G, p);
}

int main(void) {
    char dir[512];
    (void)test_rand_float;
    (void)test_rand_int;
    test_seed(20261122);
    /* children first: each needs a process that has not loaded the driver yet */
    RUN_TEST(test_libcuda_missing);
    RUN_TEST(test_libcuda_stub);
    RUN_TEST(test_libcuda_not_a_driver);
    RUN_TEST(test_fake_matrix);
    RUN_TEST(test_nvrtc_missing);
    RUN_TEST(test_memory_limit_env);
    RUN_TEST(test_gpu_memory_limit_env);

    make_tmp(dir, sizeof dir, "cache");
    setenv("BITNET_CACHE_DIR", dir, 1); /* never the user's cache */
    RUN_TEST(test_api_validation);
    RUN_TEST(test_nvrtc_sm70);
    RUN_TEST(test_nvrtc_sm80);
    RUN_TEST(test_nvrtc_sm90);
    RUN_TEST(test_nvrtc_ptx_fallback);
    RUN_TEST(test_jit_cache);
    RUN_TEST(test_builtin_kernel_list);
    RUN_TEST(test_jit_fault_nvrtc);
    RUN_TEST(test_jit_errors_carry_the_log);

    gpu_ok = bitnet_gpu_available() && bitnet_gpu_open(0, &G) == BITNET_OK;
    if (!gpu_ok) bitnet_gpu_preflight(gpu_reason, sizeof gpu_reason);
    RUN_TEST(test_gpu_device_info);
    RUN_TEST(test_gpu_copies);
    RUN_TEST(test_gpu_builtin_kernels);
    RUN_TEST(test_gpu_threads_8x200_shared);
    RUN_TEST(test_gpu_threads_8x200_own);
    RUN_TEST(test_gpu_pool);
    RUN_TEST(test_gpu_memory_limit_api);
    RUN_TEST(test_gpu_fault_injection);
    RUN_TEST(test_gpu_custom_kernel);
    RUN_TEST(test_gpu_jit_cache_on_device);
    RUN_TEST(test_gpu_timing_and_graphs);
    bitnet_gpu_close(G);
    if (tmp_root[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "chmod -R u+w %s 2>/dev/null; rm -rf %s", tmp_root, tmp_root);
        if (system(cmd) != 0) printf("  note: could not remove %s\n", tmp_root);
    }
    return test_summary();
}
