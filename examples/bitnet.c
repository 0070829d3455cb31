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
#ifdef BITNET__GGUF_MAGIC /* the GGUF reader is merged */
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
    {"tokenize", cmd_tokenize, "tokenize -m FILE -p TEXT     print token ids (--tiktoken FILE, --hex-lines FILE, --no-bos, --no-special)"},
    {"devices", cmd_devices, "devices [--json]             GPU backends and every CUDA device"},
    {"kernels", cmd_kernels, "kernels [--arch sm_XX] [--json] [--cache]  compile every built-in CUDA module (no GPU needed)"},
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
