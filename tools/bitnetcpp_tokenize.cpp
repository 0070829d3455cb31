// llama.cpp's tokenizer over a file of hex lines (each the hex of one text), printing one line of
// ids per text: the reference side of tools/llamacpp_tokenizer_parity.py. Built against a fetched bitnet.cpp (as
// tools/bitnetcpp_convert_check.sh builds it); not part of the library.
//   bitnetcpp_tokenize MODEL.gguf HEX_LINES [--bos]
// Special tokens in the text are parsed (parse_special), as `bitnet tokenize` does by default.
#include "llama.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char *text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}
static int hexv(int c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

int main(int argc, char **argv) {
    if (argc < 3) return fprintf(stderr, "usage: %s MODEL.gguf HEX_LINES [--bos]\n", argv[0]), 2;
    const bool bos = argc > 3 && strcmp(argv[3], "--bos") == 0;
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model *model = llama_load_model_from_file(argv[1], mp);
    if (!model) return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    FILE *f = fopen(argv[2], "rb");
    if (!f) return fprintf(stderr, "cannot open %s\n", argv[2]), 1;
    std::string line;
    std::vector<llama_token> ids;
    for (int c;;) {
        line.clear();
        while ((c = fgetc(f)) != EOF && c != '\n') line.push_back((char)c);
        if (c == EOF && line.empty()) break;
        std::string text;
        for (size_t i = 0; i + 1 < line.size(); i += 2) text.push_back((char)(hexv(line[i]) * 16 + hexv(line[i + 1])));
        ids.resize(text.size() + 8);
        int n = llama_tokenize(model, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(), bos, true);
        if (n < 0) {
            ids.resize((size_t)-n);
            n = llama_tokenize(model, text.data(), (int32_t)text.size(), ids.data(), (int32_t)ids.size(), bos, true);
        }
        for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        printf("\n");
        if (c == EOF) break;
    }
    fclose(f);
    llama_free_model(model);
    return 0;
}
