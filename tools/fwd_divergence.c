/* Where do the CPU and GPU forward passes part? (issues 4 and 6: GPU vs CPU logit differences)
     fwd_divergence hd64 | hd128 | MODEL.gguf [--no-gpu] [--n-pre N] [--n-dec N] [--greedy N]
   hd64 / hd128: tests/test_cuda_forward.c's random models, built the same way (same generator and
   seeds; ternary scale range with --wlo/--whi, default the test's). For the model it reports:
   1. conditioning, CPU only: the CPU forward with float attention against the same forward with
      attention in double (every other op identical), per logit row over the test's schedule (n_pre
      prefill rows, then n_dec decode steps). A model where rounding-level attention differences
      already give large row differences is ill-conditioned: implementations whose float attention
      differs in the last bit part on it. Also the library's attention (double since gpufix)
      against this file's double attention.
   2. GPU op by op, teacher-forced: every GPU kernel of the prefill and decode paths is run alone on
      the GPU's own inputs and checked against the CPU doing that op on the same inputs: ternary
      linears (with their RMSNorm + int8 prologue, residual / gated-activation epilogues) and RoPE + KV store
      must match bit for bit; attention and the head are compared with a double-precision reference,
      beside the CPU's float attention on the same inputs (the ulp-level noise of a correct kernel).
   3. free-running: GPU vs CPU (fp16 head) rows as in the test, GPU vs CPU with double attention,
      and teacher-forced greedy argmaxes (CPU's tokens fed to both; first disagreement and the CPU's
      top-2 gap there): GPU and CPU both with the fp16 head (the model of steps 2 and 3), then both
      with the default int8 head.
   Exit status 1 when the op-by-op check fails (tools/gpu_forward.sh runs it on the test models).
   Built with the implementation (internal steps are called directly):
     cc -O2 -std=c11 -o build/fwd_divergence tools/fwd_divergence.c -lm -ldl -lpthread */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <math.h>

#include "../tests/harness.h" /* its generator: the same models as the test from the same seeds */
#include "../tests/rmodel.h"

static double rel_l2(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        if (!(a[i] == a[i]) || !(ref[i] == ref[i])) return INFINITY;
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
static int argmax(const float *x, size_t n, float *gap) {
    size_t i, b = 0, c = n > 1 ? 1 : 0;
    for (i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    c = b == 0 ? 1 : 0;
    for (i = 0; i < n; i++) if (i != b && x[i] > x[c]) c = i;
    if (gap) *gap = x[b] - x[c];
    return (int)b;
}

/* ---- a CPU forward with a choice of attention: the library's float one, or double ------------- */
static void attn_double_rows(bitnet_session *s, int l, int m) {
    const bitnet_model *md = s->m;
    int hd = md->info.head_dim, nkv = md->info.n_kv_heads, G = md->info.n_heads / nkv, t, h, j, d;
    double scale = 1.0 / sqrt((double)hd);
    double *sc = (double *)malloc((size_t)(s->pos + m) * sizeof(double)), *o = (double *)malloc((size_t)hd * sizeof(double));
    for (t = 0; t < m; t++)
        for (h = 0; h < md->info.n_heads; h++) {
            int kvh = h / G, len = s->pos + t + 1;
            size_t base = ((size_t)l * nkv + kvh) * (size_t)s->n_kv * hd;
            const uint16_t *kc = s->k_cache + base, *vc = s->v_cache + base;
            const float *qh = s->q + (size_t)t * md->q_dim + (size_t)h * hd;
            double mx = -INFINITY, sum = 0;
            for (j = 0; j < len; j++) {
                double a = 0;
                for (d = 0; d < hd; d++) a += (double)qh[d] * (double)bitnet_fp16_to_fp32(kc[(size_t)(j / 16) * hd * 16 + (size_t)d * 16 + j % 16]);
                sc[j] = a * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            for (d = 0; d < hd; d++) o[d] = 0;
            for (j = 0; j < len; j++) {
                double p = exp(sc[j] - mx);
                sum += p;
                for (d = 0; d < hd; d++) o[d] += p * (double)bitnet_fp16_to_fp32(vc[(size_t)j * hd + d]);
            }
            for (d = 0; d < hd; d++) s->xb[(size_t)t * md->q_dim + (size_t)h * hd + d] = (float)(o[d] / sum);
        }
    free(sc);
    free(o);
}
/* Attention in float, sums in the order of the library's reference before it moved to double:
   the arithmetic that CPU and GPU used to differ by. */
static void attn_float_rows(bitnet_session *s, int l, int m) {
    const bitnet_model *md = s->m;
    int hd = md->info.head_dim, nkv = md->info.n_kv_heads, G = md->info.n_heads / nkv, t, h, j, d;
    float scale = 1.0f / sqrtf((float)hd);
    float *sc = (float *)malloc((size_t)(s->pos + m) * sizeof(float)), *o = (float *)malloc((size_t)hd * sizeof(float));
    for (t = 0; t < m; t++)
        for (h = 0; h < md->info.n_heads; h++) {
            int kvh = h / G, len = s->pos + t + 1;
            size_t base = ((size_t)l * nkv + kvh) * (size_t)s->n_kv * hd;
            const uint16_t *kc = s->k_cache + base, *vc = s->v_cache + base;
            const float *qh = s->q + (size_t)t * md->q_dim + (size_t)h * hd;
            float mx = -INFINITY, sum = 0;
            for (j = 0; j < len; j++) {
                float a = 0;
                for (d = 0; d < hd; d++) a += qh[d] * bitnet_fp16_to_fp32(kc[(size_t)(j / 16) * hd * 16 + (size_t)d * 16 + j % 16]);
                sc[j] = a * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            for (d = 0; d < hd; d++) o[d] = 0;
            for (j = 0; j < len; j++) {
                float p = expf(sc[j] - mx);
                sum += p;
                for (d = 0; d < hd; d++) o[d] += p * bitnet_fp16_to_fp32(vc[(size_t)j * hd + d]);
            }
            for (d = 0; d < hd; d++) s->xb[(size_t)t * md->q_dim + (size_t)h * hd + d] = o[d] / sum;
        }
    free(sc);
    free(o);
}
/* bitnet__cpu_forward, every row computed, attention: 0 the library's, 1 this file's double, 2 float */
static bitnet_result cpu_fwd(bitnet_session *s, const int32_t *tokens, int m, float *logits, int all, int dbl) {
    const bitnet_model *md = s->m;
    int l, dim = md->info.dim, qd = md->q_dim, kvd = md->kv_dim, ff = md->info.ffn_dim;
    bitnet__cpu_embed(s, tokens, m);
    for (l = 0; l < md->info.n_layers; l++) {
        const bitnet__layer *L = &md->layers[l];
        bitnet__cpu_norm_quant(s, s->x, L->attn_norm, m, dim);
        BITNET__TRY(bitnet__cpu_linear(s, L->wq, qd, dim, m, s->q));
        BITNET__TRY(bitnet__cpu_linear(s, L->wk, kvd, dim, m, s->k));
        BITNET__TRY(bitnet__cpu_linear(s, L->wv, kvd, dim, m, s->v));
        bitnet__cpu_rope(s, m);
        bitnet__cpu_kv_store(s, l, m);
        if (dbl == 1) attn_double_rows(s, l, m);
        else if (dbl == 2) attn_float_rows(s, l, m);
        else bitnet__cpu_attention(s, l, 0, m);
        bitnet__cpu_norm_quant(s, s->xb, L->attn_sub_norm, m, qd);
        BITNET__TRY(bitnet__cpu_linear(s, L->wo, dim, qd, m, s->xb));
        bitnet__cpu_add_norm_quant(s, s->x, s->xb, L->ffn_norm, m, dim);
        BITNET__TRY(bitnet__cpu_linear(s, L->w_gate, ff, dim, m, s->hg));
        BITNET__TRY(bitnet__cpu_linear(s, L->w_up, ff, dim, m, s->hu));
        bitnet__cpu_glu_norm_quant(s, s->hg, s->hu, L->ffn_sub_norm, m, ff);
        BITNET__TRY(bitnet__cpu_linear(s, L->w_down, dim, ff, m, s->xb));
        bitnet__cpu_add(s->x, s->xb, m, dim);
    }
    if (logits) {
        if (all) BITNET__TRY(bitnet__cpu_head(s, s->x, m, logits));
        else BITNET__TRY(bitnet__cpu_head(s, s->x + (size_t)(m - 1) * dim, 1, logits));
    }
    s->pos += m;
    return BITNET_OK;
}

/* one evaluation: mode 0 the public API (whatever backend), 1 cpu_fwd with the library's
   attention, 2 with this file's double attention, 3 with float attention */
static bitnet_result eval(bitnet_session *s, int mode, const int32_t *t, int m, float *logits, int all) {
    if (mode == 0) return bitnet_session_eval(s, t, (size_t)m, logits, all);
    return cpu_fwd(s, t, m, logits, all, mode == 1 ? 0 : mode == 2 ? 1 : 2);
}

typedef struct rowstat { int n, over1e2, over1e3; double worst, median; int worst_row; } rowstat;
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static rowstat rows_of(double *e, int n) {
    rowstat r;
    int i;
    memset(&r, 0, sizeof r);
    r.n = n;
    for (i = 0; i < n; i++) {
        if (e[i] > 1e-2) r.over1e2++;
        if (e[i] > 1e-3) r.over1e3++;
        if (e[i] > r.worst || i == 0) r.worst = e[i], r.worst_row = i;
    }
    qsort(e, (size_t)n, sizeof *e, cmpd);
    r.median = n ? e[n / 2] : 0;
    return r;
}
static void print_rows(const char *what, rowstat r) {
    printf("  %-44s rows %3d: >1e-3 %3d, >1e-2 %3d, worst %.3g (row %d), median %.2g\n", what, r.n, r.over1e3, r.over1e2,
           r.worst, r.worst_row, r.median);
}

/* The test's schedule on two sessions (a: mode ma, b: mode mb; b is the reference). */
static void compare_sched(bitnet_model *A, int ma, bitnet_model *B, int mb, int n_pre, int n_dec, const char *what) {
    bitnet_session *sa = NULL, *sb = NULL;
    bitnet_session_desc sd;
    size_t nv = (size_t)A->info.n_vocab;
    int n = n_pre + n_dec, i;
    int32_t *tok = (int32_t *)malloc((size_t)n * 4);
    float *la = (float *)malloc((size_t)n_pre * nv * 4), *lb = (float *)malloc((size_t)n_pre * nv * 4);
    double *e = (double *)malloc((size_t)n * sizeof(double));
    char name[160];
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = n + 8;
    if (bitnet_session_create(A, &sd, &sa) != BITNET_OK || bitnet_session_create(B, &sd, &sb) != BITNET_OK) {
        printf("  %s: session: %s\n", what, bitnet_last_error());
        goto done;
    }
    for (i = 0; i < n; i++) tok[i] = (int32_t)((7 + 131 * (size_t)i * i) % nv);
    if (eval(sa, ma, tok, n_pre, la, 1) || eval(sb, mb, tok, n_pre, lb, 1)) { printf("  eval: %s\n", bitnet_last_error()); goto done; }
    for (i = 0; i < n_pre; i++) e[i] = rel_l2(la + (size_t)i * nv, lb + (size_t)i * nv, nv);
    snprintf(name, sizeof name, "%s prefill", what);
    print_rows(name, rows_of(e, n_pre));
    for (i = n_pre; i < n; i++) {
        if (eval(sa, ma, tok + i, 1, la, 0) || eval(sb, mb, tok + i, 1, lb, 0)) { printf("  eval: %s\n", bitnet_last_error()); goto done; }
        e[i - n_pre] = rel_l2(la, lb, nv);
        if (e[i - n_pre] > 1e-2) printf("    %s decode row %d (pos %d): %.3g\n", what, i - n_pre, i, e[i - n_pre]);
    }
    snprintf(name, sizeof name, "%s decode", what);
    if (n_dec) print_rows(name, rows_of(e, n_dec));
done:
    bitnet_session_free(sa);
    bitnet_session_free(sb);
    free(tok);
    free(la);
    free(lb);
    free(e);
}

/* Teacher-forced greedy: a prompt, then n steps; both get B's argmax as the next token. */
static void greedy_tf(bitnet_model *A, int ma, bitnet_model *B, int mb, int n_prompt, int n, const char *what) {
    bitnet_session *sa = NULL, *sb = NULL;
    bitnet_session_desc sd;
    size_t nv = (size_t)A->info.n_vocab;
    int i, first = -1, diff = 0;
    int32_t *tok = (int32_t *)malloc((size_t)(n_prompt + n) * 4);
    float *la = (float *)malloc(nv * 4), *lb = (float *)malloc(nv * 4), gap = 0, gap0 = 0;
    double worst = 0, e;
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = n_prompt + n + 8;
    if (bitnet_session_create(A, &sd, &sa) != BITNET_OK || bitnet_session_create(B, &sd, &sb) != BITNET_OK) {
        printf("  %s: session: %s\n", what, bitnet_last_error());
        goto done;
    }
    for (i = 0; i < n_prompt; i++) tok[i] = (int32_t)((7 + 131 * (size_t)i * i) % nv);
    if (eval(sa, ma, tok, n_prompt, la, 0) || eval(sb, mb, tok, n_prompt, lb, 0)) { printf("  eval: %s\n", bitnet_last_error()); goto done; }
    for (i = 0; i < n; i++) {
        int ta = argmax(la, nv, NULL), tb = argmax(lb, nv, &gap);
        e = rel_l2(la, lb, nv);
        worst = e > worst ? e : worst;
        if (ta != tb) {
            diff++;
            if (first < 0) first = i, gap0 = gap;
        }
        tok[n_prompt + i] = tb;
        if (i + 1 < n && (eval(sa, ma, &tok[n_prompt + i], 1, la, 0) || eval(sb, mb, &tok[n_prompt + i], 1, lb, 0))) {
            printf("  eval: %s\n", bitnet_last_error());
            goto done;
        }
    }
    printf("  %-44s greedy %d steps (prompt %d): %d differ, first at %d (ref top-2 gap there %.3g), worst logit rel L2 %.3g\n",
           what, n, n_prompt, diff, first, (double)gap0, worst);
done:
    bitnet_session_free(sa);
    bitnet_session_free(sb);
    free(tok);
    free(la);
    free(lb);
}

#if defined(BITNET__GPU_FORWARD)
/* ---- GPU op by op ---------------------------------------------------------------------------- */
typedef struct opstat { const char *name; long calls, elems, mismatch; double worst; double cpu_worst; } opstat;
static opstat st_embed = {"embed", 0, 0, 0, 0, 0}, st_lin = {"ternary linear (norm+int8 prologue)", 0, 0, 0, 0, 0},
              st_rope = {"rope + kv store (fp16)", 0, 0, 0, 0, 0}, st_attn = {"attention vs double", 0, 0, 0, 0, 0},
              st_head = {"head (fp16) vs CPU fp16 head", 0, 0, 0, 0, 0};
static const char *cur_path = "";
static int cur_layer = 0, cur_pos = 0, reported = 0, op_fail = 0;

static void dl(bitnet_session *s, void *dst, bitnet_devptr src, size_t bytes) {
    bitnet__gsession *q = (bitnet__gsession *)s->gpu;
    if (bitnet_gpu_download(q->gpu, dst, src, bytes) != BITNET_OK) { printf("download: %s\n", bitnet_last_error()); exit(1); }
}
static void mism(opstat *o, const float *got, const float *want, size_t n, const char *what) {
    size_t i, bad = 0;
    double w = 0;
    for (i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]) / (fabs((double)want[i]) + 1e-30);
        if (memcmp(&got[i], &want[i], 4)) {
            bad++;
            if (reported < 12) {
                printf("    MISMATCH %s %s layer %d pos %d elem %zu: gpu %.9g cpu %.9g\n", cur_path, what, cur_layer, cur_pos, i,
                       (double)got[i], (double)want[i]);
                reported++;
            }
        }
        if (d > w) w = d;
    }
    o->calls++, o->elems += (long)n, o->mismatch += (long)bad;
    if (w > o->worst) o->worst = w;
}

/* CPU version of one fused linear on m rows of X (k wide): parts (1..3) concatenated (store),
   res (R + y), or glu (act(gate) * up) */
enum { L_STORE, L_RES, L_GLU };
static void cpu_linear(const bitnet_model *md, const float *X, int m, int k, const float *nw, const void *const *w,
                       const int *n, int np, int mode, const float *R, float *out) {
    int8_t *a = (int8_t *)malloc((size_t)k);
    int nt = 0, p, t, i;
    float sc;
    int32_t sum;
    float *y;
    for (p = 0; p < np; p++) nt += n[p];
    y = (float *)malloc((size_t)nt * 4);
    for (t = 0; t < m; t++) {
        int off = 0;
        bitnet__rmsnorm_quantize(X + (size_t)t * k, nw, (size_t)k, md->info.norm_eps, a, &sc, &sum);
        for (p = 0; p < np; p++) {
            bitnet_gemm_i2s(w[p], bitnet_i2s_bytes((size_t)n[p], (size_t)k), (size_t)n[p], (size_t)k, a, &sc, &sum, 1, y + off);
            off += n[p];
        }
        if (mode == L_STORE) memcpy(out + (size_t)t * nt, y, (size_t)nt * 4);
        else if (mode == L_RES)
            for (i = 0; i < nt; i++) out[(size_t)t * nt + i] = R[(size_t)t * nt + i] + y[i];
        else
            for (i = 0; i < n[0]; i++) out[(size_t)t * n[0] + i] = bitnet_glu(md->info.ffn_act, y[i], y[n[0] + i]);
    }
    free(a);
    free(y);
}

/* Attention of m rows at positions pos0.. with the GPU's rotated queries Q (row stride ldq) and its
   fp16 caches (this layer: [n_kv][n_ctx][hd]); GPU output ATT [m][q_dim]. Also the CPU's float
   attention on the same inputs, against the same double reference. */
static void check_attn(bitnet_session *s, const float *Q, size_t ldq, const uint16_t *KC, const uint16_t *VC, int pos0, int m,
                       const float *ATT) {
    const bitnet_model *md = s->m;
    int hd = md->info.head_dim, nkv = md->info.n_kv_heads, G = md->info.n_heads / nkv, nctx = s->n_ctx, t, h, j, d;
    int len_max = pos0 + m, ntile = (len_max + 15) / 16;
    uint16_t *tiles = (uint16_t *)calloc((size_t)ntile * 16 * hd, 2);
    double *sc = (double *)malloc((size_t)len_max * sizeof(double)), *o = (double *)malloc((size_t)hd * sizeof(double));
    float *cpu = (float *)malloc((size_t)G * hd * 4);
    for (h = 0; h < md->info.n_heads; h++) {
        int kvh = h / G;
        const uint16_t *kb = KC + (size_t)kvh * nctx * hd, *vb = VC + (size_t)kvh * nctx * hd;
        memset(tiles, 0, (size_t)ntile * 16 * hd * 2);
        for (j = 0; j < len_max; j++)
            for (d = 0; d < hd; d++) tiles[(size_t)(j / 16) * hd * 16 + (size_t)d * 16 + j % 16] = kb[(size_t)j * hd + d];
        for (t = 0; t < m; t++) {
            int len = pos0 + t + 1;
            const float *qh = Q + (size_t)t * ldq + (size_t)h * hd;
            const float *gh = ATT + (size_t)t * md->q_dim + (size_t)h * hd;
            double mx = -INFINITY, sum = 0, num = 0, den = 0, numc = 0;
            for (j = 0; j < len; j++) {
                double a = 0;
                for (d = 0; d < hd; d++) a += (double)qh[d] * (double)bitnet_fp16_to_fp32(kb[(size_t)j * hd + d]);
                sc[j] = a / sqrt((double)hd);
                if (sc[j] > mx) mx = sc[j];
            }
            for (d = 0; d < hd; d++) o[d] = 0;
            for (j = 0; j < len; j++) {
                double p = exp(sc[j] - mx);
                sum += p;
                for (d = 0; d < hd; d++) o[d] += p * (double)bitnet_fp16_to_fp32(vb[(size_t)j * hd + d]);
            }
            if (h % G == 0 || 1) /* the CPU's float attention for this one head */
                bitnet__attn_row_ref(qh, 1, tiles, vb, len, hd, cpu);
            for (d = 0; d < hd; d++) {
                double r = o[d] / sum;
                num += (gh[d] - r) * (gh[d] - r), den += r * r, numc += (cpu[d] - r) * (cpu[d] - r);
            }
            {
                double e = sqrt(num / den), ec = sqrt(numc / den);
                st_attn.calls++, st_attn.elems += hd;
                if (!(e <= st_attn.worst)) st_attn.worst = e;
                if (ec > st_attn.cpu_worst) st_attn.cpu_worst = ec;
                if (!(e <= 1e-4) && reported < 12) {
                    printf("    ATTENTION %s layer %d pos %d head %d: gpu rel err %.3g (cpu float %.3g)\n", cur_path, cur_layer,
                           pos0 + t, h, e, ec);
                    reported++;
                }
            }
        }
    }
    free(tiles);
    free(sc);
    free(o);
    free(cpu);
}

/* rotated q (m rows, stride ldq, the CPU's float ops), and the rotated k and v of these rows as
   fp16: checks the caches' rows pos0.. */
static void check_rope(bitnet_session *s, const float *QKV, size_t ldq, int pos0, int m, const float *Qgpu, size_t ldg,
                       const uint16_t *KC, const uint16_t *VC) {
    const bitnet_model *md = s->m;
    int hd = md->info.head_dim, nkv = md->info.n_kv_heads, t, h, d;
    float *row = (float *)malloc((size_t)hd * 4), *hv = (float *)malloc((size_t)hd * 4), *kv = (float *)malloc((size_t)hd * 4);
    for (t = 0; t < m; t++) {
        const float *cs = s->rope + (size_t)(pos0 + t) * hd;
        cur_pos = pos0 + t;
        if (Qgpu)
            for (h = 0; h < md->info.n_heads; h++) {
                memcpy(row, QKV + (size_t)t * ldq + (size_t)h * hd, (size_t)hd * 4);
                bitnet__rope_head(row, cs, hd / 2);
                mism(&st_rope, Qgpu + (size_t)t * ldg + (size_t)h * hd, row, (size_t)hd, "q rotated");
            }
        for (h = 0; h < nkv; h++) {
            memcpy(row, QKV + (size_t)t * ldq + md->q_dim + (size_t)h * hd, (size_t)hd * 4);
            bitnet__rope_head(row, cs, hd / 2);
            for (d = 0; d < hd; d++) {
                row[d] = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(row[d]));
                kv[d] = bitnet_fp16_to_fp32(KC[((size_t)h * s->n_ctx + pos0 + t) * hd + d]);
                hv[d] = bitnet_fp16_to_fp32(bitnet_fp32_to_fp16(QKV[(size_t)t * ldq + md->q_dim + md->kv_dim + (size_t)h * hd + d]));
            }
            mism(&st_rope, kv, row, (size_t)hd, "k cache");
            for (d = 0; d < hd; d++) kv[d] = bitnet_fp16_to_fp32(VC[((size_t)h * s->n_ctx + pos0 + t) * hd + d]);
            mism(&st_rope, kv, hv, (size_t)hd, "v cache");
        }
    }
    free(row);
    free(hv);
    free(kv);
}

static void check_head(bitnet_session *s, const float *X, const float *logits) {
    const bitnet_model *md = s->m;
    size_t nv = (size_t)md->info.n_vocab;
    float *xn = (float *)malloc((size_t)md->info.dim * 4), *ref = (float *)malloc(nv * 4);
    double e;
    bitnet_rmsnorm(X, md->output_norm, 1, (size_t)md->info.dim, md->info.norm_eps, xn);
    bitnet__gemv_f16(md->head_f16, nv, (size_t)md->info.dim, xn, ref);
    e = rel_l2(logits, ref, nv);
    st_head.calls++, st_head.elems += (long)nv;
    if (e > st_head.worst) st_head.worst = e;
    free(xn);
    free(ref);
}

/* Both GPU paths over the test's schedule, every kernel checked on its own inputs. The model
   `gm` is the CUDA one; its host weight pointers (m->layers) are still valid for the CPU ops. */
static void gpu_ops(bitnet_model *gm, int n_pre, int n_dec) {
    const bitnet_model_info *in = &gm->info;
    bitnet__gmodel *g = (bitnet__gmodel *)gm->gpu;
    bitnet_session *s = NULL;
    bitnet_session_desc sd;
    bitnet__gsession *q;
    int dim = in->dim, qd = gm->q_dim, kvd = gm->kv_dim, ff = in->ffn_dim, hd = in->head_dim, nkv = in->n_kv_heads;
    int n = n_pre + n_dec, M = n_pre > 1 ? n_pre : 1, l, t, i;
    size_t ldq = (size_t)(qd + 2 * kvd), nv = (size_t)in->n_vocab;
    int32_t *tok = (int32_t *)malloc((size_t)n * 4);
    float *X, *X2, *QKV, *Q2, *ATT, *H, *want, *lg;
    uint16_t *KC, *VC;
    if (g->hd != hd || g->ffn_k != ff) { /* (its CPU ops read the device's buffers in the model's layout) */
        printf("  op check: not for padded heads or FFN (>>pad)\n");
        free(tok);
        return;
    }
    memset(&sd, 0, sizeof sd);
    sd.n_ctx = n + 8;
    if (bitnet_session_create(gm, &sd, &s) != BITNET_OK) { printf("  gpu session: %s\n", bitnet_last_error()); return; }
    q = (bitnet__gsession *)s->gpu;
    for (i = 0; i < n; i++) tok[i] = (int32_t)((7 + 131 * (size_t)i * i) % nv);
    X = (float *)malloc((size_t)M * dim * 4), X2 = (float *)malloc((size_t)M * dim * 4);
    QKV = (float *)malloc((size_t)M * ldq * 4), Q2 = (float *)malloc((size_t)M * ldq * 4), ATT = (float *)malloc((size_t)M * qd * 4);
    H = (float *)malloc((size_t)M * ff * 4);
    want = (float *)malloc((size_t)M * (size_t)BITNET__MAX(BITNET__MAX(dim, (int)ldq), ff) * 4);
    lg = (float *)malloc(nv * 4);
    KC = (uint16_t *)malloc((size_t)nkv * s->n_ctx * hd * 2), VC = (uint16_t *)malloc((size_t)nkv * s->n_ctx * hd * 2);
#define GPU(x) do { if ((x) != BITNET_OK) { printf("  gpu: %s\n", bitnet_last_error()); goto done; } } while (0)
    /* prefill (the GEMM path): n_pre tokens at 0 */
    if (n_pre >= 2 && g->cc >= 80) {
        int m = n_pre;
        cur_path = "prefill";
        GPU(bitnet__gpu_put_tokens(s, tok, m, 0, 1)); /* io and the m embedding rows */
        GPU(bitnet__gpu_embed(s, q->erow, q->iota, m));
        for (l = 0; l < in->n_layers; l++) {
            const bitnet__glayer *L = &g->layers[l];
            const bitnet__layer *W = &gm->layers[l];
            size_t layer = (size_t)l * kvd * s->n_ctx * 2;
            const void *w3[3];
            int n3[3];
            cur_layer = l, cur_pos = 0;
            dl(s, X, q->x, (size_t)m * dim * 4);
            GPU(bitnet__gpu_norm_quant(s, q->x, L->attn_norm, m, s->m->info.dim, &q->a_dim));
            GPU(bitnet__gpu_linear_m(s, &L->qkv, &q->a_dim, q->qkv, 0));
            dl(s, QKV, q->qkv, (size_t)m * ldq * 4);
            w3[0] = W->wq, w3[1] = W->wk, w3[2] = W->wv, n3[0] = qd, n3[1] = kvd, n3[2] = kvd;
            cpu_linear(gm, X, m, dim, W->attn_norm, w3, n3, 3, L_STORE, NULL, want);
            mism(&st_lin, QKV, want, (size_t)m * ldq, "qkv");
            GPU(bitnet__gpu_rope_kv(s, l, m));
            dl(s, Q2, q->qkv, (size_t)m * ldq * 4);
            dl(s, KC, q->kc + layer, (size_t)nkv * s->n_ctx * hd * 2);
            dl(s, VC, q->vc + layer, (size_t)nkv * s->n_ctx * hd * 2);
            check_rope(s, QKV, ldq, 0, m, Q2, ldq, KC, VC);
            GPU(bitnet__gpu_attention_m(s, l, m, 0));
            dl(s, ATT, q->att, (size_t)m * qd * 4);
            check_attn(s, Q2, ldq, KC, VC, 0, m, ATT);
            GPU(bitnet__gpu_norm_quant(s, q->att, L->attn_sub_norm, m, s->m->q_dim, &q->a_q));
            GPU(bitnet__gpu_linear_m(s, &L->o, &q->a_q, q->x, q->x));
            dl(s, X2, q->x, (size_t)m * dim * 4);
            w3[0] = W->wo, n3[0] = dim;
            cpu_linear(gm, ATT, m, qd, W->attn_sub_norm, w3, n3, 1, L_RES, X, want);
            mism(&st_lin, X2, want, (size_t)m * dim, "o + residual");
            GPU(bitnet__gpu_norm_quant(s, q->x, L->ffn_norm, m, s->m->info.dim, &q->a_dim));
            GPU(bitnet__gpu_linear_m(s, &L->gu, &q->a_dim, q->h, 0));
            dl(s, H, q->h, (size_t)m * ff * 4);
            w3[0] = W->w_gate, w3[1] = W->w_up, n3[0] = n3[1] = ff;
            cpu_linear(gm, X2, m, dim, W->ffn_norm, w3, n3, 2, L_GLU, NULL, want);
            mism(&st_lin, H, want, (size_t)m * ff, "act(gate) * up");
            GPU(bitnet__gpu_norm_quant(s, q->h, L->ffn_sub_norm, m, s->m->info.ffn_dim, &q->a_ff));
            GPU(bitnet__gpu_linear_m(s, &L->down, &q->a_ff, q->x, q->x));
            dl(s, X, q->x, (size_t)m * dim * 4);
            w3[0] = W->w_down, n3[0] = dim;
            cpu_linear(gm, H, m, ff, W->ffn_sub_norm, w3, n3, 1, L_RES, X2, want);
            mism(&st_lin, X, want, (size_t)m * dim, "down + residual");
        }
        for (t = 0; t < m; t++) {
            GPU(bitnet__gpu_head(s, q->x + (bitnet_devptr)((size_t)t * dim * 4), 0));
            dl(s, lg, q->logits, nv * 4);
            check_head(s, X + (size_t)t * dim, lg);
        }
        s->pos = m;
    } else {
        n_dec += n_pre; /* everything through the decode kernels */
    }
    /* decode: each token through the decode kernels, launched one by one */
    cur_path = "decode";
    for (t = s->pos; t < s->pos + n_dec && t < n; t++) {
        cur_pos = t;
        GPU(bitnet__gpu_put_tokens(s, tok + t, 1, t, 1));
        GPU(bitnet__gpu_embed(s, q->erow, q->iota, 1));
        bitnet__gpu_att_form(q, t); /* the attention's form at this position, as a step's graph has it */
        dl(s, X, q->x, (size_t)dim * 4);
        {
            float *e = (float *)malloc((size_t)dim * 4);
            bitnet__emb_row(gm, tok[t], e, NULL);
            mism(&st_embed, X, e, (size_t)dim, "embed");
            free(e);
        }
        for (l = 0; l < in->n_layers; l++) {
            const bitnet__glayer *L = &g->layers[l];
            const bitnet__layer *W = &gm->layers[l];
            size_t layer = (size_t)l * kvd * s->n_ctx * 2;
            const void *w3[3];
            int n3[3];
            cur_layer = l;
            dl(s, X, q->x, (size_t)dim * 4);
            GPU(bitnet__gpu_linear(s, g->gemv_store, &L->qkv, q->x, L->attn_norm, s->m->info.dim, q->qkv));
            dl(s, QKV, q->qkv, ldq * 4);
            w3[0] = W->wq, w3[1] = W->wk, w3[2] = W->wv, n3[0] = qd, n3[1] = kvd, n3[2] = kvd;
            cpu_linear(gm, X, 1, dim, W->attn_norm, w3, n3, 3, L_STORE, NULL, want);
            mism(&st_lin, QKV, want, ldq, "qkv (gemv)");
            GPU(bitnet__gpu_attention(s, l));
            dl(s, ATT, q->att, (size_t)qd * 4);
            dl(s, KC, q->kc + layer, (size_t)nkv * s->n_ctx * hd * 2);
            dl(s, VC, q->vc + layer, (size_t)nkv * s->n_ctx * hd * 2);
            check_rope(s, QKV, ldq, t, 1, NULL, 0, KC, VC);
            memcpy(Q2, QKV, ldq * 4); /* the kernel rotates q internally: the CPU's rotation stands in */
            for (i = 0; i < in->n_heads; i++) bitnet__rope_head(Q2 + (size_t)i * hd, s->rope + (size_t)t * hd, hd / 2);
            check_attn(s, Q2, ldq, KC, VC, t, 1, ATT);
            GPU(bitnet__gpu_linear(s, g->gemv_sub, &L->o, q->att, L->attn_sub_norm, s->m->q_dim, q->x));
            dl(s, X2, q->x, (size_t)dim * 4);
            w3[0] = W->wo, n3[0] = dim;
            cpu_linear(gm, ATT, 1, qd, W->attn_sub_norm, w3, n3, 1, L_RES, X, want);
            mism(&st_lin, X2, want, (size_t)dim, "o + residual (gemv)");
            GPU(bitnet__gpu_linear(s, g->gemv_glu, &L->gu, q->x, L->ffn_norm, s->m->info.dim, q->h));
            dl(s, H, q->h, (size_t)ff * 4);
            w3[0] = W->w_gate, w3[1] = W->w_up, n3[0] = n3[1] = ff;
            cpu_linear(gm, X2, 1, dim, W->ffn_norm, w3, n3, 2, L_GLU, NULL, want);
            mism(&st_lin, H, want, (size_t)ff, "act(gate) * up (gemv)");
            GPU(bitnet__gpu_linear(s, g->gemv_sub, &L->down, q->h, L->ffn_sub_norm, s->m->info.ffn_dim, q->x));
            dl(s, X, q->x, (size_t)dim * 4);
            w3[0] = W->w_down, n3[0] = dim;
            cpu_linear(gm, H, 1, ff, W->ffn_sub_norm, w3, n3, 1, L_RES, X2, want);
            mism(&st_lin, X, want, (size_t)dim, "down + residual (gemv)");
        }
        GPU(bitnet__gpu_head(s, q->x, 1));
        dl(s, lg, q->logits, nv * 4);
        check_head(s, X, lg);
    }
#undef GPU
done:
    {
        opstat *all[5];
        all[0] = &st_embed, all[1] = &st_lin, all[2] = &st_rope, all[3] = &st_attn, all[4] = &st_head;
        for (i = 0; i < 5; i++)
            if (all[i] == &st_attn)
                printf("  %-40s rows %ld: worst GPU rel L2 %.3g; the CPU's attention on the same inputs: worst %.3g\n",
                       all[i]->name, all[i]->calls, all[i]->worst, all[i]->cpu_worst);
            else if (all[i] == &st_head)
                printf("  %-40s rows %ld: worst rel L2 %.3g\n", all[i]->name, all[i]->calls, all[i]->worst);
            else
                printf("  %-40s calls %ld, elements %ld, bit mismatches %ld (worst rel %.3g)\n", all[i]->name, all[i]->calls,
                       all[i]->elems, all[i]->mismatch, all[i]->worst);
    }
    op_fail = st_embed.mismatch || st_lin.mismatch || st_rope.mismatch || !(st_head.worst <= 1e-5) || !st_lin.calls ||
              !(st_attn.worst <= 1e-5 || st_attn.worst <= 10 * st_attn.cpu_worst);
    printf("  op check: %s (linears, RoPE and the cache bit for bit; attention within 10x the CPU's float error "
           "or 1e-5 of double; head within 1e-5)\n", op_fail ? "FAIL" : "PASS");
    bitnet_session_free(s);
    free(tok), free(X), free(X2), free(QKV), free(Q2), free(ATT), free(H), free(want), free(lg), free(KC), free(VC);
}
#endif

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "hd64";
    int no_gpu = 0, n_pre = 100, n_dec = 60, n_greedy = 64, n_prompt = 5, i;
    rmodel r;
    bitnet_model *cpu16 = NULL, *cpu8 = NULL, *gpu = NULL, *gpu8 = NULL;
    bitnet_model_desc d;
    bitnet_model_weights *w = NULL;
    w_lo = -1;
    for (i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--no-gpu")) no_gpu = 1;
        else if (!strcmp(argv[i], "--n-pre") && i + 1 < argc) n_pre = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n-dec") && i + 1 < argc) n_dec = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--greedy") && i + 1 < argc) n_greedy = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prompt") && i + 1 < argc) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--wlo") && i + 1 < argc) w_lo = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--whi") && i + 1 < argc) w_hi = (float)atof(argv[++i]);
    }
    memset(&d, 0, sizeof d);
    if (!strcmp(what, "hd64") || !strcmp(what, "hd128")) {
        int h64 = !strcmp(what, "hd64");
        if (w_lo < 0) w_lo = h64 ? 0.3f : 0.05f, w_hi = h64 ? 1.5f : 0.15f;
        if (h64) rmodel_build(&r, 1000, 256, 3, 4, 2, 384, 12);
        else rmodel_build(&r, 777, 512, 1, 4, 1, 640, 11);
        w = &r.w;
        printf("model %s: ternary scales in [%g, %g]\n", what, (double)w_lo, (double)w_hi);
    } else {
        d.path = what;
        printf("model %s\n", what);
    }
#define LOAD(dst, be, f16) do { d.backend = be; d.head_f16 = f16; \
        if ((w ? bitnet_model_from_weights(w, &d, &dst) : bitnet_model_load(&d, &dst)) != BITNET_OK) \
            printf("load (%s): %s\n", #dst, bitnet_last_error()); } while (0)
    LOAD(cpu16, BITNET_BACKEND_CPU, 1);
    if (!cpu16) return 1;
    printf("shape: vocab %d dim %d layers %d heads %d/%d head_dim %d ffn %d; CPU ISA %s\n", cpu16->info.n_vocab, cpu16->info.dim,
           cpu16->info.n_layers, cpu16->info.n_heads, cpu16->info.n_kv_heads, cpu16->info.head_dim, cpu16->info.ffn_dim,
           bitnet_isa_name(bitnet_cpu_isa()));
    printf("1. conditioning (CPU float attention vs CPU double attention, everything else identical)\n");
    compare_sched(cpu16, 3, cpu16, 2, n_pre, n_dec, "cpu-float vs cpu-double");
    greedy_tf(cpu16, 3, cpu16, 2, n_prompt, n_greedy, "cpu-float vs cpu-double");
    compare_sched(cpu16, 1, cpu16, 2, n_pre, n_dec, "library cpu attention vs cpu-double");
    compare_sched(cpu16, 0, cpu16, 1, n_pre, n_dec, "library cpu vs cpu_fwd (sanity, expect 0)");
    if (!no_gpu) LOAD(gpu, BITNET_BACKEND_CUDA, 1); /* the fp16 head, as the CPU reference's */
    if (gpu) {
#if defined(BITNET__GPU_FORWARD)
        printf("2. GPU op by op, teacher-forced (prefill %d rows, then decode to %d)\n", n_pre, n_pre + n_dec);
        gpu_ops(gpu, n_pre, n_dec);
#endif
        printf("3. free-running\n");
        compare_sched(gpu, 0, cpu16, 0, n_pre, n_dec, "gpu vs cpu (fp16 head)");
        compare_sched(gpu, 0, cpu16, 2, n_pre, n_dec, "gpu vs cpu-double");
        greedy_tf(gpu, 0, cpu16, 0, n_prompt, n_greedy, "gpu vs cpu (fp16 head)");
        LOAD(cpu8, BITNET_BACKEND_CPU, 0);
        LOAD(gpu8, BITNET_BACKEND_CUDA, 0);
        if (cpu8 && gpu8) greedy_tf(gpu8, 0, cpu8, 0, n_prompt, n_greedy, "gpu vs cpu (int8 head)");
        if (cpu8) greedy_tf(cpu16, 0, cpu8, 0, n_prompt, n_greedy, "cpu fp16 head vs cpu int8 head");
    }
    bitnet_model_free(gpu);
    bitnet_model_free(gpu8);
    bitnet_model_free(cpu8);
    bitnet_model_free(cpu16);
#if defined(BITNET__GPU_FORWARD)
    return op_fail; /* the op-by-op check decides; the free-running numbers are measurements */
#else
    return 0;
#endif
}
