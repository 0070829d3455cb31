/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>
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

static int cmd_bench(int argc, char **argv) {
    bench_opts o;
    bitnet_receipt *rec[2] = {NULL, NULL};
    int32_t *tokens[2] = {NULL, NULL};
    const char *names[2] = {"cuda", "cpu"};
    size_t n_tokens, b;
    int i, rc = 0, gpu_missing = 0, several;
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
        o.params.requested = md.backend;
        o.params.tokens_out = tokens[b];
        o.params.tokens_cap = n_tokens;
        o.params.progress = isatty(2) ? bench_progress : NULL;
        o.params.progress_user = (void *)names[b];
        r = bitnet_bench(m, &o.params, rec[b]);
        bitnet_model_free(m);
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
            printf("      %s, %s x%d threads; kernels:", r->cpu_model, r->isa, (int)r->threads);
            for (k = 0; k < r->n_kernels; k++) printf(" %s x%llu", r->kernels[k].name, (unsigned long long)r->kernels[k].launches);
            printf("\n");
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
                              "wall_ms,peak_host_rss_bytes,peak_device_bytes,threads,isa,model_sha256,git_commit\n");
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
                fprintf(csv, "%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,%.4f,%.3f,%llu,%llu,%d,%s,%s,%s\n", rec[b]->backend,
                        (int)x->prompt_tokens, (int)x->gen_tokens, (int)x->runs, x->prompt_tps, x->gen_tps, x->gen_tps_min,
                        x->gen_tps_max, x->ttft_ms, x->p50_ms, x->p95_ms, x->p99_ms, x->wall_ms,
                        (unsigned long long)rec[b]->peak_host_rss_bytes, (unsigned long long)rec[b]->peak_device_bytes,
                        (int)rec[b]->threads, rec[b]->isa, rec[b]->model_sha256, rec[b]->git_commit);
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
    {"bench", cmd_bench, "bench -m FILE [--backend cpu|cuda|all] [--prompt-tokens 64,512] [--gen-tokens 128] [--runs 5]\n"
                         "      [--warmup 1] [--json FILE] [--csv FILE] [--receipt FILE] [--check-determinism] [--require-gpu]\n"
                         "                               measure speed; a receipt records what ran"},
    {"verify-receipt", cmd_verify_receipt, "verify-receipt FILE [--require-gpu-kernels] [--min-tps X] [--max-p95-ms Y] [--max-wall-ms Z]\n"
                                           "                               check a receipt: exit 0 ok, 1 a gate failed, 2 invalid"},
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
