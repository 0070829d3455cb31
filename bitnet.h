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
   pre-tokenizer, implemented without a regex library. Encoding equals tiktoken's with the LLaMA 3
   pattern and ranks: pieces that are whole tokens are taken as they are, and merges apply lowest
   rank first (a token's rank is that of its first merge), leftmost first on ties. The character
   classes are Unicode 16.0 (the version of tiktoken's regex tables). Text that is not valid UTF-8 is
   still encoded: each invalid byte counts as one punctuation-like character (neither letter,
   number nor white space), so decode(encode(bytes)) gives the bytes back for any input.
   A tokenizer is immutable after creation: share it between threads freely. */
typedef struct bitnet_tokenizer bitnet_tokenizer;
typedef struct bitnet_tokenizer_desc {
    const bitnet_gguf_str *tokens; uint64_t n_tokens;      /* the vocabulary, in id order */
    const bitnet_gguf_str *merges; uint64_t n_merges;      /* "a b" pairs, by rank */
    const int32_t *token_types;                            /* optional: 3 = control (special) */
    int32_t bos, eos, eot;                                 /* -1 when absent */
} bitnet_tokenizer_desc;
/* Special tokens are those of type 3 (control) or 4 (user-defined); without token_types, those
   spelled "<|...|>". Their text is kept verbatim; every other token must be a byte-level string,
   the 256 single bytes must all be tokens, and each merge must join two tokens into a third
   (else BITNET_ERR_BAD_METADATA, naming the entry). */
BITNET_API bitnet_result bitnet_tokenizer_create(const bitnet_tokenizer_desc *desc, bitnet_tokenizer **out);
/* From tokenizer.ggml.* metadata (model "gpt2"); eot falls back to the token "<|eot_id|>". */
BITNET_API bitnet_result bitnet_tokenizer_from_gguf(const bitnet_gguf *g, bitnet_tokenizer **out);
BITNET_API void bitnet_tokenizer_free(bitnet_tokenizer *t);
/* Encodes text (parse_special: recognise "<|...|>" special tokens in the text). *n_out gets the
   count; BITNET_ERR_BAD_SIZE (with *n_out set to the need) when cap is too small. ids may be NULL
   when cap is 0 (a size query); text may be NULL when len is 0. */
BITNET_API bitnet_result bitnet_tokenize(const bitnet_tokenizer *t, const char *text, size_t len, int add_bos,
                                         int parse_special, int32_t *ids, size_t cap, size_t *n_out);
/* The bytes of one token (special tokens as their text). Not NUL-terminated. */
BITNET_API bitnet_result bitnet_token_piece(const bitnet_tokenizer *t, int32_t id, const char **bytes, size_t *len);
/* The concatenated pieces, NUL-terminated. *len_out gets the length without the NUL;
   BITNET_ERR_BAD_SIZE when cap < *len_out + 1; BITNET_ERR_BAD_TOKEN for an id outside the vocabulary. */
BITNET_API bitnet_result bitnet_detokenize(const bitnet_tokenizer *t, const int32_t *ids, size_t n, char *buf,
                                           size_t cap, size_t *len_out);
BITNET_API int32_t bitnet_tokenizer_vocab_size(const bitnet_tokenizer *t);
/* The ids of BOS, EOS and <|eot_id|> (-1 when absent). Any pointer may be NULL. */
BITNET_API void bitnet_tokenizer_special_ids(const bitnet_tokenizer *t, int32_t *bos, int32_t *eos, int32_t *eot);
/* The LLaMA 3 pre-tokenizer alone: ends[i] gets the end offset of the i-th piece of text (BPE then
   encodes each piece on its own). Same cap / BITNET_ERR_BAD_SIZE rule as bitnet_tokenize. */
BITNET_API bitnet_result bitnet_pretokenize(const char *text, size_t len, size_t *ends, size_t cap, size_t *n_out);
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
/* The BitNet b1.58 2B-4T chat prompt: "<|begin_of_text|>", then per message "System: ", "User: " or
   "Assistant: " (role "system", "user" or "assistant"), the content without leading and trailing
   white space, and "<|eot_id|>"; add_generation_prompt appends "Assistant: ". Tokenize the result
   with add_bos = 0 and parse_special = 1. buf gets a NUL-terminated string and *len_out its length;
   BITNET_ERR_BAD_SIZE (with *len_out set) when cap < *len_out + 1; buf may be NULL when cap is 0. */
typedef struct bitnet_chat_message { const char *role; const char *content; } bitnet_chat_message;
BITNET_API bitnet_result bitnet_chat_format(const bitnet_chat_message *msgs, size_t n, int add_generation_prompt,
                                            char *buf, size_t cap, size_t *len_out);

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

/* Byte-level BPE, equal to tiktoken with the LLaMA 3 pattern:
     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
     \s*[\r\n]+|\s+(?!\S)|\s+
   The pattern is matched by hand (bitnet__pretok_end), each piece is BPE-encoded on its own with
   a min-heap of candidate merges (n log n even for hostile megabyte pieces). */

/* Character classes by code point: runs of (first code point << 2 | class). */
#define BITNET__CL_OTHER 0
#define BITNET__CL_LETTER 1
#define BITNET__CL_NUMBER 2
#define BITNET__CL_SPACE 3
/* unicode-table begin: generated by tools/gen_unicode_tables.mjs (Unicode 16.0), do not edit */
static const uint32_t bitnet__uni_runs[1610] = {
    0x0, 0x27, 0x38, 0x83, 0x84, 0xc2, 0xe8, 0x105, 0x16c, 0x185, 0x1ec, 0x217, 0x218, 0x283, 0x284, 0x2a9, 0x2ac,
    0x2ca, 0x2d0, 0x2d5, 0x2d8, 0x2e6, 0x2e9, 0x2ec, 0x2f2, 0x2fc, 0x301, 0x35c, 0x361, 0x3dc, 0x3e1, 0xb08, 0xb19,
    0xb48, 0xb81, 0xb94, 0xbb1, 0xbb4, 0xbb9, 0xbbc, 0xdc1, 0xdd4, 0xdd9, 0xde0, 0xde9, 0xdf8, 0xdfd, 0xe00, 0xe19,
    0xe1c, 0xe21, 0xe2c, 0xe31, 0xe34, 0xe39, 0xe88, 0xe8d, 0xfd8, 0xfdd, 0x1208, 0x1229, 0x14c0, 0x14c5, 0x155c,
    0x1565, 0x1568, 0x1581, 0x1624, 0x1741, 0x17ac, 0x17bd, 0x17cc, 0x1881, 0x192c, 0x1982, 0x19a8, 0x19b9, 0x19c0,
    0x19c5, 0x1b50, 0x1b55, 0x1b58, 0x1b95, 0x1b9c, 0x1bb9, 0x1bc2, 0x1be9, 0x1bf4, 0x1bfd, 0x1c00, 0x1c41, 0x1c44,
    0x1c49, 0x1cc0, 0x1d35, 0x1e98, 0x1ec5, 0x1ec8, 0x1f02, 0x1f29, 0x1fac, 0x1fd1, 0x1fd8, 0x1fe9, 0x1fec, 0x2001,
    0x2058, 0x2069, 0x206c, 0x2091, 0x2094, 0x20a1, 0x20a4, 0x2101, 0x2164, 0x2181, 0x21ac, 0x21c1, 0x2220, 0x2225,
    0x223c, 0x2281, 0x2328, 0x2411, 0x24e8, 0x24f5, 0x24f8, 0x2541, 0x2544, 0x2561, 0x2588, 0x259a, 0x25c0, 0x25c5,
    0x2604, 0x2615, 0x2634, 0x263d, 0x2644, 0x264d, 0x26a4, 0x26a9, 0x26c4, 0x26c9, 0x26cc, 0x26d9, 0x26e8, 0x26f5,
    0x26f8, 0x2739, 0x273c, 0x2771, 0x2778, 0x277d, 0x2788, 0x279a, 0x27c1, 0x27c8, 0x27d2, 0x27e8, 0x27f1, 0x27f4,
    0x2815, 0x282c, 0x283d, 0x2844, 0x284d, 0x28a4, 0x28a9, 0x28c4, 0x28c9, 0x28d0, 0x28d5, 0x28dc, 0x28e1, 0x28e8,
    0x2965, 0x2974, 0x2979, 0x297c, 0x299a, 0x29c0, 0x29c9, 0x29d4, 0x2a15, 0x2a38, 0x2a3d, 0x2a48, 0x2a4d, 0x2aa4,
    0x2aa9, 0x2ac4, 0x2ac9, 0x2ad0, 0x2ad5, 0x2ae8, 0x2af5, 0x2af8, 0x2b41, 0x2b44, 0x2b81, 0x2b88, 0x2b9a, 0x2bc0,
    0x2be5, 0x2be8, 0x2c15, 0x2c34, 0x2c3d, 0x2c44, 0x2c4d, 0x2ca4, 0x2ca9, 0x2cc4, 0x2cc9, 0x2cd0, 0x2cd5, 0x2ce8,
    0x2cf5, 0x2cf8, 0x2d71, 0x2d78, 0x2d7d, 0x2d88, 0x2d9a, 0x2dc0, 0x2dc5, 0x2dca, 0x2de0, 0x2e0d, 0x2e10, 0x2e15,
    0x2e2c, 0x2e39, 0x2e44, 0x2e49, 0x2e58, 0x2e65, 0x2e6c, 0x2e71, 0x2e74, 0x2e79, 0x2e80, 0x2e8d, 0x2e94, 0x2ea1,
    0x2eac, 0x2eb9, 0x2ee8, 0x2f41, 0x2f44, 0x2f9a, 0x2fcc, 0x3015, 0x3034, 0x3039, 0x3044, 0x3049, 0x30a4, 0x30a9,
    0x30e8, 0x30f5, 0x30f8, 0x3161, 0x316c, 0x3175, 0x3178, 0x3181, 0x3188, 0x319a, 0x31c0, 0x31e2, 0x31fc, 0x3201,
    0x3204, 0x3215, 0x3234, 0x3239, 0x3244, 0x3249, 0x32a4, 0x32a9, 0x32d0, 0x32d5, 0x32e8, 0x32f5, 0x32f8, 0x3375,
    0x337c, 0x3381, 0x3388, 0x339a, 0x33c0, 0x33c5, 0x33cc, 0x3411, 0x3434, 0x3439, 0x3444, 0x3449, 0x34ec, 0x34f5,
    0x34f8, 0x3539, 0x353c, 0x3551, 0x355c, 0x3562, 0x357d, 0x3588, 0x359a, 0x35e4, 0x35e9, 0x3600, 0x3615, 0x365c,
    0x3669, 0x36c8, 0x36cd, 0x36f0, 0x36f5, 0x36f8, 0x3701, 0x371c, 0x379a, 0x37c0, 0x3805, 0x38c4, 0x38c9, 0x38d0,
    0x3901, 0x391c, 0x3942, 0x3968, 0x3a05, 0x3a0c, 0x3a11, 0x3a14, 0x3a19, 0x3a2c, 0x3a31, 0x3a90, 0x3a95, 0x3a98,
    0x3a9d, 0x3ac4, 0x3ac9, 0x3ad0, 0x3af5, 0x3af8, 0x3b01, 0x3b14, 0x3b19, 0x3b1c, 0x3b42, 0x3b68, 0x3b71, 0x3b80,
    0x3c01, 0x3c04, 0x3c82, 0x3cd0, 0x3d01, 0x3d20, 0x3d25, 0x3db4, 0x3e21, 0x3e34, 0x4001, 0x40ac, 0x40fd, 0x4102,
    0x4128, 0x4141, 0x4158, 0x4169, 0x4178, 0x4185, 0x4188, 0x4195, 0x419c, 0x41b9, 0x41c4, 0x41d5, 0x4208, 0x4239,
    0x423c, 0x4242, 0x4268, 0x4281, 0x4318, 0x431d, 0x4320, 0x4335, 0x4338, 0x4341, 0x43ec, 0x43f1, 0x4924, 0x4929,
    0x4938, 0x4941, 0x495c, 0x4961, 0x4964, 0x4969, 0x4978, 0x4981, 0x4a24, 0x4a29, 0x4a38, 0x4a41, 0x4ac4, 0x4ac9,
    0x4ad8, 0x4ae1, 0x4afc, 0x4b01, 0x4b04, 0x4b09, 0x4b18, 0x4b21, 0x4b5c, 0x4b61, 0x4c44, 0x4c49, 0x4c58, 0x4c61,
    0x4d6c, 0x4da6, 0x4df4, 0x4e01, 0x4e40, 0x4e81, 0x4fd8, 0x4fe1, 0x4ff8, 0x5005, 0x59b4, 0x59bd, 0x5a03, 0x5a05,
    0x5a6c, 0x5a81, 0x5bac, 0x5bba, 0x5bc5, 0x5be4, 0x5c01, 0x5c48, 0x5c7d, 0x5cc8, 0x5d01, 0x5d48, 0x5d81, 0x5db4,
    0x5db9, 0x5dc4, 0x5e01, 0x5ed0, 0x5f5d, 0x5f60, 0x5f71, 0x5f74, 0x5f82, 0x5fa8, 0x5fc2, 0x5fe8, 0x6042, 0x6068,
    0x6081, 0x61e4, 0x6201, 0x6214, 0x621d, 0x62a4, 0x62a9, 0x62ac, 0x62c1, 0x63d8, 0x6401, 0x647c, 0x651a, 0x6541,
    0x65b8, 0x65c1, 0x65d4, 0x6601, 0x66b0, 0x66c1, 0x6728, 0x6742, 0x676c, 0x6801, 0x685c, 0x6881, 0x6954, 0x6a02,
    0x6a28, 0x6a42, 0x6a68, 0x6a9d, 0x6aa0, 0x6c15, 0x6cd0, 0x6d15, 0x6d34, 0x6d42, 0x6d68, 0x6e0d, 0x6e84, 0x6eb9,
    0x6ec2, 0x6ee9, 0x6f98, 0x7001, 0x7090, 0x7102, 0x7128, 0x7135, 0x7142, 0x7169, 0x71f8, 0x7201, 0x722c, 0x7241,
    0x72ec, 0x72f5, 0x7300, 0x73a5, 0x73b4, 0x73b9, 0x73d0, 0x73d5, 0x73dc, 0x73e9, 0x73ec, 0x7401, 0x7700, 0x7801,
    0x7c58, 0x7c61, 0x7c78, 0x7c81, 0x7d18, 0x7d21, 0x7d38, 0x7d41, 0x7d60, 0x7d65, 0x7d68, 0x7d6d, 0x7d70, 0x7d75,
    0x7d78, 0x7d7d, 0x7df8, 0x7e01, 0x7ed4, 0x7ed9, 0x7ef4, 0x7ef9, 0x7efc, 0x7f09, 0x7f14, 0x7f19, 0x7f34, 0x7f41,
    0x7f50, 0x7f59, 0x7f70, 0x7f81, 0x7fb4, 0x7fc9, 0x7fd4, 0x7fd9, 0x7ff4, 0x8003, 0x802c, 0x80a3, 0x80a8, 0x80bf,
    0x80c0, 0x817f, 0x8180, 0x81c2, 0x81c5, 0x81c8, 0x81d2, 0x81e8, 0x81fd, 0x8202, 0x8228, 0x8241, 0x8274, 0x8409,
    0x840c, 0x841d, 0x8420, 0x8429, 0x8450, 0x8455, 0x8458, 0x8465, 0x8478, 0x8491, 0x8494, 0x8499, 0x849c, 0x84a1,
    0x84a4, 0x84a9, 0x84b8, 0x84bd, 0x84e8, 0x84f1, 0x8500, 0x8515, 0x8528, 0x8539, 0x853c, 0x8542, 0x860d, 0x8616,
    0x8628, 0x9182, 0x9270, 0x93aa, 0x9400, 0x9dda, 0x9e50, 0xb001, 0xb394, 0xb3ad, 0xb3bc, 0xb3c9, 0xb3d0, 0xb3f6,
    0xb3f8, 0xb401, 0xb498, 0xb49d, 0xb4a0, 0xb4b5, 0xb4b8, 0xb4c1, 0xb5a0, 0xb5bd, 0xb5c0, 0xb601, 0xb65c, 0xb681,
    0xb69c, 0xb6a1, 0xb6bc, 0xb6c1, 0xb6dc, 0xb6e1, 0xb6fc, 0xb701, 0xb71c, 0xb721, 0xb73c, 0xb741, 0xb75c, 0xb761,
    0xb77c, 0xb8bd, 0xb8c0, 0xc003, 0xc004, 0xc015, 0xc01e, 0xc020, 0xc086, 0xc0a8, 0xc0c5, 0xc0d8, 0xc0e2, 0xc0ed,
    0xc0f4, 0xc105, 0xc25c, 0xc275, 0xc280, 0xc285, 0xc3ec, 0xc3f1, 0xc400, 0xc415, 0xc4c0, 0xc4c5, 0xc63c, 0xc64a,
    0xc658, 0xc681, 0xc700, 0xc7c1, 0xc800, 0xc882, 0xc8a8, 0xc922, 0xc940, 0xc946, 0xc980, 0xca02, 0xca28, 0xcac6,
    0xcb00, 0xd001, 0x13700, 0x13801, 0x29234, 0x29341, 0x293f8, 0x29401, 0x29834, 0x29841, 0x29882, 0x298a9,
    0x298b0, 0x29901, 0x299bc, 0x299fd, 0x29a78, 0x29a81, 0x29b9a, 0x29bc0, 0x29c5d, 0x29c80, 0x29c89, 0x29e24,
    0x29e2d, 0x29f38, 0x29f41, 0x29f48, 0x29f4d, 0x29f50, 0x29f55, 0x29f74, 0x29fc9, 0x2a008, 0x2a00d, 0x2a018,
    0x2a01d, 0x2a02c, 0x2a031, 0x2a08c, 0x2a0c2, 0x2a0d8, 0x2a101, 0x2a1d0, 0x2a209, 0x2a2d0, 0x2a342, 0x2a368,
    0x2a3c9, 0x2a3e0, 0x2a3ed, 0x2a3f0, 0x2a3f5, 0x2a3fc, 0x2a402, 0x2a429, 0x2a498, 0x2a4c1, 0x2a51c, 0x2a581,
    0x2a5f4, 0x2a611, 0x2a6cc, 0x2a73d, 0x2a742, 0x2a768, 0x2a781, 0x2a794, 0x2a799, 0x2a7c2, 0x2a7e9, 0x2a7fc,
    0x2a801, 0x2a8a4, 0x2a901, 0x2a90c, 0x2a911, 0x2a930, 0x2a942, 0x2a968, 0x2a981, 0x2a9dc, 0x2a9e9, 0x2a9ec,
    0x2a9f9, 0x2aac0, 0x2aac5, 0x2aac8, 0x2aad5, 0x2aadc, 0x2aae5, 0x2aaf8, 0x2ab01, 0x2ab04, 0x2ab09, 0x2ab0c,
    0x2ab6d, 0x2ab78, 0x2ab81, 0x2abac, 0x2abc9, 0x2abd4, 0x2ac05, 0x2ac1c, 0x2ac25, 0x2ac3c, 0x2ac45, 0x2ac5c,
    0x2ac81, 0x2ac9c, 0x2aca1, 0x2acbc, 0x2acc1, 0x2ad6c, 0x2ad71, 0x2ada8, 0x2adc1, 0x2af8c, 0x2afc2, 0x2afe8,
    0x2b001, 0x35e90, 0x35ec1, 0x35f1c, 0x35f2d, 0x35ff0, 0x3e401, 0x3e9b8, 0x3e9c1, 0x3eb68, 0x3ec01, 0x3ec1c,
    0x3ec4d, 0x3ec60, 0x3ec75, 0x3ec78, 0x3ec7d, 0x3eca4, 0x3eca9, 0x3ecdc, 0x3ece1, 0x3ecf4, 0x3ecf9, 0x3ecfc,
    0x3ed01, 0x3ed08, 0x3ed0d, 0x3ed14, 0x3ed19, 0x3eec8, 0x3ef4d, 0x3f4f8, 0x3f541, 0x3f640, 0x3f649, 0x3f720,
    0x3f7c1, 0x3f7f0, 0x3f9c1, 0x3f9d4, 0x3f9d9, 0x3fbf4, 0x3fc42, 0x3fc68, 0x3fc85, 0x3fcec, 0x3fd05, 0x3fd6c,
    0x3fd99, 0x3fefc, 0x3ff09, 0x3ff20, 0x3ff29, 0x3ff40, 0x3ff49, 0x3ff60, 0x3ff69, 0x3ff74, 0x40001, 0x40030,
    0x40035, 0x4009c, 0x400a1, 0x400ec, 0x400f1, 0x400f8, 0x400fd, 0x40138, 0x40141, 0x40178, 0x40201, 0x403ec,
    0x4041e, 0x404d0, 0x40502, 0x405e4, 0x4062a, 0x40630, 0x40a01, 0x40a74, 0x40a81, 0x40b44, 0x40b86, 0x40bf0,
    0x40c01, 0x40c82, 0x40c90, 0x40cb5, 0x40d06, 0x40d09, 0x40d2a, 0x40d2c, 0x40d41, 0x40dd8, 0x40e01, 0x40e78,
    0x40e81, 0x40f10, 0x40f21, 0x40f40, 0x40f46, 0x40f58, 0x41001, 0x41278, 0x41282, 0x412a8, 0x412c1, 0x41350,
    0x41361, 0x413f0, 0x41401, 0x414a0, 0x414c1, 0x41590, 0x415c1, 0x415ec, 0x415f1, 0x4162c, 0x41631, 0x4164c,
    0x41651, 0x41658, 0x4165d, 0x41688, 0x4168d, 0x416c8, 0x416cd, 0x416e8, 0x416ed, 0x416f4, 0x41701, 0x417d0,
    0x41801, 0x41cdc, 0x41d01, 0x41d58, 0x41d81, 0x41da0, 0x41e01, 0x41e18, 0x41e1d, 0x41ec4, 0x41ec9, 0x41eec,
    0x42001, 0x42018, 0x42021, 0x42024, 0x42029, 0x420d8, 0x420dd, 0x420e4, 0x420f1, 0x420f4, 0x420fd, 0x42158,
    0x42162, 0x42181, 0x421dc, 0x421e6, 0x42201, 0x4227c, 0x4229e, 0x422c0, 0x42381, 0x423cc, 0x423d1, 0x423d8,
    0x423ee, 0x42401, 0x4245a, 0x42470, 0x42481, 0x424e8, 0x42601, 0x426e0, 0x426f2, 0x426f9, 0x42702, 0x42740,
    0x4274a, 0x42801, 0x42804, 0x42841, 0x42850, 0x42855, 0x42860, 0x42865, 0x428d8, 0x42902, 0x42924, 0x42981,
    0x429f6, 0x429fc, 0x42a01, 0x42a76, 0x42a80, 0x42b01, 0x42b20, 0x42b25, 0x42b94, 0x42bae, 0x42bc0, 0x42c01,
    0x42cd8, 0x42d01, 0x42d58, 0x42d62, 0x42d81, 0x42dcc, 0x42de2, 0x42e01, 0x42e48, 0x42ea6, 0x42ec0, 0x43001,
    0x43124, 0x43201, 0x432cc, 0x43301, 0x433cc, 0x433ea, 0x43401, 0x43490, 0x434c2, 0x434e8, 0x43502, 0x43529,
    0x43598, 0x435bd, 0x43618, 0x43982, 0x439fc, 0x43a01, 0x43aa8, 0x43ac1, 0x43ac8, 0x43b09, 0x43b14, 0x43c01,
    0x43c76, 0x43c9d, 0x43ca0, 0x43cc1, 0x43d18, 0x43d46, 0x43d54, 0x43dc1, 0x43e08, 0x43ec1, 0x43f16, 0x43f30,
    0x43f81, 0x43fdc, 0x4400d, 0x440e0, 0x4414a, 0x441c0, 0x441c5, 0x441cc, 0x441d5, 0x441d8, 0x4420d, 0x442c0,
    0x44341, 0x443a4, 0x443c2, 0x443e8, 0x4440d, 0x4449c, 0x444da, 0x44500, 0x44511, 0x44514, 0x4451d, 0x44520,
    0x44541, 0x445cc, 0x445d9, 0x445dc, 0x4460d, 0x446cc, 0x44705, 0x44714, 0x44742, 0x44769, 0x4476c, 0x44771,
    0x44774, 0x44786, 0x447d4, 0x44801, 0x44848, 0x4484d, 0x448b0, 0x448fd, 0x44904, 0x44a01, 0x44a1c, 0x44a21,
    0x44a24, 0x44a29, 0x44a38, 0x44a3d, 0x44a78, 0x44a7d, 0x44aa4, 0x44ac1, 0x44b7c, 0x44bc2, 0x44be8, 0x44c15,
    0x44c34, 0x44c3d, 0x44c44, 0x44c4d, 0x44ca4, 0x44ca9, 0x44cc4, 0x44cc9, 0x44cd0, 0x44cd5, 0x44ce8, 0x44cf5,
    0x44cf8, 0x44d41, 0x44d44, 0x44d75, 0x44d88, 0x44e01, 0x44e28, 0x44e2d, 0x44e30, 0x44e39, 0x44e3c, 0x44e41,
    0x44ed8, 0x44edd, 0x44ee0, 0x44f45, 0x44f48, 0x44f4d, 0x44f50, 0x45001, 0x450d4, 0x4511d, 0x4512c, 0x45142,
    0x45168, 0x4517d, 0x45188, 0x45201, 0x452c0, 0x45311, 0x45318, 0x4531d, 0x45320, 0x45342, 0x45368, 0x45601,
    0x456bc, 0x45761, 0x45770, 0x45801, 0x458c0, 0x45911, 0x45914, 0x45942, 0x45968, 0x45a01, 0x45aac, 0x45ae1,
    0x45ae4, 0x45b02, 0x45b28, 0x45b42, 0x45b90, 0x45c01, 0x45c6c, 0x45cc2, 0x45cf0, 0x45d01, 0x45d1c, 0x46001,
    0x460b0, 0x46281, 0x46382, 0x463cc, 0x463fd, 0x4641c, 0x46425, 0x46428, 0x46431, 0x46450, 0x46455, 0x4645c,
    0x46461, 0x464c0, 0x464fd, 0x46500, 0x46505, 0x46508, 0x46542, 0x46568, 0x46681, 0x466a0, 0x466a9, 0x46744,
    0x46785, 0x46788, 0x4678d, 0x46790, 0x46801, 0x46804, 0x4682d, 0x468cc, 0x468e9, 0x468ec, 0x46941, 0x46944,
    0x46971, 0x46a28, 0x46a75, 0x46a78, 0x46ac1, 0x46be4, 0x46f01, 0x46f84, 0x46fc2, 0x46fe8, 0x47001, 0x47024,
    0x47029, 0x470bc, 0x47101, 0x47104, 0x47142, 0x471b4, 0x471c9, 0x47240, 0x47401, 0x4741c, 0x47421, 0x47428,
    0x4742d, 0x474c4, 0x47519, 0x4751c, 0x47542, 0x47568, 0x47581, 0x47598, 0x4759d, 0x475a4, 0x475a9, 0x47628,
    0x47661, 0x47664, 0x47682, 0x476a8, 0x47b81, 0x47bcc, 0x47c09, 0x47c0c, 0x47c11, 0x47c44, 0x47c49, 0x47cd0,
    0x47d42, 0x47d68, 0x47ec1, 0x47ec4, 0x47f02, 0x47f54, 0x48001, 0x48e68, 0x49002, 0x491bc, 0x49201, 0x49510,
    0x4be41, 0x4bfc4, 0x4c001, 0x4d0c0, 0x4d105, 0x4d11c, 0x4d181, 0x50fec, 0x51001, 0x5191c, 0x58401, 0x58478,
    0x584c2, 0x584e8, 0x5a001, 0x5a8e4, 0x5a901, 0x5a97c, 0x5a982, 0x5a9a8, 0x5a9c1, 0x5aafc, 0x5ab02, 0x5ab28,
    0x5ab41, 0x5abb8, 0x5ac01, 0x5acc0, 0x5ad01, 0x5ad10, 0x5ad42, 0x5ad68, 0x5ad6e, 0x5ad88, 0x5ad8d, 0x5ade0,
    0x5adf5, 0x5ae40, 0x5b501, 0x5b5b4, 0x5b5c2, 0x5b5e8, 0x5b901, 0x5ba02, 0x5ba5c, 0x5bc01, 0x5bd2c, 0x5bd41,
    0x5bd44, 0x5be4d, 0x5be80, 0x5bf81, 0x5bf88, 0x5bf8d, 0x5bf90, 0x5c001, 0x61fe0, 0x62001, 0x63358, 0x633fd,
    0x63424, 0x6bfc1, 0x6bfd0, 0x6bfd5, 0x6bff0, 0x6bff5, 0x6bffc, 0x6c001, 0x6c48c, 0x6c4c9, 0x6c4cc, 0x6c541,
    0x6c54c, 0x6c555, 0x6c558, 0x6c591, 0x6c5a0, 0x6c5c1, 0x6cbf0, 0x6f001, 0x6f1ac, 0x6f1c1, 0x6f1f4, 0x6f201,
    0x6f224, 0x6f241, 0x6f268, 0x733c2, 0x733e8, 0x74b02, 0x74b50, 0x74b82, 0x74bd0, 0x74d82, 0x74de4, 0x75001,
    0x75154, 0x75159, 0x75274, 0x75279, 0x75280, 0x75289, 0x7528c, 0x75295, 0x7529c, 0x752a5, 0x752b4, 0x752b9,
    0x752e8, 0x752ed, 0x752f0, 0x752f5, 0x75310, 0x75315, 0x75418, 0x7541d, 0x7542c, 0x75435, 0x75454, 0x75459,
    0x75474, 0x75479, 0x754e8, 0x754ed, 0x754fc, 0x75501, 0x75514, 0x75519, 0x7551c, 0x75529, 0x75544, 0x75549,
    0x75a98, 0x75aa1, 0x75b04, 0x75b09, 0x75b6c, 0x75b71, 0x75bec, 0x75bf1, 0x75c54, 0x75c59, 0x75cd4, 0x75cd9,
    0x75d3c, 0x75d41, 0x75dbc, 0x75dc1, 0x75e24, 0x75e29, 0x75ea4, 0x75ea9, 0x75f0c, 0x75f11, 0x75f30, 0x75f3a,
    0x76000, 0x77c01, 0x77c7c, 0x77c95, 0x77cac, 0x780c1, 0x781b8, 0x78401, 0x784b4, 0x784dd, 0x784f8, 0x78502,
    0x78528, 0x78539, 0x7853c, 0x78a41, 0x78ab8, 0x78b01, 0x78bb0, 0x78bc2, 0x78be8, 0x79341, 0x793b0, 0x793c2,
    0x793e8, 0x79741, 0x797b8, 0x797c1, 0x797c6, 0x797ec, 0x79f81, 0x79f9c, 0x79fa1, 0x79fb0, 0x79fb5, 0x79fbc,
    0x79fc1, 0x79ffc, 0x7a001, 0x7a314, 0x7a31e, 0x7a340, 0x7a401, 0x7a510, 0x7a52d, 0x7a530, 0x7a542, 0x7a568,
    0x7b1c6, 0x7b2b0, 0x7b2b6, 0x7b2c0, 0x7b2c6, 0x7b2d4, 0x7b406, 0x7b4b8, 0x7b4be, 0x7b4f8, 0x7b801, 0x7b810,
    0x7b815, 0x7b880, 0x7b885, 0x7b88c, 0x7b891, 0x7b894, 0x7b89d, 0x7b8a0, 0x7b8a5, 0x7b8cc, 0x7b8d1, 0x7b8e0,
    0x7b8e5, 0x7b8e8, 0x7b8ed, 0x7b8f0, 0x7b909, 0x7b90c, 0x7b91d, 0x7b920, 0x7b925, 0x7b928, 0x7b92d, 0x7b930,
    0x7b935, 0x7b940, 0x7b945, 0x7b94c, 0x7b951, 0x7b954, 0x7b95d, 0x7b960, 0x7b965, 0x7b968, 0x7b96d, 0x7b970,
    0x7b975, 0x7b978, 0x7b97d, 0x7b980, 0x7b985, 0x7b98c, 0x7b991, 0x7b994, 0x7b99d, 0x7b9ac, 0x7b9b1, 0x7b9cc,
    0x7b9d1, 0x7b9e0, 0x7b9e5, 0x7b9f4, 0x7b9f9, 0x7b9fc, 0x7ba01, 0x7ba28, 0x7ba2d, 0x7ba70, 0x7ba85, 0x7ba90,
    0x7ba95, 0x7baa8, 0x7baad, 0x7baf0, 0x7c402, 0x7c434, 0x7efc2, 0x7efe8, 0x80001, 0xa9b80, 0xa9c01, 0xadce8,
    0xadd01, 0xae078, 0xae081, 0xb3a88, 0xb3ac1, 0xbaf84, 0xbafc1, 0xbb978, 0xbe001, 0xbe878, 0xc0001, 0xc4d2c,
    0xc4d41, 0xc8ec0,
};
/* unicode-table end */

#define BITNET__CP_INVALID 0xFFFFFFFFu /* one byte that is not valid UTF-8: class "other" */

static int bitnet__uni_class(uint32_t cp) {
    size_t lo = 0, hi = sizeof bitnet__uni_runs / sizeof bitnet__uni_runs[0];
    if (cp < 128) { /* ASCII without the search */
        if ((cp | 32) - 'a' < 26) return BITNET__CL_LETTER;
        if (cp - '0' < 10) return BITNET__CL_NUMBER;
        return (cp == ' ' || (cp >= 9 && cp <= 13)) ? BITNET__CL_SPACE : BITNET__CL_OTHER;
    }
    if (cp > 0x10FFFF) return BITNET__CL_OTHER;
    while (hi - lo > 1) { /* the last run starting at or before cp */
        size_t mid = lo + (hi - lo) / 2;
        if ((bitnet__uni_runs[mid] >> 2) <= cp) lo = mid;
        else hi = mid;
    }
    return (int)(bitnet__uni_runs[lo] & 3);
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

typedef struct bitnet__ch { uint32_t cp; int cls; size_t len; } bitnet__ch;
static bitnet__ch bitnet__ch_at(const unsigned char *s, size_t n, size_t i) { /* i < n */
    bitnet__ch c;
    c.cp = bitnet__utf8_next(s + i, n - i, &c.len);
    c.cls = c.cp == BITNET__CP_INVALID ? BITNET__CL_OTHER : bitnet__uni_class(c.cp);
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

BITNET_API bitnet_result bitnet_pretokenize(const char *text, size_t len, size_t *ends, size_t cap, size_t *n_out) {
    size_t p = 0, count = 0;
    BITNET__CHECK_PTR(n_out);
    if (!text && len) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_pretokenize: 'text' is NULL");
    if (!ends && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_pretokenize: 'ends' is NULL");
    while (p < len) {
        p = bitnet__pretok_end((const unsigned char *)text, len, p);
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
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
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
};

static int32_t bitnet__tok_find(const bitnet_tokenizer *t, const unsigned char *s, size_t n) {
    uint32_t h = bitnet__hash_bytes(s, n) & t->tok_mask;
    for (;; h = (h + 1) & t->tok_mask) {
        int32_t id = t->tok_map[h];
        if (id < 0) return -1;
        if (t->off[id + 1] - t->off[id] == n && memcmp(t->bytes + t->off[id], s, n) == 0) return id;
    }
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
    bitnet__free(t);
}

static int bitnet__is_special_name(const unsigned char *s, size_t n) {
    return n >= 5 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>';
}

BITNET_API bitnet_result bitnet_tokenizer_create(const bitnet_tokenizer_desc *desc, bitnet_tokenizer **out) {
    bitnet_tokenizer *t;
    bitnet_result r = BITNET_OK;
    uint16_t b2c[256];
    int16_t c2b[324];
    uint64_t i, total = 0;
    int32_t *first_rank = NULL;
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
        return bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: special ids bos %d eos %d eot %d outside the %d tokens",
                           (int)desc->bos, (int)desc->eos, (int)desc->eot, (int)n);
    for (i = 0; i < desc->n_tokens; i++) {
        if (!desc->tokens[i].ptr && desc->tokens[i].len)
            return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenizer_create: token %llu has no text", (unsigned long long)i);
        total += desc->tokens[i].len;
        if (total >= UINT32_MAX) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenizer_create: token text over 4 GiB");
    }
    bitnet__gpt2_tables(b2c, c2b);
    t = (bitnet_tokenizer *)bitnet__calloc(1, sizeof *t);
    if (!t) return BITNET_ERR_OUT_OF_MEMORY;
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
            uint32_t h = bitnet__hash_bytes(dst, (size_t)k) & t->tok_mask;
            while (t->tok_map[h] >= 0) h = (h + 1) & t->tok_mask;
            t->tok_map[h] = (int32_t)i;
            if (k == 1) t->byte_id[dst[0]] = (int32_t)i;
        }
    }
    for (i = 0; i < 256; i++)
        if (t->byte_id[i] < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: no token for byte 0x%02x (not a byte-level vocabulary)", (unsigned)i);
            goto done;
        }
    /* Merges: "a b" -> (id a, id b) -> (priority, id of ab). A token's priority is the rank of its
       first merge, so a list holding every split of a token behaves like tiktoken's ranks. */
    for (i = 0; i < desc->n_merges; i++) max_merge = BITNET__MAX(max_merge, (size_t)desc->merges[i].len);
    scratch = (unsigned char *)bitnet__malloc(max_merge + 1);
    if (!scratch) { r = BITNET_ERR_OUT_OF_MEMORY; goto done; }
    for (i = 0; i < desc->n_merges; i++) {
        const unsigned char *s = (const unsigned char *)desc->merges[i].ptr, *sp;
        size_t len = (size_t)desc->merges[i].len;
        long ka, kb;
        int32_t a, b, m;
        uint32_t h;
        sp = (s && len) ? (const unsigned char *)memchr(s, ' ', len) : NULL;
        ka = sp ? bitnet__gpt2_decode(c2b, s, (size_t)(sp - s), scratch) : -1;
        kb = ka > 0 ? bitnet__gpt2_decode(c2b, sp + 1, len - (size_t)(sp - s) - 1, scratch + ka) : -1;
        a = ka > 0 ? bitnet__tok_find(t, scratch, (size_t)ka) : -1;
        b = kb > 0 ? bitnet__tok_find(t, scratch + ka, (size_t)kb) : -1;
        m = (a >= 0 && b >= 0) ? bitnet__tok_find(t, scratch, (size_t)(ka + kb)) : -1;
        if (m < 0) {
            r = bitnet__err(BITNET_ERR_BAD_METADATA, "bitnet_tokenizer_create: merge %llu '%.*s' does not join two tokens into a token",
                            (unsigned long long)i, (int)BITNET__MIN(len, 64), s ? (const char *)s : "");
            goto done;
        }
        if (first_rank[m] == INT32_MAX) first_rank[m] = (int32_t)i;
        for (h = bitnet__hash_pair((uint32_t)a, (uint32_t)b) & t->pair_mask; t->pairs[h].left != UINT32_MAX; h = (h + 1) & t->pair_mask)
            if (t->pairs[h].left == (uint32_t)a && t->pairs[h].right == (uint32_t)b) break;
        if (t->pairs[h].left == UINT32_MAX) { /* the first of duplicate merges wins */
            t->pairs[h].left = (uint32_t)a;
            t->pairs[h].right = (uint32_t)b;
            t->pairs[h].prio = first_rank[m];
            t->pairs[h].merged = m;
        }
    }
    if (t->eot < 0) { /* LLaMA 3's end of turn, when the metadata does not name it */
        int32_t k;
        for (k = 0; k < t->n_specials; k++) {
            int32_t id = t->specials[k];
            if (t->off[id + 1] - t->off[id] == 10 && memcmp(t->bytes + t->off[id], "<|eot_id|>", 10) == 0) t->eot = id;
        }
    }
done:
    bitnet__free(first_rank);
    bitnet__free(scratch);
    if (r != BITNET_OK) {
        bitnet_tokenizer_free(t);
        return r;
    }
    *out = t;
    return BITNET_OK;
}

/* ---- encoding ----------------------------------------------------------------------------- */

typedef struct bitnet__sym { int32_t id, prev, next; } bitnet__sym;
typedef struct bitnet__cand { int32_t prio, left, right, lid, rid, merged; } bitnet__cand;
typedef struct bitnet__enc {
    const bitnet_tokenizer *t;
    int32_t *ids;
    size_t cap, count;
    bitnet__sym *sym;      /* scratch for the longest piece so far */
    bitnet__cand *heap;
    size_t scratch_cap, nheap;
} bitnet__enc;

static void bitnet__emit(bitnet__enc *e, int32_t id) {
    if (e->count < e->cap) e->ids[e->count] = id;
    e->count++;
}
static int bitnet__cand_less(const bitnet__cand *a, const bitnet__cand *b) {
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left); /* lowest rank, then leftmost */
}
static void bitnet__heap_push(bitnet__enc *e, int32_t left, int32_t right) {
    const bitnet__pair *p = bitnet__pair_find(e->t, (uint32_t)e->sym[left].id, (uint32_t)e->sym[right].id);
    bitnet__cand c;
    size_t i;
    if (!p) return;
    c.prio = p->prio;
    c.left = left;
    c.right = right;
    c.lid = e->sym[left].id;
    c.rid = e->sym[right].id;
    c.merged = p->merged;
    for (i = e->nheap++; i > 0 && bitnet__cand_less(&c, &e->heap[(i - 1) / 2]); i = (i - 1) / 2) e->heap[i] = e->heap[(i - 1) / 2];
    e->heap[i] = c;
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
    if ((id = bitnet__tok_find(t, s, n)) >= 0) { bitnet__emit(e, id); return BITNET_OK; } /* a whole token */
    if (n > e->scratch_cap) {
        size_t cap = BITNET__MAX(n, 2 * e->scratch_cap), hbytes;
        if (cap > (size_t)INT32_MAX || !bitnet__mul_size(cap, 3 * sizeof(bitnet__cand), &hbytes))
            return bitnet__err(BITNET_ERR_OVERFLOW, "bitnet_tokenize: a piece of %zu bytes is too long", n);
        bitnet__free(e->sym);
        bitnet__free(e->heap);
        e->heap = NULL;
        e->scratch_cap = 0;
        e->sym = (bitnet__sym *)bitnet__malloc(cap * sizeof(bitnet__sym));
        if (!e->sym) return BITNET_ERR_OUT_OF_MEMORY;
        e->heap = (bitnet__cand *)bitnet__malloc(hbytes); /* n - 1 initial pairs, at most 2 per merge */
        if (!e->heap) return BITNET_ERR_OUT_OF_MEMORY;
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

static bitnet_result bitnet__encode_text(bitnet__enc *e, const unsigned char *s, size_t n) {
    size_t p = 0;
    while (p < n) {
        size_t q = bitnet__pretok_end(s, n, p);
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
    BITNET__CHECK_PTR(t);
    BITNET__CHECK_PTR(n_out);
    *n_out = 0;
    if (!text && len) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenize: 'text' is NULL");
    if (!ids && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_tokenize: 'ids' is NULL");
    if (add_bos && t->bos < 0) return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_tokenize: add_bos, but the vocabulary has no BOS");
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
        r = bitnet__encode_text(&e, s + seg, p - seg);
        if (sid >= 0) bitnet__emit(&e, sid);
        seg = p + slen;
    }
    bitnet__free(e.sym);
    bitnet__free(e.heap);
    if (r != BITNET_OK) return r;
    *n_out = e.count;
    if (e.count > cap) return bitnet__err(BITNET_ERR_BAD_SIZE, "bitnet_tokenize: %zu tokens, room for %zu", e.count, cap);
    return BITNET_OK;
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
                r = bitnet__err(BITNET_ERR_CORRUPT, "bitnet_vocab_from_tiktoken: '%s' line %zu is not \"base64 rank\" with a new rank below %zu",
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
            if (raw_off[id_ + 1] - raw_off[id_] == (l) && memcmp(raw + raw_off[id_], (s), (l)) == 0) { (res) = id_; break; } } \
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
            for (y = x; y > 0 && (splits[y - 1].left > v.left || (splits[y - 1].left == v.left && splits[y - 1].right > v.right)); y--)
                splits[y] = splits[y - 1];
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

/* TEMPORARY: compiled once the GGUF reader (>>gguf) is merged; until then it has no accessors to link. */
#ifdef BITNET__GGUF_READER_MERGED

static bitnet_result bitnet__gguf_token_id(const bitnet_gguf *g, const char *key, int32_t *out) {
    uint32_t v;
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
    bitnet_result r;
    BITNET__CHECK_PTR(out);
    *out = NULL;
    BITNET__CHECK_PTR(g);
    memset(&d, 0, sizeof d);
    r = bitnet_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (r != BITNET_OK) return r;
    if (model.len != 4 || memcmp(model.ptr, "gpt2", 4) != 0)
        return bitnet__err(BITNET_ERR_UNSUPPORTED, "tokenizer.ggml.model is '%.*s'; only byte-level BPE ('gpt2') is supported",
                           (int)BITNET__MIN(model.len, 64), model.ptr);
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.pre") >= 0 && bitnet_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == BITNET_OK &&
        !(pre.len == 9 && memcmp(pre.ptr, "llama-bpe", 9) == 0))
        bitnet__log(BITNET_LOG_WARN, "tokenizer.ggml.pre is '%.*s'; using the LLaMA 3 pre-tokenizer",
                    (int)BITNET__MIN(pre.len, 64), pre.ptr);
    BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n_tok));
    if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.tokens is not an array of strings");
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_mer));
        if (et != BITNET_GGUF_STRING) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.merges is not an array of strings");
    }
    if (n_tok == 0 || n_tok > (uint64_t)INT32_MAX - 1 || n_mer > (uint64_t)INT32_MAX)
        return bitnet__err(BITNET_ERR_BAD_METADATA, "%llu tokens and %llu merges", (unsigned long long)n_tok, (unsigned long long)n_mer);
    if (bitnet_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        const unsigned char *raw;
        BITNET__TRY(bitnet_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n_types));
        if (et != BITNET_GGUF_INT32 || n_types != n_tok)
            return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.token_type is not %llu int32 values", (unsigned long long)n_tok);
        raw = (const unsigned char *)bitnet_gguf_arr_data(g, "tokenizer.ggml.token_type");
        if (!raw) return bitnet__err(BITNET_ERR_BAD_METADATA, "tokenizer.ggml.token_type has no data");
        types = (int32_t *)bitnet__malloc((size_t)n_tok * sizeof(int32_t));
        if (!types) return BITNET_ERR_OUT_OF_MEMORY;
        for (i = 0; i < n_tok; i++) /* little-endian, maybe unaligned */
            types[i] = (int32_t)((uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 |
                                 (uint32_t)raw[4 * i + 3] << 24);
    }
    strs = (bitnet_gguf_str *)bitnet__calloc((size_t)(n_tok + n_mer), sizeof(bitnet_gguf_str));
    if (!strs) { bitnet__free(types); return BITNET_ERR_OUT_OF_MEMORY; }
    r = BITNET_OK;
    for (i = 0; i < n_tok && r == BITNET_OK; i++) r = bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &strs[i]);
    for (i = 0; i < n_mer && r == BITNET_OK; i++) r = bitnet_gguf_arr_str(g, "tokenizer.ggml.merges", i, &strs[n_tok + i]);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.bos_token_id", &d.bos);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.eos_token_id", &d.eos);
    if (r == BITNET_OK) r = bitnet__gguf_token_id(g, "tokenizer.ggml.eot_token_id", &d.eot);
    if (r == BITNET_OK) {
        d.tokens = strs;
        d.n_tokens = n_tok;
        d.merges = strs + n_tok;
        d.n_merges = n_mer;
        d.token_types = types;
        r = bitnet_tokenizer_create(&d, out);
    }
    bitnet__free(strs);
    bitnet__free(types);
    return r;
}
#endif

/* ---- chat format ----------------------------------------------------------------------------- */

BITNET_API bitnet_result bitnet_chat_format(const bitnet_chat_message *msgs, size_t n, int add_generation_prompt,
                                            char *buf, size_t cap, size_t *len_out) {
    static const char *const bos = "<|begin_of_text|>", *const eot = "<|eot_id|>";
    size_t pass, i, len = 0;
    BITNET__CHECK_PTR(len_out);
    *len_out = 0;
    if (!msgs && n) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: 'msgs' is NULL");
    if (!buf && cap) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: 'buf' is NULL");
    for (pass = 0; pass < 2; pass++) { /* measure, then write */
        len = 0;
#define BITNET__PUT(s, l) do { if (pass) memcpy(buf + len, (s), (l)); len += (l); } while (0)
        BITNET__PUT(bos, strlen(bos));
        for (i = 0; i < n; i++) {
            const char *role = msgs[i].role, *c = msgs[i].content, *prefix;
            size_t a = 0, b, adv;
            if (!role || !c) return bitnet__err(BITNET_ERR_NULL_POINTER, "bitnet_chat_format: message %zu has a NULL role or content", i);
            if (strcmp(role, "system") == 0) prefix = "System: ";
            else if (strcmp(role, "user") == 0) prefix = "User: ";
            else if (strcmp(role, "assistant") == 0) prefix = "Assistant: ";
            else return bitnet__err(BITNET_ERR_INVALID_ARG, "bitnet_chat_format: message %zu has role '%s' (system, user or assistant)", i, role);
            b = strlen(c);
            while (a < b) { /* trim white space (Unicode White_Space) at both ends */
                uint32_t cp = bitnet__utf8_next((const unsigned char *)c + a, b - a, &adv);
                if (cp == BITNET__CP_INVALID || bitnet__uni_class(cp) != BITNET__CL_SPACE) break;
                a += adv;
            }
            while (b > a) {
                size_t s = b - 1;
                uint32_t cp;
                while (s > a && ((unsigned char)c[s] & 0xC0) == 0x80 && b - s < 4) s--;
                cp = bitnet__utf8_next((const unsigned char *)c + s, b - s, &adv);
                if (s + adv != b || cp == BITNET__CP_INVALID || bitnet__uni_class(cp) != BITNET__CL_SPACE) break;
                b = s;
            }
            BITNET__PUT(prefix, strlen(prefix));
            BITNET__PUT(c + a, b - a);
            BITNET__PUT(eot, strlen(eot));
        }
        if (add_generation_prompt) BITNET__PUT("Assistant: ", 11);
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
