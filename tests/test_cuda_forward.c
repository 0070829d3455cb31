/* The GPU forward pass (>>cuda-forward) against the CPU one on the same weights: the committed
   tiny GGUF and random models built in memory (head_dim 128 with 4 query heads per kv head as in
   2B-4T, head_dim 64). Logits of every position agree within 1e-5 relative L2 through both GPU
   paths, the batched prefill (GEMM) and the decode graph (its attention over warps in one range a
   head or several, and the long form in many ranges: combined, and in tiles), and greedy
   generations agree token for token for 64 tokens: quantized activations, integer dot products,
   RoPE and the fp16 cache match the CPU bit for bit, attention is computed in double on both and
   rounded to float once (so both give the same floats), and only the fp16 head's float sums differ
   in order (about 1e-7). Sampled generation on the GPU, top-k from the device's k best, draws the
   tokens the host sampler draws from the whole row. Host buffers are poisoned with NaN before each
   call. Skipped without a GPU; a failure under BITNET_REQUIRE_GPU=1. */
#define _GNU_SOURCE /* setenv */
#include "../bitnet.h"
#include "harness.h"
#include <math.h>

#define NEED_GPU() TEST_NEED_GPU(test_gpu_usable(), test__gpu_reason)

#define TOL 1e-5
static double worst_rel; /* the largest relative L2 distance seen, for the log */

/* Every row within TOL. */
static void check_rows(const double *e, int n, const char *what) {
    int i, over = 0;
    for (i = 0; i < n; i++) {
        worst_rel = e[i] > worst_rel ? e[i] : worst_rel;
        if (!(e[i] <= TOL) && over++ < 5) TEST_CHECKF(0, "%s row %d of %d: relative L2 %g", what, i, n, e[i]);
    }
    TEST_CHECKF(over == 0, "%s: %d rows of %d above %g", what, over, n, TOL);
}

static double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        if (!(a[i] == a[i]) || !(ref[i] == ref[i])) return INFINITY; /* NaN: an unwritten output */
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void poison(float *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) p[i] = NAN;
}

/* ---- a random model in memory -------------------------------------------------------------------- */
#include "rmodel.h"

/* ---- the comparison -------------------------------------------------------------------------------- */

/* n_pre tokens in one call with every row's logits (GPU: the GEMM prefill), then n_dec tokens one
   call each (GPU: the decode graph); every row compared with the CPU's. */
static void compare(bitnet_model *cpu, bitnet_model *gpu, int n_pre, int n_dec) {
    bitnet_model_info info;
    bitnet_session *sc = NULL, *sg = NULL;
    bitnet_session_desc sd;
    int32_t *tok;
    float *lc, *lg;
    size_t nv;
    int i, n = n_pre + n_dec;
    double *err = (double *)malloc((size_t)n * sizeof(double));
    bitnet_model_get_info(cpu, &info);
    nv = (size_t)info.n_vocab;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = n + 8;
    TEST_CHECK(bitnet_session_create(cpu, &sd, &sc) == BITNET_OK);
    TEST_CHECKF(bitnet_session_create(gpu, &sd, &sg) == BITNET_OK, "%s", bitnet_last_error());
    tok = (int32_t *)malloc((size_t)n * sizeof *tok);
    lc = (float *)malloc((size_t)n_pre * nv * sizeof(float));
    lg = (float *)malloc((size_t)n_pre * nv * sizeof(float));
    if (!sc || !sg || !tok || !lc || !lg || !err) goto done;
    for (i = 0; i < n; i++) tok[i] = (int32_t)((7 + 131 * (size_t)i * i) % nv);
    poison(lc, (size_t)n_pre * nv);
    poison(lg, (size_t)n_pre * nv);
    TEST_CHECK(bitnet_session_eval(sc, tok, (size_t)n_pre, lc, 1) == BITNET_OK);
    TEST_CHECKF(bitnet_session_eval(sg, tok, (size_t)n_pre, lg, 1) == BITNET_OK, "%s", bitnet_last_error());
    for (i = 0; i < n_pre; i++) err[i] = rel_l2(lg + (size_t)i * nv, lc + (size_t)i * nv, nv);
    check_rows(err, n_pre, "prefill");
    for (i = n_pre; i < n; i++) {
        poison(lc, nv);
        poison(lg, nv);
        TEST_CHECK(bitnet_session_eval(sc, tok + i, 1, lc, 0) == BITNET_OK);
        TEST_CHECKF(bitnet_session_eval(sg, tok + i, 1, lg, 0) == BITNET_OK, "%s", bitnet_last_error());
        err[i - n_pre] = rel_l2(lg, lc, nv);
    }
    if (n_dec) check_rows(err, n_dec, "decode");
done:
    free(err);
    free(tok);
    free(lc);
    free(lg);
    bitnet_session_free(sc);
    bitnet_session_free(sg);
}

/* Greedy: the same 64 tokens from both. */
static void greedy(bitnet_model *cpu, bitnet_model *gpu) {
    const int N = 64;
    int32_t prompt[5] = {1, 17, 42, 5, 99}, oc[64], og[64], never = -1;
    bitnet_session *sc = NULL, *sg = NULL;
    bitnet_session_desc sd;
    bitnet_generate_params p;
    bitnet_generate_stats stc, stg;
    bitnet_model_info info;
    int i, same = 1;
    bitnet_model_get_info(cpu, &info);
    for (i = 0; i < 5; i++) prompt[i] %= info.n_vocab;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 128;
    memset(&p, 0, sizeof p);
    p.max_tokens = N;
    p.stop_tokens = &never; /* no stop: always 64 tokens */
    p.n_stop = 1;
    memset(&stc, 0, sizeof stc);
    memset(&stg, 0, sizeof stg);
    TEST_CHECK(bitnet_session_create(cpu, &sd, &sc) == BITNET_OK);
    TEST_CHECK(bitnet_session_create(gpu, &sd, &sg) == BITNET_OK);
    if (!sc || !sg) goto done;
    TEST_CHECK(bitnet_generate(sc, prompt, 5, &p, oc, (size_t)N, &stc) == BITNET_OK);
    TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, og, (size_t)N, &stg) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECK(stc.n_generated == (size_t)N && stg.n_generated == (size_t)N);
    for (i = 0; i < N && i < (int)stc.n_generated && i < (int)stg.n_generated; i++)
        if (oc[i] != og[i]) {
            TEST_CHECKF(0, "greedy token %d: CPU %d, GPU %d", i, (int)oc[i], (int)og[i]);
            same = 0;
            break;
        }
    if (same) printf("  greedy: %d identical tokens\n", N);
    if (same) { /* a stop token: the GPU's step ahead for it is thrown away, and both sessions go on alike */
        int32_t stop = oc[10], more[3] = {3, 1, 4};
        size_t nv = (size_t)info.n_vocab, first = 0;
        float *lc = (float *)malloc(nv * sizeof(float)), *lg = (float *)malloc(nv * sizeof(float));
        while (oc[first] != stop) first++;
        p.stop_tokens = &stop;
        bitnet_session_reset(sc);
        bitnet_session_reset(sg);
        TEST_CHECK(bitnet_generate(sc, prompt, 5, &p, oc, (size_t)N, &stc) == BITNET_OK);
        TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, og, (size_t)N, &stg) == BITNET_OK, "%s", bitnet_last_error());
        TEST_CHECKF(stc.n_generated == first && stg.n_generated == first, "stop at %zu: CPU %zu, GPU %zu tokens", first,
                    stc.n_generated, stg.n_generated);
        TEST_CHECK(bitnet_session_pos(sc) == bitnet_session_pos(sg));
        for (i = 0; i < 3; i++) more[i] %= info.n_vocab;
        if (lc && lg) {
            poison(lc, nv);
            poison(lg, nv);
            TEST_CHECK(bitnet_session_eval(sc, more, 3, lc, 0) == BITNET_OK);
            TEST_CHECK(bitnet_session_eval(sg, more, 3, lg, 0) == BITNET_OK);
            TEST_CHECKF(rel_l2(lg, lc, nv) <= TOL, "after the stop: relative L2 %g", rel_l2(lg, lc, nv));
            poison(lc, nv);
            poison(lg, nv);
            TEST_CHECK(bitnet_session_eval(sc, more, 1, lc, 0) == BITNET_OK); /* a decode step: io put again */
            TEST_CHECK(bitnet_session_eval(sg, more, 1, lg, 0) == BITNET_OK);
            TEST_CHECKF(rel_l2(lg, lc, nv) <= TOL, "after the stop, one token: relative L2 %g", rel_l2(lg, lc, nv));
        }
        free(lc);
        free(lg);
    }
done:
    bitnet_session_free(sc);
    bitnet_session_free(sg);
}

/* Sampled generation on the GPU: drawn on the device (bf_draw: top-k up to 128, greedy with the penalty)
   or on the host from the device's k best (bitnet__gpu_sample: min-p without such a top-k;
   BITNET_GPU_TOPK=1 forces it) against the whole logits row downloaded and sampled on the host
   (BITNET_GPU_TOPK=0): the same seed gives the same tokens, with top-k at 2, 40, 64 and 128 (the most), with and without top-p, min-p and the
   repetition penalty (above and below 1; windows of 16 and the default 64), greedy with the
   penalty (temperature 0, and top-k 1), which takes the device's one best, and min-p with no top-k
   or one above 128 (the device's 128 best, or the whole row where min-p passes all of them). */
static uint64_t topk_launches(void) { /* the topk kernel's launches in this process */
    static bitnet_gpu_stats st; /* (large) */
    uint64_t n = 0;
    int i;
    if (bitnet_gpu_stats_get(NULL, &st) != BITNET_OK) return 0;
    for (i = 0; i < st.n_kernels; i++)
        if (strstr(st.kernels[i].name, "fwd_topk")) n += st.kernels[i].launches;
    return n;
}

/* A sampled token's step starts before on_token sees the token; when on_token stops, that step is
   thrown away: the session stays at the last kept token, and what it evaluates next gives the logits
   of a session that never ran the step (here: another token at that position). */
static int stop_at_7(int32_t token, const char *piece, size_t len, void *user) {
    (void)token, (void)piece, (void)len;
    return ++*(int *)user == 7;
}
static void stop_after_7(bitnet_model *gpu, bitnet_session *sg) {
    int32_t prompt[5] = {1, 17, 42, 5, 99}, toks[16], never = -1, other = 3;
    bitnet_session *sr = NULL;
    bitnet_session_desc sd;
    bitnet_generate_params p;
    bitnet_generate_stats st;
    bitnet_model_info info;
    float *lg, *lr;
    int i, seen = 0;
    size_t nv;
    bitnet_model_get_info(gpu, &info);
    nv = (size_t)info.n_vocab;
    for (i = 0; i < 5; i++) prompt[i] %= info.n_vocab;
    other %= info.n_vocab;
    memset(&p, 0, sizeof p);
    p.max_tokens = 16, p.stop_tokens = &never, p.n_stop = 1, p.on_token = stop_at_7, p.user = &seen;
    p.sampler.temperature = 0.8f, p.sampler.top_k = 40, p.sampler.top_p = 0.95f, p.sampler.min_p = 0.05f, p.sampler.seed = 11;
    bitnet_session_reset(sg);
    TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, toks, 16, &st) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECKF(st.n_generated == 7 && bitnet_session_pos(sg) == 11, "on_token stop: %zu tokens, position %d", st.n_generated,
                (int)bitnet_session_pos(sg));
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 128;
    lg = (float *)malloc(nv * sizeof(float)), lr = (float *)malloc(nv * sizeof(float));
    TEST_CHECK(bitnet_session_create(gpu, &sd, &sr) == BITNET_OK);
    if (sr && lg && lr && st.n_generated == 7) {
        int32_t seq[12];
        memcpy(seq, prompt, sizeof prompt), memcpy(seq + 5, toks, 6 * sizeof *toks);
        poison(lg, nv), poison(lr, nv);
        TEST_CHECK(bitnet_session_eval(sg, &other, 1, lg, 0) == BITNET_OK);
        TEST_CHECK(bitnet_session_eval(sr, seq, 5, NULL, 0) == BITNET_OK); /* as generate ran them */
        for (i = 5; i < 11; i++) TEST_CHECK(bitnet_session_eval(sr, seq + i, 1, NULL, 0) == BITNET_OK);
        TEST_CHECK(bitnet_session_eval(sr, &other, 1, lr, 0) == BITNET_OK);
        TEST_CHECKF(rel_l2(lg, lr, nv) <= TOL, "after on_token stopped: relative L2 %g", rel_l2(lg, lr, nv));
    }
    free(lg), free(lr);
    bitnet_session_free(sr);
}

static void sampled(bitnet_model *gpu) {
    /* temperature, top-k, top-p, min-p, repetition penalty and window, presence and frequency penalties, the logit bias */
    static const float cfg[][9] = {{0.8f, 40, 0.95f, 0.05f, 0, 0}, {1.5f, 128, 1.0f, 0.0f, 0, 0}, {0.3f, 2, 0.0f, 0.2f, 0, 0},
                                   {1.0f, 40, 0.9f, 0.0f, 1.3f, 16}, {0.9f, 64, 0.0f, 0.02f, 0.8f, 0},
                                   {0.0f, 40, 0.95f, 0.05f, 1.3f, 0}, {0.7f, 1, 0.0f, 0.0f, 0.8f, 8},
                                   {0.8f, 0, 0.95f, 0.05f, 1.2f, 0}, {1.0f, 200, 0.0f, 0.01f, 0, 0}, {1.0f, 0, 0.0f, 0.01f, 0, 0},
                                   {0.8f, 40, 0.95f, 0.05f, 0, 0, 0.6f, 0.4f, 1}, {0.0f, 0, 0, 0, 0, 0, 0, 0, 1},
                                   {0.0f, 0, 0, 0, 1.1f, 16, 0.3f, 0.9f, 0}, {1.0f, 0, 0.0f, 0.02f, 0, 0, 0.5f, 0.2f, 1},
                                   {0.9f, 64, 0.0f, 0.0f, 0, 0, -0.4f, 0.0f, 0}};
    const int NC = (int)(sizeof cfg / sizeof cfg[0]);
    const int N = 24; /* (24 each: compute-sanitizer's racecheck runs this binary within its time limit) */
    int32_t prompt[5] = {1, 17, 42, 5, 99}, a[24], b[24], h[24], never = -1;
    bitnet_logit_bias bias[4] = {{0, 2.5f}, {0, -INFINITY}, {0, 1.25f}, {0, 0.5f}}; /* ids set below; the first repeats */
    bitnet_session *sg = NULL;
    bitnet_session_desc sd;
    bitnet_generate_params p;
    bitnet_generate_stats sa, sb;
    bitnet_model_info info;
    int c, i, agree = 0;
    uint64_t n0, n1, extra;
    bitnet_model_get_info(gpu, &info);
    for (i = 0; i < 5; i++) prompt[i] %= info.n_vocab;
    bias[0].token = bias[3].token = 17 % info.n_vocab, bias[1].token = 42 % info.n_vocab, bias[2].token = 7 % info.n_vocab;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 128;
    TEST_CHECK(bitnet_session_create(gpu, &sd, &sg) == BITNET_OK);
    if (!sg) return;
    for (c = 0; c < NC; c++) {
        memset(&p, 0, sizeof p);
        p.max_tokens = N;
        p.stop_tokens = &never;
        p.n_stop = 1;
        p.sampler.temperature = cfg[c][0], p.sampler.top_k = (int32_t)cfg[c][1], p.sampler.top_p = cfg[c][2];
        p.sampler.min_p = cfg[c][3], p.sampler.seed = 7 + (uint64_t)c;
        p.sampler.repeat_penalty = cfg[c][4], p.sampler.repeat_last_n = (int32_t)cfg[c][5];
        p.sampler.presence_penalty = cfg[c][6], p.sampler.frequency_penalty = cfg[c][7];
        if (cfg[c][8] != 0) p.sampler.logit_bias = bias, p.sampler.n_logit_bias = 4;
        memset(a, 0xff, sizeof a), memset(b, 0xff, sizeof b);
        bitnet_session_reset(sg);
        n0 = topk_launches();
        TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, a, (size_t)N, &sa) == BITNET_OK, "%s", bitnet_last_error());
        n1 = topk_launches();
        extra = 0;
        setenv("BITNET_GPU_TOPK", "0", 1);
        bitnet_session_reset(sg);
        TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, b, (size_t)N, &sb) == BITNET_OK, "%s", bitnet_last_error());
        unsetenv("BITNET_GPU_TOPK");
        if (!(cfg[c][0] > 0 && cfg[c][1] != 1 && (cfg[c][1] == 0 || cfg[c][1] > 128))) { /* drawn on the device above */
            setenv("BITNET_GPU_TOPK", "1", 1);
            memset(h, 0xff, sizeof h);
            bitnet_session_reset(sg);
            TEST_CHECKF(bitnet_generate(sg, prompt, 5, &p, h, (size_t)N, &sb) == BITNET_OK, "%s", bitnet_last_error());
            unsetenv("BITNET_GPU_TOPK");
            for (i = 0; i < N && h[i] == b[i]; i++) {}
            TEST_CHECKF(i == N, "sampler %d drawn on the host: token %d differs from the whole row's", c, i);
            extra = (uint64_t)N; /* (its topk launches) */
        }
        /* the device's path ran once a token, the whole row's never */
        TEST_CHECKF(n1 - n0 == (uint64_t)N && topk_launches() == n1 + extra, "sampler %d: topk launched %d times, then %d",
                    c, (int)(n1 - n0), (int)(topk_launches() - n1 - extra));
        TEST_CHECK(sa.n_generated == (size_t)N && sb.n_generated == (size_t)N);
        for (i = 0; i < N && a[i] == b[i]; i++) {}
        agree += i == N;
        TEST_CHECKF(i == N, "sampler %d (temperature %g, top-k %d): token %d differs: device's k best %d, whole row %d", c,
                    (double)cfg[c][0], (int)cfg[c][1], i, i < N ? (int)a[i] : 0, i < N ? (int)b[i] : 0);
    }
    printf("  sampled: top-k on the device and on the whole row agree for %d tokens with %d of %d samplers\n", N, agree, NC);
    stop_after_7(gpu, sg);
    bitnet_session_free(sg);
}

/* A session's state (>>state) between the backends: a GPU state read back after restoring it into a
   GPU session is the same bytes (a padded head's dims back in the model's places); restored into a
   GPU session it goes on as the session it came from, bit for bit; each backend's state goes on in
   the other backend as the first would (within the tolerance). */
static void states(bitnet_model *cpu, bitnet_model *gpu) {
    bitnet_model_info info;
    bitnet_session *s[5] = {NULL, NULL, NULL, NULL, NULL}; /* cpu, gpu, cpu from gpu, gpu from cpu, gpu from gpu */
    bitnet_session_desc sd;
    int32_t tok[45];
    unsigned char *st[2] = {NULL, NULL}, *back = NULL;
    float *lg[5];
    size_t nv, n = 0;
    double err[2][8];
    int i, j, diff = 0;
    bitnet_model_get_info(cpu, &info);
    nv = (size_t)info.n_vocab;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 64;
    for (i = 0; i < 5; i++) {
        TEST_CHECKF(bitnet_session_create(i == 0 || i == 2 ? cpu : gpu, &sd, &s[i]) == BITNET_OK, "%s", bitnet_last_error());
        lg[i] = (float *)malloc(nv * sizeof(float));
    }
    if (!s[0] || !s[1] || !s[2] || !s[3] || !s[4]) goto done;
    for (i = 0; i < 45; i++) tok[i] = (int32_t)((3 + 97 * (size_t)i * i) % nv);
    for (i = 0; i < 2; i++) { /* 37 positions (a partial 16-key tile on the CPU) */
        TEST_CHECKF(bitnet_session_eval(s[i], tok, 37, NULL, 0) == BITNET_OK, "%s", bitnet_last_error());
        n = bitnet_session_state_size(s[i]);
        st[i] = (unsigned char *)malloc(n);
        memset(st[i], 0xA5 + i, n);
        TEST_CHECKF(bitnet_session_state_get(s[i], st[i], n) == BITNET_OK, "%s", bitnet_last_error());
    }
    for (i = 64; i < (int)n; i++) diff += st[0][i] != st[1][i];
    printf("  state of 37 positions: %zu bytes, %d of them differ between the CPU's and the GPU's\n", n, diff);
    TEST_CHECKF(bitnet_session_state_set(s[2], st[1], n) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECKF(bitnet_session_state_set(s[3], st[0], n) == BITNET_OK, "%s", bitnet_last_error());
    TEST_CHECKF(bitnet_session_state_set(s[4], st[1], n) == BITNET_OK, "%s", bitnet_last_error());
    back = (unsigned char *)malloc(n);
    memset(back, 0x5A, n);
    TEST_CHECK(bitnet_session_state_get(s[3], back, n) == BITNET_OK && memcmp(back, st[0], n) == 0);
    for (j = 0; j < 8; j++) {
        for (i = 0; i < 5; i++) {
            poison(lg[i], nv);
            TEST_CHECKF(bitnet_session_eval(s[i], tok + 37 + j, 1, lg[i], 0) == BITNET_OK, "%s", bitnet_last_error());
        }
        TEST_CHECKF(memcmp(lg[4], lg[1], nv * sizeof(float)) == 0, "step %d: a GPU state restored on the GPU", j);
        err[0][j] = rel_l2(lg[2], lg[1], nv); /* the GPU's state on the CPU, against the GPU */
        err[1][j] = rel_l2(lg[3], lg[0], nv); /* the CPU's on the GPU, against the CPU */
    }
    check_rows(err[0], 8, "GPU state on the CPU");
    check_rows(err[1], 8, "CPU state on the GPU");
    { /* reading a state between an eval and a generation that goes on from its logits changes nothing */
        bitnet_generate_params gp;
        int32_t out[2];
        memset(&gp, 0, sizeof gp);
        gp.max_tokens = 2, gp.stop_tokens = tok, gp.n_stop = 0;
        n = bitnet_session_state_size(s[4]);
        free(back), back = (unsigned char *)malloc(n);
        TEST_CHECK(back && bitnet_session_state_get(s[4], back, n) == BITNET_OK);
        TEST_CHECKF(bitnet_generate(s[4], NULL, 0, &gp, out, 2, NULL) == BITNET_OK, "%s", bitnet_last_error());
    }
done:
    for (i = 0; i < 5; i++) bitnet_session_free(s[i]), free(lg[i]);
    free(st[0]), free(st[1]), free(back);
}

static bitnet_result load_pair_weights(const bitnet_model_weights *w, bitnet_model **cpu, bitnet_model **gpu) {
    bitnet_model_desc d;
    bitnet_result r;
    memset(&d, 0, sizeof d);
    d.backend = BITNET_BACKEND_CPU;
    d.head_f16 = 1; /* the exact fp16 head, as the GPU computes it */
    r = bitnet_model_from_weights(w, &d, cpu);
    if (r != BITNET_OK) return r;
    d.backend = BITNET_BACKEND_CUDA;
    return bitnet_model_from_weights(w, &d, gpu);
}

static void random_model(int vocab, int dim, int layers, int heads, int kv, int ffn, float lo, float hi,
                         unsigned long long seed) {
    rmodel r;
    bitnet_model *cpu = NULL, *gpu = NULL;
    bitnet_model_info info;
    w_lo = lo, w_hi = hi;
    rmodel_build(&r, vocab, dim, layers, heads, kv, ffn, seed);
    TEST_CHECKF(load_pair_weights(&r.w, &cpu, &gpu) == BITNET_OK, "%s", bitnet_last_error());
    if (cpu && gpu) {
        TEST_CHECK(bitnet_model_get_info(gpu, &info) == BITNET_OK && info.backend == BITNET_BACKEND_CUDA);
        compare(cpu, gpu, 100, 60); /* decode reaches 160 positions: the attention over warps in two ranges (sm_90: a cluster) */
        compare(cpu, gpu, 1, 3);    /* a single-token first call goes through the decode graph (one range) */
        compare(cpu, gpu, 520, 20); /* over warps in five ranges (where a wave of blocks holds them) */
        setenv("BITNET_GPU_NO_CLUSTER", "1", 1); /* sm_90: the ranges combined by their last block, as on older GPUs */
        compare(cpu, gpu, 100, 60);
        unsetenv("BITNET_GPU_NO_CLUSTER");
        /* sm_90: one pass in ranges up to 256 positions, then ranges of two passes as clusters (the second pass's
           rows from shared memory, this token in either pass): two ranges from 257 positions, three past 512 */
        setenv("BITNET_GPU_ATT_W", "256", 1);
        compare(cpu, gpu, 250, 30);
        compare(cpu, gpu, 520, 20);
        unsetenv("BITNET_GPU_ATT_W");
        /* the long form from 17 positions, in ranges and tiles of 16 (read at session creation): 32
           ranges a head to combine, and past 32 * 16 positions two tiles a range */
        setenv("BITNET_GPU_ATT_T", "16", 1);
        setenv("BITNET_GPU_ATT_W", "16", 1);
        setenv("BITNET_GPU_ATT_R", "16", 1);
        setenv("BITNET_GPU_ATT_TILE", "16", 1);
        compare(cpu, gpu, 520, 20);
        unsetenv("BITNET_GPU_ATT_T");
        unsetenv("BITNET_GPU_ATT_W");
        unsetenv("BITNET_GPU_ATT_R");
        unsetenv("BITNET_GPU_ATT_TILE");
        greedy(cpu, gpu);
        states(cpu, gpu);
        if (heads / kv == 4) sampled(gpu); /* (one random model is enough) */
    }
    bitnet_model_free(gpu);
    bitnet_model_free(cpu);
    rmodel_free(&r);
}

/* ---- tests ---------------------------------------------------------------------------------------- */

/* A conversation (bitnet_chat: a reply cut at max_tokens, whose last token goes into the next message,
   one at the model's stop tokens, one at a chosen stop token) gives the same replies, text length and
   next logits on both backends, and so does the text after bitnet_session_discard. */
static void chat(bitnet_model *cpu, bitnet_model *gpu) {
    static const char *const msgs[4][2] = {{"system", "Be brief."}, {"user", "Hello there"}, {"user", "Again"}, {"user", "Third"}};
    bitnet_session *ss[2] = {NULL, NULL};
    bitnet_session_desc sd;
    bitnet_generate_params p;
    bitnet_generate_stats st;
    bitnet_model_info info;
    int32_t out[2][4][8], stop = -1, never = -1, probe = 7;
    size_t ng[2][4], nv;
    float *lg[2];
    int b, i, k;
    bitnet_model_get_info(cpu, &info);
    nv = (size_t)info.n_vocab;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 128;
    memset(ng, 0, sizeof ng);
    lg[0] = (float *)malloc(nv * sizeof(float)), lg[1] = (float *)malloc(nv * sizeof(float));
    for (b = 0; b < 2; b++) {
        TEST_CHECK(bitnet_session_create(b ? gpu : cpu, &sd, &ss[b]) == BITNET_OK);
        if (!ss[b]) goto done;
        for (i = 0; i < 4; i++) {
            memset(&p, 0, sizeof p);
            p.max_tokens = 6;
            if (i == 1) p.stop_tokens = &never, p.n_stop = 1;     /* cut at max_tokens */
            if (i == 3) p.stop_tokens = &stop, p.n_stop = 1, p.max_tokens = 8;
            TEST_CHECKF(bitnet_chat(ss[b], msgs[i][0], msgs[i][1], &p, out[b][i], 8, &st) == BITNET_OK, "%s", bitnet_last_error());
            ng[b][i] = i ? st.n_generated : 0;
            if (i == 1 && !b) stop = out[0][1][2]; /* (whether it comes again or not, both backends agree) */
        }
    }
    for (i = 1; i < 4; i++) {
        TEST_CHECKF(ng[0][i] == ng[1][i], "message %d: CPU %zu tokens, GPU %zu", i, ng[0][i], ng[1][i]);
        for (k = 0; k < (int)ng[0][i] && k < (int)ng[1][i]; k++)
            TEST_CHECKF(out[0][i][k] == out[1][i][k], "message %d token %d: CPU %d, GPU %d", i, k, (int)out[0][i][k], (int)out[1][i][k]);
    }
    TEST_CHECK(bitnet_session_pos(ss[0]) == bitnet_session_pos(ss[1]));
    if (lg[0] && lg[1]) {
        poison(lg[0], nv), poison(lg[1], nv);
        probe %= info.n_vocab;
        TEST_CHECK(bitnet_session_eval(ss[0], &probe, 1, lg[0], 0) == BITNET_OK && bitnet_session_eval(ss[1], &probe, 1, lg[1], 0) == BITNET_OK);
        TEST_CHECKF(rel_l2(lg[1], lg[0], nv) <= TOL, "after the conversation: relative L2 %g", rel_l2(lg[1], lg[0], nv));
    }
    if (lg[0] && lg[1]) { /* a discard in the middle (the prefill path again), then one token */
        const int32_t first = bitnet_session_pos(ss[0]) / 3, nd = bitnet_session_pos(ss[0]) / 4;
        poison(lg[0], nv), poison(lg[1], nv);
        TEST_CHECK(bitnet_session_discard(ss[0], first, nd) == BITNET_OK && bitnet_session_discard(ss[1], first, nd) == BITNET_OK);
        TEST_CHECK(bitnet_session_eval(ss[0], &probe, 1, lg[0], 0) == BITNET_OK && bitnet_session_eval(ss[1], &probe, 1, lg[1], 0) == BITNET_OK);
        TEST_CHECKF(rel_l2(lg[1], lg[0], nv) <= TOL, "after a discard: relative L2 %g", rel_l2(lg[1], lg[0], nv));
    }
    printf("  chat: 3 replies (%zu, %zu, %zu tokens) the same on both backends\n", ng[0][1], ng[0][2], ng[0][3]);
done:
    bitnet_session_free(ss[0]), bitnet_session_free(ss[1]);
    free(lg[0]), free(lg[1]);
}

/* Generation held to a grammar: the same tokens on the CPU, on the GPU from the device's 128 best
   (the whole row where they run out: top-k 100 on this vocabulary) and on the GPU from the whole row
   (BITNET_GPU_TOPK=0), greedy and sampled; the text in the grammar. */
typedef struct g_text { char s[1024]; size_t n; } g_text;
static int g_collect(int32_t token, const char *piece, size_t len, void *user) {
    g_text *t = (g_text *)user;
    (void)token;
    if (t->n + len < sizeof t->s) memcpy(t->s + t->n, piece, len), t->n += len, t->s[t->n] = 0;
    return 0;
}
static void grammar(bitnet_model *cpu, bitnet_model *gpu) {
    static const char *const gs[] = {"root ::= \"yes\" | \"no\"", "root ::= [0-9]{1,6} (\".\" [0-9]{1,3})?",
                                     "root ::= \"{\\\"a\\\": \\\"\" [^\"\\\\]{0,16} \"\\\"}\""};
    bitnet_session *ss[2] = {NULL, NULL};
    int32_t prompt[3] = {1, 17, 42}, out[3][32];
    size_t ng[3];
    int gi, si, b, k, same = 0, runs = 0;
    for (b = 0; b < 2; b++) TEST_CHECK(bitnet_session_create(b ? gpu : cpu, NULL, &ss[b]) == BITNET_OK);
    for (gi = 0; ss[0] && ss[1] && gi < 3; gi++) {
        bitnet_grammar *g = NULL;
        TEST_CHECKF(bitnet_grammar_parse(gs[gi], strlen(gs[gi]), &g) == BITNET_OK, "%s", bitnet_last_error());
        for (si = 0; g && si < 4; si++) {
            g_text t[3];
            int st = -9, ok = 1;
            for (b = 0; b < 3; b++) { /* CPU, GPU, GPU from the whole row */
                bitnet_session *sb = ss[b ? 1 : 0];
                bitnet_generate_params p;
                bitnet_generate_stats gs_;
                memset(&p, 0, sizeof p), memset(&t[b], 0, sizeof t[b]);
                p.grammar = g, p.max_tokens = 32, p.on_token = g_collect, p.user = &t[b], p.sampler.seed = 5 + (uint64_t)si;
                if (si == 1) p.sampler.temperature = 0.9f, p.sampler.top_k = 40, p.sampler.min_p = 0.05f, p.sampler.repeat_penalty = 1.2f;
                if (si == 2) p.sampler.temperature = 1.3f; /* the whole vocabulary masked */
                if (si == 3) p.sampler.temperature = 1.0f, p.sampler.top_k = 100;
                if (b == 2) setenv("BITNET_GPU_TOPK", "0", 1);
                bitnet_session_reset(sb);
                memset(out[b], 0xff, sizeof out[b]);
                TEST_CHECKF(bitnet_generate(sb, prompt, 3, &p, out[b], 32, &gs_) == BITNET_OK, "%s", bitnet_last_error());
                if (b == 2) unsetenv("BITNET_GPU_TOPK");
                ng[b] = gs_.n_generated;
            }
            TEST_CHECKF(bitnet_grammar_match(g, t[1].s, t[1].n, &st) == BITNET_OK && st >= 0, "grammar %d: GPU's \"%s\"", gi, t[1].s);
            for (b = 1; b < 3; b++) {
                TEST_CHECKF(ng[0] == ng[b], "grammar %d, sampler %d: CPU %zu tokens, GPU (%d) %zu", gi, si, ng[0], b, ng[b]);
                for (k = 0; k < (int)ng[0] && k < (int)ng[b] && out[0][k] == out[b][k]; k++) {}
                TEST_CHECKF(k == (int)ng[0] && k == (int)ng[b], "grammar %d, sampler %d: token %d: CPU %d, GPU (%d) %d", gi, si, k,
                            (int)out[0][k], b, (int)out[b][k]);
                ok &= k == (int)ng[0] && k == (int)ng[b];
            }
            same += ok, runs++;
        }
        bitnet_grammar_free(g);
    }
    printf("  grammar: %d of %d generations the same tokens on the CPU and both GPU paths\n", same, runs);
    bitnet_session_free(ss[0]), bitnet_session_free(ss[1]);
}

static void tiny_gguf(int head_f16) {
    const char *path = "tests/data/tiny.gguf";
    bitnet_model_desc d;
    bitnet_model *cpu = NULL, *gpu = NULL;
    bitnet_model_info info;
    FILE *f;
    NEED_GPU();
    if (!(f = fopen(path, "rb"))) TEST_SKIP("%s is not in this checkout", path);
    fclose(f);
    memset(&d, 0, sizeof d);
    d.path = path;
    d.backend = BITNET_BACKEND_CPU;
    d.head_f16 = head_f16;
    TEST_CHECKF(bitnet_model_load(&d, &cpu) == BITNET_OK, "%s", bitnet_last_error());
    d.backend = BITNET_BACKEND_CUDA;
    TEST_CHECKF(bitnet_model_load(&d, &gpu) == BITNET_OK, "%s", bitnet_last_error());
    if (cpu && gpu) {
        TEST_CHECK(bitnet_model_get_info(gpu, &info) == BITNET_OK && info.head_bits == (head_f16 ? 16 : 8));
        compare(cpu, gpu, 70, 30);
        greedy(cpu, gpu);
        chat(cpu, gpu);
        if (head_f16) grammar(cpu, gpu);
        if (head_f16 && !getenv("BITNET_GPU_HOST_EMB")) sampled(gpu); /* (the other forms decode the same way) */
    }
    bitnet_model_free(gpu);
    bitnet_model_free(cpu);
}
static void test_tiny_gguf(void) { tiny_gguf(1); }
/* Without the embedding in mapped host memory (read at model load): each decode step uploads its
   row, and greedy decoding waits for each token before the next step. */
static void test_tiny_gguf_uploaded_rows(void) {
    setenv("BITNET_GPU_HOST_EMB", "0", 1);
    tiny_gguf(1);
    unsetenv("BITNET_GPU_HOST_EMB");
}
/* The default int8 head (rows quantized once, int8 activations) on both: the same integer dots. */
static void test_tiny_gguf_head_q8(void) {
    if (getenv("BITNET_HEAD")) TEST_SKIP("BITNET_HEAD is set");
    tiny_gguf(0);
}

/* Random weights can make a model so sensitive that two implementations whose attention differs
   by a last bit part ways: where an activation sits at an int8 rounding boundary the difference
   becomes a whole code, which the next layers (and, through the KV cache, later positions)
   amplify. With float attention on both sides the head_dim-64 model below did exactly that on the
   H100 (6 of 60 decode rows above 1e-2, worst 0.4; the CPU against itself, float vs double
   attention, moved 39 of 100 rows by more than 1e-2) although every GPU kernel matched the CPU's op
   on the same inputs (tools/fwd_divergence.c). Attention in double on both sides removes that: the
   models here are kept sensitive on purpose, so that any difference in attention shows. */

/* 2B-4T's attention shape (head_dim 128, 4 query heads per kv head), scaled down; odd vocabulary. */
static void test_random_hd128_gqa4(void) {
    NEED_GPU();
    random_model(777, 512, 1, 4, 1, 640, 0.05f, 0.15f, 11);
}

/* head_dim 64, 2 query heads per kv head, three layers. */
static void test_random_hd64(void) {
    NEED_GPU();
    random_model(1000, 256, 3, 4, 2, 384, 0.3f, 1.5f, 12);
}

/* The "bitnet" architecture's FFN, silu(gate) * up (1bitLLM's models): prefill through the GEMM
   epilogues, decode through the GEMV's, greedy tokens. */
static const float *r_ff; /* the models' rope_freqs (NULL: none) */
static void random_silu(int dim, int heads, int kv, int ffn, unsigned long long seed, int no_sub) {
    rmodel r;
    bitnet_model *cpu = NULL, *gpu = NULL;
    bitnet_model_info info;
    w_lo = 0.3f, w_hi = 1.5f;
    rmodel_build(&r, 1000, dim, 2, heads, kv, ffn, seed);
    r.w.ffn_act = BITNET_FFN_SILU, r.w.no_sub_norms = no_sub, r.w.rope_freqs = r_ff;
    TEST_CHECKF(load_pair_weights(&r.w, &cpu, &gpu) == BITNET_OK, "%s", bitnet_last_error());
    if (cpu && gpu) {
        TEST_CHECK(bitnet_model_get_info(gpu, &info) == BITNET_OK && info.ffn_act == BITNET_FFN_SILU);
        TEST_CHECK(strcmp(info.arch, no_sub ? "llama" : "bitnet") == 0 && info.sub_norms == !no_sub);
        compare(cpu, gpu, 100, 60);
        compare(cpu, gpu, 1, 3);
        greedy(cpu, gpu);
        states(cpu, gpu);
    }
    bitnet_model_free(gpu);
    bitnet_model_free(cpu);
    rmodel_free(&r);
}
static void test_random_silu(void) {
    NEED_GPU();
    random_silu(256, 4, 2, 384, 13, 0);
    random_silu(384, 4, 4, 512, 14, 0); /* head_dim 96, no GQA: bitnet_b1_58-large's heads (1536 / 16) */
    random_silu(256, 4, 2, 384, 15, 1); /* "llama": no sub-norms (the GEMV bitnet_k_fwd_gemv_res_raw, prefill's
                                           quantization without norm) */
}
/* Llama 3.1's rope_freqs (the host's rope table, one for both backends): "llama" heads of 64, and
   padded heads of 100 (the device's table keeps each pair's factor in its padded place) */
static void test_random_rope_freqs(void) {
    float ff[64];
    int i;
    NEED_GPU();
    for (i = 0; i < 64; i++) ff[i] = 1.0f + 0.25f * (float)(i % 13);
    r_ff = ff;
    random_silu(256, 4, 2, 384, 19, 1);
    random_silu(3200, 32, 8, 1000, 20, 0);
    r_ff = NULL;
}
/* Falcon 3's heads ("llama", head_dim 256, 3 query heads a kv head): the prefill attention's _h256
   build, the decode attention's long form with a thread a dim. */
static void test_random_hd256(void) {
    NEED_GPU();
    random_silu(768, 3, 1, 1024, 16, 1);
}

/* Asking for CUDA without a usable one is an error, never a silent CPU run. */
/* 1bitLLM-3B's heads (32 of 100 dims: the device's heads of 128, >>pad) and an FFN that is not whole
   I2_S rows (1000: matrices 1024 wide), with and without GQA */
static void test_random_padded(void) {
    NEED_GPU();
    random_silu(3200, 32, 32, 1000, 17, 0);
    random_silu(3200, 32, 8, 1000, 18, 0);
}
static void test_backend_cuda_without_gpu(void) {
    rmodel r;
    bitnet_model *m = NULL;
    bitnet_model_desc d;
    if (bitnet_gpu_available()) TEST_SKIP("a GPU is usable here");
    w_lo = 0.5f, w_hi = 1.0f;
    rmodel_build(&r, 300, 128, 1, 2, 1, 128, 3);
    memset(&d, 0, sizeof d);
    d.backend = BITNET_BACKEND_CUDA;
    TEST_CHECK(bitnet_model_from_weights(&r.w, &d, &m) == BITNET_ERR_BACKEND);
    TEST_CHECK(m == NULL);
    bitnet_model_free(m);
    rmodel_free(&r);
}

int main(void) {
    RUN_TEST(test_backend_cuda_without_gpu);
    RUN_TEST(test_tiny_gguf);
    RUN_TEST(test_tiny_gguf_uploaded_rows);
    RUN_TEST(test_tiny_gguf_head_q8);
    RUN_TEST(test_random_hd128_gqa4);
    RUN_TEST(test_random_hd64);
    RUN_TEST(test_random_silu);
    RUN_TEST(test_random_hd256);
    RUN_TEST(test_random_padded);
    RUN_TEST(test_random_rope_freqs);
    if (worst_rel > 0) printf("  worst relative L2 distance of GPU to CPU logits: %.3g\n", worst_rel);
    return test_summary();
}
