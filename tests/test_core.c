/* Error model, allocation hooks, fault injection, and the hand-worked quantization / I2_S vectors. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>

static void test_result_strings(void) {
    TEST_CHECK(strcmp(bitnet_result_string(BITNET_OK), "ok") == 0);
    TEST_CHECK(strcmp(bitnet_result_string(BITNET_ERR_TRUNCATED), "truncated file") == 0);
    TEST_CHECK(strcmp(bitnet_result_string((bitnet_result)12345), "unknown result") == 0);
}

static void test_null_pointers(void) {
    float s;
    int8_t q[4];
    bitnet_clear_error();
    TEST_CHECK(bitnet_quantize_ternary(NULL, 4, q, &s) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(strstr(bitnet_last_error(), "'w'") != NULL);
    TEST_CHECK(bitnet_quantize_act(NULL, 1, 4, q, &s, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_i2s_pack(q, 1, 128, 1.0f, NULL, 64) == BITNET_ERR_NULL_POINTER);
}

static int fake_allocs;
static void *counting_alloc(size_t n, void *u) { (void)u; fake_allocs++; return malloc(n); }
static void counting_free(void *p, void *u) { (void)u; free(p); }

static void test_allocator_hooks(void) {
    float x[256], s;
    int8_t q[256];
    int i;
    for (i = 0; i < 256; i++) x[i] = (float)(i - 128);
    TEST_CHECK(bitnet_set_allocator(counting_alloc, NULL, NULL) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_set_allocator(counting_alloc, counting_free, NULL) == BITNET_OK);
    TEST_CHECK(bitnet_quantize_ternary(x, 256, q, &s) == BITNET_OK);
    TEST_CHECK(bitnet_set_allocator(NULL, NULL, NULL) == BITNET_OK);
}

static void test_fault_spec(void) {
    TEST_CHECK(bitnet_set_fault("host_alloc:3") == BITNET_OK);
    TEST_CHECK(bitnet_set_fault("bogus") == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(strstr(bitnet_last_error(), "bogus") != NULL);
    TEST_CHECK(bitnet_set_fault("") == BITNET_OK);
}

/* absmean: mean|w| = (0.5+1+0+2+0.1+0.4)/6 = 0.6667; w/s = .75, -1.5, 0, 3, -.15, .6 -> 1,-1,0,1,0,1 */
static void test_quantize_ternary_hand(void) {
    const float w[6] = {0.5f, -1.0f, 0.0f, 2.0f, -0.1f, 0.4f};
    const int8_t want[6] = {1, -1, 0, 1, 0, 1};
    int8_t q[6];
    float s;
    int i;
    TEST_CHECK(bitnet_quantize_ternary(w, 6, q, &s) == BITNET_OK);
    TEST_CHECK(fabs(s - 4.0 / 6.0) < 1e-6);
    for (i = 0; i < 6; i++) TEST_CHECKF(q[i] == want[i], "q[%d]=%d want %d", i, q[i], want[i]);
}

/* absmax 2.0 -> s = 63.5; x*s = 63.5 (-> 64, half to even), -127, 31.75 (-> 32), 0.5 (-> 0), 1.5 (-> 2) */
static void test_quantize_act_hand(void) {
    const float x[5] = {1.0f, -2.0f, 0.5f, 0.5f / 63.5f, 1.5f / 63.5f};
    const int8_t want[5] = {64, -127, 32, 0, 2};
    int8_t q[5];
    float s;
    int32_t sum;
    int i;
    TEST_CHECK(bitnet_quantize_act(x, 1, 5, q, &s, &sum) == BITNET_OK);
    TEST_CHECK(s == 63.5f);
    for (i = 0; i < 5; i++) TEST_CHECKF(q[i] == want[i], "q[%d]=%d want %d", i, q[i], want[i]);
    TEST_CHECK(sum == 64 - 127 + 32 + 0 + 2);
}

/* Byte b of a block holds weights b, b+32, b+64, b+96 at bits 7:6 .. 1:0, code = w + 1. */
static void test_i2s_layout_hand(void) {
    int8_t q[128], back[128];
    uint8_t buf[64];
    float s = 0.25f, s2;
    int i;
    memset(q, 0, sizeof q);
    q[0] = 1; q[32] = -1; q[64] = 1; q[96] = 0; q[5] = -1;
    TEST_CHECK(bitnet_i2s_bytes(1, 128) == 64);
    TEST_CHECK(bitnet_i2s_pack(q, 1, 128, s, buf, sizeof buf) == BITNET_OK);
    TEST_CHECK(buf[0] == ((2 << 6) | (0 << 4) | (2 << 2) | 1));
    TEST_CHECK(buf[5] == ((0 << 6) | (1 << 4) | (1 << 2) | 1));
    TEST_CHECK(buf[1] == 0x55);
    TEST_CHECK(memcmp(buf + 32, &s, 4) == 0);
    TEST_CHECK(bitnet_i2s_unpack(buf, sizeof buf, 1, 128, back, &s2) == BITNET_OK);
    TEST_CHECK(memcmp(q, back, 128) == 0 && s2 == s);
    for (i = 0; i < 128; i++) q[i] = (int8_t)(i % 3 - 1);
    TEST_CHECK(bitnet_i2s_pack(q, 1, 128, s, buf, 63) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_i2s_pack(q, 1, 127, s, buf, sizeof buf) == BITNET_ERR_BAD_SHAPE);
    TEST_CHECK(bitnet_i2s_bytes(1, 127) == 0);
    q[7] = 2;
    TEST_CHECK(bitnet_i2s_pack(q, 1, 128, s, buf, sizeof buf) == BITNET_ERR_INVALID_ARG);
}

/* HF packs 4 row slabs per byte: byte [r][c] holds row r + i*n/4 at bits 2i. */
static void test_hf_import(void) {
    enum { N = 8, K = 128 };
    uint8_t hf[N / 4 * K], i2s[N * K / 4 + 32];
    int8_t w[N * K], back[N * K];
    float s;
    int r, c;
    test_seed(7);
    for (r = 0; r < N; r++)
        for (c = 0; c < K; c++) w[r * K + c] = (int8_t)test_rand_int(-1, 1);
    memset(hf, 0, sizeof hf);
    for (r = 0; r < N; r++)
        for (c = 0; c < K; c++) hf[(r % (N / 4)) * K + c] |= (uint8_t)((w[r * K + c] + 1) << (2 * (r / (N / 4))));
    TEST_CHECK(bitnet_i2s_from_hf(hf, N, K, 0.5f, i2s, sizeof i2s) == BITNET_OK);
    TEST_CHECK(bitnet_i2s_unpack(i2s, sizeof i2s, N, K, back, &s) == BITNET_OK);
    TEST_CHECK(memcmp(w, back, sizeof w) == 0);
    TEST_CHECK(s == 0.5f);
}

/* ggml's dequantize_row_tq2_0 / _tq1_0 as llama.cpp reads the blocks (written here from the
   format, independently of the library): code = w + 1 of a block's 256 weights, in order. */
static void tq_decode_block(int tq1, const uint8_t *b, int8_t *w) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    int j, l, m, n, o = 0;
    if (!tq1) {
        for (j = 0; j < 64; j += 32)
            for (l = 0; l < 4; l++)
                for (m = 0; m < 32; m++) w[o++] = (int8_t)(((b[j + m] >> (2 * l)) & 3) - 1);
        return;
    }
    for (n = 0; n < 5; n++)
        for (m = 0; m < 32; m++) w[o++] = (int8_t)((((uint8_t)(b[m] * pow3[n]) * 3) >> 8) - 1);
    for (n = 0; n < 5; n++)
        for (m = 0; m < 16; m++) w[o++] = (int8_t)((((uint8_t)(b[32 + m] * pow3[n]) * 3) >> 8) - 1);
    for (n = 0; n < 4; n++)
        for (m = 0; m < 4; m++) w[o++] = (int8_t)((((uint8_t)(b[48 + m] * pow3[n]) * 3) >> 8) - 1);
}

/* I2_S <-> llama.cpp's TQ1_0 / TQ2_0 on random codes (odd rows, 3 blocks a row): the TQ bytes read
   back through ggml's decoding give the codes and fp16(scale) in every block; back to I2_S they give
   the same codes with that scale; blocks of scale 0 are zeros; mixed scales, code 3, a bad type,
   short buffers and rows that are not whole blocks are refused. */
static void test_tq_convert(void) {
    enum { N = 3, K = 768, NB = N * K / 256 };
    static int8_t w[N * K], back[N * K], blk[256];
    static uint8_t i2s[N * K / 4 + 32], i2s2[N * K / 4 + 32], tq[NB * 66];
    const float scale = 0.0123f; /* not an fp16 value: the TQ scale is its rounding */
    float s2;
    int t, b, i;
    test_seed(11);
    for (i = 0; i < N * K; i++) w[i] = (int8_t)test_rand_int(-1, 1);
    TEST_CHECK(bitnet_i2s_pack(w, N, K, scale, i2s, sizeof i2s) == BITNET_OK);
    TEST_CHECK(bitnet_tq_bytes(BITNET_TENSOR_TQ2_0, N, K) == NB * 66 && bitnet_tq_bytes(BITNET_TENSOR_TQ1_0, N, K) == NB * 54);
    TEST_CHECK(bitnet_tq_bytes(BITNET_TENSOR_TQ2_0, N, 128) == 0 && bitnet_tq_bytes(BITNET_TENSOR_I2_S, N, K) == 0);
    for (t = 0; t < 2; t++) {
        const bitnet_tensor_type ty = t ? BITNET_TENSOR_TQ1_0 : BITNET_TENSOR_TQ2_0;
        const size_t bb = t ? 54 : 66, tb = NB * bb;
        int ok = 1;
        TEST_CHECK(bitnet_tq_from_i2s(ty, i2s, sizeof i2s, N, K, tq, tb) == BITNET_OK);
        for (b = 0; b < NB; b++) {
            tq_decode_block(t, tq + b * bb, blk);
            ok &= memcmp(blk, w + b * 256, 256) == 0;
            ok &= (tq[b * bb + bb - 2] | tq[b * bb + bb - 1] << 8) == bitnet_fp32_to_fp16(scale);
        }
        TEST_CHECKF(ok, "%s: ggml's decoding disagrees", t ? "TQ1_0" : "TQ2_0");
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb, N, K, i2s2, sizeof i2s2) == BITNET_OK);
        TEST_CHECK(bitnet_i2s_unpack(i2s2, sizeof i2s2, N, K, back, &s2) == BITNET_OK);
        TEST_CHECK(memcmp(w, back, sizeof w) == 0 && s2 == bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(scale)));
        /* block 1's scale 0: its weights are 0, the others keep theirs */
        tq[bb + bb - 2] = 0, tq[bb + bb - 1] = 0x80; /* -0 */
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb, N, K, i2s2, sizeof i2s2) == BITNET_OK);
        TEST_CHECK(bitnet_i2s_unpack(i2s2, sizeof i2s2, N, K, back, &s2) == BITNET_OK);
        for (i = 0, ok = 1; i < N * K; i++) ok &= back[i] == (i / 256 == 1 ? 0 : w[i]);
        TEST_CHECK(ok && s2 == bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(scale)));
        /* block 2 with another scale */
        tq[2 * bb + bb - 2] ^= 1;
        TEST_CHECKF(bitnet_i2s_from_tq(ty, tq, tb, N, K, i2s2, sizeof i2s2) == BITNET_ERR_UNSUPPORTED && strstr(bitnet_last_error(), "block 2"),
                    "%s", bitnet_last_error());
        tq[2 * bb + bb - 2] ^= 1;
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb - 1, N, K, i2s2, sizeof i2s2) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb, N, K, i2s2, sizeof i2s2 - 1) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_tq_from_i2s(ty, i2s, sizeof i2s, N, K, tq, tb - 1) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb, N * 2, K / 2, i2s2, sizeof i2s2) == BITNET_ERR_BAD_SHAPE); /* rows of 1.5 blocks */
        TEST_CHECK(bitnet_i2s_from_tq(ty, tq, tb, N * 3, K / 3, i2s2, sizeof i2s2) == BITNET_OK);            /* rows of one block */
        TEST_CHECK(bitnet_i2s_from_tq(ty, NULL, tb, N, K, i2s2, sizeof i2s2) == BITNET_ERR_NULL_POINTER);
    }
    tq[0] |= 3; /* a TQ2_0 code 3 */
    TEST_CHECK(bitnet_tq_from_i2s(BITNET_TENSOR_TQ2_0, i2s, sizeof i2s, N, K, tq, NB * 66) == BITNET_OK);
    tq[0] |= 3;
    TEST_CHECK(bitnet_i2s_from_tq(BITNET_TENSOR_TQ2_0, tq, NB * 66, N, K, i2s2, sizeof i2s2) == BITNET_ERR_CORRUPT);
    TEST_CHECK(bitnet_i2s_from_tq(BITNET_TENSOR_I2_S, tq, NB * 66, N, K, i2s2, sizeof i2s2) == BITNET_ERR_UNSUPPORTED_TYPE);
}

/* llama.cpp's block types to float32: blocks built element by element from the layout (where each
   element's bits, scale and min live), with random codes, scales and fp16 factors; every output must
   be the formula's float, computed in ggml's order. The same layout read by ggml's own to_float is
   checked on the GPU machine (tools/bitnetcpp_convert_check.sh, EMBD_TYPES). */
static void put_bits(uint8_t *b, int byte, int shift, int width, int v) {
    b[byte] = (uint8_t)((b[byte] & ~(((1 << width) - 1) << shift)) | (v & ((1 << width) - 1)) << shift);
}
static void put_h(uint8_t *b, float f) { uint16_t h = bitnet_fp32_to_fp16(f); b[0] = (uint8_t)h, b[1] = (uint8_t)(h >> 8); }
static void test_dequantize_blocks(void) {
    static const bitnet_tensor_type types[8] = {BITNET_TENSOR_Q4_0, BITNET_TENSOR_Q4_1, BITNET_TENSOR_Q5_0, BITNET_TENSOR_Q5_1,
                                                BITNET_TENSOR_Q8_0, BITNET_TENSOR_Q4_K, BITNET_TENSOR_Q5_K, BITNET_TENSOR_Q6_K};
    static const int blk[8] = {32, 32, 32, 32, 32, 256, 256, 256}, bytes[8] = {18, 20, 22, 24, 34, 144, 176, 210};
    enum { NB = 3 };
    uint8_t b[NB * 210];
    float want[NB * 256], got[NB * 256];
    int t, i, e;
    test_seed(77);
    for (t = 0; t < 8; t++) {
        const bitnet_tensor_type ty = types[t];
        const int n = NB * blk[t];
        uint64_t ne[4] = {(uint64_t)n, 1, 1, 1}, nb = 0;
        memset(b, 0, sizeof b);
        for (i = 0; i < NB; i++) {
            uint8_t *q = b + i * bytes[t];
            const float d = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(test_rand_float(-0.02f, 0.02f)));
            const float m = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(test_rand_float(-0.5f, 0.5f)));
            int sc[16], mn[16], s;
            for (s = 0; s < 16; s++) sc[s] = test_rand_int(0, 63), mn[s] = test_rand_int(0, 63);
            if (ty == BITNET_TENSOR_Q6_K) {
                put_h(q + 208, d);
                for (s = 0; s < 16; s++) sc[s] = test_rand_int(-128, 127), q[192 + s] = (uint8_t)(int8_t)sc[s];
            } else if (ty == BITNET_TENSOR_Q4_K || ty == BITNET_TENSOR_Q5_K) {
                put_h(q, d), put_h(q + 2, m < 0 ? -m : m);
                for (s = 0; s < 8; s++) /* 6-bit scale and min s: low 6 bits of bytes s, s + 4 (s < 4), else nibbles of s + 4, top bits of s - 4, s */
                    if (s < 4) put_bits(q + 4, s, 0, 6, sc[s]), put_bits(q + 4, s + 4, 0, 6, mn[s]);
                    else put_bits(q + 4, s + 4, 0, 4, sc[s]), put_bits(q + 4, s + 4, 4, 4, mn[s]), put_bits(q + 4, s - 4, 6, 2, sc[s] >> 4),
                         put_bits(q + 4, s, 6, 2, mn[s] >> 4);
            } else {
                put_h(q, d);
                if (ty == BITNET_TENSOR_Q4_1 || ty == BITNET_TENSOR_Q5_1) put_h(q + 2, m);
            }
            for (e = 0; e < blk[t]; e++) {
                float *w = want + i * blk[t] + e;
                const float dd = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(d)), mm = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(m));
                int v;
                switch (ty) {
                case BITNET_TENSOR_Q8_0: v = test_rand_int(-128, 127), q[2 + e] = (uint8_t)(int8_t)v, *w = (float)v * dd; break;
                case BITNET_TENSOR_Q4_0: case BITNET_TENSOR_Q4_1: case BITNET_TENSOR_Q5_0: case BITNET_TENSOR_Q5_1: {
                    const int five = ty == BITNET_TENSOR_Q5_0 || ty == BITNET_TENSOR_Q5_1, hm = ty == BITNET_TENSOR_Q4_1 || ty == BITNET_TENSOR_Q5_1;
                    uint8_t *qs = q + (hm ? 4 : 2) + (five ? 4 : 0);
                    v = test_rand_int(0, five ? 31 : 15);
                    put_bits(qs, e % 16, e < 16 ? 0 : 4, 4, v); /* e < 16: low nibble of byte e; else high of e - 16 */
                    if (five) put_bits(q + (hm ? 4 : 2), e / 8, e % 8, 1, v >> 4); /* bit e of qh: the fifth bit */
                    *w = hm ? (float)v * dd + mm : (float)(v - (five ? 16 : 8)) * dd;
                    break;
                }
                case BITNET_TENSOR_Q4_K: case BITNET_TENSOR_Q5_K: {
                    const int five = ty == BITNET_TENSOR_Q5_K, c = e / 64, hi = e % 64 >= 32, l = e % 32;
                    const float dmin = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(mm < 0 ? -mm : mm));
                    v = test_rand_int(0, five ? 31 : 15);
                    put_bits(q + (five ? 48 : 16), 32 * c + l, hi ? 4 : 0, 4, v);
                    if (five) put_bits(q + 16, l, 2 * c + hi, 1, v >> 4);
                    *w = dd * (float)sc[e / 32] * (float)v - dmin * (float)mn[e / 32];
                    break;
                }
                default: { /* Q6_K: half c, quarter j, lane l */
                    const int c = e / 128, j = e % 128 / 32, l = e % 32;
                    v = test_rand_int(0, 63);
                    put_bits(q, 64 * c + l + 32 * (j & 1), 4 * (j >> 1), 4, v);
                    put_bits(q + 128, 32 * c + l, 2 * j, 2, v >> 4);
                    *w = dd * (float)sc[e / 16] * (float)(v - 32);
                }
                }
            }
        }
        memset(got, 0xff, sizeof got); /* poisoned */
        TEST_CHECK(bitnet_tensor_nbytes(ty, ne, &nb) == BITNET_OK && nb == (uint64_t)(NB * bytes[t]));
        TEST_CHECKF(bitnet_dequantize(ty, b, (size_t)NB * bytes[t], got, (size_t)n) == BITNET_OK, "%s", bitnet_last_error());
        for (e = 0; e < n && memcmp(&got[e], &want[e], 4) == 0; e++) {}
        TEST_CHECKF(e == n, "%s element %d: %.9g, want %.9g", bitnet_tensor_type_name(ty), e, (double)got[e % n], (double)want[e % n]);
        TEST_CHECK(bitnet_dequantize(ty, b, (size_t)NB * bytes[t] - 1, got, (size_t)n) == BITNET_ERR_BAD_SIZE);
        TEST_CHECK(bitnet_dequantize(ty, b, sizeof b, got, (size_t)n - 1) == BITNET_ERR_BAD_SHAPE);
    }
    {
        const uint8_t h[4] = {0x00, 0x3c, 0x80, 0x3f}; /* fp16 1.0, 1.0; as BF16 1.0 at [1] */
        TEST_CHECK(bitnet_dequantize(BITNET_TENSOR_F16, h, 4, got, 2) == BITNET_OK && got[0] == 1.0f);
        TEST_CHECK(bitnet_dequantize(BITNET_TENSOR_BF16, h, 4, got, 2) == BITNET_OK && got[1] == 1.0f);
        TEST_CHECK(bitnet_dequantize(BITNET_TENSOR_I2_S, b, sizeof b, got, 128) == BITNET_ERR_UNSUPPORTED_TYPE);
        TEST_CHECK(bitnet_dequantize((bitnet_tensor_type)11, b, sizeof b, got, 256) == BITNET_ERR_UNSUPPORTED_TYPE);
        TEST_CHECK(bitnet_dequantize(BITNET_TENSOR_Q8_0, NULL, 34, got, 32) == BITNET_ERR_NULL_POINTER);
    }
}

int main(void) {
    RUN_TEST(test_result_strings);
    RUN_TEST(test_null_pointers);
    RUN_TEST(test_allocator_hooks);
    RUN_TEST(test_fault_spec);
    RUN_TEST(test_quantize_ternary_hand);
    RUN_TEST(test_quantize_act_hand);
    RUN_TEST(test_i2s_layout_hand);
    RUN_TEST(test_hf_import);
    RUN_TEST(test_tq_convert);
    RUN_TEST(test_dequantize_blocks);
    return test_summary();
}
