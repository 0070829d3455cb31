/* Grammars (GBNF): the parser's refusals, texts matched against hand-worked grammars, hostile
   grammar text, and generation held to a grammar on the tiny model: the text follows the grammar,
   and the tokens are those of a loop that masks the vocabulary (bitnet_grammar_state_allowed) and
   calls bitnet_sample, for every kind of sampler. */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>
#include <regex.h>
#include <unistd.h>

static bitnet_grammar *parse(const char *text) {
    bitnet_grammar *g = NULL;
    bitnet_result r = bitnet_grammar_parse(text, strlen(text), &g);
    TEST_CHECKF(r == BITNET_OK, "%s: %s", text, bitnet_last_error());
    return g;
}
/* -1 not a start of a sentence, 0 a start only, 1 a sentence; -2 an error */
static int match(const bitnet_grammar *g, const char *text) {
    int st = 9;
    return bitnet_grammar_match(g, text, strlen(text), &st) == BITNET_OK ? st : -2;
}

static void test_match_table(void) {
    static const struct { const char *grammar, *text; int want; } cases[] = {
        {"root ::= \"yes\" | \"no\"", "yes", 1},
        {"root ::= \"yes\" | \"no\"", "n", 0},
        {"root ::= \"yes\" | \"no\"", "", 0},
        {"root ::= \"yes\" | \"no\"", "yess", -1},
        {"root ::= \"yes\" | \"no\"", "maybe", -1},
        {"root ::= [0-9]+", "", 0},
        {"root ::= [0-9]+", "0123456789", 1},
        {"root ::= [0-9]+", "12a", -1},
        {"root ::= [0-9]*", "", 1},
        {"root ::= \"a\"? \"b\"", "b", 1},
        {"root ::= \"a\"? \"b\"", "ab", 1},
        {"root ::= \"a\"? \"b\"", "aab", -1},
        {"root ::= [a-c]{3}", "abc", 1},
        {"root ::= [a-c]{3}", "ab", 0},
        {"root ::= [a-c]{3}", "abca", -1},
        {"root ::= \"x\"{2,}", "x", 0},
        {"root ::= \"x\"{2,}", "xxxxxxx", 1},
        {"root ::= \"x\"{0,2} \"y\"", "y", 1},
        {"root ::= \"x\"{0,2} \"y\"", "xxy", 1},
        {"root ::= \"x\"{0,2} \"y\"", "xxxy", -1},
        {"root ::= (\"ab\" | \"cd\")+ \"!\"", "abcdab!", 1},
        {"root ::= (\"ab\" | \"cd\")+ \"!\"", "ac", -1},
        {"root ::= \"(\" root \")\" | \"x\"", "(((x)))", 1},
        {"root ::= \"(\" root \")\" | \"x\"", "(((x))", 0},
        {"root ::= \"(\" root \")\" | \"x\"", "((x)))", -1},
        {"root ::= [^\"\\\\]* \"\\\"\"", "it's \xc3\xa9t\xc3\xa9\"", 1},
        {"root ::= [^\"\\\\]* \"\\\"\"", "a\\b\"", -1},
        {"root ::= . .", "\xe2\x82\xac\xf0\x9f\x98\x80", 1},    /* two characters of 3 and 4 bytes */
        {"root ::= . .", "\xe2\x82", 0},                         /* inside the first */
        {"root ::= .", "\xc0\xaf", -1},                          /* an overlong '/' */
        {"root ::= \"/\"", "\xe0\x80\xaf", -1},                   /* another */
        {"root ::= .", "\xf0\x80\x81", -1},                      /* the start of a third */
        {"root ::= .", "\xed\xa0\x80", -1},                      /* a surrogate */
        {"root ::= .", "\xf4\x90\x80\x80", -1},                  /* past U+10FFFF */
        {"root ::= [\\u00e0-\\u00fc]+", "\xc3\xa0\xc3\xbc", 1},
        {"root ::= [\\u00e0-\\u00fc]+", "\xc3\xbd", -1},
        {"root ::= [\\u00e0-\\u00fc]+", "\xc3", 0},
        {"root ::= [\\u00e0-\\u00fc]+", "\xc4", -1},             /* no character of the class starts so */
        {"root ::= \"\\x41\\u0042\\U00000043\\n\\t\"", "ABC\n\t", 1},
        {"root ::= a b\na ::= \"1\" # one\n# a comment line\n\nb ::=\n  \"2\" |\n  \"3\"\n", "13", 1},
        {"root ::= (\n  \"a\"\n  | \"b\"\n)", "b", 1},
        {"root ::= [-a]+ [\\]\\-]", "-a-]", 1},
        {"root ::= \"\"", "", 1},
        {"root ::= []", "", 0},                                  /* a class of nothing: never whole */
        {"root ::= item (\",\" item)*\nitem ::= [a-z]+", "ab,c,def", 1},
        {"root ::= item (\",\" item)*\nitem ::= [a-z]+", "ab,,c", -1},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bitnet_grammar *g = parse(cases[i].grammar);
        int got;
        if (!g) continue;
        got = match(g, cases[i].text);
        TEST_CHECKF(got == cases[i].want, "case %zu: %s on \"%s\": %d, want %d", i, cases[i].grammar, cases[i].text, got, cases[i].want);
        bitnet_grammar_free(g);
    }
}

static void test_json_grammar(void) {
    static const char *const good[] = {"{}", "{\"a\": 1}", "{\"a\": [1, -2.5e3, \"x\\n\\u00e9\", {\"b\": null}], \"c\": true}",
                                       "{\n\t\"k\": \"\xe2\x82\xac\"\n}"};
    static const char *const bad[] = {"{\"a\": 01}", "{\"a\" 1}", "[1]", "{\"a\": tru}", "{\"a\": \"\x01\"}", "{,}"};
    size_t i, n = 0;
    unsigned char buf[4096];
    bitnet_grammar *g = NULL;
    FILE *f = fopen("examples/grammars/json.gbnf", "rb");
    if (!f) TEST_SKIP("examples/grammars/json.gbnf not found");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    TEST_CHECKF(bitnet_grammar_parse((const char *)buf, n, &g) == BITNET_OK, "%s", bitnet_last_error());
    if (!g) return;
    for (i = 0; i < sizeof good / sizeof good[0]; i++) TEST_CHECKF(match(g, good[i]) == 1, "%s", good[i]);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) TEST_CHECKF(match(g, bad[i]) == -1, "%s", bad[i]);
    TEST_CHECK(match(g, "{\"a\": [1, ") == 0);
    bitnet_grammar_free(g);
}

static void test_parse_errors(void) {
    static const struct { const char *grammar, *msg; } cases[] = {
        {"root ::= x", "rule 'x' is used but not defined"},
        {"a ::= \"a\"", "no rule named 'root'"},
        {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' can reach itself"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"y\"? a", "can reach itself"},       /* through something empty */
        {"root ::= (\"a\"?)*", "a group or repetition in rule 'root' can reach itself"},
        {"root ::= \"abc", "line 1, column 14: a string without its closing '\"'"},
        {"root ::= [abc", "without its closing ']'"},
        {"root ::= [z-a]", "end is below its start"},
        {"root ::= \"\\q\"", "an unknown escape"},
        {"root ::= \"\\u12\"", "a bad \\x, \\u or \\U escape"},
        {"root ::= \"\\U00110000\"", "a bad \\x, \\u or \\U escape"},
        {"root ::= \"a\"{1001}", "a repetition count (0 to 1000)"},
        {"root ::= \"a\"{3,2}", "a bad upper repetition count"},
        {"root ::= \"a\"{2", "'}' was expected"},
        {"root ::= (\"a\"", "')' was expected"},
        {"root \"a\"", "'::=' was expected"},
        {"::= \"a\"", "a rule name was expected"},
        {"root ::= \"a\" )", "the end of the line was expected"},
        {"root ::= \"\xff\"", "not UTF-8"},
        {"root ::= \"a\"{0,1000} \"b\"{0,1000} \"c\"{0,1000} \"d\"{0,1000} \"e\"{0,1000}", "more than 4096 rules"},
    };
    size_t i;
    char deep[400];
    bitnet_grammar *g = (bitnet_grammar *)&g;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bitnet_result r = bitnet_grammar_parse(cases[i].grammar, strlen(cases[i].grammar), &g);
        TEST_CHECKF(r == BITNET_ERR_INVALID_ARG && g == NULL && strstr(bitnet_last_error(), cases[i].msg),
                    "case %zu: %s: %d \"%s\"", i, cases[i].grammar, (int)r, bitnet_last_error());
        g = (bitnet_grammar *)&g;
    }
    /* 65 groups deep; 64 parse */
    memset(deep, 0, sizeof deep);
    strcpy(deep, "root ::= ");
    for (i = 0; i < 65; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (i = 0; i < 65; i++) strcat(deep, ")");
    TEST_CHECK(bitnet_grammar_parse(deep, strlen(deep), &g) == BITNET_ERR_INVALID_ARG && strstr(bitnet_last_error(), "64 deep"));
    TEST_CHECK(bitnet_grammar_parse(deep + 1, strlen(deep) - 2, &g) == BITNET_ERR_INVALID_ARG); /* (not "root") */
    memmove(deep + 9, deep + 10, strlen(deep + 10) + 1);
    deep[strlen(deep) - 1] = 0;
    TEST_CHECKF(bitnet_grammar_parse(deep, strlen(deep), &g) == BITNET_OK, "%s", bitnet_last_error());
    if (g) {
        TEST_CHECK(match(g, "a") == 1);
        bitnet_grammar_free(g);
    }
    { /* 1,100 x 1000 elements */
        char *big = (char *)malloc(20000);
        if (big) {
            strcpy(big, "root ::=");
            for (i = 0; i < 1100; i++) strcat(big, " [a]{1000}");
            TEST_CHECK(bitnet_grammar_parse(big, strlen(big), &g) == BITNET_ERR_INVALID_ARG && strstr(bitnet_last_error(), "2^20 elements"));
            free(big);
        }
    }
    TEST_CHECK(bitnet_grammar_parse(NULL, 3, &g) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_grammar_parse("root ::= \"a\"", 12, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_grammar_parse(NULL, 0, &g) == BITNET_ERR_INVALID_ARG); /* (no root) */
    TEST_CHECK(bitnet_grammar_match(NULL, "a", 1, (int *)&i) == BITNET_ERR_NULL_POINTER);
    bitnet_grammar_free(NULL);
}

/* A text nested deeper than the matcher keeps (4096 rules) is an error, not a crash. */
static void test_deep_text(void) {
    bitnet_grammar *g = parse("root ::= \"(\" root \")\" | \"x\"");
    char *text = (char *)malloc(5002);
    int st;
    if (!g || !text) { bitnet_grammar_free(g), free(text); return; }
    memset(text, '(', 5000), text[5000] = 'x', text[5001] = 0;
    TEST_CHECK(bitnet_grammar_match(g, text, 3000, &st) == BITNET_OK && st == 0);
    TEST_CHECK(bitnet_grammar_match(g, text, 5001, &st) == BITNET_ERR_INVALID_STATE && strstr(bitnet_last_error(), "4096 rules deep"));
    bitnet_grammar_free(g);
    free(text);
}

/* Random grammar text and mutations of good grammars: an error or a grammar, never a crash; a
   grammar then matches random text without one. */
/* An ambiguous, nested grammar (found by fuzz_grammar in CI: 40 s under the sanitizers while stack
   sets deduplicated by a linear scan): each letter can open a root, so a text is in thousands of
   stacks as deep as its nesting. The state loop picks tokens by the text's bytes, as the fuzzer
   does; every call ends OK or with "can be read more than ..." / "open rules" (INVALID_STATE). */
static void test_ambiguous_nesting(void) {
    static const char grammar[] = "root ::= \"(\" root \")\" | [a-z]+ root \")\" | [a-z]+ (\",\" [0-9]{1,3})?";
    static const unsigned char text[] = "((ab,1," "\xb4" "2(" "\x22" "," "\x22" " [0-9]{1,3})?" "\x00" "((ab,1," "\xb4" "2))"; /* the fuzzer's text, a NUL inside */
    bitnet_grammar *g = parse(grammar);
    bitnet_gguf *f = NULL;
    bitnet_tokenizer *tok = NULL;
    bitnet_grammar_state *st = NULL;
    static unsigned char allow[1024];
    int32_t stop = 0, n, k;
    size_t i;
    int steps = 0, refused = 0;
    if (!g || bitnet_gguf_open("tests/data/tiny.gguf", &f) != BITNET_OK || bitnet_tokenizer_from_gguf(f, &tok) != BITNET_OK ||
        bitnet_grammar_state_create(g, tok, &st) != BITNET_OK) {
        TEST_CHECK(0);
    } else {
        n = bitnet_tokenizer_vocab_size(tok);
        bitnet_tokenizer_special_ids(tok, NULL, &stop, NULL);
        for (i = 0; i + 1 < sizeof text && i < 32; i++) {
            int32_t count = 0, pick = -1;
            bitnet_result r = bitnet_grammar_state_allowed(st, &stop, 1, allow);
            if (r != BITNET_OK) {
                TEST_CHECKF(r == BITNET_ERR_INVALID_STATE, "%s", bitnet_last_error());
                refused = 1;
                break;
            }
            for (k = 0; k < n; k++) count += allow[k];
            if (!count) break;
            for (k = 0, count = text[i] % count; k < n && pick < 0; k++)
                if (allow[k] && count-- == 0) pick = k;
            TEST_CHECK(bitnet_grammar_state_accept(st, pick, &stop, 1) == BITNET_OK);
            steps++;
        }
        TEST_CHECK(steps >= 20 && refused); /* it goes deep, then the limits stop it */
    }
    bitnet_grammar_state_free(st);
    bitnet_tokenizer_free(tok);
    bitnet_gguf_close(f);
    bitnet_grammar_free(g);
}

static void test_hostile_grammars(void) {
    static const char *const seeds[] = {
        "root ::= (\"ab\" | [c-f]+)* x{2,4}\nx ::= [^a] | \"\\u00e9\" # c\n",
        "root ::= \"{\" ws (s \":\" ws root)? \"}\" | s\ns ::= \"\\\"\" [^\"]* \"\\\"\"\nws ::= [ \\n]*\n",
    };
    static const char alphabet[] = "root::=()[]{}|*+?.\"\\^-,# \nabx0129u";
    char text[256], probe[16];
    int i, j, ok = 0, st;
    test_seed(7);
    for (i = 0; i < 4000; i++) {
        size_t n;
        bitnet_grammar *g = NULL;
        bitnet_result r;
        if (i & 1) { /* a good grammar with a few bytes changed, cut or added */
            const char *s = seeds[(i >> 1) & 1];
            n = strlen(s);
            memcpy(text, s, n);
            for (j = test_rand_int(1, 3); j > 0; j--) {
                size_t at = (size_t)test_rand_int(0, (int)n - 1);
                int what = test_rand_int(0, 2);
                if (what == 0) text[at] = alphabet[test_rand_int(0, (int)sizeof alphabet - 2)];
                else if (what == 1) n = at + 1;
                else if (n < sizeof text - 1) memmove(text + at + 1, text + at, n - at), text[at] = (char)test_rand_int(1, 255), n++;
            }
        } else { /* "root ::= " and random symbols */
            n = (size_t)test_rand_int(0, 60);
            memcpy(text, "root ::= ", 9);
            for (j = 9; j < (int)n + 9; j++) text[j] = alphabet[test_rand_int(0, (int)sizeof alphabet - 2)];
            n += 9;
        }
        r = bitnet_grammar_parse(text, n, &g);
        TEST_CHECKF(r == BITNET_OK || r == BITNET_ERR_INVALID_ARG, "%d: %s", (int)r, bitnet_last_error());
        if (r != BITNET_OK) continue;
        ok++;
        for (j = 0; j < 8; j++) {
            int k, len = test_rand_int(0, (int)sizeof probe);
            for (k = 0; k < len; k++) probe[k] = alphabet[test_rand_int(0, (int)sizeof alphabet - 2)];
            r = bitnet_grammar_match(g, probe, (size_t)len, &st);
            TEST_CHECK(r == BITNET_OK || r == BITNET_ERR_INVALID_STATE);
        }
        bitnet_grammar_free(g);
    }
    TEST_CHECKF(ok > 100, "only %d of 4000 parsed", ok); /* (the test reaches the matcher) */
}

/* ---- generation on the tiny model ---------------------------------------------------------- */

static bitnet_model *tiny_model(void) {
    bitnet_model_desc md;
    bitnet_model *m = NULL;
    memset(&md, 0, sizeof md);
    md.path = "tests/data/tiny.gguf";
    md.backend = BITNET_BACKEND_CPU;
    if (bitnet_model_load(&md, &m) != BITNET_OK) return NULL;
    return m;
}

typedef struct gen_out { char text[4096]; size_t len; int32_t ids[256]; size_t n; } gen_out;
static int collect(int32_t token, const char *piece, size_t len, void *user) {
    gen_out *o = (gen_out *)user;
    if (o->len + len < sizeof o->text) memcpy(o->text + o->len, piece, len), o->len += len, o->text[o->len] = 0;
    if (o->n < 256) o->ids[o->n++] = token;
    return 0;
}

static const char *const gen_grammars[] = {
    "root ::= \"yes\" | \"no\"",
    "root ::= [0-9]{1,6} (\".\" [0-9]{1,3})?",
    "root ::= \"{\\\"name\\\": \\\"\" [^\"\\\\\\x00-\\x1f]{0,12} \"\\\", \\\"age\\\": \" [1-9] [0-9]? \"}\"",
    "root ::= ([\\u00c0-\\u024f] | [a-z] | \" \")+",
};

/* bitnet_generate under each grammar and sampler: the text is in the grammar; where generation
   ended before max_tokens, it is a whole sentence. */
static void test_generate_follows(void) {
    static const int32_t odd_stops[3] = {-5, 1 << 30, 0};
    bitnet_model *m = tiny_model();
    bitnet_session *s = NULL;
    const bitnet_tokenizer *tk;
    size_t gi, si;
    int32_t prompt[8];
    size_t np = 0;
    if (!m) TEST_SKIP("tests/data/tiny.gguf did not load: %s", bitnet_last_error());
    tk = bitnet_model_tokenizer(m);
    TEST_CHECK(bitnet_session_create(m, NULL, &s) == BITNET_OK);
    TEST_CHECK(bitnet_tokenize(tk, "Hi", 2, 1, 0, prompt, 8, &np) == BITNET_OK);
    for (gi = 0; s && gi < sizeof gen_grammars / sizeof gen_grammars[0]; gi++) {
        bitnet_grammar *g = parse(gen_grammars[gi]);
        for (si = 0; g && si < 4; si++) {
            bitnet_generate_params p;
            gen_out o;
            bitnet_result r;
            memset(&p, 0, sizeof p), memset(&o, 0, sizeof o);
            p.grammar = g, p.on_token = collect, p.user = &o, p.max_tokens = 40;
            p.sampler.seed = 11 + si;
            if (si == 1) p.sampler.temperature = 1.5f, p.sampler.top_k = 40;
            if (si == 2) p.sampler.temperature = 2.0f; /* every allowed token (the whole mask) */
            if (si == 3) p.sampler.temperature = 1.0f, p.sampler.min_p = 0.02f, p.sampler.repeat_penalty = 1.3f;
            if (si == 2) p.stop_tokens = odd_stops, p.n_stop = 3; /* ids outside the vocabulary never come */
            bitnet_session_reset(s);
            r = bitnet_generate(s, prompt, np, &p, NULL, 0, NULL);
            TEST_CHECKF(r == BITNET_OK, "grammar %zu, sampler %zu: %s", gi, si, bitnet_last_error());
            TEST_CHECKF(match(g, o.text) >= 0, "grammar %zu, sampler %zu: \"%s\"", gi, si, o.text);
            if (o.n < 40) TEST_CHECKF(match(g, o.text) == 1, "grammar %zu, sampler %zu: \"%s\" ended early", gi, si, o.text);
            TEST_CHECK(o.len > 0);
            if (gi == 0) /* "yes" or "no" ends the grammar: the last token is not evaluated, as after a stop token */
                TEST_CHECKF((size_t)bitnet_session_pos(s) == np + o.n - 1, "pos %d, %zu + %zu tokens", (int)bitnet_session_pos(s), np, o.n);
        }
        bitnet_grammar_free(g);
    }
    { /* a conversation: each reply follows the grammar, and the second message goes on after the first reply */
        bitnet_grammar *g = parse(gen_grammars[0]);
        bitnet_generate_params p;
        gen_out o;
        int i;
        memset(&p, 0, sizeof p);
        p.grammar = g, p.on_token = collect, p.user = &o, p.sampler.temperature = 1.0f, p.sampler.seed = 3;
        if (s) bitnet_session_reset(s);
        for (i = 0; s && g && i < 3; i++) {
            int32_t before = bitnet_session_pos(s);
            memset(&o, 0, sizeof o);
            TEST_CHECKF(bitnet_chat(s, "user", "Is it?", &p, NULL, 0, NULL) == BITNET_OK, "%s", bitnet_last_error());
            TEST_CHECKF(match(g, o.text) == 1, "reply %d: \"%s\"", i, o.text);
            TEST_CHECK(bitnet_session_pos(s) > before);
        }
        bitnet_grammar_free(g);
    }
    bitnet_session_free(s);
    bitnet_model_free(m);
}

/* The same tokens as a loop of one's own: mask (bitnet_grammar_state_allowed: NaN for the tokens
   it refuses, which bitnet_sample never takes), sample, accept, evaluate. */
static void test_generate_equals_mask(void) {
    bitnet_model *m = tiny_model();
    bitnet_session *s = NULL;
    bitnet_model_info info;
    float *logits = NULL;
    unsigned char *allow = NULL;
    size_t gi, si;
    int32_t prompt[8], stop[2];
    size_t np = 0, n_stop = 0;
    if (!m) TEST_SKIP("tests/data/tiny.gguf did not load: %s", bitnet_last_error());
    TEST_CHECK(bitnet_model_get_info(m, &info) == BITNET_OK);
    TEST_CHECK(bitnet_session_create(m, NULL, &s) == BITNET_OK);
    logits = (float *)malloc((size_t)info.n_vocab * sizeof *logits);
    allow = (unsigned char *)malloc((size_t)info.n_vocab);
    TEST_CHECK(bitnet_tokenize(bitnet_model_tokenizer(m), "Hi", 2, 1, 0, prompt, 8, &np) == BITNET_OK);
    if (info.eos >= 0) stop[n_stop++] = info.eos;
    if (info.eot >= 0) stop[n_stop++] = info.eot;
    for (gi = 0; s && logits && allow && gi < sizeof gen_grammars / sizeof gen_grammars[0]; gi++) {
        bitnet_grammar *g = parse(gen_grammars[gi]);
        for (si = 0; g && si < 7; si++) {
            bitnet_generate_params p;
            bitnet_grammar_state *st = NULL;
            gen_out o;
            uint64_t rng;
            size_t k = 0;
            int32_t tok = -1;
            memset(&p, 0, sizeof p), memset(&o, 0, sizeof o);
            p.grammar = g, p.on_token = collect, p.user = &o, p.max_tokens = 24;
            p.sampler.seed = 100 + si;
            switch (si) {
            case 1: p.sampler.repeat_penalty = 1.5f; break; /* greedy with the penalty */
            case 2: p.sampler.temperature = 1.2f, p.sampler.top_k = 5; break;
            case 3: p.sampler.temperature = 1.2f, p.sampler.min_p = 0.05f; break;
            case 4: p.sampler.temperature = 1.2f, p.sampler.top_p = 0.9f; break;
            case 5: p.sampler.temperature = 1.2f; break;
            case 6: p.sampler.temperature = 0.9f, p.sampler.top_k = 40, p.sampler.top_p = 0.95f, p.sampler.min_p = 0.05f,
                    p.sampler.repeat_penalty = 1.1f; break;
            default: break;
            }
            bitnet_session_reset(s);
            TEST_CHECK(bitnet_generate(s, prompt, np, &p, NULL, 0, NULL) == BITNET_OK);
            /* the loop */
            bitnet_session_reset(s);
            TEST_CHECK(bitnet_grammar_state_create(g, bitnet_model_tokenizer(m), &st) == BITNET_OK);
            rng = bitnet_rng_seed(p.sampler.seed);
            TEST_CHECK(bitnet_session_eval(s, prompt, np, logits, 0) == BITNET_OK);
            for (k = 0; st && k < 24; k++) {
                int32_t i;
                size_t j;
                int is_stop = 0;
                TEST_CHECK(bitnet_grammar_state_allowed(st, stop, n_stop, allow) == BITNET_OK);
                for (i = 0; i < info.n_vocab; i++) if (!allow[i]) logits[i] = NAN;
                TEST_CHECK(bitnet_sample(logits, info.n_vocab, &p.sampler, bitnet_session_tokens(s), (size_t)bitnet_session_pos(s),
                                         &rng, &tok) == BITNET_OK);
                for (j = 0; j < n_stop; j++) is_stop |= tok == stop[j];
                if (is_stop) break;
                TEST_CHECKF(k < o.n && tok == o.ids[k], "grammar %zu, sampler %zu, token %zu: %d against %d", gi, si, k, (int)tok,
                            k < o.n ? (int)o.ids[k] : -1);
                if (k >= o.n || tok != o.ids[k]) break;
                TEST_CHECK(bitnet_grammar_state_accept(st, tok, stop, n_stop) == BITNET_OK);
                TEST_CHECK(bitnet_session_eval(s, &tok, 1, logits, 0) == BITNET_OK);
            }
            TEST_CHECKF(k == o.n, "grammar %zu, sampler %zu: the loop made %zu tokens, bitnet_generate %zu", gi, si, k, o.n);
            bitnet_grammar_state_free(st);
        }
        bitnet_grammar_free(g);
    }
    free(logits), free(allow);
    bitnet_session_free(s);
    bitnet_model_free(m);
}

/* The mask (bitnet_grammar_state_allowed: a trie walk, its memo and its cache of masks) against an
   oracle that knows none of them: token id may come next iff the text so far and its piece are the
   start of a sentence (bitnet_grammar_match from the start); the stop token iff the text is whole;
   other special tokens never. Along random walks of allowed tokens; every token checked, or where
   sample is set that many at random and every allowed one among the first 4096 ids. */
static void mask_oracle(const bitnet_tokenizer *tk, const char *grammar, int steps, int sample, unsigned long long seed) {
    bitnet_grammar *g = parse(grammar);
    bitnet_grammar_state *st = NULL;
    const int32_t nv = bitnet_tokenizer_vocab_size(tk);
    unsigned char *allow = (unsigned char *)malloc((size_t)nv);
    char *text = (char *)malloc(1 << 16);
    size_t len = 0;
    int32_t stop = -1, i;
    int step, bad = 0;
    bitnet_tokenizer_special_ids(tk, NULL, &stop, NULL);
    if (!g || !allow || !text || bitnet_grammar_state_create(g, tk, &st) != BITNET_OK) {
        TEST_CHECK(0);
        goto done;
    }
    test_seed(seed);
    for (step = 0; step < steps && !bad; step++) {
        int32_t pick = -1, n_ok = 0;
        TEST_CHECK(bitnet_grammar_state_allowed(st, &stop, 1, allow) == BITNET_OK);
        for (i = 0; i < nv && bad < 5; i++) {
            const char *p;
            size_t n;
            int want;
            if (sample && i >= 4096 && !allow[i] && test_rand_int(0, nv - 1) >= sample) continue;
            bitnet_token_piece(tk, i, &p, &n);
            if (i == stop) {
                int stt = -9;
                want = bitnet_grammar_match(g, text, len, &stt) == BITNET_OK && stt == 1;
            }
            else {
                unsigned char sp = 0; /* special: its text is not generated under a grammar */
                int32_t one;
                size_t got = 0;
                sp = n == 0 || (bitnet_tokenize(tk, p, n, 0, 1, &one, 1, &got) == BITNET_OK && got == 1 && one == i && n > 2 &&
                                p[0] == '<' && p[n - 1] == '>' && bitnet_tokenize(tk, p, n, 0, 0, &one, 1, &got) != BITNET_OK);
                if (!sp && len + n < (1 << 16)) {
                    int stt = -9;
                    memcpy(text + len, p, n);
                    want = bitnet_grammar_match(g, text, len + n, &stt) == BITNET_OK && stt >= 0;
                } else want = 0;
            }
            if ((allow[i] != 0) != want) {
                TEST_CHECKF(0, "%s, step %d, token %d (%zu bytes): allowed %d, the oracle %d", grammar, step, (int)i, n, allow[i], want);
                bad++;
            }
            if (allow[i] && i != stop && test_rand_int(0, ++n_ok - 1) == 0) pick = i; /* (one allowed token, at random) */
        }
        if (pick < 0) break;
        {
            const char *p;
            size_t n;
            bitnet_token_piece(tk, pick, &p, &n);
            TEST_CHECK(bitnet_grammar_state_accept(st, pick, &stop, 1) == BITNET_OK);
            if (len + n >= (1 << 16)) break;
            memcpy(text + len, p, n), len += n;
        }
    }
done:
    bitnet_grammar_state_free(st);
    bitnet_grammar_free(g);
    free(allow), free(text);
}

static void test_mask_oracle(void) {
    bitnet_model *m = tiny_model();
    size_t gi;
    if (!m) TEST_SKIP("tests/data/tiny.gguf did not load: %s", bitnet_last_error());
    for (gi = 0; gi < sizeof gen_grammars / sizeof gen_grammars[0]; gi++) mask_oracle(bitnet_model_tokenizer(m), gen_grammars[gi], 24, 0, 1 + gi);
    mask_oracle(bitnet_model_tokenizer(m), "root ::= ([^\\x00-\\x7f] | [a-c])+ \"!\"", 40, 0, 9);
    bitnet_model_free(m);
}

/* The same on LLaMA 3's 128,256 tokens (multi-byte pieces, pieces that end inside a character). */
static void test_mask_oracle_llama3(void) {
    static const char *const c[] = {"../shared/data/llama3-tokenizer.tiktoken", "../../shared/data/llama3-tokenizer.tiktoken"};
    const char *path = getenv("BITNET_TIKTOKEN");
    bitnet_vocab v;
    bitnet_tokenizer_desc d;
    bitnet_tokenizer *t = NULL;
    size_t i;
    char *json = NULL;
    FILE *f;
    for (i = 0; (!path || !*path) && i < 2; i++)
        if ((f = fopen(c[i], "rb")) != NULL) fclose(f), path = c[i];
    if (!path || !*path) TEST_SKIP("no llama3-tokenizer.tiktoken (set BITNET_TIKTOKEN or put it in ../shared/data)");
    if (getenv("RUNNER") && *getenv("RUNNER")) TEST_SKIP("LLaMA 3's vocabulary is too slow under RUNNER (the tiny one runs)");
    TEST_CHECK(bitnet_vocab_from_tiktoken(path, 256, &v) == BITNET_OK);
    memset(&d, 0, sizeof d);
    d.tokens = v.tokens, d.n_tokens = v.n_tokens, d.merges = v.merges, d.n_merges = v.n_merges, d.token_types = v.token_types;
    d.bos = 128000, d.eos = 128001, d.eot = 128009;
    TEST_CHECK(bitnet_tokenizer_create(&d, &t) == BITNET_OK);
    bitnet_vocab_free(&v);
    if (!t) return;
    if ((f = fopen("examples/grammars/json.gbnf", "rb")) != NULL) {
        json = (char *)calloc(1, 8192);
        if (json && fread(json, 1, 8191, f) > 0) mask_oracle(t, json, 8, 3000, 5);
        fclose(f);
    }
    mask_oracle(t, gen_grammars[1], 6, 3000, 6);
    mask_oracle(t, "root ::= [\\u00e0-\\u00ff\\u4e00-\\u4e20 ]{1,12} \"\\n\"", 8, 3000, 7);
    free(json);
    bitnet_tokenizer_free(t);
}

static void test_state_errors(void) {
    bitnet_model *m = tiny_model();
    bitnet_grammar *g = parse("root ::= \"ab\"");
    bitnet_grammar_state *st = NULL;
    const bitnet_tokenizer *tk;
    unsigned char allow[1024];
    int32_t a = -1, b = -1, x = -1, stop = 0, i, n_allowed = 0;
    if (!m || !g) { bitnet_grammar_free(g), bitnet_model_free(m); TEST_SKIP("tests/data/tiny.gguf did not load"); }
    tk = bitnet_model_tokenizer(m);
    for (i = 0; i < bitnet_tokenizer_vocab_size(tk); i++) {
        const char *p;
        size_t len;
        bitnet_token_piece(tk, i, &p, &len);
        if (len == 1 && *p == 'a') a = i;
        if (len == 1 && *p == 'b') b = i;
        if (len == 1 && *p == 'x') x = i;
    }
    bitnet_tokenizer_special_ids(tk, NULL, &stop, NULL);
    TEST_CHECK(a >= 0 && b >= 0 && x >= 0 && stop >= 0 && bitnet_tokenizer_vocab_size(tk) <= 1024);
    TEST_CHECK(bitnet_grammar_state_create(NULL, tk, &st) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_grammar_state_create(g, NULL, &st) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_grammar_state_create(g, tk, &st) == BITNET_OK);
    if (st) {
        TEST_CHECK(bitnet_grammar_state_allowed(st, &stop, 1, allow) == BITNET_OK);
        for (i = 0; i < bitnet_tokenizer_vocab_size(tk); i++) n_allowed += allow[i];
        TEST_CHECK(allow[a] && !allow[b] && !allow[stop]); /* "a", or a token that starts "ab" */
        TEST_CHECK(bitnet_grammar_state_accept(st, x, &stop, 1) == BITNET_ERR_INVALID_ARG && strstr(bitnet_last_error(), "does not allow"));
        TEST_CHECK(bitnet_grammar_state_accept(st, stop, &stop, 1) == BITNET_ERR_INVALID_ARG);
        TEST_CHECK(bitnet_grammar_state_accept(st, 1 << 20, &stop, 1) == BITNET_ERR_BAD_TOKEN);
        TEST_CHECK(bitnet_grammar_state_accept(st, a, NULL, 1) == BITNET_ERR_NULL_POINTER);
        TEST_CHECK(bitnet_grammar_state_allowed(st, &stop, 1, NULL) == BITNET_ERR_NULL_POINTER);
        TEST_CHECK(bitnet_grammar_state_accept(st, a, &stop, 1) == BITNET_OK);
        TEST_CHECK(bitnet_grammar_state_accept(st, b, &stop, 1) == BITNET_OK);
        TEST_CHECK(bitnet_grammar_state_allowed(st, &stop, 1, allow) == BITNET_OK);
        for (n_allowed = 0, i = 0; i < bitnet_tokenizer_vocab_size(tk); i++) n_allowed += allow[i];
        TEST_CHECK(n_allowed == 1 && allow[stop]); /* "ab" is whole: only the stop token */
        TEST_CHECK(bitnet_grammar_state_accept(st, stop, &stop, 1) == BITNET_OK);
    }
    bitnet_grammar_state_free(st);
    bitnet_grammar_state_free(NULL);
    bitnet_grammar_free(g);
    bitnet_model_free(m);
}

/* ---- JSON schemas ---- */
static bitnet_grammar *schema_grammar(const char *schema) {
    static char text[1 << 16];
    size_t n = 0;
    bitnet_grammar *g = NULL;
    bitnet_result r = bitnet_json_schema_to_grammar(schema, strlen(schema), text, sizeof text, &n);
    TEST_CHECKF(r == BITNET_OK, "%s: %s", schema, bitnet_last_error());
    if (r != BITNET_OK) return NULL;
    TEST_CHECKF(n == strlen(text), "%s", schema);
    TEST_CHECKF(bitnet_grammar_parse(text, n, &g) == BITNET_OK, "%s: %s", schema, bitnet_last_error());
    return g;
}

static void test_json_schema(void) {
    static const char person[] = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 8}, "
                                 "\"age\": {\"type\": \"integer\"}, \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\\\"q\"]}, "
                                 "\"minItems\": 1}}, \"required\": [\"name\", \"age\"]}";
    static const char optional[] = "{\"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": \"null\"}, "
                                   "\"c\": {\"const\": [1, {\"x\": \"\\u00e9\"}]}}}";
    static const char tree[] = "{\"$ref\": \"#/$defs/node\", \"$defs\": {\"node\": {\"type\": \"object\", \"properties\": "
                               "{\"v\": {\"type\": \"number\"}, \"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, "
                               "\"required\": [\"v\"]}}}";
    static const char misc[] = "{\"anyOf\": [{\"type\": [\"integer\", \"null\"]}, {\"type\": \"array\", \"prefixItems\": "
                               "[{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}, {\"enum\": [1.5, true, \"x\"]}]}, "
                               "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"integer\"}}, {\"type\": \"array\", "
                               "\"items\": {\"type\": \"boolean\"}, \"minItems\": 0, \"maxItems\": 2}]}";
    static const struct { const char *schema, *text; int want; } cases[] = {
        {person, "{\"name\": \"Bo\", \"age\": 42}", 1},
        {person, "{\"name\":\"Bo\",\"age\":-7,\"tags\":[\"a\",\"b\\\"q\"]}", 1},
        {person, "{\n  \"name\": \"Bo\",\n  \"age\": 0\n}", 1},
        {person, "{\"name\": \"Bo\", \"age\": 42", 0},
        {person, "{\"age\": 42}", -1},                               /* a required property missing */
        {person, "{\"name\": \"Bo\", \"age\": 4.5}", -1},             /* not an integer */
        {person, "{\"name\": \"Bo\", \"age\": 007}", -1},             /* leading zeros */
        {person, "{\"name\": \"Bo\", \"age\": 4, \"x\": 1}", -1},      /* no other names */
        {person, "{\"name\": \"Bo\", \"age\": 4, \"tags\": []}", -1},  /* minItems */
        {person, "{\"name\": \"Bo\", \"age\": 4, \"tags\": [\"c\"]}", -1}, /* enum */
        {person, "{\"name\": \"123456789\", \"age\": 4}", -1},         /* maxLength 8 */
        {person, "{\"age\": 4, \"name\": \"Bo\"}", -1},                /* the properties' order */
        {person, "{\"name\":  \"Bo\", \"age\": 4}", -1},               /* two spaces */
        {optional, "{}", 1},
        {optional, "{\"b\": null}", 1},
        {optional, "{\"a\": false, \"c\": [1,{\"x\":\"\xc3\xa9\"}]}", 1},
        {optional, "{\"c\": [1,{\"x\":\"\xc3\xa9\"}], \"a\": true}", -1},
        {optional, "{\"a\": true,}", -1},
        {optional, "{, \"b\": null}", -1},
        {tree, "{\"v\": 1, \"kids\": [{\"v\": 2.5e3}, {\"v\": -3, \"kids\": []}]}", 1},
        {tree, "{\"v\": 1, \"kids\": [{\"kids\": []}]}", -1},
        {misc, "null", 1},
        {misc, "-12", 1},
        {misc, "[\"ab\", 1.5]", 1},
        {misc, "[\"abc\", true]", 1},
        {misc, "[\"a\", true]", -1},
        {misc, "[\"abcd\", true]", -1},
        {misc, "[\"ab\", 2]", -1},
        {misc, "{\"any\": 1, \"key\": 2}", 1},
        {misc, "{\"any\": \"1\"}", -1},
        {misc, "[]", 1},
        {misc, "[true, false]", 1},
        {misc, "[true, false, true]", -1},
        {"{}", "{\"free\": [1, {\"x\": null}], \"y\": \"z\"}", 1},
        {"true", "[1, 2, \"three\"]", 1},
        {"{\"type\": \"object\", \"additionalProperties\": false}", "{}", 1},
        {"{\"type\": \"object\", \"additionalProperties\": false}", "{\"a\": 1}", -1},
        {"{\"type\": \"string\", \"format\": \"email\"}", "\"not an address\"", 1}, /* a format not read */
        {"{\"type\": \"string\", \"format\": \"date\"}", "\"2026-11-29\"", 1},
        {"{\"type\": \"string\", \"format\": \"date\"}", "\"2026-11-32\"", -1},
        {"{\"type\": \"string\", \"format\": \"date\"}", "\"not a date\"", -1},
        {"{\"type\": \"string\", \"format\": \"time\"}", "\"13:40:00.123+01:00\"", 1},
        {"{\"type\": \"string\", \"format\": \"time\"}", "\"24:00:00Z\"", -1},
        {"{\"type\": \"string\", \"format\": \"date-time\"}", "\"2026-11-29T13:40:00Z\"", 1},
        {"{\"type\": \"string\", \"format\": \"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"", 1},
        {"{\"type\": \"string\", \"format\": \"uuid\"}", "\"123e4567-e89b-12d3-a456-42661417400\"", -1},
        /* patterns: the string's JSON text matches, escapes and all */
        {"{\"type\": \"string\", \"pattern\": \"^a\\\"b\\\\\\\\c$\"}", "\"a\\\"b\\\\c\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^a\\\"b\\\\\\\\c$\"}", "\"a\"b\\c\"", -1},
        {"{\"type\": \"string\", \"pattern\": \"\\\\d+\"}", "\"xx12yy\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"\\\\d+\"}", "\"xxyy\"", -1},
        {"{\"type\": \"string\", \"pattern\": \"^\\\\s$\"}", "\"\\t\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^\\\\s$\"}", "\"\t\"", -1}, /* a raw tab is no JSON */
        {"{\"type\": \"string\", \"pattern\": \"^.$\"}", "\"\\\"\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^.$\"}", "\"\xc3\xa9\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^.$\"}", "\"\\n\"", -1},
        {"{\"type\": \"string\", \"pattern\": \"^[^a]$\"}", "\"\\\\\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^[\\\\w.-]+@(?:x|y)\\\\.org$\"}", "\"a.b-c_9@y.org\"", 1},
        {"{\"type\": \"string\", \"pattern\": \"^[\\\\w.-]+@(?:x|y)\\\\.org$\"}", "\"a@z.org\"", -1},
        {"{\"type\": \"string\", \"pattern\": \"^\\\\u00e9{2}$\"}", "\"\xc3\xa9\xc3\xa9\"", 1},
        {"{\"const\": \"a\\\\b\\n\"}", "\"a\\\\b\\n\"", 1},
        {"{\"const\": \"a\\\\b\\n\"}", "\"a\\b\\n\"", -1},
    };
    static const struct { const char *schema, *msg; } bad[] = {
        {"{\"type\": \"string\", \"pattern\": \"(?=a)\"}", "JSON schema at '/': pattern: lookaround"},
        {"{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", "\\1 is not supported"},
        {"{\"type\": \"string\", \"pattern\": \"a\\\\b\"}", "\\b is not supported"},
        {"{\"type\": \"string\", \"pattern\": \"a{2,1}\"}", "a bad {m,n}"},
        {"{\"type\": \"string\", \"pattern\": \"a{x}\"}", "no quantifier"},
        {"{\"type\": \"string\", \"pattern\": \"(a\"}", "a '(' without its ')'"},
        {"{\"type\": \"string\", \"pattern\": \"a)\"}", "a ')' without its '('"},
        {"{\"type\": \"string\", \"pattern\": \"[ab\"}", "a '[' without its ']'"},
        {"{\"type\": \"string\", \"pattern\": \"[b-a]\"}", "a range from"},
        {"{\"type\": \"string\", \"pattern\": \"a^b\"}", "inside the pattern"},
        {"{\"type\": \"string\", \"pattern\": \"*a\"}", "repeats nothing"},
        {"{\"type\": \"string\", \"pattern\": \"(a|b?)+\"}", "an unbounded repetition of something that may match nothing"},
        {"{\"type\": \"string\", \"pattern\": \"[^\\\\s\\\\S]\"}", "matches no character"},
        {"{\"type\": \"string\", \"pattern\": 3}", "pattern is not a string"},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", "no integer lies between the minimum 5 and the maximum 4"},
        {"{\"type\": \"integer\", \"exclusiveMinimum\": 4, \"maximum\": 4.5}", "no integer lies between"},
        {"{\"type\": \"integer\", \"minimum\": 1e16}", "past 15 digits"},
        {"{\"type\": \"integer\", \"exclusiveMinimum\": \"x\"}", "exclusiveMinimum is not a number"},
        {"{\"type\": \"thing\"}", "unknown type \"thing\""},
        {"{\"properties\": {\"a\": {\"type\": 3}}}", "JSON schema at '/properties/a': type is not a string or a list"},
        {"{\"properties\": {\"a\": {}}, \"required\": [\"b\"]}", "required names \"b\", which is not among the properties"},
        {"{\"$ref\": \"#/$defs/missing\"}", "$ref \"#/$defs/missing\" does not name a schema"},
        {"{\"$ref\": \"other.json#/x\"}", "does not name a schema in this document"},
        {"{\"allOf\": [{}, {}]}", "allOf of more than one schema is not supported"},
        {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "minItems / maxItems"},
        {"{\"type\": \"array\", \"maxItems\": 5000}", "more than 1000 items"},
        {"{\"type\": \"string\", \"minLength\": -1}", "minLength / maxLength"},
        {"{\"enum\": []}", "enum is not a list of values"},
        {"{\"type\": []}", "type is an empty list"},
        {"false", "a schema is an object (or true)"},
        {"{\"type\": \"object\"", "JSON schema: JSON: unterminated object"},
    };
    size_t i, n = 0;
    char small[8], deep[40 * 12 + 8];
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bitnet_grammar *g = schema_grammar(cases[i].schema);
        int got = g ? match(g, cases[i].text) : -9;
        TEST_CHECKF(got == cases[i].want, "case %zu: %s on %s: %d, want %d", i, cases[i].schema, cases[i].text, got, cases[i].want);
        bitnet_grammar_free(g);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bitnet_result r = bitnet_json_schema_to_grammar(bad[i].schema, strlen(bad[i].schema), NULL, 0, &n);
        TEST_CHECKF(r == BITNET_ERR_INVALID_ARG && strstr(bitnet_last_error(), bad[i].msg), "bad %zu: %s: %s", i, bad[i].schema,
                    bitnet_last_error());
    }
    for (i = 0, deep[0] = 0; i < 40; i++) strcat(deep, "{\"items\": ");
    strcat(deep, "{}");
    for (i = 0; i < 40; i++) strcat(deep, "}");
    TEST_CHECKF(bitnet_json_schema_to_grammar(deep, strlen(deep), NULL, 0, &n) == BITNET_ERR_INVALID_ARG &&
                strstr(bitnet_last_error(), "nested deeper than"), "%s", bitnet_last_error());
    TEST_CHECK(bitnet_json_schema_to_grammar(person, strlen(person), small, sizeof small, &n) == BITNET_ERR_BAD_SIZE && n > 500);
    TEST_CHECK(bitnet_json_schema_to_grammar(person, strlen(person), NULL, 0, NULL) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_json_schema_to_grammar(NULL, 3, NULL, 0, &n) == BITNET_ERR_NULL_POINTER);
    TEST_CHECK(bitnet_json_schema_to_grammar(person, strlen(person), NULL, 5, &n) == BITNET_ERR_NULL_POINTER);
}

/* Integer bounds become digit ranges: every integer from -1100 to 1100, and numbers around each
   power of ten to 15 digits and around the bounds, match exactly when they lie between random
   bounds (either may be absent; inclusive, exclusive, draft 4's boolean form, or fractional). */
static void test_json_schema_int_range(void) {
    static const long long scales[4] = {12, 1000, 1000000, 100000000000000LL};
    int round;
    test_seed(49);
    for (round = 0; round < 160; round++) {
        const long long sc = scales[test_rand_int(0, 3)];
        long long lo = (long long)(test_rand_u64() % (unsigned long long)(2 * sc + 1)) - sc;
        long long hi = lo + (long long)(test_rand_u64() % (unsigned long long)(2 * sc + 1)), extra[64], p = 1, v;
        int has_lo = test_rand_int(0, 3) != 0, has_hi = test_rand_int(0, 3) != 0, form = test_rand_int(0, 3), k, ne = 0, bad = 0;
        char schema[256], text[32];
        size_t n;
        bitnet_grammar *g;
        n = (size_t)snprintf(schema, sizeof schema, "{\"type\": \"integer\"");
        if (has_lo && form == 3) n += (size_t)snprintf(schema + n, sizeof schema - n, ", \"minimum\": %.1f", (double)lo - 0.5);
        else if (has_lo) n += (size_t)snprintf(schema + n, sizeof schema - n, form == 0 ? ", \"minimum\": %lld" : form == 1 ?
                                               ", \"exclusiveMinimum\": %lld" : ", \"minimum\": %lld, \"exclusiveMinimum\": true", form == 0 ? lo : lo - 1);
        if (has_hi && form == 3) n += (size_t)snprintf(schema + n, sizeof schema - n, ", \"maximum\": %.1f", (double)hi + 0.5);
        else if (has_hi) n += (size_t)snprintf(schema + n, sizeof schema - n, form == 0 ? ", \"maximum\": %lld" : form == 1 ?
                                               ", \"exclusiveMaximum\": %lld" : ", \"maximum\": %lld, \"exclusiveMaximum\": true", form == 0 ? hi : hi + 1);
        snprintf(schema + n, sizeof schema - n, "}");
        if (!(g = schema_grammar(schema))) continue;
        for (k = 1; k <= 15; k++, p *= 10) extra[ne++] = p * 10 - 1, extra[ne++] = p * 10 - (k < 15 ? 0 : 1), extra[ne++] = -(p * 10 - 1);
        extra[ne++] = lo - 1, extra[ne++] = lo, extra[ne++] = lo + 1, extra[ne++] = hi - 1, extra[ne++] = hi, extra[ne++] = hi + 1;
        for (k = -1100; k < 1100 + ne; k++) {
            int want, got;
            v = k < 1100 ? k : extra[k - 1100];
            if (v <= -1000000000000000LL || v >= 1000000000000000LL) continue;
            snprintf(text, sizeof text, "%lld", v);
            want = (!has_lo || v >= lo) && (!has_hi || v <= hi);
            got = match(g, text) == 1;
            if (got != want && bad++ < 3) TEST_CHECKF(0, "%s: %s matches %d, want %d", schema, text, got, want);
        }
        bitnet_grammar_free(g);
    }
}

/* Random regular expressions over a, b and c against POSIX's regexec (extended syntax: for these
   constructs the same strings match): a string's JSON text matches the schema's grammar exactly
   when the expression is found in the string, anchored or not. */
static void rx_gen(char *out, size_t *n, int depth, int top) {
    int alts = 1 + (test_rand_int(0, 2) == 0), a;
    for (a = 0; a < alts; a++) {
        int atoms = test_rand_int(1, 3), t;
        if (a) out[(*n)++] = '|';
        if (top && test_rand_int(0, 1)) out[(*n)++] = '^';
        for (t = 0; t < atoms; t++) {
            int kind = test_rand_int(0, 9), q = test_rand_int(0, 9), m = test_rand_int(0, 2);
            if (kind < 4) out[(*n)++] = "abc"[test_rand_int(0, 2)];
            else if (kind < 6) *n += (size_t)sprintf(out + *n, "%s", test_rand_int(0, 1) ? "[ab]" : test_rand_int(0, 1) ? "[^a]" : "[b-c]");
            else if (kind < 7) out[(*n)++] = '.';
            else if (depth < 2) out[(*n)++] = '(', rx_gen(out, n, depth + 1, 0), out[(*n)++] = ')';
            else out[(*n)++] = 'a';
            if (q == 0) out[(*n)++] = '*';
            else if (q == 1) out[(*n)++] = '+';
            else if (q == 2) out[(*n)++] = '?';
            else if (q == 3) *n += (size_t)sprintf(out + *n, "{%d}", m);
            else if (q == 4) *n += (size_t)sprintf(out + *n, "{%d,}", m);
            else if (q == 5) *n += (size_t)sprintf(out + *n, "{%d,%d}", m, m + test_rand_int(0, 2));
        }
        if (top && test_rand_int(0, 1)) out[(*n)++] = '$';
    }
    out[*n] = 0;
}
static void test_json_schema_pattern(void) {
    int round, checked = 0, refused = 0;
    test_seed(4949);
    for (round = 0; round < 300; round++) {
        char rx[512], schema[600], text[16], quoted[20];
        size_t n = 0;
        int s, bad = 0;
        regex_t re;
        bitnet_grammar *g;
        rx_gen(rx, &n, 0, 1);
        snprintf(schema, sizeof schema, "{\"type\": \"string\", \"pattern\": \"%s\"}", rx);
        if (regcomp(&re, rx, REG_EXTENDED | REG_NOSUB) != 0) continue;
        if (bitnet_json_schema_to_grammar(schema, strlen(schema), NULL, 0, &n) == BITNET_ERR_INVALID_ARG &&
            strstr(bitnet_last_error(), "an unbounded repetition of something that may match nothing")) { /* as the grammar refuses */
            refused++;
            regfree(&re);
            continue;
        }
        if ((g = schema_grammar(schema)) != NULL) {
            for (s = 0; s < 60; s++) {
                int len = test_rand_int(0, 6), c, want, got;
                for (c = 0; c < len; c++) text[c] = "abcd"[test_rand_int(0, 3)];
                text[len] = 0;
                snprintf(quoted, sizeof quoted, "\"%s\"", text);
                want = regexec(&re, text, 0, NULL, 0) == 0;
                got = match(g, quoted) == 1;
                checked++;
                if (got != want && bad++ < 3) TEST_CHECKF(0, "/%s/ on \"%s\": grammar %d, regexec %d", rx, text, got, want);
            }
            bitnet_grammar_free(g);
        }
        regfree(&re);
    }
    TEST_CHECKF(checked > 12000 && refused < 80, "%d strings checked, %d expressions refused", checked, refused);
}

/* Generation under a schema's grammar ends in a whole JSON text that the schema accepts. */
static void test_json_schema_generate(void) {
    static const char schema[] = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, "
                                 "\"age\": {\"type\": \"integer\"}, \"pets\": {\"type\": \"array\", \"items\": {\"enum\": [\"cat\", \"dog\"]}, "
                                 "\"maxItems\": 3}}, \"required\": [\"name\", \"age\"]}";
    bitnet_model *m = tiny_model();
    bitnet_session *s = NULL;
    bitnet_grammar *g = schema_grammar(schema);
    int32_t prompt[8];
    size_t np = 0, si;
    if (!m || !g) { bitnet_grammar_free(g), bitnet_model_free(m); TEST_SKIP("tests/data/tiny.gguf did not load"); }
    TEST_CHECK(bitnet_session_create(m, NULL, &s) == BITNET_OK);
    TEST_CHECK(bitnet_tokenize(bitnet_model_tokenizer(m), "JSON:", 5, 1, 0, prompt, 8, &np) == BITNET_OK);
    for (si = 0; s && si < 3; si++) {
        bitnet_generate_params p;
        gen_out o;
        memset(&p, 0, sizeof p), memset(&o, 0, sizeof o);
        p.grammar = g, p.on_token = collect, p.user = &o, p.max_tokens = 250;
        p.sampler.seed = 5 + si, p.sampler.temperature = si ? 0.7f : 0.0f;
        bitnet_session_reset(s);
        TEST_CHECKF(bitnet_generate(s, prompt, np, &p, NULL, 0, NULL) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECKF(o.n < 250 && match(g, o.text) == 1 && o.text[0] == '{' && strstr(o.text, "\"name\"") && strstr(o.text, "\"age\""),
                    "sampler %zu: %s", si, o.text);
    }
    bitnet_session_free(s);
    bitnet_grammar_free(g);
    bitnet_model_free(m);
}

/* bitnet run --grammar / --grammar-file on the tiny model; a bad grammar is a clear error. */
static void test_cli_grammar(void) {
    const char *build = getenv("BUILD"), *runner = getenv("RUNNER"), *d = getenv("TMPDIR");
    char bin[512], out[600], err[600], cmd[2048];
    unsigned char text[4096];
    size_t n;
    FILE *f;
    bitnet_grammar *g = parse("root ::= [0-9]+ \" apples\"");
    if (runner && *runner) { bitnet_grammar_free(g); TEST_SKIP("the CLI is not run under RUNNER"); }
    snprintf(bin, sizeof bin, "%s/bitnet", build && *build ? build : "build");
    if (access(bin, X_OK) != 0) { bitnet_grammar_free(g); TEST_SKIP("%s not built", bin); }
    snprintf(out, sizeof out, "%s/bitnet_test_grammar_%d.out", d && *d ? d : "/tmp", (int)getpid());
    snprintf(err, sizeof err, "%s/bitnet_test_grammar_%d.err", d && *d ? d : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -t 1 --seed 2 -n 30 -p Count "
             "--grammar 'root ::= [0-9]+ \" apples\"' > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) == 0);
    f = fopen(out, "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    while (n && text[n - 1] == '\n') n--; /* (run ends with a newline) */
    text[n] = 0;
    TEST_CHECKF(g && match(g, (const char *)text) >= 0 && n > 0, "\"%s\"", (const char *)text);
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -n 4 -p x --grammar 'root ::= nope' > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) != 0);
    f = fopen(err, "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    TEST_CHECKF(strstr((const char *)text, "rule 'nope' is used but not defined") != NULL, "%s", (const char *)text);
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -n 4 -p x --grammar-file examples/grammars/json.gbnf "
             "> %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) == 0);
    f = fopen(out, "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    TEST_CHECK(n > 0 && text[0] == '{');
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -n 4 -p x --grammar-file /nonexistent.gbnf > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) != 0);
    /* -j: a JSON schema; the whole reply is a JSON object with both fields */
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf --backend cpu -t 1 --seed 4 -n 200 -p Person -j '{\"type\": \"object\", "
             "\"properties\": {\"n\": {\"type\": \"string\", \"maxLength\": 5}, \"k\": {\"type\": \"boolean\"}}, "
             "\"required\": [\"n\", \"k\"]}' > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) == 0);
    f = fopen(out, "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    while (n && text[n - 1] == '\n') n--;
    text[n] = 0;
    {
        bitnet_grammar *gj = schema_grammar("{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"string\", \"maxLength\": 5}, "
                                            "\"k\": {\"type\": \"boolean\"}}, \"required\": [\"n\", \"k\"]}");
        TEST_CHECKF(gj && match(gj, (const char *)text) == 1, "\"%s\"", (const char *)text);
        bitnet_grammar_free(gj);
    }
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -n 4 -p x -j '{\"type\": \"string\", \"pattern\": \"(?=a)\"}' > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) != 0);
    f = fopen(err, "rb");
    n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    TEST_CHECKF(strstr((const char *)text, "pattern: lookaround and named groups are not supported") != NULL, "%s", (const char *)text);
    snprintf(cmd, sizeof cmd, "%s run -m tests/data/tiny.gguf -n 4 -p x -j '{}' --grammar 'root ::= \"a\"' > %s 2>%s", bin, out, err);
    TEST_CHECK(system(cmd) != 0);
    remove(out), remove(err);
    bitnet_grammar_free(g);
}


int main(void) {
    RUN_TEST(test_match_table);
    RUN_TEST(test_json_grammar);
    RUN_TEST(test_parse_errors);
    RUN_TEST(test_deep_text);
    RUN_TEST(test_hostile_grammars);
    RUN_TEST(test_ambiguous_nesting);
    RUN_TEST(test_generate_follows);
    RUN_TEST(test_generate_equals_mask);
    RUN_TEST(test_mask_oracle);
    RUN_TEST(test_mask_oracle_llama3);
    RUN_TEST(test_state_errors);
    RUN_TEST(test_cli_grammar);
    RUN_TEST(test_json_schema);
    RUN_TEST(test_json_schema_int_range);
    RUN_TEST(test_json_schema_pattern);
    RUN_TEST(test_json_schema_generate);
    return test_summary();
}
