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

/* ---- >>api-bench: kernel statistics, SHA-256, benchmarks and receipts ------------------------ */

/* Kernel launches, recorded by the launch path itself (each CPU kernel entry point's dispatch and
   the GPU launch path) under the name of the path that ran: "cpu_gemm_i2s_avx512",
   "bitnet_k_gemv_i2s". Process-wide, thread-safe. */
#define BITNET_KERNEL_NAME_MAX 96
typedef struct bitnet_kernel_stat {
    char name[BITNET_KERNEL_NAME_MAX];
    uint64_t launches;
    double seconds;                           /* summed as measured at the launch point */
} bitnet_kernel_stat;
/* Copies every kernel with launches since the last reset, sorted by name. *n gets the count;
   BITNET_ERR_BAD_SIZE (with *n set) when cap is too small. out may be NULL when cap is 0. */
BITNET_API bitnet_result bitnet_kernel_stats(bitnet_kernel_stat *out, size_t cap, size_t *n);
BITNET_API void bitnet_kernel_stats_reset(void);

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
    BITNET__KSTAT("cpu_gemm_i2s_scalar", bitnet__gemm_i2s_scalar((const uint8_t *)w, 0, n, k, a, a_scale, a_sum, m, w_scale, out, n));
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

#if defined(BITNET_NO_THREADS)
#define BITNET__KSTAT_LOCK() ((void)0)
#define BITNET__KSTAT_UNLOCK() ((void)0)
#elif defined(_WIN32)
static SRWLOCK bitnet__kstat_lock = SRWLOCK_INIT;
#define BITNET__KSTAT_LOCK() AcquireSRWLockExclusive(&bitnet__kstat_lock)
#define BITNET__KSTAT_UNLOCK() ReleaseSRWLockExclusive(&bitnet__kstat_lock)
#else
static pthread_mutex_t bitnet__kstat_lock = PTHREAD_MUTEX_INITIALIZER;
#define BITNET__KSTAT_LOCK() pthread_mutex_lock(&bitnet__kstat_lock)
#define BITNET__KSTAT_UNLOCK() pthread_mutex_unlock(&bitnet__kstat_lock)
#endif

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

BITNET_API bitnet_result bitnet_kernel_stats(bitnet_kernel_stat *out, size_t cap, size_t *n) {
    bitnet_kernel_stat tmp[BITNET_BENCH_MAX_KERNELS];
    size_t i, k = 0;
    BITNET__CHECK_PTR(n);
    if (cap && !out) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_kernel_stats: out is NULL with cap %zu", cap);
    BITNET__KSTAT_LOCK();
    for (i = 0; i < bitnet__kstat_used; i++) {
        if (!bitnet__kstats[i].launches) continue;
        memcpy(tmp[k].name, bitnet__kstats[i].name, BITNET_KERNEL_NAME_MAX);
        tmp[k].launches = bitnet__kstats[i].launches;
        tmp[k].seconds = (double)bitnet__kstats[i].nanos * 1e-9;
        k++;
    }
    BITNET__KSTAT_UNLOCK();
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
}

/* ---- NVTX: no-ops until the GPU runtime's dlopen'd libnvToolsExt is wired in here ----------- */
BITNET__UNUSED static void bitnet__nvtx_push(const char *name) { (void)name; }
BITNET__UNUSED static void bitnet__nvtx_pop(void) {}

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
            if (strncmp(r->gpu_arch, "sm_", 3) != 0 || !r->gpu_arch[3] || strspn(r->gpu_arch + 3, "0123456789") != strlen(r->gpu_arch + 3))
                bitnet__rc_breach(&rep, "require-gpu-kernels: the device block's arch '%s' is not sm_<number>", r->gpu_arch);
            else if ((arch = atoi(r->gpu_arch + 3)) > r->gpu_cc_major * 10 + r->gpu_cc_minor && r->gpu_cc_major >= 1)
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
