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
     BITNET_NO_MMAP       impl    read GGUF files into memory instead of mapping them
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

/* GGUF v2/v3 reader over mmap (or memory), bounds-checked everywhere.
   Every count, length, offset and shape in the file is checked against the bytes that remain
   before anything is allocated or touched: a hostile file gives an error, never a crash.
   Codes: BAD_MAGIC, BAD_VERSION (v1, v0, >3, big-endian files), TRUNCATED (a field, string,
   array or tensor runs past the end), CORRUPT (a count or length larger than the whole file,
   unknown value types, empty or NUL-containing names), UNSUPPORTED (nested arrays: no model uses
   them and ggml rejects them too), UNSUPPORTED_TYPE, BAD_SHAPE (n_dims not 1..4, a zero
   dimension, a row not a multiple of the type's block), OVERFLOW (element counts, byte sizes or
   offsets that overflow 64 bits), ALIGNMENT (a tensor offset not a multiple of the alignment),
   DUPLICATE_TENSOR, BAD_METADATA (duplicate keys, general.alignment not a power-of-two uint32).
   Metadata keys and tensor names are copied (NUL-terminated); string values point into the
   image; numeric arrays are copied so that arr_data is aligned for its element type. Little-
   endian hosts only. A bitnet_gguf is read-only after open: any thread may read it. */
typedef struct bitnet_gguf bitnet_gguf;
typedef enum bitnet_gguf_type { /* metadata value types, as in the GGUF spec */
    BITNET_GGUF_UINT8 = 0, BITNET_GGUF_INT8, BITNET_GGUF_UINT16, BITNET_GGUF_INT16, BITNET_GGUF_UINT32,
    BITNET_GGUF_INT32, BITNET_GGUF_FLOAT32, BITNET_GGUF_BOOL, BITNET_GGUF_STRING, BITNET_GGUF_ARRAY,
    BITNET_GGUF_UINT64, BITNET_GGUF_INT64, BITNET_GGUF_FLOAT64,
    BITNET_GGUF_TYPE_COUNT /* not a type: returned by bitnet_gguf_key_type for a bad index */
} bitnet_gguf_type;
typedef enum bitnet_tensor_type { /* ggml ids; I2_S is bitnet.cpp's 36 */
    BITNET_TENSOR_F32 = 0, BITNET_TENSOR_F16 = 1, BITNET_TENSOR_Q8_0 = 8, BITNET_TENSOR_BF16 = 30,
    BITNET_TENSOR_I2_S = 36
} bitnet_tensor_type;
typedef struct bitnet_tensor_info {
    const char *name;
    bitnet_tensor_type type;
    int n_dims;
    uint64_t ne[4];          /* ne[0] is the contiguous dimension (K for a weight matrix); unused dims are 1 */
    uint64_t offset;         /* from the start of the data section */
    uint64_t bytes;          /* I2_S: ne0*ne1/4 + 32 */
    const void *data;        /* inside the mapping */
} bitnet_tensor_info;
typedef struct bitnet_gguf_str { const char *ptr; uint64_t len; } bitnet_gguf_str; /* not NUL-terminated */

#define BITNET_GGUF_NO_MMAP 1u /* bitnet_gguf_open_ex flag: read the file into memory */
BITNET_API bitnet_result bitnet_gguf_open(const char *path, bitnet_gguf **out);
BITNET_API bitnet_result bitnet_gguf_open_ex(const char *path, unsigned flags, bitnet_gguf **out);
BITNET_API bitnet_result bitnet_gguf_open_memory(const void *data, size_t size, bitnet_gguf **out); /* data must outlive it */
BITNET_API void bitnet_gguf_close(bitnet_gguf *g);
BITNET_API uint32_t bitnet_gguf_version(const bitnet_gguf *g);
BITNET_API uint64_t bitnet_gguf_kv_count(const bitnet_gguf *g);
BITNET_API uint64_t bitnet_gguf_tensor_count(const bitnet_gguf *g);
BITNET_API uint32_t bitnet_gguf_alignment(const bitnet_gguf *g);     /* general.alignment, default 32 */
BITNET_API uint64_t bitnet_gguf_data_offset(const bitnet_gguf *g);   /* file offset of the data section */
BITNET_API uint64_t bitnet_gguf_size(const bitnet_gguf *g);          /* bytes in the image */
BITNET_API int bitnet_gguf_is_mapped(const bitnet_gguf *g);          /* 1 when the file is mmap'd */
BITNET_API int64_t bitnet_gguf_find_key(const bitnet_gguf *g, const char *key);          /* -1 if absent */
BITNET_API const char *bitnet_gguf_key_name(const bitnet_gguf *g, uint64_t i);           /* NULL if i is out of range */
BITNET_API bitnet_gguf_type bitnet_gguf_key_type(const bitnet_gguf *g, uint64_t i);      /* TYPE_COUNT if out of range */
BITNET_API const char *bitnet_gguf_type_name(bitnet_gguf_type t);
BITNET_API const char *bitnet_tensor_type_name(bitnet_tensor_type t); /* "?" for ids this library does not read */
/* Bytes of a tensor of this type and shape (ne[0..3], unused dims 1): BAD_SHAPE when a row is
   not a whole number of blocks (Q8_0: 32, I2_S: 128), OVERFLOW, UNSUPPORTED_TYPE. */
BITNET_API bitnet_result bitnet_tensor_nbytes(bitnet_tensor_type type, const uint64_t ne[4], uint64_t *out);
/* Typed getters: an error (BITNET_ERR_BAD_METADATA) when the key is absent or of another type;
   integers convert between widths and signedness when the value fits; f32/f64 accept both
   float types. */
BITNET_API bitnet_result bitnet_gguf_get_u32(const bitnet_gguf *g, const char *key, uint32_t *out);
BITNET_API bitnet_result bitnet_gguf_get_u64(const bitnet_gguf *g, const char *key, uint64_t *out);
BITNET_API bitnet_result bitnet_gguf_get_i64(const bitnet_gguf *g, const char *key, int64_t *out);
BITNET_API bitnet_result bitnet_gguf_get_f32(const bitnet_gguf *g, const char *key, float *out);
BITNET_API bitnet_result bitnet_gguf_get_f64(const bitnet_gguf *g, const char *key, double *out);
BITNET_API bitnet_result bitnet_gguf_get_bool(const bitnet_gguf *g, const char *key, int *out);
BITNET_API bitnet_result bitnet_gguf_get_str(const bitnet_gguf *g, const char *key, bitnet_gguf_str *out);
/* Arrays: element type, count, and element access. */
BITNET_API bitnet_result bitnet_gguf_get_arr(const bitnet_gguf *g, const char *key, bitnet_gguf_type *elem_type, uint64_t *count);
BITNET_API bitnet_result bitnet_gguf_arr_str(const bitnet_gguf *g, const char *key, uint64_t i, bitnet_gguf_str *out);
/* Numeric and bool arrays: count elements, packed little-endian, aligned for the element type
   (bool: one byte each). NULL, with the error set, when absent or not such an array. */
BITNET_API const void *bitnet_gguf_arr_data(const bitnet_gguf *g, const char *key);
BITNET_API bitnet_result bitnet_gguf_tensor(const bitnet_gguf *g, uint64_t i, bitnet_tensor_info *out);
BITNET_API bitnet_result bitnet_gguf_find_tensor(const bitnet_gguf *g, const char *name, bitnet_tensor_info *out);

/* Validates a GGUF against the BitNet b1.58 architecture and fills *info (all of it is
   overwritten; the backend fields are left zero). Architectures "bitnet-b1.58", "bitnet-25" and
   "bitnet", keys under that prefix: embedding_length, block_count, attention.head_count,
   feed_forward_length, context_length, attention.layer_norm_rms_epsilon (required);
   attention.head_count_kv (default head_count), rope.freq_base (default 10000), vocab_size and
   rope.dimension_count (checked when present). Tensors (ggml ne order, ne0 = in-features), as
   bitnet.cpp writes them: token_embd.weight F16 [dim, vocab]; output_norm.weight F32 [dim];
   optional output.weight F16 [dim, vocab]; per layer blk.N.attn_norm, attn_sub_norm, ffn_norm F32
   [dim], ffn_sub_norm F32 [ffn], attn_q and attn_output I2_S [dim, dim], attn_k and attn_v I2_S
   [dim, n_kv*head_dim], ffn_gate and ffn_up I2_S [dim, ffn], ffn_down I2_S [ffn, dim]. Float
   tensors may be any of F32, F16, BF16, and the ternary ones also float (unquantized latent
   weights, as a converter writes them before quantizing). The vocabulary size comes from
   tokenizer.ggml.tokens (else vocab_size, else token_embd) and every tokenizer.ggml.*_token_id
   must lie inside it. eot is tokenizer.ggml.eot_token_id, else the token "<|eot_id|>", else -1.
   Reads only the 4-byte scale of each I2_S tensor (not finite or negative: CORRUPT), so it is cheap.
   Errors: BAD_METADATA (missing or inconsistent keys, zero or non-dividing head counts, special
   ids outside the vocabulary), UNSUPPORTED (another architecture, partial RoPE),
   MISSING_TENSOR, UNSUPPORTED_TYPE (a tensor of the wrong type), BAD_SHAPE. */
struct bitnet_model_info;
BITNET_API bitnet_result bitnet_gguf_check_bitnet(const bitnet_gguf *g, struct bitnet_model_info *info);

/* GGUF writer, in bitnet.cpp's layout (v3, alignment 32 unless general.alignment is set, data
   padded with zeros). Declare all metadata and tensors, then begin() writes the header and
   write() streams the tensor bytes in declaration order (any chunking); finish() closes the
   file. Values are copied. bitnet_gguf_writer_free on an unfinished writer removes the file. */
typedef struct bitnet_gguf_writer bitnet_gguf_writer;
BITNET_API bitnet_result bitnet_gguf_writer_create(bitnet_gguf_writer **out);
BITNET_API void bitnet_gguf_writer_free(bitnet_gguf_writer *w);
/* value points to the value (bool: one uint8_t, 0 or 1; STRING: a bitnet_gguf_str). Setting
   general.alignment (UINT32, a power of two) also sets the alignment used. */
BITNET_API bitnet_result bitnet_gguf_writer_set(bitnet_gguf_writer *w, const char *key, bitnet_gguf_type type, const void *value);
BITNET_API bitnet_result bitnet_gguf_writer_set_u32(bitnet_gguf_writer *w, const char *key, uint32_t v);
BITNET_API bitnet_result bitnet_gguf_writer_set_f32(bitnet_gguf_writer *w, const char *key, float v);
BITNET_API bitnet_result bitnet_gguf_writer_set_str(bitnet_gguf_writer *w, const char *key, const char *v);
/* n packed elements (STRING: n bitnet_gguf_str). */
BITNET_API bitnet_result bitnet_gguf_writer_set_arr(bitnet_gguf_writer *w, const char *key, bitnet_gguf_type elem_type,
                                                    const void *values, uint64_t n);
BITNET_API bitnet_result bitnet_gguf_writer_add_tensor(bitnet_gguf_writer *w, const char *name, bitnet_tensor_type type,
                                                       int n_dims, const uint64_t *ne);
BITNET_API bitnet_result bitnet_gguf_writer_begin(bitnet_gguf_writer *w, const char *path);
BITNET_API bitnet_result bitnet_gguf_writer_write(bitnet_gguf_writer *w, const void *data, size_t n);
BITNET_API bitnet_result bitnet_gguf_writer_finish(bitnet_gguf_writer *w);

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

/* ---- >>api-bench: kernel statistics, SHA-256, benchmarks and receipts ------------------------ */

/* Kernel launches, recorded by the launch path itself under the name of the path that ran: the
   CPU kernel entry points' dispatch ("cpu_gemm_i2s_avx512") and the GPU runtime's one launch path
   and graph replays ("bitnet_k_gemv_i2s"). Process-wide, thread-safe. seconds: host time around
   a CPU kernel; for GPU kernels the device time of event-timed launches (bitnet_gpu_set_timing),
   else 0. */
#define BITNET_KERNEL_NAME_MAX 96
typedef struct bitnet_kernel_stat {
    char name[BITNET_KERNEL_NAME_MAX];
    uint64_t launches;
    double seconds;                           /* see above */
} bitnet_kernel_stat;
/* Copies every kernel with launches since the last reset, sorted by name. *n gets the count;
   BITNET_ERR_BAD_SIZE (with *n set) when cap is too small. out may be NULL when cap is 0. */
BITNET_API bitnet_result bitnet_kernel_stats(bitnet_kernel_stat *out, size_t cap, size_t *n);
BITNET_API void bitnet_kernel_stats_reset(void);               /* also resets bitnet_gpu_stats_get(NULL, ...) */

/* SHA-256 (FIPS 180-4). The file variant writes 64 lowercase hex digits and a NUL into hex. */
BITNET_API bitnet_result bitnet_sha256(const void *data, size_t n, uint8_t digest[32]);
BITNET_API bitnet_result bitnet_sha256_file(const char *path, char hex[65], uint64_t *bytes);

/* A receipt records what one benchmark run of one backend measured and what actually ran. Its
   JSON form (schema_version "1.0") is what bitnet_receipt_write produces and bitnet_receipt_parse
   reads; `bitnet verify-receipt` checks it against gates. */
#define BITNET_RECEIPT_SCHEMA "1.0"
#define BITNET_RECEIPT_MAX_BYTES (1u << 20)   /* larger files are rejected */
#define BITNET_BENCH_MAX_RESULTS 16
#define BITNET_BENCH_MAX_KERNELS 128
#define BITNET_GPU_KERNEL_PREFIX "bitnet_k_"  /* every CUDA kernel's name starts with it */

typedef struct bitnet_bench_result {         /* one prompt length; times are means over the runs */
    int32_t prompt_tokens, gen_tokens, runs;
    double prompt_ms, gen_ms;                 /* as bitnet_generate_stats measures them */
    double wall_ms;                           /* the whole bitnet_generate call */
    double ttft_ms;                           /* call start to the first generated token */
    double prompt_tps, gen_tps;               /* tokens over summed time of all runs */
    double gen_tps_min, gen_tps_max;          /* the slowest and the fastest run */
    double p50_ms, p95_ms, p99_ms;            /* per-token decode latency, all runs pooled */
    char tokens_sha256[65];                   /* of the greedy tokens (int32 little-endian) */
    int outputs_identical;                    /* every run gave the same tokens */
} bitnet_bench_result;

typedef struct bitnet_receipt {
    char schema_version[16];
    char created_utc[32];                     /* ISO 8601 */
    char library_version[32];
    char git_commit[48];                      /* baked in at build time, "unknown" without git */
    char model_path[1024];
    char model_sha256[65];
    uint64_t model_bytes;
    bitnet_model_info model;                  /* config, and the backend that actually ran */
    char backend_requested[16];               /* "auto", "cpu" or "cuda" */
    char backend[16];                         /* "cpu" or "cuda": what ran */
    char precision[96];                       /* "W1.58A8 (ternary weights stored as I2_S, int8 activations)" */
    char cpu_model[128];
    char isa[16];                             /* the CPU kernel path */
    int32_t threads;
    int has_gpu;                              /* the gpu_* fields are set */
    char gpu_name[128];
    int32_t gpu_cc_major, gpu_cc_minor;
    char gpu_arch[16];                        /* the arch the kernels were compiled for, "sm_90" */
    char gpu_driver_version[16], nvrtc_version[16];
    uint64_t peak_host_rss_bytes, peak_device_bytes;
    int32_t warmup_runs;
    int determinism_checked, seeded_runs_identical;
    size_t n_results;
    bitnet_bench_result results[BITNET_BENCH_MAX_RESULTS];
    size_t n_kernels;
    bitnet_kernel_stat kernels[BITNET_BENCH_MAX_KERNELS];
} bitnet_receipt;

typedef struct bitnet_bench_params {         /* zero-initialise; 0 / NULL means the default */
    const char *model_path;                   /* the file the model came from (hashed); required */
    bitnet_backend requested;                 /* what the caller asked for, for the receipt */
    int32_t prompt_lens[BITNET_BENCH_MAX_RESULTS]; size_t n_prompt_lens; /* default: 64 */
    int32_t gen_tokens;                       /* default 128 */
    int32_t runs;                             /* measured runs per length, default 5 */
    int32_t warmup;                           /* warm-up runs, default 1; negative = none */
    int check_determinism;                    /* also two seeded sampling runs that must agree */
    int32_t *tokens_out; size_t tokens_cap;   /* optional: each length's greedy tokens, in order */
    bitnet_progress_fn progress; void *progress_user;
} bitnet_bench_params;

/* Benchmarks a loaded model: a fixed prompt (the ids of a fixed text, repeated and cut to each
   length), warm-up, then `runs` greedy generations per length, and fills a complete receipt.
   Resets the kernel statistics; other work in the process during the run would be counted. */
BITNET_API bitnet_result bitnet_bench(bitnet_model *m, const bitnet_bench_params *p, bitnet_receipt *out);

/* JSON text of a receipt, NUL-terminated. *len gets the length without the NUL; BITNET_ERR_BAD_SIZE
   (with *len set) when cap is too small. */
BITNET_API bitnet_result bitnet_receipt_write(const bitnet_receipt *r, char *buf, size_t cap, size_t *len);
/* Parses and validates receipt JSON (strict RFC 8259, depth and size limited). Errors:
   BITNET_ERR_CORRUPT for malformed JSON or inconsistent numbers, BITNET_ERR_BAD_VERSION for another
   schema_version, BITNET_ERR_BAD_METADATA for a missing or mistyped field. */
BITNET_API bitnet_result bitnet_receipt_parse(const char *json, size_t len, bitnet_receipt *out);

typedef struct bitnet_receipt_gates {        /* zero-initialise; 0 = that gate is off */
    int require_gpu_kernels;                  /* CUDA ran, with a consistent device block */
    double min_tps;                           /* generation tokens/s, every prompt length */
    double max_p95_ms;                        /* per-token latency p95, every prompt length */
    double max_wall_ms;                       /* mean wall time of one run, every prompt length */
} bitnet_receipt_gates;
/* Checks a receipt against gates. *n_breaches gets the number of breaches; report (may be NULL)
   gets one line per breach, naming it, truncated to cap. */
BITNET_API bitnet_result bitnet_receipt_check(const bitnet_receipt *r, const bitnet_receipt_gates *g,
                                              char *report, size_t cap, int *n_breaches);

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

/* Kernel statistics and NVTX ranges (defined in >>receipt): every kernel dispatch point (the CPU
   entry points, the GPU launch path) records the path that ran under a static name. A replayed
   CUDA graph adds its kernels' launch counts with bitnet__kstat_add, once per distinct kernel. */
static void bitnet__kstat_add(const char *name, uint64_t launches, double seconds);
static void bitnet__kstat_record(const char *name, double seconds);
#define BITNET__KSTAT(name, call) \
    do { double bitnet__k0_ = bitnet__now(); call; bitnet__kstat_record((name), bitnet__now() - bitnet__k0_); } while (0)
/* The same with the CPU path in the name: BITNET__KSTAT_ISA("cpu_gemm_i2s", isa, call) records
   "cpu_gemm_i2s_avx512" etc. (base must be a string literal). */
#define BITNET__KSTAT_ISA(base, isa, call) \
    BITNET__KSTAT((isa) == BITNET_ISA_AVX512 ? base "_avx512" : (isa) == BITNET_ISA_AVX2 ? base "_avx2" : \
                  (isa) == BITNET_ISA_NEON ? base "_neon" : base "_scalar", call)
static void bitnet__nvtx_push(const char *name);
static void bitnet__nvtx_pop(void);

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
    BITNET__KSTAT("cpu_gemm_i2s_scalar", bitnet__gemm_i2s_scalar((const uint8_t *)w, 0, n, k, a, a_scale, a_sum, m, w_scale, out, n));
    return BITNET_OK;
}

/* >>gguf ====================================================================================== */

/* File layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv x (string key,
   u32 type, value); n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset);
   zero padding to general.alignment; the data section. A string is a u64 length and its bytes. */

#define BITNET__GGUF_MAGIC "GGUF"
#define BITNET__GGUF_DEFAULT_ALIGN 32u
#define BITNET__GGUF_MAX_KV (1u << 20)       /* far beyond any real file; bounds the tables */
#define BITNET__GGUF_MAX_TENSORS (1u << 20)
#define BITNET__GGUF_MIN_KV_BYTES 13u        /* key length 8 + type 4 + a 1-byte value */
#define BITNET__GGUF_MIN_TENSOR_BYTES 32u    /* name length 8 + n_dims 4 + ne 8 + type 4 + offset 8 */

typedef struct bitnet__gguf_kv {
    const char *key;         /* NUL-terminated copy */
    bitnet_gguf_type type;
    bitnet_gguf_type elem;   /* arrays: element type */
    uint64_t count;          /* arrays: element count */
    const uint8_t *raw;      /* scalars: the value bytes in the image (unaligned); strings: the bytes */
    uint64_t len;            /* strings: length */
    void *arr;               /* arrays: an aligned copy of numeric elements, or a bitnet_gguf_str table */
} bitnet__gguf_kv;

/* Everything a bitnet_gguf owns besides the image lives in one arena, freed at once. */
typedef struct bitnet__arena { unsigned char *blk; size_t used, cap; } bitnet__arena;
#define BITNET__ARENA_HDR 64

static void *bitnet__arena_alloc(bitnet__arena *a, size_t n) {
    unsigned char *b;
    size_t cap;
    if (n > SIZE_MAX - 2 * BITNET__ARENA_HDR - 15) {
        bitnet__err(BITNET_ERR_OVERFLOW, "arena allocation of %zu bytes overflows", n);
        return NULL;
    }
    n = (n + 15) & ~(size_t)15;
    if (a->blk && a->cap - a->used >= n) {
        b = a->blk + a->used;
        a->used += n;
        return b;
    }
    cap = BITNET__ARENA_HDR + BITNET__MAX(n, (size_t)65536);
    b = (unsigned char *)bitnet__malloc(cap);
    if (!b) return NULL;
    memcpy(b, &a->blk, sizeof a->blk); /* link the previous block */
    a->blk = b;
    a->used = BITNET__ARENA_HDR + n;
    a->cap = cap;
    return b + BITNET__ARENA_HDR;
}
static void bitnet__arena_free(bitnet__arena *a) {
    while (a->blk) {
        unsigned char *next;
        memcpy(&next, a->blk, sizeof next);
        bitnet__free(a->blk);
        a->blk = next;
    }
}

struct bitnet_gguf {
    const uint8_t *base;
    size_t size;
    void *map;               /* mmap'd image (munmap on close), or */
    void *owned;             /* an image read into memory */
    uint32_t version, alignment;
    uint64_t n_kv, n_tensors, data_offset;
    bitnet__gguf_kv *kv;
    bitnet_tensor_info *tensors;
    uint32_t *kv_hash, *t_hash; /* open addressing: index + 1, 0 = empty */
    size_t kv_cap, t_cap;       /* powers of two */
    bitnet__arena arena;
};

static int bitnet__host_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}
static uint32_t bitnet__le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t bitnet__le64(const uint8_t *p) { return (uint64_t)bitnet__le32(p) | (uint64_t)bitnet__le32(p + 4) << 32; }

static uint64_t bitnet__fnv1a(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}
/* Slot for name in a table whose entries name(i) are the NUL-terminated names: either the slot
   holding it or the empty slot where it would go. */
static size_t bitnet__gguf_slot(const uint32_t *tab, size_t cap, const char *name, size_t len,
                                const bitnet__gguf_kv *kv, const bitnet_tensor_info *ti) {
    size_t i = (size_t)bitnet__fnv1a(name, len) & (cap - 1);
    for (;; i = (i + 1) & (cap - 1)) {
        const char *other;
        if (!tab[i]) return i;
        other = kv ? kv[tab[i] - 1].key : ti[tab[i] - 1].name;
        if (strncmp(other, name, len) == 0 && other[len] == 0) return i;
    }
}
static size_t bitnet__hash_cap(uint64_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* n <= 2^20, so this stays small */
    return cap;
}

BITNET_API const char *bitnet_gguf_type_name(bitnet_gguf_type t) {
    static const char *const names[] = {"UINT8", "INT8",   "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                        "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64", "FLOAT64"};
    return ((unsigned)t < BITNET_GGUF_TYPE_COUNT) ? names[t] : "?";
}
BITNET_API const char *bitnet_tensor_type_name(bitnet_tensor_type t) {
    switch (t) {
    case BITNET_TENSOR_F32: return "F32";
    case BITNET_TENSOR_F16: return "F16";
    case BITNET_TENSOR_Q8_0: return "Q8_0";
    case BITNET_TENSOR_BF16: return "BF16";
    case BITNET_TENSOR_I2_S: return "I2_S";
    default: return "?";
    }
}
/* ggml's names for the type ids this library does not read, for error messages. */
static const char *bitnet__ggml_type_name(uint32_t t) {
    static const char *const names[] = {"F32", "F16", "Q4_0", "Q4_1", "?", "?", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",
                                        "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",
                                        "I64", "F64", "IQ1_M", "BF16", "?", "?", "?", "TQ1_0", "TQ2_0", "I2_S",
                                        "I8_S", "TL1", "TL2"};
    return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static size_t bitnet__gguf_scalar_size(uint32_t t) {
    switch (t) {
    case BITNET_GGUF_UINT8: case BITNET_GGUF_INT8: case BITNET_GGUF_BOOL: return 1;
    case BITNET_GGUF_UINT16: case BITNET_GGUF_INT16: return 2;
    case BITNET_GGUF_UINT32: case BITNET_GGUF_INT32: case BITNET_GGUF_FLOAT32: return 4;
    case BITNET_GGUF_UINT64: case BITNET_GGUF_INT64: case BITNET_GGUF_FLOAT64: return 8;
    default: return 0; /* STRING, ARRAY, unknown */
    }
}

BITNET_API bitnet_result bitnet_tensor_nbytes(bitnet_tensor_type type, const uint64_t ne[4], uint64_t *out) {
    uint64_t n = 1;
    int d;
    BITNET__CHECK_PTR(ne);
    BITNET__CHECK_PTR(out);
    for (d = 0; d < 4; d++) {
        if (ne[d] == 0) return bitnet__err(BITNET_ERR_BAD_SHAPE, "dimension %d is 0", d);
        if (ne[d] > (uint64_t)INT64_MAX || n > (uint64_t)INT64_MAX / ne[d])
            return bitnet__err(BITNET_ERR_OVERFLOW, "element count [%llu, %llu, %llu, %llu] overflows",
                               (unsigned long long)ne[0], (unsigned long long)ne[1], (unsigned long long)ne[2],
                               (unsigned long long)ne[3]);
        n *= ne[d];
    }
    switch (type) {
    case BITNET_TENSOR_F32:
        if (n > UINT64_MAX / 4) return bitnet__err(BITNET_ERR_OVERFLOW, "F32 byte size overflows");
        *out = n * 4;
        return BITNET_OK;
    case BITNET_TENSOR_F16:
    case BITNET_TENSOR_BF16: *out = n * 2; return BITNET_OK;
    case BITNET_TENSOR_Q8_0:
        if (ne[0] % 32) return bitnet__err(BITNET_ERR_BAD_SHAPE, "Q8_0 row of %llu is not a multiple of 32", (unsigned long long)ne[0]);
        *out = n / 32 * 34;
        return BITNET_OK;
    case BITNET_TENSOR_I2_S: /* bitnet.cpp: elements/4 packed, then a 32-byte tail holding the scale */
        if (ne[0] % BITNET_I2S_BLOCK)
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "I2_S row of %llu is not a multiple of %d", (unsigned long long)ne[0],
                               BITNET_I2S_BLOCK);
        *out = n / 4 + 32;
        return BITNET_OK;
    default: return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "tensor type %d is not one of F32, F16, BF16, Q8_0, I2_S", (int)type);
    }
}

/* ---- the bounds-checked cursor ---------------------------------------------------------------- */
typedef struct bitnet__rd { const uint8_t *base; size_t size, pos; } bitnet__rd;

static bitnet_result bitnet__rd_need(bitnet__rd *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return bitnet__err(BITNET_ERR_TRUNCATED, "GGUF truncated: %s at offset %zu needs %llu bytes, only %zu remain", what,
                           r->pos, (unsigned long long)n, r->size - r->pos);
    return BITNET_OK;
}
static bitnet_result bitnet__rd_u32(bitnet__rd *r, uint32_t *v, const char *what) {
    BITNET__TRY(bitnet__rd_need(r, 4, what));
    *v = bitnet__le32(r->base + r->pos);
    r->pos += 4;
    return BITNET_OK;
}
static bitnet_result bitnet__rd_u64(bitnet__rd *r, uint64_t *v, const char *what) {
    BITNET__TRY(bitnet__rd_need(r, 8, what));
    *v = bitnet__le64(r->base + r->pos);
    r->pos += 8;
    return BITNET_OK;
}
/* n items of at least min_bytes each: more than the whole file can hold is corruption (never a
   truncation), more than what remains is a truncation. Makes n safe to allocate from. */
static bitnet_result bitnet__rd_count(bitnet__rd *r, uint64_t n, uint64_t min_bytes, const char *what) {
    if (n > r->size / min_bytes)
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt or truncated: %s = %llu at offset %zu cannot fit in a %zu-byte file", what,
                           (unsigned long long)n, r->pos, r->size);
    return bitnet__rd_need(r, n * min_bytes, what);
}
static bitnet_result bitnet__rd_str(bitnet__rd *r, bitnet_gguf_str *s, const char *what) {
    uint64_t len;
    BITNET__TRY(bitnet__rd_u64(r, &len, what));
    BITNET__TRY(bitnet__rd_count(r, len, 1, what));
    s->ptr = (const char *)(r->base + r->pos);
    s->len = len;
    r->pos += (size_t)len;
    return BITNET_OK;
}
/* Names (keys, tensor names) become NUL-terminated copies, so they must not be empty or hold NULs. */
static bitnet_result bitnet__gguf_name(bitnet_gguf *g, bitnet__rd *r, const char **out, const char *what) {
    bitnet_gguf_str s;
    char *p;
    BITNET__TRY(bitnet__rd_str(r, &s, what));
    if (s.len == 0) return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt: %s at offset %zu is empty", what, r->pos - 8);
    if (memchr(s.ptr, 0, (size_t)s.len))
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt: %s at offset %zu contains a NUL byte", what,
                           r->pos - (size_t)s.len);
    p = (char *)bitnet__arena_alloc(&g->arena, (size_t)s.len + 1);
    if (!p) return BITNET_ERR_OUT_OF_MEMORY;
    memcpy(p, s.ptr, (size_t)s.len);
    p[s.len] = 0;
    *out = p;
    return BITNET_OK;
}

static bitnet_result bitnet__gguf_read_value(bitnet_gguf *g, bitnet__rd *r, bitnet__gguf_kv *kv) {
    char what[96];
    uint32_t t;
    size_t esz;
    snprintf(what, sizeof what, "value type of key '%.48s'", kv->key);
    BITNET__TRY(bitnet__rd_u32(r, &t, what));
    if (t >= BITNET_GGUF_TYPE_COUNT)
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt: key '%s' has unknown value type %u", kv->key, t);
    kv->type = (bitnet_gguf_type)t;
    snprintf(what, sizeof what, "value of key '%.48s'", kv->key);
    if (t == BITNET_GGUF_STRING) {
        bitnet_gguf_str s;
        BITNET__TRY(bitnet__rd_str(r, &s, what));
        kv->raw = (const uint8_t *)s.ptr;
        kv->len = s.len;
        return BITNET_OK;
    }
    if (t != BITNET_GGUF_ARRAY) {
        esz = bitnet__gguf_scalar_size(t);
        BITNET__TRY(bitnet__rd_need(r, esz, what));
        kv->raw = r->base + r->pos;
        r->pos += esz;
        return BITNET_OK;
    }
    snprintf(what, sizeof what, "element type of array '%.48s'", kv->key);
    BITNET__TRY(bitnet__rd_u32(r, &t, what));
    if (t == BITNET_GGUF_ARRAY)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: key '%s' is an array of arrays (nested arrays are not supported)", kv->key);
    if (t >= BITNET_GGUF_TYPE_COUNT)
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt: array '%s' has unknown element type %u", kv->key, t);
    kv->elem = (bitnet_gguf_type)t;
    snprintf(what, sizeof what, "length of array '%.48s'", kv->key);
    BITNET__TRY(bitnet__rd_u64(r, &kv->count, what));
    snprintf(what, sizeof what, "array '%.48s'", kv->key);
    if (t == BITNET_GGUF_STRING) {
        bitnet_gguf_str *tab;
        uint64_t i;
        size_t tab_bytes;
        BITNET__TRY(bitnet__rd_count(r, kv->count, 8, what));
        if (!bitnet__mul_size((size_t)(kv->count ? kv->count : 1), sizeof *tab, &tab_bytes)) /* 32-bit hosts */
            return bitnet__err(BITNET_ERR_OVERFLOW, "GGUF: array '%s' of %llu strings is too large", kv->key,
                               (unsigned long long)kv->count);
        tab = (bitnet_gguf_str *)bitnet__arena_alloc(&g->arena, tab_bytes);
        if (!tab) return BITNET_ERR_OUT_OF_MEMORY;
        for (i = 0; i < kv->count; i++) { /* the context is formatted only on failure: arrays are long */
            bitnet_result e = bitnet__rd_str(r, &tab[i], "a string");
            if (e != BITNET_OK) {
                char why[256];
                memcpy(why, bitnet__errbuf, sizeof why - 1);
                why[sizeof why - 1] = 0;
                return bitnet__err(e, "%s (element %llu of array '%s')", why, (unsigned long long)i, kv->key);
            }
        }
        kv->arr = tab;
        return BITNET_OK;
    }
    esz = bitnet__gguf_scalar_size(t);
    BITNET__TRY(bitnet__rd_count(r, kv->count, esz, what));
    kv->arr = bitnet__arena_alloc(&g->arena, kv->count ? (size_t)kv->count * esz : 1);
    if (!kv->arr) return BITNET_ERR_OUT_OF_MEMORY;
    memcpy(kv->arr, r->base + r->pos, (size_t)kv->count * esz);
    r->pos += (size_t)kv->count * esz;
    return BITNET_OK;
}

static bitnet_result bitnet__gguf_parse(bitnet_gguf *g) {
    bitnet__rd r;
    char what[96];
    uint64_t i;
    int64_t ai;
    r.base = g->base;
    r.size = g->size;
    r.pos = 0;
    BITNET__TRY(bitnet__rd_need(&r, 4, "magic"));
    if (memcmp(g->base, BITNET__GGUF_MAGIC, 4) != 0)
        return bitnet__err(BITNET_ERR_BAD_MAGIC, "not a GGUF file: starts with bytes %02x %02x %02x %02x, not \"GGUF\"",
                           g->base[0], g->base[1], g->base[2], g->base[3]);
    r.pos = 4;
    BITNET__TRY(bitnet__rd_u32(&r, &g->version, "version"));
    if (g->version != 2 && g->version != 3) {
        if (g->version == 1) return bitnet__err(BITNET_ERR_BAD_VERSION, "GGUF version 1 is not supported (only 2 and 3)");
        if ((g->version & 0xffff) == 0 && (g->version >> 24) >= 1 && (g->version >> 24) <= 3)
            return bitnet__err(BITNET_ERR_BAD_VERSION, "big-endian GGUF files are not supported");
        return bitnet__err(BITNET_ERR_BAD_VERSION, "GGUF version %u is not supported (only 2 and 3)", g->version);
    }
    BITNET__TRY(bitnet__rd_u64(&r, &g->n_tensors, "tensor count"));
    BITNET__TRY(bitnet__rd_u64(&r, &g->n_kv, "metadata count"));
    if (g->n_kv > BITNET__GGUF_MAX_KV || g->n_kv > r.size / BITNET__GGUF_MIN_KV_BYTES)
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt or truncated: %llu metadata entries cannot fit in a %zu-byte file",
                           (unsigned long long)g->n_kv, r.size);
    if (g->n_tensors > BITNET__GGUF_MAX_TENSORS || g->n_tensors > r.size / BITNET__GGUF_MIN_TENSOR_BYTES)
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF corrupt or truncated: %llu tensors cannot fit in a %zu-byte file",
                           (unsigned long long)g->n_tensors, r.size);
    g->kv_cap = bitnet__hash_cap(g->n_kv);
    g->t_cap = bitnet__hash_cap(g->n_tensors);
    g->kv = (bitnet__gguf_kv *)bitnet__arena_alloc(&g->arena, (size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kv);
    g->tensors = (bitnet_tensor_info *)bitnet__arena_alloc(&g->arena, (size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *g->tensors);
    g->kv_hash = (uint32_t *)bitnet__arena_alloc(&g->arena, g->kv_cap * sizeof(uint32_t));
    g->t_hash = (uint32_t *)bitnet__arena_alloc(&g->arena, g->t_cap * sizeof(uint32_t));
    if (!g->kv || !g->tensors || !g->kv_hash || !g->t_hash) return BITNET_ERR_OUT_OF_MEMORY;
    memset(g->kv, 0, (size_t)g->n_kv * sizeof *g->kv);
    memset(g->tensors, 0, (size_t)g->n_tensors * sizeof *g->tensors);
    memset(g->kv_hash, 0, g->kv_cap * sizeof(uint32_t));
    memset(g->t_hash, 0, g->t_cap * sizeof(uint32_t));

    for (i = 0; i < g->n_kv; i++) {
        bitnet__gguf_kv *kv = &g->kv[i];
        size_t slot;
        snprintf(what, sizeof what, "name of metadata key %llu", (unsigned long long)i);
        BITNET__TRY(bitnet__gguf_name(g, &r, &kv->key, what));
        slot = bitnet__gguf_slot(g->kv_hash, g->kv_cap, kv->key, strlen(kv->key), g->kv, NULL);
        if (g->kv_hash[slot]) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: duplicate metadata key '%s'", kv->key);
        BITNET__TRY(bitnet__gguf_read_value(g, &r, kv));
        g->kv_hash[slot] = (uint32_t)(i + 1);
    }

    g->alignment = BITNET__GGUF_DEFAULT_ALIGN;
    ai = bitnet_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        uint32_t a;
        if (g->kv[ai].type != BITNET_GGUF_UINT32)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: general.alignment is %s, not UINT32",
                               bitnet_gguf_type_name(g->kv[ai].type));
        a = bitnet__le32(g->kv[ai].raw);
        if (a == 0 || (a & (a - 1)))
            return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: general.alignment = %u is not a power of two", a);
        g->alignment = a;
    }

    for (i = 0; i < g->n_tensors; i++) {
        bitnet_tensor_info *ti = &g->tensors[i];
        uint32_t nd, type;
        size_t slot;
        int d;
        bitnet_result res;
        snprintf(what, sizeof what, "name of tensor %llu", (unsigned long long)i);
        BITNET__TRY(bitnet__gguf_name(g, &r, &ti->name, what));
        slot = bitnet__gguf_slot(g->t_hash, g->t_cap, ti->name, strlen(ti->name), NULL, g->tensors);
        if (g->t_hash[slot]) return bitnet__err(BITNET_ERR_DUPLICATE_TENSOR, "GGUF: tensor '%s' appears twice", ti->name);
        g->t_hash[slot] = (uint32_t)(i + 1);
        snprintf(what, sizeof what, "dimension count of tensor '%.48s'", ti->name);
        BITNET__TRY(bitnet__rd_u32(&r, &nd, what));
        if (nd < 1 || nd > 4)
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "GGUF: tensor '%s' has %u dimensions (1 to 4 allowed)", ti->name, nd);
        ti->n_dims = (int)nd;
        snprintf(what, sizeof what, "shape of tensor '%.48s'", ti->name);
        for (d = 0; d < 4; d++) {
            ti->ne[d] = 1;
            if (d < (int)nd) BITNET__TRY(bitnet__rd_u64(&r, &ti->ne[d], what));
        }
        snprintf(what, sizeof what, "type of tensor '%.48s'", ti->name);
        BITNET__TRY(bitnet__rd_u32(&r, &type, what));
        snprintf(what, sizeof what, "offset of tensor '%.48s'", ti->name);
        BITNET__TRY(bitnet__rd_u64(&r, &ti->offset, what));
        if (type != BITNET_TENSOR_F32 && type != BITNET_TENSOR_F16 && type != BITNET_TENSOR_Q8_0 &&
            type != BITNET_TENSOR_BF16 && type != BITNET_TENSOR_I2_S)
            return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE,
                               "GGUF: tensor '%s' has type %u (%s), not one of F32 (0), F16 (1), Q8_0 (8), BF16 (30), I2_S (36)",
                               ti->name, type, bitnet__ggml_type_name(type));
        ti->type = (bitnet_tensor_type)type;
        res = bitnet_tensor_nbytes(ti->type, ti->ne, &ti->bytes);
        if (res != BITNET_OK) {
            char why[160];
            memcpy(why, bitnet__errbuf, sizeof why - 1); /* the detail, before errbuf is rewritten */
            why[sizeof why - 1] = 0;
            return bitnet__err(res, "GGUF: tensor '%s' (%s [%llu, %llu, %llu, %llu]): %s", ti->name,
                               bitnet_tensor_type_name(ti->type), (unsigned long long)ti->ne[0],
                               (unsigned long long)ti->ne[1], (unsigned long long)ti->ne[2],
                               (unsigned long long)ti->ne[3], why);
        }
        if (ti->offset % g->alignment)
            return bitnet__err(BITNET_ERR_ALIGNMENT, "GGUF: tensor '%s' offset %llu is not a multiple of the alignment %u",
                               ti->name, (unsigned long long)ti->offset, g->alignment);
    }

    /* The data section starts at the next multiple of the alignment. */
    g->data_offset = ((uint64_t)r.pos + g->alignment - 1) / g->alignment * g->alignment;
    for (i = 0; i < g->n_tensors; i++) {
        bitnet_tensor_info *ti = &g->tensors[i];
        uint64_t start = g->data_offset + ti->offset, end = start + ti->bytes;
        if (ti->offset > UINT64_MAX - g->data_offset || ti->bytes > UINT64_MAX - start)
            return bitnet__err(BITNET_ERR_OVERFLOW, "GGUF: tensor '%s' offset %llu + %llu bytes overflows", ti->name,
                               (unsigned long long)ti->offset, (unsigned long long)ti->bytes);
        if (end > g->size)
            return bitnet__err(BITNET_ERR_TRUNCATED,
                               "GGUF truncated: tensor '%s' occupies bytes %llu to %llu, but the file has %zu", ti->name,
                               (unsigned long long)start, (unsigned long long)end, g->size);
        ti->data = g->base + start;
    }
    return BITNET_OK;
}

static bitnet_result bitnet__gguf_new(const uint8_t *base, size_t size, bitnet_gguf **out) {
    bitnet_gguf *g;
    if (!bitnet__host_le()) return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: only little-endian hosts are supported");
    g = (bitnet_gguf *)bitnet__calloc(1, sizeof *g);
    if (!g) return BITNET_ERR_OUT_OF_MEMORY;
    g->base = base;
    g->size = size;
    *out = g;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gguf_open_memory(const void *data, size_t size, bitnet_gguf **out) {
    bitnet_gguf *g;
    bitnet_result r;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (!data && size) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gguf_open_memory: data is NULL");
    BITNET__TRY(bitnet__gguf_new((const uint8_t *)(data ? data : ""), size, &g));
    r = bitnet__gguf_parse(g);
    if (r != BITNET_OK) {
        bitnet_gguf_close(g);
        return r;
    }
    *out = g;
    return BITNET_OK;
}

static int bitnet__file_size(FILE *f, uint64_t *size) {
#if defined(_WIN32)
    __int64 n;
    if (_fseeki64(f, 0, SEEK_END) != 0 || (n = _ftelli64(f)) < 0 || _fseeki64(f, 0, SEEK_SET) != 0) return -1;
    *size = (uint64_t)n;
#else
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    *size = (uint64_t)st.st_size;
#endif
    return 0;
}

BITNET_API bitnet_result bitnet_gguf_open(const char *path, bitnet_gguf **out) { return bitnet_gguf_open_ex(path, 0, out); }

BITNET_API bitnet_result bitnet_gguf_open_ex(const char *path, unsigned flags, bitnet_gguf **out) {
    FILE *f;
    uint64_t fsize;
    size_t size, got = 0;
    void *map = NULL, *owned = NULL;
    bitnet_gguf *g = NULL;
    bitnet_result r;
    BITNET__CHECK_PTR(path);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (flags & ~BITNET_GGUF_NO_MMAP) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_open_ex: unknown flags 0x%x", flags);
    f = fopen(path, "rb");
    if (!f) return bitnet__err(BITNET_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (bitnet__file_size(f, &fsize) != 0) {
        fclose(f);
        return bitnet__err(BITNET_ERR_IO, "cannot get the size of '%s' (not a regular file?)", path);
    }
    if (fsize > (uint64_t)SIZE_MAX) {
        fclose(f);
        return bitnet__err(BITNET_ERR_OVERFLOW, "'%s' (%llu bytes) does not fit in the address space", path, (unsigned long long)fsize);
    }
    size = (size_t)fsize;
#if !defined(_WIN32) && !defined(BITNET_NO_MMAP)
    if (!(flags & BITNET_GGUF_NO_MMAP) && size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (map == MAP_FAILED) {
            bitnet__log(BITNET_LOG_INFO, "mmap of '%s' failed (%s); reading it into memory", path, strerror(errno));
            map = NULL;
        }
    }
#endif
    if (!map) {
        owned = bitnet__malloc(size ? size : 1);
        if (!owned) {
            fclose(f);
            return bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read '%s'", size, path);
        }
        while (got < size) {
            size_t n = fread((char *)owned + got, 1, size - got, f);
            if (n == 0) break;
            got += n;
        }
        if (got != size) {
            int e = ferror(f) ? errno : 0;
            fclose(f);
            bitnet__free(owned);
            return bitnet__err(BITNET_ERR_IO, "reading '%s' stopped after %zu of %zu bytes%s%s", path, got, size,
                               e ? ": " : "", e ? strerror(e) : "");
        }
    }
    fclose(f);
    r = bitnet__gguf_new((const uint8_t *)(map ? map : owned), size, &g);
    if (r == BITNET_OK) {
        g->map = map;
        g->owned = owned;
        r = bitnet__gguf_parse(g);
        if (r != BITNET_OK) {
            char msg[sizeof bitnet__errbuf];
            snprintf(msg, sizeof msg, "%s", bitnet__errbuf);
            bitnet_gguf_close(g);
            return bitnet__err(r, "%s: %s", path, msg);
        }
        *out = g;
        return BITNET_OK;
    }
#if !defined(_WIN32) && !defined(BITNET_NO_MMAP)
    if (map) munmap(map, size);
#endif
    bitnet__free(owned);
    return r;
}

BITNET_API void bitnet_gguf_close(bitnet_gguf *g) {
    if (!g) return;
#if !defined(_WIN32) && !defined(BITNET_NO_MMAP)
    if (g->map) munmap(g->map, g->size);
#endif
    bitnet__free(g->owned);
    bitnet__arena_free(&g->arena);
    bitnet__free(g);
}

BITNET_API uint32_t bitnet_gguf_version(const bitnet_gguf *g) { return g ? g->version : 0; }
BITNET_API uint64_t bitnet_gguf_kv_count(const bitnet_gguf *g) { return g ? g->n_kv : 0; }
BITNET_API uint64_t bitnet_gguf_tensor_count(const bitnet_gguf *g) { return g ? g->n_tensors : 0; }
BITNET_API uint32_t bitnet_gguf_alignment(const bitnet_gguf *g) { return g ? g->alignment : 0; }
BITNET_API uint64_t bitnet_gguf_data_offset(const bitnet_gguf *g) { return g ? g->data_offset : 0; }
BITNET_API uint64_t bitnet_gguf_size(const bitnet_gguf *g) { return g ? (uint64_t)g->size : 0; }
BITNET_API int bitnet_gguf_is_mapped(const bitnet_gguf *g) { return g && g->map != NULL; }

BITNET_API int64_t bitnet_gguf_find_key(const bitnet_gguf *g, const char *key) {
    size_t slot;
    if (!g || !key) return -1;
    slot = bitnet__gguf_slot(g->kv_hash, g->kv_cap, key, strlen(key), g->kv, NULL);
    return g->kv_hash[slot] ? (int64_t)g->kv_hash[slot] - 1 : -1;
}
BITNET_API const char *bitnet_gguf_key_name(const bitnet_gguf *g, uint64_t i) { return (g && i < g->n_kv) ? g->kv[i].key : NULL; }
BITNET_API bitnet_gguf_type bitnet_gguf_key_type(const bitnet_gguf *g, uint64_t i) {
    return (g && i < g->n_kv) ? g->kv[i].type : BITNET_GGUF_TYPE_COUNT;
}

static bitnet_result bitnet__gguf_lookup(const bitnet_gguf *g, const char *key, const char *fn, const bitnet__gguf_kv **kv) {
    int64_t i;
    if (!g || !key) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: g and key must not be NULL", fn);
    i = bitnet_gguf_find_key(g, key);
    if (i < 0) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: key '%s' is missing", key);
    *kv = &g->kv[i];
    return BITNET_OK;
}
static bitnet_result bitnet__gguf_wrong_type(const bitnet__gguf_kv *kv, const char *want) {
    return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: key '%s' is %s, expected %s", kv->key,
                       kv->type == BITNET_GGUF_ARRAY ? "an array" : bitnet_gguf_type_name(kv->type), want);
}
/* An integer scalar as (negative, magnitude bits): *is_neg and *v. */
static bitnet_result bitnet__gguf_int(const bitnet__gguf_kv *kv, const char *want, int *is_neg, uint64_t *u, int64_t *s) {
    const uint8_t *p = kv->raw;
    int64_t sv = 0;
    uint64_t uv = 0;
    int sgn = 0;
    switch (kv->type) {
    case BITNET_GGUF_UINT8: uv = p[0]; break;
    case BITNET_GGUF_UINT16: uv = (uint64_t)p[0] | (uint64_t)p[1] << 8; break;
    case BITNET_GGUF_UINT32: uv = bitnet__le32(p); break;
    case BITNET_GGUF_UINT64: uv = bitnet__le64(p); break;
    case BITNET_GGUF_INT8: sv = (int8_t)p[0]; sgn = 1; break;
    case BITNET_GGUF_INT16: sv = (int16_t)(uint16_t)((unsigned)p[0] | (unsigned)p[1] << 8); sgn = 1; break;
    case BITNET_GGUF_INT32: sv = (int32_t)bitnet__le32(p); sgn = 1; break;
    case BITNET_GGUF_INT64: sv = (int64_t)bitnet__le64(p); sgn = 1; break;
    default: return bitnet__gguf_wrong_type(kv, want);
    }
    if (sgn) {
        *is_neg = sv < 0;
        *s = sv;
        *u = sv < 0 ? 0 : (uint64_t)sv;
    } else {
        *is_neg = 0;
        *u = uv;
        *s = uv > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)uv;
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gguf_get_u64(const bitnet_gguf *g, const char *key, uint64_t *out) {
    const bitnet__gguf_kv *kv = NULL;
    int neg = 0;
    uint64_t u = 0;
    int64_t s = 0;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    BITNET__TRY(bitnet__gguf_int(kv, "an unsigned integer", &neg, &u, &s));
    if (neg) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: key '%s' is %lld, expected a non-negative value", key, (long long)s);
    *out = u;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_u32(const bitnet_gguf *g, const char *key, uint32_t *out) {
    uint64_t v = 0;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet_gguf_get_u64(g, key, &v));
    if (v > UINT32_MAX) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: key '%s' = %llu does not fit 32 bits", key, (unsigned long long)v);
    *out = (uint32_t)v;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_i64(const bitnet_gguf *g, const char *key, int64_t *out) {
    const bitnet__gguf_kv *kv = NULL;
    int neg = 0;
    uint64_t u = 0;
    int64_t s = 0;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    BITNET__TRY(bitnet__gguf_int(kv, "an integer", &neg, &u, &s));
    if (!neg && u > (uint64_t)INT64_MAX)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: key '%s' = %llu does not fit int64", key, (unsigned long long)u);
    *out = s;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_f64(const bitnet_gguf *g, const char *key, double *out) {
    const bitnet__gguf_kv *kv = NULL;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    if (kv->type == BITNET_GGUF_FLOAT32) {
        float f;
        uint32_t b = bitnet__le32(kv->raw);
        memcpy(&f, &b, 4);
        *out = f;
    } else if (kv->type == BITNET_GGUF_FLOAT64) {
        uint64_t b = bitnet__le64(kv->raw);
        memcpy(out, &b, 8);
    } else {
        return bitnet__gguf_wrong_type(kv, "FLOAT32 or FLOAT64");
    }
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_f32(const bitnet_gguf *g, const char *key, float *out) {
    double d = 0;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet_gguf_get_f64(g, key, &d));
    *out = (float)d;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_bool(const bitnet_gguf *g, const char *key, int *out) {
    const bitnet__gguf_kv *kv = NULL;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    if (kv->type != BITNET_GGUF_BOOL) return bitnet__gguf_wrong_type(kv, "BOOL");
    *out = kv->raw[0] != 0;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_str(const bitnet_gguf *g, const char *key, bitnet_gguf_str *out) {
    const bitnet__gguf_kv *kv = NULL;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    if (kv->type != BITNET_GGUF_STRING) return bitnet__gguf_wrong_type(kv, "STRING");
    out->ptr = (const char *)kv->raw;
    out->len = kv->len;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_get_arr(const bitnet_gguf *g, const char *key, bitnet_gguf_type *elem_type, uint64_t *count) {
    const bitnet__gguf_kv *kv = NULL;
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    if (kv->type != BITNET_GGUF_ARRAY) return bitnet__gguf_wrong_type(kv, "an array");
    if (elem_type) *elem_type = kv->elem;
    if (count) *count = kv->count;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_arr_str(const bitnet_gguf *g, const char *key, uint64_t i, bitnet_gguf_str *out) {
    const bitnet__gguf_kv *kv = NULL;
    BITNET__CHECK_PTR(out);
    BITNET__TRY(bitnet__gguf_lookup(g, key, __func__, &kv));
    if (kv->type != BITNET_GGUF_ARRAY || kv->elem != BITNET_GGUF_STRING) return bitnet__gguf_wrong_type(kv, "an array of STRING");
    if (i >= kv->count)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "GGUF: index %llu is past the %llu strings of '%s'", (unsigned long long)i,
                           (unsigned long long)kv->count, key);
    *out = ((const bitnet_gguf_str *)kv->arr)[i];
    return BITNET_OK;
}
BITNET_API const void *bitnet_gguf_arr_data(const bitnet_gguf *g, const char *key) {
    const bitnet__gguf_kv *kv = NULL;
    if (bitnet__gguf_lookup(g, key, __func__, &kv) != BITNET_OK) return NULL;
    if (kv->type != BITNET_GGUF_ARRAY || kv->elem == BITNET_GGUF_STRING) {
        bitnet__gguf_wrong_type(kv, "a numeric array");
        return NULL;
    }
    return kv->arr;
}
BITNET_API bitnet_result bitnet_gguf_tensor(const bitnet_gguf *g, uint64_t i, bitnet_tensor_info *out) {
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(out);
    if (i >= g->n_tensors)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_tensor: index %llu, the file has %llu tensors",
                           (unsigned long long)i, (unsigned long long)g->n_tensors);
    *out = g->tensors[i];
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gguf_find_tensor(const bitnet_gguf *g, const char *name, bitnet_tensor_info *out) {
    size_t slot;
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(name);
    BITNET__CHECK_PTR(out);
    slot = bitnet__gguf_slot(g->t_hash, g->t_cap, name, strlen(name), NULL, g->tensors);
    if (!g->t_hash[slot]) return bitnet__err(BITNET_ERR_MISSING_TENSOR, "GGUF: tensor '%s' is missing", name);
    *out = g->tensors[g->t_hash[slot] - 1];
    return BITNET_OK;
}

/* ---- the BitNet architecture check ------------------------------------------------------------ */

/* <arch>.<suffix> as an int32 in [1, INT32_MAX]; *v keeps its value when optional and absent. */
static bitnet_result bitnet__gguf_hparam(const bitnet_gguf *g, const char *arch, const char *suffix, int required, int32_t *v) {
    char key[128];
    uint64_t u;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (bitnet_gguf_find_key(g, key) < 0) {
        if (required) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: required key '%s' is missing", key);
        return BITNET_OK;
    }
    BITNET__TRY(bitnet_gguf_get_u64(g, key, &u));
    if (u == 0 || u > INT32_MAX)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s = %llu (must be 1 to %d)", key, (unsigned long long)u, INT32_MAX);
    *v = (int32_t)u;
    return BITNET_OK;
}
static bitnet_result bitnet__gguf_hparam_f(const bitnet_gguf *g, const char *arch, const char *suffix, int required, float *v) {
    char key[128];
    float f;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (bitnet_gguf_find_key(g, key) < 0) {
        if (required) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: required key '%s' is missing", key);
        return BITNET_OK;
    }
    BITNET__TRY(bitnet_gguf_get_f32(g, key, &f));
    if (!(f > 0) || f > FLT_MAX) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s = %g (must be finite and > 0)", key, (double)f);
    *v = f;
    return BITNET_OK;
}
/* The types each role accepts: ternary matrices come as I2_S, or as float latent weights that the
   loader quantizes; the rest are float. */
#define BITNET__GGUF_TERNARY 0
#define BITNET__GGUF_FLOAT 1
static int bitnet__gguf_role_ok(int role, bitnet_tensor_type t) {
    return t == BITNET_TENSOR_F32 || t == BITNET_TENSOR_F16 || t == BITNET_TENSOR_BF16 ||
           (role == BITNET__GGUF_TERNARY && t == BITNET_TENSOR_I2_S);
}
/* A tensor of this role and shape [ne0, ne1] (ne1 = 1 for vectors); optional ones may be absent. */
static bitnet_result bitnet__gguf_want(const bitnet_gguf *g, const char *name, int role, uint64_t ne0, uint64_t ne1,
                                       int optional) {
    bitnet_tensor_info t;
    if (bitnet_gguf_find_tensor(g, name, &t) != BITNET_OK) {
        if (optional) return BITNET_OK;
        return bitnet__err(BITNET_ERR_MISSING_TENSOR, "GGUF: tensor '%s' is missing", name);
    }
    if (!bitnet__gguf_role_ok(role, t.type))
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor '%s' is %s, a BitNet model needs %s here", name,
                           bitnet_tensor_type_name(t.type), role == BITNET__GGUF_TERNARY ? "I2_S, F32, F16 or BF16" : "F32, F16 or BF16");
    if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != 1 || t.ne[3] != 1)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "GGUF: tensor '%s' has shape [%llu, %llu, %llu, %llu], the hyperparameters say [%llu, %llu]",
                           name, (unsigned long long)t.ne[0], (unsigned long long)t.ne[1], (unsigned long long)t.ne[2],
                           (unsigned long long)t.ne[3], (unsigned long long)ne0, (unsigned long long)ne1);
    if (t.type == BITNET_TENSOR_I2_S) { /* the per-tensor scale after the packed weights */
        float scale;
        memcpy(&scale, (const uint8_t *)t.data + t.bytes - 32, 4);
        if (!(scale >= 0 && scale <= FLT_MAX))
            return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor '%s' has the scale %g (must be finite and >= 0)", name, (double)scale);
    }
    return BITNET_OK;
}

/* Validates g as a BitNet b1.58 model and fills info; see bitnet_gguf_check_bitnet. */
static bitnet_result bitnet__gguf_check_bitnet(const bitnet_gguf *g, bitnet_model_info *info) {
    static const char *const archs[] = {"bitnet-b1.58", "bitnet-25", "bitnet"};
    bitnet_gguf_str s = {NULL, 0};
    bitnet_tensor_info emb;
    char arch[32], name[96];
    int32_t rope_dims = 0, vocab_key = 0;
    uint64_t dim, ffn, kv_dim, n_vocab = 0, i;
    int a, l;
    memset(info, 0, sizeof *info);
    info->bos = info->eos = info->eot = -1;

    BITNET__TRY(bitnet_gguf_get_str(g, "general.architecture", &s));
    for (a = 0; a < 3; a++)
        if (s.len == strlen(archs[a]) && memcmp(s.ptr, archs[a], (size_t)s.len) == 0) break;
    if (a == 3)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: architecture '%.*s' is not a BitNet one (bitnet-b1.58, bitnet-25, bitnet)",
                           (int)BITNET__MIN(s.len, 64), s.ptr);
    snprintf(arch, sizeof arch, "%s", archs[a]);
    snprintf(info->arch, sizeof info->arch, "%s", arch);

    BITNET__TRY(bitnet__gguf_hparam(g, arch, "embedding_length", 1, &info->dim));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "block_count", 1, &info->n_layers));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "attention.head_count", 1, &info->n_heads));
    info->n_kv_heads = info->n_heads;
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "attention.head_count_kv", 0, &info->n_kv_heads));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "feed_forward_length", 1, &info->ffn_dim));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "context_length", 1, &info->n_ctx_train));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "vocab_size", 0, &vocab_key));
    BITNET__TRY(bitnet__gguf_hparam(g, arch, "rope.dimension_count", 0, &rope_dims));
    info->rope_theta = 10000.0f;
    BITNET__TRY(bitnet__gguf_hparam_f(g, arch, "rope.freq_base", 0, &info->rope_theta));
    BITNET__TRY(bitnet__gguf_hparam_f(g, arch, "attention.layer_norm_rms_epsilon", 1, &info->norm_eps));

    if (info->dim % info->n_heads)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s.embedding_length %d is not divisible by head_count %d", arch,
                           info->dim, info->n_heads);
    if (info->n_heads % info->n_kv_heads)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s.attention.head_count %d is not divisible by head_count_kv %d", arch,
                           info->n_heads, info->n_kv_heads);
    info->head_dim = info->dim / info->n_heads;
    if (info->head_dim % 2)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: head dimension %d is odd (RoPE rotates pairs)", info->head_dim);
    if (rope_dims && rope_dims != info->head_dim)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: %s.rope.dimension_count %d differs from the head dimension %d (partial RoPE)",
                           arch, rope_dims, info->head_dim);
    if (info->dim % BITNET_I2S_BLOCK || info->ffn_dim % BITNET_I2S_BLOCK)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "GGUF: embedding_length %d and feed_forward_length %d must be multiples of %d (I2_S rows)",
                           info->dim, info->ffn_dim, BITNET_I2S_BLOCK);

    /* The vocabulary: the token list, else vocab_size, else the embedding. */
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        bitnet_gguf_type et;
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_vocab));
        if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: tokenizer.ggml.tokens is not an array of strings");
        if (vocab_key && (uint64_t)vocab_key != n_vocab)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s.vocab_size %d differs from the %llu tokens", arch, vocab_key,
                               (unsigned long long)n_vocab);
    } else if (vocab_key) {
        n_vocab = (uint64_t)vocab_key;
    }
    BITNET__TRY(bitnet_gguf_find_tensor(g, "token_embd.weight", &emb));
    if (!n_vocab) n_vocab = emb.ne[1];
    if (n_vocab == 0 || n_vocab > INT32_MAX) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: vocabulary of %llu tokens", (unsigned long long)n_vocab);
    info->n_vocab = (int32_t)n_vocab;
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        bitnet_gguf_type et;
        uint64_t n;
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n));
        if (et != BITNET_GGUF_INT32 || n != n_vocab)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: tokenizer.ggml.token_type is %llu x %s, expected %llu x INT32",
                               (unsigned long long)n, bitnet_gguf_type_name(et), (unsigned long long)n_vocab);
    }
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        bitnet_gguf_type et;
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.merges", &et, NULL));
        if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: tokenizer.ggml.merges is not an array of strings");
    }
    /* Every special token id (tokenizer.ggml.*_token_id) must name a token. */
    for (i = 0; i < g->n_kv; i++) {
        const char *k = g->kv[i].key;
        size_t kl = strlen(k);
        uint64_t id;
        if (strncmp(k, "tokenizer.ggml.", 15) != 0 || kl < 24 || strcmp(k + kl - 9, "_token_id") != 0) continue;
        BITNET__TRY(bitnet_gguf_get_u64(g, k, &id));
        if (id >= n_vocab)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "GGUF: %s = %llu is outside the vocabulary of %llu tokens", k,
                               (unsigned long long)id, (unsigned long long)n_vocab);
        if (strcmp(k, "tokenizer.ggml.bos_token_id") == 0) info->bos = (int32_t)id;
        if (strcmp(k, "tokenizer.ggml.eos_token_id") == 0) info->eos = (int32_t)id;
        if (strcmp(k, "tokenizer.ggml.eot_token_id") == 0) info->eot = (int32_t)id;
    }
    if (info->eot < 0 && bitnet_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        for (i = 0; i < n_vocab; i++) {
            BITNET__TRY(bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s));
            if (s.len == 10 && memcmp(s.ptr, "<|eot_id|>", 10) == 0) {
                info->eot = (int32_t)i;
                break;
            }
        }
    }

    dim = (uint64_t)info->dim;
    ffn = (uint64_t)info->ffn_dim;
    kv_dim = (uint64_t)info->n_kv_heads * (uint64_t)info->head_dim;
    BITNET__TRY(bitnet__gguf_want(g, "token_embd.weight", BITNET__GGUF_FLOAT, dim, n_vocab, 0));
    BITNET__TRY(bitnet__gguf_want(g, "output_norm.weight", BITNET__GGUF_FLOAT, dim, 1, 0));
    BITNET__TRY(bitnet__gguf_want(g, "output.weight", BITNET__GGUF_FLOAT, dim, n_vocab, 1));
    for (l = 0; l < info->n_layers; l++) {
        enum { T = BITNET__GGUF_TERNARY, F = BITNET__GGUF_FLOAT };
        static const struct { const char *name; int role; int ne0, ne1; } parts[] = {
            /* ne codes: 1 = dim, 2 = kv_dim, 3 = ffn, 0 = vector */
            {"attn_norm", F, 1, 0}, {"attn_q", T, 1, 1},      {"attn_k", T, 1, 2},        {"attn_v", T, 1, 2},
            {"attn_output", T, 1, 1}, {"attn_sub_norm", F, 1, 0}, {"ffn_norm", F, 1, 0}, {"ffn_gate", T, 1, 3},
            {"ffn_up", T, 1, 3},    {"ffn_down", T, 3, 1},    {"ffn_sub_norm", F, 3, 0}};
        size_t p;
        for (p = 0; p < sizeof parts / sizeof parts[0]; p++) {
            const uint64_t sz[4] = {1, dim, kv_dim, ffn};
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[p].name);
            BITNET__TRY(bitnet__gguf_want(g, name, parts[p].role, sz[parts[p].ne0], sz[parts[p].ne1], 0));
        }
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gguf_check_bitnet(const bitnet_gguf *g, struct bitnet_model_info *info) {
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(info);
    return bitnet__gguf_check_bitnet(g, info);
}

/* ---- the writer ------------------------------------------------------------------------------- */

typedef struct bitnet__gw_tensor {
    char *name;
    bitnet_tensor_type type;
    int n_dims;
    uint64_t ne[4], bytes, offset;
} bitnet__gw_tensor;

struct bitnet_gguf_writer {
    uint8_t *kv;                 /* the serialised key-value section */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    char **keys;                 /* copies, for the duplicate check */
    size_t keys_cap;
    bitnet__gw_tensor *t;
    size_t n_t, t_cap;
    uint32_t alignment;
    int state;                   /* 0 declaring, 1 writing data, 2 finished, 3 failed */
    FILE *f;
    char *path;
    size_t cur;                  /* tensor being written */
    uint64_t cur_done;           /* its bytes written so far */
};

/* Grows *p (elements of size esz, capacity *cap) to hold need elements. */
static bitnet_result bitnet__grow(void **p, size_t *cap, size_t need, size_t esz) {
    size_t ncap = *cap ? *cap : 16, bytes;
    void *np;
    if (need <= *cap) return BITNET_OK;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return bitnet__err(BITNET_ERR_OVERFLOW, "buffer growth overflows");
        ncap *= 2;
    }
    if (!bitnet__mul_size(ncap, esz, &bytes)) return bitnet__err(BITNET_ERR_OVERFLOW, "buffer growth overflows");
    np = bitnet__malloc(bytes);
    if (!np) return BITNET_ERR_OUT_OF_MEMORY;
    if (*p) memcpy(np, *p, *cap * esz);
    bitnet__free(*p);
    *p = np;
    *cap = ncap;
    return BITNET_OK;
}
static bitnet_result bitnet__gw_put(bitnet_gguf_writer *w, const void *data, size_t n) {
    void *p = w->kv;
    size_t need;
    if (!bitnet__add_size(w->kv_len, n, &need)) return bitnet__err(BITNET_ERR_OVERFLOW, "GGUF writer: metadata too large");
    BITNET__TRY(bitnet__grow(&p, &w->kv_cap, need, 1));
    w->kv = (uint8_t *)p;
    if (n) memcpy(w->kv + w->kv_len, data, n);
    w->kv_len += n;
    return BITNET_OK;
}
static void bitnet__put_le32(uint8_t *b, uint32_t v) {
    b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24);
}
static void bitnet__put_le64(uint8_t *b, uint64_t v) {
    bitnet__put_le32(b, (uint32_t)v);
    bitnet__put_le32(b + 4, (uint32_t)(v >> 32));
}
static bitnet_result bitnet__gw_u32(bitnet_gguf_writer *w, uint32_t v) {
    uint8_t b[4];
    bitnet__put_le32(b, v);
    return bitnet__gw_put(w, b, 4);
}
static bitnet_result bitnet__gw_str(bitnet_gguf_writer *w, const char *s, uint64_t len) {
    uint8_t b[8];
    if (len && !s) return bitnet__err(BITNET_ERR_NULL_POINTER, "GGUF writer: a string of %llu bytes has a NULL pointer", (unsigned long long)len);
    if (len > SIZE_MAX) return bitnet__err(BITNET_ERR_OVERFLOW, "GGUF writer: string too long");
    bitnet__put_le64(b, len);
    BITNET__TRY(bitnet__gw_put(w, b, 8));
    return bitnet__gw_put(w, s, (size_t)len);
}
static char *bitnet__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = (char *)bitnet__malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

BITNET_API bitnet_result bitnet_gguf_writer_create(bitnet_gguf_writer **out) {
    bitnet_gguf_writer *w;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (!bitnet__host_le()) return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: only little-endian hosts are supported");
    w = (bitnet_gguf_writer *)bitnet__calloc(1, sizeof *w);
    if (!w) return BITNET_ERR_OUT_OF_MEMORY;
    w->alignment = BITNET__GGUF_DEFAULT_ALIGN;
    *out = w;
    return BITNET_OK;
}

BITNET_API void bitnet_gguf_writer_free(bitnet_gguf_writer *w) {
    size_t i;
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        if (w->path) remove(w->path); /* unfinished: leave no half-written model behind */
    }
    for (i = 0; i < w->n_kv; i++) bitnet__free(w->keys[i]);
    for (i = 0; i < w->n_t; i++) bitnet__free(w->t[i].name);
    bitnet__free(w->keys);
    bitnet__free(w->t);
    bitnet__free(w->kv);
    bitnet__free(w->path);
    bitnet__free(w);
}

/* Key, type and duplicate checks shared by the setters; appends the key and records it. */
static bitnet_result bitnet__gw_key(bitnet_gguf_writer *w, const char *key, const char *fn) {
    size_t i;
    void *p;
    BITNET__CHECK_PTR(w);
    if (!key || !*key) return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: key is NULL or empty", fn);
    if (w->state != 0) return bitnet__err(BITNET_ERR_INVALID_STATE, "%s: metadata must be set before begin()", fn);
    for (i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: key '%s' is already set", fn, key);
    p = w->keys;
    BITNET__TRY(bitnet__grow(&p, &w->keys_cap, w->n_kv + 1, sizeof(char *)));
    w->keys = (char **)p;
    if (!(w->keys[w->n_kv] = bitnet__strdup(key))) return BITNET_ERR_OUT_OF_MEMORY;
    w->n_kv++;
    return bitnet__gw_str(w, key, strlen(key));
}

BITNET_API bitnet_result bitnet_gguf_writer_set(bitnet_gguf_writer *w, const char *key, bitnet_gguf_type type, const void *value) {
    size_t esz;
    bitnet_result r;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(value);
    if ((unsigned)type >= BITNET_GGUF_TYPE_COUNT || type == BITNET_GGUF_ARRAY)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_writer_set: type %d is not a scalar type", (int)type);
    if (key && strcmp(key, "general.alignment") == 0) {
        uint32_t a;
        if (type != BITNET_GGUF_UINT32) return bitnet__err(BITNET_ERR_INVALID_ARG, "general.alignment must be UINT32");
        memcpy(&a, value, 4);
        if (a == 0 || (a & (a - 1))) return bitnet__err(BITNET_ERR_INVALID_ARG, "general.alignment %u is not a power of two", a);
        if (w->state == 0) w->alignment = a;
    }
    if (type == BITNET_GGUF_BOOL && *(const uint8_t *)value > 1)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_writer_set: bool value %u", *(const uint8_t *)value);
    if (type == BITNET_GGUF_STRING && ((const bitnet_gguf_str *)value)->len && !((const bitnet_gguf_str *)value)->ptr)
        return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gguf_writer_set: string value has a NULL pointer");
    BITNET__TRY(bitnet__gw_key(w, key, "bitnet_gguf_writer_set"));
    r = bitnet__gw_u32(w, (uint32_t)type);
    if (r == BITNET_OK && type == BITNET_GGUF_STRING) {
        const bitnet_gguf_str *s = (const bitnet_gguf_str *)value;
        r = bitnet__gw_str(w, s->ptr, s->len);
    } else if (r == BITNET_OK) {
        esz = bitnet__gguf_scalar_size((uint32_t)type);
        r = bitnet__gw_put(w, value, esz);
    }
    if (r != BITNET_OK) w->state = 3; /* the key is in, its value is not: unusable */
    return r;
}
BITNET_API bitnet_result bitnet_gguf_writer_set_u32(bitnet_gguf_writer *w, const char *key, uint32_t v) {
    return bitnet_gguf_writer_set(w, key, BITNET_GGUF_UINT32, &v);
}
BITNET_API bitnet_result bitnet_gguf_writer_set_f32(bitnet_gguf_writer *w, const char *key, float v) {
    return bitnet_gguf_writer_set(w, key, BITNET_GGUF_FLOAT32, &v);
}
BITNET_API bitnet_result bitnet_gguf_writer_set_str(bitnet_gguf_writer *w, const char *key, const char *v) {
    bitnet_gguf_str s;
    BITNET__CHECK_PTR(v);
    s.ptr = v;
    s.len = strlen(v);
    return bitnet_gguf_writer_set(w, key, BITNET_GGUF_STRING, &s);
}
BITNET_API bitnet_result bitnet_gguf_writer_set_arr(bitnet_gguf_writer *w, const char *key, bitnet_gguf_type elem_type,
                                                    const void *values, uint64_t n) {
    uint8_t b[8];
    size_t esz, bytes;
    uint64_t i;
    bitnet_result r;
    BITNET__CHECK_PTR(w);
    if (n && !values) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gguf_writer_set_arr: values is NULL");
    if ((unsigned)elem_type >= BITNET_GGUF_TYPE_COUNT || elem_type == BITNET_GGUF_ARRAY)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "bitnet_gguf_writer_set_arr: element type %d (nested arrays are not supported)",
                           (int)elem_type);
    esz = bitnet__gguf_scalar_size((uint32_t)elem_type);
    bytes = 0;
    if (elem_type != BITNET_GGUF_STRING && (n > SIZE_MAX || !bitnet__mul_size((size_t)n, esz, &bytes)))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gguf_writer_set_arr: %llu elements overflow", (unsigned long long)n);
    for (i = 0; elem_type == BITNET_GGUF_STRING && i < n; i++)
        if (((const bitnet_gguf_str *)values)[i].len && !((const bitnet_gguf_str *)values)[i].ptr)
            return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gguf_writer_set_arr: string %llu has a NULL pointer",
                               (unsigned long long)i);
    BITNET__TRY(bitnet__gw_key(w, key, "bitnet_gguf_writer_set_arr"));
    r = bitnet__gw_u32(w, BITNET_GGUF_ARRAY);
    if (r == BITNET_OK) r = bitnet__gw_u32(w, (uint32_t)elem_type);
    bitnet__put_le64(b, n);
    if (r == BITNET_OK) r = bitnet__gw_put(w, b, 8);
    if (r == BITNET_OK && elem_type != BITNET_GGUF_STRING) r = bitnet__gw_put(w, values, bytes);
    for (i = 0; r == BITNET_OK && elem_type == BITNET_GGUF_STRING && i < n; i++) {
        const bitnet_gguf_str *s = (const bitnet_gguf_str *)values + i;
        r = bitnet__gw_str(w, s->ptr, s->len);
    }
    if (r != BITNET_OK) w->state = 3; /* the key is in, its value is not: unusable */
    return r;
}

BITNET_API bitnet_result bitnet_gguf_writer_add_tensor(bitnet_gguf_writer *w, const char *name, bitnet_tensor_type type,
                                                       int n_dims, const uint64_t *ne) {
    bitnet__gw_tensor t;
    size_t i;
    int d;
    void *p;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(name);
    BITNET__CHECK_PTR(ne);
    if (w->state != 0) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gguf_writer_add_tensor: tensors must be added before begin()");
    if (!*name) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_writer_add_tensor: empty name");
    if (n_dims < 1 || n_dims > 4) return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_gguf_writer_add_tensor: '%s' has %d dimensions", name, n_dims);
    memset(&t, 0, sizeof t);
    t.type = type;
    t.n_dims = n_dims;
    for (d = 0; d < 4; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    BITNET__TRY(bitnet_tensor_nbytes(type, t.ne, &t.bytes));
    for (i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return bitnet__err(BITNET_ERR_DUPLICATE_TENSOR, "bitnet_gguf_writer_add_tensor: '%s' already added", name);
    p = w->t;
    BITNET__TRY(bitnet__grow(&p, &w->t_cap, w->n_t + 1, sizeof t));
    w->t = (bitnet__gw_tensor *)p;
    if (!(t.name = bitnet__strdup(name))) return BITNET_ERR_OUT_OF_MEMORY;
    w->t[w->n_t++] = t;
    return BITNET_OK;
}

static bitnet_result bitnet__gw_fwrite(bitnet_gguf_writer *w, const void *data, size_t n) {
    if (n && fwrite(data, 1, n, w->f) != n) {
        w->state = 3;
        return bitnet__err(BITNET_ERR_IO, "writing '%s' failed: %s", w->path, strerror(errno));
    }
    return BITNET_OK;
}
static bitnet_result bitnet__gw_pad(bitnet_gguf_writer *w, uint64_t pos) {
    static const uint8_t zeros[64] = {0};
    uint64_t pad = (w->alignment - pos % w->alignment) % w->alignment;
    while (pad) {
        size_t n = (size_t)BITNET__MIN(pad, (uint64_t)sizeof zeros);
        BITNET__TRY(bitnet__gw_fwrite(w, zeros, n));
        pad -= n;
    }
    return BITNET_OK;
}
/* Moves past finished tensors, padding each (the last one too, as ggml does) to the alignment. */
static bitnet_result bitnet__gw_advance(bitnet_gguf_writer *w) {
    while (w->cur < w->n_t && w->cur_done == w->t[w->cur].bytes) {
        BITNET__TRY(bitnet__gw_pad(w, w->t[w->cur].bytes));
        w->cur++;
        w->cur_done = 0;
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gguf_writer_begin(bitnet_gguf_writer *w, const char *path) {
    uint8_t hdr[24], b[8];
    uint64_t off = 0, pos;
    size_t i;
    int d;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(path);
    if (w->state != 0)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gguf_writer_begin: %s",
                           w->state == 3 ? "an earlier call failed" : "called twice");
    for (i = 0; i < w->n_t; i++) { /* offsets: each tensor starts aligned */
        w->t[i].offset = off;
        if (w->t[i].bytes > UINT64_MAX - off - w->alignment) return bitnet__err(BITNET_ERR_OVERFLOW, "GGUF writer: data section overflows");
        off = (off + w->t[i].bytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    if (!(w->path = bitnet__strdup(path))) return BITNET_ERR_OUT_OF_MEMORY;
    w->f = fopen(path, "wb");
    if (!w->f) {
        w->state = 3;
        return bitnet__err(BITNET_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 20);
    w->state = 1;
    memcpy(hdr, BITNET__GGUF_MAGIC, 4);
    bitnet__put_le32(hdr + 4, 3);
    bitnet__put_le64(hdr + 8, (uint64_t)w->n_t);
    bitnet__put_le64(hdr + 16, w->n_kv);
    BITNET__TRY(bitnet__gw_fwrite(w, hdr, sizeof hdr));
    BITNET__TRY(bitnet__gw_fwrite(w, w->kv, w->kv_len));
    pos = sizeof hdr + w->kv_len;
    for (i = 0; i < w->n_t; i++) {
        const bitnet__gw_tensor *t = &w->t[i];
        size_t nl = strlen(t->name);
        bitnet__put_le64(b, nl);
        BITNET__TRY(bitnet__gw_fwrite(w, b, 8));
        BITNET__TRY(bitnet__gw_fwrite(w, t->name, nl));
        bitnet__put_le32(b, (uint32_t)t->n_dims);
        BITNET__TRY(bitnet__gw_fwrite(w, b, 4));
        for (d = 0; d < t->n_dims; d++) {
            bitnet__put_le64(b, t->ne[d]);
            BITNET__TRY(bitnet__gw_fwrite(w, b, 8));
        }
        bitnet__put_le32(b, (uint32_t)t->type);
        BITNET__TRY(bitnet__gw_fwrite(w, b, 4));
        bitnet__put_le64(b, t->offset);
        BITNET__TRY(bitnet__gw_fwrite(w, b, 8));
        pos += 8 + nl + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    BITNET__TRY(bitnet__gw_pad(w, pos));
    w->cur = 0;
    w->cur_done = 0;
    return bitnet__gw_advance(w);
}

BITNET_API bitnet_result bitnet_gguf_writer_write(bitnet_gguf_writer *w, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    BITNET__CHECK_PTR(w);
    if (n && !data) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gguf_writer_write: data is NULL");
    if (w->state != 1) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gguf_writer_write: not between begin() and finish()");
    while (n) {
        uint64_t left;
        size_t k;
        if (w->cur >= w->n_t) {
            w->state = 3;
            return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gguf_writer_write: %zu bytes more than the declared tensors hold", n);
        }
        left = w->t[w->cur].bytes - w->cur_done;
        k = (size_t)BITNET__MIN((uint64_t)n, left);
        BITNET__TRY(bitnet__gw_fwrite(w, p, k));
        w->cur_done += k;
        p += k;
        n -= k;
        BITNET__TRY(bitnet__gw_advance(w));
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gguf_writer_finish(bitnet_gguf_writer *w) {
    FILE *f;
    BITNET__CHECK_PTR(w);
    if (w->state != 1) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gguf_writer_finish: not between begin() and finish()");
    if (w->cur < w->n_t)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gguf_writer_finish: tensor '%s' has %llu of its %llu bytes",
                           w->t[w->cur].name, (unsigned long long)w->cur_done, (unsigned long long)w->t[w->cur].bytes);
    f = w->f;
    w->f = NULL;
    if (fflush(f) != 0 || ferror(f)) {
        int e = errno;
        fclose(f);
        remove(w->path);
        w->state = 3;
        return bitnet__err(BITNET_ERR_IO, "writing '%s' failed: %s", w->path, strerror(e));
    }
    if (fclose(f) != 0) {
        remove(w->path);
        w->state = 3;
        return bitnet__err(BITNET_ERR_IO, "closing '%s' failed: %s", w->path, strerror(errno));
    }
    w->state = 2;
    return BITNET_OK;
}

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

/* >>model ===================================================================================== */

/* >>receipt =================================================================================== */

/* What ran and how fast, in a form that cannot lie: kernel launches recorded by the launch path,
   SHA-256 of the model file, a JSON writer and a strict parser, the receipt schema and its gates,
   and the benchmark that fills it. */

#if !defined(_WIN32)
#include <sys/resource.h>
#endif

/* ---- kernel launch registry: a fixed table, one lock, names copied in ------------------------ */
/* Slots are keyed by the caller's name pointer (fast path) and then by the text, because GPU
   kernel names may live in freed memory later; the last slot collects whatever does not fit. */
typedef struct bitnet__kstat_slot {
    const char *key;
    char name[BITNET_KERNEL_NAME_MAX];
    uint64_t launches, nanos;
} bitnet__kstat_slot;
static bitnet__kstat_slot bitnet__kstats[BITNET_BENCH_MAX_KERNELS];
static size_t bitnet__kstat_used;

static bitnet__mutex bitnet__kstat_lock = BITNET__MUTEX_INIT;
#define BITNET__KSTAT_LOCK() bitnet__mutex_lock(&bitnet__kstat_lock)
#define BITNET__KSTAT_UNLOCK() bitnet__mutex_unlock(&bitnet__kstat_lock)

/* Names longer than the slot compare as their truncation. */
static int bitnet__kstat_same(const char *slot, const char *name) {
    size_t l = 0;
    while (l < BITNET_KERNEL_NAME_MAX - 1 && name[l]) l++;
    return memcmp(slot, name, l) == 0 && slot[l] == 0;
}

BITNET__UNUSED static void bitnet__kstat_add(const char *name, uint64_t launches, double seconds) {
    size_t i, hit = BITNET_BENCH_MAX_KERNELS;
    uint64_t ns = (seconds > 0 && seconds < 1e9) ? (uint64_t)(seconds * 1e9 + 0.5) : 0;
    if (!name || !*name) name = "(unnamed)";
    BITNET__KSTAT_LOCK();
    for (i = 0; i < bitnet__kstat_used; i++)
        if (bitnet__kstats[i].key == name && bitnet__kstat_same(bitnet__kstats[i].name, name)) { hit = i; break; }
    if (hit == BITNET_BENCH_MAX_KERNELS)
        for (i = 0; i < bitnet__kstat_used; i++)
            if (bitnet__kstat_same(bitnet__kstats[i].name, name)) { hit = i; break; }
    if (hit == BITNET_BENCH_MAX_KERNELS) {
        if (bitnet__kstat_used < BITNET_BENCH_MAX_KERNELS - 1) {
            size_t l = 0;
            hit = bitnet__kstat_used++;
            while (l < BITNET_KERNEL_NAME_MAX - 1 && name[l]) l++;
            memcpy(bitnet__kstats[hit].name, name, l);
            bitnet__kstats[hit].name[l] = 0;
        } else { /* table full: counted, not lost */
            hit = BITNET_BENCH_MAX_KERNELS - 1;
            strcpy(bitnet__kstats[hit].name, "(other kernels)");
            if (bitnet__kstat_used < BITNET_BENCH_MAX_KERNELS) bitnet__kstat_used = BITNET_BENCH_MAX_KERNELS;
        }
    }
    bitnet__kstats[hit].key = name;
    bitnet__kstats[hit].launches += launches;
    bitnet__kstats[hit].nanos += ns;
    BITNET__KSTAT_UNLOCK();
}

BITNET__UNUSED static void bitnet__kstat_record(const char *name, double seconds) { bitnet__kstat_add(name, 1, seconds); }

static int bitnet__kstat_cmp(const void *a, const void *b) {
    return strcmp(((const bitnet_kernel_stat *)a)->name, ((const bitnet_kernel_stat *)b)->name);
}

/* CPU kernels from the registry above; GPU kernels from the runtime's own launch counters
   (bitnet_gpu_launch and graph replays count themselves there). */
BITNET_API bitnet_result bitnet_kernel_stats(bitnet_kernel_stat *out, size_t cap, size_t *n) {
    bitnet_kernel_stat tmp[2 * BITNET_BENCH_MAX_KERNELS];
    bitnet_gpu_stats *gs;
    size_t i, k = 0;
    BITNET__CHECK_PTR(n);
    if (cap && !out) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_kernel_stats: out is NULL with cap %zu", cap);
    if (!(gs = (bitnet_gpu_stats *)bitnet__malloc(sizeof *gs))) return BITNET_ERR_OUT_OF_MEMORY;
    BITNET__KSTAT_LOCK();
    for (i = 0; i < bitnet__kstat_used; i++) {
        if (!bitnet__kstats[i].launches) continue;
        memcpy(tmp[k].name, bitnet__kstats[i].name, BITNET_KERNEL_NAME_MAX);
        tmp[k].launches = bitnet__kstats[i].launches;
        tmp[k].seconds = (double)bitnet__kstats[i].nanos * 1e-9;
        k++;
    }
    BITNET__KSTAT_UNLOCK();
    if (bitnet_gpu_stats_get(NULL, gs) == BITNET_OK)
        for (i = 0; i < (size_t)gs->n_kernels && i < BITNET_GPU_MAX_KERNEL_STATS; i++) {
            if (!gs->kernels[i].launches) continue;
            snprintf(tmp[k].name, sizeof tmp[k].name, "%s", gs->kernels[i].name);
            tmp[k].launches = gs->kernels[i].launches;
            tmp[k].seconds = gs->kernels[i].ms * 1e-3; /* device time of event-timed launches only */
            k++;
        }
    bitnet__free(gs);
    *n = k;
    if (k > cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_kernel_stats: %zu kernels, room for %zu", k, cap);
    qsort(tmp, k, sizeof tmp[0], bitnet__kstat_cmp);
    if (k) memcpy(out, tmp, k * sizeof tmp[0]);
    return BITNET_OK;
}

BITNET_API void bitnet_kernel_stats_reset(void) {
    size_t i;
    BITNET__KSTAT_LOCK();
    for (i = 0; i < bitnet__kstat_used; i++) bitnet__kstats[i].launches = bitnet__kstats[i].nanos = 0;
    BITNET__KSTAT_UNLOCK();
    bitnet_gpu_stats_reset(NULL);
}

/* ---- NVTX ranges, through the runtime's dlopen'd libnvToolsExt (nothing without it) --------- */
BITNET__UNUSED static void bitnet__nvtx_push(const char *name) { bitnet_gpu_nvtx_push(name); }
BITNET__UNUSED static void bitnet__nvtx_pop(void) { bitnet_gpu_nvtx_pop(); }

/* ---- SHA-256 (FIPS 180-4) --------------------------------------------------------------------- */
typedef struct bitnet__sha256 {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t buf[64];
    size_t fill;
} bitnet__sha256;

static const uint32_t bitnet__sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define BITNET__ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void bitnet__sha256_block(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = BITNET__ROTR(w[i - 15], 7) ^ BITNET__ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = BITNET__ROTR(w[i - 2], 17) ^ BITNET__ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (i = 0; i < 64; i++) {
        t1 = hh + (BITNET__ROTR(e, 6) ^ BITNET__ROTR(e, 11) ^ BITNET__ROTR(e, 25)) + ((e & f) ^ (~e & g)) +
             bitnet__sha256_k[i] + w[i];
        t2 = (BITNET__ROTR(a, 2) ^ BITNET__ROTR(a, 13) ^ BITNET__ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

static void bitnet__sha256_init(bitnet__sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->bytes = 0;
    s->fill = 0;
}

static void bitnet__sha256_update(bitnet__sha256 *s, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    s->bytes += n;
    if (s->fill) {
        size_t take = BITNET__MIN(n, 64 - s->fill);
        memcpy(s->buf + s->fill, p, take);
        s->fill += take; p += take; n -= take;
        if (s->fill < 64) return;
        bitnet__sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64) bitnet__sha256_block(s->h, p);
    if (n) memcpy(s->buf, p, n);
    s->fill = n;
}

static void bitnet__sha256_final(bitnet__sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->bytes * 8;
    int i;
    s->buf[s->fill++] = 0x80;
    if (s->fill > 56) {
        memset(s->buf + s->fill, 0, 64 - s->fill);
        bitnet__sha256_block(s->h, s->buf);
        s->fill = 0;
    }
    memset(s->buf + s->fill, 0, 56 - s->fill);
    for (i = 0; i < 8; i++) s->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
    bitnet__sha256_block(s->h, s->buf);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24); out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8); out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

static void bitnet__sha256_hex(const uint8_t *d, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < n; i++) { out[2 * i] = digits[d[i] >> 4]; out[2 * i + 1] = digits[d[i] & 15]; }
    out[2 * n] = 0;
}

BITNET_API bitnet_result bitnet_sha256(const void *data, size_t n, uint8_t digest[32]) {
    bitnet__sha256 s;
    BITNET__CHECK_PTR(digest);
    if (n && !data) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_sha256: data is NULL with n=%zu", n);
    bitnet__sha256_init(&s);
    if (n) bitnet__sha256_update(&s, data, n);
    bitnet__sha256_final(&s, digest);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_sha256_file(const char *path, char hex[65], uint64_t *bytes) {
    enum { CHUNK = 1 << 20 };
    bitnet__sha256 s;
    uint8_t digest[32], *buf;
    FILE *f;
    size_t got;
    int failed;
    BITNET__CHECK_PTR(path);
    BITNET__CHECK_PTR(hex);
    buf = (uint8_t *)bitnet__malloc(CHUNK);
    if (!buf) return BITNET_ERR_OUT_OF_MEMORY;
    f = fopen(path, "rb");
    if (!f) {
        bitnet__free(buf);
        return bitnet__err(BITNET_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    }
    bitnet__sha256_init(&s);
    while ((got = fread(buf, 1, CHUNK, f)) > 0) bitnet__sha256_update(&s, buf, got);
    failed = ferror(f);
    fclose(f);
    bitnet__free(buf);
    if (failed) return bitnet__err(BITNET_ERR_IO, "error reading '%s'", path);
    bitnet__sha256_final(&s, digest);
    bitnet__sha256_hex(digest, 32, hex);
    if (bytes) *bytes = s.bytes;
    return BITNET_OK;
}

/* ---- JSON writer: counts like snprintf, so it needs no allocation; two-space indentation ----- */
typedef struct bitnet__jw {
    char *buf;
    size_t cap, len;
    int need_comma, after_key, depth;
} bitnet__jw;

static void bitnet__jw_putc(bitnet__jw *w, char c) {
    if (w->len < w->cap) w->buf[w->len] = c;
    w->len++;
}
static void bitnet__jw_raw(bitnet__jw *w, const char *s) { while (*s) bitnet__jw_putc(w, *s++); }
static void bitnet__jw_nl(bitnet__jw *w) {
    int i;
    bitnet__jw_putc(w, '\n');
    for (i = 0; i < w->depth; i++) bitnet__jw_raw(w, "  ");
}
/* Before every value: the comma and newline, unless it follows its key. */
static void bitnet__jw_pre(bitnet__jw *w) {
    if (w->after_key) { w->after_key = 0; return; }
    if (w->need_comma) bitnet__jw_putc(w, ',');
    if (w->depth) bitnet__jw_nl(w);
    w->need_comma = 1;
}

/* Length of a valid UTF-8 sequence at p (at most n bytes), 0 when invalid (overlong forms,
   surrogates and code points past U+10FFFF are invalid). */
static size_t bitnet__json_utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len, i;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len) return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A string: escapes what JSON requires; invalid UTF-8 bytes become U+FFFD. */
static void bitnet__jw_str(bitnet__jw *w, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    bitnet__jw_pre(w);
    bitnet__jw_putc(w, '"');
    while (i < n) {
        unsigned c = p[i];
        size_t l;
        if (c == '"' || c == '\\') { bitnet__jw_putc(w, '\\'); bitnet__jw_putc(w, (char)c); i++; continue; }
        if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            bitnet__jw_raw(w, e);
            i++;
            continue;
        }
        if (!(l = bitnet__json_utf8_len(p + i, n - i))) { bitnet__jw_raw(w, "\\ufffd"); i++; continue; }
        while (l--) bitnet__jw_putc(w, (char)p[i++]);
    }
    bitnet__jw_putc(w, '"');
}

/* Numbers with `digits` significant digits. The locale's decimal point (whatever bytes it is) becomes
   '.'; non-finite values become null, which the parser rejects. */
static void bitnet__jw_num(bitnet__jw *w, double v, int digits) {
    char tmp[64];
    int i, dot = 0;
    bitnet__jw_pre(w);
    if (v != v || v > DBL_MAX || v < -DBL_MAX) { bitnet__jw_raw(w, "null"); return; }
    snprintf(tmp, sizeof tmp, "%.*g", digits, v);
    for (i = 0; tmp[i]; i++) {
        char c = tmp[i];
        if ((c >= '0' && c <= '9') || c == 'e' || c == '-' || c == '+') { bitnet__jw_putc(w, c); dot = 0; }
        else if (!dot) { bitnet__jw_putc(w, '.'); dot = 1; }
    }
}
static void bitnet__jw_int(bitnet__jw *w, long long v) {
    char tmp[24];
    bitnet__jw_pre(w);
    snprintf(tmp, sizeof tmp, "%lld", v);
    bitnet__jw_raw(w, tmp);
}
static void bitnet__jw_u64(bitnet__jw *w, uint64_t v) {
    char tmp[24];
    bitnet__jw_pre(w);
    snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    bitnet__jw_raw(w, tmp);
}
static void bitnet__jw_lit(bitnet__jw *w, const char *lit) { bitnet__jw_pre(w); bitnet__jw_raw(w, lit); }
static void bitnet__jw_key(bitnet__jw *w, const char *k) {
    bitnet__jw_str(w, k);
    bitnet__jw_raw(w, ": ");
    w->after_key = 1;
}
static void bitnet__jw_open(bitnet__jw *w, char c) {
    bitnet__jw_pre(w);
    bitnet__jw_putc(w, c);
    w->depth++;
    w->need_comma = 0;
}
static void bitnet__jw_close(bitnet__jw *w, char c) {
    w->depth--;
    if (w->need_comma) bitnet__jw_nl(w);
    bitnet__jw_putc(w, c);
    w->need_comma = 1;
}

/* ---- JSON parser: strict RFC 8259 into a flat node array ------------------------------------ */
/* Bounds-checked byte by byte; nesting, object size and input size are limited, so hostile input
   costs bounded time and memory. Strings are decoded (and UTF-8 validated) into one buffer no
   larger than the input; \u0000 is refused because fields are C strings. */
#define BITNET__JSON_MAX_DEPTH 32
#define BITNET__JSON_MAX_MEMBERS 256
enum { BITNET__J_NULL, BITNET__J_FALSE, BITNET__J_TRUE, BITNET__J_NUM, BITNET__J_STR, BITNET__J_ARR, BITNET__J_OBJ };

typedef struct bitnet__jnode {
    int type;
    int is_int;            /* a number written without fraction or exponent */
    int32_t first, next;   /* first child (arrays, objects) and next sibling; -1 = none */
    int32_t count;         /* children */
    const char *key;       /* member name when the parent is an object */
    const char *str;       /* decoded string value */
    double num;
} bitnet__jnode;

typedef struct bitnet__json {
    const unsigned char *src;
    size_t len, pos;
    bitnet__jnode *nodes;
    size_t n, cap;
    char *strs;
    size_t strs_len;
    bitnet_result err;
} bitnet__json;

static BITNET__PRINTF(2, 3) int32_t bitnet__json_fail(bitnet__json *j, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    if (j->err != BITNET_OK) return -1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    j->err = bitnet__err(BITNET_ERR_CORRUPT, "JSON: %s at byte %zu", msg, j->pos);
    return -1;
}

static int32_t bitnet__json_node(bitnet__json *j, int type) {
    bitnet__jnode *nd;
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 64, bytes;
        bitnet__jnode *grown;
        if (cap > (size_t)INT32_MAX || !bitnet__mul_size(cap, sizeof *grown, &bytes))
            return bitnet__json_fail(j, "too many values");
        grown = (bitnet__jnode *)bitnet__malloc(bytes);
        if (!grown) { j->err = BITNET_ERR_OUT_OF_MEMORY; return -1; }
        if (j->n) memcpy(grown, j->nodes, j->n * sizeof *grown);
        bitnet__free(j->nodes);
        j->nodes = grown;
        j->cap = cap;
    }
    nd = &j->nodes[j->n];
    memset(nd, 0, sizeof *nd);
    nd->type = type;
    nd->first = nd->next = -1;
    return (int32_t)j->n++;
}

static void bitnet__json_ws(bitnet__json *j) {
    while (j->pos < j->len) {
        unsigned char c = j->src[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        j->pos++;
    }
}

static int bitnet__json_hex4(bitnet__json *j, uint32_t *out) {
    uint32_t v = 0;
    int i;
    if (j->len - j->pos < 4) return 0;
    for (i = 0; i < 4; i++) {
        unsigned char c = j->src[j->pos + i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    j->pos += 4;
    *out = v;
    return 1;
}

/* At the opening quote; returns the decoded NUL-terminated string, or NULL after an error. */
static const char *bitnet__json_string(bitnet__json *j) {
    char *out = j->strs + j->strs_len, *o = out;
    j->pos++; /* the quote */
    for (;;) {
        unsigned char c;
        if (j->pos >= j->len) { bitnet__json_fail(j, "unterminated string"); return NULL; }
        c = j->src[j->pos];
        if (c == '"') { j->pos++; break; }
        if (c < 0x20) { bitnet__json_fail(j, "control character 0x%02x in a string", c); return NULL; }
        if (c == '\\') {
            uint32_t cp;
            if (j->pos + 1 >= j->len) { bitnet__json_fail(j, "unterminated escape"); return NULL; }
            c = j->src[j->pos + 1];
            j->pos += 2;
            switch (c) {
            case '"': *o++ = '"'; continue;
            case '\\': *o++ = '\\'; continue;
            case '/': *o++ = '/'; continue;
            case 'b': *o++ = '\b'; continue;
            case 'f': *o++ = '\f'; continue;
            case 'n': *o++ = '\n'; continue;
            case 'r': *o++ = '\r'; continue;
            case 't': *o++ = '\t'; continue;
            case 'u': break;
            default: j->pos -= 2; bitnet__json_fail(j, "bad escape"); return NULL;
            }
            if (!bitnet__json_hex4(j, &cp)) { bitnet__json_fail(j, "bad \\u escape"); return NULL; }
            if (cp >= 0xdc00 && cp <= 0xdfff) { bitnet__json_fail(j, "lone low surrogate"); return NULL; }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (j->len - j->pos < 2 || j->src[j->pos] != '\\' || j->src[j->pos + 1] != 'u') {
                    bitnet__json_fail(j, "high surrogate without a low one"); return NULL;
                }
                j->pos += 2;
                if (!bitnet__json_hex4(j, &lo) || lo < 0xdc00 || lo > 0xdfff) {
                    bitnet__json_fail(j, "bad surrogate pair"); return NULL;
                }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) { bitnet__json_fail(j, "\\u0000 in a string"); return NULL; }
            if (cp < 0x80) *o++ = (char)cp;
            else if (cp < 0x800) { *o++ = (char)(0xc0 | cp >> 6); *o++ = (char)(0x80 | (cp & 0x3f)); }
            else if (cp < 0x10000) {
                *o++ = (char)(0xe0 | cp >> 12); *o++ = (char)(0x80 | ((cp >> 6) & 0x3f)); *o++ = (char)(0x80 | (cp & 0x3f));
            } else {
                *o++ = (char)(0xf0 | cp >> 18); *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
                *o++ = (char)(0x80 | ((cp >> 6) & 0x3f)); *o++ = (char)(0x80 | (cp & 0x3f));
            }
        } else {
            size_t l = bitnet__json_utf8_len(j->src + j->pos, j->len - j->pos);
            if (!l) { bitnet__json_fail(j, "invalid UTF-8"); return NULL; }
            memcpy(o, j->src + j->pos, l);
            o += l;
            j->pos += l;
        }
    }
    *o++ = 0;
    j->strs_len = (size_t)(o - j->strs);
    return out;
}

/* Grammar checked first; the value is computed from at most 19 significant digits by hand
   (strtod would depend on the locale). */
static int32_t bitnet__json_number(bitnet__json *j) {
    const unsigned char *s = j->src;
    size_t p = j->pos, start = j->pos;
    int neg = 0, is_int = 1, digits = 0;
    long long exp10 = 0, e = 0;
    uint64_t mant = 0;
    double v;
    int32_t id;
    if (p < j->len && s[p] == '-') { neg = 1; p++; }
    if (p >= j->len || s[p] < '0' || s[p] > '9') { j->pos = p; return bitnet__json_fail(j, "unexpected character"); }
    if (s[p] == '0') {
        p++;
        if (p < j->len && s[p] >= '0' && s[p] <= '9') { j->pos = p; return bitnet__json_fail(j, "leading zero"); }
    } else {
        for (; p < j->len && s[p] >= '0' && s[p] <= '9'; p++) {
            if (digits < 19) { mant = mant * 10 + (uint64_t)(s[p] - '0'); digits++; }
            else exp10++;
        }
    }
    if (p < j->len && s[p] == '.') {
        is_int = 0;
        if (++p >= j->len || s[p] < '0' || s[p] > '9') { j->pos = p; return bitnet__json_fail(j, "bad fraction"); }
        for (; p < j->len && s[p] >= '0' && s[p] <= '9'; p++)
            if (digits < 19) {
                mant = mant * 10 + (uint64_t)(s[p] - '0');
                exp10--;
                if (mant) digits++;
            }
    }
    if (p < j->len && (s[p] == 'e' || s[p] == 'E')) {
        int eneg = 0;
        is_int = 0;
        p++;
        if (p < j->len && (s[p] == '+' || s[p] == '-')) eneg = s[p++] == '-';
        if (p >= j->len || s[p] < '0' || s[p] > '9') { j->pos = p; return bitnet__json_fail(j, "bad exponent"); }
        for (; p < j->len && s[p] >= '0' && s[p] <= '9'; p++)
            if (e < 100000) e = e * 10 + (s[p] - '0');
        exp10 += eneg ? -e : e;
    }
    if (!mant) v = 0.0;
    else if (exp10 > 330) v = HUGE_VAL;
    else if (exp10 < -400) v = 0.0;
    else if (exp10 < 0 && exp10 >= -22) v = (double)mant / pow(10.0, (double)-exp10); /* 10^k exact: one rounding */
    else v = (double)mant * pow(10.0, (double)exp10);
    if (!(v <= DBL_MAX)) { j->pos = start; return bitnet__json_fail(j, "number out of range"); }
    j->pos = p;
    if ((id = bitnet__json_node(j, BITNET__J_NUM)) < 0) return -1;
    j->nodes[id].num = neg ? -v : v;
    j->nodes[id].is_int = is_int && digits <= 15; /* exact in a double */
    return id;
}

static int32_t bitnet__json_value(bitnet__json *j, int depth);

static int32_t bitnet__json_container(bitnet__json *j, int depth, int is_obj) {
    char close = is_obj ? '}' : ']';
    int32_t id = bitnet__json_node(j, is_obj ? BITNET__J_OBJ : BITNET__J_ARR), last = -1;
    if (id < 0) return -1;
    if (depth >= BITNET__JSON_MAX_DEPTH) return bitnet__json_fail(j, "nested deeper than %d", BITNET__JSON_MAX_DEPTH);
    j->pos++;
    bitnet__json_ws(j);
    if (j->pos < j->len && j->src[j->pos] == (unsigned char)close) { j->pos++; return id; }
    for (;;) {
        const char *key = NULL;
        int32_t child, i;
        if (is_obj) {
            if (j->pos >= j->len || j->src[j->pos] != '"') return bitnet__json_fail(j, "expected a member name");
            if (!(key = bitnet__json_string(j))) return -1;
            for (i = j->nodes[id].first; i >= 0; i = j->nodes[i].next)
                if (strcmp(j->nodes[i].key, key) == 0) return bitnet__json_fail(j, "duplicate member \"%.60s\"", key);
            bitnet__json_ws(j);
            if (j->pos >= j->len || j->src[j->pos] != ':') return bitnet__json_fail(j, "expected ':'");
            j->pos++;
            if (j->nodes[id].count >= BITNET__JSON_MAX_MEMBERS)
                return bitnet__json_fail(j, "more than %d members", BITNET__JSON_MAX_MEMBERS);
        }
        if ((child = bitnet__json_value(j, depth + 1)) < 0) return -1;
        j->nodes[child].key = key;
        if (last < 0) j->nodes[id].first = child;
        else j->nodes[last].next = child;
        last = child;
        j->nodes[id].count++;
        bitnet__json_ws(j);
        if (j->pos >= j->len) return bitnet__json_fail(j, "unterminated %s", is_obj ? "object" : "array");
        if (j->src[j->pos] == ',') { j->pos++; bitnet__json_ws(j); continue; }
        if (j->src[j->pos] == (unsigned char)close) { j->pos++; return id; }
        return bitnet__json_fail(j, "expected ',' or '%c'", close);
    }
}

static int32_t bitnet__json_literal(bitnet__json *j, const char *word, int type) {
    size_t l = strlen(word);
    if (j->len - j->pos < l || memcmp(j->src + j->pos, word, l) != 0) return bitnet__json_fail(j, "unexpected character");
    j->pos += l;
    return bitnet__json_node(j, type);
}

static int32_t bitnet__json_value(bitnet__json *j, int depth) {
    bitnet__json_ws(j);
    if (j->pos >= j->len) return bitnet__json_fail(j, "unexpected end");
    switch (j->src[j->pos]) {
    case '{': return bitnet__json_container(j, depth, 1);
    case '[': return bitnet__json_container(j, depth, 0);
    case '"': {
        const char *s = bitnet__json_string(j);
        int32_t id;
        if (!s) return -1;
        if ((id = bitnet__json_node(j, BITNET__J_STR)) >= 0) j->nodes[id].str = s;
        return id;
    }
    case 't': return bitnet__json_literal(j, "true", BITNET__J_TRUE);
    case 'f': return bitnet__json_literal(j, "false", BITNET__J_FALSE);
    case 'n': return bitnet__json_literal(j, "null", BITNET__J_NULL);
    default: return bitnet__json_number(j);
    }
}

static void bitnet__json_free(bitnet__json *j) {
    bitnet__free(j->nodes);
    bitnet__free(j->strs);
    memset(j, 0, sizeof *j);
}

/* Parses the whole input as one value (node 0). */
static bitnet_result bitnet__json_parse(bitnet__json *j, const char *src, size_t len) {
    memset(j, 0, sizeof *j);
    j->src = (const unsigned char *)src;
    j->len = len;
    if (!(j->strs = (char *)bitnet__malloc(len + 1))) return BITNET_ERR_OUT_OF_MEMORY;
    if (bitnet__json_value(j, 0) >= 0) {
        bitnet__json_ws(j);
        if (j->pos != j->len) bitnet__json_fail(j, "trailing characters");
    }
    if (j->err == BITNET_OK && j->n == 0) j->err = bitnet__err(BITNET_ERR_CORRUPT, "JSON: empty");
    if (j->err != BITNET_OK) {
        bitnet_result r = j->err;
        bitnet__json_free(j);
        return r;
    }
    return BITNET_OK;
}

static int32_t bitnet__json_get(const bitnet__json *j, int32_t obj, const char *key) {
    int32_t i;
    if (obj < 0 || j->nodes[obj].type != BITNET__J_OBJ) return -1;
    for (i = j->nodes[obj].first; i >= 0; i = j->nodes[i].next)
        if (strcmp(j->nodes[i].key, key) == 0) return i;
    return -1;
}

/* ---- receipt JSON ---------------------------------------------------------------------------- */
static void bitnet__jw_kstr(bitnet__jw *w, const char *k, const char *v) { bitnet__jw_key(w, k); bitnet__jw_str(w, v); }
static void bitnet__jw_knum(bitnet__jw *w, const char *k, double v) { bitnet__jw_key(w, k); bitnet__jw_num(w, v, 10); }
static void bitnet__jw_kflt(bitnet__jw *w, const char *k, float v) { bitnet__jw_key(w, k); bitnet__jw_num(w, v, 7); }
static void bitnet__jw_kint(bitnet__jw *w, const char *k, long long v) { bitnet__jw_key(w, k); bitnet__jw_int(w, v); }
static void bitnet__jw_ku64(bitnet__jw *w, const char *k, uint64_t v) { bitnet__jw_key(w, k); bitnet__jw_u64(w, v); }
static void bitnet__jw_kbool(bitnet__jw *w, const char *k, int v) { bitnet__jw_key(w, k); bitnet__jw_lit(w, v ? "true" : "false"); }
static void bitnet__jw_kopen(bitnet__jw *w, const char *k, char c) { bitnet__jw_key(w, k); bitnet__jw_open(w, c); }

BITNET_API bitnet_result bitnet_receipt_write(const bitnet_receipt *r, char *buf, size_t cap, size_t *len) {
    bitnet__jw w;
    size_t i;
    char cc[32];
    BITNET__CHECK_PTR(r);
    BITNET__CHECK_PTR(len);
    if (cap && !buf) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_receipt_write: buf is NULL with cap %zu", cap);
    if (r->n_results > BITNET_BENCH_MAX_RESULTS || r->n_kernels > BITNET_BENCH_MAX_KERNELS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_receipt_write: %zu results, %zu kernels (limits %d, %d)",
                           r->n_results, r->n_kernels, BITNET_BENCH_MAX_RESULTS, BITNET_BENCH_MAX_KERNELS);
    memset(&w, 0, sizeof w);
    w.buf = buf;
    w.cap = cap;
    bitnet__jw_open(&w, '{');
    bitnet__jw_kstr(&w, "schema_version", r->schema_version);
    bitnet__jw_kstr(&w, "created_utc", r->created_utc);
    bitnet__jw_kopen(&w, "library", '{');
    bitnet__jw_kstr(&w, "version", r->library_version);
    bitnet__jw_kstr(&w, "git_commit", r->git_commit);
    bitnet__jw_close(&w, '}');
    bitnet__jw_kopen(&w, "model", '{');
    bitnet__jw_kstr(&w, "path", r->model_path);
    bitnet__jw_kstr(&w, "sha256", r->model_sha256);
    bitnet__jw_ku64(&w, "bytes", r->model_bytes);
    bitnet__jw_kopen(&w, "config", '{');
    bitnet__jw_kstr(&w, "arch", r->model.arch);
    bitnet__jw_kint(&w, "n_vocab", r->model.n_vocab);
    bitnet__jw_kint(&w, "dim", r->model.dim);
    bitnet__jw_kint(&w, "n_layers", r->model.n_layers);
    bitnet__jw_kint(&w, "n_heads", r->model.n_heads);
    bitnet__jw_kint(&w, "n_kv_heads", r->model.n_kv_heads);
    bitnet__jw_kint(&w, "head_dim", r->model.head_dim);
    bitnet__jw_kint(&w, "ffn_dim", r->model.ffn_dim);
    bitnet__jw_kint(&w, "n_ctx_train", r->model.n_ctx_train);
    bitnet__jw_kflt(&w, "rope_theta", r->model.rope_theta);
    bitnet__jw_kflt(&w, "norm_eps", r->model.norm_eps);
    bitnet__jw_kint(&w, "bos", r->model.bos);
    bitnet__jw_kint(&w, "eos", r->model.eos);
    bitnet__jw_kint(&w, "eot", r->model.eot);
    bitnet__jw_close(&w, '}');
    bitnet__jw_close(&w, '}');
    bitnet__jw_kopen(&w, "backend", '{');
    bitnet__jw_kstr(&w, "requested", r->backend_requested);
    bitnet__jw_kstr(&w, "used", r->backend);
    bitnet__jw_kstr(&w, "reason", r->model.backend_reason);
    bitnet__jw_close(&w, '}');
    bitnet__jw_kstr(&w, "precision", r->precision);
    bitnet__jw_kopen(&w, "host", '{');
    bitnet__jw_kstr(&w, "cpu", r->cpu_model);
    bitnet__jw_kstr(&w, "isa", r->isa);
    bitnet__jw_kint(&w, "threads", r->threads);
    bitnet__jw_close(&w, '}');
    if (r->has_gpu) {
        bitnet__jw_kopen(&w, "gpu", '{');
        bitnet__jw_kstr(&w, "name", r->gpu_name);
        snprintf(cc, sizeof cc, "%d.%d", (int)r->gpu_cc_major, (int)r->gpu_cc_minor);
        bitnet__jw_kstr(&w, "compute_capability", cc);
        bitnet__jw_kstr(&w, "arch", r->gpu_arch);
        bitnet__jw_kstr(&w, "driver_version", r->gpu_driver_version);
        bitnet__jw_kstr(&w, "nvrtc_version", r->nvrtc_version);
        bitnet__jw_close(&w, '}');
    } else {
        bitnet__jw_key(&w, "gpu");
        bitnet__jw_lit(&w, "null");
    }
    bitnet__jw_kopen(&w, "memory", '{');
    bitnet__jw_ku64(&w, "peak_host_rss_bytes", r->peak_host_rss_bytes);
    bitnet__jw_ku64(&w, "peak_device_bytes", r->peak_device_bytes);
    bitnet__jw_close(&w, '}');
    bitnet__jw_kint(&w, "warmup_runs", r->warmup_runs);
    bitnet__jw_kopen(&w, "determinism", '{');
    bitnet__jw_kbool(&w, "checked", r->determinism_checked);
    bitnet__jw_kbool(&w, "seeded_runs_identical", r->seeded_runs_identical);
    bitnet__jw_close(&w, '}');
    bitnet__jw_kopen(&w, "results", '[');
    for (i = 0; i < r->n_results; i++) {
        const bitnet_bench_result *b = &r->results[i];
        bitnet__jw_open(&w, '{');
        bitnet__jw_kint(&w, "prompt_tokens", b->prompt_tokens);
        bitnet__jw_kint(&w, "gen_tokens", b->gen_tokens);
        bitnet__jw_kint(&w, "runs", b->runs);
        bitnet__jw_knum(&w, "prompt_ms", b->prompt_ms);
        bitnet__jw_knum(&w, "gen_ms", b->gen_ms);
        bitnet__jw_knum(&w, "wall_ms", b->wall_ms);
        bitnet__jw_knum(&w, "ttft_ms", b->ttft_ms);
        bitnet__jw_knum(&w, "prompt_tps", b->prompt_tps);
        bitnet__jw_knum(&w, "gen_tps", b->gen_tps);
        bitnet__jw_knum(&w, "gen_tps_min", b->gen_tps_min);
        bitnet__jw_knum(&w, "gen_tps_max", b->gen_tps_max);
        bitnet__jw_kopen(&w, "latency_ms", '{');
        bitnet__jw_knum(&w, "p50", b->p50_ms);
        bitnet__jw_knum(&w, "p95", b->p95_ms);
        bitnet__jw_knum(&w, "p99", b->p99_ms);
        bitnet__jw_close(&w, '}');
        bitnet__jw_kstr(&w, "tokens_sha256", b->tokens_sha256);
        bitnet__jw_kbool(&w, "outputs_identical", b->outputs_identical);
        bitnet__jw_close(&w, '}');
    }
    bitnet__jw_close(&w, ']');
    bitnet__jw_kopen(&w, "kernels", '[');
    for (i = 0; i < r->n_kernels; i++) {
        bitnet__jw_open(&w, '{');
        bitnet__jw_kstr(&w, "name", r->kernels[i].name);
        bitnet__jw_ku64(&w, "launches", r->kernels[i].launches);
        bitnet__jw_knum(&w, "ms", r->kernels[i].seconds * 1e3);
        bitnet__jw_close(&w, '}');
    }
    bitnet__jw_close(&w, ']');
    bitnet__jw_close(&w, '}');
    bitnet__jw_putc(&w, '\n');
    *len = w.len;
    if (w.len >= cap)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_receipt_write: needs %zu bytes, room for %zu", w.len + 1, cap);
    buf[w.len] = 0;
    return BITNET_OK;
}

/* Typed access to the parsed tree; the first problem is kept (BAD_METADATA: missing or mistyped,
   CORRUPT: a value out of its range) and later calls do nothing. */
typedef struct bitnet__rc_rd {
    const bitnet__json *j;
    bitnet_result err;
} bitnet__rc_rd;

static BITNET__PRINTF(3, 4) void bitnet__rc_rd_fail(bitnet__rc_rd *p, bitnet_result code, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    if (p->err != BITNET_OK) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->err = bitnet__err(code, "receipt: %s", msg);
}

static int32_t bitnet__rc_rd_get(bitnet__rc_rd *p, int32_t obj, const char *path, const char *key, int type) {
    static const char *names[] = {"null", "a boolean", "a boolean", "a number", "a string", "an array", "an object"};
    int32_t id;
    int t;
    if (p->err != BITNET_OK) return -1;
    id = bitnet__json_get(p->j, obj, key);
    if (id < 0) { bitnet__rc_rd_fail(p, BITNET_ERR_BAD_METADATA, "field %s%s is missing", path, key); return -1; }
    t = p->j->nodes[id].type;
    if (t == BITNET__J_TRUE) t = BITNET__J_FALSE;
    if (t != type) {
        bitnet__rc_rd_fail(p, BITNET_ERR_BAD_METADATA, "field %s%s is not %s", path, key, names[type]);
        return -1;
    }
    return id;
}

static void bitnet__rc_rd_str(bitnet__rc_rd *p, int32_t obj, const char *path, const char *key, char *dst, size_t cap) {
    int32_t id = bitnet__rc_rd_get(p, obj, path, key, BITNET__J_STR);
    size_t l;
    if (id < 0) return;
    l = strlen(p->j->nodes[id].str);
    if (l >= cap) { bitnet__rc_rd_fail(p, BITNET_ERR_BAD_METADATA, "field %s%s is longer than %zu bytes", path, key, cap - 1); return; }
    memcpy(dst, p->j->nodes[id].str, l + 1);
}

static double bitnet__rc_rd_num(bitnet__rc_rd *p, int32_t obj, const char *path, const char *key, double lo, double hi) {
    int32_t id = bitnet__rc_rd_get(p, obj, path, key, BITNET__J_NUM);
    double v;
    if (id < 0) return 0;
    v = p->j->nodes[id].num;
    if (v < lo || v > hi) {
        bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "field %s%s = %g is outside [%g, %g]", path, key, v, lo, hi);
        return 0;
    }
    return v;
}

static long long bitnet__rc_rd_int(bitnet__rc_rd *p, int32_t obj, const char *path, const char *key, long long lo, long long hi) {
    int32_t id = bitnet__rc_rd_get(p, obj, path, key, BITNET__J_NUM);
    double v;
    if (id < 0) return 0;
    v = p->j->nodes[id].num;
    if (!p->j->nodes[id].is_int) { bitnet__rc_rd_fail(p, BITNET_ERR_BAD_METADATA, "field %s%s is not an integer", path, key); return 0; }
    if (v < (double)lo || v > (double)hi) {
        bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "field %s%s = %.0f is outside [%lld, %lld]", path, key, v, lo, hi);
        return 0;
    }
    return (long long)v;
}

static int bitnet__rc_rd_bool(bitnet__rc_rd *p, int32_t obj, const char *path, const char *key) {
    int32_t id = bitnet__rc_rd_get(p, obj, path, key, BITNET__J_FALSE);
    return id >= 0 && p->j->nodes[id].type == BITNET__J_TRUE;
}

static int bitnet__rc_is_sha256_hex(const char *s) {
    int i;
    for (i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[64] == 0;
}

/* a within relative tolerance tol of b (or both tiny). */
static int bitnet__rc_close(double a, double b, double tol) { return fabs(a - b) <= tol * BITNET__MAX(fabs(a), fabs(b)) + 1e-9; }

/* Numbers that must agree with each other, as bitnet_bench produces them. */
static void bitnet__rc_consistency(bitnet__rc_rd *p, const bitnet_receipt *r) {
    size_t i, k;
    if (!bitnet__rc_is_sha256_hex(r->model_sha256)) bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "model.sha256 is not 64 lowercase hex digits");
    if (strcmp(r->backend, "cpu") != 0 && strcmp(r->backend, "cuda") != 0)
        bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "backend.used is '%s', not cpu or cuda", r->backend);
    if (strcmp(r->backend_requested, "auto") != 0 && strcmp(r->backend_requested, r->backend) != 0)
        bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "backend.requested is '%s' but '%s' ran", r->backend_requested, r->backend);
    if (!r->git_commit[0] || !r->library_version[0] || !r->model_path[0])
        bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "library.version, library.git_commit and model.path must not be empty");
    for (i = 0; i < r->n_results; i++) {
        const bitnet_bench_result *b = &r->results[i];
        double runs = (double)b->runs;
        if (!bitnet__rc_is_sha256_hex(b->tokens_sha256))
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu].tokens_sha256 is not 64 lowercase hex digits", i);
        if (!bitnet__rc_close(b->prompt_tps, b->prompt_tokens * 1e3 / b->prompt_ms, 1e-3))
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: prompt_tps %g disagrees with %d tokens in %g ms", i,
                            b->prompt_tps, (int)b->prompt_tokens, b->prompt_ms);
        if (!bitnet__rc_close(b->gen_tps, b->gen_tokens * 1e3 / b->gen_ms, 1e-3))
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: gen_tps %g disagrees with %d tokens in %g ms", i,
                            b->gen_tps, (int)b->gen_tokens, b->gen_ms);
        if (b->gen_tps_min > b->gen_tps * (1 + 1e-6) + 1e-9 || b->gen_tps > b->gen_tps_max * (1 + 1e-6) + 1e-9)
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: gen_tps %g is not within [gen_tps_min %g, gen_tps_max %g]",
                            i, b->gen_tps, b->gen_tps_min, b->gen_tps_max);
        if (b->prompt_ms + b->gen_ms > b->wall_ms * (1 + 1e-3) + 1e-3)
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: prompt_ms + gen_ms = %g exceeds wall_ms %g", i,
                            b->prompt_ms + b->gen_ms, b->wall_ms);
        if (b->ttft_ms > b->wall_ms * (1 + 1e-6) + 1e-6)
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: ttft_ms %g exceeds wall_ms %g", i, b->ttft_ms, b->wall_ms);
        if (b->p50_ms > b->p95_ms || b->p95_ms > b->p99_ms || b->p99_ms > b->wall_ms * runs * (1 + 1e-6) + 1e-6)
            bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "results[%zu]: latency p50 %g <= p95 %g <= p99 %g <= all runs' wall time fails",
                            i, b->p50_ms, b->p95_ms, b->p99_ms);
    }
    for (i = 0; i < r->n_kernels; i++) {
        if (!r->kernels[i].name[0]) bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "kernels[%zu] has an empty name", i);
        for (k = 0; k < i; k++)
            if (strcmp(r->kernels[k].name, r->kernels[i].name) == 0)
                bitnet__rc_rd_fail(p, BITNET_ERR_CORRUPT, "kernel '%s' is listed twice", r->kernels[i].name);
    }
}

BITNET_API bitnet_result bitnet_receipt_parse(const char *json, size_t len, bitnet_receipt *out) {
    bitnet__json j;
    bitnet__rc_rd p;
    int32_t top, o, arr, it;
    char path[64];
    size_t i;
    BITNET__CHECK_PTR(json);
    BITNET__CHECK_PTR(out);
    memset(out, 0, sizeof *out);
    if (len > BITNET_RECEIPT_MAX_BYTES)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "receipt: %zu bytes, more than the %u a receipt may have", len,
                           (unsigned)BITNET_RECEIPT_MAX_BYTES);
    BITNET__TRY(bitnet__json_parse(&j, json, len));
    p.j = &j;
    p.err = BITNET_OK;
    top = 0;
    if (j.nodes[0].type != BITNET__J_OBJ) bitnet__rc_rd_fail(&p, BITNET_ERR_BAD_METADATA, "the top level is not an object");
    bitnet__rc_rd_str(&p, top, "", "schema_version", out->schema_version, sizeof out->schema_version);
    if (p.err == BITNET_OK && strcmp(out->schema_version, BITNET_RECEIPT_SCHEMA) != 0)
        bitnet__rc_rd_fail(&p, BITNET_ERR_BAD_VERSION, "schema_version '%s', this build reads '%s'", out->schema_version,
                        BITNET_RECEIPT_SCHEMA);
    bitnet__rc_rd_str(&p, top, "", "created_utc", out->created_utc, sizeof out->created_utc);
    o = bitnet__rc_rd_get(&p, top, "", "library", BITNET__J_OBJ);
    bitnet__rc_rd_str(&p, o, "library.", "version", out->library_version, sizeof out->library_version);
    bitnet__rc_rd_str(&p, o, "library.", "git_commit", out->git_commit, sizeof out->git_commit);
    o = bitnet__rc_rd_get(&p, top, "", "model", BITNET__J_OBJ);
    bitnet__rc_rd_str(&p, o, "model.", "path", out->model_path, sizeof out->model_path);
    bitnet__rc_rd_str(&p, o, "model.", "sha256", out->model_sha256, sizeof out->model_sha256);
    out->model_bytes = (uint64_t)bitnet__rc_rd_int(&p, o, "model.", "bytes", 1, (1ll << 53));
    o = bitnet__rc_rd_get(&p, o, "model.", "config", BITNET__J_OBJ);
    bitnet__rc_rd_str(&p, o, "model.config.", "arch", out->model.arch, sizeof out->model.arch);
    out->model.n_vocab = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "n_vocab", 1, INT32_MAX);
    out->model.dim = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "dim", 1, INT32_MAX);
    out->model.n_layers = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "n_layers", 1, INT32_MAX);
    out->model.n_heads = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "n_heads", 1, INT32_MAX);
    out->model.n_kv_heads = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "n_kv_heads", 1, INT32_MAX);
    out->model.head_dim = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "head_dim", 1, INT32_MAX);
    out->model.ffn_dim = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "ffn_dim", 1, INT32_MAX);
    out->model.n_ctx_train = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "n_ctx_train", 1, INT32_MAX);
    out->model.rope_theta = (float)bitnet__rc_rd_num(&p, o, "model.config.", "rope_theta", 0, FLT_MAX);
    out->model.norm_eps = (float)bitnet__rc_rd_num(&p, o, "model.config.", "norm_eps", 0, 1);
    out->model.bos = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "bos", -1, INT32_MAX);
    out->model.eos = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "eos", -1, INT32_MAX);
    out->model.eot = (int32_t)bitnet__rc_rd_int(&p, o, "model.config.", "eot", -1, INT32_MAX);
    o = bitnet__rc_rd_get(&p, top, "", "backend", BITNET__J_OBJ);
    bitnet__rc_rd_str(&p, o, "backend.", "requested", out->backend_requested, sizeof out->backend_requested);
    bitnet__rc_rd_str(&p, o, "backend.", "used", out->backend, sizeof out->backend);
    bitnet__rc_rd_str(&p, o, "backend.", "reason", out->model.backend_reason, sizeof out->model.backend_reason);
    out->model.backend = strcmp(out->backend, "cuda") == 0 ? BITNET_BACKEND_CUDA : BITNET_BACKEND_CPU;
    bitnet__rc_rd_str(&p, top, "", "precision", out->precision, sizeof out->precision);
    o = bitnet__rc_rd_get(&p, top, "", "host", BITNET__J_OBJ);
    bitnet__rc_rd_str(&p, o, "host.", "cpu", out->cpu_model, sizeof out->cpu_model);
    bitnet__rc_rd_str(&p, o, "host.", "isa", out->isa, sizeof out->isa);
    out->threads = (int32_t)bitnet__rc_rd_int(&p, o, "host.", "threads", 1, 65536);
    if (p.err == BITNET_OK && (o = bitnet__json_get(&j, top, "gpu")) >= 0 && j.nodes[o].type == BITNET__J_OBJ) {
        char cc[32], *dot;
        out->has_gpu = 1;
        bitnet__rc_rd_str(&p, o, "gpu.", "name", out->gpu_name, sizeof out->gpu_name);
        bitnet__rc_rd_str(&p, o, "gpu.", "compute_capability", cc, sizeof cc);
        bitnet__rc_rd_str(&p, o, "gpu.", "arch", out->gpu_arch, sizeof out->gpu_arch);
        bitnet__rc_rd_str(&p, o, "gpu.", "driver_version", out->gpu_driver_version, sizeof out->gpu_driver_version);
        bitnet__rc_rd_str(&p, o, "gpu.", "nvrtc_version", out->nvrtc_version, sizeof out->nvrtc_version);
        /* "9.0": a missing or malformed value leaves 0.0, which the GPU gate rejects */
        if (p.err == BITNET_OK && (dot = strchr(cc, '.')) != NULL && dot > cc && dot - cc <= 3 && dot[1] &&
            strspn(cc, "0123456789") == (size_t)(dot - cc) && strspn(dot + 1, "0123456789") == strlen(dot + 1) &&
            strlen(dot + 1) <= 3) {
            out->gpu_cc_major = (int32_t)atoi(cc);
            out->gpu_cc_minor = (int32_t)atoi(dot + 1);
        }
    } else if (p.err == BITNET_OK && (o < 0 || j.nodes[o].type != BITNET__J_NULL)) {
        bitnet__rc_rd_fail(&p, BITNET_ERR_BAD_METADATA, "field gpu is %s", o < 0 ? "missing" : "neither an object nor null");
    }
    o = bitnet__rc_rd_get(&p, top, "", "memory", BITNET__J_OBJ);
    out->peak_host_rss_bytes = (uint64_t)bitnet__rc_rd_int(&p, o, "memory.", "peak_host_rss_bytes", 1, (1ll << 53));
    out->peak_device_bytes = (uint64_t)bitnet__rc_rd_int(&p, o, "memory.", "peak_device_bytes", 0, (1ll << 53));
    out->warmup_runs = (int32_t)bitnet__rc_rd_int(&p, top, "", "warmup_runs", 0, 1000000);
    o = bitnet__rc_rd_get(&p, top, "", "determinism", BITNET__J_OBJ);
    out->determinism_checked = bitnet__rc_rd_bool(&p, o, "determinism.", "checked");
    out->seeded_runs_identical = bitnet__rc_rd_bool(&p, o, "determinism.", "seeded_runs_identical");

    arr = bitnet__rc_rd_get(&p, top, "", "results", BITNET__J_ARR);
    if (arr >= 0 && (j.nodes[arr].count < 1 || j.nodes[arr].count > BITNET_BENCH_MAX_RESULTS))
        bitnet__rc_rd_fail(&p, BITNET_ERR_CORRUPT, "results holds %d entries, not 1 to %d", (int)j.nodes[arr].count,
                        BITNET_BENCH_MAX_RESULTS);
    for (i = 0, it = arr >= 0 ? j.nodes[arr].first : -1; p.err == BITNET_OK && it >= 0; it = j.nodes[it].next, i++) {
        bitnet_bench_result *b = &out->results[i];
        int32_t lat;
        snprintf(path, sizeof path, "results[%zu].", i);
        if (j.nodes[it].type != BITNET__J_OBJ) { bitnet__rc_rd_fail(&p, BITNET_ERR_BAD_METADATA, "results[%zu] is not an object", i); break; }
        b->prompt_tokens = (int32_t)bitnet__rc_rd_int(&p, it, path, "prompt_tokens", 1, INT32_MAX);
        b->gen_tokens = (int32_t)bitnet__rc_rd_int(&p, it, path, "gen_tokens", 1, INT32_MAX);
        b->runs = (int32_t)bitnet__rc_rd_int(&p, it, path, "runs", 1, 1000000);
        b->prompt_ms = bitnet__rc_rd_num(&p, it, path, "prompt_ms", 1e-6, 1e12);
        b->gen_ms = bitnet__rc_rd_num(&p, it, path, "gen_ms", 1e-6, 1e12);
        b->wall_ms = bitnet__rc_rd_num(&p, it, path, "wall_ms", 1e-6, 1e12);
        b->ttft_ms = bitnet__rc_rd_num(&p, it, path, "ttft_ms", 1e-6, 1e12);
        b->prompt_tps = bitnet__rc_rd_num(&p, it, path, "prompt_tps", 1e-6, 1e12);
        b->gen_tps = bitnet__rc_rd_num(&p, it, path, "gen_tps", 1e-6, 1e12);
        b->gen_tps_min = bitnet__rc_rd_num(&p, it, path, "gen_tps_min", 1e-6, 1e12);
        b->gen_tps_max = bitnet__rc_rd_num(&p, it, path, "gen_tps_max", 1e-6, 1e12);
        lat = bitnet__rc_rd_get(&p, it, path, "latency_ms", BITNET__J_OBJ);
        snprintf(path, sizeof path, "results[%zu].latency_ms.", i);
        b->p50_ms = bitnet__rc_rd_num(&p, lat, path, "p50", 0, 1e12);
        b->p95_ms = bitnet__rc_rd_num(&p, lat, path, "p95", 0, 1e12);
        b->p99_ms = bitnet__rc_rd_num(&p, lat, path, "p99", 0, 1e12);
        snprintf(path, sizeof path, "results[%zu].", i);
        bitnet__rc_rd_str(&p, it, path, "tokens_sha256", b->tokens_sha256, sizeof b->tokens_sha256);
        b->outputs_identical = bitnet__rc_rd_bool(&p, it, path, "outputs_identical");
    }
    out->n_results = i;

    arr = bitnet__rc_rd_get(&p, top, "", "kernels", BITNET__J_ARR);
    if (arr >= 0 && (j.nodes[arr].count < 1 || j.nodes[arr].count > BITNET_BENCH_MAX_KERNELS))
        bitnet__rc_rd_fail(&p, BITNET_ERR_CORRUPT, "kernels holds %d entries, not 1 to %d (a receipt names what ran)",
                        (int)j.nodes[arr].count, BITNET_BENCH_MAX_KERNELS);
    for (i = 0, it = arr >= 0 ? j.nodes[arr].first : -1; p.err == BITNET_OK && it >= 0; it = j.nodes[it].next, i++) {
        bitnet_kernel_stat *k = &out->kernels[i];
        snprintf(path, sizeof path, "kernels[%zu].", i);
        if (j.nodes[it].type != BITNET__J_OBJ) { bitnet__rc_rd_fail(&p, BITNET_ERR_BAD_METADATA, "kernels[%zu] is not an object", i); break; }
        bitnet__rc_rd_str(&p, it, path, "name", k->name, sizeof k->name);
        k->launches = (uint64_t)bitnet__rc_rd_int(&p, it, path, "launches", 1, (1ll << 53));
        k->seconds = bitnet__rc_rd_num(&p, it, path, "ms", 0, 1e12) * 1e-3;
    }
    out->n_kernels = i;
    if (p.err == BITNET_OK) bitnet__rc_consistency(&p, out);
    bitnet__json_free(&j);
    if (p.err != BITNET_OK) memset(out, 0, sizeof *out);
    return p.err;
}

/* ---- host facts ------------------------------------------------------------------------------- */
static void bitnet__rc_cpu_model(char *out, size_t cap) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *v = strchr(line, ':');
        size_t l;
        if (strncmp(line, "model name", 10) != 0 || !v) continue;
        for (v++; *v == ' ' || *v == '\t'; v++) {}
        l = strcspn(v, "\r\n");
        if (l) snprintf(out, cap, "%.*s", (int)l, v);
        break;
    }
    fclose(f);
}

/* Peak resident set since the last reset (Linux: VmHWM, reset through clear_refs), else since the
   process started (getrusage). */
static void bitnet__rc_peak_rss_reset(void) {
#if defined(__linux__)
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) { fputs("5", f); fclose(f); }
#endif
}
static uint64_t bitnet__rc_peak_rss(void) {
    uint64_t kb = 0;
#if defined(__linux__)
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    if (f) {
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "VmHWM:", 6) == 0) { kb = strtoull(line + 6, NULL, 10); break; }
        fclose(f);
    }
#endif
#if !defined(_WIN32)
    if (!kb) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0) kb = (uint64_t)ru.ru_maxrss;
#if defined(__APPLE__)
        kb /= 1024; /* bytes there */
#endif
    }
#endif
    return kb * 1024;
}

static const char *bitnet__rc_backend_name(bitnet_backend b) {
    static const char *names[] = {"auto", "cpu", "cuda"};
    return ((unsigned)b < 3) ? names[b] : "unknown";
}

/* The device block and peak device memory come from the GPU runtime: this is the one place that
   asks it. Until the runtime reports them, a receipt carries no device block, and a CUDA receipt
   fails --require-gpu-kernels, as it should when nothing vouches for the device. */
static void bitnet__receipt_gpu(const bitnet_model *m, bitnet_receipt *r) {
    (void)m;
    r->has_gpu = 0;
    r->peak_device_bytes = 0;
}

/* What the weights are stored as, read from the file ("I2_S"), for the precision field. */
static void bitnet__receipt_precision(const char *path, bitnet_receipt *r) {
    bitnet_gguf *g = NULL;
    bitnet_tensor_info ti;
    char type[24];
    snprintf(type, sizeof type, "unknown");
    if (bitnet_gguf_open(path, &g) == BITNET_OK) {
        if (bitnet_gguf_find_tensor(g, "blk.0.attn_q.weight", &ti) == BITNET_OK) {
            switch (ti.type) {
            case BITNET_TENSOR_F32: snprintf(type, sizeof type, "F32"); break;
            case BITNET_TENSOR_F16: snprintf(type, sizeof type, "F16"); break;
            case BITNET_TENSOR_BF16: snprintf(type, sizeof type, "BF16"); break;
            case BITNET_TENSOR_Q8_0: snprintf(type, sizeof type, "Q8_0"); break;
            case BITNET_TENSOR_I2_S: snprintf(type, sizeof type, "I2_S"); break;
            default: snprintf(type, sizeof type, "type %d", (int)ti.type);
            }
        }
        bitnet_gguf_close(g);
    }
    bitnet_clear_error();
    /* BitNet b1.58 is W1.58A8 by definition: ternary weights, int8 activations */
    snprintf(r->precision, sizeof r->precision, "W1.58A8 (ternary weights stored as %s, int8 activations)", type);
}

static void bitnet__rc_utc_now(char *buf, size_t cap) {
    time_t t = time(NULL);
    struct tm tm;
#if defined(_WIN32)
    gmtime_s(&tm, &t);
#else
    gmtime_r(&t, &tm);
#endif
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- the benchmark ---------------------------------------------------------------------------- */
/* The fixed prompt: the ids of this text, repeated and cut to length (BOS first when the model has
   one). A model without a tokenizer gets ids 3, 4, 5, ... instead. */
static const char bitnet__bench_text[] =
    "The quick brown fox jumps over the lazy dog. A ternary network stores each weight as -1, 0 or +1, "
    "so a matrix-vector product needs only additions and subtractions, and the whole model fits in a "
    "fraction of the memory a half-precision one needs. Benchmarks report what ran, on which device, "
    "and how long each token took, so that nobody has to take a speed claim on trust.";

typedef struct bitnet__bench_clock {
    double t0, last, ttft;
    double *lat;                 /* per-token decode latencies, seconds */
    size_t n_lat, cap_lat;
    int32_t seen;
} bitnet__bench_clock;

static int bitnet__bench_on_token(int32_t token, const char *piece, size_t len, void *user) {
    bitnet__bench_clock *c = (bitnet__bench_clock *)user;
    double now = bitnet__now();
    (void)token; (void)piece; (void)len;
    if (c->seen++ == 0) c->ttft = now - c->t0;
    else if (c->n_lat < c->cap_lat) c->lat[c->n_lat++] = now - c->last;
    c->last = now;
    return 0;
}

/* prompt[0..n) = BOS (when the model has one), then the fixed ids over and over. */
static void bitnet__bench_prompt(int32_t *prompt, int32_t n, const int32_t *base, size_t n_base, int32_t bos) {
    int32_t k, skip = bos >= 0;
    for (k = 0; k < n; k++) prompt[k] = (k == 0 && skip) ? bos : base[(size_t)(k - skip) % n_base];
}

static int bitnet__rc_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
/* Nearest-rank percentile of sorted values. */
static double bitnet__rc_percentile(const double *v, size_t n, double pct) {
    size_t rank;
    if (!n) return 0;
    rank = (size_t)ceil(pct / 100.0 * (double)n);
    return v[rank ? rank - 1 : 0];
}

static void bitnet__tokens_sha256(const int32_t *t, size_t n, char hex[65]) {
    bitnet__sha256 s;
    uint8_t d[32], le[4];
    size_t i;
    bitnet__sha256_init(&s);
    for (i = 0; i < n; i++) {
        uint32_t u = (uint32_t)t[i];
        le[0] = (uint8_t)u; le[1] = (uint8_t)(u >> 8); le[2] = (uint8_t)(u >> 16); le[3] = (uint8_t)(u >> 24);
        bitnet__sha256_update(&s, le, 4);
    }
    bitnet__sha256_final(&s, d);
    bitnet__sha256_hex(d, 32, hex);
}

/* One bitnet_generate call on a fresh sequence: exactly n_gen tokens, no stop tokens. */
static bitnet_result bitnet__bench_generate(bitnet_session *s, const int32_t *prompt, size_t n_prompt, int32_t n_gen,
                                            const bitnet_sampler_params *sp, bitnet__bench_clock *c, int32_t *out,
                                            bitnet_generate_stats *st, double *wall) {
    bitnet_generate_params gp;
    static const int32_t no_stop[1] = {-1};
    double t0;
    memset(&gp, 0, sizeof gp);
    gp.sampler = *sp;
    gp.max_tokens = n_gen;
    gp.stop_tokens = no_stop; /* non-NULL with n_stop 0: no stop tokens */
    gp.n_stop = 0;
    gp.on_token = bitnet__bench_on_token;
    gp.user = c;
    bitnet_session_reset(s);
    c->seen = 0;
    bitnet__nvtx_push("bitnet bench run");
    c->t0 = c->last = t0 = bitnet__now();
    {
        bitnet_result r = bitnet_generate(s, prompt, n_prompt, &gp, out, (size_t)n_gen, st);
        *wall = bitnet__now() - t0;
        bitnet__nvtx_pop();
        if (r != BITNET_OK) return r;
    }
    if (st->n_generated != (size_t)n_gen || st->n_prompt != n_prompt || c->seen != n_gen)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_bench: generation gave %zu of %d tokens (prompt %zu)",
                           st->n_generated, (int)n_gen, n_prompt);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_bench(bitnet_model *m, const bitnet_bench_params *p, bitnet_receipt *out) {
    bitnet_bench_params d;
    const bitnet_tokenizer *tok;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_sampler_params greedy;
    bitnet__bench_clock clk;
    int32_t *base = NULL, *prompt = NULL, *toks = NULL, *first = NULL, max_len = 0;
    size_t n_base = 0, i, n_lens, total_runs, done = 0;
    bitnet_result r = BITNET_OK;
    int run;
    BITNET__CHECK_PTR(m);
    BITNET__CHECK_PTR(p);
    BITNET__CHECK_PTR(out);
    if (!p->model_path) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_bench: model_path is NULL (the receipt hashes the file)");
    d = *p;
    if (!d.n_prompt_lens) { d.n_prompt_lens = 1; d.prompt_lens[0] = 64; }
    if (!d.gen_tokens) d.gen_tokens = 128;
    if (!d.runs) d.runs = 5;
    d.warmup = d.warmup == 0 ? 1 : (d.warmup < 0 ? 0 : d.warmup);
    n_lens = d.n_prompt_lens;
    if (n_lens > BITNET_BENCH_MAX_RESULTS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_bench: %zu prompt lengths, at most %d", n_lens, BITNET_BENCH_MAX_RESULTS);
    if (d.gen_tokens < 1 || d.runs < 1 || d.runs > 100000 || d.warmup > 1000)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_bench: gen_tokens %d, runs %d, warmup %d", (int)d.gen_tokens,
                           (int)d.runs, (int)d.warmup);
    for (i = 0; i < n_lens; i++) {
        if (d.prompt_lens[i] < 1) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_bench: prompt length %d", (int)d.prompt_lens[i]);
        max_len = BITNET__MAX(max_len, d.prompt_lens[i]);
    }
    if (d.tokens_out && d.tokens_cap < n_lens * (size_t)d.gen_tokens)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_bench: tokens_out holds %zu, needs %zu", d.tokens_cap,
                           n_lens * (size_t)d.gen_tokens);
    if ((int64_t)max_len + d.gen_tokens > INT32_MAX) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_bench: lengths overflow");

    memset(out, 0, sizeof *out);
    snprintf(out->schema_version, sizeof out->schema_version, "%s", BITNET_RECEIPT_SCHEMA);
    bitnet__rc_utc_now(out->created_utc, sizeof out->created_utc);
    snprintf(out->library_version, sizeof out->library_version, "%s", BITNET_VERSION_STRING);
#ifdef BITNET_GIT_COMMIT
    snprintf(out->git_commit, sizeof out->git_commit, "%s", BITNET_GIT_COMMIT);
#else
    snprintf(out->git_commit, sizeof out->git_commit, "unknown");
#endif
    if (strlen(p->model_path) >= sizeof out->model_path)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_bench: model path longer than %zu bytes", sizeof out->model_path - 1);
    snprintf(out->model_path, sizeof out->model_path, "%s", p->model_path);
    BITNET__TRY(bitnet_model_get_info(m, &out->model));
    BITNET__TRY(bitnet_sha256_file(p->model_path, out->model_sha256, &out->model_bytes));
    snprintf(out->backend_requested, sizeof out->backend_requested, "%s", bitnet__rc_backend_name(d.requested));
    snprintf(out->backend, sizeof out->backend, "%s", bitnet__rc_backend_name(out->model.backend));
    bitnet__receipt_precision(p->model_path, out);
    bitnet__rc_cpu_model(out->cpu_model, sizeof out->cpu_model);
    snprintf(out->isa, sizeof out->isa, "%s", bitnet_isa_name(bitnet_cpu_isa()));
    out->threads = bitnet_num_threads();
    out->warmup_runs = d.warmup;

    /* the fixed prompt's ids (byte-level BPE gives at most one id per byte) */
    tok = bitnet_model_tokenizer(m);
    n_base = sizeof bitnet__bench_text;
    base = (int32_t *)bitnet__calloc(n_base, sizeof *base);
    prompt = (int32_t *)bitnet__calloc((size_t)max_len, sizeof *prompt);
    toks = (int32_t *)bitnet__calloc((size_t)d.gen_tokens, sizeof *toks);
    first = (int32_t *)bitnet__calloc((size_t)d.gen_tokens, sizeof *first);
    memset(&clk, 0, sizeof clk);
    clk.cap_lat = (size_t)d.runs * (size_t)d.gen_tokens;
    clk.lat = (double *)bitnet__calloc(clk.cap_lat, sizeof *clk.lat);
    if (!base || !prompt || !toks || !first || !clk.lat) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    if (tok) {
        if ((r = bitnet_tokenize(tok, bitnet__bench_text, sizeof bitnet__bench_text - 1, 0, 0, base, n_base, &n_base)) != BITNET_OK)
            goto done;
        if (!n_base) { r = bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_bench: the fixed prompt tokenizes to nothing"); goto done; }
    } else {
        n_base = 64;
        for (i = 0; i < n_base; i++) base[i] = (int32_t)(3 + i % (size_t)BITNET__MAX(out->model.n_vocab - 3, 1));
    }

    if ((int64_t)max_len + d.gen_tokens > out->model.n_ctx_train) {
        r = bitnet__err(BITNET_ERR_CONTEXT_FULL, "bitnet_bench: prompt %d + %d generated tokens exceed the model's context of %d",
                        (int)max_len, (int)d.gen_tokens, (int)out->model.n_ctx_train);
        goto done;
    }
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = max_len + d.gen_tokens;
    if ((r = bitnet_session_create(m, &sd, &s)) != BITNET_OK) goto done;
    memset(&greedy, 0, sizeof greedy);
    total_runs = (size_t)d.warmup + n_lens * (size_t)d.runs + (d.check_determinism ? 2 : 0);

    /* warm-up: the first length, a few tokens: pages the weights in, JIT-compiles, fills caches */
    for (run = 0; run < d.warmup; run++) {
        bitnet_generate_stats st;
        double wall;
        int32_t n = d.prompt_lens[0];
        bitnet__bench_prompt(prompt, n, base, n_base, out->model.bos);
        clk.n_lat = 0;
        if ((r = bitnet__bench_generate(s, prompt, (size_t)n, BITNET__MIN(d.gen_tokens, 8), &greedy, &clk, toks, &st, &wall)) != BITNET_OK)
            goto done;
        if (d.progress) d.progress((float)++done / (float)total_runs, d.progress_user);
    }

    bitnet_kernel_stats_reset();
    bitnet__rc_peak_rss_reset();
    for (i = 0; i < n_lens; i++) {
        bitnet_bench_result *b = &out->results[i];
        int32_t n = d.prompt_lens[i];
        double sum_prompt = 0, sum_gen = 0, sum_wall = 0, sum_ttft = 0;
        bitnet__bench_prompt(prompt, n, base, n_base, out->model.bos);
        b->prompt_tokens = n;
        b->gen_tokens = d.gen_tokens;
        b->runs = d.runs;
        b->outputs_identical = 1;
        clk.n_lat = 0;
        for (run = 0; run < d.runs; run++) {
            bitnet_generate_stats st;
            double wall, tps;
            if ((r = bitnet__bench_generate(s, prompt, (size_t)n, d.gen_tokens, &greedy, &clk, toks, &st, &wall)) != BITNET_OK)
                goto done;
            sum_prompt += st.prompt_seconds;
            sum_gen += st.gen_seconds;
            sum_wall += wall;
            sum_ttft += clk.ttft;
            tps = st.gen_seconds > 0 ? (double)d.gen_tokens / st.gen_seconds : 0;
            if (run == 0 || tps < b->gen_tps_min) b->gen_tps_min = tps;
            if (run == 0 || tps > b->gen_tps_max) b->gen_tps_max = tps;
            if (run == 0) memcpy(first, toks, (size_t)d.gen_tokens * sizeof *toks);
            else if (memcmp(first, toks, (size_t)d.gen_tokens * sizeof *toks) != 0) b->outputs_identical = 0;
            if (d.progress) d.progress((float)++done / (float)total_runs, d.progress_user);
        }
        if (!(sum_prompt > 0) || !(sum_gen > 0)) {
            r = bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_bench: the clock did not advance");
            goto done;
        }
        b->prompt_ms = sum_prompt * 1e3 / d.runs;
        b->gen_ms = sum_gen * 1e3 / d.runs;
        b->wall_ms = sum_wall * 1e3 / d.runs;
        b->ttft_ms = sum_ttft * 1e3 / d.runs;
        b->prompt_tps = (double)n * d.runs / sum_prompt;
        b->gen_tps = (double)d.gen_tokens * d.runs / sum_gen;
        qsort(clk.lat, clk.n_lat, sizeof *clk.lat, bitnet__rc_cmp_double);
        b->p50_ms = bitnet__rc_percentile(clk.lat, clk.n_lat, 50) * 1e3;
        b->p95_ms = bitnet__rc_percentile(clk.lat, clk.n_lat, 95) * 1e3;
        b->p99_ms = bitnet__rc_percentile(clk.lat, clk.n_lat, 99) * 1e3;
        bitnet__tokens_sha256(first, (size_t)d.gen_tokens, b->tokens_sha256);
        if (d.tokens_out) memcpy(d.tokens_out + i * (size_t)d.gen_tokens, first, (size_t)d.gen_tokens * sizeof *first);
        out->n_results = i + 1;
    }
    out->peak_host_rss_bytes = bitnet__rc_peak_rss();
    bitnet__receipt_gpu(m, out);
    if ((r = bitnet_kernel_stats(out->kernels, BITNET_BENCH_MAX_KERNELS, &out->n_kernels)) != BITNET_OK) goto done;

    /* two sampled runs with one seed must agree token for token */
    if (d.check_determinism) {
        bitnet_sampler_params sp;
        int32_t n = d.prompt_lens[0];
        memset(&sp, 0, sizeof sp);
        sp.temperature = 0.8f;
        sp.top_k = 40;
        sp.top_p = 0.95f;
        sp.seed = 1234;
        bitnet__bench_prompt(prompt, n, base, n_base, out->model.bos);
        out->determinism_checked = 1;
        for (run = 0; run < 2; run++) {
            bitnet_generate_stats st;
            double wall;
            clk.n_lat = 0;
            if ((r = bitnet__bench_generate(s, prompt, (size_t)n, d.gen_tokens, &sp, &clk, run ? toks : first, &st, &wall)) != BITNET_OK)
                goto done;
            if (d.progress) d.progress((float)++done / (float)total_runs, d.progress_user);
        }
        out->seeded_runs_identical = memcmp(first, toks, (size_t)d.gen_tokens * sizeof *toks) == 0;
    }
done:
    bitnet_session_free(s);
    bitnet__free(base);
    bitnet__free(prompt);
    bitnet__free(toks);
    bitnet__free(first);
    bitnet__free(clk.lat);
    if (r != BITNET_OK) out->n_results = 0;
    return r;
}

/* ---- gates ------------------------------------------------------------------------------------- */
typedef struct bitnet__rc_report {
    char *buf;
    size_t cap, len;
    int n;
} bitnet__rc_report;

static BITNET__PRINTF(2, 3) void bitnet__rc_breach(bitnet__rc_report *rep, const char *fmt, ...) {
    va_list ap;
    rep->n++;
    if (!rep->buf || rep->len + 1 >= rep->cap) return;
    va_start(ap, fmt);
    vsnprintf(rep->buf + rep->len, rep->cap - rep->len, fmt, ap);
    va_end(ap);
    rep->len += strlen(rep->buf + rep->len);
    if (rep->len + 1 < rep->cap) { rep->buf[rep->len++] = '\n'; rep->buf[rep->len] = 0; }
}

BITNET_API bitnet_result bitnet_receipt_check(const bitnet_receipt *r, const bitnet_receipt_gates *g,
                                              char *report, size_t cap, int *n_breaches) {
    bitnet__rc_report rep;
    size_t i;
    BITNET__CHECK_PTR(r);
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(n_breaches);
    if (!(g->min_tps >= 0) || !(g->max_p95_ms >= 0) || !(g->max_wall_ms >= 0))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_receipt_check: gate values must be >= 0 (0 = off)");
    if (r->n_results > BITNET_BENCH_MAX_RESULTS || r->n_kernels > BITNET_BENCH_MAX_KERNELS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_receipt_check: %zu results, %zu kernels", r->n_results, r->n_kernels);
    rep.buf = cap ? report : NULL;
    rep.cap = cap;
    rep.len = 0;
    rep.n = 0;
    if (rep.buf) rep.buf[0] = 0;
    if (g->require_gpu_kernels) {
        uint64_t gpu_launches = 0;
        int arch = 0;
        if (strcmp(r->backend, "cuda") != 0)
            bitnet__rc_breach(&rep, "require-gpu-kernels: the backend that ran is '%s', not cuda", r->backend);
        if (!r->has_gpu) bitnet__rc_breach(&rep, "require-gpu-kernels: no device block (gpu is null)");
        else {
            if (!r->gpu_name[0]) bitnet__rc_breach(&rep, "require-gpu-kernels: the device block has no GPU name");
            if (r->gpu_cc_major < 1) bitnet__rc_breach(&rep, "require-gpu-kernels: the device block has no compute capability");
            /* sm_XY: a cubin; compute_XY: PTX the driver compiles for the device */
            const char *num = strncmp(r->gpu_arch, "sm_", 3) == 0 ? r->gpu_arch + 3
                              : strncmp(r->gpu_arch, "compute_", 8) == 0 ? r->gpu_arch + 8 : NULL;
            if (!num || !*num || strlen(num) > 4 || strspn(num, "0123456789") != strlen(num))
                bitnet__rc_breach(&rep, "require-gpu-kernels: the device block's arch '%s' is not sm_<number> or compute_<number>",
                                  r->gpu_arch);
            else if ((arch = atoi(num)) > r->gpu_cc_major * 10 + r->gpu_cc_minor && r->gpu_cc_major >= 1)
                bitnet__rc_breach(&rep, "require-gpu-kernels: arch %s is newer than the device's compute capability %d.%d",
                               r->gpu_arch, (int)r->gpu_cc_major, (int)r->gpu_cc_minor);
        }
        for (i = 0; i < r->n_kernels; i++) {
            if (strncmp(r->kernels[i].name, BITNET_GPU_KERNEL_PREFIX, strlen(BITNET_GPU_KERNEL_PREFIX)) == 0)
                gpu_launches += r->kernels[i].launches;
            else if (strncmp(r->kernels[i].name, "cpu_gemm", 8) == 0 && r->kernels[i].launches && strcmp(r->backend, "cuda") == 0)
                bitnet__rc_breach(&rep, "require-gpu-kernels: CPU matrix kernel %s ran %llu times: part of the model ran on the CPU",
                               r->kernels[i].name, (unsigned long long)r->kernels[i].launches);
        }
        if (!gpu_launches)
            bitnet__rc_breach(&rep, "require-gpu-kernels: no kernel named " BITNET_GPU_KERNEL_PREFIX "* was launched");
    }
    for (i = 0; i < r->n_results; i++) {
        const bitnet_bench_result *b = &r->results[i];
        if (g->min_tps > 0 && b->gen_tps < g->min_tps)
            bitnet__rc_breach(&rep, "min-tps: generation %.2f tokens/s < %.2f (prompt %d, %d generated)", b->gen_tps, g->min_tps,
                           (int)b->prompt_tokens, (int)b->gen_tokens);
        if (g->max_p95_ms > 0 && b->p95_ms > g->max_p95_ms)
            bitnet__rc_breach(&rep, "max-p95-ms: per-token latency p95 %.3f ms > %.3f (prompt %d)", b->p95_ms, g->max_p95_ms,
                           (int)b->prompt_tokens);
        if (g->max_wall_ms > 0 && b->wall_ms > g->max_wall_ms)
            bitnet__rc_breach(&rep, "max-wall-ms: wall time %.3f ms > %.3f (prompt %d, %d generated)", b->wall_ms, g->max_wall_ms,
                           (int)b->prompt_tokens, (int)b->gen_tokens);
    }
    *n_breaches = rep.n;
    return BITNET_OK;
}

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
