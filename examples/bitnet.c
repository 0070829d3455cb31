/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cmd_fn)(int argc, char **argv);
typedef struct { const char *name; cmd_fn fn; const char *usage; } command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("bitnet %s (cpu path %s)\n", BITNET_VERSION_STRING, bitnet_isa_name(bitnet_cpu_isa()));
    return 0;
}

/* >>cli-commands: one function per subcommand, listed in the table below. */

/* tokenize: prints the ids of -p TEXT (comma-separated, as `eval --tokens` takes them), or one line
   of ids per line of --hex-lines FILE (each line the hex of one text: texts may hold newlines). */
static int tok_hex_value(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
static int tok_print(const bitnet_tokenizer *t, const char *text, size_t len, int bos, int special) {
    size_t n = len + 1, i; /* every token holds at least one byte, plus BOS */
    int32_t *ids = (int32_t *)malloc(n * sizeof(int32_t));
    if (!ids || bitnet_tokenize(t, text, len, bos, special, ids, n, &n) != BITNET_OK) { free(ids); return -1; }
    for (i = 0; i < n; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return 0;
}
static int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *tiktoken = NULL, *prompt = NULL, *hex_lines = NULL;
    int bos = 1, special = 1, i, rc = 0;
    bitnet_tokenizer *t = NULL;
    bitnet_result r = BITNET_OK;
    bitnet_set_logger(bitnet_log_stderr, NULL);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-bos") == 0) bos = 0;
        else if (strcmp(a, "--no-special") == 0) special = 0;
        else if (v && strcmp(a, "-m") == 0) model = v, i++;
        else if (v && strcmp(a, "--tiktoken") == 0) tiktoken = v, i++;
        else if (v && strcmp(a, "-p") == 0) prompt = v, i++;
        else if (v && strcmp(a, "--hex-lines") == 0) hex_lines = v, i++;
        else { fprintf(stderr, "tokenize: unknown or incomplete option '%s'\n", a); return 2; }
    }
    if (!model == !tiktoken || !prompt == !hex_lines) {
        fprintf(stderr, "usage: bitnet tokenize (-m FILE.gguf | --tiktoken FILE) (-p TEXT | --hex-lines FILE) [--no-bos] [--no-special]\n");
        return 2;
    }
    if (model) {
#ifdef BITNET__GGUF_READER_MERGED
        bitnet_gguf *g = NULL;
        r = bitnet_gguf_open(model, &g);
        if (r == BITNET_OK) r = bitnet_tokenizer_from_gguf(g, &t);
        bitnet_gguf_close(g);
#else
        fprintf(stderr, "tokenize: -m needs the GGUF reader, not merged yet; use --tiktoken\n");
        return 2;
#endif
    } else {
        bitnet_vocab v;
        r = bitnet_vocab_from_tiktoken(tiktoken, 256, &v);
        if (r == BITNET_OK) {
            bitnet_tokenizer_desc d;
            memset(&d, 0, sizeof d);
            d.tokens = v.tokens;
            d.n_tokens = v.n_tokens;
            d.merges = v.merges;
            d.n_merges = v.n_merges;
            d.token_types = v.token_types;
            d.bos = (int32_t)v.n_tokens - 256;      /* <|begin_of_text|> */
            d.eos = d.bos + 1;                      /* <|end_of_text|> */
            d.eot = d.bos + 9;                      /* <|eot_id|> */
            r = bitnet_tokenizer_create(&d, &t);
            bitnet_vocab_free(&v);
        }
    }
    if (r != BITNET_OK) return 1; /* the logger has said why */
    if (prompt) rc = tok_print(t, prompt, strlen(prompt), bos, special) ? 1 : 0;
    else {
        FILE *f = fopen(hex_lines, "rb");
        char *line = NULL, *text = NULL;
        size_t cap = 0;
        if (!f) { fprintf(stderr, "tokenize: cannot open '%s'\n", hex_lines); bitnet_tokenizer_free(t); return 1; }
        for (;;) {
            size_t len = 0, k;
            int c;
            while ((c = fgetc(f)) != EOF && c != '\n') {
                if (len + 1 >= cap) {
                    char *nl = (char *)realloc(line, cap = cap ? 2 * cap : 4096);
                    if (!nl) { rc = 1; break; }
                    line = nl;
                }
                line[len++] = (char)c;
            }
            if (rc || (c == EOF && len == 0)) break;
            if (len % 2) { fprintf(stderr, "tokenize: odd hex line\n"); rc = 1; break; }
            free(text);
            text = (char *)malloc(len / 2 + 1);
            if (!text) { rc = 1; break; }
            for (k = 0; k < len / 2; k++) {
                int hi = tok_hex_value(line[2 * k]), lo = tok_hex_value(line[2 * k + 1]);
                if (hi < 0 || lo < 0) { fprintf(stderr, "tokenize: bad hex\n"); rc = 1; break; }
                text[k] = (char)(hi * 16 + lo);
            }
            if (rc || tok_print(t, text, len / 2, bos, special)) { rc = 1; break; }
            if (c == EOF) break;
        }
        free(line);
        free(text);
        fclose(f);
    }
    bitnet_tokenizer_free(t);
    return rc;
}

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"tokenize", cmd_tokenize, "tokenize -m FILE -p TEXT      print the token ids of TEXT (--tiktoken FILE, --hex-lines FILE, --no-bos, --no-special)"},
    {"help", cmd_help, "help                         this list"},
};

static int cmd_help(int argc, char **argv) {
    size_t i;
    (void)argc; (void)argv;
    printf("usage: bitnet <command> [options]\n");
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) printf("  %s\n", commands[i].usage);
    return 0;
}

int main(int argc, char **argv) {
    size_t i;
    if (argc < 2) return cmd_help(argc, argv), 2;
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "bitnet: unknown command '%s' (try: bitnet help)\n", argv[1]);
    return 2;
}
