/* chat: a conversation with a BitNet model, one message a line of stdin; the KV cache keeps it all.
     build/chat MODEL.gguf ["system message"] */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>

static int print_token(int32_t token, const char *piece, size_t len, void *user) {
    (void)token, (void)user;
    fwrite(piece, 1, len, stdout);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    bitnet_model_desc desc;
    bitnet_generate_params params;
    bitnet_model *model = NULL;
    bitnet_session *session = NULL;
    char line[4096];
    bitnet_result r;
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL.gguf [SYSTEM]\n", argv[0]), 2;

    memset(&desc, 0, sizeof desc); /* zero = defaults: backend auto (the GPU when usable) */
    desc.path = argv[1];
    memset(&params, 0, sizeof params); /* zero = greedy, a reply ends at EOS / EOT */
    params.max_tokens = 256;
    params.on_token = print_token;

    r = bitnet_model_load(&desc, &model);
    if (r == BITNET_OK) r = bitnet_session_create(model, NULL, &session);
    if (r == BITNET_OK && argc > 2) r = bitnet_chat(session, "system", argv[2], NULL, NULL, 0, NULL);
    while (r == BITNET_OK && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        r = bitnet_chat(session, "user", line, &params, NULL, 0, NULL); /* the reply streams out */
        printf("\n");
    }
    if (r != BITNET_OK) fprintf(stderr, "error: %s (%s)\n", bitnet_result_string(r), bitnet_last_error());
    bitnet_session_free(session);
    bitnet_model_free(model);
    return r == BITNET_OK ? 0 : 1;
}
