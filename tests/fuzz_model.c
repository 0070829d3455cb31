/* libFuzzer harness for model loading and the forward pass: an arbitrary GGUF image through
   bitnet_model_load (tensor types and shapes, conversions, the tokenizer from metadata), and when it
   loads, a session of a few positions that tokenizes a short text, evaluates it, samples two tokens,
   discards one and reads its state back into itself. Weights may hold NaN and infinities; every call
   must still return. The CPU backend, or the GPU with BITNET_FUZZ_BACKEND=cuda (tools/fuzz_replay.c
   runs a corpus so on the GPU machine). Seeds: tests/corpus/model/ (the one-layer models of
   tests/corpus/gguf/, whose tokenizers are not byte-level, and tests/data/tiny.gguf). A crash,
   sanitizer report, leak or inconsistent answer (__builtin_trap) is a finding: fix it and add the
   input to tests/test_hostile.c. */
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bitnet_backend backend = BITNET_BACKEND_CPU;
static int print; /* BITNET_FUZZ_PRINT=1: a digest of the prompt's logits, to compare the backends */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *b = getenv("BITNET_FUZZ_BACKEND"); /* cuda: the GPU forward (tools/fuzz_replay.c) */
    (void)argc, (void)argv;
    if (b && !strcmp(b, "cuda")) backend = BITNET_BACKEND_CUDA;
    print = getenv("BITNET_FUZZ_PRINT") != NULL;
    bitnet_set_num_threads(1); /* one core a harness: make fuzz runs them side by side */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char text[] = "ab a<|eot_id|>b";
    bitnet_model_desc desc;
    bitnet_session_desc sd;
    bitnet_model_info info;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    const bitnet_tokenizer *tok;
    int32_t ids[16];
    size_t n = 0, i;
    float *logits;
    memset(&desc, 0, sizeof desc);
    desc.data = data, desc.size = size, desc.backend = backend;
    if (bitnet_model_load(&desc, &m) != BITNET_OK) return 0;
    if (bitnet_model_get_info(m, &info) != BITNET_OK || info.n_vocab <= 0 || info.backend != backend)
        __builtin_trap();
    tok = bitnet_model_tokenizer(m);
    if (tok && bitnet_tokenize(tok, text, sizeof text - 1, 1, 1, ids, 16, &n) == BITNET_OK) {
        char buf[256];
        size_t len;
        for (i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= info.n_vocab) __builtin_trap();
        bitnet_detokenize(tok, ids, n, buf, sizeof buf, &len);
    }
    if (n == 0) ids[0] = 0, ids[1] = info.n_vocab - 1, n = 2; /* no tokenizer: the vocabulary's ends */
    if (n > 4) n = 4;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 8;
    logits = (float *)malloc((size_t)info.n_vocab * sizeof(float));
    if (logits && bitnet_session_create(m, &sd, &s) == BITNET_OK) {
        if (bitnet_session_eval(s, ids, n, logits, 0) == BITNET_OK) { /* a prompt, two sampled tokens, a discard */
            bitnet_generate_params gp;
            int32_t out[2];
            if (bitnet_session_pos(s) != (int32_t)n) __builtin_trap();
            if (print) { /* FNV-1a of the logits' bits, and the first largest (NaN never is) */
                uint64_t h = 1469598103934665603ull;
                uint32_t u;
                int32_t best = 0;
                for (i = 0; i < (size_t)info.n_vocab; i++) {
                    memcpy(&u, logits + i, 4);
                    h = (h ^ u) * 1099511628211ull;
                    if (logits[i] > logits[best] || logits[best] != logits[best]) best = (int32_t)i;
                }
                printf("logits %016llx argmax %d\n", (unsigned long long)h, (int)best);
            }
            memset(&gp, 0, sizeof gp);
            gp.sampler.temperature = 0.8f, gp.sampler.top_k = 40, gp.sampler.top_p = 0.95f, gp.sampler.min_p = 0.05f;
            gp.sampler.repeat_penalty = 1.1f, gp.sampler.seed = 1, gp.max_tokens = 2;
            if (bitnet_generate(s, NULL, 0, &gp, out, 2, NULL) == BITNET_OK && bitnet_session_pos(s) >= 2)
                bitnet_session_discard(s, 0, 1);
            { /* the session's state read back into it: the same text, and the same bytes again */
                const size_t sz = bitnet_session_state_size(s);
                const int32_t pos = bitnet_session_pos(s);
                unsigned char *a = (unsigned char *)malloc(sz), *b = (unsigned char *)malloc(sz);
                if (a && b && bitnet_session_state_get(s, a, sz) == BITNET_OK) {
                    if (bitnet_session_state_set(s, a, sz) != BITNET_OK || bitnet_session_pos(s) != pos ||
                        bitnet_session_state_get(s, b, sz) != BITNET_OK || memcmp(a, b, sz) != 0)
                        __builtin_trap();
                }
                free(a), free(b);
            }
        }
        bitnet_session_free(s);
    }
    free(logits);
    bitnet_model_free(m);
    return 0;
}
