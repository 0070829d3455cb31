/* GPU forward benchmark and 2B-4T-scale agreement check (tools/gpu_forward.sh runs it on the GPU
   machine; BENCHMARKS.md has the numbers).
     bench_cuda_forward [MODEL.gguf]
   Without a file it builds random weights in memory with BitNet b1.58 2B-4T's exact shapes
   (vocabulary 128256, dim 2560, 30 layers, 20/5 heads, ffn 6912, tied fp16 head), as
   `gen-model --preset 2b4t` writes them. Batch 1, a 64-token prompt then 128 greedy tokens:
     decode tokens/s with the argmax on the device (4 bytes back per token), and with every
       token's logits downloaded and sampled on the host (what bitnet_generate does);
     device time per decode step (graph replays between two events);
     prefill of 512 tokens, tokens/s;
     device memory with a 4096-token context: the pools' peak (weights + KV cache + buffers) and
       the device's used memory (context and modules too), from cuMemGetInfo through device info;
   then the CPU on the same weights: the prompt's logits within 1e-2 relative L2, and 64 greedy
   tokens token for token. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"

#define PROMPT 64
#define GEN 128
#define PREFILL 512
#define CTX 4096

static double median(double *v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- 2B-4T-shaped random weights ------------------------------------------------------------------ */
typedef struct synth { bitnet_model_weights w; bitnet_layer_weights *layers; void **bufs; int n; } synth;
static void *keep(synth *s, size_t bytes) {
    void *p = malloc(bytes);
    if (!p) { fprintf(stderr, "out of memory (%zu bytes)\n", bytes); exit(1); }
    s->bufs[s->n++] = p;
    return p;
}
static const void *ternary(synth *s, int n, int k, float scale) {
    static uint8_t fix[256];
    size_t bytes = (size_t)n * k / 4, i;
    uint8_t *p = (uint8_t *)keep(s, bytes + 32);
    if (!fix[1]) /* code 3 (unused by I2_S) becomes 1 (weight 0): P(-1, 0, +1) = 1/4, 1/2, 1/4 */
        for (i = 0; i < 256; i++) {
            int b = 0, j;
            for (j = 0; j < 4; j++) {
                int c = ((int)i >> (2 * j)) & 3;
                b |= (c == 3 ? 1 : c) << (2 * j);
            }
            fix[i] = (uint8_t)b;
        }
    for (i = 0; i + 8 <= bytes; i += 8) {
        uint64_t r = next_u64();
        int j;
        for (j = 0; j < 8; j++) p[i + j] = fix[(r >> (8 * j)) & 255];
    }
    memset(p + bytes, 0, 32);
    memcpy(p + bytes, &scale, 4);
    return p;
}
static const float *vec(synth *s, int n, float lo, float hi) {
    float *p = (float *)keep(s, (size_t)n * 4);
    int i;
    for (i = 0; i < n; i++) p[i] = lo + (hi - lo) * (float)((next_u64() >> 40) * (1.0 / 16777216.0));
    return p;
}
static void synth_2b4t(synth *s) {
    int l, dim = 2560, ffn = 6912, nh = 20, nkv = 5, hd = 128, nv = 128256;
    size_t i;
    uint16_t *emb;
    memset(s, 0, sizeof *s);
    s->bufs = (void **)calloc(4096, sizeof(void *));
    s->w.n_vocab = nv, s->w.dim = dim, s->w.n_layers = 30, s->w.n_heads = nh, s->w.n_kv_heads = nkv, s->w.ffn_dim = ffn;
    s->w.n_ctx_train = 4096, s->w.rope_theta = 500000.0f, s->w.norm_eps = 1e-5f, s->w.bos = 128000, s->w.eos = 128001;
    s->w.eot = 128009;
    emb = (uint16_t *)keep(s, (size_t)nv * dim * 2);
    for (i = 0; i < (size_t)nv * dim; i += 4) { /* fp16 values of magnitude 2^-7 .. 2^-5, random signs */
        uint64_t r = next_u64();
        int j;
        for (j = 0; j < 4; j++) {
            uint16_t b = (uint16_t)(r >> (16 * j));
            emb[i + j] = (uint16_t)((b & 0x8000u) | (0x2000u + (b & 0x07ffu)));
        }
    }
    s->w.tok_embd = emb;
    s->w.output_norm = vec(s, dim, 0.5f, 1.5f);
    s->layers = (bitnet_layer_weights *)keep(s, 30 * sizeof *s->layers);
    for (l = 0; l < 30; l++) {
        bitnet_layer_weights *L = &s->layers[l];
        L->attn_norm = vec(s, dim, 0.5f, 1.5f);
        L->attn_sub_norm = vec(s, nh * hd, 0.5f, 1.5f);
        L->ffn_norm = vec(s, dim, 0.5f, 1.5f);
        L->ffn_sub_norm = vec(s, ffn, 0.5f, 1.5f);
        L->wq = ternary(s, nh * hd, dim, 0.02f);
        L->wk = ternary(s, nkv * hd, dim, 0.02f);
        L->wv = ternary(s, nkv * hd, dim, 0.02f);
        L->wo = ternary(s, dim, nh * hd, 0.02f);
        L->w_gate = ternary(s, ffn, dim, 0.02f);
        L->w_up = ternary(s, ffn, dim, 0.02f);
        L->w_down = ternary(s, dim, ffn, 0.02f);
    }
    s->w.layers = s->layers;
}

static bitnet_model *load(const char *path, synth *s, bitnet_backend be) {
    bitnet_model_desc d;
    bitnet_model *m = NULL;
    bitnet_result r;
    memset(&d, 0, sizeof d);
    d.backend = be;
    d.head_f16 = 1;
    d.path = path;
    r = path ? bitnet_model_load(&d, &m) : bitnet_model_from_weights(&s->w, &d, &m);
    if (r != BITNET_OK) {
        fprintf(stderr, "load (%s): %s: %s\n", be == BITNET_BACKEND_CUDA ? "cuda" : "cpu", bitnet_result_string(r), bitnet_last_error());
        exit(1);
    }
    return m;
}

#define CHECK(x) \
    do { bitnet_result r_ = (x); if (r_ != BITNET_OK) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, bitnet_last_error()); exit(1); } } while (0)

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : NULL;
    synth s;
    bitnet_model *g, *c;
    bitnet_model_info info;
    bitnet_session *sg, *sc;
    bitnet_session_desc sd;
    bitnet_gpu_device_info di0, di1;
    bitnet_gpu_pool_stats pm, ps;
    bitnet__gmodel *gm;
    bitnet__gsession *gs;
    int32_t prompt[PREFILL], gen_dev[GEN], gen_host[GEN], gen_cpu[64], tok;
    float *lg, *lc;
    double t0, t1, tt[5], dev_ms, worst = 0;
    int i, j, same;
    size_t nv;

    memset(&s, 0, sizeof s);
    if (!path) {
        t0 = bitnet__now();
        synth_2b4t(&s);
        printf("weights: random, BitNet b1.58 2B-4T shapes, built in %.1f s\n", bitnet__now() - t0);
    } else printf("weights: %s\n", path);
    CHECK(bitnet_gpu_device_info_get(0, &di0));
    printf("device: %s, %d SMs, %.0f GB/s theoretical, free %.0f MiB of %.0f MiB\n", di0.name, di0.sm_count,
           di0.mem_bandwidth_gbs, di0.free_mem / 1048576.0, di0.total_mem / 1048576.0);
    t0 = bitnet__now();
    g = load(path, &s, BITNET_BACKEND_CUDA);
    printf("GPU model ready in %.2f s (weights uploaded and repacked, modules compiled or read from the cache)\n",
           bitnet__now() - t0);
    bitnet_model_get_info(g, &info);
    nv = (size_t)info.n_vocab;
    for (i = 0; i < PREFILL; i++) prompt[i] = (int32_t)((1000 + 7919 * (size_t)i) % nv);
    lg = (float *)malloc(nv * PROMPT * sizeof(float));
    lc = (float *)malloc(nv * PROMPT * sizeof(float));
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = CTX;
    CHECK(bitnet_session_create(g, &sd, &sg));
    gm = (bitnet__gmodel *)g->gpu;
    gs = (bitnet__gsession *)sg->gpu;

    /* warm-up: JIT of the prefill GEMM, graph capture */
    CHECK(bitnet_session_eval(sg, prompt, PROMPT, lg, 0));
    CHECK(bitnet_session_eval(sg, prompt, 1, NULL, 0));

    /* 1. decode, greedy on the device: prompt, then 128 steps of one token */
    for (j = 0; j < 3; j++) {
        bitnet_session_reset(sg);
        CHECK(bitnet_session_eval(sg, prompt, PROMPT, lg, 0));
        CHECK(bitnet__gpu_last_argmax(sg, &tok));
        t0 = bitnet__now();
        for (i = 0; i < GEN; i++) {
            gen_dev[i] = tok;
            CHECK(bitnet_session_eval(sg, &tok, 1, NULL, 0));
            CHECK(bitnet__gpu_last_argmax(sg, &tok));
        }
        tt[j] = bitnet__now() - t0;
    }
    printf("decode, argmax on the device: %.1f tokens/s (median of 3 runs of %d tokens after a %d-token prompt)\n",
           GEN / median(tt, 3), GEN, PROMPT);
    /* 2. decode with the logits downloaded and the argmax taken on the host */
    for (j = 0; j < 3; j++) {
        bitnet_sampler_params sp;
        memset(&sp, 0, sizeof sp);
        bitnet_session_reset(sg);
        CHECK(bitnet_session_eval(sg, prompt, PROMPT, lg, 0));
        CHECK(bitnet_sample(lg, (int32_t)nv, &sp, NULL, 0, NULL, &tok));
        t0 = bitnet__now();
        for (i = 0; i < GEN; i++) {
            gen_host[i] = tok;
            CHECK(bitnet_session_eval(sg, &tok, 1, lg, 0));
            CHECK(bitnet_sample(lg, (int32_t)nv, &sp, NULL, 0, NULL, &tok));
        }
        tt[j] = bitnet__now() - t0;
    }
    printf("decode, logits to the host and sampled there: %.1f tokens/s\n", GEN / median(tt, 3));
    same = memcmp(gen_dev, gen_host, sizeof gen_dev) == 0;
    printf("device argmax and host argmax give the same %d tokens: %s\n", GEN, same ? "yes" : "NO");
    /* 3. device time of a decode step: graph replays between two events (position stays in range) */
    bitnet_session_reset(sg);
    CHECK(bitnet_session_eval(sg, prompt, PROMPT, NULL, 0));
    CHECK(bitnet_gpu_timer_begin(gs->gpu));
    for (i = 0; i < GEN; i++) CHECK(bitnet_gpu_graph_launch(gs->gpu, gs->graph));
    CHECK(bitnet_gpu_timer_end(gs->gpu, &dev_ms));
    printf("decode step on the device: %.1f us (graph replays back to back; %d kernels per step)\n", 1000.0 * dev_ms / GEN,
           2 + 5 * info.n_layers);
    /* 4. prefill of 512 tokens (logits of the last) */
    for (j = 0; j < 5; j++) {
        bitnet_session_reset(sg);
        t0 = bitnet__now();
        CHECK(bitnet_session_eval(sg, prompt, PREFILL, lg, 0));
        tt[j] = bitnet__now() - t0;
    }
    printf("prefill of %d tokens: %.0f tokens/s (median of 5: %.2f ms)\n", PREFILL, PREFILL / median(tt, 5), 1000 * median(tt, 5));
    /* 5. memory with the 4096-token context */
    CHECK(bitnet_gpu_pool_stats_get(gm->gpu, &pm));
    CHECK(bitnet_gpu_pool_stats_get(gs->gpu, &ps));
    CHECK(bitnet_gpu_device_info_get(0, &di1));
    printf("device memory, %d-token context: weights %.1f MB + session %.1f MB (KV cache %.1f MB) = %.1f MB in the pools "
           "(peak reserved %.1f MB); the device's used memory grew by %.1f MB since before the model (context and modules "
           "included)\n", CTX, gm->bytes / 1e6, gs->bytes / 1e6, 2.0 * info.n_layers * (double)(info.n_kv_heads * info.head_dim) * CTX * 2 / 1e6,
           (pm.current + ps.current) / 1e6, (pm.reserved_peak + ps.reserved_peak) / 1e6,
           ((double)di0.free_mem - (double)di1.free_mem) / 1e6);
    fflush(stdout);
    if (system("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader") != 0) printf("(nvidia-smi failed)\n");

    /* 6. the CPU on the same weights */
    t0 = bitnet__now();
    c = load(path, &s, BITNET_BACKEND_CPU);
    printf("CPU model ready in %.1f s (%d threads)\n", bitnet__now() - t0, bitnet_num_threads());
    CHECK(bitnet_session_create(c, &sd, &sc));
    bitnet_session_reset(sg);
    t0 = bitnet__now();
    CHECK(bitnet_session_eval(sc, prompt, PROMPT, lc, 1));
    t1 = bitnet__now();
    CHECK(bitnet_session_eval(sg, prompt, PROMPT, lg, 1));
    for (i = 0; i < PROMPT; i++) {
        double num = 0, den = 0, e;
        size_t k;
        for (k = 0; k < nv; k++) {
            double d = (double)lg[i * nv + k] - lc[i * nv + k];
            num += d * d;
            den += (double)lc[i * nv + k] * lc[i * nv + k];
        }
        e = sqrt(num / (den > 0 ? den : 1));
        if (!(e <= worst)) worst = e;
    }
    printf("CPU prompt of %d tokens in %.2f s; logits of all %d positions, GPU vs CPU: worst relative L2 %.3g (%s 1e-2)\n",
           PROMPT, t1 - t0, PROMPT, worst, worst <= 1e-2 ? "within" : "NOT within");
    {
        bitnet_generate_params p;
        bitnet_generate_stats st;
        int32_t never = -1;
        memset(&p, 0, sizeof p);
        p.max_tokens = 64;
        p.stop_tokens = &never;
        p.n_stop = 1;
        bitnet_session_reset(sc);
        t0 = bitnet__now();
        CHECK(bitnet_generate(sc, prompt, PROMPT, &p, gen_cpu, 64, &st));
        for (i = 0, same = 0; i < 64 && gen_cpu[i] == gen_dev[i]; i++) same++;
        printf("greedy, CPU (%.1f tokens/s) vs GPU: first %d of 64 tokens identical%s\n", st.n_generated / st.gen_seconds, same,
               same == 64 ? "" : " (MISMATCH)");
    }
    bitnet_session_free(sc);
    bitnet_model_free(c);
    bitnet_session_free(sg);
    bitnet_model_free(g);
    free(lg);
    free(lc);
    for (i = 0; i < s.n; i++) free(s.bufs[i]);
    free(s.bufs);
    return 0;
}
