/* libFuzzer harness for the GGUF reader: open an arbitrary image, walk every key through every
   getter that applies, touch every string and array element and both ends of every tensor, look
   each tensor up by name, then run the BitNet architecture check. `make fuzz` runs it with the
   seeds in tests/corpus/gguf/ (written with bitnet_gguf_writer: all-types.gguf has every metadata
   and tensor type and a 64-byte alignment, no-tensors.gguf only metadata, micro-bitnet*.gguf are
   one-layer models that pass the architecture check). Any crash, sanitizer report or leak is a
   finding; fix it and add the input as a regression case to tests/test_gguf.c. */
#include "../bitnet.h"
#include <string.h>

static volatile unsigned fuzz_sink;

static void touch(const void *p, uint64_t n) {
    const unsigned char *b = (const unsigned char *)p;
    unsigned acc = 0;
    uint64_t i;
    for (i = 0; i < n; i++) acc += b[i];
    fuzz_sink += acc;
}

static size_t elem_size(bitnet_gguf_type t) {
    switch (t) {
    case BITNET_GGUF_UINT8: case BITNET_GGUF_INT8: case BITNET_GGUF_BOOL: return 1;
    case BITNET_GGUF_UINT16: case BITNET_GGUF_INT16: return 2;
    case BITNET_GGUF_UINT32: case BITNET_GGUF_INT32: case BITNET_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bitnet_gguf *g = NULL;
    bitnet_model_info info;
    uint64_t i, j, n;
    if (bitnet_gguf_open_memory(data, size, &g) != BITNET_OK) return 0;
    n = bitnet_gguf_kv_count(g);
    for (i = 0; i < n; i++) {
        const char *key = bitnet_gguf_key_name(g, i);
        bitnet_gguf_type t = bitnet_gguf_key_type(g, i), et;
        bitnet_gguf_str s;
        uint32_t u32; uint64_t u64, cnt; int64_t i64; float f; double d; int b;
        if (bitnet_gguf_find_key(g, key) != (int64_t)i) __builtin_trap(); /* keys are unique */
        bitnet_gguf_get_u32(g, key, &u32);
        bitnet_gguf_get_u64(g, key, &u64);
        bitnet_gguf_get_i64(g, key, &i64);
        bitnet_gguf_get_f32(g, key, &f);
        bitnet_gguf_get_f64(g, key, &d);
        bitnet_gguf_get_bool(g, key, &b);
        if (bitnet_gguf_get_str(g, key, &s) == BITNET_OK) touch(s.ptr, s.len);
        if (t == BITNET_GGUF_ARRAY && bitnet_gguf_get_arr(g, key, &et, &cnt) == BITNET_OK) {
            if (et == BITNET_GGUF_STRING) {
                for (j = 0; j < cnt; j++)
                    if (bitnet_gguf_arr_str(g, key, j, &s) == BITNET_OK) touch(s.ptr, s.len);
                if (bitnet_gguf_arr_str(g, key, cnt, &s) == BITNET_OK) __builtin_trap(); /* one past the end */
            } else {
                const void *p = bitnet_gguf_arr_data(g, key);
                if (!p) __builtin_trap();
                touch(p, cnt * elem_size(et));
            }
        }
    }
    n = bitnet_gguf_tensor_count(g);
    for (i = 0; i < n; i++) {
        bitnet_tensor_info t, t2;
        if (bitnet_gguf_tensor(g, i, &t) != BITNET_OK) __builtin_trap();
        if (bitnet_gguf_find_tensor(g, t.name, &t2) != BITNET_OK || t2.data != t.data) __builtin_trap();
        if (t.bytes) {
            touch(t.data, 1);
            touch((const unsigned char *)t.data + t.bytes - 1, 1);
        }
    }
    bitnet_gguf_check_bitnet(g, &info);
    bitnet_gguf_close(g);
    return 0;
}
