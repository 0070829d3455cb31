/* GPU prefill profile (tools/gpu_prefill.sh runs it on the GPU machine; BENCHMARKS.md has the
   numbers).
     bench_prefill MODEL.gguf [TOKENS (512)]
   One prompt of TOKENS tokens through bitnet_session_eval (logits of the last): wall time, median
   of 5. Then each step kind of the prefill (>>cuda-forward's bitnet__gpu_prefill) timed alone:
   its launches for every layer, back to back on the session's stream, between device events
   (median of 5), on the real activations the prefill left behind; then every step in the
   prefill's order, launched one by one and as one CUDA graph (what the launches cost). Then the
   attention kernel in other builds of the forward module (-D options: keys a tile), each checked against a double
   attention computed here on the host from the same rotated queries and fp16 cache (sampled rows
   of the last layer); and the GEMMs with each token tile forced (BITNET_TGEMM_TN); last, a 32-token
   turn after 3000 positions with the attention's cuts off and on (BITNET_GPU_ATT_CUT), timed and
   checked the same way. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"

#define CHECK(x) \
    do { bitnet_result r_ = (x); if (r_ != BITNET_OK) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, bitnet_last_error()); exit(1); } } while (0)

static bitnet_model *G_m;
static bitnet_session *G_s;
static int G_n;

#include "bench_util.h"

/* one step kind of layer l (kind 0: embed, 11: head) */
static void launch_kind(int kind, int l) {
    bitnet__gmodel *g = (bitnet__gmodel *)G_m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    const bitnet__glayer *L = &g->layers[l];
    int m = G_n;
    switch (kind) {
    case 0: CHECK(bitnet__gpu_embed(G_s, q->erow, q->iota, m)); break;
    case 1: CHECK(bitnet__gpu_norm_quant(G_s, q->x, L->attn_norm, m, G_s->m->info.dim, &q->a_dim)); break;
    case 2: CHECK(bitnet__gpu_linear_m(G_s, &L->qkv, &q->a_dim, q->qkv, 0)); break;
    case 3: CHECK(bitnet__gpu_rope_kv(G_s, l, m)); break;
    case 4: CHECK(bitnet__gpu_attention_m(G_s, l, m, 0)); break;
    case 5: CHECK(bitnet__gpu_norm_quant(G_s, q->att, L->attn_sub_norm, m, G_s->m->q_dim, &q->a_q)); break;
    case 6: CHECK(bitnet__gpu_linear_m(G_s, &L->o, &q->a_q, q->h, 0)); break; /* (into h: x stays) */
    case 7: CHECK(bitnet__gpu_norm_quant(G_s, q->x, L->ffn_norm, m, G_s->m->info.dim, &q->a_dim)); break;
    case 8: CHECK(bitnet__gpu_linear_m(G_s, &L->gu, &q->a_dim, q->h, 0)); break;
    case 9: CHECK(bitnet__gpu_norm_quant(G_s, q->h, L->ffn_sub_norm, m, G_s->m->info.ffn_dim, &q->a_ff)); break;
    case 10: CHECK(bitnet__gpu_linear_m(G_s, &L->down, &q->a_ff, q->qkv, 0)); break; /* (into qkv, m x dim fits) */
    default: CHECK(bitnet__gpu_head(G_s, q->x, 0)); break;
    }
}

/* one step kind for every layer (kind 0: embed, 11: head: once); kind -1: every kind in the
   prefill's order (embed, the layers' ten steps, head) */
static void run_kind(int kind) {
    int l, k, nl = (kind == 0 || kind == 11) ? 1 : G_m->info.n_layers;
    G_s->pos -= G_n; /* where the prefill's batch started, as the launches saw it */
    if (kind < 0) launch_kind(0, 0);
    for (l = 0; l < nl; l++)
        if (kind >= 0) launch_kind(kind, l);
        else for (k = 1; k <= 10; k++) launch_kind(k, l);
    if (kind < 0) launch_kind(11, 0);
    G_s->pos += G_n;
}

static double time_kind(int kind) { /* us for all layers, median of 5 */
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    double t[5], ms;
    int i;
    run_kind(kind); /* warm */
    for (i = 0; i < 5; i++) {
        CHECK(bitnet_gpu_timer_begin(q->gpu));
        run_kind(kind);
        CHECK(bitnet_gpu_timer_end(q->gpu, &ms));
        t[i] = 1000.0 * ms;
    }
    return median(t, 5);
}

/* The last layer's attention on the host, in double, for sampled rows; worst |gpu - ref| / max|ref|. */
static double check_attention(int m, int pos0) { /* the last call's m rows, at positions pos0.. */
    const bitnet_model *md = G_m;
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    int hd = md->info.head_dim, nh = md->info.n_heads, nkv = md->info.n_kv_heads, G = nh / nkv;
    int l = md->info.n_layers - 1, n_ctx = G_s->n_ctx, t, h, p, d;
    long long ldq = md->q_dim + 2 * md->kv_dim;
    size_t layer = (size_t)l * (size_t)md->kv_dim * (size_t)n_ctx * 2, kvn = (size_t)md->kv_dim * n_ctx;
    float *qkv = (float *)malloc((size_t)m * ldq * 4), *att = (float *)malloc((size_t)m * md->q_dim * 4);
    uint16_t *kc = (uint16_t *)malloc(kvn * 2), *vc = (uint16_t *)malloc(kvn * 2);
    double *sc = (double *)malloc((size_t)(pos0 + m) * 8), worst = 0;
    static const int rows[] = {0, 1, 2, 7, 8, 9, 31, 63, 64, 100, 127, 128, 255, 256, 300, 383, 447, 500, 510, 511};
    CHECK(bitnet_gpu_download(q->gpu, qkv, q->qkv, (size_t)m * ldq * 4));
    CHECK(bitnet__gpu_attention_m(G_s, l, m, 0));
    CHECK(bitnet_gpu_download(q->gpu, att, q->att, (size_t)m * md->q_dim * 4));
    CHECK(bitnet_gpu_download(q->gpu, kc, q->kc + layer, kvn * 2));
    CHECK(bitnet_gpu_download(q->gpu, vc, q->vc + layer, kvn * 2));
    for (t = 0; t < (int)(sizeof rows / sizeof rows[0]); t++) {
        int r = rows[t];
        if (r >= m) continue;
        for (h = 0; h < nh; h++) {
            const float *qr = qkv + (size_t)r * ldq + (size_t)h * hd;
            const uint16_t *kb = kc + (size_t)(h / G) * n_ctx * hd, *vb = vc + (size_t)(h / G) * n_ctx * hd;
            double mx = -1e300, l_ = 0, o, ref_max = 0, err = 0;
            for (p = 0; p <= pos0 + r; p++) {
                double s = 0;
                for (d = 0; d < hd; d++) s += (double)qr[d] * (double)bitnet_fp16_to_fp32(kb[(size_t)p * hd + d]);
                sc[p] = s / sqrt((double)hd);
                if (sc[p] > mx) mx = sc[p];
            }
            for (p = 0; p <= pos0 + r; p++) l_ += (sc[p] = exp(sc[p] - mx));
            for (d = 0; d < hd; d++) {
                o = 0;
                for (p = 0; p <= pos0 + r; p++) o += sc[p] * (double)bitnet_fp16_to_fp32(vb[(size_t)p * hd + d]);
                o /= l_;
                if (fabs(o) > ref_max) ref_max = fabs(o);
                if (fabs(o - att[(size_t)r * md->q_dim + (size_t)h * hd + d]) > err) err = fabs(o - att[(size_t)r * md->q_dim + (size_t)h * hd + d]);
            }
            if (err / (ref_max > 0 ? ref_max : 1) > worst) worst = err / (ref_max > 0 ? ref_max : 1);
        }
    }
    free(qkv), free(att), free(kc), free(vc), free(sc);
    return worst;
}

int main(int argc, char **argv) {
    static const char *names[12] = {"embed", "norm+quant (attn_norm)", "QKV GEMM", "rope + KV store", "attention",
                                    "norm+quant (attn_sub_norm)", "O GEMM", "norm+quant (ffn_norm)", "gate|up GEMM (glu)",
                                    "norm+quant (ffn_sub_norm)", "down GEMM", "head (1 row)"};
    static const char *builds[] = {"-DBF_PMMA=8", "-DBF_PK=64", "-DBF_PMMA=8 -DBF_PK=64"};
    static const int build_pk[] = {32, 64, 64};
    bitnet_model_desc d;
    bitnet_session_desc sd;
    bitnet__gmodel *g;
    int32_t *toks;
    float *lg;
    double tt[5], t0, sum = 0, us[12];
    int i, k;
    if (argc < 2) return fprintf(stderr, "usage: bench_prefill MODEL.gguf [TOKENS]\n"), 2;
    G_n = argc > 2 ? atoi(argv[2]) : 512;
    memset(&d, 0, sizeof d);
    d.backend = BITNET_BACKEND_CUDA;
    d.path = argv[1];
    CHECK(bitnet_model_load(&d, &G_m));
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = 4096;
    sd.n_batch = G_n;
    CHECK(bitnet_session_create(G_m, &sd, &G_s));
    g = (bitnet__gmodel *)G_m->gpu;
    toks = (int32_t *)malloc((size_t)G_n * 4);
    lg = (float *)malloc((size_t)G_m->info.n_vocab * 4);
    for (i = 0; i < G_n; i++) toks[i] = (int32_t)((1000 + 7919 * (size_t)i) % (size_t)G_m->info.n_vocab);
    CHECK(bitnet_session_eval(G_s, toks, G_n, lg, 0)); /* warm */
    for (k = 0; k < 5; k++) {
        bitnet_session_reset(G_s);
        t0 = bitnet__now();
        CHECK(bitnet_session_eval(G_s, toks, G_n, lg, 0));
        tt[k] = bitnet__now() - t0;
    }
    printf("prefill of %d tokens (bitnet_session_eval, logits of the last): %.0f tokens/s, median of 5: %.3f ms\n", G_n,
           G_n / median(tt, 5), 1000 * median(tt, 5));
    printf("each step kind alone, all %d layers, us (median of 5):\n", G_m->info.n_layers);
    for (k = 0; k < 12; k++) {
        us[k] = time_kind(k);
        sum += us[k];
    }
    for (k = 0; k < 12; k++) printf("  %-28s %9.1f us  %5.1f%%\n", names[k], us[k], 100 * us[k] / sum);
    printf("  %-28s %9.1f us\n", "sum", sum);
    { /* every step in the prefill's order: launched one by one, and as one CUDA graph (what launching costs) */
        bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
        bitnet_gpu_graph *gr = NULL;
        double tg[5], ms;
        printf("all steps in order, launched one by one: %.1f us (median of 5)\n", time_kind(-1));
        CHECK(bitnet_gpu_graph_begin(q->gpu));
        run_kind(-1);
        CHECK(bitnet_gpu_graph_end(q->gpu, &gr));
        CHECK(bitnet_gpu_graph_launch(q->gpu, gr)); /* warm */
        for (i = 0; i < 5; i++) {
            CHECK(bitnet_gpu_timer_begin(q->gpu));
            CHECK(bitnet_gpu_graph_launch(q->gpu, gr));
            CHECK(bitnet_gpu_timer_end(q->gpu, &ms));
            tg[i] = 1000.0 * ms;
        }
        printf("all steps in order, as one CUDA graph: %.1f us (median of 5)\n", median(tg, 5));
        bitnet_gpu_graph_free(gr);
    }
    /* the GEMMs with each token tile forced (the library picks per grid size) */
    {
        static const char *tn[3] = {"128", "64", "32"};
        static const int gk[4] = {2, 6, 8, 10};
        for (i = 0; i < 3; i++) {
            setenv("BITNET_TGEMM_TN", tn[i], 1);
            printf("GEMMs with BITNET_TGEMM_TN=%s:", tn[i]);
            for (k = 0; k < 4; k++) printf(" %s %.1f us;", names[gk[k]], time_kind(gk[k]));
            printf("\n");
        }
        unsetenv("BITNET_TGEMM_TN");
    }
    /* attention: this build, then others, each against the host's double attention */
    bitnet_session_reset(G_s);
    CHECK(bitnet_session_eval(G_s, toks, G_n, lg, 0)); /* fresh caches and activations */
    printf("attention, default build (keys a tile %d): %.1f us for all layers; last layer vs host double: worst %.3g (rel. to max|out|)\n",
           g->att_pk, time_kind(4), check_attention(G_n, 0));
    for (i = 0; i < (int)(sizeof builds / sizeof builds[0]); i++) {
        bitnet_gpu_module *mod;
        bitnet_gpu_kernel *keep = g->attn_prefill;
        int keep_pk = g->att_pk;
        CHECK(bitnet_gpu_module_load(g->gpu, bitnet_cuda_src_forward, builds[i], &mod));
        CHECK(bitnet_gpu_kernel_get(mod, "bitnet_k_fwd_attn_prefill", &g->attn_prefill));
        g->att_pk = build_pk[i];
        printf("attention, build \"%s\": %.1f us for all layers; last layer vs host double: worst %.3g\n", builds[i],
               time_kind(4), check_attention(G_n, 0));
        g->attn_prefill = keep;
        g->att_pk = keep_pk;
    }
    if (G_n > 300) { /* a prompt in two calls: the second one's queries start at position 300 */
        bitnet_session_reset(G_s);
        CHECK(bitnet_session_eval(G_s, toks, 300, NULL, 0));
        CHECK(bitnet_session_eval(G_s, toks + 300, (size_t)G_n - 300, lg, 0));
        printf("attention, %d tokens after 300 (a second prefill call): last layer vs host double: worst %.3g\n", G_n - 300,
               check_attention(G_n - 300, 300));
    }
    if (G_n >= 500) { /* a short turn after a long context: 32 tokens at position 3000 (filled in 500-token calls), the
                         prefill attention's cuts off and on */
        int32_t *tl = (int32_t *)malloc(3032 * 4);
        int j, on;
        for (j = 0; j < 3032; j++) tl[j] = toks[j % G_n];
        for (on = 0; on < 2; on++) {
            if (on) unsetenv("BITNET_GPU_ATT_CUT");
            else setenv("BITNET_GPU_ATT_CUT", "0", 1);
            for (k = 0; k < 5; k++) {
                bitnet_session_reset(G_s);
                for (j = 0; j < 3000; j += 500) CHECK(bitnet_session_eval(G_s, tl + j, 500, j == 2500 ? lg : NULL, 0)); /* (logits: done) */
                t0 = bitnet__now();
                CHECK(bitnet_session_eval(G_s, tl + 3000, 32, lg, 0));
                tt[k] = bitnet__now() - t0;
            }
            printf("a 32-token turn after 3000 positions, cuts %s: %.3f ms (median of 5)", on ? "on" : "off", 1000 * median(tt, 5));
            printf("; last layer vs host double: worst %.3g\n", check_attention(32, 3000));
        }
        free(tl);
    }
    bitnet_session_free(G_s);
    bitnet_model_free(G_m);
    free(toks);
    free(lg);
    return 0;
}
