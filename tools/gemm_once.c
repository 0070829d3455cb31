/* One ternary GEMM shape on the GPU, for profilers (tools/gpu_wgmma.sh ncu): uploads random
   N x K weights and M quantized tokens, then runs bitnet_gpu_ternary_matmul REPS times (default 5)
   and prints the mean wall time of the last REPS - 1 (host clock, launches back to back).
     build/gemm_once N K M [REPS [fp32|fp16|bf16]]   (the output type, fp32 by default;
                                                       BITNET_TGEMM_WG / BITNET_TGEMM_TN pick the kernel)
   GLU=1 or 2 (a bitnet_ffn_act): the N rows as gate || up halves (the same N/2 rows twice) with that
   epilogue, as the forward's gate||up matrix. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"

int main(int argc, char **argv) {
    size_t n = argc > 3 ? (size_t)atol(argv[1]) : 13824, k = argc > 3 ? (size_t)atol(argv[2]) : 2560;
    size_t m = argc > 3 ? (size_t)atol(argv[3]) : 512, i, wb = bitnet_i2s_bytes(n, k);
    int reps = argc > 4 ? atoi(argv[4]) : 5, r, glu = getenv("GLU") ? atoi(getenv("GLU")) : 0;
    const char *ot = argc > 5 ? argv[5] : "fp32";
    bitnet_precision prec = strcmp(ot, "bf16") == 0 ? BITNET_PRECISION_BF16 : strcmp(ot, "fp16") == 0 ? BITNET_PRECISION_FP16
                                                                                                   : BITNET_PRECISION_FP32;
    int8_t *codes = (int8_t *)malloc(n * k);
    uint8_t *i2s = (uint8_t *)malloc(wb);
    float *x = (float *)malloc(m * k * 4);
    bitnet_gpu *gpu;
    bitnet_gpu_ternary w;
    bitnet_gpu_act a;
    bitnet_gpu_i2s_part part[2];
    bitnet_devptr dx, out;
    double t0 = 0;
    uint32_t s = 1;
    if (!codes || !i2s || !x || reps < 2) return 1;
    for (i = 0; i < n * k; i++) s = s * 1664525u + 1013904223u, codes[i] = (int8_t)((s >> 24) % 3) - 1;
    for (i = 0; i < m * k; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    if (glu) n /= 2, wb = bitnet_i2s_bytes(n, k);
    part[0].data = i2s, part[0].bytes = wb, part[0].n = n, part[1] = part[0];
    if (bitnet_i2s_pack(codes, n, k, 0.5f, i2s, wb) != BITNET_OK || bitnet_gpu_open(0, &gpu) != BITNET_OK ||
        bitnet_gpu_ternary_upload(gpu, part, glu ? 2 : 1, k, glu, &w) != BITNET_OK || bitnet_gpu_act_alloc(gpu, m, k, &a) != BITNET_OK ||
        bitnet_gpu_alloc(gpu, m * k * 4, &dx) != BITNET_OK || bitnet_gpu_upload(gpu, dx, x, m * k * 4) != BITNET_OK ||
        bitnet_gpu_quantize_act(gpu, dx, m, k, 0, 0, &a) != BITNET_OK || bitnet_gpu_alloc(gpu, m * n * 4, &out) != BITNET_OK) {
        fprintf(stderr, "gemm_once: %s\n", bitnet_last_error());
        return 1;
    }
    for (r = 0; r < reps; r++) {
        if (r == 1) bitnet_gpu_sync(gpu), t0 = bitnet__now();
        if (bitnet_gpu_ternary_matmul(gpu, &w, &a, out, prec, 0) != BITNET_OK) {
            fprintf(stderr, "gemm_once: %s\n", bitnet_last_error());
            return 1;
        }
    }
    bitnet_gpu_sync(gpu);
    printf("%zux%zu M=%zu %s out%s: %.2f us a call (host clock, %d calls back to back)\n", glu ? 2 * n : n, k, m, ot,
           glu == 2 ? ", silu glu" : glu ? ", relu2 glu" : "",
           (bitnet__now() - t0) * 1e6 / (reps - 1), reps - 1);
    bitnet_gpu_close(gpu);
    return 0;
}
