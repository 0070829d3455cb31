/* GGUF reader and writer: round trips of every metadata and tensor type, the BitNet architecture
   check, the committed tiny model, and hostile files (truncated at every offset, huge counts,
   overflowing offsets and shapes, wrong types, bad versions and alignment, duplicates,
   inconsistent hyperparameters), each expecting its specific code. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <unistd.h>
#include <pthread.h>

static char tmpdir_buf[512];
static const char *tmp_path(const char *name) {
    static char path[640];
    const char *d = getenv("TMPDIR");
    snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s", d && *d ? d : "/tmp");
    snprintf(path, sizeof path, "%s/bitnet_test_gguf_%d_%s", tmpdir_buf, (int)getpid(), name);
    return path;
}

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = (unsigned char *)malloc(n > 0 ? (size_t)n + 1 : 1); /* NUL-terminated, for text */
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    if (buf) buf[n > 0 ? n : 0] = 0;
    fclose(f);
    *size = (size_t)n;
    return buf;
}
static int write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 0;
    ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}
static size_t find_bytes(const unsigned char *buf, size_t size, const char *s) {
    size_t n = strlen(s), i;
    for (i = 0; i + n <= size; i++)
        if (memcmp(buf + i, s, n) == 0) return i;
    return (size_t)-1;
}
static void put64(unsigned char *p, unsigned long long v) { int i; for (i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put32(unsigned char *p, unsigned v) { int i; for (i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }

/* Opens a memory image and returns the code, closing on success. */
static bitnet_result open_code(const void *buf, size_t size) {
    bitnet_gguf *g = NULL;
    bitnet_result r = bitnet_gguf_open_memory(buf, size, &g);
    if (r == BITNET_OK) bitnet_gguf_close(g);
    else if (g) r = BITNET_ERR_INVALID_STATE; /* out must stay NULL on failure */
    return r;
}

/* ---- round trip of every metadata type --------------------------------------------------------- */

static const uint8_t u8v = 200; static const int8_t i8v = -100; static const uint16_t u16v = 60000;
static const int16_t i16v = -30000; static const uint32_t u32v = 4000000000u; static const int32_t i32v = -2000000000;
static const float f32v = 3.25f; static const uint8_t boolv = 1; static const uint64_t u64v = 0xfedcba9876543210ull;
static const int64_t i64v = -0x123456789abcdefll; static const double f64v = -1.0e300;

static bitnet_result write_all_types(const char *path, uint32_t alignment) {
    bitnet_gguf_writer *w = NULL;
    bitnet_gguf_str s, strs[4];
    const int32_t ai32[5] = {1, -2, 3, -4, 5};
    const double af64[3] = {0.5, -0.25, 1e-300};
    const uint8_t abool[3] = {1, 0, 1};
    const uint16_t au16[2] = {1, 65535};
    const float f4[4] = {1, 2, 3, 4};
    uint64_t ne[4];
    unsigned char data[4096];
    bitnet_result r;
    int i;
    if (bitnet_gguf_writer_create(&w) != BITNET_OK) return BITNET_ERR_INVALID_STATE;
    s.ptr = "hello\0world"; s.len = 11; /* values may hold NULs */
    strs[0].ptr = "a"; strs[0].len = 1; strs[1].ptr = ""; strs[1].len = 0;
    strs[2].ptr = "\xc4\xa0the"; strs[2].len = 5; strs[3].ptr = "<|eot_id|>"; strs[3].len = 10;
    r = bitnet_gguf_writer_set(w, "t.u8", BITNET_GGUF_UINT8, &u8v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.i8", BITNET_GGUF_INT8, &i8v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.u16", BITNET_GGUF_UINT16, &u16v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.i16", BITNET_GGUF_INT16, &i16v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.u32", BITNET_GGUF_UINT32, &u32v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.i32", BITNET_GGUF_INT32, &i32v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.f32", BITNET_GGUF_FLOAT32, &f32v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.bool", BITNET_GGUF_BOOL, &boolv);
    if (!r) r = bitnet_gguf_writer_set(w, "t.str", BITNET_GGUF_STRING, &s);
    if (!r) r = bitnet_gguf_writer_set(w, "t.u64", BITNET_GGUF_UINT64, &u64v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.i64", BITNET_GGUF_INT64, &i64v);
    if (!r) r = bitnet_gguf_writer_set(w, "t.f64", BITNET_GGUF_FLOAT64, &f64v);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_i32", BITNET_GGUF_INT32, ai32, 5);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_f64", BITNET_GGUF_FLOAT64, af64, 3);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_bool", BITNET_GGUF_BOOL, abool, 3);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_u16", BITNET_GGUF_UINT16, au16, 2);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_str", BITNET_GGUF_STRING, strs, 4);
    if (!r) r = bitnet_gguf_writer_set_arr(w, "t.arr_empty", BITNET_GGUF_UINT8, NULL, 0);
    if (!r && alignment != 32) r = bitnet_gguf_writer_set_u32(w, "general.alignment", alignment);
    /* one tensor of each type; odd shapes where the type allows */
    ne[0] = 3; ne[1] = 5;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "f32", BITNET_TENSOR_F32, 2, ne);
    ne[0] = 7;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "f16", BITNET_TENSOR_F16, 1, ne);
    ne[0] = 2; ne[1] = 3; ne[2] = 5; ne[3] = 1;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "bf16", BITNET_TENSOR_BF16, 3, ne);
    ne[0] = 64; ne[1] = 3;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "q8", BITNET_TENSOR_Q8_0, 2, ne);
    ne[0] = 256; ne[1] = 3;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "i2s", BITNET_TENSOR_I2_S, 2, ne);
    ne[0] = 4;
    if (!r) r = bitnet_gguf_writer_add_tensor(w, "vec", BITNET_TENSOR_F32, 1, ne);
    if (!r) r = bitnet_gguf_writer_begin(w, path);
    /* sizes 60, 14, 60, 204, 224, 16: stream them in odd chunks, bytes = index pattern */
    for (i = 0; i < (int)sizeof data; i++) data[i] = (unsigned char)(i * 7 + 1);
    if (!r) r = bitnet_gguf_writer_write(w, data, 61);
    if (!r) r = bitnet_gguf_writer_write(w, data + 61, 1);
    if (!r) r = bitnet_gguf_writer_write(w, data + 62, 60 + 14 + 60 + 204 + 224 + 16 - 62);
    (void)f4;
    if (!r) r = bitnet_gguf_writer_finish(w);
    bitnet_gguf_writer_free(w);
    return r;
}

static void check_all_types(const bitnet_gguf *g, uint32_t alignment) {
    uint32_t u32; uint64_t u64; int64_t i64; float f; double d; int b;
    bitnet_gguf_str s;
    bitnet_gguf_type et;
    uint64_t n, off;
    const int32_t *ai;
    const double *ad;
    const uint8_t *ab;
    bitnet_tensor_info t;
    unsigned char expect[4096];
    int i;
    TEST_CHECK(bitnet_gguf_version(g) == 3);
    TEST_CHECK(bitnet_gguf_kv_count(g) == 18 + (alignment != 32));
    TEST_CHECK(bitnet_gguf_alignment(g) == alignment);
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.u8", &u32) == BITNET_OK && u32 == 200);
    TEST_CHECK(bitnet_gguf_get_i64(g, "t.i8", &i64) == BITNET_OK && i64 == -100);
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.i8", &u32) == BITNET_ERR_BAD_METADATA); /* negative */
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.u16", &u32) == BITNET_OK && u32 == 60000);
    TEST_CHECK(bitnet_gguf_get_i64(g, "t.i16", &i64) == BITNET_OK && i64 == -30000);
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.u32", &u32) == BITNET_OK && u32 == 4000000000u);
    TEST_CHECK(bitnet_gguf_get_i64(g, "t.i32", &i64) == BITNET_OK && i64 == -2000000000);
    TEST_CHECK(bitnet_gguf_get_f32(g, "t.f32", &f) == BITNET_OK && f == 3.25f);
    TEST_CHECK(bitnet_gguf_get_bool(g, "t.bool", &b) == BITNET_OK && b == 1);
    TEST_CHECK(bitnet_gguf_get_str(g, "t.str", &s) == BITNET_OK && s.len == 11 && memcmp(s.ptr, "hello\0world", 11) == 0);
    TEST_CHECK(bitnet_gguf_get_u64(g, "t.u64", &u64) == BITNET_OK && u64 == 0xfedcba9876543210ull);
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.u64", &u32) == BITNET_ERR_BAD_METADATA); /* does not fit */
    TEST_CHECK(strstr(bitnet_last_error(), "t.u64") != NULL);
    TEST_CHECK(bitnet_gguf_get_i64(g, "t.u64", &i64) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_get_i64(g, "t.i64", &i64) == BITNET_OK && i64 == -0x123456789abcdefll);
    TEST_CHECK(bitnet_gguf_get_f64(g, "t.f64", &d) == BITNET_OK && d == -1.0e300);
    TEST_CHECK(bitnet_gguf_get_f64(g, "t.f32", &d) == BITNET_OK && d == 3.25);
    /* wrong types and absent keys */
    TEST_CHECK(bitnet_gguf_get_f32(g, "t.u32", &f) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_get_str(g, "t.u32", &s) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_get_bool(g, "t.u8", &b) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_get_u32(g, "t.arr_i32", &u32) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_get_u32(g, "no.such.key", &u32) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(strstr(bitnet_last_error(), "no.such.key") != NULL && strstr(bitnet_last_error(), "missing") != NULL);
    TEST_CHECK(bitnet_gguf_find_key(g, "no.such.key") == -1);
    TEST_CHECK(bitnet_gguf_find_key(g, "t.u") == -1); /* prefix of a key */
    TEST_CHECK(bitnet_gguf_find_key(g, "t.u8") == 0);
    TEST_CHECK(strcmp(bitnet_gguf_key_name(g, 0), "t.u8") == 0);
    TEST_CHECK(bitnet_gguf_key_type(g, 8) == BITNET_GGUF_STRING);
    TEST_CHECK(bitnet_gguf_key_name(g, 1000) == NULL);
    TEST_CHECK(bitnet_gguf_key_type(g, 1000) == BITNET_GGUF_TYPE_COUNT);
    /* arrays */
    TEST_CHECK(bitnet_gguf_get_arr(g, "t.arr_i32", &et, &n) == BITNET_OK && et == BITNET_GGUF_INT32 && n == 5);
    ai = (const int32_t *)bitnet_gguf_arr_data(g, "t.arr_i32");
    TEST_CHECK(ai && ((uintptr_t)ai % 4) == 0 && ai[0] == 1 && ai[1] == -2 && ai[4] == 5);
    ad = (const double *)bitnet_gguf_arr_data(g, "t.arr_f64");
    TEST_CHECK(ad && ((uintptr_t)ad % 8) == 0 && ad[0] == 0.5 && ad[1] == -0.25 && ad[2] == 1e-300);
    ab = (const uint8_t *)bitnet_gguf_arr_data(g, "t.arr_bool");
    TEST_CHECK(ab && ab[0] == 1 && ab[1] == 0 && ab[2] == 1);
    TEST_CHECK(bitnet_gguf_get_arr(g, "t.arr_u16", &et, &n) == BITNET_OK && et == BITNET_GGUF_UINT16 && n == 2);
    TEST_CHECK(bitnet_gguf_arr_data(g, "t.arr_u16") && ((const uint16_t *)bitnet_gguf_arr_data(g, "t.arr_u16"))[1] == 65535);
    TEST_CHECK(bitnet_gguf_get_arr(g, "t.arr_empty", &et, &n) == BITNET_OK && et == BITNET_GGUF_UINT8 && n == 0);
    TEST_CHECK(bitnet_gguf_arr_data(g, "t.arr_empty") != NULL);
    TEST_CHECK(bitnet_gguf_get_arr(g, "t.arr_str", &et, &n) == BITNET_OK && et == BITNET_GGUF_STRING && n == 4);
    TEST_CHECK(bitnet_gguf_arr_str(g, "t.arr_str", 0, &s) == BITNET_OK && s.len == 1 && s.ptr[0] == 'a');
    TEST_CHECK(bitnet_gguf_arr_str(g, "t.arr_str", 1, &s) == BITNET_OK && s.len == 0);
    TEST_CHECK(bitnet_gguf_arr_str(g, "t.arr_str", 2, &s) == BITNET_OK && s.len == 5 && memcmp(s.ptr, "\xc4\xa0the", 5) == 0);
    TEST_CHECK(bitnet_gguf_arr_str(g, "t.arr_str", 4, &s) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gguf_arr_str(g, "t.arr_i32", 0, &s) == BITNET_ERR_BAD_METADATA);
    TEST_CHECK(bitnet_gguf_arr_data(g, "t.arr_str") == NULL);
    TEST_CHECK(bitnet_gguf_arr_data(g, "t.u32") == NULL);
    TEST_CHECK(bitnet_gguf_get_arr(g, "t.u32", &et, &n) == BITNET_ERR_BAD_METADATA);
    /* tensors: shapes, sizes, aligned offsets, contents */
    TEST_CHECK(bitnet_gguf_tensor_count(g) == 6);
    for (i = 0; i < (int)sizeof expect; i++) expect[i] = (unsigned char)(i * 7 + 1);
    off = 0;
    {
        static const char *const names[6] = {"f32", "f16", "bf16", "q8", "i2s", "vec"};
        static const bitnet_tensor_type types[6] = {BITNET_TENSOR_F32, BITNET_TENSOR_F16, BITNET_TENSOR_BF16,
                                                     BITNET_TENSOR_Q8_0, BITNET_TENSOR_I2_S, BITNET_TENSOR_F32};
        static const uint64_t bytes[6] = {60, 14, 60, 204, 224, 16};
        size_t src = 0;
        for (i = 0; i < 6; i++) {
            TEST_CHECK(bitnet_gguf_tensor(g, (uint64_t)i, &t) == BITNET_OK);
            TEST_CHECKF(strcmp(t.name, names[i]) == 0 && t.type == types[i] && t.bytes == bytes[i], "tensor %d: %s %llu", i,
                        t.name, (unsigned long long)t.bytes);
            TEST_CHECK(t.offset % alignment == 0 && t.offset >= off);
            TEST_CHECK((bitnet_gguf_data_offset(g) + t.offset) % alignment == 0);
            TEST_CHECK(memcmp(t.data, expect + src, (size_t)t.bytes) == 0);
            off = t.offset + t.bytes;
            src += (size_t)t.bytes;
        }
    }
    TEST_CHECK(bitnet_gguf_find_tensor(g, "bf16", &t) == BITNET_OK && t.n_dims == 3 && t.ne[0] == 2 && t.ne[1] == 3 &&
               t.ne[2] == 5 && t.ne[3] == 1);
    TEST_CHECK(bitnet_gguf_find_tensor(g, "i2s", &t) == BITNET_OK && t.bytes == 256 * 3 / 4 + 32);
    TEST_CHECK(bitnet_gguf_find_tensor(g, "nope", &t) == BITNET_ERR_MISSING_TENSOR);
    TEST_CHECK(bitnet_gguf_tensor(g, 6, &t) == BITNET_ERR_INVALID_ARG);
}

static void test_roundtrip_all_types(void) {
    const char *path = tmp_path("types.gguf");
    bitnet_gguf *g = NULL;
    size_t size;
    unsigned char *buf;
    TEST_CHECK(write_all_types(path, 32) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_open(path, &g) == BITNET_OK);
    if (g) {
        TEST_CHECK(bitnet_gguf_is_mapped(g) == 1);
        check_all_types(g, 32);
        bitnet_gguf_close(g);
    }
    g = NULL;
    TEST_CHECK(bitnet_gguf_open_ex(path, BITNET_GGUF_NO_MMAP, &g) == BITNET_OK);
    if (g) {
        TEST_CHECK(bitnet_gguf_is_mapped(g) == 0);
        check_all_types(g, 32);
        bitnet_gguf_close(g);
    }
    g = NULL;
    buf = read_all(path, &size);
    TEST_CHECK(buf != NULL);
    if (buf) {
        TEST_CHECK(size % 32 == 0); /* every tensor, the last one too, is padded */
        TEST_CHECK(bitnet_gguf_open_memory(buf, size, &g) == BITNET_OK);
        if (g) check_all_types(g, 32), bitnet_gguf_close(g);
        free(buf);
    }
    /* a custom alignment moves the data section and the tensor offsets */
    g = NULL;
    TEST_CHECK(write_all_types(path, 256) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_open(path, &g) == BITNET_OK);
    if (g) check_all_types(g, 256), bitnet_gguf_close(g);
    remove(path);
}

static void test_writer_misuse(void) {
    const char *path = tmp_path("misuse.gguf");
    bitnet_gguf_writer *w = NULL;
    uint64_t ne[2] = {4, 1};
    float x[8] = {0};
    uint8_t two = 2;
    FILE *f;
    TEST_CHECK(bitnet_gguf_writer_create(&w) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_set_u32(w, "a", 1) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_set_u32(w, "a", 2) == BITNET_ERR_INVALID_ARG); /* duplicate */
    TEST_CHECK(bitnet_gguf_writer_set_u32(w, "", 2) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gguf_writer_set(w, "b", BITNET_GGUF_BOOL, &two) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gguf_writer_set(w, "c", BITNET_GGUF_ARRAY, x) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gguf_writer_set_arr(w, "d", BITNET_GGUF_ARRAY, x, 1) == BITNET_ERR_UNSUPPORTED);
    TEST_CHECK(bitnet_gguf_writer_set_u32(w, "general.alignment", 48) == BITNET_ERR_INVALID_ARG);
    {
        bitnet_gguf_str bad = {NULL, 3}, arr[2] = {{"x", 1}, {NULL, 2}};
        TEST_CHECK(bitnet_gguf_writer_set(w, "s", BITNET_GGUF_STRING, &bad) == BITNET_ERR_NULL_POINTER);
        TEST_CHECK(bitnet_gguf_writer_set_arr(w, "s", BITNET_GGUF_STRING, arr, 2) == BITNET_ERR_NULL_POINTER);
        TEST_CHECK(bitnet_gguf_writer_set_u32(w, "s", 1) == BITNET_OK); /* refused values leave no key behind */
    }
    TEST_CHECK(bitnet_gguf_writer_add_tensor(w, "t", BITNET_TENSOR_F32, 1, ne) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_add_tensor(w, "t", BITNET_TENSOR_F32, 1, ne) == BITNET_ERR_DUPLICATE_TENSOR);
    ne[0] = 100;
    TEST_CHECK(bitnet_gguf_writer_add_tensor(w, "u", BITNET_TENSOR_I2_S, 2, ne) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_gguf_writer_add_tensor(w, "u", (bitnet_tensor_type)11, 2, ne) == BITNET_ERR_UNSUPPORTED_TYPE); /* Q3_K */
    TEST_CHECK(bitnet_gguf_writer_add_tensor(w, "u", BITNET_TENSOR_F32, 5, ne) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_gguf_writer_write(w, x, 4) == BITNET_ERR_INVALID_STATE); /* before begin */
    TEST_CHECK(bitnet_gguf_writer_begin(w, path) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_set_u32(w, "late", 1) == BITNET_ERR_INVALID_STATE);
    TEST_CHECK(bitnet_gguf_writer_write(w, x, 8) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_finish(w) == BITNET_ERR_INVALID_STATE); /* 8 of 16 bytes */
    TEST_CHECK(strstr(bitnet_last_error(), "'t'") != NULL);
    TEST_CHECK(bitnet_gguf_writer_write(w, x, 12) == BITNET_ERR_BAD_SIZE); /* 4 too many */
    bitnet_gguf_writer_free(w);                                             /* unfinished: removed */
    f = fopen(path, "rb");
    TEST_CHECK(f == NULL);
    if (f) fclose(f);
    TEST_CHECK(bitnet_gguf_writer_create(&w) == BITNET_OK);
    TEST_CHECK(bitnet_gguf_writer_begin(w, "/nonexistent-dir/x.gguf") == BITNET_ERR_IO);
    bitnet_gguf_writer_free(w);
    bitnet_gguf_writer_free(NULL);
    TEST_CHECK(bitnet_gguf_writer_create(NULL) == BITNET_ERR_NULL_POINTER);
}

static void test_api_arguments(void) {
    bitnet_gguf *g = (bitnet_gguf *)&g;
    TEST_CHECK(bitnet_gguf_open(NULL, &g) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gguf_open("x", NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gguf_open("/nonexistent/model.gguf", &g) == BITNET_ERR_IO && g == NULL);
    TEST_CHECK(strstr(bitnet_last_error(), "/nonexistent/model.gguf") != NULL);
    TEST_CHECK(bitnet_gguf_open("/tmp", &g) == BITNET_ERR_IO); /* a directory */
    TEST_CHECK(bitnet_gguf_open_ex("x", 8, &g) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_gguf_open_memory(NULL, 10, &g) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_gguf_open_memory(NULL, 0, &g) == BITNET_ERR_TRUNCATED);
    TEST_CHECK(bitnet_gguf_find_key(NULL, "a") == -1);
    TEST_CHECK(bitnet_gguf_kv_count(NULL) == 0 && bitnet_gguf_tensor_count(NULL) == 0 && bitnet_gguf_version(NULL) == 0);
    bitnet_gguf_close(NULL);
    TEST_CHECK(strcmp(bitnet_gguf_type_name(BITNET_GGUF_FLOAT64), "FLOAT64") == 0);
    TEST_CHECK(strcmp(bitnet_tensor_type_name(BITNET_TENSOR_I2_S), "I2_S") == 0);
}

static void test_tensor_nbytes(void) {
    uint64_t ne[4] = {2560, 6912, 1, 1}, n = 0;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_I2_S, ne, &n) == BITNET_OK && n == 2560ull * 6912 / 4 + 32);
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_F16, ne, &n) == BITNET_OK && n == 2560ull * 6912 * 2);
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q8_0, ne, &n) == BITNET_OK && n == 2560ull * 6912 / 32 * 34);
    ne[0] = 1ull << 40; ne[1] = 1ull << 40;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_F32, ne, &n) == BITNET_ERR_OVERFLOW);
    ne[0] = 1ull << 62; ne[1] = 1;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_F32, ne, &n) == BITNET_ERR_OVERFLOW); /* bytes overflow */
    ne[0] = 0;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_F32, ne, &n) == BITNET_ERR_BAD_SHAPE);
    ne[0] = 100; ne[1] = 2;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q8_0, ne, &n) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_tensor_nbytes((bitnet_tensor_type)11, ne, &n) == BITNET_ERR_UNSUPPORTED_TYPE); /* Q3_K */
    TEST_CHECK(strstr(bitnet_last_error(), "Q3_K") != NULL);
    ne[0] = 2560;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q6_K, ne, &n) == BITNET_OK && n == 2 * 10 * 210);
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q4_0, ne, &n) == BITNET_OK && n == 2 * 80 * 18);
    ne[0] = 2560 + 32;
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q5_1, ne, &n) == BITNET_OK && n == 2 * 81 * 24);
    TEST_CHECK(bitnet_tensor_nbytes(BITNET_TENSOR_Q4_K, ne, &n) == BITNET_ERR_BAD_SHAPE); /* not whole blocks of 256 */
}

/* ---- hostile files: byte patches of a small valid file ----------------------------------------- */

static unsigned char *base_img;
static size_t base_size;

/* "GGUF" v3, keys k.one (u8), k.two (u8), k.arr (i32 x3), k.str, general.architecture; tensors
   ta F32 [4], tb F32 [4, 2], tc I2_S [128, 2]. */
static int make_base(void) {
    const char *path = tmp_path("base.gguf");
    bitnet_gguf_writer *w = NULL;
    uint8_t one = 1, two = 2;
    const int32_t arr[3] = {7, 8, 9};
    uint64_t ne[2];
    unsigned char data[256];
    int ok;
    memset(data, 0x55, sizeof data);
    ok = bitnet_gguf_writer_create(&w) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set(w, "k.one", BITNET_GGUF_UINT8, &one) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set(w, "k.two", BITNET_GGUF_UINT8, &two) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_arr(w, "k.arr", BITNET_GGUF_INT32, arr, 3) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_str(w, "k.str", "hello") == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_str(w, "general.architecture", "test") == BITNET_OK;
    ne[0] = 4; ne[1] = 2;
    ok = ok && bitnet_gguf_writer_add_tensor(w, "ta", BITNET_TENSOR_F32, 1, ne) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_add_tensor(w, "tb", BITNET_TENSOR_F32, 2, ne) == BITNET_OK;
    ne[0] = 128;
    ok = ok && bitnet_gguf_writer_add_tensor(w, "tc", BITNET_TENSOR_I2_S, 2, ne) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_begin(w, path) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_write(w, data, 16 + 32 + 64 + 32) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_finish(w) == BITNET_OK;
    bitnet_gguf_writer_free(w);
    if (ok) base_img = read_all(path, &base_size);
    remove(path);
    return ok && base_img != NULL;
}

/* A patched copy: the check runs on an exactly-sized heap copy, so ASan sees any overread. */
static bitnet_result patched(size_t off, const void *bytes, size_t n) {
    unsigned char *c = (unsigned char *)malloc(base_size);
    bitnet_result r;
    memcpy(c, base_img, base_size);
    if (off != (size_t)-1 && off + n <= base_size) memcpy(c + off, bytes, n);
    r = open_code(c, base_size);
    free(c);
    return r;
}
static bitnet_result patch64(size_t off, unsigned long long v) { unsigned char b[8]; put64(b, v); return patched(off, b, 8); }
static bitnet_result patch32(size_t off, unsigned v) { unsigned char b[4]; put32(b, v); return patched(off, b, 4); }

/* Offsets inside the base file, found from the names. */
static size_t key_at(const char *key) { return find_bytes(base_img, base_size, key); } /* the key's bytes */
static size_t tensor_at(const char *name) { /* the name's bytes in the tensor table (after the metadata) */
    size_t kend = key_at("general.architecture");
    return kend + find_bytes(base_img + kend, base_size - kend, name);
}

static void test_truncated_everywhere(void) {
    size_t cut;
    int bad = 0;
    for (cut = 0; cut < base_size; cut++) {
        unsigned char *c = (unsigned char *)malloc(cut ? cut : 1);
        bitnet_result r;
        memcpy(c, base_img, cut);
        r = open_code(c, cut);
        free(c);
        if (r != BITNET_ERR_TRUNCATED && r != BITNET_ERR_CORRUPT) {
            if (bad++ < 5) fprintf(stderr, "  cut at %zu: %d (%s)\n", cut, (int)r, bitnet_last_error());
        }
    }
    TEST_CHECKF(bad == 0, "%d truncations gave the wrong code", bad);
    TEST_CHECK(open_code(base_img, base_size) == BITNET_OK);
    /* the last tensor runs past the end: the message names it */
    TEST_CHECK(open_code(base_img, base_size - 1) == BITNET_ERR_TRUNCATED);
    TEST_CHECK(strstr(bitnet_last_error(), "'tc'") != NULL);
}

static void test_truncated_files_on_disk(void) {
    const char *path = tmp_path("cut.gguf");
    static const size_t cuts[] = {0, 3, 4, 10, 30, 100};
    size_t i;
    for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        bitnet_gguf *g = NULL;
        TEST_CHECK(write_all(path, base_img, cuts[i]));
        bitnet_result r = bitnet_gguf_open(path, &g);
        /* a count too large for such a short file reads as corrupt: both name the problem */
        TEST_CHECKF((r == BITNET_ERR_TRUNCATED || r == BITNET_ERR_CORRUPT) && g == NULL, "cut %zu: %s", cuts[i], bitnet_last_error());
        TEST_CHECK(strstr(bitnet_last_error(), path) != NULL && strstr(bitnet_last_error(), "truncated") != NULL);
        TEST_CHECK(bitnet_gguf_open_ex(path, BITNET_GGUF_NO_MMAP, &g) == r && g == NULL);
    }
    remove(path);
}

static void test_bad_magic_and_version(void) {
    TEST_CHECK(patched(0, "GGUG", 4) == BITNET_ERR_BAD_MAGIC);
    TEST_CHECK(strstr(bitnet_last_error(), "GGUF") != NULL);
    TEST_CHECK(patch32(4, 1) == BITNET_ERR_BAD_VERSION);
    TEST_CHECK(strstr(bitnet_last_error(), "version 1") != NULL);
    TEST_CHECK(patch32(4, 4) == BITNET_ERR_BAD_VERSION);
    TEST_CHECK(strstr(bitnet_last_error(), "version 4") != NULL);
    TEST_CHECK(patch32(4, 0) == BITNET_ERR_BAD_VERSION);
    TEST_CHECK(patch32(4, 0x03000000u) == BITNET_ERR_BAD_VERSION);
    TEST_CHECK(strstr(bitnet_last_error(), "big-endian") != NULL);
    TEST_CHECK(patch32(4, 2) == BITNET_OK); /* v2 has the same layout */
}

static void test_huge_counts(void) {
    size_t k = key_at("k.arr"), s = key_at("k.str"), t = tensor_at("ta");
    TEST_CHECK(patch64(8, 1ull << 62) == BITNET_ERR_CORRUPT);  /* n_tensors */
    TEST_CHECK(strstr(bitnet_last_error(), "tensors") != NULL);
    TEST_CHECK(patch64(16, 1ull << 62) == BITNET_ERR_CORRUPT); /* n_kv */
    TEST_CHECK(patch64(16, ~0ull) == BITNET_ERR_CORRUPT);
    TEST_CHECK(patch64(16, 100) == BITNET_ERR_TRUNCATED || patch64(16, 100) == BITNET_ERR_CORRUPT);
    TEST_CHECK(patch64(24, 1ull << 40) == BITNET_ERR_CORRUPT); /* first key's length */
    TEST_CHECK(patch64(24, ~0ull) == BITNET_ERR_CORRUPT);
    TEST_CHECK(patch64(k + 5 + 8, 1ull << 61) == BITNET_ERR_CORRUPT); /* k.arr count */
    TEST_CHECK(strstr(bitnet_last_error(), "k.arr") != NULL);
    TEST_CHECK(patch64(k + 5 + 8, ~0ull) == BITNET_ERR_CORRUPT);
    TEST_CHECK(patch64(s + 5 + 4, 1ull << 50) == BITNET_ERR_CORRUPT); /* k.str length */
    TEST_CHECK(patch64(t - 8, 1ull << 50) == BITNET_ERR_CORRUPT);     /* tensor name length */
}

static void test_bad_shapes_and_offsets(void) {
    size_t ta = tensor_at("ta"), tb = tensor_at("tb"), tc = tensor_at("tc");
    /* layout after a 2-byte name: n_dims u32, ne u64 x n_dims, type u32, offset u64 */
    size_t tb_ne0 = tb + 2 + 4, tb_type = tb_ne0 + 16, tb_off = tb_type + 4;
    TEST_CHECK(patch32(ta + 2, 5) == BITNET_ERR_BAD_SHAPE); /* n_dims 5 */
    TEST_CHECK(strstr(bitnet_last_error(), "'ta'") != NULL);
    TEST_CHECK(patch32(ta + 2, 0) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(patch64(tb_ne0, 0) == BITNET_ERR_BAD_SHAPE); /* ne = 0 */
    {
        unsigned char b[16];
        put64(b, 1ull << 40); put64(b + 8, 1ull << 40); /* ne product overflows */
        TEST_CHECK(patched(tb_ne0, b, 16) == BITNET_ERR_OVERFLOW);
        put64(b, 1ull << 63); put64(b + 8, 1);            /* ne beyond int64 */
        TEST_CHECK(patched(tb_ne0, b, 16) == BITNET_ERR_OVERFLOW);
    }
    TEST_CHECK(patch64(tb_off, ~0ull - 31) == BITNET_ERR_OVERFLOW);   /* offset + bytes wraps */
    TEST_CHECK(patch64(tb_off, 1ull << 40) == BITNET_ERR_TRUNCATED);  /* beyond the file */
    TEST_CHECK(strstr(bitnet_last_error(), "'tb'") != NULL);
    TEST_CHECK(patch64(tb_off, 16) == BITNET_ERR_ALIGNMENT);          /* not a multiple of 32 */
    TEST_CHECK(strstr(bitnet_last_error(), "alignment") != NULL);
    TEST_CHECK(patch32(tb_type, 11) == BITNET_ERR_UNSUPPORTED_TYPE);  /* Q3_K */
    TEST_CHECK(strstr(bitnet_last_error(), "type 11 (Q3_K)") != NULL);
    TEST_CHECK(patch32(tb_type, 14) == BITNET_ERR_BAD_SHAPE);         /* Q6_K: row 4 is not a block of 256 */
    TEST_CHECK(strstr(bitnet_last_error(), "Q6_K") != NULL);
    TEST_CHECK(patch32(tb_type, 39) == BITNET_ERR_UNSUPPORTED_TYPE && strstr(bitnet_last_error(), "TL2") != NULL &&
               strstr(bitnet_last_error(), "f32 or f16 GGUF") != NULL);
    TEST_CHECK(patch32(tb_type, 0xffffffffu) == BITNET_ERR_UNSUPPORTED_TYPE);
    TEST_CHECK(patch32(tb_type, BITNET_TENSOR_Q8_0) == BITNET_ERR_BAD_SHAPE); /* row 4 is not a multiple of 32 */
    TEST_CHECK(patch64(tc + 2 + 4, 64) == BITNET_ERR_BAD_SHAPE);              /* I2_S row 64 */
    TEST_CHECK(strstr(bitnet_last_error(), "I2_S") != NULL);
}

static void test_bad_metadata(void) {
    size_t one = key_at("k.one"), two = key_at("k.two"), arr = key_at("k.arr"), tb = tensor_at("tb");
    TEST_CHECK(patched(two, "k.one", 5) == BITNET_ERR_BAD_METADATA); /* duplicate key */
    TEST_CHECK(strstr(bitnet_last_error(), "duplicate") != NULL && strstr(bitnet_last_error(), "k.one") != NULL);
    TEST_CHECK(patched(tb, "ta", 2) == BITNET_ERR_DUPLICATE_TENSOR);
    TEST_CHECK(strstr(bitnet_last_error(), "'ta'") != NULL);
    TEST_CHECK(patch32(one + 5, 13) == BITNET_ERR_CORRUPT);             /* unknown value type */
    TEST_CHECK(patch32(arr + 5 + 4, BITNET_GGUF_ARRAY) == BITNET_ERR_UNSUPPORTED); /* nested array */
    TEST_CHECK(strstr(bitnet_last_error(), "nested") != NULL);
    TEST_CHECK(patch32(arr + 5 + 4, 77) == BITNET_ERR_CORRUPT);
    TEST_CHECK(patched(one + 1, "\0", 1) == BITNET_ERR_CORRUPT);         /* NUL inside a key */
    TEST_CHECK(patch64(one - 8, 0) == BITNET_ERR_TRUNCATED || patch64(one - 8, 0) == BITNET_ERR_CORRUPT);
    /* k.two (a u8) reinterpreted: value type string whose length bytes run on */
    TEST_CHECK(patch32(two + 5, BITNET_GGUF_STRING) != BITNET_OK);
}

static void test_bad_alignment(void) {
    /* general.alignment as UINT32: rename k.one's... simpler: build files directly */
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    size_t i;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char img[128];
        size_t n = 0;
        memcpy(img, "GGUF", 4); put32(img + 4, 3); put64(img + 8, 0); put64(img + 16, 1); n = 24;
        put64(img + n, 17); n += 8; memcpy(img + n, "general.alignment", 17); n += 17;
        put32(img + n, BITNET_GGUF_UINT32); n += 4; put32(img + n, bad[i]); n += 4;
        TEST_CHECKF(open_code(img, n) == BITNET_ERR_BAD_METADATA, "alignment %u", bad[i]);
        TEST_CHECK(strstr(bitnet_last_error(), "power of two") != NULL);
        put32(img + n - 8, BITNET_GGUF_UINT64); put64(img + n - 4, 32); /* the right value, the wrong type */
        TEST_CHECK(open_code(img, n + 4) == BITNET_ERR_BAD_METADATA);
        TEST_CHECK(strstr(bitnet_last_error(), "UINT32") != NULL);
    }
}

/* Random byte mutations of the valid file: every one opens or fails cleanly (ASan checks the rest). */
static void test_random_mutations(void) {
    unsigned char *c = (unsigned char *)malloc(base_size);
    int it, opened = 0;
    test_seed(12345);
    for (it = 0; it < 3000; it++) {
        int k, nmut = test_rand_int(1, 4);
        memcpy(c, base_img, base_size);
        for (k = 0; k < nmut; k++) {
            size_t at = (size_t)test_rand_int(0, (int)base_size - 1);
            if (test_rand_float(0, 1) < 0.7f) c[at] ^= (unsigned char)(1u << test_rand_int(0, 7));
            else if (at + 8 <= base_size) put64(c + at, test_rand_u64() >> test_rand_int(0, 63));
        }
        if (open_code(c, base_size) == BITNET_OK) opened++;
    }
    free(c);
    TEST_CHECK(opened > 0 && opened < 3000); /* some mutations hit only data bytes */
}

/* ---- fault injection: every allocation failure is an error and leaks nothing ------------------ */

static void test_alloc_faults(void) {
    int n, ok = 0;
    for (n = 1; n < 64 && !ok; n++) {
        bitnet_gguf *g = NULL;
        bitnet_result r;
        bitnet_set_fault("");
        {
            char spec[32];
            snprintf(spec, sizeof spec, "host_alloc:%d", n);
            bitnet_set_fault(spec);
        }
        r = bitnet_gguf_open_memory(base_img, base_size, &g);
        if (r == BITNET_OK) { ok = 1; bitnet_gguf_close(g); }
        else TEST_CHECKF(r == BITNET_ERR_OUT_OF_MEMORY && g == NULL, "fault %d gave %d", n, (int)r);
    }
    bitnet_set_fault("");
    TEST_CHECK(ok);
    /* the same through a file read into memory (one more allocation: the image) */
    {
        const char *path = tmp_path("fault.gguf");
        TEST_CHECK(write_all(path, base_img, base_size));
        for (ok = 0, n = 1; n < 64 && !ok; n++) {
            bitnet_gguf *g = NULL;
            bitnet_result r;
            char spec[32];
            snprintf(spec, sizeof spec, "host_alloc:%d", n);
            bitnet_set_fault(spec);
            r = bitnet_gguf_open_ex(path, BITNET_GGUF_NO_MMAP, &g);
            if (r == BITNET_OK) { ok = 1; bitnet_gguf_close(g); }
            else TEST_CHECKF(r == BITNET_ERR_OUT_OF_MEMORY && g == NULL, "fault %d gave %d", n, (int)r);
        }
        bitnet_set_fault("");
        TEST_CHECK(ok && n > 2);
        remove(path);
    }
    /* and the writer */
    for (ok = 0, n = 1; n < 64 && !ok; n++) {
        char spec[32];
        bitnet_result r;
        snprintf(spec, sizeof spec, "host_alloc:%d", n);
        bitnet_set_fault(spec);
        r = write_all_types(tmp_path("fault_w.gguf"), 32);
        bitnet_set_fault("");
        if (r == BITNET_OK) ok = 1;
        else TEST_CHECKF(r == BITNET_ERR_OUT_OF_MEMORY || r == BITNET_ERR_INVALID_STATE, "writer fault %d gave %d", n, (int)r);
    }
    TEST_CHECK(ok);
    remove(tmp_path("fault_w.gguf"));
}

/* ---- the BitNet architecture check --------------------------------------------------------------- */

typedef struct micro_cfg {
    const char *arch;
    uint32_t dim, n_layers, n_heads, n_kv, ffn, vocab, ctx;
    int64_t bos;              /* < 0: absent */
    const char *skip;         /* a tensor left out */
    const char *q8_instead;   /* a tensor written as Q8_0 */
    int float_matrices;       /* the ternary matrices as F32 latent weights */
    uint32_t shape_ffn;       /* ffn used for the tensor shapes (0: ffn) */
    int omit_eps;
    uint32_t rope_dims, vocab_key; /* written when nonzero */
    uint32_t n_types;              /* token_type entries (0: vocab) */
    float scale;                   /* I2_S scale (0: 1) */
    bitnet_tensor_type emb_type;   /* token_embd.weight (0: F16) */
    int no_tokenizer;              /* no tokenizer.* keys (then set vocab_key) */
    const void *emb_data;          /* token_embd.weight's bytes (NULL: the scale's, repeated) */
    const char *chat_template;     /* tokenizer.chat_template (NULL: none) */
    uint32_t rope_freqs;           /* rope_freqs.weight F32 [rope_freqs] (0: none), every factor the scale */
} micro_cfg;

static micro_cfg micro_default(void) {
    micro_cfg c;
    memset(&c, 0, sizeof c);
    c.arch = "bitnet-b1.58";
    c.dim = 128; c.n_layers = 2; c.n_heads = 4; c.n_kv = 2; c.ffn = 256; c.vocab = 20; c.ctx = 64;
    c.bos = 17;
    return c;
}

/* A small model through the public writer: all weights 0 (I2_S code 1), scales and norms 1. */
static bitnet_result write_micro(const char *path, const micro_cfg *c) {
    bitnet_gguf_writer *w = NULL;
    char key[96], name[96];
    bitnet_gguf_str toks[64];
    char tokbuf[64][8];
    int32_t types[64];
    uint32_t i, l, p, shape_ffn = c->shape_ffn ? c->shape_ffn : c->ffn;
    uint32_t hd = c->n_heads ? c->dim / c->n_heads : 1, kvd = (c->n_kv ? c->n_kv : 1) * hd;
    uint64_t total = 0;
    bitnet_result r;
    float scale = c->scale != 0 ? c->scale : 1.0f;
    static const char *const parts[11] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sub_norm",
                                          "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "ffn_sub_norm"};
    uint64_t sizes[64];
    int is_i2s[64], nt = 0, k;
    if (c->n_layers > 5) return BITNET_ERR_INVALID_ARG;
    if ((r = bitnet_gguf_writer_create(&w)) != BITNET_OK) return r;
#define W(expr) do { if (r == BITNET_OK) r = (expr); } while (0)
#define HP(suffix, v) do { snprintf(key, sizeof key, "%s.%s", c->arch, suffix); W(bitnet_gguf_writer_set_u32(w, key, v)); } while (0)
    W(bitnet_gguf_writer_set_str(w, "general.architecture", c->arch));
    W(bitnet_gguf_writer_set_str(w, "general.name", "micro"));
    HP("embedding_length", c->dim);
    HP("block_count", c->n_layers);
    HP("attention.head_count", c->n_heads);
    HP("attention.head_count_kv", c->n_kv);
    HP("feed_forward_length", c->ffn);
    HP("context_length", c->ctx);
    snprintf(key, sizeof key, "%s.rope.freq_base", c->arch);
    W(bitnet_gguf_writer_set_f32(w, key, 500000.0f));
    if (!c->omit_eps) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", c->arch);
        W(bitnet_gguf_writer_set_f32(w, key, 1e-5f));
    }
    for (i = 0; i < c->vocab && i < 64; i++) {
        if (i == c->vocab - 1) snprintf(tokbuf[i], sizeof tokbuf[i], "<|eot|>"); /* placeholder, replaced below */
        else snprintf(tokbuf[i], sizeof tokbuf[i], "t%u", i);
        toks[i].ptr = tokbuf[i];
        toks[i].len = strlen(tokbuf[i]);
        types[i] = 1;
    }
    toks[c->vocab - 1].ptr = "<|eot_id|>"; /* eot found by its text */
    toks[c->vocab - 1].len = 10;
    types[c->vocab - 1] = 3;
    if (c->rope_dims) HP("rope.dimension_count", c->rope_dims);
    if (c->vocab_key) HP("vocab_size", c->vocab_key);
    if (!c->no_tokenizer) {
        W(bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
        W(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, toks, c->vocab));
        W(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, types, c->n_types ? c->n_types : c->vocab));
        if (c->bos >= 0) W(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos));
        W(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0));
        if (c->chat_template) W(bitnet_gguf_writer_set_str(w, "tokenizer.chat_template", c->chat_template));
    }
#define T(nm, type, nd, a, b) do { uint64_t ne_[4] = {(a), (b), 1, 1}, nb_ = 0; \
        bitnet_tensor_type ty_ = (c->q8_instead && strcmp(c->q8_instead, nm) == 0) ? BITNET_TENSOR_Q8_0 \
            : (c->float_matrices && (type) == BITNET_TENSOR_I2_S) ? BITNET_TENSOR_F32 : (type); \
        if ((!c->skip || strcmp(c->skip, nm) != 0) && r == BITNET_OK) { \
            W(bitnet_gguf_writer_add_tensor(w, nm, ty_, nd, ne_)); \
            W(bitnet_tensor_nbytes(ty_, ne_, &nb_)); sizes[nt] = nb_; is_i2s[nt++] = ty_ == BITNET_TENSOR_I2_S; } \
    } while (0)
    T("token_embd.weight", c->emb_type ? c->emb_type : BITNET_TENSOR_F16, 2, c->dim, c->vocab);
    T("output_norm.weight", BITNET_TENSOR_F32, 1, c->dim, 1);
    if (c->rope_freqs) T("rope_freqs.weight", BITNET_TENSOR_F32, 1, c->rope_freqs, 1);
    for (l = 0; l < c->n_layers; l++)
        for (p = 0; p < 11; p++) {
            uint64_t a = c->dim, b = 1;
            int nd = 2;
            bitnet_tensor_type ty = BITNET_TENSOR_I2_S;
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, parts[p]);
            if (strstr(parts[p], "norm")) { ty = BITNET_TENSOR_F32; nd = 1; if (p == 10) a = shape_ffn; }
            else if (p == 1 || p == 4) b = c->dim;
            else if (p == 2 || p == 3) b = kvd;
            else if (p == 7 || p == 8) b = shape_ffn;
            else { a = shape_ffn; b = c->dim; }
            T(name, ty, nd, a, b);
        }
#undef T
    W(bitnet_gguf_writer_begin(w, path));
    for (k = 0; k < nt && r == BITNET_OK; k++) { /* I2_S: code 1 (weight 0) then the scale; else the scale's bytes */
        unsigned char *buf = (unsigned char *)calloc((size_t)sizes[k], 1); /* (a block type's tail past the last whole float: zeros) */
        size_t e;
        if (k == 0 && c->emb_data && (!c->skip || strcmp(c->skip, "token_embd.weight") != 0)) {
            memcpy(buf, c->emb_data, (size_t)sizes[k]);
        } else if (is_i2s[k]) {
            memset(buf, 0x55, (size_t)sizes[k]);
            memset(buf + sizes[k] - 32, 0, 32);
            memcpy(buf + sizes[k] - 32, &scale, 4);
        } else {
            for (e = 0; e + 4 <= sizes[k]; e += 4) memcpy(buf + e, &scale, 4);
        }
        r = bitnet_gguf_writer_write(w, buf, (size_t)sizes[k]);
        free(buf);
    }
    (void)total;
    W(bitnet_gguf_writer_finish(w));
#undef W
#undef HP
    bitnet_gguf_writer_free(w);
    return r;
}

/* A tied head over an F32 or BF16 embedding (converted to fp16 in memory at load): the CPU's int8 head
   is quantized from it, and the mapped file's pages are released after; the converted embedding must
   survive that (it once read back as zeros), so mapped and read-in loads give the same, nonzero logits. */
static void test_float_embedding_tied(void) {
    static const bitnet_tensor_type types[2] = {BITNET_TENSOR_F32, BITNET_TENSOR_BF16};
    const char *path = tmp_path("micro-emb.gguf");
    int t, no_mmap;
    for (t = 0; t < 2; t++) {
        micro_cfg c = micro_default();
        float lg[2][20];
        c.emb_type = types[t], c.scale = 0.5f; /* the embedding's entries 0.5 (BF16: 0 and 0.5): exact in fp16 */
        c.no_tokenizer = 1, c.vocab_key = c.vocab, c.bos = -1; /* (its vocabulary is not byte-level) */
        TEST_CHECKF(write_micro(path, &c) == BITNET_OK, "%s", bitnet_last_error());
        for (no_mmap = 0; no_mmap < 2; no_mmap++) {
            bitnet_model_desc d;
            bitnet_model *m = NULL;
            bitnet_session *s = NULL;
            int32_t tok[2] = {3, 5};
            memset(&d, 0, sizeof d);
            d.path = path, d.backend = BITNET_BACKEND_CPU, d.no_mmap = no_mmap;
            memset(lg[no_mmap], 0, sizeof lg[no_mmap]);
            TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s",
                        bitnet_last_error());
            if (s) TEST_CHECK(bitnet_session_eval(s, tok, 2, lg[no_mmap], 0) == BITNET_OK);
            bitnet_session_free(s), bitnet_model_free(m);
        }
        TEST_CHECKF(lg[0][0] != 0.0f && memcmp(lg[0], lg[1], sizeof lg[0]) == 0, "type %d: logit 0 mapped %g, read in %g", (int)types[t],
                    (double)lg[0][0], (double)lg[1][0]);
    }
    remove(path);
}

/* A feed-forward width that is not whole 128-weight I2_S rows (1bitLLM's 3B: 8640): a float file's
   matrices are padded at load (zero rows and columns) and the model runs. (I2_S and TQ tensors of
   such rows cannot be written: bitnet_tensor_nbytes refuses them.) */
static void test_ffn_not_whole_blocks(void) {
    const char *path = tmp_path("micro-ffn200.gguf");
    micro_cfg c = micro_default();
    bitnet_model_desc d;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_model_info info;
    int32_t tok[3] = {3, 5, 7};
    float lg[3 * 20];
    c.ffn = 200, c.float_matrices = 1;
    c.no_tokenizer = 1, c.vocab_key = c.vocab, c.bos = -1;
    TEST_CHECKF(write_micro(path, &c) == BITNET_OK, "%s", bitnet_last_error());
    memset(&d, 0, sizeof d);
    d.path = path, d.backend = BITNET_BACKEND_CPU;
    TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(m && bitnet_model_get_info(m, &info) == BITNET_OK && info.ffn_dim == 200);
    if (s) TEST_CHECK(bitnet_session_eval(s, tok, 3, lg, 1) == BITNET_OK && isfinite(lg[59]));
    bitnet_session_free(s), bitnet_model_free(m);
    remove(path);
}

/* An embedding (tied head) in llama.cpp's block types, as bitnet.cpp's llama-quantize
   --token-embedding-type writes it. Its rows are made fp16 when read (with the int8 head no fp16
   table is kept; the fp16 head keeps one), so the model gives the same logits, bit for bit, as one
   whose F16 embedding holds those values: a prompt of two tokens, then a decode step, with either
   head, on the CPU and (where there is one) the GPU, whose copy of the table is made from the blocks. */
static void test_quantized_embedding(void) {
    static const bitnet_tensor_type types[4] = {BITNET_TENSOR_Q8_0, BITNET_TENSOR_Q4_0, BITNET_TENSOR_Q5_K, BITNET_TENSOR_Q6_K};
    char path[2][700]; /* (tmp_path's buffer is one) */
    int t, v, i, b;
    snprintf(path[0], sizeof path[0], "%s", tmp_path("micro-qemb.gguf"));
    snprintf(path[1], sizeof path[1], "%s", tmp_path("micro-qemb-f16.gguf"));
    test_seed(5);
    for (t = 0; t < 4; t++) {
        micro_cfg c = micro_default();
        uint64_t ne[4] = {256, 20, 1, 1}, nb = 0;
        uint8_t *q;
        uint16_t *h = (uint16_t *)malloc(256 * 20 * 2);
        float *f = (float *)malloc(256 * 20 * 4), lg[4][2][20];
        const int bb = types[t] == BITNET_TENSOR_Q8_0 ? 34 : types[t] == BITNET_TENSOR_Q4_0 ? 18 : types[t] == BITNET_TENSOR_Q5_K ? 176 : 210;
        c.dim = 256, c.no_tokenizer = 1, c.vocab_key = c.vocab, c.bos = -1;
        TEST_CHECK(bitnet_tensor_nbytes(types[t], ne, &nb) == BITNET_OK);
        q = (uint8_t *)malloc((size_t)nb);
        for (i = 0; i < (int)nb; i++) q[i] = (uint8_t)test_rand_u64();
        for (i = 0; i < (int)nb; i++) { /* every fp16 factor (d, m, dmin) a small normal number: random bytes could be Inf or NaN */
            const int at = i % bb;
            if (types[t] == BITNET_TENSOR_Q6_K ? at == 209 : (at == 1 || (types[t] == BITNET_TENSOR_Q5_K && at == 3))) q[i] = (uint8_t)(0x20 | (q[i] & 0x83));
        }
        TEST_CHECKF(bitnet_dequantize(types[t], q, (size_t)nb, f, 256 * 20) == BITNET_OK, "%s", bitnet_last_error());
        for (i = 0; i < 256 * 20; i++) h[i] = bitnet_fp32_to_fp16(f[i]);
        for (v = 0; v < 2; v++) {
            c.emb_type = v ? BITNET_TENSOR_F16 : types[t], c.emb_data = v ? (const void *)h : (const void *)q;
            TEST_CHECKF(write_micro(path[v], &c) == BITNET_OK, "%s", bitnet_last_error());
        }
        for (b = 0; b < 2; b++) {
            if (b && !bitnet_gpu_available()) { /* (make test-gpu: the GPU half must run) */
                TEST_CHECKF(!test_require_gpu(), "no GPU: %s", bitnet_last_error());
                break;
            }
            for (v = 0; v < 4; v++) { /* v & 1: the F16 file; v >> 1: the fp16 head */
                bitnet_model_desc d;
                bitnet_model *m = NULL;
                bitnet_session *s = NULL;
                int32_t tok[2] = {3, 5};
                memset(&d, 0, sizeof d);
                d.path = path[v & 1], d.backend = b ? BITNET_BACKEND_CUDA : BITNET_BACKEND_CPU, d.head_f16 = v >> 1;
                memset(lg[v], 0, sizeof lg[v]);
                TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s %s",
                            bitnet_tensor_type_name(c.emb_type), bitnet_last_error());
                if (s) TEST_CHECK(bitnet_session_eval(s, tok, 2, lg[v][0], 0) == BITNET_OK && bitnet_session_eval(s, tok, 1, lg[v][1], 0) == BITNET_OK);
                bitnet_session_free(s), bitnet_model_free(m);
            }
            for (v = 0; v < 4; v += 2)
                TEST_CHECKF(lg[v][1][0] != 0.0f && isfinite(lg[v][1][0]) && memcmp(lg[v], lg[v + 1], sizeof lg[0]) == 0,
                            "%s, %s, %s head: logit 0 %g, as F16 %g", bitnet_tensor_type_name(types[t]), b ? "cuda" : "cpu",
                            v ? "fp16" : "int8", (double)lg[v][1][0], (double)lg[v + 1][1][0]);
        }
        free(q), free(h), free(f);
    }
    remove(path[0]), remove(path[1]);
}

/* Writes c, opens it and runs the check; returns the check's code (or the failure before it). */
static bitnet_result check_micro(const micro_cfg *c, bitnet_model_info *info) {
    const char *path = tmp_path("micro.gguf");
    bitnet_gguf *g = NULL;
    bitnet_model_info tmp;
    bitnet_result r = write_micro(path, c);
    if (r == BITNET_OK) r = bitnet_gguf_open(path, &g);
    if (r == BITNET_OK) r = bitnet_gguf_check_bitnet(g, info ? info : &tmp);
    bitnet_gguf_close(g);
    remove(path);
    return r;
}

static void test_check_valid_micro(void) {
    micro_cfg c = micro_default();
    bitnet_model_info info;
    TEST_CHECKF(check_micro(&c, &info) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(strcmp(info.arch, "bitnet-b1.58") == 0);
    TEST_CHECK(info.dim == 128 && info.n_layers == 2 && info.n_heads == 4 && info.n_kv_heads == 2 && info.head_dim == 32);
    TEST_CHECK(info.ffn_dim == 256 && info.n_vocab == 20 && info.n_ctx_train == 64);
    TEST_CHECK(info.rope_theta == 500000.0f && info.norm_eps == 1e-5f);
    TEST_CHECK(info.bos == 17 && info.eos == 0 && info.eot == 19);
    TEST_CHECK(info.chat_template == BITNET_CHAT_BITNET); /* (no template) */
    { /* the chat template by the text of tokenizer.chat_template, as llama.cpp picks it */
        static const struct { const char *text; bitnet_chat_template want; } tt[] = {
            {"{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}<|eot_id|>{% endfor %}", BITNET_CHAT_BITNET},
            {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", BITNET_CHAT_LLAMA3},
            {"{{ '<|user|>\\n' + message['content'] }}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
             BITNET_CHAT_FALCON3},
            {"<|start_header_id|> alone", BITNET_CHAT_BITNET}};
        size_t i;
        for (i = 0; i < sizeof tt / sizeof tt[0]; i++) {
            c.chat_template = tt[i].text;
            TEST_CHECKF(check_micro(&c, &info) == BITNET_OK && info.chat_template == (int32_t)tt[i].want, "template %zu: %d",
                        i, (int)info.chat_template);
        }
        c.chat_template = NULL;
    }
    c.arch = "bitnet-25";
    TEST_CHECK(check_micro(&c, &info) == BITNET_OK && strcmp(info.arch, "bitnet-25") == 0);
    c = micro_default(); c.float_matrices = 1; /* unquantized latent weights */
    TEST_CHECKF(check_micro(&c, &info) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(info.ffn_act == BITNET_FFN_RELU2);
    c = micro_default(); c.arch = "bitnet";
    TEST_CHECK(check_micro(&c, &info) == BITNET_OK && strcmp(info.arch, "bitnet") == 0 && info.ffn_act == BITNET_FFN_SILU);
    TEST_CHECK(info.sub_norms == 1);
    c = micro_default(); c.arch = "llama"; /* (its sub-norm tensors are left unread) */
    TEST_CHECK(check_micro(&c, &info) == BITNET_OK && info.ffn_act == BITNET_FFN_SILU && info.sub_norms == 0);
    c.float_matrices = 1; /* a plain LLaMA GGUF is no BitNet model */
    TEST_CHECKF(check_micro(&c, &info) == BITNET_ERR_UNSUPPORTED && strstr(bitnet_last_error(), "ternary matrices"), "%s", bitnet_last_error());
    c = micro_default(); c.arch = "gemma";
    TEST_CHECK(check_micro(&c, &info) == BITNET_ERR_UNSUPPORTED);
    TEST_CHECK(bitnet_gguf_check_bitnet(NULL, &info) == BITNET_ERR_NULL_POINTER);
}

static void test_check_inconsistent(void) {
    micro_cfg c;
    c = micro_default(); c.arch = "qwen2";
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_UNSUPPORTED && strstr(bitnet_last_error(), "qwen2") != NULL);
    c = micro_default(); c.n_heads = 0;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "head_count") != NULL);
    c = micro_default(); c.n_kv = 0;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "head_count_kv") != NULL);
    c = micro_default(); c.n_heads = 3; c.n_kv = 1; /* 128 / 3 */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "not divisible") != NULL);
    c = micro_default(); c.n_heads = 4; c.n_kv = 3; /* 4 / 3 */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "head_count_kv 3") != NULL);
    c = micro_default(); c.bos = 20; /* == vocab */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "bos_token_id") != NULL);
    c = micro_default(); c.bos = -1; /* absent is fine */
    {
        bitnet_model_info info;
        TEST_CHECK(check_micro(&c, &info) == BITNET_OK && info.bos == -1);
    }
    c = micro_default(); c.skip = "blk.1.ffn_down.weight";
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_MISSING_TENSOR && strstr(bitnet_last_error(), "blk.1.ffn_down.weight") != NULL);
    c = micro_default(); c.skip = "token_embd.weight";
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_MISSING_TENSOR);
    c = micro_default(); c.q8_instead = "blk.0.attn_k.weight";
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_UNSUPPORTED_TYPE && strstr(bitnet_last_error(), "attn_k") != NULL);
    TEST_CHECKF(strstr(bitnet_last_error(), "needs F32, F16, BF16, TQ1_0, TQ2_0 or I2_S here") != NULL, "%s", bitnet_last_error());
    c = micro_default(); c.q8_instead = "token_embd.weight"; /* llama.cpp's block types: the embedding and output only */
    TEST_CHECKF(check_micro(&c, NULL) == BITNET_OK, "%s", bitnet_last_error());
    c = micro_default(); c.q8_instead = "output_norm.weight";
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_UNSUPPORTED_TYPE && strstr(bitnet_last_error(), "output_norm") != NULL);
    TEST_CHECKF(strstr(bitnet_last_error(), "needs F32, F16 or BF16 here") != NULL, "%s", bitnet_last_error());
    c = micro_default(); c.shape_ffn = 384; /* tensors disagree with feed_forward_length */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_SHAPE && strstr(bitnet_last_error(), "blk.0.ffn_gate") != NULL);
    c = micro_default(); c.rope_dims = 16; /* head_dim is 32 */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_UNSUPPORTED && strstr(bitnet_last_error(), "rope.dimension_count") != NULL);
    c = micro_default(); c.rope_dims = 32;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_OK);
    c = micro_default(); c.vocab_key = 21;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "vocab_size") != NULL);
    c = micro_default(); c.n_types = 19;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "token_type") != NULL);
    c = micro_default(); c.scale = (float)HUGE_VAL;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_CORRUPT && strstr(bitnet_last_error(), "scale") != NULL);
    c = micro_default(); c.dim = 192; c.n_heads = 2; c.n_kv = 1; /* I2_S rows must be multiples of 128 (the writer refuses too) */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_SHAPE);
    c = micro_default(); c.omit_eps = 1;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "epsilon") != NULL);
    c = micro_default(); c.rope_freqs = 16; /* Llama 3.1's RoPE factors: head_dim / 2 of them */
    {
        bitnet_model_info info;
        TEST_CHECKF(check_micro(&c, &info) == BITNET_OK && info.rope_freqs == 1, "%s", bitnet_last_error());
    }
    c.arch = "llama";
    TEST_CHECKF(check_micro(&c, NULL) == BITNET_OK, "%s", bitnet_last_error());
    c = micro_default(); c.rope_freqs = 32;
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_BAD_SHAPE && strstr(bitnet_last_error(), "rope_freqs") != NULL);
    c = micro_default(); c.rope_freqs = 32; c.q8_instead = "rope_freqs.weight"; /* (Q8_0 blocks hold 32; the type is checked first) */
    TEST_CHECK(check_micro(&c, NULL) == BITNET_ERR_UNSUPPORTED_TYPE && strstr(bitnet_last_error(), "rope_freqs") != NULL);
}

/* The committed model: gen-model --preset tiny --seed 1. */
static void test_tiny_model(void) {
    const char *path = "tests/data/tiny.gguf";
    bitnet_gguf *g = NULL;
    bitnet_model_info info;
    bitnet_tensor_info t;
    bitnet_gguf_str s;
    int8_t *q;
    float scale = 0;
    size_t i, counts[3] = {0, 0, 0};
    FILE *f = fopen(path, "rb");
    if (!f) TEST_SKIP("%s not found (run from the repository root)", path);
    fclose(f);
    TEST_CHECK(bitnet_gguf_open(path, &g) == BITNET_OK);
    if (!g) return;
    TEST_CHECK(bitnet_gguf_size(g) <= 2u * 1024 * 1024);
    TEST_CHECKF(bitnet_gguf_check_bitnet(g, &info) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(info.dim == 128 && info.n_layers == 2 && info.n_heads == 4 && info.n_kv_heads == 2 && info.ffn_dim == 384);
    TEST_CHECK(info.bos >= 256 && info.eos >= 256 && info.eot >= 256 && info.n_vocab > 256);
    TEST_CHECK(bitnet_gguf_get_str(g, "tokenizer.ggml.model", &s) == BITNET_OK && s.len == 4 && memcmp(s.ptr, "gpt2", 4) == 0);
    TEST_CHECK(bitnet_gguf_get_str(g, "tokenizer.ggml.pre", &s) == BITNET_OK && s.len == 9 && memcmp(s.ptr, "llama-bpe", 9) == 0);
    TEST_CHECK(bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)info.bos, &s) == BITNET_OK && s.len == 17 &&
               memcmp(s.ptr, "<|begin_of_text|>", 17) == 0);
    TEST_CHECK(bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", 32, &s) == BITNET_OK && s.len == 2 && memcmp(s.ptr, "\xc4\xa0", 2) == 0);
    {
        uint32_t ft = 0;
        TEST_CHECK(bitnet_gguf_get_u32(g, "general.file_type", &ft) == BITNET_OK && ft == 40);
    }
    /* the weights are ternary with a positive scale and a healthy mix of -1, 0, +1 */
    TEST_CHECK(bitnet_gguf_find_tensor(g, "blk.1.ffn_down.weight", &t) == BITNET_OK);
    q = (int8_t *)malloc((size_t)(t.ne[0] * t.ne[1]));
    TEST_CHECK(bitnet_i2s_unpack(t.data, (size_t)t.bytes, (size_t)t.ne[1], (size_t)t.ne[0], q, &scale) == BITNET_OK);
    for (i = 0; i < t.ne[0] * t.ne[1]; i++) counts[q[i] + 1]++;
    free(q);
    TEST_CHECK(scale > 0 && scale < 1);
    TEST_CHECKF(counts[0] > t.ne[0] * t.ne[1] / 5 && counts[1] > t.ne[0] * t.ne[1] / 5 && counts[2] > t.ne[0] * t.ne[1] / 5,
                "-1: %zu, 0: %zu, +1: %zu", counts[0], counts[1], counts[2]);
    /* every merge "A B" joins two tokens into the token with id 256 + rank */
    {
        uint64_t nm = 0, m, nt = 0, j;
        bitnet_gguf_type et;
        int bad = 0;
        TEST_CHECK(bitnet_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm) == BITNET_OK && nm >= 200);
        TEST_CHECK(bitnet_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &nt) == BITNET_OK && nt == 256 + nm + 3);
        for (m = 0; m < nm; m++) {
            bitnet_gguf_str ms, ts;
            const char *sp;
            int found_a = 0, found_b = 0;
            bitnet_gguf_arr_str(g, "tokenizer.ggml.merges", m, &ms);
            sp = (const char *)memchr(ms.ptr, ' ', (size_t)ms.len);
            if (!sp) { bad++; continue; }
            for (j = 0; j < 256 + m; j++) {
                bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", j, &ts);
                if (ts.len == (uint64_t)(sp - ms.ptr) && memcmp(ts.ptr, ms.ptr, (size_t)ts.len) == 0) found_a = 1;
                if (ts.len == ms.len - (uint64_t)(sp - ms.ptr) - 1 && memcmp(ts.ptr, sp + 1, (size_t)ts.len) == 0) found_b = 1;
            }
            bitnet_gguf_arr_str(g, "tokenizer.ggml.tokens", 256 + m, &ts);
            if (!found_a || !found_b || ts.len != ms.len - 1 || memcmp(ts.ptr, ms.ptr, (size_t)(sp - ms.ptr)) != 0 ||
                memcmp(ts.ptr + (sp - ms.ptr), sp + 1, (size_t)(ms.len - (uint64_t)(sp - ms.ptr) - 1)) != 0)
                bad++;
        }
        TEST_CHECKF(bad == 0, "%d inconsistent merges", bad);
    }
    bitnet_gguf_close(g);
}

/* The tiny model cut at every offset of its start and at strides through the rest: always an
   error (an I/O or format one), never a crash or a silently shorter model. */
static void test_tiny_truncated_everywhere(void) {
    size_t size = 0, cut, hdr;
    unsigned char *img = read_all("tests/data/tiny.gguf", &size);
    bitnet_gguf *g = NULL;
    int bad = 0;
    if (!img) TEST_SKIP("tests/data/tiny.gguf not found");
    TEST_CHECK(bitnet_gguf_open_memory(img, size, &g) == BITNET_OK);
    hdr = g ? (size_t)bitnet_gguf_data_offset(g) : size;
    bitnet_gguf_close(g);
    /* every offset of the first 2 KB (the keys, the start of the token list), then strides */
    for (cut = 0; cut < size; cut += cut < 2048 ? 1 : cut < hdr + 64 ? 7 : 509) {
        unsigned char *c = (unsigned char *)malloc(cut ? cut : 1);
        bitnet_result r;
        memcpy(c, img, cut);
        r = open_code(c, cut);
        free(c);
        if (r != BITNET_ERR_TRUNCATED && r != BITNET_ERR_CORRUPT && bad++ < 5)
            fprintf(stderr, "  cut at %zu: %d %s\n", cut, (int)r, bitnet_last_error());
    }
    TEST_CHECKF(bad == 0, "%d cuts", bad);
    free(img);
}

/* One opened file read from four threads at once: every lookup gives the single-threaded answer. */
typedef struct reader_arg { const bitnet_gguf *g; int bad; } reader_arg;
static void *reader_thread(void *p) {
    reader_arg *a = (reader_arg *)p;
    int it;
    for (it = 0; it < 50; it++) {
        bitnet_model_info info;
        bitnet_tensor_info t;
        bitnet_gguf_str s;
        uint64_t i;
        if (bitnet_gguf_check_bitnet(a->g, &info) != BITNET_OK || info.n_layers != 2) a->bad++;
        for (i = 0; i < bitnet_gguf_tensor_count(a->g); i++) {
            bitnet_tensor_info t2;
            if (bitnet_gguf_tensor(a->g, i, &t) != BITNET_OK || bitnet_gguf_find_tensor(a->g, t.name, &t2) != BITNET_OK ||
                t2.data != t.data)
                a->bad++;
        }
        if (bitnet_gguf_arr_str(a->g, "tokenizer.ggml.tokens", 32, &s) != BITNET_OK || s.len != 2) a->bad++;
        if (bitnet_gguf_get_u32(a->g, "no.such.key", NULL) == BITNET_OK) a->bad++; /* errors are per thread */
    }
    return NULL;
}
static void test_concurrent_readers(void) {
    bitnet_gguf *g = NULL;
    pthread_t th[4];
    reader_arg args[4];
    int i, started = 0;
    if (bitnet_gguf_open("tests/data/tiny.gguf", &g) != BITNET_OK) TEST_SKIP("tests/data/tiny.gguf not found");
    for (i = 0; i < 4; i++) {
        args[i].g = g;
        args[i].bad = 0;
        if (pthread_create(&th[i], NULL, reader_thread, &args[i]) == 0) started++;
        else break;
    }
    for (i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        TEST_CHECK(args[i].bad == 0);
    }
    TEST_CHECK(started == 4);
    bitnet_gguf_close(g);
}

/* The CLI: gen-model is deterministic, and the committed tiny model's metadata and tensor table
   (everything before the data) are what the generator writes today. The weights themselves may
   move by an ulp when the quantizer changes, so only the header is compared to the file. */
/* The CLI's path into bin, or why a test of it is skipped (not built, or RUNNER set: the emulator runs
   test binaries only). */
static const char *cli_bin(char *bin, size_t cap, char *why, size_t wcap) {
    const char *build = getenv("BUILD"), *runner = getenv("RUNNER");
    FILE *f;
    if (runner && *runner) return snprintf(why, wcap, "the CLI is not run under RUNNER=%s", runner), why;
    snprintf(bin, cap, "%s/bitnet", build && *build ? build : "build");
    if (!(f = fopen(bin, "rb"))) return snprintf(why, wcap, "%s not built", bin), why;
    fclose(f);
    return NULL;
}

static void test_cli_gen_model_and_info(void) {
    char bin[512], cmd[4096], a[640], b[640], c[640], why[600];
    unsigned char *ia, *ib, *ic, *tiny;
    size_t na = 0, nb = 0, nc = 0, nt = 0, hdr = 0;
    bitnet_gguf *g = NULL;
    FILE *f;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(a, sizeof a, "%s", tmp_path("gen_a.gguf"));
    snprintf(b, sizeof b, "%s", tmp_path("gen_b.gguf"));
    snprintf(c, sizeof c, "%s", tmp_path("gen_c.gguf"));
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --seed 1 -o %s 2>/dev/null && %s gen-model --preset tiny --seed 1 -o %s 2>/dev/null"
             " && %s gen-model --preset tiny --seed 2 -o %s 2>/dev/null", bin, a, bin, b, bin, c);
    TEST_CHECK(system(cmd) == 0);
    ia = read_all(a, &na);
    ib = read_all(b, &nb);
    ic = read_all(c, &nc);
    tiny = read_all("tests/data/tiny.gguf", &nt);
    TEST_CHECK(ia && ib && ic && tiny);
    if (ia && ib && ic && tiny) {
        TEST_CHECK(na == nb && memcmp(ia, ib, na) == 0);  /* same seed, same bytes */
        TEST_CHECK(na == nc && memcmp(ia, ic, na) != 0);  /* another seed, other weights */
        TEST_CHECK(bitnet_gguf_open_memory(tiny, nt, &g) == BITNET_OK);
        if (g) hdr = (size_t)bitnet_gguf_data_offset(g), bitnet_gguf_close(g);
        TEST_CHECKF(na == nt && hdr > 0 && memcmp(ia, tiny, hdr) == 0,
                    "tests/data/tiny.gguf is stale: regenerate it with gen-model --preset tiny --seed 1");
    }
    /* info reads a good file and refuses a bad one */
    snprintf(cmd, sizeof cmd, "%s info %s > /dev/null", bin, a);
    TEST_CHECK(system(cmd) == 0);
    if (ia) {
        ia[0] = 'X';
        TEST_CHECK(write_all(a, ia, na));
    }
    snprintf(cmd, sizeof cmd, "%s info %s > /dev/null 2>&1", bin, a);
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s gen-model --preset huge -o %s > /dev/null 2>&1", bin, a);
    TEST_CHECK(system(cmd) != 0);
    remove(c);
    snprintf(cmd, sizeof cmd, "%s gen-model --preset 2b4t --tiktoken /nonexistent.tiktoken -o %s > /dev/null 2>&1", bin, c);
    TEST_CHECK(system(cmd) != 0);
    TEST_CHECK((f = fopen(c, "rb")) == NULL); /* nothing left behind */
    if (f) fclose(f);
    free(ia); free(ib); free(ic); free(tiny);
    remove(a); remove(b); remove(c);
}

/* "bitnet" (1bitLLM's models) computes its FFN as bitnet.cpp's build_bitnet does, silu(gate) * up:
   gen-model's tiny weights under "bitnet-b1.58" (relu(gate)^2 * up) and under "bitnet" load with
   their activations and give other logits. test_model checks the silu forward against its float
   reference, test_cuda_forward the GPU's against the CPU's. */
static void test_cli_arch_bitnet_silu(void) {
    static const char *const archs[2] = {"bitnet-b1.58", "bitnet"};
    char bin[512], cmd[2048], path[640], why[600];
    float lg[2][552];
    int a;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(path, sizeof path, "%s", tmp_path("gen_arch.gguf"));
    for (a = 0; a < 2; a++) {
        bitnet_model_desc d;
        bitnet_model *m = NULL;
        bitnet_session *s = NULL;
        bitnet_model_info info;
        int32_t tok[3] = {3, 50, 7};
        snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --seed 3 --arch %s -o %s 2>/dev/null", bin, archs[a], path);
        TEST_CHECK(system(cmd) == 0);
        memset(&d, 0, sizeof d);
        d.path = path, d.backend = BITNET_BACKEND_CPU;
        memset(lg[a], 0, sizeof lg[a]);
        TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s",
                    bitnet_last_error());
        TEST_CHECK(m && bitnet_model_get_info(m, &info) == BITNET_OK && info.n_vocab == 552 &&
                   info.ffn_act == (a ? BITNET_FFN_SILU : BITNET_FFN_RELU2) && strcmp(info.arch, archs[a]) == 0);
        if (s) TEST_CHECK(bitnet_session_eval(s, tok, 3, lg[a], 0) == BITNET_OK);
        bitnet_session_free(s), bitnet_model_free(m);
    }
    TEST_CHECKF(isfinite(lg[1][0]) && memcmp(lg[0], lg[1], sizeof lg[0]) != 0, "logit 0: %g (relu^2), %g (silu)", (double)lg[0][0],
                (double)lg[1][0]);
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --arch qwen2 -o %s > /dev/null 2>&1", bin, path);
    TEST_CHECK(system(cmd) != 0);
    remove(path);
}

/* "llama" (ternary LLaMAs, e.g. Llama3-8B-1.58): no sub-norms, silu, and q / k rows permuted by
   llama.cpp's converter for its pairwise RoPE. gen-model's file loads, and gives the logits of the
   same tensors through bitnet_model_from_weights with q and k put back in rotate-half order here. */
static void test_cli_arch_llama(void) {
    char bin[512], cmd[2048], path[640], why[600];
    bitnet_model_desc d;
    bitnet_model *m = NULL, *mw = NULL;
    bitnet_session *s = NULL, *sw = NULL;
    bitnet_model_info info;
    bitnet_gguf *g = NULL;
    bitnet_model_weights w;
    bitnet_layer_weights lw[2];
    bitnet_tensor_info ti;
    void *perm[2][2] = {{NULL, NULL}, {NULL, NULL}};
    int32_t tok[4] = {3, 50, 7, 99};
    static float a[552 * 4], b[552 * 4];
    int l, p, h, i, j;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(path, sizeof path, "%s", tmp_path("gen_llama.gguf"));
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --seed 3 --arch llama -o %s 2>/dev/null", bin, path);
    TEST_CHECK(system(cmd) == 0);
    memset(&d, 0, sizeof d);
    d.path = path, d.backend = BITNET_BACKEND_CPU, d.head_f16 = 1;
    TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(m && bitnet_model_get_info(m, &info) == BITNET_OK && strcmp(info.arch, "llama") == 0 && info.sub_norms == 0 &&
               info.ffn_act == BITNET_FFN_SILU && info.n_layers == 2);
    TEST_CHECK(bitnet_gguf_open(path, &g) == BITNET_OK);
    if (!s || !g || info.n_layers != 2) { bitnet_session_free(s), bitnet_model_free(m), bitnet_gguf_close(g); return; }
    memset(&w, 0, sizeof w), memset(lw, 0, sizeof lw);
    w.n_vocab = info.n_vocab, w.dim = info.dim, w.n_layers = 2, w.n_heads = info.n_heads, w.n_kv_heads = info.n_kv_heads;
    w.ffn_dim = info.ffn_dim, w.n_ctx_train = info.n_ctx_train, w.rope_theta = info.rope_theta, w.norm_eps = info.norm_eps;
    w.bos = info.bos, w.eos = info.eos, w.eot = info.eot, w.ffn_act = BITNET_FFN_SILU, w.no_sub_norms = 1;
    bitnet_gguf_find_tensor(g, "token_embd.weight", &ti), w.tok_embd = (const uint16_t *)ti.data;
    bitnet_gguf_find_tensor(g, "output_norm.weight", &ti), w.output_norm = (const float *)ti.data;
    for (l = 0; l < 2; l++) {
        static const char *const names[7] = {"attn_norm", "ffn_norm", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
        const void **dst[7];
        char name[64];
        dst[0] = (const void **)&lw[l].attn_norm, dst[1] = (const void **)&lw[l].ffn_norm, dst[2] = &lw[l].wv, dst[3] = &lw[l].wo;
        dst[4] = &lw[l].w_gate, dst[5] = &lw[l].w_up, dst[6] = &lw[l].w_down;
        for (i = 0; i < 7; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, names[i]);
            TEST_CHECK(bitnet_gguf_find_tensor(g, name, &ti) == BITNET_OK);
            *dst[i] = ti.data;
        }
        for (p = 0; p < 2; p++) { /* q, k: row 2i + j of each head back to j * hd / 2 + i */
            int heads = p ? info.n_kv_heads : info.n_heads, hd = info.head_dim;
            size_t rb = (size_t)info.dim / 4;
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, p ? "attn_k" : "attn_q");
            TEST_CHECK(bitnet_gguf_find_tensor(g, name, &ti) == BITNET_OK);
            perm[l][p] = malloc((size_t)ti.bytes);
            memcpy(perm[l][p], ti.data, (size_t)ti.bytes);
            for (h = 0; h < heads; h++)
                for (i = 0; i < hd / 2; i++)
                    for (j = 0; j < 2; j++)
                        memcpy((char *)perm[l][p] + ((size_t)h * hd + (size_t)j * hd / 2 + i) * rb,
                               (const char *)ti.data + ((size_t)h * hd + 2 * (size_t)i + j) * rb, rb);
        }
        lw[l].wq = perm[l][0], lw[l].wk = perm[l][1];
    }
    w.layers = lw;
    d.path = NULL;
    TEST_CHECKF(bitnet_model_from_weights(&w, &d, &mw) == BITNET_OK && bitnet_session_create(mw, NULL, &sw) == BITNET_OK, "%s",
                bitnet_last_error());
    if (sw) {
        TEST_CHECK(bitnet_session_eval(s, tok, 4, a, 1) == BITNET_OK && bitnet_session_eval(sw, tok, 4, b, 1) == BITNET_OK);
        TEST_CHECK(isfinite(a[0]) && memcmp(a, b, sizeof a) == 0);
        TEST_CHECK(bitnet_model_get_info(mw, &info) == BITNET_OK && strcmp(info.arch, "llama") == 0);
    }
    bitnet_session_free(s), bitnet_session_free(sw), bitnet_model_free(m), bitnet_model_free(mw), bitnet_gguf_close(g);
    for (l = 0; l < 2; l++) free(perm[l][0]), free(perm[l][1]);
    remove(path);
}

/* gen-model --vocab spm: a SentencePiece vocabulary (tokenizer.ggml.model "llama", as 1bitLLM's
   models have) that loads, encodes with BOS 1 and the space before the text, decodes back, and
   runs; `bitnet tokenize` prints the same ids. */
static void test_cli_spm_vocab(void) {
    char bin[512], cmd[2048], path[640], outp[640], why[600], out[256] = "";
    bitnet_model_desc d;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    const bitnet_tokenizer *tk;
    int32_t ids[64];
    size_t n = 0, blen = 0, i;
    char back[128], want[256] = "";
    float lg[683];
    FILE *f;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(path, sizeof path, "%s", tmp_path("gen_spm.gguf"));
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --arch bitnet --vocab spm -o %s 2>/dev/null", bin, path);
    TEST_CHECK(system(cmd) == 0);
    memset(&d, 0, sizeof d);
    d.path = path, d.backend = BITNET_BACKEND_CPU;
    TEST_CHECKF(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, NULL, &s) == BITNET_OK, "%s", bitnet_last_error());
    tk = m ? bitnet_model_tokenizer(m) : NULL;
    if (tk && s) {
        TEST_CHECK(bitnet_tokenize(tk, "Hello world, the model", 22, 1, 1, ids, 64, &n) == BITNET_OK && n > 3 && ids[0] == 1);
        TEST_CHECK(bitnet_detokenize(tk, ids + 1, n - 1, back, sizeof back, &blen) == BITNET_OK && strcmp(back, " Hello world, the model") == 0);
        TEST_CHECK(bitnet_tokenizer_vocab_size(tk) == 683 && bitnet_session_eval(s, ids, n, lg, 0) == BITNET_OK && isfinite(lg[0]));
        for (i = 0; i < n; i++) snprintf(want + strlen(want), sizeof want - strlen(want), i ? ",%d" : "%d", (int)ids[i]);
    }
    bitnet_session_free(s), bitnet_model_free(m);
    snprintf(outp, sizeof outp, "%s", tmp_path("gen_spm.txt"));
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p 'Hello world, the model' > %s 2>/dev/null", bin, path, outp);
    TEST_CHECK(system(cmd) == 0);
    if ((f = fopen(outp, "rb")) != NULL) {
        if (!fgets(out, sizeof out, f)) out[0] = 0;
        fclose(f);
    }
    out[strcspn(out, "\n")] = 0;
    TEST_CHECKF(strcmp(out, want) == 0, "tokenize printed '%s', the library gives '%s'", out, want);
    remove(path), remove(outp);
}

/* -h / --help: the whole list, or one command's usage right after its name; exit 0. "-p --help"
   stays a prompt. An unknown command after help is an error. */
static void test_cli_help(void) {
    char bin[512], cmd[5120], o[640], why[600];
    unsigned char *t;
    size_t n = 0;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(o, sizeof o, "%s", tmp_path("help_out"));
    snprintf(cmd, sizeof cmd, "%s --help > %s && %s -h >> %s && %s run --help >> %s && %s help eval >> %s", bin, o, bin, o, bin, o, bin, o);
    TEST_CHECK(system(cmd) == 0);
    t = read_all(o, &n);
    TEST_CHECKF(t && strstr((const char *)t, "usage: bitnet <command>") && strstr((const char *)t, "usage: bitnet run -m FILE") &&
                    strstr((const char *)t, "usage: bitnet eval -m FILE"), "%s", t ? (const char *)t : "");
    free(t);
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -t 1 --temp 0 -n 2 -p --help > %s 2>/dev/null", bin, o);
    TEST_CHECK(system(cmd) == 0);
    t = read_all(o, &n);
    TEST_CHECKF(t && !strstr((const char *)t, "usage:"), "-p --help: %s", t ? (const char *)t : "");
    free(t), remove(o);
    snprintf(cmd, sizeof cmd, "%s help nope > /dev/null 2>&1", bin);
    TEST_CHECK(system(cmd) != 0);
}

/* bitnet run's prompt and sampling flags on tests/data/tiny.gguf (CPU, greedy): -f gives what -p
   gives (given as llama.cpp's long names --model, --threads, --n-predict, --file); --repeat-last-n 0 turns the penalty off (as --repeat-penalty 1); --ignore-eos with -n -1
   runs to the end of the context; -p with -f and --repeat-last-n below -1 are refused; -cnv answers
   each line of stdin (the empty one is skipped), also past the end of the context. */
static void test_cli_run_flags(void) {
    char bin[512], cmd[4096], pf[640], o[5][640], why[600];
    const char *run = "run -m tests/data/tiny.gguf --backend cpu -t 1 --temp 0 --seed 3";
    unsigned char *out[5];
    size_t n[5];
    int i;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(pf, sizeof pf, "%s", tmp_path("prompt.txt"));
    TEST_CHECK(write_all(pf, "Once upon a time", 16));
    for (i = 0; i < 5; i++) snprintf(o[i], sizeof o[i], "%s%d", tmp_path("run_out"), i);
    snprintf(cmd, sizeof cmd, "%s %s -n 12 -p 'Once upon a time' > %s 2>/dev/null", bin, run, o[0]);
    TEST_CHECK(system(cmd) == 0);
    /* llama.cpp's long names: --model, --file, --n-predict */
    snprintf(cmd, sizeof cmd, "%s run --model tests/data/tiny.gguf --backend cpu --threads 1 --temp 0 --seed 3 --n-predict 12 "
             "--file %s > %s 2>/dev/null", bin, pf, o[1]);
    TEST_CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s %s -n 12 -f %s --repeat-penalty 1.5 --repeat-last-n 0 > %s 2>/dev/null", bin, run, pf, o[2]);
    TEST_CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s %s -n 12 -f %s --repeat-penalty 1e6 --repeat-last-n -1 > %s 2>/dev/null", bin, run, pf, o[3]);
    TEST_CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "%s %s -n -1 -c 32 --ignore-eos -f %s > /dev/null 2> %s", bin, run, pf, o[4]);
    TEST_CHECK(system(cmd) == 0);
    {
        char ce[640];
        unsigned char *e;
        size_t ne = 0;
        snprintf(ce, sizeof ce, "%s", tmp_path("cnv_err"));
        snprintf(cmd, sizeof cmd, "printf 'Hello there\\n\\nAgain\\n' | %s %s -n 6 -cnv -p 'Be brief.' > /dev/null 2> %s", bin, run, ce);
        TEST_CHECK(system(cmd) == 0);
        e = read_all(ce, &ne);
        TEST_CHECKF(e && strstr((const char *)e, "2 replies; prompts") != NULL, "-cnv: %s", e ? (const char *)e : "");
        free(e), remove(ce);
        { /* --chat answers one message as -cnv answers its first line */
            char c1[640], c2[640];
            unsigned char *x1, *x2;
            size_t n1 = 0, n2 = 0;
            snprintf(c1, sizeof c1, "%s", tmp_path("chat_one")), snprintf(c2, sizeof c2, "%s", tmp_path("chat_cnv"));
            snprintf(cmd, sizeof cmd, "%s %s -n 6 --chat -p 'Hello there' > %s 2>/dev/null && echo 'Hello there' | %s %s -n 6 -cnv > %s 2>/dev/null",
                     bin, run, c1, bin, run, c2);
            TEST_CHECK(system(cmd) == 0);
            x1 = read_all(c1, &n1), x2 = read_all(c2, &n2);
            TEST_CHECKF(x1 && x2 && n1 > 1 && n1 == n2 && memcmp(x1, x2, n1) == 0, "--chat: '%s', -cnv: '%s'", x1 ? (char *)x1 : "",
                        x2 ? (char *)x2 : "");
            free(x1), free(x2), remove(c1), remove(c2);
        }
        /* a conversation longer than the context: its older half goes, and every message is answered */
        snprintf(cmd, sizeof cmd, "for i in 1 2 3 4 5 6 7 8; do echo 'Tell me a long story about the sea and the ships'; done | "
                 "%s %s -n 40 -c 128 -cnv -p 'Be brief.' > /dev/null 2> %s", bin, run, ce);
        TEST_CHECK(system(cmd) == 0);
        e = read_all(ce, &ne);
        TEST_CHECKF(e && strstr((const char *)e, "the context is full") && strstr((const char *)e, "8 replies; prompts"), "-cnv -c 128: %s",
                    e ? (const char *)e : "");
        free(e), remove(ce);
    }
    snprintf(cmd, sizeof cmd, "%s %s -n 4 -f %s -p x > /dev/null 2>&1", bin, run, pf);
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s %s -n 4 -f %s --repeat-last-n -2 > /dev/null 2>&1", bin, run, pf);
    TEST_CHECK(system(cmd) != 0);
    { /* --chat-template: a named one runs, another name is a usage error */
        snprintf(cmd, sizeof cmd, "%s %s -n 4 --chat --chat-template falcon3 -p Hi > /dev/null 2>&1", bin, run);
        TEST_CHECK(system(cmd) == 0);
        snprintf(cmd, sizeof cmd, "%s %s -n 4 --chat --chat-template chatml -p Hi > /dev/null 2>&1", bin, run);
        TEST_CHECK(system(cmd) != 0);
    }
    snprintf(cmd, sizeof cmd, "%s %s -n 4 -f %s.missing > /dev/null 2>&1", bin, run, pf);
    TEST_CHECK(system(cmd) != 0);
    for (i = 0; i < 5; i++) out[i] = read_all(o[i], &n[i]);
    TEST_CHECK(out[0] && out[1] && out[2] && out[3] && out[4] && n[0] > 1);
    if (out[0] && out[1] && out[2] && out[3] && out[4]) {
        TEST_CHECKF(n[0] == n[1] && memcmp(out[0], out[1], n[0]) == 0, "-f and -p differ");
        TEST_CHECKF(n[0] == n[2] && memcmp(out[0], out[2], n[0]) == 0, "--repeat-last-n 0 changed the greedy text");
        /* a penalty of 1e6 over the whole context never repeats a token: other text than greedy's
           (tiny's greedy output repeats itself within 12 tokens) */
        TEST_CHECKF(n[3] != n[0] || memcmp(out[0], out[3], n[0]) != 0, "--repeat-last-n -1 with a penalty changed nothing");
        TEST_CHECKF(strstr((const char *)out[4], "end of the context") != NULL, "--ignore-eos -n -1: %s", (const char *)out[4]);
    }
    for (i = 0; i < 5; i++) free(out[i]), remove(o[i]);
    remove(pf);
}

/* run's --logit-bias, --presence-penalty / --frequency-penalty and -r on tiny's greedy text ("Hello"
   goes on with "or" (token 272) again and again): a banned token changes the text, the penalties
   change it, a reverse prompt cuts it right after its text; bad values are refused. */
static void test_cli_run_sampling_flags(void) {
    char bin[512], cmd[8192], o[4][640], why[600];
    const char *run = "run -m tests/data/tiny.gguf --backend cpu -t 1 --temp 0 -n 40 -p Hello --ignore-eos";
    unsigned char *out[4];
    size_t n[4];
    int i;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    for (i = 0; i < 4; i++) snprintf(o[i], sizeof o[i], "%s%d", tmp_path("flags_out"), i);
    snprintf(cmd, sizeof cmd, "%s %s > %s 2>/dev/null && %s %s --logit-bias 272-inf --logit-bias 5+0.5 > %s 2>/dev/null && "
             "%s %s --frequency-penalty 1.5 --presence-penalty 0.5 > %s 2>/dev/null && %s %s -r roro -r never > %s 2>/dev/null",
             bin, run, o[0], bin, run, o[1], bin, run, o[2], bin, run, o[3]);
    TEST_CHECK(system(cmd) == 0);
    for (i = 0; i < 4; i++) out[i] = read_all(o[i], &n[i]);
    if (out[0] && out[1] && out[2] && out[3]) {
        const char *at = strstr((const char *)out[0], "roro");
        TEST_CHECKF(at != NULL, "tiny's greedy text changed: %s", (const char *)out[0]);
        TEST_CHECKF(!strstr((const char *)out[1], "oror") && (n[1] != n[0] || memcmp(out[0], out[1], n[0]) != 0), "--logit-bias: %s",
                    (const char *)out[1]);
        TEST_CHECKF(n[2] != n[0] || memcmp(out[0], out[2], n[0]) != 0, "the penalties changed nothing");
        /* -r: greedy's text up to the token that completes "roro" (an "or": at most one byte past it), then the newline */
        TEST_CHECKF(at && n[3] >= 2 && n[3] - 1 <= (size_t)(at - (const char *)out[0]) + 5 && memcmp(out[0], out[3], n[3] - 1) == 0 &&
                    out[3][n[3] - 1] == '\n' && strstr((const char *)out[3], "roro"), "-r: %s", (const char *)out[3]);
    } else {
        TEST_CHECK(0);
    }
    for (i = 0; i < 4; i++) free(out[i]), remove(o[i]);
    snprintf(cmd, sizeof cmd, "%s %s --logit-bias 5x > /dev/null 2>&1", bin, run);
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s %s --logit-bias 99999+1 > /dev/null 2>&1", bin, run); /* no such token */
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s %s --logit-bias 5+inf > /dev/null 2>&1", bin, run);
    TEST_CHECK(system(cmd) != 0);
}

/* bitnet perplexity on tests/data/tiny.gguf (CPU) against the same definition computed here: the
   text's tokens in chunks of 32, BOS first, each chunk evaluated at once (the CLI takes its logits
   in pieces), the second half scored; --chunks caps the count; too short a text and -c 2 are refused. */
static void test_cli_perplexity(void) {
    enum { NCTX = 32, CHUNKS = 3 };
    char bin[512], cmd[4096], tf[640], of[640], why[600];
    const char *text = "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
                       "foolishness, 1859: 12345 67890!\n\tWe had everything before us, we had nothing before us.";
    unsigned char *out;
    size_t n = 0, n_tok = 0, c;
    int32_t ids[1024], chunk[NCTX], bos = -1;
    float *logits = NULL;
    double sum = 0.0, ref, got = -1.0;
    int scored = 0, j, v;
    bitnet_model_desc d;
    bitnet_model_info info;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(tf, sizeof tf, "%s", tmp_path("ppl.txt")), snprintf(of, sizeof of, "%s", tmp_path("ppl.out"));
    TEST_CHECK(write_all(tf, text, strlen(text)));
    snprintf(cmd, sizeof cmd, "%s perplexity -m tests/data/tiny.gguf --backend cpu -t 1 -c %d --chunks %d -f %s > %s 2>/dev/null",
             bin, NCTX, CHUNKS, tf, of);
    TEST_CHECK(system(cmd) == 0);
    out = read_all(of, &n);
    TEST_CHECKF(out && sscanf((const char *)out, "perplexity: %lf", &got) == 1 && strstr((const char *)out, "3 chunks of 32 tokens, 48 scored"),
                "%s", out ? (const char *)out : "");
    memset(&d, 0, sizeof d);
    d.path = "tests/data/tiny.gguf", d.backend = BITNET_BACKEND_CPU;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = NCTX;
    TEST_CHECK(bitnet_model_load(&d, &m) == BITNET_OK && bitnet_session_create(m, &sd, &s) == BITNET_OK);
    if (s) {
        bitnet_model_get_info(m, &info);
        bitnet_tokenizer_special_ids(bitnet_model_tokenizer(m), &bos, NULL, NULL);
        TEST_CHECK(bitnet_tokenize(bitnet_model_tokenizer(m), text, strlen(text), 0, 0, ids, 1024, &n_tok) == BITNET_OK);
        TEST_CHECKF(n_tok >= CHUNKS * NCTX + 1 && bos >= 0, "%zu tokens", n_tok); /* more than 3 chunks: --chunks caps */
        logits = (float *)malloc((size_t)NCTX * (size_t)info.n_vocab * sizeof *logits);
        for (c = 0; c < CHUNKS && logits && n_tok >= CHUNKS * NCTX; c++) {
            memcpy(chunk, ids + c * NCTX, sizeof chunk);
            chunk[0] = bos;
            bitnet_session_reset(s);
            TEST_CHECK(bitnet_session_eval(s, chunk, NCTX, logits, 1) == BITNET_OK);
            for (j = NCTX / 2 - 1; j < NCTX - 1; j++) {
                const float *row = logits + (size_t)j * (size_t)info.n_vocab;
                double se = 0.0;
                for (v = 0; v < info.n_vocab; v++) se += exp((double)row[v]);
                sum += log(se) - (double)row[chunk[j + 1]], scored++;
            }
        }
        ref = exp(sum / scored);
        TEST_CHECKF(scored == 48 && fabs(got - ref) <= 1e-5 * ref, "CLI %.6f, here %.6f", got, ref);
    }
    free(logits), free(out);
    bitnet_session_free(s), bitnet_model_free(m);
    snprintf(cmd, sizeof cmd, "%s perplexity -m tests/data/tiny.gguf --backend cpu -c 512 -f %s > /dev/null 2>&1", bin, tf);
    TEST_CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s perplexity -m tests/data/tiny.gguf --backend cpu -c 2 -f %s > /dev/null 2>&1", bin, tf);
    TEST_CHECK(system(cmd) != 0);
    remove(tf), remove(of);
}

/* gen-model --type tq1_0 / tq2_0 writes llama.cpp's ternary types: each matrix holds the codes of
   the I2_S model of the same seed with its scale rounded to fp16; both files load and give the same
   logits (bitnet eval, CPU); info reads them; tiny (rows of 128) is refused. */
static void test_cli_tq_models(void) {
    static const char *const types[3] = {"i2_s", "tq2_0", "tq1_0"};
    char bin[512], cmd[4096], path[3][640], lg[2][640], why[600];
    bitnet_gguf *g[3] = {NULL, NULL, NULL};
    unsigned char *l0, *l1;
    size_t n0 = 0, n1 = 0;
    uint64_t i;
    int t, checked = 0;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    for (t = 0; t < 3; t++) {
        snprintf(path[t], sizeof path[t], "%s-%s.gguf", tmp_path("tq_model"), types[t]);
        snprintf(cmd, sizeof cmd, "%s gen-model --preset small --seed 3 --type %s -o %s > /dev/null 2>&1", bin, types[t], path[t]);
        TEST_CHECK(system(cmd) == 0);
        TEST_CHECKF(bitnet_gguf_open(path[t], &g[t]) == BITNET_OK, "%s: %s", types[t], bitnet_last_error());
    }
    for (i = 0; g[0] && g[1] && g[2] && i < bitnet_gguf_tensor_count(g[0]); i++) {
        bitnet_tensor_info a, b;
        size_t n, k, ib;
        int8_t *qa, *qb;
        void *conv;
        float sa, sb;
        if (bitnet_gguf_tensor(g[0], i, &a) != BITNET_OK || a.type != BITNET_TENSOR_I2_S) continue;
        n = (size_t)a.ne[1], k = (size_t)a.ne[0], ib = bitnet_i2s_bytes(n, k);
        qa = (int8_t *)malloc(n * k), qb = (int8_t *)malloc(n * k), conv = malloc(ib);
        for (t = 1; t < 3 && qa && qb && conv; t++) {
            TEST_CHECK(bitnet_gguf_find_tensor(g[t], a.name, &b) == BITNET_OK &&
                       b.type == (t == 1 ? BITNET_TENSOR_TQ2_0 : BITNET_TENSOR_TQ1_0));
            TEST_CHECK(bitnet_i2s_from_tq(b.type, b.data, (size_t)b.bytes, n, k, conv, ib) == BITNET_OK);
            TEST_CHECK(bitnet_i2s_unpack(a.data, (size_t)a.bytes, n, k, qa, &sa) == BITNET_OK &&
                       bitnet_i2s_unpack(conv, ib, n, k, qb, &sb) == BITNET_OK);
            TEST_CHECKF(memcmp(qa, qb, n * k) == 0 && sb == bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(sa)), "%s as %s", a.name, types[t]);
            checked++;
        }
        free(qa), free(qb), free(conv);
    }
    TEST_CHECKF(checked == 2 * 4 * 7, "%d matrices compared", checked); /* small: 4 layers of 7 */
    for (t = 0; t < 3; t++) bitnet_gguf_close(g[t]);
    for (t = 0; t < 2; t++) {
        snprintf(lg[t], sizeof lg[t], "%s%d.f32", tmp_path("tq_logits"), t);
        snprintf(cmd, sizeof cmd, "%s eval -m %s --backend cpu -t 1 --tokens 1,60,70,80,90,100 --logits-out %s > /dev/null 2>&1 && "
                 "%s info %s > /dev/null", bin, path[t + 1], lg[t], bin, path[t + 1]);
        TEST_CHECK(system(cmd) == 0);
    }
    l0 = read_all(lg[0], &n0), l1 = read_all(lg[1], &n1);
    TEST_CHECK(l0 && l1 && n0 > 0 && n0 == n1 && memcmp(l0, l1, n0) == 0);
    free(l0), free(l1);
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --type tq2_0 -o %s > /dev/null 2>&1", bin, path[0]);
    TEST_CHECK(system(cmd) != 0);
    for (t = 0; t < 3; t++) remove(path[t]);
    remove(lg[0]), remove(lg[1]);
}

/* gen-model --type f32 / f16 / bf16 writes the ternary matrices as floats code * scale, as
   bitnet.cpp's converter writes 1bitLLM's models. The loader takes such a matrix's own scale (the
   per-tensor absmean of already-ternary floats would shrink it by the share of nonzero codes):
   f32 gives the logits of the I2_S file of the same seed, f16 those of TQ2_0 (both round the scale
   to fp16), and bf16 loads. */
static void test_cli_float_models(void) {
    static const char *const runs[4][3] = {{"tiny", "i2_s", "1"}, {"tiny", "f32", "1"}, {"small", "tq2_0", "3"}, {"small", "f16", "3"}};
    char bin[512], cmd[8192], path[5][640], lg[4][640], why[600];
    unsigned char *l[4];
    size_t n[4];
    int t;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    for (t = 0; t < 4; t++) {
        snprintf(path[t], sizeof path[t], "%s-%s.gguf", tmp_path("float_model"), runs[t][1]);
        snprintf(lg[t], sizeof lg[t], "%s%d.f32", tmp_path("float_logits"), t);
        snprintf(cmd, sizeof cmd, "%s gen-model --preset %s --seed %s --type %s -o %s > /dev/null 2>&1", bin, runs[t][0],
                 runs[t][2], runs[t][1], path[t]);
        TEST_CHECKF(system(cmd) == 0, "gen-model %s %s", runs[t][0], runs[t][1]);
        snprintf(cmd, sizeof cmd, "%s eval -m %s --backend cpu -t 1 --tokens 1,60,70,80,90,100 --logits-out %s > /dev/null 2>&1",
                 bin, path[t], lg[t]);
        TEST_CHECKF(system(cmd) == 0, "eval %s %s", runs[t][0], runs[t][1]);
        l[t] = read_all(lg[t], &n[t]);
    }
    TEST_CHECKF(l[0] && l[1] && n[0] > 0 && n[0] == n[1] && memcmp(l[0], l[1], n[0]) == 0, "tiny: f32 against i2_s");
    TEST_CHECKF(l[2] && l[3] && n[2] > 0 && n[2] == n[3] && memcmp(l[2], l[3], n[2]) == 0, "small: f16 against tq2_0");
    snprintf(path[4], sizeof path[4], "%s-bf16.gguf", tmp_path("float_model"));
    snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny --type bf16 -o %s > /dev/null 2>&1 && %s run -m %s -p Hi -n 4 "
             "--backend cpu > /dev/null 2>&1", bin, path[4], bin, path[4]);
    TEST_CHECK(system(cmd) == 0);
    for (t = 0; t < 4; t++) free(l[t]), remove(path[t]), remove(lg[t]);
    remove(path[4]);
}

/* run --prompt-cache: a first run writes the prompt's state, a second reuses all of it but the last
   token, a prompt that shares only a start reuses that, a cache of another model is not used; the
   greedy text is the same every time as without a cache. Also gen-model --rope-scaling llama3: the
   file loads and its factors move the logits. */
static void test_cli_prompt_cache(void) {
    static const char *const prompts[4] = {"The quick brown fox jumps over the lazy dog and runs far away", "",
                                           "The quick brown fox sleeps", "The quick brown fox jumps over the lazy dog and runs far away"};
    char bin[512], cmd[8192], out[2][640], err[640], cache[640], small[640], rs[2][640], why[600];
    unsigned char *a, *b, *e;
    size_t na, nb, ne;
    int t;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(out[0], sizeof out[0], "%s", tmp_path("pc_out0.txt"));
    snprintf(out[1], sizeof out[1], "%s", tmp_path("pc_out1.txt"));
    snprintf(err, sizeof err, "%s", tmp_path("pc_err.txt"));
    snprintf(cache, sizeof cache, "%s", tmp_path("pc_cache.bin"));
    snprintf(small, sizeof small, "%s", tmp_path("pc_small.gguf"));
    remove(cache);
    snprintf(cmd, sizeof cmd, "%s gen-model --preset small -o %s > /dev/null 2>&1", bin, small);
    TEST_CHECK(system(cmd) == 0);
    for (t = 0; t < 4; t++) {
        const char *p = prompts[t][0] ? prompts[t] : prompts[0];
        /* t = 3: a cache written by another model first */
        if (t == 3) {
            remove(cache);
            snprintf(cmd, sizeof cmd, "%s run -m %s -p '%s' -n 2 --temp 0 --backend cpu --prompt-cache %s > /dev/null 2>&1", bin, small, p, cache);
            TEST_CHECK(system(cmd) == 0);
        }
        snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -p '%s' -n 12 --temp 0 --ignore-eos --backend cpu > %s 2>/dev/null", bin, p, out[0]);
        TEST_CHECK(system(cmd) == 0);
        snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -p '%s' -n 12 --temp 0 --ignore-eos --backend cpu --prompt-cache %s > %s 2> %s",
                 bin, p, cache, out[1], err);
        TEST_CHECK(system(cmd) == 0);
        a = read_all(out[0], &na), b = read_all(out[1], &nb), e = read_all(err, &ne);
        TEST_CHECKF(a && b && na > 1 && na == nb && memcmp(a, b, na) == 0, "prompt %d: the text with the cache differs", t);
        if (e) { /* "--prompt-cache FILE: R of the prompt's N tokens from it": none, all but one, a start; another model's: not used */
            const char *at = strstr((const char *)e, " tokens from it"), *c = at ? at : (const char *)e;
            size_t used = 0, all = 0;
            while (c > (const char *)e && c[-1] != ':') c--;
            TEST_CHECKF(at && sscanf(c, " %zu of the prompt's %zu", &used, &all) == 2, "prompt %d: %s", t, (const char *)e);
            TEST_CHECKF(t == 0 || t == 3 ? used == 0 : t == 1 ? used + 1 == all : used >= 8 && used + 4 < all, "prompt %d: %zu of %zu", t, used, all);
            if (t == 3) TEST_CHECK(strstr((const char *)e, "not used") != NULL);
        }
        free(a), free(b), free(e);
    }
    /* -cnv: the system message's state; the same replies with it, and a new system message not from it */
    remove(cache);
    for (t = 0; t < 3; t++) {
        snprintf(cmd, sizeof cmd, "printf 'Hi there\\nAnd again\\n' | %s run -m tests/data/tiny.gguf -cnv -p '%s' -n 6 --temp 0 "
                 "--ignore-eos --backend cpu --prompt-cache %s > %s 2> %s", bin, t < 2 ? "Be brief." : "Be long.", cache, out[t & 1], err);
        TEST_CHECK(system(cmd) == 0);
        e = read_all(err, &ne);
        TEST_CHECKF(e && (strstr((const char *)e, "system message's") != NULL) == (t == 1), "-cnv run %d: %s", t, e ? (const char *)e : "");
        free(e);
        if (t != 1) continue;
        a = read_all(out[0], &na), b = read_all(out[1], &nb);
        TEST_CHECKF(a && b && na > 2 && na == nb && memcmp(a, b, na) == 0, "-cnv: the replies with the cache differ");
        free(a), free(b);
    }
    for (t = 0; t < 2; t++) {
        snprintf(rs[t], sizeof rs[t], "%s%d.gguf", tmp_path("rope_scaled"), t);
        snprintf(cmd, sizeof cmd, "%s gen-model --preset tiny %s -o %s > /dev/null 2>&1 && %s eval -m %s --backend cpu "
                 "--tokens 1,60,70,80,90,100,110,120,130,140,150,160,170,180 --logits-out %s.f32 > /dev/null 2>&1",
                 bin, t ? "--rope-scaling llama3" : "", rs[t], bin, rs[t], rs[t]);
        TEST_CHECKF(system(cmd) == 0, "gen-model / eval %d", t);
    }
    snprintf(cmd, sizeof cmd, "%s.f32", rs[0]), a = read_all(cmd, &na);
    snprintf(cmd, sizeof cmd, "%s.f32", rs[1]), b = read_all(cmd, &nb);
    TEST_CHECK(a && b && na == nb && na > 0 && memcmp(a, b, na) != 0);
    free(a), free(b);
    for (t = 0; t < 2; t++) remove(rs[t]), snprintf(cmd, sizeof cmd, "%s.f32", rs[t]), remove(cmd);
    remove(out[0]), remove(out[1]), remove(err), remove(cache), remove(small);
}

/* run --context-shift: -n 150 in a context of 48 positions generates all 150 (the older half after the
   prompt dropped each time it fills); without it generation stops at the context's end and says so. */
static void test_cli_context_shift(void) {
    char bin[512], cmd[2048], err[640], why[600];
    unsigned char *e;
    size_t ne, gen;
    int shift;
    if (cli_bin(bin, sizeof bin, why, sizeof why)) TEST_SKIP("%s", why);
    snprintf(err, sizeof err, "%s", tmp_path("cs_err.txt"));
    for (shift = 0; shift < 2; shift++) {
        const char *at;
        snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -p 'Hello there' -n 150 -c 48 --temp 0 --ignore-eos --backend cpu%s "
                 "> /dev/null 2> %s", bin, shift ? " --context-shift" : "", err);
        TEST_CHECK(system(cmd) == 0);
        e = read_all(err, &ne);
        at = e ? strstr((const char *)e, "generation ") : NULL;
        TEST_CHECKF(at && sscanf(at, "generation %zu tokens", &gen) == 1, "%s", e ? (const char *)e : "(no output)");
        if (at) TEST_CHECKF(shift ? gen == 150 : gen < 48, "--context-shift %d: %zu tokens", shift, gen);
        TEST_CHECK(e && (strstr((const char *)e, "context shift: ") != NULL) == shift);
        TEST_CHECK(e && (strstr((const char *)e, "stopped at the end of the context") != NULL) == !shift);
        free(e);
    }
    remove(err);
}

int main(void) {
    RUN_TEST(test_roundtrip_all_types);
    RUN_TEST(test_writer_misuse);
    RUN_TEST(test_api_arguments);
    RUN_TEST(test_tensor_nbytes);
    if (!make_base()) {
        printf("could not build the base file: %s\n", bitnet_last_error());
        return 1;
    }
    RUN_TEST(test_truncated_everywhere);
    RUN_TEST(test_truncated_files_on_disk);
    RUN_TEST(test_bad_magic_and_version);
    RUN_TEST(test_huge_counts);
    RUN_TEST(test_bad_shapes_and_offsets);
    RUN_TEST(test_bad_metadata);
    RUN_TEST(test_bad_alignment);
    RUN_TEST(test_random_mutations);
    RUN_TEST(test_alloc_faults);
    RUN_TEST(test_check_valid_micro);
    RUN_TEST(test_check_inconsistent);
    RUN_TEST(test_float_embedding_tied);
    RUN_TEST(test_quantized_embedding);
    RUN_TEST(test_tiny_model);
    RUN_TEST(test_tiny_truncated_everywhere);
    RUN_TEST(test_concurrent_readers);
    RUN_TEST(test_cli_gen_model_and_info);
    RUN_TEST(test_cli_arch_bitnet_silu);
    RUN_TEST(test_cli_spm_vocab);
    RUN_TEST(test_cli_arch_llama);
    RUN_TEST(test_cli_help);
    RUN_TEST(test_cli_run_flags);
    RUN_TEST(test_cli_run_sampling_flags);
    RUN_TEST(test_cli_perplexity);
    RUN_TEST(test_cli_tq_models);
    RUN_TEST(test_cli_float_models);
    RUN_TEST(test_cli_prompt_cache);
    RUN_TEST(test_cli_context_shift);
    RUN_TEST(test_ffn_not_whole_blocks);
    free(base_img);
    return test_summary();
}
