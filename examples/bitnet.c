/* bitnet: the command-line program. `bitnet help` lists the subcommands. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <errno.h>

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

static const command commands[] = {
    {"version", cmd_version, "version                      print the version"},
    {"verify-receipt", cmd_verify_receipt, "verify-receipt FILE [--require-gpu-kernels] [--min-tps X] [--max-p95-ms Y] [--max-wall-ms Z]"},
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
