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
   download is ordered after all work previously issued through the same handle. */
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

/* bitnet__parallel(fn, arg) runs fn(arg, ith, nth) once for each ith in [0, nth) and returns when
   all are done; the caller runs ith = 0. Workers are persistent pthreads created at first use.
   Dispatch is an atomic generation counter: workers spin on it for a short while (decoding calls
   the pool ~250 times per token, so wake-up latency matters), then sleep on a condition variable;
   the condvar is only touched when somebody sleeps. The pool belongs to one caller at a time: a
   concurrent or nested call (from inside a task) runs inline with nth = 1, so kernels are safe to
   call from any thread. bitnet_set_num_threads(1) (or bitnet__pool_shutdown) stops and joins the
   workers; a failing pthread_create leaves fewer threads, with a warning in the log. */
typedef void (*bitnet__task_fn)(void *arg, int ith, int nth);
#define BITNET__MAX_THREADS 256

#if !defined(BITNET_NO_THREADS) && !defined(_WIN32) && (defined(__GNUC__) || defined(__clang__))
#define BITNET__POOL 1
#include <sched.h>
#endif

static int bitnet__threads_want; /* 0 = not resolved yet */

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
    if (bitnet__threads_want == 0) {
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
        bitnet__threads_want = n ? n : bitnet__online_cores();
    }
    return bitnet__threads_want;
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

typedef struct bitnet__pool bitnet__pool;
typedef struct bitnet__worker { bitnet__pool *pool; int ith; } bitnet__worker;
struct bitnet__pool {
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
static bitnet__pool *bitnet__the_pool;
static int bitnet__pool_busy;      /* atomic: 1 while a caller owns the pool */
static int bitnet__pool_failed;    /* creation failed: run inline until the count changes */

#define BITNET__SPIN_SECONDS 2e-4  /* spin this long before sleeping (covers gaps between kernels) */

/* Waits until gen differs from seen; returns the new value. */
static unsigned bitnet__pool_wait(bitnet__pool *p, unsigned seen) {
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

static void bitnet__pool_publish(bitnet__pool *p) {
    BITNET__FETCH_ADD(&p->gen, 1u);
    if (BITNET__LOAD(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static void *bitnet__worker_main(void *arg) {
    bitnet__worker *wk = (bitnet__worker *)arg;
    bitnet__pool *p = wk->pool;
    unsigned seen = 0;
    for (;;) {
        seen = bitnet__pool_wait(p, seen);
        if (BITNET__LOAD(&p->stop)) break;
        p->fn(p->arg, wk->ith, p->nth);
        __atomic_fetch_sub(&p->pending, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Stops and joins the workers of a pool (the caller owns bitnet__pool_busy). */
static void bitnet__pool_destroy(bitnet__pool *p) {
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
static bitnet__pool *bitnet__pool_create(int nth) {
    bitnet__pool *p = (bitnet__pool *)bitnet__calloc(1, sizeof *p);
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
        bitnet__pool_destroy(p);
        return NULL;
    }
    return p;
}

static void bitnet__pool_lock(void) {
    int expected = 0, spins = 0;
    while (!__atomic_compare_exchange_n(&bitnet__pool_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        expected = 0;
        if (++spins > 64) sched_yield();
        else bitnet__cpu_relax();
    }
}
static void bitnet__pool_unlock(void) { __atomic_store_n(&bitnet__pool_busy, 0, __ATOMIC_RELEASE); }

/* Stops the workers and frees the pool (tests, leak checkers). The next parallel call restarts it. */
BITNET__UNUSED static void bitnet__pool_shutdown(void) {
    bitnet__pool_lock();
    bitnet__pool_destroy(bitnet__the_pool);
    __atomic_store_n(&bitnet__the_pool, (bitnet__pool *)NULL, __ATOMIC_RELEASE);
    bitnet__pool_failed = 0;
    bitnet__pool_unlock();
}

BITNET__UNUSED static void bitnet__parallel(bitnet__task_fn fn, void *arg) {
    bitnet__pool *p;
    int expected = 0, i;
    if (!__atomic_compare_exchange_n(&bitnet__pool_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        fn(arg, 0, 1); /* nested, or another thread owns the pool */
        return;
    }
    p = bitnet__the_pool;
    if (!p && !bitnet__pool_failed && bitnet__threads_config() > 1) {
        p = bitnet__pool_create(bitnet__threads_config());
        __atomic_store_n(&bitnet__the_pool, p, __ATOMIC_RELEASE);
        if (!p) {
            bitnet__pool_failed = 1;
            bitnet__log(BITNET_LOG_WARN, "thread pool: could not start workers; running single-threaded");
        }
    }
    if (!p) {
        bitnet__pool_unlock();
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    BITNET__STORE(&p->pending, p->nth - 1);
    bitnet__pool_publish(p);
    fn(arg, 0, p->nth);
    for (i = 1; __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) != 0; i++) {
        bitnet__cpu_relax();
        if ((i & 127) == 0) sched_yield(); /* a worker may be descheduled: give it the core */
    }
    bitnet__pool_unlock();
}

/* The running pool's size, else the configured count (1 after a failed start). */
BITNET_API int bitnet_num_threads(void) {
    bitnet__pool *p = __atomic_load_n(&bitnet__the_pool, __ATOMIC_ACQUIRE);
    return p ? p->nth : (bitnet__pool_failed ? 1 : bitnet__threads_config());
}

BITNET_API bitnet_result bitnet_set_num_threads(int n) {
    if (n < 0 || n > BITNET__MAX_THREADS)
        return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_set_num_threads: %d is not in [0, %d]", n, BITNET__MAX_THREADS);
    bitnet__pool_lock();
    bitnet__threads_want = n ? n : bitnet__online_cores();
    if (bitnet__the_pool && bitnet__the_pool->nth != bitnet__threads_want) {
        bitnet__pool_destroy(bitnet__the_pool);
        __atomic_store_n(&bitnet__the_pool, (bitnet__pool *)NULL, __ATOMIC_RELEASE);
    }
    bitnet__pool_failed = 0;
    bitnet__pool_unlock();
    return BITNET_OK;
}
#else /* no pool: everything runs on the calling thread */
BITNET__UNUSED static void bitnet__parallel(bitnet__task_fn fn, void *arg) { fn(arg, 0, 1); }
BITNET__UNUSED static void bitnet__pool_shutdown(void) {}
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
    bitnet__active_isa = isa; /* AUTO: resolved again (BITNET_CPU, else the best) at next use */
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
   of the bandwidth unused, so each tile prefetches the lines BITNET__PF_DIST bytes ahead of its
   4 rows (rows of a work item are contiguous: that is the next tiles' weights). */
#ifndef BITNET__PF_DIST
#define BITNET__PF_DIST 4096
#endif
#define BITNET__PREFETCH4(o) { \
    _mm_prefetch((const char *)(w0 + (o) + BITNET__PF_DIST), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w1 + (o) + BITNET__PF_DIST), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w2 + (o) + BITNET__PF_DIST), _MM_HINT_T0); \
    _mm_prefetch((const char *)(w3 + (o) + BITNET__PF_DIST), _MM_HINT_T0); }
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
    size_t it;
    (void)ith;
    (void)nth;
    for (;;) {
#if defined(BITNET__POOL)
        it = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
#else
        it = j->next++;
#endif
        if (it >= j->items) break;
        {
            const size_t ri = it / j->tok_items, ti = it % j->tok_items;
            const size_t r0 = ri * j->rows_per_item, t0 = ti * j->toks_per_item;
            bitnet__gemm_block(j, r0, BITNET__MIN(j->n, r0 + j->rows_per_item), t0, BITNET__MIN(j->m, t0 + j->toks_per_item));
        }
    }
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
    if (nth > 1 && macs >= 65536.0) bitnet__parallel(bitnet__gemm_task, j);
    else bitnet__gemm_task(j, 0, 1);
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
    bitnet__gemm_run(&j);
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
    bitnet__gemm_run(&j);
    return BITNET_OK;
}

/* >>gguf ====================================================================================== */

/* >>tokenizer ================================================================================= */

/* >>sampler =================================================================================== */

/* >>cpu-forward =============================================================================== */

/* >>cuda-loader =============================================================================== */

/* >>nvrtc ===================================================================================== */

/* >>gpu-pool ================================================================================== */

/* >>cuda-kernels ============================================================================== */

/* >>cuda-forward ============================================================================== */

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
