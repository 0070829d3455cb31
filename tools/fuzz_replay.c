/* Runs a libFuzzer harness over files without libFuzzer: each FILE, or each file of each DIR, once
   through LLVMFuzzerTestOneInput, in name order. For the GPU machine, where the harness runs under
   compute-sanitizer instead of the fuzzer's sanitizers, e.g.
     cc -O1 -g -o build/fuzz_replay_model tools/fuzz_replay.c tests/fuzz_model.c build/impl.o -lm -ldl -lpthread
     BITNET_FUZZ_BACKEND=cuda compute-sanitizer build/fuzz_replay_model CORPUS_DIR
   Prints one line a file (its size, the time it took, the library's last error: where it stopped),
   then how many ran. */
#define _POSIX_C_SOURCE 200809L
#include "../bitnet.h"
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long n;
    struct timespec t0, t1;
    if (!f) return fprintf(stderr, "fuzz_replay: cannot open %s\n", path), 1;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) return fclose(f), 1;
    buf = (uint8_t *)malloc(n ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) return free(buf), fclose(f), 1;
    fclose(f);
    bitnet_clear_error();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %ld bytes, %.1f ms, last error: %.100s\n", path, n,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, *bitnet_last_error() ? bitnet_last_error() : "none");
    fflush(stdout);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int i, runs = 0, bad = 0;
    if (argc < 2) return fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]), 2;
    LLVMFuzzerInitialize(&argc, &argv);
    for (i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            char **names = NULL;
            size_t n = 0, cap = 0, j;
            while (d && (e = readdir(d))) {
                char *p;
                if (e->d_name[0] == '.') continue;
                if (n == cap && !(names = (char **)realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names))) return 1;
                p = (char *)malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
                if (!p) return 1;
                sprintf(p, "%s/%s", argv[i], e->d_name);
                names[n++] = p;
            }
            if (d) closedir(d);
            qsort(names, n, sizeof *names, by_name);
            for (j = 0; j < n; j++) bad += run_file(names[j]), runs++, free(names[j]);
            free(names);
        } else {
            bad += run_file(argv[i]), runs++;
        }
    }
    printf("fuzz_replay: %d inputs, %d unreadable\n", runs, bad);
    return bad != 0;
}
