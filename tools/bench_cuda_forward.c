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
   tokens token for token (with the CPU's own AVX-512 and AVX2 paths compared the same way, for
   scale). Tuning: the forward module is rebuilt with other -D options (alternative builds of the
   same source) and host parameters, each measured the same way (tokens must not change), with
   every kernel kind timed alone by graph replay and an empty kernel's graph node as the floor. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <dlfcn.h>

#define PROMPT 64
#define GEN 128
#define PREFILL 512
#define CTX 4096

#include "bench_util.h"

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
    /* the default head (int8 rows, like the CPU's default) on both backends */
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

/* ---- measurements on the GPU session ---------------------------------------------------------- */
static bitnet_model *G_m;
static bitnet_session *G_s;
static int32_t G_prompt[PREFILL];

/* 64-token prompt, then GEN greedy tokens with the argmax on the device (bitnet_generate: each step
   launched a step ahead); tokens/s (median of 3). */
static double decode_tps(int32_t *gen) {
    static const int32_t no_stop[1] = {-1};
    bitnet_generate_params gp;
    bitnet_generate_stats st;
    double tt[3];
    int j;
    memset(&gp, 0, sizeof gp);
    gp.max_tokens = GEN;
    gp.stop_tokens = no_stop; /* none */
    for (j = 0; j < 3; j++) {
        bitnet_session_reset(G_s);
        CHECK(bitnet_generate(G_s, G_prompt, PROMPT, &gp, gen, GEN, &st));
        if (st.n_generated != GEN) {
            fprintf(stderr, "decode: %zu of %d tokens\n", st.n_generated, GEN);
            exit(1);
        }
        tt[j] = st.gen_seconds;
    }
    return GEN / median(tt, 3);
}

/* Sampled decoding as bitnet_generate runs it on the GPU, tokens/s (median of 3): drawn on the device
   (the default), and on the host from the device's k best (BITNET_GPU_TOPK=1, into *host_tps); a host
   draw (kernel, download, host) and the topk kernel alone (device time a launch, 100 back to back). */
static double sampled_tps(double *topk_us, double *host_tps) {
    bitnet__gsession *gs = (bitnet__gsession *)G_s->gpu;
    bitnet_generate_params p;
    bitnet_generate_stats st;
    bitnet_sampler_params sp;
    int32_t never = -1, tok;
    uint64_t rng = bitnet_rng_seed(1);
    double tt[3], ms, dev_tps = 0;
    int j;
    memset(&p, 0, sizeof p);
    p.max_tokens = GEN, p.stop_tokens = &never, p.n_stop = 1;
    p.sampler.temperature = 0.8f, p.sampler.top_k = 40, p.sampler.top_p = 0.95f, p.sampler.min_p = 0.05f, p.sampler.seed = 1;
    for (j = 0; j < 6; j++) {
        if (j == 3) setenv("BITNET_GPU_TOPK", "1", 1);
        bitnet_session_reset(G_s);
        CHECK(bitnet_generate(G_s, G_prompt, PROMPT, &p, NULL, 0, &st));
        tt[j % 3] = st.gen_seconds / (double)st.n_generated;
        if (j == 2) dev_tps = 1.0 / median(tt, 3);
    }
    *host_tps = 1.0 / median(tt, 3);
    unsetenv("BITNET_GPU_TOPK");
    sp = p.sampler;
    CHECK(bitnet_gpu_timer_begin(gs->gpu));
    for (j = 0; j < 100; j++) CHECK(bitnet__gpu_sample(G_s, &sp, NULL, 0, &rng, &tok));
    CHECK(bitnet_gpu_timer_end(gs->gpu, &ms));
    topk_us[0] = 1000.0 * ms / 100;
    CHECK(bitnet_gpu_timer_begin(gs->gpu)); /* the kernel alone, as bitnet__gpu_sample launches it */
    for (j = 0; j < 100; j++) CHECK(bitnet__gpu_topk(G_s, &sp));
    CHECK(bitnet_gpu_timer_end(gs->gpu, &ms));
    topk_us[1] = 1000.0 * ms / 100;
    return dev_tps;
}

/* Device time of one decode step: 25 steps back to back from position pos (each moves it on; a first
   pass captures their graphs). */
static double step_us_at(int pos) {
    bitnet__gsession *gs = (bitnet__gsession *)G_s->gpu;
    double ms = 0;
    int i, pass;
    for (pass = 0; pass < 2; pass++) {
        bitnet_session_reset(G_s);
        CHECK(bitnet_session_eval(G_s, G_prompt, pos, NULL, 0));
        CHECK(bitnet_session_eval(G_s, G_prompt + pos, 1, NULL, 0));
        if (pass) CHECK(bitnet_gpu_timer_begin(gs->gpu));
        for (i = 0; i < 25; i++) CHECK(bitnet__gpu_launch_step(G_s, pos + 1 + i)); /* (the token the head left) */
        if (pass) CHECK(bitnet_gpu_timer_end(gs->gpu, &ms));
        else CHECK(bitnet_gpu_sync(gs->gpu));
    }
    return 1000.0 * ms / 25;
}
static double step_us(void) { return step_us_at(PROMPT + 1); }

/* Each kernel kind alone: a graph of its launches for every layer, replayed 20 times. */
static void kernel_times(void) {
    bitnet__gmodel *gm = (bitnet__gmodel *)G_m->gpu;
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    static const char *names[7] = {"embed", "qkv gemv", "attention", "o gemv (+res)", "gate|up gemv", "down gemv (+res)", "head"};
    int kind, l, i, nl = G_m->info.n_layers;
    double total = 0;
    for (kind = 0; kind < 7; kind++) {
        bitnet_gpu_graph *gr = NULL;
        double ms;
        int n = (kind == 0 || kind == 6) ? 1 : nl;
        CHECK(bitnet_gpu_graph_begin(q->gpu));
        for (l = 0; l < n; l++) {
            const bitnet__glayer *L = &gm->layers[l];
            bitnet_result r = BITNET_OK;
            switch (kind) {
            case 0: r = bitnet__gpu_embed(G_s, q->erow, q->iota, 1); break;
            case 1: r = bitnet__gpu_linear(G_s, gm->gemv_store, &L->qkv, q->x, L->attn_norm, G_s->m->info.dim, q->qkv); break;
            case 2: r = bitnet__gpu_attention(G_s, l); break;
            case 3: r = bitnet__gpu_linear(G_s, gm->gemv_sub, &L->o, q->att, L->attn_sub_norm, G_s->m->q_dim, q->x); break;
            case 4: r = bitnet__gpu_linear(G_s, gm->gemv_glu, &L->gu, q->x, L->ffn_norm, G_s->m->info.dim, q->h); break;
            case 5: r = bitnet__gpu_linear(G_s, gm->gemv_sub, &L->down, q->h, L->ffn_sub_norm, G_s->m->info.ffn_dim, q->x); break;
            default: r = bitnet__gpu_head(G_s, q->x, 1); break;
            }
            CHECK(r);
        }
        CHECK(bitnet_gpu_graph_end(q->gpu, &gr));
        CHECK(bitnet_gpu_graph_launch(q->gpu, gr)); /* warm */
        CHECK(bitnet_gpu_timer_begin(q->gpu));
        for (i = 0; i < 20; i++) CHECK(bitnet_gpu_graph_launch(q->gpu, gr));
        CHECK(bitnet_gpu_timer_end(q->gpu, &ms));
        bitnet_gpu_graph_free(gr);
        printf("    %-18s %7.2f us a launch, %7.1f us a step\n", names[kind], 1000.0 * ms / 20 / n, 1000.0 * ms / 20);
        total += 1000.0 * ms / 20;
    }
    printf("    sum: %.1f us a step\n", total);
}

/* Programmatic dependent launch of the decode kernels on or off (bitnet__gmodel_pdl); the graphs are
   recaptured at their next steps. */
static void set_pdl(int on) {
    bitnet__gmodel_pdl((bitnet__gmodel *)G_m->gpu, on);
    bitnet__gpu_graphs_free((bitnet__gsession *)G_s->gpu, -1);
}

/* The forward module rebuilt with options; the session's graphs are recaptured at their next steps. */
static void use_build(const char *opts) { /* (modules stay loaded until the handle closes) */
    bitnet__gmodel *gm = (bitnet__gmodel *)G_m->gpu;
    bitnet_gpu_module *mod;
    double t0 = bitnet__now();
    CHECK(bitnet_gpu_module_load(gm->gpu, bitnet_cuda_src_forward, opts, &mod));
    CHECK(bitnet__gmodel_kernels(gm, mod, &G_m->info, 1));
    bitnet__gpu_graphs_free((bitnet__gsession *)G_s->gpu, -1);
    printf("  build \"%s\" ready in %.1f s\n", opts, bitnet__now() - t0);
}

static void measure(const char *what, const int32_t *ref) {
    int32_t gen[GEN];
    double tps = decode_tps(gen), us2 = step_us_at(180), us3 = step_us_at(500), us = step_us();
    int i, same;
    for (i = 0, same = 0; ref && i < GEN && gen[i] == ref[i]; i++) same++;
    printf("  %-44s decode %7.1f tokens/s, device step %7.1f us (at 180: %7.1f, at 500: %7.1f)%s\n", what, tps, us, us2,
           us3, !ref ? "" : same == GEN ? ", same tokens" : " (TOKENS DIFFER)");
}

/* The floors: graphs of 152 kernels (one decode step's count) that are 0: empty; 1: empty, waiting
   and triggering under PDL; 2: a chain under PDL: every block reads the 2560 floats the kernel
   before wrote, sums their squares over the block, writes its 32 (a GEMV without weights). */
static void empty_graph(void) {
    static const char *src =
        "extern \"C\" __global__ void bitnet_k_empty(int x) { (void)x; }\n"
        "extern \"C\" __global__ void bitnet_k_empty_pdl(int x) {\n"
        "    (void)x; asm volatile(\"griddepcontrol.wait;\" ::: \"memory\"); asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\"); }\n"
        "extern \"C\" __global__ void bitnet_k_chain(const float *x, float *y) {\n"
        "    __shared__ double sh[32];\n"
        "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
        "    double s = 0.0;\n"
        "    for (int i = threadIdx.x; i < 640; i += blockDim.x) { float4 v = ((const float4 *)x)[i]; s += (double)v.x * v.x + (double)v.y * v.y + (double)v.z * v.z + (double)v.w * v.w; }\n"
        "    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);\n"
        "    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;\n"
        "    __syncthreads();\n"
        "    s = 0.0; for (int i = 0; i < (int)(blockDim.x >> 5); i++) s += sh[i];\n"
        "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
        "    if (threadIdx.x < 32 && blockIdx.x < 80) y[blockIdx.x * 32 + threadIdx.x] = (float)(s * 1e-9) + x[blockIdx.x * 32 + threadIdx.x];\n"
        "}\n";
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    bitnet_gpu_module *mod;
    bitnet_gpu_kernel *k;
    bitnet_gpu_graph *gr = NULL;
    unsigned grid[3] = {132, 1, 1}, block[3] = {256, 1, 1};
    double ms;
    int i, v, n = 2 + 5 * G_m->info.n_layers;
    bitnet_devptr buf[2];
    static const char *what[3] = {"empty kernels", "empty kernels under PDL (wait, trigger)",
                                  "chain kernels under PDL (wait, read 2560 floats, block sum, write 32)"};
    CHECK(bitnet_gpu_module_load(q->gpu, src, "", &mod));
    CHECK(bitnet_gpu_alloc(q->gpu, 2560 * 4, &buf[0]));
    CHECK(bitnet_gpu_alloc(q->gpu, 2560 * 4, &buf[1]));
    CHECK(bitnet_gpu_memset(q->gpu, buf[0], 0, 2560 * 4));
    CHECK(bitnet_gpu_memset(q->gpu, buf[1], 0, 2560 * 4));
    for (v = 0; v < 3; v++) {
        CHECK(bitnet_gpu_kernel_get(mod, v == 0 ? "bitnet_k_empty" : v == 1 ? "bitnet_k_empty_pdl" : "bitnet_k_chain", &k));
        k->pdl = v > 0;
        CHECK(bitnet_gpu_graph_begin(q->gpu));
        for (i = 0; i < n; i++) {
            void *args[2];
            args[0] = v == 2 ? (void *)&buf[i & 1] : (void *)&i, args[1] = &buf[(i + 1) & 1];
            CHECK(bitnet_gpu_launch(q->gpu, k, grid, block, 0, args));
        }
        CHECK(bitnet_gpu_graph_end(q->gpu, &gr));
        CHECK(bitnet_gpu_graph_launch(q->gpu, gr));
        CHECK(bitnet_gpu_timer_begin(q->gpu));
        for (i = 0; i < 20; i++) CHECK(bitnet_gpu_graph_launch(q->gpu, gr));
        CHECK(bitnet_gpu_timer_end(q->gpu, &ms));
        printf("  floor: a graph of %d %s (132 x 256 threads) takes %.1f us, %.2f us a node\n", n, what[v], 1000.0 * ms / 20,
               1000.0 * ms / 20 / n);
        bitnet_gpu_graph_free(gr);
    }
    CHECK(bitnet_gpu_free(q->gpu, buf[0]));
    CHECK(bitnet_gpu_free(q->gpu, buf[1]));
}

/* The host's part of a decode step: 25 steps from position PROMPT (graph replays move the position
   on by one, and stay in the attention's one-range form), each way timed on the host. */
static void host_overhead(void) {
    bitnet__gsession *q = (bitnet__gsession *)G_s->gpu;
    const int n = 25;
    int32_t io[2], tok;
    int i, k;
    double t0, t[6], launch = 0;
    io[0] = G_prompt[0], io[1] = PROMPT;
    for (k = 0; k < 6; k++) {
        if (k == 4 && !q->pin) { /* no mapped embedding: no step ahead */
            t[k] = 0;
            continue;
        }
        CHECK(bitnet_gpu_upload(q->gpu, q->io, io, sizeof io));
        CHECK(bitnet_gpu_sync(q->gpu));
        t0 = bitnet__now();
        for (i = 0; i < n; i++) {
            if (k >= 1 && k <= 3) CHECK(bitnet_gpu_upload(q->gpu, q->io, io, sizeof io));
            if (k == 4) { /* bitnet__gpu_next_token's way: the token's download, then the next step, then wait */
                bitnet__CUevent mark;
                double tl;
                CHECK(bitnet__gpu_download_mark(q->gpu, q->pin, q->io, 4, &mark));
                tl = bitnet__now();
                CHECK(bitnet_gpu_graph_launch(q->gpu, q->graph[0][BITNET__ATT_ONE][0]));
                launch += bitnet__now() - tl;
                CHECK(bitnet__gpu_mark_wait(q->gpu, mark));
                continue;
            }
            if (k != 1) CHECK(bitnet_gpu_graph_launch(q->gpu, q->graph[0][BITNET__ATT_ONE][0]));
            if (k <= 2) CHECK(bitnet_gpu_sync(q->gpu));
            else if (k == 3) CHECK(bitnet_gpu_download(q->gpu, &tok, q->io, 4));
        }
        if (k == 5) CHECK(bitnet_gpu_sync(q->gpu));
        t[k] = (bitnet__now() - t0) * 1e6 / n;
    }
    printf("  per token, host wall: graph + sync %.1f us; upload + sync %.1f us; upload + graph + sync %.1f us;\n"
           "    upload + graph + 4-byte download %.1f us; a step ahead (download, graph, wait) %.1f us, %.1f us of it in\n"
           "    the graph launch; graph launches back to back, one sync %.1f us\n",
           t[0], t[1], t[2], t[3], q->pin ? t[4] : 0.0, launch * 1e6 / n, t[5]);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : NULL;
    synth s;
    bitnet_model *c;
    bitnet_model_info info;
    bitnet_session *sc;
    bitnet_session_desc sd;
    bitnet_gpu_device_info di0, di1;
    bitnet_gpu_pool_stats pm, ps;
    bitnet__gmodel *gm;
    bitnet__gsession *gs;
    int32_t gen_dev[GEN], gen_cpu[64], tok;
    const char *isa;
    float *lg, *lc, *lc2;
    double t0, t1, tt[5], worst = 0, tps;
    int i, j, same;
    size_t nv;
    /* other builds of the forward module worth comparing (measured before, all slower on the H100:
       -DBF_GEMV_U=4, 5, 7, 8 (the default until session 5) or 10, -DBF_HEAD_U=5 or 8; every kernel
       pulling the next one's weights into L2); add options here to compare more */
    static const char *builds_default[] = {"-DBF_GEMV_U=8"};
    const char **builds = builds_default, *benv = getenv("BENCH_BUILDS"); /* BENCH_BUILDS="opts|opts|...": these instead */
    int n_builds = 1;
    static const char *bsplit[16];
    static char bbuf[1024];

    if (benv) {
        char *t;
        snprintf(bbuf, sizeof bbuf, "%s", benv);
        n_builds = 0;
        for (t = strtok(bbuf, "|"); t && n_builds < 16; t = strtok(NULL, "|")) bsplit[n_builds++] = t;
        builds = bsplit;
    }
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
    G_m = load(path, &s, BITNET_BACKEND_CUDA);
    printf("GPU model ready in %.2f s (weights uploaded and repacked, modules compiled or read from the cache)\n",
           bitnet__now() - t0);
    bitnet_model_get_info(G_m, &info);
    nv = (size_t)info.n_vocab;
    for (i = 0; i < PREFILL; i++) G_prompt[i] = (int32_t)((1000 + 7919 * (size_t)i) % nv);
    lg = (float *)malloc(nv * PROMPT * sizeof(float));
    lc = (float *)malloc(nv * PROMPT * sizeof(float));
    lc2 = (float *)malloc(nv * PROMPT * sizeof(float));
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = CTX;
    CHECK(bitnet_session_create(G_m, &sd, &G_s));
    gm = (bitnet__gmodel *)G_m->gpu;
    gs = (bitnet__gsession *)G_s->gpu;
    CHECK(bitnet_session_eval(G_s, G_prompt, PROMPT, lg, 0)); /* warm-up: prefill GEMM, graph capture */
    CHECK(bitnet_session_eval(G_s, G_prompt, 1, NULL, 0));

    /* 1. the default build: decode with the argmax on the device, and as bitnet_generate does it */
    tps = decode_tps(gen_dev);
    printf("decode, argmax on the device: %.1f tokens/s (median of 3 runs of %d tokens after a %d-token prompt)\n", tps, GEN,
           PROMPT);
    for (j = 0; j < 3; j++) {
        bitnet_sampler_params sp;
        memset(&sp, 0, sizeof sp);
        bitnet_session_reset(G_s);
        CHECK(bitnet_session_eval(G_s, G_prompt, PROMPT, lg, 0));
        CHECK(bitnet_sample(lg, (int32_t)nv, &sp, NULL, 0, NULL, &tok));
        t0 = bitnet__now();
        for (i = 0; i < GEN; i++) {
            CHECK(bitnet_session_eval(G_s, &tok, 1, lg, 0));
            CHECK(bitnet_sample(lg, (int32_t)nv, &sp, NULL, 0, NULL, &tok));
        }
        tt[j] = bitnet__now() - t0;
    }
    printf("decode, logits to the host and sampled there: %.1f tokens/s\n", GEN / median(tt, 3));
    {
        double tk[2], htps = 0, stps = sampled_tps(tk, &htps);
        printf("decode, sampled as bitnet_generate does it on the GPU (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05): "
               "drawn on the device %.1f tokens/s; from the device's 40 best on the host %.1f tokens/s, a draw %.1f us (kernel, "
               "download, host), the topk kernel alone %.1f us\n", stps, htps, tk[0], tk[1]);
    }
    printf("decode step on the device: %.1f us (graph replays back to back; %d kernels a step)\n", step_us(),
           2 + 5 * info.n_layers);
    kernel_times();
    empty_graph();
    host_overhead();

    /* 2. prefill of 512 tokens (logits of the last) */
    for (j = 0; j < 5; j++) {
        bitnet_session_reset(G_s);
        t0 = bitnet__now();
        CHECK(bitnet_session_eval(G_s, G_prompt, PREFILL, lg, 0));
        tt[j] = bitnet__now() - t0;
    }
    printf("prefill of %d tokens: %.0f tokens/s (median of 5: %.2f ms)\n", PREFILL, PREFILL / median(tt, 5), 1000 * median(tt, 5));
    /* 3. memory with the 4096-token context */
    CHECK(bitnet_gpu_pool_stats_get(gm->gpu, &pm));
    CHECK(bitnet_gpu_pool_stats_get(gs->gpu, &ps));
    CHECK(bitnet_gpu_device_info_get(0, &di1));
    printf("device memory, %d-token context: dense weights %.1f MB + ternary %.1f MB + session %.1f MB (KV cache %.1f MB); "
           "pools: %.1f MB live, peak reserved %.1f MB; the device's used memory grew by %.1f MB since before the model "
           "(context and modules included)\n", CTX, gm->bytes / 1e6, gm->ternary_bytes / 1e6, gs->bytes / 1e6,
           2.0 * info.n_layers * (double)(info.n_kv_heads * info.head_dim) * CTX * 2 / 1e6, (pm.current + ps.current) / 1e6,
           (pm.reserved_peak + ps.reserved_peak) / 1e6, ((double)di0.free_mem - (double)di1.free_mem) / 1e6);
    fflush(stdout);
    if (system("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader") != 0) printf("(nvidia-smi failed)\n");

    /* 4. tuning: other builds of the forward module, then host parameters */
    printf("tuning (each: greedy decode of %d tokens, then 100 graph replays):\n", GEN);
    measure("default build", gen_dev);
    for (i = 0; i < n_builds; i++) {
        use_build(builds[i]);
        measure(builds[i], gen_dev);
        printf("  per kernel, at position %d:\n", PROMPT + 1);
        step_us();
        kernel_times();
        printf("  per kernel, at position 180:\n");
        step_us_at(180);
        kernel_times();
    }
    use_build("");
    set_pdl(0);
    measure("without programmatic dependent launch", gen_dev);
    set_pdl(1);
    measure("with programmatic dependent launch", gen_dev);
    { /* decode attention: over warps in one range up to T positions and in ranges up to W, else the long
         form, ranges of about R in tiles of TILE (att_t, att_w, att_r, att_tile; the library:
         BITNET__GPU_ATT_T, a wave of ranges, BITNET__GPU_ATT_R, _TILE); 0: the default, W -1: no ranges
         over warps, -2: as many as smax allows */
        static const int cfg[][4] = {{64, 0, 0, 0}, {0, 0, 0, -1}, {0, 0, 0, -2}, {0, 16, 0, -1}, {0, 32, 0, -1}, {0, 0, 32, -1}};
        int deft = gs->att_t, defw = gs->att_w, defw2 = gs->att_w2, defr = gs->att_r, defl = gs->att_tile;
        for (j = 0; j < (int)(sizeof cfg / sizeof cfg[0]); j++) {
            char what[96];
            gs->att_t = cfg[j][0] ? cfg[j][0] : deft, gs->att_r = cfg[j][1] ? cfg[j][1] : defr;
            gs->att_tile = cfg[j][2] ? cfg[j][2] : defl;
            gs->att_w = cfg[j][3] == -1 ? 0 : cfg[j][3] == -2 && deft ? BITNET__GPU_ATT_T * gs->smax : defw;
            gs->att_w2 = cfg[j][3] == -1 ? 0 : defw2;
            bitnet__gpu_graphs_free(gs, -1);
            snprintf(what, sizeof what, "attention T %d W %d R %d tile %d", gs->att_t, gs->att_w, gs->att_r, gs->att_tile);
            measure(what, gen_dev);
        }
        gs->att_t = deft, gs->att_w = defw, gs->att_w2 = defw2, gs->att_r = defr, gs->att_tile = defl;
        bitnet__gpu_graphs_free(gs, -1);
        printf("  per kernel, at position 180:\n");
        step_us_at(180);
        kernel_times();
    }
    bitnet__gpu_graphs_free(gs, -1);
    step_us();

    /* 5. the CPU on the same weights, and the CPU's own paths against each other */
    t0 = bitnet__now();
    c = load(path, &s, BITNET_BACKEND_CPU);
    isa = bitnet_isa_name(bitnet_cpu_isa());
    printf("CPU model ready in %.1f s (%d threads, %s)\n", bitnet__now() - t0, bitnet_num_threads(), isa);
    CHECK(bitnet_session_create(c, &sd, &sc));
    bitnet_session_reset(G_s);
    t0 = bitnet__now();
    CHECK(bitnet_session_eval(sc, G_prompt, PROMPT, lc, 1));
    t1 = bitnet__now();
    CHECK(bitnet_session_eval(G_s, G_prompt, PROMPT, lg, 1));
    for (j = 0; j < 2; j++) {
        const float *a = j ? lc2 : lg;
        worst = 0;
        if (j) {
            if (bitnet_cpu_set_isa(BITNET_ISA_AVX2) != BITNET_OK) break;
            bitnet_session_reset(sc);
            CHECK(bitnet_session_eval(sc, G_prompt, PROMPT, lc2, 1));
        }
        for (i = 0; i < PROMPT; i++) {
            double num = 0, den = 0, e;
            size_t k;
            for (k = 0; k < nv; k++) {
                double d = (double)a[i * nv + k] - lc[i * nv + k];
                num += d * d;
                den += (double)lc[i * nv + k] * lc[i * nv + k];
            }
            e = sqrt(num / (den > 0 ? den : 1));
            if (!(e <= worst)) worst = e;
        }
        printf("%s vs CPU (%s): logits of all %d prompt positions, worst relative L2 %.3g (%s 1e-2)\n",
               j ? "CPU (avx2)" : "GPU", isa, PROMPT, worst,
               worst <= 1e-2 ? "within" : "NOT within");
    }
    printf("(CPU prompt of %d tokens with all logits: %.2f s)\n", PROMPT, t1 - t0);
    {
        bitnet_generate_params p;
        bitnet_generate_stats st;
        int32_t never = -1, gen_avx2[64];
        memset(&p, 0, sizeof p);
        p.max_tokens = 64;
        p.stop_tokens = &never;
        p.n_stop = 1;
        bitnet_cpu_set_isa(BITNET_ISA_AUTO);
        bitnet_session_reset(sc);
        CHECK(bitnet_generate(sc, G_prompt, PROMPT, &p, gen_cpu, 64, &st));
        for (i = 0, same = 0; i < 64 && gen_cpu[i] == gen_dev[i]; i++) same++;
        printf("greedy, CPU (%.1f tokens/s) vs GPU: first %d of 64 tokens identical\n", st.n_generated / st.gen_seconds, same);
        if (bitnet_cpu_set_isa(BITNET_ISA_AVX2) == BITNET_OK) {
            bitnet_session_reset(sc);
            CHECK(bitnet_generate(sc, G_prompt, PROMPT, &p, gen_avx2, 64, &st));
            for (i = 0, same = 0; i < 64 && gen_cpu[i] == gen_avx2[i]; i++) same++;
            printf("greedy, CPU default ISA vs CPU avx2: first %d of 64 tokens identical\n", same);
        }
    }
    bitnet_session_free(sc);
    bitnet_model_free(c);
    bitnet_session_free(G_s);
    bitnet_model_free(G_m);
    free(lg);
    free(lc);
    free(lc2);
    for (i = 0; i < s.n; i++) free(s.bufs[i]);
    free(s.bufs);
    return 0;
}
