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
     >>json            JSON writer and parser (receipts, >>convert, JSON schemas for >>grammar, `bitnet serve`)
     >>formats         fp16 / bf16 conversion
     >>quant           BitNet b1.58 quantization and I2_S packing
     >>threads         the persistent thread pool
     >>cpu-math        fp32 GEMM, RMSNorm, softmax, fp16 GEMV (scalar and SIMD)
     >>cpu-kernels     ternary GEMV/GEMM and friends, scalar reference then SIMD paths
     >>gguf            GGUF reader and writer
     >>tokenizer       byte-level BPE (LLaMA 3) and SentencePiece (LLaMA 2)
     >>sampler         sampling
     >>grammar         GBNF grammars: generation held to a grammar
     >>cpu-forward     the transformer forward pass on the CPU
     >>cuda-loader     dlopen of libcuda and NVRTC, device query, context, streams
     >>nvrtc           JIT compile and module cache
     >>gpu-pool        device memory pool and statistics
     >>cuda-kernels    host side of the kernels in bitnet_cuda_kernels.h
     >>cuda-forward    the forward pass on the GPU, in the same order as the CPU one
       >>pad           heads whose dims are not a multiple of 32 (1bitLLM-3B's 100), padded on the GPU
     >>model           model loading and sessions
       >>state         a session's state as bytes (prompt caches), one layout for both backends
     >>receipt         benchmarks and their receipts; SHA-256
     >>convert         Hugging Face checkpoints (safetensors, tokenizer.json) to GGUF
     >>public          bodies of the public functions that are thin shells

   OPTIONS (compile time; "impl" = only needed in the BITNET_IMPLEMENTATION file)
     BITNET_STATIC        global  every API function is static
     BITNET_NO_CUDA       impl    compile the GPU runtime out; GPU calls return BITNET_ERR_UNSUPPORTED
     BITNET_NO_SIMD       impl    scalar kernels only
     BITNET_NO_THREADS    impl    no thread pool
     BITNET_NO_MMAP       impl    read GGUF files into memory instead of mapping them
     BITNET_NO_AMX        impl    no AMX code (Linux x86-64 with GCC 11+ / clang 12+ has it)
     BITNET_MALLOC/BITNET_FREE impl  default allocator (both or neither); bitnet_set_allocator overrides

   OPTIONS (environment, read at first use)
     BITNET_CPU=scalar|avx2|avx512|neon   force a CPU path (an error if the CPU lacks it)
     BITNET_CPU_AMX=0                     prompt GEMMs on AVX-512 VNNI even where AMX tiles are there
                                          (read at each GEMM: tests and A/B runs switch it)
     BITNET_NUM_THREADS=N                 thread count, default the online cores
     BITNET_FAULT=host_alloc:N            make the Nth host allocation fail (testing); also
                                          device_alloc:N, nvrtc, module_load (comma-separated)
     BITNET_LIBCUDA, BITNET_NVRTC         paths of the CUDA driver and NVRTC libraries
     BITNET_CACHE_DIR                     JIT cache folder (else $XDG_CACHE_HOME/bitnet, ~/.cache/bitnet);
                                          BITNET_CUDA_CACHE=0 turns the disk cache off
     BITNET_MEMORY_LIMIT=512MB            cap on device memory (a clean out-of-memory error past it)
     BITNET_GPU_FAKE=cuda,rocm|""         mock backend detection (reported as mocked; tests)
     BITNET_GPU_TIMING=1                  per-kernel event timing on new GPU handles
     BITNET_POOL_BACKTRACE=1              call stacks in the device pool's leak report
     BITNET_HEAD=q8|f16                   the LM head: int8 rows with scales (default) or exact fp16
     BITNET_SEED=S, BITNET_DETERMINISTIC=1  seed for a zero sampler seed; a fixed one instead of the clock
     BITNET_GPU_PDL=0                     no programmatic dependent launch on new GPU handles (decode, prefill, GEMM)
     BITNET_GPU_NO_CLUSTER=1              sm_90: the decode attention's ranges combined by a last block, not a cluster
     BITNET_GPU_ATT_T, _R, _TILE, _W, _W2  the decode attention's range lengths and forms (tests, A/B; >>cuda-forward)
     BITNET_GPU_ATT_CUT=0                 the prefill attention's heaviest blocks not cut in pieces (A/B)
     BITNET_GPU_HOST_EMB=0                decode uploads each step's embedding row (no mapped host copy)
     BITNET_GPU_TOPK=0 | 1                GPU sampling downloads the whole logits row | draws on the host (tests, A/B)
     BITNET_TGEMV_PDL=0, BITNET_TGEMV_WARPS=N, BITNET_TGEMV_U=4|8, BITNET_GPU_GEMV_ITEMS  force a GEMV form (tests, A/B)
     BITNET_TGEMM_WG=0, BITNET_TGEMM_TN=32|64|128, BITNET_TGEMM_SPLIT=N  the prefill GEMM: mma.sync
                                          instead of wgmma (sm_90); the token tile; blocks a tile's K
                                          is split over, 1 none (tests and A/B runs)

   ERRORS
     Every fallible function returns a bitnet_result (BITNET_OK = 0, errors negative in bands).
     bitnet_result_string() names the code; bitnet_last_error() gives a thread-local message with
     the details (paths, dlerror() text, CUDA error names, NVRTC logs). The library never calls
     exit or abort and prints nothing unless a logger is set (bitnet_set_logger).

   THREAD SAFETY (tests/test_hostile.c runs 4 sessions of one model on 4 threads, CPU and GPU)
     Set once at start-up, before other threads call in: bitnet_set_logger, bitnet_set_allocator,
     bitnet_cpu_set_isa, bitnet_set_num_threads, bitnet_gpu_set_memory_limit, bitnet_set_fault
     (testing only: its counters are not atomic) and the BITNET_* environment.
     Safe from any number of threads at once:
       - bitnet_last_error (per thread), result strings, kernel and format entry points, SHA-256,
         receipts (write, parse, check), kernel statistics;
       - on one shared object: every read of an open bitnet_gguf, every call on a bitnet_tokenizer
         (read-only after creation), bitnet_model_get_info / _tokenizer, and bitnet_session_create
         on one bitnet_model (a loaded model is read-only; sessions only read it);
       - GPU handles (each call locks the handle; every session has its own handle and stream).
     One thread at a time: a bitnet_session (eval, discard, generate, chat, reset, free: one per thread),
     a bitnet_gguf_writer, bitnet_sample's rng state. Free a model after all its sessions, and a
     gguf/tokenizer after its last user. The CPU thread pool serves one caller at a time; a
     concurrent caller runs its kernels on its own thread, with bit-identical results.
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
#if defined(__GNUC__) || defined(__clang__)
#define BITNET_API static __attribute__((unused)) /* no warning for the functions a program does not call */
#else
#define BITNET_API static
#endif
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
BITNET_API int bitnet_cpu_has_amx(void);                        /* 1 when AVX-512 prompt GEMMs can use AMX tiles */
BITNET_API bitnet_isa bitnet_cpu_isa(void);                     /* the active path */
BITNET_API bitnet_result bitnet_cpu_set_isa(bitnet_isa isa);    /* AUTO = BITNET_CPU, else the best */
/* Threads of the kernel pool (the caller counts as one). Set it before running kernels; 1 stops
   the workers. Default: BITNET_NUM_THREADS, else the online cores. */
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
   of activations (m = 1 is the GEMV). a_sum is bitnet_quantize_act's sum; k <= 2^22. Runs on
   the active ISA path and the thread pool; every path gives the scalar reference's bits. */
BITNET_API bitnet_result bitnet_gemm_i2s(const void *w, size_t w_bytes, size_t n, size_t k,
                                         const int8_t *a, const float *a_scale, const int32_t *a_sum,
                                         size_t m, float *out);
/* int8 weights (the LM head): out[i*n + j] = (sum_c w[j*k + c] * a[i*k + c]) / a_scale[i] * w_scale[j].
   a_sum must be the exact row sums of a (the VNNI path needs them); k <= 65536. */
BITNET_API bitnet_result bitnet_gemm_q8(const int8_t *w, const float *w_scale, size_t n, size_t k,
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
   that stream in call order, and a download (or bitnet_gpu_sync) waits for everything issued
   before it, so it always sees the results of the kernels issued before it, from any thread; it
   does not wait for work other threads issue after it. Handles may be shared between threads.
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
BITNET_API int bitnet_gpu_builtin_a_sm(int i); /* the arch it is built for with its 'a' target (90: sm_90a), or 0 */

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

/* ---- >>api-gpu-kernels: ternary and dense matmul on the GPU, precisions, GPU quantization ---- */

/* Number formats of GPU tensors and of dense compute. AUTO means bitnet_detect_best_precision. */
typedef enum bitnet_precision {
    BITNET_PRECISION_AUTO = 0, BITNET_PRECISION_FP32 = 1, BITNET_PRECISION_FP16 = 2, BITNET_PRECISION_BF16 = 3
} bitnet_precision;
BITNET_API const char *bitnet_precision_name(bitnet_precision p); /* "auto", "fp32", "fp16", "bf16", "unknown" */
/* BF16 from compute capability 8.0, FP16 from 6.0, else FP32 (also when the device cannot be
   queried; bitnet_last_error then says why). */
BITNET_API bitnet_precision bitnet_detect_best_precision(int device);

/* Ternary weights in the GPU's T32 layout (documented in bitnet_cuda_kernels.h), repacked once on
   the device from I2_S tensors. Parts stack row-wise into one fused matrix (QKV as 2560/640/640
   rows), each keeping its own scale. glu (a bitnet_ffn_act, 0 = none) takes exactly two parts of
   equal shape, gate then up, and the matmul then returns bitnet_glu(glu, gate, up) (n = the gate's
   rows). k: a multiple of 128 (I2_S blocks), at most 262144 (int32 accumulators). */
#define BITNET_GPU_MAX_PARTS 8
typedef struct bitnet_gpu_i2s_part {
    const void *data;                 /* an I2_S tensor (host memory) of n rows of k weights */
    size_t bytes;                     /* at least bitnet_i2s_bytes(n, k); its tail holds the scale */
    size_t n;
} bitnet_gpu_i2s_part;
typedef struct bitnet_gpu_ternary {
    bitnet_devptr data;               /* the T32 image, n_pad * k / 4 bytes */
    size_t n, k;                      /* outputs of the matmul, and K */
    size_t n_rows, n_pad;             /* rows of all parts, and rows in the image (a multiple of 128) */
    int glu, n_parts;
    uint32_t part_end[BITNET_GPU_MAX_PARTS]; /* the row where each part ends */
    float part_scale[BITNET_GPU_MAX_PARTS];
} bitnet_gpu_ternary;
BITNET_API bitnet_result bitnet_gpu_ternary_upload(bitnet_gpu *gpu, const bitnet_gpu_i2s_part *parts, int n_parts,
                                                   size_t k, int glu, bitnet_gpu_ternary *out);
BITNET_API void bitnet_gpu_ternary_free(bitnet_gpu *gpu, bitnet_gpu_ternary *w);

/* Per-token int8 activations on the device: m rows of k values, with a scale and a sum per row.
   planes (k a multiple of 32, else 0): for m = 1, the row again as 8 bit planes, 2k bytes, which the
   one-token GEMV on sm_90 reads instead of q. Both functions below write them with q when m is 1
   (more rows go to kernels that read q); q written any other way leaves them stale. */
typedef struct bitnet_gpu_act {
    bitnet_devptr q, scale, sum, planes;
    size_t m, k, cap;                 /* rows in use, row length, rows allocated */
} bitnet_gpu_act;
BITNET_API bitnet_result bitnet_gpu_act_alloc(bitnet_gpu *gpu, size_t cap, size_t k, bitnet_gpu_act *out);
BITNET_API void bitnet_gpu_act_free(bitnet_gpu *gpu, bitnet_gpu_act *a);
/* Rows already quantized on the host (bitnet_quantize_act's q, scale, sum; m <= a->cap, k = a->k). */
BITNET_API bitnet_result bitnet_gpu_act_upload(bitnet_gpu *gpu, bitnet_gpu_act *a, const int8_t *q, const float *scale,
                                               const int32_t *sum, size_t m);
/* x: m x k fp32 on the device (m <= a->cap, k == a->k). norm_weight: k fp32 RMSNorm weights to
   apply first, or 0. Bit-identical to bitnet_rmsnorm (eps) + bitnet_quantize_act. */
BITNET_API bitnet_result bitnet_gpu_quantize_act(bitnet_gpu *gpu, bitnet_devptr x, size_t m, size_t k,
                                                 bitnet_devptr norm_weight, float eps, bitnet_gpu_act *a);
/* out (a->m x w->n, row-major, out_type; AUTO = FP32) = residual (same shape and type, or 0) + the
   W2A8 product bitnet_gemm_i2s computes, bit for bit in fp32 (fp16 / bf16: that value rounded).
   m <= 8 runs the streaming GEMV, larger m int8 tensor cores from sm_80; on sm_90 wgmma from m = 5.
   residual may be out. */
BITNET_API bitnet_result bitnet_gpu_ternary_matmul(bitnet_gpu *gpu, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a,
                                                   bitnet_devptr out, bitnet_precision out_type, bitnet_devptr residual);
/* A list of such problems, issued in order with one barrier at the end; all are checked first. */
typedef struct bitnet_gpu_matmul_op {
    const bitnet_gpu_ternary *w;
    const bitnet_gpu_act *a;
    bitnet_devptr out;
    bitnet_precision out_type;
    bitnet_devptr residual;
} bitnet_gpu_matmul_op;
BITNET_API bitnet_result bitnet_gpu_ternary_matmul_batch(bitnet_gpu *gpu, const bitnet_gpu_matmul_op *ops, size_t n_ops);

/* Dense: out (m x n, out_type) = x (m x k) . w (n x k)^T with w and x in prec and fp32
   accumulation. m <= 8: a streaming GEMV (the fp16 LM head); larger m: tensor cores for fp16 and
   bf16 from sm_80, else the CUDA cores. k * element size must be a multiple of 16 bytes. */
BITNET_API bitnet_result bitnet_gpu_matmul(bitnet_gpu *gpu, bitnet_precision prec, bitnet_devptr w, bitnet_devptr x,
                                           size_t m, size_t n, size_t k, bitnet_devptr out, bitnet_precision out_type);
/* Element conversion between fp32, fp16 and bf16 (round to nearest even; NaN stays NaN). */
BITNET_API bitnet_result bitnet_gpu_convert(bitnet_gpu *gpu, bitnet_devptr src, bitnet_precision src_type,
                                            bitnet_devptr dst, bitnet_precision dst_type, size_t n);
/* Per precision, for the whole process: dense matmuls and conversions issued (conversions count
   under their destination type), their operations (2mnk, or n), bytes read plus written, and the
   device time of the matmul launches that were timed (bitnet_gpu_set_timing; else 0). */
typedef struct bitnet_gpu_precision_metrics {
    uint64_t calls, ops, bytes;
    double ms;
} bitnet_gpu_precision_metrics;
BITNET_API bitnet_result bitnet_gpu_precision_metrics_get(bitnet_precision p, bitnet_gpu_precision_metrics *out);
BITNET_API void bitnet_gpu_precision_metrics_reset(void);

/* GPU quantization with the CPU's results: absmean ternary codes of n device floats (q: n int8,
   scale: one float, both on the device) as bitnet_quantize_ternary, and I2_S packing of n x k
   device codes with the device scale (dst: bitnet_i2s_bytes(n, k) device bytes) as
   bitnet_i2s_pack. The absmean sum runs in double in a fixed tree order; the CPU sums in order,
   so the two scales could differ only where that double sum sits within a few double ulps of an
   fp32 rounding boundary (odds about 2^-29 per tensor). */
BITNET_API bitnet_result bitnet_gpu_quantize_ternary(bitnet_gpu *gpu, bitnet_devptr w, size_t n, bitnet_devptr q,
                                                     bitnet_devptr scale);
BITNET_API bitnet_result bitnet_gpu_i2s_pack(bitnet_gpu *gpu, bitnet_devptr q, size_t n, size_t k, bitnet_devptr scale,
                                             bitnet_devptr dst);

/* A device-aware quantizer: host arrays in and out; each operation runs on the GPU when there is
   one and the GPU call succeeds, else on the CPU (counted as a fallback), with the same results.
   One thread at a time per quantizer. */
typedef struct bitnet_quantizer bitnet_quantizer;
typedef enum bitnet_quant_kind {
    BITNET_QUANT_TERNARY = 0, BITNET_QUANT_ACT, BITNET_QUANT_I2S, BITNET_QUANT_KINDS
} bitnet_quant_kind;
typedef struct bitnet_quant_stats {
    uint64_t gpu_ops, cpu_ops, fallbacks;           /* cpu_ops include the fallbacks */
    double gpu_ms[BITNET_QUANT_KINDS], cpu_ms[BITNET_QUANT_KINDS]; /* wall time per kind of operation */
    char last_gpu_error[256], last_cpu_error[256];  /* "" when none */
    uint64_t host_bytes, host_bytes_total;          /* host memory the quantizer holds now, and ever took */
} bitnet_quant_stats;
BITNET_API bitnet_result bitnet_quantizer_create(bitnet_gpu *gpu, bitnet_quantizer **out); /* gpu: NULL = CPU only; not owned */
BITNET_API void bitnet_quantizer_free(bitnet_quantizer *qz);
BITNET_API bitnet_result bitnet_quantizer_ternary(bitnet_quantizer *qz, const float *w, size_t n, int8_t *q, float *scale);
BITNET_API bitnet_result bitnet_quantizer_act(bitnet_quantizer *qz, const float *x, size_t m, size_t k, int8_t *q,
                                              float *scale, int32_t *sum);
/* Absmean-quantizes n x k floats and packs them as I2_S into dst. */
BITNET_API bitnet_result bitnet_quantizer_i2s(bitnet_quantizer *qz, const float *w, size_t n, size_t k, void *dst,
                                              size_t dst_bytes);
BITNET_API bitnet_result bitnet_quantizer_stats(const bitnet_quantizer *qz, bitnet_quant_stats *out);
/* One line, e.g. "quantizer: gpu 12 ops (3.1 ms), cpu 2 ops (9.8 ms), 1 fallback (last gpu error: ...), host 1.2 MB (5.0 MB total)". */
BITNET_API bitnet_result bitnet_quantizer_summary(const bitnet_quantizer *qz, char *buf, size_t cap);

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
    BITNET_TENSOR_F32 = 0, BITNET_TENSOR_F16 = 1, BITNET_TENSOR_Q4_0 = 2, BITNET_TENSOR_Q4_1 = 3, BITNET_TENSOR_Q5_0 = 6,
    BITNET_TENSOR_Q5_1 = 7, BITNET_TENSOR_Q8_0 = 8, BITNET_TENSOR_Q4_K = 12, BITNET_TENSOR_Q5_K = 13, BITNET_TENSOR_Q6_K = 14,
    BITNET_TENSOR_BF16 = 30, BITNET_TENSOR_TQ1_0 = 34, BITNET_TENSOR_TQ2_0 = 35, BITNET_TENSOR_I2_S = 36
} bitnet_tensor_type;
/* llama.cpp's block-quantized types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks of 32; Q4_K, Q5_K, Q6_K:
   256) and F32, F16, BF16 to float32, with ggml's arithmetic (the same floats as its to_float).
   A model's token_embd / output may come in them (bitnet.cpp's llama-quantize
   --token-embedding-type Q6_K, its recommended embedding), whose rows the model makes fp16 when read.
   n elements, a multiple of the type's block (else BAD_SHAPE); src holds at least their bytes (else
   BAD_SIZE). UNSUPPORTED_TYPE for the ternary and other types. */
BITNET_API bitnet_result bitnet_dequantize(bitnet_tensor_type type, const void *src, size_t src_bytes, float *dst, size_t n);
/* llama.cpp's ternary tensor types, ggml's TQ1_0 (type 34) and TQ2_0 (35), to and from I2_S. Both
   cut each row into blocks of 256 weights (k a multiple of 256) with one fp16 scale a block; TQ2_0
   keeps code = w + 1 in 2 bits (66 bytes a block), TQ1_0 five codes a byte in base 3 (54 bytes).
   To I2_S: every block whose scale is not 0 must have the same one (a BitNet matrix's per-tensor
   scale, BITNET_ERR_UNSUPPORTED otherwise), which becomes the I2_S scale; blocks of scale 0 are
   zeros; a TQ2_0 code 3 is BITNET_ERR_CORRUPT. From I2_S: the scale rounded to fp16 in every block.
   bitnet_tq_bytes: the size, 0 unless type is one of them and k a multiple of 256. */
BITNET_API size_t bitnet_tq_bytes(bitnet_tensor_type type, size_t n, size_t k);
BITNET_API bitnet_result bitnet_i2s_from_tq(bitnet_tensor_type type, const void *src, size_t src_bytes, size_t n, size_t k,
                                            void *dst, size_t dst_bytes);
BITNET_API bitnet_result bitnet_tq_from_i2s(bitnet_tensor_type type, const void *src, size_t src_bytes, size_t n, size_t k,
                                            void *dst, size_t dst_bytes);
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
   not a whole number of blocks (Q4_0..Q8_0: 32, I2_S: 128, K types and TQ: 256), OVERFLOW,
   UNSUPPORTED_TYPE. */
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
   "bitnet" (the FFN as bitnet.cpp computes it: relu(gate)^2 * up, and for "bitnet", 1bitLLM's
   models, silu(gate) * up; info->ffn_act), and "llama" when its matrices are ternary (Llama3-8B-1.58,
   Falcon3-1.58bit: silu, no attn_sub_norm / ffn_sub_norm, q and k rows put back from llama.cpp's
   RoPE permutation at load), keys under that prefix: embedding_length, block_count,
   attention.head_count, feed_forward_length, context_length, attention.layer_norm_rms_epsilon (required);
   attention.head_count_kv (default head_count), rope.freq_base (default 10000), vocab_size and
   rope.dimension_count (checked when present). Tensors (ggml ne order, ne0 = in-features), as
   bitnet.cpp writes them: token_embd.weight F16 [dim, vocab]; output_norm.weight F32 [dim];
   optional output.weight F16 [dim, vocab]; optional rope_freqs.weight F32 [head_dim/2] (Llama 3.1's
   RoPE scaling: each frequency divided by its factor, as bitnet.cpp applies it); per layer blk.N.attn_norm, attn_sub_norm, ffn_norm F32
   [dim], ffn_sub_norm F32 [ffn], attn_q and attn_output I2_S [dim, dim], attn_k and attn_v I2_S
   [dim, n_kv*head_dim], ffn_gate and ffn_up I2_S [dim, ffn], ffn_down I2_S [ffn, dim]. Float
   tensors may be any of F32, F16, BF16, and the ternary ones also float (unquantized latent
   weights, as a converter writes them before quantizing) or TQ1_0 / TQ2_0; token_embd and output
   also llama.cpp's Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (the embedding's rows made fp16
   when read, output made fp16 at load). The vocabulary size comes from tokenizer.ggml.tokens (else
   vocab_size, else token_embd) and every tokenizer.ggml.*_token_id
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

/* A Hugging Face BitNet checkpoint folder to a GGUF in bitnet.cpp's layout (>>convert): config.json
   (model_type "bitnet", BitNetForCausalLM; or "llama" with a bitnet quantization_config, a ternary
   LLaMA, written as arch "llama" with q and k rows in llama.cpp's RoPE order), tokenizer.json
   (byte-level BPE with LLaMA 3's or Falcon 3's pre-tokenizer), tokenizer_config.json (optional: chat_template)
   and model.safetensors or its shards (model.safetensors.index.json). Ternary matrices come packed
   (uint8 [n/4][k] plus weight_scale, as microsoft/bitnet-b1.58-2B-4T; transformers' linear_class
   "bitlinear", its default, divides by weight_scale, "autobitlinear" multiplies) or as float master
   weights (as the -bf16 repo), quantized by bitnet_quantize_ternary; both become I2_S. The
   embedding and an untied head become fp16 (values beyond its range are an error), norms fp32.
   Llama 3.1's RoPE scaling (rope_type "llama3") becomes rope_freqs.weight, as llama.cpp writes it.
   Unsupported checkpoints are BITNET_ERR_UNSUPPORTED, broken ones CORRUPT, BAD_SHAPE,
   BAD_METADATA or MISSING_TENSOR, with the file and the key or tensor named. */
BITNET_API bitnet_result bitnet_convert_hf(const char *dir, const char *gguf_path);

/* ---- >>api-tokenizer ------------------------------------------------------------------------- */

/* Byte-level BPE (GPT-2 style tokens: bytes mapped to printable code points) with the LLaMA 3
   pre-tokenizer, implemented without a regex library. Encoding equals tiktoken's with the LLaMA 3
   pattern and ranks: pieces that are whole tokens are taken as they are, and merges apply lowest
   rank first (a token's rank is that of its first merge), leftmost first on ties. The character
   classes are Unicode 16.0 (the version of tiktoken's regex tables). Text that is not valid UTF-8 is
   still encoded: each invalid byte counts as one punctuation-like character (neither letter,
   number nor white space), so decode(encode(bytes)) gives the bytes back for any input.
   Or SentencePiece BPE (tokenizer.ggml.model "llama": LLaMA 1/2's vocabulary, 1bitLLM's models), as
   llama.cpp encodes it: a space before the text (and after each special token), spaces written as
   U+2581, then from single characters the adjacent pair whose join is a token of the highest score
   merges first (leftmost on ties); a character that is no token becomes its <0xXX> byte tokens. A
   piece decodes with U+2581 back to spaces, so decode(encode(text)) is " " + text.
   A tokenizer is immutable after creation: share it between threads freely. */
typedef struct bitnet_tokenizer bitnet_tokenizer;
/* How byte-level BPE cuts text into pieces before merging (tokenizer.ggml.pre): LLaMA 3's pattern
   ("llama-bpe"; a piece that is a token is taken whole, as tiktoken does), or Falcon 3's ("falcon3",
   "falcon_e": punctuation runs, GPT-2's pattern, single digits; every piece through the merges). */
typedef enum bitnet_pretokenizer { BITNET_PRE_LLAMA3 = 0, BITNET_PRE_FALCON3 = 1 } bitnet_pretokenizer;
typedef struct bitnet_tokenizer_desc {
    const bitnet_gguf_str *tokens; uint64_t n_tokens;      /* the vocabulary, in id order */
    const bitnet_gguf_str *merges; uint64_t n_merges;      /* "a b" pairs, by rank (not for spm) */
    const int32_t *token_types;                            /* optional: 3 = control (special) */
    int32_t bos, eos, eot;                                 /* -1 when absent */
    int spm;                                               /* SentencePiece: the tokens as it spells them */
    const float *scores;                                   /* spm: one per token (NULL: all 0) */
    int no_space_prefix;                                   /* spm: add no space before the text */
    bitnet_pretokenizer pre;                               /* byte-level BPE (0: LLaMA 3's) */
} bitnet_tokenizer_desc;
/* Special tokens are those of type 3 (control) or 4 (user-defined); without token_types, those
   spelled "<|...|>". Their text is kept verbatim; every other token must be a byte-level string,
   the 256 single bytes must all be tokens, and each merge must join two tokens into a third
   (else BITNET_ERR_BAD_METADATA, naming the entry). spm: special tokens are types 2 (unknown), 3
   and 4; type 6 tokens spell a byte "<0xXX>", type 5 (unused) decode to nothing; every byte needs
   a token (<0xXX>, else the byte itself, else the unknown one). */
BITNET_API bitnet_result bitnet_tokenizer_create(const bitnet_tokenizer_desc *desc, bitnet_tokenizer **out);
/* From tokenizer.ggml.* metadata (model "gpt2" with its pre, or "llama" with tokenizer.ggml.scores
   and add_space_prefix); eot falls back to the token "<|eot_id|>"; "llama" without bos / eos ids takes
   llama.cpp's 1 and 2. */
BITNET_API bitnet_result bitnet_tokenizer_from_gguf(const bitnet_gguf *g, bitnet_tokenizer **out);
BITNET_API void bitnet_tokenizer_free(bitnet_tokenizer *t);
/* Encodes text (parse_special: recognise "<|...|>" special tokens in the text). *n_out gets the
   count; BITNET_ERR_BAD_SIZE (with *n_out set to the need) when cap is too small. ids may be NULL
   when cap is 0 (a size query); text may be NULL when len is 0. */
BITNET_API bitnet_result bitnet_tokenize(const bitnet_tokenizer *t, const char *text, size_t len, int add_bos,
                                         int parse_special, int32_t *ids, size_t cap, size_t *n_out);
/* The most ids bitnet_tokenize can give for len bytes of text, BOS included: len + 1 for byte-level
   BPE; 3 * len + 4 for SentencePiece (a space becomes U+2581, whose three bytes may each fall back
   to a byte token, and so may the space put before the text). SIZE_MAX when that overflows. */
BITNET_API size_t bitnet_tokenize_bound(const bitnet_tokenizer *t, size_t len);
/* The bytes of one token (special tokens as their text). Not NUL-terminated. */
BITNET_API bitnet_result bitnet_token_piece(const bitnet_tokenizer *t, int32_t id, const char **bytes, size_t *len);
/* The concatenated pieces, NUL-terminated. *len_out gets the length without the NUL;
   BITNET_ERR_BAD_SIZE when cap < *len_out + 1; BITNET_ERR_BAD_TOKEN for an id outside the vocabulary. */
BITNET_API bitnet_result bitnet_detokenize(const bitnet_tokenizer *t, const int32_t *ids, size_t n, char *buf,
                                           size_t cap, size_t *len_out);
BITNET_API int32_t bitnet_tokenizer_vocab_size(const bitnet_tokenizer *t);
/* The ids of BOS, EOS and <|eot_id|> (-1 when absent). Any pointer may be NULL. */
BITNET_API void bitnet_tokenizer_special_ids(const bitnet_tokenizer *t, int32_t *bos, int32_t *eos, int32_t *eot);
/* A pre-tokenizer alone: ends[i] gets the end offset of the i-th piece of text (BPE then encodes
   each piece on its own). Same cap / BITNET_ERR_BAD_SIZE rule as bitnet_tokenize. */
BITNET_API bitnet_result bitnet_pretokenize(bitnet_pretokenizer pre, const char *text, size_t len, size_t *ends, size_t cap,
                                            size_t *n_out);
/* A GPT-2-style vocabulary (byte-level token strings, "a b" merges by rank, token types) built
   from a tiktoken rank file plus n_special special tokens after it (LLaMA 3.1 names for 256).
   The merges are every split of a token into two tokens, ordered by the token's rank (then by the
   ranks of the halves), as Hugging Face's tiktoken conversion writes them; with them the encoder
   above reproduces tiktoken exactly. gen-model writes it into GGUF metadata. Free with
   bitnet_vocab_free. */
typedef struct bitnet_vocab {
    bitnet_gguf_str *tokens; uint64_t n_tokens;
    bitnet_gguf_str *merges; uint64_t n_merges;
    int32_t *token_types;
    void *storage_;
} bitnet_vocab;
BITNET_API bitnet_result bitnet_vocab_from_tiktoken(const char *path, int n_special, bitnet_vocab *out);
BITNET_API void bitnet_vocab_free(bitnet_vocab *v);
/* Chat prompts, per message of role "system", "user" or "assistant", and the generation prompt:
   BITNET   BitNet b1.58 2B-4T's: "<|begin_of_text|>", then "System: ", "User: " or "Assistant: ", the
            content without leading and trailing white space, "<|eot_id|>"; then "Assistant: ".
   LLAMA3   "<|begin_of_text|>", then "<|start_header_id|>ROLE<|end_header_id|>\n\n", the trimmed
            content, "<|eot_id|>"; then "<|start_header_id|>assistant<|end_header_id|>\n\n".
   FALCON3  "<|ROLE|>\n", the content, "\n"; then "<|assistant|>\n" (no BOS).
   AUTO (in bitnet_model_desc): a GGUF's tokenizer.chat_template picks one as llama.cpp does
   (bitnet_model_info.chat_template): FALCON3 when it holds "<|user|>" and "<|assistant|>", LLAMA3
   when "<|start_header_id|>" and "<|end_header_id|>", else (and with none) BITNET. */
typedef enum bitnet_chat_template {
    BITNET_CHAT_AUTO = 0, BITNET_CHAT_BITNET = 1, BITNET_CHAT_LLAMA3 = 2, BITNET_CHAT_FALCON3 = 3
} bitnet_chat_template;
/* The prompt of n messages in template tmpl (not AUTO), add_generation_prompt: the assistant's
   opening after them. Tokenize the result with add_bos = 0 and parse_special = 1. buf gets a
   NUL-terminated string and *len_out its length; BITNET_ERR_BAD_SIZE (with *len_out set) when
   cap < *len_out + 1; buf may be NULL when cap is 0. */
typedef struct bitnet_chat_message { const char *role; const char *content; } bitnet_chat_message;
BITNET_API bitnet_result bitnet_chat_format(bitnet_chat_template tmpl, const bitnet_chat_message *msgs, size_t n,
                                            int add_generation_prompt, char *buf, size_t cap, size_t *len_out);

/* ---- >>api-model: model, session, generation, sampling --------------------------------------- */
/* Threads: share one model between threads, one session per thread (see THREAD SAFETY at the top). */

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
    int head_f16;                             /* CPU and GPU: keep the exact fp16 head (also BITNET_HEAD=f16);
                                                 the default quantizes it once to int8 rows, which
                                                 reads half the bytes per token (see README) */
    bitnet_chat_template chat_template;       /* bitnet_chat's; AUTO: the file's (see bitnet_chat_template) */
} bitnet_model_desc;

/* The FFN's gated activation. bitnet.cpp's graphs: relu(gate)^2 * up for "bitnet-b1.58" and
   "bitnet-25" (BitNet b1.58 2B-4T), silu(gate) * up for "bitnet" (1bitLLM's bitnet_b1_58 models). */
typedef enum bitnet_ffn_act { BITNET_FFN_RELU2 = 1, BITNET_FFN_SILU = 2 } bitnet_ffn_act;
/* act(gate) * up as every CPU and GPU path rounds it; silu through bitnet_expf, made of additions
   and multiplications only, so the GPU computes the same bits. An unknown act returns NaN. */
BITNET_API float bitnet_glu(int act, float gate, float up);
/* e^x within 2 ulp for x in [-87, 88] (clamped there; NaN gives e^-87) */
BITNET_API float bitnet_expf(float x);

typedef struct bitnet_model_info {
    char arch[32];
    int32_t n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, n_ctx_train;
    float rope_theta, norm_eps;
    int32_t bos, eos, eot;                    /* -1 when absent */
    int32_t ffn_act;                          /* bitnet_ffn_act */
    int32_t sub_norms;                        /* 1: RMSNorms before O and down (BitNet); 0: none ("llama") */
    int32_t chat_template;                    /* bitnet_chat_template (bitnet_chat uses it) */
    bitnet_backend backend;                   /* the backend actually in use */
    char backend_reason[256];                 /* why (e.g. "CUDA unavailable: ...; using the CPU") */
    int32_t head_bits;                        /* the head as computed: 8 (int8 rows) or 16 (fp16) */
    int32_t rope_freqs;                       /* 1: RoPE's frequencies divided by rope_freqs (Llama 3.1's scaling) */
} bitnet_model_info;

BITNET_API bitnet_result bitnet_model_load(const bitnet_model_desc *desc, bitnet_model **out);
BITNET_API void bitnet_model_free(bitnet_model *m);
BITNET_API bitnet_result bitnet_model_get_info(const bitnet_model *m, bitnet_model_info *out);
BITNET_API const bitnet_tokenizer *bitnet_model_tokenizer(const bitnet_model *m); /* NULL if none */

/* A model from arrays in memory, which must outlive it: what the GGUF loader fills in, public so
   converters and tests can build a model without a file (it has no tokenizer). Matrices are I2_S
   (bitnet_i2s_pack) with one row per output: wq [n_heads*head_dim][dim], wk and wv
   [n_kv_heads*head_dim][dim], wo [dim][n_heads*head_dim], w_gate and w_up [ffn_k][dim], w_down
   [dim][ffn_k], where ffn_k is ffn_dim rounded up to a multiple of 128 (I2_S rows) and the rows or
   columns past ffn_dim are zero (1bitLLM's 3B has ffn_dim 8640). Norms are float32, the embedding
   fp16 [n_vocab][dim]. */
typedef struct bitnet_layer_weights {
    const float *attn_norm, *attn_sub_norm;   /* [dim], [n_heads*head_dim] */
    const float *ffn_norm, *ffn_sub_norm;     /* [dim], [ffn_dim] */
    const void *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
} bitnet_layer_weights;
typedef struct bitnet_model_weights {
    int32_t n_vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim, n_ctx_train; /* head_dim 0 = dim/n_heads */
    float rope_theta, norm_eps;
    int32_t bos, eos, eot;                    /* -1 when absent */
    int32_t ffn_act;                          /* bitnet_ffn_act; 0 = BITNET_FFN_RELU2 */
    int32_t no_sub_norms;                     /* 1: no attn_sub_norm / ffn_sub_norm (they may be NULL) */
    const uint16_t *tok_embd;                 /* fp16 [n_vocab][dim] */
    const uint16_t *output;                   /* fp16 [n_vocab][dim]; NULL = tied to tok_embd */
    const float *output_norm;                 /* [dim] */
    const bitnet_layer_weights *layers;       /* [n_layers] */
    const float *rope_freqs;                  /* [head_dim/2] divisors of RoPE's frequencies (Llama 3.1's
                                                 rope_freqs.weight; finite, > 0); NULL = none */
} bitnet_model_weights;
/* desc may be NULL; its path, data and no_mmap are ignored. */
BITNET_API bitnet_result bitnet_model_from_weights(const bitnet_model_weights *w, const bitnet_model_desc *desc,
                                                   bitnet_model **out);

typedef struct bitnet_session_desc {
    int32_t n_ctx;                            /* 0 = the model's training context */
    int32_t n_batch;                          /* prompt tokens per forward chunk; 0 = 512 */
} bitnet_session_desc;
/* BITNET_ERR_OUT_OF_MEMORY, before anything is allocated, when the context's host memory (the CPU's
   K/V cache, the rope table) exceeds the machine's. */
BITNET_API bitnet_result bitnet_session_create(bitnet_model *m, const bitnet_session_desc *desc, bitnet_session **out);
BITNET_API void bitnet_session_free(bitnet_session *s);
BITNET_API void bitnet_session_reset(bitnet_session *s);
BITNET_API int32_t bitnet_session_pos(const bitnet_session *s);
/* Appends n tokens at the current position (prompts go through in chunks of n_batch). logits gets
   n_vocab floats for the last token, or n * n_vocab (one row per token) when all_logits is set; it
   may be NULL, and then no head is computed. BITNET_ERR_CONTEXT_FULL when n does not fit and
   BITNET_ERR_BAD_TOKEN for an id outside the vocabulary, both before any work. */
BITNET_API bitnet_result bitnet_session_eval(bitnet_session *s, const int32_t *tokens, size_t n, float *logits,
                                             int all_logits);
/* Drops n tokens of the session's text from position first on: the tokens after them move down and
   are evaluated again, exactly as if the text had never held the dropped ones (their cost: a prompt
   of that length). For a conversation that fills the context: keep the start (the system message),
   drop the oldest of the rest. A conversation of bitnet_chat goes on across it. BITNET_ERR_INVALID_ARG
   when [first, first + n) is not inside the text. */
BITNET_API bitnet_result bitnet_session_discard(bitnet_session *s, int32_t first, int32_t n);
/* The session's text: its bitnet_session_pos tokens (valid until the session next changes). */
BITNET_API const int32_t *bitnet_session_tokens(const bitnet_session *s);
/* A session's state as bytes: its text, its KV cache and where a bitnet_chat conversation stands, to
   start other sessions of the same model from it (a prompt cache: a long system prompt evaluated once).
   The bytes are the same for both backends (the KV cache as fp16 [layer][kv head][position][head_dim];
   >>state), so a state saved on the GPU restores on the CPU and back. bitnet_session_state_size: the
   bytes its state takes now (0 for NULL). bitnet_session_state_get: BITNET_ERR_BAD_SIZE when size is
   smaller. bitnet_session_state_set: BITNET_ERR_INVALID_ARG for another model's state or not a state,
   BITNET_ERR_BAD_VERSION, BITNET_ERR_TRUNCATED and BITNET_ERR_CORRUPT (a checksum) for damaged bytes,
   BITNET_ERR_CONTEXT_FULL when the session is too short for it; on any error the session is reset. No
   logits are kept: go on with at least one token (bitnet_generate's prompt, or bitnet_chat). */
BITNET_API size_t bitnet_session_state_size(const bitnet_session *s);
BITNET_API bitnet_result bitnet_session_state_get(const bitnet_session *s, void *buf, size_t size);
BITNET_API bitnet_result bitnet_session_state_set(bitnet_session *s, const void *buf, size_t size);

#define BITNET_MAX_LOGIT_BIAS 1024
typedef struct bitnet_logit_bias { int32_t token; float bias; } bitnet_logit_bias; /* bias: finite, or -INFINITY (never) */
typedef struct bitnet_sampler_params {        /* zero-initialised = greedy */
    float temperature;                        /* 0 = greedy (argmax) */
    int32_t top_k;                            /* 0 = off */
    float top_p;                              /* 0 or 1 = off */
    float min_p;                              /* 0 = off */
    float repeat_penalty;                     /* 0 or 1 = off */
    int32_t repeat_last_n;                    /* window for the penalties; 0 = 64 */
    float presence_penalty;                   /* 0 = off: minus this for each token in the window */
    float frequency_penalty;                  /* 0 = off: minus this times the token's count there */
    const bitnet_logit_bias *logit_bias;      /* added to the logits first, in order (at most */
    size_t n_logit_bias;                      /* BITNET_MAX_LOGIT_BIAS entries; an id may repeat) */
    uint64_t seed;                            /* bitnet_generate: 0 = BITNET_SEED, else 42 under
                                                 BITNET_DETERMINISTIC=1, else the clock */
} bitnet_sampler_params;
/* Picks one token from logits (modified in place). Order: the logit bias, the repetition penalty,
   the frequency and presence penalties (llama.cpp's order; each distinct token of the window once),
   then greedy when temperature is 0 or top_k 1 (the lowest id wins a tie), else temperature, min-p,
   top-k, top-p and a draw. rng is the caller's state (seed it with bitnet_rng_seed); only greedy
   may pass NULL. */
BITNET_API uint64_t bitnet_rng_seed(uint64_t seed);
BITNET_API bitnet_result bitnet_sample(float *logits, int32_t n_vocab, const bitnet_sampler_params *p,
                                       const int32_t *history, size_t n_history, uint64_t *rng, int32_t *out);

/* Grammars: GBNF, llama.cpp's notation. Rules "name ::= ..." (names of letters, digits, '-' and
   '_'; the text must match rule "root"), each a line (newlines may follow "::=" and "|", and come
   anywhere inside parentheses); "strings", [classes] of characters and ranges ([^...] negated), '.'
   (any character), rule names, ( groups ), alternatives with '|', and the repetitions *, +, ?,
   {m}, {m,} and {m,n} (m, n <= 1000); "# ..." comments; escapes \n \r \t \\ \" \[ \] \- \^ \xHH
   \uHHHH \UHHHHHHHH. Characters are Unicode code points of UTF-8 text. Refused with
   BITNET_ERR_INVALID_ARG and the line and column: bad syntax, a rule used and not defined or
   defined twice, no root, left recursion (a rule that can reach itself before a character); at
   most 4096 rules (groups and repetitions count) and 2^20 elements. A grammar is immutable: share
   it between threads and generations. */
typedef struct bitnet_grammar bitnet_grammar;
BITNET_API bitnet_result bitnet_grammar_parse(const char *text, size_t len, bitnet_grammar **out);
BITNET_API void bitnet_grammar_free(bitnet_grammar *g);
/* Where text stands in the grammar: *status 1 a whole sentence (more may follow), 0 only the start
   of one, -1 neither. */
BITNET_API bitnet_result bitnet_grammar_match(const bitnet_grammar *g, const char *text, size_t len, int *status);
/* A JSON schema as a grammar whose sentences are the JSON texts it accepts (llama.cpp's
   --json-schema; parse the text with bitnet_grammar_parse). Read: type (a name or a list), enum,
   const, anyOf / oneOf, allOf of one, $ref into the document ("#/$defs/NAME", recursion too);
   objects: properties in their order (the required always, the others may be left out; no other
   names), or without properties a map of additionalProperties; arrays: items, prefixItems,
   minItems / maxItems; strings: minLength / maxLength, format date, time, date-time and uuid (other
   formats pass every string), pattern (an ECMAScript regular expression: literals, '.', classes,
   \d \w \s, groups, '|', quantifiers, '^' and '$' at the ends; the string's JSON text is what
   matches: '"' written \", and so on; with a pattern or a format the lengths are not read);
   integers: minimum / maximum / exclusiveMinimum / exclusiveMaximum (as digit ranges; for "number"
   they are not read). Refused (BITNET_ERR_INVALID_ARG, naming where): allOf of several, unknown
   types, $ref outside the document, regular expressions with backreferences, lookaround or \b,
   integer bounds with no integer between them or past 15 digits. Between tokens: nothing, a space, or a newline and at
   most 20 spaces or tabs. Writes the
   NUL-terminated text to buf; *len gets its length; BITNET_ERR_BAD_SIZE (with *len set) when cap
   is too small. */
BITNET_API bitnet_result bitnet_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap, size_t *out_len);
/* For a sampling loop of one's own: where a text in tokens is in the grammar. allowed sets
   allow[id] (n_vocab bytes) to 1 for each token that may come next, 0 for the rest: stop tokens
   (the caller's list) only where the text is a whole sentence, other special tokens never; accept
   takes a token into the text (BITNET_ERR_INVALID_ARG for one the grammar does not allow). The
   tokenizer and the grammar must outlive the state. */
typedef struct bitnet_grammar_state bitnet_grammar_state;
BITNET_API bitnet_result bitnet_grammar_state_create(const bitnet_grammar *g, const bitnet_tokenizer *t, bitnet_grammar_state **out);
BITNET_API void bitnet_grammar_state_free(bitnet_grammar_state *st);
BITNET_API bitnet_result bitnet_grammar_state_allowed(bitnet_grammar_state *st, const int32_t *stop, size_t n_stop, unsigned char *allow);
BITNET_API bitnet_result bitnet_grammar_state_accept(bitnet_grammar_state *st, int32_t token, const int32_t *stop, size_t n_stop);

/* Streaming callback: return nonzero to stop. */
typedef int (*bitnet_token_fn)(int32_t token, const char *piece, size_t len, void *user);
typedef struct bitnet_generate_params {
    bitnet_sampler_params sampler;
    int32_t max_tokens;                       /* 0 = until a stop token or the context ends */
    const int32_t *stop_tokens; size_t n_stop; /* NULL = the model's EOS and EOT; non-NULL with n_stop 0: none */
    bitnet_token_fn on_token; void *user;
    const bitnet_grammar *grammar;            /* NULL = none; else the generated text follows it: the
                                                 sampler sees only tokens the grammar allows (greedy
                                                 tries the best few first), stop tokens only where
                                                 the text is a whole sentence, no other special
                                                 token; generation ends where nothing may follow */
} bitnet_generate_params;
typedef struct bitnet_generate_stats {
    size_t n_prompt, n_generated;
    double prompt_seconds, gen_seconds;
} bitnet_generate_stats;
/* Evaluates the prompt, then samples until max_tokens, a stop token (not emitted), the callback's
   stop, or a full context. out (may be NULL) gets the tokens, at most cap of them. The last sampled
   token is not evaluated: to continue, pass it as the next call's prompt (n_prompt 0 continues only
   from logits an eval left). stats may be NULL. */
BITNET_API bitnet_result bitnet_generate(bitnet_session *s, const int32_t *prompt, size_t n_prompt,
                                         const bitnet_generate_params *p, int32_t *out, size_t cap,
                                         bitnet_generate_stats *stats);
/* A conversation on one session, in the model's chat template (bitnet_chat_format). Each call
   appends one message: role "user" is answered, as bitnet_generate would (p, out, cap and stats as
   there; the reply streams through p->on_token); role "system" is only evaluated. The first message
   of a new or reset session starts with the vocabulary's BOS token where the template starts with
   BOS; a message after a reply first closes the reply with the template's end of a message
   (<|eot_id|>; FALCON3: "\n"), after the reply's last token where max_tokens or the callback cut it
   short. The session's other calls (eval, generate) between two messages end the reply's
   bookkeeping: the next message then goes on from the session's text as it is. */
BITNET_API bitnet_result bitnet_chat(bitnet_session *s, const char *role, const char *content,
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
    double load_avg;                          /* the host's 1-minute load average as the runs began; -1 unknown */
    int has_gpu;                              /* the gpu_* fields are set */
    char gpu_name[256];
    int32_t gpu_cc_major, gpu_cc_minor;
    char gpu_arch[32];                        /* the arch the kernels are compiled for: "sm_90", or "compute_86" (PTX) */
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

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(BITNET_NO_SIMD) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <cpuid.h>
#define BITNET__X86_SIMD 1
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

/* FNV-1a, 64 bits: hash tables, cache keys, fingerprints and checksums. */
#define BITNET__FNV_INIT 0xcbf29ce484222325ull
static uint64_t bitnet__fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

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

/* The error being returned (bitnet_last_error's text), with where it happened in front. */
static bitnet_result bitnet__err_where(bitnet_result r, const char *where) {
    char msg[sizeof bitnet__errbuf];
    snprintf(msg, sizeof msg, "%s", bitnet__errbuf);
    return bitnet__err(r, "%s: %s", where, msg);
}

#define BITNET__CHECK_PTR(p) \
    do { if (!(p)) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: '%s' is NULL", __func__, #p); } while (0)
#define BITNET__TRY(expr) \
    do { bitnet_result bitnet__r_ = (expr); if (bitnet__r_ != BITNET_OK) return bitnet__r_; } while (0)

/* The first occurrence of needle (m bytes) in hay (n bytes), or NULL (memmem is not C11) */
BITNET__UNUSED static const char *bitnet__memmem(const char *hay, size_t n, const char *needle, size_t m) {
    size_t i;
    for (i = 0; m <= n && i <= n - m; i++)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}
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
/* The switches for tuning and tests: "0" turns one off; a value that is not a whole number in
   [lo, hi] leaves the default. */
BITNET__UNUSED static int bitnet__env_off(const char *name) {
    const char *v = bitnet__getenv(name);
    return v && strcmp(v, "0") == 0;
}
BITNET__UNUSED static int bitnet__env_int(const char *name, int lo, int hi, int def) {
    const char *v = bitnet__getenv(name);
    char *end = NULL;
    const long x = v ? strtol(v, &end, 10) : 0;
    return v && end != v && *end == '\0' && x >= lo && x <= hi ? (int)x : def;
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
static int bitnet__nvtx_depth(void);            /* this thread's open ranges */
static void bitnet__nvtx_unwind(int depth);     /* pops down to depth (error paths) */

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

/* Physical memory in bytes, 0 when unknown. */
BITNET__UNUSED static uint64_t bitnet__phys_mem(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long n = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    return n > 0 && pg > 0 ? (uint64_t)n * (uint64_t)pg : 0;
#else
    return 0;
#endif
}

/* Returns NULL (with the error set) on failure. The raw pointer sits just below the aligned one.
   A block larger than physical memory (a model file bigger than the machine) is refused with a
   clear error: with overcommit it would succeed and the process be killed at first touch. */
BITNET__UNUSED static void *bitnet__malloc(size_t size) {
    size_t total;
    unsigned char *raw, *p;
    if (!bitnet__add_size(size, BITNET__ALIGN + sizeof(void *), &total)) {
        bitnet__err(BITNET_ERR_OVERFLOW, "allocation of %zu bytes overflows", size);
        return NULL;
    }
    if (size > ((size_t)1 << 30)) {
        uint64_t mem = bitnet__phys_mem();
        if (mem && (uint64_t)size > mem) {
            bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes (%.1f GiB): more than this machine's %.1f GiB "
                        "of memory", size, (double)size / 1073741824.0, (double)mem / 1073741824.0);
            return NULL;
        }
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

/* The host's page size (a power of two, 4 KB at least). */
BITNET__UNUSED static size_t bitnet__page_size(void) {
#if !defined(_WIN32)
    const long pg = sysconf(_SC_PAGESIZE);
    if (pg >= 4096 && !(pg & (pg - 1))) return (size_t)pg;
#endif
    return 4096;
}

/* Asks for 2 MB pages on the whole 2 MB blocks inside [p, p + n): decoding streams every weight
   once a token, and with 4 KB pages the TLB misses cost about a tenth of the read bandwidth here.
   Call it before the memory is first written, so the first touch gets the large pages. */
BITNET__UNUSED static void bitnet__hugepages(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    uintptr_t a = ((uintptr_t)p + ((uintptr_t)1 << 21) - 1) & ~(((uintptr_t)1 << 21) - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(((uintptr_t)1 << 21) - 1);
    if (b > a) madvise((void *)a, (size_t)(b - a), MADV_HUGEPAGE); /* a hint: failure changes nothing */
#else
    (void)p, (void)n;
#endif
}

BITNET__UNUSED static int bitnet__hex_digit(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* >>json ====================================================================================== */
/* ---- JSON writer: counts like snprintf, so it needs no allocation; two-space indentation ----- */
typedef struct bitnet__jw {
    char *buf;
    size_t cap, len;
    int need_comma, after_key, depth;
    int compact;                  /* one line: no newlines nor indentation (server-sent events) */
} bitnet__jw;

static void bitnet__jw_putc(bitnet__jw *w, char c) {
    if (w->len < w->cap) w->buf[w->len] = c;
    w->len++;
}
static void bitnet__jw_raw(bitnet__jw *w, const char *s) { while (*s) bitnet__jw_putc(w, *s++); }
static void bitnet__jw_nl(bitnet__jw *w) {
    int i;
    if (w->compact) return;
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

/* A string of n bytes: escapes what JSON requires; invalid UTF-8 bytes become U+FFFD. */
static void bitnet__jw_strn(bitnet__jw *w, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
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
static void bitnet__jw_str(bitnet__jw *w, const char *s) { bitnet__jw_strn(w, s, strlen(s)); }

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
    bitnet__jw_raw(w, w->compact ? ":" : ": ");
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
/* Receipts, and >>convert's config.json, tokenizer.json and safetensors headers. Bounds-checked
   byte by byte; nesting, object size and input size are limited, so hostile input costs bounded
   time and memory. Strings are decoded (and UTF-8 validated) into one buffer no larger than the
   input; \u0000 is refused because fields are C strings. */
#define BITNET__JSON_MAX_DEPTH 32
#define BITNET__JSON_DUP_LINEAR 16 /* members checked for duplicates one by one; more: sorted at the end */
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
    int32_t max_members;   /* an object's; its duplicates are found by sorting past a few */
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
        int d = bitnet__hex_digit(j->src[j->pos + i]);
        if (d < 0) return 0;
        v = v << 4 | (uint32_t)d;
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

static int bitnet__json_key_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Duplicate member names of a large object, by sorting them: O(n log n) for a vocabulary's 128k. */
static int32_t bitnet__json_dups(bitnet__json *j, int32_t id) {
    size_t n = (size_t)j->nodes[id].count, k = 0;
    const char **keys;
    int32_t i;
    if (n <= BITNET__JSON_DUP_LINEAR) return id;
    if (!(keys = (const char **)bitnet__malloc(n * sizeof *keys))) { j->err = BITNET_ERR_OUT_OF_MEMORY; return -1; }
    for (i = j->nodes[id].first; i >= 0; i = j->nodes[i].next) keys[k++] = j->nodes[i].key;
    qsort(keys, n, sizeof *keys, bitnet__json_key_cmp);
    for (k = 1; k < n && strcmp(keys[k - 1], keys[k]) != 0; k++) {}
    if (k < n) {
        bitnet__json_fail(j, "duplicate member \"%.60s\"", keys[k]);
        id = -1;
    }
    bitnet__free(keys);
    return id;
}

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
            for (i = j->nodes[id].count < BITNET__JSON_DUP_LINEAR ? j->nodes[id].first : -1; i >= 0; i = j->nodes[i].next)
                if (strcmp(j->nodes[i].key, key) == 0) return bitnet__json_fail(j, "duplicate member \"%.60s\"", key);
            bitnet__json_ws(j);
            if (j->pos >= j->len || j->src[j->pos] != ':') return bitnet__json_fail(j, "expected ':'");
            j->pos++;
            if (j->nodes[id].count >= j->max_members) return bitnet__json_fail(j, "more than %d members", (int)j->max_members);
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
        if (j->src[j->pos] == (unsigned char)close) { j->pos++; return is_obj ? bitnet__json_dups(j, id) : id; }
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

/* Parses the whole input as one value (node 0); objects of at most max_members. */
static bitnet_result bitnet__json_parse(bitnet__json *j, const char *src, size_t len, int32_t max_members) {
    memset(j, 0, sizeof *j);
    j->src = (const unsigned char *)src;
    j->len = len;
    j->max_members = max_members;
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

/* One table a direction, indexed by bitnet__convert_path: {scalar, AVX2, AVX-512, NEON}; a path is
   only chosen where it is compiled, so the NULL slots are never called. */
typedef void (*bitnet__narrow_fn)(const float *s, uint16_t *d, size_t n);
typedef void (*bitnet__widen_fn)(const uint16_t *s, float *d, size_t n);
#define BITNET__CV_SCALAR_FN(name, T, U, conv) \
    static void bitnet__##name##_scalar(const T *s, U *d, size_t n) { size_t i; for (i = 0; i < n; i++) d[i] = conv(s[i]); }
BITNET__CV_SCALAR_FN(to_fp16, float, uint16_t, bitnet_fp32_to_fp16)
BITNET__CV_SCALAR_FN(from_fp16, uint16_t, float, bitnet_fp16_to_fp32)
BITNET__CV_SCALAR_FN(to_bf16, float, uint16_t, bitnet_fp32_to_bf16)
BITNET__CV_SCALAR_FN(from_bf16, uint16_t, float, bitnet_bf16_to_fp32)
#if defined(BITNET__X86_SIMD)
#define BITNET__CV_X86(name) bitnet__##name##_avx2, bitnet__##name##_avx512
#else
#define BITNET__CV_X86(name) NULL, NULL
#endif
#if defined(BITNET__NEON)
#define BITNET__CV_ARM(name) bitnet__##name##_neon
#else
#define BITNET__CV_ARM(name) NULL
#endif
#define BITNET__CV_TABLE(name) {bitnet__##name##_scalar, BITNET__CV_X86(name), BITNET__CV_ARM(name)}

BITNET_API bitnet_result bitnet_convert_fp32_to_fp16(const float *src, uint16_t *dst, size_t n) {
    static const bitnet__narrow_fn f[4] = BITNET__CV_TABLE(to_fp16);
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp32_to_fp16", src, dst, n));
    f[bitnet__convert_path(1)](src, dst, n);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_convert_fp16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    static const bitnet__widen_fn f[4] = BITNET__CV_TABLE(from_fp16);
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp16_to_fp32", src, dst, n));
    f[bitnet__convert_path(1)](src, dst, n);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_convert_fp32_to_bf16(const float *src, uint16_t *dst, size_t n) {
    static const bitnet__narrow_fn f[4] = BITNET__CV_TABLE(to_bf16);
    BITNET__TRY(bitnet__convert_check("bitnet_convert_fp32_to_bf16", src, dst, n));
    f[bitnet__convert_path(0)](src, dst, n);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_convert_bf16_to_fp32(const uint16_t *src, float *dst, size_t n) {
    static const bitnet__widen_fn f[4] = BITNET__CV_TABLE(from_bf16);
    BITNET__TRY(bitnet__convert_check("bitnet_convert_bf16_to_fp32", src, dst, n));
    f[bitnet__convert_path(0)](src, dst, n);
    return BITNET_OK;
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

/* Where I2_S keeps weight i's code (w + 1): bits shift, shift + 1 of the byte it returns the offset of. */
static size_t bitnet__i2s_pos(size_t i, int *shift) {
    const size_t j = i % BITNET_I2S_BLOCK;
    *shift = 6 - 2 * (int)(j / 32);
    return i / BITNET_I2S_BLOCK * 32 + j % 32;
}

BITNET_API bitnet_result bitnet_i2s_unpack(const void *src, size_t src_bytes, size_t n, size_t k, int8_t *q, float *scale) {
    size_t nk, i;
    const uint8_t *s = (const uint8_t *)src;
    BITNET__CHECK_PTR(q);
    BITNET__TRY(bitnet__i2s_check("bitnet_i2s_unpack", src, src_bytes, n, k));
    nk = n * k;
    for (i = 0; i < nk; i++) {
        int shift;
        const size_t at = bitnet__i2s_pos(i, &shift);
        int code = (s[at] >> shift) & 3;
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
            int code = (row[c] >> shift) & 3, sh; /* HF and I2_S both store w + 1 */
            size_t at;
            if (code == 3) return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_i2s_from_hf: weight [%zu][%zu] has code 3", r, c);
            at = bitnet__i2s_pos(r * k + c, &sh);
            d[at] |= (uint8_t)(code << sh);
        }
    }
    memset(d + n * k / 4, 0, 32);
    memcpy(d + n * k / 4, &weight_scale, 4);
    return BITNET_OK;
}

/* ---- the tensor types ---------------------------------------------------------------------- */
#define BITNET__TQ_BLOCK 256 /* llama.cpp's TQ1_0 / TQ2_0 blocks */
/* The tensor types this library reads, with ggml's blocks: elements and bytes a block (I2_S: 128
   codes in 32 bytes, then one 32-byte tail a tensor). Names, sizes and the GGUF reader read it. */
typedef struct bitnet__ttype { bitnet_tensor_type t; const char *name; unsigned blk, bytes; } bitnet__ttype;
static const bitnet__ttype bitnet__ttypes[] = {
    {BITNET_TENSOR_F32, "F32", 1, 4},        {BITNET_TENSOR_F16, "F16", 1, 2},         {BITNET_TENSOR_BF16, "BF16", 1, 2},
    {BITNET_TENSOR_Q4_0, "Q4_0", 32, 18},    {BITNET_TENSOR_Q4_1, "Q4_1", 32, 20},     {BITNET_TENSOR_Q5_0, "Q5_0", 32, 22},
    {BITNET_TENSOR_Q5_1, "Q5_1", 32, 24},    {BITNET_TENSOR_Q8_0, "Q8_0", 32, 34},     {BITNET_TENSOR_Q4_K, "Q4_K", 256, 144},
    {BITNET_TENSOR_Q5_K, "Q5_K", 256, 176},  {BITNET_TENSOR_Q6_K, "Q6_K", 256, 210},   {BITNET_TENSOR_TQ1_0, "TQ1_0", BITNET__TQ_BLOCK, 54},
    {BITNET_TENSOR_TQ2_0, "TQ2_0", BITNET__TQ_BLOCK, 66}, {BITNET_TENSOR_I2_S, "I2_S", BITNET_I2S_BLOCK, BITNET_I2S_BLOCK / 4}};
static const bitnet__ttype *bitnet__ttype_of(uint32_t t) {
    size_t i;
    for (i = 0; i < sizeof bitnet__ttypes / sizeof bitnet__ttypes[0]; i++)
        if ((uint32_t)bitnet__ttypes[i].t == t) return &bitnet__ttypes[i];
    return NULL;
}
static int bitnet__ternary_type(bitnet_tensor_type t) {
    return t == BITNET_TENSOR_I2_S || t == BITNET_TENSOR_TQ1_0 || t == BITNET_TENSOR_TQ2_0;
}
/* The names of the table's types that ok() accepts, "A, B or C" (for error messages). */
static const char *bitnet__ttype_list(int (*ok)(int, bitnet_tensor_type), int arg, char *buf, size_t cap) {
    size_t i, n = 0, k = 0, len = 0;
    for (i = 0; i < sizeof bitnet__ttypes / sizeof bitnet__ttypes[0]; i++) n += ok(arg, bitnet__ttypes[i].t) != 0;
    buf[0] = 0;
    for (i = 0; i < sizeof bitnet__ttypes / sizeof bitnet__ttypes[0] && len < cap; i++)
        if (ok(arg, bitnet__ttypes[i].t))
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", k++ == 0 ? "" : k == n ? " or " : ", ", bitnet__ttypes[i].name);
    return buf;
}
static int bitnet__ttype_any(int arg, bitnet_tensor_type t) { return (void)arg, (void)t, 1; }

/* ---- llama.cpp's TQ1_0 / TQ2_0 <-> I2_S (a block: 256 codes, then its fp16 scale) ---- */
static const uint8_t bitnet__pow3[5] = {1, 3, 9, 27, 81};
static size_t bitnet__tq_block_bytes(bitnet_tensor_type type) {
    return type == BITNET_TENSOR_TQ2_0 || type == BITNET_TENSOR_TQ1_0 ? bitnet__ttype_of((uint32_t)type)->bytes : 0;
}
BITNET_API size_t bitnet_tq_bytes(bitnet_tensor_type type, size_t n, size_t k) {
    size_t nk, bb = bitnet__tq_block_bytes(type);
    if (!bb || n == 0 || k == 0 || k % BITNET__TQ_BLOCK || !bitnet__mul_size(n, k, &nk) || nk / BITNET__TQ_BLOCK > SIZE_MAX / bb) return 0;
    return nk / BITNET__TQ_BLOCK * bb;
}
/* Where a block's weight e (0..255) lives, as ggml's dequantize_row_tq*_0 reads it: its byte, and
   in it its place p. TQ2_0: byte 32 (e / 128) + e % 32, bits 2p, p = (e / 32) % 4. TQ1_0: trit p
   (0 = the most significant of five, or of four in qh): e < 160: qs[e % 32], p = e / 32; e < 240:
   qs[32 + (e - 160) % 16], p = (e - 160) / 16; else qh[(e - 240) % 4], p = (e - 240) / 4. */
static void bitnet__tq_pos(bitnet_tensor_type type, int e, int *byte, int *p) {
    if (type == BITNET_TENSOR_TQ2_0) *byte = 32 * (e / 128) + e % 32, *p = (e / 32) % 4;
    else if (e < 160) *byte = e % 32, *p = e / 32;
    else if (e < 240) *byte = 32 + (e - 160) % 16, *p = (e - 160) / 16;
    else *byte = 48 + (e - 240) % 4, *p = (e - 240) / 4;
}
static bitnet_result bitnet__tq_check(const char *fn, bitnet_tensor_type type, const void *tq, size_t tq_bytes,
                                      const void *i2s, size_t i2s_bytes, size_t n, size_t k) {
    size_t need;
    if (!bitnet__tq_block_bytes(type)) return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "%s: type %d is not TQ1_0 (34) or TQ2_0 (35)", fn, (int)type);
    if (!tq) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: the TQ buffer is NULL", fn);
    BITNET__TRY(bitnet__i2s_check(fn, i2s, i2s_bytes, n, k));
    if (k % BITNET__TQ_BLOCK) return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: k=%zu is not a multiple of 256, which TQ rows need", fn, k);
    need = bitnet_tq_bytes(type, n, k);
    if (tq_bytes < need) return bitnet__err(BITNET_ERR_BAD_SIZE, "%s: the TQ buffer holds %zu bytes, %zux%zu needs %zu", fn, tq_bytes, n, k, need);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_i2s_from_tq(bitnet_tensor_type type, const void *src, size_t src_bytes, size_t n, size_t k,
                                            void *dst, size_t dst_bytes) {
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    size_t nb, b, bb = bitnet__tq_block_bytes(type);
    uint16_t h = 0;
    float scale = 0.0f;
    int have = 0, e;
    BITNET__TRY(bitnet__tq_check("bitnet_i2s_from_tq", type, src, src_bytes, dst, dst_bytes, n, k));
    nb = n * k / BITNET__TQ_BLOCK;
    memset(d, 0, n * k / 4);
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = s + b * bb;
        const uint16_t bh = (uint16_t)(blk[bb - 2] | blk[bb - 1] << 8);
        if ((bh & 0x7fff) == 0) { /* scale 0 (either sign): weights 0, code 1 */
            memset(d + b * BITNET__TQ_BLOCK / 4, 0x55, BITNET__TQ_BLOCK / 4);
            continue;
        }
        if (!have) {
            h = bh, have = 1, scale = bitnet_fp16_to_fp32(bh);
            if (!(scale > 0 && scale <= FLT_MAX))
                return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_i2s_from_tq: block %zu has the scale %g (must be finite and > 0)", b, (double)scale);
        } else if (bh != h)
            return bitnet__err(BITNET_ERR_UNSUPPORTED, "bitnet_i2s_from_tq: block %zu has the scale %g, the first block's is %g: I2_S holds "
                               "one scale a matrix (a BitNet model's TQ tensors have one)", b, (double)bitnet_fp16_to_fp32(bh), (double)scale);
        for (e = 0; e < BITNET__TQ_BLOCK; e++) {
            size_t i = b * BITNET__TQ_BLOCK + (size_t)e, at;
            int code, byte, p, sh;
            bitnet__tq_pos(type, e, &byte, &p);
            if (type == BITNET_TENSOR_TQ2_0) code = (blk[byte] >> (2 * p)) & 3;
            else code = ((uint8_t)(blk[byte] * bitnet__pow3[p]) * 3) >> 8;
            if (code == 3) return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_i2s_from_tq: weight %zu has the unused code 3", i);
            at = bitnet__i2s_pos(i, &sh);
            d[at] |= (uint8_t)(code << sh);
        }
    }
    memset(d + n * k / 4, 0, 32);
    memcpy(d + n * k / 4, &scale, 4);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_tq_from_i2s(bitnet_tensor_type type, const void *src, size_t src_bytes, size_t n, size_t k,
                                            void *dst, size_t dst_bytes) {
    const uint8_t *s = (const uint8_t *)src;
    uint8_t *d = (uint8_t *)dst;
    size_t nb, b, bb = bitnet__tq_block_bytes(type);
    float scale;
    uint16_t h;
    int e;
    BITNET__TRY(bitnet__tq_check("bitnet_tq_from_i2s", type, dst, dst_bytes, src, src_bytes, n, k));
    memcpy(&scale, s + n * k / 4, 4);
    h = bitnet_fp32_to_fp16(scale);
    nb = n * k / BITNET__TQ_BLOCK;
    for (b = 0; b < nb; b++) {
        uint8_t *blk = d + b * bb;
        uint8_t tr[BITNET__TQ_BLOCK]; /* codes 0..2 */
        for (e = 0; e < BITNET__TQ_BLOCK; e++) {
            int sh;
            const size_t i = b * BITNET__TQ_BLOCK + (size_t)e, at = bitnet__i2s_pos(i, &sh);
            tr[e] = (uint8_t)((s[at] >> sh) & 3);
            if (tr[e] == 3) return bitnet__err(BITNET_ERR_CORRUPT, "bitnet_tq_from_i2s: weight %zu has the unused code 3", i);
        }
        memset(blk, 0, bb);
        if (type == BITNET_TENSOR_TQ2_0) {
            for (e = 0; e < BITNET__TQ_BLOCK; e++) {
                int byte, p;
                bitnet__tq_pos(type, e, &byte, &p);
                blk[byte] |= (uint8_t)(tr[e] << (2 * p));
            }
        } else {
            /* a byte's n trits (5; 4 in qh) are the base-3 number c, trit 0 the most significant,
               stored as ceil(c * 256 / 3^n): trit p reads back as ((uint8)(byte * 3^p) * 3) >> 8 */
            int c[52], byte, p;
            memset(c, 0, sizeof c);
            for (e = 0; e < BITNET__TQ_BLOCK; e++) {
                bitnet__tq_pos(type, e, &byte, &p);
                c[byte] += tr[e] * bitnet__pow3[(byte < 48 ? 4 : 3) - p];
            }
            for (byte = 0; byte < 52; byte++) blk[byte] = (uint8_t)((c[byte] * 256 + (byte < 48 ? 242 : 80)) / (byte < 48 ? 243 : 81));
        }
        blk[bb - 2] = (uint8_t)(h & 0xff), blk[bb - 1] = (uint8_t)(h >> 8);
    }
    return BITNET_OK;
}

/* ---- llama.cpp's block types to float32 (a model's embedding may come in them) ------------------ */
static float bitnet__h2f_le(const uint8_t *p) { return bitnet_fp16_to_fp32((uint16_t)(p[0] | p[1] << 8)); }
/* A K block's 6-bit scale and min j (0..7), packed in 12 bytes: j < 4 in the low 6 bits of bytes j
   and j + 4; j >= 4 in the nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j. */
static void bitnet__k_scale(const uint8_t *q, int j, int *sc, int *mn) {
    if (j < 4) *sc = q[j] & 63, *mn = q[j + 4] & 63;
    else *sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, *mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
}
/* One block of type t to y, by ggml's formulas in its order of float operations (so the floats
   are its to_float's). Q4_0..Q5_1: d (fp16), [m (fp16)], [qh: bit e is element e's fifth bit],
   16 bytes: element j in the low nibble of byte j, j + 16 in the high. Q8_0: d, 32 int8. Q4_K /
   Q5_K: d, dmin, 12 bytes of scales and mins, [32 bytes qh], 128 bytes of nibbles; 64 elements a
   pair of scales (low nibbles, then high), qh bits 2c and 2c + 1 the fifth bits of pair c. Q6_K:
   128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, d; per half of 128 elements,
   element l + 32 i (l < 32) takes nibble i / 2 of byte l + 32 (i & 1) and bits 2i of high byte l,
   less 32, times scale 8 half + l / 16 + 2i. */
static void bitnet__dequant_block(bitnet_tensor_type t, const uint8_t *b, float *y) {
    int j, l, c;
    if (t == BITNET_TENSOR_Q8_0) {
        const float d = bitnet__h2f_le(b);
        for (j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    } else if (t == BITNET_TENSOR_Q4_0 || t == BITNET_TENSOR_Q4_1 || t == BITNET_TENSOR_Q5_0 || t == BITNET_TENSOR_Q5_1) {
        const int has_m = t == BITNET_TENSOR_Q4_1 || t == BITNET_TENSOR_Q5_1, five = t == BITNET_TENSOR_Q5_0 || t == BITNET_TENSOR_Q5_1;
        const int off = has_m ? 0 : five ? 16 : 8;
        const float d = bitnet__h2f_le(b), m = has_m ? bitnet__h2f_le(b + 2) : 0.0f;
        const uint8_t *qh = b + (has_m ? 4 : 2), *qs = qh + (five ? 4 : 0);
        const uint32_t h = five ? (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24 : 0;
        for (j = 0; j < 16; j++) {
            const int x0 = (int)((qs[j] & 15) | ((h >> j) & 1) << 4) - off, x1 = (int)((qs[j] >> 4) | ((h >> (j + 16)) & 1) << 4) - off;
            y[j] = has_m ? (float)x0 * d + m : (float)x0 * d;
            y[j + 16] = has_m ? (float)x1 * d + m : (float)x1 * d;
        }
    } else if (t == BITNET_TENSOR_Q4_K || t == BITNET_TENSOR_Q5_K) {
        const int five = t == BITNET_TENSOR_Q5_K;
        const float d = bitnet__h2f_le(b), dmin = bitnet__h2f_le(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *q = b + (five ? 48 : 16);
        for (c = 0; c < 4; c++, q += 32) {
            int s1, m1, s2, m2;
            bitnet__k_scale(sc, 2 * c, &s1, &m1);
            bitnet__k_scale(sc, 2 * c + 1, &s2, &m2);
            {
                const float d1 = d * (float)s1, n1 = dmin * (float)m1, d2 = d * (float)s2, n2 = dmin * (float)m2;
                for (l = 0; l < 32; l++) {
                    const int hi1 = five && (qh[l] >> (2 * c) & 1) ? 16 : 0, hi2 = five && (qh[l] >> (2 * c + 1) & 1) ? 16 : 0;
                    y[64 * c + l] = d1 * (float)((q[l] & 15) + hi1) - n1;
                    y[64 * c + 32 + l] = d2 * (float)((q[l] >> 4) + hi2) - n2;
                }
            }
        }
    } else if (t == BITNET_TENSOR_Q6_K) {
        const float d = bitnet__h2f_le(b + 208);
        for (c = 0; c < 2; c++) {
            const uint8_t *ql = b + 64 * c, *qh = b + 128 + 32 * c;
            const int8_t *sc = (const int8_t *)(b + 192) + 8 * c;
            for (l = 0; l < 32; l++)
                for (j = 0; j < 4; j++) {
                    const int lo = (ql[l + 32 * (j & 1)] >> (4 * (j >> 1))) & 15, q = (lo | ((qh[l] >> (2 * j)) & 3) << 4) - 32;
                    y[128 * c + 32 * j + l] = d * (float)sc[l / 16 + 2 * j] * (float)q;
                }
        }
    }
}
BITNET_API bitnet_result bitnet_dequantize(bitnet_tensor_type type, const void *src, size_t src_bytes, float *dst, size_t n) {
    const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)type);
    const uint8_t *b = (const uint8_t *)src;
    size_t i, need;
    BITNET__CHECK_PTR(src);
    BITNET__CHECK_PTR(dst);
    if (!tt || bitnet__ternary_type(type))
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "bitnet_dequantize: type %d (%s) is not a float or llama.cpp block type", (int)type,
                           tt ? tt->name : "?");
    if (n % tt->blk) return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_dequantize: %zu elements are not whole %s blocks of %u", n, tt->name, tt->blk);
    if (!bitnet__mul_size(n / tt->blk, tt->bytes, &need) || src_bytes < need)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_dequantize: %zu %s elements need more than the %zu bytes given", n, tt->name, src_bytes);
    if (type == BITNET_TENSOR_F32) memcpy(dst, src, n * 4);
    else if (type == BITNET_TENSOR_F16 || type == BITNET_TENSOR_BF16)
        for (i = 0; i < n; i++) {
            const uint16_t h = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
            dst[i] = type == BITNET_TENSOR_F16 ? bitnet_fp16_to_fp32(h) : bitnet_bf16_to_fp32(h);
        }
    else
        for (i = 0; i < n / tt->blk; i++) bitnet__dequant_block(type, b + i * tt->bytes, dst + i * tt->blk);
    return BITNET_OK;
}

/* >>threads =================================================================================== */

/* bitnet__parallel(fn, arg) runs fn(arg, ith, nth) once for each ith in [0, nth) and returns when
   all are done; the caller runs ith = 0. Workers are persistent pthreads created at first use.
   Dispatch is an atomic generation counter: workers spin on it for a short while (decoding calls
   the pool ~250 times per token, so wake-up latency matters), then sleep on a condition variable;
   the condvar is only touched when somebody sleeps. The pool belongs to one caller at a time: a
   concurrent or nested call (from inside a task) runs inline with nth = 1, so kernels are safe to
   call from any thread. bitnet_set_num_threads(1) (or bitnet__tpool_shutdown) stops and joins the
   workers; a failing pthread_create leaves fewer threads, with a warning in the log. */
typedef void (*bitnet__task_fn)(void *arg, int ith, int nth);
#define BITNET__MAX_THREADS 256

#if !defined(BITNET_NO_THREADS) && !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
#define BITNET__POOL 1
#include <sched.h>
#endif

static int bitnet__threads_want; /* 0 = not resolved yet; atomic (sessions on several threads ask) */

BITNET__UNUSED static int bitnet__online_cores(void) {
#if defined(_SC_NPROCESSORS_ONLN)
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > BITNET__MAX_THREADS ? BITNET__MAX_THREADS : (int)n);
#else
    return 1;
#endif
}

/* The configured count: bitnet_set_num_threads, else BITNET_NUM_THREADS, else the online cores. */
BITNET__UNUSED static int bitnet__threads_config(void) {
    int want = __atomic_load_n(&bitnet__threads_want, __ATOMIC_ACQUIRE);
    if (want == 0) {
        const char *env = bitnet__getenv("BITNET_NUM_THREADS");
        int n = 0;
        if (env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end || v < 0 || v > BITNET__MAX_THREADS)
                bitnet__log(BITNET_LOG_WARN, "BITNET_NUM_THREADS=%s is not a count in [0, %d]; using the online cores",
                            env, BITNET__MAX_THREADS);
            else n = (int)v;
        }
        want = n ? n : bitnet__online_cores();
        __atomic_store_n(&bitnet__threads_want, want, __ATOMIC_RELEASE); /* (racing callers store the same count) */
    }
    return want;
}

#if defined(BITNET__POOL)
#define BITNET__LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define BITNET__STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define BITNET__FETCH_ADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)

static void bitnet__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct bitnet__tpool bitnet__tpool;
typedef struct bitnet__worker { bitnet__tpool *pool; int ith; } bitnet__worker;
struct bitnet__tpool {
    int nth;                        /* threads including the caller */
    pthread_t *threads;             /* nth - 1 workers */
    bitnet__worker *workers;
    bitnet__task_fn fn;             /* the current task, published by gen */
    void *arg;
    unsigned gen;                   /* atomic: bumped once per task (and at shutdown) */
    int pending;                    /* atomic: workers still running the current task */
    int stop;                       /* atomic */
    int sleepers;                   /* atomic: workers blocked in cv */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};
static bitnet__tpool *bitnet__the_tpool;
static int bitnet__tpool_busy;      /* atomic: 1 while a caller owns the pool */
static int bitnet__tpool_failed;    /* atomic: creation failed, run inline until the count changes */

#define BITNET__SPIN_SECONDS 2e-4  /* spin this long before sleeping (covers gaps between kernels) */

/* Waits until gen differs from seen; returns the new value. */
static unsigned bitnet__tpool_wait(bitnet__tpool *p, unsigned seen) {
    unsigned g;
    double t0 = 0;
    int i;
    for (i = 1;; i++) {
        if ((g = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE)) != seen) return g;
        bitnet__cpu_relax();
        if ((i & 127) == 0) { /* every few microseconds: let a descheduled thread in, check the clock */
            double t = bitnet__now();
            if (t0 == 0) t0 = t;
            else if (t - t0 > BITNET__SPIN_SECONDS) break;
            sched_yield();
        }
    }
    /* Sleep. sleepers++ then re-reading gen pairs with the dispatcher's gen++ then reading
       sleepers (both seq_cst): at least one side sees the other, so no wake-up is lost. */
    pthread_mutex_lock(&p->mu);
    BITNET__FETCH_ADD(&p->sleepers, 1);
    while ((g = BITNET__LOAD(&p->gen)) == seen) pthread_cond_wait(&p->cv, &p->mu);
    BITNET__FETCH_ADD(&p->sleepers, -1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void bitnet__tpool_publish(bitnet__tpool *p) {
    BITNET__FETCH_ADD(&p->gen, 1u);
    if (BITNET__LOAD(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *bitnet__worker_main(void *arg) {
    bitnet__worker *wk = (bitnet__worker *)arg;
    bitnet__tpool *p = wk->pool;
    unsigned seen = 0;
    for (;;) {
        seen = bitnet__tpool_wait(p, seen);
        if (BITNET__LOAD(&p->stop)) break;
        p->fn(p->arg, wk->ith, p->nth);
        __atomic_fetch_sub(&p->pending, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Stops and joins the workers of a pool (the caller owns bitnet__tpool_busy). */
static void bitnet__tpool_destroy(bitnet__tpool *p) {
    int i;
    if (!p) return;
    BITNET__STORE(&p->stop, 1);
    pthread_mutex_lock(&p->mu);
    BITNET__FETCH_ADD(&p->gen, 1u);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (i = 0; i < p->nth - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    bitnet__free(p->threads);
    bitnet__free(p->workers);
    bitnet__free(p);
}

/* Starts nth - 1 workers; on failure keeps those that started (NULL when none could). */
static bitnet__tpool *bitnet__tpool_create(int nth) {
    bitnet__tpool *p = (bitnet__tpool *)bitnet__calloc(1, sizeof *p);
    int i, rc = 0;
    if (!p) return NULL;
    p->threads = (pthread_t *)bitnet__calloc((size_t)nth, sizeof(pthread_t));
    p->workers = (bitnet__worker *)bitnet__calloc((size_t)nth, sizeof(bitnet__worker));
    if (!p->threads || !p->workers || pthread_mutex_init(&p->mu, NULL) != 0) {
        bitnet__free(p->threads);
        bitnet__free(p->workers);
        bitnet__free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        bitnet__free(p->threads);
        bitnet__free(p->workers);
        bitnet__free(p);
        return NULL;
    }
    p->nth = 1;
    for (i = 0; i < nth - 1; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i + 1;
        if ((rc = pthread_create(&p->threads[i], NULL, bitnet__worker_main, &p->workers[i])) != 0) break;
        p->nth++;
    }
    if (p->nth < nth)
        bitnet__log(BITNET_LOG_WARN, "thread pool: pthread_create failed (%s); running with %d of %d threads",
                    strerror(rc), p->nth, nth);
    if (p->nth == 1) {
        bitnet__tpool_destroy(p);
        return NULL;
    }
    return p;
}

static void bitnet__tpool_lock(void) {
    int expected = 0, spins = 0;
    while (!__atomic_compare_exchange_n(&bitnet__tpool_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        expected = 0;
        if (++spins > 64) sched_yield();
        else bitnet__cpu_relax();
    }
}
static void bitnet__tpool_unlock(void) { __atomic_store_n(&bitnet__tpool_busy, 0, __ATOMIC_RELEASE); }

/* Stops the workers and frees the pool (tests, leak checkers). The next parallel call restarts it. */
BITNET__UNUSED static void bitnet__tpool_shutdown(void) {
    bitnet__tpool_lock();
    bitnet__tpool_destroy(bitnet__the_tpool);
    __atomic_store_n(&bitnet__the_tpool, (bitnet__tpool *)NULL, __ATOMIC_RELEASE);
    __atomic_store_n(&bitnet__tpool_failed, 0, __ATOMIC_RELEASE);
    bitnet__tpool_unlock();
}

BITNET__UNUSED static void bitnet__parallel(bitnet__task_fn fn, void *arg) {
    bitnet__tpool *p;
    int expected = 0, i;
    if (!__atomic_compare_exchange_n(&bitnet__tpool_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        fn(arg, 0, 1); /* nested, or another thread owns the pool */
        return;
    }
    p = bitnet__the_tpool;
    if (!p && !__atomic_load_n(&bitnet__tpool_failed, __ATOMIC_ACQUIRE) && bitnet__threads_config() > 1) {
        p = bitnet__tpool_create(bitnet__threads_config());
        __atomic_store_n(&bitnet__the_tpool, p, __ATOMIC_RELEASE);
        if (!p) {
            __atomic_store_n(&bitnet__tpool_failed, 1, __ATOMIC_RELEASE);
            bitnet__log(BITNET_LOG_WARN, "thread pool: could not start workers; running single-threaded");
        }
    }
    if (!p) {
        bitnet__tpool_unlock();
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    BITNET__STORE(&p->pending, p->nth - 1);
    bitnet__tpool_publish(p);
    fn(arg, 0, p->nth);
    for (i = 1; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0; i++) {
        bitnet__cpu_relax();
        if ((i & 127) == 0) sched_yield(); /* a worker may be descheduled: give it the core */
    }
    bitnet__tpool_unlock();
}

/* The running pool's size, else the configured count (1 after a failed start). */
BITNET_API int bitnet_num_threads(void) {
    bitnet__tpool *p = __atomic_load_n(&bitnet__the_tpool, __ATOMIC_ACQUIRE);
    return p ? p->nth : (__atomic_load_n(&bitnet__tpool_failed, __ATOMIC_ACQUIRE) ? 1 : bitnet__threads_config());
}

BITNET_API bitnet_result bitnet_set_num_threads(int n) {
    if (n < 0 || n > BITNET__MAX_THREADS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_set_num_threads: %d is not in [0, %d]", n, BITNET__MAX_THREADS);
    bitnet__tpool_lock();
    n = n ? n : bitnet__online_cores();
    __atomic_store_n(&bitnet__threads_want, n, __ATOMIC_RELEASE);
    if (bitnet__the_tpool && bitnet__the_tpool->nth != n) {
        bitnet__tpool_destroy(bitnet__the_tpool);
        __atomic_store_n(&bitnet__the_tpool, (bitnet__tpool *)NULL, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&bitnet__tpool_failed, 0, __ATOMIC_RELEASE);
    bitnet__tpool_unlock();
    return BITNET_OK;
}
#else /* no pool: everything runs on the calling thread */
BITNET__UNUSED static void bitnet__parallel(bitnet__task_fn fn, void *arg) { fn(arg, 0, 1); }
BITNET__UNUSED static void bitnet__tpool_shutdown(void) {}
BITNET_API int bitnet_num_threads(void) { return 1; }
BITNET_API bitnet_result bitnet_set_num_threads(int n) {
    if (n < 0 || n > BITNET__MAX_THREADS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_set_num_threads: %d is not in [0, %d]", n, BITNET__MAX_THREADS);
    return BITNET_OK;
}
#endif

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
    bitnet_isa isa = bitnet_cpu_isa(); /* w NULL: no norm (a "llama" model's missing sub-norms), the absmax alone */
    bitnet__quantize_row_fn(isa)(x, w, w ? bitnet__rms_factor(isa, x, k, eps) : 1.0f, k, q, scale, sum);
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

static bitnet_result bitnet__isa_unavailable(bitnet_isa isa) {
    return bitnet__err(BITNET_ERR_UNSUPPORTED_ISA, "the %s path is not available on this CPU or build", bitnet_isa_name(isa));
}

BITNET_API bitnet_result bitnet_cpu_set_isa(bitnet_isa isa) {
    if ((unsigned)isa >= BITNET_ISA_COUNT) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_cpu_set_isa: bad value %d", (int)isa);
    if (!bitnet_cpu_has_isa(isa)) return bitnet__isa_unavailable(isa);
    __atomic_store_n(&bitnet__active_isa, isa, __ATOMIC_RELEASE); /* AUTO: resolved again (BITNET_CPU, else the best) at next use */
    return BITNET_OK;
}

/* The active path; BITNET_CPU is honoured at first use (an unusable value leaves the best path
   active and is reported through the logger and bitnet_last_error). Threads may ask at once (a
   kernel's workers on first use): each resolves the same path and stores it atomically. */
BITNET_API bitnet_isa bitnet_cpu_isa(void) {
    bitnet_isa isa = __atomic_load_n(&bitnet__active_isa, __ATOMIC_ACQUIRE);
    if (isa == BITNET_ISA_AUTO) {
        const char *env = bitnet__getenv("BITNET_CPU");
        bitnet_isa want = BITNET_ISA_AUTO;
        int i;
        isa = bitnet__best_isa();
        if (env) {
            for (i = 0; i < BITNET_ISA_COUNT; i++)
                if (strcmp(env, bitnet__isa_names[i]) == 0) want = (bitnet_isa)i;
            if (want == BITNET_ISA_AUTO && strcmp(env, "auto") != 0)
                bitnet__err(BITNET_ERR_INVALID_ARG, "BITNET_CPU=%s is not one of scalar, avx2, avx512, neon", env);
            else if (want != BITNET_ISA_AUTO) {
                if (bitnet_cpu_has_isa(want)) isa = want;
                else {
                    bitnet__isa_unavailable(want);
                    bitnet__log(BITNET_LOG_WARN, "BITNET_CPU=%s not available, using %s", env, bitnet_isa_name(isa));
                }
            }
        }
        __atomic_store_n(&bitnet__active_isa, isa, __ATOMIC_RELEASE);
    }
    return isa;
}

/* ---- scalar reference kernels: the oracle every SIMD and GPU path is tested against --------- */

/* Dot products stay exact in int32: |code * a| <= 256 per I2_S weight, |w * a| <= 16384 per q8 one. */
#define BITNET__I2S_MAX_K ((size_t)1 << 22)
#define BITNET__Q8_MAX_K ((size_t)1 << 16)

/* The one epilogue: (float)(acc - corr) / a_scale * w_scale, the subtraction wrapping in 32 bits
   (exact for valid inputs). The SIMD paths do the same IEEE operations 4 lanes at a time, so every
   path gives the same bits. corr is a_sum for I2_S (codes are w + 1) and 0 for int8 weights. */
static float bitnet__epilogue(int32_t acc, int32_t corr, float a_scale, float w_scale) {
    return (float)(int32_t)((uint32_t)acc - (uint32_t)corr) / a_scale * w_scale;
}

static bitnet_result bitnet__gemm_i2s_check(const void *w, size_t w_bytes, size_t n, size_t k, const int8_t *a,
                                            const float *a_scale, const int32_t *a_sum, size_t m, float *out) {
    size_t mk, mn;
    if (!a || !a_scale || !a_sum || !out)
        return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gemm_i2s: a, a_scale, a_sum and out must not be NULL");
    BITNET__TRY(bitnet__i2s_check("bitnet_gemm_i2s", w, w_bytes, n, k));
    if (m == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_i2s: m is 0");
    if (k > BITNET__I2S_MAX_K)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_i2s: k=%zu is above %zu (int32 accumulation)", k, BITNET__I2S_MAX_K);
    if (!bitnet__mul_size(m, k, &mk) || !bitnet__mul_size(m, n, &mn))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemm_i2s: m=%zu n=%zu k=%zu overflows", m, n, k);
    return BITNET_OK;
}

/* Rows [n0, n1) of the output for all m activation rows. The I2_S identity:
   sum(w*a) = sum((w+1)*a) - sum(a), so the packed codes are used as unsigned bytes directly.
   Each 128-weight block is unpacked once and used for up to 8 activation rows. */
static void bitnet__gemm_i2s_scalar(const uint8_t *w, size_t n0, size_t n1, size_t k, const int8_t *a,
                                    const float *a_scale, const int32_t *a_sum, size_t m, float w_scale,
                                    float *out, size_t n) {
    uint8_t code[BITNET_I2S_BLOCK];
    int32_t acc[8];
    size_t r, i0, i, c, j;
    for (r = n0; r < n1; r++) {
        const uint8_t *wr = w + r * (k / 4);
        for (i0 = 0; i0 < m; i0 += 8) {
            const size_t ni = BITNET__MIN((size_t)8, m - i0);
            memset(acc, 0, sizeof acc);
            for (c = 0; c < k; c += BITNET_I2S_BLOCK) {
                for (j = 0; j < 32; j++) {
                    const uint8_t b = wr[c / 4 + j];
                    code[j] = (uint8_t)(b >> 6);
                    code[j + 32] = (uint8_t)((b >> 4) & 3);
                    code[j + 64] = (uint8_t)((b >> 2) & 3);
                    code[j + 96] = (uint8_t)(b & 3);
                }
                for (i = 0; i < ni; i++) {
                    const int8_t *ai = a + (i0 + i) * k + c;
                    int32_t s = 0;
                    for (j = 0; j < BITNET_I2S_BLOCK; j++) s += code[j] * ai[j];
                    acc[i] += s;
                }
            }
            for (i = 0; i < ni; i++)
                out[(i0 + i) * n + r] = bitnet__epilogue(acc[i], a_sum[i0 + i], a_scale[i0 + i], w_scale);
        }
    }
}

static void bitnet__gemm_q8_scalar(const int8_t *w, size_t n0, size_t n1, size_t k, const int8_t *a,
                                   const float *a_scale, size_t m, const float *w_scale, float *out, size_t n) {
    size_t r, i, c;
    for (r = n0; r < n1; r++)
        for (i = 0; i < m; i++) {
            int32_t acc = 0;
            for (c = 0; c < k; c++) acc += w[r * k + c] * a[i * k + c];
            out[i * n + r] = bitnet__epilogue(acc, 0, a_scale[i], w_scale[r]);
        }
}

/* ---- SIMD tiles: 4 weight rows x nt activation rows, epilogue included -------------------------
   res[t*4 + r] = epilogue(sum over c < k of weight(r, c) * a[t*k + c]), where weight is the I2_S
   code (w + 1) or the int8 weight. Tail rows repeat a row pointer; the driver keeps what it needs. */
typedef struct bitnet__epi {
    const float *a_scale;   /* per activation row of the tile */
    const int32_t *a_sum;
    float w_scale[4];       /* per weight row of the tile */
} bitnet__epi;
typedef void (*bitnet__tile_fn)(const uint8_t *const *w, size_t k, const int8_t *a, const bitnet__epi *e, int nt,
                                float *res);
#define BITNET__TILE_T_MAX 8

#if defined(__GNUC__) || defined(__clang__)
#define BITNET__AINLINE static inline __attribute__((always_inline))
#else
#define BITNET__AINLINE static inline
#endif
#define BITNET__REP4(X, t) X(0, t) X(1, t) X(2, t) X(3, t)

#if defined(BITNET__X86_SIMD)
#define BITNET__KERN_AVX2 __attribute__((target("avx2,fma")))
#define BITNET__KERN_AVX512 __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")))

/* acc += u8 x s8 dot products. GCC (12) copies the accumulator around every
   _mm512_dpbusd_epi32, which makes the loops front-end bound; the asm form accumulates in place. */
#if defined(__GNUC__) && !defined(__clang__)
#define BITNET__DPBUSD(acc, u, s) __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s))
#else
#define BITNET__DPBUSD(acc, u, s) ((acc) = _mm512_dpbusd_epi32((acc), (u), (s)))
#endif

/* {sum a, sum b, sum c, sum d} */
BITNET__KERN_AVX2 BITNET__AINLINE __m128i bitnet__hsum4_avx2(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}
BITNET__KERN_AVX512 BITNET__AINLINE __m256i bitnet__fold_avx512(__m512i a) {
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}
BITNET__KERN_AVX512 BITNET__AINLINE __m128i bitnet__hsum4_avx512(__m512i a, __m512i b, __m512i c, __m512i d) {
    return bitnet__hsum4_avx2(bitnet__fold_avx512(a), bitnet__fold_avx512(b), bitnet__fold_avx512(c), bitnet__fold_avx512(d));
}
/* Lane i of the result is the sum of the 16 lanes of v_i (a transpose-and-add tree). */
BITNET__KERN_AVX512 BITNET__AINLINE __m512i bitnet__pair512(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
BITNET__KERN_AVX512 BITNET__AINLINE __m512i bitnet__quad512(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = bitnet__pair512(a, b), cd = bitnet__pair512(c, d);
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}
BITNET__KERN_AVX512 BITNET__AINLINE __m512i bitnet__lanes512(__m512i x, __m512i y) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(x, y, 0x88), _mm512_shuffle_i32x4(x, y, 0xdd));
}
/* bitnet__epilogue on 16 sums at once, lane t*4 + r (q8: corr = 128 * a_sum, else a_sum). */
BITNET__KERN_AVX512 BITNET__AINLINE void bitnet__epi16_avx512(__m512i acc, int q8, const bitnet__epi *e, int nt, float *res) {
    const __mmask8 mt = (__mmask8)((1u << nt) - 1);
    const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512i corr = _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_maskz_loadu_epi32(mt, e->a_sum)));
    const __m512 as = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_mask_loadu_ps(_mm_set1_ps(1.0f), mt, e->a_scale)));
    __m512 f;
    if (q8) corr = _mm512_slli_epi32(corr, 7);
    f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, corr));
    _mm512_storeu_ps(res, _mm512_mul_ps(_mm512_div_ps(f, as), _mm512_broadcast_f32x4(_mm_loadu_ps(e->w_scale))));
}
/* bitnet__epilogue on 4 weight rows of activation row t. */
BITNET__KERN_AVX2 BITNET__AINLINE void bitnet__epi4_x86(__m128i acc, int32_t corr, const bitnet__epi *e, int t, float *res) {
    const __m128 f = _mm_cvtepi32_ps(_mm_sub_epi32(acc, _mm_set1_epi32(corr)));
    _mm_storeu_ps(res + 4 * t, _mm_mul_ps(_mm_div_ps(f, _mm_set1_ps(e->a_scale[t])), _mm_loadu_ps(e->w_scale)));
}

/* Weight rows are streamed once from DRAM; the hardware prefetcher alone leaves about a third
   of the bandwidth unused, so each tile prefetches, for each of its 4 rows, the line at the same
   offset in the tile pf bytes ahead: the fewest whole tiles of at least BITNET__PF_DIST bytes (rows
   of a work item are contiguous: that is the next tiles' weights). A fixed distance per row fell
   inside the tile itself for rows over 1 KB (AMD EPYC, 1 thread, 2560x6912: 21.5 -> 33.6 GB/s;
   BENCHMARKS.md, session 35). pf is 0 for a tile of one row. */
#ifndef BITNET__PF_DIST
#define BITNET__PF_DIST 4096
#endif
BITNET__AINLINE size_t bitnet__pf_lead(const uint8_t *const *w) {
    const size_t t = 4 * (size_t)(w[1] - w[0]); /* the tile's bytes: rows are evenly spaced */
    return t ? (BITNET__PF_DIST + t - 1) / t * t : 0;
}
#define BITNET__PREFETCH4(o) { \
    _mm_prefetch((const char *)(w0 + (o) + pf), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w1 + (o) + pf), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w2 + (o) + pf), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w3 + (o) + pf), _MM_HINT_T0); }
/* AVX-512 VNNI, I2_S: the 32-byte block is broadcast to both halves of a zmm; per-half dword
   shifts (6 | 4, then 2 | 0) and & 3 give the codes of 64 contiguous weights (bits shifted in
   from the next byte are masked off), which vpdpbusd multiplies (u8) with 64 contiguous
   activations (s8). Each decoded register serves T activation rows. */
#define BITNET__ZERO512(r, t) __m512i acc##r##t = _mm512_setzero_si512();
#define BITNET__DP512(r, t) BITNET__DPBUSD(acc##r##t, x##r, av);
#define BITNET__TOK512(t, off) \
    if (T > t) { const __m512i av = _mm512_loadu_si512((const void *)(a + (t) * k + c + (off))); BITNET__REP4(BITNET__DP512, t) }
#define BITNET__TOKS512(off) \
    BITNET__TOK512(0, off) BITNET__TOK512(1, off) BITNET__TOK512(2, off) BITNET__TOK512(3, off) \
    BITNET__TOK512(4, off) BITNET__TOK512(5, off)
#define BITNET__ALLT(X) BITNET__REP4(X, 0) BITNET__REP4(X, 1) BITNET__REP4(X, 2) BITNET__REP4(X, 3) \
    BITNET__REP4(X, 4) BITNET__REP4(X, 5)
#define BITNET__DEC512(r, b, sh) const __m512i x##r = _mm512_and_si512(_mm512_srlv_epi32(b, sh), m3);
#define BITNET__OUT16(q8) \
    bitnet__epi16_avx512(bitnet__lanes512(bitnet__lanes512(bitnet__quad512(acc00, acc10, acc20, acc30), \
                                                           bitnet__quad512(acc01, acc11, acc21, acc31)), \
                                          bitnet__lanes512(bitnet__quad512(acc02, acc12, acc22, acc32), \
                                                           bitnet__quad512(acc03, acc13, acc23, acc33))), \
                         q8, e, T, res);
#define BITNET__OUT512(t, corr) \
    if (T > t) bitnet__epi4_x86(bitnet__hsum4_avx512(acc0##t, acc1##t, acc2##t, acc3##t), corr, e, t, res);

BITNET__KERN_AVX512 BITNET__AINLINE void bitnet__i2s_tile_avx512_t(const uint8_t *const *w, size_t k, const int8_t *a,
                                                                   const bitnet__epi *e, float *res, const int T) {
    const __m512i sh_lo = _mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6);
    const __m512i sh_hi = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i m3 = _mm512_set1_epi8(3);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const size_t pf = bitnet__pf_lead(w);
    size_t c;
    BITNET__ALLT(BITNET__ZERO512)
    for (c = 0; c < k; c += 128) {
        const size_t o = c / 4;
        if ((o & 63) == 0) BITNET__PREFETCH4(o)
        const __m512i b0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(w0 + o)));
        const __m512i b1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(w1 + o)));
        const __m512i b2 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(w2 + o)));
        const __m512i b3 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(w3 + o)));
        {
            BITNET__DEC512(0, b0, sh_lo) BITNET__DEC512(1, b1, sh_lo) BITNET__DEC512(2, b2, sh_lo) BITNET__DEC512(3, b3, sh_lo)
            BITNET__TOKS512(0)
        }
        {
            BITNET__DEC512(0, b0, sh_hi) BITNET__DEC512(1, b1, sh_hi) BITNET__DEC512(2, b2, sh_hi) BITNET__DEC512(3, b3, sh_hi)
            BITNET__TOKS512(64)
        }
    }
    if (T >= 2 && T <= 4) {
        BITNET__OUT16(0)
    } else {
        BITNET__OUT512(0, e->a_sum[0]) BITNET__OUT512(1, e->a_sum[1]) BITNET__OUT512(2, e->a_sum[2])
        BITNET__OUT512(3, e->a_sum[3]) BITNET__OUT512(4, e->a_sum[4]) BITNET__OUT512(5, e->a_sum[5])
    }
}

/* AVX-512 VNNI, I2_S, one activation row (the GEMV, memory-bound): masks only, no shifts.
   b & 0xC0 in the low half and b & 0x30 in the high half are the codes of weights c..c+63 times
   64 and 16; b & 0x0C | b & 0x03 those of c+64..c+127 times 4 and 1. Rescaled to a common 64,
   the lanes add up (mod 2^32) to 64 * dot, exact while |64 * dot| < 2^31: k <= 65536 (3 * 128 *
   65536 * 64 = 1.5 * 2^30), which the driver checks. */
#define BITNET__GEMV_MAX_K ((size_t)1 << 16)
#define BITNET__ROW1(r) \
    { \
        const __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(w##r + o))); \
        BITNET__DPBUSD(accA##r, _mm512_and_si512(b, mA), a0); \
        BITNET__DPBUSD(accB##r, _mm512_and_si512(b, mB), a1); \
    }
#define BITNET__RESCALE(r) _mm512_add_epi32(_mm512_sllv_epi32(accA##r, shA), _mm512_sllv_epi32(accB##r, shB))
BITNET__KERN_AVX512 static void bitnet__i2s_gemv_avx512(const uint8_t *const *w, size_t k, const int8_t *a,
                                                        const bitnet__epi *e, float *res) {
    const __m512i mA = _mm512_set_epi32(0x30303030, 0x30303030, 0x30303030, 0x30303030, 0x30303030, 0x30303030,
                                        0x30303030, 0x30303030, (int)0xC0C0C0C0, (int)0xC0C0C0C0, (int)0xC0C0C0C0,
                                        (int)0xC0C0C0C0, (int)0xC0C0C0C0, (int)0xC0C0C0C0, (int)0xC0C0C0C0, (int)0xC0C0C0C0);
    const __m512i mB = _mm512_set_epi32(0x03030303, 0x03030303, 0x03030303, 0x03030303, 0x03030303, 0x03030303,
                                         0x03030303, 0x03030303, 0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C,
                                         0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C, 0x0C0C0C0C);
    const __m512i shA = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i shB = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const size_t pf = bitnet__pf_lead(w);
    __m512i accA0 = _mm512_setzero_si512(), accA1 = accA0, accA2 = accA0, accA3 = accA0;
    __m512i accB0 = accA0, accB1 = accA0, accB2 = accA0, accB3 = accA0;
    size_t c;
    for (c = 0; c < k; c += 128) {
        const size_t o = c / 4;
        const __m512i a0 = _mm512_loadu_si512((const void *)(a + c)), a1 = _mm512_loadu_si512((const void *)(a + c + 64));
        if ((o & 63) == 0) BITNET__PREFETCH4(o)
        BITNET__ROW1(0) BITNET__ROW1(1) BITNET__ROW1(2) BITNET__ROW1(3)
    }
    bitnet__epi4_x86(_mm_srai_epi32(bitnet__hsum4_avx512(BITNET__RESCALE(0), BITNET__RESCALE(1), BITNET__RESCALE(2),
                                                         BITNET__RESCALE(3)), 6),
                     e->a_sum[0], e, 0, res);
}
#undef BITNET__RESCALE
#undef BITNET__ROW1

/* AVX-512 VNNI, int8 weights: vpdpbusd needs one unsigned operand, so the weights are offset by
   128 (w ^ 0x80 = w + 128 as u8): sum((w + 128) * a) - 128 * sum(a) = sum(w * a), exact in
   wrapping int32 arithmetic. The k tail uses masked loads (zero weights and activations). */
BITNET__KERN_AVX512 BITNET__AINLINE void bitnet__q8_tile_avx512_t(const uint8_t *const *w, size_t k, const int8_t *a,
                                                                  const bitnet__epi *e, float *res, const int T) {
    const __m512i m80 = _mm512_set1_epi8((char)0x80);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const size_t pf = bitnet__pf_lead(w);
    size_t c;
    BITNET__ALLT(BITNET__ZERO512)
    for (c = 0; c + 64 <= k; c += 64) {
        BITNET__PREFETCH4(c)
        const __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(w0 + c)), m80);
        const __m512i x1 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(w1 + c)), m80);
        const __m512i x2 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(w2 + c)), m80);
        const __m512i x3 = _mm512_xor_si512(_mm512_loadu_si512((const void *)(w3 + c)), m80);
        BITNET__TOKS512(0)
    }
    if (c < k) {
        const __mmask64 mk = ((__mmask64)1 << (k - c)) - 1;
        const __m512i x0 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, w0 + c), m80);
        const __m512i x1 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, w1 + c), m80);
        const __m512i x2 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, w2 + c), m80);
        const __m512i x3 = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, w3 + c), m80);
#define BITNET__TOKQ(t) \
    if (T > t) { const __m512i av = _mm512_maskz_loadu_epi8(mk, a + (t) * k + c); BITNET__REP4(BITNET__DP512, t) }
        BITNET__TOKQ(0) BITNET__TOKQ(1) BITNET__TOKQ(2) BITNET__TOKQ(3) BITNET__TOKQ(4) BITNET__TOKQ(5)
#undef BITNET__TOKQ
    }
#define BITNET__C8(t) (int32_t)(128u * (uint32_t)e->a_sum[t])
    if (T >= 2 && T <= 4) {
        BITNET__OUT16(1)
    } else {
        BITNET__OUT512(0, BITNET__C8(0)) BITNET__OUT512(1, BITNET__C8(1)) BITNET__OUT512(2, BITNET__C8(2))
        BITNET__OUT512(3, BITNET__C8(3)) BITNET__OUT512(4, BITNET__C8(4)) BITNET__OUT512(5, BITNET__C8(5))
    }
#undef BITNET__C8
}
#undef BITNET__TOKS512
#undef BITNET__TOK512
#undef BITNET__DP512
#undef BITNET__DEC512
#undef BITNET__ZERO512
#undef BITNET__OUT512
#undef BITNET__OUT16
#undef BITNET__ALLT

/* Activation rows per AVX-512 tile (at most 6): 4 keeps GCC's register allocation spill-free. */
#ifndef BITNET__AVX512_TILE_T
#define BITNET__AVX512_TILE_T 4
#endif
BITNET__KERN_AVX512 static void bitnet__i2s_tile_avx512(const uint8_t *const *w, size_t k, const int8_t *a,
                                                        const bitnet__epi *e, int nt, float *res) {
    switch (nt) {
    case 1:
        if (k <= BITNET__GEMV_MAX_K) bitnet__i2s_gemv_avx512(w, k, a, e, res);
        else bitnet__i2s_tile_avx512_t(w, k, a, e, res, 1);
        break;
    case 2: bitnet__i2s_tile_avx512_t(w, k, a, e, res, 2); break;
    case 3: bitnet__i2s_tile_avx512_t(w, k, a, e, res, 3); break;
#if BITNET__AVX512_TILE_T > 4
    case 4: bitnet__i2s_tile_avx512_t(w, k, a, e, res, 4); break;
    case 5: bitnet__i2s_tile_avx512_t(w, k, a, e, res, 5); break;
#endif
    default: bitnet__i2s_tile_avx512_t(w, k, a, e, res, BITNET__AVX512_TILE_T); break;
    }
}
BITNET__KERN_AVX512 static void bitnet__q8_tile_avx512(const uint8_t *const *w, size_t k, const int8_t *a,
                                                       const bitnet__epi *e, int nt, float *res) {
    switch (nt) {
    case 1: bitnet__q8_tile_avx512_t(w, k, a, e, res, 1); break;
    case 2: bitnet__q8_tile_avx512_t(w, k, a, e, res, 2); break;
    case 3: bitnet__q8_tile_avx512_t(w, k, a, e, res, 3); break;
#if BITNET__AVX512_TILE_T > 4
    case 4: bitnet__q8_tile_avx512_t(w, k, a, e, res, 4); break;
    case 5: bitnet__q8_tile_avx512_t(w, k, a, e, res, 5); break;
#endif
    default: bitnet__q8_tile_avx512_t(w, k, a, e, res, BITNET__AVX512_TILE_T); break;
    }
}

/* AVX-512 VNNI, I2_S, prefill (at least BITNET__PF_MIN_M activation rows): a block of 32 weight
   rows is unpacked once into u8 codes laid out [k/4][32][4], the 4-byte groups vpdpbusd sums, so
   one zmm holds 16 weight rows x 4 weights. All activation rows reuse the block: per 4 weights, 2
   loads, then per activation row one 4-byte broadcast and 2 vpdpbusd. No decoding and no
   horizontal sums in the loop (the lanes are output columns), so it runs at about the vpdpbusd
   rate. The int32 sums and the epilogue are the reference's, so the bits are too. */
#define BITNET__PF_ROWS 32
#ifndef BITNET__PF_MIN_M
#define BITNET__PF_MIN_M 32 /* below, unpacking costs more than the tiles' decoding */
#endif
#ifndef BITNET__PF_AHEAD
#define BITNET__PF_AHEAD 2 /* blocks of weights prefetched ahead (the next items, either thread's) */
#endif
#ifndef BITNET__PF_T
#define BITNET__PF_T 12 /* activation rows per register tile: 24 accumulators */
#endif

/* Rows 0 .. nr-1 of w (nr <= 32; the rest repeat the last row) into buf[k/4][32][4]. Per 128
   weights and 16 rows, the 16 x 8 dwords of packed bytes are transposed (three rounds of 8
   two-source permutes), so dword d of every row shares a zmm; its bytes hold weights 32q + 4d ..
   32q + 4d + 3 of the block in bits 6-2q, and (>> 6-2q) & 3 per byte gives the u8 codes. */
BITNET__KERN_AVX512 static void bitnet__i2s_unpack32_avx512(const uint8_t *w, size_t row_bytes, size_t nr, size_t k,
                                                            uint8_t *buf) {
    int32_t ix[6][16];
    __m512i i1[2], i2[2], i3[2], z[8], s1[8], s2[8], cd[8];
    const __m512i m3 = _mm512_set1_epi8(3);
    size_t blk, g, q, d, l;
    for (l = 0; l < 16; l++) {
        const int r4 = (int)(l >> 2), r8 = (int)(l >> 1), r16 = (int)l;
        for (q = 0; q < 2; q++) {
            const int d1 = (int)(l & 3) + 4 * (int)q, d2 = 2 * (int)q + (int)(l & 1), d3 = (int)q;
            ix[q][l] = r4 < 2 ? 8 * r4 + d1 : 16 + 8 * (r4 - 2) + d1;     /* rows 4x4 dwords of 2 zmm */
            ix[2 + q][l] = r8 < 4 ? 4 * r8 + d2 : 16 + 4 * (r8 - 4) + d2; /* rows 8x2 dwords */
            ix[4 + q][l] = r16 < 8 ? 2 * r16 + d3 : 16 + 2 * (r16 - 8) + d3; /* rows 16x1 dword */
        }
    }
    for (q = 0; q < 2; q++) {
        i1[q] = _mm512_loadu_si512((const void *)ix[q]);
        i2[q] = _mm512_loadu_si512((const void *)ix[2 + q]);
        i3[q] = _mm512_loadu_si512((const void *)ix[4 + q]);
    }
    for (g = 0; g < 2; g++)
        for (blk = 0; blk < k / 128; blk++) {
            for (l = 0; l < 8; l++) { /* z[l]: dwords 0..7 of rows 2l and 2l + 1 */
                const uint8_t *ra = w + BITNET__MIN(16 * g + 2 * l, nr - 1) * row_bytes + blk * 32;
                const uint8_t *rb = w + BITNET__MIN(16 * g + 2 * l + 1, nr - 1) * row_bytes + blk * 32;
                z[l] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)ra)),
                                          _mm256_loadu_si256((const __m256i *)(const void *)rb), 1);
            }
            for (l = 0; l < 4; l++) /* s1[2l + h]: rows 4l .. 4l+3, dwords 4h .. 4h+3 */
                for (q = 0; q < 2; q++) s1[2 * l + q] = _mm512_permutex2var_epi32(z[2 * l], i1[q], z[2 * l + 1]);
            for (l = 0; l < 2; l++) /* s2[4l + 2h + j]: rows 8l .. 8l+7, dwords 4h + 2j, +1 */
                for (q = 0; q < 4; q++)
                    s2[4 * l + q] = _mm512_permutex2var_epi32(s1[4 * l + q / 2], i2[q % 2], s1[4 * l + 2 + q / 2]);
            for (d = 0; d < 8; d++) /* cd[d]: dword d of rows 0 .. 15 */
                cd[d] = _mm512_permutex2var_epi32(s2[d / 2], i3[d % 2], s2[4 + d / 2]);
            for (q = 0; q < 4; q++) {
                const __m128i sh = _mm_cvtsi32_si128(6 - 2 * (int)q);
                for (d = 0; d < 8; d++)
                    _mm512_storeu_si512((void *)(buf + ((blk * 32 + q * 8 + d) * BITNET__PF_ROWS + 16 * g) * 4),
                                        _mm512_and_si512(_mm512_srl_epi32(cd[d], sh), m3));
            }
        }
}

/* bitnet__epilogue on the 16 columns of acc for activation row t, stored under mask mk. */
BITNET__KERN_AVX512 BITNET__AINLINE void bitnet__pf_epi_avx512(__m512i acc, int32_t corr, float a_scale, float w_scale,
                                                              __mmask16 mk, float *out) {
    const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc, _mm512_set1_epi32(corr)));
    _mm512_mask_storeu_ps(out, mk, _mm512_mul_ps(_mm512_div_ps(f, _mm512_set1_ps(a_scale)), _mm512_set1_ps(w_scale)));
}

#define BITNET__PFREP(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define BITNET__PFLOAD(t) \
    __m512i u##t = _mm512_setzero_si512(), v##t = u##t; \
    if (T > t && acc) { \
        u##t = _mm512_loadu_si512((const void *)(acc + (t) * BITNET__PF_ROWS)); \
        v##t = _mm512_loadu_si512((const void *)(acc + (t) * BITNET__PF_ROWS + 16)); \
    }
#define BITNET__PFDP(t) \
    if (T > t) { \
        int32_t a4_; \
        memcpy(&a4_, a + 4 * (BITNET__PF_T * kk + (t)), 4); \
        { const __m512i av = _mm512_set1_epi32(a4_); BITNET__DPBUSD(u##t, w0, av); BITNET__DPBUSD(v##t, w1, av); } \
    }
#define BITNET__PFSAVE(t) \
    if (T > t) { \
        _mm512_storeu_si512((void *)(acc_out + (t) * BITNET__PF_ROWS), u##t); \
        _mm512_storeu_si512((void *)(acc_out + (t) * BITNET__PF_ROWS + 16), v##t); \
    }
#define BITNET__PFOUT(t) \
    if (T > t) { \
        bitnet__pf_epi_avx512(u##t, e->a_sum[t], e->a_scale[t], ws, m0, out + (t) * n); \
        if (m1) bitnet__pf_epi_avx512(v##t, e->a_sum[t], e->a_scale[t], ws, m1, out + (t) * n + 16); \
    }
/* T activation rows (a: packed, see bitnet__pf_pack) against kc weights of the unpacked block:
   the sums start from acc (NULL: from 0); with out NULL they go to acc_out, else the epilogue
   writes out[t * n + 0 .. nr-1]. */
BITNET__KERN_AVX512 BITNET__AINLINE void bitnet__pf_tile_avx512_t(const uint8_t *buf, size_t kc, const int8_t *a,
                                                                 const int32_t *acc, int32_t *acc_out, const bitnet__epi *e,
                                                                 float ws, size_t nr, float *out, size_t n, const int T) {
    size_t kk;
    BITNET__PFREP(BITNET__PFLOAD)
    for (kk = 0; kk < kc / 4; kk++) {
        const __m512i w0 = _mm512_loadu_si512((const void *)(buf + kk * 128));
        const __m512i w1 = _mm512_loadu_si512((const void *)(buf + kk * 128 + 64));
        BITNET__PFREP(BITNET__PFDP)
    }
    if (!out) {
        BITNET__PFREP(BITNET__PFSAVE)
    } else {
        const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
        const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
        BITNET__PFREP(BITNET__PFOUT)
    }
}
#undef BITNET__PFOUT
#undef BITNET__PFSAVE
#undef BITNET__PFDP
#undef BITNET__PFLOAD
#undef BITNET__PFREP

/* Activation rows [0, m) against one unpacked block, BITNET__PF_T at a time, BITNET__PF_KC
   weights at a time: the block's slice then stays in L1 while all the rows pass over it, their
   partial sums parked in acc ([m][32] int32). */
#ifndef BITNET__PF_KC
#define BITNET__PF_KC 512
#endif
/* The activations in the order the tiles read them, so they stream from memory: per slice of
   BITNET__PF_KC columns (c0 on), per tile of BITNET__PF_T rows, per 4 columns the 4 bytes of each
   row of the tile: ap[c0 * mp + tile * BITNET__PF_T * kc + (c - c0) / 4 * 4 * BITNET__PF_T +
   4 * row + c % 4], mp = m rounded up to whole tiles (the rows past m are zeros). */
typedef struct bitnet__pf_pack_job { const int8_t *a; size_t m, k; int8_t *ap; } bitnet__pf_pack_job;
static void bitnet__pf_pack(void *arg, int ith, int nth) { /* rows split over the threads */
    const bitnet__pf_pack_job *p = (const bitnet__pf_pack_job *)arg;
    const int8_t *a = p->a;
    const size_t m = p->m, k = p->k, mp = (m + BITNET__PF_T - 1) / BITNET__PF_T * BITNET__PF_T;
    const size_t t0 = mp * (size_t)ith / (size_t)nth, t1 = mp * (size_t)(ith + 1) / (size_t)nth;
    int8_t *ap = p->ap;
    size_t t, c0, kk;
    for (c0 = 0; c0 < k; c0 += BITNET__PF_KC) {
        const size_t kc = BITNET__MIN((size_t)BITNET__PF_KC, k - c0);
        for (t = t0; t < t1; t++) {
            int8_t *d = ap + c0 * mp + t / BITNET__PF_T * BITNET__PF_T * kc + 4 * (t % BITNET__PF_T);
            if (t >= m) {
                for (kk = 0; kk < kc / 4; kk++) memset(d + kk * 4 * BITNET__PF_T, 0, 4);
                continue;
            }
            for (kk = 0; kk < kc / 4; kk++) memcpy(d + kk * 4 * BITNET__PF_T, a + t * k + c0 + 4 * kk, 4);
        }
    }
}
BITNET__KERN_AVX512 static void bitnet__pf_block_avx512(const uint8_t *buf, size_t k, const int8_t *a, const float *a_scale,
                                                        const int32_t *a_sum, size_t m, float ws, size_t nr, float *out,
                                                        size_t n, int32_t *acc, const uint8_t *next, size_t next_bytes) {
    const size_t mp = (m + BITNET__PF_T - 1) / BITNET__PF_T * BITNET__PF_T;
    const size_t calls = (k + BITNET__PF_KC - 1) / BITNET__PF_KC * ((m + BITNET__PF_T - 1) / BITNET__PF_T);
    const size_t pf_per_call = (next_bytes / 64 + calls - 1) / calls;
    size_t t, c0, pf = 0, i;
    for (c0 = 0; c0 < k; c0 += BITNET__PF_KC) {
        const size_t kc = BITNET__MIN((size_t)BITNET__PF_KC, k - c0);
        const int last = c0 + kc == k;
        for (t = 0; t < m; t += BITNET__PF_T) {
            bitnet__epi e;
            const int nt = (int)BITNET__MIN((size_t)BITNET__PF_T, m - t);
            const uint8_t *bc = buf + c0 * BITNET__PF_ROWS;
            const int8_t *at = a + c0 * mp + t * kc;
            const int32_t *ai = c0 ? acc + t * BITNET__PF_ROWS : NULL;
            int32_t *ao = acc + t * BITNET__PF_ROWS;
            float *ot = last ? out + t * n : NULL;
            /* the packed weights of the next blocks, from DRAM while this one computes (their
               unpacking would otherwise wait on it) */
            for (i = 0; i < pf_per_call && pf < next_bytes; i++, pf += 64) _mm_prefetch((const char *)(next + pf), _MM_HINT_T1);
            e.a_scale = a_scale + t;
            e.a_sum = a_sum + t;
            switch (nt) {
#define BITNET__PFCASE(T) case T: bitnet__pf_tile_avx512_t(bc, kc, at, ai, ao, &e, ws, nr, ot, n, T); break;
            BITNET__PFCASE(1) BITNET__PFCASE(2) BITNET__PFCASE(3) BITNET__PFCASE(4) BITNET__PFCASE(5) BITNET__PFCASE(6)
            BITNET__PFCASE(7) BITNET__PFCASE(8) BITNET__PFCASE(9) BITNET__PFCASE(10) BITNET__PFCASE(11)
#undef BITNET__PFCASE
            default: bitnet__pf_tile_avx512_t(bc, kc, at, ai, ao, &e, ws, nr, ot, n, BITNET__PF_T); break;
            }
        }
    }
}

/* AMX, I2_S, prefill: the same blocks through the tile unit. tdpbsud adds the s8 x u8 dot products
   of an A tile (16 activation rows x 64 columns, row-major: the activations as they are) and a B
   tile (64 weights x 16 weight rows in 4-byte groups: exactly the unpacked block, [k/4][32][4],
   16 of its rows a tile at a stride of 128 bytes) into 16 x 16 int32 sums. Four tiles of sums (32
   activation rows x the block's 32 weight rows) stay in the unit over all of k: about 8 times the
   multiply rate of vpdpbusd. The int32 sums and the epilogue are the reference's, so the bits are
   too. The OS grants the tile state per process (arch_prctl); each thread loads the tile
   configuration and releases it when its items are done. Inline assembly: compilers' tile
   intrinsics differ, the instructions do not. BITNET_CPU_AMX=0 turns the path off (tests, A/B). */
#if defined(__linux__) && !defined(BITNET_NO_AMX) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define BITNET__AMX 1
#define BITNET__KERN_AMX __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))
static int bitnet__amx_state; /* 0: not asked yet, 1: usable, -1: not */
static int bitnet__amx_usable(void) {
    int s = __atomic_load_n(&bitnet__amx_state, __ATOMIC_ACQUIRE);
    if (!s) {
        unsigned a, b, c, d;
        long r = -1;
        if (bitnet_cpu_has_isa(BITNET_ISA_AVX512) && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1) &&
            bitnet__x86_xcr0_has(0x60000)) /* AMX-TILE, AMX-INT8; the OS saves the tile state */
            /* arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): the tile data for this process */
            __asm__ volatile("syscall" : "=a"(r) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
        s = r == 0 ? 1 : -1;
        __atomic_store_n(&bitnet__amx_state, s, __ATOMIC_RELEASE);
    }
    return s > 0;
}
/* Palette 1, all 8 tiles 16 rows x 64 bytes: tmm0-3 the sums, tmm4-5 activations, tmm6-7 weights. */
BITNET__KERN_AMX static void bitnet__amx_begin(void) {
    unsigned char cfg[64];
    int i;
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    for (i = 0; i < 8; i++) cfg[16 + 2 * i] = 64, cfg[48 + i] = 16;
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}
BITNET__KERN_AMX static void bitnet__amx_end(void) { __asm__ volatile("tilerelease" ::: "memory"); }

/* bitnet__epilogue of activation row i of a 32 x 32 block of sums (its two halves under m0, m1). */
BITNET__KERN_AMX BITNET__AINLINE void bitnet__amx_epi(const int32_t *sums, size_t i, int32_t corr, float a_scale, float ws,
                                                    __mmask16 m0, __mmask16 m1, float *out) {
    bitnet__pf_epi_avx512(_mm512_loadu_si512((const void *)(sums + 32 * i)), corr, a_scale, ws, m0, out);
    if (m1) bitnet__pf_epi_avx512(_mm512_loadu_si512((const void *)(sums + 32 * i + 16)), corr, a_scale, ws, m1, out + 16);
}
/* Activation rows [0, m) (a: row-major, m x k) against one unpacked block of nr weight rows, 32 at a
   time. The epilogue of each 32 rows runs one row per 64 columns inside the next 32 rows' tile loop,
   so the vector unit's divisions overlap the tile unit's work (run after the loop, the epilogue took
   a fifth of the time; overlapped, the GEMM is 6% faster: BENCHMARKS.md).
   scratch: 32 * k bytes (the last rows, zero-padded to 32), then two 32 x 32 int32 blocks of sums.
   The packed weights of the next blocks (next, next_bytes) are prefetched along the way. */
BITNET__KERN_AMX static void bitnet__pf_block_amx(const uint8_t *buf, size_t k, const int8_t *a, const float *a_scale,
                                                  const int32_t *a_sum, size_t m, float ws, size_t nr, float *out, size_t n,
                                                  uint8_t *scratch, const uint8_t *next, size_t next_bytes) {
    const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xffff : nr > 16 ? (1u << (nr - 16)) - 1 : 0);
    int32_t *sums[2];
    const size_t chunks = (m + 31) / 32, pf_per = (next_bytes / 64 + chunks - 1) / chunks;
    size_t t, c, i, pf = 0, pt = 0, pn = 0, pe = 0; /* the previous 32 rows: first row, count, done */
    sums[0] = (int32_t *)(void *)(scratch + 32 * k), sums[1] = sums[0] + 32 * 32;
    for (t = 0; t < m; t += 32) {
        const size_t mt = BITNET__MIN((size_t)32, m - t);
        const int32_t *ps = sums[(t / 32 + 1) & 1];
        int32_t *cs = sums[(t / 32) & 1];
        const int8_t *at = a + t * k;
        if (mt < 32) {
            memcpy(scratch, at, mt * k);
            memset(scratch + mt * k, 0, (32 - mt) * k);
            at = (const int8_t *)scratch;
        }
        for (i = 0; i < pf_per && pf < next_bytes; i++, pf += 64) _mm_prefetch((const char *)(next + pf), _MM_HINT_T1);
        __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::: "memory");
        for (c = 0; c < k; c += 64) {
            const uint8_t *b = buf + c * 32; /* 4-column group c / 4, 128 bytes a group */
            __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\t"
                             "tileloadd (%2,%1,1), %%tmm5\n\t"
                             "tileloadd (%3,%4,1), %%tmm6\n\t"
                             "tileloadd (%5,%4,1), %%tmm7\n\t"
                             "tdpbsud %%tmm6, %%tmm4, %%tmm0\n\t"
                             "tdpbsud %%tmm7, %%tmm4, %%tmm1\n\t"
                             "tdpbsud %%tmm6, %%tmm5, %%tmm2\n\t"
                             "tdpbsud %%tmm7, %%tmm5, %%tmm3"
                             ::"r"(at + c), "r"((long)k), "r"(at + 16 * k + c), "r"(b), "r"(128L), "r"(b + 64)
                             : "memory");
            if (pe < pn) bitnet__amx_epi(ps, pe, a_sum[pt + pe], a_scale[pt + pe], ws, m0, m1, out + (pt + pe) * n), pe++;
        }
        for (; pe < pn; pe++) bitnet__amx_epi(ps, pe, a_sum[pt + pe], a_scale[pt + pe], ws, m0, m1, out + (pt + pe) * n);
        __asm__ volatile("tilestored %%tmm0, (%0,%1,1)\n\t"
                         "tilestored %%tmm1, (%2,%1,1)\n\t"
                         "tilestored %%tmm2, (%3,%1,1)\n\t"
                         "tilestored %%tmm3, (%4,%1,1)"
                         ::"r"(cs), "r"(128L), "r"(cs + 16), "r"(cs + 512), "r"(cs + 528)
                         : "memory");
        pt = t, pn = mt, pe = 0;
    }
    for (; pe < pn; pe++)
        bitnet__amx_epi(sums[(pt / 32) & 1], pe, a_sum[pt + pe], a_scale[pt + pe], ws, m0, m1, out + (pt + pe) * n);
}
#endif

/* AVX2, I2_S: (byte >> s) & 3 for s = 6, 4, 2, 0 gives the codes of 4 runs of 32 contiguous
   weights; vpmaddubsw (u8 codes x s8 activations) pairs stay within int16 (4 * 2 * 2 * 128). */
#define BITNET__ZERO256(r, t) __m256i acc##r##t = _mm256_setzero_si256();
#define BITNET__MADD256(x, p) _mm256_maddubs_epi16(x, _mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define BITNET__TOKI2(r, t) \
    if (T > t) { \
        const int8_t *at = a + (t) * k + c; \
        const __m256i p = _mm256_add_epi16(_mm256_add_epi16(BITNET__MADD256(x0, at), BITNET__MADD256(x1, at + 32)), \
                                           _mm256_add_epi16(BITNET__MADD256(x2, at + 64), BITNET__MADD256(x3, at + 96))); \
        acc##r##t = _mm256_add_epi32(acc##r##t, _mm256_madd_epi16(p, ones)); \
    }
#define BITNET__ROWI2(r) \
    { \
        const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(w##r + c / 4)); \
        const __m256i x0 = _mm256_and_si256(_mm256_srli_epi16(b, 6), m3); \
        const __m256i x1 = _mm256_and_si256(_mm256_srli_epi16(b, 4), m3); \
        const __m256i x2 = _mm256_and_si256(_mm256_srli_epi16(b, 2), m3); \
        const __m256i x3 = _mm256_and_si256(b, m3); \
        BITNET__TOKI2(r, 0) BITNET__TOKI2(r, 1) \
    }
BITNET__KERN_AVX2 BITNET__AINLINE void bitnet__i2s_tile_avx2_t(const uint8_t *const *w, size_t k, const int8_t *a,
                                                               const bitnet__epi *e, float *res, const int T) {
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const size_t pf = bitnet__pf_lead(w);
    size_t c;
    BITNET__REP4(BITNET__ZERO256, 0) BITNET__REP4(BITNET__ZERO256, 1)
    for (c = 0; c < k; c += 128) {
        if ((c & 255) == 0) BITNET__PREFETCH4(c / 4)
        BITNET__ROWI2(0) BITNET__ROWI2(1) BITNET__ROWI2(2) BITNET__ROWI2(3)
    }
    bitnet__epi4_x86(bitnet__hsum4_avx2(acc00, acc10, acc20, acc30), e->a_sum[0], e, 0, res);
    if (T > 1) bitnet__epi4_x86(bitnet__hsum4_avx2(acc01, acc11, acc21, acc31), e->a_sum[1], e, 1, res);
}
#undef BITNET__ROWI2
#undef BITNET__TOKI2
#undef BITNET__MADD256

/* AVX2, int8 weights: sign-extend to int16 and vpmaddwd (exact; vpmaddubsw could saturate). */
#define BITNET__CVT16(p) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define BITNET__ROWQ8(r) \
    { \
        const __m256i v0 = BITNET__CVT16(w##r + c), v1 = BITNET__CVT16(w##r + c + 16); \
        acc##r##0 = _mm256_add_epi32(acc##r##0, _mm256_add_epi32(_mm256_madd_epi16(v0, a00), _mm256_madd_epi16(v1, a01))); \
        if (T > 1) acc##r##1 = _mm256_add_epi32(acc##r##1, _mm256_add_epi32(_mm256_madd_epi16(v0, a10), _mm256_madd_epi16(v1, a11))); \
    }
BITNET__KERN_AVX2 BITNET__AINLINE void bitnet__q8_tile_avx2_t(const uint8_t *const *w, size_t k, const int8_t *a,
                                                              const bitnet__epi *e, float *res, const int T) {
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const size_t pf = bitnet__pf_lead(w);
    int32_t tail[8];
    size_t c;
    int t, r;
    BITNET__REP4(BITNET__ZERO256, 0) BITNET__REP4(BITNET__ZERO256, 1)
    for (c = 0; c + 32 <= k; c += 32) {
        const __m256i a00 = BITNET__CVT16(a + c), a01 = BITNET__CVT16(a + c + 16);
        if ((c & 63) == 0) BITNET__PREFETCH4(c)
        const __m256i a10 = T > 1 ? BITNET__CVT16(a + k + c) : a00, a11 = T > 1 ? BITNET__CVT16(a + k + c + 16) : a01;
        BITNET__ROWQ8(0) BITNET__ROWQ8(1) BITNET__ROWQ8(2) BITNET__ROWQ8(3)
    }
    for (t = 0; t < T; t++)
        for (r = 0; r < 4; r++) {
            const int8_t *wr = (const int8_t *)w[r], *at = a + (size_t)t * k;
            size_t i;
            int32_t s = 0;
            for (i = c; i < k; i++) s += wr[i] * at[i];
            tail[4 * t + r] = s;
        }
    bitnet__epi4_x86(_mm_add_epi32(bitnet__hsum4_avx2(acc00, acc10, acc20, acc30), _mm_loadu_si128((const __m128i *)(void *)tail)),
                     0, e, 0, res);
    if (T > 1)
        bitnet__epi4_x86(_mm_add_epi32(bitnet__hsum4_avx2(acc01, acc11, acc21, acc31), _mm_loadu_si128((const __m128i *)(void *)(tail + 4))),
                         0, e, 1, res);
}
#undef BITNET__ROWQ8
#undef BITNET__CVT16
#undef BITNET__ZERO256
#undef BITNET__PREFETCH4

BITNET__KERN_AVX2 static void bitnet__i2s_tile_avx2(const uint8_t *const *w, size_t k, const int8_t *a,
                                                    const bitnet__epi *e, int nt, float *res) {
    if (nt == 1) bitnet__i2s_tile_avx2_t(w, k, a, e, res, 1);
    else bitnet__i2s_tile_avx2_t(w, k, a, e, res, 2);
}
BITNET__KERN_AVX2 static void bitnet__q8_tile_avx2(const uint8_t *const *w, size_t k, const int8_t *a,
                                                   const bitnet__epi *e, int nt, float *res) {
    if (nt == 1) bitnet__q8_tile_avx2_t(w, k, a, e, res, 1);
    else bitnet__q8_tile_avx2_t(w, k, a, e, res, 2);
}
#endif /* BITNET__X86_SIMD */

#if defined(BITNET__NEON)
/* bitnet__epilogue on 4 weight rows of activation row t (vcvtq rounds to nearest even). */
BITNET__AINLINE void bitnet__epi4_neon(int32x4_t acc, int32_t corr, const bitnet__epi *e, int t, float *res) {
    const float32x4_t f = vcvtq_f32_s32(vsubq_s32(acc, vdupq_n_s32(corr)));
    vst1q_f32(res + 4 * t, vmulq_f32(vdivq_f32(f, vdupq_n_f32(e->a_scale[t])), vld1q_f32(e->w_scale)));
}
BITNET__AINLINE int32x4_t bitnet__hsum4_neon(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d) {
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d));
}

/* NEON, I2_S: codes by shift and mask, vmull/vmlal into int16 (8 products of <= 256 per lane),
   then pairwise-accumulated into int32. */
#define BITNET__ZERON(r, t) int32x4_t acc##r##t = vdupq_n_s32(0);
#define BITNET__MLAL(p, x, v) p = vmlal_s8(p, vget_low_s8(x), vget_low_s8(v)); p = vmlal_high_s8(p, x, v);
#define BITNET__TOKN(r, t) \
    if (T > t) { \
        const int8_t *at = a + (t) * k + c + h; \
        const int8x16_t v0 = vld1q_s8(at), v1 = vld1q_s8(at + 32), v2 = vld1q_s8(at + 64), v3 = vld1q_s8(at + 96); \
        int16x8_t p = vmull_s8(vget_low_s8(x0), vget_low_s8(v0)); \
        p = vmlal_high_s8(p, x0, v0); \
        BITNET__MLAL(p, x1, v1) BITNET__MLAL(p, x2, v2) BITNET__MLAL(p, x3, v3) \
        acc##r##t = vpadalq_s16(acc##r##t, p); \
    }
#define BITNET__ROWN(r) \
    { \
        const uint8x16_t b = vld1q_u8(w##r + c / 4 + h); \
        const int8x16_t x0 = vreinterpretq_s8_u8(vshrq_n_u8(b, 6)); \
        const int8x16_t x1 = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 4), m3)); \
        const int8x16_t x2 = vreinterpretq_s8_u8(vandq_u8(vshrq_n_u8(b, 2), m3)); \
        const int8x16_t x3 = vreinterpretq_s8_u8(vandq_u8(b, m3)); \
        BITNET__TOKN(r, 0) BITNET__TOKN(r, 1) \
    }
BITNET__AINLINE void bitnet__i2s_tile_neon_t(const uint8_t *const *w, size_t k, const int8_t *a, const bitnet__epi *e,
                                             float *res, const int T) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    size_t c, h;
    BITNET__REP4(BITNET__ZERON, 0) BITNET__REP4(BITNET__ZERON, 1)
    for (c = 0; c < k; c += 128)
        for (h = 0; h < 32; h += 16) {
            BITNET__ROWN(0) BITNET__ROWN(1) BITNET__ROWN(2) BITNET__ROWN(3)
        }
    bitnet__epi4_neon(bitnet__hsum4_neon(acc00, acc10, acc20, acc30), e->a_sum[0], e, 0, res);
    if (T > 1) bitnet__epi4_neon(bitnet__hsum4_neon(acc01, acc11, acc21, acc31), e->a_sum[1], e, 1, res);
}
#undef BITNET__ROWN
#undef BITNET__TOKN
#undef BITNET__MLAL

/* NEON, int8 weights: one product per int16 lane (128 * 128 does not fit twice), then vpadal. */
#define BITNET__ROWNQ(r) \
    { \
        const int8x16_t x = vld1q_s8((const int8_t *)w##r + c); \
        acc##r##0 = vpadalq_s16(vpadalq_s16(acc##r##0, vmull_s8(vget_low_s8(x), vget_low_s8(v0))), vmull_high_s8(x, v0)); \
        if (T > 1) acc##r##1 = vpadalq_s16(vpadalq_s16(acc##r##1, vmull_s8(vget_low_s8(x), vget_low_s8(v1))), vmull_high_s8(x, v1)); \
    }
BITNET__AINLINE void bitnet__q8_tile_neon_t(const uint8_t *const *w, size_t k, const int8_t *a, const bitnet__epi *e,
                                            float *res, const int T) {
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    int32_t tail[8];
    size_t c;
    int t, r;
    BITNET__REP4(BITNET__ZERON, 0) BITNET__REP4(BITNET__ZERON, 1)
    for (c = 0; c + 16 <= k; c += 16) {
        const int8x16_t v0 = vld1q_s8(a + c), v1 = T > 1 ? vld1q_s8(a + k + c) : v0;
        BITNET__ROWNQ(0) BITNET__ROWNQ(1) BITNET__ROWNQ(2) BITNET__ROWNQ(3)
    }
    for (t = 0; t < T; t++)
        for (r = 0; r < 4; r++) {
            const int8_t *wr = (const int8_t *)w[r], *at = a + (size_t)t * k;
            size_t i;
            int32_t s = 0;
            for (i = c; i < k; i++) s += wr[i] * at[i];
            tail[4 * t + r] = s;
        }
    bitnet__epi4_neon(vaddq_s32(bitnet__hsum4_neon(acc00, acc10, acc20, acc30), vld1q_s32(tail)), 0, e, 0, res);
    if (T > 1) bitnet__epi4_neon(vaddq_s32(bitnet__hsum4_neon(acc01, acc11, acc21, acc31), vld1q_s32(tail + 4)), 0, e, 1, res);
}
#undef BITNET__ROWNQ
#undef BITNET__ZERON

static void bitnet__i2s_tile_neon(const uint8_t *const *w, size_t k, const int8_t *a, const bitnet__epi *e, int nt,
                                  float *res) {
    if (nt == 1) bitnet__i2s_tile_neon_t(w, k, a, e, res, 1);
    else bitnet__i2s_tile_neon_t(w, k, a, e, res, 2);
}
static void bitnet__q8_tile_neon(const uint8_t *const *w, size_t k, const int8_t *a, const bitnet__epi *e, int nt,
                                 float *res) {
    if (nt == 1) bitnet__q8_tile_neon_t(w, k, a, e, res, 1);
    else bitnet__q8_tile_neon_t(w, k, a, e, res, 2);
}
#endif /* BITNET__NEON */

/* ---- the GEMM driver: work items of (row block x token block), claimed dynamically ---------- */
typedef struct bitnet__gemm_job {
    int q8;                          /* 0: I2_S weights, 1: int8 weights */
    bitnet__tile_fn tile;            /* NULL: the scalar reference */
    int tile_t;                      /* activation rows per tile */
    int amx;                         /* the caller's choice (bitnet__gemm_amx): the prefill path on AMX tiles */
    int pf;                          /* the prefill path, items of BITNET__PF_ROWS rows: 1 AVX-512, 2 AMX */
    int8_t *ap;                      /* pf: the activations packed by bitnet__pf_pack */
    size_t pf_bytes;                 /* pf: each thread's unpacked block and partial sums */
    const uint8_t *w;
    size_t row_bytes;
    size_t n, k, m;
    const int8_t *a;
    const float *a_scale;
    const int32_t *a_sum;
    float w_scale;                   /* I2_S: per tensor */
    const float *w_scales;           /* q8: per row */
    float *out;
    size_t rows_per_item, toks_per_item, tok_items, items;
    size_t next;                     /* atomic: the next unclaimed item */
} bitnet__gemm_job;

static void bitnet__gemm_block(const bitnet__gemm_job *j, size_t r0, size_t r1, size_t t0, size_t t1) {
    float res[4 * BITNET__TILE_T_MAX];
    size_t t, r;
    if (!j->tile) {
        if (j->q8)
            bitnet__gemm_q8_scalar((const int8_t *)j->w, r0, r1, j->k, j->a + t0 * j->k, j->a_scale + t0, t1 - t0,
                                   j->w_scales, j->out + t0 * j->n, j->n);
        else
            bitnet__gemm_i2s_scalar(j->w, r0, r1, j->k, j->a + t0 * j->k, j->a_scale + t0, j->a_sum + t0, t1 - t0,
                                    j->w_scale, j->out + t0 * j->n, j->n);
        return;
    }
    for (t = t0; t < t1; t += (size_t)j->tile_t) {
        const int nt = (int)BITNET__MIN((size_t)j->tile_t, t1 - t);
        bitnet__epi e;
        e.a_scale = j->a_scale + t;
        e.a_sum = j->a_sum + t;
        for (r = r0; r < r1; r += 4) {
            const uint8_t *wr[4];
            const int nr = (int)BITNET__MIN((size_t)4, r1 - r);
            int i, q;
            for (i = 0; i < 4; i++) {
                const size_t ri = r + (size_t)(i < nr ? i : nr - 1);
                wr[i] = j->w + ri * j->row_bytes;
                e.w_scale[i] = j->q8 ? j->w_scales[ri] : j->w_scale;
            }
            j->tile(wr, j->k, j->a + t * j->k, &e, nt, res);
            for (q = 0; q < nt; q++) memcpy(j->out + (t + (size_t)q) * j->n + r, res + 4 * q, (size_t)nr * sizeof(float));
        }
    }
}

static void bitnet__gemm_task(void *arg, int ith, int nth) {
    bitnet__gemm_job *j = (bitnet__gemm_job *)arg;
    uint8_t *buf = NULL;
    size_t it;
    (void)ith;
    (void)nth;
#if defined(BITNET__X86_SIMD)
    /* the unpacked block of this thread; without it the thread uses the tiles (same bits) */
    if (j->pf) buf = (uint8_t *)bitnet__malloc(j->pf_bytes);
#if defined(BITNET__AMX)
    if (buf && j->pf == 2) bitnet__amx_begin();
#endif
#endif
    for (;;) {
#if defined(BITNET__POOL)
        it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
#else
        it = j->next++;
#endif
        if (it >= j->items) break;
#if defined(BITNET__X86_SIMD)
        if (buf) {
            const size_t r0 = it * BITNET__PF_ROWS, nr = BITNET__MIN((size_t)BITNET__PF_ROWS, j->n - r0);
            const size_t r2 = BITNET__MIN(j->n, r0 + (size_t)(1 + BITNET__PF_AHEAD) * BITNET__PF_ROWS);
            bitnet__i2s_unpack32_avx512(j->w + r0 * j->row_bytes, j->row_bytes, nr, j->k, buf);
#if defined(BITNET__AMX)
            if (j->pf == 2) {
                bitnet__pf_block_amx(buf, j->k, j->a, j->a_scale, j->a_sum, j->m, j->w_scale, nr, j->out + r0, j->n,
                                     buf + BITNET__PF_ROWS * j->k, j->w + (r0 + nr) * j->row_bytes, (r2 - r0 - nr) * j->row_bytes);
                continue;
            }
#endif
            bitnet__pf_block_avx512(buf, j->k, j->ap, j->a_scale, j->a_sum, j->m, j->w_scale, nr, j->out + r0, j->n,
                                    (int32_t *)(void *)(buf + BITNET__PF_ROWS * j->k), j->w + (r0 + nr) * j->row_bytes,
                                    (r2 - r0 - nr) * j->row_bytes);
            continue;
        }
#endif
        {
            const size_t ri = it / j->tok_items, ti = it % j->tok_items;
            const size_t r0 = ri * j->rows_per_item, t0 = ti * j->toks_per_item;
            bitnet__gemm_block(j, r0, BITNET__MIN(j->n, r0 + j->rows_per_item), t0, BITNET__MIN(j->m, t0 + j->toks_per_item));
        }
    }
#if defined(BITNET__AMX)
    if (buf && j->pf == 2) bitnet__amx_end();
#endif
    bitnet__free(buf);
}

/* Whether an I2_S GEMM takes the AMX prefill path (AVX-512 active, enough activation rows, the tile
   unit granted, BITNET_CPU_AMX not 0). */
static int bitnet__gemm_amx(const bitnet__gemm_job *j) {
#if defined(BITNET__AMX)
    return bitnet_cpu_isa() == BITNET_ISA_AVX512 && !j->q8 && j->m >= BITNET__PF_MIN_M && !bitnet__env_off("BITNET_CPU_AMX") &&
           bitnet__amx_usable();
#else
    (void)j;
    return 0;
#endif
}
BITNET_API int bitnet_cpu_has_amx(void) {
#if defined(BITNET__AMX)
    return bitnet__amx_usable();
#else
    return 0;
#endif
}

/* Picks the tile for the active ISA, cuts the work and runs it on the pool. Row blocks hold
   about 128 KB of weights (they stay in L2 while every token block passes over them) and there
   are about 8 per thread for balance; token blocks are only cut when row blocks are too few. */
static void bitnet__gemm_run(bitnet__gemm_job *j) {
    const size_t nth = (size_t)bitnet_num_threads();
    size_t rows, row_items, tok_tiles, cap;
    const double macs = (double)j->n * (double)j->k * (double)j->m;
    j->tile = NULL;
    j->tile_t = 8; /* the scalar reference's activation block */
    switch (bitnet_cpu_isa()) {
#if defined(BITNET__X86_SIMD)
    case BITNET_ISA_AVX512:
        j->tile = j->q8 ? bitnet__q8_tile_avx512 : bitnet__i2s_tile_avx512;
        j->tile_t = BITNET__AVX512_TILE_T;
        break;
    case BITNET_ISA_AVX2:
        j->tile = j->q8 ? bitnet__q8_tile_avx2 : bitnet__i2s_tile_avx2;
        j->tile_t = 2;
        break;
#endif
#if defined(BITNET__NEON)
    case BITNET_ISA_NEON:
        j->tile = j->q8 ? bitnet__q8_tile_neon : bitnet__i2s_tile_neon;
        j->tile_t = 2;
        break;
#endif
    default: break;
    }
    cap = BITNET__MAX((size_t)4, ((size_t)131072 / j->row_bytes) & ~(size_t)3);
    rows = (j->n / (8 * nth) + 3) & ~(size_t)3;
    rows = BITNET__MIN(BITNET__MAX(rows, (size_t)4), cap);
    row_items = (j->n + rows - 1) / rows;
    tok_tiles = (j->m + (size_t)j->tile_t - 1) / (size_t)j->tile_t;
    j->tok_items = 1;
    if (row_items < 4 * nth) j->tok_items = BITNET__MIN(tok_tiles, (4 * nth + row_items - 1) / row_items);
    j->toks_per_item = (tok_tiles + j->tok_items - 1) / j->tok_items * (size_t)j->tile_t;
    j->tok_items = (j->m + j->toks_per_item - 1) / j->toks_per_item;
    j->rows_per_item = rows;
    j->items = row_items * j->tok_items;
    j->next = 0;
    j->pf = 0;
#if defined(BITNET__X86_SIMD)
    if (bitnet_cpu_isa() == BITNET_ISA_AVX512 && !j->q8 && j->m >= BITNET__PF_MIN_M) {
        /* one item per 32 weight rows, all activation rows; a failed allocation here leaves the
           tiles, one in a thread makes that thread run its items with the tiles (same bits). AMX
           reads the activations as they are; each thread's buffer holds the unpacked block, the
           last activation rows padded to 32 and two 32 x 32 blocks of sums. */
        size_t ap_bytes, acc_bytes;
#if defined(BITNET__AMX)
        if (j->amx && bitnet__mul_size(j->k, 2 * BITNET__PF_ROWS, &j->pf_bytes) &&
            bitnet__add_size(j->pf_bytes, 2 * 32 * 32 * 4, &j->pf_bytes))
            j->pf = 2;
        else
#endif
        if (bitnet__mul_size(j->m + BITNET__PF_T, j->k, &ap_bytes) && bitnet__mul_size(j->m, sizeof(int32_t), &acc_bytes) &&
            bitnet__add_size(acc_bytes, j->k, &j->pf_bytes) && bitnet__mul_size(j->pf_bytes, BITNET__PF_ROWS, &j->pf_bytes) &&
            (j->ap = (int8_t *)bitnet__malloc(ap_bytes)) != NULL) {
            bitnet__pf_pack_job pk;
            pk.a = j->a;
            pk.m = j->m;
            pk.k = j->k;
            pk.ap = j->ap;
            if (nth > 1) bitnet__parallel(bitnet__pf_pack, &pk);
            else bitnet__pf_pack(&pk, 0, 1);
            j->pf = 1;
        }
        if (j->pf) {
            j->rows_per_item = BITNET__PF_ROWS;
            j->toks_per_item = j->m;
            j->tok_items = 1;
            j->items = (j->n + BITNET__PF_ROWS - 1) / BITNET__PF_ROWS;
        }
    }
#endif
    if (nth > 1 && macs >= 65536.0) bitnet__parallel(bitnet__gemm_task, j);
    else bitnet__gemm_task(j, 0, 1);
    bitnet__free(j->ap);
}

BITNET_API bitnet_result bitnet_gemm_i2s(const void *w, size_t w_bytes, size_t n, size_t k, const int8_t *a,
                                         const float *a_scale, const int32_t *a_sum, size_t m, float *out) {
    bitnet__gemm_job j;
    BITNET__TRY(bitnet__gemm_i2s_check(w, w_bytes, n, k, a, a_scale, a_sum, m, out));
    memset(&j, 0, sizeof j);
    j.w = (const uint8_t *)w;
    j.row_bytes = k / 4;
    j.n = n;
    j.k = k;
    j.m = m;
    j.a = a;
    j.a_scale = a_scale;
    j.a_sum = a_sum;
    memcpy(&j.w_scale, (const uint8_t *)w + n * k / 4, 4);
    j.out = out;
    j.amx = bitnet__gemm_amx(&j); /* once: the statistic names the path that runs */
    if (j.amx) BITNET__KSTAT("cpu_gemm_i2s_amx", bitnet__gemm_run(&j));
    else BITNET__KSTAT_ISA("cpu_gemm_i2s", bitnet_cpu_isa(), bitnet__gemm_run(&j));
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gemm_q8(const int8_t *w, const float *w_scale, size_t n, size_t k, const int8_t *a,
                                        const float *a_scale, const int32_t *a_sum, size_t m, float *out) {
    bitnet__gemm_job j;
    size_t t;
    if (!w || !w_scale || !a || !a_scale || !a_sum || !out)
        return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gemm_q8: w, w_scale, a, a_scale, a_sum and out must not be NULL");
    if (n == 0 || k == 0 || m == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_q8: m=%zu n=%zu k=%zu", m, n, k);
    if (k > BITNET__Q8_MAX_K)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_q8: k=%zu is above %zu (int32 accumulation)", k, BITNET__Q8_MAX_K);
    if (!bitnet__mul_size(n, k, &t) || !bitnet__mul_size(m, k, &t) || !bitnet__mul_size(m, n, &t))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemm_q8: m=%zu n=%zu k=%zu overflows", m, n, k);
    memset(&j, 0, sizeof j);
    j.q8 = 1;
    j.w = (const uint8_t *)w;
    j.row_bytes = k;
    j.n = n;
    j.k = k;
    j.m = m;
    j.a = a;
    j.a_scale = a_scale;
    j.a_sum = a_sum;
    j.w_scales = w_scale;
    j.out = out;
    BITNET__KSTAT_ISA("cpu_gemm_q8", bitnet_cpu_isa(), bitnet__gemm_run(&j));
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

static int bitnet__str_is(bitnet_gguf_str s, const char *lit) { return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0; }

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

/* Slot for name in a table whose entries name(i) are the NUL-terminated names: either the slot
   holding it or the empty slot where it would go. */
static size_t bitnet__gguf_slot(const uint32_t *tab, size_t cap, const char *name, size_t len,
                                const bitnet__gguf_kv *kv, const bitnet_tensor_info *ti) {
    size_t i = (size_t)bitnet__fnv(BITNET__FNV_INIT, name, len) & (cap - 1);
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
    const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)t);
    return tt ? tt->name : "?";
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
    const bitnet__ttype *tt;
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
    tt = bitnet__ttype_of((uint32_t)type);
    if (!tt) return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "tensor type %d (%s) is not one this library reads", (int)type, bitnet__ggml_type_name((uint32_t)type));
    if (ne[0] % tt->blk)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s row of %llu is not a multiple of %u", tt->name, (unsigned long long)ne[0], tt->blk);
    if (n / tt->blk > (UINT64_MAX - 32) / tt->bytes) return bitnet__err(BITNET_ERR_OVERFLOW, "%s byte size overflows", tt->name);
    *out = n / tt->blk * tt->bytes + (type == BITNET_TENSOR_I2_S ? 32 : 0); /* I2_S: the 32-byte tail holding the scale */
    return BITNET_OK;
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
        if (!bitnet__ttype_of(type)) {
            char types[160];
            return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor '%s' has type %u (%s), not %s%s", ti->name, type,
                               bitnet__ggml_type_name(type), bitnet__ttype_list(bitnet__ttype_any, 0, types, sizeof types),
                               type == 38 || type == 39 ? " (bitnet.cpp lays TL1 / TL2 out for kernels it generates per model: "
                                                          "the f32 or f16 GGUF its converter wrote before llama-quantize loads)" : "");
        }
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

/* A whole file, mapped (no_mmap 0 and mmap works) or read into memory: *map or *owned is set, the
   other NULL. Released by bitnet__file_unmap. The GGUF reader and >>convert's safetensors use it. */
static bitnet_result bitnet__file_map(const char *path, int no_mmap, void **map, void **owned, size_t *size_out) {
    FILE *f;
    uint64_t fsize;
    size_t size, got = 0;
    *map = *owned = NULL;
    *size_out = 0;
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
    if (!no_mmap && size > 0) {
        *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (*map == MAP_FAILED) {
            bitnet__log(BITNET_LOG_INFO, "mmap of '%s' failed (%s); reading it into memory", path, strerror(errno));
            *map = NULL;
        }
    }
#else
    (void)no_mmap;
#endif
    if (!*map) {
        *owned = bitnet__malloc(size ? size : 1);
        if (!*owned) {
            fclose(f);
            return bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read '%s'", size, path);
        }
        while (got < size) {
            size_t n = fread((char *)*owned + got, 1, size - got, f);
            if (n == 0) break;
            got += n;
        }
        if (got != size) {
            int e = ferror(f) ? errno : 0;
            fclose(f);
            bitnet__free(*owned);
            *owned = NULL;
            return bitnet__err(BITNET_ERR_IO, "reading '%s' stopped after %zu of %zu bytes%s%s", path, got, size,
                               e ? ": " : "", e ? strerror(e) : "");
        }
    }
    fclose(f);
    *size_out = size;
    return BITNET_OK;
}

static void bitnet__file_unmap(void *map, void *owned, size_t size) {
#if !defined(_WIN32) && !defined(BITNET_NO_MMAP)
    if (map) munmap(map, size);
#else
    (void)map, (void)size;
#endif
    bitnet__free(owned);
}

BITNET_API bitnet_result bitnet_gguf_open_ex(const char *path, unsigned flags, bitnet_gguf **out) {
    size_t size;
    void *map, *owned;
    bitnet_gguf *g = NULL;
    bitnet_result r;
    BITNET__CHECK_PTR(path);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (flags & ~BITNET_GGUF_NO_MMAP) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gguf_open_ex: unknown flags 0x%x", flags);
    BITNET__TRY(bitnet__file_map(path, (flags & BITNET_GGUF_NO_MMAP) != 0, &map, &owned, &size));
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
    bitnet__file_unmap(map, owned, size);
    return r;
}

BITNET_API void bitnet_gguf_close(bitnet_gguf *g) {
    if (!g) return;
    bitnet__file_unmap(g->map, g->owned, g->size);
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
/* The tensor called name, or NULL (no error: for optional tensors). */
static const bitnet_tensor_info *bitnet__gguf_tensor_named(const bitnet_gguf *g, const char *name) {
    size_t slot = bitnet__gguf_slot(g->t_hash, g->t_cap, name, strlen(name), NULL, g->tensors);
    return g->t_hash[slot] ? &g->tensors[g->t_hash[slot] - 1] : NULL;
}
BITNET_API bitnet_result bitnet_gguf_find_tensor(const bitnet_gguf *g, const char *name, bitnet_tensor_info *out) {
    const bitnet_tensor_info *t;
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(name);
    BITNET__CHECK_PTR(out);
    if (!(t = bitnet__gguf_tensor_named(g, name))) return bitnet__err(BITNET_ERR_MISSING_TENSOR, "GGUF: tensor '%s' is missing", name);
    *out = *t;
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
/* The types each role accepts: ternary matrices come as I2_S, as llama.cpp's TQ1_0 / TQ2_0 (made
   I2_S at load), or as float latent weights that the loader quantizes; the embedding and output
   also in llama.cpp's block types (made fp16: the embedding's rows when read, output at load); the
   rest are float. */
#define BITNET__GGUF_TERNARY 0
#define BITNET__GGUF_FLOAT 1
#define BITNET__GGUF_EMBD 2
static int bitnet__gguf_role_ok(int role, bitnet_tensor_type t) {
    if (t == BITNET_TENSOR_F32 || t == BITNET_TENSOR_F16 || t == BITNET_TENSOR_BF16) return 1;
    if (role == BITNET__GGUF_TERNARY) return bitnet__ternary_type(t);
    return role == BITNET__GGUF_EMBD && bitnet__ttype_of((uint32_t)t) && !bitnet__ternary_type(t);
}
/* A tensor of this role and shape [ne0, ne1] (ne1 = 1 for vectors); optional ones may be absent. */
static bitnet_result bitnet__gguf_want(const bitnet_gguf *g, const char *name, int role, uint64_t ne0, uint64_t ne1,
                                       int optional) {
    const bitnet_tensor_info *tp = bitnet__gguf_tensor_named(g, name);
    bitnet_tensor_info t;
    if (!tp) return optional ? BITNET_OK : bitnet__err(BITNET_ERR_MISSING_TENSOR, "GGUF: tensor '%s' is missing", name);
    t = *tp;
    if (!bitnet__gguf_role_ok(role, t.type)) {
        char types[160];
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor '%s' is %s, a BitNet model needs %s here", name,
                           bitnet_tensor_type_name(t.type), bitnet__ttype_list(bitnet__gguf_role_ok, role, types, sizeof types));
    }
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

/* A layer's tensors in bitnet.cpp's GGUF ("blk.<l>.<name>.weight"): the role, the shape [ne0, ne1]
   in codes (0: 1, 1: dim, 2: kv_dim, 3: ffn; a matrix has ne1 rows of ne0), whether it is a sub-norm
   (which "llama" files lack) and the loader's field. The check (>>gguf) and the loader (>>model) both
   read it. */
static const struct bitnet__layer_part {
    const char *name;
    int role, ne0, ne1, sub;
    size_t field; /* offsetof bitnet_layer_weights */
} bitnet__layer_parts[] = {
    {"attn_norm", BITNET__GGUF_FLOAT, 1, 0, 0, offsetof(bitnet_layer_weights, attn_norm)},
    {"attn_q", BITNET__GGUF_TERNARY, 1, 1, 0, offsetof(bitnet_layer_weights, wq)},
    {"attn_k", BITNET__GGUF_TERNARY, 1, 2, 0, offsetof(bitnet_layer_weights, wk)},
    {"attn_v", BITNET__GGUF_TERNARY, 1, 2, 0, offsetof(bitnet_layer_weights, wv)},
    {"attn_output", BITNET__GGUF_TERNARY, 1, 1, 0, offsetof(bitnet_layer_weights, wo)},
    {"attn_sub_norm", BITNET__GGUF_FLOAT, 1, 0, 1, offsetof(bitnet_layer_weights, attn_sub_norm)},
    {"ffn_norm", BITNET__GGUF_FLOAT, 1, 0, 0, offsetof(bitnet_layer_weights, ffn_norm)},
    {"ffn_gate", BITNET__GGUF_TERNARY, 1, 3, 0, offsetof(bitnet_layer_weights, w_gate)},
    {"ffn_up", BITNET__GGUF_TERNARY, 1, 3, 0, offsetof(bitnet_layer_weights, w_up)},
    {"ffn_down", BITNET__GGUF_TERNARY, 3, 1, 0, offsetof(bitnet_layer_weights, w_down)},
    {"ffn_sub_norm", BITNET__GGUF_FLOAT, 3, 0, 1, offsetof(bitnet_layer_weights, ffn_sub_norm)}};
#define BITNET__N_LAYER_PARTS (sizeof bitnet__layer_parts / sizeof bitnet__layer_parts[0])

/* A chat template by tokenizer.chat_template's text, as llama.cpp's llama_chat_apply_template picks
   it (among the formats bitnet.h has) */
static bitnet_chat_template bitnet__chat_detect(const char *s, size_t n) {
#define BITNET__HAS(lit) (bitnet__memmem(s, n, lit, sizeof lit - 1) != NULL)
    if (BITNET__HAS("<|user|>") && BITNET__HAS("<|assistant|>")) return BITNET_CHAT_FALCON3;
    if (BITNET__HAS("<|start_header_id|>") && BITNET__HAS("<|end_header_id|>")) return BITNET_CHAT_LLAMA3;
#undef BITNET__HAS
    return BITNET_CHAT_BITNET;
}

/* Validates g as a BitNet b1.58 model and fills info; see bitnet_gguf_check_bitnet. */
static bitnet_result bitnet__gguf_check_bitnet(const bitnet_gguf *g, bitnet_model_info *info) {
    static const char *const archs[] = {"bitnet-b1.58", "bitnet-25", "bitnet", "llama"};
    bitnet_gguf_str s = {NULL, 0};
    bitnet_tensor_info emb;
    char arch[32], name[96];
    int32_t rope_dims = 0, vocab_key = 0;
    uint64_t dim, ffn, kv_dim, n_vocab = 0, i;
    int a, l;
    memset(info, 0, sizeof *info);
    info->bos = info->eos = info->eot = -1;
    info->chat_template = BITNET_CHAT_BITNET;

    BITNET__TRY(bitnet_gguf_get_str(g, "general.architecture", &s));
    for (a = 0; a < 4; a++)
        if (s.len == strlen(archs[a]) && memcmp(s.ptr, archs[a], (size_t)s.len) == 0) break;
    if (a == 4)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: architecture '%.*s' is not a BitNet one (bitnet-b1.58, bitnet-25, bitnet, "
                           "or llama with ternary matrices)", (int)BITNET__MIN(s.len, 64), s.ptr);
    snprintf(arch, sizeof arch, "%s", archs[a]);
    snprintf(info->arch, sizeof info->arch, "%s", arch);
    info->ffn_act = a >= 2 ? BITNET_FFN_SILU : BITNET_FFN_RELU2; /* bitnet.cpp's build_bitnet and build_llama: silu */
    info->sub_norms = a != 3; /* "llama": ternary LLaMA models (Llama3-8B-1.58, Falcon3-1.58bit) have none */

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
    if (info->dim % BITNET_I2S_BLOCK) /* (feed_forward_length: float matrices are padded at load, >>model) */
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "GGUF: embedding_length %d must be a multiple of %d (I2_S rows)", info->dim,
                           BITNET_I2S_BLOCK);

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
    if (bitnet_gguf_find_key(g, "tokenizer.chat_template") >= 0 && bitnet_gguf_get_str(g, "tokenizer.chat_template", &s) == BITNET_OK)
        info->chat_template = bitnet__chat_detect(s.ptr, (size_t)s.len);
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.model") >= 0 && bitnet_gguf_get_str(g, "tokenizer.ggml.model", &s) == BITNET_OK &&
        bitnet__str_is(s, "llama")) { /* SentencePiece without ids: llama.cpp's 1 and 2 */
        if (info->bos < 0 && n_vocab > 1) info->bos = 1;
        if (info->eos < 0 && n_vocab > 2) info->eos = 2;
    }
    if (info->eot < 0 && bitnet_gguf_find_key(g, "tokenizer.ggml.tokens") >= 0) {
        for (i = 0; i < n_vocab; i++) {
            BITNET__TRY(bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s));
            if (bitnet__str_is(s, "<|eot_id|>")) {
                info->eot = (int32_t)i;
                break;
            }
        }
    }

    dim = (uint64_t)info->dim;
    ffn = (uint64_t)info->ffn_dim;
    kv_dim = (uint64_t)info->n_kv_heads * (uint64_t)info->head_dim;
    BITNET__TRY(bitnet__gguf_want(g, "token_embd.weight", BITNET__GGUF_EMBD, dim, n_vocab, 0));
    BITNET__TRY(bitnet__gguf_want(g, "output_norm.weight", BITNET__GGUF_FLOAT, dim, 1, 0));
    BITNET__TRY(bitnet__gguf_want(g, "output.weight", BITNET__GGUF_EMBD, dim, n_vocab, 1));
    BITNET__TRY(bitnet__gguf_want(g, "rope_freqs.weight", BITNET__GGUF_FLOAT, (uint64_t)info->head_dim / 2, 1, 1));
    info->rope_freqs = bitnet__gguf_tensor_named(g, "rope_freqs.weight") != NULL;
    for (l = 0; l < info->n_layers; l++) {
        const uint64_t sz[4] = {1, dim, kv_dim, ffn};
        size_t p;
        for (p = 0; p < BITNET__N_LAYER_PARTS; p++) {
            const struct bitnet__layer_part *P = &bitnet__layer_parts[p];
            bitnet_tensor_type type;
            if (P->sub && !info->sub_norms) continue;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, P->name);
            BITNET__TRY(bitnet__gguf_want(g, name, P->role, sz[P->ne0], sz[P->ne1], 0));
            type = bitnet__gguf_tensor_named(g, name)->type;
            if (!info->sub_norms && P->role == BITNET__GGUF_TERNARY && !bitnet__ternary_type(type))
                return bitnet__err(BITNET_ERR_UNSUPPORTED, "GGUF: tensor '%s' is %s: a llama-architecture file is a BitNet model only "
                                   "with ternary matrices (I2_S, TQ1_0, TQ2_0)", name, bitnet_tensor_type_name(type));
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

/* SentencePiece ("llama" vocabularies) is below, after the byte-level encoder ("---- SentencePiece").
   Byte-level BPE, equal to tiktoken with the LLaMA 3 pattern:
     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     \s*[\r\n]+|\s+(?!\S)|\s+
   The pattern is matched by hand (bitnet__pretok_end), each piece is BPE-encoded on its own with
   a min-heap of candidate merges (n log n even for hostile megabyte pieces). */

/* Character classes by code point: runs of (first code point << 3 | class | punct << 2). */
#define BITNET__CL_OTHER 0
#define BITNET__CL_LETTER 1
#define BITNET__CL_NUMBER 2
#define BITNET__CL_SPACE 3
#define BITNET__CL_PUNCT 4 /* a flag on "other": \p{P}, and in ASCII every symbol (Falcon 3's first split) */
/* unicode-table begin: generated by tools/gen_unicode_tables.mjs (Unicode 16.0), do not edit */
static const uint32_t bitnet__uni_runs[1855] = {
    0x0, 0x4b, 0x70, 0x103, 0x10c, 0x120, 0x12c, 0x158, 0x164, 0x182, 0x1d4, 0x1e0, 0x1fc, 0x209, 0x2dc, 0x2f0,
    0x2fc, 0x300, 0x309, 0x3dc, 0x3e0, 0x3ec, 0x3f0, 0x42b, 0x430, 0x503, 0x50c, 0x510, 0x53c, 0x540, 0x551, 0x55c,
    0x560, 0x592, 0x5a0, 0x5a9, 0x5b4, 0x5c0, 0x5ca, 0x5d1, 0x5dc, 0x5e2, 0x5fc, 0x601, 0x6b8, 0x6c1, 0x7b8, 0x7c1,
    0x1610, 0x1631, 0x1690, 0x1701, 0x1728, 0x1761, 0x1768, 0x1771, 0x1778, 0x1b81, 0x1ba8, 0x1bb1, 0x1bc0, 0x1bd1,
    0x1bf4, 0x1bf9, 0x1c00, 0x1c31, 0x1c3c, 0x1c41, 0x1c58, 0x1c61, 0x1c68, 0x1c71, 0x1d10, 0x1d19, 0x1fb0, 0x1fb9,
    0x2410, 0x2451, 0x2980, 0x2989, 0x2ab8, 0x2ac9, 0x2ad4, 0x2b01, 0x2c4c, 0x2c58, 0x2df4, 0x2df8, 0x2e04, 0x2e08,
    0x2e1c, 0x2e20, 0x2e34, 0x2e38, 0x2e81, 0x2f58, 0x2f79, 0x2f9c, 0x2fa8, 0x304c, 0x3058, 0x3064, 0x3070, 0x30dc,
    0x30e0, 0x30ec, 0x3101, 0x3258, 0x3302, 0x3354, 0x3371, 0x3380, 0x3389, 0x36a4, 0x36a9, 0x36b0, 0x3729, 0x3738,
    0x3771, 0x3782, 0x37d1, 0x37e8, 0x37f9, 0x3804, 0x3870, 0x3881, 0x3888, 0x3891, 0x3980, 0x3a69, 0x3d30, 0x3d89,
    0x3d90, 0x3e02, 0x3e51, 0x3f58, 0x3fa1, 0x3fb0, 0x3fbc, 0x3fd1, 0x3fd8, 0x4001, 0x40b0, 0x40d1, 0x40d8, 0x4121,
    0x4128, 0x4141, 0x4148, 0x4184, 0x41f8, 0x4201, 0x42c8, 0x42f4, 0x42f8, 0x4301, 0x4358, 0x4381, 0x4440, 0x4449,
    0x4478, 0x4501, 0x4650, 0x4821, 0x49d0, 0x49e9, 0x49f0, 0x4a81, 0x4a88, 0x4ac1, 0x4b10, 0x4b24, 0x4b32, 0x4b84,
    0x4b89, 0x4c08, 0x4c29, 0x4c68, 0x4c79, 0x4c88, 0x4c99, 0x4d48, 0x4d51, 0x4d88, 0x4d91, 0x4d98, 0x4db1, 0x4dd0,
    0x4de9, 0x4df0, 0x4e71, 0x4e78, 0x4ee1, 0x4ef0, 0x4ef9, 0x4f10, 0x4f32, 0x4f81, 0x4f90, 0x4fa2, 0x4fd0, 0x4fe1,
    0x4fec, 0x4ff0, 0x5029, 0x5058, 0x5079, 0x5088, 0x5099, 0x5148, 0x5151, 0x5188, 0x5191, 0x51a0, 0x51a9, 0x51b8,
    0x51c1, 0x51d0, 0x52c9, 0x52e8, 0x52f1, 0x52f8, 0x5332, 0x5380, 0x5391, 0x53a8, 0x53b4, 0x53b8, 0x5429, 0x5470,
    0x5479, 0x5490, 0x5499, 0x5548, 0x5551, 0x5588, 0x5591, 0x55a0, 0x55a9, 0x55d0, 0x55e9, 0x55f0, 0x5681, 0x5688,
    0x5701, 0x5710, 0x5732, 0x5784, 0x5788, 0x57c9, 0x57d0, 0x5829, 0x5868, 0x5879, 0x5888, 0x5899, 0x5948, 0x5951,
    0x5988, 0x5991, 0x59a0, 0x59a9, 0x59d0, 0x59e9, 0x59f0, 0x5ae1, 0x5af0, 0x5af9, 0x5b10, 0x5b32, 0x5b80, 0x5b89,
    0x5b92, 0x5bc0, 0x5c19, 0x5c20, 0x5c29, 0x5c58, 0x5c71, 0x5c88, 0x5c91, 0x5cb0, 0x5cc9, 0x5cd8, 0x5ce1, 0x5ce8,
    0x5cf1, 0x5d00, 0x5d19, 0x5d28, 0x5d41, 0x5d58, 0x5d71, 0x5dd0, 0x5e81, 0x5e88, 0x5f32, 0x5f98, 0x6029, 0x6068,
    0x6071, 0x6088, 0x6091, 0x6148, 0x6151, 0x61d0, 0x61e9, 0x61f0, 0x62c1, 0x62d8, 0x62e9, 0x62f0, 0x6301, 0x6310,
    0x6332, 0x6380, 0x63bc, 0x63c2, 0x63f8, 0x6401, 0x6408, 0x6424, 0x6429, 0x6468, 0x6471, 0x6488, 0x6491, 0x6548,
    0x6551, 0x65a0, 0x65a9, 0x65d0, 0x65e9, 0x65f0, 0x66e9, 0x66f8, 0x6701, 0x6710, 0x6732, 0x6780, 0x6789, 0x6798,
    0x6821, 0x6868, 0x6871, 0x6888, 0x6891, 0x69d8, 0x69e9, 0x69f0, 0x6a71, 0x6a78, 0x6aa1, 0x6ab8, 0x6ac2, 0x6af9,
    0x6b10, 0x6b32, 0x6bc8, 0x6bd1, 0x6c00, 0x6c29, 0x6cb8, 0x6cd1, 0x6d90, 0x6d99, 0x6de0, 0x6de9, 0x6df0, 0x6e01,
    0x6e38, 0x6f32, 0x6f80, 0x6fa4, 0x6fa8, 0x7009, 0x7188, 0x7191, 0x71a0, 0x7201, 0x7238, 0x727c, 0x7282, 0x72d4,
    0x72e0, 0x7409, 0x7418, 0x7421, 0x7428, 0x7431, 0x7458, 0x7461, 0x7520, 0x7529, 0x7530, 0x7539, 0x7588, 0x7591,
    0x75a0, 0x75e9, 0x75f0, 0x7601, 0x7628, 0x7631, 0x7638, 0x7682, 0x76d0, 0x76e1, 0x7700, 0x7801, 0x7808, 0x7824,
    0x7898, 0x78a4, 0x78a8, 0x7902, 0x79a0, 0x79d4, 0x79f0, 0x7a01, 0x7a40, 0x7a49, 0x7b68, 0x7c2c, 0x7c30, 0x7c41,
    0x7c68, 0x7e84, 0x7ea8, 0x7ecc, 0x7ed8, 0x8001, 0x8158, 0x81f9, 0x8202, 0x8254, 0x8281, 0x82b0, 0x82d1, 0x82f0,
    0x8309, 0x8310, 0x8329, 0x8338, 0x8371, 0x8388, 0x83a9, 0x8410, 0x8471, 0x8478, 0x8482, 0x84d0, 0x8501, 0x8630,
    0x8639, 0x8640, 0x8669, 0x8670, 0x8681, 0x87dc, 0x87e1, 0x9248, 0x9251, 0x9270, 0x9281, 0x92b8, 0x92c1, 0x92c8,
    0x92d1, 0x92f0, 0x9301, 0x9448, 0x9451, 0x9470, 0x9481, 0x9588, 0x9591, 0x95b0, 0x95c1, 0x95f8, 0x9601, 0x9608,
    0x9611, 0x9630, 0x9641, 0x96b8, 0x96c1, 0x9888, 0x9891, 0x98b0, 0x98c1, 0x9ad8, 0x9b04, 0x9b4a, 0x9be8, 0x9c01,
    0x9c80, 0x9d01, 0x9fb0, 0x9fc1, 0x9ff0, 0xa004, 0xa009, 0xb368, 0xb374, 0xb379, 0xb403, 0xb409, 0xb4dc, 0xb4e8,
    0xb501, 0xb75c, 0xb772, 0xb789, 0xb7c8, 0xb801, 0xb890, 0xb8f9, 0xb990, 0xb9ac, 0xb9b8, 0xba01, 0xba90, 0xbb01,
    0xbb68, 0xbb71, 0xbb88, 0xbc01, 0xbda0, 0xbea4, 0xbeb9, 0xbec4, 0xbed8, 0xbee1, 0xbee8, 0xbf02, 0xbf50, 0xbf82,
    0xbfd0, 0xc004, 0xc058, 0xc082, 0xc0d0, 0xc101, 0xc3c8, 0xc401, 0xc428, 0xc439, 0xc548, 0xc551, 0xc558, 0xc581,
    0xc7b0, 0xc801, 0xc8f8, 0xca24, 0xca32, 0xca81, 0xcb70, 0xcb81, 0xcba8, 0xcc01, 0xcd60, 0xcd81, 0xce50, 0xce82,
    0xced8, 0xd001, 0xd0b8, 0xd0f4, 0xd101, 0xd2a8, 0xd402, 0xd450, 0xd482, 0xd4d0, 0xd504, 0xd539, 0xd544, 0xd570,
    0xd829, 0xd9a0, 0xda29, 0xda68, 0xda74, 0xda82, 0xdad4, 0xdb08, 0xdbec, 0xdc00, 0xdc19, 0xdd08, 0xdd71, 0xdd82,
    0xddd1, 0xdf30, 0xdfe4, 0xe001, 0xe120, 0xe1dc, 0xe202, 0xe250, 0xe269, 0xe282, 0xe2d1, 0xe3f4, 0xe401, 0xe458,
    0xe481, 0xe5d8, 0xe5e9, 0xe604, 0xe640, 0xe69c, 0xe6a0, 0xe749, 0xe768, 0xe771, 0xe7a0, 0xe7a9, 0xe7b8, 0xe7d1,
    0xe7d8, 0xe801, 0xee00, 0xf001, 0xf8b0, 0xf8c1, 0xf8f0, 0xf901, 0xfa30, 0xfa41, 0xfa70, 0xfa81, 0xfac0, 0xfac9,
    0xfad0, 0xfad9, 0xfae0, 0xfae9, 0xfaf0, 0xfaf9, 0xfbf0, 0xfc01, 0xfda8, 0xfdb1, 0xfde8, 0xfdf1, 0xfdf8, 0xfe11,
    0xfe28, 0xfe31, 0xfe68, 0xfe81, 0xfea0, 0xfeb1, 0xfee0, 0xff01, 0xff68, 0xff91, 0xffa8, 0xffb1, 0xffe8, 0x10003,
    0x10058, 0x10084, 0x10143, 0x10150, 0x1017b, 0x10184, 0x10220, 0x1022c, 0x10290, 0x1029c, 0x102fb, 0x10300,
    0x10382, 0x10389, 0x10390, 0x103a2, 0x103d0, 0x103ec, 0x103f9, 0x10402, 0x10450, 0x1046c, 0x10478, 0x10481,
    0x104e8, 0x10811, 0x10818, 0x10839, 0x10840, 0x10851, 0x108a0, 0x108a9, 0x108b0, 0x108c9, 0x108f0, 0x10921,
    0x10928, 0x10931, 0x10938, 0x10941, 0x10948, 0x10951, 0x10970, 0x10979, 0x109d0, 0x109e1, 0x10a00, 0x10a29,
    0x10a50, 0x10a71, 0x10a78, 0x10a82, 0x10c19, 0x10c2a, 0x10c50, 0x11844, 0x11860, 0x1194c, 0x11958, 0x12302,
    0x124e0, 0x12752, 0x12800, 0x13b44, 0x13bb2, 0x13ca0, 0x13e2c, 0x13e38, 0x13f34, 0x13f80, 0x14c1c, 0x14cc8,
    0x14ec4, 0x14ee0, 0x14fe4, 0x14ff0, 0x16001, 0x16728, 0x16759, 0x16778, 0x16791, 0x167a0, 0x167cc, 0x167ea,
    0x167f4, 0x16801, 0x16930, 0x16939, 0x16940, 0x16969, 0x16970, 0x16981, 0x16b40, 0x16b79, 0x16b84, 0x16b88,
    0x16c01, 0x16cb8, 0x16d01, 0x16d38, 0x16d41, 0x16d78, 0x16d81, 0x16db8, 0x16dc1, 0x16df8, 0x16e01, 0x16e38,
    0x16e41, 0x16e78, 0x16e81, 0x16eb8, 0x16ec1, 0x16ef8, 0x17004, 0x17179, 0x17184, 0x17280, 0x17294, 0x172f0,
    0x18003, 0x1800c, 0x18020, 0x18029, 0x1803a, 0x18044, 0x18090, 0x180a4, 0x18100, 0x1810a, 0x18150, 0x18184,
    0x18189, 0x181b0, 0x181c2, 0x181d9, 0x181ec, 0x181f0, 0x18209, 0x184b8, 0x184e9, 0x18504, 0x18509, 0x187dc,
    0x187e1, 0x18800, 0x18829, 0x18980, 0x18989, 0x18c78, 0x18c92, 0x18cb0, 0x18d01, 0x18e00, 0x18f81, 0x19000,
    0x19102, 0x19150, 0x19242, 0x19280, 0x1928a, 0x19300, 0x19402, 0x19450, 0x1958a, 0x19600, 0x1a001, 0x26e00,
    0x27001, 0x52468, 0x52681, 0x527f4, 0x52801, 0x5306c, 0x53081, 0x53102, 0x53151, 0x53160, 0x53201, 0x53378,
    0x5339c, 0x533a0, 0x533f4, 0x533f9, 0x534f0, 0x53501, 0x53732, 0x53780, 0x53794, 0x537c0, 0x538b9, 0x53900,
    0x53911, 0x53c48, 0x53c59, 0x53e70, 0x53e81, 0x53e90, 0x53e99, 0x53ea0, 0x53ea9, 0x53ee8, 0x53f91, 0x54010,
    0x54019, 0x54030, 0x54039, 0x54058, 0x54061, 0x54118, 0x54182, 0x541b0, 0x54201, 0x543a4, 0x543c0, 0x54411,
    0x545a0, 0x54674, 0x54682, 0x546d0, 0x54791, 0x547c4, 0x547d9, 0x547e4, 0x547e9, 0x547f8, 0x54802, 0x54851,
    0x54930, 0x54974, 0x54981, 0x54a38, 0x54afc, 0x54b01, 0x54be8, 0x54c21, 0x54d98, 0x54e0c, 0x54e70, 0x54e79,
    0x54e82, 0x54ed0, 0x54ef4, 0x54f01, 0x54f28, 0x54f31, 0x54f82, 0x54fd1, 0x54ff8, 0x55001, 0x55148, 0x55201,
    0x55218, 0x55221, 0x55260, 0x55282, 0x552d0, 0x552e4, 0x55301, 0x553b8, 0x553d1, 0x553d8, 0x553f1, 0x55580,
    0x55589, 0x55590, 0x555a9, 0x555b8, 0x555c9, 0x555f0, 0x55601, 0x55608, 0x55611, 0x55618, 0x556d9, 0x556f4,
    0x55701, 0x55758, 0x55784, 0x55791, 0x557a8, 0x55809, 0x55838, 0x55849, 0x55878, 0x55889, 0x558b8, 0x55901,
    0x55938, 0x55941, 0x55978, 0x55981, 0x55ad8, 0x55ae1, 0x55b50, 0x55b81, 0x55f18, 0x55f5c, 0x55f60, 0x55f82,
    0x55fd0, 0x56001, 0x6bd20, 0x6bd81, 0x6be38, 0x6be59, 0x6bfe0, 0x7c801, 0x7d370, 0x7d381, 0x7d6d0, 0x7d801,
    0x7d838, 0x7d899, 0x7d8c0, 0x7d8e9, 0x7d8f0, 0x7d8f9, 0x7d948, 0x7d951, 0x7d9b8, 0x7d9c1, 0x7d9e8, 0x7d9f1,
    0x7d9f8, 0x7da01, 0x7da10, 0x7da19, 0x7da28, 0x7da31, 0x7dd90, 0x7de99, 0x7e9f4, 0x7ea00, 0x7ea81, 0x7ec80,
    0x7ec91, 0x7ee40, 0x7ef81, 0x7efe0, 0x7f084, 0x7f0d0, 0x7f184, 0x7f298, 0x7f2a4, 0x7f310, 0x7f31c, 0x7f320,
    0x7f344, 0x7f348, 0x7f354, 0x7f360, 0x7f381, 0x7f3a8, 0x7f3b1, 0x7f7e8, 0x7f80c, 0x7f820, 0x7f82c, 0x7f858,
    0x7f864, 0x7f882, 0x7f8d4, 0x7f8e0, 0x7f8fc, 0x7f909, 0x7f9dc, 0x7f9f0, 0x7f9fc, 0x7fa00, 0x7fa09, 0x7fadc,
    0x7fae0, 0x7faec, 0x7faf0, 0x7fafc, 0x7fb31, 0x7fdf8, 0x7fe11, 0x7fe40, 0x7fe51, 0x7fe80, 0x7fe91, 0x7fec0,
    0x7fed1, 0x7fee8, 0x80001, 0x80060, 0x80069, 0x80138, 0x80141, 0x801d8, 0x801e1, 0x801f0, 0x801f9, 0x80270,
    0x80281, 0x802f0, 0x80401, 0x807d8, 0x80804, 0x80818, 0x8083a, 0x809a0, 0x80a02, 0x80bc8, 0x80c52, 0x80c60,
    0x81401, 0x814e8, 0x81501, 0x81688, 0x8170a, 0x817e0, 0x81801, 0x81902, 0x81920, 0x81969, 0x81a0a, 0x81a11,
    0x81a52, 0x81a58, 0x81a81, 0x81bb0, 0x81c01, 0x81cf0, 0x81cfc, 0x81d01, 0x81e20, 0x81e41, 0x81e84, 0x81e8a,
    0x81eb0, 0x82001, 0x824f0, 0x82502, 0x82550, 0x82581, 0x826a0, 0x826c1, 0x827e0, 0x82801, 0x82940, 0x82981,
    0x82b20, 0x82b7c, 0x82b81, 0x82bd8, 0x82be1, 0x82c58, 0x82c61, 0x82c98, 0x82ca1, 0x82cb0, 0x82cb9, 0x82d10,
    0x82d19, 0x82d90, 0x82d99, 0x82dd0, 0x82dd9, 0x82de8, 0x82e01, 0x82fa0, 0x83001, 0x839b8, 0x83a01, 0x83ab0,
    0x83b01, 0x83b40, 0x83c01, 0x83c30, 0x83c39, 0x83d88, 0x83d91, 0x83dd8, 0x84001, 0x84030, 0x84041, 0x84048,
    0x84051, 0x841b0, 0x841b9, 0x841c8, 0x841e1, 0x841e8, 0x841f9, 0x842b0, 0x842bc, 0x842c2, 0x84301, 0x843b8,
    0x843ca, 0x84401, 0x844f8, 0x8453a, 0x84580, 0x84701, 0x84798, 0x847a1, 0x847b0, 0x847da, 0x84801, 0x848b2,
    0x848e0, 0x848fc, 0x84901, 0x849d0, 0x849fc, 0x84a00, 0x84c01, 0x84dc0, 0x84de2, 0x84df1, 0x84e02, 0x84e80,
    0x84e92, 0x85001, 0x85008, 0x85081, 0x850a0, 0x850a9, 0x850c0, 0x850c9, 0x851b0, 0x85202, 0x85248, 0x85284,
    0x852c8, 0x85301, 0x853ea, 0x853fc, 0x85401, 0x854ea, 0x85500, 0x85601, 0x85640, 0x85649, 0x85728, 0x8575a,
    0x85784, 0x857b8, 0x85801, 0x859b0, 0x859cc, 0x85a01, 0x85ab0, 0x85ac2, 0x85b01, 0x85b98, 0x85bc2, 0x85c01,
    0x85c90, 0x85ccc, 0x85ce8, 0x85d4a, 0x85d80, 0x86001, 0x86248, 0x86401, 0x86598, 0x86601, 0x86798, 0x867d2,
    0x86801, 0x86920, 0x86982, 0x869d0, 0x86a02, 0x86a51, 0x86b30, 0x86b74, 0x86b79, 0x86c30, 0x87302, 0x873f8,
    0x87401, 0x87550, 0x8756c, 0x87570, 0x87581, 0x87590, 0x87611, 0x87628, 0x87801, 0x878ea, 0x87939, 0x87940,
    0x87981, 0x87a30, 0x87a8a, 0x87aac, 0x87ad0, 0x87b81, 0x87c10, 0x87c34, 0x87c50, 0x87d81, 0x87e2a, 0x87e60,
    0x87f01, 0x87fb8, 0x88019, 0x881c0, 0x8823c, 0x88270, 0x88292, 0x88380, 0x88389, 0x88398, 0x883a9, 0x883b0,
    0x88419, 0x88580, 0x885dc, 0x885e8, 0x885f4, 0x88610, 0x88681, 0x88748, 0x88782, 0x887d0, 0x88819, 0x88938,
    0x889b2, 0x88a04, 0x88a21, 0x88a28, 0x88a39, 0x88a40, 0x88a81, 0x88b98, 0x88ba4, 0x88bb1, 0x88bb8, 0x88c19,
    0x88d98, 0x88e09, 0x88e2c, 0x88e48, 0x88e6c, 0x88e70, 0x88e82, 0x88ed1, 0x88edc, 0x88ee1, 0x88eec, 0x88f00,
    0x88f0a, 0x88fa8, 0x89001, 0x89090, 0x89099, 0x89160, 0x891c4, 0x891f0, 0x891f9, 0x89208, 0x89401, 0x89438,
    0x89441, 0x89448, 0x89451, 0x89470, 0x89479, 0x894f0, 0x894f9, 0x8954c, 0x89550, 0x89581, 0x896f8, 0x89782,
    0x897d0, 0x89829, 0x89868, 0x89879, 0x89888, 0x89899, 0x89948, 0x89951, 0x89988, 0x89991, 0x899a0, 0x899a9,
    0x899d0, 0x899e9, 0x899f0, 0x89a81, 0x89a88, 0x89ae9, 0x89b10, 0x89c01, 0x89c50, 0x89c59, 0x89c60, 0x89c71,
    0x89c78, 0x89c81, 0x89db0, 0x89db9, 0x89dc0, 0x89e89, 0x89e90, 0x89e99, 0x89ea4, 0x89eb0, 0x89ebc, 0x89ec8,
    0x8a001, 0x8a1a8, 0x8a239, 0x8a25c, 0x8a282, 0x8a2d4, 0x8a2e0, 0x8a2ec, 0x8a2f0, 0x8a2f9, 0x8a310, 0x8a401,
    0x8a580, 0x8a621, 0x8a634, 0x8a639, 0x8a640, 0x8a682, 0x8a6d0, 0x8ac01, 0x8ad78, 0x8ae0c, 0x8aec1, 0x8aee0,
    0x8b001, 0x8b180, 0x8b20c, 0x8b221, 0x8b228, 0x8b282, 0x8b2d0, 0x8b304, 0x8b368, 0x8b401, 0x8b558, 0x8b5c1,
    0x8b5cc, 0x8b5d0, 0x8b602, 0x8b650, 0x8b682, 0x8b720, 0x8b801, 0x8b8d8, 0x8b982, 0x8b9e4, 0x8b9f8, 0x8ba01,
    0x8ba38, 0x8c001, 0x8c160, 0x8c1dc, 0x8c1e0, 0x8c501, 0x8c702, 0x8c798, 0x8c7f9, 0x8c838, 0x8c849, 0x8c850,
    0x8c861, 0x8c8a0, 0x8c8a9, 0x8c8b8, 0x8c8c1, 0x8c980, 0x8c9f9, 0x8ca00, 0x8ca09, 0x8ca10, 0x8ca24, 0x8ca38,
    0x8ca82, 0x8cad0, 0x8cd01, 0x8cd40, 0x8cd51, 0x8ce88, 0x8cf09, 0x8cf14, 0x8cf19, 0x8cf20, 0x8d001, 0x8d008,
    0x8d059, 0x8d198, 0x8d1d1, 0x8d1d8, 0x8d1fc, 0x8d238, 0x8d281, 0x8d288, 0x8d2e1, 0x8d450, 0x8d4d4, 0x8d4e9,
    0x8d4f4, 0x8d518, 0x8d581, 0x8d7c8, 0x8d804, 0x8d850, 0x8de01, 0x8df0c, 0x8df10, 0x8df82, 0x8dfd0, 0x8e001,
    0x8e048, 0x8e051, 0x8e178, 0x8e201, 0x8e20c, 0x8e230, 0x8e282, 0x8e368, 0x8e384, 0x8e391, 0x8e480, 0x8e801,
    0x8e838, 0x8e841, 0x8e850, 0x8e859, 0x8e988, 0x8ea31, 0x8ea38, 0x8ea82, 0x8ead0, 0x8eb01, 0x8eb30, 0x8eb39,
    0x8eb48, 0x8eb51, 0x8ec50, 0x8ecc1, 0x8ecc8, 0x8ed02, 0x8ed50, 0x8f701, 0x8f798, 0x8f7bc, 0x8f7c8, 0x8f811,
    0x8f818, 0x8f821, 0x8f888, 0x8f891, 0x8f9a0, 0x8fa1c, 0x8fa82, 0x8fad0, 0x8fd81, 0x8fd88, 0x8fe02, 0x8fea8,
    0x8fffc, 0x90001, 0x91cd0, 0x92002, 0x92378, 0x92384, 0x923a8, 0x92401, 0x92a20, 0x97c81, 0x97f8c, 0x97f98,
    0x98001, 0x9a180, 0x9a209, 0x9a238, 0x9a301, 0xa1fd8, 0xa2001, 0xa3238, 0xb0801, 0xb08f0, 0xb0982, 0xb09d0,
    0xb4001, 0xb51c8, 0xb5201, 0xb52f8, 0xb5302, 0xb5350, 0xb5374, 0xb5381, 0xb55f8, 0xb5602, 0xb5650, 0xb5681,
    0xb5770, 0xb57ac, 0xb57b0, 0xb5801, 0xb5980, 0xb59bc, 0xb59e0, 0xb5a01, 0xb5a24, 0xb5a28, 0xb5a82, 0xb5ad0,
    0xb5ada, 0xb5b10, 0xb5b19, 0xb5bc0, 0xb5be9, 0xb5c80, 0xb6a01, 0xb6b6c, 0xb6b82, 0xb6bd0, 0xb7201, 0xb7402,
    0xb74bc, 0xb74d8, 0xb7801, 0xb7a58, 0xb7a81, 0xb7a88, 0xb7c99, 0xb7d00, 0xb7f01, 0xb7f14, 0xb7f19, 0xb7f20,
    0xb8001, 0xc3fc0, 0xc4001, 0xc66b0, 0xc67f9, 0xc6848, 0xd7f81, 0xd7fa0, 0xd7fa9, 0xd7fe0, 0xd7fe9, 0xd7ff8,
    0xd8001, 0xd8918, 0xd8991, 0xd8998, 0xd8a81, 0xd8a98, 0xd8aa9, 0xd8ab0, 0xd8b21, 0xd8b40, 0xd8b81, 0xd97e0,
    0xde001, 0xde358, 0xde381, 0xde3e8, 0xde401, 0xde448, 0xde481, 0xde4d0, 0xde4fc, 0xde500, 0xe6782, 0xe67d0,
    0xe9602, 0xe96a0, 0xe9702, 0xe97a0, 0xe9b02, 0xe9bc8, 0xea001, 0xea2a8, 0xea2b1, 0xea4e8, 0xea4f1, 0xea500,
    0xea511, 0xea518, 0xea529, 0xea538, 0xea549, 0xea568, 0xea571, 0xea5d0, 0xea5d9, 0xea5e0, 0xea5e9, 0xea620,
    0xea629, 0xea830, 0xea839, 0xea858, 0xea869, 0xea8a8, 0xea8b1, 0xea8e8, 0xea8f1, 0xea9d0, 0xea9d9, 0xea9f8,
    0xeaa01, 0xeaa28, 0xeaa31, 0xeaa38, 0xeaa51, 0xeaa88, 0xeaa91, 0xeb530, 0xeb541, 0xeb608, 0xeb611, 0xeb6d8,
    0xeb6e1, 0xeb7d8, 0xeb7e1, 0xeb8a8, 0xeb8b1, 0xeb9a8, 0xeb9b1, 0xeba78, 0xeba81, 0xebb78, 0xebb81, 0xebc48,
    0xebc51, 0xebd48, 0xebd51, 0xebe18, 0xebe21, 0xebe60, 0xebe72, 0xec000, 0xed43c, 0xed460, 0xef801, 0xef8f8,
    0xef929, 0xef958, 0xf0181, 0xf0370, 0xf0801, 0xf0968, 0xf09b9, 0xf09f0, 0xf0a02, 0xf0a50, 0xf0a71, 0xf0a78,
    0xf1481, 0xf1570, 0xf1601, 0xf1760, 0xf1782, 0xf17d0, 0xf2681, 0xf2760, 0xf2782, 0xf27d0, 0xf2e81, 0xf2f70,
    0xf2f81, 0xf2f8a, 0xf2fd8, 0xf2ffc, 0xf3000, 0xf3f01, 0xf3f38, 0xf3f41, 0xf3f60, 0xf3f69, 0xf3f78, 0xf3f81,
    0xf3ff8, 0xf4001, 0xf4628, 0xf463a, 0xf4680, 0xf4801, 0xf4a20, 0xf4a59, 0xf4a60, 0xf4a82, 0xf4ad0, 0xf4af4,
    0xf4b00, 0xf638a, 0xf6560, 0xf656a, 0xf6580, 0xf658a, 0xf65a8, 0xf680a, 0xf6970, 0xf697a, 0xf69f0, 0xf7001,
    0xf7020, 0xf7029, 0xf7100, 0xf7109, 0xf7118, 0xf7121, 0xf7128, 0xf7139, 0xf7140, 0xf7149, 0xf7198, 0xf71a1,
    0xf71c0, 0xf71c9, 0xf71d0, 0xf71d9, 0xf71e0, 0xf7211, 0xf7218, 0xf7239, 0xf7240, 0xf7249, 0xf7250, 0xf7259,
    0xf7260, 0xf7269, 0xf7280, 0xf7289, 0xf7298, 0xf72a1, 0xf72a8, 0xf72b9, 0xf72c0, 0xf72c9, 0xf72d0, 0xf72d9,
    0xf72e0, 0xf72e9, 0xf72f0, 0xf72f9, 0xf7300, 0xf7309, 0xf7318, 0xf7321, 0xf7328, 0xf7339, 0xf7358, 0xf7361,
    0xf7398, 0xf73a1, 0xf73c0, 0xf73c9, 0xf73e8, 0xf73f1, 0xf73f8, 0xf7401, 0xf7450, 0xf7459, 0xf74e0, 0xf7509,
    0xf7520, 0xf7529, 0xf7550, 0xf7559, 0xf75e0, 0xf8802, 0xf8868, 0xfdf82, 0xfdfd0, 0x100001, 0x153700, 0x153801,
    0x15b9d0, 0x15ba01, 0x15c0f0, 0x15c101, 0x167510, 0x167581, 0x175f08, 0x175f81, 0x1772f0, 0x17c001, 0x17d0f0,
    0x180001, 0x189a58, 0x189a81, 0x191d80,
};
/* unicode-table end */

#define BITNET__CP_INVALID 0xFFFFFFFFu /* one byte that is not valid UTF-8: class "other" */

/* The class, with BITNET__CL_PUNCT or'd in; & 3 for the class alone. */
static int bitnet__uni_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof bitnet__uni_runs / sizeof bitnet__uni_runs[0];
    if (cp < 128) { /* ASCII without the search */
        if ((cp | 32) - 'a' < 26) return BITNET__CL_LETTER;
        if (cp - '0' < 10) return BITNET__CL_NUMBER;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return BITNET__CL_SPACE;
        return cp > ' ' && cp < 127 ? BITNET__CL_OTHER | BITNET__CL_PUNCT : BITNET__CL_OTHER;
    }
    if (cp > 0x10FFFF) return BITNET__CL_OTHER;
    while (hi - lo > 1) { /* the last run starting at or before cp */
        size_t mid = lo + (hi - lo) / 2;
        if ((bitnet__uni_runs[mid] >> 3) <= cp) lo = mid;
        else hi = mid;
    }
    return (int)(bitnet__uni_runs[lo] & 7);
}

/* Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF). An invalid or truncated
   sequence yields BITNET__CP_INVALID for its first byte alone. */
static uint32_t bitnet__utf8_next(const unsigned char *s, size_t n, size_t *adv) {
    uint32_t c = s[0], cp;
    size_t need, i;
    *adv = 1;
    if (c < 0x80) return c;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; }
    else return BITNET__CP_INVALID;
    if (n < need + 1) return BITNET__CP_INVALID;
    for (i = 1; i <= need; i++) {
        if ((s[i] & 0xC0) != 0x80) return BITNET__CP_INVALID;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
        return BITNET__CP_INVALID;
    *adv = need + 1;
    return cp;
}

typedef struct bitnet__ch { uint32_t cp; int cls, punct; size_t len; } bitnet__ch;
static bitnet__ch bitnet__ch_at(const unsigned char *s, size_t n, size_t i) { /* i < n */
    bitnet__ch c;
    c.cp = bitnet__utf8_next(s + i, n - i, &c.len);
    c.cls = c.cp == BITNET__CP_INVALID ? BITNET__CL_OTHER : bitnet__uni_class(c.cp);
    c.punct = c.cls >> 2, c.cls &= 3;
    return c;
}
/* Simple case folding, as (?i) applies it to the contraction letters: only U+017F joins them. */
static uint32_t bitnet__fold(uint32_t cp) { return cp == 0x17F ? 's' : (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }
static size_t bitnet__class_run(const unsigned char *s, size_t n, size_t i, int cls) {
    while (i < n) {
        bitnet__ch c = bitnet__ch_at(s, n, i);
        if (c.cls != cls) break;
        i += c.len;
    }
    return i;
}

/* The end of the piece that starts at p (p < n): the alternatives in the pattern's order. */
static size_t bitnet__pretok_end(const unsigned char *s, size_t n, size_t p) {
    bitnet__ch c0 = bitnet__ch_at(s, n, p), c;
    size_t q = p + c0.len, last = p, nl_end = 0, count = 0;
    if (c0.cp == '\'' && q < n) { /* 's 't 're 've 'm 'll 'd, any case */
        bitnet__ch c1 = bitnet__ch_at(s, n, q);
        uint32_t f1 = bitnet__fold(c1.cp), f2;
        if (f1 == 's' || f1 == 't' || f1 == 'm' || f1 == 'd') return q + c1.len;
        if ((f1 == 'r' || f1 == 'v' || f1 == 'l') && q + c1.len < n) {
            f2 = bitnet__fold(bitnet__ch_at(s, n, q + c1.len).cp);
            if (f2 == (f1 == 'l' ? 'l' : 'e')) return q + c1.len + 1;
        }
    }
    if (c0.cls == BITNET__CL_LETTER) return bitnet__class_run(s, n, q, BITNET__CL_LETTER);
    if (c0.cls != BITNET__CL_NUMBER && c0.cp != '\r' && c0.cp != '\n' && q < n &&
        bitnet__ch_at(s, n, q).cls == BITNET__CL_LETTER) /* one non-letter, non-number prefix */
        return bitnet__class_run(s, n, q, BITNET__CL_LETTER);
    if (c0.cls == BITNET__CL_NUMBER) { /* at most three */
        while (++count < 3 && q < n && (c = bitnet__ch_at(s, n, q)).cls == BITNET__CL_NUMBER) q += c.len;
        return q;
    }
    q = (c0.cp == ' ' && p + 1 < n && bitnet__ch_at(s, n, p + 1).cls == BITNET__CL_OTHER) ? p + 1 : p;
    if (q > p || c0.cls == BITNET__CL_OTHER) { /* punctuation run, then newlines */
        q = bitnet__class_run(s, n, q, BITNET__CL_OTHER);
        while (q < n && (s[q] == '\r' || s[q] == '\n')) q++;
        return q;
    }
    /* White space: up to its last newline if it has one; else all of it at the end of the text
       or when it is one character; else all but its last character, which joins the next piece. */
    for (q = p; q < n && (c = bitnet__ch_at(s, n, q)).cls == BITNET__CL_SPACE; q += c.len, count++) {
        last = q;
        if (c.cp == '\r' || c.cp == '\n') nl_end = q + 1;
    }
    if (nl_end) return nl_end;
    return (q == n || count == 1) ? q : last;
}

/* Falcon 3's pre-tokenizer ("falcon3", "falcon_e"): llama.cpp applies three patterns in turn, each
   to the pieces of the one before, and keeps what lies between matches as pieces too:
     [\p{P}\$\+<=>\^~\|`]+  runs of punctuation and ASCII symbols, and the runs between them;
     GPT-2's 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ in each;
     [0-9]                    each ASCII digit alone.
   The GPT-2 step ends a piece as llama.cpp's hand-written matcher does (the end of a first-step
   piece is the end of its text); its contractions never match, the apostrophe being a first-step
   piece of its own. seg and piece: the ends of the current first- and second-step pieces, so that
   each is found once. */
typedef struct bitnet__pretok { int pre; size_t seg, piece; } bitnet__pretok;
static size_t bitnet__gpt2_end(const unsigned char *s, size_t n, size_t p) {
    bitnet__ch c0 = bitnet__ch_at(s, n, p), c;
    size_t q = p + c0.len, last = p, count = 0;
    if (c0.cp == ' ' && q < n && (c = bitnet__ch_at(s, n, q)).cls != BITNET__CL_SPACE) /* a space, then a run */
        return bitnet__class_run(s, n, q, c.cls);
    if (c0.cls != BITNET__CL_SPACE) return bitnet__class_run(s, n, p, c0.cls);
    for (q = p; q < n && (c = bitnet__ch_at(s, n, q)).cls == BITNET__CL_SPACE; q += c.len, count++) last = q;
    return count > 1 && q < n ? last : q; /* white space: its last character joins what follows */
}
static size_t bitnet__pretok_next(bitnet__pretok *it, const unsigned char *s, size_t n, size_t p) {
    size_t q;
    if (it->pre != BITNET_PRE_FALCON3) return bitnet__pretok_end(s, n, p);
    if (p >= it->seg) { /* the next run of punctuation, or of anything else */
        bitnet__ch c = bitnet__ch_at(s, n, p);
        int punct = c.punct;
        for (q = p + c.len; q < n && (c = bitnet__ch_at(s, n, q)).punct == punct; q += c.len) {}
        it->seg = q;
    }
    if (p >= it->piece) it->piece = bitnet__gpt2_end(s, it->seg, p);
    if (s[p] - (unsigned)'0' < 10) return p + 1;
    for (q = p; q < it->piece && s[q] - (unsigned)'0' >= 10; q++) {} /* (no UTF-8 sequence has an ASCII byte) */
    return q;
}

BITNET_API bitnet_result bitnet_pretokenize(bitnet_pretokenizer pre, const char *text, size_t len, size_t *ends, size_t cap,
                                            size_t *n_out) {
    size_t p = 0, count = 0;
    bitnet__pretok it = {0, 0, 0};
    BITNET__CHECK_PTR(n_out);
    if (!text && len) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_pretokenize: 'text' is NULL");
    if (!ends && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_pretokenize: 'ends' is NULL");
    if (pre != BITNET_PRE_LLAMA3 && pre != BITNET_PRE_FALCON3)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_pretokenize: pre-tokenizer %d", (int)pre);
    it.pre = pre;
    while (p < len) {
        p = bitnet__pretok_next(&it, (const unsigned char *)text, len, p);
        if (count < cap) ends[count] = p;
        count++;
    }
    *n_out = count;
    if (count > cap)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_pretokenize: %zu pieces, room for %zu", count, cap);
    return BITNET_OK;
}

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes
   become U+0100.. in byte order. c2b inverts it for code points below 324 (-1: not in it). */
static void bitnet__gpt2_tables(uint16_t b2c[256], int16_t c2b[324]) {
    int b, k = 0;
    for (b = 0; b < 324; b++) c2b[b] = -1;
    for (b = 0; b < 256; b++) {
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        b2c[b] = (uint16_t)(self ? b : 256 + k++);
        c2b[b2c[b]] = (int16_t)b;
    }
}
/* Byte-level string -> bytes (out needs len bytes); returns the byte count or -1. */
static long bitnet__gpt2_decode(const int16_t c2b[324], const unsigned char *s, size_t len, unsigned char *out) {
    size_t i = 0, adv;
    long k = 0;
    while (i < len) {
        uint32_t cp = bitnet__utf8_next(s + i, len - i, &adv);
        if (cp >= 324 || c2b[cp] < 0) return -1;
        out[k++] = (unsigned char)c2b[cp];
        i += adv;
    }
    return k;
}
/* Bytes -> byte-level string (out needs 2 * len bytes); returns its length. */
static size_t bitnet__gpt2_encode(const uint16_t b2c[256], const unsigned char *s, size_t len, char *out) {
    size_t i, k = 0;
    for (i = 0; i < len; i++) {
        uint16_t c = b2c[s[i]];
        if (c < 0x80) out[k++] = (char)c;
        else { out[k++] = (char)(0xC0 | (c >> 6)); out[k++] = (char)(0x80 | (c & 0x3F)); }
    }
    return k;
}

static uint32_t bitnet__hash_bytes(const unsigned char *s, size_t n) { /* FNV-1a, folded */
    const uint64_t h = bitnet__fnv(BITNET__FNV_INIT, s, n);
    return (uint32_t)(h ^ (h >> 32));
}
static uint32_t bitnet__hash_pair(uint32_t a, uint32_t b) {
    return (uint32_t)(((((uint64_t)a << 32) | b) * 0x9E3779B97F4A7C15ull) >> 32);
}
static uint32_t bitnet__table_size(uint64_t n) { /* a power of two at least 4/3 n, 16 or more */
    uint32_t c = 16;
    while ((uint64_t)c * 3 < n * 4) c *= 2;
    return c;
}

typedef struct bitnet__pair { uint32_t left, right; int32_t prio, merged; } bitnet__pair; /* left = UINT32_MAX: empty */

struct bitnet_tokenizer {
    int32_t n_vocab, bos, eos, eot;
    uint32_t *off;             /* token i is bytes[off[i] .. off[i + 1]) */
    unsigned char *bytes;      /* the tokens' bytes; special tokens verbatim */
    unsigned char *special;    /* per token: 1 for special tokens */
    int32_t byte_id[256];
    int32_t *tok_map;          /* regular tokens by their bytes, open addressing, -1 empty */
    uint32_t tok_mask;
    bitnet__pair *pairs;       /* merges by (left, right) */
    uint32_t pair_mask;
    int32_t *specials, n_specials; /* special tokens with text, for parse_special */
    unsigned char special_first[256];
    /* SentencePiece: every token by its spelling (key, key_off: spaces as U+2581, the lookup of
       tok_map), and its score; byte-level BPE: key and key_off are bytes and off */
    int spm, space_prefix, pre; /* pre: a bitnet_pretokenizer */
    unsigned char *key;
    uint32_t *key_off;
    float *scores;
};

static int32_t bitnet__tok_find(const bitnet_tokenizer *t, const unsigned char *s, size_t n) {
    uint32_t h = bitnet__hash_bytes(s, n) & t->tok_mask;
    for (;; h = (h + 1) & t->tok_mask) {
        int32_t id = t->tok_map[h];
        if (id < 0) return -1;
        if (t->key_off[id + 1] - t->key_off[id] == n && memcmp(t->key + t->key_off[id], s, n) == 0) return id;
    }
}
static void bitnet__tok_index(bitnet_tokenizer *t, int32_t id) { /* the first of equal keys stays */
    const unsigned char *k = t->key + t->key_off[id];
    size_t n = t->key_off[id + 1] - t->key_off[id];
    uint32_t h = bitnet__hash_bytes(k, n) & t->tok_mask;
    if (bitnet__tok_find(t, k, n) >= 0) return;
    while (t->tok_map[h] >= 0) h = (h + 1) & t->tok_mask;
    t->tok_map[h] = id;
}
static const bitnet__pair *bitnet__pair_find(const bitnet_tokenizer *t, uint32_t a, uint32_t b) {
    uint32_t h = bitnet__hash_pair(a, b) & t->pair_mask;
    for (;; h = (h + 1) & t->pair_mask) {
        const bitnet__pair *e = &t->pairs[h];
        if (e->left == UINT32_MAX) return NULL;
        if (e->left == a && e->right == b) return e;
    }
}

BITNET_API void bitnet_tokenizer_free(bitnet_tokenizer *t) {
    if (!t) return;
    bitnet__free(t->off);
    bitnet__free(t->bytes);
    bitnet__free(t->special);
    bitnet__free(t->tok_map);
    bitnet__free(t->pairs);
    bitnet__free(t->specials);
    if (t->spm) bitnet__free(t->key), bitnet__free(t->key_off);
    bitnet__free(t->scores);
    bitnet__free(t);
}

static int bitnet__is_special_name(const unsigned char *s, size_t n) {
    return n >= 5 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>';
}

/* LLaMA 3's end of turn, when the metadata does not name it */
static void bitnet__tok_default_eot(bitnet_tokenizer *t) {
    int32_t k;
    for (k = 0; k < t->n_specials && t->eot < 0; k++) {
        int32_t id = t->specials[k];
        if (t->off[id + 1] - t->off[id] == 10 && memcmp(t->bytes + t->off[id], "<|eot_id|>", 10) == 0) t->eot = id;
    }
}

/* SentencePiece: each token kept as spelled (its key: every token is one, as llama.cpp looks them
   up) and as its piece: U+2581 back to spaces, a type-6 "<0xXX>" as its byte, specials verbatim,
   unused tokens empty. A byte's fallback: "<0xXX>", else the byte itself, else the unknown token. */
static bitnet_result bitnet__spm_create(const bitnet_tokenizer_desc *desc, uint64_t total, bitnet_tokenizer **out) {
    bitnet_tokenizer *t = (bitnet_tokenizer *)bitnet__calloc(1, sizeof *t);
    bitnet_result r = BITNET_OK;
    int32_t n = (int32_t)desc->n_tokens, i, unk = -1, b;
    uint32_t po = 0;
    if (!t) return BITNET_ERR_OUT_OF_MEMORY;
    t->n_vocab = n, t->bos = desc->bos, t->eos = desc->eos, t->eot = desc->eot;
    t->spm = 1, t->space_prefix = !desc->no_space_prefix;
    t->tok_mask = bitnet__table_size((uint64_t)n) - 1;
    t->off = (uint32_t *)bitnet__malloc(((size_t)n + 1) * sizeof(uint32_t));
    t->key_off = (uint32_t *)bitnet__malloc(((size_t)n + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char *)bitnet__malloc((size_t)total + 1); /* a piece is never longer than its key */
    t->key = (unsigned char *)bitnet__malloc((size_t)total + 1);
    t->special = (unsigned char *)bitnet__calloc((size_t)n, 1);
    t->tok_map = (int32_t *)bitnet__malloc(((size_t)t->tok_mask + 1) * sizeof(int32_t));
    t->specials = (int32_t *)bitnet__malloc((size_t)n * sizeof(int32_t));
    t->scores = (float *)bitnet__malloc((size_t)n * sizeof(float));
    if (!t->off || !t->key_off || !t->bytes || !t->key || !t->special || !t->tok_map || !t->specials || !t->scores) {
        r = BITNET_ERR_OUT_OF_MEMORY;
        goto done;
    }
    memset(t->tok_map, 0xFF, ((size_t)t->tok_mask + 1) * sizeof(int32_t));
    t->key_off[0] = t->off[0] = 0;
    for (i = 0; i < n; i++) {
        const unsigned char *s = (const unsigned char *)desc->tokens[i].ptr;
        size_t len = (size_t)desc->tokens[i].len, j;
        int type = desc->token_types ? desc->token_types[i] : 1;
        unsigned char *dst = t->bytes + po;
        t->scores[i] = desc->scores ? desc->scores[i] : 0.0f;
        if (t->scores[i] != t->scores[i]) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: token %d has a NaN score", (int)i);
            goto done;
        }
        if (len) memcpy(t->key + t->key_off[i], s, len);
        t->key_off[i + 1] = t->key_off[i] + (uint32_t)len;
        if (type == 2 || type == 3 || type == 4) { /* unknown, control, user-defined */
            if (len) memcpy(dst, s, len), po += (uint32_t)len;
            t->special[i] = 1;
            if (type == 2 && unk < 0) unk = i;
            if (len) t->specials[t->n_specials++] = i, t->special_first[s[0]] = 1;
        } else if (type == 6 && len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && bitnet__hex_digit(s[3]) >= 0 &&
                   bitnet__hex_digit(s[4]) >= 0) {
            dst[0] = (unsigned char)(bitnet__hex_digit(s[3]) * 16 + bitnet__hex_digit(s[4])), po++;
        } else if (type != 5) { /* (5: unused, no piece) */
            for (j = 0; j < len; j++) {
                if (j + 2 < len && s[j] == 0xE2 && s[j + 1] == 0x96 && s[j + 2] == 0x81) dst[0] = ' ', j += 2;
                else dst[0] = s[j];
                dst++, po++;
            }
        }
        t->off[i + 1] = po;
    }
    for (i = 0; i < n; i++)
        if (t->key_off[i + 1] > t->key_off[i]) bitnet__tok_index(t, i);
    for (b = 0; b < 256; b++) {
        static const char hex[] = "0123456789ABCDEF";
        unsigned char k[6] = {'<', '0', 'x', (unsigned char)hex[b >> 4], (unsigned char)hex[b & 15], '>'}, c = (unsigned char)b;
        int32_t id = bitnet__tok_find(t, k, 6);
        if (id < 0) id = bitnet__tok_find(t, &c, 1);
        if (id < 0) id = unk;
        if (id < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: no token for byte 0x%02X (no <0x%02X>, no such "
                            "token, no unknown token)", (unsigned)b, (unsigned)b);
            goto done;
        }
        t->byte_id[b] = id;
    }
    bitnet__tok_default_eot(t);
done:
    if (r != BITNET_OK) {
        bitnet_tokenizer_free(t);
        return r;
    }
    *out = t;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_tokenizer_create(const bitnet_tokenizer_desc *desc, bitnet_tokenizer **out) {
    bitnet_tokenizer *t;
    bitnet_result r = BITNET_OK;
    uint16_t b2c[256];
    int16_t c2b[324];
    uint64_t i, total = 0;
    int32_t *first_rank = NULL, *abm = NULL;
    unsigned char *scratch = NULL;
    size_t max_merge = 0;
    int32_t n;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    BITNET__CHECK_PTR(desc);
    BITNET__CHECK_PTR(desc->tokens);
    if (desc->n_tokens == 0 || desc->n_tokens > (uint64_t)INT32_MAX - 1)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenizer_create: %llu tokens", (unsigned long long)desc->n_tokens);
    if (!desc->merges && desc->n_merges) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenizer_create: 'merges' is NULL");
    if (desc->n_merges > (uint64_t)INT32_MAX)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenizer_create: %llu merges", (unsigned long long)desc->n_merges);
    n = (int32_t)desc->n_tokens;
    if (desc->bos < -1 || desc->bos >= n || desc->eos < -1 || desc->eos >= n || desc->eot < -1 || desc->eot >= n)
        return bitnet__err(BITNET_ERR_BAD_METADATA,
                           "bitnet_tokenizer_create: special ids bos %d eos %d eot %d outside the %d tokens",
                           (int)desc->bos, (int)desc->eos, (int)desc->eot, (int)n);
    for (i = 0; i < desc->n_tokens; i++) {
        if (!desc->tokens[i].ptr && desc->tokens[i].len)
            return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenizer_create: token %llu has no text", (unsigned long long)i);
        total += desc->tokens[i].len;
        if (total >= UINT32_MAX) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenizer_create: token text over 4 GiB");
    }
    if (desc->spm) return bitnet__spm_create(desc, total, out);
    if (desc->pre != BITNET_PRE_LLAMA3 && desc->pre != BITNET_PRE_FALCON3)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_tokenizer_create: pre-tokenizer %d", (int)desc->pre);
    bitnet__gpt2_tables(b2c, c2b);
    t = (bitnet_tokenizer *)bitnet__calloc(1, sizeof *t);
    if (!t) return BITNET_ERR_OUT_OF_MEMORY;
    t->pre = desc->pre;
    t->n_vocab = n;
    t->bos = desc->bos;
    t->eos = desc->eos;
    t->eot = desc->eot;
    t->tok_mask = bitnet__table_size((uint64_t)n) - 1;
    t->pair_mask = bitnet__table_size(desc->n_merges) - 1;
    t->off = (uint32_t *)bitnet__malloc(((size_t)n + 1) * sizeof(uint32_t));
    t->bytes = (unsigned char *)bitnet__malloc((size_t)total + 1);
    t->special = (unsigned char *)bitnet__calloc((size_t)n, 1);
    t->tok_map = (int32_t *)bitnet__malloc(((size_t)t->tok_mask + 1) * sizeof(int32_t));
    t->pairs = (bitnet__pair *)bitnet__malloc(((size_t)t->pair_mask + 1) * sizeof(bitnet__pair));
    t->specials = (int32_t *)bitnet__malloc((size_t)n * sizeof(int32_t));
    first_rank = (int32_t *)bitnet__malloc((size_t)n * sizeof(int32_t));
    if (!t->off || !t->bytes || !t->special || !t->tok_map || !t->pairs || !t->specials || !first_rank) {
        r = BITNET_ERR_OUT_OF_MEMORY;
        goto done;
    }
    memset(t->tok_map, 0xFF, ((size_t)t->tok_mask + 1) * sizeof(int32_t));
    memset(t->pairs, 0xFF, ((size_t)t->pair_mask + 1) * sizeof(bitnet__pair));
    for (i = 0; i < 256; i++) t->byte_id[i] = -1;
    t->key = t->bytes, t->key_off = t->off;
    /* Tokens: decode byte-level strings, keep special ones verbatim, index the regular ones. */
    t->off[0] = 0;
    for (i = 0; i < desc->n_tokens; i++) {
        const unsigned char *s = (const unsigned char *)desc->tokens[i].ptr;
        size_t len = (size_t)desc->tokens[i].len;
        unsigned char *dst = t->bytes + t->off[i];
        int type = desc->token_types ? desc->token_types[i] : 1;
        int special = desc->token_types ? (type == 3 || type == 4) : bitnet__is_special_name(s, len);
        long k;
        first_rank[i] = INT32_MAX;
        if (special) {
            if (len) memcpy(dst, s, len);
            t->off[i + 1] = t->off[i] + (uint32_t)len;
            t->special[i] = 1;
            if (len) {
                t->specials[t->n_specials++] = (int32_t)i;
                t->special_first[s[0]] = 1;
            }
            continue;
        }
        k = bitnet__gpt2_decode(c2b, s, len, dst);
        if (k < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: token %llu '%.*s' is not a byte-level string",
                            (unsigned long long)i, (int)BITNET__MIN(len, 64), (const char *)s);
            goto done;
        }
        t->off[i + 1] = t->off[i] + (uint32_t)k;
        if (k == 0) continue; /* an empty token can never be produced */
        if (bitnet__tok_find(t, dst, (size_t)k) < 0) {
            bitnet__tok_index(t, (int32_t)i);
            if (k == 1) t->byte_id[dst[0]] = (int32_t)i;
        }
    }
    for (i = 0; i < 256; i++)
        if (t->byte_id[i] < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA,
                            "bitnet_tokenizer_create: no token for byte 0x%02x (not a byte-level vocabulary)", (unsigned)i);
            goto done;
        }
    /* Merges: "a b" -> (id a, id b) -> (priority, id of ab). Under LLaMA 3's pre-tokenizer a token's
       priority is the rank of its first merge, so a list holding every split of a token behaves
       like tiktoken's ranks; under Falcon 3's a merge's own rank, as llama.cpp and Hugging Face rank. */
    for (i = 0; i < desc->n_merges; i++) max_merge = BITNET__MAX(max_merge, (size_t)desc->merges[i].len);
    scratch = (unsigned char *)bitnet__malloc(max_merge + 1);
    abm = (int32_t *)bitnet__malloc((size_t)desc->n_merges * 3 * sizeof(int32_t) + 1);
    if (!scratch || !abm) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    /* two passes: the merges' token ids first, then their pairs into the table, each slot asked of
       the cache 8 merges ahead (the table's random slots were most of the build: 2B-4T's 280,147
       merges, BENCHMARKS.md session 46) */
    for (i = 0; i < desc->n_merges; i++) {
        const unsigned char *s = (const unsigned char *)desc->merges[i].ptr, *sp;
        size_t len = (size_t)desc->merges[i].len;
        long ka, kb;
        int32_t a, b, m;
        sp = (s && len) ? (const unsigned char *)memchr(s, ' ', len) : NULL;
        ka = sp ? bitnet__gpt2_decode(c2b, s, (size_t)(sp - s), scratch) : -1;
        kb = ka > 0 ? bitnet__gpt2_decode(c2b, sp + 1, len - (size_t)(sp - s) - 1, scratch + ka) : -1;
        a = ka > 0 ? bitnet__tok_find(t, scratch, (size_t)ka) : -1;
        b = kb > 0 ? bitnet__tok_find(t, scratch + ka, (size_t)kb) : -1;
        m = (a >= 0 && b >= 0) ? bitnet__tok_find(t, scratch, (size_t)(ka + kb)) : -1;
        if (m < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA,
                            "bitnet_tokenizer_create: merge %llu '%.*s' does not join two tokens into a token",
                            (unsigned long long)i, (int)BITNET__MIN(len, 64), s ? (const char *)s : "");
            goto done;
        }
        if (first_rank[m] == INT32_MAX) first_rank[m] = (int32_t)i;
        abm[3 * i] = a, abm[3 * i + 1] = b, abm[3 * i + 2] = m;
    }
    for (i = 0; i < desc->n_merges; i++) {
        const int32_t a = abm[3 * i], b = abm[3 * i + 1], m = abm[3 * i + 2];
        uint32_t h;
#if defined(__GNUC__)
        if (i + 8 < desc->n_merges)
            __builtin_prefetch(t->pairs + (bitnet__hash_pair((uint32_t)abm[3 * i + 24], (uint32_t)abm[3 * i + 25]) & t->pair_mask), 1);
#endif
        h = bitnet__hash_pair((uint32_t)a, (uint32_t)b) & t->pair_mask;
        for (; t->pairs[h].left != UINT32_MAX; h = (h + 1) & t->pair_mask)
            if (t->pairs[h].left == (uint32_t)a && t->pairs[h].right == (uint32_t)b) break;
        if (t->pairs[h].left == UINT32_MAX) { /* the first of duplicate merges wins */
            t->pairs[h].left = (uint32_t)a;
            t->pairs[h].right = (uint32_t)b;
            t->pairs[h].prio = t->pre == BITNET_PRE_LLAMA3 ? first_rank[m] : (int32_t)i;
            t->pairs[h].merged = m;
        }
    }
    bitnet__tok_default_eot(t);
done:
    bitnet__free(first_rank);
    bitnet__free(scratch);
    bitnet__free(abm);
    if (r != BITNET_OK) {
        bitnet_tokenizer_free(t);
        return r;
    }
    *out = t;
    return BITNET_OK;
}

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct bitnet__sym { int32_t id, prev, next; } bitnet__sym;
/* A candidate merge of symbols left and right, lowest prio first, then leftmost. Byte-level BPE:
   prio the rank, lid and rid the ids it joins, merged the result; SentencePiece: prio orders the
   join's score high to low (bitnet__score_prio), merged is the join's length in bytes. */
typedef struct bitnet__cand { int32_t prio, left, right, lid, rid, merged; } bitnet__cand;
typedef struct bitnet__ssym { int32_t start, n, prev, next; } bitnet__ssym;  /* spm: a span of the escaped text */
typedef struct bitnet__enc {
    const bitnet_tokenizer *t;
    int32_t *ids;
    size_t cap, count;
    bitnet__sym *sym;      /* scratch for the longest piece so far */
    bitnet__cand *heap;
    size_t scratch_cap, heap_cap, nheap;
    unsigned char *esc;    /* spm: the text with spaces as U+2581, and its characters */
    bitnet__ssym *ssym;
    size_t esc_cap;
} bitnet__enc;

static void bitnet__emit(bitnet__enc *e, int32_t id) {
    if (e->count < e->cap) e->ids[e->count] = id;
    e->count++;
}
static int bitnet__cand_less(const bitnet__cand *a, const bitnet__cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left); /* lowest rank, then leftmost */
}
static void bitnet__heap_add(bitnet__enc *e, const bitnet__cand *c) {
    size_t i;
    for (i = e->nheap++; i > 0 && bitnet__cand_less(c, &e->heap[(i - 1) / 2]); i = (i - 1) / 2) e->heap[i] = e->heap[(i - 1) / 2];
    e->heap[i] = *c;
}
/* Room for the candidates of n symbols: n - 1 at first, at most 2 more a merge. */
static bitnet_result bitnet__heap_reserve(bitnet__enc *e, size_t n) {
    size_t cap = BITNET__MAX(n, 2 * e->heap_cap), bytes;
    if (n <= e->heap_cap) return BITNET_OK;
    if (cap > (size_t)INT32_MAX || !bitnet__mul_size(cap, 3 * sizeof(bitnet__cand), &bytes))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_tokenize: a piece of %zu bytes is too long", n);
    bitnet__free(e->heap);
    e->heap_cap = 0;
    e->heap = (bitnet__cand *)bitnet__malloc(bytes);
    if (!e->heap) return BITNET_ERR_OUT_OF_MEMORY;
    e->heap_cap = cap;
    return BITNET_OK;
}
static void bitnet__heap_push(bitnet__enc *e, int32_t left, int32_t right) {
    const bitnet__pair *p = bitnet__pair_find(e->t, (uint32_t)e->sym[left].id, (uint32_t)e->sym[right].id);
    bitnet__cand c;
    if (!p) return;
    c.prio = p->prio;
    c.left = left;
    c.right = right;
    c.lid = e->sym[left].id;
    c.rid = e->sym[right].id;
    c.merged = p->merged;
    bitnet__heap_add(e, &c);
}
static bitnet__cand bitnet__heap_pop(bitnet__enc *e) {
    bitnet__cand top = e->heap[0], last = e->heap[--e->nheap];
    size_t i = 0, n = e->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bitnet__cand_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!bitnet__cand_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = last;
    return top;
}

static bitnet_result bitnet__bpe_piece(bitnet__enc *e, const unsigned char *s, size_t n) {
    const bitnet_tokenizer *t = e->t;
    int32_t id, i;
    if (n == 1) { bitnet__emit(e, t->byte_id[s[0]]); return BITNET_OK; }
    if (t->pre == BITNET_PRE_LLAMA3 && (id = bitnet__tok_find(t, s, n)) >= 0) { /* a whole token (as tiktoken; */
        bitnet__emit(e, id);                                                      /* llama.cpp's ignore_merges) */
        return BITNET_OK;
    }
    BITNET__TRY(bitnet__heap_reserve(e, n));
    if (n > e->scratch_cap) {
        size_t cap = BITNET__MAX(n, 2 * e->scratch_cap);
        bitnet__free(e->sym);
        e->scratch_cap = 0;
        e->sym = (bitnet__sym *)bitnet__malloc(cap * sizeof(bitnet__sym)); /* (at most 2 heap_cap: no overflow) */
        if (!e->sym) return BITNET_ERR_OUT_OF_MEMORY;
        e->scratch_cap = cap;
    }
    for (i = 0; i < (int32_t)n; i++) {
        e->sym[i].id = t->byte_id[s[i]];
        e->sym[i].prev = i - 1;
        e->sym[i].next = i + 1 < (int32_t)n ? i + 1 : -1;
    }
    e->nheap = 0;
    for (i = 0; i + 1 < (int32_t)n; i++) bitnet__heap_push(e, i, i + 1);
    while (e->nheap) {
        bitnet__cand c = bitnet__heap_pop(e);
        bitnet__sym *l = &e->sym[c.left], *r = &e->sym[c.right];
        if (l->id != c.lid || l->next != c.right || r->id != c.rid) continue; /* stale */
        l->id = c.merged;
        l->next = r->next;
        if (r->next >= 0) e->sym[r->next].prev = c.left;
        r->id = -1;
        if (l->prev >= 0) bitnet__heap_push(e, l->prev, c.left);
        if (l->next >= 0) bitnet__heap_push(e, c.left, l->next);
    }
    for (i = 0; i >= 0; i = e->sym[i].next) bitnet__emit(e, e->sym[i].id);
    return BITNET_OK;
}

/* ---- SentencePiece ---- */

/* A score as a prio: higher scores lower (an order-preserving map of the float's bits; -0 as +0). */
static int32_t bitnet__score_prio(float score) {
    uint32_t u;
    if (score == 0.0f) score = 0.0f;
    memcpy(&u, &score, 4);
    u = (u & 0x80000000u) ? ~u : u | 0x80000000u; /* increasing with the score */
    return (int32_t)(~u ^ 0x80000000u);
}
static void bitnet__spm_push(bitnet__enc *e, int32_t left, int32_t right) {
    const bitnet__ssym *l = &e->ssym[left], *r = &e->ssym[right];
    int32_t id = bitnet__tok_find(e->t, e->esc + l->start, (size_t)(l->n + r->n));
    bitnet__cand c;
    if (id < 0) return;
    c.prio = bitnet__score_prio(e->t->scores[id]), c.left = left, c.right = right, c.lid = c.rid = 0, c.merged = l->n + r->n;
    bitnet__heap_add(e, &c);
}
/* One fragment of text between special tokens (llama.cpp's llm_tokenizer_spm_session): a space
   first when prefix, spaces as U+2581, characters by their UTF-8 lead byte, merges, then each
   symbol as its token or its bytes' fallback tokens. */
static bitnet_result bitnet__spm_text(bitnet__enc *e, const unsigned char *s, size_t n, int prefix) {
    static const unsigned char len_of[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4}; /* by the top 4 bits */
    const bitnet_tokenizer *t = e->t;
    size_t m = prefix ? 3 : 0, i, k;
    int32_t ns = 0, j;
    for (i = 0; i < n; i++) m += s[i] == ' ' ? 3 : 1;
    if (m > (size_t)INT32_MAX / 4) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_tokenize: a text of %zu bytes is too long", n);
    BITNET__TRY(bitnet__heap_reserve(e, m));
    if (m > e->esc_cap) {
        size_t cap = BITNET__MAX(m, 2 * e->esc_cap);
        bitnet__free(e->esc), bitnet__free(e->ssym);
        e->esc_cap = 0;
        e->esc = (unsigned char *)bitnet__malloc(cap);
        e->ssym = (bitnet__ssym *)bitnet__malloc(cap * sizeof(bitnet__ssym));
        if (!e->esc || !e->ssym) return BITNET_ERR_OUT_OF_MEMORY;
        e->esc_cap = cap;
    }
    for (i = 0, k = 0; i < n + (prefix != 0); i++) {
        unsigned char c = prefix ? (i ? s[i - 1] : ' ') : s[i];
        if (c == ' ') e->esc[k++] = 0xE2, e->esc[k++] = 0x96, e->esc[k++] = 0x81;
        else e->esc[k++] = c;
    }
    for (k = 0; k < m; ns++) {
        size_t l = BITNET__MIN((size_t)len_of[e->esc[k] >> 4], m - k);
        e->ssym[ns].start = (int32_t)k, e->ssym[ns].n = (int32_t)l, e->ssym[ns].prev = ns - 1;
        k += l;
        e->ssym[ns].next = k == m ? -1 : ns + 1;
    }
    e->nheap = 0;
    for (j = 1; j < ns; j++) bitnet__spm_push(e, j - 1, j);
    while (e->nheap) {
        bitnet__cand c = bitnet__heap_pop(e);
        bitnet__ssym *l = &e->ssym[c.left], *r = &e->ssym[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.merged) continue; /* stale */
        l->n += r->n, r->n = 0;
        l->next = r->next;
        if (r->next >= 0) e->ssym[r->next].prev = c.left;
        if (l->prev >= 0) bitnet__spm_push(e, l->prev, c.left);
        if (l->next >= 0) bitnet__spm_push(e, c.left, l->next);
    }
    for (j = ns ? 0 : -1; j >= 0; j = e->ssym[j].next) {
        const unsigned char *p = e->esc + e->ssym[j].start;
        int32_t id = bitnet__tok_find(t, p, (size_t)e->ssym[j].n);
        if (id >= 0) bitnet__emit(e, id);
        else
            for (k = 0; k < (size_t)e->ssym[j].n; k++) bitnet__emit(e, t->byte_id[p[k]]);
    }
    return BITNET_OK;
}

static bitnet_result bitnet__encode_text(bitnet__enc *e, const unsigned char *s, size_t n) {
    size_t p = 0;
    bitnet__pretok it = {0, 0, 0};
    it.pre = e->t->pre;
    while (p < n) {
        size_t q = bitnet__pretok_next(&it, s, n, p);
        BITNET__TRY(bitnet__bpe_piece(e, s + p, q - p));
        p = q;
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_tokenize(const bitnet_tokenizer *t, const char *text, size_t len, int add_bos,
                                         int parse_special, int32_t *ids, size_t cap, size_t *n_out) {
    const unsigned char *s = (const unsigned char *)text;
    bitnet__enc e;
    bitnet_result r = BITNET_OK;
    size_t p = 0, seg = 0;
    int after_special = 1; /* spm: a fragment at the start or after a special token gets the space */
    BITNET__CHECK_PTR(t);
    BITNET__CHECK_PTR(n_out);
    *n_out = 0;
    if (!text && len) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenize: 'text' is NULL");
    if (!ids && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenize: 'ids' is NULL");
    if (add_bos && t->bos < 0)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_tokenize: add_bos, but the vocabulary has no BOS");
    memset(&e, 0, sizeof e);
    e.t = t;
    e.ids = ids;
    e.cap = cap;
    if (add_bos) bitnet__emit(&e, t->bos);
    while (r == BITNET_OK && seg < len) {
        int32_t sid = -1, k;
        size_t slen = 0, q;
        p = len;
        if (parse_special) /* the next special token's text; the longest one at a position */
            for (q = seg; q < len && sid < 0; q++) {
                if (!t->special_first[s[q]]) continue;
                for (k = 0; k < t->n_specials; k++) {
                    int32_t id = t->specials[k];
                    size_t l = t->off[id + 1] - t->off[id];
                    if (l <= len - q && l > slen && memcmp(s + q, t->bytes + t->off[id], l) == 0) { sid = id; slen = l; }
                }
                if (sid >= 0) p = q;
            }
        if (!t->spm) r = bitnet__encode_text(&e, s + seg, p - seg);
        else if (p > seg) r = bitnet__spm_text(&e, s + seg, p - seg, t->space_prefix && after_special), after_special = 0;
        if (sid >= 0) bitnet__emit(&e, sid), after_special = 1;
        seg = p + slen;
    }
    bitnet__free(e.sym);
    bitnet__free(e.heap);
    bitnet__free(e.esc);
    bitnet__free(e.ssym);
    if (r != BITNET_OK) return r;
    *n_out = e.count;
    if (e.count > cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenize: %zu tokens, room for %zu", e.count, cap);
    return BITNET_OK;
}

BITNET_API size_t bitnet_tokenize_bound(const bitnet_tokenizer *t, size_t len) {
    if (t && t->spm) return len > (SIZE_MAX - 4) / 3 ? SIZE_MAX : 3 * len + 4;
    return len == SIZE_MAX ? SIZE_MAX : len + 1;
}

BITNET_API bitnet_result bitnet_token_piece(const bitnet_tokenizer *t, int32_t id, const char **bytes, size_t *len) {
    BITNET__CHECK_PTR(t);
    BITNET__CHECK_PTR(bytes);
    BITNET__CHECK_PTR(len);
    if (id < 0 || id >= t->n_vocab)
        return bitnet__err(BITNET_ERR_BAD_TOKEN, "bitnet_token_piece: id %d outside the vocabulary of %d", (int)id, (int)t->n_vocab);
    *bytes = (const char *)t->bytes + t->off[id];
    *len = t->off[id + 1] - t->off[id];
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_detokenize(const bitnet_tokenizer *t, const int32_t *ids, size_t n, char *buf,
                                           size_t cap, size_t *len_out) {
    size_t i, total = 0;
    BITNET__CHECK_PTR(t);
    BITNET__CHECK_PTR(len_out);
    *len_out = 0;
    if (!ids && n) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_detokenize: 'ids' is NULL");
    if (!buf && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_detokenize: 'buf' is NULL");
    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return bitnet__err(BITNET_ERR_BAD_TOKEN, "bitnet_detokenize: ids[%zu] = %d outside the vocabulary of %d", i,
                               (int)ids[i], (int)t->n_vocab);
        if (!bitnet__add_size(total, t->off[ids[i] + 1] - t->off[ids[i]], &total))
            return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_detokenize: text length overflows");
    }
    *len_out = total;
    if (total >= cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_detokenize: %zu bytes and a NUL, room for %zu", total, cap);
    for (total = 0, i = 0; i < n; i++) {
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(buf + total, t->bytes + t->off[ids[i]], l);
        total += l;
    }
    buf[total] = 0;
    return BITNET_OK;
}

BITNET_API int32_t bitnet_tokenizer_vocab_size(const bitnet_tokenizer *t) { return t ? t->n_vocab : 0; }

BITNET_API void bitnet_tokenizer_special_ids(const bitnet_tokenizer *t, int32_t *bos, int32_t *eos, int32_t *eot) {
    if (bos) *bos = t ? t->bos : -1;
    if (eos) *eos = t ? t->eos : -1;
    if (eot) *eot = t ? t->eot : -1;
}

/* ---- vocabulary from a tiktoken file --------------------------------------------------------- */

static int bitnet__b64_value(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}
/* Standard base64 with padding; returns the byte count or -1. */
static long bitnet__b64_decode(const char *s, size_t n, unsigned char *out) {
    size_t i;
    long k = 0;
    if (n == 0 || n % 4) return -1;
    for (i = 0; i < n; i += 4) {
        int v[4], j, pad = 0;
        for (j = 0; j < 4; j++) {
            v[j] = bitnet__b64_value((unsigned char)s[i + j]);
            if (s[i + j] == '=' && i + 4 == n && j >= 2) { v[j] = 0; pad++; }
            else if (v[j] < 0 || pad) return -1;
        }
        out[k++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
        if (pad < 2) out[k++] = (unsigned char)((v[1] & 15) << 4 | v[2] >> 2);
        if (pad < 1) out[k++] = (unsigned char)((v[2] & 3) << 6 | v[3]);
    }
    return k;
}

/* LLaMA 3.1's names for the special tokens after the base vocabulary. */
static void bitnet__llama3_special_name(int i, char *buf, size_t cap) {
    static const char *const fixed[11] = {"begin_of_text", "end_of_text", "reserved_special_token_0",
        "reserved_special_token_1", "finetune_right_pad_id", "reserved_special_token_2", "start_header_id",
        "end_header_id", "eom_id", "eot_id", "python_tag"};
    if (i < 11) snprintf(buf, cap, "<|%s|>", fixed[i]);
    else snprintf(buf, cap, "<|reserved_special_token_%d|>", i - 8);
}

BITNET_API void bitnet_vocab_free(bitnet_vocab *v) {
    if (!v) return;
    bitnet__free(v->tokens);
    bitnet__free(v->merges);
    bitnet__free(v->token_types);
    bitnet__free(v->storage_);
    memset(v, 0, sizeof *v);
}

typedef struct bitnet__split { int32_t left, right; } bitnet__split;

BITNET_API bitnet_result bitnet_vocab_from_tiktoken(const char *path, int n_special, bitnet_vocab *out) {
    FILE *f = NULL;
    char *file = NULL, *p, *end, *sp;
    long fsize;
    bitnet_result r = BITNET_OK;
    size_t n_lines = 0, n_base = 0, raw_bytes = 0, store_bytes = 0, pos, i, n_merges = 0;
    unsigned char *raw = NULL;           /* the tokens' bytes, in rank order */
    size_t *raw_off = NULL;              /* n_base + 1 offsets into raw */
    int32_t *map = NULL;                 /* bytes -> rank, open addressing */
    uint32_t mask = 0;
    bitnet__split *splits = NULL;
    char *store = NULL;
    uint16_t b2c[256];
    int16_t c2b[324];
    BITNET__CHECK_PTR(out);
    memset(out, 0, sizeof *out);
    BITNET__CHECK_PTR(path);
    if (n_special < 0 || n_special > (1 << 20))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_vocab_from_tiktoken: n_special %d", n_special);
    bitnet__gpt2_tables(b2c, c2b);
    /* Read the file whole. */
    f = fopen(path, "rb");
    if (!f) return bitnet__err(BITNET_ERR_IO, "bitnet_vocab_from_tiktoken: cannot open '%s': %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (fsize = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        r = bitnet__err(BITNET_ERR_IO, "bitnet_vocab_from_tiktoken: cannot size '%s'", path);
        goto done;
    }
    file = (char *)bitnet__malloc((size_t)fsize + 1);
    if (!file) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    if (fread(file, 1, (size_t)fsize, f) != (size_t)fsize) {
        r = bitnet__err(BITNET_ERR_IO, "bitnet_vocab_from_tiktoken: cannot read '%s'", path);
        goto done;
    }
    file[fsize] = 0;
    /* Pass 1: count lines and bytes. Each line is "base64 rank"; the ranks must be 0 .. n-1. */
    for (p = file; p < file + fsize; p = end + 1) {
        end = (char *)memchr(p, '\n', (size_t)(file + fsize - p));
        if (!end) end = file + fsize;
        if (end > p) { n_lines++; raw_bytes += (size_t)(end - p); }
    }
    if (n_lines == 0 || n_lines > (size_t)INT32_MAX - (size_t)n_special) {
        r = bitnet__err(BITNET_ERR_CORRUPT, "bitnet_vocab_from_tiktoken: '%s' has %zu lines", path, n_lines);
        goto done;
    }
    n_base = n_lines;
    raw = (unsigned char *)bitnet__malloc(raw_bytes + 1);
    raw_off = (size_t *)bitnet__calloc(n_base + 1, sizeof(size_t));
    mask = bitnet__table_size(n_base) - 1;
    map = (int32_t *)bitnet__malloc(((size_t)mask + 1) * sizeof(int32_t));
    if (!raw || !raw_off || !map) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    memset(map, 0xFF, ((size_t)mask + 1) * sizeof(int32_t));
    /* Pass 2: decode into rank order (lengths first, in raw_off[rank + 1], then bytes). */
    {
        size_t line = 0;
        unsigned char *tmp = raw; /* decoded bytes never exceed the base64 text */
        size_t *len_of = raw_off + 1;
        size_t *src_of = NULL;
        src_of = (size_t *)bitnet__malloc(n_base * sizeof(size_t));
        if (!src_of) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
        for (i = 0; i < n_base; i++) src_of[i] = SIZE_MAX;
        pos = 0;
        for (p = file; p < file + fsize; p = end + 1) {
            long k;
            char *num_end;
            unsigned long rank;
            end = (char *)memchr(p, '\n', (size_t)(file + fsize - p));
            if (!end) end = file + fsize;
            if (end == p) continue;
            line++;
            sp = (char *)memchr(p, ' ', (size_t)(end - p));
            k = sp ? bitnet__b64_decode(p, (size_t)(sp - p), tmp + pos) : -1;
            rank = sp ? strtoul(sp + 1, &num_end, 10) : 0;
            if (k <= 0 || !sp || sp[1] < '0' || sp[1] > '9' || (num_end != end && !(num_end + 1 == end && *num_end == '\r')) ||
                rank >= n_base || src_of[rank] != SIZE_MAX) {
                r = bitnet__err(BITNET_ERR_CORRUPT,
                                "bitnet_vocab_from_tiktoken: '%s' line %zu is not \"base64 rank\" with a new rank below %zu",
                                path, line, n_base);
                bitnet__free(src_of);
                goto done;
            }
            src_of[rank] = pos;
            len_of[rank] = (size_t)k;
            pos += (size_t)k;
        }
        /* Into rank order: raw_off[i + 1] holds token i's length until the loop turns it into starts. */
        {
            unsigned char *ordered = (unsigned char *)bitnet__malloc(pos + 1);
            size_t o = 0;
            if (!ordered) { bitnet__free(src_of); r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
            for (i = 0; i < n_base; i++) {
                size_t l = raw_off[i + 1];
                memcpy(ordered + o, raw + src_of[i], l);
                raw_off[i] = o;
                o += l;
            }
            raw_off[n_base] = o;
            bitnet__free(raw);
            raw = ordered;
            raw_bytes = o;
        }
        bitnet__free(src_of);
    }
    /* Index the tokens by bytes (the first of duplicates wins). */
    for (i = 0; i < n_base; i++) {
        const unsigned char *s = raw + raw_off[i];
        size_t l = raw_off[i + 1] - raw_off[i];
        uint32_t h = bitnet__hash_bytes(s, l) & mask;
        for (;; h = (h + 1) & mask) {
            int32_t id = map[h];
            if (id < 0) { map[h] = (int32_t)i; break; }
            if (raw_off[id + 1] - raw_off[id] == l && memcmp(raw + raw_off[id], s, l) == 0) break;
        }
    }
#define BITNET__VFIND(s, l, res) \
    do { uint32_t h_ = bitnet__hash_bytes((s), (l)) & mask; (res) = -1; \
        for (;; h_ = (h_ + 1) & mask) { int32_t id_ = map[h_]; if (id_ < 0) break; \
            if (raw_off[id_ + 1] - raw_off[id_] == (l) && memcmp(raw + raw_off[id_], (s), (l)) == 0) { \
                (res) = id_; break; } } \
    } while (0)
    /* Merges: every split of a token into two tokens, in rank order of the token, then of the halves.
       Count them (and their text) first. */
    {
        size_t max_len = 0, cap_splits;
        for (i = 0; i < n_base; i++) max_len = BITNET__MAX(max_len, raw_off[i + 1] - raw_off[i]);
        cap_splits = max_len ? max_len : 1;
        splits = (bitnet__split *)bitnet__malloc(cap_splits * sizeof(bitnet__split));
        if (!splits) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
        for (i = 0; i < n_base; i++) {
            size_t l = raw_off[i + 1] - raw_off[i], k;
            store_bytes += 2 * l;
            for (k = 1; k < l; k++) {
                int32_t a, b;
                BITNET__VFIND(raw + raw_off[i], k, a);
                if (a < 0) continue;
                BITNET__VFIND(raw + raw_off[i] + k, l - k, b);
                if (b < 0) continue;
                n_merges++;
                store_bytes += 2 * l + 1;
            }
        }
    }
    store_bytes += (size_t)n_special * 40;
    out->n_tokens = (uint64_t)(n_base + (size_t)n_special);
    out->n_merges = (uint64_t)n_merges;
    out->tokens = (bitnet_gguf_str *)bitnet__calloc((size_t)out->n_tokens, sizeof(bitnet_gguf_str));
    out->merges = (bitnet_gguf_str *)bitnet__calloc(n_merges ? n_merges : 1, sizeof(bitnet_gguf_str));
    out->token_types = (int32_t *)bitnet__calloc((size_t)out->n_tokens, sizeof(int32_t));
    store = (char *)bitnet__malloc(store_bytes + 1);
    out->storage_ = store;
    if (!out->tokens || !out->merges || !out->token_types || !store) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    pos = 0;
    for (i = 0; i < n_base; i++) {
        size_t l = raw_off[i + 1] - raw_off[i];
        out->tokens[i].ptr = store + pos;
        out->tokens[i].len = bitnet__gpt2_encode(b2c, raw + raw_off[i], l, store + pos);
        pos += (size_t)out->tokens[i].len;
        out->token_types[i] = 1; /* normal */
    }
    for (i = 0; i < (size_t)n_special; i++) {
        bitnet__llama3_special_name((int)i, store + pos, 40);
        out->tokens[n_base + i].ptr = store + pos;
        out->tokens[n_base + i].len = strlen(store + pos);
        pos += (size_t)out->tokens[n_base + i].len;
        out->token_types[n_base + i] = 3; /* control */
    }
    n_merges = 0;
    for (i = 0; i < n_base; i++) {
        size_t l = raw_off[i + 1] - raw_off[i], k, ns = 0, x, y;
        for (k = 1; k < l; k++) {
            int32_t a, b;
            BITNET__VFIND(raw + raw_off[i], k, a);
            if (a < 0) continue;
            BITNET__VFIND(raw + raw_off[i] + k, l - k, b);
            if (b < 0) continue;
            splits[ns].left = a;
            splits[ns].right = b;
            ns++;
        }
        for (x = 1; x < ns; x++) { /* insertion sort by (left rank, right rank); ns is small */
            bitnet__split v = splits[x];
            for (y = x; y > 0; y--) {
                bitnet__split u = splits[y - 1];
                if (u.left < v.left || (u.left == v.left && u.right <= v.right)) break;
                splits[y] = u;
            }
            splits[y] = v;
        }
        for (x = 0; x < ns; x++) {
            bitnet_gguf_str a = out->tokens[splits[x].left], b = out->tokens[splits[x].right];
            char *m = store + pos;
            memcpy(m, a.ptr, (size_t)a.len);
            m[a.len] = ' ';
            memcpy(m + a.len + 1, b.ptr, (size_t)b.len);
            out->merges[n_merges].ptr = m;
            out->merges[n_merges].len = a.len + 1 + b.len;
            pos += (size_t)out->merges[n_merges].len;
            n_merges++;
        }
    }
#undef BITNET__VFIND
done:
    if (f) fclose(f);
    bitnet__free(file);
    bitnet__free(raw);
    bitnet__free(raw_off);
    bitnet__free(map);
    bitnet__free(splits);
    if (r != BITNET_OK) bitnet_vocab_free(out);
    return r;
}

/* ---- from GGUF metadata -------------------------------------------------------------------- */

static bitnet_result bitnet__gguf_token_id(const bitnet_gguf *g, const char *key, int32_t *out) {
    uint32_t v = 0;
    *out = -1;
    if (bitnet_gguf_find_key(g, key) < 0) return BITNET_OK;
    BITNET__TRY(bitnet_gguf_get_u32(g, key, &v));
    if (v > (uint32_t)INT32_MAX) return bitnet__err(BITNET_ERR_BAD_METADATA, "%s = %u is not a token id", key, v);
    *out = (int32_t)v;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_tokenizer_from_gguf(const bitnet_gguf *g, bitnet_tokenizer **out) {
    bitnet_tokenizer_desc d;
    bitnet_gguf_str model, pre, *strs = NULL;
    bitnet_gguf_type et;
    uint64_t n_tok = 0, n_mer = 0, n_types = 0, i;
    int32_t *types = NULL;
    float *scores = NULL;
    bitnet_result r;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    BITNET__CHECK_PTR(g);
    memset(&d, 0, sizeof d);
    r = bitnet_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (r != BITNET_OK) return r;
    d.spm = bitnet__str_is(model, "llama");
    if (!d.spm && !bitnet__str_is(model, "gpt2"))
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.ggml.model is '%.*s'; byte-level BPE ('gpt2') and SentencePiece "
                           "('llama') are supported", (int)BITNET__MIN(model.len, 64), model.ptr);
    if (d.spm && bitnet_gguf_find_key(g, "tokenizer.ggml.add_space_prefix") >= 0) {
        int v = 1;
        BITNET__TRY(bitnet_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &v));
        d.no_space_prefix = !v;
    }
    if (!d.spm && bitnet_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 && bitnet_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == BITNET_OK) {
        if (bitnet__str_is(pre, "falcon3") || bitnet__str_is(pre, "falcon_e")) d.pre = BITNET_PRE_FALCON3;
        else if (!bitnet__str_is(pre, "llama-bpe") && !bitnet__str_is(pre, "llama3") && !bitnet__str_is(pre, "llama-v3"))
            bitnet__log(BITNET_LOG_WARN, "tokenizer.ggml.pre is '%.*s'; using the LLaMA 3 pre-tokenizer",
                        (int)BITNET__MIN(pre.len, 64), pre.ptr);
    }
    BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok));
    if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.tokens is not an array of strings");
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_mer));
        if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.merges is not an array of strings");
    }
    if (n_tok == 0 || n_tok > (uint64_t)INT32_MAX - 1 || n_mer > (uint64_t)INT32_MAX)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "%llu tokens and %llu merges", (unsigned long long)n_tok,
                           (unsigned long long)n_mer);
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        const unsigned char *raw;
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types));
        if (et != BITNET_GGUF_INT32 || n_types != n_tok)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.token_type is not %llu int32 values",
                               (unsigned long long)n_tok);
        raw = (const unsigned char *)bitnet_gguf_arr_data(g, "tokenizer.ggml.token_type");
        if (!raw) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.token_type has no data");
        types = (int32_t *)bitnet__malloc((size_t)n_tok * sizeof(int32_t));
        if (!types) return BITNET_ERR_OUT_OF_MEMORY;
        for (i = 0; i < n_tok; i++) /* little-endian, maybe unaligned */
            types[i] = (int32_t)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                                 (uint32_t)raw[4 * i + 3] << 24);
    }
    if (d.spm && bitnet_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) { /* (absent: all 0, as llama.cpp) */
        const unsigned char *raw;
        uint64_t n_sc = 0;
        r = bitnet_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n_sc);
        if (r == BITNET_OK && (et != BITNET_GGUF_FLOAT32 || n_sc != n_tok))
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.scores is not %llu float32 values", (unsigned long long)n_tok);
        raw = r == BITNET_OK ? (const unsigned char *)bitnet_gguf_arr_data(g, "tokenizer.ggml.scores") : NULL;
        if (r == BITNET_OK && !raw) r = bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.scores has no data");
        scores = r == BITNET_OK ? (float *)bitnet__malloc((size_t)n_tok * sizeof(float)) : NULL;
        if (r == BITNET_OK && !scores) r = BITNET_ERR_OUT_OF_MEMORY;
        for (i = 0; r == BITNET_OK && i < n_tok; i++) memcpy(&scores[i], raw + 4 * i, 4); /* (maybe unaligned) */
        if (r != BITNET_OK) { bitnet__free(types); return r; }
    }
    strs = (bitnet_gguf_str *)bitnet__calloc((size_t)(n_tok + n_mer), sizeof(bitnet_gguf_str));
    if (!strs) { bitnet__free(types), bitnet__free(scores); return BITNET_ERR_OUT_OF_MEMORY; }
    r = BITNET_OK;
    for (i = 0; i < n_tok && r == BITNET_OK; i++) r = bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &strs[i]);
    for (i = 0; i < n_mer && r == BITNET_OK; i++) r = bitnet_gguf_arr_str(g, "tokenizer.ggml.merges", i, &strs[n_tok + i]);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.bos_token_id", &d.bos);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.eos_token_id", &d.eos);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.eot_token_id", &d.eot);
    if (d.spm && d.bos < 0 && bitnet_gguf_find_key(g, "tokenizer.ggml.bos_token_id") < 0 && n_tok > 1) d.bos = 1; /* llama.cpp's */
    if (d.spm && d.eos < 0 && bitnet_gguf_find_key(g, "tokenizer.ggml.eos_token_id") < 0 && n_tok > 2) d.eos = 2;
    if (r == BITNET_OK) {
        d.tokens = strs;
        d.n_tokens = n_tok;
        d.merges = d.spm ? NULL : strs + n_tok;
        d.n_merges = d.spm ? 0 : n_mer;
        d.token_types = types;
        d.scores = scores;
        r = bitnet_tokenizer_create(&d, out);
    }
    bitnet__free(strs);
    bitnet__free(types);
    bitnet__free(scores);
    return r;
}

/* ---- chat format ----------------------------------------------------------------------------- */

/* Per template: its start, the opening of a system, user and assistant message (the last is also
   the generation prompt), the end of a message, and whether contents are trimmed. */
typedef struct bitnet__chat_tmpl { const char *bos, *open[3], *end; int trim; } bitnet__chat_tmpl;
static const bitnet__chat_tmpl bitnet__chat_tmpls[3] = {
    {"<|begin_of_text|>", {"System: ", "User: ", "Assistant: "}, "<|eot_id|>", 1},
    {"<|begin_of_text|>",
     {"<|start_header_id|>system<|end_header_id|>\n\n", "<|start_header_id|>user<|end_header_id|>\n\n",
      "<|start_header_id|>assistant<|end_header_id|>\n\n"},
     "<|eot_id|>", 1},
    {"", {"<|system|>\n", "<|user|>\n", "<|assistant|>\n"}, "\n", 0}};
static const bitnet__chat_tmpl *bitnet__chat_tmpl_of(int t) { /* NULL for AUTO and unknown values */
    return t >= 1 && t <= (int)(sizeof bitnet__chat_tmpls / sizeof bitnet__chat_tmpls[0]) ? &bitnet__chat_tmpls[t - 1] : NULL;
}
BITNET_API bitnet_result bitnet_chat_format(bitnet_chat_template tmpl, const bitnet_chat_message *msgs, size_t n,
                                            int add_generation_prompt, char *buf, size_t cap, size_t *len_out) {
    static const char *const roles[3] = {"system", "user", "assistant"};
    const bitnet__chat_tmpl *t = bitnet__chat_tmpl_of((int)tmpl);
    size_t pass, i, len = 0;
    BITNET__CHECK_PTR(len_out);
    *len_out = 0;
    if (!msgs && n) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: 'msgs' is NULL");
    if (!buf && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: 'buf' is NULL");
    if (!t) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_chat_format: template %d", (int)tmpl);
    for (pass = 0; pass < 2; pass++) { /* measure, then write */
        len = 0;
#define BITNET__PUT(s, l) do { if (pass) memcpy(buf + len, (s), (l)); len += (l); } while (0)
        BITNET__PUT(t->bos, strlen(t->bos));
        for (i = 0; i < n; i++) {
            const char *role = msgs[i].role, *c = msgs[i].content;
            size_t a = 0, b, adv, k;
            if (!role || !c) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: message %zu has a NULL role or content", i);
            for (k = 0; k < 3 && strcmp(role, roles[k]) != 0; k++) {}
            if (k == 3)
                return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_chat_format: message %zu has role '%s' (system, user or assistant)",
                                   i, role);
            b = strlen(c);
            while (t->trim && a < b) { /* trim white space (Unicode White_Space) at both ends */
                uint32_t cp = bitnet__utf8_next((const unsigned char *)c + a, b - a, &adv);
                if (cp == BITNET__CP_INVALID || bitnet__uni_class(cp) != BITNET__CL_SPACE) break;
                a += adv;
            }
            while (t->trim && b > a) {
                size_t s = b - 1;
                uint32_t cp;
                while (s > a && ((unsigned char)c[s] & 0xC0) == 0x80 && b - s < 4) s--;
                cp = bitnet__utf8_next((const unsigned char *)c + s, b - s, &adv);
                if (s + adv != b || cp == BITNET__CP_INVALID || bitnet__uni_class(cp) != BITNET__CL_SPACE) break;
                b = s;
            }
            BITNET__PUT(t->open[k], strlen(t->open[k]));
            BITNET__PUT(c + a, b - a);
            BITNET__PUT(t->end, strlen(t->end));
        }
        if (add_generation_prompt) BITNET__PUT(t->open[2], strlen(t->open[2]));
#undef BITNET__PUT
        if (!pass) {
            *len_out = len;
            if (len >= cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_chat_format: %zu bytes and a NUL, room for %zu", len, cap);
        }
    }
    buf[len] = 0;
    return BITNET_OK;
}

/* >>sampler =================================================================================== */

/* splitmix64 turns any seed (0 included) into a well-mixed state; xorshift64* steps it. */
BITNET_API uint64_t bitnet_rng_seed(uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 0x9E3779B97F4A7C15ull; /* xorshift must not start at 0 */
}

static double bitnet__rng_uniform(uint64_t *state) { /* [0, 1) with 53 bits */
    uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return (double)((x * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

/* The seed a zero sampler seed stands for: BITNET_SEED, else a fixed one under
   BITNET_DETERMINISTIC=1, else the clock. */
static uint64_t bitnet__default_seed(void) {
    const char *env = bitnet__getenv("BITNET_SEED");
    const char *det = bitnet__getenv("BITNET_DETERMINISTIC");
    if (env) return (uint64_t)strtoull(env, NULL, 10);
    if (det && strcmp(det, "0") != 0) return 42;
    return (uint64_t)time(NULL) ^ (uint64_t)(bitnet__now() * 1e9);
}

typedef struct bitnet__scand { float logit; int32_t id; } bitnet__scand;

/* Order: larger logit first, then smaller id, so ties break the same way as the greedy argmax. */
static int bitnet__scand_before(const bitnet__scand *a, const bitnet__scand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}
static int bitnet__scand_cmp(const void *pa, const void *pb) {
    const bitnet__scand *a = (const bitnet__scand *)pa, *b = (const bitnet__scand *)pb;
    return bitnet__scand_before(a, b) ? -1 : (bitnet__scand_before(b, a) ? 1 : 0);
}

static int bitnet__i32_cmp(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The first maximum; NaN never wins, and all NaN gives 0 (the GPU head's rule, bf_argmax_pick). */
static int32_t bitnet__argmax(const float *x, int32_t n) {
    int32_t i, best = -1;
    for (i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

/* Keeps the k best of c[0..n) in c[0..k) (a min-heap of size k: O(n log k)), sorted best first. */
static size_t bitnet__top_k(bitnet__scand *c, size_t n, size_t k) {
    size_t i;
    if (k >= n) {
        qsort(c, n, sizeof *c, bitnet__scand_cmp);
        return n;
    }
    for (i = 0; i < n; i++) {
        size_t j, len = i < k ? i : k;
        bitnet__scand v = c[i];
        if (i >= k) {
            if (!bitnet__scand_before(&v, &c[0])) continue;
            /* replace the root (the worst kept) and sift down */
            j = 0;
            for (;;) {
                size_t l = 2 * j + 1, r = l + 1, w = j;
                bitnet__scand *cw = &v;
                if (l < k && bitnet__scand_before(cw, &c[l])) w = l, cw = &c[l];
                if (r < k && bitnet__scand_before(cw, &c[r])) w = r;
                if (w == j) break;
                c[j] = c[w];
                j = w;
            }
            c[j] = v;
        } else { /* sift up into the heap of size len */
            j = len;
            while (j > 0 && bitnet__scand_before(&c[(j - 1) / 2], &v)) {
                c[j] = c[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            c[j] = v;
        }
    }
    qsort(c, k, sizeof *c, bitnet__scand_cmp);
    return k;
}

/* The sampler's parameters in range for a vocabulary of n_vocab (bitnet_sample, and bitnet_generate
   before any GPU path). */
static bitnet_result bitnet__sampler_check(const bitnet_sampler_params *d, int32_t n_vocab, const char *who) {
    size_t i;
    if (!(d->temperature >= 0) || !(d->top_p >= 0 && d->top_p <= 1) || !(d->min_p >= 0 && d->min_p <= 1) ||
        !(d->repeat_penalty >= 0) || d->top_k < 0 || d->repeat_last_n < 0 || !(fabsf(d->presence_penalty) <= FLT_MAX) ||
        !(fabsf(d->frequency_penalty) <= FLT_MAX))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: bad sampler parameters (temperature %g, top_k %d, top_p %g, "
                           "min_p %g, repeat_penalty %g, repeat_last_n %d, presence_penalty %g, frequency_penalty %g)", who,
                           (double)d->temperature, (int)d->top_k, (double)d->top_p, (double)d->min_p, (double)d->repeat_penalty,
                           (int)d->repeat_last_n, (double)d->presence_penalty, (double)d->frequency_penalty);
    if (d->n_logit_bias > BITNET_MAX_LOGIT_BIAS || (d->n_logit_bias && !d->logit_bias))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: %zu logit bias entries %s", who, d->n_logit_bias,
                           d->n_logit_bias > BITNET_MAX_LOGIT_BIAS ? "(at most BITNET_MAX_LOGIT_BIAS, 1024)" : "and logit_bias is NULL");
    for (i = 0; i < d->n_logit_bias; i++)
        if (d->logit_bias[i].token < 0 || d->logit_bias[i].token >= n_vocab ||
            !(d->logit_bias[i].bias <= FLT_MAX && (d->logit_bias[i].bias >= -FLT_MAX || d->logit_bias[i].bias == -INFINITY)))
            return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: logit_bias[%zu] is token %d, bias %g (a token below %d; a finite bias "
                               "or -INFINITY)", who, i, (int)d->logit_bias[i].token, (double)d->logit_bias[i].bias, (int)n_vocab);
    return BITNET_OK;
}

/* Greedy: temperature 0 or top-k 1 (the argmax, after the repetition penalty). */
static int bitnet__sampler_greedy(const bitnet_sampler_params *d) { return d->temperature == 0 || d->top_k == 1; }

/* The repetition penalty is on (1 and 0 leave the logits alone). */
static int bitnet__sampler_penalty(const bitnet_sampler_params *d) { return d->repeat_penalty > 0 && d->repeat_penalty != 1; }
/* Anything changes the logits before the choice (bias, penalties): step 1 of bitnet_sample. */
BITNET__UNUSED static int bitnet__sampler_adjusts(const bitnet_sampler_params *d) {
    return bitnet__sampler_penalty(d) || d->presence_penalty != 0 || d->frequency_penalty != 0 || d->n_logit_bias;
}
/* d without step 1 (for a row whose adjustments were applied already) */
BITNET__UNUSED static bitnet_sampler_params bitnet__sampler_unadjusted(const bitnet_sampler_params *d) {
    bitnet_sampler_params u = *d;
    u.repeat_penalty = 1, u.presence_penalty = 0, u.frequency_penalty = 0, u.n_logit_bias = 0, u.logit_bias = NULL;
    return u;
}
/* a * b rounded to float on its own (no fused multiply-add: the device's kernel rounds each step) */
static float bitnet__fmul(float a, float b) {
    volatile float v = a * b;
    return v;
}

/* Min-p's floor under the best value mx (both logit / temperature): the one expression every path uses. */
static float bitnet__min_p_floor(float mx, float min_p) { return min_p > 0 ? mx + logf(min_p) : -INFINITY; }

/* The repetition penalty's window: the last last_n tokens of history (0: 64) */
static size_t bitnet__penalty_win(int32_t last_n) { return last_n ? (size_t)last_n : 64; }
/* ... and where it starts in a history of n tokens */
static size_t bitnet__penalty_from(size_t n, int32_t last_n) {
    size_t w = bitnet__penalty_win(last_n);
    return n > w ? n - w : 0;
}

/* The tokens the penalties apply to: the distinct ids in [0, n_vocab) among the last last_n (0: 64)
   of history, ascending, in a new array of *n (freed by the caller); ids[n + i] counts ids[i]. */
static bitnet_result bitnet__penalty_ids(const int32_t *history, size_t n_history, int32_t last_n, int32_t n_vocab,
                                         int32_t **out, size_t *n) {
    size_t from = bitnet__penalty_from(n_history, last_n), i, m = 0, w = n_history - from;
    int32_t *ids = (int32_t *)bitnet__malloc((2 * w + 1) * sizeof *ids);
    if (!ids) return BITNET_ERR_OUT_OF_MEMORY;
    memcpy(ids, history + from, w * sizeof *ids);
    qsort(ids, w, sizeof *ids, bitnet__i32_cmp);
    for (i = 0; i < w; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) continue;
        if (m && ids[m - 1] == ids[i]) ids[w + m - 1]++;
        else ids[m] = ids[i], ids[w + m++] = 1;
    }
    memmove(ids + m, ids + w, m * sizeof *ids);
    *out = ids, *n = m;
    return BITNET_OK;
}

/* 1. of bitnet_sample: the logit bias in order, then once per distinct token among the last
   repeat_last_n of history the repetition penalty (CTRL style: divide positive logits, multiply
   negative ones) and minus count * frequency_penalty + presence_penalty; each step rounded as the
   device's kernel rounds it. */
static bitnet_result bitnet__penalize(float *logits, int32_t n_vocab, const bitnet_sampler_params *d, const int32_t *history,
                                      size_t n_history) {
    const int pen = bitnet__sampler_penalty(d), pf = d->presence_penalty != 0 || d->frequency_penalty != 0;
    int32_t *ids;
    size_t m, i;
    for (i = 0; i < d->n_logit_bias; i++) logits[d->logit_bias[i].token] += d->logit_bias[i].bias;
    if ((!pen && !pf) || !n_history) return BITNET_OK;
    BITNET__TRY(bitnet__penalty_ids(history, n_history, d->repeat_last_n, n_vocab, &ids, &m));
    for (i = 0; i < m; i++) {
        float l = logits[ids[i]];
        if (pen) l = l > 0 ? l / d->repeat_penalty : l * d->repeat_penalty;
        if (pf) l -= bitnet__fmul((float)(d->frequency_penalty != 0 ? ids[m + i] : 1), d->frequency_penalty) + d->presence_penalty;
        logits[ids[i]] = l;
    }
    bitnet__free(ids);
    return BITNET_OK;
}

/* e^x for x <= 0 (the softmax of a draw), rounded to float from double arithmetic in which every step
   is one IEEE operation (no fused multiply-add: a volatile keeps each product rounded on its own):
   x = (32 e + j) ln2/32 + r, e^x = 2^e 2^(j/32) e^r, e^r a degree-5 polynomial (|r| <= ln2/64). The CUDA
   forward's bf_exp_det does the same operations, so a draw on the device and one here give the same
   token. (15 ns against expf's 4-5 here; a chain of software fma() took 55.) */
static const double bitnet__exp2_32[32] = {
    1.0, 1.0218971486541166, 1.0442737824274138, 1.0671404006768237, 1.0905077326652577, 1.1143867425958924,
    1.1387886347566916, 1.1637248587775775, 1.189207115002721, 1.215247359980469, 1.241857812073484, 1.2690509571917332,
    1.2968395546510096, 1.3252366431597413, 1.3542555469368927, 1.383909881963832, 1.4142135623730951, 1.4451808069770467,
    1.4768261459394993, 1.5091644275934228, 1.5422108254079407, 1.5759808451078865, 1.6104903319492543, 1.645755478153965,
    1.681792830507429, 1.718619298122478, 1.7562521603732995, 1.7947090750031072, 1.8340080864093424, 1.8741676341103,
    1.9152065613971474, 1.9571441241754002};
static double bitnet__dmul(double a, double b) {
    volatile double v = a * b;
    return v;
}
static float bitnet__exp_det(float x) {
    double t, n, r, p, sc;
    uint64_t bits;
    int ni, j;
    if (!(x >= -104.0f)) return x == x ? 0.0f : x; /* (NaN stays NaN, as expf keeps it) */
    t = (double)x;
    n = (bitnet__dmul(t, 46.16624130844683) + 6755399441055744.0) - 6755399441055744.0; /* round(x 32/ln2) */
    r = (t - bitnet__dmul(n, 0.021660849392475257)) - bitnet__dmul(n, 2.303438301614937e-14); /* ln2/32 in two parts */
    p = 1.0 + bitnet__dmul(r, 1.0 + bitnet__dmul(r, 0.5 + bitnet__dmul(r, 1.0 / 6 + bitnet__dmul(r, 1.0 / 24 + bitnet__dmul(r, 1.0 / 120)))));
    ni = (int)n, j = ni & 31;
    bits = (uint64_t)(int64_t)((ni - j) / 32 + 1023) << 52;
    memcpy(&sc, &bits, 8);
    return (float)(bitnet__dmul(bitnet__exp2_32[j], p) * sc);
}

/* Steps 5-7 of bitnet_sample, on the n >= 1 candidates c (values logit / temperature) that passed
   min-p: top-k, softmax over what is left, top-p, the draw. The GPU's sampled decoding enters here
   with the device's k best (bitnet__gpu_sample), or runs the same steps on the device (bf_draw, its
   twin: change both): the same logits give the same token every way. */
static int32_t bitnet__sample_from(bitnet__scand *c, size_t n, const bitnet_sampler_params *d, uint64_t *rng) {
    size_t i, keep;
    double sum, r, acc;
    float mx;
    int32_t out;
    /* 5. top-k (sorts what it keeps); top-p needs the order too */
    if (d->top_k > 0) n = bitnet__top_k(c, n, (size_t)d->top_k);
    else if (d->top_p > 0 && d->top_p < 1) qsort(c, n, sizeof *c, bitnet__scand_cmp);
    /* 6. softmax over the candidates, then top-p: the smallest prefix whose mass reaches top_p */
    mx = c[0].logit;
    for (i = 1; i < n; i++) mx = c[i].logit > mx ? c[i].logit : mx;
    sum = 0;
    for (i = 0; i < n; i++) sum += (c[i].logit = bitnet__exp_det(c[i].logit - mx)); /* now unnormalised probabilities */
    keep = n;
    if (d->top_p > 0 && d->top_p < 1) {
        acc = 0;
        for (i = 0; i < n; i++) {
            acc += c[i].logit;
            if (acc >= (double)d->top_p * sum) { keep = i + 1; break; }
        }
        for (sum = 0, i = 0; i < keep; i++) sum += c[i].logit;
    }
    /* 7. draw */
    r = bitnet__rng_uniform(rng) * sum;
    acc = 0;
    out = c[keep - 1].id;
    for (i = 0; i < keep; i++) {
        acc += c[i].logit;
        if (r < acc) { out = c[i].id; break; }
    }
    return out;
}

BITNET_API bitnet_result bitnet_sample(float *logits, int32_t n_vocab, const bitnet_sampler_params *p,
                                       const int32_t *history, size_t n_history, uint64_t *rng, int32_t *out) {
    bitnet_sampler_params d;
    bitnet__scand *c;
    size_t n, i;
    float mx;
    BITNET__CHECK_PTR(logits);
    BITNET__CHECK_PTR(out);
    if (n_vocab <= 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_sample: n_vocab is %d", (int)n_vocab);
    if (n_history && !history) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_sample: history is NULL but n_history is %zu", n_history);
    memset(&d, 0, sizeof d);
    if (p) d = *p;
    BITNET__TRY(bitnet__sampler_check(&d, n_vocab, "bitnet_sample"));
    BITNET__TRY(bitnet__penalize(logits, n_vocab, &d, history, n_history)); /* 1. */
    /* 2. greedy: temperature 0 or top-k 1 */
    if (bitnet__sampler_greedy(&d)) {
        *out = bitnet__argmax(logits, n_vocab);
        return BITNET_OK;
    }
    if (!rng) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_sample: rng is NULL and temperature is %g", (double)d.temperature);
    c = (bitnet__scand *)bitnet__malloc((size_t)n_vocab * sizeof *c);
    if (!c) return BITNET_ERR_OUT_OF_MEMORY;
    /* 3. temperature; 4. min-p needs only the maximum (of the values that are not NaN), so it
       prunes before any sorting */
    for (mx = -INFINITY, i = 0; i < (size_t)n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    mx /= d.temperature;
    {
        float floor_logit = bitnet__min_p_floor(mx, d.min_p);
        for (i = n = 0; i < (size_t)n_vocab; i++) {
            float l = logits[i] / d.temperature;
            if (l >= floor_logit && l == l) c[n].logit = l, c[n++].id = (int32_t)i;
        }
    }
    if (n == 0) { /* all NaN: there is nothing to sample from */
        bitnet__free(c);
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_sample: the logits are all NaN");
    }
    *out = bitnet__sample_from(c, n, &d, rng);
    bitnet__free(c);
    return BITNET_OK;
}

/* >>grammar =================================================================================== */

/* GBNF (llama.cpp's notation) compiled to rules, each a list of alternatives, each a run of
   elements ended by END: a character set, its negation, or a rule. Groups and repetitions become
   rules of their own (x* is R ::= x R | empty), so a text's place in the grammar is a set of
   pushdown stacks. A stack holds element positions, its top the next element to match (always a
   character set); under the top, where each enclosing rule goes on. Nothing is pushed where
   nothing follows, so right recursion (every repetition) does not grow a stack. An empty stack
   is a whole sentence. */
enum { BITNET__GE_END, BITNET__GE_RULE, BITNET__GE_CHAR, BITNET__GE_NCHAR };
typedef struct bitnet__gel { uint32_t kind, a, n; } bitnet__gel; /* sets: ranges a .. a+n; RULE: rule a */
typedef struct bitnet__galt { uint32_t rule, start; } bitnet__galt;
typedef struct bitnet__grule { const char *name; uint32_t len, defined, owner; } bitnet__grule;
struct bitnet_grammar {
    bitnet__gel *el;      /* every alternative's elements, each alternative ended by END */
    uint32_t *rng;        /* character ranges: lo, hi (inclusive) */
    uint32_t *alt;        /* rule r's alternatives start at el[alt[rule_alt[r]] .. alt[rule_alt[r + 1] - 1]] */
    uint32_t *rule_alt;
    uint32_t n_rules, root;
};

#define BITNET__G_MAX_RULES 4096    /* named and made (groups, repetitions) */
#define BITNET__G_MAX_ELEMS (1u << 20)
#define BITNET__G_MAX_REPEAT 1000   /* x{m,n}: m, n at most this */
#define BITNET__G_MAX_NEST 64       /* groups in groups */
#define BITNET__G_MAX_STACKS 4096   /* stacks a text may be in at once (ambiguity) */
#define BITNET__G_MAX_HELD (1u << 18) /* rule steps those stacks hold together (ambiguity times nesting) */
#define BITNET__G_MAX_DEPTH 4096    /* rules open at once (nesting in the text) */
#define BITNET__G_MAX_CHAIN 1024    /* rules entered in a row before a character */

typedef struct bitnet__gp { /* the parser */
    const char *text, *p, *end;
    bitnet__gel *el; size_t n_el, cap_el;
    uint32_t *rng; size_t n_rng, cap_rng;
    bitnet__galt *alt; size_t n_alt, cap_alt;
    bitnet__grule *rule; size_t n_rule, cap_rule;
    uint32_t cur; /* the named rule being parsed (messages) */
    int nest;
} bitnet__gp;
typedef struct bitnet__gseq { bitnet__gel *v; size_t n, cap; } bitnet__gseq;

static bitnet_result bitnet__gp_fail(const bitnet__gp *gp, const char *what) {
    const char *q;
    int line = 1, col = 1;
    for (q = gp->text; q < gp->p && q < gp->end; q++) (*q == '\n') ? (line++, col = 1) : col++;
    return bitnet__err(BITNET_ERR_INVALID_ARG, "grammar: line %d, column %d: %s", line, col, what);
}
static bitnet_result bitnet__gseq_push(bitnet__gseq *s, uint32_t kind, uint32_t a, uint32_t n) {
    void *v = s->v;
    BITNET__TRY(bitnet__grow(&v, &s->cap, s->n + 1, sizeof *s->v));
    s->v = (bitnet__gel *)v;
    s->v[s->n].kind = kind, s->v[s->n].a = a, s->v[s->n++].n = n;
    return BITNET_OK;
}
static bitnet_result bitnet__gp_range(bitnet__gp *gp, uint32_t lo, uint32_t hi) {
    void *v = gp->rng;
    BITNET__TRY(bitnet__grow(&v, &gp->cap_rng, gp->n_rng + 2, sizeof *gp->rng));
    gp->rng = (uint32_t *)v;
    gp->rng[gp->n_rng++] = lo, gp->rng[gp->n_rng++] = hi;
    return BITNET_OK;
}
/* A rule by name (added undefined when new), or a made one (name NULL). */
static bitnet_result bitnet__gp_rule(bitnet__gp *gp, const char *name, size_t len, uint32_t *id) {
    size_t i;
    void *v = gp->rule;
    if (name)
        for (i = 0; i < gp->n_rule; i++)
            if (gp->rule[i].name && gp->rule[i].len == len && memcmp(gp->rule[i].name, name, len) == 0) return *id = (uint32_t)i, BITNET_OK;
    if (gp->n_rule >= BITNET__G_MAX_RULES) return bitnet__gp_fail(gp, "more than 4096 rules, groups and repetitions");
    BITNET__TRY(bitnet__grow(&v, &gp->cap_rule, gp->n_rule + 1, sizeof *gp->rule));
    gp->rule = (bitnet__grule *)v;
    gp->rule[gp->n_rule].name = name, gp->rule[gp->n_rule].len = (uint32_t)len;
    gp->rule[gp->n_rule].defined = name == NULL, gp->rule[gp->n_rule].owner = gp->cur;
    *id = (uint32_t)gp->n_rule++;
    return BITNET_OK;
}
/* Appends an alternative of rule: its n elements, then END. */
static bitnet_result bitnet__gp_alt(bitnet__gp *gp, uint32_t rule, const bitnet__gel *e, size_t n) {
    void *v = gp->el, *w = gp->alt;
    if (gp->n_el + n + 1 > BITNET__G_MAX_ELEMS) return bitnet__gp_fail(gp, "the grammar grows past 2^20 elements (repetition counts?)");
    BITNET__TRY(bitnet__grow(&v, &gp->cap_el, gp->n_el + n + 1, sizeof *gp->el));
    gp->el = (bitnet__gel *)v;
    BITNET__TRY(bitnet__grow(&w, &gp->cap_alt, gp->n_alt + 1, sizeof *gp->alt));
    gp->alt = (bitnet__galt *)w;
    gp->alt[gp->n_alt].rule = rule, gp->alt[gp->n_alt++].start = (uint32_t)gp->n_el;
    if (n) memcpy(gp->el + gp->n_el, e, n * sizeof *e);
    gp->n_el += n;
    gp->el[gp->n_el].kind = BITNET__GE_END, gp->el[gp->n_el].a = gp->el[gp->n_el].n = 0;
    gp->n_el++;
    return BITNET_OK;
}

/* Spaces, tabs and # comments; newlines too where nl (inside groups, after ::= and |). */
static void bitnet__gp_space(bitnet__gp *gp, int nl) {
    while (gp->p < gp->end) {
        char c = *gp->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) gp->p++;
        else if (c == '#') while (gp->p < gp->end && *gp->p != '\n' && *gp->p != '\r') gp->p++;
        else break;
    }
}
static int bitnet__gp_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }
static int bitnet__gp_hex(const bitnet__gp *gp, int n, uint32_t *v) {
    int i;
    for (*v = 0, i = 0; i < n; i++) {
        char c = gp->p + i < gp->end ? gp->p[i] : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}
/* One character of a "string" or a [class]: UTF-8, or an escape (\n \r \t \\ \" \[ \] \- \xHH
   \uHHHH \UHHHHHHHH). */
static bitnet_result bitnet__gp_char(bitnet__gp *gp, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)gp->p;
    size_t left = (size_t)(gp->end - gp->p), n, i;
    if (!left) return bitnet__gp_fail(gp, "unexpected end inside a string or class");
    if (*u == '\\') {
        char c = left > 1 ? (char)u[1] : 0;
        int hex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        gp->p += 2;
        if (hex) {
            if (!bitnet__gp_hex(gp, hex, cp) || *cp > 0x10FFFF) return gp->p -= 2, bitnet__gp_fail(gp, "a bad \\x, \\u or \\U escape");
            gp->p += hex;
            return BITNET_OK;
        }
        switch (c) {
        case 'n': *cp = '\n'; return BITNET_OK;
        case 'r': *cp = '\r'; return BITNET_OK;
        case 't': *cp = '\t'; return BITNET_OK;
        case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)c; return BITNET_OK;
        default: return gp->p -= 2, bitnet__gp_fail(gp, "an unknown escape");
        }
    }
    n = *u < 0x80 ? 1 : (*u >> 5) == 6 ? 2 : (*u >> 4) == 14 ? 3 : (*u >> 3) == 30 ? 4 : 0;
    if (!n || n > left) return bitnet__gp_fail(gp, "text that is not UTF-8");
    *cp = n == 1 ? *u : (uint32_t)(*u & (0x7F >> n));
    for (i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) return bitnet__gp_fail(gp, "text that is not UTF-8");
        *cp = *cp << 6 | (u[i] & 0x3F);
    }
    gp->p += n;
    return BITNET_OK;
}
static int bitnet__gp_int(bitnet__gp *gp, uint32_t *v) {
    const char *q = gp->p;
    for (*v = 0; gp->p < gp->end && *gp->p >= '0' && *gp->p <= '9'; gp->p++)
        if ((*v = *v * 10 + (uint32_t)(*gp->p - '0')) > BITNET__G_MAX_REPEAT) return 0;
    return gp->p > q;
}

static bitnet_result bitnet__gp_alternates(bitnet__gp *gp, uint32_t rule, int nested);

/* The repetition after an item: s->v[at ..] becomes the item repeated. */
static bitnet_result bitnet__gp_repeat(bitnet__gp *gp, bitnet__gseq *s, size_t at) {
    char op = *gp->p;
    uint32_t m = 0, n = 0, r, opt = 0, i;
    int unbounded = 0;
    bitnet__gel x, two[2];
    bitnet_result res;
    gp->p++;
    if (op == '*') unbounded = 1;
    else if (op == '+') m = 1, unbounded = 1;
    else if (op == '?') n = 1;
    else { /* {m}, {m,}, {m,n} */
        bitnet__gp_space(gp, 0);
        if (!bitnet__gp_int(gp, &m)) return bitnet__gp_fail(gp, "a repetition count (0 to 1000) was expected");
        bitnet__gp_space(gp, 0);
        n = m;
        if (gp->p < gp->end && *gp->p == ',') {
            gp->p++;
            bitnet__gp_space(gp, 0);
            if (gp->p < gp->end && *gp->p == '}') unbounded = 1;
            else if (!bitnet__gp_int(gp, &n) || n < m) return bitnet__gp_fail(gp, "a bad upper repetition count (m to 1000)");
            bitnet__gp_space(gp, 0);
        }
        if (gp->p >= gp->end || *gp->p != '}') return bitnet__gp_fail(gp, "'}' was expected");
        gp->p++;
    }
    if (s->n == at) return BITNET_OK; /* an empty item repeated is empty */
    if (s->n - at > 1) { /* one element to repeat: the item as a rule of its own */
        BITNET__TRY(bitnet__gp_rule(gp, NULL, 0, &r));
        BITNET__TRY(bitnet__gp_alt(gp, r, s->v + at, s->n - at));
        s->n = at;
        BITNET__TRY(bitnet__gseq_push(s, BITNET__GE_RULE, r, 0));
    }
    x = s->v[at];
    s->n = at;
    for (i = 0; i < m; i++) BITNET__TRY(bitnet__gseq_push(s, x.kind, x.a, x.n));
    if (unbounded) { /* R ::= x R | empty */
        BITNET__TRY(bitnet__gp_rule(gp, NULL, 0, &r));
        two[0] = x, two[1].kind = BITNET__GE_RULE, two[1].a = r, two[1].n = 0;
        if ((res = bitnet__gp_alt(gp, r, two, 2)) != BITNET_OK || (res = bitnet__gp_alt(gp, r, NULL, 0)) != BITNET_OK) return res;
        return bitnet__gseq_push(s, BITNET__GE_RULE, r, 0);
    }
    for (i = m; i < n; i++) { /* O_j ::= x O_(j-1) | empty, nested so there is one way to match */
        BITNET__TRY(bitnet__gp_rule(gp, NULL, 0, &r));
        two[0] = x, two[1].kind = BITNET__GE_RULE, two[1].a = opt, two[1].n = 0;
        BITNET__TRY(bitnet__gp_alt(gp, r, two, i > m ? 2 : 1));
        BITNET__TRY(bitnet__gp_alt(gp, r, NULL, 0));
        opt = r;
    }
    return n > m ? bitnet__gseq_push(s, BITNET__GE_RULE, opt, 0) : BITNET_OK;
}

/* A sequence of items, up to '|', ')', the end, or (not nested) the end of the line. */
static bitnet_result bitnet__gp_sequence(bitnet__gp *gp, bitnet__gseq *s, int nested) {
    for (;;) {
        size_t at = s->n;
        uint32_t cp, hi, r;
        char c;
        bitnet__gp_space(gp, nested);
        if (gp->p >= gp->end) return BITNET_OK;
        c = *gp->p;
        if (c == '"') {
            for (gp->p++; gp->p < gp->end && *gp->p != '"';) {
                BITNET__TRY(bitnet__gp_char(gp, &cp));
                BITNET__TRY(bitnet__gseq_push(s, BITNET__GE_CHAR, (uint32_t)gp->n_rng / 2, 1));
                BITNET__TRY(bitnet__gp_range(gp, cp, cp));
            }
            if (gp->p >= gp->end) return bitnet__gp_fail(gp, "a string without its closing '\"'");
            gp->p++;
        } else if (c == '[') {
            uint32_t first = (uint32_t)gp->n_rng / 2, kind = BITNET__GE_CHAR;
            gp->p++;
            if (gp->p < gp->end && *gp->p == '^') kind = BITNET__GE_NCHAR, gp->p++;
            while (gp->p < gp->end && *gp->p != ']') {
                BITNET__TRY(bitnet__gp_char(gp, &cp));
                hi = cp;
                if (gp->end - gp->p > 1 && gp->p[0] == '-' && gp->p[1] != ']') {
                    gp->p++;
                    BITNET__TRY(bitnet__gp_char(gp, &hi));
                    if (hi < cp) return bitnet__gp_fail(gp, "a character range whose end is below its start");
                }
                BITNET__TRY(bitnet__gp_range(gp, cp, hi));
            }
            if (gp->p >= gp->end) return bitnet__gp_fail(gp, "a character class without its closing ']'");
            gp->p++;
            BITNET__TRY(bitnet__gseq_push(s, kind, first, (uint32_t)gp->n_rng / 2 - first));
        } else if (c == '.') {
            gp->p++;
            BITNET__TRY(bitnet__gseq_push(s, BITNET__GE_CHAR, (uint32_t)gp->n_rng / 2, 1));
            BITNET__TRY(bitnet__gp_range(gp, 0, 0x10FFFF));
        } else if (bitnet__gp_word(c)) {
            const char *name = gp->p;
            while (gp->p < gp->end && bitnet__gp_word(*gp->p)) gp->p++;
            BITNET__TRY(bitnet__gp_rule(gp, name, (size_t)(gp->p - name), &r));
            BITNET__TRY(bitnet__gseq_push(s, BITNET__GE_RULE, r, 0));
        } else if (c == '(') {
            if (gp->nest >= BITNET__G_MAX_NEST) return bitnet__gp_fail(gp, "groups nested more than 64 deep");
            gp->p++, gp->nest++;
            BITNET__TRY(bitnet__gp_rule(gp, NULL, 0, &r));
            BITNET__TRY(bitnet__gp_alternates(gp, r, 1));
            if (gp->p >= gp->end || *gp->p != ')') return bitnet__gp_fail(gp, "')' was expected");
            gp->p++, gp->nest--;
            BITNET__TRY(bitnet__gseq_push(s, BITNET__GE_RULE, r, 0));
        } else return BITNET_OK;
        bitnet__gp_space(gp, nested);
        if (gp->p < gp->end && (*gp->p == '*' || *gp->p == '+' || *gp->p == '?' || *gp->p == '{'))
            BITNET__TRY(bitnet__gp_repeat(gp, s, at));
    }
}

static bitnet_result bitnet__gp_alternates(bitnet__gp *gp, uint32_t rule, int nested) {
    for (;;) {
        bitnet__gseq s = {NULL, 0, 0};
        bitnet_result r = bitnet__gp_sequence(gp, &s, nested);
        if (r == BITNET_OK) r = bitnet__gp_alt(gp, rule, s.v, s.n);
        bitnet__free(s.v);
        if (r != BITNET_OK) return r;
        if (gp->p >= gp->end || *gp->p != '|') return BITNET_OK;
        gp->p++;
        bitnet__gp_space(gp, 1);
    }
}

static void bitnet__grammar_name(const bitnet__gp *gp, uint32_t r, char *buf, size_t cap) {
    const bitnet__grule *u = &gp->rule[r], *o = &gp->rule[u->owner];
    if (u->name) snprintf(buf, cap, "rule '%.*s'", (int)(u->len < 64 ? u->len : 64), u->name);
    else snprintf(buf, cap, "a group or repetition in rule '%.*s'", (int)(o->len < 64 ? o->len : 64), o->name ? o->name : "?");
}

/* No rule may reach itself before matching a character (left recursion, or a repetition of
   something that can be empty): matching would never end. Kahn's order over "r starts with s". */
static bitnet_result bitnet__grammar_check(const bitnet__gp *gp, const bitnet_grammar *g) {
    uint32_t nr = g->n_rules, r, a, i, *deg = NULL, *queue = NULL, done = 0, qh = 0, qt = 0;
    unsigned char *nullable = (unsigned char *)bitnet__calloc(nr, 1);
    int changed = 1;
    bitnet_result res = BITNET_OK;
    deg = (uint32_t *)bitnet__calloc(nr, sizeof *deg), queue = (uint32_t *)bitnet__calloc(nr, sizeof *queue);
    if (!nullable || !deg || !queue) { res = BITNET_ERR_OUT_OF_MEMORY; goto out; }
    while (changed) /* which rules can match the empty text */
        for (changed = 0, r = 0; r < nr; r++)
            for (a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
                for (i = g->alt[a]; g->el[i].kind == BITNET__GE_RULE && nullable[g->el[i].a]; i++) {}
                if (g->el[i].kind == BITNET__GE_END) nullable[r] = 1, changed = 1;
            }
    /* edges r -> s where s can come first in r; deg[s] counts them */
    for (r = 0; r < nr; r++)
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (i = g->alt[a]; g->el[i].kind == BITNET__GE_RULE; i++) {
                deg[g->el[i].a]++;
                if (!nullable[g->el[i].a]) break;
            }
    for (r = 0; r < nr; r++) if (!deg[r]) queue[qt++] = r;
    while (qh < qt) {
        r = queue[qh++], done++;
        for (a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (i = g->alt[a]; g->el[i].kind == BITNET__GE_RULE; i++) {
                if (--deg[g->el[i].a] == 0) queue[qt++] = g->el[i].a;
                if (!nullable[g->el[i].a]) break;
            }
    }
    if (done < nr) {
        char name[160];
        for (r = 0; r < nr && !deg[r]; r++) {}
        bitnet__grammar_name(gp, r, name, sizeof name);
        res = bitnet__err(BITNET_ERR_INVALID_ARG, "grammar: %s can reach itself before matching a character (left recursion, or a "
                          "repetition of something that can be empty)", name);
    }
out:
    bitnet__free(nullable), bitnet__free(deg), bitnet__free(queue);
    return res;
}

BITNET_API void bitnet_grammar_free(bitnet_grammar *g) {
    if (!g) return;
    bitnet__free(g->el), bitnet__free(g->rng), bitnet__free(g->alt), bitnet__free(g->rule_alt);
    bitnet__free(g);
}

BITNET_API bitnet_result bitnet_grammar_parse(const char *text, size_t len, bitnet_grammar **out) {
    bitnet__gp gp;
    bitnet_grammar *g = NULL;
    bitnet_result r = BITNET_OK;
    uint32_t id, i, root = UINT32_MAX;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (len && !text) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_grammar_parse: text is NULL");
    memset(&gp, 0, sizeof gp);
    gp.text = gp.p = text ? text : "", gp.end = gp.text + len;
    bitnet__gp_space(&gp, 1);
    while (r == BITNET_OK && gp.p < gp.end) { /* name ::= alternates, to the end of the line */
        const char *name = gp.p;
        while (gp.p < gp.end && bitnet__gp_word(*gp.p)) gp.p++;
        if (gp.p == name) { r = bitnet__gp_fail(&gp, "a rule name was expected"); break; }
        if ((r = bitnet__gp_rule(&gp, name, (size_t)(gp.p - name), &id)) != BITNET_OK) break;
        if (gp.rule[id].defined) { r = bitnet__gp_fail(&gp, "this rule is defined twice"); break; }
        gp.rule[id].defined = 1, gp.cur = id;
        bitnet__gp_space(&gp, 0);
        if (gp.end - gp.p < 3 || memcmp(gp.p, "::=", 3) != 0) { r = bitnet__gp_fail(&gp, "'::=' was expected"); break; }
        gp.p += 3;
        bitnet__gp_space(&gp, 1);
        if ((r = bitnet__gp_alternates(&gp, id, 0)) != BITNET_OK) break;
        if (gp.p < gp.end && *gp.p != '\n' && *gp.p != '\r') { r = bitnet__gp_fail(&gp, "the end of the line was expected"); break; }
        bitnet__gp_space(&gp, 1);
    }
    for (i = 0; r == BITNET_OK && i < gp.n_rule; i++) {
        if (!gp.rule[i].defined) {
            r = bitnet__err(BITNET_ERR_INVALID_ARG, "grammar: rule '%.*s' is used but not defined", (int)(gp.rule[i].len < 64 ? gp.rule[i].len : 64),
                            gp.rule[i].name);
        } else if (gp.rule[i].name && gp.rule[i].len == 4 && memcmp(gp.rule[i].name, "root", 4) == 0) root = i;
    }
    if (r == BITNET_OK && root == UINT32_MAX) r = bitnet__err(BITNET_ERR_INVALID_ARG, "grammar: there is no rule named 'root'");
    if (r == BITNET_OK && !(g = (bitnet_grammar *)bitnet__calloc(1, sizeof *g))) r = BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) { /* the alternatives, by rule (a counting sort) */
        g->n_rules = (uint32_t)gp.n_rule, g->root = root;
        g->el = gp.el, g->rng = gp.rng, gp.el = NULL, gp.rng = NULL;
        g->rule_alt = (uint32_t *)bitnet__calloc(gp.n_rule + 1, sizeof *g->rule_alt);
        g->alt = (uint32_t *)bitnet__calloc(gp.n_alt + 1, sizeof *g->alt);
        if (!g->rule_alt || !g->alt) r = BITNET_ERR_OUT_OF_MEMORY;
        else {
            for (i = 0; i < gp.n_alt; i++) g->rule_alt[gp.alt[i].rule + 1]++;
            for (i = 0; i < gp.n_rule; i++) g->rule_alt[i + 1] += g->rule_alt[i];
            for (i = 0; i < gp.n_alt; i++) g->alt[g->rule_alt[gp.alt[i].rule]++] = gp.alt[i].start;
            for (i = (uint32_t)gp.n_rule; i > 0; i--) g->rule_alt[i] = g->rule_alt[i - 1];
            g->rule_alt[0] = 0;
            r = bitnet__grammar_check(&gp, g);
        }
    }
    bitnet__free(gp.el), bitnet__free(gp.rng), bitnet__free(gp.alt), bitnet__free(gp.rule);
    if (r != BITNET_OK) {
        bitnet_grammar_free(g);
        return r;
    }
    *out = g;
    return BITNET_OK;
}

/* ---- JSON schemas as grammars (llama.cpp's --json-schema) ------------------------------------ */
/* Each schema becomes a GBNF expression; array items, property values and $ref targets get rules
   of their own ("sN"), so recursion through $ref works. Between tokens: nothing, a space, or a
   newline and up to 20 of indentation, so a model cannot run on in blanks. */
typedef struct bitnet__sb { /* a growing string */
    char *p;
    size_t n, cap;
    int oom;
} bitnet__sb;

static BITNET__PRINTF(2, 3) void bitnet__sb_printf(bitnet__sb *b, const char *fmt, ...) {
    va_list ap;
    int n;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        n = b->oom ? 0 : vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (b->oom || n < 0) { b->oom = 1; return; }
        if ((size_t)n < room) { b->n += (size_t)n; return; }
        {
            size_t cap = (b->cap + (size_t)n + 1) * 2;
            char *np = (char *)bitnet__malloc(cap);
            if (!np) { b->oom = 1; return; }
            if (b->n) memcpy(np, b->p, b->n);
            bitnet__free(b->p);
            b->p = np, b->cap = cap;
        }
    }
}

static const char bitnet__js_prims[] =
    "ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n";

typedef struct bitnet__js {
    const bitnet__json *j;
    bitnet__sb rules;            /* the grammar */
    int n_rules;
    int32_t refs[256];           /* $ref targets and their rules */
    int ref_rule[256], n_refs;
    char path[256];              /* where in the schema, for messages */
    bitnet_result err;
} bitnet__js;

static BITNET__PRINTF(2, 3) void bitnet__js_fail(bitnet__js *js, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    if (js->err != BITNET_OK) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    js->err = bitnet__err(BITNET_ERR_INVALID_ARG, "JSON schema at '%s': %s", js->path[0] ? js->path : "/", msg);
}

/* A JSON string's text as it goes inside a GBNF literal: JSON's escapes, then GBNF's on top. */
static void bitnet__js_lit_str(bitnet__sb *b, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    bitnet__sb_printf(b, "\\\"");
    for (; *s; s++) {
        if (*s == '"') bitnet__sb_printf(b, "\\\\\\\"");
        else if (*s == '\\') bitnet__sb_printf(b, "\\\\\\\\");
        else if (*s == '\n') bitnet__sb_printf(b, "\\\\n"); /* JSON's short escapes, as JSON.stringify writes them */
        else if (*s == '\t') bitnet__sb_printf(b, "\\\\t");
        else if (*s == '\r') bitnet__sb_printf(b, "\\\\r");
        else if (*s == '\b') bitnet__sb_printf(b, "\\\\b");
        else if (*s == '\f') bitnet__sb_printf(b, "\\\\f");
        else if (*s < 0x20) bitnet__sb_printf(b, "\\\\u%04x", *s);
        else bitnet__sb_printf(b, "%c", *s);
    }
    bitnet__sb_printf(b, "\\\"");
}

/* A JSON value written compactly (const, enum) inside a GBNF literal. */
static void bitnet__js_lit_json(const bitnet__json *j, bitnet__sb *b, int32_t v) {
    const bitnet__jnode *nd = &j->nodes[v];
    int32_t c;
    if (nd->type == BITNET__J_STR) {
        bitnet__js_lit_str(b, nd->str);
    } else if (nd->type == BITNET__J_NUM) {
        bitnet__sb_printf(b, nd->is_int ? "%.0f" : "%.17g", nd->num);
    } else if (nd->type == BITNET__J_ARR || nd->type == BITNET__J_OBJ) {
        bitnet__sb_printf(b, "%c", nd->type == BITNET__J_ARR ? '[' : '{');
        for (c = nd->first; c >= 0; c = j->nodes[c].next) {
            if (c != nd->first) bitnet__sb_printf(b, ",");
            if (nd->type == BITNET__J_OBJ) bitnet__js_lit_str(b, j->nodes[c].key), bitnet__sb_printf(b, ":");
            bitnet__js_lit_json(j, b, c);
        }
        bitnet__sb_printf(b, "%c", nd->type == BITNET__J_ARR ? ']' : '}');
    } else {
        bitnet__sb_printf(b, "%s", nd->type == BITNET__J_TRUE ? "true" : nd->type == BITNET__J_FALSE ? "false" : "null");
    }
}

static void bitnet__js_expr(bitnet__js *js, bitnet__sb *b, int32_t s, int depth);
static void bitnet__js_typed(bitnet__js *js, bitnet__sb *b, int32_t s, const char *t, int depth);

/* A rule of its own for schema s; its name goes into b. */
static void bitnet__js_rule(bitnet__js *js, bitnet__sb *b, int32_t s, int depth) {
    bitnet__sb body;
    int id = js->n_rules++;
    memset(&body, 0, sizeof body);
    bitnet__js_expr(js, &body, s, depth);
    bitnet__sb_printf(&js->rules, "s%d ::= %.*s\n", id, (int)body.n, body.p ? body.p : "");
    if (body.oom) js->rules.oom = 1;
    bitnet__free(body.p);
    bitnet__sb_printf(b, "s%d", id);
}

/* Enters /seg in js->path for messages; returns the old length to put back. */
static size_t bitnet__js_push(bitnet__js *js, const char *seg) {
    size_t n = strlen(js->path);
    snprintf(js->path + n, sizeof js->path - n, "/%s", seg);
    return n;
}

/* "#", "#/$defs/NAME", "#/definitions/NAME" and deeper pointers into this document. */
static int32_t bitnet__js_ref(bitnet__js *js, const char *ref) {
    int32_t at = 0;
    char seg[256];
    if (ref[0] != '#') return -1;
    ref++;
    while (*ref == '/') {
        size_t n = 0;
        ref++;
        while (*ref && *ref != '/' && n + 1 < sizeof seg) {
            if (ref[0] == '~' && (ref[1] == '0' || ref[1] == '1')) seg[n++] = ref[1] == '0' ? '~' : '/', ref += 2;
            else seg[n++] = *ref++;
        }
        seg[n] = 0;
        if (js->j->nodes[at].type != BITNET__J_OBJ || (at = bitnet__json_get(js->j, at, seg)) < 0) return -1;
    }
    return *ref ? -1 : at;
}

static int bitnet__js_count(const bitnet__json *j, int32_t s, const char *key, int def, int *out) {
    int32_t id = bitnet__json_get(j, s, key);
    *out = def;
    if (id < 0) return 1;
    if (j->nodes[id].type != BITNET__J_NUM || !j->nodes[id].is_int || j->nodes[id].num < 0) return 0;
    *out = j->nodes[id].num > BITNET__G_MAX_REPEAT ? BITNET__G_MAX_REPEAT + 1 : (int)j->nodes[id].num;
    return 1;
}

/* x repeated min..max times (max < 0: no bound) in GBNF. */
static void bitnet__js_repeat(bitnet__sb *b, int min, int max) {
    if (max < 0) bitnet__sb_printf(b, min == 0 ? "*" : min == 1 ? "+" : "{%d,}", min);
    else if (min == max) bitnet__sb_printf(b, "{%d}", min);
    else bitnet__sb_printf(b, "{%d,%d}", min, max);
}

static void bitnet__js_array(bitnet__js *js, bitnet__sb *b, int32_t s, int depth) {
    const bitnet__json *j = js->j;
    int32_t items = bitnet__json_get(j, s, "items"), prefix = bitnet__json_get(j, s, "prefixItems"), c;
    int min, max;
    bitnet__sb item;
    if (!bitnet__js_count(j, s, "minItems", 0, &min) || !bitnet__js_count(j, s, "maxItems", -1, &max) || (max >= 0 && max < min))
        return bitnet__js_fail(js, "minItems / maxItems are not counts with min <= max");
    if (min > BITNET__G_MAX_REPEAT || max > BITNET__G_MAX_REPEAT) return bitnet__js_fail(js, "more than 1000 items");
    if (prefix >= 0) { /* a tuple: these items in order, then none (items: false or absent) */
        size_t back = bitnet__js_push(js, "prefixItems");
        if (j->nodes[prefix].type != BITNET__J_ARR) return bitnet__js_fail(js, "not a list");
        if (items >= 0 && j->nodes[items].type != BITNET__J_FALSE) return bitnet__js_fail(js, "items after prefixItems are not supported");
        bitnet__sb_printf(b, "\"[\" ws ");
        for (c = j->nodes[prefix].first; c >= 0; c = j->nodes[c].next) {
            if (c != j->nodes[prefix].first) bitnet__sb_printf(b, "\",\" ws ");
            bitnet__js_rule(js, b, c, depth + 1);
            bitnet__sb_printf(b, " ws ");
        }
        bitnet__sb_printf(b, "\"]\"");
        js->path[back] = 0;
        return;
    }
    memset(&item, 0, sizeof item);
    if (items >= 0 && j->nodes[items].type != BITNET__J_TRUE) {
        size_t back = bitnet__js_push(js, "items");
        bitnet__js_rule(js, &item, items, depth + 1);
        js->path[back] = 0;
    } else {
        bitnet__sb_printf(&item, "value");
    }
    if (max == 0) bitnet__sb_printf(b, "\"[\" ws \"]\"");
    else {
        bitnet__sb_printf(b, "\"[\" ws %s%.*s ws (\",\" ws %.*s ws)", min ? "" : "(", (int)item.n, item.p ? item.p : "", (int)item.n,
                          item.p ? item.p : "");
        bitnet__js_repeat(b, min ? min - 1 : 0, max < 0 ? -1 : max - 1);
        bitnet__sb_printf(b, "%s \"]\"", min ? "" : ")?");
    }
    if (item.oom) b->oom = 1;
    bitnet__free(item.p);
}

/* Properties in their order, the required ones always, the others optional: H_i, "nothing written
   yet from property i on", is kv_i T_(i+1) (| H_(i+1) when i is optional), where T_i puts a comma
   before each property it writes. */
static void bitnet__js_object(bitnet__js *js, bitnet__sb *b, int32_t s, int depth) {
    const bitnet__json *j = js->j;
    int32_t props = bitnet__json_get(j, s, "properties"), req = bitnet__json_get(j, s, "required"), addl = bitnet__json_get(j, s, "additionalProperties");
    int32_t p, r;
    int n = 0, i, k, *kv = NULL, *opt = NULL, next = -1, all_opt = 1;
    if (props < 0 || j->nodes[props].type != BITNET__J_OBJ || j->nodes[props].count == 0) { /* a map */
        if (props >= 0 && j->nodes[props].type != BITNET__J_OBJ) return bitnet__js_fail(js, "properties is not an object");
        if (addl >= 0 && j->nodes[addl].type == BITNET__J_FALSE) { bitnet__sb_printf(b, "\"{\" ws \"}\""); return; }
        if (addl < 0 || j->nodes[addl].type == BITNET__J_TRUE) { bitnet__sb_printf(b, "object"); return; }
        {
            bitnet__sb v;
            size_t back = bitnet__js_push(js, "additionalProperties");
            memset(&v, 0, sizeof v);
            bitnet__js_rule(js, &v, addl, depth + 1);
            js->path[back] = 0;
            bitnet__sb_printf(b, "\"{\" ws (string ws \":\" ws %.*s ws (\",\" ws string ws \":\" ws %.*s ws)*)? \"}\"", (int)v.n,
                              v.p ? v.p : "", (int)v.n, v.p ? v.p : "");
            if (v.oom) b->oom = 1;
            bitnet__free(v.p);
            return;
        }
    }
    if (req >= 0 && j->nodes[req].type != BITNET__J_ARR) return bitnet__js_fail(js, "required is not a list");
    for (r = req >= 0 ? j->nodes[req].first : -1; r >= 0; r = j->nodes[r].next)
        if (j->nodes[r].type != BITNET__J_STR || bitnet__json_get(j, props, j->nodes[r].str) < 0)
            return bitnet__js_fail(js, "required names \"%.60s\", which is not among the properties",
                                   j->nodes[r].type == BITNET__J_STR ? j->nodes[r].str : "?");
    n = (int)j->nodes[props].count;
    kv = (int *)bitnet__calloc((size_t)n * 2 + 1, sizeof *kv);
    if (!kv) { b->oom = 1; return; }
    opt = kv + n;
    /* kv_i ::= "\"name\"" ws ":" ws VALUE ws */
    for (i = 0, p = j->nodes[props].first; p >= 0; p = j->nodes[p].next, i++) {
        size_t back = bitnet__js_push(js, "properties"), back2;
        bitnet__sb body;
        memset(&body, 0, sizeof body);
        back2 = strlen(js->path);
        snprintf(js->path + back2, sizeof js->path - back2, "/%s", j->nodes[p].key);
        opt[i] = 1;
        for (r = req >= 0 ? j->nodes[req].first : -1; r >= 0; r = j->nodes[r].next)
            if (strcmp(j->nodes[r].str, j->nodes[p].key) == 0) opt[i] = 0;
        bitnet__sb_printf(&body, "\"");
        bitnet__js_lit_str(&body, j->nodes[p].key);
        bitnet__sb_printf(&body, "\" ws \":\" ws ");
        bitnet__js_rule(js, &body, p, depth + 1);
        bitnet__sb_printf(&body, " ws");
        kv[i] = js->n_rules++;
        bitnet__sb_printf(&js->rules, "s%d ::= %.*s\n", kv[i], (int)body.n, body.p ? body.p : "");
        if (body.oom) b->oom = 1;
        bitnet__free(body.p);
        js->path[back] = 0;
    }
    /* R_i (H_i when it writes something) from the last property back; R_i is used by R_(i-1) when
       property i - 1 is optional (R_0 by the object) */
    for (i = n - 1; i >= 0; i--) {
        int id;
        for (k = 0; k < i && opt[k]; k++) {}
        if (k < i) continue; /* a required property before i: no R_i is used */
        id = js->n_rules++;
        bitnet__sb_printf(&js->rules, "s%d ::= s%d", id, kv[i]);
        for (k = i + 1; k < n; k++) bitnet__sb_printf(&js->rules, opt[k] ? " (\",\" ws s%d)?" : " \",\" ws s%d", kv[k]);
        if (opt[i] && next >= 0) bitnet__sb_printf(&js->rules, " | s%d", next);
        bitnet__sb_printf(&js->rules, "\n");
        all_opt &= opt[i];
        next = id;
    }
    bitnet__sb_printf(b, "\"{\" ws s%d%s \"}\"", next, all_opt ? "?" : "");
    bitnet__free(kv);
}

/* ---- JSON schema: integer ranges ---------------------------------------------------------- */
/* Unsigned integers of n digits from a to z (digit strings, a <= z), digit by digit: the common
   prefix, then a's first digit with the rest up to 9s, the digits between with anything, and z's
   first digit with the rest from 0s. */
static void bitnet__js_digits(bitnet__sb *b, const char *a, const char *z, int n) {
    static const char nines[] = "9999999999999999", zeros[] = "0000000000000000";
    int i = 0, rest, lo0, hi9, first, last, alts = 0;
    while (i < n && a[i] == z[i]) bitnet__sb_printf(b, "\"%c\" ", a[i]), i++;
    if (i == n) return;
    rest = n - i - 1;
    lo0 = strncmp(a + i + 1, zeros, (size_t)rest) == 0, hi9 = strncmp(z + i + 1, nines, (size_t)rest) == 0;
    first = a[i] - '0' + !lo0, last = z[i] - '0' - !hi9;
    bitnet__sb_printf(b, "(");
    if (!lo0) {
        bitnet__sb_printf(b, "\"%c\" ", a[i]);
        bitnet__js_digits(b, a + i + 1, nines, rest);
        alts++;
    }
    if (first <= last) {
        bitnet__sb_printf(b, "%s", alts++ ? "| " : "");
        bitnet__sb_printf(b, first == last ? "\"%d\"" : "[%d-%d]", first, last);
        if (rest) bitnet__sb_printf(b, rest == 1 ? " [0-9] " : " [0-9]{%d} ", rest);
    }
    if (!hi9) {
        bitnet__sb_printf(b, alts ? "| \"%c\" " : "\"%c\" ", z[i]);
        bitnet__js_digits(b, zeros, z + i + 1, rest);
    }
    bitnet__sb_printf(b, ")");
}

/* Unsigned integers from lo to hi (hi < 0: no bound; at most 16 digits, as the integer rule), without
   leading zeros: one part a digit count. */
static void bitnet__js_uint_range(bitnet__sb *b, long long lo, long long hi) {
    char a[24], z[24];
    int d, dl = snprintf(a, sizeof a, "%lld", lo), dh = hi < 0 ? 16 : snprintf(z, sizeof z, "%lld", hi);
    long long p = 1;
    for (d = 1; d < dl; d++) p *= 10; /* 10^(digits - 1) */
    bitnet__sb_printf(b, "(");
    for (d = dl; d <= dh; d++, p *= 10) {
        if (d > dl) bitnet__sb_printf(b, " | ");
        if (hi < 0 && d > dl) { bitnet__sb_printf(b, "[1-9] [0-9]{%d,15}", d - 1); break; } /* every longer number */
        snprintf(a, sizeof a, "%lld", d == dl ? lo : p);
        snprintf(z, sizeof z, "%lld", d == dh && hi >= 0 ? hi : p * 10 - 1);
        bitnet__js_digits(b, a, z, d);
    }
    bitnet__sb_printf(b, ")");
}

/* One bound: minimum / maximum (inclusive), exclusiveMinimum / exclusiveMaximum (a number, or
   draft 4's true on the inclusive one), as the integer bound it implies. 0: none. */
static int bitnet__js_bound(bitnet__js *js, int32_t s, int upper, long long *out) {
    const bitnet__json *j = js->j;
    int32_t in = bitnet__json_get(j, s, upper ? "maximum" : "minimum"), ex = bitnet__json_get(j, s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
    int have = 0;
    double v;
    if (in >= 0 && j->nodes[in].type != BITNET__J_NUM) return bitnet__js_fail(js, "%s is not a number", upper ? "maximum" : "minimum"), 0;
    if (ex >= 0 && j->nodes[ex].type != BITNET__J_NUM && j->nodes[ex].type != BITNET__J_TRUE && j->nodes[ex].type != BITNET__J_FALSE)
        return bitnet__js_fail(js, "%s is not a number", upper ? "exclusiveMaximum" : "exclusiveMinimum"), 0;
    if (ex >= 0 && j->nodes[ex].type == BITNET__J_NUM) { /* draft 6 on */
        v = j->nodes[ex].num;
        v = upper ? ceil(v) - 1 : floor(v) + 1;
        have = 1;
        if (in >= 0) v = upper ? BITNET__MIN(v, floor(j->nodes[in].num)) : BITNET__MAX(v, ceil(j->nodes[in].num));
    } else if (in >= 0) {
        int excl = ex >= 0 && j->nodes[ex].type == BITNET__J_TRUE; /* draft 4 */
        v = j->nodes[in].num;
        v = upper ? (excl ? ceil(v) - 1 : floor(v)) : (excl ? floor(v) + 1 : ceil(v));
        have = 1;
    } else {
        return 0;
    }
    if (!(fabs(v) < 1e15)) return bitnet__js_fail(js, "an integer bound past 15 digits"), 0;
    *out = (long long)v;
    return have;
}

/* An integer between the schema's bounds: its non-negative part and its negative part. */
static void bitnet__js_int_range(bitnet__js *js, bitnet__sb *b, int32_t s) {
    long long lo = 0, hi = 0;
    int has_lo = bitnet__js_bound(js, s, 0, &lo), has_hi = bitnet__js_bound(js, s, 1, &hi), alts = 0;
    if (js->err != BITNET_OK) return;
    if (!has_lo && !has_hi) { bitnet__sb_printf(b, "integer"); return; }
    if (has_lo && has_hi && lo > hi) return bitnet__js_fail(js, "no integer lies between the minimum %lld and the maximum %lld", lo, hi);
    bitnet__sb_printf(b, "(");
    if (!has_hi || hi >= 0) bitnet__js_uint_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1), alts++;
    if (!has_lo || lo < 0) {
        bitnet__sb_printf(b, alts ? " | \"-\" " : "\"-\" ");
        bitnet__js_uint_range(b, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
    }
    bitnet__sb_printf(b, ")");
}

/* ---- JSON schema: string formats ---------------------------------------------------------- */
/* date, time, date-time and uuid, as llama.cpp's converter writes them (RFC 3339); other formats
   are not read, as JSON Schema makes format an annotation unless asked otherwise. */
static const char *bitnet__js_format(const char *f) {
#define BITNET__JS_DATE "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1])"
#define BITNET__JS_TIME "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{3})? " \
                        "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"
    if (strcmp(f, "date") == 0) return BITNET__JS_DATE;
    if (strcmp(f, "time") == 0) return BITNET__JS_TIME;
    if (strcmp(f, "date-time") == 0) return BITNET__JS_DATE " \"T\" " BITNET__JS_TIME;
    if (strcmp(f, "uuid") == 0) return "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
    return NULL;
#undef BITNET__JS_DATE
#undef BITNET__JS_TIME
}

/* ---- JSON schema: patterns ---------------------------------------------------------------- */
/* An ECMAScript regular expression (JSON Schema's pattern) as GBNF over the JSON text of the
   string: characters that JSON escapes are written escaped ('"' as \", '\' as \\, a tab as \t;
   control characters without a short escape are never generated). Read: literals, '.', classes
   [...] and [^...] with ranges, \d \D \w \W \s \S and the character escapes, groups (...) and
   (?:...), '|', the quantifiers * + ? {m} {m,} {m,n} (a lazy '?' after them changes nothing),
   '^' and '$' at the ends of a top-level alternative (without them the match may be anywhere in
   the string, as JSON Schema says). Refused: backreferences, lookaround, \b, anchors elsewhere. */
#define BITNET__RX_MAX 128
typedef struct bitnet__cset { uint32_t lo[BITNET__RX_MAX], hi[BITNET__RX_MAX]; int n; } bitnet__cset;
typedef struct bitnet__rx { const unsigned char *p, *end; bitnet__js *js; int depth; } bitnet__rx;

static void bitnet__cset_add(bitnet__rx *rx, bitnet__cset *c, uint32_t lo, uint32_t hi) {
    if (c->n == BITNET__RX_MAX) return bitnet__js_fail(rx->js, "pattern: a class of more than %d ranges", BITNET__RX_MAX);
    c->lo[c->n] = lo, c->hi[c->n++] = hi;
}
static void bitnet__cset_norm(bitnet__cset *c) { /* sorted, overlaps merged */
    int i, k, n = 0;
    for (i = 1; i < c->n; i++) /* insertion sort: classes are short */
        for (k = i; k > 0 && c->lo[k - 1] > c->lo[k]; k--) {
            uint32_t t = c->lo[k]; c->lo[k] = c->lo[k - 1], c->lo[k - 1] = t;
            t = c->hi[k], c->hi[k] = c->hi[k - 1], c->hi[k - 1] = t;
        }
    for (i = 0; i < c->n; i++) {
        if (n && c->lo[i] <= c->hi[n - 1] + 1) { if (c->hi[i] > c->hi[n - 1]) c->hi[n - 1] = c->hi[i]; }
        else c->lo[n] = c->lo[i], c->hi[n++] = c->hi[i];
    }
    c->n = n;
}
static void bitnet__cset_invert(bitnet__cset *c) {
    bitnet__cset o;
    uint32_t next = 0;
    int i;
    bitnet__cset_norm(c);
    o.n = 0;
    for (i = 0; i < c->n; i++) {
        if (c->lo[i] > next) o.lo[o.n] = next, o.hi[o.n++] = c->lo[i] - 1;
        next = c->hi[i] + 1;
    }
    if (next <= 0x10FFFF) o.lo[o.n] = next, o.hi[o.n++] = 0x10FFFF;
    *c = o;
}
static int bitnet__cset_has(const bitnet__cset *c, uint32_t x) {
    int i;
    for (i = 0; i < c->n; i++)
        if (x >= c->lo[i] && x <= c->hi[i]) return 1;
    return 0;
}
/* \d \w \s (upper case: inverted) into c; 0 when e is none of them. */
static int bitnet__rx_class_escape(bitnet__rx *rx, bitnet__cset *c, int e) {
    bitnet__cset t;
    t.n = 0;
    switch (e | 0x20) {
    case 'd': bitnet__cset_add(rx, &t, '0', '9'); break;
    case 'w': bitnet__cset_add(rx, &t, '0', '9'), bitnet__cset_add(rx, &t, 'A', 'Z'), bitnet__cset_add(rx, &t, '_', '_'),
              bitnet__cset_add(rx, &t, 'a', 'z'); break;
    case 's': bitnet__cset_add(rx, &t, 9, 13), bitnet__cset_add(rx, &t, ' ', ' '), bitnet__cset_add(rx, &t, 0xA0, 0xA0),
              bitnet__cset_add(rx, &t, 0x1680, 0x1680), bitnet__cset_add(rx, &t, 0x2000, 0x200A), bitnet__cset_add(rx, &t, 0x2028, 0x2029),
              bitnet__cset_add(rx, &t, 0x202F, 0x202F), bitnet__cset_add(rx, &t, 0x205F, 0x205F), bitnet__cset_add(rx, &t, 0x3000, 0x3000),
              bitnet__cset_add(rx, &t, 0xFEFF, 0xFEFF); break;
    default: return 0;
    }
    if (e >= 'A' && e <= 'Z') bitnet__cset_invert(&t);
    for (e = 0; e < t.n; e++) bitnet__cset_add(rx, c, t.lo[e], t.hi[e]);
    return 1;
}
/* One character at rx->p (after a '\' when esc): its code point. */
static uint32_t bitnet__rx_char(bitnet__rx *rx, int esc, int in_class) {
    size_t adv;
    uint32_t c;
    if (rx->p >= rx->end) return bitnet__js_fail(rx->js, "pattern: ends after '\\'"), 0;
    c = bitnet__utf8_next(rx->p, (size_t)(rx->end - rx->p), &adv);
    rx->p += adv;
    if (c == BITNET__CP_INVALID) return bitnet__js_fail(rx->js, "pattern: not UTF-8"), 0;
    if (!esc) return c;
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'b': if (in_class) return '\b'; break;
    case 'x': case 'u': {
        int n = c == 'x' ? 2 : 4, k, h;
        for (c = 0, k = 0; k < n; k++, rx->p++) {
            if (rx->p >= rx->end || (h = bitnet__hex_digit(*rx->p)) < 0) return bitnet__js_fail(rx->js, "pattern: a bad \\x or \\u escape"), 0;
            c = c * 16 + (uint32_t)h;
        }
        return c;
    }
    default:
        if (c < 0x80 && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z') && !(c >= '1' && c <= '9')) return c; /* \. \\ \/ \( ... */
    }
    bitnet__js_fail(rx->js, "pattern: \\%c is not supported (backreferences, word boundaries)", (int)c);
    return 0;
}
/* The code points of c as GBNF over JSON text: the plain ones as a class, '"' and '\' escaped, the
   short-escape controls as \b \t \n \f \r. */
static void bitnet__rx_emit_set(bitnet__rx *rx, bitnet__sb *b, bitnet__cset *c) {
    static const char shorts[] = "\b\t\n\f\rbtnfr";
    bitnet__cset raw;
    int i, alts = 0;
    char esc[8];
    size_t ne = 0;
    bitnet__cset_norm(c);
    for (i = 0; i < 5; i++)
        if (bitnet__cset_has(c, (uint32_t)shorts[i])) esc[ne++] = shorts[i + 5];
    raw = *c; /* minus the controls, '"' and '\' */
    bitnet__cset_invert(&raw);
    bitnet__cset_add(rx, &raw, 0, 0x1F), bitnet__cset_add(rx, &raw, '"', '"'), bitnet__cset_add(rx, &raw, '\\', '\\');
    bitnet__cset_invert(&raw);
    bitnet__sb_printf(b, "(");
    if (raw.n) {
        bitnet__sb_printf(b, "[");
        for (i = 0; i < raw.n; i++) {
            uint32_t e[2];
            int k;
            e[0] = raw.lo[i], e[1] = raw.hi[i];
            for (k = 0; k < (e[0] == e[1] ? 1 : 2); k++) {
                if (k) bitnet__sb_printf(b, "-");
                if (e[k] >= 0x20 && e[k] < 0x7F && !strchr("]\\-^", (int)e[k])) bitnet__sb_printf(b, "%c", (int)e[k]);
                else bitnet__sb_printf(b, e[k] <= 0xFFFF ? "\\u%04X" : "\\U%08X", (unsigned)e[k]);
            }
        }
        bitnet__sb_printf(b, "]");
        alts++;
    }
    if (bitnet__cset_has(c, '"')) bitnet__sb_printf(b, alts++ ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\"");
    if (bitnet__cset_has(c, '\\')) bitnet__sb_printf(b, alts++ ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\"");
    if (ne) bitnet__sb_printf(b, "%s\"\\\\\" [%.*s]", alts++ ? " | " : "", (int)ne, esc);
    bitnet__sb_printf(b, ")");
    if (!alts) bitnet__js_fail(rx->js, "pattern: a class that matches no character");
}

static int bitnet__rx_alt(bitnet__rx *rx, bitnet__sb *b, int top);

/* One atom (a character, a class, '.', a group) and its quantifier; 1 when it may match nothing.
   An unbounded repetition of such an atom is refused (as the grammar refuses it). */
static int bitnet__rx_atom(bitnet__rx *rx, bitnet__sb *b) {
    bitnet__cset c;
    unsigned char ch = *rx->p;
    int empty = 0;
    c.n = 0;
    if (ch == '(') {
        rx->p++;
        if (rx->p < rx->end && *rx->p == '?') {
            if (rx->end - rx->p < 2 || rx->p[1] != ':') return bitnet__js_fail(rx->js, "pattern: lookaround and named groups are not supported"), 0;
            rx->p += 2;
        }
        if (++rx->depth > 32) return bitnet__js_fail(rx->js, "pattern: groups nested deeper than 32"), 0;
        bitnet__sb_printf(b, "(");
        empty = bitnet__rx_alt(rx, b, 0);
        bitnet__sb_printf(b, ")");
        rx->depth--;
        if (rx->p >= rx->end || *rx->p != ')') return bitnet__js_fail(rx->js, "pattern: a '(' without its ')'"), 0;
        rx->p++;
    } else if (ch == '[') {
        int neg;
        rx->p++;
        neg = rx->p < rx->end && *rx->p == '^';
        rx->p += neg;
        for (;;) {
            uint32_t lo, hi;
            int esc;
            if (rx->p >= rx->end) return bitnet__js_fail(rx->js, "pattern: a '[' without its ']'"), 0;
            if (*rx->p == ']' || rx->js->err != BITNET_OK) break;
            esc = *rx->p == '\\';
            rx->p += esc;
            if (esc && rx->p < rx->end && bitnet__rx_class_escape(rx, &c, *rx->p)) { rx->p++; continue; }
            lo = hi = bitnet__rx_char(rx, esc, 1);
            if (rx->end - rx->p >= 2 && rx->p[0] == '-' && rx->p[1] != ']') {
                rx->p++;
                esc = *rx->p == '\\';
                rx->p += esc;
                hi = bitnet__rx_char(rx, esc, 1);
                if (hi < lo) return bitnet__js_fail(rx->js, "pattern: a range from U+%04X down to U+%04X", (unsigned)lo, (unsigned)hi), 0;
            }
            bitnet__cset_add(rx, &c, lo, hi);
        }
        rx->p++;
        if (neg) bitnet__cset_invert(&c);
        bitnet__rx_emit_set(rx, b, &c);
    } else if (ch == '.') { /* any character but a line terminator */
        rx->p++;
        bitnet__cset_add(rx, &c, '\n', '\n'), bitnet__cset_add(rx, &c, '\r', '\r'), bitnet__cset_add(rx, &c, 0x2028, 0x2029);
        bitnet__cset_invert(&c);
        bitnet__rx_emit_set(rx, b, &c);
    } else if (ch == '^' || ch == '$') {
        return bitnet__js_fail(rx->js, "pattern: '%c' inside the pattern is not supported (only at the ends of an alternative)", ch), 0;
    } else if (strchr("*+?{", ch)) {
        return bitnet__js_fail(rx->js, "pattern: '%c' repeats nothing", ch), 0;
    } else { /* a character */
        int esc = ch == '\\';
        uint32_t cp;
        rx->p += esc;
        if (esc && rx->p < rx->end && bitnet__rx_class_escape(rx, &c, *rx->p)) rx->p++;
        else cp = bitnet__rx_char(rx, esc, 0), bitnet__cset_add(rx, &c, cp, cp);
        bitnet__rx_emit_set(rx, b, &c);
    }
    if (rx->p < rx->end && strchr("*+?{", *rx->p)) { /* the quantifier */
        int unbounded = 0, none = 0;
        ch = *rx->p++;
        if (ch != '{') bitnet__sb_printf(b, "%c", ch), unbounded = ch != '?', none = ch != '+';
        else {
            unsigned m = 0, n = 0;
            int comma = 0, digits_m = 0, digits_n = 0;
            for (; rx->p < rx->end && *rx->p >= '0' && *rx->p <= '9' && m <= BITNET__G_MAX_REPEAT; rx->p++, digits_m++) m = m * 10 + (*rx->p - '0');
            if (!digits_m) return bitnet__js_fail(rx->js, "pattern: a '{' that is no quantifier"), 0;
            if (rx->p < rx->end && *rx->p == ',') {
                comma = 1, rx->p++;
                for (; rx->p < rx->end && *rx->p >= '0' && *rx->p <= '9' && n <= BITNET__G_MAX_REPEAT; rx->p++, digits_n++) n = n * 10 + (*rx->p - '0');
            }
            if (rx->p >= rx->end || *rx->p != '}' || m > BITNET__G_MAX_REPEAT || n > BITNET__G_MAX_REPEAT || (digits_n && n < m))
                return bitnet__js_fail(rx->js, "pattern: a bad {m,n} (at most %d)", BITNET__G_MAX_REPEAT), 0;
            rx->p++;
            bitnet__js_repeat(b, (int)m, !comma ? (int)m : digits_n ? (int)n : -1);
            unbounded = comma && !digits_n, none = m == 0;
        }
        if (empty && unbounded) return bitnet__js_fail(rx->js, "pattern: an unbounded repetition of something that may match nothing"), 0;
        empty |= none;
        if (rx->p < rx->end && *rx->p == '?') rx->p++; /* lazy: the same sentences */
    }
    bitnet__sb_printf(b, " ");
    return empty;
}

/* Alternatives to the next ')' (or the end); at the top each may be anchored at either end. 1 when
   one of them may match nothing. */
static int bitnet__rx_alt(bitnet__rx *rx, bitnet__sb *b, int top) {
    int first = 1, empty = 0;
    do {
        int open_start = 1, open_end = 1, all_empty = 1;
        if (!first) rx->p++; /* '|' */
        bitnet__sb_printf(b, first ? "(" : " | (");
        first = 0;
        if (top && rx->p < rx->end && *rx->p == '^') rx->p++, open_start = 0;
        if (open_start && top) bitnet__sb_printf(b, "char* ");
        while (rx->js->err == BITNET_OK && rx->p < rx->end && *rx->p != '|' && *rx->p != ')') {
            if (top && *rx->p == '$' && (rx->p + 1 == rx->end || rx->p[1] == '|')) { rx->p++, open_end = 0; break; }
            all_empty &= bitnet__rx_atom(rx, b);
        }
        if (open_end && top) bitnet__sb_printf(b, "char*");
        bitnet__sb_printf(b, ")");
        empty |= all_empty;
    } while (rx->js->err == BITNET_OK && rx->p < rx->end && *rx->p == '|');
    return empty;
}

static void bitnet__js_pattern(bitnet__js *js, bitnet__sb *b, const char *pattern) {
    bitnet__rx rx;
    rx.p = (const unsigned char *)pattern, rx.end = rx.p + strlen(pattern), rx.js = js, rx.depth = 0;
    bitnet__sb_printf(b, "\"\\\"\" (");
    bitnet__rx_alt(&rx, b, 1);
    if (js->err == BITNET_OK && rx.p < rx.end) bitnet__js_fail(js, "pattern: a ')' without its '('");
    bitnet__sb_printf(b, ") \"\\\"\"");
}

static void bitnet__js_typed(bitnet__js *js, bitnet__sb *b, int32_t s, const char *t, int depth) {
    const bitnet__json *j = js->j;
    if (strcmp(t, "string") == 0) {
        int min, max;
        int32_t pat = bitnet__json_get(j, s, "pattern"), fmt = bitnet__json_get(j, s, "format");
        const char *form = fmt >= 0 && j->nodes[fmt].type == BITNET__J_STR ? bitnet__js_format(j->nodes[fmt].str) : NULL;
        if (pat >= 0) {
            if (j->nodes[pat].type != BITNET__J_STR) return bitnet__js_fail(js, "pattern is not a string");
            bitnet__js_pattern(js, b, j->nodes[pat].str);
            return;
        }
        if (form) { bitnet__sb_printf(b, "\"\\\"\" %s \"\\\"\"", form); return; }
        if (!bitnet__js_count(j, s, "minLength", 0, &min) || !bitnet__js_count(j, s, "maxLength", -1, &max) || (max >= 0 && max < min))
            return bitnet__js_fail(js, "minLength / maxLength are not counts with min <= max");
        if (min > BITNET__G_MAX_REPEAT || max > BITNET__G_MAX_REPEAT) return bitnet__js_fail(js, "string lengths past 1000");
        if (min == 0 && max < 0) { bitnet__sb_printf(b, "string"); return; }
        bitnet__sb_printf(b, "\"\\\"\" char");
        bitnet__js_repeat(b, min, max);
        bitnet__sb_printf(b, " \"\\\"\"");
    } else if (strcmp(t, "integer") == 0) {
        bitnet__js_int_range(js, b, s);
    } else if (strcmp(t, "number") == 0 || strcmp(t, "boolean") == 0 || strcmp(t, "null") == 0) {
        bitnet__sb_printf(b, "%s", t);
    } else if (strcmp(t, "object") == 0) {
        bitnet__js_object(js, b, s, depth);
    } else if (strcmp(t, "array") == 0) {
        bitnet__js_array(js, b, s, depth);
    } else {
        bitnet__js_fail(js, "unknown type \"%.40s\"", t);
    }
}

/* Schema s as a GBNF expression. */
static void bitnet__js_expr(bitnet__js *js, bitnet__sb *b, int32_t s, int depth) {
    const bitnet__json *j = js->j;
    const bitnet__jnode *nd = &j->nodes[s];
    int32_t ref, en, cn, any, all, type, c;
    const char *t;
    if (js->err != BITNET_OK) return;
    if (depth > 32) return bitnet__js_fail(js, "nested deeper than 32");
    if (nd->type == BITNET__J_TRUE || (nd->type == BITNET__J_OBJ && nd->count == 0)) { bitnet__sb_printf(b, "value"); return; }
    if (nd->type != BITNET__J_OBJ) return bitnet__js_fail(js, "a schema is an object (or true)");
    if ((ref = bitnet__json_get(j, s, "$ref")) >= 0) {
        int32_t target;
        int k;
        if (j->nodes[ref].type != BITNET__J_STR || (target = bitnet__js_ref(js, j->nodes[ref].str)) < 0)
            return bitnet__js_fail(js, "$ref \"%.80s\" does not name a schema in this document",
                                   j->nodes[ref].type == BITNET__J_STR ? j->nodes[ref].str : "?");
        for (k = 0; k < js->n_refs && js->refs[k] != target; k++) {}
        if (k == js->n_refs) { /* its rule, made once; recursion finds the id */
            bitnet__sb body;
            if (js->n_refs == 256) return bitnet__js_fail(js, "more than 256 $ref targets");
            js->refs[k] = target, js->ref_rule[k] = js->n_rules++, js->n_refs++;
            memset(&body, 0, sizeof body);
            bitnet__js_expr(js, &body, target, depth + 1);
            bitnet__sb_printf(&js->rules, "s%d ::= %.*s\n", js->ref_rule[k], (int)body.n, body.p ? body.p : "");
            if (body.oom) js->rules.oom = 1;
            bitnet__free(body.p);
        }
        bitnet__sb_printf(b, "s%d", js->ref_rule[k]);
        return;
    }
    if ((cn = bitnet__json_get(j, s, "const")) >= 0) {
        bitnet__sb_printf(b, "\"");
        bitnet__js_lit_json(j, b, cn);
        bitnet__sb_printf(b, "\"");
        return;
    }
    if ((en = bitnet__json_get(j, s, "enum")) >= 0) {
        if (j->nodes[en].type != BITNET__J_ARR || j->nodes[en].count == 0) return bitnet__js_fail(js, "enum is not a list of values");
        bitnet__sb_printf(b, "(");
        for (c = j->nodes[en].first; c >= 0; c = j->nodes[c].next) {
            bitnet__sb_printf(b, c == j->nodes[en].first ? "\"" : " | \"");
            bitnet__js_lit_json(j, b, c);
            bitnet__sb_printf(b, "\"");
        }
        bitnet__sb_printf(b, ")");
        return;
    }
    any = bitnet__json_get(j, s, "anyOf");
    if (any < 0) any = bitnet__json_get(j, s, "oneOf");
    all = bitnet__json_get(j, s, "allOf");
    if (all >= 0) {
        if (j->nodes[all].type != BITNET__J_ARR || j->nodes[all].count != 1) return bitnet__js_fail(js, "allOf of more than one schema is not supported");
        any = all;
    }
    if (any >= 0) {
        if (j->nodes[any].type != BITNET__J_ARR || j->nodes[any].count == 0) return bitnet__js_fail(js, "anyOf / oneOf is not a list of schemas");
        bitnet__sb_printf(b, "(");
        for (c = j->nodes[any].first; c >= 0; c = j->nodes[c].next) {
            if (c != j->nodes[any].first) bitnet__sb_printf(b, " | ");
            bitnet__js_expr(js, b, c, depth + 1);
        }
        bitnet__sb_printf(b, ")");
        return;
    }
    type = bitnet__json_get(j, s, "type");
    if (type >= 0 && j->nodes[type].type == BITNET__J_ARR) { /* one of several types, the other keywords kept */
        if (j->nodes[type].count == 0) return bitnet__js_fail(js, "type is an empty list");
        bitnet__sb_printf(b, "(");
        for (c = j->nodes[type].first; c >= 0; c = j->nodes[c].next) {
            if (j->nodes[c].type != BITNET__J_STR) return bitnet__js_fail(js, "type names a non-string");
            if (c != j->nodes[type].first) bitnet__sb_printf(b, " | ");
            bitnet__js_typed(js, b, s, j->nodes[c].str, depth);
        }
        bitnet__sb_printf(b, ")");
        return;
    }
    if (type >= 0 && j->nodes[type].type != BITNET__J_STR) return bitnet__js_fail(js, "type is not a string or a list");
    t = type >= 0 ? j->nodes[type].str : bitnet__json_get(j, s, "properties") >= 0 || bitnet__json_get(j, s, "additionalProperties") >= 0
        ? "object" : bitnet__json_get(j, s, "items") >= 0 || bitnet__json_get(j, s, "prefixItems") >= 0 ? "array" : NULL;
    if (!t) { bitnet__sb_printf(b, "value"); return; }
    bitnet__js_typed(js, b, s, t, depth);
}

BITNET_API bitnet_result bitnet_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap, size_t *out_len) {
    bitnet__json j;
    bitnet__js js;
    bitnet__sb root, all;
    bitnet_result r;
    BITNET__CHECK_PTR(out_len);
    *out_len = 0;
    if (len && !schema) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_json_schema_to_grammar: schema is NULL");
    if (cap && !buf) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_json_schema_to_grammar: buf is NULL with cap %zu", cap);
    if ((r = bitnet__json_parse(&j, schema ? schema : "", len, 1 << 16)) != BITNET_OK)
        return bitnet__err_where(r == BITNET_ERR_OUT_OF_MEMORY ? r : BITNET_ERR_INVALID_ARG, "JSON schema");
    memset(&js, 0, sizeof js);
    memset(&root, 0, sizeof root);
    memset(&all, 0, sizeof all);
    js.j = &j;
    bitnet__js_expr(&js, &root, 0, 0);
    bitnet__sb_printf(&all, "root ::= %.*s\n%.*s%s", (int)root.n, root.p ? root.p : "", (int)js.rules.n, js.rules.p ? js.rules.p : "",
                      bitnet__js_prims);
    r = js.err;
    if (r == BITNET_OK && (root.oom || js.rules.oom || all.oom)) r = bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, "JSON schema: the grammar text");
    if (r == BITNET_OK) { /* the grammar's own limits (rules, elements) */
        bitnet_grammar *g = NULL;
        if ((r = bitnet_grammar_parse(all.p, all.n, &g)) != BITNET_OK) r = bitnet__err_where(r, "JSON schema: its grammar");
        bitnet_grammar_free(g);
    }
    if (r == BITNET_OK) {
        *out_len = all.n;
        if (cap > all.n) memcpy(buf, all.p, all.n + 1);
        else r = bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_json_schema_to_grammar: %zu bytes needed, cap %zu", all.n + 1, cap);
    }
    bitnet__free(root.p);
    bitnet__free(js.rules.p);
    bitnet__free(all.p);
    bitnet__json_free(&j);
    return r;
}

/* ---- matching: sets of stacks --------------------------------------------------------------- */

typedef struct bitnet__gset {
    uint32_t *v; size_t nv, cap_v;    /* stack i is v[off[i] .. off[i + 1]), its top last */
    uint32_t *off; size_t n, cap_off;
    uint64_t *h; size_t cap_h;        /* each stack's hash (duplicates are dropped) */
    uint32_t *slot; size_t n_slot;    /* open addressing by hash: index + 1, 0 = empty; a power of two */
} bitnet__gset;
static void bitnet__gset_free(bitnet__gset *s) { bitnet__free(s->v), bitnet__free(s->off), bitnet__free(s->h), bitnet__free(s->slot); }
/* The slot table at four times the stacks, so a set of thousands (an ambiguous grammar) stays linear. */
static bitnet_result bitnet__gset_rehash(bitnet__gset *s) {
    size_t cap = 64, i;
    while (cap < 4 * (s->n + 1)) cap *= 2;
    if (cap != s->n_slot) {
        uint32_t *t = (uint32_t *)bitnet__malloc(cap * sizeof *t);
        if (!t) return BITNET_ERR_OUT_OF_MEMORY;
        bitnet__free(s->slot);
        s->slot = t, s->n_slot = cap;
    }
    memset(s->slot, 0, s->n_slot * sizeof *s->slot);
    for (i = 0; i < s->n; i++) {
        size_t j = (size_t)s->h[i] & (s->n_slot - 1);
        while (s->slot[j]) j = (j + 1) & (s->n_slot - 1);
        s->slot[j] = (uint32_t)i + 1;
    }
    return BITNET_OK;
}
static bitnet_result bitnet__gset_add(bitnet__gset *s, const uint32_t *stk, size_t d) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ d;
    size_t i, j;
    for (i = 0; i < d; i++) h = (h ^ stk[i]) * 0xBF58476D1CE4E5B9ull; /* a word at a time: stacks run deep */
    h ^= h >> 31;
    void *v = s->v, *o = s->off, *hh = s->h;
    if (4 * (s->n + 1) > s->n_slot) BITNET__TRY(bitnet__gset_rehash(s));
    for (j = (size_t)h & (s->n_slot - 1); s->slot[j]; j = (j + 1) & (s->n_slot - 1)) {
        i = s->slot[j] - 1;
        if (s->h[i] == h && s->off[i + 1] - s->off[i] == d && (!d || memcmp(s->v + s->off[i], stk, d * sizeof *stk) == 0)) return BITNET_OK;
    }
    if (s->n >= BITNET__G_MAX_STACKS)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "grammar: the text can be read more than %d ways here (an ambiguous grammar)",
                           BITNET__G_MAX_STACKS);
    if (s->nv + d > BITNET__G_MAX_HELD)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "grammar: the text's readings hold more than 2^18 open rules here (an ambiguous, "
                                                     "deeply nested grammar)");
    BITNET__TRY(bitnet__grow(&v, &s->cap_v, s->nv + d, sizeof *s->v));
    s->v = (uint32_t *)v;
    BITNET__TRY(bitnet__grow(&o, &s->cap_off, s->n + 2, sizeof *s->off));
    s->off = (uint32_t *)o;
    BITNET__TRY(bitnet__grow(&hh, &s->cap_h, s->n + 1, sizeof *s->h));
    s->h = (uint64_t *)hh;
    if (s->n == 0) s->off[0] = 0;
    if (d) memcpy(s->v + s->nv, stk, d * sizeof *stk);
    s->slot[j] = (uint32_t)s->n + 1;
    s->nv += d, s->h[s->n++] = h, s->off[s->n] = (uint32_t)s->nv;
    return BITNET_OK;
}
static void bitnet__gset_clear(bitnet__gset *s) {
    if (s->n) memset(s->slot, 0, s->n_slot * sizeof *s->slot);
    s->n = s->nv = 0;
}

/* Adds stk[0 .. d) to s once its top is a character set: ends of alternatives are popped, and a
   rule on top is replaced by each of its alternatives (over where it goes on, unless it ends).
   stk[0 .. d) is as it was on return; the call chain is at most one level a rule entered before a
   character (no left recursion), bounded by BITNET__G_MAX_CHAIN all the same. */
static bitnet_result bitnet__gexpand(const bitnet_grammar *g, bitnet__gset *s, uint32_t *stk, size_t d, int level) {
    uint32_t a, p, keep[2];
    size_t base;
    bitnet_result r = BITNET_OK;
    while (d && g->el[stk[d - 1]].kind == BITNET__GE_END) d--;
    if (!d || g->el[stk[d - 1]].kind != BITNET__GE_RULE) return bitnet__gset_add(s, stk, d);
    if (d + 1 > BITNET__G_MAX_DEPTH) return bitnet__err(BITNET_ERR_INVALID_STATE, "grammar: the text nests more than %d rules deep", BITNET__G_MAX_DEPTH);
    if (level > BITNET__G_MAX_CHAIN)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "grammar: more than %d rules entered in a row before a character", BITNET__G_MAX_CHAIN);
    p = stk[d - 1], keep[0] = p, keep[1] = stk[d]; /* the two slots written here, put back after */
    base = d - 1;
    if (g->el[p + 1].kind != BITNET__GE_END) stk[base++] = p + 1;
    for (a = g->rule_alt[g->el[p].a]; a < g->rule_alt[g->el[p].a + 1] && r == BITNET_OK; a++) {
        stk[base] = g->alt[a];
        r = bitnet__gexpand(g, s, stk, base + 1, level + 1);
    }
    stk[d - 1] = keep[0], stk[d] = keep[1];
    return r;
}
static int bitnet__gel_has(const bitnet_grammar *g, const bitnet__gel *e, uint32_t lo, uint32_t hi) { /* any of lo..hi */
    uint32_t i;
    if (e->kind == BITNET__GE_CHAR) {
        for (i = e->a; i < e->a + e->n; i++) if (g->rng[2 * i] <= hi && lo <= g->rng[2 * i + 1]) return 1;
        return 0;
    }
    if (e->kind != BITNET__GE_NCHAR) return 0;
    for (i = e->a; i < e->a + e->n; i++) if (g->rng[2 * i] <= lo && hi <= g->rng[2 * i + 1]) return 0;
    return 1; /* (a range the negated ones cover only together counts as possible: callers only prune) */
}

/* A text may end inside a character's UTF-8 bytes (a token often does): the character's len bytes
   so far give cp, need more are missing. */
typedef struct bitnet__gu { uint32_t cp, need, len; } bitnet__gu;
/* The matcher: where a text is in the grammar. */
/* The mask's vocabulary: the regular tokens sorted by their bytes, and their bytes in that order
   (token order[i] is sb[so[i] .. so[i + 1])). A session keeps one for all its generations (the sort
   is 8 ms on LLaMA 3's); a grammar state builds its own. */
typedef struct bitnet__gvoc {
    int32_t *order; size_t n_order;
    unsigned char *sb; uint32_t *so;
} bitnet__gvoc;
static void bitnet__gvoc_free(bitnet__gvoc *v) {
    bitnet__free(v->order), bitnet__free(v->sb), bitnet__free(v->so);
    memset(v, 0, sizeof *v);
}

typedef struct bitnet__gm {
    const bitnet_grammar *g;
    bitnet__gset cur, tmp[2];        /* the text's stacks; scratch sets */
    bitnet__gu u;
    uint32_t *stk;                   /* BITNET__G_MAX_DEPTH + 2 positions (bitnet__gexpand's scratch) */
    const bitnet_tokenizer *tok;
    bitnet__gvoc *voc;               /* the mask's vocabulary: a session's, or own; built at the first mask */
    bitnet__gvoc own;
    /* the mask's memo (bitnet__gm_next): the sets its walk meets, each once, and each set's successor
       by which of its stacks a character passes (nothing else decides it) */
    bitnet__gset *ms; size_t n_ms, cap_ms;
    uint64_t *ms_h;
    uint64_t *slot_key, *slot_mask;  /* transitions: set + 1 (0: empty) and mask, open addressing */
    uint32_t *slot_to; size_t n_slot;
    /* the last masks, by the text's stacks and u: inside a loop (a string's characters) each step's are the same */
    bitnet__gset mc_set[4]; bitnet__gu mc_u[4]; unsigned char *mc_allow[4]; int mc_n, mc_next;
    void *scratch;                   /* bitnet__gm_sample's, n_vocab candidates, a heap and a mask (kept: fresh pages each step cost more) */
    unsigned char *allow;            /* the mask in scratch */
} bitnet__gm;

static void bitnet__gm_free(bitnet__gm *m) {
    size_t i;
    bitnet__gset_free(&m->cur), bitnet__gset_free(&m->tmp[0]), bitnet__gset_free(&m->tmp[1]);
    for (i = 0; i < m->cap_ms; i++) bitnet__gset_free(&m->ms[i]);
    for (i = 0; i < 4; i++) bitnet__gset_free(&m->mc_set[i]), bitnet__free(m->mc_allow[i]);
    bitnet__free(m->ms), bitnet__free(m->ms_h), bitnet__free(m->slot_key), bitnet__free(m->slot_to), bitnet__free(m->slot_mask);
    bitnet__free(m->stk), bitnet__free(m->scratch);
    bitnet__gvoc_free(&m->own);
    memset(m, 0, sizeof *m);
}
static bitnet_result bitnet__gm_init(bitnet__gm *m, const bitnet_grammar *g, const bitnet_tokenizer *tok) {
    uint32_t a;
    memset(m, 0, sizeof *m);
    m->g = g, m->tok = tok;
    if (!(m->stk = (uint32_t *)bitnet__calloc(BITNET__G_MAX_DEPTH + 2, sizeof *m->stk))) return BITNET_ERR_OUT_OF_MEMORY;
    for (a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        m->stk[0] = g->alt[a];
        BITNET__TRY(bitnet__gexpand(g, &m->cur, m->stk, 1, 0));
    }
    return BITNET_OK;
}
/* out = the stacks of s that go on with the character cp. */
static bitnet_result bitnet__gm_advance(bitnet__gm *m, const bitnet__gset *s, uint32_t cp, bitnet__gset *out) {
    size_t i, d;
    bitnet__gset_clear(out);
    for (i = 0; i < s->n; i++) {
        d = s->off[i + 1] - s->off[i];
        if (!d || !bitnet__gel_has(m->g, &m->g->el[s->v[s->off[i] + d - 1]], cp, cp)) continue;
        memcpy(m->stk, s->v + s->off[i], d * sizeof *m->stk);
        m->stk[d - 1]++;
        BITNET__TRY(bitnet__gexpand(m->g, out, m->stk, d, 0));
    }
    return BITNET_OK;
}
/* The code points u can still become: 0 when none (an overlong start, or past U+10FFFF). */
static int bitnet__gu_range(bitnet__gu u, uint32_t *lo, uint32_t *hi) {
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    *lo = u.cp << (6 * u.need), *hi = *lo | ((1u << (6 * u.need)) - 1);
    if (*lo < least[u.len]) *lo = least[u.len];
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
    return *lo <= *hi;
}
/* Whether some stack of s can take a character that starts as u does. */
static int bitnet__gm_partial(const bitnet__gm *m, const bitnet__gset *s, bitnet__gu u) {
    uint32_t lo, hi;
    size_t i;
    if (!bitnet__gu_range(u, &lo, &hi)) return 0;
    for (i = 0; i < s->n; i++)
        if (s->off[i + 1] > s->off[i] && bitnet__gel_has(m->g, &m->g->el[s->v[s->off[i + 1] - 1]], lo, hi)) return 1;
    return 0;
}
/* One more byte of UTF-8 into u: 0 when it cannot be (a stray or overlong byte, a surrogate). */
static int bitnet__gm_byte(bitnet__gu *u, unsigned char b) {
    uint32_t lo, hi;
    if (u->need) {
        if ((b & 0xC0) != 0x80) return 0;
        u->cp = u->cp << 6 | (b & 0x3F), u->need--;
        return bitnet__gu_range(*u, &lo, &hi) && !(u->need == 0 && u->cp >= 0xD800 && u->cp <= 0xDFFF);
    }
    if (b < 0x80) u->cp = b, u->len = 1;
    else if (b >= 0xC2 && b <= 0xDF) u->cp = b & 0x1F, u->need = 1, u->len = 2;
    else if (b >= 0xE0 && b <= 0xEF) u->cp = b & 0x0F, u->need = 2, u->len = 3;
    else if (b >= 0xF0 && b <= 0xF4) u->cp = b & 0x07, u->need = 3, u->len = 4;
    else return 0;
    return 1;
}
/* Whether the text can go on with bytes b[0 .. n); with commit, it does. */
static bitnet_result bitnet__gm_try(bitnet__gm *m, const unsigned char *b, size_t n, int commit, int *ok) {
    const bitnet__gset *s = &m->cur;
    bitnet__gu u = m->u;
    size_t i;
    int k = 0;
    *ok = 0;
    for (i = 0; i < n; i++) {
        if (!bitnet__gm_byte(&u, b[i])) return BITNET_OK;
        if (u.need) continue;
        BITNET__TRY(bitnet__gm_advance(m, s, u.cp, &m->tmp[k]));
        s = &m->tmp[k], k ^= 1;
        if (!s->n) return BITNET_OK;
    }
    if (u.need && !bitnet__gm_partial(m, s, u)) return BITNET_OK;
    *ok = 1;
    if (commit) {
        if (s != &m->cur) {
            bitnet__gset t = m->cur;
            m->cur = *s, *(bitnet__gset *)(uintptr_t)s = t;
        }
        m->u = u;
    }
    return BITNET_OK;
}
/* A whole sentence so far; nothing may follow. */
static int bitnet__gm_complete(const bitnet__gm *m) {
    size_t i;
    if (m->u.need) return 0;
    for (i = 0; i < m->cur.n; i++) if (m->cur.off[i + 1] == m->cur.off[i]) return 1;
    return 0;
}
static int bitnet__gm_finished(const bitnet__gm *m) { return bitnet__gm_complete(m) && m->cur.nv == 0; }

BITNET_API bitnet_result bitnet_grammar_match(const bitnet_grammar *g, const char *text, size_t len, int *status) {
    bitnet__gm m;
    int ok = 0;
    bitnet_result r;
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(status);
    if (len && !text) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_grammar_match: text is NULL");
    r = bitnet__gm_init(&m, g, NULL);
    if (r == BITNET_OK) r = bitnet__gm_try(&m, (const unsigned char *)text, len, 1, &ok);
    if (r == BITNET_OK) *status = !ok ? -1 : bitnet__gm_complete(&m) ? 1 : 0;
    bitnet__gm_free(&m);
    return r;
}

/* ---- the vocabulary under a grammar ---------------------------------------------------------- */

struct bitnet_grammar_state { bitnet__gm m; };

typedef struct bitnet__gtok { uint64_t key; const unsigned char *b; uint32_t len; int32_t id; } bitnet__gtok;
static int bitnet__gtok_cmp(const void *x, const void *y) {
    const bitnet__gtok *a = (const bitnet__gtok *)x, *b = (const bitnet__gtok *)y;
    int c = memcmp(a->b, b->b, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}
/* Pieces in byte order: a radix sort on their first 8 bytes (big-endian, zero-padded: the same order
   where those differ), then each run of equal keys by its bytes. 3 ms for LLaMA 3's vocabulary,
   where qsort took 23 ms, and the sort comes with a generation's first mask. */
static bitnet_result bitnet__gtok_sort(bitnet__gtok *v, size_t n) {
    bitnet__gtok *t = (bitnet__gtok *)bitnet__malloc((n ? n : 1) * sizeof *t), *a = v, *b = t, *x;
    size_t i, j, cnt[256];
    int pass;
    if (!t) return BITNET_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; i++) {
        uint64_t k = 0;
        for (j = 0; j < 8; j++) k = k << 8 | (j < v[i].len ? v[i].b[j] : 0);
        v[i].key = k;
    }
    for (pass = 0; pass < 8; pass++) { /* least significant byte first, stable */
        size_t sum = 0;
        memset(cnt, 0, sizeof cnt);
        for (i = 0; i < n; i++) cnt[(a[i].key >> (8 * pass)) & 255]++;
        for (j = 0; j < 256; j++) { size_t c = cnt[j]; cnt[j] = sum, sum += c; }
        for (i = 0; i < n; i++) b[cnt[(a[i].key >> (8 * pass)) & 255]++] = a[i];
        x = a, a = b, b = x;
    }
    /* (eight passes: the result is back in v) */
    for (i = 0; i < n; i = j) {
        for (j = i + 1; j < n && v[j].key == v[i].key; j++) {}
        if (j - i > 1) qsort(v + i, j - i, sizeof *v, bitnet__gtok_cmp);
    }
    bitnet__free(t);
    return BITNET_OK;
}
static bitnet_result bitnet__gvoc_build(bitnet__gvoc *o, const bitnet_tokenizer *t) {
    bitnet__gtok *v = (bitnet__gtok *)bitnet__malloc((size_t)t->n_vocab * sizeof *v);
    size_t i;
    o->order = (int32_t *)bitnet__malloc((size_t)t->n_vocab * sizeof *o->order);
    o->so = (uint32_t *)bitnet__malloc(((size_t)t->n_vocab + 1) * sizeof *o->so);
    o->sb = (unsigned char *)bitnet__malloc((size_t)t->off[t->n_vocab] + 1);
    if (!v || !o->order || !o->so || !o->sb) return bitnet__free(v), bitnet__gvoc_free(o), BITNET_ERR_OUT_OF_MEMORY;
    for (o->n_order = 0, i = 0; i < (size_t)t->n_vocab; i++)
        if (!t->special[i] && t->off[i + 1] > t->off[i])
            v[o->n_order].b = t->bytes + t->off[i], v[o->n_order].len = t->off[i + 1] - t->off[i], v[o->n_order++].id = (int32_t)i;
    if (bitnet__gtok_sort(v, o->n_order) != BITNET_OK) return bitnet__free(v), bitnet__gvoc_free(o), BITNET_ERR_OUT_OF_MEMORY;
    for (o->so[0] = 0, i = 0; i < o->n_order; i++) {
        o->order[i] = v[i].id, o->so[i + 1] = o->so[i] + v[i].len;
        memcpy(o->sb + o->so[i], v[i].b, v[i].len);
    }
    bitnet__free(v);
    return BITNET_OK;
}
/* Whether token id may come next (stop tokens: where the text is a whole sentence; other special
   tokens never). */
static bitnet_result bitnet__gm_allows(bitnet__gm *m, int32_t id, const int32_t *stop, size_t n_stop, int *ok) {
    const bitnet_tokenizer *t = m->tok;
    size_t i;
    for (i = 0; i < n_stop; i++)
        if (id == stop[i]) return *ok = bitnet__gm_complete(m), BITNET_OK;
    *ok = 0;
    if (t->special[id] || t->off[id + 1] == t->off[id]) return BITNET_OK;
    return bitnet__gm_try(m, t->bytes + t->off[id], t->off[id + 1] - t->off[id], 0, ok);
}
#define BITNET__G_SLOTS 8192 /* the memo's transitions; past half full, successors are made each time */
#define BITNET__G_NONE UINT32_MAX
#define BITNET__G_WALK_DEPTH 48 /* the mask's walk recurses this many bytes deep at most */
/* The successor of memo set id by character cp (BITNET__G_NONE where no stack takes it). */
static bitnet_result bitnet__gm_next(bitnet__gm *m, uint32_t id, uint32_t cp, uint32_t *out) {
    const bitnet__gset *s = &m->ms[id];
    uint64_t mask = 0, h;
    size_t i, slot = BITNET__G_SLOTS;
    *out = BITNET__G_NONE;
    for (i = 0; i < s->n; i++)
        if (s->off[i + 1] > s->off[i] && bitnet__gel_has(m->g, &m->g->el[s->v[s->off[i + 1] - 1]], cp, cp)) mask |= 1ull << (i & 63);
    if (!mask) return BITNET_OK;
    if (s->n <= 64) /* (wider sets are advanced each time) */
        for (slot = (size_t)((id * 0x9E3779B97F4A7C15ull ^ mask) * 0xD6E8FEB86659FD93ull >> 51) & (BITNET__G_SLOTS - 1);;
             slot = (slot + 1) & (BITNET__G_SLOTS - 1)) {
            if (!m->slot_key[slot]) break;
            if (m->slot_key[slot] == (uint64_t)id + 1 && m->slot_mask[slot] == mask) return *out = m->slot_to[slot], BITNET_OK;
        }
    BITNET__TRY(bitnet__gm_advance(m, s, cp, &m->tmp[0]));
    for (h = m->tmp[0].n, i = 0; i < m->tmp[0].n; i++) h = (h ^ m->tmp[0].h[i]) * 0x100000001B3ull;
    for (i = 0; i < m->n_ms; i++) /* the same stacks are the same set */
        if (m->ms_h[i] == h && m->ms[i].n == m->tmp[0].n && m->ms[i].nv == m->tmp[0].nv &&
            memcmp(m->ms[i].off, m->tmp[0].off, (m->tmp[0].n + 1) * sizeof *m->tmp[0].off) == 0 &&
            (!m->tmp[0].nv || memcmp(m->ms[i].v, m->tmp[0].v, m->tmp[0].nv * sizeof *m->tmp[0].v) == 0))
            break;
    if (i == m->n_ms) { /* a new set: tmp's buffers go into the memo, the slot's old ones to tmp */
        bitnet__gset t;
        if (m->n_ms == m->cap_ms) {
            void *a = m->ms, *b = m->ms_h;
            size_t ca = m->cap_ms, cb = m->cap_ms;
            BITNET__TRY(bitnet__grow(&a, &ca, m->n_ms + 1, sizeof *m->ms));
            m->ms = (bitnet__gset *)a;
            memset(m->ms + m->cap_ms, 0, (ca - m->cap_ms) * sizeof *m->ms);
            m->cap_ms = ca;
            BITNET__TRY(bitnet__grow(&b, &cb, ca, sizeof *m->ms_h));
            m->ms_h = (uint64_t *)b;
        }
        t = m->ms[m->n_ms], m->ms[m->n_ms] = m->tmp[0], m->tmp[0] = t;
        m->ms_h[m->n_ms++] = h;
    }
    *out = (uint32_t)i;
    if (slot < BITNET__G_SLOTS && 2 * m->n_slot < BITNET__G_SLOTS)
        m->slot_key[slot] = (uint64_t)id + 1, m->slot_mask[slot] = mask, m->slot_to[slot] = (uint32_t)i, m->n_slot++;
    return BITNET_OK;
}

/* Marks in allow[] the tokens of order[lo .. hi) (equal in their first depth bytes, which took the
   text to memo set id and u) that the grammar takes: each distinct next byte is tried once for all
   the tokens that share it, as in a walk down a trie. */
static bitnet_result bitnet__gm_walk(bitnet__gm *m, uint32_t id, bitnet__gu u, size_t lo, size_t hi, size_t depth,
                                     unsigned char *allow) {
    const unsigned char *sb = m->voc->sb;
    const uint32_t *so = m->voc->so;
    const int32_t *order = m->voc->order;
    size_t i = lo, j;
    for (; i < hi && so[i + 1] - so[i] == depth; i++) allow[order[i]] = (unsigned char)(!u.need || bitnet__gm_partial(m, &m->ms[id], u));
    if (depth >= BITNET__G_WALK_DEPTH) { /* longer pieces (a file's may be any length): one by one, without recursion */
        for (; i < hi; i++) {
            uint32_t at = id;
            bitnet__gu u2 = u;
            size_t k;
            for (k = so[i] + depth; at != BITNET__G_NONE && k < so[i + 1]; k++)
                if (!bitnet__gm_byte(&u2, sb[k])) at = BITNET__G_NONE;
                else if (!u2.need) BITNET__TRY(bitnet__gm_next(m, at, u2.cp, &at));
            allow[order[i]] = (unsigned char)(at != BITNET__G_NONE && (!u2.need || bitnet__gm_partial(m, &m->ms[at], u2)));
        }
        return BITNET_OK;
    }
    for (; i < hi; i = j) {
        unsigned char b = sb[so[i] + depth];
        bitnet__gu u2 = u;
        uint32_t next;
        for (j = i + 1; j < hi && sb[so[j] + depth] == b; j++) {}
        if (!bitnet__gm_byte(&u2, b)) continue;
        if (u2.need) {
            if (bitnet__gm_partial(m, &m->ms[id], u2)) BITNET__TRY(bitnet__gm_walk(m, id, u2, i, j, depth + 1, allow));
            continue;
        }
        BITNET__TRY(bitnet__gm_next(m, id, u2.cp, &next));
        if (next != BITNET__G_NONE) BITNET__TRY(bitnet__gm_walk(m, next, u2, i, j, depth + 1, allow));
    }
    return BITNET_OK;
}
static int bitnet__gset_same(const bitnet__gset *a, const bitnet__gset *b) {
    return a->n == b->n && a->nv == b->nv && (!a->n || memcmp(a->off, b->off, (a->n + 1) * sizeof *a->off) == 0) &&
           (!a->nv || memcmp(a->v, b->v, a->nv * sizeof *a->v) == 0);
}
static bitnet_result bitnet__gset_copy(bitnet__gset *dst, const bitnet__gset *src) {
    size_t i;
    bitnet__gset_clear(dst);
    for (i = 0; i < src->n; i++) /* (v is NULL while every stack is empty) */
        BITNET__TRY(bitnet__gset_add(dst, src->nv ? src->v + src->off[i] : NULL, src->off[i + 1] - src->off[i]));
    return BITNET_OK;
}
/* allow[id] = 1 for every token the grammar takes next (bitnet__gm_allows for all, at once). */
static bitnet_result bitnet__gm_mask(bitnet__gm *m, const int32_t *stop, size_t n_stop, unsigned char *allow) {
    const bitnet_tokenizer *t = m->tok;
    size_t i;
    int k;
    if (!m->voc) m->voc = &m->own;
    if (!m->voc->order) BITNET__TRY(bitnet__gvoc_build(m->voc, t));
    if (!m->slot_key) { /* once a matcher: the memo's room */
        m->slot_key = (uint64_t *)bitnet__malloc(BITNET__G_SLOTS * sizeof *m->slot_key);
        m->slot_mask = (uint64_t *)bitnet__malloc(BITNET__G_SLOTS * sizeof *m->slot_mask);
        m->slot_to = (uint32_t *)bitnet__malloc(BITNET__G_SLOTS * sizeof *m->slot_to);
        if (!m->slot_key || !m->slot_mask || !m->slot_to) return BITNET_ERR_OUT_OF_MEMORY;
    }
    for (k = 0; k < m->mc_n; k++)
        if (m->mc_u[k].cp == m->u.cp && m->mc_u[k].need == m->u.need && m->mc_u[k].len == m->u.len && bitnet__gset_same(&m->mc_set[k], &m->cur))
            break;
    if (k < m->mc_n) {
        memcpy(allow, m->mc_allow[k], (size_t)t->n_vocab);
        goto stops;
    }
    /* the memo starts from the text's set, as set 0 */
    memset(m->slot_key, 0, BITNET__G_SLOTS * sizeof *m->slot_key);
    m->n_slot = 0, m->n_ms = 0;
    if (!m->cap_ms) {
        if (!(m->ms = (bitnet__gset *)bitnet__calloc(16, sizeof *m->ms)) || !(m->ms_h = (uint64_t *)bitnet__calloc(16, sizeof *m->ms_h)))
            return BITNET_ERR_OUT_OF_MEMORY;
        m->cap_ms = 16;
    }
    BITNET__TRY(bitnet__gset_copy(&m->ms[0], &m->cur));
    m->n_ms = 1, m->ms_h[0] = 0; /* (never found by its hash: a successor equal to it is a set of its own) */
    memset(allow, 0, (size_t)t->n_vocab);
    BITNET__TRY(bitnet__gm_walk(m, 0, m->u, 0, m->voc->n_order, 0, allow));
    k = m->mc_next, m->mc_next = (k + 1) & 3, m->mc_n += m->mc_n < 4;
    if (!m->mc_allow[k] && !(m->mc_allow[k] = (unsigned char *)bitnet__malloc((size_t)t->n_vocab))) return BITNET_ERR_OUT_OF_MEMORY;
    BITNET__TRY(bitnet__gset_copy(&m->mc_set[k], &m->cur));
    m->mc_u[k] = m->u;
    memcpy(m->mc_allow[k], allow, (size_t)t->n_vocab);
stops: /* (bitnet_generate takes any ids as stop tokens: those outside the vocabulary never come) */
    for (i = 0; i < n_stop; i++)
        if (stop[i] >= 0 && stop[i] < t->n_vocab) allow[stop[i]] = (unsigned char)bitnet__gm_complete(m);
    return BITNET_OK;
}

static void bitnet__scand_sift(bitnet__scand *h, size_t n, size_t j) { /* max-heap by bitnet__scand_before */
    for (;;) {
        size_t l = 2 * j + 1, r = l + 1, w = j;
        bitnet__scand t;
        if (l < n && bitnet__scand_before(&h[l], &h[w])) w = l;
        if (r < n && bitnet__scand_before(&h[r], &h[w])) w = r;
        if (w == j) return;
        t = h[j], h[j] = h[w], h[w] = t, j = w;
    }
}
static int bitnet__id_cmp(const void *a, const void *b) {
    return bitnet__i32_cmp(&((const bitnet__scand *)a)->id, &((const bitnet__scand *)b)->id);
}

/* Candidates best first (logit / temperature, then id): a heap over the whole row (whole), or the
   device's sorted k best. */
typedef struct bitnet__gsrc { bitnet__scand *h; size_t n; int heap, whole; } bitnet__gsrc;
static int bitnet__gsrc_next(bitnet__gsrc *src, bitnet__scand *c) {
    if (!src->n) return 0;
    *c = src->h[0];
    if (!src->heap) src->h++, src->n--;
    else src->h[0] = src->h[--src->n], bitnet__scand_sift(src->h, src->n, 0);
    return 1;
}

/* bitnet_sample's choice among the tokens the grammar allows, where the sampler keeps the best
   (greedy, top-k, min-p): the candidates are tried best first until it has all it keeps, so only a
   few tokens' bytes go through the grammar. Where the grammar refuses nearly everything (a
   property name, a digit), so many would be tried that after 256 (or a quarter of a small
   vocabulary) the whole row's heap is masked once instead and keeps only what the grammar allows. c gets the kept, *n their count; *done is 0
   where src ran out first and is not the whole row (the caller then asks the whole row). */
#define BITNET__GM_TRY_MAX 256 /* candidates tried one by one (about 0.5 us each) before the mask (the first of a generation: 8 ms for LLaMA 3) */
static bitnet_result bitnet__gm_select(bitnet__gm *m, const bitnet_sampler_params *sp, bitnet__gsrc *src, const int32_t *stop,
                                       size_t n_stop, bitnet__scand *c, size_t *n, int *done) {
    const int greedy = bitnet__sampler_greedy(sp);
    const size_t keep = greedy ? 1 : sp->top_k > 0 ? (size_t)sp->top_k : 0;
    float floor_logit = -INFINITY;
    bitnet__scand best;
    const size_t budget = BITNET__MIN((size_t)BITNET__GM_TRY_MAX, (size_t)m->tok->n_vocab / 4);
    size_t tried = 0, i, kept;
    int ok;
    *n = 0, *done = 1;
    while (!(keep && *n == keep) && !(src->n && src->h[0].logit < floor_logit)) { /* (min-p's floor) */
        if (!bitnet__gsrc_next(src, &best)) return *done = src->whole, BITNET_OK;
        BITNET__TRY(bitnet__gm_allows(m, best.id, stop, n_stop, &ok));
        if (++tried == budget && src->heap && m->allow) {
            BITNET__TRY(bitnet__gm_mask(m, stop, n_stop, m->allow));
            for (i = kept = 0; i < src->n; i++)
                if (m->allow[src->h[i].id]) src->h[kept++] = src->h[i];
            for (src->n = kept, i = kept / 2; i-- > 0;) bitnet__scand_sift(src->h, kept, i);
        }
        if (!ok) continue;
        if (*n == 0) floor_logit = bitnet__min_p_floor(best.logit, greedy ? 0.0f : sp->min_p); /* under the best allowed */
        c[(*n)++] = best;
    }
    return BITNET_OK;
}

/* The draw from what the grammar left (c[0 .. n), best first), and the choice taken into the
   matcher unless it is a stop token. */
static bitnet_result bitnet__gm_draw(bitnet__gm *m, const bitnet_sampler_params *sp, bitnet__scand *c, size_t n, uint64_t *rng,
                                     const int32_t *stop, size_t n_stop, int32_t *out) {
    size_t i;
    int ok;
    if (!n) return bitnet__err(BITNET_ERR_INVALID_STATE, "grammar: no token of the vocabulary can go on from here");
    if (bitnet__sampler_greedy(sp)) *out = c[0].id;
    else {
        /* without top-k or top-p the draw walks the candidates in id order, as bitnet_sample's */
        if (sp->top_k <= 0 && !(sp->top_p > 0 && sp->top_p < 1)) qsort(c, n, sizeof *c, bitnet__id_cmp);
        *out = bitnet__sample_from(c, n, sp, rng);
    }
    for (i = 0; i < n_stop; i++) if (*out == stop[i]) return BITNET_OK;
    return bitnet__gm_try(m, m->tok->bytes + m->tok->off[*out], m->tok->off[*out + 1] - m->tok->off[*out], 1, &ok);
}

/* The next token under the grammar, from the logits row: bitnet_sample's choice where the tokens the
   grammar does not allow are gone (the same token, the same draw). Greedy, top-k and min-p take
   candidates off a heap (bitnet__gm_select); temperature and top-p alone need every allowed token,
   and the whole vocabulary is masked (bitnet__gm_mask). */
static bitnet_result bitnet__gm_sample(bitnet__gm *m, float *logits, int32_t n_vocab, const bitnet_sampler_params *sp,
                                       const int32_t *hist, size_t n_hist, uint64_t *rng, const int32_t *stop, size_t n_stop,
                                       int32_t *out) {
    const int greedy = bitnet__sampler_greedy(sp);
    const float temp = greedy ? 1.0f : sp->temperature;
    bitnet__scand *c, *h;
    unsigned char *allow;
    size_t i, n = 0;
    int done;
    if (!greedy && !rng) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_generate: rng is NULL");
    BITNET__TRY(bitnet__penalize(logits, n_vocab, sp, hist, n_hist));
    if (!m->scratch) {
        if (!(m->scratch = bitnet__malloc(2 * (size_t)n_vocab * sizeof *c + (size_t)m->tok->n_vocab))) return BITNET_ERR_OUT_OF_MEMORY;
        m->allow = (unsigned char *)((bitnet__scand *)m->scratch + 2 * (size_t)n_vocab);
    }
    c = (bitnet__scand *)m->scratch, h = c + n_vocab, allow = m->allow;
    if (greedy || sp->top_k > 0 || sp->min_p > 0) {
        bitnet__gsrc src;
        for (src.n = 0, i = 0; i < (size_t)n_vocab; i++)
            if (logits[i] == logits[i]) h[src.n].logit = logits[i] / temp, h[src.n++].id = (int32_t)i;
        for (i = src.n / 2; i-- > 0;) bitnet__scand_sift(h, src.n, i);
        src.h = h, src.heap = 1, src.whole = 1;
        BITNET__TRY(bitnet__gm_select(m, sp, &src, stop, n_stop, c, &n, &done));
    } else { /* every allowed token */
        BITNET__TRY(bitnet__gm_mask(m, stop, n_stop, allow));
        for (i = 0; i < (size_t)n_vocab; i++)
            if (allow[i] && logits[i] == logits[i]) c[n].logit = logits[i] / temp, c[n++].id = (int32_t)i;
    }
    return bitnet__gm_draw(m, sp, c, n, rng, stop, n_stop, out);
}

BITNET_API bitnet_result bitnet_grammar_state_create(const bitnet_grammar *g, const bitnet_tokenizer *t, bitnet_grammar_state **out) {
    bitnet_grammar_state *st;
    bitnet_result r;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    BITNET__CHECK_PTR(g);
    BITNET__CHECK_PTR(t);
    if (!(st = (bitnet_grammar_state *)bitnet__calloc(1, sizeof *st))) return BITNET_ERR_OUT_OF_MEMORY;
    if ((r = bitnet__gm_init(&st->m, g, t)) != BITNET_OK) {
        bitnet_grammar_state_free(st);
        return r;
    }
    *out = st;
    return BITNET_OK;
}
BITNET_API void bitnet_grammar_state_free(bitnet_grammar_state *st) {
    if (!st) return;
    bitnet__gm_free(&st->m);
    bitnet__free(st);
}
static bitnet_result bitnet__gm_stops(const bitnet__gm *m, const int32_t *stop, size_t n_stop) {
    size_t i;
    if (n_stop && !stop) return bitnet__err(BITNET_ERR_NULL_POINTER, "grammar state: stop is NULL");
    for (i = 0; i < n_stop; i++)
        if (stop[i] < 0 || stop[i] >= m->tok->n_vocab) return bitnet__err(BITNET_ERR_BAD_TOKEN, "grammar state: stop token %d", (int)stop[i]);
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_grammar_state_allowed(bitnet_grammar_state *st, const int32_t *stop, size_t n_stop, unsigned char *allow) {
    BITNET__CHECK_PTR(st);
    BITNET__CHECK_PTR(allow);
    BITNET__TRY(bitnet__gm_stops(&st->m, stop, n_stop));
    return bitnet__gm_mask(&st->m, stop, n_stop, allow);
}
BITNET_API bitnet_result bitnet_grammar_state_accept(bitnet_grammar_state *st, int32_t token, const int32_t *stop, size_t n_stop) {
    const bitnet_tokenizer *t;
    size_t i;
    int ok = 0;
    BITNET__CHECK_PTR(st);
    BITNET__TRY(bitnet__gm_stops(&st->m, stop, n_stop));
    t = st->m.tok;
    if (token < 0 || token >= t->n_vocab) return bitnet__err(BITNET_ERR_BAD_TOKEN, "bitnet_grammar_state_accept: token %d", (int)token);
    BITNET__TRY(bitnet__gm_allows(&st->m, token, stop, n_stop, &ok));
    if (!ok) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_grammar_state_accept: the grammar does not allow token %d here", (int)token);
    for (i = 0; i < n_stop; i++) if (token == stop[i]) return BITNET_OK;
    return bitnet__gm_try(&st->m, t->bytes + t->off[token], t->off[token + 1] - t->off[token], 1, &ok);
}

/* >>cpu-forward =============================================================================== */

/* The model and session layout, shared by the CPU forward below and the GPU one (>>cuda-forward),
   which runs the same steps in the same order, numbered alike (bitnet__cpu_X / bitnet__gpu_X; the GPU
   fuses some: its linear takes the norm, its attention rope and kv_store, its GEMMs the adds and the gated activation):
     embed; per layer: norm_quant, linear q k v, rope, kv_store, attention, norm_quant (sub), linear o,
     add_norm_quant, linear gate up, glu_norm_quant, linear down, add; then head on the rows asked.
   See bitnet__cpu_forward for the shapes, and >>model for the hooks a GPU forward provides. */

#define BITNET__MAX_BATCH 512     /* prompt tokens per forward chunk (the GEMM's M) */
#define BITNET__MAX_HEAD_DIM 256  /* attention keeps a block of keys and values on the stack */

typedef struct bitnet__layer {
    const float *attn_norm;       /* [dim] */
    const float *attn_sub_norm;   /* [q_dim] */
    const float *ffn_norm;        /* [dim] */
    const float *ffn_sub_norm;    /* [ffn_dim] */
    const void *wq, *wk, *wv;     /* I2_S [q_dim][dim], [kv_dim][dim], [kv_dim][dim]; scale in the tail */
    const void *wo;               /* I2_S [dim][q_dim] */
    const void *w_gate, *w_up;    /* I2_S [ffn_k][dim] */
    const void *w_down;           /* I2_S [dim][ffn_k] */
} bitnet__layer;

struct bitnet_model {
    bitnet_model_info info;
    int32_t q_dim, kv_dim;        /* n_heads*head_dim, n_kv_heads*head_dim */
    int32_t ffn_k;                /* the matrices' FFN width: ffn_dim rounded up to whole I2_S blocks (zeros past it) */
    const uint16_t *tok_embd;     /* fp16 [n_vocab][dim]; NULL for a block-type embedding (rows from emb_q) unless
                                     an fp16 head needs its table */
    const uint8_t *emb_q;         /* token_embd in a llama.cpp block type (emb_type, emb_row bytes a row) */
    bitnet_tensor_type emb_type;
    size_t emb_row;
    const uint16_t *head_f16;     /* fp16 [n_vocab][dim]: output.weight, or tok_embd when tied */
    int8_t *head_q8;              /* int8 [n_vocab][dim], NULL when the fp16 head is used */
    float *head_scale;            /* [n_vocab]: row r of the head = head_q8[r] * head_scale[r] */
    const float *output_norm;     /* [dim] */
    const float *rope_ff;         /* [head_dim/2] RoPE frequency divisors, or NULL */
    uint64_t fingerprint;         /* of its shape and norms: a session state names its model by it (>>state) */
    bitnet__layer *layers;        /* [n_layers] */
    bitnet_gguf *gguf;            /* owns the mapping that the pointers above point into */
    void *file_copy;              /* no_mmap: the file, read into memory */
    bitnet_tokenizer *tok;        /* NULL for bitnet_model_from_weights */
    void **owned; size_t n_owned; /* tensors converted at load (freed with the model) */
    void *gpu;                    /* the GPU forward's weights (>>cuda-forward) */
};

struct bitnet_session {
    bitnet_model *m;
    int32_t n_ctx, pos, n_batch;
    int32_t n_kv;                 /* positions in the cache: n_ctx rounded up to a whole key tile */
    uint16_t *k_cache;            /* fp16 [n_layers][n_kv_heads][n_kv/16][head_dim][16]: tiles of 16 keys,
                                     transposed, so attention scores 16 keys with plain vector FMAs */
    uint16_t *v_cache;            /* fp16 [n_layers][n_kv_heads][n_kv][head_dim]. fp16 halves what decode
                                     reads per token, and the values match the GPU cache's */
    float *rope;                  /* [n_ctx][head_dim/2][2]: cos, sin of pos * theta^(-2i/head_dim) / rope_ff[i],
                                     angles in float32 as Hugging Face computes them */
    float *x;                     /* [n_batch][dim] the residual stream */
    float *xb;                    /* [n_batch][max(dim, q_dim)] attention output, then o/down output */
    float *q;                     /* [n_batch][q_dim] */
    float *k, *v;                 /* [n_batch][kv_dim] */
    float *hg, *hu;               /* [n_batch][ffn_k] gate, up */
    int8_t *aq;                   /* [n_batch][max(dim, q_dim, ffn_k)] int8 activations of a linear */
    float *as;                    /* [n_batch] their scales (127 / absmax) */
    int32_t *asum;                /* [n_batch] their sums */
    float *logits;                /* [n_vocab] the last evaluated token's (bitnet_generate samples it) */
    int32_t *tokens;              /* [n_ctx] the tokens at positions 0 .. pos-1 (repetition penalty) */
    int has_logits;               /* logits is current */
    int32_t chat_pos;             /* bitnet_chat: pos after its last message (else other calls ran since) */
    int chat_state;               /* then: 0 nothing open, 1 a reply to close, 2 the same and chat_last */
    int32_t chat_last;            /* (2) the reply's last token, sampled and not evaluated */
    bitnet__gvoc voc;             /* the grammar mask's vocabulary, from the first generation under a grammar */
    void *gpu;                    /* the GPU forward's buffers */
};

static int32_t bitnet__ffn_k(int32_t ffn_dim) {
    return (ffn_dim + BITNET_I2S_BLOCK - 1) / BITNET_I2S_BLOCK * BITNET_I2S_BLOCK;
}

/* ---- row-parallel helper: fn(ctx, r) for r in [0, n), in chunks claimed by the threads ------ */
/* About 8 chunks per thread, so a thread the OS keeps waiting does not hold the others up. */
typedef struct bitnet__rows { void (*fn)(void *ctx, int r); void *ctx; int n, chunk, next; } bitnet__rows;
static void bitnet__rows_task(void *arg, int ith, int nth) {
    bitnet__rows *t = (bitnet__rows *)arg;
    int r, r0;
    (void)ith;
    (void)nth;
    for (;;) {
#if defined(BITNET__POOL)
        r0 = __atomic_fetch_add(&t->next, t->chunk, __ATOMIC_RELAXED);
#else
        r0 = t->next, t->next += t->chunk;
#endif
        if (r0 >= t->n) break;
        for (r = r0; r < BITNET__MIN(t->n, r0 + t->chunk); r++) t->fn(t->ctx, r);
    }
}
/* work: about how many scalar operations one row costs; small jobs stay on this thread because
   waking the pool costs more than they do. */
static void bitnet__for_rows(int n, size_t work, void (*fn)(void *ctx, int r), void *ctx) {
    bitnet__rows t;
    t.fn = fn;
    t.ctx = ctx;
    t.n = n;
    t.next = 0;
    t.chunk = BITNET__MAX(1, n / (8 * bitnet_num_threads()));
    if ((size_t)n * work < 32768) bitnet__rows_task(&t, 0, 1);
    else bitnet__parallel(bitnet__rows_task, &t);
}

/* memcpy on the thread pool, 4 MB a piece: a large copy out of a mapped file (its page faults too)
   spread over the cores */
typedef struct bitnet__pcopy { unsigned char *dst; const unsigned char *src; size_t n; } bitnet__pcopy;
static void bitnet__pcopy_one(void *ctx, int i) {
    const bitnet__pcopy *c = (const bitnet__pcopy *)ctx;
    const size_t a = (size_t)i << 22, e = BITNET__MIN(c->n, a + ((size_t)1 << 22));
    memcpy(c->dst + a, c->src + a, e - a);
}
BITNET__UNUSED static void bitnet__copy_parallel(void *dst, const void *src, size_t n) {
    bitnet__pcopy c;
    c.dst = (unsigned char *)dst, c.src = (const unsigned char *)src, c.n = n;
    bitnet__for_rows((int)((n + ((size_t)1 << 22) - 1) >> 22), (size_t)1 << 22, bitnet__pcopy_one, &c);
}

/* ---- the steps of the forward pass (the GPU side numbers its functions alike) ---------------- */

/* Float or block-type tensors made fp16, 256 elements at a time (whole blocks of any type), on the thread pool. */
typedef struct bitnet__f16job { bitnet_tensor_type type; const uint8_t *src; size_t total, blk, bytes; uint16_t *dst; } bitnet__f16job;
static void bitnet__f16_worker(void *arg, int ith, int nth) {
    const bitnet__f16job *j = (const bitnet__f16job *)arg;
    float f[256];
    size_t i, lo, hi;
    bitnet__range_split((j->total + 255) / 256, ith, nth, &lo, &hi);
    for (i = lo; i < hi; i++) { /* (whole blocks, sizes checked by the caller: no error here) */
        const size_t e = BITNET__MIN(256, j->total - 256 * i);
        if (bitnet_dequantize(j->type, j->src + 256 / j->blk * j->bytes * i, e / j->blk * j->bytes, f, e) == BITNET_OK)
            bitnet_convert_fp32_to_fp16(f, j->dst + 256 * i, e);
    }
}
/* A block-type embedding's rows made fp16 into dst [n_vocab][dim], on the thread pool (bitnet__tensor_f16's
   worker): its fp16 table, made only where something reads it whole (an fp16 head, the GPU's copy). */
static void bitnet__emb_fill(const bitnet_model *m, uint16_t *dst) {
    const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)m->emb_type);
    bitnet__f16job j;
    j.type = m->emb_type, j.src = m->emb_q, j.total = (size_t)m->info.n_vocab * (size_t)m->info.dim, j.blk = tt->blk, j.bytes = tt->bytes;
    j.dst = dst;
    bitnet__parallel(bitnet__f16_worker, &j);
}

/* Row r of the embedding as fp32 (x32) or fp16 (x16): the fp16 table, or a block-type embedding's
   blocks made fp16 when read (bitnet__emb_fill's values: no table is kept unless an fp16 head reads it). */
static void bitnet__emb_row(const bitnet_model *m, int32_t r, float *x32, uint16_t *x16) {
    const size_t dim = (size_t)m->info.dim;
    const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)m->emb_type);
    size_t e, n;
    if (m->tok_embd) {
        if (x32) bitnet_convert_fp16_to_fp32(m->tok_embd + (size_t)r * dim, x32, dim);
        if (x16) memcpy(x16, m->tok_embd + (size_t)r * dim, dim * 2);
        return;
    }
    for (e = 0; e < dim; e += n) { /* 256 at a time: whole blocks of any type (dim is whole blocks) */
        uint16_t h[256];
        float f[256];
        n = BITNET__MIN(256, dim - e);
        bitnet_dequantize(m->emb_type, m->emb_q + (size_t)r * m->emb_row + e / tt->blk * tt->bytes, n / tt->blk * tt->bytes, f, n);
        bitnet_convert_fp32_to_fp16(f, x16 ? x16 + e : h, n);
        if (x32) bitnet_convert_fp16_to_fp32(x16 ? x16 + e : h, x32 + e, n);
    }
}

/* 1. embed: x[t] = tok_embd[tokens[t]] as fp32 */
static void bitnet__cpu_embed(bitnet_session *s, const int32_t *tokens, int m) {
    int t;
    for (t = 0; t < m; t++) bitnet__emb_row(s->m, tokens[t], s->x + (size_t)t * s->m->info.dim, NULL);
}

/* e^x = 2^n e^r, n = round(x / ln 2) (by adding and subtracting 1.5 * 2^23), r = x - n ln 2 in two
   parts (n * LN2_HI is exact), e^r by its Taylor series to r^7 (|r| <= 0.35: 6e-9 left out).
   Additions and multiplications only: no fma to be contracted or not, so every path (AVX-512, the
   GPU's bn_expf) rounds each step alike. */
#define BITNET__LOG2E_F 1.44269504f
#define BITNET__LN2_HI_F 0.693145751953125f /* 15 significant bits */
#define BITNET__LN2_LO_F 1.42860682e-6f
#define BITNET__EXP_C7 1.98412698e-4f /* 1/7! */
#define BITNET__EXP_C6 1.38888889e-3f
#define BITNET__EXP_C5 8.33333333e-3f
#define BITNET__EXP_C4 4.16666667e-2f
#define BITNET__EXP_C3 1.66666667e-1f
BITNET_API float bitnet_expf(float x) {
    union { uint32_t u; float f; } b;
    float n, r, p;
    if (!(x >= -87.0f)) x = -87.0f; /* also NaN, as max(NaN, -87) on the vector paths */
    if (x > 88.0f) x = 88.0f;
    n = (x * BITNET__LOG2E_F + 12582912.0f) - 12582912.0f;
    r = x - n * BITNET__LN2_HI_F;
    r = r - n * BITNET__LN2_LO_F;
    p = BITNET__EXP_C7;
    p = p * r + BITNET__EXP_C6;
    p = p * r + BITNET__EXP_C5;
    p = p * r + BITNET__EXP_C4;
    p = p * r + BITNET__EXP_C3;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    b.u = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    return p * b.f;
}
BITNET_API float bitnet_glu(int act, float gate, float up) {
    if (act == BITNET_FFN_RELU2) {
        float g = gate > 0.0f ? gate : 0.0f; /* a max instruction, not a branch on the random sign */
        return g * g * up;
    }
    if (act == BITNET_FFN_SILU) return gate / (1.0f + bitnet_expf(-gate)) * up;
    return NAN;
}

/* 2. norm_quant: aq[t] = int8(rmsnorm(in[t]) * w), with its scale and sum; in is [m][k]. Two
      variants first update the row in place while it is in cache: add_norm_quant (in += y, the
      residual) and glu_norm_quant (in = act(in) * y, the FFN; fp32 because relu^2 overflows
      fp16). */
/* ops: PLAIN, ADD, and the gated activations by their bitnet_ffn_act values */
enum { BITNET__NQ_PLAIN, BITNET__NQ_RELU2 = BITNET_FFN_RELU2, BITNET__NQ_SILU = BITNET_FFN_SILU, BITNET__NQ_ADD };
typedef struct bitnet__nq { bitnet_session *s; float *in; const float *y; const float *w; int k, ld, op; } bitnet__nq;
/* x += y (op ADD) or x = act(x) * y (RELU2, SILU) on [i, k): the same IEEE operations on every path */
static void bitnet__ew_ref(float *x, const float *y, int i, int k, int op) {
    if (op == BITNET__NQ_ADD)
        for (; i < k; i++) x[i] += y[i];
    else
        for (; i < k; i++) x[i] = bitnet_glu(op, x[i], y[i]);
}
#if defined(BITNET__X86_SIMD)
/* bitnet_expf's operations, 16 at a time */
BITNET__AVX512_FN static __m512 bitnet__expf_avx512(__m512 x) {
    const __m512 big = _mm512_set1_ps(12582912.0f);
    __m512 n, r, p;
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f)); /* max(NaN, -87) = -87 */
    n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(BITNET__LOG2E_F)), big), big);
    r = _mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(BITNET__LN2_HI_F)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(BITNET__LN2_LO_F)));
    p = _mm512_set1_ps(BITNET__EXP_C7);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(BITNET__EXP_C6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(BITNET__EXP_C5));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(BITNET__EXP_C4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(BITNET__EXP_C3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    return _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n),
                                                                                  _mm512_set1_epi32(127)), 23)));
}
BITNET__AVX512_FN static void bitnet__ew_avx512(float *x, const float *y, int k, int op) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int i;
    for (i = 0; i + 16 <= k; i += 16) {
        __m512 a = _mm512_loadu_ps(x + i);
        const __m512 b = _mm512_loadu_ps(y + i);
        if (op == BITNET__NQ_ADD) a = _mm512_add_ps(a, b);
        else if (op == BITNET__NQ_RELU2) a = _mm512_max_ps(a, _mm512_setzero_ps()), a = _mm512_mul_ps(_mm512_mul_ps(a, a), b);
        else a = _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(one, bitnet__expf_avx512(_mm512_sub_ps(_mm512_setzero_ps(), a)))), b);
        _mm512_storeu_ps(x + i, a);
    }
    bitnet__ew_ref(x, y, i, k, op);
}
#endif
static void bitnet__ew_op(float *x, const float *y, int k, int op) {
#if defined(BITNET__X86_SIMD)
    if (bitnet_cpu_isa() == BITNET_ISA_AVX512) {
        bitnet__ew_avx512(x, y, k, op);
        return;
    }
#endif
    bitnet__ew_ref(x, y, 0, k, op);
}
/* Rows of k values ld apart; aq's rows too, their codes past k zero (a padded matrix's K) */
static void bitnet__nq_row(void *ctx, int t) {
    const bitnet__nq *c = (const bitnet__nq *)ctx;
    float *x = c->in + (size_t)t * c->ld;
    const float *y = c->y ? c->y + (size_t)t * c->ld : NULL;
    int8_t *q = c->s->aq + (size_t)t * c->ld;
    if (c->op != BITNET__NQ_PLAIN) bitnet__ew_op(x, y, c->k, c->op);
    bitnet__rmsnorm_quantize(x, c->w, (size_t)c->k, c->s->m->info.norm_eps, q, c->s->as + t, c->s->asum + t);
    if (c->ld > c->k) memset(q + c->k, 0, (size_t)(c->ld - c->k));
}
static void bitnet__norm_quant_op(bitnet_session *s, float *in, const float *y, const float *w, int m, int k, int ld, int op) {
    bitnet__nq c;
    c.s = s;
    c.in = in;
    c.y = y;
    c.w = w;
    c.k = k;
    c.ld = ld;
    c.op = op;
    bitnet__for_rows(m, (size_t)k * 4, bitnet__nq_row, &c);
}
static void bitnet__cpu_norm_quant(bitnet_session *s, float *in, const float *w, int m, int k) {
    bitnet__norm_quant_op(s, in, NULL, w, m, k, k, BITNET__NQ_PLAIN);
}
static void bitnet__cpu_add_norm_quant(bitnet_session *s, float *x, const float *y, const float *w, int m, int k) {
    bitnet__norm_quant_op(s, x, y, w, m, k, k, BITNET__NQ_ADD);
}
/* g = act(g) * u: the model's bitnet_ffn_act; k = ffn_dim values of rows ffn_k apart */
static void bitnet__cpu_glu_norm_quant(bitnet_session *s, float *g, const float *u, const float *w, int m, int k) {
    bitnet__norm_quant_op(s, g, u, w, m, k, s->m->ffn_k, s->m->info.ffn_act);
}

/* 3. linear: out[m][n] = ternary W[n][k] x aq[m][k] (both scales applied) */
static bitnet_result bitnet__cpu_linear(bitnet_session *s, const void *w, int n, int k, int m, float *out) {
    return bitnet_gemm_i2s(w, bitnet_i2s_bytes((size_t)n, (size_t)k), (size_t)n, (size_t)k, s->aq, s->as, s->asum,
                           (size_t)m, out);
}

/* 4. rope: rotate q[t] and k[t] at position pos + t, NEOX style: pairs (i, i + head_dim/2) of
      each head (the Hugging Face rotate-half order, which bitnet.cpp's GGUF keeps) */
typedef struct bitnet__rp { bitnet_session *s; int pos; } bitnet__rp;
static void bitnet__rope_head(float *x, const float *cs, int half) {
    int i;
    for (i = 0; i < half; i++) {
        float x0 = x[i], x1 = x[i + half], c = cs[2 * i], sn = cs[2 * i + 1];
        x[i] = x0 * c - x1 * sn;
        x[i + half] = x0 * sn + x1 * c;
    }
}
static void bitnet__rope_row(void *ctx, int t) {
    const bitnet__rp *c = (const bitnet__rp *)ctx;
    const bitnet_model *md = c->s->m;
    int h, hd = md->info.head_dim;
    const float *cs = c->s->rope + (size_t)(c->pos + t) * hd;
    for (h = 0; h < md->info.n_heads; h++) bitnet__rope_head(c->s->q + (size_t)t * md->q_dim + h * hd, cs, hd / 2);
    for (h = 0; h < md->info.n_kv_heads; h++) bitnet__rope_head(c->s->k + (size_t)t * md->kv_dim + h * hd, cs, hd / 2);
}
static void bitnet__cpu_rope(bitnet_session *s, int m) {
    bitnet__rp c;
    c.s = s;
    c.pos = s->pos;
    bitnet__for_rows(m, (size_t)(s->m->q_dim + s->m->kv_dim) * 3, bitnet__rope_row, &c);
}

/* 5. kv_store: k[t], v[t] -> the fp16 cache of layer l at position pos + t (k into its tile's
      column; a tile is zeroed when its first key arrives, so unused columns hold no garbage) */
static void bitnet__cpu_kv_store(bitnet_session *s, int l, int m) {
    const bitnet_model *md = s->m;
    int t, h, d, hd = md->info.head_dim, nkv = md->info.n_kv_heads;
    uint16_t row[BITNET__MAX_HEAD_DIM];
    for (t = 0; t < m; t++)
        for (h = 0; h < nkv; h++) {
            int p = s->pos + t;
            size_t base = ((size_t)l * nkv + h) * (size_t)s->n_kv * hd;
            uint16_t *kt = s->k_cache + base + (size_t)(p / 16) * hd * 16;
            if (p % 16 == 0) memset(kt, 0, (size_t)hd * 16 * sizeof *kt);
            bitnet_convert_fp32_to_fp16(s->k + (size_t)t * md->kv_dim + h * hd, row, (size_t)hd);
            for (d = 0; d < hd; d++) kt[d * 16 + p % 16] = row[d];
            bitnet_convert_fp32_to_fp16(s->v + (size_t)t * md->kv_dim + h * hd, s->v_cache + base + (size_t)p * hd, (size_t)hd);
        }
}

/* K and V of positions [0, n) of layer l's kv head h, to (put) or from the fp16 rows k[n][hd] and
   v[n][hd] of a session state (>>state); a tile is zeroed as kv_store zeroes it */
static void bitnet__cpu_kv_io(bitnet_session *s, int l, int h, uint16_t *k, uint16_t *v, int n, int put) {
    const size_t hd = (size_t)s->m->info.head_dim, base = ((size_t)l * (size_t)s->m->info.n_kv_heads + (size_t)h) * (size_t)s->n_kv * hd;
    size_t p, d;
    for (p = 0; p < (size_t)n; p++) {
        uint16_t *kt = s->k_cache + base + p / 16 * hd * 16 + p % 16, *vr = s->v_cache + base + p * hd;
        if (put && p % 16 == 0) memset(kt, 0, hd * 16 * sizeof *kt);
        for (d = 0; d < hd; d++) {
            if (put) kt[d * 16] = k[p * hd + d];
            else k[p * hd + d] = kt[d * 16];
        }
        if (put) memcpy(vr, v + p * hd, hd * sizeof *vr);
        else memcpy(v + p * hd, vr, hd * sizeof *vr);
    }
}

/* 6. attention: xb[t][h] = softmax(q[t][h] . K[0..pos+t] / sqrt(head_dim)) V, causal, GQA (query
      head h reads kv head h / (n_heads / n_kv_heads)). One work item is one position and one kv
      head with the query heads that share it, so each key and value tile is converted from fp16
      once for the group; an online softmax over tiles of 16 keys needs no scratch that grows with
      the context. Scores, exp, softmax and sums are in double, rounded to float once at the end,
      on every path here and on the GPU (>>cuda-forward): then the paths differ by about 1e-16,
      far below a float's last bit, and give the same float output almost always. In float the
      order of the sums alone moved outputs by an ulp or so, and the int8 quantization after
      attention turned such ulps into whole codes that grew, layer after layer, into percent-level
      logit differences between CPU and GPU (and between CPU ISAs) on 2B-4T-deep models. */
/* Rows r in [0, nt) of one kv head: q + r*stride holds the g query heads of position pos0 + r,
   which attend keys [0, len0 + r) (kc the head's key tiles, vc its value rows); out + r*stride
   gets the g head outputs. Several positions per call share each converted tile. */
typedef void (*bitnet__attn_fn)(const float *q, size_t stride, int nt, int g, const uint16_t *kc, const uint16_t *vc,
                                int len0, int hd, float *out);
#define BITNET__ATTN_ROWS 4 /* positions per work item */

/* Plain C, any head_dim: heads four at a time, so the stack holds one tile of keys and values
   and four accumulators. Scores, softmax and sums are in double (see bitnet__cpu_attention). */
static void bitnet__attn_row_ref(const float *q, int g, const uint16_t *kc, const uint16_t *vc, int len, int hd,
                                 float *out) {
    float kf[BITNET__MAX_HEAD_DIM * 16], vf[16 * BITNET__MAX_HEAD_DIM];
    double o[4][BITNET__MAX_HEAD_DIM], sc[16], mx[4], sum[4], f, ds = 1.0 / sqrt((double)hd);
    int h0, h, s0, j, d, nh;
    for (h0 = 0; h0 < g; h0 += 4) {
        nh = BITNET__MIN(4, g - h0);
        for (h = 0; h < nh; h++) {
            mx[h] = -INFINITY, sum[h] = 0;
            for (d = 0; d < hd; d++) o[h][d] = 0;
        }
        for (s0 = 0; s0 < len; s0 += 16) {
            int nb = BITNET__MIN(16, len - s0);
            bitnet_convert_fp16_to_fp32(kc + (size_t)s0 * hd, kf, (size_t)hd * 16);
            bitnet_convert_fp16_to_fp32(vc + (size_t)s0 * hd, vf, (size_t)nb * hd);
            for (h = 0; h < nh; h++) {
                const float *qh = q + (size_t)(h0 + h) * hd;
                double bm = -INFINITY;
                for (j = 0; j < 16; j++) sc[j] = 0;
                for (d = 0; d < hd; d++)
                    for (j = 0; j < 16; j++) sc[j] += (double)qh[d] * (double)kf[d * 16 + j];
                for (j = 0; j < nb; j++) {
                    sc[j] *= ds;
                    bm = sc[j] > bm ? sc[j] : bm;
                }
                if (bm > mx[h]) { /* a new maximum: rescale what has been summed so far */
                    f = exp(mx[h] - bm);
                    for (d = 0; d < hd; d++) o[h][d] *= f;
                    sum[h] *= f;
                    mx[h] = bm;
                }
                for (j = 0; j < nb; j++) {
                    double p = exp(sc[j] - mx[h]);
                    sum[h] += p;
                    for (d = 0; d < hd; d++) o[h][d] += p * (double)vf[j * hd + d];
                }
            }
        }
        for (h = 0; h < nh; h++)
            for (d = 0; d < hd; d++) out[(size_t)(h0 + h) * hd + d] = (float)(o[h][d] / sum[h]);
    }
}
static void bitnet__attn_ref(const float *q, size_t stride, int nt, int g, const uint16_t *kc, const uint16_t *vc,
                             int len0, int hd, float *out) {
    int r;
    for (r = 0; r < nt; r++) bitnet__attn_row_ref(q + r * stride, g, kc, vc, len0 + r, hd, out + r * stride);
}

#if defined(BITNET__X86_SIMD)
/* exp of 8 doubles that are at most 0 (the softmax's), within about 1e-14 relative: 2^n times a
   degree-11 Taylor polynomial of the remainder; below -708 (and -inf) it gives 0. */
BITNET__AVX512_FN static __m512d bitnet__exp_pd_avx512(__m512d x) {
    static const double c[12] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                                 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1.0, 1.0};
    const __m512d lo = _mm512_set1_pd(-708.0);
    __mmask8 zero = _mm512_cmp_pd_mask(x, lo, _CMP_LT_OQ);
    __m512d n, r, p;
    int i;
    x = _mm512_max_pd(x, lo);
    n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), x); /* x - n ln2, ln2 in two parts */
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);
    p = _mm512_set1_pd(c[0]);
    for (i = 1; i < 12; i++) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[i]));
    return _mm512_maskz_mov_pd((__mmask8)~zero, _mm512_scalef_pd(p, n));
}

/* o[16] must stay in registers: unrolled, GCC keeps it there instead of in memory. */
#if defined(__GNUC__)
#define BITNET__UNROLL16 _Pragma("GCC unroll 16")
#else
#define BITNET__UNROLL16
#endif
/* The same for head_dim up to 256, groups of up to 8 heads and 1024 dims (2B-4T's 4 x 128, Falcon
   3's 2-3 x 256, 1bitLLM's 96 and 100), in double like the reference: 16-key tiles converted once
   for all rows and heads, the scores of a tile for four heads at a time (each key row loaded once),
   a head's output in chunks of 128 dims held in 16 zmm while the tile's values stream through (a
   last chunk of fewer dims in memory, 8 at a time; a head's last 8 under a mask where hd is not a
   multiple of 8). */
#define BITNET__ATTN_SIMD_HD 256
#define BITNET__ATTN_SIMD_GHD 1024
BITNET__AVX512_FN static void bitnet__attn_avx512(const float *q, size_t stride, int nt, int g, const uint16_t *kc,
                                                  const uint16_t *vc, int len0, int hd, float *out) {
    double kd[BITNET__ATTN_SIMD_HD * 16], vd[16 * BITNET__ATTN_SIMD_HD], od[BITNET__ATTN_ROWS * BITNET__ATTN_SIMD_GHD];
    double qd[BITNET__ATTN_ROWS * BITNET__ATTN_SIMD_GHD], p[16], sc4[64], mx[BITNET__ATTN_ROWS * 8], sum[BITNET__ATTN_ROWS * 8];
    const double ds = 1.0 / sqrt((double)hd);
    int h, r, s0, j, d, c, c0, len = len0 + nt - 1;
#define BITNET__LAST(c, n) ((n) - (c) >= 8 ? (__mmask8)0xff : (__mmask8)((1u << ((n) - (c))) - 1)) /* lanes c .. n-1 of 8 */
    for (r = 0; r < nt * g; r++) mx[r] = -INFINITY, sum[r] = 0;
    /* the queries in double once, so the score loop broadcasts them straight from memory */
    for (r = 0; r < nt; r++)
        for (h = 0; h < g; h++)
            for (d = 0; d < hd; d += 8)
                _mm512_mask_storeu_pd(qd + ((size_t)r * g + h) * hd + d, BITNET__LAST(d, hd),
                                      _mm512_cvtps_pd(_mm256_maskz_loadu_ps(BITNET__LAST(d, hd), q + r * stride + (size_t)h * hd + d)));
    memset(od, 0, (size_t)nt * (size_t)g * (size_t)hd * sizeof od[0]);
    for (s0 = 0; s0 < len; s0 += 16) {
        int nbv = BITNET__MIN(16, len - s0);
        for (d = 0; d < hd * 16; d += 8)
            _mm512_storeu_pd(kd + d, _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kc + (size_t)s0 * hd + d)))));
        for (d = 0; d + 8 <= nbv * hd; d += 8) /* (the tile's values: no mask in this loop, the decode's hottest) */
            _mm512_storeu_pd(vd + d, _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vc + (size_t)s0 * hd + d)))));
        if (d < nbv * hd)
            _mm512_mask_storeu_pd(vd + d, BITNET__LAST(d, nbv * hd),
                                  _mm512_cvtps_pd(_mm256_cvtph_ps(_mm_maskz_loadu_epi16(BITNET__LAST(d, nbv * hd), vc + (size_t)s0 * hd + d))));
        for (r = 0; r < nt; r++) {
            int nb = BITNET__MIN(16, len0 + r - s0);
            __mmask8 v0, v1;
            if (nb <= 0) continue; /* this tile is past the row's causal end */
            v0 = (__mmask8)(nb >= 8 ? 0xff : (1u << nb) - 1);
            v1 = (__mmask8)(nb >= 16 ? 0xff : nb <= 8 ? 0 : (1u << (nb - 8)) - 1);
            for (h = 0; h < g; h++) {
                double *oh = od + ((size_t)r * g + h) * hd, bm, f = 1.0, *mxh = &mx[r * g + h];
                int rescale = 0;
                __m512d a0, a1, e0, e1, fv, o[16];
                if (h % 4 == 0) { /* scores of the 16 keys for heads h..h+3: each key row loaded once */
                    const double *q0 = qd + ((size_t)r * g + h) * hd;
                    const double *q1 = qd + ((size_t)r * g + BITNET__MIN(h + 1, g - 1)) * hd;
                    const double *q2 = qd + ((size_t)r * g + BITNET__MIN(h + 2, g - 1)) * hd;
                    const double *q3 = qd + ((size_t)r * g + BITNET__MIN(h + 3, g - 1)) * hd;
                    __m512d s0l = _mm512_setzero_pd(), s0h = s0l, s1l = s0l, s1h = s0l, s2l = s0l, s2h = s0l, s3l = s0l, s3h = s0l;
                    for (d = 0; d < hd; d++) {
                        __m512d kl = _mm512_loadu_pd(kd + 16 * d), kh = _mm512_loadu_pd(kd + 16 * d + 8), x;
                        x = _mm512_set1_pd(q0[d]), s0l = _mm512_fmadd_pd(x, kl, s0l), s0h = _mm512_fmadd_pd(x, kh, s0h);
                        x = _mm512_set1_pd(q1[d]), s1l = _mm512_fmadd_pd(x, kl, s1l), s1h = _mm512_fmadd_pd(x, kh, s1h);
                        x = _mm512_set1_pd(q2[d]), s2l = _mm512_fmadd_pd(x, kl, s2l), s2h = _mm512_fmadd_pd(x, kh, s2h);
                        x = _mm512_set1_pd(q3[d]), s3l = _mm512_fmadd_pd(x, kl, s3l), s3h = _mm512_fmadd_pd(x, kh, s3h);
                    }
                    _mm512_storeu_pd(sc4, s0l), _mm512_storeu_pd(sc4 + 8, s0h), _mm512_storeu_pd(sc4 + 16, s1l);
                    _mm512_storeu_pd(sc4 + 24, s1h), _mm512_storeu_pd(sc4 + 32, s2l), _mm512_storeu_pd(sc4 + 40, s2h);
                    _mm512_storeu_pd(sc4 + 48, s3l), _mm512_storeu_pd(sc4 + 56, s3h);
                }
                a0 = _mm512_mask_mov_pd(_mm512_set1_pd(-INFINITY), v0, _mm512_mul_pd(_mm512_loadu_pd(sc4 + 16 * (h % 4)), _mm512_set1_pd(ds)));
                a1 = _mm512_mask_mov_pd(_mm512_set1_pd(-INFINITY), v1, _mm512_mul_pd(_mm512_loadu_pd(sc4 + 16 * (h % 4) + 8), _mm512_set1_pd(ds)));
                bm = _mm512_reduce_max_pd(_mm512_max_pd(a0, a1));
                if (bm > *mxh) { /* a new maximum: what has been summed so far is rescaled by f */
                    f = exp(*mxh - bm), rescale = 1;
                    sum[r * g + h] *= f;
                    *mxh = bm;
                }
                fv = _mm512_set1_pd(f);
                e0 = bitnet__exp_pd_avx512(_mm512_sub_pd(a0, _mm512_set1_pd(*mxh)));
                e1 = bitnet__exp_pd_avx512(_mm512_sub_pd(a1, _mm512_set1_pd(*mxh)));
                sum[r * g + h] += _mm512_reduce_add_pd(_mm512_add_pd(e0, e1));
                _mm512_storeu_pd(p, e0);
                _mm512_storeu_pd(p + 8, e1);
                for (c0 = 0; c0 + 128 <= hd; c0 += 128) { /* out = out f + p V, 128 dims in registers */
                    BITNET__UNROLL16 for (c = 0; c < 16; c++) o[c] = _mm512_loadu_pd(oh + c0 + 8 * c);
                    if (rescale) {
                        BITNET__UNROLL16 for (c = 0; c < 16; c++) o[c] = _mm512_mul_pd(o[c], fv);
                    }
                    for (j = 0; j < nb; j++) {
                        __m512d pj = _mm512_set1_pd(p[j]);
                        const double *v = vd + (size_t)hd * j + c0;
                        BITNET__UNROLL16 for (c = 0; c < 16; c++) o[c] = _mm512_fmadd_pd(pj, _mm512_loadu_pd(v + 8 * c), o[c]);
                    }
                    BITNET__UNROLL16 for (c = 0; c < 16; c++) _mm512_storeu_pd(oh + c0 + 8 * c, o[c]);
                }
                for (c = c0; c < hd; c += 8) { /* the rest, 8 dims at a time */
                    const __mmask8 mk = BITNET__LAST(c, hd);
                    __m512d oc = _mm512_maskz_loadu_pd(mk, oh + c);
                    if (rescale) oc = _mm512_mul_pd(oc, fv);
                    for (j = 0; j < nb; j++) oc = _mm512_fmadd_pd(_mm512_set1_pd(p[j]), _mm512_maskz_loadu_pd(mk, vd + (size_t)hd * j + c), oc);
                    _mm512_mask_storeu_pd(oh + c, mk, oc);
                }
            }
        }
    }
    for (r = 0; r < nt; r++)
        for (h = 0; h < g; h++) {
            const double *oh = od + ((size_t)r * g + h) * hd, inv = 1.0 / sum[r * g + h];
            float *dst = out + r * stride + (size_t)h * hd;
            for (c = 0; c < hd; c += 8)
                _mm256_mask_storeu_ps(dst + c, BITNET__LAST(c, hd),
                                      _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_maskz_loadu_pd(BITNET__LAST(c, hd), oh + c), _mm512_set1_pd(inv))));
        }
#undef BITNET__LAST
}
#endif

typedef struct bitnet__at { bitnet_session *s; int l, t0, m, next; bitnet__attn_fn fn; } bitnet__at;
static void bitnet__attn_task(void *arg, int ith, int nth) {
    bitnet__at *c = (bitnet__at *)arg;
    const bitnet_model *md = c->s->m;
    int nkv = md->info.n_kv_heads, g = md->info.n_heads / nkv, hd = md->info.head_dim, u, t, kvh, nt;
    int nblk = (c->m - c->t0 + BITNET__ATTN_ROWS - 1) / BITNET__ATTN_ROWS, n = nblk * nkv;
    size_t base, at;
    (void)ith;
    (void)nth;
    for (;;) { /* claimed one at a time, the costliest (the last positions) first */
#if defined(BITNET__POOL)
        u = __atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED);
#else
        u = c->next++;
#endif
        if (u >= n) break;
        u = n - 1 - u;
        t = c->t0 + u / nkv * BITNET__ATTN_ROWS, kvh = u % nkv, nt = BITNET__MIN(BITNET__ATTN_ROWS, c->m - t);
        base = ((size_t)c->l * nkv + kvh) * (size_t)c->s->n_kv * hd, at = (size_t)t * md->q_dim + (size_t)kvh * g * hd;
        c->fn(c->s->q + at, (size_t)md->q_dim, nt, g, c->s->k_cache + base, c->s->v_cache + base, c->s->pos + t + 1, hd,
              c->s->xb + at);
    }
}
/* rows t0 .. m-1 (the caller skips rows whose output nothing reads) */
static void bitnet__cpu_attention(bitnet_session *s, int l, int t0, int m) {
    bitnet__at c;
    c.s = s;
    c.l = l;
    c.t0 = t0;
    c.m = m;
    c.next = 0;
    c.fn = bitnet__attn_ref;
#if defined(BITNET__X86_SIMD)
    if (bitnet_cpu_isa() == BITNET_ISA_AVX512 && s->m->info.head_dim <= BITNET__ATTN_SIMD_HD &&
        s->m->info.n_heads / s->m->info.n_kv_heads <= 8 &&
        s->m->info.n_heads / s->m->info.n_kv_heads * s->m->info.head_dim <= BITNET__ATTN_SIMD_GHD)
        c.fn = bitnet__attn_avx512;
#endif
    bitnet__parallel(bitnet__attn_task, &c);
}

/* 7. add: x += y, [m][n] (the residual after the FFN; the one after attention is fused above) */
typedef struct bitnet__ew { float *x; const float *y; int n; } bitnet__ew;
static void bitnet__add_row(void *ctx, int r) {
    const bitnet__ew *c = (const bitnet__ew *)ctx;
    bitnet__ew_op(c->x + (size_t)r * c->n, c->y + (size_t)r * c->n, c->n, BITNET__NQ_ADD);
}
static void bitnet__cpu_add(float *x, const float *y, int m, int n) {
    bitnet__ew c;
    c.x = x;
    c.y = y;
    c.n = n;
    bitnet__for_rows(m, (size_t)n, bitnet__add_row, &c);
}

/* 8. head: out[r][n_vocab] = head . rmsnorm(x[r]) * output_norm, for the m rows of x given:
      int8 rows x int8 activations (the CPU default), or fp16 rows x fp32 activations */
static bitnet_result bitnet__cpu_head(bitnet_session *s, const float *x, int m, float *out) {
    const bitnet_model *md = s->m;
    int t, dim = md->info.dim;
    size_t nv = (size_t)md->info.n_vocab;
    if (md->head_q8) {
        for (t = 0; t < m; t++)
            bitnet__rmsnorm_quantize(x + (size_t)t * dim, md->output_norm, (size_t)dim, md->info.norm_eps,
                                     s->aq + (size_t)t * dim, s->as + t, s->asum + t);
        return bitnet_gemm_q8(md->head_q8, md->head_scale, nv, (size_t)dim, s->aq, s->as, s->asum, (size_t)m, out);
    }
    BITNET__TRY(bitnet_rmsnorm(x, md->output_norm, (size_t)m, (size_t)dim, md->info.norm_eps, s->xb));
    for (t = 0; t < m; t++) bitnet__gemv_f16(md->head_f16, nv, (size_t)dim, s->xb + (size_t)t * dim, out + (size_t)t * nv);
    return BITNET_OK;
}

/* The forward pass of m <= n_batch tokens at positions pos .. pos+m-1 (the caller checked the
   tokens and the room in the context). logits: NULL (no head), the last row's [n_vocab], or all
   rows [m][n_vocab] when all is set. The last layer computes past its KV cache only the rows whose
   output is read: none without logits, the last one for the last row's logits. */
static bitnet_result bitnet__cpu_forward(bitnet_session *s, const int32_t *tokens, int m, float *logits, int all) {
    const bitnet_model *md = s->m;
    int l, dim = md->info.dim, qd = md->q_dim, kvd = md->kv_dim, ff = md->info.ffn_dim, fk = md->ffn_k;
    bitnet__cpu_embed(s, tokens, m);                                            /* x  [m][dim] */
    for (l = 0; l < md->info.n_layers; l++) {
        const bitnet__layer *L = &md->layers[l];
        int r0 = l < md->info.n_layers - 1 || (logits && all) ? 0 : (logits ? m - 1 : m), n = m - r0;
        float *x = s->x + (size_t)r0 * dim, *xb = s->xb + (size_t)r0 * dim;
        bitnet__nvtx_push("bitnet layer"); /* closed below, or by bitnet__eval after an error */
        /* attention block */
        bitnet__cpu_norm_quant(s, s->x, L->attn_norm, m, dim);                  /* aq [m][dim] */
        BITNET__TRY(bitnet__cpu_linear(s, L->wq, qd, dim, m, s->q));            /* q  [m][q_dim] */
        BITNET__TRY(bitnet__cpu_linear(s, L->wk, kvd, dim, m, s->k));           /* k  [m][kv_dim] */
        BITNET__TRY(bitnet__cpu_linear(s, L->wv, kvd, dim, m, s->v));           /* v  [m][kv_dim] */
        bitnet__cpu_rope(s, m);
        bitnet__cpu_kv_store(s, l, m);
        if (n == 0) { /* from here on, rows r0 .. m-1 only */
            bitnet__nvtx_pop();
            break;
        }
        bitnet__cpu_attention(s, l, r0, m);                                     /* xb [n][q_dim] */
        bitnet__cpu_norm_quant(s, s->xb + (size_t)r0 * qd, L->attn_sub_norm, n, qd); /* aq [n][q_dim] */
        BITNET__TRY(bitnet__cpu_linear(s, L->wo, dim, qd, n, xb));              /* xb [n][dim] */
        /* feed-forward block */
        bitnet__cpu_add_norm_quant(s, x, xb, L->ffn_norm, n, dim);              /* x += xb; aq [n][dim] */
        BITNET__TRY(bitnet__cpu_linear(s, L->w_gate, fk, dim, n, s->hg));       /* hg [n][ffn_k] */
        BITNET__TRY(bitnet__cpu_linear(s, L->w_up, fk, dim, n, s->hu));         /* hu [n][ffn_k] */
        bitnet__cpu_glu_norm_quant(s, s->hg, s->hu, L->ffn_sub_norm, n, ff);    /* hg = act(hg) hu; aq [n][ffn_k] */
        BITNET__TRY(bitnet__cpu_linear(s, L->w_down, dim, fk, n, xb));          /* xb [n][dim] */
        bitnet__cpu_add(x, xb, n, dim);                                         /* x += xb */
        bitnet__nvtx_pop();
    }
    if (!logits) return BITNET_OK;
    if (all) return bitnet__cpu_head(s, s->x, m, logits);                       /* [m][n_vocab] */
    return bitnet__cpu_head(s, s->x + (size_t)(m - 1) * dim, 1, logits);       /* [n_vocab] */
}

/* >>cuda-loader =============================================================================== */

/* No CUDA header: the few driver and NVRTC types, constants and entry points we use are declared
   here with the values of cuda.h / nvrtc.h (CUDA 13.0). The entry points live in a struct, so the
   library never defines or exports a cu* or nvrtc* symbol. */
#ifndef BITNET_NO_CUDA
#if defined(__has_include)
#if !__has_include("bitnet_cuda_kernels.h")
#error "bitnet.h: put bitnet_cuda_kernels.h (the GPU kernels' sources) beside it, or define BITNET_NO_CUDA for a CPU-only build"
#endif
#endif
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
    X(cuMemHostRegister, 6050, 0, "cuMemHostRegister_v2", (void *p, size_t bytes, unsigned flags)) \
    X(cuMemHostGetDevicePointer, 3020, 0, "cuMemHostGetDevicePointer_v2", (bitnet_devptr *d, void *p, unsigned flags)) \
    X(cuMemHostUnregister, 4000, 0, "cuMemHostUnregister", (void *p)) \
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
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, 0, "cuOccupancyMaxActiveBlocksPerMultiprocessor", \
        (int *blocks, bitnet__CUfunction f, int block_size, size_t dyn_smem)) \
    X(cuLaunchKernel, 4000, 1, "cuLaunchKernel", (bitnet__CUfunction f, unsigned gx, unsigned gy, unsigned gz, \
        unsigned bx, unsigned by, unsigned bz, unsigned smem, bitnet__CUstream s, void **args, void **extra)) \
    X(cuLaunchKernelEx, 12000, 0, "cuLaunchKernelEx", (const void *config, bitnet__CUfunction f, void **args, void **extra)) \
    X(cuOccupancyMaxActiveClusters, 12000, 0, "cuOccupancyMaxActiveClusters", (int *n, bitnet__CUfunction f, const void *config)) \
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

/* Copies s into d; d always ends in a NUL, and a copy that had to be cut ends in "...". */
static void bitnet__strlcpy(char *d, size_t cap, const char *s) {
    size_t n = strlen(s);
    if (!cap) return;
    if (n < cap) {
        memcpy(d, s, n + 1);
        return;
    }
    memcpy(d, s, cap - 1);
    d[cap - 1] = 0;
    if (cap > 3) memcpy(d + cap - 4, "...", 3);
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
        __atomic_store_n(&bitnet__nvtx.tried, 1, __ATOMIC_RELEASE); /* read without the lock below */
    }
    bitnet__mutex_unlock(&bitnet__nvtx_lock);
}
BITNET_API void bitnet_gpu_nvtx_push(const char *name) {
    if (!__atomic_load_n(&bitnet__nvtx.tried, __ATOMIC_ACQUIRE)) bitnet__nvtx_load();
    if (bitnet__nvtx.push && name) bitnet__nvtx.push(name);
}
BITNET_API void bitnet_gpu_nvtx_pop(void) {
    if (!__atomic_load_n(&bitnet__nvtx.tried, __ATOMIC_ACQUIRE)) bitnet__nvtx_load();
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
/* 'a' (the arch-specific target, e.g. sm_90a for wgmma) for a module that asks for it on this cc,
   when the NVRTC for cc knows such targets (CUDA 12 and newer); else 0. */
static char bitnet__arch_suffix(int a_sm, int cc) {
    return a_sm && a_sm == cc && bitnet__nvrtc_for(cc)->version >= 12000 ? 'a' : 0;
}

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
    int pdl;                            /* sm_90: bitnet_gpu_launch uses programmatic dependent launch (set once, at load) */
    signed char occ[33];                /* blocks an SM by warps a block, 0 unknown, -1 no answer (bitnet__occupancy) */
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
    int pdl;                            /* sm_90: the built-in kernels that wait at entry launch under PDL (BITNET_GPU_PDL=0: none) */
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
    g->pdl = !bitnet__env_off("BITNET_GPU_PDL");
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

/* Waits for everything issued through the handle so far; a kernel's asynchronous failure shows up
   here. It waits on an event recorded under the lock, not on the stream: a thread sharing the handle
   waits for its own work and what came before, never for launches other threads add meanwhile (and
   compute-sanitizer racecheck loses track of launches that race a cuStreamSynchronize on their stream). */
static bitnet_result bitnet__stream_wait(bitnet_gpu *gpu, const char *what) {
    bitnet__CUevent ev = NULL;
    bitnet__CUresult r;
    bitnet_result got;
    bitnet__mutex_lock(&gpu->lock);
    got = bitnet__event_get(gpu, &ev);
    if (got != BITNET_OK) {
        bitnet__mutex_unlock(&gpu->lock);
        return got;
    }
    r = bitnet__cuda.cu.cuEventRecord(ev, gpu->stream);
    bitnet__mutex_unlock(&gpu->lock);
    if (r == 0) r = bitnet__cuda.cu.cuEventSynchronize(ev);
    bitnet__mutex_lock(&gpu->lock);
    bitnet__event_put(gpu, ev);
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

#if !defined(BITNET_NO_CUDA) /* the four helpers below serve only >>cuda-forward */
/* Page-locked host memory that the device reads and writes in place (*dev: its device address):
   for host data a kernel needs without a copy each time (the decode step's embedding rows) and for
   downloads that must not wait. Pages of our own (bitnet__malloc with a page of slack each side, so
   no other allocation shares a registered page; large pages where they fit), written by fill (NULL:
   zeros; the embedding's copy on the thread pool, page faults and all) and then registered with the
   driver: cuMemHostAlloc took 234-405 ms to pin the 657 MB embedding and 60-91 ms to free it, this
   20-40 ms and 12 (BENCHMARKS.md, session 46). The raw pointer sits just before the pages. */
static bitnet_result bitnet__gpu_host_alloc(bitnet_gpu *gpu, size_t bytes, void (*fill)(void *host, size_t bytes, const void *ctx),
                                            const void *ctx, void **host, bitnet_devptr *dev) {
    const size_t pg = bitnet__page_size(), span = (bytes + pg - 1) & ~(pg - 1);
    bitnet__CUresult r = 0;
    bitnet_result res;
    unsigned char *raw, *p;
    char what[96];
    BITNET__CHECK_GPU(gpu);
    *host = NULL, *dev = 0;
    if (!bitnet__cuda.cu.cuMemHostRegister || !bitnet__cuda.cu.cuMemHostGetDevicePointer || !bitnet__cuda.cu.cuMemHostUnregister)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "mapped host memory: the driver has no cuMemHostRegister");
    if (span < bytes || span > SIZE_MAX - 2 * pg) return bitnet__err(BITNET_ERR_OVERFLOW, "mapped host memory of %zu bytes", bytes);
    if (!(raw = (unsigned char *)bitnet__malloc(span + 2 * pg))) return BITNET_ERR_OUT_OF_MEMORY;
    p = (unsigned char *)(((uintptr_t)raw + sizeof raw + pg - 1) & ~(uintptr_t)(pg - 1));
    memcpy(p - sizeof raw, &raw, sizeof raw);
    bitnet__hugepages(p, span);
    if (fill) fill(p, bytes, ctx);
    else memset(p, 0, bytes);
    if ((res = bitnet__ctx_push(gpu->dev->ctx)) == BITNET_OK) {
        r = bitnet__cuda.cu.cuMemHostRegister(p, span, 0x01 | 0x02); /* portable, mapped into the device */
        if (r == 0 && (r = bitnet__cuda.cu.cuMemHostGetDevicePointer(dev, p, 0)) != 0) bitnet__cuda.cu.cuMemHostUnregister(p);
        bitnet__ctx_pop();
        snprintf(what, sizeof what, "mapped host memory of %zu bytes", bytes);
        if (r) res = bitnet__cu_fail(BITNET_ERR_OUT_OF_MEMORY, r, what);
    }
    if (res != BITNET_OK) {
        bitnet__free(raw);
        *dev = 0;
        return res;
    }
    *host = p;
    return BITNET_OK;
}
static void bitnet__gpu_host_free(bitnet_gpu *gpu, void *host) {
    void *raw;
    if (!host || !gpu) return;
    if (bitnet__ctx_push(gpu->dev->ctx) == BITNET_OK) bitnet__cuda.cu.cuMemHostUnregister(host), bitnet__ctx_pop();
    memcpy(&raw, (unsigned char *)host - sizeof raw, sizeof raw);
    bitnet__free(raw);
}

/* A download into page-locked memory (bitnet__gpu_host_alloc's) that returns at once, with a marker
   after it on the stream: bitnet__gpu_mark_wait waits for the marker (and only for what came
   before it), so work queued after the download runs on while the host waits. dst NULL: the marker
   alone (a kernel before it wrote mapped host memory). */
static bitnet_result bitnet__gpu_download_mark(bitnet_gpu *gpu, void *dst, bitnet_devptr src, size_t bytes,
                                               bitnet__CUevent *mark) {
    bitnet__CUresult r;
    bitnet_result res = BITNET_OK;
    if (dst) BITNET__TRY(bitnet__copy_args("bitnet__gpu_download_mark", gpu, dst, src, bytes, 1));
    else BITNET__CHECK_GPU(gpu);
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    if (dst) res = bitnet__enqueue_copy(gpu, 'd', dst, 0, src, 0, bytes);
    if (res == BITNET_OK) {
        bitnet__mutex_lock(&gpu->lock);
        res = bitnet__event_get(gpu, mark);
        r = res == BITNET_OK ? bitnet__cuda.cu.cuEventRecord(*mark, gpu->stream) : 0;
        if (r != 0) bitnet__event_put(gpu, *mark);
        bitnet__mutex_unlock(&gpu->lock);
        if (r != 0) res = bitnet__cu_fail(BITNET_ERR_CUDA, r, "cuEventRecord after a download");
    }
    bitnet__ctx_pop();
    return res;
}
static bitnet_result bitnet__gpu_mark_wait(bitnet_gpu *gpu, bitnet__CUevent mark) {
    bitnet__CUresult r;
    BITNET__TRY(bitnet__ctx_push(gpu->dev->ctx));
    r = bitnet__cuda.cu.cuEventSynchronize(mark);
    bitnet__mutex_lock(&gpu->lock);
    bitnet__event_put(gpu, mark);
    bitnet__mutex_unlock(&gpu->lock);
    bitnet__ctx_pop();
    return r ? bitnet__cu_fail(BITNET_ERR_CUDA, r, "waiting for a download (an earlier kernel or copy failed)") : BITNET_OK;
}
#endif

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

/* CUlaunchAttribute (an id, then a 64-byte value union at offset 8) and CUlaunchConfig, for
   cuLaunchKernelEx with programmatic stream serialization (attribute 6): the kernel may start
   before the previous one in the stream ends, and waits for it with griddepcontrol.wait; and with
   a cluster dimension (attribute 4: x, y, z blocks a thread-block cluster). */
typedef struct bitnet__cu_launch_attr { int id, pad; unsigned v[16]; } bitnet__cu_launch_attr;
static void bitnet__cluster_attr(bitnet__cu_launch_attr *a, unsigned cly) { a->id = 4, a->v[0] = 1, a->v[1] = cly, a->v[2] = 1; }
typedef struct bitnet__cu_launch_config {
    unsigned grid[3], block[3], smem;
    bitnet__CUstream stream;
    bitnet__cu_launch_attr *attrs;
    unsigned n_attrs;
} bitnet__cu_launch_config;

/* More than the default 48 KiB of dynamic shared memory needs an opt-in per function, once (in dv's
   context, current). 0 or the driver's error. */
static bitnet__CUresult bitnet__smem_optin(bitnet__gpu_dev *dv, bitnet_gpu_kernel *k, unsigned bytes) {
    bitnet__CUresult r = 0;
    if (bytes <= (unsigned)dv->smem_default || bytes <= k->smem_set) return 0;
    bitnet__mutex_lock(&dv->lock);
    if (bytes > k->smem_set) {
        r = bitnet__cuda.cu.cuFuncSetAttribute ? bitnet__cuda.cu.cuFuncSetAttribute(k->fn, BITNET__CU_FUNC_MAX_DYN_SMEM, (int)bytes) : 1;
        if (r == 0) k->smem_set = bytes;
    }
    bitnet__mutex_unlock(&dv->lock);
    return r;
}

/* The one launch path: the only call of cuLaunchKernel(Ex), which also counts and times. pdl: launch
   with programmatic stream serialization (sm_90; only for kernels that wait with griddepcontrol).
   cly > 1: clusters of 1 x cly blocks (sm_90; grid[1] a multiple of it; the caller checked the device). */
static bitnet_result bitnet__launch(bitnet_gpu *gpu, bitnet_gpu_kernel *k, const unsigned grid[3], const unsigned block[3],
                                   unsigned shared_bytes, void **args, int pdl, unsigned cly) {
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
    if ((r = bitnet__smem_optin(dv, k, shared_bytes)) != 0) {
        bitnet__ctx_pop();
        return bitnet__cu_fail(BITNET_ERR_LAUNCH, r, "raising the kernel's dynamic shared memory limit");
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
    if ((pdl || cly > 1) && dv->cc >= 90 && bitnet__cuda.cu.cuLaunchKernelEx) {
        bitnet__cu_launch_attr at[2];
        bitnet__cu_launch_config cfg;
        unsigned n = 0;
        memset(at, 0, sizeof at);
        memset(&cfg, 0, sizeof cfg);
        if (pdl) at[n].id = 6, at[n].v[0] = 1, n++;
        if (cly > 1) bitnet__cluster_attr(&at[n++], cly);
        memcpy(cfg.grid, grid, sizeof cfg.grid);
        memcpy(cfg.block, block, sizeof cfg.block);
        cfg.smem = shared_bytes, cfg.stream = gpu->stream, cfg.attrs = at, cfg.n_attrs = n;
        r = bitnet__cuda.cu.cuLaunchKernelEx(&cfg, k->fn, args, NULL);
    } else {
        r = bitnet__cuda.cu.cuLaunchKernel(k->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes,
                                           gpu->stream, args, NULL);
    }
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

BITNET_API bitnet_result bitnet_gpu_launch(bitnet_gpu *gpu, bitnet_gpu_kernel *k, const unsigned grid[3],
                                           const unsigned block[3], unsigned shared_bytes, void **args) {
    return bitnet__launch(gpu, k, grid, block, shared_bytes, args, k ? k->pdl : 0, 1);
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
typedef struct bitnet__builtin_mod { const char *name, *source; int min_sm, a_sm; } bitnet__builtin_mod;
typedef struct bitnet__builtin_fn { const char *kernel, *module; } bitnet__builtin_fn;
static const bitnet__builtin_mod bitnet__builtins[] = {
#define BITNET__MOD_ROW(name, src, sm, a_sm) {#name, src, sm, a_sm},
    BITNET_CUDA_MODULES(BITNET__MOD_ROW)
#undef BITNET__MOD_ROW
    {NULL, NULL, 0, 0}};
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
BITNET_API int bitnet_gpu_builtin_a_sm(int i) { return i >= 0 && i < BITNET__N_BUILTINS ? bitnet__builtins[i].a_sm : -1; }

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
    const char *d;
    if (bitnet__env_off("BITNET_CUDA_CACHE")) return 0;
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
                                              const char *arch, int min_sm, int a_sm, int minimal, int use_cache,
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
    if (!suffix) suffix = bitnet__arch_suffix(a_sm, cc);
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
                                    arch, bitnet__builtins[module].min_sm, bitnet__builtins[module].a_sm, 1, use_cache, info);
}

BITNET_API bitnet_result bitnet_gpu_jit_source(const char *source, const char *options, const char *arch, int use_cache,
                                               bitnet_gpu_jit_info *info) {
    BITNET__CHECK_PTR(source);
    if (!*source) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_jit_source: empty source");
    return bitnet__jit_compile_only("custom", NULL, source, options, arch, 0, 0, 0, use_cache, info);
}

/* ---- modules on a device ------------------------------------------------------------------ */
static bitnet_result bitnet__module_create(bitnet__gpu_dev *dv, bitnet_gpu *owner, const char *name, const char *prefix,
                                           const char *source, const char *options, int minimal, char suffix,
                                           bitnet_gpu_module **out) {
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
    if (!target[0] || suffix) BITNET__TRY(bitnet__jit_pick(dv->cc, suffix, 0, target, sizeof target, &cubin));
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
    BITNET__TRY(bitnet__module_create(gpu->dev, gpu, "custom", NULL, source, options, 0, 0, &m));
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
                                        "", 1, bitnet__arch_suffix(bitnet__builtins[i].a_sm, dv->cc), &dv->builtin[i]);
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

/* Host side of the ternary, dense and quantization modules. Kernels come from the runtime's
   built-in modules by name and go through bitnet_gpu_launch; every argument list below mirrors
   the kernel's parameter list in bitnet_cuda_kernels.h. */

typedef struct bitnet__k_segs { int32_t n; int32_t end[8]; float scale[8]; } bitnet__k_segs; /* = bitnet_k_segs */
/* A fused matrix's row segments and their scales, as the kernels take them (by value). */
static bitnet__k_segs bitnet__k_segs_of(const bitnet_gpu_ternary *w) {
    bitnet__k_segs g;
    int i;
    memset(&g, 0, sizeof g);
    g.n = w->n_parts;
    for (i = 0; i < w->n_parts && i < 8; i++) g.end[i] = (int32_t)w->part_end[i], g.scale[i] = w->part_scale[i];
    return g;
}
#define BITNET__DGEMV_ROWS 2   /* BITNET_DGEMV_ROWS in the dense module: rows per warp */
#define BITNET__TGEMV_MAX_K 262144

/* A built-in kernel by name; pdl: under programmatic dependent launch (sm_90; the kernel waits at entry) */
static bitnet_result bitnet__gk_launch(bitnet_gpu *gpu, const char *name, unsigned gx, unsigned gy, unsigned gz,
                                       unsigned bx, unsigned by, void **args, int pdl) {
    bitnet_gpu_kernel *k;
    unsigned grid[3], block[3];
    BITNET__TRY(bitnet_gpu_builtin_kernel(gpu, name, &k));
    grid[0] = gx, grid[1] = gy, grid[2] = gz;
    block[0] = bx, block[1] = by, block[2] = 1;
    return bitnet__launch(gpu, k, grid, block, 0, args, pdl, 1);
}

/* Blocks for a grid-stride kernel over n items. */
static unsigned bitnet__gk_blocks(size_t n, unsigned per_block) {
    size_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : (b > 8192 ? 8192 : b));
}

static int bitnet__prec_ok(bitnet_precision p) {
    return p == BITNET_PRECISION_FP32 || p == BITNET_PRECISION_FP16 || p == BITNET_PRECISION_BF16;
}
static size_t bitnet__prec_size(bitnet_precision p) { return p == BITNET_PRECISION_FP32 ? 4 : 2; }

BITNET_API const char *bitnet_precision_name(bitnet_precision p) {
    switch (p) {
    case BITNET_PRECISION_AUTO: return "auto";
    case BITNET_PRECISION_FP32: return "fp32";
    case BITNET_PRECISION_FP16: return "fp16";
    case BITNET_PRECISION_BF16: return "bf16";
    default: return "unknown";
    }
}

BITNET_API bitnet_precision bitnet_detect_best_precision(int device) {
    bitnet_gpu_device_info info;
    if (bitnet_gpu_device_info_get(device, &info) != BITNET_OK) return BITNET_PRECISION_FP32;
    if (info.cc_major >= 8) return BITNET_PRECISION_BF16;
    if (info.cc_major >= 6) return BITNET_PRECISION_FP16;
    return BITNET_PRECISION_FP32;
}

/* Multiprocessor count per device, read once (it sizes the GEMV grid). */
static int bitnet__gk_sms[BITNET__MAX_DEVICES];
static bitnet__mutex bitnet__gk_lock = BITNET__MUTEX_INIT;
static int bitnet__gk_sm_count(bitnet_gpu *gpu) {
    int ord = bitnet_gpu_ordinal(gpu), n;
    if (ord < 0 || ord >= BITNET__MAX_DEVICES) return 32;
    bitnet__mutex_lock(&bitnet__gk_lock);
    n = bitnet__gk_sms[ord];
    bitnet__mutex_unlock(&bitnet__gk_lock);
    if (!n) {
        bitnet_gpu_device_info info;
        n = bitnet_gpu_device_info_get(ord, &info) == BITNET_OK && info.sm_count > 0 ? info.sm_count : 32;
        bitnet__mutex_lock(&bitnet__gk_lock);
        bitnet__gk_sms[ord] = n;
        bitnet__mutex_unlock(&bitnet__gk_lock);
    }
    return n;
}

/* ---- ternary weights: upload (I2_S -> T32 on the device) --------------------------------------- */

BITNET_API void bitnet_gpu_ternary_free(bitnet_gpu *gpu, bitnet_gpu_ternary *w) {
    if (!w) return;
    if (gpu && w->data) bitnet_gpu_free(gpu, w->data);
    memset(w, 0, sizeof *w);
}

BITNET_API bitnet_result bitnet_gpu_ternary_upload(bitnet_gpu *gpu, const bitnet_gpu_i2s_part *parts, int n_parts,
                                                   size_t k, int glu, bitnet_gpu_ternary *out) {
    bitnet_gpu_ternary w;
    bitnet_devptr stage = 0, bad = 0;
    size_t rows = 0, max_part = 0, img, groups;
    int i, bad_h = 0;
    bitnet_result res = BITNET_OK;
    BITNET__CHECK_PTR(gpu);
    BITNET__CHECK_PTR(parts);
    BITNET__CHECK_PTR(out);
    memset(out, 0, sizeof *out);
    if (n_parts < 1 || n_parts > BITNET_GPU_MAX_PARTS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_ternary_upload: %d parts (1 to %d)", n_parts, BITNET_GPU_MAX_PARTS);
    if (k == 0 || k % BITNET_I2S_BLOCK || k > BITNET__TGEMV_MAX_K)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_gpu_ternary_upload: k=%zu must be a positive multiple of %d, at most %d",
                           k, BITNET_I2S_BLOCK, BITNET__TGEMV_MAX_K);
    if (glu != 0 && glu != BITNET_FFN_RELU2 && glu != BITNET_FFN_SILU)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_ternary_upload: glu %d is not 0 or a bitnet_ffn_act", glu);
    if (glu && (n_parts != 2 || parts[0].n != parts[1].n))
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_gpu_ternary_upload: glu needs two parts of equal rows (gate, up)");
    for (i = 0; i < n_parts; i++) {
        BITNET__TRY(bitnet__i2s_check("bitnet_gpu_ternary_upload", parts[i].data, parts[i].bytes, parts[i].n, k));
        if (parts[i].n > ((size_t)1 << 28) || rows + parts[i].n > ((size_t)1 << 28))
            return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_ternary_upload: more than 2^28 rows");
        rows += parts[i].n;
        max_part = BITNET__MAX(max_part, parts[i].n * k / 4);
    }
    memset(&w, 0, sizeof w);
    w.k = k;
    w.glu = glu;
    w.n_parts = n_parts;
    w.n_rows = rows;
    w.n = glu ? parts[0].n : rows;
    groups = glu ? 2 * ((parts[0].n + 31) / 32) : (rows + 31) / 32; /* glu: gate and up groups interleave */
    w.n_pad = (groups * 32 + 127) / 128 * 128;
    img = w.n_pad * (k / 4);
    BITNET__TRY(bitnet_gpu_alloc(gpu, img, &w.data));
    /* code 1 (weight 0) everywhere first, so padding rows add nothing */
    res = bitnet_gpu_memset(gpu, w.data, 0x55, img);
    if (res == BITNET_OK) res = bitnet_gpu_alloc(gpu, max_part, &stage);
    if (res == BITNET_OK) res = bitnet_gpu_alloc(gpu, 4, &bad);
    if (res == BITNET_OK) res = bitnet_gpu_memset(gpu, bad, 0, 4);
    rows = 0;
    for (i = 0; i < n_parts && res == BITNET_OK; i++) {
        int n = (int)parts[i].n, kk = (int)k, off = (int)rows, gp = glu ? i : -1;
        size_t chunks = parts[i].n * (k / 64);
        void *args[7];
        memcpy(&w.part_scale[i], (const uint8_t *)parts[i].data + parts[i].n * k / 4, 4);
        rows += parts[i].n;
        w.part_end[i] = (uint32_t)rows;
        args[0] = &stage, args[1] = &n, args[2] = &kk, args[3] = &w.data, args[4] = &off, args[5] = &gp, args[6] = &bad;
        res = bitnet_gpu_upload(gpu, stage, parts[i].data, parts[i].n * k / 4);
        if (res == BITNET_OK)
            res = bitnet__gk_launch(gpu, "bitnet_k_t32_repack", (unsigned)((chunks + 255) / 256), 1, 1, 256, 1, args, 0);
    }
    if (res == BITNET_OK) res = bitnet_gpu_download(gpu, &bad_h, bad, 4); /* ordered after the repacks */
    if (stage) bitnet_gpu_free(gpu, stage);
    if (bad) bitnet_gpu_free(gpu, bad);
    if (res == BITNET_OK && bad_h)
        res = bitnet__err(BITNET_ERR_CORRUPT, "bitnet_gpu_ternary_upload: a weight has the unused I2_S code 3");
    if (res != BITNET_OK) {
        bitnet_gpu_free(gpu, w.data);
        return res;
    }
    *out = w;
    return BITNET_OK;
}

/* ---- activations ------------------------------------------------------------------------------ */

BITNET_API void bitnet_gpu_act_free(bitnet_gpu *gpu, bitnet_gpu_act *a) {
    if (!a) return;
    if (gpu) {
        if (a->q) bitnet_gpu_free(gpu, a->q);
        if (a->scale) bitnet_gpu_free(gpu, a->scale);
        if (a->sum) bitnet_gpu_free(gpu, a->sum);
        if (a->planes) bitnet_gpu_free(gpu, a->planes);
    }
    memset(a, 0, sizeof *a);
}

BITNET_API bitnet_result bitnet_gpu_act_alloc(bitnet_gpu *gpu, size_t cap, size_t k, bitnet_gpu_act *out) {
    size_t qb, sb;
    bitnet_result res;
    BITNET__CHECK_PTR(gpu);
    BITNET__CHECK_PTR(out);
    memset(out, 0, sizeof *out);
    if (!cap || !k || k > (size_t)INT_MAX || cap > (size_t)INT_MAX)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_act_alloc: cap=%zu k=%zu", cap, k);
    if (!bitnet__mul_size(cap, k, &qb) || !bitnet__mul_size(cap, 4, &sb))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gpu_act_alloc: %zu x %zu overflows", cap, k);
    res = bitnet_gpu_alloc(gpu, qb, &out->q);
    if (res == BITNET_OK) res = bitnet_gpu_alloc(gpu, sb, &out->scale);
    if (res == BITNET_OK) res = bitnet_gpu_alloc(gpu, sb, &out->sum);
    if (res == BITNET_OK && k % 32 == 0) res = bitnet_gpu_alloc(gpu, 2 * k, &out->planes);
    if (res != BITNET_OK) {
        bitnet_gpu_act_free(gpu, out);
        return res;
    }
    out->k = k;
    out->cap = cap;
    return BITNET_OK;
}

#define BITNET__QA_R 28 /* BN_QA_R of the kernel source: elements a thread holds in registers */
/* (kn <= k: the count the norm's mean is over, for a padded row: >>pad) */
static bitnet_result bitnet__gpu_quantize_act(bitnet_gpu *gpu, bitnet_devptr x, size_t m, size_t k, int kn,
                                              bitnet_devptr norm_weight, float eps, bitnet_gpu_act *a) {
    long long ld;
    int kk;
    unsigned nt;
    bitnet_devptr planes;
    void *args[11];
    BITNET__CHECK_PTR(gpu);
    BITNET__CHECK_PTR(a);
    if (!x) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_quantize_act: x is 0");
    if (!a->q || !a->scale || !a->sum) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_quantize_act: activations not allocated");
    if (!m || m > a->cap || k != a->k)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_quantize_act: m=%zu k=%zu for a buffer of %zu x %zu", m, k, a->cap, a->k);
    if (norm_weight && !(eps >= 0.0f)) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_quantize_act: eps %g", (double)eps);
    ld = (long long)k;
    kk = (int)k;
    /* A block of 256 threads a row; of 128 where the row fits their registers and there are at least two
       rows an SM: more rows in flight (H100, 2B-4T, 512 tokens: 30 layers of a 2560-wide norm 307 ->
       199 us; 64 tokens lose). */
    nt = k <= 128 * BITNET__QA_R && m >= 2 * (size_t)bitnet__gk_sm_count(gpu) ? 128 : 256;
    args[0] = &x, args[1] = &ld, args[2] = &kk, args[3] = &norm_weight, args[4] = &eps;
    planes = k % 32 || m > 1 ? 0 : a->planes; /* (block 0's ballots were on a prefill's critical path) */
    /* Under programmatic dependent launch (sm_90; BITNET_GPU_PDL=0: plainly) the launch overlaps the
       end of the kernel before, which the kernel waits for. With the planes for one row only, H200,
       2B-4T prompts of 16 / 64 / 512 tokens: +13% / +13% / +5% (BENCHMARKS.md, session 39). */
    args[5] = &a->q, args[6] = &ld, args[7] = &a->scale, args[8] = &a->sum, args[9] = &planes, args[10] = &kn;
    BITNET__TRY(bitnet__gk_launch(gpu, "bitnet_k_quant_act", (unsigned)m, 1, 1, nt, 1, args, gpu->pdl));
    a->m = m;
    return BITNET_OK;
}
BITNET_API bitnet_result bitnet_gpu_quantize_act(bitnet_gpu *gpu, bitnet_devptr x, size_t m, size_t k,
                                                 bitnet_devptr norm_weight, float eps, bitnet_gpu_act *a) {
    return bitnet__gpu_quantize_act(gpu, x, m, k, (int)k, norm_weight, eps, a);
}

/* bn_put_planes of the kernel source, on the host: word 16G + 2p + h holds bit p of values
   32G + 16h + 4j + b at bit 8b + 2j. */
static void bitnet__act_planes(const int8_t *q, size_t k, uint32_t *planes) {
    size_t i;
    memset(planes, 0, 2 * k);
    for (i = 0; i < k; i++) {
        size_t j = i & 15, word = (i >> 5) * 16 + ((i >> 4) & 1);
        int p;
        for (p = 0; p < 8; p++)
            planes[word + 2 * (size_t)p] |= (uint32_t)(((uint8_t)q[i] >> p) & 1u) << (8 * (j & 3) + 2 * (j >> 2));
    }
}

BITNET_API bitnet_result bitnet_gpu_act_upload(bitnet_gpu *gpu, bitnet_gpu_act *a, const int8_t *q, const float *scale,
                                               const int32_t *sum, size_t m) {
    uint32_t *planes;
    bitnet_result r;
    BITNET__CHECK_PTR(gpu);
    BITNET__CHECK_PTR(a);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    BITNET__CHECK_PTR(sum);
    if (!a->q || !a->scale || !a->sum) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_gpu_act_upload: activations not allocated");
    if (!m || m > a->cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_act_upload: m=%zu for a buffer of %zu rows", m, a->cap);
    BITNET__TRY(bitnet_gpu_upload(gpu, a->q, q, m * a->k));
    BITNET__TRY(bitnet_gpu_upload(gpu, a->scale, scale, m * 4));
    BITNET__TRY(bitnet_gpu_upload(gpu, a->sum, sum, m * 4));
    if (a->planes && m == 1) {
        if (!(planes = (uint32_t *)bitnet__malloc(2 * a->k))) return BITNET_ERR_OUT_OF_MEMORY;
        bitnet__act_planes(q, a->k, planes);
        r = bitnet_gpu_upload(gpu, a->planes, planes, 2 * a->k);
        bitnet__free(planes);
        BITNET__TRY(r);
    }
    a->m = m;
    return BITNET_OK;
}

/* ---- W2A8 matmul ------------------------------------------------------------------------------ */

/* Each kernel with a glu epilogue is built once for each activation; silu's are named ..._silu. */
static const char *bitnet__glu_sfx(const bitnet_gpu_ternary *w) { return w->glu == BITNET_FFN_SILU ? "_silu" : ""; }

static bitnet_result bitnet__tmm_check(const char *fn, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a,
                                       bitnet_devptr out, bitnet_precision out_type) {
    if (!w || !a) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: weights or activations are NULL", fn);
    if (!w->data || !w->n || w->k % 128 || w->n_pad % 128 || w->n_pad < w->n || w->n_parts < 1 ||
        w->n_parts > BITNET_GPU_MAX_PARTS)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "%s: weights not uploaded (bitnet_gpu_ternary_upload)", fn);
    if (!a->q || !a->m || a->m > a->cap) return bitnet__err(BITNET_ERR_INVALID_STATE, "%s: activations not quantized", fn);
    if (a->k != w->k) return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: activations have k=%zu, weights k=%zu", fn, a->k, w->k);
    if (!out) return bitnet__err(BITNET_ERR_NULL_POINTER, "%s: out is 0", fn);
    if (out_type != BITNET_PRECISION_AUTO && !bitnet__prec_ok(out_type))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "%s: output type %d", fn, (int)out_type);
    return BITNET_OK;
}

/* Blocks of k that fit an SM at once with `warps` warps a block and no dynamic shared memory
   (asked of the driver once, then kept); -1 when the driver cannot tell. */
static int bitnet__occupancy(bitnet_gpu *gpu, bitnet_gpu_kernel *k, int warps) {
    bitnet__gpu_dev *dv = gpu->dev;
    int n;
    if (warps < 1 || warps > 32) return -1;
    bitnet__mutex_lock(&dv->lock);
    if (!k->occ[warps]) {
        int per_sm = 0;
        k->occ[warps] = -1;
        if (bitnet__cuda.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor && bitnet__ctx_push(dv->ctx) == BITNET_OK) {
            if (bitnet__cuda.cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k->fn, 32 * warps, 0) == 0 && per_sm > 0)
                k->occ[warps] = (signed char)BITNET__MIN(per_sm, 127);
            bitnet__ctx_pop();
        }
    }
    n = k->occ[warps];
    bitnet__mutex_unlock(&dv->lock);
    return n;
}

/* M = 1 on sm_90: the binary tensor-core GEMV (bitnet_k_tgemv_b1_u<U>) launched with programmatic
   dependent launch, so it asks for its weights while the previous kernel in the stream still runs.
   The shape (warps a 32-row group, loads a lane) is one with which one wave holds every group, so
   each block has its first weights in flight before the wait: of those, the table's last (its order
   is the preference) whose loads cover all K slices at once (one round trip for the bit planes),
   else the first; with more groups than any holds (many waves anyway) 7 warps and 4 loads. The
   4-load shapes of 10 and 12 warps hold one wave only at up to about one block an SM, where they
   beat 8 x 8 (H200: 3840x2560 2.06 against 2.34 us). Measured on the H200 (bench-kernels, graph
   replay, BENCHMARKS.md sessions 32 and 33). Environment, for tests and A/B runs:
   BITNET_TGEMV_PDL=0 sends M = 1 to the plain launch below; BITNET_TGEMV_WARPS (1-32) and
   BITNET_TGEMV_U (4, 8) force the shape. BITNET_ERR_UNSUPPORTED (nothing launched) sends the call
   to the plain launch. */
static bitnet_result bitnet__tgemv_pdl(bitnet_gpu *gpu, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a, void **args) {
    static const int shapes[][2] = {{16, 8}, {12, 8}, {8, 8}, {12, 4}, {10, 4}, {7, 4}, {6, 4}, {4, 4}}; /* warps, loads a lane */
    int rg = w->glu ? 2 : 1, ns = (int)(w->k / 128), groups = (int)((w->n + 31) / 32), sms = bitnet__gk_sm_count(gpu);
    int wpg = 7, u = 4, fit = -1, once = -1, i;
    unsigned grid[3], block[3];
    bitnet_gpu_kernel *k4, *k8;
    if (bitnet__env_off("BITNET_TGEMV_PDL") || !bitnet__cuda.cu.cuLaunchKernelEx) return BITNET_ERR_UNSUPPORTED;
    BITNET__TRY(bitnet_gpu_builtin_kernel(gpu, w->glu == BITNET_FFN_SILU ? "bitnet_k_tgemv_b1_u4_silu" : "bitnet_k_tgemv_b1_u4", &k4));
    BITNET__TRY(bitnet_gpu_builtin_kernel(gpu, w->glu == BITNET_FFN_SILU ? "bitnet_k_tgemv_b1_u8_silu" : "bitnet_k_tgemv_b1_u8", &k8));
    for (i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        int per_sm = bitnet__occupancy(gpu, shapes[i][1] == 8 ? k8 : k4, shapes[i][0] * rg);
        if (per_sm < 0) break;
        if ((long long)per_sm * sms < groups) continue;
        if (fit < 0) fit = i;
        if (shapes[i][0] * shapes[i][1] / 2 >= ns) once = i; /* slices in flight a warp: loads / 2 */
    }
    if (once >= 0 || fit >= 0) wpg = shapes[once >= 0 ? once : fit][0], u = shapes[once >= 0 ? once : fit][1];
    wpg = bitnet__env_int("BITNET_TGEMV_WARPS", 1, 32, wpg);
    if (bitnet__env_int("BITNET_TGEMV_U", 8, 8, 0)) u = 8;
    else if (bitnet__env_int("BITNET_TGEMV_U", 4, 4, 0)) u = 4;
    wpg = BITNET__MIN(BITNET__MIN(wpg, 32 / rg), ns); /* warps split the K slices of 128 */
    grid[0] = (unsigned)groups, grid[1] = grid[2] = 1;
    block[0] = 32, block[1] = (unsigned)(wpg * rg), block[2] = 1;
    args[5] = (void *)&a->planes; /* in q's place */
    return bitnet__launch(gpu, u == 8 ? k8 : k4, grid, block, 0, args, 1, 1);
}

/* M > 4 on sm_90: the wgmma GEMM (bitnet_k_tgemm90_n<TN>, module tgemm built for sm_90a), tiles
   of 128 rows x TN tokens, with the mma.sync kernel's arguments. TN is 64 up to 64 tokens, 96 up to
   96 (one tile, a quarter fewer columns), else 128, or 64 where the last 128-token tile is ragged
   and the grid would be split (H200, 2560x2560 at 192 tokens: 14.4 -> 9.8 us). More tiles of 96 or
   64 at 512 tokens were slower than fewer of 128 (BENCHMARKS.md, session 35). With at most half as
   many tiles as SMs, K is split over a cluster of up to 4 blocks a tile
   (bitnet_k_tgemm90_n<TN>_split), at most a block an SM and two stages a block: a split costs each
   block a pipeline fill, two cluster barriers and its share of the exchange, which only idle SMs pay
   back (BENCHMARKS.md, session 34). Environment, for tests and A/B runs: BITNET_TGEMM_WG=0 sends the
   call to the mma.sync kernel; BITNET_TGEMM_TN 64, 96 or 128 forces the tile, 32 the mma.sync
   kernel; BITNET_TGEMM_SPLIT=P forces P, 1 none. BITNET_ERR_UNSUPPORTED (nothing launched) sends
   the call to the mma.sync kernel. Launched under programmatic dependent launch (BITNET_GPU_PDL=0:
   plainly): it waits at entry, and lets the next kernel launch after its main loop. The kernel before
   (the prefill's norm) does not trigger early, so no block waits here holding its shared memory; when
   it did, 64-token prompts were 10% slower (session 36). As now, H200, 2B-4T prompts of 16 / 64 / 512
   tokens: +6% / +5% / +1% against a plain launch (BENCHMARKS.md, session 39). */
#define BITNET__WG_STAGES 5 /* BN_WG_STAGES of the kernel source */
/* Blocks a tile over which K is split, for a grid of tiles on sms SMs (before the stage cap). */
static size_t bitnet__tgemm90_split(size_t tiles, size_t sms) {
    return 2 * tiles <= sms ? BITNET__MIN((size_t)4, sms / tiles) : 1;
}
static bitnet_result bitnet__tgemm90(bitnet_gpu *gpu, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a, void **args) {
    const int tn_force = bitnet__env_int("BITNET_TGEMM_TN", 32, 128, 0);
    const size_t sms = (size_t)bitnet__gk_sm_count(gpu), rows = w->n_pad / 128;
    const size_t t128 = rows * ((a->m + 127) / 128), t64 = rows * ((a->m + 63) / 64);
    int tn = a->m <= 64 ? 64 : a->m <= 96 ? 96 : 128, ns = (int)(w->k / 128), split;
    unsigned grid[3], block[3], smem;
    size_t tiles;
    bitnet_gpu_kernel *k;
    char name[40];
    /* a ragged last 128-token tile on a grid that would be split: 64-token tiles, if they fill at most
       one block an SM (after their own split) */
    if (a->m > 128 && a->m % 128 && bitnet__tgemm90_split(t128, sms) > 1 && t64 * bitnet__tgemm90_split(t64, sms) <= sms) tn = 64;
    if (tn_force == 64 || tn_force == 96 || tn_force == 128) tn = tn_force;
    if (bitnet__env_off("BITNET_TGEMM_WG") || tn_force == 32 || (a->q | w->data) % 16) return BITNET_ERR_UNSUPPORTED;
    grid[0] = (unsigned)rows, grid[1] = (unsigned)((a->m + (size_t)tn - 1) / (size_t)tn), grid[2] = 1;
    tiles = (size_t)grid[0] * grid[1];
    split = (int)bitnet__tgemm90_split(tiles, sms);
    split = bitnet__env_int("BITNET_TGEMM_SPLIT", 1, 8, split);
    split = BITNET__MAX(1, BITNET__MIN(split, ns / 2)); /* at least two stages a block */
    if (!bitnet__cuda.cu.cuLaunchKernelEx) split = 1; /* (no clusters) */
    /* the ring; token scales, reciprocals, sums; a flag; split: the exchange area, (P - 1) slots of a
       part's pairs of 8-token columns, 8 KB a pair */
    smem = BITNET__WG_STAGES * (unsigned)(tn * 128 + 128 * 32) + (unsigned)tn * 12 + 16;
    if (split > 1) smem += (unsigned)(split - 1) * (unsigned)((tn / 16 + split - 1) / split) * 8192u;
    snprintf(name, sizeof name, "bitnet_k_tgemm90_n%d%s%s", tn, split > 1 ? "_split" : "", bitnet__glu_sfx(w));
    BITNET__TRY(bitnet_gpu_builtin_kernel(gpu, name, &k));
    if (!strchr(k->mod->jit.target, 'a')) return BITNET_ERR_UNSUPPORTED; /* NVRTC without sm_90a: empty kernels */
    grid[1] *= (unsigned)split; /* a tile's blocks side by side along y, one cluster */
    block[0] = 256, block[1] = block[2] = 1; /* two warpgroups */
    return bitnet__launch(gpu, k, grid, block, smem, args, gpu->pdl, (unsigned)split);
}

static bitnet_result bitnet__tmm_issue(bitnet_gpu *gpu, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a,
                                       bitnet_devptr out, bitnet_precision out_type, bitnet_devptr residual) {
    bitnet__k_segs segs = bitnet__k_segs_of(w);
    int n_out = (int)w->n, nc = (int)(w->k / 64), glu = w->glu, ot;
    long long lda = (long long)w->k, ldo = (long long)w->n;
    size_t m0, m = a->m;
    int mm = (int)m;
    void *args[15]; /* BN_TGEMM_ARGS: the GEMMs' and the single-token GEMV's, for all of a */
    ot = out_type == BITNET_PRECISION_AUTO ? (int)BITNET_PRECISION_FP32 : (int)out_type;
    args[0] = (void *)&w->data, args[1] = &n_out, args[2] = &nc, args[3] = &segs, args[4] = &glu;
    args[5] = (void *)&a->q, args[6] = &lda, args[7] = (void *)&a->scale, args[8] = (void *)&a->sum, args[9] = &mm;
    args[10] = &out, args[11] = &ldo, args[12] = &ot, args[13] = &residual, args[14] = &ldo;
    if (m > 4 && gpu->dev->cc == 90) {
        /* the wgmma GEMM from 5 tokens: the 8-token GEMV reads its weights once but does 8 tokens' dot
           products on the CUDA cores (H200, 13824x2560: 28.1 us at 8 tokens, the GEMM 10.9 at 9; 4
           tokens 10.3 by GEMV: BENCHMARKS.md, session 34) */
        bitnet_result r = bitnet__tgemm90(gpu, w, a, args);
        if (r != BITNET_ERR_UNSUPPORTED) return r;
    }
    if (m > 8 && gpu->dev->cc >= 80) {
        /* mma.sync: tiles of 128 tokens, or of 64 or 32 while the grid is under four blocks an SM (H100,
           M = 512, 2B-4T: see BENCHMARKS.md); BITNET_TGEMM_TN=32|64|128 forces one (A/B, tests) */
        size_t rows = w->n_pad / 128, want = (size_t)bitnet__gk_sm_count(gpu) * 4;
        int tn = 128, tn_force = bitnet__env_int("BITNET_TGEMM_TN", 32, 128, 0);
        while (tn > 32 && rows * ((m + (size_t)tn - 1) / (size_t)tn) < want) tn /= 2;
        char name[40];
        if (tn_force == 32 || tn_force == 64 || tn_force == 128) tn = tn_force;
        snprintf(name, sizeof name, "bitnet_k_tgemm%s%s", tn == 32 ? "_n32" : tn == 64 ? "_n64" : "", bitnet__glu_sfx(w));
        return bitnet__gk_launch(gpu, name, (unsigned)rows, (unsigned)((m + (size_t)tn - 1) / (size_t)tn), 1, 128, 1, args, 0);
    }
    if (m == 1 && gpu->dev->cc >= 90 && a->planes) {
        bitnet_result r = bitnet__tgemv_pdl(gpu, w, a, args);
        if (r != BITNET_ERR_UNSUPPORTED) return r;
    }
    /* GEMV, 8 tokens at a time (before sm_80 this covers every m) */
    for (m0 = 0; m0 < m; m0 += 8) {
        int mt, rg = glu ? 2 : 1, groups = (n_out + 31) / 32, sms = bitnet__gk_sm_count(gpu), wpg = 8, cap;
        size_t es = ot == BITNET_PRECISION_FP32 ? 4 : 2;
        bitnet_devptr q = a->q + m0 * w->k, sc = a->scale + m0 * 4, su = a->sum + m0 * 4;
        bitnet_devptr o = out + m0 * w->n * es, r = residual ? residual + m0 * w->n * es : 0;
        char name[32];
        mm = (int)BITNET__MIN(m - m0, (size_t)8), mt = mm == 1 ? 1 : mm == 2 ? 2 : mm <= 4 ? 4 : 8;
        /* warps per 32-row group: enough warps in flight on the whole GPU (measured on H100: small
           matrices want 32, large ones 8 to 16) */
        while (wpg < 32 && (size_t)groups * wpg < (size_t)sms * 24) wpg *= 2;
        cap = BITNET__MIN(32, 128 / mt) / rg;
        wpg = BITNET__MIN(BITNET__MIN(wpg, cap), nc);
        snprintf(name, sizeof name, "bitnet_k_tgemv_m%d%s", mt, bitnet__glu_sfx(w));
        args[5] = &q, args[7] = &sc, args[8] = &su, args[10] = &o, args[13] = &r; /* this slice of the tokens */
        BITNET__TRY(bitnet__gk_launch(gpu, name, (unsigned)groups, 1, 1, 32, (unsigned)(wpg * rg), args, 0));
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_ternary_matmul(bitnet_gpu *gpu, const bitnet_gpu_ternary *w, const bitnet_gpu_act *a,
                                                   bitnet_devptr out, bitnet_precision out_type, bitnet_devptr residual) {
    BITNET__CHECK_PTR(gpu);
    BITNET__TRY(bitnet__tmm_check("bitnet_gpu_ternary_matmul", w, a, out, out_type));
    return bitnet__tmm_issue(gpu, w, a, out, out_type, residual);
}

BITNET_API bitnet_result bitnet_gpu_ternary_matmul_batch(bitnet_gpu *gpu, const bitnet_gpu_matmul_op *ops, size_t n_ops) {
    size_t i;
    BITNET__CHECK_PTR(gpu);
    BITNET__CHECK_PTR(ops);
    if (!n_ops) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_ternary_matmul_batch: no problems");
    for (i = 0; i < n_ops; i++) BITNET__TRY(bitnet__tmm_check("bitnet_gpu_ternary_matmul_batch", ops[i].w, ops[i].a, ops[i].out,
                                                               ops[i].out_type));
    for (i = 0; i < n_ops; i++) BITNET__TRY(bitnet__tmm_issue(gpu, ops[i].w, ops[i].a, ops[i].out, ops[i].out_type, ops[i].residual));
    return bitnet_gpu_sync(gpu);
}

/* ---- dense matmul, conversions, per-precision metrics ------------------------------------------ */

static bitnet_gpu_precision_metrics bitnet__pm[4];
static double bitnet__pm_ms0[4]; /* the timed milliseconds at the last reset */

static void bitnet__pm_add(bitnet_precision p, uint64_t ops, uint64_t bytes) {
    bitnet__mutex_lock(&bitnet__gk_lock);
    bitnet__pm[p].calls++;
    bitnet__pm[p].ops += ops;
    bitnet__pm[p].bytes += bytes;
    bitnet__mutex_unlock(&bitnet__gk_lock);
}

/* Device time of the dense kernels of one precision, from the runtime's per-kernel timing. */
static double bitnet__pm_timed(bitnet_precision p) {
    static const char *const sfx[4] = {"", "_f32", "_f16", "_bf16"};
    bitnet_gpu_stats *st = (bitnet_gpu_stats *)bitnet__malloc(sizeof *st);
    double ms = 0;
    int i;
    if (!st) return 0;
    if (bitnet_gpu_stats_get(NULL, st) == BITNET_OK)
        for (i = 0; i < st->n_kernels; i++) {
            const char *nm = st->kernels[i].name, *s;
            if (strncmp(nm, "bitnet_k_dgemv", 14) && strncmp(nm, "bitnet_k_sgemm", 14) && strncmp(nm, "bitnet_k_hgemm", 14)) continue;
            s = strstr(nm + 14, sfx[p]);
            if (s && (s[strlen(sfx[p])] == 0 || s[strlen(sfx[p])] == '_')) ms += st->kernels[i].ms;
        }
    bitnet__free(st);
    return ms;
}

BITNET_API bitnet_result bitnet_gpu_precision_metrics_get(bitnet_precision p, bitnet_gpu_precision_metrics *out) {
    BITNET__CHECK_PTR(out);
    if (!bitnet__prec_ok(p)) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_precision_metrics_get: precision %d", (int)p);
    bitnet__mutex_lock(&bitnet__gk_lock);
    *out = bitnet__pm[p];
    out->ms = bitnet__pm_timed(p) - bitnet__pm_ms0[p];
    bitnet__mutex_unlock(&bitnet__gk_lock);
    return BITNET_OK;
}

BITNET_API void bitnet_gpu_precision_metrics_reset(void) {
    int p;
    bitnet__mutex_lock(&bitnet__gk_lock);
    memset(bitnet__pm, 0, sizeof bitnet__pm);
    for (p = 1; p < 4; p++) bitnet__pm_ms0[p] = bitnet__pm_timed((bitnet_precision)p);
    bitnet__mutex_unlock(&bitnet__gk_lock);
}

BITNET_API bitnet_result bitnet_gpu_matmul(bitnet_gpu *gpu, bitnet_precision prec, bitnet_devptr w, bitnet_devptr x,
                                           size_t m, size_t n, size_t k, bitnet_devptr out, bitnet_precision out_type) {
    static const char *const ty[4] = {"", "f32", "f16", "bf16"};
    size_t es, t;
    int nn, kk, mm, ot;
    long long ld, ldo;
    char name[40];
    void *args[10];
    BITNET__CHECK_PTR(gpu);
    if (!w || !x || !out) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_matmul: w, x and out must be set");
    if (prec == BITNET_PRECISION_AUTO) prec = bitnet_detect_best_precision(bitnet_gpu_ordinal(gpu));
    if (out_type == BITNET_PRECISION_AUTO) out_type = BITNET_PRECISION_FP32;
    if (!bitnet__prec_ok(prec) || !bitnet__prec_ok(out_type))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_matmul: precision %d, output %d", (int)prec, (int)out_type);
    es = bitnet__prec_size(prec);
    if (!m || !n || !k || m > (size_t)INT_MAX || n > (size_t)INT_MAX || k > (size_t)INT_MAX)
        return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_matmul: m=%zu n=%zu k=%zu", m, n, k);
    if ((k * es) % 16)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_gpu_matmul: k=%zu %s values are not whole 16-byte rows", k, ty[prec]);
    if ((w | x) % 16) return bitnet__err(BITNET_ERR_ALIGNMENT, "bitnet_gpu_matmul: w and x must be 16-byte aligned");
    if (!bitnet__mul_size(n, k, &t) || !bitnet__mul_size(m, k, &t) || !bitnet__mul_size(m, n, &t))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gpu_matmul: sizes overflow");
    nn = (int)n, kk = (int)k, mm = (int)m, ot = (int)out_type, ld = (long long)k, ldo = (long long)n;
    args[0] = &w, args[1] = &x, args[2] = &nn, args[3] = &kk, args[4] = &ld, args[5] = &ld, args[6] = &mm;
    args[7] = &out, args[8] = &ldo, args[9] = &ot;
    if (m <= 8) {
        snprintf(name, sizeof name, "bitnet_k_dgemv_%s_m%d", ty[prec], m == 1 ? 1 : 8);
        BITNET__TRY(bitnet__gk_launch(gpu, name, (unsigned)((n + 8 * BITNET__DGEMV_ROWS - 1) / (8 * BITNET__DGEMV_ROWS)), 1, 1,
                                      32, 8, args, 0));
    } else if (prec != BITNET_PRECISION_FP32 && gpu->dev->cc >= 80) {
        snprintf(name, sizeof name, "bitnet_k_hgemm_%s", ty[prec]);
        BITNET__TRY(bitnet__gk_launch(gpu, name, (unsigned)((n + 127) / 128), (unsigned)((m + 127) / 128), 1, 128, 1, args, 0));
    } else {
        snprintf(name, sizeof name, "bitnet_k_sgemm_%s", ty[prec]);
        BITNET__TRY(bitnet__gk_launch(gpu, name, (unsigned)((n + 63) / 64), (unsigned)((m + 63) / 64), 1, 256, 1, args, 0));
    }
    bitnet__pm_add(prec, 2ull * m * n * k, (uint64_t)((n * k + m * k) * es + m * n * bitnet__prec_size(out_type)));
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_gpu_convert(bitnet_gpu *gpu, bitnet_devptr src, bitnet_precision src_type,
                                            bitnet_devptr dst, bitnet_precision dst_type, size_t n) {
    int st = (int)src_type, dt = (int)dst_type;
    unsigned long long nn = n;
    void *args[5];
    BITNET__CHECK_PTR(gpu);
    if (!src || !dst) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_convert: src and dst must be set");
    if (!bitnet__prec_ok(src_type) || !bitnet__prec_ok(dst_type))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_convert: types %d -> %d", st, dt);
    if (!n) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_convert: n is 0");
    args[0] = &src, args[1] = &st, args[2] = &dst, args[3] = &dt, args[4] = &nn;
    BITNET__TRY(bitnet__gk_launch(gpu, "bitnet_k_convert", bitnet__gk_blocks(n, 256), 1, 1, 256, 1, args, 0));
    bitnet__pm_add(dst_type, n, (uint64_t)n * (bitnet__prec_size(src_type) + bitnet__prec_size(dst_type)));
    return BITNET_OK;
}

/* ---- GPU quantization -------------------------------------------------------------------------- */

#define BITNET__ABSMEAN_BLOCKS 256 /* fixed: the partial sums' order must not depend on the device */

BITNET_API bitnet_result bitnet_gpu_quantize_ternary(bitnet_gpu *gpu, bitnet_devptr w, size_t n, bitnet_devptr q,
                                                     bitnet_devptr scale) {
    bitnet_devptr part = 0;
    unsigned long long nn = n;
    int np = BITNET__ABSMEAN_BLOCKS;
    bitnet_result res;
    void *args[4];
    BITNET__CHECK_PTR(gpu);
    if (!w || !q || !scale) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_quantize_ternary: w, q and scale must be set");
    if (!n) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gpu_quantize_ternary: n is 0");
    BITNET__TRY(bitnet_gpu_alloc(gpu, BITNET__ABSMEAN_BLOCKS * sizeof(double), &part));
    args[0] = &w, args[1] = &nn, args[2] = &part;
    res = bitnet__gk_launch(gpu, "bitnet_k_absmean_partial", BITNET__ABSMEAN_BLOCKS, 1, 1, 256, 1, args, 0);
    args[0] = &part, args[1] = &np, args[2] = &nn, args[3] = &scale;
    if (res == BITNET_OK) res = bitnet__gk_launch(gpu, "bitnet_k_absmean_final", 1, 1, 1, 256, 1, args, 0);
    args[0] = &w, args[1] = &nn, args[2] = &scale, args[3] = &q;
    if (res == BITNET_OK) res = bitnet__gk_launch(gpu, "bitnet_k_ternary_codes", bitnet__gk_blocks(n, 256), 1, 1, 256, 1, args, 0);
    bitnet_gpu_free(gpu, part); /* the pool reuses it only after this stream's work */
    return res;
}

BITNET_API bitnet_result bitnet_gpu_i2s_pack(bitnet_gpu *gpu, bitnet_devptr q, size_t n, size_t k, bitnet_devptr scale,
                                             bitnet_devptr dst) {
    bitnet_devptr bad = 0;
    unsigned long long nk;
    int bad_h = 0;
    bitnet_result res;
    void *args[5];
    BITNET__CHECK_PTR(gpu);
    if (!q || !scale || !dst) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_gpu_i2s_pack: q, scale and dst must be set");
    if (!n || !k || k % BITNET_I2S_BLOCK || !bitnet_i2s_bytes(n, k))
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "bitnet_gpu_i2s_pack: n=%zu k=%zu (k a multiple of %d)", n, k, BITNET_I2S_BLOCK);
    nk = (unsigned long long)n * k;
    BITNET__TRY(bitnet_gpu_alloc(gpu, 4, &bad));
    res = bitnet_gpu_memset(gpu, bad, 0, 4);
    args[0] = &q, args[1] = &nk, args[2] = &scale, args[3] = &dst, args[4] = &bad;
    if (res == BITNET_OK) res = bitnet__gk_launch(gpu, "bitnet_k_i2s_pack", bitnet__gk_blocks((size_t)(nk / 4), 256), 1, 1, 256, 1, args, 0);
    if (res == BITNET_OK) res = bitnet_gpu_download(gpu, &bad_h, bad, 4);
    bitnet_gpu_free(gpu, bad);
    if (res == BITNET_OK && bad_h) res = bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_gpu_i2s_pack: a code is not -1, 0 or 1");
    return res;
}

/* ---- the device-aware quantizer ---------------------------------------------------------------- */

struct bitnet_quantizer {
    bitnet_gpu *gpu;
    bitnet_quant_stats st;
};

static void *bitnet__qz_alloc(bitnet_quantizer *qz, size_t bytes) {
    void *p = bitnet__malloc(bytes);
    if (p) qz->st.host_bytes += bytes, qz->st.host_bytes_total += bytes;
    return p;
}
static void bitnet__qz_release(bitnet_quantizer *qz, void *p, size_t bytes) {
    if (!p) return;
    bitnet__free(p);
    qz->st.host_bytes -= bytes;
}

BITNET_API bitnet_result bitnet_quantizer_create(bitnet_gpu *gpu, bitnet_quantizer **out) {
    bitnet_quantizer *qz;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    qz = (bitnet_quantizer *)bitnet__calloc(1, sizeof *qz);
    if (!qz) return BITNET_ERR_OUT_OF_MEMORY;
    qz->gpu = gpu;
    qz->st.host_bytes = qz->st.host_bytes_total = sizeof *qz;
    *out = qz;
    return BITNET_OK;
}

BITNET_API void bitnet_quantizer_free(bitnet_quantizer *qz) { bitnet__free(qz); }

/* After a GPU attempt: counts it, or keeps its error for the fallback that follows. */
static int bitnet__qz_gpu_done(bitnet_quantizer *qz, bitnet_result r, bitnet_quant_kind kind, double t0) {
    if (r == BITNET_OK) {
        qz->st.gpu_ops++;
        qz->st.gpu_ms[kind] += (bitnet__now() - t0) * 1e3;
        return 1;
    }
    qz->st.fallbacks++;
    snprintf(qz->st.last_gpu_error, sizeof qz->st.last_gpu_error, "%s: %.200s", bitnet_result_string(r), bitnet_last_error());
    bitnet__log(BITNET_LOG_WARN, "quantizer: GPU failed (%s), using the CPU", qz->st.last_gpu_error);
    return 0;
}
static bitnet_result bitnet__qz_cpu_done(bitnet_quantizer *qz, bitnet_result r, bitnet_quant_kind kind, double t0) {
    qz->st.cpu_ops++;
    qz->st.cpu_ms[kind] += (bitnet__now() - t0) * 1e3;
    if (r != BITNET_OK)
        snprintf(qz->st.last_cpu_error, sizeof qz->st.last_cpu_error, "%s: %.200s", bitnet_result_string(r), bitnet_last_error());
    return r;
}

/* Device buffers of one GPU attempt (freed in any case). */
typedef struct bitnet__qz_bufs { bitnet_devptr p[4]; } bitnet__qz_bufs;
static void bitnet__qz_bufs_free(bitnet_gpu *gpu, bitnet__qz_bufs *b) {
    int i;
    for (i = 0; i < 4; i++)
        if (b->p[i]) bitnet_gpu_free(gpu, b->p[i]);
}

BITNET_API bitnet_result bitnet_quantizer_ternary(bitnet_quantizer *qz, const float *w, size_t n, int8_t *q, float *scale) {
    double t0 = bitnet__now();
    size_t wb;
    BITNET__CHECK_PTR(qz);
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (!n) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantizer_ternary: n is 0");
    if (!bitnet__mul_size(n, 4, &wb)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_quantizer_ternary: n=%zu overflows", n);
    if (qz->gpu) {
        bitnet__qz_bufs b;
        bitnet_result r;
        memset(&b, 0, sizeof b);
        r = bitnet_gpu_alloc(qz->gpu, wb, &b.p[0]);
        if (r == BITNET_OK) r = bitnet_gpu_alloc(qz->gpu, n, &b.p[1]);
        if (r == BITNET_OK) r = bitnet_gpu_alloc(qz->gpu, 4, &b.p[2]);
        if (r == BITNET_OK) r = bitnet_gpu_upload(qz->gpu, b.p[0], w, wb);
        if (r == BITNET_OK) r = bitnet_gpu_quantize_ternary(qz->gpu, b.p[0], n, b.p[1], b.p[2]);
        if (r == BITNET_OK) r = bitnet_gpu_download(qz->gpu, q, b.p[1], n);
        if (r == BITNET_OK) r = bitnet_gpu_download(qz->gpu, scale, b.p[2], 4);
        bitnet__qz_bufs_free(qz->gpu, &b);
        if (bitnet__qz_gpu_done(qz, r, BITNET_QUANT_TERNARY, t0)) return BITNET_OK;
        t0 = bitnet__now();
    }
    return bitnet__qz_cpu_done(qz, bitnet_quantize_ternary(w, n, q, scale), BITNET_QUANT_TERNARY, t0);
}

BITNET_API bitnet_result bitnet_quantizer_act(bitnet_quantizer *qz, const float *x, size_t m, size_t k, int8_t *q,
                                              float *scale, int32_t *sum) {
    double t0 = bitnet__now();
    size_t mk, xb;
    BITNET__CHECK_PTR(qz);
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantizer_act: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &mk) || !bitnet__mul_size(mk, 4, &xb))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_quantizer_act: m*k overflows");
    if (qz->gpu && m <= (size_t)INT_MAX && k <= (size_t)INT_MAX) {
        bitnet__qz_bufs b;
        bitnet_gpu_act a;
        bitnet_result r;
        memset(&b, 0, sizeof b);
        memset(&a, 0, sizeof a);
        r = bitnet_gpu_alloc(qz->gpu, xb, &b.p[0]);
        if (r == BITNET_OK) r = bitnet_gpu_act_alloc(qz->gpu, m, k, &a);
        if (r == BITNET_OK) r = bitnet_gpu_upload(qz->gpu, b.p[0], x, xb);
        if (r == BITNET_OK) r = bitnet_gpu_quantize_act(qz->gpu, b.p[0], m, k, 0, 0.0f, &a);
        if (r == BITNET_OK) r = bitnet_gpu_download(qz->gpu, q, a.q, mk);
        if (r == BITNET_OK) r = bitnet_gpu_download(qz->gpu, scale, a.scale, m * 4);
        if (r == BITNET_OK && sum) r = bitnet_gpu_download(qz->gpu, sum, a.sum, m * 4);
        bitnet_gpu_act_free(qz->gpu, &a);
        bitnet__qz_bufs_free(qz->gpu, &b);
        if (bitnet__qz_gpu_done(qz, r, BITNET_QUANT_ACT, t0)) return BITNET_OK;
        t0 = bitnet__now();
    }
    return bitnet__qz_cpu_done(qz, bitnet_quantize_act(x, m, k, q, scale, sum), BITNET_QUANT_ACT, t0);
}

BITNET_API bitnet_result bitnet_quantizer_i2s(bitnet_quantizer *qz, const float *w, size_t n, size_t k, void *dst,
                                              size_t dst_bytes) {
    double t0 = bitnet__now();
    size_t nk, wb, ib;
    int8_t *codes;
    float scale;
    bitnet_result r;
    BITNET__CHECK_PTR(qz);
    BITNET__CHECK_PTR(w);
    BITNET__TRY(bitnet__i2s_check("bitnet_quantizer_i2s", dst, dst_bytes, n, k));
    nk = n * k; /* bitnet__i2s_check proved it fits */
    if (!bitnet__mul_size(nk, 4, &wb)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_quantizer_i2s: n*k*4 overflows");
    ib = bitnet_i2s_bytes(n, k);
    if (qz->gpu) {
        bitnet__qz_bufs b;
        memset(&b, 0, sizeof b);
        r = bitnet_gpu_alloc(qz->gpu, wb, &b.p[0]);
        if (r == BITNET_OK) r = bitnet_gpu_alloc(qz->gpu, nk, &b.p[1]);
        if (r == BITNET_OK) r = bitnet_gpu_alloc(qz->gpu, 4, &b.p[2]);
        if (r == BITNET_OK) r = bitnet_gpu_alloc(qz->gpu, ib, &b.p[3]);
        if (r == BITNET_OK) r = bitnet_gpu_upload(qz->gpu, b.p[0], w, wb);
        if (r == BITNET_OK) r = bitnet_gpu_quantize_ternary(qz->gpu, b.p[0], nk, b.p[1], b.p[2]);
        if (r == BITNET_OK) r = bitnet_gpu_i2s_pack(qz->gpu, b.p[1], n, k, b.p[2], b.p[3]);
        if (r == BITNET_OK) r = bitnet_gpu_download(qz->gpu, dst, b.p[3], ib);
        bitnet__qz_bufs_free(qz->gpu, &b);
        if (bitnet__qz_gpu_done(qz, r, BITNET_QUANT_I2S, t0)) return BITNET_OK;
        t0 = bitnet__now();
    }
    codes = (int8_t *)bitnet__qz_alloc(qz, nk);
    if (!codes) return bitnet__qz_cpu_done(qz, BITNET_ERR_OUT_OF_MEMORY, BITNET_QUANT_I2S, t0);
    r = bitnet_quantize_ternary(w, nk, codes, &scale);
    if (r == BITNET_OK) r = bitnet_i2s_pack(codes, n, k, scale, dst, dst_bytes);
    bitnet__qz_release(qz, codes, nk);
    return bitnet__qz_cpu_done(qz, r, BITNET_QUANT_I2S, t0);
}

BITNET_API bitnet_result bitnet_quantizer_stats(const bitnet_quantizer *qz, bitnet_quant_stats *out) {
    BITNET__CHECK_PTR(qz);
    BITNET__CHECK_PTR(out);
    *out = qz->st;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_quantizer_summary(const bitnet_quantizer *qz, char *buf, size_t cap) {
    const bitnet_quant_stats *s;
    double g = 0, c = 0;
    int i;
    BITNET__CHECK_PTR(qz);
    BITNET__CHECK_PTR(buf);
    if (!cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantizer_summary: cap is 0");
    s = &qz->st;
    for (i = 0; i < BITNET_QUANT_KINDS; i++) g += s->gpu_ms[i], c += s->cpu_ms[i];
    snprintf(buf, cap, "quantizer: gpu %llu ops (%.1f ms), cpu %llu ops (%.1f ms), %llu fallback%s%s%s%s, host %.1f MB (%.1f MB total)",
             (unsigned long long)s->gpu_ops, g, (unsigned long long)s->cpu_ops, c, (unsigned long long)s->fallbacks,
             s->fallbacks == 1 ? "" : "s", s->last_gpu_error[0] ? " (last gpu error: " : "", s->last_gpu_error,
             s->last_gpu_error[0] ? ")" : "", (double)s->host_bytes / 1e6, (double)s->host_bytes_total / 1e6);
    return BITNET_OK;
}

/* >>cuda-forward ============================================================================== */

/* The forward pass on the GPU, the same steps in the same order as bitnet__cpu_forward, each
   step (or run of fused steps) a bitnet__gpu_<step> function numbered as the CPU's. Weights
   (ternary in the T32 layout of the ternary module, the fp16 embedding and head), the fp16 KV cache and every activation stay on the device.
   - Decode (one token): a CUDA graph per session and attention form (contexts in one range over
     warps, in several, in several of two passes, and longer ones in the long form), captured at first use and replayed after
     (H100, 2B-4T shapes: see BENCHMARKS.md). Token and position are read from device memory (io), and the token's fp16
     embedding row from the table in mapped host memory, so the host does one 8-byte upload and
     one graph launch a token, with no synchronisation inside it; the head leaves the argmax and
     the next position in io, so greedy decoding launches each step before the host has read the
     token it feeds (bitnet__gpu_next_token), which the head (or a draw) also stores into mapped
     host memory: only an event goes between two steps. Without the mapped table each step uploads its row
     too (256 + dim*2 bytes). Five kernels a layer (the forward
     module in bitnet_cuda_kernels.h): RMSNorm + int8 quantization run in the prologue of each
     ternary GEMV, RoPE and the KV append in the attention kernel, residual adds and
     act(gate) * up in GEMV epilogues; the head kernel also leaves the argmax on the device. On
     sm_90 the kernels go out with programmatic dependent launch (the launch path's per-kernel
     flag), so each one's launch and weight loads overlap the kernel before it. A kernel reads what
     an earlier one wrote only after its wait, and never by the read-only path (ld.global.nc): it
     may start while that one still writes (BENCHMARKS.md, session 20).
   - The head: int8 rows with a scale each by default (the CPU's head, quantized on the host at
     load, half the bytes of fp16); fp16 with bitnet_model_desc.head_f16 or BITNET_HEAD=f16. The
     device memory holds no fp16 embedding table (the mapped one is host memory: n_vocab * dim * 2
     page-locked bytes).
   - Prefill (m >= 2 tokens, sm_80+): batches of up to n_batch tokens through
     bitnet_gpu_quantize_act and bitnet_gpu_ternary_matmul (int8 tensor cores), and this module's
     rope_kv and causal attention. Below sm_80 prompts run through the decode graph token by token.
   Ternary weights are uploaded with bitnet_gpu_ternary_upload (T32 layout; QKV fused with its
   three scales, gate||up interleaved), which both paths read.
   The model holds one bitnet_gpu handle for its weights; each session opens its own handle (its
   own stream and pool), so sessions on different threads never share a stream.
   Hooks for >>model: bitnet__gpu_model_init/free, bitnet__gpu_session_init/free,
   bitnet__gpu_forward (bitnet__cpu_forward's contract), bitnet__gpu_next_token (greedy
   decoding without a logits download, a step ahead) and bitnet__gpu_sample (top-k, min-p, and
   greedy with a repetition penalty, from the k best logits the device picked, not all of them). */
#if !defined(BITNET_NO_CUDA)
#define BITNET__GPU_FORWARD 1

#define BITNET__GPU_ATT_T 128         /* decode attention over warps: positions a range, at most (16 warps x BF_SW) */
#define BITNET__GPU_ATT_R 8           /* decode attention: longer ones, ranges of about this many a block (H100: 8 beat 16 by 1.3%) */
#define BITNET__GPU_ATT_TILE 32       /* decode attention: positions a tile in that form (ranges can be longer; H100: 32 beat 64 by 0.5%) */
#define BITNET__GPU_ATT_SMAX 32       /* decode attention: ranges a head, at most (the kernel's s_w) */
#define BITNET__GPU_ATT_CLMAX 8       /* decode attention over warps on sm_90: ranges a head as one cluster, at most (BF_CLMAX) */
/* The decode attention's forms; a session captures a step's graph for each form and count of ranges it meets */
enum {
    BITNET__ATT_ONE,    /* over warps, one range a head (up to att_t positions) */
    BITNET__ATT_RANGES, /* over warps, att_w / ATT_T ranges a head; their last block combines them */
    BITNET__ATT_CL,     /* over warps, n ranges a head as one cluster (sm_90) */
    BITNET__ATT_CL2,    /* over warps, n ranges of two passes a head as one cluster (sm_90), past att_w */
    BITNET__ATT_LONG,   /* the long form, past att_w (and att_w2) */
    BITNET__ATT_FORMS
};
#define BITNET__GPU_PREFILL_MIN 2     /* tokens per call from which prefill takes the GEMM path */
#define BITNET__GPU_ATT_ROWS 32       /* prefill attention: rows (query x head) a block (the kernels' BF_PR) */
#define BITNET__GPU_ATT_PK 32         /* prefill attention: keys a tile (the kernels' BF_PK; 32: three blocks fit an SM) */
#define BITNET__GPU_TOPK_MAX 128      /* bitnet__gpu_sample: top_k at most (the topk kernel keeps 128 a warp) */
#define BITNET__GPU_TOPK_BLOCKS 32    /* the topk kernel's grid, at most (its last block merges one block a warp) */

typedef struct bitnet__glayer {
    bitnet_gpu_ternary qkv, o, gu, down; /* wq||wk||wv, wo, w_gate||w_up (glu), w_down */
    bitnet_devptr attn_norm, attn_sub_norm, ffn_norm, ffn_sub_norm;
} bitnet__glayer;

typedef struct bitnet__gmodel {
    bitnet_gpu *gpu;                  /* owns the weights */
    bitnet_devptr mem;                /* head, norms (the embedding stays in host memory) */
    void *emb_host;                   /* the fp16 embedding in mapped host memory (or NULL: each step uploads its row) */
    bitnet_devptr emb_dev;            /* its device address: the decode step reads its token's row from there */
    size_t bytes, ternary_bytes;
    bitnet_devptr head, head_scale, out_norm; /* head: fp16 rows, or int8 rows with head_scale (head_q8) */
    int head_q8;
    bitnet__glayer *layers;
    int device, sm_count, cc, smem_optin; /* smem_optin: shared memory a block can have (bytes) */
    bitnet_gpu_kernel *embed, *gemv_store, *gemv_res, *gemv_glu, *attn, *head_k, *rope_kv, *attn_prefill, *topk, *penalize;
    bitnet_gpu_kernel *gemv_sub; /* O's and down's GEMV: gemv_res (gemv_res_kn with >>pad), or without RMSNorm ("llama") */
    bitnet_gpu_kernel *attn_warps;   /* the decode attention over warps for head_dim 32, 64 or 128 (else NULL: attn throughout) */
    bitnet_gpu_kernel *attn_warps2;  /* the same in ranges of two passes (with attn_warps) */
    int att_pk;                       /* attn_prefill's keys a tile: BITNET__GPU_ATT_PK (tools rebuild it with others) */
    int hd, q_dim, kv_dim, ffn_k;     /* the device's layout: head_dim rounded up to 32 (bitnet__gpad), n_heads * hd,
                                         n_kv_heads * hd, and the model's ffn_k */
} bitnet__gmodel;

typedef struct bitnet__gsession {
    bitnet_gpu *gpu;                  /* this session's stream and pool */
    bitnet_devptr mem;
    size_t bytes;
    bitnet_devptr kc, vc;             /* fp16 [n_layers][n_kv][n_ctx][hd] (the device's dims: bitnet__gmodel) */
    bitnet_devptr rope;               /* the session's cos/sin table, [n_ctx][hd] */
    bitnet_devptr x, qkv, att, h;     /* fp32 [B][dim], [B][q+2kv], [B][q_dim], [B][ffn_k] */
    bitnet_gpu_act a_dim, a_q, a_ff;  /* prefill: int8 activations of k = dim, q_dim, ffn_k (one buffer) */
    bitnet_devptr logits;             /* fp32 [n_vocab] */
    bitnet_devptr att_part;           /* the attention's partials, double: decode ranges [n_heads][smax][hd] then
                                         [n_heads][smax][2] (max, sum); or prefill pieces (cuts: bitnet__gatt_cuts)
                                         [2 cuts n_kv][ROWS][hd + 2] (a cut block's pieces side by side) */
    bitnet_devptr hv, hi;             /* head: each block's best value and index */
    bitnet_devptr ctr;                /* int [n_heads + 2 + cuts n_kv]: decode attention (a head), head, topk and prefill
                                         attention (a cut block) counters; their last blocks reset them */
    bitnet_devptr tk_part, tk_res;    /* topk: the blocks' k best keys, u64 [32][128]; the result, int [1 + 2 * 128] */
    bitnet_devptr tk_ids;             /* int [n_ctx]: the repetition penalty's history (the tokens by position where
                                         the device draws, else the host's window of them) */
    bitnet_devptr pen_bits;           /* u32 [(n_vocab + 31) / 32]: the penalty's scratch, an id's bit once taken */
    bitnet_devptr pen_cnt;            /* i32 [n_vocab]: the frequency penalty's counts, zero between launches */
    bitnet_devptr bias_id, bias;      /* the logit bias on the device (BITNET_MAX_LOGIT_BIAS entries) */
    bitnet_logit_bias bias_host[BITNET_MAX_LOGIT_BIAS]; size_t n_bias; /* what bias_id / bias hold */
    bitnet_devptr tk_uni;             /* double [n_ctx + 2]: the uniforms of draws on the device (bitnet__gpu_draw_begin) */
    bitnet_devptr io;                 /* int [4]: the decode token and the position of a step (the head, or a draw,
                                         leaves the next ones there), a draw's uniform index and error flag, then: */
    bitnet_devptr erow;               /* fp16 [B][dim] at io + 256: the tokens' embedding rows (one upload with io) */
    bitnet_devptr iota;               /* int [B]: 0 .. B-1, the embed kernel's row indices */
    unsigned char *stage;             /* host: io and the rows, 256 + B * dim * 2 bytes */
    int32_t *pin;                     /* mapped host: two slots of io, which the head and the draw publish (or NULL) */
    bitnet_devptr pin_dev;            /* pin as the device sees it (0 without pin) */
    int32_t dev_pos;                  /* the position io[1] holds on the device, as far as the host knows (-1: not known) */
    int B, smax, head_blocks, have_next;
    int att_t, att_w, att_r, att_tile; /* the decode attention's forms: BITNET__GPU_ATT_T, att_w (positions over warps in
                                         ranges, at most), BITNET__GPU_ATT_R, _TILE */
    int att_w2;                       /* past att_w, positions over warps in ranges of two passes as clusters, at most (0: none) */
    unsigned att_smem2;               /* their second pass's K and V rows in shared memory, bytes a block */
    int gemv_items;                   /* decode GEMV: K chunks a warp takes, at least (sets the warps a block) */
    bitnet_gpu_graph *graph[2][BITNET__ATT_FORMS][BITNET__GPU_ATT_CLMAX + 1]; /* the decode step by its
                                         attention's form and ranges (form, form_n); [1]: ending with a draw (draw) */
    int draw;                         /* decode steps end with the device's draw of the next token, with: */
    bitnet_sampler_params dr;         /* the sampler the [1] graphs were captured with (their topk arguments) */
    int form, form_n;                 /* the step being launched: its attention's form (BITNET__ATT_*) and, for
                                         the clusters, their ranges (else 0) */
    int att_cl;                       /* sm_90: the ranges over warps as clusters, up to BITNET__GPU_ATT_CLMAX */
} bitnet__gsession;

/* ---- helpers ---------------------------------------------------------------------------------- */

/* A launch of gx x gy blocks of bx x by threads, as clusters of 1 x cly blocks where cly > 1 (sm_90) */
static bitnet_result bitnet__gpu_launch(bitnet_gpu *g, bitnet_gpu_kernel *k, unsigned gx, unsigned gy, unsigned bx,
                                        unsigned by, unsigned smem, unsigned cly, void **args) {
    unsigned grid[3], block[3];
    grid[0] = gx, grid[1] = gy, grid[2] = 1;
    block[0] = bx, block[1] = by, block[2] = 1;
    return bitnet__launch(g, k, grid, block, smem, args, k ? k->pdl : 0, cly ? cly : 1);
}

/* The decode attention's ranges over warps for len positions (bf_attn_warps' nsplit, the same rule): at
   most ny and smax, even, each non-empty, of at most rt positions */
static int bitnet__att_ranges(int len, int rt, int smax, int ny) {
    int n = BITNET__MIN((len + rt - 1) / rt, BITNET__MIN(smax, ny)), c = (len + n - 1) / n;
    return (len + c - 1) / c;
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
        bitnet__gpu_host_free(g->gpu, g->emb_host);
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
    g->head = bitnet__gtake(c, (size_t)in->n_vocab * (size_t)in->dim, g->head_q8 ? 1 : 2);
    g->head_scale = g->head_q8 ? bitnet__gtake(c, (size_t)in->n_vocab, 4) : 0;
    g->out_norm = bitnet__gtake(c, (size_t)in->dim, 4);
    for (l = 0; l < in->n_layers; l++) {
        bitnet__glayer *L = &g->layers[l];
        L->attn_norm = bitnet__gtake(c, (size_t)in->dim, 4);
        L->attn_sub_norm = in->sub_norms ? bitnet__gtake(c, (size_t)g->q_dim, 4) : 0; /* 0: none (the kernels skip the norm) */
        L->ffn_norm = bitnet__gtake(c, (size_t)in->dim, 4);
        L->ffn_sub_norm = in->sub_norms ? bitnet__gtake(c, (size_t)g->ffn_k, 4) : 0;
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

/* sm_90: programmatic dependent launch for the kernels that wait with griddepcontrol (decode: each one's
   launch and weight loads overlap the kernel before it; prefill: rope_kv and the attention, beside
   bitnet_gpu_quantize_act and the wgmma GEMM, which launch so on their own); BITNET_GPU_PDL=0: off.
   The embedding (a step's first kernel: nothing before it to overlap) and the repetition penalty (not
   measured under it) launch plainly; their griddepcontrol.wait then returns at once. */
static void bitnet__gmodel_pdl(bitnet__gmodel *g, int on) {
    g->gemv_store->pdl = g->gemv_res->pdl = g->gemv_glu->pdl = g->gemv_sub->pdl = g->attn->pdl = g->head_k->pdl = g->topk->pdl = on;
    if (g->attn_warps) g->attn_warps->pdl = g->attn_warps2->pdl = on;
    g->rope_kv->pdl = g->attn_prefill->pdl = on;
}

/* The forward module's kernels: from mod (a build with other options, for tools' A/B runs) or, with mod
   NULL, the built-in module; then their launch flags. */
static bitnet_result bitnet__gmodel_kernels(bitnet__gmodel *g, bitnet_gpu_module *mod, const bitnet_model_info *in, int pdl) {
    const int head_dim = g->hd;
#define BITNET__GK(NAME, DST) BITNET__TRY(mod ? bitnet_gpu_kernel_get(mod, NAME, DST) : bitnet_gpu_builtin_kernel(g->gpu, NAME, DST))
    BITNET__GK("bitnet_k_fwd_embed", &g->embed);
    BITNET__GK("bitnet_k_fwd_gemv_store", &g->gemv_store);
    BITNET__GK("bitnet_k_fwd_gemv_res", &g->gemv_res);
    BITNET__GK(in->ffn_act == BITNET_FFN_SILU ? "bitnet_k_fwd_gemv_glu_silu" : "bitnet_k_fwd_gemv_glu", &g->gemv_glu);
    BITNET__GK(!in->sub_norms ? "bitnet_k_fwd_gemv_res_raw" : g->hd != in->head_dim || g->ffn_k != in->ffn_dim ?
               "bitnet_k_fwd_gemv_res_kn" : "bitnet_k_fwd_gemv_res", &g->gemv_sub); /* (kn: >>pad) */
    BITNET__GK("bitnet_k_fwd_attn_decode", &g->attn);
    if (head_dim == 32 || head_dim == 64 || head_dim == 128) {
        char name[40];
        snprintf(name, sizeof name, "bitnet_k_fwd_attn_warps_d%d", head_dim / 32);
        BITNET__GK(name, &g->attn_warps);
        snprintf(name, sizeof name, "bitnet_k_fwd_attn_warps2_d%d", head_dim / 32);
        BITNET__GK(name, &g->attn_warps2);
    }
    BITNET__GK(g->head_q8 ? "bitnet_k_fwd_head_q8" : "bitnet_k_fwd_head", &g->head_k);
    BITNET__GK("bitnet_k_fwd_rope_kv", &g->rope_kv);
    BITNET__GK(head_dim > 128 ? "bitnet_k_fwd_attn_prefill_h256" : "bitnet_k_fwd_attn_prefill", &g->attn_prefill);
    BITNET__GK("bitnet_k_fwd_topk", &g->topk);
    BITNET__GK("bitnet_k_fwd_penalize", &g->penalize);
#undef BITNET__GK
    bitnet__gmodel_pdl(g, pdl);
    return BITNET_OK;
}

/* The prefill attention's dynamic shared memory: rows of q and of scores in double, two buffers of
   fp16 K and V tiles (hd 128: 74 KiB, three blocks an H100 SM; hd 256: 138 KiB, one) */
static unsigned bitnet__gatt_prefill_smem(unsigned hd, unsigned pk) {
    return (BITNET__GPU_ATT_ROWS * (hd + 4) + BITNET__GPU_ATT_ROWS * (pk + 4)) * 8 + 4 * pk * hd * 2;
}

/* >>pad: a head_dim that is not a multiple of 32 (1bitLLM-3B's 100) runs on the device in heads of
   hd rounded up to 32 (ghd). Dim i of a head's first half stays i, dim hd/2 + i goes to ghd/2 + i, so
   RoPE's pairs (i, i + hd/2) are the kernels' (i, i + ghd/2); the dims between are zero rows of wq, wk
   and wv (so q, k and v are zero there), zero columns of wo and zero sub-norm weights. The rope table's
   pairs past hd/2 are (1, 0), the scores keep 1 / sqrt(hd) (the kernels' isq) and the sub-norm its
   mean over the model's q_dim (their kn). The FFN's padding is the model's own (ffn_k). */
static size_t bitnet__gpad(int hd, int ghd, size_t d) {
    const size_t h = d / (size_t)hd, i = d % (size_t)hd, half = (size_t)hd / 2;
    return h * (size_t)ghd + (i < half ? i : (size_t)ghd / 2 + i - half);
}
/* An I2_S [n][k] matrix with its rows (rows = 1) or columns moved by bitnet__gpad into a new I2_S
   [np][kp] (host memory, the caller frees it) */
static bitnet_result bitnet__gpad_i2s(const void *src, size_t n, size_t k, int rows, int hd, int ghd, size_t np, size_t kp,
                                      void **out) {
    const size_t ob = bitnet_i2s_bytes(np, kp);
    int8_t *q = (int8_t *)bitnet__malloc(n * k), *p = (int8_t *)bitnet__calloc(np, kp);
    float scale = 0;
    size_t i, j;
    bitnet_result r = q && p ? bitnet_i2s_unpack(src, bitnet_i2s_bytes(n, k), n, k, q, &scale) : BITNET_ERR_OUT_OF_MEMORY;
    *out = NULL;
    for (i = 0; r == BITNET_OK && i < n; i++) {
        if (rows) memcpy(p + bitnet__gpad(hd, ghd, i) * kp, q + i * k, k);
        else for (j = 0; j < k; j++) p[i * kp + bitnet__gpad(hd, ghd, j)] = q[i * k + j];
    }
    if (r == BITNET_OK && !(*out = bitnet__malloc(ob))) r = BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) r = bitnet_i2s_pack(p, np, kp, scale, *out, ob);
    bitnet__free(q);
    bitnet__free(p);
    return r;
}

/* the embedding's fp16 rows into the device's mapped copy (bitnet__gpu_host_alloc's fill) */
static void bitnet__emb_host_fill(void *host, size_t bytes, const void *ctx) {
    const bitnet_model *m = (const bitnet_model *)ctx;
    if (m->tok_embd) bitnet__copy_parallel(host, m->tok_embd, bytes);
    else bitnet__emb_fill(m, (uint16_t *)host);
}
static void bitnet__progress(const bitnet_model_desc *d, float f);
/* (progress from 0.6 to 0.95: the kernels, then a layer at a time; the head was quantized before) */
static bitnet_result bitnet__gpu_model_init(bitnet_model *m, const bitnet_model_desc *d) {
    const int device = d ? d->device : 0;
    const bitnet_model_info *in = &m->info;
    int hd = (in->head_dim + 31) / 32 * 32, G = in->n_kv_heads > 0 ? in->n_heads / in->n_kv_heads : 0, l; /* >>pad */
    bitnet_gpu_device_info di;
    bitnet__gmodel *g;
    bitnet__gcarve c;
    if (hd > 256 || G < 1 || G > 8)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "CUDA forward: head_dim %d must be at most 256, and n_heads / n_kv_heads = %d "
                           "at most 8", (int)in->head_dim, (int)G);
    g = (bitnet__gmodel *)bitnet__calloc(1, sizeof *g);
    if (!g) return BITNET_ERR_OUT_OF_MEMORY;
    m->gpu = g;
    g->hd = hd, g->q_dim = in->n_heads * hd, g->kv_dim = in->n_kv_heads * hd, g->ffn_k = m->ffn_k;
    g->device = device;
    g->layers = (bitnet__glayer *)bitnet__calloc((size_t)in->n_layers, sizeof *g->layers);
    if (!g->layers) return BITNET_ERR_OUT_OF_MEMORY;
    BITNET__TRY(bitnet_gpu_device_info_get(device, &di));
    g->sm_count = di.sm_count > 0 ? di.sm_count : 1;
    g->cc = di.cc_major * 10 + di.cc_minor;
    g->smem_optin = BITNET__MAX(di.smem_per_block_optin, di.smem_per_block);
    if (bitnet__gatt_prefill_smem((unsigned)hd, BITNET__GPU_ATT_PK) > (unsigned)g->smem_optin)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "CUDA forward: head_dim %d: the prefill attention needs %u bytes of shared "
                           "memory a block, this GPU gives %d", hd, bitnet__gatt_prefill_smem((unsigned)hd, BITNET__GPU_ATT_PK),
                           g->smem_optin);
    BITNET__TRY(bitnet_gpu_open(device, &g->gpu));
    g->head_q8 = m->head_q8 != NULL; /* quantized on the host by >>model, as for the CPU */
    BITNET__TRY(bitnet__gmodel_kernels(g, NULL, in, g->gpu->pdl));
    bitnet__progress(d, 0.65f);
    g->att_pk = BITNET__GPU_ATT_PK;
    memset(&c, 0, sizeof c);
    bitnet__gmodel_layout(g, m, &c);
    if (c.overflow) return bitnet__err(BITNET_ERR_OVERFLOW, "CUDA forward: the model's device layout overflows");
    g->bytes = c.off;
    BITNET__TRY(bitnet_gpu_alloc(g->gpu, g->bytes, &g->mem));
    c.base = g->mem, c.off = 0;
    bitnet__gmodel_layout(g, m, &c);
    if (g->head_q8) {
        BITNET__TRY(bitnet_gpu_upload(g->gpu, g->head, m->head_q8, (size_t)in->n_vocab * (size_t)in->dim));
        BITNET__TRY(bitnet_gpu_upload(g->gpu, g->head_scale, m->head_scale, (size_t)in->n_vocab * 4));
    } else {
        BITNET__TRY(bitnet_gpu_upload(g->gpu, g->head, m->head_f16, (size_t)in->n_vocab * (size_t)in->dim * 2));
    }
    BITNET__TRY(bitnet_gpu_upload(g->gpu, g->out_norm, m->output_norm, (size_t)in->dim * 4));
    for (l = 0; l < in->n_layers; l++) {
        const bitnet__layer *W = &m->layers[l];
        bitnet__glayer *L = &g->layers[l];
        const void *w[3];
        void *pad[4] = {NULL, NULL, NULL, NULL};
        int n[3], i;
        bitnet_result r = BITNET_OK;
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->attn_norm, W->attn_norm, (size_t)in->dim * 4));
        BITNET__TRY(bitnet_gpu_upload(g->gpu, L->ffn_norm, W->ffn_norm, (size_t)in->dim * 4));
        if (in->sub_norms) BITNET__TRY(bitnet_gpu_upload(g->gpu, L->ffn_sub_norm, W->ffn_sub_norm, (size_t)in->ffn_dim * 4));
        if (in->sub_norms && g->ffn_k > in->ffn_dim) /* zeros past a padded FFN's */
            BITNET__TRY(bitnet_gpu_memset(g->gpu, L->ffn_sub_norm + (bitnet_devptr)in->ffn_dim * 4, 0,
                                          (size_t)(g->ffn_k - in->ffn_dim) * 4));
        w[0] = W->wq, w[1] = W->wk, w[2] = W->wv, n[0] = g->q_dim, n[1] = n[2] = g->kv_dim;
        if (g->hd != in->head_dim) { /* >>pad: q, k, v rows and o columns in the device's heads */
            for (i = 0; i < 3 && r == BITNET_OK; i++)
                r = bitnet__gpad_i2s(w[i], (size_t)(i ? m->kv_dim : m->q_dim), (size_t)in->dim, 1, in->head_dim, g->hd, (size_t)n[i],
                                     (size_t)in->dim, &pad[i]);
            if (r == BITNET_OK)
                r = bitnet__gpad_i2s(W->wo, (size_t)in->dim, (size_t)m->q_dim, 0, in->head_dim, g->hd, (size_t)in->dim,
                                     (size_t)g->q_dim, &pad[3]);
            if (r == BITNET_OK && in->sub_norms) { /* the sub-norm's weights moved alike */
                float *sn = (float *)bitnet__calloc((size_t)g->q_dim, 4);
                if (!sn) r = BITNET_ERR_OUT_OF_MEMORY;
                for (i = 0; sn && i < m->q_dim; i++) sn[bitnet__gpad(in->head_dim, g->hd, (size_t)i)] = W->attn_sub_norm[i];
                if (sn) r = bitnet_gpu_upload(g->gpu, L->attn_sub_norm, sn, (size_t)g->q_dim * 4);
                bitnet__free(sn);
            }
            w[0] = pad[0], w[1] = pad[1], w[2] = pad[2];
        } else if (in->sub_norms) {
            r = bitnet_gpu_upload(g->gpu, L->attn_sub_norm, W->attn_sub_norm, (size_t)m->q_dim * 4);
        }
        if (r == BITNET_OK) r = bitnet__gpu_ternary(g, w, n, 3, in->dim, 0, &L->qkv);
        w[0] = pad[3] ? pad[3] : W->wo, n[0] = in->dim;
        if (r == BITNET_OK) r = bitnet__gpu_ternary(g, w, n, 1, g->q_dim, 0, &L->o);
        for (i = 0; i < 4; i++) bitnet__free(pad[i]);
        BITNET__TRY(r);
        w[0] = W->w_gate, w[1] = W->w_up, n[0] = n[1] = g->ffn_k; /* (the model's FFN matrices are ffn_k wide) */
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 2, in->dim, in->ffn_act, &L->gu));
        w[0] = W->w_down, n[0] = in->dim;
        BITNET__TRY(bitnet__gpu_ternary(g, w, n, 1, g->ffn_k, 0, &L->down));
        bitnet__progress(d, 0.65f + 0.3f * (float)(l + 1) / (float)in->n_layers);
    }
    { /* the embedding in mapped host memory: the decode step reads its row from there, so a step
         needs nothing from the host and greedy decoding runs a step ahead (bitnet__gpu_next_token);
         without it (no memory, an old driver, BITNET_GPU_HOST_EMB=0) each step uploads its row.
         (Registering the model's own table in place instead of this copy stalled decode on 2B-4T
         in session 6: BENCHMARKS.md.) */
        size_t bytes = (size_t)in->n_vocab * (size_t)in->dim * 2;
        if (bitnet__env_off("BITNET_GPU_HOST_EMB"))
            bitnet__log(BITNET_LOG_INFO, "CUDA forward: BITNET_GPU_HOST_EMB=0: each decode step uploads its embedding row");
        else if (bitnet__gpu_host_alloc(g->gpu, bytes, bitnet__emb_host_fill, m, &g->emb_host, &g->emb_dev) != BITNET_OK)
            bitnet__log(BITNET_LOG_INFO, "CUDA forward: %s; each decode step uploads its embedding row", bitnet_last_error());
    }
    BITNET__TRY(bitnet_gpu_sync(g->gpu));
    return bitnet_gpu_pool_trim(g->gpu); /* the upload's staging buffers */
}

/* ---- session: KV cache and buffers --------------------------------------------------------------- */

/* Frees the session's decode graphs that end with a draw (draw 1), without one (0), or all (-1) */
static void bitnet__gpu_graphs_free(bitnet__gsession *q, int draw) {
    int d, f, n;
    for (d = 0; d < 2; d++)
        for (f = 0; f < BITNET__ATT_FORMS; f++)
            for (n = 0; n <= BITNET__GPU_ATT_CLMAX; n++)
                if (draw < 0 || draw == d) bitnet_gpu_graph_free(q->graph[d][f][n]), q->graph[d][f][n] = NULL;
}

static void bitnet__gpu_session_free(bitnet_session *s) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    if (!q) return;
    bitnet__free(q->stage);
    bitnet__gpu_graphs_free(q, -1);
    if (q->gpu) {
        bitnet__gpu_host_free(q->gpu, q->pin);
        if (q->mem) bitnet_gpu_free(q->gpu, q->mem);
        bitnet_gpu_close(q->gpu);
    }
    bitnet__free(q);
    s->gpu = NULL;
}

/* The prefill attention's cut query blocks in two pieces, at most (half of a batch's; S x pieces stays under
   twice this: bitnet__gpu_attention_m) */
static size_t bitnet__gatt_cuts(int B, const bitnet_model_info *in) {
    size_t qt = (size_t)BITNET__GPU_ATT_ROWS / (size_t)(in->n_heads / in->n_kv_heads);
    return ((size_t)B + qt - 1) / qt / 2 + 1;
}

/* The attention's partials (doubles): the larger of the decode ranges' and the prefill pieces' */
static size_t bitnet__gatt_part(const bitnet__gsession *q, const bitnet_model_info *in, int hd) {
    size_t dec = (size_t)in->n_heads * (size_t)q->smax * ((size_t)hd + 2);
    size_t pre = bitnet__gatt_cuts(q->B, in) * (size_t)in->n_kv_heads * 2 * BITNET__GPU_ATT_ROWS * ((size_t)hd + 2);
    return BITNET__MAX(dec, pre);
}
static size_t bitnet__gctr_count(const bitnet__gsession *q, const bitnet_model_info *in) {
    return (size_t)in->n_heads + 2 + bitnet__gatt_cuts(q->B, in) * (size_t)in->n_kv_heads;
}

static void bitnet__gsession_layout(bitnet__gsession *q, const bitnet_session *s, bitnet__gcarve *c) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    const bitnet_model_info *in = &m->info;
    size_t B = (size_t)q->B, kv = (size_t)in->n_layers * (size_t)g->kv_dim;
    size_t wide = BITNET__MAX(BITNET__MAX((size_t)in->dim, (size_t)g->q_dim), (size_t)g->ffn_k);
    q->kc = bitnet__gtake(c, kv * (size_t)s->n_ctx, 2);
    q->vc = bitnet__gtake(c, kv * (size_t)s->n_ctx, 2);
    q->rope = bitnet__gtake(c, (size_t)s->n_ctx * (size_t)g->hd, 4);
    q->x = bitnet__gtake(c, B * (size_t)in->dim, 4);
    q->qkv = bitnet__gtake(c, B * (size_t)(g->q_dim + 2 * g->kv_dim), 4);
    q->att = bitnet__gtake(c, B * (size_t)g->q_dim, 4);
    q->h = bitnet__gtake(c, B * (size_t)g->ffn_k, 4);
    q->a_dim.q = bitnet__gtake(c, B * wide, 1);
    q->a_dim.scale = bitnet__gtake(c, B, 4);
    q->a_dim.sum = bitnet__gtake(c, B, 4);
    q->a_dim.planes = bitnet__gtake(c, 2 * wide, 4);
    q->a_dim.cap = B, q->a_dim.k = (size_t)in->dim;
    q->a_q = q->a_dim, q->a_q.k = (size_t)g->q_dim;
    q->a_ff = q->a_dim, q->a_ff.k = (size_t)g->ffn_k;
    q->logits = bitnet__gtake(c, (size_t)in->n_vocab, 4);
    q->att_part = bitnet__gtake(c, bitnet__gatt_part(q, in, g->hd), 8); /* double */
    q->hv = bitnet__gtake(c, (size_t)q->head_blocks * 2, 4); /* room for twice the blocks (tuning) */
    q->hi = bitnet__gtake(c, (size_t)q->head_blocks * 2, 4);
    q->iota = bitnet__gtake(c, B, 4);
    q->ctr = bitnet__gtake(c, bitnet__gctr_count(q, in), 4);
    q->tk_part = bitnet__gtake(c, BITNET__GPU_TOPK_BLOCKS * BITNET__GPU_TOPK_MAX, 8);
    q->tk_res = bitnet__gtake(c, 1 + 2 * BITNET__GPU_TOPK_MAX, 4);
    q->tk_ids = bitnet__gtake(c, (size_t)s->n_ctx, 4);
    q->pen_bits = bitnet__gtake(c, ((size_t)in->n_vocab + 31) / 32, 4);
    q->pen_cnt = bitnet__gtake(c, (size_t)in->n_vocab, 4);
    q->bias_id = bitnet__gtake(c, BITNET_MAX_LOGIT_BIAS, 4);
    q->bias = bitnet__gtake(c, BITNET_MAX_LOGIT_BIAS, 4);
    q->tk_uni = bitnet__gtake(c, (size_t)s->n_ctx + 2, 8);
    q->io = bitnet__gtake(c, 5, 4);   /* 256 bytes: token, position, uniform index, error flag; a prefill's last row's position */
    q->erow = bitnet__gtake(c, B * (size_t)in->dim, 2); /* right after io */
}

/* The decode attention's dynamic shared memory for head_dim hd, nt threads and tiles of T positions:
   the kernel's layout (scores and their exp, the position lanes' accumulators, q, K and V). */
static unsigned bitnet__gatt_smem(unsigned hd, unsigned nt, unsigned T) {
    return 16 * T + 8 * hd * (nt / hd) + 4 * hd + 4 * hd * (T + 1);
}

/* The most ranges (up to nmax) whose clusters of 512-thread attention blocks (smem bytes of dynamic shared
   memory each) a wave holds nh of (the driver's count, on an idle device) */
static int bitnet__gpu_att_clusters(const bitnet__gmodel *g, bitnet_gpu_kernel *k, int nh, int nmax, unsigned smem) {
    int n, fit = nh, ok;
    if (!bitnet__cuda.cu.cuOccupancyMaxActiveClusters) return nmax;
    if (bitnet__ctx_push(g->gpu->dev->ctx) != BITNET_OK) return 0; /* (no cluster form then) */
    ok = bitnet__smem_optin(g->gpu->dev, k, smem) == 0; /* (else the launch could not have it either) */
    for (n = 2; ok && n <= nmax; n++) {
        bitnet__cu_launch_attr at;
        bitnet__cu_launch_config cfg;
        memset(&at, 0, sizeof at);
        memset(&cfg, 0, sizeof cfg);
        bitnet__cluster_attr(&at, (unsigned)n);
        cfg.grid[0] = (unsigned)nh, cfg.grid[1] = (unsigned)n, cfg.grid[2] = 1;
        cfg.block[0] = 512, cfg.block[1] = cfg.block[2] = 1;
        cfg.smem = smem, cfg.attrs = &at, cfg.n_attrs = 1;
        if (bitnet__cuda.cu.cuOccupancyMaxActiveClusters(&fit, k->fn, &cfg) != 0) fit = nh; /* (not known: as asked) */
        if (fit < nh) break;
    }
    bitnet__ctx_pop();
    return !ok ? 0 : n <= nmax ? n - 1 : nmax;
}

static bitnet_result bitnet__gpu_session_init(bitnet_session *s) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q;
    bitnet__gcarve c;
    int split, i;
    if (!g) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA session: the model has no GPU weights");
    q = (bitnet__gsession *)bitnet__calloc(1, sizeof *q);
    if (!q) return BITNET_ERR_OUT_OF_MEMORY;
    s->gpu = q;
    q->B = g->cc >= 80 ? s->n_batch : 1; /* below sm_80 prompts go through the decode step */
    /* the environment here is for tuning and tests only: GEMV_ITEMS; ATT_T (several ranges early),
       ATT_R and ATT_TILE (ranges in tiles); ATT_W (the long form early) and ATT_W2 below */
    q->gemv_items = bitnet__env_int("BITNET_GPU_GEMV_ITEMS", 1, 64, 5); /* H100: 5 beat 4 by 2.3% after a 64-token
                                                                        prompt, the same at 512 (session 27) */
    q->att_t = g->attn_warps ? bitnet__env_int("BITNET_GPU_ATT_T", 16, BITNET__GPU_ATT_T, BITNET__GPU_ATT_T) / 16 * 16
                             : 0; /* (other head sizes: the long form throughout) */
    q->att_r = bitnet__env_int("BITNET_GPU_ATT_R", 8, 256, BITNET__GPU_ATT_R);
    q->att_tile = bitnet__env_int("BITNET_GPU_ATT_TILE", 16, 128, BITNET__GPU_ATT_TILE) / 16 * 16;
    split = (s->n_ctx + q->att_r - 1) / q->att_r;
    q->smax = BITNET__MIN(split, BITNET__GPU_ATT_SMAX);
    /* ranges over warps (up to ATT_T positions each) while one wave of blocks, one an SM, holds them; then the long form */
    q->att_w = q->att_t ? BITNET__GPU_ATT_T * BITNET__MIN(q->smax, BITNET__MAX(1, g->sm_count / s->m->info.n_heads)) : 0;
    if (q->att_t)
        q->att_w = bitnet__env_int("BITNET_GPU_ATT_W", 0, BITNET__GPU_ATT_T * q->smax, q->att_w) / BITNET__GPU_ATT_T * BITNET__GPU_ATT_T;
    /* sm_90: a head's ranges over warps as one cluster (combined in distributed shared memory, not by a last block) */
    q->att_cl = g->cc >= 90 && g->attn_warps && bitnet__cuda.cu.cuLaunchKernelEx && !bitnet__getenv("BITNET_GPU_NO_CLUSTER");
    if (q->att_cl) {
        int n = bitnet__gpu_att_clusters(g, g->attn_warps, s->m->info.n_heads,
                                         BITNET__MIN(q->att_w / BITNET__GPU_ATT_T, BITNET__GPU_ATT_CLMAX), 0);
        if (n >= 2) q->att_w = n * BITNET__GPU_ATT_T;
        else q->att_cl = 0;
    }
    /* then ranges of two passes, the second's K and V rows in shared memory, while a wave holds their clusters:
       fewer, longer ranges where one pass would need more blocks than a wave holds (BENCHMARKS.md, session 28) */
    q->att_smem2 = 2u * BITNET__GPU_ATT_T * (unsigned)g->hd * 2u;
    if (q->att_cl && q->att_smem2 <= (unsigned)g->gpu->dev->smem_optin) {
        const int ew = bitnet__env_int("BITNET_GPU_ATT_W2", 0, 2 * BITNET__GPU_ATT_T * BITNET__MIN(q->smax, BITNET__GPU_ATT_CLMAX), -1);
        int n = bitnet__gpu_att_clusters(g, g->attn_warps2, s->m->info.n_heads, BITNET__MIN(q->smax, BITNET__GPU_ATT_CLMAX),
                                         q->att_smem2);
        q->att_w2 = n >= 2 && 2 * BITNET__GPU_ATT_T * n > q->att_w ? 2 * BITNET__GPU_ATT_T * n : 0;
        if (ew >= 0) { /* 0: none */
            const int w2 = ew / (2 * BITNET__GPU_ATT_T) * (2 * BITNET__GPU_ATT_T); /* (whole ranges: none longer) */
            q->att_w2 = w2 > q->att_w ? w2 : 0;
        }
    }
    q->head_blocks = 2 * g->sm_count; /* persistent: two 256-thread blocks per SM, one wave */
    BITNET__TRY(bitnet_gpu_open(g->device, &q->gpu));
    memset(&c, 0, sizeof c);
    bitnet__gsession_layout(q, s, &c);
    if (c.overflow) return bitnet__err(BITNET_ERR_OVERFLOW, "CUDA session: %d positions overflow the device layout", (int)s->n_ctx);
    q->bytes = c.off;
    BITNET__TRY(bitnet_gpu_alloc(q->gpu, q->bytes, &q->mem));
    c.base = q->mem, c.off = 0;
    bitnet__gsession_layout(q, s, &c);
    if (q->erow != q->io + 256) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA session: the embedding rows do not follow io");
    /* poison: a read of anything no kernel wrote shows up as NaN (0xffff is an fp16 NaN too) */
    BITNET__TRY(bitnet_gpu_memset(q->gpu, q->mem, 0xff, q->bytes));
    BITNET__TRY(bitnet_gpu_memset(q->gpu, q->ctr, 0, bitnet__gctr_count(q, &s->m->info) * 4));
    BITNET__TRY(bitnet_gpu_memset(q->gpu, q->pen_cnt, 0, (size_t)s->m->info.n_vocab * 4)); /* (its kernel keeps it zero) */
    q->stage = (unsigned char *)bitnet__malloc(256 + (size_t)q->B * (size_t)s->m->info.dim * 2);
    if (!q->stage) return BITNET_ERR_OUT_OF_MEMORY;
    for (i = 0; i < q->B; i++) ((int32_t *)q->stage)[i] = i; /* B * 4 bytes fit in the stage */
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->iota, q->stage, (size_t)q->B * 4));
    BITNET__TRY(bitnet_gpu_sync(q->gpu)); /* the stage is reused right away */
    q->dev_pos = -1;
    if (g->emb_dev && bitnet__gpu_host_alloc(q->gpu, 64, NULL, NULL, (void **)&q->pin, &q->pin_dev) != BITNET_OK) {
        bitnet__log(BITNET_LOG_INFO, "CUDA forward: %s; greedy decoding downloads each token before the next step", bitnet_last_error());
        q->pin = NULL, q->pin_dev = 0;
    }
    if (g->hd == s->m->info.head_dim) return bitnet_gpu_upload(q->gpu, q->rope, s->rope, (size_t)s->n_ctx * (size_t)g->hd * 4);
    { /* >>pad: pair i of the device's heads is the model's up to hd/2, then (1, 0) on zeros */
        const int hd = s->m->info.head_dim;
        size_t n = (size_t)s->n_ctx * (size_t)g->hd, p, i;
        float *t = (float *)bitnet__malloc(n * 4);
        bitnet_result r;
        if (!t) return BITNET_ERR_OUT_OF_MEMORY;
        for (p = 0; p < (size_t)s->n_ctx; p++)
            for (i = 0; i < (size_t)g->hd / 2; i++) {
                const int own = i < (size_t)hd / 2;
                t[p * (size_t)g->hd + 2 * i] = own ? s->rope[p * (size_t)hd + 2 * i] : 1.0f;
                t[p * (size_t)g->hd + 2 * i + 1] = own ? s->rope[p * (size_t)hd + 2 * i + 1] : 0.0f;
            }
        r = bitnet_gpu_upload(q->gpu, q->rope, t, n * 4);
        bitnet__free(t);
        return r;
    }
}

/* io = {first token, position} and, with rows, the m tokens' fp16 embedding rows from the host
   table, in one upload (the device keeps no fp16 embedding: with the int8 head that saves
   n_vocab * dim * 2 bytes; a decode step reads its row from the mapped table where there is one). */
static bitnet_result bitnet__gpu_put_tokens(bitnet_session *s, const int32_t *tokens, int m, int32_t pos, int rows) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    size_t row = (size_t)s->m->info.dim * 2;
    int t;
    ((int32_t *)q->stage)[0] = tokens[0], ((int32_t *)q->stage)[1] = pos, ((int32_t *)q->stage)[4] = pos + m - 1;
    for (t = 0; rows && t < m; t++) bitnet__emb_row(s->m, tokens[t], NULL, (uint16_t *)(q->stage + 256 + (size_t)t * row));
    q->dev_pos = pos;
    return bitnet_gpu_upload(q->gpu, q->io, q->stage, rows ? 256 + (size_t)m * row : 8);
}

/* ---- the steps ------------------------------------------------------------------------------------ */

/* 1. embed: x[t] = row idx[t] of table as fp32, for m tokens (the uploaded rows erow with idx q->iota,
   or in a decode step the mapped table with idx io) */
static bitnet_result bitnet__gpu_embed(bitnet_session *s, bitnet_devptr table, bitnet_devptr idx, int m) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int dim = s->m->info.dim;
    void *args[4];
    args[0] = &table, args[1] = &dim, args[2] = &idx, args[3] = &q->x;
    return bitnet__gpu_launch(q->gpu, g->embed, (unsigned)m, 1, 256, 1, 0, 1, args);
}

/* 2+3. norm_quant + linear for one token: out = W . int8(rmsnorm(in) * norm_w) with the matrix's
   epilogue (kernel: store, res (out += y), glu (act(gate) * up)); the norm's mean over kn of the
   matrix's K inputs (the model's width of a padded row: >>pad) */
static bitnet_result bitnet__gpu_linear(bitnet_session *s, bitnet_gpu_kernel *k, const bitnet_gpu_ternary *w,
                                        bitnet_devptr in, bitnet_devptr norm_w, int kn, bitnet_devptr out) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    float eps = s->m->info.norm_eps;
    bitnet__k_segs segs = bitnet__k_segs_of(w);
    int n_out = (int)w->n, nc = (int)(w->k / 64), items = w->glu ? 2 * nc : nc;
    unsigned groups = (unsigned)((n_out + 31) / 32);
    /* warps share a block's K chunks, BF_GEMV_U = 6 loads in flight per lane (98 registers a thread,
       allocated as 104: one block of 10 or more warps an SM; capped at 96 so two 10-warp blocks share
       an SM, the step was 1-3% slower: BENCHMARKS.md session 19); over one wave of blocks a block
       gets at most 8 warps */
    int warps = BITNET__MIN((int)groups > g->sm_count ? 8 : 16, BITNET__MAX(1, (items + q->gemv_items - 1) / q->gemv_items));
    unsigned smem = (unsigned)w->k + (unsigned)(warps * (w->glu ? 2 : 1) * 32 * 4);
    void *args[9];
    args[0] = (void *)&w->data, args[1] = &n_out, args[2] = &nc, args[3] = &segs, args[4] = &in, args[5] = &norm_w,
    args[6] = &eps, args[7] = &out, args[8] = &kn;
    return bitnet__gpu_launch(q->gpu, k, groups, 1, 32, (unsigned)warps, smem, 1, args);
}

/* 4-6. rope + kv_store + attention for one token (layer l): q and k rotated at the position in
   io[1], k and v appended to the cache, att = softmax(q K^T / sqrt(hd)) V over the positions so far. */
static bitnet_result bitnet__gpu_attention(bitnet_session *s, int l) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int hd = g->hd, nh = m->info.n_heads, nkv = m->info.n_kv_heads;
    double isq = 1.0 / sqrt((double)m->info.head_dim); /* (the model's, of a padded head too: >>pad) */
    size_t layer = (size_t)l * (size_t)g->kv_dim * (size_t)s->n_ctx * 2;
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + 4;
    bitnet_devptr part_ml = q->att_part + 8 * (bitnet_devptr)nh * (bitnet_devptr)q->smax * (bitnet_devptr)hd;
    const unsigned nt = hd > 128 ? (unsigned)hd : 128; /* (a thread a dim, at least) */
    unsigned smem = bitnet__gatt_smem((unsigned)hd, nt, (unsigned)q->att_tile);
    void *args[17];
    args[0] = &q->qkv, args[1] = &q->rope, args[2] = &pos, args[3] = &kc, args[4] = &vc, args[5] = &s->n_ctx, args[6] = &nh,
    args[7] = &nkv;
    if (q->form != BITNET__ATT_LONG) { /* over warps: blocks of 16 warps, ny ranges a head */
        const int two = q->form == BITNET__ATT_CL2, cl = two || q->form == BITNET__ATT_CL;
        const unsigned ny = cl ? (unsigned)q->form_n : q->form == BITNET__ATT_RANGES ? (unsigned)(q->att_w / BITNET__GPU_ATT_T) : 1u;
        args[8] = &q->smax, args[9] = &q->att_part, args[10] = &part_ml, args[11] = &q->ctr, args[12] = &q->att, args[13] = &isq;
        return bitnet__gpu_launch(q->gpu, two ? g->attn_warps2 : g->attn_warps, (unsigned)nh, ny, 512, 1, two ? q->att_smem2 : 0,
                                  cl ? ny : 1, args);
    }
    /* the long form: ranges of about R positions, a block of 128 threads each (hd of them past 128) */
    args[8] = &hd, args[9] = &q->smax, args[10] = &q->att_tile, args[11] = &q->att_r, args[12] = &q->att_part,
    args[13] = &part_ml, args[14] = &q->ctr, args[15] = &q->att, args[16] = &isq;
    return bitnet__gpu_launch(q->gpu, g->attn, (unsigned)nh, (unsigned)q->smax, nt, 1, smem, 1, args);
}

/* 8. head: logits = head . rmsnorm(x_row) * output_norm, and its argmax into io[0] (adv: a decode
   step's, which also moves io[1] on to the next position) */
static bitnet_result bitnet__gpu_head(bitnet_session *s, bitnet_devptr x_row, int adv) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int nv = m->info.n_vocab, dim = m->info.dim;
    float eps = m->info.norm_eps;
    bitnet_devptr ctr = q->ctr + 4 * (bitnet_devptr)m->info.n_heads;
    bitnet_devptr pub = q->draw ? 0 : q->pin_dev; /* (a draw after the head publishes the token) */
    void *args[14], **a = args;
    if (g->head_q8) *a++ = (void *)&g->head, *a++ = (void *)&g->head_scale;
    else *a++ = (void *)&g->head;
    a[0] = &nv, a[1] = &dim, a[2] = &x_row, a[3] = (void *)&g->out_norm, a[4] = &eps,
    a[5] = &q->logits, a[6] = &q->hv, a[7] = &q->hi, a[8] = &ctr, a[9] = &q->io, a[10] = &adv, a[11] = &pub;
    return bitnet__gpu_launch(q->gpu, g->head_k, (unsigned)q->head_blocks, 1, 256, 1, (unsigned)dim * (g->head_q8 ? 1 : 4), 1, args);
}

/* The topk kernel on the logits row: the k best by logit / temp into tk_res ({count, (value, id)
   pairs}) for sampler d (greedy: the one best; min-p without a top-k the device keeps: the most it
   keeps); a block per 4096 logits (128 keys a warp), at most 32, more keys a warp past that. With
   q->draw, the kernel then draws the next token into io[0] and the history tk_ids (bf_draw:
   bitnet_sample's last steps). */
static bitnet_result bitnet__gpu_topk(bitnet_session *s, const bitnet_sampler_params *d) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int n = s->m->info.n_vocab, greedy = bitnet__sampler_greedy(d), nuni = s->n_ctx + 2;
    int k = greedy ? 1 : d->top_k == 0 || d->top_k > BITNET__GPU_TOPK_MAX ? BITNET__GPU_TOPK_MAX : d->top_k;
    float temp = greedy ? 1.0f : d->temperature, min_p = d->min_p, lmp = min_p > 0 ? logf(min_p) : 0.0f, top_p = d->top_p;
    bitnet_devptr ctr = q->ctr + 4 * ((bitnet_devptr)s->m->info.n_heads + 1), uni = q->draw ? q->tk_uni : 0;
    void *args[16];
    if (!(temp > 0)) return bitnet__err(BITNET_ERR_INVALID_ARG, "CUDA sampling: temperature %g (> 0)", (double)temp);
    args[0] = &q->logits, args[1] = &n, args[2] = &temp, args[3] = &k, args[4] = &q->tk_part, args[5] = &ctr, args[6] = &q->tk_res,
    args[7] = &uni, args[8] = &nuni, args[9] = &q->io, args[10] = &min_p, args[11] = &lmp, args[12] = &top_p,
    args[13] = &q->tk_ids, args[14] = &s->n_ctx, args[15] = &q->pin_dev;
    return bitnet__gpu_launch(q->gpu, g->topk, (unsigned)BITNET__MIN(BITNET__GPU_TOPK_BLOCKS, (n + 4095) / 4096), 1, 1024, 1, 0, 1, args);
}

/* The logit bias, where the device does not hold d's already (launches read it, graphs too). */
static bitnet_result bitnet__gpu_bias(bitnet__gsession *q, const bitnet_sampler_params *d) {
    int32_t ids[BITNET_MAX_LOGIT_BIAS];
    float v[BITNET_MAX_LOGIT_BIAS];
    size_t i, n = d->n_logit_bias;
    if (!n || !d->logit_bias || (n == q->n_bias && memcmp(q->bias_host, d->logit_bias, n * sizeof *d->logit_bias) == 0))
        return BITNET_OK; /* (NULL: the draw's own copy, q->dr, whose values the device holds) */
    for (i = 0; i < n; i++) ids[i] = d->logit_bias[i].token, v[i] = d->logit_bias[i].bias;
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->bias_id, ids, n * 4));
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->bias, v, n * 4));
    memcpy(q->bias_host, d->logit_bias, n * sizeof *d->logit_bias), q->n_bias = n;
    return BITNET_OK;
}

/* Step 1 of bitnet_sample on the logits row (before the topk kernel, where d has any): over the
   device's history tk_ids up to io[1] (q->draw), or over the window of history, uploaded there. */
static bitnet_result bitnet__gpu_penalize(bitnet_session *s, const bitnet_sampler_params *d, const int32_t *history,
                                          size_t n_history) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    size_t from = bitnet__penalty_from(n_history, d->repeat_last_n);
    int n = (int)(n_history - from), win = (int)BITNET__MIN(bitnet__penalty_win(d->repeat_last_n), (size_t)s->n_ctx);
    int nv = s->m->info.n_vocab, n_bias = (int)d->n_logit_bias;
    float pen = bitnet__sampler_penalty(d) ? d->repeat_penalty : 1.0f, freq = d->frequency_penalty, pres = d->presence_penalty;
    bitnet_devptr io = q->draw ? q->io : 0;
    void *args[14];
    if (!q->draw && n) BITNET__TRY(bitnet_gpu_upload(q->gpu, q->tk_ids, history + from, (size_t)n * 4)); /* (n <= n_ctx) */
    BITNET__TRY(bitnet__gpu_bias(q, d));
    args[0] = &q->logits, args[1] = &q->tk_ids, args[2] = &n, args[3] = &io, args[4] = &win, args[5] = &nv, args[6] = &pen;
    args[7] = &q->pen_bits, args[8] = &freq, args[9] = &pres, args[10] = &q->pen_cnt, args[11] = &q->bias_id, args[12] = &q->bias;
    args[13] = &n_bias;
    return bitnet__gpu_launch(q->gpu, g->penalize, 1, 1, 256, 1, 0, 1, args);
}

/* One token's forward, as launched into the decode graph (token and position in io). No kernel pulls
   another's weights into L2: on the H100 every way measured (the attention pulling the next
   matrices, each kernel the next one's, a graph branch beside the chain) was no faster, or slower
   (BENCHMARKS.md); a GEMV asks the L2 only for its own weights, before its wait. */
static bitnet_result bitnet__gpu_step(bitnet_session *s) {
    const bitnet_model *m = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int l, nl = m->info.n_layers, dim = m->info.dim, qd = m->q_dim, ff = m->info.ffn_dim; /* (norms' counts: >>pad) */
    /* x [dim]: the row of the token in io from the mapped table, or the row put_tokens uploaded */
    BITNET__TRY(g->emb_dev ? bitnet__gpu_embed(s, g->emb_dev, q->io, 1) : bitnet__gpu_embed(s, q->erow, q->iota, 1));
    for (l = 0; l < nl; l++) {
        const bitnet__glayer *L = &g->layers[l];
        /* attention block */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_store, &L->qkv, q->x, L->attn_norm, dim, q->qkv));         /* qkv */
        BITNET__TRY(bitnet__gpu_attention(s, l));                                                          /* att [q_dim] */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_sub, &L->o, q->att, L->attn_sub_norm, qd, q->x));          /* x += o */
        /* feed-forward block */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_glu, &L->gu, q->x, L->ffn_norm, dim, q->h));               /* h */
        BITNET__TRY(bitnet__gpu_linear(s, g->gemv_sub, &L->down, q->h, L->ffn_sub_norm, ff, q->x));          /* x += down */
    }
    return bitnet__gpu_head(s, q->x, 1);                                             /* logits; next token and position */
}

/* The decode attention's form for a step at pos (q->form, q->form_n; bitnet__gpu_attention reads them) */
static void bitnet__gpu_att_form(bitnet__gsession *q, int32_t pos) {
    q->form = pos + 1 <= q->att_t ? BITNET__ATT_ONE : pos + 1 <= q->att_w ? BITNET__ATT_RANGES : BITNET__ATT_LONG;
    q->form_n = 0;
    if (q->form == BITNET__ATT_RANGES && q->att_cl) {
        int n = bitnet__att_ranges(pos + 1, BITNET__GPU_ATT_T, q->smax, q->att_w / BITNET__GPU_ATT_T);
        if (n > 1 && n <= BITNET__GPU_ATT_CLMAX) q->form = BITNET__ATT_CL, q->form_n = n; /* (more: a tool's att_w; the last block
                                                                                             combines them) */
    }
    if (q->form == BITNET__ATT_LONG && pos + 1 <= q->att_w2)
        q->form = BITNET__ATT_CL2,
        q->form_n = bitnet__att_ranges(pos + 1, 2 * BITNET__GPU_ATT_T, q->smax, q->att_w2 / (2 * BITNET__GPU_ATT_T));
}

/* The decode graph of a step at pos: its attention's form, captured on first use. */
static bitnet_result bitnet__gpu_step_graph(bitnet_session *s, int32_t pos) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    bitnet_gpu_graph **gr;
    bitnet__gpu_att_form(q, pos);
    gr = &q->graph[q->draw][q->form][q->form_n];
    if (!*gr) {
        bitnet_result r, r2;
        BITNET__TRY(bitnet_gpu_graph_begin(q->gpu));
        r = bitnet__gpu_step(s);
        if (r == BITNET_OK && q->draw && bitnet__sampler_adjusts(&q->dr)) r = bitnet__gpu_penalize(s, &q->dr, NULL, 0);
        if (r == BITNET_OK && q->draw) r = bitnet__gpu_topk(s, &q->dr);
        r2 = bitnet_gpu_graph_end(q->gpu, gr);
        if (r != BITNET_OK) { /* a launch that failed before the stream saw it leaves a partial graph: never keep it */
            bitnet_gpu_graph_free(*gr);
            *gr = NULL;
            return r;
        }
        BITNET__TRY(r2);
    }
    return BITNET_OK;
}

/* Launches the decode step of the token and position in io (pos: that position). */
static bitnet_result bitnet__gpu_launch_step(bitnet_session *s, int32_t pos) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    BITNET__TRY(bitnet__gpu_step_graph(s, pos));
    BITNET__TRY(bitnet_gpu_graph_launch(q->gpu, q->graph[q->draw][q->form][q->form_n]));
    q->have_next = 1;
    q->dev_pos = pos + 1; /* where the head leaves io[1] */
    return BITNET_OK;
}

/* One decode step of token at pos. */
static bitnet_result bitnet__gpu_decode(bitnet_session *s, int32_t token, int32_t pos) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    BITNET__TRY(bitnet__gpu_put_tokens(s, &token, 1, pos, !g->emb_dev));
    return bitnet__gpu_launch_step(s, pos);
}

/* ---- prefill steps (m tokens, the rows of the batch buffers) --------------------------------------- */

/* 2. norm_quant: a = int8(rmsnorm(in[t]) * w) with scales and sums, for m rows of a->k (the mean over kn) */
static bitnet_result bitnet__gpu_norm_quant(bitnet_session *s, bitnet_devptr in, bitnet_devptr w, int m, int kn, bitnet_gpu_act *a) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    return bitnet__gpu_quantize_act(q->gpu, in, (size_t)m, a->k, kn, w, s->m->info.norm_eps, a);
}

/* 3. linear for m tokens: out[m][n] (+= res when res is out) = W . a (int8 tensor cores); for the
   gate||up matrix the epilogue applies act(gate) * up (the CPU's glu_norm_quant) */
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
    int hd = g->hd, nh = md->info.n_heads, nkv = md->info.n_kv_heads;
    long long ldq = g->q_dim + 2 * g->kv_dim;
    size_t layer = (size_t)l * (size_t)g->kv_dim * (size_t)s->n_ctx * 2;
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + 4;
    void *args[10];
    args[0] = &q->qkv, args[1] = &ldq, args[2] = &q->rope, args[3] = &pos, args[4] = &kc, args[5] = &vc, args[6] = &s->n_ctx,
    args[7] = &nh, args[8] = &nkv, args[9] = &hd;
    /* 512 threads a token: a thread's loop is a chain of dependent loads (H100, 64 tokens: 128 threads took
       6.8 us a launch) */
    return bitnet__gpu_launch(q->gpu, g->rope_kv, (unsigned)m, 1, 512, 1, 0, 1, args);
}

/* 6. attention for rows r0 .. m-1 of m tokens, causal: blocks of BITNET__GPU_ATT_ROWS rows (query x
   head) of one kv head. r0 is 0, or m - 1 (the last layer's one row read: its position is io[4]). */
static bitnet_result bitnet__gpu_attention_m(bitnet_session *s, int l, int m, int r0) {
    const bitnet_model *md = s->m;
    const bitnet__gmodel *g = (const bitnet__gmodel *)md->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int hd = g->hd, nh = md->info.n_heads, nkv = md->info.n_kv_heads;
    double isq = 1.0 / sqrt((double)md->info.head_dim); /* (the model's, of a padded head too: >>pad) */
    int qt = BITNET__GPU_ATT_ROWS / (nh / nkv), pk = g->att_pk; /* queries a block, keys a tile (the build's BF_PK) */
    long long ldq = g->q_dim + 2 * g->kv_dim, ldo = g->q_dim;
    size_t layer = (size_t)l * (size_t)g->kv_dim * (size_t)s->n_ctx * 2;
    const long long p0 = (long long)s->pos + r0; /* the first row's position */
    bitnet_devptr kc = q->kc + layer, vc = q->vc + layer, pos = q->io + (r0 ? 16 : 4), ctr = q->ctr + 4 * ((bitnet_devptr)nh + 2);
    bitnet_devptr qin = q->qkv + (bitnet_devptr)r0 * (bitnet_devptr)ldq * 4, out = q->att + (bitnet_devptr)r0 * (bitnet_devptr)ldo * 4;
    unsigned smem = bitnet__gatt_prefill_smem((unsigned)hd, (unsigned)pk);
    int nqb, cut = 0, pieces = 2, b;
    const int no_cuts = bitnet__env_off("BITNET_GPU_ATT_CUT");
    void *args[17];
    m -= r0;
    nqb = (m + qt - 1) / qt;
    /* Cuts: the heaviest query blocks (first in the grid) in `pieces` blocks each, over even runs of
       their key tiles (at least two tiles a piece). A prompt's first batch (blocks of 1 to m / pk key
       tiles) waits for its heaviest blocks: those with more than half the heaviest one's tiles are
       cut in two. A later batch (after a prefix at least as long: blocks of about equal work) has
       its heaviest cut in two while the grid fits one wave of blocks, or, when even twice its blocks
       fit, every block in up to four (a short turn after a long context). Three blocks an SM where
       they fit. BITNET_GPU_ATT_CUT=0 (A/B): no cuts, and two blocks an SM for a first batch (by asking
       for a third of an SM's shared memory), as before. H100, 512 tokens, 30 layers: 3,390 us uncut
       at two an SM, 3,642 uncut at three, 3,490 cut at two, 2,946 cut at three (BENCHMARKS.md,
       sessions 18-19). */
    if (no_cuts && p0 < m) {
        smem = BITNET__MAX(smem, (unsigned)g->smem_optin / 3 + 1);
    } else if (!no_cuts) { /* query block b (heaviest first) sees keys [0, pos + its last query] */
        long long t0 = (p0 + m + pk - 1) / pk;
        int slots = (int)(((size_t)g->smem_optin + 1024) / ((size_t)smem + 2048)) * g->sm_count; /* blocks a wave (shared memory) */
        int cap = nqb;
        if (p0 >= m && 2 * nqb * nkv <= slots) pieces = BITNET__MIN(4, slots / (nqb * nkv));
        else if (p0 >= m) cap = BITNET__MAX(0, slots / nkv - nqb);
        cap = BITNET__MIN(cap, 2 * (int)bitnet__gatt_cuts(q->B, &md->info) / pieces); /* the buffers' room */
        for (b = 0; b < BITNET__MIN(nqb, cap); b++) {
            long long q0 = (long long)(nqb - 1 - b) * qt, nt = (p0 + q0 + BITNET__MIN(qt, m - (int)q0) + pk - 1) / pk;
            if (nt < 2 * pieces || (p0 < m && 2 * nt <= t0 + 1)) break; /* (64 tokens: cuts of 2-tile blocks lost 5%) */
            cut++;
        }
    }
    args[0] = &qin, args[1] = &ldq, args[2] = &kc, args[3] = &vc, args[4] = &pos, args[5] = &m, args[6] = &s->n_ctx,
    args[7] = &nh, args[8] = &nkv, args[9] = &hd, args[10] = &out, args[11] = &ldo, args[12] = &cut, args[13] = &pieces,
    args[14] = &q->att_part, args[15] = &ctr, args[16] = &isq;
    return bitnet__gpu_launch(q->gpu, g->attn_prefill, (unsigned)(nqb + cut * (pieces - 1)), (unsigned)nkv, 128, 1, smem, 1, args);
}

/* Prefill of m tokens at s->pos: the GEMM path, in the CPU's step order. The last layer trims its
   rows past the KV cache as the CPU's does (none without logits, the last for the last row's
   logits). */
static bitnet_result bitnet__gpu_prefill(bitnet_session *s, const int32_t *tokens, int m, float *logits, int all) {
    const bitnet_model *md = s->m;
    bitnet__gmodel *g = (bitnet__gmodel *)md->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int l, t, dim = md->info.dim;
    size_t nv = (size_t)md->info.n_vocab;
    BITNET__TRY(bitnet__gpu_put_tokens(s, tokens, m, s->pos, 1));
    BITNET__TRY(bitnet__gpu_embed(s, q->erow, q->iota, m));                                 /* x [m][dim] */
    for (l = 0; l < md->info.n_layers; l++) {
        const bitnet__glayer *L = &g->layers[l];
        int r0 = l < md->info.n_layers - 1 || (logits && all) ? 0 : (logits ? m - 1 : m), n = m - r0;
        bitnet_devptr x = q->x + (bitnet_devptr)r0 * (bitnet_devptr)dim * 4;
        bitnet__nvtx_push("bitnet layer"); /* closed below, or by bitnet__eval after an error */
        /* attention block */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->x, L->attn_norm, m, dim, &q->a_dim));       /* aq [m][dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->qkv, &q->a_dim, q->qkv, 0));                 /* qkv [m][q+2kv] */
        BITNET__TRY(bitnet__gpu_rope_kv(s, l, m));
        if (n == 0) { /* from here on, rows r0 .. m-1 only */
            bitnet__nvtx_pop();
            break;
        }
        BITNET__TRY(bitnet__gpu_attention_m(s, l, m, r0));                                   /* att [n][q_dim] */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->att + (bitnet_devptr)r0 * (bitnet_devptr)g->q_dim * 4, L->attn_sub_norm, n,
                                           md->q_dim, &q->a_q));                             /* aq [n][q_dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->o, &q->a_q, x, x));                          /* x += o */
        /* feed-forward block */
        BITNET__TRY(bitnet__gpu_norm_quant(s, x, L->ffn_norm, n, dim, &q->a_dim));           /* aq [n][dim] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->gu, &q->a_dim, q->h, 0));                    /* h [n][ffn] */
        BITNET__TRY(bitnet__gpu_norm_quant(s, q->h, L->ffn_sub_norm, n, md->info.ffn_dim, &q->a_ff)); /* aq [n][ffn] */
        BITNET__TRY(bitnet__gpu_linear_m(s, &L->down, &q->a_ff, x, x));                      /* x += down */
        bitnet__nvtx_pop();
    }
    q->have_next = 0;
    if (!logits) return BITNET_OK;
    for (t = all ? 0 : m - 1; t < m; t++) {
        BITNET__TRY(bitnet__gpu_head(s, q->x + (bitnet_devptr)((size_t)t * (size_t)dim * 4), 0));
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
   whose logits the GPU computed, which the head left in io[0]. With ahead (and the mapped
   embedding), the decode step of that token at s->pos is launched before the token is read: the
   device computes it while the host hands the token on, and *launched says so (the caller then
   counts the token as evaluated if it keeps it; if not, the step was for nothing, and the next
   eval puts its own token and position). */
static bitnet_result bitnet__gpu_next_token(bitnet_session *s, int ahead, int32_t *token, int *launched) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    bitnet__CUevent mark;
    bitnet_result r;
    int32_t io[4];
    *launched = 0;
    if (!q || !q->have_next) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA forward: no logits were computed on the device");
    if (!ahead || !q->pin) BITNET__TRY(bitnet_gpu_download(q->gpu, io, q->io, 16));
    else {
        /* A decode step's head (or draw) left io in pin's slot s->pos & 1 (bf_publish): only an event
           goes between this step and the next. After a prefill (its io[1] is its first position) io is
           copied there instead, once. */
        int32_t *slot = q->pin + 4 * (s->pos & 1), pos = s->pos;
        int copy = q->dev_pos != pos;
        if (copy) {
            BITNET__TRY(bitnet_gpu_upload(q->gpu, q->io + 4, &pos, 4));
            q->dev_pos = pos;
        }
        BITNET__TRY(bitnet__gpu_step_graph(s, s->pos)); /* (a capture first: none with the download queued) */
        BITNET__TRY(bitnet__gpu_download_mark(q->gpu, copy ? slot : NULL, q->io, 16, &mark));
        r = bitnet__gpu_launch_step(s, s->pos);
        if (bitnet__gpu_mark_wait(q->gpu, mark) != BITNET_OK && r == BITNET_OK) r = BITNET_ERR_CUDA;
        if (r != BITNET_OK) return r;
        memcpy(io, slot, 16);
        *launched = 1;
    }
    if (q->draw && io[3]) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_sample: the logits are all NaN");
    *token = io[0];
    return BITNET_OK;
}

static int bitnet__scand_id_cmp(const void *pa, const void *pb) { /* by id: the order bitnet_sample finds them in */
    const bitnet__scand *a = (const bitnet__scand *)pa, *b = (const bitnet__scand *)pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Sampled decoding on the device (bitnet_generate: top_k 1 .. BITNET__GPU_TOPK_MAX, or greedy with
   the repetition penalty; the mapped embedding): the host draws the uniforms, in the order
   bitnet_sample would (one a token), and uploads them with the history; every decode step then ends
   with the penalty (if any), the topk kernel and its draw (the [1] graphs), which leaves the next
   token in io[0] as the greedy head does, so bitnet__gpu_next_token runs the next step ahead alike.
   This draws the first token from the logits on the device; bitnet_generate turns q->draw off when
   it returns. */
static bitnet_result bitnet__gpu_draw_begin(bitnet_session *s, const bitnet_sampler_params *d, uint64_t *rng) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    size_t n = (size_t)s->n_ctx + 2, i; /* more than a generation draws (a step ahead draws one more) */
    int32_t io[3] = {s->pos, 0, 0}; /* the next token's position, the uniform index, the error flag */
    double *u = (double *)bitnet__malloc(n * sizeof *u);
    bitnet_result r;
    if (!u) return BITNET_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; i++) u[i] = bitnet__rng_uniform(rng);
    r = bitnet_gpu_upload(q->gpu, q->tk_uni, u, n * sizeof *u);
    if (r == BITNET_OK) r = bitnet_gpu_sync(q->gpu); /* (u is freed next) */
    bitnet__free(u);
    BITNET__TRY(r);
    BITNET__TRY(bitnet_gpu_upload(q->gpu, q->io + 4, io, 12));
    q->dev_pos = s->pos;
    if (s->pos) BITNET__TRY(bitnet_gpu_upload(q->gpu, q->tk_ids, s->tokens, (size_t)s->pos * 4)); /* the history */
    if (d->temperature != q->dr.temperature || d->top_k != q->dr.top_k || d->top_p != q->dr.top_p || d->min_p != q->dr.min_p ||
        d->repeat_penalty != q->dr.repeat_penalty || d->repeat_last_n != q->dr.repeat_last_n ||
        d->presence_penalty != q->dr.presence_penalty || d->frequency_penalty != q->dr.frequency_penalty ||
        d->n_logit_bias != q->dr.n_logit_bias) { /* (the graphs hold these; the bias's values stay on the device) */
        bitnet__gpu_graphs_free(q, 1);
        q->dr = *d;
    }
    q->dr.logit_bias = NULL; /* (the caller's array lives only through this generation: the device's copy serves) */
    q->draw = 1;
    if (bitnet__sampler_adjusts(d)) BITNET__TRY(bitnet__gpu_penalize(s, d, NULL, 0));
    return bitnet__gpu_topk(s, d);
}

/* Sampling with top_k in 2 .. BITNET__GPU_TOPK_MAX, greedy with the repetition penalty, or min-p
   with top_k 0 or above the most (bitnet_generate's choice), from the last logits row the device
   computed: the penalty in place there (the ids from the host), then the topk kernel picks the k
   best (greedy: the one best; min-p: the most it keeps) by logit / temperature and then lower id,
   and the host runs min-p and bitnet_sample's last steps on them. Those steps see nothing else of
   the row (top-k keeps only these, min-p a prefix of them), so this draws the token bitnet_sample
   would from the whole row and history, with 1 + 2k words downloaded instead of n_vocab. Where
   min-p alone decides and all k pass it, more might: that token takes the whole row. */
static bitnet_result bitnet__gpu_sample(bitnet_session *s, const bitnet_sampler_params *d, const int32_t *history,
                                        size_t n_history, uint64_t *rng, int32_t *token) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int32_t res[1 + 2 * BITNET__GPU_TOPK_MAX];
    bitnet__scand c[BITNET__GPU_TOPK_MAX];
    int n = s->m->info.n_vocab, greedy = bitnet__sampler_greedy(d), i, cnt;
    int wide = !greedy && (d->top_k == 0 || d->top_k > BITNET__GPU_TOPK_MAX); /* min-p sets the candidates */
    int k = greedy ? 1 : wide ? BITNET__GPU_TOPK_MAX : d->top_k;
    float floor_logit;
    if (!q || !q->have_next) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA forward: no logits were computed on the device");
    if (bitnet__sampler_adjusts(d)) BITNET__TRY(bitnet__gpu_penalize(s, d, history, n_history)); /* 1. */
    BITNET__TRY(bitnet__gpu_topk(s, d));
    BITNET__TRY(bitnet_gpu_download(q->gpu, res, q->tk_res, (size_t)(1 + 2 * k) * 4));
    cnt = res[0];
    if (cnt < 0 || cnt > k) return bitnet__err(BITNET_ERR_CUDA, "CUDA sampling: the topk kernel returned %d candidates", cnt);
    if (greedy) { /* (all NaN: token 0, as the device's argmax gives) */
        *token = cnt ? res[2] : 0;
        return BITNET_OK;
    }
    if (cnt == 0) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_sample: the logits are all NaN");
    for (i = 0; i < cnt; i++) memcpy(&c[i].logit, &res[1 + 2 * i], 4), c[i].id = res[2 + 2 * i];
    /* 4. min-p from the best value, as bitnet_sample computes it; the best itself always passes */
    floor_logit = bitnet__min_p_floor(c[0].logit, d->min_p);
    for (i = 1; i < cnt && c[i].logit >= floor_logit; i++) {}
    if (wide && i == k) { /* min-p may pass more than the k: the whole row (its step 1 applied already) */
        bitnet_sampler_params d1 = bitnet__sampler_unadjusted(d);
        BITNET__TRY(bitnet_gpu_download(q->gpu, s->logits, q->logits, (size_t)n * 4));
        return bitnet_sample(s->logits, n, &d1, history, n_history, rng, token);
    }
    if (d->top_k == 0 && !(d->top_p > 0 && d->top_p < 1)) qsort(c, (size_t)i, sizeof *c, bitnet__scand_id_cmp); /* (nothing sorts) */
    *token = bitnet__sample_from(c, (size_t)i, d, rng);
    return BITNET_OK;
}

/* Sampling under a grammar (bitnet__gm_select) from the device's 128 best, the penalty applied on the
   device first: only they move, and the whole row only where the grammar refuses so many of them
   that the sampler's choice is not settled among them. */
static bitnet_result bitnet__gpu_gm_sample(bitnet_session *s, bitnet__gm *gm, const bitnet_sampler_params *d, const int32_t *history,
                                           size_t n_history, uint64_t *rng, const int32_t *stop, size_t n_stop, int32_t *token) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    int32_t res[1 + 2 * BITNET__GPU_TOPK_MAX];
    bitnet__scand list[BITNET__GPU_TOPK_MAX], c[BITNET__GPU_TOPK_MAX];
    bitnet_sampler_params d1 = *d;
    bitnet__gsrc src;
    size_t n = 0;
    int i, cnt, done;
    if (!q || !q->have_next) return bitnet__err(BITNET_ERR_INVALID_STATE, "CUDA forward: no logits were computed on the device");
    if (!bitnet__sampler_greedy(d) && !rng) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_generate: rng is NULL");
    if (bitnet__sampler_adjusts(d)) BITNET__TRY(bitnet__gpu_penalize(s, d, history, n_history));
    if (bitnet__sampler_greedy(d)) d1.temperature = 1.0f;
    d1.top_k = BITNET__GPU_TOPK_MAX; /* (greedy too: the 128 best, not the one) */
    BITNET__TRY(bitnet__gpu_topk(s, &d1));
    BITNET__TRY(bitnet_gpu_download(q->gpu, res, q->tk_res, sizeof res));
    cnt = res[0];
    if (cnt < 0 || cnt > BITNET__GPU_TOPK_MAX) return bitnet__err(BITNET_ERR_CUDA, "CUDA sampling: the topk kernel returned %d candidates", cnt);
    for (i = 0; i < cnt; i++) memcpy(&list[i].logit, &res[1 + 2 * i], 4), list[i].id = res[2 + 2 * i];
    src.h = list, src.n = (size_t)cnt, src.heap = 0, src.whole = cnt < BITNET__GPU_TOPK_MAX; /* (fewer: the row had no more) */
    BITNET__TRY(bitnet__gm_select(gm, d, &src, stop, n_stop, c, &n, &done));
    if (done) return bitnet__gm_draw(gm, d, c, n, rng, stop, n_stop, token);
    d1 = bitnet__sampler_unadjusted(d); /* the whole row, its step 1 applied already */
    BITNET__TRY(bitnet_gpu_download(q->gpu, s->logits, q->logits, (size_t)s->m->info.n_vocab * 4));
    return bitnet__gm_sample(gm, s->logits, s->m->info.n_vocab, &d1, history, n_history, rng, stop, n_stop, token);
}

/* bitnet__cpu_kv_io's contract on the device's cache ([layer][kv head][n_ctx][g->hd], a padded
   head's dims in their >>pad places) */
static bitnet_result bitnet__gpu_kv_io(bitnet_session *s, int l, int h, uint16_t *k, uint16_t *v, int n, int put) {
    const bitnet__gmodel *g = (const bitnet__gmodel *)s->m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    const size_t hd = (size_t)s->m->info.head_dim, ghd = (size_t)g->hd, bytes = (size_t)n * ghd * 2;
    const bitnet_devptr at = (bitnet_devptr)(((size_t)l * (size_t)g->kv_dim + (size_t)h * ghd) * (size_t)s->n_ctx * 2);
    uint16_t *t = NULL;
    size_t p, d;
    int c;
    bitnet_result r = BITNET_OK;
    if (!n) return BITNET_OK;
    if (ghd != hd && !(t = (uint16_t *)bitnet__calloc(bytes, 1))) return BITNET_ERR_OUT_OF_MEMORY;
    if (put) q->have_next = 0; /* (the device's logits are no longer the text's) */
    for (c = 0; c < 2 && r == BITNET_OK; c++) {
        uint16_t *rows = c ? v : k, *buf = t ? t : rows;
        const bitnet_devptr dev = (c ? q->vc : q->kc) + at;
        for (p = 0; put && t && p < (size_t)n; p++)
            for (d = 0; d < hd; d++) t[p * ghd + bitnet__gpad((int)hd, (int)ghd, d)] = rows[p * hd + d];
        r = put ? bitnet_gpu_upload(q->gpu, dev, buf, bytes) : bitnet_gpu_download(q->gpu, buf, dev, bytes);
        for (p = 0; r == BITNET_OK && !put && t && p < (size_t)n; p++)
            for (d = 0; d < hd; d++) rows[p * hd + d] = t[p * ghd + bitnet__gpad((int)hd, (int)ghd, d)];
    }
    bitnet__free(t);
    return r;
}

#endif /* BITNET__GPU_FORWARD */

/* >>model ===================================================================================== */

/* A GPU forward plugs in here: >>cuda-forward defines BITNET__GPU_FORWARD and
     bitnet__gpu_model_init(bitnet_model *, desc)         upload the weights (m->gpu) to desc's device
     bitnet__gpu_model_free(bitnet_model *)
     bitnet__gpu_session_init(bitnet_session *)           KV cache and buffers (s->gpu)
     bitnet__gpu_session_free(bitnet_session *)
     bitnet__gpu_forward(bitnet_session *, tokens, m, logits, all)  same contract as bitnet__cpu_forward
     bitnet__gpu_decode(bitnet_session *, token, pos)      launch one decode step (no wait)
     bitnet__gpu_draw_begin(bitnet_session *, sampler, rng)  sampling drawn on the device from here on
     bitnet__gpu_next_token(bitnet_session *, ahead, token, launched)  the token the device left (greedy's
                                                         argmax or a device draw), the next step launched first
     bitnet__gpu_sample(bitnet_session *, sampler, history, n, rng, token)  sampling from the device's k best
     bitnet__gpu_kv_io(bitnet_session *, l, h, k, v, n, put)  a kv head's cache rows to or from a state (>>state)
   bitnet_generate also reads the GPU session's pin, have_next and draw (>>cuda-forward's bitnet__gsession). */

static bitnet_result bitnet__model_own(bitnet_model *m, void *p) {
    void **grown;
    if (!p) return BITNET_ERR_OUT_OF_MEMORY;
    grown = (void **)bitnet__malloc((m->n_owned + 1) * sizeof *grown);
    if (!grown) {
        bitnet__free(p);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    if (m->n_owned) memcpy(grown, m->owned, m->n_owned * sizeof *grown);
    bitnet__free(m->owned);
    grown[m->n_owned++] = p;
    m->owned = grown;
    return BITNET_OK;
}

static void bitnet__progress(const bitnet_model_desc *d, float f) {
    if (d && d->progress) d->progress(f, d->progress_user);
}

/* The backend rule: CPU when asked; CUDA when asked and usable, else an error (never a silent CPU
   run); AUTO takes CUDA when it is usable and the GPU forward is built, and says why not. */
static bitnet_result bitnet__resolve_backend(bitnet_backend want, bitnet_model_info *info) {
    char why[200];
    int gpu_ok;
    if (want == BITNET_BACKEND_CPU) {
        info->backend = BITNET_BACKEND_CPU;
        snprintf(info->backend_reason, sizeof info->backend_reason, "CPU requested");
        return BITNET_OK;
    }
    if (want != BITNET_BACKEND_AUTO && want != BITNET_BACKEND_CUDA)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_model_load: backend %d is not AUTO, CPU or CUDA", (int)want);
    bitnet_clear_error();
    gpu_ok = bitnet_gpu_available();
    bitnet__strlcpy(why, sizeof why, bitnet_last_error()[0] ? bitnet_last_error() : "no usable CUDA device");
#if !defined(BITNET__GPU_FORWARD)
    if (gpu_ok) snprintf(why, sizeof why, "this build has no GPU forward pass");
    gpu_ok = 0;
#endif
    if (want == BITNET_BACKEND_CUDA && !gpu_ok)
        return bitnet__err(BITNET_ERR_BACKEND, "backend cuda requested but CUDA is not usable: %s", why);
    info->backend = gpu_ok ? BITNET_BACKEND_CUDA : BITNET_BACKEND_CPU;
    if (gpu_ok) snprintf(info->backend_reason, sizeof info->backend_reason, "CUDA %s", want == BITNET_BACKEND_CUDA ? "requested" : "usable");
    else snprintf(info->backend_reason, sizeof info->backend_reason, "CUDA unavailable: %s; using the CPU", why);
    return BITNET_OK;
}

/* Drops this process's pages of [p, p + n) when they lie in g's read-only file mapping (whole pages
   only): once a tensor is copied or quantized, its mapped pages only add to the resident size, and a
   later read faults them back in from the page cache. Anything else (a tensor converted into heap
   memory, an image read into memory) is left alone: there MADV_DONTNEED would zero it. */
static void bitnet__release_mapped(const bitnet_gguf *g, const void *p, size_t n) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    uintptr_t pg = (uintptr_t)bitnet__page_size(), u = (uintptr_t)p, base = g ? (uintptr_t)g->base : 0, a, b;
    if (!g || !g->map || u < base || n > g->size || u - base > g->size - n) return;
    a = (u + pg - 1) & ~(pg - 1), b = (u + n) & ~(pg - 1);
    if (b > a) madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
#else
    (void)g, (void)p, (void)n;
#endif
}

/* One pass over the ternary matrices at load, a layer's seven on the thread pool. Each is checked for
   I2_S code 3, which no weight has (bitnet_i2s_unpack), on either backend, so both name a corrupt
   matrix alike (the GPU's upload refuses it too; the CPU kernels would read it as +2). Code 3 sets
   both bits of a pair, so x & (x >> 1) has a pair's low bit set. A mapped file's matrices are also
   copied once into anonymous memory on large pages (see above), 64 KB at a time, each piece scanned
   while in cache, and the mapped pages they came from released. */
typedef struct bitnet__wpass {
    const bitnet_gguf *g;
    const void **mat[7];
    uint8_t *dst[7]; /* NULL: check only */
    size_t n[7], k[7];
    uint8_t bad[7];
} bitnet__wpass;
static void bitnet__wpass_one(void *ctx, int i) {
    bitnet__wpass *c = (bitnet__wpass *)ctx;
    const uint8_t *p = (const uint8_t *)*c->mat[i];
    const size_t codes = c->n[i] * c->k[i] / 4, all = bitnet_i2s_bytes(c->n[i], c->k[i]); /* the scale follows the codes */
    size_t j = 0, e;
    uint64_t acc = 0, x;
    while (j < codes) {
        e = BITNET__MIN(codes, j + 65536);
        if (c->dst[i]) memcpy(c->dst[i] + j, p + j, e - j);
        for (; j + 8 <= e; j += 8) memcpy(&x, p + j, 8), acc |= x & (x >> 1);
        for (; j < e; j++) acc |= (uint64_t)(p[j] & (p[j] >> 1));
    }
    c->bad[i] = (acc & 0x5555555555555555ull) != 0;
    if (!c->dst[i]) return;
    memcpy(c->dst[i] + codes, p + codes, all - codes);
    bitnet__release_mapped(c->g, p, all);
    *c->mat[i] = c->dst[i];
}
static bitnet_result bitnet__weights_pass(bitnet_model *m, const bitnet_model_desc *d, int copy) {
    static const char *const names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    const bitnet_model_info *in = &m->info;
    const size_t dim = (size_t)in->dim, ff = (size_t)m->ffn_k, qd = (size_t)m->q_dim, kvd = (size_t)m->kv_dim;
    const size_t n[7] = {qd, kvd, kvd, dim, ff, ff, dim}, k[7] = {dim, dim, dim, qd, dim, dim, ff};
    size_t per_layer = 0, off = 0, bytes[7];
    int l, i;
    uint8_t *arena = NULL;
    bitnet__wpass c;
    for (i = 0; i < 7; i++) per_layer += (bytes[i] = (bitnet_i2s_bytes(n[i], k[i]) + 63) & ~(size_t)63);
    if (copy) {
        if (per_layer > SIZE_MAX / (size_t)in->n_layers) return bitnet__err(BITNET_ERR_OVERFLOW, "model: weights overflow");
        arena = (uint8_t *)bitnet__malloc(per_layer * (size_t)in->n_layers);
        BITNET__TRY(bitnet__model_own(m, arena));
        bitnet__hugepages(arena, per_layer * (size_t)in->n_layers);
    }
    c.g = m->gguf;
    for (l = 0; l < in->n_layers; l++) {
        bitnet__layer *L = &m->layers[l];
        c.mat[0] = &L->wq, c.mat[1] = &L->wk, c.mat[2] = &L->wv, c.mat[3] = &L->wo, c.mat[4] = &L->w_gate,
        c.mat[5] = &L->w_up, c.mat[6] = &L->w_down;
        for (i = 0; i < 7; i++) {
            c.n[i] = n[i], c.k[i] = k[i], c.dst[i] = arena ? arena + off : NULL;
            off += bytes[i];
        }
        bitnet__for_rows(7, per_layer / 7, bitnet__wpass_one, &c);
        for (i = 0; i < 7; i++)
            if (c.bad[i])
                return bitnet__err(BITNET_ERR_CORRUPT, "model: blk.%d.%s.weight has the unused I2_S code 3 (a corrupt matrix)", l, names[i]);
        bitnet__progress(d, 0.1f + 0.3f * (float)(l + 1) / (float)in->n_layers);
    }
    return BITNET_OK;
}

/* The CPU head as int8 rows with one scale each, quantized once at load: decode then reads
   n_vocab * dim bytes instead of twice that. A row is quantized like an activation row
   (q = round(x * 127 / absmax), so |q| <= 127), and its scale is absmax / 127. Slabs of rows
   go through fp32 scratch (the rows of a slab on the thread pool) so progress can be reported
   between them. */
typedef struct bitnet__hq { const bitnet_model *m; float *f; int8_t *q; float *scale; size_t dim, r0; int bad; } bitnet__hq;
static void bitnet__head_row(void *ctx, int i) {
    bitnet__hq *c = (bitnet__hq *)ctx;
    size_t r = c->r0 + (size_t)i, dim = c->dim;
    float *f = c->f + (size_t)i * dim;
    if (c->m->head_f16) bitnet_convert_fp16_to_fp32(c->m->head_f16 + r * dim, f, dim);
    else bitnet__emb_row(c->m, (int32_t)r, f, NULL); /* a block-type embedding, tied */
    if (bitnet_quantize_act(f, 1, dim, c->q + r * dim, c->scale + r, NULL) != BITNET_OK)
        c->bad = 1; /* (not with these arguments) */
    else
        c->scale[r] = 1.0f / c->scale[r];
}
/* (progress from 0.4 to p1) */
static bitnet_result bitnet__head_quantize(bitnet_model *m, const bitnet_model_desc *d, float p1) {
    size_t nv = (size_t)m->info.n_vocab, dim = (size_t)m->info.dim, rows = BITNET__MAX((size_t)1, ((size_t)1 << 22) / dim), r;
    bitnet__hq c;
    c.bad = 0, c.dim = dim, c.m = m;
    m->head_q8 = (int8_t *)bitnet__malloc(nv * dim);
    if (m->head_q8) bitnet__hugepages(m->head_q8, nv * dim);
    m->head_scale = (float *)bitnet__malloc(nv * sizeof(float));
    c.f = (float *)bitnet__malloc(BITNET__MIN(rows, nv) * dim * sizeof(float));
    c.q = m->head_q8, c.scale = m->head_scale;
    if (!m->head_q8 || !m->head_scale || !c.f) c.bad = 2;
    for (r = 0; r < nv && !c.bad; r += rows) {
        size_t n = BITNET__MIN(rows, nv - r);
        c.r0 = r;
        bitnet__for_rows((int)n, dim * 4, bitnet__head_row, &c);
        bitnet__progress(d, 0.4f + (p1 - 0.4f) * (float)(r + n) / (float)nv);
    }
    bitnet__free(c.f);
    return c.bad == 2 ? BITNET_ERR_OUT_OF_MEMORY : c.bad ? bitnet__err(BITNET_ERR_INVALID_STATE, "quantizing the head failed") : BITNET_OK;
}

/* Validates the shapes and takes the pointers; checks the ternary matrices (bitnet__weights_pass); sets
   the GPU up for backend CUDA or AUTO (AUTO falls back to the CPU, and says why, when that fails); copies
   a mapped file's ternary matrices onto large pages; quantizes the head to int8 unless the fp16 one is
   asked for. */
static bitnet_result bitnet__model_build(bitnet_model *m, const bitnet_model_weights *w, const bitnet_model_desc *d) {
    bitnet_model_info *in = &m->info;
    int32_t l, hd;
    size_t t;
    int want_f16;
    const char *env = bitnet__getenv("BITNET_HEAD");
    if ((!w->tok_embd && !m->emb_q) || !w->output_norm || !w->layers)
        return bitnet__err(BITNET_ERR_NULL_POINTER, "model weights: tok_embd, output_norm and layers must be given");
    hd = w->head_dim ? w->head_dim : (w->n_heads > 0 ? w->dim / w->n_heads : 0);
    if (w->n_vocab <= 0 || w->dim <= 0 || w->n_layers <= 0 || w->n_heads <= 0 || w->n_kv_heads <= 0 || w->ffn_dim <= 0 ||
        w->n_ctx_train <= 0 || hd <= 0)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: n_vocab %d, dim %d, n_layers %d, n_heads %d, n_kv_heads %d, "
                           "ffn_dim %d, n_ctx_train %d must all be positive", (int)w->n_vocab, (int)w->dim, (int)w->n_layers,
                           (int)w->n_heads, (int)w->n_kv_heads, (int)w->ffn_dim, (int)w->n_ctx_train);
    if (w->n_heads % w->n_kv_heads)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: %d attention heads do not divide into %d kv heads",
                           (int)w->n_heads, (int)w->n_kv_heads);
    if (hd % 2 || hd > BITNET__MAX_HEAD_DIM || (!w->head_dim && w->dim % w->n_heads))
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: head_dim %d (dim %d / %d heads) must be even, whole and at most %d",
                           (int)hd, (int)w->dim, (int)w->n_heads, BITNET__MAX_HEAD_DIM);
    if ((int64_t)w->n_heads * hd > INT32_MAX / BITNET__MAX_BATCH || (int64_t)w->dim > INT32_MAX / BITNET__MAX_BATCH ||
        (int64_t)w->ffn_dim > INT32_MAX / BITNET__MAX_BATCH - BITNET_I2S_BLOCK)
        return bitnet__err(BITNET_ERR_OVERFLOW, "model: dimensions too large");
    if (w->dim % BITNET_I2S_BLOCK || (w->n_heads * hd) % BITNET_I2S_BLOCK)
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "model: dim %d and n_heads*head_dim %d must be multiples of %d (I2_S rows)",
                           (int)w->dim, (int)(w->n_heads * hd), BITNET_I2S_BLOCK);
    if (!(w->rope_theta > 0) || !(w->norm_eps >= 0))
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: rope_theta %g must be positive and norm_eps %g not negative",
                           (double)w->rope_theta, (double)w->norm_eps);
    if (w->ffn_act != 0 && w->ffn_act != BITNET_FFN_RELU2 && w->ffn_act != BITNET_FFN_SILU)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: ffn_act %d is not a bitnet_ffn_act", (int)w->ffn_act);
    if (w->bos >= w->n_vocab || w->eos >= w->n_vocab || w->eot >= w->n_vocab)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "model: special tokens bos %d, eos %d, eot %d outside the vocabulary of %d",
                           (int)w->bos, (int)w->eos, (int)w->eot, (int)w->n_vocab);
    if (!bitnet__mul_size((size_t)w->n_vocab, (size_t)w->dim, &t))
        return bitnet__err(BITNET_ERR_OVERFLOW, "model: n_vocab x dim overflows");
    in->n_vocab = w->n_vocab;
    in->dim = w->dim;
    in->n_layers = w->n_layers;
    in->n_heads = w->n_heads;
    in->n_kv_heads = w->n_kv_heads;
    in->head_dim = hd;
    in->ffn_dim = w->ffn_dim;
    in->n_ctx_train = w->n_ctx_train;
    in->rope_theta = w->rope_theta;
    in->norm_eps = w->norm_eps;
    in->bos = w->bos < 0 ? -1 : w->bos;
    in->eos = w->eos < 0 ? -1 : w->eos;
    in->eot = w->eot < 0 ? -1 : w->eot;
    in->ffn_act = w->ffn_act ? w->ffn_act : BITNET_FFN_RELU2;
    in->sub_norms = !w->no_sub_norms;
    if (d && d->chat_template != BITNET_CHAT_AUTO && !bitnet__chat_tmpl_of(d->chat_template))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "model: chat template %d", (int)d->chat_template);
    if (d && d->chat_template != BITNET_CHAT_AUTO) in->chat_template = d->chat_template;
    else if (in->chat_template == BITNET_CHAT_AUTO) in->chat_template = BITNET_CHAT_BITNET; /* (no file to ask) */
    m->q_dim = w->n_heads * hd;
    m->kv_dim = w->n_kv_heads * hd;
    m->ffn_k = bitnet__ffn_k(w->ffn_dim);
    m->tok_embd = w->tok_embd;
    m->head_f16 = w->output ? w->output : w->tok_embd;
    m->output_norm = w->output_norm;
    for (l = 0; w->rope_freqs && l < hd / 2; l++)
        if (!(w->rope_freqs[l] > 0 && w->rope_freqs[l] <= FLT_MAX))
            return bitnet__err(BITNET_ERR_BAD_METADATA, "model: rope_freqs[%d] is %g (must be finite and > 0)", (int)l,
                               (double)w->rope_freqs[l]);
    m->rope_ff = w->rope_freqs;
    in->rope_freqs = w->rope_freqs != NULL;
    m->layers = (bitnet__layer *)bitnet__calloc((size_t)w->n_layers, sizeof *m->layers);
    if (!m->layers) return BITNET_ERR_OUT_OF_MEMORY;
    for (l = 0; l < w->n_layers; l++) {
        const bitnet_layer_weights *s = &w->layers[l];
        bitnet__layer *o = &m->layers[l];
        if (!s->attn_norm || (!w->no_sub_norms && (!s->attn_sub_norm || !s->ffn_sub_norm)) || !s->ffn_norm || !s->wq || !s->wk ||
            !s->wv || !s->wo || !s->w_gate || !s->w_up || !s->w_down)
            return bitnet__err(BITNET_ERR_NULL_POINTER, "model: layer %d has a NULL tensor", (int)l);
        o->attn_norm = s->attn_norm;
        o->attn_sub_norm = w->no_sub_norms ? NULL : s->attn_sub_norm;
        o->ffn_norm = s->ffn_norm;
        o->ffn_sub_norm = w->no_sub_norms ? NULL : s->ffn_sub_norm;
        o->wq = s->wq;
        o->wk = s->wk;
        o->wv = s->wv;
        o->wo = s->wo;
        o->w_gate = s->w_gate;
        o->w_up = s->w_up;
        o->w_down = s->w_down;
    }
    { /* (what a state must agree with: the shape, and norms that tell one model's weights from another's) */
        const int32_t shape[9] = {in->n_vocab, in->dim, in->n_layers, in->n_heads, in->n_kv_heads, in->head_dim, in->ffn_dim,
                                  in->ffn_act, in->sub_norms};
        uint64_t f = bitnet__fnv(BITNET__FNV_INIT, shape, sizeof shape);
        f = bitnet__fnv(bitnet__fnv(f, &in->rope_theta, 4), &in->norm_eps, 4);
        if (m->rope_ff) f = bitnet__fnv(f, m->rope_ff, (size_t)hd / 2 * 4);
        f = bitnet__fnv(f, m->output_norm, (size_t)in->dim * 4);
        for (l = 0; l < w->n_layers; l++)
            f = bitnet__fnv(bitnet__fnv(f, m->layers[l].attn_norm, (size_t)in->dim * 4), m->layers[l].ffn_norm, (size_t)in->dim * 4);
        m->fingerprint = f;
    }
    if (env && strcmp(env, "f16") && strcmp(env, "q8"))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "BITNET_HEAD=%s is not f16 or q8", env);
    want_f16 = (d && d->head_f16) || (env && strcmp(env, "f16") == 0);
    if (want_f16 && !m->head_f16) { /* a block-type embedding as the fp16 head: its table */
        uint16_t *tab = (uint16_t *)bitnet__malloc((size_t)in->n_vocab * (size_t)in->dim * 2);
        BITNET__TRY(bitnet__model_own(m, tab));
        bitnet__emb_fill(m, tab);
        m->tok_embd = m->head_f16 = tab;
    }
    in->head_bits = 16;
#if defined(BITNET__GPU_FORWARD)
    if (in->backend == BITNET_BACKEND_CUDA) { /* the same int8 head by default: quantized here, uploaded, freed */
        bitnet_result r;
        char why[184];
        BITNET__TRY(bitnet__weights_pass(m, d, 0)); /* the CPU's check first: a corrupt matrix is named alike */
        if (!want_f16) {
            BITNET__TRY(bitnet__head_quantize(m, d, 0.6f));
            in->head_bits = 8;
        }
        r = bitnet__gpu_model_init(m, d);
        bitnet__free(m->head_q8);
        bitnet__free(m->head_scale);
        m->head_q8 = NULL, m->head_scale = NULL;
        if (r == BITNET_OK) {
            bitnet__progress(d, 1.0f);
            return BITNET_OK;
        }
        bitnet__gpu_model_free(m);
        in->head_bits = 16;
        if (d && d->backend == BITNET_BACKEND_CUDA) return r;
        /* AUTO: a GPU that fails here (device memory, NVRTC, a module load) leaves the CPU, and says so */
        in->backend = BITNET_BACKEND_CPU;
        bitnet__strlcpy(why, sizeof why, bitnet_last_error()); /* (all of it stays in bitnet_last_error) */
        snprintf(in->backend_reason, sizeof in->backend_reason, "CUDA failed (%s: %s); using the CPU", bitnet_result_string(r), why);
        bitnet__log(BITNET_LOG_WARN, "model: %s", in->backend_reason);
    }
#endif
    BITNET__TRY(bitnet__weights_pass(m, d, m->gguf && d && d->path && !d->no_mmap));
    if (!want_f16) {
        BITNET__TRY(bitnet__head_quantize(m, d, 1.0f));
        in->head_bits = 8;
        /* the head's rows are now read one per token (the embedding, when tied), not all of them */
        if (m->head_f16) bitnet__release_mapped(m->gguf, m->head_f16, t * 2);
        else bitnet__release_mapped(m->gguf, m->emb_q, (size_t)in->n_vocab * m->emb_row);
    }
    bitnet__progress(d, 1.0f);
    return BITNET_OK;
}

BITNET_API void bitnet_model_free(bitnet_model *m) {
    size_t i;
    if (!m) return;
#if defined(BITNET__GPU_FORWARD)
    if (m->gpu) bitnet__gpu_model_free(m);
#endif
    for (i = 0; i < m->n_owned; i++) bitnet__free(m->owned[i]);
    bitnet__free(m->owned);
    bitnet__free(m->layers);
    bitnet__free(m->head_q8);
    bitnet__free(m->head_scale);
    if (m->tok) bitnet_tokenizer_free(m->tok);
    if (m->gguf) bitnet_gguf_close(m->gguf);
    bitnet__free(m->file_copy);
    bitnet__free(m);
}

BITNET_API bitnet_result bitnet_model_from_weights(const bitnet_model_weights *w, const bitnet_model_desc *desc,
                                                   bitnet_model **out) {
    bitnet_model *m;
    bitnet_result r;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    m = (bitnet_model *)bitnet__calloc(1, sizeof *m);
    if (!m) return BITNET_ERR_OUT_OF_MEMORY;
    snprintf(m->info.arch, sizeof m->info.arch, "%s", w->no_sub_norms ? "llama" : w->ffn_act == BITNET_FFN_SILU ? "bitnet" : "bitnet-b1.58");
    bitnet__progress(desc, 0.0f);
    r = bitnet__resolve_backend(desc ? desc->backend : BITNET_BACKEND_AUTO, &m->info);
    if (r == BITNET_OK) r = bitnet__model_build(m, w, desc);
    if (r != BITNET_OK) {
        bitnet_model_free(m);
        return r;
    }
    *out = m;
    return BITNET_OK;
}

/* ---- GGUF: hparams from <arch>.* keys, tensors by bitnet.cpp's names ------------------------- */

/* n elements of an F32, F16 or BF16 tensor as float32: the mapping itself, or a converted copy. */
static bitnet_result bitnet__tensor_f32(bitnet_model *m, const char *name, const bitnet_tensor_info *ti, size_t n,
                                        const float **out) {
    float *f;
    if (ti->type == BITNET_TENSOR_F32) {
        if (ti->bytes < n * 4 || ((uintptr_t)ti->data & 3))
            return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor %s is short or misaligned", name);
        *out = (const float *)ti->data;
        return BITNET_OK;
    }
    if (ti->type != BITNET_TENSOR_F16 && ti->type != BITNET_TENSOR_BF16)
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor %s has type %d; expected F32, F16 or BF16", name, (int)ti->type);
    if (ti->bytes < n * 2) return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor %s is short", name);
    f = (float *)bitnet__malloc(n * sizeof *f);
    BITNET__TRY(bitnet__model_own(m, f));
    *out = f;
    return bitnet_dequantize(ti->type, ti->data, (size_t)ti->bytes, f, n);
}

/* An [n][k] fp16 matrix (embedding, head): F16 in place; F32, BF16 or a llama.cpp block type
   converted on the thread pool (bitnet__f16_worker). */
static bitnet_result bitnet__tensor_f16(bitnet_model *m, const char *name, const bitnet_tensor_info *ti, size_t n,
                                        size_t k, const uint16_t **out) {
    const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)ti->type);
    bitnet__f16job j;
    if (ti->type == BITNET_TENSOR_F16) {
        if (ti->bytes < n * k * 2 || ((uintptr_t)ti->data & 1))
            return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor %s is short or misaligned", name);
        *out = (const uint16_t *)ti->data;
        return BITNET_OK;
    }
    if (!bitnet__gguf_role_ok(BITNET__GGUF_EMBD, ti->type) || k % tt->blk)
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor %s (%s, rows of %zu) cannot be made fp16", name,
                           bitnet_tensor_type_name(ti->type), k);
    j.type = ti->type, j.src = (const uint8_t *)ti->data, j.total = n * k, j.blk = tt->blk, j.bytes = tt->bytes;
    if (ti->bytes / tt->bytes < j.total / tt->blk) return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor %s is short", name);
    j.dst = (uint16_t *)bitnet__malloc(n * k * sizeof *j.dst);
    BITNET__TRY(bitnet__model_own(m, j.dst));
    bitnet__parallel(bitnet__f16_worker, &j);
    *out = j.dst;
    return BITNET_OK;
}

/* A float matrix that is already ternary: every nonzero |w| the same a (bitnet.cpp's converter
   writes 1bitLLM's matrices so, w = code * a, for llama-quantize to make I2_S with scale max|w|).
   Read in its own type (F32, F16 or BF16: the magnitude's bits compared, no float copy); its codes
   go to rows kp apart in q, and a to scale. 0 when it holds other values (latent weights), only
   zeros, or a non-finite value. One function a width (T, its magnitude's bits MAG: the sign bit is
   the one above), branch-free loops so the compiler vectorizes them; inf: the type's infinity. */
#define BITNET__TERNARY_BITS(NAME, T, MAG)                                                                              \
    static uint32_t NAME(const T *p, size_t n, size_t k, size_t kp, uint32_t inf, int8_t *q) {                         \
        T a = 0, bad = 0;                                                                                              \
        size_t i, c;                                                                                                   \
        for (i = 0; i < n * k && !a; i++) a = (T)(p[i] & (MAG));                                                        \
        for (; i < n * k; i++) bad |= (T)((p[i] & (MAG)) != 0 && (p[i] & (MAG)) != a);                                   \
        if (bad || !a || a >= inf) return 0;                                                                           \
        for (i = 0; i < n; i++)                                                                                        \
            for (c = 0; c < k; c++) q[i * kp + c] = (int8_t)((p[i * k + c] & (MAG)) ? (p[i * k + c] > (MAG) ? -1 : 1) : 0); \
        return a;                                                                                                      \
    }
BITNET__TERNARY_BITS(bitnet__ternary_bits16, uint16_t, 0x7fffu)
BITNET__TERNARY_BITS(bitnet__ternary_bits32, uint32_t, 0x7fffffffu)
#undef BITNET__TERNARY_BITS
static int bitnet__float_ternary(const void *src, bitnet_tensor_type t, size_t n, size_t k, size_t kp, int8_t *q, float *scale) {
    uint32_t a;
    if (t == BITNET_TENSOR_F32) {
        if (!(a = bitnet__ternary_bits32((const uint32_t *)src, n, k, kp, 0x7f800000u, q))) return 0;
        memcpy(scale, &a, 4);
    } else {
        if (!(a = bitnet__ternary_bits16((const uint16_t *)src, n, k, kp, t == BITNET_TENSOR_F16 ? 0x7c00u : 0x7f80u, q))) return 0;
        *scale = t == BITNET_TENSOR_F16 ? bitnet_fp16_to_fp32((uint16_t)a) : bitnet_bf16_to_fp32((uint16_t)a);
    }
    return 1;
}

/* A ternary [n][k] matrix as I2_S [np][kp] (np >= n, kp >= k a multiple of 128: zero rows and
   columns past n and k): I2_S in place; TQ1_0 / TQ2_0 repacked to I2_S; F32, F16 or BF16 quantized
   here: already ternary (bitnet__float_ternary) with its own scale, else as unquantized latent
   weights with the per-tensor absmean. Only float matrices are padded (I2_S and TQ rows are whole
   blocks). */
static bitnet_result bitnet__tensor_i2s(bitnet_model *m, const char *name, const bitnet_tensor_info *ti, size_t n,
                                        size_t k, size_t np, size_t kp, const void **out) {
    size_t need = bitnet_i2s_bytes(np, kp), nk = n * k, i;
    const float *f;
    int8_t *q;
    void *packed;
    float scale;
    bitnet_result r;
    int pad = np != n || kp != k, is_float = ti->type == BITNET_TENSOR_F32 || ti->type == BITNET_TENSOR_F16 ||
                                                 ti->type == BITNET_TENSOR_BF16;
    if (need == 0 || (pad && !is_float))
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "GGUF: tensor %s: [%zu, %zu] cannot be I2_S (rows of whole 128-weight blocks)%s",
                           name, k, n, pad ? "; only a float file's matrices are padded to them" : "");
    if (ti->type == BITNET_TENSOR_I2_S) {
        if (ti->bytes < need)
            return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: I2_S tensor %s holds %llu bytes; [%zu, %zu] needs %zu", name,
                               (unsigned long long)ti->bytes, k, n, need);
        *out = ti->data;
        return BITNET_OK;
    }
    if (ti->type == BITNET_TENSOR_TQ1_0 || ti->type == BITNET_TENSOR_TQ2_0) {
        if (!(packed = bitnet__malloc(need))) return BITNET_ERR_OUT_OF_MEMORY;
        if ((r = bitnet_i2s_from_tq(ti->type, ti->data, (size_t)ti->bytes, n, k, packed, need)) != BITNET_OK) {
            char why[256];
            bitnet__strlcpy(why, sizeof why, bitnet_last_error());
            bitnet__free(packed);
            return bitnet__err(r, "GGUF: tensor %s: %s", name, why);
        }
        BITNET__TRY(bitnet__model_own(m, packed));
        *out = packed;
        return BITNET_OK;
    }
    if (!is_float)
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "GGUF: tensor %s has type %d; expected I2_S (36), TQ1_0 (34), TQ2_0 (35), "
                           "F32, F16 or BF16", name, (int)ti->type);
    if (ti->bytes < nk * (ti->type == BITNET_TENSOR_F32 ? 4 : 2) || ((uintptr_t)ti->data & (ti->type == BITNET_TENSOR_F32 ? 3 : 1)))
        return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor %s is short or misaligned", name);
    q = (int8_t *)bitnet__calloc(np, kp);
    packed = bitnet__malloc(need);
    if (!q || !packed) {
        bitnet__free(q);
        bitnet__free(packed);
        return BITNET_ERR_OUT_OF_MEMORY;
    }
    r = BITNET_OK;
    if (!bitnet__float_ternary(ti->data, ti->type, n, k, kp, q, &scale)) {
        r = bitnet__tensor_f32(m, name, ti, nk, &f);
        if (r == BITNET_OK) r = bitnet_quantize_ternary(f, nk, q, &scale);
        for (i = n; r == BITNET_OK && kp != k && i-- > 0;) { /* rows to their padded places, last first; zeros between */
            memmove(q + i * kp, q + i * k, k);
            memset(q + i * kp + k, 0, kp - k);
        }
        /* the float copy (when one was made) is no longer needed: it is the last owned buffer */
        if (r == BITNET_OK && ti->type != BITNET_TENSOR_F32 && m->n_owned && m->owned[m->n_owned - 1] == (void *)f)
            bitnet__free(m->owned[--m->n_owned]);
    }
    if (r == BITNET_OK) r = bitnet_i2s_pack(q, np, kp, scale, packed, need);
    bitnet__free(q);
    if (r != BITNET_OK) {
        bitnet__free(packed);
        return r;
    }
    bitnet__release_mapped(m->gguf, ti->data, (size_t)ti->bytes); /* the floats' pages: read once (a 3B f16 file is 7 GB) */
    BITNET__TRY(bitnet__model_own(m, packed));
    *out = packed;
    return BITNET_OK;
}

/* "llama" GGUFs hold q and k with each head's rows permuted (llama.cpp's converter, for its pairwise
   RoPE: row 2i + j of a head is the Hugging Face row j * head_dim / 2 + i). A copy of the I2_S
   matrix in the Hugging Face order, so the forward's rotate-half RoPE applies (on every backend). */
static bitnet_result bitnet__unpermute_rope(bitnet_model *m, const void **w, int heads, int hd, int k) {
    const size_t rb = (size_t)k / 4, rows = (size_t)heads * (size_t)hd, bytes = bitnet_i2s_bytes(rows, (size_t)k);
    const uint8_t *src = (const uint8_t *)*w;
    uint8_t *dst = (uint8_t *)bitnet__malloc(bytes);
    int h, i, j;
    BITNET__TRY(bitnet__model_own(m, dst));
    for (h = 0; h < heads; h++)
        for (i = 0; i < hd / 2; i++)
            for (j = 0; j < 2; j++)
                memcpy(dst + ((size_t)h * hd + (size_t)j * (hd / 2) + i) * rb, src + ((size_t)h * hd + 2 * (size_t)i + j) * rb, rb);
    memcpy(dst + rows * rb, src + rows * rb, bytes - rows * rb); /* the scale's tail */
    *w = dst;
    return BITNET_OK;
}

/* Tensors by bitnet.cpp's names, after bitnet__gguf_check_bitnet (>>gguf) has checked the
   architecture, hparams, special ids, and every tensor's presence, type and shape. */
static bitnet_result bitnet__model_from_gguf(bitnet_model *m, const bitnet_model_desc *d) {
    const bitnet_gguf *g = m->gguf;
    bitnet_model_info hp;
    bitnet_model_weights w;
    bitnet_layer_weights *lw;
    bitnet_tensor_info ti;
    const bitnet_tensor_info *tp;
    char name[96];
    int32_t l;
    int i;
    BITNET__TRY(bitnet__gguf_check_bitnet(g, &hp));
    memset(&w, 0, sizeof w);
    snprintf(m->info.arch, sizeof m->info.arch, "%s", hp.arch);
    m->info.chat_template = hp.chat_template;
    w.n_vocab = hp.n_vocab, w.dim = hp.dim, w.n_layers = hp.n_layers, w.n_heads = hp.n_heads;
    w.n_kv_heads = hp.n_kv_heads, w.head_dim = hp.head_dim, w.ffn_dim = hp.ffn_dim, w.n_ctx_train = hp.n_ctx_train;
    w.rope_theta = hp.rope_theta, w.norm_eps = hp.norm_eps, w.bos = hp.bos, w.eos = hp.eos, w.eot = hp.eot;
    w.ffn_act = hp.ffn_act, w.no_sub_norms = !hp.sub_norms;
    bitnet__progress(d, 0.02f);
    BITNET__TRY(bitnet_gguf_find_tensor(g, "token_embd.weight", &ti));
    if (bitnet__ttype_of((uint32_t)ti.type)->blk > 1) { /* a block type: rows made fp16 when read (bitnet__emb_row) */
        const bitnet__ttype *tt = bitnet__ttype_of((uint32_t)ti.type);
        m->emb_q = (const uint8_t *)ti.data, m->emb_type = ti.type, m->emb_row = (size_t)w.dim / tt->blk * tt->bytes;
        if (ti.bytes / m->emb_row < (uint64_t)w.n_vocab) return bitnet__err(BITNET_ERR_CORRUPT, "GGUF: tensor token_embd.weight is short");
    } else {
        BITNET__TRY(bitnet__tensor_f16(m, "token_embd.weight", &ti, (size_t)w.n_vocab, (size_t)w.dim, &w.tok_embd));
    }
    if ((tp = bitnet__gguf_tensor_named(g, "output.weight")) != NULL) /* optional: tied to the embedding without it */
        BITNET__TRY(bitnet__tensor_f16(m, "output.weight", tp, (size_t)w.n_vocab, (size_t)w.dim, &w.output));
    BITNET__TRY(bitnet_gguf_find_tensor(g, "output_norm.weight", &ti));
    BITNET__TRY(bitnet__tensor_f32(m, "output_norm.weight", &ti, (size_t)w.dim, &w.output_norm));
    if ((tp = bitnet__gguf_tensor_named(g, "rope_freqs.weight")) != NULL) /* optional: Llama 3.1's RoPE scaling */
        BITNET__TRY(bitnet__tensor_f32(m, "rope_freqs.weight", tp, (size_t)hp.head_dim / 2, &w.rope_freqs));
    lw = (bitnet_layer_weights *)bitnet__calloc((size_t)w.n_layers, sizeof *lw);
    BITNET__TRY(bitnet__model_own(m, lw));
    w.layers = lw;
    for (l = 0; l < w.n_layers; l++) {
        /* (the check made n_heads * head_dim = dim) */
        const size_t sz[4] = {1, (size_t)w.dim, (size_t)w.n_kv_heads * (size_t)w.head_dim, (size_t)w.ffn_dim};
        const size_t szp[4] = {1, (size_t)w.dim, (size_t)w.n_kv_heads * (size_t)w.head_dim, (size_t)bitnet__ffn_k(w.ffn_dim)};
        for (i = 0; i < (int)BITNET__N_LAYER_PARTS; i++) {
            const struct bitnet__layer_part *P = &bitnet__layer_parts[i];
            char *field = (char *)&lw[l] + P->field;
            if (P->sub && !hp.sub_norms) continue;
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, P->name);
            BITNET__TRY(bitnet_gguf_find_tensor(g, name, &ti));
            if (P->role == BITNET__GGUF_FLOAT) BITNET__TRY(bitnet__tensor_f32(m, name, &ti, sz[P->ne0], (const float **)field));
            else BITNET__TRY(bitnet__tensor_i2s(m, name, &ti, sz[P->ne1], sz[P->ne0], szp[P->ne1], szp[P->ne0], (const void **)field));
        }
        if (!hp.sub_norms) { /* llama.cpp's converter permuted q and k for its pairwise RoPE: back to rotate-half */
            BITNET__TRY(bitnet__unpermute_rope(m, &lw[l].wq, w.n_heads, w.head_dim, w.dim));
            BITNET__TRY(bitnet__unpermute_rope(m, &lw[l].wk, w.n_kv_heads, w.head_dim, w.dim));
        }
        bitnet__progress(d, 0.02f + 0.08f * (float)(l + 1) / (float)w.n_layers);
    }
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.model") >= 0) BITNET__TRY(bitnet_tokenizer_from_gguf(g, &m->tok));
    return bitnet__model_build(m, &w, d);
}

/* The GGUF of desc: mapped, parsed from the caller's memory, or read whole (no_mmap). */
static bitnet_result bitnet__model_open_gguf(bitnet_model *m, const bitnet_model_desc *desc) {
    FILE *f;
    long sz = -1;
    bitnet_result r = BITNET_OK;
    if (desc->data) return bitnet_gguf_open_memory(desc->data, desc->size, &m->gguf);
    if (!desc->no_mmap) return bitnet_gguf_open(desc->path, &m->gguf);
    if (!(f = fopen(desc->path, "rb"))) return bitnet__err(BITNET_ERR_IO, "cannot open %s: %s", desc->path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
        r = bitnet__err(BITNET_ERR_IO, "cannot size %s: %s", desc->path, strerror(errno));
    else if (!(m->file_copy = bitnet__malloc(sz ? (size_t)sz : 1))) r = BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) {
        bitnet__hugepages(m->file_copy, (size_t)sz);
        if (fread(m->file_copy, 1, (size_t)sz, f) != (size_t)sz)
            r = bitnet__err(BITNET_ERR_IO, "cannot read %s: %s", desc->path, ferror(f) ? strerror(errno) : "the file shrank while read");
    }
    fclose(f);
    return r == BITNET_OK ? bitnet_gguf_open_memory(m->file_copy, (size_t)sz, &m->gguf) : r;
}

BITNET_API bitnet_result bitnet_model_load(const bitnet_model_desc *desc, bitnet_model **out) {
    bitnet_model *m;
    bitnet_result r;
    BITNET__CHECK_PTR(desc);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    if (!desc->path == !desc->data)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_model_load: give a path or data (one of them)");
    m = (bitnet_model *)bitnet__calloc(1, sizeof *m);
    if (!m) return BITNET_ERR_OUT_OF_MEMORY;
    bitnet__progress(desc, 0.0f);
    r = bitnet__resolve_backend(desc->backend, &m->info); /* before reading a large file for nothing */
    if (r == BITNET_OK) r = bitnet__model_open_gguf(m, desc);
    if (r == BITNET_OK) r = bitnet__model_from_gguf(m, desc);
    if (r != BITNET_OK) {
        bitnet_model_free(m);
        return r;
    }
    *out = m;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_model_get_info(const bitnet_model *m, bitnet_model_info *out) {
    BITNET__CHECK_PTR(m);
    BITNET__CHECK_PTR(out);
    *out = m->info;
    return BITNET_OK;
}

BITNET_API const bitnet_tokenizer *bitnet_model_tokenizer(const bitnet_model *m) { return m ? m->tok : NULL; }

/* ---- sessions ---------------------------------------------------------------------------------- */

BITNET_API void bitnet_session_free(bitnet_session *s) {
    if (!s) return;
#if defined(BITNET__GPU_FORWARD)
    if (s->gpu) bitnet__gpu_session_free(s);
#endif
    bitnet__free(s->k_cache);
    bitnet__free(s->v_cache);
    bitnet__free(s->rope);
    bitnet__free(s->x);
    bitnet__free(s->xb);
    bitnet__free(s->q);
    bitnet__free(s->k);
    bitnet__free(s->v);
    bitnet__free(s->hg);
    bitnet__free(s->hu);
    bitnet__free(s->aq);
    bitnet__free(s->as);
    bitnet__free(s->asum);
    bitnet__free(s->logits);
    bitnet__free(s->tokens);
    bitnet__gvoc_free(&s->voc);
    bitnet__free(s);
}

/* The CPU buffers: the fp16 KV cache and the activations of one chunk. */
static bitnet_result bitnet__cpu_session_init(bitnet_session *s) {
    const bitnet_model *m = s->m;
    size_t kv, B = (size_t)s->n_batch, dim = (size_t)m->info.dim, ff = (size_t)m->ffn_k, qd = (size_t)m->q_dim;
    size_t wide = BITNET__MAX(BITNET__MAX(dim, qd), ff);
    s->n_kv = (s->n_ctx + 15) / 16 * 16;
    if (!bitnet__mul_size((size_t)m->info.n_layers * (size_t)m->kv_dim, (size_t)s->n_kv, &kv) || kv > SIZE_MAX / 2)
        return bitnet__err(BITNET_ERR_OVERFLOW, "session: the KV cache of %d positions overflows", (int)s->n_ctx);
    s->k_cache = (uint16_t *)bitnet__malloc(kv * 2);
    s->v_cache = (uint16_t *)bitnet__malloc(kv * 2);
    s->x = (float *)bitnet__malloc(B * dim * sizeof(float));
    s->xb = (float *)bitnet__malloc(B * BITNET__MAX(dim, qd) * sizeof(float));
    s->q = (float *)bitnet__malloc(B * qd * sizeof(float));
    s->k = (float *)bitnet__malloc(B * (size_t)m->kv_dim * sizeof(float));
    s->v = (float *)bitnet__malloc(B * (size_t)m->kv_dim * sizeof(float));
    s->hg = (float *)bitnet__malloc(B * ff * sizeof(float));
    s->hu = (float *)bitnet__malloc(B * ff * sizeof(float));
    s->aq = (int8_t *)bitnet__malloc(B * wide);
    s->as = (float *)bitnet__malloc(B * sizeof(float));
    s->asum = (int32_t *)bitnet__malloc(B * sizeof(int32_t));
    if (!s->k_cache || !s->v_cache || !s->x || !s->xb || !s->q || !s->k || !s->v || !s->hg || !s->hu || !s->aq || !s->as || !s->asum)
        return BITNET_ERR_OUT_OF_MEMORY;
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_session_create(bitnet_model *m, const bitnet_session_desc *desc, bitnet_session **out) {
    bitnet_session *s;
    bitnet_result r = BITNET_OK;
    int32_t n_ctx;
    int p, i, hd;
    BITNET__CHECK_PTR(m);
    BITNET__CHECK_PTR(out);
    *out = NULL;
    n_ctx = desc && desc->n_ctx ? desc->n_ctx : m->info.n_ctx_train;
    if (n_ctx <= 0 || n_ctx > INT32_MAX - 16)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_session_create: n_ctx %d is out of range", (int)n_ctx);
    if (desc && (desc->n_batch < 0 || desc->n_batch > BITNET__MAX_BATCH))
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_session_create: n_batch %d is not in [0, %d]", (int)desc->n_batch,
                           BITNET__MAX_BATCH);
    { /* The whole context's host memory against the machine's, before any of it is allocated: the
         rope table is written in full below, and K and V (CPU) are each one block, so with overcommit a
         context too large would pass each allocation's own check and get the process killed. */
        double hd_b = (double)m->info.head_dim * 4.0, kv_b = 2.0 * 2.0 * m->info.n_layers * m->kv_dim;
        double need = (double)n_ctx * (hd_b + 4.0 + (m->info.backend == BITNET_BACKEND_CPU ? kv_b : 0.0));
        uint64_t mem = bitnet__phys_mem();
        if (mem && need > (double)mem)
            return bitnet__err(BITNET_ERR_OUT_OF_MEMORY, "bitnet_session_create: a context of %d positions needs %.1f GiB of host "
                               "memory (K/V cache and rope table); this machine has %.1f GiB", (int)n_ctx,
                               need / 1073741824.0, (double)mem / 1073741824.0);
    }
    s = (bitnet_session *)bitnet__calloc(1, sizeof *s);
    if (!s) return BITNET_ERR_OUT_OF_MEMORY;
    s->m = m;
    s->n_ctx = n_ctx;
    s->n_batch = BITNET__MIN(n_ctx, desc && desc->n_batch ? desc->n_batch : BITNET__MAX_BATCH);
    hd = m->info.head_dim;
    s->rope = (float *)bitnet__calloc((size_t)n_ctx, (size_t)hd * sizeof(float));
    s->logits = (float *)bitnet__malloc((size_t)m->info.n_vocab * sizeof(float));
    s->tokens = (int32_t *)bitnet__malloc((size_t)n_ctx * sizeof(int32_t));
    if (!s->rope || !s->logits || !s->tokens) r = BITNET_ERR_OUT_OF_MEMORY;
    else {
        /* cos and sin of pos * theta^(-2i/head_dim) / rope_ff[i], one table for both backends. The
           angle is computed in float32 the way Hugging Face (and llama.cpp) compute it: the fp16 KV
           cache and the int8 activations turn even last-bit differences in it into visible logit
           differences, so matching the reference arithmetic matters more than a rounder angle.
           rope_ff (Llama 3.1's scaling) divides the frequency, as Hugging Face's scaled inv_freq. */
        for (i = 0; i < hd / 2; i++) {
            float inv_freq = 1.0f / powf(m->info.rope_theta, (float)(2 * i) / (float)hd);
            if (m->rope_ff) inv_freq /= m->rope_ff[i];
            for (p = 0; p < n_ctx; p++) {
                float a = (float)p * inv_freq;
                s->rope[(size_t)p * hd + 2 * i] = cosf(a);
                s->rope[(size_t)p * hd + 2 * i + 1] = sinf(a);
            }
        }
#if defined(BITNET__GPU_FORWARD)
        if (m->info.backend == BITNET_BACKEND_CUDA) r = bitnet__gpu_session_init(s);
        else
#endif
            r = bitnet__cpu_session_init(s);
    }
    if (r != BITNET_OK) {
        bitnet_session_free(s);
        return r;
    }
    *out = s;
    return BITNET_OK;
}

BITNET_API void bitnet_session_reset(bitnet_session *s) {
    if (!s) return;
    s->pos = 0;
    s->has_logits = 0;
    s->chat_pos = 0, s->chat_state = 0;
}

BITNET_API int32_t bitnet_session_pos(const bitnet_session *s) { return s ? s->pos : 0; }

static bitnet_result bitnet__check_tokens(const bitnet_session *s, const int32_t *tokens, size_t n) {
    size_t i;
    if ((size_t)(s->n_ctx - s->pos) < n)
        return bitnet__err(BITNET_ERR_CONTEXT_FULL, "%zu tokens do not fit: the session holds %d of its %d positions",
                           n, (int)s->pos, (int)s->n_ctx);
    for (i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->m->info.n_vocab)
            return bitnet__err(BITNET_ERR_BAD_TOKEN, "token %d (at %zu) is outside the vocabulary [0, %d)", (int)tokens[i], i,
                               (int)s->m->info.n_vocab);
    return BITNET_OK;
}

/* Checked tokens, in chunks of n_batch. logits as in bitnet_session_eval; the last row also goes
   to s->logits. */
static bitnet_result bitnet__eval(bitnet_session *s, const int32_t *tokens, size_t n, float *logits, int all) {
    size_t off, nv = (size_t)s->m->info.n_vocab;
    int nvtx = bitnet__nvtx_depth();
    s->has_logits = 0;
    bitnet__nvtx_push(n > 1 ? "bitnet prompt" : "bitnet decode");
    for (off = 0; off < n; off += (size_t)s->n_batch) {
        int mm = (int)BITNET__MIN((size_t)s->n_batch, n - off), last = off + (size_t)mm == n;
        float *dst = all ? (logits ? logits + off * nv : NULL) : (last && logits ? s->logits : NULL);
        bitnet_result r;
#if defined(BITNET__GPU_FORWARD)
        if (s->m->info.backend == BITNET_BACKEND_CUDA) r = bitnet__gpu_forward(s, tokens + off, mm, dst, all && logits);
        else
#endif
            r = bitnet__cpu_forward(s, tokens + off, mm, dst, all && logits);
        bitnet__nvtx_unwind(nvtx + 1); /* layer ranges an error left open */
        if (r != BITNET_OK) return bitnet__nvtx_unwind(nvtx), r;
        memcpy(s->tokens + s->pos, tokens + off, (size_t)mm * sizeof *tokens);
        s->pos += mm;
    }
    bitnet__nvtx_unwind(nvtx);
    if (logits) {
        if (all) memcpy(s->logits, logits + (n - 1) * nv, nv * sizeof(float));
        else if (logits != s->logits) memcpy(logits, s->logits, nv * sizeof(float));
        s->has_logits = 1;
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_session_eval(bitnet_session *s, const int32_t *tokens, size_t n, float *logits,
                                             int all_logits) {
    BITNET__CHECK_PTR(s);
    BITNET__CHECK_PTR(tokens);
    if (n == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_session_eval: no tokens");
    BITNET__TRY(bitnet__check_tokens(s, tokens, n));
    s->chat_pos = -1; /* ends a reply's bookkeeping (bitnet_chat, which calls this, sets it again) */
    return bitnet__eval(s, tokens, n, logits, all_logits);
}

BITNET_API bitnet_result bitnet_session_discard(bitnet_session *s, int32_t first, int32_t n) {
    const int chat = s && s->chat_pos == s->pos; /* (a conversation in step with the session stays so) */
    int32_t rest;
    int32_t *tail = NULL;
    bitnet_result r = BITNET_OK;
    BITNET__CHECK_PTR(s);
    if (first < 0 || n < 0 || first > s->pos || n > s->pos - first)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_session_discard: tokens [%d, %d + %d) are not inside the text of %d",
                           (int)first, (int)first, (int)n, (int)s->pos);
    if (n == 0) return BITNET_OK;
    rest = s->pos - first - n;
    if (rest && !(tail = (int32_t *)bitnet__malloc((size_t)rest * sizeof *tail))) return BITNET_ERR_OUT_OF_MEMORY;
    if (rest) memcpy(tail, s->tokens + first + n, (size_t)rest * sizeof *tail);
    s->pos = first; /* (the cache before first holds) */
    s->has_logits = 0;
    if (rest) r = bitnet__eval(s, tail, (size_t)rest, s->logits, 0);
    bitnet__free(tail);
    if (r == BITNET_OK && chat) s->chat_pos = s->pos;
    return r;
}

BITNET_API const int32_t *bitnet_session_tokens(const bitnet_session *s) { return s ? s->tokens : NULL; }

/* ---- >>state: a session's state as bytes ---------------------------------------------------------
   Little-endian, as every platform this runs on: a 64-byte head (below), then the text int32 [pos],
   K fp16 [n_layers][n_kv_heads][pos][head_dim] and V the same. Both backends read and write this
   layout (bitnet__cpu_kv_io, bitnet__gpu_kv_io), a kv head at a time. */
#define BITNET__STATE_VERSION 1
typedef struct bitnet__state_head {
    char magic[8];                            /* "bitnetST" */
    uint32_t version, n_layers, n_kv_heads, head_dim, n_vocab, dim, pos;
    int32_t chat_state, chat_last;            /* a bitnet_chat conversation in step with the text; else -1 */
    uint32_t zero;
    uint64_t model;                           /* bitnet_model's fingerprint */
    uint64_t sum;                             /* FNV-1a of everything after the head */
} bitnet__state_head;
typedef char bitnet__state_head_is_64[sizeof(bitnet__state_head) == 64 ? 1 : -1];

static size_t bitnet__state_kv(const bitnet_session *s, int32_t pos) { /* bytes of K (or V) for pos positions */
    const bitnet_model_info *in = &s->m->info;
    return (size_t)in->n_layers * (size_t)in->n_kv_heads * (size_t)pos * (size_t)in->head_dim * 2;
}
static bitnet_result bitnet__kv_io(bitnet_session *s, int l, int h, uint16_t *k, uint16_t *v, int n, int put) {
#if defined(BITNET__GPU_FORWARD)
    if (s->m->info.backend == BITNET_BACKEND_CUDA) return bitnet__gpu_kv_io(s, l, h, k, v, n, put);
#endif
    bitnet__cpu_kv_io(s, l, h, k, v, n, put);
    return BITNET_OK;
}
/* K and V of every layer and kv head between the session and a state's two areas */
static bitnet_result bitnet__state_kv_io(bitnet_session *s, unsigned char *k, unsigned char *v, int32_t pos, int put) {
    const bitnet_model_info *in = &s->m->info;
    const size_t head = (size_t)pos * (size_t)in->head_dim * 2;
    int l, h;
    for (l = 0; l < in->n_layers; l++)
        for (h = 0; h < in->n_kv_heads; h++) {
            const size_t at = ((size_t)l * (size_t)in->n_kv_heads + (size_t)h) * head;
            BITNET__TRY(bitnet__kv_io(s, l, h, (uint16_t *)(void *)(k + at), (uint16_t *)(void *)(v + at), pos, put));
        }
    return BITNET_OK;
}

BITNET_API size_t bitnet_session_state_size(const bitnet_session *s) {
    return s ? sizeof(bitnet__state_head) + (size_t)s->pos * 4 + 2 * bitnet__state_kv(s, s->pos) : 0;
}

BITNET_API bitnet_result bitnet_session_state_get(const bitnet_session *s, void *buf, size_t size) {
    const size_t need = bitnet_session_state_size(s);
    unsigned char *b = (unsigned char *)buf, *kv, *tmp = NULL;
    bitnet__state_head hd;
    bitnet_result r;
    BITNET__CHECK_PTR(s);
    BITNET__CHECK_PTR(buf);
    if (size < need) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_session_state_get: %zu bytes; the state takes %zu", size, need);
    memset(&hd, 0, sizeof hd);
    memcpy(hd.magic, "bitnetST", 8);
    hd.version = BITNET__STATE_VERSION, hd.n_layers = (uint32_t)s->m->info.n_layers, hd.n_kv_heads = (uint32_t)s->m->info.n_kv_heads;
    hd.head_dim = (uint32_t)s->m->info.head_dim, hd.n_vocab = (uint32_t)s->m->info.n_vocab, hd.dim = (uint32_t)s->m->info.dim;
    hd.pos = (uint32_t)s->pos, hd.model = s->m->fingerprint;
    hd.chat_state = s->chat_pos == s->pos ? s->chat_state : -1, hd.chat_last = hd.chat_state >= 0 ? s->chat_last : -1;
    kv = b + sizeof hd + (size_t)s->pos * 4;
    memcpy(b + sizeof hd, s->tokens, (size_t)s->pos * 4);
    /* fp16 rows straight into buf, or through a copy where buf is not 2-byte aligned */
    if (((uintptr_t)kv & 1) && !(tmp = (unsigned char *)bitnet__malloc(2 * bitnet__state_kv(s, s->pos) + 1)))
        return BITNET_ERR_OUT_OF_MEMORY;
    /* (reading the cache does not change the session; the GPU's copy only orders after its work) */
    r = bitnet__state_kv_io((bitnet_session *)(uintptr_t)s, tmp ? tmp : kv, (tmp ? tmp : kv) + bitnet__state_kv(s, s->pos), s->pos, 0);
    if (r == BITNET_OK && tmp) memcpy(kv, tmp, 2 * bitnet__state_kv(s, s->pos));
    bitnet__free(tmp);
    if (r != BITNET_OK) return r;
    hd.sum = bitnet__fnv(BITNET__FNV_INIT, b + sizeof hd, need - sizeof hd);
    memcpy(b, &hd, sizeof hd);
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_session_state_set(bitnet_session *s, const void *buf, size_t size) {
    const unsigned char *b = (const unsigned char *)buf;
    const bitnet_model_info *in;
    bitnet__state_head hd;
    size_t need, i;
    unsigned char *copy = NULL, *kv;
    bitnet_result r;
    BITNET__CHECK_PTR(s);
    BITNET__CHECK_PTR(buf);
    in = &s->m->info;
    bitnet_session_reset(s);
    if (size < sizeof hd) return bitnet__err(BITNET_ERR_TRUNCATED, "session state: %zu bytes, less than its 64-byte head", size);
    memcpy(&hd, b, sizeof hd);
    if (memcmp(hd.magic, "bitnetST", 8) != 0) return bitnet__err(BITNET_ERR_INVALID_ARG, "session state: not a bitnet.h session state");
    if (hd.version != BITNET__STATE_VERSION)
        return bitnet__err(BITNET_ERR_BAD_VERSION, "session state: version %u (this build reads %d)", hd.version, BITNET__STATE_VERSION);
    if (hd.n_layers != (uint32_t)in->n_layers || hd.n_kv_heads != (uint32_t)in->n_kv_heads || hd.head_dim != (uint32_t)in->head_dim ||
        hd.n_vocab != (uint32_t)in->n_vocab || hd.dim != (uint32_t)in->dim || hd.model != s->m->fingerprint)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "session state: of another model (%u layers, dim %u, %u kv heads of %u, vocabulary "
                           "%u; this one: %d, %d, %d of %d, %d%s)", hd.n_layers, hd.dim, hd.n_kv_heads, hd.head_dim, hd.n_vocab,
                           (int)in->n_layers, (int)in->dim, (int)in->n_kv_heads, (int)in->head_dim, (int)in->n_vocab,
                           hd.model != s->m->fingerprint ? "; other weights" : "");
    if (hd.pos > (uint32_t)s->n_ctx)
        return bitnet__err(BITNET_ERR_CONTEXT_FULL, "session state: %u positions; the session holds %d", hd.pos, (int)s->n_ctx);
    need = sizeof hd + (size_t)hd.pos * 4 + 2 * bitnet__state_kv(s, (int32_t)hd.pos);
    if (size < need) return bitnet__err(BITNET_ERR_TRUNCATED, "session state: %zu bytes of its %zu", size, need);
    if (bitnet__fnv(BITNET__FNV_INIT, b + sizeof hd, need - sizeof hd) != hd.sum)
        return bitnet__err(BITNET_ERR_CORRUPT, "session state: the checksum does not match (damaged bytes)");
    if (hd.chat_state < -1 || hd.chat_state > 2 || hd.chat_last < -1 || hd.chat_last >= in->n_vocab)
        return bitnet__err(BITNET_ERR_CORRUPT, "session state: conversation state %d, last token %d", (int)hd.chat_state, (int)hd.chat_last);
    memcpy(s->tokens, b + sizeof hd, (size_t)hd.pos * 4);
    for (i = 0; i < hd.pos; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= in->n_vocab)
            return bitnet__err(BITNET_ERR_BAD_TOKEN, "session state: token %d at %zu is outside the vocabulary", (int)s->tokens[i], i);
    kv = (unsigned char *)(uintptr_t)(b + sizeof hd + (size_t)hd.pos * 4); /* (read only: put) */
    if ((uintptr_t)kv & 1) { /* fp16 rows read in place, or from a copy where buf is not 2-byte aligned */
        if (!(copy = (unsigned char *)bitnet__malloc(2 * bitnet__state_kv(s, (int32_t)hd.pos) + 1))) return BITNET_ERR_OUT_OF_MEMORY;
        memcpy(copy, kv, 2 * bitnet__state_kv(s, (int32_t)hd.pos));
        kv = copy;
    }
    r = bitnet__state_kv_io(s, kv, kv + bitnet__state_kv(s, (int32_t)hd.pos), (int32_t)hd.pos, 1);
    bitnet__free(copy);
    if (r != BITNET_OK) return r;
    s->pos = (int32_t)hd.pos;
    s->chat_pos = hd.chat_state >= 0 ? s->pos : -1;
    s->chat_state = hd.chat_state >= 0 ? hd.chat_state : 0, s->chat_last = hd.chat_last;
    return BITNET_OK;
}

/* ---- generation ------------------------------------------------------------------------------- */

#if defined(BITNET__GPU_FORWARD)
/* Whether a token after the n-th generated one is wanted (max_tokens, out's room, the context):
   a step for it may be launched before the n-th is handed on. */
static int bitnet__gen_more(const bitnet_session *s, const bitnet_generate_params *d, const int32_t *out, size_t cap,
                            size_t n) {
    return !(d->max_tokens && n >= (size_t)d->max_tokens) && !(out && n >= cap) && s->pos < s->n_ctx;
}
#endif

BITNET_API bitnet_result bitnet_generate(bitnet_session *s, const int32_t *prompt, size_t n_prompt,
                                         const bitnet_generate_params *p, int32_t *out, size_t cap,
                                         bitnet_generate_stats *stats) {
    bitnet_generate_params d;
    bitnet_generate_stats st;
    int32_t stop_default[2];
    const int32_t *stop;
    size_t n_stop, i;
    uint64_t rng;
    double t0;
    int gpu_greedy = 0, gpu_topk = 0, gpu_draw = 0, gpu_gm = 0;
    bitnet__gm gm;
    bitnet_result r = BITNET_OK;
    memset(&gm, 0, sizeof gm);
    BITNET__CHECK_PTR(s);
    if (n_prompt && !prompt) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_generate: prompt is NULL");
    if (out && cap == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_generate: out has no room (cap 0)");
    memset(&d, 0, sizeof d);
    if (p) d = *p;
    if (d.max_tokens < 0) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_generate: max_tokens %d", (int)d.max_tokens);
    if (d.n_stop && !d.stop_tokens) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_generate: stop_tokens is NULL");
    BITNET__TRY(bitnet__sampler_check(&d.sampler, s->m->info.n_vocab, "bitnet_generate"));
    BITNET__TRY(bitnet__check_tokens(s, prompt ? prompt : stop_default, n_prompt));
    if (!n_prompt && !s->has_logits)
        return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_generate: no prompt, and nothing evaluated to continue from");
    if (d.grammar && !s->m->tok) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_generate: a grammar needs the model's tokenizer");
    s->chat_pos = -1; /* as bitnet_session_eval */
    memset(&st, 0, sizeof st);
    if (d.stop_tokens) stop = d.stop_tokens, n_stop = d.n_stop;
    else {
        n_stop = 0;
        if (s->m->info.eos >= 0) stop_default[n_stop++] = s->m->info.eos;
        if (s->m->info.eot >= 0) stop_default[n_stop++] = s->m->info.eot;
        stop = stop_default;
    }
    rng = bitnet_rng_seed(d.sampler.seed ? d.sampler.seed : bitnet__default_seed());
#if defined(BITNET__GPU_FORWARD)
    {
        const int topk_env = bitnet__env_int("BITNET_GPU_TOPK", 0, 1, -1);
        /* (under a grammar the host samples from the whole row) */
        const int cuda = s->m->info.backend == BITNET_BACKEND_CUDA && !d.grammar, greedy = bitnet__sampler_greedy(&d.sampler);
        /* greedy on the GPU: the head kernel leaves the argmax on the device, so no logits move */
        gpu_greedy = cuda && greedy && !bitnet__sampler_adjusts(&d.sampler);
        /* top-k sampling, greedy with the penalty, and min-p without a top-k the device keeps: the
           device picks the k best, so only those move (BITNET_GPU_TOPK=0: the whole row, for tests) */
        gpu_topk = cuda && !gpu_greedy &&
                   (greedy || (d.sampler.top_k > 1 && d.sampler.top_k <= BITNET__GPU_TOPK_MAX) || d.sampler.min_p > 0) &&
                   topk_env != 0;
        /* all but min-p with no top-k the device keeps: drawn on the device (BITNET_GPU_TOPK=1: on the host) */
        gpu_draw = gpu_topk && (greedy || (d.sampler.top_k > 0 && d.sampler.top_k <= BITNET__GPU_TOPK_MAX)) &&
                   topk_env != 1;
        /* a grammar where the sampler keeps the best: the device's 128 best first (BITNET_GPU_TOPK=0: the row) */
        gpu_gm = s->m->info.backend == BITNET_BACKEND_CUDA && d.grammar && (greedy || d.sampler.top_k > 0 || d.sampler.min_p > 0) &&
                 topk_env != 0;
    }
#endif
    t0 = bitnet__now();
    if (d.grammar && (r = bitnet__gm_init(&gm, d.grammar, s->m->tok)) != BITNET_OK) goto end;
    gm.voc = &s->voc; /* (the session's, for its every generation) */
    if (n_prompt && (r = bitnet__eval(s, prompt, n_prompt, s->logits, 0)) != BITNET_OK) goto end;
#if defined(BITNET__GPU_FORWARD)
    if (gpu_draw && (!((bitnet__gsession *)s->gpu)->pin || !((bitnet__gsession *)s->gpu)->have_next)) gpu_draw = 0;
    if (gpu_draw && (r = bitnet__gpu_draw_begin(s, &d.sampler, &rng)) != BITNET_OK) goto end;
#endif
    st.n_prompt = n_prompt;
    st.prompt_seconds = bitnet__now() - t0;
    t0 = bitnet__now();
    for (;;) {
        int32_t tok;
        const char *piece = NULL;
        size_t len = 0;
        int is_stop = 0, launched = 0;
#if defined(BITNET__GPU_FORWARD)
        /* the step that feeds tok may start before tok is read, unless it will not be needed */
        if (gpu_greedy || gpu_draw)
            r = bitnet__gpu_next_token(s, bitnet__gen_more(s, &d, out, cap, st.n_generated + 1), &tok, &launched);
        else if (gpu_topk)
            r = bitnet__gpu_sample(s, &d.sampler, s->tokens, (size_t)s->pos, &rng, &tok);
        else
#endif
        if (gm.g) {
            if (bitnet__gm_finished(&gm)) break; /* (a grammar of the empty text) */
#if defined(BITNET__GPU_FORWARD)
            if (gpu_gm) r = bitnet__gpu_gm_sample(s, &gm, &d.sampler, s->tokens, (size_t)s->pos, &rng, stop, n_stop, &tok);
            else
#endif
                r = bitnet__gm_sample(&gm, s->logits, s->m->info.n_vocab, &d.sampler, s->tokens, (size_t)s->pos, &rng, stop, n_stop, &tok);
        } else
            r = bitnet_sample(s->logits, s->m->info.n_vocab, &d.sampler, s->tokens, (size_t)s->pos, &rng, &tok);
        s->has_logits = 0; /* sampling rewrote them */
        if (r != BITNET_OK) goto end;
        for (i = 0; i < n_stop; i++) is_stop |= tok == stop[i];
        if (is_stop) break;
        if (out) out[st.n_generated] = tok;
        st.n_generated++;
#if defined(BITNET__GPU_FORWARD)
        /* a sampled token's step starts before the host hands the token on (as greedy's does), unless
           no further token is wanted; if on_token stops here, the step is thrown away as greedy's is */
        if (gpu_topk && !gpu_draw && bitnet__gen_more(s, &d, out, cap, st.n_generated)) {
            if ((r = bitnet__gpu_decode(s, tok, s->pos)) != BITNET_OK) goto end;
            launched = 1;
        }
#endif
        if (d.on_token) {
            if (s->m->tok && bitnet_token_piece(s->m->tok, tok, &piece, &len) != BITNET_OK) piece = NULL, len = 0;
            if (d.on_token(tok, piece, len, d.user)) break;
        }
        if ((d.max_tokens && st.n_generated >= (size_t)d.max_tokens) || (out && st.n_generated >= cap)) break;
        if (gm.g && bitnet__gm_finished(&gm)) break; /* the grammar's sentence is whole and nothing may follow */
        if (s->pos >= s->n_ctx) {
            bitnet__log(BITNET_LOG_WARN, "generation stopped: the context of %d positions is full", (int)s->n_ctx);
            break;
        }
        if (launched) s->tokens[s->pos++] = tok; /* its step is on the device already */
        else if ((r = bitnet__eval(s, &tok, 1, gpu_greedy || gpu_topk || gpu_gm ? NULL : s->logits, 0)) != BITNET_OK) goto end;
    }
    st.gen_seconds = bitnet__now() - t0;
    if (stats) *stats = st;
end:
    bitnet__gm_free(&gm);
#if defined(BITNET__GPU_FORWARD)
    if (gpu_draw) ((bitnet__gsession *)s->gpu)->draw = 0; /* (other evals: the plain step) */
#else
    (void)gpu_draw, (void)gpu_gm;
#endif
    return r;
}

/* ---- chat: one message at a time on a session (bitnet_chat) --------------------------------- */

/* In front of the caller's token callback: keeps the last token a reply emitted */
typedef struct bitnet__chat_cb { bitnet_token_fn fn; void *user; int32_t last; } bitnet__chat_cb;
static int bitnet__chat_token(int32_t token, const char *piece, size_t len, void *user) {
    bitnet__chat_cb *c = (bitnet__chat_cb *)user;
    c->last = token;
    return c->fn ? c->fn(token, piece, len, c->user) : 0;
}

BITNET_API bitnet_result bitnet_chat(bitnet_session *s, const char *role, const char *content,
                                     const bitnet_generate_params *p, int32_t *out, size_t cap,
                                     bitnet_generate_stats *stats) {
    const bitnet__chat_tmpl *t;
    bitnet_chat_message msg;
    bitnet_generate_params gp;
    bitnet_generate_stats st;
    bitnet__chat_cb cb;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, head, n = 0, k;
    int32_t pos0;
    int reply, state;
    bitnet_result r;
    BITNET__CHECK_PTR(s);
    BITNET__CHECK_PTR(role);
    BITNET__CHECK_PTR(content);
    reply = strcmp(role, "user") == 0;
    if (!reply && strcmp(role, "system") != 0)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_chat: role '%s' (user or system)", role);
    if (!s->m->tok) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_chat: the model has no tokenizer");
    t = bitnet__chat_tmpl_of(s->m->info.chat_template);
    if (!t) return bitnet__err(BITNET_ERR_INVALID_STATE, "bitnet_chat: chat template %d", (int)s->m->info.chat_template);
    state = s->pos == s->chat_pos ? s->chat_state : 0;
    msg.role = role, msg.content = content;
    /* the text: the end of a message closing the reply, then the message (its template's BOS text
       left out: BOS goes in as the vocabulary's token, only at the start of the session); sized up
       front from bitnet_chat_format's parts, so no size query reports an error */
    head = state ? strlen(t->end) : 0;
    len = strlen(t->bos) + strlen(t->open[0]) + strlen(t->open[1]) + strlen(t->end) + strlen(t->open[2]) + strlen(content);
    text = (char *)bitnet__malloc(head + len + 1);
    if (!text) return BITNET_ERR_OUT_OF_MEMORY;
    memcpy(text, t->end, head);
    r = bitnet_chat_format((bitnet_chat_template)s->m->info.chat_template, &msg, 1, reply, text + head, len + 1, &len);
    if (r == BITNET_OK) memmove(text + head, text + head + strlen(t->bos), len - strlen(t->bos) + 1);
    k = (state == 2) + (s->pos == 0 && t->bos[0] && s->m->tok->bos >= 0); /* the reply's last token, or BOS, first */
    if (r == BITNET_OK) {
        size_t most = bitnet_tokenize_bound(s->m->tok, strlen(text));
        ids = most < SIZE_MAX / sizeof *ids - 1 ? (int32_t *)bitnet__malloc((k + most) * sizeof *ids) : NULL;
        r = ids ? bitnet_tokenize(s->m->tok, text, strlen(text), 0, 1, ids + k, most, &n) : BITNET_ERR_OUT_OF_MEMORY;
    }
    if (r == BITNET_OK && k) ids[0] = state == 2 ? s->chat_last : s->m->tok->bos;
    pos0 = s->pos;
    if (r == BITNET_OK && !reply) r = bitnet_session_eval(s, ids, k + n, NULL, 0), state = 0;
    else if (r == BITNET_OK) {
        memset(&gp, 0, sizeof gp);
        if (p) gp = *p;
        cb.fn = gp.on_token, cb.user = gp.user, cb.last = -1;
        gp.on_token = bitnet__chat_token, gp.user = &cb;
        r = bitnet_generate(s, ids, k + n, &gp, out, cap, &st);
        if (r == BITNET_OK) { /* every emitted token was evaluated but the last one where no stop token ended it */
            state = st.n_generated > (size_t)(s->pos - pos0) - (k + n) ? 2 : 1;
            s->chat_last = cb.last;
            if (stats) *stats = st;
        }
    }
    if (r == BITNET_OK) s->chat_pos = s->pos, s->chat_state = state;
    else if (s->pos != pos0) s->chat_pos = -1; /* (a refusal before any work keeps the conversation as it was) */
    bitnet__free(text);
    bitnet__free(ids);
    return r;
}

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
/* Ranges nest per thread; the depth lets a caller close what an early error return left open. */
static BITNET__TLS int bitnet__nvtx_open;
BITNET__UNUSED static void bitnet__nvtx_push(const char *name) {
    bitnet_gpu_nvtx_push(name);
    bitnet__nvtx_open++;
}
BITNET__UNUSED static void bitnet__nvtx_pop(void) {
    if (bitnet__nvtx_open <= 0) return;
    bitnet_gpu_nvtx_pop();
    bitnet__nvtx_open--;
}
BITNET__UNUSED static int bitnet__nvtx_depth(void) { return bitnet__nvtx_open; }
BITNET__UNUSED static void bitnet__nvtx_unwind(int depth) {
    while (bitnet__nvtx_open > depth) bitnet__nvtx_pop();
}

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
    bitnet__jw_knum(&w, "load_avg_1m", r->load_avg);
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
    BITNET__TRY(bitnet__json_parse(&j, json, len, 256));
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
    /* added within 1.0: receipts written before it have none (unknown) */
    out->load_avg = bitnet__json_get(&j, o, "load_avg_1m") >= 0 ? bitnet__rc_rd_num(&p, o, "host.", "load_avg_1m", -1, 1e6) : -1;
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

/* A busy host slows a CPU run: the receipt says how busy it was. */
static double bitnet__rc_load_avg(void) {
    double v = -1;
#if defined(__linux__)
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        char buf[64];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        int whole = 0, frac = 0, digits = 0;
        size_t i = 0;
        buf[n] = 0;
        /* "4.94 3.91 ...": parsed by hand, the locale's decimal point may not be '.' */
        for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) whole = whole * 10 + (buf[i] - '0');
        if (i && i < n && buf[i] == '.')
            for (i++; i < n && buf[i] >= '0' && buf[i] <= '9' && digits < 2; i++, digits++) frac = frac * 10 + (buf[i] - '0');
        if (i) v = whole + frac / (digits == 2 ? 100.0 : digits == 1 ? 10.0 : 1.0);
        fclose(f);
    }
#endif
    return v;
}

static const char *bitnet__rc_backend_name(bitnet_backend b) {
    static const char *names[] = {"auto", "cpu", "cuda"};
    return ((unsigned)b < 3) ? names[b] : "unknown";
}

/* "13.0" from the runtime's 1000*major + 10*minor. */
BITNET__UNUSED static void bitnet__rc_version(int v, char *out, size_t cap) {
    if (v > 0) snprintf(out, cap, "%d.%d", v / 1000, (v % 1000) / 10);
    else snprintf(out, cap, "unknown");
}

/* The device block and peak device memory, asked of the GPU runtime for the device that holds
   the model's weights: name, compute capability, the arch the JIT builds for it, driver and NVRTC
   versions, and the high-water marks of the model's and the session's memory pools. A CPU run,
   or a build without the GPU forward, has no device block. */
static void bitnet__receipt_gpu(const bitnet_model *m, const bitnet_session *s, bitnet_receipt *r) {
#if defined(BITNET__GPU_FORWARD)
    const bitnet__gmodel *gm = (const bitnet__gmodel *)m->gpu;
    const bitnet__gsession *gs = s ? (const bitnet__gsession *)s->gpu : NULL;
    bitnet_gpu_device_info di;
    bitnet_gpu_backends be;
    bitnet_gpu_pool_stats ps;
    if (m->info.backend != BITNET_BACKEND_CUDA || !gm || bitnet_gpu_device_info_get(gm->device, &di) != BITNET_OK) return;
    r->has_gpu = 1;
    snprintf(r->gpu_name, sizeof r->gpu_name, "%s", di.name);
    r->gpu_cc_major = di.cc_major;
    r->gpu_cc_minor = di.cc_minor;
    snprintf(r->gpu_arch, sizeof r->gpu_arch, "%s", di.jit_target);
    memset(&be, 0, sizeof be);
    bitnet_gpu_backends_get(&be);
    bitnet__rc_version(be.cuda_driver_version, r->gpu_driver_version, sizeof r->gpu_driver_version);
    bitnet__rc_version(be.nvrtc_version, r->nvrtc_version, sizeof r->nvrtc_version);
    r->peak_device_bytes = 0;
    if (gm->gpu && bitnet_gpu_pool_stats_get(gm->gpu, &ps) == BITNET_OK) r->peak_device_bytes += ps.reserved_peak;
    if (gs && gs->gpu && bitnet_gpu_pool_stats_get(gs->gpu, &ps) == BITNET_OK) r->peak_device_bytes += ps.reserved_peak;
    bitnet_clear_error();
#else
    (void)m; (void)s; (void)r;
#endif
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
    out->load_avg = bitnet__rc_load_avg();
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
    bitnet__receipt_gpu(m, s, out);
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

/* >>convert =================================================================================== */
/* bitnet_convert_hf: a Hugging Face BitNet checkpoint folder to a GGUF file in bitnet.cpp's
   layout, so the loader has one format to read. Every file is untrusted: sizes, offsets, shapes,
   ids and types are checked before use, and a failure names the file and the key or tensor. */

/* ---- safetensors: u64 header length, a JSON header (name -> dtype, shape, data_offsets), data - */
enum { BITNET__ST_U8, BITNET__ST_I8, BITNET__ST_F16, BITNET__ST_BF16, BITNET__ST_F32, BITNET__ST_OTHER };

typedef struct bitnet__st_tensor {
    const char *name;       /* in its file's header strings */
    int dtype, n_dims;
    uint64_t shape[4];
    const uint8_t *data;
    size_t bytes;
} bitnet__st_tensor;

typedef struct bitnet__st_file {
    void *map, *owned;
    size_t size;
    bitnet__json hdr;
} bitnet__st_file;

typedef struct bitnet__st {
    bitnet__st_file *f;
    size_t n_f, f_cap;
    bitnet__st_tensor *t;
    size_t n_t, t_cap;
} bitnet__st;

static void bitnet__st_free(bitnet__st *st) {
    size_t i;
    for (i = 0; i < st->n_f; i++) {
        bitnet__file_unmap(st->f[i].map, st->f[i].owned, st->f[i].size);
        bitnet__json_free(&st->f[i].hdr);
    }
    bitnet__free(st->f);
    bitnet__free(st->t);
    memset(st, 0, sizeof *st);
}

static int bitnet__st_dtype(const char *s, size_t *esize) {
    static const struct { const char *name; int dtype; size_t size; } types[] = {
        {"U8", BITNET__ST_U8, 1}, {"I8", BITNET__ST_I8, 1}, {"F16", BITNET__ST_F16, 2}, {"BF16", BITNET__ST_BF16, 2},
        {"F32", BITNET__ST_F32, 4}, {"BOOL", BITNET__ST_OTHER, 1}, {"F8_E4M3", BITNET__ST_OTHER, 1},
        {"F8_E5M2", BITNET__ST_OTHER, 1}, {"I16", BITNET__ST_OTHER, 2}, {"U16", BITNET__ST_OTHER, 2},
        {"I32", BITNET__ST_OTHER, 4}, {"U32", BITNET__ST_OTHER, 4}, {"F64", BITNET__ST_OTHER, 8},
        {"I64", BITNET__ST_OTHER, 8}, {"U64", BITNET__ST_OTHER, 8}};
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(s, types[i].name) == 0) { *esize = types[i].size; return types[i].dtype; }
    return -1;
}

static int bitnet__st_mul(uint64_t *acc, uint64_t v) {
    if (v && *acc > UINT64_MAX / v) return 0;
    *acc *= v;
    return 1;
}

/* Adds one safetensors file's tensors to st. */
static bitnet_result bitnet__st_open(bitnet__st *st, const char *path) {
    bitnet__st_file *f;
    const uint8_t *base;
    uint64_t hlen;
    int32_t i;
    BITNET__TRY(bitnet__grow((void **)&st->f, &st->f_cap, st->n_f + 1, sizeof *st->f));
    f = &st->f[st->n_f];
    memset(f, 0, sizeof *f);
    BITNET__TRY(bitnet__file_map(path, 0, &f->map, &f->owned, &f->size));
    st->n_f++;
    base = (const uint8_t *)(f->map ? f->map : f->owned);
    if (f->size < 8) return bitnet__err(BITNET_ERR_TRUNCATED, "%s: %zu bytes, shorter than a safetensors header", path, f->size);
    hlen = bitnet__le64(base);
    if (hlen > f->size - 8 || hlen > ((uint64_t)100 << 20))
        return bitnet__err(BITNET_ERR_TRUNCATED, "%s: a header of %llu bytes in a file of %zu", path, (unsigned long long)hlen, f->size);
    {
        bitnet_result r = bitnet__json_parse(&f->hdr, (const char *)base + 8, (size_t)hlen, 1 << 20);
        if (r != BITNET_OK) return bitnet__err_where(r, path);
    }
    if (f->hdr.nodes[0].type != BITNET__J_OBJ) return bitnet__err(BITNET_ERR_CORRUPT, "%s: the header is not a JSON object", path);
    for (i = f->hdr.nodes[0].first; i >= 0; i = f->hdr.nodes[i].next) {
        const bitnet__json *j = &f->hdr;
        const char *name = j->nodes[i].key;
        int32_t dt = bitnet__json_get(j, i, "dtype"), sh = bitnet__json_get(j, i, "shape"), off = bitnet__json_get(j, i, "data_offsets");
        bitnet__st_tensor t;
        uint64_t elems = 1, o[2];
        size_t esize = 0, k;
        int32_t c;
        if (strcmp(name, "__metadata__") == 0) continue;
        memset(&t, 0, sizeof t);
        t.name = name;
        if (dt < 0 || j->nodes[dt].type != BITNET__J_STR || (t.dtype = bitnet__st_dtype(j->nodes[dt].str, &esize)) < 0)
            return bitnet__err(BITNET_ERR_CORRUPT, "%s: tensor \"%.80s\": no known dtype", path, name);
        if (sh < 0 || j->nodes[sh].type != BITNET__J_ARR || j->nodes[sh].count > 4)
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: tensor \"%.80s\": the shape is not a list of at most 4 sizes", path, name);
        for (c = j->nodes[sh].first; c >= 0; c = j->nodes[c].next) {
            double v = j->nodes[c].num;
            if (j->nodes[c].type != BITNET__J_NUM || !j->nodes[c].is_int || v < 0 || v > 9007199254740992.0 ||
                !bitnet__st_mul(&elems, (uint64_t)v))
                return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: tensor \"%.80s\": bad shape", path, name);
            t.shape[t.n_dims++] = (uint64_t)v;
        }
        if (off < 0 || j->nodes[off].type != BITNET__J_ARR || j->nodes[off].count != 2)
            return bitnet__err(BITNET_ERR_CORRUPT, "%s: tensor \"%.80s\": data_offsets is not two numbers", path, name);
        for (k = 0, c = j->nodes[off].first; c >= 0; c = j->nodes[c].next, k++) {
            if (j->nodes[c].type != BITNET__J_NUM || !j->nodes[c].is_int || j->nodes[c].num < 0 ||
                j->nodes[c].num > 9007199254740992.0)
                return bitnet__err(BITNET_ERR_CORRUPT, "%s: tensor \"%.80s\": bad data_offsets", path, name);
            o[k] = (uint64_t)j->nodes[c].num;
        }
        if (o[0] > o[1] || o[1] > f->size - 8 - hlen)
            return bitnet__err(BITNET_ERR_TRUNCATED, "%s: tensor \"%.80s\": bytes %llu..%llu beyond the file's %llu of data", path,
                               name, (unsigned long long)o[0], (unsigned long long)o[1], (unsigned long long)(f->size - 8 - hlen));
        if (!bitnet__st_mul(&elems, esize) || elems != o[1] - o[0])
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "%s: tensor \"%.80s\": %llu bytes for its shape and dtype, %llu stored", path,
                               name, (unsigned long long)elems, (unsigned long long)(o[1] - o[0]));
        t.data = base + 8 + hlen + o[0];
        t.bytes = (size_t)(o[1] - o[0]);
        BITNET__TRY(bitnet__grow((void **)&st->t, &st->t_cap, st->n_t + 1, sizeof *st->t));
        st->t[st->n_t++] = t;
    }
    return BITNET_OK;
}

static const bitnet__st_tensor *bitnet__st_find(const bitnet__st *st, const char *name) {
    size_t i;
    for (i = 0; i < st->n_t; i++)
        if (strcmp(st->t[i].name, name) == 0) return &st->t[i];
    return NULL;
}

/* Elements [from, from + n) of a float tensor as fp32 (the SIMD converters where aligned). */
static void bitnet__st_floats(const bitnet__st_tensor *t, size_t from, size_t n, float *out) {
    const size_t es = t->dtype == BITNET__ST_F32 ? 4 : 2;
    const uint8_t *p = t->data + from * es;
    size_t i;
    if (t->dtype == BITNET__ST_F32) { memcpy(out, p, n * 4); return; }
    if ((uintptr_t)p % 2 == 0) {
        if (t->dtype == BITNET__ST_F16) bitnet_convert_fp16_to_fp32((const uint16_t *)(const void *)p, out, n);
        else bitnet_convert_bf16_to_fp32((const uint16_t *)(const void *)p, out, n);
        return;
    }
    for (i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        out[i] = t->dtype == BITNET__ST_F16 ? bitnet_fp16_to_fp32(h) : bitnet_bf16_to_fp32(h);
    }
}

/* ---- the checkpoint ------------------------------------------------------------------------- */
typedef struct bitnet__cv {
    const char *dir;
    char path[4096];
    bitnet__json cfg, tok, tcfg; /* tcfg: tokenizer_config.json, empty when absent */
    bitnet__st st;
    int dim, ffn, layers, heads, kv_heads, head_dim, ctx, vocab, tied, quant_config, inverse_scale, bos, eos, eot;
    int llama;                   /* a ternary LLaMA (model_type "llama"): silu FFN, no sub-norms, GGUF arch "llama" */
    const char *pre;             /* tokenizer.ggml.pre */
    float eps, theta;
    float rope_factor, rope_lo, rope_hi, rope_orig; /* Llama 3.1's RoPE scaling ("llama3"); rope_factor 0: none */
    bitnet_gguf_str *tokens, *merges;
    int32_t *types;
    size_t n_merges;
    char *strs; /* [PADn] names and joined merges */
} bitnet__cv;

static const char *bitnet__cv_file(bitnet__cv *cv, const char *name) {
    snprintf(cv->path, sizeof cv->path, "%s/%s", cv->dir, name);
    return cv->path;
}

/* A JSON file of the folder; absent and optional: an empty j and OK. */
static bitnet_result bitnet__cv_json(bitnet__cv *cv, const char *name, int optional, int32_t max_members, bitnet__json *j) {
    void *map, *owned;
    size_t size;
    bitnet_result r;
    FILE *f;
    memset(j, 0, sizeof *j);
    bitnet__cv_file(cv, name);
    if (optional && !(f = fopen(cv->path, "rb"))) return BITNET_OK;
    if (optional) fclose(f);
    BITNET__TRY(bitnet__file_map(cv->path, 1, &map, &owned, &size));
    r = bitnet__json_parse(j, (const char *)owned, size, max_members);
    bitnet__file_unmap(map, owned, size);
    if (r != BITNET_OK) return bitnet__err_where(r, cv->path);
    if (j->nodes[0].type != BITNET__J_OBJ) return bitnet__err(BITNET_ERR_CORRUPT, "%s: not a JSON object", cv->path);
    return BITNET_OK;
}

/* config.json's integer key: def when absent (def < 0: required); in [lo, hi]. */
static bitnet_result bitnet__cv_int(const bitnet__json *j, int32_t obj, const char *key, int def, int lo, int hi, int *out) {
    int32_t id = bitnet__json_get(j, obj, key);
    if (id < 0 || j->nodes[id].type == BITNET__J_NULL) {
        if (def < 0) return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: no \"%s\"", key);
        *out = def;
        return BITNET_OK;
    }
    if (j->nodes[id].type != BITNET__J_NUM || !j->nodes[id].is_int || j->nodes[id].num < lo || j->nodes[id].num > hi)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: \"%s\" is not an integer in [%d, %d]", key, lo, hi);
    *out = (int)j->nodes[id].num;
    return BITNET_OK;
}

static bitnet_result bitnet__cv_float(const bitnet__json *j, int32_t obj, const char *key, float def, float *out) {
    int32_t id = bitnet__json_get(j, obj, key);
    if (id < 0 || j->nodes[id].type == BITNET__J_NULL) { *out = def; return BITNET_OK; }
    if (j->nodes[id].type != BITNET__J_NUM || !(j->nodes[id].num > 0) || j->nodes[id].num > 1e30)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: \"%s\" is not a positive number", key);
    *out = (float)j->nodes[id].num;
    return BITNET_OK;
}

static const char *bitnet__cv_str(const bitnet__json *j, int32_t obj, const char *key) {
    int32_t id = bitnet__json_get(j, obj, key);
    return id >= 0 && j->nodes[id].type == BITNET__J_STR ? j->nodes[id].str : NULL;
}

/* Llama 3.1's RoPE scaling (rope_type "llama3", in rope_scaling or transformers 5's rope_parameters):
   its four numbers, all required as transformers requires them; any other type is refused. */
static bitnet_result bitnet__cv_rope_scaling(bitnet__cv *cv, int32_t rs) {
    const bitnet__json *j = &cv->cfg;
    const char *rt = bitnet__cv_str(j, rs, "rope_type"), *ty = bitnet__cv_str(j, rs, "type");
    int orig;
    if (!rt) rt = ty;
    if (rt && strcmp(rt, "default") == 0) return BITNET_OK;
    if (!rt || strcmp(rt, "llama3") != 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: rope_type \"%s\"; bitnet.h has plain RoPE and Llama 3.1's \"llama3\"",
                           rt ? rt : "(none)");
    if (bitnet__json_get(j, rs, "factor") < 0 || bitnet__json_get(j, rs, "low_freq_factor") < 0 ||
        bitnet__json_get(j, rs, "high_freq_factor") < 0 || bitnet__json_get(j, rs, "original_max_position_embeddings") < 0)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: llama3 RoPE scaling needs factor, low_freq_factor, high_freq_factor "
                                                    "and original_max_position_embeddings");
    BITNET__TRY(bitnet__cv_float(j, rs, "factor", 1.0f, &cv->rope_factor));
    BITNET__TRY(bitnet__cv_float(j, rs, "low_freq_factor", 1.0f, &cv->rope_lo));
    BITNET__TRY(bitnet__cv_float(j, rs, "high_freq_factor", 4.0f, &cv->rope_hi));
    BITNET__TRY(bitnet__cv_int(j, rs, "original_max_position_embeddings", 8192, 1, 1 << 24, &orig));
    cv->rope_orig = (float)orig;
    if (!(cv->rope_hi > cv->rope_lo))
        return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: RoPE high_freq_factor %g is not above low_freq_factor %g",
                           (double)cv->rope_hi, (double)cv->rope_lo);
    return BITNET_OK;
}

/* rope_freqs.weight: each frequency's divisor, 1 for short wavelengths, factor for long ones and a
   smooth step between (transformers' _compute_llama3_parameters, llama.cpp's converter). */
static void bitnet__cv_rope_freqs(const bitnet__cv *cv, float *out) {
    const double pi = 3.14159265358979323846;
    int i;
    for (i = 0; i < cv->head_dim / 2; i++) {
        double freq = 1.0 / pow((double)cv->theta, 2.0 * i / cv->head_dim), wavelen = 2 * pi / freq, d;
        if (wavelen < cv->rope_orig / cv->rope_hi) d = 1;
        else if (wavelen > cv->rope_orig / cv->rope_lo) d = cv->rope_factor;
        else {
            double smooth = (cv->rope_orig / wavelen - cv->rope_lo) / (cv->rope_hi - cv->rope_lo);
            d = 1 / ((1 - smooth) / cv->rope_factor + smooth);
        }
        out[i] = (float)d;
    }
}

static bitnet_result bitnet__cv_config(bitnet__cv *cv) {
    const bitnet__json *j = &cv->cfg;
    const char *type = bitnet__cv_str(j, 0, "model_type"), *act = bitnet__cv_str(j, 0, "hidden_act");
    int32_t q = bitnet__json_get(j, 0, "quantization_config"), rs = bitnet__json_get(j, 0, "rope_scaling"), id;
    int hd;
    cv->llama = type && strcmp(type, "llama") == 0;
    if (!type || (strcmp(type, "bitnet") != 0 && !cv->llama))
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: model_type \"%s\"; bitnet.h converts \"bitnet\" (BitNetForCausalLM) and "
                                                   "ternary \"llama\"", type ? type : "(none)");
    if (cv->llama && q < 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: a LLaMA without a bitnet quantization_config is no ternary model");
    if (act && strcmp(act, cv->llama ? "silu" : "relu2") != 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: hidden_act \"%s\"; %s has \"%s\"", act,
                           cv->llama ? "a ternary LLaMA" : "BitNet b1.58", cv->llama ? "silu" : "relu2");
    if (rs >= 0 && j->nodes[rs].type == BITNET__J_OBJ) BITNET__TRY(bitnet__cv_rope_scaling(cv, rs));
    else if (rs >= 0 && j->nodes[rs].type != BITNET__J_NULL) return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: rope_scaling is not an object");
    BITNET__TRY(bitnet__cv_int(j, 0, "hidden_size", -1, 1, 1 << 16, &cv->dim));
    BITNET__TRY(bitnet__cv_int(j, 0, "intermediate_size", -1, 1, 1 << 18, &cv->ffn));
    BITNET__TRY(bitnet__cv_int(j, 0, "num_hidden_layers", -1, 1, 4096, &cv->layers));
    BITNET__TRY(bitnet__cv_int(j, 0, "num_attention_heads", -1, 1, 4096, &cv->heads));
    BITNET__TRY(bitnet__cv_int(j, 0, "num_key_value_heads", cv->heads, 1, cv->heads, &cv->kv_heads));
    BITNET__TRY(bitnet__cv_int(j, 0, "max_position_embeddings", 2048, 1, 1 << 24, &cv->ctx));
    BITNET__TRY(bitnet__cv_int(j, 0, "head_dim", cv->dim / cv->heads, 1, 1 << 16, &cv->head_dim));
    BITNET__TRY(bitnet__cv_float(j, 0, "rms_norm_eps", 1e-5f, &cv->eps));
    if ((id = bitnet__json_get(j, 0, "rope_parameters")) >= 0) { /* transformers 5 */
        if (j->nodes[id].type != BITNET__J_OBJ) return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: rope_parameters is not an object");
        if (bitnet__cv_str(j, id, "rope_type")) BITNET__TRY(bitnet__cv_rope_scaling(cv, id));
        BITNET__TRY(bitnet__cv_float(j, id, "rope_theta", 10000.0f, &cv->theta));
    }
    if (bitnet__json_get(j, 0, "rope_theta") >= 0 || id < 0) BITNET__TRY(bitnet__cv_float(j, 0, "rope_theta", 10000.0f, &cv->theta));
    hd = cv->head_dim;
    if (cv->heads % cv->kv_heads || hd * cv->heads != cv->dim || hd % 2)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: %d heads of %d (%d key-value heads) for hidden_size %d", cv->heads,
                           hd, cv->kv_heads, cv->dim);
    if (cv->dim % BITNET_I2S_BLOCK || cv->ffn % BITNET_I2S_BLOCK)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: hidden_size %d and intermediate_size %d; I2_S rows are multiples of %d",
                           cv->dim, cv->ffn, BITNET_I2S_BLOCK);
    id = bitnet__json_get(j, 0, "tie_word_embeddings");
    cv->tied = id < 0 || j->nodes[id].type == BITNET__J_TRUE;
    if (q >= 0) { /* transformers' BitNetQuantConfig: BitLinear (the default) divides by weight_scale, AutoBitLinear multiplies */
        const char *lc = bitnet__cv_str(j, q, "linear_class"), *qm = bitnet__cv_str(j, q, "quant_method");
        int32_t rn = bitnet__json_get(j, q, "use_rms_norm"), nc = bitnet__json_get(j, q, "modules_to_not_convert"), m;
        if (qm && strcmp(qm, "bitnet") != 0)
            return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: quant_method \"%s\"; bitnet.h converts \"bitnet\"", qm);
        if (lc && strcmp(lc, "bitlinear") != 0 && strcmp(lc, "autobitlinear") != 0)
            return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: linear_class \"%s\"", lc);
        if (rn >= 0 && j->nodes[rn].type == BITNET__J_TRUE)
            return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: use_rms_norm (an RMSNorm inside each BitLinear) is not BitNet b1.58's");
        for (m = nc >= 0 && j->nodes[nc].type == BITNET__J_ARR ? j->nodes[nc].first : -1; m >= 0; m = j->nodes[m].next)
            if (j->nodes[m].type != BITNET__J_STR || strcmp(j->nodes[m].str, "lm_head") != 0)
                return bitnet__err(BITNET_ERR_UNSUPPORTED, "config.json: modules_to_not_convert names more than lm_head");
        cv->inverse_scale = !lc || strcmp(lc, "bitlinear") == 0;
        cv->quant_config = 1;
    }
    return BITNET_OK;
}

/* A special token's id: config.json's KEY (a number, or a list whose first is taken), else the
   id of tokenizer_config.json's string for it. */
static bitnet_result bitnet__cv_special(bitnet__cv *cv, const char *key, const char *tcfg_key, int *out) {
    int32_t id = bitnet__json_get(&cv->cfg, 0, key), i;
    const char *s = cv->tcfg.n ? bitnet__cv_str(&cv->tcfg, 0, tcfg_key) : NULL;
    if (id >= 0 && cv->cfg.nodes[id].type == BITNET__J_ARR) id = cv->cfg.nodes[id].first;
    if (id >= 0 && cv->cfg.nodes[id].type != BITNET__J_NULL) {
        const bitnet__jnode *nd = &cv->cfg.nodes[id];
        if (nd->type != BITNET__J_NUM || !nd->is_int || nd->num < 0 || nd->num >= cv->vocab)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: %s is not an id below %d", key, cv->vocab);
        *out = (int)nd->num;
        return BITNET_OK;
    }
    for (i = 0; s && i < cv->vocab; i++)
        if (cv->tokens[i].len == strlen(s) && memcmp(cv->tokens[i].ptr, s, (size_t)cv->tokens[i].len) == 0) {
            *out = i;
            return BITNET_OK;
        }
    return bitnet__err(BITNET_ERR_BAD_METADATA, "config.json: no %s (nor tokenizer_config.json's %s in the vocabulary)", key, tcfg_key);
}

/* LLaMA 3's split pattern, as its tokenizer.json writes it (the "llama-bpe" pre-tokenizer). */
static const char bitnet__llama3_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Byte-level BPE with one of the two pre-tokenizers bitnet.h implements, as a Sequence of steps:
     LLaMA 3 ("llama-bpe"): a Split on its pattern, then a ByteLevel that does not split again;
     Falcon 3 ("falcon3"): Punctuation (Contiguous), a ByteLevel on GPT-2's pattern, then single
     digits, the three steps llama.cpp's "falcon3" patterns stand for.
   Anything else would tokenize differently, so it is refused. *pre: the GGUF's tokenizer.ggml.pre. */
static bitnet_result bitnet__cv_pretokenizer(const bitnet__json *j, const char **pre_out) {
    int32_t pre = bitnet__json_get(j, 0, "pre_tokenizer"), norm = bitnet__json_get(j, 0, "normalizer"), seq, i;
    char steps[8] = "";
    int n = 0;
    const char *t;
    if (norm >= 0 && j->nodes[norm].type != BITNET__J_NULL)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.json: a normalizer; bitnet.h reads byte-level BPE without one");
    t = pre >= 0 ? bitnet__cv_str(j, pre, "type") : NULL;
    seq = t && strcmp(t, "Sequence") == 0 ? bitnet__json_get(j, pre, "pretokenizers") : -1;
    for (i = seq >= 0 && j->nodes[seq].type == BITNET__J_ARR ? j->nodes[seq].first : -1; i >= 0 && n < 7; i = j->nodes[i].next) {
        const char *pt = bitnet__cv_str(j, i, "type"), *bh = bitnet__cv_str(j, i, "behavior");
        int32_t pat = bitnet__json_get(j, i, "pattern"), ur = bitnet__json_get(j, i, "use_regex"), ap = bitnet__json_get(j, i, "add_prefix_space");
        int32_t dg = bitnet__json_get(j, i, "individual_digits");
        const char *rx = pat >= 0 ? bitnet__cv_str(j, pat, "Regex") : NULL;
        int prefix = ap >= 0 && j->nodes[ap].type == BITNET__J_TRUE;
        char c = '?';
        if (pt && strcmp(pt, "Split") == 0 && rx && strcmp(rx, bitnet__llama3_split) == 0 && bh && strcmp(bh, "Isolated") == 0) c = 'S';
        else if (pt && strcmp(pt, "ByteLevel") == 0 && !prefix && ur >= 0 && j->nodes[ur].type == BITNET__J_FALSE) c = 'B';
        else if (pt && strcmp(pt, "ByteLevel") == 0 && !prefix && (ur < 0 || j->nodes[ur].type == BITNET__J_TRUE)) c = 'G';
        else if (pt && strcmp(pt, "Punctuation") == 0 && bh && strcmp(bh, "Contiguous") == 0) c = 'P';
        else if (pt && strcmp(pt, "Digits") == 0 && dg >= 0 && j->nodes[dg].type == BITNET__J_TRUE) c = 'D';
        steps[n++] = c;
    }
    steps[n] = 0;
    if (strcmp(steps, "SB") == 0) *pre_out = "llama-bpe";
    else if (strcmp(steps, "PGD") == 0) *pre_out = "falcon3";
    else return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.json: the pre-tokenizer is neither LLaMA 3's (a Split on its pattern, "
                                                    "then ByteLevel without use_regex) nor Falcon 3's (Punctuation, ByteLevel, Digits); "
                                                    "bitnet.h would tokenize differently");
    return BITNET_OK;
}

/* tokens (by id, vocab of them: absent ids are "[PADn]", unused), their types and the merges. */
static bitnet_result bitnet__cv_tokenizer(bitnet__cv *cv) {
    const bitnet__json *j = &cv->tok;
    int32_t model = bitnet__json_get(j, 0, "model"), vocab, merges, added, i, bf;
    const char *type = model >= 0 ? bitnet__cv_str(j, model, "type") : NULL;
    size_t strs_len = 0, strs_cap, n_pad = 0;
    int t;
    if (!type || strcmp(type, "BPE") != 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.json: model type \"%s\"; bitnet.h converts \"BPE\"", type ? type : "(none)");
    BITNET__TRY(bitnet__cv_pretokenizer(j, &cv->pre));
    vocab = bitnet__json_get(j, model, "vocab");
    merges = bitnet__json_get(j, model, "merges");
    added = bitnet__json_get(j, 0, "added_tokens");
    bf = bitnet__json_get(j, model, "byte_fallback");
    if (bf >= 0 && j->nodes[bf].type == BITNET__J_TRUE)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.json: byte_fallback; bitnet.h's byte-level BPE has none");
    if (vocab < 0 || j->nodes[vocab].type != BITNET__J_OBJ || merges < 0 || j->nodes[merges].type != BITNET__J_ARR)
        return bitnet__err(BITNET_ERR_CORRUPT, "tokenizer.json: model.vocab is not an object or model.merges not a list");
    if (added >= 0 && j->nodes[added].type != BITNET__J_ARR) return bitnet__err(BITNET_ERR_CORRUPT, "tokenizer.json: added_tokens is not a list");
    cv->tokens = (bitnet_gguf_str *)bitnet__calloc((size_t)cv->vocab, sizeof *cv->tokens);
    cv->types = (int32_t *)bitnet__calloc((size_t)cv->vocab, sizeof *cv->types);
    cv->merges = (bitnet_gguf_str *)bitnet__calloc((size_t)j->nodes[merges].count + 1, sizeof *cv->merges);
    if (!cv->tokens || !cv->types || !cv->merges) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, "convert: the vocabulary's arrays");
    for (i = j->nodes[vocab].first; i >= 0; i = j->nodes[i].next) {
        double v = j->nodes[i].num;
        if (j->nodes[i].type != BITNET__J_NUM || !j->nodes[i].is_int || v < 0 || v >= cv->vocab)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: token \"%.60s\" has no id below the embedding's %d rows",
                               j->nodes[i].key, cv->vocab);
        if (cv->types[(int)v]) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: id %d twice in model.vocab", (int)v);
        cv->tokens[(int)v].ptr = j->nodes[i].key;
        cv->tokens[(int)v].len = strlen(j->nodes[i].key);
        cv->types[(int)v] = 1; /* normal */
    }
    for (i = added >= 0 ? j->nodes[added].first : -1; i >= 0; i = j->nodes[i].next) {
        int32_t idn = bitnet__json_get(j, i, "id"), sp = bitnet__json_get(j, i, "special");
        const char *content = bitnet__cv_str(j, i, "content");
        if (idn < 0 || j->nodes[idn].type != BITNET__J_NUM || !j->nodes[idn].is_int || j->nodes[idn].num < 0 ||
            j->nodes[idn].num >= cv->vocab || !content || !*content)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: an added token without content or an id below %d", cv->vocab);
        t = (int)j->nodes[idn].num;
        if (cv->types[t] > 1) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: id %d added twice", t);
        cv->tokens[t].ptr = content;
        cv->tokens[t].len = strlen(content);
        cv->types[t] = sp >= 0 && j->nodes[sp].type == BITNET__J_TRUE ? 3 : 4; /* control : user-defined, as llama.cpp */
    }
    for (t = 0; t < cv->vocab; t++) n_pad += !cv->types[t];
    strs_cap = n_pad * 16 + 1; /* one buffer for the [PADn] names and the merges given as pairs */
    for (i = j->nodes[merges].first; i >= 0; i = j->nodes[i].next) {
        int32_t c;
        if (j->nodes[i].type == BITNET__J_ARR)
            for (c = j->nodes[i].first; c >= 0; c = j->nodes[c].next) strs_cap += (j->nodes[c].str ? strlen(j->nodes[c].str) : 0) + 1;
    }
    if (!(cv->strs = (char *)bitnet__malloc(strs_cap))) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, "convert: names");
    for (t = 0; t < cv->vocab; t++)
        if (!cv->types[t]) {
            int n = snprintf(cv->strs + strs_len, 16, "[PAD%d]", t);
            cv->tokens[t].ptr = cv->strs + strs_len;
            cv->tokens[t].len = (uint64_t)n;
            strs_len += (size_t)n + 1;
            cv->types[t] = 5; /* unused */
        }
    for (i = j->nodes[merges].first; i >= 0; i = j->nodes[i].next) {
        const bitnet__jnode *m = &j->nodes[i];
        bitnet_gguf_str *out = &cv->merges[cv->n_merges++];
        if (m->type == BITNET__J_STR) { /* "a b" */
            const char *sp = strchr(m->str, ' ');
            if (!sp || sp == m->str || !sp[1] || strchr(sp + 1, ' '))
                return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: merge %zu \"%.60s\" is not two tokens", cv->n_merges - 1, m->str);
            out->ptr = m->str;
            out->len = strlen(m->str);
        } else if (m->type == BITNET__J_ARR && m->count == 2 && j->nodes[m->first].type == BITNET__J_STR &&
                   j->nodes[j->nodes[m->first].next].type == BITNET__J_STR) { /* ["a", "b"], newer tokenizers */
            const char *a = j->nodes[m->first].str, *b = j->nodes[j->nodes[m->first].next].str;
            if (!*a || !*b || strchr(a, ' ') || strchr(b, ' '))
                return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: merge %zu has an empty token or a space", cv->n_merges - 1);
            out->ptr = cv->strs + strs_len;
            out->len = (uint64_t)sprintf(cv->strs + strs_len, "%s %s", a, b);
            strs_len += (size_t)out->len + 1;
        } else {
            return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.json: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", cv->n_merges - 1);
        }
    }
    BITNET__TRY(bitnet__cv_special(cv, "bos_token_id", "bos_token", &cv->bos));
    BITNET__TRY(bitnet__cv_special(cv, "eos_token_id", "eos_token", &cv->eos));
    for (cv->eot = cv->vocab - 1; cv->eot >= 0 && !(cv->tokens[cv->eot].len == 10 && memcmp(cv->tokens[cv->eot].ptr, "<|eot_id|>", 10) == 0);
         cv->eot--) {}
    return BITNET_OK;
}

/* ---- the tensors ------------------------------------------------------------------------------ */
enum { BITNET__CV_NORM, BITNET__CV_F16, BITNET__CV_TERNARY, BITNET__CV_ROPE /* computed: rope_freqs.weight */ };

typedef struct bitnet__cv_job {
    char name[64], hf[96];
    int kind;
    int rope_heads;          /* a LLaMA's q and k: their heads' rows go in llama.cpp's RoPE order */
    uint64_t n, k;           /* rows and row length */
    const bitnet__st_tensor *src, *scale;
} bitnet__cv_job;

static int bitnet__st_is_float(int dtype) { return dtype == BITNET__ST_F16 || dtype == BITNET__ST_BF16 || dtype == BITNET__ST_F32; }

/* Finds and checks a job's source tensor(s) against the shape config.json implies. */
static bitnet_result bitnet__cv_source(bitnet__cv *cv, bitnet__cv_job *jb) {
    char key[128];
    const bitnet__st_tensor *t;
    snprintf(key, sizeof key, "%s.weight", jb->hf);
    if (!(t = jb->src = bitnet__st_find(&cv->st, key))) return bitnet__err(BITNET_ERR_MISSING_TENSOR, "safetensors: no \"%s\"", key);
    if (jb->kind == BITNET__CV_NORM) {
        if (!bitnet__st_is_float(t->dtype)) return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "safetensors: \"%s\" is not F32, F16 or BF16", key);
        if (t->n_dims != 1 || t->shape[0] != jb->n)
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "safetensors: \"%s\" is not [%llu]", key, (unsigned long long)jb->n);
        return BITNET_OK;
    }
    if (jb->kind == BITNET__CV_TERNARY && (t->dtype == BITNET__ST_U8 || t->dtype == BITNET__ST_I8)) { /* packed */
        const bitnet__st_tensor *s;
        if (jb->n % 4 || t->n_dims != 2 || t->shape[0] != jb->n / 4 || t->shape[1] != jb->k)
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "safetensors: packed \"%s\" is not [%llu, %llu]", key, (unsigned long long)(jb->n / 4),
                               (unsigned long long)jb->k);
        if (!cv->quant_config)
            return bitnet__err(BITNET_ERR_UNSUPPORTED, "safetensors: packed \"%s\" but no quantization_config in config.json to say how "
                                                       "its weight_scale applies", key);
        snprintf(key, sizeof key, "%s.weight_scale", jb->hf);
        if (!(s = jb->scale = bitnet__st_find(&cv->st, key)))
            return bitnet__err(BITNET_ERR_MISSING_TENSOR, "safetensors: packed weights without \"%s\"", key);
        if (!bitnet__st_is_float(s->dtype) || s->n_dims > 1 || (s->n_dims == 1 && s->shape[0] != 1))
            return bitnet__err(BITNET_ERR_BAD_SHAPE, "safetensors: \"%s\" is not one float", key);
    } else if (!bitnet__st_is_float(t->dtype)) {
        return bitnet__err(BITNET_ERR_UNSUPPORTED_TYPE, "safetensors: \"%s\" is not F32, F16 or BF16%s", key,
                           jb->kind == BITNET__CV_TERNARY ? " (nor packed U8)" : "");
    } else if (t->n_dims != 2 || t->shape[0] != jb->n || t->shape[1] != jb->k) {
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "safetensors: \"%s\" is not [%llu, %llu]", key, (unsigned long long)jb->n,
                           (unsigned long long)jb->k);
    }
    snprintf(key, sizeof key, "%s.bias", jb->hf);
    if (bitnet__st_find(&cv->st, key)) return bitnet__err(BITNET_ERR_UNSUPPORTED, "safetensors: \"%s\": BitNet has no biases", key);
    return BITNET_OK;
}

/* The GGUF's tensors in bitnet.cpp's order, from their Hugging Face names. */
static bitnet_result bitnet__cv_jobs(bitnet__cv *cv, bitnet__cv_job **out, int *n_out) {
    static const char *const parts[11][2] = {
        {"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"attn_sub_norm", "self_attn.attn_sub_norm"},
        {"ffn_norm", "post_attention_layernorm"}, {"ffn_gate", "mlp.gate_proj"}, {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"}, {"ffn_sub_norm", "mlp.ffn_sub_norm"}};
    const uint64_t dim = (uint64_t)cv->dim, ffn = (uint64_t)cv->ffn, kvd = (uint64_t)cv->kv_heads * (uint64_t)cv->head_dim;
    const uint64_t rows[11] = {dim, dim, kvd, kvd, dim, dim, dim, ffn, ffn, dim, ffn}, cols[11] = {0, dim, dim, dim, dim, 0, 0, dim, dim, ffn, 0};
    int n = 0, l, p, max = cv->layers * 11 + 4;
    bitnet__cv_job *jb = (bitnet__cv_job *)bitnet__calloc((size_t)max, sizeof *jb);
    *out = jb;
    if (!jb) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, "convert: the tensor list");
    if (cv->rope_factor > 0) { /* first, as llama.cpp's converter writes it */
        snprintf(jb[n].name, sizeof jb[n].name, "rope_freqs.weight");
        jb[n].kind = BITNET__CV_ROPE, jb[n++].n = (uint64_t)cv->head_dim / 2;
    }
    snprintf(jb[n].name, sizeof jb[n].name, "token_embd.weight");
    snprintf(jb[n].hf, sizeof jb[n].hf, "model.embed_tokens");
    jb[n].kind = BITNET__CV_F16, jb[n].n = (uint64_t)cv->vocab, jb[n++].k = dim;
    for (l = 0; l < cv->layers; l++)
        for (p = 0; p < 11; p++, n++) {
            if (cv->llama && (p == 5 || p == 10)) { n--; continue; } /* no sub-norms */
            snprintf(jb[n].name, sizeof jb[n].name, "blk.%d.%s.weight", l, parts[p][0]);
            snprintf(jb[n].hf, sizeof jb[n].hf, "model.layers.%d.%s", l, parts[p][1]);
            jb[n].kind = cols[p] ? BITNET__CV_TERNARY : BITNET__CV_NORM;
            jb[n].n = rows[p], jb[n].k = cols[p];
            if (cv->llama && (p == 1 || p == 2)) jb[n].rope_heads = p == 1 ? cv->heads : cv->kv_heads;
        }
    snprintf(jb[n].name, sizeof jb[n].name, "output_norm.weight");
    snprintf(jb[n].hf, sizeof jb[n].hf, "model.norm");
    jb[n].kind = BITNET__CV_NORM, jb[n++].n = dim;
    if (!cv->tied) {
        snprintf(jb[n].name, sizeof jb[n].name, "output.weight");
        snprintf(jb[n].hf, sizeof jb[n].hf, "lm_head");
        jb[n].kind = BITNET__CV_F16, jb[n].n = (uint64_t)cv->vocab, jb[n++].k = dim;
    }
    *n_out = n;
    for (p = 0; p < n; p++)
        if (jb[p].kind != BITNET__CV_ROPE) BITNET__TRY(bitnet__cv_source(cv, &jb[p]));
    return BITNET_OK;
}

/* Streams one tensor into the writer, converted. */
static bitnet_result bitnet__cv_write(bitnet_gguf_writer *w, const bitnet__cv *cv, const bitnet__cv_job *jb) {
    const size_t n = (size_t)jb->n, k = (size_t)(jb->k ? jb->k : 1), chunk = 4096;
    size_t i, nk = n * k;
    bitnet_result r = BITNET_OK;
    if (jb->kind == BITNET__CV_NORM || jb->kind == BITNET__CV_ROPE) {
        float *f = (float *)bitnet__malloc(n * sizeof *f);
        if (!f) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, jb->name);
        if (jb->kind == BITNET__CV_ROPE) bitnet__cv_rope_freqs(cv, f);
        else bitnet__st_floats(jb->src, 0, n, f);
        r = bitnet_gguf_writer_write(w, f, n * sizeof *f);
        bitnet__free(f);
        return r;
    }
    if (jb->kind == BITNET__CV_F16) { /* rows in chunks; fp16 holds the values or it is an error */
        float *f = (float *)bitnet__malloc(chunk * k * sizeof *f);
        uint16_t *h = (uint16_t *)bitnet__malloc(chunk * k * sizeof *h);
        for (i = 0; i < n && r == BITNET_OK && f && h; i += chunk) {
            size_t rows = n - i < chunk ? n - i : chunk, e;
            bitnet__st_floats(jb->src, i * k, rows * k, f);
            for (e = 0; e < rows * k; e++)
                if (!(fabsf(f[e]) <= 65504.0f)) {
                    r = bitnet__err(BITNET_ERR_UNSUPPORTED, "convert: %s.weight [%zu][%zu] = %g is beyond fp16", jb->hf, i + e / k, e % k,
                                    (double)f[e]);
                    break;
                }
            if (r == BITNET_OK && (r = bitnet_convert_fp32_to_fp16(f, h, rows * k)) == BITNET_OK)
                r = bitnet_gguf_writer_write(w, h, rows * k * sizeof *h);
        }
        if (!f || !h) r = bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, jb->name);
        bitnet__free(f);
        bitnet__free(h);
        return r;
    }
    {
        const size_t ib = bitnet_i2s_bytes(n, k);
        uint8_t *dst = (uint8_t *)bitnet__malloc(ib);
        if (!dst) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, jb->name);
        if (jb->scale) { /* packed: codes as they are, the scale multiplicative */
            float s;
            bitnet__st_floats(jb->scale, 0, 1, &s);
            if (cv->inverse_scale) s = 1.0f / s;
            if (!(s > 0) || !(s < FLT_MAX)) r = bitnet__err(BITNET_ERR_CORRUPT, "convert: %s.weight_scale gives the scale %g", jb->hf, (double)s);
            else r = bitnet_i2s_from_hf(jb->src->data, n, k, s, dst, ib);
        } else { /* master weights: absmean, as the model quantizes them */
            float *f = (float *)bitnet__malloc(nk * sizeof *f), s;
            int8_t *q = (int8_t *)bitnet__malloc(nk);
            if (!f || !q) r = bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, jb->name);
            if (r == BITNET_OK) {
                bitnet__st_floats(jb->src, 0, nk, f);
                r = bitnet_quantize_ternary(f, nk, q, &s);
            }
            if (r == BITNET_OK) r = bitnet_i2s_pack(q, n, k, s, dst, ib);
            bitnet__free(f);
            bitnet__free(q);
        }
        if (r != BITNET_OK && r != BITNET_ERR_OUT_OF_MEMORY) r = bitnet__err_where(r, jb->hf);
        if (r == BITNET_OK && jb->rope_heads) { /* rows h*hd + j*hd/2 + i (rotate-half) to h*hd + 2i + j, as llama.cpp's converter */
            const size_t rb = k / 4, hd = n / (size_t)jb->rope_heads;
            uint8_t *perm = (uint8_t *)bitnet__malloc(ib);
            size_t h, i2, j2;
            if (!perm) r = bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, jb->name);
            for (h = 0; perm && h < (size_t)jb->rope_heads; h++)
                for (i2 = 0; i2 < hd / 2; i2++)
                    for (j2 = 0; j2 < 2; j2++) memcpy(perm + (h * hd + 2 * i2 + j2) * rb, dst + (h * hd + j2 * (hd / 2) + i2) * rb, rb);
            if (perm) memcpy(perm + n * rb, dst + n * rb, ib - n * rb), bitnet__free(dst), dst = perm;
        }
        if (r == BITNET_OK) r = bitnet_gguf_writer_write(w, dst, ib);
        bitnet__free(dst);
        return r;
    }
}

static bitnet_result bitnet__cv_open_weights(bitnet__cv *cv) {
    FILE *f = fopen(bitnet__cv_file(cv, "model.safetensors"), "rb");
    bitnet__json idx;
    const char **names;
    size_t i, n;
    int32_t m, wm;
    bitnet_result r = BITNET_OK;
    if (f) {
        fclose(f);
        return bitnet__st_open(&cv->st, cv->path);
    }
    BITNET__TRY(bitnet__cv_json(cv, "model.safetensors.index.json", 0, 1 << 20, &idx));
    wm = bitnet__json_get(&idx, 0, "weight_map");
    if (wm < 0 || idx.nodes[wm].type != BITNET__J_OBJ)
        r = bitnet__err(BITNET_ERR_CORRUPT, "model.safetensors.index.json: no weight_map object");
    for (m = wm >= 0 ? idx.nodes[wm].first : -1; m >= 0 && r == BITNET_OK; m = idx.nodes[m].next) {
        const char *file = idx.nodes[m].str;
        int32_t e;
        if (idx.nodes[m].type != BITNET__J_STR || !*file || strchr(file, '/') || strchr(file, '\\') || file[0] == '.') {
            r = bitnet__err(BITNET_ERR_CORRUPT, "model.safetensors.index.json: \"%.60s\" is not a file name in the folder", idx.nodes[m].key);
            break;
        }
        for (e = idx.nodes[wm].first; e != m && strcmp(idx.nodes[e].str, file) != 0; e = idx.nodes[e].next) {}
        if (e == m) r = bitnet__st_open(&cv->st, bitnet__cv_file(cv, file)); /* each shard once */
    }
    bitnet__json_free(&idx);
    BITNET__TRY(r);
    /* a name in two shards */
    n = cv->st.n_t;
    if (!(names = (const char **)bitnet__malloc((n ? n : 1) * sizeof *names))) return bitnet__err_where(BITNET_ERR_OUT_OF_MEMORY, "convert: names");
    for (i = 0; i < n; i++) names[i] = cv->st.t[i].name;
    qsort(names, n, sizeof *names, bitnet__json_key_cmp);
    for (i = 1; i < n && strcmp(names[i - 1], names[i]) != 0; i++) {}
    if (i < n) r = bitnet__err(BITNET_ERR_DUPLICATE_TENSOR, "safetensors: \"%.80s\" in two shards", names[i]);
    bitnet__free(names);
    return r;
}

static bitnet_result bitnet__cv_run(bitnet__cv *cv, const char *gguf_path, bitnet_gguf_writer **wp) {
    const char *arch;
    const bitnet__st_tensor *emb;
    bitnet__cv_job *jobs = NULL;
    bitnet_gguf_writer *w;
    int n_jobs = 0, i;
    bitnet_result r = BITNET_OK;
    char key[96], name[128];
    const char *base, *tmpl;
    uint8_t add_bos = 1;
    int32_t ab;
    BITNET__TRY(bitnet__cv_json(cv, "config.json", 0, 4096, &cv->cfg));
    BITNET__TRY(bitnet__cv_config(cv));
    arch = cv->llama ? "llama" : "bitnet-b1.58";
    BITNET__TRY(bitnet__cv_open_weights(cv));
    if (!(emb = bitnet__st_find(&cv->st, "model.embed_tokens.weight")))
        return bitnet__err(BITNET_ERR_MISSING_TENSOR, "safetensors: no \"model.embed_tokens.weight\"");
    if (emb->n_dims != 2 || emb->shape[1] != (uint64_t)cv->dim || emb->shape[0] < 1 || emb->shape[0] > (1u << 24))
        return bitnet__err(BITNET_ERR_BAD_SHAPE, "safetensors: \"model.embed_tokens.weight\" is not [vocab, %d]", cv->dim);
    cv->vocab = (int)emb->shape[0];
    BITNET__TRY(bitnet__cv_json(cv, "tokenizer.json", 0, 1 << 22, &cv->tok));
    BITNET__TRY(bitnet__cv_json(cv, "tokenizer_config.json", 1, 1 << 16, &cv->tcfg));
    BITNET__TRY(bitnet__cv_tokenizer(cv));
    r = bitnet__cv_jobs(cv, &jobs, &n_jobs);
    for (base = cv->dir + strlen(cv->dir); base > cv->dir && base[-1] == '/'; base--) {}
    i = (int)(base - cv->dir);
    while (base > cv->dir && base[-1] != '/') base--;
    snprintf(name, sizeof name, "%.*s", (int)(cv->dir + i - base), base);
    tmpl = cv->tcfg.n ? bitnet__cv_str(&cv->tcfg, 0, "chat_template") : NULL;
    ab = cv->tcfg.n ? bitnet__json_get(&cv->tcfg, 0, "add_bos_token") : -1;
    if (ab >= 0 && cv->tcfg.nodes[ab].type == BITNET__J_FALSE) add_bos = 0;
#define BITNET__CV(expr) do { if (r == BITNET_OK) r = (expr); } while (0)
#define BITNET__CV_HP(suffix, val) do { snprintf(key, sizeof key, "%s.%s", arch, suffix); BITNET__CV(bitnet_gguf_writer_set_u32(w, key, (uint32_t)(val))); } while (0)
    BITNET__CV(bitnet_gguf_writer_create(wp));
    w = *wp;
    BITNET__CV(bitnet_gguf_writer_set_str(w, "general.architecture", arch));
    BITNET__CV(bitnet_gguf_writer_set_str(w, "general.name", name[0] ? name : "bitnet"));
    BITNET__CV(bitnet_gguf_writer_set_u32(w, "general.file_type", 40)); /* LLAMA_FTYPE_MOSTLY_I2_S, as bitnet.cpp */
    BITNET__CV(bitnet_gguf_writer_set_u32(w, "general.quantization_version", 2));
    BITNET__CV_HP("vocab_size", cv->vocab);
    BITNET__CV_HP("context_length", cv->ctx);
    BITNET__CV_HP("embedding_length", cv->dim);
    BITNET__CV_HP("feed_forward_length", cv->ffn);
    BITNET__CV_HP("block_count", cv->layers);
    BITNET__CV_HP("attention.head_count", cv->heads);
    BITNET__CV_HP("attention.head_count_kv", cv->kv_heads);
    BITNET__CV_HP("rope.dimension_count", cv->head_dim);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    BITNET__CV(bitnet_gguf_writer_set_f32(w, key, cv->theta));
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    BITNET__CV(bitnet_gguf_writer_set_f32(w, key, cv->eps));
    BITNET__CV(bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    BITNET__CV(bitnet_gguf_writer_set_str(w, "tokenizer.ggml.pre", cv->pre));
    BITNET__CV(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, cv->tokens, (uint64_t)cv->vocab));
    BITNET__CV(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, cv->types, (uint64_t)cv->vocab));
    BITNET__CV(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.merges", BITNET_GGUF_STRING, cv->merges, (uint64_t)cv->n_merges));
    BITNET__CV(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)cv->bos));
    BITNET__CV(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)cv->eos));
    if (cv->eot >= 0) BITNET__CV(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)cv->eot));
    BITNET__CV(bitnet_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", BITNET_GGUF_BOOL, &add_bos));
    if (tmpl) BITNET__CV(bitnet_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl));
    for (i = 0; i < n_jobs && r == BITNET_OK; i++) {
        uint64_t ne[2];
        const int one_dim = jobs[i].kind == BITNET__CV_NORM || jobs[i].kind == BITNET__CV_ROPE;
        ne[0] = one_dim ? jobs[i].n : jobs[i].k;
        ne[1] = jobs[i].n;
        r = bitnet_gguf_writer_add_tensor(w, jobs[i].name, jobs[i].kind == BITNET__CV_TERNARY ? BITNET_TENSOR_I2_S :
                                          jobs[i].kind == BITNET__CV_F16 ? BITNET_TENSOR_F16 : BITNET_TENSOR_F32,
                                          one_dim ? 1 : 2, ne);
    }
    BITNET__CV(bitnet_gguf_writer_begin(w, gguf_path));
    for (i = 0; i < n_jobs && r == BITNET_OK; i++) r = bitnet__cv_write(w, cv, &jobs[i]);
    BITNET__CV(bitnet_gguf_writer_finish(w));
#undef BITNET__CV
#undef BITNET__CV_HP
    bitnet__free(jobs);
    return r;
}

BITNET_API bitnet_result bitnet_convert_hf(const char *dir, const char *gguf_path) {
    bitnet__cv cv;
    bitnet_gguf_writer *w = NULL;
    bitnet_result r;
    BITNET__CHECK_PTR(dir);
    BITNET__CHECK_PTR(gguf_path);
    memset(&cv, 0, sizeof cv);
    cv.dir = dir;
    r = bitnet__cv_run(&cv, gguf_path, &w);
    bitnet_gguf_writer_free(w); /* an unfinished file is removed */
    bitnet__json_free(&cv.cfg);
    bitnet__json_free(&cv.tok);
    bitnet__json_free(&cv.tcfg);
    bitnet__st_free(&cv.st);
    bitnet__free(cv.tokens);
    bitnet__free(cv.types);
    bitnet__free(cv.merges);
    bitnet__free(cv.strs);
    return r;
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
