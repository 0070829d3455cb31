/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>
#include <unistd.h>
#include <ctype.h>
#include <math.h>
#include <time.h>
#include <pthread.h>

typedef int (*cmd_fn)(int argc, char **argv);
typedef struct { const char *name; cmd_fn fn; const char *usage; } command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("bitnet %s (cpu path %s%s)\n", BITNET_VERSION_STRING, bitnet_isa_name(bitnet_cpu_isa()),
           bitnet_cpu_isa() == BITNET_ISA_AVX512 && bitnet_cpu_has_amx() ? ", AMX tiles for prompts" : "");
    return 0;
}

/* >>cli-commands: one function per subcommand, listed in the table below. */

/* ---- run and eval: shared option parsing ------------------------------------------------------- */
typedef struct model_opts {
    const char *path; bitnet_backend backend; int threads, no_mmap, head_f16, n_ctx;
    bitnet_chat_template chat_template;
} model_opts;

/* Consumes a model option at argv[*i]; 1 when it was one, -1 on a bad value, 0 when not. */
static int model_opt(model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--no-mmap") == 0) return o->no_mmap = 1, 1;
    if (strcmp(a, "-m") && strcmp(a, "--model") && strcmp(a, "--backend") && strcmp(a, "-t") && strcmp(a, "--threads") &&
        strcmp(a, "--head") && strcmp(a, "-c") && strcmp(a, "--ctx") && strcmp(a, "--ctx-size") && strcmp(a, "--chat-template"))
        return 0;
    if (!v) return fprintf(stderr, "bitnet: %s needs a value\n", a), -1;
    ++*i;
    if (strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) o->path = v;
    else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) o->threads = atoi(v);
    else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx") == 0 || strcmp(a, "--ctx-size") == 0) o->n_ctx = atoi(v);
    else if (strcmp(a, "--head") == 0) {
        if (strcmp(v, "f16") && strcmp(v, "q8")) return fprintf(stderr, "bitnet: --head is f16 or q8\n"), -1;
        o->head_f16 = strcmp(v, "f16") == 0;
    } else if (strcmp(a, "--chat-template") == 0) { /* as llama.cpp's names */
        if (strcmp(v, "bitnet") == 0) o->chat_template = BITNET_CHAT_BITNET;
        else if (strcmp(v, "llama3") == 0) o->chat_template = BITNET_CHAT_LLAMA3;
        else if (strcmp(v, "falcon3") == 0) o->chat_template = BITNET_CHAT_FALCON3;
        else return fprintf(stderr, "bitnet: --chat-template is bitnet, llama3 or falcon3\n"), -1;
    } else if (strcmp(v, "auto") == 0) o->backend = BITNET_BACKEND_AUTO;
    else if (strcmp(v, "cpu") == 0) o->backend = BITNET_BACKEND_CPU;
    else if (strcmp(v, "cuda") == 0) o->backend = BITNET_BACKEND_CUDA;
    else return fprintf(stderr, "bitnet: --backend is auto, cpu or cuda\n"), -1;
    return 1;
}

static void progress_bar(float f, void *user) {
    int i, w = 40, fill = (int)(f * (float)w + 0.5f);
    (void)user;
    fputs("\rloading [", stderr);
    for (i = 0; i < w; i++) fputc(i < fill ? '#' : ' ', stderr);
    fprintf(stderr, "] %3d%%%s", (int)(f * 100.0f + 0.5f), f >= 1.0f ? "\n" : "");
}

static int fail(const char *cmd, bitnet_result r) {
    fprintf(stderr, "bitnet %s: %s: %s\n", cmd, bitnet_result_string(r), bitnet_last_error());
    return 1;
}

/* Loads the model (the progress bar only on a terminal) and reports the backend it took. */
static bitnet_result open_model(const char *cmd, const model_opts *o, bitnet_model **m) {
    bitnet_model_desc d;
    bitnet_model_info info;
    bitnet_result r;
    if (o->threads > 0 && (r = bitnet_set_num_threads(o->threads)) != BITNET_OK) return r;
    memset(&d, 0, sizeof d);
    d.path = o->path;
    d.backend = o->backend;
    d.no_mmap = o->no_mmap;
    d.head_f16 = o->head_f16;
    d.chat_template = o->chat_template;
    if (isatty(fileno(stderr))) d.progress = progress_bar;
    if ((r = bitnet_model_load(&d, m)) != BITNET_OK) return r;
    bitnet_model_get_info(*m, &info);
    fprintf(stderr, "bitnet %s: %s, %d layers, dim %d, vocab %d; backend %s (%s); %d threads\n", cmd, info.arch,
            (int)info.n_layers, (int)info.dim, (int)info.n_vocab, info.backend == BITNET_BACKEND_CUDA ? "cuda" : "cpu",
            info.backend_reason, bitnet_num_threads());
    return BITNET_OK;
}

/* All of text's token ids, malloc'd (*ids; free it whatever the result), *n of them. One call:
   every token holds at least one byte, so len + 1 ids (BOS) always suffice (a size query would log
   its BITNET_ERR_BAD_SIZE through the logger). */
static bitnet_result tokenize_all(const bitnet_tokenizer *t, const char *text, size_t len, int bos, int special, int32_t **ids,
                                  size_t *n) {
    bitnet_result r;
    int32_t *shrunk;
    size_t most = bitnet_tokenize_bound(t, len);
    if (most > SIZE_MAX / sizeof **ids || !(*ids = (int32_t *)malloc(most * sizeof **ids))) return BITNET_ERR_OUT_OF_MEMORY;
    r = bitnet_tokenize(t, text, len, bos, special, *ids, most, n);
    if (r == BITNET_OK && *n && (shrunk = (int32_t *)realloc(*ids, *n * sizeof **ids)) != NULL) *ids = shrunk;
    return r;
}

/* Where the first of stop[0 .. n_stop) in text[0, n) starts, among the matches that end past byte
   from (the text before from was searched already); n when none. run's -r and serve's stop strings. */
static size_t find_stop(const char *text, size_t n, size_t from, const char *const *stop, int n_stop) {
    size_t best = n, i;
    int k;
    for (k = 0; k < n_stop; k++) {
        const size_t l = strlen(stop[k]);
        for (i = from >= l ? from - l + 1 : 0; i + l <= n && i < best; i++)
            if (memcmp(text + i, stop[k], l) == 0) best = i;
    }
    return best;
}

/* run's output: the last token shown, and -r's reverse prompts, found in the text's last bytes */
#define RUN_MAX_STOP 8
typedef struct run_print {
    int32_t last;
    const char *stop[RUN_MAX_STOP]; int n_stop; /* (each at most 255 bytes) */
    char tail[512]; size_t n;
    int stopped;                                /* a reverse prompt ended the reply */
} run_print;
static int print_piece(int32_t token, const char *piece, size_t len, void *user) { /* user: NULL, or a run_print */
    run_print *p = (run_print *)user;
    size_t keep;
    if (piece) fwrite(piece, 1, len, stdout);
    else printf("[%d]", (int)token);
    fflush(stdout);
    if (!p) return 0;
    p->last = token;
    if (!p->n_stop || !piece) return 0;
    if (len > 256) piece += len - 256, len = 256; /* the tail keeps the last 256 bytes before the piece and the piece */
    keep = p->n + len > sizeof p->tail ? sizeof p->tail - len : p->n;
    memmove(p->tail, p->tail + p->n - keep, keep);
    memcpy(p->tail + keep, piece, len);
    p->n = keep + len;
    if (find_stop(p->tail, p->n, keep, p->stop, p->n_stop) == p->n) return 0;
    return p->n = 0, p->stopped = 1; /* the reply ends at a reverse prompt (shown, as llama.cpp shows it) */
}

static int cli_read_file(const char *path, size_t max, char **data, size_t *len);

/* A line of stdin without its end of line (malloc'd), or NULL at the end of the input. */
static char *read_line(FILE *f) {
    size_t n = 0, cap = 256;
    char *b = (char *)malloc(cap);
    int c;
    while (b && (c = fgetc(f)) != EOF && c != '\n') {
        if (n + 1 == cap) {
            char *g = (char *)realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
        }
        if (b) b[n++] = (char)c;
    }
    if (!b || (c == EOF && n == 0)) return free(b), (char *)NULL;
    if (n && b[n - 1] == '\r') n--;
    b[n] = 0;
    return b;
}

static double cli_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* run --prompt-cache FILE: KEY and a NUL, then a session's state (bitnet_session_state_get). KEY is
   -cnv's system message, "" for a plain prompt. cache_read: the state's bytes (in *file, malloc'd)
   when FILE holds one under KEY, else NULL. */
static const unsigned char *cache_read(const char *path, const char *key, unsigned char **file, size_t *len) {
    FILE *f = fopen(path, "rb");
    long n = 0;
    const size_t kl = strlen(key) + 1;
    *file = NULL, *len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > (long)kl && fseek(f, 0, SEEK_SET) == 0 &&
        (*file = (unsigned char *)malloc((size_t)n)) && fread(*file, 1, (size_t)n, f) == (size_t)n && memcmp(*file, key, kl) == 0)
        *len = (size_t)n - kl;
    if (f) fclose(f);
    if (!*len) free(*file), *file = NULL;
    return *file ? *file + kl : NULL;
}
static void cache_write(const char *path, const char *key, const bitnet_session *s) {
    const size_t size = bitnet_session_state_size(s), kl = strlen(key) + 1;
    unsigned char *buf = (unsigned char *)malloc(kl + size);
    FILE *f = NULL;
    bitnet_result r = buf ? bitnet_session_state_get(s, buf + kl, size) : BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) memcpy(buf, key, kl);
    if (r != BITNET_OK || !(f = fopen(path, "wb")) || fwrite(buf, 1, kl + size, f) != kl + size || fclose(f) != 0)
        fprintf(stderr, "bitnet run: cannot write --prompt-cache %s: %s\n", path, r != BITNET_OK ? bitnet_last_error() : strerror(errno));
    free(buf);
}

/* A plain prompt's cache, as llama.cpp's: the state after all of the prompt but its last token. Where
   the file's text starts the prompt, it is restored and only the rest is evaluated; the file is then
   written for this prompt. On return the session holds the prompt's first n - 1 tokens; *reused:
   those the file gave; *seconds: the others' evaluation. */
static bitnet_result prompt_cache(bitnet_session *s, const char *path, const int32_t *ids, size_t n, size_t *reused, double *seconds) {
    unsigned char *file;
    size_t len, keep = 0, have;
    const unsigned char *st = cache_read(path, "", &file, &len);
    bitnet_result r = BITNET_OK;
    double t0;
    *reused = 0, *seconds = 0.0;
    if (st && bitnet_session_state_set(s, st, len) == BITNET_OK) {
        const int32_t *t = bitnet_session_tokens(s);
        have = (size_t)bitnet_session_pos(s);
        while (keep < have && keep + 1 < n && t[keep] == ids[keep]) keep++;
        r = bitnet_session_discard(s, (int32_t)keep, (int32_t)(have - keep)); /* (a tail: nothing to evaluate again) */
    } else if (st) {
        fprintf(stderr, "bitnet run: --prompt-cache %s not used: %s\n", path, bitnet_last_error());
    }
    free(file);
    *reused = keep;
    if (r != BITNET_OK || keep + 1 >= n) return r;
    t0 = cli_seconds();
    r = bitnet_session_eval(s, ids + keep, n - 1 - keep, NULL, 0);
    *seconds = cli_seconds() - t0;
    if (r == BITNET_OK) cache_write(path, "", s);
    return r;
}

/* run -cnv: a conversation, one user message a line of stdin, each reply streamed to stdout (the
   prompt, when given, is the system message), until the input ends. When a message does not fit, the
   older half of the conversation after the system message is dropped first (as llama.cpp's context
   shift; here the kept text is evaluated again, so nothing is approximated). With cache (--prompt-cache),
   the session after the system message comes from the file when it holds this system message's, and
   goes into it otherwise. */
static int run_conversation(bitnet_model *m, const model_opts *mo, bitnet_generate_params *gp, run_print *out, const char *system,
                            const char *cache) {
    const int tty = isatty(fileno(stdin));
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_generate_stats st;
    bitnet_result r;
    size_t replies = 0, np = 0, ng = 0;
    int32_t keep = 0, drop;
    double tp = 0.0, tg = 0.0;
    char *msg;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = mo->n_ctx;
    if ((r = bitnet_session_create(m, &sd, &s)) != BITNET_OK) return fail("run", r);
    gp->on_token = print_piece, gp->user = out;
    if (system && *system) {
        unsigned char *file = NULL;
        size_t len = 0;
        const unsigned char *st = cache ? cache_read(cache, system, &file, &len) : NULL;
        if (st && bitnet_session_state_set(s, st, len) == BITNET_OK) {
            fprintf(stderr, "bitnet run: --prompt-cache %s: the system message's %d tokens from it\n", cache, (int)bitnet_session_pos(s));
        } else {
            if (st) fprintf(stderr, "bitnet run: --prompt-cache %s not used: %s\n", cache, bitnet_last_error());
            r = bitnet_chat(s, "system", system, NULL, NULL, 0, NULL);
            if (r == BITNET_OK && cache) cache_write(cache, system, s);
        }
        free(file);
    }
    keep = bitnet_session_pos(s);
    while (r == BITNET_OK) {
        if (tty) fputs("> ", stderr), fflush(stderr);
        if (!(msg = read_line(stdin))) break;
        if (*msg) {
            r = bitnet_chat(s, "user", msg, gp, NULL, 0, &st);
            if (r == BITNET_ERR_CONTEXT_FULL && (drop = (bitnet_session_pos(s) - keep) / 2) > 0) {
                fprintf(stderr, "bitnet run: the context is full: the oldest %d tokens after the system message go\n", (int)drop);
                r = bitnet_session_discard(s, keep, drop);
                if (r == BITNET_OK) r = bitnet_chat(s, "user", msg, gp, NULL, 0, &st);
            }
            printf("\n");
            fflush(stdout);
            if (r == BITNET_OK) replies++, np += st.n_prompt, ng += st.n_generated, tp += st.prompt_seconds, tg += st.gen_seconds;
        }
        free(msg);
    }
    fprintf(stderr, "bitnet run: %zu replies; prompts %zu tokens, %.2f tokens/s; generation %zu tokens, %.2f tokens/s\n", replies,
            np, tp > 0 ? (double)np / tp : 0.0, ng, tg > 0 ? (double)ng / tg : 0.0);
    bitnet_session_free(s);
    return r == BITNET_OK ? 0 : fail("run", r);
}

static int cmd_run(int argc, char **argv) {
    model_opts mo;
    const char *prompt = NULL, *prompt_file = NULL, *cache = NULL, *grammar = NULL, *grammar_file = NULL, *schema = NULL, *schema_file = NULL;
    char *file_text = NULL, *grammar_text = NULL, *schema_text = NULL;
    int i, chat = 0, cnv = 0, shift = 0, last_n = 64, err, rc = 1;
    static bitnet_logit_bias bias[BITNET_MAX_LOGIT_BIAS];
    run_print out;
    bitnet_grammar *g = NULL;
    int32_t none = 0;
    bitnet_generate_params gp;
    bitnet_generate_stats st;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_result r;
    const bitnet_tokenizer *tk;
    int32_t *ids = NULL;
    size_t n = 0;
    memset(&mo, 0, sizeof mo);
    memset(&gp, 0, sizeof gp);
    memset(&st, 0, sizeof st);
    memset(&out, 0, sizeof out);
    out.last = -1;
    gp.max_tokens = 128;
    gp.sampler.temperature = 0.8f, gp.sampler.top_k = 40, gp.sampler.top_p = 0.95f, gp.sampler.min_p = 0.05f;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k = model_opt(&mo, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (strcmp(a, "--chat") == 0) { chat = 1; continue; }
        if (strcmp(a, "-cnv") == 0 || strcmp(a, "--conversation") == 0) { cnv = 1; continue; }
        if (strcmp(a, "--context-shift") == 0) { shift = 1; continue; }
        if (strcmp(a, "--ignore-eos") == 0) { gp.stop_tokens = &none, gp.n_stop = 0; continue; } /* (non-NULL, none) */
        if (!v) return fprintf(stderr, "bitnet run: unknown option or missing value: %s\n", a), 2;
        i++;
        if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0) prompt = v;
        else if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) prompt_file = v;
        else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) { /* -1: no limit */
            const int nt = atoi(v);
            gp.max_tokens = nt == -1 ? 0 : nt;
        }
        else if (strcmp(a, "--seed") == 0) gp.sampler.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--temp") == 0) gp.sampler.temperature = (float)atof(v);
        else if (strcmp(a, "--top-k") == 0) gp.sampler.top_k = atoi(v);
        else if (strcmp(a, "--top-p") == 0) gp.sampler.top_p = (float)atof(v);
        else if (strcmp(a, "--min-p") == 0) gp.sampler.min_p = (float)atof(v);
        else if (strcmp(a, "--repeat-penalty") == 0) gp.sampler.repeat_penalty = (float)atof(v);
        else if (strcmp(a, "--repeat-last-n") == 0) last_n = atoi(v);
        else if (strcmp(a, "--presence-penalty") == 0) gp.sampler.presence_penalty = (float)atof(v);
        else if (strcmp(a, "--frequency-penalty") == 0) gp.sampler.frequency_penalty = (float)atof(v);
        else if (strcmp(a, "--logit-bias") == 0) { /* TOKEN+BIAS or TOKEN-BIAS, as llama.cpp: 15043+1, 15043-inf */
            char *e;
            const long id = strtol(v, &e, 10);
            const double b = (*e == '+' || *e == '-') && e > v ? strtod(e, &e) : NAN;
            if (*e || b != b || id < 0 || id > INT32_MAX || gp.sampler.n_logit_bias == BITNET_MAX_LOGIT_BIAS)
                return fprintf(stderr, "bitnet run: --logit-bias %s: TOKEN+BIAS or TOKEN-BIAS (at most %d)\n", v, BITNET_MAX_LOGIT_BIAS), 2;
            bias[gp.sampler.n_logit_bias].token = (int32_t)id, bias[gp.sampler.n_logit_bias++].bias = (float)b;
            gp.sampler.logit_bias = bias;
        }
        else if (strcmp(a, "-r") == 0 || strcmp(a, "--reverse-prompt") == 0) {
            if (out.n_stop == RUN_MAX_STOP || !*v || strlen(v) > 255)
                return fprintf(stderr, "bitnet run: -r: at most %d reverse prompts of 1 to 255 bytes\n", RUN_MAX_STOP), 2;
            out.stop[out.n_stop++] = v;
        }
        else if (strcmp(a, "--prompt-cache") == 0) cache = v;
        else if (strcmp(a, "--grammar") == 0) grammar = v;
        else if (strcmp(a, "--grammar-file") == 0) grammar_file = v;
        else if (strcmp(a, "--json-schema") == 0 || strcmp(a, "-j") == 0) schema = v;
        else if (strcmp(a, "--json-schema-file") == 0) schema_file = v;
        else return fprintf(stderr, "bitnet run: unknown option %s\n", a), 2;
    }
    if (last_n < -1) return fprintf(stderr, "bitnet run: --repeat-last-n %d (-1: the context, 0: off)\n", last_n), 2;
    if (last_n == 0) gp.sampler.repeat_penalty = 1.0f; /* as llama.cpp: 0 turns the penalty off */
    gp.sampler.repeat_last_n = last_n < 0 ? INT32_MAX : last_n; /* (the library clips it to the context) */
    if (prompt && prompt_file) return fprintf(stderr, "bitnet run: -p and -f both given\n"), 2;
    if (cache && chat) return fprintf(stderr, "bitnet run: --prompt-cache takes a plain prompt or -cnv's system message (not --chat)\n"), 2;
    if (!mo.path || !(prompt || prompt_file || cnv))
        return fprintf(stderr, "usage: bitnet run -m FILE -p TEXT [options] (see bitnet help)\n"), 2;
    if (!!grammar + !!grammar_file + !!schema + !!schema_file > 1)
        return fprintf(stderr, "bitnet run: more than one of --grammar, --grammar-file, --json-schema, --json-schema-file\n"), 2;
    if ((grammar || grammar_file || schema || schema_file) && shift) /* (the text after a shift would start the grammar again) */
        return fprintf(stderr, "bitnet run: --context-shift does not go with a grammar\n"), 2;
    if (prompt_file) { /* -f: the prompt from a file */
        size_t len;
        if ((err = cli_read_file(prompt_file, (size_t)1 << 26, &file_text, &len)) != 0)
            return fprintf(stderr, "bitnet run: cannot read %s: %s\n", prompt_file, strerror(err)), 1;
        prompt = file_text;
    }
    if (grammar_file) { /* --grammar-file: GBNF from a file */
        size_t len;
        if ((err = cli_read_file(grammar_file, (size_t)1 << 24, &grammar_text, &len)) != 0) {
            fprintf(stderr, "bitnet run: cannot read %s: %s\n", grammar_file, strerror(err));
            goto done;
        }
        grammar = grammar_text;
    }
    if (schema_file) { /* --json-schema-file: the schema from a file */
        size_t len;
        if ((err = cli_read_file(schema_file, (size_t)1 << 24, &schema_text, &len)) != 0) {
            fprintf(stderr, "bitnet run: cannot read %s: %s\n", schema_file, strerror(err));
            goto done;
        }
        schema = schema_text;
    }
    if (schema) { /* a JSON schema becomes a grammar: its length first, then its text */
        size_t len = 0;
        r = bitnet_json_schema_to_grammar(schema, strlen(schema), NULL, 0, &len);
        if (r == BITNET_ERR_BAD_SIZE && !(grammar_text = (char *)malloc(len + 1))) r = BITNET_ERR_OUT_OF_MEMORY;
        if (r == BITNET_ERR_BAD_SIZE) r = bitnet_json_schema_to_grammar(schema, strlen(schema), grammar_text, len + 1, &len);
        if (r != BITNET_OK) {
            rc = fail("run", r);
            goto done;
        }
        grammar = grammar_text;
    }
    if (grammar && (r = bitnet_grammar_parse(grammar, strlen(grammar), &g)) != BITNET_OK) {
        rc = fail("run", r);
        goto done;
    }
    gp.grammar = g;
    if ((r = open_model("run", &mo, &m)) != BITNET_OK) {
        rc = fail("run", r);
        goto done;
    }
    tk = bitnet_model_tokenizer(m);
    if (!tk) {
        fprintf(stderr, "bitnet run: %s has no tokenizer\n", mo.path);
        goto done;
    }
    if (cnv) {
        rc = run_conversation(m, &mo, &gp, &out, prompt, cache);
        goto done;
    }
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = mo.n_ctx;
    r = bitnet_session_create(m, &sd, &s);
    if (!sd.n_ctx) { /* (the model's training context, as the session took it) */
        bitnet_model_info info;
        if (bitnet_model_get_info(m, &info) == BITNET_OK) sd.n_ctx = info.n_ctx_train;
    }
    gp.on_token = print_piece, gp.user = &out;
    if (r == BITNET_OK && chat) r = bitnet_chat(s, "user", prompt, &gp, NULL, 0, &st); /* the model's chat template */
    else if (r == BITNET_OK) {
        size_t reused = 0, first = 0;
        double secs = 0.0;
        r = tokenize_all(tk, prompt, strlen(prompt), 1, 0, &ids, &n);
        if (r == BITNET_OK && cache && n > 1) { /* the prompt but its last token from or into the cache */
            r = prompt_cache(s, cache, ids, n, &reused, &secs);
            first = n - 1;
            fprintf(stderr, "bitnet run: --prompt-cache %s: %zu of the prompt's %zu tokens from it\n", cache, reused, n);
        }
        if (r == BITNET_OK) r = bitnet_generate(s, ids + first, n - first, &gp, NULL, 0, &st);
        st.n_prompt += first - reused, st.prompt_seconds += secs; /* (the prompt's tokens evaluated in this run) */
        while (r == BITNET_OK && shift && out.last >= 0 && !out.stopped && bitnet_session_pos(s) >= sd.n_ctx && (!gp.max_tokens || st.n_generated < (size_t)gp.max_tokens)) {
            /* --context-shift: the context filled before -n tokens: the older half of the text after the
               prompt goes (bitnet_session_discard: the rest evaluated again, where llama.cpp rotates the
               cached keys), and generation goes on from the last token, which was not evaluated */
            const int32_t drop = (bitnet_session_pos(s) - (int32_t)n) / 2;
            bitnet_generate_params g2 = gp;
            bitnet_generate_stats s2;
            if (drop <= 0) break; /* (the prompt alone fills it) */
            fprintf(stderr, "\nbitnet run: context shift: %d tokens after the prompt dropped\n", (int)drop);
            r = bitnet_session_discard(s, (int32_t)n, drop);
            if (gp.max_tokens) g2.max_tokens = gp.max_tokens - (int32_t)st.n_generated;
            if (r == BITNET_OK) r = bitnet_generate(s, &out.last, 1, &g2, NULL, 0, &s2);
            if (r == BITNET_OK) st.n_generated += s2.n_generated, st.gen_seconds += s2.gen_seconds + s2.prompt_seconds;
        }
    }
    printf("\n");
    if (r == BITNET_OK)
        fprintf(stderr, "bitnet run: prompt %zu tokens, %.2f tokens/s; generation %zu tokens, %.2f tokens/s\n", st.n_prompt,
                st.prompt_seconds > 0 ? (double)st.n_prompt / st.prompt_seconds : 0.0, st.n_generated,
                st.gen_seconds > 0 ? (double)st.n_generated / st.gen_seconds : 0.0);
    if (r == BITNET_OK && bitnet_session_pos(s) >= sd.n_ctx && (!gp.max_tokens || st.n_generated < (size_t)gp.max_tokens))
        fprintf(stderr, "bitnet run: stopped at the end of the context (%d positions; -c sets it%s)\n", (int)sd.n_ctx,
                shift ? "" : ", --context-shift goes on"); /* (generation that filled the context stopped there) */
    rc = r == BITNET_OK ? 0 : fail("run", r);
done:
    free(file_text), free(grammar_text), free(schema_text), free(ids);
    bitnet_grammar_free(g);
    bitnet_session_free(s);
    bitnet_model_free(m);
    return rc;
}

/* A command's options: the model's (model_opt) and "NAME VALUE" pairs, names[i]'s value into vals[i].
   0, or 2 after a message for an unknown option or a missing value. */
static int cmd_opts(const char *cmd, int argc, char **argv, model_opts *mo, const char *const *names, const char **vals, int n) {
    int i, j;
    memset(mo, 0, sizeof *mo);
    for (i = 1; i < argc; i++) {
        int k = model_opt(mo, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        for (j = 0; j < n && strcmp(argv[i], names[j]); j++) {}
        if (j == n || i + 1 >= argc) return fprintf(stderr, "bitnet %s: unknown option or missing value: %s\n", cmd, argv[i]), 2;
        vals[j] = argv[++i];
    }
    return 0;
}

static int cmd_eval(int argc, char **argv) {
    model_opts mo;
    const char *list = NULL, *out_path = NULL, *p;
    size_t n = 0, cap = 0;
    int32_t *ids = NULL;
    float *logits = NULL;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_model_info info;
    bitnet_result r;
    FILE *f;
    {
        static const char *const names[2] = {"--tokens", "--logits-out"};
        const char *vals[2] = {NULL, NULL};
        if (cmd_opts("eval", argc, argv, &mo, names, vals, 2)) return 2;
        list = vals[0], out_path = vals[1];
    }
    if (!mo.path || !list || !out_path)
        return fprintf(stderr, "usage: bitnet eval -m FILE --tokens 1,2,3 --logits-out FILE.f32 [--backend B]\n"), 2;
    for (p = list; *p;) { /* comma-separated ids, no BOS added */
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < INT32_MIN || v > INT32_MAX) {
            free(ids);
            return fprintf(stderr, "bitnet eval: --tokens wants comma-separated integers, got '%s'\n", list), 2;
        }
        if (n == cap) {
            int32_t *g = (int32_t *)realloc(ids, (cap = cap ? 2 * cap : 64) * sizeof *ids);
            if (!g) return free(ids), fprintf(stderr, "bitnet eval: out of memory\n"), 1;
            ids = g;
        }
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!n) return fprintf(stderr, "bitnet eval: --tokens is empty\n"), 2;
    if ((r = open_model("eval", &mo, &m)) != BITNET_OK) return free(ids), fail("eval", r);
    memset(&info, 0, sizeof info);
    bitnet_model_get_info(m, &info);
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = mo.n_ctx ? mo.n_ctx : (int32_t)n;
    logits = (float *)malloc(n * (size_t)info.n_vocab * sizeof(float));
    r = logits ? bitnet_session_create(m, &sd, &s) : BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) r = bitnet_session_eval(s, ids, n, logits, 1);
    if (r == BITNET_OK) {
        if (!(f = fopen(out_path, "wb")) || fwrite(logits, sizeof(float) * (size_t)info.n_vocab, n, f) != n || fclose(f) != 0) {
            fprintf(stderr, "bitnet eval: cannot write %s\n", out_path);
            r = BITNET_ERR_IO;
        } else fprintf(stderr, "bitnet eval: %zu x %d float32 logits -> %s\n", n, (int)info.n_vocab, out_path);
    }
    free(ids);
    free(logits);
    bitnet_session_free(s);
    bitnet_model_free(m);
    return r == BITNET_OK ? 0 : (r == BITNET_ERR_IO ? 1 : fail("eval", r));
}

/* ---- perplexity ------------------------------------------------------------------------------- */

/* A text's perplexity as llama.cpp's llama-perplexity measures it, so the numbers compare: the
   text's tokens (no BOS) in chunks of n_ctx (-c, default 512), each from an empty context with its
   first token replaced by BOS (where the model has one); the second half of each chunk is scored, so
   every scored token has at least n_ctx / 2 tokens before it. PPL = exp(mean negative
   log-likelihood); +/- is one standard error. Logits come 64 rows at a time (a 2B-4T row is 0.5 MB). */
static int cmd_perplexity(int argc, char **argv) {
    enum { ROWS = 64 };
    model_opts mo;
    const char *path = NULL;
    char *text = NULL;
    size_t len = 0, n_tok = 0, c, n_chunks, scored = 0;
    long max_chunks = 0;
    int n_ctx, first, err, rc = 0;
    int32_t *ids = NULL, *chunk = NULL, bos = -1;
    float *logits = NULL;
    double sum = 0.0, sum2 = 0.0, t0, t1;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_model_info info;
    const bitnet_tokenizer *tok;
    bitnet_result r;
    {
        static const char *const names[2] = {"-f", "--chunks"};
        const char *vals[2] = {NULL, NULL};
        if (cmd_opts("perplexity", argc, argv, &mo, names, vals, 2)) return 2;
        path = vals[0];
        if (vals[1]) max_chunks = strtol(vals[1], NULL, 10);
    }
    n_ctx = mo.n_ctx ? mo.n_ctx : 512;
    if (!mo.path || !path || n_ctx < 4 || max_chunks < 0)
        return fprintf(stderr, "usage: bitnet perplexity -m FILE -f TEXT [-c N_CTX (>= 4, default 512)] [--chunks N] [--backend B]\n"), 2;
    if ((err = cli_read_file(path, (size_t)1 << 30, &text, &len)) != 0)
        return fprintf(stderr, "bitnet perplexity: cannot read %s: %s\n", path, strerror(err)), 1;
    if ((r = open_model("perplexity", &mo, &m)) != BITNET_OK) return free(text), fail("perplexity", r);
    bitnet_model_get_info(m, &info);
    if (!(tok = bitnet_model_tokenizer(m))) {
        fprintf(stderr, "bitnet perplexity: the model has no tokenizer\n");
        rc = 1;
        goto done;
    }
    bitnet_tokenizer_special_ids(tok, &bos, NULL, NULL);
    if ((r = tokenize_all(tok, text, len, 0, 0, &ids, &n_tok)) != BITNET_OK) goto done;
    n_chunks = n_tok / (size_t)n_ctx;
    if (max_chunks > 0 && (size_t)max_chunks < n_chunks) n_chunks = (size_t)max_chunks;
    if (!n_chunks) {
        fprintf(stderr, "bitnet perplexity: %s has %zu tokens, fewer than one chunk of %d (-c)\n", path, n_tok, n_ctx);
        rc = 1;
        goto done;
    }
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = n_ctx;
    chunk = (int32_t *)malloc((size_t)n_ctx * sizeof *chunk);
    logits = (float *)malloc((size_t)ROWS * (size_t)info.n_vocab * sizeof *logits);
    r = chunk && logits ? bitnet_session_create(m, &sd, &s) : BITNET_ERR_OUT_OF_MEMORY;
    if (r != BITNET_OK) goto done;
    first = n_ctx / 2;
    fprintf(stderr, "bitnet perplexity: %zu tokens, %zu chunks of %d, scoring the last %d of each\n", n_tok, n_chunks, n_ctx,
            n_ctx - first);
    t0 = cli_seconds();
    for (c = 0; c < n_chunks && r == BITNET_OK; c++) {
        int j0;
        memcpy(chunk, ids + c * (size_t)n_ctx, (size_t)n_ctx * sizeof *chunk);
        if (bos >= 0) chunk[0] = bos;
        bitnet_session_reset(s);
        r = bitnet_session_eval(s, chunk, (size_t)(first - 1), NULL, 0); /* the context; no head */
        for (j0 = first - 1; j0 < n_ctx - 1 && r == BITNET_OK; j0 += ROWS) { /* row j predicts chunk[j + 1] */
            int n = n_ctx - 1 - j0 < ROWS ? n_ctx - 1 - j0 : ROWS, j, v;
            if ((r = bitnet_session_eval(s, chunk + j0, (size_t)n, logits, 1)) != BITNET_OK) break;
            for (j = 0; j < n; j++) {
                const float *row = logits + (size_t)j * (size_t)info.n_vocab;
                double mx = row[0], se = 0.0, nll;
                for (v = 1; v < info.n_vocab; v++) mx = row[v] > mx ? row[v] : mx;
                for (v = 0; v < info.n_vocab; v++) se += exp((double)row[v] - mx);
                nll = mx + log(se) - (double)row[chunk[j0 + j + 1]];
                sum += nll, sum2 += nll * nll, scored++;
            }
        }
        if (r == BITNET_OK) fprintf(stderr, "[%zu]%.4f%s", c + 1, exp(sum / (double)scored), c + 1 < n_chunks ? "," : "\n");
    }
    if (r != BITNET_OK) goto done;
    t1 = cli_seconds();
    {
        double mean = sum / (double)scored, var = sum2 / (double)scored - mean * mean;
        double se = scored > 1 && var > 0.0 ? sqrt(var / (double)(scored - 1)) : 0.0;
        printf("perplexity: %.6f +/- %.6f (%zu chunks of %d tokens, %zu scored)\n", exp(mean), exp(mean) * se, n_chunks, n_ctx,
               scored);
        fprintf(stderr, "bitnet perplexity: %.1f tokens/s\n", (double)(n_chunks * (size_t)(n_ctx - 1)) / (t1 - t0));
    }
done:
    free(text), free(ids), free(chunk), free(logits);
    bitnet_session_free(s);
    bitnet_model_free(m);
    return r == BITNET_OK ? rc : fail("perplexity", r);
}

/* ---- receipts: verify-receipt (and bench) ---------------------------------------------------- */

/* A whole file into memory (NUL-terminated); at most max bytes. 0 on success, else errno-style. */
static int cli_read_file(const char *path, size_t max, char **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t got;
    if (!f) return errno ? errno : EIO;
    buf = (char *)malloc(max + 2);
    if (!buf) { fclose(f); return ENOMEM; }
    got = fread(buf, 1, max + 1, f);
    if (ferror(f)) { fclose(f); free(buf); return EIO; }
    fclose(f);
    if (got > max) { free(buf); return EFBIG; }
    buf[got] = 0;
    *data = buf;
    *len = got;
    return 0;
}

/* A positive finite number from a flag value, or -1. */
static double cli_positive(const char *s) {
    char *end;
    double v;
    if (!s) return -1;
    v = strtod(s, &end);
    return (end != s && *end == 0 && v > 0 && v < 1e300) ? v : -1;
}

/* bench: per backend, load, measure (bitnet_bench), print a table, write receipts. */
typedef struct bench_opts {
    const char *model, *json, *csv, *receipt;
    int cpu, cuda, check_determinism, require_gpu;
    bitnet_bench_params params;
} bench_opts;

static void bench_progress(float fraction, void *user) {
    fprintf(stderr, "\rbench %s: %3d%%", (const char *)user, (int)(fraction * 100.0f + 0.5f));
    if (fraction >= 1.0f) fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

/* "64,512" into lens; 0 on a bad list. */
static int bench_parse_lens(const char *s, bitnet_bench_params *p) {
    p->n_prompt_lens = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1000000 || p->n_prompt_lens >= BITNET_BENCH_MAX_RESULTS || (*end && *end != ',')) return 0;
        p->prompt_lens[p->n_prompt_lens++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return p->n_prompt_lens > 0;
}

static int bench_int_flag(const char *flag, const char *v, int lo, int hi, int32_t *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "bench: %s needs a whole number from %d to %d\n", flag, lo, hi);
        return 0;
    }
    *out = (int32_t)x;
    return 1;
}

/* FILE for one backend; with two, FILE's extension gets the backend in front: r.json -> r.cpu.json */
static void bench_receipt_path(const char *file, const char *backend, int several, char *out, size_t cap) {
    const char *dot = strrchr(file, '.'), *slash = strrchr(file, '/');
    if (!several) snprintf(out, cap, "%s", file);
    else if (dot && (!slash || dot > slash)) snprintf(out, cap, "%.*s.%s%s", (int)(dot - file), file, backend, dot);
    else snprintf(out, cap, "%s.%s", file, backend);
}

static int bench_write_text(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
    return ok;
}

/* bench's roofline: the bandwidth measured in the same run (defined with bench-kernels below). */
static double bench_cpu_read_bw(void);
static double bench_cuda_copy_bw(void);

/* Bytes a decode step at position pos must read: every weight once (the seven I2_S matrices a layer,
   the head at its width, the norms) and the fp16 K/V rows before it. */
static double bench_step_bytes(const bitnet_model_info *mi, double pos) {
    const size_t d = (size_t)mi->dim, hd = mi->head_dim ? (size_t)mi->head_dim : d / (size_t)mi->n_heads;
    const size_t q = (size_t)mi->n_heads * hd, kv = (size_t)mi->n_kv_heads * hd, f = (size_t)mi->ffn_dim;
    const double L = mi->n_layers, v = mi->n_vocab;
    const double ternary = L * (double)(bitnet_i2s_bytes(q, d) + 2 * bitnet_i2s_bytes(kv, d) + bitnet_i2s_bytes(d, q) +
                                        2 * bitnet_i2s_bytes(f, d) + bitnet_i2s_bytes(d, f));
    const double head = v * (double)d * (mi->head_bits == 8 ? 1 : 2) + (mi->head_bits == 8 ? 4 * v : 0);
    return ternary + head + 4 * (L * (double)(2 * d + q + f) + (double)d) + L * 2 * (double)kv * 2 * pos;
}

static int cmd_bench(int argc, char **argv) {
    bench_opts o;
    bitnet_receipt *rec[2] = {NULL, NULL};
    int32_t *tokens[2] = {NULL, NULL};
    const char *names[2] = {"cuda", "cpu"};
    size_t n_tokens, b;
    int i, rc = 0, gpu_missing = 0, several;
    bitnet_model_info info[2];
    double bw[2] = {0, 0}; /* cuda: device copy bandwidth; cpu: memory read bandwidth (GB/s) */
    static char json[1 << 18];
    memset(&o, 0, sizeof o);
    o.cpu = o.cuda = 1;
    o.params.prompt_lens[0] = 64;
    o.params.prompt_lens[1] = 512;
    o.params.n_prompt_lens = 2;
    o.params.gen_tokens = 128;
    o.params.runs = 5;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-m") == 0 && v) o.model = v, i++;
        else if (strcmp(a, "--backend") == 0 && v) {
            i++;
            if (strcmp(v, "cpu") == 0) o.cpu = 1, o.cuda = 0;
            else if (strcmp(v, "cuda") == 0) o.cpu = 0, o.cuda = 1;
            else if (strcmp(v, "all") == 0) o.cpu = o.cuda = 1;
            else { fprintf(stderr, "bench: --backend is cpu, cuda or all, not '%s'\n", v); return 2; }
        } else if (strcmp(a, "--prompt-tokens") == 0 && v) {
            i++;
            if (!bench_parse_lens(v, &o.params)) {
                fprintf(stderr, "bench: --prompt-tokens takes up to %d lengths like 64,512\n", BITNET_BENCH_MAX_RESULTS);
                return 2;
            }
        } else if (strcmp(a, "--gen-tokens") == 0) { if (!bench_int_flag(a, v, 1, 1000000, &o.params.gen_tokens)) return 2; i++; }
        else if (strcmp(a, "--runs") == 0) { if (!bench_int_flag(a, v, 1, 100000, &o.params.runs)) return 2; i++; }
        else if (strcmp(a, "--warmup") == 0) {
            int32_t w;
            if (!bench_int_flag(a, v, 0, 1000, &w)) return 2;
            o.params.warmup = w ? w : -1;
            i++;
        }
        else if (strcmp(a, "--json") == 0 && v) o.json = v, i++;
        else if (strcmp(a, "--csv") == 0 && v) o.csv = v, i++;
        else if (strcmp(a, "--receipt") == 0 && v) o.receipt = v, i++;
        else if (strcmp(a, "--check-determinism") == 0) o.check_determinism = 1;
        else if (strcmp(a, "--require-gpu") == 0) o.require_gpu = 1;
        else {
            fprintf(stderr, "bench: unexpected argument '%s'\n", a);
            return 2;
        }
    }
    if (!o.model) {
        fprintf(stderr, "usage: bitnet bench -m FILE [--backend cpu|cuda|all] [--prompt-tokens 64,512] [--gen-tokens 128] [--runs 5]\n"
                        "       [--warmup 1] [--json FILE] [--csv FILE] [--receipt FILE] [--check-determinism] [--require-gpu]\n");
        return 2;
    }
    if (o.require_gpu && !o.cuda) {
        fprintf(stderr, "bench: --require-gpu needs --backend cuda or all\n");
        return 2;
    }
    o.params.model_path = o.model;
    o.params.check_determinism = o.check_determinism;
    n_tokens = o.params.n_prompt_lens * (size_t)o.params.gen_tokens;
    bitnet_set_logger(bitnet_log_stderr, NULL);

    /* CUDA first: without a usable GPU the run ends (or skips) before the long CPU part */
    for (b = 0; b < 2 && rc == 0; b++) {
        bitnet_model_desc md;
        bitnet_model *m = NULL;
        bitnet_result r;
        int is_cuda = b == 0;
        if (is_cuda ? !o.cuda : !o.cpu) continue;
        memset(&md, 0, sizeof md);
        md.path = o.model;
        md.backend = is_cuda ? BITNET_BACKEND_CUDA : BITNET_BACKEND_CPU;
        bitnet_set_logger(NULL, NULL); /* a missing GPU is reported once, below */
        r = bitnet_model_load(&md, &m);
        bitnet_set_logger(bitnet_log_stderr, NULL);
        if (r != BITNET_OK && is_cuda && (r == BITNET_ERR_BACKEND || r == BITNET_ERR_UNSUPPORTED || (r <= -200 && r > -300))) {
            const char *why = bitnet_last_error(), *cut = strstr(why, "not usable: ");
            printf("bench cuda: skipped (no CUDA: %s)\n", cut ? cut + 12 : why);
            fflush(stdout);
            gpu_missing = 1;
            if (o.require_gpu) return 3;
            continue;
        }
        if (r != BITNET_OK) {
            fprintf(stderr, "bench %s: cannot load %s: %s\n", names[b], o.model, bitnet_last_error());
            rc = 1;
            break;
        }
        rec[b] = (bitnet_receipt *)calloc(1, sizeof *rec[b]);
        tokens[b] = (int32_t *)calloc(n_tokens, sizeof *tokens[b]);
        if (!rec[b] || !tokens[b]) {
            fprintf(stderr, "bench: out of memory\n");
            bitnet_model_free(m);
            rc = 1;
            break;
        }
        memset(&info[b], 0, sizeof info[b]);
        bitnet_model_get_info(m, &info[b]);
        o.params.requested = md.backend;
        o.params.tokens_out = tokens[b];
        o.params.tokens_cap = n_tokens;
        o.params.progress = isatty(2) ? bench_progress : NULL;
        o.params.progress_user = (void *)names[b];
        r = bitnet_bench(m, &o.params, rec[b]);
        bitnet_model_free(m);
        /* the roofline's bandwidth, with the model's memory free; not for a model the caches hold */
        if (r == BITNET_OK && bench_step_bytes(&info[b], 0) >= 64e6) bw[b] = is_cuda ? bench_cuda_copy_bw() : bench_cpu_read_bw();
        if (r != BITNET_OK) {
            fprintf(stderr, "bench %s: %s\n", names[b], bitnet_last_error());
            free(rec[b]);
            rec[b] = NULL;
            rc = 1;
        }
    }

    several = o.cpu && o.cuda; /* receipt names do not depend on whether a GPU was found */
    if (rec[0] || rec[1]) {
        printf("%-5s %7s %5s %4s %12s %10s %9s %9s %8s %8s %8s %10s\n", "back", "prompt", "gen", "runs", "prompt tok/s",
               "gen tok/s", "ttft ms", "p50 ms", "p95 ms", "p99 ms", "wall ms", "peak RSS");
        for (b = 2; b-- > 0;) {
            size_t k;
            const bitnet_receipt *r = rec[b];
            if (!r) continue;
            for (k = 0; k < r->n_results; k++) {
                const bitnet_bench_result *x = &r->results[k];
                printf("%-5s %7d %5d %4d %12.1f %10.2f %9.2f %9.3f %8.3f %8.3f %8.1f %7.0f MB\n", r->backend, (int)x->prompt_tokens,
                       (int)x->gen_tokens, (int)x->runs, x->prompt_tps, x->gen_tps, x->ttft_ms, x->p50_ms, x->p95_ms,
                       x->p99_ms, x->wall_ms, (double)r->peak_host_rss_bytes / 1e6);
            }
            if (r->has_gpu)
                printf("      %s (cc %d.%d, %s, driver %s, NVRTC %s), peak GPU %.0f MB; kernels:", r->gpu_name, (int)r->gpu_cc_major,
                       (int)r->gpu_cc_minor, r->gpu_arch, r->gpu_driver_version, r->nvrtc_version, (double)r->peak_device_bytes / 1e6);
            else
                printf("      %s, %s x%d threads, load %.2f; kernels:", r->cpu_model, r->isa, (int)r->threads, r->load_avg);
            for (k = 0; k < r->n_kernels; k++) printf(" %s x%llu", r->kernels[k].name, (unsigned long long)r->kernels[k].launches);
            printf("\n");
            if (bw[b] <= 0) continue;
            printf("      roofline: a decode step reads its weights and the K/V before it; at the %s's %.0f GB/s (%s, measured now):\n",
                   b == 0 ? "GPU" : "CPU", bw[b], b == 0 ? "device copy, bytes read + written" : "memory read, these threads");
            for (k = 0; k < r->n_results; k++) {
                const bitnet_bench_result *x = &r->results[k];
                const double bytes = bench_step_bytes(&info[b], (double)x->prompt_tokens + ((double)x->gen_tokens - 1) / 2);
                printf("        prompt %d: %.1f MB a step, at most %.0f tokens/s; gen tok/s at %.3f of it\n", (int)x->prompt_tokens,
                       bytes / 1e6, bw[b] * 1e9 / bytes, x->gen_tps * bytes / (bw[b] * 1e9));
            }
        }
    }

    /* determinism: every greedy run alike, seeded runs alike, and CPU and GPU alike */
    if (o.check_determinism && rc == 0) {
        int bad = 0;
        for (b = 0; b < 2; b++) {
            size_t k;
            if (!rec[b]) continue;
            for (k = 0; k < rec[b]->n_results; k++)
                if (!rec[b]->results[k].outputs_identical) {
                    fprintf(stderr, "bench: determinism: %s greedy runs differ at prompt %d\n", names[b], (int)rec[b]->results[k].prompt_tokens);
                    bad = 1;
                }
            if (!rec[b]->seeded_runs_identical) {
                fprintf(stderr, "bench: determinism: two %s runs with seed 1234 gave different tokens\n", names[b]);
                bad = 1;
            }
        }
        if (rec[0] && rec[1] && info[0].head_bits != info[1].head_bits) /* then the logits differ by the head's rounding (~1e-2) */
            fprintf(stderr, "bench: determinism: note: the cuda head is %s and the cpu head %s; BITNET_HEAD=%s compares like for like\n",
                    info[0].head_bits == 8 ? "int8" : "fp16", info[1].head_bits == 8 ? "int8" : "fp16", info[0].head_bits == 8 ? "q8" : "f16");
        if (rec[0] && rec[1]) {
            size_t k, t;
            for (k = 0; k < rec[0]->n_results; k++) {
                const int32_t *g = tokens[0] + k * (size_t)o.params.gen_tokens, *c = tokens[1] + k * (size_t)o.params.gen_tokens;
                for (t = 0; t < (size_t)o.params.gen_tokens && g[t] == c[t]; t++) {}
                if (t < (size_t)o.params.gen_tokens) {
                    fprintf(stderr, "bench: determinism: greedy cuda and cpu tokens differ at prompt %d, token %zu (%d vs %d)\n",
                            (int)rec[0]->results[k].prompt_tokens, t, (int)g[t], (int)c[t]);
                    bad = 1;
                }
            }
        }
        if (bad) rc = 1;
        else printf("determinism: ok (%s)\n", rec[0] && rec[1] ? "repeat runs, seeded runs, cuda = cpu" : "repeat runs, seeded runs");
    }

    /* outputs: receipts per backend, one JSON array and one CSV for all */
    if (o.receipt || o.json || o.csv) {
        FILE *csv = NULL;
        size_t len, total = 0;
        char *all = NULL;
        if (o.csv && !(csv = fopen(o.csv, "wb"))) { fprintf(stderr, "bench: cannot write %s: %s\n", o.csv, strerror(errno)); rc = 1; }
        if (csv) fprintf(csv, "backend,prompt_tokens,gen_tokens,runs,prompt_tps,gen_tps,gen_tps_min,gen_tps_max,ttft_ms,p50_ms,p95_ms,p99_ms,"
                              "wall_ms,peak_host_rss_bytes,peak_device_bytes,threads,isa,load_avg_1m,model_sha256,git_commit\n");
        if (o.json) all = (char *)malloc(2 * sizeof json + 8);
        if (all) memcpy(all, "[\n", 3), total = 2;
        for (b = 2; b-- > 0;) {
            char path[4096];
            size_t k;
            if (!rec[b]) continue;
            if (bitnet_receipt_write(rec[b], json, sizeof json, &len) != BITNET_OK) {
                fprintf(stderr, "bench: %s\n", bitnet_last_error());
                rc = 1;
                continue;
            }
            if (o.receipt) {
                bench_receipt_path(o.receipt, names[b], several, path, sizeof path);
                if (bench_write_text(path, json, len)) printf("receipt: %s\n", path);
                else rc = 1;
            }
            if (all) {
                if (total > 2) memcpy(all + total - 1, ",\n", 3), total++;
                memcpy(all + total, json, len + 1);
                total += len;
            }
            for (k = 0; csv && k < rec[b]->n_results; k++) {
                const bitnet_bench_result *x = &rec[b]->results[k];
                fprintf(csv, "%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.3f,%llu,%llu,%d,%s,%.2f,%s,%s\n", rec[b]->backend,
                        (int)x->prompt_tokens, (int)x->gen_tokens, (int)x->runs, x->prompt_tps, x->gen_tps, x->gen_tps_min,
                        x->gen_tps_max, x->ttft_ms, x->p50_ms, x->p95_ms, x->p99_ms, x->wall_ms,
                        (unsigned long long)rec[b]->peak_host_rss_bytes, (unsigned long long)rec[b]->peak_device_bytes,
                        (int)rec[b]->threads, rec[b]->isa, rec[b]->load_avg, rec[b]->model_sha256, rec[b]->git_commit);
            }
        }
        if (csv && fclose(csv) != 0) { fprintf(stderr, "bench: cannot write %s\n", o.csv); rc = 1; }
        if (o.json) {
            if (!all) { fprintf(stderr, "bench: out of memory\n"); rc = 1; }
            else {
                memcpy(all + total, "]\n", 3);
                total += 2;
                if (!bench_write_text(o.json, all, total)) rc = 1;
            }
        }
        free(all);
    }
    for (b = 0; b < 2; b++) { free(rec[b]); free(tokens[b]); }
    if (rc == 0 && gpu_missing && o.require_gpu) rc = 3;
    return rc;
}

static int cmd_verify_receipt(int argc, char **argv) {
    const char *path = NULL;
    bitnet_receipt_gates gates;
    bitnet_receipt *r;
    char *json = NULL, report[8192];
    size_t len;
    int i, err, breaches = 0, rc;
    memset(&gates, 0, sizeof gates);
    for (i = 1; i < argc; i++) {
        double *gate = NULL;
        if (strcmp(argv[i], "--require-gpu-kernels") == 0) { gates.require_gpu_kernels = 1; continue; }
        if (strcmp(argv[i], "--min-tps") == 0) gate = &gates.min_tps;
        else if (strcmp(argv[i], "--max-p95-ms") == 0) gate = &gates.max_p95_ms;
        else if (strcmp(argv[i], "--max-wall-ms") == 0) gate = &gates.max_wall_ms;
        else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "verify-receipt: unexpected argument '%s'\n", argv[i]);
            return 2;
        } else { path = argv[i]; continue; }
        if ((*gate = cli_positive(i + 1 < argc ? argv[i + 1] : NULL)) < 0) {
            fprintf(stderr, "verify-receipt: %s needs a positive number\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (!path) {
        fprintf(stderr, "usage: bitnet verify-receipt FILE [--require-gpu-kernels] [--min-tps X] [--max-p95-ms Y] [--max-wall-ms Z]\n");
        return 2;
    }
    if ((err = cli_read_file(path, BITNET_RECEIPT_MAX_BYTES, &json, &len)) != 0) {
        fprintf(stderr, "verify-receipt: cannot read %s: %s\n", path,
                err == EFBIG ? "larger than a receipt may be" : strerror(err));
        return 2;
    }
    r = (bitnet_receipt *)malloc(sizeof *r);
    if (!r) { free(json); fprintf(stderr, "verify-receipt: out of memory\n"); return 2; }
    if (bitnet_receipt_parse(json, len, r) != BITNET_OK) {
        fprintf(stderr, "verify-receipt: %s is not a valid receipt: %s\n", path, bitnet_last_error());
        rc = 2;
    } else if (bitnet_receipt_check(r, &gates, report, sizeof report, &breaches) != BITNET_OK) {
        fprintf(stderr, "verify-receipt: %s\n", bitnet_last_error());
        rc = 2;
    } else if (breaches) {
        char *line = report, *nl;
        for (; *line; line = nl + 1) {
            if (!(nl = strchr(line, '\n'))) { fprintf(stderr, "verify-receipt: breach: %s\n", line); break; }
            fprintf(stderr, "verify-receipt: breach: %.*s\n", (int)(nl - line), line);
        }
        fprintf(stderr, "verify-receipt: %s: %d breach%s\n", path, breaches, breaches == 1 ? "" : "es");
        rc = 1;
    } else {
        size_t k;
        printf("receipt ok: %s: %s backend%s%s, %zu kernels, schema %s, commit %s\n", path, r->backend,
               r->has_gpu ? " on " : "", r->has_gpu ? r->gpu_name : "", r->n_kernels, r->schema_version, r->git_commit);
        for (k = 0; k < r->n_results; k++)
            printf("  prompt %d: %.1f tokens/s prompt, %.1f tokens/s generation (%d tokens), p95 %.3f ms, wall %.1f ms\n",
                   (int)r->results[k].prompt_tokens, r->results[k].prompt_tps, r->results[k].gen_tps,
                   (int)r->results[k].gen_tokens, r->results[k].p95_ms, r->results[k].wall_ms);
        rc = 0;
    }
    free(r);
    free(json);
    return rc;
}

/* tokenize: prints the ids of -p TEXT (comma-separated, as `eval --tokens` takes them), or one line
   of ids per line of --hex-lines FILE (each line the hex of one text: texts may hold newlines). */
static int tok_hex_value(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
static int tok_print(const bitnet_tokenizer *t, const char *text, size_t len, int bos, int special) {
    size_t n = 0, i;
    int32_t *ids;
    if (tokenize_all(t, text, len, bos, special, &ids, &n) != BITNET_OK) { free(ids); return -1; }
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
        bitnet_gguf *g = NULL;
        r = bitnet_gguf_open(model, &g);
        if (r == BITNET_OK) r = bitnet_tokenizer_from_gguf(g, &t);
        bitnet_gguf_close(g);
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

static int bench_kernels_cuda(int argc, char **argv);

/* ---- bench-kernels: ternary GEMV/GEMM speed against the machine's memory-read bandwidth ----- */
#if defined(__linux__) || defined(__APPLE__)
#include <sys/mman.h>
#endif

typedef struct { const uint8_t *p; size_t n; uint64_t part[256]; } bench_mem;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) static uint64_t bench_sum_avx512(const uint8_t *p, size_t n) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i;
    for (i = 0; i + 256 <= n; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p + i + 64)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p + i + 128)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}
__attribute__((target("avx2"))) static uint64_t bench_sum_avx2(const uint8_t *p, size_t n) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    uint64_t o[4];
    size_t i;
    for (i = 0; i + 128 <= n; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    _mm256_storeu_si256((__m256i *)(void *)o, _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
    return o[0] + o[1] + o[2] + o[3];
}
#endif

static uint64_t bench_sum_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i;
    for (i = 0; i + 4 <= n / 8; i += 4) { s0 += q[i]; s1 += q[i + 1]; s2 += q[i + 2]; s3 += q[i + 3]; }
    return s0 + s1 + s2 + s3;
}

/* Each thread sums its own 4 KB-aligned slice with the widest loads the CPU has. */
static void bench_mem_task(void *arg, int ith, int nth) {
    bench_mem *b = (bench_mem *)arg;
    size_t per = (b->n / (size_t)nth) & ~(size_t)4095;
    const uint8_t *p = b->p + per * (size_t)ith;
    size_t len = ith == nth - 1 ? b->n - per * (size_t)ith : per;
    uint64_t s;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (bitnet_cpu_has_isa(BITNET_ISA_AVX512)) s = bench_sum_avx512(p, len);
    else if (bitnet_cpu_has_isa(BITNET_ISA_AVX2)) s = bench_sum_avx2(p, len);
    else
#endif
        s = bench_sum_scalar(p, len);
    b->part[ith] = s;
}

/* Best of `passes` passes over the buffer, GB/s. */
static double bench_mem_bw(const uint8_t *p, size_t n, int passes) {
    bench_mem b;
    double best = 0;
    int rep;
    memset(&b, 0, sizeof b);
    b.p = p;
    b.n = n;
    for (rep = 0; rep < passes; rep++) {
        double t = bitnet__now();
        bitnet__parallel(bench_mem_task, &b);
        t = bitnet__now() - t;
        if ((double)n / t / 1e9 > best) best = (double)n / t / 1e9;
    }
    return best;
}

/* A large buffer in huge pages where the system has them (fewer TLB misses in a bandwidth test). */
static uint8_t *bench_arena(size_t n) {
#if defined(__linux__) || defined(__APPLE__)
    uint8_t *p = (uint8_t *)mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == (uint8_t *)MAP_FAILED) return NULL;
#if defined(MADV_HUGEPAGE)
    madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
#else
    return (uint8_t *)malloc(n);
#endif
}
static void bench_arena_free(uint8_t *p, size_t n) {
#if defined(__linux__) || defined(__APPLE__)
    if (p) munmap(p, n);
#else
    (void)n;
    free(p);
#endif
}

/* bench's CPU yardstick: GB/s of a 512 MB read by the pool's threads (best of 3); 0 without memory. */
static double bench_cpu_read_bw(void) {
    const size_t n = (size_t)512 << 20;
    uint8_t *p = bench_arena(n);
    double bw;
    if (!p) return 0;
    memset(p, 1, n);
    bw = bench_mem_bw(p, n, 3);
    bench_arena_free(p, n);
    return bw;
}

static void bench_nop(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

typedef struct { size_t n, k; } bench_shape;
typedef struct { char shape[32]; size_t m; bitnet_isa isa; int threads; double us, gbps, gops, ratio; } bench_row;

/* Best mean time of one call, in seconds: a warm-up call (which alone is the measure when a call
   is slow, as the scalar GEMM is), then ~50 ms batches for `budget` seconds. Every call takes the
   next of the `copies` weight copies, so the weights come from DRAM. */
static double bench_time(const uint8_t *arena, size_t stride, size_t copies, size_t n, size_t k, const int8_t *a,
                         const float *as, const int32_t *asum, size_t m, float *out, double budget) {
    const size_t wb = n * k / 4 + 32;
    double best = 1e30, spent = 0, t = bitnet__now();
    size_t idx = 0;
    bitnet_gemm_i2s(arena, wb, n, k, a, as, asum, m, out);
    t = bitnet__now() - t;
    if (t > 0.1) return t;
    while (spent < budget) {
        int calls = 0;
        double t0 = bitnet__now(), dt;
        do {
            idx = (idx + 1) % copies;
            bitnet_gemm_i2s(arena + idx * stride, wb, n, k, a, as, asum, m, out);
            calls++;
        } while ((dt = bitnet__now() - t0) < 0.05);
        spent += dt;
        if (dt / calls < best) best = dt / calls;
    }
    return best;
}

static int cmd_bench_kernels(int argc, char **argv) {
    static const bench_shape shapes[] = {{2560, 2560}, {3840, 2560}, {13824, 2560}, {2560, 6912}, {20480, 3200}};
    enum { N_SHAPES = sizeof shapes / sizeof shapes[0], N_PASSES = 5, SCALAR_PASS = N_PASSES - 1 };
    static const size_t ms[] = {1, 64};
    const size_t rotate = (size_t)512 << 20, arena_bytes = rotate + ((size_t)32 << 20);
    const char *backend = "cpu", *json = NULL;
    bench_row rows[128];
    int n_rows = 0, i, th, pass;
    size_t si, mi, c;
    uint8_t *arena;
    double mem_bw, mem_bw1, t_start = bitnet__now();
    for (i = 1; i + 1 < argc; i++) /* the CUDA side has flags of its own (--bitnetcpp, --device) */
        if (strcmp(argv[i], "--backend") == 0 && strcmp(argv[i + 1], "cuda") == 0) return bench_kernels_cuda(argc, argv);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: bitnet bench-kernels [--backend cpu|cuda] [--json FILE]\n");
            return 2;
        }
    }
    if (strcmp(backend, "cpu") != 0) {
        fprintf(stderr, "bench-kernels: unknown backend '%s' (cpu or cuda)\n", backend);
        return 2;
    }

    /* One arena: memory bandwidth is measured over it, and each shape's weights are laid out in
       it as distinct copies (>= 512 MB in all) that the calls rotate through, so every call reads
       its weights from DRAM, not from the caches. Random valid codes (no 3s). */
    arena = bench_arena(arena_bytes);
    if (!arena) {
        fprintf(stderr, "bench-kernels: cannot allocate %zu MB\n", arena_bytes >> 20);
        return 1;
    }
    {
        uint64_t x = 0x9E3779B97F4A7C15ull, *q = (uint64_t *)(void *)arena;
        for (c = 0; c < arena_bytes / 8; c++) {
            uint64_t v;
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
            v = x * 2685821657736338717ull;
            q[c] = v & ~(((v >> 1) & v & 0x5555555555555555ull) << 1); /* code 3 -> 1 */
        }
    }

    /* The bandwidth is measured again before each (shape, m) group of rows and the best value of
       the run is the reference, so a busy moment during one measurement cannot flatter the ratios. */
    bitnet_set_num_threads(2);
    mem_bw = bench_mem_bw(arena, arena_bytes, 3);
    {
        double t = bitnet__now();
        for (i = 0; i < 10000; i++) bitnet__parallel(bench_nop, NULL);
        t = (bitnet__now() - t) / 10000;
        bitnet_set_num_threads(1);
        mem_bw1 = bench_mem_bw(arena, arena_bytes, 3);
        printf("memory read bandwidth: %.2f GB/s with 2 threads (%.2f with 1); pool dispatch %.2f us\n", mem_bw, mem_bw1,
               t * 1e6);
    }
    printf("%-12s %4s %-7s %3s %12s %10s %9s %7s\n", "shape", "m", "isa", "thr", "us", "weight_GB/s", "GOPS", "ratio");

    /* The SIMD rows are measured in several passes spread over the run (m = 1 in passes 0-3, m = 64
       in passes 0-1) and keep their best time, as the bandwidth keeps its best value, so a busy
       moment on a shared machine decides neither; the last pass measures the scalar rows once
       (slow, and only a reference). The rows stay in table order: shape, m, isa, threads. */
    for (pass = 0; pass < N_PASSES; pass++) {
        int row = 0;
        for (si = 0; si < N_SHAPES; si++) {
            const size_t n = shapes[si].n, k = shapes[si].k, wb = n * k / 4 + 32;
            const size_t stride = (wb + 4095) & ~(size_t)4095;
            size_t copies = rotate / stride + 1;
            float one = 1.0f, *out = (float *)malloc(64 * n * sizeof(float));
            if (copies * stride > arena_bytes) copies = arena_bytes / stride;
            for (c = 0; c < copies; c++) memcpy(arena + c * stride + n * k / 4, &one, 4);
            for (mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
                const size_t m = ms[mi];
                int8_t *a = (int8_t *)malloc(m * k);
                float *as = (float *)malloc(m * sizeof(float));
                int32_t *asum = (int32_t *)malloc(m * sizeof(int32_t));
                int isa;
                const int active = pass == SCALAR_PASS || (pass < (m == 1 ? 4 : 2) && (pass == 0 || bitnet__now() - t_start < 35));
                if (active && pass != SCALAR_PASS && pass + si + mi > 0) {
                    double bw;
                    bitnet_set_num_threads(2);
                    bw = bench_mem_bw(arena, (size_t)256 << 20, 2); /* far beyond the caches */
                    if (bw > mem_bw) mem_bw = bw;
                }
                for (c = 0; c < m; c++) {
                    size_t j;
                    asum[c] = 0;
                    as[c] = 1.0f;
                    for (j = 0; j < k; j++) asum[c] += a[c * k + j] = (int8_t)((j * 7 + c * 13) % 255 - 127);
                }
                for (isa = BITNET_ISA_SCALAR; isa < BITNET_ISA_COUNT; isa++) {
                    if (!bitnet_cpu_has_isa((bitnet_isa)isa)) continue;
                    bitnet_cpu_set_isa((bitnet_isa)isa);
                    for (th = 1; th <= 2; th++) {
                        bench_row *r = &rows[row++];
                        double t;
                        if (pass == 0) {
                            snprintf(r->shape, sizeof r->shape, "%zux%zu", n, k);
                            r->m = m;
                            r->isa = (bitnet_isa)isa;
                            r->threads = th;
                            r->us = 1e30;
                            n_rows = row;
                        }
                        if (!active || (isa == BITNET_ISA_SCALAR) != (pass == SCALAR_PASS)) continue;
                        bitnet_set_num_threads(th);
                        t = bench_time(arena, stride, copies, n, k, a, as, asum, m, out, 0.1) * 1e6;
                        if (t < r->us) r->us = t;
                        r->gbps = (double)(n * k / 4) / r->us / 1e3;
                        r->gops = 2.0 * (double)m * (double)n * (double)k / r->us / 1e3;
                        printf("%-12s %4zu %-7s %3d %12.1f %10.2f %9.1f %7.3f%s\n", r->shape, m, bitnet_isa_name(r->isa), th,
                               t, (double)(n * k / 4) / t / 1e3, 2.0 * (double)m * (double)n * (double)k / t / 1e3,
                               (double)(n * k / 4) / t / 1e3 / mem_bw, pass && pass != SCALAR_PASS ? "  (again)" : "");
                        fflush(stdout);
                    }
                }
                free(a);
                free(as);
                free(asum);
            }
            free(out);
        }
    }
    bitnet_cpu_set_isa(BITNET_ISA_AUTO);
    bitnet_set_num_threads(0);
    bench_arena_free(arena, arena_bytes);
    /* The final table (markdown): best time per row, ratios against the best bandwidth of the run. */
    printf("\nmemory read bandwidth (2 threads, best of the run): %.2f GB/s\n\n", mem_bw);
    printf("| shape | m | isa | threads | us | weight GB/s | GOPS | ratio to mem bw |\n|---|---|---|---|---|---|---|---|\n");
    for (i = 0; i < n_rows; i++) {
        rows[i].ratio = rows[i].gbps / mem_bw;
        printf("| %s | %zu | %s | %d | %.1f | %.2f | %.1f | %.3f |\n", rows[i].shape, rows[i].m, bitnet_isa_name(rows[i].isa),
               rows[i].threads, rows[i].us, rows[i].gbps, rows[i].gops, rows[i].ratio);
    }
    printf("\ntotal %.1f s\n", bitnet__now() - t_start);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "bench-kernels: cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "{\"mem_bw_gbps\": %.3f, \"rows\": [", mem_bw);
        for (i = 0; i < n_rows; i++)
            fprintf(f, "%s\n  {\"shape\": \"%s\", \"m\": %zu, \"isa\": \"%s\", \"threads\": %d, \"us\": %.2f, "
                       "\"weight_gbps\": %.3f, \"gops\": %.2f, \"ratio_to_mem_bw\": %.4f}",
                    i ? "," : "", rows[i].shape, rows[i].m, bitnet_isa_name(rows[i].isa), rows[i].threads, rows[i].us,
                    rows[i].gbps, rows[i].gops, rows[i].ratio);
        fprintf(f, "\n]}\n");
        fclose(f);
    }
    return 0;
}

/* ---- info: metadata and the tensor table of a GGUF file ------------------------------------- */

/* Prints at most max bytes of s, escaping control bytes and quotes. */
static void print_escaped(const char *s, uint64_t len, size_t max) {
    uint64_t i;
    putchar('"');
    for (i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (len > max) printf("... (%llu bytes)", (unsigned long long)len);
}

/* One element of a numeric array or scalar, stored little-endian at p. */
static void print_number(bitnet_gguf_type t, const unsigned char *p) {
    uint64_t u = 0;
    int i, n = t == BITNET_GGUF_UINT8 || t == BITNET_GGUF_INT8 || t == BITNET_GGUF_BOOL ? 1
             : t == BITNET_GGUF_UINT16 || t == BITNET_GGUF_INT16 ? 2
             : t == BITNET_GGUF_UINT32 || t == BITNET_GGUF_INT32 || t == BITNET_GGUF_FLOAT32 ? 4 : 8;
    for (i = 0; i < n; i++) u |= (uint64_t)p[i] << (8 * i);
    switch (t) {
    case BITNET_GGUF_INT8: printf("%d", (int)(int8_t)u); break;
    case BITNET_GGUF_INT16: printf("%d", (int)(int16_t)u); break;
    case BITNET_GGUF_INT32: printf("%d", (int)(int32_t)u); break;
    case BITNET_GGUF_INT64: printf("%lld", (long long)(int64_t)u); break;
    case BITNET_GGUF_BOOL: printf("%s", u ? "true" : "false"); break;
    case BITNET_GGUF_FLOAT32: { uint32_t b = (uint32_t)u; float f; memcpy(&f, &b, 4); printf("%g", (double)f); break; }
    case BITNET_GGUF_FLOAT64: { double d; memcpy(&d, &u, 8); printf("%g", d); break; }
    default: printf("%llu", (unsigned long long)u); break;
    }
}

static int cmd_info(int argc, char **argv) {
    bitnet_gguf *g = NULL;
    bitnet_model_info mi;
    bitnet_result r;
    uint64_t i, n;
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: bitnet info FILE.gguf\n");
        return 2;
    }
    if ((r = bitnet_gguf_open(argv[1], &g)) != BITNET_OK) {
        fprintf(stderr, "bitnet info: %s: %s\n", bitnet_result_string(r), bitnet_last_error());
        return 1;
    }
    printf("%s: GGUF v%u, %llu bytes (%s), alignment %u, data section at offset %llu\n", argv[1], bitnet_gguf_version(g),
           (unsigned long long)bitnet_gguf_size(g), bitnet_gguf_is_mapped(g) ? "mapped" : "read", bitnet_gguf_alignment(g),
           (unsigned long long)bitnet_gguf_data_offset(g));
    n = bitnet_gguf_kv_count(g);
    printf("\nmetadata: %llu keys\n", (unsigned long long)n);
    for (i = 0; i < n; i++) {
        const char *key = bitnet_gguf_key_name(g, i);
        bitnet_gguf_type t = bitnet_gguf_key_type(g, i);
        if (!key) continue;
        printf("  %-44s %-8s ", key, bitnet_gguf_type_name(t));
        if (t == BITNET_GGUF_STRING) {
            bitnet_gguf_str s;
            bitnet_gguf_get_str(g, key, &s);
            print_escaped(s.ptr, s.len, 72);
        } else if (t == BITNET_GGUF_ARRAY) {
            bitnet_gguf_type et;
            uint64_t cnt, j;
            bitnet_gguf_get_arr(g, key, &et, &cnt);
            printf("%s x %llu: [", bitnet_gguf_type_name(et), (unsigned long long)cnt);
            for (j = 0; j < cnt && j < 6; j++) {
                if (j) printf(", ");
                if (et == BITNET_GGUF_STRING) {
                    bitnet_gguf_str s;
                    bitnet_gguf_arr_str(g, key, j, &s);
                    print_escaped(s.ptr, s.len, 24);
                } else {
                    const unsigned char *d = (const unsigned char *)bitnet_gguf_arr_data(g, key);
                    size_t esz = et == BITNET_GGUF_UINT8 || et == BITNET_GGUF_INT8 || et == BITNET_GGUF_BOOL ? 1
                               : et == BITNET_GGUF_UINT16 || et == BITNET_GGUF_INT16 ? 2
                               : et == BITNET_GGUF_UINT32 || et == BITNET_GGUF_INT32 || et == BITNET_GGUF_FLOAT32 ? 4 : 8;
                    print_number(et, d + j * esz);
                }
            }
            printf("%s]", cnt > 6 ? ", ..." : "");
        } else {
            /* scalars: through the widest getter of their kind */
            if (t == BITNET_GGUF_FLOAT32 || t == BITNET_GGUF_FLOAT64) {
                double d = 0;
                bitnet_gguf_get_f64(g, key, &d);
                printf("%g", d);
            } else if (t == BITNET_GGUF_BOOL) {
                int b = 0;
                bitnet_gguf_get_bool(g, key, &b);
                printf("%s", b ? "true" : "false");
            } else if (t == BITNET_GGUF_INT8 || t == BITNET_GGUF_INT16 || t == BITNET_GGUF_INT32 || t == BITNET_GGUF_INT64) {
                int64_t v = 0;
                bitnet_gguf_get_i64(g, key, &v);
                printf("%lld", (long long)v);
            } else {
                uint64_t v = 0;
                bitnet_gguf_get_u64(g, key, &v);
                printf("%llu", (unsigned long long)v);
            }
        }
        putchar('\n');
    }
    n = bitnet_gguf_tensor_count(g);
    printf("\ntensors: %llu\n  %-32s %-5s %-24s %12s %12s\n", (unsigned long long)n, "name", "type", "shape (ne0 first)",
           "offset", "bytes");
    for (i = 0; i < n; i++) {
        bitnet_tensor_info t;
        char shape[96];
        int d, len = 0;
        bitnet_gguf_tensor(g, i, &t);
        for (d = 0; d < t.n_dims; d++)
            len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%llu", d ? ", " : "[", (unsigned long long)t.ne[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("  %-32s %-5s %-24s %12llu %12llu\n", t.name, bitnet_tensor_type_name(t.type), shape,
               (unsigned long long)(bitnet_gguf_data_offset(g) + t.offset), (unsigned long long)t.bytes);
    }
    r = bitnet_gguf_check_bitnet(g, &mi);
    if (r == BITNET_OK)
        printf("\nBitNet check: ok (%s: dim %d, %d layers, %d heads, %d kv heads, ffn %d (%s), vocab %d, context %d, "
               "rope theta %g%s, eps %g, bos %d, eos %d, eot %d, chat template %s)\n",
               mi.arch, mi.dim, mi.n_layers, mi.n_heads, mi.n_kv_heads, mi.ffn_dim,
               mi.ffn_act == BITNET_FFN_SILU ? (mi.sub_norms ? "silu(gate) * up" : "silu(gate) * up, no sub-norms") : "relu(gate)^2 * up",
               mi.n_vocab, mi.n_ctx_train,
               (double)mi.rope_theta, mi.rope_freqs ? " with rope_freqs" : "", (double)mi.norm_eps, mi.bos, mi.eos, mi.eot,
               mi.chat_template == BITNET_CHAT_LLAMA3 ? "llama3" : mi.chat_template == BITNET_CHAT_FALCON3 ? "falcon3" : "bitnet");
    else
        printf("\nBitNet check: %s: %s\n", bitnet_result_string(r), bitnet_last_error());
    bitnet_gguf_close(g);
    return 0;
}

/* ---- gen-model: a GGUF with random weights in bitnet.cpp's layout ----------------------------- */

typedef struct gm_preset {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, ffn, ctx;
} gm_preset;
static const gm_preset gm_presets[] = {
    {"tiny", 128, 2, 4, 2, 384, 512},      /* byte-level BPE; committed as tests/data/tiny.gguf */
    {"small", 512, 4, 8, 2, 1536, 2048},   /* byte-level BPE; quick speed checks */
    {"2b4t", 2560, 30, 20, 5, 6912, 4096}, /* BitNet b1.58 2B-4T's exact shape, LLaMA 3 vocabulary */
    {"falcon3-1b", 2048, 18, 8, 4, 8192, 4096}, /* Falcon3-1B-Instruct-1.58bit's (head_dim 256), LLaMA 3 vocabulary */
    {"llama3-8b", 4096, 32, 32, 8, 14336, 8192}, /* Llama3-8B-1.58's, LLaMA 3 vocabulary */
    {"1bitllm-3b", 3200, 26, 32, 32, 8640, 2048}, /* bitnet_b1_58-3B's (head_dim 100, ffn not whole I2_S blocks: float types) */
};

/* splitmix64: fast, and every tensor gets its own stream so the output does not depend on chunking. */
static uint64_t gm_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* N(0, 1) quantised to 65536 levels: table[i] = the inverse normal CDF at (i + 0.5) / 65536, by
   Newton steps on erfc. One random 64-bit word then gives four samples (gigabytes of weights in
   seconds). */
static float gm_table[65536];
static void gm_table_init(void) {
    int i, it;
    double x = -5;
    for (i = 0; i < 65536; i++) {
        double p = (i + 0.5) / 65536.0;
        for (it = 0; it < 50; it++) { /* x from the previous entry is a good start */
            double cdf = 0.5 * erfc(-x / sqrt(2.0)), pdf = exp(-0.5 * x * x) / sqrt(2.0 * 3.141592653589793);
            double step = (cdf - p) / pdf;
            x -= step;
            if (fabs(step) < 1e-12) break;
        }
        gm_table[i] = (float)x;
    }
}
/* n samples of N(0, sd^2) into out. */
static void gm_normals(uint64_t *s, float *out, size_t n, float sd) {
    size_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        uint64_t r = gm_next(s);
        out[i] = gm_table[r & 0xffff] * sd;
        out[i + 1] = gm_table[(r >> 16) & 0xffff] * sd;
        out[i + 2] = gm_table[(r >> 32) & 0xffff] * sd;
        out[i + 3] = gm_table[r >> 48] * sd;
    }
    for (; i < n; i++) out[i] = gm_table[gm_next(s) & 0xffff] * sd;
}

/* English text the tiny tokenizer learns its merges from (written for this project). */
static const char gm_text[] =
    "The small model in this file was made by a program, not trained on anything. Its weights are random numbers, "
    "squeezed to minus one, zero and one, the way a ternary network stores them. It cannot answer questions and it "
    "does not know any facts. What it can do is run: the same shapes, the same metadata and the same tensor layout "
    "as a real model, so that every part of the library that reads, checks, tokenizes and generates can be tested "
    "quickly on a laptop or in a build machine, without a download.\n"
    "A ternary weight takes one of three values. Each matrix keeps a single scale, the mean of the absolute values "
    "of the weights before they were rounded. When the network runs, the activations of every token are rounded to "
    "eight bit integers with a scale of their own, and the products are added up as integers before both scales are "
    "applied again. This is why such models are fast on a processor: most of the work is adding and subtracting "
    "small numbers, and the weights take about two bits each in memory.\n"
    "The tokenizer in this file works on bytes. Every byte has a token, so any text can be written down, and the "
    "merges join the pairs of tokens that were seen most often in this paragraph and the ones around it. Words such "
    "as the, and, of, to, in, is, that, it, with, for, on, as, are, was and this become single tokens quickly, and "
    "longer words follow: model, weights, tokens, numbers, network, integers, memory, processor, generation.\n"
    "There are also three special tokens. One begins the text, one ends it, and one ends a turn in a conversation, "
    "like this: User: What is two plus two?<|eot_id|>Assistant: Four.<|eot_id|> The model will not say four, of "
    "course; it will say whatever its random weights prefer, again and again, which is still enough to measure how "
    "many tokens per second the program can produce and to check that two programs produce the same ones.\n"
    "Numbers such as 1, 2, 3, 10, 42, 100, 128, 256, 512, 1024, 2048 and 4096 appear here too, and so do a few "
    "signs: commas, full stops, colons; quotes \"like these\", brackets (like these) and the odd exclamation mark!\n"
    "Because the weights are random, the generated text is a stream of tokens that follows no meaning. That is fine "
    "for a test. A test asks whether the numbers that come out of the program are the numbers that should come "
    "out, whether two ways of computing the same thing agree, and whether the program stays within its time and "
    "memory. It does not ask whether the story is any good. For a story, download a real model, one that was "
    "trained on a great deal of text, and point the program at that file instead of this one.\n"
    "Here is a short list of things to try. Generate a model with a different seed and compare the files. Print "
    "the metadata with the info command and read the shapes of the tensors. Run the model on the processor and "
    "then on the graphics card, and check that the tokens are the same. Change one byte in the file and see the "
    "reader refuse it with a message that says what is wrong and where.\n";

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest move to U+0100 on. */
static int gm_byte_cp(int b) {
    int n = 0, c;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    for (c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
    return 256 + n;
}
/* Appends the GPT-2 form of bytes[0..n) to out (UTF-8); returns the new length. */
static size_t gm_token_str(const unsigned char *bytes, size_t n, char *out, size_t len) {
    size_t i;
    for (i = 0; i < n; i++) {
        int cp = gm_byte_cp(bytes[i]);
        if (cp < 0x80) out[len++] = (char)cp;
        else {
            out[len++] = (char)(0xc0 | (cp >> 6));
            out[len++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    return len;
}

typedef struct gm_vocab {
    bitnet_gguf_str *tokens, *merges;
    int32_t *types;
    int n_tokens, n_merges;
    char *storage;
    bitnet_vocab llama3; /* 2b4t: the library's tiktoken conversion owns the arrays */
} gm_vocab;

/* Byte-level BPE learnt from gm_text: 256 byte tokens, up to max_merges merges, then the specials.
   Words (an optional space then letters, digits, or other symbols) are merged within themselves
   only, as the LLaMA 3 pre-tokenizer splits text. */
static int gm_byte_vocab(int max_merges, gm_vocab *v) {
    static const char *const specials[3] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
    enum { MAXW = 1024, MAXL = 64 };
    int words[MAXW][MAXL], wlen[MAXW], wcount[MAXW], nw = 0, i, j, m;
    unsigned char tok_bytes[256 + 512][32];
    int tok_len[256 + 512];
    size_t pos = 0, tl = sizeof gm_text - 1, store = 0;
    /* split into words and count the distinct ones */
    while (pos < tl) {
        size_t s = pos, e;
        int w[MAXL], n = 0, k;
        unsigned char c;
        if (gm_text[s] == ' ' && s + 1 < tl && gm_text[s + 1] != ' ') pos++;
        c = (unsigned char)gm_text[pos];
        e = pos + 1;
        if (isalpha(c)) while (e < tl && isalpha((unsigned char)gm_text[e])) e++;
        else if (isdigit(c)) while (e < tl && e - pos < 3 && isdigit((unsigned char)gm_text[e])) e++;
        else if (!isspace(c)) while (e < tl && !isalnum((unsigned char)gm_text[e]) && !isspace((unsigned char)gm_text[e])) e++;
        for (k = (int)s; k < (int)e && n < MAXL; k++) w[n++] = (unsigned char)gm_text[k];
        pos = e;
        for (k = 0; k < nw; k++)
            if (wlen[k] == n && memcmp(words[k], w, (size_t)n * sizeof(int)) == 0) break;
        if (k < nw) wcount[k]++;
        else if (nw < MAXW) {
            memcpy(words[nw], w, (size_t)n * sizeof(int));
            wlen[nw] = n;
            wcount[nw++] = 1;
        }
    }
    for (i = 0; i < 256; i++) tok_bytes[i][0] = (unsigned char)i, tok_len[i] = 1;
    if (max_merges > 512) max_merges = 512;
    v->merges = (bitnet_gguf_str *)calloc((size_t)max_merges + 1, sizeof *v->merges);
    v->tokens = (bitnet_gguf_str *)calloc(256 + (size_t)max_merges + 3, sizeof *v->tokens);
    v->types = (int32_t *)calloc(256 + (size_t)max_merges + 3, sizeof *v->types);
    v->storage = (char *)malloc((256 + (size_t)max_merges + 3) * 200);
    if (!v->merges || !v->tokens || !v->types || !v->storage) return 0;
    /* merge the most frequent adjacent pair (ties: the lowest ids) until pairs repeat no more */
    for (m = 0; m < max_merges; m++) {
        static int counts[768][768];
        int best = 0, ba = -1, bb = -1, id = 256 + m, k;
        memset(counts, 0, sizeof counts);
        for (i = 0; i < nw; i++)
            for (j = 0; j + 1 < wlen[i]; j++) counts[words[i][j]][words[i][j + 1]] += wcount[i];
        for (i = 0; i < id; i++)
            for (j = 0; j < id; j++)
                if (counts[i][j] > best && tok_len[i] + tok_len[j] <= 32) best = counts[i][j], ba = i, bb = j;
        if (best < 2) break;
        memcpy(tok_bytes[id], tok_bytes[ba], (size_t)tok_len[ba]);
        memcpy(tok_bytes[id] + tok_len[ba], tok_bytes[bb], (size_t)tok_len[bb]);
        tok_len[id] = tok_len[ba] + tok_len[bb];
        for (i = 0; i < nw; i++) { /* rewrite each word in place */
            for (j = 0, k = 0; j < wlen[i]; j++, k++) {
                if (j + 1 < wlen[i] && words[i][j] == ba && words[i][j + 1] == bb) words[i][k] = id, j++;
                else words[i][k] = words[i][j];
            }
            wlen[i] = k;
        }
        /* the merge string "A B" */
        v->merges[m].ptr = v->storage + store;
        store = gm_token_str(tok_bytes[ba], (size_t)tok_len[ba], v->storage, store);
        v->storage[store++] = ' ';
        store = gm_token_str(tok_bytes[bb], (size_t)tok_len[bb], v->storage, store);
        v->merges[m].len = (uint64_t)(v->storage + store - v->merges[m].ptr);
    }
    v->n_merges = m;
    v->n_tokens = 256 + m + 3;
    for (i = 0; i < 256 + m; i++) {
        v->tokens[i].ptr = v->storage + store;
        store = gm_token_str(tok_bytes[i], (size_t)tok_len[i], v->storage, store);
        v->tokens[i].len = (uint64_t)(v->storage + store - v->tokens[i].ptr);
        v->types[i] = 1; /* normal */
    }
    for (i = 0; i < 3; i++) {
        v->tokens[256 + m + i].ptr = specials[i];
        v->tokens[256 + m + i].len = strlen(specials[i]);
        v->types[256 + m + i] = 3; /* control */
    }
    return 1;
}
static void gm_vocab_free(gm_vocab *v) {
    if (v->llama3.tokens) {
        bitnet_vocab_free(&v->llama3);
        return;
    }
    free(v->tokens);
    free(v->merges);
    free(v->types);
    free(v->storage);
}
/* The id of a token given by its text, or -1. */
static int gm_find_token(const gm_vocab *v, const char *text) {
    int i;
    size_t n = strlen(text);
    for (i = v->n_tokens - 1; i >= 0; i--)
        if (v->tokens[i].len == n && memcmp(v->tokens[i].ptr, text, n) == 0) return i;
    return -1;
}

/* A SentencePiece vocabulary (tokenizer.ggml.model "llama", as LLaMA 2's and 1bitLLM's models have)
   made from a byte-level one: <unk>, <s>, </s>, the 256 <0xXX> byte tokens, then each regular token
   that is valid UTF-8 with its spaces written U+2581 (scored by its place: earlier merges first;
   tokens already holding U+2581 are left out, so no two spell alike), and the special tokens. */
typedef struct gm_spm {
    bitnet_gguf_str *tokens;
    int32_t *types;
    float *scores;
    char *storage;
    int n;
} gm_spm;
static size_t gm_utf8_ok(const unsigned char *s, size_t n) { /* n when s is valid UTF-8 (no overlong checks), else 0 */
    size_t i = 0, k;
    while (i < n) {
        unsigned char c = s[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n) return 0;
        for (k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return n;
}
static int gm_spm_vocab(const gm_vocab *v, gm_spm *o) {
    int cp2b[324] = {0}, i, b;
    size_t at = 0, cap = 0;
    memset(o, 0, sizeof *o);
    for (b = 0; b < 256; b++) cp2b[gm_byte_cp(b)] = b;
    for (i = 0; i < v->n_tokens; i++) cap += 3 * v->tokens[i].len + 8;
    cap += 259 * 8;
    o->tokens = (bitnet_gguf_str *)calloc((size_t)v->n_tokens + 259, sizeof *o->tokens);
    o->types = (int32_t *)calloc((size_t)v->n_tokens + 259, sizeof *o->types);
    o->scores = (float *)calloc((size_t)v->n_tokens + 259, sizeof *o->scores);
    o->storage = (char *)malloc(cap);
    if (!o->tokens || !o->types || !o->scores || !o->storage) return 0;
#define GM_SPM_ADD(S, L, TYPE, SCORE) do { memcpy(o->storage + at, (S), (L)); o->tokens[o->n].ptr = o->storage + at; \
        o->tokens[o->n].len = (L); o->types[o->n] = (TYPE); o->scores[o->n++] = (SCORE); at += (L); } while (0)
    GM_SPM_ADD("<unk>", 5, 2, 0.0f);
    GM_SPM_ADD("<s>", 3, 3, 0.0f);
    GM_SPM_ADD("</s>", 4, 3, 0.0f);
    for (b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        GM_SPM_ADD(hex, 6, 6, 0.0f);
    }
    for (i = 0; i < v->n_tokens; i++) {
        const unsigned char *s = (const unsigned char *)v->tokens[i].ptr;
        unsigned char raw[512], esc[1536];
        size_t n = 0, k = 0, j = 0, m = 0;
        if (v->types[i] != 1) { /* special: as it is */
            GM_SPM_ADD(v->tokens[i].ptr, (size_t)v->tokens[i].len, 3, 0.0f);
            continue;
        }
        while (j < (size_t)v->tokens[i].len && n < sizeof raw) { /* GPT-2's code points back to bytes */
            int c = s[j] < 0x80 ? s[j++] : ((s[j] & 0x1F) << 6) | (s[j + 1] & 0x3F);
            if (c >= 0x80) j += 2;
            raw[n++] = c < 324 ? (unsigned char)cp2b[c] : 0;
        }
        if (!gm_utf8_ok(raw, n)) continue;
        for (k = 0; k < n; k++) {
            if (k + 2 < n && raw[k] == 0xE2 && raw[k + 1] == 0x96 && raw[k + 2] == 0x81) break;
            if (raw[k] == ' ') esc[m++] = 0xE2, esc[m++] = 0x96, esc[m++] = 0x81;
            else esc[m++] = raw[k];
        }
        if (k == n) GM_SPM_ADD(esc, m, 1, -(float)i);
    }
#undef GM_SPM_ADD
    return 1;
}
static void gm_spm_free(gm_spm *o) { free(o->tokens), free(o->types), free(o->scores), free(o->storage); }

/* Each tensor has its own random stream, so the file does not depend on the order of the work. */
static uint64_t gm_stream(uint64_t seed, uint64_t index) { return seed * 0x9E3779B97F4A7C15ull ^ (index + 1) * 0xD1B54A32D192ED03ull; }

/* F16 embedding ~ N(0, 1/dim), streamed in chunks through f (cap floats) and h: the logits of a
   unit-RMS state then come out ~N(0, 1). */
static bitnet_result gm_write_embedding(bitnet_gguf_writer *w, float *f, uint16_t *h, size_t cap, uint64_t dim,
                                        uint64_t vocab, uint64_t seed) {
    uint64_t s = gm_stream(seed, 0), n = dim * vocab, done;
    bitnet_result r = BITNET_OK;
    for (done = 0; done < n && r == BITNET_OK;) {
        size_t m = (size_t)(n - done < cap ? n - done : cap);
        gm_normals(&s, f, m, 1.0f / sqrtf((float)dim));
        r = bitnet_convert_fp32_to_fp16(f, h, m);
        if (r == BITNET_OK) r = bitnet_gguf_writer_write(w, h, m * 2);
        done += m;
    }
    return r;
}
/* A norm: 1 with a little noise. */
static bitnet_result gm_write_norm(bitnet_gguf_writer *w, float *f, uint64_t n, uint64_t seed, uint64_t index) {
    uint64_t s = gm_stream(seed, index), i;
    gm_normals(&s, f, (size_t)n, 0.05f);
    for (i = 0; i < n; i++) f[i] += 1.0f;
    return bitnet_gguf_writer_write(w, f, (size_t)n * 4);
}

/* An I2_S [n][kp] matrix's first k columns as floats code * scale in type t (F32, F16 or BF16; the
   scale rounded to t). */
static bitnet_result gm_write_float_ternary(bitnet_gguf_writer *w, bitnet_tensor_type t, const void *i2s, size_t ib,
                                            size_t n, size_t kp, size_t k) {
    int8_t *q = (int8_t *)malloc(n * kp);
    void *buf = malloc(n * k * (t == BITNET_TENSOR_F32 ? 4 : 2));
    float s;
    size_t i;
    bitnet_result r = q && buf ? bitnet_i2s_unpack(i2s, ib, n, kp, q, &s) : BITNET_ERR_OUT_OF_MEMORY;
    if (r == BITNET_OK) {
        const uint16_t h = t == BITNET_TENSOR_F16 ? bitnet_fp32_to_fp16(s) : bitnet_fp32_to_bf16(s);
        for (i = 0; i < n * k; i++) {
            const int8_t c = q[i / k * kp + i % k];
            if (t == BITNET_TENSOR_F32) ((float *)buf)[i] = (float)c * s;
            else ((uint16_t *)buf)[i] = c ? (uint16_t)(h | (c < 0 ? 0x8000u : 0u)) : 0; /* sign bit of either type */
        }
        r = bitnet_gguf_writer_write(w, buf, n * k * (t == BITNET_TENSOR_F32 ? 4 : 2));
    }
    free(q);
    free(buf);
    return r;
}

/* Llama 3.1's RoPE scaling as GGUF's rope_freqs.weight (what llama.cpp's converter writes for
   rope_scaling "llama3": factor 8, low and high frequency factors 1 and 4, original context 8192):
   frequency i is divided by f[i], 1 for short wavelengths, 8 for long ones, smooth between. */
static void gm_llama3_rope_freqs(float *f, int hd, float base) {
    const double two_pi = 6.283185307179586, lo_wavelen = 8192.0 / 1.0, hi_wavelen = 8192.0 / 4.0;
    int i;
    for (i = 0; i < hd / 2; i++) {
        const double wavelen = two_pi / (1.0 / pow(base, 2.0 * i / hd));
        const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
        f[i] = wavelen < hi_wavelen ? 1.0f : wavelen > lo_wavelen ? 8.0f : (float)(1.0 / ((1.0 - smooth) / 8.0 + smooth));
    }
}

/* The ternary matrices of a layer, quantized by two threads that take jobs in turn (largest first);
   rows of ne0 weights go into I2_S rows of ne0p (ne0 rounded up to whole blocks, zeros past ne0). */
typedef struct gm_job { uint64_t ne0, ne0p, ne1, index; unsigned char *out; } gm_job;
typedef struct gm_pool {
    pthread_mutex_t mu;
    gm_job job[7];
    int next, n;
    uint64_t seed;
    bitnet_result r;
} gm_pool;
typedef struct gm_worker { gm_pool *pool; float *f; int8_t *q; } gm_worker;

static void *gm_work(void *arg) {
    gm_worker *wk = (gm_worker *)arg;
    gm_pool *p = wk->pool;
    for (;;) {
        int j;
        gm_job *jb;
        uint64_t s, row;
        float scale;
        bitnet_result r;
        pthread_mutex_lock(&p->mu);
        j = p->next++;
        pthread_mutex_unlock(&p->mu);
        if (j >= p->n) break;
        jb = &p->job[j];
        /* N(0, 1/K) weights, absmean-quantized per tensor: outputs of unit-RMS inputs stay O(1) */
        s = gm_stream(p->seed, jb->index);
        gm_normals(&s, wk->f, (size_t)(jb->ne0 * jb->ne1), 1.0f / sqrtf((float)jb->ne0));
        r = bitnet_quantize_ternary(wk->f, (size_t)(jb->ne0 * jb->ne1), wk->q, &scale);
        for (row = jb->ne1; r == BITNET_OK && jb->ne0p != jb->ne0 && row-- > 0;) { /* rows to their padded places, last first */
            memmove(wk->q + row * jb->ne0p, wk->q + row * jb->ne0, (size_t)jb->ne0);
            memset(wk->q + row * jb->ne0p + jb->ne0, 0, (size_t)(jb->ne0p - jb->ne0));
        }
        if (r == BITNET_OK)
            r = bitnet_i2s_pack(wk->q, (size_t)jb->ne1, (size_t)jb->ne0p, scale, jb->out,
                                bitnet_i2s_bytes((size_t)jb->ne1, (size_t)jb->ne0p));
        if (r != BITNET_OK) {
            pthread_mutex_lock(&p->mu);
            p->r = r;
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int cmd_gen_model(int argc, char **argv) {
    static const char *const parts[11] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sub_norm",
                                          "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "ffn_sub_norm"};
    const char *preset = NULL, *out = NULL, *tiktoken = "../shared/data/llama3-tokenizer.tiktoken";
    const gm_preset *p = NULL;
    unsigned long long seed = 1;
    gm_vocab v;
    bitnet_gguf_writer *w = NULL;
    bitnet_result r = BITNET_OK;
    char key[128], name[64];
    const char *arch = "bitnet-b1.58", *type_name = "i2_s", *vocab_kind = "bpe", *pre = "llama-bpe";
    gm_spm spm;
    bitnet_tensor_type wtype = BITNET_TENSOR_I2_S;
    int i, l, k, bos, eos, eot, n_vocab, no_sub = 0, rope_llama3 = 0;
    uint8_t yes = 1;
    double t0 = 0;
    memset(&v, 0, sizeof v);
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc) preset = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (strcmp(argv[i], "--tiktoken") == 0 && i + 1 < argc) tiktoken = argv[++i];
        else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) type_name = argv[++i];
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) vocab_kind = argv[++i];
        else if (strcmp(argv[i], "--pre") == 0 && i + 1 < argc) pre = argv[++i];
        else if (strcmp(argv[i], "--rope-scaling") == 0 && i + 1 < argc) rope_llama3 = strcmp(argv[++i], "llama3") == 0 ? 1 : -1;
        else break;
    }
    if (strcmp(vocab_kind, "bpe") && strcmp(vocab_kind, "spm")) preset = NULL;
    if (strcmp(pre, "llama-bpe") && strcmp(pre, "falcon3") && strcmp(pre, "falcon_e")) preset = NULL;
    memset(&spm, 0, sizeof spm);
    if (strcmp(arch, "bitnet-b1.58") && strcmp(arch, "bitnet-25") && strcmp(arch, "bitnet") && strcmp(arch, "llama")) preset = NULL;
    no_sub = strcmp(arch, "llama") == 0; /* a ternary LLaMA: no sub-norms, silu, q and k rows as llama.cpp permutes them */
    for (k = 0; preset && k < (int)(sizeof gm_presets / sizeof gm_presets[0]); k++)
        if (strcmp(preset, gm_presets[k].name) == 0) p = &gm_presets[k];
    if (strcmp(type_name, "tq1_0") == 0) wtype = BITNET_TENSOR_TQ1_0;
    else if (strcmp(type_name, "tq2_0") == 0) wtype = BITNET_TENSOR_TQ2_0;
    else if (strcmp(type_name, "f32") == 0) wtype = BITNET_TENSOR_F32;
    else if (strcmp(type_name, "f16") == 0) wtype = BITNET_TENSOR_F16;
    else if (strcmp(type_name, "bf16") == 0) wtype = BITNET_TENSOR_BF16;
    else if (strcmp(type_name, "i2_s")) p = NULL;
    if (i < argc || !p || !out || rope_llama3 < 0) {
        fprintf(stderr, "usage: bitnet gen-model --preset tiny|small|2b4t|falcon3-1b|llama3-8b|1bitllm-3b [--seed S] [--tiktoken FILE]\n"
                        "                        [--type i2_s|tq1_0|tq2_0|f32|f16|bf16]\n"
                        "                        [--arch bitnet-b1.58|bitnet-25|bitnet|llama] [--vocab bpe|spm]\n"
                        "                        [--pre llama-bpe|falcon3|falcon_e] [--rope-scaling llama3] -o FILE.gguf\n"
                        "  random weights (the model says nothing useful) in bitnet.cpp's GGUF layout; tiny and small\n"
                        "  get a small byte-level tokenizer, 2b4t, falcon3-1b (its shape: head_dim 256; with --arch llama\n"
                        "  --pre falcon3), llama3-8b (with --arch llama) and 1bitllm-3b (bitnet_b1_58-3B's: head_dim 100,\n"
                        "  FFN 8640, so a float --type; with --arch bitnet --vocab spm) the LLaMA 3 vocabulary from --tiktoken FILE\n"
                        "  (default ../shared/data/llama3-tokenizer.tiktoken). --type: the ternary matrices in\n"
                        "  bitnet.cpp's I2_S (the default), llama.cpp's TQ1_0 / TQ2_0 (scales rounded to fp16), or\n"
                        "  floats code * scale, as bitnet.cpp's converter writes 1bitLLM's models before llama-quantize\n"
                        "  (f16 and bf16: the scale rounded to the type).\n"
                        "  --arch: general.architecture; \"bitnet\" (1bitLLM's models) has a silu(gate) * up FFN, \"llama\"\n"
                        "  (ternary LLaMAs: Llama3-8B-1.58, Falcon3-1.58bit) the same FFN and no sub-norms.\n"
                        "  --vocab spm: the vocabulary as SentencePiece (tokenizer.ggml.model \"llama\", as LLaMA 2's and\n"
                        "  1bitLLM's models), made from the byte-level one: its UTF-8 tokens, spaces as U+2581, scores\n"
                        "  by rank, <0xXX> byte tokens, <s> and </s>. --pre: tokenizer.ggml.pre of a byte-level vocabulary\n"
                        "  (Falcon 3's pre-tokenizer for falcon3 and falcon_e). --rope-scaling llama3: Llama 3.1's RoPE\n"
                        "  frequency factors as rope_freqs.weight (as llama.cpp's converter writes them).\n");
        return 2;
    }
    if (wtype == BITNET_TENSOR_I2_S && p->ffn % 128) {
        fprintf(stderr, "bitnet gen-model: --preset %s has FFN rows of %d weights; i2_s needs multiples of 128 (--type f32, "
                "f16 or bf16 write it, as bitnet.cpp's converter does)\n", p->name, p->ffn);
        return 2;
    }
    if ((wtype == BITNET_TENSOR_TQ1_0 || wtype == BITNET_TENSOR_TQ2_0) && (p->dim % 256 || p->ffn % 256)) {
        fprintf(stderr, "bitnet gen-model: --preset %s has rows of %d and %d weights; %s needs multiples of 256\n", p->name, p->dim,
                p->ffn, type_name);
        return 2;
    }
    t0 = cli_seconds();
    gm_table_init();
    if (strcmp(p->name, "tiny") && strcmp(p->name, "small")) { /* LLaMA 3: 128000 tiktoken ranks + 256 specials */
        if ((r = bitnet_vocab_from_tiktoken(tiktoken, 256, &v.llama3)) != BITNET_OK) {
            fprintf(stderr, "bitnet gen-model: %s: %s\n", bitnet_result_string(r), bitnet_last_error());
            return 1;
        }
        v.tokens = v.llama3.tokens;
        v.merges = v.llama3.merges;
        v.types = v.llama3.token_types;
        v.n_tokens = (int)v.llama3.n_tokens;
        v.n_merges = (int)v.llama3.n_merges;
    } else if (!gm_byte_vocab(400, &v)) {
        fprintf(stderr, "bitnet gen-model: out of memory\n");
        gm_vocab_free(&v);
        return 1;
    }
    n_vocab = v.n_tokens;
    bos = gm_find_token(&v, "<|begin_of_text|>");
    eos = gm_find_token(&v, "<|end_of_text|>");
    eot = gm_find_token(&v, "<|eot_id|>");
    if (vocab_kind[0] == 's') { /* SentencePiece: the arrays below become spm's */
        if (!gm_spm_vocab(&v, &spm)) {
            fprintf(stderr, "bitnet gen-model: out of memory\n");
            gm_spm_free(&spm), gm_vocab_free(&v);
            return 1;
        }
        for (eot = spm.n - 1; eot >= 0 && !(spm.tokens[eot].len == 10 && memcmp(spm.tokens[eot].ptr, "<|eot_id|>", 10) == 0); eot--) {}
        bos = 1, eos = 2, n_vocab = spm.n;
    }
    if (bos < 0 || eos < 0 || eot < 0) {
        fprintf(stderr, "bitnet gen-model: the vocabulary lacks <|begin_of_text|>, <|end_of_text|> or <|eot_id|>\n");
        gm_vocab_free(&v);
        return 1;
    }

#define GM(expr) do { if (r == BITNET_OK) r = (expr); } while (0)
#define GM_HP(suffix, val) do { snprintf(key, sizeof key, "%s.%s", arch, suffix); GM(bitnet_gguf_writer_set_u32(w, key, (uint32_t)(val))); } while (0)
    GM(bitnet_gguf_writer_create(&w));
    GM(bitnet_gguf_writer_set_str(w, "general.architecture", arch));
    snprintf(name, sizeof name, "bitnet %s (random weights, seed %llu)", p->name, seed);
    GM(bitnet_gguf_writer_set_str(w, "general.name", name));
    /* LLAMA_FTYPE_MOSTLY_I2_S (bitnet.cpp), _TQ1_0, _TQ2_0 (llama.cpp); ALL_F32, MOSTLY_F16, MOSTLY_BF16 */
    GM(bitnet_gguf_writer_set_u32(w, "general.file_type", wtype == BITNET_TENSOR_I2_S ? 40 : wtype == BITNET_TENSOR_TQ1_0 ? 36 :
                                  wtype == BITNET_TENSOR_TQ2_0 ? 37 : wtype == BITNET_TENSOR_F32 ? 0 : wtype == BITNET_TENSOR_F16 ? 1 : 32));
    GM(bitnet_gguf_writer_set_u32(w, "general.quantization_version", 2));
    GM_HP("vocab_size", n_vocab);
    GM_HP("context_length", p->ctx);
    GM_HP("embedding_length", p->dim);
    GM_HP("feed_forward_length", p->ffn);
    GM_HP("block_count", p->n_layers);
    GM_HP("attention.head_count", p->n_heads);
    GM_HP("attention.head_count_kv", p->n_kv_heads);
    GM_HP("rope.dimension_count", p->dim / p->n_heads);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    GM(bitnet_gguf_writer_set_f32(w, key, 500000.0f));
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    GM(bitnet_gguf_writer_set_f32(w, key, 1e-5f));
    GM(bitnet_gguf_writer_set_str(w, "tokenizer.ggml.model", spm.n ? "llama" : "gpt2"));
    if (!spm.n) GM(bitnet_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    GM(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", BITNET_GGUF_STRING, spm.n ? spm.tokens : v.tokens, (uint64_t)n_vocab));
    GM(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", BITNET_GGUF_INT32, spm.n ? spm.types : v.types, (uint64_t)n_vocab));
    if (spm.n) {
        GM(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.scores", BITNET_GGUF_FLOAT32, spm.scores, (uint64_t)spm.n));
        GM(bitnet_gguf_writer_set(w, "tokenizer.ggml.add_space_prefix", BITNET_GGUF_BOOL, &yes));
    } else {
        GM(bitnet_gguf_writer_set_arr(w, "tokenizer.ggml.merges", BITNET_GGUF_STRING, v.merges, (uint64_t)v.n_merges));
    }
    GM(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos));
    GM(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos));
    GM(bitnet_gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)eot));
    GM(bitnet_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", BITNET_GGUF_BOOL, &yes));
    GM(bitnet_gguf_writer_set_str(w, "tokenizer.chat_template",
                                  "{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: "
                                  "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                                  "{% if add_generation_prompt %}Assistant: {% endif %}"));
    /* tensors, in the order they are written */
    {
        uint64_t dim = (uint64_t)p->dim, ffn = (uint64_t)p->ffn, kvd = (uint64_t)(p->dim / p->n_heads * p->n_kv_heads);
        uint64_t ne[2];
        ne[0] = dim; ne[1] = (uint64_t)n_vocab;
        GM(bitnet_gguf_writer_add_tensor(w, "token_embd.weight", BITNET_TENSOR_F16, 2, ne));
        for (l = 0; l < p->n_layers; l++)
            for (k = 0; k < 11; k++) {
                int vec = strstr(parts[k], "norm") != NULL;
                if (no_sub && strstr(parts[k], "sub_norm")) continue;
                ne[0] = (k == 9 || k == 10) ? ffn : dim;
                ne[1] = (k == 2 || k == 3) ? kvd : (k == 7 || k == 8) ? ffn : dim;
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[k]);
                GM(bitnet_gguf_writer_add_tensor(w, name, vec ? BITNET_TENSOR_F32 : wtype, vec ? 1 : 2, ne));
            }
        ne[0] = dim;
        GM(bitnet_gguf_writer_add_tensor(w, "output_norm.weight", BITNET_TENSOR_F32, 1, ne));
        ne[0] = (uint64_t)(p->dim / p->n_heads / 2);
        if (rope_llama3) GM(bitnet_gguf_writer_add_tensor(w, "rope_freqs.weight", BITNET_TENSOR_F32, 1, ne));
        GM(bitnet_gguf_writer_begin(w, out));
        /* scratch for two workers, sized for the largest matrix; one output buffer per matrix of a layer */
        {
            const uint64_t ffnp = (ffn + 127) / 128 * 128;
            size_t cap = (size_t)(ffnp * dim > (uint64_t)1 << 20 ? ffnp * dim : (uint64_t)1 << 20);
            static const int order[7] = {7, 8, 9, 1, 4, 2, 3}; /* the matrices, largest first */
            gm_worker wk[2];
            gm_pool pool;
            pthread_t th;
            int j;
            memset(&pool, 0, sizeof pool);
            pthread_mutex_init(&pool.mu, NULL);
            pool.seed = seed;
            for (j = 0; j < 2; j++) {
                wk[j].pool = &pool;
                wk[j].f = (float *)malloc(cap * sizeof(float));
                wk[j].q = (int8_t *)malloc(cap);
                if (r == BITNET_OK && (!wk[j].f || !wk[j].q)) r = BITNET_ERR_OUT_OF_MEMORY;
            }
            for (j = 0; j < 7; j++) {
                k = order[j];
                pool.job[j].ne0 = (k == 9) ? ffn : dim;
                pool.job[j].ne0p = (k == 9) ? ffnp : dim;
                pool.job[j].ne1 = (k == 2 || k == 3) ? kvd : (k == 7 || k == 8) ? ffn : dim;
                pool.job[j].out = (unsigned char *)malloc(bitnet_i2s_bytes((size_t)pool.job[j].ne1, (size_t)pool.job[j].ne0p));
                if (r == BITNET_OK && !pool.job[j].out) r = BITNET_ERR_OUT_OF_MEMORY;
            }
            GM(gm_write_embedding(w, wk[0].f, (uint16_t *)wk[0].q, cap / 2, dim, (uint64_t)n_vocab, seed));
            for (l = 0; l < p->n_layers && r == BITNET_OK; l++) {
                int threaded;
                for (j = 0; j < 7; j++) pool.job[j].index = 1 + (uint64_t)l * 11 + (uint64_t)order[j];
                pool.next = 0;
                pool.n = 7;
                threaded = pthread_create(&th, NULL, gm_work, &wk[1]) == 0; /* else this thread does it all */
                gm_work(&wk[0]);
                if (threaded) pthread_join(th, NULL);
                GM(pool.r);
                for (k = 0; k < 11 && r == BITNET_OK; k++) { /* write the layer in file order */
                    uint64_t index = 1 + (uint64_t)l * 11 + (uint64_t)k;
                    if (no_sub && strstr(parts[k], "sub_norm")) continue;
                    if (strstr(parts[k], "norm")) {
                        r = gm_write_norm(w, wk[0].f, k == 10 ? ffn : dim, seed, index);
                        continue;
                    }
                    for (j = 0; j < 7 && order[j] != k; j++) {}
                    {
                        size_t n1 = (size_t)pool.job[j].ne1, n0 = (size_t)pool.job[j].ne0, ib = bitnet_i2s_bytes(n1, (size_t)pool.job[j].ne0p);
                        if (wtype == BITNET_TENSOR_I2_S) {
                            r = bitnet_gguf_writer_write(w, pool.job[j].out, ib);
                        } else if (wtype == BITNET_TENSOR_F32 || wtype == BITNET_TENSOR_F16 || wtype == BITNET_TENSOR_BF16) {
                            r = gm_write_float_ternary(w, wtype, pool.job[j].out, ib, n1, (size_t)pool.job[j].ne0p, n0);
                        } else { /* the same codes in llama.cpp's type */
                            size_t tb = bitnet_tq_bytes(wtype, n1, n0);
                            unsigned char *tq = (unsigned char *)malloc(tb);
                            r = tq ? bitnet_tq_from_i2s(wtype, pool.job[j].out, ib, n1, n0, tq, tb) : BITNET_ERR_OUT_OF_MEMORY;
                            if (r == BITNET_OK) r = bitnet_gguf_writer_write(w, tq, tb);
                            free(tq);
                        }
                    }
                }
            }
            if (r == BITNET_OK) r = gm_write_norm(w, wk[0].f, dim, seed, 1 + (uint64_t)p->n_layers * 11);
            if (r == BITNET_OK && rope_llama3) {
                gm_llama3_rope_freqs(wk[0].f, p->dim / p->n_heads, 500000.0f);
                r = bitnet_gguf_writer_write(w, wk[0].f, (size_t)(p->dim / p->n_heads / 2) * 4);
            }
            for (j = 0; j < 2; j++) {
                free(wk[j].f);
                free(wk[j].q);
            }
            for (j = 0; j < 7; j++) free(pool.job[j].out);
            pthread_mutex_destroy(&pool.mu);
        }
        GM(bitnet_gguf_writer_finish(w));
    }
#undef GM
#undef GM_HP
    bitnet_gguf_writer_free(w);
    gm_spm_free(&spm);
    gm_vocab_free(&v);
    if (r != BITNET_OK) {
        fprintf(stderr, "bitnet gen-model: %s: %s\n", bitnet_result_string(r), bitnet_last_error());
        return 1;
    }
    {
        FILE *f = fopen(out, "rb");
        long size = 0;
        if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
        fprintf(stderr, "wrote %s: preset %s, seed %llu, %ld bytes in %.2f s (random weights: the text it generates means nothing)\n",
                out, p->name, seed, size, cli_seconds() - t0);
    }
    return 0;
}

/* ---- convert: a Hugging Face checkpoint folder to GGUF (bitnet_convert_hf) ---- */
static int cmd_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    bitnet_result r;
    double t0;
    int i;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out = argv[++i];
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else break;
    }
    if (i < argc || !dir || !out) {
        fprintf(stderr, "usage: bitnet convert DIR -o FILE.gguf\n"
                        "  DIR: a Hugging Face BitNet or ternary LLaMA checkpoint (config.json, tokenizer.json, model.safetensors or shards),\n"
                        "  packed (microsoft/bitnet-b1.58-2B-4T) or bf16 master weights (-bf16); writes I2_S as bitnet.cpp\n");
        return 2;
    }
    t0 = cli_seconds();
    if ((r = bitnet_convert_hf(dir, out)) != BITNET_OK) {
        fprintf(stderr, "bitnet convert: %s: %s\n", bitnet_result_string(r), bitnet_last_error());
        return 1;
    }
    fprintf(stderr, "wrote %s in %.2f s\n", out, cli_seconds() - t0);
    return 0;
}

/* ---- serve: an HTTP server with llama.cpp's and OpenAI's endpoints ------------------------------ */
/* One model and --parallel N sessions ("slots", as llama-server's -np): a connection gets a thread,
   a generation the free slot whose text shares the longest start with its prompt (waiting for one),
   so a conversation's next turn evaluates only what is new. Each slot decodes on its own (no
   batching across slots). Requests and replies are JSON, read and written with the library's own
   parser and writer. */
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>

#define SRV_MAX_BODY ((size_t)16 << 20)
#define SRV_MAX_STOP 4
#define SRV_MAX_CONN 64 /* connections open at once; more are answered 503 */

typedef struct srv_slot { bitnet_session *s; int busy; } srv_slot;
typedef struct srv {
    bitnet_model *m;
    const bitnet_tokenizer *tk;
    bitnet_model_info info;
    const char *name;
    int32_t n_ctx;
    srv_slot *slot; int n_slot;
    pthread_mutex_t mu;                 /* the slots' busy flags, n_conn, next_id */
    pthread_cond_t freed;
    int n_conn;
    unsigned long next_id;
} srv;

/* The free slot whose text starts like ids for longest (waiting for one), taken; *kept: that start. */
static srv_slot *srv_take(srv *sv, const int32_t *ids, size_t n, size_t *kept) {
    srv_slot *best = NULL;
    int i;
    pthread_mutex_lock(&sv->mu);
    while (!best) {
        for (i = 0; i < sv->n_slot; i++) {
            const int32_t *have;
            size_t pos, p = 0;
            if (sv->slot[i].busy) continue; /* (its owner writes its text) */
            have = bitnet_session_tokens(sv->slot[i].s), pos = (size_t)bitnet_session_pos(sv->slot[i].s);
            while (p + 1 < n && p < pos && have[p] == ids[p]) p++; /* (one token at least is evaluated) */
            if (!best || p > *kept) best = &sv->slot[i], *kept = p;
        }
        if (!best) pthread_cond_wait(&sv->freed, &sv->mu);
    }
    best->busy = 1;
    pthread_mutex_unlock(&sv->mu);
    return best;
}
static void srv_give(srv *sv, srv_slot *sl) {
    pthread_mutex_lock(&sv->mu);
    sl->busy = 0;
    pthread_cond_signal(&sv->freed);
    pthread_mutex_unlock(&sv->mu);
}

/* One generation's reply as it goes: the text, the stop strings, and what was streamed. */
typedef struct srv_gen {
    int fd, stream, chat, oai;          /* the reply's form: server-sent events; chat; OpenAI's or llama.cpp's */
    char *text; size_t n, cap;
    size_t sent;                        /* bytes of text streamed */
    const char *stop[SRV_MAX_STOP]; int n_stop;
    int stopped_word, gone;             /* a stop string ended it; the client went away */
    char id[48]; long created;
    const char *model;
} srv_gen;

static int srv_write(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        b += w, n -= (size_t)w;
    }
    return 0;
}

static void srv_reply(int fd, int status, const char *type, const char *body, size_t n) {
    char h[512];
    const char *why = status == 200 ? "OK" : status == 400 ? "Bad Request" : status == 404 ? "Not Found" :
                      status == 405 ? "Method Not Allowed" : status == 413 ? "Payload Too Large" :
                      status == 503 ? "Service Unavailable" : "Internal Server Error";
    int k = snprintf(h, sizeof h, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                     "Access-Control-Allow-Origin: *\r\n\r\n", status, why, type, n);
    if (srv_write(fd, h, (size_t)k) == 0 && n) srv_write(fd, body, n);
}

/* A JSON reply written by fill (twice: the writer counts, then writes), sent as one response or,
   with event set, as one server-sent event. */
typedef void (*srv_fill_fn)(bitnet__jw *w, const void *ctx);
static int srv_json(int fd, int status, int event, srv_fill_fn fill, const void *ctx) {
    bitnet__jw w;
    char *b;
    int r = -1;
    memset(&w, 0, sizeof w);
    w.compact = event;
    fill(&w, ctx);
    if (!(b = (char *)malloc(w.len + 16))) return -1;
    memset(&w, 0, sizeof w);
    w.compact = event, w.buf = b + (event ? 6 : 0), w.cap = SIZE_MAX;
    fill(&w, ctx);
    if (event) memcpy(b, "data: ", 6), memcpy(b + 6 + w.len, "\n\n", 2), r = srv_write(fd, b, w.len + 8);
    else srv_reply(fd, status, "application/json", b, w.len), r = 0;
    free(b);
    return r;
}

typedef struct srv_err { int code; const char *msg; } srv_err;
static void srv_fill_err(bitnet__jw *w, const void *ctx) {
    const srv_err *e = (const srv_err *)ctx;
    bitnet__jw_open(w, '{'), bitnet__jw_key(w, "error"), bitnet__jw_open(w, '{');
    bitnet__jw_key(w, "code"), bitnet__jw_int(w, e->code);
    bitnet__jw_key(w, "message"), bitnet__jw_str(w, e->msg);
    bitnet__jw_key(w, "type"), bitnet__jw_str(w, e->code == 404 ? "not_found_error" : e->code < 500 ? "invalid_request_error" : "server_error");
    bitnet__jw_close(w, '}'), bitnet__jw_close(w, '}');
}
static void srv_error(int fd, int code, const char *msg) {
    srv_err e;
    e.code = code, e.msg = msg;
    srv_json(fd, code, 0, srv_fill_err, &e);
}

/* Bytes of text[0, n) that may go out now: not a start of a stop string at the end, nor the start of
   a UTF-8 character whose rest has not come. */
static size_t srv_safe(const srv_gen *g) {
    size_t safe = g->n, k, l, i;
    for (k = 0; k < (size_t)g->n_stop; k++)
        for (l = strlen(g->stop[k]) - 1; l > 0; l--)
            if (l <= g->n && memcmp(g->text + g->n - l, g->stop[k], l) == 0) {
                if (g->n - l < safe) safe = g->n - l;
                break;
            }
    for (i = safe, k = 0; i > 0 && k < 4; i--, k++) { /* a character cut short at the end waits for its rest */
        const unsigned char c = (unsigned char)g->text[i - 1];
        const size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        if ((c & 0xC0) == 0x80) continue;
        if (safe - (i - 1) < need) safe = i - 1;
        break;
    }
    return safe;
}

typedef struct srv_chunk { const srv_gen *g; const char *piece; size_t n; const char *finish; int first; } srv_chunk;
static void srv_fill_chunk(bitnet__jw *w, const void *ctx) {
    const srv_chunk *c = (const srv_chunk *)ctx;
    bitnet__jw_open(w, '{');
    if (!c->g->oai) { /* llama.cpp's /completion */
        bitnet__jw_key(w, "content"), bitnet__jw_strn(w, c->piece, c->n);
        bitnet__jw_key(w, "stop"), bitnet__jw_lit(w, c->finish ? "true" : "false");
    } else {
        bitnet__jw_key(w, "id"), bitnet__jw_str(w, c->g->id);
        bitnet__jw_key(w, "object"), bitnet__jw_str(w, c->g->chat ? "chat.completion.chunk" : "text_completion");
        bitnet__jw_key(w, "created"), bitnet__jw_int(w, c->g->created);
        bitnet__jw_key(w, "model"), bitnet__jw_str(w, c->g->model);
        bitnet__jw_key(w, "choices"), bitnet__jw_open(w, '['), bitnet__jw_open(w, '{');
        bitnet__jw_key(w, "index"), bitnet__jw_int(w, 0);
        if (c->g->chat) {
            bitnet__jw_key(w, "delta"), bitnet__jw_open(w, '{');
            if (c->first) bitnet__jw_key(w, "role"), bitnet__jw_str(w, "assistant");
            if (c->n || !c->finish) bitnet__jw_key(w, "content"), bitnet__jw_strn(w, c->piece, c->n);
            bitnet__jw_close(w, '}');
        } else {
            bitnet__jw_key(w, "text"), bitnet__jw_strn(w, c->piece, c->n);
        }
        bitnet__jw_key(w, "finish_reason");
        if (c->finish) bitnet__jw_str(w, c->finish);
        else bitnet__jw_lit(w, "null");
        bitnet__jw_close(w, '}'), bitnet__jw_close(w, ']');
    }
    bitnet__jw_close(w, '}');
}

/* bitnet_generate's on_token: the text grows; a stop string ends it there (its text not part of the
   reply); streamed, what is safe goes out. */
static int srv_on_token(int32_t token, const char *piece, size_t len, void *user) {
    srv_gen *g = (srv_gen *)user;
    size_t from, at;
    (void)token;
    if (!piece) return 0;
    if (g->n + len + 1 > g->cap) {
        size_t cap = (g->n + len + 1) * 2;
        char *t = (char *)realloc(g->text, cap);
        if (!t) return 1;
        g->text = t, g->cap = cap;
    }
    from = g->n;
    memcpy(g->text + g->n, piece, len), g->n += len, g->text[g->n] = 0;
    if ((at = find_stop(g->text, g->n, from, g->stop, g->n_stop)) < g->n) g->n = at, g->text[at] = 0, g->stopped_word = 1;
    if (g->stream) {
        const size_t safe = g->stopped_word ? g->n : srv_safe(g);
        if (safe > g->sent) {
            srv_chunk c;
            c.g = g, c.piece = g->text + g->sent, c.n = safe - g->sent, c.finish = NULL, c.first = g->sent == 0;
            if (srv_json(g->fd, 200, 1, srv_fill_chunk, &c) != 0) g->gone = 1;
            g->sent = safe;
        }
    }
    return g->stopped_word || g->gone;
}

/* The request's sampler and generation fields, llama.cpp's and OpenAI's names. */
/* A parsed JSON value written back (a schema for bitnet_json_schema_to_grammar). */
static void srv_json_value(bitnet__jw *w, const bitnet__json *j, int32_t v) {
    const bitnet__jnode *nd = &j->nodes[v];
    int32_t c;
    if (nd->type == BITNET__J_STR) bitnet__jw_str(w, nd->str);
    else if (nd->type == BITNET__J_NUM && nd->is_int && fabs(nd->num) < 9e15) bitnet__jw_int(w, (long long)nd->num);
    else if (nd->type == BITNET__J_NUM) bitnet__jw_num(w, nd->num, 17);
    else if (nd->type == BITNET__J_ARR || nd->type == BITNET__J_OBJ) {
        bitnet__jw_open(w, nd->type == BITNET__J_ARR ? '[' : '{');
        for (c = nd->first; c >= 0; c = j->nodes[c].next) {
            if (nd->type == BITNET__J_OBJ) bitnet__jw_key(w, j->nodes[c].key);
            srv_json_value(w, j, c);
        }
        bitnet__jw_close(w, nd->type == BITNET__J_ARR ? ']' : '}');
    } else {
        bitnet__jw_lit(w, nd->type == BITNET__J_TRUE ? "true" : nd->type == BITNET__J_FALSE ? "false" : "null");
    }
}

static const char *srv_params(const bitnet__json *j, bitnet_generate_params *gp,
                              bitnet_logit_bias *bias, srv_gen *g, const char **grammar, const char **schema, char *schema_buf,
                              size_t schema_cap, int *ignore_eos) {
    struct { const char *key; float *f; } fl[] = {
        {"temperature", &gp->sampler.temperature}, {"top_p", &gp->sampler.top_p}, {"min_p", &gp->sampler.min_p},
        {"repeat_penalty", &gp->sampler.repeat_penalty}, {"presence_penalty", &gp->sampler.presence_penalty},
        {"frequency_penalty", &gp->sampler.frequency_penalty}};
    int32_t v, k, c;
    size_t i;
    gp->sampler.temperature = 0.8f, gp->sampler.top_k = 40, gp->sampler.top_p = 0.95f, gp->sampler.min_p = 0.05f;
    for (i = 0; i < sizeof fl / sizeof fl[0]; i++)
        if ((v = bitnet__json_get(j, 0, fl[i].key)) >= 0) {
            if (j->nodes[v].type != BITNET__J_NUM) return "a sampler field is not a number";
            *fl[i].f = (float)j->nodes[v].num;
        }
    if ((v = bitnet__json_get(j, 0, "top_k")) >= 0) gp->sampler.top_k = j->nodes[v].type == BITNET__J_NUM ? (int32_t)j->nodes[v].num : -1;
    if ((v = bitnet__json_get(j, 0, "repeat_last_n")) >= 0)
        gp->sampler.repeat_last_n = j->nodes[v].type == BITNET__J_NUM && j->nodes[v].num >= 0 ? (int32_t)j->nodes[v].num : INT32_MAX;
    if ((v = bitnet__json_get(j, 0, "seed")) >= 0 && j->nodes[v].type == BITNET__J_NUM && j->nodes[v].num >= 0)
        gp->sampler.seed = (uint64_t)j->nodes[v].num;
    if ((v = bitnet__json_get(j, 0, "max_tokens")) < 0) v = bitnet__json_get(j, 0, "n_predict");
    if (v >= 0 && j->nodes[v].type == BITNET__J_NUM) gp->max_tokens = j->nodes[v].num > 0 ? (int32_t)BITNET__MIN(j->nodes[v].num, 1e9) : 0;
    if ((v = bitnet__json_get(j, 0, "stream")) >= 0) g->stream = j->nodes[v].type == BITNET__J_TRUE;
    if ((v = bitnet__json_get(j, 0, "ignore_eos")) >= 0) *ignore_eos = j->nodes[v].type == BITNET__J_TRUE;
    if ((v = bitnet__json_get(j, 0, "stop")) >= 0 && j->nodes[v].type == BITNET__J_STR && *j->nodes[v].str)
        g->stop[g->n_stop++] = j->nodes[v].str;
    else if (v >= 0 && j->nodes[v].type == BITNET__J_ARR)
        for (c = j->nodes[v].first; c >= 0; c = j->nodes[c].next) {
            if (j->nodes[c].type != BITNET__J_STR || g->n_stop == SRV_MAX_STOP) return "stop is a string or a list of at most 4";
            if (*j->nodes[c].str) g->stop[g->n_stop++] = j->nodes[c].str;
        }
    if ((v = bitnet__json_get(j, 0, "logit_bias")) >= 0) { /* OpenAI's {"id": bias} or llama.cpp's [[id, bias]] */
        for (c = j->nodes[v].type == BITNET__J_OBJ || j->nodes[v].type == BITNET__J_ARR ? j->nodes[v].first : -1; c >= 0; c = j->nodes[c].next) {
            const bitnet__jnode *e = &j->nodes[c];
            bitnet_logit_bias *b = &bias[gp->sampler.n_logit_bias];
            char *end;
            if (gp->sampler.n_logit_bias == BITNET_MAX_LOGIT_BIAS) return "logit_bias has more than 1024 entries";
            if (j->nodes[v].type == BITNET__J_OBJ && e->type == BITNET__J_NUM) {
                b->token = (int32_t)strtol(e->key, &end, 10), b->bias = (float)e->num;
                if (*end || !*e->key) return "a logit_bias key is not a token id";
            } else if (e->type == BITNET__J_ARR && e->count == 2 && j->nodes[e->first].type == BITNET__J_NUM) {
                const bitnet__jnode *bv = &j->nodes[j->nodes[e->first].next];
                b->token = (int32_t)j->nodes[e->first].num;
                b->bias = bv->type == BITNET__J_NUM ? (float)bv->num : bv->type == BITNET__J_FALSE ? -INFINITY : NAN;
            } else {
                return "logit_bias is {\"id\": bias} or [[id, bias]]";
            }
            gp->sampler.n_logit_bias++;
        }
        gp->sampler.logit_bias = bias;
    }
    if ((v = bitnet__json_get(j, 0, "grammar")) >= 0 && j->nodes[v].type == BITNET__J_STR && *j->nodes[v].str) *grammar = j->nodes[v].str;
    if ((v = bitnet__json_get(j, 0, "json_schema")) < 0 && (k = bitnet__json_get(j, 0, "response_format")) >= 0) {
        const char *t = j->nodes[k].type == BITNET__J_OBJ ? NULL : "";
        int32_t ty = t ? -1 : bitnet__json_get(j, k, "type"), js;
        t = ty >= 0 && j->nodes[ty].type == BITNET__J_STR ? j->nodes[ty].str : "";
        if (strcmp(t, "json_object") == 0) *schema = "{}";
        else if (strcmp(t, "json_schema") == 0 && (js = bitnet__json_get(j, k, "json_schema")) >= 0) v = bitnet__json_get(j, js, "schema");
        else if (strcmp(t, "text") != 0) return "response_format is {\"type\": \"text\", \"json_object\" or \"json_schema\"}";
    }
    if (v >= 0) { /* the schema back to text for bitnet_json_schema_to_grammar */
        bitnet__jw w;
        memset(&w, 0, sizeof w);
        w.buf = schema_buf, w.cap = schema_cap, w.compact = 1;
        srv_json_value(&w, j, v);
        if (w.len >= schema_cap) return "the JSON schema is longer than 1 MB";
        schema_buf[w.len] = 0, *schema = schema_buf;
    }
    return NULL;
}

typedef struct srv_done {
    const srv_gen *g; const char *finish; size_t n_prompt, n_cached, n_gen; double tp, tg; /* n_cached: from the last request */
    const char *content; size_t n_content; /* llama.cpp's form: the whole text, or a stream's unsent rest */
} srv_done;
static void srv_fill_done(bitnet__jw *w, const void *ctx) {
    const srv_done *d = (const srv_done *)ctx;
    const srv_gen *g = d->g;
    bitnet__jw_open(w, '{');
    if (!g->oai) { /* llama.cpp's /completion */
        bitnet__jw_key(w, "content"), bitnet__jw_strn(w, d->content, d->n_content);
        bitnet__jw_key(w, "stop"), bitnet__jw_lit(w, "true");
        bitnet__jw_key(w, "stop_type"), bitnet__jw_str(w, g->stopped_word ? "word" : strcmp(d->finish, "stop") == 0 ? "eos" : "limit");
        bitnet__jw_key(w, "tokens_evaluated"), bitnet__jw_u64(w, d->n_prompt);
        bitnet__jw_key(w, "tokens_cached"), bitnet__jw_u64(w, d->n_cached);
        bitnet__jw_key(w, "tokens_predicted"), bitnet__jw_u64(w, d->n_gen);
        bitnet__jw_key(w, "timings"), bitnet__jw_open(w, '{');
        bitnet__jw_key(w, "prompt_per_second"), bitnet__jw_num(w, d->tp > 0 ? (double)(d->n_prompt - d->n_cached) / d->tp : 0, 6);
        bitnet__jw_key(w, "predicted_per_second"), bitnet__jw_num(w, d->tg > 0 ? (double)d->n_gen / d->tg : 0, 6);
        bitnet__jw_close(w, '}');
    } else {
        bitnet__jw_key(w, "id"), bitnet__jw_str(w, g->id);
        bitnet__jw_key(w, "object"), bitnet__jw_str(w, g->chat ? "chat.completion" : "text_completion");
        bitnet__jw_key(w, "created"), bitnet__jw_int(w, g->created);
        bitnet__jw_key(w, "model"), bitnet__jw_str(w, g->model);
        bitnet__jw_key(w, "choices"), bitnet__jw_open(w, '['), bitnet__jw_open(w, '{');
        bitnet__jw_key(w, "index"), bitnet__jw_int(w, 0);
        if (g->chat) {
            bitnet__jw_key(w, "message"), bitnet__jw_open(w, '{');
            bitnet__jw_key(w, "role"), bitnet__jw_str(w, "assistant");
            bitnet__jw_key(w, "content"), bitnet__jw_strn(w, g->text ? g->text : "", g->n);
            bitnet__jw_close(w, '}');
        } else {
            bitnet__jw_key(w, "text"), bitnet__jw_strn(w, g->text ? g->text : "", g->n);
        }
        bitnet__jw_key(w, "finish_reason"), bitnet__jw_str(w, d->finish);
        bitnet__jw_close(w, '}'), bitnet__jw_close(w, ']');
    }
    bitnet__jw_key(w, "usage"), bitnet__jw_open(w, '{');
    bitnet__jw_key(w, "prompt_tokens"), bitnet__jw_u64(w, d->n_prompt);
    bitnet__jw_key(w, "completion_tokens"), bitnet__jw_u64(w, d->n_gen);
    bitnet__jw_key(w, "total_tokens"), bitnet__jw_u64(w, d->n_prompt + d->n_gen);
    bitnet__jw_close(w, '}');
    bitnet__jw_close(w, '}');
}

/* The prompt of a request: llama.cpp's and OpenAI's "prompt" (a string), or "messages" in the
   model's chat template. malloc'd text; NULL with *why on a bad request. */
static char *srv_prompt(const srv *sv, const bitnet__json *j, int chat, int *special_bos, const char **why) {
    int32_t p = bitnet__json_get(j, 0, chat ? "messages" : "prompt"), c, part;
    bitnet_chat_message *msgs;
    char *text = NULL, **joined;
    size_t n = 0, len = 0, i;
    bitnet_chat_template tmpl = (bitnet_chat_template)sv->info.chat_template;
    *why = chat ? "messages is not a list of {\"role\", \"content\"}" : "prompt is not a string";
    if (!chat) {
        *special_bos = 1;
        return p >= 0 && j->nodes[p].type == BITNET__J_STR ? strdup(j->nodes[p].str) : NULL;
    }
    *special_bos = 0; /* the template writes BOS where it has one */
    if (p < 0 || j->nodes[p].type != BITNET__J_ARR || !j->nodes[p].count) return NULL;
    msgs = (bitnet_chat_message *)calloc((size_t)j->nodes[p].count, sizeof *msgs);
    joined = (char **)calloc((size_t)j->nodes[p].count, sizeof *joined);
    for (c = j->nodes[p].first; msgs && joined && c >= 0; c = j->nodes[c].next, n++) {
        int32_t role = bitnet__json_get(j, c, "role"), content = bitnet__json_get(j, c, "content");
        if (role < 0 || j->nodes[role].type != BITNET__J_STR || content < 0) break;
        msgs[n].role = j->nodes[role].str;
        if (j->nodes[content].type == BITNET__J_STR) { msgs[n].content = j->nodes[content].str; continue; }
        if (j->nodes[content].type != BITNET__J_ARR) break;
        { /* OpenAI's parts: the text ones, joined */
            size_t cap = 1, at = 0;
            for (part = j->nodes[content].first; part >= 0; part = j->nodes[part].next) {
                int32_t t = bitnet__json_get(j, part, "text");
                if (t >= 0 && j->nodes[t].type == BITNET__J_STR) cap += strlen(j->nodes[t].str);
            }
            if (!(joined[n] = (char *)malloc(cap))) break;
            for (part = j->nodes[content].first; part >= 0; part = j->nodes[part].next) {
                int32_t t = bitnet__json_get(j, part, "text");
                if (t >= 0 && j->nodes[t].type == BITNET__J_STR) memcpy(joined[n] + at, j->nodes[t].str, strlen(j->nodes[t].str)), at += strlen(j->nodes[t].str);
            }
            joined[n][at] = 0, msgs[n].content = joined[n];
        }
    }
    if (msgs && joined && c < 0 && bitnet_chat_format(tmpl, msgs, n, 1, NULL, 0, &len) == BITNET_ERR_BAD_SIZE &&
        (text = (char *)malloc(len + 1)) != NULL && bitnet_chat_format(tmpl, msgs, n, 1, text, len + 1, &len) != BITNET_OK)
        free(text), text = NULL;
    for (i = 0; joined && i < (size_t)j->nodes[p].count; i++) free(joined[i]);
    free(joined), free(msgs);
    return text;
}

/* POST /completion, /v1/completions, /v1/chat/completions */
static void srv_generate(srv *sv, int fd, const bitnet__json *j, int chat, int oai) {
    bitnet_logit_bias *bias = (bitnet_logit_bias *)malloc(BITNET_MAX_LOGIT_BIAS * sizeof *bias);
    char *schema_buf = (char *)malloc((size_t)1 << 20);
    srv_slot *sl = NULL;
    bitnet_session *s;
    bitnet_generate_params gp;
    bitnet_generate_stats st;
    srv_gen g;
    srv_done d;
    const char *why = NULL, *grammar_text = NULL, *schema = NULL;
    char *prompt, *gbnf = NULL, msg[4400];
    int32_t *ids = NULL, none = 0, pos;
    size_t n = 0, p = 0, gl = 0;
    int special_bos, ignore_eos = 0;
    bitnet_grammar *gr = NULL;
    bitnet_result r;
    memset(&gp, 0, sizeof gp), memset(&st, 0, sizeof st), memset(&g, 0, sizeof g);
    g.fd = fd, g.chat = chat, g.oai = oai, g.model = sv->name, g.created = (long)time(NULL);
    pthread_mutex_lock(&sv->mu);
    snprintf(g.id, sizeof g.id, "%s-%lu", chat ? "chatcmpl" : "cmpl", ++sv->next_id);
    pthread_mutex_unlock(&sv->mu);
    prompt = NULL;
    if (!bias || !schema_buf) why = "out of memory";
    else if (!(why = srv_params(j, &gp, bias, &g, &grammar_text, &schema, schema_buf, (size_t)1 << 20, &ignore_eos)))
        prompt = srv_prompt(sv, j, chat, &special_bos, &why);
    if (!prompt) {
        srv_error(fd, 400, why);
        goto done;
    }
    if (schema) { /* a JSON schema (or "json_object": any JSON) as a grammar */
        r = bitnet_json_schema_to_grammar(schema, strlen(schema), NULL, 0, &gl);
        if (r == BITNET_ERR_BAD_SIZE && !(gbnf = (char *)malloc(gl + 1))) r = BITNET_ERR_OUT_OF_MEMORY;
        if (r == BITNET_ERR_BAD_SIZE) r = bitnet_json_schema_to_grammar(schema, strlen(schema), gbnf, gl + 1, &gl);
        grammar_text = r == BITNET_OK ? gbnf : NULL;
    } else r = BITNET_OK;
    if (r == BITNET_OK && grammar_text) r = bitnet_grammar_parse(grammar_text, strlen(grammar_text), &gr);
    if (r == BITNET_OK) r = bitnet__sampler_check(&gp.sampler, sv->info.n_vocab, "the request"); /* (before a stream starts) */
    if (r == BITNET_OK) r = tokenize_all(sv->tk, prompt, strlen(prompt), special_bos, 1, &ids, &n);
    if (r == BITNET_OK && (n == 0 || n >= (size_t)sv->n_ctx))
        r = bitnet__err(BITNET_ERR_CONTEXT_FULL, "the prompt is %zu tokens; the context holds %d", n, (int)sv->n_ctx);
    if (r != BITNET_OK) {
        snprintf(msg, sizeof msg, "%s: %s", bitnet_result_string(r), bitnet_last_error());
        srv_error(fd, r == BITNET_ERR_OUT_OF_MEMORY ? 500 : 400, msg);
        goto done;
    }
    /* a slot; its text as far as it is this prompt's start stays */
    sl = srv_take(sv, ids, n, &p);
    s = sl->s, pos = bitnet_session_pos(s);
    if (p && p < (size_t)pos) r = bitnet_session_discard(s, (int32_t)p, pos - (int32_t)p);
    else if (p < (size_t)pos) bitnet_session_reset(s);
    gp.grammar = gr, gp.on_token = srv_on_token, gp.user = &g;
    if (ignore_eos) gp.stop_tokens = &none, gp.n_stop = 0;
    if (g.stream) {
        static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n"
                                   "Access-Control-Allow-Origin: *\r\n\r\n";
        srv_write(fd, head, sizeof head - 1);
    }
    if (r == BITNET_OK) r = bitnet_generate(s, ids + p, n - p, &gp, NULL, 0, &st);
    if (r != BITNET_OK) {
        snprintf(msg, sizeof msg, "%s: %s", bitnet_result_string(r), bitnet_last_error());
        bitnet_session_reset(s); /* (whatever it held) */
        if (!g.stream) srv_error(fd, 400, msg);
        else {
            srv_err e;
            e.code = 500, e.msg = msg;
            srv_json(fd, 200, 1, srv_fill_err, &e);
        }
        goto done;
    }
    d.g = &g, d.n_prompt = n, d.n_cached = p, d.n_gen = st.n_generated, d.tp = st.prompt_seconds, d.tg = st.gen_seconds;
    d.content = g.text ? g.text + g.sent : "", d.n_content = g.n - g.sent;
    d.finish = g.stopped_word || (!(gp.max_tokens && st.n_generated >= (size_t)gp.max_tokens) &&
                                  bitnet_session_pos(s) < sv->n_ctx) ? "stop" : "length";
    if (!g.stream) srv_json(fd, 200, 0, srv_fill_done, &d);
    else if (!g.gone && !oai) {
        srv_json(fd, 200, 1, srv_fill_done, &d); /* llama.cpp's last event: the rest and the totals */
    } else if (!g.gone) {
        srv_chunk c;
        c.g = &g, c.piece = d.content, c.n = d.n_content, c.finish = d.finish, c.first = g.sent == 0;
        srv_json(fd, 200, 1, srv_fill_chunk, &c);
        srv_write(fd, "data: [DONE]\n\n", 14);
    }
done:
    if (sl) srv_give(sv, sl);
    free(prompt), free(gbnf), free(ids), free(g.text), free(bias), free(schema_buf);
    bitnet_grammar_free(gr);
}

typedef struct srv_toks { const int32_t *ids; size_t n; const char *text; size_t len; const srv *sv; } srv_toks;
static void srv_fill_tokens(bitnet__jw *w, const void *ctx) {
    const srv_toks *t = (const srv_toks *)ctx;
    size_t i;
    bitnet__jw_open(w, '{');
    if (t->text) bitnet__jw_key(w, "content"), bitnet__jw_strn(w, t->text, t->len);
    else {
        bitnet__jw_key(w, "tokens"), bitnet__jw_open(w, '[');
        for (i = 0; i < t->n; i++) bitnet__jw_int(w, t->ids[i]);
        bitnet__jw_close(w, ']');
    }
    bitnet__jw_close(w, '}');
}
static void srv_fill_models(bitnet__jw *w, const void *ctx) {
    const srv *sv = (const srv *)ctx;
    bitnet__jw_open(w, '{'), bitnet__jw_key(w, "object"), bitnet__jw_str(w, "list");
    bitnet__jw_key(w, "data"), bitnet__jw_open(w, '['), bitnet__jw_open(w, '{');
    bitnet__jw_key(w, "id"), bitnet__jw_str(w, sv->name), bitnet__jw_key(w, "object"), bitnet__jw_str(w, "model");
    bitnet__jw_key(w, "owned_by"), bitnet__jw_str(w, "bitnet.h");
    bitnet__jw_key(w, "n_ctx"), bitnet__jw_int(w, sv->n_ctx);
    bitnet__jw_key(w, "n_vocab"), bitnet__jw_int(w, sv->info.n_vocab);
    bitnet__jw_close(w, '}'), bitnet__jw_close(w, ']'), bitnet__jw_close(w, '}');
}

/* One connection: a request (headers to a blank line, a body of Content-Length), its reply. */
static void srv_handle(srv *sv, int fd) {
    char *b = (char *)malloc(65536 + 1), *hend = NULL, *cl, method[8] = "", path[256] = "", *body;
    size_t n = 0, len = 0, hl;
    bitnet__json j;
    memset(&j, 0, sizeof j);
    if (b) b[0] = 0;
    while (b && n < 65536 && !(hend = strstr(b, "\r\n\r\n"))) {
        ssize_t k = recv(fd, b + n, 65536 - n, 0);
        if (k <= 0) break;
        n += (size_t)k, b[n] = 0;
    }
    if (!b || !hend || sscanf(b, "%7s %255s", method, path) != 2) { if (b) srv_error(fd, 400, "no HTTP request"); free(b); return; }
    hl = (size_t)(hend + 4 - b);
    for (cl = b; cl < hend && (cl = strchr(cl, '\n')) != NULL && cl < hend; cl++)
        if (strncasecmp(cl + 1, "content-length:", 15) == 0) len = strtoul(cl + 16, NULL, 10);
    if (len > SRV_MAX_BODY) { srv_error(fd, 413, "the body is larger than 16 MB"); free(b); return; }
    if (!(body = (char *)malloc(len + 1))) { srv_error(fd, 500, "out of memory"); free(b); return; }
    memcpy(body, b + hl, BITNET__MIN(n - hl, len));
    for (n = BITNET__MIN(n - hl, len); n < len;) {
        ssize_t k = recv(fd, body + n, len - n, 0);
        if (k <= 0) break;
        n += (size_t)k;
    }
    free(b);
    body[n] = 0;
    if (strchr(path, '?')) *strchr(path, '?') = 0;
    if (strcmp(method, "OPTIONS") == 0) srv_reply(fd, 200, "text/plain", "", 0); /* (a browser's preflight) */
    else if (strcmp(path, "/health") == 0) srv_reply(fd, 200, "application/json", "{\"status\": \"ok\"}", 16);
    else if (strcmp(path, "/v1/models") == 0 || strcmp(path, "/models") == 0) srv_json(fd, 200, 0, srv_fill_models, sv);
    else if (strcmp(path, "/completion") && strcmp(path, "/completions") && strcmp(path, "/v1/completions") &&
             strcmp(path, "/v1/chat/completions") && strcmp(path, "/chat/completions") && strcmp(path, "/tokenize") &&
             strcmp(path, "/detokenize"))
        srv_error(fd, 404, "no such endpoint");
    else if (strcmp(method, "POST") != 0) srv_error(fd, 405, "POST a JSON body");
    else if (n < len || bitnet__json_parse(&j, body, n, 1 << 16) != BITNET_OK || j.nodes[0].type != BITNET__J_OBJ) {
        char msg[4400];
        snprintf(msg, sizeof msg, "the body is not a JSON object: %s", n < len ? "cut short" : bitnet_last_error());
        srv_error(fd, 400, msg);
    } else if (strcmp(path, "/tokenize") == 0 || strcmp(path, "/detokenize") == 0) {
        const int de = path[1] == 'd';
        int32_t c = bitnet__json_get(&j, 0, de ? "tokens" : "content"), sp = bitnet__json_get(&j, 0, "add_special"), *ids = NULL, k;
        srv_toks t;
        bitnet_result r = BITNET_OK;
        memset(&t, 0, sizeof t);
        if (!de && c >= 0 && j.nodes[c].type == BITNET__J_STR)
            r = tokenize_all(sv->tk, j.nodes[c].str, strlen(j.nodes[c].str), sp >= 0 && j.nodes[sp].type == BITNET__J_TRUE, 1, &ids, &t.n);
        else if (de && c >= 0 && j.nodes[c].type == BITNET__J_ARR && (ids = (int32_t *)malloc(((size_t)j.nodes[c].count + 1) * 4))) {
            for (k = j.nodes[c].first; k >= 0; k = j.nodes[k].next) ids[t.n++] = j.nodes[k].type == BITNET__J_NUM ? (int32_t)j.nodes[k].num : -1;
            r = bitnet_detokenize(sv->tk, ids, t.n, NULL, 0, &t.len);
            if (r == BITNET_ERR_BAD_SIZE && (t.text = (const char *)malloc(t.len + 1)) != NULL)
                r = bitnet_detokenize(sv->tk, ids, t.n, (char *)t.text, t.len + 1, &t.len);
        } else {
            r = bitnet__err(BITNET_ERR_INVALID_ARG, de ? "tokens is not a list of ids" : "content is not a string");
        }
        t.ids = ids;
        if (r == BITNET_OK) srv_json(fd, 200, 0, srv_fill_tokens, &t);
        else {
            char msg[4400];
            snprintf(msg, sizeof msg, "%s: %s", bitnet_result_string(r), bitnet_last_error());
            srv_error(fd, 400, msg);
        }
        free(ids), free((void *)t.text);
    } else {
        srv_generate(sv, fd, &j, strstr(path, "chat") != NULL, strcmp(path, "/completion") != 0);
    }
    bitnet__json_free(&j);
    free(body);
}

typedef struct srv_conn { srv *sv; int fd; } srv_conn;
static void *srv_conn_main(void *arg) {
    srv_conn *c = (srv_conn *)arg;
    srv_handle(c->sv, c->fd);
    close(c->fd);
    pthread_mutex_lock(&c->sv->mu);
    c->sv->n_conn--;
    pthread_mutex_unlock(&c->sv->mu);
    free(c);
    return NULL;
}

static int cmd_serve(int argc, char **argv) {
    model_opts mo;
    const char *host = "127.0.0.1";
    int i, port = 8080, fd = -1, one = 1, n_par = 1;
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    pthread_attr_t attr;
    bitnet_session_desc sd;
    bitnet_result r = BITNET_OK;
    srv sv;
    memset(&mo, 0, sizeof mo), memset(&sv, 0, sizeof sv);
    for (i = 1; i < argc; i++) {
        int k = model_opt(&mo, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (strcmp(argv[i], "--host") == 0 && i + 1 < argc) host = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = atoi(argv[++i]);
        else if ((strcmp(argv[i], "--parallel") == 0 || strcmp(argv[i], "-np") == 0) && i + 1 < argc) n_par = atoi(argv[++i]);
        else return fprintf(stderr, "bitnet serve: unknown option or missing value: %s\n", argv[i]), 2;
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET, a.sin_port = htons((uint16_t)port);
    if (!mo.path || port < 0 || port > 65535 || n_par < 1 || n_par > 64 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
        return fprintf(stderr, "usage: bitnet serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel N (1-64)] [-c N_CTX] [--backend B] "
                               "[-t N]\n"), 2;
    signal(SIGPIPE, SIG_IGN); /* (a client that goes away mid-reply) */
    if ((r = open_model("serve", &mo, &sv.m)) != BITNET_OK) return fail("serve", r);
    sv.tk = bitnet_model_tokenizer(sv.m);
    sv.slot = (srv_slot *)calloc((size_t)n_par, sizeof *sv.slot);
    pthread_mutex_init(&sv.mu, NULL), pthread_cond_init(&sv.freed, NULL);
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = mo.n_ctx;
    r = sv.slot ? bitnet_model_get_info(sv.m, &sv.info) : BITNET_ERR_OUT_OF_MEMORY;
    for (; r == BITNET_OK && sv.n_slot < n_par; sv.n_slot++)
        if ((r = bitnet_session_create(sv.m, &sd, &sv.slot[sv.n_slot].s)) != BITNET_OK) break;
    sv.n_ctx = sd.n_ctx ? sd.n_ctx : sv.info.n_ctx_train; /* (a session takes the training context by default) */
    if (!sv.tk) fprintf(stderr, "bitnet serve: %s has no tokenizer\n", mo.path);
    else if (r != BITNET_OK) fail("serve", r);
    else if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
             bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr *)&a, &al) != 0)
        fprintf(stderr, "bitnet serve: %s:%d: %s\n", host, port, strerror(errno));
    else {
        sv.name = strrchr(mo.path, '/') ? strrchr(mo.path, '/') + 1 : mo.path;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        fprintf(stderr, "bitnet serve: listening on http://%s:%d (%d slot%s of %d positions)\n", host, (int)ntohs(a.sin_port), n_par,
                n_par > 1 ? "s" : "", (int)sv.n_ctx);
        for (;;) {
            pthread_t th;
            srv_conn *c;
            int full, cfd = accept(fd, NULL, NULL);
            if (cfd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                fprintf(stderr, "bitnet serve: accept: %s\n", strerror(errno));
                break;
            }
            pthread_mutex_lock(&sv.mu);
            full = sv.n_conn >= SRV_MAX_CONN;
            if (!full) sv.n_conn++;
            pthread_mutex_unlock(&sv.mu);
            if (full || !(c = (srv_conn *)malloc(sizeof *c))) {
                if (!full) pthread_mutex_lock(&sv.mu), sv.n_conn--, pthread_mutex_unlock(&sv.mu);
                srv_error(cfd, 503, "too many connections");
                close(cfd);
                continue;
            }
            c->sv = &sv, c->fd = cfd;
            { /* a client that sends nothing lets go of its thread after 30 s */
                struct timeval tv;
                tv.tv_sec = 30, tv.tv_usec = 0;
                setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            }
            if (pthread_create(&th, &attr, srv_conn_main, c) != 0) srv_conn_main(c); /* (no thread: answered here) */
        }
    }
    if (fd >= 0) close(fd); /* (after a failed accept, threads still running keep the slots: nothing is freed) */
    else {
        for (i = 0; i < sv.n_slot; i++) bitnet_session_free(sv.slot[i].s);
        free(sv.slot);
        bitnet_model_free(sv.m);
    }
    return 1;
}

/* ---- devices, kernels (GPU runtime) ---- */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}
static const char *yes(int v) { return v ? "yes" : "no"; }
static const char *jbool(int v) { return v ? "true" : "false"; }

static void print_device_json(const bitnet_gpu_device_info *d) {
    printf("{\"ordinal\": %d, \"name\": ", d->ordinal);
    json_str(d->name);
    printf(", \"pci_bus_id\": ");
    json_str(d->pci_bus_id);
    printf(", \"compute_capability\": \"%d.%d\", \"jit_target\": ", d->cc_major, d->cc_minor);
    json_str(d->jit_target);
    printf(", \"total_mem\": %llu, \"free_mem\": %llu, \"sm_count\": %d, \"max_threads_per_block\": %d, "
           "\"smem_per_block\": %d, \"smem_per_block_optin\": %d, \"l2_bytes\": %d, \"clock_khz\": %d, "
           "\"mem_clock_khz\": %d, \"mem_bus_bits\": %d, \"mem_bandwidth_gbs\": %.1f, \"fp16\": %s, \"bf16\": %s, "
           "\"int8_tensor_cores\": %s, \"fp8\": %s}",
           (unsigned long long)d->total_mem, (unsigned long long)d->free_mem, d->sm_count, d->max_threads_per_block,
           d->smem_per_block, d->smem_per_block_optin, d->l2_bytes, d->clock_khz, d->mem_clock_khz, d->mem_bus_bits,
           d->mem_bandwidth_gbs, jbool(d->fp16), jbool(d->bf16), jbool(d->int8_tensor_cores), jbool(d->fp8));
}

static void print_device_text(const bitnet_gpu_device_info *d) {
    printf("device %d: %s%s%s%s\n", d->ordinal, d->name, d->pci_bus_id[0] ? " (PCI " : "", d->pci_bus_id,
           d->pci_bus_id[0] ? ")" : "");
    printf("  compute capability %d.%d, JIT target %s\n", d->cc_major, d->cc_minor,
           d->jit_target[0] ? d->jit_target : "none (no NVRTC)");
    printf("  %d SMs at %d MHz, %d threads per block\n", d->sm_count, d->clock_khz / 1000, d->max_threads_per_block);
    printf("  memory %.2f GiB total, %.2f GiB free; %d-bit bus at %d MHz: %.1f GB/s theoretical\n",
           (double)d->total_mem / 1073741824.0, (double)d->free_mem / 1073741824.0, d->mem_bus_bits,
           d->mem_clock_khz / 1000, d->mem_bandwidth_gbs);
    printf("  L2 %.1f MiB; shared memory per block %d KiB (%d KiB opt-in)\n", d->l2_bytes / 1048576.0,
           d->smem_per_block / 1024, d->smem_per_block_optin / 1024);
    printf("  fp16 %s, bf16 %s, int8 tensor cores %s, fp8 %s\n", yes(d->fp16), yes(d->bf16), yes(d->int8_tensor_cores),
           yes(d->fp8));
}

static int cmd_devices(int argc, char **argv) {
    bitnet_gpu_backends b;
    int i, json = 0, n;
    const char *fake = getenv("BITNET_GPU_FAKE");
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else return fprintf(stderr, "usage: bitnet devices [--json]\n"), 2;
    }
    bitnet_gpu_backends_get(&b);
    n = b.mocked ? 0 : b.device_count;
    if (json) {
        printf("{\"mocked\": %s", jbool(b.mocked));
        if (b.mocked) printf(", \"mock\": "), json_str(fake ? fake : "");
        printf(", \"backends\": {\"cuda\": %s, \"rocm\": %s, \"metal\": %s, \"webgpu\": %s}", jbool(b.cuda), jbool(b.rocm),
               jbool(b.metal), jbool(b.webgpu));
        printf(", \"cuda_driver_version\": %d, \"nvrtc_version\": %d, \"device_count\": %d, \"reason\": ",
               b.cuda_driver_version, b.nvrtc_version, n);
        json_str(b.reason);
        printf(", \"devices\": [");
        for (i = 0; i < n; i++) {
            bitnet_gpu_device_info d;
            if (i) printf(", ");
            if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_json(&d);
            else printf("{\"ordinal\": %d, \"error\": ", i), json_str(bitnet_last_error()), printf("}");
        }
        printf("]}\n");
        return 0;
    }
    if (b.mocked) printf("detection mocked by BITNET_GPU_FAKE=\"%s\"\n", fake ? fake : "");
    printf("backends: cuda %s, rocm %s, metal %s, webgpu %s\n", yes(b.cuda), yes(b.rocm), yes(b.metal), yes(b.webgpu));
    if (b.cuda_driver_version) printf("CUDA driver %d.%d\n", b.cuda_driver_version / 1000, b.cuda_driver_version % 1000 / 10);
    if (b.nvrtc_version) printf("NVRTC %d.%d\n", b.nvrtc_version / 1000, b.nvrtc_version % 1000 / 10);
    for (i = 0; i < n; i++) {
        bitnet_gpu_device_info d;
        if (bitnet_gpu_device_info_get(i, &d) == BITNET_OK) print_device_text(&d);
        else printf("device %d: %s\n", i, bitnet_last_error());
    }
    if (n == 0) printf("no CUDA device: %s\n", b.reason);
    else if (b.reason[0]) printf("note: %s\n", b.reason);
    return 0;
}

static int cmd_kernels(int argc, char **argv) {
    const char *arch = NULL;
    char arch_buf[32];
    int i, json = 0, use_cache = 0, cc = 0, ok = 0, failed = 0, n = bitnet_gpu_builtin_count();
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (strcmp(argv[i], "--cache") == 0) use_cache = 1;
        else if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) arch = argv[++i];
        else return fprintf(stderr, "usage: bitnet kernels [--arch sm_XX] [--json] [--cache]\n"), 2;
    }
    if (!arch) { /* the first device's own arch */
        bitnet_gpu_device_info d;
        if (!bitnet_gpu_available() || bitnet_gpu_device_info_get(0, &d) != BITNET_OK)
            return fprintf(stderr, "bitnet kernels: no GPU to take the arch from (%s); give --arch sm_XX\n",
                           bitnet_last_error()), 2;
        snprintf(arch_buf, sizeof arch_buf, "sm_%d%d", d.cc_major, d.cc_minor);
        arch = arch_buf;
    }
    if (sscanf(arch, "sm_%d", &cc) != 1 && sscanf(arch, "compute_%d", &cc) != 1) cc = 0;
    if (json) printf("{\"arch\": "), json_str(arch), printf(", \"modules\": [");
    for (i = 0; i < n; i++) {
        bitnet_gpu_jit_info info;
        const char *name = bitnet_gpu_builtin_name(i);
        int min_sm = bitnet_gpu_builtin_min_sm(i);
        bitnet_result r;
        if (json && i) printf(", ");
        if (cc && cc < min_sm) {
            if (json) printf("{\"name\": \"%s\", \"status\": \"skipped\", \"min_sm\": %d}", name, min_sm);
            else printf("  %-16s skipped (needs sm_%d)\n", name, min_sm);
            continue;
        }
        r = bitnet_gpu_jit_builtin(i, arch, use_cache, &info);
        if (r == BITNET_OK) ok++;
        else failed++;
        if (json) {
            printf("{\"name\": \"%s\", \"status\": \"%s\"", name, r == BITNET_OK ? "ok" : "failed");
            if (r == BITNET_OK)
                printf(", \"target\": \"%s\", \"format\": \"%s\", \"bytes\": %zu, \"ms\": %.1f, \"from_cache\": %s", info.target,
                       info.cubin ? "cubin" : "ptx", info.bytes, info.ms, jbool(info.from_cache));
            else printf(", \"error\": "), json_str(bitnet_last_error());
            printf("}");
        } else if (r == BITNET_OK) {
            printf("  %-16s %s %s, %zu bytes, %.1f ms%s\n", name, info.target, info.cubin ? "cubin" : "PTX", info.bytes,
                   info.ms, info.from_cache ? " (cache)" : "");
        } else {
            printf("  %-16s FAILED: %s\n", name, bitnet_last_error());
        }
    }
    if (json) printf("], \"compiled\": %d, \"failed\": %d, \"summary\": \"compiled %d modules for %s, %d failed\"}\n", ok,
                     failed, ok, arch, failed);
    else printf("compiled %d modules for %s, %d failed\n", ok, arch, failed);
    return failed ? 1 : 0;
}

/* ---- bench-kernels --backend cuda: W2A8 GEMV/GEMM and the fp16 LM head against the device's copy
   bandwidth, cuBLAS bf16 and int8 and (with --bitnetcpp LIB) bitnet.cpp's W2A8 kernel, side by side ----
   Protocol: every kernel is captured into a CUDA graph over R copies of its weights (R * bytes >= 1
   GiB, so each replay reads DRAM, not L2), and timed with device events around graph replays
   (median of 5). The copy bandwidth (bytes read + written, the better of a device memcpy and a
   16-byte copy kernel) is measured in the same run. cuBLAS is dlopen'd (BITNET_CUBLAS, else
   libcublas.so.13 / .12 / .so) and skipped when absent; its calls go on the runtime's stream, so the
   graph captures them. bitnet.cpp's library (built from a microsoft/BitNet checkout: gpu/
   bitnet_kernels) is called the same way, through its bitlinear_int8xint2 entry. */
#if !defined(_WIN32)
typedef int (*bk_gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                             const void *, void *, int, int, int, int);
typedef struct bk_cublas {
    void *lib, *handle;
    bitnet_devptr workspace;
    int (*create)(void **);
    int (*destroy)(void *);
    int (*set_stream)(void *, void *);
    int (*set_workspace)(void *, void *, size_t);
    bk_gemm_ex_fn gemm_ex;
} bk_cublas;
typedef void (*bk_bitnetcpp_fn)(void *, void *, void *, void *, void *, int, int, int, void *);

typedef struct bk_ctx {
    bitnet_gpu *gpu;
    int kind;                        /* 0 ours W2A8, 1 cuBLAS, 2 bitnet.cpp, 3 ours fp16 dense, 4 memcpy, 5 copy kernel, 6 nop */
    bitnet_gpu_ternary w;            /* ours: w.data is replaced per copy */
    bitnet_devptr base;              /* copy r lives at base + r * stride */
    size_t stride, m, n, k;
    bitnet_gpu_act *a;
    bitnet_devptr x, out, aux, aux2; /* activations (cuBLAS / bitnet.cpp / dense), output, scales */
    int dtype;                       /* cuBLAS: 14 bf16, 2 fp16, 3 int8 */
    bk_cublas *cb;
    bk_bitnetcpp_fn bnc;
    bitnet_gpu_kernel *kern;
} bk_ctx;

static void *bk_ptr(bitnet_devptr p) { return (void *)(uintptr_t)p; }

static bitnet_result bk_issue(bk_ctx *c, int r) {
    bitnet_devptr wr = c->base + (bitnet_devptr)r * c->stride;
    switch (c->kind) {
    case 0: {
        bitnet_gpu_ternary w = c->w;
        w.data = wr;
        return bitnet_gpu_ternary_matmul(c->gpu, &w, c->a, c->out, BITNET_PRECISION_FP32, 0);
    }
    case 1: {
        /* int8 (CUDA_R_8I, 3): int32 scalars and output (CUDA_R_32I, 10), CUBLAS_COMPUTE_32I (72); else
           fp32 scalars, bf16 / fp32 output, CUBLAS_COMPUTE_32F (68) */
        const float one = 1.0f, zero = 0.0f;
        const int32_t ione = 1, izero = 0, i8 = c->dtype == 3;
        const void *alpha = i8 ? (const void *)&ione : (const void *)&one, *beta = i8 ? (const void *)&izero : (const void *)&zero;
        const int out_type = i8 ? 10 : c->dtype == 2 ? 0 : c->dtype, compute = i8 ? 72 : 68;
        /* out (m x n row-major) = x (m x k) . W^T: column-major C (n x m) = W^T(n x k) . x^T(k x m) */
        int st = c->cb->gemm_ex(c->cb->handle, 1, 0, (int)c->n, (int)c->m, (int)c->k, alpha, bk_ptr(wr), c->dtype, (int)c->k,
                                bk_ptr(c->x), c->dtype, (int)c->k, beta, bk_ptr(c->out), out_type, (int)c->n, compute,
                                -1 /* CUBLAS_GEMM_DEFAULT */);
        return st ? bitnet__err(BITNET_ERR_CUDA, "cublasGemmEx: status %d", st) : BITNET_OK;
    }
    case 2:
        c->bnc(bk_ptr(c->x), bk_ptr(wr), bk_ptr(c->out), bk_ptr(c->aux), bk_ptr(c->aux2), 1, (int)c->n, (int)c->k,
               bitnet_gpu_raw_stream(c->gpu));
        return BITNET_OK;
    case 3:
        return bitnet_gpu_matmul(c->gpu, BITNET_PRECISION_FP16, wr, c->x, c->m, c->n, c->k, c->out, BITNET_PRECISION_FP32);
    case 4:
        return bitnet_gpu_copy(c->gpu, c->out, c->base, c->stride);
    case 5: {
        unsigned long long n16 = c->stride / 16;
        unsigned grid[3] = {0, 1, 1}, block[3] = {512, 1, 1};
        void *args[3];
        args[0] = &c->base, args[1] = &c->out, args[2] = &n16;
        grid[0] = (unsigned)(4 * c->m); /* m holds the multiprocessor count here */
        return bitnet_gpu_launch(c->gpu, c->kern, grid, block, 0, args);
    }
    default: {
        int z = 0;
        unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
        void *args[1];
        args[0] = &z;
        return bitnet_gpu_launch(c->gpu, c->kern, grid, block, 0, args);
    }
    }
}

/* Median microseconds per launch over graph replays of reps launches (copies 0..reps-1). */
static double bk_time(bk_ctx *c, int reps) {
    bitnet_gpu_graph *g = NULL;
    double ms = 0, t[5], tmp;
    int i, j, iters;
    for (i = 0; i < 2 && i < reps; i++)
        if (bk_issue(c, i) != BITNET_OK) return -1; /* warm-up: JIT, library init */
    if (bitnet_gpu_sync(c->gpu) != BITNET_OK || bitnet_gpu_graph_begin(c->gpu) != BITNET_OK) return -1;
    for (i = 0; i < reps; i++)
        if (bk_issue(c, i) != BITNET_OK) break;
    if (bitnet_gpu_graph_end(c->gpu, &g) != BITNET_OK || i < reps) {
        bitnet_gpu_graph_free(g);
        return -1;
    }
    if (bitnet_gpu_timer_begin(c->gpu) != BITNET_OK || bitnet_gpu_graph_launch(c->gpu, g) != BITNET_OK ||
        bitnet_gpu_timer_end(c->gpu, &ms) != BITNET_OK) {
        bitnet_gpu_graph_free(g);
        return -1;
    }
    iters = ms > 0 ? (int)(10.0 / ms) : 10;
    iters = iters < 2 ? 2 : (iters > 200 ? 200 : iters);
    for (j = 0; j < 5; j++) {
        if (bitnet_gpu_timer_begin(c->gpu) != BITNET_OK) break;
        for (i = 0; i < iters; i++) bitnet_gpu_graph_launch(c->gpu, g);
        if (bitnet_gpu_timer_end(c->gpu, &ms) != BITNET_OK) break;
        t[j] = ms * 1e3 / ((double)iters * reps);
    }
    bitnet_gpu_graph_free(g);
    if (j < 5) return -1;
    for (i = 0; i < 5; i++) /* median */
        for (j = i + 1; j < 5; j++)
            if (t[j] < t[i]) tmp = t[i], t[i] = t[j], t[j] = tmp;
    return t[2];
}

static int bk_reps(size_t bytes) {
    size_t r = ((size_t)1 << 30) / bytes + 1;
    return (int)(r < 2 ? 2 : (r > 2048 ? 2048 : r));
}

/* Fills the device buffer with copies of one random host block: 16-bit values (bf16 / fp16 in
   [-1, 1]) when dtype is set, else random bytes. */
static bitnet_result bk_fill(bitnet_gpu *gpu, bitnet_devptr base, size_t bytes, int reps, int dtype, uint64_t *rng) {
    unsigned char *h = (unsigned char *)malloc(bytes);
    size_t i;
    int r;
    bitnet_result res;
    if (!h) return BITNET_ERR_OUT_OF_MEMORY;
    for (i = 0; i + 1 < bytes; i += 2) {
        uint16_t v;
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        if (dtype) {
            float f = (float)((*rng >> 40) & 0xFFFF) / 32768.0f - 1.0f;
            v = dtype == 14 ? bitnet_fp32_to_bf16(f) : bitnet_fp32_to_fp16(f);
        } else {
            v = (uint16_t)(*rng >> 24);
        }
        memcpy(h + i, &v, 2);
    }
    res = bitnet_gpu_upload(gpu, base, h, bytes);
    for (r = 1; r < reps && res == BITNET_OK; r++) res = bitnet_gpu_copy(gpu, base + (bitnet_devptr)r * bytes, base, bytes);
    free(h);
    return res;
}

/* The yardsticks: the copy bandwidth (GB/s of bytes read + written) of a device memcpy and of a
   16-byte copy kernel over 1 GiB, and an empty kernel's time in a graph (us). */
static bitnet_result bk_yardsticks(bitnet_gpu *gpu, int sm_count, double *copy_memcpy, double *copy_kernel, double *nop_us) {
    bk_ctx c;
    bitnet_result r;
    memset(&c, 0, sizeof c);
    c.gpu = gpu;
    c.stride = (size_t)1 << 30;
    r = bitnet_gpu_alloc(gpu, c.stride, &c.base);
    if (r == BITNET_OK) r = bitnet_gpu_alloc(gpu, c.stride, &c.out);
    if (r == BITNET_OK) r = bitnet_gpu_memset(gpu, c.base, 1, c.stride);
    if (r != BITNET_OK) {
        bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.out);
        return r;
    }
    c.kind = 4;
    *copy_memcpy = 2.0 * (double)c.stride / (bk_time(&c, 1) * 1e3);
    c.kind = 5;
    c.m = (size_t)sm_count;
    *copy_kernel = bitnet_gpu_builtin_kernel(gpu, "bitnet_k_copy16", &c.kern) == BITNET_OK
                       ? 2.0 * (double)c.stride / (bk_time(&c, 1) * 1e3) : 0;
    c.kind = 6;
    *nop_us = bitnet_gpu_builtin_kernel(gpu, "bitnet_k_nop", &c.kern) == BITNET_OK ? bk_time(&c, 200) : -1;
    bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.out);
    return BITNET_OK;
}

/* bench's GPU yardstick: device 0's copy bandwidth, GB/s; 0 where it cannot be measured. */
static double bench_cuda_copy_bw(void) {
    bitnet_gpu *gpu = NULL;
    bitnet_gpu_device_info info;
    double mc = 0, ck = 0, nop;
    if (bitnet_gpu_open(0, &gpu) == BITNET_OK && bitnet_gpu_device_info_get(0, &info) == BITNET_OK &&
        bk_yardsticks(gpu, info.sm_count, &mc, &ck, &nop) != BITNET_OK)
        mc = ck = 0;
    bitnet_gpu_close(gpu);
    return mc > ck ? mc : ck;
}

typedef struct bk_row { char shape[32]; int m; const char *impl; double us, gbps, ratio; } bk_row;

static int bench_kernels_cuda(int argc, char **argv) {
    static const size_t shapes[][2] = {{2560, 2560}, {3840, 2560}, {13824, 2560}, {2560, 6912}, {20480, 3200}, {55296, 5120}};
    const char *json = NULL, *bnc_path = NULL, *cb_env = getenv("BITNET_CUBLAS");
    static const char *const cb_names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    bitnet_gpu *gpu = NULL;
    bitnet_gpu_device_info info;
    bk_cublas cb;
    bk_bitnetcpp_fn bnc = NULL;
    bk_ctx c;
    bk_row rows[64];
    int nrows = 0, device = 0, i, s, mi, ti, quick = 0;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    double copy_memcpy, copy_kernel, copy_bw, nop_us;
    bitnet_devptr big = 0;
    FILE *jf;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) i++;
        else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
        else if (strcmp(argv[i], "--bitnetcpp") == 0 && i + 1 < argc) bnc_path = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0) quick = 1; /* ours at M = 1 only (tuning A/B runs) */
        else {
            fprintf(stderr, "usage: bitnet bench-kernels --backend cuda [--json FILE] [--bitnetcpp LIB] [--device N] [--quick]\n");
            return 2;
        }
    }
    bitnet_set_logger(bitnet_log_stderr, NULL);
    if (bitnet_gpu_open(device, &gpu) != BITNET_OK || bitnet_gpu_device_info_get(device, &info) != BITNET_OK) {
        fprintf(stderr, "bench-kernels: no CUDA device: %s\n", bitnet_last_error());
        return 1;
    }
    printf("bench-kernels --backend cuda: %s (sm_%d%d, %d SMs, %.0f GB/s theoretical), bitnet.h %s\n", info.name, info.cc_major,
           info.cc_minor, info.sm_count, info.mem_bandwidth_gbs, BITNET_VERSION_STRING);
    /* cuBLAS: bound to the runtime's context and stream, so graph capture records its kernels */
    memset(&cb, 0, sizeof cb);
    {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        int (*set_ctx)(void *) = cuda ? (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent") : NULL;
        if (set_ctx) set_ctx(bitnet_gpu_raw_context(gpu));
        for (i = cb_env ? -1 : 0; i < 3 && !cb.lib; i++) cb.lib = dlopen(i < 0 ? cb_env : cb_names[i], RTLD_NOW | RTLD_LOCAL);
        if (cb.lib) {
            cb.create = (int (*)(void **))dlsym(cb.lib, "cublasCreate_v2");
            cb.destroy = (int (*)(void *))dlsym(cb.lib, "cublasDestroy_v2");
            cb.set_stream = (int (*)(void *, void *))dlsym(cb.lib, "cublasSetStream_v2");
            cb.set_workspace = (int (*)(void *, void *, size_t))dlsym(cb.lib, "cublasSetWorkspace_v2");
            cb.gemm_ex = (bk_gemm_ex_fn)dlsym(cb.lib, "cublasGemmEx");
            if (!cb.create || !cb.destroy || !cb.set_stream || !cb.set_workspace || !cb.gemm_ex || cb.create(&cb.handle) ||
                cb.set_stream(cb.handle, bitnet_gpu_raw_stream(gpu)) ||
                bitnet_gpu_alloc(gpu, 64u << 20, &cb.workspace) != BITNET_OK ||
                cb.set_workspace(cb.handle, bk_ptr(cb.workspace), 64u << 20)) {
                printf("cuBLAS: found but unusable; skipped\n");
                cb.handle = NULL;
            }
        }
        if (!cb.handle) printf("cuBLAS: not found (BITNET_CUBLAS, libcublas.so.13/.12); skipped\n");
    }
    if (bnc_path) {
        void *lib = dlopen(bnc_path, RTLD_NOW | RTLD_LOCAL);
        if (lib) bnc = (bk_bitnetcpp_fn)dlsym(lib, "bitlinear_int8xint2");
        if (!bnc) printf("bitnet.cpp: cannot use %s (%s); skipped\n", bnc_path, lib ? "no bitlinear_int8xint2" : dlerror());
    }

    if (bk_yardsticks(gpu, info.sm_count, &copy_memcpy, &copy_kernel, &nop_us) != BITNET_OK) {
        fprintf(stderr, "bench-kernels: %s\n", bitnet_last_error());
        return 1;
    }
    copy_bw = copy_memcpy > copy_kernel ? copy_memcpy : copy_kernel;
    printf("copy bandwidth: %.0f GB/s (memcpy %.0f, copy kernel %.0f; bytes read + written); empty kernel %.2f us\n", copy_bw,
           copy_memcpy, copy_kernel, nop_us);
    memset(&c, 0, sizeof c);
    c.gpu = gpu;
    printf("%-14s %4s  %-22s %10s %12s %8s\n", "shape (NxK)", "M", "kernel", "us", "weight GB/s", "x copy");

#define BK_ROW(SHAPE, M, IMPL, US, WBYTES) \
    do { \
        bk_row *r_ = &rows[nrows++]; \
        snprintf(r_->shape, sizeof r_->shape, "%s", SHAPE); \
        r_->m = (M), r_->impl = (IMPL), r_->us = (US); \
        r_->gbps = r_->us > 0 ? (double)(WBYTES) / (r_->us * 1e3) : 0; \
        r_->ratio = r_->gbps / copy_bw; \
        if (r_->us > 0) printf("%-14s %4d  %-22s %10.2f %12.0f %8.3f\n", r_->shape, r_->m, r_->impl, r_->us, r_->gbps, r_->ratio); \
        else printf("%-14s %4d  %-22s %10s\n", r_->shape, r_->m, r_->impl, "failed"); \
        fflush(stdout); \
    } while (0)

    for (s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        size_t n = shapes[s][0], k = shapes[s][1], wb = n * k / 4, nrep;
        char shape[32];
        int8_t *codes = (int8_t *)malloc(n * k);
        uint8_t *i2s = (uint8_t *)malloc(wb + 32);
        float *xh = (float *)malloc(512 * k * 4);
        bitnet_gpu_i2s_part part;
        bitnet_gpu_act a;
        bitnet_devptr dx = 0;
        snprintf(shape, sizeof shape, "%zux%zu", n, k);
        if (!codes || !i2s || !xh) return fprintf(stderr, "bench-kernels: out of host memory\n"), 1;
        for (i = 0; i < (int)(n * k); i++) rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, codes[i] = (int8_t)(rng % 3) - 1;
        for (i = 0; i < (int)(512 * k); i++) rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17,
                                              xh[i] = (float)((rng >> 40) & 0xFFFF) / 16384.0f - 2.0f;
        memset(&c, 0, sizeof c);
        c.gpu = gpu;
        c.n = n, c.k = k;
        part.data = i2s, part.bytes = wb + 32, part.n = n;
        if (bitnet_i2s_pack(codes, n, k, 0.5f, i2s, wb + 32) != BITNET_OK ||
            bitnet_gpu_ternary_upload(gpu, &part, 1, k, 0, &c.w) != BITNET_OK || bitnet_gpu_act_alloc(gpu, 512, k, &a) != BITNET_OK ||
            bitnet_gpu_alloc(gpu, 512 * k * 4, &dx) != BITNET_OK || bitnet_gpu_upload(gpu, dx, xh, 512 * k * 4) != BITNET_OK ||
            bitnet_gpu_quantize_act(gpu, dx, 512, k, 0, 0, &a) != BITNET_OK ||
            bitnet_gpu_alloc(gpu, 512 * n * 4, &c.out) != BITNET_OK) {
            fprintf(stderr, "bench-kernels %s: %s\n", shape, bitnet_last_error());
            return 1;
        }
        /* ours: the uploaded T32 image copied reps times */
        c.stride = c.w.n_pad * k / 4;
        nrep = (size_t)bk_reps(c.stride);
        if (bitnet_gpu_alloc(gpu, nrep * c.stride, &c.base) != BITNET_OK) return fprintf(stderr, "%s\n", bitnet_last_error()), 1;
        for (i = 0; i < (int)nrep; i++) bitnet_gpu_copy(gpu, c.base + (bitnet_devptr)i * c.stride, c.w.data, c.stride);
        c.a = &a;
        c.kind = 0;
        for (mi = 0; mi < 2 - quick; mi++) {
            a.m = mi ? 512 : 1;
            BK_ROW(shape, (int)a.m, "bitnet.h W2A8", bk_time(&c, (int)BITNET__MIN(nrep, mi ? (size_t)64 : nrep)), wb);
        }
        bitnet_gpu_free(gpu, c.base);
        /* bitnet.cpp, M = 1: int8 activations, its own packed layout (random bytes), bf16 scales */
        if (bnc && !quick) {
            uint16_t s1[1] = {0x42FE}, ws4[4] = {0x3F00, 0x3F00, 0x3F00, 0x3F00};
            c.kind = 2, c.bnc = bnc, c.stride = wb, c.x = a.q;
            nrep = (size_t)bk_reps(wb);
            if (bitnet_gpu_alloc(gpu, nrep * wb, &c.base) == BITNET_OK && bk_fill(gpu, c.base, wb, (int)nrep, 0, &rng) == BITNET_OK &&
                bitnet_gpu_alloc(gpu, 2, &c.aux) == BITNET_OK && bitnet_gpu_alloc(gpu, 8, &c.aux2) == BITNET_OK &&
                bitnet_gpu_upload(gpu, c.aux, s1, 2) == BITNET_OK && bitnet_gpu_upload(gpu, c.aux2, ws4, 8) == BITNET_OK)
                BK_ROW(shape, 1, "bitnet.cpp W2A8", bk_time(&c, (int)nrep), wb);
            bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.aux), bitnet_gpu_free(gpu, c.aux2);
            c.base = c.aux = c.aux2 = 0;
        }
        /* cuBLAS bf16, then int8 x int8 -> int32 (its tensor-core peak is twice bf16's: the yardstick
           for what an int8 GEMM reaches at M = 512), M = 1 and 512 */
        for (ti = 0; ti < 2 && cb.handle && !quick; ti++) {
            size_t eb = ti ? 1 : 2, bb = n * k * eb;
            c.kind = 1, c.cb = &cb, c.dtype = ti ? 3 : 14, c.stride = bb;
            nrep = (size_t)bk_reps(bb);
            if (bitnet_gpu_alloc(gpu, nrep * bb, &c.base) == BITNET_OK &&
                bk_fill(gpu, c.base, bb, (int)nrep, ti ? 0 : 14, &rng) == BITNET_OK &&
                bitnet_gpu_alloc(gpu, 512 * k * eb, &c.x) == BITNET_OK && bk_fill(gpu, c.x, 512 * k * eb, 1, ti ? 0 : 14, &rng) == BITNET_OK)
                for (mi = 0; mi < 2; mi++) {
                    c.m = mi ? 512 : 1;
                    BK_ROW(shape, (int)c.m, ti ? "cuBLAS int8" : "cuBLAS bf16", bk_time(&c, (int)nrep), bb);
                }
            bitnet_gpu_free(gpu, c.base), bitnet_gpu_free(gpu, c.x);
            c.base = c.x = 0;
        }
        bitnet_gpu_free(gpu, c.out), bitnet_gpu_free(gpu, dx);
        bitnet_gpu_act_free(gpu, &a);
        bitnet_gpu_ternary_free(gpu, &c.w);
        free(codes), free(i2s), free(xh);
    }
    /* the fp16 LM head (tied embedding), M = 1 */
    if (!quick) {
        size_t n = 128256, k = 2560, bb = n * k * 2, nrep = (size_t)bk_reps(bb);
        memset(&c, 0, sizeof c);
        c.gpu = gpu, c.n = n, c.k = k, c.m = 1, c.stride = bb;
        if (bitnet_gpu_alloc(gpu, nrep * bb, &big) == BITNET_OK && bk_fill(gpu, big, bb, (int)nrep, 2, &rng) == BITNET_OK &&
            bitnet_gpu_alloc(gpu, k * 2, &c.x) == BITNET_OK && bk_fill(gpu, c.x, k * 2, 1, 2, &rng) == BITNET_OK &&
            bitnet_gpu_alloc(gpu, n * 4, &c.out) == BITNET_OK) {
            c.base = big;
            c.kind = 3;
            BK_ROW("128256x2560", 1, "bitnet.h fp16 head", bk_time(&c, (int)nrep), bb);
            if (cb.handle) {
                c.kind = 1, c.cb = &cb, c.dtype = 2;
                BK_ROW("128256x2560", 1, "cuBLAS fp16 head", bk_time(&c, (int)nrep), bb);
            }
        } else {
            printf("lm head: %s\n", bitnet_last_error());
        }
        bitnet_gpu_free(gpu, big), bitnet_gpu_free(gpu, c.x), bitnet_gpu_free(gpu, c.out);
    }
#undef BK_ROW
    /* side by side: ours against each reference on the same shape and M */
    printf("\nspeedup of bitnet.h (same run):\n");
    for (i = 0; i < nrows; i++) {
        int j;
        if (strncmp(rows[i].impl, "bitnet.h", 8) || rows[i].us <= 0) continue;
        for (j = 0; j < nrows; j++)
            if (j != i && rows[j].m == rows[i].m && strcmp(rows[j].shape, rows[i].shape) == 0 && strncmp(rows[j].impl, "bitnet.h", 8) &&
                rows[j].us > 0)
                printf("  %-14s M=%-4d vs %-18s %6.2fx\n", rows[i].shape, rows[i].m, rows[j].impl, rows[j].us / rows[i].us);
    }
    if (json) {
        jf = fopen(json, "w");
        if (!jf) return fprintf(stderr, "bench-kernels: cannot write %s\n", json), 1;
        fprintf(jf, "{\"device\": \"%s\", \"cc\": \"%d.%d\", \"copy_gbps\": %.1f, \"copy_memcpy_gbps\": %.1f, "
                    "\"copy_kernel_gbps\": %.1f, \"empty_kernel_us\": %.3f, \"protocol\": \"CUDA graph replay, weights rotated "
                    "through >= 1 GiB, CUDA events, median of 5\", \"rows\": [",
                info.name, info.cc_major, info.cc_minor, copy_bw, copy_memcpy, copy_kernel, nop_us);
        for (i = 0; i < nrows; i++)
            fprintf(jf, "%s\n  {\"shape\": \"%s\", \"m\": %d, \"kernel\": \"%s\", \"us\": %.3f, \"weight_gbps\": %.1f, "
                        "\"ratio_to_copy_bw\": %.4f}", i ? "," : "", rows[i].shape, rows[i].m, rows[i].impl, rows[i].us, rows[i].gbps,
                    rows[i].ratio);
        fprintf(jf, "\n]}\n");
        fclose(jf);
        printf("wrote %s\n", json);
    }
    if (cb.handle) cb.destroy(cb.handle);
    if (cb.workspace) bitnet_gpu_free(gpu, cb.workspace);
    bitnet_gpu_close(gpu);
    return 0;
}
#else
static int bench_kernels_cuda(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "bench-kernels --backend cuda: not built for Windows\n");
    return 1;
}
static double bench_cuda_copy_bw(void) { return 0; }
#endif

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"bench", cmd_bench, "bench -m FILE [--backend cpu|cuda|all] [--prompt-tokens 64,512] [--gen-tokens 128] [--runs 5]\n"
                         "      [--warmup 1] [--json FILE] [--csv FILE] [--receipt FILE] [--check-determinism] [--require-gpu]\n"
                         "                               measure speed; a receipt records what ran"},
    {"verify-receipt", cmd_verify_receipt, "verify-receipt FILE [--require-gpu-kernels] [--min-tps X] [--max-p95-ms Y] [--max-wall-ms Z]\n"
                                           "                               check a receipt: exit 0 ok, 1 a gate failed, 2 invalid"},
    {"tokenize", cmd_tokenize, "tokenize -m FILE -p TEXT     print token ids (--tiktoken FILE, --hex-lines FILE, --no-bos, --no-special)"},
    {"bench-kernels", cmd_bench_kernels, "bench-kernels [--backend cpu|cuda] [--json FILE]  kernel speed vs memory or copy bandwidth"},
    {"info", cmd_info, "info FILE                    print a GGUF file's metadata and tensors, and check it"},
    {"gen-model", cmd_gen_model, "gen-model --preset tiny|small|2b4t|falcon3-1b|llama3-8b|1bitllm-3b [--seed S] -o FILE   write a random-weight model"},
    {"convert", cmd_convert, "convert DIR -o FILE.gguf       a Hugging Face BitNet checkpoint folder to GGUF (I2_S)"},
    {"serve", cmd_serve, "serve -m FILE [--host 127.0.0.1] [--port 8080] [--parallel N] [-c N_CTX] [--backend B] [-t N]\n"
                         "                               an HTTP server: llama.cpp's /completion, /tokenize, /detokenize, /health\n"
                         "                               and OpenAI's /v1/completions, /v1/chat/completions (stream: server-sent\n"
                         "                               events), /v1/models; N sessions generate at once (1 by default)"},
    {"devices", cmd_devices, "devices [--json]             GPU backends and every CUDA device"},
    {"kernels", cmd_kernels, "kernels [--arch sm_XX] [--json] [--cache]  compile every built-in CUDA module (no GPU needed)"},
    {"help", cmd_help, "help [COMMAND]               this list, or one command's (also: bitnet COMMAND -h)"},
    {"run", cmd_run, "run -m FILE -p TEXT|-f FILE [-n N] [--backend auto|cpu|cuda] [--seed S] [--temp T] [--top-k K] [--top-p P]\n"
                     "      [--min-p P] [--repeat-penalty R] [--repeat-last-n N] [--ignore-eos] [--chat] [-cnv] [-t THREADS]\n"
                     "      [-c N_CTX] [--head f16|q8] [--no-mmap] [--chat-template bitnet|llama3|falcon3] [--prompt-cache FILE]\n"
                     "      [--context-shift] [--grammar GBNF | --grammar-file FILE | -j SCHEMA | --json-schema-file FILE]\n"
                     "      [--presence-penalty P] [--frequency-penalty F] [--logit-bias TOKEN+BIAS|TOKEN-BIAS ...] [-r TEXT ...]\n"
                     "                               generate text, streamed to stdout; speeds on stderr. -cnv: a\n"
                     "                               conversation, a message a line of stdin (-p: the system message);\n"
                     "                               --chat and -cnv in the file's chat template (else the one named);\n"
                     "                               --prompt-cache: the prompt's (-cnv: the system message's) state\n"
                     "                               kept in FILE, what matches reused next time; --context-shift: where the context fills\n"
                     "                               before -n tokens, the older half after the prompt goes; --grammar: the\n"
                     "                               reply held to a GBNF grammar (llama.cpp's notation; root rule \"root\");\n"
                     "                               -j / --json-schema: to JSON that a JSON schema accepts; --logit-bias:\n"
                     "                               added to a token's logit (-inf: never); -r / --reverse-prompt: the\n"
                     "                               reply ends once its text holds TEXT"},
    {"eval", cmd_eval, "eval -m FILE --tokens 1,2,3 --logits-out FILE.f32 [--backend B] [--head f16|q8]\n"
                       "                               float32 logits, one row of n_vocab per token (no BOS added)"},
    {"perplexity", cmd_perplexity, "perplexity -m FILE -f TEXT [-c N_CTX] [--chunks N] [--backend B] [-t THREADS]\n"
                                   "                               perplexity of a text, as llama.cpp's llama-perplexity counts it"},
};

static int is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* bitnet help: every command; bitnet help CMD (or bitnet CMD -h): that one */
static int cmd_help(int argc, char **argv) {
    size_t i;
    for (i = 0; argc > 1 && i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return printf("usage: bitnet %s\n", commands[i].usage), 0;
    if (argc > 1) return fprintf(stderr, "bitnet help: unknown command '%s'\n", argv[1]), 2;
    printf("usage: bitnet <command> [options]   (bitnet <command> -h: one command's options)\n");
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) printf("  %s\n", commands[i].usage);
    return 0;
}

int main(int argc, char **argv) {
    size_t i;
    if (argc < 2) return cmd_help(1, argv), 2;
    if (is_help(argv[1])) return cmd_help(1, argv);
    if (strcmp(argv[1], "--version") == 0) return cmd_version(1, argv);
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) /* -h only right after the command: "-p --help" is a prompt */
            return argc > 2 && is_help(argv[2]) ? cmd_help(2, argv) : commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "bitnet: unknown command '%s' (try: bitnet help)\n", argv[1]);
    return 2;
}
