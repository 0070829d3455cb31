/* A random BitNet model built in memory (bitnet_model_weights), for the GPU-vs-CPU forward test
   and tools/fwd_divergence.c: the same seed gives the same model in both. Needs bitnet.h and
   harness.h (its generator) first. w_lo, w_hi: the range of the ternary tensors' scales. */
#ifndef BITNET_TEST_RMODEL_H
#define BITNET_TEST_RMODEL_H
typedef struct rmodel {
    bitnet_model_weights w;
    bitnet_layer_weights *layers;
    void *bufs[4096];
    int nbufs;
} rmodel;

static void *rmodel_keep(rmodel *r, size_t bytes) {
    void *p = calloc(1, bytes);
    if (p && r->nbufs < 4096) r->bufs[r->nbufs++] = p;
    return p;
}
TEST__UNUSED static float w_lo, w_hi; /* the range of the ternary tensors' scales */
/* Random codes [n][k] in an I2_S [np][kp] (zeros past n and k: an FFN padded to ffn_k) */
static const void *rmodel_ternary_pad(rmodel *r, int n, int k, int np, int kp) {
    size_t bytes = bitnet_i2s_bytes((size_t)np, (size_t)kp), i;
    int8_t *q = (int8_t *)calloc((size_t)np * kp, 1);
    void *dst = rmodel_keep(r, bytes);
    for (i = 0; i < (size_t)n * k; i++) q[i / k * kp + i % k] = (int8_t)test_rand_int(-1, 1);
    bitnet_i2s_pack(q, (size_t)np, (size_t)kp, test_rand_float(w_lo, w_hi), dst, bytes);
    free(q);
    return dst;
}
static const void *rmodel_ternary(rmodel *r, int n, int k) { return rmodel_ternary_pad(r, n, k, n, k); }
static const float *rmodel_norm(rmodel *r, int n) {
    float *p = (float *)rmodel_keep(r, (size_t)n * 4);
    int i;
    for (i = 0; i < n; i++) p[i] = test_rand_float(0.5f, 1.5f);
    return p;
}
static void rmodel_build(rmodel *r, int vocab, int dim, int n_layers, int heads, int kv, int ffn, unsigned long long seed) {
    int l;
    size_t i;
    uint16_t *emb;
    memset(r, 0, sizeof *r);
    test_seed(seed);
    r->w.n_vocab = vocab, r->w.dim = dim, r->w.n_layers = n_layers, r->w.n_heads = heads, r->w.n_kv_heads = kv;
    r->w.ffn_dim = ffn, r->w.n_ctx_train = 512, r->w.rope_theta = 10000.0f, r->w.norm_eps = 1e-5f;
    r->w.bos = 1, r->w.eos = 2, r->w.eot = -1;
    emb = (uint16_t *)rmodel_keep(r, (size_t)vocab * dim * 2);
    for (i = 0; i < (size_t)vocab * dim; i++) emb[i] = bitnet_fp32_to_fp16(test_rand_float(-1.0f, 1.0f));
    r->w.tok_embd = emb;
    r->w.output_norm = rmodel_norm(r, dim);
    r->layers = (bitnet_layer_weights *)rmodel_keep(r, (size_t)n_layers * sizeof *r->layers);
    for (l = 0; l < n_layers; l++) {
        bitnet_layer_weights *L = &r->layers[l];
        int hd = dim / heads;
        L->attn_norm = rmodel_norm(r, dim);
        L->attn_sub_norm = rmodel_norm(r, heads * hd);
        L->ffn_norm = rmodel_norm(r, dim);
        L->ffn_sub_norm = rmodel_norm(r, ffn);
        L->wq = rmodel_ternary(r, heads * hd, dim);
        L->wk = rmodel_ternary(r, kv * hd, dim);
        L->wv = rmodel_ternary(r, kv * hd, dim);
        L->wo = rmodel_ternary(r, dim, heads * hd);
        L->w_gate = rmodel_ternary_pad(r, ffn, dim, (ffn + 127) / 128 * 128, dim);
        L->w_up = rmodel_ternary_pad(r, ffn, dim, (ffn + 127) / 128 * 128, dim);
        L->w_down = rmodel_ternary_pad(r, dim, ffn, dim, (ffn + 127) / 128 * 128);
    }
    r->w.layers = r->layers;
}
TEST__UNUSED static void rmodel_free(rmodel *r) {
    int i;
    for (i = 0; i < r->nbufs; i++) free(r->bufs[i]);
}
#endif
