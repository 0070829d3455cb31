// Greedy generation through bitnet.cpp's llama.cpp, printing token ids (llama-simple prints only
// text). Built by tools/bitnetcpp_convert_check.sh against a fetched bitnet.cpp build; not part of
// the library. The prompt is given as token ids so both implementations start from the same ids;
// llama.cpp's own tokenization of TEXT is printed beside them.
//   bitnetcpp_greedy MODEL.gguf N_GEN ID,ID,... [TEXT] [THREADS]
// Output lines: "llama_tokenize: ...", "prompt: ...", "gen: ...", "gap: ..." (top-1 minus top-2 logit).
// With LOGITS_OUT=FILE set, each step's float32 logits (n_vocab per step) go to FILE.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char *text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf N_GEN ID,ID,... [TEXT] [THREADS]\n", argv[0]);
        return 2;
    }
    const int n_gen = atoi(argv[2]);
    std::vector<llama_token> ids;
    for (const char *p = argv[3]; *p;) {
        ids.push_back((llama_token)strtol(p, (char **)&p, 10));
        if (*p == ',') p++;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model *model = llama_load_model_from_file(argv[1], llama_model_default_params());
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;

    if (argc > 4) { // llama.cpp's own tokenization of the text, with its special tokens (BOS)
        std::vector<llama_token> t(strlen(argv[4]) + 8);
        int n = llama_tokenize(model, argv[4], (int)strlen(argv[4]), t.data(), (int)t.size(), true, false);
        printf("llama_tokenize:");
        for (int i = 0; i < n; i++) printf("%s%d", i ? "," : " ", t[i]);
        printf("\n");
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(ids.size() + n_gen + 8);
    cp.n_batch = (uint32_t)ids.size();
    if (argc > 5) cp.n_threads = cp.n_threads_batch = atoi(argv[5]);
    llama_context *ctx = llama_new_context_with_model(model, cp);
    if (!ctx) return fprintf(stderr, "cannot create a context\n"), 1;

    const int n_vocab = llama_n_vocab(model);
    std::vector<llama_token> gen;
    std::vector<float> gaps;
    FILE *lf = getenv("LOGITS_OUT") ? fopen(getenv("LOGITS_OUT"), "wb") : nullptr;
    llama_batch batch = llama_batch_get_one(ids.data(), (int32_t)ids.size(), 0, 0);
    int pos = 0;
    llama_token next = 0;
    for (int step = 0; step < n_gen; step++) {
        if (llama_decode(ctx, batch)) return fprintf(stderr, "llama_decode failed at step %d\n", step), 1;
        pos += batch.n_tokens;
        const float *lg = llama_get_logits_ith(ctx, -1);
        if (lf) fwrite(lg, sizeof(float), (size_t)n_vocab, lf);
        int best = 0;
        for (int v = 1; v < n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        float second = -1e30f;
        for (int v = 0; v < n_vocab; v++)
            if (v != best && lg[v] > second) second = lg[v];
        next = best;
        gen.push_back(next);
        gaps.push_back(lg[best] - second);
        batch = llama_batch_get_one(&next, 1, pos, 0);
    }
    if (lf) fclose(lf);
    printf("prompt:");
    for (size_t i = 0; i < ids.size(); i++) printf("%s%d", i ? "," : " ", ids[i]);
    printf("\ngen:");
    for (size_t i = 0; i < gen.size(); i++) printf("%s%d", i ? "," : " ", gen[i]);
    printf("\ngap:");
    for (size_t i = 0; i < gaps.size(); i++) printf("%s%.4g", i ? "," : " ", gaps[i]);
    printf("\n");
    llama_free(ctx);
    llama_free_model(model);
    llama_backend_free();
    return 0;
}
