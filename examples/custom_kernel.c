/* custom_kernel: JIT-compile a CUDA kernel of your own with bitnet.h's runtime and launch it. */
#define BITNET_IMPLEMENTATION
#include "../bitnet.h"
#include <math.h>
#include <stdio.h>

static const char source[] = /* no #include: NVRTC needs no toolkit headers */
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

#define CHECK(call) do { if ((call) != BITNET_OK) { printf("%s failed: %s\n", #call, bitnet_last_error()); return 1; } } while (0)

int main(void) {
    enum { N = 100000 };
    static float x[N], y[N], out[N];
    float a = 2.5f;
    int n = N, i, bad = 0;
    char why[2048];
    bitnet_gpu *gpu;
    bitnet_gpu_module *mod;
    bitnet_gpu_kernel *saxpy;
    bitnet_devptr dx, dy;
    unsigned grid[3] = {(N + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
    void *args[4];
    if (bitnet_gpu_preflight(why, sizeof why) != BITNET_OK) return printf("no CUDA device: %s\n", why), 0;
    for (i = 0; i < N; i++) x[i] = (float)i / N, y[i] = 1.0f - (float)i / N;
    CHECK(bitnet_gpu_open(0, &gpu));
    CHECK(bitnet_gpu_module_load(gpu, source, "", &mod)); /* compiled once, then from the disk cache */
    CHECK(bitnet_gpu_kernel_get(mod, "saxpy", &saxpy));
    CHECK(bitnet_gpu_alloc(gpu, sizeof x, &dx));
    CHECK(bitnet_gpu_alloc(gpu, sizeof y, &dy));
    CHECK(bitnet_gpu_upload(gpu, dx, x, sizeof x));
    CHECK(bitnet_gpu_upload(gpu, dy, y, sizeof y));
    args[0] = &a, args[1] = &dx, args[2] = &dy, args[3] = &n;
    CHECK(bitnet_gpu_launch(gpu, saxpy, grid, block, 0, args));
    CHECK(bitnet_gpu_download(gpu, out, dy, sizeof out)); /* ordered after the launch */
    for (i = 0; i < N; i++) bad += fabsf(out[i] - (a * x[i] + y[i])) > 1e-6f * (1.0f + fabsf(a * x[i] + y[i]));
    printf("saxpy on %d values: %s\n", N, bad ? "WRONG" : "ok");
    bitnet_gpu_free(gpu, dx);
    bitnet_gpu_free(gpu, dy);
    bitnet_gpu_close(gpu);
    return bad != 0;
}
