/* bitnet.h - v0.1.0 - BitNet b1.58 (ternary) inference in one header. MIT license, see end of file.

   Fast ternary kernels on the CPU (scalar, AVX2, AVX-512 VNNI, NEON) and on NVIDIA GPUs (CUDA
   kernels JIT-compiled at run time through a dlopen'd driver and NVRTC: no CUDA SDK to build),
   a GGUF loader, a byte-level BPE tokenizer and token generation.

   QUICK START
     In exactly one C or C++ file:
         #define BITNET_IMPLEMENTATION
         #include "bitnet.h"
     Everywhere else just #include "bitnet.h".
     Build:  cc -O2 -std=c11 app.c -lm -ldl -lpthread      (add -march=native for nothing: the
             SIMD paths are chosen at run time, so one binary runs on any x86-64.)

   TABLE OF CONTENTS (grep the anchors)
     >>public-api      types and functions: errors, CPU kernels, GPU runtime, model, tokenizer
     >>config          includes, platform and compiler detection
     >>util            errors, logging, allocation (with fault injection), sizes, timers
     >>formats         fp16 / bf16 conversion
     >>quant           BitNet b1.58 quantization and I2_S packing
     >>threads         the persistent thread pool
     >>cpu-math        fp32 GEMM, RMSNorm, softmax, fp16 GEMV (scalar and SIMD)
     >>cpu-kernels     ternary GEMV/GEMM and friends, scalar reference then SIMD paths
     >>gguf            GGUF reader and writer
     >>tokenizer       byte-level BPE
     >>sampler         sampling
     >>cpu-forward     the transformer forward pass on the CPU
     >>cuda-loader     dlopen of libcuda and NVRTC, device query, context, streams
     >>nvrtc           JIT compile and module cache
     >>gpu-pool        device memory pool and statistics
     >>cuda-kernels    host side of the kernels in bitnet_cuda_kernels.h
     >>cuda-forward    the forward pass on the GPU, in the same order as the CPU one
     >>model           model loading and sessions
     >>public          bodies of the public functions that are thin shells

   OPTIONS (compile time; "impl" = only needed in the BITNET_IMPLEMENTATION file)
     BITNET_STATIC        global  every API function is static
     BITNET_NO_CUDA       impl    compile the GPU runtime out; GPU calls return BITNET_ERR_UNSUPPORTED
     BITNET_NO_SIMD       impl    scalar kernels only
     BITNET_NO_THREADS    impl    no thread pool
     BITNET_MALLOC/BITNET_FREE impl  default allocator (both or neither); bitnet_set_allocator overrides

   OPTIONS (environment, read at first use)
     BITNET_CPU=scalar|avx2|avx512|neon   force a CPU path (an error if the CPU lacks it)
     BITNET_NUM_THREADS=N                 thread count, default the online cores
     BITNET_FAULT=host_alloc:N            make the Nth host allocation fail (testing)
     BITNET_LIBCUDA, BITNET_NVRTC         paths of the CUDA driver and NVRTC libraries
     BITNET_CACHE_DIR                     JIT cache folder (else $XDG_CACHE_HOME/bitnet, ~/.cache/bitnet)

   ERRORS
     Every fallible function returns a bitnet_result (BITNET_OK = 0, errors negative in bands).
     bitnet_result_string() names the code; bitnet_last_error() gives a thread-local message with
     the details (paths, dlerror() text, CUDA error names, NVRTC logs). The library never calls
     exit or abort and prints nothing unless a logger is set (bitnet_set_logger).

   THREAD SAFETY
     Global settings (logger, allocator, ISA, thread count) are meant to be set once at start-up.
     Kernel entry points and format helpers are safe to call from any thread. Models are
     read-only after load and may be shared; one session per thread.
*/
#ifndef BITNET_H
#define BITNET_H

/* The implementation uses POSIX calls (clock_gettime, mmap, fileno); ask for them before the first
   system header. Include bitnet.h first in the implementation file, or build with -D_GNU_SOURCE. */
#if defined(BITNET_IMPLEMENTATION) && defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

/* >>public-api ================================================================================ */

#define BITNET_VERSION_MAJOR 0
#define BITNET_VERSION_MINOR 1
#define BITNET_VERSION_PATCH 0
#define BITNET_VERSION_STRING "0.1.0"

#include <stddef.h>
#include <stdint.h>

#ifndef BITNET_API
#ifdef BITNET_STATIC
#define BITNET_API static
#else
#define BITNET_API extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- >>api-errors: result codes, messages, logging, allocation ---------------------------- */

/* X(name, value, phrase). Bands: -1.. generic, -100.. files, -200.. CUDA availability,
   -300.. CUDA runtime, -400.. model and generation. */
#define BITNET_RESULTS(X) \
    X(BITNET_OK,                      0, "ok") \
    X(BITNET_ERR_INVALID_ARG,        -1, "invalid argument") \
    X(BITNET_ERR_NULL_POINTER,       -2, "null pointer") \
    X(BITNET_ERR_BAD_SIZE,           -3, "bad size") \
    X(BITNET_ERR_OVERFLOW,           -4, "size overflow") \
    X(BITNET_ERR_ALIGNMENT,          -5, "misaligned pointer") \
    X(BITNET_ERR_OUT_OF_MEMORY,      -6, "out of memory") \
    X(BITNET_ERR_UNSUPPORTED,        -7, "unsupported") \
    X(BITNET_ERR_UNSUPPORTED_ISA,    -8, "CPU instruction set not available") \
    X(BITNET_ERR_IO,                 -9, "I/O error") \
    X(BITNET_ERR_INVALID_STATE,     -10, "invalid state") \
    X(BITNET_ERR_THREAD,            -11, "thread error") \
    X(BITNET_ERR_BAD_MAGIC,        -100, "not a GGUF file") \
    X(BITNET_ERR_BAD_VERSION,      -101, "unsupported file version") \
    X(BITNET_ERR_TRUNCATED,        -102, "truncated file") \
    X(BITNET_ERR_CORRUPT,          -103, "corrupt file") \
    X(BITNET_ERR_UNSUPPORTED_TYPE, -104, "unsupported tensor type") \
    X(BITNET_ERR_MISSING_TENSOR,   -105, "missing tensor") \
    X(BITNET_ERR_DUPLICATE_TENSOR, -106, "duplicate tensor") \
    X(BITNET_ERR_BAD_METADATA,     -107, "bad or inconsistent metadata") \
    X(BITNET_ERR_BAD_SHAPE,        -108, "bad tensor shape") \
    X(BITNET_ERR_LIBCUDA_NOT_FOUND,-200, "CUDA driver library not found") \
    X(BITNET_ERR_NVRTC_NOT_FOUND,  -201, "NVRTC library not found") \
    X(BITNET_ERR_CUDA_SYMBOL,      -202, "CUDA symbol missing") \
    X(BITNET_ERR_NVRTC_SYMBOL,     -203, "NVRTC symbol missing") \
    X(BITNET_ERR_CUDA_INIT,        -204, "cuInit failed") \
    X(BITNET_ERR_NO_DEVICE,        -205, "no CUDA device") \
    X(BITNET_ERR_DRIVER_TOO_OLD,   -206, "CUDA driver too old") \
    X(BITNET_ERR_JIT,              -300, "kernel compilation failed") \
    X(BITNET_ERR_MODULE_LOAD,      -301, "module load failed") \
    X(BITNET_ERR_KERNEL_NOT_FOUND, -302, "kernel not found") \
    X(BITNET_ERR_LAUNCH,           -303, "kernel launch failed") \
    X(BITNET_ERR_DEVICE_OOM,       -304, "device out of memory") \
    X(BITNET_ERR_CUDA,             -305, "CUDA error") \
    X(BITNET_ERR_CONTEXT_FULL,     -400, "context length exceeded") \
    X(BITNET_ERR_BAD_TOKEN,        -401, "token id out of range") \
    X(BITNET_ERR_BACKEND,          -402, "requested backend not usable")

typedef enum bitnet_result {
#define BITNET__ENUM(name, value, phrase) name = value,
    BITNET_RESULTS(BITNET__ENUM)
#undef BITNET__ENUM
    BITNET__RESULT_END_ = -10000
} bitnet_result;

/* A fixed phrase for a code ("unknown result" for values outside the enum). */
BITNET_API const char *bitnet_result_string(bitnet_result r);
/* The calling thread's last error detail (never NULL; "" when there was none). */
BITNET_API const char *bitnet_last_error(void);
BITNET_API void bitnet_clear_error(void);

typedef enum bitnet_log_level {
    BITNET_LOG_ERROR = 1, BITNET_LOG_WARN = 2, BITNET_LOG_INFO = 3, BITNET_LOG_DEBUG = 4
} bitnet_log_level;
typedef void (*bitnet_log_fn)(bitnet_log_level level, const char *message, void *user);
/* Without a logger the library prints nothing. bitnet_log_stderr is a ready-made one. */
BITNET_API void bitnet_set_logger(bitnet_log_fn fn, void *user);
BITNET_API void bitnet_log_stderr(bitnet_log_level level, const char *message, void *user);

/* Host allocator hooks: both or neither (NULL, NULL restores the default). The library asks
   for alignment itself, so alloc_fn only needs malloc semantics. */
typedef void *(*bitnet_alloc_fn)(size_t size, void *user);
typedef void (*bitnet_free_fn)(void *ptr, void *user);
BITNET_API bitnet_result bitnet_set_allocator(bitnet_alloc_fn alloc_fn, bitnet_free_fn free_fn, void *user);

/* Fault injection for tests: "host_alloc:N", "device_alloc:N", "nvrtc", "module_load" or ""
   (off). Resets the counters. BITNET_FAULT in the environment is read at first use. */
BITNET_API bitnet_result bitnet_set_fault(const char *spec);

/* ---- >>api-cpu: ISA selection, threads, formats, quantization, kernels -------------------- */

typedef enum bitnet_isa {
    BITNET_ISA_AUTO = 0, BITNET_ISA_SCALAR, BITNET_ISA_AVX2, BITNET_ISA_AVX512, BITNET_ISA_NEON,
    BITNET_ISA_COUNT
} bitnet_isa;
BITNET_API const char *bitnet_isa_name(bitnet_isa isa);
BITNET_API int bitnet_cpu_has_isa(bitnet_isa isa);              /* 1 when this CPU and build can run it */
BITNET_API bitnet_isa bitnet_cpu_isa(void);                     /* the active path */
BITNET_API bitnet_result bitnet_cpu_set_isa(bitnet_isa isa);    /* AUTO = best available */
BITNET_API int bitnet_num_threads(void);
BITNET_API bitnet_result bitnet_set_num_threads(int n);        /* 0 = online cores */

/* Number formats: round to nearest even; NaN stays NaN (quiet), Inf and subnormals exact. */
BITNET_API uint16_t bitnet_fp32_to_fp16(float f);
BITNET_API float bitnet_fp16_to_fp32(uint16_t h);
BITNET_API uint16_t bitnet_fp32_to_bf16(float f);
BITNET_API float bitnet_bf16_to_fp32(uint16_t b);
BITNET_API bitnet_result bitnet_convert_fp32_to_fp16(const float *src, uint16_t *dst, size_t n);
BITNET_API bitnet_result bitnet_convert_fp16_to_fp32(const uint16_t *src, float *dst, size_t n);
BITNET_API bitnet_result bitnet_convert_fp32_to_bf16(const float *src, uint16_t *dst, size_t n);
BITNET_API bitnet_result bitnet_convert_bf16_to_fp32(const uint16_t *src, float *dst, size_t n);

/* BitNet b1.58 weights: per-tensor absmean. scale = max(mean|w|, 1e-5);
   q = clamp(round_half_even(w / scale), -1, 1). */
BITNET_API bitnet_result bitnet_quantize_ternary(const float *w, size_t n, int8_t *q, float *scale);

/* Activations, per row of k: s = 127 / max(max|x|, 1e-5); q = clamp(round_half_even(x*s), -128, 127);
   sum = sum of q (the I2_S dot product needs it). scale and sum hold m values; sum may be NULL. */
BITNET_API bitnet_result bitnet_quantize_act(const float *x, size_t m, size_t k,
                                             int8_t *q, float *scale, int32_t *sum);

/* I2_S, bit-compatible with bitnet.cpp's GGUF tensors: code = w + 1; blocks of 128 weights in 32
   bytes (byte b holds weights b, b+32, b+64, b+96 at bits 7:6, 5:4, 3:2, 1:0); then a 32-byte
   tail whose first 4 bytes are the float scale. Rows of k weights, k a multiple of 128. */
#define BITNET_I2S_BLOCK 128
BITNET_API size_t bitnet_i2s_bytes(size_t n, size_t k);        /* 0 when k is not representable */
BITNET_API bitnet_result bitnet_i2s_pack(const int8_t *q, size_t n, size_t k, float scale,
                                         void *dst, size_t dst_bytes);
BITNET_API bitnet_result bitnet_i2s_unpack(const void *src, size_t src_bytes, size_t n, size_t k,
                                           int8_t *q, float *scale);
/* Hugging Face packed uint8 [n/4][k] (byte [r][c] holds row r + i*n/4 at bits 2i, code = w + 1)
   plus its multiplicative weight_scale, to I2_S. */
BITNET_API bitnet_result bitnet_i2s_from_hf(const uint8_t *packed, size_t n, size_t k, float weight_scale,
                                            void *dst, size_t dst_bytes);

/* Ternary x int8: out[i*n + j] = (sum_c w[j][c] * a[i*k + c]) / a_scale[i] * w_scale, for m rows
   of activations (m = 1 is the GEMV). a_sum is bitnet_quantize_act's sum. */
BITNET_API bitnet_result bitnet_gemm_i2s(const void *w, size_t w_bytes, size_t n, size_t k,
                                         const int8_t *a, const float *a_scale, const int32_t *a_sum,
                                         size_t m, float *out);
/* fp32 reference GEMM: out[m][n] = a[m][k] . w[n][k] (weights row-major, like a linear layer). */
BITNET_API bitnet_result bitnet_gemm_f32(const float *w, size_t n, size_t k, const float *a, size_t m, float *out);
/* out = x / sqrt(mean(x^2) + eps) * weight, per row of k (out may alias x). */
BITNET_API bitnet_result bitnet_rmsnorm(const float *x, const float *weight, size_t m, size_t k, float eps, float *out);
/* In-place softmax per row of k. */
BITNET_API bitnet_result bitnet_softmax(float *x, size_t m, size_t k);
/* RMSNorm then per-token int8 quantization in one pass, bit-identical to bitnet_rmsnorm followed
   by bitnet_quantize_act (q is m x k; scale and sum hold m values; sum may be NULL). */
BITNET_API bitnet_result bitnet_rmsnorm_quantize(const float *x, const float *weight, size_t m, size_t k, float eps,
                                                 int8_t *q, float *scale, int32_t *sum);
/* out[n] = w[n][k] . x[k] with w rows of IEEE fp16 (bits as uint16_t), e.g. a tied fp16 LM head. */
BITNET_API bitnet_result bitnet_gemv_f16(const uint16_t *w, size_t n, size_t k, const float *x, float *out);

/* ---- >>api-gpu: GPU runtime (see the GPU issue; implemented under >>cuda-loader) ----------- */

/* Contract between the runtime and the kernels: one device handle, one launch path. Every
   download is ordered after all work previously issued through the same handle.

   The CUDA driver and NVRTC are dlopen'd at first use, once per process (BITNET_LIBCUDA and
   BITNET_NVRTC, when set, are the only paths tried). Each bitnet_gpu owns one non-blocking
   stream guarded by a mutex: every upload, launch, copy and download of that handle goes onto
   that stream in call order, and a download waits for the stream, so it always sees the results
   of the kernels issued before it, from any thread. Handles may be shared between threads.
   Memory comes from the handle's pool and is reused only by that handle (so reuse is ordered too). */
typedef struct bitnet_gpu bitnet_gpu;               /* one device: context, stream, modules, pool */
typedef struct bitnet_gpu_module bitnet_gpu_module; /* a JIT-compiled module */
typedef struct bitnet_gpu_kernel bitnet_gpu_kernel; /* a function in a module */
typedef unsigned long long bitnet_devptr;           /* a device address */

BITNET_API int bitnet_gpu_available(void);          /* 1 when a CUDA device is usable */
BITNET_API bitnet_result bitnet_gpu_open(int ordinal, bitnet_gpu **out);
BITNET_API void bitnet_gpu_close(bitnet_gpu *gpu);
BITNET_API bitnet_result bitnet_gpu_sync(bitnet_gpu *gpu);
BITNET_API bitnet_result bitnet_gpu_alloc(bitnet_gpu *gpu, size_t bytes, bitnet_devptr *out);
BITNET_API bitnet_result bitnet_gpu_free(bitnet_gpu *gpu, bitnet_devptr ptr);
BITNET_API bitnet_result bitnet_gpu_upload(bitnet_gpu *gpu, bitnet_devptr dst, const void *src, size_t bytes);
BITNET_API bitnet_result bitnet_gpu_download(bitnet_gpu *gpu, void *dst, bitnet_devptr src, size_t bytes);
BITNET_API bitnet_result bitnet_gpu_module_load(bitnet_gpu *gpu, const char *source, const char *options,
                                                bitnet_gpu_module **out);
BITNET_API bitnet_result bitnet_gpu_kernel_get(bitnet_gpu_module *mod, const char *name, bitnet_gpu_kernel **out);
BITNET_API bitnet_result bitnet_gpu_launch(bitnet_gpu *gpu, bitnet_gpu_kernel *k, const unsigned grid[3],
                                           const unsigned block[3], unsigned shared_bytes, void **args);

/* More of the same handle: device-to-device copy and byte fill (both on the stream), unloading a
   module (its kernels die with it; modules left over are unloaded by bitnet_gpu_close). */
BITNET_API bitnet_result bitnet_gpu_copy(bitnet_gpu *gpu, bitnet_devptr dst, bitnet_devptr src, size_t bytes);
BITNET_API bitnet_result bitnet_gpu_memset(bitnet_gpu *gpu, bitnet_devptr dst, int value, size_t bytes);
BITNET_API void bitnet_gpu_module_free(bitnet_gpu_module *mod);

/* Built-in modules (bitnet_cuda_kernels.h): compiled or read from the disk cache once per device,
   on first use. bitnet_gpu_builtin_load_all compiles every module now (failures show up early). */
BITNET_API bitnet_result bitnet_gpu_builtin_kernel(bitnet_gpu *gpu, const char *name, bitnet_gpu_kernel **out);
BITNET_API bitnet_result bitnet_gpu_builtin_load_all(bitnet_gpu *gpu);
BITNET_API int bitnet_gpu_builtin_count(void);                 /* modules in bitnet_cuda_kernels.h */
BITNET_API const char *bitnet_gpu_builtin_name(int i);         /* NULL when out of range */
BITNET_API int bitnet_gpu_builtin_min_sm(int i);               /* lowest arch it runs on, e.g. 70 */

/* ---- backends, preflight, devices ---- */
/* BITNET_GPU_FAKE ("cuda", "cuda,rocm", "" for none) replaces detection for tests; the result
   then always says mocked, and no device can be opened. ROCm, Metal and WebGPU are detected only. */
typedef struct bitnet_gpu_backends {
    int mocked;                 /* 1 when BITNET_GPU_FAKE decided everything below */
    int cuda, rocm, metal, webgpu; /* present (CUDA: driver loaded and initialised) */
    int cuda_driver_version;    /* 1000*major + 10*minor, e.g. 13000; 0 when unknown */
    int nvrtc_version;          /* same encoding; 0 when NVRTC is missing */
    int device_count;           /* CUDA devices (CUDA_VISIBLE_DEVICES applies) */
    char reason[1024];          /* why CUDA is not usable; "" when it is */
} bitnet_gpu_backends;
BITNET_API bitnet_result bitnet_gpu_backends_get(bitnet_gpu_backends *out);
/* BITNET_OK when CUDA is usable, else the first blocker's code with an actionable message in msg
   (e.g. "libcuda.so.1 not found: install the NVIDIA driver ..."). msg may be NULL. */
BITNET_API bitnet_result bitnet_gpu_preflight(char *msg, size_t cap);
/* One line: backends, driver and NVRTC versions, devices (or the reason there are none). */
BITNET_API bitnet_result bitnet_gpu_summary(char *buf, size_t cap);

typedef struct bitnet_gpu_device_info {
    int ordinal;
    char name[256];
    char pci_bus_id[32];
    int cc_major, cc_minor;        /* compute capability */
    char jit_target[32];           /* what the JIT builds for it: "sm_90" (cubin) or "compute_86" (PTX); "" without NVRTC */
    uint64_t total_mem, free_mem;  /* bytes; free is read now */
    int sm_count, max_threads_per_block;
    int smem_per_block, smem_per_block_optin; /* bytes: default and opt-in maximum */
    int l2_bytes;
    int clock_khz, mem_clock_khz, mem_bus_bits;
    double mem_bandwidth_gbs;      /* theoretical: 2 (DDR) * memory clock * bus width / 8, in GB/s */
    int fp16, bf16, int8_tensor_cores, fp8; /* cc >= 5.3, 8.0, 7.2, 8.9 */
} bitnet_gpu_device_info;
BITNET_API bitnet_result bitnet_gpu_device_count(int *out);
BITNET_API bitnet_result bitnet_gpu_device_info_get(int ordinal, bitnet_gpu_device_info *out);
BITNET_API int bitnet_gpu_ordinal(const bitnet_gpu *gpu);      /* -1 for NULL */

/* ---- JIT without a GPU (NVRTC only) ---- */
/* arch: "sm_XY" (a cubin when NVRTC supports XY, else PTX for the highest supported arch below
   it) or "compute_XY" (PTX). use_cache: consult and fill the disk cache ($BITNET_CACHE_DIR, else
   $XDG_CACHE_HOME/bitnet, else ~/.cache/bitnet, read at each compile; BITNET_CUDA_CACHE=0 turns
   it off). An unreadable or corrupt entry is a miss, an unwritable folder only a logged note. */
typedef struct bitnet_gpu_jit_info {
    char target[32];               /* "sm_90" or "compute_75" */
    int cubin;                     /* 1 cubin, 0 PTX */
    size_t bytes;                  /* size of the binary */
    uint64_t binary_hash;          /* FNV-1a of the binary, to compare builds */
    int from_cache;
    double ms;                     /* compile or cache read */
    char cache_file[512];          /* "" when the cache is off */
} bitnet_gpu_jit_info;
BITNET_API bitnet_result bitnet_gpu_jit_builtin(int module, const char *arch, int use_cache, bitnet_gpu_jit_info *info);
BITNET_API bitnet_result bitnet_gpu_jit_source(const char *source, const char *options, const char *arch, int use_cache,
                                               bitnet_gpu_jit_info *info);
/* How a loaded module's binary was made (target, size, compile or cache time, cache file). */
BITNET_API bitnet_result bitnet_gpu_module_jit_info(const bitnet_gpu_module *mod, bitnet_gpu_jit_info *out);
/* The same for built-in module i on this device (compiled or read from the cache first). */
BITNET_API bitnet_result bitnet_gpu_builtin_jit_info(bitnet_gpu *gpu, int i, bitnet_gpu_jit_info *out);
/* NVRTC version (1000*major + 10*minor) and the lowest and highest arch it compiles for. */
BITNET_API bitnet_result bitnet_gpu_nvrtc_info(int *version, int *min_sm, int *max_sm);

/* ---- memory pool (one per handle) ---- */
typedef struct bitnet_gpu_pool_config { /* 0 means the default */
    uint64_t max_cached_bytes;     /* bytes kept for reuse after free; default 1 GiB */
    int max_cached_per_class;      /* buffers kept per size class; default 16 */
    int tracking;                  /* 1 on (default), -1 off: age and call stack of live buffers */
    double cleanup_interval_s;     /* cached buffers unused this long are released; default 60 */
} bitnet_gpu_pool_config;
typedef struct bitnet_gpu_pool_stats {
    int device;
    uint64_t total_allocated;      /* bytes asked for over the handle's life */
    uint64_t current, peak;        /* bytes in live allocations, and their high-water mark */
    uint64_t cached;               /* bytes held for reuse */
    uint64_t reserved, reserved_peak; /* bytes taken from the driver (live + cached) */
    uint64_t allocations, frees, cache_hits, cache_misses;
} bitnet_gpu_pool_stats;
BITNET_API bitnet_result bitnet_gpu_pool_configure(bitnet_gpu *gpu, const bitnet_gpu_pool_config *cfg);
BITNET_API bitnet_result bitnet_gpu_pool_stats_get(bitnet_gpu *gpu, bitnet_gpu_pool_stats *out);
BITNET_API bitnet_result bitnet_gpu_pool_trim(bitnet_gpu *gpu);  /* releases every cached buffer */
/* Lists every live allocation (size, device address, age; the call stack with
   BITNET_POOL_BACKTRACE=1 or BITNET_DEBUG) into buf, one per line; *n_live gets the count. */
BITNET_API bitnet_result bitnet_gpu_pool_leaks(bitnet_gpu *gpu, char *buf, size_t cap, size_t *n_live);
/* Caps the device memory all pools of the process take from the driver (0 = no cap); past it an
   allocation fails with BITNET_ERR_DEVICE_OOM. BITNET_MEMORY_LIMIT (e.g. 512MB) sets it at first use. */
BITNET_API bitnet_result bitnet_gpu_set_memory_limit(uint64_t bytes);
BITNET_API bitnet_result bitnet_gpu_memory_limit(uint64_t *bytes);

/* ---- statistics, timing, graphs, NVTX, raw handles ---- */
#define BITNET_GPU_MAX_KERNEL_STATS 128
typedef struct bitnet_gpu_kernel_stat {
    char name[64];
    uint64_t launches;             /* counted by bitnet_gpu_launch (and graph replays) */
    uint64_t timed;                /* launches with event timing (bitnet_gpu_set_timing) */
    double ms;                     /* device time of the timed launches */
} bitnet_gpu_kernel_stat;
typedef struct bitnet_gpu_stats {
    uint64_t launches;
    uint64_t h2d_count, h2d_bytes, d2h_count, d2h_bytes, d2d_count, d2d_bytes;
    int n_kernels;
    bitnet_gpu_kernel_stat kernels[BITNET_GPU_MAX_KERNEL_STATS]; /* in order of first launch */
} bitnet_gpu_stats;
/* gpu = NULL: totals of the whole process (closed handles included). */
BITNET_API bitnet_result bitnet_gpu_stats_get(bitnet_gpu *gpu, bitnet_gpu_stats *out);
BITNET_API bitnet_result bitnet_gpu_stats_reset(bitnet_gpu *gpu);
/* Event timing of every launch (off by default: it costs two event records per launch).
   BITNET_GPU_TIMING=1 turns it on for new handles. Times are collected at sync and download. */
BITNET_API bitnet_result bitnet_gpu_set_timing(bitnet_gpu *gpu, int on);
/* A device-side stopwatch on the handle's stream: begin records an event, end records another,
   waits for it and gives the milliseconds between them. */
BITNET_API bitnet_result bitnet_gpu_timer_begin(bitnet_gpu *gpu);
BITNET_API bitnet_result bitnet_gpu_timer_end(bitnet_gpu *gpu, double *ms);
/* CUDA graphs: launches between begin and end (from one thread) are captured, not run; each
   graph launch replays them and counts their launches in the statistics. */
typedef struct bitnet_gpu_graph bitnet_gpu_graph;
BITNET_API bitnet_result bitnet_gpu_graph_begin(bitnet_gpu *gpu);
BITNET_API bitnet_result bitnet_gpu_graph_end(bitnet_gpu *gpu, bitnet_gpu_graph **out);
BITNET_API bitnet_result bitnet_gpu_graph_launch(bitnet_gpu *gpu, bitnet_gpu_graph *graph);
BITNET_API void bitnet_gpu_graph_free(bitnet_gpu_graph *graph);
/* NVTX ranges (nvtxRangePushA/Pop of a dlopen'd libnvToolsExt; nothing when it is absent). */
BITNET_API void bitnet_gpu_nvtx_push(const char *name);
BITNET_API void bitnet_gpu_nvtx_pop(void);
/* Raw CUcontext, CUstream, CUmodule and CUfunction for advanced use (NULL for NULL). Work put
   on the stream directly is ordered with the handle's own work. */
BITNET_API void *bitnet_gpu_raw_context(bitnet_gpu *gpu);
BITNET_API void *bitnet_gpu_raw_stream(bitnet_gpu *gpu);
BITNET_API void *bitnet_gpu_raw_module(bitnet_gpu_module *mod);
BITNET_API void *bitnet_gpu_raw_function(bitnet_gpu_kernel *k);

/* ---- >>api-gguf ------------------------------------------------------------------------------ */

/* GGUF v2/v3 reader over mmap (or memory), bounds-checked everywhere. */
typedef struct bitnet_gguf bitnet_gguf;
typedef enum bitnet_gguf_type { /* metadata value types, as in the GGUF spec */
    BITNET_GGUF_UINT8 = 0, BITNET_GGUF_INT8, BITNET_GGUF_UINT16, BITNET_GGUF_INT16, BITNET_GGUF_UINT32,
    BITNET_GGUF_INT32, BITNET_GGUF_FLOAT32, BITNET_GGUF_BOOL, BITNET_GGUF_STRING, BITNET_GGUF_ARRAY,
    BITNET_GGUF_UINT64, BITNET_GGUF_INT64, BITNET_GGUF_FLOAT64
} bitnet_gguf_type;
typedef enum bitnet_tensor_type { /* ggml ids; I2_S is bitnet.cpp's 36 */
    BITNET_TENSOR_F32 = 0, BITNET_TENSOR_F16 = 1, BITNET_TENSOR_Q8_0 = 8, BITNET_TENSOR_BF16 = 30,
    BITNET_TENSOR_I2_S = 36
} bitnet_tensor_type;
typedef struct bitnet_tensor_info {
    const char *name;
    bitnet_tensor_type type;
    int n_dims;
    uint64_t ne[4];          /* ne[0] is the contiguous dimension (K for a weight matrix) */
    uint64_t offset;         /* from the start of the data section */
    uint64_t bytes;          /* I2_S: ne0*ne1/4 + 32 */
    const void *data;        /* inside the mapping */
} bitnet_tensor_info;
typedef struct bitnet_gguf_str { const char *ptr; uint64_t len; } bitnet_gguf_str; /* not NUL-terminated */

BITNET_API bitnet_result bitnet_gguf_open(const char *path, bitnet_gguf **out);
BITNET_API bitnet_result bitnet_gguf_open_memory(const void *data, size_t size, bitnet_gguf **out); /* data must outlive it */
BITNET_API void bitnet_gguf_close(bitnet_gguf *g);
BITNET_API uint32_t bitnet_gguf_version(const bitnet_gguf *g);
BITNET_API uint64_t bitnet_gguf_kv_count(const bitnet_gguf *g);
BITNET_API uint64_t bitnet_gguf_tensor_count(const bitnet_gguf *g);
BITNET_API int64_t bitnet_gguf_find_key(const bitnet_gguf *g, const char *key);          /* -1 if absent */
BITNET_API const char *bitnet_gguf_key_name(const bitnet_gguf *g, uint64_t i);
BITNET_API bitnet_gguf_type bitnet_gguf_key_type(const bitnet_gguf *g, uint64_t i);
/* Typed getters: an error (BITNET_ERR_BAD_METADATA) when the key is absent or of another type;
   integers convert between widths when the value fits. */
BITNET_API bitnet_result bitnet_gguf_get_u32(const bitnet_gguf *g, const char *key, uint32_t *out);
BITNET_API bitnet_result bitnet_gguf_get_f32(const bitnet_gguf *g, const char *key, float *out);
BITNET_API bitnet_result bitnet_gguf_get_str(const bitnet_gguf *g, const char *key, bitnet_gguf_str *out);
/* Arrays: element type, count, and element access. */
BITNET_API bitnet_result bitnet_gguf_get_arr(const bitnet_gguf *g, const char *key, bitnet_gguf_type *elem_type, uint64_t *count);
BITNET_API bitnet_result bitnet_gguf_arr_str(const bitnet_gguf *g, const char *key, uint64_t i, bitnet_gguf_str *out);
BITNET_API const void *bitnet_gguf_arr_data(const bitnet_gguf *g, const char *key); /* numeric arrays, packed little-endian */
BITNET_API bitnet_result bitnet_gguf_tensor(const bitnet_gguf *g, uint64_t i, bitnet_tensor_info *out);
BITNET_API bitnet_result bitnet_gguf_find_tensor(const bitnet_gguf *g, const char *name, bitnet_tensor_info *out);

/* ---- >>api-tokenizer ------------------------------------------------------------------------- */

/* Byte-level BPE (GPT-2 style tokens: bytes mapped to printable code points) with the LLaMA 3
   pre-tokenizer, implemented without a regex library. */
typedef struct bitnet_tokenizer bitnet_tokenizer;
typedef struct bitnet_tokenizer_desc {
    const bitnet_gguf_str *tokens; uint64_t n_tokens;      /* the vocabulary, in id order */
    const bitnet_gguf_str *merges; uint64_t n_merges;      /* "a b" pairs, by rank */
    const int32_t *token_types;                            /* optional: 3 = control (special) */
    int32_t bos, eos, eot;                                 /* -1 when absent */
} bitnet_tokenizer_desc;
BITNET_API bitnet_result bitnet_tokenizer_create(const bitnet_tokenizer_desc *desc, bitnet_tokenizer **out);
BITNET_API bitnet_result bitnet_tokenizer_from_gguf(const bitnet_gguf *g, bitnet_tokenizer **out);
BITNET_API void bitnet_tokenizer_free(bitnet_tokenizer *t);
/* Encodes text (parse_special: recognise "<|...|>" special tokens in the text). *n_out gets the
   count; BITNET_ERR_BAD_SIZE (with *n_out set to the need) when cap is too small. */
BITNET_API bitnet_result bitnet_tokenize(const bitnet_tokenizer *t, const char *text, size_t len, int add_bos,
                                         int parse_special, int32_t *ids, size_t cap, size_t *n_out);
/* The bytes of one token (special tokens as their text). */
BITNET_API bitnet_result bitnet_token_piece(const bitnet_tokenizer *t, int32_t id, const char **bytes, size_t *len);
BITNET_API bitnet_result bitnet_detokenize(const bitnet_tokenizer *t, const int32_t *ids, size_t n, char *buf,
                                           size_t cap, size_t *len_out);
BITNET_API int32_t bitnet_tokenizer_vocab_size(const bitnet_tokenizer *t);
/* A GPT-2-style vocabulary (byte-level token strings, "a b" merges by rank, token types) built
   from a tiktoken rank file plus n_special special tokens after it (LLaMA 3 names for 256).
   gen-model writes it into GGUF metadata. Free with bitnet_vocab_free. */
typedef struct bitnet_vocab {
    bitnet_gguf_str *tokens; uint64_t n_tokens;
    bitnet_gguf_str *merges; uint64_t n_merges;
    int32_t *token_types;
    void *storage_;
} bitnet_vocab;
BITNET_API bitnet_result bitnet_vocab_from_tiktoken(const char *path, int n_special, bitnet_vocab *out);
BITNET_API void bitnet_vocab_free(bitnet_vocab *v);

/* ---- >>api-model: model, session, generation, sampling --------------------------------------- */

typedef enum bitnet_backend { BITNET_BACKEND_AUTO = 0, BITNET_BACKEND_CPU, BITNET_BACKEND_CUDA } bitnet_backend;
typedef struct bitnet_model bitnet_model;     /* immutable weights; share it between sessions */
typedef struct bitnet_session bitnet_session; /* KV cache and scratch of one sequence; one per thread */
typedef void (*bitnet_progress_fn)(float fraction, void *user);

typedef struct bitnet_model_desc {            /* zero-initialise; 0 / NULL means the default */
    const char *path;                         /* a GGUF file, or: */
    const void *data; size_t size;            /* a GGUF image in memory (must outlive the model) */
    bitnet_backend backend;                   /* AUTO takes CUDA when usable, else the CPU */
    int device;                               /* CUDA ordinal */
    int no_mmap;                              /* read the file instead of mapping it */
    bitnet_progress_fn progress; void *progress_user;
} bitnet_model_desc;

typedef struct bitnet_model_info {
    char arch[32];
    int32_t n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, n_ctx_train;
    float rope_theta, norm_eps;
    int32_t bos, eos, eot;                    /* -1 when absent */
    bitnet_backend backend;                   /* the backend actually in use */
    char backend_reason[256];                 /* why (e.g. "CUDA unavailable: ...; using the CPU") */
} bitnet_model_info;

BITNET_API bitnet_result bitnet_model_load(const bitnet_model_desc *desc, bitnet_model **out);
BITNET_API void bitnet_model_free(bitnet_model *m);
BITNET_API bitnet_result bitnet_model_get_info(const bitnet_model *m, bitnet_model_info *out);
BITNET_API const bitnet_tokenizer *bitnet_model_tokenizer(const bitnet_model *m);

typedef struct bitnet_session_desc { int32_t n_ctx; /* 0 = the model's training context */ } bitnet_session_desc;
BITNET_API bitnet_result bitnet_session_create(bitnet_model *m, const bitnet_session_desc *desc, bitnet_session **out);
BITNET_API void bitnet_session_free(bitnet_session *s);
BITNET_API void bitnet_session_reset(bitnet_session *s);
BITNET_API int32_t bitnet_session_pos(const bitnet_session *s);
/* Appends n tokens at the current position. logits gets n_vocab floats for the last token, or
   n * n_vocab (one row per token) when all_logits is set; it may be NULL. */
BITNET_API bitnet_result bitnet_session_eval(bitnet_session *s, const int32_t *tokens, size_t n, float *logits,
                                             int all_logits);

typedef struct bitnet_sampler_params {        /* zero-initialised = greedy */
    float temperature;                        /* 0 = greedy (argmax) */
    int32_t top_k;                            /* 0 = off */
    float top_p;                              /* 0 or 1 = off */
    float min_p;                              /* 0 = off */
    float repeat_penalty;                     /* 0 or 1 = off */
    int32_t repeat_last_n;                    /* window for the penalty; 0 = 64 */
    uint64_t seed;                            /* 0 = BITNET_SEED, else time */
} bitnet_sampler_params;
/* Picks one token from logits (modified in place). rng is the caller's state (seed it with
   bitnet_rng_seed). */
BITNET_API uint64_t bitnet_rng_seed(uint64_t seed);
BITNET_API bitnet_result bitnet_sample(float *logits, int32_t n_vocab, const bitnet_sampler_params *p,
                                       const int32_t *history, size_t n_history, uint64_t *rng, int32_t *out);

/* Streaming callback: return nonzero to stop. */
typedef int (*bitnet_token_fn)(int32_t token, const char *piece, size_t len, void *user);
typedef struct bitnet_generate_params {
    bitnet_sampler_params sampler;
    int32_t max_tokens;                       /* 0 = until a stop token or the context ends */
    const int32_t *stop_tokens; size_t n_stop; /* NULL = the model's EOS and EOT */
    bitnet_token_fn on_token; void *user;
} bitnet_generate_params;
typedef struct bitnet_generate_stats {
    size_t n_prompt, n_generated;
    double prompt_seconds, gen_seconds;
} bitnet_generate_stats;
/* Evaluates the prompt, then samples until max_tokens or a stop token. out may be NULL. */
BITNET_API bitnet_result bitnet_generate(bitnet_session *s, const int32_t *prompt, size_t n_prompt,
                                         const bitnet_generate_params *p, int32_t *out, size_t cap,
                                         bitnet_generate_stats *stats);

/* ---- >>api-bench ----------------------------------------------------------------------------- */

#ifdef __cplusplus
}
#endif
#endif /* BITNET_H */

/* ============================================================================================ */
/*                                      IMPLEMENTATION                                          */
/* ============================================================================================ */
#if defined(BITNET_IMPLEMENTATION) && !defined(BITNET__IMPLEMENTED)
#define BITNET__IMPLEMENTED

/* >>config ==================================================================================== */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <limits.h>
#include <float.h>
#include <errno.h>
#include <time.h>
#if defined(_WIN32)
#include <windows.h>
#else
#include <unistd.h>
#include <pthread.h>
#include <dlfcn.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <fcntl.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#define BITNET__X86 1
#if !defined(BITNET_NO_SIMD) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <cpuid.h>
#define BITNET__X86_SIMD 1
#endif
#endif
#if defined(__aarch64__) && !defined(BITNET_NO_SIMD)
#include <arm_neon.h>
#define BITNET__NEON 1
#endif

#if defined(__cplusplus)
#define BITNET__TLS thread_local
#elif defined(_MSC_VER)
#define BITNET__TLS __declspec(thread)
#else
#define BITNET__TLS _Thread_local
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BITNET__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define BITNET__UNUSED __attribute__((unused))
#define BITNET__LIKELY(x) __builtin_expect(!!(x), 1)
#define BITNET__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define BITNET__PRINTF(a, b)
#define BITNET__UNUSED
#define BITNET__LIKELY(x) (x)
#define BITNET__UNLIKELY(x) (x)
#endif

#if defined(BITNET_MALLOC) != defined(BITNET_FREE)
#error "define both BITNET_MALLOC and BITNET_FREE, or neither"
#endif
#ifndef BITNET_MALLOC
#define BITNET_MALLOC(sz) malloc(sz)
#define BITNET_FREE(p) free(p)
#endif

#define BITNET__MIN(a, b) ((a) < (b) ? (a) : (b))
#define BITNET__MAX(a, b) ((a) > (b) ? (a) : (b))
#define BITNET__ALIGN 64

/* >>util ====================================================================================== */

static BITNET__TLS char bitnet__errbuf[4096];
static bitnet_log_fn bitnet__logger;
static void *bitnet__logger_user;

BITNET_API const char *bitnet_result_string(bitnet_result r) {
    switch (r) {
#define BITNET__CASE(name, value, phrase) case name: return phrase;
        BITNET_RESULTS(BITNET__CASE)
#undef BITNET__CASE
    default: return "unknown result";
    }
}

BITNET_API const char *bitnet_last_error(void) { return bitnet__errbuf; }
BITNET_API void bitnet_clear_error(void) { bitnet__errbuf[0] = 0; }

BITNET_API void bitnet_set_logger(bitnet_log_fn fn, void *user) {
    bitnet__logger = fn;
    bitnet__logger_user = user;
}

BITNET_API void bitnet_log_stderr(bitnet_log_level level, const char *message, void *user) {
    static const char *names[] = {"", "error", "warn", "info", "debug"};
    (void)user;
    fprintf(stderr, "bitnet %s: %s\n", names[(level >= 1 && level <= 4) ? level : 0], message);
}

static void bitnet__vlog(bitnet_log_level level, const char *fmt, va_list ap) {
    char buf[2048];
    if (!bitnet__logger) return;
    vsnprintf(buf, sizeof buf, fmt, ap);
    bitnet__logger(level, buf, bitnet__logger_user);
}

static BITNET__PRINTF(2, 3) void bitnet__log(bitnet_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    bitnet__vlog(level, fmt, ap);
    va_end(ap);
}

/* The one error path: record the detail for bitnet_last_error, log it, return the code. */
static BITNET__PRINTF(2, 3) bitnet_result bitnet__err(bitnet_result code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bitnet__errbuf, sizeof bitnet__errbuf, fmt, ap);
    va_end(ap);
    bitnet__log(BITNET_LOG_ERROR, "%s: %s", bitnet_result_string(code), bitnet__errbuf);
    return code;
}

#define BITNET__CHECK_PTR(p) \
    do { if (!(p)) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: '%s' is NULL", __func__, #p); } while (0)
#define BITNET__TRY(expr) \
    do { bitnet_result bitnet__r_ = (expr); if (bitnet__r_ != BITNET_OK) return bitnet__r_; } while (0)

BITNET__UNUSED static int bitnet__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}
BITNET__UNUSED static int bitnet__add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return 0;
    *out = a + b;
    return 1;
}

BITNET__UNUSED static const char *bitnet__getenv(const char *name) {
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

BITNET__UNUSED static double bitnet__now(void) { /* seconds, monotonic */
#if defined(_WIN32)
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#elif defined(CLOCK_MONOTONIC)
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#else /* strict C11 without POSIX: wall clock */
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#endif
}

/* ---- fault injection: one counter per kind, consulted by the one allocation path ---------- */
typedef struct bitnet__fault_state {
    int parsed;
    long host_alloc_n, device_alloc_n;   /* fail the Nth (1-based); 0 = off */
    long host_alloc_count, device_alloc_count;
    int nvrtc, module_load;
} bitnet__fault_state;
static bitnet__fault_state bitnet__fault;

static bitnet_result bitnet__fault_parse(const char *spec) {
    bitnet__fault_state f;
    memset(&f, 0, sizeof f);
    f.parsed = 1;
    while (spec && *spec) {
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        char item[64];
        if (len >= sizeof item) return bitnet__err(BITNET_ERR_INVALID_ARG, "BITNET_FAULT item too long");
        memcpy(item, spec, len);
        item[len] = 0;
        if (strncmp(item, "host_alloc:", 11) == 0) f.host_alloc_n = atol(item + 11);
        else if (strncmp(item, "device_alloc:", 13) == 0) f.device_alloc_n = atol(item + 13);
        else if (strcmp(item, "nvrtc") == 0) f.nvrtc = 1;
        else if (strcmp(item, "module_load") == 0) f.module_load = 1;
        else if (len) return bitnet__err(BITNET_ERR_INVALID_ARG, "unknown BITNET_FAULT item '%s'", item);
        spec = end ? end + 1 : NULL;
    }
    bitnet__fault = f;
    return BITNET_OK;
}
static void bitnet__fault_init(void) {
    if (!bitnet__fault.parsed) {
        if (bitnet__fault_parse(bitnet__getenv("BITNET_FAULT")) != BITNET_OK) bitnet__fault.parsed = 1;
    }
}
BITNET_API bitnet_result bitnet_set_fault(const char *spec) { return bitnet__fault_parse(spec ? spec : ""); }
/* 1 when the injected fault of this kind fires now. kind: 'h' host alloc, 'd' device alloc. */
BITNET__UNUSED static int bitnet__fault_hit(char kind) {
    bitnet__fault_init();
    if (kind == 'h' && bitnet__fault.host_alloc_n)
        return ++bitnet__fault.host_alloc_count == bitnet__fault.host_alloc_n;
    if (kind == 'd' && bitnet__fault.device_alloc_n)
        return ++bitnet__fault.device_alloc_count == bitnet__fault.device_alloc_n;
    return 0;
}

/* ---- host allocation: the one path. 64-byte aligned, user hooks, fault injection ----------- */
static bitnet_alloc_fn bitnet__alloc_fn;
static bitnet_free_fn bitnet__free_fn;
static void *bitnet__alloc_user;

BITNET_API bitnet_result bitnet_set_allocator(bitnet_alloc_fn alloc_fn, bitnet_free_fn free_fn, void *user) {
    if ((alloc_fn == NULL) != (free_fn == NULL))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_set_allocator: give both alloc_fn and free_fn, or neither");
    bitnet__alloc_fn = alloc_fn;
    bitnet__free_fn = free_fn;
    bitnet__alloc_user = user;
    return BITNET_OK;
}

/* Returns NULL (with the error set) on failure. The raw pointer sits just below the aligned one. */
BITNET__UNUSED static void *bitnet__malloc(size_t size) {
    size_t total;
    unsigned char *raw, *p;
    if (!bitnet__add_size(size, BITNET__ALIGN + sizeof(void *), &total)) {
        bitnet__err(BITNET_ERR_OVERFLOW, "allocation of %zu bytes overflows", size);
        return NULL;
    }
    if (bitnet__fault_hit('h')) {
        bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "injected host allocation failure (BITNET_FAULT host_alloc:%ld)",
                    bitnet__fault.host_alloc_n);
        return NULL;
    }
    raw = (unsigned char *)(bitnet__alloc_fn ? bitnet__alloc_fn(total, bitnet__alloc_user) : BITNET_MALLOC(total));
    if (!raw) {
        bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "could not allocate %zu bytes", size);
        return NULL;
    }
    p = (unsigned char *)(((uintptr_t)raw + sizeof(void *) + BITNET__ALIGN - 1) & ~(uintptr_t)(BITNET__ALIGN - 1));
    ((void **)p)[-1] = raw;
    return p;
}
BITNET__UNUSED static void *bitnet__calloc(size_t n, size_t size) {
    size_t total;
    void *p;
    if (!bitnet__mul_size(n, size, &total)) {
        bitnet__err(BITNET_ERR_OVERFLOW, "allocation of %zu x %zu bytes overflows", n, size);
        return NULL;
    }
    p = bitnet__malloc(total);
    if (p) memset(p, 0, total);
    return p;
}
BITNET__UNUSED static void bitnet__free(void *p) {
    void *raw;
    if (!p) return;
    raw = ((void **)p)[-1];
    if (bitnet__free_fn) bitnet__free_fn(raw, bitnet__alloc_user);
    else BITNET_FREE(raw);
}

/* >>formats =================================================================================== */

/* Conversions are integer bit manipulation, so they are exact whatever the FP environment.
   The NaN rule, shared by the scalar functions and every bulk path (and what F16C and AArch64
   FCVT do natively): a NaN stays a NaN of the same sign with the quiet bit set; its payload's
   high bits are kept (narrowing truncates the payload, widening pads it with zeros).
   AVX512-BF16 (vcvtneps2bf16) is deliberately not used: it flushes subnormals to zero, and
   bf16 must keep fp32's subnormals. The hardware paths assume the default FP environment (no FTZ/DAZ). */

#if defined(BITNET__X86_SIMD)
/* Per-function ISA targets, so the header builds without -m flags; callers check the CPU first. */
#define BITNET__AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define BITNET__AVX512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#endif

BITNET_API uint16_t bitnet_fp32_to_fp16(float f) {
    uint32_t u, a, sign, e, m, r, rem, half;
    int shift;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* Inf, or NaN: quiet, top payload bits kept */
        return (uint16_t)(a == 0x7f800000u ? (sign | 0x7c00u) : (sign | 0x7e00u | ((a >> 13) & 0x3ffu)));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf (65504 is odd) */
    if (a >= 0x38800000u) { /* normal half: rebias the exponent, round the 13 dropped bits to even */
        a -= 0x38000000u;
        a += 0x0fffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | (a >> 13));
    }
    e = a >> 23; /* half subnormal (or zero): value = m * 2^(e-150), in units of 2^-24 */
    if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to zero */
    m = (a & 0x7fffffu) | 0x800000u;
    shift = 126 - (int)e; /* 14..24 */
    r = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) r++; /* may carry into the smallest normal: right */
    return (uint16_t)(sign | r);
}

BITNET_API float bitnet_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    float f;
    if (e == 0x1f) u = sign | (m ? (0x7fc00000u | (m << 13)) : 0x7f800000u);
    else if (e) u = sign | ((e + 112u) << 23) | (m << 13);
    else if (!m) u = sign;
    else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    memcpy(&f, &u, 4);
    return f;
}

BITNET_API uint16_t bitnet_fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

BITNET_API float bitnet_bf16_to_fp32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- bulk paths: each element matches the scalar function bit for bit ---------------------- */

#if defined(BITNET__X86_SIMD)
static int bitnet__f16c_state; /* 0 unknown, 1 absent, 2 present (cpuid leaf 1 ecx bit 29) */
static int bitnet__has_f16c(void) {
    if (!bitnet__f16c_state) {
        unsigned a, b, c, d;
        bitnet__f16c_state = (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29))) ? 2 : 1;
    }
    return bitnet__f16c_state == 2;
}

BITNET__AVX2_FN static void bitnet__to_fp16_avx2(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = bitnet_fp32_to_fp16(s[i]);
}
BITNET__AVX2_FN static void bitnet__from_fp16_avx2(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++) d[i] = bitnet_fp16_to_fp32(s[i]);
}
/* fp32 bits -> bf16 in the low half of each lane (round to nearest even; NaN quieted). */
BITNET__AVX2_FN static __m256i bitnet__bf16_round_avx2(__m256i u) {
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, q, nan);
}
BITNET__AVX2_FN static void bitnet__to_bf16_avx2(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = bitnet__bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(s + i)));
        __m256i b = bitnet__bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(s + i + 8)));
        /* packus works within 128-bit lanes; the permute restores element order */
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
    }
    for (; i < n; i++) d[i] = bitnet_fp32_to_bf16(s[i]);
}
BITNET__AVX2_FN static void bitnet__from_bf16_avx2(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
        u = _mm256_or_si256(u, _mm256_and_si256(nan, _mm256_set1_epi32(0x400000)));
        _mm256_storeu_si256((__m256i *)(d + i), u);
    }
    for (; i < n; i++) d[i] = bitnet_bf16_to_fp32(s[i]);
}

static __mmask16 bitnet__mask16(size_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

BITNET__AVX512_FN static void bitnet__to_fp16_avx512(const float *s, uint16_t *d, size_t n) {
    size_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = bitnet__mask16(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(d + i, m, h);
    }
}
BITNET__AVX512_FN static void bitnet__from_fp16_avx512(const uint16_t *s, float *d, size_t n) {
    size_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = bitnet__mask16(n - i);
        _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i)));
    }
}
BITNET__AVX512_FN static void bitnet__to_bf16_avx512(const float *s, uint16_t *d, size_t n) {
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    size_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = bitnet__mask16(n - i);
        __m512i u = _mm512_maskz_loadu_epi32(m, s + i);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absm), inf);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(d + i, m, _mm512_cvtepi32_epi16(r));
    }
}
BITNET__AVX512_FN static void bitnet__from_bf16_avx512(const uint16_t *s, float *d, size_t n) {
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    size_t i;
    for (i = 0; i < n; i += 16) {
        __mmask16 m = bitnet__mask16(n - i);
        __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + i)), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, absm), inf);
        u = _mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x400000));
        _mm512_mask_storeu_epi32(d + i, m, u);
    }
}
#endif /* BITNET__X86_SIMD */

#if defined(BITNET__NEON)
static void bitnet__to_fp16_neon(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(s + i))));
    for (; i < n; i++) d[i] = bitnet_fp32_to_fp16(s[i]);
}
static void bitnet__from_fp16_neon(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(d + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(s + i))));
    for (; i < n; i++) d[i] = bitnet_fp16_to_fp32(s[i]);
}
static void bitnet__to_bf16_neon(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(s + i));
        uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
        uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
        r = vbslq_u32(nan, vorrq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(0x40)), r);
        vst1_u16(d + i, vmovn_u32(r));
    }
    for (; i < n; i++) d[i] = bitnet_fp32_to_bf16(s[i]);
}
static void bitnet__from_bf16_neon(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u = vshll_n_u16(vld1_u16(s + i), 16);
        uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
        vst1q_f32(d + i, vreinterpretq_f32_u32(vorrq_u32(u, vandq_u32(nan, vdupq_n_u32(0x400000u)))));
    }
    for (; i < n; i++) d[i] = bitnet_bf16_to_fp32(s[i]);
}
#endif /* BITNET__NEON */

static bitnet_result bitnet__convert_check(const char *fn, const void *src, const void *dst, size_t n) {
    size_t bytes;
    if (!src || !dst) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: src and dst must not be NULL", fn);
    if (!n) return bitnet__err(BITNET_ERR_BAD_SIZE, "%s: n is 0", fn);
    if (!bitnet__mul_size(n, sizeof(float), &bytes))
        return bitnet__err(BITNET_ERR_OVERFLOW, "%s: n=%zu elements overflow the address space", fn, n);
    return BITNET_OK;
}

/* Which bulk path: the active ISA; at the AVX2 level the fp16 paths also need F16C. */
enum { BITNET__CV_SCALAR, BITNET__CV_AVX2, BITNET__CV_AVX512, BITNET__CV_NEON };
static int bitnet__convert_path(int fp16) {
    bitnet_isa isa = bitnet_cpu_isa();
    (void)fp16;
#if defined(BITNET__X86_SIMD)
    if (isa == BITNET_ISA_AVX512) return BITNET__CV_AVX512;
    if (isa == BITNET_ISA_AVX2 && (!fp16 || bitnet__has_f16c())) return BITNET__CV_AVX2;
#endif
#if defined(BITNET__NEON)
    if (isa == BITNET_ISA_NEON) return BITNET__CV_NEON;
#endif
    (void)isa;
    return BITNET__CV_SCALAR;
}

BITNET_API bitnet_result bitnet_convert_fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    size_t i;
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp32_to_fp16", src, dst, n));
    switch (bitnet__convert_path(1)) {
#if defined(BITNET__X86_SIMD)
    case BITNET__CV_AVX512: bitnet__to_fp16_avx512(src, dst, n); return BITNET_OK;
    case BITNET__CV_AVX2: bitnet__to_fp16_avx2(src, dst, n); return BITNET_OK;
#endif
#if defined(BITNET__NEON)
    case BITNET__CV_NEON: bitnet__to_fp16_neon(src, dst, n); return BITNET_OK;
#endif
    default: for (i = 0; i < n; i++) dst[i] = bitnet_fp32_to_fp16(src[i]); return BITNET_OK;
    }
}

BITNET_API bitnet_result bitnet_convert_fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i;
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp16_to_fp32", src, dst, n));
    switch (bitnet__convert_path(1)) {
#if defined(BITNET__X86_SIMD)
    case BITNET__CV_AVX512: bitnet__from_fp16_avx512(src, dst, n); return BITNET_OK;
    case BITNET__CV_AVX2: bitnet__from_fp16_avx2(src, dst, n); return BITNET_OK;
#endif
#if defined(BITNET__NEON)
    case BITNET__CV_NEON: bitnet__from_fp16_neon(src, dst, n); return BITNET_OK;
#endif
    default: for (i = 0; i < n; i++) dst[i] = bitnet_fp16_to_fp32(src[i]); return BITNET_OK;
    }
}

BITNET_API bitnet_result bitnet_convert_fp32_to_bf16(const float *src, uint16_t *dst, size_t n) {
    size_t i;
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp32_to_bf16", src, dst, n));
    switch (bitnet__convert_path(0)) {
#if defined(BITNET__X86_SIMD)
    case BITNET__CV_AVX512: bitnet__to_bf16_avx512(src, dst, n); return BITNET_OK;
    case BITNET__CV_AVX2: bitnet__to_bf16_avx2(src, dst, n); return BITNET_OK;
#endif
#if defined(BITNET__NEON)
    case BITNET__CV_NEON: bitnet__to_bf16_neon(src, dst, n); return BITNET_OK;
#endif
    default: for (i = 0; i < n; i++) dst[i] = bitnet_fp32_to_bf16(src[i]); return BITNET_OK;
    }
}

BITNET_API bitnet_result bitnet_convert_bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    size_t i;
    BITNET__TRY(bitnet__convert_check("bitnet_convert_bf16_to_fp32", src, dst, n));
    switch (bitnet__convert_path(0)) {
#if defined(BITNET__X86_SIMD)
    case BITNET__CV_AVX512: bitnet__from_bf16_avx512(src, dst, n); return BITNET_OK;
    case BITNET__CV_AVX2: bitnet__from_bf16_avx2(src, dst, n); return BITNET_OK;
#endif
#if defined(BITNET__NEON)
    case BITNET__CV_NEON: bitnet__from_bf16_neon(src, dst, n); return BITNET_OK;
#endif
    default: for (i = 0; i < n; i++) dst[i] = bitnet_bf16_to_fp32(src[i]); return BITNET_OK;
    }
}

/* >>quant ===================================================================================== */

/* Round half to even for |v| < 2^22, the range quantization needs (the magic-number trick that
   bitnet.cpp's nearest_int uses, so results match it bit for bit). */
static int bitnet__round_even(float v) {
    float f = v + 12582912.0f; /* 1.5 * 2^23 */
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

BITNET_API bitnet_result bitnet_quantize_ternary(const float *w, size_t n, int8_t *q, float *scale) {
    double sum = 0;
    float s, inv;
    size_t i;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (n == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantize_ternary: n is 0");
    for (i = 0; i < n; i++) sum += fabs((double)w[i]);
    s = (float)(sum / (double)n);
    if (!(s >= 1e-5f)) s = 1e-5f; /* also catches NaN */
    inv = 1.0f / s;
    for (i = 0; i < n; i++) {
        float v = w[i] * inv;
        int r = (v != v) ? 0 : (v > 2.0f ? 2 : (v < -2.0f ? -2 : bitnet__round_even(v)));
        q[i] = (int8_t)(r > 1 ? 1 : (r < -1 ? -1 : r));
    }
    *scale = s;
    return BITNET_OK;
}

/* One activation as the oracle quantizes it: NaN -> 0, clamp to [-128, 127], round half to even. */
static int bitnet__quant_i8(float v) {
    int r = (v != v) ? 0 : (v > 128.0f ? 128 : (v < -129.0f ? -129 : bitnet__round_even(v)));
    return r > 127 ? 127 : (r < -128 ? -128 : r);
}

static void bitnet__quantize_act_row_scalar(const float *x, size_t k, int8_t *q, float *scale, int32_t *sum) {
    float amax = 0, s;
    int32_t acc = 0;
    size_t i;
    for (i = 0; i < k; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a;
    }
    s = 127.0f / (amax > 1e-5f ? amax : 1e-5f);
    for (i = 0; i < k; i++) {
        int r = bitnet__quant_i8(x[i] * s);
        q[i] = (int8_t)r;
        acc += r;
    }
    *scale = s;
    if (sum) *sum = acc;
}

/* The row quantizers below take an optional RMSNorm: with w set, the row quantized is
   y = x * r * w (exactly as bitnet_rmsnorm computes it), so bitnet__rmsnorm_quantize needs no
   float buffer. Every SIMD path matches the scalar oracle bit for bit: max|x| is a max (order
   free; NaN ignored as the scalar compare ignores it), the product x*s is one IEEE multiply,
   NaN becomes 0, the clamp to [-128, 127] comes before rounding (same result, since rounding is
   monotonic), and the rounding is the same magic-number addition. */
typedef void (*bitnet__qrow_fn)(const float *x, const float *w, float r, size_t k, int8_t *q, float *scale,
                                int32_t *sum);

static void bitnet__quantize_row_scalar(const float *x, const float *w, float r, size_t k, int8_t *q, float *scale,
                                        int32_t *sum) {
    float amax = 0, s;
    int32_t acc = 0;
    size_t i;
    for (i = 0; i < k; i++) {
        float a = fabsf(w ? x[i] * r * w[i] : x[i]);
        if (a > amax) amax = a;
    }
    s = 127.0f / (amax > 1e-5f ? amax : 1e-5f);
    for (i = 0; i < k; i++) {
        int v = bitnet__quant_i8((w ? x[i] * r * w[i] : x[i]) * s);
        q[i] = (int8_t)v;
        acc += v;
    }
    *scale = s;
    if (sum) *sum = acc;
}

#define BITNET__MAGIC_RNE 12582912.0f /* 1.5 * 2^23, see bitnet__round_even */
#define BITNET__MAGIC_BITS 0x4B400000 /* its bit pattern */

#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static void bitnet__quantize_row_avx2(const float *x, const float *w, float r, size_t k, int8_t *q,
                                                      float *scale, int32_t *sum) {
    const __m256 vr = _mm256_set1_ps(r), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f), magic = _mm256_set1_ps(BITNET__MAGIC_RNE);
    const __m256i mbits = _mm256_set1_epi32(BITNET__MAGIC_BITS), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 mx = _mm256_setzero_ps(), mx1 = mx, vs;
    __m256i vacc = _mm256_setzero_si256();
    float amax = 0, s, t[8];
    int32_t acc, ti[8];
    size_t i;
    int j;
    for (i = 0; i + 16 <= k; i += 16) { /* two chains: max has a 4-cycle latency */
        __m256 v = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        if (w) {
            v = _mm256_mul_ps(_mm256_mul_ps(v, vr), _mm256_loadu_ps(w + i));
            v1 = _mm256_mul_ps(_mm256_mul_ps(v1, vr), _mm256_loadu_ps(w + i + 8));
        }
        mx = _mm256_max_ps(_mm256_and_ps(v, absm), mx); /* a NaN lane keeps mx */
        mx1 = _mm256_max_ps(_mm256_and_ps(v1, absm), mx1);
    }
    for (; i + 8 <= k; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (w) v = _mm256_mul_ps(_mm256_mul_ps(v, vr), _mm256_loadu_ps(w + i));
        mx = _mm256_max_ps(_mm256_and_ps(v, absm), mx);
    }
    _mm256_storeu_ps(t, _mm256_max_ps(mx, mx1));
    for (j = 0; j < 8; j++) amax = t[j] > amax ? t[j] : amax;
    for (; i < k; i++) {
        float a = fabsf(w ? x[i] * r * w[i] : x[i]);
        if (a > amax) amax = a;
    }
    s = 127.0f / (amax > 1e-5f ? amax : 1e-5f);
    vs = _mm256_set1_ps(s);
    for (i = 0; i + 32 <= k; i += 32) {
        __m256i b[4];
        for (j = 0; j < 4; j++) {
            __m256 v = _mm256_loadu_ps(x + i + 8 * j);
            if (w) v = _mm256_mul_ps(_mm256_mul_ps(v, vr), _mm256_loadu_ps(w + i + 8 * j));
            v = _mm256_mul_ps(v, vs);
            v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); /* NaN -> 0 */
            v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
            b[j] = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(v, magic)), mbits);
            vacc = _mm256_add_epi32(vacc, b[j]);
        }
        /* packs work within 128-bit lanes; the dword permute restores element order */
        _mm256_storeu_si256((__m256i *)(q + i),
                            _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(b[0], b[1]),
                                                                           _mm256_packs_epi32(b[2], b[3])), order));
    }
    _mm256_storeu_si256((__m256i *)ti, vacc);
    for (acc = 0, j = 0; j < 8; j++) acc += ti[j];
    for (; i < k; i++) {
        int v = bitnet__quant_i8((w ? x[i] * r * w[i] : x[i]) * s);
        q[i] = (int8_t)v;
        acc += v;
    }
    *scale = s;
    if (sum) *sum = acc;
}

BITNET__AVX512_FN static void bitnet__quantize_row_avx512(const float *x, const float *w, float r, size_t k, int8_t *q,
                                                          float *scale, int32_t *sum) {
    const __m512 vr = _mm512_set1_ps(r);
    const __m512 lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f), magic = _mm512_set1_ps(BITNET__MAGIC_RNE);
    const __m512i mbits = _mm512_set1_epi32(BITNET__MAGIC_BITS);
    __m512 mx = _mm512_setzero_ps(), mx1 = mx, vs;
    __m512i vacc = _mm512_setzero_si512();
    float amax, s;
    size_t i;
    for (i = 0; i + 32 <= k; i += 32) { /* two chains: max has a 4-cycle latency */
        __m512 v = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        if (w) {
            v = _mm512_mul_ps(_mm512_mul_ps(v, vr), _mm512_loadu_ps(w + i));
            v1 = _mm512_mul_ps(_mm512_mul_ps(v1, vr), _mm512_loadu_ps(w + i + 16));
        }
        mx = _mm512_max_ps(_mm512_abs_ps(v), mx); /* a NaN lane keeps mx */
        mx1 = _mm512_max_ps(_mm512_abs_ps(v1), mx1);
    }
    for (; i < k; i += 16) { /* masked-off lanes load 0, which changes neither max nor sum */
        __mmask16 m = bitnet__mask16(k - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        if (w) v = _mm512_mul_ps(_mm512_mul_ps(v, vr), _mm512_maskz_loadu_ps(m, w + i));
        mx = _mm512_max_ps(_mm512_abs_ps(v), mx);
    }
    amax = _mm512_reduce_max_ps(_mm512_max_ps(mx, mx1));
    s = 127.0f / (amax > 1e-5f ? amax : 1e-5f);
    vs = _mm512_set1_ps(s);
    for (i = 0; i < k; i += 16) {
        __mmask16 m = bitnet__mask16(k - i);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512i b;
        if (w) v = _mm512_mul_ps(_mm512_mul_ps(v, vr), _mm512_maskz_loadu_ps(m, w + i));
        v = _mm512_mul_ps(v, vs);
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v); /* NaN -> 0 */
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        b = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(v, magic)), mbits);
        vacc = _mm512_add_epi32(vacc, b);
        _mm512_mask_cvtepi32_storeu_epi8(q + i, m, b);
    }
    *scale = s;
    if (sum) *sum = _mm512_reduce_add_epi32(vacc);
}
#endif /* BITNET__X86_SIMD */

#if defined(BITNET__NEON)
static void bitnet__quantize_row_neon(const float *x, const float *w, float r, size_t k, int8_t *q, float *scale,
                                      int32_t *sum) {
    const float32x4_t vr = vdupq_n_f32(r), zero = vdupq_n_f32(0.0f);
    const float32x4_t lo = vdupq_n_f32(-128.0f), hi = vdupq_n_f32(127.0f), magic = vdupq_n_f32(BITNET__MAGIC_RNE);
    const int32x4_t mbits = vdupq_n_s32(BITNET__MAGIC_BITS);
    float32x4_t mx = zero, vs;
    int32x4_t vacc = vdupq_n_s32(0);
    float amax, s;
    int32_t acc;
    size_t i;
    int j;
    for (i = 0; i + 4 <= k; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        if (w) v = vmulq_f32(vmulq_f32(v, vr), vld1q_f32(w + i));
        v = vabsq_f32(v);
        mx = vbslq_f32(vcgtq_f32(v, mx), v, mx); /* the scalar compare: a NaN lane keeps mx */
    }
    amax = vmaxvq_f32(mx);
    for (; i < k; i++) {
        float a = fabsf(w ? x[i] * r * w[i] : x[i]);
        if (a > amax) amax = a;
    }
    s = 127.0f / (amax > 1e-5f ? amax : 1e-5f);
    vs = vdupq_n_f32(s);
    for (i = 0; i + 16 <= k; i += 16) {
        int16x4_t h[4];
        for (j = 0; j < 4; j++) {
            float32x4_t v = vld1q_f32(x + i + 4 * j);
            int32x4_t b;
            if (w) v = vmulq_f32(vmulq_f32(v, vr), vld1q_f32(w + i + 4 * j));
            v = vmulq_f32(v, vs);
            v = vbslq_f32(vceqq_f32(v, v), v, zero); /* NaN -> 0 */
            v = vminq_f32(vmaxq_f32(v, lo), hi);
            b = vsubq_s32(vreinterpretq_s32_f32(vaddq_f32(v, magic)), mbits);
            vacc = vaddq_s32(vacc, b);
            h[j] = vmovn_s32(b);
        }
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(vcombine_s16(h[0], h[1])), vmovn_s16(vcombine_s16(h[2], h[3]))));
    }
    acc = vaddvq_s32(vacc);
    for (; i < k; i++) {
        int v = bitnet__quant_i8((w ? x[i] * r * w[i] : x[i]) * s);
        q[i] = (int8_t)v;
        acc += v;
    }
    *scale = s;
    if (sum) *sum = acc;
}
#endif /* BITNET__NEON */

/* The row quantizer of an ISA (the oracle's generalisation on the scalar path). */
static bitnet__qrow_fn bitnet__quantize_row_fn(bitnet_isa isa) {
    switch (isa) {
#if defined(BITNET__X86_SIMD)
    case BITNET_ISA_AVX512: return bitnet__quantize_row_avx512;
    case BITNET_ISA_AVX2: return bitnet__quantize_row_avx2;
#endif
#if defined(BITNET__NEON)
    case BITNET_ISA_NEON: return bitnet__quantize_row_neon;
#endif
    default: return bitnet__quantize_row_scalar;
    }
}

BITNET_API bitnet_result bitnet_quantize_act(const float *x, size_t m, size_t k, int8_t *q, float *scale, int32_t *sum) {
    size_t i, mk;
    bitnet_isa isa;
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (m == 0 || k == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantize_act: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &mk)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_quantize_act: m*k overflows");
    isa = bitnet_cpu_isa();
    if (isa == BITNET_ISA_SCALAR) {
        for (i = 0; i < m; i++)
            bitnet__quantize_act_row_scalar(x + i * k, k, q + i * k, scale + i, sum ? sum + i : NULL);
    } else {
        bitnet__qrow_fn fn = bitnet__quantize_row_fn(isa);
        for (i = 0; i < m; i++) fn(x + i * k, NULL, 1.0f, k, q + i * k, scale + i, sum ? sum + i : NULL);
    }
    return BITNET_OK;
}

BITNET_API size_t bitnet_i2s_bytes(size_t n, size_t k) {
    size_t nk;
    if (n == 0 || k == 0 || k % BITNET_I2S_BLOCK) return 0;
    if (!bitnet__mul_size(n, k, &nk) || nk / 4 > SIZE_MAX - 32) return 0;
    return nk / 4 + 32;
}

static bitnet_result bitnet__i2s_check(const char *fn, const void *buf, size_t bytes, size_t n, size_t k) {
    size_t need;
    if (!buf) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: buffer is NULL", fn);
    if (n == 0 || k == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "%s: n=%zu k=%zu", fn, n, k);
    if (k % BITNET_I2S_BLOCK)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: k=%zu is not a multiple of %d, which I2_S rows need", fn, k,
                           BITNET_I2S_BLOCK);
    need = bitnet_i2s_bytes(n, k);
    if (need == 0) return bitnet__err(BITNET_ERR_OVERFLOW, "%s: n=%zu k=%zu overflows", fn, n, k);
    if (bytes < need) return bitnet__err(BITNET_ERR_BAD_SIZE, "%s: buffer holds %zu bytes, I2_S %zux%zu needs %zu", fn, bytes, n, k, need);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_i2s_pack(const int8_t *q, size_t n, size_t k, float scale, void *dst, size_t dst_bytes) {
    size_t nk, blk, i;
    uint8_t *d = (uint8_t *)dst;
    BITNET__CHECK_PTR(q);
    BITNET__TRY(bitnet__i2s_check("bitnet_i2s_pack", dst, dst_bytes, n, k));
    nk = n * k;
    for (blk = 0; blk < nk / BITNET_I2S_BLOCK; blk++) {
        const int8_t *s = q + blk * BITNET_I2S_BLOCK;
        uint8_t *o = d + blk * 32;
        for (i = 0; i < 32; i++) {
            int j;
            uint8_t b = 0;
            for (j = 0; j < 4; j++) {
                int v = s[i + 32 * j];
                if (v < -1 || v > 1)
                    return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_i2s_pack: weight %zu is %d, not ternary",
                                       blk * BITNET_I2S_BLOCK + i + 32 * (size_t)j, v);
                b |= (uint8_t)((v + 1) << (6 - 2 * j));
            }
            o[i] = b;
        }
    }
    memset(d + nk / 4, 0, 32);
    memcpy(d + nk / 4, &scale, 4);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_i2s_unpack(const void *src, size_t src_bytes, size_t n, size_t k, int8_t *q, float *scale) {
    size_t nk, i;
    const uint8_t *s = (const uint8_t *)src;
    BITNET__CHECK_PTR(q);
    BITNET__TRY(bitnet__i2s_check("bitnet_i2s_unpack", src, src_bytes, n, k));
    nk = n * k;
    for (i = 0; i < nk; i++) {
        size_t blk = i / BITNET_I2S_BLOCK, j = i % BITNET_I2S_BLOCK;
        int code = (s[blk * 32 + (j % 32)] >> (6 - 2 * (j / 32))) & 3;
        if (code == 3)
            return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_i2s_unpack: weight %zu has the unused code 3", i);
        q[i] = (int8_t)(code - 1);
    }
    if (scale) memcpy(scale, s + nk / 4, 4);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_i2s_from_hf(const uint8_t *packed, size_t n, size_t k, float weight_scale,
                                            void *dst, size_t dst_bytes) {
    size_t r, c, n4;
    uint8_t *d = (uint8_t *)dst;
    BITNET__CHECK_PTR(packed);
    BITNET__TRY(bitnet__i2s_check("bitnet_i2s_from_hf", dst, dst_bytes, n, k));
    if (n % 4) return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_i2s_from_hf: n=%zu is not a multiple of 4", n);
    n4 = n / 4;
    memset(d, 0, n * k / 4);
    for (r = 0; r < n; r++) {
        const uint8_t *row = packed + (r % n4) * k;
        int shift = 2 * (int)(r / n4);
        for (c = 0; c < k; c++) {
            int code = (row[c] >> shift) & 3; /* HF and I2_S both store w + 1 */
            size_t e = r * k + c, blk = e / BITNET_I2S_BLOCK, j = e % BITNET_I2S_BLOCK;
            if (code == 3) return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_i2s_from_hf: weight [%zu][%zu] has code 3", r, c);
            d[blk * 32 + (j % 32)] |= (uint8_t)(code << (6 - 2 * (j / 32)));
        }
    }
    memset(d + n * k / 4, 0, 32);
    memcpy(d + n * k / 4, &weight_scale, 4);
    return BITNET_OK;
}

/* >>threads =================================================================================== */

/* fn(arg, ith, nth) runs once for each ith in [0, nth) across the pool; returns when all are done.
   (Placeholder: runs inline until the pool lands.) */
typedef void (*bitnet__task_fn)(void *arg, int ith, int nth);
BITNET__UNUSED static void bitnet__parallel(bitnet__task_fn fn, void *arg) { fn(arg, 0, 1); }

/* >>cpu-math ================================================================================== */

/* fp32 GEMM, RMSNorm, softmax and the fp16 GEMV: a scalar reference, then AVX2, AVX-512 and
   NEON paths chosen by bitnet_cpu_isa(). Tolerances of the SIMD paths against scalar (checked
   by tests/test_math.c):
     RMSNorm        sum of squares in double on every path; equal to scalar up to the last bits
                    of that double sum, i.e. |d| <= 1e-6 |scalar| (in practice bit-identical).
     softmax        vector exp (degree-8 Taylor after range reduction, ~2 ulp) and lane-wise
                    sums: |d| <= 2e-6 |scalar| + 1e-12.
     GEMM / GEMV    lane-wise FMA sums in another order: |d| <= 1e-5 sum_c |w_c a_c|.
   Quantization (>>quant) is bit-identical on every path, including the fused RMSNorm one. */

/* [lo, hi) of worker ith of nth over total items, without overflow. */
static void bitnet__range_split(size_t total, int ith, int nth, size_t *lo, size_t *hi) {
    size_t q = total / (size_t)nth, r = total % (size_t)nth, i = (size_t)ith;
    *lo = q * i + (i < r ? i : r);
    *hi = *lo + q + (i < r ? 1 : 0);
}

/* ---- horizontal helpers ------------------------------------------------------------------ */
#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static float bitnet__hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
BITNET__AVX2_FN static double bitnet__hsum_pd_avx2(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
#endif

/* ---- RMSNorm: r = 1/sqrt(mean(x^2) + eps) from a double sum; out = x * r * w ------------------ */
static double bitnet__sumsq_scalar(const float *x, size_t k) {
    double ss = 0;
    size_t c;
    for (c = 0; c < k; c++) ss += (double)x[c] * x[c];
    return ss;
}
static void bitnet__scale_mul_scalar(const float *x, float r, const float *w, size_t k, float *out) {
    size_t c;
    for (c = 0; c < k; c++) out[c] = x[c] * r * w[c];
}

#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static double bitnet__sumsq_avx2(const float *x, size_t k) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    double ss;
    size_t c = 0;
    for (; c + 8 <= k; c += 8) { /* float squares are exact in double, as in the scalar sum */
        __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + c)), hi = _mm256_cvtps_pd(_mm_loadu_ps(x + c + 4));
        a0 = _mm256_fmadd_pd(lo, lo, a0);
        a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    ss = bitnet__hsum_pd_avx2(_mm256_add_pd(a0, a1));
    for (; c < k; c++) ss += (double)x[c] * x[c];
    return ss;
}
BITNET__AVX2_FN static void bitnet__scale_mul_avx2(const float *x, float r, const float *w, size_t k, float *out) {
    const __m256 vr = _mm256_set1_ps(r);
    size_t c = 0;
    for (; c + 8 <= k; c += 8)
        _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + c), vr), _mm256_loadu_ps(w + c)));
    for (; c < k; c++) out[c] = x[c] * r * w[c];
}
BITNET__AVX512_FN static double bitnet__sumsq_avx512(const float *x, size_t k) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    double ss;
    size_t c = 0;
    for (; c + 16 <= k; c += 16) {
        __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + c)), hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + c + 8));
        a0 = _mm512_fmadd_pd(lo, lo, a0);
        a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
    for (; c < k; c++) ss += (double)x[c] * x[c];
    return ss;
}
BITNET__AVX512_FN static void bitnet__scale_mul_avx512(const float *x, float r, const float *w, size_t k, float *out) {
    const __m512 vr = _mm512_set1_ps(r);
    size_t c;
    for (c = 0; c < k; c += 16) {
        __mmask16 m = bitnet__mask16(k - c);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), vr);
        _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + c)));
    }
}
#endif
#if defined(BITNET__NEON)
static double bitnet__sumsq_neon(const float *x, size_t k) {
    float64x2_t a0 = vdupq_n_f64(0), a1 = vdupq_n_f64(0);
    double ss;
    size_t c = 0;
    for (; c + 4 <= k; c += 4) {
        float32x4_t v = vld1q_f32(x + c);
        float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
        a0 = vfmaq_f64(a0, lo, lo);
        a1 = vfmaq_f64(a1, hi, hi);
    }
    ss = vaddvq_f64(vaddq_f64(a0, a1));
    for (; c < k; c++) ss += (double)x[c] * x[c];
    return ss;
}
static void bitnet__scale_mul_neon(const float *x, float r, const float *w, size_t k, float *out) {
    const float32x4_t vr = vdupq_n_f32(r);
    size_t c = 0;
    for (; c + 4 <= k; c += 4) vst1q_f32(out + c, vmulq_f32(vmulq_f32(vld1q_f32(x + c), vr), vld1q_f32(w + c)));
    for (; c < k; c++) out[c] = x[c] * r * w[c];
}
#endif

/* The RMS factor of one row on the given path. */
static float bitnet__rms_factor(bitnet_isa isa, const float *x, size_t k, float eps) {
    double ss;
    switch (isa) {
#if defined(BITNET__X86_SIMD)
    case BITNET_ISA_AVX512: ss = bitnet__sumsq_avx512(x, k); break;
    case BITNET_ISA_AVX2: ss = bitnet__sumsq_avx2(x, k); break;
#endif
#if defined(BITNET__NEON)
    case BITNET_ISA_NEON: ss = bitnet__sumsq_neon(x, k); break;
#endif
    default: ss = bitnet__sumsq_scalar(x, k); break;
    }
    return (float)(1.0 / sqrt(ss / (double)k + (double)eps));
}

BITNET_API bitnet_result bitnet_rmsnorm(const float *x, const float *weight, size_t m, size_t k, float eps, float *out) {
    size_t i, t;
    bitnet_isa isa;
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(weight);
    BITNET__CHECK_PTR(out);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_rmsnorm: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &t)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_rmsnorm: m*k overflows");
    isa = bitnet_cpu_isa();
    for (i = 0; i < m; i++) {
        const float *xi = x + i * k;
        float *oi = out + i * k, r = bitnet__rms_factor(isa, xi, k, eps);
        switch (isa) {
#if defined(BITNET__X86_SIMD)
        case BITNET_ISA_AVX512: bitnet__scale_mul_avx512(xi, r, weight, k, oi); break;
        case BITNET_ISA_AVX2: bitnet__scale_mul_avx2(xi, r, weight, k, oi); break;
#endif
#if defined(BITNET__NEON)
        case BITNET_ISA_NEON: bitnet__scale_mul_neon(xi, r, weight, k, oi); break;
#endif
        default: bitnet__scale_mul_scalar(xi, r, weight, k, oi); break;
        }
    }
    return BITNET_OK;
}

/* RMSNorm of one row of k, then its per-token int8 quantization, in one go without a float
   buffer (the normalised values are recomputed, they are in L1). Bit-identical to bitnet_rmsnorm
   followed by bitnet_quantize_act on the same path. sum may be NULL. For the forward pass. */
static void bitnet__rmsnorm_quantize(const float *x, const float *w, size_t k, float eps, int8_t *q, float *scale,
                                     int32_t *sum) {
    bitnet_isa isa = bitnet_cpu_isa();
    bitnet__quantize_row_fn(isa)(x, w, bitnet__rms_factor(isa, x, k, eps), k, q, scale, sum);
}

BITNET_API bitnet_result bitnet_rmsnorm_quantize(const float *x, const float *weight, size_t m, size_t k, float eps,
                                                 int8_t *q, float *scale, int32_t *sum) {
    size_t i, t;
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(weight);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_rmsnorm_quantize: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &t)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_rmsnorm_quantize: m*k overflows");
    for (i = 0; i < m; i++) bitnet__rmsnorm_quantize(x + i * k, weight, k, eps, q + i * k, scale + i, sum ? sum + i : NULL);
    return BITNET_OK;
}

/* ---- softmax ------------------------------------------------------------------------------ */
static void bitnet__softmax_row_scalar(float *x, size_t k) {
    float mx = x[0], fs;
    double sum = 0;
    size_t c;
    for (c = 1; c < k; c++) mx = x[c] > mx ? x[c] : mx;
    for (c = 0; c < k; c++) sum += (x[c] = expf(x[c] - mx));
    fs = (float)sum;
    for (c = 0; c < k; c++) x[c] /= fs;
}

/* exp for x <= 0 (softmax arguments): x = n ln2 + t, |t| <= ln2/2, exp(t) by a degree-8 Taylor
   polynomial (truncation error < 3e-10), times 2^n built in the exponent field. Below ln(FLT_MIN)
   the result is 0 (expf would give a subnormal < 1.2e-38), so -Inf gives 0; NaN stays NaN.
   The row sum is kept in float lanes folded into a double every 512 elements (the scalar path
   sums in double), so long rows (a 128K vocabulary) stay accurate. */
#define BITNET__EXP_LO -87.33654f
#define BITNET__SOFTMAX_FOLD 512 /* lane sums go into a double every this many elements */
#define BITNET__EXP_COEFS(X) X(1.0f / 5040) X(1.0f / 720) X(1.0f / 120) X(1.0f / 24) X(1.0f / 6) X(0.5f) X(1.0f) X(1.0f)
#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static __m256 bitnet__exp_avx2(__m256 x) {
    __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(BITNET__EXP_LO), _CMP_LT_OQ), n, t, p;
    x = _mm256_min_ps(_mm256_set1_ps(0.0f), _mm256_max_ps(_mm256_set1_ps(BITNET__EXP_LO), x)); /* NaN passes */
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    t = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), t);
    p = _mm256_set1_ps(1.0f / 40320);
#define BITNET__X(c) p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
    BITNET__EXP_COEFS(BITNET__X)
#undef BITNET__X
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(
                             _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
    return _mm256_andnot_ps(under, p);
}
BITNET__AVX2_FN static void bitnet__softmax_row_avx2(float *x, size_t k) {
    __m256 vmx = _mm256_set1_ps(x[0]), s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), v;
    float mx, t[8], fs;
    double sum;
    size_t c;
    int j;
    for (c = 0; c + 8 <= k; c += 8) vmx = _mm256_max_ps(_mm256_loadu_ps(x + c), vmx);
    _mm256_storeu_ps(t, vmx);
    for (mx = t[0], j = 1; j < 8; j++) mx = t[j] > mx ? t[j] : mx;
    for (; c < k; c++) mx = x[c] > mx ? x[c] : mx;
    vmx = _mm256_set1_ps(mx);
    for (sum = 0, c = 0; c + 16 <= k; c += 16) {
        __m256 e0 = bitnet__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + c), vmx));
        __m256 e1 = bitnet__exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + c + 8), vmx));
        _mm256_storeu_ps(x + c, e0);
        _mm256_storeu_ps(x + c + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
        if ((c & (BITNET__SOFTMAX_FOLD - 1)) == BITNET__SOFTMAX_FOLD - 16) { /* fold into double now and then */
            sum += bitnet__hsum_avx2(_mm256_add_ps(s0, s1));
            s0 = s1 = _mm256_setzero_ps();
        }
    }
    sum += bitnet__hsum_avx2(_mm256_add_ps(s0, s1));
    for (; c < k; c++) sum += (x[c] = expf(x[c] - mx));
    fs = (float)sum;
    v = _mm256_set1_ps(1.0f / fs); /* a multiply: within 1.5 ulp of the division, much faster */
    for (c = 0; c + 8 <= k; c += 8) _mm256_storeu_ps(x + c, _mm256_mul_ps(_mm256_loadu_ps(x + c), v));
    for (; c < k; c++) x[c] *= 1.0f / fs;
}
BITNET__AVX512_FN static __m512 bitnet__exp_avx512(__m512 x) {
    __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(BITNET__EXP_LO), _CMP_LT_OQ);
    __m512 n, t, p;
    x = _mm512_min_ps(_mm512_set1_ps(0.0f), _mm512_max_ps(_mm512_set1_ps(BITNET__EXP_LO), x)); /* NaN passes */
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    t = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), t);
    p = _mm512_set1_ps(1.0f / 40320);
#define BITNET__X(c) p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
    BITNET__EXP_COEFS(BITNET__X)
#undef BITNET__X
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(
                             _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23)));
    return _mm512_maskz_mov_ps((__mmask16)~under, p);
}
BITNET__AVX512_FN static void bitnet__softmax_row_avx512(float *x, size_t k) {
    __m512 vmx = _mm512_set1_ps(x[0]), s = _mm512_setzero_ps(), v;
    float mx, fs;
    double sum;
    size_t c;
    for (c = 0; c < k; c += 16) { /* masked-off lanes keep the running max */
        __mmask16 m = bitnet__mask16(k - c);
        vmx = _mm512_mask_max_ps(vmx, m, _mm512_maskz_loadu_ps(m, x + c), vmx);
    }
    mx = _mm512_reduce_max_ps(vmx);
    vmx = _mm512_set1_ps(mx);
    for (sum = 0, c = 0; c < k; c += 16) {
        __mmask16 m = bitnet__mask16(k - c);
        __m512 e = bitnet__exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + c), vmx));
        _mm512_mask_storeu_ps(x + c, m, e);
        s = _mm512_add_ps(s, _mm512_maskz_mov_ps(m, e));
        if ((c & (BITNET__SOFTMAX_FOLD - 1)) == BITNET__SOFTMAX_FOLD - 16) { /* fold into double now and then */
            sum += _mm512_reduce_add_ps(s);
            s = _mm512_setzero_ps();
        }
    }
    fs = (float)(sum + _mm512_reduce_add_ps(s));
    v = _mm512_set1_ps(1.0f / fs); /* a multiply: within 1.5 ulp of the division, much faster */
    for (c = 0; c < k; c += 16) {
        __mmask16 m = bitnet__mask16(k - c);
        _mm512_mask_storeu_ps(x + c, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), v));
    }
}
#endif
#if defined(BITNET__NEON)
static float32x4_t bitnet__exp_neon(float32x4_t x) {
    uint32x4_t under = vcltq_f32(x, vdupq_n_f32(BITNET__EXP_LO));
    float32x4_t n, t, p;
    x = vminq_f32(vdupq_n_f32(0.0f), vmaxq_f32(vdupq_n_f32(BITNET__EXP_LO), x)); /* NaN passes */
    n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    t = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    t = vfmsq_f32(t, n, vdupq_n_f32(-2.12194440e-4f));
    p = vdupq_n_f32(1.0f / 40320);
#define BITNET__X(c) p = vfmaq_f32(vdupq_n_f32(c), p, t);
    BITNET__EXP_COEFS(BITNET__X)
#undef BITNET__X
    p = vmulq_f32(p, vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23)));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(p), under));
}
static void bitnet__softmax_row_neon(float *x, size_t k) {
    float32x4_t vmx = vdupq_n_f32(x[0]), s0 = vdupq_n_f32(0), s1 = vdupq_n_f32(0), v;
    float mx, fs;
    double sum;
    size_t c;
    for (c = 0; c + 4 <= k; c += 4) { /* the scalar compare: NaN lanes keep the max */
        float32x4_t a = vld1q_f32(x + c);
        vmx = vbslq_f32(vcgtq_f32(a, vmx), a, vmx);
    }
    mx = vmaxvq_f32(vmx);
    for (; c < k; c++) mx = x[c] > mx ? x[c] : mx;
    vmx = vdupq_n_f32(mx);
    for (sum = 0, c = 0; c + 8 <= k; c += 8) {
        float32x4_t e0 = bitnet__exp_neon(vsubq_f32(vld1q_f32(x + c), vmx));
        float32x4_t e1 = bitnet__exp_neon(vsubq_f32(vld1q_f32(x + c + 4), vmx));
        vst1q_f32(x + c, e0);
        vst1q_f32(x + c + 4, e1);
        s0 = vaddq_f32(s0, e0);
        s1 = vaddq_f32(s1, e1);
        if ((c & (BITNET__SOFTMAX_FOLD - 1)) == BITNET__SOFTMAX_FOLD - 8) { /* fold into double now and then */
            sum += vaddvq_f32(vaddq_f32(s0, s1));
            s0 = s1 = vdupq_n_f32(0);
        }
    }
    sum += vaddvq_f32(vaddq_f32(s0, s1));
    for (; c < k; c++) sum += (x[c] = expf(x[c] - mx));
    fs = (float)sum;
    v = vdupq_n_f32(1.0f / fs); /* a multiply: within 1.5 ulp of the division, much faster */
    for (c = 0; c + 4 <= k; c += 4) vst1q_f32(x + c, vmulq_f32(vld1q_f32(x + c), v));
    for (; c < k; c++) x[c] *= 1.0f / fs;
}
#endif

BITNET_API bitnet_result bitnet_softmax(float *x, size_t m, size_t k) {
    size_t i, t;
    bitnet_isa isa;
    BITNET__CHECK_PTR(x);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_softmax: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &t)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_softmax: m*k overflows");
    isa = bitnet_cpu_isa();
    for (i = 0; i < m; i++) {
        float *xi = x + i * k;
        switch (isa) {
#if defined(BITNET__X86_SIMD)
        case BITNET_ISA_AVX512: bitnet__softmax_row_avx512(xi, k); break;
        case BITNET_ISA_AVX2: bitnet__softmax_row_avx2(xi, k); break;
#endif
#if defined(BITNET__NEON)
        case BITNET_ISA_NEON: bitnet__softmax_row_neon(xi, k); break;
#endif
        default: bitnet__softmax_row_scalar(xi, k); break;
        }
    }
    return BITNET_OK;
}

/* ---- fp32 GEMM: out[i][r] = a[i] . w[r] ------------------------------------------------------ */
/* Each path computes weight rows [r0, r1) for all m activation rows: 4 weight rows by 2
   activation rows per step (8 vector accumulators), weight rows outermost so the 4-row block
   stays in cache while the activations stream past. Missing rows of a tile repeat a valid row
   and their results are dropped. */
static void bitnet__gemm_f32_scalar(const float *w, size_t k, const float *a, size_t m, float *out, size_t n,
                                    size_t r0, size_t r1) {
    size_t i, r, c;
    for (r = r0; r < r1; r++)
        for (i = 0; i < m; i++) {
            float acc = 0;
            for (c = 0; c < k; c++) acc += w[r * k + c] * a[i * k + c];
            out[i * n + r] = acc;
        }
}

#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static void bitnet__gemm_f32_avx2(const float *w, size_t k, const float *a, size_t m, float *out,
                                                  size_t n, size_t r0, size_t r1) {
    size_t r, i, c, k8 = k & ~(size_t)7;
    for (r = r0; r < r1; r += 4) {
        size_t nr = BITNET__MIN(r1 - r, 4), j;
        const float *w0 = w + r * k, *w1 = w + (r + (nr > 1)) * k, *w2 = w + (r + (nr > 2) * 2) * k;
        const float *w3 = w + (r + (nr > 3) * 3) * k, *wr[4];
        wr[0] = w0; wr[1] = w1; wr[2] = w2; wr[3] = w3;
        for (i = 0; i < m; i += 2) {
            size_t ni = BITNET__MIN(m - i, 2), ii;
            const float *a0 = a + i * k, *a1 = a + (i + ni - 1) * k, *ar[2];
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            __m256 acc[2][4];
            for (c = 0; c < k8; c += 8) {
                __m256 x0 = _mm256_loadu_ps(a0 + c), x1 = _mm256_loadu_ps(a1 + c), v;
                v = _mm256_loadu_ps(w0 + c); c00 = _mm256_fmadd_ps(v, x0, c00); c10 = _mm256_fmadd_ps(v, x1, c10);
                v = _mm256_loadu_ps(w1 + c); c01 = _mm256_fmadd_ps(v, x0, c01); c11 = _mm256_fmadd_ps(v, x1, c11);
                v = _mm256_loadu_ps(w2 + c); c02 = _mm256_fmadd_ps(v, x0, c02); c12 = _mm256_fmadd_ps(v, x1, c12);
                v = _mm256_loadu_ps(w3 + c); c03 = _mm256_fmadd_ps(v, x0, c03); c13 = _mm256_fmadd_ps(v, x1, c13);
            }
            acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[0][3] = c03;
            acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12; acc[1][3] = c13;
            ar[0] = a0; ar[1] = a1;
            for (ii = 0; ii < ni; ii++)
                for (j = 0; j < nr; j++) {
                    float s = bitnet__hsum_avx2(acc[ii][j]);
                    for (c = k8; c < k; c++) s += wr[j][c] * ar[ii][c];
                    out[(i + ii) * n + r + j] = s;
                }
        }
    }
}
BITNET__AVX512_FN static void bitnet__gemm_f32_avx512(const float *w, size_t k, const float *a, size_t m, float *out,
                                                      size_t n, size_t r0, size_t r1) {
    size_t r, i, c;
    for (r = r0; r < r1; r += 4) {
        size_t nr = BITNET__MIN(r1 - r, 4), j;
        const float *w0 = w + r * k, *w1 = w + (r + (nr > 1)) * k, *w2 = w + (r + (nr > 2) * 2) * k;
        const float *w3 = w + (r + (nr > 3) * 3) * k;
        for (i = 0; i < m; i += 2) {
            size_t ni = BITNET__MIN(m - i, 2), ii;
            const float *a0 = a + i * k, *a1 = a + (i + ni - 1) * k;
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            __m512 acc[2][4];
            for (c = 0; c < k; c += 16) { /* masked-off lanes are 0 */
                __mmask16 mk = bitnet__mask16(k - c);
                __m512 x0 = _mm512_maskz_loadu_ps(mk, a0 + c), x1 = _mm512_maskz_loadu_ps(mk, a1 + c), v;
                v = _mm512_maskz_loadu_ps(mk, w0 + c); c00 = _mm512_fmadd_ps(v, x0, c00); c10 = _mm512_fmadd_ps(v, x1, c10);
                v = _mm512_maskz_loadu_ps(mk, w1 + c); c01 = _mm512_fmadd_ps(v, x0, c01); c11 = _mm512_fmadd_ps(v, x1, c11);
                v = _mm512_maskz_loadu_ps(mk, w2 + c); c02 = _mm512_fmadd_ps(v, x0, c02); c12 = _mm512_fmadd_ps(v, x1, c12);
                v = _mm512_maskz_loadu_ps(mk, w3 + c); c03 = _mm512_fmadd_ps(v, x0, c03); c13 = _mm512_fmadd_ps(v, x1, c13);
            }
            acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[0][3] = c03;
            acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12; acc[1][3] = c13;
            for (ii = 0; ii < ni; ii++)
                for (j = 0; j < nr; j++) out[(i + ii) * n + r + j] = _mm512_reduce_add_ps(acc[ii][j]);
        }
    }
}
#endif
#if defined(BITNET__NEON)
static void bitnet__gemm_f32_neon(const float *w, size_t k, const float *a, size_t m, float *out, size_t n, size_t r0,
                                  size_t r1) {
    size_t r, i, c, k4 = k & ~(size_t)3;
    for (r = r0; r < r1; r += 4) {
        size_t nr = BITNET__MIN(r1 - r, 4), j;
        const float *w0 = w + r * k, *w1 = w + (r + (nr > 1)) * k, *w2 = w + (r + (nr > 2) * 2) * k;
        const float *w3 = w + (r + (nr > 3) * 3) * k, *wr[4];
        wr[0] = w0; wr[1] = w1; wr[2] = w2; wr[3] = w3;
        for (i = 0; i < m; i += 2) {
            size_t ni = BITNET__MIN(m - i, 2), ii;
            const float *a0 = a + i * k, *a1 = a + (i + ni - 1) * k, *ar[2];
            float32x4_t c00 = vdupq_n_f32(0), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            float32x4_t acc[2][4];
            for (c = 0; c < k4; c += 4) {
                float32x4_t x0 = vld1q_f32(a0 + c), x1 = vld1q_f32(a1 + c), v;
                v = vld1q_f32(w0 + c); c00 = vfmaq_f32(c00, v, x0); c10 = vfmaq_f32(c10, v, x1);
                v = vld1q_f32(w1 + c); c01 = vfmaq_f32(c01, v, x0); c11 = vfmaq_f32(c11, v, x1);
                v = vld1q_f32(w2 + c); c02 = vfmaq_f32(c02, v, x0); c12 = vfmaq_f32(c12, v, x1);
                v = vld1q_f32(w3 + c); c03 = vfmaq_f32(c03, v, x0); c13 = vfmaq_f32(c13, v, x1);
            }
            acc[0][0] = c00; acc[0][1] = c01; acc[0][2] = c02; acc[0][3] = c03;
            acc[1][0] = c10; acc[1][1] = c11; acc[1][2] = c12; acc[1][3] = c13;
            ar[0] = a0; ar[1] = a1;
            for (ii = 0; ii < ni; ii++)
                for (j = 0; j < nr; j++) {
                    float s = vaddvq_f32(acc[ii][j]);
                    for (c = k4; c < k; c++) s += wr[j][c] * ar[ii][c];
                    out[(i + ii) * n + r + j] = s;
                }
        }
    }
}
#endif

typedef struct bitnet__gemm_f32_task {
    const float *w, *a;
    size_t n, k, m;
    float *out;
    bitnet_isa isa;
} bitnet__gemm_f32_task;

static void bitnet__gemm_f32_worker(void *arg, int ith, int nth) {
    const bitnet__gemm_f32_task *t = (const bitnet__gemm_f32_task *)arg;
    size_t b0, b1, r0, r1;
    bitnet__range_split((t->n + 3) / 4, ith, nth, &b0, &b1); /* whole 4-row tiles per worker */
    r0 = b0 * 4;
    r1 = BITNET__MIN(b1 * 4, t->n);
    if (r0 >= r1) return;
    switch (t->isa) {
#if defined(BITNET__X86_SIMD)
    case BITNET_ISA_AVX512: bitnet__gemm_f32_avx512(t->w, t->k, t->a, t->m, t->out, t->n, r0, r1); break;
    case BITNET_ISA_AVX2: bitnet__gemm_f32_avx2(t->w, t->k, t->a, t->m, t->out, t->n, r0, r1); break;
#endif
#if defined(BITNET__NEON)
    case BITNET_ISA_NEON: bitnet__gemm_f32_neon(t->w, t->k, t->a, t->m, t->out, t->n, r0, r1); break;
#endif
    default: bitnet__gemm_f32_scalar(t->w, t->k, t->a, t->m, t->out, t->n, r0, r1); break;
    }
}

/* Work below this many multiply-adds runs on the calling thread (a pool wake-up costs more). */
#define BITNET__PARALLEL_MIN_WORK ((size_t)1 << 18)

BITNET_API bitnet_result bitnet_gemm_f32(const float *w, size_t n, size_t k, const float *a, size_t m, float *out) {
    bitnet__gemm_f32_task t;
    size_t nk, mk, mn, work;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(a);
    BITNET__CHECK_PTR(out);
    if (!n || !k || !m) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_f32: m=%zu n=%zu k=%zu", m, n, k);
    if (!bitnet__mul_size(n, k, &nk) || !bitnet__mul_size(m, k, &mk) || !bitnet__mul_size(m, n, &mn) ||
        !bitnet__mul_size(nk, sizeof(float), &work))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemm_f32: m=%zu n=%zu k=%zu overflows", m, n, k);
    t.w = w; t.a = a; t.n = n; t.k = k; t.m = m; t.out = out; t.isa = bitnet_cpu_isa();
    if (!bitnet__mul_size(nk, m, &work) || work >= BITNET__PARALLEL_MIN_WORK) bitnet__parallel(bitnet__gemm_f32_worker, &t);
    else bitnet__gemm_f32_worker(&t, 0, 1);
    return BITNET_OK;
}

/* ---- fp16 GEMV: out[r] = sum_c fp16(w[r][c]) * x[c] (the tied fp16 LM head) ------------------- */
/* Memory-bound: 4 weight rows per step share each load of x; rows are split across threads. */
static void bitnet__gemv_f16_scalar(const uint16_t *w, size_t k, const float *x, float *out, size_t r0, size_t r1) {
    size_t r, c;
    for (r = r0; r < r1; r++) {
        const uint16_t *wr = w + r * k;
        float acc = 0;
        for (c = 0; c < k; c++) acc += bitnet_fp16_to_fp32(wr[c]) * x[c];
        out[r] = acc;
    }
}
#if defined(BITNET__X86_SIMD)
BITNET__AVX2_FN static void bitnet__gemv_f16_avx2(const uint16_t *w, size_t k, const float *x, float *out, size_t r0,
                                                  size_t r1) {
    size_t r = r0, c, k8 = k & ~(size_t)7;
#define BITNET__LD(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w0 = w + r * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        float t0, t1, t2, t3;
        for (c = 0; c < k8; c += 8) {
            __m256 xv = _mm256_loadu_ps(x + c);
            s0 = _mm256_fmadd_ps(BITNET__LD(w0 + c), xv, s0);
            s1 = _mm256_fmadd_ps(BITNET__LD(w1 + c), xv, s1);
            s2 = _mm256_fmadd_ps(BITNET__LD(w2 + c), xv, s2);
            s3 = _mm256_fmadd_ps(BITNET__LD(w3 + c), xv, s3);
        }
        t0 = bitnet__hsum_avx2(s0); t1 = bitnet__hsum_avx2(s1); t2 = bitnet__hsum_avx2(s2); t3 = bitnet__hsum_avx2(s3);
        for (; c < k; c++) {
            t0 += bitnet_fp16_to_fp32(w0[c]) * x[c];
            t1 += bitnet_fp16_to_fp32(w1[c]) * x[c];
            t2 += bitnet_fp16_to_fp32(w2[c]) * x[c];
            t3 += bitnet_fp16_to_fp32(w3[c]) * x[c];
        }
        out[r] = t0; out[r + 1] = t1; out[r + 2] = t2; out[r + 3] = t3;
    }
    for (; r < r1; r++) {
        const uint16_t *w0 = w + r * k;
        __m256 s0 = _mm256_setzero_ps();
        float t0;
        for (c = 0; c < k8; c += 8) s0 = _mm256_fmadd_ps(BITNET__LD(w0 + c), _mm256_loadu_ps(x + c), s0);
        t0 = bitnet__hsum_avx2(s0);
        for (; c < k; c++) t0 += bitnet_fp16_to_fp32(w0[c]) * x[c];
        out[r] = t0;
    }
#undef BITNET__LD
}
BITNET__AVX512_FN static void bitnet__gemv_f16_avx512(const uint16_t *w, size_t k, const float *x, float *out,
                                                      size_t r0, size_t r1) {
    size_t r = r0, c, k16 = k & ~(size_t)15;
    __mmask16 mt = bitnet__mask16(k - k16);
#define BITNET__LD(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define BITNET__LDM(p) _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mt, p))
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w0 = w + r * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, xv;
        for (c = 0; c < k16; c += 16) {
            xv = _mm512_loadu_ps(x + c);
            s0 = _mm512_fmadd_ps(BITNET__LD(w0 + c), xv, s0);
            s1 = _mm512_fmadd_ps(BITNET__LD(w1 + c), xv, s1);
            s2 = _mm512_fmadd_ps(BITNET__LD(w2 + c), xv, s2);
            s3 = _mm512_fmadd_ps(BITNET__LD(w3 + c), xv, s3);
        }
        if (mt) {
            xv = _mm512_maskz_loadu_ps(mt, x + c);
            s0 = _mm512_fmadd_ps(BITNET__LDM(w0 + c), xv, s0);
            s1 = _mm512_fmadd_ps(BITNET__LDM(w1 + c), xv, s1);
            s2 = _mm512_fmadd_ps(BITNET__LDM(w2 + c), xv, s2);
            s3 = _mm512_fmadd_ps(BITNET__LDM(w3 + c), xv, s3);
        }
        out[r] = _mm512_reduce_add_ps(s0);
        out[r + 1] = _mm512_reduce_add_ps(s1);
        out[r + 2] = _mm512_reduce_add_ps(s2);
        out[r + 3] = _mm512_reduce_add_ps(s3);
    }
    for (; r < r1; r++) {
        const uint16_t *w0 = w + r * k;
        __m512 s0 = _mm512_setzero_ps();
        for (c = 0; c < k16; c += 16) s0 = _mm512_fmadd_ps(BITNET__LD(w0 + c), _mm512_loadu_ps(x + c), s0);
        if (mt) s0 = _mm512_fmadd_ps(BITNET__LDM(w0 + c), _mm512_maskz_loadu_ps(mt, x + c), s0);
        out[r] = _mm512_reduce_add_ps(s0);
    }
#undef BITNET__LD
#undef BITNET__LDM
}
#endif
#if defined(BITNET__NEON)
static void bitnet__gemv_f16_neon(const uint16_t *w, size_t k, const float *x, float *out, size_t r0, size_t r1) {
    size_t r = r0, c, k4 = k & ~(size_t)3;
#define BITNET__LD(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)))
    for (; r + 4 <= r1; r += 4) {
        const uint16_t *w0 = w + r * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
        float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
        float t0, t1, t2, t3;
        for (c = 0; c < k4; c += 4) {
            float32x4_t xv = vld1q_f32(x + c);
            s0 = vfmaq_f32(s0, BITNET__LD(w0 + c), xv);
            s1 = vfmaq_f32(s1, BITNET__LD(w1 + c), xv);
            s2 = vfmaq_f32(s2, BITNET__LD(w2 + c), xv);
            s3 = vfmaq_f32(s3, BITNET__LD(w3 + c), xv);
        }
        t0 = vaddvq_f32(s0); t1 = vaddvq_f32(s1); t2 = vaddvq_f32(s2); t3 = vaddvq_f32(s3);
        for (; c < k; c++) {
            t0 += bitnet_fp16_to_fp32(w0[c]) * x[c];
            t1 += bitnet_fp16_to_fp32(w1[c]) * x[c];
            t2 += bitnet_fp16_to_fp32(w2[c]) * x[c];
            t3 += bitnet_fp16_to_fp32(w3[c]) * x[c];
        }
        out[r] = t0; out[r + 1] = t1; out[r + 2] = t2; out[r + 3] = t3;
    }
    for (; r < r1; r++) {
        const uint16_t *w0 = w + r * k;
        float32x4_t s0 = vdupq_n_f32(0);
        float t0;
        for (c = 0; c < k4; c += 4) s0 = vfmaq_f32(s0, BITNET__LD(w0 + c), vld1q_f32(x + c));
        t0 = vaddvq_f32(s0);
        for (; c < k; c++) t0 += bitnet_fp16_to_fp32(w0[c]) * x[c];
        out[r] = t0;
    }
#undef BITNET__LD
}
#endif

typedef struct bitnet__gemv_f16_task {
    const uint16_t *w;
    size_t n, k;
    const float *x;
    float *out;
    int path; /* BITNET__CV_*: the fp16 conversion path (F16C checked) */
} bitnet__gemv_f16_task;

static void bitnet__gemv_f16_worker(void *arg, int ith, int nth) {
    const bitnet__gemv_f16_task *t = (const bitnet__gemv_f16_task *)arg;
    size_t b0, b1, r0, r1;
    bitnet__range_split((t->n + 3) / 4, ith, nth, &b0, &b1);
    r0 = b0 * 4;
    r1 = BITNET__MIN(b1 * 4, t->n);
    if (r0 >= r1) return;
    switch (t->path) {
#if defined(BITNET__X86_SIMD)
    case BITNET__CV_AVX512: bitnet__gemv_f16_avx512(t->w, t->k, t->x, t->out, r0, r1); break;
    case BITNET__CV_AVX2: bitnet__gemv_f16_avx2(t->w, t->k, t->x, t->out, r0, r1); break;
#endif
#if defined(BITNET__NEON)
    case BITNET__CV_NEON: bitnet__gemv_f16_neon(t->w, t->k, t->x, t->out, r0, r1); break;
#endif
    default: bitnet__gemv_f16_scalar(t->w, t->k, t->x, t->out, r0, r1); break;
    }
}

/* out[n] = w[n][k] (fp16 rows) . x[k], threaded over rows. No argument checks: for the forward
   pass (the tied fp16 LM head); bitnet_gemv_f16 is the checked public entry. */
static void bitnet__gemv_f16(const uint16_t *w, size_t n, size_t k, const float *x, float *out) {
    bitnet__gemv_f16_task t;
    t.w = w; t.n = n; t.k = k; t.x = x; t.out = out; t.path = bitnet__convert_path(1);
    if (n * k >= BITNET__PARALLEL_MIN_WORK) bitnet__parallel(bitnet__gemv_f16_worker, &t);
    else bitnet__gemv_f16_worker(&t, 0, 1);
}

BITNET_API bitnet_result bitnet_gemv_f16(const uint16_t *w, size_t n, size_t k, const float *x, float *out) {
    size_t nk, bytes;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(out);
    if (!n || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemv_f16: n=%zu k=%zu", n, k);
    if (!bitnet__mul_size(n, k, &nk) || !bitnet__mul_size(nk, sizeof(uint16_t), &bytes))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemv_f16: n=%zu k=%zu overflows", n, k);
    bitnet__gemv_f16(w, n, k, x, out);
    return BITNET_OK;
}

/* >>cpu-kernels =============================================================================== */

/* ---- ISA detection and selection: one table, read once, overridable by BITNET_CPU ---------- */
static const char *const bitnet__isa_names[BITNET_ISA_COUNT] = {"auto", "scalar", "avx2", "avx512", "neon"};
static bitnet_isa bitnet__active_isa; /* AUTO until first use */

BITNET_API const char *bitnet_isa_name(bitnet_isa isa) {
    return ((unsigned)isa < BITNET_ISA_COUNT) ? bitnet__isa_names[isa] : "unknown";
}

#if defined(BITNET__X86_SIMD)
static int bitnet__x86_xcr0_has(unsigned mask) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & mask) == mask;
}
#endif

BITNET_API int bitnet_cpu_has_isa(bitnet_isa isa) {
    switch (isa) {
    case BITNET_ISA_AUTO:
    case BITNET_ISA_SCALAR: return 1;
#if defined(BITNET__X86_SIMD)
    case BITNET_ISA_AVX2: {
        unsigned a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || !(c & (1u << 12)) || !(c & (1u << 28))) return 0;
        if (!bitnet__x86_xcr0_has(0x6)) return 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
        return (b & (1u << 5)) != 0; /* AVX2 (+FMA, OSXSAVE, AVX checked above) */
    }
    case BITNET_ISA_AVX512: {
        unsigned a, b, c, d;
        if (!bitnet_cpu_has_isa(BITNET_ISA_AVX2) || !bitnet__x86_xcr0_has(0xe6)) return 0;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
        /* F, BW, VL and VNNI: the kernels need all four. */
        return (b & (1u << 16)) && (b & (1u << 30)) && (b & (1u << 31)) && (c & (1u << 11));
    }
#endif
#if defined(BITNET__NEON)
    case BITNET_ISA_NEON: return 1;
#endif
    default: return 0;
    }
}

static bitnet_isa bitnet__best_isa(void) {
    if (bitnet_cpu_has_isa(BITNET_ISA_AVX512)) return BITNET_ISA_AVX512;
    if (bitnet_cpu_has_isa(BITNET_ISA_AVX2)) return BITNET_ISA_AVX2;
    if (bitnet_cpu_has_isa(BITNET_ISA_NEON)) return BITNET_ISA_NEON;
    return BITNET_ISA_SCALAR;
}

BITNET_API bitnet_result bitnet_cpu_set_isa(bitnet_isa isa) {
    if ((unsigned)isa >= BITNET_ISA_COUNT) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_cpu_set_isa: bad value %d", (int)isa);
    if (!bitnet_cpu_has_isa(isa))
        return bitnet__err(BITNET_ERR_UNSUPPORTED_ISA, "the %s path is not available on this CPU or build", bitnet_isa_name(isa));
    bitnet__active_isa = isa == BITNET_ISA_AUTO ? bitnet__best_isa() : isa;
    return BITNET_OK;
}

/* The active path; BITNET_CPU is honoured at first use (an unusable value leaves the best path
   active and is reported through the logger and bitnet_last_error). */
BITNET_API bitnet_isa bitnet_cpu_isa(void) {
    if (bitnet__active_isa == BITNET_ISA_AUTO) {
        const char *env = bitnet__getenv("BITNET_CPU");
        bitnet_isa want = BITNET_ISA_AUTO;
        int i;
        bitnet__active_isa = bitnet__best_isa();
        if (env) {
            for (i = 0; i < BITNET_ISA_COUNT; i++)
                if (strcmp(env, bitnet__isa_names[i]) == 0) want = (bitnet_isa)i;
            if (want == BITNET_ISA_AUTO && strcmp(env, "auto") != 0)
                bitnet__err(BITNET_ERR_INVALID_ARG, "BITNET_CPU=%s is not one of scalar, avx2, avx512, neon", env);
            else if (bitnet_cpu_set_isa(want) != BITNET_OK)
                bitnet__log(BITNET_LOG_WARN, "BITNET_CPU=%s not available, using %s", env, bitnet_isa_name(bitnet__active_isa));
        }
    }
    return bitnet__active_isa;
}

/* ---- scalar reference kernels: the oracle every SIMD and GPU path is tested against --------- */

static bitnet_result bitnet__gemm_i2s_check(const void *w, size_t w_bytes, size_t n, size_t k, const int8_t *a,
                                            const float *a_scale, const int32_t *a_sum, size_t m, float *out) {
    size_t mk, mn;
    if (!a || !a_scale || !a_sum || !out)
        return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gemm_i2s: a, a_scale, a_sum and out must not be NULL");
    BITNET__TRY(bitnet__i2s_check("bitnet_gemm_i2s", w, w_bytes, n, k));
    if (m == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_i2s: m is 0");
    if (!bitnet__mul_size(m, k, &mk) || !bitnet__mul_size(m, n, &mn))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemm_i2s: m=%zu n=%zu k=%zu overflows", m, n, k);
    return BITNET_OK;
}

/* Rows [n0, n1) of the output for all m activation rows. The I2_S identity:
   sum(w*a) = sum((w+1)*a) - sum(a), so the packed codes are used as unsigned bytes directly. */
static void bitnet__gemm_i2s_scalar(const uint8_t *w, size_t n0, size_t n1, size_t k, const int8_t *a,
                                    const float *a_scale, const int32_t *a_sum, size_t m, float w_scale,
                                    float *out, size_t n) {
    size_t r, i, c;
    for (r = n0; r < n1; r++) {
        const uint8_t *wr = w + r * (k / 4);
        for (i = 0; i < m; i++) {
            const int8_t *ai = a + i * k;
            int32_t acc = 0;
            for (c = 0; c < k; c += BITNET_I2S_BLOCK) {
                const uint8_t *blk = wr + c / 4;
                int j;
                for (j = 0; j < 32; j++) {
                    int b = blk[j];
                    acc += (b >> 6) * ai[c + j] + ((b >> 4) & 3) * ai[c + 32 + j] + ((b >> 2) & 3) * ai[c + 64 + j] +
                           (b & 3) * ai[c + 96 + j];
                }
            }
            out[i * n + r] = (float)(acc - a_sum[i]) / a_scale[i] * w_scale;
        }
    }
}

BITNET_API bitnet_result bitnet_gemm_i2s(const void *w, size_t w_bytes, size_t n, size_t k, const int8_t *a,
                                         const float *a_scale, const int32_t *a_sum, size_t m, float *out) {
    float w_scale;
    BITNET__TRY(bitnet__gemm_i2s_check(w, w_bytes, n, k, a, a_scale, a_sum, m, out));
    memcpy(&w_scale, (const uint8_t *)w + n * k / 4, 4);
    bitnet__gemm_i2s_scalar((const uint8_t *)w, 0, n, k, a, a_scale, a_sum, m, w_scale, out, n);
    return BITNET_OK;
}

/* >>gguf ====================================================================================== */

/* >>tokenizer ================================================================================= */

/* >>sampler =================================================================================== */

/* >>cpu-forward =============================================================================== */

/* >>cuda-loader =============================================================================== */

/* No CUDA header: the few driver and NVRTC types, constants and entry points we use are declared
   here with the values of cuda.h / nvrtc.h (CUDA 13.0). The entry points live in a struct, so the
   library never defines or exports a cu* or nvrtc* symbol. */
#ifndef BITNET_NO_CUDA
#include "bitnet_cuda_kernels.h"
#else
#define BITNET_CUDA_MODULES(X)
#define BITNET_CUDA_KERNELS(X)
#define BITNET_CUDA_KERNELS_VERSION 0
static const char bitnet_cuda_src_common[] = "";
#endif
#if defined(__GLIBC__) && !defined(_WIN32)
#include <execinfo.h>
#define BITNET__HAVE_BACKTRACE 1
#endif
#if !defined(_WIN32)
#include <dirent.h>
#endif

#if defined(_WIN32)
#define BITNET__CUAPI __stdcall
#else
#define BITNET__CUAPI
#endif
typedef int bitnet__CUresult;
typedef int bitnet__CUdevice;
typedef struct bitnet__CUctx_st *bitnet__CUcontext;
typedef struct bitnet__CUstream_st *bitnet__CUstream;
typedef struct bitnet__CUmod_st *bitnet__CUmodule;
typedef struct bitnet__CUfunc_st *bitnet__CUfunction;
typedef struct bitnet__CUevent_st *bitnet__CUevent;
typedef struct bitnet__CUgraph_st *bitnet__CUgraph;
typedef struct bitnet__CUgraphExec_st *bitnet__CUgraphExec;
typedef int bitnet__nvrtcResult;
typedef struct bitnet__nvrtcProgram_st *bitnet__nvrtcProgram;

enum { /* cuda.h values */
    BITNET__CU_OK = 0, BITNET__CU_ERR_OOM = 2, BITNET__CU_ERR_STUB = 34, BITNET__CU_ERR_NEWER_DRIVER = 36,
    BITNET__CU_ERR_NO_DEVICE = 100, BITNET__CU_ERR_NOT_READY = 600, BITNET__CU_ERR_DRIVER_MISMATCH = 803,
    BITNET__CU_ERR_COMPAT = 804,
    BITNET__CU_ATTR_MAX_THREADS = 1, BITNET__CU_ATTR_SMEM = 8, BITNET__CU_ATTR_CLOCK = 13, BITNET__CU_ATTR_SMS = 16,
    BITNET__CU_ATTR_MEM_CLOCK = 36, BITNET__CU_ATTR_BUS_WIDTH = 37, BITNET__CU_ATTR_L2 = 38,
    BITNET__CU_ATTR_CC_MAJOR = 75, BITNET__CU_ATTR_CC_MINOR = 76, BITNET__CU_ATTR_SMEM_OPTIN = 97,
    BITNET__CU_STREAM_NON_BLOCKING = 1, BITNET__CU_EVENT_DEFAULT = 0, BITNET__CU_CAPTURE_THREAD_LOCAL = 1,
    BITNET__CU_FUNC_MAX_DYN_SMEM = 8, BITNET__CU_JIT_ERROR_LOG = 5, BITNET__CU_JIT_ERROR_LOG_SIZE = 6,
    BITNET__CUDA_MIN_DRIVER = 11000 /* 11.0: the _v2 entry points and sm_80 */
};

/* X(name, pinned ABI version (0: plain dlsym before cuInit), required, dlsym name without
   cuGetProcAddress, parameters). Versions follow cudaTypedefs.h's PFN_<name>_v<version>. */
#define BITNET__CU_FUNCS(X) \
    X(cuInit, 0, 1, "cuInit", (unsigned flags)) \
    X(cuDriverGetVersion, 0, 1, "cuDriverGetVersion", (int *version)) \
    X(cuGetErrorName, 0, 0, "cuGetErrorName", (bitnet__CUresult e, const char **s)) \
    X(cuGetErrorString, 0, 0, "cuGetErrorString", (bitnet__CUresult e, const char **s)) \
    X(cuDeviceGetCount, 2000, 1, "cuDeviceGetCount", (int *n)) \
    X(cuDeviceGet, 2000, 1, "cuDeviceGet", (bitnet__CUdevice *d, int ordinal)) \
    X(cuDeviceGetName, 2000, 1, "cuDeviceGetName", (char *name, int len, bitnet__CUdevice d)) \
    X(cuDeviceGetAttribute, 2000, 1, "cuDeviceGetAttribute", (int *v, int attr, bitnet__CUdevice d)) \
    X(cuDeviceTotalMem, 3020, 1, "cuDeviceTotalMem_v2", (size_t *bytes, bitnet__CUdevice d)) \
    X(cuDeviceGetPCIBusId, 4010, 0, "cuDeviceGetPCIBusId", (char *id, int len, bitnet__CUdevice d)) \
    X(cuDevicePrimaryCtxRetain, 7000, 1, "cuDevicePrimaryCtxRetain", (bitnet__CUcontext *c, bitnet__CUdevice d)) \
    X(cuDevicePrimaryCtxRelease, 11000, 1, "cuDevicePrimaryCtxRelease_v2", (bitnet__CUdevice d)) \
    X(cuCtxPushCurrent, 4000, 1, "cuCtxPushCurrent_v2", (bitnet__CUcontext c)) \
    X(cuCtxPopCurrent, 4000, 1, "cuCtxPopCurrent_v2", (bitnet__CUcontext *c)) \
    X(cuMemGetInfo, 3020, 1, "cuMemGetInfo_v2", (size_t *free_bytes, size_t *total)) \
    X(cuMemAlloc, 3020, 1, "cuMemAlloc_v2", (bitnet_devptr *p, size_t bytes)) \
    X(cuMemFree, 3020, 1, "cuMemFree_v2", (bitnet_devptr p)) \
    X(cuMemcpyHtoDAsync, 3020, 1, "cuMemcpyHtoDAsync_v2", (bitnet_devptr dst, const void *src, size_t n, bitnet__CUstream s)) \
    X(cuMemcpyDtoHAsync, 3020, 1, "cuMemcpyDtoHAsync_v2", (void *dst, bitnet_devptr src, size_t n, bitnet__CUstream s)) \
    X(cuMemcpyDtoDAsync, 3020, 1, "cuMemcpyDtoDAsync_v2", (bitnet_devptr dst, bitnet_devptr src, size_t n, bitnet__CUstream s)) \
    X(cuMemsetD8Async, 3020, 1, "cuMemsetD8Async", (bitnet_devptr dst, unsigned char v, size_t n, bitnet__CUstream s)) \
    X(cuStreamCreate, 2000, 1, "cuStreamCreate", (bitnet__CUstream *s, unsigned flags)) \
    X(cuStreamDestroy, 4000, 1, "cuStreamDestroy_v2", (bitnet__CUstream s)) \
    X(cuStreamSynchronize, 2000, 1, "cuStreamSynchronize", (bitnet__CUstream s)) \
    X(cuEventCreate, 2000, 1, "cuEventCreate", (bitnet__CUevent *e, unsigned flags)) \
    X(cuEventDestroy, 4000, 1, "cuEventDestroy_v2", (bitnet__CUevent e)) \
    X(cuEventRecord, 2000, 1, "cuEventRecord", (bitnet__CUevent e, bitnet__CUstream s)) \
    X(cuEventSynchronize, 2000, 1, "cuEventSynchronize", (bitnet__CUevent e)) \
    X(cuEventElapsedTime, 12080, 1, "cuEventElapsedTime", (float *ms, bitnet__CUevent a, bitnet__CUevent b)) \
    X(cuModuleLoadDataEx, 2010, 1, "cuModuleLoadDataEx", (bitnet__CUmodule *m, const void *image, unsigned n, int *opts, void **vals)) \
    X(cuModuleUnload, 2000, 1, "cuModuleUnload", (bitnet__CUmodule m)) \
    X(cuModuleGetFunction, 2000, 1, "cuModuleGetFunction", (bitnet__CUfunction *f, bitnet__CUmodule m, const char *name)) \
    X(cuFuncSetAttribute, 9000, 0, "cuFuncSetAttribute", (bitnet__CUfunction f, int attr, int value)) \
    X(cuLaunchKernel, 4000, 1, "cuLaunchKernel", (bitnet__CUfunction f, unsigned gx, unsigned gy, unsigned gz, \
        unsigned bx, unsigned by, unsigned bz, unsigned smem, bitnet__CUstream s, void **args, void **extra)) \
    X(cuStreamBeginCapture, 10010, 0, "cuStreamBeginCapture_v2", (bitnet__CUstream s, int mode)) \
    X(cuStreamEndCapture, 10000, 0, "cuStreamEndCapture", (bitnet__CUstream s, bitnet__CUgraph *g)) \
    X(cuGraphInstantiateWithFlags, 11040, 0, "cuGraphInstantiateWithFlags", (bitnet__CUgraphExec *e, bitnet__CUgraph g, unsigned long long flags)) \
    X(cuGraphLaunch, 10000, 0, "cuGraphLaunch", (bitnet__CUgraphExec e, bitnet__CUstream s)) \
    X(cuGraphExecDestroy, 10000, 0, "cuGraphExecDestroy", (bitnet__CUgraphExec e)) \
    X(cuGraphDestroy, 10000, 0, "cuGraphDestroy", (bitnet__CUgraph g))

/* X(name, required, parameters) */
#define BITNET__NVRTC_FUNCS(X) \
    X(nvrtcVersion, 1, (int *major, int *minor)) \
    X(nvrtcCreateProgram, 1, (bitnet__nvrtcProgram *p, const char *src, const char *name, int n_headers, \
        const char *const *headers, const char *const *include_names)) \
    X(nvrtcDestroyProgram, 1, (bitnet__nvrtcProgram *p)) \
    X(nvrtcCompileProgram, 1, (bitnet__nvrtcProgram p, int n_options, const char *const *options)) \
    X(nvrtcGetProgramLogSize, 1, (bitnet__nvrtcProgram p, size_t *n)) \
    X(nvrtcGetProgramLog, 1, (bitnet__nvrtcProgram p, char *log)) \
    X(nvrtcGetPTXSize, 1, (bitnet__nvrtcProgram p, size_t *n)) \
    X(nvrtcGetPTX, 1, (bitnet__nvrtcProgram p, char *ptx)) \
    X(nvrtcGetCUBINSize, 0, (bitnet__nvrtcProgram p, size_t *n)) \
    X(nvrtcGetCUBIN, 0, (bitnet__nvrtcProgram p, char *cubin)) \
    X(nvrtcGetNumSupportedArchs, 0, (int *n)) \
    X(nvrtcGetSupportedArchs, 0, (int *archs))

typedef struct bitnet__cu_api {
#define BITNET__CU_MEMBER(name, ver, req, sym, params) bitnet__CUresult(BITNET__CUAPI *name) params;
    BITNET__CU_FUNCS(BITNET__CU_MEMBER)
#undef BITNET__CU_MEMBER
} bitnet__cu_api;

typedef struct bitnet__nvrtc_api {
#define BITNET__NVRTC_MEMBER(name, req, params) bitnet__nvrtcResult(BITNET__CUAPI *name) params;
    BITNET__NVRTC_FUNCS(BITNET__NVRTC_MEMBER)
#undef BITNET__NVRTC_MEMBER
    const char *(BITNET__CUAPI *nvrtcGetErrorString)(bitnet__nvrtcResult r);
} bitnet__nvrtc_api;

/* ---- locks: a statically initialisable mutex; "once" is a flag read under a lock ---------- */
#if defined(_WIN32)
typedef SRWLOCK bitnet__mutex;
#define BITNET__MUTEX_INIT SRWLOCK_INIT
static void bitnet__mutex_init(bitnet__mutex *m) { InitializeSRWLock(m); }
static void bitnet__mutex_lock(bitnet__mutex *m) { AcquireSRWLockExclusive(m); }
static void bitnet__mutex_unlock(bitnet__mutex *m) { ReleaseSRWLockExclusive(m); }
static void bitnet__mutex_destroy(bitnet__mutex *m) { (void)m; }
#else
typedef pthread_mutex_t bitnet__mutex;
#define BITNET__MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
static void bitnet__mutex_init(bitnet__mutex *m) { pthread_mutex_init(m, NULL); }
static void bitnet__mutex_lock(bitnet__mutex *m) { pthread_mutex_lock(m); }
static void bitnet__mutex_unlock(bitnet__mutex *m) { pthread_mutex_unlock(m); }
static void bitnet__mutex_destroy(bitnet__mutex *m) { pthread_mutex_destroy(m); }
#endif

/* ---- dynamic libraries ---------------------------------------------------------------------- */
/* Opens path; on failure writes the loader's reason into why. */
static void *bitnet__dl_open(const char *path, char *why, size_t cap) {
#if defined(_WIN32)
    HMODULE h = LoadLibraryA(path);
    if (!h && why) snprintf(why, cap, "%s: LoadLibrary error %lu", path, (unsigned long)GetLastError());
    return (void *)h;
#else
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h && why) {
        const char *e = dlerror();
        snprintf(why, cap, "%s", e ? e : path);
    }
    return h;
#endif
}
BITNET__UNUSED static void *bitnet__dl_sym(void *lib, const char *name) {
#if defined(_WIN32)
    FARPROC f = GetProcAddress((HMODULE)lib, name);
    void *p;
    memcpy(&p, &f, sizeof p);
    return p;
#else
    return dlsym(lib, name);
#endif
}
/* Stores a symbol into a function-pointer slot without a void* to function cast (C and C++). */
#define BITNET__SET_FN(slot, sym) do { void *bitnet__s_ = (sym); memcpy(&(slot), &bitnet__s_, sizeof bitnet__s_); } while (0)

/* Appends a formatted piece to buf (always terminated, silently truncated). */
static BITNET__PRINTF(3, 4) void bitnet__strcatf(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    va_list ap;
    if (len + 1 >= cap) return;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* Copies s into d, truncating; d always ends in a NUL. */
static void bitnet__strlcpy(char *d, size_t cap, const char *s) {
    size_t n = strlen(s);
    if (!cap) return;
    if (n >= cap) n = cap - 1;
    memcpy(d, s, n);
    d[n] = 0;
}

/* ---- process-wide state: the driver and NVRTC, each loaded once ----------------------------- */
typedef struct bitnet__cuda_lib {
    int tried;
    bitnet_result status;               /* BITNET_OK or why CUDA cannot be used */
    char msg[1536];                     /* the failure, with what was tried and what to do */
    void *lib;
    char path[256];
    int driver_version, device_count;
    bitnet__cu_api cu;
} bitnet__cuda_lib;
typedef struct bitnet__nvrtc_lib {
    int tried;
    bitnet_result status;
    char msg[2048];
    void *lib;
    char path[512];
    int version;                        /* 1000*major + 10*minor */
    int archs[64], n_archs;             /* ascending */
    bitnet__nvrtc_api fn;
} bitnet__nvrtc_lib;
static bitnet__cuda_lib bitnet__cuda;
static bitnet__nvrtc_lib bitnet__nvrtc;
static bitnet__mutex bitnet__cuda_lock = BITNET__MUTEX_INIT;   /* loading, the device table */
static bitnet__mutex bitnet__nvrtc_lock = BITNET__MUTEX_INIT;

static const char *bitnet__cu_known_name(bitnet__CUresult r) {
    switch (r) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR";
    }
}
/* "CUDA_ERROR_X (n): description" into buf, from the driver when it can say. */
static const char *bitnet__cu_describe(bitnet__CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *desc = NULL;
    if (!bitnet__cuda.cu.cuGetErrorName || bitnet__cuda.cu.cuGetErrorName(r, &name) != 0 || !name)
        name = bitnet__cu_known_name(r);
    if (!bitnet__cuda.cu.cuGetErrorString || bitnet__cuda.cu.cuGetErrorString(r, &desc) != 0 || !desc) desc = "";
    snprintf(buf, cap, "%s (%d)%s%s", name, r, *desc ? ": " : "", desc);
    return buf;
}
/* The one way a CUDA call failure becomes a bitnet error. */
static bitnet_result bitnet__cu_fail(bitnet_result code, bitnet__CUresult r, const char *what) {
    char d[256];
    return bitnet__err(code, "%s: %s", what, bitnet__cu_describe(r, d, sizeof d));
}

static void bitnet__cuda_load_locked(void) {
    static const char *const names[] = {
#if defined(_WIN32)
        "nvcuda.dll"
#else
        "libcuda.so.1", "libcuda.so"
#endif
    };
    bitnet__cuda_lib *L = &bitnet__cuda;
    const char *env = bitnet__getenv("BITNET_LIBCUDA");
    char tried[1024] = "", why[512];
    void *getproc = NULL, *getproc_v2 = NULL;
    bitnet__CUresult r;
    size_t i;
    L->tried = 1;
#if defined(BITNET_NO_CUDA)
    (void)names; (void)env; (void)tried; (void)why; (void)getproc; (void)getproc_v2; (void)r; (void)i;
    L->status = BITNET_ERR_UNSUPPORTED;
    snprintf(L->msg, sizeof L->msg, "built with BITNET_NO_CUDA: the GPU runtime is compiled out");
    return;
#else
    /* An explicit BITNET_LIBCUDA is the only path tried: an override must never silently fall back. */
    for (i = 0; i < (env ? 1 : sizeof names / sizeof names[0]) && !L->lib; i++) {
        const char *p = env ? env : names[i];
        L->lib = bitnet__dl_open(p, why, sizeof why);
        if (L->lib) snprintf(L->path, sizeof L->path, "%s", p);
        else bitnet__strcatf(tried, sizeof tried, "%s%s", *tried ? "; " : "", why);
        bitnet__log(BITNET_LOG_INFO, "CUDA driver: dlopen %s %s", p, L->lib ? "ok" : why);
    }
    if (!L->lib) {
        L->status = BITNET_ERR_LIBCUDA_NOT_FOUND;
        if (env)
            snprintf(L->msg, sizeof L->msg, "BITNET_LIBCUDA=%s could not be loaded (%s): point it at the driver's "
                     "libcuda.so.1 or unset it", env, tried);
        else
            snprintf(L->msg, sizeof L->msg, "%s not found: install the NVIDIA driver (tried %s)", names[0], tried);
        return;
    }
    /* Bootstrap by name, then everything else through cuGetProcAddress at its pinned ABI. */
#define BITNET__CU_BOOT(name, ver, req, sym, params) \
    if (ver == 0) BITNET__SET_FN(L->cu.name, bitnet__dl_sym(L->lib, sym));
    BITNET__CU_FUNCS(BITNET__CU_BOOT)
#undef BITNET__CU_BOOT
    if (!L->cu.cuInit || !L->cu.cuDriverGetVersion) {
        L->status = BITNET_ERR_CUDA_SYMBOL;
        snprintf(L->msg, sizeof L->msg, "%s has no %s: it is not a CUDA driver library", L->path,
                 L->cu.cuInit ? "cuDriverGetVersion" : "cuInit");
        return;
    }
    r = L->cu.cuDriverGetVersion(&L->driver_version);
    if (r == 0 && L->driver_version < BITNET__CUDA_MIN_DRIVER) {
        L->status = BITNET_ERR_DRIVER_TOO_OLD;
        snprintf(L->msg, sizeof L->msg, "CUDA driver %d.%d (%s) is too old: bitnet.h needs %d.%d or newer; update the "
                 "NVIDIA driver", L->driver_version / 1000, L->driver_version % 1000 / 10, L->path,
                 BITNET__CUDA_MIN_DRIVER / 1000, BITNET__CUDA_MIN_DRIVER % 1000 / 10);
        return;
    }
    if (r == 0) r = L->cu.cuInit(0);
    if (r != 0) {
        char d[256];
        bitnet__cu_describe(r, d, sizeof d);
        if (r == BITNET__CU_ERR_STUB) {
            L->status = BITNET_ERR_CUDA_INIT;
            snprintf(L->msg, sizeof L->msg, "%s is the CUDA toolkit's stub library, not the driver (%s): install the "
                     "NVIDIA driver, or take the stubs folder out of LD_LIBRARY_PATH", L->path, d);
        } else if (r == BITNET__CU_ERR_NO_DEVICE) {
            L->status = BITNET_ERR_NO_DEVICE;
            snprintf(L->msg, sizeof L->msg, "cuInit found no CUDA device (%s): check nvidia-smi and CUDA_VISIBLE_DEVICES", d);
        } else if (r == BITNET__CU_ERR_DRIVER_MISMATCH || r == BITNET__CU_ERR_COMPAT || r == BITNET__CU_ERR_NEWER_DRIVER) {
            L->status = BITNET_ERR_DRIVER_TOO_OLD;
            snprintf(L->msg, sizeof L->msg, "the CUDA driver in %s does not match the kernel module or device (%s): "
                     "update the NVIDIA driver", L->path, d);
        } else {
            L->status = BITNET_ERR_CUDA_INIT;
            snprintf(L->msg, sizeof L->msg, "cuInit failed in %s: %s", L->path, d);
        }
        return;
    }
    getproc_v2 = bitnet__dl_sym(L->lib, "cuGetProcAddress_v2"); /* 12.0+: five arguments */
    if (!getproc_v2) getproc = bitnet__dl_sym(L->lib, "cuGetProcAddress"); /* 11.3+: four */
    {
        bitnet__CUresult(BITNET__CUAPI * gp2)(const char *, void **, int, unsigned long long, int *) = NULL;
        bitnet__CUresult(BITNET__CUAPI * gp1)(const char *, void **, int, unsigned long long) = NULL;
        BITNET__SET_FN(gp2, getproc_v2);
        BITNET__SET_FN(gp1, getproc);
#define BITNET__CU_RESOLVE(name, ver, req, sym, params) \
        if (ver != 0) { \
            void *p_ = NULL; \
            int st_ = 0; \
            if (gp2) { if (gp2(#name, &p_, ver, 0, &st_) != 0) p_ = NULL; } \
            else if (gp1) { if (gp1(#name, &p_, ver, 0) != 0) p_ = NULL; } \
            else p_ = bitnet__dl_sym(L->lib, sym); \
            BITNET__SET_FN(L->cu.name, p_); \
            if (!p_ && req && L->status == BITNET_OK) { \
                L->status = BITNET_ERR_CUDA_SYMBOL; \
                snprintf(L->msg, sizeof L->msg, "%s (driver %d) lacks %s (ABI %d%s%s): update the NVIDIA driver", \
                         L->path, L->driver_version, #name, ver, (gp1 || gp2) ? "" : ", dlsym ", (gp1 || gp2) ? "" : sym); \
            } \
        }
        BITNET__CU_FUNCS(BITNET__CU_RESOLVE)
#undef BITNET__CU_RESOLVE
    }
    if (L->status != BITNET_OK) return;
    r = L->cu.cuDeviceGetCount(&L->device_count);
    if (r != 0 || L->device_count <= 0) {
        char d[256];
        L->status = BITNET_ERR_NO_DEVICE;
        snprintf(L->msg, sizeof L->msg, "the CUDA driver sees no device (%s): check nvidia-smi and CUDA_VISIBLE_DEVICES",
                 r ? bitnet__cu_describe(r, d, sizeof d) : "count 0");
        L->device_count = 0;
        return;
    }
    bitnet__log(BITNET_LOG_INFO, "CUDA driver %d.%d from %s, %d device(s)", L->driver_version / 1000,
                L->driver_version % 1000 / 10, L->path, L->device_count);
#endif
}

/* Loads the driver once per process; re-raises the stored failure into this thread's error. */
static bitnet_result bitnet__cuda_load(void) {
    bitnet__mutex_lock(&bitnet__cuda_lock);
    if (!bitnet__cuda.tried) bitnet__cuda_load_locked();
    bitnet__mutex_unlock(&bitnet__cuda_lock);
    if (bitnet__cuda.status != BITNET_OK) return bitnet__err(bitnet__cuda.status, "%s", bitnet__cuda.msg);
    return BITNET_OK;
}

/* ---- NVRTC ---------------------------------------------------------------------------------- */
static int bitnet__cmp_desc(const void *a, const void *b) { return strcmp(*(const char *const *)b, *(const char *const *)a); }

static void bitnet__nvrtc_try(bitnet__nvrtc_lib *N, const char *path, char *tried, size_t cap) {
    char why[512];
    if (N->lib) return;
    N->lib = bitnet__dl_open(path, why, sizeof why);
    if (N->lib) snprintf(N->path, sizeof N->path, "%s", path);
    else bitnet__strcatf(tried, cap, "%s%s", *tried ? "; " : "", why);
    bitnet__log(BITNET_LOG_INFO, "NVRTC: dlopen %s %s", path, N->lib ? "ok" : why);
}

/* The lib64 and lib folders of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda* (newest name first). */
BITNET__UNUSED static void bitnet__nvrtc_try_dirs(bitnet__nvrtc_lib *N, char *tried, size_t cap) {
#if !defined(_WIN32)
    static const char *const subdirs[] = {"lib64", "lib"};
    static const char *const files[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
    char bases[18][256];
    const char *order[18];
    int nb = 0, i, j, k;
    const char *e;
    DIR *d;
    if ((e = bitnet__getenv("CUDA_HOME")) != NULL) snprintf(bases[nb++], 256, "%s", e);
    if ((e = bitnet__getenv("CUDA_PATH")) != NULL) snprintf(bases[nb++], 256, "%s", e);
    if ((d = opendir("/usr/local")) != NULL) {
        struct dirent *de;
        int first = nb;
        while ((de = readdir(d)) != NULL && nb < 18)
            if (strncmp(de->d_name, "cuda", 4) == 0) snprintf(bases[nb++], 256, "/usr/local/%.200s", de->d_name);
        closedir(d);
        for (i = 0; i < nb; i++) order[i] = bases[i];
        qsort(order + first, (size_t)(nb - first), sizeof order[0], bitnet__cmp_desc);
    } else {
        for (i = 0; i < nb; i++) order[i] = bases[i];
    }
    for (i = 0; i < nb && !N->lib; i++) {
        for (j = 0; j < i && strcmp(order[j], order[i]) != 0; j++) {}
        if (j < i) continue; /* $CUDA_HOME is often /usr/local/cuda itself */
        for (j = 0; j < 2 && !N->lib; j++)
            for (k = 0; k < 4 && !N->lib; k++) {
                char p[600];
                struct stat st;
                snprintf(p, sizeof p, "%s/%s/%s", order[i], subdirs[j], files[k]);
                if (stat(p, &st) == 0) bitnet__nvrtc_try(N, p, tried, cap);
            }
    }
    if (!N->lib) bitnet__strcatf(tried, cap, "%sno libnvrtc under lib64/ or lib/ of $CUDA_HOME, $CUDA_PATH, /usr/local/cuda*",
                                 *tried ? "; " : "");
#else
    (void)N; (void)tried; (void)cap;
#endif
}

/* Opens the first NVRTC that loads: env alone when set, else names then (search_dirs) the CUDA
   folders; then resolves its symbols and archs into N. */
static void bitnet__nvrtc_open(bitnet__nvrtc_lib *N, const char *env, const char *const *names, size_t n_names,
                               int search_dirs) {
    char tried[1536] = "";
    size_t i;
    int major = 0, minor = 0;
    N->tried = 1;
#if defined(BITNET_NO_CUDA)
    (void)names; (void)n_names; (void)search_dirs; (void)env; (void)tried; (void)i; (void)major; (void)minor;
    N->status = BITNET_ERR_UNSUPPORTED;
    snprintf(N->msg, sizeof N->msg, "built with BITNET_NO_CUDA: the GPU runtime is compiled out");
    return;
#else
    if (env) bitnet__nvrtc_try(N, env, tried, sizeof tried);
    else {
        for (i = 0; i < n_names; i++) bitnet__nvrtc_try(N, names[i], tried, sizeof tried);
        if (search_dirs) bitnet__nvrtc_try_dirs(N, tried, sizeof tried);
    }
    if (!N->lib) {
        N->status = BITNET_ERR_NVRTC_NOT_FOUND;
        if (env)
            snprintf(N->msg, sizeof N->msg, "BITNET_NVRTC=%s could not be loaded (%s): point it at libnvrtc.so.N or unset it",
                     env, tried);
        else
            snprintf(N->msg, sizeof N->msg, "NVRTC not found: install the CUDA NVRTC package or set BITNET_NVRTC (tried %s)",
                     tried);
        return;
    }
#define BITNET__NVRTC_RESOLVE(name, req, params) \
    BITNET__SET_FN(N->fn.name, bitnet__dl_sym(N->lib, #name)); \
    if (!N->fn.name && req && N->status == BITNET_OK) { \
        N->status = BITNET_ERR_NVRTC_SYMBOL; \
        snprintf(N->msg, sizeof N->msg, "%s lacks %s: it is not a usable NVRTC", N->path, #name); \
    }
    BITNET__NVRTC_FUNCS(BITNET__NVRTC_RESOLVE)
    BITNET__NVRTC_RESOLVE(nvrtcGetErrorString, 1, ())
#undef BITNET__NVRTC_RESOLVE
    if (N->status != BITNET_OK) return;
    N->fn.nvrtcVersion(&major, &minor);
    N->version = major * 1000 + minor * 10;
    if (N->fn.nvrtcGetNumSupportedArchs && N->fn.nvrtcGetSupportedArchs &&
        N->fn.nvrtcGetNumSupportedArchs(&N->n_archs) == 0 && N->n_archs > 0 && N->n_archs <= 64) {
        N->fn.nvrtcGetSupportedArchs(N->archs);
    } else { /* NVRTC before 11.2 cannot list its archs: its documented range */
        static const int a11[] = {35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86};
        static const int a10[] = {30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75};
        const int *src = major >= 11 ? a11 : a10;
        int n = major >= 11 ? (minor >= 1 ? 13 : 12) : 13;
        for (N->n_archs = 0; N->n_archs < n; N->n_archs++) N->archs[N->n_archs] = src[N->n_archs];
    }
    bitnet__log(BITNET_LOG_INFO, "NVRTC %d.%d from %s (sm_%d to sm_%d)", major, minor, N->path, N->archs[0],
                N->archs[N->n_archs - 1]);
#endif
}

static void bitnet__nvrtc_load_locked(void) {
    static const char *const names[] = {
#if defined(_WIN32)
        "nvrtc64_130_0.dll", "nvrtc64_120_0.dll", "nvrtc64_112_0.dll"
#else
        "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"
#endif
    };
    bitnet__nvrtc_open(&bitnet__nvrtc, bitnet__getenv("BITNET_NVRTC"), names, sizeof names / sizeof names[0], 1);
}

/* An older NVRTC beside the newest, for archs the newest dropped (CUDA 13 starts at sm_75; CUDA 12
   and 11 still compile sm_70). Only when BITNET_NVRTC does not pin one library. */
static bitnet__nvrtc_lib bitnet__nvrtc_old;
static const bitnet__nvrtc_lib *bitnet__nvrtc_for(int cc) {
    static const char *const old_names[] = {
#if defined(_WIN32)
        "nvrtc64_120_0.dll", "nvrtc64_112_0.dll"
#else
        "libnvrtc.so.12", "libnvrtc.so.11.2"
#endif
    };
    const bitnet__nvrtc_lib *N = &bitnet__nvrtc;
    if (N->n_archs == 0 || N->archs[0] <= cc || bitnet__getenv("BITNET_NVRTC")) return N;
    bitnet__mutex_lock(&bitnet__nvrtc_lock);
    if (!bitnet__nvrtc_old.tried) bitnet__nvrtc_open(&bitnet__nvrtc_old, NULL, old_names, 2, 0);
    bitnet__mutex_unlock(&bitnet__nvrtc_lock);
    if (bitnet__nvrtc_old.status == BITNET_OK && bitnet__nvrtc_old.lib && bitnet__nvrtc_old.n_archs &&
        bitnet__nvrtc_old.archs[0] <= cc)
        return &bitnet__nvrtc_old;
    return N;
}

static bitnet_result bitnet__nvrtc_load(void) {
    bitnet__mutex_lock(&bitnet__nvrtc_lock);
    if (!bitnet__nvrtc.tried) bitnet__nvrtc_load_locked();
    bitnet__mutex_unlock(&bitnet__nvrtc_lock);
    if (bitnet__nvrtc.status != BITNET_OK) return bitnet__err(bitnet__nvrtc.status, "%s", bitnet__nvrtc.msg);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_nvrtc_info(int *version, int *min_sm, int *max_sm) {
    BITNET__TRY(bitnet__nvrtc_load());
    if (version) *version = bitnet__nvrtc.version;
    if (min_sm) *min_sm = bitnet__nvrtc.archs[0];
    if (max_sm) *max_sm = bitnet__nvrtc.archs[bitnet__nvrtc.n_archs - 1];
    return BITNET_OK;
}

/* ---- NVTX: ranges for profilers when libnvToolsExt is around, nothing otherwise --------------- */
static struct {
    int tried;
    int (*push)(const char *);
    int (*pop)(void);
} bitnet__nvtx;
static bitnet__mutex bitnet__nvtx_lock = BITNET__MUTEX_INIT;

static void bitnet__nvtx_load(void) {
    bitnet__mutex_lock(&bitnet__nvtx_lock);
    if (!bitnet__nvtx.tried) {
#if !defined(BITNET_NO_CUDA)
        static const char *const names[] = {
#if defined(_WIN32)
            "nvToolsExt64_1.dll"
#else
            "libnvToolsExt.so.1", "libnvToolsExt.so"
#endif
        };
        size_t i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++) {
            void *lib = bitnet__dl_open(names[i], NULL, 0);
            if (lib) {
                BITNET__SET_FN(bitnet__nvtx.push, bitnet__dl_sym(lib, "nvtxRangePushA"));
                BITNET__SET_FN(bitnet__nvtx.pop, bitnet__dl_sym(lib, "nvtxRangePop"));
                if (!bitnet__nvtx.push || !bitnet__nvtx.pop) bitnet__nvtx.push = NULL, bitnet__nvtx.pop = NULL;
                break;
            }
        }
#endif
        bitnet__nvtx.tried = 1;
    }
    bitnet__mutex_unlock(&bitnet__nvtx_lock);
}
BITNET_API void bitnet_gpu_nvtx_push(const char *name) {
    if (!bitnet__nvtx.tried) bitnet__nvtx_load();
    if (bitnet__nvtx.push && name) bitnet__nvtx.push(name);
}
BITNET_API void bitnet_gpu_nvtx_pop(void) {
    if (!bitnet__nvtx.tried) bitnet__nvtx_load();
    if (bitnet__nvtx.pop) bitnet__nvtx.pop();
}

/* ---- backends and preflight ------------------------------------------------------------------ */
/* BITNET_GPU_FAKE, when set (even empty), replaces detection. Returns 1 when mocking. */
static int bitnet__gpu_fake(bitnet_gpu_backends *b) {
    const char *spec = getenv("BITNET_GPU_FAKE");
    char item[32];
    if (!spec) return 0;
    memset(b, 0, sizeof *b);
    b->mocked = 1;
    while (*spec) {
        size_t len = strcspn(spec, ", ");
        if (len && len < sizeof item) {
            memcpy(item, spec, len);
            item[len] = 0;
            if (strcmp(item, "cuda") == 0) b->cuda = 1;
            else if (strcmp(item, "rocm") == 0) b->rocm = 1;
            else if (strcmp(item, "metal") == 0) b->metal = 1;
            else if (strcmp(item, "webgpu") == 0) b->webgpu = 1;
            else bitnet__log(BITNET_LOG_WARN, "BITNET_GPU_FAKE: unknown backend '%s' ignored", item);
        }
        spec += len;
        if (*spec) spec++;
    }
    snprintf(b->reason, sizeof b->reason, "detection is mocked by BITNET_GPU_FAKE=\"%s\": %s", getenv("BITNET_GPU_FAKE"),
             b->cuda ? "CUDA reported present, but no device can be opened" : "CUDA reported absent");
    return 1;
}

static int bitnet__file_exists(const char *path) {
#if defined(_WIN32)
    return GetFileAttributesA(path) != INVALID_FILE_ATTRIBUTES;
#else
    struct stat st;
    return stat(path, &st) == 0;
#endif
}

BITNET_API bitnet_result bitnet_gpu_backends_get(bitnet_gpu_backends *out) {
    BITNET__CHECK_PTR(out);
    if (bitnet__gpu_fake(out)) return BITNET_OK;
    memset(out, 0, sizeof *out);
    /* Detection only for the others: the driver node or runtime library is there. */
    {
        const char *rocm = bitnet__getenv("ROCM_PATH");
        char p[512];
        snprintf(p, sizeof p, "%s/lib/libamdhip64.so", rocm ? rocm : "/opt/rocm");
        out->rocm = bitnet__file_exists("/dev/kfd") || bitnet__file_exists(p);
    }
#if defined(__APPLE__)
    out->metal = bitnet__file_exists("/System/Library/Frameworks/Metal.framework");
#endif
    {
        static const char *const wgpu[] = {"libwgpu_native.so", "libwebgpu_dawn.so", "libdawn.so"};
        size_t i;
        for (i = 0; i < sizeof wgpu / sizeof wgpu[0] && !out->webgpu; i++) {
            void *h = bitnet__dl_open(wgpu[i], NULL, 0);
            if (h) {
                out->webgpu = 1;
#if !defined(_WIN32)
                dlclose(h);
#endif
            }
        }
    }
    if (bitnet__cuda_load() == BITNET_OK) {
        out->cuda = 1;
        out->device_count = bitnet__cuda.device_count;
    } else {
        bitnet__strlcpy(out->reason, sizeof out->reason, bitnet__cuda.msg);
        out->cuda = bitnet__cuda.lib && bitnet__cuda.status == BITNET_ERR_NO_DEVICE; /* driver there, no device */
    }
    out->cuda_driver_version = bitnet__cuda.driver_version;
    if (bitnet__nvrtc_load() == BITNET_OK) out->nvrtc_version = bitnet__nvrtc.version;
    else if (!out->reason[0]) bitnet__strlcpy(out->reason, sizeof out->reason, bitnet__nvrtc.msg);
    bitnet_clear_error();
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_preflight(char *msg, size_t cap) {
    bitnet_gpu_backends b;
    bitnet_result r = BITNET_OK;
    char text[2048];
    bitnet_gpu_backends_get(&b);
    if (b.mocked) {
        r = b.cuda ? BITNET_OK : BITNET_ERR_NO_DEVICE;
        bitnet__strlcpy(text, sizeof text, b.reason);
    } else if (bitnet__cuda.status != BITNET_OK) {
        r = bitnet__cuda.status;
        bitnet__strlcpy(text, sizeof text, bitnet__cuda.msg);
    } else if (bitnet__nvrtc.status != BITNET_OK) {
        r = bitnet__nvrtc.status;
        bitnet__strlcpy(text, sizeof text, bitnet__nvrtc.msg);
    } else {
        snprintf(text, sizeof text, "CUDA usable: driver %d.%d, NVRTC %d.%d, %d device(s)", b.cuda_driver_version / 1000,
                 b.cuda_driver_version % 1000 / 10, b.nvrtc_version / 1000, b.nvrtc_version % 1000 / 10, b.device_count);
    }
    if (msg && cap) bitnet__strlcpy(msg, cap, text);
    if (r != BITNET_OK) return bitnet__err(r, "%s", text);
    return BITNET_OK;
}

BITNET_API int bitnet_gpu_available(void) {
    bitnet_gpu_backends b;
    if (bitnet__gpu_fake(&b)) return b.cuda;
    return bitnet__cuda_load() == BITNET_OK && bitnet__nvrtc_load() == BITNET_OK;
}

/* ---- devices --------------------------------------------------------------------------------- */
/* The JIT target for compute capability cc (10*major+minor) with the loaded NVRTC: the exact sm
   when NVRTC supports it (a cubin), else PTX for the highest supported arch below it. */
static bitnet_result bitnet__jit_pick(int cc, char suffix, int want_ptx, char *target, size_t cap, int *cubin) {
    const bitnet__nvrtc_lib *N = bitnet__nvrtc_for(cc);
    int i, best = -1;
    for (i = 0; i < N->n_archs; i++)
        if (N->archs[i] <= cc) best = N->archs[i];
    if (best < 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "NVRTC %d.%d (%s) compiles for sm_%d to sm_%d; sm_%d is older than all "
                           "of them: set BITNET_NVRTC to an NVRTC that still supports it (CUDA 12 for sm_70)",
                           N->version / 1000, N->version % 1000 / 10, N->path, N->archs[0], N->archs[N->n_archs - 1], cc);
    if (best == cc && !want_ptx && N->fn.nvrtcGetCUBIN && N->fn.nvrtcGetCUBINSize) {
        *cubin = 1;
        if (suffix) snprintf(target, cap, "sm_%d%c", cc, suffix);
        else snprintf(target, cap, "sm_%d", cc);
    } else {
        *cubin = 0;
        if (suffix && best == cc) snprintf(target, cap, "compute_%d%c", best, suffix);
        else snprintf(target, cap, "compute_%d", best);
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_device_count(int *out) {
    bitnet_gpu_backends b;
    BITNET__CHECK_PTR(out);
    *out = 0;
    if (bitnet__gpu_fake(&b)) return bitnet__err(BITNET_ERR_NO_DEVICE, "%s", b.reason);
    BITNET__TRY(bitnet__cuda_load());
    *out = bitnet__cuda.device_count;
    return BITNET_OK;
}

/* Per device: the primary context, shared by every handle on it, with the built-in modules. */
#define BITNET__MAX_DEVICES 64
#define BITNET__N_BUILTINS_MAX 64
typedef struct bitnet__gpu_dev {
    int refs, ordinal;
    bitnet__CUdevice dev;
    bitnet__CUcontext ctx;
    int cc, max_threads, smem_default, smem_optin;
    char target[32];
    int cubin;
    bitnet__mutex lock;                 /* modules and kernels of this device */
    bitnet_gpu_module *builtin[BITNET__N_BUILTINS_MAX];
} bitnet__gpu_dev;
static bitnet__gpu_dev *bitnet__devs[BITNET__MAX_DEVICES];

static bitnet_result bitnet__ctx_push(bitnet__CUcontext ctx) {
    bitnet__CUresult r = bitnet__cuda.cu.cuCtxPushCurrent(ctx);
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "cuCtxPushCurrent") : BITNET_OK;
}
static void bitnet__ctx_pop(void) {
    bitnet__CUcontext c;
    bitnet__cuda.cu.cuCtxPopCurrent(&c);
}

static bitnet_result bitnet__dev_acquire(int ordinal, bitnet__gpu_dev **out);
static void bitnet__dev_release(bitnet__gpu_dev *dv);

BITNET_API bitnet_result bitnet_gpu_device_info_get(int ordinal, bitnet_gpu_device_info *out) {
    bitnet_gpu_backends fake;
    bitnet__CUdevice d;
    bitnet__CUresult r;
    size_t total = 0, free_b = 0;
    int v;
    bitnet__gpu_dev *dv = NULL;
    BITNET__CHECK_PTR(out);
    memset(out, 0, sizeof *out);
    if (bitnet__gpu_fake(&fake)) return bitnet__err(BITNET_ERR_NO_DEVICE, "%s", fake.reason);
    BITNET__TRY(bitnet__cuda_load());
    if (ordinal < 0 || ordinal >= bitnet__cuda.device_count || ordinal >= BITNET__MAX_DEVICES)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "device %d does not exist (%d visible)", ordinal, bitnet__cuda.device_count);
    if ((r = bitnet__cuda.cu.cuDeviceGet(&d, ordinal)) != 0) return bitnet__cu_fail(BITNET_ERR_CUDA, r, "cuDeviceGet");
    out->ordinal = ordinal;
    bitnet__cuda.cu.cuDeviceGetName(out->name, (int)sizeof out->name, d);
    if (bitnet__cuda.cu.cuDeviceGetPCIBusId) bitnet__cuda.cu.cuDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, d);
#define BITNET__ATTR(field, attr) do { if (bitnet__cuda.cu.cuDeviceGetAttribute(&v, attr, d) == 0) out->field = v; } while (0)
    BITNET__ATTR(cc_major, BITNET__CU_ATTR_CC_MAJOR);
    BITNET__ATTR(cc_minor, BITNET__CU_ATTR_CC_MINOR);
    BITNET__ATTR(sm_count, BITNET__CU_ATTR_SMS);
    BITNET__ATTR(max_threads_per_block, BITNET__CU_ATTR_MAX_THREADS);
    BITNET__ATTR(smem_per_block, BITNET__CU_ATTR_SMEM);
    BITNET__ATTR(smem_per_block_optin, BITNET__CU_ATTR_SMEM_OPTIN);
    BITNET__ATTR(l2_bytes, BITNET__CU_ATTR_L2);
    BITNET__ATTR(clock_khz, BITNET__CU_ATTR_CLOCK);
    BITNET__ATTR(mem_clock_khz, BITNET__CU_ATTR_MEM_CLOCK);
    BITNET__ATTR(mem_bus_bits, BITNET__CU_ATTR_BUS_WIDTH);
#undef BITNET__ATTR
    bitnet__cuda.cu.cuDeviceTotalMem(&total, d);
    out->total_mem = total;
    out->mem_bandwidth_gbs = 2.0 * out->mem_clock_khz * 1e3 * (out->mem_bus_bits / 8.0) / 1e9;
    v = out->cc_major * 10 + out->cc_minor;
    out->fp16 = v >= 53;
    out->bf16 = v >= 80;
    out->int8_tensor_cores = v >= 72;
    out->fp8 = v >= 89;
    if (bitnet__nvrtc_load() == BITNET_OK) {
        int cubin;
        if (bitnet__jit_pick(v, 0, 0, out->jit_target, sizeof out->jit_target, &cubin) != BITNET_OK) out->jit_target[0] = 0;
    }
    /* Free memory needs a context: the device's, held for the moment (opened if no handle has it). */
    if (bitnet__dev_acquire(ordinal, &dv) == BITNET_OK) {
        if (bitnet__ctx_push(dv->ctx) == BITNET_OK) {
            if (bitnet__cuda.cu.cuMemGetInfo(&free_b, &total) == 0) out->free_mem = free_b;
            bitnet__ctx_pop();
        }
        bitnet__dev_release(dv);
    }
    bitnet_clear_error();
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_summary(char *buf, size_t cap) {
    bitnet_gpu_backends b;
    int i;
    BITNET__CHECK_PTR(buf);
    if (cap == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_summary: cap is 0");
    bitnet_gpu_backends_get(&b);
    buf[0] = 0;
    if (b.mocked) bitnet__strcatf(buf, cap, "[mocked by BITNET_GPU_FAKE] ");
    if (b.cuda && !b.mocked && b.device_count > 0) {
        bitnet__strcatf(buf, cap, "CUDA driver %d.%d, NVRTC %d.%d, %d device(s):", b.cuda_driver_version / 1000,
                        b.cuda_driver_version % 1000 / 10, b.nvrtc_version / 1000, b.nvrtc_version % 1000 / 10, b.device_count);
        for (i = 0; i < b.device_count; i++) {
            bitnet_gpu_device_info d;
            if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK)
                bitnet__strcatf(buf, cap, " [%d] %s (cc %d.%d, %d SMs, %.1f GiB)", i, d.name, d.cc_major, d.cc_minor,
                                d.sm_count, (double)d.total_mem / 1073741824.0);
        }
        if (!b.nvrtc_version) bitnet__strcatf(buf, cap, " (%s)", b.reason);
    } else {
        bitnet__strcatf(buf, cap, "CUDA %s: %s", b.cuda ? "present" : "unavailable", b.reason);
    }
    bitnet__strcatf(buf, cap, "; ROCm %s; Metal %s; WebGPU %s", b.rocm ? "present" : "no", b.metal ? "present" : "no",
                    b.webgpu ? "present" : "no");
    return BITNET_OK;
}

/* ---- statistics: kernel names interned once per process; counters per handle and in total --- */
typedef struct bitnet__kcount { uint64_t launches, timed; double ms; } bitnet__kcount;
typedef struct bitnet__counters {
    uint64_t launches, h2d_count, h2d_bytes, d2h_count, d2h_bytes, d2d_count, d2d_bytes;
    bitnet__kcount k[BITNET_GPU_MAX_KERNEL_STATS];
    int order[BITNET_GPU_MAX_KERNEL_STATS], n_order; /* kernel ids in order of first launch */
} bitnet__counters;
static char bitnet__knames[BITNET_GPU_MAX_KERNEL_STATS][64];
static int bitnet__n_knames;
static bitnet__counters bitnet__total;
static bitnet__mutex bitnet__stats_lock = BITNET__MUTEX_INIT;

static int bitnet__kname_id(const char *name) {
    int i;
    bitnet__mutex_lock(&bitnet__stats_lock);
    for (i = 0; i < bitnet__n_knames; i++)
        if (strcmp(bitnet__knames[i], name) == 0) break;
    if (i == bitnet__n_knames) {
        if (i == BITNET_GPU_MAX_KERNEL_STATS - 1) { /* the last slot gathers the rest */
            snprintf(bitnet__knames[i], sizeof bitnet__knames[i], "(other kernels)");
        } else {
            snprintf(bitnet__knames[i], sizeof bitnet__knames[i], "%s", name);
            bitnet__n_knames++;
        }
    }
    bitnet__mutex_unlock(&bitnet__stats_lock);
    return i;
}
static void bitnet__count_launch(bitnet__counters *c, int kid, uint64_t n) {
    if (c->k[kid].launches == 0) c->order[c->n_order++] = kid;
    c->k[kid].launches += n;
    c->launches += n;
}
/* kind: 'u' upload, 'd' download, 'c' device copy */
static void bitnet__count_copy(bitnet__counters *c, char kind, size_t bytes) {
    if (kind == 'u') c->h2d_count++, c->h2d_bytes += bytes;
    else if (kind == 'd') c->d2h_count++, c->d2h_bytes += bytes;
    else c->d2d_count++, c->d2d_bytes += bytes;
}

/* ---- handles ------------------------------------------------------------------------------------ */
#define BITNET__TIMING_RING 256
typedef struct bitnet__timed { int kid; bitnet__CUevent a, b; } bitnet__timed;
struct bitnet_gpu_kernel {
    bitnet_gpu_module *mod;
    bitnet__CUfunction fn;
    int kid;                            /* statistics slot */
    unsigned smem_set;                  /* dynamic shared memory opted in so far */
    char name[64];
    bitnet_gpu_kernel *next;
};
struct bitnet_gpu_module {
    bitnet__gpu_dev *dev;
    bitnet_gpu *owner;                  /* NULL for built-in modules (owned by the device) */
    bitnet__CUmodule mod;
    char name[32];
    bitnet_gpu_kernel *kernels;
    bitnet_gpu_module *next;
    bitnet_gpu_jit_info jit;
};
struct bitnet__pool;
struct bitnet_gpu {
    bitnet__gpu_dev *dev;
    bitnet__CUstream stream;            /* every operation of this handle, in call order */
    bitnet__mutex lock;                 /* guards the stream's order, the pool and the counters */
    int timing, capturing, timer_started;
    bitnet__timed pend[BITNET__TIMING_RING];
    int n_pend;
    bitnet__CUevent spare[2 * BITNET__TIMING_RING];
    int n_spare;
    bitnet__CUevent timer[2];
    bitnet__counters stats;
    uint32_t captured[BITNET_GPU_MAX_KERNEL_STATS]; /* launches recorded into the graph being captured */
    bitnet_gpu_module *modules;         /* loaded through this handle */
    struct bitnet__pool *pool;
};
struct bitnet_gpu_graph {
    bitnet__gpu_dev *dev;
    bitnet__CUgraph graph;
    bitnet__CUgraphExec exec;
    uint32_t counts[BITNET_GPU_MAX_KERNEL_STATS];
};

static bitnet_result bitnet__pool_create(bitnet_gpu *gpu);
static void bitnet__pool_destroy(bitnet_gpu *gpu);
static bitnet_result bitnet__mem_limit_init(void);
static void bitnet__module_unload(bitnet_gpu_module *m);

#define BITNET__CHECK_GPU(gpu) \
    do { if (!(gpu) || !(gpu)->dev) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: gpu is NULL", __func__); } while (0)

static bitnet_result bitnet__dev_acquire(int ordinal, bitnet__gpu_dev **out) {
    bitnet__gpu_dev *dv;
    bitnet__CUresult r;
    int v;
    bitnet__mutex_lock(&bitnet__cuda_lock);
    if ((dv = bitnet__devs[ordinal]) != NULL) {
        dv->refs++;
        bitnet__mutex_unlock(&bitnet__cuda_lock);
        *out = dv;
        return BITNET_OK;
    }
    dv = (bitnet__gpu_dev *)bitnet__calloc(1, sizeof *dv);
    if (!dv) {
        bitnet__mutex_unlock(&bitnet__cuda_lock);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    dv->ordinal = ordinal;
    r = bitnet__cuda.cu.cuDeviceGet(&dv->dev, ordinal);
    if (r == 0) r = bitnet__cuda.cu.cuDevicePrimaryCtxRetain(&dv->ctx, dv->dev);
    if (r != 0) {
        bitnet__mutex_unlock(&bitnet__cuda_lock);
        bitnet__free(dv);
        return bitnet__cu_fail(BITNET_ERR_CUDA, r, "opening the primary context (cuDevicePrimaryCtxRetain)");
    }
    bitnet__cuda.cu.cuDeviceGetAttribute(&v, BITNET__CU_ATTR_CC_MAJOR, dv->dev);
    dv->cc = v * 10;
    bitnet__cuda.cu.cuDeviceGetAttribute(&v, BITNET__CU_ATTR_CC_MINOR, dv->dev);
    dv->cc += v;
    bitnet__cuda.cu.cuDeviceGetAttribute(&dv->max_threads, BITNET__CU_ATTR_MAX_THREADS, dv->dev);
    bitnet__cuda.cu.cuDeviceGetAttribute(&dv->smem_default, BITNET__CU_ATTR_SMEM, dv->dev);
    bitnet__cuda.cu.cuDeviceGetAttribute(&dv->smem_optin, BITNET__CU_ATTR_SMEM_OPTIN, dv->dev);
    if (dv->smem_optin < dv->smem_default) dv->smem_optin = dv->smem_default;
    /* Without NVRTC the handle still moves memory; loading a module then names the reason. */
    if (bitnet__nvrtc_load() != BITNET_OK ||
        bitnet__jit_pick(dv->cc, 0, 0, dv->target, sizeof dv->target, &dv->cubin) != BITNET_OK)
        dv->target[0] = 0;
    bitnet__mutex_init(&dv->lock);
    dv->refs = 1;
    bitnet__devs[ordinal] = dv;
    bitnet__mutex_unlock(&bitnet__cuda_lock);
    *out = dv;
    return BITNET_OK;
}

static void bitnet__dev_release(bitnet__gpu_dev *dv) {
    int i, last;
    bitnet__mutex_lock(&bitnet__cuda_lock);
    last = --dv->refs == 0;
    if (last) bitnet__devs[dv->ordinal] = NULL;
    bitnet__mutex_unlock(&bitnet__cuda_lock);
    if (!last) return;
    for (i = 0; i < BITNET__N_BUILTINS_MAX; i++)
        if (dv->builtin[i]) bitnet__module_unload(dv->builtin[i]);
    bitnet__cuda.cu.cuDevicePrimaryCtxRelease(dv->dev);
    bitnet__mutex_destroy(&dv->lock);
    bitnet__free(dv);
}

static bitnet_result bitnet__event_get(bitnet_gpu *gpu, bitnet__CUevent *e) {
    bitnet__CUresult r;
    if (gpu->n_spare > 0) {
        *e = gpu->spare[--gpu->n_spare];
        return BITNET_OK;
    }
    r = bitnet__cuda.cu.cuEventCreate(e, BITNET__CU_EVENT_DEFAULT);
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "cuEventCreate") : BITNET_OK;
}
static void bitnet__event_put(bitnet_gpu *gpu, bitnet__CUevent e) {
    if (gpu->n_spare < 2 * BITNET__TIMING_RING) gpu->spare[gpu->n_spare++] = e;
    else bitnet__cuda.cu.cuEventDestroy(e);
}

/* Adds the times of finished timed launches to the counters (handle lock held, context current).
   wait: block on the oldest pending launch first (the ring is full). */
static void bitnet__timing_collect(bitnet_gpu *gpu, int wait) {
    int i, kept = 0;
    if (wait && gpu->n_pend > 0) bitnet__cuda.cu.cuEventSynchronize(gpu->pend[0].b);
    for (i = 0; i < gpu->n_pend; i++) {
        bitnet__timed *t = &gpu->pend[i];
        float ms = 0;
        bitnet__CUresult r = bitnet__cuda.cu.cuEventElapsedTime(&ms, t->a, t->b);
        if (r == BITNET__CU_ERR_NOT_READY) {
            gpu->pend[kept++] = *t;
            continue;
        }
        if (r == 0) {
            gpu->stats.k[t->kid].timed++;
            gpu->stats.k[t->kid].ms += ms;
            bitnet__mutex_lock(&bitnet__stats_lock);
            bitnet__total.k[t->kid].timed++;
            bitnet__total.k[t->kid].ms += ms;
            bitnet__mutex_unlock(&bitnet__stats_lock);
        }
        bitnet__event_put(gpu, t->a);
        bitnet__event_put(gpu, t->b);
    }
    gpu->n_pend = kept;
}

BITNET_API bitnet_result bitnet_gpu_open(int ordinal, bitnet_gpu **out) {
    bitnet_gpu_backends fake;
    bitnet__gpu_dev *dv = NULL;
    bitnet_gpu *g;
    bitnet__CUresult r;
    bitnet_result res;
    const char *timing = bitnet__getenv("BITNET_GPU_TIMING");
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (bitnet__gpu_fake(&fake)) return bitnet__err(BITNET_ERR_NO_DEVICE, "%s", fake.reason);
    BITNET__TRY(bitnet__cuda_load());
    BITNET__TRY(bitnet__mem_limit_init());
    if (ordinal < 0 || ordinal >= bitnet__cuda.device_count || ordinal >= BITNET__MAX_DEVICES)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_open: device %d does not exist (%d visible)", ordinal,
                           bitnet__cuda.device_count);
    BITNET__TRY(bitnet__dev_acquire(ordinal, &dv));
    g = (bitnet_gpu *)bitnet__calloc(1, sizeof *g);
    if (!g) {
        bitnet__dev_release(dv);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    g->dev = dv;
    g->timing = timing && strcmp(timing, "0") != 0;
    bitnet__mutex_init(&g->lock);
    if ((res = bitnet__ctx_push(dv->ctx)) != BITNET_OK) goto fail_ctx;
    r = bitnet__cuda.cu.cuStreamCreate(&g->stream, BITNET__CU_STREAM_NON_BLOCKING);
    if (r == 0) r = bitnet__cuda.cu.cuEventCreate(&g->timer[0], BITNET__CU_EVENT_DEFAULT);
    if (r == 0) r = bitnet__cuda.cu.cuEventCreate(&g->timer[1], BITNET__CU_EVENT_DEFAULT);
    bitnet__ctx_pop();
    if (r != 0) {
        res = bitnet__cu_fail(BITNET_ERR_CUDA, r, "creating the handle's stream and events");
        goto fail;
    }
    if ((res = bitnet__pool_create(g)) != BITNET_OK) goto fail;
    *out = g;
    return BITNET_OK;
fail:
    if (bitnet__ctx_push(dv->ctx) == BITNET_OK) {
        if (g->timer[0]) bitnet__cuda.cu.cuEventDestroy(g->timer[0]);
        if (g->timer[1]) bitnet__cuda.cu.cuEventDestroy(g->timer[1]);
        if (g->stream) bitnet__cuda.cu.cuStreamDestroy(g->stream);
        bitnet__ctx_pop();
    }
fail_ctx:
    bitnet__mutex_destroy(&g->lock);
    bitnet__free(g);
    bitnet__dev_release(dv);
    return res;
}

BITNET_API void bitnet_gpu_close(bitnet_gpu *gpu) {
    int i;
    if (!gpu || !gpu->dev) return;
    if (bitnet__ctx_push(gpu->dev->ctx) == BITNET_OK) {
        bitnet__cuda.cu.cuStreamSynchronize(gpu->stream);
        bitnet__timing_collect(gpu, 0);
        while (gpu->modules) bitnet__module_unload(gpu->modules);
        bitnet__pool_destroy(gpu);
        for (i = 0; i < gpu->n_pend; i++) {
            bitnet__cuda.cu.cuEventDestroy(gpu->pend[i].a);
            bitnet__cuda.cu.cuEventDestroy(gpu->pend[i].b);
        }
        for (i = 0; i < gpu->n_spare; i++) bitnet__cuda.cu.cuEventDestroy(gpu->spare[i]);
        bitnet__cuda.cu.cuEventDestroy(gpu->timer[0]);
        bitnet__cuda.cu.cuEventDestroy(gpu->timer[1]);
        bitnet__cuda.cu.cuStreamDestroy(gpu->stream);
        bitnet__ctx_pop();
    }
    bitnet__mutex_destroy(&gpu->lock);
    bitnet__dev_release(gpu->dev);
    gpu->dev = NULL;
    bitnet__free(gpu);
}

BITNET_API int bitnet_gpu_ordinal(const bitnet_gpu *gpu) { return gpu && gpu->dev ? gpu->dev->ordinal : -1; }

/* Waits for everything issued through the handle; a kernel's asynchronous failure shows up here. */
static bitnet_result bitnet__stream_wait(bitnet_gpu *gpu, const char *what) {
    bitnet__CUresult r = bitnet__cuda.cu.cuStreamSynchronize(gpu->stream);
    bitnet__mutex_lock(&gpu->lock);
    if (gpu->n_pend) bitnet__timing_collect(gpu, 0);
    bitnet__mutex_unlock(&gpu->lock);
    if (r != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s: waiting for the handle's stream (an earlier kernel or copy failed)", what);
        return bitnet__cu_fail(BITNET_ERR_CUDA, r, msg);
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_sync(bitnet_gpu *gpu) {
    bitnet_result res;
    BITNET__CHECK_GPU(gpu);
    if (gpu->capturing) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_sync: a graph is being captured");
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    res = bitnet__stream_wait(gpu, "bitnet_gpu_sync");
    bitnet__ctx_pop();
    return res;
}

/* Puts one copy on the handle's stream. kind: 'u' upload, 'd' download, 'c' device copy, 's' set. */
static bitnet_result bitnet__enqueue_copy(bitnet_gpu *gpu, char kind, void *host, bitnet_devptr dst, bitnet_devptr src,
                                          int value, size_t bytes) {
    bitnet__CUresult r;
    bitnet__mutex_lock(&gpu->lock);
    switch (kind) {
    case 'u': r = bitnet__cuda.cu.cuMemcpyHtoDAsync(dst, host, bytes, gpu->stream); break;
    case 'd': r = bitnet__cuda.cu.cuMemcpyDtoHAsync(host, src, bytes, gpu->stream); break;
    case 'c': r = bitnet__cuda.cu.cuMemcpyDtoDAsync(dst, src, bytes, gpu->stream); break;
    default: r = bitnet__cuda.cu.cuMemsetD8Async(dst, (unsigned char)value, bytes, gpu->stream); break;
    }
    if (r == 0 && kind != 's') {
        bitnet__count_copy(&gpu->stats, kind, bytes);
        bitnet__mutex_lock(&bitnet__stats_lock);
        bitnet__count_copy(&bitnet__total, kind, bytes);
        bitnet__mutex_unlock(&bitnet__stats_lock);
    }
    bitnet__mutex_unlock(&gpu->lock);
    if (r != 0) {
        char what[160];
        snprintf(what, sizeof what, "%s of %zu bytes (dst 0x%llx, src 0x%llx)",
                 kind == 'u' ? "upload" : kind == 'd' ? "download" : kind == 'c' ? "device copy" : "memset", bytes,
                 kind == 'd' ? 0ull : (unsigned long long)dst, kind == 'd' || kind == 'c' ? (unsigned long long)src : 0ull);
        return bitnet__cu_fail(BITNET_ERR_CUDA, r, what);
    }
    return BITNET_OK;
}

static bitnet_result bitnet__copy_args(const char *fn, bitnet_gpu *gpu, const void *host, bitnet_devptr dev_ptr, size_t bytes,
                                       int waits) {
    if (!gpu || !gpu->dev) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: gpu is NULL", fn);
    if (!host) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: host pointer is NULL", fn);
    if (!dev_ptr) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: device pointer is 0", fn);
    if (bytes == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "%s: 0 bytes", fn);
    if (dev_ptr + bytes < dev_ptr) return bitnet__err(BITNET_ERR_OVERFLOW, "%s: 0x%llx + %zu bytes wraps", fn, dev_ptr, bytes);
    if (gpu->capturing && waits)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "%s: a graph is being captured on this handle", fn);
    return BITNET_OK;
}

/* The source may be reused as soon as this returns: the driver stages pageable memory. */
BITNET_API bitnet_result bitnet_gpu_upload(bitnet_gpu *gpu, bitnet_devptr dst, const void *src, size_t bytes) {
    bitnet_result res;
    BITNET__TRY(bitnet__copy_args("bitnet_gpu_upload", gpu, src, dst, bytes, 0));
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    res = bitnet__enqueue_copy(gpu, 'u', (void *)(uintptr_t)src, dst, 0, 0, bytes);
    bitnet__ctx_pop();
    return res;
}

/* Ordered after every kernel and copy issued through this handle before it, and complete on return. */
BITNET_API bitnet_result bitnet_gpu_download(bitnet_gpu *gpu, void *dst, bitnet_devptr src, size_t bytes) {
    bitnet_result res;
    BITNET__TRY(bitnet__copy_args("bitnet_gpu_download", gpu, dst, src, bytes, 1));
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    res = bitnet__enqueue_copy(gpu, 'd', dst, 0, src, 0, bytes);
    if (res == BITNET_OK) res = bitnet__stream_wait(gpu, "bitnet_gpu_download");
    bitnet__ctx_pop();
    return res;
}

BITNET_API bitnet_result bitnet_gpu_copy(bitnet_gpu *gpu, bitnet_devptr dst, bitnet_devptr src, size_t bytes) {
    bitnet_result res;
    BITNET__CHECK_GPU(gpu);
    if (!dst || !src) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_copy: device pointer is 0");
    if (bytes == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_copy: 0 bytes");
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    res = bitnet__enqueue_copy(gpu, 'c', NULL, dst, src, 0, bytes);
    bitnet__ctx_pop();
    return res;
}

BITNET_API bitnet_result bitnet_gpu_memset(bitnet_gpu *gpu, bitnet_devptr dst, int value, size_t bytes) {
    bitnet_result res;
    BITNET__CHECK_GPU(gpu);
    if (!dst) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_memset: device pointer is 0");
    if (bytes == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_memset: 0 bytes");
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    res = bitnet__enqueue_copy(gpu, 's', NULL, dst, 0, value, bytes);
    bitnet__ctx_pop();
    return res;
}

/* The one launch path: the only call of cuLaunchKernel, which also counts and times. */
BITNET_API bitnet_result bitnet_gpu_launch(bitnet_gpu *gpu, bitnet_gpu_kernel *k, const unsigned grid[3],
                                           const unsigned block[3], unsigned shared_bytes, void **args) {
    bitnet__gpu_dev *dv;
    bitnet__CUresult r = 0;
    bitnet__CUevent ev[2] = {NULL, NULL};
    unsigned long long threads;
    int timed;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(k);
    BITNET__CHECK_PTR(grid);
    BITNET__CHECK_PTR(block);
    dv = gpu->dev;
    if (k->mod->dev != dv)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_launch: kernel %s belongs to device %d, the handle to device %d",
                           k->name, k->mod->dev->ordinal, dv->ordinal);
    threads = (unsigned long long)block[0] * block[1] * block[2];
    if (!grid[0] || !grid[1] || !grid[2] || !threads)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_launch(%s): grid %ux%ux%u, block %ux%ux%u has a zero", k->name,
                           grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    if (threads > (unsigned long long)dv->max_threads)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_launch(%s): block %ux%ux%u has %llu threads, the device allows %d",
                           k->name, block[0], block[1], block[2], threads, dv->max_threads);
    if (shared_bytes > (unsigned)dv->smem_optin)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_launch(%s): %u bytes of shared memory, the device allows %d",
                           k->name, shared_bytes, dv->smem_optin);
    BITNET__TRY(bitnet__ctx_push(dv->ctx));
    if (shared_bytes > (unsigned)dv->smem_default && shared_bytes > k->smem_set) {
        /* More than the default 48 KiB needs an opt-in per function, once. */
        bitnet__mutex_lock(&dv->lock);
        if (shared_bytes > k->smem_set) {
            r = bitnet__cuda.cu.cuFuncSetAttribute
                    ? bitnet__cuda.cu.cuFuncSetAttribute(k->fn, BITNET__CU_FUNC_MAX_DYN_SMEM, (int)shared_bytes) : 1;
            if (r == 0) k->smem_set = shared_bytes;
        }
        bitnet__mutex_unlock(&dv->lock);
        if (r != 0) {
            bitnet__ctx_pop();
            return bitnet__cu_fail(BITNET_ERR_LAUNCH, r, "raising the kernel's dynamic shared memory limit");
        }
    }
    bitnet__mutex_lock(&gpu->lock);
    timed = gpu->timing && !gpu->capturing;
    if (timed) {
        if (gpu->n_pend == BITNET__TIMING_RING) bitnet__timing_collect(gpu, 1);
        if (bitnet__event_get(gpu, &ev[0]) != BITNET_OK || bitnet__event_get(gpu, &ev[1]) != BITNET_OK) {
            if (ev[0]) bitnet__event_put(gpu, ev[0]);
            timed = 0;
        } else {
            bitnet__cuda.cu.cuEventRecord(ev[0], gpu->stream);
        }
    }
    r = bitnet__cuda.cu.cuLaunchKernel(k->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                                       gpu->stream, args, NULL);
    if (timed) {
        if (r == 0 && bitnet__cuda.cu.cuEventRecord(ev[1], gpu->stream) == 0) {
            gpu->pend[gpu->n_pend].kid = k->kid;
            gpu->pend[gpu->n_pend].a = ev[0];
            gpu->pend[gpu->n_pend].b = ev[1];
            gpu->n_pend++;
        } else {
            bitnet__event_put(gpu, ev[0]);
            bitnet__event_put(gpu, ev[1]);
        }
    }
    if (r == 0) {
        if (gpu->capturing) {
            gpu->captured[k->kid]++;
        } else {
            bitnet__count_launch(&gpu->stats, k->kid, 1);
            bitnet__mutex_lock(&bitnet__stats_lock);
            bitnet__count_launch(&bitnet__total, k->kid, 1);
            bitnet__mutex_unlock(&bitnet__stats_lock);
        }
    }
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    if (r != 0) {
        char what[192];
        snprintf(what, sizeof what, "cuLaunchKernel(%s, grid %ux%ux%u, block %ux%ux%u, %u bytes shared)", k->name, grid[0],
                 grid[1], grid[2], block[0], block[1], block[2], shared_bytes);
        return bitnet__cu_fail(BITNET_ERR_LAUNCH, r, what);
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_set_timing(bitnet_gpu *gpu, int on) {
    BITNET__CHECK_GPU(gpu);
    bitnet__mutex_lock(&gpu->lock);
    gpu->timing = on != 0;
    bitnet__mutex_unlock(&gpu->lock);
    return BITNET_OK;
}

static void bitnet__stats_export(const bitnet__counters *c, bitnet_gpu_stats *out) {
    int i;
    memset(out, 0, sizeof *out);
    out->launches = c->launches;
    out->h2d_count = c->h2d_count, out->h2d_bytes = c->h2d_bytes;
    out->d2h_count = c->d2h_count, out->d2h_bytes = c->d2h_bytes;
    out->d2d_count = c->d2d_count, out->d2d_bytes = c->d2d_bytes;
    for (i = 0; i < c->n_order; i++) {
        int id = c->order[i];
        bitnet__mutex_lock(&bitnet__stats_lock);
        snprintf(out->kernels[i].name, sizeof out->kernels[i].name, "%s", bitnet__knames[id]);
        bitnet__mutex_unlock(&bitnet__stats_lock);
        out->kernels[i].launches = c->k[id].launches;
        out->kernels[i].timed = c->k[id].timed;
        out->kernels[i].ms = c->k[id].ms;
    }
    out->n_kernels = c->n_order;
}

BITNET_API bitnet_result bitnet_gpu_stats_get(bitnet_gpu *gpu, bitnet_gpu_stats *out) {
    BITNET__CHECK_PTR(out);
    if (!gpu) {
        bitnet__counters c;
        bitnet__mutex_lock(&bitnet__stats_lock);
        c = bitnet__total;
        bitnet__mutex_unlock(&bitnet__stats_lock);
        bitnet__stats_export(&c, out);
        return BITNET_OK;
    }
    BITNET__CHECK_GPU(gpu);
    bitnet__mutex_lock(&gpu->lock);
    bitnet__stats_export(&gpu->stats, out);
    bitnet__mutex_unlock(&gpu->lock);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_stats_reset(bitnet_gpu *gpu) {
    if (!gpu) {
        bitnet__mutex_lock(&bitnet__stats_lock);
        memset(&bitnet__total, 0, sizeof bitnet__total);
        bitnet__mutex_unlock(&bitnet__stats_lock);
        return BITNET_OK;
    }
    BITNET__CHECK_GPU(gpu);
    bitnet__mutex_lock(&gpu->lock);
    memset(&gpu->stats, 0, sizeof gpu->stats);
    bitnet__mutex_unlock(&gpu->lock);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_timer_begin(bitnet_gpu *gpu) {
    bitnet__CUresult r;
    BITNET__CHECK_GPU(gpu);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    r = bitnet__cuda.cu.cuEventRecord(gpu->timer[0], gpu->stream);
    gpu->timer_started = r == 0;
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "bitnet_gpu_timer_begin: cuEventRecord") : BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_timer_end(bitnet_gpu *gpu, double *ms) {
    bitnet__CUresult r;
    float f = 0;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(ms);
    if (!gpu->timer_started) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_timer_end without bitnet_gpu_timer_begin");
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    r = bitnet__cuda.cu.cuEventRecord(gpu->timer[1], gpu->stream);
    gpu->timer_started = 0;
    bitnet__mutex_unlock(&gpu->lock);
    if (r == 0) r = bitnet__cuda.cu.cuEventSynchronize(gpu->timer[1]);
    if (r == 0) r = bitnet__cuda.cu.cuEventElapsedTime(&f, gpu->timer[0], gpu->timer[1]);
    bitnet__ctx_pop();
    *ms = f;
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "bitnet_gpu_timer_end") : BITNET_OK;
}

/* ---- graphs: capture on the handle's stream, replay with the captured launch counts ---------- */
BITNET_API bitnet_result bitnet_gpu_graph_begin(bitnet_gpu *gpu) {
    bitnet__CUresult r;
    BITNET__CHECK_GPU(gpu);
    if (!bitnet__cuda.cu.cuStreamBeginCapture || !bitnet__cuda.cu.cuStreamEndCapture ||
        !bitnet__cuda.cu.cuGraphInstantiateWithFlags || !bitnet__cuda.cu.cuGraphLaunch)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "CUDA graphs need driver 11.4 or newer (this is %d)", bitnet__cuda.driver_version);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    if (gpu->capturing) r = -1;
    else if ((r = bitnet__cuda.cu.cuStreamBeginCapture(gpu->stream, BITNET__CU_CAPTURE_THREAD_LOCAL)) == 0) {
        gpu->capturing = 1;
        memset(gpu->captured, 0, sizeof gpu->captured);
    }
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    if (r == -1) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_graph_begin: already capturing");
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "cuStreamBeginCapture") : BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_graph_end(bitnet_gpu *gpu, bitnet_gpu_graph **out) {
    bitnet__CUresult r;
    bitnet__CUgraph g = NULL;
    bitnet__CUgraphExec e = NULL;
    bitnet_gpu_graph *gr;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (!gpu->capturing) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_graph_end without bitnet_gpu_graph_begin");
    gr = (bitnet_gpu_graph *)bitnet__calloc(1, sizeof *gr);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    r = bitnet__cuda.cu.cuStreamEndCapture(gpu->stream, &g);
    gpu->capturing = 0;
    if (gr) memcpy(gr->counts, gpu->captured, sizeof gr->counts);
    bitnet__mutex_unlock(&gpu->lock);
    if (r == 0 && gr) r = bitnet__cuda.cu.cuGraphInstantiateWithFlags(&e, g, 0);
    if ((r != 0 || !gr) && g) bitnet__cuda.cu.cuGraphDestroy(g);
    bitnet__ctx_pop();
    if (!gr) return BITNET_ERR_OUT_OF_MEMORY;
    if (r != 0) {
        bitnet__free(gr);
        return bitnet__cu_fail(BITNET_ERR_CUDA, r, "ending the graph capture");
    }
    gr->dev = gpu->dev;
    gr->graph = g;
    gr->exec = e;
    *out = gr;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_graph_launch(bitnet_gpu *gpu, bitnet_gpu_graph *graph) {
    bitnet__CUresult r;
    int i;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(graph);
    if (graph->dev != gpu->dev) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_graph_launch: graph of another device");
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    r = bitnet__cuda.cu.cuGraphLaunch(graph->exec, gpu->stream);
    if (r == 0)
        for (i = 0; i < BITNET_GPU_MAX_KERNEL_STATS; i++)
            if (graph->counts[i]) {
                bitnet__count_launch(&gpu->stats, i, graph->counts[i]);
                bitnet__mutex_lock(&bitnet__stats_lock);
                bitnet__count_launch(&bitnet__total, i, graph->counts[i]);
                bitnet__mutex_unlock(&bitnet__stats_lock);
            }
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return r ? bitnet__cu_fail(BITNET_ERR_LAUNCH, r, "cuGraphLaunch") : BITNET_OK;
}

BITNET_API void bitnet_gpu_graph_free(bitnet_gpu_graph *graph) {
    if (!graph) return;
    if (bitnet__ctx_push(graph->dev->ctx) == BITNET_OK) {
        if (bitnet__cuda.cu.cuGraphExecDestroy) bitnet__cuda.cu.cuGraphExecDestroy(graph->exec);
        if (bitnet__cuda.cu.cuGraphDestroy) bitnet__cuda.cu.cuGraphDestroy(graph->graph);
        bitnet__ctx_pop();
    }
    bitnet__free(graph);
}

BITNET_API void *bitnet_gpu_raw_context(bitnet_gpu *gpu) { return gpu && gpu->dev ? (void *)gpu->dev->ctx : NULL; }
BITNET_API void *bitnet_gpu_raw_stream(bitnet_gpu *gpu) { return gpu && gpu->dev ? (void *)gpu->stream : NULL; }
BITNET_API void *bitnet_gpu_raw_module(bitnet_gpu_module *mod) { return mod ? (void *)mod->mod : NULL; }
BITNET_API void *bitnet_gpu_raw_function(bitnet_gpu_kernel *k) { return k ? (void *)k->fn : NULL; }

/* >>nvrtc ===================================================================================== */

/* The built-in modules and kernels of bitnet_cuda_kernels.h (a sentinel keeps the arrays non-empty). */
typedef struct bitnet__builtin_mod { const char *name, *source; int min_sm; } bitnet__builtin_mod;
typedef struct bitnet__builtin_fn { const char *kernel, *module; } bitnet__builtin_fn;
static const bitnet__builtin_mod bitnet__builtins[] = {
#define BITNET__MOD_ROW(name, src, sm) {#name, src, sm},
    BITNET_CUDA_MODULES(BITNET__MOD_ROW)
#undef BITNET__MOD_ROW
    {NULL, NULL, 0}};
static const bitnet__builtin_fn bitnet__builtin_fns[] = {
#define BITNET__FN_ROW(kernel, module) {#kernel, #module},
    BITNET_CUDA_KERNELS(BITNET__FN_ROW)
#undef BITNET__FN_ROW
    {NULL, NULL}};
#define BITNET__N_BUILTINS ((int)(sizeof bitnet__builtins / sizeof bitnet__builtins[0]) - 1)
typedef char bitnet__builtins_fit[BITNET__N_BUILTINS <= BITNET__N_BUILTINS_MAX ? 1 : -1]; /* raise _MAX if not */

BITNET_API int bitnet_gpu_builtin_count(void) { return BITNET__N_BUILTINS; }
BITNET_API const char *bitnet_gpu_builtin_name(int i) { return i >= 0 && i < BITNET__N_BUILTINS ? bitnet__builtins[i].name : NULL; }
BITNET_API int bitnet_gpu_builtin_min_sm(int i) { return i >= 0 && i < BITNET__N_BUILTINS ? bitnet__builtins[i].min_sm : -1; }

/* FNV-1a, 64 bits: cache keys and binary fingerprints. */
#define BITNET__FNV_INIT 0xcbf29ce484222325ull
static uint64_t bitnet__fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
static uint64_t bitnet__fnv_str(uint64_t h, const char *s) { /* the NUL separates fields */
    if (!s) s = "";
    return bitnet__fnv(h, s, strlen(s) + 1);
}

/* "sm_90", "sm_90a", "compute_86" -> 90 / 'a' / ptx. */
static bitnet_result bitnet__parse_arch(const char *arch, int *cc, char *suffix, int *ptx) {
    const char *p;
    int v = 0, digits = 0;
    if (!arch) return bitnet__err(BITNET_ERR_NULL_POINTER, "arch is NULL");
    if (strncmp(arch, "sm_", 3) == 0) p = arch + 3, *ptx = 0;
    else if (strncmp(arch, "compute_", 8) == 0) p = arch + 8, *ptx = 1;
    else p = NULL;
    if (p)
        for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++) v = v * 10 + (*p - '0');
    *suffix = 0;
    if (p && (*p == 'a' || *p == 'f')) *suffix = *p++;
    if (!p || digits < 2 || *p || v < 10)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "arch '%s' is not sm_XY or compute_XY (e.g. sm_90)", arch);
    *cc = v;
    return BITNET_OK;
}

/* ---- the disk cache ---------------------------------------------------------------------- */
#if defined(_WIN32)
#include <direct.h>
#include <process.h>
#define BITNET__MKDIR(p) _mkdir(p)
#define BITNET__GETPID() _getpid()
#else
#define BITNET__MKDIR(p) mkdir(p, 0755)
#define BITNET__GETPID() getpid()
#endif

static void bitnet__mkdirs(char *path) {
    char *p;
    for (p = path + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            BITNET__MKDIR(path);
            *p = '/';
        }
    BITNET__MKDIR(path);
}

/* The cache folder, created when missing; 0 when caching is off. Read at each compile. */
static int bitnet__cache_dir(char *out, size_t cap) {
    const char *e = bitnet__getenv("BITNET_CUDA_CACHE"), *d;
    if (e && strcmp(e, "0") == 0) return 0;
    if ((d = bitnet__getenv("BITNET_CACHE_DIR")) != NULL) snprintf(out, cap, "%s", d);
    else if ((d = bitnet__getenv("XDG_CACHE_HOME")) != NULL) snprintf(out, cap, "%s/bitnet", d);
    else if ((d = bitnet__getenv("HOME")) != NULL) snprintf(out, cap, "%s/.cache/bitnet", d);
    else return 0;
    bitnet__mkdirs(out);
    return 1;
}

/* An entry: magic, key, payload size, payload hash (8 bytes each), then the payload. Anything
   that does not check out is a miss, never an error. Returns a bitnet__malloc'd payload or NULL. */
#define BITNET__JIT_MAGIC "BNJIT001"
static unsigned char *bitnet__cache_read(const char *path, uint64_t key, size_t *bytes) {
    unsigned char hdr[32], *buf = NULL;
    uint64_t k, size, hash;
    const char *bad = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        bitnet__log(BITNET_LOG_DEBUG, "JIT cache miss: %s", path);
        return NULL;
    }
    if (fread(hdr, 1, 32, f) != 32 || memcmp(hdr, BITNET__JIT_MAGIC, 8) != 0) bad = "bad header";
    else {
        memcpy(&k, hdr + 8, 8);
        memcpy(&size, hdr + 16, 8);
        memcpy(&hash, hdr + 24, 8);
        if (k != key) bad = "key mismatch";
        else if (size == 0 || size > ((uint64_t)1 << 30)) bad = "bad size";
        else if ((buf = (unsigned char *)bitnet__malloc((size_t)size)) == NULL) bad = "no memory";
        else if (fread(buf, 1, (size_t)size, f) != size) bad = "truncated";
        else if (fgetc(f) != EOF) bad = "trailing bytes";
        else if (bitnet__fnv(BITNET__FNV_INIT, buf, (size_t)size) != hash) bad = "checksum mismatch";
    }
    fclose(f);
    if (bad) {
        bitnet__log(BITNET_LOG_INFO, "JIT cache: ignoring %s (%s)", path, bad);
        bitnet__free(buf);
        return NULL;
    }
    *bytes = (size_t)size;
    return buf;
}

/* Written to a temporary file and renamed, so readers never see half an entry. Failing to
   write (read-only folder, full disk) is logged and otherwise ignored. */
static void bitnet__cache_write(const char *path, uint64_t key, const unsigned char *img, size_t n) {
    static unsigned seq;
    unsigned char hdr[32];
    uint64_t size = n, hash = bitnet__fnv(BITNET__FNV_INIT, img, n);
    char tmp[640];
    FILE *f;
    int ok;
    bitnet__mutex_lock(&bitnet__nvrtc_lock);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)BITNET__GETPID(), seq++);
    bitnet__mutex_unlock(&bitnet__nvrtc_lock);
    if ((f = fopen(tmp, "wb")) == NULL) {
        bitnet__log(BITNET_LOG_INFO, "JIT cache: cannot write %s (%s); continuing without caching", tmp, strerror(errno));
        return;
    }
    memcpy(hdr, BITNET__JIT_MAGIC, 8);
    memcpy(hdr + 8, &key, 8);
    memcpy(hdr + 16, &size, 8);
    memcpy(hdr + 24, &hash, 8);
    ok = fwrite(hdr, 1, 32, f) == 32 && fwrite(img, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        bitnet__log(BITNET_LOG_INFO, "JIT cache: cannot store %s (%s); continuing without caching", path, strerror(errno));
        remove(tmp);
    }
}

/* ---- compiling ----------------------------------------------------------------------------- */
typedef struct bitnet__jit_req {
    const char *name;                   /* module name, for messages and the cache file */
    const char *prefix, *source, *options; /* prefix: the shared types, or NULL */
    const char *target;                 /* "sm_90" or "compute_75" */
    int cubin, minimal, driver_version, use_cache;
    int cc;                             /* picks the NVRTC (bitnet__nvrtc_for) */
} bitnet__jit_req;

/* Compiles one module, or reads it from the cache. *image is bitnet__malloc'd. */
static bitnet_result bitnet__jit_build(const bitnet__jit_req *q, unsigned char **image, size_t *bytes,
                                       bitnet_gpu_jit_info *info) {
    const bitnet__nvrtc_lib *N = bitnet__nvrtc_for(q->cc);
    const char *argv[64];
    char arch_opt[48], dir[512], *opts = NULL, *src = NULL, *log = NULL, *tok;
    int argc = 0, i, kv = BITNET_CUDA_KERNELS_VERSION;
    size_t plen = q->prefix ? strlen(q->prefix) : 0, slen = strlen(q->source), n = 0, total;
    uint64_t key = BITNET__FNV_INIT;
    bitnet__nvrtcProgram prog = NULL;
    bitnet__nvrtcResult rr;
    bitnet_result res = BITNET_OK;
    unsigned char *img = NULL;
    double t0 = bitnet__now();
    memset(info, 0, sizeof *info);
    snprintf(info->target, sizeof info->target, "%s", q->target);
    info->cubin = q->cubin;
    *image = NULL;
    *bytes = 0;
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", q->target);
    argv[argc++] = arch_opt;
    argv[argc++] = "-default-device";
    if (q->minimal && N->version >= 12040) argv[argc++] = "--minimal"; /* faster; our kernels include nothing */
    /* The key covers everything that changes the binary. */
    key = bitnet__fnv_str(key, BITNET_VERSION_STRING);
    key = bitnet__fnv(key, &kv, sizeof kv);
    key = bitnet__fnv_str(key, q->prefix);
    key = bitnet__fnv_str(key, q->source);
    key = bitnet__fnv_str(key, q->options);
    for (i = 0; i < argc; i++) key = bitnet__fnv_str(key, argv[i]);
    key = bitnet__fnv(key, &N->version, sizeof N->version);
    key = bitnet__fnv(key, &q->driver_version, sizeof q->driver_version);
    if (q->use_cache && bitnet__cache_dir(dir, sizeof dir)) {
        snprintf(info->cache_file, sizeof info->cache_file, "%.400s/%.24s-%.24s-%016llx.bin", dir, q->name, q->target,
                 (unsigned long long)key);
        if ((img = bitnet__cache_read(info->cache_file, key, &n)) != NULL) {
            info->from_cache = 1;
            goto done;
        }
    }
    bitnet__fault_init();
    if (bitnet__fault.nvrtc)
        return bitnet__err(BITNET_ERR_JIT, "injected NVRTC failure (BITNET_FAULT nvrtc) compiling module '%s' for %s",
                           q->name, q->target);
    /* The user's options, split on blanks (no quoting). */
    if (q->options && *q->options) {
        if ((opts = (char *)bitnet__malloc(strlen(q->options) + 1)) == NULL) return BITNET_ERR_OUT_OF_MEMORY;
        strcpy(opts, q->options);
        for (tok = strtok(opts, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
            if (argc == 64) {
                bitnet__free(opts);
                return bitnet__err(BITNET_ERR_INVALID_ARG, "module '%s': more than 60 NVRTC options", q->name);
            }
            argv[argc++] = tok;
        }
    }
    if (!bitnet__add_size(plen, slen + 1, &total) || (src = (char *)bitnet__malloc(total)) == NULL) {
        bitnet__free(opts);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    if (plen) memcpy(src, q->prefix, plen);
    memcpy(src + plen, q->source, slen + 1);
    bitnet_gpu_nvtx_push("bitnet: NVRTC compile");
    {
        char fname[48];
        snprintf(fname, sizeof fname, "bitnet_%s.cu", q->name);
        rr = N->fn.nvrtcCreateProgram(&prog, src, fname, 0, NULL, NULL);
    }
    if (rr != 0) {
        res = bitnet__err(BITNET_ERR_JIT, "nvrtcCreateProgram('%s'): %s", q->name, N->fn.nvrtcGetErrorString(rr));
        goto out;
    }
    rr = N->fn.nvrtcCompileProgram(prog, argc, argv);
    if (rr != 0) {
        size_t ln = 0;
        if (N->fn.nvrtcGetProgramLogSize(prog, &ln) == 0 && ln > 0 && (log = (char *)bitnet__malloc(ln + 1)) != NULL) {
            if (N->fn.nvrtcGetProgramLog(prog, log) != 0) log[0] = 0;
            log[ln] = 0;
        }
        res = bitnet__err(BITNET_ERR_JIT, "NVRTC %d.%d could not compile module '%s' for %s (%s):\n%.3000s",
                          N->version / 1000, N->version % 1000 / 10, q->name, q->target, N->fn.nvrtcGetErrorString(rr),
                          log ? log : "(no log)");
        goto out;
    }
    rr = q->cubin ? N->fn.nvrtcGetCUBINSize(prog, &n) : N->fn.nvrtcGetPTXSize(prog, &n);
    if (rr == 0 && n > 0 && (img = (unsigned char *)bitnet__malloc(n)) != NULL)
        rr = q->cubin ? N->fn.nvrtcGetCUBIN(prog, (char *)img) : N->fn.nvrtcGetPTX(prog, (char *)img);
    if (rr != 0 || n == 0 || !img) {
        res = img || rr != 0 ? bitnet__err(BITNET_ERR_JIT, "NVRTC produced no %s for module '%s' (%s)", q->cubin ? "cubin" : "PTX",
                                           q->name, N->fn.nvrtcGetErrorString(rr))
                             : BITNET_ERR_OUT_OF_MEMORY;
        bitnet__free(img);
        img = NULL;
        goto out;
    }
    if (info->cache_file[0]) bitnet__cache_write(info->cache_file, key, img, n);
out:
    if (prog) N->fn.nvrtcDestroyProgram(&prog);
    bitnet_gpu_nvtx_pop();
    bitnet__free(log);
    bitnet__free(src);
    bitnet__free(opts);
    if (res != BITNET_OK) return res;
done:
    info->bytes = n;
    info->binary_hash = bitnet__fnv(BITNET__FNV_INIT, img, n);
    info->ms = (bitnet__now() - t0) * 1e3;
    *image = img;
    *bytes = n;
    return BITNET_OK;
}

static bitnet_result bitnet__jit_compile_only(const char *name, const char *prefix, const char *source, const char *options,
                                              const char *arch, int min_sm, int minimal, int use_cache,
                                              bitnet_gpu_jit_info *info) {
    int cc = 0, ptx = 0, cubin;
    char suffix = 0, target[32];
    bitnet__jit_req q;
    unsigned char *img;
    size_t n;
    BITNET__CHECK_PTR(info);
    memset(info, 0, sizeof *info);
    BITNET__TRY(bitnet__parse_arch(arch, &cc, &suffix, &ptx));
    BITNET__TRY(bitnet__nvrtc_load());
    if (cc < min_sm) return bitnet__err(BITNET_ERR_UNSUPPORTED, "module '%s' needs sm_%d or newer, not %s", name, min_sm, arch);
    BITNET__TRY(bitnet__jit_pick(cc, suffix, ptx, target, sizeof target, &cubin));
    memset(&q, 0, sizeof q);
    q.name = name, q.prefix = prefix, q.source = source, q.options = options;
    q.target = target, q.cubin = cubin, q.minimal = minimal, q.use_cache = use_cache, q.cc = cc;
    q.driver_version = 0; /* no driver here: a key of its own */
    BITNET__TRY(bitnet__jit_build(&q, &img, &n, info));
    bitnet__free(img);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_jit_builtin(int module, const char *arch, int use_cache, bitnet_gpu_jit_info *info) {
    if (module < 0 || module >= BITNET__N_BUILTINS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_jit_builtin: module %d of %d", module, BITNET__N_BUILTINS);
    return bitnet__jit_compile_only(bitnet__builtins[module].name, bitnet_cuda_src_common, bitnet__builtins[module].source, "",
                                    arch, bitnet__builtins[module].min_sm, 1, use_cache, info);
}

BITNET_API bitnet_result bitnet_gpu_jit_source(const char *source, const char *options, const char *arch, int use_cache,
                                               bitnet_gpu_jit_info *info) {
    BITNET__CHECK_PTR(source);
    if (!*source) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_jit_source: empty source");
    return bitnet__jit_compile_only("custom", NULL, source, options, arch, 0, 0, use_cache, info);
}

/* ---- modules on a device ------------------------------------------------------------------ */
static bitnet_result bitnet__module_create(bitnet__gpu_dev *dv, bitnet_gpu *owner, const char *name, const char *prefix,
                                           const char *source, const char *options, int minimal, bitnet_gpu_module **out) {
    bitnet__jit_req q;
    bitnet_gpu_jit_info info;
    unsigned char *img;
    size_t n;
    char log[2048] = "", target[32];
    int opts[2] = {BITNET__CU_JIT_ERROR_LOG, BITNET__CU_JIT_ERROR_LOG_SIZE}, cubin = dv->cubin;
    void *vals[2];
    bitnet__CUmodule cm = NULL;
    bitnet__CUresult r;
    bitnet_gpu_module *m;
    *out = NULL;
    BITNET__TRY(bitnet__nvrtc_load());
    snprintf(target, sizeof target, "%s", dv->target);
    if (!target[0]) BITNET__TRY(bitnet__jit_pick(dv->cc, 0, 0, target, sizeof target, &cubin));
    memset(&q, 0, sizeof q);
    q.name = name, q.prefix = prefix, q.source = source, q.options = options;
    q.target = target, q.cubin = cubin, q.minimal = minimal, q.use_cache = 1, q.cc = dv->cc;
    q.driver_version = bitnet__cuda.driver_version;
    BITNET__TRY(bitnet__jit_build(&q, &img, &n, &info));
    bitnet__fault_init();
    if (bitnet__fault.module_load) {
        bitnet__free(img);
        return bitnet__err(BITNET_ERR_MODULE_LOAD, "injected module load failure (BITNET_FAULT module_load) for '%s'", name);
    }
    vals[0] = log;
    vals[1] = (void *)(uintptr_t)sizeof log;
    if (bitnet__ctx_push(dv->ctx) != BITNET_OK) {
        bitnet__free(img);
        return BITNET_ERR_CUDA;
    }
    r = bitnet__cuda.cu.cuModuleLoadDataEx(&cm, img, 2, opts, vals);
    bitnet__ctx_pop();
    bitnet__free(img);
    if (r != 0) {
        char d[256];
        log[sizeof log - 1] = 0;
        return bitnet__err(BITNET_ERR_MODULE_LOAD, "cuModuleLoadDataEx('%s', %s %s of %zu bytes): %s\n%s", name, target,
                           cubin ? "cubin" : "PTX", n, bitnet__cu_describe(r, d, sizeof d), log);
    }
    m = (bitnet_gpu_module *)bitnet__calloc(1, sizeof *m);
    if (!m) {
        if (bitnet__ctx_push(dv->ctx) == BITNET_OK) {
            bitnet__cuda.cu.cuModuleUnload(cm);
            bitnet__ctx_pop();
        }
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    m->dev = dv;
    m->owner = owner;
    m->mod = cm;
    m->jit = info;
    snprintf(m->name, sizeof m->name, "%s", name);
    *out = m;
    return BITNET_OK;
}

static void bitnet__module_unload(bitnet_gpu_module *m) {
    bitnet_gpu_kernel *k, *next;
    if (m->owner) { /* unlink from the handle's list */
        bitnet_gpu_module **p;
        bitnet__mutex_lock(&m->owner->lock);
        for (p = &m->owner->modules; *p; p = &(*p)->next)
            if (*p == m) {
                *p = m->next;
                break;
            }
        bitnet__mutex_unlock(&m->owner->lock);
    }
    if (bitnet__ctx_push(m->dev->ctx) == BITNET_OK) {
        bitnet__cuda.cu.cuModuleUnload(m->mod);
        bitnet__ctx_pop();
    }
    for (k = m->kernels; k; k = next) {
        next = k->next;
        bitnet__free(k);
    }
    bitnet__free(m);
}

BITNET_API bitnet_result bitnet_gpu_module_load(bitnet_gpu *gpu, const char *source, const char *options,
                                                bitnet_gpu_module **out) {
    bitnet_gpu_module *m;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(source);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (!*source) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_module_load: empty source");
    BITNET__TRY(bitnet__module_create(gpu->dev, gpu, "custom", NULL, source, options, 0, &m));
    bitnet__mutex_lock(&gpu->lock);
    m->next = gpu->modules;
    gpu->modules = m;
    bitnet__mutex_unlock(&gpu->lock);
    *out = m;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_module_jit_info(const bitnet_gpu_module *mod, bitnet_gpu_jit_info *out) {
    BITNET__CHECK_PTR(mod);
    BITNET__CHECK_PTR(out);
    *out = mod->jit;
    return BITNET_OK;
}

/* Built-in modules belong to the device and stay until its last handle closes. */
BITNET_API void bitnet_gpu_module_free(bitnet_gpu_module *mod) {
    if (mod && mod->owner) bitnet__module_unload(mod);
}

BITNET_API bitnet_result bitnet_gpu_kernel_get(bitnet_gpu_module *mod, const char *name, bitnet_gpu_kernel **out) {
    bitnet_gpu_kernel *k;
    bitnet__CUfunction fn = NULL;
    bitnet__CUresult r;
    BITNET__CHECK_PTR(mod);
    BITNET__CHECK_PTR(name);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    bitnet__mutex_lock(&mod->dev->lock);
    for (k = mod->kernels; k; k = k->next)
        if (strcmp(k->name, name) == 0) break;
    if (!k) {
        if (strlen(name) >= sizeof k->name) {
            bitnet__mutex_unlock(&mod->dev->lock);
            return bitnet__err(BITNET_ERR_INVALID_ARG, "kernel name '%.40s...' is longer than %d bytes", name, 63);
        }
        r = 1;
        if (bitnet__ctx_push(mod->dev->ctx) == BITNET_OK) {
            r = bitnet__cuda.cu.cuModuleGetFunction(&fn, mod->mod, name);
            bitnet__ctx_pop();
        }
        if (r != 0 || (k = (bitnet_gpu_kernel *)bitnet__calloc(1, sizeof *k)) == NULL) {
            bitnet__mutex_unlock(&mod->dev->lock);
            if (r == 0) return BITNET_ERR_OUT_OF_MEMORY;
            return bitnet__err(BITNET_ERR_KERNEL_NOT_FOUND, "kernel '%s' is not in module '%s' (kernels must be "
                               "extern \"C\" __global__)", name, mod->name);
        }
        k->mod = mod;
        k->fn = fn;
        k->kid = bitnet__kname_id(name);
        snprintf(k->name, sizeof k->name, "%s", name);
        k->next = mod->kernels;
        mod->kernels = k;
    }
    bitnet__mutex_unlock(&mod->dev->lock);
    *out = k;
    return BITNET_OK;
}

static bitnet_result bitnet__builtin_module(bitnet__gpu_dev *dv, int i, bitnet_gpu_module **out) {
    bitnet_result res = BITNET_OK;
    bitnet__mutex_lock(&dv->lock);
    if (!dv->builtin[i]) {
        if (dv->cc < bitnet__builtins[i].min_sm)
            res = bitnet__err(BITNET_ERR_UNSUPPORTED, "module '%s' needs sm_%d or newer; device %d is sm_%d",
                              bitnet__builtins[i].name, bitnet__builtins[i].min_sm, dv->ordinal, dv->cc);
        else
            res = bitnet__module_create(dv, NULL, bitnet__builtins[i].name, bitnet_cuda_src_common, bitnet__builtins[i].source,
                                        "", 1, &dv->builtin[i]);
    }
    *out = dv->builtin[i];
    bitnet__mutex_unlock(&dv->lock);
    return res;
}

BITNET_API bitnet_result bitnet_gpu_builtin_kernel(bitnet_gpu *gpu, const char *name, bitnet_gpu_kernel **out) {
    const bitnet__builtin_fn *f;
    bitnet_gpu_module *m;
    int i;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(name);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    for (f = bitnet__builtin_fns; f->kernel; f++)
        if (strcmp(f->kernel, name) == 0) break;
    if (!f->kernel) return bitnet__err(BITNET_ERR_KERNEL_NOT_FOUND, "'%s' is not listed in BITNET_CUDA_KERNELS", name);
    for (i = 0; i < BITNET__N_BUILTINS; i++)
        if (strcmp(bitnet__builtins[i].name, f->module) == 0) break;
    if (i == BITNET__N_BUILTINS)
        return bitnet__err(BITNET_ERR_KERNEL_NOT_FOUND, "kernel '%s' names module '%s', which is not in BITNET_CUDA_MODULES",
                           name, f->module);
    BITNET__TRY(bitnet__builtin_module(gpu->dev, i, &m));
    return bitnet_gpu_kernel_get(m, name, out);
}

BITNET_API bitnet_result bitnet_gpu_builtin_jit_info(bitnet_gpu *gpu, int i, bitnet_gpu_jit_info *out) {
    bitnet_gpu_module *m;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(out);
    if (i < 0 || i >= BITNET__N_BUILTINS) return bitnet__err(BITNET_ERR_INVALID_ARG, "built-in module %d of %d", i, BITNET__N_BUILTINS);
    BITNET__TRY(bitnet__builtin_module(gpu->dev, i, &m));
    *out = m->jit;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_builtin_load_all(bitnet_gpu *gpu) {
    const bitnet__builtin_fn *f;
    bitnet_gpu_kernel *k;
    int i;
    BITNET__CHECK_GPU(gpu);
    for (i = 0; i < BITNET__N_BUILTINS; i++) {
        bitnet_gpu_module *m;
        if (gpu->dev->cc >= bitnet__builtins[i].min_sm) BITNET__TRY(bitnet__builtin_module(gpu->dev, i, &m));
    }
    for (f = bitnet__builtin_fns; f->kernel; f++) { /* every listed kernel must be there */
        for (i = 0; i < BITNET__N_BUILTINS; i++)
            if (strcmp(bitnet__builtins[i].name, f->module) == 0) break;
        if (i < BITNET__N_BUILTINS && gpu->dev->cc < bitnet__builtins[i].min_sm) continue;
        BITNET__TRY(bitnet_gpu_builtin_kernel(gpu, f->kernel, &k));
    }
    return BITNET_OK;
}

/* >>gpu-pool ================================================================================== */

/* Device memory: each handle keeps freed buffers by size class and hands them out again on its
   own stream, so a reused buffer is always ordered after the work that used it before. */

/* ---- the process-wide cap (BITNET_MEMORY_LIMIT) -------------------------------------------- */
static struct {
    int init;
    bitnet_result status;
    char msg[256];
    uint64_t limit, reserved;           /* bytes: the cap (0 = none) and what all pools hold */
} bitnet__mem;
static bitnet__mutex bitnet__mem_lock = BITNET__MUTEX_INIT;

/* "512MB", "1.5GiB", "4096": K, M, G, T are powers of 1024 (an optional "i" and "B" are ignored). */
static int bitnet__parse_bytes(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end), mul = 1;
    if (end == s || !(v >= 0)) return 0;
    while (*end == ' ') end++;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; break;
    case 'm': case 'M': mul = 1048576.0; break;
    case 'g': case 'G': mul = 1073741824.0; break;
    case 't': case 'T': mul = 1099511627776.0; break;
    default: break;
    }
    if (mul > 1) {
        end++;
        if (*end == 'i' || *end == 'I') end++;
    }
    if (*end == 'b' || *end == 'B') end++;
    if (*end || v * mul >= 1.8e19) return 0;
    *out = (uint64_t)(v * mul);
    return 1;
}

static bitnet_result bitnet__mem_limit_init(void) {
    bitnet__mutex_lock(&bitnet__mem_lock);
    if (!bitnet__mem.init) {
        const char *e = bitnet__getenv("BITNET_MEMORY_LIMIT");
        bitnet__mem.init = 1;
        if (e && !bitnet__parse_bytes(e, &bitnet__mem.limit)) {
            bitnet__mem.status = BITNET_ERR_INVALID_ARG;
            snprintf(bitnet__mem.msg, sizeof bitnet__mem.msg, "BITNET_MEMORY_LIMIT='%s' is not a size like 512MB or 2GiB", e);
        }
    }
    bitnet__mutex_unlock(&bitnet__mem_lock);
    if (bitnet__mem.status != BITNET_OK) return bitnet__err(bitnet__mem.status, "%s", bitnet__mem.msg);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_set_memory_limit(uint64_t bytes) {
    bitnet__mutex_lock(&bitnet__mem_lock);
    bitnet__mem.init = 1;
    bitnet__mem.status = BITNET_OK;
    bitnet__mem.limit = bytes;
    bitnet__mutex_unlock(&bitnet__mem_lock);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_memory_limit(uint64_t *bytes) {
    BITNET__CHECK_PTR(bytes);
    *bytes = 0;
    BITNET__TRY(bitnet__mem_limit_init());
    *bytes = bitnet__mem.limit;
    return BITNET_OK;
}

/* ---- the pool ------------------------------------------------------------------------------- */
#define BITNET__BT_MAX 16
typedef struct bitnet__live {           /* a live allocation; ptr 0 marks an empty slot */
    bitnet_devptr ptr;
    size_t bytes, size;                 /* asked for, and its size class */
    double t;
    int n_bt;
    void *bt[BITNET__BT_MAX];
} bitnet__live;
typedef struct bitnet__cached { bitnet_devptr ptr; size_t size; double t; } bitnet__cached;
struct bitnet__pool {
    bitnet_gpu_pool_config cfg;
    int backtrace;
    bitnet__live *live;                 /* open addressing by address, linear probing */
    size_t live_cap, live_n;
    bitnet__cached *cache;
    size_t cache_n, cache_cap;
    bitnet_gpu_pool_stats st;
    double last_cleanup;
};

/* Four classes per power of two above 256 bytes (at most 25% slack); whole 2 MiB above 256 MiB.
   0 when n is too large to round. */
static size_t bitnet__size_class(size_t n) {
    size_t p = 512, step;
    if (n <= 256) return 256;
    if (n > ((size_t)256 << 20)) {
        size_t g = (size_t)2 << 20;
        return n > SIZE_MAX - g ? 0 : (n + g - 1) / g * g;
    }
    while (p < n) p <<= 1;
    step = p / 8; /* p/2 < n <= p: classes p/2 + k*p/8 */
    return (n + step - 1) / step * step;
}

static size_t bitnet__live_slot(size_t cap, bitnet_devptr p) {
    return (size_t)(((p >> 8) * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}
static size_t bitnet__live_find(const struct bitnet__pool *P, bitnet_devptr p) {
    size_t i = bitnet__live_slot(P->live_cap, p);
    while (P->live[i].ptr) {
        if (P->live[i].ptr == p) return i;
        i = (i + 1) & (P->live_cap - 1);
    }
    return (size_t)-1;
}
static int bitnet__live_insert(struct bitnet__pool *P, const bitnet__live *e) {
    size_t i;
    if ((P->live_n + 1) * 2 > P->live_cap) { /* grow at half full */
        size_t cap = P->live_cap * 2, j;
        bitnet__live *old = P->live, *nt = (bitnet__live *)bitnet__calloc(cap, sizeof *nt);
        if (!nt) return 0;
        for (j = 0; j < P->live_cap; j++)
            if (old[j].ptr) {
                i = bitnet__live_slot(cap, old[j].ptr);
                while (nt[i].ptr) i = (i + 1) & (cap - 1);
                nt[i] = old[j];
            }
        P->live = nt;
        P->live_cap = cap;
        bitnet__free(old);
    }
    i = bitnet__live_slot(P->live_cap, e->ptr);
    while (P->live[i].ptr) i = (i + 1) & (P->live_cap - 1);
    P->live[i] = *e;
    P->live_n++;
    return 1;
}
static void bitnet__live_remove(struct bitnet__pool *P, size_t i) { /* backward-shift deletion */
    size_t mask = P->live_cap - 1, j = i;
    for (;;) {
        size_t k;
        j = (j + 1) & mask;
        if (!P->live[j].ptr) break;
        k = bitnet__live_slot(P->live_cap, P->live[j].ptr);
        /* entry j may move to i unless its home slot k lies cyclically in (i, j] */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
        P->live[i] = P->live[j];
        i = j;
    }
    P->live[i].ptr = 0;
    P->live_n--;
}

static void bitnet__pool_defaults(bitnet_gpu_pool_config *c) {
    if (!c->max_cached_bytes) c->max_cached_bytes = (uint64_t)1 << 30;
    if (!c->max_cached_per_class) c->max_cached_per_class = 16;
    if (!c->tracking) c->tracking = 1;
    if (c->cleanup_interval_s == 0) c->cleanup_interval_s = 60;
}

static bitnet_result bitnet__pool_create(bitnet_gpu *gpu) {
    struct bitnet__pool *P = (struct bitnet__pool *)bitnet__calloc(1, sizeof *P);
    const char *bt = bitnet__getenv("BITNET_POOL_BACKTRACE");
    if (!P) return BITNET_ERR_OUT_OF_MEMORY;
    P->live_cap = 64;
    if ((P->live = (bitnet__live *)bitnet__calloc(P->live_cap, sizeof *P->live)) == NULL) {
        bitnet__free(P);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    bitnet__pool_defaults(&P->cfg);
#if defined(BITNET_DEBUG)
    P->backtrace = 1;
#endif
    if (bt) P->backtrace = strcmp(bt, "0") != 0;
    P->st.device = gpu->dev->ordinal;
    P->last_cleanup = bitnet__now();
    gpu->pool = P;
    return BITNET_OK;
}

/* Gives one block back to the driver (handle lock held, context current, stream idle). */
static void bitnet__dev_release_block(bitnet_gpu *gpu, bitnet_devptr p, size_t size) {
    bitnet__cuda.cu.cuMemFree(p);
    gpu->pool->st.reserved -= size;
    bitnet__mutex_lock(&bitnet__mem_lock);
    bitnet__mem.reserved -= size;
    bitnet__mutex_unlock(&bitnet__mem_lock);
}

/* Frees cached blocks unused for at least min_age seconds (handle lock held, context current). */
static void bitnet__pool_release(bitnet_gpu *gpu, double min_age) {
    struct bitnet__pool *P = gpu->pool;
    double now = bitnet__now();
    size_t i, kept = 0;
    int synced = 0;
    for (i = 0; i < P->cache_n; i++) {
        if (now - P->cache[i].t < min_age) {
            P->cache[kept++] = P->cache[i];
            continue;
        }
        if (!synced) { /* queued work may still use the block */
            bitnet__cuda.cu.cuStreamSynchronize(gpu->stream);
            synced = 1;
        }
        P->st.cached -= P->cache[i].size;
        bitnet__dev_release_block(gpu, P->cache[i].ptr, P->cache[i].size);
    }
    P->cache_n = kept;
}

static void bitnet__pool_tick(bitnet_gpu *gpu) {
    struct bitnet__pool *P = gpu->pool;
    double now = bitnet__now();
    if (P->cfg.cleanup_interval_s > 0 && now - P->last_cleanup >= P->cfg.cleanup_interval_s) {
        P->last_cleanup = now;
        bitnet__pool_release(gpu, P->cfg.cleanup_interval_s);
    }
}

/* A new block from the driver, within BITNET_MEMORY_LIMIT (handle lock held, context current). */
static bitnet_result bitnet__dev_malloc(bitnet_gpu *gpu, size_t size, bitnet_devptr *p) {
    struct bitnet__pool *P = gpu->pool;
    bitnet__CUresult r;
    int pass;
    for (pass = 0;; pass++) {
        int over;
        uint64_t used, limit;
        bitnet__mutex_lock(&bitnet__mem_lock);
        limit = bitnet__mem.limit;
        used = bitnet__mem.reserved;
        over = limit && (size > limit || used > limit - size);
        if (!over) bitnet__mem.reserved += size;
        bitnet__mutex_unlock(&bitnet__mem_lock);
        if (!over) break;
        if (pass == 0 && P->cache_n) {
            bitnet__pool_release(gpu, 0);
            continue;
        }
        return bitnet__err(BITNET_ERR_DEVICE_OOM, "device memory limit reached (BITNET_MEMORY_LIMIT %llu bytes): %zu bytes asked, "
                           "%llu in use by all pools", (unsigned long long)limit, size, (unsigned long long)used);
    }
    r = bitnet__cuda.cu.cuMemAlloc(p, size);
    if (r == BITNET__CU_ERR_OOM && P->cache_n) {
        bitnet__pool_release(gpu, 0);
        r = bitnet__cuda.cu.cuMemAlloc(p, size);
    }
    if (r != 0) {
        size_t free_b = 0, total = 0;
        char d[256];
        bitnet__mutex_lock(&bitnet__mem_lock);
        bitnet__mem.reserved -= size;
        bitnet__mutex_unlock(&bitnet__mem_lock);
        bitnet__cuda.cu.cuMemGetInfo(&free_b, &total);
        return bitnet__err(r == BITNET__CU_ERR_OOM ? BITNET_ERR_DEVICE_OOM : BITNET_ERR_CUDA,
                           "cuMemAlloc(%zu bytes) on device %d: %s (%zu of %zu bytes free)", size, gpu->dev->ordinal,
                           bitnet__cu_describe(r, d, sizeof d), free_b, total);
    }
    P->st.reserved += size;
    if (P->st.reserved > P->st.reserved_peak) P->st.reserved_peak = P->st.reserved;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_alloc(bitnet_gpu *gpu, size_t bytes, bitnet_devptr *out) {
    struct bitnet__pool *P;
    bitnet__live e;
    bitnet_result res = BITNET_OK;
    size_t i, size;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(out);
    *out = 0;
    if (bytes == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_alloc: 0 bytes");
    if ((size = bitnet__size_class(bytes)) == 0) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gpu_alloc: %zu bytes", bytes);
    if (bitnet__fault_hit('d'))
        return bitnet__err(BITNET_ERR_DEVICE_OOM, "injected device allocation failure (BITNET_FAULT device_alloc:%ld)",
                           bitnet__fault.device_alloc_n);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    P = gpu->pool;
    bitnet__pool_tick(gpu);
    memset(&e, 0, sizeof e);
    for (i = 0; i < P->cache_n; i++)
        if (P->cache[i].size == size) break;
    if (i < P->cache_n) {
        e.ptr = P->cache[i].ptr;
        P->cache[i] = P->cache[--P->cache_n];
        P->st.cached -= size;
        P->st.cache_hits++;
    } else {
        P->st.cache_misses++;
        res = bitnet__dev_malloc(gpu, size, &e.ptr);
    }
    if (res == BITNET_OK) {
        e.bytes = bytes;
        e.size = size;
        if (P->cfg.tracking > 0) {
            e.t = bitnet__now();
#if defined(BITNET__HAVE_BACKTRACE)
            if (P->backtrace) e.n_bt = backtrace(e.bt, BITNET__BT_MAX);
#endif
        }
        if (!bitnet__live_insert(P, &e)) {
            bitnet__cuda.cu.cuStreamSynchronize(gpu->stream);
            bitnet__dev_release_block(gpu, e.ptr, size);
            res = BITNET_ERR_OUT_OF_MEMORY;
        } else {
            P->st.allocations++;
            P->st.total_allocated += bytes;
            P->st.current += bytes;
            if (P->st.current > P->st.peak) P->st.peak = P->st.current;
            *out = e.ptr;
        }
    }
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return res;
}

BITNET_API bitnet_result bitnet_gpu_free(bitnet_gpu *gpu, bitnet_devptr ptr) {
    struct bitnet__pool *P;
    bitnet__live e;
    size_t i, same = 0;
    BITNET__CHECK_GPU(gpu);
    if (!ptr) return BITNET_OK;
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    P = gpu->pool;
    if ((i = bitnet__live_find(P, ptr)) == (size_t)-1) {
        bitnet__mutex_unlock(&gpu->lock);
        bitnet__ctx_pop();
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_free: 0x%llx is not a live allocation of this handle", ptr);
    }
    e = P->live[i];
    bitnet__live_remove(P, i);
    P->st.frees++;
    P->st.current -= e.bytes;
    for (i = 0; i < P->cache_n; i++) same += P->cache[i].size == e.size;
    if (same < (size_t)P->cfg.max_cached_per_class && P->st.cached + e.size <= P->cfg.max_cached_bytes) {
        if (P->cache_n == P->cache_cap) {
            size_t cap = P->cache_cap ? P->cache_cap * 2 : 32;
            bitnet__cached *nc = (bitnet__cached *)bitnet__malloc(cap * sizeof *nc);
            if (nc) {
                if (P->cache_n) memcpy(nc, P->cache, P->cache_n * sizeof *nc);
                bitnet__free(P->cache);
                P->cache = nc;
                P->cache_cap = cap;
            }
        }
        if (P->cache_n < P->cache_cap) {
            P->cache[P->cache_n].ptr = e.ptr;
            P->cache[P->cache_n].size = e.size;
            P->cache[P->cache_n].t = bitnet__now();
            P->cache_n++;
            P->st.cached += e.size;
            e.ptr = 0;
        }
    }
    if (e.ptr) { /* not kept: wait for queued work that may use it, then free */
        bitnet__cuda.cu.cuStreamSynchronize(gpu->stream);
        bitnet__dev_release_block(gpu, e.ptr, e.size);
    }
    bitnet__pool_tick(gpu);
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_pool_configure(bitnet_gpu *gpu, const bitnet_gpu_pool_config *cfg) {
    bitnet_gpu_pool_config c;
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(cfg);
    c = *cfg;
    if (c.max_cached_per_class < 0 || c.tracking < -1 || c.tracking > 1 || !(c.cleanup_interval_s >= 0))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_pool_configure: max_cached_per_class %d, tracking %d, "
                           "cleanup_interval_s %g (need >= 0, -1..1, >= 0)", c.max_cached_per_class, c.tracking,
                           c.cleanup_interval_s);
    bitnet__pool_defaults(&c);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    gpu->pool->cfg = c;
    if (gpu->pool->st.cached > c.max_cached_bytes) bitnet__pool_release(gpu, 0);
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_pool_stats_get(bitnet_gpu *gpu, bitnet_gpu_pool_stats *out) {
    BITNET__CHECK_GPU(gpu);
    BITNET__CHECK_PTR(out);
    bitnet__mutex_lock(&gpu->lock);
    *out = gpu->pool->st;
    bitnet__mutex_unlock(&gpu->lock);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_pool_trim(bitnet_gpu *gpu) {
    BITNET__CHECK_GPU(gpu);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    bitnet__mutex_lock(&gpu->lock);
    bitnet__pool_release(gpu, 0);
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return BITNET_OK;
}

/* The leak report (handle lock held). */
static size_t bitnet__pool_report(struct bitnet__pool *P, char *buf, size_t cap) {
    size_t i;
    double now = bitnet__now();
    if (buf && cap) buf[0] = 0;
    for (i = 0; i < P->live_cap && buf && cap; i++) {
        const bitnet__live *e = &P->live[i];
        if (!e->ptr) continue;
        if (e->t > 0) bitnet__strcatf(buf, cap, "0x%llx %zu bytes, age %.3f s\n", e->ptr, e->bytes, now - e->t);
        else bitnet__strcatf(buf, cap, "0x%llx %zu bytes\n", e->ptr, e->bytes);
#if defined(BITNET__HAVE_BACKTRACE)
        if (e->n_bt > 0) {
            char **sym = backtrace_symbols(e->bt, e->n_bt); /* libc's malloc: freed with free() */
            int f;
            for (f = 1; f < e->n_bt; f++) bitnet__strcatf(buf, cap, "    #%d %s\n", f - 1, sym ? sym[f] : "?");
            free(sym);
        }
#endif
    }
    return P->live_n;
}

BITNET_API bitnet_result bitnet_gpu_pool_leaks(bitnet_gpu *gpu, char *buf, size_t cap, size_t *n_live) {
    size_t n;
    BITNET__CHECK_GPU(gpu);
    bitnet__mutex_lock(&gpu->lock);
    n = bitnet__pool_report(gpu->pool, buf, cap);
    bitnet__mutex_unlock(&gpu->lock);
    if (n_live) *n_live = n;
    return BITNET_OK;
}

/* At close (context current, stream idle): report leaks through the logger, free everything. */
static void bitnet__pool_destroy(bitnet_gpu *gpu) {
    struct bitnet__pool *P = gpu->pool;
    size_t i;
    if (!P) return;
    if (P->live_n) {
        char report[2048];
        bitnet__pool_report(P, report, sizeof report);
        bitnet__log(BITNET_LOG_WARN, "bitnet_gpu_close: %zu device allocation(s) of device %d were never freed (freeing them "
                    "now):\n%s", P->live_n, gpu->dev->ordinal, report);
        for (i = 0; i < P->live_cap; i++)
            if (P->live[i].ptr) bitnet__dev_release_block(gpu, P->live[i].ptr, P->live[i].size);
    }
    bitnet__pool_release(gpu, 0);
    bitnet__free(P->live);
    bitnet__free(P->cache);
    bitnet__free(P);
    gpu->pool = NULL;
}

/* >>cuda-kernels ============================================================================== */

/* >>cuda-forward ============================================================================== */

/* The forward pass on the GPU, the same steps in the same order as bitnet__cpu_forward, each
   step a bitnet__gpu_<step> function. Weights (ternary in the T32 layout of the ternary module,
   the fp16 embedding and head), the fp16 KV cache and every activation stay on the device.
   - Decode (one token): one CUDA graph per session, captured at its first single-token step and
     replayed after; the token and its position are read from device memory, so the host does
     one 8-byte upload, one graph launch and no synchronisation inside the token. Five kernels a
     layer (the forward module in bitnet_cuda_kernels.h): RMSNorm + int8 quantization run in the
     prologue of each ternary GEMV, RoPE and the KV append in the attention kernel, residual adds
     and relu(gate)^2 * up in GEMV epilogues; the head kernel also leaves the argmax on the device.
   - Prefill (m >= 2 tokens, sm_80+): batches of up to n_batch tokens through
     bitnet_gpu_quantize_act and bitnet_gpu_ternary_matmul (int8 tensor cores), and this module's
     rope_kv and causal attention. Below sm_80 prompts run through the decode graph token by token.
   Ternary weights are uploaded with bitnet_gpu_ternary_upload (T32 layout; QKV fused with its
   three scales, gate||up interleaved), which both paths read.
   The model holds one bitnet_gpu handle for its weights; each session opens its own handle (its
   own stream and pool), so sessions on different threads never share a stream.
   Hooks for >>model: bitnet__gpu_model_init/free, bitnet__gpu_session_init/free,
   bitnet__gpu_forward (bitnet__cpu_forward's contract) and bitnet__gpu_last_argmax (greedy
   decoding without a logits download). */
/* TEMPORARY: the section compiles once the CPU forward (>>cpu-forward, BITNET__MAX_BATCH) and the
   GPU kernels' host API (>>api-gpu-kernels, BITNET_GPU_MAX_PARTS) are on main. */
#if !defined(BITNET_NO_CUDA) && defined(BITNET__MAX_BATCH) && defined(BITNET_GPU_MAX_PARTS)
#define BITNET__GPU_FORWARD 1

#define BITNET__GPU_ATT_CMIN 64       /* decode attention: positions per split, at least */
#define BITNET__GPU_ATT_SMAX 32       /* decode attention: splits per kv head, at most */
#define BITNET__GPU_PREFILL_MIN 2     /* tokens per call from which prefill takes the GEMM path */

typedef struct bitnet__gseg { int n; int end[8]; float scale[8]; } bitnet__gseg; /* the kernels' segments */

typedef struct bitnet__glayer {
    bitnet_gpu_ternary qkv, o, gu, down; /* wq||wk||wv, wo, w_gate||w_up (glu), w_down */
    bitnet_devptr attn_norm, attn_sub_norm, ffn_norm, ffn_sub_norm;
} bitnet__glayer;

typedef struct bitnet__gmodel {
    bitnet_gpu *gpu;                  /* owns the weights */
    bitnet_devptr mem;                /* embedding, head, norms */
    size_t bytes, ternary_bytes;
    bitnet_devptr emb, head, out_norm;
    bitnet__glayer *layers;
    int device, sm_count, cc;
    bitnet_gpu_kernel *embed, *gemv_store, *gemv_res, *gemv_glu, *attn, *head_k, *rope_kv, *attn_prefill;
} bitnet__gmodel;

typedef struct bitnet__gsession {
    bitnet_gpu *gpu;                  /* this session's stream and pool */
    bitnet_devptr mem;
    size_t bytes;
    bitnet_devptr kc, vc;             /* fp16 [n_layers][n_kv][n_ctx][head_dim] */
    bitnet_devptr rope;               /* the session's cos/sin table, [n_ctx][head_dim] */
    bitnet_devptr x, qkv, att, h;     /* fp32 [B][dim], [B][q+2kv], [B][q_dim], [B][ffn_dim] */
    bitnet_gpu_act a_dim, a_q, a_ff;  /* prefill: int8 activations of k = dim, q_dim, ffn_dim (one buffer) */
    bitnet_devptr logits;             /* fp32 [n_vocab] */
    bitnet_devptr part_o, part_ml;    /* decode attention splits: [n_heads][smax][hd], [n_heads][smax][2] */
    bitnet_devptr hv, hi;             /* head: each block's best value and index */
    bitnet_devptr ctr;                /* int [n_kv + 1]: attention (per kv head) and head counters (their last blocks reset them) */
    bitnet_devptr io;                 /* int [2]: the decode token and the position of a step */
    bitnet_devptr tok;                /* int [B]: prefill tokens */
    bitnet_devptr next;               /* int: the head's argmax */
    int B, smax, cmin, head_blocks, have_next;
    bitnet_gpu_graph *graph;          /* the decode step */
} bitnet__gsession;

/* ---- helpers ---------------------------------------------------------------------------------- */

static bitnet_result bitnet__gpu_launch(bitnet_gpu *g, bitnet_gpu_kernel *k, unsigned gx, unsigned gy, unsigned bx,
                                        unsigned by, unsigned smem, void **args) {
    unsigned grid[3], block[3];
    grid[0] = gx, grid[1] = gy, grid[2] = 1;
    block[0] = bx, block[1] = by, block[2] = 1;
    return bitnet_gpu_launch(g, k, grid, block, smem, args);
}

/* Carves one allocation into 256-byte aligned pieces; a first pass with base 0 sizes it. */
typedef struct bitnet__gcarve { bitnet_devptr base; size_t off; int overflow; } bitnet__gcarve;
static bitnet_devptr bitnet__gtake(bitnet__gcarve *c, size_t n1, size_t n2) {
    bitnet_devptr p = c->base + c->off;
    size_t n;
    if (!bitnet__mul_size(n1, n2, &n) || !bitnet__add_size(n, 255, &n) || !bitnet__add_size(c->off, n & ~(size_t)255, &c->off))
        c->overflow = 1;
    return p;
}

static bitnet__gseg bitnet__gsegs(const bitnet_gpu_ternary *w) {
    bitnet__gseg g;
    int i;
    memset(&g, 0, sizeof g);
    g.n = w->n_parts;
    for (i = 0; i < w->n_parts && i < 8; i++) g.end[i] = (int)w->part_end[i], g.scale[i] = w->part_scale[i];
    return g;
}

/* ---- model: weights to the device --------------------------------------------------------------- */

static void bitnet__gpu_model_free(bitnet_model *m) {
    bitnet__gmodel *g = (bitnet__gmodel *)m->gpu;
    if (!g) return;
    if (g->gpu) {
        int l;
        for (l = 0; g->layers && l < m->info.n_layers; l++) {
            bitnet_gpu_ternary_free(g->gpu, &g->layers[l].qkv);
            bitnet_gpu_ternary_free(g->gpu, &g->layers[l].o);
            bitnet_gpu_ternary_free(g->gpu, &g->layers[l].gu);
            bitnet_gpu_ternary_free(g->gpu, &g->layers[l].down);
        }
        if (g->mem) bitnet_gpu_free(g->gpu, g->mem);
        bitnet_gpu_close(g->gpu);
    }
    bitnet__free(g->layers);
    bitnet__free(g);
    m->gpu = NULL;
}

/* Lays out the dense weights (base 0: only the size). */
static void bitnet__gmodel_layout(bitnet__gmodel *g, const bitnet_model *m, bitnet__gcarve *c) {
    const bitnet_model_info *in = &m->info;
    int l;
    g->emb = bitnet__gtake(c, (size_t)in->n_vocab * (size_t)in->dim, 2);
    g->head = m->head_f16 == m->tok_embd ? g->emb : bitnet__gtake(c, (size_t)in->n_vocab * (size_t)in->dim, 2);
    g->out_norm = bitnet__gtake(c, (size_t)in->dim, 4);
    for (l = 0; l < in->n_layers; l++) {
        bitnet__glayer *L = &g->layers[l];
        L->attn_norm = bitnet__gtake(c, (size_t)in->dim, 4);
        L->attn_sub_norm = bitnet__gtake(c, (size_t)m->q_dim, 4);
        L->ffn_norm = bitnet__gtake(c, (size_t)in->dim, 4);
        L->ffn_sub_norm = bitnet__gtake(c, (size_t)in->ffn_dim, 4);
    }
}

/* One fused ternary matrix from n_parts I2_S tensors of n[i] rows of k. */
static bitnet_result bitnet__gpu_ternary(bitnet__gmodel *g, const void *const *w, const int *n, int n_parts, int k, int glu,
                                         bitnet_gpu_ternary *out) {
    bitnet_gpu_i2s_part p[3];
    int i;
    for (i = 0; i < n_parts; i++) {
        p[i].data = w[i];
        p[i].n = (size_t)n[i];
        p[i].bytes = bitnet_i2s_bytes((size_t)n[i], (size_t)k);
    }
    BITNET__TRY(bitnet_gpu_ternary_upload(g->gpu, p, n_parts, (size_t)k, glu, out));
    g->ternary_bytes += (size_t)out->n_pad * (size_t)k / 4;
    return BITNET_OK;
}

static bitnet_result bitnet__gpu_model_init(bitnet_model *m, int device) {
    const bitnet_model_info *in = &m->info;
    int hd = in->head_dim, G = in->n_kv_heads > 0 ? in->n_heads / in->n_kv_heads : 0, l;
    bitnet_gpu_device_info di;
    bitnet__gmodel *g;
    bitnet__gcarve c;
    if (hd % 32 || hd > 128 || G < 1 || G > 8)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "CUDA forward: head_dim %d must be a multiple of 32 up to 128, and "
                           "n_heads / n_kv_heads = %d at most 8", (int)hd, (int)G);
    g = (bitnet__gmodel *)bitnet__calloc(1, sizeof *g);
    if (!g) return BITNET_ERR_OUT_OF_MEMORY;
    m->gpu = g;
    g->device = device;
    g->layers = (bitnet__glayer *)bitnet__calloc((size_t)in->n_layers, sizeof *g->layers);
    if (!g->layers) return BITNET_ERR_OUT_OF_MEMORY;
    BITNET__TRY(bitnet_gpu_device_info_get(device, &di));
    g->sm_count = di.sm_count > 0 ? di.sm_count : 1;
    g->cc = di.cc_major * 10 + di.cc_minor;
    BITNET__TRY(bitnet_gpu_open(device, &g->gpu));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_embed", &g->embed));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_gemv_store", &g->gemv_store));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_gemv_res", &g->gemv_res));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_gemv_glu", &g->gemv_glu));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_attn_decode", &g->attn));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_head", &g->head_k));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_rope_kv", &g->rope_kv));
    BITNET__TRY(bitnet_gpu_builtin_kernel(g->gpu, "bitnet_k_fwd_attn_prefill", &g->attn_prefill));
    memset(&c, 0, sizeof c);
    bitnet__gmodel_layout(g, m, &c);
    if (c.overflow) return bitnet__err(BITNET_ERR_OVERFLOW, "CUDA forward: the model's device layout overflows");
    g->bytes = c.off;
    BITNET__TRY(bitnet_gpu_alloc(g->gpu, g->bytes, &g->mem));
    c.base = g->mem, c.off = 0;
    bitnet__gmodel_layout(g, m, &c);
    BITNET__TRY(bitnet_gpu_upload(g->gpu, g->emb, m->tok_embd, (size_t)in->n_vocab * (size_t)in->dim * 2));
    if (g->head != g->emb) BITNET__TRY(bitnet_gpu_upload(g->gpu, g->head, m->head_f16, (size_t)in->n_vocab * (size_t)in->dim * 2));
    BITNET__TRY(bitnet_gpu_upload(g->gpu, g->out_norm, m->output_norm, (size_t)in->dim * 4));
    for (l = 0; l < in->n_layers; l++) {
        const bitnet__layer *W = &m->layers[l];
        bitnet__glayer *L = &g->layers[l];
        const void *w[3];
        int n[3];
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->attn_norm, W->attn_norm, (size_t)in->dim * 4));
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->attn_sub_norm, W->attn_sub_norm, (size_t)m->q_dim * 4));
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->ffn_norm, W->ffn_norm, (size_t)in->dim * 4));
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->ffn_sub_norm, W->ffn_sub_norm, (size_t)in->ffn_dim * 4));
        w[0] = W->wq, w[1] = W->wk, w[2] = W->wv, n[0] = m->q_dim, n[1] = m->kv_dim, n[2] = m->kv_dim;
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 3, in->dim, 0, &L->qkv));
        w[0] = W->wo, n[0] = in->dim;
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 1, m->q_dim, 0, &L->o));
        w[0] = W->w_gate, w[1] = W->w_up, n[0] = n[1] = in->ffn_dim;
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 2, in->dim, 1, &L->gu));
        w[0] = W->w_down, n[0] = in->dim;
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 1, in->ffn_dim, 0, &L->down));
    }
    BITNET__TRY(bitnet_gpu_sync(g->gpu));
    return bitnet_gpu_pool_trim(g->gpu); /* the upload's staging buffers */
}

/* ---- session: KV cache and buffers --------------------------------------------------------------- */

static void bitnet__gpu_session_free(bitnet_session *s) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    if (!q) return;
    bitnet_gpu_graph_free(q->graph);
    if (q->gpu) {
        if (q->mem) bitnet_gpu_free(q->gpu, q->mem);
        bitnet_gpu_close(q->gpu);
    }
    bitnet__free(q);
    s->gpu = NULL;
}

static void bitnet__gsession_layout(bitnet__gsession *q, const bitnet_session *s, bitnet__gcarve *c) {
    const bitnet_model *m = s->m;
    const bitnet_model_info *in = &m->info;
    size_t B = (size_t)q->B, kv = (size_t)in->n_layers * (size_t)m->kv_dim;
    size_t wide = BITNET__MAX(BITNET__MAX((size_t)in->dim, (size_t)m->q_dim), (size_t)in->ffn_dim);
    q->kc = bitnet__gtake(c, kv * (size_t)s->n_ctx, 2);
    q->vc = bitnet__gtake(c, kv * (size_t)s->n_ctx, 2);
    q->rope = bitnet__gtake(c, (size_t)s->n_ctx * (size_t)in->head_dim, 4);
    q->x = bitnet__gtake(c, B * (size_t)in->dim, 4);
    q->qkv = bitnet__gtake(c, B * (size_t)(m->q_dim + 2 * m->kv_dim), 4);
    q->att = bitnet__gtake(c, B * (size_t)m->q_dim, 4);
    q->h = bitnet__gtake(c, B * (size_t)in->ffn_dim, 4);
    q->a_dim.q = bitnet__gtake(c, B * wide, 1);
    q->a_dim.scale = bitnet__gtake(c, B, 4);
    q->a_dim.sum = bitnet__gtake(c, B, 4);
    q->a_dim.cap = B, q->a_dim.k = (size_t)in->dim;
    q->a_q = q->a_dim, q->a_q.k = (size_t)m->q_dim;
    q->a_ff = q->a_dim, q->a_ff.k = (size_t)in->ffn_dim;
    q->logits = bitnet__gtake(c, (size_t)in->n_vocab, 4);
    q->part_o = bitnet__gtake(c, (size_t)in->n_heads * (size_t)q->smax * (size_t)in->head_dim, 4);
    q->part_ml = bitnet__gtake(c, (size_t)in->n_heads * (size_t)q->smax * 2, 4);
    q->hv = bitnet__gtake(c, (size_t)q->head_blocks * 2, 4); /* room for twice the blocks (tuning) */
    q->hi = bitnet__gtake(c, (size_t)q->head_blocks * 2, 4);
    q->tok = bitnet__gtake(c, B, 4);
    q->ctr = bitnet__gtake(c, (size_t)in->n_kv_heads + 1, 4);
    q->io = bitnet__gtake(c, 2, 4);
    q->next = bitnet__gtake(c, 1, 4);
}

static bitnet_result bitnet__gpu_session_init(bitnet_session *s) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q;
    bitnet__gcarve c;
    int split;
    if (!g) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA session: the model has no GPU weights");
    q = (bitnet__gsession *)bitnet__calloc(1, sizeof *q);
    if (!q) return BITNET_ERR_OUT_OF_MEMORY;
    s->gpu = q;
    q->B = g->cc >= 80 ? s->n_batch : 1; /* below sm_80 prompts go through the decode step */
    split = (s->n_ctx + BITNET__GPU_ATT_CMIN - 1) / BITNET__GPU_ATT_CMIN;
    q->smax = BITNET__MIN(split, BITNET__GPU_ATT_SMAX);
    q->cmin = BITNET__GPU_ATT_CMIN;
    q->head_blocks = 2 * g->sm_count; /* persistent: two 256-thread blocks per SM, one wave */
    BITNET__TRY(bitnet_gpu_open(g->device, &q->gpu));
    memset(&c, 0, sizeof c);
    bitnet__gsession_layout(q, s, &c);
    if (c.overflow) return bitnet__err(BITNET_ERR_OVERFLOW, "CUDA session: %d positions overflow the device layout", (int)s->n_ctx);
    q->bytes = c.off;
    BITNET__TRY(bitnet_gpu_alloc(q->gpu, q->bytes, &q->mem));
    c.base = q->mem, c.off = 0;
    bitnet__gsession_layout(q, s, &c);
    /* poison: a read of anything no kernel wrote shows up as NaN (0xffff is an fp16 NaN too) */
    BITNET__TRY(bitnet_gpu_memset(q->gpu, q->mem, 0xff, q->bytes));
    BITNET__TRY(bitnet_gpu_memset(q->gpu, q->ctr, 0, ((size_t)s->m->info.n_kv_heads + 1) * 4));
    return bitnet_gpu_upload(q->gpu, q->rope, s->rope, (size_t)s->n_ctx * (size_t)s->m->info.head_dim * 4);
}

/* ---- the steps ------------------------------------------------------------------------------------ */

/* What a decode kernel pulls into L2 for the kernel after it (the next weights in reading order). */
typedef struct bitnet__gpre { bitnet_devptr p; unsigned long long bytes; } bitnet__gpre;
static bitnet__gpre bitnet__gpre_of(const bitnet_gpu_ternary *w) {
    bitnet__gpre r;
    r.p = w ? w->data : 0;
    r.bytes = w ? (unsigned long long)w->n_pad * (unsigned long long)w->k / 4 : 0;
    return r;
}

/* 1. embed: x[t] = tok_embd[tokens[t]] as fp32, for the m tokens at tok */
static bitnet_result bitnet__gpu_embed(bitnet_session *s, bitnet_devptr tok, int m, bitnet__gpre pre) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int dim = s->m->info.dim;
    void *args[6];
    args[0] = (void *)&g->emb, args[1] = &dim, args[2] = &tok, args[3] = &q->x, args[4] = &pre.p, args[5] = &pre.bytes;
    return bitnet__gpu_launch(q->gpu, g->embed, (unsigned)m, 1, 256, 1, 0, args);
}

/* 2+3. norm_quant + linear for one token: out = W . int8(rmsnorm(in) * norm_w) with the matrix's
   epilogue (kernel: store, res (out += y), glu (relu(gate)^2 * up)) */
static bitnet_result bitnet__gpu_linear(bitnet_session *s, bitnet_gpu_kernel *k, const bitnet_gpu_ternary *w,
                                        bitnet_devptr in, bitnet_devptr norm_w, bitnet_devptr out, bitnet__gpre pre) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    float eps = s->m->info.norm_eps;
    bitnet__gseg segs = bitnet__gsegs(w);
    int n_out = (int)w->n, nc = (int)(w->k / 64), items = w->glu ? 2 * nc : nc;
    unsigned groups = (unsigned)((n_out + 31) / 32);
    /* warps share a block's K chunks, 8 loads in flight per lane; over one wave of blocks
       (about 100 registers a thread) a block gets at most 8 warps */
    int warps = BITNET__MIN((int)groups > g->sm_count ? 8 : 16, BITNET__MAX(1, (items + 7) / 8));
    unsigned smem = (unsigned)w->k + (unsigned)(warps * (w->glu ? 2 : 1) * 32 * 4);
    void *args[10];
    args[0] = (void *)&w->data, args[1] = &n_out, args[2] = &nc, args[3] = &segs, args[4] = &in, args[5] = &norm_w,
    args[6] = &eps, args[7] = &out, args[8] = &pre.p, args[9] = &pre.bytes;
    return bitnet__gpu_launch(q->gpu, k, groups, 1, 32, (unsigned)warps, smem, args);
}

/* 4-6. rope + kv_store + attention for one token (layer l): q and k rotated at the position in
   io[1], k and v appended to the cache, att = softmax(q K^T / sqrt(hd)) V over the positions so far */
static bitnet_result bitnet__gpu_attention(bitnet_session *s, int l, bitnet__gpre pre) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int hd = m->info.head_dim, nh = m->info.n_heads, nkv = m->info.n_kv_heads, G = nh / nkv;
    size_t layer = (size_t)l * (size_t)m->kv_dim * (size_t)s->n_ctx * 2;
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + 4;
    unsigned smem = (unsigned)(G * hd + G * BITNET__MAX(64, 128)) * 4 + 2 * 64 * (unsigned)hd * 2; /* BF_ATT_T = 64 */
    void *args[17];
    args[0] = &q->qkv, args[1] = &q->rope, args[2] = &pos, args[3] = &kc, args[4] = &vc, args[5] = &s->n_ctx, args[6] = &nh,
    args[7] = &nkv, args[8] = &hd, args[9] = &q->smax, args[10] = &q->cmin, args[11] = &q->part_o, args[12] = &q->part_ml,
    args[13] = &q->ctr, args[14] = &q->att, args[15] = &pre.p, args[16] = &pre.bytes;
    return bitnet__gpu_launch(q->gpu, g->attn, (unsigned)nkv, (unsigned)q->smax, 128, 1, smem, args);
}

/* 9. head: logits = head . rmsnorm(x_row) * output_norm, and its argmax into next */
static bitnet_result bitnet__gpu_head(bitnet_session *s, bitnet_devptr x_row) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int nv = m->info.n_vocab, dim = m->info.dim;
    float eps = m->info.norm_eps;
    bitnet_devptr ctr = q->ctr + 4 * (bitnet_devptr)m->info.n_kv_heads;
    void *args[11];
    args[0] = (void *)&g->head, args[1] = &nv, args[2] = &dim, args[3] = &x_row, args[4] = (void *)&g->out_norm, args[5] = &eps,
    args[6] = &q->logits, args[7] = &q->hv, args[8] = &q->hi, args[9] = &ctr, args[10] = &q->next;
    return bitnet__gpu_launch(q->gpu, g->head_k, (unsigned)q->head_blocks, 1, 256, 1, (unsigned)dim * 4, args);
}

/* One token's forward, as launched into the decode graph (token and position in io). Each kernel
   also pulls the next weights it does not use into L2 (bitnet__gpre), so DRAM keeps streaming
   between kernels: embed -> QKV, QKV -> O, attention -> gate||up, O -> down, gate||up -> the next
   layer's QKV (the last: the head's first 16 MB), down -> the next layer's gate||up. */
static bitnet_result bitnet__gpu_step(bitnet_session *s) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int l, nl = m->info.n_layers;
    bitnet__gpre head;
    head.p = g->head;
    head.bytes = BITNET__MIN((unsigned long long)16 << 20, (unsigned long long)m->info.n_vocab * (unsigned long long)m->info.dim * 2) & ~15ull;
    BITNET__TRY(bitnet__gpu_embed(s, q->io, 1, bitnet__gpre_of(&g->layers[0].qkv)));                    /* x [dim] */
    for (l = 0; l < nl; l++) {
        const bitnet__glayer *L = &g->layers[l], *N = l + 1 < nl ? &g->layers[l + 1] : NULL;
        /* attention block */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_store, &L->qkv, q->x, L->attn_norm, q->qkv, bitnet__gpre_of(&L->o)));  /* qkv */
        BITNET__TRY(bitnet__gpu_attention(s, l, bitnet__gpre_of(&L->gu)));                                 /* att [q_dim] */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_res, &L->o, q->att, L->attn_sub_norm, q->x, bitnet__gpre_of(&L->down)));
        /* feed-forward block */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_glu, &L->gu, q->x, L->ffn_norm, q->h, N ? bitnet__gpre_of(&N->qkv) : head));
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_res, &L->down, q->h, L->ffn_sub_norm, q->x, bitnet__gpre_of(N ? &N->gu : NULL)));
    }
    return bitnet__gpu_head(s, q->x);                                                                     /* logits, next */
}

/* One decode step of token at pos: the graph, captured on first use. */
static bitnet_result bitnet__gpu_decode(bitnet_session *s, int32_t token, int32_t pos) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int32_t io[2];
    io[0] = token, io[1] = pos;
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->io, io, sizeof io));
    if (!q->graph) {
        bitnet_result r, r2;
        BITNET__TRY(bitnet_gpu_graph_begin(q->gpu));
        r = bitnet__gpu_step(s);
        r2 = bitnet_gpu_graph_end(q->gpu, &q->graph);
        BITNET__TRY(r);
        BITNET__TRY(r2);
    }
    q->have_next = 1;
    return bitnet_gpu_graph_launch(q->gpu, q->graph);
}

/* ---- prefill steps (m tokens, the rows of the batch buffers) --------------------------------------- */

/* 2. norm_quant: a = int8(rmsnorm(in[t]) * w) with scales and sums, for m rows of a->k */
static bitnet_result bitnet__gpu_norm_quant(bitnet_session *s, bitnet_devptr in, bitnet_devptr w, int m, bitnet_gpu_act *a) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    return bitnet_gpu_quantize_act(q->gpu, in, (size_t)m, a->k, w, s->m->info.norm_eps, a);
}

/* 3. linear for m tokens: out[m][n] (+= res when res is out) = W . a (int8 tensor cores) */
static bitnet_result bitnet__gpu_linear_m(bitnet_session *s, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a,
                                          bitnet_devptr out, bitnet_devptr res) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    return bitnet_gpu_ternary_matmul(q->gpu, w, a, out, BITNET_PRECISION_FP32, res);
}

/* 4+5. rope + kv_store for m tokens from position io[1] */
static bitnet_result bitnet__gpu_rope_kv(bitnet_session *s, int l, int m) {
    const bitnet_model *md = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)md->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int hd = md->info.head_dim, nh = md->info.n_heads, nkv = md->info.n_kv_heads;
    long long ldq = md->q_dim + 2 * md->kv_dim;
    size_t layer = (size_t)l * (size_t)md->kv_dim * (size_t)s->n_ctx * 2;
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + 4;
    void *args[10];
    args[0] = &q->qkv, args[1] = &ldq, args[2] = &q->rope, args[3] = &pos, args[4] = &kc, args[5] = &vc, args[6] = &s->n_ctx,
    args[7] = &nh, args[8] = &nkv, args[9] = &hd;
    return bitnet__gpu_launch(q->gpu, g->rope_kv, (unsigned)m, 1, 128, 1, 0, args);
}

/* 6. attention for m tokens, causal */
static bitnet_result bitnet__gpu_attention_m(bitnet_session *s, int l, int m) {
    const bitnet_model *md = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)md->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int hd = md->info.head_dim, nh = md->info.n_heads, nkv = md->info.n_kv_heads;
    long long ldq = md->q_dim + 2 * md->kv_dim, ldo = md->q_dim;
    size_t layer = (size_t)l * (size_t)md->kv_dim * (size_t)s->n_ctx * 2;
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + 4;
    unsigned smem = (unsigned)((32 * hd + 32 * 65) * 4 + 64 * (hd + 2) * 2);
    void *args[12];
    args[0] = &q->qkv, args[1] = &ldq, args[2] = &kc, args[3] = &vc, args[4] = &pos, args[5] = &m, args[6] = &s->n_ctx,
    args[7] = &nh, args[8] = &nkv, args[9] = &hd, args[10] = &q->att, args[11] = &ldo;
    return bitnet__gpu_launch(q->gpu, g->attn_prefill, (unsigned)((m + 31) / 32), (unsigned)nh, 128, 1, smem, args);
}

/* Prefill of m tokens at s->pos: the GEMM path, in the CPU's step order. */
static bitnet_result bitnet__gpu_prefill(bitnet_session *s, const int32_t *tokens, int m, float *logits, int all) {
    const bitnet_model *md = s->m;
    bitnet__gmodel *g = (bitnet__gmodel *)md->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int l, t, dim = md->info.dim;
    size_t nv = (size_t)md->info.n_vocab;
    int32_t io[2];
    io[0] = tokens[0], io[1] = s->pos;
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->io, io, sizeof io));
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->tok, tokens, (size_t)m * sizeof *tokens));
    BITNET__TRY(bitnet__gpu_embed(s, q->tok, m, bitnet__gpre_of(NULL)));                   /* x [m][dim] */
    for (l = 0; l < md->info.n_layers; l++) {
        const bitnet__glayer *L = &g->layers[l];
        /* attention block */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->x, L->attn_norm, m, &q->a_dim));            /* aq [m][dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->qkv, &q->a_dim, q->qkv, 0));                 /* qkv [m][q+2kv] */
        BITNET__TRY(bitnet__gpu_rope_kv(s, l, m));
        BITNET__TRY(bitnet__gpu_attention_m(s, l, m));                                       /* att [m][q_dim] */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->att, L->attn_sub_norm, m, &q->a_q));        /* aq [m][q_dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->o, &q->a_q, q->x, q->x));                    /* x += o */
        /* feed-forward block */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->x, L->ffn_norm, m, &q->a_dim));             /* aq [m][dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->gu, &q->a_dim, q->h, 0));                    /* h [m][ffn] */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->h, L->ffn_sub_norm, m, &q->a_ff));          /* aq [m][ffn] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->down, &q->a_ff, q->x, q->x));                /* x += down */
    }
    q->have_next = 0;
    if (!logits) return BITNET_OK;
    for (t = all ? 0 : m - 1; t < m; t++) {
        BITNET__TRY(bitnet__gpu_head(s, q->x + (bitnet_devptr)((size_t)t * (size_t)dim * 4)));
        BITNET__TRY(bitnet_gpu_download(q->gpu, logits + (all ? (size_t)t * nv : 0), q->logits, nv * 4));
    }
    q->have_next = 1;
    return BITNET_OK;
}

/* The forward pass of m tokens at s->pos .. s->pos+m-1: bitnet__cpu_forward's contract. */
static bitnet_result bitnet__gpu_forward(bitnet_session *s, const int32_t *tokens, int m, float *logits, int all) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    size_t nv = (size_t)s->m->info.n_vocab;
    int t;
    if (!g || !q) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA forward: the model or session has no GPU state");
    if (m >= BITNET__GPU_PREFILL_MIN && g->cc >= 80 && m <= q->B) return bitnet__gpu_prefill(s, tokens, m, logits, all);
    for (t = 0; t < m; t++) {
        BITNET__TRY(bitnet__gpu_decode(s, tokens[t], s->pos + t));
        if (logits && (all || t == m - 1))
            BITNET__TRY(bitnet_gpu_download(q->gpu, logits + (all ? (size_t)t * nv : 0), q->logits, nv * 4));
    }
    return BITNET_OK;
}

/* Greedy decoding without moving logits: the argmax (lowest index among equals) of the last row
   whose logits the GPU computed. */
static BITNET__UNUSED bitnet_result bitnet__gpu_last_argmax(bitnet_session *s, int32_t *token) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    if (!q || !q->have_next) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA forward: no logits were computed on the device");
    return bitnet_gpu_download(q->gpu, token, q->next, 4);
}

#endif /* BITNET__GPU_FORWARD */

/* >>model ===================================================================================== */

/* >>public ==================================================================================== */

#endif /* BITNET_IMPLEMENTATION */

/*
------------------------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 the bitnet.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
------------------------------------------------------------------------------------------------
*/
