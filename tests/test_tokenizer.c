/* Tokenizer: hand-worked BPE vectors on a tiny vocabulary, pre-tokenizer splits on tricky text,
   round trips on random UTF-8 and random bytes, special tokens, errors, allocation faults, the chat
   format, and known LLaMA 3 ids (computed with tiktoken) when the tiktoken file is present. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <time.h>

/* ---- a tiny byte-level vocabulary: the 256 bytes (id = byte), then extra tokens and specials ---- */

/* GPT-2's byte alphabet, written out independently of the library: printable Latin-1 maps to
   itself, the 68 other bytes to U+0100 onwards in byte order. */
static size_t gpt2_str(const char *bytes, size_t n, char *out) {
    size_t i, k = 0;
    for (i = 0; i < n; i++) {
        unsigned b = (unsigned char)bytes[i], c, j, below = 0;
        int self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        for (j = 0; j < b; j++) below += !((j >= 33 && j <= 126) || (j >= 161 && j <= 172) || j >= 174);
        c = self ? b : 256 + below;
        if (c < 0x80) out[k++] = (char)c;
        else { out[k++] = (char)(0xC0 | (c >> 6)); out[k++] = (char)(0x80 | (c & 0x3F)); }
    }
    out[k] = 0;
    return k;
}

#define MAXV 300
typedef struct tiny {
    char text[MAXV][48];
    bitnet_gguf_str tokens[MAXV], merges[MAXV];
    char merge_text[MAXV][100];
    int32_t types[MAXV];
    int n_tokens, n_merges;
} tiny;

static int tiny_add(tiny *v, const char *bytes, int type) {
    int id = v->n_tokens++;
    if (type == 3) strcpy(v->text[id], bytes);
    else gpt2_str(bytes, strlen(bytes), v->text[id]);
    v->tokens[id].ptr = v->text[id];
    v->tokens[id].len = strlen(v->text[id]);
    v->types[id] = type;
    return id;
}
/* A merge of two byte strings (the merged token must have been added). */
static void tiny_merge(tiny *v, const char *a, const char *b) {
    char ga[48], gb[48];
    int m = v->n_merges++;
    gpt2_str(a, strlen(a), ga);
    gpt2_str(b, strlen(b), gb);
    snprintf(v->merge_text[m], sizeof v->merge_text[m], "%s %s", ga, gb);
    v->merges[m].ptr = v->merge_text[m];
    v->merges[m].len = strlen(v->merge_text[m]);
}
static void tiny_init(tiny *v) {
    int b;
    memset(v, 0, sizeof *v);
    for (b = 0; b < 256; b++) {
        char s[2];
        s[0] = (char)b;
        s[1] = 0;
        gpt2_str(s, 1, v->text[b]);
        v->tokens[b].ptr = v->text[b];
        v->tokens[b].len = strlen(v->text[b]); /* byte 0 maps to U+0100: no embedded NUL */
        v->types[b] = 1;
    }
    v->n_tokens = 256;
}
static bitnet_tokenizer_desc tiny_desc(const tiny *v, int32_t bos, int32_t eos, int32_t eot) {
    bitnet_tokenizer_desc d;
    memset(&d, 0, sizeof d);
    d.tokens = v->tokens;
    d.n_tokens = (uint64_t)v->n_tokens;
    d.merges = v->merges;
    d.n_merges = (uint64_t)v->n_merges;
    d.token_types = v->types;
    d.bos = bos;
    d.eos = eos;
    d.eot = eot;
    return d;
}

/* The small vocabulary most tests use. */
enum { T_HE = 256, T_SP_T, T_SP_THE, T_THE, T_CA, T_CAT, T_AA, T_AB, T_BC, T_ABC, T_CD, T_BOS, T_EOT, T_DC, T_COUNT };
static tiny V;
static bitnet_tokenizer *small_tok(void) {
    static bitnet_tokenizer *t;
    bitnet_tokenizer_desc d;
    if (t) return t;
    tiny_init(&V);
    tiny_add(&V, "he", 1); tiny_add(&V, " t", 1); tiny_add(&V, " the", 1); tiny_add(&V, "the", 1);
    tiny_add(&V, "ca", 1); tiny_add(&V, "cat", 1); tiny_add(&V, "aa", 1); tiny_add(&V, "ab", 1);
    tiny_add(&V, "bc", 1); tiny_add(&V, "abc", 1); tiny_add(&V, "cd", 1);
    tiny_add(&V, "<|begin_of_text|>", 3); tiny_add(&V, "<|eot_id|>", 3);
    tiny_add(&V, "dc", 1); /* no merge makes it */
    /* ranks: */
    tiny_merge(&V, "h", "e");     /* 0 */
    tiny_merge(&V, " ", "t");     /* 1 */
    tiny_merge(&V, " t", "he");   /* 2 */
    tiny_merge(&V, "t", "he");    /* 3 */
    tiny_merge(&V, "c", "a");     /* 4 */
    tiny_merge(&V, "ca", "t");    /* 5 */
    tiny_merge(&V, "a", "a");     /* 6 */
    tiny_merge(&V, "a", "b");     /* 7 */
    tiny_merge(&V, "b", "c");     /* 8 */
    tiny_merge(&V, "a", "bc");    /* 9: abc's first merge */
    tiny_merge(&V, "c", "d");     /* 10 */
    tiny_merge(&V, "ab", "c");    /* 11: abc again, later; it still ranks as abc (9) */
    d = tiny_desc(&V, T_BOS, -1, -1);
    if (bitnet_tokenizer_create(&d, &t) != BITNET_OK) {
        fprintf(stderr, "small_tok: %s\n", bitnet_last_error());
        return NULL;
    }
    return t;
}

static int encode(const bitnet_tokenizer *t, const char *s, size_t len, int bos, int special, int32_t *ids, size_t cap) {
    size_t n = 0;
    bitnet_result r = bitnet_tokenize(t, s, len, bos, special, ids, cap, &n);
    return r == BITNET_OK ? (int)n : -1;
}
static int same_ids(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof(int32_t)) == 0);
}
#define CHECK_ENC(t, str, bos, special, ...) \
    do { static const int32_t want_[] = {__VA_ARGS__}; int32_t got_[256]; \
        int n_ = encode((t), (str), sizeof(str) - 1, (bos), (special), got_, 256); \
        TEST_CHECKF(same_ids(got_, n_, want_, (int)(sizeof want_ / sizeof want_[0])), "%s: got %d ids, first %d", \
                    #str, n_, n_ > 0 ? got_[0] : -1); } while (0)

static void test_tiny_bpe_hand(void) {
    bitnet_tokenizer *t = small_tok();
    TEST_CHECK(t != NULL);
    if (!t) return;
    TEST_CHECK(bitnet_tokenizer_vocab_size(t) == T_COUNT);
    /* "the" is a whole token: taken as is. " the" likewise. */
    CHECK_ENC(t, "the the", 0, 0, T_THE, T_SP_THE);
    /* " cats": (c,a) rank 4 first, then (ca,t) 5; ' ' and 's' stay bytes. */
    CHECK_ENC(t, " cats", 0, 0, ' ', T_CAT, 's');
    /* "aaa": two equal-rank pairs, the leftmost merges. */
    CHECK_ENC(t, "aaa", 0, 0, T_AA, 'a');
    /* "abcd": (a,b) 7 < (b,c) 8 < (c,d) 10 -> [ab, c, d]; then (ab,c) ranks as abc's first merge (9),
       before (c,d) 10 -> [abc, d]. With plain merge-list ranks (11) it would be [ab, cd]. */
    CHECK_ENC(t, "abcd", 0, 0, T_ABC, 'd');
    /* "xbcd": (b,c) 8 < (c,d) 10 -> [x, bc, d]. */
    CHECK_ENC(t, "xbcd", 0, 0, 'x', T_BC, 'd');
    /* Pieces never merge across: "he" then " the" ; digits 3 at a time; BOS first. */
    CHECK_ENC(t, "he the", 1, 0, T_BOS, T_HE, T_SP_THE);
    CHECK_ENC(t, "12345", 0, 0, '1', '2', '3', '4', '5');
    CHECK_ENC(t, "", 1, 0, T_BOS);
    CHECK_ENC(t, "dc", 0, 0, T_DC); /* a whole token, though no merge makes it (as tiktoken) */
}

/* Falcon 3's pre-tokenizer: every piece through the merges, each ranked by its own place in the
   list (llama.cpp's and Hugging Face's BPE), and single digits. */
static void test_tiny_bpe_falcon3(void) {
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    if (!small_tok()) return;
    d = tiny_desc(&V, T_BOS, -1, -1);
    d.pre = BITNET_PRE_FALCON3;
    TEST_CHECK(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    if (!t) return;
    CHECK_ENC(t, "dc", 0, 0, 'd', 'c');
    /* "abcd": (a,b) 7 -> [ab, c, d]; (c,d) 10 before (ab,c) 11 -> [ab, cd] (LLaMA 3's: [abc, d]). */
    CHECK_ENC(t, "abcd", 0, 0, T_AB, T_CD);
    CHECK_ENC(t, "the cat's", 1, 0, T_BOS, T_THE, ' ', T_CAT, '\'', 's');
    CHECK_ENC(t, "12345", 0, 0, '1', '2', '3', '4', '5');
    bitnet_tokenizer_free(t);
    d.pre = (bitnet_pretokenizer)2;
    TEST_CHECK(bitnet_tokenizer_create(&d, &t) == BITNET_ERR_INVALID_ARG && t == NULL);
}

static void test_tiny_special(void) {
    bitnet_tokenizer *t = small_tok();
    if (!t) { TEST_CHECK(0); return; }
    CHECK_ENC(t, "ab<|eot_id|>cd", 0, 1, T_AB, T_EOT, T_CD);
    CHECK_ENC(t, "<|begin_of_text|><|eot_id|>", 0, 1, T_BOS, T_EOT);
    CHECK_ENC(t, "<|eot_id|", 0, 1, '<', '|', 'e', 'o', 't', '_', 'i', 'd', '|');
    /* Without parse_special the text is plain bytes. */
    CHECK_ENC(t, "<|eot_id|>", 0, 0, '<', '|', 'e', 'o', 't', '_', 'i', 'd', '|', '>');
    {
        const char *p;
        size_t len;
        int32_t eot;
        TEST_CHECK(bitnet_token_piece(t, T_EOT, &p, &len) == BITNET_OK && len == 10 && memcmp(p, "<|eot_id|>", 10) == 0);
        TEST_CHECK(bitnet_token_piece(t, T_SP_THE, &p, &len) == BITNET_OK && len == 4 && memcmp(p, " the", 4) == 0);
        bitnet_tokenizer_special_ids(t, NULL, NULL, &eot);
        TEST_CHECK(eot == T_EOT); /* found by name: the desc gave -1 */
    }
}

/* Expected pieces, separated by '|' in the spec (the texts below hold no '|'). */
static void check_split(bitnet_pretokenizer pre, const char *text, size_t len, const char *spec) {
    size_t ends[64], n = 0, i, start = 0;
    char got[512];
    size_t k = 0;
    TEST_CHECK(bitnet_pretokenize(pre, text, len, ends, 64, &n) == BITNET_OK);
    for (i = 0; i < n && k + (ends[i] - start) + 2 < sizeof got; i++) {
        if (i) got[k++] = '|';
        memcpy(got + k, text + start, ends[i] - start);
        k += ends[i] - start;
        start = ends[i];
    }
    got[k] = 0;
    TEST_CHECKF(strcmp(got, spec) == 0, "split %d of \"%s\": got \"%s\" want \"%s\"", (int)pre, text, got, spec);
}
#define SPLIT(text, spec) check_split(BITNET_PRE_LLAMA3, text, sizeof(text) - 1, spec)
#define SPLIT_F3(text, spec) check_split(BITNET_PRE_FALCON3, text, sizeof(text) - 1, spec)

static void test_pretokenizer_splits(void) {
    SPLIT("I'M HERE, YOU'RE NOT", "I|'M| HERE|,| YOU|'RE| NOT");
    SPLIT("we'll they'Ve don't it'S", "we|'ll| they|'Ve| don|'t| it|'S");
    SPLIT("'\xc5\xbf" "a 'x", "'\xc5\xbf|a| '|x"); /* U+017F folds to s */
    SPLIT("1234567", "123|456|7");
    SPLIT("x1234 5", "x|123|4| |5");
    SPLIT("  \n\n  x", "  \n\n| | x");
    SPLIT("a  b", "a| | b");
    SPLIT("x\t\ty", "x|\t|\ty");
    SPLIT("end   ", "end|   ");
    SPLIT("hello!!!\n\nworld", "hello|!!!\n\n|world");
    SPLIT("a \n b", "a| \n| b");
    SPLIT("\r\n\r\nx", "\r\n\r\n|x");
    SPLIT("x ...\ty", "x| ...|\ty");
    SPLIT("f(x):\n\treturn", "f|(x|):\n|\treturn");
    SPLIT("\xe4\xb8\xad\xe6\x96\x87\xef\xbc\x8c\xe6\xb5\x8b", "\xe4\xb8\xad\xe6\x96\x87|\xef\xbc\x8c\xe6\xb5\x8b"); /* 中文，测 */
    SPLIT("cafe\xcc\x81s", "cafe|\xcc\x81s");                         /* combining acute: not a letter */
    SPLIT("hi \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!", "hi| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!"); /* emoji + tone + ! */
    SPLIT("\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", "\xd9\xa1\xd9\xa2\xd9\xa3|\xd9\xa4");         /* Arabic-Indic digits */
    SPLIT("x\xc2\xa0\xc2\xa0y", "x|\xc2\xa0|\xc2\xa0y");                                    /* NBSP is white space */
    SPLIT("a\xe3\x80\x80", "a|\xe3\x80\x80");                                               /* U+3000 at the end */
    /* Invalid UTF-8: each bad byte is one punctuation-like character. */
    SPLIT("a\xff\xfe" "b", "a|\xff\xfe|b");
    SPLIT(" \xc3(x", " \xc3(|x");
    SPLIT("\xed\xa0\x80z", "\xed\xa0\x80|z"); /* an encoded surrogate: three bad bytes */
    {
        size_t n = 99;
        TEST_CHECK(bitnet_pretokenize(BITNET_PRE_LLAMA3, "", 0, NULL, 0, &n) == BITNET_OK && n == 0);
        TEST_CHECK(bitnet_pretokenize(BITNET_PRE_LLAMA3, "a b", 3, NULL, 0, &n) == BITNET_ERR_BAD_SIZE && n == 2);
        TEST_CHECK(bitnet_pretokenize((bitnet_pretokenizer)7, "a b", 3, NULL, 0, &n) == BITNET_ERR_INVALID_ARG);
        TEST_CHECK(strstr(bitnet_last_error(), "pre-tokenizer 7") != NULL);
    }
}

/* Falcon 3's: punctuation and ASCII symbol runs first (so no contractions), GPT-2's pattern in what
   lies between, then every ASCII digit alone. Worked by hand from llama.cpp's three patterns. */
static void test_pretokenizer_falcon3(void) {
    SPLIT_F3("I'm here, you're 42!", "I|'|m| here|,| you|'|re| |4|2|!");
    SPLIT_F3("a+b=c<d>e^f~g|h`i$j", "a|+|b|=|c|<|d|>|e|^|f|~|g|||h|`|i|$|j");
    SPLIT_F3("hello world!!\n", "hello| world|!!|\n");
    SPLIT_F3("(1, 2)", "(|1|,| |2|)");
    SPLIT_F3("x  \n y", "x|  \n| y");
    SPLIT_F3("x\t\ty", "x|\t|\t|y");              /* LLaMA 3's gives x|\t|\ty */
    SPLIT_F3("end   ", "end|   ");
    SPLIT_F3(" !!", " |!!");
    SPLIT_F3("2024", "2|0|2|4");
    SPLIT_F3("\xc2\xabh\xc3\xa9llo\xc2\xbb", "\xc2\xab|h\xc3\xa9llo|\xc2\xbb"); /* << and >> are \p{P} */
    SPLIT_F3("5\xe2\x82\xac 6", "5|\xe2\x82\xac| |6");        /* the euro sign is a symbol, not \p{P} */
    SPLIT_F3("\xd9\xa1\xd9\xa2\xd9\xa3 x", "\xd9\xa1\xd9\xa2\xd9\xa3| x"); /* Arabic-Indic digits stay a run */
    SPLIT_F3("a\xe3\x80\x82" "b", "a|\xe3\x80\x82|b");           /* the ideographic full stop */
    SPLIT_F3("a\xff" "b", "a|\xff|b");                             /* a bad byte: other, not punctuation */
    {
        size_t n = 99;
        TEST_CHECK(bitnet_pretokenize(BITNET_PRE_FALCON3, "", 0, NULL, 0, &n) == BITNET_OK && n == 0);
    }
}

/* Random UTF-8 (any scalar value) and random bytes survive encode -> decode. */
static void random_text(char *buf, size_t *len, size_t cap, int bytes_only) {
    size_t n = 0;
    while (n + 4 < cap && test_rand_int(0, 40) != 0) {
        uint32_t c;
        int kind = test_rand_int(0, 9);
        if (bytes_only) { buf[n++] = (char)test_rand_int(0, 255); continue; }
        if (kind < 4) c = (uint32_t)test_rand_int(0, 127);
        else if (kind < 6) c = (uint32_t)test_rand_int(0x80, 0x7FF);
        else if (kind < 8) c = (uint32_t)test_rand_int(0x800, 0xFFFF);
        else c = (uint32_t)test_rand_int(0x10000, 0x10FFFF);
        if (c >= 0xD800 && c <= 0xDFFF) c = 'x';
        if (c < 0x80) buf[n++] = (char)c;
        else if (c < 0x800) { buf[n++] = (char)(0xC0 | (c >> 6)); buf[n++] = (char)(0x80 | (c & 63)); }
        else if (c < 0x10000) {
            buf[n++] = (char)(0xE0 | (c >> 12)); buf[n++] = (char)(0x80 | ((c >> 6) & 63)); buf[n++] = (char)(0x80 | (c & 63));
        } else {
            buf[n++] = (char)(0xF0 | (c >> 18)); buf[n++] = (char)(0x80 | ((c >> 12) & 63));
            buf[n++] = (char)(0x80 | ((c >> 6) & 63)); buf[n++] = (char)(0x80 | (c & 63));
        }
    }
    *len = n;
}
static void round_trips(const bitnet_tokenizer *t, int iters) {
    char text[600], back[700];
    int32_t ids[700];
    int it;
    for (it = 0; it < iters; it++) {
        size_t len, n = 0, blen = 0;
        int special = it & 1;
        random_text(text, &len, sizeof text, it % 3 == 0);
        if (it % 5 == 0 && len + 12 < sizeof text) { memcpy(text + len, "<|eot_id|>", 10); len += 10; }
        TEST_CHECK(bitnet_tokenize(t, text, len, 0, special, ids, 700, &n) == BITNET_OK);
        TEST_CHECK(bitnet_detokenize(t, ids, n, back, sizeof back, &blen) == BITNET_OK);
        TEST_CHECKF(blen == len && memcmp(back, text, len) == 0, "round trip %d: %zu bytes back of %zu", it, blen, len);
        if (test__cur_failed) return;
    }
}
static void test_round_trip_tiny(void) {
    bitnet_tokenizer *t = small_tok();
    if (!t) { TEST_CHECK(0); return; }
    test_seed(11);
    round_trips(t, 400);
}

/* A long piece (one run of letters) goes through the heap merge in n log n, and still round-trips. */
static void test_long_piece(void) {
    bitnet_tokenizer *t = small_tok();
    static char text[100001], back[100002];
    static int32_t ids[100001];
    size_t n = 0, blen = 0, i;
    if (!t) { TEST_CHECK(0); return; }
    test_seed(5);
    for (i = 0; i < 100000; i++) text[i] = "abcdeht"[test_rand_int(0, 6)];
    TEST_CHECK(bitnet_tokenize(t, text, 100000, 0, 0, ids, 100001, &n) == BITNET_OK);
    TEST_CHECK(n > 0 && n < 100000);
    TEST_CHECK(bitnet_detokenize(t, ids, n, back, sizeof back, &blen) == BITNET_OK);
    TEST_CHECK(blen == 100000 && memcmp(back, text, blen) == 0);
    memset(text, 'a', 100000); /* "aa" all the way: 50000 equal-rank merges */
    TEST_CHECK(bitnet_tokenize(t, text, 100000, 0, 0, ids, 100001, &n) == BITNET_OK && n == 50000 && ids[0] == T_AA);
}

static void test_errors(void) {
    bitnet_tokenizer *t = small_tok(), *t2 = NULL;
    int32_t ids[4], bad[2] = {1, T_COUNT};
    size_t n = 0;
    char buf[8];
    const char *p;
    tiny v;
    bitnet_tokenizer_desc d;
    if (!t) { TEST_CHECK(0); return; }
    TEST_CHECK(bitnet_tokenize(NULL, "a", 1, 0, 0, ids, 4, &n) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_tokenize(t, NULL, 1, 0, 0, ids, 4, &n) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_tokenize(t, "a", 1, 0, 0, NULL, 4, &n) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_tokenize(t, "a", 1, 0, 0, ids, 4, NULL) == BITNET_ERR_NULL_POINTER);
    /* BOS, x, then ' ' and a letter for each of the four " y"-like pieces (not tokens here). */
    TEST_CHECK(bitnet_tokenize(t, "x y z w v", 9, 1, 0, ids, 4, &n) == BITNET_ERR_BAD_SIZE && n == 10);
    TEST_CHECK(strstr(bitnet_last_error(), "10 tokens") != NULL);
    TEST_CHECK(bitnet_tokenize(t, "x y z w v", 9, 1, 0, NULL, 0, &n) == BITNET_ERR_BAD_SIZE && n == 10);
    TEST_CHECK(bitnet_detokenize(t, bad, 2, buf, sizeof buf, &n) == BITNET_ERR_BAD_TOKEN);
    bad[1] = -1;
    TEST_CHECK(bitnet_detokenize(t, bad, 2, buf, sizeof buf, &n) == BITNET_ERR_BAD_TOKEN);
    bad[0] = bad[1] = T_SP_THE;
    TEST_CHECK(bitnet_detokenize(t, bad, 2, buf, 8, &n) == BITNET_ERR_BAD_SIZE && n == 8);
    TEST_CHECK(bitnet_detokenize(t, bad, 1, buf, 8, &n) == BITNET_OK && n == 4 && strcmp(buf, " the") == 0);
    TEST_CHECK(bitnet_detokenize(t, NULL, 0, buf, 1, &n) == BITNET_OK && n == 0 && buf[0] == 0);
    TEST_CHECK(bitnet_token_piece(t, T_COUNT, &p, &n) == BITNET_ERR_BAD_TOKEN);
    TEST_CHECK(bitnet_token_piece(t, -5, &p, &n) == BITNET_ERR_BAD_TOKEN);
    TEST_CHECK(bitnet_tokenizer_vocab_size(NULL) == 0);
    /* Creation: a missing byte, a merge that joins nothing, ids out of range, no BOS to add. */
    TEST_CHECK(bitnet_tokenizer_create(NULL, &t2) == BITNET_ERR_NULL_POINTER);
    tiny_init(&v);
    d = tiny_desc(&v, -1, -1, -1);
    d.n_tokens = 255;
    TEST_CHECK(bitnet_tokenizer_create(&d, &t2) == BITNET_ERR_BAD_METADATA && t2 == NULL);
    TEST_CHECK(strstr(bitnet_last_error(), "0xff") != NULL);
    tiny_merge(&v, "q", "r"); /* "qr" is not a token */
    d = tiny_desc(&v, -1, -1, -1);
    TEST_CHECK(bitnet_tokenizer_create(&d, &t2) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "merge 0") != NULL);
    v.n_merges = 0;
    d = tiny_desc(&v, 256, -1, -1);
    TEST_CHECK(bitnet_tokenizer_create(&d, &t2) == BITNET_ERR_BAD_METADATA);
    v.text[65][0] = ' '; /* a space is not in the byte-level alphabet */
    d = tiny_desc(&v, -1, -1, -1);
    TEST_CHECK(bitnet_tokenizer_create(&d, &t2) == BITNET_ERR_BAD_METADATA && strstr(bitnet_last_error(), "token 65") != NULL);
    v.text[65][0] = 'A';
    d = tiny_desc(&v, -1, -1, -1);
    TEST_CHECK(bitnet_tokenizer_create(&d, &t2) == BITNET_OK);
    TEST_CHECK(bitnet_tokenize(t2, "a", 1, 1, 0, ids, 4, &n) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(encode(t2, "hi", 2, 0, 1, ids, 4) == 2 && ids[0] == 'h');
    bitnet_tokenizer_free(t2);
    bitnet_tokenizer_free(NULL);
}

/* Every allocation failure is reported and leaks nothing (ASan checks the leaks). */
static void test_alloc_faults(void) {
    bitnet_tokenizer *t = small_tok(), *t2 = NULL;
    bitnet_tokenizer_desc d = tiny_desc(&V, T_BOS, -1, -1);
    int k, created = 0, encoded = 0;
    int32_t ids[256];
    size_t n;
    char text[200];
    if (!t) { TEST_CHECK(0); return; }
    for (k = 1; k < 40 && !created; k++) {
        bitnet_result r;
        bitnet_set_fault("");
        { char spec[32]; snprintf(spec, sizeof spec, "host_alloc:%d", k); TEST_CHECK(bitnet_set_fault(spec) == BITNET_OK); }
        r = bitnet_tokenizer_create(&d, &t2);
        if (r == BITNET_OK) created = 1, bitnet_tokenizer_free(t2);
        else TEST_CHECK(r == BITNET_ERR_OUT_OF_MEMORY && t2 == NULL);
    }
    TEST_CHECK(created);
    memset(text, 'a', sizeof text); /* a piece long enough to need scratch */
    text[50] = 'b';
    for (k = 1; k < 10 && !encoded; k++) {
        bitnet_result r;
        char spec[32];
        snprintf(spec, sizeof spec, "host_alloc:%d", k);
        bitnet_set_fault(spec);
        r = bitnet_tokenize(t, text, sizeof text, 0, 0, ids, 256, &n);
        if (r == BITNET_OK) encoded = 1;
        else TEST_CHECK(r == BITNET_ERR_OUT_OF_MEMORY);
    }
    bitnet_set_fault("");
    TEST_CHECK(encoded && k > 2);
}

static void test_chat_format(void) {
    bitnet_chat_message m[3];
    char buf[512];
    size_t n = 0;
    static const char want[] = "<|begin_of_text|>System: Be brief.<|eot_id|>User: Hey, are you conscious?<|eot_id|>"
                               "Assistant: No.<|eot_id|>Assistant: ";
    m[0].role = "system"; m[0].content = "  Be brief.\n";
    m[1].role = "user"; m[1].content = "Hey, are you conscious?\xe3\x80\x80"; /* U+3000 is trimmed too */
    m[2].role = "assistant"; m[2].content = "No.";
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 3, 1, buf, sizeof buf, &n) == BITNET_OK);
    TEST_CHECKF(n == sizeof want - 1 && strcmp(buf, want) == 0, "got '%s'", buf);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 3, 1, NULL, 0, &n) == BITNET_ERR_BAD_SIZE && n == sizeof want - 1);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 3, 1, buf, sizeof want - 1, &n) == BITNET_ERR_BAD_SIZE);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m + 1, 1, 0, buf, sizeof buf, &n) == BITNET_OK &&
               strcmp(buf, "<|begin_of_text|>User: Hey, are you conscious?<|eot_id|>") == 0);
    m[0].content = " \t ";
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 1, 0, buf, sizeof buf, &n) == BITNET_OK &&
               strcmp(buf, "<|begin_of_text|>System: <|eot_id|>") == 0);
    m[0].role = "tool";
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 1, 0, buf, sizeof buf, &n) == BITNET_ERR_INVALID_ARG);
    m[0].role = NULL;
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, m, 1, 0, buf, sizeof buf, &n) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_BITNET, NULL, 0, 1, buf, sizeof buf, &n) == BITNET_OK &&
               strcmp(buf, "<|begin_of_text|>Assistant: ") == 0);
    TEST_CHECK(bitnet_chat_format((bitnet_chat_template)4, NULL, 0, 1, buf, sizeof buf, &n) == BITNET_ERR_INVALID_ARG);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_AUTO, NULL, 0, 1, buf, sizeof buf, &n) == BITNET_ERR_INVALID_ARG); /* (a model's) */
    /* LLaMA 3's (trimmed) and Falcon 3's (as given, no BOS) */
    m[0].role = "system"; m[0].content = "  Be brief.\n";
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_LLAMA3, m, 3, 1, buf, sizeof buf, &n) == BITNET_OK);
    TEST_CHECKF(strcmp(buf, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                            "<|start_header_id|>user<|end_header_id|>\n\nHey, are you conscious?<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\nNo.<|eot_id|>"
                            "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0, "got '%s'", buf);
    TEST_CHECK(bitnet_chat_format(BITNET_CHAT_FALCON3, m, 3, 1, buf, sizeof buf, &n) == BITNET_OK);
    TEST_CHECKF(strcmp(buf, "<|system|>\n  Be brief.\n\n<|user|>\nHey, are you conscious?\xe3\x80\x80\n<|assistant|>\nNo.\n"
                            "<|assistant|>\n") == 0, "got '%s'", buf);
}

/* ---- bitnet_vocab_from_tiktoken on small files written here ----------------------------------- */

static void temp_path(char *buf, size_t cap, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, cap, "%s/bitnet_test_%s_%lx.tiktoken", dir && *dir ? dir : "/tmp", tag,
             (unsigned long)(size_t)buf ^ (unsigned long)clock());
}
static void b64(const unsigned char *s, size_t n, char *out) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t i, k = 0;
    for (i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        out[k++] = a[v >> 18];
        out[k++] = a[(v >> 12) & 63];
        out[k++] = i + 1 < n ? a[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[k] = 0;
}
/* The 256 bytes in byte order, then extra tokens; a line may be replaced by raw text. */
static int write_tiktoken(const char *path, const char *const *extra, int n_extra, const char *raw_tail) {
    FILE *f = fopen(path, "wb");
    int b;
    char enc[64];
    if (!f) return 0;
    for (b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        b64(&c, 1, enc);
        fprintf(f, "%s %d\n", enc, b);
    }
    for (b = 0; b < n_extra; b++) {
        b64((const unsigned char *)extra[b], strlen(extra[b]), enc);
        fprintf(f, "%s %d\n", enc, 256 + b);
    }
    if (raw_tail) fputs(raw_tail, f);
    fclose(f);
    return 1;
}

static void test_vocab_from_small_tiktoken(void) {
    static const char *const extra[] = {"ab", "bc", "abc", "cd", "abcd"};
    static const char *const want[] = {"a b", "b c", "a bc", "ab c", "c d", "ab cd", "abc d"};
    char path[512];
    bitnet_vocab v;
    bitnet_tokenizer *t = NULL;
    bitnet_tokenizer_desc d;
    int32_t ids[8];
    size_t i;
    int k, ok = 0;
    temp_path(path, sizeof path, "small");
    TEST_CHECK(write_tiktoken(path, extra, 5, NULL));
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 3, &v) == BITNET_OK);
    TEST_CHECK(v.n_tokens == 264 && v.n_merges == 7);
    for (i = 0; i < 7 && i < v.n_merges; i++)
        TEST_CHECKF(v.merges[i].len == strlen(want[i]) && memcmp(v.merges[i].ptr, want[i], strlen(want[i])) == 0,
                    "merge %zu is '%.*s', want '%s'", i, (int)v.merges[i].len, v.merges[i].ptr, want[i]);
    TEST_CHECK(v.tokens[32].len == 2 && memcmp(v.tokens[32].ptr, "\xc4\xa0", 2) == 0); /* ' ' is "Ġ" */
    TEST_CHECK(v.tokens[0].len == 2 && memcmp(v.tokens[0].ptr, "\xc4\x80", 2) == 0);   /* 0x00 is U+0100 */
    TEST_CHECK(v.tokens[262].len == 15 && memcmp(v.tokens[262].ptr, "<|end_of_text|>", 15) == 0 && v.token_types[262] == 3);
    TEST_CHECK(v.tokens[263].len == 28 && memcmp(v.tokens[263].ptr, "<|reserved_special_token_0|>", 28) == 0);
    memset(&d, 0, sizeof d);
    d.tokens = v.tokens; d.n_tokens = v.n_tokens; d.merges = v.merges; d.n_merges = v.n_merges;
    d.token_types = v.token_types; d.bos = 261; d.eos = 262; d.eot = -1;
    TEST_CHECK(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    /* tiktoken on "abcdx": a b c d x -> ab(256) c d x -> abc(258) d x -> abcd(260) x. */
    TEST_CHECK(encode(t, "abcdx", 5, 1, 0, ids, 8) == 3 && ids[0] == 261 && ids[1] == 260 && ids[2] == 'x');
    bitnet_tokenizer_free(t);
    bitnet_vocab_free(&v);
    for (k = 1; k < 30 && !ok; k++) { /* allocation faults: an error, no leak */
        char spec[32];
        bitnet_result r;
        snprintf(spec, sizeof spec, "host_alloc:%d", k);
        bitnet_set_fault(spec);
        r = bitnet_vocab_from_tiktoken(path, 3, &v);
        bitnet_set_fault("");
        if (r == BITNET_OK) ok = 1, bitnet_vocab_free(&v);
        else TEST_CHECK(r == BITNET_ERR_OUT_OF_MEMORY && v.tokens == NULL);
    }
    TEST_CHECK(ok && k > 3);
    remove(path);
}

static void test_vocab_bad_files(void) {
    static const char *const tails[] = {
        "@@@@ 256\n",   /* not base64 */
        "YQ== 5\n",     /* rank 5 again */
        "YQ== 300\n",   /* rank past the count */
        "YQ==\n",       /* no rank */
        "YQ== 256x\n",  /* junk after the rank */
        "YQ= 256\n",    /* bad padding */
    };
    char path[512];
    bitnet_vocab v;
    size_t i;
    temp_path(path, sizeof path, "bad");
    for (i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        TEST_CHECK(write_tiktoken(path, NULL, 0, tails[i]));
        TEST_CHECKF(bitnet_vocab_from_tiktoken(path, 0, &v) == BITNET_ERR_CORRUPT, "tail %zu", i);
    }
    TEST_CHECK(write_tiktoken(path, NULL, 0, "YQ== 256\r\n") && bitnet_vocab_from_tiktoken(path, 0, &v) == BITNET_OK &&
               v.n_tokens == 257); /* CRLF is fine; a duplicate token string is kept (the first wins in lookups) */
    bitnet_vocab_free(&v);
    { FILE *f = fopen(path, "wb"); if (f) fclose(f); }
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 0, &v) == BITNET_ERR_CORRUPT);
    remove(path);
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 0, &v) == BITNET_ERR_IO);
    TEST_CHECK(bitnet_vocab_from_tiktoken(NULL, 0, &v) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, -1, &v) == BITNET_ERR_INVALID_ARG);
}

/* ---- from GGUF metadata ---------------------------------------------------------------------- */

/* Writes the small vocabulary's tokenizer metadata; `what` breaks one thing. */
static int write_tok_gguf(const char *path, int what) {
    bitnet_gguf_writer *w = NULL;
    int ok;
    uint64_t n_tok = (uint64_t)V.n_tokens - (what == 3 ? 1 : 0);
    ok = bitnet_gguf_writer_create(&w) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_str(w, "general.architecture", "bitnet-b1.58") == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", what == 1 ? "bert" : "gpt2") == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_str(w, "tokenizer.ggml.pre", what == 5 ? "falcon3" : "llama-bpe") == BITNET_OK;
    if (what == 2) ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_INT32, V.types, n_tok) == BITNET_OK;
    else ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, V.tokens, n_tok) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.merges", BITNET_GGUF_STRING, V.merges, (uint64_t)V.n_merges) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, V.types, (uint64_t)V.n_tokens) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", what == 4 ? 100000u : (uint32_t)T_BOS) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)T_EOT) == BITNET_OK;
    ok = ok && bitnet_gguf_writer_begin(w, path) == BITNET_OK && bitnet_gguf_writer_finish(w) == BITNET_OK;
    bitnet_gguf_writer_free(w);
    return ok;
}
static bitnet_result tok_from_file(const char *path, bitnet_tokenizer **t) {
    bitnet_gguf *g = NULL;
    bitnet_result r = bitnet_gguf_open(path, &g);
    if (r == BITNET_OK) r = bitnet_tokenizer_from_gguf(g, t);
    bitnet_gguf_close(g);
    return r;
}

static void test_from_gguf(void) {
    static const bitnet_result want[] = {BITNET_OK, BITNET_ERR_UNSUPPORTED, BITNET_ERR_BAD_METADATA, BITNET_ERR_BAD_METADATA,
                                         BITNET_ERR_BAD_METADATA, BITNET_OK};
    bitnet_tokenizer *ref = small_tok(), *falcon = NULL, *t = NULL;
    bitnet_tokenizer_desc d;
    char path[512];
    int what;
    if (!ref) { TEST_CHECK(0); return; }
    d = tiny_desc(&V, T_BOS, -1, -1);
    d.pre = BITNET_PRE_FALCON3;
    TEST_CHECK(bitnet_tokenizer_create(&d, &falcon) == BITNET_OK);
    temp_path(path, sizeof path, "gguf");
    for (what = 0; what < 6 && falcon; what++) {
        bitnet_result r;
        TEST_CHECK(write_tok_gguf(path, what));
        r = tok_from_file(path, &t);
        TEST_CHECKF(r == want[what], "case %d: %s", what, bitnet_last_error());
        if (r != BITNET_OK) { TEST_CHECK(t == NULL); continue; }
        {   /* the same encoder as the one built from arrays */
            static const char text[] = "the cats<|eot_id|> abcd aaa 12345";
            int32_t a[64], b[64], bos, eot;
            const bitnet_tokenizer *same = what == 5 ? falcon : ref; /* 5: tokenizer.ggml.pre "falcon3" */
            int na = encode(same, text, sizeof text - 1, 1, 1, a, 64), nb = encode(t, text, sizeof text - 1, 1, 1, b, 64);
            TEST_CHECK(na > 0 && same_ids(a, na, b, nb));
            TEST_CHECK((what == 5) == !same_ids(a, na, b, encode(ref, text, sizeof text - 1, 1, 1, b, 64)));
            bitnet_tokenizer_special_ids(t, &bos, NULL, &eot);
            TEST_CHECK(bos == T_BOS && eot == T_EOT && bitnet_tokenizer_vocab_size(t) == T_COUNT);
        }
        bitnet_tokenizer_free(t);
        t = NULL;
    }
    remove(path);
    bitnet_tokenizer_free(falcon);
    TEST_CHECK(bitnet_tokenizer_from_gguf(NULL, &t) == BITNET_ERR_NULL_POINTER);
    {   /* the committed tiny model, when present: round trips */
        FILE *f = fopen("tests/data/tiny.gguf", "rb");
        if (f) {
            fclose(f);
            TEST_CHECK(tok_from_file("tests/data/tiny.gguf", &t) == BITNET_OK);
            if (t) { test_seed(3); round_trips(t, 100); }
            bitnet_tokenizer_free(t);
        }
    }
}


/* ---- SentencePiece (tokenizer.ggml.model "llama") --------------------------------------------- */

#define SPM_MAX 400
typedef struct spm_vocab {
    bitnet_gguf_str tok[SPM_MAX];
    char text[SPM_MAX][16];
    float score[SPM_MAX];
    int32_t type[SPM_MAX];
    int n;
} spm_vocab;
static int spm_add(spm_vocab *v, const char *s, float score, int type) {
    size_t n = strlen(s);
    memcpy(v->text[v->n], s, n + 1);
    v->tok[v->n].ptr = v->text[v->n], v->tok[v->n].len = n;
    v->score[v->n] = score, v->type[v->n] = type;
    return v->n++;
}
/* <unk> <s> </s>, the 256 byte tokens when bytes, then pieces (U+2581 spelled \xe2\x96\x81) */
static void spm_init(spm_vocab *v, int bytes) {
    int b;
    v->n = 0;
    spm_add(v, "<unk>", 0, 2), spm_add(v, "<s>", 0, 3), spm_add(v, "</s>", 0, 3);
    for (b = 0; bytes && b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        spm_add(v, hex, 0, 6);
    }
}
static bitnet_tokenizer *spm_tok(const spm_vocab *v, int no_prefix) {
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    memset(&d, 0, sizeof d);
    d.tokens = v->tok, d.n_tokens = (uint64_t)v->n, d.token_types = v->type, d.scores = v->score;
    d.bos = 1, d.eos = 2, d.eot = -1, d.spm = 1, d.no_space_prefix = no_prefix;
    TEST_CHECKF(bitnet_tokenizer_create(&d, &t) == BITNET_OK, "%s", bitnet_last_error());
    return t;
}
static int spm_lookup(const spm_vocab *v, const char *s, size_t n) {
    int i;
    for (i = 0; i < v->n; i++)
        if (v->tok[i].len == n && memcmp(v->tok[i].ptr, s, n) == 0) return i;
    return -1;
}
/* The algorithm written plainly (every round scans every adjacent pair), for comparison. */
static int spm_ref(const spm_vocab *v, const char *text, size_t len, int prefix, int32_t *out) {
    char esc[1200];
    int start[400], n[400], ns = 0, m = 0, i, count = 0;
    size_t k;
    if (prefix) memcpy(esc, "\xe2\x96\x81", 3), m = 3;
    for (k = 0; k < len; k++)
        if (text[k] == ' ') memcpy(esc + m, "\xe2\x96\x81", 3), m += 3;
        else esc[m++] = text[k];
    for (i = 0; i < m; ns++) {
        unsigned char c = (unsigned char)esc[i];
        int l = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        start[ns] = i, n[ns] = l < m - i ? l : m - i, i += n[ns];
    }
    for (;;) {
        int best = -1;
        float bs = 0;
        for (i = 0; i + 1 < ns; i++) {
            int id = spm_lookup(v, esc + start[i], (size_t)(n[i] + n[i + 1]));
            if (id >= 0 && (best < 0 || v->score[id] > bs)) best = i, bs = v->score[id];
        }
        if (best < 0) break;
        n[best] += n[best + 1];
        for (i = best + 1; i + 1 < ns; i++) start[i] = start[i + 1], n[i] = n[i + 1];
        ns--;
    }
    for (i = 0; i < ns; i++) {
        int id = spm_lookup(v, esc + start[i], (size_t)n[i]), j;
        if (id >= 0) { out[count++] = id; continue; }
        for (j = 0; j < n[i]; j++) {
            char hex[8], c = esc[start[i] + j];
            snprintf(hex, sizeof hex, "<0x%02X>", (unsigned char)c);
            id = spm_lookup(v, hex, 6);
            if (id < 0) id = spm_lookup(v, &c, 1);
            out[count++] = id < 0 ? 0 : id;
        }
    }
    return count;
}

#define CHECK_SPM(t, str, bos, special, ...) \
    do { const int32_t want_[] = {__VA_ARGS__}; int32_t got_[256]; \
        int n_ = encode((t), (str), sizeof(str) - 1, (bos), (special), got_, 256); \
        TEST_CHECKF(same_ids(got_, n_, want_, (int)(sizeof want_ / sizeof want_[0])), "%s: got %d ids, first %d", \
                    #str, n_, n_ > 0 ? got_[0] : -1); } while (0)
/* Hand-worked: scores decide, not lengths; byte fallback; the space before the text and after a
   special token; decoding. */
static void test_spm_hand(void) {
    spm_vocab v;
    bitnet_tokenizer *t, *np;
    int a, b, c, s_, ab, bc, sa, sab, abc;
    char back[64];
    size_t blen = 0;
    int32_t ids[32];
    size_t n = 0;
    spm_init(&v, 1);
    s_ = spm_add(&v, "\xe2\x96\x81", -1, 1), a = spm_add(&v, "a", -1, 1), b = spm_add(&v, "b", -1, 1), c = spm_add(&v, "c", -1, 1);
    ab = spm_add(&v, "ab", -3, 1), bc = spm_add(&v, "bc", -2, 1), sa = spm_add(&v, "\xe2\x96\x81" "a", -4, 1);
    sab = spm_add(&v, "\xe2\x96\x81" "ab", -5, 1), abc = spm_add(&v, "abc", -0.5f, 1);
    t = spm_tok(&v, 0), np = spm_tok(&v, 1);
    if (!t || !np) { bitnet_tokenizer_free(t), bitnet_tokenizer_free(np); return; }
    /* "_abc": bc (-2) before ab (-3) and _a (-4), then a + bc = abc (-0.5); _ + abc is no token */
    CHECK_SPM(t, "abc", 0, 0, s_, abc);
    CHECK_SPM(t, "acbc", 0, 0, sa, c, bc);
    /* no prefix: "abc" -> bc first, then a + bc = abc (-0.5) */
    CHECK_SPM(np, "abc", 0, 0, abc);
    CHECK_SPM(np, "ab", 1, 0, 1, ab);
    CHECK_SPM(t, "ab", 0, 0, sab); /* _a (-4) < ab (-3): ab first, then _ + ab = _ab */
    (void)b;
    /* "z" is no token: its byte token <0x7A> (id 3 + 0x7a); "é" two byte tokens */
    CHECK_SPM(np, "z\xc3\xa9", 0, 0, 3 + 0x7a, 3 + 0xc3, 3 + 0xa9);
    /* a special token: the text after it gets a space again */
    CHECK_SPM(t, "a</s>a", 0, 1, sa, 2, sa);
    CHECK_SPM(t, "a</s>a", 0, 0, sa, 3 + '<', 3 + '/', 3 + 's', 3 + '>', a);
    TEST_CHECK(bitnet_tokenize(t, "ab c z\xc3\xa9", 9, 1, 0, ids, 32, &n) == BITNET_OK && ids[0] == 1);
    TEST_CHECK(bitnet_detokenize(t, ids + 1, n - 1, back, sizeof back, &blen) == BITNET_OK);
    TEST_CHECKF(blen == 10 && memcmp(back, " ab c z\xc3\xa9", 10) == 0, "decoded '%s'", back);
    TEST_CHECK(bitnet_detokenize(t, ids, 1, back, sizeof back, &blen) == BITNET_OK && strcmp(back, "<s>") == 0);
    {   /* the bound is met: with no U+2581 token each space, and the one put first, become three byte tokens */
        spm_vocab w;
        bitnet_tokenizer *bt;
        spm_init(&w, 1);
        bt = spm_tok(&w, 0);
        if (bt) {
            TEST_CHECK(bitnet_tokenize(bt, "   ", 3, 1, 0, ids, 32, &n) == BITNET_OK && n == 13 && n == bitnet_tokenize_bound(bt, 3));
            TEST_CHECK(ids[1] == 3 + 0xE2 && ids[2] == 3 + 0x96 && ids[3] == 3 + 0x81);
            TEST_CHECK(bitnet_tokenize_bound(bt, SIZE_MAX / 2) == SIZE_MAX && bitnet_tokenize_bound(NULL, 5) == 6);
        }
        bitnet_tokenizer_free(bt);
    }
    bitnet_tokenizer_free(t), bitnet_tokenizer_free(np);
}

/* Random vocabularies (ties among the scores included) and texts against spm_ref, and round trips. */
static void test_spm_random(void) {
    static const char *const alpha[] = {"a", "b", "c", "\xe2\x96\x81", "\xc3\xa9"};
    int it;
    test_seed(21);
    for (it = 0; it < 40; it++) {
        spm_vocab v;
        bitnet_tokenizer *t;
        int i, j, k;
        spm_init(&v, it % 4 != 3); /* without byte tokens: the unknown token */
        for (k = 0; k < 5; k++) spm_add(&v, alpha[k], (float)test_rand_int(-8, 0), 1);
        while (v.n < 259 + 60) {
            char s[16] = "";
            int len = test_rand_int(1, 4);
            for (k = 0; k < len; k++) strcat(s, alpha[test_rand_int(0, 4)]);
            if (spm_lookup(&v, s, strlen(s)) < 0) spm_add(&v, s, (float)test_rand_int(-8, 0), 1);
        }
        t = spm_tok(&v, it & 1);
        if (!t) return;
        for (j = 0; j < 50; j++) {
            static const char *const units[] = {"a", "b", "c", " ", " ", "z", "\xc3\xa9", "\xff", "\x80"};
            char text[80];
            int32_t got[200], want[200];
            size_t len = 0, n = 0;
            int nw, nu = test_rand_int(1, 30);
            for (i = 0; i < nu; i++) {
                const char *u = units[test_rand_int(0, 8)];
                memcpy(text + len, u, strlen(u)), len += strlen(u);
            }
            nw = spm_ref(&v, text, len, !(it & 1), want);
            TEST_CHECK(bitnet_tokenize(t, text, len, 0, 0, got, 200, &n) == BITNET_OK);
            TEST_CHECKF(same_ids(got, (int)n, want, nw), "vocab %d text %d: %zu ids, the reference %d", it, j, n, nw);
            if (it % 4 != 3 && !memchr(text, 0xff, len) && !memchr(text, 0x80, len)) {
                /* with byte tokens every valid text comes back (an invalid byte may take the next bytes into its
                   character, a space's U+2581 too, as in llama.cpp) */
                char back[200];
                size_t blen = 0, off = (it & 1) ? 0 : 1;
                TEST_CHECK(bitnet_detokenize(t, got, n, back, sizeof back, &blen) == BITNET_OK);
                TEST_CHECKF(blen == len + off && memcmp(back + off, text, len) == 0 && (!off || back[0] == ' '), "round trip: vocab %d text %d: '%.*s' -> '%.*s'", it, j, (int)len, text, (int)blen, back);
            }
            if (test__cur_failed) { bitnet_tokenizer_free(t); return; }
        }
        bitnet_tokenizer_free(t);
    }
}

/* From GGUF metadata: scores, types, add_space_prefix; llama.cpp's BOS 1 / EOS 2 without ids;
   errors. */
static void test_spm_gguf(void) {
    spm_vocab v;
    bitnet_tokenizer *t = NULL, *ref;
    char path[512];
    int what;
    spm_init(&v, 1);
    spm_add(&v, "\xe2\x96\x81" "a", -1, 1), spm_add(&v, "bc", -2, 1), spm_add(&v, "<|eot_id|>", 0, 3);
    ref = spm_tok(&v, 1);
    temp_path(path, sizeof path, "spm");
    for (what = 0; what < 4; what++) { /* 1: a NaN score; 2: scores of the wrong type; 3: no byte coverage */
        bitnet_gguf_writer *w = NULL;
        uint8_t no = 0;
        float sc[SPM_MAX];
        int ok;
        bitnet_result r;
        memcpy(sc, v.score, sizeof sc);
        if (what == 1) sc[5] = NAN;
        ok = bitnet_gguf_writer_create(&w) == BITNET_OK;
        ok = ok && bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama") == BITNET_OK;
        /* 3: the pieces alone (no <unk>, no byte tokens) */
        ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, what == 3 ? v.tok + 259 : v.tok,
                                              (uint64_t)(what == 3 ? v.n - 259 : v.n)) == BITNET_OK;
        if (what != 3) ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, v.type, (uint64_t)v.n) == BITNET_OK;
        if (what == 2) ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.scores", BITNET_GGUF_INT32, v.type, (uint64_t)v.n) == BITNET_OK;
        else if (what != 3) ok = ok && bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.scores", BITNET_GGUF_FLOAT32, sc, (uint64_t)v.n) == BITNET_OK;
        ok = ok && bitnet_gguf_writer_set(w, "tokenizer.ggml.add_space_prefix", BITNET_GGUF_BOOL, &no) == BITNET_OK;
        ok = ok && bitnet_gguf_writer_begin(w, path) == BITNET_OK && bitnet_gguf_writer_finish(w) == BITNET_OK;
        bitnet_gguf_writer_free(w);
        TEST_CHECK(ok);
        r = tok_from_file(path, &t);
        TEST_CHECKF(r == (what ? BITNET_ERR_BAD_METADATA : BITNET_OK), "case %d: %s", what, bitnet_last_error());
        if (r == BITNET_OK && ref) {
            static const char text[] = "abc a<|eot_id|>bc";
            int32_t x[64], y[64], bos, eos, eot;
            int nx = encode(ref, text, sizeof text - 1, 1, 1, x, 64), ny = encode(t, text, sizeof text - 1, 1, 1, y, 64);
            TEST_CHECK(nx > 0 && same_ids(x, nx, y, ny));
            bitnet_tokenizer_special_ids(t, &bos, &eos, &eot);
            TEST_CHECK(bos == 1 && eos == 2 && eot == v.n - 1);
        }
        bitnet_tokenizer_free(t);
        t = NULL;
    }
    remove(path);
    bitnet_tokenizer_free(ref);
}

/* ---- the LLaMA 3 vocabulary (needs ../shared/data/llama3-tokenizer.tiktoken) ---------------- */

static const char *tiktoken_path(void) {
    static const char *const c[] = {"../shared/data/llama3-tokenizer.tiktoken", "../../shared/data/llama3-tokenizer.tiktoken"};
    const char *env = getenv("BITNET_TIKTOKEN");
    FILE *f;
    size_t i;
    if (env && *env) return env;
    for (i = 0; i < sizeof c / sizeof c[0]; i++)
        if ((f = fopen(c[i], "rb")) != NULL) { fclose(f); return c[i]; }
    return NULL;
}
static bitnet_tokenizer *llama3(void) {
    static bitnet_tokenizer *t;
    static int tried;
    bitnet_vocab v;
    bitnet_tokenizer_desc d;
    const char *path = tiktoken_path();
    if (tried || !path) return t;
    tried = 1;
    if (bitnet_vocab_from_tiktoken(path, 256, &v) != BITNET_OK) return NULL;
    memset(&d, 0, sizeof d);
    d.tokens = v.tokens; d.n_tokens = v.n_tokens; d.merges = v.merges; d.n_merges = v.n_merges;
    d.token_types = v.token_types;
    d.bos = 128000; d.eos = 128001; d.eot = -1;
    if (bitnet_tokenizer_create(&d, &t) != BITNET_OK) t = NULL;
    bitnet_vocab_free(&v);
    return t;
}

static void test_llama3_vocab(void) {
    bitnet_vocab v;
    const char *path = tiktoken_path();
    if (!path) TEST_SKIP("no llama3-tokenizer.tiktoken (set BITNET_TIKTOKEN or put it in ../shared/data)");
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 256, &v) == BITNET_OK);
    TEST_CHECK(v.n_tokens == 128256);
    TEST_CHECK(v.n_merges == 280147); /* every split, as in LLaMA 3's tokenizer.json */
    TEST_CHECK(v.merges[0].len == 5 && memcmp(v.merges[0].ptr, "\xc4\xa0 \xc4\xa0", 5) == 0); /* "Ġ Ġ" */
    TEST_CHECK(v.tokens[220].len == 2 && memcmp(v.tokens[220].ptr, "\xc4\xa0", 2) == 0);
    TEST_CHECK(v.tokens[128009].len == 10 && memcmp(v.tokens[128009].ptr, "<|eot_id|>", 10) == 0 && v.token_types[128009] == 3);
    TEST_CHECK(v.tokens[128004].len == 25 && memcmp(v.tokens[128004].ptr, "<|finetune_right_pad_id|>", 25) == 0);
    TEST_CHECK(v.tokens[128255].len == 30 && memcmp(v.tokens[128255].ptr, "<|reserved_special_token_247|>", 30) == 0);
    TEST_CHECK(v.token_types[5] == 1);
    bitnet_vocab_free(&v);
    TEST_CHECK(v.tokens == NULL);
    bitnet_vocab_free(&v); /* twice is fine */
}

/* Ids from tiktoken (LLaMA 3 pattern and ranks, specials allowed). */
static void test_llama3_known_ids(void) {
    bitnet_tokenizer *t = llama3();
    int32_t eot;
    if (!tiktoken_path()) TEST_SKIP("no llama3-tokenizer.tiktoken (set BITNET_TIKTOKEN or put it in ../shared/data)");
    TEST_CHECK(t != NULL);
    if (!t) return;
    CHECK_ENC(t, "Hello, world!", 0, 1, 9906, 11, 1917, 0);
    CHECK_ENC(t, "Hello, world!", 1, 1, 128000, 9906, 11, 1917, 0);
    CHECK_ENC(t, "I'M HERE, YOU'RE NOT", 0, 1, 40, 28703, 19804, 11, 15334, 95253, 4276);
    CHECK_ENC(t, "1234567 apples", 0, 1, 4513, 10961, 22, 41776);
    CHECK_ENC(t, "  \n\n  x", 0, 1, 19124, 220, 865);
    CHECK_ENC(t, "def f(x):\n\treturn x**2\n", 0, 1, 755, 282, 2120, 997, 862, 865, 334, 17, 198);
    CHECK_ENC(t, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88", 0, 1,
              102433, 102158, 16144, 57933, 62903, 71634); /* 日本語のテキスト */
    CHECK_ENC(t, "emoji \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 ok", 0, 1,
              38623, 62904, 102, 102470, 9468, 239, 102, 102470, 9468, 239, 100, 5509);
    CHECK_ENC(t, "na\xc3\xafve caf\xc3\xa9", 0, 1, 3458, 38672, 588, 53050);
    CHECK_ENC(t, "<|begin_of_text|>User: hi<|eot_id|>Assistant: ", 0, 1, 128000, 1502, 25, 15960, 128009, 72803, 25, 220);
    bitnet_tokenizer_special_ids(t, NULL, NULL, &eot);
    TEST_CHECK(eot == 128009);
    test_seed(99);
    round_trips(t, 200);
}

int main(void) {
    RUN_TEST(test_tiny_bpe_hand);
    RUN_TEST(test_tiny_bpe_falcon3);
    RUN_TEST(test_tiny_special);
    RUN_TEST(test_pretokenizer_splits);
    RUN_TEST(test_pretokenizer_falcon3);
    RUN_TEST(test_round_trip_tiny);
    RUN_TEST(test_long_piece);
    RUN_TEST(test_errors);
    RUN_TEST(test_alloc_faults);
    RUN_TEST(test_chat_format);
    RUN_TEST(test_vocab_from_small_tiktoken);
    RUN_TEST(test_vocab_bad_files);
    RUN_TEST(test_from_gguf);
    RUN_TEST(test_spm_hand);
    RUN_TEST(test_spm_random);
    RUN_TEST(test_spm_gguf);
    RUN_TEST(test_llama3_vocab);
    RUN_TEST(test_llama3_known_ids);
    bitnet_tokenizer_free(small_tok());
    bitnet_tokenizer_free(llama3());
    return test_summary();
}
