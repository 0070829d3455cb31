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
        float v = x[i] * s;
        int r = (v != v) ? 0 : (v > 128.0f ? 128 : (v < -129.0f ? -129 : bitnet__round_even(v)));
        r = r > 127 ? 127 : (r < -128 ? -128 : r);
        q[i] = (int8_t)r;
        acc += r;
    }
    *scale = s;
    if (sum) *sum = acc;
}

BITNET_API bitnet_result bitnet_quantize_act(const float *x, size_t m, size_t k, int8_t *q, float *scale, int32_t *sum) {
    size_t i, mk;
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(q);
    BITNET__CHECK_PTR(scale);
    if (m == 0 || k == 0) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_quantize_act: m=%zu k=%zu", m, k);
    if (!bitnet__mul_size(m, k, &mk)) return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_quantize_act: m*k overflows");
    for (i = 0; i < m; i++)
        bitnet__quantize_act_row_scalar(x + i * k, k, q + i * k, scale + i, sum ? sum + i : NULL);
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

BITNET_API bitnet_result bitnet_gemm_f32(const float *w, size_t n, size_t k, const float *a, size_t m, float *out) {
    size_t i, r, c, t;
    BITNET__CHECK_PTR(w);
    BITNET__CHECK_PTR(a);
    BITNET__CHECK_PTR(out);
    if (!n || !k || !m) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_gemm_f32: m=%zu n=%zu k=%zu", m, n, k);
    if (!bitnet__mul_size(n, k, &t) || !bitnet__mul_size(m, k, &t) || !bitnet__mul_size(m, n, &t))
        return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_gemm_f32: sizes overflow");
    for (i = 0; i < m; i++)
        for (r = 0; r < n; r++) {
            float acc = 0;
            for (c = 0; c < k; c++) acc += w[r * k + c] * a[i * k + c];
            out[i * n + r] = acc;
        }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_rmsnorm(const float *x, const float *weight, size_t m, size_t k, float eps, float *out) {
    size_t i, c;
    BITNET__CHECK_PTR(x);
    BITNET__CHECK_PTR(weight);
    BITNET__CHECK_PTR(out);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_rmsnorm: m=%zu k=%zu", m, k);
    for (i = 0; i < m; i++) {
        const float *xi = x + i * k;
        float *oi = out + i * k;
        double ss = 0;
        float r;
        for (c = 0; c < k; c++) ss += (double)xi[c] * xi[c];
        r = (float)(1.0 / sqrt(ss / (double)k + (double)eps));
        for (c = 0; c < k; c++) oi[c] = xi[c] * r * weight[c];
    }
    return BITNET_OK;
}

BITNET_API bitnet_result bitnet_softmax(float *x, size_t m, size_t k) {
    size_t i, c;
    BITNET__CHECK_PTR(x);
    if (!m || !k) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_softmax: m=%zu k=%zu", m, k);
    for (i = 0; i < m; i++) {
        float *xi = x + i * k, mx = xi[0], sum = 0;
        for (c = 1; c < k; c++) mx = xi[c] > mx ? xi[c] : mx;
        for (c = 0; c < k; c++) sum += (xi[c] = expf(xi[c] - mx));
        for (c = 0; c < k; c++) xi[c] /= sum;
    }
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
