/* generate: the smallest program that loads a BitNet model and streams tokens.
     build/generate MODEL.gguf ["prompt"] */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>

static int print_token(int32_t token, const char *piece, size_t len, void *user) {
    (void)token, (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0; /* nonzero stops generation */
}

int main(int argc, char **argv) {
    const char *prompt = argc > 2 ? argv[2] : "The capital of France is";
    bitnet_model_desc desc;
    bitnet_generate_params params;
    bitnet_model *model = NULL;
    bitnet_session *session = NULL;
    int32_t ids[1024];
    size_t n_ids = 0;
    bitnet_result r;
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]), 2;

    memset(&desc, 0, sizeof desc); /* zero = defaults: backend auto (the GPU when usable) */
    desc.path = argv[1];
    memset(&params, 0, sizeof params); /* zero = greedy, stop at EOS / EOT */
    params.max_tokens = 64;
    params.on_token = print_token;

    r = bitnet_model_load(&desc, &model);
    if (r == BITNET_OK) r = bitnet_session_create(model, NULL, &session);
    if (r == BITNET_OK) r = bitnet_tokenize(bitnet_model_tokenizer(model), prompt, strlen(prompt), 1, 0, ids, 1024, &n_ids);
    if (r == BITNET_OK) r = bitnet_generate(session, ids, n_ids, &params, NULL, 0, NULL);
    printf("\n");
    if (r != BITNET_OK) fprintf(stderr, "error: %s (%s)\n", bitnet_result_string(r), bitnet_last_error());
    bitnet_session_free(session);
    bitnet_model_free(model);
    return r == BITNET_OK ? 0 : 1;
}
