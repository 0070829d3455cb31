/* Where a model's load goes (GPU machine: tools/gpu_load.sh; BENCHMARKS.md has the numbers).
     bench_load MODEL.gguf [cpu|cuda] [RUNS (3)]
   Each run: bitnet_model_load with a progress callback that stamps the time at each stage's end
   (0.02: the file and its checks; 0.1: the tensors; 0.4: the ternary matrices checked (and, on the
   CPU, copied to large pages); the head quantized at 1.0 on the CPU, at 0.6 on cuda, where 0.65
   marks the kernels loaded, 0.95 the layers uploaded, 0.96 the embedding's pinned memory allocated
   and 1.0 the end (its copy)), then bitnet_session_create, then one token evaluated. Wall times in ms. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double t0, marks[4096];
static float fracs[4096];
static int n_marks;

static void stamp(float f, void *user) {
    (void)user;
    if (n_marks < 4096) fracs[n_marks] = f, marks[n_marks++] = bitnet__now() - t0;
    else marks[4095] = bitnet__now() - t0, fracs[4095] = f; /* (the last stamp kept) */
}

int main(int argc, char **argv) {
    bitnet_model_desc d;
    static const float ends[8] = {0.02f, 0.1f, 0.4f, 0.6f, 0.65f, 0.95f, 0.96f, 1.0f};
    int runs = argc > 3 ? atoi(argv[3]) : 3, r, i, k;
    if (argc < 2) return fprintf(stderr, "usage: bench_load MODEL.gguf [cpu|cuda] [RUNS]\n"), 2;
    for (r = 0; r < runs; r++) {
        bitnet_model *m = NULL;
        bitnet_session *s = NULL;
        double t_load, t_sess, t_tok;
        int32_t tok = 1;
        memset(&d, 0, sizeof d);
        d.path = argv[1];
        d.backend = argc > 2 && strcmp(argv[2], "cuda") == 0 ? BITNET_BACKEND_CUDA : BITNET_BACKEND_CPU;
        d.progress = stamp;
        n_marks = 0;
        t0 = bitnet__now();
        if (bitnet_model_load(&d, &m) != BITNET_OK) return fprintf(stderr, "load: %s\n", bitnet_last_error()), 1;
        t_load = bitnet__now() - t0;
        if (bitnet_session_create(m, NULL, &s) != BITNET_OK) return fprintf(stderr, "session: %s\n", bitnet_last_error()), 1;
        t_sess = bitnet__now() - t0;
        if (bitnet_session_eval(s, &tok, 1, NULL, 0) != BITNET_OK) return fprintf(stderr, "eval: %s\n", bitnet_last_error()), 1;
        t_tok = bitnet__now() - t0;
        printf("%s run %d: load %.0f ms (stage ends:", argv[2] ? argv[2] : "cpu", r, t_load * 1e3);
        for (k = 0, i = 0; k < 8; k++) { /* the first stamp at or past each stage's fraction */
            while (i < n_marks && fracs[i] < ends[k] - 1e-4f) i++;
            if (i < n_marks) printf(" %.2f@%.0f", (double)ends[k], marks[i] * 1e3);
        }
        if (n_marks) printf(" last@%.0f", marks[n_marks - 1] * 1e3);
        printf("), session %.0f ms, first token %.0f ms\n", (t_sess - t_load) * 1e3, (t_tok - t_sess) * 1e3);
        bitnet_session_free(s);
        bitnet_model_free(m);
    }
    return 0;
}
