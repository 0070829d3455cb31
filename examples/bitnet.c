/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*cmd_fn)(int argc, char **argv);
typedef struct { const char *name; cmd_fn fn; const char *usage; } command;

static int cmd_help(int argc, char **argv);

static int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("bitnet %s (cpu path %s)\n", BITNET_VERSION_STRING, bitnet_isa_name(bitnet_cpu_isa()));
    return 0;
}

/* >>cli-commands: one function per subcommand, listed in the table below. */

/* ---- run and eval: shared option parsing ------------------------------------------------------- */
typedef struct model_opts {
    const char *path; bitnet_backend backend; int threads, no_mmap, head_f16, n_ctx;
} model_opts;

/* Consumes a model option at argv[*i]; 1 when it was one, -1 on a bad value, 0 when not. */
static int model_opt(model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--no-mmap") == 0) return o->no_mmap = 1, 1;
    if (strcmp(a, "-m") && strcmp(a, "--backend") && strcmp(a, "-t") && strcmp(a, "--threads") && strcmp(a, "--head") &&
        strcmp(a, "-c") && strcmp(a, "--ctx"))
        return 0;
    if (!v) return fprintf(stderr, "bitnet: %s needs a value\n", a), -1;
    ++*i;
    if (strcmp(a, "-m") == 0) o->path = v;
    else if (strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) o->threads = atoi(v);
    else if (strcmp(a, "-c") == 0 || strcmp(a, "--ctx") == 0) o->n_ctx = atoi(v);
    else if (strcmp(a, "--head") == 0) {
        if (strcmp(v, "f16") && strcmp(v, "q8")) return fprintf(stderr, "bitnet: --head is f16 or q8\n"), -1;
        o->head_f16 = strcmp(v, "f16") == 0;
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
    if (isatty(fileno(stderr))) d.progress = progress_bar;
    if ((r = bitnet_model_load(&d, m)) != BITNET_OK) return r;
    bitnet_model_get_info(*m, &info);
    fprintf(stderr, "bitnet %s: %s, %d layers, dim %d, vocab %d; backend %s (%s); %d threads\n", cmd, info.arch,
            (int)info.n_layers, (int)info.dim, (int)info.n_vocab, info.backend == BITNET_BACKEND_CUDA ? "cuda" : "cpu",
            info.backend_reason, bitnet_num_threads());
    return BITNET_OK;
}

static int print_piece(int32_t token, const char *piece, size_t len, void *user) {
    (void)user;
    if (piece) fwrite(piece, 1, len, stdout);
    else printf("[%d]", (int)token);
    fflush(stdout);
    return 0;
}

static int cmd_run(int argc, char **argv) {
    model_opts mo;
    const char *prompt = NULL;
    int i, chat = 0;
    bitnet_generate_params gp;
    bitnet_generate_stats st;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_result r;
    const bitnet_tokenizer *tk;
    int32_t *ids = NULL;
    size_t n = 0;
    char *text = NULL;
    memset(&mo, 0, sizeof mo);
    memset(&gp, 0, sizeof gp);
    gp.max_tokens = 128;
    gp.sampler.temperature = 0.8f, gp.sampler.top_k = 40, gp.sampler.top_p = 0.95f, gp.sampler.min_p = 0.05f;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k = model_opt(&mo, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (strcmp(a, "--chat") == 0) { chat = 1; continue; }
        if (!v) return fprintf(stderr, "bitnet run: unknown option or missing value: %s\n", a), 2;
        i++;
        if (strcmp(a, "-p") == 0) prompt = v;
        else if (strcmp(a, "-n") == 0) gp.max_tokens = atoi(v);
        else if (strcmp(a, "--seed") == 0) gp.sampler.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--temp") == 0) gp.sampler.temperature = (float)atof(v);
        else if (strcmp(a, "--top-k") == 0) gp.sampler.top_k = atoi(v);
        else if (strcmp(a, "--top-p") == 0) gp.sampler.top_p = (float)atof(v);
        else if (strcmp(a, "--min-p") == 0) gp.sampler.min_p = (float)atof(v);
        else if (strcmp(a, "--repeat-penalty") == 0) gp.sampler.repeat_penalty = (float)atof(v);
        else return fprintf(stderr, "bitnet run: unknown option %s\n", a), 2;
    }
    if (!mo.path || !prompt) return fprintf(stderr, "usage: bitnet run -m FILE -p TEXT [options] (see bitnet help)\n"), 2;
    if ((r = open_model("run", &mo, &m)) != BITNET_OK) return fail("run", r);
    tk = bitnet_model_tokenizer(m);
    if (!tk) {
        bitnet_model_free(m);
        return fprintf(stderr, "bitnet run: %s has no tokenizer\n", mo.path), 1;
    }
    /* the 2B-4T chat format: <|begin_of_text|>User: TEXT<|eot_id|>Assistant: */
    text = (char *)malloc(strlen(prompt) + 64);
    if (chat) sprintf(text, "<|begin_of_text|>User: %s<|eot_id|>Assistant: ", prompt);
    else strcpy(text, prompt);
    r = bitnet_tokenize(tk, text, strlen(text), !chat, chat, NULL, 0, &n);
    if (r == BITNET_ERR_BAD_SIZE || r == BITNET_OK) {
        ids = (int32_t *)malloc((n ? n : 1) * sizeof *ids);
        r = bitnet_tokenize(tk, text, strlen(text), !chat, chat, ids, n, &n);
    }
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = mo.n_ctx;
    if (r == BITNET_OK) r = bitnet_session_create(m, &sd, &s);
    gp.on_token = print_piece;
    if (r == BITNET_OK) r = bitnet_generate(s, ids, n, &gp, NULL, 0, &st);
    printf("\n");
    if (r == BITNET_OK)
        fprintf(stderr, "bitnet run: prompt %zu tokens, %.2f tokens/s; generation %zu tokens, %.2f tokens/s\n", st.n_prompt,
                st.prompt_seconds > 0 ? (double)st.n_prompt / st.prompt_seconds : 0.0, st.n_generated,
                st.gen_seconds > 0 ? (double)st.n_generated / st.gen_seconds : 0.0);
    free(text);
    free(ids);
    bitnet_session_free(s);
    bitnet_model_free(m);
    return r == BITNET_OK ? 0 : fail("run", r);
}

static int cmd_eval(int argc, char **argv) {
    model_opts mo;
    const char *list = NULL, *out_path = NULL, *p;
    int i;
    size_t n = 0, cap = 0;
    int32_t *ids = NULL;
    float *logits = NULL;
    bitnet_model *m = NULL;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet_model_info info;
    bitnet_result r;
    FILE *f;
    memset(&mo, 0, sizeof mo);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int k = model_opt(&mo, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (!v) return fprintf(stderr, "bitnet eval: unknown option or missing value: %s\n", a), 2;
        i++;
        if (strcmp(a, "--tokens") == 0) list = v;
        else if (strcmp(a, "--logits-out") == 0) out_path = v;
        else return fprintf(stderr, "bitnet eval: unknown option %s\n", a), 2;
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

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"devices", cmd_devices, "devices [--json]             GPU backends and every CUDA device"},
    {"kernels", cmd_kernels, "kernels [--arch sm_XX] [--json] [--cache]  compile every built-in CUDA module (no GPU needed)"},
    {"help", cmd_help, "help                         this list"},
    {"run", cmd_run, "run -m FILE -p TEXT [-n N] [--backend auto|cpu|cuda] [--seed S] [--temp T] [--top-k K] [--top-p P]\n"
                     "      [--min-p P] [--repeat-penalty R] [--chat] [-t THREADS] [-c N_CTX] [--head f16|q8] [--no-mmap]\n"
                     "                               generate text, streamed to stdout; speeds on stderr"},
    {"eval", cmd_eval, "eval -m FILE --tokens 1,2,3 --logits-out FILE.f32 [--backend B] [--head f16|q8]\n"
                       "                               float32 logits, one row of n_vocab per token (no BOS added)"},
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
