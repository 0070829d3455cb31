
#include <cstdio>
#include <cstdlib>
__device__ __forceinline__ unsigned long long desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3ffff) >> 4) | 1ull << 16 | (unsigned long long)(1024 >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void wg_rs(int *d, const unsigned *a, unsigned long long db) {
    asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
__device__ __forceinline__ void wg_ss(int *d, unsigned long long da, unsigned long long db) {
    asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]) : "l"(da), "l"(db));
}
template <int MODE>
__global__ void __launch_bounds__(256, 1) k(long long *out, int *sink, int iters) {
    extern __shared__ __align__(1024) unsigned char sm[];
    for (int i = threadIdx.x; i < 40960 / 4; i += 256) ((unsigned *)sm)[i] = i * 2654435761u;
    unsigned sb = (unsigned)__cvta_generic_to_shared(sm);
    int d[64];
    for (int i = 0; i < 64; i++) d[i] = 0;
    unsigned af[4][4];
    for (int i = 0; i < 16; i++) af[i / 4][i % 4] = (threadIdx.x * 77 + i) & 0x03030303u;
    __syncthreads();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int wg = threadIdx.x >> 7;
    const unsigned bB = sb + 16384 * 0, bA = sb + 16384 + wg * 8192;
    long long t0 = clock64();
    for (int it = 0; it < iters; it++) {
        if (MODE == 0 || MODE == 2) {
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
            for (int i = 0; i < 16; i++) af[i / 4][i % 4] = ((af[i / 4][i % 4] >> 2) ^ (unsigned)it) & 0x03030303u;
        }
        if (MODE == 2) __syncthreads();
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        for (int kk = 0; kk < 4; kk++) {
            if (MODE == 3) wg_ss(d, desc(bA + kk * 32), desc(bB + kk * 32));
            else wg_rs(d, af[kk], desc(bB + kk * 32));
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if ((MODE == 1 || MODE == 3) && (it & 3) == 3) asm volatile("wgmma.wait_group.sync.aligned 2;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    long long t1 = clock64();
    int s = 0;
    for (int i = 0; i < 64; i++) s += d[i];
    atomicAdd(sink, s);
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
}

__device__ __forceinline__ void cp16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(src) : "memory");
}
template <int N> __device__ __forceinline__ void cpwait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
__device__ __forceinline__ void cpcommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void mb_init(unsigned a, int n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void mb_expect(unsigned a, int tx) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(a), "r"(tx) : "memory"); }
__device__ __forceinline__ void bulk(unsigned dst, const void *src, int bytes, unsigned mb) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" :: "r"(dst), "l"(src), "r"(bytes), "r"(mb) : "memory");
}
__device__ __forceinline__ void mb_wait(unsigned a, int parity) {
    asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" :: "r"(a), "r"(parity) : "memory");
}
/* The tgemm90 main loop: RT rows (RT / 64 warpgroups), 128 tokens, K = 54 stages of 128, a ring of S = 5,
   loads D = 3 stages ahead. BULK: two bulk copies a stage (thread 0) and an mbarrier a slot, else cp.async as the kernel.
   NOMMA: no wgmma. */
template <int RT, int BULK, int NOMMA>
__global__ void __launch_bounds__(RT * 2, RT == 128 ? 2 : 1) kr(long long *out, int *sink, const unsigned char *X, const unsigned char *W, int tiles) {
    constexpr int NT = RT * 2, S = 5, D = 3, NS = 54, STG = 16384 + RT * 32;
    extern __shared__ __align__(1024) unsigned char sm[];
    __shared__ __align__(8) unsigned long long mbar[S];
    const int tid = threadIdx.x, lane = tid & 31, t = lane & 3, g = lane >> 2, wi = (tid >> 5) & 3, wg = tid >> 7;
    const unsigned s0 = (unsigned)__cvta_generic_to_shared(sm), mb0 = (unsigned)__cvta_generic_to_shared(mbar);
    if (BULK && tid == 0) { for (int i = 0; i < S; i++) mb_init(mb0 + 8 * i, 1); asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
    __syncthreads();
    const int ra = 64 * wg + 16 * wi + g, rb = 8;
    int d[64];
    for (int i = 0; i < 64; i++) d[i] = 0;
    long long t0 = clock64();
    unsigned ph = 0;
    for (int tile = 0; tile < tiles; tile++) {
        const unsigned char *Xt = X + (size_t)(blockIdx.x % 4) * 128 * 6912, *Wt = W + (size_t)(blockIdx.x % 20) * RT * 32 * NS;
        auto load = [&](int s) {
            if (s < NS) {
                const int slot = s % S;
                const unsigned sb = s0 + slot * STG;
                if (BULK) {
                    if (tid == 0) {
                        mb_expect(mb0 + 8 * slot, 16384 + RT * 32);
                        bulk(sb, Xt + (size_t)s * 16384 % (128 * 6912), 16384, mb0 + 8 * slot);
                        bulk(sb + 16384, Wt + (size_t)s * RT * 32, RT * 32, mb0 + 8 * slot);
                    }
                } else {
                    if (tid < RT * 2) cp16(sb + 16384 + tid * 16, Wt + (size_t)s * RT * 32 + tid * 16);
                    for (int u = 0; u < 2048 / NT * 0 + (1024 / NT); u++) {
                        const int i = tid + NT * u, tok = i >> 3, p = i & 7;
                        cp16(sb + tok * 128 + ((p ^ (tok & 7)) << 4), Xt + (size_t)tok * 6912 + s * 128 + p * 16);
                    }
                }
            }
            if (!BULK) cpcommit();
        };
        for (int s = 0; s < D; s++) load(s);
        for (int kt = 0; kt < NS; kt++) {
            const int slot = kt % S;
            if (BULK) { mb_wait(mb0 + 8 * slot, (ph >> slot) & 1); ph ^= 1u << slot; }
            else { cpwait<D - 1>(); asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
            __syncthreads();
            load(kt + D);
            const unsigned sb = s0 + slot * STG;
            const uint4 *wl = (const uint4 *)(sm + slot * STG + 16384);
            uint4 wv[4] = {wl[ra], wl[ra + rb], wl[RT + ra], wl[RT + ra + rb]};
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" : "+r"(wv[0].x), "+r"(wv[1].x), "+r"(wv[2].x), "+r"(wv[3].x) :: "memory");
            unsigned af[4][4];
            for (int c = 0; c < 2; c++) {
                const uint4 lo = wv[2 * c], hi = wv[2 * c + 1];
                af[2 * c][0] = (lo.x >> (2 * t)) & 0x03030303u; af[2 * c][1] = (hi.x >> (2 * t)) & 0x03030303u;
                af[2 * c][2] = (lo.y >> (2 * t)) & 0x03030303u; af[2 * c][3] = (hi.y >> (2 * t)) & 0x03030303u;
                af[2 * c + 1][0] = (lo.z >> (2 * t)) & 0x03030303u; af[2 * c + 1][1] = (hi.z >> (2 * t)) & 0x03030303u;
                af[2 * c + 1][2] = (lo.w >> (2 * t)) & 0x03030303u; af[2 * c + 1][3] = (hi.w >> (2 * t)) & 0x03030303u;
            }
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
            if (!NOMMA)
                for (int kk = 0; kk < 4; kk++) wg_rs(d, af[kk], desc(sb + kk * 32));
            else
                for (int kk = 0; kk < 4; kk++) d[kk] += af[kk][0] ^ af[kk][3];
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        cpwait<0>();
        __syncthreads();
    }
    long long t1 = clock64();
    int sacc = 0;
    for (int i = 0; i < 64; i++) sacc += d[i];
    atomicAdd(sink, sacc);
    if (threadIdx.x == 0) out[blockIdx.x] = t1 - t0;
}
template <int RT, int BULK, int NOMMA> void runr(int blocks, const char *name) {
    long long *o; int *sink; unsigned char *X, *W; const int tiles = 37;
    cudaMalloc(&o, blocks * 8); cudaMalloc(&sink, 4);
    cudaMalloc(&X, 4 * 128 * 6912 + 65536); cudaMalloc(&W, 20 * 256 * 32 * 54 + 65536);
    cudaMemset(X, 1, 4 * 128 * 6912); cudaMemset(W, 0x55, 20 * 256 * 32 * 54);
    const int smem = 5 * (16384 + RT * 32);
    cudaFuncSetAttribute(kr<RT, BULK, NOMMA>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    kr<RT, BULK, NOMMA><<<blocks, RT * 2, smem>>>(o, sink, X, W, 1);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    kr<RT, BULK, NOMMA><<<blocks, RT * 2, smem>>>(o, sink, X, W, tiles);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    double macs = (double)tiles * 54 * RT * 128 * 128 * blocks;
    printf("%-44s blocks %3d: %.3f ms, %.1f TOPS (%.0f%% of 1979), %.0f ns a stage a block\n", name, blocks, ms, 2 * macs / (ms * 1e9),
           100.0 * 2 * macs / (ms * 1e9) / 1979, ms * 1e6 / (tiles * 54));
    printf("  err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
template <int MODE> void run(int blocks, const char *name) {
    long long *o; int *sink; const int iters = 2000;
    cudaMalloc(&o, blocks * 8); cudaMalloc(&sink, 4);
    cudaFuncSetAttribute(k<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
    k<MODE><<<blocks, 256, 100 * 1024>>>(o, sink, 10);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaEventRecord(e0);
    k<MODE><<<blocks, 256, 100 * 1024>>>(o, sink, iters);
    cudaEventRecord(e1); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    long long *h = (long long *)malloc(blocks * 8); cudaMemcpy(h, o, blocks * 8, cudaMemcpyDeviceToHost);
    double cyc = 0; for (int i = 0; i < blocks; i++) cyc += h[i]; cyc /= blocks;
    double macs_block = (double)iters * 2 * 4 * 64 * 128 * 32;
    int per_sm = blocks / 132;
    printf("%-34s blocks %3d: %8.0f cycles a block, %6.0f MAC/clk/SM (%.0f%% of 4096), %.1f TOPS, %.3f ms, %.0f cycles a stage\n", name, blocks, cyc,
           macs_block * per_sm / cyc, 100.0 * macs_block * per_sm / cyc / 4096, 2 * macs_block * blocks / (ms * 1e9), ms, cyc / iters);
    printf("  err: %s\n", cudaGetErrorString(cudaGetLastError()));
}
int main() {
    for (int b = 132; b <= 264; b += 132) {
        run<1>(b, "RS, A constant, 3 groups in flight");
        run<2>(b, "RS, wait 0 + widen + barrier");
        runr<128, 0, 0>(b, "replica 128 rows, cp.async");
        runr<128, 0, 1>(b, "replica 128 rows, cp.async, no mma");
        runr<128, 1, 0>(b, "replica 128 rows, bulk copies");
        runr<128, 1, 1>(b, "replica 128 rows, bulk copies, no mma");
    }
    runr<256, 0, 0>(132, "replica 256 rows (4 wg), cp.async");
    runr<256, 1, 0>(132, "replica 256 rows (4 wg), bulk copies");
    runr<256, 1, 1>(132, "replica 256 rows (4 wg), bulk, no mma");
}
