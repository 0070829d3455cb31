/* libFuzzer harness for the tokenizer: encodes arbitrary bytes (which must decode back to the same
   bytes), decodes arbitrary ids, pre-tokenizes and formats chats. The vocabulary is LLaMA 3's when
   the tiktoken file is found ($BITNET_TIKTOKEN, ../shared/data/llama3-tokenizer.tiktoken), else a
   small built-in byte-level one, under LLaMA 3's pre-tokenizer and under Falcon 3's; and a small
   SentencePiece one. The first input byte picks the operation and its flags. */
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bitnet_tokenizer *tok, *falcon, *spm;

#define FUZZ_REQUIRE(c) do { if (!(c)) { fprintf(stderr, "fuzz_tokenizer: %s failed (%s)\n", #c, bitnet_last_error()); abort(); } } while (0)

/* Bytes -> GPT-2 byte-level string. */
static size_t byte_str(const char *s, char *out) {
    size_t k = 0;
    for (; *s; s++) {
        unsigned b = (unsigned char)*s, j, below = 0;
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        for (j = 0; j < b; j++) below += !((j >= 33 && j <= 126) || (j >= 161 && j <= 172) || j >= 174);
        if (self) { if (b < 128) out[k++] = (char)b; else { out[k++] = (char)(0xC0 | (b >> 6)); out[k++] = (char)(0x80 | (b & 63)); } }
        else { unsigned c = 256 + below; out[k++] = (char)(0xC0 | (c >> 6)); out[k++] = (char)(0x80 | (c & 63)); }
    }
    out[k] = 0;
    return k;
}

static bitnet_tokenizer *small_vocab(bitnet_pretokenizer pre) {
    static const char *const extra[] = {"th", "he", "the", " t", " the", "in", "ing", "aa", "aaaa", " \n", "12", "\xc3\xa9"};
    static const char *const merges[][2] = {{"t", "h"}, {"h", "e"}, {"th", "e"}, {"t", "he"}, {" ", "t"}, {" t", "he"},
                                            {"i", "n"}, {"in", "g"}, {"a", "a"}, {"aa", "aa"}, {" ", "\n"}, {"1", "2"},
                                            {"\xc3", "\xa9"}};
    static const char *const specials[] = {"<|begin_of_text|>", "<|eot_id|>", "<|x|>"};
    enum { NE = sizeof extra / sizeof extra[0], NM = sizeof merges / sizeof merges[0], NS = 3, N = 256 + NE + NS };
    static char text[N][40], mtext[NM][80];
    static bitnet_gguf_str toks[N], ms[NM];
    static int32_t types[N];
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    int i;
    for (i = 0; i < 256; i++) { char s[2] = {(char)i, 0}; if (i == 0) { strcpy(text[0], "\xc4\x80"); } else byte_str(s, text[i]); }
    for (i = 0; i < NE; i++) byte_str(extra[i], text[256 + i]);
    for (i = 0; i < NS; i++) strcpy(text[256 + NE + i], specials[i]);
    for (i = 0; i < N; i++) {
        toks[i].ptr = text[i];
        toks[i].len = strlen(text[i]);
        types[i] = i >= 256 + NE ? 3 : 1;
    }
    for (i = 0; i < NM; i++) {
        char a[40], b[40];
        byte_str(merges[i][0], a);
        byte_str(merges[i][1], b);
        snprintf(mtext[i], sizeof mtext[i], "%s %s", a, b);
        ms[i].ptr = mtext[i];
        ms[i].len = strlen(mtext[i]);
    }
    memset(&d, 0, sizeof d);
    d.tokens = toks; d.n_tokens = N; d.merges = ms; d.n_merges = NM; d.token_types = types;
    d.bos = 256 + NE; d.eos = -1; d.eot = 256 + NE + 1; d.pre = pre;
    FUZZ_REQUIRE(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    return t;
}

static bitnet_tokenizer *llama3_vocab(bitnet_pretokenizer pre) {
    const char *path = getenv("BITNET_TIKTOKEN");
    bitnet_vocab v;
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    FILE *f;
    if (!path || !*path) path = "../shared/data/llama3-tokenizer.tiktoken";
    if (!(f = fopen(path, "rb"))) return NULL;
    fclose(f);
    if (bitnet_vocab_from_tiktoken(path, 256, &v) != BITNET_OK) return NULL;
    memset(&d, 0, sizeof d);
    d.tokens = v.tokens; d.n_tokens = v.n_tokens; d.merges = v.merges; d.n_merges = v.n_merges;
    d.token_types = v.token_types; d.bos = 128000; d.eos = 128001; d.eot = 128009; d.pre = pre;
    FUZZ_REQUIRE(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    bitnet_vocab_free(&v);
    return t;
}

/* SentencePiece: <unk> <s> </s>, the 256 byte tokens, pieces with tied and distinct scores */
static bitnet_tokenizer *spm_vocab(void) {
    static const char *const pieces[] = {"\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a", "\xe2\x96\x81" "ab", "ba", "aab",
                                         "\xc3\xa9", "\xe2\x96\x81\xe2\x96\x81", "<", "s", ">", "<s"};
    enum { NP = sizeof pieces / sizeof pieces[0], N = 259 + NP };
    static char text[N][16];
    static bitnet_gguf_str toks[N];
    static int32_t types[N];
    static float scores[N];
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    int i;
    strcpy(text[0], "<unk>"), strcpy(text[1], "<s>"), strcpy(text[2], "</s>");
    for (i = 0; i < 256; i++) snprintf(text[3 + i], sizeof text[3 + i], "<0x%02X>", i);
    for (i = 0; i < NP; i++) strcpy(text[259 + i], pieces[i]);
    for (i = 0; i < N; i++) {
        toks[i].ptr = text[i], toks[i].len = strlen(text[i]);
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
        scores[i] = i < 259 ? 0.0f : -(float)(i % 5);
    }
    memset(&d, 0, sizeof d);
    d.tokens = toks; d.n_tokens = N; d.token_types = types; d.scores = scores; d.spm = 1;
    d.bos = 1; d.eos = 2; d.eot = -1;
    FUZZ_REQUIRE(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    tok = llama3_vocab(BITNET_PRE_LLAMA3);
    falcon = tok ? llama3_vocab(BITNET_PRE_FALCON3) : NULL;
    if (!tok) tok = small_vocab(BITNET_PRE_LLAMA3), falcon = small_vocab(BITNET_PRE_FALCON3);
    spm = spm_vocab();
    fprintf(stderr, "fuzz_tokenizer: vocabulary of %d tokens\n", (int)bitnet_tokenizer_vocab_size(tok));
    return 0;
}

static void fuzz_encode(bitnet_tokenizer *tok, const char *s, size_t n, int bos, int special) {
    size_t count = 0, count2 = 0, len = 0, plen = 0;
    int32_t *ids;
    char *back;
    const char *bos_text = "";
    bitnet_result r = bitnet_tokenize(tok, s, n, bos, special, NULL, 0, &count);
    FUZZ_REQUIRE(r == (count ? BITNET_ERR_BAD_SIZE : BITNET_OK));
    FUZZ_REQUIRE(count <= n + 1);
    ids = (int32_t *)malloc((count + 1) * sizeof(int32_t));
    FUZZ_REQUIRE(ids != NULL);
    FUZZ_REQUIRE(bitnet_tokenize(tok, s, n, bos, special, ids, count, &count2) == BITNET_OK && count2 == count);
    if (bos) FUZZ_REQUIRE(bitnet_token_piece(tok, ids[0], &bos_text, &plen) == BITNET_OK);
    back = (char *)malloc(n + plen + 1);
    FUZZ_REQUIRE(back != NULL);
    FUZZ_REQUIRE(bitnet_detokenize(tok, ids, count, back, n + plen + 1, &len) == BITNET_OK);
    FUZZ_REQUIRE(len == n + plen && memcmp(back, bos_text, plen) == 0 && memcmp(back + plen, s, n) == 0);
    free(back);
    free(ids);
}

/* SentencePiece: at most bitnet_tokenize_bound ids; text that is valid UTF-8 without U+2581, encoded
   without specials, decodes to " " + text. */
static void fuzz_encode_spm(const char *s, size_t n, int bos, int special) {
    size_t count = 0, count2 = 0, len = 0, i = 0, cap;
    int32_t *ids;
    char *back;
    int plain = !special;
    bitnet_result r = bitnet_tokenize(spm, s, n, bos, special, NULL, 0, &count);
    FUZZ_REQUIRE(r == (count ? BITNET_ERR_BAD_SIZE : BITNET_OK) && count <= bitnet_tokenize_bound(spm, n));
    ids = (int32_t *)malloc((count + 1) * sizeof(int32_t));
    FUZZ_REQUIRE(ids != NULL && bitnet_tokenize(spm, s, n, bos, special, ids, count, &count2) == BITNET_OK && count2 == count);
    cap = 8 * count + 2;
    back = (char *)malloc(cap);
    FUZZ_REQUIRE(back != NULL && bitnet_detokenize(spm, ids + (bos != 0), count - (bos != 0), back, cap, &len) == BITNET_OK);
    while (plain && i < n) { /* valid UTF-8 (by lead byte and continuations), no U+2581 */
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0, k;
        if (!l || i + l > n || (l == 3 && c == 0xE2 && (unsigned char)s[i + 1] == 0x96 && (unsigned char)s[i + 2] == 0x81)) plain = 0;
        for (k = 1; plain && k < l; k++) plain = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        i += l ? l : 1;
    }
    if (plain && n) FUZZ_REQUIRE(len == n + 1 && back[0] == ' ' && memcmp(back + 1, s, n) == 0);
    free(back);
    free(ids);
}

static void fuzz_decode(const unsigned char *p, size_t n) {
    size_t k = n / 4, i, len = 0;
    int32_t *ids = (int32_t *)malloc((k + 1) * sizeof(int32_t));
    int valid = 1;
    char buf[4096];
    bitnet_result r;
    FUZZ_REQUIRE(ids != NULL);
    for (i = 0; i < k; i++) {
        uint32_t v = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
        if (p[4 * i + 3] < 0xF0) v %= (uint32_t)bitnet_tokenizer_vocab_size(tok) + 8; /* mostly in range */
        ids[i] = (int32_t)v;
        valid &= ids[i] >= 0 && ids[i] < bitnet_tokenizer_vocab_size(tok);
    }
    r = bitnet_detokenize(tok, ids, k, buf, sizeof buf, &len);
    if (!valid) FUZZ_REQUIRE(r == BITNET_ERR_BAD_TOKEN);
    else FUZZ_REQUIRE(r == (len < sizeof buf ? BITNET_OK : BITNET_ERR_BAD_SIZE));
    free(ids);
}

static void fuzz_pretokenize(bitnet_pretokenizer pre, const char *s, size_t n) {
    size_t count = 0, i;
    size_t *ends;
    bitnet_result r = bitnet_pretokenize(pre, s, n, NULL, 0, &count);
    FUZZ_REQUIRE(r == (count ? BITNET_ERR_BAD_SIZE : BITNET_OK) && count <= n);
    ends = (size_t *)malloc((count + 1) * sizeof(size_t));
    FUZZ_REQUIRE(ends != NULL && bitnet_pretokenize(pre, s, n, ends, count, &count) == BITNET_OK);
    for (i = 0; i < count; i++) FUZZ_REQUIRE(ends[i] > (i ? ends[i - 1] : 0) && ends[i] <= n);
    FUZZ_REQUIRE(count == 0 || ends[count - 1] == n);
    free(ends);
}

static void fuzz_chat(const char *s, size_t n, int flags) {
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const bitnet_chat_template tmpl = (bitnet_chat_template)(1 + (n ? (unsigned char)s[0] % 3 : 0)); /* (by the first byte) */
    bitnet_chat_message m[4];
    char *copy = (char *)malloc(n + 1), *p;
    size_t k = 0, len = 0, len2 = 0;
    bitnet_result r;
    FUZZ_REQUIRE(copy != NULL);
    memcpy(copy, s, n);
    copy[n] = 0;
    for (p = copy; k < 4; k++) { /* NUL-separated contents */
        m[k].role = roles[(flags >> (2 * k)) & 3];
        m[k].content = p;
        p += strlen(p);
        if (p < copy + n) p++;
    }
    r = bitnet_chat_format(tmpl, m, 4, flags & 1, NULL, 0, &len);
    if (r != BITNET_ERR_INVALID_ARG) {
        char *buf = (char *)malloc(len + 1);
        FUZZ_REQUIRE(r == BITNET_ERR_BAD_SIZE && buf != NULL);
        FUZZ_REQUIRE(bitnet_chat_format(tmpl, m, 4, flags & 1, buf, len + 1, &len2) == BITNET_OK && len2 == len && strlen(buf) <= len);
        fuzz_encode(tok, buf, len, 0, 1);
        free(buf);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data + 1;
    size_t n = size ? size - 1 : 0;
    int mode;
    if (size == 0) return 0;
    mode = data[0];
    switch (mode & 3) {
    case 0:
        if (mode & 16) fuzz_encode_spm(s, n, (mode >> 2) & 1, (mode >> 3) & 1);
        else fuzz_encode(mode & 32 ? falcon : tok, s, n, (mode >> 2) & 1, (mode >> 3) & 1);
        break;
    case 1: fuzz_decode(data + 1, n); break;
    case 2: fuzz_pretokenize(mode & 4 ? BITNET_PRE_FALCON3 : BITNET_PRE_LLAMA3, s, n); break;
    default: fuzz_chat(s, n, mode >> 2); break;
    }
    return 0;
}
