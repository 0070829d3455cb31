/* libFuzzer harness for grammars: the bytes up to the first NUL are GBNF (or, starting with '{', a
   JSON schema made a grammar by bitnet_json_schema_to_grammar), the rest a text. Parsing returns a
   grammar or BITNET_ERR_INVALID_ARG; a grammar then matches the text, and on the tiny model's
   vocabulary (tests/data/tiny.gguf, when found) masks it and takes allowed tokens in turn, picked
   by the text's bytes. Seeds: tests/corpus/grammar/. */
#include "../bitnet.h"
#include <stdlib.h>
#include <string.h>

static bitnet_tokenizer *fuzz_tok;
static unsigned char fuzz_allow[4096];
static char fuzz_gbnf[1 << 20];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int loaded;
    const uint8_t *nul = (const uint8_t *)memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const size_t tlen = nul ? size - glen - 1 : 0;
    const char *gbnf = (const char *)data;
    const char *text = (const char *)data + glen + (nul ? 1 : 0);
    bitnet_grammar *g = NULL;
    bitnet_grammar_state *st = NULL;
    bitnet_result r;
    int status;
    size_t i;
    if (!loaded) {
        bitnet_gguf *f = NULL;
        loaded = 1;
        if (bitnet_gguf_open("tests/data/tiny.gguf", &f) == BITNET_OK) bitnet_tokenizer_from_gguf(f, &fuzz_tok);
        bitnet_gguf_close(f);
        if (fuzz_tok && bitnet_tokenizer_vocab_size(fuzz_tok) > (int32_t)sizeof fuzz_allow) abort();
    }
    if (glen && data[0] == '{') { /* a JSON schema: its grammar must parse, or the schema is refused */
        r = bitnet_json_schema_to_grammar((const char *)data, glen, fuzz_gbnf, sizeof fuzz_gbnf, &glen);
        if (r != BITNET_OK) {
            if (r != BITNET_ERR_INVALID_ARG && r != BITNET_ERR_OUT_OF_MEMORY && r != BITNET_ERR_BAD_SIZE) abort();
            return 0;
        }
        gbnf = fuzz_gbnf;
    }
    r = bitnet_grammar_parse(gbnf, glen, &g);
    if (r != BITNET_OK) {
        if (r != BITNET_ERR_INVALID_ARG && r != BITNET_ERR_OUT_OF_MEMORY) abort();
        if (gbnf == fuzz_gbnf) abort(); /* the converter checks its grammar */
        return 0;
    }
    r = bitnet_grammar_match(g, text, tlen, &status);
    if (r != BITNET_OK && r != BITNET_ERR_INVALID_STATE) abort();
    if (r == BITNET_OK && status != -1 && status != 0 && status != 1) abort();
    if (fuzz_tok && bitnet_grammar_state_create(g, fuzz_tok, &st) == BITNET_OK) {
        int32_t stop = 0, n = bitnet_tokenizer_vocab_size(fuzz_tok);
        bitnet_tokenizer_special_ids(fuzz_tok, NULL, &stop, NULL);
        for (i = 0; i < tlen && i < 32; i++) { /* the text's byte picks among the allowed tokens */
            int32_t k, pick = -1, count = 0;
            if (bitnet_grammar_state_allowed(st, &stop, 1, fuzz_allow) != BITNET_OK) break;
            for (k = 0; k < n; k++) count += fuzz_allow[k];
            if (!count) break;
            for (k = 0, count = (unsigned char)text[i] % count; k < n && pick < 0; k++)
                if (fuzz_allow[k] && count-- == 0) pick = k;
            if (bitnet_grammar_state_accept(st, pick, &stop, 1) != BITNET_OK) abort(); /* allowed must be accepted */
            if (pick == stop) break;
        }
    }
    bitnet_grammar_state_free(st);
    bitnet_grammar_free(g);
    return 0;
}
